"""Confidence intervals, per-user values and paired tests, against numpy references and scipy."""

import itertools
import math
import re

import numpy as np
import pytest
import torch
from ignite.exceptions import NotComputableError
from scipy import stats as sps

import ignite_recsys as R
from conftest import CUTOFF_CLASSES, random_batch
from references import recbole_tail_items, stable_ranking, top_lists, user_values

TOP_K = [1, 3, 8]
_POPULARITY = (torch.arange(25) * 7) % 11 + 1  # positive counts (Novelty without unseen items)


def _batches(seed, sizes=(7, 1, 9, 5), items=25, zero_users=2):
    rng = np.random.default_rng(seed)
    return [random_batch(rng, users, items, zero_users=min(zero_users, users)) for users in sizes]


def _reference_rows(batches, ignore_zero_hits=True):
    """name -> per-user values (users, len(TOP_K)), NaN for users not counted; r_precision (users,)."""
    rows = {}
    for scores, relevance in batches:
        for s, y in zip(scores.numpy(), relevance.numpy()):
            counted = (y >= 1).any() or not ignore_zero_hits
            ranking = stable_ranking(s)
            per_k = [user_values(ranking, y, k) for k in TOP_K]
            for name in per_k[0]:
                rows.setdefault(name, []).append([v[name] if counted else np.nan for v in per_k])
    out = {name: np.array(values) for name, values in rows.items()}
    out["r_precision"] = out["r_precision"][:, 0]
    return out


def _item_value_rows(batches, value_of):
    lists = [items for scores, _ in batches for items in top_lists(scores.numpy(), max(TOP_K))]
    return np.array([[np.mean([value_of(i) for i in items[:k]]) for k in TOP_K] for items in lists])


def _tail():
    tail = set(recbole_tail_items(_POPULARITY.tolist(), 0.3))
    return lambda i: float(i in tail)


def _novelty():
    p = _POPULARITY.numpy().astype(np.float64)
    return lambda i: -math.log2(p[i] / p.sum())


# name -> (factory taking **kwargs, reference rows from batches)
SINGLE = {name: (lambda cls=cls, **kw: cls(TOP_K, **kw), name) for name, cls in CUTOFF_CLASSES.items()}
SINGLE["r_precision"] = (lambda **kw: R.RPrecision(**kw), "r_precision")
ITEM_VALUE = {
    "average_popularity": (lambda **kw: R.AveragePopularity(TOP_K, _POPULARITY, **kw), lambda i: float(_POPULARITY[i])),
    "tail_percentage": (lambda **kw: R.TailPercentage(TOP_K, _POPULARITY, tail_ratio=0.3, **kw), _tail()),
    "novelty": (lambda **kw: R.Novelty(TOP_K, _POPULARITY, **kw), _novelty()),
}


def _expected_rows(name, batches, ignore_zero_hits=True):
    if name in ITEM_VALUE:
        return _item_value_rows(batches, ITEM_VALUE[name][1])
    return _reference_rows(batches, ignore_zero_hits)[SINGLE[name][1]]


def _metric(name, **kw):
    return (ITEM_VALUE[name][0] if name in ITEM_VALUE else SINGLE[name][0])(**kw)


def _fed(metric, batches):
    for batch in batches:
        metric.update(batch)
    return metric


def _scipy_interval(values, level):
    values = values[~np.isnan(values)]
    return sps.t.interval(level, len(values) - 1, loc=values.mean(), scale=sps.sem(values))


ALL = sorted(SINGLE) + sorted(ITEM_VALUE)


# --- per_user() -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("ignore_zero_hits", [True, False])
def test_per_user_matches_reference(name, ignore_zero_hits):
    if name in ITEM_VALUE and not ignore_zero_hits:
        pytest.skip("no ignore_zero_hits option")
    kw = {"ignore_zero_hits": ignore_zero_hits} if name not in ITEM_VALUE else {}
    batches = _batches(1)
    metric = _fed(_metric(name, per_user=True, **kw), batches)
    got = metric.per_user()
    expected = _expected_rows(name, batches, ignore_zero_hits)
    assert got.dtype == torch.float64 and got.shape == expected.shape
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)  # NaN where NaN
    # the means of the kept rows are compute()'s values
    np.testing.assert_allclose(np.nanmean(expected, axis=0), metric.compute(), rtol=1e-12)


