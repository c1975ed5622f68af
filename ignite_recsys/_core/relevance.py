"""Labels: which are relevant, their gains, the ideal ranking's gains and the value checks.

Every comparison of a label with the relevance threshold, on every path, goes through
:class:`Relevance`; every gain through :func:`gains`."""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional, Union

import numpy as np
import torch

from .._validation import GainFunction, check_gain_output
from . import tuning
from .selection import ValueGroups, holds_nan, listed_top_values, top_values, value_groups
from .selection.host import listed_where


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
        return cls(torch.ge, _rounded(threshold, dtype))

    def mask(self, labels: torch.Tensor) -> torch.Tensor:
        """bool, True where the label is relevant."""
        return self.compare(labels, self.value)

    def indicator(self, labels: torch.Tensor) -> torch.Tensor:
        """float64 0/1, 1 where the label is relevant (see ``indicator``)."""
        return indicator(self.compare, labels, self.value)


@functools.lru_cache(maxsize=256)
def _rounded(threshold: float, dtype: torch.dtype) -> float:
    """``threshold`` rounded to the float ``dtype`` (once per pair: no tensor operation per update)."""
    return float(torch.tensor(threshold, dtype=dtype))


def indicator(compare, x: torch.Tensor, value) -> torch.Tensor:
    """``compare(x, value)`` as float64 0/1. Written straight into a float tensor: on CPU, bool
    results and selects over them cost several times a float operation."""
    return compare(x, value, out=torch.empty(x.shape, dtype=torch.float64, device=x.device))


class LabelPass(NamedTuple):
    """What one pass over the labels finds (``relevance_pass``)."""

    num_relevant: Optional[torch.Tensor]  # (batch,) float64 |R| (None: not counted)
    has_relevant: torch.Tensor  # (batch,) bool, |R| > 0
    has_nan: torch.Tensor  # 0-d bool: a label is NaN
    maxima: Optional[torch.Tensor]  # the maxima of the label groups (None: no groups)
    # the ideal selection's candidates (``ValueGroups.candidates``), or its result (``TopLabels``)
    candidates: Union[torch.Tensor, "TopLabels", None]


class TopLabels(NamedTuple):
    """The top labels of each row, (batch, depth) descending: the ideal ranking's labels."""

    values: torch.Tensor


