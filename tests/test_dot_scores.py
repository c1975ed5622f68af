"""DotScores: metrics straight from user and item vectors, scored a tile of items at a time.

Every metric of the harness that takes scores is fed, on one side, ``DotScores(u, v, b)`` with
a memory budget that splits the catalog into several tiles and, on the other, the dense matrix
``u @ v.T + b`` computed in float64. The vectors are small multiples of 1/8, so every product
and sum is exact in float32 and float64 whatever the blocking: the two sides rank the same
numbers, with many exact ties and near-ties (1/64 apart). Values must agree to 1e-12 per user,
with every target form, every exclusion form, with and without a bias, both dtypes. A numpy
reference written from the formulas checks two metrics on their own.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import harness as H
import ignite_recsys as R
from ignite.exceptions import NotComputableError
from ignite_recsys.metrics._ranking import RankingMean
from ignite_recsys.metrics._users import UserMean

TOLERANCE = 1e-12
SINGLE = [v for v in H.VARIANTS.values() if not v.two_lists]
FAST = {"ndcg", "recall", "precision[normalization=min_k_items]", "map", "mrr", "fall_out", "bpref", "r_precision"}
FAST |= {"ranking_metrics[0]", "item_coverage[recbole]", "average_popularity", "serendipity", "miscalibration"}


@st.composite
def vector_data(draw):
    users = draw(st.integers(1, 6))
    items = draw(st.integers(1, 23))
    width = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    eighths = draw(st.booleans())  # near-ties (1/64 apart) or integers (many exact ties)
    scale = 8.0 if eighths else 1.0
    low, high = (-16, 17) if eighths else (-2, 3)
    u = rng.integers(low, high, size=(users, width)) / scale
    v = rng.integers(low, high, size=(items, width)) / scale
    bias = rng.integers(-2, 3, size=items) / scale if draw(st.booleans()) else None
    labels = np.where(rng.random((users, items)) < 0.4, rng.integers(1, 4, size=(users, items)), 0).astype(float)
    excluded = rng.random((users, items)) < draw(st.sampled_from([0.0, 0.2, 0.6, 1.0]))
    popularity = rng.integers(1, 9, size=items).astype(float)
    popularity[items // 2] = 0 if items > 1 else 1  # an item never seen in training
    tile = draw(st.integers(1, items))
    target = draw(st.sampled_from(H.TARGET_FORMS))
    exclude = draw(st.sampled_from(H.EXCLUDE_FORMS))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    return u, v, bias, labels, excluded, popularity, tile, target, exclude, dtype


def dense_scores(u, v, bias) -> np.ndarray:
    scores = u @ v.T
    return scores + bias if bias is not None else scores


def _data(u, v, bias, labels, excluded, popularity) -> H.Data:
    ranked = -np.ones((len(u), 1), dtype=np.int64)
    return H.Data(dense_scores(u, v, bias), labels, excluded, ranked, popularity)


def _outcome(metric, output):
    """(compute() or the exception type, per-user values or None, boundary tie shares or None)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        metric.update(output)
        try:
            result = metric.compute()
        except (NotComputableError, RuntimeError, ValueError) as error:
            result = type(error)
    per_user = metric.per_user() if _has_per_user(metric) else None
    shares = metric.boundary_tie_share() if isinstance(metric, RankingMean) and metric.top_k else None
    return result, per_user, shares


def _has_per_user(metric) -> bool:
    return isinstance(metric, UserMean) and metric.keeps_per_user


def _close(a, b) -> bool:
    if isinstance(a, type) or isinstance(b, type):
        return a is b
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and bool(torch.allclose(a, b, rtol=0, atol=TOLERANCE, equal_nan=True))
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=0, abs_tol=TOLERANCE) or (math.isnan(a) and math.isnan(b))


