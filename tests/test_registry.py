"""The registry of the ranking metrics is the one source: the classes, RankingMetrics, its
arguments, the ranking step's needs and the functional API all agree with it."""

import inspect

import numpy as np
import pytest
import torch

import ignite_recsys as R
from ignite_recsys import functional as F
from ignite_recsys._registry import (
    ALL_METRICS,
    CUTOFF_METRICS,
    DEFAULT_METRICS,
    LIST_ENTRIES,
    REGISTRY,
    ranking_metrics_options,
)
from ignite_recsys.metrics._engine import CutoffResults as CutoffMetric  # the classes with cut-offs

from conftest import CUTOFF_CLASSES, class_of, random_batch, run_metric

NORMALIZED = [name for name, entry in REGISTRY.items() if entry.normalization is not None]


def test_names_and_public_constants():
    # the default metrics of RankingMetrics and their order, as documented
    assert DEFAULT_METRICS == ("ndcg", "hit_rate", "recall", "precision", "map", "mrr", "f1")
    assert set(DEFAULT_METRICS) <= set(CUTOFF_METRICS) and ALL_METRICS[-1] == "r_precision" not in CUTOFF_METRICS
    assert REGISTRY["map"].normalization.values == ("min_k_relevant", "relevant", "hits", "k")
    assert REGISTRY["recall"].normalization.values == ("relevant", "min_k_relevant")
    assert REGISTRY["precision"].normalization.values == ("k", "min_k_items")
    assert list(CUTOFF_CLASSES) == list(DEFAULT_METRICS)
    assert R.RankingMetrics(1).metrics == list(DEFAULT_METRICS)


def test_every_metric_has_an_entry_a_class_a_function_and_a_formula():
    keys = R.RankingMetrics(1, metrics=list(ALL_METRICS))._names
    assert [key.split("@")[0] for key in keys] == [name for name in REGISTRY if REGISTRY[name].has_cutoff] + [
        name for name in REGISTRY if not REGISTRY[name].has_cutoff
    ]
    for name, entry in REGISTRY.items():
        assert entry.name == name
        cls = class_of(entry)
        assert cls.__name__ in R.__all__ and cls.entry is entry
        assert entry.summary and "\n" not in entry.summary
        assert callable(entry.formula) and entry.formula.__module__ == "ignite_recsys._core.formulas"
        assert callable(getattr(F, name)) and name in F.__all__
        assert issubclass(cls, CutoffMetric) == entry.has_cutoff


@pytest.mark.parametrize("name", NORMALIZED)
def test_normalization_choices_and_defaults(name):
    option = REGISTRY[name].normalization
    assert option.default in option.values and len(set(option.values)) == len(option.values)
    assert all(choice.reproduces for choice in option.choices)
    cls = class_of(REGISTRY[name])
    for value in option.values:
        assert cls(1, normalization=value).normalization == value
    assert cls(1).normalization == option.default
    # RankingMetrics' argument for this metric: same default, same choices
    parameter = inspect.signature(R.RankingMetrics).parameters[option.argument]
    assert parameter.default == option.default == cls(1).normalization
    assert getattr(R.RankingMetrics(1), option.argument) == option.default
    for value in option.values:
        assert getattr(R.RankingMetrics(1, **{option.argument: value}), option.argument) == value
    with pytest.raises(ValueError, match=option.argument):
        R.RankingMetrics(1, **{option.argument: "no such choice"})
    with pytest.raises(ValueError, match="normalization"):
        cls(1, normalization="no such choice")


def test_every_convention_argument_is_in_the_registry():
    own = {
        "self",
        "top_k",
        "metrics",
        "ignore_zero_hits",
        "relevance_threshold",
        "output_transform",
        "device",
        "skip_unrolling",
        "ties",
        "per_user",
        "num_groups",
        "num_items",
        "skip_users_without_relevant",
        "num_threads",
    }
    arguments = set(inspect.signature(R.RankingMetrics).parameters) - own
    assert arguments == set(ranking_metrics_options())
    for name, entry in REGISTRY.items():  # each class's conventions are its entry's options
        cls_arguments = set(inspect.signature(class_of(entry)).parameters) - own
        assert cls_arguments == {option.name for option in entry.options}, name


