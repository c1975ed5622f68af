"""The per-user metrics as functions of tensors: per-user values of one batch, in one call.

One function per ranking metric of the registry (``ndcg``, ``hit_rate``, ``recall``,
``precision``, ``map``, ``mrr``, ``f1``, ``r_precision``, ...) and :func:`ranking_metrics` for
several at once. Each takes the inputs a metric's ``update`` takes, in every form (dense scores or
:class:`~ignite_recsys.RankedItems`; dense, sparse or :class:`~ignite_recsys.ItemIds` targets; an
optional ``exclude``), the same conventions as keywords, and returns float64 per-user values: a
(batch, len(top_k)) tensor, columns in ascending k (a (batch,) tensor for ``r_precision``). A
user the class would not count (no relevant item under ``ignore_zero_hits=True``) gets NaN, so
``values.nanmean(0)`` is what the class's ``compute()`` gives for this batch, and the values are
exactly those of its ``per_user()``: both run the same code (the class sums what this returns).

Value checks (NaN scores, ids outside the catalog) raise a ValueError here, on any device (a
function returns its values, so it reads the checks on the host; the classes defer them on
accelerators).

The metrics of the top-k lists that have per-user values (``average_popularity``,
``tail_percentage``, ``novelty``, ``intra_list_diversity``, ``serendipity``, ``epc``, ``efd``,
``mean_inv_user_freq``, ``miscalibration``, ``rank_biased_entropy``, ``aplt``, ``aclt``, ``mean_pop_rank``,
``rank_biased_overlap``, ``intersection``) have a function each too, named after the class in
snake_case: the update's inputs, then the constructor's arguments (those without a default
positional, the others keyword-only), returning the (batch, len(top_k)) values that the class's
``per_user()`` keeps (NaN: a user not counted). Those that read no relevance (all but
``serendipity``, ``epc`` and ``efd``) take ``y=None``, or no ``y`` at all.
:func:`sampled_metrics` gives the per-test-item values of :class:`~ignite_recsys.SampledMetrics`
(a dict, as its ``per_user()``).

>>> import torch
>>> from ignite_recsys import functional as F
>>> scores = torch.tensor([[4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
>>> relevance = torch.tensor([[0, 0, 1, 1], [0, 0, 0, 0]])
>>> F.ndcg(scores, relevance, top_k=[2, 4])
tensor([[0.0000, 0.5706],
        [   nan,    nan]], dtype=torch.float64)
>>> F.recall(scores, relevance, top_k=3, ignore_zero_hits=False)
tensor([[0.5000],
        [0.0000]], dtype=torch.float64)
>>> {name: values.tolist() for name, values in F.ranking_metrics(scores, relevance, 2, ["mrr", "hit_rate"]).items()}
{'mrr@2': [0.0, nan], 'hit_rate@2': [0.0, nan]}
>>> F.average_popularity(scores, relevance, [1, 2], torch.tensor([10.0, 6.0, 2.0, 0.0]))
tensor([[10.,  8.],
        [ 0.,  1.]], dtype=torch.float64)
>>> F.average_popularity(scores, None, [1, 2], torch.tensor([10.0, 6.0, 2.0, 0.0]))[0].tolist()
[10.0, 8.0]
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Optional, Sequence, Union

import torch

from . import _validation as V
from ._core.adapters import parse_ranking_input
from ._core.input_checks import raise_if_invalid
from ._registry import LIST_ENTRIES, REGISTRY, RankingEntry, ranking_metrics_options
from .inputs import DotScores, ItemIds, RankedItems
from . import metrics
from .metrics._ranking import RankingConfig, RankingMean
from .metrics._users import UserMean
from .metrics.ranking_metrics import check_metric_names

# the arguments every function takes, checked as the classes check them
_COMMON = {
    name: V.declared_constraints(RankingMean)[name]
    for name in ("relevance_threshold", "ties", "ignore_zero_hits", "num_items", "skip_users_without_relevant")
}


def _whole_catalog(owner: str, y_pred: Any) -> None:
    """Refuse ``DotScores`` of one shard of a split item table: a function returns every user's
    values of its one call, where a split table's metrics count each process's share of users."""
    if isinstance(y_pred, DotScores) and y_pred.sharded:
        raise ValueError(
            f"{owner}() takes no y_pred of DotScores with a split item table (item_offset, num_items): its "
            "values would be this process's users only; update a metric class in every process instead"
        )


def _values(owner: str, entries: Sequence[RankingEntry], options: dict, y_pred, y, exclude, arguments: dict) -> tuple:
    """(the name of each column, (batch, columns) float64 per-user values) of ``entries`` under
    ``options`` and the common ``arguments`` (``top_k`` and ``_COMMON``, checked here); NaN for a
    user not counted."""
    checked = V.validate(_COMMON, {name: arguments[name] for name in _COMMON})
    checked["top_k"] = None if arguments["top_k"] is None else list(V.check_top_k(arguments["top_k"]))
    if checked["top_k"] is None and any(entry.has_cutoff for entry in entries):
        raise TypeError(
            f"{owner}() needs top_k, the cut-offs of {[entry.name for entry in entries if entry.has_cutoff]}: an int "
            "or a sequence of distinct positive ints"
        )
    config = RankingConfig.of(owner, checked, entries, options)
    _whole_catalog(owner, y_pred)
    batch = parse_ranking_input((y_pred, y) if exclude is None else (y_pred, y, exclude), num_items=config.num_items)
    columns, has_relevant, invalid, _ = config.evaluate(batch, config.request())
    raise_if_invalid(invalid)
    values = torch.cat(columns, 1)
    if config.ignore_zero_hits:
        values = torch.where(has_relevant.unsqueeze(1), values, torch.nan)
    return config.value_names(), values


def _checked_options(entry: RankingEntry, given: dict, attribute: str = "name") -> dict:
    """The entry's options by their names, from ``given`` (keyed by ``attribute`` of each option),
    checked by the option's constraint."""
    chosen = {}
    for option in entry.options:
        key = getattr(option, attribute)
        value = given.get(key, option.default)
        chosen[option.name] = option.checked_by.check(key, value, given)
    return chosen


