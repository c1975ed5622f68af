"""The k largest values of each row, without their positions (the ideal ranking's labels)."""

from __future__ import annotations

from typing import Optional

import torch

from .. import tuning
from .groups import group_maxima, group_sizes, rows_of_groups


def top_values(x: torch.Tensor, k: int, maxima: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The k largest values of each row, descending (values only, so ties need no rule).

    Groups of consecutive items, as in ``stable_topk`` (:mod:`.groups`, ``group_sizes``): the
    best k groups by maximum, the best k sub-groups inside them by maximum, then the k largest of
    their items and of the items after the last full group. Exact for values, whichever of equal
    maxima is chosen: every item outside the chosen groups is at most the k-th chosen maximum, and
    the chosen groups hold k items at least that large (the same holds inside them). ``maxima``:
    the groups' maxima (``group_maxima(x, value_group_size(...))``), if already computed."""
    num_rows, num_cols = x.shape
    sizes = group_sizes(num_cols, k)
    if sizes is None:
        return x.topk(k, 1).values
    group, sub_group = sizes
    x = x.contiguous()
    if maxima is None:
        with tuning.threads_for(x.numel()):
            maxima = group_maxima(x, group)
    with tuning.threads_for(maxima.numel()):
        best = maxima.topk(k, 1, sorted=False).indices
    with tuning.threads_for(best.numel() * group):
        members = rows_of_groups(x, best, group).view(num_rows, -1)
    best_sub = group_maxima(members, sub_group).topk(k, 1, sorted=False).indices
    candidates = rows_of_groups(members, best_sub, sub_group).view(num_rows, -1)
    tail_start = maxima.shape[1] * group
    if tail_start < num_cols:
        candidates = torch.cat([candidates, x[:, tail_start:]], 1)
    return candidates.topk(k, 1).values


def value_group_size(num_cols: int, k: int) -> Optional[int]:
    """Items per group of ``top_values``' first step (consecutive items), or None to select among
    all items: the group size of ``stable_topk`` (``group_sizes``)."""
    sizes = group_sizes(num_cols, k)
    return None if sizes is None else sizes[0]


def strided_groups(x: torch.Tensor, group: int) -> torch.Tensor:
    """A view (batch, group, num_cols // group) of the row's first items: column j of it is the
    group {j, j + s, j + 2 s, ...} with s = num_cols // group."""
    stride = x.shape[1] // group
    return x[:, : group * stride].unflatten(1, (group, stride))
