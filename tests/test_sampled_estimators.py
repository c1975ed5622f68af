"""The full-catalog estimators of SampledMetrics against numpy/scipy written from the formulas:
exact sums over the full ranks at any catalog size, the bounded least-bias correction (a
box-constrained least-squares problem), the maximum-likelihood estimate and its duality gap, the
default estimators' range; and the sampled inputs SampledMetrics refuses."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from ignite.exceptions import NotComputableError
from scipy import optimize, stats

from ignite_recsys import SampledMetrics
from ignite_recsys._core import sampled_estimators as E


def np_probabilities(N, n):
    """A[R-1, r-1] = P(sampled rank r | full rank R): r - 1 ~ Binomial(n, (R - 1)/(N - 1))."""
    R = np.arange(1, N + 1)
    return stats.binom.pmf(np.arange(n + 1)[None, :], n, ((R - 1) / (N - 1))[:, None])


def np_metric(name, k, ranks):
    ranks = np.asarray(ranks, dtype=np.float64)
    inside = ranks <= k
    if name == "ndcg":
        return np.where(inside, 1 / np.log2(ranks + 1), 0.0)
    if name in ("recall", "hit_rate"):
        return inside * 1.0
    if name == "precision":
        return inside / k
    return np.where(inside, 1 / ranks, 0.0)


def np_em(histogram, A, iterations, tol=0.0):
    """Plain EM from the uniform distribution (Jin et al.): pi <- pi * A (s / (pi A)), normalised."""
    share = histogram / histogram.sum()
    keep = share > 0
    share, A = share[keep], A[:, keep]
    pi = np.full(A.shape[0], 1 / A.shape[0])
    for _ in range(iterations):
        new = pi * (A @ (share / (pi @ A)))
        new /= new.sum()
        if np.abs(new - pi).max() < tol:
            return new
        pi = new
    return pi


def np_gap(histogram, A, pi):
    """max_R g_R(pi) - 1, g_R = sum_r s(r) A[R, r] / (pi A)_r: an upper bound on l(pi*) - l(pi)."""
    share = histogram / histogram.sum()
    keep = share > 0
    return float((A[:, keep] @ (share[keep] / (pi @ A[:, keep]))).max() - 1)


PAIRS = (("ndcg", 10), ("recall", 10), ("precision", 5), ("mrr", 3), ("map", 1))


# --- exact sums over the full ranks, whatever the catalog ----------------------------------------------
@pytest.mark.parametrize("first, count, degree", [(1, 1, 8), (5, 7, 8), (11, 3000, 40), (1, 250_000, 200)])
def test_rank_sum_nodes_sum_polynomials_exactly(first, count, degree):
    ranks, weights = E.rank_sum_nodes(torch.tensor([first]), torch.tensor([count]), degree)
    x = np.arange(first, first + count, dtype=np.float64)
    t = (x - first) / max(count - 1, 1)
    node_t = (ranks[0].numpy() - first) / max(count - 1, 1)
    for power in (0, 1, degree // 3, degree):  # Bernstein-like terms t^a (1 - t)^b of degree <= degree
        want = np.sum(t**power * (1 - t) ** (degree - power))
        got = np.sum(weights[0].numpy() * node_t**power * (1 - node_t) ** (degree - power))
        assert got == pytest.approx(want, rel=1e-10, abs=1e-300)


@pytest.mark.parametrize("N, n, gamma", [(60, 6, 0.01), (3000, 100, 0.01), (20000, 50, 0.01), (5000, 200, 0.3)])
def test_bias_variance_tables_agree_with_numpy_over_every_full_rank(N, n, gamma):
    A = np_probabilities(N, n)
    got = E.krichene_rendle_tables(PAIRS, N, n, gamma).numpy()
    system = (1 - gamma) * A.T @ A + gamma * np.diag(A.sum(0))
    for column, (name, k) in enumerate(PAIRS):
        want = np.linalg.solve(system, A.T @ np_metric(name, k, np.arange(1, N + 1)))
        np.testing.assert_allclose(got[:, column], want, rtol=0, atol=1e-10)


def test_the_least_squares_rows_do_not_grow_with_the_catalog():
    rows, targets, sums = E.least_squares_rows((("ndcg", 10),), 1_000_000, 100)
    assert rows.shape == (10 + 101, 101) and targets.shape == (111, 1)
    assert float(sums.sum()) == pytest.approx(1_000_000, rel=1e-12)  # sum over R of sum_r P(r | R)
    starts, widths, probabilities = E.bin_probabilities(100_000, 50, 200)
    N, n = 100_000, 50
    A = np_probabilities(N, n)
    which = np.searchsorted(starts.numpy(), np.arange(1, N + 1), side="right") - 1
    want = np.zeros((len(starts), n + 1))
    np.add.at(want, which, A)
    np.testing.assert_allclose(probabilities.numpy(), want / widths.numpy()[:, None], rtol=0, atol=1e-12)


# --- the bounded least-bias correction ------------------------------------------------------------------
@pytest.mark.parametrize("N, n", [(80, 6), (400, 20), (2000, 100)])
def test_bounded_least_bias_solves_the_box_constrained_least_squares_problem(N, n):
    """KKT conditions of min ||A x - M||^2 s.t. lo <= x <= hi over every full rank (numpy), and no
    worse than scipy's trust-region solver on the full problem."""
    A = np_probabilities(N, n)
    got = E.krichene_rendle_tables(PAIRS, N, n, 0.0).numpy()
    for column, (name, k) in enumerate(PAIRS):
        M = np_metric(name, k, np.arange(1, N + 1))
        x = got[:, column]
        low, high = 0.0, M.max()
        assert x.min() >= low and x.max() <= high
        gradient = 2 * A.T @ (A @ x - M)
        free = (x > low + 1e-9) & (x < high - 1e-9)
        scale = np.abs(A.T @ M).max()
        assert np.all(np.abs(gradient[free]) <= 1e-7 * scale)
        assert np.all(gradient[x <= low + 1e-9] >= -1e-7 * scale)
        assert np.all(gradient[x >= high - 1e-9] <= 1e-7 * scale)
        other = optimize.lsq_linear(A, M, bounds=(low, high), method="trf", tol=1e-12).x
        assert np.sum((A @ x - M) ** 2) <= np.sum((A @ other - M) ** 2) + 1e-9 * scale


