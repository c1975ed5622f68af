"""Exact top-k selection over dense score rows: the group pre-filter.

Selection. Items are ordered by score descending and, among equal scores, by item index
ascending (what a stable descending argsort gives). The top ``depth`` items are found without
sorting the catalog, by a group pre-filter (as "Dr. Top-k", Gaihre et al., SC'21): the row is
cut into groups of g consecutive items and each group is ranked by its best item, i.e. by
(group maximum, group index); the best ``depth`` groups are chosen (one keyed selection among
all the maxima), then their best ``depth`` sub-groups of s items likewise, and the exact top ``depth`` is
taken among those items. This is exact: an item outside the chosen groups has at least
``depth`` items ranked ahead of it (the best item of each chosen group). (g, s) is (64, 8) on
long rows and (16, 4) on shorter ones (``tuning``). One max-reduction over the row plus selections among
~``N / g + depth * (g / s + s)`` values replace ``torch.topk``'s selection over all N. The final
selection uses unique int64 keys (order-preserving float bits, then the item index), so the order
is the same on CPU and CUDA. Everything is tensor code without host synchronisation on
accelerators. On CPU, where a host read waits for nothing, float32 rows are selected on the host
(:mod:`.host`) by a threshold T that k distinct items reach: no item below T is among the best
k, so the candidates are the items scoring at least T. Long rows larger than the cache take
the maxima of strided groups (``strided_order``: a reduction across contiguous runs, read once
from memory) and list the items of the groups reaching T; shorter ones choose their best groups
by one partition of the maxima, T the lowest chosen maximum (``host_order``); rows of small
groups that stay in cache compare every score with T (``threshold_order``). Rows those decline
(many ties) take the groups above, the best groups chosen by a float selection over many groups,
its rows tied at the boundary by keys (``_best_groups``), and the chosen groups' items scoring at
least the lowest chosen maximum (``_above_threshold``) in place of the sub-groups.
"""

from __future__ import annotations

from typing import Optional

import torch

from .. import tuning
from . import host


from ..tuning import LONG_ROW_GROUPS, SHORT_ROW_GROUPS  # noqa: F401  (the selection's group sizes)


def stable_topk(x: torch.Tensor, k: int, detect_nan: bool = False, untied: bool = True):
    """Indices (batch, k) of the k largest entries of each row of ``x``, ordered by value
    descending then index ascending. With ``detect_nan``, also a (batch,) bool: row holds a NaN.
    ``untied``: try :func:`untied_topk` first (False: the caller already did)."""
    k = min(k, x.shape[1])
    order = untied_topk(x, k) if untied else None
    if order is not None:  # no NaN in the rows either
        return (order, torch.zeros(x.shape[0], dtype=torch.bool, device=x.device)) if detect_nan else order
    order, has_nan, _ = _best_items(x, k, sorted=True, detect_nan=detect_nan)
    return (order, has_nan) if detect_nan else order


def stable_topk_and_values(x: torch.Tensor, k: int) -> tuple:
    """``stable_topk(x, k, detect_nan=True, untied=False)`` and the values at those indices where
    the host selection read them on the way ((batch, k) float32, -0.0 read as +0.0, which it
    equals), else None: the caller then gathers them."""
    return _best_items(x, min(k, x.shape[1]), sorted=True, detect_nan=True)


def untied_topk(x: torch.Tensor, k: int) -> Optional[torch.Tensor]:
    """On CPU, for rows selected among all items (``group_sizes`` None): ``torch.topk``'s indices
    when they are the stable order itself, else None (and None elsewhere). They are when the best
    ``k + 1`` values of every row decrease strictly (no tie at all, and no NaN, which ``topk``
    ranks first and which compares false): no other set or order of the best ``k`` exists, and no
    cut-off splits a tie. Two operations and a host read (free on CPU) instead of the keyed
    selection's ten; rows with ties take the keyed selection."""
    if not tuning.cpu_tuned(x.device) or group_sizes(x.shape[1], k) is not None:
        return None
    width = min(k + 1, x.shape[1])
    if width < 2:
        return None
    values, indices = x.topk(width, 1)
    if not bool(torch.lt(values[:, 1:], values[:, :-1]).all()):
        return None
    return indices[:, :k] if width > k else indices


