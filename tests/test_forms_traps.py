"""Input forms and reports under traps: a -1 inside a ranked list, grades of padded slots, NaN or
infinite grades of listed items, models keyed by numbers. Each gives the right value (numpy
reference) or a clear error that leaves the metric's state as it was."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ignite_recsys as R

from references import user_values

SCORES = torch.tensor([[0.3, 0.2, 0.1, 0.0]])


def _state(metric):
    return {key: value.clone() for key, value in metric.state_dict()["__metric_state_per_rank"][0].items()}


def _unchanged(before, metric):
    after = _state(metric)
    return all(torch.equal(before[key], after[key]) for key in before)


# --- -1 inside a ranked list --------------------------------------------------------------------
@pytest.mark.parametrize("ids", [[[5, -1, 7]], [[-1, 5, 7]], [[2, 3, 4], [5, -1, 7]]])
def test_a_gap_in_a_ranked_list_is_refused(ids):
    metric = R.MRR(top_k=3)
    metric.update((R.RankedItems(torch.tensor([[7, 1, 2]])), R.ItemIds(torch.tensor([[7]]))))
    before = _state(metric)
    targets = R.ItemIds(torch.full((len(ids), 1), 7))
    with pytest.raises(ValueError, match=r"y_pred \(RankedItems\) holds -1 before an item id .* Move each row's -1"):
        metric.update((R.RankedItems(torch.tensor(ids)), targets))
    assert _unchanged(before, metric)


def test_the_suggested_fix_moves_the_later_items_up_and_padding_at_the_end_is_accepted():
    ids = torch.tensor([[5, -1, 7, -1], [-1, -1, 3, 7]])
    fixed = ids.gather(1, (ids < 0).to(torch.uint8).argsort(dim=1, stable=True))  # as the message says
    assert fixed.tolist() == [[5, 7, -1, -1], [3, 7, -1, -1]]
    metric = R.RankingMetrics([1, 2, 4], metrics=["mrr", "ndcg", "precision"])
    metric.update((R.RankedItems(fixed), R.ItemIds(torch.tensor([[7], [7]]))))
    values = metric.compute()
    rel = np.zeros(8)
    rel[7] = 1
    for name in ("mrr", "ndcg", "precision"):
        for k in (1, 2, 4):
            expected = np.mean([user_values([5, 7], rel, k)[name], user_values([3, 7], rel, k)[name]])
            assert values[f"{name}@{k}"] == pytest.approx(expected, abs=1e-12)


# --- Grades of ItemIds ---------------------------------------------------------------------------
@pytest.mark.parametrize("padded", [float("nan"), float("inf"), -float("inf"), 5.0])
def test_the_grade_of_a_padded_slot_is_ignored(padded):
    metric = R.NDCG(top_k=3, gain_function="linear_rank")
    metric.update((SCORES, R.ItemIds(torch.tensor([[1, -1, 2]]), torch.tensor([[1.0, padded, 2.0]]))))
    expected = user_values([0, 1, 2, 3], [0.0, 1.0, 2.0, 0.0], 3, gain_kind="linear_rank")["ndcg"]
    assert metric.compute() == [pytest.approx(expected, abs=1e-12)]


@pytest.mark.parametrize("grade", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("name", ["Recall", "NDCG", "BPref"])
def test_a_nan_or_infinite_grade_of_a_listed_item_is_refused(grade, name):
    metric = getattr(R, name)(top_k=3)
    metric.update((SCORES, R.ItemIds(torch.tensor([[1, -1]]), torch.tensor([[1.0, 0.0]]))))
    before = _state(metric)
    with pytest.raises(ValueError, match=r"ItemIds\) grades must be finite at the listed item ids"):
        metric.update((SCORES, R.ItemIds(torch.tensor([[1, 2]]), torch.tensor([[1.0, grade]]))))
    assert _unchanged(before, metric)


# --- Report of models keyed by numbers -----------------------------------------------------------
def test_report_of_models_keyed_by_seed():
    report = R.Report({0: {"ndcg@10": (0.5, (0.4, 0.6))}, 1: {"ndcg@10": (0.6, (0.5, 0.7))}})
    assert report.models == ["0", "1"]
    text = report.to_markdown()
    assert "| 0 | 0.5000 ± 0.1000 |" in text and "| 1 | **0.6000** ± 0.1000 |" in text
    assert "\\textbf{0.6000}" in report.to_latex()


def test_report_of_models_keyed_by_epoch_against_a_baseline():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    base = rng.random(50)
    later = base + 0.2 + 0.01 * rng.standard_normal(50)
    report = R.Report({1: {"ndcg@10": base}, 2: {"ndcg@10": later}}, baseline=1)
    assert report.baseline == "1"
    assert report.adjusted_p_values["2", "ndcg@10"] == pytest.approx(scipy_stats.ttest_rel(later, base).pvalue)
    assert report.marker("2", "ndcg@10") == "†"
    with pytest.raises(ValueError, match=r"different text"):
        R.Report({1: {"a": (0.5, (0.4, 0.6))}, "1": {"a": (0.5, (0.4, 0.6))}})
