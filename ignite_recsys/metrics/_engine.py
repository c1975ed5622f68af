"""How the metrics meet an Ignite ``Engine``: the functions that a metric's ``attach``,
``completed`` and ``iteration_completed`` call (:class:`~ignite_recsys.metrics._state.StatefulMetric`).
They decide the keys the metrics write into ``engine.state.metrics`` (never overwriting another
metric's key silently, where its keys are known when it is attached: not the keys of another
library's dict result, which Ignite writes at the epoch's end), the scalar keys to log, and the
optional inputs read from a dict output.

Keys. A metric attached as ``name`` writes ``compute()``'s result under ``name`` and, when that
result holds several values, one scalar per value under a key that starts with ``name``:

- a metric with cut-offs (``NDCG``, ``ItemCoverage``, ...): ``"<name>@<k>"``;
- :class:`RankingMetrics`: ``"<name>/<metric>@<k>"`` (and ``"<name>/r_precision"``).

A metric built with ``num_groups=G`` also writes each group's values: each scalar key above (or
``name`` itself for a single value) followed by ``"/group<g>"``, e.g. ``"ndcg@10/group1"``,
``"ranking/ndcg@10/group1"``, ``"r_precision/group0"``.

Every key thus follows from the attach name alone, so metrics attached under different names do
not collide, e.g. two ``RankingMetrics`` attached as ``"model_a"`` and ``"model_b"``. When two
attached metrics would still write the same key (``NDCG`` attached as ``"model_a/ndcg"`` next to a
``RankingMetrics`` attached as ``"model_a"``; any metric attached as ``"ndcg@10"`` next to an
``NDCG`` attached as ``"ndcg"``), ``attach`` raises a ValueError, and so does the end of an epoch
if the clashing metric was attached afterwards.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Iterator

import torch
from ignite.metrics.metric import Metric, _is_list_of_tensors_or_numbers, _to_batched_tensor


def _attached_metrics(engine) -> Iterator[tuple[Metric, str]]:
    """(metric, attach name) of every metric attached to ``engine``, in attach order."""
    for handlers in getattr(engine, "_event_handlers", {}).values():
        for handler, args, _ in handlers:
            handler = getattr(handler, "__wrapped__", handler)  # handlers of filtered events
            metric = getattr(handler, "__self__", None)
            if (
                isinstance(metric, Metric)
                and getattr(handler, "__name__", None) == "completed"
                and args
                and isinstance(args[-1], str)
            ):
                yield metric, args[-1]


def _of_this_library(metric: Any) -> bool:
    """Whether ``metric`` names its Engine keys as the metrics here do (``_scalar_keys``)."""
    return callable(getattr(type(metric), "_scalar_keys", None))


def _keys_of(metric: Any, name: str) -> list[str]:
    """The keys of ``engine.state.metrics`` that ``metric`` attached as ``name`` writes."""
    if _of_this_library(metric):
        return [name] + metric._scalar_keys(name) + metric._group_keys(name)
    return [name]


def scalar_metric_names(engine) -> list[str]:
    """The keys of ``engine.state.metrics`` that hold one number each, for a logger's
    ``metric_names``: every scalar of the metrics of this library attached to ``engine``
    (``"ranking/ndcg@10"``, ``"coverage@10"``, ``"gauc"``, ...) and every other metric by its
    attach name, in attach order, without the lists and dicts that ``compute()`` returns.

    Attach the metrics before calling it. With ``metric_names="all"`` a logger would also log each
    list as ``"<name>/0"``, ``"<name>/1"``, ... and each dict again, every value twice.

    >>> import torch
    >>> from ignite.engine import Engine
    >>> from ignite_recsys import GAUC, NDCG, RankingMetrics, scalar_metric_names
    >>> evaluator = Engine(lambda engine, batch: batch)
    >>> NDCG(top_k=[10, 5]).attach(evaluator, "ndcg")
    >>> RankingMetrics(top_k=5, metrics=["recall", "mrr"]).attach(evaluator, "ranking")
    >>> GAUC().attach(evaluator, "gauc")
    >>> scalar_metric_names(evaluator)
    ['ndcg@5', 'ndcg@10', 'ranking/recall@5', 'ranking/mrr@5', 'gauc']
    """
    names: dict = {}
    for metric, name in _attached_metrics(engine):
        keys = (metric._scalar_keys(name) or [name]) + metric._group_keys(name) if _of_this_library(metric) else [name]
        names.update(dict.fromkeys(keys))
    return list(names)


def result_values(result: Any) -> list:
    """The values of a result in label order: a list or tuple as is, a dict's values."""
    if isinstance(result, Mapping):
        return list(result.values())
    return list(result) if isinstance(result, (list, tuple)) else [result]


def scalar_keys(metric: Any, name: str) -> list[str]:
    """The scalar keys of a result with several values (``[]`` for a single value): ``name``
    followed by each of the metric's ``_value_labels()`` (None: a single value)."""
    labels = metric._value_labels()
    return [] if labels is None else [name + label for label in labels]


def scalar_items(metric: Any, name: str, result: Any) -> list[tuple[str, Any]]:
    """(key, value) of each value: the scalar keys, or ``(name, result)`` for a single value."""
    keys = metric._scalar_keys(name)
    return list(zip(keys, result_values(result))) if keys else [(name, result)]


