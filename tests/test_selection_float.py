"""The group pre-filter's first level on CPU over many groups: one float selection of the k + 1
largest group maxima, the rows tied at its boundary (or holding a NaN) re-selected by int64 keys.
Against numpy's stable argsort on every value pattern of ``test_selection``, with the float
selection forced on every row width."""

import numpy as np
import pytest
import torch

from ignite_recsys._core import tuning
from ignite_recsys._core.selection import groups as module
from ignite_recsys._core.selection import stable_topk
from test_selection import PATTERNS, _pattern, patterns_match_stable_argsort


@pytest.fixture
def float_selection(monkeypatch):
    """The float selection on every grouped row, and the rows the keyed selection re-selects
    (the torch selection: float32 rows would otherwise be selected on the host)."""
    monkeypatch.setattr(tuning, "FLOAT_SELECTION_FROM", 0)
    monkeypatch.setattr(tuning, "HOST_SELECTION", False)
    reselected, original = [], module._exact_topk

    def spy(values, items, k, sorted=True):
        if items is None and not sorted:  # the first level (group maxima by index)
            reselected.append(values.shape[0])
        return original(values, items, k, sorted)

    monkeypatch.setattr(module, "_exact_topk", spy)
    return reselected


@pytest.mark.parametrize("width", [2000, 2001, 6463, 20_000, 20_033, 70_001])
@pytest.mark.parametrize("k", [1, 7, 100])
def test_float_first_level_equals_stable_argsort(rng, float_selection, width, k):
    assert len(list(patterns_match_stable_argsort(rng, width, k))) == len(PATTERNS)


def rows_tied_at_the_kth_group_maximum(rng, width: int, k: int) -> np.ndarray:
    """4 rows of distinct float32 scores; in row 2 the best item of the group ranked k + 1
    (0-based k) takes the k-th group's maximum, so that the lower group index decides."""
    x = np.stack([rng.permutation(width).astype(np.float32) for _ in range(4)])
    group = tuning.LONG_ROW_GROUPS[0] if width >= tuning.LONG_ROWS_PER_K * (k + 1) else tuning.SHORT_ROW_GROUPS[0]
    num_full = width // group
    maxima = x[2, : num_full * group].reshape(num_full, group).max(1)
    order = np.argsort(-maxima, kind="stable")
    low, high = sorted(order[k - 1 : k + 1])
    x[2, high * group : (high + 1) * group] = np.minimum(x[2, high * group : (high + 1) * group], maxima[order[k]] - 1)
    x[2, high * group] = maxima[low]
    return x


@pytest.mark.parametrize("width", [6400, 70_001])
def test_rows_tied_at_the_boundary_are_reselected(rng, float_selection, width):
    """Distinct scores, one row whose (k + 1)-th best group maximum ties the k-th (a group of a
    higher index than an unchosen one): that row alone is re-selected by keys, and every row
    equals the stable argsort; a row holding a NaN is flagged."""
    k = 100
    x = rows_tied_at_the_kth_group_maximum(rng, width, k)
    x[3, 5] = np.nan
    got, has_nan = stable_topk(torch.from_numpy(x), k, detect_nan=True)
    expected = np.argsort(-x[:3], axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(got[:3].numpy(), expected)
    assert has_nan.tolist() == [False, False, False, True]
    assert float_selection == [1], "the tied row re-selected by keys"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_float_first_level_other_dtypes(rng, float_selection, dtype):
    x = torch.from_numpy(np.round(rng.random((3, 20_000)) * 50)).to(dtype)  # exact in every dtype, many ties
    expected = np.argsort(-x.double().numpy(), axis=1, kind="stable")[:, :100]
    np.testing.assert_array_equal(stable_topk(x, 100).numpy(), expected)


@pytest.mark.parametrize("width", [2001, 6463, 20_033, 70_001])
@pytest.mark.parametrize("k", [1, 7, 100])
def test_candidates_above_the_lowest_chosen_maximum(rng, monkeypatch, width, k):
    """The final candidates: the chosen groups' items scoring at least their lowest maximum, on
    rows of distinct scores, of scores tied with that maximum (each tie kept, the lower index
    first), and of few levels, and of equal scores or a NaN (the sub-groups then); against the stable argsort."""
    monkeypatch.setattr(tuning, "HOST_SELECTION", False)  # the torch selection's candidates
    taken, original = [], module._above_threshold
    monkeypatch.setattr(module, "_above_threshold", lambda *args: taken.append(original(*args)) or taken[-1])
    x = np.stack([rng.permutation(width).astype(np.float32) for _ in range(3)])
    tied = np.argsort(-x[1], kind="stable")[k - 1]
    x[1, rng.choice(width, size=5, replace=False)] = x[1, tied]  # five more items tied with the k-th
    expected = np.argsort(-x, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(stable_topk(torch.from_numpy(x), k).numpy(), expected)
    assert taken and taken[-1] is not None, "the candidates above the threshold"
    for name in ("few_levels", "all_equal"):
        ties = _pattern(rng, name, 3, width)
        expected = np.argsort(-ties.numpy(), axis=1, kind="stable")[:, :k]
        np.testing.assert_array_equal(stable_topk(ties, k).numpy(), expected, err_msg=name)
    assert taken[-1] is None, "every item tied: the sub-groups"
    x[2, 3] = np.nan
    _, has_nan = stable_topk(torch.from_numpy(x), k, detect_nan=True)
    assert has_nan.tolist() == [False, False, True]
