"""The ranking metrics beyond the classic seven (DCG, Hits, RBP, ERR, FallOut, BPref, NDCG's
discount and ideal conventions, MAP divided by k, RecallAtFixedPrecision) against the peers that
define them, per user: ranx, trec_eval (pytrec-eval-terrier), ir-measures and torchmetrics where
they install, and the numpy references of tests/references_families.py (written from each peer's
definition and checked against RecTools and LensKit in tests/peers/).

The cases (tests/peers/peer_cases.py): ranked lists without ties of 1 to 20 items, graded labels
0..3 on random judged subsets (0 = judged non-relevant), users whose judged items are all
non-relevant, users without a judged non-relevant item, cut-offs past the list and the catalog."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch

import ignite_recsys as R

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import peer_cases  # noqa: E402
import references_families as F  # noqa: E402

USERS = peer_cases.make_users(seed=11)
N = peer_cases.N_ITEMS
QIDS = [f"q{u:03d}" for u in range(len(USERS))]
DOCS = [f"d{i:02d}" for i in range(N)]
TOLERANCE = 1e-12


def _inputs(users=USERS, order="ranked"):
    """(RankedItems of each user's list, the judged labels as a sparse COO tensor: stored zeros are
    judged non-relevant, items without an entry are unjudged)."""
    width = max(len(u[order]) for u in users)
    ids = torch.full((len(users), width), -1, dtype=torch.int64)
    for row, user in enumerate(users):
        ids[row, : len(user[order])] = torch.tensor(user[order])
    rows = [row for row, user in enumerate(users) for _ in user["labels"]]
    items = [item for user in users for item in user["labels"]]
    grades = [float(g) for user in users for g in user["labels"].values()]
    labels = torch.sparse_coo_tensor(torch.tensor([rows, items]), torch.tensor(grades), (len(users), N)).coalesce()
    return R.RankedItems(ids), labels


def _per_user(metric, k_index=0, users=USERS):
    metric.update(_inputs(users))
    values = metric.per_user()
    return values[:, k_index].numpy() if values.ndim == 2 else values.numpy()


def _assert_close(got, expected, tolerance=TOLERANCE):
    np.testing.assert_allclose(
        np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64), rtol=0, atol=tolerance
    )


# --- Against the numpy references of the peers' definitions ---------------------------------------
@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
@pytest.mark.parametrize("gain, ours", [("linear", "linear_rank"), ("exp", "exp_rank"), ("binary", "binary")])
@pytest.mark.parametrize("discount", ["log2", "log2_clip"])
def test_dcg_and_ndcg_conventions(k, gain, ours, discount):
    dcg = _per_user(R.DCG(k, gain_function=ours, discount=discount, ignore_zero_hits=False, per_user=True))
    ndcg = _per_user(R.NDCG(k, gain_function=ours, discount=discount, ignore_zero_hits=False, per_user=True))
    for u, user in enumerate(USERS):
        assert dcg[u] == pytest.approx(
            F.dcg(user["ranked"], user["labels"], k, gain=gain, discount=discount), abs=1e-12
        )
        assert ndcg[u] == pytest.approx(
            F.ndcg(user["ranked"], user["labels"], k, gain=gain, discount=discount), abs=1e-12
        )


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
def test_ndcg_of_k_relevant_items_is_rectools_default(k):
    """RecTools' NDCG divides by the DCG of k relevant items (binary labels, as RecTools')."""
    ndcg = _per_user(R.NDCG(k, gain_function="binary", ideal="k_relevant", ignore_zero_hits=False, per_user=True))
    for u, user in enumerate(USERS):
        expected = F.ndcg(user["ranked"], user["labels"], k, gain="binary", ideal="k_relevant")
        assert ndcg[u] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
def test_map_divided_by_k_and_hits(k):
    ap = _per_user(R.MAP(k, normalization="k", ignore_zero_hits=False, per_user=True))
    hits = _per_user(R.Hits(k, ignore_zero_hits=False, per_user=True))
    for u, user in enumerate(USERS):
        assert ap[u] == pytest.approx(
            F.average_precision(user["ranked"], user["labels"], k, denominator="k"), abs=1e-12
        )
        assert hits[u] == F.hits(user["ranked"], user["labels"], k)


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
@pytest.mark.parametrize("p", [0.5, 0.8, 0.95])
@pytest.mark.parametrize("graded", [True, False])
def test_rbp(k, p, graded):
    values = _per_user(R.RBP(k, persistence=p, graded=graded, ignore_zero_hits=False, per_user=True))
    for u, user in enumerate(USERS):
        assert values[u] == pytest.approx(F.rbp(user["ranked"], user["labels"], p, k, graded=graded), abs=1e-12)


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
@pytest.mark.parametrize("max_grade", [3.0, 4.0])
def test_err(k, max_grade):
    values = _per_user(R.ERR(k, max_grade=max_grade, ignore_zero_hits=False, per_user=True))
    for u, user in enumerate(USERS):
        assert values[u] == pytest.approx(F.err(user["ranked"], user["labels"], k, max_grade=max_grade), abs=1e-12)


def test_err_refuses_grades_above_max_grade():
    metric = R.ERR(3, max_grade=2.0)
    with pytest.raises(ValueError, match="max_grade=2"):
        metric.update(_inputs())
    with pytest.raises(ValueError, match="ties='average'"):
        R.ERR(3, ties="average")


def test_err_max_grade_stays_within_float64():
    """2**max_grade must be a float64: 1024 raised an OverflowError in update, it is refused when
    the metric is built; at 1023 a grade-1023 item first stops the cascade there (ERR 1, by hand:
    (2**1023 - 1) / 2**1023 rounds to 1)."""
    for build in (lambda: R.ERR(2, max_grade=1024), lambda: R.RankingMetrics(2, ["err"], err_max_grade=1e6)):
        with pytest.raises(ValueError, match=r"max_grade must be a finite number > 0 and <= 1023"):
            build()
    metric = R.ERR(2, max_grade=1023)
    metric.update((torch.tensor([[0.9, 0.1]]), torch.tensor([[1023.0, 0.0]])))
    assert metric.compute() == [1.0]


@pytest.mark.parametrize("k", peer_cases.CUTOFFS)
def test_fall_out_over_the_listed_candidates(k):
    """With ranked ids, the candidates are the listed ids (every item of ``full``: the whole catalog)."""
    values = _per_user(
        R.FallOut(k, ignore_zero_hits=False, per_user=True), users=[{**user, "ranked": user["full"]} for user in USERS]
    )
    for u, user in enumerate(USERS):
        expected = F.fall_out(user["full"], user["labels"], range(N), k)
        assert values[u] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("convention, ours", [("trec_eval", "unjudged"), ("ranx", "judged")])
def test_bpref_over_the_whole_list(convention, ours):
    users = [
        dict(user, labels={**user["labels"], **({user["full"][-1]: -1} if u % 3 == 0 else {})})
        for u, user in enumerate(USERS)
    ]  # some negative labels
    values = _per_user(R.BPref(N, negative_labels=ours, ignore_zero_hits=False, per_user=True), users=users)
    for u, user in enumerate(users):
        expected = F.bpref(user["ranked"], user["labels"], convention=convention)
        if np.isnan(expected):  # ranx: 0/0 when nothing is judged non-relevant; ours follows trec_eval there
            expected = F.bpref(user["ranked"], user["labels"], convention="trec_eval")
        assert values[u] == pytest.approx(expected, abs=1e-12)


# --- Against the peers themselves ------------------------------------------------------------
def _ranx(metric, users=USERS, order="ranked"):
    ranx = pytest.importorskip("ranx")
    qrels = ranx.Qrels({q: {DOCS[i]: g for i, g in u["labels"].items()} for q, u in zip(QIDS, users)})
    run = ranx.Run(
        {q: {DOCS[i]: float(len(u[order]) - p) for p, i in enumerate(u[order])} for q, u in zip(QIDS, users)}
    )
    values = ranx.evaluate(qrels, run, metric, return_mean=False)
    return dict(zip(sorted(QIDS), values))


@pytest.mark.parametrize("k", [1, 5, 25])
def test_dcg_hits_and_rbp_equal_ranx(k):
    dcg = _per_user(R.DCG(k, gain_function="linear_rank", ignore_zero_hits=False, per_user=True))
    burges = _per_user(R.DCG(k, ignore_zero_hits=False, per_user=True))
    hits = _per_user(R.Hits(k, ignore_zero_hits=False, per_user=True))
    expected = (_ranx(f"dcg@{k}"), _ranx(f"dcg_burges@{k}"), _ranx(f"hits@{k}"))
    cut = [{**user, "ranked": user["ranked"][:k]} for user in USERS]  # ranx's rbp reads the whole run
    rbp = _per_user(R.RBP(k, persistence=0.8, ignore_zero_hits=False, per_user=True))
    rbp_expected = _ranx("rbp.8", users=cut)
    for u, q in enumerate(QIDS):
        assert dcg[u] == pytest.approx(expected[0][q], abs=1e-12)
        assert burges[u] == pytest.approx(expected[1][q], abs=1e-12)
        assert hits[u] == expected[2][q]
        assert rbp[u] == pytest.approx(rbp_expected[q], abs=1e-12)


def test_bpref_equals_trec_eval():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    qrels = {q: {DOCS[i]: int(g) for i, g in u["labels"].items()} for q, u in zip(QIDS, USERS)}
    run = {q: {DOCS[i]: float(len(u["ranked"]) - p) for p, i in enumerate(u["ranked"])} for q, u in zip(QIDS, USERS)}
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"bpref"}).evaluate(run)
    values = _per_user(R.BPref(N, ignore_zero_hits=False, per_user=True))
    for u, q in enumerate(QIDS):
        assert values[u] == pytest.approx(expected.get(q, {}).get("bpref", 0.0), abs=1e-12)


@pytest.mark.parametrize("k", [1, 3, 10])
def test_err_equals_ir_measures(k):
    ir_measures = pytest.importorskip("ir_measures")
    if not ir_measures.gdeval.is_available():
        pytest.skip("ir-measures' ERR runs gdeval.pl, which needs perl")
    topics = [str(u) for u in range(len(USERS))]  # gdeval reads numeric topic ids
    qrels = [ir_measures.Qrel(q, DOCS[i], int(g)) for q, u in zip(topics, USERS) for i, g in u["labels"].items()]
    run = [
        ir_measures.ScoredDoc(q, DOCS[i], float(len(u["ranked"]) - p))
        for q, u in zip(topics, USERS)
        for p, i in enumerate(u["ranked"])
    ]
    expected = {m.query_id: m.value for m in ir_measures.gdeval.iter_calc([ir_measures.ERR @ k], qrels, run)}
    values = _per_user(R.ERR(k, ignore_zero_hits=False, per_user=True))
    for u, q in enumerate(topics):
        assert values[u] == pytest.approx(expected.get(q, 0.0), abs=1e-5)  # gdeval prints 5 decimals


@pytest.mark.parametrize("k", [1, 3, 10])
def test_fall_out_equals_torchmetrics(k):
    functional = pytest.importorskip("torchmetrics.functional.retrieval")
    generator = torch.Generator().manual_seed(5)
    scores = torch.rand(30, 12, generator=generator)
    labels = (torch.rand(30, 12, generator=generator) < 0.3).long()
    labels[0] = 1  # every candidate relevant: 0, as torchmetrics' function
    ours = R.FallOut(k, ignore_zero_hits=False, per_user=True)
    ours.update((scores, labels))
    for u in range(30):
        expected = float(functional.retrieval_fall_out(scores[u], labels[u], top_k=k))
        assert float(ours.per_user()[u, 0]) == pytest.approx(expected, abs=1e-6)  # torchmetrics is float32


@pytest.mark.parametrize("min_precision", [0.0, 0.2, 0.5, 0.9])
@pytest.mark.parametrize("adaptive_k", [False, True])
def test_recall_at_fixed_precision_equals_torchmetrics_and_the_reference(min_precision, adaptive_k):
    from torchmetrics.retrieval import RetrievalRecallAtFixedPrecision

    generator = torch.Generator().manual_seed(9)
    scores = torch.rand(25, 8, generator=generator)
    labels = (torch.rand(25, 8, generator=generator) < 0.3).long()
    labels[:3] = 0  # users without a relevant item: zero curves, counted
    ours = R.RecallAtFixedPrecision(max_k=6, min_precision=min_precision, adaptive_k=adaptive_k)
    ours.update((scores[:10], labels[:10]))
    ours.update((scores[10:], labels[10:]))
    theirs = RetrievalRecallAtFixedPrecision(min_precision=min_precision, max_k=6, adaptive_k=adaptive_k)
    indexes = torch.arange(25).unsqueeze(1).expand(25, 8)
    theirs.update(scores.flatten(), labels.flatten(), indexes=indexes.flatten())
    recall, k = theirs.compute()
    got = ours.compute()
    assert got[0] == pytest.approx(float(recall), abs=1e-6) and got[1] == int(k)
    # and the numpy reference of the mean curves
    curves = [
        F.precision_recall_curve(
            torch.argsort(-scores[u], stable=True).tolist(), labels[u].numpy(), 6, n_candidates=8, adaptive_k=adaptive_k
        )
        for u in range(25)
    ]
    precision, recall_curve = np.mean([c[0] for c in curves], 0), np.mean([c[1] for c in curves], 0)
    expected = F.recall_at_fixed_precision(precision, recall_curve, min_precision)
    assert got[0] == pytest.approx(expected[0], abs=1e-12) and got[1] == expected[1]


def test_recall_at_fixed_precision_equal_to_the_threshold_qualifies_however_batched():
    """Ten users whose mean P@3 is 15/30 = 1/2 exactly (Fractions): k = 3 qualifies for
    min_precision=0.5 whatever the batches; fed as [user 0], [users 1-9] the float64 sum of P@3
    came out one ulp under 1/2 and k = 3 was dropped."""
    from fractions import Fraction

    rng = np.random.default_rng(3)
    n, items = int(rng.integers(3, 12)), 6
    scores = torch.from_numpy(rng.permutation(n * items).reshape(n, items).astype(np.float32))
    labels = (rng.random((n, items)) < 0.5).astype(np.float32)
    labels[:, 0] = 1
    order = np.argsort(-scores.numpy(), axis=1, kind="stable")
    hits = [[int(labels[u, order[u, :k]].sum()) for k in (1, 2, 3)] for u in range(n)]
    precision = [sum(Fraction(h[k - 1], k) for h in hits) / n for k in (1, 2, 3)]
    recall = [sum(Fraction(h[k - 1], int(labels[u].sum())) for u, h in enumerate(hits)) / n for k in (1, 2, 3)]
    assert precision[2] == Fraction(1, 2)
    expected = max((r, k) for k, (p, r) in enumerate(zip(precision, recall), 1) if p >= Fraction(1, 2))
    for batches in ([range(n)], [range(1), range(1, n)]):
        metric = R.RecallAtFixedPrecision(max_k=3, min_precision=0.5)
        for rows in batches:
            metric.update((scores[list(rows)], torch.from_numpy(labels[list(rows)])))
        got = metric.compute()
        assert got[1] == expected[1] and got[0] == pytest.approx(float(expected[0]), abs=1e-12)


def test_recall_at_fixed_precision_is_its_own_metric():
    """It picks a k on the mean curves: no RankingMetrics API (intervals, per-user values), its
    state saved and loaded under its own configuration, and (recall, k) scalars in an Engine."""
    from ignite.engine import Engine

    assert not issubclass(R.RecallAtFixedPrecision, R.RankingMetrics)
    for method in ("confidence_interval", "per_user", "compute_groups", "compute_dict"):
        assert not hasattr(R.RecallAtFixedPrecision, method), method
    generator = torch.Generator().manual_seed(3)
    batches = [(torch.rand(6, 7, generator=generator), (torch.rand(6, 7, generator=generator) < 0.4).long())]
    batches.append((torch.rand(5, 7, generator=generator), (torch.rand(5, 7, generator=generator) < 0.4).long()))
    metric = R.RecallAtFixedPrecision(max_k=4, min_precision=0.3)
    metric.update(batches[0])
    loaded = R.RecallAtFixedPrecision(max_k=4, min_precision=0.3)
    loaded.load_state_dict(metric.state_dict())
    loaded.update(batches[1])
    whole = R.RecallAtFixedPrecision(max_k=4, min_precision=0.3)
    for batch in batches:
        whole.update(batch)
    assert loaded.compute() == whole.compute() and loaded.curves() == whole.curves()
    with pytest.raises(ValueError, match="max_k=4 \\(this metric: 5\\)"):
        R.RecallAtFixedPrecision(max_k=5, min_precision=0.3).load_state_dict(metric.state_dict())
    engine = Engine(lambda engine, batch: batch)
    attached = R.RecallAtFixedPrecision(max_k=4, min_precision=0.3)
    attached.attach(engine, "rafp")
    engine.run(batches, max_epochs=1)
    recall, k = whole.compute()
    assert engine.state.metrics["rafp"] == (recall, k)
    assert (engine.state.metrics["rafp/recall"], engine.state.metrics["rafp/k"]) == (recall, k)


@pytest.mark.parametrize("form", ["mask", "ItemIds", "csr"])
def test_fall_out_with_excluded_items_over_a_long_catalog(form):
    """Scores over 3,000 items, dense graded labels, excluded items given as a dense mask (read
    as a list on CPU), as ``ItemIds`` with repeated ids, or as a CSR tensor, relevant items among
    them: the non-relevant candidates leave the excluded items out, per user against the formula."""
    rng = np.random.default_rng(21)
    users, items, k = 6, 3_000, [5, 50]
    scores = rng.permutation(users * items).reshape(users, items).astype(np.float32)
    labels = np.where(rng.random((users, items)) < 0.02, rng.integers(1, 4, size=(users, items)), 0)
    excluded = [rng.choice(items, 40, replace=False) for _ in range(users)]
    for u in range(users):  # some relevant items and some of the best-scored excluded
        excluded[u] = np.concatenate([excluded[u], np.flatnonzero(labels[u])[:3], np.argsort(-scores[u])[:4]])
    mask = np.zeros((users, items), dtype=bool)
    for u, ids in enumerate(excluded):
        mask[u, ids] = True
    width = max(len(ids) for ids in excluded)
    if form == "mask":
        exclude = torch.from_numpy(mask)
    elif form == "ItemIds":  # every id listed, two relevant ones twice, -1 padding
        ids = np.full((users, width + 2), -1)
        for u, chosen in enumerate(excluded):
            ids[u, : len(chosen) + 2] = np.concatenate([chosen, chosen[40:42]])
        exclude = R.ItemIds(torch.from_numpy(ids))
    else:
        exclude = torch.from_numpy(mask).float().to_sparse_csr()
    metric = R.FallOut(k, ignore_zero_hits=False, per_user=True)
    metric.update((torch.from_numpy(scores), torch.from_numpy(labels).float(), exclude))
    values = metric.per_user()
    for u in range(users):
        candidates = np.flatnonzero(~mask[u])
        ranked = candidates[np.argsort(-scores[u, candidates], kind="stable")]
        judged = {int(i): float(labels[u, i]) for i in np.flatnonzero(labels[u])}
        for j, cut in enumerate(k):
            expected = F.fall_out(ranked.tolist(), judged, candidates.tolist(), cut)
            assert values[u, j].item() == pytest.approx(expected, abs=1e-12), (form, u, cut)
