"""The shared top-k selection (block pre-filter) against numpy's stable argsort, on every path.

Row widths straddle the thresholds where the selection switches between exact keys, one level of
sub-blocks and two levels of blocks, with and without a last partial block; the value patterns
put ties, infinities and the best items at block boundaries."""

import contextlib

import numpy as np
import pytest
import torch

from ignite_recsys._core import tuning
from ignite_recsys._core.selection import stable_topk, top_values, value_group_size, value_groups
from ignite_recsys._core.selection.groups import LONG_ROW_GROUPS, SHORT_ROW_GROUPS

# k = 100: below 2000 all items, from 2000 groups of 16, from 20000 groups of 64
WIDTHS = [1, 5, 799, 800, 1999, 2000, 2001, 6399, 6400, 6463, 19_999, 20_000, 20_033, 70_001]


def _pattern(rng, name, rows, width):
    x = rng.random((rows, width)).astype(np.float32)
    if name == "few_levels":  # heavy ties everywhere, including at the k-th position
        x = np.round(x * 3) / 3
    elif name == "all_equal":
        x[:] = 0.0
    elif name == "infinities":
        x[:, ::3] = -np.inf
        x[:, 5::97] = np.inf
        x[1] = -np.inf
    elif name == "descending":  # the best items all sit in the first blocks
        x = np.tile(-np.arange(width, dtype=np.float32), (rows, 1))
    elif name == "ascending":  # ... in the last (partial) block
        x = np.tile(np.arange(width, dtype=np.float32), (rows, 1))
    elif name == "block_edges":  # equal maxima at the edges of groups and sub-groups
        x = np.zeros((rows, width), dtype=np.float32)
        for size in sorted({*LONG_ROW_GROUPS, *SHORT_ROW_GROUPS}):
            x[:, size - 1 :: size] = 1.0
            x[:, size::size] = 1.0
    elif name == "negative_zero":  # -0.0 == +0.0 is a tie, broken by index
        x = np.where(x < 0.5, -0.0, 0.0).astype(np.float32)
    return torch.from_numpy(np.ascontiguousarray(x))


PATTERNS = [
    "random",
    "few_levels",
    "all_equal",
    "infinities",
    "descending",
    "ascending",
    "block_edges",
    "negative_zero",
]


def patterns_match_stable_argsort(rng, width, k):
    """Assert ``stable_topk`` equals numpy's stable argsort (and finds no NaN) on every value
    pattern of rows of ``width``; yields (pattern name, rows) for further checks."""
    for name in PATTERNS:
        x = _pattern(rng, name, 3, width)
        expected = np.argsort(-x.numpy(), axis=1, kind="stable")[:, :k]
        got, has_nan = stable_topk(x, k, detect_nan=True)
        np.testing.assert_array_equal(got.numpy(), expected, err_msg=name)
        assert not has_nan.any()
        yield name, x


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("k", [1, 7, 100])
def test_stable_topk_equals_stable_argsort(rng, width, k):
    for name, x in patterns_match_stable_argsort(rng, width, k):
        values = np.sort(x.numpy(), axis=1)[:, ::-1][:, :k]
        np.testing.assert_array_equal(top_values(x, min(k, width)).numpy(), values, err_msg=name)


@pytest.mark.parametrize("width", [9, 799, 1999])
@pytest.mark.parametrize("k", [1, 7, 100])
@pytest.mark.parametrize("where", ["at_k", "after_k"])
def test_stable_topk_with_a_single_tie_at_the_cut(rng, width, k, where):
    """Distinct scores but one tie, between the k-th (or (k + 1)-th) best item and another item
    outside the top k, on one row only: whichever of them ``torch.topk`` picks, the lower index
    must come first (plain ``torch.topk`` is right on every other row)."""
    x = np.stack([rng.permutation(width).astype(np.float32) for _ in range(4)])
    rank = min(k if where == "at_k" else k + 1, width)
    best = np.argsort(-x[2], kind="stable")
    if rank < width:
        x[2, best[-1]] = x[2, best[rank - 1]]  # the worst item now ties with the rank-th best
    expected = np.argsort(-x, axis=1, kind="stable")[:, :k]
    got = stable_topk(torch.from_numpy(x), k)
    np.testing.assert_array_equal(got.numpy(), expected)
    x[1, best[0]] = np.nan
    _, has_nan = stable_topk(torch.from_numpy(x), k, detect_nan=True)
    assert has_nan.tolist() == [False, True, False, False]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("width", [799, 2001, 6463, 20_000])
