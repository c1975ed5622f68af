"""The statistics under traps: values far from 0 with a small spread (popularity counts near 1e8),
whose streamed variance must not cancel away, in one process and across processes, against
scipy; and two metrics whose per-user values cannot be paired."""

from __future__ import annotations

import json
import os

import ignite.distributed as idist
import numpy as np
import pytest
import scipy.stats
import torch

import ignite_recsys as R
from gloo import run_in_processes

st = pytest.importorskip("scipy.stats")

USERS, ITEMS = 120, 20


def _far_from_zero(seed=0):
    """Half the items have a popularity near 1e8, the others near 0; model a ranks the popular
    ones first, model b the others: per-user values and differences near 1e8, spread below 1."""
    rng = np.random.default_rng(seed)
    half = ITEMS // 2
    popularity = torch.tensor(np.r_[1e8 + rng.random(half) * 0.1, rng.random(half) * 0.1])
    noise = rng.random((USERS, ITEMS))
    a = torch.tensor(noise + np.r_[np.ones(half), np.zeros(half)])
    b = torch.tensor(noise[::-1].copy() + np.r_[np.zeros(half), np.ones(half)])
    y = torch.tensor(rng.random((USERS, ITEMS)) < 0.3).float()
    return popularity, a, b, y


def _per_user(popularity, scores, y, **options):
    metric = R.AveragePopularity([3], popularity, per_user=True, **options)
    metric.update((scores, y))
    return metric.per_user()[:, 0].numpy()


def _interval(values, level=0.95):
    return st.t.interval(level, len(values) - 1, loc=values.mean(), scale=st.sem(values))


def _close(got, expected, spread):
    """The interval's centre to round-off of scipy's (values near 1e8) and its width to 1e-6 of
    scipy's (summing the squares cancels every digit of it)."""
    width = expected[1] - expected[0]
    assert width > 0 and spread > 0
    assert (got[0] + got[1]) / 2 == pytest.approx((expected[0] + expected[1]) / 2, rel=1e-14, abs=1e-12)
    assert got[1] - got[0] == pytest.approx(width, rel=1e-6)


@pytest.mark.parametrize("batch", [7, 40, USERS])
def test_paired_differences_near_1e8_match_scipy(batch):
    popularity, a, b, y = _far_from_zero()
    comparison = R.Paired(R.AveragePopularity([3], popularity))
    for start in range(0, USERS, batch):
        comparison.update((a[start : start + batch], b[start : start + batch], y[start : start + batch]))
    [result] = comparison.compute()
    va, vb = _per_user(popularity, a, y), _per_user(popularity, b, y)
    differences = va - vb
    assert abs(differences.mean()) > 1e7 and differences.std() < 1  # the trap
    _close(result.confidence_interval, _interval(differences), differences.std())
    assert result.p_value == pytest.approx(st.ttest_rel(va, vb).pvalue, abs=1e-12)


@pytest.mark.parametrize("batch", [7, USERS])
def test_confidence_interval_of_values_near_1e8_matches_scipy(batch):
    popularity, a, _, y = _far_from_zero(1)
    metric = R.AveragePopularity([3], popularity, num_groups=2)
    groups = torch.arange(USERS) % 2
    for start in range(0, USERS, batch):
        stop = start + batch
        metric.update((a[start:stop], y[start:stop], R.UserGroups(groups[start:stop])))
    values = _per_user(popularity, a, y)
    assert values.mean() > 1e7 and values.std() < 1
    [interval] = metric.confidence_interval()
    _close(interval, _interval(values), values.std())
    for group, [low_high] in enumerate(metric.confidence_interval_groups()):
        kept = values[groups.numpy() == group]
        _close(low_high, _interval(kept), kept.std())


