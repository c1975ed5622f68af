"""Ranked ids cost memory by the lists' width and the targets, not by the cut-off: a cut-off far
past every list gives the reference values (numpy, tests/references.py) in bounded memory; a
cut-off no ranking can reach is refused when the metric is built; ``evaluate`` honours the catalog
it is given (``num_items``) for ranked ids and runs."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import ignite_recsys as R
from ignite_recsys._registry import CUTOFF_METRICS

from references import user_values

LARGEST = 2**31 - 1


def _lists(seed=0, users=40, items=30, width=6, targets=4):
    rng = np.random.default_rng(seed)
    ranked = np.stack([rng.permutation(items)[:width] for _ in range(users)])
    for u in range(0, users, 5):
        ranked[u, rng.integers(1, width) :] = -1  # shorter lists
    ids = np.stack([rng.permutation(items)[:targets] for _ in range(users)])
    grades = rng.integers(-1, 4, ids.shape).astype(np.float64)
    ids[::7, -1] = -1  # padded targets
    return ranked, ids, grades, items


@pytest.mark.parametrize("k", [3, 10**6, LARGEST])
def test_cutoffs_past_the_lists_match_the_reference(k):
    ranked, ids, grades, items = _lists()
    metric = R.RankingMetrics([2, k], metrics=list(CUTOFF_METRICS), ignore_zero_hits=False)
    metric.update((R.RankedItems(torch.from_numpy(ranked)), R.ItemIds(torch.from_numpy(ids), torch.from_numpy(grades))))
    values = metric.compute()
    expected: dict = {}
    for u in range(len(ranked)):
        rel = np.zeros(items)
        listed = ids[u] >= 0
        rel[ids[u][listed]] = grades[u][listed]
        ranking = [int(i) for i in ranked[u] if i >= 0]
        for cut in (2, k):
            out = user_values(ranking, rel, cut, judged=set(ids[u][listed].tolist()))
            for name in CUTOFF_METRICS:
                expected.setdefault(f"{name}@{cut}", []).append(out[name])
    for key, per_user in expected.items():
        assert values[key] == pytest.approx(np.mean(per_user), abs=1e-12), key


def test_a_cutoff_no_ranking_reaches_is_refused_when_built():
    for k in (2**31, 2**40, 10**20):
        with pytest.raises(ValueError, match=r"top_k must be at most 2147483647"):
            R.NDCG(top_k=k)
        with pytest.raises(ValueError, match=r"top_k must be at most 2147483647"):
            R.RankingMetrics([5, k])


def test_ndcg_k_relevant_at_a_huge_cutoff_matches_a_sum_of_the_weights():
    """IDCG@k of k items of the largest gain, for k past 2**20: the weights' sum by numpy."""
    k = 3 * 2**20 + 11
    metric = R.NDCG(top_k=k, ideal="k_relevant", gain_function="linear_rank")
    targets = R.ItemIds(torch.tensor([[2, 7]]), torch.tensor([[2.0, 3.0]]))
    metric.update((R.RankedItems(torch.tensor([[4, 2]])), targets))
    weights = 1 / np.log2(np.arange(2, k + 2, dtype=np.float64))
    expected = (2.0 * weights[1]) / (3.0 * weights.sum())
    assert metric.compute()[0] == pytest.approx(expected, rel=1e-13)


def test_ranked_ids_wider_than_the_catalog_with_dense_grades():
    """Lists padded past the catalog's width, dense float grades, k past the catalog: the value,
    not an error of the ideal ranking's selection."""
    labels = torch.tensor([[0.5, 1.0, 2.0], [3.0, 0.0, 1.0]])
    ranked = torch.tensor([[0, 1, 2, -1, -1, -1], [1, -1, -1, -1, -1, -1]])
    metric = R.NDCG(top_k=[2, 6])
    metric.update((R.RankedItems(ranked), labels))
    expected = []
    for u in range(2):
        ranking = [int(i) for i in ranked[u] if i >= 0]
        expected.append([user_values(ranking, labels[u].numpy(), k)["ndcg"] for k in (2, 6)])
    np.testing.assert_allclose(metric.compute(), np.mean(expected, 0), rtol=1e-12)


