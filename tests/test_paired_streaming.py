"""Paired: two models' per-user values compared while streaming (no per-user value kept), against
scipy.stats.ttest_rel and t intervals on the numpy per-user references, against paired_test on
the metric's own per-user values, with every input form, from an Engine, and under two gloo
processes."""

import json
import os
import re

import numpy as np
import pytest
import torch
import ignite.distributed as idist
from ignite.engine import Engine
from ignite.exceptions import NotComputableError
from scipy import stats as sps

import ignite_recsys as R
from conftest import CUTOFF_CLASSES, eager_error
from test_statistics import ALL, TOP_K, _batches, _expected_rows, _metric
from gloo import run_in_processes


def _models(seed, sizes=(40, 1, 33)):
    """Batches of model a and model b against the same targets (b: a noisier copy of a)."""
    batches = _batches(seed, sizes=sizes)
    generator = torch.Generator().manual_seed(seed)
    other = [(scores + 40 * torch.randn(scores.shape, generator=generator), y) for scores, y in batches]
    return batches, other


def _check(result, a, b, level=0.95):
    """A PairedTestResult against scipy on per-user values a, b (NaN: not counted)."""
    kept = ~(np.isnan(a) | np.isnan(b))
    a, b = a[kept], b[kept]
    d = a - b
    expected = sps.ttest_rel(a, b)
    assert isinstance(result, R.PairedTestResult) and result.method == "t" and result.num_users == len(d)
    assert result.p_value == pytest.approx(expected.pvalue, abs=1e-6, rel=1e-9)
    assert result.mean_difference == pytest.approx(d.mean(), abs=1e-12)
    assert result.mean_a == pytest.approx(a.mean(), abs=1e-12, rel=1e-12)
    assert result.mean_b == pytest.approx(b.mean(), abs=1e-12, rel=1e-12)
    np.testing.assert_allclose(result.confidence_interval, expected.confidence_interval(level), rtol=0, atol=1e-9)


def _columns(result):
    if isinstance(result, dict):
        return list(result.values())
    return result if isinstance(result, list) else [result]


@pytest.mark.parametrize("name", ALL)
def test_paired_equals_ttest_rel_on_the_reference_values(name):
    batches, other = _models(1)
    paired = R.Paired(_metric(name), level=0.9)
    for (scores_a, y), (scores_b, _) in zip(batches, other):
        paired.update((scores_a, scores_b, y))
    rows_a, rows_b = _expected_rows(name, batches), _expected_rows(name, other)
    rows_a, rows_b = rows_a.reshape(len(rows_a), -1), rows_b.reshape(len(rows_b), -1)
    results = _columns(paired.compute())
    assert len(results) == rows_a.shape[1]
    for column, result in enumerate(results):
        _check(result, rows_a[:, column], rows_b[:, column], level=0.9)


def test_paired_equals_paired_test_on_the_per_user_values_for_ranking_metrics():
    batches, other = _models(2)
    names = list(CUTOFF_CLASSES) + ["r_precision"]
    paired = R.Paired(R.RankingMetrics(TOP_K, names))
    a, b = R.RankingMetrics(TOP_K, names, per_user=True), R.RankingMetrics(TOP_K, names, per_user=True)
    for (scores_a, y), (scores_b, _) in zip(batches, other):
        paired.update((scores_a, scores_b, y))
        a.update((scores_a, y))
        b.update((scores_b, y))
    result = paired.compute()
    assert list(result) == list(a.compute())
    for key, got in result.items():
        expected = R.paired_test(a, b, k=key)
        assert got.num_users == expected.num_users and got.method == expected.method
        for field in ("p_value", "mean_difference", "mean_a", "mean_b"):
            assert getattr(got, field) == pytest.approx(getattr(expected, field), abs=1e-9), (key, field)
        np.testing.assert_allclose(got.confidence_interval, expected.confidence_interval, rtol=0, atol=1e-9)


