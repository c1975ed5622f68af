"""Exact top-k selection that leaves some items out of each user's ranking.

``stable_topk_excluding(scores, k, excluded)`` ranks, for each row, only its candidates (the items
not excluded, e.g. a user's training history) by score descending, ties by item index ascending
(a stable descending argsort of the candidates), and returns the first ``k``; positions past the
row's number of candidates hold ``-1``. An excluded item is not a candidate and takes no
position. A candidate may score ``-inf``: it ranks after every finite-scored candidate, so
replacing excluded scores by ``-inf`` would be wrong (an excluded item would tie with, and by
index precede, a ``-inf`` candidate).

Selection follows ``stable_topk`` (see :mod:`.groups`): groups of g consecutive items, the best k
groups, then the best k sub-groups of s items inside them, then the exact top k among their items
and the items after the last full group. Exclusion enters every stage through keys that rank
excluded items below every candidate:

* a group's key is its best candidate (masked maximum: excluded scores replaced by ``-inf`` in a
  copy of one row chunk at a time that stays in cache, never in a copy of the batch), mapped to
  an order-preserving integer, with groups that hold no candidate given the smallest integer
  (below the key of a ``-inf`` candidate, which is why a float sentinel would not do). Groups
  are compared by (key, group index), sub-groups by (key, first item index);
* the final keys are (order-preserving integer of the score, item index), an excluded item's
  score replaced by the smallest integer. Excluded items therefore come after every candidate;
  those that reach the first k positions (only when the row has fewer than k candidates) are
  reported as ``-1``.

Exactness. Order the groups by their best candidate (score descending, index ascending), groups
without a candidate last: this is the order of (key, group index) above, because the best
candidates of two groups with equal keys compare by index like the groups. Let c be a candidate
in a full group G that is not chosen. Each of the k chosen groups ranks ahead of G; G holds a
candidate, so each chosen group does too, and its best candidate ranks ahead of G's best, which
is c or ranks ahead of c. So c has at least k candidates ahead of it and is not among the first
k. The same holds for sub-groups inside the chosen groups, so the chosen sub-groups and the
items after the last full group hold the first min(k, number of candidates) candidates, and the
final selection among them (excluded items last) is exact. NaN scores are an error reported by
``detect_nan``, not ranked by a rule.

Keys: 16/32-bit scores use one int64 per item (order-preserving int32 of the value, then the
index) and ``topk``; float64 scores use order-preserving int64 values and a stable sort (no room
for the index in the key). Shapes depend only on (batch, num_items, k, dtype); nothing
synchronises with the device.
"""

from __future__ import annotations

from typing import Optional

import torch

from .. import tuning
from .groups import (
    LOW_MASK,
    group_maxima,
    group_sizes,
    holds_nan,
    index_low_bits,
    ordered_int32,
    packed_keys,
    rows_of_groups,
    runs,
    runs_at,
    stable_topk,
    with_tail,
)

_INT32_MIN = -(1 << 31)
_INT64_MIN = -(1 << 63)
# A word of 4 bool bytes that are all True (torch stores True as the byte 1).
_ALL_TRUE_WORD = 0x01010101


def stable_topk_excluding(scores: torch.Tensor, k: int, excluded: torch.Tensor, detect_nan: bool = False, entries=None):
    """Items (batch, k) int64 of each row's ``k`` best candidates (items where ``excluded`` is
    False), ordered by score descending then index ascending; ``-1`` past the row's number of
    candidates. With ``detect_nan``, also a (batch,) bool: the row holds a NaN score among its
    candidates (an excluded item's score is never read for the ranking, NaN or not).

    ``entries``: optionally (users, items), 1-D int64 tensors listing every excluded (row, item)
    (more entries, e.g. padding pointing anywhere in range, are harmless). The group maxima are
    then the plain ones, recomputed with the mask only for the groups that hold a listed entry,
    instead of a masked pass over every score (``_group_maxima_at_entries``)."""
    if scores.ndim != 2 or not scores.is_floating_point():
        raise TypeError(
            f"scores must be a 2-D floating-point tensor, got shape {tuple(scores.shape)} and {scores.dtype}"
        )
    if excluded.dtype != torch.bool or excluded.shape != scores.shape:
        raise TypeError(
            f"excluded must be a bool tensor of the scores' shape {tuple(scores.shape)}, got "
            f"{excluded.dtype} of shape {tuple(excluded.shape)}"
        )
    if excluded.device != scores.device:
        raise ValueError(f"excluded is on {excluded.device} but scores are on {scores.device}")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= scores.shape[1]:
        raise ValueError(f"k must be an int in [1, num_items={scores.shape[1]}], got {k!r}")
    x, mask = scores.contiguous(), excluded.contiguous()
    values, items, value_excluded, has_nan = _candidates(x, mask, k, detect_nan, entries)
    positions = _exact_topk(values, value_excluded, items, k)
    order = positions if items is None else items.gather(1, positions)
    order = order.masked_fill_(value_excluded.gather(1, positions), -1)
    return (order, has_nan) if detect_nan else order


