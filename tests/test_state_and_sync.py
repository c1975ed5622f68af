"""State handling of every metric: snapshots, checked loads, resuming an Engine through ignite's
Checkpoint, copied item vectors, huge cut-offs, and Novelty's rule for unseen items."""

import math
import os
import tempfile
import tracemalloc

import numpy as np
import pytest
import torch
from ignite.engine import DeterministicEngine, Engine, Events
from ignite.handlers import Checkpoint, DiskSaver
from ignite.metrics.metric import RunningBatchWise

import ignite_recsys as R
import references as ref
from conftest import random_batch, run_metric
from test_distributed import FACTORIES

_KEY = "__metric_state_per_rank"  # ignite's Metric.state_dict() layout


def _batches(rng, count=3):
    return [random_batch(rng, 6, 25, graded=True, zero_users=1) for _ in range(count)]


def _tensors(state_dict):
    return {key: value.clone() for key, value in state_dict[_KEY][0].items()}


def _live_state(metric):
    return {key: getattr(metric, key).clone() for key in metric._state_dict_all_req_keys}


def _assert_same(before, after):
    assert before.keys() == after.keys()
    for key in before:
        assert before[key].shape == after[key].shape and torch.equal(before[key], after[key]), key


# --- Snapshots -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_state_dict_is_a_snapshot(rng, name):
    batches = _batches(rng)
    metric = FACTORIES[name]()
    metric.update(batches[0])
    saved = metric.state_dict()
    at_save = _tensors(saved)
    metric.update(batches[1])
    _assert_same(at_save, _tensors(saved))  # a later update does not reach the saved dict


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_metrics_loaded_from_one_dict_share_nothing(rng, name):
    batches = _batches(rng)
    source = FACTORIES[name]()
    source.update(batches[0])
    saved = source.state_dict()
    at_save = _tensors(saved)
    first, second = FACTORIES[name](), FACTORIES[name]()
    first.load_state_dict(saved)
    second.load_state_dict(saved)
    first.update(batches[1])
    first.update(batches[2])
    _assert_same(at_save, _tensors(saved))
    assert first.compute() == run_metric(FACTORIES[name](), batches)
    assert second.compute() == run_metric(FACTORIES[name](), batches[:1])
    assert source.compute() == run_metric(FACTORIES[name](), batches[:1])


# --- Loads of another configuration ------------------------------------------------------------
_POPULARITY = torch.arange(25) % 7 + 1

MISMATCHES = {
    "cut-offs": (
        lambda: R.NDCG([5, 10]),
        lambda: R.NDCG([5]),
        r"another configuration: top_k=\[5, 10\] \(this metric: \[5\]\)",
    ),
    "metric names": (
        lambda: R.RankingMetrics([1, 3], metrics=["ndcg", "recall"]),
        lambda: R.RankingMetrics([1, 3], metrics=["ndcg"]),
        r"another configuration: metrics=\['ndcg', 'recall'\] \(this metric: \['ndcg'\]\)",
    ),
    "popularity cut-offs": (
        lambda: R.AveragePopularity([1, 2], _POPULARITY),
        lambda: R.AveragePopularity([1], _POPULARITY),
        r"another configuration: top_k=\[1, 2\] \(this metric: \[1\]\)",
    ),
    "auc resolution": (
        lambda: R.AUC(resolution_bits=12),
        lambda: R.AUC(resolution_bits=14),
        r"another configuration: resolution_bits=12 \(this metric: 14\)",
    ),
    "catalog cut-offs": (
        lambda: R.ItemCoverage([1, 3, 5]),
        lambda: R.ItemCoverage([1, 3]),
        r"another configuration: top_k=\[1, 3, 5\] \(this metric: \[1, 3\]\)",
    ),
    "catalog size given": (
        lambda: R.GiniIndex([1, 3], num_items=25),
        lambda: R.GiniIndex([1, 3], num_items=30),
        r"'_counts' has shape \(2, 25\), this metric \(top_k=\[1, 3\], num_items=30\) expects \(2, 30\)",
        30,
    ),
    "catalog size from the batches": (
        lambda: R.ShannonEntropy([1, 3]),
        lambda: R.ShannonEntropy([1, 3], num_items=30),
        r"'_counts' has shape \(2, 25\)",
        30,
    ),
    "another metric": (lambda: R.MAE(), lambda: R.AUC(), r"the state comes from a MAE, not an AUC"),
}


