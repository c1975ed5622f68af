"""The group pre-filter on the host (CPU float32 rows, numpy's partition and sort of keys) against
numpy's stable argsort: every value pattern of ``test_selection`` with the host selection taken
or declined (then the torch selection), and rows where it must decline."""

import numpy as np
import pytest
import torch

from ignite_recsys._core import tuning
from ignite_recsys._core.selection import groups as module
from ignite_recsys._core.selection import stable_topk
from test_selection import PATTERNS, patterns_match_stable_argsort
from test_selection_float import rows_tied_at_the_kth_group_maximum


@pytest.fixture
def host_orders(monkeypatch):
    """The results of every call of the host selections, of chosen groups, of strided groups or of
    every score above a threshold (None: declined)."""
    taken = Taken()
    for name in ("host_order", "strided_order", "threshold_order"):
        original = getattr(module, name)

        def record(*args, _run=original, _name=name):
            taken.paths.append(_name)
            taken.append(_run(*args))
            return taken[-1]

        monkeypatch.setattr(module, name, record)
    return taken


class Taken(list):
    """Results of the host selections, and ``paths``: which selection gave each."""

    def __init__(self):
        super().__init__()
        self.paths = []


@pytest.fixture(params=["groups", "threshold"])
def host_path(request, monkeypatch):
    """Rows of small groups compared whole against a threshold where they stay in cache
    (``threshold``), or their groups chosen first as on longer rows (``groups``)."""
    monkeypatch.setattr(tuning, "IN_CACHE_SHARE", 0.5 if request.param == "threshold" else 0.0)
    return request.param


@pytest.mark.parametrize("width", [2000, 2001, 6463, 20_000, 20_033, 70_001])
@pytest.mark.parametrize("k", [1, 7, 100])
@pytest.mark.parametrize("enabled", [True, False])
def test_host_selection_equals_stable_argsort(rng, monkeypatch, host_orders, host_path, width, k, enabled):
    monkeypatch.setattr(tuning, "HOST_SELECTION", enabled)
    assert len(list(patterns_match_stable_argsort(rng, width, k))) == len(PATTERNS)
    if not enabled:
        assert host_orders == []
    else:  # distinct scores are selected on the host, equal ones declined (too many candidates)
        assert host_orders[0] is not None and host_orders[PATTERNS.index("all_equal")] is None


