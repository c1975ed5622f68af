"""Hostile but realistic input: thresholds in the labels' precision, gains that overflow, custom
gains, unsupported dtypes and layouts, tensors that require grad. Every expected value comes
from the numpy references in ``references.py`` (or is stated by hand); every refused batch must
leave the state bit for bit as it was."""

import math

import numpy as np
import pytest
import torch

import ignite_recsys as R
from ignite_recsys import functional as F
from conftest import CUTOFF_CLASSES, random_batch, run_metric
from references import metric_means

# Every metric that compares labels with relevance_threshold, as (name, factory(threshold)).
THRESHOLD_METRICS = {
    name: (lambda t, cls=cls: cls([1, 2], relevance_threshold=t)) for name, cls in CUTOFF_CLASSES.items()
}
THRESHOLD_METRICS["ndcg_average"] = lambda t: R.NDCG([1, 2], relevance_threshold=t, ties="average")
THRESHOLD_METRICS["r_precision"] = lambda t: R.RPrecision(relevance_threshold=t)
THRESHOLD_METRICS["r_precision_average"] = lambda t: R.RPrecision(relevance_threshold=t, ties="average")
THRESHOLD_METRICS["ranking_metrics"] = lambda t: R.RankingMetrics(
    [1, 2], metrics=list(CUTOFF_CLASSES) + ["r_precision"], relevance_threshold=t
)
THRESHOLD_METRICS["gauc"] = lambda t: R.GAUC(relevance_threshold=t)
THRESHOLD_METRICS["auc"] = lambda t: R.AUC(relevance_threshold=t)


def _state(metric):
    return {key: value.clone() for key, value in next(iter(metric.state_dict().values()))[0].items()}


def _assert_refused_and_untouched(metric, good, bad, error, message):
    metric.update(good)
    before = _state(metric)
    with pytest.raises(error, match=message):
        metric.update(bad)
    after = _state(metric)
    for key in before:
        assert torch.equal(before[key], after[key]), key


def _values(result):
    if isinstance(result, dict):
        return list(result.values())
    return result if isinstance(result, list) else [result]


# --- One threshold rule: y >= t compared in y's dtype ------------------------------------------
@pytest.mark.parametrize("name", sorted(THRESHOLD_METRICS))
def test_float32_label_equal_to_the_threshold_is_relevant(name):
    # 0.7 as float32 is 0.69999998; `y >= 0.7` on float32 labels is True, so both users have one
    # relevant item, ranked first: every value is the perfect one.
    y_pred = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    y = torch.tensor([[1.0, 0.0], [0.7, 0.0]])
    assert bool((y >= 0.7).all(1).logical_or((y >= 0.7).any(1)).all())  # what a torch user writes
    metric = THRESHOLD_METRICS[name](0.7)
    metric.update((y_pred, y))
    got = _values(metric.compute())
    if name.startswith("ranking_metrics"):
        names = list(metric.compute())
        expected = [0.5 if n == "precision@2" else (2 / 3 if n == "f1@2" else 1.0) for n in names]
    elif name == "precision":
        expected = [1.0, 0.5]
    elif name == "f1":
        expected = [1.0, 2 / 3]
    else:
        expected = [1.0] * len(got)
    np.testing.assert_allclose(got, expected, atol=1e-12)


