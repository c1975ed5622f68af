"""The passes over the whole batch are cut into a bounded number of pieces of rows, sized from the
cache the OS reports: how they are cut changes no result, and the number of torch operations of a
dense update does not grow with the batch.

An update of hundreds of small operations is slow on a loaded machine: each parallel operation
waits at a barrier for a thread whose core may be busy elsewhere. Operations are counted as
``benchmarks/bench_update.py`` counts them (``top_level_ops``: torch.profiler events without an
enclosing operation)."""

import argparse
import importlib.util
import pathlib
import sys

import numpy as np
import pytest
import torch

import ignite_recsys as R
from conftest import CUTOFF_CLASSES, run_metric
from ignite_recsys._core import gathering, tuning
from ignite_recsys._core.relevance import Relevance, count_nonnegative, count_true, relevance_pass
from ignite_recsys._core.selection import ValueGroups
from references import candidate_metric_means, candidate_rankings

SIX = ["ndcg", "hit_rate", "recall", "precision", "map", "mrr"]
TOP_K = [1, 5, 10, 20, 50, 100]

# (MAX_PIECES, cache bytes, rows per piece forced or None): everything in one piece; a piece per
# row; pieces of 4 rows (a shorter last one); the default count with a small cache
PIECE_SETTINGS = [(1, 1 << 40, None), (1000, 1, None), (32, 1 << 40, 4), (32, 1 << 20, None)]


def _bench_module(name="bench_update"):
    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pieces(monkeypatch, max_pieces, cache, rows=None):
    monkeypatch.setattr(tuning, "MAX_PIECES", max_pieces)
    monkeypatch.setattr(tuning, "cache_bytes", lambda: cache)
    if rows is not None:
        monkeypatch.setattr(tuning, "piece_rows", lambda num_rows, row_bytes, device: rows)


def test_piece_rows_bounds_the_number_of_pieces(monkeypatch):
    _pieces(monkeypatch, 8, 8 << 20)  # pieces of 1 MiB by preference, at most 2 MiB
    cpu = torch.device("cpu")
    assert tuning.piece_rows(1000, 1, cpu) == 1000  # everything fits: one piece
    assert tuning.piece_rows(1000, 1 << 10, cpu) == 1000  # 1 MiB in all: one piece
    assert tuning.piece_rows(1000, 4 << 10, cpu) == 250  # 256 rows fit 1 MiB: 4 pieces of equal size
    assert tuning.piece_rows(1000, 16 << 10, cpu) == 125  # 64 rows fit 1 MiB, 128 fit 2 MiB: 8 pieces
    assert tuning.piece_rows(1000, 64 << 10, cpu) == 32  # 8 pieces would not fit 2 MiB: 32 rows each
    assert tuning.piece_rows(1000, 10**9, cpu) == 1  # a row larger than the cache: a piece per row
    assert tuning.piece_rows(10, 64 << 10, cpu) == 10  # 10 rows fit 1 MiB
    assert tuning.piece_rows(0, 100, cpu) == 1
    monkeypatch.setattr(tuning, "cpu_tuned", lambda device: False)
    assert tuning.piece_rows(1000, 10**9, cpu) == 1000  # accelerators: one pass


def test_cache_bytes_is_positive_and_capped():
    assert 0 < tuning.cache_bytes() <= 64 << 20


