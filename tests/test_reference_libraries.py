"""Agreement to 1e-6 with the reference libraries themselves, each under the arguments that select
its convention (docs/conventions.md). Scores are tie-free where a library orders ties its own way
(trec_eval: docno descending; ranx: arbitrary past 15 documents; torchmetrics P/R/MAP/MRR: topk)."""

import numpy as np
import pytest
import torch

import ignite_recsys as R
from conftest import run_metric

USERS, ITEMS = 2000, 40
TOP_K = [1, 3, 5, 10, 50]  # 50 > ITEMS


def _data(seed, graded, zero_users=0, positive_scores=False):
    rng = np.random.default_rng(seed)
    scores = rng.permutation(USERS * ITEMS).reshape(USERS, ITEMS).astype(np.float64) / (USERS * ITEMS)
    if positive_scores:
        scores += 0.01
    relevant = rng.random((USERS, ITEMS)) < 0.15
    relevant[np.arange(USERS), rng.integers(0, ITEMS, USERS)] = True  # every user has one
    grades = rng.integers(1, 5, (USERS, ITEMS)) if graded else np.ones((USERS, ITEMS), int)
    relevance = np.where(relevant, grades, 0)
    relevance[:zero_users] = 0
    return torch.tensor(scores, dtype=torch.float64), torch.tensor(relevance, dtype=torch.float64)


def _ours(metric, scores, relevance):
    return run_metric(metric, [(scores[:700], relevance[:700]), (scores[700:], relevance[700:])])


@pytest.mark.parametrize("graded", [False, True])
def test_trec_eval(graded):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    scores, relevance = _data(1, graded, zero_users=25)
    qrels = {f"q{u}": {f"d{i:03d}": int(relevance[u, i]) for i in range(ITEMS)} for u in range(USERS)}
    run = {f"q{u}": {f"d{i:03d}": float(scores[u, i]) for i in range(ITEMS)} for u in range(USERS)}
    cuts = ",".join(map(str, TOP_K))
    measures = {f"ndcg_cut.{cuts}", f"P.{cuts}", f"recall.{cuts}", f"map_cut.{cuts}", f"success.{cuts}", "Rprec"}
    per_query = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)

    def mean(name):
        return float(np.mean([per_query[f"q{u}"][name] for u in range(USERS)]))

    common = dict(ignore_zero_hits=False)  # trec_eval includes judged queries without a relevant doc as 0
    checks = {
        "ndcg_cut": R.NDCG(TOP_K, gain_function="linear_rank", **common),
        "P": R.Precision(TOP_K, **common),
        "recall": R.Recall(TOP_K, **common),
        "map_cut": R.MAP(TOP_K, normalization="relevant", **common),
        "success": R.HitRate(TOP_K, **common),
    }
    for prefix, metric in checks.items():
        expected = [mean(f"{prefix}_{k}") for k in TOP_K]
        np.testing.assert_allclose(_ours(metric, scores, relevance), expected, atol=1e-6, err_msg=prefix)
    assert _ours(R.RPrecision(**common), scores, relevance) == pytest.approx(mean("Rprec"), abs=1e-6)


@pytest.mark.parametrize("graded", [False, True])
def test_ranx(graded):
    ranx = pytest.importorskip("ranx")
    scores, relevance = _data(2, graded)
    qrels = ranx.Qrels.from_dict(
        {f"q{u}": {f"d{i}": int(relevance[u, i]) for i in range(ITEMS) if relevance[u, i] > 0} for u in range(USERS)}
    )
    run = ranx.Run.from_dict({f"q{u}": {f"d{i}": float(scores[u, i]) for i in range(ITEMS)} for u in range(USERS)})
    names = ["ndcg", "ndcg_burges", "precision", "recall", "map", "mrr", "hit_rate", "f1"]
    expected = ranx.evaluate(qrels, run, [f"{n}@{k}" for n in names for k in TOP_K] + ["r-precision"])
    checks = {
        "ndcg": R.NDCG(TOP_K, gain_function="linear_rank"),
        "ndcg_burges": R.NDCG(TOP_K, gain_function="exp_rank"),
        "precision": R.Precision(TOP_K),
        "recall": R.Recall(TOP_K),
        "map": R.MAP(TOP_K, normalization="relevant"),
        "mrr": R.MRR(TOP_K),
        "hit_rate": R.HitRate(TOP_K),
        "f1": R.F1(TOP_K),
    }
    for name, metric in checks.items():
        np.testing.assert_allclose(
            _ours(metric, scores, relevance), [expected[f"{name}@{k}"] for k in TOP_K], atol=1e-6, err_msg=name
        )
    assert _ours(R.RPrecision(), scores, relevance) == pytest.approx(expected["r-precision"], abs=1e-6)