def relevance_pass(
    labels: torch.Tensor,
    relevance: Relevance,
    count: bool = True,
    groups: Union[ValueGroups, int, None] = None,
    depth: Optional[int] = None,
    hints: Optional["RankingHints"] = None,
    select: Optional[bool] = None,
) -> LabelPass:
    """One pass over y. Returns (``LabelPass``): the per-user relevant count |R| (float64; None
    unless ``count``), whether each user has a relevant item (bool), whether y holds a NaN (0-dim
    bool; max-reductions propagate NaN), given ``groups`` (``ValueGroups``; an int: strided groups
    of that many labels) the maxima of those label groups (the first step of the ideal ranking's
    selection) and, given ``depth`` too, the candidates of that selection
    (``ValueGroups.candidates``; else None). ``select`` (CPU, float labels, counted with
    groups and ``depth``): |R| is counted among the groups of relevant maximum alone
    (``_relevant_groups``), and if ``select`` is True the ideal's labels are sorted there too
    (``TopLabels`` in place of the candidates), |R| then given even where not asked for;
    None: among the candidates. Labels that stay in cache skip the groups: every label is
    compared once on the host (``_host_relevant_labels``).

    Where no label needs a comparison, the pass is one max-reduction over the whole batch (the
    group maxima, or the row maxima): a user has a relevant item iff its largest label is
    relevant, and a NaN label makes its maximum NaN. On CPU, with the candidates taken, |R| is
    counted among them (``_count_in_candidates``), unless ``hints`` say that most users of the
    metric's previous such batch had more relevant labels than the candidates hold; then, and
    wherever |R| is asked for without candidates, every label is compared (``_counting_pass``).
    Which way a batch goes changes its speed, never its values."""
    num_rows, num_cols = labels.shape
    device = labels.device
    count_dtype = torch.float32 if num_cols < (1 << 24) else torch.float64  # float32 counts are exact below 2**24
    groups = ValueGroups(groups) if isinstance(groups, int) else groups
    if count and labels.dtype == torch.bool and not _true_is_relevant(relevance):
        return _no_relevant(labels, groups)
    if count and groups is None and labels.dtype != torch.bool and tuning.small_batch(labels):
        every = relevance.indicator(labels).sum(1)  # a small batch: every label at once, float64
        return LabelPass(every, every > 0, any_nan(labels), None, None)
    with_candidates = (
        count and groups is not None and depth is not None and labels.dtype != torch.bool and tuning.cpu_tuned(device)
    )
    many_relevant = hints.many_relevant if hints is not None else {}
    from_candidates = with_candidates and not many_relevant.get((num_cols, depth), False)
    # the ideal's labels sorted among the relevant ones (|R| comes with them, asked for or not)
    among_relevant = (select is not None and from_candidates) or (
        select is True and groups is not None and labels.dtype != torch.bool and tuning.cpu_tuned(device)
    )
    counts: Optional[torch.Tensor] = None
    highest: Optional[torch.Tensor] = None
    maxima: Optional[torch.Tensor] = None
    if among_relevant and depth and groups is not None and _host_compares_whole(labels, relevance):
        return _whole_label_pass(labels, relevance, depth, bool(select))  # labels that stay in cache
    if count and not from_candidates:
        with tuning.wide_pass(labels.numel()):
            counts, highest, maxima = _counting_pass(labels, relevance, groups, count_dtype)
    elif groups is not None:
        maxima = groups.maxima(labels)
    else:
        with tuning.wide_pass(labels.numel()):
            highest = torch.amax(labels, 1)
    candidates: Union[torch.Tensor, TopLabels, None] = None
    found = None
    if among_relevant and groups is not None and maxima is not None and depth:
        found = (
            _relevant_groups(labels, relevance, groups, maxima, depth, bool(select), from_candidates)
            if labels.is_floating_point()
            else None
        )
    if found is not None:  # counted in the groups of relevant maximum alone
        counts, top = found
        candidates = None if top is None else TopLabels(top)
    elif groups is not None and maxima is not None and depth:
        candidates = groups.candidates(labels, depth, maxima)
    if found is None and with_candidates and maxima is not None and candidates is not None:
        beyond = _users_beyond_candidates(maxima, depth, relevance)
        if from_candidates:
            counts = _count_in_candidates(labels, candidates, beyond, relevance, count_dtype)
        if hints is not None:
            hints.note_many_relevant((num_cols, depth), 2 * beyond.numel() > num_rows)
    if highest is None and groups is not None and maxima is not None and labels.dtype != torch.bool:
        tail = labels[:, maxima.shape[1] * groups.size :]
        highest = maxima.amax(1) if tail.shape[1] == 0 else torch.maximum(maxima.amax(1), tail.amax(1))
    has_nan = torch.zeros((), dtype=torch.bool, device=device) if highest is None else any_nan(highest)
    if counts is not None:  # counted (``count``)
        counts = counts.to(torch.float64)
        return LabelPass(counts, counts > 0, has_nan, maxima, candidates)
    if highest is None:  # bool labels are taken in groups only to be counted (``pass_groups``)
        raise ValueError("relevance_pass neither counts nor reads the largest label of each row")
    return LabelPass(None, relevance.mask(highest), has_nan, maxima, candidates)


def relevant_counts(labels: torch.Tensor, relevance: Relevance) -> torch.Tensor:
    """(batch,) float64 |R| of each row: ``relevance_pass``'s count alone."""
    counts = relevance_pass(labels, relevance).num_relevant
    if counts is None:  # relevance_pass counts unless told not to
        raise ValueError("relevance_pass counted no label")
    return counts


def pass_groups(labels: torch.Tensor, depth: int, select: bool, count: bool) -> Optional[ValueGroups]:
    """The label groups ``relevance_pass`` takes (or None): those of the ideal ranking's
    selection (``select``), and on CPU wherever |R| is counted over labels other than bool, to
    count it among the candidates they give: a handful of operations instead of a comparison
    of every label piece by piece. None for a small batch on CPU (``tuning.small_batch``): each
    label compared, the ideal's labels selected among all."""
    if tuning.small_batch(labels):
        return None
    counts_among_candidates = count and labels.dtype != torch.bool and tuning.cpu_tuned(labels.device)
    return value_groups(labels.shape[1], depth) if select or counts_among_candidates else None


def any_nan(values: torch.Tensor) -> torch.Tensor:
    """0-dim bool: ``values`` holds a NaN (False for integer and bool values)."""
    if not values.is_floating_point():
        return torch.zeros((), dtype=torch.bool, device=values.device)
    return values.amax().isnan() if values.numel() else torch.zeros((), dtype=torch.bool, device=values.device)


