"""The per-user formulas of the ranking metrics, from a :class:`~ignite_recsys._core.ranking.RankedBatch`.

Each formula returns a float64 tensor of shape (batch, len(top_k)), column j for cut-off
``top_k[j]`` (ascending); its keyword arguments are the metric's conventions (the registry's
``Option``s read by the formula). A cut-off beyond the number of items reads the whole (shorter)
list. Positions are 1-based; ``hits@k`` is the number of relevant items among the top k.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Callable, Sequence

import torch

from .ranking import RankedBatch, hits_within_own_depth
from .tuning import device_constant


# The per-position quantity behind each running sum of ``_running`` (its weight: ``_position_weights``)
_QUANTITIES: dict[str, Callable[[RankedBatch], torch.Tensor]] = {
    "hits": lambda ranked: ranked.hit,
    "first_hit": lambda ranked: ranked.first_hit,
    "reciprocal_rank": lambda ranked: ranked.first_hit,  # / position
    "precision_at_hits": lambda ranked: ranked.hit_times_hits_so_far,  # / position
    "dcg": lambda ranked: ranked.gain,  # * discount
    "idcg": lambda ranked: ranked.ideal_gain,  # * discount
}


def _running(ranked: RankedBatch, top_k: Sequence[int], name: str, discount: Any = "log2") -> torch.Tensor:
    """The running sum of the quantity ``name`` (``_QUANTITIES``) at each cut-off, (batch,
    len(top_k)), or ``"relevant"``: |R| (batch, 1). Kept in ``ranked.running_sums`` per cut-offs
    and discount and shared by the metrics (read-only): on first use every quantity the ranking
    step computed is stacked, weighted by position (1, 1 / position or the discount, see
    ``discount_weights``) in one product, summed in one cumulative sum; another quantity is summed
    alone when first read. Each row sums in the same order as a running sum of that quantity alone."""
    key = (tuple(top_k), discount)
    sums = ranked.running_sums.get(key)
    if sums is None:
        names: tuple[str, ...] = ("hits", "first_hit", "reciprocal_rank", "precision_at_hits")
        names += ("dcg",) if ranked.gain_function is not None else ()
        names += ("idcg",) if ranked.holds_ideal_gain else ()
        sums = ranked.running_sums[key] = _running_sums(ranked, top_k, names, discount)
    if name not in sums:
        if name == "relevant":
            sums[name] = ranked.num_relevant.unsqueeze(1)
        else:
            sums.update(_running_sums(ranked, top_k, (name,), discount))
    return sums[name]


def _running_sums(ranked: RankedBatch, top_k: Sequence[int], names: tuple, discount: Any) -> dict[str, torch.Tensor]:
    """{name: (batch, len(top_k))} the running sums of the quantities ``names`` at each cut-off."""
    weights = _position_weights(names, ranked.hit.shape[1], ranked.hit.device, discount)
    # in place: one (quantities, batch, depth) buffer, not three (fresh memory is slow to touch)
    stacked = torch.stack([_QUANTITIES[name](ranked) for name in names])
    return dict(zip(names, _at_cutoffs(stacked.mul_(weights).cumsum_(2), top_k).unbind(0)))


def _at_cutoffs(running: torch.Tensor, top_k: Sequence[int]) -> torch.Tensor:
    """The columns of running sums (..., depth) at each cut-off (a cut-off past the depth reads
    the last column)."""
    depth = running.shape[-1]
    columns = device_constant([min(k, depth) - 1 for k in top_k], torch.int64, running.device)
    return running.index_select(running.ndim - 1, columns)


def discount_weights(discount: Any, positions: torch.Tensor) -> torch.Tensor:
    """The weight of each 1-based position (float64): ``"log2"`` 1 / log2(i + 1) (Järvelin &
    Kekäläinen; ranx, trec_eval, RecBole), ``"log2_clip"`` 1 / log2(max(i, 2)) (LensKit's default
    ``LogRankWeight``: ranks 1 and 2 weigh 1), or a callable of the positions."""
    if discount == "log2":
        return 1.0 / torch.log2(positions + 1)
    if discount == "log2_clip":
        return 1.0 / torch.log2(positions.clamp(min=2))
    return discount(positions).to(torch.float64)


@lru_cache(maxsize=64)
def _position_weights(names: tuple, depth: int, device: torch.device, discount: Any) -> torch.Tensor:
    """(len(names), 1, depth) float64: the weight of each position in each running sum of
    ``_running``; read-only."""
    positions = torch.arange(1, depth + 1, dtype=torch.float64, device=device)
    weights = discount_weights(discount, positions)
    weight = {"reciprocal_rank": 1.0 / positions, "precision_at_hits": 1.0 / positions, "dcg": weights, "idcg": weights}
    ones = torch.ones(depth, dtype=torch.float64, device=device)
    return torch.stack([weight.get(name, ones) for name in names]).unsqueeze(1)


_WEIGHT_PIECE = 1 << 20  # positions whose weights are summed at once for a large k (8 MiB)


@lru_cache(maxsize=64)
def _cumulative_weights(top_k: tuple, device: torch.device, discount: Any) -> torch.Tensor:
    """(1, len(top_k)): the sum of the position weights of positions 1..k, for each k (any k, past
    the catalog too); read-only. A k past ``_WEIGHT_PIECE`` is summed a piece of positions at a
    time, so memory does not grow with k."""
    if top_k[-1] <= _WEIGHT_PIECE:
        positions = torch.arange(1, top_k[-1] + 1, dtype=torch.float64, device=device)
        running = discount_weights(discount, positions).cumsum(0)
        # views stacked on the device: an index tensor built from a list would be a copy from
        # the host, which on CUDA waits for the GPU
        return torch.stack([running[k - 1] for k in top_k]).unsqueeze(0)
    if discount in ("log2", "log2_clip"):
        sums = [torch.full((), _log_weight_sum(k, discount), dtype=torch.float64, device=device) for k in top_k]
        return torch.stack(sums).unsqueeze(0)
    totals, total, start = [], torch.zeros((), dtype=torch.float64, device=device), 1
    for k in top_k:
        while start <= k:
            stop = min(k, start + _WEIGHT_PIECE - 1)
            positions = torch.arange(start, stop + 1, dtype=torch.float64, device=device)
            total = total + discount_weights(discount, positions).sum()
            start = stop + 1
        totals.append(total)
    return torch.stack(totals).unsqueeze(0)


def _log_weight_sum(k: int, discount: str) -> float:
    """sum_{i<=k} w(i) for the logarithmic discounts and k > ``_WEIGHT_PIECE``: the first
    ``_WEIGHT_PIECE`` terms summed, the rest by the Euler-Maclaurin formula with w(x) =
    ln 2 / ln(x + s) (s = 1 for ``"log2"``, 0 for ``"log2_clip"``), whose integral is ln 2 li(x + s)
    = ln 2 Ei(ln(x + s)); the next correction term is below 1e-17 of the sum."""
    from scipy.special import expi

    first = float(discount_weights(discount, torch.arange(1, _WEIGHT_PIECE + 1, dtype=torch.float64)).sum())
    shift = 1 if discount == "log2" else 0
    a, b = _WEIGHT_PIECE + 1 + shift, k + shift

    def weight(x: float) -> float:
        return math.log(2) / math.log(x)

    def slope(x: float) -> float:
        return -math.log(2) / (x * math.log(x) ** 2)

    integral = math.log(2) * (float(expi(math.log(b))) - float(expi(math.log(a))))
    return first + integral + (weight(a) + weight(b)) / 2 + (slope(b) - slope(a)) / 12


@lru_cache(maxsize=64)
def _geometric_weights(depth: int, device: torch.device, persistence: float) -> torch.Tensor:
    """(1, depth): (1 - p) p^(i - 1) for the 1-based positions i; read-only."""
    positions = torch.arange(depth, dtype=torch.float64, device=device)
    return ((1 - persistence) * persistence**positions).unsqueeze(0)


def _cutoffs(top_k: Sequence[int], like: torch.Tensor) -> torch.Tensor:
    return device_constant(top_k, torch.float64, like.device)


def _ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """numerator / denominator, 0 where the denominator is 0 (every ratio here has a numerator of
    0 then, so the quotient is NaN: one division and one replacement, no comparison and select)."""
    return torch.nan_to_num(numerator / denominator, nan=0.0, posinf=math.inf, neginf=-math.inf)


def hits(ranked: RankedBatch, top_k: Sequence[int]) -> torch.Tensor:
    """Number of relevant items in the top k (computed once per ranked batch and cut-offs, shared
    by the metrics that read it; read-only)."""
    return _running(ranked, top_k, "hits")


def hit_rate(ranked: RankedBatch, top_k: Sequence[int]) -> torch.Tensor:
    """HitRate@k = 1 if any relevant item is in the top k, else 0."""
    return _running(ranked, top_k, "first_hit")


def recall(ranked: RankedBatch, top_k: Sequence[int], normalization: str = "relevant") -> torch.Tensor:
    """Recall@k = hits@k / |R|  (or / min(k, |R|) with ``normalization="min_k_relevant"``)."""
    relevant = _running(ranked, top_k, "relevant")
    if normalization == "min_k_relevant":
        relevant = torch.minimum(relevant, _cutoffs(top_k, relevant))
    return _ratio(hits(ranked, top_k), relevant)


def precision(ranked: RankedBatch, top_k: Sequence[int], normalization: str = "k") -> torch.Tensor:
    """Precision@k = hits@k / k  (or / min(k, number of candidates) with
    ``normalization="min_k_items"``; the candidates are all items unless some were excluded or
    the predictions are a ranked list; 0 for a user without candidates)."""
    cutoffs = _cutoffs(top_k, ranked.hit)
    if normalization == "min_k_items":
        if ranked.candidates_are_all_items:
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
    return _running(ranked, top_k, "reciprocal_rank")


def average_precision(ranked: RankedBatch, top_k: Sequence[int], normalization: str = "min_k_relevant") -> torch.Tensor:
    """AP@k = (sum over relevant positions i <= k of P@i) / Z, with Z = min(k, |R|) (RecBole),
    |R| (trec_eval, ranx), hits@k (torchmetrics; the mean precision at the hits) or k (RecTools
    ``divide_by_k=True``)."""
    numerator = _running(ranked, top_k, "precision_at_hits")
    if normalization == "hits":
        return _ratio(numerator, hits(ranked, top_k))
    if normalization == "k":
        return numerator / _cutoffs(top_k, numerator)
    relevant = _running(ranked, top_k, "relevant")
    if normalization == "min_k_relevant":
        relevant = torch.minimum(relevant, _cutoffs(top_k, relevant))
    return _ratio(numerator, relevant)


def dcg(ranked: RankedBatch, top_k: Sequence[int], discount: Any = "log2") -> torch.Tensor:
    """DCG@k = sum_{i<=k} gain_i * w(i), w the discount (``discount_weights``)."""
    return _running(ranked, top_k, "dcg", discount)


def ndcg(ranked: RankedBatch, top_k: Sequence[int], discount: Any = "log2", ideal: str = "achievable") -> torch.Tensor:
    """NDCG@k = DCG@k / IDCG@k; 0 when IDCG@k = 0. ``ideal="achievable"``: IDCG@k is the DCG@k of
    the ideal ranking (relevance sorted descending); ``"k_relevant"``: of k items of the user's
    largest gain, sum_{i<=k} g_max w(i) (RecTools' ``divide_by_achievable=False``)."""
    dcg = _running(ranked, top_k, "dcg", discount)
    if ideal == "achievable":
        return _ratio(dcg, _running(ranked, top_k, "idcg", discount))
    best = ranked.ideal_gain[:, :1]  # the user's largest gain (ideal gains are sorted descending)
    return _ratio(dcg, best * _cumulative_weights(tuple(top_k), best.device, discount))


def rbp(ranked: RankedBatch, top_k: Sequence[int], persistence: float = 0.8, graded: bool = True) -> torch.Tensor:
    """RBP@k = (1 - p) sum_{i<=k} r_i p^(i-1) (Moffat & Zobel 2008), r_i the label of a relevant
    item at position i (``graded``, as ranx's ``rbp``) or 1 (the paper's binary r_i)."""
    values = ranked.gain_of("linear_rank") if graded else ranked.hit
    weights = _geometric_weights(values.shape[1], values.device, persistence)
    return _at_cutoffs((values * weights).cumsum(1), top_k)


def err(ranked: RankedBatch, top_k: Sequence[int], max_grade: float = 4.0) -> torch.Tensor:
    """ERR@k = sum_{i<=k} (R_i / i) prod_{j<i} (1 - R_j), R_i = (2^{g_i} - 1) / 2^{g_max} for a
    relevant item of grade g_i, else 0 (Chapelle et al., CIKM 2009; gdeval and ir-measures use
    g_max = 4)."""
    stop = ranked.gain_of("exp_rank") / 2.0**max_grade
    going_on = torch.nn.functional.pad((1 - stop).cumprod(1)[:, :-1], (1, 0), value=1.0)
    positions = torch.arange(1, stop.shape[1] + 1, dtype=torch.float64, device=stop.device)
    return _at_cutoffs((stop * going_on / positions).cumsum(1), top_k)


def err_checks(ranked: RankedBatch, max_grade: float = 4.0) -> dict:
    """ERR's value check: R_i <= 1, i.e. no ranked grade above ``max_grade``."""
    too_high = (ranked.gain_of("exp_rank") > 2.0**max_grade - 1).any()
    return {
        f"y holds a grade above max_grade={max_grade:g} among the ranked items (ERR's stopping probability "
        "(2**y - 1) / 2**max_grade must be at most 1): pass a larger max_grade": too_high
    }


def fall_out(ranked: RankedBatch, top_k: Sequence[int]) -> torch.Tensor:
    """Fall-out@k = (non-relevant candidates in the top k) / (non-relevant candidates), the
    candidates being the items ranked (not excluded; for ranked ids, the listed ids); 0 for a
    user whose candidates are all relevant (torchmetrics' ``retrieval_fall_out``)."""
    hits_at_k = _running(ranked, top_k, "hits")
    candidates = ranked.num_candidates
    listed = torch.minimum(_cutoffs(top_k, hits_at_k), candidates.unsqueeze(1))
    return _ratio(listed - hits_at_k, (candidates - ranked.num_relevant_candidates).unsqueeze(1))


def bpref(ranked: RankedBatch, top_k: Sequence[int], negative_labels: str = "unjudged") -> torch.Tensor:
    """bpref@k = (1/R) sum_{relevant ranked r, rank <= k} (1 - min(n_r, R) / min(R, N)), R the
    relevant items, N the judged non-relevant ones, n_r those ranked above r; a relevant item
    adds 1 when N = 0 (trec_eval's ``bpref``; Buckley & Voorhees, SIGIR 2004)."""
    relevant = ranked.num_relevant.unsqueeze(1)
    at_positions, count = ranked.judged("nonnegative" if negative_labels == "unjudged" else "all")
    judged = count.unsqueeze(1)
    above = at_positions.cumsum(1) - at_positions
    fewer = torch.minimum(relevant, judged)
    penalty = torch.where(fewer > 0, torch.minimum(above, relevant) / fewer.clamp(min=1), 0.0)
    return _ratio(_at_cutoffs((ranked.hit * (1 - penalty)).cumsum(1), top_k), relevant)


def r_precision(batch, relevance_threshold, ties) -> tuple:
    """R-Precision = hits among the first |R| candidates / |R|, 0 without a relevant item; from
    the input itself, as |R| is unbounded by any cut-off (every candidate is ranked). Returns
    (values (batch, 1), has a relevant item (batch,) bool, value checks)."""
    hits, num_relevant, invalid = hits_within_own_depth(batch, relevance_threshold, ties)
    return _ratio(hits, num_relevant).unsqueeze(1), num_relevant > 0, invalid