@pytest.mark.parametrize("case", sorted(MISMATCHES))
def test_load_of_another_configuration_is_refused(rng, case):
    """The state carries the configuration it was made under; another configuration is refused
    with the difference named (where the configuration agrees, e.g. a catalog size taken from the
    batches, by the states' shapes), and the metric is left as it was."""
    make_source, make_target, message, *width = MISMATCHES[case]
    source = make_source()
    source.update(_batches(rng, 1)[0])
    batches = [random_batch(rng, 6, *width or [25], graded=True) for _ in range(2)]
    target = make_target()
    target.update(batches[0])
    before = _live_state(target)
    with pytest.raises(ValueError, match=message):
        target.load_state_dict(source.state_dict())
    _assert_same(before, _live_state(target))
    target.update(batches[1])  # still usable, and unchanged
    assert target.compute() == run_metric(make_target(), batches)


def test_catalog_size_from_the_batches_accepts_any_checkpointed_size(rng):
    batches = _batches(rng)
    source = R.ItemCoverage([1, 3])
    source.update(batches[0])
    for target in (R.ItemCoverage([1, 3]), R.ItemCoverage([1, 3], num_items=25)):
        target.load_state_dict(source.state_dict())
        target.update(batches[1])
        assert target.compute() == run_metric(R.ItemCoverage([1, 3]), batches[:2])


def test_catalog_state_saved_before_any_batch_loads_under_a_given_size():
    """A coverage state saved before its first batch (no catalog size yet) loads into the metric
    built with num_items, as a state sized by its batches does: items 0-2 of 6 listed, 3/6 and
    then 4/6 at k = 1 and 2."""
    saved = R.ItemCoverage([1, 2]).state_dict()
    resumed = R.ItemCoverage([1, 2], num_items=6)
    resumed.load_state_dict(saved)
    scores = torch.tensor([[6.0, 5, 1, 1, 1, 1], [1, 6, 5, 1, 1, 1], [1, 1, 6, 1, 5, 1]])
    resumed.update((scores, torch.ones(3, 6)))
    assert resumed.compute() == [3 / 6, 4 / 6]
    with pytest.raises(ValueError, match="expects"):  # a state counted on another catalog size is still refused
        counted = R.ItemCoverage([1, 2])
        counted.update((scores[:, :5], torch.ones(3, 5)))
        resumed.load_state_dict(counted.state_dict())


def test_load_of_a_non_tensor_is_refused():
    metric = R.NDCG([1, 3])
    state = metric.state_dict()
    state[_KEY][0]["_sum"] = [0.0, 0.0]
    with pytest.raises(TypeError, match="'_sum' must be a real tensor"):
        metric.load_state_dict(state)


# --- Resuming an Engine through ignite's Checkpoint -----------------------------------------
def _evaluate(engine_class, metric, batches, save_at=None, folder=None, max_epochs=1):
    engine = engine_class(lambda e, batch: batch)
    metric.attach(engine, "metric")
    if save_at is not None:
        saver = Checkpoint({"engine": engine, "metric": metric}, DiskSaver(folder, require_empty=False), n_saved=None)
        engine.add_event_handler(Events.ITERATION_COMPLETED(once=save_at), saver)
    return engine.run(batches, max_epochs=max_epochs).metrics["metric"]


def _resume(engine_class, metric, folder, data):
    engine = engine_class(lambda e, batch: batch)
    metric.attach(engine, "metric")
    (path,) = [os.path.join(folder, f) for f in os.listdir(folder)]
    Checkpoint.load_objects({"engine": engine, "metric": metric}, torch.load(path, weights_only=False))
    return engine.run(data).metrics["metric"]


@pytest.mark.parametrize("name", ["ndcg", "ranking_metrics", "coverage", "novelty", "auc", "rmse"])
@pytest.mark.parametrize("save_at,max_epochs", [(3, 1), (8, 2), (6, 2)])
def test_engine_resumes_exactly_through_checkpoint(rng, name, save_at, max_epochs):
    batches = _batches(rng, 6)
    expected = run_metric(FACTORIES[name](), batches)  # every epoch sees the same batches
    with tempfile.TemporaryDirectory() as folder:
        uninterrupted = _evaluate(DeterministicEngine, FACTORIES[name](), batches, save_at, folder, max_epochs)
        resumed = _resume(DeterministicEngine, FACTORIES[name](), folder, batches)
    assert uninterrupted == expected
    assert resumed == expected