@pytest.mark.parametrize("ignore_zero_hits", [True, False])
def test_ranking_metrics_per_user_is_a_dict_of_columns(ignore_zero_hits):
    batches = _batches(2)
    metric = _fed(
        R.RankingMetrics(TOP_K, list(CUTOFF_CLASSES) + ["r_precision"], ignore_zero_hits, per_user=True), batches
    )
    got = metric.per_user()
    reference = _reference_rows(batches, ignore_zero_hits)
    assert list(got) == list(metric.compute())
    for key, column in got.items():
        name, _, k = key.partition("@")
        expected = reference[name] if not k else reference[name][:, TOP_K.index(int(k))]
        assert column.shape == expected.shape
        np.testing.assert_allclose(column.numpy(), expected, rtol=1e-12, atol=1e-12, err_msg=key)


def test_per_user_needs_the_option_and_reset_clears():
    with pytest.raises(RuntimeError, match="per_user=True"):
        _fed(R.NDCG(TOP_K), _batches(3)).per_user()
    with pytest.raises(TypeError, match="per_user must be a bool"):
        R.NDCG(TOP_K, per_user=1)
    metric = _fed(R.NDCG(TOP_K, per_user=True), _batches(3))
    assert metric.per_user().shape[0] == 22
    metric.reset()
    assert metric.per_user().shape == (0, 3)
    _fed(metric, _batches(4)[:1])
    assert metric.per_user().shape == (7, 3)