def _forms(scores_a, scores_b, relevance):
    """(update of Paired, update of a, update of b) in the other input forms."""
    excluded = torch.zeros(relevance.shape, dtype=torch.bool)
    excluded[:, 5:9] = True
    exclude_ids = R.ItemIds(torch.nonzero(excluded)[:, 1].reshape(-1, 4))

    def ranked(scores):
        return R.RankedItems(torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :10])

    sparse = relevance.to_sparse()
    return {
        "sparse targets": ((scores_a, scores_b, sparse), (scores_a, sparse), (scores_b, sparse)),
        "ranked ids": (
            (ranked(scores_a), ranked(scores_b), relevance),
            (ranked(scores_a), relevance),
            (ranked(scores_b), relevance),
        ),
        "ranked ids and scores": (
            (ranked(scores_a), scores_b, relevance),
            (ranked(scores_a), relevance),
            (scores_b, relevance),
        ),
        "exclude mask": (
            (scores_a, scores_b, relevance, excluded),
            (scores_a, relevance, excluded),
            (scores_b, relevance, excluded),
        ),
        "exclude ids and ranked ids": (
            (ranked(scores_a), ranked(scores_b), R.ItemIds(_ids_of(relevance)), exclude_ids),
            (ranked(scores_a), R.ItemIds(_ids_of(relevance)), exclude_ids),
            (ranked(scores_b), R.ItemIds(_ids_of(relevance)), exclude_ids),
        ),
    }


def _ids_of(relevance):
    width = int((relevance > 0).sum(1).max())
    ids = torch.full((relevance.shape[0], width), -1, dtype=torch.int64)
    for user, row in enumerate(relevance):
        items = torch.nonzero(row > 0).flatten()
        ids[user, : len(items)] = items
    return ids


@pytest.mark.parametrize(
    "form", ["sparse targets", "ranked ids", "ranked ids and scores", "exclude mask", "exclude ids and ranked ids"]
)
@pytest.mark.parametrize(
    "factory",
    [
        lambda **kw: R.NDCG(TOP_K, **kw),
        lambda **kw: R.RankingMetrics(TOP_K, ["recall", "map"], **kw),
        lambda **kw: R.Novelty(TOP_K, torch.arange(25) % 5 + 1, **kw),
    ],
    ids=["ndcg", "ranking_metrics", "novelty"],
)
def test_every_input_form(form, factory):
    """Paired in a form equals scipy on the per-user values the metric gives in that form (which
    the input-form tests check against the references)."""
    batches, other = _models(3, sizes=(20, 17))
    paired, a, b = factory(), factory(per_user=True), factory(per_user=True)
    paired = R.Paired(paired)
    for (scores_a, relevance), (scores_b, _) in zip(batches, other):
        both, alone_a, alone_b = _forms(scores_a, scores_b, relevance)[form]
        paired.update(both)
        a.update(alone_a)
        b.update(alone_b)
    values_a, values_b = a.per_user(), b.per_user()
    if isinstance(values_a, dict):
        values_a, values_b = torch.stack(list(values_a.values()), 1), torch.stack(list(values_b.values()), 1)
    for column, result in enumerate(_columns(paired.compute())):
        _check(result, values_a[:, column].numpy(), values_b[:, column].numpy())


def test_users_counted_for_one_model_only_are_left_out():
    """With ranked ids a user may have no candidate under one model (item-value metrics do not
    count them): only users counted for both are compared, as paired_test drops NaN pairs."""
    scores, relevance = _batches(4, sizes=(12,))[0]
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices
    ranked_a, ranked_b = order[:, :5], order[:, 5:10].clone()
    ranked_b[[2, 7]] = -1  # model b returns nothing for users 2 and 7
    popularity = torch.arange(25) + 1
    paired = R.Paired(R.AveragePopularity(TOP_K, popularity))
    paired.update((R.RankedItems(ranked_a), R.RankedItems(ranked_b), relevance))
    a, b = R.AveragePopularity(TOP_K, popularity, per_user=True), R.AveragePopularity(TOP_K, popularity, per_user=True)
    a.update((R.RankedItems(ranked_a), relevance))
    b.update((R.RankedItems(ranked_b), relevance))
    assert torch.isnan(b.per_user()[[2, 7]]).all()
    for column, result in enumerate(paired.compute()):
        assert result.num_users == 10
        _check(result, a.per_user()[:, column].numpy(), b.per_user()[:, column].numpy())


def test_state_is_a_few_sums_that_do_not_grow():
    batches, other = _models(5)
    paired = R.Paired(R.MRR(TOP_K))
    shapes = {key: tuple(value.shape) for key, value in paired.state_dict()["__metric_state_per_rank"][0].items()}
    for (scores_a, y), (scores_b, _) in zip(batches * 3, other * 3):
        paired.update((scores_a, scores_b, y))
    state = paired.state_dict()["__metric_state_per_rank"][0]
    assert {key: tuple(value.shape) for key, value in state.items()} == shapes
    assert sorted(shapes) == [
        "_count",
        "_num_invalid_updates",
        "_shift",
        "_sum_a",
        "_sum_b",
        "_sum_d",
        "_sum_d2",
        "_sum_d_deviations",
    ]
    restored = R.Paired(R.MRR(TOP_K))
    restored.load_state_dict(paired.state_dict())
    assert restored.compute() == paired.compute()


