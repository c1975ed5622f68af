"""The metrics attached to an Ignite Engine: the keys they write (never one over another silently),
the scalar tags a logger gets, the labelled per-k results, and the optional inputs (``mask``) of a
dict output. Expected values come from the numpy references."""

import math
import warnings

import numpy as np
import pytest
import torch
from ignite.engine import Engine, Events
from ignite.handlers.base_logger import BaseOutputHandler
from ignite.metrics.metric import BatchFiltered, BatchWise, Metric
from sklearn.metrics import roc_auc_score

import ignite_recsys as R
from conftest import random_batch
from references import coverage, entropy, gini, metric_means, top_lists

TOP_K = [1, 3, 5]


def _batches(rng, sizes=(6, 9, 5), items=12):
    return [random_batch(rng, n, items, graded=True) for n in sizes]


def _stacked(batches):
    return torch.cat([b[0] for b in batches]).numpy(), torch.cat([b[1] for b in batches]).numpy()


def _evaluator():
    return Engine(lambda engine, batch: batch)


class Batches(Metric):
    """A metric from outside this library: it knows nothing of the others' keys."""

    def reset(self):
        self._n = 0

    def update(self, output):
        self._n += 1

    def compute(self):
        return float(self._n)


# --- 1. Keys: every key follows from the attach name; a collision raises ---------------------
def test_two_ranking_metrics_keep_their_own_keys(rng):
    batches = _batches(rng)
    scores, relevance = _stacked(batches)
    engine = _evaluator()
    R.RankingMetrics(TOP_K, metrics=["ndcg", "recall"]).attach(engine, "model_a")
    R.RankingMetrics(TOP_K, metrics=["ndcg", "recall"], relevance_threshold=3.0).attach(engine, "model_b")
    metrics = engine.run(batches).metrics
    for name, threshold in (("model_a", 1.0), ("model_b", 3.0)):
        expected = metric_means(scores, relevance, TOP_K, threshold=threshold)
        for metric in ("ndcg", "recall"):
            for k, value in zip(TOP_K, expected[metric]):
                assert metrics[f"{name}/{metric}@{k}"] == pytest.approx(value, abs=1e-12)
                assert metrics[name][f"{metric}@{k}"] == metrics[f"{name}/{metric}@{k}"]
    assert metrics["model_a/ndcg@5"] != metrics["model_b/ndcg@5"]  # the case would not tell them apart
    assert not any(key.startswith("ndcg@") for key in metrics)  # no bare key for one of them to win
    assert sorted(metrics) == sorted(
        ["model_a", "model_b"]
        + [f"{n}/{m}@{k}" for n in ("model_a", "model_b") for m in ("ndcg", "recall") for k in TOP_K]
    )


def test_r_precision_key_is_prefixed(rng):
    batches = _batches(rng)
    scores, relevance = _stacked(batches)
    engine = _evaluator()
    R.RankingMetrics(3, metrics=["r_precision", "mrr"]).attach(engine, "val")
    metrics = engine.run(batches).metrics
    expected = metric_means(scores, relevance, [3])
    assert metrics["val/r_precision"] == pytest.approx(expected["r_precision"], abs=1e-12)
    assert metrics["val/mrr@3"] == pytest.approx(expected["mrr"][0], abs=1e-12)


def test_two_cutoff_metrics_under_distinct_names(rng):
    batches = _batches(rng)
    scores, relevance = _stacked(batches)
    engine = _evaluator()
    R.NDCG(TOP_K).attach(engine, "ndcg_a")
    R.NDCG(TOP_K, gain_function="linear_rank").attach(engine, "ndcg_b")
    metrics = engine.run(batches).metrics
    for name, gain in (("ndcg_a", "exp_rank"), ("ndcg_b", "linear_rank")):
        expected = metric_means(scores, relevance, TOP_K, gain_kind=gain)["ndcg"]
        assert [metrics[f"{name}@{k}"] for k in TOP_K] == pytest.approx(expected, abs=1e-12)


COLLIDING = [
    # (first metric, its name, second metric, its name, a key both would write)
    (lambda: R.RankingMetrics(TOP_K), "model_a", lambda: R.NDCG(TOP_K), "model_a/ndcg", "model_a/ndcg@3"),
    (lambda: R.NDCG(TOP_K), "model_a/ndcg", lambda: R.RankingMetrics(TOP_K), "model_a", "model_a/ndcg@3"),
    (lambda: R.NDCG(TOP_K), "ndcg", lambda: R.HitRate(3), "ndcg", "ndcg@3"),
    (lambda: R.GAUC(), "ndcg@5", lambda: R.NDCG(TOP_K), "ndcg", "ndcg@5"),
    (lambda: Batches(), "ndcg@5", lambda: R.NDCG(TOP_K), "ndcg", "ndcg@5"),
    (lambda: R.ItemCoverage(3), "cov", lambda: R.RankingMetrics(3), "cov", "cov"),
    (lambda: R.NDCG(TOP_K), "ndcg", lambda: R.GAUC(), "ndcg@5", "ndcg@5"),  # a single-valued metric of ours too
]


