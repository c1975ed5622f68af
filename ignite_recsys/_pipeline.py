"""The ranking step for every input form: a :class:`~ignite_recsys._adapters.RankingInput` becomes
one :class:`~ignite_recsys._ranking.RankedBatch`.

Only candidates are ranked: with ``exclude`` an excluded item takes no position, and positions
past a user's candidates are empty (no hit, no gain; Precision still divides by k). The relevant
count |R| and the ideal ranking count every relevant item, excluded or not (RecBole's behaviour
with history masking), so ``RankedItems(ids)`` scores exactly as its list would with every other
item excluded. The plain dense ``(scores, labels)`` form goes straight to :func:`rank`.
"""

from __future__ import annotations

from typing import Optional

import torch

from ._adapters import RankingInput
from ._ranking import (
    Relevance,
    RankedBatch,
    _gain_flags,
    _ideal_gains,
    _ideal_needs_selection,
    _invalid_flags,
    _last_group_totals,
    _relevance_pass,
    _tie_expectations,
    _value_group_size,
    binary_ideal_gains,
    boundary_ties,
    full_row_checks,
    gains,
    hits_at_own_depth,
    rank,
    stable_positions,
    stable_topk,
)
from ._selection_excluding import stable_topk_excluding
from ._validation import GainFunction

_NAN_SCORES = "y_pred contains NaN scores (+inf and -inf are allowed)"


def rank_input(
    batch: RankingInput,
    *,
    depth: int,
    relevance_threshold: Optional[float],
    ties: str = "stable",
    gain_function: Optional[GainFunction] = None,
    ideal: bool = False,
    count_relevant: bool = True,
) -> RankedBatch:
    """The shared ranking step for any input form (see the module docstring)."""
    if batch.is_dense:
        ranked = rank(
            batch.scores, batch.labels, depth=depth, relevance_threshold=relevance_threshold, ties=ties,
            gain_function=gain_function, ideal=ideal, count_relevant=count_relevant,
        )
        ranked.invalid.update(batch.invalid)
        return ranked
    # one position more than the cut-offs need: whether a cut-off splits tied scores
    order, num_candidates, invalid = ranked_candidates(batch, depth + 1)
    invalid.update(batch.invalid)
    depth = min(depth, order.shape[1])
    tie = None if batch.scores is None else boundary_ties(batch.scores, order, depth)
    order = order[:, :depth]
    listed = order >= 0

    label_dtype = batch.labels.dtype if batch.labels is not None else batch.targets.values.dtype
    relevance = Relevance.of(relevance_threshold, label_dtype)
    zero = torch.zeros((), dtype=torch.float64, device=order.device)
    if batch.labels is not None:
        labels = batch.labels.contiguous()
        # the ideal ranking's first selection step is taken in the same pass over the labels
        selects = ideal and _ideal_needs_selection(labels, gain_function)
        label_group = _value_group_size(labels.shape[1], depth) if selects else None
        num_relevant, has_relevant, lowest_label, label_maxima = _relevance_pass(
            labels, relevance, strided_group=label_group
        )
        # ids outside the catalog are refused by a value check; clamped here so that the gather is safe
        safe = order.clamp(min=0, max=labels.shape[1] - 1)
        top_labels = torch.where(listed, labels.gather(1, safe).to(torch.float64), zero)
    else:
        table = batch.targets
        values = table.values.to(torch.float64)
        num_relevant = table.per_user_sum(relevance.indicator(values))
        has_relevant = num_relevant > 0
        lowest_label = values.amin() if values.numel() else zero
        top_labels = table.lookup(order)[0].to(torch.float64)
    top_relevant = relevance.indicator(top_labels)
    top_gain = None if gain_function is None else gains(top_labels, top_relevant, gain_function, relevance_threshold)

    if ties == "stable" or batch.scores is None:  # a ranked id list has no ties
        hit, gain, hit_times_hits_so_far, first_hit = stable_positions(top_relevant, top_gain)
    else:
        nan = torch.full((), float("nan"), dtype=batch.scores.dtype, device=order.device)
        top_scores = torch.where(listed, batch.scores.gather(1, order.clamp(min=0)), nan)
        last_group = _candidate_group_totals(batch, top_scores[:, -1:], relevance, gain_function, relevance_threshold)
        hit, gain, hit_times_hits_so_far, first_hit = _tie_expectations(top_scores, top_relevant, top_gain, last_group)

    ideal_gain = None
    if ideal:
        if batch.labels is not None:
            ideal_gain = _ideal_gains(
                batch.labels.contiguous(), num_relevant, depth, relevance, gain_function, label_maxima, relevance_threshold
            )
        elif not _ideal_needs_selection(batch.targets.values, gain_function):
            ideal_gain = binary_ideal_gains(num_relevant, depth, gain_function, relevance_threshold)
        else:
            best = batch.targets.top_values(depth)
            ideal_gain = gains(best, relevance.indicator(best), gain_function, relevance_threshold)

    invalid.update(_invalid_flags(invalid.pop(_NAN_SCORES, torch.zeros((), dtype=torch.bool, device=order.device)),
                                  lowest_label))
    if gain_function is not None:
        invalid.update(_gain_flags(gain_function, gain, ideal_gain))
    return RankedBatch(
        batch.num_items or 0, depth, hit, hit_times_hits_so_far, first_hit, num_relevant, has_relevant, gain,
        ideal_gain, invalid, num_candidates, tie,
    )


