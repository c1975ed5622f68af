"""The dense update is a bounded number of whole-batch torch operations, and the constants derived
from the machine (cache size, piece size, which operations use every thread) change no result.

An update that is hundreds of small operations is slow on a loaded machine: each parallel operation
waits at a barrier for a thread whose core may be busy elsewhere. The operation count is taken as
``benchmarks/bench_update.py`` reports it (``top_level_ops``: torch.profiler events without an
enclosing operation)."""

import importlib.util
import pathlib

import numpy as np
import pytest
import torch

import ignite_recsys as R
from ignite_recsys._core import tuning
from ignite_recsys._core.selection import stable_topk, top_values

SIX = ["ndcg", "hit_rate", "recall", "precision", "map", "mrr"]
TOP_K = [1, 5, 10, 20, 50, 100]
MAX_OPERATIONS = 150


def _bench_module():
    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_update.py"
    spec = importlib.util.spec_from_file_location("bench_update", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _data(rows, items, seed=0, graded=False):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.rand(rows, items, generator=generator)
    labels = (torch.rand(rows, items, generator=generator) < min(1.0, 20 / items)).float()
    if graded:
        labels = labels * torch.randint(1, 4, (rows, items), generator=generator)
    return scores, labels


def _operations(metric, scores, labels):
    metric.update((scores, labels))  # warm: constants and the scratch buffer are made once
    return _bench_module().top_level_ops(lambda: metric.update((scores, labels)))


# direct selection, groups of 16, groups of 64 with a partial last group; a batch of one row
@pytest.mark.parametrize("rows, items", [(32, 500), (128, 5_000), (64, 30_011), (1, 25_000)])
def test_update_is_a_bounded_number_of_operations(rows, items):
    scores, labels = _data(rows, items)
    count = _operations(R.RankingMetrics(TOP_K, metrics=SIX), scores, labels)
    assert 0 < count <= MAX_OPERATIONS


def test_operation_count_does_not_grow_with_the_batch(monkeypatch):
    """With a tiny cache every pass is cut into the most pieces: the count still stays bounded,
    and equals that of a batch four times larger."""
    monkeypatch.setattr(tuning, "cache_bytes", lambda: 4096)
    counts = []
    for rows in (16, 64):
        scores, labels = _data(rows, 30_000, seed=rows)
        counts.append(_operations(R.RankingMetrics(TOP_K, metrics=SIX), scores, labels))
    assert counts[0] == counts[1] <= MAX_OPERATIONS


def _results(batches, **options):
    out = []
    for scores, labels in batches:
        metric = R.RankingMetrics(TOP_K, metrics=SIX, **options)
        metric.update((scores, labels))
        out.append(metric.compute())
        out.append(stable_topk(scores, 101).tolist())
        out.append(top_values(labels, 100).tolist())
    return out


def _batches(rng):
    batches = []
    for rows, items in [(5, 300), (9, 4_001), (7, 21_003)]:
        scores = torch.from_numpy(np.round(rng.random((rows, items)) * 7).astype(np.float32))  # many ties
        labels = torch.from_numpy(rng.integers(0, 4, size=(rows, items)).astype(np.float32))
        batches.append((scores, labels))
    return batches


@pytest.mark.parametrize("options", [{}, {"ties": "average"}, {"gain_function": "linear_rank"}])
def test_results_do_not_depend_on_the_derived_constants(rng, monkeypatch, options):
    """Pieces of one row, the most pieces, one piece; every operation on one thread or on all:
    bit-identical results."""
    batches = _batches(rng)
    expected = _results(batches, **options)
    settings = [
        {"cache_bytes": lambda: 1, "MAX_PIECES": 10_000},  # one row per piece
        {"cache_bytes": lambda: 4096},  # MAX_PIECES pieces
        {"cache_bytes": lambda: 1 << 40},  # one piece
        {"PARALLEL_MIN_ENTRIES": 0},  # every operation on every thread
        {"PARALLEL_MIN_ENTRIES": 1 << 62},  # every operation on the calling thread
    ]
    for setting in settings:
        with monkeypatch.context() as patch:
            for name, value in setting.items():
                patch.setattr(tuning, name, value)
            assert _results(batches, **options) == expected, setting


def test_bool_and_integer_labels_count_alike(rng, monkeypatch):
    monkeypatch.setattr(tuning, "cache_bytes", lambda: 4096)  # several pieces
    scores = torch.rand(11, 3_000, generator=torch.Generator().manual_seed(1))
    labels = torch.from_numpy(rng.random((11, 3_000)) < 0.01)
    values = []
    for y in (labels, labels.to(torch.int64), labels.to(torch.float32)):
        metric = R.RankingMetrics(TOP_K, metrics=["recall", "map"])
        metric.update((scores, y))
        values.append(metric.compute())
    assert values[0] == values[1] == values[2]
    recall_at_100 = np.mean([
        labels[u, scores[u].argsort(descending=True, stable=True)[:100]].sum().item() / labels[u].sum().item()
        for u in range(11) if labels[u].any()
    ])
    assert values[0]["recall@100"] == pytest.approx(recall_at_100, abs=1e-12)


def test_cache_size_and_pieces_are_sane():
    size = tuning.cache_bytes()
    assert isinstance(size, int) and (64 << 10) <= size <= (64 << 20)
    for rows, row_bytes in [(1, 10), (256, 400_000), (256, 4_000_000), (10_000, 4)]:
        step = tuning.piece_rows(rows, row_bytes)
        pieces = -(-rows // step)
        assert 1 <= step <= rows and pieces <= tuning.MAX_PIECES
        if pieces > 1:
            assert step * row_bytes <= size or pieces == tuning.MAX_PIECES


def test_serial_restores_the_thread_count():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with tuning.serial(torch.device("cpu")):
            assert torch.get_num_threads() == 1
            with tuning.threads_for(tuning.PARALLEL_MIN_ENTRIES):
                assert torch.get_num_threads() == before
            assert torch.get_num_threads() == 1
            raise RuntimeError
    assert torch.get_num_threads() == before


def test_scratch_is_reused_and_grows():
    first = tuning.scratch(3, 5, torch.device("cpu"))
    assert first.shape == (3, 5) and first.dtype == torch.float32
    assert tuning.scratch(3, 5, torch.device("cpu")).data_ptr() == first.data_ptr()
    big = tuning.scratch(2, tuning.cache_bytes() // 4, torch.device("cpu"))  # twice the cache
    assert big.shape == (2, tuning.cache_bytes() // 4)


@pytest.mark.parametrize("width", [2_000, 20_000, 20_031, 64 * 400 + 5])
def test_top_values_with_the_best_values_packed_in_groups(rng, width):
    """Values only: the best values all in one group of consecutive items, all in one sub-group,
    spread over more groups than k with equal maxima, or in the items after the last full group."""
    k = 100
    x = np.round(rng.random((5, width)) * 2).astype(np.float32)
    x[0, 64:192] = 9.0  # two whole groups of 64 (or eight of 16)
    x[1, 8:16] = 7.0  # one sub-group
    x[2, ::64] = 5.0  # equal maxima in every group
    x[3, -5:] = 8.0  # the tail
    x[4] = 1.0  # all equal
    expected = np.sort(x, axis=1)[:, ::-1][:, :k]
    np.testing.assert_array_equal(top_values(torch.from_numpy(x), k).numpy(), expected)
