"""How passes over (batch, num_items) are cut into pieces, and small constants on the device.

CPU passes go a row chunk at a time so that temporaries stay in cache and are reused;
accelerators take one pass over the whole batch (fewer, larger kernel launches). The results are
the same either way (the tests switch ``cpu_tuned`` off on CPU)."""

from __future__ import annotations

import torch


# Row chunk of CPU passes over (batch, num_items): temporaries stay in cache and are reused.
CHUNK_ELEMENTS = 1 << 18


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
