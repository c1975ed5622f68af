"""SampledMetrics: the estimators against numpy written from the papers' formulas, the sampling
(never an excluded item or a test item, uniform or by weight, reproducible), the tie rules, the
naive values against the sampled ranks, the input forms (scores, a model callable, padded test
items), an Engine and a plain loop, and bad input (a clear error, the state unchanged).

RecBole's evaluator is compared in tests/peers/test_peer_recbole.py (its own venv)."""

from __future__ import annotations

import math
import os
import re
import warnings

import numpy as np
import pytest
import torch
from ignite.engine import Engine
from scipy import optimize, stats

from ignite_recsys import SampledMetrics
from ignite_recsys._core import sampled_estimators as E

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- numpy references, from the formulas ------------------------------------------------------------
def np_metric(name, k, ranks):
    ranks = np.asarray(ranks, dtype=np.float64)
    inside = ranks <= k
    if name == "ndcg":
        return np.where(inside, 1 / np.log2(ranks + 1), 0.0)
    if name in ("recall", "hit_rate"):
        return inside * 1.0
    if name == "precision":
        return inside / k
    return np.where(inside, 1 / ranks, 0.0)  # map, mrr: one relevant item


def np_probabilities(N, n):
    """A[R-1, r-1] = P(sampled rank r | full rank R): r - 1 ~ Binomial(n, (R - 1)/(N - 1))."""
    R = np.arange(1, N + 1)
    return stats.binom.pmf(np.arange(n + 1)[None, :], n, ((R - 1) / (N - 1))[:, None])


def np_objective(x, A, M, gamma):
    """sum_R (E[x(r) | R] - M(R))^2 + gamma Var[x(r) | R]."""
    mean = A @ x
    return np.sum((mean - M) ** 2 + gamma * (A @ x**2 - mean**2))


def np_em(histogram, A, iterations):
    share = histogram / histogram.sum()
    pi = np.full(A.shape[0], 1 / A.shape[0])
    for _ in range(iterations):
        q = pi @ A
        pi = pi * (A @ np.where(share > 0, share / q, 0.0))
        pi /= pi.sum()
    return pi


PAIRS = (("ndcg", 3), ("recall", 3), ("precision", 5), ("map", 5), ("mrr", 1), ("hit_rate", 1))


def test_metric_of_rank_and_the_naive_table():
    ranks = torch.arange(1, 30, dtype=torch.float64)
    for name, k in PAIRS:
        np.testing.assert_allclose(
            E.metric_of_rank(name, k, ranks).numpy(), np_metric(name, k, ranks.numpy()), 0, 1e-15
        )
    np.testing.assert_allclose(
        E.naive_tables(PAIRS, 7).numpy(), np.stack([np_metric(n, k, np.arange(1, 9)) for n, k in PAIRS], 1), 0, 1e-15
    )


