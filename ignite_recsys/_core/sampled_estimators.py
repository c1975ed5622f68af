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

  ``kr_bias`` (:math:`\gamma = 0`, the least-bias correction) is the corrected least squares
  (CLS) problem with each :math:`\tilde M(r)` bounded to the metric's range
  :math:`[\min_R M(R), \max_R M(R)]` (:math:`[0, 1]`; :math:`[0, 1/k]` for Precision@k), so
  that every estimate lies in that range; no monotonicity in :math:`r` is imposed (the
  objective has none). It is solved exactly by active-set methods, which end at a point meeting
  the problem's optimality conditions: non-negative least squares (``scipy.optimize.nnls``,
  Lawson and Hanson), whose solution is the answer where no value exceeds the upper bound, else
  bounded-variable least squares (``scipy.optimize.lsq_linear``, ``method="bvls"``,
  ``tol=1e-12``). Where the problem has several
  minimisers (its matrix is numerically rank deficient) the solver's is returned.
  ``kr_bias_unbounded`` is the unconstrained least-squares solution of least norm, with the
  eigenvalues of :math:`A^\top A` below ``1e-8`` of the largest dropped: its values depend on
  that cut-off and fall far outside the metric's range. ``kr_bv`` (the bias-variance
  trade-off, :math:`\gamma` = ``gamma``) solves
  :math:`\big((1-\gamma) A^\top A + \gamma\, \mathrm{diag}(c)\big) \tilde M = A^\top M` with
  :math:`A_{Rr} = P(r \mid R)` and :math:`c_r = \sum_R A_{Rr}`.
- ``rescaled``: the metric at the full rank whose expected sampled rank is :math:`r`,
  :math:`M\big(1 + (r-1)\frac{N-1}{n}\big)` (the inverse of
  :math:`\mathbb E[r \mid R] = 1 + n\theta`; ranks need not be integers).
- ``mle``: the full-rank distribution :math:`\pi(R)` of maximum likelihood given the sampled
  ranks (Jin et al., AAAI 2021; the rank-distribution view of Li et al., KDD 2020), and the
  estimate :math:`\sum_R \pi(R) M(R)`. The log-likelihood
  :math:`\ell(\pi) = \sum_r s(r) \log \sum_R \pi(R) P(r \mid R)` (:math:`s = h/m`) is concave
  on the simplex; EM from the uniform distribution,
  :math:`\pi(R) \leftarrow \pi(R)\, g_R(\pi)` with
  :math:`g_R(\pi) = \sum_r s(r) \frac{P(r \mid R)}{\sum_{R'} \pi(R') P(r \mid R')}`,
  accelerated by SQUAREM (Varadhan and Roland, Scand. J. Statist. 35, 2008; scheme S3, the step
  shortened until every probability stays positive, with a likelihood safeguard), runs until
  the duality gap :math:`\max_R g_R(\pi) - 1`, an upper bound on
  :math:`\ell(\pi^*) - \ell(\pi)`, is at most ``tolerance`` (``1e-10``) or 37,500 EM maps
  were evaluated; the gap reached is reported (:class:`MLEResult`,
  ``SampledMetrics.mle_gap``). EM-type iterations converge slowly where the maximum puts no
  mass on many ranks: a gap of about ``1e-6`` after 37,500 maps is common, and the estimate
  then still moves in the third decimal. The maximum need not be unique (several :math:`\pi`
  give the same distribution of sampled ranks): the point returned is the one the accelerated
  EM path from the uniform start reaches, not a unique maximiser. Full ranks above
  ``exact_up_to`` (:class:`~ignite_recsys.SampledMetrics`: 200, or twice the largest cut-off)
  are grouped into bins about 2% wide, with :math:`\pi` uniform within a bin.