def ranking_metrics(
    y_pred: Any,
    y: Any,
    top_k: Union[int, Sequence[int]],
    metrics: Optional[Sequence[str]] = None,
    exclude: Any = None,
    *,
    relevance_threshold: Optional[float] = 1.0,
    ties: str = "stable",
    ignore_zero_hits: bool = True,
    num_items: Optional[int] = None,
    skip_users_without_relevant: Optional[bool] = None,
    **conventions: Any,
) -> dict:
    """Per-user values of several ranking metrics from one ranking step, as
    :class:`~ignite_recsys.RankingMetrics` computes them: ``{"ndcg@10": (batch,) tensor, ...,
    "r_precision": (batch,) tensor}`` (NaN: a user not counted). ``metrics``: registry names
    (None: the default set); ``conventions``: RankingMetrics' convention arguments
    (``gain_function``, ``map_normalization``, ...)."""
    names = check_metric_names("metrics", metrics, {})
    known = ranking_metrics_options()
    for argument in conventions:
        if argument not in known:
            raise TypeError(f"ranking_metrics() got an unexpected keyword argument {argument!r}")
    entries = [REGISTRY[name] for name in names]
    options = {entry.name: _checked_options(entry, {**conventions, "top_k": top_k}, "argument") for entry in entries}
    common = {
        "top_k": top_k,
        "relevance_threshold": relevance_threshold,
        "ties": ties,
        "ignore_zero_hits": ignore_zero_hits,
        "num_items": num_items,
        "skip_users_without_relevant": skip_users_without_relevant,
    }
    keys, values = _values("ranking_metrics", entries, options, y_pred, y, exclude, common)
    return dict(zip(keys, values.unbind(1)))


def _class_defaults(entry: RankingEntry) -> dict:
    """The defaults of the common arguments (``_COMMON``) in the entry's class: its function's own
    (``HitRate`` counts a label above 0 as relevant, the others a label of at least 1)."""
    parameters = inspect.signature(getattr(metrics, entry.class_name)).parameters
    return {name: parameters[name].default for name in _COMMON}