def _counting_pass(labels: torch.Tensor, relevance: Relevance, groups: Optional[ValueGroups], count_dtype):
    """|R| of each row (``count_dtype``), compared label by label, with the row maxima (None for
    bool labels, which hold no NaN) or, given ``groups``, the group maxima. Bool labels are
    counted as they are, the whole batch at once (``count_true``). Other labels a few pieces of
    rows at a time (``tuning.row_pieces``), each compared, summed and reduced while it is in
    cache; compared into a float32 buffer of one piece (a comparison into float vectorises on
    CPU, into bool it does not, and a sum over bool is slower still). On accelerators the pieces
    keep that buffer (and for bool labels the copy ``count_true`` pads) within
    ``_accelerator_count_rows``: a bounded share of the batch, not a copy of it."""
    num_rows, num_cols = labels.shape
    device = labels.device
    row_bytes = num_cols * (labels.element_size() + 4)
    budget = row_bytes * _accelerator_count_rows(num_rows, num_cols)  # (read on accelerators only)
    pieces = tuning.row_pieces(num_rows, row_bytes, device, budget_bytes=budget)
    if labels.dtype == torch.bool:  # whole on CPU; on accelerators in the pieces (a row padded to 8 is copied)
        whole = tuning.cpu_tuned(device) or len(pieces) < 2
        true = count_true(labels) if whole else torch.cat([count_true(labels[rows]) for rows in pieces])
        return true.to(count_dtype), None, None if groups is None else groups.maxima(labels)
    counts = torch.empty(num_rows, dtype=count_dtype, device=device)
    highest: Optional[torch.Tensor] = None
    grouped: Optional[torch.Tensor] = None
    maxima: Optional[torch.Tensor] = None
    if groups is None:
        highest = torch.empty(num_rows, dtype=labels.dtype, device=device)
    else:
        grouped, group_dim = groups.grouped(labels)
        shape = grouped.shape[:group_dim] + grouped.shape[group_dim + 1 :]
        maxima = torch.empty(shape, dtype=labels.dtype, device=device)
    buffer = torch.empty(
        pieces[0].stop - pieces[0].start if pieces else 0, num_cols, dtype=torch.float32, device=device
    )
    for rows in pieces:
        _count_relevant(labels[rows], relevance, buffer, count_dtype, out=counts[rows])
        if grouped is not None and maxima is not None:
            torch.amax(grouped[rows], group_dim, out=maxima[rows])
        elif highest is not None:
            torch.amax(labels[rows], 1, out=highest[rows])
    return counts, highest, maxima


# On accelerators, the float32 comparison buffer of the counting pass holds at most this many
# bytes (1,024 x 1M labels: pieces of 33 rows, 126 MiB, where the whole batch at once takes 3.8 GiB)
ACCELERATOR_COUNT_BYTES = 128 << 20
# ... and at most 1/this of the rows (1,024 x 100k: 4 pieces of 256 rows, 98 MiB);
# a batch of at most ``4 * tuning.ACCELERATOR_CHUNK`` labels is one piece
ACCELERATOR_COUNT_SHARE = 4


