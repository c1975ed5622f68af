"""The one shared ranking step. The tie policy lives here and nowhere else.

``rank`` turns a batch ``(y_pred, y)`` into a :class:`RankedBatch`: per-position quantities of the
top ``depth`` items (relevance indicator, gain, and what MAP / MRR / HitRate need) plus the
per-user relevant count and the ideal gains. Every ranking metric reduces from it.

Selection. Items are ordered by score descending and, among equal scores, by item index
ascending (what a stable descending argsort gives). The top ``depth`` items are found without
sorting the catalog, by a group pre-filter (as "Dr. Top-k", Gaihre et al., SC'21): the row is
cut into groups of g consecutive items and each group is ranked by its best item, i.e. by
(group maximum, group index); the best ``depth`` groups are chosen (recursively, by the same
rule), then their best ``depth`` sub-groups of s items likewise, and the exact top ``depth`` is
taken among those items. This is exact: an item outside the chosen groups has at least
``depth`` items ranked ahead of it (the best item of each chosen group). (g, s) is (64, 8) on
long rows and (16, 4) on shorter ones. One max-reduction over the row plus selections among
~``N / g + depth * (g / s + s)`` values replace ``torch.topk``'s selection over all N. The final
selection uses unique int64 keys (order-preserving float bits, then the item index), so the order
is the same on CPU and CUDA. Everything is tensor code without host synchronisation.

Ties. ``ties="stable"`` uses the order above. ``ties="average"`` reports the expected value over
all orderings of tied scores (McSherry & Najork, ECIR 2008): each position of a tie group gets the
group's mean relevance and gain, and the quantities that are not linear in the hits (first hit,
precision at each hit) use their exact expectation under a uniformly random order of the group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Union

import torch

from ._validation import GainFunction, check_gain_output

# (items per group, items per sub-group) of the two selection levels. Long rows use groups of
# 64: torch's CPU max-reduction is fast over 64 contiguous values (3x slower over 32); max
# pooling reduces the smaller groups faster than it.
_LONG_ROW_GROUPS = (64, 8)
_SHORT_ROW_GROUPS = (16, 4)
_FAST_REDUCTION = 64
# Smallest strided group worth a two-step selection of values (measured on CPU, k = 100).
_MIN_VALUE_GROUP = 3
# Row chunk of CPU passes over (batch, num_items): temporaries stay in cache and are reused.
_CHUNK_ELEMENTS = 1 << 18


@dataclass(frozen=True)
class Relevance:
    """Which labels are relevant: ``y >= threshold`` compared in the labels' own dtype (the
    threshold rounded to it, exactly what ``y >= threshold`` does in torch, so a float32 label
    0.7 meets the threshold 0.7), or ``y > 0`` when the threshold is None. Every comparison of a
    label with the threshold, in every metric and on every path, goes through one of these."""

    compare: Callable  # torch.ge or torch.gt
    value: Union[int, float]  # exactly representable in the labels' dtype

    @classmethod
    def of(cls, threshold: Optional[float], dtype: torch.dtype) -> "Relevance":
        if threshold is None:
            return cls(torch.gt, 0)
        if dtype == torch.bool:
            return cls(torch.ge, 1 if threshold <= 1 else 2)  # True is 1
        if not dtype.is_floating_point:
            lowest_relevant = math.ceil(threshold)  # an integer label is >= t iff it is >= ceil(t)
            largest = torch.iinfo(dtype).max
            # a Python int outside the dtype's range would wrap around in torch's comparison
            return cls(torch.ge, lowest_relevant) if lowest_relevant <= largest else cls(torch.gt, largest)
        return cls(torch.ge, float(torch.tensor(threshold, dtype=dtype)))

    def mask(self, labels: torch.Tensor) -> torch.Tensor:
        """bool, True where the label is relevant."""
        return self.compare(labels, self.value)

    def indicator(self, labels: torch.Tensor) -> torch.Tensor:
        """float64 0/1, 1 where the label is relevant (see ``_indicator``)."""
        return _indicator(self.compare, labels, self.value)


@dataclass
class RankedBatch:
    """What every ranking metric needs of one batch. Tensors are float64, shape (batch, depth)
    unless noted; under ``ties="average"`` each is the expectation over tie orderings."""

    num_items: int
    depth: int
    hit: torch.Tensor  # 1 if the item at position i is relevant
    hit_times_hits_so_far: torch.Tensor  # hit_i * (number of hits in positions 1..i)
    first_hit: torch.Tensor  # 1 if position i holds the first relevant item
    num_relevant: Optional[torch.Tensor]  # (batch,) |R| = the number of relevant items, if asked
    has_relevant: torch.Tensor  # (batch,) bool, |R| > 0
    gain: Optional[torch.Tensor]  # gain of the item at position i (0 if not relevant)
    ideal_gain: Optional[torch.Tensor]  # gains of the ideal ranking, descending
    invalid: dict  # message -> 0-d bool tensor, True when the batch holds an invalid value
    num_candidates: Optional[torch.Tensor] = None  # (batch,) float64 when items were excluded or listed
    # (batch, depth) float64: 1 where the candidates at positions i and i + 1 have equal scores, so
    # that a cut-off at i splits a group of tied scores (None when there are no scores)
    boundary_tie: Optional[torch.Tensor] = None


def rank(
    y_pred: torch.Tensor,
    y: torch.Tensor,
    *,
    depth: int,
    relevance_threshold: Optional[float],
    ties: str = "stable",
    gain_function: Optional[GainFunction] = None,
    ideal: bool = False,
    count_relevant: bool = True,
) -> RankedBatch:
    """The shared ranking step. ``depth`` is the largest cut-off; it is clipped to num_items.
    ``relevance_threshold``: see :class:`Relevance`. ``count_relevant=False`` leaves
    ``num_relevant`` out (for metrics that only need to know whether a user has a relevant
    item), which saves a pass on CPU."""
    num_items = y_pred.shape[1]
    depth = min(depth, num_items)
    scores, labels = y_pred.contiguous(), y.contiguous()
    relevance = Relevance.of(relevance_threshold, labels.dtype)

    # one position more than the cut-offs need: whether a cut-off splits tied scores
    order, score_is_nan = stable_topk(scores, min(depth + 1, num_items), detect_nan=True)
    tie = boundary_ties(scores, order, depth)
    order = order[:, :depth]
    selects_labels = ideal and _ideal_needs_selection(labels, gain_function)
    label_group = _value_group_size(num_items, depth) if selects_labels else None
    num_relevant, has_relevant, lowest_label, label_maxima = _relevance_pass(
        labels,
        relevance,
        count=count_relevant or (ideal and not selects_labels),  # the binary ideal counts
        strided_group=label_group,
    )
    top_labels = labels.gather(1, order).to(torch.float64)
    top_relevant = relevance.indicator(top_labels)
    top_gain = None if gain_function is None else gains(top_labels, top_relevant, gain_function, relevance_threshold)

    if ties == "stable":
        hit, gain, hit_times_hits_so_far, first_hit = stable_positions(top_relevant, top_gain)
    else:
        top_scores = scores.gather(1, order)
        last_group = _last_group_totals(scores, labels, top_scores[:, -1:], relevance, gain_function, relevance_threshold)
        hit, gain, hit_times_hits_so_far, first_hit = _tie_expectations(top_scores, top_relevant, top_gain, last_group)

    ideal_gain = None
    if ideal:
        ideal_gain = _ideal_gains(labels, num_relevant, depth, relevance, gain_function, label_maxima,
                                  relevance_threshold)

    invalid = _invalid_flags(score_is_nan.any(), lowest_label)
    if gain_function is not None:
        invalid.update(_gain_flags(gain_function, gain, ideal_gain))
    return RankedBatch(
        num_items, depth, hit, hit_times_hits_so_far, first_hit, num_relevant, has_relevant, gain, ideal_gain, invalid,
        boundary_tie=tie,
    )


def stable_positions(top_relevant: torch.Tensor, top_gain: Optional[torch.Tensor]):
    """The per-position quantities of ``RankedBatch`` under the stable order: (hit, gain,
    hit * hits so far, first hit)."""
    hits_so_far = top_relevant.cumsum(1)
    first_hit = top_relevant * _indicator(torch.eq, hits_so_far, 1)
    return top_relevant, top_gain, top_relevant * hits_so_far, first_hit


def boundary_ties(scores: torch.Tensor, order: torch.Tensor, depth: int) -> torch.Tensor:
    """(batch, depth) float64: 1 at position i (0-based) when the items at positions i and i + 1
    of ``order`` (best first, ``depth`` or ``depth + 1`` columns, -1 = no item) are both listed
    and tie in score."""
    listed = order >= 0
    ranked = scores.gather(1, order.clamp(min=0))
    tie = (ranked[:, 1:] == ranked[:, :-1]) & listed[:, 1:] & listed[:, :-1]
    out = torch.zeros(order.shape[0], depth, dtype=torch.float64, device=order.device)
    out[:, : tie.shape[1]] = tie[:, :depth]
    return out


def stable_topk(x: torch.Tensor, k: int, detect_nan: bool = False):
    """Indices (batch, k) of the k largest entries of each row of ``x``, ordered by value
    descending then index ascending. With ``detect_nan``, also a (batch,) bool: row holds a NaN."""
    order, has_nan = _best_items(x, min(k, x.shape[1]), sorted=True, detect_nan=detect_nan)
    return (order, has_nan) if detect_nan else order


def _best_items(x: torch.Tensor, k: int, sorted: bool, detect_nan: bool = False):
    """``stable_topk``'s indices, in rank order only if ``sorted``, and the NaN flags (or None)."""
    values, items, has_nan = _candidates(x, k, detect_nan=detect_nan)
    positions = _exact_topk(values, items, k, sorted)
    return (positions if items is None else items.gather(1, positions)), has_nan