def _candidates(x: torch.Tensor, mask: torch.Tensor, k: int, detect_nan: bool, entries=None):
    """Items of each row that include its first k candidates: (values, item indices or None when
    they are the whole row, their excluded flags, NaN-among-candidates flags or None)."""
    num_rows, num_cols = x.shape
    sizes = group_sizes(num_cols, k)
    if sizes is None:
        return x, None, mask, (_holds_candidate_nan(x, mask) if detect_nan else None)
    group, sub_group = sizes
    # The fix-up copies one group per entry: worth it while that is less than the batch itself.
    if entries is not None and entries[0].numel() * group <= x.numel():
        maxima, empty = _group_maxima_at_entries(x, mask, group, *entries)
    else:
        maxima, empty = _masked_group_maxima(x, mask, group)
    best = _best_positions(_group_keys(maxima, empty), None, k)
    subs_per_group = group // sub_group
    sub_ids = runs(best, subs_per_group)
    sub_maxima, sub_empty = _masked_sub_group_maxima(x, mask, best, group, sub_group)
    best_sub = _best_positions(_group_keys(sub_maxima, sub_empty), sub_ids * sub_group, k)
    chosen = sub_ids.gather(1, best_sub)
    values = rows_of_groups(x, chosen, sub_group)
    value_excluded = rows_of_groups(mask, chosen, sub_group)
    items = runs(chosen, sub_group)
    has_nan = holds_nan(maxima) if detect_nan else None  # masked maxima: NaN iff a candidate is
    tail_start = (num_cols // group) * group
    values, items, tail = with_tail(values, items, x, tail_start)
    if tail is not None:
        tail_mask = mask[:, tail_start:]
        value_excluded = torch.cat([value_excluded, tail_mask], 1)
        has_nan = has_nan | _holds_candidate_nan(tail, tail_mask) if has_nan is not None else None
    return values, items, value_excluded, has_nan


def _masked_group_maxima(x: torch.Tensor, mask: torch.Tensor, size: int):
    """For the full groups of ``size`` consecutive items: the maximum over the group's candidates
    (``-inf`` if it has none), (batch, num_cols // size) in x's dtype, and whether the group has
    no candidate (bool). One pass over the row chunks; the masked copy of a chunk is reused."""
    num_rows, num_cols = x.shape
    num_full = num_cols // size
    maxima = torch.empty(num_rows, num_full, dtype=x.dtype, device=x.device)
    empty = torch.empty(num_rows, num_full, dtype=torch.bool, device=x.device)
    lowest = torch.full((), float("-inf"), dtype=x.dtype, device=x.device)
    buffer = None
    # the masked copy: cache-sized pieces on CPU; on accelerators within one (batch, num_items) float32
    pieces = tuning.row_pieces(num_rows, num_cols * (x.element_size() + 1), x.device, budget_bytes=4 * x.numel())
    for rows in pieces:
        chunk, chunk_mask = x[rows], mask[rows]  # whole rows: contiguous, faster than a slice
        if buffer is None:
            buffer = torch.empty(chunk.shape, dtype=x.dtype, device=x.device)
        masked = torch.where(chunk_mask, lowest, chunk, out=buffer[: chunk.shape[0]])
        maxima[rows] = group_maxima(masked, size)
        empty[rows] = _all_set(chunk_mask, size)
    return maxima, empty


def _group_maxima_at_entries(x: torch.Tensor, mask: torch.Tensor, size: int, users: torch.Tensor, items: torch.Tensor):
    """``_masked_group_maxima`` from the plain group maxima: only a group holding an excluded
    item can differ, and every such group holds a listed entry, so recomputing the masked maximum
    of the entries' groups (one group copied per entry) gives the same result. Entries past the
    last full group or rows are clamped into range: recomputing any group is harmless."""
    num_rows, num_cols = x.shape
    num_full = num_cols // size
    maxima = group_maxima(x, size)
    empty = torch.zeros(maxima.shape, dtype=torch.bool, device=x.device)
    rows = users.clamp(min=0, max=num_rows - 1)
    groups = torch.div(items, size, rounding_mode="floor").clamp(min=0, max=num_full - 1)
    starts = torch.add(rows * num_cols, groups, alpha=size)
    values, flags = runs_at(x, starts, size), runs_at(mask, starts, size)
    lowest = torch.full((), float("-inf"), dtype=x.dtype, device=x.device)
    maxima.index_put_((rows, groups), torch.where(flags, lowest, values).amax(1))
    empty.index_put_((rows, groups), flags.all(1))
    return maxima, empty


def _masked_sub_group_maxima(x, mask, groups, size, sub_size):
    """``_masked_group_maxima`` of the runs of ``sub_size`` items inside the groups ``groups``
    (batch, k) of ``size`` items; the groups' values and flags are copied a row chunk at a time."""
    num_rows, k = groups.shape
    per_row = k * (size // sub_size)
    maxima = torch.empty(num_rows, per_row, dtype=x.dtype, device=x.device)
    empty = torch.empty(num_rows, per_row, dtype=torch.bool, device=x.device)
    lowest = torch.full((), float("-inf"), dtype=x.dtype, device=x.device)
    for rows in tuning.row_pieces(num_rows, k * size * (x.element_size() + 1), x.device):
        values = rows_of_groups(x[rows], groups[rows], size)
        flags = rows_of_groups(mask[rows], groups[rows], size)
        maxima[rows] = group_maxima(torch.where(flags, lowest, values), sub_size)
        empty[rows] = _all_set(flags, sub_size)
    return maxima, empty


def _all_set(flags: torch.Tensor, size: int) -> torch.Tensor:
    """(rows, n // size) bool: all ``size`` consecutive flags of each run are True, for the first
    n = (columns // size) * size columns. Read 4 flags at a time as int32 words (a reduction over
    bools is several times slower on CPU): a run is all True iff its smallest word is 0x01010101,
    the largest word of 0/1 bytes. ``size`` is a multiple of 4."""
    num_rows = flags.shape[0]
    num_runs = flags.shape[1] // size
    flags = flags[:, : num_runs * size]
    if flags.stride(1) != 1 or flags.stride(0) % 4 or flags.storage_offset() % 4:
        flags = flags.clone(memory_format=torch.contiguous_format)  # rows not on word boundaries
    words = flags.view(torch.int32).view(num_rows, num_runs, size // 4)
    smallest = words[:, :, 0] if size == 4 else words.amin(2)
    return smallest == _ALL_TRUE_WORD


def _holds_candidate_nan(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(batch,) bool: a candidate of the row has a NaN score."""
    return torch.where(mask, torch.zeros((), dtype=x.dtype, device=x.device), x).amax(1).isnan()


def _group_keys(maxima: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
    """Order-preserving integers of the groups' best candidates; the smallest integer (below a
    ``-inf`` candidate's) for a group without a candidate. int32 for 16/32-bit floats, int64
    for float64."""
    return _ordered_int(maxima).masked_fill_(empty, _INT64_MIN if maxima.dtype == torch.float64 else _INT32_MIN)


def _ordered_int(values: torch.Tensor) -> torch.Tensor:
    """Integers whose signed order is the float order of ``values`` (-0.0 and +0.0 equal): int32
    of 16/32-bit floats (``ordered_int32``), int64 of float64 (exact, no rounding to float32)."""
    if values.dtype != torch.float64:
        return ordered_int32(values)
    bits = (values + 0.0).view(torch.int64)
    return (bits >> 63).bitwise_and_((1 << 63) - 1).bitwise_xor_(bits)


def _exact_topk(values, value_excluded, items, k):
    """Column positions of the k best entries per row: candidates by (value descending, item
    index ascending), then excluded entries (which come out as -1)."""
    lowest = _INT64_MIN if values.dtype == torch.float64 else _INT32_MIN
    out = torch.empty(values.shape[0], k, dtype=torch.int64, device=values.device)
    for rows in tuning.row_pieces(values.shape[0], 2 * 8 * values.shape[1], values.device):
        keys = _ordered_int(values[rows]).masked_fill_(value_excluded[rows], lowest)
        out[rows] = _best_positions(keys, None if items is None else items[rows], k, sorted=True)
    return out


def _best_positions(keys: torch.Tensor, items: Optional[torch.Tensor], k: int, sorted: bool = False) -> torch.Tensor:
    """Column positions of the k best entries per row by (key descending, item index ascending;
    ``items=None``: the column is the index), in that order if ``sorted``. int32 keys are packed
    with the index into unique int64 keys for ``topk``; int64 keys are sorted stably by key
    after ordering by index."""
    if keys.dtype == torch.int64:
        if items is None:
            return torch.sort(keys, dim=1, descending=True, stable=True).indices[:, :k]
        by_item = items.argsort(1)
        by_key = torch.sort(keys.gather(1, by_item), dim=1, descending=True, stable=True).indices
        return by_item.gather(1, by_key[:, :k])
    low_bits = index_low_bits(keys.shape[1], keys.device) if items is None else torch.rsub(items, LOW_MASK)
    return _packed_best(keys, low_bits, k, sorted)


def listed_bound(scores: torch.Tensor, k: int) -> Optional[int]:
    """The most listed items per row that ``stable_topk_excluding_listed`` takes into the stages
    of the group pre-filter (E x g <= N, ``_groups_hold_listed``), or None where those stages do
    not apply (accelerators, 64-bit scores, rows too short for groups). Beyond that bound its
    plain selection of ``k + E`` items grows with E while the masked kernel's cost hardly does,
    so the ranking step takes the masked kernel there (``bench_exclusion.py`` measures both)."""
    sizes = group_sizes(scores.shape[1], k)
    if sizes is None or scores.dtype == torch.float64 or not tuning.cpu_tuned(scores.device):
        return None
    return scores.shape[1] // sizes[0]


def stable_topk_excluding_listed(scores: torch.Tensor, k: int, excluded_rows: torch.Tensor, detect_nan: bool = False):
    """``stable_topk_excluding`` for an exclusion given as rows of item ids, without a mask.

    ``excluded_rows``: (batch, E) int64, each row's excluded items sorted ascending (duplicates
    allowed), padded with any value >= num_items (``item_sets.sorted_rows``). At most E items of
    a row are excluded, so the plain selection (``stable_topk``) of its best ``k + E`` items holds
    its first ``k`` candidates, and the plain order restricted to candidates is the candidates'
    order. The excluded ones among them are found by a ``searchsorted`` in the row's sorted
    exclusions; the rest keep their order (each candidate's rank among candidates is a running
    count, and a scatter, not a sort, moves them to the front); ``-1`` past the row's candidates
    (``k + E`` then covers the whole row). With ``detect_nan``, also a (batch,) bool: a
    candidate scores NaN.

    Where E is more than ``tuning.EXCLUDED_IN_GROUPS_PER_K`` x k and the rows too short for the
    strided groups of k + E items (``tuning.STRIDED_ROWS_PER_K``), the group pre-filter applies
    to k items and the groups of the E listed items are together no larger than the row
    (16/32-bit scores on CPU), the exclusions enter the pre-filter's stages instead
    (``_listed_in_groups``): the same order, at the cost of a copy of the groups whose maximum
    is excluded rather than of a selection of ``k + E`` items.

    An excluded item may score NaN, which the plain selection does not rank by a rule: when a row
    holds a NaN, the selection is taken again over a copy with the excluded scores set to
    ``-inf`` (they still take no position). On CPU whether any row holds a NaN is read on the
    host (no device to wait for) and the copy made only then; on an accelerator the copy is
    always made (no synchronisation), which is why the ranking step takes this path on CPU, and
    only where the exclusions enter the group stages (``listed_bound``)."""
    num_rows, num_cols = scores.shape
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= num_cols:
        raise ValueError(f"k must be an int in [1, num_items={num_cols}], got {k!r}")
    if excluded_rows.ndim != 2 or excluded_rows.shape[0] != num_rows or excluded_rows.dtype != torch.int64:
        raise TypeError(
            f"excluded_rows must be int64 of shape ({num_rows}, E), got {excluded_rows.dtype} of shape "
            f"{tuple(excluded_rows.shape)}"
        )
    x = scores.contiguous()
    bound = excluded_rows.shape[1]
    if bound and tuning.cpu_tuned(x.device) and _groups_hold_listed(x, k, bound):
        order, has_nan = _listed_in_groups(x, k, excluded_rows)
        if not bool(has_nan.any()):  # a NaN, excluded or not, is ranked by the copy below
            return (order, has_nan) if detect_nan else order
    width = min(k + bound, num_cols)
    order, has_nan = stable_topk(x, width, detect_nan=True)
    if bound and (not tuning.cpu_tuned(x.device) or bool(has_nan.any())):
        rows = torch.arange(num_rows, device=x.device).unsqueeze(1)
        spare = torch.full((), num_rows * num_cols, dtype=torch.int64, device=x.device)  # one slot past the copy
        flat = torch.where(excluded_rows < num_cols, rows * num_cols + excluded_rows, spare).flatten()
        copy = torch.cat([x.flatten(), x.new_zeros(1)])
        copy.index_fill_(0, flat, float("-inf"))
        order, has_nan = stable_topk(copy[:-1].view(num_rows, num_cols), width, detect_nan=True)
    if bound:
        position = torch.searchsorted(excluded_rows.contiguous(), order.contiguous()).clamp_(max=bound - 1)
        keep = excluded_rows.gather(1, position) != order
    else:
        keep = torch.ones(order.shape, dtype=torch.bool, device=x.device)
    rank = keep.cumsum(1)  # 1 + the rank among candidates of a kept item
    column = torch.where(keep & (rank <= k), rank - 1, k)  # the rest to a spare column
    out = torch.full((num_rows, k + 1), -1, dtype=torch.int64, device=x.device)
    out = out.scatter_(1, column, order)[:, :k]
    return (out, has_nan) if detect_nan else out


def _groups_hold_listed(x: torch.Tensor, k: int, bound: int) -> bool:
    """Whether ``_listed_in_groups`` applies: 16/32-bit scores, rows long enough for groups, the
    groups of the listed items (``bound`` per row) no larger together than the scores, and more
    listed items than the plain selection of ``k + bound`` items takes faster
    (``tuning.EXCLUDED_IN_GROUPS_PER_K``)."""
    sizes = group_sizes(x.shape[1], k)
    if x.dtype == torch.float64 or sizes is None or bound * sizes[0] > x.shape[1]:
        return False
    plain_faster = bound <= tuning.EXCLUDED_IN_GROUPS_PER_K * k or x.shape[1] >= tuning.STRIDED_ROWS_PER_K * (k + bound)
    return not plain_faster


def _listed_in_groups(x: torch.Tensor, k: int, excluded_rows: torch.Tensor):
    """``stable_topk_excluding_listed`` by the group pre-filter of ``stable_topk`` with the
    exclusions entering each stage, on 16/32-bit scores: (order, whether the row holds a NaN,
    excluded or not).

    1. Groups of g items by their maximum over candidates: the plain maxima, with the groups whose
       maximum an excluded item scores recomputed from a copy of the group where the excluded
       scores are set to ``-inf`` (``_candidate_group_keys``; a group of g excluded items ranks
       below every other, its distinct excluded items being counted); the best k groups are
       chosen, exact as in ``stable_topk``.
    2. Their values are copied with the excluded scores set to ``-inf``; the best k sub-groups of
       s items are chosen by the same rule.
    3. The exact top k of their items and the items after the last full group, by (score, index),
       an excluded item's key set to the smallest integer. A row has more than k candidates here
       (at most N / g items are excluded), so none reaches the first k.

    The exclusions reach the copies as positions: a (batch, groups) table maps each chosen group
    to its place in the copy of stage 2, a (batch, sub-groups) table each chosen sub-group
    likewise; other entries go to a spare slot. Costs over ``stable_topk`` a copy of the groups
    whose maximum is excluded (at most one group per listed item), never a mask or copy of the
    batch."""
    num_rows, num_cols = x.shape
    group, sub_group = group_sizes(num_cols, k)  # type: ignore[misc]  # grouped rows only (_groups_hold_listed)
    num_groups = num_cols // group
    device = x.device
    maxima = group_maxima(x, group)
    has_nan = holds_nan(maxima)
    # the group of each entry; the spare group num_groups for items of the tail and for padding
    group_of_entry = torch.div(excluded_rows, group, rounding_mode="floor").clamp_(max=num_groups)
    listed = group_of_entry < num_groups
    offset = excluded_rows % group  # the entry's place in its group
    # each distinct excluded item counted once
    distinct = torch.ones(excluded_rows.shape, dtype=torch.int32, device=device)
    distinct[:, 1:] = excluded_rows[:, 1:] != excluded_rows[:, :-1]
    # stage 1: the groups by their best candidate
    group_keys = _candidate_group_keys(x, maxima, group_of_entry, listed, offset, distinct, group)
    groups = _packed_best(group_keys, index_low_bits(num_groups, device), k)
    # each stage's temporaries are let go as soon as it is done, which keeps the heap small enough
    # that the allocator does not hand memory back to the OS (and fault it in again) on every call
    del maxima, group_keys
    # stage 2: positions of the excluded items in the copy of the chosen groups (spare: the end)
    copy_width = k * group
    in_copy = _slots(groups, num_groups, group).gather(1, group_of_entry)
    in_copy = torch.where(in_copy < copy_width, in_copy + offset, copy_width)
    flat = torch.empty(num_rows * copy_width + 1, dtype=x.dtype, device=device)
    rows_of_groups(x, groups, group, out=flat[:-1].view(num_rows, k, group))
    row_starts = torch.arange(0, num_rows * copy_width, copy_width, device=device).unsqueeze(1)
    in_flat = torch.where(in_copy < copy_width, in_copy + row_starts, num_rows * copy_width)
    flat.index_fill_(0, in_flat.flatten(), float("-inf"))
    num_subs = copy_width // sub_group
    sub_maxima = group_maxima(flat[:-1].view(num_rows, copy_width), sub_group)
    del flat, in_flat
    sub_of_entry = torch.div(in_copy, sub_group, rounding_mode="floor")  # num_subs: spare
    sub_count = torch.zeros(num_rows, num_subs + 1, dtype=torch.int32, device=device)
    sub_count.scatter_add_(1, sub_of_entry, distinct)
    sub_keys = ordered_int32(sub_maxima).masked_fill_(sub_count[:, :num_subs] == sub_group, _INT32_MIN)
    # low bits 2**32 - 1 - (first item of the sub-group), from the groups in one operation
    first_bits = torch.arange(LOW_MASK, LOW_MASK - group, -sub_group, device=device)
    sub_low_bits = torch.add(first_bits, groups.unsqueeze(2), alpha=-group).flatten(1)
    best_sub = _packed_best(sub_keys, sub_low_bits, k)  # places in the copy
    del sub_maxima, sub_count, sub_keys, sub_low_bits
    chosen_subs = runs(groups, group // sub_group).gather(1, best_sub)
    # stage 3: the chosen sub-groups' items and the tail; positions of the excluded ones
    values = rows_of_groups(x, chosen_subs, sub_group)
    items = runs(chosen_subs, sub_group)
    final = _slots(best_sub, num_subs, sub_group).gather(1, sub_of_entry)
    final = torch.where(final < k * sub_group, final + in_copy % sub_group, -1)
    tail_start = num_groups * group
    values, items, tail = with_tail(values, items, x, tail_start)
    if tail is not None:
        has_nan = has_nan | holds_nan(tail)
        final = torch.where(excluded_rows >= tail_start, excluded_rows - tail_start + k * sub_group, final)
    width = values.shape[1]
    final_rows = torch.arange(0, num_rows * width, width, device=device).unsqueeze(1)
    final = torch.where((final < 0) | (excluded_rows >= num_cols), num_rows * width, final + final_rows)
    item_keys = torch.cat([ordered_int32(values).flatten(), torch.zeros(1, dtype=torch.int32, device=device)])
    item_keys.index_fill_(0, final.flatten(), _INT32_MIN)
    item_keys = item_keys[:-1].view(num_rows, width)
    return items.gather(1, _packed_best(item_keys, torch.rsub(items, LOW_MASK), k, sorted=True)), has_nan


def _candidate_group_keys(x, maxima, group_of_entry, listed, offset, distinct, group):
    """(batch, num_groups) int32 keys of the groups of ``group`` items by their best candidate
    (``ordered_int32`` of its score; the smallest int32 for a group of excluded items only).

    A group's plain maximum is the score of its best candidate unless an excluded item scores
    it. Only the groups where one does (for scores in general position about E / g per row,
    E / g the share of a group's items a row excludes) are copied, their excluded scores set to
    ``-inf``, and reduced again. Which groups those are is read on the host (on CPU, where this
    path runs, a host read waits for nothing). The entries of a group are consecutive in a
    sorted row: the first of them leads its group's run."""
    num_rows, num_cols = x.shape
    num_groups = maxima.shape[1]
    bound = group_of_entry.shape[1]
    device = x.device
    safe_group = group_of_entry.clamp(max=num_groups - 1)
    item = torch.add(offset, safe_group, alpha=group)  # the excluded item where listed
    at_maximum = (x.gather(1, item) == maxima.gather(1, safe_group)) & listed
    leads = torch.ones(group_of_entry.shape, dtype=torch.bool, device=device)
    leads[:, 1:] = group_of_entry[:, 1:] != group_of_entry[:, :-1]
    leader = torch.where(leads, torch.arange(bound, device=device), 0).cummax(1).values
    run = torch.add(leader, torch.arange(0, num_rows * bound, bound, device=device).unsqueeze(1)).flatten()
    hits = torch.zeros(num_rows * bound, dtype=torch.int32, device=device)
    hits.index_add_(0, run, at_maximum.flatten().to(torch.int32))
    redone_runs = hits.nonzero().squeeze(1)  # host read: the number of groups to reduce again
    num_redone = redone_runs.numel()
    slot_of_run = torch.full((num_rows * bound,), num_redone, dtype=torch.int64, device=device)
    slot_of_run[redone_runs] = torch.arange(num_redone, device=device)
    slot = slot_of_run.gather(0, run)  # each entry's place among the redone groups; num_redone: none
    redone_rows = torch.div(redone_runs, bound, rounding_mode="floor")
    redone_groups = group_of_entry.flatten().gather(0, redone_runs)
    copies = torch.empty(num_redone * group + 1, dtype=x.dtype, device=device)  # the last slot is spare
    runs_at(x, torch.add(redone_rows * num_cols, redone_groups, alpha=group), group, out=copies[:-1].view(-1, group))
    in_copies = torch.where(slot < num_redone, slot * group + offset.flatten(), num_redone * group)
    copies.index_fill_(0, in_copies, float("-inf"))
    excluded_count = torch.zeros(num_redone + 1, dtype=torch.int32, device=device)
    excluded_count.index_add_(0, slot, distinct.flatten())
    redone_keys = ordered_int32(copies[:-1].view(-1, group).amax(1))
    redone_keys.masked_fill_(excluded_count[:num_redone] == group, _INT32_MIN)
    keys = ordered_int32(maxima)
    keys.view(-1).index_copy_(0, torch.add(redone_groups, redone_rows, alpha=num_groups), redone_keys)
    return keys


def _slots(chosen: torch.Tensor, num_ids: int, size: int) -> torch.Tensor:
    """(batch, num_ids + 1) int32: ``j * size`` at the id ``chosen[row, j]`` (the start of its
    place in a copy of the chosen runs of ``size``), ``chosen.shape[1] * size`` (past the copy)
    at every other id and at the spare id ``num_ids``."""
    past = chosen.shape[1] * size
    table = torch.full((chosen.shape[0], num_ids + 1), past, dtype=torch.int32, device=chosen.device)
    starts = torch.arange(0, past, size, dtype=torch.int32, device=chosen.device).expand(chosen.shape[0], -1)
    return table.scatter_(1, chosen, starts)


def _packed_best(keys: torch.Tensor, low_bits: torch.Tensor, k: int, sorted: bool = False) -> torch.Tensor:
    """Column positions of the k largest (int32 key, low bits) pairs per row."""
    return packed_keys(keys, low_bits).topk(k, 1, sorted=sorted).indices
