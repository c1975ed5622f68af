"""Exact top-k of :class:`~ignite_recsys.DotScores` predictions, a tile of items at a time.

Scores are ``user_vectors @ item_vectors[a:b].T + item_bias[a:b]`` for consecutive tiles
``[a, b)`` of ``DotScores.tile_items()`` items. Each tile's best ``k`` candidates come from the
shared selection (:func:`~.selection.stable_topk`, or :func:`~.selection.stable_topk_excluding`
with the tile's columns of the exclusion), by score descending then item index ascending. They
are merged with the running best ``k``: the running list holds lower item indices than the tile,
so a stable sort of the concatenation by score descending keeps the tie rule (equal scores: lower
index first); a second stable sort puts empty positions (-1, fewer candidates than ``k`` so far)
last. The result is the first ``k`` candidates of the dense path fed the matrix made of the same
tiles. Memory: one tile of scores, its exclusion mask and the selection's temporaries, plus
(batch, 2k) for the merge. The number of tiles depends on the shapes only; nothing reads a value
on the host (beyond what the selection does on CPU).
"""

from __future__ import annotations

from typing import Optional

import torch

from ..inputs import DotScores
from . import tuning
from .item_sets import ITEM_BITS, ROW_PADDING, ItemTable
from .relevance import Relevance, any_nan, count_true, gains
from .ties import last_group_totals
from .selection import listed_bound, stable_topk, stable_topk_excluding, stable_topk_excluding_listed

_ITEM_MASK = (1 << ITEM_BITS) - 1
_FINITE = "y_pred (DotScores) "
NAN_SCORES = "y_pred (DotScores) gives a NaN score: a product of the vectors overflows (inf - inf)"
ITEMS_NOT_FINITE = (
    f"{_FINITE}item_vectors or item_bias of a process's item shard holds NaN or an infinite value: give finite "
    "vectors on every process"
)
USERS_DIFFER = (
    "y_pred (DotScores) user_vectors differ between the processes of a split item table: every process must "
    "score the same users in the same order (split the items across processes, not the users)"
)


_CHECK_ENTRIES = 1 << 22  # entries read at once by the finite check (4 MiB of flags)


