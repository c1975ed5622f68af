"""The relevant count in row pieces: the same |R| as numpy on every label dtype and threshold, on
the CPU path and the accelerator path (many pieces, uneven ones), and on accelerators bounded
temporaries: no float32 copy of the batch (the meta device gives the real shapes, 1,024 x 1M,
without their memory; a subprocess gives the resident memory of a scaled-down batch)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import ignite_recsys as R
from ignite_recsys._core import relevance as relevance_module
from ignite_recsys._core import tuning
from ignite_recsys._core.relevance import Relevance, relevance_pass

LABEL_KINDS = ["graded_float32", "float64", "float16", "bool", "int64", "int32"]


def _labels(kind: str, rng, rows: int, cols: int) -> np.ndarray:
    grades = rng.integers(-1, 4, (rows, cols)) * (rng.random((rows, cols)) < 0.3)
    if kind == "bool":
        return grades > 0
    if kind.startswith("int"):
        return grades.astype(kind)
    values = grades + rng.choice([0.0, 0.5, 0.7], (rows, cols))  # fractions near the thresholds
    return values.astype({"graded_float32": np.float32, "float64": np.float64, "float16": np.float16}[kind])


def _numpy_count(labels: np.ndarray, threshold) -> np.ndarray:
    """|R| from the definition: y > 0 without a threshold, else y >= t in the labels' own dtype
    (True is 1)."""
    values = labels.astype(np.int64) if labels.dtype == bool else labels
    if threshold is None:
        return (values > 0).sum(1)
    if np.issubdtype(values.dtype, np.floating):
        return (values >= values.dtype.type(threshold)).sum(1)
    return (values >= threshold).sum(1)


@pytest.mark.parametrize("kind", LABEL_KINDS)
@pytest.mark.parametrize("threshold", [None, 1.0, 0.7, 2.5])
@pytest.mark.parametrize("accelerator", [False, True], ids=["cpu", "accelerator_path"])
def test_counts_equal_numpy_in_every_piece_layout(monkeypatch, kind, threshold, accelerator):
    rng = np.random.default_rng(abs(hash((kind, threshold))) % 2**32)
    labels = _labels(kind, rng, 37, 5003)
    if accelerator:  # as on a GPU, with pieces of a few rows (the last one shorter)
        monkeypatch.setattr(tuning, "cpu_tuned", lambda device: False)
        monkeypatch.setattr(tuning, "ACCELERATOR_CHUNK", 64)
        monkeypatch.setattr(relevance_module, "ACCELERATOR_COUNT_BYTES", 4 * 5003 * 3)
    tensor = torch.from_numpy(labels)
    found = relevance_pass(tensor, Relevance.of(threshold, tensor.dtype))
    expected = _numpy_count(labels, threshold)
    assert found.num_relevant.dtype == torch.float64
    np.testing.assert_array_equal(found.num_relevant.numpy(), expected)
    np.testing.assert_array_equal(found.has_relevant.numpy(), expected > 0)


@pytest.mark.parametrize("accelerator", [False, True], ids=["cpu", "accelerator_path"])
def test_a_nan_label_in_any_piece_is_found(monkeypatch, accelerator):
    if accelerator:
        monkeypatch.setattr(tuning, "cpu_tuned", lambda device: False)
        monkeypatch.setattr(tuning, "ACCELERATOR_CHUNK", 64)
        monkeypatch.setattr(relevance_module, "ACCELERATOR_COUNT_BYTES", 4 * 3001 * 2)
    for row in (0, 17, 36):
        labels = torch.zeros(37, 3001)
        labels[row, 1234] = float("nan")
        assert bool(relevance_pass(labels, Relevance.of(1.0, labels.dtype)).has_nan)


def _r_precision(scores: np.ndarray, labels: np.ndarray, threshold: float) -> float:
    """R-Precision by its definition (stable order: score descending, then item index)."""
    values = []
    for row_scores, row_labels in zip(scores, labels):
        relevant = row_labels.astype(np.float64) >= threshold
        count = int(relevant.sum())
        if count:
            order = np.lexsort((np.arange(len(row_scores)), -row_scores.astype(np.float64)))
            values.append(relevant[order[:count]].sum() / count)
    return float(np.mean(values))


@pytest.mark.parametrize("kind", ["graded_float32", "bool", "int64"])
def test_r_precision_and_recall_on_the_accelerator_path_equal_numpy(monkeypatch, kind):
    monkeypatch.setattr(tuning, "cpu_tuned", lambda device: False)
    monkeypatch.setattr(tuning, "ACCELERATOR_CHUNK", 64)
    monkeypatch.setattr(relevance_module, "ACCELERATOR_COUNT_BYTES", 4 * 2000 * 5)
    rng = np.random.default_rng(7)
    labels = _labels(kind, rng, 29, 2000)
    scores = rng.random((29, 2000)).astype(np.float32)
    r_precision = R.RPrecision()
    r_precision.update((torch.from_numpy(scores), torch.from_numpy(labels)))
    assert r_precision.compute() == pytest.approx(_r_precision(scores, labels, 1.0), abs=1e-12)
    recall = R.Recall([10])
    recall.update((torch.from_numpy(scores), torch.from_numpy(labels)))
    relevant = labels.astype(np.float64) >= 1
    top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
    counted = relevant.sum(1) > 0
    expected = (np.take_along_axis(relevant, top, 1).sum(1)[counted] / relevant.sum(1)[counted]).mean()
    assert recall.compute() == pytest.approx([expected], abs=1e-12)


class _LargestAllocation(TorchDispatchMode):
    """The largest tensor an operation makes (not a view of another)."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not any(returned.alias_info is not None for returned in func._schema.returns):
            for tensor in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(tensor, torch.Tensor):
                    self.bytes = max(self.bytes, tensor.numel() * tensor.element_size())
        return out


