"""Beyond-accuracy (coverage, Gini, entropy, popularity, tail, novelty) and score-based metrics
(GAUC, AUC, LogLoss, MAE, RMSE) against numpy/scikit-learn references and the worked numbers."""

import math
import re

import numpy as np
import pytest
import torch
from sklearn.metrics import log_loss, mean_absolute_error, mean_squared_error, roc_auc_score

import ignite_recsys as R
import references as ref
from conftest import eager_error, random_batch, run_metric

# The conventions reference cases (section 3c/3d): top-2 lists [0,1], [0,2], [0,1]; 5 items.
LIST_SCORES = torch.tensor([[5.0, 4, 0, 0, 0], [5, 0, 4, 0, 0], [5, 4, 0, 0, 0]])
LIST_BATCH = (LIST_SCORES, torch.zeros(3, 5))
TRAIN_COUNTS = torch.tensor([10, 5, 2, 1, 1])
AUC_BATCH = (
    torch.tensor([[4.0, 3, 2, 1], [4, 3, 2, 1], [2, 2, 1, 1]]),
    torch.tensor([[0, 1, 0, 1], [1, 0, 0, 0], [1, 0, 1, 0]]),
)


@pytest.mark.parametrize(
    "make,expected",
    [
        (lambda: R.ItemCoverage(2), 0.6),
        (lambda: R.ItemCoverage(2, num_items=6), None),  # RecBole's [PAD]-counted item_num: 3/6
        (lambda: R.ItemCoverage(2, convention="elliot"), 3.0),
        (lambda: R.GiniIndex(2), 0.5333),
        (lambda: R.GiniIndex(2, convention="elliot"), 0.3333),
        (lambda: R.ShannonEntropy(2), 0.3371),
        (lambda: R.ShannonEntropy(2, convention="log2"), 1.4591),
        (lambda: R.AveragePopularity(2, TRAIN_COUNTS), 7.0),
        (lambda: R.TailPercentage(2, TRAIN_COUNTS), 0.0),
        (lambda: R.TailPercentage(2, TRAIN_COUNTS, tail_ratio=0.6), 0.1667),
        (lambda: R.Novelty(2, TRAIN_COUNTS), 1.6463),
    ],
)
def test_reference_beyond_accuracy_numbers(make, expected):
    metric = make()
    if isinstance(metric, R.ItemCoverage) and metric.num_items == 6:
        # a sixth, never-scored [PAD] column as RecBole has it: its coverage is 0.5
        metric.update((torch.cat([LIST_SCORES, torch.full((3, 1), -1.0)], 1), torch.zeros(3, 6)))
        assert metric.compute() == [0.5]
        return
    metric.update(LIST_BATCH)
    assert metric.compute() == pytest.approx([expected], abs=5e-5)


def test_reference_gini_with_pad_item():
    metric = R.GiniIndex(2)
    metric.update((torch.cat([LIST_SCORES, torch.full((3, 1), -1.0)], 1), torch.zeros(3, 6)))
    assert metric.compute() == pytest.approx([0.6111], abs=5e-5)


def test_reference_auc_numbers():
    assert run_metric(R.GAUC(), [AUC_BATCH]) == 0.5
    assert run_metric(R.GAUC(weighting="uniform"), [AUC_BATCH]) == pytest.approx(0.5833, abs=5e-5)
    assert run_metric(R.AUC(), [AUC_BATCH]) == 0.5


def test_tail_items_follow_recbole_rule():
    popularity = torch.tensor([10, 5, 2, 1, 1])
    assert R.TailPercentage(2, popularity, tail_ratio=0.1).tail_items.tolist() == [3]
    assert R.TailPercentage(2, popularity, tail_ratio=0.6).tail_items.tolist() == [2, 3, 4]
    assert R.TailPercentage(2, popularity, tail_ratio=2).tail_items.tolist() == [2, 3, 4]
    with_unseen = torch.tensor([10, 0, 2, 1, 1])
    assert R.TailPercentage(2, with_unseen, tail_ratio=2).tail_items.tolist() == [2, 3, 4]
    assert R.TailPercentage(2, with_unseen, tail_ratio=2, unseen_items_are_tail=True).tail_items.tolist() == [
        1,
        2,
        3,
        4,
    ]