@pytest.mark.parametrize("name", ["ndcg", "r_precision", "novelty"])
def test_refused_batch_appends_no_row_and_leaves_the_sums(name):
    metric = _fed(_metric(name, per_user=True), _batches(5))
    before_rows = metric.per_user().clone()
    before = {key: getattr(metric, key).clone() for key in metric._state_dict_all_req_keys}
    scores, relevance = _batches(6)[0]
    scores[1, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        metric.update((scores, relevance))
    assert torch.equal(metric.per_user().nan_to_num(-1), before_rows.nan_to_num(-1))
    for key, value in before.items():
        assert torch.equal(getattr(metric, key), value), key


def test_per_user_after_loading_a_state_refuses_and_the_interval_still_works():
    batches = _batches(7)
    metric = _fed(R.MRR(TOP_K, per_user=True), batches)
    restored = R.MRR(TOP_K, per_user=True)
    restored.load_state_dict(metric.state_dict())
    with pytest.raises(RuntimeError, match="not part of state_dict"):
        restored.per_user()
    assert restored.confidence_interval() == metric.confidence_interval()


def test_per_user_after_loading_a_state_of_no_counted_user_refuses():
    """The loaded users had no relevant item (none counted, each a NaN row): the rows kept after
    the load match the loaded count (0), yet the loaded users' rows are missing."""
    scores = torch.tensor([[0.9, 0.1, 0.5, 0.3], [0.2, 0.8, 0.4, 0.6]])
    relevance = torch.tensor([[1.0, 0, 0, 0], [0, 1, 0, 0]])
    first = R.NDCG([1, 3], per_user=True)
    first.update((scores, torch.zeros(2, 4)))
    restored = R.NDCG([1, 3], per_user=True)
    restored.load_state_dict(first.state_dict())
    restored.update((scores, relevance))
    with pytest.raises(RuntimeError, match="a state loaded since the last reset"):
        restored.per_user()
    restored.reset()
    restored.update((scores, relevance))
    assert restored.per_user().tolist() == [[1.0, 1.0], [1.0, 1.0]]  # each relevant item ranked first


# --- confidence_interval() --------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("level", [0.5, 0.9, 0.95, 0.99])
def test_confidence_interval_equals_scipy(name, level):
    batches = _batches(8, sizes=(40, 3, 57))
    metric = _fed(_metric(name), batches)  # no per-user values kept
    got = metric.confidence_interval(level)
    expected = _expected_rows(name, batches)
    if name == "r_precision":
        np.testing.assert_allclose(got, _scipy_interval(expected, level), rtol=0, atol=1e-9)
    else:
        assert len(got) == len(TOP_K)
        for column, interval in enumerate(got):
            np.testing.assert_allclose(interval, _scipy_interval(expected[:, column], level), rtol=0, atol=1e-9)
    if name in ITEM_VALUE:  # larger values: relative agreement too
        np.testing.assert_allclose(
            np.array(got).ravel(),
            np.array([_scipy_interval(expected[:, c], level) for c in range(len(TOP_K))]).ravel(),
            rtol=1e-10,
        )


def test_ranking_metrics_interval_is_a_dict_equal_to_the_single_classes():
    batches = _batches(9, sizes=(30, 30))
    names = list(CUTOFF_CLASSES) + ["r_precision"]
    got = _fed(R.RankingMetrics(TOP_K, names), batches).confidence_interval(0.9)
    reference = _reference_rows(batches)
    assert list(got) == [f"{n}@{k}" for n in CUTOFF_CLASSES for k in TOP_K] + ["r_precision"]
    for key, interval in got.items():
        name, _, k = key.partition("@")
        values = reference[name] if not k else reference[name][:, TOP_K.index(int(k))]
        np.testing.assert_allclose(interval, _scipy_interval(values, 0.9), rtol=0, atol=1e-9, err_msg=key)


def test_interval_of_equal_values_is_the_point():
    scores = torch.tensor([[3.0, 2.0, 1.0]] * 4)
    relevance = torch.tensor([[1.0, 0.0, 0.0]] * 4)
    assert _fed(R.HitRate(1), [(scores, relevance)]).confidence_interval() == [(1.0, 1.0)]


@pytest.mark.parametrize("level", [0, 1, -0.5, 1.5, float("nan")])
def test_level_outside_open_unit_interval_is_refused(level):
    metric = _fed(R.NDCG(TOP_K), _batches(10))
    with pytest.raises(ValueError, match="level must be strictly between 0 and 1"):
        metric.confidence_interval(level)


@pytest.mark.parametrize("level", [True, "0.95", None])
def test_level_of_wrong_type_is_refused(level):
    with pytest.raises(TypeError, match="level must be a real number"):
        _fed(R.NDCG(TOP_K), _batches(10)).confidence_interval(level)


def test_fewer_than_two_counted_users_raise():
    metric = R.Recall(TOP_K)
    with pytest.raises(NotComputableError, match="at least two counted users, got 0"):
        metric.confidence_interval()
    metric.update((torch.tensor([[0.2, 0.1]]), torch.tensor([[1.0, 0.0]])))
    metric.update((torch.tensor([[0.2, 0.1]]), torch.tensor([[0.0, 0.0]])))  # not counted
    with pytest.raises(NotComputableError, match="at least two counted users, got 1"):
        metric.confidence_interval()


def test_state_saved_by_ignite_has_no_sums_of_squares():
    from ignite.metrics.rec_sys import NDCG as IgniteNDCG

    theirs = IgniteNDCG([1, 3])
    theirs.update(_batches(11)[0])
    ours = R.NDCG([1, 3])
    ours.load_state_dict(theirs.state_dict())
    assert len(ours.compute()) == 2
    with pytest.raises(NotComputableError, match="no sums of squares"):
        ours.confidence_interval()


# --- paired_test -------------------------------------------------------------------------------
def _pair(seed, n=200):
    rng = np.random.default_rng(seed)
    a = rng.random(n)
    return a, np.clip(a - 0.03 + 0.2 * rng.standard_normal(n), 0, 1)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("level", [0.9, 0.95])
def test_paired_t_test_equals_scipy(seed, level):
    a, b = _pair(seed, n=20 + 50 * seed)
    result = R.paired_test(torch.from_numpy(a), b, level=level)
    expected = sps.ttest_rel(a, b)
    assert isinstance(result, R.PairedTestResult) and result.method == "t" and result.num_users == len(a)
    assert result.p_value == pytest.approx(expected.pvalue, abs=1e-6, rel=1e-9)
    d = a - b
    assert result.mean_difference == pytest.approx(d.mean(), abs=1e-12)
    np.testing.assert_allclose(
        result.confidence_interval, sps.t.interval(level, len(d) - 1, d.mean(), sps.sem(d)), rtol=0, atol=1e-9
    )
    np.testing.assert_allclose(result.confidence_interval, expected.confidence_interval(level), rtol=0, atol=1e-9)


def test_nan_users_are_dropped_pairwise():
    a, b = _pair(5, n=50)
    a[[3, 7]], b[[7, 20]] = np.nan, np.nan
    kept = np.ones(50, bool)
    kept[[3, 7, 20]] = False
    result = R.paired_test(a, b)
    assert result.num_users == 47
    assert result.p_value == pytest.approx(sps.ttest_rel(a[kept], b[kept]).pvalue, abs=1e-12)


def test_paired_test_of_metrics_uses_their_per_user_values():
    batches = _batches(12, sizes=(40, 40))
    other = [(-scores, relevance) for scores, relevance in batches]  # a worse model
    ndcg_a = _fed(R.NDCG(TOP_K, per_user=True), batches)
    ndcg_b = _fed(R.NDCG(TOP_K, per_user=True), other)
    reference_a, reference_b = _reference_rows(batches)["ndcg"], _reference_rows(other)["ndcg"]
    got = R.paired_test(ndcg_a, ndcg_b, k=3)
    kept = ~np.isnan(reference_a[:, 1])
    assert got.num_users == kept.sum()
    assert got.p_value == pytest.approx(sps.ttest_rel(reference_a[kept, 1], reference_b[kept, 1]).pvalue, abs=1e-9)
    with pytest.raises(ValueError, match=re.escape("k must be one of the cut-offs [1, 3, 8]")):
        R.paired_test(ndcg_a, ndcg_b)
    many_a = _fed(R.RankingMetrics(TOP_K, ["ndcg", "mrr"], per_user=True), batches)
    many_b = _fed(R.RankingMetrics(TOP_K, ["ndcg", "mrr"], per_user=True), other)
    assert R.paired_test(many_a, many_b, k="ndcg@3") == got
    with pytest.raises(ValueError, match="k must name one of"):
        R.paired_test(many_a, many_b, k=3)
    single_a = _fed(R.RPrecision(per_user=True), batches)
    single_b = _fed(R.RPrecision(per_user=True), other)
    reference_a, reference_b = _reference_rows(batches)["r_precision"], _reference_rows(other)["r_precision"]
    kept = ~np.isnan(reference_a)
    assert R.paired_test(single_a, single_b).p_value == pytest.approx(
        sps.ttest_rel(reference_a[kept], reference_b[kept]).pvalue, abs=1e-9
    )


def _exact_sign_flip_p(d):
    observed = abs(d.sum())
    flips = np.array(list(itertools.product([-1.0, 1.0], repeat=len(d))))
    sums = np.abs(flips @ d)
    return float((sums >= observed - 1e-9).mean())


@pytest.mark.parametrize("n", [12, 13, 14, 15, 16])
def test_randomization_test_is_close_to_the_exact_enumeration(n):
    rng = np.random.default_rng(100 + n)
    a = rng.random(n)
    b = a - 0.15 * rng.random(n) + 0.1 * rng.standard_normal(n)
    exact = _exact_sign_flip_p(a - b)
    result = R.paired_test(a, b, method="randomization")
    assert result.method == "randomization" and result.num_users == n
    assert abs(result.p_value - exact) < 0.02, (result.p_value, exact)
    assert R.paired_test(a, b, method="randomization") == result  # seeded: repeatable
    assert result.mean_difference == pytest.approx((a - b).mean())


def test_randomization_counts_ties_of_binary_values():
    a = np.array([1, 1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 1], dtype=float)
    b = np.array([0, 1, 0, 0, 1, 0, 0, 1, 1, 0, 1, 0], dtype=float)
    exact = _exact_sign_flip_p(a - b)
    assert abs(R.paired_test(a, b, method="randomization", num_permutations=40000).p_value - exact) < 0.01


def test_equal_differences():
    assert R.paired_test([0.5, 0.2, 0.1], [0.5, 0.2, 0.1]).p_value == 1.0
    assert R.paired_test([0.75, 0.5, 0.25], [0.5, 0.25, 0.0]).p_value == 0.0  # exact differences


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"a": [0.1, 0.2, 0.3], "b": [0.1, 0.2]}, ValueError, "a and b must hold the same users"),
        ({"level": 1.0}, ValueError, "level must be strictly between 0 and 1"),
        ({"method": "wilcoxon"}, ValueError, "method must be one of ['t', 'randomization']"),
        ({"method": "randomization", "num_permutations": 0}, ValueError, "num_permutations"),
        ({"seed": 1.5}, TypeError, "seed must be an int"),
        ({"a": [[0.1, 0.2]], "b": [[0.1, 0.3]]}, ValueError, "a must be 1-D"),
        ({"a": ["x", "y"]}, TypeError, "a must be 1-D real"),
        ({"a": [0.1, np.nan, np.nan]}, ValueError, "at least two users"),
        ({"b": [0.1, np.inf, 0.3]}, ValueError, "b must hold finite values"),
    ],
)
def test_paired_test_bad_input(kwargs, error, message):
    args = {"a": [0.1, 0.5, 0.3], "b": [0.2, 0.2, 0.2], **kwargs}
    with pytest.raises(error, match=re.escape(message)):
        R.paired_test(**args)