def test_unbounded_least_bias_leaves_the_range_and_bounded_does_not():
    unbounded = E.krichene_rendle_tables(PAIRS, 2000, 100, 0.0, bounded=False)
    bounded = E.krichene_rendle_tables(PAIRS, 2000, 100, 0.0)
    assert float(unbounded.abs().max()) > 10
    ranges = np.array([[0.0, np_metric(name, k, [1])[0]] for name, k in PAIRS])
    assert np.all(bounded.numpy() >= ranges[:, 0]) and np.all(bounded.numpy() <= ranges[:, 1])


def _reproducer(estimators=None, **kwargs):
    """A 2,000-item catalog of descending scores (item i ranks i + 1) and 1,000 test items at
    ranks rand**3 * 2000 (seed 0)."""
    rng = np.random.default_rng(0)
    items = np.minimum((rng.random(1000) ** 3 * 2000).astype(np.int64), 1999)
    scores = -torch.arange(2000, dtype=torch.float64).repeat(1000, 1)
    metric = SampledMetrics(top_k=[10], metrics=["ndcg", "recall", "mrr", "precision"], estimators=estimators, **kwargs)
    metric.update((scores, torch.from_numpy(items)))
    exact = {name: float(np.mean(np_metric(name, 10, items + 1))) for name in ("ndcg", "recall", "mrr", "precision")}
    return metric, exact


def test_every_default_estimate_lies_in_the_metric_range_on_the_reproducer():
    metric, exact = _reproducer()
    assert metric.estimators == ["naive", "kr_bias", "kr_bv", "mle"]
    values = metric.compute()
    for key, value in values.items():
        high = 0.1 if key.startswith("precision") else 1.0
        assert 0.0 <= value <= high, key
    for key, (low, high) in metric.confidence_interval().items():
        assert 0.0 <= low <= high <= (0.1 if key.startswith("precision") else 1.0), key
    assert abs(values["recall@10/kr_bias"] - exact["recall"]) < 0.1  # (unbounded: far outside [0, 1])


