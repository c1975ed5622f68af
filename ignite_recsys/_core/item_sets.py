"""Per-user item sets held as one sorted flat table, the common form of sparse inputs.

A batch's relevant items (with their grades) or excluded items may come as a torch sparse COO or
CSR (batch, num_items) tensor or as padded id rows. All become an :class:`ItemTable`: the sorted
int64 keys ``user * 2**32 + item`` of the stored entries and their values. Every question the
ranking step asks of such a set is then a sort-free, sync-free tensor operation with shapes known
on the host:

- ``lookup(items)``: the value stored for (user, item) pairs, by ``torch.searchsorted``;
- ``per_user_sum(x)``: a sum over each user's entries (``index_add_``);
- ``top_values(k)``: each user's k largest values, descending, without a per-user loop;
- ``find_in_rows(sorted_ids, order)``: where each entry sits in rows of ids sorted once (a merge
  of two sorted key lists, with the entries, usually fewer, as the queries);
- ``distinct_entries(num_items)``: the first entry of each distinct (user, item) in range.

On CPU an exclusion given as CSR, COO or id rows goes instead to one sorted row of ids per user
(``sorted_rows``): the selection that leaves the items out reads rows, and ``distinct_in_rows``
counts each user's excluded items in them.

Nothing in the table reads a tensor value on the host on an accelerator, so the same code runs on
CPU and CUDA; on CPU, where a host read waits for nothing, the sort is skipped for keys already in
order, and ``sorted_rows`` (CPU only) reads the width of its rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from . import tuning

ITEM_BITS = 32  # keys are user << 32 | item: item ids below 2**32, users below 2**31
MAX_NUM_ITEMS = 1 << ITEM_BITS  # the widest catalog: every input and num_items is checked against it
_NO_ITEM = -1
ROW_PADDING = 1 << 62  # fills sorted id rows past a user's items: above every item id


@dataclass(frozen=True)
class ItemTable:
    """Sorted keys ``user << 32 | item`` (nnz,) int64 and their values (nnz,). Padding entries
    (from padded id rows) carry the key ``num_users << 32`` and sort last; they belong to no user."""

    keys: torch.Tensor
    values: torch.Tensor
    num_users: int
    duplicated: torch.Tensor  # 0-d bool: some (user, item) appears twice

    @classmethod
    def from_sparse(cls, matrix: torch.Tensor, drop_zeros: bool = False) -> "ItemTable":
        """From a sparse COO or CSR (users, items) tensor; stored entries only (an explicit zero
        is an entry of value 0, or with ``drop_zeros`` no entry: its key becomes padding). The
        duplicate entries of an uncoalesced COO tensor are summed, as torch defines it: on CPU by
        ``coalesce``; elsewhere by ``_merged`` (the sum on the first entry of a key, 0 on the
        others), which keeps the shapes static (``coalesce`` reads its output size on the host)."""
        num_users, num_items = matrix.shape[0], matrix.shape[1]
        users, items, values, uncoalesced = _sparse_entries(matrix)
        # an entry outside the shape (refused by the value checks, ``sparse_outside``) stays in its bounds
        users, items = users.clamp(0, max(num_users - 1, 0)), items.clamp(0, max(num_items - 1, 0))
        keys = torch.add(items.to(torch.int64), users.to(torch.int64), alpha=1 << ITEM_BITS)
        if uncoalesced:
            keys, order = torch.sort(keys, stable=True)
            values = _merged(keys, values.gather(0, order))
        if drop_zeros:
            padding = torch.full((), num_users << ITEM_BITS, dtype=torch.int64, device=keys.device)
            keys = torch.where(values != 0, keys, padding)
        elif uncoalesced:  # summed, hence no duplicates (and no padding to sort past the users)
            return cls(keys, values, num_users, torch.zeros((), dtype=torch.bool, device=keys.device))
        return cls._sorted(keys, values, num_users)

    @classmethod
    def from_ids(cls, ids: torch.Tensor, values: torch.Tensor) -> "ItemTable":
        """From padded id rows (users, width), ``-1`` = no item, and one value per id."""
        num_users, width = ids.shape
        users = torch.arange(num_users, device=ids.device).unsqueeze(1)
        padding = torch.full((), num_users << ITEM_BITS, dtype=torch.int64, device=ids.device)
        # an id of 2**32 or more (refused by the value checks) must not reach the user's bits
        items = ids.to(torch.int64).clamp(max=(1 << ITEM_BITS) - 1)
        keys = torch.where(ids >= 0, torch.add(items, users, alpha=1 << ITEM_BITS), padding)
        return cls._sorted(keys.flatten(), values.flatten(), num_users)

    @classmethod
    def _sorted(cls, keys: torch.Tensor, values: torch.Tensor, num_users: int) -> "ItemTable":
        if not _ascending_on_cpu(keys):
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
        queries = items + tuning.index_constant(0, num_users << ITEM_BITS, 1 << ITEM_BITS, -1, items.device)
        if self.keys.numel() == 0:
            found = torch.zeros(items.shape, dtype=torch.bool, device=items.device)
            return torch.zeros(items.shape, dtype=self.values.dtype, device=items.device), found
        position = torch.searchsorted(self.keys, queries.flatten()).clamp(max=self.keys.numel() - 1)
        found = (self.keys.gather(0, position) == queries.flatten()) & (items.flatten() >= 0)
        zero = torch.zeros((), dtype=self.values.dtype, device=items.device)
        values = torch.where(found, self.values.gather(0, position), zero)
        return values.view(items.shape), found.view(items.shape)

    def find_in_rows(self, sorted_ids: torch.Tensor, order: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Where each entry sits in rows of ids: ``sorted_ids`` (num_users, K) is each row sorted
        ascending (``-1`` = no item) and ``order`` the columns they came from (``torch.sort``'s
        values and indices). Returns (the flat position ``user * K + column`` of each entry in
        the unsorted rows, or ``num_users * K`` where its item is not in its user's row; (nnz,)
        int64) and whether it is there (bool). Keys ``user << 32 | id`` of rows sorted this way
        are sorted across rows too (an id of ``-1`` lands just below its user's keys), so one
        ``searchsorted`` of the entries, usually fewer than the ids, into them does the merge.
        Ids outside ``[-1, 2**32)`` break that order; such ids must be refused by a value check."""
        num_users, width = sorted_ids.shape
        users = torch.arange(num_users, device=sorted_ids.device).unsqueeze(1)
        queries = torch.add(sorted_ids, users, alpha=1 << ITEM_BITS).flatten()
        if self.keys.numel() == 0:
            return self.keys.clone(), torch.zeros(0, dtype=torch.bool, device=self.keys.device)
        position = torch.searchsorted(queries, self.keys).clamp_(max=queries.numel() - 1)
        found = queries.gather(0, position) == self.keys  # padding keys (>= num_users << 32) never match
        column = order.flatten().gather(0, position)
        flat = torch.where(found, position - position % width + column, num_users * width)
        return flat, found

    def distinct_entries(self, num_items: int) -> torch.Tensor:
        """(nnz,) bool: the entry is the first of its (user, item) key (keys are sorted), belongs to
        a user and names an item below ``num_items``."""
        first = torch.ones(self.keys.shape, dtype=torch.bool, device=self.keys.device)
        first[1:] = self.keys[1:] != self.keys[:-1]
        return first & (self.keys < (self.num_users << ITEM_BITS)) & ((self.keys & ((1 << ITEM_BITS) - 1)) < num_items)

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