# --- correct_p_values ----------------------------------------------------------------------------
def test_holm_and_bonferroni_by_hand():
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> running max 0.06
    np.testing.assert_allclose(R.correct_p_values(p, method="holm"), [0.03, 0.06, 0.06, 0.02], rtol=1e-12)
    np.testing.assert_allclose(R.correct_p_values(p, method="bonferroni"), [0.04, 0.16, 0.12, 0.02], rtol=1e-12)
    np.testing.assert_allclose(R.correct_p_values([0.3, 0.5], "bonferroni"), [0.6, 1.0])
    np.testing.assert_allclose(R.correct_p_values([0.3, 0.5], "holm"), [0.6, 0.6])
    assert R.correct_p_values([], "holm") == []


def test_correction_equals_statsmodels_if_installed():
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    p = np.random.default_rng(0).random(12) ** 3
    for method in ("holm", "bonferroni"):
        np.testing.assert_allclose(R.correct_p_values(p, method), multitest.multipletests(p, method=method)[1])


@pytest.mark.parametrize(
    "p_values, method, error, message",
    [
        ([0.1, 1.2], "holm", ValueError, "p_values must lie in [0, 1]"),
        ([0.1, np.nan], "holm", ValueError, "p_values must lie in [0, 1]"),
        ([[0.1]], "holm", ValueError, "p_values must be 1-D"),
        ("0.1", "holm", TypeError, "p_values must be a sequence"),
        ([0.1], "fdr", ValueError, "method must be one of ['holm', 'bonferroni']"),
    ],
)
def test_correction_bad_input(p_values, method, error, message):
    with pytest.raises(error, match=re.escape(message)):
        R.correct_p_values(p_values, method)


