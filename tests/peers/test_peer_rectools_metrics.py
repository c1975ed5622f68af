"""ignite_recsys' metric classes against RecTools 0.19 itself, per user: IntraListDiversity (cosine
through a custom distance calculator, Hamming through RecTools' own), Serendipity, MeanInvUserFreq
and Intersection. A user RecTools leaves out (an empty list) is NaN (not counted) in the library.

Runs in the RecTools venv with torch 2.13.0, pytorch-ignite and scipy added (see README.md)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import peer_cases
from peer_check import agree

pd = pytest.importorskip("pandas")
pytest.importorskip("rectools")
pytest.importorskip("torch")
pytest.importorskip("ignite")
import library_inputs as lib
import torch
from rectools import Columns
from rectools.metrics import Intersection, IntraListDiversity, MeanInvUserFreq, Serendipity
from rectools.metrics.distances import PairwiseDistanceCalculator, PairwiseHammingDistanceCalculator

R = lib.R
USERS = peer_cases.make_users(seed=25)
TRAIN = peer_cases.make_training(seed=26)
DENSE, BINARY, _ = peer_cases.make_features(seed=27)
N = peer_cases.N_ITEMS
LISTS = lib.ranked_items([u["ranked"] for u in USERS], N)
LABELS = lib.dense_labels(USERS, N)


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
COUNTS = torch.as_tensor(peer_cases.user_counts(TRAIN))  # distinct pairs: interactions = distinct users
N_USERS = len({u for u, _ in TRAIN})


def _compare(name, rectools_values, ours):
    """RecTools' per-user Series against column j of ours; users absent from RecTools are NaN here."""
    for u in range(len(USERS)):
        if u in rectools_values.index:
            agree(name, ours[u], rectools_values.loc[u])
        else:
            assert np.isnan(ours[u]), (name, u)


class _Cosine(PairwiseDistanceCalculator):
    def __init__(self, features):
        self.features = features

    def _get_distances_for_item_pairs(self, items_0, items_1):
        a, b = self.features[items_0], self.features[items_1]
        return 1 - (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("distance", ["cosine", "hamming"])
def test_intra_list_diversity(distance):
    features = DENSE if distance == "cosine" else BINARY
    calculator = _Cosine(DENSE) if distance == "cosine" else PairwiseHammingDistanceCalculator(pd.DataFrame(BINARY))
    ours = lib.per_user(
        R.IntraListDiversity(list(peer_cases.CUTOFFS), torch.as_tensor(features), distance=distance, per_user=True),
        (LISTS, LABELS),
    )
    for j, k in enumerate(peer_cases.CUTOFFS):
        got = IntraListDiversity(k=k, distance_calculator=calculator).calc_per_user(RECO)
        _compare(f"ignite_recsys IntraListDiversity ({distance}) vs rectools", got, ours[:, j])


def test_serendipity():
    ours = lib.per_user(R.Serendipity(list(peer_cases.CUTOFFS), COUNTS, per_user=True), (LISTS, LABELS))
    for j, k in enumerate(peer_cases.CUTOFFS):
        got = Serendipity(k=k).calc_per_user(RECO, TEST, PREV, np.arange(N))
        _compare("ignite_recsys Serendipity vs rectools", got, ours[:, j])


def test_mean_inv_user_freq():
    ours = lib.per_user(R.MeanInvUserFreq(list(peer_cases.CUTOFFS), COUNTS, N_USERS, per_user=True), (LISTS, LABELS))
    for j, k in enumerate(peer_cases.CUTOFFS):
        _compare(
            "ignite_recsys MeanInvUserFreq vs rectools", MeanInvUserFreq(k=k).calc_per_user(RECO, PREV), ours[:, j]
        )


@pytest.mark.parametrize("ref_k", [None, 2, 7])
def test_intersection(ref_k):
    other_lists = [u["other"] if n % 2 == 0 else [] for n, u in enumerate(USERS)]  # half without a reference
    other = _reco([u["other"] for u in USERS[::2]])
    other[Columns.User] *= 2
    metric = R.Intersection(list(peer_cases.CUTOFFS), ref_k=ref_k, num_items=N, per_user=True)
    ours = lib.per_user(metric, (LISTS, lib.ranked_items(other_lists, N)))
    for j, k in enumerate(peer_cases.CUTOFFS):
        got = Intersection(k=k, ref_k=ref_k).calc_per_user(RECO, other)
        _compare("ignite_recsys Intersection vs rectools", got, ours[:, j])