def test_sampled_rank_probabilities_are_binomial():
    N, n = 57, 9
    got = E.sampled_rank_probabilities(torch.arange(1, N + 1, dtype=torch.float64), N, n).numpy()
    np.testing.assert_allclose(got, np_probabilities(N, n), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got.sum(1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("gamma", [0.01, 0.3, 1.0])
def test_bias_variance_correction_minimises_its_objective(gamma):
    N, n = 60, 6
    A = np_probabilities(N, n)
    got = E.krichene_rendle_tables(PAIRS, N, n, gamma).numpy()
    for column, (name, k) in enumerate(PAIRS):
        M = np_metric(name, k, np.arange(1, N + 1))
        best = optimize.minimize(np_objective, np.zeros(n + 1), args=(A, M, gamma), method="BFGS", tol=1e-14).x
        np.testing.assert_allclose(got[:, column], best, atol=1e-5)
        # and no perturbation does better
        rng = np.random.default_rng(column)
        base = np_objective(got[:, column], A, M, gamma)
        for _ in range(20):
            assert np_objective(got[:, column] + 1e-3 * rng.standard_normal(n + 1), A, M, gamma) >= base - 1e-12


def test_least_bias_correction_is_the_least_squares_solution():
    N, n = 80, 6  # well conditioned: no eigenvalue is dropped
    A = np_probabilities(N, n)
    got = E.krichene_rendle_tables(PAIRS, N, n, 0.0, bounded=False).numpy()  # kr_bias_unbounded
    for column, (name, k) in enumerate(PAIRS):
        M = np_metric(name, k, np.arange(1, N + 1))
        np.testing.assert_allclose(got[:, column], np.linalg.lstsq(A, M, rcond=None)[0], atol=1e-8)


def test_rescaled_metric_is_the_metric_at_the_expected_rank_inverse():
    N, n = 1000, 20
    r = np.arange(1, n + 2)
    want = np.stack([np_metric(name, k, 1 + (r - 1) * (N - 1) / n) for name, k in PAIRS], 1)
    np.testing.assert_allclose(E.rescaled_tables(PAIRS, N, n).numpy(), want, 0, 1e-15)


def test_mle_is_the_em_estimate_of_the_rank_distribution():
    N, n = 150, 12  # every full rank its own bin
    rng = np.random.default_rng(3)
    full = np.minimum(N, np.ceil(N * rng.random(2000) ** 3)).astype(int)
    sampled = rng.binomial(n, (full - 1) / (N - 1)) + 1
    histogram = np.bincount(sampled - 1, minlength=n + 1).astype(float)
    starts, pi, _, _ = E.mle_rank_distribution(
        torch.tensor(histogram), N, exact_up_to=N, max_iterations=300, tolerance=0.0, accelerate=False
    )
    assert starts.tolist() == list(range(1, N + 1))
    want = np_em(histogram, np_probabilities(N, n), 300)
    np.testing.assert_allclose(pi.numpy(), want, rtol=1e-9, atol=1e-14)
    estimates = E.mle_estimates(PAIRS, torch.tensor(histogram), N, exact_up_to=N)[0].numpy()
    pi_converged = E.mle_rank_distribution(torch.tensor(histogram), N, exact_up_to=N)[1].numpy()
    for column, (name, k) in enumerate(PAIRS):
        assert estimates[column] == pytest.approx(pi_converged @ np_metric(name, k, np.arange(1, N + 1)), abs=1e-12)


def test_mle_bins_group_ranks_past_exact_up_to():
    starts = E.rank_bins(5000, 100)
    assert starts[:100].tolist() == list(range(1, 101))
    widths = np.diff(np.append(starts.numpy(), 5001))
    assert widths.min() >= 1 and widths[100:].max() <= 0.03 * 5000 and starts[-1] <= 5000


# --- the class ----------------------------------------------------------------------------------------
def _ranked_scores(users=40, items=300, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(users, items, generator=generator, dtype=torch.float64)


def _numpy_naive(ranks, pairs):
    return {f"{name}@{k}/naive": float(np.mean(np_metric(name, k, ranks))) for name, k in pairs}


def test_naive_values_are_the_metrics_of_the_sampled_ranks():
    scores = _ranked_scores()
    positives = torch.arange(40) * 7
    metric = SampledMetrics(top_k=[1, 5, 10], num_negatives=50, estimators=["naive"], per_user=True)
    metric.update((scores, positives))
    ranks = metric.sampled_ranks().numpy()
    assert ranks.min() >= 1 and ranks.max() <= 51 and np.all(ranks == np.round(ranks))
    want = _numpy_naive(ranks, [(name, k) for name in metric.metrics for k in (1, 5, 10)])
    got = metric.compute()
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=1e-12)
    for key, values in metric.per_user().items():
        name, k = key.split("/")[0].split("@")
        np.testing.assert_allclose(values.numpy(), np_metric(name, int(k), ranks), 0, 1e-15)


def test_negatives_are_never_excluded_items_nor_test_items():
    users, items = 30, 200
    generator = torch.Generator().manual_seed(1)
    exclude = torch.rand(users, items, generator=generator) < 0.3
    positives = torch.stack([torch.arange(users), torch.arange(users) + 100, torch.full((users,), -1)], 1)
    exclude[torch.arange(users).unsqueeze(1), positives[:, :2]] = False
    # every excluded item and test item scores above the test items' 0.5, every candidate below
    scores = torch.where(exclude, 1.0, 0.0).double()
    scores[torch.arange(users).unsqueeze(1), positives[:, :2]] = 0.5
    scores[torch.arange(users), torch.arange(users) + 100] = 0.75  # above the other test item too
    metric = SampledMetrics(top_k=[1], metrics=["hit_rate"], num_negatives=200, estimators=["naive"], per_user=True)
    metric.update((scores, positives, exclude))
    ranks = metric.sampled_ranks().view(users, 3)
    assert torch.all(ranks[:, :2] == 1) and torch.all(ranks[:, 2].isnan())
    assert metric.compute()["hit_rate@1/naive"] == 1.0
    mean, low, high = metric.num_candidates()
    allowed = (~exclude).sum(1) - 2  # less the two test items
    assert (low, high) == (int(allowed.min()) + 1, int(allowed.max()) + 1)
    assert mean == round(float((allowed + 1).double().mean()))


@pytest.mark.parametrize("sampling", ["uniform", "popularity"])
@pytest.mark.parametrize("row", [[0, -1], [3, 0, -1], [-1, 0], [0, -1, -1, 7]])
def test_padding_does_not_make_item_0_a_negative(sampling, row):
    # -1 pads a row of test items; a test item 0 in a padded row stays a positive: never drawn
    # as a negative, not counted among the candidates. The test items score 1, every other item
    # 0, so with pessimistic ties a test item ranks 1 exactly when no negative is a test item.
    items, n = 12, 300
    positives = torch.tensor([row])
    tested = sorted(item for item in row if item >= 0)
    scores = torch.zeros(1, items, dtype=torch.float64)
    scores[0, tested] = 1.0
    weights = torch.ones(items) if sampling == "popularity" else None
    metric = SampledMetrics(
        top_k=[1],
        metrics=["hit_rate"],
        num_negatives=n,
        sampling=sampling,
        item_weights=weights,
        ties="pessimistic",
        estimators=["naive"],
        per_user=True,
    )
    metric.update((scores, positives))
    ranks = metric.sampled_ranks()
    assert ranks[positives[0] >= 0].tolist() == [1.0] * len(tested)
    assert metric.compute()["hit_rate@1/naive"] == 1.0
    assert metric.num_candidates() == (items - len(tested) + 1,) * 3


def _bad_scores(scores, positives):
    return (torch.full_like(scores, math.nan), positives)


def _bad_ids(scores, positives):
    return (scores, positives + scores.shape[1])


@pytest.mark.parametrize("bad", [_bad_scores, _bad_ids])
@pytest.mark.parametrize("seeded", ["int", "generator"])
def test_a_refused_batch_draws_nothing_for_the_next(bad, seeded):
    # the same updates in the same order draw the same negatives: a batch refused in between
    # (its error raised, nothing added) leaves the sampler where it was
    scores, positives = _ranked_scores(12), torch.arange(12) * 5

    def metric():
        seed = 0 if seeded == "int" else torch.Generator().manual_seed(0)
        return SampledMetrics(top_k=[10], num_negatives=20, estimators=["naive"], seed=seed, per_user=True)

    clean, refused = metric(), metric()
    for target in (clean, refused):
        target.update((scores[:6], positives[:6]))
    with pytest.raises(ValueError):
        refused.update(bad(scores[6:], positives[6:]))
    for target in (clean, refused):
        target.update((scores[6:], positives[6:]))
    assert torch.equal(clean.sampled_ranks(), refused.sampled_ranks())
    assert clean.compute() == refused.compute()


def test_a_model_refused_for_its_output_draws_nothing_for_the_next():
    scores, positives = _ranked_scores(12), torch.arange(12) * 5
    wrong = {"shape": False}

    def model(users, items):
        out = scores[users.unsqueeze(1), items]
        return out[:, :-1] if wrong["shape"] else out

    def metric():
        return SampledMetrics(num_negatives=20, estimators=["naive"], model=model, num_items=300, per_user=True)

    clean, refused = metric(), metric()
    for target in (clean, refused):
        target.update((torch.arange(6), positives[:6]))
    wrong["shape"] = True
    with pytest.raises(ValueError, match="model"):
        refused.update((torch.arange(6, 12), positives[6:]))
    wrong["shape"] = False
    for target in (clean, refused):
        target.update((torch.arange(6, 12), positives[6:]))
    assert torch.equal(clean.sampled_ranks(), refused.sampled_ranks())


@pytest.mark.parametrize("sampling", ["uniform", "popularity"])
def test_negatives_are_drawn_with_the_given_probabilities(sampling):
    users, items, n = 400, 50, 200
    weights = torch.arange(1.0, items + 1) if sampling == "popularity" else None
    scores = torch.arange(float(items)).repeat(users, 1)  # item i scores i
    positives = torch.full((users,), 20)
    metric = SampledMetrics(
        top_k=[1], num_negatives=n, sampling=sampling, item_weights=weights, estimators=["naive"], per_user=True
    )
    metric.update((scores, positives))
    above = metric.sampled_ranks().numpy() - 1  # negatives above item 20: Binomial(n, p) per user
    w = np.arange(1.0, items + 1) if sampling == "popularity" else np.ones(items)
    others = np.delete(w, 20)
    p = w[21:].sum() / others.sum()
    assert abs(above.mean() - n * p) < 5 * math.sqrt(n * p * (1 - p) / users)
    assert abs(above.var() - n * p * (1 - p)) < 0.2 * n * p * (1 - p)


def test_a_zero_weight_item_is_never_drawn():
    weights = torch.ones(20)
    weights[15:] = 0  # items 15..19 score highest and are never drawn
    scores = torch.arange(20.0).repeat(50, 1)
    metric = SampledMetrics(
        top_k=[1], num_negatives=30, sampling="popularity", item_weights=weights, estimators=["naive"], per_user=True
    )
    metric.update((scores, torch.full((50,), 14)))
    assert torch.all(metric.sampled_ranks() == 1)


def test_ties():
    constant = torch.zeros(2000, 101)
    positives = torch.zeros(2000, dtype=torch.int64)
    results = {}
    for ties in ("optimistic", "pessimistic", "random"):
        metric = SampledMetrics(top_k=[10], num_negatives=100, ties=ties, estimators=["naive"], per_user=True)
        metric.update((constant, positives))
        results[ties] = metric.sampled_ranks().numpy()
    assert np.all(results["optimistic"] == 1) and np.all(results["pessimistic"] == 101)
    counts = np.bincount(results["random"].astype(int) - 1, minlength=101)
    assert stats.chisquare(counts).pvalue > 1e-4  # uniform over 1..101
    assert abs(np.mean(results["random"] <= 10) - 10 / 101) < 0.03


def test_sampling_is_reproducible_and_restarts_at_reset():
    scores, positives = _ranked_scores(), torch.arange(40)
    a = SampledMetrics(num_negatives=20, estimators=["naive"], seed=3, per_user=True)
    b = SampledMetrics(num_negatives=20, estimators=["naive"], seed=3, per_user=True)
    c = SampledMetrics(num_negatives=20, estimators=["naive"], seed=4, per_user=True)
    for metric in (a, b, c):
        metric.update((scores, positives))
    assert torch.equal(a.sampled_ranks(), b.sampled_ranks())
    assert not torch.equal(a.sampled_ranks(), c.sampled_ranks())
    first = a.sampled_ranks().clone()
    a.reset()
    a.update((scores, positives))
    assert torch.equal(a.sampled_ranks(), first)
    generator = torch.Generator().manual_seed(3)
    d = SampledMetrics(num_negatives=20, estimators=["naive"], seed=generator, per_user=True)
    d.update((scores, positives))
    assert torch.equal(d.sampled_ranks(), first)  # the same stream as seed=3


def test_a_model_callable_ranks_what_the_score_matrix_ranks():
    scores, positives = _ranked_scores(), torch.arange(40) * 3
    exclude = torch.zeros(40, 300, dtype=torch.bool)
    exclude[:, 200:] = True
    from_scores = SampledMetrics(num_negatives=30, per_user=True, estimators=["naive", "kr_bias"])
    from_model = SampledMetrics(
        num_negatives=30,
        per_user=True,
        estimators=["naive", "kr_bias"],
        model=lambda users, items: scores[users.unsqueeze(1), items],
        num_items=300,
    )
    for batch in torch.arange(40).split(16):
        from_scores.update((scores[batch], positives[batch], exclude[batch]))
        from_model.update((batch, positives[batch], exclude[batch]))
    assert torch.equal(from_scores.sampled_ranks(), from_model.sampled_ranks())
    assert from_scores.compute() == from_model.compute()


def test_engine_and_plain_loop_agree():
    scores, positives = _ranked_scores(64), torch.arange(64)
    batches = [(scores[i : i + 16], positives[i : i + 16]) for i in range(0, 64, 16)]
    loop = SampledMetrics(top_k=[5, 10], num_negatives=40, estimators=["naive", "kr_bv", "rescaled"])
    for batch in batches:
        loop.update(batch)
    engine = Engine(lambda engine, batch: batch)
    attached = SampledMetrics(top_k=[5, 10], num_negatives=40, estimators=["naive", "kr_bv", "rescaled"])
    attached.attach(engine, "sampled")
    state = engine.run(batches, max_epochs=2)  # reset each epoch: the same samples again
    assert state.metrics["sampled"] == loop.compute()
    assert state.metrics["sampled/ndcg@10/kr_bv"] == loop.compute()["ndcg@10/kr_bv"]


def test_intervals_are_student_t_over_the_per_item_values():
    scores, positives = _ranked_scores(), torch.arange(40)
    metric = SampledMetrics(top_k=[10], metrics=["ndcg"], num_negatives=25, per_user=True)
    metric.update((scores, positives))
    intervals, means = metric.confidence_interval(0.9), metric.compute()
    assert "ndcg@10/mle" in means and "ndcg@10/mle" not in intervals and "ndcg@10/mle" not in metric.per_user()
    for key, values in metric.per_user().items():
        x = values.numpy()
        want = stats.t.interval(0.9, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
        want = tuple(np.clip(want, 0.0, 1.0))  # the ends clipped to NDCG's range
        assert intervals[key] == pytest.approx(want, abs=1e-9)
        assert means[key] == pytest.approx(np.clip(x.mean(), 0.0, 1.0), abs=1e-12)  # (kr_bv's clipped)


def test_state_round_trip_and_constant_size():
    scores, positives = _ranked_scores(), torch.arange(40)
    metric = SampledMetrics(num_negatives=30, estimators=["naive", "kr_bv"])
    for _ in range(3):
        metric.update((scores, positives))
    sizes = {key: value.numel() for key, value in metric.state_dict()["__metric_state_per_rank"][0].items()}
    assert sizes["_histogram"] == 31
    copy = SampledMetrics(num_negatives=30, estimators=["naive", "kr_bv"])
    copy.load_state_dict(metric.state_dict())
    assert copy.compute() == metric.compute()
    with pytest.raises(ValueError, match="num_negatives"):
        SampledMetrics(num_negatives=31, estimators=["naive", "kr_bv"]).load_state_dict(metric.state_dict())


@pytest.mark.parametrize(
    "output, message",
    [
        ((torch.zeros(4, 10), torch.tensor([0, 1, 2, 10])), "outside"),
        ((torch.zeros(4, 10), torch.tensor([0, 1, 2, -2])), "outside"),
        ((torch.full((4, 10), math.nan), torch.tensor([0, 1, 2, 3])), "NaN"),
        # a NaN no draw may read (item 9, no test item, 5 negatives of 9): refused whatever the draw
        ((torch.zeros(4, 10).index_fill_(1, torch.tensor([9]), math.nan), torch.tensor([0, 1, 2, 3])), "NaN"),
        ((torch.zeros(0, 10), torch.zeros(0, dtype=torch.int64)), "at least one user"),
        ((torch.zeros(4, 10), torch.zeros(4, 0, dtype=torch.int64)), "at least one user and one item id"),
        ((torch.zeros(4, 0), torch.tensor([0, 1, 2, 3])), "at least one item column"),
        (
            (torch.zeros(4, 10), torch.tensor([0, 1, 2, 3]), torch.sparse_coo_tensor([[0], [12]], [True], (4, 10))),
            r"exclude \(sparse\) holds an entry outside",
        ),
        (
            (torch.zeros(4, 10), torch.tensor([0, 1, 2, 3]), torch.sparse_coo_tensor([[0], [-1]], [True], (4, 10))),
            r"exclude \(sparse\) holds an entry outside",
        ),
        (
            (torch.zeros(4, 10), torch.tensor([0, 1, 2, 3]), torch.ones(4, 10, dtype=torch.bool).fill_diagonal_(False)),
            "no candidate",
        ),
        ((torch.zeros(4, 10), torch.tensor([0.0, 1, 2, 3])), "positives must hold item ids"),
        ((torch.zeros(4, 10), torch.tensor([0, 1, 2])), "batch=3"),
        ((torch.zeros(4, 10), torch.tensor([0, 1, 2, 3]), torch.zeros(4, 9, dtype=torch.bool)), "exclude must be"),
        ((torch.zeros(4, 10, dtype=torch.int64), torch.tensor([0, 1, 2, 3])), "floating"),
        ((torch.zeros(4, 10),), "update expects"),
    ],
)
def test_bad_input_raises_and_leaves_the_state(output, message):
    metric = SampledMetrics(num_negatives=5)
    metric.update((torch.randn(4, 10), torch.tensor([0, 1, 2, 3])))
    before = {key: value.clone() for key, value in metric.state_dict()["__metric_state_per_rank"][0].items()}
    with pytest.raises((ValueError, TypeError), match=message):
        metric.update(output)
    after = metric.state_dict()["__metric_state_per_rank"][0]
    assert all(torch.equal(before[key], after[key]) for key in before)


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="item_weights"):
        SampledMetrics(sampling="popularity")
    with pytest.raises(ValueError, match="estimators"):
        SampledMetrics(sampling="popularity", item_weights=torch.ones(3), estimators=["naive", "kr_bv"])
    with pytest.raises(ValueError, match="num_items"):
        SampledMetrics(model=lambda users, items: items.double())
    with pytest.raises(ValueError, match="gamma"):
        SampledMetrics(gamma=0.0)
    with pytest.raises(ValueError, match="metrics"):
        SampledMetrics(metrics=["ndcg", "auc"])


@pytest.mark.slow
def test_each_correction_has_less_bias_than_the_naive_metric():
    """Synthetic data (examples/data.py), a noisy model, n = 100 uniform negatives, 30 seeds: the
    mean over seeds of estimate - exact is smaller in magnitude for every estimator than for the
    naive sampled metric (NDCG@10, Recall@10; exact ranks from numpy)."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    from data import synthetic

    users, items = 300, 2000
    split, (user_taste, item_taste, item_bias) = synthetic(users=users, items=items, seed=0)
    generator = torch.Generator().manual_seed(1)
    scores = (user_taste @ item_taste.T / 4 + item_bias + torch.randn(users, items, generator=generator)).double()
    test, train = split.test, split.train
    positives = torch.full((users, int(test.sum(1).max())), -1)
    s, candidate, full_ranks = scores.numpy(), (~(train | test)).numpy(), []
    for u in range(users):
        mine = test[u].nonzero().flatten()
        positives[u, : len(mine)] = mine
        full_ranks += [1 + np.sum(candidate[u] & (s[u] > s[u, i])) for i in mine.tolist()]
    full_ranks = np.array(full_ranks, dtype=float)
    exact = {"ndcg@10": np.mean(np_metric("ndcg", 10, full_ranks)), "recall@10": np.mean(full_ranks <= 10)}
    estimates, named = [], ["naive", "kr_bias", "kr_bv", "rescaled", "mle"]
    for seed in range(30):
        metric = SampledMetrics(top_k=[10], metrics=["ndcg", "recall"], num_negatives=100, seed=seed, estimators=named)
        metric.update((scores, positives, train))
        estimates.append(metric.compute())
    for key, truth in exact.items():
        bias = {e: np.mean([x[f"{key}/{e}"] for x in estimates]) - truth for e in named}
        assert bias["naive"] > 0.2  # the sampled metric overstates the full-catalog one
        for estimator in named[1:]:
            assert abs(bias[estimator]) < abs(bias["naive"]) / 2, (key, estimator, bias)


def test_evaluate_with_sampled_negatives():
    from ignite_recsys import Interactions, evaluate

    generator = torch.Generator().manual_seed(2)
    num_users, num_items = 50, 400
    scores = torch.randn(num_users, num_items, generator=generator, dtype=torch.float64)
    test_users = torch.arange(num_users).repeat_interleave(2)
    test_items = (torch.arange(num_users * 2) * 7) % num_items
    train_users = torch.arange(num_users).repeat_interleave(3)
    train_items = (torch.arange(num_users * 3) * 11 + 1) % num_items
    test = Interactions(test_users, test_items, num_items=num_items)
    train = Interactions(train_users, train_items, num_items=num_items)
    sampled = {"num_negatives": 40, "seed": 5, "estimators": ["naive", "kr_bv"]}
    result = evaluate(
        lambda users: scores[users],
        test,
        ["ndcg@10", "hr@5"],
        exclude=train,
        sampled=sampled,
        per_user=True,
        progress=False,
    )
    assert list(result.means) == ["ndcg@10/naive", "ndcg@10/kr_bv", "hit_rate@5/naive", "hit_rate@5/kr_bv"]
    # the same as the metric on the same batches (one batch: 50 users < 256)
    positives = torch.stack([test_items[0::2], test_items[1::2]], 1)
    exclude = torch.zeros(num_users, num_items, dtype=torch.bool)
    exclude[train_users, train_items] = True
    metric = SampledMetrics([5, 10], ["ndcg", "hit_rate"], num_negatives=40, seed=5, estimators=["naive", "kr_bv"])
    metric.update((scores, positives, exclude))
    want = metric.compute()
    assert result["ndcg@10/naive"] == want["ndcg@10/naive"] and result["hit_rate@5/kr_bv"] == want["hit_rate@5/kr_bv"]
    assert result.per_user()["ndcg@10/naive"].shape == (100,)
    assert list(result.user_ids) == test_users.tolist()
    assert result.per_user()["ndcg@10/naive"].mean().item() == pytest.approx(result["ndcg@10/naive"], abs=1e-12)
    low, high = result.intervals["ndcg@10/naive"]
    assert low < result["ndcg@10/naive"] < high
    with pytest.raises(ValueError, match="r_precision"):
        evaluate(lambda users: scores[users], test, ["r_precision"], sampled=10, progress=False)
    with pytest.raises(TypeError, match="callable"):
        evaluate((torch.arange(2), torch.zeros(2, 3, dtype=torch.int64)), test, ["ndcg@10"], sampled=10)
    with pytest.raises(TypeError, match="unknown"):
        evaluate(lambda users: scores[users], test, ["ndcg@10"], sampled={"negatives": 10}, progress=False)


@pytest.mark.parametrize("ties", ["pessimistic", "random"])
def test_evaluate_sampled_keeps_item_0_a_positive_of_a_padded_user(ties):
    # user 0's one test item is item 0, which it scores above every other item; user 1 has two
    # test items, so user 0's row of test items is padded: item 0 must still rank first
    from ignite_recsys import Interactions, evaluate

    num_items = 50
    scores = torch.arange(num_items, 0, -1, dtype=torch.float64).repeat(2, 1)
    test = Interactions(torch.tensor([0, 1, 1]), torch.tensor([0, 10, 20]), num_items=num_items)
    sampled = {"num_negatives": 100, "seed": 0, "estimators": ["naive"], "ties": ties}
    result = evaluate(lambda users: scores[users], test, ["hit_rate@1"], sampled=sampled, per_user=True, progress=False)
    assert list(result.user_ids) == [0, 1, 1]
    assert result.per_user()["hit_rate@1/naive"].tolist()[0] == 1.0


@pytest.mark.slow  # (a subprocess and the full-catalog estimators of two runs: about a minute on a busy machine)
def test_evaluate_sampled_reads_a_run_as_scores(tmp_path):
    import json
    import subprocess
    import sys

    from ignite_recsys import evaluate

    num_users, num_items = 30, 120
    scores, test, run = _dense_run(num_users, num_items, seed=4, step=5)
    options = {"num_negatives": 25, "seed": 1, "estimators": ["naive", "rescaled"]}
    from_model = evaluate(lambda u: scores[u], test, ["ndcg@10"], sampled=options, progress=False)
    from_run = evaluate(run, test, ["ndcg@10"], sampled=options, progress=False)
    assert from_run.means == from_model.means
    # the command line, with a TREC run file and qrels
    qrels, run_file = tmp_path / "qrels", tmp_path / "run"
    qrels.write_text("".join(f"{u} 0 {i} 1\n" for u, i in zip(test.users.tolist(), _first_items(test))))
    run_file.write_text(
        "".join(f"{u} Q0 {i} 0 {scores[u, i].item()!r} m\n" for u in range(num_users) for i in range(num_items))
    )
    command = [sys.executable, "-m", "ignite_recsys", "evaluate", "--qrels", str(qrels), "--run", str(run_file)]
    command += ["--metrics", "ndcg@10", "--sampled", "25", "--format", "json", "--no-progress"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=True)
    printed = json.loads(done.stdout)
    file_result = evaluate(str(run_file), str(qrels), ["ndcg@10"], sampled=25, progress=False)
    assert printed["means"]["ndcg@10/naive"] == pytest.approx(file_result["ndcg@10/naive"], abs=1e-12)
    assert set(printed["means"]) == {f"ndcg@10/{e}" for e in E.DEFAULT_ESTIMATORS}  # the in-range ones
    assert all(0.0 <= value <= 1.0 for value in printed["means"].values())


def test_a_sampled_run_groups_split_users_and_reads_scores_at_the_precision_asked(tmp_path):
    """The sampled path reads a run as evaluate() does: a user's rows apart are grouped (the same
    values as the grouped file), and score_precision="float32" ties the scores equal in float32
    (the same values as the file with its scores written in float32)."""
    from ignite_recsys import evaluate

    num_users, num_items = 20, 60
    scores, test, _ = _dense_run(num_users, num_items, seed=6, step=7)
    scores[:, 0::2] = scores[:, 1::2] + 1e-12  # pairs equal in float32 (then the higher docid first), not in float64
    qrels = tmp_path / "qrels"
    qrels.write_text("".join(f"{u} 0 {i} 1\n" for u, i in zip(test.users.tolist(), _first_items(test))))
    rows = [(u, i, scores[u, i].item()) for u in range(num_users) for i in range(num_items)]

    def written(name, rows, float32=False):
        text = "".join(f"{u} Q0 {i} 0 {float(np.float32(s)) if float32 else s!r} m\n" for u, i, s in rows)
        (tmp_path / name).write_text(text)
        return str(tmp_path / name)

    options = dict(sampled={"num_negatives": 59, "seed": 3}, progress=False, per_user=True)  # each pair meets
    grouped = evaluate(written("grouped", rows), str(qrels), ["ndcg@10"], **options)
    split = evaluate(written("split", rows[0::2] + rows[1::2]), str(qrels), ["ndcg@10"], **options)
    assert split.means == grouped.means
    rounded = evaluate(written("rounded", rows, float32=True), str(qrels), ["ndcg@10"], **options)
    float32 = evaluate(written("full", rows), str(qrels), ["ndcg@10"], score_precision="float32", **options)
    assert float32.means == rounded.means != grouped.means


def _dense_run(num_users, num_items, seed, step):
    """(scores, test, run): random float64 scores of every item, one test item per user (user *
    step modulo the catalog), and the scores as a run's columns."""
    from ignite_recsys import Interactions

    scores = torch.rand(num_users, num_items, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    test = Interactions(torch.arange(num_users), (torch.arange(num_users) * step) % num_items, num_items=num_items)
    users, items = torch.meshgrid(torch.arange(num_users), torch.arange(num_items), indexing="ij")
    run = {"user": users.flatten().numpy(), "item": items.flatten().numpy(), "score": scores.flatten().numpy()}
    return scores, test, run


def _first_items(test):
    return [int(i) for i in test.item_ids(test.users, grades=False).ids[:, 0]]


@pytest.mark.slow  # (every estimator on a 2000-item catalog: about 10 s)
def test_the_docs_page_runs():
    """The python blocks of docs/sampled.md, in order, in one namespace (their asserts included)."""
    import re

    page = open(os.path.join(ROOT, "docs", "sampled.md")).read()
    blocks = re.findall(r"^```python\n(.*?)^```$", page, flags=re.MULTILINE | re.DOTALL)
    assert len(blocks) == 3
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/sampled.md", "exec"), namespace)


def test_no_autograd_graph_in_state():
    weights = torch.rand(8, 50, requires_grad=True)
    metric = SampledMetrics(num_negatives=10, estimators=["naive"], per_user=True)
    from_model = SampledMetrics(
        num_negatives=10,
        estimators=["naive"],
        per_user=True,
        num_items=50,
        model=lambda users, items: torch.sigmoid(weights * 2.0)[users.unsqueeze(1), items],
    )
    for _ in range(3):
        metric.update((torch.sigmoid(weights * 2.0), torch.arange(8)))
        from_model.update((torch.arange(8), torch.arange(8)))
    for m in (metric, from_model):
        for attribute, value in vars(m).items():
            if isinstance(value, torch.Tensor):
                assert value.grad_fn is None and not value.requires_grad, attribute
        assert all(not rows.requires_grad for rows in m._per_user_ranks)
        m.compute()
    assert weights.grad is None


@pytest.mark.parametrize("form", ["uniform", "popularity", "model", "pessimistic", "per_user"])
def test_update_makes_no_host_read(form):
    """On the meta device (no values: a host read, a value-dependent shape or a CPU tensor in the
    way raises), as tests/test_meta_device.py does for the other metrics. torch has no meta
    generator: the draws use the default one there."""
    meta = torch.device("meta")
    options: dict = {"num_negatives": 10, "estimators": ["naive"], "device": meta}
    if form == "popularity":
        options.update(sampling="popularity", item_weights=torch.rand(50))
    if form == "model":
        options.update(model=lambda users, items: torch.empty(items.shape, device=meta), num_items=50)
    if form == "pessimistic":
        options.update(ties="pessimistic")
    if form == "per_user":
        options.update(per_user=True)
    metric = SampledMetrics(**options)
    metric._generator = lambda device: None  # type: ignore[method-assign]
    head = torch.empty(4, dtype=torch.int64, device=meta) if form == "model" else torch.empty(4, 50, device=meta)
    positives = torch.empty(4, 2, dtype=torch.int64, device=meta)
    metric.update((head, positives, torch.empty(4, 50, dtype=torch.bool, device=meta)))
    assert metric._histogram.device == meta


def test_default_estimators_follow_the_sampling_and_the_seed_is_not_configuration():
    assert SampledMetrics().estimators == ["naive", "kr_bias", "kr_bv", "mle"]  # every value in the range
    assert SampledMetrics(sampling="popularity", item_weights=torch.ones(3)).estimators == ["naive"]
    scores, positives = _ranked_scores(), torch.arange(40)
    a, b = SampledMetrics(seed=1, estimators=["naive"]), SampledMetrics(seed=2, estimators=["naive"])
    a.update((scores, positives))
    b.load_state_dict(a.state_dict())  # the same meaning: states of two seeds may be combined
    assert b.compute() == a.compute()


def test_evaluate_sampled_counts_the_interactions_graded_one_or_more():
    from ignite_recsys import Interactions, evaluate

    scores = torch.randn(3, 50, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    graded = Interactions(
        torch.tensor([0, 0, 1, 2]), torch.tensor([1, 2, 3, 4]), torch.tensor([1.0, 0.0, 2.0, 0.0]), num_items=50
    )
    options = {"num_negatives": 10, "estimators": ["naive"]}
    result = evaluate(lambda u: scores[u], graded, ["ndcg@10"], sampled=options, per_user=True, progress=False)
    assert result.info["test_items"] == 2 and list(result.user_ids) == [0, 1]


def test_the_function_gives_the_class_per_user_values_and_the_sure_ones_by_hand():
    from ignite_recsys import functional as F

    generator = torch.Generator().manual_seed(3)
    scores = torch.rand(6, 300, generator=generator)
    positives = scores.argmax(1)  # each user's best item: rank 1 among any sample
    positives[3] = scores[3].argmin()  # the worst: last among any sample
    options = dict(top_k=[1, 5], metrics=["hit_rate", "ndcg"], num_negatives=50, estimators=["naive"], seed=7)
    got = F.sampled_metrics(scores, positives, **options)
    metric = SampledMetrics(per_user=True, **options)
    metric.update((scores, positives))
    expected = metric.per_user()
    assert got.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], rtol=0, atol=0)
    assert got["hit_rate@1/naive"].tolist() == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0]
    assert got["ndcg@5/naive"][3] == 0.0


