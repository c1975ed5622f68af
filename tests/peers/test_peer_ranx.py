"""ranx against the numpy references: dcg, dcg_burges, ndcg, rbp (graded), bpref, hits, per user."""

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

ranx = pytest.importorskip("ranx")

USERS = peer_cases.make_users(seed=11)
QIDS = [f"q{u:03d}" for u in range(len(USERS))]


def _qrels_run():
    qrels = ranx.Qrels({q: {f"d{i:02d}": g for i, g in u["labels"].items()} for q, u in zip(QIDS, USERS)})
    run = ranx.Run({q: {f"d{i:02d}": s for i, s in u["scores"].items()} for q, u in zip(QIDS, USERS)})
    return qrels, run


def _per_user(metric):
    qrels, run = _qrels_run()
    values = ranx.evaluate(qrels, run, metric, return_mean=False)
    return dict(zip(sorted(QIDS), values))  # ranx orders the queries by id


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
@pytest.mark.parametrize("name,gain", [("dcg", "linear"), ("dcg_burges", "exp")])
def test_dcg(name, gain, k):
    got = _per_user(f"{name}@{k}")
    for q, u in zip(QIDS, USERS):
        agree(f"ranx {name}", got[q], ref.dcg(u["ranked"], u["labels"], k, gain=gain))


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
@pytest.mark.parametrize("name,gain", [("ndcg", "linear"), ("ndcg_burges", "exp")])
def test_ndcg(name, gain, k):
    got = _per_user(f"{name}@{k}")
    for q, u in zip(QIDS, USERS):
        agree(f"ranx {name}", got[q], ref.ndcg(u["ranked"], u["labels"], k, gain=gain))


@pytest.mark.parametrize("p", [0.5, 0.8, 0.95])
def test_rbp_graded_whole_run(p):
    got = _per_user(f"rbp.{str(p)[2:]}")
    for q, u in zip(QIDS, USERS):
        agree("ranx rbp (graded)", got[q], ref.rbp(u["ranked"], u["labels"], p, graded=True))


def test_rbp_binary_labels_and_cut_run():
    """ranx has no cut-off for RBP: a run cut at k and binary labels give Moffat & Zobel's RBP@k."""
    k, p = 3, 0.8
    qrels = ranx.Qrels({q: {f"d{i:02d}": int(g >= 1) for i, g in u["labels"].items()} for q, u in zip(QIDS, USERS)})
    run = ranx.Run({q: {f"d{i:02d}": u["scores"][i] for i in u["ranked"][:k]} for q, u in zip(QIDS, USERS)})
    got = dict(zip(sorted(QIDS), ranx.evaluate(qrels, run, "rbp.8", return_mean=False)))
    for q, u in zip(QIDS, USERS):
        agree("ranx rbp (binary, run cut at k)", got[q], ref.rbp(u["ranked"], u["labels"], p, k, graded=False))


def test_bpref():
    """ranx's bpref, one query at a time: evaluated together, a query without any relevant judgement
    stops ranx 0.3.21's numba loop (0/0 in ``_bpref``) and every later query of the batch reads 0.
    NaN for a user with a retrieved relevant item and no judged non-relevant one (trec_eval adds 1)."""
    nan_users = 0
    for n, u in enumerate(USERS):
        if n % 3 == 0:  # negative labels: judged non-relevant for ranx, unjudged for trec_eval
            u = {**u, "labels": {i: (-1 if g == 0 else g) for i, g in u["labels"].items()}}
        qrels = ranx.Qrels({"q": {f"d{i:02d}": g for i, g in u["labels"].items()}})
        run = ranx.Run({"q": {f"d{i:02d}": s for i, s in u["scores"].items()}})
        got = ranx.evaluate(qrels, run, "bpref")
        want = ref.bpref(u["ranked"], u["labels"], convention="ranx")
        nan_users += bool(np.isnan(want))
        agree("ranx bpref", got, want)
    assert nan_users > 0  # the cases include users without a judged non-relevant item


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
def test_hits(k):
    got = _per_user(f"hits@{k}")
    for q, u in zip(QIDS, USERS):
        agree("ranx hits", got[q], ref.hits(u["ranked"], u["labels"], k))