def _function_of(entry: RankingEntry):
    """The function of one registry entry: per-user values (batch, len(top_k)), or (batch,)
    without cut-off; the class's defaults."""
    defaults = _class_defaults(entry)

    def metric_values(*args: Any, **kwargs: Any) -> torch.Tensor:
        try:  # the arguments as the signature below binds them (``exclude`` third without a cut-off)
            bound = signature.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError(f"{entry.name}(): {error}") from None
        bound.apply_defaults()
        given = dict(bound.arguments)
        y_pred, y, exclude = given.pop("y_pred"), given.pop("y"), given.pop("exclude")
        top_k = given.pop("top_k", None)
        common = {name: given.pop(name) for name in defaults}
        chosen = {entry.name: _checked_options(entry, {**given, "top_k": top_k})}
        _, values = _values(entry.name, [entry], chosen, y_pred, y, exclude, {"top_k": top_k, **common})
        return values if entry.has_cutoff else values[:, 0]

    keyword = inspect.Parameter.KEYWORD_ONLY
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    parameters = [inspect.Parameter("y_pred", positional), inspect.Parameter("y", positional)]
    if entry.has_cutoff:
        parameters.append(inspect.Parameter("top_k", positional))
    parameters.append(inspect.Parameter("exclude", positional, default=None))
    parameters += [inspect.Parameter(name, keyword, default=default) for name, default in defaults.items()]
    parameters += [inspect.Parameter(option.name, keyword, default=option.default) for option in entry.options]
    signature = inspect.Signature(parameters)
    metric_values.__signature__ = signature  # type: ignore[attr-defined]
    metric_values.__name__ = metric_values.__qualname__ = entry.name
    shape = "(batch, len(top_k)) per cut-off, ascending" if entry.has_cutoff else "(batch,)"
    conventions = "".join(
        f"\n        {option.name}: {option.description} (default {option.default!r})." for option in entry.options
    )
    metric_values.__doc__ = (
        f"{entry.summary} Per-user values {shape}, float64; NaN for a user not counted.\n\n"
        f"    The function of :class:`~ignite_recsys.{entry.class_name}` (its formula, conventions and "
        f"defaults; same inputs as its ``update``).\n\n"
        f"    Args:\n        y_pred, y, exclude: as ``update((y_pred, y[, exclude]))``.\n"
        + ("        top_k: an int or a sequence of distinct positive ints.\n" if entry.has_cutoff else "")
        + "        relevance_threshold, ties, ignore_zero_hits (skip_users_without_relevant), num_items: as the "
        "class.\n" + conventions + "\n"
    )
    metric_values.__module__ = __name__
    return metric_values


for _entry in REGISTRY.values():
    globals()[_entry.name] = _function_of(_entry)


# --- The metrics of the top-k lists ----------------------------------------------------------------
# the list metrics of the registry that keep per-user values (the others are global: coverage, Gini, ...)
LIST_METRICS = tuple(getattr(metrics, entry.class_name) for entry in LIST_ENTRIES if entry.per_user)
_MACHINERY = ("output_transform", "device", "skip_unrolling", "per_user", "num_groups")  # not a metric's choice