# --- The worked example of docs/statistics.md runs and prints the table shown there -----------------
def test_statistics_page_example_prints_its_table(capsys):
    import pathlib

    page = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "statistics.md").read_text()
    code = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    shown = re.search(r"```text\n(.*?)```", page, re.S).group(1)
    exec(compile(code, "statistics.md", "exec"), {})
    assert capsys.readouterr().out == shown


def test_statistics_page_examples_print_what_the_page_shows(capsys):
    """Every Python block of the page, run in order in one namespace, prints the text block that
    follows it (groups, user ids and Paired reuse the worked example's data)."""
    import pathlib

    page = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "statistics.md").read_text()
    blocks = re.findall(r"```(python|text)\n(.*?)```", page, re.S)
    kinds = [kind for kind, _ in blocks]
    assert kinds == ["python", "text"] * (len(blocks) // 2) and len(blocks) >= 10
    namespace = {}
    for (_, code), (_, shown) in zip(blocks[::2], blocks[1::2]):
        exec(compile(code, "statistics.md", "exec"), namespace)
        assert capsys.readouterr().out == shown
    # the streamed comparison equals paired_test on the per-user values of the worked example
    streamed = namespace["comparison"].compute()
    for key, name in (("ndcg@10", "NDCG@10"), ("recall@10", "Recall@10")):
        assert streamed[key].p_value == pytest.approx(namespace["tests"][name].p_value, abs=1e-9)
        assert streamed[key].mean_difference == pytest.approx(namespace["tests"][name].mean_difference, abs=1e-12)
