"""Bad input, checkpoints, dtypes, properties, precision and distributed exactness."""

import re
import os
import tempfile

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from ignite.engine import Engine, Events

import ignite_recsys as R
from conftest import CUTOFF_CLASSES, eager_error, random_batch, run_metric

# Every metric class, built with arguments that exercise its full path.
FACTORIES = {name: (lambda cls=cls, **kw: cls([1, 3, 8], **kw)) for name, cls in CUTOFF_CLASSES.items()}
FACTORIES["r_precision"] = lambda **kw: R.RPrecision(**kw)
FACTORIES["ranking_metrics"] = lambda **kw: R.RankingMetrics(
    [1, 3, 8], metrics=list(CUTOFF_CLASSES) + ["r_precision"], **kw
)
FACTORIES["ndcg_average"] = lambda **kw: R.NDCG([2, 5], ties="average", gain_function="linear_rank", **kw)


def _state(metric):
    return {key: value.clone() for key, value in next(iter(metric.state_dict().values()))[0].items()}


def _good():
    return torch.tensor([[0.3, 0.1, 0.9, 0.2]]), torch.tensor([[0.0, 1.0, 1.0, 0.0]])


def _nan_scores():
    y_pred, y = _good()
    y_pred[0, 1] = float("nan")
    return y_pred, y


def _relevance_with(value):
    y_pred, y = _good()
    y = y.clone()
    y[0, 0] = value
    return y_pred, y


BAD_UPDATES = {
    "1-D": ((torch.rand(4), torch.rand(4)), ValueError, "2-D"),
    "3-D": ((torch.rand(2, 2, 4), torch.rand(2, 2, 4)), ValueError, "2-D"),
    "shapes differ": ((torch.rand(2, 4), torch.rand(2, 5)), ValueError, "same shape"),
    "empty batch": ((torch.rand(0, 4), torch.rand(0, 4)), ValueError, "at least one user"),
    "zero items": ((torch.rand(3, 0), torch.rand(3, 0)), ValueError, "at least one item"),
    "NaN score": (_nan_scores(), ValueError, "y_pred contains NaN"),
    "NaN relevance": (_relevance_with(float("nan")), ValueError, "y contains NaN relevance"),
    "not a tensor": (([[0.1, 0.2]], [[1.0, 0.0]]), TypeError, "y_pred must be a torch.Tensor"),
    "complex scores": ((torch.rand(1, 3, dtype=torch.complex64), torch.rand(1, 3)), TypeError, "floating-point"),
    "complex relevance": ((torch.rand(1, 3), torch.rand(1, 3, dtype=torch.complex64)), TypeError, "y must hold"),
    "tuple of 4": ((torch.rand(1, 3), torch.rand(1, 3), torch.rand(1, 3), torch.rand(1, 3)), ValueError, "length 4"),
    "float exclude": ((torch.rand(1, 3), torch.rand(1, 3), torch.rand(1, 3)), TypeError, "exclude must be a bool"),
    "not a tuple": (torch.rand(1, 3), TypeError, "tuple (y_pred, y)"),
}
if torch.cuda.is_available():
    BAD_UPDATES["devices differ"] = ((torch.rand(1, 3), torch.rand(1, 3, device="cuda")), ValueError, "same device")


@pytest.mark.parametrize("factory", sorted(FACTORIES))
@pytest.mark.parametrize("case", sorted(BAD_UPDATES))
def test_bad_update_raises_and_leaves_state_bit_for_bit(factory, case):
    metric = FACTORIES[factory]()
    metric.update(_good())
    before = _state(metric)
    output, error, message = BAD_UPDATES[case]
    with pytest.raises(error, match=re.escape(message)):
        metric.update(output)
    after = _state(metric)
    assert before.keys() == after.keys()
    for key in before:
        assert torch.equal(before[key], after[key]), key
    fresh = FACTORIES[factory]()
    fresh.update(_good())
    assert metric.compute() == fresh.compute()  # the failed call left no trace


BAD_ARGUMENTS = [
    (dict(top_k=0), ValueError, "positive"),
    (dict(top_k=-3), ValueError, "positive"),
    (dict(top_k=2.0), TypeError, "ints"),
    (dict(top_k=True), TypeError, "ints"),
    (dict(top_k=[]), ValueError, "at least one"),
    (dict(top_k=[5, 1, 5]), ValueError, "duplicates"),
    (dict(top_k="10"), TypeError, "top_k"),
    (dict(top_k=[1, 2.5]), TypeError, "ints"),
    (dict(top_k=5, ignore_zero_hits="yes"), TypeError, "ignore_zero_hits"),
    (dict(top_k=5, relevance_threshold=0), ValueError, "relevance_threshold"),
    (dict(top_k=5, relevance_threshold=float("nan")), ValueError, "relevance_threshold"),
    (dict(top_k=5, ties="random"), ValueError, "ties"),
]