def _best_items(x: torch.Tensor, k: int, sorted: bool, detect_nan: bool = False):
    """``stable_topk``'s indices, in rank order only if ``sorted``, the NaN flags (or None) and the
    values at the indices where a host selection read them (else None). CPU float32 rows in
    groups are selected on the host where it can: rows that stay in cache by ``threshold_order``,
    larger ones by ``strided_order`` where they are long (``tuning.STRIDED_ROWS_PER_K``), else by
    ``host_order``."""
    x = x.contiguous()
    sizes = group_sizes(x.shape[1], k)
    on_host = x.dtype == torch.float32 and tuning.cpu_tuned(x.device) and tuning.HOST_SELECTION
    maxima = None
    if sizes is not None and sorted and on_host:
        if rereads_cached(x, sizes[0]):
            found = threshold_order(x, k, sizes[0], detect_nan)
        elif x.shape[1] >= tuning.STRIDED_ROWS_PER_K * k:
            found = strided_order(x, k, strided_group_size(x.shape[1], k), detect_nan)
        else:
            maxima = group_maxima(x, sizes[0])
            ranked = host_order(x, maxima, k, sizes[0])
            if ranked is not None:
                return ranked[0], _nan_rows(x, maxima, sizes[0]) if detect_nan else None, ranked[1]
            found = None
        if found is not None:
            return found
    values, items, has_nan = _candidates(x, k, detect_nan=detect_nan, maxima=maxima)
    positions = _exact_topk(values, items, k, sorted)
    return (positions if items is None else items.gather(1, positions)), has_nan, None


def strided_order(x: torch.Tensor, k: int, group: int, detect_nan: bool):
    """(order, NaN flags or None, values) of CPU float32 rows (contiguous) larger than the cache,
    or None (then the caller's selection): the maxima of the strided groups of ``group`` items
    (``strided_groups``: a reduction across contiguous runs, which streams from memory at the
    speed of a plain row maximum), then, while a block of rows is in cache, the items of the
    groups that reach a threshold k items reach (:func:`host.order_in_strided_groups`).
    Replaces the maxima of contiguous groups (a slower reduction) and the copy of the chosen
    groups read from memory again."""
    num_rows, num_cols = x.shape
    if not 0 < k <= num_cols // group or num_rows == 0:
        return None
    view = strided_groups(x, group)
    found = host.order_in_strided_groups(
        x.detach().numpy(), lambda rows: view[rows].detach().amax(1).numpy(), group, k, x.device
    )
    return _as_tensors(found, detect_nan)


def strided_group_size(num_cols: int, k: int) -> int:
    """The items of a strided group of ``strided_order``: ``tuning.STRIDED_GROUP`` on rows of at
    least ``tuning.LONG_STRIDED_ROWS_PER_K`` items per k, else ``tuning.SHORT_STRIDED_GROUP`` (about
    k groups are read again: fewer items each where the row holds fewer groups to reduce)."""
    return tuning.STRIDED_GROUP if num_cols >= tuning.LONG_STRIDED_ROWS_PER_K * k else tuning.SHORT_STRIDED_GROUP


def _as_tensors(found: Optional[tuple], detect_nan: bool):
    """A host selection's (items, values, NaN flags) as numpy as ``_best_items`` returns it: (order,
    the flags as a tensor or None unless ``detect_nan``, values); None where it declined."""
    if found is None:
        return None
    order, values, has_nan = found
    return torch.from_numpy(order), (torch.from_numpy(has_nan) if detect_nan else None), torch.from_numpy(values)


def host_order(x: torch.Tensor, maxima: torch.Tensor, k: int, group: int) -> Optional[tuple]:
    """(order, values) (batch, k): the items of each row of ``x`` (CPU float32, contiguous) in
    stable rank order and their values, given the ``maxima`` of its groups of ``group``
    consecutive items, selected on the host (:mod:`.host`); None where the host selection
    declines (``host.order_above``)."""
    num_rows, num_cols = x.shape
    num_groups = maxima.shape[1]
    if not 0 < k < num_groups or num_rows == 0:
        return None
    best, threshold = host.best_groups(maxima.detach().numpy(), k)
    chosen = rows_of_groups(x, torch.from_numpy(best), group).detach().numpy()
    tail_start = num_groups * group  # the items after the last full group are candidates too
    found = host.order_above(chosen, x[:, tail_start:].detach().numpy(), tail_start, best, threshold, k, group)
    return None if found is None else (torch.from_numpy(found[0]), torch.from_numpy(found[1]))