def test_equal_models_give_p_one_and_identical_differences_p_zero():
    batches, _ = _models(6)
    paired = R.Paired(R.HitRate(TOP_K))
    for scores, y in batches:
        paired.update((scores, scores, y))
    assert all(result.p_value == 1.0 and result.confidence_interval == (0.0, 0.0) for result in paired.compute())
    scores = torch.tensor([[3.0, 2.0, 1.0]] * 4)
    relevance = torch.tensor([[1.0, 0.0, 0.0]] * 4)
    paired = R.Paired(R.HitRate(1))
    paired.update((scores, -scores, relevance))  # a hits every user, b none: d = 1 for all
    [result] = paired.compute()
    assert result.p_value == R.paired_test([1.0] * 4, [0.0] * 4).p_value == 0.0 and result.mean_difference == 1.0


def test_no_autograd_graph_in_state():
    weights = torch.rand(4, 6, requires_grad=True)
    labels = (torch.rand(4, 6) < 0.5).float()
    labels[:, 0] = 1.0
    paired = R.Paired(R.RankingMetrics([1, 3]))
    for _ in range(5):
        paired.update((torch.sigmoid(weights * 2.0), torch.sigmoid(weights), labels))
        for attribute, value in vars(paired).items():
            if isinstance(value, torch.Tensor):
                assert value.grad_fn is None and not value.requires_grad, attribute
    assert weights.grad is None


# --- Refusals -----------------------------------------------------------------------------------
def test_bad_values_of_either_model_are_refused_and_the_state_kept():
    batches, other = _models(7)
    paired = R.Paired(R.NDCG(TOP_K))
    paired.update((batches[0][0], other[0][0], batches[0][1]))
    before = {key: getattr(paired, key).clone() for key in paired._state_dict_all_req_keys}
    scores_b = other[2][0].clone()
    scores_b[3, 4] = float("nan")
    with pytest.raises(ValueError, match=re.escape("Paired(NDCG), model b: y_pred contains NaN")):
        paired.update((batches[2][0], scores_b, batches[2][1]))
    with pytest.raises(ValueError, match=re.escape("Paired(NDCG), model a (y_pred_a): y_pred and y must")):
        paired.update((batches[2][0][:, :5], other[2][0], batches[2][1]))
    for key, value in before.items():
        assert torch.equal(getattr(paired, key), value), key


def test_deferred_bad_values_raise_in_compute(monkeypatch):
    import ignite_recsys.metrics._state as state

    batches, other = _models(8)
    paired = R.Paired(R.NDCG(TOP_K))
    paired.update((batches[0][0], other[0][0], batches[0][1]))
    monkeypatch.setattr(state, "values_checked_on_host", lambda device: False)
    scores_b = other[2][0].clone()
    scores_b[0, 0] = float("nan")
    paired.update((batches[2][0], scores_b, batches[2][1]))
    with pytest.raises(ValueError, match="1 update") as raised:
        paired.compute()
    monkeypatch.undo()
    expected = eager_error(lambda: R.Paired(R.NDCG(TOP_K)), (batches[2][0], scores_b, batches[2][1]))
    assert f"\n- {expected}: 1 update" in str(raised.value)


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: R.Paired(R.GAUC()), TypeError, "metric must be a metric that averages over users"),
        (lambda: R.Paired(R.ItemCoverage(3)), TypeError, "metric must be a metric that averages over users"),
        (lambda: R.Paired(R.NDCG(3, per_user=True)), ValueError, "built without per_user and num_groups"),
        (lambda: R.Paired(R.NDCG(3, num_groups=2)), ValueError, "built without per_user and num_groups"),
        (lambda: R.Paired(R.NDCG(3), level=1.0), ValueError, "level must be strictly between 0 and 1"),
        (lambda: R.Paired(R.NDCG(3), output_transform=3), TypeError, "output_transform must be callable"),
    ],
)
def test_bad_construction(make, error, message):
    with pytest.raises(error, match=re.escape(message)):
        make()


