"""Input forms beyond what the matrix checks (tests/test_matrix.py runs every metric with every
target, prediction and exclusion form against the references through tests/harness.py): ranked
ids against scores with the other items excluded, bad forms, wrapper construction, the
accelerator code path forced on CPU, and the helpers of the exclusion path.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import harness as H
import ignite_recsys as R
from conftest import run_metric

TOP_K = list(H.KS)


def test_ranked_ids_equal_scoring_the_list_with_every_other_item_excluded():
    data = H.DATA
    ids = data.ranked_ids
    scores = np.random.default_rng(3).standard_normal(data.scores.shape)
    others = np.ones(data.scores.shape, dtype=bool)
    for u, row in enumerate(ids):
        listed = row[row >= 0]
        scores[u, listed] = 100.0 - np.arange(len(listed))  # the list's order
        others[u, listed] = False
    labels = torch.from_numpy(data.labels)
    as_list = run_metric(R.RankingMetrics(TOP_K), [(R.RankedItems(torch.from_numpy(ids)), labels)])
    as_scores = run_metric(R.RankingMetrics(TOP_K), [(torch.from_numpy(scores), labels, torch.from_numpy(others))])
    assert as_list == pytest.approx(as_scores, abs=1e-12)


def test_catalog_metrics_need_num_items_with_ranked_ids():
    ids = R.RankedItems(torch.tensor([[0, 2], [1, -1]]))
    with pytest.raises(ValueError, match="num_items"):
        R.ItemCoverage(2).update((ids, R.ItemIds(torch.tensor([[0], [1]]))))


@pytest.mark.parametrize("make", [R.GAUC, R.AUC, R.MAE, R.RMSE, R.LogLoss])
def test_score_based_metrics_refuse_ranked_ids(make):
    with pytest.raises(TypeError, match="RankedItems"):
        make().update((R.RankedItems(torch.tensor([[0, 1]])), torch.ones(1, 2)))


def _good():
    return torch.tensor([[0.3, 0.1, 0.9, 0.2]]), torch.tensor([[0.0, 1.0, 1.0, 0.0]])


BAD = {
    "duplicate ranked id": (
        (R.RankedItems(torch.tensor([[2, 1, 2, -1]])), torch.tensor([[0.0, 1, 1, 0]])),
        ValueError,
        "twice",
    ),
    "ranked id out of range": (
        (R.RankedItems(torch.tensor([[4, 1]])), torch.tensor([[0.0, 1, 1, 0]])),
        ValueError,
        "outside",
    ),
    "negative ranked id": (
        (R.RankedItems(torch.tensor([[-2, 1]])), torch.tensor([[0.0, 1, 1, 0]])),
        ValueError,
        "outside",
    ),
    "target id out of range": (
        (_good()[0], R.ItemIds(torch.tensor([[7, -1]]))),
        ValueError,
        "y holds item ids outside",
    ),
    "duplicate target id": ((_good()[0], R.ItemIds(torch.tensor([[1, 1]]))), ValueError, "twice"),
    "exclude id out of range": (
        (*_good(), R.ItemIds(torch.tensor([[4]]))),
        ValueError,
        "exclude holds item ids outside",
    ),
    # ids of 2**32 and more do not fit the item bits of the tables' keys: refused, not a crash
    "exclude id of 2**40": (
        (*_good(), R.ItemIds(torch.tensor([[1 << 40]]))),
        ValueError,
        "exclude holds item ids outside",
    ),
    "target id of 2**32": (
        (_good()[0], R.ItemIds(torch.tensor([[1 << 32, 1]]))),
        ValueError,
        "y holds item ids outside",
    ),
    "ranked id of 2**40": (
        (R.RankedItems(torch.tensor([[1 << 40, 1]])), torch.tensor([[0.0, 1, 1, 0]])),
        ValueError,
        "outside",
    ),
    "exclude shape": ((*_good(), torch.zeros(1, 5, dtype=torch.bool)), ValueError, "exclude must have 4 columns"),
    "exclude users": ((*_good(), torch.zeros(2, 4, dtype=torch.bool)), ValueError, "exclude must hold 1 users"),
    "sparse target shape": ((_good()[0], torch.zeros(1, 3).to_sparse()), ValueError, "y must have 4 columns"),
    "float exclude": ((*_good(), torch.zeros(1, 4)), TypeError, "exclude must be a bool"),
    "exclude not a tensor": ((*_good(), [[0, 1]]), TypeError, "exclude must be a torch.Tensor"),
}


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize(
    "make",
    [
        lambda: R.NDCG([1, 3]),
        lambda: R.RankingMetrics([1, 3], metrics=["recall", "r_precision"]),
        lambda: R.ItemCoverage([1, 3], num_items=4),
    ],
)
def test_bad_forms_raise_and_leave_state(case, make):
    metric = make()
    metric.update(_good())
    before = {k: v.clone() for k, v in next(iter(metric.state_dict().values()))[0].items()}
    output, error, message = BAD[case]
    with pytest.raises(error, match=message):
        metric.update(output)
    after = next(iter(metric.state_dict().values()))[0]
    for key in before:
        assert torch.equal(before[key], after[key]), key


def test_wrapper_construction_errors():
    with pytest.raises(TypeError, match="integer item ids"):
        R.RankedItems(torch.tensor([[0.0, 1.0]]))
    with pytest.raises(ValueError, match="2-D"):
        R.RankedItems(torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="shape of ids"):
        R.ItemIds(torch.tensor([[0, 1]]), grades=torch.ones(1, 3))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        R.ItemIds([[0, 1]])


ACCELERATOR_FORMS = [  # (target, prediction, exclusion, ties)
    ("csr", "scores", "coo", "average"),
    ("dense", "scores", "dense", "stable"),
    ("coo", "scores", "none", "average"),
    ("ids", "ranked", "ids", "stable"),
    ("dense", "ranked", "csr", "average"),
]


@pytest.mark.parametrize("forms", ACCELERATOR_FORMS, ids="-".join)
def test_accelerator_code_path_gives_the_same_values(monkeypatch, forms):
    """The variants taken on accelerators (one pass over the batch, plain reductions), forced on
    CPU, give the values of the references for every metric."""
    from ignite_recsys._core import tuning

    monkeypatch.setattr(tuning, "cpu_tuned", lambda device: False)
    target, prediction, exclude, ties = forms
    for variant in H.VARIANTS:
        H.check_metric(H.Case(variant, target=target, prediction=prediction, exclude=exclude, ties=ties))


@pytest.mark.parametrize("width", [1, 7, 8, 64, 1001, 4096])
def test_count_true_equals_sum(width):
    from ignite_recsys._core.relevance import count_true

    rng = np.random.default_rng(width)
    for share in (0.0, 0.3, 1.0):
        mask = torch.from_numpy(rng.random((5, width)) < share)
        assert torch.equal(count_true(mask), mask.sum(1))
        assert torch.equal(count_true(mask[:, ::1].t().contiguous().t()), mask.sum(1))  # non-contiguous rows


def test_long_rows_with_an_empty_exclusion_equal_the_dense_path():
    """Rows long enough for the ideal ranking's label groups of 32 consecutive labels (taken in
    the relevance pass on the exclusion path too): an exclusion of nothing changes nothing."""
    rng = np.random.default_rng(4)
    scores = torch.from_numpy(rng.standard_normal((6, 30_011)).astype(np.float32))
    labels = torch.from_numpy(
        np.where(rng.random((6, 30_011)) < 0.01, rng.integers(1, 5, (6, 30_011)), 0).astype(np.float32)
    )
    nothing = torch.zeros(6, 30_011, dtype=torch.bool)
    for make in (lambda: R.NDCG([1, 10, 100]), lambda: R.NDCG([5, 50], gain_function="linear_rank")):
        dense = run_metric(make(), [(scores, labels)])
        excluded = run_metric(make(), [(scores, labels, nothing)])
        np.testing.assert_allclose(excluded, dense, rtol=0, atol=1e-12)


def test_ndcg_of_a_ranked_list_narrower_than_k_divides_by_the_ideal_at_k():
    """Positions past a ranked list are empty but still positions: IDCG@2 counts two relevant
    items although the list holds one, whether or not the list is padded with -1."""
    labels = torch.tensor([[1.0, 1.0, 0.0]])
    expected = [1.0, 1.0 / (1.0 + 1.0 / math.log2(3.0))]
    for ids in ([[0]], [[0, -1]]):
        metric = R.NDCG([1, 2], gain_function="binary")
        metric.update((R.RankedItems(torch.tensor(ids)), labels))
        assert metric.compute() == pytest.approx(expected, abs=1e-12), ids
