"""Constructor arguments are declared once per class and checked before anything is built."""

from __future__ import annotations

import inspect

import pytest
import torch

import ignite_recsys as R
from ignite_recsys._validation import declared_constraints

METRIC_CLASSES = [getattr(R, name) for name in R.__all__
                  if isinstance(getattr(R, name), type) and issubclass(getattr(R, name), R.metrics._base.StatefulMetric)]
UNDECLARED = {"self", "device", "skip_unrolling"}  # ignite's own arguments, checked by ignite
POPULARITY = torch.tensor([3.0, 1.0, 0.0, 2.0])
REQUIRED = {"top_k": 2, "item_popularity": POPULARITY, "metric": R.NDCG(top_k=1)}
NOT_ACCEPTED = object()  # of no accepted type for any argument


def _signature(cls):
    """The signature of the first constructor along the hierarchy that names its arguments (one
    that only forwards ``*args, **kwargs`` adds a check of its own after the declared ones)."""
    for klass in cls.__mro__:
        signature = inspect.signature(vars(klass)["__init__"]) if "__init__" in vars(klass) else None
        if signature and not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in signature.parameters.values()):
            return signature
    raise AssertionError(cls)


@pytest.mark.parametrize("cls", METRIC_CLASSES, ids=lambda cls: cls.__name__)
def test_every_argument_is_declared(cls):
    declared = declared_constraints(cls)
    names = set(_signature(cls).parameters) - UNDECLARED
    assert names <= set(declared), f"{cls.__name__}: undeclared {sorted(names - set(declared))}"
    for name in names:
        assert declared[name].expected, name  # says in words what it accepts


@pytest.mark.parametrize("cls", METRIC_CLASSES, ids=lambda cls: cls.__name__)
def test_a_wrong_value_of_each_argument_is_refused_by_name(cls):
    parameters = _signature(cls).parameters
    required = {name: REQUIRED[name] for name, p in parameters.items()
                if name in REQUIRED and p.default is inspect.Parameter.empty}
    cls(**required)  # the required arguments alone build it
    for name in set(parameters) - UNDECLARED:
        with pytest.raises((TypeError, ValueError), match=name):
            cls(**{**required, name: NOT_ACCEPTED})


def test_checked_values_reach_the_metric_normalised():
    assert R.NDCG(top_k=[5, 1, 3]).top_k == [1, 3, 5]
    assert R.Recall(2, normalization=None).normalization == "relevant"  # None: the registry's default
    popularity = torch.tensor([1, 2, 3])
    metric = R.AveragePopularity(top_k=1, item_popularity=popularity)
    popularity[0] = 100  # the metric holds its own float64 copy
    assert metric.item_popularity.dtype == torch.float64 and metric.item_popularity[0] == 1


def test_signatures_stay_readable():
    """The checking wrapper keeps each constructor's own signature (for help() and the docs)."""
    assert list(inspect.signature(R.NDCG).parameters)[:4] == ["top_k", "ignore_zero_hits", "relevance_threshold",
                                                               "gain_function"]
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_argument'"):
        R.NDCG(1, no_such_argument=1)
