"""Input forms other than dense (batch, num_items) tensors.

- :class:`ItemIds`: per-user item ids, padded with ``-1``, with optional grades: a test set held
  as id lists (targets), or items to exclude.
- :class:`RankedItems`: predictions as ranked item ids (batch, K), as an approximate-nearest-
  neighbour index returns them; ``-1`` marks a position with no item.
- :class:`UserGroups`, :class:`UserIds`: a group id or a user id per user of the batch, appended
  to an update of the metrics that average over users (per-group means, per-user values in
  user-id order).

Targets may also be a torch sparse COO or CSR (batch, num_items) tensor whose stored values are
the grades. These wrappers check their structure when built (types, ranks, dtypes, devices);
value checks (ids within the catalog, no id twice in a row) run in ``update``.
"""

from __future__ import annotations

from typing import Optional

import torch

_ID_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _check_ids(name: str, ids) -> torch.Tensor:
    ids = _id_tensor(name, ids, "item ids", "integer item ids (-1 = no item)")
    if ids.ndim != 2:
        raise ValueError(f"{name} must be 2-D (batch, ids per user), got shape {tuple(ids.shape)}")
    if ids.shape[0] == 0:
        raise ValueError(f"{name} must hold at least one user (batch dimension is 0)")
    return ids.detach().to(torch.int64)


def _id_tensor(name: str, ids, what: str, holding: str) -> torch.Tensor:
    """``ids`` if it is a dense tensor of an integer dtype, else a TypeError naming ``name``."""
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of {what}, got {type(ids).__name__}")
    if ids.layout != torch.strided:
        raise TypeError(f"{name} must be a dense tensor of {what}, got layout {ids.layout}")
    if ids.dtype not in _ID_DTYPES:
        raise TypeError(f"{name} must hold {holding}, got dtype {ids.dtype}")
    return ids


class ItemIds:
    """Per-user item ids, padded with ``-1``: ``ids`` (batch, width) integer; ``grades``
    (batch, width) relevance of each id (default: 1 for every id; ignored for exclusions).

    >>> import torch
    >>> from ignite_recsys import ItemIds
    >>> relevant = ItemIds(torch.tensor([[4, 0, -1], [2, -1, -1]]))
    >>> relevant.ids.shape, relevant.grades.dtype
    (torch.Size([2, 3]), torch.float32)
    """

    def __init__(self, ids: torch.Tensor, grades: Optional[torch.Tensor] = None):
        self.ids = _check_ids("ItemIds ids", ids)
        if grades is None:
            grades = torch.ones(self.ids.shape, dtype=torch.float32, device=self.ids.device)
        elif not isinstance(grades, torch.Tensor):
            raise TypeError(f"ItemIds grades must be a torch.Tensor or None, got {type(grades).__name__}")
        elif grades.shape != self.ids.shape:
            raise ValueError(
                f"ItemIds grades must have the shape of ids {tuple(self.ids.shape)}, got {tuple(grades.shape)}"
            )
        elif grades.device != self.ids.device:
            raise ValueError(f"ItemIds grades must be on the device of ids ({self.ids.device}), got {grades.device}")
        self.grades = grades.detach()

    def __repr__(self) -> str:
        return f"ItemIds(ids of shape {tuple(self.ids.shape)}, grades {self.grades.dtype})"


class RankedItems:
    """Predictions as ranked item ids: ``ids`` (batch, K) integer, best first; ``-1`` marks a
    position with no item (the retrieval returned fewer than K). Positions past K are empty.

    >>> import torch
    >>> from ignite_recsys import RankedItems
    >>> RankedItems(torch.tensor([[7, 3, -1], [0, 2, 5]])).ids.shape
    torch.Size([2, 3])
    """

    def __init__(self, ids: torch.Tensor):
        self.ids = _check_ids("RankedItems ids", ids)
        if self.ids.shape[1] == 0:
            raise ValueError("RankedItems ids must hold at least one position (K is 0)")

    def __repr__(self) -> str:
        return f"RankedItems(ids of shape {tuple(self.ids.shape)})"


def _check_per_user_vector(name: str, ids, what: str) -> torch.Tensor:
    ids = _id_tensor(name, ids, what, f"integer {what}")
    if ids.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one id per user of the batch), got shape {tuple(ids.shape)}")
    return ids.detach().to(torch.int64)


class UserGroups:
    """The group of each user of a batch (an activity bucket, cold or warm, a country...):
    ``ids`` (batch,) integer in ``[0, num_groups)``, appended to an update,
    ``update((y_pred, y, UserGroups(ids)))``. The metrics that average over users then also
    report each group's mean (built with ``num_groups``; see :meth:`compute_groups`). Their
    range is checked in ``update``.

    >>> import torch
    >>> from ignite_recsys import UserGroups
    >>> UserGroups(torch.tensor([0, 2, 1])).ids
    tensor([0, 2, 1])
    """

    def __init__(self, ids: torch.Tensor):
        self.ids = _check_per_user_vector("UserGroups ids", ids, "group ids")

    def __repr__(self) -> str:
        return f"UserGroups(ids of shape {tuple(self.ids.shape)})"


class UserIds:
    """The id of each user of a batch: ``ids`` (batch,) integer, appended to an update,
    ``update((y_pred, y, UserIds(ids)))``. A metric built with ``per_user=True`` then returns
    its per-user values in ascending user-id order, also across processes (see
    :meth:`per_user_ids`).

    >>> import torch
    >>> from ignite_recsys import UserIds
    >>> UserIds(torch.tensor([17, 4])).ids
    tensor([17,  4])
    """

    def __init__(self, ids: torch.Tensor):
        self.ids = _check_per_user_vector("UserIds ids", ids, "user ids")

    def __repr__(self) -> str:
        return f"UserIds(ids of shape {tuple(self.ids.shape)})"