def ranked_candidates(batch: RankingInput, depth: int):
    """(order (batch, D) int64 item ids in rank order, -1 past the user's candidates; the number
    of candidates (batch,) float64; value-check flags). D = min(depth, num_items) for scores,
    min(depth, K) for ranked ids."""
    device = batch.device
    if batch.ranked_ids is not None:
        ids = batch.ranked_ids
        listed = ids >= 0
        if batch.excluded_table is not None:
            listed = listed & ~batch.excluded_table.lookup(ids)[1]
        order = _compact(ids, listed)[:, : min(depth, ids.shape[1])]
        return order, listed.sum(1, dtype=torch.float64), {}
    scores = batch.scores.contiguous()
    depth = min(depth, scores.shape[1])
    if batch.excluded is None:
        order, has_nan = stable_topk(scores, depth, detect_nan=True)
        num_candidates = torch.full(has_nan.shape, float(scores.shape[1]), dtype=torch.float64, device=device)
    else:
        order, has_nan = stable_topk_excluding(
            scores, depth, batch.excluded, detect_nan=True, entries=batch.excluded_entries
        )
        num_candidates = (scores.shape[1] - count_true(batch.excluded)).to(torch.float64)
    return order, num_candidates, {_NAN_SCORES: has_nan.any()}


def count_true(mask: torch.Tensor) -> torch.Tensor:
    """(batch,) int64: the True entries of each row of a (batch, n) bool mask. A reduction over
    bool runs several times slower on CPU than this byte-wise popcount: eight mask bytes read
    as one int64 word, multiplied by 0x0101...01, hold their sum in the top byte."""
    rows, width = mask.shape
    words = width // 8
    if mask.is_contiguous() and width % 8 == 0 and words:
        return ((mask.view(torch.int64) * 0x0101010101010101) >> 56).sum(1)
    return mask.view(torch.uint8).sum(1, dtype=torch.int64)


def _compact(ids: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """The kept ids of each row moved to the front in their order, -1 after them."""
    width = ids.shape[1]
    position = torch.arange(width, device=ids.device)
    order = torch.sort(torch.where(keep, position, position + width), dim=1).indices
    return torch.where(keep.gather(1, order), ids.gather(1, order), torch.full_like(ids, -1))


def _candidate_group_totals(batch: RankingInput, boundary, relevance, gain_function, threshold):
    """Over each user's candidates, those scored ``boundary`` (batch, 1): their number, how many
    are relevant and their total gain (``ties="average"`` with dense scores)."""
    scores, excluded = batch.scores, batch.excluded
    if batch.labels is not None:
        labels = batch.labels
        if excluded is not None:  # an excluded item joins no tie group: give it a score never tied
            scores = torch.where(excluded, torch.full((), float("nan"), dtype=scores.dtype, device=scores.device), scores)
        return _last_group_totals(scores, labels, boundary, relevance, gain_function, threshold)
    candidate = torch.ones_like(scores, dtype=torch.bool) if excluded is None else ~excluded
    count = ((scores == boundary) & candidate).sum(1, dtype=torch.float64)
    table = batch.targets
    items = (table.keys & ((1 << 32) - 1)).clamp(max=scores.shape[1] - 1)
    users = table.users.clamp(max=scores.shape[0] - 1)
    tied = (scores[users, items] == boundary[users, 0]) & candidate[users, items] & (table.users < scores.shape[0])
    values = table.values.to(torch.float64)
    relevant = relevance.indicator(values)
    totals = [count, table.per_user_sum(tied * relevant)]
    entry_gain = gains(values, relevant, gain_function, threshold) if gain_function is not None else relevant * 0
    totals.append(table.per_user_sum(tied * entry_gain))
    return totals[0], totals[1], totals[2]


def hits_within_own_depth(batch: RankingInput, relevance_threshold: Optional[float], ties: str):
    """For R-Precision: (hits among each user's first |R| candidates, |R|, value-check flags),
    float64 (batch,). |R| is unbounded by any cut-off, so every candidate is ranked."""
    if batch.is_dense:
        hits, num_relevant = hits_at_own_depth(batch.scores, batch.labels, relevance_threshold, ties)
        invalid = full_row_checks(batch.scores, batch.labels)
        invalid.update(batch.invalid)
        return hits, num_relevant, invalid
    width = batch.num_items if batch.scores is not None else batch.ranked_ids.shape[1]
    ranked = rank_input(batch, depth=width, relevance_threshold=relevance_threshold, ties=ties)
    cut = (ranked.num_relevant.to(torch.int64) - 1).clamp(min=0, max=ranked.depth - 1).unsqueeze(1)
    hits = ranked.hit.cumsum(1).gather(1, cut).squeeze(1)
    return torch.where(ranked.num_relevant > 0, hits, 0.0), ranked.num_relevant, ranked.invalid
