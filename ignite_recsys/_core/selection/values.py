"""The k largest values of each row, without their positions (the ideal ranking's labels)."""

from __future__ import annotations

from typing import Optional

import torch


# Smallest strided group worth a two-step selection of values (measured on CPU, k = 100).
MIN_VALUE_GROUP = 3


def top_values(
    x: torch.Tensor, k: int, maxima: Optional[torch.Tensor] = None, candidates: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """The k largest values of each row, descending (values only, so ties need no rule).

    Strided groups (``strided_groups``): the best k groups by maximum, then the k largest of
    their items and of the items after the last full group. Exact for values, whichever of
    equal maxima is chosen: every item outside the chosen groups is at most the k-th chosen
    maximum, and the chosen groups hold k items at least that large. ``maxima``: the groups'
    maxima, if already computed; ``candidates``: ``strided_candidates``, if already taken."""
    if candidates is None:
        group = value_group_size(x.shape[1], k)
        if group is None:
            return x.topk(k, 1).values
        candidates = strided_candidates(x, k, group, maxima)
    return candidates.topk(k, 1).values


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


def strided_groups(x: torch.Tensor, group: int) -> torch.Tensor:
    """A view (batch, group, num_cols // group) of the row's first items: column j of it is the
    group {j, j + s, j + 2 s, ...} with s = num_cols // group. Its maxima (``amax(1)``) reduce
    across contiguous runs, which vectorises well on CPU (unlike maxima of small runs)."""
    stride = x.shape[1] // group
    return x[:, : group * stride].unflatten(1, (group, stride))
