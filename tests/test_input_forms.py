"""Every input form against the independent numpy reference that ranks only candidates.

Targets: dense, sparse COO, sparse CSR, ``ItemIds``. Predictions: dense scores, ``RankedItems``.
Exclusion: none, dense bool, sparse COO/CSR, ``ItemIds``. Each combination, for every ranking
metric, option and tie rule, must give the values of ``references.candidate_metric_means``; the
catalog and popularity metrics those of the reference lists of candidates.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

import ignite_recsys as R
import references as ref
from conftest import run_metric

TOP_K = [1, 2, 5, 12]
USERS, ITEMS = 7, 9


def _data(seed, ties):
    rng = np.random.default_rng(seed)
    if ties:
        scores = rng.integers(0, 4, size=(USERS, ITEMS)).astype(np.float32)
    else:
        scores = rng.permutation(USERS * ITEMS).reshape(USERS, ITEMS).astype(np.float32)
    scores[0, 3] = -np.inf  # a candidate scored -inf
    scores[1, :4] = -np.inf  # several (tie orders stay few enough to enumerate)
    labels = np.where(rng.random((USERS, ITEMS)) < 0.35, rng.integers(1, 4, size=(USERS, ITEMS)), 0).astype(np.float32)
    labels[2] = 0  # a user without a relevant item
    excluded = rng.random((USERS, ITEMS)) < 0.25
    excluded[3] = True  # a user without candidates
    excluded[4, :] = False
    excluded[0, 4] = True
    return scores, labels, excluded


def _target_forms(labels):
    dense = torch.from_numpy(labels)
    width = int((labels > 0).sum(1).max()) + 1
    ids = -np.ones((USERS, width), dtype=np.int64)
    grades = np.zeros((USERS, width), dtype=np.float32)
    for u in range(USERS):
        items = np.nonzero(labels[u])[0][::-1]
        ids[u, : len(items)] = items
        grades[u, : len(items)] = labels[u, items]
    return {
        "dense": dense,
        "coo": dense.to_sparse(),
        "csr": dense.to_sparse_csr(),
        "ids": R.ItemIds(torch.from_numpy(ids), torch.from_numpy(grades)),
    }


def _exclude_forms(excluded):
    if excluded is None:
        return {"none": None}
    mask = torch.from_numpy(excluded)
    width = int(excluded.sum(1).max()) + 2
    ids = -np.ones((USERS, width), dtype=np.int64)
    for u in range(USERS):
        items = np.nonzero(excluded[u])[0]
        ids[u, width - len(items):] = items  # padding first: any order is allowed
    return {
        "dense": mask,
        "coo": mask.to_sparse(),
        "csr": mask.to(torch.float32).to_sparse_csr(),
        "ids": R.ItemIds(torch.from_numpy(ids)),
    }


def _ranked_ids(scores, length):
    """Each user's top ``length`` items by score (stable), some users' lists cut shorter (-1)."""
    ids = -np.ones((USERS, length), dtype=np.int64)
    for u in range(USERS):
        ranking = ref.stable_ranking(scores[u])[: max(length - u % 3, 0)]
        ids[u, : len(ranking)] = ranking
    return ids


def _output(y_pred, y, exclude):
    return (y_pred, y) if exclude is None else (y_pred, y, exclude)


CUTOFF = {
    "ndcg": (lambda **kw: R.NDCG(TOP_K, **kw), {}),
    "ndcg_linear": (lambda **kw: R.NDCG(TOP_K, gain_function="linear_rank", **kw), {"gain_kind": "linear_rank"}),
    "hit_rate": (lambda **kw: R.HitRate(TOP_K, relevance_threshold=1.0, **kw), {}),
    "recall": (lambda **kw: R.Recall(TOP_K, **kw), {}),
    "recall_min": (lambda **kw: R.Recall(TOP_K, normalization="min_k_relevant", **kw), {"recall_norm": "min_k_relevant"}),
    "precision": (lambda **kw: R.Precision(TOP_K, **kw), {}),
    "precision_min": (
        lambda **kw: R.Precision(TOP_K, normalization="min_k_items", **kw), {"precision_norm": "min_k_items"}
    ),
    "map": (lambda **kw: R.MAP(TOP_K, **kw), {}),
    "map_relevant": (lambda **kw: R.MAP(TOP_K, normalization="relevant", **kw), {"map_norm": "relevant"}),
    "mrr": (lambda **kw: R.MRR(TOP_K, **kw), {}),
    "f1": (lambda **kw: R.F1(TOP_K, **kw), {}),
}


def _expected(name, rankings, labels, ignore_zero_hits, ref_kw):
    means = ref.candidate_metric_means(rankings, labels, TOP_K, ignore_zero_hits=ignore_zero_hits, **ref_kw)
    key = name.split("_")[0] if name not in ("hit_rate",) else "hit_rate"
    return means[key]


@pytest.mark.parametrize("target_form", ["dense", "coo", "csr", "ids"])
@pytest.mark.parametrize("exclude_form", ["none", "dense", "coo", "csr", "ids"])
@pytest.mark.parametrize("ties", ["stable", "average"])
def test_dense_scores_with_every_target_and_exclusion_form(target_form, exclude_form, ties):
    scores, labels, excluded = _data(11, ties == "average")
    excluded = None if exclude_form == "none" else excluded
    y = _target_forms(labels)[target_form]
    exclude = _exclude_forms(excluded)[exclude_form]
    sets = None if excluded is None else [set(np.nonzero(row)[0].tolist()) for row in excluded]
    rankings = ref.candidate_rankings(scores, sets, ties=ties)
    for ignore in (True, False):
        for name, (make, ref_kw) in CUTOFF.items():
            expected = _expected(name, rankings, labels, ignore, ref_kw)
            got = run_metric(make(ties=ties, ignore_zero_hits=ignore), [_output(torch.from_numpy(scores), y, exclude)])
            np.testing.assert_allclose(got, expected, atol=1e-12, err_msg=f"{name} ignore_zero_hits={ignore}")
        means = ref.candidate_metric_means(rankings, labels, TOP_K, ignore_zero_hits=ignore)
        got = run_metric(R.RPrecision(ties=ties, ignore_zero_hits=ignore), [_output(torch.from_numpy(scores), y, exclude)])
        assert got == pytest.approx(means["r_precision"], abs=1e-12)
        combined = R.RankingMetrics(TOP_K, metrics=["ndcg", "recall", "mrr", "r_precision"], ties=ties, ignore_zero_hits=ignore)
        got = run_metric(combined, [_output(torch.from_numpy(scores), y, exclude)])
        for metric in ("ndcg", "recall", "mrr"):
            np.testing.assert_allclose([got[f"{metric}@{k}"] for k in TOP_K], means[metric], atol=1e-12)
        assert got["r_precision"] == pytest.approx(means["r_precision"], abs=1e-12)


@pytest.mark.parametrize("target_form", ["dense", "coo", "csr", "ids"])
@pytest.mark.parametrize("exclude_form", ["none", "dense", "coo", "ids"])
@pytest.mark.parametrize("length", [1, 4, 9])
def test_ranked_ids_with_every_target_and_exclusion_form(target_form, exclude_form, length):
    scores, labels, excluded = _data(5, ties=False)
    excluded = None if exclude_form == "none" else excluded
    ids = _ranked_ids(scores, length)
    y = _target_forms(labels)[target_form]
    exclude = _exclude_forms(excluded)[exclude_form]
    sets = None if excluded is None else [set(np.nonzero(row)[0].tolist()) for row in excluded]
    rankings = ref.candidate_rankings(excluded=sets, ranked_ids=ids)
    y_pred = R.RankedItems(torch.from_numpy(ids))
    for name, (make, ref_kw) in CUTOFF.items():
        for ties in ("stable", "average"):  # a ranked list has no ties: both rules agree
            expected = _expected(name, rankings, labels, True, ref_kw)
            got = run_metric(make(ties=ties), [_output(y_pred, y, exclude)])
            np.testing.assert_allclose(got, expected, atol=1e-12, err_msg=name)
    means = ref.candidate_metric_means(rankings, labels, TOP_K)
    assert run_metric(R.RPrecision(), [_output(y_pred, y, exclude)]) == pytest.approx(means["r_precision"], abs=1e-12)


def test_ranked_ids_equal_scoring_the_list_with_every_other_item_excluded():
    scores, labels, _ = _data(3, ties=False)
    ids = _ranked_ids(scores, 5)
    others = np.ones((USERS, ITEMS), dtype=bool)
    for u in range(USERS):
        others[u, ids[u][ids[u] >= 0]] = False
    as_list = run_metric(R.RankingMetrics(TOP_K), [(R.RankedItems(torch.from_numpy(ids)), torch.from_numpy(labels))])
    as_scores = run_metric(
        R.RankingMetrics(TOP_K), [(torch.from_numpy(scores), torch.from_numpy(labels), torch.from_numpy(others))]
    )
    assert as_list == pytest.approx(as_scores, abs=1e-12)


CATALOG = {
    "coverage": (lambda: R.ItemCoverage(TOP_K, num_items=ITEMS), lambda lists: ref.coverage(lists, ITEMS)),
    "gini": (lambda: R.GiniIndex(TOP_K, num_items=ITEMS), lambda lists: ref.gini(lists, ITEMS)),
    "entropy": (lambda: R.ShannonEntropy(TOP_K, num_items=ITEMS), lambda lists: ref.entropy(lists, ITEMS)),
}
POPULARITY = torch.tensor([9.0, 1, 4, 0, 2, 7, 3, 3, 5])


@pytest.mark.parametrize("form", ["dense", "dense+exclude", "ids+exclude", "ranked", "ranked+exclude"])
def test_catalog_and_popularity_metrics_count_only_listed_candidates(form):
    scores, labels, excluded = _data(8, ties=True)
    ids = _ranked_ids(scores, 6)
    sets = [set(np.nonzero(row)[0].tolist()) for row in excluded] if "exclude" in form else None
    if form.startswith("ranked"):
        rankings = ref.candidate_rankings(excluded=sets, ranked_ids=ids)
        y_pred = R.RankedItems(torch.from_numpy(ids))
    else:
        rankings = ref.candidate_rankings(scores, sets)
        y_pred = torch.from_numpy(scores)
    exclude = None
    if "exclude" in form:
        exclude = _exclude_forms(excluded)["ids" if form.startswith("ids") else "dense"]
    output = _output(y_pred, torch.from_numpy(labels), exclude)
    for name, (make, reference) in CATALOG.items():
        expected = [reference([r[0][:k] for r in rankings]) for k in TOP_K]
        np.testing.assert_allclose(run_metric(make(), [output]), expected, atol=1e-12, err_msg=name)
    value = POPULARITY.tolist()
    listed = [r[0] for r in rankings if r[0]]
    expected = [float(np.mean([np.mean([value[i] for i in r[:k]]) for r in listed])) for k in TOP_K]
    got = run_metric(R.AveragePopularity(TOP_K, item_popularity=POPULARITY), [output])
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_catalog_metrics_need_num_items_with_ranked_ids():
    ids = R.RankedItems(torch.tensor([[0, 2], [1, -1]]))
    with pytest.raises(ValueError, match="num_items"):
        R.ItemCoverage(2).update((ids, R.ItemIds(torch.tensor([[0], [1]]))))


@pytest.mark.parametrize("make", [R.GAUC, R.AUC, R.MAE, R.RMSE, R.LogLoss])
def test_score_based_metrics_refuse_ranked_ids(make):
    with pytest.raises(TypeError, match="RankedItems"):
        make().update((R.RankedItems(torch.tensor([[0, 1]])), torch.ones(1, 2)))


def _good():
    return torch.tensor([[0.3, 0.1, 0.9, 0.2]]), torch.tensor([[0.0, 1.0, 1.0, 0.0]])


BAD = {
    "duplicate ranked id": ((R.RankedItems(torch.tensor([[2, 1, 2, -1]])), torch.tensor([[0.0, 1, 1, 0]])), ValueError, "twice"),
    "ranked id out of range": ((R.RankedItems(torch.tensor([[4, 1]])), torch.tensor([[0.0, 1, 1, 0]])), ValueError, "outside"),
    "negative ranked id": ((R.RankedItems(torch.tensor([[-2, 1]])), torch.tensor([[0.0, 1, 1, 0]])), ValueError, "outside"),
    "target id out of range": ((_good()[0], R.ItemIds(torch.tensor([[7, -1]]))), ValueError, "y holds item ids outside"),
    "duplicate target id": ((_good()[0], R.ItemIds(torch.tensor([[1, 1]]))), ValueError, "twice"),
    "exclude id out of range": ((*_good(), R.ItemIds(torch.tensor([[4]]))), ValueError, "exclude holds item ids outside"),
    "exclude shape": ((*_good(), torch.zeros(1, 5, dtype=torch.bool)), ValueError, "exclude must have 4 columns"),
    "exclude users": ((*_good(), torch.zeros(2, 4, dtype=torch.bool)), ValueError, "exclude must hold 1 users"),
    "sparse target shape": ((_good()[0], torch.zeros(1, 3).to_sparse()), ValueError, "y must have 4 columns"),
    "float exclude": ((*_good(), torch.zeros(1, 4)), TypeError, "exclude must be a bool"),
    "exclude not a tensor": ((*_good(), [[0, 1]]), TypeError, "exclude must be a torch.Tensor"),
}


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("make", [lambda: R.NDCG([1, 3]), lambda: R.RankingMetrics([1, 3], metrics=["recall", "r_precision"]), lambda: R.ItemCoverage([1, 3], num_items=4)])
def test_bad_forms_raise_and_leave_state(case, make):
    metric = make()
    metric.update(_good())
    before = {k: v.clone() for k, v in next(iter(metric.state_dict().values()))[0].items()}
    output, error, message = BAD[case]
    with pytest.raises(error, match=message):
        metric.update(output)
    after = next(iter(metric.state_dict().values()))[0]
    for key in before:
        assert torch.equal(before[key], after[key]), key


def test_wrapper_construction_errors():
    with pytest.raises(TypeError, match="integer item ids"):
        R.RankedItems(torch.tensor([[0.0, 1.0]]))
    with pytest.raises(ValueError, match="2-D"):
        R.RankedItems(torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="shape of ids"):
        R.ItemIds(torch.tensor([[0, 1]]), grades=torch.ones(1, 3))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        R.ItemIds([[0, 1]])


def test_exclude_from_an_engine_dict_output():
    from ignite.engine import Engine

    scores, labels, excluded = _data(2, ties=False)
    batch = {"y_pred": torch.from_numpy(scores), "y": torch.from_numpy(labels), "exclude": torch.from_numpy(excluded)}
    engine = Engine(lambda e, b: b)
    R.NDCG(TOP_K).attach(engine, "ndcg")
    state = engine.run([batch])
    sets = [set(np.nonzero(row)[0].tolist()) for row in excluded]
    expected = ref.candidate_metric_means(ref.candidate_rankings(scores, sets), labels, TOP_K)["ndcg"]
    np.testing.assert_allclose(state.metrics["ndcg"], expected, atol=1e-12)


def test_accelerator_code_path_gives_the_same_values(monkeypatch):
    """The variants taken on accelerators (one pass over the batch, plain reductions), forced on
    CPU, give the values of the reference for every form."""
    from ignite_recsys._core import tuning

    monkeypatch.setattr(tuning, "cpu_tuned", lambda device: False)
    scores, labels, excluded = _data(21, ties=True)
    sets = [set(np.nonzero(row)[0].tolist()) for row in excluded]
    ids = _ranked_ids(scores, 6)
    cases = [
        (torch.from_numpy(scores), _target_forms(labels)["csr"], _exclude_forms(excluded)["coo"],
         ref.candidate_rankings(scores, sets)),
        (R.RankedItems(torch.from_numpy(ids)), _target_forms(labels)["ids"], _exclude_forms(excluded)["ids"],
         ref.candidate_rankings(excluded=sets, ranked_ids=ids)),
    ]
    for y_pred, y, exclude, rankings in cases:
        means = ref.candidate_metric_means(rankings, labels, TOP_K)
        got = run_metric(R.RankingMetrics(TOP_K, metrics=["ndcg", "map", "precision", "r_precision"]), [(y_pred, y, exclude)])
        for name in ("ndcg", "map", "precision"):
            np.testing.assert_allclose([got[f"{name}@{k}"] for k in TOP_K], means[name], atol=1e-12)
        assert got["r_precision"] == pytest.approx(means["r_precision"], abs=1e-12)


@pytest.mark.parametrize("width", [1, 7, 8, 64, 1001, 4096])
def test_count_true_equals_sum(width):
    from ignite_recsys._core.ranking import count_true

    rng = np.random.default_rng(width)
    for share in (0.0, 0.3, 1.0):
        mask = torch.from_numpy(rng.random((5, width)) < share)
        assert torch.equal(count_true(mask), mask.sum(1))
        assert torch.equal(count_true(mask[:, ::1].t().contiguous().t()), mask.sum(1))  # non-contiguous rows


def test_long_rows_with_an_empty_exclusion_equal_the_dense_path():
    """Rows long enough for the ideal ranking's strided label groups (taken in the relevance pass
    on the exclusion path too): an exclusion of nothing changes nothing."""
    rng = np.random.default_rng(4)
    scores = torch.from_numpy(rng.standard_normal((6, 30_011)).astype(np.float32))
    labels = torch.from_numpy(np.where(rng.random((6, 30_011)) < 0.01, rng.integers(1, 5, (6, 30_011)), 0).astype(np.float32))
    nothing = torch.zeros(6, 30_011, dtype=torch.bool)
    for make in (lambda: R.NDCG([1, 10, 100]), lambda: R.NDCG([5, 50], gain_function="linear_rank")):
        dense = run_metric(make(), [(scores, labels)])
        excluded = run_metric(make(), [(scores, labels, nothing)])
        np.testing.assert_allclose(excluded, dense, rtol=0, atol=1e-12)
