"""The label pass of a dense ranking update on CPU counts |R| among the label groups whose maximum
is relevant, and sorts the ideal ranking's labels there (a group holds a relevant label iff its
maximum is relevant), or, for labels that stay in cache, from one
comparison of every label: against numpy, with relevant labels after the last full group, users
with none, users relevant in more groups than the pass takes (the candidates path then),
thresholds under which 0 or -inf labels are relevant, NaN labels, and whole updates against the
reference."""

import numpy as np
import pytest
import torch

import ignite_recsys as R
from conftest import CUTOFF_CLASSES, run_metric
from ignite_recsys._core import tuning
from ignite_recsys._core.relevance import Relevance, TopLabels, relevance_pass
from ignite_recsys._core.selection import ValueGroups, value_groups
from references import candidate_metric_means, candidate_rankings


def _labels(rng, rows, width, dtype):
    grades = np.where(rng.random((rows, width)) < 8 / width, rng.integers(1, 5, size=(rows, width)), 0)
    grades = grades.astype(np.float64)
    grades[0, -3:] = [4.0, 2.0, 3.0]  # after the last full group
    grades[1] = 0.0  # no relevant label
    grades[2, ::50] = -np.inf  # legal labels, never relevant (unless the threshold is -inf)
    grades[3, :7] = 4.0  # tied top labels in one group
    return grades, torch.from_numpy(grades).to(dtype)


@pytest.fixture(params=["groups", "whole"])
def label_path(request, monkeypatch):
    """Labels compared whole where they stay in cache (``whole``), or read through
    their groups' maxima whatever their size (``groups``); returns the calls of the whole one."""
    from ignite_recsys._core import relevance as module

    monkeypatch.setattr(tuning, "IN_CACHE_SHARE", 0.5 if request.param == "whole" else 0.0)
    calls, original = [], module._host_relevant_labels
    monkeypatch.setattr(module, "_host_relevant_labels", lambda *args: calls.append(1) or original(*args))
    return request.param, calls