def rereads_cached(x: torch.Tensor, group: int) -> bool:
    """Whether the rows are selected by :func:`threshold_order`: groups smaller than torch reduces
    fast (``tuning.FAST_REDUCTION``) and scores small enough to stay in the last-level cache
    between two reads (``tuning.IN_CACHE_SHARE``)."""
    return group < tuning.FAST_REDUCTION and tuning.stays_in_cache(x)


def threshold_order(x: torch.Tensor, k: int, group: int, detect_nan: bool):
    """(order, NaN flags or None, values) of CPU float32 rows (contiguous) that stay in cache, or None
    (then the caller's selection): T is the k-th largest maximum of the strided groups of
    ``group`` items (``strided_groups``: a reduction across contiguous runs, fast at any group
    size), which k distinct items reach, and the candidates are every item scoring at least T,
    found by one comparison of each score (:func:`host.order_at_least`, a block of rows at a
    time). Replaces the maxima of small contiguous groups (a slow reduction), the copy of the
    chosen groups and their comparison."""
    num_rows, num_cols = x.shape
    if not 0 < k <= num_cols // group or num_rows == 0:
        return None
    found = host.order_at_least(x.detach().numpy(), strided_groups(x, group).detach().numpy(), k, x.device)
    return _as_tensors(found, detect_nan)


def strided_groups(x: torch.Tensor, group: int) -> torch.Tensor:
    """A view (batch, group, num_cols // group) of the row's first items: column j of it is the
    group {j, j + s, j + 2 s, ...} with s = num_cols // group. Its maxima (``amax(1)``) reduce
    across contiguous runs, which vectorises well on CPU (unlike maxima of small runs)."""
    stride = x.shape[1] // group
    return x[:, : group * stride].unflatten(1, (group, stride))


def _nan_rows(x: torch.Tensor, maxima: torch.Tensor, group: int) -> torch.Tensor:
    """(batch,) bool: the row holds a NaN, read from its group ``maxima`` and the items after them."""
    tail_start = maxima.shape[1] * group
    has_nan = holds_nan(maxima)
    return has_nan if tail_start == x.shape[1] else has_nan | holds_nan(x[:, tail_start:])


def _candidates(x: torch.Tensor, k: int, detect_nan: bool = False, maxima: Optional[torch.Tensor] = None):
    """A few items of each row that include its k best: (values, their item indices or None when
    they are the whole row, whether the row holds a NaN if ``detect_nan`` else None); ``maxima``:
    the maxima of the groups ``group_sizes`` gives, if already taken.

    Groups of consecutive items (see the module docstring): the best k groups of the row, then
    the best k sub-groups inside them; ``group_sizes`` picks the sizes. A group's rank is that of
    its best item, so groups are compared by (maximum, first item index). The items after the
    last full group are always candidates."""
    x = x.contiguous()
    num_rows, num_cols = x.shape
    sizes = group_sizes(num_cols, k)
    if sizes is None:
        return x, None, (holds_nan(x) if detect_nan else None)
    group, sub_group = sizes
    num_full = num_cols // group
    maxima = group_maxima(x, group) if maxima is None else maxima
    best = _best_groups(maxima, k)
    chosen_values = rows_of_groups(x, best, group)
    above = tuning.cpu_tuned(x.device) and x.is_floating_point()
    found = _above_threshold(chosen_values, maxima, best, group, k, num_cols) if above else None
    if found is not None:
        values, items = found
    else:
        subs_per_group = group // sub_group
        sub_ids = runs(best, subs_per_group)
        best_sub = _exact_topk(group_maxima(chosen_values, sub_group), sub_ids * sub_group, k, sorted=False)
        chosen = sub_ids.gather(1, best_sub)
        values = rows_of_groups(x, chosen, sub_group)
        items = runs(chosen, sub_group)
    has_nan = holds_nan(maxima) if detect_nan else None
    values, items, tail = with_tail(values, items, x, num_full * group)
    if tail is not None and detect_nan:
        has_nan = holds_nan(tail) if has_nan is None else has_nan | holds_nan(tail)
    return values, items, has_nan