def check_equal_to_dense(variant, drawn, average=False):
    u, v, bias, labels, excluded, popularity, tile, target, exclude, dtype = drawn
    ties = "average" if average and variant.average_ties and variant.family.startswith("ranking") else "stable"
    if ties == "average" and variant.blocked:  # RankingMetrics without the choices that refuse it
        variant = variant.without_blocked()
    if exclude not in variant.axes["exclude"]:  # a metric that reads the history needs one
        exclude = variant.axes["exclude"][0]
    data = _data(u, v, bias, labels, excluded, popularity)
    case = H.Case(variant.name, ties=ties, per_user=variant.family != "catalog")
    y = H.target_form(labels, target)
    mask = H.exclude_form(excluded, exclude)
    rest = () if mask is None else (mask,)
    dense = torch.as_tensor(data.scores, dtype=torch.float64)
    ut, vt = torch.as_tensor(u, dtype=dtype), torch.as_tensor(v, dtype=dtype)
    bt = None if bias is None else torch.as_tensor(bias, dtype=dtype)
    budget = tile * len(u) * ut.element_size()
    vectors = R.DotScores(ut, vt, bt, memory_budget=budget)
    assert vectors.tile_items() == tile
    expected = _outcome(variant.build(case, data), (dense, y, *rest))
    got = _outcome(variant.build(case, data), (vectors, y, *rest))
    for name, a, b in zip(("compute", "per_user", "boundary ties"), got, expected):
        assert _close(a, b), (variant.name, name, a, b)


@pytest.mark.parametrize("variant", [v for v in SINGLE if v.name in FAST], ids=lambda v: v.name)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=vector_data(), average=st.booleans())
def test_equal_to_the_dense_path(variant, drawn, average):
    check_equal_to_dense(variant, drawn, average)


@pytest.mark.slow
@pytest.mark.parametrize("variant", SINGLE, ids=lambda v: v.name)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=vector_data(), average=st.booleans())
def test_every_metric_equal_to_the_dense_path(variant, drawn, average):
    check_equal_to_dense(variant, drawn, average)


# --- Against numpy references written from the formulas ---------------------------------------
def _ranking(scores: np.ndarray, excluded: np.ndarray) -> list:
    """Each user's candidates by score descending, then item index ascending."""
    return [
        [i for i in sorted(range(len(row)), key=lambda i: (-row[i], i)) if not ex[i]]
        for row, ex in zip(scores, excluded)
    ]


@settings(max_examples=40, deadline=None)
@given(drawn=vector_data())
def test_recall_and_mrr_against_numpy(drawn):
    u, v, bias, labels, excluded, _, tile, _, _, dtype = drawn
    scores = dense_scores(u, v, bias)
    ranks = _ranking(scores, excluded)
    ks = [1, 3, 10]
    relevant = labels >= 1
    recall, mrr, counted = np.zeros(len(ks)), np.zeros(len(ks)), 0
    for user, ranked in enumerate(ranks):
        total = relevant[user].sum()
        if total == 0:
            continue
        counted += 1
        for j, k in enumerate(ks):
            top = ranked[:k]
            recall[j] += relevant[user, top].sum() / total
            first = next((p for p, i in enumerate(top) if relevant[user, i]), None)
            mrr[j] += 0.0 if first is None else 1.0 / (first + 1)
    ut, vt = torch.as_tensor(u, dtype=dtype), torch.as_tensor(v, dtype=dtype)
    bt = None if bias is None else torch.as_tensor(bias, dtype=dtype)
    vectors = R.DotScores(ut, vt, bt, memory_budget=tile * len(u) * ut.element_size())
    output = (vectors, torch.as_tensor(labels), torch.as_tensor(excluded))
    for cls, reference in ((R.Recall, recall), (R.MRR, mrr)):
        metric = cls(ks)
        metric.update(output)
        if counted == 0:
            with pytest.raises(NotComputableError):
                metric.compute()
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                np.testing.assert_allclose(metric.compute(), reference / counted, rtol=0, atol=TOLERANCE)


def test_top_items_against_numpy_at_many_tiles():
    """ItemCoverage over a catalog of 1,000 items in tiles of 7: the set of recommended items."""
    rng = np.random.default_rng(5)
    u, v = rng.integers(-2, 3, size=(9, 3)).astype(float), rng.integers(-2, 3, size=(1000, 3)).astype(float)
    excluded = rng.random((9, 1000)) < 0.3
    ranks = _ranking(u @ v.T, excluded)
    k = 20
    expected = len({i for ranked in ranks for i in ranked[:k]}) / 1000
    metric = R.ItemCoverage([k])
    metric.update(
        (
            R.DotScores(torch.as_tensor(u), torch.as_tensor(v), memory_budget=7 * 9 * 8),
            torch.zeros(9, 1000),
            torch.as_tensor(excluded),
        )
    )
    assert metric.compute() == [pytest.approx(expected, abs=TOLERANCE)]


# --- Bad input --------------------------------------------------------------------------------
def _ok():
    return torch.ones(3, 4), torch.ones(10, 4)


