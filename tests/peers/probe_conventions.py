"""Print what each installed peer returns on the tiny cases of CONVENTIONS.md (run it in each peer venv).

    python tests/peers/probe_conventions.py            # the peers importable here; see README.md

Cases (items are ints; k = 3 unless said):
  base    ranked [0, 1, 2], labels {2: 1, 3: 1}      hit at rank 3, |R| = 2
  graded  ranked [0, 1, 2], labels {1: 3, 2: 1, 3: 2, 4: 0}
  empty   ranked [],        labels {2: 1}
  norel   ranked [0, 1, 2], labels {0: 0, 5: 0}      judged, none relevant
  short   ranked [0, 1],    labels {1: 1, 3: 1}, k = 5 (k > list length)
Training (popularity): 4 users with items {0, 1, 3, 2}, {0, 1, 3}, {0, 1}, {0}; 8 catalogue items.
"""

from __future__ import annotations

import importlib.util
import math
import warnings

CASES = {
    "base": ([0, 1, 2], {2: 1, 3: 1}, 3),
    "graded": ([0, 1, 2], {1: 3, 2: 1, 3: 2, 4: 0}, 3),
    "empty": ([], {2: 1}, 3),
    "norel": ([0, 1, 2], {0: 0, 5: 0}, 3),
    "short": ([0, 1], {1: 1, 3: 1}, 5),
}
N_ITEMS = 8
TRAIN = [[0, 1, 3, 2], [0, 1, 3], [0, 1], [0]]  # training items of 4 users: counts 4, 3, 1, 2 for items 0..3


def show(peer, metric, values):
    cells = "  ".join(f"{c}={_fmt(v)}" for c, v in values.items())
    print(f"{peer:12} {metric:45} {cells}")


def _fmt(v):
    if isinstance(v, str):
        return v
    if v is None:
        return "absent"
    v = float(v)
    return "nan" if math.isnan(v) else f"{v:.4f}"


def _try(f, *args):
    try:
        return f(*args)
    except Exception as e:  # noqa: BLE001 - the probe reports what the peer raises
        return f"{type(e).__name__}"


def _ranx_one(ranx, ranked, labels, metric):
    q = ranx.Qrels({"q": {f"d{i}": g for i, g in labels.items()}})
    r = ranx.Run({"q": {f"d{i}": float(10 - p) for p, i in enumerate(ranked)}})
    return ranx.evaluate(q, r, metric)


def probe_ranx():
    import ranx

    for metric in ["dcg@{k}", "dcg_burges@{k}", "ndcg@{k}", "ndcg_burges@{k}", "rbp.5", "bpref", "hits@{k}"]:
        out = {}
        for c, (ranked, labels, k) in CASES.items():
            out[c] = _try(_ranx_one, ranx, ranked, labels, metric.format(k=k))
        show("ranx", metric, out)


def probe_trec():
    import pytrec_eval

    out = {}
    for c, (ranked, labels, _) in CASES.items():
        ev = pytrec_eval.RelevanceEvaluator({"q": {f"d{i}": g for i, g in labels.items()}}, {"bpref"})
        res = ev.evaluate({"q": {f"d{i}": float(10 - p) for p, i in enumerate(ranked)}})
        out[c] = res["q"]["bpref"] if "q" in res else None
    show("trec_eval", "bpref", out)


def probe_ir_measures():
    import ir_measures

    out = {}
    for c, (ranked, labels, k) in CASES.items():
        qrels = [ir_measures.Qrel("1", f"d{i}", g) for i, g in labels.items()]
        run = [ir_measures.ScoredDoc("1", f"d{i}", float(10 - p)) for p, i in enumerate(ranked)]
        vals = list(ir_measures.gdeval.iter_calc([ir_measures.ERR @ k], qrels, run))
        out[c] = vals[0].value if vals else None
    show("ir_measures", "ERR@k (gdeval, max grade 4)", out)