@pytest.mark.parametrize("save_at,max_epochs", [(3, 1), (8, 2)])
def test_running_value_over_the_run_resumes_through_checkpoint(rng, save_at, max_epochs):
    """usage=RunningBatchWise() resets when the run starts: a resumed run (iteration past 0)
    keeps the loaded batches, as it keeps an epoch's first batches mid-epoch."""
    batches = _batches(rng, 6)
    seen = batches * max_epochs
    expected = {i: run_metric(R.NDCG([1, 3]), seen[:i]) for i in range(save_at + 1, len(seen) + 1)}

    def running(load_from=None):
        engine, metric, values = DeterministicEngine(lambda e, batch: batch), R.NDCG([1, 3]), {}
        metric.attach(engine, "metric", usage=RunningBatchWise())
        engine.add_event_handler(
            Events.ITERATION_COMPLETED, lambda e: values.__setitem__(e.state.iteration, e.state.metrics["metric"])
        )
        if load_from is None:
            saver = Checkpoint({"engine": engine, "metric": metric}, DiskSaver(folder, require_empty=False))
            engine.add_event_handler(Events.ITERATION_COMPLETED(once=save_at), saver)
        else:
            Checkpoint.load_objects({"engine": engine, "metric": metric}, torch.load(load_from, weights_only=False))
        engine.run(batches, max_epochs=max_epochs)
        return values

    with tempfile.TemporaryDirectory() as folder:
        uninterrupted = running()
        resumed = running(os.path.join(folder, os.listdir(folder)[0]))
    assert {i: uninterrupted[i] for i in expected} == expected
    assert resumed == expected


def test_plain_engine_resumes_exactly_when_given_the_rest_of_the_data(rng):
    # Engine (unlike DeterministicEngine) restarts the data from its beginning on resume
    batches = _batches(rng, 6)
    expected = run_metric(R.NDCG([1, 3]), batches)
    with tempfile.TemporaryDirectory() as folder:
        _evaluate(Engine, R.NDCG([1, 3]), batches, 4, folder)
        assert _resume(Engine, R.NDCG([1, 3]), folder, batches[4:]) == expected


def test_loaded_metric_still_resets_at_a_fresh_epoch(rng):
    batches = _batches(rng, 4)
    source = R.NDCG([1, 3])
    source.update(batches[0])
    metric = R.NDCG([1, 3])
    metric.load_state_dict(source.state_dict())
    engine = Engine(lambda e, batch: batch)
    metric.attach(engine, "metric")
    assert engine.run(batches[1:]).metrics["metric"] == run_metric(R.NDCG([1, 3]), batches[1:])


# --- item_popularity is copied -----------------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda p: R.AveragePopularity([1, 3], p),
        lambda p: R.TailPercentage([1, 3], p, tail_ratio=0.3),
        lambda p: R.Novelty([1, 3], p),
    ],
)
@pytest.mark.parametrize("dtype", [torch.float64, torch.int64, torch.float32])
def test_item_popularity_is_copied(rng, make, dtype):
    batches = _batches(rng)
    popularity = (torch.arange(25) % 7 + 1).to(dtype)
    expected = run_metric(make(popularity.clone()), batches)
    metric = make(popularity)
    metric.update(batches[0])
    popularity.mul_(3).add_(1)  # the caller changes its tensor in place mid-stream
    for batch in batches[1:]:
        metric.update(batch)
    assert metric.compute() == expected
    assert torch.equal(metric.item_popularity, (torch.arange(25) % 7 + 1).to(torch.float64))


# --- Huge cut-offs -------------------------------------------------------------------------------
_HUGE_FACTORIES = {
    "coverage": lambda k: R.ItemCoverage(k),
    "gini": lambda k: R.GiniIndex(k),
    "entropy": lambda k: R.ShannonEntropy(k),
    "popularity": lambda k: R.AveragePopularity(k, _POPULARITY),
    "tail": lambda k: R.TailPercentage(k, _POPULARITY, tail_ratio=0.3),
    "novelty": lambda k: R.Novelty(k, _POPULARITY),
}


def _reference(name, lists):
    popularity = _POPULARITY.double().numpy()
    if name == "coverage":
        return ref.coverage(lists, 25)
    if name == "gini":
        return ref.gini(lists, 25)
    if name == "entropy":
        return ref.entropy(lists, 25)
    if name == "popularity":
        return ref.mean_item_value(lists, lambda i: popularity[i])
    if name == "tail":
        tail = ref.recbole_tail_items(popularity, 0.3)
        return ref.mean_item_value(lists, lambda i: float(i in tail))
    return ref.mean_item_value(lists, lambda i: -math.log2(popularity[i] / popularity.sum()))