# --- Random inputs against the references ------------------------------------------------------
TOP_K = [1, 3, 10, 40]  # 40 > the 30 items: the whole list


def _random_lists(rng, ties):
    batches = [random_batch(rng, users, 30, ties=ties) for users in (7, 1, 12)]
    popularity = torch.from_numpy(rng.integers(0, 6, size=30) * rng.integers(0, 2, size=30))
    return batches, popularity


@pytest.mark.parametrize("ties", [False, True])
def test_catalog_and_popularity_metrics_equal_reference(rng, ties):
    batches, popularity = _random_lists(rng, ties)
    scores = np.concatenate([b[0].numpy() for b in batches])
    pop = popularity.tolist()
    total = sum(pop)
    smoothed = [p + 1 for p in pop]
    for tail_ratio in (0.1, 0.5, 3):
        tail = ref.recbole_tail_items(pop, tail_ratio)
        got = run_metric(R.TailPercentage(TOP_K, popularity, tail_ratio=tail_ratio), batches)
        expected = [ref.mean_item_value(ref.top_lists(scores, k), lambda i: i in tail) for k in TOP_K]
        np.testing.assert_allclose(got, expected, atol=1e-12)
    for k, cov, cov_count, gini, gini_e, ent, ent2, pop_mean, nov in zip(
        TOP_K,
        run_metric(R.ItemCoverage(TOP_K), batches),
        run_metric(R.ItemCoverage(TOP_K, convention="elliot"), batches),
        run_metric(R.GiniIndex(TOP_K), batches),
        run_metric(R.GiniIndex(TOP_K, convention="elliot"), batches),
        run_metric(R.ShannonEntropy(TOP_K), batches),
        run_metric(R.ShannonEntropy(TOP_K, convention="log2"), batches),
        run_metric(R.AveragePopularity(TOP_K, popularity), batches),
        run_metric(R.Novelty(TOP_K, popularity + 1), batches),
    ):
        lists = ref.top_lists(scores, k)
        assert cov == pytest.approx(ref.coverage(lists, 30), abs=1e-12)
        assert cov_count == ref.coverage(lists, 30, "elliot")
        assert gini == pytest.approx(ref.gini(lists, 30), abs=1e-12)
        assert gini_e == pytest.approx(ref.gini(lists, 30, "elliot"), abs=1e-12)
        assert ent == pytest.approx(ref.entropy(lists, 30), abs=1e-12)
        assert ent2 == pytest.approx(ref.entropy(lists, 30, "log2"), abs=1e-12)
        assert pop_mean == pytest.approx(ref.mean_item_value(lists, lambda i: pop[i]), abs=1e-12)
        expected_novelty = ref.mean_item_value(lists, lambda i: -math.log2(smoothed[i] / (total + 30)))
        assert nov == pytest.approx(expected_novelty, abs=1e-12)


def _sklearn_gauc(scores, labels, weighting):
    values, weights = [], []
    for row_scores, row_labels in zip(scores, labels):
        candidate = row_scores > -np.inf
        positive = row_labels[candidate] >= 1
        if positive.all() or not positive.any():
            continue
        values.append(roc_auc_score(positive, row_scores[candidate]))
        weights.append(positive.sum() if weighting == "positives" else 1)
    return float(np.average(values, weights=weights))


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("weighting", ["positives", "uniform"])
def test_gauc_equals_sklearn_per_user(rng, ties, weighting):
    batches = [random_batch(rng, 20, 40, graded=True, ties=ties, zero_users=2) for _ in range(3)]
    batches[0][1][3] = 1  # a user with only positives: no AUC, left out
    batches[1][0][:, :5] = float("-inf")  # masked items are not candidates
    scores = np.concatenate([b[0].numpy() for b in batches]).astype(np.float64)
    labels = np.concatenate([b[1].numpy() for b in batches])
    got = run_metric(R.GAUC(weighting=weighting), batches)
    assert got == pytest.approx(_sklearn_gauc(scores, labels, weighting), abs=1e-12)