def sparse_outside(matrix: torch.Tensor) -> torch.Tensor:
    """0-d bool: a stored entry of a sparse COO or CSR tensor lies outside its shape (a negative
    index, or one at or past its size): torch's constructors do not check their indices unless
    asked (``check_invariants``). Tensor code, no host read."""
    if matrix.layout == torch.sparse_coo:
        return ~_inside(matrix._indices(), matrix.shape).all()
    columns = matrix.col_indices()
    return ((columns < 0) | (columns >= matrix.shape[1])).any()


def _inside(indices: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """(nnz,) bool: the entry's (row, column) of a COO tensor's ``indices`` lies in ``shape``
    (compared with Python ints: no tensor copied to the device)."""
    rows, columns = indices[0], indices[1]
    return (rows >= 0) & (rows < shape[0]) & (columns >= 0) & (columns < shape[1])


def dense_of_sparse(matrix: torch.Tensor) -> tuple:
    """(``matrix.to_dense()``, 0-d bool ``sparse_outside``) of a sparse COO or CSR tensor, the
    entries outside its shape left out (torch would write them past its memory)."""
    coo = matrix if matrix.layout == torch.sparse_coo else matrix.to_sparse_coo()
    indices, values = coo._indices(), coo._values()
    inside = _inside(indices, coo.shape)
    kept = torch.where(inside, values, torch.zeros((), dtype=values.dtype, device=values.device))
    safe = torch.sparse_coo_tensor(torch.where(inside, indices, 0), kept, coo.shape)
    return safe.to_dense(), ~inside.all()


def _sparse_entries(matrix: torch.Tensor) -> tuple:
    """(users, items, values, uncoalesced) of the stored entries of a sparse COO or CSR (users,
    items) tensor, user by user for CSR. An uncoalesced COO tensor is coalesced on CPU (its
    duplicate entries summed, as torch defines it); elsewhere its entries come as they are, with
    ``uncoalesced`` True (the caller merges them)."""
    if matrix.layout == torch.sparse_coo:
        uncoalesced = not matrix.is_coalesced()
        if uncoalesced and tuning.cpu_tuned(matrix.device):
            matrix, uncoalesced = matrix.coalesce(), False
        users, items = matrix._indices() if uncoalesced else matrix.indices()
        return users, items, matrix._values() if uncoalesced else matrix.values(), uncoalesced
    if matrix.layout == torch.sparse_csr:
        rows = matrix.crow_indices()
        items = matrix.col_indices()
        users = torch.repeat_interleave(
            torch.arange(matrix.shape[0], device=rows.device), rows.diff(), output_size=items.numel()
        )
        return users, items, matrix.values(), False
    raise TypeError(f"expected a sparse COO or CSR tensor, got layout {matrix.layout}")


def _merged(keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """The values of sorted ``keys`` with each run of equal keys summed onto its first entry and
    0 on the others (torch's sum of duplicate COO entries, with static shapes; bool values are
    summed as ints, so a True among them stays True)."""
    if keys.numel() == 0:
        return values
    first = torch.ones(keys.shape, dtype=torch.bool, device=keys.device)
    first[1:] = keys[1:] != keys[:-1]
    run = first.cumsum(0) - 1
    wide = torch.float64 if values.is_floating_point() else torch.int64
    totals = torch.zeros(keys.shape, dtype=wide, device=keys.device).index_add_(0, run, values.to(wide))
    summed = torch.where(first, totals.gather(0, run), 0)
    return summed != 0 if values.dtype == torch.bool else summed.to(values.dtype)


def _ascending_on_cpu(keys: torch.Tensor) -> bool:
    """Whether CPU ``keys`` are already in ascending order (the entries of a CSR tensor, whose
    column indices torch requires sorted within a row, and of a coalesced COO tensor are), so
    that the sort can be skipped: one comparison, read on the host, which on CPU waits for
    nothing. Always False on accelerators (no synchronisation; the sort runs)."""
    if not tuning.cpu_tuned(keys.device) or keys.numel() < 2:
        return tuning.cpu_tuned(keys.device)
    return bool((keys[1:] >= keys[:-1]).all())


def sort_id_rows(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row of int64 ``ids`` (batch, K) ascending, as ``ids.sort(1)``: (values, the column
    each came from; equal ids in column order). On CPU, one numpy sort of the keys
    ``id << b | column`` (b bits hold a column; ids in range read on the host): an int64 sort
    without the index array costs a fifth of torch's."""
    width = ids.shape[-1]
    if ids.ndim == 2 and ids.dtype == torch.int64 and ids.numel() and tuning.cpu_tuned(ids.device):
        bits = max((width - 1).bit_length(), 1)
        values = ids.numpy()
        if -(1 << (62 - bits)) <= values.min() and values.max() < 1 << (62 - bits):
            keys = (values << bits) | np.arange(width, dtype=np.int64)
            keys.sort(axis=1)
            return torch.from_numpy(keys >> bits), torch.from_numpy(keys & ((1 << bits) - 1))
    ordered, columns = ids.sort(dim=1, stable=True)
    return ordered, columns


def sorted_rows(exclusion) -> torch.Tensor:
    """(num_users, E) int64, CPU: each user's items ascending (duplicates kept), padded with
    ``ROW_PADDING``, E the most entries of a user. ``exclusion``: a sparse COO or CSR (users,
    items) tensor (an entry of value 0 is no item) or padded id rows (users, width) (a negative
    id is no item). E is read on the host, which on CPU waits for nothing."""
    if isinstance(exclusion, torch.Tensor) and exclusion.layout == torch.strided:
        ids = exclusion.to(torch.int64)
        return torch.where(ids >= 0, ids, ROW_PADDING).sort(1).values
    num_users = exclusion.shape[0]
    users, items, values, _ = _sparse_entries(exclusion)
    if not _ascending_on_cpu(users):  # a COO tensor flagged coalesced whose entries are not in order
        by_user = users.argsort(stable=True)
        users, items, values = users[by_user], items[by_user], values[by_user]
    counts = torch.bincount(users, minlength=num_users)
    starts = counts.cumsum(0) - counts
    width = int(counts.max()) if counts.numel() else 0
    first = starts.to(torch.int64).gather(0, users) - users * width  # entry i goes to flat place i - first
    flat = torch.arange(items.numel()) - first
    rows = torch.full((num_users * width,), ROW_PADDING, dtype=torch.int64)
    rows.index_copy_(0, flat, torch.where(values != 0, items.to(torch.int64), ROW_PADDING))
    return rows.view(num_users, width).sort(1).values


def distinct_in_rows(rows: torch.Tensor, num_items: int) -> torch.Tensor:
    """(num_users,) float64: the distinct items below ``num_items`` in each of the sorted
    ``rows`` (``sorted_rows``)."""
    return first_in_rows(rows, num_items).sum(1, dtype=torch.float64)


def first_in_rows(rows: torch.Tensor, num_items: int) -> torch.Tensor:
    """(num_users, E) bool: the first entry of each distinct item below ``num_items`` in the
    sorted ``rows`` (``sorted_rows``; padding and repeats False)."""
    first = torch.ones(rows.shape, dtype=torch.bool, device=rows.device)
    first[:, 1:] = rows[:, 1:] != rows[:, :-1]
    return first & (rows < num_items)


def entries_bound(exclusion) -> int:
    """CPU: at least the most entries of a user in ``exclusion`` (as for ``sorted_rows``; the
    exact count for CSR and coalesced COO tensors, the width for id rows), read on the host."""
    if isinstance(exclusion, torch.Tensor) and exclusion.layout == torch.strided:
        return exclusion.shape[1]
    if exclusion.layout == torch.sparse_csr:
        counts = exclusion.crow_indices().diff()
    else:
        counts = torch.bincount(exclusion._indices()[0], minlength=exclusion.shape[0])
    return int(counts.max()) if counts.numel() else 0


def listed_of_mask(mask: torch.Tensor, most_per_row: int):
    """CPU: the True entries of a dense bool (users, items) mask as a coalesced sparse COO
    tensor, or None where some row may hold more than ``most_per_row`` of them (then the mask is
    better read as it is) or a row is not a whole number (> 0) of 8-byte words. The mask is
    read as int64 words (eight items each): only the words that hold a True entry are looked into
    (``_words_holding_entries``), so a mask with few entries per row costs about one read of it."""
    num_users, num_items = mask.shape
    if num_items == 0 or num_items % 8 or not mask.is_contiguous():
        return None
    words = mask.view(torch.int64)
    hit = _words_holding_entries(words, num_users * most_per_row)  # (words holding an entry, 2): user, word
    if hit is None or hit.shape[0] > num_users * most_per_row:  # some user has more entries than that
        return None
    eight = mask.view(num_users, num_items // 8, 8)[hit[:, 0], hit[:, 1]]
    entry = eight.nonzero()  # (entries, 2): the hit word, the byte in it
    users = hit[:, 0].gather(0, entry[:, 0])
    items = torch.add(entry[:, 1], hit[:, 1].gather(0, entry[:, 0]), alpha=8)
    values = torch.ones(users.shape, dtype=torch.bool)
    return torch.sparse_coo_tensor(
        torch.stack([users, items]), values, mask.shape, is_coalesced=True, check_invariants=False
    )


def _words_holding_entries(words: torch.Tensor, most: int) -> Optional[torch.Tensor]:
    """(n, 2) int64: (user, word) of each nonzero int64 word of a bool mask, row-major (None where
    more than ``most`` runs hold one, so more than ``most`` words do). On CPU, for
    a mask larger than the cache (``tuning.stays_in_cache``), the maxima of runs of
    ``tuning.MASK_WORD_RUN`` words first (a word of 0/1 bytes is never negative), then the words
    of the runs that hold an entry: one read of the mask from memory and a small ``nonzero``,
    where ``nonzero`` reads every word twice."""
    num_users, width = words.shape
    run = tuning.MASK_WORD_RUN
    full = width // run * run
    if full == 0 or not tuning.cpu_tuned(words.device) or tuning.stays_in_cache(words):
        return words.nonzero()  # in cache, its two reads cost less than the runs' steps
    run_maxima = tuning.row_pass(lambda rows: words[rows, :full].unflatten(1, (-1, run)).amax(2), words)
    runs = run_maxima.nonzero()  # (runs holding an entry, 2): user, run; row-major
    if runs.shape[0] > most:  # (before a copy of their words, up to 8 bytes per word of the mask)
        return None
    starts = runs[:, 1] * run
    first_words = torch.add(starts, runs[:, 0], alpha=width).unsqueeze(1)
    positions = first_words + tuning.index_constant(0, run, 1, 0, words.device)
    inside = words.reshape(-1).index_select(0, positions.view(-1)).view(-1, run).nonzero()  # (hits, 2): run, word
    in_run = inside[:, 0]
    hit = torch.stack([runs[:, 0].index_select(0, in_run), starts.index_select(0, in_run) + inside[:, 1]], 1)
    if full < width:  # the words after the last whole run, merged in row-major order
        tail = words[:, full:].nonzero()
        tail[:, 1] += full
        hit = torch.cat([hit, tail])
        hit = hit.index_select(0, (hit[:, 0] * width + hit[:, 1]).argsort())
    return hit