def group_keys(metric: Any, name: str) -> list[str]:
    """``"<scalar key>/group<g>"`` of every scalar key (``name`` for a single value) and group."""
    keys = metric._scalar_keys(name) or [name]
    return [f"{key}/group{group}" for key in keys for group in range(metric.num_groups or 0)]


def check_keys_are_free(metric: Any, engine, name: str) -> None:
    """Refuse to write a key of ``engine.state.metrics`` that another attached metric writes."""
    mine = _keys_of(metric, name)
    for other, other_name in _attached_metrics(engine):
        if other is metric and other_name == name:
            continue
        shared = [key for key in _keys_of(other, other_name) if key in mine]
        if shared:
            raise ValueError(
                f"{type(metric).__name__} attached as {name!r} and {type(other).__name__} attached as "
                f"{other_name!r} would both write {shared} into engine.state.metrics, one overwriting "
                "the other. Attach them under names that give distinct keys (a metric attached as 'x' "
                "writes 'x' and one scalar per value: 'x@<k>', or 'x/<metric>@<k>' for RankingMetrics)."
            )


def write_results(metric: Any, engine, name: str) -> None:
    """``compute()``'s result under ``name``, its scalars, and each group's scalars."""
    check_keys_are_free(metric, engine, name)  # a clashing metric attached after this one
    result = metric.compute()
    engine.state.metrics[name] = result
    if metric._scalar_keys(name):
        for key, value in metric._scalar_items(name, result):
            engine.state.metrics[key] = value
    if metric.num_groups:
        for key, value in metric._group_scalar_items(name):
            engine.state.metrics[key] = value


def from_mapping(metric: Any, output: Mapping) -> tuple:
    """A dict output as ``update``'s tuple: ``required_output_keys``, then every key of
    ``optional_output_keys`` it holds, in that order. A missing optional key before a present
    one is passed as None; missing trailing ones are left out, so ``{"y_pred", "y"}`` gives
    ``update((y_pred, y))`` and ``{"y_pred", "y", "mask"}`` gives ``update((y_pred, y, mask))``.
    Further keys the metric reads as user tags (``_tagged_output_keys``) come last, each wrapped
    in its class."""
    required = metric.required_output_keys
    if required is None:
        raise TypeError(
            f"Transformed engine output for {type(metric).__name__} metric should be a tuple/list, "
            f"but given {type(output)}"
        )
    missing = [key for key in required if key not in output]
    if missing:
        raise ValueError(
            f"When transformed engine's output is a mapping, it should contain {tuple(required)} keys "
            f"(and optionally {tuple(metric.optional_output_keys) + tuple(metric._tagged_output_keys())}), "
            f"but given {list(output.keys())}"
        )
    optional = [output.get(key) for key in metric.optional_output_keys]
    while optional and optional[-1] is None:
        optional.pop()
    tagged = [
        value if isinstance(value, wrapper) else wrapper(value)
        for key, wrapper in metric._tagged_output_keys().items()
        if (value := output.get(key)) is not None
    ]
    return tuple(output[key] for key in required) + tuple(optional) + tuple(tagged)


@torch.no_grad()
def update_from_engine(metric: Any, engine) -> None:
    """One ``update`` from the Engine's output (a dict output through :func:`from_mapping`; as
    ignite, a pair of lists of per-sample tensors is unrolled into one update per sample)."""
    output = metric._output_transform(engine.state.output)
    if isinstance(output, Mapping):
        output = from_mapping(metric, output)
    if (
        not metric._skip_unrolling
        and isinstance(output, Sequence)
        and all(_is_list_of_tensors_or_numbers(o) for o in output)
    ):
        if not (len(output) == 2 and len(output[0]) == len(output[1])):
            raise ValueError(
                f"Output should have 2 items of the same length, "
                f"got {len(output)} and {len(output[0])}, {len(output[1])}"
            )
        for o1, o2 in zip(output[0], output[1]):
            tensor_o1 = _to_batched_tensor(o1)
            metric.update((tensor_o1, _to_batched_tensor(o2, device=tensor_o1.device)))
    else:
        metric.update(output)


_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def snake_case(class_name: str) -> str:
    """``"HitRate"`` -> ``"hit_rate"``, ``"NDCG"`` -> ``"ndcg"``."""
    return _CAMEL_BOUNDARY.sub("_", class_name).lower()


class CutoffResults:
    """Results per cut-off ``top_k`` (ascending): ``compute()`` returns a list, ``compute_dict()``
    the same values labelled ``"<metric>@<k>"``, and an Engine gets ``"<name>@<k>"`` scalars."""

    top_k: Any  # the sorted cut-offs (a list)

    def _value_labels(self) -> list[str]:
        return [f"@{k}" for k in self.top_k]

    def compute_dict(self) -> dict[str, float]:
        """``compute()`` as a dict ``{"<metric>@<k>": value}`` in ascending k order, e.g.
        ``{"ndcg@1": ..., "ndcg@3": ...}`` for ``NDCG(top_k=[3, 1])``; ``<metric>`` is the
        registry entry's name (``"hit_rate"``, ``"item_coverage"``, ``"bpref"``), as in
        :class:`RankingMetrics`, ``evaluate()`` and the command line; the class name in snake case
        for a class without an entry."""
        entry = getattr(self, "entry", None)
        prefix = entry.name if entry is not None else snake_case(type(self).__name__)
        return {prefix + label: value for label, value in zip(self._value_labels(), self.compute())}  # type: ignore[attr-defined]
