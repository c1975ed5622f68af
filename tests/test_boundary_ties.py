"""The boundary-tie diagnostic: users whose k-th and (k+1)-th candidates tie in score, counted in
the state without a host sync, reported by a warning under ties="stable"."""

import warnings

import numpy as np
import pytest
import torch

import ignite_recsys as R
from conftest import random_batch


def _sampled_evaluation(users=5, negatives=99):
    """1 positive (column 0) + sampled negatives, a model that scores every item alike."""
    scores = torch.zeros(users, 1 + negatives)
    labels = torch.zeros(users, 1 + negatives)
    labels[:, 0] = 1
    return scores, labels


def test_sampled_evaluation_trap_is_reported():
    scores, labels = _sampled_evaluation()
    stable = R.HitRate([10])
    stable.update((scores, labels))
    with pytest.warns(R.BoundaryTieWarning, match=r"k=10: 100\.0%.*ties='average'"):
        assert stable.compute() == [1.0]  # the positive wins every tie by its column
    average = R.HitRate([10], ties="average")
    average.update((scores, labels))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert average.compute() == pytest.approx([10 / 100])  # the honest expected value


def _reference_share(scores, labels, top_k, excluded=None, ignore_zero_hits=True):
    shares, counted = np.zeros(len(top_k)), 0
    for u, (row, y) in enumerate(zip(scores, labels)):
        if ignore_zero_hits and not (y >= 1).any():
            continue
        counted += 1
        keep = [i for i in range(len(row)) if excluded is None or not excluded[u, i]]
        ordered = sorted(keep, key=lambda i: (-row[i], i))
        for j, k in enumerate(top_k):
            if k < len(ordered) and row[ordered[k - 1]] == row[ordered[k]]:
                shares[j] += 1
    return (shares / max(counted, 1)).tolist()


@pytest.mark.parametrize("items", [6, 40, 3000])
def test_share_equals_reference(rng, items):
    scores, labels = random_batch(rng, 30, items, ties=True, zero_users=4)
    top_k = [1, 2, 5, 10]
    for metric in (R.NDCG(top_k), R.RankingMetrics(top_k, metrics=["recall", "mrr"])):
        metric.update((scores, labels))
        with pytest.warns(R.BoundaryTieWarning):
            metric.compute()
        expected = _reference_share(scores.numpy(), labels.numpy(), top_k)
        np.testing.assert_allclose(metric.boundary_tie_share(), expected, atol=1e-12)


def test_share_counts_only_candidates(rng):
    scores, labels = random_batch(rng, 20, 12, ties=True)
    excluded = torch.from_numpy(rng.random((20, 12)) < 0.3)
    metric = R.Recall([1, 3, 11], ignore_zero_hits=False)
    metric.update((scores, labels, excluded))
    expected = _reference_share(scores.numpy(), labels.numpy(), [1, 3, 11], excluded.numpy(), False)
    np.testing.assert_allclose(metric.boundary_tie_share(), expected, atol=1e-12)


def test_no_warning_without_ties_or_scores(rng):
    scores, labels = random_batch(rng, 10, 50)  # distinct scores
    ids = torch.sort(scores, dim=1, descending=True).indices[:, :5]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for output in ((scores, labels), (R.RankedItems(ids), labels)):
            metric = R.NDCG([1, 5])
            metric.update(output)
            metric.compute()
            assert metric.boundary_tie_share() == [0.0, 0.0]


def test_cut_off_past_the_catalog_splits_nothing():
    metric = R.MRR([2, 5])
    metric.update((torch.zeros(2, 3), torch.tensor([[1.0, 0, 0], [0, 0, 1]])))
    with pytest.warns(R.BoundaryTieWarning, match="k=2"):
        metric.compute()
    assert metric.boundary_tie_share() == [1.0, 0.0]


def test_state_survives_checkpoint_and_resets(rng):
    scores, labels = random_batch(rng, 8, 20, ties=True)
    metric = R.NDCG([3])
    metric.update((scores, labels))
    restored = R.NDCG([3])
    restored.load_state_dict(metric.state_dict())
    assert restored.boundary_tie_share() == metric.boundary_tie_share()
    metric.reset()
    assert metric.boundary_tie_share() == [0.0]