def test_a_sampled_run_draws_its_negatives_in_batches_of_2048_users():
    """A seed draws the same negatives as long as the users come in the same batches: a sampled
    run keeps its batches of 2048 users (a plain run updates 1024 at a time)."""
    from ignite_recsys import evaluate

    _, test, run = _dense_run(2100, 40, seed=7, step=7)
    options = {"num_negatives": 10, "seed": 2, "estimators": ["naive"]}

    def ndcg(**batch):
        return evaluate(run, test, ["ndcg@5"], sampled=options, progress=False, **batch)["ndcg@5/naive"]

    default = ndcg()
    assert default == ndcg(batch_size=2048)
    assert default != ndcg(batch_size=1024)  # (other batches, other draws)


def test_an_estimate_without_solution_is_refused_naming_it(tmp_path):
    """Two items in the catalog and more negatives than candidates: Krichene and Rendle's system
    is singular. The error names the estimator and what to do (torch's solver error said
    neither); the naive estimate is still the hit rate of a one-item ranking (1.0 here: each
    user's test item scores above the only other item)."""
    from ignite_recsys import evaluate

    (tmp_path / "q").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    (tmp_path / "r").write_text("q1 Q0 d1 1 3 t\nq1 Q0 d2 2 2 t\nq2 Q0 d2 1 3 t\nq2 Q0 d1 2 2 t\n")
    with pytest.raises(ValueError, match=r"'kr_bv' estimate has no solution for num_negatives=5 drawn among 2"):
        evaluate(str(tmp_path / "r"), str(tmp_path / "q"), ["hit_rate@1"], sampled={"num_negatives": 5}, progress=False)
    options = {"num_negatives": 5, "estimators": ["naive"]}
    result = evaluate(str(tmp_path / "r"), str(tmp_path / "q"), ["hit_rate@1"], sampled=options, progress=False)
    assert result.means == {"hit_rate@1/naive": 1.0}