def _holds_non_finite(tensor: torch.Tensor) -> torch.Tensor:
    """0-d bool: ``tensor`` holds NaN or an infinite entry, read a block of rows at a time (the
    flags of the whole item table would be num_items x d bytes)."""
    rows = max(1, _CHECK_ENTRIES // max(1, tensor[0].numel()))
    blocks = [torch.isfinite(tensor[start : start + rows]).all() for start in range(0, tensor.shape[0], rows)]
    return ~torch.stack(blocks).all()


def finite_checks(vectors: DotScores) -> dict:
    """Value-check flags (0-d bool tensors): NaN or infinite entries in the vectors or the bias."""
    flags = {}
    for name, tensor in (
        ("user_vectors", vectors.user_vectors),
        ("item_vectors", vectors.item_vectors),
        ("item_bias", vectors.item_bias),
    ):
        if tensor is not None:
            flags[f"{_FINITE}{name} holds NaN or an infinite value: give finite vectors"] = _holds_non_finite(tensor)
    return flags


def tile_scores(vectors: DotScores, start: int, stop: int) -> torch.Tensor:
    """(batch, stop - start) the scores of items ``[start, stop)`` (catalog ids, in the shard):
    one matrix product, then the bias."""
    start, stop = start - vectors.item_offset, stop - vectors.item_offset
    scores = vectors.user_vectors @ vectors.item_vectors[start:stop].T
    if vectors.item_bias is not None:
        scores += vectors.item_bias[start:stop]
    return scores


def tiles(vectors: DotScores):
    """The (start, stop) catalog ids of each tile of the shard's items, in item order."""
    size, first = vectors.tile_items(), vectors.item_offset
    last = first + vectors.shard_items
    return [(start, min(start + size, last)) for start in range(first, last, size)]


class TileExclusion:
    """The exclusion of an update cut to one tile of items: a dense (batch, num_items) bool mask
    (its columns), or an exclusion list (its entries that fall in the tile, scattered into a
    (batch, tile) mask)."""

    def __init__(
        self,
        mask: Optional[torch.Tensor],
        table: Optional[ItemTable],
        num_users: int,
        rows: Optional[torch.Tensor] = None,
    ):
        self.mask, self.num_users, self.rows = mask, num_users, rows
        if table is not None:
            self.users = table.users.clamp(max=num_users)  # padding entries: the spare row
            self.items = table.keys & _ITEM_MASK
            self.flags = table.values.to(torch.bool)
        self.table = table

    def of(self, start: int, stop: int) -> Optional[torch.Tensor]:
        if self.mask is not None:
            return self.mask[:, start:stop]
        if self.table is None:
            return None
        width = stop - start
        local = self.items - start
        inside = self.flags & (local >= 0) & (local < width)
        columns = torch.where(inside, local, width)  # the spare column
        mask = torch.zeros(self.num_users + 1, width + 1, dtype=torch.bool, device=self.items.device)
        mask.index_put_((self.users, columns), torch.ones((), dtype=torch.bool, device=mask.device))
        return mask[: self.num_users, :width]

    def rows_of(self, start: int, stop: int) -> Optional[torch.Tensor]:
        """CPU, an exclusion list: each user's excluded items of the tile as tile columns, sorted
        ascending and padded with ``ROW_PADDING`` (``stable_topk_excluding_listed``'s rows)."""
        if self.rows is None:
            return None
        inside = (self.rows >= start) & (self.rows < stop)
        return torch.where(inside, self.rows - start, ROW_PADDING).sort(1).values


def exclusion_of(batch) -> TileExclusion:
    """The ``TileExclusion`` of a ``RankingInput``: a dense mask as given, else its list."""
    if not batch.has_exclusion:
        return TileExclusion(None, None, batch.num_users)
    if batch.excluded_list is None:
        return TileExclusion(batch.exclusion_mask, None, batch.num_users)
    # on CPU the list as sorted rows too: the tiles then take the listed selection where it applies
    rows = batch.exclusion_rows if tuning.cpu_tuned(batch.device) else None
    return TileExclusion(None, batch.exclusion_table, batch.num_users, rows)


def tiled_topk(vectors: DotScores, k: int, exclusion: TileExclusion) -> tuple:
    """(order (batch, k') int64 item ids, -1 past a user's candidates; their scores (batch, k');
    (batch,) bool: a candidate scores NaN), k' = min(k, num_items), by score descending then
    item index ascending over each user's candidates."""
    k = min(k, vectors.shard_items)
    device, dtype = vectors.user_vectors.device, vectors.user_vectors.dtype
    num_users = vectors.num_users
    ids = torch.empty(num_users, 0, dtype=torch.int64, device=device)
    values = torch.empty(num_users, 0, dtype=dtype, device=device)
    has_nan = torch.zeros(num_users, dtype=torch.bool, device=device)
    for start, stop in tiles(vectors):
        scores = tile_scores(vectors, start, stop)
        width = min(k, stop - start)
        rows, most = exclusion.rows_of(start, stop), None
        if rows is not None:
            most = listed_bound(scores, width)
        excluded = (
            None if rows is not None and most is not None and rows.shape[1] <= most else exclusion.of(start, stop)
        )
        if rows is not None and excluded is None:  # few excluded items: the listed selection, no mask
            local, nan = stable_topk_excluding_listed(scores, width, rows, detect_nan=True)
        elif excluded is not None:
            local, nan = stable_topk_excluding(scores, width, excluded, detect_nan=True)
        else:
            local, nan = stable_topk(scores, width, detect_nan=True)
        has_nan |= nan
        tile_values = scores.gather(1, local.clamp(min=0))
        tile_ids = torch.where(local >= 0, local + start, -1)
        ids, values = _merge(torch.cat([ids, tile_ids], 1), torch.cat([values, tile_values], 1), k)
    return ids, values, has_nan


def _merge(ids: torch.Tensor, values: torch.Tensor, k: int) -> tuple:
    """The best ``k`` of rows whose entries are in rank order within each of two runs, the first
    run holding the lower item indices: by score descending (stable: equal scores keep index
    order), then listed entries before empty ones (-1)."""
    order = values.argsort(dim=1, descending=True, stable=True)
    ids, values = ids.gather(1, order), values.gather(1, order)
    listed_first = (ids >= 0).to(torch.uint8).argsort(dim=1, descending=True, stable=True)[:, :k]
    return ids.gather(1, listed_first), values.gather(1, listed_first)


def num_candidates(batch) -> torch.Tensor:
    """(batch,) float64: each user's candidates, the catalog less its distinct excluded items."""
    num_items = batch.num_items
    if not batch.has_exclusion:
        return torch.full((batch.num_users,), float(num_items), dtype=torch.float64, device=batch.device)
    if batch.excluded_list is None:
        return (num_items - count_true(batch.exclusion_mask)).to(torch.float64)
    table = batch.exclusion_table
    return num_items - table.per_user_sum(table.distinct_entries(num_items))


def vector_candidates(batch, depth: int) -> tuple:
    """``ranking._candidates`` for DotScores: (order, number of candidates, value-check flags,
    None); the scores at ``order`` are kept as ``batch.vector_top_values`` (the boundary ties)."""
    # the vectors' own checks first: a NaN score from a NaN entry is reported as that entry
    flags = {message: flag for message, flag in batch.invalid.items() if message.startswith(_FINITE)}
    if batch.shard_source is not None:  # the item table split across processes
        order, values, has_nan, users_differ, items_elsewhere = sharded_topk(
            batch.shard_source, depth, batch.shard_rows
        )
        flags[ITEMS_NOT_FINITE] = items_elsewhere
        flags[USERS_DIFFER] = users_differ
    else:
        order, values, has_nan = tiled_topk(batch.vectors, depth, exclusion_of(batch))
    batch.vector_top_values = values
    flags[NAN_SCORES] = has_nan.any()
    return order, num_candidates(batch), flags, None


def vector_boundary_ties(batch, order: torch.Tensor, depth: int) -> torch.Tensor:
    """``ties.boundary_ties`` from the kept top scores: (batch, depth) float64, 1 where positions
    i and i + 1 both list an item and their scores are equal."""
    values = batch.vector_top_values[:, : order.shape[1]]
    if values.shape[1] < order.shape[1]:  # order padded with -1 past the catalog
        values = torch.nn.functional.pad(values, (0, order.shape[1] - values.shape[1]))
    listed = order >= 0
    tie = ((values[:, 1:] == values[:, :-1]) & listed[:, 1:] & listed[:, :-1]).to(torch.float64)
    if tie.shape[1] > depth:
        return tie[:, :depth]
    return tie if tie.shape[1] == depth else torch.nn.functional.pad(tie, (0, depth - tie.shape[1]))


def vector_top_scores(batch, order: torch.Tensor) -> torch.Tensor:
    """The scores at ``order`` (batch, depth) from the tiled selection, NaN at empty positions (as
    ``ties.tie_expectations`` reads them)."""
    values = batch.vector_top_values[:, : order.shape[1]]
    if values.shape[1] < order.shape[1]:
        values = torch.nn.functional.pad(values, (0, order.shape[1] - values.shape[1]))
    return torch.where(order >= 0, values, torch.full((), float("nan"), dtype=values.dtype, device=values.device))


def vector_group_totals(batch, boundary, relevance, gain_functions, threshold, rows) -> tuple:
    """``ranking._candidate_group_totals`` for DotScores (``ties="average"``): a second pass over
    the same tiles (the same products, so the same scores), each tile's candidates scored
    ``boundary`` counted by ``ties.last_group_totals``; with sparse or id targets, their entries'
    scores read from the tiles that hold them."""
    if batch.shard_source is not None:
        raise ValueError(
            'ties="average" is not taken with DotScores split across processes (item_offset, num_items): '
            'give ties="stable", or the whole item table on each process'
        )
    vectors, exclusion = batch.vectors, exclusion_of(batch)
    num_users, device = batch.num_users, batch.device
    totals = [torch.zeros(num_users, dtype=torch.float64, device=device) for _ in range(2 + len(gain_functions))]
    table = batch.targets
    if table is not None:
        users, items = table.users.clamp(max=num_users - 1), table.keys & _ITEM_MASK
        belongs = table.users < num_users
        tied = torch.zeros(table.keys.shape, dtype=torch.bool, device=device)
    for start, stop in tiles(vectors):
        scores, excluded = tile_scores(vectors, start, stop), exclusion.of(start, stop)
        labels = None if batch.labels is None else batch.labels[:, start:stop]
        count, relevant, gain_totals = last_group_totals(
            scores, labels, boundary, relevance, gain_functions, threshold, rows, excluded
        )
        for total, part in zip(totals, [count, relevant, *gain_totals] if labels is not None else [count]):
            total += part
        if table is not None:
            local = (items - start).clamp(min=0, max=stop - start - 1)
            here = belongs & (items >= start) & (items < stop) & (scores[users, local] == boundary[users, 0])
            if excluded is not None:
                here &= ~excluded[users, local]
            tied |= here
    if table is not None:
        if rows is not None:  # only the rows asked for, as last_group_totals counts
            chosen = torch.zeros(num_users, dtype=torch.bool, device=device).index_fill_(0, rows, True)
            tied &= chosen[users]
        values = table.values.to(torch.float64)
        relevant_values = relevance.indicator(values)
        totals[1] = table.per_user_sum(tied * relevant_values)
        for row, gain_function in enumerate(gain_functions, start=2):
            totals[row] = table.per_user_sum(tied * gains(values, relevant_values, gain_function, threshold))
    return totals[0], totals[1], totals[2:]


# --- the item table split across processes ----------------------------------------------------


def _group(vectors: DotScores):
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(
            "DotScores num_items is larger than its item_vectors (an item shard): that needs torch.distributed "
            "initialised (the shards of the other processes), or give the whole item table"
        )
    return vectors.process_group


def check_shards(shards: list, num_users: int) -> None:
    """Refuses shards (per process: (item_offset, rows, num_items, batch)) that do not give the
    same catalog and batch on every process or that do not cover ``[0, num_items)`` once."""
    catalogs = sorted({shard[2] for shard in shards})
    if len(catalogs) > 1:
        raise ValueError(f"DotScores num_items must be the same on every process, got {catalogs}")
    batches = sorted({shard[3] for shard in shards})
    if len(batches) > 1:
        raise ValueError(f"DotScores user_vectors must hold the same users on every process, got batches of {batches}")
    expected = 0
    for offset, rows, _, _ in sorted(shards):
        if offset != expected:
            what = "overlap" if offset < expected else "leave a gap"
            raise ValueError(
                f"DotScores item_offset: the shards of the processes {what} at item {min(offset, expected)} "
                f"(shards as (item_offset, rows): {sorted(shard[:2] for shard in shards)}); they must cover "
                f"[0, num_items) once"
            )
        expected = offset + rows
    if expected != catalogs[0]:
        raise ValueError(
            f"DotScores item_offset: the shards of the processes end at item {expected}, not at num_items "
            f"({catalogs[0]}): they must cover [0, num_items) once"
        )
    if num_users < len(shards):
        raise ValueError(
            f"DotScores user_vectors must hold at least one user per process ({len(shards)}) when the item table is "
            f"split, got {num_users}"
        )


def merge_candidates(ids: torch.Tensor, values: torch.Tensor, k: int) -> tuple:
    """The best ``k`` of each row of candidates from several shards, (batch, n) ids (-1: none)
    and their scores, in any order: by score descending, then item id ascending (the dense
    path's tie rule), ids -1 last."""
    by_id = torch.where(ids >= 0, ids, torch.iinfo(torch.int64).max).argsort(dim=1, stable=True)
    ids, values = ids.gather(1, by_id), values.gather(1, by_id)
    return _merge(ids, values, k)


def sharded_topk(full, depth: int, rows: torch.Tensor) -> tuple:
    """``tiled_topk`` of the whole catalog for the users at ``rows`` of the batch ``full`` (a
    ``RankingInput`` of the whole batch, its DotScores one shard): the shard's best candidates
    of every user, gathered from every process (batch x k ids and scores each, and a NaN flag)
    and merged (``merge_candidates``); every process then holds the same ranking."""
    import torch.distributed as dist

    vectors = full.vectors
    group = _group(vectors)
    world = dist.get_world_size(group)
    shards: list = [None] * world
    # host ints only: the shards, the catalog, the batch, and the depth each process asks for
    dist.all_gather_object(
        shards, (vectors.item_offset, vectors.shard_items, vectors.num_items, vectors.num_users, depth), group=group
    )
    check_shards([shard[:4] for shard in shards], vectors.num_users)
    k = min(max(shard[4] for shard in shards), vectors.num_items)  # one width on every process
    ids, values, has_nan = tiled_topk(vectors, k, exclusion_of(full))
    if ids.shape[1] < k:  # a shard narrower than k: padded (-1 ids are merged last)
        ids = torch.nn.functional.pad(ids, (0, k - ids.shape[1]), value=-1)
        values = torch.nn.functional.pad(values, (0, k - values.shape[1]))
    all_ids = [torch.empty_like(ids) for _ in range(world)]
    all_values = [torch.empty_like(values) for _ in range(world)]
    # a NaN flag and a fingerprint of the users (the same users, in the same order, everywhere)
    item_flags = [
        flag for message, flag in full.invalid.items() if message.startswith(_FINITE) and "user_vectors" not in message
    ]
    items_not_finite = torch.stack(item_flags).any() if item_flags else has_nan.new_zeros(())
    flags = torch.cat(
        [
            has_nan.any().to(torch.float64).reshape(1),
            _fingerprint(vectors.user_vectors),
            items_not_finite.to(torch.float64).reshape(1),
        ]
    )
    all_flags = [torch.empty_like(flags) for _ in range(world)]
    dist.all_gather(all_ids, ids.contiguous(), group=group)
    dist.all_gather(all_values, values.contiguous(), group=group)
    dist.all_gather(all_flags, flags, group=group)
    ids, values = merge_candidates(torch.cat(all_ids, 1)[rows], torch.cat(all_values, 1)[rows], k)
    width = min(depth, vectors.num_items)
    gathered = torch.stack(all_flags)
    any_nan = gathered[:, 0].any()
    users_differ = (gathered[:, 1:3] != flags[1:3]).any()
    items_not_finite = gathered[:, 3].any()
    return ids[:, :width], values[:, :width], any_nan.expand(rows.shape[0]), users_differ, items_not_finite


def _fingerprint(user_vectors: torch.Tensor) -> torch.Tensor:
    """(2,) float64 sums of the user vectors, plain and weighted by the row's position: equal
    on processes given the same users in the same order (the same sums of the same values);
    a batch of other users, or of the same users in another order, almost surely differs."""
    users = torch.nan_to_num(user_vectors.to(torch.float64), nan=0.0, posinf=1.0, neginf=-1.0).sum(1)
    position = torch.arange(1, users.shape[0] + 1, dtype=torch.float64, device=users.device)
    return torch.stack([users.sum(), (users * position.sqrt()).sum()])


# --- per-user AUC of held-out items (GAUC) ------------------------------------------------------

IDS_OUTSIDE = "y (ItemIds) holds an id outside [0, num_items) other than the padding -1"
IDS_TWICE = "y (ItemIds) lists an item twice for one user: give each held-out item once"


def held_out_auc(vectors: DotScores, ids: torch.Tensor, grades: torch.Tensor, relevance_threshold: float) -> tuple:
    """``full_rows.per_user_auc`` of the matrix made of the tiles, the positives given as
    ``ItemIds`` (``ids`` (batch, width), -1 padding; positive where the grade passes the
    threshold; every other item is a negative). Returns (AUC (0 where undefined), positives,
    defined, value-check flags), float64 (batch,) tensors and a dict of 0-d bools.

    Two passes over the same tiles (the same products, so the same scores): the first reads each
    positive's score from the tile that holds it; the positives are then sorted once per user
    (padding +inf, past the P real ones). The second counts, for each candidate c (score not
    -inf) with L_c / R_c the positives scored below / at most s_c (``searchsorted`` left /
    right, R clamped to P), the pairs it makes: :math:`T = \\sum_c (P - R_c) + \\frac{1}{2}
    (R_c - L_c)`, the positive-candidate pairs with the candidate below, ties one half. The
    positive-positive pairs add exactly :math:`P^2/2` to T (each pair 1, each positive with
    itself 1/2), so the Mann-Whitney :math:`U = T - P^2/2` and :math:`AUC = U / (P Q)`, Q the
    candidates less P. Memory: (batch, tile) scores and counts, plus (batch, width)."""
    num_users, device = vectors.num_users, vectors.user_vectors.device
    num_items = vectors.num_items
    relevance = Relevance.of(relevance_threshold, grades.dtype)
    listed = ids >= 0
    flags = {
        IDS_OUTSIDE: ((ids < -1) | (ids >= num_items)).any(),
        "y (ItemIds) grades contain NaN relevance values": any_nan(torch.where(listed, grades, 0)),
    }
    by_id = torch.where(listed, ids, -1).sort(1).values
    flags[IDS_TWICE] = ((by_id[:, 1:] == by_id[:, :-1]) & (by_id[:, 1:] >= 0)).any()
    positive = listed & (ids < num_items) & relevance.mask(grades)
    inf = torch.full((), float("inf"), dtype=vectors.user_vectors.dtype, device=device)
    scores_of = torch.full(ids.shape, float("inf"), dtype=vectors.user_vectors.dtype, device=device)
    for start, stop in tiles(vectors):
        scores = tile_scores(vectors, start, stop)
        inside = positive & (ids >= start) & (ids < stop)
        read = scores.gather(1, (ids - start).clamp(min=0, max=stop - start - 1))
        scores_of = torch.where(inside, read, scores_of)
    # a positive scored -inf is not a candidate (as the dense path): it becomes padding
    real = positive & (scores_of > float("-inf"))
    scores_of = torch.where(real, scores_of, inf)
    num_positive = real.sum(1)
    ordered = scores_of.sort(1).values  # NaN sorts last, past +inf: not a real positive's place
    pairs = torch.zeros(num_users, dtype=torch.float64, device=device)
    candidates = torch.zeros_like(pairs)
    has_nan = torch.zeros((), dtype=torch.bool, device=device)
    limit = num_positive.unsqueeze(1)
    for start, stop in tiles(vectors):
        scores = tile_scores(vectors, start, stop)
        has_nan |= scores.isnan().any()
        candidate = scores > float("-inf")
        if ordered.shape[1]:
            below = torch.searchsorted(ordered, scores, right=False).clamp(max=limit)
            at_most = torch.searchsorted(ordered, scores, right=True).clamp(max=limit)
        else:
            below = at_most = torch.zeros(scores.shape, dtype=torch.int64, device=device)
        above = (limit - at_most) * 2 + (at_most - below)  # twice the pairs: integers
        pairs += torch.where(candidate, above, 0).sum(1).to(torch.float64)
        candidates += candidate.sum(1).to(torch.float64)
    positives = num_positive.to(torch.float64)
    negatives = candidates - positives
    defined = (positives > 0) & (negatives > 0)
    u = pairs / 2 - positives * positives / 2
    auc = u / (positives * negatives).clamp(min=1)
    flags[NAN_SCORES] = has_nan
    return torch.where(defined, auc, torch.zeros_like(auc)), positives, defined, flags
