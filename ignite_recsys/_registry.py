"""The one table of the ranking metrics: names, formulas, options and what each needs.

:class:`~ignite_recsys.RankingMetrics` reads its metric names, per-user formulas, the checks of its
``*_normalization`` arguments and which quantities its ranking step computes from here; each single
class (:class:`~ignite_recsys.NDCG`, ...) reads its normalization choices and default from here, and
``functional.*_NORMALIZATIONS`` are derived from it. Adding a cut-off metric means adding its
per-user formula to :mod:`ignite_recsys.functional`, its class to :mod:`ignite_recsys.metrics.ranking`
and one :class:`MetricEntry` below.

The table is plain data at the bottom of the import graph: the class and the formula are named and
resolved on use (they import this module for their options).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Optional, Tuple


@dataclass(frozen=True)
class Choice:
    """One value of a normalization option."""

    value: str
    reproduces: str  # the libraries whose convention this choice reproduces
    counts_relevant: Optional[bool] = None  # overrides the metric's need for |R| when chosen
    average_ties: bool = True  # whether ties="average" is available with this choice


@dataclass(frozen=True)
class Normalization:
    """A metric's normalization option: ``normalization=`` of its class, ``argument=`` of
    RankingMetrics."""

    argument: str  # the keyword of RankingMetrics, e.g. "map_normalization"
    choices: Tuple[Choice, ...]
    default: str

    @property
    def values(self) -> Tuple[str, ...]:
        return tuple(choice.value for choice in self.choices)

    def choice(self, value: str) -> Choice:
        return self.choices[self.values.index(value)]

    def param(self, default_when_none: bool = False):
        """The declared constraint of this option (see ``_validation.Param``); with
        ``default_when_none``, None stands for the default (the single classes' signature)."""
        from ._validation import Param, check_choice

        def check(name, value, arguments):
            return self.default if default_when_none and value is None else check_choice(name, value, self.values)

        return Param(f"one of {list(self.values)} (default {self.default!r})", check)


@dataclass(frozen=True)
class MetricEntry:
    """One ranking metric."""

    name: str  # the name in RankingMetrics(metrics=...) and in "<name>@<k>"
    class_name: str  # its class in ignite_recsys.metrics.ranking
    formula_name: Optional[str]  # its per-user formula in ignite_recsys.functional (None: no cut-off)
    description: str
    has_cutoff: bool = True
    needs_ideal: bool = False  # the ideal gains (and the gains) of the ranking step
    counts_relevant: bool = False  # |R| itself, not only whether |R| > 0 (a pass on CPU)
    normalization: Optional[Normalization] = None

    @property
    def cls(self) -> type:
        return getattr(importlib.import_module("ignite_recsys.metrics.ranking"), self.class_name)

    @property
    def formula(self) -> Optional[Callable]:
        if self.formula_name is None:
            return None
        return getattr(importlib.import_module("ignite_recsys.functional"), self.formula_name)

    def needs_relevant_count(self, normalization: Optional[str] = None) -> bool:
        """Whether the ranking step must count |R| for this metric (with this normalization)."""
        if self.normalization is not None and normalization is not None:
            override = self.normalization.choice(normalization).counts_relevant
            if override is not None:
                return override
        return self.counts_relevant

    def values(self, ranked, top_k, normalization: Optional[str] = None):
        """The per-user values at each cut-off, shape (batch, len(top_k))."""
        if self.normalization is None:
            return self.formula(ranked, top_k)
        return self.formula(ranked, top_k, normalization)


ENTRIES: Tuple[MetricEntry, ...] = (
    MetricEntry(
        "ndcg", "NDCG", "ndcg", "Normalized Discounted Cumulative Gain at k.", needs_ideal=True,
    ),
    MetricEntry(
        "hit_rate", "HitRate", "hit_rate", "1 if a relevant item is in the top k, else 0.",
    ),
    MetricEntry(
        "recall", "Recall", "recall", "The share of the relevant items found in the top k.",
        counts_relevant=True,
        normalization=Normalization(
            "recall_normalization",
            (
                Choice("relevant", "RecBole, trec_eval, ranx, torchmetrics"),
                Choice("min_k_relevant", "rectorch, RecPack CalibratedRecallK"),
            ),
            default="relevant",
        ),
    ),
    MetricEntry(
        "precision", "Precision", "precision", "The share of the top k that is relevant.",
        normalization=Normalization(
            "precision_normalization",
            (
                Choice("k", "RecBole, trec_eval, ranx"),
                Choice("min_k_items", "torchmetrics adaptive_k=True"),
            ),
            default="k",
        ),
    ),
    MetricEntry(
        "map", "MAP", "average_precision", "Mean Average Precision at k.",
        counts_relevant=True,
        normalization=Normalization(
            "map_normalization",
            (
                Choice("min_k_relevant", "RecBole, MS Recommenders"),
                Choice("relevant", "trec_eval map_cut, ranx"),
                Choice("hits", "torchmetrics RetrievalMAP(top_k)", counts_relevant=False, average_ties=False),
            ),
            default="min_k_relevant",
        ),
    ),
    MetricEntry(
        "mrr", "MRR", "reciprocal_rank", "1 / rank of the first relevant item in the top k, else 0.",
    ),
    MetricEntry(
        "f1", "F1", "f1", "The harmonic mean of Precision@k and Recall@k.", counts_relevant=True,
    ),
    MetricEntry(
        "r_precision", "RPrecision", None, "Precision at rank |R|, the user's number of relevant items.",
        has_cutoff=False,
    ),
)

REGISTRY = {entry.name: entry for entry in ENTRIES}
ALL_METRICS: Tuple[str, ...] = tuple(REGISTRY)
CUTOFF_METRICS: Tuple[str, ...] = tuple(entry.name for entry in ENTRIES if entry.has_cutoff)
