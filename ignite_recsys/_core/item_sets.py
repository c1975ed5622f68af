"""Per-user item sets held as one sorted flat table, the common form of sparse inputs.

A batch's relevant items (with their grades) or excluded items may come as a torch sparse COO or
CSR (batch, num_items) tensor or as padded id rows. All become an :class:`ItemTable`: the sorted
int64 keys ``user * 2**32 + item`` of the stored entries and their values. Every question the
ranking step asks of such a set is then a sort-free, sync-free tensor operation with shapes known
on the host:

- ``lookup(items)``: the value stored for (user, item) pairs, by ``torch.searchsorted``;
- ``per_user_sum(x)``: a sum over each user's entries (``index_add_``);
- ``top_values(k)``: each user's k largest values, descending, without a per-user loop.

Nothing here reads a tensor value on the host, so the same code runs on CPU and CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ITEM_BITS = 32  # keys are user << 32 | item: item ids below 2**32, users below 2**31
_NO_ITEM = -1


@dataclass(frozen=True)
class ItemTable:
    """Sorted keys ``user << 32 | item`` (nnz,) int64 and their values (nnz,). Padding entries
    (from padded id rows) carry the key ``num_users << 32`` and sort last; they belong to no user."""

    keys: torch.Tensor
    values: torch.Tensor
    num_users: int
    duplicated: torch.Tensor  # 0-d bool: some (user, item) appears twice

    @classmethod
    def from_sparse(cls, matrix: torch.Tensor) -> "ItemTable":
        """From a sparse COO or CSR (users, items) tensor; stored entries only (an explicit zero
        is an entry of value 0). An uncoalesced COO tensor is coalesced first (its duplicate
        entries summed, as torch defines it), which synchronises on CUDA."""
        num_users = matrix.shape[0]
        if matrix.layout == torch.sparse_coo:
            if not matrix.is_coalesced():
                matrix = matrix.coalesce()
            users, items = matrix.indices()
            values = matrix.values()
        elif matrix.layout == torch.sparse_csr:
            rows = matrix.crow_indices()
            items = matrix.col_indices()
            values = matrix.values()
            users = torch.repeat_interleave(
                torch.arange(num_users, device=rows.device), rows.diff(), output_size=items.numel()
            )
        else:
            raise TypeError(f"expected a sparse COO or CSR tensor, got layout {matrix.layout}")
        keys = torch.add(items.to(torch.int64), users.to(torch.int64), alpha=1 << ITEM_BITS)
        return cls._sorted(keys, values, num_users)

    @classmethod
    def from_ids(cls, ids: torch.Tensor, values: torch.Tensor) -> "ItemTable":
        """From padded id rows (users, width), ``-1`` = no item, and one value per id."""
        num_users, width = ids.shape
        users = torch.arange(num_users, device=ids.device).unsqueeze(1)
        padding = torch.full((), num_users << ITEM_BITS, dtype=torch.int64, device=ids.device)
        keys = torch.where(ids >= 0, torch.add(ids.to(torch.int64), users, alpha=1 << ITEM_BITS), padding)
        return cls._sorted(keys.flatten(), values.flatten(), num_users)

    @classmethod
    def _sorted(cls, keys: torch.Tensor, values: torch.Tensor, num_users: int) -> "ItemTable":
        keys, order = torch.sort(keys, stable=True)
        values = values.gather(0, order) if values.numel() else values
        padding = num_users << ITEM_BITS
        repeated = (keys[1:] == keys[:-1]) & (keys[1:] < padding)
        duplicated = repeated.any() if repeated.numel() else torch.zeros((), dtype=torch.bool, device=keys.device)
        return cls(keys, values, num_users, duplicated)

    @property
    def users(self) -> torch.Tensor:
        """(nnz,) the user of each entry; ``num_users`` for padding entries."""
        return self.keys >> ITEM_BITS

    def lookup(self, items: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For ``items`` (num_users, K) int64 (``-1`` = no item): the stored value of each
        (user, item) pair, 0 where none is stored, and whether one is stored (bool)."""
        num_users = items.shape[0]
        users = torch.arange(num_users, device=items.device).unsqueeze(1)
        queries = torch.add(items, users, alpha=1 << ITEM_BITS)
        if self.keys.numel() == 0:
            found = torch.zeros(items.shape, dtype=torch.bool, device=items.device)
            return torch.zeros(items.shape, dtype=self.values.dtype, device=items.device), found
        position = torch.searchsorted(self.keys, queries.flatten()).clamp(max=self.keys.numel() - 1)
        found = (self.keys.gather(0, position) == queries.flatten()) & (items.flatten() >= 0)
        zero = torch.zeros((), dtype=self.values.dtype, device=items.device)
        values = torch.where(found, self.values.gather(0, position), zero)
        return values.view(items.shape), found.view(items.shape)

    def per_user_sum(self, per_entry: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """(num_users,) the sum of ``per_entry`` (nnz,) over each user's entries."""
        totals = torch.zeros(self.num_users + 1, dtype=dtype, device=self.keys.device)
        totals.index_add_(0, self.users, per_entry.to(dtype))
        return totals[: self.num_users]

    def top_values(self, k: int, fill: float = 0.0) -> torch.Tensor:
        """(num_users, k) each user's k largest values, descending, as float64; users with fewer
        than k entries are padded with ``fill``."""
        values = self.values.to(torch.float64)
        # Group by user, largest value first inside a user: sort by value, then stably by user.
        by_value = torch.sort(values, descending=True, stable=True).indices
        by_user = torch.sort(self.users.gather(0, by_value), stable=True)
        order = by_value.gather(0, by_user.indices)
        users = by_user.values
        counts = torch.zeros(self.num_users + 1, dtype=torch.int64, device=values.device)
        counts.index_add_(0, users, torch.ones_like(users))
        first = counts.cumsum(0) - counts  # position of each user's first entry
        rank = torch.arange(users.numel(), device=values.device) - first.gather(0, users)
        # Entries ranked k or later, and padding, go to a spare row/column that is dropped.
        column = rank.clamp(max=k)
        out = torch.full((self.num_users + 1, k + 1), fill, dtype=torch.float64, device=values.device)
        out.index_put_((users, column), values.gather(0, order))
        return out[: self.num_users, :k]
