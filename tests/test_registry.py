"""The registry of the ranking metrics agrees with the classes, RankingMetrics and functional."""

import inspect

import numpy as np
import pytest

import ignite_recsys as R
from ignite_recsys import functional as F
from ignite_recsys._registry import ALL_METRICS, CUTOFF_METRICS, REGISTRY
from ignite_recsys.metrics import ranking_metrics

from conftest import CUTOFF_CLASSES, random_batch, run_metric

NORMALIZED = [name for name, entry in REGISTRY.items() if entry.normalization is not None]


def test_names_and_public_constants():
    # the public names and their order, as documented
    assert ranking_metrics.CUTOFF_METRICS == ("ndcg", "hit_rate", "recall", "precision", "map", "mrr", "f1")
    assert ranking_metrics.ALL_METRICS == ranking_metrics.CUTOFF_METRICS + ("r_precision",)
    assert (CUTOFF_METRICS, ALL_METRICS) == (ranking_metrics.CUTOFF_METRICS, ranking_metrics.ALL_METRICS)
    assert F.MAP_NORMALIZATIONS == ("min_k_relevant", "relevant", "hits")
    assert F.RECALL_NORMALIZATIONS == ("relevant", "min_k_relevant")
    assert F.PRECISION_NORMALIZATIONS == ("k", "min_k_items")
    assert list(CUTOFF_CLASSES) == list(CUTOFF_METRICS)


def test_every_metric_has_an_entry_a_class_and_a_formula():
    keys = R.RankingMetrics(1, metrics=list(ALL_METRICS))._names
    assert [key.split("@")[0] for key in keys] == list(REGISTRY)
    for name, entry in REGISTRY.items():
        assert entry.name == name
        assert entry.cls is getattr(R, entry.class_name)
        assert entry.description and "\n" not in entry.description
        if entry.has_cutoff:
            assert issubclass(entry.cls, R.metrics.ranking.CutoffMetric)
            assert callable(entry.formula) and entry.formula.__module__ == "ignite_recsys.functional"
        else:
            assert entry.formula is None and not issubclass(entry.cls, R.metrics.ranking.CutoffMetric)


@pytest.mark.parametrize("name", NORMALIZED)
def test_normalization_choices_and_defaults(name):
    option = REGISTRY[name].normalization
    assert option.default in option.values and len(set(option.values)) == len(option.values)
    assert all(choice.reproduces for choice in option.choices)
    cls = REGISTRY[name].cls
    for value in option.values:
        assert cls(1, normalization=value).normalization == value
    assert cls(1).normalization == option.default
    # RankingMetrics' argument for this metric: same default, same choices
    parameter = inspect.signature(R.RankingMetrics).parameters[option.argument]
    assert parameter.default == option.default == cls(1).normalization
    assert getattr(R.RankingMetrics(1), option.argument) == option.default
    for value in option.values:
        assert getattr(R.RankingMetrics(1, **{option.argument: value}), option.argument) == value
    with pytest.raises(ValueError, match=option.argument):
        R.RankingMetrics(1, **{option.argument: "no such choice"})
    with pytest.raises(ValueError, match="normalization"):
        cls(1, normalization="no such choice")


def test_every_normalization_argument_is_in_the_registry():
    arguments = {name for name in inspect.signature(R.RankingMetrics).parameters if name.endswith("_normalization")}
    assert arguments == {REGISTRY[name].normalization.argument for name in NORMALIZED}


# what each metric needs from the ranking step: the ideal gains, and |R| (per normalization)
NEEDS_IDEAL = {"ndcg"}
COUNTS_RELEVANT = {("recall", "relevant"), ("recall", "min_k_relevant"), ("map", "min_k_relevant"),
                   ("map", "relevant"), ("f1", None)}


@pytest.mark.parametrize("name", list(CUTOFF_METRICS))
def test_ranking_step_needs_match_the_classes(name):
    entry = REGISTRY[name]
    values = entry.normalization.values if entry.normalization else (None,)
    for value in values:
        single = entry.cls(1) if value is None else entry.cls(1, normalization=value)
        kwargs = {} if value is None else {entry.normalization.argument: value}
        combined = R.RankingMetrics(1, metrics=[name], **kwargs)
        counts = (name, value) in COUNTS_RELEVANT
        assert single._counts_relevant == combined._counts_relevant == entry.needs_relevant_count(value) == counts
        assert (single._gain_function is not None) == combined._needs_ideal == entry.needs_ideal == (name in NEEDS_IDEAL)
        if value is not None and not entry.normalization.choice(value).average_ties:
            with pytest.raises(ValueError, match="ties='average'"):
                entry.cls(1, normalization=value, ties="average")
            with pytest.raises(ValueError, match="ties='average'"):
                R.RankingMetrics(1, metrics=[name], ties="average", **kwargs)
        else:
            entry.cls(1, ties="average", **({} if value is None else {"normalization": value}))
            R.RankingMetrics(1, metrics=[name], ties="average", **kwargs)


@pytest.mark.parametrize("name", list(CUTOFF_METRICS))
def test_combined_values_equal_the_class(rng, name):
    entry = REGISTRY[name]
    batch = random_batch(rng, 12, 9, graded=True, zero_users=2)
    for value in entry.normalization.values if entry.normalization else (None,):
        single = entry.cls([1, 4, 12]) if value is None else entry.cls([1, 4, 12], normalization=value)
        kwargs = {} if value is None else {entry.normalization.argument: value}
        combined = R.RankingMetrics([1, 4, 12], metrics=[name], relevance_threshold=single.relevance_threshold, **kwargs)
        got = run_metric(combined, [batch])
        np.testing.assert_array_equal([got[f"{name}@{k}"] for k in (1, 4, 12)], run_metric(single, [batch]))