def test_gauc_uniform_equals_torchmetrics_when_every_user_has_both_classes(rng):
    from torchmetrics.retrieval import RetrievalAUROC

    scores, labels = random_batch(rng, 25, 30, ties=True, relevant_share=0.4)
    labels[:, 0], labels[:, 1] = 1, 0
    expected = RetrievalAUROC()(
        scores.flatten(), labels.flatten().bool(), indexes=torch.arange(25).repeat_interleave(30)
    )
    assert run_metric(R.GAUC(weighting="uniform"), [(scores, labels)]) == pytest.approx(expected.item(), abs=1e-6)


def test_auc_exact_on_discrete_scores(rng):
    batches = [random_batch(rng, 15, 20, ties=True) for _ in range(3)]
    mask = torch.from_numpy(rng.random((15, 20)) < 0.7)
    metric = R.AUC()
    for index, (scores, labels) in enumerate(batches):
        metric.update((scores, labels, R.Observed(mask)) if index == 1 else (scores, labels))
    pooled_scores = torch.cat([batches[0][0].flatten(), batches[1][0][mask], batches[2][0].flatten()])
    pooled_labels = torch.cat([batches[0][1].flatten(), batches[1][1][mask], batches[2][1].flatten()])
    assert metric.error_bound() == 0.0
    assert metric.compute() == pytest.approx(roc_auc_score(pooled_labels >= 1, pooled_scores), abs=1e-12)


def test_auc_within_its_error_bound_on_continuous_scores(rng):
    logits = torch.from_numpy(rng.normal(size=(200, 500)))
    labels = (torch.from_numpy(rng.random((200, 500))) < torch.sigmoid(logits)).float()
    expected = roc_auc_score(labels.flatten().numpy(), logits.flatten().numpy())
    for bits, largest_bound in ((20, 1e-3), (12, 0.2)):
        metric = R.AUC(resolution_bits=bits)
        for rows in torch.arange(200).split(64):
            metric.update((logits[rows], labels[rows]))
        bound = metric.error_bound()
        assert 0 < bound < largest_bound
        assert abs(metric.compute() - expected) <= bound


def test_auc_error_bound_is_attained_inside_one_bucket():
    # 1.0 and 1.001 share a bucket at 10 bits: perfectly ordered, reported as a tie
    metric = R.AUC(resolution_bits=10)
    metric.update((torch.tensor([1.001, 1.0]), torch.tensor([1, 0])))
    assert metric.compute() == 0.5 and metric.error_bound() == 0.5
    fine = R.AUC()
    fine.update((torch.tensor([1.001, 1.0]), torch.tensor([1, 0])))
    assert fine.compute() == 1.0 and fine.error_bound() == 0.0


def test_auc_orders_negative_zero_and_infinities():
    scores = torch.tensor([-0.0, 0.0, -1e-30, float("inf"), -5.0, float("-inf")])
    labels = torch.tensor([1, 0, 0, 1, 0, 1])  # the -inf entry is not a candidate
    metric = R.AUC()
    metric.update((scores, labels))
    assert metric.compute() == pytest.approx(roc_auc_score([1, 0, 0, 1, 0], [0.0, 0.0, -1e-30, 1e30, -5.0]))


