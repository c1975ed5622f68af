"""Per-user quantities that need more than the top k ranked: R-Precision's hits within the first
|R| items and the per-user ROC AUC. Each ranks its rows a chunk of rows at a time, on accelerators
within a quarter of one (batch, num_items) float32 of temporaries and without host synchronisation."""

from __future__ import annotations

from typing import Optional

import torch

from . import tuning
from .relevance import Relevance, any_nan, indicator, invalid_flags, relevant_counts
from .selection import stable_topk
from .ties import last_group_totals


def _sort_pieces(y_pred: torch.Tensor) -> list:
    """Row slices of a full-row sort: cache-sized on CPU but at least a row per thread (torch sorts
    rows in parallel); on accelerators within a quarter of one (batch, num_items) float32 (a byte an
    entry) of temporaries."""
    num_rows, num_cols = y_pred.shape
    return tuning.row_pieces(
        num_rows,
        tuning.SORT_BYTES_PER_ENTRY * num_cols,
        y_pred.device,
        budget_bytes=y_pred.numel(),
        at_least=torch.get_num_threads(),
    )


def own_depth(num_relevant: torch.Tensor, width: int) -> int:
    """How many positions R-Precision ranks: on CPU the batch's largest |R| (a host read, which
    waits for nothing there; at least 1, at most ``width``); on accelerators all ``width`` (no
    synchronisation)."""
    if not tuning.cpu_tuned(num_relevant.device) or num_relevant.numel() == 0:
        return width
    return max(1, min(width, int(num_relevant.max())))


def hits_at_own_depth(
    y_pred: torch.Tensor,
    y: torch.Tensor,
    relevance_threshold: Optional[float],
    ties: str,
    num_relevant: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """For R-Precision: (hits among the top |R| items, |R|) per user, both float64 (batch,).

    |R| differs per user and is unbounded by any cut-off: the rows are ranked to the batch's
    largest |R| (``own_depth``; the top k by ``stable_topk``, or a full sort where every position
    is needed, either a chunk of rows at a time: the ranking's values and int64 indices or keys
    stay within one (batch, num_items) float32); no host synchronisation on accelerators. Under ``ties="average"``
    the items scored above the |R|-th are the first positions of the order, and its tied group
    is counted over the whole row (``last_group_totals``). ``num_relevant``: |R| (batch,) float64,
    if the caller has already counted it."""
    num_rows, num_cols = y_pred.shape
    relevance = Relevance.of(relevance_threshold, y.dtype)
    num_relevant = relevant_counts(y, relevance) if num_relevant is None else num_relevant
    depth = own_depth(num_relevant, num_cols)
    hits = torch.empty_like(num_relevant)
    # a full sort, or the top |R| (its selection keeps an int64 key an entry), a chunk of rows at a time
    full_sort = depth >= num_cols
    pieces = _sort_pieces(y_pred)
    for rows in pieces:
        scores, labels, relevant_count = y_pred[rows].contiguous(), y[rows], num_relevant[rows]
        if full_sort:
            sorted_scores, order = torch.sort(scores, dim=1, descending=True, stable=True)
        else:  # the same order as the stable sort: value descending, then item index
            order = stable_topk(scores, depth)
            sorted_scores = scores.gather(1, order)
        cut = (relevant_count.to(torch.int64) - 1).clamp(min=0).unsqueeze(1)
        relevant_in_order = relevance.indicator(labels.gather(1, order))
        del order
        if ties == "average":  # the items scored above the |R|-th one are the first positions of the order
            boundary = sorted_scores.gather(1, cut)
            above = indicator(torch.gt, sorted_scores, boundary)
            ahead, relevant_ahead = above.sum(1), above.mul_(relevant_in_order).sum(1)
            del sorted_scores, above
            count, relevant, _ = last_group_totals(scores, labels, boundary, relevance)  # over the whole row
            row_hits = relevant_ahead + (relevant_count - ahead) * relevant / count
        else:
            row_hits = relevant_in_order.cumsum_(1).gather(1, cut).squeeze(1)
        hits[rows] = row_hits
    return torch.where(num_relevant > 0, hits, torch.zeros_like(hits)), num_relevant


def per_user_auc(y_pred: torch.Tensor, y: torch.Tensor, relevance_threshold: float):
    """Per-user ROC AUC over the full row with tie-averaged ranks (ties count one half), as
    RecBole's ``GAUC`` and scikit-learn's ``roc_auc_score``. Items scored -inf are not candidates
    (RecBole's convention for masked items). Returns float64 (batch,) tensors: AUC (0 where
    undefined), number of positive candidates, whether the user has both classes, and the value
    checks of ``rank`` (taken in the same pass).

    AUC(u) = (sum of the ascending ranks of the positives - P (P + 1) / 2) / (P Q); each row is
    sorted once (O(num_items log num_items)), a chunk of rows at a time (see
    ``_sort_pieces``); no host synchronisation."""
    num_rows, num_cols = y_pred.shape
    rank_sum = torch.empty(num_rows, dtype=torch.float64, device=y_pred.device)
    positives = torch.empty_like(rank_sum)
    candidates = torch.empty_like(rank_sum)
    has_nan = torch.empty(num_rows, dtype=torch.bool, device=y_pred.device)
    highest = torch.zeros(num_rows, dtype=torch.float64, device=y.device)
    relevance = Relevance.of(relevance_threshold, y.dtype)
    for rows in _sort_pieces(y_pred):
        scores = y_pred[rows].contiguous()
        ascending, order = torch.sort(scores, dim=1)
        has_nan[rows] = ascending[:, -1].isnan()  # NaN sorts last
        if y.dtype != torch.bool:
            highest[rows] = y[rows].amax(1).to(torch.float64)  # NaN propagates
        first = torch.searchsorted(ascending, ascending, right=False)
        after_last = torch.searchsorted(ascending, ascending, right=True)
        masked = (scores == float("-inf")).sum(1, dtype=torch.float64)
        # 1-based rank among candidates, averaged over the tie group
        average_rank = (first + after_last + 1).to(torch.float64) / 2 - masked.unsqueeze(1)
        is_positive = relevance.mask(y[rows].gather(1, order)) & (ascending > float("-inf"))
        rank_sum[rows] = torch.where(is_positive, average_rank, 0.0).sum(1)
        positives[rows] = is_positive.sum(1, dtype=torch.float64)
        candidates[rows] = num_cols - masked
    negatives = candidates - positives
    defined = (positives > 0) & (negatives > 0)
    auc = (rank_sum - positives * (positives + 1) / 2) / (positives * negatives).clamp(min=1)
    invalid = invalid_flags(has_nan.any(), any_nan(highest))
    return torch.where(defined, auc, torch.zeros_like(auc)), positives, defined, invalid