def test_the_unbounded_least_bias_estimate_is_given_with_a_warning():
    with pytest.warns(UserWarning, match="outside the metric's range"):
        metric, _ = _reproducer(estimators=["kr_bias_unbounded"], num_negatives=100)
    values = metric.compute()  # the raw estimate, as asked: here an MRR below 0 (exact 0.091)
    assert values["mrr@10/kr_bias_unbounded"] < 0.0 and values["recall@10/kr_bias_unbounded"] > 0.5


@pytest.mark.parametrize("N, n", [(300, 20), (2000, 100), (50_000, 100)])
def test_bounded_least_bias_estimates_lie_in_range_on_random_histograms(N, n):
    pairs = (("recall", 10), ("ndcg", 10), ("mrr", 10), ("precision", 10))
    table = E.krichene_rendle_tables(pairs, N, n, 0.0)
    rng = np.random.default_rng(N)
    for _ in range(50):
        histogram = torch.from_numpy(rng.multinomial(500, rng.dirichlet(np.full(n + 1, 0.1))).astype(np.float64))
        estimate = (histogram @ table / histogram.sum()).numpy()
        assert np.all(estimate >= 0) and np.all(estimate <= [1, 1, 1, 0.1])


# --- the maximum-likelihood estimate ---------------------------------------------------------------------
def _histogram(N, n, seed, power=3.0, size=2000):
    rng = np.random.default_rng(seed)
    full = np.clip(np.ceil(N * rng.random(size) ** power), 1, N).astype(int)
    sampled = rng.binomial(n, (full - 1) / (N - 1)) + 1
    return np.bincount(sampled - 1, minlength=n + 1).astype(float)


def test_mle_reports_the_duality_gap_it_reaches_and_beats_plain_em():
    N, n = 400, 30
    A = np_probabilities(N, n)
    for seed in range(3):
        h = _histogram(N, n, seed)
        result = E.mle_rank_distribution(torch.tensor(h), N, exact_up_to=N)
        pi = result.probabilities.numpy()
        assert result.gap == pytest.approx(max(np_gap(h, A, pi), 0.0), rel=1e-6, abs=1e-13)
        share = h / h.sum()
        keep = share > 0

        def loglik(p):
            return share[keep] @ np.log(p @ A[:, keep])

        assert loglik(pi) >= loglik(np_em(h, A, result.iterations)) - 1e-12


def test_mle_is_the_maximum_where_the_maximum_is_unique():
    """Fewer full ranks than sampled ranks: the log-likelihood is strictly concave, its maximum
    unique; EM run to convergence (numpy) reaches it."""
    N, n = 12, 30
    A = np_probabilities(N, n)
    pairs = (("ndcg", 3), ("recall", 5), ("mrr", 2))
    for seed in range(3):
        h = _histogram(N, n, seed, power=2.0)
        got, gap = E.mle_estimates(pairs, torch.tensor(h), N, exact_up_to=N)
        assert gap <= E.MLE_TOLERANCE
        pi = np_em(h, A, 200_000, tol=1e-14)
        want = [pi @ np_metric(name, k, np.arange(1, N + 1)) for name, k in pairs]
        np.testing.assert_allclose(got.numpy(), want, atol=2e-3)


def _check_mle_against_converged_em(N, n, seeds, atol=2e-3):
    """mle (every full rank its own bin) within ``atol`` of plain EM from the uniform start run to
    convergence (numpy: 200,000 iterations or a change below 1e-14)."""
    A = np_probabilities(N, n)
    pairs = (("ndcg", 10), ("recall", 10), ("mrr", 10))
    for seed in seeds:
        h = _histogram(N, n, seed)
        got, _ = E.mle_estimates(pairs, torch.tensor(h), N, exact_up_to=N)
        pi = np_em(h, A, 200_000, tol=1e-14)
        want = [pi @ np_metric(name, k, np.arange(1, N + 1)) for name, k in pairs]
        np.testing.assert_allclose(got.numpy(), want, atol=atol)