def probe_torchmetrics():
    import torch
    from torchmetrics.functional.retrieval import retrieval_fall_out
    from torchmetrics.retrieval import RetrievalFallOut, RetrievalRecallAtFixedPrecision

    # torchmetrics ranks every candidate: candidates = the ranked items (short = 2 candidates, k = 5)
    out, out_cls, out_rfp = {}, {}, {}
    for c, (ranked, labels, k) in CASES.items():
        if not ranked:
            out[c] = out_cls[c] = out_rfp[c] = "no candidates"
            continue
        preds = torch.tensor([float(10 - p) for p in range(len(ranked))])
        target = torch.tensor([labels.get(i, 0) >= 1 for i in ranked])
        out[c] = retrieval_fall_out(preds, target, top_k=k)
        m = RetrievalFallOut(top_k=k)
        m.update(preds, target, torch.zeros(len(ranked), dtype=torch.long))
        out_cls[c] = m.compute()
        r = RetrievalRecallAtFixedPrecision(min_precision=0.3, max_k=k)
        r.update(preds, target, torch.zeros(len(ranked), dtype=torch.long))
        rec, best_k = r.compute()
        out_rfp[c] = f"({float(rec):.4f},k={int(best_k)})"
    show("torchmetrics", "retrieval_fall_out (candidates = list)", out)
    show("torchmetrics", "RetrievalFallOut() default action 'pos'", out_cls)
    show("torchmetrics", "RecallAtFixedPrecision(0.3, max_k=k)", out_rfp)
    # all candidates relevant: no non-relevant candidate
    m = RetrievalFallOut(top_k=2)
    m.update(torch.tensor([2.0, 1.0]), torch.tensor([True, True]), torch.tensor([0, 0]))
    show(
        "torchmetrics",
        "RetrievalFallOut, no non-relevant candidate",
        {
            "allrel": m.compute(),
            "functional": retrieval_fall_out(torch.tensor([2.0, 1.0]), torch.tensor([True, True]), top_k=2),
        },
    )


def probe_rectools():
    import numpy as np
    import pandas as pd
    from rectools import Columns
    from rectools.metrics import MAP, NDCG, Intersection, IntraListDiversity, MeanInvUserFreq, Serendipity
    from rectools.metrics.distances import PairwiseHammingDistanceCalculator

    users = list(CASES)
    reco = pd.DataFrame(
        [(u, i, r) for u, (ranked, _, _) in CASES.items() for r, i in enumerate(ranked, 1)],
        columns=[Columns.User, Columns.Item, Columns.Rank],
    )
    test = pd.DataFrame(
        [(u, i) for u, (_, labels, _) in CASES.items() for i, g in labels.items() if g >= 1],
        columns=[Columns.User, Columns.Item],
    )
    test[Columns.Weight], test[Columns.Datetime] = 1.0, pd.Timestamp("2024-01-01")
    prev = pd.DataFrame([(t, i) for t, items in enumerate(TRAIN) for i in items], columns=[Columns.User, Columns.Item])
    prev[Columns.Weight], prev[Columns.Datetime] = 1.0, pd.Timestamp("2024-01-01")
    feats = pd.DataFrame(np.eye(N_ITEMS)[:, :3])
    ref_reco = pd.DataFrame(
        [(u, i, r) for u in users for r, i in enumerate([2, 0, 7], 1)],
        columns=[Columns.User, Columns.Item, Columns.Rank],
    )
    for name, make in [
        ("NDCG(divide_by_achievable=False)", lambda k: NDCG(k=k).calc_per_user(reco, test)),
        ("NDCG(divide_by_achievable=True)", lambda k: NDCG(k=k, divide_by_achievable=True).calc_per_user(reco, test)),
        ("MAP(divide_by_k=True)", lambda k: MAP(k=k, divide_by_k=True).calc_per_user(reco, test)),
        ("Intersection (ref list [2, 0, 7])", lambda k: Intersection(k=k).calc_per_user(reco, ref_reco)),
        (
            "IntraListDiversity (Hamming, 3 features)",
            lambda k: IntraListDiversity(
                k=k, distance_calculator=PairwiseHammingDistanceCalculator(feats)
            ).calc_per_user(reco),
        ),
        ("Serendipity", lambda k: Serendipity(k=k).calc_per_user(reco, test, prev, np.arange(N_ITEMS))),
        ("MeanInvUserFreq", lambda k: MeanInvUserFreq(k=k).calc_per_user(reco, prev)),
    ]:
        out = {}
        for c, (_, _, k) in CASES.items():
            res = _try(make, k)
            out[c] = res if isinstance(res, str) else (res.get(c) if c in res.index else None)
        show("rectools", name, out)