@pytest.mark.parametrize("name", sorted(CUTOFF_CLASSES))
@pytest.mark.parametrize("kwargs,error,message", BAD_ARGUMENTS)
def test_bad_constructor_arguments(name, kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        CUTOFF_CLASSES[name](**kwargs)


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: R.NDCG(5, gain_function="exp"), "gain_function"),
        (lambda: R.MAP(5, normalization="trec"), "normalization"),
        (lambda: R.Recall(5, normalization="k"), "normalization"),
        (lambda: R.Precision(5, normalization="relevant"), "normalization"),
        (lambda: R.MAP(5, normalization="hits", ties="average"), "ties='average'"),
        (lambda: R.RankingMetrics(5, metrics=["ndcg", "auc"]), "metrics"),
        (lambda: R.RankingMetrics(5, metrics="ndcg"), "metrics"),
        (lambda: R.RankingMetrics(5, metrics=["ndcg", "ndcg"]), "duplicates"),
        (lambda: R.RankingMetrics(5, map_normalization="x"), "map_normalization"),
        (lambda: R.NDCG(5, output_transform="x"), "output_transform"),
    ],
)
def test_unknown_option_strings(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make()


def test_infinite_scores_rank_first_and_last():
    y_pred = torch.tensor([[float("-inf"), 0.5, float("inf"), 0.2]])
    y = torch.tensor([[1.0, 0.0, 1.0, 0.0]])
    assert run_metric(R.MRR([1]), [(y_pred, y)]) == [1.0]
    assert run_metric(R.Recall([3, 4]), [(y_pred, y)]) == [0.5, 1.0]


def test_deferred_value_check_path(monkeypatch):
    """The device path (used for CUDA inputs): a bad batch adds nothing, compute() raises."""
    import ignite_recsys.metrics._state as state

    expected = eager_error(lambda: R.NDCG(3), _nan_scores())
    metric = R.NDCG(3)
    metric.update(_good())
    before = _state(metric)
    monkeypatch.setattr(state, "values_checked_on_host", lambda device: False)  # as on CUDA: no host check
    metric.update(_nan_scores())
    after = _state(metric)
    assert torch.equal(before["_sum"], after["_sum"]) and torch.equal(before["_count"], after["_count"])
    named = re.escape("NDCG: 1 update(s) ") + ".*" + re.escape(f"\n- {expected}: 1 update") + "$"
    with pytest.raises(ValueError, match=named):
        metric.compute()


def test_deferred_errors_name_each_failed_check_and_its_count(monkeypatch):
    """On the device path compute() names every check that failed, with how many updates failed
    it; a reset forgets them, and so does loading a state (whose invalid updates come as a total)."""
    import ignite_recsys.metrics._state as state

    nan_labels = _relevance_with(float("nan"))
    scores_message = eager_error(lambda: R.NDCG(3), _nan_scores())
    labels_message = eager_error(lambda: R.NDCG(3), nan_labels)
    assert scores_message != labels_message
    monkeypatch.setattr(state, "values_checked_on_host", lambda device: False)
    metric = R.NDCG(3)
    for batch in (_nan_scores(), _good(), nan_labels, _nan_scores()):
        metric.update(batch)
    with pytest.raises(ValueError) as raised:
        metric.compute()
    message = str(raised.value)
    assert message.startswith("NDCG: 3 update(s) since the last reset held invalid values")
    lines = message.splitlines()
    assert lines[1:3] == [f"- {scores_message}: 2 updates", f"- {labels_message}: 1 update"], lines
    saved = metric.state_dict()
    metric.reset()
    metric.update(_good())
    assert metric.compute() == run_metric(R.NDCG(3), [_good()])
    metric.update(_nan_scores())
    loaded = R.NDCG(3)
    loaded.load_state_dict(saved)
    with pytest.raises(ValueError, match=r"3 update\(s\) .* Their checks failed on another process or before a state"):
        loaded.compute()
    metric.load_state_dict(saved)  # its own failed check is forgotten with the state it replaced
    with pytest.raises(ValueError, match="failed on another process or before a state was loaded"):
        metric.compute()


# --- Checkpoints -----------------------------------------------------------------------------
@pytest.mark.parametrize("factory", sorted(FACTORIES))
def test_state_dict_mid_stream_resume(rng, factory):
    batches = [random_batch(rng, 6, 10, graded=True, zero_users=1) for _ in range(4)]
    uninterrupted = run_metric(FACTORIES[factory](), batches)
    first = FACTORIES[factory]()
    for batch in batches[:2]:
        first.update(batch)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "metric.pt")
        torch.save(first.state_dict(), path)
        resumed = FACTORIES[factory]()
        resumed.load_state_dict(torch.load(path))
    for batch in batches[2:]:
        resumed.update(batch)
    assert resumed.compute() == uninterrupted


def test_resume_through_ignite_checkpoint_handler(rng):
    from ignite.handlers import Checkpoint, DiskSaver

    batches = [random_batch(rng, 5, 12) for _ in range(6)]
    expected = run_metric(R.RankingMetrics([2, 5]), batches)
    metric = R.RankingMetrics([2, 5])
    engine = Engine(lambda e, batch: metric.update(batch))
    with tempfile.TemporaryDirectory() as folder:
        handler = Checkpoint({"metric": metric}, DiskSaver(folder, require_empty=False))
        engine.add_event_handler(Events.ITERATION_COMPLETED(once=3), handler)
        engine.run(batches)  # the checkpoint holds the state after 3 of the 6 batches
        fresh = R.RankingMetrics([2, 5])
        Checkpoint.load_objects({"metric": fresh}, torch.load(os.path.join(folder, os.listdir(folder)[0])))
    for batch in batches[3:]:
        fresh.update(batch)
    assert fresh.compute() == expected


