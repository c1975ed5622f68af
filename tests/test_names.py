"""One name per metric on every surface: a ranking entry's name is its class's name in snake_case
(the exceptions declared in the registry), a class with cut-offs labels its values with that name
as RankingMetrics does, and the aliases of evaluate() and the command line live in the registry
and lead to its entries."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import ignite_recsys as R
from ignite_recsys import _registry, evaluation
from ignite_recsys._registry import ALIASES, ENTRIES, LIST_ENTRIES, NAMES_NOT_SNAKE_CASE, NOT_ALIASES, REGISTRY

from conftest import random_batch

CUTOFF_ENTRIES = [entry for entry in ENTRIES if entry.has_cutoff]


def snake_case(class_name: str) -> str:
    """Written here from the rule (an underscore before each capital that starts a word):
    ``HitRate`` -> ``hit_rate``, ``NDCG`` -> ``ndcg``, ``MeanInvUserFreq`` -> ``mean_inv_user_freq``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", class_name).lower()


def test_the_rule_on_known_names():
    assert [snake_case(name) for name in ("HitRate", "NDCG", "MeanInvUserFreq", "EPC", "FallOut", "BPref")] == [
        "hit_rate",
        "ndcg",
        "mean_inv_user_freq",
        "epc",
        "fall_out",
        "b_pref",
    ]


@pytest.mark.parametrize("entry", ENTRIES + LIST_ENTRIES, ids=lambda entry: entry.class_name)
def test_every_entry_name_is_its_class_name_in_snake_case_or_a_declared_exception(entry):
    expected = NAMES_NOT_SNAKE_CASE.get(entry.class_name, snake_case(entry.class_name))
    assert entry.name == expected, (
        f"the registry names {entry.class_name} {entry.name!r}, its class's name in snake_case is "
        f"{snake_case(entry.class_name)!r}: rename one, or declare the exception in _registry.NAMES_NOT_SNAKE_CASE"
    )


def test_declared_exceptions_are_needed_and_name_real_classes():
    classes = {entry.class_name: entry for entry in ENTRIES + LIST_ENTRIES}
    for class_name, name in NAMES_NOT_SNAKE_CASE.items():
        assert class_name in classes and classes[class_name].name == name
        assert snake_case(class_name) != name, f"{class_name}: the exception is the rule, remove it"


def test_the_thirteen_classes_with_a_cut_off():
    assert len(CUTOFF_ENTRIES) == 13


@pytest.mark.parametrize("entry", CUTOFF_ENTRIES, ids=lambda entry: entry.name)
def test_a_class_labels_its_values_as_ranking_metrics_does(entry):
    """``compute_dict()`` of the class and ``RankingMetrics(metrics=[name])`` on the same batches:
    the same keys in the same order, the same values."""
    rng = np.random.default_rng(7)
    batches = [random_batch(rng, 6, 12, graded=True) for _ in range(2)]
    single = getattr(R, entry.class_name)(top_k=[5, 1, 3])
    together = R.RankingMetrics([5, 1, 3], metrics=[entry.name])
    for batch in batches:
        single.update(batch)
        together.update(batch)
    labelled, expected = single.compute_dict(), together.compute()
    assert list(labelled) == list(expected) == [f"{entry.name}@{k}" for k in (1, 3, 5)]
    assert list(labelled.values()) == pytest.approx(list(expected.values()), abs=1e-12)


def test_bpref_is_labelled_bpref():
    metric = R.BPref(top_k=3)
    metric.update((torch.tensor([[3.0, 2.0, 1.0, 0.0]]), torch.tensor([[1.0, 0.0, 1.0, 0.0]])))
    assert list(metric.compute_dict()) == ["bpref@3"]


def test_aliases_live_in_the_registry_and_lead_to_its_entries():
    assert evaluation.ALIASES is _registry.ALIASES and evaluation.NOT_ALIASES is _registry.NOT_ALIASES
    assert set(ALIASES.values()) <= set(REGISTRY)
    assert all(alias == alias.lower() for alias in ALIASES)
    assert all(ALIASES[name] == name for name in set(ALIASES) & set(REGISTRY))  # no name means another metric
    assert not set(NOT_ALIASES) & (set(ALIASES) | set(REGISTRY))
