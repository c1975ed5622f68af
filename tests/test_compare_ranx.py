"""Paired comparisons against ranx's ``compare`` on the same users and the same per-user values.

ranx evaluates its Qrels/Run itself (ndcg@k with linear gains, precision@k, recall@k, users
without a relevant item absent from its qrels); the metrics here see the same data as dense
scores and labels with the matching conventions, and ``paired_test`` must reproduce ranx's
p-values: to 1e-9 for the t-test, and within the Monte Carlo error of two seeded randomization
tests for Fisher's test (ranx draws 1,000 sign flips, here 10,000).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ignite_recsys as R

ranx = pytest.importorskip("ranx")

USERS, ITEMS = 40, 60
METRICS = {  # ranx name -> (class, cut-off, keyword arguments with ranx's convention)
    "ndcg@5": (R.NDCG, 5, {"gain_function": "linear_rank"}),
    "precision@10": (R.Precision, 10, {}),
    "recall@10": (R.Recall, 10, {}),
}


def _data(seed):
    rng = np.random.default_rng(seed)
    labels = np.where(rng.random((USERS, ITEMS)) < 0.12, rng.integers(1, 4, (USERS, ITEMS)), 0)
    labels[np.arange(USERS), rng.integers(0, ITEMS, USERS)] = 1 + rng.integers(0, 3, USERS)  # >= 1 relevant each
    good = rng.permutation(USERS * ITEMS).reshape(USERS, ITEMS).astype(np.float64) + 400.0 * labels
    worse = good + rng.normal(0.0, 600.0, (USERS, ITEMS))  # distinct scores: ranx and the stable order agree
    return labels, {"a": good, "b": worse}


def _ranx_compare(labels, runs, stat_test):
    qrels = ranx.Qrels(
        {f"u{u:03d}": {f"i{i}": int(labels[u, i]) for i in range(ITEMS) if labels[u, i] > 0} for u in range(USERS)}
    )
    ranx_runs = [
        ranx.Run({f"u{u:03d}": {f"i{i}": float(s[u, i]) for i in range(ITEMS)} for u in range(USERS)}, name=name)
        for name, s in runs.items()
    ]
    report = ranx.compare(qrels, ranx_runs, metrics=list(METRICS), stat_test=stat_test, max_p=0.05)
    return report.comparisons[frozenset(runs)]


def _per_user_metrics(labels, runs):
    out = {}
    for name, scores in runs.items():
        for ranx_name, (cls, k, kwargs) in METRICS.items():
            metric = cls(top_k=k, per_user=True, **kwargs)
            for rows in np.array_split(np.arange(USERS), 3):  # several batches
                metric.update((torch.from_numpy(scores[rows]), torch.from_numpy(labels[rows].astype(np.float32))))
            out[name, ranx_name] = metric
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_t_test_p_values_equal_ranx_compare(seed):
    labels, runs = _data(seed)
    expected = _ranx_compare(labels, runs, "student")
    metrics = _per_user_metrics(labels, runs)
    for ranx_name in METRICS:
        got = R.paired_test(metrics["a", ranx_name], metrics["b", ranx_name], method="t")
        assert got.num_users == USERS
        assert got.p_value == pytest.approx(float(expected[ranx_name]["p_value"]), abs=1e-9), ranx_name


@pytest.mark.parametrize("seed", [0, 1])
def test_randomization_p_values_agree_with_ranx_fisher(seed):
    labels, runs = _data(seed)
    expected = _ranx_compare(labels, runs, "fisher")
    metrics = _per_user_metrics(labels, runs)
    for ranx_name in METRICS:
        got = R.paired_test(metrics["a", ranx_name], metrics["b", ranx_name], method="randomization", seed=seed)
        # ranx's estimate from 1,000 flips has a standard error of at most 0.016
        assert got.p_value == pytest.approx(float(expected[ranx_name]["p_value"]), abs=0.05), ranx_name


def test_per_user_values_equal_ranx_evaluate():
    labels, runs = _data(3)
    metrics = _per_user_metrics(labels, runs)
    qrels = ranx.Qrels(
        {f"u{u:03d}": {f"i{i}": int(labels[u, i]) for i in range(ITEMS) if labels[u, i] > 0} for u in range(USERS)}
    )
    run = ranx.Run({f"u{u:03d}": {f"i{i}": float(runs["a"][u, i]) for i in range(ITEMS)} for u in range(USERS)})
    for ranx_name in METRICS:
        expected = ranx.evaluate(qrels, run, ranx_name, return_mean=False)
        got = metrics["a", ranx_name].per_user()[:, 0].numpy()
        np.testing.assert_allclose(got, np.asarray(expected, dtype=np.float64), rtol=0, atol=1e-12, err_msg=ranx_name)