@pytest.mark.parametrize("huge", [10**7, 10**9])
@pytest.mark.parametrize("name", sorted(_HUGE_FACTORIES))
def test_cutoffs_past_the_catalog_cost_nothing(rng, name, huge):
    scores, relevance = random_batch(rng, 5, 25)
    tracemalloc.start()
    try:
        metric = _HUGE_FACTORIES[name]([1, huge])
        metric.update((scores, relevance))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, f"{peak} bytes of Python objects"
    for table in metric.__dict__.get("_buckets_by_depth", {}).values():
        assert table.numel() <= 25
    expected = [_reference(name, ref.top_lists(scores.numpy(), k)) for k in (1, 25)]
    np.testing.assert_allclose(metric.compute(), expected, rtol=1e-12)


# --- Novelty of unseen items -----------------------------------------------------------------------
def _elliot_item_novelty(counts):
    """Elliot (EFD): -log2(count / total) over the seen items; an unseen item gets the largest
    of these, that of the least popular seen item. The total is over the training counts."""
    counts = np.asarray(counts, dtype=np.float64)
    total = counts.sum()
    seen = {i: -math.log2(c / total) for i, c in enumerate(counts) if c > 0}
    rarest = max(seen.values())
    return lambda i: seen.get(i, rarest)


def test_novelty_unseen_items_rarest_seen_matches_elliot_rule(rng):
    counts = (np.arange(25) * 7 % 5).astype(np.int64)  # five items never seen
    counts[3] = 9
    batches = [random_batch(rng, 7, 25) for _ in range(3)]
    metric = R.Novelty([1, 4, 30], torch.from_numpy(counts), unseen_items="rarest_seen")
    got = run_metric(metric, batches)
    scores = np.concatenate([b[0].numpy() for b in batches])
    novelty = _elliot_item_novelty(counts)
    expected = [ref.mean_item_value(ref.top_lists(scores, k), novelty) for k in (1, 4, 30)]
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_novelty_unseen_items_policy_checks():
    with_unseen = torch.tensor([3, 0, 1])
    with pytest.raises(ValueError, match='unseen_items="rarest_seen"'):
        R.Novelty(2, with_unseen, unseen_items="error")
    default = R.Novelty(2, with_unseen)  # the default follows Elliot: the rarest seen item's value
    assert default._item_values.tolist() == pytest.approx([-math.log2(3 / 4), -math.log2(1 / 4), -math.log2(1 / 4)])
    with pytest.raises(ValueError, match="at least one positive count"):
        R.Novelty(2, torch.zeros(3), unseen_items="rarest_seen")
    with pytest.raises(ValueError, match="non-negative"):
        R.Novelty(2, torch.tensor([3, -1, 1]), unseen_items="rarest_seen")
    with pytest.raises(ValueError, match="unseen_items must be one of"):
        R.Novelty(2, with_unseen, unseen_items="count_as_zero")
    with pytest.raises(TypeError, match="unseen_items"):
        R.Novelty(2, with_unseen, unseen_items=None)


@pytest.mark.parametrize("case", sorted(MISMATCHES))
def test_a_state_without_its_configuration_is_still_checked_by_shape(rng, case):
    """A state dict without the configuration (saved by an older release) is checked by the shapes
    of its states, where they differ."""
    make_source, make_target, _, *width = MISMATCHES[case]
    source, target = make_source(), make_target()
    source.update(_batches(rng, 1)[0])
    target.update(random_batch(rng, 6, *width or [25], graded=True))
    saved = {_KEY: source.state_dict()[_KEY]}
    before = _live_state(target)
    with pytest.raises(ValueError, match="has shape|the state has no"):
        target.load_state_dict(saved)
    _assert_same(before, _live_state(target))


def test_the_configuration_names_every_difference():
    source = R.RankingMetrics([5, 10], metrics=["ndcg"], gain_function="linear_rank", ties="average")
    with pytest.raises(ValueError) as error:
        R.RankingMetrics([5, 10], metrics=["ndcg"]).load_state_dict(source.state_dict())
    assert "gain_function='linear_rank' (this metric: 'exp_rank')" in str(error.value)
    assert "ties='average' (this metric: 'stable')" in str(error.value)
    # the arguments that do not change the state's meaning may differ
    R.NDCG([5]).load_state_dict(R.NDCG([5], device="cpu", output_transform=lambda x: x, per_user=True).state_dict())
