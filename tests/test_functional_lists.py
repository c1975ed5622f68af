"""``ignite_recsys.functional`` for the metrics of the top-k lists: one function per per-user class,
against the numpy references of ``references_families.py`` / ``references.py`` (every prediction
form, exclusions), equal to the class's ``per_user()``, and refusing bad input as the class does."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import references as ref
import references_families as fam
import torch
from harness import DATA, TAIL_RATIO, exclude_form, prediction_form, target_form
from test_beyond_families import (
    CATEGORIES,
    COUNTS,
    FEATURES,
    NUM_ITEMS,
    NUM_TRAIN_USERS,
    RANKED_B,
    SCORES_B,
    TOP_K,
    SPECS,
    _lists,
    assert_close,
    expected,
)

import ignite_recsys as R
from ignite_recsys import functional as F

POPULARITY = torch.tensor(COUNTS, dtype=torch.float64)
KS = sorted(TOP_K)

# spec of test_beyond_families -> (function, positional constructor arguments, keyword arguments)
CALLS = {
    "ild_cosine": (F.intra_list_diversity, (torch.tensor(FEATURES),), {}),
    "serendipity_threshold": (F.serendipity, (POPULARITY,), {"relevance_threshold": 2.0}),
    "epc_geometric_all_users": (
        F.epc,
        (POPULARITY, NUM_TRAIN_USERS),
        {"rank_weight": ("geometric", 0.8), "ignore_zero_hits": False},
    ),
    "efd": (F.efd, (POPULARITY,), {}),
    "miuf": (F.mean_inv_user_freq, (POPULARITY, NUM_TRAIN_USERS), {}),
    "miscalibration_ranked": (F.miscalibration, (CATEGORIES,), {"alpha": 0.2, "rank_weight": "log2"}),
    "aplt": (F.aplt, (POPULARITY,), {}),
    "aclt": (F.aclt, (POPULARITY,), {"pop_ratio": 0.5}),
    "mean_pop_rank": (F.mean_pop_rank, (POPULARITY,), {}),
    "rbo_webber": (F.rank_biased_overlap, (), {"patience": 0.6, "normalize": "webber", "num_items": NUM_ITEMS}),
    "intersection_ref_k": (F.intersection, (), {"ref_k": 3, "num_items": NUM_ITEMS}),
}


def _inputs(name, prediction, exclude):
    y_pred = prediction_form(DATA, prediction)
    y = target_form(DATA.labels, "dense")
    ex = exclude_form(DATA.excluded, exclude)
    if SPECS[name].two_models:
        other = (
            torch.tensor(SCORES_B, dtype=torch.float32)
            if prediction == "ranked"
            else R.RankedItems(torch.tensor(RANKED_B))
        )
        return (y_pred, other), {"y": y, "exclude": ex}
    return (y_pred, y), {"exclude": ex}


@pytest.mark.parametrize("exclude", ["none", "dense", "ids"])
@pytest.mark.parametrize("prediction", ["scores", "ranked"])
@pytest.mark.parametrize("name", sorted(CALLS))
def test_the_function_against_the_reference(name, prediction, exclude):
    if SPECS[name].needs_exclusion and exclude == "none":
        pytest.skip("the metric reads the history")
    function, arguments, options = CALLS[name]
    data, optional = _inputs(name, prediction, exclude)
    got = function(*data, TOP_K, *arguments, **optional, **options)
    rows, _ = expected(name, prediction, exclude)
    assert got.dtype == torch.float64 and got.shape == (DATA.users, len(KS))
    assert_close(got.numpy(), rows, context=f"functional {function.__name__}")


@pytest.mark.parametrize("name", sorted(CALLS))
def test_the_function_equals_the_class_per_user(name):
    function, arguments, options = CALLS[name]
    data, optional = _inputs(name, "scores", "dense")
    got = function(*data, TOP_K, *arguments, **optional, **options)
    metric_class = next(cls for cls in F.LIST_METRICS if F.function_name(cls) == function.__name__)
    metric = metric_class(TOP_K, *arguments, per_user=True, **options)
    metric.update((*data, *optional.values()))
    assert torch.equal(torch.isnan(got), torch.isnan(metric.per_user()))
    assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(metric.per_user()))


@pytest.mark.parametrize("prediction", ["scores", "ranked"])
def test_item_value_functions(prediction):
    """average_popularity, tail_percentage and novelty from the items' values (RecBole's formulas)."""
    lists = _lists(prediction, "none")
    y_pred, y = prediction_form(DATA, prediction), target_form(DATA.labels, "dense")
    tail = ref.recbole_tail_items(COUNTS.tolist(), TAIL_RATIO)
    rarest = COUNTS[COUNTS > 0].min()
    cases = [
        (F.average_popularity(y_pred, y, TOP_K, POPULARITY), lambda i: float(COUNTS[i])),
        (F.tail_percentage(y_pred, y, TOP_K, POPULARITY, tail_ratio=TAIL_RATIO), lambda i: float(i in tail)),
        (
            F.novelty(y_pred, y, TOP_K, POPULARITY),
            lambda i: -np.log2((COUNTS[i] if COUNTS[i] > 0 else rarest) / COUNTS.sum()),
        ),
    ]
    for got, value_of in cases:
        assert_close(got.numpy(), ref.list_value_rows(lists, value_of, TOP_K))


def test_two_lists_without_targets():
    """rank_biased_overlap takes y as optional, as the class's update does."""
    got = F.rank_biased_overlap(torch.tensor(DATA.scores), torch.tensor(SCORES_B), [3], num_items=NUM_ITEMS)
    a, b = _lists("scores", "none"), [r[0] for r in ref.candidate_rankings(SCORES_B)]
    want = np.array([[fam.rank_biased_overlap(x, y, 3)] for x, y in zip(a, b)])
    assert_close(got.numpy(), want)


