"""NDCG and HitRate as drop-ins for ignite.metrics.rec_sys: what ignite's own tests (ported in
test_ignite_port_ndcg.py / test_ignite_port_hitrate.py) leave out. The reference is ignite's class
itself, run on the same inputs."""

import inspect

import numpy as np
import pytest
import torch
from ignite.engine import Engine
from ignite.exceptions import NotComputableError
from ignite.metrics.rec_sys import HitRate as IgniteHitRate
from ignite.metrics.rec_sys import NDCG as IgniteNDCG

import ignite_recsys as R
from ignite_recsys._validation import ArgumentTypeError

PAIRS = {"ndcg": (R.NDCG, IgniteNDCG), "hit_rate": (R.HitRate, IgniteHitRate)}


def _both(name, *args, **kwargs):
    ours, theirs = PAIRS[name]
    return ours(*args, **kwargs), theirs(*args, **kwargs)


def _computed(metric, batches):
    for batch in batches:
        metric.update(batch)
    return metric.compute()


def _random_batches(seed, n_batches=3, users=6, items=9, max_label=4):
    generator = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(users, items, generator=generator),
            torch.randint(0, max_label, (users, items), generator=generator).float(),
        )
        for _ in range(n_batches)
    ]


# --- Signature --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(PAIRS))
def test_ignite_parameters_come_first_in_ignite_order_with_ignite_defaults(name):
    ours, theirs = (inspect.signature(cls).parameters for cls in PAIRS[name])
    assert list(ours)[: len(theirs)] == list(theirs)
    for key, param in theirs.items():
        assert ours[key].kind == param.kind, key
        if not callable(param.default) and key != "device":
            assert ours[key].default == param.default, key
    for key in list(ours)[len(theirs) :]:
        assert ours[key].kind == inspect.Parameter.KEYWORD_ONLY, key  # extensions never shift a position


def test_hit_rate_positional_arguments_as_in_ignite():
    transform = lambda output: (-output[0], output[1])  # noqa: E731  (ranks the list upside down)
    batches = _random_batches(0)
    ours, theirs = R.HitRate([1, 3], False, transform), IgniteHitRate([1, 3], False, transform)
    assert ours._output_transform is transform and ours.ignore_zero_hits is False
    engine = Engine(lambda engine, batch: batch)
    ours.attach(engine, "ours")
    theirs.attach(engine, "theirs")
    metrics = engine.run(batches).metrics
    np.testing.assert_allclose(metrics["ours"], metrics["theirs"], rtol=1e-6)
    assert metrics["ours"] != _computed(R.HitRate([1, 3], False), batches)  # the transform ran


def test_hit_rate_default_top_k_is_1():
    batches = _random_batches(1)
    ours, theirs = R.HitRate(), IgniteHitRate()
    assert ours.top_k == theirs.top_k == [1]
    assert _computed(ours, batches) == pytest.approx(_computed(theirs, batches))


# --- Semantics on inputs ignite's tests do not use -------------------------------------------
SPECIAL_BATCHES = {
    # ignite's HitRate counts y > 0 as relevant: a label 0.5 is a hit there (and here by default)
    "fractional labels": (
        torch.tensor([[3.0, 1.0, 2.0, 0.0], [0.0, 1.0, 2.0, 3.0]]),
        torch.tensor([[0.5, 0, 0, 0], [0, 0.2, 0, 0]]),
    ),
    # negative labels are never relevant: zero gain in ignite's NDCG, no hit in its HitRate
    "negative labels": (torch.tensor([[1.0, 0.0, 3.0, 2.0]]), torch.tensor([[-2.0, 1.0, 0.0, -1.0]])),
    "graded, some users empty": (
        torch.tensor([[0.3, 0.9, 0.1, 0.5], [0.8, 0.2, 0.6, 0.4], [0.1, 0.2, 0.3, 0.4]]),
        torch.tensor([[0.0, 3.0, 1.0, 2.0], [1.0, 0.0, 0.0, 4.0], [0.0, 0.0, 0.0, 0.0]]),
    ),
}