@pytest.mark.parametrize("with_mask", [False, True])
def test_pointwise_losses_equal_sklearn(rng, with_mask):
    probabilities = [torch.from_numpy(rng.random((8, 12))) for _ in range(3)]
    targets = [torch.from_numpy((rng.random((8, 12)) < 0.3).astype(np.float32)) for _ in range(3)]
    masks = [
        torch.from_numpy(rng.random((8, 12)) < 0.5) if with_mask else torch.ones(8, 12, dtype=torch.bool)
        for _ in range(3)
    ]
    probabilities[0][0, 0], probabilities[0][0, 1] = 0.0, 1.0  # clipped to eps as RecBole
    if with_mask:
        targets[1][~masks[1]] = float("nan")  # unobserved entries are never read
    batches = [(p, t, R.Observed(m)) if with_mask else (p, t) for p, t, m in zip(probabilities, targets, masks)]
    p = torch.cat([x[m] for x, m in zip(probabilities, masks)]).numpy()
    t = torch.cat([x[m] for x, m in zip(targets, masks)]).numpy()
    eps = 1e-15
    clipped = np.clip(p, eps, 1 - eps)
    expected_log_loss = float(np.mean(-(t * np.log(clipped) + (1 - t) * np.log(1 - clipped))))
    assert run_metric(R.LogLoss(), batches) == pytest.approx(expected_log_loss, rel=1e-12)
    assert run_metric(R.MAE(), batches) == pytest.approx(mean_absolute_error(t, p), rel=1e-12)
    assert run_metric(R.RMSE(), batches) == pytest.approx(math.sqrt(mean_squared_error(t, p)), rel=1e-12)
    logits = [torch.logit(x.clamp(1e-6, 1 - 1e-6)) for x in probabilities]
    logit_batches = [(lg,) + b[1:] for lg, b in zip(logits, batches)]
    q = np.clip(p, 1e-6, 1 - 1e-6)
    assert run_metric(R.LogLoss(from_logits=True), logit_batches) == pytest.approx(
        log_loss(t, q, labels=[0, 1]), rel=1e-9
    )


# --- Streaming, multi-k order, state size --------------------------------------------------------
def _all_new_metrics(popularity, top_k=(10, 1, 3), **kw):
    top_k = list(top_k)
    return {
        "coverage": lambda: R.ItemCoverage(top_k, **kw),
        "gini": lambda: R.GiniIndex(top_k, **kw),
        "entropy": lambda: R.ShannonEntropy(top_k, **kw),
        "popularity": lambda: R.AveragePopularity(top_k, popularity, **kw),
        "tail": lambda: R.TailPercentage(top_k, popularity, tail_ratio=0.3, **kw),
        "novelty": lambda: R.Novelty(top_k, popularity + 1, **kw),
        "gauc": lambda: R.GAUC(**kw),
        "auc": lambda: R.AUC(**kw),
        "mae": lambda: R.MAE(**kw),
        "rmse": lambda: R.RMSE(**kw),
        "log_loss": lambda: R.LogLoss(from_logits=True, **kw),
    }


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu_and_never_syncs(rng):
    batches, popularity = _random_lists(rng, ties=True)
    on_gpu = _all_new_metrics(popularity, device="cuda")
    gpu_batches = [(scores.cuda(), labels.cuda()) for scores, labels in batches]  # copies sync: before the check
    for name, make in _all_new_metrics(popularity).items():
        metric = on_gpu[name]()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for batch in gpu_batches:
                metric.update(batch)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert metric.compute() == pytest.approx(run_metric(make(), batches), abs=1e-12), name


def test_streaming_equals_one_batch_and_multi_k_comes_sorted(rng):
    batches, popularity = _random_lists(rng, ties=True)
    whole = (torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches]))
    singles = {k: _all_new_metrics(popularity, [k]) for k in (1, 3, 10)}
    for name, make in _all_new_metrics(popularity).items():
        streamed = run_metric(make(), batches)
        assert streamed == pytest.approx(run_metric(make(), [whole]), abs=1e-12), name
        if isinstance(streamed, list):  # ascending k, each equal to a single-k metric
            expected = [run_metric(singles[k][name](), [whole])[0] for k in (1, 3, 10)]
            assert streamed == pytest.approx(expected, abs=1e-12), name