def test_a_state_saved_without_the_shift_loads_as_plain_sums_of_squares():
    """A state of small values saved without ``_shift`` (its sums of squares about 0) loads and
    gives the same interval; a state saved mid-stream resumes to the uninterrupted result."""
    _, a, _, y = _far_from_zero(2)
    popularity = torch.arange(1.0, ITEMS + 1)  # values near 10: plain squares are exact enough
    full = R.AveragePopularity([3], popularity)
    full.update((a, y))
    squares = (_per_user(popularity, a, y) ** 2).sum()
    state = full.state_dict()
    entry = state["__metric_state_per_rank"][0]
    entry["_sum_squares"] = torch.tensor([squares], dtype=torch.float64)
    del entry["_shift"]
    loaded = R.AveragePopularity([3], popularity)
    loaded.load_state_dict(state)
    np.testing.assert_allclose(loaded.confidence_interval(), full.confidence_interval(), rtol=1e-12)
    # mid-stream: the shift travels with the state
    first = R.AveragePopularity([3], popularity)
    first.update((a[:50], y[:50]))
    resumed = R.AveragePopularity([3], popularity)
    resumed.load_state_dict(first.state_dict())
    resumed.update((a[50:], y[50:]))
    np.testing.assert_allclose(resumed.confidence_interval(), full.confidence_interval(), rtol=1e-12)