@pytest.mark.parametrize("label_dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("ties", ["stable", "average"])
def test_graded_labels_in_low_precision_match_reference_with_rounded_threshold(rng, label_dtype, ties):
    scores, _ = random_batch(rng, 12, 7, ties=ties == "average")
    grades = rng.choice([0.0, 0.3, 0.7, 1.1, 2.9], size=(12, 7))
    labels = torch.tensor(grades).to(label_dtype)
    threshold = 0.7
    rounded = float(torch.tensor(threshold, dtype=label_dtype))  # what `labels >= 0.7` compares with
    expected = metric_means(
        scores.numpy(), labels.double().numpy(), [1, 3, 7], ties=ties, threshold=rounded, gain_kind="linear_rank"
    )
    for name, cls in CUTOFF_CLASSES.items():
        kwargs = {"gain_function": "linear_rank"} if name == "ndcg" else {}
        if name == "map" and ties == "average":
            kwargs["normalization"] = "relevant"
            reference = metric_means(
                scores.numpy(), labels.double().numpy(), [1, 3, 7], ties=ties, threshold=rounded, map_norm="relevant"
            )["map"]
        else:
            reference = expected[name]
        got = run_metric(cls([1, 3, 7], relevance_threshold=threshold, ties=ties, **kwargs), [(scores, labels)])
        np.testing.assert_allclose(got, reference, atol=1e-12, err_msg=name)
    got = run_metric(R.RPrecision(relevance_threshold=threshold, ties=ties), [(scores, labels)])
    assert got == pytest.approx(expected["r_precision"], abs=1e-12)


@pytest.mark.parametrize(
    "label_dtype,threshold,effective",
    [
        (torch.int64, 1.5, 2),  # an integer label is >= 1.5 iff it is >= 2
        (torch.int8, 200, math.inf),  # above int8's range: nothing is relevant (no wrap-around)
        (torch.uint8, 300, math.inf),
        (torch.uint8, 2, 2),
        (torch.bool, 1.0, 1),
        (torch.bool, 1.5, math.inf),
    ],
)
def test_integer_and_bool_labels_compare_exactly(rng, label_dtype, threshold, effective):
    scores, _ = random_batch(rng, 10, 6)
    top = 1 if label_dtype == torch.bool else (100 if label_dtype == torch.int8 else 250)
    raw = rng.integers(0, 3, size=(10, 6)) * (top // 2)
    if label_dtype == torch.bool:
        raw = raw > 0
    labels = torch.tensor(raw).to(label_dtype)
    expected = metric_means(
        scores.numpy(), labels.double().numpy(), [1, 3], threshold=effective, ignore_zero_hits=False
    )
    got = run_metric(R.Recall([1, 3], relevance_threshold=threshold, ignore_zero_hits=False), [(scores, labels)])
    np.testing.assert_allclose(got, expected["recall"], atol=1e-12)
    got = run_metric(R.HitRate([1, 3], relevance_threshold=threshold, ignore_zero_hits=False), [(scores, labels)])
    np.testing.assert_allclose(got, expected["hit_rate"], atol=1e-12)


@pytest.mark.parametrize("ties", ["stable", "average"])
def test_threshold_none_counts_every_positive_label(rng, ties):
    scores, _ = random_batch(rng, 15, 8, ties=ties == "average")
    grades = rng.choice([-1.0, 0.0, 1e-30, 0.25, 0.5, 3.0], size=(15, 8))
    labels = torch.tensor(grades, dtype=torch.float64)
    smallest_positive = 1e-30  # y > 0 among these values is y >= 1e-30
    expected = metric_means(
        scores.numpy(),
        grades,
        [1, 4],
        ties=ties,
        threshold=smallest_positive,
        gain_kind="linear_rank",
        map_norm="relevant",
    )
    for name, cls in CUTOFF_CLASSES.items():
        kwargs = {"gain_function": "linear_rank"} if name == "ndcg" else {}
        if name == "map":
            kwargs["normalization"] = "relevant"
        got = run_metric(cls([1, 4], relevance_threshold=None, ties=ties, **kwargs), [(scores, labels)])
        np.testing.assert_allclose(got, expected[name], atol=1e-12, err_msg=name)


def test_exp_rank_shifted_needs_a_numeric_threshold():
    with pytest.raises(ValueError, match="exp_rank_shifted"):
        R.NDCG(5, relevance_threshold=None, gain_function="exp_rank_shifted")


def test_negative_labels_are_not_relevant(rng):
    scores, _ = random_batch(rng, 20, 9)
    grades = rng.choice([-3.0, -1.0, 0.0, 1.0, 2.0], size=(20, 9))
    expected = metric_means(scores.numpy(), grades, [1, 3, 9], ignore_zero_hits=False)
    for name, cls in CUTOFF_CLASSES.items():
        got = run_metric(cls([1, 3, 9], ignore_zero_hits=False), [(scores, torch.tensor(grades))])
        np.testing.assert_allclose(got, expected[name], atol=1e-12, err_msg=name)


def test_plus_inf_labels_are_relevant_and_refused_where_gains_weigh(rng):
    """+inf is a label above every threshold: relevant in the metrics that count relevant items
    (the values of the same labels at 1), and refused, state untouched, where its gain weighs."""
    scores = torch.from_numpy(rng.permutation(4 * 30).reshape(4, 30).astype(np.float32))
    grades = (rng.random((4, 30)) < 0.2).astype(np.float64)
    grades[:, 0] = 1.0
    labels = torch.tensor(np.where(grades > 0, np.inf, 0.0), dtype=torch.float32)
    counting = [name for name in CUTOFF_CLASSES if name != "ndcg"]
    expected = metric_means(scores.numpy(), grades, [1, 3, 50])
    got = run_metric(R.RankingMetrics([1, 3, 50], metrics=counting), [(scores, labels)])
    for name in counting:
        np.testing.assert_allclose([got[f"{name}@{k}"] for k in (1, 3, 50)], expected[name], atol=1e-12, err_msg=name)
    weighed = R.RankingMetrics([1, 3, 50])
    weighed.update((scores, torch.tensor(grades)))
    before = weighed.compute()
    with pytest.raises(ValueError, match="infinite label has an infinite gain"):
        weighed.update((scores, labels))
    assert weighed.compute() == before
    cascade = R.ERR([3])  # ERR takes no gain_function: the message says where one can be passed
    with pytest.raises(ValueError, match=r"gain 'exp_rank' .*, or pass another gain_function where the metric takes"):
        cascade.update((scores, labels))
    linear = R.RankingMetrics([1, 3, 50], metrics=["ndcg", "rbp"], gain_function="linear_rank")
    with pytest.raises(ValueError, match=r"'linear_rank' \(an infinite label has an infinite gain\)"):
        linear.update((scores, labels))  # the message blames no overflow of 2**y


@pytest.mark.parametrize("items", [9, 30_011])  # 30k: the strided label pass and the group selection
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"ties": "average"},
        {"gain_function": "linear_rank"},
        {"gain_function": "exp_rank_shifted", "relevance_threshold": 2.0},
    ],
)
def test_minus_inf_labels_are_negative_labels(rng, items, options):
    """-inf is a negative label: never relevant, no NaN gain, the same values as the reference."""
    users = 4
    tied = options.get("ties") and items < 100  # the reference enumerates the orderings of tied scores
    scores = torch.from_numpy(rng.permutation(users * items).reshape(users, items).astype(np.float32))
    if tied:
        scores = torch.from_numpy(rng.integers(0, 3, size=(users, items)).astype(np.float32))
    grades = np.where(rng.random((users, items)) < 0.5, -np.inf, 0.0)
    best = rng.integers(0, items, size=(users, 3))
    for user in range(users):
        grades[user, best[user]] = rng.choice([1.0, 2.0, 3.0], size=3)
    grades[:, :2] = -np.inf  # also among the ranked positions of ties and of the ideal's fill
    threshold = options.get("relevance_threshold", 1.0)
    gain_kind = options.get("gain_function", "exp_rank")
    # distinct scores (the large case): the tie-averaged values are the stable ones
    expected = metric_means(
        scores.numpy(),
        grades,
        [1, 3, 50],
        ties="average" if tied else "stable",
        threshold=threshold,
        gain_kind=gain_kind,
    )
    labels = torch.tensor(grades, dtype=torch.float32)
    metric = R.RankingMetrics([1, 3, 50], metrics=list(CUTOFF_CLASSES), **options)
    got = run_metric(metric, [(scores, labels)])
    for name in CUTOFF_CLASSES:
        np.testing.assert_allclose([got[f"{name}@{k}"] for k in (1, 3, 50)], expected[name], atol=1e-12, err_msg=name)
    sparse = labels.masked_fill(labels == 0, -1.0).to_sparse_csr()  # stored -inf entries
    got_sparse = run_metric(metric, [(scores, sparse)])
    for name in CUTOFF_CLASSES:
        np.testing.assert_allclose(
            [got_sparse[f"{name}@{k}"] for k in (1, 3, 50)], expected[name], atol=1e-12, err_msg=f"{name} (CSR targets)"
        )