def test_state_size_does_not_grow_with_batches(rng):
    batches, popularity = _random_lists(rng, ties=False)
    for name, make in _all_new_metrics(popularity).items():
        metric = make()
        metric.update(batches[0])
        first = {key: value.shape for key, value in _state(metric).items()}
        for batch in batches * 3:
            metric.update(batch)
        assert {key: value.shape for key, value in _state(metric).items()} == first, name
        assert all(value.dtype in (torch.float64, torch.float32) for value in _state(metric).values())


def _state(metric):
    return {key: getattr(metric, key) for key in metric._state_dict_all_req_keys}


def test_engine_gets_per_k_scalars():
    from ignite.engine import Engine

    engine = Engine(lambda e, batch: batch)
    R.GiniIndex([2, 1]).attach(engine, "gini")
    R.AveragePopularity([1, 2], TRAIN_COUNTS).attach(engine, "pop")
    R.GAUC().attach(
        engine,
        "gauc",
    )
    relevance = torch.tensor([[1, 0, 0, 0, 1], [0, 0, 1, 0, 0], [1, 1, 0, 0, 0]])
    state = engine.run([(LIST_SCORES, relevance)])
    assert state.metrics["gini@2"] == pytest.approx(0.5333, abs=5e-5)
    assert state.metrics["gini"] == [state.metrics["gini@1"], state.metrics["gini@2"]]
    assert state.metrics["pop@1"] == 10.0 and state.metrics["pop@2"] == 7.0
    # user 0: item 0 beats the 3 negatives, item 4 ties with two of them: 4/6; user 1: 3/4;
    # user 2: 1; weighted by 2, 1, 2 positives
    assert state.metrics["gauc"] == pytest.approx((2 * 4 / 6 + 3 / 4 + 2 * 1.0) / 5, abs=1e-12)


# --- Bad input -----------------------------------------------------------------------------------
TOP_K_FACTORIES = {
    "coverage": lambda: R.ItemCoverage(2),
    "coverage_sized": lambda: R.ItemCoverage(2, num_items=5),
    "gini": lambda: R.GiniIndex(2),
    "entropy": lambda: R.ShannonEntropy(2),
    "popularity": lambda: R.AveragePopularity(2, TRAIN_COUNTS),
    "tail": lambda: R.TailPercentage(2, TRAIN_COUNTS),
    "novelty": lambda: R.Novelty(2, TRAIN_COUNTS),
    "gauc": lambda: R.GAUC(),
}
_NAN = LIST_SCORES.clone()
_NAN[0, 3] = float("nan")
TOP_K_BAD = {
    "NaN score": ((_NAN, torch.zeros(3, 5)), ValueError, "NaN"),
    "1-D": ((torch.rand(5), torch.rand(5)), ValueError, "2-D"),
    "wrong width": ((torch.rand(3, 4), torch.rand(3, 4)), ValueError, "5"),
    "shapes differ": ((torch.rand(3, 5), torch.rand(3, 4)), ValueError, "same shape"),
    "complex scores": ((torch.ones(3, 5, dtype=torch.complex64), torch.zeros(3, 5)), TypeError, "floating-point"),
    "not a tuple": (torch.rand(3, 5), TypeError, "tuple"),
}


@pytest.mark.parametrize("factory", sorted(TOP_K_FACTORIES))
@pytest.mark.parametrize("case", sorted(TOP_K_BAD))
def test_top_k_metrics_reject_bad_updates_without_state_change(factory, case):
    metric = TOP_K_FACTORIES[factory]()
    metric.update(LIST_BATCH)
    before = {k: v.clone() for k, v in _state(metric).items()}
    output, error, message = TOP_K_BAD[case]
    if factory == "gauc" and case == "wrong width":
        output, error, message = ((torch.rand(3, 5), torch.full((3, 5), float("nan"))), ValueError, "NaN")
    with pytest.raises(error, match=re.escape(message)):
        metric.update(output)
    for key, value in _state(metric).items():
        assert torch.equal(before[key], value), key