def test_mle_is_at_least_as_close_to_the_maximum_as_em_run_to_convergence():
    """l(EM after 200,000 iterations) <= l* <= l(mle) + its gap (numpy): the estimate is at a
    maximum to the gap it reports. (Where the maximum is flat, maximisers differ: on these
    histograms mle and EM differ by up to 0.05 in MRR@10 with mle's gap below 2e-7.)"""
    N, n = 120, 15
    A = np_probabilities(N, n)
    for seed in (0, 2):
        h = _histogram(N, n, seed)
        share = h / h.sum()
        keep = share > 0

        def loglik(p):
            return share[keep] @ np.log(p @ A[:, keep])

        pi = E.mle_rank_distribution(torch.tensor(h), N, exact_up_to=N).probabilities.numpy()
        gap = np_gap(h, A, pi)
        assert gap < 1e-6
        assert loglik(pi) + gap >= loglik(np_em(h, A, 200_000, tol=1e-14))


@pytest.mark.slow  # (200,000 numpy EM iterations per histogram: about 20 s each)
def test_mle_is_within_2e_3_of_em_run_to_convergence():
    _check_mle_against_converged_em(1500, 60, [0, 1])


def test_compute_reports_the_mle_gap():
    metric, _ = _reproducer(estimators=["mle"], num_negatives=50)
    assert metric.mle_gap is None
    metric.compute()
    assert metric.mle_gap is not None and 0.0 <= metric.mle_gap < 1e-3


# --- sampled inputs refused ---------------------------------------------------------------------------
def test_a_test_item_repeated_in_a_row_is_refused_and_the_state_kept():
    scores = torch.arange(10.0).repeat(2, 1)
    metric = SampledMetrics(top_k=[1], metrics=["recall"], num_negatives=5, estimators=["naive"])
    with pytest.raises(ValueError, match="positives holds an item id twice for one user"):
        metric.update((scores, torch.tensor([[5, 5, 5], [5, -1, -1]])))
    with pytest.raises(NotComputableError):
        metric.compute()
    metric.update((scores, torch.tensor([[5, -1, -1], [5, -1, -1]])))  # the same items once each
    assert float(metric._count) == 2


def test_popularity_sampling_with_weights_all_zero_names_the_weights():
    with pytest.raises(ValueError, match="item_weights are all 0"):
        SampledMetrics(sampling="popularity", item_weights=torch.zeros(10), estimators=["naive"])
    weights = torch.zeros(10)
    weights[3] = 1.0  # the only item of positive weight is the user's test item
    metric = SampledMetrics(sampling="popularity", item_weights=weights, estimators=["naive"], num_negatives=2)
    with pytest.raises(ValueError, match="item_weights are 0 on every candidate negative"):
        metric.update((torch.randn(1, 10), torch.tensor([3])))


def test_a_sampled_run_of_large_integer_user_ids_is_sized_by_its_users():
    pd = pytest.importorskip("pandas")
    from ignite_recsys import Interactions, evaluate

    users = [2**50, 7, 10**12]
    test = Interactions.from_frame(pd.DataFrame({"user": users, "item": [3, 4, 5]}), map_ids=False)
    run = pd.DataFrame({"user": users, "item": [3, 1, 5], "score": [1.0, 1.0, 1.0]})
    sampled = {"num_negatives": 5, "seed": 0, "estimators": ["naive"], "ties": "pessimistic"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = evaluate(run, test, ["hit_rate@1"], num_items=10, sampled=sampled, per_user=True, progress=False)
    # 2**50 and 10**12 rank their test item first; 7's list does not hold its test item 4
    by_user = dict(zip(map(int, result.user_ids), result.per_user()["hit_rate@1/naive"].tolist()))
    assert by_user == {2**50: 1.0, 7: 0.0, 10**12: 1.0}
