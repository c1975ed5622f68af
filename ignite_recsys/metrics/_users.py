"""Means over users, with what a paper reports next to them: per-user values, confidence
intervals and results per user group.

A :class:`UserMean` turns each batch into per-user values (:class:`UserRows`: a (batch,
num_values) float64 tensor and whether each user counts) and keeps, per value, the sum over the
counted users, their sum of deviations from a shift and of their squares (for
:meth:`UserMean.confidence_interval`) and their count, summed across processes. The shift is the
mean of the first counted users, kept in the state: the squares of values far from 0 (popularity
counts near 1e8) then keep the precision of their spread, which sum(x²) - n mean² cancels away,
and the deviations' own sum brings them to the mean without a difference of totals.
``per_user=True`` also keeps each batch's values on the metric's device (the one state that
grows with the users; off by default, not part of ``state_dict()``), and ``num_groups=G`` the
same sums per user group.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import ignite.distributed as idist
import torch
from ignite.exceptions import NotComputableError

from .. import _validation as V
from .._tdist import t_intervals
from ..inputs import UserGroups, UserIds
from ._state import _PER_RANK, BatchTotals, StatefulMetric


@dataclass
class UserRows:
    """One batch's per-user values: ``values`` (batch, num_values) float64, ``weight`` (batch,)
    float64 (1: the user counts, 0: it does not), the value checks ``invalid``, further batch
    totals ``extra`` (state name -> total) and the users' ``groups`` / ``users`` ids, if given."""

    values: torch.Tensor
    weight: torch.Tensor
    invalid: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    groups: Optional[torch.Tensor] = None
    users: Optional[torch.Tensor] = None


def saved_entry(state_dict: Any) -> Optional[Mapping]:
    """This process's entry of a state dict saved per process (None for another form)."""
    per_rank = state_dict.get(_PER_RANK) if isinstance(state_dict, Mapping) else None
    saved = per_rank[idist.get_rank()] if isinstance(per_rank, Sequence) and len(per_rank) > idist.get_rank() else None
    return saved if isinstance(saved, Mapping) else None


def check_group_ids(groups: torch.Tensor, num_groups: int) -> dict:
    """Value check of an update's group ids (run on the device): within [0, num_groups)."""
    outside = (groups < 0) | (groups >= num_groups)
    return {f"UserGroups ids must lie in [0, {num_groups}) (num_groups={num_groups})": outside.any()}


