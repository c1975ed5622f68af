r"""Estimates of full-catalog ranking metrics from ranks among sampled negatives.

Setting (Krichene and Rendle, KDD 2020): a test item has full rank :math:`R \in \{1..N\}` among
its :math:`N` candidates (itself and :math:`N - 1` negatives). Ranked against :math:`n`
negatives drawn uniformly with replacement from those :math:`N - 1`, its sampled rank
:math:`r \in \{1..n+1\}` follows

.. math:: P(r \mid R) = \binom{n}{r-1}\, \theta^{r-1} (1-\theta)^{n-r+1},
          \qquad \theta = \frac{R-1}{N-1}.

A metric of one test item is a function :math:`M(R)` of its rank (one relevant item:
NDCG@k :math:`= [R \le k] / \log_2(R+1)`, Recall@k = HitRate@k :math:`= [R \le k]`,
Precision@k :math:`= [R \le k] / k`, AP@k = RR@k :math:`= [R \le k] / R`). Every estimator here
is a function of the sampled ranks only, so a histogram :math:`h(r)` of the sampled ranks of the
:math:`m` test items is all it needs:

- ``naive``: :math:`\frac1m \sum_r h(r) M(r)`, the metric of the sampled rank (what RecBole and
  most papers report).
- ``kr_bias`` / ``kr_bv``: Krichene and Rendle's corrected metric, a table :math:`\tilde M(r)`
  with estimate :math:`\frac1m \sum_r h(r) \tilde M(r)`, where :math:`\tilde M` minimises, over
  full ranks weighted uniformly,

  .. math:: \sum_{R=1}^{N} \Big(\mathbb E[\tilde M(r) \mid R] - M(R)\Big)^2
            + \gamma\, \mathrm{Var}[\tilde M(r) \mid R]

  (``kr_bias``: :math:`\gamma = 0`, the least-bias correction; ``kr_bv``: the bias-variance
  trade-off, :math:`\gamma` = ``gamma``). With :math:`A_{Rr} = P(r \mid R)` and
  :math:`c_r = \sum_R A_{Rr}` the minimiser solves
  :math:`\big((1-\gamma) A^\top A + \gamma\, \mathrm{diag}(c)\big) \tilde M = A^\top M`
  (:math:`\gamma = 0`: the least-squares solution of least norm, with the eigenvalues of
  :math:`A^\top A` below ``1e-8`` of the largest dropped: the system is ill-conditioned, and at
  :math:`n = 100`, :math:`N = 10^4` the untruncated solution's values reach :math:`10^4`).
- ``rescaled``: the metric at the full rank whose expected sampled rank is :math:`r`,
  :math:`M\big(1 + (r-1)\frac{N-1}{n}\big)` (the inverse of
  :math:`\mathbb E[r \mid R] = 1 + n\theta`; ranks need not be integers).
- ``mle``: the full-rank distribution :math:`\pi(R)` of maximum likelihood given the sampled
  ranks (Jin et al., AAAI 2021; the rank-distribution view of Li et al., KDD 2020), by EM from
  the uniform distribution:
  :math:`\pi(R) \leftarrow \pi(R) \frac1m \sum_r h(r) \frac{P(r \mid R)}{\sum_{R'} \pi(R') P(r \mid R')}`,
  and the estimate :math:`\sum_R \pi(R) M(R)`. Full ranks above ``exact_up_to``
  (:class:`~ignite_recsys.SampledMetrics`: 200, or twice the largest cut-off) are grouped into
  bins about 2% wide, with :math:`\pi` uniform within a bin.

References: W. Krichene and S. Rendle, "On Sampled Metrics for Item Recommendation", KDD 2020
and Communications of the ACM 65(7), 2022; D. Li, R. Jin, J. Gao and Z. Liu, "On Sampling
Top-K Recommendation Evaluation", KDD 2020; R. Jin, D. Li, B. Mudrak, J. Gao and Z. Liu, "On
Estimating Recommendation Evaluation Metrics under Sampling", AAAI 2021.
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import torch

METRICS = ("ndcg", "recall", "hit_rate", "precision", "map", "mrr")
ESTIMATORS = ("naive", "kr_bias", "kr_bv", "rescaled", "mle")
PER_ITEM_ESTIMATORS = ("naive", "kr_bias", "kr_bv", "rescaled")  # a value for each test item
LEAST_BIAS_CUTOFF = 1e-8  # eigenvalues of A^T A kept by the least-bias correction (relative)
_CHUNK = 4096  # full ranks per block when the (ranks, n + 1) probabilities are summed


def metric_of_rank(name: str, k: int, ranks: torch.Tensor) -> torch.Tensor:
    """M(R) of one test item at rank ``ranks`` (float64, may be fractional) for ``name``@``k``."""
    ranks = ranks.to(torch.float64)
    inside = ranks <= k
    if name == "ndcg":
        return torch.where(inside, 1.0 / torch.log2(ranks + 1.0), 0.0)
    if name in ("recall", "hit_rate"):
        return inside.to(torch.float64)
    if name == "precision":
        return inside.to(torch.float64) / k
    if name in ("map", "mrr"):
        return torch.where(inside, 1.0 / ranks, 0.0)
    raise ValueError(f"metric must be one of {list(METRICS)}, got {name!r}")


def metric_columns(pairs: Sequence[tuple], ranks: torch.Tensor) -> torch.Tensor:
    """(len(ranks), len(pairs)) float64: M(R) of each (name, k) in ``pairs``."""
    return torch.stack([metric_of_rank(name, k, ranks) for name, k in pairs], 1)


def sampled_rank_probabilities(full_ranks: torch.Tensor, num_candidates: int, num_negatives: int) -> torch.Tensor:
    """(len(full_ranks), n + 1) float64: P(r | R) for r = 1..n+1 (uniform sampling with
    replacement of n negatives among the N - 1 others)."""
    n = num_negatives
    theta = (full_ranks.to(torch.float64) - 1.0) / max(num_candidates - 1, 1)
    j = torch.arange(n + 1, dtype=torch.float64, device=full_ranks.device)
    log_choose = math.lgamma(n + 1) - torch.lgamma(j + 1) - torch.lgamma(n - j + 1)
    theta = theta.unsqueeze(1)
    log_p = log_choose + torch.xlogy(j, theta) + torch.xlogy(n - j, 1.0 - theta)
    return torch.exp(log_p)


def _full_rank_blocks(num_candidates: int):
    for start in range(1, num_candidates + 1, _CHUNK):
        yield torch.arange(start, min(start + _CHUNK, num_candidates + 1), dtype=torch.float64)


@functools.lru_cache(maxsize=32)  # (one solve per configuration; callers only read the table)
def krichene_rendle_tables(pairs: tuple, num_candidates: int, num_negatives: int, gamma: float) -> torch.Tensor:
    r"""(n + 1, len(pairs)) float64: the corrected metric :math:`\tilde M(r)` of each (name, k),
    minimising :math:`\sum_R (\mathbb E[\tilde M \mid R] - M(R))^2 + \gamma \mathrm{Var}[\tilde M \mid R]`
    over R = 1..N (module docstring)."""
    size = num_negatives + 1
    gram = torch.zeros(size, size, dtype=torch.float64)
    moments = torch.zeros(size, len(pairs), dtype=torch.float64)
    column_sums = torch.zeros(size, dtype=torch.float64)
    for ranks in _full_rank_blocks(num_candidates):
        a = sampled_rank_probabilities(ranks, num_candidates, num_negatives)
        gram += a.T @ a
        moments += a.T @ metric_columns(pairs, ranks)
        column_sums += a.sum(0)
    if gamma == 0:
        values, vectors = torch.linalg.eigh(gram)
        kept = values > values.max() * LEAST_BIAS_CUTOFF
        inverse = torch.where(kept, 1.0 / torch.where(kept, values, 1.0), 0.0)
        return vectors @ (inverse.unsqueeze(1) * (vectors.T @ moments))
    system = (1.0 - gamma) * gram + gamma * torch.diag(column_sums)
    return torch.linalg.solve(system, moments)


def rescaled_tables(pairs: Sequence[tuple], num_candidates: int, num_negatives: int) -> torch.Tensor:
    """(n + 1, len(pairs)) float64: M at the full rank 1 + (r - 1)(N - 1)/n of each sampled rank r."""
    r = torch.arange(1, num_negatives + 2, dtype=torch.float64)
    return metric_columns(pairs, 1.0 + (r - 1.0) * (num_candidates - 1) / num_negatives)


def naive_tables(pairs: Sequence[tuple], num_negatives: int) -> torch.Tensor:
    """(n + 1, len(pairs)) float64: M(r) of each sampled rank r."""
    return metric_columns(pairs, torch.arange(1, num_negatives + 2, dtype=torch.float64))


def rank_bins(num_candidates: int, exact_up_to: int) -> torch.Tensor:
    """First full rank of each bin (int64, ascending, starts at 1): one bin per rank up to
    ``exact_up_to``, then bins about 2% wide."""
    starts = list(range(1, min(exact_up_to, num_candidates) + 1))
    nxt = starts[-1] + 1
    while nxt <= num_candidates:
        starts.append(nxt)
        nxt = max(nxt + 1, math.floor(nxt * 1.02))
    return torch.tensor(starts, dtype=torch.int64)


def mle_rank_distribution(
    histogram: torch.Tensor,
    num_candidates: int,
    exact_up_to: int = 200,
    max_iterations: int = 5000,
    tolerance: float = 1e-10,
) -> tuple:
    """EM estimate of the full-rank distribution from the histogram (n + 1,) of sampled ranks:
    (bin starts (B,), bin probabilities (B,)); within a bin the ranks are equally likely."""
    num_negatives = histogram.numel() - 1
    starts = rank_bins(num_candidates, exact_up_to)
    widths = torch.diff(torch.cat([starts, torch.tensor([num_candidates + 1])])).to(torch.float64)
    probabilities = torch.zeros(len(starts), num_negatives + 1, dtype=torch.float64)
    for ranks in _full_rank_blocks(num_candidates):
        which = torch.searchsorted(starts, ranks.to(torch.int64), right=True) - 1
        probabilities.index_add_(0, which, sampled_rank_probabilities(ranks, num_candidates, num_negatives))
    probabilities /= widths.unsqueeze(1)  # P(r | bin): the mean over the bin's ranks
    share = histogram.to(torch.float64) / histogram.sum()
    observed = share > 0  # the sampled ranks seen: the only terms of the likelihood
    share, probabilities = share[observed], probabilities[:, observed].contiguous()
    pi = widths / num_candidates
    for _ in range(max_iterations):
        expected = pi @ probabilities  # P(r) under pi
        updated = pi * (probabilities @ (share / expected.clamp_min(1e-300)))
        updated /= updated.sum()
        change = float((updated - pi).abs().max())
        pi = updated
        if change < tolerance:
            break
    return starts, pi


def mle_estimates(
    pairs: Sequence[tuple], histogram: torch.Tensor, num_candidates: int, exact_up_to: int = 200
) -> torch.Tensor:
    """(len(pairs),) float64: sum over full ranks of pi(R) M(R) for the EM distribution pi."""
    starts, pi = mle_rank_distribution(histogram, num_candidates, exact_up_to)
    widths = torch.diff(torch.cat([starts, torch.tensor([num_candidates + 1])])).to(torch.float64)
    bin_means = torch.zeros(len(starts), len(pairs), dtype=torch.float64)
    for ranks in _full_rank_blocks(num_candidates):
        which = torch.searchsorted(starts, ranks.to(torch.int64), right=True) - 1
        bin_means.index_add_(0, which, metric_columns(pairs, ranks))
    bin_means /= widths.unsqueeze(1)
    return pi @ bin_means
