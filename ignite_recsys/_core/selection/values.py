"""The k largest values of each row, without their positions (the ideal ranking's labels)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from .. import tuning
from ..tuning import CONTIGUOUS_FROM, MIN_VALUE_GROUP
from .groups import rows_of_groups, strided_groups


def top_values(
    x: torch.Tensor, k: int, maxima: Optional[torch.Tensor] = None, candidates: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """The k largest values of each row, descending (values only, so ties need no rule).

    Groups (``value_groups``): the best k groups by maximum, then the k largest of their items
    and of the items after the last full group. Exact for values, whichever of equal maxima is
    chosen: every item outside the chosen groups is at most the k-th chosen maximum, and the
    chosen groups hold k items at least that large. ``maxima``: the groups' maxima, if already
    computed; ``candidates``: ``ValueGroups.candidates``, if already taken."""
    if candidates is None:
        groups = value_groups(x.shape[1], k)
        if groups is None:
            return x.topk(k, 1).values
        if maxima is not None and maxima.shape[1] != x.shape[1] // groups.size:
            raise RuntimeError(
                f"top_values: {maxima.shape[1]} group maxima are not those of {groups} over {x.shape[1]} items"
            )
        candidates = groups.candidates(x, k, maxima)
    return candidates.topk(k, 1).values


@dataclass(frozen=True)
class ValueGroups:
    """Groups of ``size`` items for ``top_values``: runs of consecutive items if ``contiguous``,
    else the strided groups of ``strided_groups``."""

    size: int
    contiguous: bool = False

    def grouped(self, x: torch.Tensor):
        """(view, dim): a view of the row's first full groups whose max over ``dim`` are the maxima."""
        if self.contiguous:
            num_full = x.shape[1] // self.size
            return x[:, : num_full * self.size].unflatten(1, (num_full, self.size)), 2
        return strided_groups(x, self.size), 1

    def maxima(self, x: torch.Tensor) -> torch.Tensor:
        view, dim = self.grouped(x)
        return tuning.row_pass(lambda rows: view[rows].amax(dim), x)

    def candidates(self, x: torch.Tensor, k: int, maxima: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The items of the best k groups (by their ``maxima``, computed here if not given) and the
        items after the last full group: (batch, k * size + tail), in no order. They hold the row's
        k largest values, and every item of a group whose maximum is among the k largest maxima."""
        if not self.contiguous:
            return strided_candidates(x, k, self.size, maxima)
        maxima = self.maxima(x) if maxima is None else maxima
        best = maxima.topk(k, 1, sorted=False).indices
        candidates = rows_of_groups(x.contiguous(), best, self.size)
        tail_start = maxima.shape[1] * self.size
        return candidates if tail_start == x.shape[1] else torch.cat([candidates, x[:, tail_start:]], 1)


def value_groups(num_cols: int, k: int) -> Optional[ValueGroups]:
    """The groups of ``top_values``, or None to select among all items: about sqrt(num_cols / k)
    items per group, which balances the two selections (among num_cols / g maxima, then among
    g k items); from ``CONTIGUOUS_FROM`` on, runs of 32 or 64 consecutive items (see
    ``tuning.CONTIGUOUS_FROM``)."""
    group = value_group_size(num_cols, k)
    if group is None or group < CONTIGUOUS_FROM:
        return None if group is None else ValueGroups(group)
    return ValueGroups(32 if group < 48 else 64, contiguous=True)


def strided_candidates(x: torch.Tensor, k: int, group: int, maxima: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The items of the best k strided groups of ``group`` items (by their ``maxima``, computed
    here if not given) and the items after the last full group: (batch, k * group + tail), in
    no order. They hold the row's k largest values, and every item of a group whose maximum
    is among the k largest maxima."""
    num_cols = x.shape[1]
    groups = strided_groups(x, group)
    if maxima is None:
        maxima = groups.amax(1)
    best = maxima.topk(k, 1, sorted=False).indices
    candidates = groups.gather(2, best.unsqueeze(1).expand(-1, group, -1)).flatten(1)
    tail_start = maxima.shape[1] * group
    if tail_start < num_cols:
        candidates = torch.cat([candidates, x[:, tail_start:]], 1)
    return candidates


def value_group_size(num_cols: int, k: int) -> Optional[int]:
    """Items per strided group for ``top_values``, or None to select among all items. About
    sqrt(num_cols / k), which balances the two selections (among num_cols / g maxima, then
    among g k items)."""
    group = round((num_cols / k) ** 0.5)
    return group if group >= MIN_VALUE_GROUP else None


def listed_top_values(values: torch.Tensor, rows: torch.Tensor, counts: torch.Tensor, k: int, fill) -> torch.Tensor:
    """(len(counts), k): the k largest of the listed ``values`` (1-D) of each row, descending,
    ``fill`` past a row's values; ``rows``: each value's row, ``counts``: values per row (int64).
    Two sorts of the list (by value, then stably by row) and one scatter."""
    by_value = values.sort(descending=True).indices
    by_row = rows.index_select(0, by_value).sort(stable=True)
    first = counts.cumsum(0).sub_(counts)
    rank = torch.arange(rows.numel(), device=rows.device).sub_(first.index_select(0, by_row.values))
    out = torch.full((counts.numel(), k + 1), fill, dtype=values.dtype, device=values.device)
    ordered = values.index_select(0, by_value.index_select(0, by_row.indices))
    return out.index_put_((by_row.values, rank.clamp_(max=k)), ordered)[:, :k]