@pytest.mark.parametrize(
    "dtype, width",
    [(torch.float32, 1_000_000), (torch.float16, 1_000_000), (torch.int64, 1_000_000), (torch.bool, 999_999)],
)
def test_counting_on_an_accelerator_makes_no_copy_of_the_batch(dtype, width):
    """At 1,024 x 1M (the meta device: shapes without memory) the count's largest temporary is
    its comparison buffer of one piece, at most ``ACCELERATOR_COUNT_BYTES`` (128 MiB), where a
    float32 copy of the batch takes 3.8 GiB (bool labels of a width no multiple of 8: the padded
    copy of one piece, where that of the batch takes 0.95 GiB); every metric that counts |R| stays
    within it."""
    labels = torch.empty(1024, width, dtype=dtype, device="meta")
    spy = _LargestAllocation()
    with spy:
        relevance_pass(labels, Relevance.of(1.0, dtype))
    assert spy.bytes <= relevance_module.ACCELERATOR_COUNT_BYTES
    scores = torch.empty(1024, width, device="meta")
    for metric in (R.RankingMetrics([1, 5, 10, 20, 50, 100], device="meta"), R.Recall([10], device="meta")):
        spy = _LargestAllocation()
        with spy:
            metric.update((scores, labels))
        assert spy.bytes <= relevance_module.ACCELERATOR_COUNT_BYTES, type(metric).__name__


def test_piece_rows_on_an_accelerator():
    rows = relevance_module._accelerator_count_rows
    assert rows(1024, 1_000_000) == 33  # 33 x 1M float32 = 126 MiB
    assert rows(1024, 100_000) == 256  # a quarter of the rows (98 MiB)
    assert rows(64, 1000) == 64  # a small batch: one piece
    assert rows(3, 100_000_000) == 1


MEMORY_PROBE = r"""
import sys, os, torch
sys.path.insert(0, os.getcwd())
import ignite_recsys as R
from ignite_recsys._core import tuning
tuning.cpu_tuned = lambda device: False  # the accelerator path, on the host
B, N = 64, 100_000
g = torch.Generator().manual_seed(0)
scores = torch.rand(B, N, generator=g)
labels = (torch.rand(B, N, generator=g) < 20 / N).float()

def rss(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith(field))

for name, metric in [
    ("Recall", R.Recall([10])),
    ("RankingMetrics", R.RankingMetrics([10])),
    ("RPrecision", R.RPrecision()),  # sorts full rows on accelerators: a piece of rows at a time
    ("RPrecision(ties=average)", R.RPrecision(ties="average")),
]:
    metric.update((scores[:2], labels[:2]))  # warm-up: the thread pool, the state
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # resets the peak resident set size to the current one
    base = rss("VmRSS:")
    metric.update((scores, labels))
    print(name, (rss("VmHWM:") - base) / (scores.numel() * 4 + labels.numel() * 4))
"""


@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="needs Linux's peak-RSS reset")
def test_peak_memory_of_the_accelerator_path_within_a_quarter_of_the_inputs():
    """The accelerator path's update on the host (64 x 100k float32 scores and labels, 51 MB):
    peak extra resident memory within a quarter of the inputs, measured as bench_memory.py does
    (glibc maps every buffer of 64 KiB or more afresh, so freed ones do not count). A float32 copy
    of the labels alone is half of them."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE], capture_output=True, text=True, check=True, env=env, cwd=root
    )
    shares = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in result.stdout.strip().splitlines()}
    assert len(shares) == 4
    for name, share in shares.items():
        assert share <= 0.25, (name, shares)


CPU_RPRECISION_PROBE = r"""
import sys, os, torch
sys.path.insert(0, os.getcwd())
import ignite_recsys as R
B, N = 64, 100_000
g = torch.Generator().manual_seed(0)
scores = torch.rand(B, N, generator=g)

def rss(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith(field))

for relevant in (20, 500, 5_000):
    labels = (torch.rand(B, N, generator=g) < relevant / N).float()
    metric = R.RPrecision()
    metric.update((scores[:2], labels[:2]))
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    base = rss("VmRSS:")
    metric.update((scores, labels))
    print(relevant, (rss("VmHWM:") - base) / (scores.numel() * 4 + labels.numel() * 4))
"""


@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="needs Linux's peak-RSS reset")
def test_r_precision_on_cpu_with_many_relevant_items_within_a_quarter_of_the_inputs():
    """R-Precision ranks each user to its own |R|: with hundreds or thousands of relevant items a
    user (5% of the catalog), on CPU, within a quarter of the inputs (a deep selection over the
    whole batch at once kept an int64 key an entry: 1.7 times the inputs)."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(
        [sys.executable, "-c", CPU_RPRECISION_PROBE], capture_output=True, text=True, check=True, env=env, cwd=root
    )
    shares = {int(line.split()[0]): float(line.split()[1]) for line in result.stdout.strip().splitlines()}
    assert sorted(shares) == [20, 500, 5_000]
    for relevant, share in shares.items():
        assert share <= 0.25, (relevant, shares)