# what each metric needs from the ranking step: the ideal gains, and |R| (per normalization)
NEEDS_IDEAL = {"ndcg"}
COUNTS_RELEVANT = {
    ("recall", "relevant"),
    ("recall", "min_k_relevant"),
    ("map", "min_k_relevant"),
    ("map", "relevant"),
    ("f1", None),
}


@pytest.mark.parametrize("name", list(DEFAULT_METRICS))
def test_ranking_step_needs_match_the_classes(name):
    entry = REGISTRY[name]
    cls = class_of(entry)
    values = entry.normalization.values if entry.normalization else (None,)
    for value in values:
        single = cls(1) if value is None else cls(1, normalization=value)
        kwargs = {} if value is None else {entry.normalization.argument: value}
        combined = R.RankingMetrics(1, metrics=[name], **kwargs)
        counts = (name, value) in COUNTS_RELEVANT
        options = {} if value is None else {"normalization": value}
        assert single._request.count_relevant == combined._request.count_relevant == counts
        assert entry.needs_relevant_count(options) == counts
        assert single._request.ideal == combined._request.ideal == entry.needs.ideal == (name in NEEDS_IDEAL)
        assert (single._request.gain_function is not None) == entry.needs.gains == (name in NEEDS_IDEAL)
        if value is not None and entry.refuses_average_ties(options):
            with pytest.raises(ValueError, match="ties='average'"):
                cls(1, normalization=value, ties="average")
            with pytest.raises(ValueError, match="ties='average'.*" + entry.normalization.argument):
                R.RankingMetrics(1, metrics=[name], ties="average", **kwargs)
        else:
            cls(1, ties="average", **options)
            R.RankingMetrics(1, metrics=[name], ties="average", **kwargs)


@pytest.mark.parametrize("name", list(DEFAULT_METRICS))
def test_combined_values_equal_the_class_and_the_function(rng, name):
    entry = REGISTRY[name]
    cls = class_of(entry)
    scores, relevance = random_batch(rng, 12, 9, graded=True, zero_users=2)
    for value in entry.normalization.values if entry.normalization else (None,):
        options = {} if value is None else {"normalization": value}
        single = cls([1, 4, 12], **options)
        kwargs = {} if value is None else {entry.normalization.argument: value}
        combined = R.RankingMetrics(
            [1, 4, 12], metrics=[name], relevance_threshold=single.relevance_threshold, **kwargs
        )
        got = run_metric(combined, [(scores, relevance)])
        expected = run_metric(single, [(scores, relevance)])
        np.testing.assert_array_equal([got[f"{name}@{k}"] for k in (1, 4, 12)], expected)
        # the function returns the per-user values the class sums (NaN: a user not counted)
        per_user = getattr(F, name)(
            scores, relevance, [1, 4, 12], relevance_threshold=single.relevance_threshold, **options
        )
        np.testing.assert_allclose(np.nanmean(per_user.numpy(), 0), expected, rtol=1e-12, atol=0)
        functional = F.ranking_metrics(
            scores, relevance, [1, 4, 12], [name], relevance_threshold=single.relevance_threshold, **kwargs
        )
        np.testing.assert_array_equal(np.stack([functional[f"{name}@{k}"] for k in (1, 4, 12)], 1), per_user.numpy())


@pytest.mark.parametrize("name", list(ALL_METRICS))
def test_each_function_takes_the_defaults_of_its_class(name):
    """A function called without the common arguments computes what its class does by default
    (HitRate counts a label above 0 as relevant, the others a label of at least 1)."""
    function, cls = inspect.signature(getattr(F, name)).parameters, inspect.signature(class_of(REGISTRY[name]))
    for argument in ("relevance_threshold", "ties", "ignore_zero_hits", "num_items", "skip_users_without_relevant"):
        assert function[argument].default == cls.parameters[argument].default, argument