@pytest.mark.parametrize("name", sorted(PAIRS))
@pytest.mark.parametrize("case", sorted(SPECIAL_BATCHES))
@pytest.mark.parametrize("ignore_zero_hits", [True, False])
def test_same_values_as_ignite(name, case, ignore_zero_hits):
    ours, theirs = _both(name, [1, 2, 4], ignore_zero_hits=ignore_zero_hits)
    batch = SPECIAL_BATCHES[case]
    try:
        expected = _computed(theirs, [batch])
    except NotComputableError:
        with pytest.raises(NotComputableError):
            _computed(ours, [batch])
        return
    np.testing.assert_allclose(_computed(ours, [batch]), expected, rtol=1e-6)


def test_hit_rate_relevance_threshold_keyword_is_y_at_least_t():
    y_pred, y = SPECIAL_BATCHES["fractional labels"]
    assert _computed(R.HitRate([1, 4], ignore_zero_hits=False), [(y_pred, y)]) == [0.5, 1.0]
    assert _computed(R.HitRate([1, 4], ignore_zero_hits=False, relevance_threshold=0.5), [(y_pred, y)]) == [0.5, 0.5]


INTEGER_SCORES = {
    torch.uint8: torch.tensor([[7, 3, 250, 0, 9]]),
    torch.int8: torch.tensor([[-7, 3, 120, -128, 9]]),
    torch.int16: torch.tensor([[-700, 3, 32000, -32768, 9]]),
    # neighbours that float32 would merge into ties: the conversion keeps them apart
    torch.int32: torch.tensor([[2**31 - 2, 2**31 - 1, -(2**31), 2**30, 2**31 - 3]]),
    torch.int64: torch.tensor([[2**52 + 1, 2**52 + 3, 2**52 + 2, 5, 2**52 + 4]]),
}


@pytest.mark.parametrize("name", sorted(PAIRS))
@pytest.mark.parametrize("dtype", list(INTEGER_SCORES), ids=str)
def test_integer_scores_rank_as_in_ignite(name, dtype):
    y_pred = INTEGER_SCORES[dtype].to(dtype)
    y = torch.tensor([[0.0, 2.0, 0.0, 1.0, 3.0]])
    ours, theirs = _both(name, [1, 2, 3, 5])
    np.testing.assert_allclose(_computed(ours, [(y_pred, y)]), _computed(theirs, [(y_pred, y)]), rtol=1e-6)
    assert y_pred.dtype == dtype  # the input is not converted in place


def test_bool_scores_rank_as_in_ignite_ndcg():
    y_pred, y = torch.tensor([[True, False, True, False]]), torch.tensor([[0.0, 1.0, 2.0, 1.0]])
    ours, theirs = _both("ndcg", [1, 2, 4])
    np.testing.assert_allclose(_computed(ours, [(y_pred, y)]), _computed(theirs, [(y_pred, y)]), rtol=1e-6)


SCORE_TAKERS = {
    "recall": lambda: R.Recall([1, 3]),
    "map": lambda: R.MAP([1, 3]),
    "ranking_metrics": lambda: R.RankingMetrics([1, 3]),
    "gauc": lambda: R.GAUC(),
    "coverage": lambda: R.ItemCoverage([1, 3]),
    "gini": lambda: R.GiniIndex([1, 3]),
}


@pytest.mark.parametrize("name", sorted(SCORE_TAKERS))
@pytest.mark.parametrize("dtype", list(INTEGER_SCORES), ids=str)
def test_integer_scores_equal_their_float64_values_in_every_ranking_input(name, dtype):
    y_pred = INTEGER_SCORES[dtype].to(dtype)
    y = torch.tensor([[0.0, 2.0, 0.0, 1.0, 3.0]])
    as_float = _computed(SCORE_TAKERS[name](), [(y_pred.to(torch.float64), y)])
    assert _computed(SCORE_TAKERS[name](), [(y_pred, y)]) == as_float


