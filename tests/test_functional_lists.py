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
    # (SampledMetrics' function draws the negatives its seed gives, as the class does)
    per_user_classes = [
        getattr(R, name)
        for names in R.metrics.FAMILIES.values()
        for name in names
        if "per_user" in inspect.signature(getattr(R, name)).parameters
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


# --- The registry of the list metrics ----------------------------------------------------------------
def test_every_list_metric_class_has_its_registry_entry():
    """The beyond-accuracy family is the registry's list entries: each class holds its entry, whose
    arguments are the class's signature, whose name is its function's, and per_user agrees."""
    from ignite_recsys._registry import LIST_ENTRIES, LIST_NEEDS, LIST_REGISTRY

    assert [entry.class_name for entry in LIST_ENTRIES] == list(R.metrics.FAMILIES["Beyond accuracy"])
    assert len(LIST_REGISTRY) == len(LIST_ENTRIES)
    for entry in LIST_ENTRIES:
        metric_class = getattr(R, entry.class_name)
        assert metric_class.entry is entry
        assert entry.name == F.function_name(metric_class)
        parameters = inspect.signature(metric_class).parameters
        assert list(parameters)[1 : len(entry.arguments) + 1] == [name for name, _ in entry.arguments]
        assert entry.per_user == ("per_user" in parameters), entry.name
        assert set(entry.needs) <= set(LIST_NEEDS), entry.name
        assert (metric_class in F.LIST_METRICS) == entry.per_user
        assert not entry.per_user or getattr(F, entry.name).__name__ == entry.name
        assert (f"``{entry.name}``" in F.__doc__) == entry.per_user, entry.name  # the module's list


def test_no_list_metric_subclasses_another_metric():
    """Each list metric class derives from its family base only: no metric class of the package
    (other than that base) in its MRO, at most 5 classes of the package in all once the shared bases
    are one."""
    from ignite_recsys._registry import LIST_ENTRIES

    metric_classes = {getattr(R, entry.class_name) for entry in LIST_ENTRIES}
    for entry in LIST_ENTRIES:
        metric_class = getattr(R, entry.class_name)
        assert len(metric_class.__bases__) == 1, entry.class_name
        assert not set(metric_class.__mro__[1:]) & metric_classes, entry.class_name
        family_base = metric_class.__bases__[0]
        assert family_base.__name__ in ("ListMean", "CatalogCounts", "_PopularityParity", "_TwoLists")


def test_every_per_user_list_metric_goes_through_the_harness():
    import harness

    from ignite_recsys._registry import LIST_ENTRIES

    covered = {v.metric for v in harness.VARIANTS.values() if v.family in ("list", "item_value")}
    assert covered == {entry.name for entry in LIST_ENTRIES if entry.per_user}


def test_the_harness_names_a_missing_list_reference():
    """A per-user list metric added to the registry without its reference: the harness says what
    to add instead of failing later with a KeyError."""
    import dataclasses

    import harness

    from ignite_recsys._registry import LIST_ENTRIES, LIST_REGISTRY

    new = dataclasses.replace(LIST_REGISTRY["aplt"], name="new_metric")
    with pytest.raises(LookupError, match="add a reference for 'new_metric'"):
        harness.list_variants(LIST_ENTRIES + (new,))
    assert [v.name for v in harness.list_variants()] == [v.name for v in harness.list_variants(LIST_ENTRIES)]


def test_the_beyond_accuracy_page_reads_the_generated_table():
    """docs/beyond_accuracy.md includes the table that docs/conf.py writes from the registry."""
    import pathlib

    docs = pathlib.Path(__file__).resolve().parent.parent / "docs"
    if not (docs / "conf.py").exists():
        pytest.skip("the docs' build configuration is not beside the tests (a wheel's check folder)")
    page = (docs / "beyond_accuracy.md").read_text()
    assert "```{include} api/list_metrics_table.inc" in page
    assert "| `IntraListDiversity` |" not in page  # no hand-kept rows
    assert "_write_list_registry_page" in (docs / "conf.py").read_text()