@pytest.mark.parametrize("first, first_name, second, second_name, key", COLLIDING)
def test_attaching_a_colliding_metric_raises(first, first_name, second, second_name, key):
    engine = _evaluator()
    first().attach(engine, first_name)
    late = second()
    with pytest.raises(ValueError, match=f"would both write .*'{key}'"):
        late.attach(engine, second_name)
    assert not late.is_attached(engine)  # the failed attach left nothing behind


@pytest.mark.parametrize("late", [lambda: Batches()])
def test_a_colliding_metric_attached_later_raises_at_completion(rng, late):
    engine = _evaluator()
    R.NDCG(TOP_K).attach(engine, "ndcg")
    late().attach(engine, "ndcg@5")  # an ignite metric does not know the keys of others
    with pytest.raises(ValueError, match=r"NDCG attached as 'ndcg' and .* attached as 'ndcg@5' would both write"):
        engine.run(_batches(rng))


def test_collision_seen_across_usages_and_filtered_events(rng):
    engine = _evaluator()
    R.NDCG(TOP_K).attach(engine, "ndcg", usage=BatchFiltered(every=2))
    with pytest.raises(ValueError, match="would both write"):
        R.RankingMetrics(3).attach(engine, "ndcg", usage=BatchWise())


def test_no_false_collision_same_metric_twice_or_after_detach(rng):
    batches = _batches(rng)
    scores, relevance = _stacked(batches)
    engine = _evaluator()
    ndcg = R.NDCG(TOP_K)
    ndcg.attach(engine, "ndcg")
    ndcg.attach(engine, "ndcg")  # the same attachment twice is no collision
    ndcg.attach(engine, "ndcg_copy")  # one metric, two names: distinct keys
    first = R.RankingMetrics(3)
    first.attach(engine, "ranking")
    first.detach(engine)
    R.RankingMetrics(3, metrics=["mrr"]).attach(engine, "ranking")  # the name is free again
    metrics = engine.run(batches).metrics
    expected = metric_means(scores, relevance, TOP_K)
    assert [metrics[f"ndcg@{k}"] for k in TOP_K] == pytest.approx(expected["ndcg"], abs=1e-12)
    assert [metrics[f"ndcg_copy@{k}"] for k in TOP_K] == [metrics[f"ndcg@{k}"] for k in TOP_K]
    assert metrics["ranking/mrr@3"] == pytest.approx(expected["mrr"][1], abs=1e-12)
    assert "ranking/ndcg@3" not in metrics


def test_attach_name_must_be_a_string():
    with pytest.raises(TypeError, match="name must be a str"):
        R.NDCG(3).attach(_evaluator(), 3)


