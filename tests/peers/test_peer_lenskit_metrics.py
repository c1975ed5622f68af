"""ignite_recsys' metric classes against LensKit 2025.8 itself: RankBiasedOverlap (per user, against
``rank_biased_overlap``), MeanPopRank (per user), RankBiasedEntropy (per user, against
``rank_biased_entropy`` and ``entropy``), ExposureGini with LensKit's default geometric and its logarithmic
weights, and ListGini against GiniIndex (global). LensKit sums exposure in float32
(tolerance 1e-6 there).

Runs in the LensKit venv with pytorch-ignite added (see README.md)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import peer_cases
from peer_check import agree

pytest.importorskip("lenskit")
pd = pytest.importorskip("pandas")
pytest.importorskip("ignite")
import library_inputs as lib
import torch
from lenskit.data import ItemList, from_interactions_df
from lenskit.metrics import ExposureGini, GeometricRankWeight, ListGini, LogRankWeight, MeanPopRank
from lenskit.metrics.ranking import entropy, rank_biased_entropy
from lenskit.metrics.reranking import rank_biased_overlap

R = lib.R
USERS = peer_cases.make_users(seed=28)
TRAIN = peer_cases.make_training(seed=29)
N = peer_cases.N_ITEMS
CUTOFFS = list(peer_cases.CUTOFFS)
LISTS = lib.ranked_items([u["ranked"] for u in USERS], N)
LABELS = lib.dense_labels(USERS, N)


def _recs(items):
    return ItemList(item_ids=np.asarray(items, dtype=np.int64), ordered=True)


@pytest.mark.parametrize("p", [0.5, 0.85])
@pytest.mark.parametrize("normalize", ["lenskit", "webber"])
def test_rank_biased_overlap(p, normalize):
    other = lib.ranked_items([u["other"] for u in USERS], N)
    metric = R.RankBiasedOverlap(CUTOFFS, patience=p, normalize=normalize, num_items=N, per_user=True)
    ours = lib.per_user(metric, (LISTS, other))
    for j, k in enumerate(CUTOFFS):
        for n, u in enumerate(USERS):
            got = rank_biased_overlap(_recs(u["ranked"]), _recs(u["other"]), GeometricRankWeight(p), n=k)
            if normalize == "webber":  # Webber's truncated sum: LensKit's value times (1 - p^k)
                got *= 1 - p**k
            agree(f"ignite_recsys RankBiasedOverlap({normalize}) vs lenskit", ours[n, j], got)


def test_mean_pop_rank():
    ds = from_interactions_df(pd.DataFrame(TRAIN, columns=["user_id", "item_id"]))
    counts = torch.as_tensor(peer_cases.user_counts(TRAIN))
    ours = lib.per_user(R.MeanPopRank(CUTOFFS, counts, per_user=True), (LISTS, LABELS))
    for j, k in enumerate(CUTOFFS):
        metric = MeanPopRank(ds, n=k)
        for n, u in enumerate(USERS):
            agree("ignite_recsys MeanPopRank vs lenskit", ours[n, j], metric.measure_list(_recs(u["ranked"]), None))


@pytest.mark.parametrize("weight", ["geometric", "log", "list"])
def test_exposure_gini_and_list_gini(weight):
    ours = {
        "geometric": R.ExposureGini(CUTOFFS, num_items=N),
        "log": R.ExposureGini(CUTOFFS, num_items=N, rank_weight="log2"),
        "list": R.GiniIndex(CUTOFFS, num_items=N),
    }[weight]
    ours.update((LISTS, LABELS))
    for j, k in enumerate(CUTOFFS):
        metric = {
            "geometric": ExposureGini(k, items=N),
            "log": ExposureGini(k, items=N, weight=LogRankWeight(offset=1)),
            "list": ListGini(k, items=N),
        }[weight]
        got = metric.global_aggregate([metric.compute_list_data(_recs(u["ranked"]), None) for u in USERS])
        agree(f"ignite_recsys {type(ours).__name__}({weight}) vs lenskit", ours.compute()[j], got, 1e-6)


@pytest.mark.parametrize("weight", ["geometric", "geometric_0.5", "none"])
def test_rank_biased_entropy(weight):
    """LensKit takes the category rows of the listed items (0/1 membership here) and adds 1e-6 to
    every category: our defaults."""
    _, _, categories = peer_cases.make_features()
    matrix = np.zeros((N, 5))
    for item, ids in enumerate(categories):
        matrix[item, ids] = 1.0
    options = {"geometric": {}, "geometric_0.5": {"rank_weight": ("geometric", 0.5)}, "none": {"rank_weight": None}}
    metric = R.RankBiasedEntropy(CUTOFFS, categories, per_user=True, **options[weight])
    ours = lib.per_user(metric, (LISTS, LABELS))
    for j, k in enumerate(CUTOFFS):
        for n, u in enumerate(USERS):
            rows = matrix[np.asarray(u["ranked"], dtype=np.int64)]
            if weight == "none":
                got = entropy(_recs(u["ranked"]), rows, n=k)
            else:
                p = 0.5 if weight == "geometric_0.5" else 0.85
                got = rank_biased_entropy(_recs(u["ranked"]), rows, weight=GeometricRankWeight(p), n=k)
            if not u["ranked"]:
                assert np.isnan(ours[n, j]) and np.isnan(got)
                continue
            agree(f"ignite_recsys RankBiasedEntropy({weight}) vs lenskit", ours[n, j], got)
