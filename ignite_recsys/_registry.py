"""The one table of the ranking metrics: names, formulas, conventions and what each needs.

A ranking metric is one :class:`RankingEntry` here plus its per-user formula in
:mod:`ignite_recsys._core.formulas`. Everything else comes from the entry: its class (a thin
class in :mod:`ignite_recsys.metrics.ranking` naming the entry), its member of
:class:`~ignite_recsys.RankingMetrics` and that class's convention arguments, the checks of its
options, what the shared ranking step computes for it (gains, ideal gains, the relevant count,
the full ranking), its function in :mod:`ignite_recsys.functional`, its Engine keys
(``"<name>@<k>"``) and its row in the documentation's tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import torch

from . import _validation as V
from ._core import formulas


@dataclass(frozen=True)
class Choice:
    """One named value of a convention."""

    value: str
    reproduces: str  # the libraries whose convention this choice reproduces
    counts_relevant: Optional[bool] = None  # overrides the metric's need for |R| when chosen
    average_ties: bool = True  # whether ties="average" is available with this choice


@dataclass(frozen=True)
class Option:
    """A convention argument of a ranking metric: ``name=`` of its class, ``argument=`` of
    RankingMetrics (metrics that share an argument share its value, e.g. ``gain_function``).
    ``stage``: read by the per-user ``"formula"`` or by the shared ``"ranking"`` step."""

    name: str
    argument: str
    default: Any
    description: str
    choices: tuple = ()
    constraint: Optional[V.Constraint] = None  # default: one of the choices (None: the default)
    stage: str = "formula"

    @property
    def values(self) -> tuple:
        return tuple(choice.value for choice in self.choices)

    def choice(self, value: Any) -> Optional[Choice]:
        return next((choice for choice in self.choices if choice.value == value), None)

    @property
    def checked_by(self) -> V.Constraint:
        return self.constraint or V.Options(self.values, none_means=self.default)


@dataclass(frozen=True)
class Needs:
    """What a metric needs from the shared ranking step, beyond the hits of the top k."""

    gains: bool = False  # the gains of the ranked items (the metric's gain_function)
    ideal: bool = False  # the gains of the ideal ranking (relevance sorted descending)
    relevant_count: bool = False  # |R| itself, not only whether |R| > 0 (a pass over the labels on CPU)
    full_ranking: bool = False  # every candidate ranked: no cut-off (the formula reads the input)


@dataclass(frozen=True)
class RankingEntry:
    """One ranking metric."""

    name: str  # the name in RankingMetrics(metrics=...) and in "<name>@<k>"
    class_name: str  # its class in ignite_recsys.metrics.ranking
    summary: str  # one line, for the tables of the documentation
    formula: Callable[..., Any]  # (RankedBatch, top_k, **formula options) -> (batch, len(top_k)) float64
    needs: Needs = field(default_factory=Needs)
    options: tuple = ()
    reproduces: str = ""  # the libraries whose numbers it reproduces (under their arguments)
    default: bool = True  # computed by RankingMetrics(metrics=None)

    @property
    def has_cutoff(self) -> bool:
        return not self.needs.full_ranking

    def option(self, name: str) -> Optional[Option]:
        return next((option for option in self.options if option.name == name), None)

    @property
    def normalization(self) -> Optional[Option]:
        return self.option("normalization")

    def needs_relevant_count(self, options: Mapping[str, Any]) -> bool:
        """Whether the ranking step must count |R| for this metric under these options (by name)."""
        for option in self.options:
            chosen = option.choice(options.get(option.name, option.default))
            if chosen is not None and chosen.counts_relevant is not None:
                return chosen.counts_relevant
        return self.needs.relevant_count

    def refuses_average_ties(self, options: Mapping[str, Any], keyword: str = "name") -> Optional[str]:
        """The ``keyword=value`` (the option's ``name`` or RankingMetrics ``argument``) whose choice
        rules out ``ties="average"``, else None."""
        for option in self.options:
            value = options.get(option.name, option.default)
            chosen = option.choice(value)
            if chosen is not None and not chosen.average_ties:
                return f"{getattr(option, keyword)}={value!r}"
        return None

    def values(self, ranked, top_k, options: Mapping[str, Any]) -> torch.Tensor:
        """The per-user values (batch, len(top_k)) from a ranked batch, under these options."""
        chosen = {option.name: options.get(option.name, option.default) for option in self.options
                  if option.stage == "formula"}
        return self.formula(ranked, top_k, **chosen)


GAIN = Option(
    "gain_function", "gain_function", "exp_rank",
    "the gain of a relevance label: ``\"exp_rank\"`` (or ``\"exponential\"``) 2^rel - 1 (ignite, ranx "
    "``ndcg_burges``), ``\"linear_rank\"`` (or ``\"linear\"``) rel (trec_eval, ranx ``ndcg``, torchmetrics, "
    "scikit-learn), ``\"binary\"`` 1 per relevant item (RecBole), ``\"exp_rank_shifted\"`` 2^(rel - t + 1) - 1 "
    "(Elliot ``nDCG``), or a callable mapping a float64 relevance tensor to gains",
    choices=(
        Choice("exp_rank", "ignite, ranx ndcg_burges"),
        Choice("linear_rank", "trec_eval ndcg_cut, ranx ndcg, torchmetrics, scikit-learn"),
        Choice("binary", "RecBole, Elliot nDCGRendle2020"),
        Choice("exp_rank_shifted", "Elliot nDCG"),
    ),
    constraint=V.GAIN_FUNCTION,
    stage="ranking",
)

ENTRIES: tuple = (
    RankingEntry(
        "ndcg", "NDCG", "Normalized Discounted Cumulative Gain at k.", formulas.ndcg,
        Needs(gains=True, ideal=True), options=(GAIN,),
        reproduces="ignite NDCG, trec_eval ndcg_cut, ranx ndcg, torchmetrics, scikit-learn ndcg_score, RecBole",
    ),
    RankingEntry(
        "hit_rate", "HitRate", "1 if a relevant item is in the top k, else 0.", formulas.hit_rate,
        reproduces="ignite HitRate, RecBole Hit, ranx hit_rate, trec_eval success",
    ),
    RankingEntry(
        "recall", "Recall", "The share of the relevant items found in the top k.", formulas.recall,
        Needs(relevant_count=True),
        options=(Option(
            "normalization", "recall_normalization", "relevant", "the divisor of Recall@k",
            choices=(
                Choice("relevant", "RecBole, trec_eval, ranx, torchmetrics"),
                Choice("min_k_relevant", "rectorch, RecPack CalibratedRecallK"),
            ),
        ),),
        reproduces="RecBole, trec_eval recall, ranx recall, torchmetrics RetrievalRecall",
    ),
    RankingEntry(
        "precision", "Precision", "The share of the top k that is relevant.", formulas.precision,
        options=(Option(
            "normalization", "precision_normalization", "k", "the divisor of P@k",
            choices=(
                Choice("k", "RecBole, trec_eval, ranx"),
                Choice("min_k_items", "torchmetrics adaptive_k=True"),
            ),
        ),),
        reproduces="RecBole, trec_eval P, ranx precision, torchmetrics RetrievalPrecision",
    ),
    RankingEntry(
        "map", "MAP", "Mean Average Precision at k.", formulas.average_precision,
        Needs(relevant_count=True),
        options=(Option(
            "normalization", "map_normalization", "min_k_relevant", "the divisor of AP@k",
            choices=(
                Choice("min_k_relevant", "RecBole, MS Recommenders"),
                Choice("relevant", "trec_eval map_cut, ranx"),
                Choice("hits", "torchmetrics RetrievalMAP(top_k)", counts_relevant=False, average_ties=False),
            ),
        ),),
        reproduces="RecBole MAP, trec_eval map_cut, ranx map, torchmetrics RetrievalMAP",
    ),
    RankingEntry(
        "mrr", "MRR", "1 / rank of the first relevant item in the top k, else 0.", formulas.reciprocal_rank,
        reproduces="RecBole MRR, ranx mrr, torchmetrics RetrievalMRR",
    ),
    RankingEntry(
        "f1", "F1", "The harmonic mean of Precision@k and Recall@k.", formulas.f1,
        Needs(relevant_count=True), reproduces="ranx f1",
    ),
    RankingEntry(
        "r_precision", "RPrecision", "Precision at rank |R|, the user's number of relevant items.",
        formulas.r_precision, Needs(full_ranking=True),
        reproduces="trec_eval Rprec, ranx r-precision, torchmetrics RetrievalRPrecision",
    ),
)

REGISTRY: dict = {entry.name: entry for entry in ENTRIES}
ALL_METRICS: tuple = tuple(REGISTRY)
CUTOFF_METRICS: tuple = tuple(entry.name for entry in ENTRIES if entry.has_cutoff)
# RankingMetrics(metrics=None): the cut-off metrics marked default
DEFAULT_METRICS: tuple = tuple(entry.name for entry in ENTRIES if entry.has_cutoff and entry.default)


def ranking_metrics_options() -> dict:
    """RankingMetrics' convention arguments: {argument: Option}, in registry order (an argument
    shared by several metrics, e.g. ``gain_function``, once)."""
    options: dict = {}
    for entry in ENTRIES:
        for option in entry.options:
            options.setdefault(option.argument, option)
    return options
