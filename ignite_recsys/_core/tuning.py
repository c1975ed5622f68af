"""Every speed setting of the library, in one place, and the two helpers that cut passes into pieces.

None of these settings changes a value: each picks between exact ways of computing the same
result (the tests vary them and compare). Each says why it exists and how to re-measure it;
``python benchmarks/bench_update.py`` (add ``--operations`` for the number of torch operations)
and ``python benchmarks/bench_forms.py`` measure their effect.

Why pieces. Every torch operation on CPU is a barrier across torch's threads, so an update's time
grows with its number of operations as well as with its data. The top-k selection and the usual
pass over the labels work on the whole batch at once. A pass that compares every label and then
sums and reduces the comparison (which should be read while it is in cache) is cut into a few
pieces of rows sized from the cache the OS reports (:func:`row_pieces`). Accelerators take one
pass over the whole batch (fewer, larger kernel launches), or pieces within a memory budget. The
index patterns of a shape are made once (:func:`index_constant`).

Threads. A ranking update runs its operations on one torch thread (:func:`ranking_threads`): a
multi-threaded operation waits at its end for every thread, for milliseconds when another process
holds a core. Its passes over the whole inputs are shared in row blocks with helper threads that
it never waits for (:func:`shared_pass`); the pass over the labels runs on a helper while the
update's thread selects the scores (:func:`side_job`): from the start where the labels are larger
than the cache, else once the helper is done with its share of the scores' blocks.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import queue
import threading
import time
from functools import lru_cache
from typing import Iterator, Optional

import torch

# --- The top-k selection's groups (selection/groups.py) ---------------------------------------------
# (items per group, items per sub-group) of the two selection levels on long rows: torch's CPU
# max-reduction is fast over 64 contiguous values (much slower over 32), and sub-groups of 8 balance
# the second level. Re-measure: bench_update.py at N = 1M with other sizes here.
LONG_ROW_GROUPS = (64, 8)
# On shorter rows choosing k of few groups of 64 prunes too little: groups of 16, sub-groups of 4.
SHORT_ROW_GROUPS = (16, 4)
# Rows of at least these many items per k take the long-row groups, resp. any groups at all
# (below: one selection among all items): where the two levels pay off, and where groups of 64
# prune enough. Re-measure: bench_update.py at N = 2k..200k.
LONG_ROWS_PER_K = 200
GROUPED_ROWS_PER_K = 20
# From this many group maxima per row on, the best groups are chosen on CPU by one float selection
# (rows tied at its boundary re-selected by int64 keys): keys over that many maxima cost more than
# the float selection's slower comparisons. Re-measure: bench_update.py at N = 100k..1M.
FLOAT_SELECTION_FROM = 4096
# On CPU the items of the chosen groups that score at least the lowest chosen maximum are the
# final candidates when they are at most this many times k per row (else the sub-groups of
# LONG_ROW_GROUPS / SHORT_ROW_GROUPS: rows of many ties). Re-measure: bench_update.py.
THRESHOLD_CANDIDATES_PER_K = 4
# Inputs taking at most this share of the last-level cache (``cache_bytes``) stay in cache between
# two reads on CPU. Such scores with groups smaller than FAST_REDUCTION are read twice, a block of
# rows at a time (selection/groups.py ``threshold_order``: the strided groups' maxima, then a
# comparison of every score), such labels with small strided groups are compared whole
# (relevance.py), on a helper once it is done with its blocks of the scores; larger labels are
# passed over on a helper from the start of the update (``side_job``). Re-measure: bench_update.py
# at 10k and 100k items.
IN_CACHE_SHARE = 0.5
# On CPU, float32 rows in groups are selected on the host (numpy's partition and sort of int64 keys,
# selection/host.py) after the group maxima: several times faster than torch.topk over the few values
# left. Re-measure: bench_update.py at N = 10k..1M with False here.
HOST_SELECTION = True
# Such rows larger than the cache: the maxima of strided groups of this many items (torch reduces
# up to 32 strided runs at the speed of a plain row maximum, more much slower; fewer items per
# group leave fewer to read again), then the items of the groups that reach the k-th largest
# maximum of about COARSE_GROUPS_PER_K x k coarser groups (selection/host.py
# ``order_in_strided_groups``). Re-measure: bench_update.py at N = 100k and 1M.
STRIDED_GROUP = 16
COARSE_GROUPS_PER_K = 4
# Rows of fewer than this many items per k take strided groups of SHORT_STRIDED_GROUP items: about
# k of their groups are read again, and at 256 x 80k..200k (k = 101) halving what each group holds
# saves more than the twice as many maxima cost (256 x 100k: 0.818x -> 0.768x topk; 300k: equal;
# 1M: 0.515x -> 0.574x). Re-measure: bench_update.py at N = 100k..1M.
LONG_STRIDED_ROWS_PER_K = 3000
SHORT_STRIDED_GROUP = 8
# Rows of at least this many items per k take those strided groups; shorter rows larger than the
# cache take the maxima of LONG_ROW_GROUPS / SHORT_ROW_GROUPS, the best groups by one partition of
# them and the chosen groups' items scoring at least the lowest chosen maximum (``host_order``):
# there the strided groups' fixed cost per row (about k groups read again, 16 items each) outweighs
# the faster maxima. At 256 x 50k (k = 101, 495 items per k) strided groups take 0.89x torch.topk
# against 0.93x, at 65k 0.80x against 0.90x, at 40k 0.96x against 0.98x; the exclusions' selection
# of k + E items (EXCLUDED_IN_GROUPS_PER_K) reaches such widths at 100k. Re-measure:
# bench_update.py at N = 40k..200k, each run alternating with a run of the other setting.
STRIDED_ROWS_PER_K = 300
# Below this group size, group maxima on CPU are taken by max pooling (torch's max-reduction is
# slow over few contiguous values; pooling handles small groups faster).
FAST_REDUCTION = 64

# --- The ideal ranking's label groups (selection/values.py) -------------------------------------
# The smallest strided label group worth a two-step selection of the top labels (about
# sqrt(num_items / k) labels per group); below it one selection among all labels.
MIN_VALUE_GROUP = 3
# From this many labels per group on, the groups are runs of 32 or 64 consecutive labels on every
# device. Strided groups of 32 reduce at the speed of a plain row maximum on some CPUs and 3.6x
# slower on others (an AMD EPYC VM, 256 x 1M on one thread: 137-155 ms against 38 ms, as if its
# prefetchers followed fewer than 32 streams), where runs of 64 take 1.0-1.1x a row maximum there
# and about 1.3x on the first; their chosen groups are also read as whole cache lines. Whole
# updates on that VM, 256 x 1M binary float labels: 168 -> 102 ms, 100k: 26 -> 16 ms.
# Re-measure: bench_update.py at N = 100k and 1M, with graded labels too.
CONTIGUOUS_FROM = 24

# Exclusions given as lists of at most this many items per k in each row (sparse, ``ItemIds``, or a
# dense mask of few entries), or of any number where rows of STRIDED_ROWS_PER_K x (k + E) items
# take strided groups, take the plain selection of k + E items on CPU, the excluded ones then
# dropped; more enter the stages of the group pre-filter (selection/excluding.py
# ``_listed_in_groups``), whose cost grows more slowly with E. A whole update at 256 x 100k, k =
# 101: 26 ms against 34 ms at E = 100, 30 against 36 ms at E = 200, 50 against 38 ms at E = 300
# (no exclusion: 18 ms); at 1M items 173 against 216 ms at E = 1,000, 276 against 294 ms at E =
# 3,000. Re-measure: bench_forms.py --sections exclude, and whole updates at other E.
EXCLUDED_IN_GROUPS_PER_K = 2

# On CPU, |R| is counted among the labels of the groups whose maximum is relevant (and the ideal
# ranking's labels sorted among them) when those groups are at most this share of ``depth`` per
# row or, where |R| is counted, hold at most RELEVANT_LABELS_SHARE of the labels; else among the
# ``depth`` best groups of every row, and by a comparison of every label for the users with more
# relevant groups. A copy of a group's labels costs about as much as comparing 30 labels: a
# whole update with the copy crosses over with the comparison at about 200 relevant labels per
# user at 100k items and 1,500 at 1M, about 1/16 of the labels in their groups; 1/24 keeps a
# margin (256 x 100k, top_k=[10], 20 relevant per user: 28 ms -> 15 ms; 1M: 280 -> 121 ms).
# Re-measure: bench_registry.py --top-k 10 --forms dense --ties stable, and whole updates with
# 20-3,000 relevant labels per user.
RELEVANT_GROUPS_SHARE = 0.5
RELEVANT_LABELS_SHARE = 1 / 24

# --- Threads of a ranking update (CPU) --------------------------------------------------------
# A pass over at least this many entries of the (batch, num_items) inputs (the scores' and the
# labels' group maxima) takes torch's own thread count; every other operation of a ranking update
# runs on one thread. Re-measure: bench_update.py (idle, --load 1, --load 4) with other sizes here.
WIDE_PASS_ENTRIES = 1 << 20
# Such a pass is shared between the update's thread and helper threads (one per further torch
# thread, at most this many) in blocks of rows: about 8 blocks per thread, each at least
# SHARED_BLOCK_ENTRIES entries (5 MiB of float32), and at least one block per thread. Each numpy
# call of a block then takes hundreds of microseconds: a thread that finishes one waits for the
# interpreter lock, and a hand-off of that lock between two busy threads costs tens of
# microseconds. At 256 x 10k scores (two blocks, with HELPER_WAIT_SHARE) an update takes about
# 0.90x torch.topk against 0.95x in blocks of 1 MiB (1.00x against 1.12x in bench_update.py's
# rounds beside the other libraries), and about 0.52x against 0.47x with one busy process. A pass
# that is not shared takes blocks of BLOCK_ENTRIES (1 MiB), which stay in the core's own cache (in
# blocks of 5 MiB an update with num_threads=1 is 4% slower at 10k). Re-measure: bench_update.py
# --under-load and --sizes 10000, each run alternating with a run of the other setting.
MAX_HELPERS = 3
SHARED_BLOCK_ENTRIES = 5 << 18
BLOCK_ENTRIES = 1 << 18
# The update's thread waits for a block a helper has claimed and not finished up to this many times
# its own longest block, from the helper's claim (a helper that runs finishes within that); past
# it, it computes the block itself (another process holds the helper's core). It takes over a side
# job started at once (``side_job``) that no helper has started as long, and at least
# TAKE_OVER_AFTER seconds, after it was handed over: right after a forward pass (OpenMP workers
# spinning) the helper started the labels of 256 x 1M about 70 ms late (of 100k, 10 ms); with four
# busy processes a take-over after a few milliseconds costs more than it saves (the helper, off its
# core again, claims score blocks the update's thread then waits for). bench_update.py --loop at
# 1M: 0.75x torch.topk without the take-over, 0.62x with it. Re-measure: --loop and --under-load.
HELPER_WAIT_SHARE = 1.5
TAKE_OVER_AFTER = 0.02
# A side job (:func:`side_job`) on a helper reads its inputs in blocks of up to this many entries:
# every numpy call of a block ends in a wait for the interpreter lock, which the update's thread
# holds between its own operations meanwhile. Re-measure: bench_update.py at 10k items.
SIDE_JOB_BLOCK_ENTRIES = 1 << 22

# R-Precision on CPU ranks dense rows to the batch's largest |R| by the ranking step while that is
# at most this share of the items (its per-position float64 tensors stay small); past it the rows
# are ranked to that depth a few rows at a time (full_rows.hits_at_own_depth), whose temporaries
# stay within a quarter of the inputs where the ranking step's deep selection keeps an int64 key
# an entry of the batch. 128 x 100k: 20 relevant per user 0.05 of the inputs, 18 ms; 200: 0.14,
# 27 ms; 1,000: 0.02, 45 ms (0.28 and 690 ms through the ranking step); 5,000: 0.05 (1.7).
OWN_DEPTH_SHARE = 1 / 256

# A dense bool exclusion mask larger than the cache is read as a list (item_sets.py
# ``listed_of_mask``) through the maxima of runs of this many int64 words (128 items) first, then
# the words of the runs that hold an entry: 256 x 1M with 100 entries per user, 50 ms against 87
# ms for a nonzero of every word (one thread; runs of 8 words 69 ms, of 32 49 ms). A mask in
# cache takes the plain nonzero (at 256 x 100k 4 ms against 9 ms). A whole update at 256 x 1M
# with 100 excluded per user: 166 -> 147 ms. Re-measure: listed_of_mask alone on such masks, and
# bench_forms.py --sections exclude --exclude-items 1000000.
MASK_WORD_RUN = 16

# --- Small batches (CPU) --------------------------------------------------------------------------
# Batches of at most this many scores are ranked with the fewest operations (each label compared,
# the ideal ranking's labels selected among all): their fixed cost per operation outweighs the
# work the group pre-filters save. Re-measure: bench_update.py's small-batch stream.
SMALL_BATCH_ENTRIES = 1 << 16

# --- Pieces of passes over (batch, ...) rows ---------------------------------------------------
# The most pieces a pass is cut into by preference (each piece costs a few operations).
MAX_PIECES = 32
# Last-level cache assumed when the OS reports none (bytes).
DEFAULT_CACHE_BYTES = 32 << 20
# Share of the last-level cache a piece's inputs and temporaries take by preference (at most twice
# that); the rest is left to the other threads' pieces and to everything else.
PIECE_CACHE_SHARE = 1 / 8
# Entries of the pointwise metrics' flat pieces on CPU (a cache-sized chunk of a flat input).
CHUNK_ELEMENTS = 1 << 18
# Smallest piece on accelerators, in entries: fewer, larger kernel launches.
ACCELERATOR_CHUNK = 1 << 20

# --- Bytes of temporaries per entry, which size the pieces -------------------------------------
# The tie pass of ties="average": float64 comparisons, relevance, gains and their products.
TIE_PASS_BYTES_PER_ENTRY = 40
# A full-row sort (R-Precision, GAUC): sorted values and int64 indices and their products.
SORT_BYTES_PER_ENTRY = 64
# The pointwise metrics: the value checks (8 bytes per entry), the loss and its float64 operands (64).
CHECK_BYTES_PER_ENTRY = 8
LOSS_BYTES_PER_ENTRY = 64


@lru_cache(maxsize=1)
def cache_bytes() -> int:
    """The largest CPU cache the OS reports (Linux sysfs, else ``sysconf``), read once per
    process; ``DEFAULT_CACHE_BYTES`` when none is reported, at most 64 MiB (some systems report
    the cache of a whole package)."""
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path) as handle:
                text = handle.read().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            sizes.append(int(text.rstrip("KMG")) * scale)
        except (OSError, ValueError):
            continue
    for name in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        try:
            sizes.append(int(os.sysconf(name)))
        except (AttributeError, ValueError, OSError):
            continue
    usable = [size for size in sizes if size > 0]
    return min(max(usable), 64 << 20) if usable else DEFAULT_CACHE_BYTES


def cpu_tuned(device: torch.device) -> bool:
    """Whether to take the CPU variants: cache-sized pieces, max pooling for small groups, and host
    reads where a host read waits for nothing (which rows to read again, whether keys are already
    sorted). Accelerators take one pass over the whole batch, plain reductions and no host read.
    The results are the same either way (the tests switch this off on CPU)."""
    return device.type == "cpu"


def stays_in_cache(x: torch.Tensor) -> bool:
    """Whether ``x`` takes at most ``IN_CACHE_SHARE`` of the last-level cache (``cache_bytes``):
    it stays in cache between two reads on CPU."""
    return x.numel() * x.element_size() <= IN_CACHE_SHARE * cache_bytes()


def small_batch(x: torch.Tensor) -> bool:
    """Whether ``x`` (a batch of scores or labels) takes the small-batch path on CPU
    (``SMALL_BATCH_ENTRIES``)."""
    return x.numel() <= SMALL_BATCH_ENTRIES and cpu_tuned(x.device)


def piece_rows(num_rows: int, row_bytes: int, device: torch.device) -> int:
    """Rows per piece of a pass that reads and makes ``row_bytes`` bytes per row, for pieces of
    equal size: as many rows as fit ``PIECE_CACHE_SHARE`` of ``cache_bytes()``, more where that
    would make more than ``MAX_PIECES`` pieces, but no more than fit twice that share (at least
    one row). So a pass is at most ``MAX_PIECES`` pieces unless each piece already reads several
    MiB (an operation's fixed cost is then small beside its work, while a piece larger than the
    cache would be read from memory once per reduction). Every row at once on accelerators."""
    if not cpu_tuned(device) or num_rows == 0:
        return max(num_rows, 1)

    def fit(share: float) -> int:
        return max(1, int(cache_bytes() * share) // max(row_bytes, 1))

    rows = min(max(-(-num_rows // MAX_PIECES), fit(PIECE_CACHE_SHARE)), fit(2 * PIECE_CACHE_SHARE))
    pieces = -(-num_rows // rows)
    return -(-num_rows // pieces)


def row_pieces(
    num_rows: int, row_bytes: int, device: torch.device, *, budget_bytes: Optional[int] = None, at_least: int = 1
) -> list:
    """The row slices of a pass over ``num_rows`` rows that reads and makes ``row_bytes`` bytes
    per row. CPU: :func:`piece_rows` rows per piece, and at least ``at_least`` (e.g. one row per
    thread for a sort, which torch runs row-parallel). Accelerators: every row at once, or, with
    ``budget_bytes``, as few pieces as keep each within that budget (each at least
    ``ACCELERATOR_CHUNK`` four-byte entries)."""
    if cpu_tuned(device):
        step = max(piece_rows(num_rows, row_bytes, device), min(at_least, num_rows))
    elif budget_bytes is None:
        step = max(num_rows, 1)
    else:
        step = max(1, budget_bytes // max(row_bytes, 1), 4 * ACCELERATOR_CHUNK // max(row_bytes, 1))
    return [slice(start, start + step) for start in range(0, num_rows, step)]


def entry_pieces(tensors: tuple, bytes_per_entry: int) -> Iterator[tuple]:
    """Aligned 1-D pieces of ``tensors`` (one shape, any number of dimensions; None entries stay
    None), together covering every entry once in the same order. CPU: ``CHUNK_ELEMENTS`` entries.
    Accelerators: pieces whose temporaries (``bytes_per_entry`` per entry) total at most one
    float32 copy of the input, and at least ``ACCELERATOR_CHUNK`` entries. Contiguous inputs are
    cut into views; others a block of leading-dimension slices at a time (each copied whole, at
    most one piece)."""
    first = tensors[0]
    if cpu_tuned(first.device):
        size = CHUNK_ELEMENTS
    else:
        size = max(ACCELERATOR_CHUNK, first.numel() * 4 // bytes_per_entry)
    yield from _flat_pieces(tensors, size)


def _flat_pieces(tensors: tuple, size: int) -> Iterator[tuple]:
    first = tensors[0]
    if first.ndim <= 1 or all(t is None or t.is_contiguous() for t in tensors):
        flat = [None if t is None else t.reshape(-1) for t in tensors]  # views
        for start in range(0, first.numel(), size):
            yield tuple(None if t is None else t[start : start + size] for t in flat)
        return
    per_slice = first.numel() // first.shape[0]
    step = size // per_slice
    if step >= 1:
        for start in range(0, first.shape[0], step):
            yield tuple(None if t is None else t[start : start + step].reshape(-1) for t in tensors)
    else:
        for index in range(first.shape[0]):
            yield from _flat_pieces(tuple(None if t is None else t[index] for t in tensors), size)


# --- Constants on the device --------------------------------------------------------------------
_CONSTANTS: dict = {}


def device_constant(values, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A small constant tensor (e.g. the cut-offs) on ``device``, made once per (values, dtype,
    device). A plain ``torch.tensor(..., device="cuda")`` copies synchronously from pageable
    memory; this copies from pinned memory without blocking, and keeps the source alive."""
    key = (tuple(values), dtype, torch.device(device))
    if key not in _CONSTANTS:
        host = torch.tensor(key[0], dtype=dtype)
        if key[2].type == "cuda":
            host = host.pin_memory()
        _CONSTANTS[key] = (host, host.to(key[2], non_blocking=True))
    return _CONSTANTS[key][1]