@pytest.mark.parametrize("dtype", list(INTEGER_SCORES) + [torch.bool], ids=str)
@pytest.mark.parametrize("form", ["dense_exclusion", "sparse_exclusion", "listed_exclusion", "sparse_targets"])
def test_integer_scores_with_exclusions_and_sparse_targets_equal_the_reference(dtype, form):
    """Integer and bool scores whose width another input gives (an exclusion, sparse targets)
    are their float64 values, as with dense labels: NDCG@1..4 and Recall from the numpy
    reference over the candidates (item 4 excluded for the first user)."""
    import references as ref

    base = INTEGER_SCORES.get(dtype, torch.tensor([[1, 0, 1, 1, 0]]))
    y_pred = torch.cat([base, base.flip(1)]).to(dtype)
    y = torch.tensor([[0.0, 2.0, 0.0, 1.0, 3.0], [1.0, 0.0, 0.0, 2.0, 0.0]])
    excluded = [{4}, set()]
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[0, 4] = True
    parts = {
        "dense_exclusion": (y_pred, y, mask),
        "sparse_exclusion": (y_pred, y, mask.to_sparse()),
        "listed_exclusion": (y_pred, y, R.ItemIds(torch.tensor([[4], [-1]]))),
        "sparse_targets": (y_pred, y.to_sparse(), mask),
    }[form]
    metric = R.RankingMetrics([1, 2, 4], metrics=["ndcg", "recall"])
    metric.update(parts)
    rankings = ref.candidate_rankings(y_pred.to(torch.float64).numpy(), excluded)
    expected = ref.candidate_metric_means(rankings, y.numpy(), [1, 2, 4])
    got = metric.compute()
    for name in ("ndcg", "recall"):
        assert [got[f"{name}@{k}"] for k in (1, 2, 4)] == pytest.approx(expected[name], abs=1e-12), name


def test_integer_scores_with_only_listed_inputs_are_refused_as_maybe_ranked_ids():
    """With ItemIds targets and no exclusion tensor, nothing gives the catalog's width: integer
    y_pred may be ranked ids, and is refused with the hint, the state unchanged."""
    metric = R.NDCG([2])
    with pytest.raises(TypeError, match=r"floating-point scores.*pass RankedItems\(y_pred\)"):
        metric.update((torch.tensor([[3, 1, 2, 0]]), R.ItemIds(torch.tensor([[1]])), R.ItemIds(torch.tensor([[0]]))))
    metric.update((torch.tensor([[3.0, 1, 2, 0]]), R.ItemIds(torch.tensor([[2]]))))
    assert metric.compute() == pytest.approx([1 / np.log2(3)], abs=1e-12)  # item 2 ranked second, alone relevant


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64, torch.complex64, torch.float8_e4m3fn])
def test_unsupported_score_dtypes_still_refused(dtype):
    y_pred = torch.tensor([[3.0, 1.0, 2.0]]).to(dtype)
    with pytest.raises(TypeError, match=rf"y_pred must hold .*got dtype {dtype}"):
        R.NDCG([1]).update((y_pred, torch.tensor([[1.0, 0.0, 0.0]])))


# --- Errors: ignite's exception class and text, this library's detail after it -----------------
BAD_CONSTRUCTIONS = [
    ("hit_rate", dict(top_k="invalid")),
    ("hit_rate", dict(top_k=[])),
    ("hit_rate", dict(top_k=[0, 3])),
    ("hit_rate", dict(top_k=-1)),
    ("ndcg", dict(top_k=[0])),
    ("ndcg", dict(top_k=[-1, 5])),
    ("ndcg", dict(top_k=[1], gain_function="invalid")),
    ("ndcg", dict(top_k=[1], gain_function=5)),
]