def _accelerator_count_rows(num_rows: int, num_cols: int) -> int:
    """Rows per piece of the counting pass on an accelerator: a float32 buffer of at most
    ``ACCELERATOR_COUNT_BYTES`` and at most 1/``ACCELERATOR_COUNT_SHARE`` of the batch's rows
    (every row for a small batch). Shapes only: no value is read, so no host synchronisation."""
    if num_rows * num_cols <= 4 * tuning.ACCELERATOR_CHUNK:
        return max(num_rows, 1)
    within_bytes = ACCELERATOR_COUNT_BYTES // (4 * max(num_cols, 1))
    return max(1, min(-(-num_rows // ACCELERATOR_COUNT_SHARE), within_bytes))


class RankingHints:
    """What one metric's earlier batches tell its next batch about the cheaper exact path; held
    by the metric (never shared between metrics), read by the label pass. Hints change the
    speed of an update, never its values.

    ``many_relevant``: per (num_items, depth), whether most users of the last such batch had
    relevant labels in more label groups than the ideal selection's candidates hold; the next
    batch then counts every label as the pass reads it instead of counting among the candidates
    and recounting those users."""

    def __init__(self) -> None:
        self.many_relevant: dict = {}

    def note_many_relevant(self, key: tuple, value: bool) -> None:
        if len(self.many_relevant) >= 64:  # a hint per catalog size and depth: keep it small
            self.many_relevant.clear()
        self.many_relevant[key] = value


def _relevant_groups(labels, relevance, groups: ValueGroups, maxima, depth: int, select: bool, counted: bool):
    """CPU (host reads): (|R| (batch,) int64, with ``select`` the top ``depth`` labels (batch,
    depth) descending, else None) from the labels of the groups whose maximum is relevant (a
    group holds a relevant label iff its maximum is relevant) and those after the last full
    group: a copy of those few labels instead of the ``depth`` best groups of every row. None
    where more relevant groups per row than ``relevant_groups_bound`` allows (``counted``: the
    pass counts |R|).
    The top labels are None too where more than ``depth`` labels per row are relevant on
    average (sorting them would cost more than selecting among the best groups), or where no
    label value is sure to be irrelevant to fill the positions past |R|."""
    if labels.dtype in _HOST_COMPARE and relevance.compare in _HOST_COMPARE[labels.dtype]:
        return _host_relevant_groups(labels, relevance, groups, maxima, depth, select, counted)
    num_rows, num_cols = labels.shape
    rows, columns = relevance.mask(maxima).nonzero(as_tuple=True)
    if rows.numel() > relevant_groups_bound(num_rows, num_cols, groups.size, depth, counted):
        return None
    device, size, num_groups = labels.device, groups.size, maxima.shape[1]
    # group j: items j * size + 0 .. size - 1 (contiguous), else j + num_groups * (0 .. size - 1)
    step, spread = (size, 1) if groups.contiguous else (1, num_groups)
    offsets = tuning.index_constant(0, size * spread, spread, 0, device)
    positions = torch.add(offsets, torch.add(columns * step, rows, alpha=num_cols).unsqueeze(1)).view(-1)
    position_rows = rows.repeat_interleave(size)
    tail_start = num_groups * size
    if tail_start < num_cols:  # the items after the last full group are always read
        row_ids = tuning.index_constant(0, num_rows, 1, -1, device)
        tail = torch.add(tuning.index_constant(tail_start, num_cols, 1, 0, device), row_ids, alpha=num_cols)
        positions = torch.cat([positions, tail.view(-1)])
        position_rows = torch.cat([position_rows, row_ids.expand(-1, num_cols - tail_start).reshape(-1)])
    values = labels.contiguous().view(-1).index_select(0, positions)
    listed = relevance.mask(values).nonzero().view(-1)  # the relevant ones, listed once
    relevant_rows = position_rows.index_select(0, listed)
    counts = torch.bincount(relevant_rows, minlength=num_rows)
    fill = _irrelevant_fill(relevance)
    if not select or fill is None or listed.numel() > num_rows * depth:
        return counts, None
    return counts, listed_top_values(values.index_select(0, listed), relevant_rows, counts, depth, fill)


def relevant_groups_bound(num_rows: int, num_cols: int, size: int, depth: int, counted: bool) -> float:
    """The most label groups of relevant maximum (all rows together) whose labels
    ``_relevant_groups`` copies: ``tuning.RELEVANT_GROUPS_SHARE`` x ``depth`` per row (beyond, the
    ``depth`` best groups hold the ideal's labels for less), and where |R| is ``counted`` (else
    a comparison of every label of the rows beyond), as many groups of ``size`` labels as hold
    ``tuning.RELEVANT_LABELS_SHARE`` of the labels."""
    per_row = tuning.RELEVANT_GROUPS_SHARE * depth
    if counted:
        per_row = max(per_row, tuning.RELEVANT_LABELS_SHARE * num_cols / size)
    return per_row * num_rows


# float32 and float64 labels on the host: numpy's comparisons of relevance, and their indices
_HOST_COMPARE = {dtype: {torch.ge: np.greater_equal, torch.gt: np.greater} for dtype in (torch.float32, torch.float64)}
# their negations but for NaN: below the threshold
_HOST_BELOW = {torch.ge: np.less, torch.gt: np.less_equal}


def _host_compares_whole(labels: torch.Tensor, relevance: Relevance) -> bool:
    """Whether the labels are compared whole on the host (``_host_relevant_labels``): float labels
    numpy compares, small enough to stay in the last-level cache (``tuning.IN_CACHE_SHARE``)."""
    if labels.dtype not in _HOST_COMPARE or relevance.compare not in _HOST_COMPARE[labels.dtype]:
        return False
    return tuning.stays_in_cache(labels)


def _whole_label_pass(labels: torch.Tensor, relevance: Relevance, depth: int, select: bool) -> LabelPass:
    """``relevance_pass`` from one comparison of every label (``_host_relevant_labels``)."""
    counts, top, has_nan = _host_relevant_labels(labels, relevance, depth, select)
    num_relevant = counts.to(torch.float64)
    return LabelPass(num_relevant, num_relevant > 0, has_nan, None, None if top is None else TopLabels(top))


def _host_relevant_labels(labels, relevance, depth: int, select: bool):
    """``_relevant_groups`` and whether a label is NaN (0-d bool), from one comparison of every
    label (numpy), for labels that stay in cache: no group maxima and no copy of groups. The
    labels listed are those not below the threshold: the relevant ones and the NaNs (which
    compare false either way)."""
    below = _HOST_BELOW[relevance.compare]
    num_rows, num_cols = labels.shape
    rows_of = labels.detach().contiguous().numpy()

    def not_below(rows: slice) -> np.ndarray:
        flags = below(rows_of[rows], relevance.value)
        return np.logical_not(flags, out=flags)  # in place: one mask of the block, not two

    listed = listed_where(not_below, num_rows, num_cols, labels.device)
    listed_values = rows_of.reshape(-1).take(listed)
    nan = np.isnan(listed_values)
    has_nan = bool(nan.any())
    if has_nan:
        listed, listed_values = listed[~nan], listed_values[~nan]
    counts, top = _counts_and_top(listed_values, listed // num_cols, num_rows, depth, select, relevance)
    return counts, top, torch.tensor(has_nan)


def _host_relevant_groups(labels, relevance, groups: ValueGroups, maxima, depth: int, select: bool, counted: bool):
    """``_relevant_groups`` of float32 or float64 labels through numpy (the same steps, a few
    microseconds each where a torch operation takes tens)."""
    compare = _HOST_COMPARE[labels.dtype][relevance.compare]
    num_rows, num_cols = labels.shape
    size, num_groups = groups.size, maxima.shape[1]
    flat_groups = np.flatnonzero(compare(maxima.detach().numpy(), relevance.value))
    if flat_groups.size > relevant_groups_bound(num_rows, num_cols, groups.size, depth, counted):
        return None
    rows, columns = np.divmod(flat_groups, num_groups)
    # group j: items j * size + 0 .. size - 1 (contiguous), else j + num_groups * (0 .. size - 1)
    step, spread = (size, 1) if groups.contiguous else (1, num_groups)
    offsets = np.arange(0, size * spread, spread, dtype=np.int64)
    positions = (offsets + (columns * step + rows * num_cols)[:, None]).reshape(-1)
    position_rows = np.repeat(rows, size)
    tail_start = num_groups * size
    if tail_start < num_cols:  # the items after the last full group are always read
        tail = np.arange(tail_start, num_cols, dtype=np.int64) + num_cols * np.arange(num_rows)[:, None]
        positions = np.concatenate([positions, tail.reshape(-1)])
        position_rows = np.concatenate([position_rows, np.repeat(np.arange(num_rows), num_cols - tail_start)])
    values = labels.detach().contiguous().numpy().reshape(-1).take(positions)
    listed = np.flatnonzero(compare(values, relevance.value))  # the relevant ones, listed once
    return _counts_and_top(values.take(listed), position_rows.take(listed), num_rows, depth, select, relevance)


def _counts_and_top(relevant: np.ndarray, relevant_rows: np.ndarray, num_rows: int, depth: int, select, relevance):
    """(|R| (num_rows,) int64, the top ``depth`` labels (num_rows, depth) descending or None) from
    the relevant labels (1-D, each listed once) and their rows: None unless ``select``, where
    more than ``depth`` labels per row are relevant on average, or where no label value is sure
    to be irrelevant (``_irrelevant_fill``)."""
    counts = np.bincount(relevant_rows, minlength=num_rows)
    fill = _irrelevant_fill(relevance)
    if not select or fill is None or relevant.size > num_rows * depth:
        return torch.from_numpy(counts), None
    by_row = np.lexsort((-relevant, relevant_rows))  # by row, then by label descending
    sorted_rows = relevant_rows.take(by_row)
    rank = np.arange(relevant.size) - (np.cumsum(counts) - counts).take(sorted_rows)
    kept = rank < depth
    top = np.full((num_rows, depth), fill, dtype=relevant.dtype)
    top[sorted_rows[kept], rank[kept]] = relevant.take(by_row)[kept]
    return torch.from_numpy(counts), torch.from_numpy(top)


@functools.lru_cache(maxsize=None)
def _irrelevant_fill(relevance: Relevance) -> Optional[float]:
    """A label value that is never relevant under ``relevance`` (the positions of the ideal
    ranking past |R|), or None: the threshold itself under ``y > t``, else ``-inf``."""
    fill = float(relevance.value) if relevance.compare is torch.gt else float("-inf")
    return None if bool(relevance.compare(torch.tensor(fill), relevance.value)) else fill


def _users_beyond_candidates(maxima, depth, relevance) -> torch.Tensor:
    """The users (1-D int64) with more than ``depth`` label groups of relevant maximum: those
    whose relevant labels the ideal selection's candidates may not all hold (a group holds a
    relevant label iff its maximum is relevant, and relevant maxima exceed every other). Read
    on the host: CPU only, where that waits for nothing."""
    relevant_groups = relevance.compare(maxima, relevance.value, out=torch.empty(maxima.shape, device=maxima.device))
    return (relevant_groups.sum(1) > depth).nonzero().flatten()


def _count_in_candidates(labels, candidates, beyond, relevance, count_dtype):
    """|R| of each user counted among the ideal selection's candidates, and over the whole row
    (a few rows at a time) for the users ``beyond`` them (``_users_beyond_candidates``)."""
    device = labels.device
    counts = _count_relevant(candidates, relevance, torch.empty(candidates.shape, device=device), count_dtype)
    if beyond.numel():
        num_cols = labels.shape[1]
        pieces = tuning.row_pieces(beyond.numel(), num_cols * (labels.element_size() + 4), device)
        buffer = torch.empty(pieces[0].stop - pieces[0].start, num_cols, device=device)
        for piece in pieces:
            rows = beyond[piece]
            counts.index_copy_(0, rows, _count_relevant(labels.index_select(0, rows), relevance, buffer, count_dtype))
    return counts


def _count_relevant(labels, relevance, buffer, count_dtype, out=None) -> torch.Tensor:
    """(rows,) the relevant labels of each row, compared into the float32 ``buffer`` (at least as
    many rows; a comparison into float vectorises on CPU, into bool it does not) and summed."""
    flags = buffer if labels.shape[0] == buffer.shape[0] else buffer[: labels.shape[0]]
    return torch.sum(relevance.compare(labels, relevance.value, out=flags), 1, dtype=count_dtype, out=out)


def count_true(mask: torch.Tensor) -> torch.Tensor:
    """(batch,) int64: the True entries of each row of a (batch, n) bool mask. Reductions over
    bool (or uint8 into int64) run far slower on CPU than a float sum, so the mask is read
    as int64 words of eight bytes: summing up to 255 words keeps each byte lane below 256
    (no carry), and the lanes of those few sums are added up as bytes. Rows whose width is no
    multiple of 8 are first padded with False (one copy of the mask's bytes)."""
    rows, width = mask.shape
    if rows == 0 or width == 0:
        return torch.zeros(rows, dtype=torch.int64, device=mask.device)
    mask = mask.contiguous().view(torch.uint8)
    if width % 8:
        mask = torch.nn.functional.pad(mask, (0, 8 - width % 8))
    words = mask.view(torch.int64)
    whole = words.shape[1] // _WORDS_PER_LANE_SUM * _WORDS_PER_LANE_SUM
    lanes = words[:, :whole].unflatten(1, (-1, _WORDS_PER_LANE_SUM)).sum(2)
    if whole < words.shape[1]:
        lanes = torch.cat([lanes, words[:, whole:].sum(1, keepdim=True)], 1)
    return lanes.view(torch.uint8).sum(1, dtype=torch.int64)


_WORDS_PER_LANE_SUM = 255  # a byte lane of a sum of 255 words of 0/1 bytes holds at most 255


def count_nonnegative(values: torch.Tensor) -> torch.Tensor:
    """(batch,) int64: the entries of each row at least 0 (NaN is not). On CPU float32 and float64
    rows are compared by numpy a piece of rows at a time (its comparison into bool vectorises,
    torch's does not); elsewhere ``count_true`` of the comparison."""
    if not (tuning.cpu_tuned(values.device) and values.dtype in (torch.float32, torch.float64)):
        return count_true(values >= 0)
    rows_of = values.detach().numpy()
    counts = np.empty(values.shape[0], dtype=np.int64)
    for rows in tuning.row_pieces(values.shape[0], values.shape[1] * (values.element_size() + 1), values.device):
        counts[rows] = np.count_nonzero(rows_of[rows] >= 0, axis=1)
    return torch.from_numpy(counts)


@functools.lru_cache(maxsize=None)
def _true_is_relevant(relevance: Relevance) -> bool:
    """Whether a True label (1) is relevant under ``relevance`` (no tensor operation per update)."""
    return bool(relevance.compare(torch.ones((), dtype=torch.int64), relevance.value))


def _no_relevant(labels: torch.Tensor, groups: Optional[ValueGroups]) -> LabelPass:
    """``relevance_pass`` of bool labels of which none is relevant (a threshold above 1)."""
    num_rows, num_cols = labels.shape
    counts = torch.zeros(num_rows, dtype=torch.float64, device=labels.device)
    maxima = None
    if groups is not None:
        maxima = groups.maxima(labels)
    return LabelPass(counts, counts > 0, torch.zeros((), dtype=torch.bool, device=labels.device), maxima, None)


_EXP2_UNDERFLOW = -1100.0  # 2**-1100 rounds to 0 in float64 (its least subnormal is 2**-1074)


def gains(
    values: torch.Tensor, relevant: torch.Tensor, gain_function: GainFunction, threshold: Optional[float]
) -> torch.Tensor:
    """Gain of each relevance value (float64); 0 where the item is not relevant. ``relevant`` is
    the float 0/1 indicator. The built-in gains are 0 at a masked value of 0, so they mask by a
    product, not a select, of finite numbers: ``-inf`` labels (never relevant) are first raised
    to the lowest finite value of their dtype (float64 here), whose product with 0 is 0;
    ``"exp_rank_shifted"`` bounds its exponent ``y - t + 1`` (t = ``threshold``, the metric's
    ``relevance_threshold``) instead, since the shift itself can overflow to ``-inf``."""
    if gain_function == "binary":
        return relevant.clone()
    if gain_function == "exp_rank_shifted":
        if threshold is None:  # refused where the metric is configured
            raise ValueError("gain_function='exp_rank_shifted' shifts by relevance_threshold, which must be a number")
        # 2**e is 0 in float64 for every e below -1075: raising e there changes no gain
        exponent = (values - threshold).add_(1).clamp_(min=_EXP2_UNDERFLOW)
        return torch.exp2(exponent.mul_(relevant)).sub_(1)
    if not callable(gain_function):
        values = values.clamp(min=torch.finfo(values.dtype).min)
    if gain_function == "exp_rank":  # in place where the operands allow: fewer fresh buffers
        return torch.exp2(values * relevant).sub_(1)
    if gain_function == "linear_rank":
        return values * relevant
    if isinstance(gain_function, str):  # the names are mapped to the four above where options are checked
        raise ValueError(f"unknown gain_function {gain_function!r}")
    raw = check_gain_output(gain_function(values), values)
    return torch.where(relevant > 0, raw, torch.zeros((), dtype=torch.float64, device=values.device))


def gain_flags(gain_function: GainFunction, *gain_tensors: Optional[torch.Tensor]) -> dict:
    """Value checks of the gains used, ``gain_tensors`` = (gains at the ranked positions, ideal
    gains), either None: each must be finite (``2 ** y`` overflows float64 for y >= 1024, an
    infinite label has an infinite gain) and, for a custom gain, non-negative."""
    used = [g for g in gain_tensors if g is not None]
    if not callable(gain_function) and gain_tensors[-1] is not None:
        # a built-in gain grows with the label, and the ideal gains hold each user's largest
        used = [gain_tensors[-1]]
    name = getattr(gain_function, "__name__", "custom") if callable(gain_function) else repr(gain_function)
    finite = (
        torch.isfinite(used[0]).all() if len(used) == 1 else torch.stack([torch.isfinite(g).all() for g in used]).all()
    )
    why = {
        "exp_rank": "2**y overflows float64 for y >= 1024, and an infinite label has an infinite gain",
        "exp_rank_shifted": "2**(y - threshold + 1) overflows float64 for y >= threshold + 1023, and an infinite "
        "label has an infinite gain",
        "linear_rank": "an infinite label has an infinite gain",
    }.get(gain_function if isinstance(gain_function, str) else "", "the function returned a value that is not finite")
    flags = {
        f"y gives an infinite or NaN gain under the gain {name} ({why}); rescale the labels, or pass another "
        "gain_function where the metric takes one": ~finite
    }
    if callable(gain_function):
        flags[f"gain_function={name} returned a negative gain for a relevant label; gains must be >= 0"] = torch.stack(
            [(g < 0).any() for g in used]
        ).any()
    return flags


def ideal_is_binary(labels: torch.Tensor, gain_function) -> bool:
    """Whether every relevant item gains alike, so that the ideal gains follow from |R| alone."""
    return gain_function == "binary" or labels.dtype == torch.bool


def ideal_needs_selection(labels: torch.Tensor, gain_function) -> bool:
    """Whether the ideal gains are those of the top labels (graded built-in gains): not for
    binary ones (|R| alone) nor for a callable gain (its largest gains, ``custom_ideal_gains``)."""
    return not (ideal_is_binary(labels, gain_function) or callable(gain_function))


def selected_ideal_gains(
    labels: torch.Tensor,
    depth: int,
    relevance: Relevance,
    gain_function: GainFunction,
    label_maxima: Optional[torch.Tensor],
    threshold: Optional[float],
    candidates: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Gains of the best possible ranking, (batch, depth), from the top ``depth`` labels, when
    ``ideal_needs_selection`` (``candidates``: ``ValueGroups.candidates`` of the labels, if
    already taken)."""
    if label_maxima is None and candidates is None and tuning.small_batch(labels):
        best = labels.topk(depth, 1).values.to(torch.float64)  # a small batch: among all labels
    else:
        best = top_values(labels, depth, label_maxima, candidates).to(torch.float64)
    return gains(best, relevance.indicator(best), gain_function, threshold)


_GAIN_BLOCK = 1 << 22  # labels whose custom gains are taken at once (32 MiB of float64)


def custom_ideal_gains(
    labels: Optional[torch.Tensor], table: Any, depth: int, relevance: Relevance, gain_function, threshold
) -> torch.Tensor:
    """Gains of the best possible ranking, (batch, depth), under a callable gain: the ``depth``
    largest gains of each user's relevant items (of the dense ``labels``, a block of users at a
    time, else of the target ``table``'s stored values), whatever order of the labels they
    follow."""
    if labels is None:
        values = table.values
        mine = gains(values.to(torch.float64), relevance.indicator(values), gain_function, threshold)
        return dataclasses.replace(table, values=mine).top_values(depth)
    rows = max(1, _GAIN_BLOCK // max(labels.shape[1], 1))
    width = min(depth, labels.shape[1])
    blocks = []
    for start in range(0, labels.shape[0], rows):
        block = labels[start : start + rows]
        mine = gains(block.to(torch.float64), relevance.indicator(block), gain_function, threshold)
        blocks.append(mine.topk(width, 1).values)
    best = torch.cat(blocks)
    return best if width == depth else torch.nn.functional.pad(best, (0, depth - width))


def binary_ideal_gains(num_relevant: torch.Tensor, depth: int, gain_function, threshold) -> torch.Tensor:
    """Ideal gains (batch, depth) when every relevant item gains alike: the first |R| positions."""
    positions = torch.arange(depth, device=num_relevant.device, dtype=torch.float64)
    relevant = (positions < num_relevant.unsqueeze(1)).to(torch.float64)
    return gains(relevant, relevant, gain_function, threshold)


def invalid_flags(any_nan_score: torch.Tensor, any_nan_label: torch.Tensor) -> dict:
    """The value checks of a ranking: NaN scores and NaN labels (0-dim bools). Negative labels,
    ``-inf`` included, are legal and not relevant."""
    return {
        "y_pred contains NaN scores (+inf and -inf are allowed)": any_nan_score,
        "y contains NaN relevance values (negative labels, -inf included, are allowed: not relevant)": any_nan_label,
    }


def full_row_checks(y_pred: torch.Tensor, y: torch.Tensor) -> dict:
    """The value checks of ``rank``, for metrics that read the full rows themselves."""
    with tuning.wide_pass(y.numel()):
        label_nan = any_nan(y.amax(1)) if y.is_floating_point() else any_nan(y)
    return invalid_flags(holds_nan(y_pred).any(), label_nan)  # a max per row: no (B, N) bool temporary