@pytest.mark.parametrize("threshold", [1e300, 1.7e308])
def test_shifted_gain_of_minus_inf_labels_under_a_threshold_near_the_float64_limit(rng, threshold):
    """exp_rank_shifted subtracts the threshold from every label: for -inf labels next to a huge
    threshold that difference overflows, yet the gain of a label that is not relevant is 0."""
    users, items = 6, 7
    scores, _ = random_batch(rng, users, items)
    grades = rng.choice([-np.inf, 0.0, threshold], size=(users, items))
    grades[:, 0] = threshold  # every user has a relevant item
    grades[:, 1] = -np.inf
    expected = metric_means(scores.numpy(), grades, [1, 3, 7], threshold=threshold, gain_kind="exp_rank_shifted")
    metric = R.NDCG([1, 3, 7], gain_function="exp_rank_shifted", relevance_threshold=threshold)
    got = run_metric(metric, [(scores, torch.tensor(grades, dtype=torch.float64))])
    np.testing.assert_allclose(got, expected["ndcg"], atol=1e-12)
    assert 0.0 < min(got) < 1.0  # the case ranks relevant items below others


# --- Gains that overflow, custom gains ---------------------------------------------------------
@pytest.mark.parametrize("ties", ["stable", "average"])
@pytest.mark.parametrize("label", [1024.0, 5000.0, math.inf])
def test_overflowing_gain_is_refused_with_state_untouched(ties, label):
    good = (torch.tensor([[0.3, 0.1, 0.9, 0.2]]), torch.tensor([[0.0, 1.0, 1.0, 0.0]]))
    # with ties="average" the huge label sits outside the top 1 but in its tie group
    y_pred = torch.tensor([[0.9, 0.5, 0.5, 0.1]])
    y = torch.tensor([[1.0, 0.0, label, 0.0]], dtype=torch.float64)
    metric = R.NDCG([1], ties=ties)
    _assert_refused_and_untouched(metric, good, (y_pred, y), ValueError, "infinite or NaN gain")
    metric.update(good)
    assert all(math.isfinite(v) for v in metric.compute())


