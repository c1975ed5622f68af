"""How passes over (batch, num_items) are cut into pieces, and small constants on the device.

A pass over the batch is a few whole-batch tensor operations: every operation is a barrier
across torch's threads, so an update of many small operations waits on every thread that is
late (on a loaded machine, one whose core is busy with another process), and its time grows with
the number of operations rather than with the data. Passes that need a temporary as large as the
batch (a comparison before a sum) cut it into a few pieces of rows, each sized to the
last-level cache that the OS reports (``cache_bytes``), so that the next operation reads the
temporary from there, and never into more than ``MAX_PIECES`` pieces, so that the number of
operations does not grow with the batch. Accelerators take one pass over the whole batch. The
results are the same either way (the tests switch ``cpu_tuned`` off on CPU, and vary the piece
size)."""

from __future__ import annotations

import glob
import os
import threading
from contextlib import contextmanager
from functools import lru_cache

import torch


# Row chunk of the CPU passes that sort or copy rows (R-Precision, GAUC, the score-based metrics):
# temporaries stay in cache and are reused.
CHUNK_ELEMENTS = 1 << 18


# Smallest chunk (entries) of the budgeted passes on accelerators: fewer, larger kernel launches.
ACCELERATOR_CHUNK = 1 << 20


# The most pieces a pass over the batch is cut into (each costs a few tensor operations).
MAX_PIECES = 4


# Piece size when the OS reports no cache size (bytes).
DEFAULT_CACHE_BYTES = 32 << 20


@lru_cache(maxsize=1)
def cache_bytes() -> int:
    """The largest CPU cache the OS reports (Linux sysfs, else ``sysconf``), read once per
    process; ``DEFAULT_CACHE_BYTES`` when none is reported. Sizes a piece's temporaries."""
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
    # some systems report the LLC of the whole package (hundreds of MiB): cap it, a piece should
    # stay well below the batch
    usable = [size for size in sizes if 0 < size]
    return min(max(usable), 64 << 20) if usable else DEFAULT_CACHE_BYTES


def piece_rows(num_rows: int, row_bytes: int) -> int:
    """Rows per piece of a CPU pass that makes ``row_bytes`` of temporaries per row: as many as
    fit ``cache_bytes()``, but no more than ``MAX_PIECES`` pieces."""
    fit = max(1, cache_bytes() // max(row_bytes, 1))
    pieces = min(MAX_PIECES, -(-num_rows // fit))
    return -(-num_rows // pieces)  # pieces of equal size


# Entries from which a CPU operation inside ``serial`` uses all of torch's threads (``threads_for``).
# A parallel region ends at a barrier that waits for every thread: idle, that costs tens of
# microseconds; on a loaded machine, a time slice of whichever thread's core is busy elsewhere.
# An operation over fewer entries than this takes about a millisecond or less on one thread, so
# a second thread saves little even on an idle machine.
PARALLEL_MIN_ENTRIES = 1 << 20


_THREADS = threading.local()


@contextmanager
def serial(device: torch.device):
    """Run the CPU operations inside on the calling thread alone, except those that
    ``threads_for`` lets use every thread: an update is a few passes over the whole batch and
    many operations on the top candidates (a few hundred values per user); the latter gain nothing
    from a second thread and would each wait at a barrier for it. Restores torch's thread count on
    exit. No effect on accelerators, with one thread, or when already inside."""
    saved = torch.get_num_threads()
    if not cpu_tuned(device) or saved == 1 or getattr(_THREADS, "saved", None) is not None:
        yield
        return
    _THREADS.saved = saved
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)
        _THREADS.saved = None


@contextmanager
def threads_for(num_entries: int):
    """Inside ``serial``: every thread for an operation over at least ``PARALLEL_MIN_ENTRIES``
    entries."""
    saved = getattr(_THREADS, "saved", None)
    if saved is None or num_entries < PARALLEL_MIN_ENTRIES:
        yield
        return
    torch.set_num_threads(saved)
    try:
        yield
    finally:
        torch.set_num_threads(1)


_SCRATCH = threading.local()


def scratch(num_rows: int, num_cols: int, device: torch.device) -> torch.Tensor:
    """A float32 (num_rows, num_cols) buffer for a piece's temporaries, carved from one buffer kept
    per thread and device and reused by every update: a fresh buffer of many MiB costs a page
    fault per 4 KiB on every update, more than the pass that fills it. The kept buffer is at
    least ``cache_bytes()`` and grows to the largest piece requested (a pass cuts the batch into
    at most ``MAX_PIECES`` pieces, so at most 1 / MAX_PIECES of one (batch, num_items) float32).
    Contents are undefined; the caller overwrites them."""
    state = _SCRATCH.__dict__
    buffers, views = state.setdefault("buffers", {}), state.setdefault("views", {})
    device = torch.device(device)
    key = (num_rows, num_cols, device)
    if key not in views:
        size = num_rows * num_cols
        if device not in buffers or buffers[device].numel() < size:
            buffers[device] = torch.empty(max(size, cache_bytes() // 4), dtype=torch.float32, device=device)
            views.clear()
        if len(views) > 64:
            views.clear()
        views[key] = buffers[device][:size].view(num_rows, num_cols)
    return views[key]


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


def cpu_tuned(device: torch.device) -> bool:
    """Whether to take the CPU-tuned variants (pieces whose temporaries stay in cache, max pooling
    for small groups); accelerators take one pass over the whole batch and plain reductions. The
    results are the same either way (tested by switching this off on CPU)."""
    return device.type == "cpu"


def row_chunks(num_rows: int, row_cost: int, device: torch.device):
    """Row slices for passes over (batch, num_items); one slice on accelerators."""
    if not cpu_tuned(device):
        yield slice(None)
        return
    step = max(1, CHUNK_ELEMENTS // max(row_cost, 1))
    for start in range(0, num_rows, step):
        yield slice(start, start + step)


def budget_row_chunks(num_rows: int, num_cols: int, row_cost: int, bytes_per_entry: int, device: torch.device):
    """Row slices for a pass that makes about ``bytes_per_entry`` bytes of temporaries per entry
    (sorts, int64 indices), whose chunks' temporaries stay within one (batch, num_items) float32.
    CPU: ``row_chunks``' cache-sized chunks, but at least one row per thread (torch sorts rows in
    parallel) where the budget allows. Accelerators: the budget, at least ``ACCELERATOR_CHUNK``
    entries."""
    budget_rows = max(1, num_rows * 4 // bytes_per_entry)
    if cpu_tuned(device):
        step = max(1, CHUNK_ELEMENTS // max(row_cost, 1), min(torch.get_num_threads(), budget_rows))
    else:
        step = max(budget_rows, ACCELERATOR_CHUNK // max(num_cols, 1))
    for start in range(0, num_rows, step):
        yield slice(start, start + step)