@pytest.mark.parametrize("name", list(ALL_METRICS))
def test_each_function_binds_its_arguments_as_its_signature_says(name):
    """``exclude`` passed by position lands where the signature puts it: third for r_precision,
    whose third positional was read as a top_k and dropped (0.5 where item 0's exclusion gives
    1.0). By hand: scores rank items 0-3, items 1 and 2 relevant, item 0 excluded, so item 1
    is first (the values at k = 1 below; R-precision's top 2 both relevant). A call the
    signature refuses raises a TypeError naming the function."""
    scores, labels = torch.tensor([[0.9, 0.8, 0.7, 0.6]]), torch.tensor([[0, 1, 1, 0]])
    excluded = torch.tensor([[True, False, False, False]])
    function, has_cutoff = getattr(F, name), REGISTRY[name].has_cutoff
    by_position = function(scores, labels, 1, excluded) if has_cutoff else function(scores, labels, excluded)
    by_keyword = function(scores, labels, **({"top_k": 1} if has_cutoff else {}), exclude=excluded)
    without = function(scores, labels, **({"top_k": 1} if has_cutoff else {}))
    assert torch.equal(by_position, by_keyword) and not torch.equal(by_position, without), name
    by_hand = {"ndcg": 1.0, "recall": 0.5, "precision": 1.0, "mrr": 1.0, "hit_rate": 1.0, "r_precision": 1.0}
    if name in by_hand:
        assert by_position.flatten().tolist() == [by_hand[name]]
    wrong = (scores, labels, 1, excluded, 3) if has_cutoff else (scores, labels, excluded, 2)
    with pytest.raises(TypeError, match=rf"^{name}\(\): too many positional arguments"):
        function(*wrong)
    with pytest.raises(TypeError, match=rf"^{name}\(\): got an unexpected keyword argument"):
        function(scores, labels, **({"top_k": 1} if has_cutoff else {}), exclud=excluded)
    if not has_cutoff:  # a cut-off given to a metric without one was dropped
        with pytest.raises(TypeError, match=rf"^{name}\(\): got an unexpected keyword argument 'top_k'"):
            function(scores, labels, top_k=5)
    else:  # None for the cut-offs: named, not a failure deep inside
        for call in (lambda: function(scores, labels, None), lambda: function(scores, labels, top_k=None)):
            with pytest.raises(TypeError, match=rf"^{name}\(\) needs top_k, the cut-offs of \['{name}'\]"):
                call()


@pytest.mark.parametrize(
    "metrics, error, message",
    [
        ([], ValueError, "metrics must name at least one metric"),
        (["ndcg", "ndcg"], ValueError, "metrics must not contain duplicates"),
        ("ndcg", TypeError, "metrics must be a sequence of metric names"),
        (["ndcg", "nope"], ValueError, "metrics"),
    ],
)
def test_ranking_metrics_function_checks_metrics_as_the_class_does(metrics, error, message):
    scores, labels = torch.tensor([[0.9, 0.8]]), torch.tensor([[0, 1]])
    with pytest.raises(TypeError, match=r"ranking_metrics\(\) needs top_k"):
        F.ranking_metrics(scores, labels, None)
    # no cut-off needed: the top |R| = 1 holds item 0, not relevant
    assert F.ranking_metrics(scores, labels, None, ["r_precision"])["r_precision"].tolist() == [0.0]
    with pytest.raises(error, match=message):
        R.RankingMetrics([1], metrics=metrics)
    with pytest.raises(error, match=message):
        F.ranking_metrics(scores, labels, [1], metrics)


def test_hit_rate_function_counts_a_label_above_zero_as_its_class_does():
    scores = torch.tensor([[3.0, 2.0, 1.0], [3.0, 2.0, 1.0], [3.0, 2.0, 1.0]])
    labels = torch.tensor([[0.5, 0.0, 0.0], [0.5, 0.0, 1.0], [0.0, 0.0, 0.0]])
    # numpy from the formula under y > 0: a hit in the top 1 / top 3; NaN for a user without a relevant item
    relevant = labels.numpy() > 0
    expected = np.stack([relevant[:, :k].any(1) for k in (1, 3)], 1).astype(float)
    expected[~relevant.any(1)] = np.nan
    np.testing.assert_array_equal(F.hit_rate(scores, labels, [1, 3]).numpy(), expected)
    metric = R.HitRate([1, 3], per_user=True)
    metric.update((scores, labels))
    np.testing.assert_array_equal(metric.per_user().numpy(), expected)