def test_stable_topk_other_float_dtypes(rng, dtype, width):
    x = torch.from_numpy(np.round(rng.random((3, width)) * 50)).to(dtype)  # exact in every dtype, many ties
    expected = np.argsort(-x.double().numpy(), axis=1, kind="stable")[:, :100]
    np.testing.assert_array_equal(stable_topk(x, 100).numpy(), expected)


@pytest.mark.parametrize("width", [799, 2001, 6463, 20_000])
def test_top_values_of_integer_labels_are_exact(rng, width):
    """Values only, in the labels' own dtype: int64 labels above 2**24 are not rounded."""
    labels = torch.from_numpy(rng.integers(0, 5, size=(3, width))) + (1 << 40)
    labels[1, -1] += 7  # the best label in the last, partial block
    expected = np.sort(labels.numpy(), axis=1)[:, ::-1][:, :100]
    np.testing.assert_array_equal(top_values(labels, 100).numpy(), expected)


@pytest.mark.parametrize("width", [624, 625, 626, 1_001, 10_007, 70_001])
@pytest.mark.parametrize("k", [1, 7, 100])
def test_top_values_with_whole_strided_groups_among_the_best(rng, width, k):
    """The values-only selection takes the best k strided groups {j, j + s, j + 2s, ...}: a group
    that holds several of the best values, equal maxima in more than k groups, and the best
    value in the items after the last full group must all come out exactly."""
    group = value_group_size(width, k) or 1
    stride = width // group
    x = np.round(rng.random((4, width)) * 2).astype(np.float32)  # ties at the k-th value
    x[0, 3 : group * stride : stride] = 5.0  # one whole group among the best
    x[1, : group * stride : stride] = 4.0  # its neighbours too
    x[1, 1 : group * stride : stride] = 4.0
    x[2, group * stride :] = 9.0  # the tail (empty when the groups cover the row)
    x[3] = 1.0  # all equal
    expected = np.sort(x, axis=1)[:, ::-1][:, :k]
    np.testing.assert_array_equal(top_values(torch.from_numpy(x), k).numpy(), expected)