def _candidates(x: torch.Tensor, k: int, detect_nan: bool = False):
    """A few items of each row that include its k best: (values, their item indices or None when
    they are the whole row, whether the row holds a NaN if ``detect_nan`` else None).

    Groups of consecutive items (see the module docstring): the best k groups of the row, then
    the best k sub-groups inside them; ``_group_sizes`` picks the sizes. A group's rank is that of
    its best item, so groups are compared by (maximum, first item index). The items after the
    last full group are always candidates."""
    x = x.contiguous()
    num_rows, num_cols = x.shape
    sizes = _group_sizes(num_cols, k)
    if sizes is None:
        return x, None, (_holds_nan(x) if detect_nan else None)
    group, sub_group = sizes
    num_full = num_cols // group
    maxima = _group_maxima(x, group)
    best = _best_items(maxima, k, sorted=False)[0]
    subs_per_group = group // sub_group
    sub_ids = _runs(best, subs_per_group)
    sub_maxima = _sub_group_maxima(x, best, group, sub_group)
    best_sub = _exact_topk(sub_maxima, sub_ids * sub_group, k, sorted=False)
    chosen = sub_ids.gather(1, best_sub)
    values = _rows_of_groups(x, chosen, sub_group).flatten(1)
    items = _runs(chosen, sub_group)
    has_nan = _holds_nan(maxima) if detect_nan else None
    tail_start = num_full * group
    if tail_start < num_cols:
        tail = x[:, tail_start:]
        values = torch.cat([values, tail], 1)
        items = torch.cat([items, torch.arange(tail_start, num_cols, device=x.device).expand(num_rows, -1)], 1)
        has_nan = has_nan | _holds_nan(tail) if detect_nan else None
    return values, items, has_nan


