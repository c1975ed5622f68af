"""GAUC from DotScores with the held-out items as ItemIds: equal to the dense GAUC fed the
matrix ``user_vectors @ item_vectors.T + item_bias`` (float64, integer-valued vectors: exact
products, many exact ties), and to scikit-learn's ``roc_auc_score`` per user."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

import ignite_recsys as R
from test_meta_device import NoCopiesFromHost


def _case(seed: int, users: int = 9, items: int = 23, width: int = 6, dim: int = 2, bias: bool = True):
    gen = torch.Generator().manual_seed(seed)
    user_vectors = torch.randint(-2, 3, (users, dim), generator=gen).to(torch.float64)
    item_vectors = torch.randint(-2, 3, (items, dim), generator=gen).to(torch.float64)
    item_bias = torch.randint(-1, 2, (items,), generator=gen).to(torch.float64) if bias else None
    ids = torch.full((users, width), -1, dtype=torch.int64)
    grades = torch.zeros(users, width)
    for row in range(users):
        count = int(torch.randint(0, width + 1, (1,), generator=gen))
        if row == 0:
            count = items if items <= width else width  # possibly every item: no negative
        ids[row, :count] = torch.randperm(items, generator=gen)[:count]
        grades[row] = torch.randint(0, 3, (width,), generator=gen).to(torch.float32)
    shuffle = torch.rand(users, width, generator=gen).argsort(1)  # padding anywhere in the row
    ids, grades = ids.gather(1, shuffle), grades.gather(1, shuffle)
    return user_vectors, item_vectors, item_bias, ids, grades


def _dense(user_vectors, item_vectors, item_bias, ids, grades):
    scores = user_vectors @ item_vectors.T + (0 if item_bias is None else item_bias)
    labels = torch.zeros(scores.shape)
    rows = torch.arange(ids.shape[0]).unsqueeze(1).expand_as(ids)
    listed = ids >= 0
    labels[rows[listed], ids[listed]] = grades[listed]
    return scores, labels


@pytest.mark.parametrize("weighting", ["positives", "uniform"])
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("tile", [1, 3, 7, 1000])
def test_equals_dense_gauc_and_sklearn(seed, tile, weighting):
    user_vectors, item_vectors, item_bias, ids, grades = _case(seed, bias=seed % 2 == 0)
    budget = tile * user_vectors.shape[0] * 8
    vectors = R.DotScores(user_vectors, item_vectors, item_bias, memory_budget=budget)
    assert vectors.tile_items() == min(tile, item_vectors.shape[0])
    metric = R.GAUC(weighting=weighting)
    metric.update((vectors, R.ItemIds(ids, grades)))
    scores, labels = _dense(user_vectors, item_vectors, item_bias, ids, grades)
    dense = R.GAUC(weighting=weighting)
    dense.update((scores, labels))
    assert metric.compute() == pytest.approx(dense.compute(), abs=1e-12)
    # scikit-learn per user: positives grade >= 1, users with one class left out
    values, weights = [], []
    for row in range(scores.shape[0]):
        truth = (labels[row] >= 1).numpy()
        if truth.all() or not truth.any():
            continue
        values.append(roc_auc_score(truth, scores[row].numpy()))
        weights.append(truth.sum() if weighting == "positives" else 1.0)
    assert metric.compute() == pytest.approx(float(np.average(values, weights=weights)), abs=1e-12)


def test_ties_and_every_item_positive_or_none():
    user_vectors = torch.tensor([[1.0], [1.0], [0.0]], dtype=torch.float64)
    item_vectors = torch.tensor([[1.0], [1.0], [2.0], [0.0]], dtype=torch.float64)
    ids = torch.tensor([[0, -1, -1, -1], [0, 1, 2, 3], [-1, -1, -1, -1]])
    metric = R.GAUC(weighting="uniform")
    metric.update((R.DotScores(user_vectors, item_vectors, memory_budget=8), R.ItemIds(ids)))
    # user 0: positive 1 ties one negative (1/2), beats 0, loses to 2: (0.5 + 1) / 3; others undefined
    assert metric.compute() == pytest.approx(0.5, abs=1e-15)


def test_float32_vectors_equal_dense_from_the_same_tiles():
    gen = torch.Generator().manual_seed(3)
    user_vectors, item_vectors = torch.randn(5, 4, generator=gen), torch.randn(40, 4, generator=gen)
    ids = torch.randint(0, 40, (5, 3), generator=gen)
    ids[:, 1:] = torch.where(ids[:, 1:] == ids[:, :1], -1, ids[:, 1:])
    ids[:, 2] = torch.where(ids[:, 2] == ids[:, 1], -1, ids[:, 2])
    vectors = R.DotScores(user_vectors, item_vectors, memory_budget=5 * 4 * 6)
    tiles = [user_vectors @ item_vectors[a : a + 6].T for a in range(0, 40, 6)]
    metric, dense = R.GAUC(), R.GAUC()
    metric.update((vectors, R.ItemIds(ids)))
    dense.update(_dense_from(torch.cat(tiles, 1), ids))
    assert metric.compute() == pytest.approx(dense.compute(), abs=1e-12)


def _dense_from(scores, ids):
    labels = torch.zeros(scores.shape)
    for row in range(ids.shape[0]):
        for item in ids[row].tolist():
            if item >= 0:
                labels[row, item] = 1
    return scores, labels


def test_streams_over_updates():
    metric, dense = R.GAUC(), R.GAUC()
    for seed in range(3):
        user_vectors, item_vectors, item_bias, ids, grades = _case(seed + 10)
        metric.update((R.DotScores(user_vectors, item_vectors, item_bias, memory_budget=200), R.ItemIds(ids, grades)))
        dense.update(_dense(user_vectors, item_vectors, item_bias, ids, grades))
    assert metric.compute() == pytest.approx(dense.compute(), abs=1e-12)


@pytest.mark.parametrize(
    "target, error, match",
    [
        (lambda labels: labels, TypeError, "takes y as ItemIds"),
        (lambda labels: labels.to_sparse(), TypeError, "takes y as ItemIds"),
        (lambda labels: labels.to_sparse_csr(), TypeError, "takes y as ItemIds"),
        (lambda labels: R.ItemIds(torch.tensor([[0]])), ValueError, "one row per user"),
    ],
)
def test_refusals_leave_the_state_untouched(target, error, match):
    user_vectors, item_vectors, item_bias, ids, grades = _case(1)
    metric = R.GAUC()
    metric.update((R.DotScores(user_vectors, item_vectors, item_bias), R.ItemIds(ids, grades)))
    before = metric.compute()
    _, labels = _dense(user_vectors, item_vectors, item_bias, ids, grades)
    with pytest.raises(error, match=match):
        metric.update((R.DotScores(user_vectors, item_vectors, item_bias), target(labels)))
    assert metric.compute() == before


@pytest.mark.parametrize(
    "ids, match",
    [
        (torch.tensor([[0, 23]]), "outside"),
        (torch.tensor([[0, -2]]), "outside"),
        (torch.tensor([[4, 4]]), "twice"),
    ],
)
def test_bad_ids_leave_the_state_untouched(ids, match):
    _bad_ids(ids, None, match)


def test_nan_grade_of_a_listed_item_refused_padding_ignored():
    _bad_ids(torch.tensor([[0, 1]]), torch.tensor([[1.0, float("nan")]]), "NaN")
    user_vectors, item_vectors, _, _, _ = _case(2)
    metric = R.GAUC()
    metric.update(
        (
            R.DotScores(user_vectors[:1], item_vectors),
            R.ItemIds(torch.tensor([[0, -1]]), torch.tensor([[1.0, float("nan")]])),
        )
    )
    assert metric.compute() >= 0


def _bad_ids(ids, grades, match):
    user_vectors, item_vectors, item_bias, good, good_grades = _case(2)
    metric = R.GAUC()
    metric.update((R.DotScores(user_vectors, item_vectors, item_bias), R.ItemIds(good, good_grades)))
    before = metric.compute()
    with pytest.raises(ValueError, match=match):
        metric.update((R.DotScores(user_vectors[:1], item_vectors, item_bias), R.ItemIds(ids, grades)))
    assert metric.compute() == before


def test_split_item_table_refused():
    vectors = R.DotScores(torch.ones(2, 3), torch.ones(4, 3), item_offset=0, num_items=8)
    with pytest.raises(ValueError, match="split item table"):
        R.GAUC().update((vectors, R.ItemIds(torch.tensor([[0], [1]]))))


def test_dense_scores_with_item_ids_still_refused():
    with pytest.raises(TypeError, match="y must be a torch.Tensor"):
        R.GAUC().update((torch.ones(1, 3), R.ItemIds(torch.tensor([[0]]))))


def test_meta_device_no_host_reads():
    meta = torch.device("meta")
    vectors = R.DotScores(
        torch.empty(4, 3, device=meta), torch.empty(10, 3, device=meta), torch.empty(10, device=meta), memory_budget=64
    )
    ids = R.ItemIds(torch.empty(4, 2, dtype=torch.int64, device=meta))
    metric = R.GAUC(device=meta)
    with NoCopiesFromHost():
        metric.update((vectors, ids))
    assert metric._sum.device == meta and metric._sum.dtype == torch.float64