# --- 2. Logging: one tag per value -------------------------------------------------------------
class _RecordingHandler(BaseOutputHandler):
    """A logger's output handler that records the tags and values it would write."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.logged = {}

    def __call__(self, engine, logger, event_name):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a value the logger cannot write (list, dict) fails
            self.logged = self._setup_output_metrics_state_attrs(engine, key_tuple=False)


def _attach_all(engine, popularity):
    R.RankingMetrics([10, 5], metrics=["ndcg", "recall", "r_precision"]).attach(engine, "ranking")
    R.ItemCoverage([5, 10]).attach(engine, "coverage")
    R.Novelty(5, popularity).attach(engine, "novelty")
    R.GAUC().attach(engine, "gauc")


def test_scalar_metric_names_give_one_tag_per_value(rng):
    batches = _batches(rng, items=12)
    popularity = torch.arange(1, 13)
    engine = _evaluator()
    _attach_all(engine, popularity)
    names = R.scalar_metric_names(engine)
    expected_names = [
        "ranking/ndcg@5",
        "ranking/ndcg@10",
        "ranking/recall@5",
        "ranking/recall@10",
        "ranking/r_precision",
        "coverage@5",
        "coverage@10",
        "novelty@5",
        "gauc",
    ]
    assert names == expected_names
    handler = _RecordingHandler("validation", metric_names=names)
    engine.add_event_handler(Events.COMPLETED, handler, None, Events.COMPLETED)
    metrics = engine.run(batches).metrics
    assert list(handler.logged) == [f"validation/{name}" for name in expected_names]
    assert all(handler.logged[f"validation/{name}"] == metrics[name] for name in expected_names)
    # the values are the metrics' own, checked against the references
    scores, relevance = _stacked(batches)
    expected = metric_means(scores, relevance, [5, 10])
    assert handler.logged["validation/ranking/ndcg@10"] == pytest.approx(expected["ndcg"][1], abs=1e-12)
    lists = top_lists(scores, 10)
    assert handler.logged["validation/coverage@10"] == pytest.approx(coverage(lists, 12), abs=1e-12)


def test_metric_names_all_logs_the_lists_again(rng):
    """Why the recipe exists: with "all", each list is logged again as "/0", "/1", ..."""
    engine = _evaluator()
    _attach_all(engine, torch.arange(1, 13))
    handler = _RecordingHandler("validation", metric_names="all")
    engine.run(_batches(rng))
    tags = handler._setup_output_metrics_state_attrs(engine, key_tuple=False)
    assert "validation/coverage/0" in tags and len(tags) > len(R.scalar_metric_names(engine))


def test_scalar_metric_names_include_other_metrics_by_name():
    engine = _evaluator()
    Batches().attach(engine, "accuracy")
    R.HitRate([3, 1]).attach(engine, "hr")
    assert R.scalar_metric_names(engine) == ["accuracy", "hr@1", "hr@3"]
    assert R.scalar_metric_names(_evaluator()) == []


# --- 3. Labelled per-k results: compute_dict() --------------------------------------------------
def _popularity():
    return torch.tensor([9, 7, 5, 4, 3, 3, 2, 2, 1, 1, 1, 6])


def _beyond_accuracy_references(scores, popularity, k):
    lists = top_lists(scores, k)
    pop = popularity.numpy().astype(np.float64)
    share = pop / pop.sum()
    return {
        "item_coverage": coverage(lists, len(pop)),
        "gini_index": gini(lists, len(pop)),
        "shannon_entropy": entropy(lists, len(pop)),
        "average_popularity": float(np.mean([np.mean(pop[items]) for items in lists])),
        "tail_percentage": float(np.mean([np.mean((pop[items] > 0) & (pop[items] <= 2)) for items in lists])),
        "novelty": float(np.mean([np.mean(-np.log2(share[items])) for items in lists])),
    }


CUTOFF_METRICS = {
    "ndcg": lambda k: R.NDCG(k),
    "hit_rate": lambda k: R.HitRate(k),
    "recall": lambda k: R.Recall(k),
    "precision": lambda k: R.Precision(k),
    "map": lambda k: R.MAP(k),
    "mrr": lambda k: R.MRR(k),
    "f1": lambda k: R.F1(k),
    "item_coverage": lambda k: R.ItemCoverage(k),
    "gini_index": lambda k: R.GiniIndex(k),
    "shannon_entropy": lambda k: R.ShannonEntropy(k),
    "average_popularity": lambda k: R.AveragePopularity(k, _popularity()),
    "tail_percentage": lambda k: R.TailPercentage(k, _popularity(), tail_ratio=2),
    "novelty": lambda k: R.Novelty(k, _popularity()),
}


@pytest.mark.parametrize("name", list(CUTOFF_METRICS))
def test_compute_dict_labels_each_value_with_its_k(rng, name):
    batches = _batches(rng)
    scores, relevance = _stacked(batches)
    metric = CUTOFF_METRICS[name]([3, 1])  # unsorted on purpose
    for batch in batches:
        metric.update(batch)
    labelled = metric.compute_dict()
    assert isinstance(labelled, dict)  # (ignite's Metric.__getattr__ answers any name with a lambda)
    assert list(labelled) == [f"{name}@1", f"{name}@3"]  # ascending k, as compute()
    assert list(labelled.values()) == metric.compute()  # compute() keeps ignite's list
    for k in (1, 3):
        if name in metric_means(scores, relevance, [1]):
            expected = metric_means(scores, relevance, [k])[name][0]
        else:
            expected = _beyond_accuracy_references(scores, _popularity(), k)[name]
        assert labelled[f"{name}@{k}"] == pytest.approx(expected, abs=1e-12)


def test_compute_dict_keys_match_ranking_metrics(rng):
    batches = _batches(rng)
    combined = R.RankingMetrics([3, 1])
    singles = [CUTOFF_METRICS[name]([3, 1]) for name in ("ndcg", "hit_rate", "recall", "precision", "map", "mrr", "f1")]
    for metric in [combined] + singles:
        for batch in batches:
            metric.update(batch)
    assert all(isinstance(metric.compute_dict(), dict) for metric in singles)
    assert {key: value for m in singles for key, value in m.compute_dict().items()} == combined.compute()


# --- 4. Optional inputs of a dict output: the mask --------------------------------------------
def _pointwise_batches(rng, binary):
    batches = []
    for n in (7, 4, 9):
        y_pred = torch.from_numpy(rng.random((n, 6)))
        y = torch.from_numpy((rng.random((n, 6)) < 0.4).astype(np.float64) if binary else rng.random((n, 6)) * 5)
        if binary:
            y_pred = torch.round(y_pred * 8) / 8  # discrete scores: the bucketed AUC is exact
        mask = torch.from_numpy(rng.random((n, 6)) < 0.6)
        y_pred = torch.where(mask, y_pred, torch.tensor(float("nan"), dtype=torch.float64))  # never read
        batches.append((y_pred, y, mask))
    return batches


def _pointwise_reference(name, y_pred, y):
    if name == "mae":
        return np.abs(y_pred - y).mean()
    if name == "rmse":
        return math.sqrt(np.square(y_pred - y).mean())
    if name == "log_loss":
        return -(y * np.log(y_pred.clip(1e-15, 1 - 1e-15)) + (1 - y) * np.log1p(-y_pred.clip(1e-15, 1 - 1e-15))).mean()
    return roc_auc_score(y, y_pred)


POINTWISE = {"mae": R.MAE, "rmse": R.RMSE, "log_loss": R.LogLoss, "auc": R.AUC}


@pytest.mark.parametrize("name", list(POINTWISE))
def test_dict_output_passes_the_mask(rng, name):
    batches = _pointwise_batches(rng, binary=name in ("log_loss", "auc"))
    engine = Engine(lambda engine, batch: {"y_pred": batch[0], "y": batch[1], "mask": batch[2]})
    POINTWISE[name]().attach(engine, name)
    value = engine.run(batches).metrics[name]
    y_pred, y, mask = (torch.cat([b[i] for b in batches]).numpy() for i in range(3))
    assert value == pytest.approx(_pointwise_reference(name, y_pred[mask], y[mask]), abs=1e-12)


@pytest.mark.parametrize("name", list(POINTWISE))
def test_dict_output_without_mask_counts_every_entry(rng, name):
    batches = [(torch.nan_to_num(p, nan=0.5), y, m) for p, y, m in _pointwise_batches(rng, name in ("log_loss", "auc"))]
    engine = Engine(lambda engine, batch: {"y_pred": batch[0], "y": batch[1]})
    POINTWISE[name]().attach(engine, name)
    value = engine.run(batches).metrics[name]
    y_pred, y = (torch.cat([b[i] for b in batches]).numpy().ravel() for i in range(2))
    assert value == pytest.approx(_pointwise_reference(name, y_pred, y), abs=1e-12)


def test_dict_output_missing_a_required_key_raises(rng):
    engine = Engine(lambda engine, batch: {"y_pred": batch[0], "mask": batch[2]})
    R.MAE().attach(engine, "mae")
    with pytest.raises(ValueError, match=r"should contain \('y_pred', 'y'\) keys \(and optionally \('mask',\)\)"):
        engine.run(_pointwise_batches(rng, binary=False))


def test_optional_keys_fill_gaps_with_none_and_drop_trailing_absent_ones():
    class TwoOptional(R.GAUC):
        optional_output_keys = ("exclude", "mask")

    metric = TwoOptional()
    assert metric._from_mapping({"y": 1, "y_pred": 0}) == (0, 1)
    assert metric._from_mapping({"y": 1, "y_pred": 0, "exclude": 2}) == (0, 1, 2)
    assert metric._from_mapping({"y": 1, "y_pred": 0, "mask": 3}) == (0, 1, None, 3)


def test_ranking_metrics_still_take_a_dict_and_lists_of_samples(rng):
    """The ignite contract for the other metrics is unchanged: a dict gives (y_pred, y) and a pair
    of lists of per-sample tensors is unrolled."""
    batches = _batches(rng)
    scores, relevance = _stacked(batches)
    expected = metric_means(scores, relevance, TOP_K)["ndcg"]
    as_dict = Engine(lambda engine, batch: {"y_pred": batch[0], "y": batch[1], "unused": None})
    R.NDCG(TOP_K).attach(as_dict, "ndcg")
    assert as_dict.run(batches).metrics["ndcg"] == pytest.approx(expected, abs=1e-12)
    as_lists = Engine(lambda engine, batch: (list(batch[0]), list(batch[1])))
    R.NDCG(TOP_K).attach(as_lists, "ndcg")
    assert as_lists.run(batches).metrics["ndcg"] == pytest.approx(expected, abs=1e-12)
