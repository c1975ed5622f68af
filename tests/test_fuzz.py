"""Property-based fuzzing: random malformed and extreme inputs thrown at every metric.

For every input, either
- the metric refuses it with a ``ValueError``/``TypeError`` whose message names the argument at
  fault, and its state is bit for bit what it was; or
- it accepts it, and ``compute()`` gives finite values equal to an independent numpy reference
  over every batch it accepted (or ``NotComputableError`` exactly when the reference has nothing
  to average).
Inputs that an independent predicate (written here from the documented rules) calls valid must
be accepted. The references rank with a stable sort in float64 and compare pairs directly.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ignite.exceptions import NotComputableError

import ignite_recsys as R
from references import coverage, entropy, gini, metric_means, top_lists

TOP_K = [1, 3]
SCORE_VALUES = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-45, 1e30, -1e30, math.inf, -math.inf, math.nan]
LABEL_VALUES = [0.0, 1.0, 2.0, 0.5, 3.0, -1.0, 1e-40, 2000.0, math.inf, -math.inf, math.nan]
SCORE_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
LABEL_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int64] + SCORE_DTYPES
ODD_DTYPES = [torch.uint16, torch.uint32, torch.complex64, torch.float8_e4m3fn, torch.int32]
# a refusal must name what is wrong: one of update's arguments (or the tuple itself)
NAMES_AN_ARGUMENT = re.compile(r"\b(y_pred|y|mask|exclude|update|gain_function|num_items|item_popularity)\b")
FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None
)


def _cast(values, dtype):
    """A tensor of ``dtype`` from float64 values (integer dtypes take finite values rounded and
    clipped into their range; that is what a user's integer tensor would hold)."""
    array = np.asarray(values, dtype=np.float64)
    if dtype == torch.bool:
        return torch.from_numpy(np.nan_to_num(array) > 0)
    if not dtype.is_floating_point and not dtype.is_complex:
        info = torch.iinfo(dtype)
        array = np.clip(np.nan_to_num(array, posinf=info.max, neginf=info.min), info.min, min(info.max, 2**53))
        return torch.from_numpy(np.round(array)).to(dtype)
    return torch.from_numpy(array).to(dtype)


@st.composite
def batches(draw, pointwise=False):
    """A (y_pred, y[, Observed(mask)]) update argument (for pointwise metrics; sometimes a bare
    mask, which they refuse): mostly well formed with extreme values, sometimes
    malformed in structure, shape, dtype or layout."""
    users = draw(st.integers(0, 3))
    items = draw(st.integers(0, 5))
    shape = (users, items)
    y_shape = shape
    flaw = draw(st.sampled_from(["none"] * 8 + ["y shape", "1-D", "3-D", "odd dtype", "sparse", "arity", "list"]))
    if flaw == "y shape":
        y_shape = (users, items + 1)
    if flaw == "1-D":
        shape = y_shape = (items,)
    if flaw == "3-D":
        shape = y_shape = (users, 1, items)
    score_dtype = draw(st.sampled_from(SCORE_DTYPES))
    label_dtype = draw(st.sampled_from(SCORE_DTYPES if pointwise else LABEL_DTYPES))
    if flaw == "odd dtype":
        if draw(st.booleans()):
            score_dtype = draw(st.sampled_from(ODD_DTYPES))
        else:
            label_dtype = draw(st.sampled_from(ODD_DTYPES))
    score_pool = [0.1, 0.9, 0.3, 0.0, 1.0, 0.5] if pointwise and draw(st.booleans()) else SCORE_VALUES
    label_pool = [0.0, 1.0] if pointwise and draw(st.booleans()) else LABEL_VALUES
    n, m = int(np.prod(shape)), int(np.prod(y_shape))
    scores = np.array(draw(st.lists(st.sampled_from(score_pool), min_size=n, max_size=n)), dtype=np.float64)
    labels = np.array(draw(st.lists(st.sampled_from(label_pool), min_size=m, max_size=m)), dtype=np.float64)
    y_pred = (
        _cast(scores.reshape(shape), score_dtype)
        if score_dtype != torch.float8_e4m3fn
        else torch.zeros(shape, dtype=score_dtype)
    )
    y = (
        _cast(labels.reshape(y_shape), label_dtype)
        if label_dtype != torch.float8_e4m3fn
        else torch.zeros(y_shape, dtype=label_dtype)
    )
    if flaw == "sparse" and y_pred.ndim == 2:
        y_pred = y_pred.to_sparse()
    output = [y_pred, y]
    if pointwise and draw(st.booleans()):
        mask = torch.from_numpy(np.array(draw(st.lists(st.booleans(), min_size=m, max_size=m)), dtype=bool))
        mask = mask.reshape(y_shape)
        output.append(R.Observed(mask) if draw(st.integers(0, 3)) else mask)
    if flaw == "arity":
        output = output[:1] if draw(st.booleans()) else output + [y]
    if flaw == "list":
        lists = [(t.mask if isinstance(t, R.Observed) else t).tolist() for t in output]
        return lists if draw(st.booleans()) else y_pred
    return tuple(output)


def _state(metric):
    return {key: value.clone() for key, value in next(iter(metric.state_dict().values()))[0].items()}


def _well_formed(output, pointwise=False):
    """The structural rules: a tuple of dense tensors of one shape and accepted dtypes."""
    if not isinstance(output, tuple) or len(output) not in ((2, 3) if pointwise else (2,)):
        return False
    if len(output) == 3 and not isinstance(output[2], R.Observed):
        return False  # a bare tensor there is exclude to the ranking metrics: the pointwise ones refuse it
    tensors = output[:2] + tuple(observed.mask for observed in output[2:])
    if not all(isinstance(t, torch.Tensor) and t.layout == torch.strided for t in tensors):
        return False
    y_pred, y = output[0], output[1]
    if any(t.shape != y_pred.shape for t in tensors) or y_pred.numel() == 0:
        return False
    if not pointwise and y_pred.ndim != 2:
        return False
    return y_pred.dtype in SCORE_DTYPES and y.dtype in LABEL_DTYPES


def _check(metric, output, accepted_batches, valid, reference):
    """Update with ``output`` and check the outcome; returns the batches accepted so far."""
    before = _state(metric)
    try:
        metric.update(output)
    except (ValueError, TypeError) as error:
        assert not valid, f"a valid input was refused: {error}"
        assert NAMES_AN_ARGUMENT.search(str(error)), f"the message names no argument: {error}"
        after = _state(metric)
        assert before.keys() == after.keys()
        for key in before:
            assert torch.equal(before[key], after[key]), key
        return accepted_batches
    accepted = accepted_batches + [
        tuple(t.to(torch.float64) if isinstance(t, torch.Tensor) and t.dtype != torch.bool else t for t in output)
    ]
    expected = reference(accepted)
    if expected is None:
        with pytest.raises(NotComputableError):
            metric.compute()
    else:
        got = metric.compute()
        got = list(got.values()) if isinstance(got, dict) else (got if isinstance(got, list) else [got])
        assert all(math.isfinite(v) for v in got), got
        if callable(expected):
            expected(got, metric)
        else:
            np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    return accepted


def _stack(batches_):
    scores = np.concatenate([b[0].numpy().astype(np.float64) for b in batches_])
    labels = np.concatenate([b[1].numpy().astype(np.float64) for b in batches_])
    return scores, labels


def _valid_ranking_values(output, gain=None):
    """NaN scores and NaN labels are invalid (-inf labels are legal, not relevant); for NDCG also
    labels of infinite gain."""
    y_pred, y = output
    scores, labels = y_pred.double(), y.double()
    if scores.isnan().any() or labels.isnan().any():
        return False
    if gain == "exp":
        return not (labels >= 1024).any()  # 2**y overflows float64
    return gain is None or not (labels == math.inf).any()


RANKING = {
    "ndcg": (lambda: R.NDCG(TOP_K), "ndcg", "exp"),
    "ndcg_linear_average": (lambda: R.NDCG(TOP_K, gain_function="linear_rank", ties="average"), "ndcg", "linear"),
    "hit_rate": (lambda: R.HitRate(TOP_K, relevance_threshold=1.0), "hit_rate", None),
    "recall": (lambda: R.Recall(TOP_K), "recall", None),
    "precision_average": (lambda: R.Precision(TOP_K, ties="average"), "precision", None),
    "map": (lambda: R.MAP(TOP_K, ignore_zero_hits=False), "map", None),
    "mrr": (lambda: R.MRR(TOP_K), "mrr", None),
    "f1": (lambda: R.F1(TOP_K), "f1", None),
    "r_precision": (lambda: R.RPrecision(), "r_precision", None),
    "ranking_metrics": (lambda: R.RankingMetrics(TOP_K, metrics=["ndcg", "recall", "mrr", "r_precision"]), None, "exp"),
}


@pytest.mark.parametrize("name", sorted(RANKING))
@FUZZ
@given(output=batches())
def test_ranking_metrics_refuse_cleanly_or_match_reference(name, output):
    make, key, gain = RANKING[name]
    metric = make()
    good = (torch.tensor([[0.2, 0.9, 0.4]]), torch.tensor([[1.0, 0.0, 2.0]]))
    metric.update(good)
    valid = _well_formed(output) and _valid_ranking_values(output, gain)
    kwargs = {} if "linear" not in name else {"gain_kind": "linear_rank"}
    ties = "average" if "average" in name else "stable"
    ignore = name != "map"

    def reference(accepted):
        totals = {}
        for scores, labels in [b[:2] for b in accepted]:
            scores, labels = scores.double().numpy(), labels.double().numpy()
            means = metric_means(scores, labels, TOP_K, ties=ties, ignore_zero_hits=ignore, **kwargs)
            counted = sum(1 for row in labels if not ignore or (row >= 1).any())
            if means is None:
                continue
            for metric_name, values in means.items():
                totals.setdefault(metric_name, []).append((np.atleast_1d(values), counted))
        if not totals:
            return None
        mean = {n: sum(v * c for v, c in parts) / sum(c for _, c in parts) for n, parts in totals.items()}
        if key is None:
            return [x for n in ("ndcg", "recall", "mrr") for x in mean[n]] + list(mean["r_precision"])
        return list(mean[key])

    _check(metric, output, [good], valid, reference)


def _pairwise_auc(scores, positive):
    """P(score of a positive > score of a negative), ties counting one half; None if undefined."""
    pos, neg = scores[positive], scores[~positive]
    if len(pos) == 0 or len(neg) == 0:
        return None
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return greater / (len(pos) * len(neg))


@FUZZ
@given(output=batches())
def test_gauc_refuses_cleanly_or_matches_reference(output):
    metric = R.GAUC()
    good = (torch.tensor([[0.2, 0.9, 0.4]]), torch.tensor([[1.0, 0.0, 2.0]]))
    metric.update(good)

    def reference(accepted):
        rows = [(s, y) for batch in accepted for s, y in zip(*(t.double().numpy() for t in batch[:2]))]
        values, weights = [], []
        for row_scores, row_labels in rows:
            candidate = row_scores > -np.inf
            auc = _pairwise_auc(row_scores[candidate], row_labels[candidate] >= 1)
            if auc is not None:
                values.append(auc)
                weights.append((row_labels[candidate] >= 1).sum())
        return None if not values else [float(np.average(values, weights=weights))]

    valid = _well_formed(output) and _valid_ranking_values(output)
    _check(metric, output, [good], valid, reference)


@FUZZ
@given(output=batches(pointwise=True))
def test_auc_refuses_cleanly_or_is_within_its_bound(output):
    metric = R.AUC()
    good = (torch.tensor([0.2, 0.9, 0.4]), torch.tensor([1.0, 0.0, 2.0]))
    metric.update(good)

    def reference(accepted):
        scores, positive = [], []
        for batch in accepted:
            observed = np.ones(batch[0].shape, bool) if len(batch) == 2 else batch[2].mask.numpy()
            s, y = batch[0].double().numpy()[observed], batch[1].double().numpy()[observed]
            scores.append(s[s > -np.inf])
            positive.append(y[s > -np.inf] >= 1)
        auc = _pairwise_auc(np.concatenate(scores), np.concatenate(positive))
        if auc is None:
            return None
        return lambda got, m: (
            (_ for _ in ()).throw(AssertionError((got, auc))) if abs(got[0] - auc) > m.error_bound() + 1e-12 else None
        )

    valid = _well_formed(output, pointwise=True)
    if valid:
        observed = torch.ones_like(output[0], dtype=torch.bool) if len(output) == 2 else output[2].mask
        s, y = output[0].double()[observed], output[1].double()[observed]
        valid = not (s.isnan().any() or y.isnan().any())
    _check(metric, output, [good], valid, reference)


POINTWISE = {
    "mae": (R.MAE, lambda p, y: np.abs(p - y), lambda m: m, False),
    "rmse": (R.RMSE, lambda p, y: (p - y) ** 2, math.sqrt, False),
    "log_loss": (
        R.LogLoss,
        lambda p, y: -(y * np.log(np.clip(p, 1e-15, 1 - 1e-15)) + (1 - y) * np.log(1 - np.clip(p, 1e-15, 1 - 1e-15))),
        lambda m: m,
        True,
    ),
}


@pytest.mark.parametrize("name", sorted(POINTWISE))
@FUZZ
@given(output=batches(pointwise=True))
def test_pointwise_losses_refuse_cleanly_or_match_reference(name, output):
    make, loss, finish, unit_range = POINTWISE[name]
    metric = make()
    good = (torch.tensor([0.2, 0.9, 0.4]), torch.tensor([1.0, 0.0, 1.0]))
    metric.update(good)

    def reference(accepted):
        losses = []
        for batch in accepted:
            observed = np.ones(batch[0].shape, bool) if len(batch) == 2 else batch[2].mask.numpy()
            losses.append(loss(batch[0].double().numpy()[observed], batch[1].double().numpy()[observed]))
        values = np.concatenate(losses)
        return None if values.size == 0 else [finish(float(values.mean()))]

    valid = _well_formed(output, pointwise=True)
    if valid:
        observed = torch.ones_like(output[0], dtype=torch.bool) if len(output) == 2 else output[2].mask
        p, y = output[0].double()[observed], output[1].double()[observed]
        valid = bool(torch.isfinite(p).all() and torch.isfinite(y).all())
        if unit_range:
            valid = valid and bool(((p >= 0) & (p <= 1) & (y >= 0) & (y <= 1)).all())
    _check(metric, output, [good], valid, reference)


CATALOG = {
    "item_coverage": (lambda: R.ItemCoverage(TOP_K, num_items=3), lambda lists: coverage(lists, 3)),
    "gini": (lambda: R.GiniIndex(TOP_K, num_items=3), lambda lists: gini(lists, 3)),
    "entropy": (lambda: R.ShannonEntropy(TOP_K, num_items=3), lambda lists: entropy(lists, 3)),
    "average_popularity": (
        lambda: R.AveragePopularity(TOP_K, item_popularity=torch.tensor([4.0, 1.0, 0.0])),
        lambda lists: float(np.mean([np.mean([[4.0, 1.0, 0.0][i] for i in items]) for items in lists])),
    ),
}


@pytest.mark.parametrize("name", sorted(CATALOG))
@FUZZ
@given(output=batches())
def test_catalog_metrics_refuse_cleanly_or_match_reference(name, output):
    make, value_of = CATALOG[name]
    metric = make()
    good = (torch.tensor([[0.2, 0.9, 0.4]]), torch.tensor([[1.0, 0.0, 2.0]]))
    metric.update(good)

    def reference(accepted):
        scores, _ = _stack(accepted)
        return [value_of(top_lists(scores, k)) for k in TOP_K]

    valid = _well_formed(output) and output[0].shape[1] == 3 and not output[0].double().isnan().any()
    _check(metric, output, [good], valid, reference)


# --- Every input form, against the harness's references, on random data -------------------------
import harness as H  # noqa: E402


@FUZZ
@given(
    seed=st.integers(0, 2**16),
    users=st.integers(6, 10),  # make_data sets edge cases in users 0-5 and items 0-5
    items=st.integers(6, 11),
    list_length=st.integers(1, 6),
    variant=st.sampled_from(sorted(H.VARIANTS)),
    row=st.fixed_dictionaries(
        {
            "target": st.sampled_from(H.TARGET_FORMS),
            "prediction": st.sampled_from(H.PREDICTION_FORMS),
            "exclude": st.sampled_from(H.EXCLUDE_FORMS),
            "ties": st.sampled_from(H.TIES),
            "ignore_zero_hits": st.booleans(),
            "per_user": st.booleans(),
            "container": st.sampled_from(H.CONTAINERS),
            "dtype": st.sampled_from(H.DTYPES),
        }
    ),
)
def test_every_input_form_matches_the_reference_on_random_data(seed, users, items, list_length, variant, row):
    """A random data set (ties, -inf scores, graded labels, empty and short ranked lists), a random
    metric configuration and random input forms: compute(), per_user() and confidence_interval()
    equal the numpy references (the harness's check)."""
    data = H.make_data(seed, users=users, items=items, list_length=list_length)
    spec = H.VARIANTS[variant]
    axes = spec.axes
    case = H.Case(variant, **{axis: value if value in axes[axis] else axes[axis][0] for axis, value in row.items()})
    H.check_metric(case, data)


# --- Statistics against scipy ----------------------------------------------------------------
@FUZZ
@given(
    values=st.lists(st.tuples(st.floats(-5, 5), st.floats(-5, 5)), min_size=2, max_size=40),
    missing=st.lists(st.booleans(), min_size=40, max_size=40),
    level=st.floats(0.5, 0.999),
)
def test_paired_test_and_intervals_equal_scipy(values, missing, level):
    import scipy.stats

    a = np.array([v[0] for v in values])
    b = np.array([v[1] for v in values])
    a[np.array(missing[: len(a)]) & (np.arange(len(a)) % 3 == 0)] = np.nan  # users one model does not count
    kept = ~(np.isnan(a) | np.isnan(b))
    difference = a[kept] - b[kept]
    if kept.sum() < 2:
        with pytest.raises(ValueError, match="at least two users"):
            R.paired_test(a, b)
        return
    result = R.paired_test(a, b, level=level)
    assert result.num_users == kept.sum()
    assert result.mean_difference == pytest.approx(difference.mean(), abs=1e-12)
    if np.ptp(difference) > 1e-9:
        expected = scipy.stats.ttest_rel(a[kept], b[kept])
        assert result.p_value == pytest.approx(expected.pvalue, rel=1e-9, abs=1e-12)
        low, high = scipy.stats.t.interval(level, kept.sum() - 1, difference.mean(), scipy.stats.sem(difference))
        assert result.confidence_interval == pytest.approx((low, high), rel=1e-9, abs=1e-12)
    adjusted = R.correct_p_values([result.p_value, 0.01, 0.04], method="bonferroni")
    assert adjusted == pytest.approx([min(1.0, 3 * p) for p in (result.p_value, 0.01, 0.04)])


@FUZZ
@given(
    values=st.lists(st.floats(0, 1), min_size=2, max_size=30),
    level=st.floats(0.5, 0.999),
    groups=st.lists(st.integers(0, 2), min_size=30, max_size=30),
)
def test_streamed_intervals_equal_scipy_overall_and_per_group(values, level, groups):
    """NDCG@1 of one relevant item per user: each user's value is exactly the chosen grade's 0/1
    hit, so the per-user values are known; the streamed intervals (overall and per group) equal
    scipy's over them."""
    import scipy.stats

    n = len(values)
    hits = np.array([v >= 0.5 for v in values], dtype=np.float64)
    scores = torch.tensor([[1.0, 0.0] for _ in range(n)])
    labels = torch.tensor([[1.0, 0.0] if hit else [0.0, 1.0] for hit in hits])
    group_ids = torch.tensor(groups[:n])
    metric = R.HitRate(1, num_groups=3)
    metric.update((scores, labels, R.UserGroups(group_ids)))
    if np.ptp(hits) > 0:
        expected = scipy.stats.t.interval(level, n - 1, hits.mean(), scipy.stats.sem(hits))
        assert metric.confidence_interval(level)[0] == pytest.approx(expected, rel=1e-9, abs=1e-12)
    for group, interval in enumerate(metric.confidence_interval_groups(level)):
        members = hits[np.asarray(groups[:n]) == group]
        if len(members) >= 2 and np.ptp(members) > 0:
            expected = scipy.stats.t.interval(level, len(members) - 1, members.mean(), scipy.stats.sem(members))
            assert interval[0] == pytest.approx(expected, rel=1e-9, abs=1e-12)
        elif len(members) < 2:
            assert all(math.isnan(x) for x in interval[0])