Sums over the full ranks are exact and cost no more than the number of negatives: a polynomial
of degree :math:`d` in :math:`R` summed over consecutive ranks equals a Gauss quadrature of
:math:`\lfloor d/2 \rfloor + 1` nodes for the discrete uniform measure (the nodes and weights of
the discrete Chebyshev polynomials, by Golub and Welsch's method). The least-squares problems
(degree :math:`2n`) are thus built on the ranks where :math:`M \ne 0` and :math:`n + 1` nodes,
and the rank bins of ``mle`` (degree :math:`n`) on :math:`n/2 + 1` nodes each, whatever
:math:`N`.

References: W. Krichene and S. Rendle, "On Sampled Metrics for Item Recommendation", KDD 2020
and Communications of the ACM 65(7), 2022; D. Li, R. Jin, J. Gao and Z. Liu, "On Sampling
Top-K Recommendation Evaluation", KDD 2020; R. Jin, D. Li, B. Mudrak, J. Gao and Z. Liu, "On
Estimating Recommendation Evaluation Metrics under Sampling", AAAI 2021; R. Varadhan and C.
Roland, "Simple and Globally Convergent Methods for Accelerating the Convergence of Any EM
Algorithm", Scandinavian Journal of Statistics 35(2), 2008; G. Golub and J. Welsch,
"Calculation of Gauss Quadrature Rules", Mathematics of Computation 23, 1969.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Sequence

import numpy as np
import torch

METRICS = ("ndcg", "recall", "hit_rate", "precision", "map", "mrr")
ESTIMATORS = ("naive", "kr_bias", "kr_bv", "rescaled", "mle", "kr_bias_unbounded")
# every value of these lies in the metric's range (rescaled too, but it keeps much of the naive bias)
DEFAULT_ESTIMATORS = ("naive", "kr_bias", "kr_bv", "mle")
UNBOUNDED_ESTIMATORS = ("kr_bias_unbounded",)  # values outside the metric's range
PER_ITEM_ESTIMATORS = ("naive", "kr_bias", "kr_bv", "rescaled", "kr_bias_unbounded")  # a value per test item
LEAST_BIAS_CUTOFF = 1e-8  # eigenvalues of A^T A kept by the unbounded least-bias correction (relative)
BOUNDED_TOLERANCE = 1e-12  # lsq_linear(method="bvls") tolerance of the bounded least-bias correction
MLE_TOLERANCE = 1e-10  # duality gap max_R g_R - 1 at which the maximum-likelihood iterations stop
MLE_MAX_ITERATIONS = 37_500  # EM maps at most (a SQUAREM step evaluates 5: 7,500 steps)


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
    """(..., n + 1) float64: P(r | R) for r = 1..n+1 (uniform sampling with replacement of n
    negatives among the N - 1 others) at each full rank of ``full_ranks`` (...,)."""
    n = num_negatives
    theta = (full_ranks.to(torch.float64) - 1.0) / max(num_candidates - 1, 1)
    j = torch.arange(n + 1, dtype=torch.float64, device=full_ranks.device)
    log_choose = math.lgamma(n + 1) - torch.lgamma(j + 1) - torch.lgamma(n - j + 1)
    theta = theta.unsqueeze(-1)
    log_p = log_choose + torch.xlogy(j, theta) + torch.xlogy(n - j, 1.0 - theta)
    return torch.exp(log_p)


def rank_sum_nodes(first: torch.Tensor, count: torch.Tensor, degree: int) -> tuple:
    r"""Gauss quadrature of sums over consecutive ranks: (ranks (B, q), weights (B, q)) float64
    with :math:`\sum_{R=f_b}^{f_b + c_b - 1} p(R) = \sum_i w_{bi}\, p(x_{bi})` for every
    polynomial p of degree <= ``degree``, for each block b of ``first`` (B,) and ``count`` (B,)
    (int64, count >= 1). q = degree // 2 + 1 nodes; a block of at most q ranks gets its ranks
    (weights 1, then weight-0 padding). The nodes of c points are the eigenvalues of the Jacobi
    matrix of the discrete Chebyshev polynomials (off-diagonal
    :math:`\sqrt{k^2 (c^2 - k^2) / (4 (4 k^2 - 1))}`, k = 1..q-1), the weights c times the
    squared first components of its eigenvectors (Golub and Welsch, 1969)."""
    q = degree // 2 + 1
    first, count = first.to(torch.int64), count.to(torch.int64)
    offsets = torch.arange(q, dtype=torch.float64)
    ranks = first.unsqueeze(1).to(torch.float64) + offsets
    weights = (offsets < count.unsqueeze(1)).to(torch.float64)
    ranks = torch.where(weights > 0, ranks, first.unsqueeze(1).to(torch.float64))
    wide = count > q
    if q > 1 and bool(wide.any()):
        from scipy.linalg import eigh_tridiagonal  # (LAPACK's tridiagonal solver: a dense batched eigh is slower)

        c = count[wide].to(torch.float64).unsqueeze(1).numpy()
        k = np.arange(1, q, dtype=np.float64)
        off = np.sqrt(k**2 * (c**2 - k**2) / (4.0 * (4.0 * k**2 - 1.0)))
        values, vectors = zip(*(eigh_tridiagonal(np.zeros(q), row) for row in off))
        ranks[wide] = first[wide].to(torch.float64).unsqueeze(1) + torch.from_numpy((c - 1.0) / 2.0 + np.stack(values))
        weights[wide] = torch.from_numpy(c * np.stack([vector[0] for vector in vectors]) ** 2)
    return ranks, weights


def _support(pairs: Sequence[tuple], num_candidates: int) -> int:
    """The largest full rank at which a metric of ``pairs`` is non-zero (M(R) = 0 past the cut-off)."""
    return min(num_candidates, max(int(k) for _, k in pairs))


@functools.lru_cache(maxsize=64)  # (callers only read the tables)
def least_squares_rows(pairs: tuple, num_candidates: int, num_negatives: int) -> tuple:
    r"""(rows (q, n + 1), targets (q, len(pairs)), column sums c (n + 1,)) float64, with
    :math:`\lVert \mathrm{rows}\, x - \mathrm{targets}_j \rVert^2 = \sum_{R=1}^N (\sum_r P(r \mid R) x_r - M_j(R))^2`
    exactly: the full ranks where a metric is non-zero, then :math:`n + 1` quadrature nodes of
    the other ranks (:func:`rank_sum_nodes`, degree 2n), each row times the square root of its
    weight; q = max k + n + 1 whatever N."""
    n, support = num_negatives, _support(pairs, num_candidates)
    exact = torch.arange(1, support + 1, dtype=torch.float64)
    rows = [sampled_rank_probabilities(exact, num_candidates, n)]
    targets = [metric_columns(pairs, exact)]
    sums = rows[0].sum(0)
    if num_candidates > support:
        ranks, weights = rank_sum_nodes(torch.tensor([support + 1]), torch.tensor([num_candidates - support]), 2 * n)
        ranks, weights = ranks[0][weights[0] > 0], weights[0][weights[0] > 0]
        a = sampled_rank_probabilities(ranks, num_candidates, n)
        rows.append(a * weights.sqrt().unsqueeze(1))
        targets.append(torch.zeros(len(ranks), len(pairs), dtype=torch.float64))
        sums = sums + weights @ a
    return torch.cat(rows), torch.cat(targets), sums


def metric_ranges(pairs: Sequence[tuple], num_candidates: int) -> torch.Tensor:
    """(2, len(pairs)) float64: min and max of M(R) over R = 1..N (M is 0 past the cut-off and
    largest at rank 1)."""
    support = _support(pairs, num_candidates)
    values = metric_columns(pairs, torch.arange(1, support + 1, dtype=torch.float64))
    low = values.amin(0) if support == num_candidates else torch.clamp(values.amin(0), max=0.0)
    return torch.stack([low, values.amax(0)])


@functools.lru_cache(maxsize=32)  # (one solve per configuration; callers only read the table)
def krichene_rendle_tables(
    pairs: tuple, num_candidates: int, num_negatives: int, gamma: float, bounded: bool = True
) -> torch.Tensor:
    r"""(n + 1, len(pairs)) float64: the corrected metric :math:`\tilde M(r)` of each (name, k),
    minimising :math:`\sum_R (\mathbb E[\tilde M \mid R] - M(R))^2 + \gamma \mathrm{Var}[\tilde M \mid R]`
    over R = 1..N (module docstring). ``gamma == 0``: with ``bounded`` each value in the
    metric's range (bounded-variable least squares), else the unconstrained least-norm solution."""
    rows, targets, sums = least_squares_rows(pairs, num_candidates, num_negatives)
    gram, moments = rows.T @ rows, rows.T @ targets
    if gamma > 0:
        system = (1.0 - gamma) * gram + gamma * torch.diag(sums)
        return torch.linalg.solve(system, moments)
    if not bounded:
        values, vectors = torch.linalg.eigh(gram)
        kept = values > values.max() * LEAST_BIAS_CUTOFF
        inverse = torch.where(kept, 1.0 / torch.where(kept, values, 1.0), 0.0)
        return vectors @ (inverse.unsqueeze(1) * (vectors.T @ moments))
    # precision@k = recall@k / k (bounds scaled alike: the solution scales), hit_rate = recall, map = mrr
    columns = []
    for name, k in pairs:
        canonical = {"hit_rate": "recall", "precision": "recall", "map": "mrr"}.get(name, name)
        column = _bounded_least_bias_column(canonical, int(k), num_candidates, num_negatives)
        columns.append(column / k if name == "precision" else column)
    return torch.stack(columns, 1)


@functools.lru_cache(maxsize=128)
def _bounded_least_bias_column(name: str, k: int, num_candidates: int, num_negatives: int) -> torch.Tensor:
    """(n + 1,) the bounded least-bias table of ``name``@``k`` (:func:`krichene_rendle_tables`)."""
    from scipy.optimize import lsq_linear, nnls

    pairs = ((name, k),)
    low, high = metric_ranges(pairs, num_candidates)[:, 0].tolist()
    if high <= low:  # a constant metric (a cut-off past the catalog: M = 1 at every rank)
        return torch.full((num_negatives + 1,), low, dtype=torch.float64)
    rows, targets, _ = least_squares_rows(pairs, num_candidates, num_negatives)
    design, target = rows.numpy(), targets[:, 0].numpy()
    if low == 0.0:  # the lower bound alone first (Lawson-Hanson): the answer where no value reaches the upper one
        solution, _ = nnls(design, target, maxiter=50 * design.shape[1])
        if solution.max() <= high:
            return torch.from_numpy(solution)
    solution = lsq_linear(design, target, bounds=(low, high), method="bvls", tol=BOUNDED_TOLERANCE).x
    return torch.from_numpy(np.clip(solution, low, high))


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


@functools.lru_cache(maxsize=16)
def bin_probabilities(num_candidates: int, num_negatives: int, exact_up_to: int) -> tuple:
    """(bin starts (B,), widths (B,) float64, P(r | bin) (B, n + 1)): the mean of P(r | R) over
    each bin's ranks (exact, by :func:`rank_sum_nodes` of degree n)."""
    starts = rank_bins(num_candidates, exact_up_to)
    widths = torch.diff(torch.cat([starts, torch.tensor([num_candidates + 1])]))
    ranks, weights = rank_sum_nodes(starts, widths, num_negatives)
    probabilities = sampled_rank_probabilities(ranks, num_candidates, num_negatives)  # (B, q, n + 1)
    probabilities = (weights.unsqueeze(2) * probabilities).sum(1) / widths.to(torch.float64).unsqueeze(1)
    return starts, widths.to(torch.float64), probabilities


class MLEResult(NamedTuple):
    """The maximum-likelihood full-rank distribution: bin starts (B,), bin probabilities (B,)
    (uniform within a bin), the duality gap reached (max_R g_R - 1 >= l(pi*) - l(pi)) and the
    number of EM maps evaluated."""

    starts: torch.Tensor
    probabilities: torch.Tensor
    gap: float
    iterations: int


def mle_rank_distribution(
    histogram: torch.Tensor,
    num_candidates: int,
    exact_up_to: int = 200,
    max_iterations: int = MLE_MAX_ITERATIONS,
    tolerance: float = MLE_TOLERANCE,
    accelerate: bool = True,
) -> MLEResult:
    """The full-rank distribution of maximum likelihood given the histogram (n + 1,) of sampled
    ranks: EM from the uniform distribution (SQUAREM-accelerated unless ``accelerate`` is False)
    until the duality gap is at most ``tolerance`` or ``max_iterations`` EM maps were evaluated."""
    num_negatives = histogram.numel() - 1
    starts, widths, probabilities = bin_probabilities(num_candidates, num_negatives, exact_up_to)
    share = (histogram.to(torch.float64) / histogram.sum()).numpy()
    observed = share > 0  # the sampled ranks seen: the only terms of the likelihood
    share, matrix = share[observed], probabilities.numpy()[:, observed].copy()

    def gradient(pi: np.ndarray) -> np.ndarray:  # g_R(pi); pi @ g = 1
        return matrix @ (share / np.maximum(pi @ matrix, 1e-300))

    def em(pi: np.ndarray) -> tuple:  # (the EM map of pi, the log-likelihood at pi)
        expected = np.maximum(pi @ matrix, 1e-300)
        updated = pi * (matrix @ (share / expected))
        return updated / updated.sum(), float(share @ np.log(expected))

    pi = (widths / num_candidates).numpy()
    iterations, steps = 0, 0
    gap = float(gradient(pi).max()) - 1.0
    while gap > tolerance and iterations < max_iterations:
        first, _ = em(pi)
        if not accelerate:
            pi, iterations = first, iterations + 1
        else:  # SQUAREM, scheme S3: a step along the EM path, then one EM map; kept if no worse than EM's two
            second, _ = em(first)
            third, at_second = em(second)
            r, v = first - pi, second - 2.0 * first + pi
            alpha = min(-math.sqrt(float(r @ r)) / max(math.sqrt(float(v @ v)), 1e-300), -1.0)
            candidate = pi - 2.0 * alpha * r + alpha * alpha * v
            while candidate.min() < 0 and alpha < -1.0 - 1e-8:  # back towards EM's two maps (alpha = -1)
                alpha = (alpha - 1.0) / 2.0
                candidate = pi - 2.0 * alpha * r + alpha * alpha * v
            candidate, _ = em(np.maximum(candidate, 0.0) / np.maximum(candidate, 0.0).sum())
            after, at_candidate = em(candidate)
            iterations += 5
            pi = after if at_candidate >= at_second else third
        steps += 1
        if steps % 10 == 0:
            gap = float(gradient(pi).max()) - 1.0
    gap = float(gradient(pi).max()) - 1.0
    return MLEResult(starts, torch.from_numpy(pi), max(gap, 0.0), iterations)


def mle_estimates(
    pairs: Sequence[tuple], histogram: torch.Tensor, num_candidates: int, exact_up_to: int = 200
) -> tuple:
    """((len(pairs),) float64: sum over full ranks of pi(R) M(R) for the maximum-likelihood
    distribution pi, the duality gap reached)."""
    result = mle_rank_distribution(histogram, num_candidates, exact_up_to)
    starts, pi = result.starts, result.probabilities
    support = _support(pairs, num_candidates)  # M(R) = 0 past it: only the bins of single ranks below it
    which = torch.searchsorted(starts, torch.arange(1, support + 1), right=True) - 1
    widths = torch.diff(torch.cat([starts, torch.tensor([num_candidates + 1])])).to(torch.float64)
    bin_sums = torch.zeros(len(starts), len(pairs), dtype=torch.float64)
    bin_sums.index_add_(0, which, metric_columns(pairs, torch.arange(1, support + 1, dtype=torch.float64)))
    return pi @ (bin_sums / widths.unsqueeze(1)), result.gap