def _group_sizes(num_cols: int, k: int) -> Optional[tuple]:
    """(items per group, items per sub-group), or None to select among all items. Measured on
    CPU with k = 100: the two levels pay off from 20 k items; groups of 64 from 200 k, groups of
    16 below (choosing k of few groups of 64 prunes too little)."""
    if num_cols >= 200 * k:
        return _LONG_ROW_GROUPS
    return _SHORT_ROW_GROUPS if num_cols >= 20 * k else None


def _group_maxima(x: torch.Tensor, size: int) -> torch.Tensor:
    """Maxima (batch, num_cols // size) of the full groups of ``size`` consecutive items of each
    row. On CPU, torch reduces 64 contiguous values fast but 8 slowly; max pooling does small
    groups faster (and skips the last partial group without a copy)."""
    num_full = x.shape[1] // size
    if size < _FAST_REDUCTION and x.is_floating_point() and _cpu_tuned(x.device):
        return torch.nn.functional.max_pool1d(x.unsqueeze(1), size).squeeze(1)
    return x[:, : num_full * size].unflatten(1, (num_full, size)).amax(2)


def _sub_group_maxima(x: torch.Tensor, groups: torch.Tensor, size: int, sub_size: int) -> torch.Tensor:
    """Maxima (batch, k * size / sub_size) of the runs of ``sub_size`` items inside the groups
    ``groups`` (batch, k) of ``size`` items, copying the groups a row chunk at a time (a copy of
    all of them at once would be the largest temporary of an update)."""
    num_rows, k = groups.shape
    out = torch.empty(num_rows, k * (size // sub_size), dtype=x.dtype, device=x.device)
    for rows in _row_chunks(num_rows, k * size, x.device):
        values = _rows_of_groups(x[rows], groups[rows], size)
        out[rows] = _group_maxima(values.view(values.shape[0], -1), sub_size)
    return out


def _runs(first: torch.Tensor, length: int) -> torch.Tensor:
    """(batch, n * length): the indices first * length + 0 .. length - 1 of each of the n runs in
    ``first`` (batch, n), e.g. the items of chosen groups."""
    return torch.add(torch.arange(length, device=first.device), first.unsqueeze(2), alpha=length).flatten(1)


def _rows_of_groups(x: torch.Tensor, best: torch.Tensor, size: int) -> torch.Tensor:
    """The values of the groups ``best`` (batch, k) of ``size`` consecutive items, (batch, k, size).
    Each group is one contiguous run of memory: a window view over the flat rows lets
    ``index_select`` copy whole runs (several times faster than an element-wise gather)."""
    num_rows, num_cols = x.shape
    windows = x.as_strided((x.numel() - size + 1, size), (1, 1))
    row_starts = torch.arange(0, num_rows * num_cols, num_cols, device=x.device).unsqueeze(1)
    starts = torch.add(row_starts, best, alpha=size)
    return windows.index_select(0, starts.flatten()).view(num_rows, -1, size)


def _exact_topk(values: torch.Tensor, items: Optional[torch.Tensor], k: int, sorted: bool = True) -> torch.Tensor:
    """Column positions of the k best entries per row (value descending, item index ascending;
    ``items=None``: the column is the item index), in that order if ``sorted``."""
    if values.dtype == torch.float64:  # 64-bit values leave no room for the index in a key
        if items is None:
            return torch.sort(values, dim=1, descending=True, stable=True).indices[:, :k]
        by_item = items.argsort(1)
        by_value = torch.sort(values.gather(1, by_item), dim=1, descending=True, stable=True).indices
        return by_item.gather(1, by_value[:, :k])
    # low 32 bits of a key: 2**32 - 1 - item, so that the lower index ranks first
    if items is None:
        low_bits = torch.arange(_LOW_MASK, _LOW_MASK - values.shape[1], -1, device=values.device)  # every row
    else:
        low_bits = torch.rsub(items, _LOW_MASK)
    out = torch.empty(values.shape[0], k, dtype=torch.int64, device=values.device)
    for rows in _row_chunks(values.shape[0], 2 * values.shape[1], values.device):
        row_low_bits = low_bits if low_bits.ndim == 1 else low_bits[rows]
        out[rows] = _order_keys(values[rows], row_low_bits).topk(k, 1, sorted=sorted).indices
    return out


_LOW_MASK = (1 << 32) - 1


def _order_keys(values: torch.Tensor, low_bits: torch.Tensor) -> torch.Tensor:
    """Unique int64 keys whose descending order is (value descending, item index ascending):
    the order-preserving integer of the value in the high 32 bits, ``low_bits`` = 2**32 - 1 -
    item below."""
    return _ordered_int32(values).to(torch.int64).bitwise_left_shift_(32).add_(low_bits)


def _ordered_int32(values: torch.Tensor) -> torch.Tensor:
    """int32 whose signed order is the float order of ``values`` (16/32-bit floats, exact; -0.0
    and +0.0 equal)."""
    bits = (values.to(torch.float32) + 0.0).view(torch.int32)
    return (bits >> 31).bitwise_and_(0x7FFFFFFF).bitwise_xor_(bits)


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


def _cpu_tuned(device: torch.device) -> bool:
    """Whether to take the CPU-tuned variants (row chunks that stay in cache, max pooling for
    small groups); accelerators take one pass over the whole batch and plain reductions. The
    results are the same either way (tested by switching this off on CPU)."""
    return device.type == "cpu"


def _row_chunks(num_rows: int, row_cost: int, device: torch.device):
    """Row slices for passes over (batch, num_items); one slice on accelerators."""
    if not _cpu_tuned(device):
        yield slice(None)
        return
    step = max(1, _CHUNK_ELEMENTS // max(row_cost, 1))
    for start in range(0, num_rows, step):
        yield slice(start, start + step)


def _relevance_pass(labels: torch.Tensor, relevance: Relevance, count: bool = True, strided_group: Optional[int] = None):
    """One pass over y, each row chunk read once from memory while it is in cache. Returns:
    the per-user relevant count |R| (float64; None unless ``count``), whether each user has a
    relevant item (bool), the smallest label (for the value checks) and, given ``strided_group``,
    the maxima of the strided groups of that many labels (``_strided_groups``; the first step of
    the ideal ranking's selection). Without the count a user has a relevant item iff its largest
    label is relevant: a max-reduction is cheaper on CPU than a comparison plus a sum."""
    num_rows, num_cols = labels.shape
    device = labels.device
    count_dtype = torch.float32 if num_cols < (1 << 24) else torch.float64  # float32 counts are exact below 2**24
    counts = torch.empty(num_rows, dtype=count_dtype, device=device) if count else None
    highest = None if count else torch.empty(num_rows, dtype=labels.dtype, device=device)
    lowest = None if labels.dtype == torch.bool else torch.empty(num_rows, dtype=labels.dtype, device=device)
    maxima = None
    if strided_group:
        maxima = torch.empty(num_rows, num_cols // strided_group, dtype=labels.dtype, device=device)
    buffer = None
    # Chunks keep the comparison buffer in cache; reductions alone do better with larger ones.
    for rows in _row_chunks(num_rows, num_cols if count else num_cols // 4, device):
        chunk = labels[rows]
        if count:
            if buffer is None:
                buffer = torch.empty(chunk.shape, dtype=torch.float32, device=device)
            is_relevant = relevance.compare(chunk, relevance.value, out=buffer[: chunk.shape[0]])  # float out: fast
            torch.sum(is_relevant, 1, dtype=count_dtype, out=counts[rows])
        if lowest is not None:
            torch.amin(chunk, 1, out=lowest[rows])
        if maxima is not None:
            torch.amax(_strided_groups(chunk, strided_group), 1, out=maxima[rows])
        elif not count:
            torch.amax(chunk, 1, out=highest[rows])
    if maxima is not None and not count:
        tail = labels[:, maxima.shape[1] * strided_group :]
        highest = maxima.amax(1) if tail.shape[1] == 0 else torch.maximum(maxima.amax(1), tail.amax(1))
    counts = counts.to(torch.float64) if count else None
    has_relevant = counts > 0 if count else relevance.mask(highest)
    lowest = torch.zeros((), device=device) if lowest is None else lowest.amin()
    return counts, has_relevant, lowest, maxima


def gains(values: torch.Tensor, relevant: torch.Tensor, gain_function: GainFunction, threshold: Optional[float]):
    """Gain of each relevance value (float64); 0 where the item is not relevant. ``relevant`` is
    the float 0/1 indicator. The built-in gains are 0 at a masked value of 0, so they mask by a
    product (finite: a label that is not relevant is finite), not a select. ``threshold`` is the
    metric's ``relevance_threshold``, used by ``"exp_rank_shifted"``."""
    if gain_function == "exp_rank":
        return torch.exp2(values * relevant) - 1
    if gain_function == "linear_rank":
        return values * relevant
    if gain_function == "binary":
        return relevant.clone()
    if gain_function == "exp_rank_shifted":
        return torch.exp2((values - threshold + 1) * relevant) - 1
    raw = check_gain_output(gain_function(values), values)
    return torch.where(relevant > 0, raw, torch.zeros((), dtype=torch.float64, device=values.device))


def _gain_flags(gain_function: GainFunction, *gain_tensors: Optional[torch.Tensor]) -> dict:
    """Value checks of the gains used: each must be finite (``2 ** y`` overflows float64 for
    y >= 1024, an infinite label has an infinite gain) and, for a custom gain, non-negative."""
    used = [g for g in gain_tensors if g is not None]
    name = getattr(gain_function, "__name__", "custom") if callable(gain_function) else repr(gain_function)
    flags = {
        f"y gives an infinite or NaN gain under gain_function={name} (2**y overflows float64 for "
        "y >= 1024, and an infinite label has an infinite gain); rescale the labels or use "
        "another gain_function": torch.stack([~torch.isfinite(g).all() for g in used]).any()
    }
    if callable(gain_function):
        flags[f"gain_function={name} returned a negative gain for a relevant label; gains must be >= 0"] = (
            torch.stack([(g < 0).any() for g in used]).any()
        )
    return flags


def _indicator(compare, x: torch.Tensor, value) -> torch.Tensor:
    """``compare(x, value)`` as float64 0/1. Written straight into a float tensor: on CPU, bool
    results and selects over them cost several times a float operation."""
    return compare(x, value, out=torch.empty(x.shape, dtype=torch.float64, device=x.device))


def _holds_nan(x: torch.Tensor) -> torch.Tensor:
    """(batch,) bool: the row holds a NaN. A max-reduction propagates NaN and is cheaper on CPU
    than ``isnan().any(1)``."""
    return x.amax(1).isnan()


def _ideal_needs_selection(labels: torch.Tensor, gain_function) -> bool:
    """Whether the ideal gains need the top labels (graded gains), not just the relevant count."""
    return not (gain_function == "binary" or labels.dtype == torch.bool)


def _ideal_gains(labels, num_relevant, depth, relevance, gain_function, label_maxima, threshold):
    """Gains of the best possible ranking, (batch, depth), from the top ``depth`` labels."""
    if not _ideal_needs_selection(labels, gain_function):
        return binary_ideal_gains(num_relevant, depth, gain_function, threshold)
    best = _top_values(labels, depth, label_maxima).to(torch.float64)
    return gains(best, relevance.indicator(best), gain_function, threshold)


def binary_ideal_gains(num_relevant: torch.Tensor, depth: int, gain_function, threshold) -> torch.Tensor:
    """Ideal gains (batch, depth) when every relevant item gains alike: the first |R| positions."""
    positions = torch.arange(depth, device=num_relevant.device, dtype=torch.float64)
    relevant = (positions < num_relevant.unsqueeze(1)).to(torch.float64)
    return gains(relevant, relevant, gain_function, threshold)


def _top_values(x: torch.Tensor, k: int, maxima: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The k largest values of each row, descending (values only, so ties need no rule).

    Strided groups (``_strided_groups``): the best k groups by maximum, then the k largest of
    their items and of the items after the last full group. Exact for values, whichever of
    equal maxima is chosen: every item outside the chosen groups is at most the k-th chosen
    maximum, and the chosen groups hold k items at least that large. ``maxima``: the groups'
    maxima, if already computed."""
    num_cols = x.shape[1]
    group = _value_group_size(num_cols, k)
    if group is None:
        return x.topk(k, 1).values
    groups = _strided_groups(x, group)
    if maxima is None:
        maxima = groups.amax(1)
    best = maxima.topk(k, 1, sorted=False).indices
    candidates = groups.gather(2, best.unsqueeze(1).expand(-1, group, -1)).flatten(1)
    tail_start = maxima.shape[1] * group
    if tail_start < num_cols:
        candidates = torch.cat([candidates, x[:, tail_start:]], 1)
    return candidates.topk(k, 1).values


def _value_group_size(num_cols: int, k: int) -> Optional[int]:
    """Items per strided group for ``_top_values``, or None to select among all items. About
    sqrt(num_cols / k), which balances the two selections (among num_cols / g maxima, then
    among g k items)."""
    group = round((num_cols / k) ** 0.5)
    return group if group >= _MIN_VALUE_GROUP else None


def _strided_groups(x: torch.Tensor, group: int) -> torch.Tensor:
    """A view (batch, group, num_cols // group) of the row's first items: column j of it is the
    group {j, j + s, j + 2 s, ...} with s = num_cols // group. Its maxima (``amax(1)``) reduce
    across contiguous runs, which vectorises well on CPU (unlike maxima of small runs)."""
    stride = x.shape[1] // group
    return x[:, : group * stride].unflatten(1, (group, stride))


def _tie_expectations(top_scores, top_relevant, top_gain, last_group):
    """Per-position expectations over uniformly random orders within each group of tied scores.
    ``last_group``: (count, relevant count, total gain) (batch,) of the candidates tied with the
    last listed score, over the whole row (that group may continue past the cut). A NaN in
    ``top_scores`` marks an empty position (a group of its own, holding nothing)."""
    depth = top_scores.shape[1]
    position = torch.arange(depth, device=top_scores.device)
    starts_group = torch.ones_like(top_scores, dtype=torch.bool)
    starts_group[:, 1:] = top_scores[:, 1:] != top_scores[:, :-1]
    ends_group = torch.ones_like(starts_group)
    ends_group[:, :-1] = starts_group[:, 1:]
    start = torch.where(starts_group, position, 0).cummax(1).values
    end = torch.where(ends_group, position, depth - 1).flip(1).cummin(1).values.flip(1)

    def group_total(per_position):
        running = per_position.cumsum(1)
        before = torch.where(start > 0, running.gather(1, (start - 1).clamp(min=0)), 0.0)
        return running.gather(1, end) - before

    # The last group may continue past the cut: take its totals over the whole row.
    in_last_group = top_scores == top_scores[:, -1:]
    last_count, last_relevant, last_gain = last_group
    size = torch.where(in_last_group, last_count.unsqueeze(1), (end - start + 1).to(torch.float64))
    relevant = torch.where(in_last_group, last_relevant.unsqueeze(1), group_total(top_relevant))
    gain = None
    if top_gain is not None:
        gain = torch.where(in_last_group, last_gain.unsqueeze(1), group_total(top_gain)) / size

    hits_before_group = (top_relevant.cumsum(1) - top_relevant).gather(1, start)
    slot = (position - start + 1).to(torch.float64)  # 1-based position inside the group
    hit = relevant / size
    others = (slot - 1) * (relevant - 1) / (size - 1).clamp(min=1)
    hit_times_hits_so_far = hit * (hits_before_group + 1 + others)
    first_hit = (hits_before_group == 0) * _first_success_probability(slot, size, relevant)
    return hit, gain, hit_times_hits_so_far, first_hit


def _first_success_probability(slot, size, successes):
    """P(the first of ``successes`` marked items in a random order of ``size`` is at ``slot``)
    = C(size - slot, successes - 1) / C(size, successes)."""
    possible = (successes >= 1) & (slot <= size - successes + 1)
    n, x, r = size, slot, successes.clamp(min=1)
    rest = (n - x).clamp(min=0)
    log_p = (
        torch.lgamma(rest + 1) - torch.lgamma(r) - torch.lgamma((rest - r + 1).clamp(min=1) + 1)
        - torch.lgamma(n + 1) + torch.lgamma(r + 1) + torch.lgamma(n - r + 1)
    )
    return torch.where(possible, torch.exp(log_p), torch.zeros_like(log_p))


def _last_group_totals(scores, labels, boundary, relevance, gain_function, threshold=None):
    """Over the whole row, the items whose score equals ``boundary`` (batch, 1): their number,
    how many are relevant and their total gain."""
    num_rows, num_cols = scores.shape
    totals = torch.zeros(3, num_rows, dtype=torch.float64, device=scores.device)
    for rows in _row_chunks(num_rows, 4 * num_cols, scores.device):
        tied = (scores[rows] == boundary[rows]).to(torch.float64)
        label_values = labels[rows].to(torch.float64)
        relevant = relevance.indicator(label_values)
        totals[0, rows] = tied.sum(1)
        totals[1, rows] = (tied * relevant).sum(1)
        if gain_function is not None:
            totals[2, rows] = (tied * gains(label_values, relevant, gain_function, threshold)).sum(1)
    return totals[0], totals[1], totals[2]


def _budget_row_chunks(num_rows: int, num_cols: int, row_cost: int, bytes_per_entry: int, device: torch.device):
    """Row slices for a pass that makes about ``bytes_per_entry`` bytes of temporaries per entry
    (sorts, int64 indices), whose chunks' temporaries stay within one (batch, num_items) float32.
    CPU: ``_row_chunks``' cache-sized chunks, but at least one row per thread (torch sorts rows in
    parallel) where the budget allows. Accelerators: the budget, at least ``_ACCELERATOR_CHUNK``
    entries."""
    budget_rows = max(1, num_rows * 4 // bytes_per_entry)
    if _cpu_tuned(device):
        step = max(1, _CHUNK_ELEMENTS // max(row_cost, 1), min(torch.get_num_threads(), budget_rows))
    else:
        step = max(budget_rows, _ACCELERATOR_CHUNK // max(num_cols, 1))
    for start in range(0, num_rows, step):
        yield slice(start, start + step)


# Smallest chunk (entries) of the budgeted passes on accelerators: fewer, larger kernel launches.
_ACCELERATOR_CHUNK = 1 << 20


def hits_at_own_depth(y_pred: torch.Tensor, y: torch.Tensor, relevance_threshold: float, ties: str):
    """For R-Precision: (hits among the top |R| items, |R|) per user, both float64 (batch,).

    |R| differs per user and is unbounded by any cut-off, so this sorts the full rows
    (O(num_items log num_items)), a chunk of rows at a time (the sort's values and int64 indices
    stay within one (batch, num_items) float32); no host synchronisation."""
    num_rows, num_cols = y_pred.shape
    relevance = Relevance.of(relevance_threshold, y.dtype)
    num_relevant, _, _, _ = _relevance_pass(y, relevance)
    hits = torch.empty_like(num_relevant)
    for rows in _budget_row_chunks(num_rows, num_cols, 8 * num_cols, 64, y_pred.device):
        scores, labels, relevant_count = y_pred[rows].contiguous(), y[rows], num_relevant[rows]
        sorted_scores, order = torch.sort(scores, dim=1, descending=True, stable=True)
        cut = (relevant_count.to(torch.int64) - 1).clamp(min=0).unsqueeze(1)
        relevant_in_order = relevance.indicator(labels.gather(1, order))
        del order
        row_hits = relevant_in_order.cumsum_(1).gather(1, cut).squeeze(1)
        if ties == "average":
            boundary = sorted_scores.gather(1, cut)
            del sorted_scores
            above = _indicator(torch.gt, scores, boundary)
            ahead = above.sum(1)
            count, relevant, _ = _last_group_totals(scores, labels, boundary, relevance, None)
            relevant_ahead = above.mul_(relevance.mask(labels)).sum(1)
            row_hits = relevant_ahead + (relevant_count - ahead) * relevant / count
        hits[rows] = row_hits
    return torch.where(num_relevant > 0, hits, torch.zeros_like(hits)), num_relevant


def _invalid_flags(any_nan_score: torch.Tensor, lowest_label: torch.Tensor) -> dict:
    """``lowest_label``: the smallest label of the batch (NaN propagates through ``amin``).
    Negative labels are legal (not relevant); NaN and -inf labels are not."""
    return {
        "y_pred contains NaN scores (+inf and -inf are allowed)": any_nan_score,
        "y contains NaN or -inf relevance values (negative labels are allowed)": ~(lowest_label > float("-inf")),
    }


def full_row_checks(y_pred: torch.Tensor, y: torch.Tensor) -> dict:
    """The value checks of ``rank``, for metrics that read the full rows themselves."""
    lowest = torch.zeros((), device=y.device) if y.dtype == torch.bool else y.amin()
    return _invalid_flags(_holds_nan(y_pred).any(), lowest)  # a max per row: no (B, N) bool temporary


def per_user_auc(y_pred: torch.Tensor, y: torch.Tensor, relevance_threshold: float):
    """Per-user ROC AUC over the full row with tie-averaged ranks (ties count one half), as
    RecBole's ``GAUC`` and scikit-learn's ``roc_auc_score``. Items scored -inf are not candidates
    (RecBole's convention for masked items). Returns float64 (batch,) tensors: AUC (0 where
    undefined), number of positive candidates, whether the user has both classes, and the value
    checks of ``rank`` (taken in the same pass).

    AUC(u) = (sum of the ascending ranks of the positives - P (P + 1) / 2) / (P Q); each row is
    sorted once (O(num_items log num_items)), a chunk of rows at a time (see
    ``_budget_row_chunks``); no host synchronisation."""
    num_rows, num_cols = y_pred.shape
    rank_sum = torch.empty(num_rows, dtype=torch.float64, device=y_pred.device)
    positives = torch.empty_like(rank_sum)
    candidates = torch.empty_like(rank_sum)
    has_nan = torch.empty(num_rows, dtype=torch.bool, device=y_pred.device)
    lowest = torch.zeros(num_rows, dtype=torch.float64, device=y.device)
    relevance = Relevance.of(relevance_threshold, y.dtype)
    for rows in _budget_row_chunks(num_rows, num_cols, 8 * num_cols, 64, y_pred.device):
        scores = y_pred[rows].contiguous()
        ascending, order = torch.sort(scores, dim=1)
        has_nan[rows] = ascending[:, -1].isnan()  # NaN sorts last
        if y.dtype != torch.bool:
            lowest[rows] = y[rows].amin(1).to(torch.float64)
        first = torch.searchsorted(ascending, ascending, right=False)
        after_last = torch.searchsorted(ascending, ascending, right=True)
        masked = (scores == float("-inf")).sum(1, dtype=torch.float64)
        # 1-based rank among candidates, averaged over the tie group
        average_rank = (first + after_last + 1).to(torch.float64) / 2 - masked.unsqueeze(1)
        is_positive = relevance.mask(y[rows].gather(1, order)) & (ascending > float("-inf"))
        rank_sum[rows] = torch.where(is_positive, average_rank, 0.0).sum(1)
        positives[rows] = is_positive.sum(1, dtype=torch.float64)
        candidates[rows] = num_cols - masked
    negatives = candidates - positives
    defined = (positives > 0) & (negatives > 0)
    auc = (rank_sum - positives * (positives + 1) / 2) / (positives * negatives).clamp(min=1)
    invalid = _invalid_flags(has_nan.any(), lowest.amin())
    return torch.where(defined, auc, torch.zeros_like(auc)), positives, defined, invalid