class UserMean(StatefulMetric):
    """The mean over counted users of per-user values (``_user_rows``): states ``_sum``
    (num_values,) and ``_count``, with

    - states ``_sum_squares`` and ``_sum_deviations`` (num_values,): the counted users' sums of
      squared deviations and of deviations from ``_shift`` (num_values,), the mean of the first
      batch with counted users (0 before one),
      read by :meth:`confidence_interval` (:func:`centered_moments`);
    - ``per_user=True``: each batch's values kept on the metric's device, returned by
      :meth:`per_user` (in user-id order when the updates carry :class:`~ignite_recsys.UserIds`);
    - ``num_groups=G``: states ``_group_sum`` (G, num_values), ``_group_count`` (G,) and
      ``_group_sum_squares`` and ``_group_sum_deviations`` (G, num_values), accumulated by one
      ``index_add`` each, the deviations about ``_group_shift`` (G, num_values), each group's own
      shift (the mean of its first counted users), read by :meth:`compute_groups` and
      :meth:`confidence_interval_groups`.
    """

    _parameter_constraints = {"per_user": V.BOOLEAN, "num_groups": V.positive_int(optional=True)}
    _sum_squares: torch.Tensor
    _shift: torch.Tensor
    _sum_deviations: torch.Tensor
    _group_sum: torch.Tensor
    _group_count: torch.Tensor
    _group_sum_squares: torch.Tensor
    _group_shift: torch.Tensor
    _group_sum_deviations: torch.Tensor
    _per_user_rows: list
    _per_user_ids: list

    def __init__(self, output_transform: Callable, device: Any, skip_unrolling: bool, *, per_user: bool, num_groups):
        """Called by a subclass's constructor with its checked arguments (ignite's three, then
        ``per_user`` and ``num_groups``)."""
        self.keeps_per_user = per_user
        self.num_groups = num_groups
        self._add_mean_states()
        self.add_state("_sum_squares", lambda: (self._num_values(),))
        self.add_state("_shift", lambda: (self._num_values(),), optional=True)  # saved without: 0
        # sum (x - _shift), summed from the small deviations (saved without: _sum - _count * _shift)
        self.add_state("_sum_deviations", lambda: (self._num_values(),), optional=True)
        if num_groups is not None:
            self.add_state("_group_sum", lambda: (num_groups, self._num_values()))
            self.add_state("_group_count", (num_groups,))
            self.add_state("_group_sum_squares", lambda: (num_groups, self._num_values()))
            # saved without it (squares about _shift): _shift, on load
            self.add_state("_group_shift", lambda: (num_groups, self._num_values()), optional=True)
            self.add_state("_group_sum_deviations", lambda: (num_groups, self._num_values()), optional=True)
        super().__init__(output_transform, device, skip_unrolling)

    def load_state_dict(self, state_dict: Any) -> None:
        saved = saved_entry(state_dict)
        super().load_state_dict(state_dict)
        if saved is not None and not {"_sum_deviations", "_shift"} <= set(saved):  # about the shift loaded
            self._sum_deviations.copy_(self._sum - self._count * self._shift)
        if self.num_groups is not None and saved is not None:
            if "_group_shift" not in saved:
                self._group_shift.copy_(self._shift.expand_as(self._group_shift))  # the squares' centre then
            if not {"_group_sum_deviations", "_group_shift"} <= set(saved):
                self._group_sum_deviations.copy_(self._group_sum - self._group_count.unsqueeze(1) * self._group_shift)
        self._rows_lost = True  # the loaded users' rows are not in the state: per_user() raises until reset

    def reset(self) -> None:
        super().reset()
        self._per_user_rows: list = []
        self._per_user_ids: list = []
        self._rows_lost = False

    def compute(self) -> Any:
        return self._mean()

    # What subclasses define --------------------------------------------------------------------
    def _user_rows(self, inputs: Any) -> UserRows:
        raise NotImplementedError

    def _tagged_output_keys(self) -> dict:
        """The keys of a dict output read as user tags: "groups" with num_groups, "users" with
        per_user=True (a metric built without them ignores these keys of a shared output)."""
        keys: dict = {}
        if self.num_groups is not None:
            keys["groups"] = UserGroups
        if self.keeps_per_user:
            keys["users"] = UserIds
        return keys

    # Accumulation ------------------------------------------------------------------------------
    def _batch_totals(self, inputs: Any) -> BatchTotals:
        return self._totals_of_rows(self._user_rows(inputs))

    def _totals_of_rows(self, rows: UserRows) -> BatchTotals:
        self._check_user_tags(rows.groups, rows.users)
        values, weight = rows.values, rows.weight
        weights = weight.unsqueeze(1)
        # Reduce each value over users as its own contiguous row: the summation order then does not
        # depend on how many values are combined (RankingMetrics equals the single classes bit for bit).
        weighted = values * weights
        count = weight.sum()
        sums = weighted.t().contiguous().sum(1)
        shift, deviation = shifted(values, sums, count, self._count, self._shift)
        squares, deviations = (rows.t().contiguous().sum(1) for rows in deviation_rows(deviation, weights))
        totals = {"_sum": sums, "_count": count, "_sum_squares": squares, "_shift": shift, **rows.extra}
        totals["_sum_deviations"] = deviations
        invalid = rows.invalid
        if self.num_groups is not None and rows.groups is not None:  # (_check_user_tags: groups given)
            invalid = {**invalid, **check_group_ids(rows.groups, self.num_groups)}
            groups = rows.groups.clamp(0, self.num_groups - 1)
            totals.update(_group_totals(groups, values, weight, self._group_count, self._group_shift))
        kept = torch.where(weights > 0, values, torch.nan) if self.keeps_per_user else None
        return BatchTotals(totals, invalid, kept, rows.users)

    def _add_in_pieces(self, rows: UserRows, sizes: list) -> None:
        """Add ``rows`` (checked values, no user tags, CPU state) to the state exactly as
        consecutive updates of ``sizes`` users each would, to the last bit, in a few operations:
        each piece's sums reduced as its own update reduces them (contiguous rows of its length),
        then added to the state one after the other (a cumulative sum, sequential on CPU). While
        the state counts no user, the pieces go one by one (the first counted one sets the shift)."""
        values, weight = rows.values, rows.weight
        starts = _piece_starts(sizes)
        first = 0
        while first < len(sizes) and not float(self._count) > 0:  # a host read of CPU state
            piece = slice(starts[first], starts[first + 1])
            totals = self._totals_of_rows(UserRows(values[piece], weight[piece]))
            self._add(totals.sums, None)
            first += 1
        if first < len(sizes):
            rest = slice(starts[first], None)
            self._add_counted_pieces(values[rest], weight[rest], sizes[first:])
        if rows.extra:  # counts of users (sums of 0/1): exact in any order
            self._add(rows.extra, None)
        if self.keeps_per_user:
            self._keep(BatchTotals({}, {}, torch.where(weight.unsqueeze(1) > 0, values, torch.nan)), None)

    def _add_counted_pieces(self, values: torch.Tensor, weight: torch.Tensor, sizes: list) -> None:
        """``_add_in_pieces`` once the state counts a user: the shift then stays the state's."""
        weights = weight.unsqueeze(1)
        deviation = values - self._shift
        sums = _piece_sums(values * weights, sizes)
        squares, deviations = (_piece_sums(rows, sizes) for rows in deviation_rows(deviation, weights))
        self._sum.copy_(torch.cat([self._sum.unsqueeze(0), sums]).cumsum(0)[-1])
        self._sum_squares.copy_(torch.cat([self._sum_squares.unsqueeze(0), squares]).cumsum(0)[-1])
        self._sum_deviations.copy_(torch.cat([self._sum_deviations.unsqueeze(0), deviations]).cumsum(0)[-1])
        self._count.add_(weight.sum())  # a count: exact in any order
        self._shift.add_(0.0)  # what each update adds to it (center - shift = +0.0)

    def _check_user_tags(self, groups, users) -> None:
        name = type(self).__name__
        if groups is not None and self.num_groups is None:
            raise ValueError(
                f"{name} got UserGroups but was built without num_groups: pass num_groups=<number of groups> "
                "to its constructor to report each group"
            )
        if groups is None and self.num_groups is not None:
            raise ValueError(
                f"{name} was built with num_groups={self.num_groups}: every update needs the users' groups, "
                "update((y_pred, y, UserGroups(ids))) or the key 'groups' of a dict output"
            )
        if users is not None and not self.keeps_per_user:
            raise ValueError(f"{name} got UserIds, which order the per-user values: build it with per_user=True")
        if self._per_user_rows and (users is not None) != bool(self._per_user_ids):
            raise ValueError(
                f"{name}: UserIds must come with every update since the last reset or with none "
                f"({'some' if self._per_user_ids else 'no'} earlier update had them)"
            )

    def _keep(self, totals: BatchTotals, bad: Optional[torch.Tensor]) -> None:
        # CPU inputs never get here with bad values (update raised); a bad batch on another device
        # keeps NaN rows, and per_user() raises as compute() does.
        if totals.rows is None:
            return
        rows = totals.rows if bad is None else torch.where(bad, torch.nan, totals.rows)
        self._per_user_rows.append(rows.to(self._device))
        if totals.users is not None:
            self._per_user_ids.append(totals.users.to(self._device))

    # Per-user values ---------------------------------------------------------------------------
    def _per_user_table(self) -> tuple:
        """(rows (users, num_values), ids (users,) or None) of every process, in the documented order."""
        name = type(self).__name__
        if not self.keeps_per_user:
            raise RuntimeError(f"{name}.per_user() needs the metric to be built with per_user=True")
        self._checked()
        if self._per_user_rows:
            rows = torch.cat(self._per_user_rows)
        else:
            rows = torch.zeros(0, self._num_values(), dtype=torch.float64, device=self._device)
        kept = int((~rows[:, 0].isnan()).sum())
        if self._rows_lost or kept != int(self._count):
            raise RuntimeError(
                f"{name}.per_user(): the per-user values do not match the state ({int(self._count)} counted "
                f"users, {kept} kept{', a state loaded since the last reset' if self._rows_lost else ''}); they "
                "are not part of state_dict(), so a loaded state has none: update again from a reset"
            )
        # 0: no rows here, 1: rows with user ids, 2: rows without; every process must agree
        local = 0 if not self._per_user_rows else 1 if self._per_user_ids else 2
        kinds = set(gathered_rows(torch.tensor([[local]], dtype=torch.int64, device=rows.device))[:, 0].tolist())
        if kinds >= {1, 2}:
            raise ValueError(f"{name}.per_user(): some processes gave UserIds with their updates and others did not")
        rows = gathered_rows(rows)
        if 1 not in kinds:
            return rows, None
        ids = (
            torch.cat(self._per_user_ids)
            if self._per_user_ids
            else torch.zeros(0, dtype=torch.int64, device=rows.device)
        )
        ids, order = torch.sort(gathered_rows(ids.unsqueeze(1))[:, 0], stable=True)
        repeated = ids[1:][ids[1:] == ids[:-1]].unique()
        if repeated.numel():
            raise ValueError(
                f"{name}.per_user(): user ids must be distinct, got {repeated.numel()} id(s) more than once "
                f"(e.g. {repeated[:5].tolist()}); give each user one row in the evaluation"
            )
        return rows[order], ids

    def per_user(self) -> Any:
        """The value of every user seen since the last reset, float64 on the metric's device (needs
        ``per_user=True``): a (users, len(top_k)) tensor for a metric with cut-offs (columns in
        ascending k), a (users,) tensor for a metric of one value (:class:`RPrecision`), a dict
        ``{"ndcg@10": (users,) tensor, ...}`` for :class:`RankingMetrics`. A user the metric does
        not count (no relevant item under ``ignore_zero_hits=True``; for the popularity metrics,
        an empty top-k list) has a row of NaN. A user with relevant items but no candidate is
        counted, with 0.

        Order: with :class:`~ignite_recsys.UserIds` in every update, ascending user id, across
        processes too (:meth:`per_user_ids` gives the ids; a user id seen twice raises a
        ValueError). Without them, update order; across processes the rows are gathered in rank
        order: rank 0's users first, then rank 1's, each in update order."""
        rows, _ = self._per_user_table()
        result = self._result(list(rows.unbind(1)))
        return torch.stack(result, 1) if isinstance(result, list) else result

    def per_user_ids(self) -> torch.Tensor:
        """The user ids (int64, ascending) of the rows of :meth:`per_user`, when every update came
        with :class:`~ignite_recsys.UserIds`."""
        _, ids = self._per_user_table()
        if ids is None:
            raise RuntimeError(
                f"{type(self).__name__}.per_user_ids() needs user ids with the updates: "
                "update((y_pred, y, UserIds(ids))) or the key 'users' of a dict output"
            )
        return ids

    # Intervals ---------------------------------------------------------------------------------
    def confidence_interval(self, level: float = 0.95) -> Any:
        r"""Student-t confidence interval of the mean over counted users, per value, from the
        streamed sums (no per-user values needed):

        .. math:: \bar x \pm t_{(1+\text{level})/2,\; n-1}\, \frac{s}{\sqrt n},\qquad
                  s^2 = \frac{\sum (x - \bar x)^2}{n - 1}

        with n the counted users (of all processes), as ``scipy.stats.t.interval(level, n - 1,
        mean, sem)``. Returns what ``compute()`` returns with a ``(low, high)`` tuple per value: a
        list per k, a single tuple for :class:`RPrecision`, a dict for :class:`RankingMetrics`.
        Raises NotComputableError with fewer than two counted users (no variance estimate). The
        squares are streamed about a shift (the first counted users' mean), so values far from 0
        with a small spread keep the precision of the spread."""
        level = V.check_level(level)
        self._checked()
        if bool(torch.isnan(self._sum_squares).any()):
            raise NotComputableError(
                f"{type(self).__name__}.confidence_interval(): the state has no sums of squares (it was loaded "
                "from a state dict without them); update from a reset"
            )
        total, count, deviations = centered_moments(
            self._sum, self._count, self._sum_squares, self._shift, self._sum_deviations
        )
        name = type(self).__name__
        if count < 2:
            raise NotComputableError(
                f"{name}.confidence_interval() needs at least two {self._counted}s, got {int(count)}"
            )
        low, high = t_intervals(total, deviations, count, level)
        return self._result(list(zip(low.tolist(), high.tolist())))

    # User groups -------------------------------------------------------------------------------
    def _group_state(self, method: str) -> tuple:
        """(sums (G, V), counts (G,), sums of squared deviations from each group's mean (G, V)),
        over all processes."""
        if self.num_groups is None:
            raise RuntimeError(f"{type(self).__name__}.{method}() needs the metric to be built with num_groups")
        self._checked()
        total, count, deviations = centered_moments(
            self._group_sum,
            self._group_count.unsqueeze(1),
            self._group_sum_squares,
            self._group_shift,
            self._group_sum_deviations,
        )
        return total, count.squeeze(1), deviations

    def compute_groups(self) -> list:
        """Each group's result (needs ``num_groups``): a list indexed by group id, each entry what
        ``compute()`` returns, computed over the group's counted users (of all processes). A group
        without a counted user gets NaN values (the other groups stay reportable)."""
        total, count, _ = self._group_state("compute_groups")
        means = total / count.unsqueeze(1)  # 0 / 0 = NaN for a group without a counted user
        return [self._result(row.tolist()) for row in means]

    def group_counts(self) -> list:
        """The number of counted users of each group (of all processes), a list of ints."""
        _, count, _ = self._group_state("group_counts")
        return [int(n) for n in count.tolist()]

    def confidence_interval_groups(self, level: float = 0.95) -> list:
        """:meth:`confidence_interval` of each group (needs ``num_groups``): a list indexed by
        group id; a group with fewer than two counted users gets ``(nan, nan)`` intervals."""
        level = V.check_level(level)
        total, count, squares = self._group_state("confidence_interval_groups")
        low, high = t_intervals(total, squares, count.unsqueeze(1), level)
        return [self._result(list(zip(lo.tolist(), hi.tolist()))) for lo, hi in zip(low, high)]  # type: ignore[arg-type]

    def _group_scalar_items(self, name: str) -> list:
        """(key, value) of every group's scalars for an Engine: ``"<scalar key>/group<g>"``."""
        items = []
        for group, result in enumerate(self.compute_groups()):
            for key, value in self._scalar_items(name, result):
                items.append((f"{key}/group{group}", value))
        return items