def _worker(local_rank, folder):
    rank = idist.get_rank()
    popularity, a, b, y = _far_from_zero()
    users = torch.arange(USERS)
    mine = users[(users // 30) % 2 == rank]  # different first batches: different shifts
    comparison = R.Paired(R.AveragePopularity([3], popularity))
    plain = R.AveragePopularity([3], popularity, num_groups=2)
    for batch in mine.split(13):
        comparison.update((a[batch], b[batch], y[batch]))
        plain.update((a[batch], y[batch], R.UserGroups(batch % 2)))
    [result] = comparison.compute()
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as handle:
        json.dump(
            {
                "paired": list(result.confidence_interval),
                "p": result.p_value,
                "plain": list(plain.confidence_interval()[0]),
                "groups": [list(interval[0]) for interval in plain.confidence_interval_groups()],
            },
            handle,
        )


def test_shifted_sums_across_processes_match_scipy():
    popularity, a, b, y = _far_from_zero()
    va, vb = _per_user(popularity, a, y), _per_user(popularity, b, y)
    groups = np.arange(USERS) % 2
    for got in run_in_processes(_worker):
        _close(got["paired"], _interval(va - vb), (va - vb).std())
        assert got["p"] == pytest.approx(st.ttest_rel(va, vb).pvalue, abs=1e-12)
        _close(got["plain"], _interval(va), va.std())
        for group in range(2):
            kept = va[groups == group]
            _close(got["groups"][group], _interval(kept), kept.std())


# --- paired_test of metrics that cannot be paired ------------------------------------------------
def _ranked_metric(scores, y, users=None):
    metric = R.NDCG([3], per_user=True)
    for start in range(0, len(scores), 16):
        batch = (scores[start : start + 16], y[start : start + 16])
        metric.update(batch + ((R.UserIds(users[start : start + 16]),) if users is not None else ()))
    return metric


def test_paired_test_refuses_metrics_with_user_ids_on_one_side_only():
    rng = np.random.default_rng(5)
    scores, y = torch.tensor(rng.random((48, 10))), torch.tensor(rng.random((48, 10)) < 0.3).float()
    shuffled = torch.from_numpy(rng.permutation(48))
    with_ids = _ranked_metric(scores[shuffled], y[shuffled], shuffled)
    without = _ranked_metric(scores, y)
    for a, b, first in ((with_ids, without, "a"), (without, with_ids, "b")):
        with pytest.raises(ValueError, match=rf"{first}'s per-user values come with user ids and .* or neither"):
            R.paired_test(a, b)
    # both with user ids: paired by id, the same scores on both sides differ by exactly 0
    result = R.paired_test(with_ids, _ranked_metric(scores, y, torch.arange(48)))
    assert result.mean_difference == 0.0 and result.confidence_interval == (0.0, 0.0)


def test_paired_test_refuses_a_cut_off_that_neither_side_has():
    """``k`` picks a metric's cut-off; two arrays of per-user values have none to pick, so a ``k``
    given with them would be ignored: refused instead of testing values it did not pick."""
    a, b = [0.5, 0.7, 0.9, 0.4], [0.4, 0.5, 0.8, 0.4]
    with_ids = (R.PerUserValues(a, list("wxyz")), R.PerUserValues(b, list("wxyz")))
    for first, second in ((a, b), (np.array(a), torch.tensor(b)), with_ids):
        with pytest.raises(ValueError, match=r"k=10 picks the cut-off of a metric or result, and neither a nor b"):
            R.paired_test(first, second, k=10)
    # with a metric on either side, k picks its cut-off and the plain values are taken as they are
    rng = np.random.default_rng(6)
    scores, y = torch.tensor(rng.random((48, 10))), torch.tensor(rng.random((48, 10)) < 0.3).float()
    metric = R.NDCG(top_k=[3, 5], per_user=True)
    metric.update((scores, y))
    plain = rng.random(48)
    result = R.paired_test(metric, plain, k=5)
    expected = scipy.stats.ttest_rel(metric.per_user()[:, 1].numpy(), plain)
    assert result.p_value == pytest.approx(expected.pvalue, rel=1e-12)


def _sampled_model(hits, seed=1):
    """A SampledMetrics (HitRate@10, naive) whose test item of row i is scored +inf where
    ``hits[i]`` (rank 1 among any negatives) and -inf elsewhere (last among any 20 negatives)."""
    scores = torch.rand(len(hits), 30, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    positives = torch.arange(len(hits))
    scores[positives, positives] = torch.where(torch.tensor(hits), torch.inf, -torch.inf).double()
    metric = R.SampledMetrics(top_k=[10], metrics=["hit_rate"], num_negatives=20, estimators=["naive"], per_user=True)
    metric.update((scores, positives))
    return metric


def test_paired_test_and_report_pair_sampled_metrics_and_keep_their_state():
    """SampledMetrics has per-item values but no per-user ids: paired by position, against scipy on
    the known hits; the metrics' state is unchanged (ignite's attribute lookup once reset them)."""
    hits_a = [1, 1, 0, 1, 0, 1, 1, 1, 0, 1, 1, 0]
    hits_b = [0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 1, 0]
    a, b = _sampled_model([bool(h) for h in hits_a]), _sampled_model([bool(h) for h in hits_b])
    result = R.paired_test(a, b, k="hit_rate@10/naive")
    expected = scipy.stats.ttest_rel(np.array(hits_a, float), np.array(hits_b, float))
    assert result.p_value == pytest.approx(expected.pvalue, rel=1e-12)
    assert result.num_users == 12 and result.mean_difference == pytest.approx(4 / 12)
    assert a.compute() == {"hit_rate@10/naive": pytest.approx(8 / 12)}
    assert b.compute() == {"hit_rate@10/naive": pytest.approx(4 / 12)}
    table = R.Report({"A": a, "B": b}, baseline="B").to_markdown()
    assert "0.6667" in table and "0.3333" in table
    assert a.compute() == {"hit_rate@10/naive": pytest.approx(8 / 12)}


def test_paired_test_refuses_a_metric_without_per_user_values_and_keeps_its_state():
    rng = np.random.default_rng(0)
    scores, labels = torch.tensor(rng.random((8, 12))), torch.tensor(rng.random((8, 12)) < 0.3).float()
    a, b = R.GAUC(), R.GAUC()
    a.update((scores, labels))
    b.update((scores.flip(1), labels))
    before = a.compute()
    with pytest.raises(TypeError, match=r"a \(GAUC\) gives no per-user values"):
        R.paired_test(a, b)
    assert a.compute() == before


def test_group_intervals_of_groups_far_apart_match_scipy():
    """Group 0's values near 0 come first, group 1's near 1e8 later: the squares of group 1 were
    taken about the metric's shift (group 0's mean), and its spread of about 1 cancelled away
    (an interval of width 0). Each group now has its own shift: scipy's intervals, and
    group_gap's Welch interval and degrees of freedom. A state saved with the squares about the
    metric's shift (before groups had their own) still loads to the same intervals."""
    popularity = torch.tensor([0.0, 1.0, 2.0, 3.0, 1e8, 1e8 + 1, 1e8 + 2, 1e8 + 3], dtype=torch.float64)
    listed = {0: [0, 1, 2, 3, 0, 1], 1: [4, 5, 6, 7, 4, 6]}  # each user's one listed item
    metric = R.AveragePopularity([1], popularity, num_groups=2)
    for group, items in listed.items():
        scores = torch.zeros(6, 8, dtype=torch.float64)
        scores[torch.arange(6), torch.tensor(items)] = 1.0
        metric.update((scores, torch.zeros(6, 8), R.UserGroups(torch.full((6,), group))))
    values = [popularity.double().numpy()[items] for items in listed.values()]
    for group, interval in enumerate(metric.confidence_interval_groups()):
        expected = st.t.interval(0.95, 5, np.mean(values[group]), st.sem(values[group]))
        np.testing.assert_allclose(interval[0], expected, rtol=0, atol=1e-6)
    [gap] = R.group_gap(metric)
    welch = st.ttest_ind(values[1], values[0], equal_var=False)
    assert gap.df == pytest.approx(welch.df, rel=1e-9)
    np.testing.assert_allclose(gap.confidence_interval, welch.confidence_interval(), rtol=0, atol=1e-6)
    state = metric.state_dict()
    entry = state["__metric_state_per_rank"][0]
    shift, own = entry["_shift"], entry.pop("_group_shift")
    count = entry["_group_count"].unsqueeze(1)
    # about the metric's shift s instead of the group's c: + 2 (c - s) sum (x - c) + n (c - s)^2
    moved = 2 * (own - shift) * (entry["_group_sum"] - count * own) + count * (own - shift) ** 2
    entry["_group_sum_squares"] = entry["_group_sum_squares"] + moved
    loaded = R.AveragePopularity([1], popularity, num_groups=2)
    loaded.load_state_dict(state)
    np.testing.assert_allclose(loaded.confidence_interval_groups()[0][0], metric.confidence_interval_groups()[0][0])


def _exact_variance(values) -> float:
    """The sample variance of float64 values in exact rational arithmetic, rounded once."""
    from fractions import Fraction

    exact = [Fraction(float(value)) for value in values]
    mean = sum(exact) / len(exact)
    return float(sum((value - mean) ** 2 for value in exact) / (len(exact) - 1))


@pytest.mark.parametrize("spread", [1e-3, 1e-5])
@pytest.mark.parametrize("batch", [2, 4000])
def test_spread_far_below_the_values_keeps_its_digits(spread, batch):
    """Values 1e8 + U(0, spread) in two groups: the deviations from the shift are summed on their
    own, so the squares are not corrected by a difference of totals near 4e11 (its rounding put
    group_gap's Welch half-width 2.7e-4 off at spread 1e-3, and at 1e-5 gave a group a variance
    of exactly 0, or +24% in one batch). Against the exact variances: the Welch half-width and
    degrees of freedom to 1e-6, each interval's half-width to the rounding of its ends near 1e8."""
    rng = np.random.default_rng(3)
    values = 1e8 + rng.random(4000) * spread
    groups = np.arange(4000) % 2
    metric = R.AveragePopularity(1, torch.tensor(values), num_groups=2)  # user u lists item u: its value
    for start in range(0, 4000, batch):
        users = torch.arange(start, min(start + batch, 4000))
        metric.update((R.RankedItems(users.unsqueeze(1)), torch.zeros(len(users), 4000), R.UserGroups(users % 2)))
    kept = [values[groups == group] for group in (0, 1)]
    variances = [_exact_variance(group) for group in kept]
    [gap] = R.group_gap(metric)
    shares = [variance / len(group) for variance, group in zip(variances, kept)]
    df = sum(shares) ** 2 / sum(share**2 / (len(group) - 1) for share, group in zip(shares, kept))
    half = st.t.ppf(0.975, df) * np.sqrt(sum(shares))
    assert gap.df == pytest.approx(df, rel=1e-6)
    assert (gap.confidence_interval[1] - gap.confidence_interval[0]) / 2 == pytest.approx(half, rel=1e-6)
    ulp = np.spacing(1e8)  # the ends are rounded there
    intervals = [interval for [interval] in metric.confidence_interval_groups()] + metric.confidence_interval()
    for (low, high), part in zip(intervals, kept + [values]):
        exact = st.t.ppf(0.975, len(part) - 1) * np.sqrt(_exact_variance(part) / len(part))
        assert abs((high - low) / 2 - exact) <= 2 * ulp
        assert (low + high) / 2 == pytest.approx(part.mean(), rel=1e-13)  # a float64 sum's quotient