@pytest.mark.parametrize("contiguous", [False, True])
@pytest.mark.parametrize("setting", PIECE_SETTINGS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
@pytest.mark.parametrize("threshold", [None, 2.0])
def test_label_pass_against_numpy(monkeypatch, setting, dtype, threshold, contiguous):
    _pieces(monkeypatch, *setting)
    rng = np.random.default_rng(7)
    raw = rng.integers(-1, 4, size=(11, 2_003))
    labels = torch.from_numpy(raw > 1) if dtype == torch.bool else torch.from_numpy(raw).to(dtype)
    values = labels.numpy().astype(np.float64)
    groups = ValueGroups(7, contiguous=True) if contiguous else 7
    counts, has_relevant, has_nan, maxima, _ = relevance_pass(labels, Relevance.of(threshold, dtype), groups=groups)
    relevant = values > 0 if threshold is None else values >= threshold
    np.testing.assert_array_equal(counts.numpy(), relevant.sum(1))
    np.testing.assert_array_equal(has_relevant.numpy(), relevant.any(1))
    assert not has_nan
    stride = 2_003 // 7
    if contiguous:  # runs of 7 consecutive labels
        expected_maxima = values[:, : 7 * stride].reshape(11, stride, 7).max(2)
    else:  # {j, j + stride, ...}
        expected_maxima = values[:, : 7 * stride].reshape(11, 7, stride).max(1)
    np.testing.assert_array_equal(maxima.double().numpy(), expected_maxima)


def _results(options, batches):
    out = []
    for scores, labels in batches:
        metric = R.RankingMetrics(TOP_K, metrics=SIX, **options)
        metric.update((scores, labels))
        out.append(metric.compute())
    return out


@pytest.mark.parametrize(
    "options", [{}, {"ties": "average"}, {"relevance_threshold": 2.0, "gain_function": "linear_rank"}]
)
def test_pieces_change_no_result(monkeypatch, options):
    rng = np.random.default_rng(3)
    batches = []
    for rows, items in [(5, 300), (9, 4_001), (7, 21_003)]:
        scores = torch.from_numpy(np.round(rng.random((rows, items)) * 7).astype(np.float32))  # many ties
        labels = torch.from_numpy(rng.integers(0, 4, size=(rows, items)) * (rng.random((rows, items)) < 0.01))
        batches.append((scores, labels.float()))
    results = []
    for setting in PIECE_SETTINGS:
        _pieces(monkeypatch, *setting)
        results.append(_results(options, batches))
    assert all(result == results[0] for result in results[1:])


@pytest.mark.slow
@pytest.mark.parametrize("cache", [1 << 20, 64 << 20])
def test_operation_count_is_bounded_and_does_not_grow_with_the_batch(monkeypatch, cache):
    """An update of the six metrics at six cut-offs takes at most 190 top-level operations at
    every shape (one level of groups from 20k items, labels with a tail after the last full
    group), and as many for 512 rows as for 256: the pass over the labels is one reduction
    whatever the cache (with a 1 MiB cache it would otherwise be cut into many pieces). The
    same for bool labels and the binary gain, which count |R| and select no labels; ties="average"
    takes at most 300, as many for 512 rows as for 256."""
    _pieces(monkeypatch, 32, cache)
    # the passes shared with the helper thread run whole: each of their row blocks would count as
    # operations of its own (8-16 of them, more for more rows; test_selection checks those passes)
    monkeypatch.setattr(tuning, "WIDE_PASS_ENTRIES", 1 << 62)  # nor is the label pass beside the scores
    # the groups' path at every size: inputs that stay in cache take numpy's steps instead (fewer
    # torch operations), so 256 rows and 512 would be counted on different paths
    monkeypatch.setattr(tuning, "IN_CACHE_SHARE", 0.0)
    monkeypatch.setattr(gathering, "GATHER_BELOW", 0)  # every batch ranked in its own update, counted
    top_level_ops = _bench_module().top_level_ops
    counts = {}
    for rows, items in [(8, 1_000), (64, 5_003), (256, 30_000), (512, 30_000), (16, 200_003)]:
        generator = torch.Generator().manual_seed(rows)
        scores = torch.rand(rows, items, generator=generator)
        labels = (torch.rand(rows, items, generator=generator) < 20 / items).float()
        for options, form in _configurations(labels):
            metric = R.RankingMetrics(TOP_K, metrics=SIX, **options)
            metric.update((scores, form))  # warm: constants are made once
            counts[rows, items, form.dtype, str(options)] = top_level_ops(lambda: metric.update((scores, form)))
    average = {key: count for key, count in counts.items() if "average" in key[3]}
    assert max(count for key, count in counts.items() if key not in average) <= 190, counts
    assert max(average.values()) <= 300, average  # the expectations over tie orders: ~125 more
    for options, form in _configurations(torch.zeros(1)):
        assert counts[256, 30_000, form.dtype, str(options)] == counts[512, 30_000, form.dtype, str(options)]


def test_dense_table_columns_with_and_without_the_floor():
    """The dense-update table of ``bench_update.py --markdown``: one cell per column in every row,
    and the floor column (one read of the scores and labels) where the runs timed it, with the
    median and range of the runs' ratios."""
    bench = _bench_module()

    def report(ratio_of_floor):
        names = ["torch.topk(100)", "RankingMetrics (6 metrics x 6 k)", "RankingMetrics, bool labels"]
        ratios = dict(zip(names, [1.0, 0.8, 0.6]))
        if ratio_of_floor is not None:
            ratios[bench.FLOOR] = ratio_of_floor
        size = {"seconds": {"torch.topk(100)": 0.02}, "ratio_to_topk": ratios, "ranking_metrics_top_level_ops": 90}
        return {"sizes": {100_000: {**size, "memory": None}}, "load_average_at_start": (0.5, 0.5, 0.5)}

    for floor_ratios, cell in [((0.31, 0.35, 0.33), "0.33x (0.31–0.35)"), ((None,) * 3, None)]:
        table = bench.markdown_tables([report(r) for r in floor_ratios], "command").splitlines()[2:]
        header, separator, row = table[:3]
        assert header.count("|") == separator.count("|") == row.count("|"), table
        cells = [c.strip() for c in row.strip("|").split("|")]
        titles = [t.strip() for t in header.strip("|").split("|")]
        assert ("one read of the scores and labels" in titles) == (cell is not None), titles
        if cell is not None:
            assert cells[titles.index("one read of the scores and labels")] == cell
        assert cells[titles.index("`RankingMetrics`")] == "0.80x"


def test_benchmark_rounds_time_each_candidate_after_it_settles(monkeypatch):
    """``bench_update.round_times``: in every round each candidate runs untimed for at least the
    settle time before its timed call (torch's OpenMP workers spin for milliseconds after a
    multi-threaded operation: the next candidate is not timed in their shadow), and the timed
    call's seconds are recorded once per round. A fake clock: each call of a candidate takes its
    own time (powers of two: the clock's sums are exact)."""
    bench = _bench_module()
    now = [0.0]
    monkeypatch.setattr(bench.time, "perf_counter", lambda: now[0])
    calls = []

    def candidate(name, seconds):
        def run():
            calls.append((name, now[0]))
            now[0] += seconds

        return run

    tick, settle = 2.0**-10, 10 * 2.0**-10
    candidates = {"fast": candidate("fast", tick), "slow": candidate("slow", 2.0**-4)}
    times = bench.round_times(candidates, repeats=2, settle=settle)
    assert times == {"fast": [tick, tick], "slow": [2.0**-4, 2.0**-4]}
    # per round: fast runs 10 times untimed (the settle time) then once timed; slow once untimed, once timed
    assert [name for name, _ in calls] == (["fast"] * 11 + ["slow"] * 2) * 2
    for round_start in (0, 13):
        fast_calls = calls[round_start : round_start + 11]
        assert fast_calls[-1][1] - fast_calls[0][1] >= settle  # the timed call starts after the settle time
    assert bench.SETTLE_SECONDS >= 0.02  # longer than the spin measured after torch.topk (5-11 ms)


def _configurations(labels):
    """(options, labels) of the operation test: float labels, bool labels, the binary gain, and
    ties="average" (untied scores: no row's tie group is read over the whole row)."""
    return [({}, labels), ({}, labels.bool()), ({"gain_function": "binary"}, labels), ({"ties": "average"}, labels)]


@pytest.mark.parametrize("contiguous", [False, True])
@pytest.mark.parametrize("setting", PIECE_SETTINGS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
@pytest.mark.parametrize("threshold", [None, 2.0])
def test_count_among_the_ideal_candidates_against_numpy(monkeypatch, setting, dtype, threshold, contiguous):
    """With the ideal selection's candidates taken, |R| is counted among them; a user with
    relevant labels in more label groups than the candidates hold is counted over its whole
    row. Against numpy, with the rows recounted checked (negative, zero and tied labels, a tail)."""

    _pieces(monkeypatch, *setting)
    recounted = []
    monkeypatch.setattr(torch.Tensor, "index_copy_", _spy(torch.Tensor.index_copy_, recounted))
    rng = np.random.default_rng(11)
    width, group, depth = 2_003, 7, 30
    relevant_grades, other_labels = rng.integers(1, 4, size=(9, width)), rng.integers(-2, 1, size=(9, width))
    raw = np.where(rng.random((9, width)) < 0.01, relevant_grades, other_labels)
    raw[0, -3:] = 3  # relevant labels after the last full group
    raw[1] = 0
    for dense_row in (False, True):
        if dense_row:
            raw[2] = 3  # relevant everywhere: more relevant groups than the candidates hold
        labels = torch.from_numpy(raw).to(dtype)
        counts, has_relevant, _, _, candidates = relevance_pass(
            labels, Relevance.of(threshold, dtype), groups=ValueGroups(group, contiguous), depth=depth
        )
        relevant = raw > 0 if threshold is None else raw >= threshold
        np.testing.assert_array_equal(counts.numpy(), relevant.sum(1))
        np.testing.assert_array_equal(has_relevant.numpy(), relevant.any(1))
        assert candidates.shape == (9, depth * group + width - (width // group) * group)
        # only the user with relevant labels in more groups than the candidates hold is recounted
        assert recounted == ([[2]] if dense_row else []), "recounted rows"
        recounted.clear()


def _spy(method, calls):
    """``method`` recording the row indices it is given (its first argument after ``dim``)."""

    def spy(self, dim, index, *args, **kwargs):
        calls.append(index.tolist())
        return method(self, dim, index, *args, **kwargs)

    return spy


@pytest.mark.parametrize("contiguous", [False, True])
def test_batches_of_many_relevant_labels_count_them_in_the_pass(monkeypatch, contiguous):
    """After a batch where most users have more relevant labels than the ideal selection's
    candidates hold, the next batch of the same metric (its hints) counts every label in the pass
    (no row recounted); a batch of few relevant labels switches back; another metric's hints are
    its own. The counts equal numpy throughout."""
    from ignite_recsys._core.relevance import RankingHints

    hints, other = RankingHints(), RankingHints()
    recounted = []
    monkeypatch.setattr(torch.Tensor, "index_copy_", _spy(torch.Tensor.index_copy_, recounted))
    rng = np.random.default_rng(5)
    width, group, depth = 3_001, 9, 20
    many = rng.integers(0, 3, size=(6, width)).astype(np.float32)  # two thirds relevant
    few = np.where(rng.random((6, width)) < 0.003, 2.0, 0.0).astype(np.float32)
    expected_recounts = [list(range(6)), [], [], [], list(range(6))]
    for labels, recounts in zip([many, many, few, few, many], expected_recounts):
        relevance = Relevance.of(None, torch.float32)
        counts = relevance_pass(
            torch.from_numpy(labels), relevance, groups=ValueGroups(group, contiguous), depth=depth, hints=hints
        )[0]
        np.testing.assert_array_equal(counts.numpy(), (labels > 0).sum(1))
        assert recounted == ([recounts] if recounts else []), "rows recounted"
        recounted.clear()
    # a metric without that history takes the candidates path (all six recounted), and the hint is per metric
    relevance_pass(
        torch.from_numpy(many),
        Relevance.of(None, torch.float32),
        groups=ValueGroups(group, contiguous),
        depth=depth,
        hints=other,
    )
    assert recounted == [list(range(6))]


@pytest.mark.parametrize("column", [0, 1_500, 2_002])  # in a strided group, and after the last full group
@pytest.mark.parametrize(
    "count, groups, depth",
    [
        (True, 7, 3),
        (False, 7, None),
        (True, ValueGroups(32, True), 3),
        (False, ValueGroups(32, True), None),
        (True, None, None),
        (False, None, None),
    ],
)
def test_label_pass_sees_every_nan(column, count, groups, depth):
    labels = torch.zeros(5, 2_003)
    labels[3, column] = float("nan")
    labels[1, 10] = float("-inf")  # a legal label
    has_nan = relevance_pass(labels, Relevance.of(1.0, labels.dtype), count=count, groups=groups, depth=depth)[2]
    assert bool(has_nan)
    labels[3, column] = 2.0
    assert not bool(relevance_pass(labels, Relevance.of(1.0, labels.dtype), count=count, groups=groups, depth=depth)[2])


@pytest.mark.parametrize("exclude", [False, True])  # with an exclusion: the ranking step of candidates
# label groups of ~sqrt(items / 5): 17 strided, compared whole in cache; 35: runs of 32 consecutive labels,
# read through their groups (as labels larger than the cache are)
@pytest.mark.parametrize("items", [1_503, 6_001])
@pytest.mark.parametrize(
    "options, dtype",
    [
        ({"gain_function": "binary"}, torch.float32),  # the binary ideal needs |R| only
        ({"gain_function": "binary", "relevance_threshold": 2.0}, torch.float64),
        ({}, torch.bool),
    ],
)
def test_count_only_rankings_against_numpy(monkeypatch, options, dtype, items, exclude):
    """Where no metric needs the best labels, only |R|: over float labels, |R| is counted among
    the candidates of the label groups (the users with relevant labels in more groups
    recounted over their rows), or, for small strided groups on labels that stay in cache, by
    one comparison of every label; bool labels are counted as they are. Every cut-off metric
    against the numpy reference: relevant labels in the tail after the last full group, a user
    relevant everywhere, a user with none, -inf labels."""
    from ignite_recsys._core import relevance as module

    counted_among, compared_whole = [], []
    monkeypatch.setattr(module, "_count_in_candidates", _calls(module._count_in_candidates, counted_among))
    monkeypatch.setattr(module, "_host_relevant_labels", _calls(module._host_relevant_labels, compared_whole))
    monkeypatch.setattr(tuning, "SMALL_BATCH_ENTRIES", 0)  # the label groups even on these few users
    if items == 6_001:
        monkeypatch.setattr(tuning, "IN_CACHE_SHARE", 0.0)
    rng = np.random.default_rng(21)
    users, top_k = 7, [1, 5]
    scores = rng.permutation(users * items).reshape(users, items).astype(np.float32)
    grades = np.where(rng.random((users, items)) < 0.004, rng.integers(1, 4, size=(users, items)), 0).astype(np.float64)
    grades[0, -2:] = 3.0  # after the last full group
    grades[1] = 2.0  # relevant everywhere: beyond the candidates
    grades[2] = 0.0
    grades[3, rng.random(items) < 0.3] = -np.inf
    scores[0, -1] = scores.max() + 1  # a tail label ranked first
    threshold = options.get("relevance_threshold", 1.0)
    labels = torch.from_numpy(grades >= threshold) if dtype == torch.bool else torch.from_numpy(grades).to(dtype)
    reference_grades = (grades >= threshold).astype(np.float64) if dtype == torch.bool else grades
    excluded = [set(rng.choice(items, size=30, replace=False).tolist()) if exclude else set() for _ in range(users)]
    if exclude:
        excluded[0].add(items - 1)  # the best scored item, relevant, in the tail
    expected = candidate_metric_means(
        candidate_rankings(scores, excluded), reference_grades, top_k, threshold=threshold, gain_kind="binary"
    )
    metric = R.RankingMetrics(top_k, metrics=list(CUTOFF_CLASSES), **options)
    mask = torch.zeros(scores.shape, dtype=torch.bool)
    for user, ids in enumerate(excluded):
        mask[user, list(ids)] = True
    batch = (torch.from_numpy(scores), labels)
    got = run_metric(metric, [batch + (mask,) if exclude else batch])
    for name in CUTOFF_CLASSES:
        np.testing.assert_allclose([got[f"{name}@{k}"] for k in top_k], expected[name], atol=1e-12, err_msg=name)
    whole = dtype != torch.bool and items == 1_503  # strided label groups
    assert bool(compared_whole) == whole, "|R| counted by comparing every label"
    assert bool(counted_among) == (dtype != torch.bool and not whole), "|R| counted among the candidates"


def _calls(function, calls):
    """``function`` recording that it was called."""

    def recorded(*args, **kwargs):
        calls.append(True)
        return function(*args, **kwargs)

    return recorded


@pytest.mark.parametrize("width", [0, 1, 7, 8, 9, 2_040, 2_041, 4_080, 6_129])  # 255 words = 2,040 bytes
@pytest.mark.parametrize("layout", ["contiguous", "sliced", "transposed"])
def test_count_true_against_numpy(width, layout):
    """Eight bools read as one int64 word, up to 255 words summed per byte lane: a mask all True
    fills each lane to 255 without a carry into the next; widths that are no multiple of 8 and
    masks that are no contiguous rows are counted alike."""
    rng = np.random.default_rng(width)
    raw = rng.random((6, 2 * width + 1)) < np.array([0.0, 0.01, 0.5, 0.99, 1.0, 1.0])[:, None]
    mask = torch.from_numpy(raw)
    if layout == "contiguous":
        mask, expected = mask[:, :width].contiguous(), raw[:, :width]
    elif layout == "sliced":
        mask, expected = mask[:, : 2 * width : 2], raw[:, : 2 * width : 2]
    else:
        mask, expected = mask[:, :width].t().contiguous().t(), raw[:, :width]
    np.testing.assert_array_equal(count_true(mask).numpy(), expected.sum(1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64])
def test_count_nonnegative_against_numpy(monkeypatch, dtype):
    """The judged labels of BPref (at least 0): -0.0 counts, NaN and negatives do not; in pieces of
    a few rows on CPU (numpy), through a bool comparison for other dtypes."""
    monkeypatch.setattr(tuning, "piece_rows", lambda num_rows, row_bytes, device: 3)
    rng = np.random.default_rng(14)
    values = rng.integers(-2, 3, size=(7, 1_001)).astype(np.float64)
    if dtype.is_floating_point:
        values[0, :5] = [-0.0, np.nan, -np.inf, np.inf, 0.0]
    expected = (values >= 0).sum(1)
    np.testing.assert_array_equal(count_nonnegative(torch.from_numpy(values).to(dtype)).numpy(), expected)


@pytest.mark.parametrize("setting", PIECE_SETTINGS)
@pytest.mark.parametrize("exclude", [False, True])
@pytest.mark.parametrize("cpu_tuned", [True, False])  # False: as on accelerators, every row is read (no host read)
def test_tie_averages_read_only_the_rows_whose_cut_splits_a_tie(monkeypatch, setting, exclude, cpu_tuned):
    """ties="average" takes the totals of the tied group at the cut over the whole row only for
    the users whose last listed candidate ties with the next one; for the others the group lies
    within the listed positions. Against the numpy mean over every order of tied scores, users of
    both kinds in one batch, cut into pieces of rows as the cache dictates; with excluded items
    among the tied ones (an excluded item joins no tie group)."""
    from ignite_recsys._core import ties as module

    _pieces(monkeypatch, *setting)
    if not cpu_tuned:
        monkeypatch.setattr(tuning, "cpu_tuned", lambda device: False)
    read = []
    monkeypatch.setattr(module, "rows_to_read", _returns(module.rows_to_read, read))
    monkeypatch.setattr("ignite_recsys._core.ranking.rows_to_read", module.rows_to_read)
    scores = np.array(
        [
            [9, 8, 7, 6, 5, 4, 3, 2, 1],  # no ties
            [9, 5, 5, 5, 5, 1, 0, 0, 0],  # the cut at 3 splits the group of 5s: read whole
            [9, 5, 5, 4, 3, 3, 3, 1, 0],  # a tie within the listed positions only
            [2, 2, 2, 2, 2, 2, 1, 1, 1],  # everything tied at the cut: read whole
            [9, 8, 3, 3, 3, 3, 3, 3, 0],  # the cut at 3 splits a group of six
            [7, 6, 5, 4, 4, 3, 2, 1, 0],  # a tie after the cut (positions 4 and 5)
        ],
        dtype=np.float32,
    )
    labels = np.array(
        [
            [0, 1, 0, 0, 1, 0, 0, 0, 2],
            [0, 0, 1, 0, 2, 0, 0, 1, 0],
            [1, 0, 2, 0, 0, 1, 0, 0, 0],
            [0, 0, 0, 3, 0, 1, 0, 0, 1],
            [0, 0, 0, 0, 2, 0, 1, 0, 0],
            [0, 0, 0, 1, 0, 1, 0, 0, 0],
        ],
        dtype=np.float64,
    )
    excluded = [set() for _ in scores]
    if exclude:
        excluded[1], excluded[4] = {2, 3}, {3}  # user 1's 5s then lie within the top 3; user 4's 3s do not
    top_k = [1, 3]
    expected = candidate_metric_means(candidate_rankings(scores, excluded, ties="average"), labels, top_k)
    metric = R.RankingMetrics(top_k, metrics=list(CUTOFF_CLASSES), ties="average")
    mask = torch.zeros(scores.shape, dtype=torch.bool)
    for user, items in enumerate(excluded):
        mask[user, list(items)] = True
    batch = (torch.from_numpy(scores), torch.from_numpy(labels).float())
    got = run_metric(metric, [batch + (mask,) if exclude else batch])
    for name in CUTOFF_CLASSES:
        np.testing.assert_allclose([got[f"{name}@{k}"] for k in top_k], expected[name], atol=1e-12, err_msg=name)
    assert read == [([3, 4] if exclude else [1, 3, 4]) if cpu_tuned else None], "rows read whole"


def _returns(function, results):
    """``function`` recording what it returns (a tensor, as a list; or None)."""

    def recorded(*args, **kwargs):
        out = function(*args, **kwargs)
        results.append(None if out is None else out.tolist())
        return out

    return recorded


@pytest.mark.parametrize("score_dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("rows", [None, [0, 2, 3]])
@pytest.mark.parametrize("cpu_tuned", [True, False])  # True: the tied candidates listed on the host
def test_last_group_totals_against_numpy(monkeypatch, score_dtype, rows, cpu_tuned):
    """The totals of the tied group at the cut (ties="average"): its size, relevant items and
    gains under the built-in and a custom gain function, over chosen rows or all, with excluded
    items among the tied ones, signed zeros, NaN and -inf scores and labels: against numpy."""
    from ignite_recsys._core.relevance import Relevance
    from ignite_recsys._core.ties import last_group_totals

    monkeypatch.setattr(tuning, "cpu_tuned", lambda device: cpu_tuned)
    monkeypatch.setattr(tuning, "TIE_PASS_BYTES_PER_ENTRY", 1 << 14)  # pieces of a row or two
    rng = np.random.default_rng(12)
    users, items = 5, 3_001
    scores = np.round(rng.random((users, items)) * 8).astype(np.float32) / 8  # ties everywhere
    scores[1, ::5] = -0.0
    scores[1, 1::5] = 0.0
    scores[2, ::7] = np.nan
    scores[3, ::11] = -np.inf
    labels = np.where(rng.random((users, items)) < 0.2, rng.integers(1, 4, size=(users, items)), 0).astype(np.float64)
    labels[4, ::13] = -np.inf
    excluded = rng.random((users, items)) < 0.1
    boundary = np.array([[0.5], [0.0], [0.25], [-np.inf], [1.0]], dtype=np.float32)
    relevance = Relevance.of(None, torch.float32)
    chosen = None if rows is None else torch.tensor(rows)
    custom = lambda values: values.abs().sqrt()  # noqa: E731
    got = last_group_totals(
        torch.from_numpy(scores).to(score_dtype),
        torch.from_numpy(labels).float(),
        torch.from_numpy(boundary).to(score_dtype),
        relevance,
        ["exp_rank", "linear_rank", custom],
        None,
        chosen,
        torch.from_numpy(excluded),
    )
    tied = (scores.astype(np.float64) == boundary) & ~excluded  # bfloat16 keeps multiples of 1/8
    relevant = tied & (labels > 0)
    gains_of = [2.0**labels - 1, labels, np.sqrt(np.abs(labels))]
    expected = [tied.sum(1), relevant.sum(1)] + [np.where(relevant, g, 0).sum(1) for g in gains_of]
    read = np.arange(users) if rows is None else np.array(rows)
    for name, value, want in zip(["count", "relevant", "exp", "linear", "custom"], [got[0], got[1], *got[2]], expected):
        want = np.where(np.isin(np.arange(users), read), want, 0.0)
        np.testing.assert_allclose(value.numpy(), want, rtol=1e-12, err_msg=name)


@pytest.mark.parametrize(
    "script, option, bad, good",
    [
        ("bench_update", "--sizes", ["0", "-5", "x", "1.5"], [("10", [10])]),
        ("bench_update", "--load", ["-1", "one"], [("0", 0), ("3", 3)]),
        ("bench_files", "--rows", ["0", "99", "150", "1e6"], [("100", [100]), ("1000000", [1_000_000])]),
        ("bench_files", "--repeats", ["0", "-2"], [("1", 1)]),
        ("bench_files", "--load", ["-1"], [("0", 0)]),
    ],
)
def test_benchmark_counts_are_refused_at_parsing(script, option, bad, good, monkeypatch, capsys):
    """A size, row count, round count or load out of range stops the benchmark at parsing with
    an error naming the argument, instead of failing (or timing nothing) deep in a run."""
    module = _bench_module(script)
    parsed = {}

    def stop_after_parsing(self, *args, **kwargs):
        parsed["args"] = original(self, *args, **kwargs)
        raise SystemExit(0)

    original = argparse.ArgumentParser.parse_args
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", stop_after_parsing)
    for text in bad:
        monkeypatch.setattr(sys, "argv", [script, option, text])
        with pytest.raises(SystemExit) as stopped:
            module.main()
        assert stopped.value.code == 2
        assert f"argument {option}:" in capsys.readouterr().err
    for text, value in good:
        monkeypatch.setattr(sys, "argv", [script, option, text])
        with pytest.raises(SystemExit):
            module.main()
        assert getattr(parsed["args"], option.lstrip("-")) == value
