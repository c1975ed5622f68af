"""Small CPU batches held and ranked together (``ignite_recsys._core.gathering``).

What must hold: the state, every result, the per-user values and the confidence intervals are
those of ranking each batch on its own, to the last bit (compared with the same metric with
holding switched off) and equal to the numpy reference; a bad batch still raises in its own
``update`` with the state as it was; what is held is bounded and is a copy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ignite_recsys as R
from ignite_recsys._core import gathering
from references import metric_means

TOP_K = [1, 3, 10]
SIX = ["ndcg", "hit_rate", "recall", "precision", "map", "mrr"]


def _stream(seed, num_items, sizes, graded=False, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for size in sizes:
        scores = torch.randint(0, 6, (size, num_items), generator=generator).to(torch.float32)  # many ties
        relevant = torch.rand(size, num_items, generator=generator) < 0.15
        grades = torch.randint(1, 4, (size, num_items), generator=generator) if graded else torch.ones(size, num_items)
        labels = (relevant * grades).to(dtype)
        batches.append((scores, labels))
    return batches


CONFIGURATIONS = {
    "six metrics": lambda: R.RankingMetrics(TOP_K, metrics=SIX, per_user=True),
    "ndcg, graded, linear gains": lambda: R.NDCG(TOP_K, gain_function="linear_rank", per_user=True),
    "average ties, zero users count": lambda: R.NDCG(TOP_K, ties="average", ignore_zero_hits=False, per_user=True),
    "recall, threshold None": lambda: R.Recall(TOP_K, relevance_threshold=None),
}


def _snapshot(metric):
    state = metric.state_dict()["__metric_state_per_rank"][0]
    return {name: value.clone() for name, value in state.items()}


def _run(make, batches, read_at=()):
    metric = make()
    for index, batch in enumerate(batches):
        metric.update(batch)
        if index in read_at:  # a read of the state ranks what is held
            metric.state_dict()
    return metric


@pytest.mark.parametrize("name", sorted(CONFIGURATIONS))
@pytest.mark.parametrize("num_items", [37, 1682])
def test_held_batches_give_the_state_of_separate_updates_to_the_last_bit(monkeypatch, name, num_items):
    sizes = [1, 2, 2, 1, 5, 17, 2, 2, 40, 1, 3, 3, 3, 64, 2, 1]
    batches = _stream(7, num_items, sizes, graded="graded" in name)
    make = CONFIGURATIONS[name]
    held = _run(make, batches, read_at=(6, 11))
    with monkeypatch.context() as patch:
        patch.setattr(gathering, "GATHER_BELOW", 0)  # every batch ranked in its own update
        alone = _run(make, batches)
        assert not alone._held
    for state_name, value in _snapshot(alone).items():
        assert torch.equal(_snapshot(held)[state_name], value), state_name
    assert held.compute() == alone.compute()
    if held.keeps_per_user:
        rows, alone_rows = held._per_user_table()[0], alone._per_user_table()[0]
        assert torch.equal(rows.isnan(), alone_rows.isnan())
        assert torch.equal(rows.nan_to_num(), alone_rows.nan_to_num())
        assert held.confidence_interval() == alone.confidence_interval()


@pytest.mark.parametrize("ignore_zero_hits", [True, False])
def test_held_stream_equals_the_numpy_reference(ignore_zero_hits):
    batches = _stream(3, 61, [1, 2] * 20 + [3], graded=True)
    metric = R.RankingMetrics(TOP_K, metrics=SIX, ignore_zero_hits=ignore_zero_hits, gain_function="linear_rank")
    for batch in batches:
        metric.update(batch)
    assert metric._held  # the stream is held, not ranked batch by batch
    result = metric.compute()
    scores = torch.cat([s for s, _ in batches]).numpy()
    labels = torch.cat([y for _, y in batches]).numpy()
    expected = metric_means(scores, labels, TOP_K, ignore_zero_hits=ignore_zero_hits, gain_kind="linear_rank")
    for name in SIX:
        got = [result[f"{name}@{k}"] for k in TOP_K]
        np.testing.assert_allclose(got, expected[name], rtol=1e-12, atol=1e-15)


def test_a_bad_batch_raises_in_its_own_update_and_the_held_ones_stay_counted():
    batches = _stream(5, 50, [2, 1, 2])
    earlier = R.NDCG(TOP_K)
    for batch in batches[:2]:
        earlier.update(batch)
    before = _snapshot(earlier)
    metric = R.NDCG(TOP_K)
    for batch in batches[:2]:
        metric.update(batch)
    assert metric._held
    bad_scores = batches[2][0].clone()
    bad_scores[1, 4] = float("nan")
    with pytest.raises(ValueError, match="NaN scores"):
        metric.update((bad_scores, batches[2][1]))
    bad_labels = batches[2][1].clone()
    bad_labels[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN relevance"):
        metric.update((batches[2][0], bad_labels))
    for state_name, value in _snapshot(metric).items():
        assert torch.equal(value, before[state_name]), state_name
    metric.update(batches[2])
    scores = torch.cat([s for s, _ in batches]).numpy()
    labels = torch.cat([y for _, y in batches]).numpy()
    np.testing.assert_allclose(metric.compute(), metric_means(scores, labels, TOP_K)["ndcg"], rtol=1e-12)


def test_labels_whose_gains_can_overflow_are_checked_in_their_own_update():
    metric = R.NDCG([2])
    metric.update((torch.rand(2, 8), torch.ones(2, 8)))
    assert metric._held
    with pytest.raises(ValueError, match="finite"):
        metric.update((torch.rand(1, 8), torch.full((1, 8), 2000.0)))  # 2**2000 - 1 overflows float64
    assert metric.compute() == [1.0]


def test_held_batches_are_copies():
    scores, labels = torch.tensor([[0.9, 0.1, 0.5]]), torch.tensor([[1.0, 0.0, 0.0]])
    metric = R.HitRate([1])
    metric.update((scores, labels))
    scores[0, 0] = -1.0  # the caller reuses its buffer
    labels.zero_()
    assert metric.compute() == [1.0]


def test_what_is_held_stays_bounded():
    metric = R.RankingMetrics(TOP_K, metrics=SIX)
    most = 0
    for scores, labels in _stream(1, 1000, [1] * 600):
        metric.update((scores, labels))
        most = max(most, metric._held.entries)
    assert 0 < most < gathering.GATHER_UP_TO + gathering.GATHER_BELOW


def test_tiny_batches_are_held_in_a_bounded_number():
    """Batches of one user over 2 items: their scores stay far below the held-scores limit, but
    each held batch costs about a kilobyte of its own (5,000 held took megabytes; 262,000 1-item
    batches 280 MiB). At most MAX_HELD_BATCHES are held, and the stream's value is the numpy
    reference's."""
    generator = torch.Generator().manual_seed(4)
    scores = torch.rand(5000, 2, generator=generator)
    labels = (torch.rand(5000, 2, generator=generator) < 0.5).float()
    metric = R.HitRate([1], relevance_threshold=1.0, ignore_zero_hits=False)
    most = 0
    for row in range(5000):
        metric.update((scores[row : row + 1], labels[row : row + 1]))
        most = max(most, len(metric._held))
    assert most == gathering.MAX_HELD_BATCHES - 1  # ranked when the limit is reached
    best = scores.numpy().argmax(1)  # no ties among random floats
    assert metric.compute() == [pytest.approx(labels.numpy()[np.arange(5000), best].mean(), abs=1e-15)]


@pytest.mark.parametrize(
    "make",
    [
        lambda: R.ERR([2]),  # checks of its own (grades above max_grade)
        lambda: R.NDCG([2], gain_function=lambda y: y * 2),  # a custom gain function
    ],
)
def test_metrics_whose_checks_need_the_ranking_hold_nothing(make):
    metric = make()
    metric.update((torch.rand(2, 8), (torch.rand(2, 8) < 0.5).float()))
    assert not metric._held


def test_loading_a_state_drops_what_was_held():
    batches = _stream(9, 20, [2, 2, 2])
    saved = R.NDCG(TOP_K)
    saved.update(batches[0])
    state = saved.state_dict()
    metric = R.NDCG(TOP_K)
    metric.update(batches[1])
    metric.load_state_dict(state)
    metric.update(batches[2])
    again = R.NDCG(TOP_K)
    for batch in (batches[0], batches[2]):
        again.update(batch)
    assert metric.compute() == again.compute()
    assert not math.isnan(metric.compute()[0])
