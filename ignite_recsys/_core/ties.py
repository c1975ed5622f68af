"""The tie policy: what each position of a ranking holds when scores tie.

Ties. ``ties="stable"`` uses the order above. ``ties="average"`` reports the expected value over
all orderings of tied scores (McSherry & Najork, ECIR 2008): each position of a tie group gets the
group's mean relevance and gain, and the quantities that are not linear in the hits (first hit,
precision at each hit) use their exact expectation under a uniformly random order of the group.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from . import tuning
from .relevance import gains, indicator


def stable_positions(top_relevant: torch.Tensor, top_gains: list):
    """The per-position quantities of ``RankedBatch`` under the stable order: (hit, the gains of
    each gain function, hit * hits so far, first hit)."""
    hits_so_far = top_relevant.cumsum(1)
    hit_times_hits_so_far = top_relevant * hits_so_far
    first_hit = hits_so_far.eq_(1).mul_(top_relevant)  # 1 at the first hit; in its buffer, in place
    return top_relevant, top_gains, hit_times_hits_so_far, first_hit


def boundary_ties(
    scores: torch.Tensor, order: torch.Tensor, depth: int, complete: bool = False, ranked: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """(batch, depth) float64: 1 at position i (0-based) when the items at positions i and i + 1
    of ``order`` (best first, ``depth`` or ``depth + 1`` columns, -1 = no item) are both listed
    and tie in score. ``complete``: ``order`` lists an item at every position (no -1); then
    ``ranked``, if given, holds the scores at ``order`` (else they are gathered)."""
    if complete:
        ranked = scores.gather(1, order) if ranked is None else ranked
        tie = indicator(torch.eq, ranked[:, 1:], ranked[:, :-1])
    else:
        listed = order >= 0
        ranked = scores.gather(1, order.clamp(min=0))
        tie = ((ranked[:, 1:] == ranked[:, :-1]) & listed[:, 1:] & listed[:, :-1]).to(torch.float64)
    if tie.shape[1] > depth:
        return tie[:, :depth]
    return tie if tie.shape[1] == depth else torch.nn.functional.pad(tie, (0, depth - tie.shape[1]))


def tie_expectations(top_scores, top_relevant, top_gains, last_group, continues):
    """Per-position expectations over uniformly random orders within each group of tied scores.
    ``continues`` (batch,) bool: the last listed score ties with the next candidate of the
    ranking (``tie_continues``), so its group may hold candidates past the cut; for those rows
    ``last_group`` gives (count, relevant count, [total gain of each gain function]) (batch,) of
    the candidates tied with it over the whole row. Elsewhere the group lies within the listed positions (the
    ranking is sorted) and ``last_group`` is not read. A NaN in ``top_scores`` marks an empty
    position (a group of its own, holding nothing)."""
    depth = top_scores.shape[1]
    position = torch.arange(depth, device=top_scores.device)
    starts_group = torch.ones_like(top_scores, dtype=torch.bool)
    starts_group[:, 1:] = top_scores[:, 1:] != top_scores[:, :-1]
    ends_group = torch.ones_like(starts_group)
    ends_group[:, :-1] = starts_group[:, 1:]
    start = torch.where(starts_group, position, 0).cummax(1).values
    end = torch.where(ends_group, position, depth - 1).flip(1).cummin(1).values.flip(1)

    def group_total(per_position):
        running = per_position.cumsum(1)
        before = torch.where(start > 0, running.gather(1, (start - 1).clamp(min=0)), 0.0)
        return running.gather(1, end) - before

    # The last group may continue past the cut: take its totals over the whole row.
    in_last_group = (top_scores == top_scores[:, -1:]) & continues.unsqueeze(1)
    last_count, last_relevant, last_gains = last_group
    size = torch.where(in_last_group, last_count.unsqueeze(1), (end - start + 1).to(torch.float64))
    relevant = torch.where(in_last_group, last_relevant.unsqueeze(1), group_total(top_relevant))
    expected_gains = [
        torch.where(in_last_group, last_gain.unsqueeze(1), group_total(top_gain)) / size
        for top_gain, last_gain in zip(top_gains, last_gains)
    ]

    hits_before_group = (top_relevant.cumsum(1) - top_relevant).gather(1, start)
    slot = (position - start + 1).to(torch.float64)  # 1-based position inside the group
    hit = relevant / size
    others = (slot - 1) * (relevant - 1) / (size - 1).clamp(min=1)
    hit_times_hits_so_far = hit * (hits_before_group + 1 + others)
    first_hit = (hits_before_group == 0) * _first_success_probability(slot, size, relevant, start)
    return hit, expected_gains, hit_times_hits_so_far, first_hit


def _first_success_probability(slot, size, successes, start):
    """P(the first of ``successes`` marked items in a random order of ``size`` is at ``slot``)
    = C(size - slot, successes - 1) / C(size, successes) = r / (n - x + 1) * prod_{s < x} (1 - r /
    (n - s + 1)) (n = size, r = successes, x = slot): the items before it unmarked, it marked. The
    product as a sum of ``log1p`` over the group's earlier slots (``start``: the position its
    group starts at): exact to a few ulps, where a ratio of ``lgamma`` terms of about n ln n each
    would lose n ln n ulps (1e-9 at a million tied items)."""
    possible = (successes >= 1) & (slot <= size - successes + 1)
    n, x, r = size, slot, successes.clamp(min=1)
    # the factor of each slot for the slots after it; past n - r + 1 no slot is possible (0, unread)
    log_factor = torch.where(x <= n - r, torch.log1p(-r / (n - x + 1)), torch.zeros_like(x))
    running = log_factor.cumsum(1)
    before_group = torch.where(start > 0, running.gather(1, (start - 1).clamp(min=0)), 0.0)
    log_unmarked_before = running - log_factor - before_group
    return torch.where(possible, r / (n - x + 1) * torch.exp(log_unmarked_before), torch.zeros_like(x))


def tie_continues(tie: torch.Tensor) -> torch.Tensor:
    """(batch,) bool: the last listed position ties with the next candidate, from
    ``boundary_ties`` of an order with one position past the cut."""
    return tie[:, -1] > 0


def rows_to_read(continues: torch.Tensor) -> Optional[torch.Tensor]:
    """The rows whose last tie group is read over the whole row: on CPU those where it continues
    past the cut (1-D int64, read on the host, which waits for nothing there; none at all for
    scores without ties); on accelerators None, every row (no synchronisation)."""
    return continues.nonzero().flatten() if tuning.cpu_tuned(continues.device) else None


def last_group_totals(scores, labels, boundary, relevance, gain_functions=(), threshold=None, rows=None, excluded=None):
    """Over the whole row, the candidates whose score equals ``boundary`` (batch, 1): their
    number, how many are relevant and their total gain under each of ``gain_functions`` (a
    list; without ``labels`` (None) only the number); over ``rows`` only (1-D int64,
    ``rows_to_read``; None: every row), 0 in the others. ``excluded`` (batch, num_items) bool:
    items that are no candidates. A few pieces of rows at a time (``tuning.row_pieces``, float64
    temporaries of ``tuning.TIE_PASS_BYTES_PER_ENTRY``); chosen rows are copied a piece at a time.
    On CPU the tied candidates of a piece are listed (one comparison of its scores on the host)
    and only their labels read; elsewhere every label of the piece is weighed by a 0/1 flag."""
    num_rows, num_cols = scores.shape
    totals = torch.zeros(2 + len(gain_functions), num_rows, dtype=torch.float64, device=scores.device)
    rows = None if rows is not None and rows.numel() == num_rows else rows  # every row: no copies
    row_bytes = tuning.TIE_PASS_BYTES_PER_ENTRY * num_cols
    if rows is None:
        pieces = tuning.row_pieces(num_rows, row_bytes, scores.device)
    else:
        pieces = [rows[piece] for piece in tuning.row_pieces(rows.numel(), row_bytes, scores.device)]
    piece_pass = _listed_piece_totals if tuning.cpu_tuned(scores.device) else _weighed_piece_totals
    for piece in pieces:
        piece_totals = (
            totals[:, piece]
            if isinstance(piece, slice)
            else torch.empty(totals.shape[0], len(piece), dtype=torch.float64, device=scores.device)
        )
        piece_pass(piece_totals, scores, labels, boundary, excluded, piece, relevance, gain_functions, threshold)
        if not isinstance(piece, slice):
            totals.index_copy_(1, piece, piece_totals)
    return totals[0], totals[1], list(totals[2:])


def _weighed_piece_totals(out, scores, labels, boundary, excluded, piece, relevance, gain_functions, threshold):
    """``last_group_totals`` of the rows ``piece`` into ``out`` (2 + len(gain_functions), rows):
    every label weighed by the 0/1 flag of a tied candidate (no host read)."""
    tied = _rows(scores, piece) == _rows(boundary, piece)
    if excluded is not None:
        tied &= ~_rows(excluded, piece)
    tied = tied.to(torch.float64)
    torch.sum(tied, 1, out=out[0])
    if labels is not None:
        label_values = _rows(labels, piece).to(torch.float64)
        relevant = relevance.indicator(label_values)
        torch.sum(tied * relevant, 1, out=out[1])
        for row, gain_function in enumerate(gain_functions, start=2):
            torch.sum(tied * gains(label_values, relevant, gain_function, threshold), 1, out=out[row])


def _listed_piece_totals(out, scores, labels, boundary, excluded, piece, relevance, gain_functions, threshold):
    """``last_group_totals`` of the rows ``piece`` into ``out`` on CPU: the tied candidates listed
    (numpy's comparison into bool vectorises, torch's does not), then the labels of those alone,
    their relevance and gains computed as the weighed pass computes them, summed per row in order."""
    block, at = _rows(scores, piece), _rows(boundary, piece)
    if block.dtype in (torch.float32, torch.float64):
        tied = np.equal(block.detach().numpy(), at.detach().numpy())
    else:
        tied = (block == at).numpy()
    if excluded is not None:
        tied &= ~_rows(excluded, piece).numpy()
    listed = torch.from_numpy(np.flatnonzero(tied))
    num_cols = block.shape[1]
    listed_rows = torch.div(listed, num_cols, rounding_mode="floor")
    out.zero_()
    out[0].index_add_(0, listed_rows, torch.ones(listed.shape, dtype=torch.float64))
    if labels is not None:
        label_values = _rows(labels, piece).reshape(-1).index_select(0, listed).to(torch.float64).unsqueeze(0)
        relevant = relevance.indicator(label_values)
        out[1].index_add_(0, listed_rows, relevant[0])
        for row, gain_function in enumerate(gain_functions, start=2):
            out[row].index_add_(0, listed_rows, gains(label_values, relevant, gain_function, threshold)[0])


def _rows(tensor: torch.Tensor, piece) -> torch.Tensor:
    """The rows ``piece`` (a slice: a view; an index tensor: a copy) of ``tensor``."""
    return tensor[piece] if isinstance(piece, slice) else tensor.index_select(0, piece)