# --- Dtypes ----------------------------------------------------------------------------------
@pytest.mark.parametrize("score_dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("label_dtype", [torch.bool, torch.uint8, torch.int64, torch.float32])
def test_dtypes_match_float64_reference(rng, score_dtype, label_dtype):
    scores, relevance = random_batch(rng, 30, 50, zero_users=2)
    scores = scores / scores.max() * 3  # rounding to half precision creates ties
    cast = scores.to(score_dtype)
    for name, cls in CUTOFF_CLASSES.items():
        expected = run_metric(cls([1, 5, 60]), [(cast.to(torch.float64), relevance.to(torch.float64))])
        got = run_metric(cls([1, 5, 60]), [(cast, relevance.to(label_dtype))])
        np.testing.assert_allclose(got, expected, atol=1e-12, err_msg=name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu_and_never_syncs(rng):
    scores, relevance = random_batch(rng, 64, 3000, graded=True, ties=True, zero_users=3)
    for factory in FACTORIES.values():
        cpu = run_metric(factory(), [(scores, relevance)])
        metric = factory(device="cuda")
        batch = (scores.cuda(), relevance.cuda())  # a copy from pageable host memory is itself a sync
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            metric.update(batch)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        gpu = metric.compute()
        if isinstance(cpu, dict):
            assert gpu.keys() == cpu.keys() and all(gpu[n] == pytest.approx(cpu[n], abs=1e-12) for n in cpu)
        else:
            assert gpu == pytest.approx(cpu, abs=1e-12)


# --- Properties (hypothesis) -----------------------------------------------------------------
@st.composite
def batches(draw):
    users, items = draw(st.integers(1, 6)), draw(st.integers(1, 12))
    scores = draw(st.lists(st.integers(-3, 3), min_size=users * items, max_size=users * items))
    labels = draw(st.lists(st.integers(0, 3), min_size=users * items, max_size=users * items))
    return (
        torch.tensor(scores, dtype=torch.float32).reshape(users, items),
        torch.tensor(labels, dtype=torch.float32).reshape(users, items),
    )


BOUNDED = sorted(CUTOFF_CLASSES)
TOPS = [1, 2, 4, 20]


@settings(max_examples=60, deadline=None)
@given(batch=batches(), ties=st.sampled_from(["stable", "average"]))
def test_properties(batch, ties):
    scores, relevance = batch
    if not (relevance >= 1).any():
        return
    perm = torch.randperm(scores.shape[0])
    for name in BOUNDED:
        metric = CUTOFF_CLASSES[name](TOPS, ties=ties)
        values = run_metric(metric, [batch])
        assert all(-1e-12 <= v <= 1 + 1e-12 for v in values), name
        assert run_metric(metric, [(scores + 7.0, relevance)]) == pytest.approx(values, abs=1e-12), name
        assert run_metric(metric, [(scores[perm], relevance[perm])]) == pytest.approx(values, abs=1e-12), name
        split = [(scores[i : i + 1], relevance[i : i + 1]) for i in range(scores.shape[0])]
        assert run_metric(metric, split) == pytest.approx(values, abs=1e-12), name
        if name in ("hit_rate", "recall"):
            assert all(a <= b + 1e-12 for a, b in zip(values, values[1:])), name
    perfect = relevance + 0.0  # scores = relevance, ties broken to favour relevant: a perfect ranking
    ideal_scores = relevance * 10 - torch.arange(relevance.shape[1]) * 1e-3
    for name in ("ndcg", "map", "mrr", "hit_rate"):
        got = run_metric(CUTOFF_CLASSES[name]([relevance.shape[1]]), [(ideal_scores, perfect)])
        assert got == pytest.approx([1.0]), name
    rp = run_metric(R.RPrecision(), [(ideal_scores, perfect)])
    assert rp == pytest.approx(1.0)


def test_counts_exact_past_2_pow_24():
    """Accumulators are float64: adding one user to a state of 2**24 + 1 users is not lost."""
    metric = R.HitRate([1])
    metric._count.fill_(2**24 + 1)
    metric._sum.fill_(2**24 + 1)
    metric.update((torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])))  # one user, no hit
    assert metric.compute() == [(2**24 + 1) / (2**24 + 2)]
    assert metric._count.item() == 2**24 + 2
    assert metric._sum.dtype == torch.float64


def test_state_does_not_grow(rng):
    metric = R.RankingMetrics([1, 5, 10])
    sizes = None
    for _ in range(5):
        metric.update(random_batch(rng, 8, 30))
        now = [value.numel() for value in _state(metric).values()]
        assert sizes is None or now == sizes
        sizes = now