POINTWISE_BAD = {
    "NaN prediction": ((torch.tensor([0.5, float("nan")]), torch.tensor([1.0, 0.0])), ValueError, "y_pred"),
    "NaN target": ((torch.tensor([0.5, 0.5]), torch.tensor([1.0, float("nan")])), ValueError, "y "),
    "shapes differ": ((torch.rand(3), torch.rand(4)), ValueError, "shape"),
    "float mask": ((torch.rand(3), torch.rand(3), torch.ones(3)), TypeError, "Observed(mask)"),
    "bare bool mask": ((torch.rand(3), torch.rand(3), torch.ones(3, dtype=torch.bool)), TypeError, "exclude"),
    "mask of another shape": (
        (torch.rand(3), torch.rand(3), R.Observed(torch.ones(4, dtype=torch.bool))),
        ValueError,
        "mask must have the shape",
    ),
    "four items": (
        (torch.rand(3), torch.rand(3), R.Observed(torch.ones(3, dtype=torch.bool)), 1),
        ValueError,
        "(y_pred, y, Observed(mask))",
    ),
    "empty": ((torch.rand(0), torch.rand(0)), ValueError, "at least one entry"),
    "integer predictions": ((torch.ones(3, dtype=torch.int64), torch.ones(3)), TypeError, "floating-point"),
}


@pytest.mark.parametrize("make", [R.MAE, R.RMSE, R.LogLoss, R.AUC], ids=lambda c: c.__name__)
@pytest.mark.parametrize("case", sorted(POINTWISE_BAD))
def test_pointwise_metrics_reject_bad_updates_without_state_change(make, case):
    metric = make()
    metric.update((torch.tensor([0.2, 0.7]), torch.tensor([0.0, 1.0])))
    before = {k: v.clone() for k, v in _state(metric).items()}
    output, error, message = POINTWISE_BAD[case]
    if make is R.AUC and case == "NaN target":
        message = "y contains"
    with pytest.raises(error, match=re.escape(message)):
        metric.update(output)
    for key, value in _state(metric).items():
        assert torch.equal(before[key], value), key