def test_linear_gain_of_large_labels_is_finite_and_exact(rng):
    scores, _ = random_batch(rng, 6, 5)
    grades = rng.choice([0.0, 1500.0, 3000.0], size=(6, 5))
    expected = metric_means(scores.numpy(), grades, [2, 5], gain_kind="linear_rank")["ndcg"]
    got = run_metric(R.NDCG([2, 5], gain_function="linear_rank"), [(scores, torch.tensor(grades))])
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_exp_rank_just_below_overflow_is_exact():
    y_pred = torch.tensor([[0.1, 0.9]])
    y = torch.tensor([[1023.0, 1.0]], dtype=torch.float64)
    expected = (1 / math.log2(2) + (2.0**1023 - 1) / math.log2(3)) / ((2.0**1023 - 1) / math.log2(2) + 1 / math.log2(3))
    assert run_metric(R.NDCG([2]), [(y_pred, y)]) == pytest.approx([expected], rel=1e-12)


GOOD = (
    torch.tensor([[0.3, 0.1, 0.9, 0.2], [0.5, 0.4, 0.3, 0.2]]),
    torch.tensor([[0.0, 1.0, 2.0, 0.0], [1.0, 0.0, 0.0, 3.0]]),
)


@pytest.mark.parametrize(
    "gain,error,message",
    [
        (lambda y: torch.full_like(y, float("nan")), ValueError, "infinite or NaN gain"),
        (lambda y: y / 0.0, ValueError, "infinite or NaN gain"),
        (lambda y: -y, ValueError, "negative gain"),
        (lambda y: torch.ones(y.shape[1], dtype=y.dtype), ValueError, "one gain per relevance value"),
        (lambda y: y.sum(), ValueError, "one gain per relevance value"),
        (lambda y: y.tolist(), TypeError, "must return a torch.Tensor"),
        (lambda y: y > 0, TypeError, "real gains"),
    ],
)
@pytest.mark.parametrize("ties", ["stable", "average"])
def test_custom_gain_output_is_checked(gain, error, message, ties):
    class Switch:  # a gain function that turns bad after the first update
        turned = None

        def __call__(self, y):
            return y if self.turned is None else self.turned(y)

    switch = Switch()
    metric = R.NDCG([1, 3], gain_function=switch, ties=ties)
    metric.update(GOOD)
    before = _state(metric)
    switch.turned = gain
    with pytest.raises(error, match=message):
        metric.update(GOOD)
    for key, value in _state(metric).items():
        assert torch.equal(before[key], value), key


