"""Top-k selection with excluded items against a numpy reference, on every path.

Reference: the candidates (items not excluded) of each row in the order of numpy's stable
argsort of their negated scores (score descending, index ascending), padded with -1. Row widths
straddle the thresholds where the selection switches between all items, groups of 16 and groups
of 64 (20 k and 200 k items for k items), with and without a last partial group; the patterns put
-inf candidates next to excluded items, ties at group edges and rows with few or no candidates."""

import numpy as np
import pytest
import torch

from ignite_recsys._core import tuning
from ignite_recsys._core.selection import stable_topk, stable_topk_excluding
from ignite_recsys._core.selection.groups import LONG_ROW_GROUPS, SHORT_ROW_GROUPS, group_sizes


def reference(scores: np.ndarray, excluded: np.ndarray, k: int) -> np.ndarray:
    out = np.full((scores.shape[0], k), -1, dtype=np.int64)
    for row in range(scores.shape[0]):
        candidates = np.flatnonzero(~excluded[row])
        order = candidates[np.argsort(-scores[row, candidates].astype(np.float64), kind="stable")][:k]
        out[row, : len(order)] = order
    return out


def _widths(k):
    """Around every switch of the pre-filter for k (20 k, 200 k), and the group sizes."""
    out = {
        1,
        3,
        4,
        5,
        8,
        15,
        16,
        17,
        63,
        64,
        65,
        20 * k - 1,
        20 * k,
        20 * k + 1,
        20 * k + 13,
        200 * k - 1,
        200 * k,
        200 * k + 1,
        200 * k + 37,
        3 * 200 * k + 5,
    }
    return sorted(w for w in out if w >= k)


def _case(rng, name, rows, width):
    """(scores float64 with values exact in every float dtype, excluded bool)."""
    x = np.round(rng.random((rows, width)) * 40)
    ex = rng.random((rows, width)) < 0.1
    if name == "few_levels":  # heavy ties everywhere, at the k-th position too
        x = np.round(x / 20)
    elif name == "neg_inf_candidates":  # -inf candidates and excluded items side by side
        x[:, ::2] = -np.inf
        ex = rng.random((rows, width)) < 0.5
        x[0] = -np.inf  # a row of -inf scores, half of them excluded
    elif name == "excluded_best":  # the best scores are excluded: the raw maxima mislead
        x[:, ::7] = 100.0
        x[:, 3::11] = np.inf
        ex = np.zeros((rows, width), dtype=bool)
        ex[:, ::7] = True
        ex[:, 3::11] = True
    elif name == "all_excluded":
        ex[:] = True
        x[1] = -np.inf
    elif name == "few_candidates":  # fewer candidates than k, many -inf, in the last group too
        ex = rng.random((rows, width)) < 0.999
        ex[:, -1] = False
        x[:, ::3] = -np.inf
        x[:, -1] = -np.inf
    elif name == "group_edges":  # equal scores at the edges of groups and sub-groups
        x = np.zeros((rows, width))
        for size in sorted({*LONG_ROW_GROUPS, *SHORT_ROW_GROUPS}):
            x[:, size - 1 :: size] = 1.0
            x[:, size::size] = 1.0
        ex = np.zeros((rows, width), dtype=bool)
        ex[:, 63::64] = True
    elif name == "whole_groups_excluded":  # empty groups must rank below groups of -inf candidates
        x[:] = -np.inf
        ex = np.zeros((rows, width), dtype=bool)
        for start in range(0, width, 128):
            ex[:, start : start + 64] = True
    elif name == "signed_zeros":  # -0.0 == +0.0, broken by index
        x = np.where(rng.random((rows, width)) < 0.5, -0.0, 0.0)
    return x, ex


PATTERNS = [
    "random",
    "few_levels",
    "neg_inf_candidates",
    "excluded_best",
    "all_excluded",
    "few_candidates",
    "group_edges",
    "whole_groups_excluded",
    "signed_zeros",
]


