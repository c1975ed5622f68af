"""Input forms other than dense (batch, num_items) tensors.

- :class:`ItemIds`: per-user item ids, padded with ``-1``, with optional grades: a test set held
  as id lists (targets), or items to exclude.
- :class:`RankedItems`: predictions as ranked item ids (batch, K), as an approximate-nearest-
  neighbour index returns them; ``-1`` marks a position with no item.
- :class:`Observed`: the entries that the score-based metrics ``AUC``, ``LogLoss``, ``MAE`` and
  ``RMSE`` count (True = observed), ``update((y_pred, y, Observed(mask)))``. A bare bool tensor
  in that place means ``exclude`` (True = excluded) to the ranking and catalog metrics, so
  these metrics refuse it.
- :class:`DotScores`: predictions as user and item vectors, scored ``user_vectors @
  item_vectors.T + item_bias`` a tile of items at a time, never as a whole score matrix.
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


class Observed:
    """The entries to count, for ``AUC``, ``LogLoss``, ``MAE`` and ``RMSE``: ``mask`` a bool
    tensor of the shape of ``y_pred``, True = observed, ``update((y_pred, y, Observed(mask)))``.
    Entries outside the mask are never read (they may hold NaN). The ranking and catalog
    metrics read a bare bool tensor in the same place as ``exclude`` (True = excluded); to count
    every entry but the excluded ones, pass ``Observed(~exclude)``.

    >>> import torch
    >>> from ignite_recsys import MAE, Observed
    >>> metric = MAE()
    >>> metric.update((torch.tensor([4.0, 2.5, 1.0]), torch.tensor([5.0, 0.0, 1.0]),
    ...                Observed(torch.tensor([True, False, True]))))
    >>> metric.compute()
    0.5
    """

    def __init__(self, mask: torch.Tensor):
        if not isinstance(mask, torch.Tensor):
            raise TypeError(f"Observed mask must be a torch.Tensor of bools, got {type(mask).__name__}")
        if mask.layout != torch.strided:
            raise TypeError(f"Observed mask must be a dense tensor, got layout {mask.layout}; use .to_dense()")
        if mask.dtype != torch.bool:
            raise TypeError(f"Observed mask must be a bool tensor (True = observed entry), got dtype {mask.dtype}")
        self.mask = mask.detach()

    def __repr__(self) -> str:
        return f"Observed(mask of shape {tuple(self.mask.shape)})"


_VECTOR_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
DEFAULT_MEMORY_BUDGET = 256 * 2**20  # bytes of scores per tile of items


class DotScores:
    """Predictions as vectors: user ``u`` scores item ``i`` by ``user_vectors[u] @
    item_vectors[i] + item_bias[i]`` (the last layer of a two-tower or matrix-factorisation
    model). ``user_vectors`` (batch, d) and ``item_vectors`` (num_items, d) floating-point of one
    dtype; ``item_bias`` (num_items,) of that dtype, or None. The metrics rank the catalog a
    tile of items at a time, keeping each user's exact top k (ties by lower item index, as the
    dense path), so memory is about batch x (tile + k) scores, never batch x num_items.
    ``memory_budget``: the bytes of one tile's scores (default 256 MiB); the tile holds
    ``memory_budget // (batch * itemsize)`` items (at least one). NaN or infinite vector entries
    are refused in ``update``.

    The item table split across processes: ``item_vectors`` (and ``item_bias``) are rows
    ``[item_offset, item_offset + len)`` of a catalog of ``num_items`` items; every process of
    ``process_group`` (None: the default group) gives the same users, targets and exclusion (item
    ids global). Each process selects its rows' best k, the candidates of all processes are
    gathered (batch x k ids and scores from each) and merged by score, then item id; each process
    then counts users ``rank::world`` of the batch, so that the sums of ``compute()`` count every
    user once (see docs/vectors.md).

    >>> import torch
    >>> from ignite_recsys import DotScores
    >>> DotScores(torch.ones(2, 8), torch.ones(1000, 8)).num_items
    1000
    >>> DotScores(torch.ones(2, 8), torch.ones(250, 8), item_offset=500, num_items=1000).shard_items
    250
    """

    def __init__(
        self,
        user_vectors: torch.Tensor,
        item_vectors: torch.Tensor,
        item_bias: Optional[torch.Tensor] = None,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        *,
        item_offset: int = 0,
        num_items: Optional[int] = None,
        process_group=None,
    ):
        users = _vector_tensor("DotScores user_vectors", user_vectors, "(batch, d)")
        items = _vector_tensor("DotScores item_vectors", item_vectors, "(num_items, d)")
        if items.dtype != users.dtype:
            raise TypeError(
                f"DotScores item_vectors must have the dtype of user_vectors ({users.dtype}), got {items.dtype}"
            )
        if items.device != users.device:
            raise ValueError(
                f"DotScores item_vectors must be on the device of user_vectors ({users.device}), got {items.device}"
            )
        if items.shape[1] != users.shape[1]:
            raise ValueError(
                f"DotScores item_vectors must have the width of user_vectors (d = {users.shape[1]}), got "
                f"shape {tuple(items.shape)}"
            )
        if users.shape[0] == 0:
            raise ValueError("DotScores user_vectors must hold at least one user (batch dimension is 0)")
        if items.shape[0] == 0:
            raise ValueError("DotScores item_vectors must hold at least one item (num_items is 0)")
        if item_bias is not None:
            if not isinstance(item_bias, torch.Tensor) or item_bias.layout != torch.strided:
                raise TypeError(f"DotScores item_bias must be a dense torch.Tensor or None, got {_kind(item_bias)}")
            if item_bias.dtype != users.dtype:
                raise TypeError(
                    f"DotScores item_bias must have the dtype of the vectors ({users.dtype}), got {item_bias.dtype}"
                )
            if item_bias.shape != (items.shape[0],):
                raise ValueError(
                    f"DotScores item_bias must have shape (num_items,) = ({items.shape[0]},), one value per row "
                    f"of item_vectors, got {tuple(item_bias.shape)}"
                )
            if item_bias.device != users.device:
                raise ValueError(
                    f"DotScores item_bias must be on the device of user_vectors ({users.device}), "
                    f"got {item_bias.device}"
                )
            item_bias = item_bias.detach()
        if isinstance(memory_budget, bool) or not isinstance(memory_budget, int) or memory_budget <= 0:
            raise ValueError(f"DotScores memory_budget must be a positive int (bytes), got {memory_budget!r}")
        for name, value in (("item_offset", item_offset), ("num_items", num_items)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"DotScores {name} must be a non-negative int, got {value!r}")
        if num_items is not None and item_offset + items.shape[0] > num_items:
            raise ValueError(
                f"DotScores item_offset + item_vectors rows ({item_offset} + {items.shape[0]}) must be at most "
                f"num_items ({num_items}): the shard's rows lie in the catalog"
            )
        if num_items is None and item_offset != 0:
            raise ValueError("DotScores item_offset needs num_items (the whole catalog's size)")
        self.user_vectors, self.item_vectors, self.item_bias = users, items, item_bias
        self.memory_budget = memory_budget
        self.item_offset = item_offset
        self._catalog = int(items.shape[0]) if num_items is None else num_items
        self.process_group = process_group

    @property
    def num_items(self) -> int:
        """The catalog's size: ``num_items`` as given, else the rows of ``item_vectors``."""
        return self._catalog

    @property
    def shard_items(self) -> int:
        """The rows of ``item_vectors``: this process's items."""
        return int(self.item_vectors.shape[0])

    @property
    def sharded(self) -> bool:
        """Whether the item table is split across processes (``num_items`` past this shard)."""
        return self._catalog != self.shard_items

    def for_users(self, rows: torch.Tensor) -> DotScores:
        """The same item shard for the users at ``rows`` of the batch."""
        return DotScores(
            self.user_vectors[rows],
            self.item_vectors,
            self.item_bias,
            self.memory_budget,
            item_offset=self.item_offset,
            num_items=self._catalog,
            process_group=self.process_group,
        )

    @property
    def num_users(self) -> int:
        return int(self.user_vectors.shape[0])

    def tile_items(self) -> int:
        """The items scored at once: ``memory_budget`` bytes of (batch, tile) scores, at least one
        item, at most the rows of ``item_vectors``."""
        per_item = self.num_users * self.user_vectors.element_size()
        return max(1, min(self.shard_items, self.memory_budget // per_item))

    def __repr__(self) -> str:
        bias = "" if self.item_bias is None else ", item_bias"
        shard = f", item_offset={self.item_offset}, num_items={self._catalog}" if self.sharded else ""
        return (
            f"DotScores(user_vectors of shape {tuple(self.user_vectors.shape)}, item_vectors of shape "
            f"{tuple(self.item_vectors.shape)}{bias}{shard}, {self.user_vectors.dtype})"
        )


def _kind(value) -> str:
    return f"layout {value.layout}" if isinstance(value, torch.Tensor) else type(value).__name__


def _vector_tensor(name: str, value, shape: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
        raise TypeError(f"{name} must be a dense torch.Tensor {shape} of floating-point values, got {_kind(value)}")
    if value.dtype not in _VECTOR_DTYPES:
        raise TypeError(
            f"{name} must hold floating-point values (float16, bfloat16, float32, float64), got {value.dtype}"
        )
    if value.ndim != 2:
        raise ValueError(f"{name} must be 2-D {shape}, got shape {tuple(value.shape)}")
    return value.detach()


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