def test_a_sampled_run_draws_its_negatives_among_every_item_it_ranks():
    """A run of text ids against a test table that holds few of them: the run's other items are
    catalog items, among which the negatives are drawn. Items the test table did not hold were
    left out (negatives came from the test items alone), and with num_items=10 from ten ids that
    named no item, scored below every listed one: every user ranked first. Reference: the same
    run with integer ids numbered as the catalog numbers the items (the test table's first, then
    the run's others in sorted order), which draws the same negatives; user b's test item is its
    worst, so with 3 negatives it ranks 4th whatever they are."""
    pd = pytest.importorskip("pandas")
    from ignite_recsys import IdMap, Interactions, evaluate

    items = [f"i{j}" for j in range(10)]
    rows = [("a", item, float(j)) for j, item in enumerate(items)] + [
        ("b", item, -float(j)) for j, item in enumerate(items)
    ]
    run = pd.DataFrame(rows, columns=["user", "item", "score"])
    test = Interactions.from_frame(pd.DataFrame({"user": ["a", "b"], "item": ["i5", "i9"]}))
    options = dict(sampled={"num_negatives": 3, "ties": "pessimistic", "seed": 0, "estimators": ["naive"]})
    options.update(per_user=True, progress=False)

    def reference(order):
        number = {item: position for position, item in enumerate(order)}
        dense_test = Interactions(torch.tensor([0, 1]), torch.tensor([number["i5"], number["i9"]]), num_items=10)
        dense_run = run.assign(user=run.user.map({"a": 0, "b": 1}), item=run.item.map(number))
        result = evaluate(dense_run, dense_test, ["mrr@4", "hit_rate@1"], **options)
        assert result.per_user()["mrr@4/naive"][1] == 0.25 and result.per_user()["hit_rate@1/naive"][1] == 0.0
        return result.means

    appended = reference(["i5", "i9"] + [item for item in items if item not in ("i5", "i9")])
    for num_items in (None, 10):
        result = evaluate(run, test, ["mrr@4", "hit_rate@1"], num_items=num_items, **options)
        assert result.means == appended and result.info["test_items"] == 2
    assert test.num_items == 2 and len(test.item_map) == 2  # the caller's table is left as it was
    # a catalog given smaller than the items the run ranks: refused
    with pytest.raises(
        ValueError, match=r"the items the run ranks are 10 distinct items, more than the catalog num_items=5"
    ):
        evaluate(run, test, ["mrr@4"], num_items=5, **options)
    # a catalog of the same ten items given by an item map: its order
    mapped = Interactions.from_frame(pd.DataFrame({"user": ["a", "b"], "item": ["i5", "i9"]}), item_map=IdMap(items))
    assert evaluate(run, mapped, ["mrr@4", "hit_rate@1"], **options).means == reference(items)


