"""Mistakes a new user makes, each met by a clear error that names the argument and the way out
(the state untouched), or by a warning where the input could also be right."""

from __future__ import annotations

import warnings

import pytest
import torch
from ignite.exceptions import NotComputableError

import ignite_recsys as R

SCORES = torch.tensor([[0.1, 0.9, 0.3, 0.7, 0.2], [0.8, 0.1, 0.4, 0.6, 0.5]])
LABELS = torch.tensor([[0, 1, 0, 1, 0], [1, 0, 0, 0, 1]])


def _state(metric):
    return {key: value.clone() for key, value in metric.state_dict()["__metric_state_per_rank"][0].items()}


def _same(before, metric):
    after = _state(metric)
    assert before.keys() == after.keys()
    for key in before:
        assert torch.equal(before[key], after[key]), key


def test_ranked_ids_passed_as_scores_warn_and_point_to_ranked_items():
    ranked = torch.argsort(SCORES, 1, descending=True)
    metric = R.NDCG([2])
    with pytest.warns(R.InputWarning, match=r"RankedItems\(y_pred\)") as caught:
        metric.update((ranked, LABELS))
    assert caught[0].filename == __file__  # points at the user's line, not inside the library
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        metric.update((ranked, LABELS))  # once per reset: the first update is looked at
        R.NDCG([2]).update((torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]]), LABELS))  # integer scores: fine


def test_ranked_ids_in_other_shapes_get_a_hint_in_the_error():
    top3 = torch.argsort(SCORES, 1, descending=True)[:, :3]
    metric = R.NDCG([2])
    metric.update((SCORES, LABELS))
    before = _state(metric)
    with pytest.raises(ValueError, match=r"same shape.*pass RankedItems\(y_pred\)"):
        metric.update((top3, LABELS))
    with pytest.raises(TypeError, match=r"floating-point scores.*pass RankedItems\(y_pred\)"):
        metric.update((top3, R.ItemIds(torch.tensor([[1, 3], [0, 4]]))))
    _same(before, metric)
    # the way out gives the same values as the scores
    fixed = R.NDCG([2])
    fixed.update((R.RankedItems(torch.argsort(SCORES, 1, descending=True)), LABELS))
    assert fixed.compute() == pytest.approx(R.functional.ndcg(SCORES, LABELS, [2]).nanmean(0).tolist())


def test_ids_past_the_catalog_are_refused_with_num_items():
    targets = R.ItemIds(torch.tensor([[1, 3], [0, -1]]))
    metric = R.Recall([5], num_items=10)  # the ranking metrics take the catalog size
    metric.update((R.RankedItems(torch.tensor([[3, 1, 2], [0, 9, -1]])), targets))
    before = _state(metric)
    with pytest.raises(ValueError, match=r"y_pred holds item ids outside \[0, 10\)"):
        metric.update((R.RankedItems(torch.tensor([[99, 1, 2], [0, 1, -1]])), targets))
    with pytest.raises(ValueError, match=r"y holds item ids outside \[0, 10\)"):
        metric.update((R.RankedItems(torch.tensor([[3, 1, 2], [0, 1, -1]])), R.ItemIds(torch.tensor([[12, 3]] * 2))))
    with pytest.raises(ValueError, match=r"num_items=10"):
        metric.update((torch.rand(2, 11), torch.zeros(2, 11)))
    _same(before, metric)
    with pytest.raises(ValueError, match="num_items"):
        R.RankingMetrics([5], num_items=0)


def test_labels_below_the_threshold_name_relevance_threshold():
    metric = R.NDCG([2])
    metric.update((SCORES, LABELS * 0.5))  # labels in (0, 1), default threshold 1.0: none relevant
    with pytest.raises(NotComputableError, match=r"relevance_threshold=None"):
        metric.compute()
    assert R.NDCG([2], relevance_threshold=None)  # the way out
    fixed = R.NDCG([2], relevance_threshold=None)
    fixed.update((SCORES, LABELS * 0.5))
    assert fixed.compute()[0] > 0


def test_swapped_scores_and_labels_warn():
    grades = torch.tensor([[0.0, 0.5, 0.0, 1.5, 0.0], [1.0, 0.0, 0.0, 0.0, 0.5]])
    with pytest.warns(R.InputWarning, match="swapped"):
        R.NDCG([2], relevance_threshold=0.5).update((grades.round(), SCORES))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        R.NDCG([2], relevance_threshold=0.5).update((SCORES, grades))  # the right order: no warning


def test_swapped_scores_and_labels_warn_on_long_rows():
    """Rows longer than the part read first: integral scores with fractional labels warn, and a
    fractional score or label only far into the row counts as well."""
    width = 5_000
    scores = torch.arange(2 * width, dtype=torch.float32).reshape(2, width)
    labels = torch.zeros(2, width)
    labels[0, width - 1] = 0.5  # the only fractional label: the last one
    with pytest.warns(R.InputWarning, match="swapped"):
        R.NDCG([2], relevance_threshold=0.5).update((scores, labels))
    fractional = scores.clone()
    fractional[0, width - 2] += 0.25  # the only fractional score of the first row
    integral_labels = labels.round()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        R.NDCG([2], relevance_threshold=0.5).update((fractional, labels))
        R.NDCG([2], relevance_threshold=0.5).update((scores, integral_labels))


def test_num_threads_applies_to_the_update_only():
    """num_threads=1 runs the update on one torch thread and gives the caller's setting back, also
    when the update raises; the values are those of the default."""
    before = torch.get_num_threads()
    seen = []

    class Spy(R.NDCG):
        def _user_columns(self, batch):  # the ranking step, whether the batch was held or not
            seen.append(torch.get_num_threads())
            return super()._user_columns(batch)

    one = Spy([2], num_threads=1)
    one.update((SCORES, LABELS))
    one.state_dict()  # a small batch is held until the state is read
    assert seen == [1] and torch.get_num_threads() == before
    with pytest.raises(ValueError):
        one.update((SCORES * float("nan"), LABELS))
    assert torch.get_num_threads() == before
    default = R.NDCG([2])
    default.update((SCORES, LABELS))
    assert one.compute() == default.compute()