@pytest.mark.parametrize(
    "discount, position, weight",
    [
        (lambda p: torch.where(p == 5, torch.inf, 1 / p), 5, "inf"),
        (lambda p: torch.where(p >= 7, -1.0, 1 / p), 7, "-1.0"),
    ],
)
def test_custom_discount_is_checked_at_every_position_used(discount, position, weight):
    """A callable discount is checked up to the largest cut-off (it was checked at positions 1-4
    only: infinite at 5 gave DCG NaN and NDCG 0, negative from 7 an NDCG below the truth); a
    discount only used where it is sound gives the numpy values of its weights 1 / p."""
    scores, labels = GOOD
    message = rf"discount must give finite weights >= 0, got {weight} at position {position}"
    for build in (
        lambda: R.NDCG([10], discount=discount),
        lambda: R.DCG([2, 10], discount=discount),
        lambda: R.RankingMetrics([10], ["ndcg"], discount=discount),
        lambda: F.ndcg(scores, labels, 10, discount=discount),
        lambda: F.ranking_metrics(scores, labels, [3, 10], ["dcg"], discount=discount),
    ):
        with pytest.raises(ValueError, match=message):
            build()
    gains = 2.0 ** labels.numpy() - 1
    order = np.argsort(-scores.numpy(), axis=1, kind="stable")
    dcg = (np.take_along_axis(gains, order, 1)[:, :4] / np.arange(1, 5)).sum(1)
    ideal = (-np.sort(-gains, axis=1)[:, :4] / np.arange(1, 5)).sum(1)
    np.testing.assert_allclose(F.ndcg(scores, labels, 4, discount=discount)[:, 0].numpy(), dcg / ideal, atol=1e-12)


@pytest.mark.parametrize("form", ["dense", "csr", "item_ids"])
def test_a_custom_gain_in_any_order_of_the_labels_has_the_best_ranking_as_its_ideal(rng, form):
    """A gain that falls as the label grows (10 - y): the ideal DCG is that of the gains sorted,
    not of the labels sorted (which gave NDCG 1.14 at k = 1 for labels 3, 2 ranked 2 first).
    numpy from the definition: DCG of the ranking over the largest DCG any ranking reaches."""
    scores = torch.from_numpy(rng.permutation(6 * 40).reshape(6, 40).astype(np.float64))
    grades = np.where(rng.random((6, 40)) < 0.3, rng.integers(1, 5, size=(6, 40)), 0).astype(np.float64)
    grades[:, 0] = 4.0  # every user has a relevant item
    gain = 10.0 - grades
    weights = 1 / np.log2(np.arange(2, 42))
    order = np.argsort(-scores.numpy(), axis=1, kind="stable")
    got_gains = np.where(grades >= 1, gain, 0.0)
    expected = []
    for k in (1, 2, 5, 40):
        dcg = (np.take_along_axis(got_gains, order, 1)[:, :k] * weights[:k]).sum(1)
        ideal = (-np.sort(-got_gains, axis=1)[:, :k] * weights[:k]).sum(1)
        expected.append(dcg / ideal)
    expected = np.stack(expected, 1)
    labels = torch.tensor(grades)
    target = {"dense": labels, "csr": labels.to_sparse_csr(), "item_ids": None}[form]
    if form == "item_ids":
        width = int((grades > 0).sum(1).max())
        ids = torch.full((6, width), -1, dtype=torch.int64)
        values = torch.zeros(6, width, dtype=torch.float64)
        for user in range(6):
            items = np.flatnonzero(grades[user])
            ids[user, : len(items)], values[user, : len(items)] = torch.tensor(items), torch.tensor(grades[user, items])
        target = R.ItemIds(ids, values)
    per_user = F.ndcg(scores, target, [1, 2, 5, 40], gain_function=lambda y: 10.0 - y)
    np.testing.assert_allclose(per_user.numpy(), expected, atol=1e-12)
    assert (per_user <= 1.0).all()


def test_custom_gain_matches_reference(rng):
    scores, _ = random_batch(rng, 10, 6)
    grades = rng.choice([0.0, 1.0, 2.0, 3.0], size=(10, 6))
    expected = metric_means(scores.numpy(), grades, [1, 3], gain_kind=lambda r: r**2 + 1)["ndcg"]
    got = run_metric(R.NDCG([1, 3], gain_function=lambda y: y**2 + 1), [(scores, torch.tensor(grades))])
    np.testing.assert_allclose(got, expected, atol=1e-12)


