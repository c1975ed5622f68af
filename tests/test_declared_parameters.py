"""Constructor arguments are declared once per class and checked before anything is built.

Every argument of every metric class has a declared constraint that says in words what it
accepts; each value the constraint generates as invalid (as scikit-learn's
``generate_invalid_param_val``) is refused with a TypeError or ValueError naming the argument."""

from __future__ import annotations

import inspect

import pytest
import torch

import ignite_recsys as R
from ignite_recsys._validation import declared_constraints
from ignite_recsys.metrics._state import StatefulMetric

METRIC_CLASSES = [
    getattr(R, name)
    for name in R.__all__
    if isinstance(getattr(R, name), type) and issubclass(getattr(R, name), StatefulMetric)
]
UNDECLARED = {"self", "device", "skip_unrolling"}  # ignite's own arguments, checked by ignite
POPULARITY = torch.tensor([3.0, 1.0, 0.0, 2.0])
REQUIRED = {
    "top_k": 2,
    "max_k": 3,
    "item_popularity": POPULARITY,
    "metric": R.NDCG(top_k=1),
    "num_users": 5,
    "item_features": torch.rand(4, 3),
    "item_categories": [[0], [0, 1], [], [1]],
    "item_groups": torch.tensor([0, 1, 1, 0]),
}
NOT_ACCEPTED = object()  # of no accepted type for any argument


def _required(cls) -> dict:
    return {
        name: REQUIRED[name]
        for name, p in inspect.signature(cls).parameters.items()
        if name in REQUIRED and p.default is inspect.Parameter.empty
    }


@pytest.mark.parametrize("cls", METRIC_CLASSES, ids=lambda cls: cls.__name__)
def test_every_argument_is_declared(cls):
    declared = declared_constraints(cls)
    names = set(inspect.signature(cls).parameters) - UNDECLARED
    assert names <= set(declared), f"{cls.__name__}: undeclared {sorted(names - set(declared))}"
    for name in names:
        assert declared[name].expected, name  # says in words what it accepts


@pytest.mark.parametrize("cls", METRIC_CLASSES, ids=lambda cls: cls.__name__)
def test_a_wrong_value_of_each_argument_is_refused_by_name(cls):
    required = _required(cls)
    cls(**required)  # the required arguments alone build it
    for name in set(inspect.signature(cls).parameters) - UNDECLARED:
        with pytest.raises((TypeError, ValueError), match=name):
            cls(**{**required, name: NOT_ACCEPTED})


@pytest.mark.parametrize("cls", METRIC_CLASSES, ids=lambda cls: cls.__name__)
def test_every_generated_invalid_value_is_refused_by_name(cls):
    required = _required(cls)
    declared = declared_constraints(cls)
    tried = 0
    for name in set(inspect.signature(cls).parameters) - UNDECLARED:
        for value in declared[name].invalid_values():
            with pytest.raises((TypeError, ValueError), match=name):
                cls(**{**required, name: value})
            tried += 1
    assert tried >= len(set(inspect.signature(cls).parameters) - UNDECLARED)


def test_checked_values_reach_the_metric_normalised():
    assert R.NDCG(top_k=[5, 1, 3]).top_k == [1, 3, 5]
    assert R.Recall(2, normalization=None).normalization == "relevant"  # None: the registry's default
    assert R.NDCG(2, gain_function="exponential").gain_function == "exp_rank"  # the descriptive alias
    assert R.NDCG(2, gain_function="linear").gain_function == "linear_rank"
    popularity = torch.tensor([1, 2, 3])
    metric = R.AveragePopularity(top_k=1, item_popularity=popularity)
    popularity[0] = 100  # the metric holds its own float64 copy
    assert metric.item_popularity.dtype == torch.float64 and metric.item_popularity[0] == 1


def test_signatures_stay_readable():
    """The checking wrapper keeps each constructor's own signature (for help() and the docs), and
    the classes built from the registry show their conventions as keywords."""
    assert list(inspect.signature(R.NDCG).parameters)[:4] == [
        "top_k",
        "ignore_zero_hits",
        "relevance_threshold",
        "gain_function",
    ]
    assert inspect.signature(R.MAP).parameters["normalization"].default == "min_k_relevant"
    assert inspect.signature(R.RankingMetrics).parameters["map_normalization"].kind is inspect.Parameter.KEYWORD_ONLY
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_argument'"):
        R.NDCG(1, no_such_argument=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_argument'"):
        R.Recall(1, no_such_argument=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_argument'"):
        R.RankingMetrics(1, no_such_argument=1)


def test_the_clear_alias_of_ignore_zero_hits():
    assert R.NDCG(1, skip_users_without_relevant=False).ignore_zero_hits is False
    assert R.RankingMetrics(1, skip_users_without_relevant=False).ignore_zero_hits is False
    with pytest.raises(ValueError, match="skip_users_without_relevant"):
        R.NDCG(1, ignore_zero_hits=False, skip_users_without_relevant=True)


def test_a_subclass_that_forwards_its_arguments_gets_them_checked():
    class Forwarding(R.NDCG):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)

    metric = Forwarding([3, 1], gain_function="linear", ties="average")
    assert (metric.top_k, metric.gain_function, metric.ties) == ([1, 3], "linear_rank", "average")
    with pytest.raises(ValueError, match="top_k"):
        Forwarding([1, 1])

    class Inheriting(R.Recall):
        pass

    assert Inheriting(2, normalization="min_k_relevant").normalization == "min_k_relevant"
    assert inspect.signature(Inheriting).parameters["normalization"].default == "relevant"