@lru_cache(maxsize=64)
def index_constant(start: int, end: int, step: int, rows: int, device: torch.device) -> torch.Tensor:
    """``torch.arange(start, end, step)`` (int64) on ``device``, as (rows, n) expanded over ``rows``
    rows when ``rows`` > 0 and (n, 1) column when ``rows`` is -1: the index patterns every update
    of a shape reads (a group's offsets, the rows' starts in the flat batch), made once per shape
    and device instead of an operation per update. Read-only; at most 64 are kept."""
    values = torch.arange(start, end, step, device=device)
    if rows > 0:
        return values.expand(rows, -1)
    return values.unsqueeze(1) if rows == -1 else values


# --- Threads ------------------------------------------------------------------------------------
_THREADS = threading.local()


@contextlib.contextmanager
def ranking_threads(num_threads: Optional[int] = None) -> Iterator[None]:
    """torch's intra-op threads during a ranking update, restored after it: ``num_threads`` for
    every operation if given; else one thread, except inside :func:`wide_pass` (torch's own count).

    Why. Every multi-threaded torch operation on CPU ends at a barrier that waits for each of its
    threads; when another process holds a core, the barrier waits for the scheduler (milliseconds),
    at every operation. One thread never waits, and the few passes that read the whole inputs are
    large enough to share: an update then slows with the load as ``torch.topk`` does. Nested
    uses keep the outer setting."""
    if getattr(_THREADS, "wide", None) is not None:
        yield
        return
    outer = torch.get_num_threads()
    inner = 1 if num_threads is None else num_threads
    _THREADS.wide = outer if num_threads is None else num_threads
    if inner != outer:
        torch.set_num_threads(inner)
    try:
        yield
    finally:
        _THREADS.wide = _THREADS.deferred = _THREADS.queued = None
        if inner != outer:
            torch.set_num_threads(outer)