@pytest.mark.parametrize(
    "make, error, words",
    [
        (lambda: R.DotScores(torch.ones(3, 4), torch.ones(10, 5)), ValueError, "width of user_vectors"),
        (lambda: R.DotScores(*_ok(), torch.ones(9)), ValueError, "item_bias must have shape"),
        (lambda: R.DotScores(*_ok(), torch.ones(10, 1)), ValueError, "item_bias must have shape"),
        (lambda: R.DotScores(*_ok(), torch.ones(10, dtype=torch.float64)), TypeError, "item_bias must have the dtype"),
        (lambda: R.DotScores(*_ok(), [0.0] * 10), TypeError, "item_bias must be a dense torch.Tensor"),
        (
            lambda: R.DotScores(torch.ones(3, 4, dtype=torch.int64), torch.ones(10, 4)),
            TypeError,
            "user_vectors must hold floating-point",
        ),
        (
            lambda: R.DotScores(torch.ones(3, 4), torch.ones(10, 4, dtype=torch.float64)),
            TypeError,
            "item_vectors must have the dtype",
        ),
        (lambda: R.DotScores(torch.ones(3), torch.ones(10, 4)), ValueError, "user_vectors must be 2-D"),
        (
            lambda: R.DotScores(np.ones((3, 4)), torch.ones(10, 4)),
            TypeError,
            "user_vectors must be a dense torch.Tensor",
        ),
        (lambda: R.DotScores(torch.ones(0, 4), torch.ones(10, 4)), ValueError, "at least one user"),
        (lambda: R.DotScores(torch.ones(3, 4), torch.ones(0, 4)), ValueError, "at least one item"),
        (lambda: R.DotScores(*_ok(), memory_budget=0), ValueError, "memory_budget"),
        (lambda: R.DotScores(*_ok(), memory_budget=2.5), ValueError, "memory_budget"),
    ],
)
def test_bad_vectors_are_refused_when_built(make, error, words):
    with pytest.raises(error, match=words):
        make()


def _fresh_state(metric) -> dict:
    return {key: getattr(metric, key).clone() for key in metric._state_dict_all_req_keys}


