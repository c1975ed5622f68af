"""Many ranking metrics at many cut-offs from one ranking step per batch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Optional, Sequence, Union

import torch

from .. import _validation as V
from .._registry import ALL_METRICS, DEFAULT_METRICS, REGISTRY, ranking_metrics_options
from ._ranking import RankingMean, option_parameters
from ._state import _PER_RANK, StatefulMetric, _identity


def check_metric_names(name: str, metrics: Any, arguments: Any) -> list:
    """The ``metrics`` argument: registry names, distinct (None: the default set)."""
    if metrics is None:
        return list(DEFAULT_METRICS)
    if isinstance(metrics, str) or not isinstance(metrics, Sequence):
        raise TypeError(f"metrics must be a sequence of metric names or None, got {type(metrics).__name__}")
    if len(metrics) == 0:
        raise ValueError("metrics must name at least one metric (or be None for all)")
    for metric in metrics:
        V.check_choice("metrics", metric, ALL_METRICS)
    if len(set(metrics)) != len(metrics):
        raise ValueError(f"metrics must not contain duplicates, got {list(metrics)}")
    return list(metrics)


class RankingMetrics(RankingMean):
    r"""Any subset of the ranking metrics at every cut-off, from a single shared ranking step.

    Each value equals that of the individual class (<classes>) with the same arguments.
    ``compute()`` returns a dict ``{"ndcg@10": float, ...}`` (``"r_precision"`` has no cut-off).
    The names, formulas and convention arguments come from one registry of the ranking metrics,
    shared with the classes.

    Attached to an Engine as ``name``, it writes that dict under ``name`` and each value as its
    own scalar under ``"<name>/ndcg@10"``, ``"<name>/r_precision"``. The attach name is always
    the prefix, so several of them (two models, two relevance thresholds) share an Engine without
    one overwriting the other's values; the bare names stay in the dict,
    ``engine.state.metrics[name]["ndcg@10"]``. A key another attached metric also writes raises
    a ValueError.

    Args:
        top_k: an int or a sequence of distinct positive ints.
        metrics: names among <names>; ``None``: the default set, <defaults>.
        <conventions>
        ignore_zero_hits, relevance_threshold, ties, output_transform, device, skip_unrolling:
            as in the individual metrics.

    >>> import torch
    >>> from ignite_recsys import RankingMetrics
    >>> metric = RankingMetrics(top_k=[1, 3], metrics=["ndcg", "recall", "mrr"])
    >>> metric.update((torch.tensor([[4.0, 3.0, 2.0, 1.0]]), torch.tensor([[0, 0, 1, 1]])))
    >>> {name: round(value, 4) for name, value in metric.compute().items()}
    {'ndcg@1': 0.0, 'ndcg@3': 0.3066, 'recall@1': 0.0, 'recall@3': 0.5, 'mrr@1': 0.0, 'mrr@3': 0.3333}
    """

    _option_keyword = "argument"
    _parameter_constraints = {
        "top_k": V.TOP_K,
        "metrics": V.Custom(
            "a sequence of distinct metric names, or None for the default metrics",
            check_metric_names,
            ("ndcg", [], ["ndcg", "ndcg"], ["no such metric"], 3),
        ),
        # gain_function, map_normalization, recall_normalization, ...: the registry's options
        **{argument: option.checked_by for argument, option in ranking_metrics_options().items()},
    }

    @classmethod
    def _option_parameters(cls, named: tuple) -> list:
        return option_parameters(list(REGISTRY.values()), "argument", skip=named)

    @V.checks_constructor
    def __init__(
        self,
        top_k: Union[int, Sequence[int]],
        metrics: Optional[Sequence[str]] = None,
        ignore_zero_hits: bool = True,
        relevance_threshold: Optional[float] = 1.0,
        gain_function: V.GainFunction = "exp_rank",
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
        **keywords: Any,
    ):
        arguments = self._arguments
        entries = [REGISTRY[name] for name in arguments["metrics"]]
        # each metric's options, by the metric's own option names, from RankingMetrics' arguments
        options = {
            entry.name: {option.name: arguments[option.argument] for option in entry.options} for entry in entries
        }
        self._start(arguments, entries, options)

    def _result(self, means):
        return dict(zip(self._names, means))

    def _value_labels(self):
        return [f"/{key}" for key in self._names]


def _listed(names) -> str:
    return ", ".join(f"``{name!r}``" for name in names)


def _conventions_text() -> str:
    lines = []
    for argument, option in ranking_metrics_options().items():
        users = [entry.class_name for entry in REGISTRY.values() if option in entry.options]
        choices = f", one of {_listed(option.values)}" if option.choices else ""
        lines.append(
            f"{argument}: ``{option.name}=`` of {', '.join(f':class:`{name}`' for name in users)}{choices} "
            f"(default {option.default!r})."
        )
    return "\n        ".join(lines)


# The docstring's enumerations, from the registry
RankingMetrics.__doc__ = (
    (RankingMetrics.__doc__ or "")
    .replace("<classes>", ", ".join(f":class:`{entry.class_name}`" for entry in REGISTRY.values()))
    .replace("<names>", _listed(ALL_METRICS))
    .replace("<defaults>", _listed(DEFAULT_METRICS))
    .replace("<conventions>", _conventions_text())
)


class RecallAtFixedPrecision(StatefulMetric):
    r"""The largest Recall@k over k = 1..``max_k`` whose Precision@k reaches ``min_precision``, on
    the curves averaged over users, and that k (torchmetrics ``RetrievalRecallAtFixedPrecision``).

    .. math:: (R^*, k^*) = \max_{k \le K:\ \overline{P@k} \ge p_{min}} \overline{R@k}

    with :math:`\overline{P@k}` and :math:`\overline{R@k}` the means over users, streamed as
    sums (the curves of one ranking step per batch, as :class:`RankingMetrics`). Equal recalls
    go to the largest k; when no k qualifies, or the best recall is 0, ``(0.0, max_k)``.
    ``adaptive_k=True``: P@k divides by min(k, the user's candidates). As torchmetrics by default
    (``empty_target_action="neg"``), users without a relevant item count, with zero curves
    (``ignore_zero_hits=False``). A mean P@k reaches ``min_precision`` up to the rounding of its
    float64 sum ((n + 64) 2^-52 for n users), so that a mean equal to it in exact arithmetic
    qualifies however the users were batched or spread over processes. ``compute()`` returns
    ``(recall, k)``; the curves are
    :meth:`curves`. It holds the :class:`RankingMetrics` of the two curves, whose state it
    saves and loads under its own configuration. A pick of k on the mean curves is no mean over
    users: it has no confidence interval, per-user values or groups.

    >>> import torch
    >>> from ignite_recsys import RecallAtFixedPrecision
    >>> metric = RecallAtFixedPrecision(max_k=3, min_precision=0.6)
    >>> metric.update((torch.tensor([[3.0, 2.0, 1.0]]), torch.tensor([[1, 0, 1]])))
    >>> metric.compute()
    (1.0, 3)
    """

    _parameter_constraints = {
        "max_k": V.positive_int(),
        "min_precision": V.Interval(float, 0, 1),
        "adaptive_k": V.BOOLEAN,
        # the curves' arguments, as RankingMetrics checks them
        **{
            name: V.declared_constraints(RankingMetrics)[name]
            for name in ("ignore_zero_hits", "relevance_threshold", "ties", "num_items")
        },
    }

    @V.checks_constructor
    def __init__(
        self,
        max_k: int,
        min_precision: float = 0.0,
        adaptive_k: bool = False,
        ignore_zero_hits: bool = False,
        relevance_threshold: Optional[float] = 1.0,
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
        *,
        ties: str = "stable",
        num_items: Optional[int] = None,
    ):
        self.max_k, self.min_precision, self.adaptive_k = max_k, min_precision, adaptive_k
        self._curves = RankingMetrics(
            list(range(1, max_k + 1)),
            ["precision", "recall"],
            ignore_zero_hits,
            relevance_threshold,
            device=device,
            ties=ties,
            num_items=num_items,
            precision_normalization="min_k_items" if adaptive_k else "k",
        )
        super().__init__(output_transform, device, skip_unrolling)

    def reset(self) -> None:
        super().reset()
        self._curves.reset()

    def update(self, output: Any) -> None:
        self._curves.update(output)

    def curves(self) -> dict:
        """``{"precision": [mean P@1, ..., mean P@max_k], "recall": [...]}`` over the users counted."""
        means = self._curves.compute()
        ks = range(1, self.max_k + 1)
        return {name: [means[f"{name}@{k}"] for k in ks] for name in ("precision", "recall")}

    def compute(self) -> tuple:
        curves = self.curves()
        (count,) = self._curves._reduced("_count")
        # a mean of n values in [0, 1] summed in float64 is off by at most about n * 2**-53: a P@k
        # equal to min_precision in exact arithmetic reaches it however the sums were added
        slack = (float(count) + 64) * 2.0**-52
        best = None
        for k, (precision, recall) in enumerate(zip(curves["precision"], curves["recall"]), start=1):
            if precision >= self.min_precision - slack and (best is None or (recall, k) > best):
                best = (recall, k)
        if best is None or best[0] == 0.0:
            return 0.0, self.max_k
        return best

    def _value_labels(self):
        return ["/recall", "/k"]

    def state_dict(self):
        """The curves' state under this metric's configuration."""
        state = self._curves.state_dict()
        state["configuration"] = self._configuration()
        return state

    def load_state_dict(self, state_dict: Mapping) -> None:
        if isinstance(state_dict, Mapping) and "configuration" in state_dict:
            self._check_configuration(state_dict["configuration"])
            state_dict = {_PER_RANK: state_dict.get(_PER_RANK)} if _PER_RANK in state_dict else {}
        self._curves.load_state_dict(state_dict)
        self._resume_pending = True