def test_a_sampled_run_numbers_its_items_whatever_its_chunks_and_row_order(tmp_path, monkeypatch):
    """The run's items the test table lacks join the catalog in sorted order, all at once: added
    chunk by chunk, each chunk sorted, their numbering (and so the negatives a seed draws)
    depended on where the reader cut the file (3 MiB of text, a million parquet rows), on its
    format and on its rows' order. Reference: the same run with integer ids numbered the
    documented way (the test table's items, then the run's others sorted), on one chunk."""
    pd = pytest.importorskip("pandas")
    from ignite_recsys.data import files
    from ignite_recsys import Interactions, evaluate

    rng = np.random.default_rng(7)
    names = [f"d{j}" for j in rng.permutation(40)]
    users = [f"u{u}" for u in range(8)]
    rows = [(user, item, float(score)) for user in users
            for score, item in enumerate(rng.choice(names, 15, replace=False))]  # fmt: skip
    judged = {user: list(rng.choice(names, 2, replace=False)) for user in users}
    test = Interactions.from_frame(pd.DataFrame([(u, i) for u, items in judged.items() for i in items],
                                                columns=["user", "item"]))  # fmt: skip
    options = dict(sampled={"num_negatives": 6, "seed": 3, "ties": "pessimistic", "estimators": ["naive"]})
    options.update(per_user=True, progress=False)
    metrics = ["ndcg@5", "mrr@7"]

    def values(run, **more):
        result = evaluate(run, test, metrics, **options, **more)
        return {key: value.tolist() for key, value in result.per_user().items()}

    frame = pd.DataFrame(rows, columns=["user", "item", "score"])
    shuffled = frame.sample(frac=1.0, random_state=1)
    for name, table in (("run", frame), ("shuffled", shuffled)):
        with open(tmp_path / f"{name}.trec", "w") as out:
            out.writelines(f"{u} Q0 {i} 0 {x} t\n" for u, i, x in table.itertuples(index=False))
        table.to_csv(tmp_path / f"{name}.csv", index=False)
    order = list(test.item_map.ids) + sorted(set(frame.item) - set(test.item_map.ids))
    number = {item: position for position, item in enumerate(order)}
    dense_test = Interactions(
        torch.tensor([users.index(u) for u, items in judged.items() for _ in items]),
        torch.tensor([number[i] for items in judged.values() for i in items]),
        num_items=len(order),
    )
    dense_run = frame.assign(user=frame.user.map(users.index), item=frame.item.map(number))
    result = evaluate(dense_run, dense_test, metrics, **options)
    expected = {key: value.tolist() for key, value in result.per_user().items()}
    assert values(frame) == expected
    monkeypatch.setattr(files, "CHUNK_BYTES", 64)  # a few lines a chunk
    for run in ("run.trec", "shuffled.trec", "run.csv", "shuffled.csv"):
        assert values(tmp_path / run) == expected, run
    assert values(shuffled) == expected