@contextlib.contextmanager
def wide_pass(entries: int) -> Iterator[None]:
    """Around one pass over ``entries`` entries inside :func:`ranking_threads`: the thread count
    from outside the update when the pass reads at least ``WIDE_PASS_ENTRIES`` entries (nothing
    changes elsewhere, or outside an update)."""
    wide = getattr(_THREADS, "wide", None)
    current = torch.get_num_threads()
    if wide is None or entries < WIDE_PASS_ENTRIES or wide == current:
        yield
        return
    torch.set_num_threads(wide)
    try:
        yield
    finally:
        torch.set_num_threads(current)


class _Helpers:
    """The helper threads of :func:`shared_pass` (made on first use, per process)."""

    pid: Optional[int] = None
    jobs: "queue.SimpleQueue" = queue.SimpleQueue()
    threads: list = []


def _helper_loop(jobs: "queue.SimpleQueue", ready: threading.Event) -> None:
    torch.get_num_threads()  # this thread's own torch threads: the one set while it starts
    ready.set()
    while True:
        job = jobs.get()
        try:
            with torch.no_grad():
                job()
        except BaseException:  # the update's thread computes whatever a helper leaves
            pass
        # Let go of the job now. Held until the next job arrives, its closure kept the batch alive
        # past the update, and the helper freed it itself when the next update handed it work:
        # unmapping 100 MB of scores took it 8-12 ms, while the update waited for its blocks.
        job = None


