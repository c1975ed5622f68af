"""Input forms other than dense (batch, num_items) tensors.

- :class:`ItemIds`: per-user item ids, padded with ``-1``, with optional grades: a test set held
  as id lists (targets), or items to exclude.
- :class:`RankedItems`: predictions as ranked item ids (batch, K), as an approximate-nearest-
  neighbour index returns them; ``-1`` marks a position with no item.

Targets may also be a torch sparse COO or CSR (batch, num_items) tensor whose stored values are
the grades. These wrappers check their structure when built (types, ranks, dtypes, devices);
value checks (ids within the catalog, no id twice in a row) run in ``update``.
"""

from __future__ import annotations

from typing import Optional

import torch

_ID_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _check_ids(name: str, ids) -> torch.Tensor:
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of item ids, got {type(ids).__name__}")
    if ids.layout != torch.strided:
        raise TypeError(f"{name} must be a dense tensor of item ids, got layout {ids.layout}")
    if ids.dtype not in _ID_DTYPES:
        raise TypeError(f"{name} must hold integer item ids (-1 = no item), got dtype {ids.dtype}")
    if ids.ndim != 2:
        raise ValueError(f"{name} must be 2-D (batch, ids per user), got shape {tuple(ids.shape)}")
    if ids.shape[0] == 0:
        raise ValueError(f"{name} must hold at least one user (batch dimension is 0)")
    return ids.detach().to(torch.int64)


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