def test_the_harness_names_a_missing_reference_value():
    """A new numeric option without a second test value: the harness says what to add."""
    import dataclasses

    import harness

    option = next(option for entry in REGISTRY.values() for option in entry.options if option.name == "persistence")
    new = dataclasses.replace(option, name="half_life", argument="half_life")
    with pytest.raises(LookupError, match="add a reference for 'half_life'.*OTHER_VALUES"):
        harness.option_values(new)


def test_the_ranking_metrics_docstring_names_every_registry_metric():
    doc = R.RankingMetrics.__doc__
    for entry in REGISTRY.values():
        assert f":class:`{entry.class_name}`" in doc and f"``{entry.name!r}``" in doc, entry.name
    for argument in ranking_metrics_options():
        assert f"\n        {argument}: " in doc, argument
    assert "<" + "names>" not in doc and "<" + "conventions>" not in doc


# --- The steps of adding a metric beyond its entry, checked from the registry ----------------------
def _dict_keys(path, variable):
    """The string keys of the dict literal assigned to ``variable`` in ``path``, read without
    importing the module (an import of the harness itself fails on a missing reference)."""
    import ast
    import pathlib

    tree = ast.parse(pathlib.Path(path).read_text())
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(target, ast.Name) and target.id == variable for target in targets):
            return {key.value for key in node.value.keys if isinstance(key, ast.Constant)}
    raise LookupError(f"{path} assigns no {variable}")


def _missing_steps(entry):
    """The places a metric must reach beyond its registry entry that ``entry`` does not: one line
    each, naming the file and what to add there."""
    import pathlib

    from ignite_recsys._registry import ListEntry

    tests = pathlib.Path(__file__).resolve().parent
    readme = (tests.parent / "README.md").read_text()
    readme_lists = readme[: readme.index("## Install")]
    missing = []
    if entry.class_name not in R.__all__:
        where = "metrics/ranking.py" if not isinstance(entry, ListEntry) else "its family's file"
        missing.append(f"ignite_recsys: a class {entry.class_name} in {where}, exported by metrics/__init__.py")
    if f"`{entry.class_name}`" not in readme_lists:
        missing.append(f"README.md: `{entry.class_name}` in the list of metrics at the top (tests/test_readme.py)")
    if isinstance(entry, ListEntry):
        if entry.per_user and f"``{entry.name}``" not in F.__doc__:
            missing.append(f"ignite_recsys/functional.py: ``{entry.name}`` in the module docstring's list of functions")
        catalog = _dict_keys(tests / "harness.py", "CATALOG_CLASSES")
        if (
            entry.per_user
            and entry.name not in catalog
            and entry.name not in _dict_keys(tests / "harness.py", "LIST_REFERENCES")
        ):
            missing.append(
                f"tests/harness.py: LIST_REFERENCES[{entry.name!r}], its numpy reference "
                "(the formula written in tests/references_families.py)"
            )
    else:
        from references import user_values

        if entry.name not in user_values([0, 1, 2], [1.0, 0.0, 2.0], 2):
            missing.append(f"tests/references.py: user_values(...)[{entry.name!r}], its numpy reference")
    return missing


@pytest.mark.parametrize("entry", list(REGISTRY.values()) + list(LIST_ENTRIES), ids=lambda entry: entry.name)
def test_every_metric_reaches_every_place_adding_a_metric_needs(entry):
    missing = _missing_steps(entry)
    assert not missing, f"{entry.class_name} ({entry.name!r}) lacks:\n- " + "\n- ".join(missing)


def test_a_new_metric_is_told_each_step_it_lacks():
    """An entry with no class, README line, function doc line or reference: the check names each
    place to add it."""
    import dataclasses

    ranking = dataclasses.replace(REGISTRY["ndcg"], name="reciprocal_ndcg", class_name="ReciprocalNDCG")
    listed = dataclasses.replace(next(e for e in LIST_ENTRIES if e.name == "epc"), name="epd", class_name="EPD")
    assert [line.split(":")[0] for line in _missing_steps(ranking)] == [
        "ignite_recsys",
        "README.md",
        "tests/references.py",
    ]
    assert [line.split(":")[0] for line in _missing_steps(listed)] == [
        "ignite_recsys",
        "README.md",
        "ignite_recsys/functional.py",
        "tests/harness.py",
    ]
