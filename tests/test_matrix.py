"""The matrix: every metric configuration x every input form x tie rule x ignore_zero_hits x
per_user x update/Engine x dtype, through the shared harness (tests/harness.py), against the
numpy references; then a covering subset inside one group of 2 gloo processes.

Per metric configuration (every registry ranking metric with every normalization choice, NDCG
with every named gain, RankingMetrics with every choice, the catalog metrics with every
convention), the cases hold the full product of target form x prediction form x exclusion form,
and every pair of values of any two axes (tie rule, ignore_zero_hits, per_user, container,
dtype included) at least once: 40 cases per configuration instead of the 2,560 of the full
product.
"""

from __future__ import annotations

import numpy as np
import pytest

import harness as H
import references as ref
from ignite_recsys._registry import ALL_METRICS, REGISTRY


def _params(cases):
    return [pytest.param(case, id=case.id) for case in cases]


MATRIX = [case for variant in H.VARIANTS.values() for case in H.cases_for(variant)]


@pytest.mark.parametrize("case", _params(MATRIX))
def test_matrix(case):
    H.check_metric(case)


def test_the_matrix_covers_every_axis_value_with_every_metric_configuration():
    by_variant = {}
    for case in MATRIX:
        by_variant.setdefault(case.variant, []).append(vars(case))
    assert set(by_variant) == set(H.VARIANTS)
    for name, rows in by_variant.items():
        variant = H.VARIANTS[name]
        assert H.uncovered_pairs(rows, variant.axes) == [], name
        forms = {(r["target"], r["prediction"], r["exclude"]) for r in rows}
        axes = variant.axes
        assert len(forms) == len(axes["target"]) * len(axes["prediction"]) * len(axes["exclude"])
    assert len(MATRIX) == len({case.id for case in MATRIX})


def test_every_registry_metric_and_choice_has_a_variant():
    """A metric or choice added to the registry is in the matrix without further changes."""
    singles = [v for v in H.VARIANTS.values() if v.family == "ranking"]
    assert {v.metric for v in singles} == set(ALL_METRICS)
    combined = [v for v in H.VARIANTS.values() if v.family == "ranking_metrics"]
    assert all(dict(v.options)["metrics"] == tuple(ALL_METRICS) for v in combined)
    for entry in REGISTRY.values():
        assert H.VARIANTS[entry.name].average_ties == entry.average_ties  # every option at its default
        for option in entry.options:
            for value in H.option_values(option)[1:]:
                variant = H.VARIANTS[f"{entry.name}[{option.name}={value}]"]
                choice = option.choice(value)
                assert variant.average_ties == (entry.average_ties and (choice is None or choice.average_ties))
            for choice in option.choices:  # every named choice, by the class and by RankingMetrics
                assert choice.value in H.option_values(option)
                assert any(dict(v.options)[option.argument] == choice.value for v in combined)
    assert {dict(v.options)["gain_function"] for v in combined} == set(H.NDCG_GAINS)
    catalog = {v.metric for v in H.VARIANTS.values() if v.family in ("catalog", "item_value")}
    assert {H.CATALOG_CLASSES[name].__name__ for name in catalog} == {
        "ItemCoverage",
        "GiniIndex",
        "ShannonEntropy",
        "AveragePopularity",
        "TailPercentage",
        "Novelty",
    }


def test_the_data_holds_the_edge_cases():
    data = H.DATA
    assert np.isinf(data.scores).any() and (np.isinf(data.scores).sum(1) > 1).any()  # -inf, tied
    assert any(len(set(row.tolist())) < len(row) for row in data.scores)  # ties
    relevant = (data.labels >= H.THRESHOLD).any(1)
    assert not relevant.all()  # a user without a relevant item
    assert (data.excluded.all(1) & relevant).any()  # a user with relevant items but no candidate
    assert ((data.ranked_ids < 0).all(1)).any()  # an empty ranked list
    assert (data.popularity == 0).any()  # an item unseen in training
    assert len(H.split_rows(0, data.users)) > 2 and 1 in [s.stop - s.start for s in H.split_rows(0, data.users)]


@pytest.mark.parametrize("prediction", H.PREDICTION_FORMS)
@pytest.mark.parametrize("exclude", ["none", "dense"])
@pytest.mark.parametrize("ties", H.TIES)
def test_reference_rows_agree_with_the_reference_means(prediction, exclude, ties):
    """The per-user reference (references.candidate_user_rows) averages to the reference means."""
    data = H.DATA
    sets = None if exclude == "none" else [set(np.nonzero(row)[0].tolist()) for row in data.excluded]
    if prediction == "ranked":
        rankings = ref.candidate_rankings(excluded=sets, ranked_ids=data.ranked_ids)
    else:
        rankings = ref.candidate_rankings(data.scores, sets, ties=ties)
    for kw in ({}, {"map_norm": "relevant", "recall_norm": "min_k_relevant", "precision_norm": "min_k_items"}):
        for ignore in (True, False):
            rows = ref.candidate_user_rows(rankings, data.labels, H.KS, ignore_zero_hits=ignore, **kw)
            means = ref.candidate_metric_means(rankings, data.labels, H.KS, ignore_zero_hits=ignore, **kw)
            for name, value in means.items():
                np.testing.assert_allclose(np.nanmean(rows[name], axis=0), value, rtol=0, atol=1e-12, err_msg=name)


# ranked lists of one item each, and of the whole catalog
LIST_DATA = {length: H.make_data(seed=5, list_length=length) for length in (1, 9)}
LIST_CASES = {
    length: [
        H.Case(variant, target=target, prediction="ranked", exclude=exclude)
        for variant in H.VARIANTS
        for target, exclude in (("ids", "none"), ("dense", "ids"), ("csr", "coo"))
    ]
    for length in LIST_DATA
}


@pytest.mark.parametrize("case", _params(LIST_CASES[1]))
def test_ranked_lists_of_one_item(case):
    H.check_metric(case, LIST_DATA[1])


@pytest.mark.parametrize("case", _params(LIST_CASES[9]))
def test_ranked_lists_of_the_whole_catalog(case):
    H.check_metric(case, LIST_DATA[9])


# --- Distributed: one group of 2 gloo processes for every configuration and form ------------
DISTRIBUTED = [H.Case(variant.name, **row) for variant in H.VARIANTS.values() for row in H.each_value(variant.axes)]


@pytest.mark.slow
def test_distributed_matrix():
    """Each of 2 gloo processes holds half of the users: every process returns the values of one
    process over all users (compute, per_user rows gathered in rank order, confidence interval),
    and those of the references."""
    per_rank = H.run_distributed(DISTRIBUTED, world_size=2)
    failures = []
    for index, case in enumerate(DISTRIBUTED):
        expected = H.expected_outcome(case)
        single = dict(H.run_case(case), interval_tolerance=expected.get("interval_tolerance"))
        for rank, outcomes in enumerate(per_rank):
            try:
                H.assert_outcome(outcomes[index], single, f"{case.id} rank {rank} vs one process")
                H.assert_outcome(outcomes[index], expected, f"{case.id} rank {rank}")
            except AssertionError as error:
                failures.append(str(error))
    assert not failures, f"{len(failures)} of {2 * len(DISTRIBUTED)} failed:\n" + "\n".join(failures[:5])


def test_distributed_covers_every_axis_value_with_every_metric_configuration():
    for name, variant in H.VARIANTS.items():
        rows = [vars(case) for case in DISTRIBUTED if case.variant == name]
        for axis, values in variant.axes.items():
            assert {row[axis] for row in rows} == set(values), (name, axis)