@pytest.mark.parametrize("select", [False, True])
@pytest.mark.parametrize("contiguous", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("threshold", [None, 2.0, 0.0, float("-inf")])
def test_relevant_groups_against_numpy(monkeypatch, label_path, threshold, dtype, contiguous, select):
    from ignite_recsys._core import relevance as module

    counted, original = [], module._count_in_candidates
    monkeypatch.setattr(module, "_count_in_candidates", lambda *args: counted.append(1) or original(*args))
    whole = label_path[0] == "whole" and dtype != torch.float16  # numpy compares f32, f64
    rng = np.random.default_rng(3)
    width, group, depth = 2_003, 7, 30
    grades, labels = _labels(rng, 9, width, dtype)
    relevance = Relevance.of(threshold, dtype)
    passed = relevance_pass(labels, relevance, groups=ValueGroups(group, contiguous), depth=depth, select=select)
    relevant = grades > 0 if threshold is None else grades >= threshold
    np.testing.assert_array_equal(passed.num_relevant.numpy(), relevant.sum(1))
    np.testing.assert_array_equal(passed.has_relevant.numpy(), relevant.any(1))
    assert bool(label_path[1]) == whole, "every label compared once"
    # 0 relevant everywhere (threshold 0 or -inf): more relevant groups than the pass takes
    assert bool(counted) == (threshold is not None and threshold <= 0 and not whole), "counted among the candidates"
    if whole and select and threshold is not None and threshold <= 0:  # more relevant labels than depth
        assert passed.candidates is None, "the ideal's labels selected later, among the groups"
        return
    if counted or not select:
        assert not isinstance(passed.candidates, TopLabels)
        return
    top = passed.candidates.values
    assert top.shape == (9, depth) and top.dtype == dtype
    values = top.numpy().astype(np.float64)
    for row, (row_grades, row_relevant) in enumerate(zip(grades, relevant)):
        best = np.sort(row_grades[row_relevant])[::-1][:depth]
        np.testing.assert_array_equal(values[row, : best.size], best)
        rest = torch.from_numpy(values[row, best.size :]).to(dtype)
        assert not relevance.mask(rest).any(), "positions past |R| hold an irrelevant label"


# label groups of ~sqrt(items / 30): 7 strided; 26: runs of 32 consecutive labels
@pytest.mark.parametrize("items", [1_503, 20_011])
@pytest.mark.parametrize("gain_function", ["exp_rank", "linear_rank", "binary"])
@pytest.mark.parametrize("threshold", [None, 2.0])
def test_rankings_with_relevant_groups_against_the_reference(monkeypatch, label_path, items, gain_function, threshold):
    """Every cut-off metric (NDCG's ideal from the sorted relevant labels) against the reference."""
    from ignite_recsys._core import relevance as module

    found, original = [], module._relevant_groups
    monkeypatch.setattr(module, "_relevant_groups", lambda *args: found.append(original(*args)) or found[-1])
    whole = label_path[0] == "whole"
    monkeypatch.setattr(tuning, "SMALL_BATCH_ENTRIES", 0)  # the label groups even on these few users
    rng = np.random.default_rng(8)
    users, top_k = 7, [1, 5, 30]
    scores = rng.permutation(users * items).reshape(users, items).astype(np.float32)
    grades, labels = _labels(rng, users, items, torch.float32)
    scores[0, -1] = scores.max() + 1  # a tail label ranked first
    options = {"gain_function": gain_function, "relevance_threshold": threshold}
    reference_threshold = np.nextafter(0.0, 1.0) if threshold is None else threshold
    expected = candidate_metric_means(
        candidate_rankings(scores, [set()] * users),
        grades,
        top_k,
        threshold=reference_threshold,
        gain_kind=gain_function,
    )
    got = run_metric(
        R.RankingMetrics(top_k, metrics=list(CUTOFF_CLASSES), **options), [(torch.from_numpy(scores), labels)]
    )
    for name in CUTOFF_CLASSES:
        np.testing.assert_allclose([got[f"{name}@{k}"] for k in top_k], expected[name], atol=1e-12, err_msg=name)
    if whole:
        assert label_path[1] == [1] and found == [], "every label compared once"
        return
    assert len(found) == 1 and found[0] is not None, "counted among the groups of relevant maximum"
    assert (found[0][1] is None) == (gain_function == "binary"), "the ideal's labels sorted there"


@pytest.mark.parametrize("items", [1_503, 20_011])
@pytest.mark.parametrize("gain_function", ["exp_rank", "linear_rank"])
def test_ndcg_alone_sorts_the_ideal_among_the_relevant_labels(monkeypatch, label_path, items, gain_function):
    """NDCG alone asks for the ideal's labels but not for |R|: they are still sorted among the
    relevant labels (|R| comes with them), against the reference."""
    from ignite_recsys._core import relevance as module

    found, original = [], module._relevant_groups
    monkeypatch.setattr(module, "_relevant_groups", lambda *args: found.append(original(*args)) or found[-1])
    monkeypatch.setattr(tuning, "SMALL_BATCH_ENTRIES", 0)
    rng = np.random.default_rng(9)
    users, top_k = 7, [1, 5, 30]
    scores = rng.permutation(users * items).reshape(users, items).astype(np.float32)
    grades, labels = _labels(rng, users, items, torch.float32)
    expected = candidate_metric_means(
        candidate_rankings(scores, [set()] * users),
        grades,
        top_k,
        threshold=np.nextafter(0.0, 1.0),
        gain_kind=gain_function,
    )
    got = run_metric(R.NDCG(top_k, gain_function=gain_function), [(torch.from_numpy(scores), labels)])
    np.testing.assert_allclose(got, expected["ndcg"], atol=1e-12)
    if label_path[0] == "whole":
        assert label_path[1] == [1] and found == [], "every label compared once"
    else:
        assert len(found) == 1 and found[0][1] is not None, "the ideal's labels sorted among the relevant ones"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("contiguous", [False, True])
def test_label_pass_flags_nan_labels(label_path, dtype, contiguous):
    """A NaN label anywhere (a group's first item, the tail, a row of relevant labels) is flagged
    by the pass (the update then refuses the batch); no flag without one."""
    rng = np.random.default_rng(5)
    grades, labels = _labels(rng, 6, 2_003, dtype)
    relevance = Relevance.of(None, dtype)
    groups = ValueGroups(7, contiguous)
    clean = relevance_pass(labels, relevance, groups=groups, depth=30, select=True)
    assert not bool(clean.has_nan)
    for row, column in [(0, 0), (1, 2_002), (3, 3)]:
        dirty = labels.clone()
        dirty[row, column] = float("nan")
        passed = relevance_pass(dirty, relevance, groups=groups, depth=30, select=True)
        assert bool(passed.has_nan), (row, column)
        others = np.arange(6) != row  # the update refuses the batch; the other rows still count right
        np.testing.assert_array_equal(passed.num_relevant.numpy()[others], (grades > 0).sum(1)[others])
    assert bool(label_path[1]) == (label_path[0] == "whole")


@pytest.mark.parametrize("relevant_per_user, listed", [(10, True), (60, False)])
def test_relevant_groups_listed_up_to_a_share_of_the_labels(monkeypatch, relevant_per_user, listed):
    """At a small depth the groups of relevant maximum are still listed while their labels are few
    beside the row (``RELEVANT_LABELS_SHARE``: 10 relevant labels per user, more groups than the
    depth, 10 x 64 labels of 20,011), and not where they are many (60 x 64 labels); |R| and the
    metrics equal numpy and the reference either way."""
    from ignite_recsys._core import relevance as module

    monkeypatch.setattr(tuning, "RELEVANT_LABELS_SHARE", 1 / 24)
    monkeypatch.setattr(tuning, "IN_CACHE_SHARE", 0.0)  # through the groups' maxima, whatever the size
    monkeypatch.setattr(tuning, "SMALL_BATCH_ENTRIES", 0)
    found, original = [], module._relevant_groups
    monkeypatch.setattr(module, "_relevant_groups", lambda *args: found.append(original(*args)) or found[-1])
    rng = np.random.default_rng(11)
    users, items, top_k = 6, 20_011, [1, 3]
    grades = np.zeros((users, items))
    for row in grades:
        row[rng.choice(items, relevant_per_user, replace=False)] = rng.integers(1, 4, relevant_per_user)
    labels = torch.from_numpy(grades).float()
    groups = value_groups(items, 3)
    assert groups == ValueGroups(64, contiguous=True)  # the update's groups at this width and depth
    passed = relevance_pass(labels, Relevance.of(None, torch.float32), groups=groups, depth=3, select=True)
    np.testing.assert_array_equal(passed.num_relevant.numpy(), (grades > 0).sum(1))
    assert (found[-1] is not None) == listed, "listed among the groups of relevant maximum"
    scores = rng.permutation(users * items).reshape(users, items).astype(np.float32)
    expected = candidate_metric_means(
        candidate_rankings(scores, [set()] * users),
        grades,
        top_k,
        threshold=np.nextafter(0.0, 1.0),
        gain_kind="exp_rank",
    )
    found.clear()
    got = run_metric(R.RankingMetrics(top_k, metrics=list(CUTOFF_CLASSES)), [(torch.from_numpy(scores), labels)])
    for name in CUTOFF_CLASSES:
        np.testing.assert_allclose([got[f"{name}@{k}"] for k in top_k], expected[name], atol=1e-12, err_msg=name)
    assert [result is not None for result in found] == [listed], "the update's label pass too"
    # NDCG alone counts no |R|: beyond half the depth in groups, the depth best groups are cheaper
    found.clear()
    got = run_metric(R.NDCG(top_k), [(torch.from_numpy(scores), labels)])
    np.testing.assert_allclose(got, expected["ndcg"], atol=1e-12)
    assert found == [None], "the ideal's labels among the depth best groups"
