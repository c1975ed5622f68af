"""trec_eval (pytrec-eval-terrier) and ir-measures against the numpy references: bpref, ERR@k (gdeval.pl)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import peer_cases
import references_families as ref
from peer_check import agree

USERS = peer_cases.make_users(seed=12)


def _with_negative_labels(users):
    """Every third user's judged non-relevant items get -1 instead of 0 (trec_eval: then unjudged)."""
    out = []
    for n, u in enumerate(users):
        labels = {i: (-1 if g == 0 and n % 3 == 0 else g) for i, g in u["labels"].items()}
        out.append({**u, "labels": labels})
    return out


def test_trec_eval_bpref():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    users = _with_negative_labels(USERS)
    qrels = {f"q{n}": {f"d{i:02d}": g for i, g in u["labels"].items()} for n, u in enumerate(users)}
    run = {f"q{n}": {f"d{i:02d}": s for i, s in u["scores"].items()} for n, u in enumerate(users)}
    got = pytrec_eval.RelevanceEvaluator(qrels, {"bpref"}).evaluate(run)
    assert len(got) == len(users)
    for n, u in enumerate(users):
        agree("trec_eval bpref", got[f"q{n}"]["bpref"], ref.bpref(u["ranked"], u["labels"]))


def test_ir_measures_bpref_providers():
    """ir-measures' Bpref through pytrec_eval equals trec_eval's convention (1 per relevant hit when no item
    is judged non-relevant)."""
    ir_measures = pytest.importorskip("ir_measures")
    qrels = [ir_measures.Qrel(f"q{n}", f"d{i:02d}", g) for n, u in enumerate(USERS) for i, g in u["labels"].items()]
    run = [ir_measures.ScoredDoc(f"q{n}", f"d{i:02d}", s) for n, u in enumerate(USERS) for i, s in u["scores"].items()]
    got = {m.query_id: m.value for m in ir_measures.pytrec_eval.iter_calc([ir_measures.Bpref], qrels, run)}
    for n, u in enumerate(USERS):
        agree("ir_measures Bpref (pytrec_eval)", got[f"q{n}"], ref.bpref(u["ranked"], u["labels"]))


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
def test_ir_measures_err_gdeval(k):
    """gdeval.pl prints 5 decimals (rounding error up to 5e-6), hence the 1e-5 tolerance. It fixes
    the maximum grade at 4 and prints no row for a topic without a positive judgement; ir-measures
    reports 0 for it."""
    ir_measures = pytest.importorskip("ir_measures")
    if not ir_measures.gdeval.is_available():
        pytest.skip("gdeval needs perl")
    users = peer_cases.make_users(seed=13, max_grade=4)
    qrels = [ir_measures.Qrel(str(n), f"d{i:02d}", g) for n, u in enumerate(users) for i, g in u["labels"].items()]
    run = [ir_measures.ScoredDoc(str(n), f"d{i:02d}", s) for n, u in enumerate(users) for i, s in u["scores"].items()]
    got = {m.query_id: m.value for m in ir_measures.gdeval.iter_calc([ir_measures.ERR @ k], qrels, run)}
    assert set(got) == {str(n) for n in range(len(users))}
    for n, u in enumerate(users):
        agree("ir_measures ERR@k (gdeval)", got[str(n)], ref.err(u["ranked"], u["labels"], k, max_grade=4), 1e-5)