def _group_totals(index: torch.Tensor, values: torch.Tensor, weight: torch.Tensor, state_count, state_shift) -> dict:
    """Per-group sums, counts and sums of squared deviations of one batch (an ``index_add``
    each), the deviations from each group's own shift (``shifted``, per group: the state's, or
    while the state counts none of the group's users this batch's mean of them), so that a group
    far from the others keeps the precision of its spread."""
    num_groups = state_shift.shape[0]
    weights = weight.unsqueeze(1)
    zeros = torch.zeros(num_groups, values.shape[1], dtype=torch.float64, device=values.device)
    sums = zeros.index_add(0, index, values * weights)
    counts = torch.zeros(num_groups, dtype=torch.float64, device=values.device).index_add(0, index, weight)
    if state_shift.device != values.device:
        state_count, state_shift = state_count.to(values.device), state_shift.to(values.device)
    center = torch.where((state_count == 0).unsqueeze(1), sums / counts.clamp(min=1).unsqueeze(1), state_shift)
    squares, deviations = deviation_rows(values - center.index_select(0, index), weights)
    return {
        "_group_sum": sums,
        "_group_count": counts,
        "_group_sum_squares": zeros.index_add(0, index, squares),
        "_group_sum_deviations": zeros.index_add(0, index, deviations),
        "_group_shift": center - state_shift,
    }