# --- evaluate() and the catalog -----------------------------------------------------------------
def _test_table():
    return R.Interactions(torch.tensor([0, 0, 1]), torch.tensor([1, 3, 0]))


def test_evaluate_refuses_ranked_ids_past_an_explicit_catalog():
    ranked = torch.tensor([[1, 60, 3], [0, 2, -1]])
    users = torch.tensor([0, 1])
    # without num_items the catalog is not known: item 60 is an item the test table does not hold
    assert R.evaluate((users, ranked), _test_table(), ["recall@3"], progress=False)["recall@3"] == 1.0
    with pytest.raises(ValueError, match=r"item id 60, past the catalog of num_items=50 .*pass the catalog's size"):
        R.evaluate((users, ranked), _test_table(), ["recall@3"], num_items=50, progress=False)
    with pytest.raises(ValueError, match=r"num_items=3 is too small for the test table"):
        R.evaluate((users, ranked), _test_table(), ["recall@3"], num_items=3, progress=False)
    assert R.evaluate((users, ranked), _test_table(), ["recall@3"], num_items=61, progress=False)["recall@3"] == 1.0


def test_evaluate_refuses_run_items_past_an_explicit_catalog():
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    run = pd.DataFrame({"user": [0, 0, 0, 1, 1], "item": [1, 60, 3, 0, 2], "score": [3.0, 2, 1, 2, 1]})
    assert R.evaluate(run, _test_table(), ["recall@3"], progress=False)["recall@3"] == 1.0
    with pytest.raises(ValueError, match=r"the run ranks item 60 \(for user 0\), past the catalog of num_items=50"):
        R.evaluate(run, _test_table(), ["recall@3"], num_items=50, progress=False)
    # a test table built with its catalog: the same
    test = R.Interactions(torch.tensor([0, 0, 1]), torch.tensor([1, 3, 0]), num_items=50)
    with pytest.raises(ValueError, match=r"the run ranks item 60"):
        R.evaluate(run, test, ["recall@3"], progress=False)


# --- Peak memory --------------------------------------------------------------------------------
MEMORY_PROBE = r"""
import sys, os, torch
sys.path.insert(0, os.getcwd())
import ignite_recsys as R
from ignite_recsys._registry import CUTOFF_METRICS

def rss(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith(field))

def peak(run):
    run()  # warm-up: the thread pool, the caches
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # resets the peak resident set size to the current one
    base = rss("VmRSS:")
    run()
    return (rss("VmHWM:") - base) / 2**20

g = torch.Generator().manual_seed(0)
users, items = 2000, 50
ranked = torch.stack([torch.randperm(items, generator=g)[:5] for _ in range(users)])
targets = torch.stack([torch.randperm(items, generator=g)[:3] for _ in range(users)])
test = R.Interactions(torch.arange(users).repeat_interleave(3), targets.flatten())

for k in (5, 20000, 2**31 - 1):
    metric = R.RankingMetrics([3, k], metrics=list(CUTOFF_METRICS))
    def update():
        metric.reset()
        metric.update((R.RankedItems(ranked), R.ItemIds(targets)))
    print("update", k, peak(update))
    asked = [f"recall@{k}", f"ndcg@{k}"]
    print("evaluate", k, peak(lambda: R.evaluate((torch.arange(users), ranked), test, asked, progress=False)))
"""


@pytest.mark.slow
@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="needs Linux's peak-RSS reset")
def test_peak_memory_of_ranked_ids_does_not_grow_with_k():
    """2,000 users, 5-item lists of a 50-item catalog: the peak extra resident memory of an update
    and of evaluate() at k = 20,000 and 2**31 - 1 stays within a few MiB of k = 5."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE], capture_output=True, text=True, check=True, env=env, cwd=root
    )
    peaks = {tuple(line.split()[:2]): float(line.split()[2]) for line in result.stdout.strip().splitlines()}
    assert len(peaks) == 6, result.stdout
    for (kind, k), mib in peaks.items():
        assert mib <= peaks[kind, "5"] + 8, (kind, k, peaks)
