"""The per-user formulas of the ranking metrics, from a :class:`~ignite_recsys._core.ranking.RankedBatch`.

Each formula returns a float64 tensor of shape (batch, len(top_k)), column j for cut-off
``top_k[j]`` (ascending); its keyword arguments are the metric's conventions (the registry's
``Option``s read by the formula). A cut-off beyond the number of items reads the whole (shorter)
list. Positions are 1-based; ``hits@k`` is the number of relevant items among the top k.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Sequence

import torch

from .ranking import RankedBatch, hits_within_own_depth
from .tuning import device_constant


def _running(ranked: RankedBatch, top_k: Sequence[int]) -> dict:
    """The running sums of every per-position quantity the formulas read, at each cut-off:
    {name: (batch, len(top_k))}, made once per ranked batch and cut-offs and shared by the metrics
    (read-only): the quantities stacked, weighted by position (1, 1 / position or the discount
    1 / log2(position + 1)) in one product, summed in one cumulative sum. Each row sums in the
    same order as a running sum of that quantity alone."""
    key = ("running", tuple(top_k))
    memo = ranked.__dict__.setdefault("_memo", {})
    if key not in memo:
        quantities = {
            "hits": ranked.hit,
            "first_hit": ranked.first_hit,
            "reciprocal_rank": ranked.first_hit,  # / position
            "precision_at_hits": ranked.hit_times_hits_so_far,  # / position
            "dcg": ranked.gain,  # * discount
            "idcg": ranked.ideal_gain,  # * discount
        }
        names = tuple(name for name, value in quantities.items() if value is not None)
        depth = ranked.hit.shape[1]
        weights = _position_weights(names, depth, ranked.hit.device)
        columns = device_constant([min(k, depth) - 1 for k in top_k], torch.int64, ranked.hit.device)
        # in place: one (quantities, batch, depth) buffer, not three (fresh memory is slow to touch)
        sums = torch.stack([quantities[name] for name in names]).mul_(weights).cumsum_(2).index_select(2, columns)
        memo[key] = dict(zip(names, sums.unbind(0)))
        if ranked.num_relevant is not None:
            memo[key]["relevant"] = ranked.num_relevant.unsqueeze(1)
    return memo[key]


@lru_cache(maxsize=64)
def _position_weights(names: tuple, depth: int, device: torch.device) -> torch.Tensor:
    """(len(names), 1, depth) float64: the weight of each position in each running sum of
    ``_running``; read-only."""
    positions = torch.arange(1, depth + 1, dtype=torch.float64, device=device)
    discount = 1.0 / torch.log2(positions + 1)
    weight = {"reciprocal_rank": 1.0 / positions, "precision_at_hits": 1.0 / positions, "dcg": discount, "idcg": discount}
    ones = torch.ones(depth, dtype=torch.float64, device=device)
    return torch.stack([weight.get(name, ones) for name in names]).unsqueeze(1)


def _cutoffs(top_k: Sequence[int], like: torch.Tensor) -> torch.Tensor:
    return device_constant(top_k, torch.float64, like.device)


def _ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """numerator / denominator, 0 where the denominator is 0 (every ratio here has a numerator of
    0 then, so the quotient is NaN: one division and one replacement, no comparison and select)."""
    return torch.nan_to_num(numerator / denominator, nan=0.0, posinf=math.inf, neginf=-math.inf)


def hits(ranked: RankedBatch, top_k: Sequence[int]) -> torch.Tensor:
    """Number of relevant items in the top k (computed once per ranked batch and cut-offs, shared
    by the metrics that read it; read-only)."""
    return _running(ranked, top_k)["hits"]


def hit_rate(ranked: RankedBatch, top_k: Sequence[int]) -> torch.Tensor:
    """HitRate@k = 1 if any relevant item is in the top k, else 0."""
    return _running(ranked, top_k)["first_hit"]


def recall(ranked: RankedBatch, top_k: Sequence[int], normalization: str = "relevant") -> torch.Tensor:
    """Recall@k = hits@k / |R|  (or / min(k, |R|) with ``normalization="min_k_relevant"``)."""
    relevant = _running(ranked, top_k)["relevant"]
    if normalization == "min_k_relevant":
        relevant = torch.minimum(relevant, _cutoffs(top_k, relevant))
    return _ratio(hits(ranked, top_k), relevant)


def precision(ranked: RankedBatch, top_k: Sequence[int], normalization: str = "k") -> torch.Tensor:
    """Precision@k = hits@k / k  (or / min(k, number of candidates) with
    ``normalization="min_k_items"``; the candidates are all items unless some were excluded or
    the predictions are a ranked list; 0 for a user without candidates)."""
    cutoffs = _cutoffs(top_k, ranked.hit)
    if normalization == "min_k_items":
        if ranked.num_candidates is None:
            cutoffs = cutoffs.clamp(max=ranked.num_items)
        else:
            return _ratio(hits(ranked, top_k), torch.minimum(cutoffs, ranked.num_candidates.unsqueeze(1)))
    return hits(ranked, top_k) / cutoffs


def f1(ranked: RankedBatch, top_k: Sequence[int]) -> torch.Tensor:
    """F1@k, the harmonic mean of P@k = hits/k and R@k = hits/|R|, which is 2 hits@k / (k + |R|)."""
    total = _cutoffs(top_k, ranked.hit) + ranked.num_relevant.unsqueeze(1)
    return 2 * hits(ranked, top_k) / total


def reciprocal_rank(ranked: RankedBatch, top_k: Sequence[int]) -> torch.Tensor:
    """RR@k = 1 / rank of the first relevant item if it is in the top k, else 0."""
    return _running(ranked, top_k)["reciprocal_rank"]


def average_precision(ranked: RankedBatch, top_k: Sequence[int], normalization: str = "min_k_relevant") -> torch.Tensor:
    """AP@k = (sum over relevant positions i <= k of P@i) / Z, with Z = min(k, |R|) (RecBole),
    |R| (trec_eval, ranx) or hits@k (torchmetrics; the mean precision at the hits)."""
    numerator = _running(ranked, top_k)["precision_at_hits"]
    if normalization == "hits":
        return _ratio(numerator, hits(ranked, top_k))
    relevant = _running(ranked, top_k)["relevant"]
    if normalization == "min_k_relevant":
        relevant = torch.minimum(relevant, _cutoffs(top_k, relevant))
    return _ratio(numerator, relevant)


def ndcg(ranked: RankedBatch, top_k: Sequence[int]) -> torch.Tensor:
    """NDCG@k = DCG@k / IDCG@k with DCG@k = sum_{i<=k} gain_i / log2(i + 1) and IDCG@k the DCG@k
    of the ideal ranking (relevance sorted descending); 0 when IDCG@k = 0."""
    running = _running(ranked, top_k)
    return _ratio(running["dcg"], running["idcg"])


def r_precision(batch, relevance_threshold, ties) -> tuple:
    """R-Precision = hits among the first |R| candidates / |R|, 0 without a relevant item; from
    the input itself, as |R| is unbounded by any cut-off (every candidate is ranked). Returns
    (values (batch, 1), has a relevant item (batch,) bool, value checks)."""
    hits, num_relevant, invalid = hits_within_own_depth(batch, relevance_threshold, ties)
    return _ratio(hits, num_relevant).unsqueeze(1), num_relevant > 0, invalid