def test_bad_updates_and_too_few_users():
    scores, relevance = _batches(9, sizes=(4,))[0]
    paired = R.Paired(R.Recall(TOP_K))
    with pytest.raises(ValueError, match="of 3 or 4 entries, got a sequence of length 2"):
        paired.update((scores, relevance))
    with pytest.raises(TypeError, match="expects a tuple"):
        paired.update(scores)
    with pytest.raises(TypeError, match="takes no UserGroups or UserIds"):
        paired.update((scores, scores, relevance, R.UserGroups(torch.zeros(4, dtype=torch.int64))))
    with pytest.raises(NotComputableError, match="at least two users compared"):
        paired.compute()
    paired.update((scores[2:3], scores[2:3], relevance[2:3]))
    with pytest.raises(NotComputableError, match="got 1"):
        paired.compute()


# --- Engine -------------------------------------------------------------------------------------
def test_engine_dict_output_and_scalar_keys():
    batches, other = _models(10)
    outputs = [{"y_pred_a": a, "y_pred_b": b, "y": y} for (a, y), (b, _) in zip(batches, other)]
    engine = Engine(lambda e, batch: batch)
    R.Paired(R.NDCG(TOP_K)).attach(engine, "ndcg")
    R.Paired(R.RankingMetrics(TOP_K, ["mrr"])).attach(engine, "ranking")
    R.Paired(R.RPrecision()).attach(engine, "rp")
    metrics = engine.run(outputs).metrics
    expected = R.Paired(R.NDCG(TOP_K))
    for output in outputs:
        expected.update((output["y_pred_a"], output["y_pred_b"], output["y"]))
    assert metrics["ndcg"] == expected.compute()
    assert metrics["ndcg@3/p_value"] == expected.compute()[1].p_value
    assert metrics["ndcg@8/mean_difference"] == expected.compute()[2].mean_difference
    assert {"ranking/mrr@1/mean_a", "ranking/mrr@8/mean_b", "rp/p_value", "rp/mean_difference"} <= set(metrics)
    names = R.scalar_metric_names(engine)
    assert names[:4] == ["ndcg@1/mean_a", "ndcg@1/mean_b", "ndcg@1/mean_difference", "ndcg@1/p_value"]
    assert all(isinstance(metrics[name], float) for name in names)


def test_engine_dict_output_with_exclusion():
    batches, other = _models(11, sizes=(15,))
    (scores_a, y), (scores_b, _) = batches[0], other[0]
    excluded = torch.zeros(y.shape, dtype=torch.bool)
    excluded[:, :3] = True
    engine = Engine(lambda e, batch: batch)
    R.Paired(R.Precision(TOP_K)).attach(engine, "p")
    metrics = engine.run([{"y_pred_a": scores_a, "y_pred_b": scores_b, "y": y, "exclude": excluded}]).metrics
    expected = R.Paired(R.Precision(TOP_K))
    expected.update((scores_a, scores_b, y, excluded))
    assert metrics["p"] == expected.compute()


# --- Two gloo processes equal one ----------------------------------------------------------------
_FACTORIES = {
    "ndcg": lambda: R.Paired(R.NDCG(TOP_K)),
    "ranking": lambda: R.Paired(R.RankingMetrics(TOP_K, ["recall", "r_precision"])),
    "novelty": lambda: R.Paired(R.Novelty(TOP_K, torch.arange(25) % 7 + 1)),
}


def _shares():
    batches, other = _models(12, sizes=(13, 1, 9, 17))
    pairs = [(a, b, y) for (a, y), (b, _) in zip(batches, other)]
    return {0: [pairs[1], pairs[3]], 1: [pairs[0], pairs[2]]}


def _results(updates):
    results = {}
    for name, factory in _FACTORIES.items():
        metric = factory()
        for update in updates:
            metric.update(update)
        result = _columns(metric.compute())
        results[name] = [
            [r.p_value, r.mean_difference, *r.confidence_interval, r.mean_a, r.mean_b, r.num_users] for r in result
        ]
    return results


def _worker(local_rank, folder):
    rank = idist.get_rank()
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as handle:
        json.dump(_results(_shares()[rank]), handle)


@pytest.mark.slow
def test_two_gloo_processes_equal_one():
    shares = _shares()
    expected = _results(shares[0] + shares[1])
    for rank, got in enumerate(run_in_processes(_worker)):
        for name, value in expected.items():
            np.testing.assert_allclose(got[name], value, rtol=0, atol=1e-9, err_msg=f"{name} rank {rank}")