def test_a_sampled_run_counts_a_test_user_it_lacks_as_an_empty_list():
    """A test user the run does not rank has an empty list: its test items rank last, below every
    negative (0 at every cut-off up to the number of negatives, as an empty list counts 0 in the
    full-catalog evaluation), where they were tied with every negative and ranked by the tie rule,
    1st with ties='optimistic'. result.info counts the run's rows, those of users outside the test
    table and the test users it lacks."""
    pd = pytest.importorskip("pandas")
    from ignite_recsys import Interactions, evaluate

    test = Interactions.from_frame(pd.DataFrame({"user": ["a", "b", "c", "d"], "item": [3, 4, 5, 6]}), map_ids=False)
    # a ranks its test item first; z is no test user; b, c and d are not in the run
    run = pd.DataFrame({"user": ["a", "a", "z"], "item": [3, 7, 1], "score": [2.0, 1.0, 1.0]})
    for ties in ("optimistic", "random", "pessimistic"):
        sampled = {"num_negatives": 5, "seed": 0, "ties": ties, "estimators": ["naive"]}
        result = evaluate(run, test, ["hit_rate@1", "mrr@5", "mrr@6"], num_items=10, sampled=sampled, per_user=True,
                          progress=False)  # fmt: skip
        assert result.per_user()["hit_rate@1/naive"].tolist() == [1.0, 0.0, 0.0, 0.0], ties
        assert result.per_user()["mrr@5/naive"].tolist() == [1.0, 0.0, 0.0, 0.0], ties
        assert result.per_user()["mrr@6/naive"].tolist() == [1.0] + [1 / 6] * 3, ties  # last of 6
        assert result["hit_rate@1/naive"] == 0.25
        assert (result.info["run_rows"], result.info["run_rows_not_in_test"]) == (3, 1)
        assert result.info["test_users_not_in_run"] == 3