# --- Unsupported dtypes and layouts: a clear TypeError at the check ----------------------------
ALL_FACTORIES = {
    "ndcg": lambda: R.NDCG([1, 3]),
    "ranking_metrics": lambda: R.RankingMetrics([1, 3], metrics=list(CUTOFF_CLASSES) + ["r_precision"]),
    "r_precision": lambda: R.RPrecision(),
    "item_coverage": lambda: R.ItemCoverage([1, 3]),
    "novelty": lambda: R.Novelty([1, 3], item_popularity=torch.tensor([3.0, 1.0, 2.0, 5.0])),
    "gauc": lambda: R.GAUC(),
    "auc": lambda: R.AUC(),
    "mae": lambda: R.MAE(),
    "log_loss": lambda: R.LogLoss(),
}
GOOD_01 = (torch.tensor([[0.3, 0.1, 0.9, 0.2]]), torch.tensor([[0.0, 1.0, 1.0, 0.0]]))


def _unsupported_inputs():
    y_pred, y = GOOD_01
    cases = {}
    for dtype in (torch.uint16, torch.uint32, torch.uint64):
        cases[f"y {dtype}"] = ((y_pred, y.to(dtype)), TypeError, rf"y must hold .*got dtype {dtype}")
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        cases[f"y_pred {dtype}"] = ((y_pred.to(dtype), y), TypeError, rf"y_pred must hold .*got dtype {dtype}")
        cases[f"y {dtype}"] = ((y_pred, y.to(dtype)), TypeError, rf"y must hold .*got dtype {dtype}")
    cases["y_pred sparse coo"] = ((y_pred.to_sparse(), y), TypeError, "y_pred must be a dense")
    cases["y_pred sparse csr"] = ((y_pred.to_sparse_csr(), y), TypeError, "y_pred must be a dense")
    cases["y_pred quantized"] = (
        (torch.quantize_per_tensor(y_pred, 0.1, 0, torch.quint8), y),
        TypeError,
        "y_pred must",
    )
    return cases


UNSUPPORTED = _unsupported_inputs()


@pytest.mark.parametrize("factory", sorted(ALL_FACTORIES))
@pytest.mark.parametrize("case", sorted(UNSUPPORTED))
def test_unsupported_dtype_or_layout_is_a_clear_type_error(factory, case):
    output, error, message = UNSUPPORTED[case]
    _assert_refused_and_untouched(ALL_FACTORIES[factory](), GOOD_01, output, error, message)


# --- Tensors that require grad -----------------------------------------------------------------
@pytest.mark.parametrize("factory", sorted(ALL_FACTORIES))
def test_inputs_that_require_grad_are_accepted_and_leave_no_graph(factory):
    y_pred, y = GOOD_01
    plain = ALL_FACTORIES[factory]()
    plain.update((y_pred, y))
    y_pred_grad = (y_pred * 1.0).requires_grad_()
    y_grad = (y * 1.0).requires_grad_()
    metric = ALL_FACTORIES[factory]()
    metric.update((y_pred_grad * 1.0, y_grad * 1.0))  # non-leaf tensors with a graph behind them
    assert metric.compute() == plain.compute()
    for key, value in _state(metric).items():
        assert not value.requires_grad and value.grad_fn is None, key
    for name, value in vars(metric).items():
        if isinstance(value, torch.Tensor):
            assert value.grad_fn is None, name


# --- Sparse tensors with entries outside their shape -------------------------------------------
def _sparse_outside():
    """Sparse targets and exclusions whose stored entries lie outside their (batch, num_items)
    shape: torch's constructors do not check indices by default, so item 7 of a 4-item catalog
    counted as relevant (Recall@2 0.75) and a negative index crashed in an IndexError."""
    coo = torch.sparse_coo_tensor
    cases = {
        "y csr column past": (
            "y",
            torch.sparse_csr_tensor(torch.tensor([0, 1]), torch.tensor([7]), torch.ones(1), (1, 4)),
        ),
        "y coo column past": ("y", coo(torch.tensor([[0], [4]]), torch.ones(1), (1, 4))),
        "y coo column negative": ("y", coo(torch.tensor([[0], [-2]]), torch.ones(1), (1, 4))),
        "y coo row past": ("y", coo(torch.tensor([[1], [2]]), torch.ones(1), (1, 4))),
        "exclude coo column past": ("exclude", coo(torch.tensor([[0], [9]]), torch.tensor([True]), (1, 4))),
        "exclude csr column negative": (
            "exclude",
            torch.sparse_csr_tensor(torch.tensor([0, 1]), torch.tensor([-1]), torch.tensor([True]), (1, 4)),
        ),
    }
    return cases