def _piece_starts(sizes: list) -> list:
    """The first row of each run of ``sizes`` consecutive rows, then the row past the last."""
    return [0, *itertools.accumulate(sizes)]


def _piece_sums(rows: torch.Tensor, sizes: list) -> torch.Tensor:
    """(len(sizes), num_values): the column sums of each run of ``sizes`` consecutive rows, each
    reduced as ``_totals_of_rows`` reduces a batch (a contiguous row of the piece's length per
    value), so the same to the last bit; the pieces of one length in one reduction."""
    sums = torch.empty(len(sizes), rows.shape[1], dtype=rows.dtype, device=rows.device)
    starts = _piece_starts(sizes)
    for length in sorted(set(sizes)):
        pieces = [index for index, size in enumerate(sizes) if size == length]
        first_rows = torch.tensor([starts[index] for index in pieces], dtype=torch.int64)
        row_index = (first_rows.unsqueeze(1) + torch.arange(length)).flatten()
        block = rows.index_select(0, row_index).view(len(pieces), length, -1)
        sums[torch.tensor(pieces, dtype=torch.int64)] = block.transpose(1, 2).contiguous().sum(2)
    return sums


def shifted(values: torch.Tensor, sums: torch.Tensor, count: torch.Tensor, state_count, state_shift) -> tuple:
    """The shift the squares of a batch are taken about and the batch's values less it: (what to
    add to the state's shift, ``values - shift``). The shift is the state's, or, while the state
    counts no user (its sums are then all 0), this batch's mean over its counted users (0
    without one). Tensor operations only (no host read)."""
    if state_shift.device != values.device:
        state_count, state_shift = state_count.to(values.device), state_shift.to(values.device)
    center = torch.where(state_count == 0, sums / count.clamp(min=1), state_shift)
    return center - state_shift, values - center