def function_name(metric_class: type) -> str:
    """The snake_case name of a class: ``MeanInvUserFreq`` -> ``mean_inv_user_freq``, ``EPC`` -> ``epc``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", metric_class.__name__).lower()


def _no_labels(y_pred: Any) -> Any:
    """What stands for the ``y`` a list metric does not read: ``ItemIds`` listing no item for each
    user of ``y_pred``; None where ``y_pred`` is no accepted form (its own error is then raised)."""
    if isinstance(y_pred, RankedItems):
        y_pred = y_pred.ids
    elif not isinstance(y_pred, torch.Tensor):  # vectors of the users (DotScores): one row a user
        y_pred = getattr(y_pred, "user_vectors", None)
    if not isinstance(y_pred, torch.Tensor) or y_pred.ndim != 2 or y_pred.shape[0] == 0:
        return None
    return ItemIds(torch.full((y_pred.shape[0], 1), -1, dtype=torch.int64, device=y_pred.device))


def _function_of_class(metric_class: "type[UserMean]", name: str):
    """The function of a per-user list metric: its ``_parse`` and ``_user_rows`` (what ``update``
    sums) on one batch, with the constructor's checks."""
    empty = inspect.Parameter.empty
    positional, keyword = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY
    constructor = [p for p in inspect.signature(metric_class).parameters.values() if p.name not in _MACHINERY]
    required, optional = list(metric_class.required_output_keys or ()), list(metric_class.optional_output_keys)
    # ``y`` of a metric that reads no relevance: None or left out (it keeps its place, second)
    needs = next(entry.needs for entry in LIST_ENTRIES if entry.name == name)
    unread = "y" in required and "relevance" not in needs
    parameters = [
        inspect.Parameter(name, positional, default=None if unread and name == "y" else inspect.Parameter.empty)
        for name in required
    ]
    parameters += [inspect.Parameter(p.name, positional) for p in constructor if p.default is empty]
    parameters += [inspect.Parameter(name, positional, default=None) for name in optional]
    parameters += [inspect.Parameter(p.name, keyword, default=p.default) for p in constructor if p.default is not empty]
    # a default (y's) before parameters without one: allowed here, as ``bind`` handles it
    signature = inspect.Signature(parameters, __validate_parameters__=not unread)

    def metric_values(*args: Any, **kwargs: Any) -> torch.Tensor:
        arguments = signature.bind(*args, **kwargs).arguments
        _whole_catalog(name, arguments.get(required[0]))
        metric = metric_class(**{p.name: arguments[p.name] for p in constructor if p.name in arguments})
        if unread and arguments.get("y") is None:
            arguments["y"] = _no_labels(arguments[required[0]])
        inputs = [arguments[name] for name in required] + [arguments.get(name) for name in optional]
        while len(inputs) > len(required) and inputs[-1] is None:
            inputs.pop()
        rows = metric._user_rows(metric._parse(tuple(inputs)))
        raise_if_invalid(rows.invalid)
        return torch.where(rows.weight.unsqueeze(1) > 0, rows.values, torch.nan)

    metric_values.__signature__ = signature  # type: ignore[attr-defined]
    metric_values.__name__ = metric_values.__qualname__ = name
    metric_values.__module__ = __name__
    metric_values.__doc__ = (
        f"Per-user values of :class:`~ignite_recsys.{metric_class.__name__}` (its formula, conventions and "
        "defaults): (batch, len(top_k)) float64, columns in ascending k; NaN for a user not counted.\n\n"
        f"    Inputs as its ``update(({', '.join(required + optional)}))``; then its constructor's arguments.\n"
    )
    return metric_values


for _class in LIST_METRICS:
    globals()[_class.entry.name] = _function_of_class(_class, _class.entry.name)


def sampled_metrics(y_pred: Any, y: Any, *, model: Any = None, **options: Any) -> dict:
    """Per-test-item values of :class:`~ignite_recsys.SampledMetrics` on one batch (its
    arguments, conventions and defaults, ``seed`` included: the same seed samples the same
    negatives): ``{"<metric>@<k>/<estimator>": (items,) float64}``, what its ``per_user()`` keeps
    after ``update((y_pred, y))``.

    >>> import torch
    >>> from ignite_recsys import functional as F
    >>> scores = torch.arange(1000.0).repeat(4, 1)  # item i scores i
    >>> F.sampled_metrics(scores, torch.tensor([999, 998, 500, 0]), top_k=[10], metrics=["hit_rate"],
    ...                   estimators=["naive"], seed=0)["hit_rate@10/naive"]
    tensor([1., 1., 0., 0.], dtype=torch.float64)
    """
    metric = metrics.SampledMetrics(model=model, per_user=True, **options)
    metric.update((y_pred, y))
    return metric.per_user()


__all__ = [
    *REGISTRY,
    "ranking_metrics",
    *(metric_class.entry.name for metric_class in LIST_METRICS),
    "sampled_metrics",
]
