"""Pure per-user metric values from a :class:`~ignite_recsys._core.ranking.RankedBatch`.

Each function returns a float64 tensor of shape (batch, len(top_k)), column j for cut-off
``top_k[j]`` (ascending). A cut-off beyond the number of items reads the whole (shorter) list.
Positions are 1-based; ``hits@k`` is the number of relevant items among the top k.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import torch

from ._core.ranking import RankedBatch
from ._core.tuning import device_constant
from ._registry import REGISTRY

# the normalization choices of each metric, from the registry of the ranking metrics
MAP_NORMALIZATIONS = REGISTRY["map"].normalization.values
RECALL_NORMALIZATIONS = REGISTRY["recall"].normalization.values
PRECISION_NORMALIZATIONS = REGISTRY["precision"].normalization.values


def _at(per_position: torch.Tensor, top_k: Sequence[int]) -> torch.Tensor:
    """Running sums of a per-position quantity read at each cut-off."""
    depth = per_position.shape[1]
    columns = device_constant([min(k, depth) - 1 for k in top_k], torch.int64, per_position.device)
    return per_position.cumsum(1).index_select(1, columns)


def _positions(ranked: RankedBatch) -> torch.Tensor:
    return _position_constants(ranked.depth, ranked.hit.device)[0]


@lru_cache(maxsize=64)
def _position_constants(depth: int, device: torch.device) -> tuple:
    """(positions 1..depth, discounts 1 / log2(position + 1)), float64, made once per depth and
    device; read-only."""
    positions = torch.arange(1, depth + 1, dtype=torch.float64, device=device)
    return positions, 1.0 / torch.log2(positions + 1)


def _cutoffs(top_k: Sequence[int], like: torch.Tensor) -> torch.Tensor:
    return device_constant(top_k, torch.float64, like.device)


def _ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """numerator / denominator, 0 where the denominator is 0."""
    return torch.where(denominator > 0, numerator / denominator, 0.0)


def hits(ranked: RankedBatch, top_k: Sequence[int]) -> torch.Tensor:
    """Number of relevant items in the top k."""
    return _at(ranked.hit, top_k)


def hit_rate(ranked: RankedBatch, top_k: Sequence[int]) -> torch.Tensor:
    """HitRate@k = 1 if any relevant item is in the top k, else 0."""
    return _at(ranked.first_hit, top_k)


def recall(ranked: RankedBatch, top_k: Sequence[int], normalization: str = "relevant") -> torch.Tensor:
    """Recall@k = hits@k / |R|  (or / min(k, |R|) with ``normalization="min_k_relevant"``)."""
    relevant = ranked.num_relevant.unsqueeze(1)
    if normalization == "min_k_relevant":
        relevant = torch.minimum(relevant, _cutoffs(top_k, relevant))
    return _ratio(hits(ranked, top_k), relevant.expand(-1, len(top_k)))


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
    return _at(ranked.first_hit / _positions(ranked), top_k)


def average_precision(ranked: RankedBatch, top_k: Sequence[int], normalization: str = "min_k_relevant") -> torch.Tensor:
    """AP@k = (sum over relevant positions i <= k of P@i) / Z, with Z = min(k, |R|) (RecBole),
    |R| (trec_eval, ranx) or hits@k (torchmetrics; the mean precision at the hits)."""
    numerator = _at(ranked.hit_times_hits_so_far / _positions(ranked), top_k)
    if normalization == "hits":
        return _ratio(numerator, hits(ranked, top_k))
    relevant = ranked.num_relevant.unsqueeze(1).expand(-1, len(top_k))
    if normalization == "min_k_relevant":
        relevant = torch.minimum(relevant, _cutoffs(top_k, relevant))
    return _ratio(numerator, relevant)


def discounts(depth: int, device) -> torch.Tensor:
    """1 / log2(i + 1) for positions i = 1..depth (read-only)."""
    return _position_constants(depth, torch.device(device))[1]


def ndcg(ranked: RankedBatch, top_k: Sequence[int]) -> torch.Tensor:
    """NDCG@k = DCG@k / IDCG@k with DCG@k = sum_{i<=k} gain_i / log2(i + 1) and IDCG@k the DCG@k
    of the ideal ranking (relevance sorted descending); 0 when IDCG@k = 0."""
    discount = discounts(ranked.depth, ranked.hit.device)
    return _ratio(_at(ranked.gain * discount, top_k), _at(ranked.ideal_gain * discount, top_k))
