"""Exact top-k selection over dense score rows: the group pre-filter.

Selection. Items are ordered by score descending and, among equal scores, by item index
ascending (what a stable descending argsort gives). The top ``depth`` items are found without
sorting the catalog, by a group pre-filter (as "Dr. Top-k", Gaihre et al., SC'21): the row is
cut into groups of g consecutive items and each group is ranked by its best item, i.e. by
(group maximum, group index); the best ``depth`` groups are chosen, then their best ``depth``
sub-groups of s items likewise, and the exact top ``depth`` is taken among those items. This is
exact: an item outside the chosen groups has at least ``depth`` items ranked ahead of it (the
best item of each chosen group). (g, s) is (64, 8) on long rows and (16, 4) on shorter ones.

Each level is a handful of whole-batch tensor operations, whatever the batch size and row
length: one max-reduction over the row, then selections among ~``N / g + depth * (g / s + s)``
values instead of ``torch.topk``'s selection over all N. The two group levels choose by value
with ``torch.topk`` and settle ties at the boundary value by index (``_best_unordered``); the final
selection uses unique int64 keys (order-preserving float bits, then the item index), so the
order is the same on CPU and CUDA. Everything is tensor code without host synchronisation.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

import torch

from .. import tuning


# (items per group, items per sub-group) of the two selection levels. Long rows use groups of
# 64: torch's CPU max-reduction is fast over 64 contiguous values (3x slower over 32); max
# pooling reduces the smaller groups faster than it.
LONG_ROW_GROUPS = (64, 8)


SHORT_ROW_GROUPS = (16, 4)


_FAST_REDUCTION = 64


def stable_topk(x: torch.Tensor, k: int, detect_nan: bool = False, nan_per_row: bool = True):
    """Indices (batch, k) of the k largest entries of each row of ``x``, ordered by value
    descending then index ascending. With ``detect_nan``, also a (batch,) bool: row holds a NaN
    (a 0-d bool, any row holds one, if not ``nan_per_row``)."""
    k = min(k, x.shape[1])
    values, items, has_nan = _candidates(x, k, detect_nan=detect_nan, nan_per_row=nan_per_row)
    with tuning.threads_for(values.numel()):
        positions = _exact_topk(values, items, k)
    order = positions if items is None else items.gather(1, positions)
    return (order, has_nan) if detect_nan else order


def _candidates(x: torch.Tensor, k: int, detect_nan: bool = False, nan_per_row: bool = True):
    """A few items of each row that include its k best: (values, their item indices or None when
    they are the whole row, whether the row holds a NaN if ``detect_nan`` else None).

    Groups of consecutive items (see the module docstring): the best k groups of the row, then
    the best k sub-groups inside them; ``group_sizes`` picks the sizes. A group's rank is that of
    its best item, so groups are compared by (maximum, first item index). The items after the
    last full group are always candidates."""
    x = x.contiguous()
    num_rows, num_cols = x.shape
    sizes = group_sizes(num_cols, k)
    if sizes is None:
        with tuning.threads_for(x.numel()):
            return x, None, (holds_nan(x, nan_per_row) if detect_nan else None)
    group, sub_group = sizes
    with tuning.threads_for(x.numel()):
        maxima = group_maxima(x, group)
    id_dtype = torch.float32 if num_cols <= (1 << 22) else torch.float64  # ids, items, ranks exact in it
    with tuning.threads_for(maxima.numel()):
        best = _best_unordered(maxima, _arange(0, maxima.shape[1], x.device, id_dtype), k, maxima.shape[1])
    subs_per_group = group // sub_group
    with tuning.threads_for(best.numel() * group):
        members = rows_of_groups(x, best, group).view(num_rows, -1)
    sub_maxima = group_maxima(members, sub_group)
    sub_ids = runs(best, subs_per_group, id_dtype)
    best_sub = _best_unordered(sub_maxima, sub_ids, k, num_cols // sub_group)
    items = runs(sub_ids.gather(1, best_sub), sub_group).to(torch.int64)
    # the chosen sub-groups' values, copied from the chosen groups' (in cache), not from the row
    values = rows_of_groups(members, best_sub, sub_group).view(num_rows, -1)
    tail_start = maxima.shape[1] * group
    if tail_start == num_cols:
        return values, items, (holds_nan(maxima, nan_per_row) if detect_nan else None)  # NaN: its group's maximum
    tail = x[:, tail_start:]
    values = torch.cat([values, tail], 1)
    items = torch.cat([items, _tail_items(num_rows, tail_start, num_cols, x.device)], 1)
    return values, items, (holds_nan(torch.cat([maxima, tail], 1), nan_per_row) if detect_nan else None)


def group_sizes(num_cols: int, k: int) -> Optional[tuple]:
    """(items per group, items per sub-group), or None to select among all items. With k = 100:
    the two levels pay off from 20 k items (they cut the final selection to ~k (g / s + s)
    values); groups of 64 from 200 k, groups of 16 below (choosing k of few groups of 64 prunes
    too little)."""
    if num_cols >= 200 * k:
        return LONG_ROW_GROUPS
    return SHORT_ROW_GROUPS if num_cols >= 20 * k else None


def group_maxima(x: torch.Tensor, size: int) -> torch.Tensor:
    """Maxima (batch, num_cols // size) of the full groups of ``size`` consecutive items of each
    row, in one reduction over the batch. On CPU, torch reduces 64 contiguous values fast but 8
    slowly; max pooling does small groups faster (and skips the last partial group without a
    copy)."""
    num_rows, num_cols = x.shape
    num_full = num_cols // size
    if size < _FAST_REDUCTION and x.is_floating_point() and tuning.cpu_tuned(x.device):
        return torch.nn.functional.max_pool1d(x, size)  # (batch, num_cols) as (channels, length)
    if x.stride(1) == 1:
        groups = x.as_strided((num_rows, num_full, size), (x.stride(0), size, 1), x.storage_offset())
    else:
        groups = x[:, : num_full * size].unflatten(1, (num_full, size))
    return groups.amax(2)


def runs(first: torch.Tensor, length: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """(batch, n * length): the indices first * length + 0 .. length - 1 of each of the n runs in
    ``first`` (batch, n), e.g. the items of chosen groups; in ``dtype`` (a float dtype must hold
    them exactly)."""
    return torch.add(_arange(0, length, first.device, dtype), first.unsqueeze(2), alpha=length).flatten(1)


def rows_of_groups(x: torch.Tensor, best: torch.Tensor, size: int) -> torch.Tensor:
    """The values of the groups ``best`` (batch, k) of ``size`` consecutive items, (batch, k, size).
    Each group is one contiguous run of memory: ``embedding`` over a window view of the flat rows
    copies whole runs (an ``index_select``; several times faster than an element-wise gather or
    advanced indexing). ``x`` must be contiguous."""
    num_rows, num_cols = x.shape
    windows = x.as_strided((x.numel() - size + 1, size), (1, 1))
    return torch.nn.functional.embedding(torch.add(_row_starts(num_rows, num_cols, x.device), best, alpha=size), windows)


@lru_cache(maxsize=256)
def _arange(start: int, end: int, device: torch.device, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """``torch.arange(start, end)``, made once per device and dtype; read-only."""
    return torch.arange(start, end, device=device, dtype=dtype)


@lru_cache(maxsize=64)
def _tail_items(num_rows: int, start: int, end: int, device: torch.device) -> torch.Tensor:
    """(num_rows, end - start) int64: start .. end - 1 in every row (an expanded view); read-only."""
    return torch.arange(start, end, device=device).expand(num_rows, -1)


@lru_cache(maxsize=64)
def _row_starts(num_rows: int, num_cols: int, device: torch.device) -> torch.Tensor:
    """(num_rows, 1) int64: the flat index of each row's first entry; read-only."""
    return torch.arange(0, num_rows * num_cols, num_cols, device=device).unsqueeze(1)


def _best_unordered(values: torch.Tensor, ids: torch.Tensor, k: int, id_bound: int) -> torch.Tensor:
    """Column positions (batch, k), in no particular order, of the k best entries of each row by
    (value descending, id ascending); ``ids``: (n,) or (batch, n), floats that hold integers
    in [0, id_bound) exactly, distinct per row, and so do ids +- id_bound.

    ``torch.topk`` finds the k-th largest value v of each row. Fewer than k entries exceed v and
    all of them are chosen; the rest are the entries equal to v with the smallest ids. One more
    ``topk``, of the smallest, over the distinct ranks id - id_bound (above v), id (equal to v),
    id + id_bound (below v) chooses exactly those. A row with a NaN chooses arbitrary (valid)
    positions; NaN is reported by the caller."""
    kth = values.topk(k, 1, sorted=False).values.amin(1, keepdim=True)
    # sign(value - v): 1 above v, 0 equal (inf - inf is NaN: equal too), -1 below
    side = torch.sub(values, kth).sign_().nan_to_num_(0.0)
    rank = torch.add(ids, side, alpha=-id_bound)  # distinct ranks: topk is slow over many equal ones
    return rank.topk(k, 1, largest=False, sorted=False).indices


def _exact_topk(values: torch.Tensor, items: Optional[torch.Tensor], k: int) -> torch.Tensor:
    """Column positions of the k best entries per row (value descending, item index ascending;
    ``items=None``: the column is the item index), in that order. 16/32-bit values: one int64 key
    per entry, unique and in rank order (the order-preserving integer of the value above the item
    index)."""
    if values.dtype == torch.float64:  # 64-bit values leave no room for the index in a key
        if items is None:
            return torch.sort(values, dim=1, descending=True, stable=True).indices[:, :k]
        by_item = items.argsort(1)
        by_value = torch.sort(values.gather(1, by_item), dim=1, descending=True, stable=True).indices
        return by_item.gather(1, by_value[:, :k])
    if items is None:
        items = _arange(0, values.shape[1], values.device)
    # item - (order-preserving integer of the value) * 2**32: ascending is the rank order
    return torch.add(items, ordered_int32(values).to(torch.int64), alpha=-(1 << 32)).topk(k, 1, largest=False).indices


LOW_MASK = (1 << 32) - 1


_INF = float("inf")


def ordered_int32(values: torch.Tensor) -> torch.Tensor:
    """int32 whose signed order is the float order of ``values`` (16/32-bit floats, exact; -0.0
    and +0.0 equal)."""
    if values.dtype != torch.float32:
        values = values.to(torch.float32)
    bits = (values + 0.0).view(torch.int32)
    return (bits >> 31).bitwise_and_(0x7FFFFFFF).bitwise_xor_(bits)


def holds_nan(x: torch.Tensor, per_row: bool = True) -> torch.Tensor:
    """(batch,) bool: the row holds a NaN (0-d: any row does, if not ``per_row``). A
    max-reduction propagates NaN and is cheaper on CPU than ``isnan().any(1)``."""
    return (x.amax(1) if per_row else x.amax()).isnan()