def _helper_jobs(count: int) -> "queue.SimpleQueue":
    """The job queue of ``count`` helper threads, each running torch operations on one thread.
    Started inside ``ranking_threads`` (one torch thread), whose setting a new thread takes."""
    if _Helpers.pid != os.getpid():  # first use, or a forked child (whose threads did not follow)
        _Helpers.pid, _Helpers.jobs, _Helpers.threads = os.getpid(), queue.SimpleQueue(), []
    while len(_Helpers.threads) < count:
        ready = threading.Event()
        thread = threading.Thread(
            target=_helper_loop, args=(_Helpers.jobs, ready), name="ignite_recsys-pass", daemon=True
        )
        thread.start()
        ready.wait()
        _Helpers.threads.append(thread)
    return _Helpers.jobs


def row_pass(compute, x: torch.Tensor) -> torch.Tensor:
    """``compute(rows)`` over every row of ``x`` (a reduction of each row block), as one tensor:
    shared in row blocks with helper threads (:func:`shared_pass`), else over all rows at once
    with the thread count of :func:`wide_pass`."""
    blocks = shared_pass(compute, x.shape[0], x.shape[1], x.device) if x.ndim == 2 else None
    if blocks is not None:
        return torch.cat(blocks)
    with wide_pass(x.numel()):
        return compute(slice(None))


