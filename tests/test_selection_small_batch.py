"""The ranking step of a small dense CPU batch (``_core/small_batch.py``): the numpy reference's
values, the general step's values bit for bit, taken only where it applies (untied scores, the
stable tie rule, built-in gains), and fewer torch operations than the general step."""

import numpy as np
import pytest
import torch

import ignite_recsys as R
from ignite_recsys._core import ranking, small_batch
from ignite_recsys._core.adapters import parse_ranking_input
from references import metric_means

SIX = ["ndcg", "hit_rate", "recall", "precision", "map", "mrr"]
TOP_K = [1, 5, 10, 20, 50, 100]


def _batches(rng, rows, items, dtype=torch.float32, ties=False):
    """Untied scores (a permutation, unless ``ties``), graded labels with fractional, negative and
    -inf values, a user without a relevant item and a user with more relevant items than the depth."""
    out = []
    for _ in range(3):
        if ties:
            scores = np.round(rng.random((rows, items)) * 5)
        else:
            scores = np.stack([rng.permutation(items) for _ in range(rows)]) / items
        labels = rng.choice([0.0, 1.0, 2.0, 3.5, -1.0, -np.inf, 0.5], size=(rows, items), p=[0.8, 0.05] + [0.03] * 5)
        labels[0] = 0.0
        if rows > 1:
            labels[1, : min(items, 150)] = 2.0
        out.append((torch.from_numpy(scores).to(dtype), torch.from_numpy(labels).to(dtype)))
    return out


def _run(batches, **options):
    metric = R.RankingMetrics(TOP_K, metrics=SIX, ignore_zero_hits=False, **options)
    metric.reset()
    for batch in batches:
        metric.update(batch)
    return metric.compute()


@pytest.fixture
def taken(monkeypatch):
    """The number of batches the small-batch step ranked."""
    count = {"small": 0}
    inner = small_batch.small_dense_ranking

    def spy(*args, **kwargs):
        result = inner(*args, **kwargs)
        count["small"] += result is not None
        return result

    monkeypatch.setattr(ranking, "small_dense_ranking", spy)
    return count


OPTIONS = [
    {},
    {"relevance_threshold": 2.0, "gain_function": "linear_rank"},
    {"relevance_threshold": None, "gain_function": "binary"},
    {"relevance_threshold": 0.5, "gain_function": "exp_rank_shifted"},
]


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize(
    "rows, items, dtype", [(1, 150, torch.float32), (3, 1_682, torch.float32), (4, 700, torch.float64)]
)
def test_small_batches_against_numpy(taken, options, rows, items, dtype):
    batches = _batches(np.random.default_rng(rows * items), rows, items, dtype)
    result = _run(batches, **options)
    assert taken["small"] == len(batches)
    threshold = options.get("relevance_threshold", 1.0)
    gain_kind = options.get("gain_function", "exp_rank")
    scores = np.concatenate([s.double().numpy() for s, _ in batches])
    labels = np.concatenate([y.double().numpy() for _, y in batches])
    if threshold is None:  # y > 0 is relevant: the reference's threshold just above 0
        threshold = np.nextafter(0.0, 1.0)
    expected = metric_means(
        scores,
        labels,
        TOP_K,
        ignore_zero_hits=False,
        threshold=threshold,
        gain_kind=gain_kind,
        map_norm="min_k_relevant",
    )
    for name in SIX:
        values = [result[f"{name}@{k}"] for k in TOP_K]
        np.testing.assert_allclose(values, expected[name], rtol=1e-12, atol=1e-15, err_msg=name)


@pytest.mark.parametrize("options", OPTIONS + [{"metrics": SIX + ["bpref", "fall_out", "rbp", "err"]}])
def test_small_batches_equal_the_general_step(monkeypatch, taken, options):
    batches = _batches(np.random.default_rng(5), 3, 1_682)
    metrics = options.pop("metrics", SIX)
    metric = R.RankingMetrics(TOP_K, metrics=metrics, ignore_zero_hits=False, per_user=True, **options)
    small = _results_and_rows(metric, batches)
    assert taken["small"] == len(batches)
    monkeypatch.setattr(ranking, "_rank_small_dense", lambda batch, request: None)
    general = _results_and_rows(metric, batches)
    assert taken["small"] == len(batches)  # not called again
    assert small == general


def _results_and_rows(metric, batches):
    metric.reset()
    for batch in batches:
        metric.update(batch)
    return metric.compute(), {name: values.tolist() for name, values in metric.per_user().items()}


def test_ties_nan_and_other_rules_take_the_general_step(taken):
    rng = np.random.default_rng(1)
    tied = _batches(rng, 2, 300, ties=True)
    _run(tied)
    _run(_batches(rng, 2, 300), ties="average")
    _run(_batches(rng, 2, 300), gain_function=lambda y: y)
    assert taken["small"] == 0
    scores, labels = _batches(rng, 2, 300)[0]
    scores[1, 7] = float("nan")
    with pytest.raises(ValueError, match="NaN scores"):
        _run([(scores, labels)])
    labels[0, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN relevance"):
        _run([(torch.rand(2, 300), labels)])
    assert taken["small"] == 1  # the NaN label batch (untied scores) is checked on the small step


def test_small_step_takes_fewer_torch_operations(monkeypatch):
    from torch.profiler import ProfilerActivity, profile

    scores, labels = _batches(np.random.default_rng(2), 2, 1_682)[0]
    metric = R.RankingMetrics(TOP_K, metrics=SIX)
    batch = parse_ranking_input((scores, labels))

    def operations(step):
        step()
        with profile(activities=[ProfilerActivity.CPU]) as trace:
            step()
        return [e.name for e in trace.events() if e.cpu_parent is None and e.name.startswith("aten::")]

    small = operations(lambda: ranking._rank_input(batch, metric._request, None))
    monkeypatch.setattr(ranking, "_rank_small_dense", lambda batch, request: None)
    general = operations(lambda: ranking._rank_input(batch, metric._request, None))
    # the conversions between numpy and torch (detach, to, lift_fresh, ...) read no data
    free = {"aten::detach", "aten::to", "aten::resolve_conj", "aten::resolve_neg", "aten::lift_fresh", "aten::slice"}
    working = [name for name in small if name not in free]
    assert len(working) <= 16, working
    assert len(general) >= 2 * len(working), (len(general), working)


def test_scores_that_require_grad(taken):
    batches = _batches(np.random.default_rng(4), 2, 500)
    expected = _run(batches)
    assert _run([(scores.clone().requires_grad_(), labels) for scores, labels in batches]) == expected
    assert taken["small"] == 2 * len(batches)