def _ignite_text(error):
    return str(error).split(", but given")[0].split(", got")[0].rstrip(".")


@pytest.mark.parametrize("name,kwargs", BAD_CONSTRUCTIONS)
def test_bad_arguments_raise_what_ignite_raises(name, kwargs):
    ours, theirs = PAIRS[name]
    with pytest.raises(Exception) as expected:
        theirs(**kwargs)
    with pytest.raises(expected.type) as got:
        ours(**kwargs)
    assert str(got.value).startswith(_ignite_text(expected.value)), (str(got.value), str(expected.value))


@pytest.mark.parametrize("bad", ["invalid", {1, 2}, [1, 2.5], 2.0, True])
def test_wrongly_typed_top_k_is_both_type_error_and_value_error(bad):
    with pytest.raises(ArgumentTypeError) as error:
        R.HitRate(top_k=bad)
    assert isinstance(error.value, TypeError) and isinstance(error.value, ValueError)


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_update_and_compute_errors_begin_with_ignite_text(name):
    ours, theirs = _both(name, [1, 2])
    mismatched = (torch.randn(4, 10), torch.ones(4, 5))
    for call in (lambda metric: metric.update(mismatched), lambda metric: metric.compute()):
        with pytest.raises(Exception) as expected:
            call(theirs)
        with pytest.raises(expected.type) as got:
            call(ours)
        assert str(got.value).startswith(_ignite_text(expected.value)), (str(got.value), str(expected.value))


# --- A state dict saved by ignite's class -------------------------------------------------------
@pytest.mark.parametrize("name", sorted(PAIRS))
@pytest.mark.parametrize("ignore_zero_hits", [True, False])
def test_load_ignite_state_dict_then_continue(name, ignore_zero_hits):
    first, rest = _random_batches(2), _random_batches(3)
    theirs = PAIRS[name][1]([1, 3, 5], ignore_zero_hits=ignore_zero_hits)
    _computed(theirs, first)
    saved = theirs.state_dict()
    ours = PAIRS[name][0]([1, 3, 5], ignore_zero_hits=ignore_zero_hits)
    ours.update(rest[0])  # state that the load replaces
    ours.load_state_dict(saved)
    assert ours._sum.dtype == torch.float64 and ours._count.dtype == torch.float64
    np.testing.assert_allclose(ours.compute(), theirs.compute(), rtol=1e-6)
    np.testing.assert_allclose(_computed(ours, rest), _computed(theirs, rest), rtol=1e-6)
    # and it equals this library's own result on all the batches (ignite sums in float32)
    alone = _computed(PAIRS[name][0]([1, 3, 5], ignore_zero_hits=ignore_zero_hits), first + rest)
    np.testing.assert_allclose(ours.compute(), alone, rtol=1e-6)


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_ignite_state_dict_with_other_number_of_cutoffs_is_refused_state_untouched(name):
    theirs = PAIRS[name][1]([1, 3])
    _computed(theirs, _random_batches(4))
    ours = PAIRS[name][0]([1, 3, 5])
    ours.update(_random_batches(5)[0])
    before = {key: getattr(ours, key).clone() for key in ("_sum", "_count", "_num_invalid_updates")}
    with pytest.raises(ValueError, match=r"shape \(3,\) for top_k=\[1, 3, 5\], got \(2,\)"):
        ours.load_state_dict(theirs.state_dict())
    for key, value in before.items():
        assert torch.equal(getattr(ours, key), value), key


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_own_state_dict_still_loads(name):
    batches = _random_batches(6)
    metric = PAIRS[name][0]([1, 3])
    _computed(metric, batches[:2])
    restored = PAIRS[name][0]([1, 3])
    restored.load_state_dict(metric.state_dict())
    assert _computed(restored, batches[2:]) == pytest.approx(_computed(PAIRS[name][0]([1, 3]), batches), rel=1e-12)