def shared_pass(
    compute, num_rows: int, row_entries: int, device: torch.device, max_rows: Optional[int] = None
) -> Optional[list]:
    """``[compute(rows) for rows in blocks]`` over row blocks covering ``num_rows`` rows in order,
    shared with helper threads; None where the pass is not shared (then the caller runs it
    whole, see :func:`wide_pass`). ``compute`` must return a new value (None counts as not
    computed yet, and is computed again) and write nothing shared.

    Shared on CPU inside :func:`ranking_threads` when torch's own count outside it is above one and the
    pass reads at least ``WIDE_PASS_ENTRIES`` entries. Every thread claims the next block until
    none is left. For a block a helper has claimed but not finished, the update's thread waits
    until ``HELPER_WAIT_SHARE`` times its own longest block has passed since the claim, then
    computes the block itself (a late helper's result is dropped). So a helper whose core
    another process holds costs at most about one and a half blocks, where a multi-threaded
    operation would wait for it at its barrier, and a helper that runs is not raced for its
    block. ``max_rows``: the most rows of a block (else as many as make about 8 blocks per
    thread, each at least ``SHARED_BLOCK_ENTRIES`` entries, and at least one per thread)."""
    wide = getattr(_THREADS, "wide", None)
    entries = num_rows * row_entries
    if wide is None or wide < 2 or num_rows < 2 or entries < WIDE_PASS_ENTRIES or not cpu_tuned(device):
        return None
    if torch.get_num_threads() != 1:
        return None
    helpers = min(wide - 1, MAX_HELPERS)
    step = max(-(-num_rows // (8 * (helpers + 1))), -(-SHARED_BLOCK_ENTRIES // max(row_entries, 1)))
    step = min(step, -(-num_rows // (helpers + 1)))  # a block for each thread at least
    step = step if max_rows is None else max(1, min(step, max_rows))
    blocks = [slice(start, min(start + step, num_rows)) for start in range(0, num_rows, step)]
    if len(blocks) < 2:
        return None
    results: list = [None] * len(blocks)
    claimed_at: list = [None] * len(blocks)
    done = [threading.Event() for _ in blocks]
    claims = itertools.count()  # next() on it is atomic: each block is claimed once
    own: list = []  # the update's thread's block times (seconds)

    def work(timed: bool = False) -> None:
        while True:
            if timed:  # before claiming: a block is not held while the update's thread runs the job
                _take_over_queued_job(max(own, default=0.0))
            index = next(claims)
            if index >= len(blocks):
                return
            claimed_at[index] = start = time.perf_counter()
            results[index] = compute(blocks[index])
            done[index].set()
            if timed:
                own.append(time.perf_counter() - start)

    jobs = _helper_jobs(helpers)
    for _ in range(helpers):
        jobs.put(work)
    deferred, _THREADS.deferred = getattr(_THREADS, "deferred", None), None
    if deferred is not None:  # a side job waiting for a shared pass: the first helper done with it runs it
        jobs.put(deferred.run)
    work(timed=True)
    longest = max(own, default=0.0)
    for index in range(len(blocks)):
        if results[index] is None and claimed_at[index] is not None:  # a helper's block, not done yet
            done[index].wait(max(0.0, claimed_at[index] + HELPER_WAIT_SHARE * longest - time.perf_counter()))
        if results[index] is None:  # not done by then: computed here as well
            results[index] = compute(blocks[index])
    finished = list(results)
    # a helper that has not taken its ``work`` yet finds no block left, and the queued ``work``
    # holds neither the pass's inputs nor its results (see ``_helper_loop``)
    compute, blocks[:], results[:] = None, [], []
    return finished


def _take_over_queued_job(longest: float) -> None:
    """On the update's thread, before a block of a shared pass: compute the side job started at
    once (:func:`side_job`) if no helper has started it ``HELPER_WAIT_SHARE`` times ``longest``
    (the thread's longest block so far), and at least ``TAKE_OVER_AFTER`` seconds, after it was
    handed over."""
    job = getattr(_THREADS, "queued", None)
    if job is None or not longest:
        return
    if not job.waiting():
        _THREADS.queued = None
    elif time.perf_counter() - job.queued_at > max(HELPER_WAIT_SHARE * longest, TAKE_OVER_AFTER):
        _THREADS.queued = None
        job.run(on_helper=False)


def row_blocks(compute, num_rows: int, row_entries: int, device: torch.device) -> list:
    """``[compute(rows) for rows in blocks]``: :func:`shared_pass`'s blocks where the pass is
    shared, else blocks of about ``BLOCK_ENTRIES`` entries in turn (in a side job on a
    helper, ``SIDE_JOB_BLOCK_ENTRIES``: fewer numpy calls, each a wait for the interpreter lock
    there). For a pass that reads each block more than once: the later reads find it in cache,
    so a shared block of 4-byte entries takes at most ``PIECE_CACHE_SHARE`` of the cache where
    ``MAX_PIECES`` blocks cover the rows that way (else ``MAX_PIECES`` blocks: the operations
    stay bounded)."""
    fitting = int(cache_bytes() * PIECE_CACHE_SHARE) // max(4 * row_entries, 1)
    blocks = shared_pass(compute, num_rows, row_entries, device, max_rows=max(fitting, -(-num_rows // MAX_PIECES)))
    if blocks is not None:
        return blocks
    entries = SIDE_JOB_BLOCK_ENTRIES if getattr(_THREADS, "side_job", False) else BLOCK_ENTRIES
    step = max(1, -(-entries // max(row_entries, 1)))
    return [compute(slice(start, min(start + step, num_rows))) for start in range(0, num_rows, step)]


class SideJob:
    """One computation of an update handed to a helper thread while the update's thread does
    another (:func:`side_job`): its result by :meth:`result`. Whichever thread starts it first
    runs it; the update's thread runs it itself if no helper has started it by then (nor a
    shared pass queued it), and otherwise waits for the helper to finish."""

    def __init__(self, compute) -> None:
        self._compute = compute
        self._lock = threading.Lock()
        self._started = False
        self._done = threading.Event()
        self._value = None
        self._error: Optional[BaseException] = None
        self.queued_at: Optional[float] = None  # when it was handed to the helpers, if started at once

    def _claim(self) -> bool:
        with self._lock:
            started, self._started = self._started, True
        return not started

    def run(self, on_helper: bool = True) -> None:
        """Compute, unless another thread already took the job: on a helper, or (``on_helper``
        False) on the update's thread, taking it over in a shared pass."""
        if not self._claim():
            return
        # as on a helper: its passes in turn, not shared (the helper has the shared pass's blocks)
        _THREADS.side_job, wide, _THREADS.wide = on_helper, getattr(_THREADS, "wide", None), None
        compute, self._compute = self._compute, None  # a job still queued holds no input
        try:
            self._value = compute()
        except BaseException as error:  # raised again on the update's thread
            self._error = error
        finally:
            _THREADS.side_job, _THREADS.wide = False, wide
        self._done.set()

    def waiting(self) -> bool:
        """Whether no thread has started the job yet (a hint: the start is claimed under a lock)."""
        return not self._started

    def result(self):
        """The job's value (computed here if no thread has started it), once: the job then holds
        neither its inputs nor its value."""
        if getattr(_THREADS, "deferred", None) is self:  # no shared pass started it
            _THREADS.deferred = None
        if getattr(_THREADS, "queued", None) is self:
            _THREADS.queued = None
        if self._claim():
            compute, self._compute = self._compute, None  # a job still queued holds no input
            return compute()
        self._done.wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        value, self._value = self._value, None
        return value


def side_job(compute, inputs: torch.Tensor):
    """``compute`` (no arguments, writes nothing shared) handed to a helper thread where the
    update's passes are shared (see :func:`shared_pass`: inside :func:`ranking_threads`, on CPU,
    at least ``WIDE_PASS_ENTRIES`` entries), for :meth:`SideJob.result` to collect; else None (the
    caller computes it in turn). On the helper it runs on one torch thread and its passes are not
    shared. Where ``inputs`` (what it reads) do not stay in cache (``IN_CACHE_SHARE``) it starts
    at once: two passes over inputs larger than the cache then run side by side, each on its own
    core. Where they do, it waits for the next shared pass and starts on the first helper done
    with its blocks: the passes stay shared, and the job then runs beside the update's thread's
    work that follows them (one pass over inputs in cache takes a fraction of the selection).
    A job started at once that no helper has started by the time the update's thread, in a
    shared pass, has waited ``HELPER_WAIT_SHARE`` times its longest block and ``TAKE_OVER_AFTER``
    for it is computed by the update's thread there (its passes not shared), and the helper
    takes the pass's blocks when it starts: a helper kept off its core for long (torch's OpenMP
    workers spin for a while after each multi-threaded operation, e.g. a model's forward pass)
    then holds up neither pass."""
    wide = getattr(_THREADS, "wide", None)
    if wide is None or wide < 2 or inputs.numel() < WIDE_PASS_ENTRIES or not cpu_tuned(inputs.device):
        return None
    if torch.get_num_threads() != 1:
        return None
    job = SideJob(compute)
    if stays_in_cache(inputs):
        _THREADS.deferred = job  # started behind the next shared pass's blocks
    else:
        job.queued_at = time.perf_counter()
        _THREADS.queued = job  # the update's thread takes it over if no helper starts it soon
        _helper_jobs(min(wide - 1, MAX_HELPERS)).put(job.run)
    return job
