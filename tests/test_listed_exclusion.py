"""Exclusions given as lists (sparse COO/CSR, ``ItemIds``) with dense scores, ranked without a
dense mask: the exclusions entering the stages of the group pre-filter where the groups of the
E listed items fit the row (E x 64 <= N), else the plain selection of k + E items, the excluded
ones dropped.

Selection against the numpy reference of ``test_selection_excluding.py`` (the candidates of each
row by score descending then index, -1 past them); metrics against
``references.candidate_metric_means`` at catalogs large enough for this path to be taken (checked
with a spy); heavy ties, -inf scores, users with fewer candidates than k, users whose excluded
items are all among their best scores, duplicate exclusion entries, excluded items that are also
relevant, NaN scores on excluded items."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ignite_recsys as R
import references as ref
from conftest import run_metric
from test_selection_excluding import PATTERNS, _case, reference

import ignite_recsys._core.ranking as ranking
from ignite_recsys._core import tuning
from ignite_recsys._core.item_sets import sorted_rows
from ignite_recsys._core.selection import stable_topk_excluding_listed


def _rows_of(excluded: np.ndarray, rng, duplicates: bool = False) -> torch.Tensor:
    """Padded id rows (-1 = none) of a bool mask, in random order, optionally each id twice."""
    lists = [rng.permutation(np.flatnonzero(row)) for row in excluded]
    if duplicates:
        lists = [np.concatenate([ids, ids[: len(ids) // 2]]) for ids in lists]
    width = max(1, max(len(ids) for ids in lists) + 1)
    out = -np.ones((len(lists), width), dtype=np.int64)
    for u, ids in enumerate(lists):
        out[u, : len(ids)] = ids
    return torch.from_numpy(out)


def _select(scores: np.ndarray, excluded: np.ndarray, k: int, rng, dtype=torch.float32, duplicates=False):
    rows = sorted_rows(_rows_of(excluded, rng, duplicates))
    return stable_topk_excluding_listed(torch.from_numpy(scores).to(dtype), k, rows, detect_nan=True)


@pytest.mark.parametrize("k", [1, 7, 100])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_selection_equals_reference(rng, k, dtype):
    for width in sorted(w for w in {k, k + 3, 64, 130, 20 * k + 1, 200 * k + 37} if w >= k):
        for name in PATTERNS:
            x, ex = _case(rng, name, 5, width)
            for duplicates in (False, True):
                got, has_nan = _select(x, ex, k, rng, dtype, duplicates)
                np.testing.assert_array_equal(got.numpy(), reference(x, ex, k), err_msg=f"{name} {width}")
                assert not has_nan.any()


def _bounded_case(rng, name, rows, width, budget):
    """(scores, excluded) with at most ``budget`` excluded items per row, for the path that lets
    the exclusions into the group stages (it needs E x 64 <= N)."""
    x = np.round(rng.random((rows, width)) * 40)
    order = np.argsort(-x, axis=1, kind="stable")
    ex = np.zeros((rows, width), dtype=bool)
    for row in range(rows):
        ex[row, rng.choice(width, size=budget, replace=False)] = True
    if name == "few_levels":
        x = np.round(x / 20)
    elif name == "excluded_best":  # the best items excluded: the plain group maxima mislead
        ex[:] = False
        for row in range(rows):
            ex[row, order[row, :budget]] = True
    elif name == "whole_sub_groups":  # all-excluded sub-groups and a whole group beside -inf candidates
        x[:, ::3] = -np.inf
        ex[:] = False
        ex[:, 64:128] = True
        ex[:, 200:208] = True
        ex[:, 216:224] = True
        x[:, 64:128] = 1_000.0  # the best scores, all excluded
        x[:, 200:224] = 999.0
    elif name == "neg_inf_candidates":
        x[:, ::2] = -np.inf
    elif name == "tail_excluded":  # items after the last full group, excluded and not
        tail = width - width % 64
        x[:, tail:] = 500.0
        ex[:, tail::2] = True
    elif name == "signed_zeros":
        x = np.where(rng.random((rows, width)) < 0.5, -0.0, 0.0)
        ex[:] = False
        ex[:, : budget // 2] = True
    elif name == "group_edges":
        x = np.zeros((rows, width))
        x[:, 63::64] = 1.0
        x[:, 64::64] = 1.0
        ex[:] = False
        ex[:, 63 : 64 * budget : 64] = True
    return x, ex


BOUNDED_PATTERNS = [
    "random",
    "few_levels",
    "excluded_best",
    "whole_sub_groups",
    "neg_inf_candidates",
    "tail_excluded",
    "signed_zeros",
    "group_edges",
]


@pytest.mark.parametrize("k", [1, 7, 30])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_exclusions_in_the_group_stages_equal_reference(rng, monkeypatch, k, dtype):
    """Rows long enough for the groups of the listed items: the exclusions enter the stages of the group
    pre-filter (taken: checked with a spy, however few the exclusions), with duplicate entries and
    padding."""
    from ignite_recsys._core.selection import excluding

    monkeypatch.setattr(tuning, "EXCLUDED_IN_GROUPS_PER_K", 0)
    taken = []
    inner = excluding._listed_in_groups
    monkeypatch.setattr(excluding, "_listed_in_groups", lambda *a: taken.append(1) or inner(*a))
    for width in (64 * (k + 200) + 37, 64 * (k + 200)):
        budget = 90  # at most 1.5 * 90 + 1 entries per row with duplicates and padding
        for name in BOUNDED_PATTERNS:
            x, ex = _bounded_case(rng, name, 4, width, budget)
            for duplicates in (False, True):
                taken.clear()
                got, has_nan = _select(x, ex, k, rng, dtype, duplicates)
                assert taken, f"{name}: the group stages were not taken"
                np.testing.assert_array_equal(got.numpy(), reference(x, ex, k), err_msg=f"{name} {width}")
                assert not has_nan.any()


@pytest.mark.parametrize(
    "k, budget, in_groups",
    [
        (30, 59, False),  # E = 60 (padded) <= 2 k: the plain selection of k + E
        (30, 120, True),  # E = 121 > 2 k on rows shorter than 300 (k + E)
        (7, 28, False),  # E = 29 > 2 k, but rows of 300 (k + E) items or more: strided, plain
    ],
)
def test_few_listed_exclusions_take_the_plain_selection(rng, monkeypatch, k, budget, in_groups):
    """Few listed items per row (``EXCLUDED_IN_GROUPS_PER_K``), or rows long enough for the
    strided selection of k + E items (``STRIDED_ROWS_PER_K``): the plain selection of k + E items
    (the group stages not taken); else the group stages. Both equal the reference."""
    from ignite_recsys._core.selection import excluding

    monkeypatch.setattr(tuning, "EXCLUDED_IN_GROUPS_PER_K", 2)
    monkeypatch.setattr(tuning, "STRIDED_ROWS_PER_K", 300)
    taken = []
    inner = excluding._listed_in_groups
    monkeypatch.setattr(excluding, "_listed_in_groups", lambda *a: taken.append(1) or inner(*a))
    width = 64 * (k + 200)
    for name in ("random", "excluded_best"):
        x, ex = _bounded_case(rng, name, 4, width, budget)
        taken.clear()
        got, has_nan = _select(x, ex, k, rng)  # rows padded by one: E = budget + 1
        assert bool(taken) == in_groups, name
        np.testing.assert_array_equal(got.numpy(), reference(x, ex, k), err_msg=name)
        assert not has_nan.any()


@pytest.mark.parametrize("score", [float("-inf"), 0.0])
def test_groups_and_sub_groups_of_excluded_items_rank_last(rng, monkeypatch, score):
    """Equal scores everywhere (ties broken by index): a group and sub-groups whose items are all
    excluded come first by index, and must still rank below the groups and sub-groups that hold
    one candidate each; otherwise a candidate of the first k is lost."""
    from ignite_recsys._core.selection import excluding

    taken = []
    inner = excluding._listed_in_groups
    monkeypatch.setattr(excluding, "_listed_in_groups", lambda *a: taken.append(1) or inner(*a))
    width, k = 40_000, 7
    x = np.full((2, width), score)
    ex = np.zeros((2, width), dtype=bool)
    ex[:, :64] = True  # a whole group
    ex[:, 64 : 64 * (k + 1)] = True
    ex[:, 64 + 63 : 64 * (k + 1) : 64] = False  # one candidate per group, in its last sub-group
    ex[1, 64 * (k + 1) :: 2] = True  # and every other item of the rest of row 1 (few enough)
    ex[1, 64 * (k + 1) + 200 :] = False
    got, _ = _select(x, ex, k, rng)
    assert taken
    np.testing.assert_array_equal(got.numpy(), reference(x, ex, k))


def test_excluded_best_items_and_fewer_candidates_than_k(rng):
    width, k = 5_000, 50
    x = np.round(rng.random((4, width)) * 10)  # heavy ties
    ex = np.zeros((4, width), dtype=bool)
    best = np.argsort(-x, axis=1, kind="stable")
    ex[0, best[0, :300]] = True  # every excluded item is among the best
    ex[1, :] = True
    ex[1, [3, 4000, 4999]] = False  # three candidates only
    x[2, :] = -np.inf
    ex[2, ::2] = True  # -inf candidates beside excluded -inf items
    ex[3, best[3, :k]] = True
    x[3, best[3, k : 2 * k]] = -np.inf
    got, _ = _select(x, ex, k, rng)
    np.testing.assert_array_equal(got.numpy(), reference(x, ex, k))


@pytest.mark.parametrize("cpu_tuned", [True, False])
def test_nan_scores(rng, monkeypatch, cpu_tuned):
    """A NaN on an excluded item is never read: the ranking is exact and nothing is flagged; a
    NaN on a candidate is flagged. Without the CPU tuning (accelerators) the same results."""
    monkeypatch.setattr(tuning, "cpu_tuned", lambda device: cpu_tuned)
    width, k = 4_000, 20
    x = rng.random((4, width)).astype(np.float32)
    ex = np.zeros((4, width), dtype=bool)
    x[0, [5, 700, 3999]] = [np.nan, -np.nan, np.nan]
    ex[0, [5, 700, 3999]] = True  # excluded NaNs of both signs
    ex[0, 800:820] = True
    x[1, 17] = np.nan  # a candidate
    x[2, 3] = np.nan
    ex[2, 3] = True
    x[2, 9] = np.nan  # one excluded NaN, one candidate NaN
    ex[3, :40] = True
    got, has_nan = _select(x, ex, k, rng)
    assert has_nan.tolist() == [False, True, True, False]
    for row in (0, 3):
        np.testing.assert_array_equal(got[row].numpy(), reference(x[row : row + 1], ex[row : row + 1], k)[0])


def test_bad_arguments():
    scores = torch.rand(2, 10)
    with pytest.raises(ValueError, match="k must be"):
        stable_topk_excluding_listed(scores, 11, torch.zeros(2, 1, dtype=torch.int64))
    with pytest.raises(TypeError, match="excluded_rows"):
        stable_topk_excluding_listed(scores, 2, torch.zeros(3, 1, dtype=torch.int64))


# --- metrics ----------------------------------------------------------------------------------

TOP_K = [1, 3, 10]
USERS, ITEMS = 6, 20_000


def _data(seed, few_candidates=False):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 200, size=(USERS, ITEMS)).astype(np.float32)  # heavy ties
    scores[0, ::5] = -np.inf
    labels = np.where(rng.random((USERS, ITEMS)) < 0.01, rng.integers(1, 4, size=(USERS, ITEMS)), 0).astype(np.float32)
    excluded = rng.random((USERS, ITEMS)) < 0.004
    best = np.argsort(-scores, axis=1, kind="stable")
    excluded[1, best[1, :30]] = True  # all of the user's best items excluded
    excluded[2, scores[2] == 199] = True  # the whole top level of tied scores
    if few_candidates:  # fewer candidates than k: the bound E is then too large for this path
        excluded[2, :] = True
        excluded[2, [10, ITEMS - 1]] = False
    excluded[3] = labels[3] > 0  # excluded items that are relevant
    labels[4, 0] = 2.0
    excluded[4, 0] = True
    return scores, labels, excluded


def _forms(excluded, rng, scores):
    """Sparse forms are built from entry lists (never from a dense mask of this size). Besides the
    plain ones: stored zeros at items that are not excluded, among them each user's three best
    candidates (a zero is no exclusion), and an uncoalesced COO tensor whose entries come in
    random order, each excluded item twice."""
    ids = _rows_of(excluded, rng, duplicates=True)  # duplicate entries are allowed in an exclusion
    users, items = np.nonzero(excluded)
    values = torch.ones(len(users), dtype=torch.bool)
    coo = torch.sparse_coo_tensor(torch.from_numpy(np.stack([users, items])), values, excluded.shape)
    stored_zero = ~excluded & (rng.random(excluded.shape) < 0.003)
    for user, row in enumerate(np.argsort(-scores, axis=1, kind="stable")):
        stored_zero[user, row[~excluded[user, row]][:3]] = True
    zero_users, zero_items = np.nonzero(stored_zero)
    with_zeros = torch.sparse_coo_tensor(
        torch.from_numpy(np.stack([np.concatenate([users, zero_users]), np.concatenate([items, zero_items])])),
        torch.cat([torch.full((len(users),), 2.5), torch.zeros(len(zero_users))]),
        excluded.shape,
    ).coalesce()
    order = rng.permutation(2 * len(users))
    twice = np.stack([np.concatenate([users, users]), np.concatenate([items, items])])[:, order]
    uncoalesced = torch.sparse_coo_tensor(torch.from_numpy(twice), torch.ones(2 * len(users)), excluded.shape)
    return {
        "ids": R.ItemIds(ids),
        "coo": coo,
        "csr": coo.to_sparse_csr(),
        "coo_zeros": with_zeros,
        "csr_zeros": with_zeros.to_sparse_csr(),
        "coo_uncoalesced": uncoalesced,
        "dense": torch.from_numpy(excluded),
    }  # a dense mask is listed on CPU where it holds few entries


@pytest.mark.parametrize("form", ["ids", "coo", "csr", "coo_zeros", "csr_zeros", "coo_uncoalesced", "dense"])
@pytest.mark.parametrize("target_form", ["dense", "csr"])
@pytest.mark.parametrize("few_candidates", [False, True])
def test_metrics_equal_reference(form, target_form, few_candidates, monkeypatch):
    rng = np.random.default_rng(3)
    scores, labels, excluded = _data(7, few_candidates)
    taken = []
    listed = ranking.stable_topk_excluding_listed
    monkeypatch.setattr(ranking, "stable_topk_excluding_listed", lambda *a, **kw: taken.append(1) or listed(*a, **kw))
    exclude = _forms(excluded, rng, scores)[form]
    y = torch.from_numpy(labels) if target_form == "dense" else torch.from_numpy(labels).to_sparse_csr()
    sets = [set(np.flatnonzero(row).tolist()) for row in excluded]
    rankings = ref.candidate_rankings(scores, sets)
    means = ref.candidate_metric_means(rankings, labels, TOP_K)
    metric = R.RankingMetrics(TOP_K, metrics=["ndcg", "hit_rate", "recall", "precision", "map", "mrr"])
    got = run_metric(metric, [(torch.from_numpy(scores), y, exclude)])
    assert bool(taken) != few_candidates, "the listed path was taken or not as expected"
    for name in ("ndcg", "hit_rate", "recall", "precision", "map", "mrr"):
        np.testing.assert_allclose([got[f"{name}@{k}"] for k in TOP_K], means[name], atol=1e-12, err_msg=name)
    precision = R.Precision(TOP_K, normalization="min_k_items")  # reads the number of candidates
    expected = ref.candidate_metric_means(rankings, labels, TOP_K, precision_norm="min_k_items")["precision"]
    np.testing.assert_allclose(run_metric(precision, [(torch.from_numpy(scores), y, exclude)]), expected, atol=1e-12)


def test_nan_on_an_excluded_item_is_not_an_error_and_on_a_candidate_is():
    scores, labels, excluded = _data(9)
    scores[5, 7] = np.nan
    excluded[5, 7] = True
    ids = _rows_of(excluded, np.random.default_rng(0))
    sets = [set(np.flatnonzero(row).tolist()) for row in excluded]
    means = ref.candidate_metric_means(ref.candidate_rankings(np.nan_to_num(scores, nan=0.0), sets), labels, TOP_K)
    got = run_metric(R.NDCG(TOP_K), [(torch.from_numpy(scores), torch.from_numpy(labels), R.ItemIds(ids))])
    np.testing.assert_allclose(got, means["ndcg"], atol=1e-12)
    scores[5, 8] = np.nan  # a candidate
    metric = R.NDCG(TOP_K)
    with pytest.raises(ValueError, match="NaN"):
        metric.update((torch.from_numpy(scores), torch.from_numpy(labels), R.ItemIds(ids)))


def test_explicit_zero_in_a_sparse_exclusion_excludes_nothing_with_ranked_ids():
    """A stored value of 0 in a sparse ``exclude`` is not an exclusion (nonzero = excluded), for
    ranked ids as for scores."""
    ranked = torch.tensor([[3, 1, 2], [0, 2, -1]])
    labels = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0]])
    indices = torch.tensor([[0, 1], [3, 2]])
    exclude = torch.sparse_coo_tensor(indices, torch.tensor([0.0, 1.0]), (2, 4))  # (0, 3) stored as 0
    got = run_metric(R.HitRate([1]), [(R.RankedItems(ranked), labels, exclude)])
    # user 0: item 3 (relevant) stays first (excluded, item 1 would come first: a miss); user 1: a miss
    assert got == [0.5]


def test_a_user_with_many_exclusions_takes_the_masked_kernel_and_equals_reference(monkeypatch):
    """One user of the batch excludes far more items than the others (a long history): the rows
    of the listed path would be as wide as that user's list for every user, so past the bound
    of the group stages (E x 64 <= N) the ranking step masks instead; the values stay those of
    the reference."""
    rng = np.random.default_rng(11)
    users, items, k = 5, 20_000, 10
    scores = rng.integers(0, 50, size=(users, items)).astype(np.float32)
    labels = (rng.random((users, items)) < 0.01).astype(np.float32)
    excluded = rng.random((users, items)) < 0.002
    excluded[0, rng.choice(items, size=items // 32, replace=False)] = True  # 625 x 64 > 20k
    excluded[0, np.argsort(-scores[0], kind="stable")[:40]] = True
    taken = []
    listed = ranking.stable_topk_excluding_listed
    monkeypatch.setattr(ranking, "stable_topk_excluding_listed", lambda *a, **kw: taken.append(1) or listed(*a, **kw))
    users_of, items_of = np.nonzero(excluded)
    csr = torch.sparse_coo_tensor(
        torch.from_numpy(np.stack([users_of, items_of])), torch.ones(len(users_of)), excluded.shape
    ).to_sparse_csr()
    sets = [set(np.flatnonzero(row).tolist()) for row in excluded]
    means = ref.candidate_metric_means(ref.candidate_rankings(scores, sets), labels, [1, 5, k])
    metric = R.RankingMetrics([1, 5, k], metrics=["ndcg", "recall", "map"])
    got = run_metric(metric, [(torch.from_numpy(scores), torch.from_numpy(labels), csr)])
    assert not taken
    for name in ("ndcg", "recall", "map"):
        np.testing.assert_allclose([got[f"{name}@{c}"] for c in (1, 5, k)], means[name], atol=1e-12, err_msg=name)


def test_coo_exclusion_flagged_coalesced_with_entries_out_of_user_order():
    """A COO tensor built with ``is_coalesced=True`` whose entries do not come user by user: each
    user's exclusions stay that user's."""
    items = 20_000
    scores = torch.zeros(2, items)
    scores[:, 0], scores[:, 2] = 2.0, 1.0
    labels = torch.zeros(2, items)
    labels[0, 0] = labels[1, 2] = 1.0
    # user 1 excludes item 0 (its best, not relevant), user 0 item 2; the entry of user 1 comes first
    exclude = torch.sparse_coo_tensor(torch.tensor([[1, 0], [0, 2]]), torch.ones(2), (2, items), is_coalesced=True)
    got = run_metric(R.HitRate([1]), [(scores, labels, exclude)])
    assert got == [1.0]


@pytest.mark.parametrize("form", ["dense", "csr", "ids"])
def test_excluded_best_items_leave_the_best_candidate_first(form, monkeypatch):
    """Each user's 50 best items excluded (and a few others), its best candidate the only relevant
    item: HitRate@1 is 1 and NDCG@10 is 1 exactly when every excluded item is left out, on the
    listed path (checked with a spy), whichever form the exclusion comes in."""
    rng = np.random.default_rng(5)
    users, items = 4, 20_000
    scores = rng.permutation(users * items).reshape(users, items).astype(np.float32)
    best = np.argsort(-scores, axis=1, kind="stable")
    excluded = rng.random((users, items)) < 0.001
    excluded[np.arange(users)[:, None], best[:, :50]] = True
    labels = np.zeros((users, items), dtype=np.float32)
    for u in range(users):
        labels[u, best[u][~excluded[u, best[u]]][0]] = 1.0
    taken = []
    listed = ranking.stable_topk_excluding_listed
    monkeypatch.setattr(ranking, "stable_topk_excluding_listed", lambda *a, **kw: taken.append(1) or listed(*a, **kw))
    exclude = _forms(excluded, rng, scores)[form]
    got = run_metric(
        R.RankingMetrics([1, 10], metrics=["hit_rate", "ndcg"]),
        [(torch.from_numpy(scores), torch.from_numpy(labels), exclude)],
    )
    assert taken
    assert got["hit_rate@1"] == 1.0 and got["ndcg@10"] == 1.0