def test_torchmetrics():
    tm = pytest.importorskip("torchmetrics.functional.retrieval")
    scores, relevance = _data(3, graded=False, zero_users=10, positive_scores=True)
    users = 400
    scores, relevance = scores[:users], relevance[:users]
    tied = torch.round(scores * 8) / 8 + 0.01  # heavy ties, still positive
    graded = relevance * torch.randint(1, 4, relevance.shape, generator=torch.Generator().manual_seed(0))
    for k in TOP_K:
        # NDCG: tie-averaged, linear gain, graded targets, empty users count 0.
        expected = np.mean([tm.retrieval_normalized_dcg(tied[u], graded[u], top_k=k).item() for u in range(users)])
        ours = run_metric(R.NDCG(k, False, gain_function="linear_rank", ties="average"), [(tied, graded)])
        assert ours[0] == pytest.approx(expected, abs=1e-6), k
        target = relevance.bool()
        for fn, metric in [
            (tm.retrieval_precision, R.Precision(k, False)),
            (tm.retrieval_recall, R.Recall(k, False)),
            (tm.retrieval_reciprocal_rank, R.MRR(k, False)),
            (tm.retrieval_hit_rate, R.HitRate(k, False)),
            (tm.retrieval_average_precision, R.MAP(k, False, normalization="hits")),
        ]:
            expected = np.mean([fn(scores[u], target[u], top_k=k).item() for u in range(users)])
            assert run_metric(metric, [(scores, relevance)])[0] == pytest.approx(expected, abs=1e-6), (fn, k)
    expected = np.mean([tm.retrieval_r_precision(scores[u], relevance[u].bool()).item() for u in range(users)])
    assert run_metric(R.RPrecision(ignore_zero_hits=False), [(scores, relevance)]) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("ignore_ties", [False, True])
def test_sklearn_ndcg_score(ignore_ties):
    metrics = pytest.importorskip("sklearn.metrics")
    scores, relevance = _data(4, graded=True, zero_users=10)
    if not ignore_ties:
        scores = torch.round(scores * 10) / 10  # heavy ties: sklearn averages them
    ties = "stable" if ignore_ties else "average"
    for k in TOP_K:
        expected = metrics.ndcg_score(relevance.numpy(), scores.numpy(), k=k, ignore_ties=ignore_ties)
        ours = run_metric(R.NDCG(k, False, gain_function="linear_rank", ties=ties), [(scores, relevance)])
        assert ours[0] == pytest.approx(expected, abs=1e-6), k


def test_the_migration_pages_torchmetrics_recipe_equals_torchmetrics_on_ragged_queries():
    """The page's to_rows (run from the page itself) on queries of 3 to 12 documents: NDCG, FallOut
    and Precision(min_k_items) equal torchmetrics' retrieval metrics on the flat inputs; padding
    with -inf and 0 alone (no exclusion) would change FallOut and Precision(min_k_items)."""
    import pathlib
    import re

    retrieval = pytest.importorskip("torchmetrics.retrieval")
    page = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "migration.md").read_text()
    [block] = [
        b
        for b in re.findall(r"^```python\n(.*?)^```$", page, flags=re.MULTILINE | re.DOTALL)
        if "def to_rows(preds" in b
    ]
    generator = torch.Generator().manual_seed(2)
    lengths = torch.randint(3, 13, (40,), generator=generator)
    indexes = torch.repeat_interleave(torch.arange(40), lengths)
    preds = torch.rand(len(indexes), generator=generator, dtype=torch.float64)
    target = (torch.rand(len(indexes), generator=generator) < 0.3).long()
    namespace = {"preds": preds, "target": target, "indexes": indexes}
    exec(block, namespace)  # the page's code: to_rows and an NDCG@10 updated with its rows
    expected = retrieval.RetrievalNormalizedDCG(top_k=10)(preds, target, indexes=indexes)
    assert namespace["metric"].compute() == pytest.approx([float(expected)], abs=1e-6)
    scores, relevance, padding = namespace["to_rows"](preds, target, indexes)
    pairs = [
        (retrieval.RetrievalFallOut(top_k=5), R.FallOut(5, ignore_zero_hits=False)),
        (retrieval.RetrievalPrecision(top_k=5, adaptive_k=True), R.Precision(5, False, normalization="min_k_items")),
        (retrieval.RetrievalRecall(top_k=5), R.Recall(5, False)),
    ]
    for theirs, ours in pairs:
        ours.update((scores, relevance, padding))
        assert ours.compute() == pytest.approx([float(theirs(preds, target, indexes=indexes))], abs=1e-6), type(ours)