@pytest.mark.parametrize("where", ["user_vectors", "item_vectors", "item_bias"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_vectors_are_refused_in_update_with_the_state_unchanged(where, value):
    u, v, b = torch.ones(3, 4), torch.ones(10, 4), torch.zeros(10)
    target = {"user_vectors": u, "item_vectors": v, "item_bias": b}[where]
    target.view(-1)[5] = value
    metric = R.NDCG([5])
    metric.update((R.DotScores(torch.randn(3, 4), torch.randn(10, 4)), torch.ones(3, 10)))
    before = _fresh_state(metric)
    with pytest.raises(ValueError, match=f"DotScores\\) {where} holds NaN or an infinite value"):
        metric.update((R.DotScores(u, v, b), torch.ones(3, 10)))
    after = _fresh_state(metric)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_overflowing_products_are_refused():
    u = torch.full((1, 2), 1e30)
    v = torch.tensor([[1e30, 0.0], [1e30, -1e30], [0.0, 0.0]])  # inf, inf - inf = NaN, 0
    metric = R.Recall([2])
    with pytest.raises(ValueError, match="NaN score"):
        metric.update((R.DotScores(u, v), torch.ones(1, 3)))


@pytest.mark.parametrize(
    "y, exclude, words",
    [
        (torch.ones(3, 11), None, "y must have 10 columns"),
        (R.ItemIds(torch.tensor([[10], [0], [1]])), None, "y"),
        (torch.ones(3, 10), R.ItemIds(torch.tensor([[12], [0], [1]])), "exclude"),
        (torch.ones(3, 10), torch.zeros(3, 9, dtype=torch.bool), "exclude must have 10 columns"),
        (torch.ones(2, 10), None, "y must hold 3 users"),
    ],
)
def test_targets_and_exclusions_must_fit_the_item_table(y, exclude, words):
    metric = R.NDCG([5])
    before = _fresh_state(metric)
    output = (R.DotScores(*_ok()), y) if exclude is None else (R.DotScores(*_ok()), y, exclude)
    with pytest.raises(ValueError, match=words):
        metric.update(output)
    after = _fresh_state(metric)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_tile_comes_from_the_budget_not_the_catalog():
    users, items = torch.ones(1024, 2), torch.ones(1_000_000, 2)
    assert R.DotScores(users, items).tile_items() == 256 * 2**20 // (1024 * 4) == 65536
    assert R.DotScores(users, items, memory_budget=1024 * 4 * 1000).tile_items() == 1000
    assert R.DotScores(users, items[:10]).tile_items() == 10  # never more than the catalog
    assert R.DotScores(users, items, memory_budget=1).tile_items() == 1  # never less than one item


def test_update_runs_on_the_meta_device():
    """No host read and no value-dependent shape in the tiled ranking (see test_meta_device.py)."""
    meta = torch.device("meta")
    vectors = R.DotScores(
        torch.ones(4, 3, device=meta),
        torch.ones(50, 3, device=meta),
        torch.ones(50, device=meta),
        memory_budget=4 * 4 * 7,
    )
    exclusions = [
        None,
        torch.zeros(4, 50, dtype=torch.bool, device=meta),
        R.ItemIds(torch.zeros(4, 3, dtype=torch.int64, device=meta)),
    ]
    targets = [torch.ones(4, 50, device=meta), R.ItemIds(torch.zeros(4, 2, dtype=torch.int64, device=meta))]
    for y in targets:
        for exclude in exclusions:
            metrics = (
                R.RankingMetrics([1, 5], device=meta),
                R.RankingMetrics([1, 5], ties="average", device=meta),
                R.RPrecision(device=meta),
                R.RPrecision(ties="average", device=meta),
                R.ItemCoverage([5], num_items=50, device=meta),
                R.AveragePopularity([5], torch.ones(50), device=meta),
            )
            for metric in metrics:
                rest = () if exclude is None else (exclude,)
                metric.update((vectors, y, *rest))
                assert all(getattr(metric, k).device == meta for k in metric._state_dict_all_req_keys)


# --- The functional API -----------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(drawn=vector_data())
def test_functional_api_equals_the_dense_path(drawn):
    u, v, bias, labels, excluded, popularity, tile, target, exclude, dtype = drawn
    dense = torch.as_tensor(dense_scores(u, v, bias), dtype=torch.float64)
    ut, vt = torch.as_tensor(u, dtype=dtype), torch.as_tensor(v, dtype=dtype)
    bt = None if bias is None else torch.as_tensor(bias, dtype=dtype)
    vectors = R.DotScores(ut, vt, bt, memory_budget=tile * len(u) * ut.element_size())
    y, mask = H.target_form(labels, target), H.exclude_form(excluded, exclude)
    ks = [1, 3, 30]
    popularity = torch.as_tensor(popularity)
    calls = [
        lambda p: R.functional.ndcg(p, y, ks, mask),
        lambda p: R.functional.r_precision(p, y, exclude=mask),
        lambda p: R.functional.ranking_metrics(p, y, ks, ["recall", "mrr", "bpref", "fall_out"], mask),
        lambda p: R.functional.average_popularity(p, top_k=ks, item_popularity=popularity, exclude=mask),
    ]
    for call in calls:
        assert _close(call(vectors), call(dense))


@settings(max_examples=30, deadline=None)
@given(drawn=vector_data())
def test_paired_and_recall_at_fixed_precision_equal_the_dense_path(drawn):
    u, v, bias, labels, excluded, _, tile, target, exclude, dtype = drawn
    dense = torch.as_tensor(dense_scores(u, v, bias), dtype=torch.float64)
    ut, vt = torch.as_tensor(u, dtype=dtype), torch.as_tensor(v, dtype=dtype)
    bt = None if bias is None else torch.as_tensor(bias, dtype=dtype)
    vectors = R.DotScores(ut, vt, bt, memory_budget=tile * len(u) * ut.element_size())
    y, mask = H.target_form(labels, target), H.exclude_form(excluded, exclude)
    rest = () if mask is None else (mask,)
    shifted = dense + torch.arange(dense.shape[1], dtype=torch.float64) / 128  # model b: another ranking
    outcomes = []
    for prediction in (vectors, dense):
        paired = R.Paired(R.NDCG([1, 5], ignore_zero_hits=False))
        fixed = R.RecallAtFixedPrecision(7, min_precision=0.2, ignore_zero_hits=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            paired.update((prediction, shifted, y, *rest))
            fixed.update((prediction, y, *rest))
            means = [r.mean_a for r in paired.compute()] if len(u) > 1 else None  # a test needs two users
            outcomes.append((means, fixed.compute()))
    assert _close(outcomes[0], outcomes[1])


ACCELERATOR_VARIANTS = ["ndcg", "bpref", "fall_out", "r_precision", "ranking_metrics[0]", "average_popularity"]


@pytest.mark.parametrize("name", ACCELERATOR_VARIANTS)
@settings(max_examples=20, deadline=None)
@given(drawn=vector_data(), average=st.booleans())
def test_accelerator_code_path_equals_the_dense_path(name, drawn, average):
    """The variants taken on accelerators (no host read: RPrecision ranked to the targets' width,
    or the catalog for dense labels), forced on CPU."""
    from unittest import mock

    from ignite_recsys._core import tuning

    with mock.patch.object(tuning, "cpu_tuned", lambda device: False):
        check_equal_to_dense(H.VARIANTS[name], drawn, average)


@pytest.mark.parametrize("target", ["ids", "coo", "dense"])
@pytest.mark.parametrize("exclude", ["none", "ids", "dense"])
def test_average_ties_across_tiles(target, exclude):
    """ties="average" reads the tied group at the cut-off over the whole catalog (a second pass
    over the tiles): vectors in {-1, 0, 1} tie most items, the group spans several tiles."""
    variants = [H.VARIANTS[name] for name in ("ndcg", "map", "ranking_metrics[0]", "err")]
    for seed in range(12):
        rng = np.random.default_rng(seed)
        users, items = 5, 30
        u, v = rng.integers(-1, 2, size=(users, 2)).astype(float), rng.integers(-1, 2, size=(items, 2)).astype(float)
        labels = np.where(rng.random((users, items)) < 0.3, rng.integers(1, 4, size=(users, items)), 0).astype(float)
        excluded = rng.random((users, items)) < 0.2
        popularity = np.ones(items)
        drawn = (u, v, None, labels, excluded, popularity, 4, target, exclude, torch.float64)
        for variant in variants:
            check_equal_to_dense(variant, drawn, average=True)


@pytest.mark.parametrize("exclude", ["ids", "csr"])
def test_listed_exclusion_in_long_tiles_equals_the_dense_path(exclude):
    """Tiles long enough for the listed selection (the exclusion as sorted rows, no mask), with
    excluded items and ties spread over every tile."""
    from unittest import mock

    from ignite_recsys._core import vectors as V

    rng = np.random.default_rng(3)
    users, items = 6, 6000
    u = rng.integers(-4, 5, size=(users, 3)).astype(np.float32)
    v = rng.integers(-4, 5, size=(items, 3)).astype(np.float32)
    labels = (rng.random((users, items)) < 0.01).astype(float)
    excluded = rng.random((users, items)) < 0.005
    y, mask = H.target_form(labels, "ids"), H.exclude_form(excluded, exclude)
    dense = torch.as_tensor(u.astype(float) @ v.T.astype(float))
    vectors = R.DotScores(torch.as_tensor(u), torch.as_tensor(v), memory_budget=users * 4 * 2500)
    spy = mock.patch.object(V, "stable_topk_excluding_listed", wraps=V.stable_topk_excluding_listed)
    results = []
    for prediction in (vectors, dense):
        metric = R.RankingMetrics([1, 10, 100], metrics=["ndcg", "recall", "map", "fall_out"], per_user=True)
        with warnings.catch_warnings(), spy as listed:
            warnings.simplefilter("ignore")
            metric.update((prediction, y, mask))
        results.append(metric.per_user())
        if prediction is vectors:
            assert listed.call_count >= 2  # at least the tiles of 2500 items
    assert _close(results[0], results[1])
    # the ranked order itself, against a stable descending sort of the candidates
    from ignite_recsys._core.adapters import parse_ranking_input
    from ignite_recsys._core.ranking import ranked_candidates

    order = ranked_candidates(parse_ranking_input((vectors, y, mask)), 100)[0]
    expected = [ranked[:100] for ranked in _ranking(u.astype(float) @ v.T.astype(float), excluded)]
    assert order.tolist() == expected


def test_a_non_finite_entry_past_the_first_block_of_the_check_is_refused():
    """The finite check reads the item table a block of rows at a time: the last row counts too."""
    items = torch.zeros(70_000, 64)  # 4.5M entries: two blocks of the check
    items[-1, -1] = float("inf")
    metric = R.HitRate([5])
    with pytest.raises(ValueError, match="item_vectors holds NaN or an infinite value"):
        metric.update((R.DotScores(torch.ones(2, 64), items), R.ItemIds(torch.tensor([[0], [1]]))))
