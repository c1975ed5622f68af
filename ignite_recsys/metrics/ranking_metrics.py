"""Many ranking metrics at many cut-offs from one ranking step per batch."""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import torch

from .. import _validation as V
from .. import functional as F
from .._core.ranking import hits_within_own_depth, rank_input
from .._registry import ALL_METRICS, CUTOFF_METRICS, REGISTRY
from ._base import BoundaryTies, MeanOverUsers, _identity
from ._engine import ScalarResults


class RankingMetrics(BoundaryTies, ScalarResults, MeanOverUsers):
    r"""Any subset of the ranking metrics at every cut-off, from a single shared ranking step.

    Each value equals that of the individual class (:class:`NDCG`, :class:`HitRate`,
    :class:`Recall`, :class:`Precision`, :class:`MAP`, :class:`MRR`, :class:`F1`,
    :class:`RPrecision`) with the same arguments. ``compute()`` returns a dict
    ``{"ndcg@10": float, ...}`` (``"r_precision"`` has no cut-off). The names, formulas and
    normalization choices come from one registry of the ranking metrics, shared with the classes.

    Attached to an Engine as ``name``, it writes that dict under ``name`` and each value as its
    own scalar under ``"<name>/ndcg@10"``, ``"<name>/r_precision"``. The attach name is always
    the prefix, so several of them (two models, two relevance thresholds) share an Engine without
    one overwriting the other's values; the bare names stay in the dict,
    ``engine.state.metrics[name]["ndcg@10"]``. A key another attached metric also writes raises
    a ValueError.

    Args:
        top_k: an int or a sequence of distinct positive ints.
        metrics: names among ``"ndcg", "hit_rate", "recall", "precision", "map", "mrr", "f1",
            "r_precision"``; ``None`` means every cut-off metric (all but ``"r_precision"``,
            which sorts full rows and is only computed when named).
        gain_function: NDCG's gain, as in :class:`NDCG`.
        map_normalization: the divisor of AP@k for ``"map"``, as ``MAP(normalization=)``: one of
            ``"min_k_relevant"`` (min(k, \|R\|); default), ``"relevant"`` (\|R\|), ``"hits"`` (the
            number of relevant items in the top k).
        recall_normalization: the divisor of Recall@k for ``"recall"``, as
            ``Recall(normalization=)``: one of ``"relevant"`` (\|R\|; default),
            ``"min_k_relevant"`` (min(k, \|R\|)).
        precision_normalization: the divisor of P@k for ``"precision"``, as
            ``Precision(normalization=)``: one of ``"k"`` (default), ``"min_k_items"``
            (min(k, num_items)).
        ignore_zero_hits, relevance_threshold, ties, output_transform, device, skip_unrolling:
            as in the individual metrics.

    >>> import torch
    >>> from ignite_recsys import RankingMetrics
    >>> metric = RankingMetrics(top_k=[1, 3], metrics=["ndcg", "recall", "mrr"])
    >>> metric.update((torch.tensor([[4.0, 3.0, 2.0, 1.0]]), torch.tensor([[0, 0, 1, 1]])))
    >>> {name: round(value, 4) for name, value in metric.compute().items()}
    {'ndcg@1': 0.0, 'ndcg@3': 0.3066, 'recall@1': 0.0, 'recall@3': 0.5, 'mrr@1': 0.0, 'mrr@3': 0.3333}
    """

    _parameter_constraints = {
        "top_k": V.TOP_K,
        "metrics": V.Param("a sequence of distinct metric names, or None for every cut-off metric",
                           lambda name, value, arguments: RankingMetrics._check_metrics(value)),
        "gain_function": V.GAIN_FUNCTION,
        # map_normalization, recall_normalization, precision_normalization: the registry's options
        **{entry.normalization.argument: entry.normalization.param() for entry in REGISTRY.values() if entry.normalization},
    }

    def __init__(
        self,
        top_k: Union[int, Sequence[int]],
        metrics: Optional[Sequence[str]] = None,
        ignore_zero_hits: bool = True,
        relevance_threshold: float = 1.0,
        gain_function: V.GainFunction = "exp_rank",
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
        *,
        ties: str = "stable",
        map_normalization: str = "min_k_relevant",
        recall_normalization: str = "relevant",
        precision_normalization: str = "k",
        per_user: bool = False,
        num_groups: Optional[int] = None,
    ):
        self.top_k = list(top_k)
        self.metrics = metrics
        self.gain_function = gain_function
        chosen = {
            "map_normalization": map_normalization,
            "recall_normalization": recall_normalization,
            "precision_normalization": precision_normalization,
        }
        options = {entry.normalization.argument: entry for entry in REGISTRY.values() if entry.normalization}
        # {metric name: its normalization}, checked against the registry's choices
        self._normalization = {}
        for argument, value in chosen.items():
            entry = options[argument]
            setattr(self, argument, value)
            self._normalization[entry.name] = value
        for name in self.metrics:
            value = self._normalization.get(name)
            if ties == "average" and value is not None and not REGISTRY[name].normalization.choice(value).average_ties:
                raise ValueError(
                    f"RankingMetrics: ties='average' is not available with "
                    f"{REGISTRY[name].normalization.argument}={value!r}"
                )
        self._cutoff_metrics = [name for name in self.metrics if REGISTRY[name].has_cutoff]
        # |R| itself (not only |R| > 0) is needed by some; counting it costs a pass on CPU
        self._counts_relevant = any(
            REGISTRY[name].needs_relevant_count(self._normalization.get(name)) for name in self._cutoff_metrics
        )
        self._needs_ideal = any(REGISTRY[name].needs_ideal for name in self._cutoff_metrics)
        self._names = [f"{name}@{k}" for name in self._cutoff_metrics for k in self.top_k]
        if "r_precision" in self.metrics:
            self._names.append("r_precision")
        super().__init__(
            ignore_zero_hits, relevance_threshold, output_transform, device, skip_unrolling, ties,
            per_user=per_user, num_groups=num_groups,
        )

    @staticmethod
    def _check_metrics(metrics) -> list:
        if metrics is None:
            return list(CUTOFF_METRICS)
        if isinstance(metrics, str) or not isinstance(metrics, Sequence):
            raise TypeError(f"metrics must be a sequence of metric names or None, got {type(metrics).__name__}")
        if len(metrics) == 0:
            raise ValueError("metrics must name at least one metric (or be None for all)")
        for name in metrics:
            V.check_choice("metrics", name, ALL_METRICS)
        if len(set(metrics)) != len(metrics):
            raise ValueError(f"metrics must not contain duplicates, got {list(metrics)}")
        return list(metrics)

    def _num_values(self) -> int:
        return len(self._names)

    def _per_user(self, batch):
        columns = []
        invalid = None
        has_relevant = None
        if self._cutoff_metrics:
            ranked = rank_input(
                batch,
                depth=self.top_k[-1],
                relevance_threshold=self.relevance_threshold,
                ties=self.ties,
                gain_function=self.gain_function if self._needs_ideal else None,
                ideal=self._needs_ideal,
                count_relevant=self._counts_relevant,
            )
            invalid, has_relevant = ranked.invalid, ranked.has_relevant
            columns = [
                REGISTRY[name].values(ranked, self.top_k, self._normalization.get(name))
                for name in self._cutoff_metrics
            ]
        if "r_precision" in self.metrics:
            hits, num_relevant, r_invalid = hits_within_own_depth(batch, self.relevance_threshold, self.ties)
            columns.append(F._ratio(hits, num_relevant).unsqueeze(1))
            invalid = invalid if invalid is not None else r_invalid
            has_relevant = num_relevant > 0
        if not self._cutoff_metrics:
            return torch.cat(columns, 1), has_relevant, invalid
        return torch.cat(columns, 1), has_relevant, invalid, self._boundary_tie_columns(ranked)

    def _result(self, means):
        return dict(zip(self._names, means))

    def _scalar_keys(self, name):
        return [f"{name}/{key}" for key in self._names]

    def _scalar_items(self, name, result):
        return [(f"{name}/{key}", value) for key, value in result.items()]