@pytest.mark.parametrize(
    "output,message",
    [
        ((torch.tensor([1.5, 0.5]), torch.tensor([1.0, 0.0])), "probabilities in [0, 1]"),
        ((torch.tensor([0.5, 0.5]), torch.tensor([2.0, 0.0])), "targets in [0, 1]"),
    ],
)
def test_log_loss_checks_its_ranges(output, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        R.LogLoss().update(output)


@pytest.mark.parametrize(
    "make,error,message",
    [
        (lambda: R.ItemCoverage(2, num_items=0), ValueError, "num_items"),
        (lambda: R.ItemCoverage(2, num_items=2.5), TypeError, "num_items"),
        (lambda: R.GiniIndex(2, convention="lorenz"), ValueError, "convention"),
        (lambda: R.ShannonEntropy(0), ValueError, "top_k"),
        (lambda: R.AveragePopularity(2, [10, 5]), TypeError, "item_popularity"),
        (lambda: R.AveragePopularity(2, torch.tensor([[1, 2]])), ValueError, "item_popularity"),
        (lambda: R.AveragePopularity(2, torch.tensor([1.0, -2.0])), ValueError, "item_popularity"),
        (lambda: R.TailPercentage(2, TRAIN_COUNTS, tail_ratio=0), ValueError, "tail_ratio"),
        (lambda: R.Novelty(2, torch.tensor([3, 0, 1]), unseen_items="error"), ValueError, "item_popularity"),
        (lambda: R.GAUC(weighting="users"), ValueError, "weighting"),
        (lambda: R.AUC(resolution_bits=30), ValueError, "resolution_bits"),
        (lambda: R.LogLoss(eps=0.7), ValueError, "eps"),
        (lambda: R.MAE(output_transform=3), TypeError, "output_transform"),
    ],
)
def test_bad_constructor_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_not_computable_messages():
    from ignite.exceptions import NotComputableError

    with pytest.raises(NotComputableError, match="at least one user"):
        R.ItemCoverage(2).compute()
    # users whose lists are all empty: no item was recommended, which the message says
    empty = R.RankedItems(torch.full((3, 5), -1))
    popularity = torch.arange(1.0, 11.0)
    listed = (R.AveragePopularity(3, popularity), R.Novelty(3, popularity), R.IntraListDiversity(3, torch.rand(10, 4)))
    for metric in (R.ItemCoverage(3, num_items=10), R.GiniIndex(3, num_items=10)) + listed:
        metric.update((empty, torch.zeros(3, 10)))
        with pytest.raises(
            NotComputableError,
            match=r"at least one user with an item in its top-k list .* every list it was given was empty",
        ):
            metric.compute()
    with pytest.raises(NotComputableError, match="both a positive and a negative"):
        run_metric(R.GAUC(), [(torch.rand(2, 3), torch.ones(2, 3))])
    with pytest.raises(NotComputableError, match="one positive and one negative"):
        run_metric(R.AUC(), [(torch.rand(4), torch.zeros(4))])
    with pytest.raises(NotComputableError, match="observed entry"):
        run_metric(R.MAE(), [(torch.rand(4), torch.rand(4), R.Observed(torch.zeros(4, dtype=torch.bool)))])


def test_catalog_size_must_stay_fixed():
    metric = R.ItemCoverage(2)
    metric.update(LIST_BATCH)
    with pytest.raises(ValueError, match=r"num_items=5 columns \(taken from the first batch\)"):
        metric.update((torch.rand(2, 6), torch.zeros(2, 6)))
    metric.reset()  # a reset frees the size again
    scores = torch.tensor([[0.0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0]])
    metric.update((scores, torch.zeros(2, 6)))
    assert metric.compute() == [4 / 6]


@pytest.mark.parametrize(
    "make,good,bad",
    [
        (lambda: R.ItemCoverage(2), LIST_BATCH, (_NAN, torch.zeros(3, 5))),
        (lambda: R.Novelty(2, TRAIN_COUNTS), LIST_BATCH, (_NAN, torch.zeros(3, 5))),
        (lambda: R.GAUC(), AUC_BATCH, (AUC_BATCH[0], AUC_BATCH[1] * float("nan"))),
        (lambda: R.AUC(), AUC_BATCH, (AUC_BATCH[0] * float("nan"), AUC_BATCH[1])),
        (lambda: R.LogLoss(), (torch.tensor([0.3]), torch.tensor([1.0])), (torch.tensor([3.0]), torch.tensor([1.0]))),
    ],
)
def test_deferred_value_check_path(monkeypatch, make, good, bad):
    """The device path (used for CUDA inputs): a bad batch adds nothing, compute() raises."""
    import ignite_recsys.metrics._state as state

    expected = eager_error(make, bad)
    metric = make()
    metric.update(good)
    before = {k: v.clone() for k, v in _state(metric).items()}
    monkeypatch.setattr(state, "values_checked_on_host", lambda device: False)  # as on CUDA: no host check
    metric.update(bad)
    after = _state(metric)
    for key in before:
        if key != "_num_invalid_updates":
            assert torch.equal(before[key], after[key]), key
    with pytest.raises(ValueError, match="1 update") as raised:
        metric.compute()
    assert f"\n- {expected}: 1 update" in str(raised.value)  # what was wrong, as a CPU update says it


@pytest.mark.parametrize("name", ["coverage", "tail", "gauc", "auc", "rmse"])
def test_state_dict_resume(rng, name):
    batches, popularity = _random_lists(rng, ties=True)
    make = _all_new_metrics(popularity)[name]
    expected = run_metric(make(), batches)
    first = make()
    first.update(batches[0])
    resumed = make()
    resumed.load_state_dict(first.state_dict())
    for batch in batches[1:]:
        resumed.update(batch)
    assert resumed.compute() == expected
