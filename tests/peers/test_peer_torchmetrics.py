"""torchmetrics against the numpy references: RetrievalFallOut, RetrievalPrecisionRecallCurve and
RetrievalRecallAtFixedPrecision. Each user ranks a set of candidates (scores without ties); some users
have fewer candidates than k, none relevant, or all relevant.

Tolerance 1e-6: torchmetrics divides float32 counts (``.float()``) whatever the dtype of ``preds``, so its
values carry float32 rounding (about 6e-8 relative)."""

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

TOL = 1e-6  # float32 inside torchmetrics

torch = pytest.importorskip("torch")
tm = pytest.importorskip("torchmetrics.retrieval")
tmf = pytest.importorskip("torchmetrics.functional.retrieval")


def _users():
    """(candidates ranked best first, labels) per user."""
    out = []
    for n, u in enumerate(peer_cases.make_users(seed=14)):
        m = [peer_cases.N_ITEMS, 4, 12, 7][n % 4]  # candidates per user
        candidates = u["full"][:m]
        out.append((candidates, {i: g for i, g in u["labels"].items() if i in candidates}))
    out.append(([3, 1, 2], {3: 1, 1: 2, 2: 1}))  # every candidate relevant: no non-relevant one
    return out


USERS = _users()


def _tensors():
    preds, target, indexes = [], [], []
    for n, (candidates, labels) in enumerate(USERS):
        for p, i in enumerate(candidates):
            preds.append(float(len(candidates) - p))
            target.append(labels.get(i, 0) >= 1)
            indexes.append(n)
    return torch.tensor(preds, dtype=torch.float64), torch.tensor(target), torch.tensor(indexes)


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
def test_fall_out_functional(k):
    preds, target, indexes = _tensors()
    for n, (candidates, labels) in enumerate(USERS):
        sel = indexes == n
        got = tmf.retrieval_fall_out(preds[sel], target[sel], top_k=k)
        agree("torchmetrics retrieval_fall_out", got, ref.fall_out(candidates, labels, candidates, k, empty=0.0), TOL)


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
@pytest.mark.parametrize("action,empty", [("pos", 1.0), ("neg", 0.0), ("skip", None)])
def test_fall_out_class(k, action, empty):
    preds, target, indexes = _tensors()
    metric = tm.RetrievalFallOut(top_k=k, empty_target_action=action)
    metric.update(preds, target, indexes)
    values = [ref.fall_out(c, y, c, k, empty=np.nan if empty is None else empty) for c, y in USERS]
    assert any(np.isnan(ref.fall_out(c, y, c, k, empty=np.nan)) for c, y in USERS)
    agree(f"torchmetrics RetrievalFallOut(empty_target_action={action!r})", metric.compute(), np.nanmean(values), TOL)


@pytest.mark.parametrize("max_k", [1, 3, 10, 25])
@pytest.mark.parametrize("adaptive_k", [False, True])
def test_precision_recall_curve(max_k, adaptive_k):
    preds, target, indexes = _tensors()
    for n, (candidates, labels) in enumerate(USERS):
        sel = indexes == n
        if not target[sel].any():
            continue  # the functional form returns zeros: checked through the class below
        p, r, _ = tmf.retrieval_precision_recall_curve(preds[sel], target[sel], max_k=max_k, adaptive_k=adaptive_k)
        want_p, want_r = ref.precision_recall_curve(
            candidates, labels, max_k, n_candidates=len(candidates), adaptive_k=adaptive_k
        )
        for a, b in zip(p.tolist() + r.tolist(), want_p.tolist() + want_r.tolist()):
            agree("torchmetrics retrieval_precision_recall_curve", a, b, TOL)


@pytest.mark.parametrize("max_k", [1, 3, 10, 25])
@pytest.mark.parametrize("min_precision", [0.0, 0.1, 0.2, 0.35, 0.5, 0.9])
def test_recall_at_fixed_precision(max_k, min_precision):
    """The class averages the users' P@k and R@k curves first (``empty_target_action="neg"``: a user without
    relevant items adds zeros), then picks the best k on the mean curves."""
    preds, target, indexes = _tensors()
    metric = tm.RetrievalRecallAtFixedPrecision(min_precision=min_precision, max_k=max_k)
    metric.update(preds, target, indexes)
    got_r, got_k = metric.compute()
    curves = [ref.precision_recall_curve(c, y, max_k) for c, y in USERS]
    mean_p = np.mean([c[0] for c in curves], axis=0)
    mean_r = np.mean([c[1] for c in curves], axis=0)
    want_r, want_k = ref.recall_at_fixed_precision(mean_p, mean_r, min_precision)
    agree("torchmetrics RetrievalRecallAtFixedPrecision (recall)", got_r, want_r, TOL)
    assert int(got_k) == want_k
