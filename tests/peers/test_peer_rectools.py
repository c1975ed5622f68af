"""RecTools against the numpy references: NDCG (divide_by_achievable False/True), MAP(divide_by_k=True),
Intersection, IntraListDiversity (cosine and Hamming), Serendipity, MeanInvUserFreq, per user.

RecTools pins numpy<2: run in its own venv (see README.md). Relevance is binary in RecTools: a test
interaction is a relevant item, so the cases pass the items with label >= 1 as interactions and users
without one are absent from the test interactions."""

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

pd = pytest.importorskip("pandas")
rectools = pytest.importorskip("rectools")
from rectools import Columns
from rectools.metrics import (
    MAP,
    NDCG,
    Intersection,
    IntraListDiversity,
    MeanInvUserFreq,
    Serendipity,
)
from rectools.metrics.distances import PairwiseDistanceCalculator, PairwiseHammingDistanceCalculator

USERS = peer_cases.make_users(seed=15)
TRAIN = peer_cases.make_training(seed=16)
DENSE, BINARY, _ = peer_cases.make_features(seed=17)


def _reco(lists):
    rows = [(u, i, r) for u, items in enumerate(lists) for r, i in enumerate(items, start=1)]
    return pd.DataFrame(rows, columns=[Columns.User, Columns.Item, Columns.Rank])


def _interactions(pairs):
    df = pd.DataFrame(list(pairs), columns=[Columns.User, Columns.Item])
    df[Columns.Weight] = 1.0
    df[Columns.Datetime] = pd.Timestamp("2024-01-01")
    return df


RECO = _reco([u["ranked"] for u in USERS])
TEST = _interactions([(n, i) for n, u in enumerate(USERS) for i, g in u["labels"].items() if g >= 1])
PREV = _interactions(TRAIN)
WITH_RELEVANT = [n for n, u in enumerate(USERS) if max(u["labels"].values()) >= 1]


def _check_per_user(name, got, want_of, users):
    assert sorted(got.index.tolist()) == sorted(users), name
    for n in users:
        agree(name, got.loc[n], want_of(n))


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
@pytest.mark.parametrize("achievable", [False, True])
def test_ndcg(k, achievable):
    got = NDCG(k=k, divide_by_achievable=achievable).calc_per_user(RECO, TEST)
    ideal = "achievable" if achievable else "k_relevant"
    _check_per_user(
        f"rectools NDCG(divide_by_achievable={achievable})",
        got,
        lambda n: ref.ndcg(USERS[n]["ranked"], USERS[n]["labels"], k, gain="binary", ideal=ideal),
        WITH_RELEVANT,
    )


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
@pytest.mark.parametrize("divide_by_k", [True, False])
def test_map(k, divide_by_k):
    got = MAP(k=k, divide_by_k=divide_by_k).calc_per_user(RECO, TEST)
    den = "k" if divide_by_k else "relevant"
    _check_per_user(
        f"rectools MAP(divide_by_k={divide_by_k})",
        got,
        lambda n: ref.average_precision(USERS[n]["ranked"], USERS[n]["labels"], k, denominator=den),
        WITH_RELEVANT,
    )


@pytest.mark.parametrize("k,ref_k", [(1, None), (3, None), (5, 2), (10, None), (25, 7)])
def test_intersection(k, ref_k):
    other = _reco([u["other"] for u in USERS[::2]])  # half of the users have no reference list
    other[Columns.User] *= 2
    got = Intersection(k=k, ref_k=ref_k).calc_per_user(RECO, other)
    _check_per_user(
        "rectools Intersection",
        got,
        lambda n: ref.intersection(USERS[n]["ranked"], USERS[n]["other"] if n % 2 == 0 else [], k, ref_k),
        list(range(len(USERS))),
    )


class _Cosine(PairwiseDistanceCalculator):
    def __init__(self, features):
        self.features = features

    def _get_distances_for_item_pairs(self, items_0, items_1):
        return np.array([ref.cosine_distance(self.features[a], self.features[b]) for a, b in zip(items_0, items_1)])


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
@pytest.mark.parametrize("distance", ["cosine", "hamming"])
def test_intra_list_diversity(k, distance):
    calc = _Cosine(DENSE) if distance == "cosine" else PairwiseHammingDistanceCalculator(pd.DataFrame(BINARY))
    features = DENSE if distance == "cosine" else BINARY
    got = IntraListDiversity(k=k, distance_calculator=calc).calc_per_user(RECO)
    _check_per_user(
        f"rectools IntraListDiversity ({distance})",
        got,
        lambda n: ref.intra_list_diversity(USERS[n]["ranked"], k, features, distance=distance),
        list(range(len(USERS))),
    )


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
def test_serendipity(k):
    catalog = np.arange(peer_cases.N_ITEMS)
    got = Serendipity(k=k).calc_per_user(RECO, TEST, PREV, catalog)
    counts = peer_cases.user_counts(TRAIN)  # distinct pairs: interactions = distinct users
    _check_per_user(
        "rectools Serendipity",
        got,
        lambda n: ref.serendipity(USERS[n]["ranked"], USERS[n]["labels"], k, counts, peer_cases.N_ITEMS),
        list(range(len(USERS))),
    )


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
def test_mean_inv_user_freq(k):
    got = MeanInvUserFreq(k=k).calc_per_user(RECO, PREV)
    counts = peer_cases.user_counts(TRAIN)
    n_users = len({u for u, _ in TRAIN})
    _check_per_user(
        "rectools MeanInvUserFreq",
        got,
        lambda n: ref.mean_inverse_user_frequency(USERS[n]["ranked"], k, counts, n_users),
        list(range(len(USERS))),
    )