def _best_groups(maxima: torch.Tensor, k: int) -> torch.Tensor:
    """Column positions (batch, k), in no order, of the k best ``maxima`` of each row by value
    descending then index ascending. On CPU over many groups (``tuning.FLOAT_SELECTION_FROM``),
    one float selection of the k + 1 largest: where a row's k-th largest exceeds its (k + 1)-th,
    its k largest are those k whatever the index (a host read); the keyed selection takes the
    other rows (a tie at the boundary, or a NaN). No int64 keys over the whole row."""
    num_rows, num_cols = maxima.shape
    if not tuning.cpu_tuned(maxima.device) or num_cols < tuning.FLOAT_SELECTION_FROM or k >= num_cols:
        return _exact_topk(maxima, None, k, sorted=False)
    values, indices = maxima.topk(k + 1, 1)
    rows = torch.gt(values[:, k - 1], values[:, k]).logical_not_().nonzero().flatten()
    best = indices[:, :k]
    if rows.numel():
        best = best.index_copy(0, rows, _exact_topk(maxima.index_select(0, rows), None, k, sorted=False))
    return best


def _above_threshold(chosen: torch.Tensor, maxima: torch.Tensor, best: torch.Tensor, size: int, k: int, num_cols: int):
    """CPU (host reads): the items of the chosen groups (``best``, their values ``chosen``
    (batch, k * size)) that score at least T, the lowest of the chosen groups' maxima, as
    (values, items) (batch, W), W the most per row, padded with -inf at item index num_cols
    (ranked after every item); None where a row has fewer than k such items (a NaN) or W is
    above ``tuning.THRESHOLD_CANDIDATES_PER_K`` x k (many ties: the sub-groups then). Exact: the
    chosen maxima are k items scoring at least T, so an item below T is not among the k best.
    Replaces the sub-group level (its maxima, a keyed selection and a copy of the chosen runs)."""
    num_rows, span = chosen.shape
    threshold = maxima.gather(1, best).amin(1, keepdim=True)
    listed = torch.ge(chosen, threshold).view(-1).nonzero().view(-1)
    rows = listed.div(span, rounding_mode="floor")
    counts = torch.bincount(rows, minlength=num_rows)
    low, high = (int(v) for v in counts.aminmax())
    if low < k or high > tuning.THRESHOLD_CANDIDATES_PER_K * k:
        return None
    first = counts.cumsum(0).sub_(counts)
    slots = torch.arange(listed.numel(), device=rows.device).sub_(first.index_select(0, rows)).add_(rows, alpha=high)
    columns = listed.sub(rows, alpha=span)  # in the row of chosen runs
    groups = best.reshape(-1).index_select(0, torch.add(columns.div(size, rounding_mode="floor"), rows, alpha=k))
    items = torch.full((num_rows * high,), num_cols, dtype=torch.int64, device=rows.device)
    items.index_copy_(0, slots, torch.add(columns.remainder_(size), groups, alpha=size))
    values = torch.full((num_rows * high,), float("-inf"), dtype=chosen.dtype, device=rows.device)
    values.index_copy_(0, slots, chosen.view(-1).index_select(0, listed))
    return values.view(num_rows, high), items.view(num_rows, high)


def with_tail(values: torch.Tensor, items: torch.Tensor, x: torch.Tensor, tail_start: int):
    """``values`` and ``items`` (batch, n) of the chosen runs followed by the items of ``x`` from
    ``tail_start`` on (those after the last full group, always candidates), and that tail of
    ``x`` (None when empty)."""
    num_rows, num_cols = x.shape
    if tail_start >= num_cols:
        return values, items, None
    tail = x[:, tail_start:]
    tail_items = tuning.index_constant(tail_start, num_cols, 1, num_rows, x.device)
    return torch.cat([values, tail], 1), torch.cat([items, tail_items], 1), tail


def group_sizes(num_cols: int, k: int) -> Optional[tuple]:
    """(items per group, items per sub-group), or None to select among all items (see
    ``tuning.LONG_ROWS_PER_K`` and ``tuning.GROUPED_ROWS_PER_K``)."""
    if num_cols >= tuning.LONG_ROWS_PER_K * k:
        return tuning.LONG_ROW_GROUPS
    return tuning.SHORT_ROW_GROUPS if num_cols >= tuning.GROUPED_ROWS_PER_K * k else None


def group_maxima(x: torch.Tensor, size: int) -> torch.Tensor:
    """Maxima (batch, num_cols // size) of the full groups of ``size`` consecutive items of each
    row. On CPU, torch reduces 64 contiguous values fast but 8 slowly; max pooling does small
    groups faster (and skips the last partial group without a copy; a 2-D input is pooled as
    (channels, length), so each row on its own)."""
    num_full = x.shape[1] // size
    pooled = size < tuning.FAST_REDUCTION and x.is_floating_point() and tuning.cpu_tuned(x.device)

    def maxima(rows) -> torch.Tensor:
        part = x[rows]
        if pooled:
            return torch.nn.functional.max_pool1d(part, size)
        return part[:, : num_full * size].unflatten(1, (num_full, size)).amax(2)

    return tuning.row_pass(maxima, x)


