"""The group pre-filter's selections on the host: CPU float32 rows, read through numpy.

On CPU a host read waits for nothing, and numpy's partition and sort of int64 keys (vectorised)
take a fraction of ``torch.topk``'s time on the few values left after the group maxima. Both
selections list every item scoring at least a threshold T that ``k`` distinct items reach, then
sort the keys of those candidates once (``_first_k``): for long rows larger than the cache, the
items of the strided groups whose maximum reaches T (``order_in_strided_groups``); for shorter
ones, the items of the best ``k`` groups by (maximum descending, group index ascending) scoring
at least the lowest chosen maximum (``best_groups``, ``order_above``); for rows that stay in
cache, every item compared with T (``order_at_least``). Exact: an item below T has at least
``k`` items ranked ahead of it (see :mod:`.groups`). The sorted keys also give the scores at the
order (``_values_of``), which the ranking step would otherwise gather from the rows.

Keys. A value's order as an int32 (``ordered``) in the high 32 bits, ``2**32 - 1 -`` its index
in the low ones: the key's descending order is the stable order (value descending, index
ascending). Stored inverted (``~key``) so that numpy's ascending partition and sort give it.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import torch

from .. import tuning

_LOW_MASK = (1 << 32) - 1


def order_above(values, tail, tail_start: int, best: np.ndarray, threshold: np.ndarray, k: int, group: int):
    """(items, values) (batch, k) of each row in stable rank order (``_first_k``), from ``values``
    (batch, k * group), the items of the chosen groups ``best`` (batch, k), ``tail`` (batch, t),
    the items from ``tail_start`` on (after the last full group; t may be 0), and ``threshold``
    (batch,), the lowest chosen maximum (``best_groups``). None where a row has fewer than ``k``
    candidates (a NaN) or more than ``tuning.THRESHOLD_CANDIDATES_PER_K`` x ``k`` (many ties):
    the caller's selection then."""
    num_rows, span = values.shape
    listed = np.flatnonzero(values >= threshold[:, None])
    rows, columns = np.divmod(listed, span)
    items = best.reshape(-1).take(rows * k + columns // group) * group + columns % group
    parts = [(_inverted_keys(values.reshape(-1).take(listed), items), rows)]
    if tail.shape[1]:  # each row's tail candidates after its group candidates
        listed = np.flatnonzero(tail >= threshold[:, None])
        rows, columns = np.divmod(listed, tail.shape[1])
        parts.append((_inverted_keys(tail.reshape(-1).take(listed), columns + tail_start), rows))
    return _first_k(parts, num_rows, k)


def order_in_strided_groups(x: np.ndarray, maxima_of: Callable[[slice], np.ndarray], group: int, k: int, device):
    """(items, values, NaN flags) as :func:`order_at_least`, for rows larger than the cache: a
    block of rows at a time (``tuning.row_blocks``), ``maxima_of(rows)`` gives the maxima (r, s)
    of the block's strided groups of ``group`` items (group j: items j, j + s, j + 2 s, ..., s =
    n // group), read once from memory. T is the k-th largest maximum of c coarser groups (coarse
    group i: the strided groups i, i + c, i + 2 c, ...; about ``tuning.COARSE_GROUPS_PER_K`` x k of
    them; a group holding NaN counts last): k distinct items reach T. The candidates are the
    items scoring at least T of the groups whose maximum reaches T (an item reaching T lies in
    such a group; the block is still in cache) and of the items after the last full group. None
    as in :func:`order_at_least`; a row whose groups reaching T are already past that limit (many
    ties) declines at once, and the blocks after it are skipped."""
    num_rows, num_cols = x.shape
    stride = num_cols // group
    spread = max(1, stride // (tuning.COARSE_GROUPS_PER_K * k))
    num_coarse = stride // spread
    offsets = np.arange(0, group * stride, stride, dtype=np.int64)  # a group's items, from its first
    flat = x.reshape(-1)

    declined: list = []  # set by the first block with a row of too many candidates: the rest skip

    def candidates(rows: slice) -> Optional[tuple]:
        if declined:
            return None
        maxima = maxima_of(rows)  # NaN where a group holds one
        coarse = maxima[:, : spread * num_coarse].reshape(-1, spread, num_coarse).max(axis=1)
        highest = np.maximum(coarse.max(axis=1), maxima[:, spread * num_coarse :].max(axis=1, initial=-np.inf))
        threshold = kth_largest(np.where(np.isnan(coarse), -np.inf, coarse), k)  # a NaN group counts last
        block_rows, first = np.divmod(np.flatnonzero(maxima >= threshold[:, None]), stride)
        # each group reaching T holds a candidate: past the limit in groups, a row's candidates are too
        if block_rows.size and np.bincount(block_rows).max() > tuning.THRESHOLD_CANDIDATES_PER_K * k:
            declined.append(rows)
            return None
        positions = (first + (block_rows + rows.start) * num_cols)[:, None] + offsets  # their items, flat
        values = flat.take(positions)
        listed = np.flatnonzero(values >= threshold.take(block_rows)[:, None])
        item_rows = block_rows.take(listed // group) + rows.start
        items = positions.reshape(-1).take(listed) - item_rows * num_cols
        found = [(_inverted_keys(values.reshape(-1).take(listed), items), item_rows)]
        tail = x[rows, group * stride :]
        if tail.shape[1]:  # the items after the last full group: candidates too, listed after the groups'
            highest = np.maximum(highest, tail.max(axis=1))
            tail_rows, columns = np.divmod(np.flatnonzero(tail >= threshold[:, None]), tail.shape[1])
            found.append((_inverted_keys(tail[tail_rows, columns], columns + group * stride), tail_rows + rows.start))
        return found, np.isnan(highest)

    blocks = tuning.row_blocks(candidates, num_rows, num_cols, device)
    if declined or any(block is None for block in blocks):
        return None
    parts = [
        tuple(np.concatenate([found[part][side] for found, _ in blocks]) for side in range(2))
        for part in range(len(blocks[0][0]))
    ]
    ranked = _first_k(parts, num_rows, k)
    return None if ranked is None else ranked + (np.concatenate([has_nan for _, has_nan in blocks]),)


def order_at_least(x: np.ndarray, runs: np.ndarray, k: int, device: torch.device):
    """(items, values, NaN flags): the items (batch, k) int64 of each row of ``x`` (batch, n) in
    stable rank order, their values and whether the row holds a NaN (batch,) bool, found among
    those scoring at least T, the k-th largest maximum of the row's strided groups ``runs``
    (batch, g, n // g), a view of ``x``: k distinct items reach T, so no item below it is among
    the best ``k``. A block of rows at a time (``tuning.row_blocks``): a block's maxima, T,
    comparison of every value and the candidates' values read it while it is in cache. For rows
    that stay in cache. None where a row has fewer than ``k`` candidates (NaN) or more than
    ``tuning.THRESHOLD_CANDIDATES_PER_K`` x ``k`` (many ties): the caller's selection then."""
    num_rows, num_cols = x.shape
    full = runs.shape[1] * runs.shape[2]

    def listed_and_nan(rows: slice) -> tuple:
        block = x[rows]
        maxima = runs[rows].max(axis=1)  # NaN where a group holds one
        threshold = kth_largest(maxima, k)
        listed = np.flatnonzero(block >= threshold[:, None])
        has_nan = np.isnan(maxima.max(axis=1))
        if full < num_cols:  # the items after the last full group
            has_nan |= np.isnan(block[:, full:].max(axis=1))
        return listed + rows.start * num_cols, block.reshape(-1).take(listed), has_nan  # values: in cache

    blocks = tuning.row_blocks(listed_and_nan, num_rows, num_cols, device)
    listed, values, has_nan = (np.concatenate([block[part] for block in blocks]) for part in range(3))
    rows = listed // num_cols
    ranked = _first_k([(_inverted_keys(values, listed - rows * num_cols), rows)], num_rows, k)
    return None if ranked is None else ranked + (has_nan,)


def listed_where(mask: Callable[[slice], np.ndarray], num_rows: int, num_cols: int, device: torch.device) -> np.ndarray:
    """``np.flatnonzero`` of a (num_rows, num_cols) bool mask given by its rows (``mask(rows)``),
    computed in blocks of rows (``tuning.row_blocks``: shared with helper threads where the pass
    is wide, numpy's comparisons and ``flatnonzero`` leaving the interpreter free; else in turn,
    so that the mask of one block at a time is held)."""

    def listed(rows: slice) -> np.ndarray:
        return np.flatnonzero(mask(rows)) + rows.start * num_cols

    blocks = tuning.row_blocks(listed, num_rows, num_cols, device)
    return blocks[0] if len(blocks) == 1 else np.concatenate(blocks)


def kth_largest(maxima: np.ndarray, k: int) -> np.ndarray:
    """(batch,) the k-th largest of each row of ``maxima`` (one partition; NaN sorts last, so a
    row holding NaN may get NaN, which no value reaches)."""
    return np.partition(maxima, maxima.shape[1] - k, axis=1)[:, maxima.shape[1] - k]


def _first_k(parts: list, num_rows: int, k: int) -> Optional[tuple]:
    """(items (num_rows, k) int64, values (num_rows, k) float32) of the ``k`` best inverted keys of
    each row, in key order, from ``parts``: (keys, their rows) pairs, each listed row by row; the
    values read back from the keys (``_values_of``). None where a row has fewer than ``k`` keys
    or more than ``tuning.THRESHOLD_CANDIDATES_PER_K`` x ``k``."""
    bounds = np.arange(num_rows + 1)  # each part's rows ascend: its counts from where each row starts
    counts = [np.diff(np.searchsorted(rows, bounds)) for _, rows in parts]
    total = counts[0] if len(counts) == 1 else np.sum(counts, axis=0)
    widest = int(total.max()) if num_rows else 0
    if num_rows == 0 or int(total.min()) < k or widest > tuning.THRESHOLD_CANDIDATES_PER_K * k:
        return None
    table = np.full((num_rows, widest), np.iinfo(np.int64).max, dtype=np.int64)  # after every candidate
    start = np.arange(0, num_rows * widest, widest, dtype=np.int64)  # where each row's next key goes
    for (keys, rows), count in zip(parts, counts):
        table.reshape(-1)[np.arange(rows.size) + np.repeat(start - (np.cumsum(count) - count), count)] = keys
        start += count
    best_keys = np.invert(np.sort(table, axis=1)[:, :k])
    return _items_of(best_keys), _values_of(best_keys)


def best_groups(maxima: np.ndarray, k: int) -> tuple:
    """The ``k`` best groups of each row (batch, k) int64, in no order, and the lowest chosen
    maximum of each row (batch,) float32: one partition of the maxima (the groups at least its
    k-th largest, where no other maximum ties it), and one of the groups' keys for the rows
    where one does."""
    num_rows, num_groups = maxima.shape
    lowest = kth_largest(maxima, k)
    above = maxima >= lowest[:, None]
    tied = np.flatnonzero(np.count_nonzero(above, axis=1) != k)
    if tied.size == 0:
        return (np.flatnonzero(above) % num_groups).reshape(num_rows, k), lowest
    above[tied] = False
    best = np.empty((num_rows, k), dtype=np.int64)
    untied = np.ones(num_rows, dtype=bool)
    untied[tied] = False
    best[untied] = (np.flatnonzero(above) % num_groups).reshape(-1, k)
    groups = np.arange(num_groups, dtype=np.int64)
    chosen = np.partition(_inverted_keys(maxima[tied], groups), k - 1, axis=1)
    best[tied] = _items_of(np.invert(chosen[:, :k]))
    lowest[tied] = np.take_along_axis(maxima[tied], best[tied, k - 1 :], 1)[:, 0]  # the k-th: the lowest
    return best, lowest


def _items_of(keys: np.ndarray) -> np.ndarray:
    """The item (or group) indices of keys (not inverted; see the module docstring)."""
    return _LOW_MASK - (keys & _LOW_MASK)


def _values_of(keys: np.ndarray) -> np.ndarray:
    """The float32 values of keys (not inverted; see the module docstring): the inverse of the
    order bits (-0.0 reads back as +0.0, which it equals)."""
    ordered = (keys >> 32).astype(np.int32)
    return (ordered ^ ((ordered >> 31) & 0x7FFFFFFF)).view(np.float32)


def _inverted_keys(values: np.ndarray, items: np.ndarray) -> np.ndarray:
    """~key of each float32 value and its item index (see the module docstring)."""
    bits = (values + np.float32(0.0)).view(np.int32)  # -0.0 becomes +0.0
    ordered = (bits ^ ((bits >> 31) & 0x7FFFFFFF)).astype(np.int64)
    return np.invert((ordered << 32) | (_LOW_MASK - items))
