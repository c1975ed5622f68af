"""LensKit 2025.8 against the numpy references: NDCG / DCG (binary and graded; LogRankWeight with and without
offset, GeometricRankWeight), RBP (normalize False/True), rank_biased_overlap, ExposureGini, ListGini and
MeanPopRank, per list.

LensKit needs pandas 2 (the main environment has pandas 3): run in its own venv (see README.md). Its test
lists hold the relevant items only: the cases pass the items with label >= 1 (with their grade as
``rating`` for the graded forms)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import peer_cases
import references_families as ref
from peer_check import agree

lenskit = pytest.importorskip("lenskit")
pd = pytest.importorskip("pandas")
from lenskit.data import ItemList, from_interactions_df
from lenskit.metrics import (
    DCG,
    NDCG,
    RBP,
    ExposureGini,
    GeometricRankWeight,
    ListGini,
    LogRankWeight,
    MeanPopRank,
)
from lenskit.metrics.reranking import rank_biased_overlap

USERS = peer_cases.make_users(seed=18)
TRAIN = peer_cases.make_training(seed=19)

WEIGHTS = {  # LensKit weight -> the reference's discount
    "LogRankWeight()": (LogRankWeight(), "log2_clip"),
    "LogRankWeight(offset=1)": (LogRankWeight(offset=1), "log2"),
    "GeometricRankWeight(0.7)": (GeometricRankWeight(0.7), ("geometric", 0.7)),
}


def _recs(items):
    return ItemList(item_ids=np.asarray(items, dtype=np.int64), ordered=True)


def _test(u):
    rel = {i: g for i, g in u["labels"].items() if g >= 1}
    return ItemList(item_ids=np.asarray(list(rel), dtype=np.int64), rating=np.asarray(list(rel.values()), float))


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
@pytest.mark.parametrize("weight", list(WEIGHTS))
@pytest.mark.parametrize("graded", [False, True])
def test_ndcg_and_dcg(k, weight, graded):
    lk_weight, discount = WEIGHTS[weight]
    gain = "linear" if graded else "binary"
    field = "rating" if graded else None
    ndcg, dcg = NDCG(k, weight=lk_weight, gain=field), DCG(k, weight=lk_weight, gain=field)
    empty = 0
    for u in USERS:
        test = _test(u)
        want = ref.ndcg(u["ranked"], u["labels"], k, gain=gain, discount=discount, empty=np.nan)
        empty += bool(np.isnan(want))
        agree(f"lenskit NDCG({weight}, gain={field})", ndcg.measure_list(_recs(u["ranked"]), test), want)
        agree(
            f"lenskit DCG({weight}, gain={field})",
            dcg.measure_list(_recs(u["ranked"]), test),
            ref.dcg(u["ranked"], u["labels"], k, gain=gain, discount=discount),
        )
    assert empty > 0  # users without a relevant item: NaN in LensKit


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
@pytest.mark.parametrize("patience", [0.5, 0.85])
@pytest.mark.parametrize("normalize", [False, True])
def test_rbp(k, patience, normalize):
    metric = RBP(k, patience=patience, normalize=normalize)
    for u in USERS:
        test = _test(u)
        if len(test) == 0:
            assert np.isnan(metric.measure_list(_recs(u["ranked"]), test))
            continue
        want = ref.rbp(
            u["ranked"], u["labels"], patience, k, graded=False, normalize="achievable" if normalize else "series"
        )
        agree(f"lenskit RBP(normalize={normalize})", metric.measure_list(_recs(u["ranked"]), test), want)


@pytest.mark.parametrize("depth", [1, 3, 10, 25])
@pytest.mark.parametrize("p", [0.5, 0.85])
def test_rank_biased_overlap(depth, p):
    for u in USERS:
        got = rank_biased_overlap(_recs(u["ranked"]), _recs(u["other"]), GeometricRankWeight(p), n=depth)
        agree("lenskit rank_biased_overlap", got, ref.rank_biased_overlap(u["ranked"], u["other"], depth, p=p))


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
def test_gini(k):
    """LensKit accumulates exposure in float32: tolerance 1e-6."""
    lists = [u["ranked"] for u in USERS]
    for metric, discount, name in [
        (ExposureGini(k, items=peer_cases.N_ITEMS), ("geometric", 0.85), "ExposureGini()"),
        (
            ExposureGini(k, items=peer_cases.N_ITEMS, weight=LogRankWeight(offset=1)),
            "log2",
            "ExposureGini(LogRankWeight(offset=1))",
        ),
        (ListGini(k, items=peer_cases.N_ITEMS), None, "ListGini"),
    ]:
        got = metric.global_aggregate([metric.compute_list_data(_recs(items), None) for items in lists])
        want = ref.exposure_gini(lists, peer_cases.N_ITEMS, k, discount=discount)
        agree(f"lenskit {name}", got, want, 1e-6)


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
def test_mean_pop_rank(k):
    ds = from_interactions_df(pd.DataFrame(TRAIN, columns=["user_id", "item_id"]))
    metric = MeanPopRank(ds, n=k)
    counts = peer_cases.user_counts(TRAIN)
    for u in USERS:
        agree(
            "lenskit MeanPopRank",
            metric.measure_list(_recs(u["ranked"]), _test(u)),
            ref.mean_pop_rank(u["ranked"], k, counts),
        )
    assert np.isnan(metric.measure_list(_recs([]), _test(USERS[0])))