@pytest.mark.parametrize("width", [6400, 20_033])
def test_host_selection_keeps_ties_with_the_threshold(rng, host_orders, host_path, width):
    """Distinct scores but items tied with the k-th best (in other groups, before and after it,
    and after the last full group), negative scores, -0.0 against +0.0 and infinities: the
    lower index first; a NaN row is flagged."""
    k = 100
    x = np.stack([rng.permutation(width).astype(np.float32) - width / 2 for _ in range(5)])
    kth = np.argsort(-x[0], kind="stable")[k - 1]
    x[0, [3, width // 2, width - 1]] = x[0, kth]
    x[1] = -rng.random(width).astype(np.float32) - 1.0  # every score negative
    x[2, : width // 2] = -0.0
    x[2, width // 2 :] = 0.0
    x[2, rng.choice(width, size=40, replace=False)] = rng.random(40).astype(np.float32)
    x[3, ::7] = np.inf
    x[3, 1::7] = -np.inf
    expected = np.argsort(-x, axis=1, kind="stable")[:, :k]
    x[4, 11] = np.nan
    got, has_nan = stable_topk(torch.from_numpy(x), k, detect_nan=True)
    np.testing.assert_array_equal(got[:4].numpy(), expected[:4])
    assert has_nan.tolist() == [False, False, False, False, True]
    if host_path == "threshold" and width == 6400:
        assert host_orders.paths == ["threshold_order"]
    else:  # rows longer than the cache: strided groups on long rows, else groups of consecutive items
        assert host_orders.paths == ["strided_order" if width >= tuning.STRIDED_ROWS_PER_K * k else "host_order"]


@pytest.mark.parametrize("shared", [False, True])
def test_threshold_selection_in_row_blocks_flags_nan_rows(rng, monkeypatch, host_orders, shared):
    """Rows compared against a threshold a few rows at a time (in turn, or shared with a helper
    thread): every row without NaN equals the stable argsort, and each row holding a NaN (in a
    group, or among the items after the last full group) is flagged, in every block."""
    monkeypatch.setattr(tuning, "IN_CACHE_SHARE", 0.5)
    for name in ("BLOCK_ENTRIES", "SHARED_BLOCK_ENTRIES"):  # two rows per block, in turn or shared
        monkeypatch.setattr(tuning, name, 1 << 13)
    if shared:
        monkeypatch.setattr(tuning, "WIDE_PASS_ENTRIES", 1 << 12)
    width, k = 6_407, 100  # groups of 16: 400 full groups, then 7 items
    x = np.stack([rng.permutation(width).astype(np.float32) for _ in range(7)])
    x[1, 5] = np.nan
    x[4, width - 2] = np.nan  # after the last full group
    x[6, [0, width - 1]] = np.nan
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with tuning.ranking_threads():
            got, has_nan = stable_topk(torch.from_numpy(x), k, detect_nan=True)
    finally:
        torch.set_num_threads(threads)
    assert host_orders.paths[0] == "threshold_order" and host_orders[0] is not None  # not declined
    assert has_nan.tolist() == [False, True, False, False, True, False, True]
    clean = [0, 2, 3, 5]
    np.testing.assert_array_equal(got[clean].numpy(), np.argsort(-x[clean], axis=1, kind="stable")[:, :k])


@pytest.mark.parametrize("group", [8, 16])
@pytest.mark.parametrize("shared", [False, True])
def test_strided_selection_in_row_blocks_flags_nan_rows(rng, monkeypatch, host_orders, shared, group):
    """Rows larger than the cache (strided groups of 8 or 16, coarse groups of several of them) a
    few rows at a time, in turn or shared with a helper thread: every row without NaN equals the
    stable argsort, including rows whose best items sit in one strided group, after the last
    full group or in ascending order, and each row holding a NaN (in a group or after the last
    full group) is flagged, in every block."""
    monkeypatch.setattr(tuning, "IN_CACHE_SHARE", 0.0)
    for name in ("BLOCK_ENTRIES", "SHARED_BLOCK_ENTRIES"):  # one row per block, in turn or shared
        monkeypatch.setattr(tuning, name, 1 << 16)
    monkeypatch.setattr(tuning, "LONG_STRIDED_ROWS_PER_K", 4_000 if group == 16 else 4_001)
    if shared:
        monkeypatch.setattr(tuning, "WIDE_PASS_ENTRIES", 1 << 12)
    width, k = 80_013, 20  # 80,013 / 16: 5,000 groups, then 13 items; / 8: 10,001 groups, then 5 items
    stride = width // group
    tail = width - group * stride
    assert module.strided_group_size(width, k) == group and 1 < stride // (tuning.COARSE_GROUPS_PER_K * k)
    x = np.stack([rng.permutation(width).astype(np.float32) for _ in range(8)])
    x[1, 17] = np.nan
    x[4, width - 2] = np.nan  # after the last full group
    x[5, np.arange(3, width - tail, stride)] = width + np.arange(group)  # the best: one strided group
    x[5, width - tail :] = width + 100 + np.arange(tail)  # and every item after the last full group
    x[6] = np.arange(width, dtype=np.float32)  # ascending: the best items at the end of the row
    x[7, [0, width - 1]] = np.nan
    clean = [0, 2, 3, 5, 6]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with tuning.ranking_threads():
            got, has_nan = stable_topk(torch.from_numpy(x), k, detect_nan=True)
            got_clean, clean_nan = stable_topk(torch.from_numpy(x[clean]), k, detect_nan=True)
    finally:
        torch.set_num_threads(threads)
    assert host_orders.paths == ["strided_order"] * 2
    assert host_orders[0] is not None and host_orders[1] is not None  # not declined
    assert has_nan.tolist() == [False, True, False, False, True, False, False, True]
    assert not clean_nan.any()
    expected = np.argsort(-x[clean], axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(got[clean].numpy(), expected)
    np.testing.assert_array_equal(got_clean.numpy(), expected)


def test_strided_selection_declines_ties_before_listing_them(host_orders, monkeypatch):
    """Rows of one repeated score on the strided path: declined from the groups that reach T,
    before their items are listed (no temporaries per entry of the batch), then the torch
    selection gives the stable order."""
    import tracemalloc

    monkeypatch.setattr(tuning, "IN_CACHE_SHARE", 0.0)
    x = torch.zeros(8, 200_000)
    x[3, 5] = 1.0
    tracemalloc.start()
    try:
        found = module.strided_order(x, 10, tuning.STRIDED_GROUP, True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found is None
    assert peak < x.numel() * x.element_size() / 4  # the groups' maxima of a block, not the items
    got = stable_topk(x, 10)
    assert host_orders.paths == ["strided_order", "strided_order"] and host_orders[1] is None
    np.testing.assert_array_equal(got.numpy(), np.argsort(-x.numpy(), axis=1, kind="stable")[:, :10])


@pytest.mark.parametrize("width", [6400, 20_033, 80_013])
def test_host_selections_give_the_scores_at_the_order(rng, monkeypatch, host_orders, host_path, width):
    """``stable_topk_and_values``: the order of ``stable_topk`` and, from each host selection, the
    scores at it read back from the selection's keys (negative scores, infinities, -0.0 read as
    +0.0) against numpy's stable argsort; None from the torch selection (a declined batch)."""
    from ignite_recsys._core.selection import stable_topk_and_values

    k = 60
    x = np.stack([rng.permutation(width).astype(np.float32) - width / 2 for _ in range(4)]) / 7
    x[1, rng.choice(width, size=k // 2, replace=False)] = np.inf
    x[2] = -rng.random(width).astype(np.float32) - 1.0  # every score negative but the k best
    chosen = rng.choice(width, size=k, replace=False)
    x[2, chosen] = rng.random(k).astype(np.float32) + 0.5
    x[2, chosen[:3]], x[2, chosen[3:5]] = -0.0, 0.0  # the last five of them tied at zero
    x[3] = -rng.random(width).astype(np.float32) - 1.0
    expected = np.argsort(-x, axis=1, kind="stable")[:, :k]
    order, has_nan, values = stable_topk_and_values(torch.from_numpy(x), k)
    np.testing.assert_array_equal(order.numpy(), expected)
    assert not has_nan.any() and host_orders[-1] is not None
    assert values is not None and values.dtype == torch.float32
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, expected, 1))  # -0.0 == +0.0
    tied = np.zeros((2, width), dtype=np.float32)  # declined: every score tied
    order, _, values = stable_topk_and_values(torch.from_numpy(tied), k)
    assert host_orders[-1] is None and values is None
    np.testing.assert_array_equal(order.numpy(), np.argsort(-tied, axis=1, kind="stable")[:, :k])


def test_host_selection_declines_rows_of_many_ties(host_orders, host_path):
    """More than ``THRESHOLD_CANDIDATES_PER_K`` x k candidates in a row (every score tied with
    the lowest chosen maximum): the torch selection, with the same order."""
    x = torch.zeros(2, 20_000)
    x[0] = torch.arange(20_000, dtype=torch.float32)
    got = stable_topk(x, 50)
    assert host_orders == [None]
    np.testing.assert_array_equal(got.numpy(), np.argsort(-x.numpy(), axis=1, kind="stable")[:, :50])


@pytest.mark.parametrize("width", [6400, 70_001])
def test_host_selection_of_rows_tied_at_the_kth_group_maximum(rng, host_orders, host_path, width):
    """Distinct scores, one row whose (k + 1)-th best group maximum ties the k-th (its group of a
    higher index than the unchosen one), beside untied rows: the tied row's groups are chosen by
    keys, and every row equals the stable argsort."""
    k = 100
    x = rows_tied_at_the_kth_group_maximum(rng, width, k)
    got = stable_topk(torch.from_numpy(x), k)
    np.testing.assert_array_equal(got.numpy(), np.argsort(-x, axis=1, kind="stable")[:, :k])
    assert len(host_orders) == 1 and host_orders[0] is not None


def test_host_steps_read_tensors_that_require_grad():
    """Scores and labels straight from a model (requiring grad, outside ``no_grad``) are read on
    the host without an error, with the same results."""
    from ignite_recsys._core.relevance import Relevance, relevance_pass
    from ignite_recsys._core.selection import ValueGroups

    generator = torch.Generator().manual_seed(2)
    x = torch.rand(8, 30_000, generator=generator).requires_grad_(True)
    expected = np.argsort(-x.detach().numpy(), axis=1, kind="stable")[:, :100]
    np.testing.assert_array_equal(stable_topk(x, 100).numpy(), expected)
    y = (torch.rand(8, 30_000, generator=generator) < 1e-3).float().requires_grad_(True)
    passed = relevance_pass(y, Relevance.of(None, y.dtype), groups=ValueGroups(32, True), depth=100, select=True)
    np.testing.assert_array_equal(passed.num_relevant.numpy(), (y.detach().numpy() > 0).sum(1))