def deviation_rows(deviation: torch.Tensor, weights: torch.Tensor) -> tuple:
    """(squared deviations, deviations) of each user, 0 for a user not counted (``weights`` 0/1,
    (batch, 1)): the rows summed into the sums of squares and of deviations from the shift."""
    counted = deviation * weights
    return counted * deviation, counted


def centered_moments(total: Any, count: Any, squares: Any, shift: Any, deviations: Any) -> tuple:
    """(sums, counts, sums of squared deviations from the mean), over all processes, from each
    process's sums of values ``total``, ``count``, and its sums of the deviations ``deviations``
    and of their squares ``squares`` from its own ``shift`` c (shapes broadcast). With m the mean
    of all processes, a process's share is sum (x - m)^2 = sum (x - c)^2 + 2 (c - m) sum (x - c)
    + n (c - m)^2, reduced by a sum (Chan, Golub & LeVeque's pairwise update, for a common
    centre). c - m is taken from the deviations, not from the totals: (c - r) - sum (x - r) / N
    about r, the count-weighted mean of the shifts; in one process c - m = -sum (x - c) / n and
    the share sum (x - c)^2 - (sum (x - c))^2 / n, none of it rounded at the scale of the values."""
    world = idist.get_world_size()
    all_total, all_count, weighted_shift = total, count, count * shift
    if world > 1:
        all_total, all_count = idist.all_reduce(total.clone()), idist.all_reduce(count.clone())
        weighted_shift = idist.all_reduce(weighted_shift)
    counted = all_count.clamp(min=1)
    own = shift - torch.where(all_count > 0, weighted_shift / counted, shift)  # c - r
    spread: Any = count * own + deviations  # sum (x - r) of this process
    if world > 1:
        spread = idist.all_reduce(spread)
    offset = own - spread / counted  # c - m
    shares: Any = squares + 2 * offset * deviations + count * offset * offset
    if world > 1:
        shares = idist.all_reduce(shares)
    return all_total, all_count, shares.clamp(min=0)


def gathered_rows(rows: torch.Tensor) -> torch.Tensor:
    """The (users, num_values) rows of every process, rank 0's first."""
    world_size = idist.get_world_size()
    if world_size == 1:
        return rows
    counts = idist.all_gather(torch.tensor([rows.shape[0]], dtype=torch.int64, device=rows.device))
    sizes = counts.tolist() if isinstance(counts, torch.Tensor) else list(counts)  # type: ignore[arg-type]
    padded = torch.zeros((max(sizes), rows.shape[1]), dtype=rows.dtype, device=rows.device)
    padded[: rows.shape[0]] = rows
    gathered = idist.all_gather(padded)
    assert isinstance(gathered, torch.Tensor)
    gathered = gathered.reshape(world_size, max(sizes), rows.shape[1])
    return torch.cat([gathered[rank, :size] for rank, size in enumerate(sizes)])
