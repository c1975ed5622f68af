"""How passes over (batch, num_items) are cut into pieces, and small constants on the device.

Every torch operation on CPU is a barrier across torch's threads: an update of many small
operations waits on every thread that is late (on a loaded machine, one whose core runs another
process), so its time grows with the number of operations rather than with the data. The
selection of the top k and the usual pass over the labels (one max-reduction) work on the whole
batch at once. A pass that compares every label and then sums and reduces the comparison (which
should be read while it is in cache) is cut into a few pieces of rows sized from the cache the
OS reports (``cache_bytes``), at most ``MAX_PIECES`` of them while each fits a share of that
cache (``piece_rows``). The index patterns of a shape are made once (``index_constant``). Accelerators take one pass over the whole batch (fewer, larger kernel launches). The
results are the same either way (the tests switch ``cpu_tuned`` off on CPU and vary the pieces)."""

from __future__ import annotations

import glob
import os
from functools import lru_cache

import torch


# Row chunk of CPU passes over (batch, num_items): temporaries stay in cache and are reused.
CHUNK_ELEMENTS = 1 << 18


# The most pieces a pass over the batch is cut into (each piece costs a few operations).
MAX_PIECES = 32


# Last-level cache size assumed when the OS reports none (bytes).
DEFAULT_CACHE_BYTES = 32 << 20


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


# Share of the last-level cache a piece's inputs and temporaries take by preference, and at most
# twice that (the rest is left to the other threads' pieces and to everything else).
PIECE_CACHE_SHARE = 1 / 8


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


# Smallest chunk (entries) of the budgeted passes on accelerators: fewer, larger kernel launches.
ACCELERATOR_CHUNK = 1 << 20


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


def cpu_tuned(device: torch.device) -> bool:
    """Whether to take the CPU-tuned variants (row chunks that stay in cache, max pooling for
    small groups); accelerators take one pass over the whole batch and plain reductions. The
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