def _check(x, ex, k, dtype, rows_label=""):
    scores = torch.from_numpy(x).to(dtype)
    expected = reference(scores.double().numpy(), ex, k)
    got, has_nan = stable_topk_excluding(scores, k, torch.from_numpy(ex), detect_nan=True)
    assert got.dtype == torch.int64 and got.shape == (x.shape[0], k)
    np.testing.assert_array_equal(got.numpy(), expected, err_msg=rows_label)
    assert not has_nan.any()
    # the same with the excluded entries listed (sparse exclusions), plus harmless padding entries
    users, items = np.nonzero(ex)
    users = np.concatenate([users, [x.shape[0], 0]])
    items = np.concatenate([items, [0, x.shape[1] + 5]])
    entries = (torch.from_numpy(users).long(), torch.from_numpy(items).long())
    got, has_nan = stable_topk_excluding(scores, k, torch.from_numpy(ex), detect_nan=True, entries=entries)
    np.testing.assert_array_equal(got.numpy(), expected, err_msg=f"{rows_label} (entries)")
    assert not has_nan.any()


@pytest.mark.parametrize("k", [1, 7, 100])
def test_equals_reference_float32(rng, k):
    for width in _widths(k):
        for name in PATTERNS:
            x, ex = _case(rng, name, 3, width)
            _check(x, ex, k, torch.float32, f"{name} width={width}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("k", [7, 100])
def test_equals_reference_other_dtypes(rng, dtype, k):
    for width in [k, 20 * k - 1, 20 * k + 13, 200 * k + 37]:
        for name in PATTERNS:
            x, ex = _case(rng, name, 3, width)
            _check(x, ex, k, dtype, f"{name} width={width}")


def test_float64_scores_closer_than_float32_resolution(rng):
    """float64 scores that round to the same float32 must still rank by their float64 values."""
    width = 20_033
    x = 1.0 + rng.integers(0, 1000, size=(3, width)) * 1e-12
    ex = rng.random((3, width)) < 0.2
    _check(x, ex, 100, torch.float64)


@pytest.mark.parametrize("rows", [1, 3, 64])
@pytest.mark.parametrize("width", [1_999, 2_001, 20_000, 20_033])
def test_batch_sizes(rng, rows, width):
    for name in ["random", "neg_inf_candidates", "few_candidates"]:
        x, ex = _case(rng, name, rows, width)
        _check(x, ex, 100, torch.float32, name)


def test_long_rows(rng):
    """Up to 300 k items: groups of 64 for k = 1, 7 and 100."""
    for width in [299_999, 300_000]:
        for name in ["random", "excluded_best", "neg_inf_candidates"]:
            x, ex = _case(rng, name, 2, width)
            for k in [1, 7, 100]:
                _check(x, ex, k, torch.float32, f"{name} width={width} k={k}")


def test_unaligned_mask_rows(rng):
    """Row lengths that are not a multiple of 4 and a mask that starts off a word boundary."""
    x, ex = _case(rng, "neg_inf_candidates", 5, 20_035)
    wide = np.zeros((5, 20_036), dtype=bool)
    wide[:, 1:] = ex
    mask = torch.from_numpy(wide)[:, 1:]  # not contiguous: copied; then a contiguous offset view
    expected = reference(x.astype(np.float32).astype(np.float64), ex, 100)
    scores = torch.from_numpy(x).float()
    np.testing.assert_array_equal(stable_topk_excluding(scores, 100, mask).numpy(), expected)
    flat = torch.from_numpy(np.concatenate([[True], ex.ravel()]))[1:].view(5, 20_035)
    assert flat.storage_offset() == 1 and flat.is_contiguous()
    np.testing.assert_array_equal(stable_topk_excluding(scores, 100, flat).numpy(), expected)


@pytest.mark.parametrize("width", [5, 1_999, 2_001, 6_463, 20_000, 20_033])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_no_exclusion_equals_stable_topk(rng, width, dtype):
    for name in ["random", "few_levels", "neg_inf_candidates", "signed_zeros"]:
        x, _ = _case(rng, name, 4, width)
        scores = torch.from_numpy(x).to(dtype)
        none = torch.zeros(scores.shape, dtype=torch.bool)
        for k in sorted({1, 7, min(100, width)}):
            if k <= width:
                assert torch.equal(stable_topk_excluding(scores, k, none), stable_topk(scores, k)), name


@pytest.mark.parametrize("width", [5, 2_001, 6_463, 20_033])
def test_nan_among_candidates_is_flagged(rng, width):
    x = torch.rand(5, width, generator=torch.Generator().manual_seed(width))
    excluded = torch.zeros(5, width, dtype=torch.bool)
    x[1, width // 2] = float("nan")  # a candidate
    x[2, -1] = float("nan")  # a candidate in the last (partial) group
    x[3, width // 3] = float("nan")  # excluded: not read for the ranking
    excluded[3, width // 3] = True
    x[4, 0] = float("nan")
    excluded[4] = True
    _, has_nan = stable_topk_excluding(x, 5, excluded, detect_nan=True)
    assert has_nan.tolist() == [False, True, True, False, False]


def test_accelerator_variant_gives_the_same_results(rng, monkeypatch):
    """Accelerators take one pass over the batch (two for float64) and plain reductions instead
    of the CPU-tuned row chunks and max pooling; switched on here on CPU, results are unchanged."""
    cases = []
    for width in [150, 2_001, 6_463, 20_033]:
        for name in ["random", "neg_inf_candidates", "whole_groups_excluded", "few_candidates"]:
            x, ex = _case(rng, name, 6, width)
            for dtype in [torch.float32, torch.float64]:
                cases.append((torch.from_numpy(x).to(dtype), torch.from_numpy(ex)))

    def results():
        return [stable_topk_excluding(s, 20, e, detect_nan=True) for s, e in cases]

    cpu_tuned = results()
    monkeypatch.setattr(tuning, "cpu_tuned", lambda device: False)
    accelerator = results()
    for (got, got_nan), (want, want_nan), (s, e) in zip(accelerator, cpu_tuned, cases):
        assert torch.equal(got, want) and torch.equal(got_nan, want_nan)
        np.testing.assert_array_equal(got.numpy(), reference(s.double().numpy(), e.numpy(), 20))


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda s, e: stable_topk_excluding(s, 0, e), ValueError),
        (lambda s, e: stable_topk_excluding(s, 11, e), ValueError),
        (lambda s, e: stable_topk_excluding(s, 2, e.float()), TypeError),
        (lambda s, e: stable_topk_excluding(s, 2, e[:, :5]), TypeError),
        (lambda s, e: stable_topk_excluding(s.long(), 2, e), TypeError),
    ],
)
def test_bad_arguments(call, error):
    scores, excluded = torch.rand(2, 10), torch.zeros(2, 10, dtype=torch.bool)
    with pytest.raises(error):
        call(scores, excluded)


@pytest.mark.parametrize("width", [6_463, 20_033, 200_003])
@pytest.mark.parametrize("k", [7, 100])
def test_few_listed_exclusions_fix_the_plain_group_maxima(rng, width, k):
    """Sparse exclusions (few per row, the listed-entries path): the best items, a whole group,
    and items beside -inf candidates are excluded."""
    rows = 4
    x = rng.standard_normal((rows, width)).astype(np.float32)
    x[1, 100:300] = -np.inf  # -inf candidates ...
    ex = np.zeros((rows, width), dtype=bool)
    best = np.argsort(-x, axis=1, kind="stable")[:, : 2 * k]
    ex[np.arange(rows)[:, None], best[:, ::2]] = True  # every other of the best items
    ex[0, 64:128] = True  # a whole group of 64
    ex[1, 100:300:3] = True  # ... beside excluded items
    ex[2, :] = False
    x[3, :] = -np.inf  # a row of -inf candidates with a few finite ones, its first group excluded
    x[3, 500:503] = 1.0
    ex[3, :] = False
    ex[3, : 64 * (k + 1) if width > 100_000 else 64] = True  # more empty groups than k
    scores = torch.from_numpy(x)
    users, items = np.nonzero(ex)
    sizes = group_sizes(width, k)
    assert sizes is None or len(users) * sizes[0] <= x.size  # the fix-up path is taken
    expected = reference(x.astype(np.float64), ex, k)
    entries = (torch.from_numpy(users).long(), torch.from_numpy(items).long())
    got = stable_topk_excluding(scores, k, torch.from_numpy(ex), entries=entries)
    np.testing.assert_array_equal(got.numpy(), expected)