def test_bad_input_is_refused_as_by_the_class():
    scores, labels = torch.tensor(DATA.scores), torch.tensor(DATA.labels)
    with pytest.raises(ValueError, match="item_popularity"):
        F.average_popularity(scores, labels, 2, torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="y_pred must have one column per"):
        F.average_popularity(scores, labels, 2, torch.ones(NUM_ITEMS + 1))
    with pytest.raises(ValueError, match="top_k"):
        F.mean_pop_rank(scores, labels, 0, POPULARITY)
    with pytest.raises(TypeError, match="unexpected keyword|got an unexpected"):
        F.aplt(scores, labels, 2, POPULARITY, no_such_option=1)
    with pytest.raises(ValueError, match="out of range|outside|catalog|num_items"):
        F.aplt(R.RankedItems(torch.tensor([[0, NUM_ITEMS + 3]])), labels[:1], 2, POPULARITY)


def test_every_per_user_class_has_a_function():
    """Each metric class with per-user values has its function: the registry name for a ranking
    metric, the snake_case class name otherwise; ``__all__`` holds only those functions."""
    # SampledMetrics is left out: its per-test-item values depend on the negatives it samples
    per_user_classes = [
        getattr(R, name)
        for family, names in R.metrics.FAMILIES.items()
        for name in names
        if "per_user" in inspect.signature(getattr(R, name)).parameters and family != "Sampled evaluation"
    ]
    registry_names = {entry.class_name: entry.name for entry in R._registry.REGISTRY.values()}
    for metric_class in per_user_classes:
        name = registry_names.get(metric_class.__name__, F.function_name(metric_class))
        if metric_class is R.RankingMetrics:
            name = "ranking_metrics"
        assert name in F.__all__, metric_class.__name__
    assert all(callable(getattr(F, name)) for name in F.__all__)
    assert len(F.__all__) == len(set(F.__all__)) == len(per_user_classes)
    assert F.function_name(R.MeanInvUserFreq) == "mean_inv_user_freq" and F.function_name(R.EPC) == "epc"
