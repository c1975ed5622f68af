"""RecPack against the numpy references: HitK (the number of hits in the top K, per user, and its mean).

RecPack pins numpy 1: run in its own venv (see README.md). RecPack's prediction matrix is sparse: an item
with score 0 is never recommended, so a short list is a row with fewer non-zero scores. ``y_true`` holds the
graded labels; RecPack counts any non-zero label as a hit, the cases' labels >= 1."""

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

recpack = pytest.importorskip("recpack")
sparse = pytest.importorskip("scipy.sparse")
from recpack.metrics import HitK

USERS = peer_cases.make_users(seed=20)


def _matrices():
    n = len(USERS)
    y_true = np.zeros((n, peer_cases.N_ITEMS))
    y_pred = np.zeros((n, peer_cases.N_ITEMS))
    for u, case in enumerate(USERS):
        for i, g in case["labels"].items():
            y_true[u, i] = g
        for i, s in case["scores"].items():
            y_pred[u, i] = s
    return sparse.csr_matrix(y_true), sparse.csr_matrix(y_pred)


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
def test_hit_k(k):
    y_true, y_pred = _matrices()
    metric = HitK(k)
    metric.calculate(y_true, y_pred)
    per_user = metric.scores_.sum(axis=1).A1  # one row per user with a non-zero label
    counted = [u for u, case in enumerate(USERS) if any(g != 0 for g in case["labels"].values())]
    assert len(per_user) == len(counted) < len(USERS)
    for got, u in zip(per_user, counted):
        agree("recpack HitK (per user)", got, ref.hits(USERS[u]["ranked"], USERS[u]["labels"], k))
    want = np.mean([ref.hits(USERS[u]["ranked"], USERS[u]["labels"], k) for u in counted])
    agree("recpack HitK.value", metric.value, want)