def test_a_sampled_run_with_items_the_catalog_cannot_hold_is_refused(tmp_path):
    """Items past num_items of a table of dense ids, or text ids written otherwise than the test
    table's integer ids (07 for 7), were left out of the candidates without a word; refused, as
    evaluate() without sampling refuses ids past the catalog."""
    pd = pytest.importorskip("pandas")
    from ignite_recsys import Interactions, evaluate

    options = dict(sampled={"num_negatives": 3, "seed": 0}, progress=False)
    dense = Interactions(torch.tensor([0, 1]), torch.tensor([5, 9]), num_items=10)
    run = pd.DataFrame({"user": [0, 0, 1], "item": [5, 12, 9], "score": [3.0, 2.0, 1.0]})
    with pytest.raises(ValueError, match=r"the run ranks 1 item .* outside the catalog of num_items=10"):
        evaluate(run, dense, ["ndcg@3"], **options)
    mapped = Interactions.from_frame(pd.DataFrame({"user": [1, 2], "item": [7, 9]}))
    for item in ("07", "12345678901234567890123"):  # the second past int64: no id of an integer map either
        (tmp_path / "run.csv").write_text(f"user,item,score\n1,{item},0.9\n1,7,0.8\n2,9,0.7\n2,11,0.5\n")
        with pytest.raises(ValueError, match=r"the run ranks 1 item .* outside the catalog of num_items=3"):
            evaluate(tmp_path / "run.csv", mapped, ["ndcg@3"], **options)