SPARSE_OUTSIDE = _sparse_outside()


@pytest.mark.filterwarnings("ignore:Sparse")
@pytest.mark.parametrize("factory", ["ndcg", "ranking_metrics", "r_precision", "item_coverage", "novelty"])
@pytest.mark.parametrize("case", sorted(SPARSE_OUTSIDE))
def test_sparse_entries_outside_the_shape_are_refused(factory, case):
    role, matrix = SPARSE_OUTSIDE[case]
    y_pred, y = GOOD_01
    bad = (y_pred, matrix) if role == "y" else (y_pred, y, matrix)
    message = rf"{role} \(sparse\) holds an entry outside its \(batch, num_items\) shape"
    _assert_refused_and_untouched(ALL_FACTORIES[factory](), GOOD_01, bad, ValueError, message)


def test_a_refused_first_batch_leaves_the_first_batch_warnings_to_the_next():
    """The warnings that look at the first batch (here: integral scores beside fractional labels,
    as if swapped) look at the first batch accepted: a refused one used them up."""
    suspicious = (torch.tensor([[3.0, 1.0, 2.0, 0.0]]), torch.tensor([[0.9, 0.1, 0.7, 0.2]]))
    bad = (torch.tensor([[0.3, math.nan, 0.2, 0.1]]), torch.tensor([[1.0, 0.0, 0.0, 1.0]]))
    for metric in (R.NDCG(2, relevance_threshold=None), R.RankingMetrics(2, relevance_threshold=None)):
        with pytest.raises(ValueError, match="NaN"):
            metric.update(bad)
        with pytest.warns(R.InputWarning, match="y_pred holds integral values while y holds fractional ones"):
            metric.update(suspicious)


def test_a_catalog_wider_than_2_to_the_32_is_refused_and_one_of_2_to_the_32_is_ranked_exactly():
    """Item ids are kept in 32 bits: a sparse target 2**32 + 10 wide gave user 0's item 2**32 + 7
    to user 1 as its item 7 (recall 0.5 where no item of user 1 is ranked). Such widths and
    num_items are refused, state untouched; at exactly 2**32 items the top ids are each user's own
    (recall by hand: the set of ranked ids against the set of relevant ones)."""
    wide, top = 2**32 + 10, 2**32 - 1
    ranked = R.RankedItems(torch.tensor([[5, 6], [7, 8]]))
    leaking = torch.sparse_coo_tensor(torch.tensor([[0, 1], [2**32 + 7, 100]]), torch.ones(2), (2, wide))
    metric = R.Recall([2], ignore_zero_hits=False)
    narrow = torch.zeros(2, 10)
    narrow[0, 5] = 1.0
    metric.update((ranked, narrow))
    before = metric.compute()
    with pytest.raises(ValueError, match=r"at most 2\*\*32 columns .* got 4294967306"):
        metric.update((ranked, leaking))
    assert metric.compute() == before
    for build in (
        lambda: R.Recall([2], num_items=wide),
        lambda: R.RankingMetrics([2], num_items=wide),
        lambda: R.Interactions(torch.tensor([0]), torch.tensor([1]), num_items=wide),
    ):
        with pytest.raises(ValueError, match=r"num_items must be .*2\*\*32"):
            build()
    with pytest.raises(ValueError, match=r"item id 4294967303 is 2\*\*32 or more"):
        R.Interactions(torch.tensor([0, 1]), torch.tensor([2**32 + 7, 100]))
    relevant = {0: {top, top - 2}, 1: {7}}
    lists = [[top, 3], [top - 1, 7]]
    table = R.Interactions(torch.tensor([0, 0, 1]), torch.tensor([top, top - 2, 7]), num_items=2**32)
    expected = [len(set(row) & relevant[user]) / len(relevant[user]) for user, row in enumerate(lists)]
    for target in (table.csr(torch.tensor([0, 1])), table.item_ids(torch.tensor([0, 1]))):
        got = R.functional.recall(R.RankedItems(torch.tensor(lists)), target, [2], num_items=2**32)
        assert got[:, 0].tolist() == expected  # [0.5, 1.0]