def runs(first: torch.Tensor, length: int) -> torch.Tensor:
    """(batch, n * length): the indices first * length + 0 .. length - 1 of each of the n runs in
    ``first`` (batch, n), e.g. the items of chosen groups."""
    offsets = tuning.index_constant(0, length, 1, 0, first.device)
    return torch.add(offsets, first.unsqueeze(2), alpha=length).flatten(1)


def rows_of_groups(x: torch.Tensor, best: torch.Tensor, size: int, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The values of the groups ``best`` (batch, k) of ``size`` consecutive items, (batch,
    k * size) (written into ``out``, a contiguous (batch, k, size) tensor, if given). Each group is
    one contiguous run of memory: a window view over the flat rows lets ``index_select`` copy
    whole runs (several times faster than an element-wise gather)."""
    num_rows, num_cols = x.shape
    row_starts = tuning.index_constant(0, num_rows * num_cols, num_cols, -1, x.device)
    starts = torch.add(row_starts, best, alpha=size).view(-1)
    if out is not None:
        runs_at(x, starts, size, out=out.view(-1, size))
        return out
    return runs_at(x, starts, size).view(num_rows, -1)


def runs_at(x: torch.Tensor, starts: torch.Tensor, size: int, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """(n, size): the runs of ``size`` consecutive values of the contiguous ``x`` (read as one flat
    row) that start at the flat positions ``starts`` (n,), copied whole by ``index_select`` over
    a window view (written into ``out`` if given)."""
    windows = x.as_strided((x.numel() - size + 1, size), (1, 1))
    if out is not None:
        return torch.index_select(windows, 0, starts, out=out)
    return windows.index_select(0, starts)


def _exact_topk(values: torch.Tensor, items: Optional[torch.Tensor], k: int, sorted: bool = True) -> torch.Tensor:
    """Column positions of the k best entries per row (value descending, item index ascending;
    ``items=None``: the column is the item index), in that order if ``sorted``. float32 and
    narrower values: one int64 key per entry, the value's order (``ordered_int32``) in the high
    32 bits less the item (below 2**32); only a negative NaN's key can wrap around, and a row
    holding a NaN is refused."""
    if values.dtype == torch.float64:  # 64-bit values leave no room for the index in a key
        if items is None:
            return torch.sort(values, dim=1, descending=True, stable=True).indices[:, :k]
        by_item = items.argsort(1)
        by_value = torch.sort(values.gather(1, by_item), dim=1, descending=True, stable=True).indices
        return by_item.gather(1, by_value[:, :k])
    # the value's order in the high 32 bits, less the item: the lower item ranks first
    high = ordered_int32(values).to(torch.int64).bitwise_left_shift_(32)
    keys = high.add_(index_low_bits(values.shape[1], values.device)) if items is None else high.sub_(items)
    return keys.topk(k, 1, sorted=sorted).indices


LOW_MASK = (1 << 32) - 1


def packed_keys(keys: torch.Tensor, low_bits: torch.Tensor) -> torch.Tensor:
    """int64 keys: the int32 ``keys`` in the high 32 bits, ``low_bits`` (in [0, 2**32)) below."""
    return keys.to(torch.int64).bitwise_left_shift_(32).add_(low_bits)


def index_low_bits(num_cols: int, device) -> torch.Tensor:
    """(num_cols,) low bits 2**32 - 1 - column: with them the lower column ranks first (read-only,
    made once per size and device)."""
    return tuning.index_constant(LOW_MASK, LOW_MASK - num_cols, -1, 0, device)


def ordered_int32(values: torch.Tensor) -> torch.Tensor:
    """int32 whose signed order is the float order of ``values`` (16/32-bit floats, exact; -0.0
    and +0.0 equal)."""
    bits = ((values if values.dtype == torch.float32 else values.to(torch.float32)) + 0.0).view(torch.int32)
    return (bits >> 31).bitwise_and_(0x7FFFFFFF).bitwise_xor_(bits)


def holds_nan(x: torch.Tensor) -> torch.Tensor:
    """(batch,) bool: the row holds a NaN. A max-reduction propagates NaN and is cheaper on CPU
    than ``isnan().any(1)``."""
    return tuning.row_pass(lambda rows: x[rows].amax(1), x).isnan()