def probe_lenskit():
    import numpy as np
    import pandas as pd
    from lenskit.data import ItemList, from_interactions_df
    from lenskit.metrics import DCG, NDCG, RBP, GeometricRankWeight, MeanPopRank
    from lenskit.metrics.reranking import rank_biased_overlap

    def recs(items):
        return ItemList(item_ids=np.asarray(items, dtype=np.int64), ordered=True)

    def test_list(labels):
        rel = {i: g for i, g in labels.items() if g >= 1}
        return ItemList(item_ids=np.asarray(list(rel), dtype=np.int64), rating=np.asarray(list(rel.values()), float))

    ds = from_interactions_df(
        pd.DataFrame([(t, i) for t, items in enumerate(TRAIN) for i in items], columns=["user_id", "item_id"])
    )
    for name, metric in [
        ("NDCG(k) default LogRankWeight()", lambda k: NDCG(k)),
        ("NDCG(k, gain='rating')", lambda k: NDCG(k, gain="rating")),
        ("DCG(k)", lambda k: DCG(k)),
        ("RBP(k, patience=0.5)", lambda k: RBP(k, patience=0.5)),
        ("RBP(k, patience=0.5, normalize=True)", lambda k: RBP(k, patience=0.5, normalize=True)),
        ("MeanPopRank(k)", lambda k: MeanPopRank(ds, n=k)),
    ]:
        out = {
            c: _try(lambda m, r, t: m.measure_list(r, t), metric(k), recs(ranked), test_list(labels))
            for c, (ranked, labels, k) in CASES.items()
        }
        show("lenskit", name, out)
    out = {
        c: rank_biased_overlap(recs(ranked), recs([2, 0, 7]), GeometricRankWeight(0.5), n=k)
        for c, (ranked, _, k) in CASES.items()
    }
    show("lenskit", "rank_biased_overlap(list, [2, 0, 7], p=.5, n=k)", out)


def probe_recpack():
    import numpy as np
    from recpack.metrics import HitK
    from scipy import sparse

    out = {}
    for c, (ranked, labels, k) in CASES.items():
        y_true = np.zeros((2, N_ITEMS))
        y_pred = np.zeros((2, N_ITEMS))
        y_true[1, 0] = 1  # a second user, so that the case's user may be dropped
        y_pred[1, 0] = 1
        for i, g in labels.items():
            y_true[0, i] = g
        for p, i in enumerate(ranked):
            y_pred[0, i] = 10 - p
        m = HitK(k)
        m.calculate(sparse.csr_matrix(y_true), sparse.csr_matrix(y_pred))
        per_user = m.scores_.sum(axis=1).A1
        out[c] = per_user[0] if len(per_user) == 2 else None
    show("recpack", "HitK (user's row)", out)


def probe_reference():
    import os
    import sys

    import numpy as np

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import references_families as ref

    counts = np.zeros(N_ITEMS)
    for items in TRAIN:
        for i in items:
            counts[i] += 1
    rows = {
        "dcg linear / log2": lambda r, y, k: ref.dcg(r, y, k, gain="linear"),
        "ndcg linear / log2": lambda r, y, k: ref.ndcg(r, y, k, gain="linear"),
        "ndcg binary / log2_clip, empty=nan": lambda r, y, k: ref.ndcg(
            r, y, k, gain="binary", discount="log2_clip", empty=math.nan
        ),
        "ndcg binary / ideal=k_relevant": lambda r, y, k: ref.ndcg(r, y, k, gain="binary", ideal="k_relevant"),
        "rbp p=.5 graded (ranx)": lambda r, y, k: ref.rbp(r, y, 0.5, graded=True),
        "rbp p=.5 binary at k": lambda r, y, k: ref.rbp(r, y, 0.5, k, graded=False),
        "rbp p=.5 binary at k, achievable": lambda r, y, k: ref.rbp(r, y, 0.5, k, graded=False, normalize="achievable"),
        "bpref trec_eval": lambda r, y, k: ref.bpref(r, y),
        "bpref ranx": lambda r, y, k: ref.bpref(r, y, convention="ranx"),
        "err max_grade=4": lambda r, y, k: ref.err(r, y, k),
        "ap denominator=k": lambda r, y, k: ref.average_precision(r, y, k, denominator="k"),
        "hits": lambda r, y, k: ref.hits(r, y, k),
        "intersection with [2, 0, 7]": lambda r, y, k: ref.intersection(r, [2, 0, 7], k),
        "rbo with [2, 0, 7], p=.5 (lenskit)": lambda r, y, k: ref.rank_biased_overlap(r, [2, 0, 7], k, p=0.5),
        "serendipity (n_items 8)": lambda r, y, k: ref.serendipity(r, y, k, counts, N_ITEMS),
        "miuf": lambda r, y, k: ref.mean_inverse_user_frequency(r, k, counts, len(TRAIN)),
        "mean_pop_rank": lambda r, y, k: ref.mean_pop_rank(r, k, counts),
    }
    for name, f in rows.items():
        show("reference", name, {c: _try(f, r, y, k) for c, (r, y, k) in CASES.items()})


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    probe_reference()
    for module, probe in [
        ("ranx", probe_ranx),
        ("pytrec_eval", probe_trec),
        ("ir_measures", probe_ir_measures),
        ("torchmetrics", probe_torchmetrics),
        ("rectools", probe_rectools),
        ("lenskit", probe_lenskit),
        ("recpack", probe_recpack),
    ]:
        if importlib.util.find_spec(module) is not None:
            probe()
