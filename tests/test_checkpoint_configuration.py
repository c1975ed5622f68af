"""The configuration a checkpoint records: one setting given under either of its names loads into
a metric built with the other; two different callables of one name (two lambdas) are refused;
a callable that cannot be compared in full loads with a warning that says so."""

from __future__ import annotations

import sys
import warnings

import pytest
import torch

import ignite_recsys as R

SCORES = torch.tensor([[0.9, 0.1, 0.5, 0.3], [0.2, 0.8, 0.4, 0.6]])
LABELS = torch.tensor([[1, 0, 2, 0], [0, 0, 0, 0]])


def _saved(factory):
    metric = factory()
    metric.update((SCORES, LABELS))
    return metric, metric.state_dict()


@pytest.mark.parametrize(
    "saved_with, loaded_with",
    [
        ({"ignore_zero_hits": False}, {"skip_users_without_relevant": False}),
        ({"skip_users_without_relevant": False}, {"ignore_zero_hits": False}),
        ({"skip_users_without_relevant": True}, {}),
        ({}, {"skip_users_without_relevant": True}),
    ],
)
@pytest.mark.parametrize("name", ["NDCG", "RankingMetrics"])
def test_one_setting_under_either_name_loads(name, saved_with, loaded_with):
    def build(**options):
        return getattr(R, name)([1, 3], **options)

    metric, state = _saved(lambda: build(**saved_with))
    loaded = build(**loaded_with)
    loaded.load_state_dict(state)
    assert loaded.compute() == metric.compute()


@pytest.mark.parametrize(
    "saved_with, loaded_with",
    [({"ignore_zero_hits": False}, {"skip_users_without_relevant": True}), ({"ignore_zero_hits": False}, {})],
)
def test_a_different_setting_under_either_name_is_refused(saved_with, loaded_with):
    _, state = _saved(lambda: R.NDCG([1, 3], **saved_with))
    loaded = R.NDCG([1, 3], **loaded_with)
    with pytest.raises(ValueError, match=r"ignore_zero_hits=False \(this metric: True\)"):
        loaded.load_state_dict(state)


def _scaled(scale):
    return lambda r: r * scale


@pytest.mark.parametrize(
    "saved_gain, loaded_gain",
    [
        (lambda r: r, lambda r: r * r),  # two lambdas of one qualified name
        (_scaled(2.0), _scaled(3.0)),  # one code, different captured values
    ],
)
def test_another_callable_gain_is_refused(saved_gain, loaded_gain):
    _, state = _saved(lambda: R.NDCG([3], gain_function=saved_gain))
    loaded = R.NDCG([3], gain_function=loaded_gain)
    before = loaded.state_dict()
    with pytest.raises(
        ValueError, match=r"gain_function=.*<lambda> \(code [0-9a-f]+\) \(this metric: .*<lambda> \(code"
    ):
        loaded.load_state_dict(state)
    assert all(
        torch.equal(a, b)
        for a, b in zip(
            before["__metric_state_per_rank"][0].values(), loaded.state_dict()["__metric_state_per_rank"][0].values()
        )
    )


def test_another_callable_discount_is_refused_and_the_same_one_loads():
    def discount(positions):
        return 1 / positions

    metric, state = _saved(lambda: R.DCG([3], discount=discount))
    with pytest.raises(ValueError, match=r"discount="):
        R.DCG([3], discount=lambda positions: 1 / positions**2).load_state_dict(state)
    loaded = R.DCG([3], discount=discount)
    loaded.load_state_dict(state)
    assert loaded.compute() == metric.compute()
    same = _scaled(2.0)
    metric, state = _saved(lambda: R.NDCG([3], gain_function=same))
    loaded = R.NDCG([3], gain_function=_scaled(2.0))  # another function object, the same code and values
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded.load_state_dict(state)
    assert loaded.compute() == metric.compute()


class _Gains:
    def __init__(self, base):
        self.base = base

    def gain(self, relevance):
        return self.base**relevance - 1


BASE = 2.0


def _global_gain(relevance):
    return BASE**relevance - 1


def test_a_bound_method_is_compared_with_its_instance():
    """Gains(2.0).gain and Gains(10.0).gain share their code: the state of one refused by the
    other (loaded, NDCG@3 would mix 2^rel - 1 and 10^rel - 1 gains); the same instance's loads."""
    _, state = _saved(lambda: R.NDCG([3], gain_function=_Gains(2.0).gain))
    with pytest.raises(ValueError, match=r"gain_function=.*_Gains.gain \(code"):
        R.NDCG([3], gain_function=_Gains(10.0).gain).load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        R.NDCG([3], gain_function=_Gains(2.0).gain).load_state_dict(state)


def test_a_function_reading_a_module_value_is_compared_with_it(monkeypatch):
    _, state = _saved(lambda: R.NDCG([3], gain_function=_global_gain))
    monkeypatch.setattr(sys.modules[__name__], "BASE", 10.0)
    with pytest.raises(ValueError, match=r"gain_function=.*_global_gain \(code"):
        R.NDCG([3], gain_function=_global_gain).load_state_dict(state)
    monkeypatch.setattr(sys.modules[__name__], "BASE", 2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        R.NDCG([3], gain_function=_global_gain).load_state_dict(state)


def test_a_callable_without_code_loads_with_a_warning_and_another_is_refused():
    _, state = _saved(lambda: R.NDCG([3], gain_function=torch.square))
    with pytest.warns(UserWarning, match=r"gain_function could not be compared in full .*compared by name only"):
        R.NDCG([3], gain_function=torch.square).load_state_dict(state)
    with pytest.raises(ValueError, match=r"compared by name only: no Python code"):
        R.NDCG([3], gain_function=torch.exp).load_state_dict(state)


def test_a_callable_recorded_by_name_alone_loads_with_a_warning():
    gain = _scaled(2.0)
    metric, state = _saved(lambda: R.NDCG([3], gain_function=gain))
    text = state["configuration"]["gain_function"]
    state["configuration"]["gain_function"] = text.split(" (code ")[0]  # a name, without its code
    loaded = R.NDCG([3], gain_function=gain)
    with pytest.warns(UserWarning, match=r"gain_function could not be compared in full"):
        loaded.load_state_dict(state)
    assert loaded.compute() == metric.compute()