@pytest.mark.parametrize("width", [5, 2001, 6463, 20_000])
def test_nan_is_flagged_per_row(rng, width):
    x = torch.rand(4, width, generator=torch.Generator().manual_seed(width))
    x[2, width // 2] = float("nan")
    x[3, -1] = float("nan")  # in the last, partial block (or the only block)
    _, has_nan = stable_topk(x, 100, detect_nan=True)
    assert has_nan.tolist() == [False, False, True, True]


def test_accelerator_variants_give_the_same_results(rng, monkeypatch):
    """CUDA takes one pass over the whole batch and plain reductions instead of the CPU-tuned row
    chunks and max pooling; switched on here on CPU, every ranking metric must be unchanged."""
    import ignite_recsys as R

    top_k = [1, 5, 10, 20]
    batches = []
    for width in (150, 500, 5_000):  # direct selection, groups of 16, groups of 64 (k = 20)
        scores = _pattern(rng, "few_levels", 6, width)
        labels = torch.from_numpy(rng.integers(0, 4, size=(6, width)).astype(np.float32))
        batches.append((scores, labels))

    def results():
        out = []
        for scores, labels in batches:
            metric = R.RankingMetrics(top_k)
            metric.update((scores, labels))
            out.append(metric.compute())
            out.append(stable_topk(scores, 20).tolist())
        return out

    cpu_tuned = results()
    monkeypatch.setattr(tuning, "cpu_tuned", lambda device: False)
    assert results() == cpu_tuned


@pytest.mark.parametrize("width, k", [(1_001, 1), (10_007, 1), (10_007, 7), (70_001, 100), (409_607, 100), (640, 1)])
def test_top_values_with_whole_contiguous_groups_among_the_best(rng, width, k):
    """From about 24 items per group the values-only selection takes runs of 32 or 64
    consecutive items: a run holding several of the best values, equal maxima in more than k
    runs, and the best value after the last full run must all come out exactly."""
    groups = value_groups(width, k)
    assert groups.contiguous and groups.size in (32, 64)
    size, full = groups.size, width // groups.size * groups.size
    x = np.round(rng.random((4, width)) * 2).astype(np.float32)  # ties at the k-th value
    x[0, size : 2 * size] = 5.0  # one whole run among the best
    x[1, :size] = 4.0  # its neighbour too
    x[1, 3 * size + 1] = 4.0
    x[2, full:] = 9.0  # the tail (empty when the runs cover the row)
    x[3] = 1.0  # all equal
    expected = np.sort(x, axis=1)[:, ::-1][:, :k]
    np.testing.assert_array_equal(top_values(torch.from_numpy(x), k).numpy(), expected)


def test_label_groups_of_the_update_pass_are_those_of_the_ideal_selection():
    """The label pass takes its groups' maxima (``pass_groups``) and the ideal's selection reads
    them (``top_values``): both take the same runs of consecutive labels on CPU, and maxima of
    other groups are refused rather than read as these."""
    from ignite_recsys._core.relevance import pass_groups

    labels = torch.zeros(2, 300_007)
    groups = pass_groups(labels, 100, select=True, count=True)
    assert groups == value_groups(300_007, 100) and groups.contiguous and groups.size == 64
    strided_maxima = torch.zeros(2, 300_007 // 32)  # the maxima of strided groups of 32
    with pytest.raises(RuntimeError, match="group maxima"):
        top_values(labels, 100, strided_maxima)


@pytest.fixture
def shared_passes(monkeypatch):
    """Passes shared with helper threads from a few thousand entries on (two torch threads
    outside the update, as on a 2-core machine)."""
    monkeypatch.setattr(tuning, "WIDE_PASS_ENTRIES", 1 << 12)
    monkeypatch.setattr(tuning, "SHARED_BLOCK_ENTRIES", 1 << 10)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("width", [2001, 20_033])
def test_selection_in_passes_shared_with_helper_threads(rng, shared_passes, width):
    for name in ["random", "few_levels", "block_edges"]:
        x = _pattern(rng, name, 40, width)
        with tuning.ranking_threads():
            assert torch.get_num_threads() == 1  # one thread but for the shared passes
            got, has_nan = stable_topk(x, 100, detect_nan=True)
            values = top_values(x, 100)
        assert torch.get_num_threads() == 2
        np.testing.assert_array_equal(got.numpy(), np.argsort(-x.numpy(), axis=1, kind="stable")[:, :100])
        np.testing.assert_array_equal(values.numpy(), np.sort(x.numpy(), axis=1)[:, ::-1][:, :100])
        assert not has_nan.any()


def test_a_stalled_helper_thread_delays_no_shared_pass(shared_passes):
    """A helper whose core another process holds (here: asleep) costs the update nothing: the
    update's thread computes the blocks the helper claimed."""
    import threading
    import time

    x = torch.rand(64, 1000)
    main = threading.current_thread()

    def block_maxima(rows):
        if threading.current_thread() is not main:
            time.sleep(1.0)
        return x[rows].amax(1)

    with tuning.ranking_threads():
        start = time.perf_counter()
        blocks = tuning.shared_pass(block_maxima, 64, 1000, x.device)
        elapsed = time.perf_counter() - start
    assert blocks is not None and len(blocks) > 2
    np.testing.assert_array_equal(torch.cat(blocks).numpy(), x.numpy().max(1))
    assert elapsed < 0.5


def test_a_shared_pass_gives_each_thread_a_block(shared_passes, monkeypatch):
    """A pass wide enough to share takes a block per thread even where the least block size
    (``SHARED_BLOCK_ENTRIES``) would hold all of it: shared, not run on the update's thread alone."""
    monkeypatch.setattr(tuning, "SHARED_BLOCK_ENTRIES", 1 << 20)
    x = torch.rand(6, 1000)
    with tuning.ranking_threads():
        blocks = tuning.shared_pass(lambda rows: x[rows].amax(1), 6, 1000, x.device)
    assert blocks is not None and [len(block) for block in blocks] == [3, 3]
    np.testing.assert_array_equal(torch.cat(blocks).numpy(), x.numpy().max(1))


def test_a_running_helper_is_waited_for_not_raced(shared_passes, monkeypatch):
    """A helper whose block takes a little longer than the update's thread's own is waited for
    (up to ``HELPER_WAIT_SHARE`` times the update's thread's longest block from the claim): each
    block is computed once, by the thread that claimed it."""
    import threading
    import time

    monkeypatch.setattr(tuning, "SHARED_BLOCK_ENTRIES", 32 * 1000)  # two blocks of 32 rows
    idle = threading.Event()
    tuning._helper_jobs(1).put(idle.set)  # the helper done with earlier tests' jobs (a stalled one sleeps)
    assert idle.wait(5.0)
    x = torch.rand(64, 1000)
    main = threading.current_thread()
    computed = []

    def block_maxima(rows):
        on_main = threading.current_thread() is main
        time.sleep(0.3 if on_main else 0.33)  # well within 1.5 x 0.3 s of the helper's claim
        computed.append((rows.start, on_main))
        return x[rows].amax(1)

    with tuning.ranking_threads():
        blocks = tuning.shared_pass(block_maxima, 64, 1000, x.device)
    assert blocks is not None and len(blocks) == 2
    np.testing.assert_array_equal(torch.cat(blocks).numpy(), x.numpy().max(1))
    assert sorted(start for start, _ in computed) == [0, 32]  # each block once
    assert sorted(on_main for _, on_main in computed) == [False, True]  # one by the helper


def _side_jobs(monkeypatch, in_cache: bool) -> list:
    """The side jobs handed out (recorded), for labels that stay in cache (``in_cache``) or not."""
    monkeypatch.setattr(tuning, "IN_CACHE_SHARE", 1.0 if in_cache else 0.0)
    jobs, original = [], tuning.side_job
    monkeypatch.setattr(tuning, "side_job", lambda *args: jobs.append(original(*args)) or jobs[-1])
    return jobs


def _side_job_case(rng, users: int = 40, items: int = 6_007):
    """Distinct scores and graded labels (about 24 relevant per user), user 3 without any."""
    scores = rng.permutation(users * items).reshape(users, items).astype(np.float32)
    grades = np.where(rng.random((users, items)) < 0.004, rng.integers(1, 5, size=(users, items)), 0).astype(np.float64)
    grades[3] = 0.0
    return scores, grades


def test_list_metrics_share_the_selection_passes(monkeypatch, shared_passes):
    """A metric of the top-k ids alone (IntraListDiversity) selects them under the ranking step's
    threads: its passes over the scores are shared with a helper thread; its values against the
    formula (the mean cosine distance of the pairs of each top k)."""
    import ignite_recsys as R
    from references_families import intra_list_diversity

    shared, original = [], tuning.shared_pass
    monkeypatch.setattr(tuning, "shared_pass", lambda *args, **kw: shared.append(original(*args, **kw)) or shared[-1])
    rng = np.random.default_rng(17)
    users, items, top_k = 30, 6_007, [3, 10]
    scores = rng.permutation(users * items).reshape(users, items).astype(np.float32)
    features = rng.standard_normal((items, 8))
    metric = R.IntraListDiversity(top_k, torch.from_numpy(features).float())
    metric.update((torch.from_numpy(scores), torch.zeros(users, items)))
    got = metric.compute()
    for j, k in enumerate(top_k):
        expected = np.mean([intra_list_diversity(np.argsort(-row, kind="stable"), k, features) for row in scores])
        assert got[j] == pytest.approx(expected, abs=1e-5)
    assert any(blocks is not None for blocks in shared), "a pass shared with a helper"


@pytest.mark.parametrize("in_cache", [False, True])
@pytest.mark.parametrize("form", ["ItemIds", "mask"])
def test_label_pass_beside_the_selection_with_exclusions_against_the_reference(
    monkeypatch, shared_passes, form, in_cache
):
    """With an exclusion (ids, or a dense mask) the dense labels are passed over on a helper thread
    too, beside the selection of the candidates: every cut-off metric against the numpy reference
    (graded labels, excluded relevant items, a user without a relevant item)."""
    import ignite_recsys as R
    from conftest import CUTOFF_CLASSES, run_metric
    from references import candidate_metric_means, candidate_rankings

    jobs = _side_jobs(monkeypatch, in_cache)
    rng = np.random.default_rng(6)
    scores, grades = _side_job_case(rng)
    users, items, top_k = *scores.shape, [1, 10, 50]
    excluded = [set(rng.choice(items, 30, replace=False).tolist()) for _ in range(users)]
    excluded[5] |= set(np.argsort(-scores[5])[:20].tolist()) | set(np.flatnonzero(grades[5])[:2].tolist())
    ids = np.full((users, max(map(len, excluded))), -1, dtype=np.int64)
    for user, chosen in enumerate(excluded):
        ids[user, : len(chosen)] = sorted(chosen)
    mask = np.zeros((users, items), dtype=bool)
    for user, chosen in enumerate(excluded):
        mask[user, list(chosen)] = True

    def exclusion(rows):
        if form == "mask":
            return torch.from_numpy(mask[rows])
        return R.ItemIds(torch.from_numpy(ids[rows]))

    batches = [
        (torch.from_numpy(scores[rows]), torch.from_numpy(grades[rows]).float(), exclusion(rows))
        for rows in (slice(0, 25), slice(25, None))
    ]
    got = run_metric(R.RankingMetrics(top_k, metrics=list(CUTOFF_CLASSES)), batches)
    expected = candidate_metric_means(candidate_rankings(scores, excluded), grades, top_k)
    for name in CUTOFF_CLASSES:
        np.testing.assert_allclose([got[f"{name}@{k}"] for k in top_k], expected[name], atol=1e-12, err_msg=name)
    # handed to a helper once per update (run by it, or by the update's thread if it is busy)
    assert len(jobs) == len(batches) and all(isinstance(job, tuning.SideJob) for job in jobs)


@pytest.mark.parametrize("in_cache", [False, True])
@pytest.mark.parametrize("gain_function", ["exp_rank", "binary"])
def test_label_pass_beside_the_score_selection_against_the_reference(
    monkeypatch, shared_passes, gain_function, in_cache
):
    """The labels are passed over on a helper thread beside the update's thread's selection of
    the scores (from the start, or where they stay in cache once the scores' blocks are shared
    out): every cut-off metric against the numpy reference (graded labels, users without a
    relevant item)."""
    import ignite_recsys as R
    from conftest import CUTOFF_CLASSES, run_metric
    from references import candidate_metric_means, candidate_rankings

    jobs = _side_jobs(monkeypatch, in_cache)
    scores, grades = _side_job_case(np.random.default_rng(4))
    top_k = [1, 10, 50]
    batches = [
        (torch.from_numpy(scores[rows]), torch.from_numpy(grades[rows]).float())
        for rows in (slice(0, 25), slice(25, None))
    ]
    got = run_metric(R.RankingMetrics(top_k, metrics=list(CUTOFF_CLASSES), gain_function=gain_function), batches)
    expected = candidate_metric_means(candidate_rankings(scores), grades, top_k, gain_kind=gain_function)
    for name in CUTOFF_CLASSES:
        np.testing.assert_allclose([got[f"{name}@{k}"] for k in top_k], expected[name], atol=1e-12, err_msg=name)
    # handed to a helper once per update (run by it, or by the update's thread if it is busy)
    assert len(jobs) == len(batches) and all(isinstance(job, tuning.SideJob) for job in jobs)


@pytest.mark.parametrize("in_cache", [False, True])
def test_no_helper_keeps_a_batch_after_its_update(monkeypatch, shared_passes, in_cache):
    """Once an update has returned, neither a helper thread nor a job still queued for one holds
    the batch: the caller's last reference frees it. (A helper that kept its last job until the
    next one arrived freed the previous batch itself at the start of the next update: unmapping
    100 MB of scores took it 8-12 ms, while the update waited for its blocks.)"""
    import time
    import weakref

    import ignite_recsys as R

    monkeypatch.setattr(tuning, "IN_CACHE_SHARE", 1.0 if in_cache else 0.0)
    metric = R.RankingMetrics([1, 10, 50], metrics=["ndcg", "recall", "map"])
    rng = np.random.default_rng(8)
    for _ in range(3):
        arrays = [rng.random((64, 5_000), dtype=np.float32), (rng.random((64, 5_000)) < 0.01).astype(np.float32)]
        freed = [weakref.ref(array) for array in arrays]  # the tensors' memory: freed with these
        scores, labels = (torch.from_numpy(array) for array in arrays)
        del arrays
        metric.update((scores, labels))
        del scores, labels
        deadline = time.perf_counter() + 5.0  # a helper may still finish a block it claimed
        while any(ref() is not None for ref in freed) and time.perf_counter() < deadline:
            time.sleep(0.01)
        assert all(ref() is None for ref in freed)
    assert 0.0 < metric.compute()["ndcg@10"] < 1.0


def test_jobs_left_queued_hold_no_input(monkeypatch, shared_passes):
    """A helper busy elsewhere leaves its share of a pass and a side job queued; the update's
    thread computes both, and what stays in the queue holds neither their inputs nor results."""
    import functools
    import threading
    import time
    import weakref

    monkeypatch.setattr(tuning, "IN_CACHE_SHARE", 0.0)  # the side job is queued at once
    release = threading.Event()
    tuning._helper_jobs(1).put(lambda: release.wait(5.0))  # the helper, busy
    time.sleep(0.05)
    array = np.random.default_rng(3).random((64, 1000)).astype(np.float32)
    freed = weakref.ref(array)
    x = torch.from_numpy(array)
    del array
    with tuning.ranking_threads():  # (the functions hold the tensor itself, as an update's do)
        job = tuning.side_job(functools.partial(torch.amax, x), x)
        blocks = tuning.shared_pass(lambda rows, x=x: x[rows].amax(1), 64, 1000, x.device)
        assert isinstance(job, tuning.SideJob) and float(job.result()) == float(x.max())
    assert blocks is not None and torch.equal(torch.cat(blocks), x.amax(1))
    del x, blocks, job
    assert freed() is None  # the queued work and job.run hold nothing of it
    release.set()


def test_a_side_job_over_inputs_in_cache_starts_behind_the_next_shared_pass(monkeypatch, shared_passes):
    """Over inputs that stay in cache the job waits for the next shared pass (then runs once, on
    whichever thread gets to it); without one, the update's thread computes it at ``result()``;
    a job left by an update that raised is not started by a later update. Over larger inputs it
    starts at once."""
    import threading
    import time

    monkeypatch.setattr(tuning, "IN_CACHE_SHARE", 1.0)
    x = torch.rand(64, 1000)
    ran = []

    def job_of(value):
        return lambda: ran.append((value, threading.current_thread().name)) or value

    with tuning.ranking_threads():
        job = tuning.side_job(job_of(1), x)
        time.sleep(0.05)
        assert isinstance(job, tuning.SideJob) and ran == []  # waiting for a shared pass
        blocks = tuning.shared_pass(lambda rows: x[rows].amax(1), 64, 1000, x.device)
        assert blocks is not None and job.result() == 1 and [value for value, _ in ran] == [1]

        job = tuning.side_job(job_of(2), x)
        assert job.result() == 2 and ran[-1] == (2, threading.current_thread().name)

    with pytest.raises(RuntimeError), tuning.ranking_threads():
        tuning.side_job(job_of(3), x)
        raise RuntimeError("an update that raises")
    with tuning.ranking_threads():
        assert tuning.shared_pass(lambda rows: x[rows].amax(1), 64, 1000, x.device) is not None
    time.sleep(0.05)
    assert [value for value, _ in ran] == [1, 2]

    monkeypatch.setattr(tuning, "IN_CACHE_SHARE", 0.0)
    with tuning.ranking_threads():
        job = tuning.side_job(job_of(4), x)
        deadline = time.monotonic() + 5.0
        while len(ran) < 3 and time.monotonic() < deadline:  # started without a shared pass
            time.sleep(0.01)
        assert ran[-1][0] == 4 and ran[-1][1] != threading.current_thread().name
        assert job.result() == 4


@contextlib.contextmanager
def _helpers_held():
    """Every helper thread busy (waiting on a gate) until the block ends: a job handed to them
    starts only then."""
    import threading

    jobs = tuning._helper_jobs(1)
    count = len(tuning._Helpers.threads)
    started, gate = threading.Semaphore(0), threading.Event()

    def hold():
        started.release()
        gate.wait()

    for _ in range(count):
        jobs.put(hold)
    for _ in range(count):
        assert started.acquire(timeout=10)
    try:
        yield
    finally:
        gate.set()


def test_a_side_job_no_helper_starts_is_taken_over_in_a_shared_pass(monkeypatch, shared_passes):
    """A job started at once (inputs larger than the cache) that no helper has started once the
    update's thread, in a shared pass, has waited 1.5 times its longest block and 20 ms is
    computed there, between two of its blocks, and once only; the pass's values are unchanged."""
    import threading
    import time

    monkeypatch.setattr(tuning, "IN_CACHE_SHARE", 0.0)
    x = torch.rand(64, 1000)
    events = []

    def block(rows):
        time.sleep(0.01)
        events.append(("block", rows.start))
        return x[rows].amax(1)

    def job():
        events.append(("job", threading.current_thread().name))
        return 9

    with _helpers_held(), tuning.ranking_threads():
        side = tuning.side_job(job, x)
        blocks = tuning.shared_pass(block, 64, 1000, x.device)
        assert side.result() == 9
    assert blocks is not None and len(blocks) >= 4
    np.testing.assert_array_equal(torch.cat(blocks).numpy(), x.numpy().max(1))
    names = [event[0] for event in events]
    assert names.count("job") == 1 and events[names.index("job")][1] == threading.current_thread().name
    assert 2 <= names.index("job") < len(names) - 1  # after 20 ms of 10 ms blocks, before the last
    time.sleep(0.05)  # the helpers, released, find the job taken
    assert [event[0] for event in events].count("job") == 1


def test_a_side_job_a_helper_starts_is_not_taken_over(monkeypatch, shared_passes):
    """With a helper free, the job started at once runs on it, however long the pass."""
    import threading
    import time

    monkeypatch.setattr(tuning, "IN_CACHE_SHARE", 0.0)
    x = torch.rand(64, 1000)
    ran = []

    def block(rows):
        time.sleep(0.01)
        return x[rows].amax(1)

    with tuning.ranking_threads():
        side = tuning.side_job(lambda: ran.append(threading.current_thread().name) or 3, x)
        assert tuning.shared_pass(block, 64, 1000, x.device) is not None
        assert side.result() == 3
    assert len(ran) == 1 and ran[0] != threading.current_thread().name


@pytest.mark.parametrize("gain_function", ["exp_rank", "binary"])
def test_label_pass_taken_over_by_the_update_against_the_reference(monkeypatch, shared_passes, gain_function):
    """Every helper busy through the update (as when another thread holds the second core): the
    update's thread takes the label pass over during the score selection; every cut-off metric
    against the numpy reference (graded labels, users without a relevant item)."""
    import ignite_recsys as R
    from conftest import CUTOFF_CLASSES, run_metric
    from references import candidate_metric_means, candidate_rankings

    monkeypatch.setattr(tuning, "IN_CACHE_SHARE", 0.0)
    monkeypatch.setattr(tuning, "TAKE_OVER_AFTER", 0.0)  # the selection of these rows takes a few ms
    taken_over, run = [], tuning.SideJob.run

    def recorded(job, on_helper=True):
        if not on_helper:
            taken_over.append(job)
        run(job, on_helper)

    monkeypatch.setattr(tuning.SideJob, "run", recorded)
    scores, grades = _side_job_case(np.random.default_rng(8))
    top_k = [1, 10, 50]
    batches = [
        (torch.from_numpy(scores[rows]), torch.from_numpy(grades[rows]).float())
        for rows in (slice(0, 25), slice(25, None))
    ]
    metric = R.RankingMetrics(top_k, metrics=list(CUTOFF_CLASSES), gain_function=gain_function)
    with _helpers_held():
        got = run_metric(metric, batches)
    expected = candidate_metric_means(candidate_rankings(scores), grades, top_k, gain_kind=gain_function)
    for name in CUTOFF_CLASSES:
        np.testing.assert_allclose([got[f"{name}@{k}"] for k in top_k], expected[name], atol=1e-12, err_msg=name)
    assert len(taken_over) == len(batches)


def test_a_side_job_on_a_helper_reads_its_inputs_in_larger_blocks(monkeypatch):
    """A pass of a side job run by a helper takes blocks of ``SIDE_JOB_BLOCK_ENTRIES`` entries
    (few numpy calls, each a wait for the interpreter lock); the same pass on the update's thread
    keeps blocks of ``BLOCK_ENTRIES``. The results are the same either way."""
    import threading

    monkeypatch.setattr(tuning, "BLOCK_ENTRIES", 1 << 10)
    monkeypatch.setattr(tuning, "SIDE_JOB_BLOCK_ENTRIES", 1 << 12)
    x = torch.rand(40, 500)
    seen = []

    def maxima_in_blocks():
        def block(rows):
            seen.append((threading.current_thread().name, rows.stop - rows.start))
            return x[rows].amax(1)

        return torch.cat(tuning.row_blocks(block, x.shape[0], x.shape[1], x.device))

    job = tuning.SideJob(maxima_in_blocks)
    helper = threading.Thread(target=job.run, name="helper")
    helper.start()
    helper.join()
    on_helper = job.result()
    assert {rows for name, rows in seen if name == "helper"} == {9, 4}  # 4,096 / 500: 9 rows a block
    seen.clear()
    in_turn = maxima_in_blocks()  # the update's thread, no side job: blocks of 1,024 entries
    assert {rows for _, rows in seen} == {3, 1} and len(seen) == 14
    np.testing.assert_array_equal(on_helper.numpy(), x.numpy().max(1))
    np.testing.assert_array_equal(in_turn.numpy(), x.numpy().max(1))


def test_side_job_result_from_whichever_thread_ran_it():
    """The job's result from the helper that ran it, its error raised again on the caller's
    thread, or computed by the caller itself when no helper has started it (then never twice)."""
    import threading

    calls = []
    job = tuning.SideJob(lambda: calls.append(threading.current_thread().name) or 7)
    helper = threading.Thread(target=job.run, name="helper")
    helper.start()
    helper.join()
    assert job.result() == 7 and calls == ["helper"]

    failing = tuning.SideJob(lambda: 1 / 0)
    helper = threading.Thread(target=failing.run)
    helper.start()
    helper.join()
    with pytest.raises(ZeroDivisionError):
        failing.result()

    calls.clear()
    taken = tuning.SideJob(lambda: calls.append(threading.current_thread().name) or 8)
    assert taken.result() == 8 and calls == [threading.current_thread().name]
    taken.run()  # a helper reaching it later does nothing
    assert calls == [threading.current_thread().name]


def test_ranking_updates_run_on_one_thread_unless_num_threads_is_given():
    """By default a ranking update's operations run on one torch thread (the passes over the
    whole inputs aside); ``num_threads`` sets every operation's; the caller's setting is back
    after each update, also after one that raises."""
    import ignite_recsys as R

    seen = []

    class Spy(R.NDCG):
        def _user_columns(self, batch):  # the ranking step, whether the batch was held or not
            seen.append(torch.get_num_threads())
            return super()._user_columns(batch)

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        scores, labels = torch.rand(4, 50), (torch.rand(4, 50) < 0.2).float()
        for metric in (Spy([2]), Spy([2], num_threads=2)):  # a small batch: held, then ranked in compute()
            metric.update((scores, labels))
            assert torch.get_num_threads() == 2
            metric.compute()
        with pytest.raises(ValueError):
            Spy([2]).update((scores * float("nan"), labels))
        assert seen == [1, 2, 1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