@pytest.mark.parametrize(
    "rows, cause",
    [
        ("", "holds no rows"),  # an export that failed
        ("u9 Q0 a 1 5 r\n", "none of the 1 rows of the run .* is of a test user"),
        ("u1 Q0 A 1 5 r\nu2 Q0 C 1 5 r\n", "ranks none of the test items for its user"),  # another spelling
    ],
)
def test_a_sampled_run_that_ranks_no_test_item_warns(tmp_path, rows, cause):
    """Every test item unranked is tied at -inf with its unranked negatives and ranked at random:
    a number from no ranking (HR@1 about 1 / 2 with one negative), so a warning and a note in
    info, as evaluate() without sampling warns for such runs."""
    from ignite_recsys import InputWarning, evaluate

    (tmp_path / "qrels").write_text("u1 0 a 1\nu1 0 b 0\nu2 0 c 1\n")
    (tmp_path / "run").write_text(rows)
    options = dict(sampled={"num_negatives": 1, "estimators": ["naive"]}, num_items=10, progress=False)
    with pytest.warns(InputWarning, match=cause):
        result = evaluate(tmp_path / "run", tmp_path / "qrels", ["hit_rate@1"], **options)
    assert len(result.info["warnings"]) == 1 and re.search(cause, result.info["warnings"][0])
    # one test item ranked for its user: no warning (a ranked first, its negative unranked: HR@1 of u1 is 1)
    (tmp_path / "run").write_text("u1 Q0 b 1 5 r\nu1 Q0 a 2 4 r\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", InputWarning)
        result = evaluate(tmp_path / "run", tmp_path / "qrels", ["hit_rate@1"], per_user=True, **options)
    assert result.info["warnings"] == []


def test_a_sampled_run_holds_19_digit_ids_within_int64_against_integer_ids(tmp_path):
    """A 19-digit id within int64 is an integer id to the run's reader; the catalog left it out
    (refused as an item it cannot hold). With both other items as negatives the ranks are known:
    user 1's item 7 ranks behind it (HR@1 0), user 2's item 9 first (HR@1 1)."""
    pd = pytest.importorskip("pandas")
    from ignite_recsys import Interactions, evaluate

    mapped = Interactions.from_frame(pd.DataFrame({"user": [1, 2], "item": [7, 9]}))
    (tmp_path / "run.csv").write_text("user,item,score\n1,1234567890123456789,0.9\n1,7,0.8\n2,9,0.7\n")
    options = dict(sampled={"num_negatives": 2, "estimators": ["naive"]}, progress=False, per_user=True)
    result = evaluate(tmp_path / "run.csv", mapped, ["hit_rate@1"], **options)
    assert result.per_user()["hit_rate@1/naive"].tolist() == [0.0, 1.0]


def _sampled_batches(count=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [
        (torch.rand(16, 120, generator=generator), torch.randint(120, (16,), generator=generator)) for _ in range(count)
    ]


def _sampled_metric():
    return SampledMetrics(
        top_k=[5, 10], metrics=["ndcg", "hit_rate"], num_negatives=20, estimators=["naive"], seed=3, per_user=True
    )


def test_a_resumed_sampled_metric_draws_what_an_uninterrupted_one_draws(tmp_path):
    """The sampler's state travels with the metric's: a metric loaded after 3 batches draws for
    batches 4-6 the negatives an uninterrupted one draws (it drew batches 1-3's again), directly
    and through ignite's Checkpoint and a DeterministicEngine, mid-epoch and in a later epoch."""
    from ignite.engine import DeterministicEngine, Events
    from ignite.handlers import Checkpoint, DiskSaver

    batches = _sampled_batches()
    full = _sampled_metric()
    for batch in batches:
        full.update(batch)
    first = _sampled_metric()
    for batch in batches[:3]:
        first.update(batch)
    resumed = _sampled_metric()
    resumed.load_state_dict(first.state_dict())
    for batch in batches[3:]:
        resumed.update(batch)
    assert resumed.compute() == full.compute()
    with pytest.raises(RuntimeError, match="they are not part of state_dict"):  # per-item ranks are not saved
        resumed.sampled_ranks()
    again = _sampled_metric()  # the same draws from the loaded sampler: batch 4-6's ranks
    again.load_state_dict(first.state_dict())
    again.reset()  # (a reset restarts the sampler from seed: the first batches' draws)
    for batch in batches:
        again.update(batch)
    assert torch.equal(again.sampled_ranks(), full.sampled_ranks())

    def evaluate(metric, save_at=None, folder=None, max_epochs=1, load=None):
        engine = DeterministicEngine(lambda e, batch: batch)
        metric.attach(engine, "sampled")
        if save_at is not None:
            saver = Checkpoint(
                {"engine": engine, "metric": metric}, DiskSaver(folder, require_empty=False), n_saved=None
            )
            engine.add_event_handler(Events.ITERATION_COMPLETED(once=save_at), saver)
        if load is not None:
            Checkpoint.load_objects({"engine": engine, "metric": metric}, torch.load(load, weights_only=False))
        return engine.run(batches, max_epochs=max_epochs).metrics["sampled"]

    expected = evaluate(_sampled_metric())
    for save_at, max_epochs in [(3, 1), (8, 2)]:
        folder = tmp_path / f"at{save_at}"
        assert evaluate(_sampled_metric(), save_at, str(folder), max_epochs) == expected
        (path,) = list(folder.iterdir())
        assert evaluate(_sampled_metric(), load=path, max_epochs=max_epochs) == expected
    # a state without the sampler's (saved before it was kept) loads, with a warning
    old = first.state_dict()
    old.pop("sampler_states")
    with pytest.warns(UserWarning, match="holds no sampler state"):
        _sampled_metric().load_state_dict(old)


def test_naive_is_the_sampled_metric_even_where_the_catalog_is_smaller_than_k():
    # 8 candidates, k = 10: recall@10 over the full catalog is always 1, but the naive estimate is
    # the sampled metric (ranks among 20 drawn negatives), which is 0 for an item ranked past 10;
    # its mean and interval are those of its per-item values, not moved into the catalog's range
    torch.manual_seed(0)
    scores = torch.randn(50, 8, dtype=torch.float64)
    positives = torch.randint(0, 8, (50,))
    metric = SampledMetrics(
        top_k=[10], metrics=["recall"], num_negatives=20, estimators=["naive"], seed=0, per_user=True
    )
    metric.update((scores, positives))
    values = next(iter(metric.per_user().values())).numpy()
    assert values.min() == 0.0
    assert metric.compute()["recall@10/naive"] == pytest.approx(values.mean(), abs=1e-12)
    low, high = metric.confidence_interval()["recall@10/naive"]
    half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    assert (low, high) == pytest.approx((values.mean() - half, values.mean() + half), abs=1e-12)
