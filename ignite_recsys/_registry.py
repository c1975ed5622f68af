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

import inspect
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


def _none(options: Mapping[str, Any]) -> Any:
    return None


def _no_gains(options: Mapping[str, Any]) -> tuple:
    return ()


@dataclass(frozen=True)
class Needs:
    """What a metric needs from the shared ranking step, beyond the hits of the top k."""

    gains: bool = False  # the gains of the ranked items (the metric's gain_function)
    ideal: bool = False  # the gains of the ideal ranking (relevance sorted descending)
    relevant_count: bool = False  # |R| itself, not only whether |R| > 0 (a pass over the labels on CPU)
    full_ranking: bool = False  # every candidate ranked: no cut-off (the formula reads the input)
    relevant_candidates: bool = False  # |R| among the candidates
    # further gain functions whose per-position gains the formula reads, under given options
    extra_gains: Callable[[Mapping[str, Any]], tuple] = _no_gains
    # which labels are judged (see RankingRequest.judged), under given options; None: not needed
    judged: Callable[[Mapping[str, Any]], Optional[str]] = _none


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
    average_ties: bool = True  # ties="average" is available (the expectation is per position)
    # value checks of the ranked batch under the formula's options: (ranked, **options) -> {message: flag}
    checks: Optional[Callable[..., dict]] = None

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
        """What rules out ``ties="average"``: the ``keyword=value`` of a choice (the option's
        ``name`` or RankingMetrics ``argument``), or the metric itself; else None."""
        if not self.average_ties:
            return f"the metric {self.name!r}, whose value is not a sum of per-position terms"
        for option in self.options:
            value = options.get(option.name, option.default)
            chosen = option.choice(value)
            if chosen is not None and not chosen.average_ties:
                return f"{getattr(option, keyword)}={value!r}"
        return None

    def formula_options(self, options: Mapping[str, Any]) -> dict:
        return {
            option.name: options.get(option.name, option.default)
            for option in self.options
            if option.stage == "formula"
        }

    def values(self, ranked, top_k, options: Mapping[str, Any]) -> torch.Tensor:
        """The per-user values (batch, len(top_k)) from a ranked batch, under these options."""
        return self.formula(ranked, top_k, **self.formula_options(options))

    def value_checks(self, ranked, options: Mapping[str, Any]) -> dict:
        """The metric's own value checks of a ranked batch (message -> 0-d bool flag)."""
        return {} if self.checks is None else self.checks(ranked, **self.formula_options(options))


GAIN = Option(
    "gain_function",
    "gain_function",
    "exp_rank",
    'the gain of a relevance label: ``"exp_rank"`` (or ``"exponential"``) 2^rel - 1 (ignite, ranx '
    '``ndcg_burges``), ``"linear_rank"`` (or ``"linear"``) rel (trec_eval, ranx ``ndcg``, torchmetrics, '
    'scikit-learn), ``"binary"`` 1 per relevant item (RecBole), ``"exp_rank_shifted"`` 2^(rel - t + 1) - 1 '
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


_DISCOUNT_CHECKED = 1 << 20  # the most positions a callable discount is checked at (8 MiB)


def _check_discount(name: str, value: Any, arguments: Mapping) -> Any:
    """A discount name, or a callable whose weights are checked (finite, >= 0) at every position
    up to the largest cut-off (at most the first 2**20)."""
    if not callable(value):
        return V.check_choice(name, value, DISCOUNTS)
    try:
        deepest = max(V.check_top_k(arguments.get("top_k", 4)))
    except (TypeError, ValueError):  # top_k's own check names what is wrong with it
        deepest = 4
    positions = torch.arange(1, min(max(deepest, 4), _DISCOUNT_CHECKED) + 1, dtype=torch.float64)
    weights = value(positions)
    if not isinstance(weights, torch.Tensor) or weights.shape != positions.shape:
        raise ValueError(f"{name} must map a tensor of 1-based positions to one weight each, got {weights!r:.60}")
    bad = ~torch.isfinite(weights.to(torch.float64)) | (weights < 0)
    if bool(bad.any()):
        position = int(bad.nonzero()[0, 0]) + 1
        raise ValueError(
            f"{name} must give finite weights >= 0, got {float(weights[position - 1])} at position {position}"
        )
    return value


DISCOUNTS = ("log2", "log2_clip")
DISCOUNT = Option(
    "discount",
    "discount",
    "log2",
    'the weight of rank i: ``"log2"`` 1 / log2(i + 1), ``"log2_clip"`` 1 / log2(max(i, 2)) (LensKit\'s '
    "default ``LogRankWeight``), or a callable mapping a float64 tensor of 1-based positions to weights (a "
    "function of the positions alone: its weights are computed once per length and kept)",
    choices=(Choice("log2", "trec_eval, ranx, RecBole, torchmetrics, RecTools"), Choice("log2_clip", "LensKit")),
    constraint=V.Custom(
        "one of ['log2', 'log2_clip'] or a callable of the 1-based positions",
        _check_discount,
        ("no such discount", 3, None),
    ),
)

ENTRIES: tuple = (
    RankingEntry(
        "ndcg",
        "NDCG",
        "Normalized Discounted Cumulative Gain at k.",
        formulas.ndcg,
        Needs(gains=True, ideal=True),
        options=(
            GAIN,
            DISCOUNT,
            Option(
                "ideal",
                "ndcg_ideal",
                "achievable",
                "the ideal DCG@k that NDCG@k divides by",
                choices=(
                    Choice(
                        "achievable",
                        "the ideal ranking of the user's labels: ignite, trec_eval, ranx, RecBole, "
                        "LensKit, torchmetrics, RecTools divide_by_achievable=True",
                    ),
                    Choice("k_relevant", "k items of the user's largest gain: RecTools NDCG (its default)"),
                ),
            ),
        ),
        reproduces="ignite NDCG, trec_eval ndcg_cut, ranx ndcg, torchmetrics, scikit-learn ndcg_score, RecBole, "
        "LensKit NDCG (discount='log2_clip'), RecTools NDCG (ideal='k_relevant')",
    ),
    RankingEntry(
        "hit_rate",
        "HitRate",
        "1 if a relevant item is in the top k, else 0.",
        formulas.hit_rate,
        reproduces="ignite HitRate, RecBole Hit, ranx hit_rate, trec_eval success",
    ),
    RankingEntry(
        "recall",
        "Recall",
        "The share of the relevant items found in the top k.",
        formulas.recall,
        Needs(relevant_count=True),
        options=(
            Option(
                "normalization",
                "recall_normalization",
                "relevant",
                "the divisor of Recall@k",
                choices=(
                    Choice("relevant", "RecBole, trec_eval, ranx, torchmetrics"),
                    Choice("min_k_relevant", "rectorch, RecPack CalibratedRecallK"),
                ),
            ),
        ),
        reproduces="RecBole, trec_eval recall, ranx recall, torchmetrics RetrievalRecall",
    ),
    RankingEntry(
        "precision",
        "Precision",
        "The share of the top k that is relevant.",
        formulas.precision,
        options=(
            Option(
                "normalization",
                "precision_normalization",
                "k",
                "the divisor of P@k",
                choices=(
                    Choice("k", "RecBole, trec_eval, ranx"),
                    Choice("min_k_items", "torchmetrics adaptive_k=True"),
                ),
            ),
        ),
        reproduces="RecBole, trec_eval P, ranx precision, torchmetrics RetrievalPrecision",
    ),
    RankingEntry(
        "map",
        "MAP",
        "Mean Average Precision at k.",
        formulas.average_precision,
        Needs(relevant_count=True),
        options=(
            Option(
                "normalization",
                "map_normalization",
                "min_k_relevant",
                "the divisor of AP@k",
                choices=(
                    Choice("min_k_relevant", "RecBole, MS Recommenders"),
                    Choice("relevant", "trec_eval map_cut, ranx"),
                    Choice("hits", "torchmetrics RetrievalMAP(top_k)", counts_relevant=False, average_ties=False),
                    Choice("k", "RecTools MAP(divide_by_k=True)", counts_relevant=False),
                ),
            ),
        ),
        reproduces="RecBole MAP, trec_eval map_cut, ranx map, torchmetrics RetrievalMAP",
    ),
    RankingEntry(
        "mrr",
        "MRR",
        "1 / rank of the first relevant item in the top k, else 0.",
        formulas.reciprocal_rank,
        reproduces="RecBole MRR, ranx mrr, torchmetrics RetrievalMRR",
    ),
    RankingEntry(
        "f1",
        "F1",
        "The harmonic mean of Precision@k and Recall@k.",
        formulas.f1,
        Needs(relevant_count=True),
        reproduces="ranx f1",
    ),
    RankingEntry(
        "dcg",
        "DCG",
        "Discounted Cumulative Gain at k, not normalised.",
        formulas.dcg,
        Needs(gains=True),
        options=(GAIN, DISCOUNT),
        reproduces="ranx dcg (gain_function='linear_rank'), ranx dcg_burges (the default gain), LensKit DCG",
        default=False,
    ),
    RankingEntry(
        "hits",
        "Hits",
        "The number of relevant items in the top k.",
        formulas.hits,
        reproduces="RecPack HitK, ranx hits",
        default=False,
    ),
    RankingEntry(
        "rbp",
        "RBP",
        "Rank-biased precision at k: relevance discounted geometrically by persistence p.",
        formulas.rbp,
        Needs(extra_gains=lambda options: ("linear_rank",) if options.get("graded", True) else ()),
        options=(
            Option(
                "persistence",
                "rbp_persistence",
                0.8,
                "the persistence p (the chance to look one rank further)",
                constraint=V.Interval(float, 0, 1, low_included=False, high_included=False),
            ),
            Option(
                "graded",
                "rbp_graded",
                True,
                "r_i is the label of a relevant item (True, as ranx) or 1 (False, as the paper and LensKit)",
                constraint=V.BOOLEAN,
            ),
        ),
        reproduces="ranx rbp (graded=True, the run cut at k), LensKit RBP (graded=False)",
        default=False,
    ),
    RankingEntry(
        "err",
        "ERR",
        "Expected reciprocal rank at k (the cascade model's stopping probabilities).",
        formulas.err,
        Needs(extra_gains=lambda options: ("exp_rank",)),
        options=(
            Option(
                "max_grade",
                "err_max_grade",
                4.0,
                "the grade whose stopping probability is 1 - 2^-g_max (gdeval and ir-measures: 4); at most "
                "1023, as 2^g_max must be a float64",
                constraint=V.Interval(float, 0, 1023, low_included=False),
            ),
        ),
        reproduces="ir-measures ERR@k, gdeval",
        default=False,
        average_ties=False,
        checks=formulas.err_checks,
    ),
    RankingEntry(
        "fall_out",
        "FallOut",
        "The share of the non-relevant candidates that the top k holds.",
        formulas.fall_out,
        Needs(relevant_candidates=True),
        reproduces="torchmetrics retrieval_fall_out",
        default=False,
    ),
    RankingEntry(
        "bpref",
        "BPref",
        "Binary preference at k: relevant items ranked above judged non-relevant ones.",
        formulas.bpref,
        Needs(
            relevant_count=True,
            judged=lambda options: "nonnegative" if options.get("negative_labels", "unjudged") == "unjudged" else "all",
        ),
        options=(
            Option(
                "negative_labels",
                "bpref_negative_labels",
                "unjudged",
                "how a negative label counts",
                choices=(Choice("unjudged", "trec_eval bpref"), Choice("judged", "ranx bpref (with N > 0)")),
            ),
        ),
        reproduces="trec_eval bpref, ir-measures Bpref (k: the run's depth)",
        default=False,
        average_ties=False,
    ),
    RankingEntry(
        "r_precision",
        "RPrecision",
        "Precision at rank |R|, the user's number of relevant items.",
        formulas.r_precision,
        Needs(full_ranking=True),
        reproduces="trec_eval Rprec, ranx r-precision, torchmetrics RetrievalRPrecision",
    ),
)

REGISTRY: dict = {entry.name: entry for entry in ENTRIES}
ALL_METRICS: tuple = tuple(REGISTRY)

# An entry's name is its class's name in snake_case (``HitRate`` -> ``hit_rate``, ``NDCG`` ->
# ``ndcg``), except the classes named here, whose entry keeps the name the reference tools write
# (checked by tests/test_registry.py). Every surface reads the entry's name.
NAMES_NOT_SNAKE_CASE: dict = {"BPref": "bpref"}  # trec_eval, ir-measures and ranx write bpref

# Other names of the library's metrics, as ranx, trec_eval / ir-measures and papers write them
# (compared in lower case; a cut-off follows as "@10" or, trec_eval style, "_10"), read by
# ``evaluate()`` and the command line.
ALIASES: dict = {
    "ndcg": "ndcg",
    "ndcg_cut": "ndcg",
    "hit_rate": "hit_rate",
    "hitrate": "hit_rate",
    "hr": "hit_rate",
    "success": "hit_rate",
    "recall": "recall",
    "r": "recall",
    "precision": "precision",
    "p": "precision",
    "map": "map",
    "ap": "map",
    "map_cut": "map",
    "mrr": "mrr",
    "rr": "mrr",
    "recip_rank": "mrr",
    "f1": "f1",
    "r_precision": "r_precision",
    "rprec": "r_precision",
    "r-precision": "r_precision",
    "rprecision": "r_precision",
    "hits": "hits",  # a count per user, as ranx and RecPack
    "fallout": "fall_out",
    "fall_out": "fall_out",
}
# names that mean something else elsewhere, refused with the reason
NOT_ALIASES: dict = {}
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


# --- The metrics of the top-k lists (beyond accuracy) -------------------------------------------
REQUIRED = inspect.Parameter.empty  # the default of an argument the caller must give

# what a list metric reads beyond the top-k item ids (a constructor argument or an update entry)
LIST_NEEDS = {
    "item_popularity": "each item's training popularity (constructor)",
    "num_users": "the number of training users (constructor)",
    "item_features": "each item's features (constructor)",
    "item_categories": "each item's categories (constructor)",
    "item_groups": "each item's group id (constructor)",
    "relevance": "the relevance labels ``y`` of the update",
    "history": "each user's history, the ``exclude`` entry of the update",
    "two_lists": "two models' predictions for the same users: ``update((y_pred_a, y_pred_b[, y[, exclude]]))``",
}


@dataclass(frozen=True)
class ListEntry:
    """One metric of the top-k lists: its class, what it reads, its constructor arguments (in
    order, after ``top_k``; ``keywords`` come after ``output_transform, device, skip_unrolling``
    and are keyword-only) and its row of the documentation's table."""

    name: str  # its function in ignite_recsys.functional (per-user metrics), snake_case of the class
    class_name: str  # its class in ignite_recsys.metrics
    summary: str  # what it measures, one line
    kind: str  # "per-user mean", "per-user mean, two models" or "global"
    source: str  # the paper or library that defines it
    reproduces: str  # the libraries whose numbers it reproduces (and how it is tested)
    arguments: tuple = ()  # (name, default or REQUIRED), positional after top_k
    keywords: tuple = ()  # (name, default), keyword-only
    needs: tuple = ()  # keys of LIST_NEEDS

    @property
    def per_user(self) -> bool:
        return self.kind.startswith("per-user")


_POPULARITY = ("item_popularity", REQUIRED)
_THRESHOLD = ("relevance_threshold", 1.0)
_CONVENTION = (("num_items", None), ("convention", "recbole"))
_LONG_TAIL = (_POPULARITY, ("pop_ratio", 0.8))

LIST_ENTRIES: tuple = (
    ListEntry(
        "item_coverage",
        "ItemCoverage",
        "share (or number) of the catalog in at least one list",
        "global",
        "RecBole",
        "RecBole `ItemCoverage`, RecPack `CoverageK`, Elliot (`convention='elliot'`)",
        _CONVENTION,
    ),
    ListEntry(
        "gini_index",
        "GiniIndex",
        "concentration of the recommendations over the catalog",
        "global",
        "RecBole",
        "RecBole `GiniIndex`, LensKit `ListGini`, Elliot (`convention='elliot'`)",
        _CONVENTION,
    ),
    ListEntry(
        "shannon_entropy",
        "ShannonEntropy",
        "entropy of the recommended items over all lists",
        "global",
        "RecBole",
        "RecBole `ShannonEntropy`; `convention='log2'`: Elliot, Recommenders `distributional_coverage`",
        _CONVENTION,
    ),
    ListEntry(
        "average_popularity",
        "AveragePopularity",
        "training popularity of the recommended items",
        "per-user mean",
        "RecBole",
        "RecBole `AveragePopularity`, Elliot `ARP`",
        (_POPULARITY,),
        needs=("item_popularity",),
    ),
    ListEntry(
        "tail_percentage",
        "TailPercentage",
        "share of long-tail items (RecBole's tail rule)",
        "per-user mean",
        "RecBole",
        "RecBole `TailPercentage`",
        (_POPULARITY, ("tail_ratio", 0.1), ("unseen_items_are_tail", False)),
        needs=("item_popularity",),
    ),
    ListEntry(
        "novelty",
        "Novelty",
        "self-information of the recommended items",
        "per-user mean",
        "Recommenders",
        "Recommenders `novelty`",
        (_POPULARITY,),
        keywords=(("unseen_items", "rarest_seen"),),
        needs=("item_popularity",),
    ),
    ListEntry(
        "intra_list_diversity",
        "IntraListDiversity",
        "mean pairwise distance within a list",
        "per-user mean",
        "Ziegler et al. 2005",
        "RecTools `IntraListDiversity` (tested, 4e-16)",
        (("item_features", REQUIRED), ("distance", "cosine")),
        needs=("item_features",),
    ),
    ListEntry(
        "serendipity",
        "Serendipity",
        "relevant and unpopular-for-its-rank items",
        "per-user mean",
        "Lab41 / RecTools",
        "RecTools `Serendipity` (tested, 0)",
        (_POPULARITY, _THRESHOLD),
        needs=("item_popularity", "relevance"),
    ),
    ListEntry(
        "epc",
        "EPC",
        "popularity complement of the relevant recommended items",
        "per-user mean",
        "Vargas & Castells 2011",
        "Elliot `EPC` (from its source, worked cases)",
        (_POPULARITY, ("num_users", REQUIRED), _THRESHOLD, ("rank_weight", "log2"), ("ignore_zero_hits", True)),
        needs=("item_popularity", "num_users", "relevance"),
    ),
    ListEntry(
        "efd",
        "EFD",
        "self-information of the relevant recommended items",
        "per-user mean",
        "Vargas & Castells 2011",
        "Elliot `EFD` (from its source, worked cases)",
        (_POPULARITY, _THRESHOLD, ("rank_weight", "log2"), ("ignore_zero_hits", True)),
        needs=("item_popularity", "relevance"),
    ),
    ListEntry(
        "mean_inv_user_freq",
        "MeanInvUserFreq",
        "self-information against the users",
        "per-user mean",
        "RecTools",
        "RecTools `MeanInvUserFreq` (tested, 9e-16)",
        (_POPULARITY, ("num_users", REQUIRED)),
        needs=("item_popularity", "num_users"),
    ),
    ListEntry(
        "miscalibration",
        "Miscalibration",
        "KL divergence of the list's categories from the history's",
        "per-user mean",
        "Steck 2018",
        "no library has it (numpy reference from the paper, worked cases)",
        (("item_categories", REQUIRED), ("num_categories", None), ("alpha", 0.01), ("rank_weight", None)),
        needs=("item_categories", "history"),
    ),
    ListEntry(
        "rank_biased_entropy",
        "RankBiasedEntropy",
        "rank-weighted entropy of the list's categories",
        "per-user mean",
        "LensKit",
        "LensKit `rank_biased_entropy` (`rank_weight=None`: `entropy`)",
        (("item_categories", REQUIRED), ("rank_weight", ("geometric", 0.85)), ("smoothing", 1e-6)),
        needs=("item_categories",),
    ),
    ListEntry(
        "aplt",
        "APLT",
        "share of long-tail items (Elliot's tail rule)",
        "per-user mean",
        "Abdollahpouri et al. 2017",
        "Elliot `APLT`",
        _LONG_TAIL,
        needs=("item_popularity",),
    ),
    ListEntry(
        "aclt",
        "ACLT",
        "number of long-tail items (Elliot's tail rule)",
        "per-user mean",
        "Abdollahpouri et al. 2019",
        "Elliot `ACLT`",
        _LONG_TAIL,
        needs=("item_popularity",),
    ),
    ListEntry(
        "pop_reo",
        "PopREO",
        "parity of head and tail recall",
        "global",
        "Zhu et al. 2020",
        "Elliot `PopREO`",
        (*_LONG_TAIL, _THRESHOLD),
        needs=("item_popularity", "relevance", "history"),
    ),
    ListEntry(
        "pop_rsp",
        "PopRSP",
        "parity of head and tail recommendation rates",
        "global",
        "Zhu et al. 2020",
        "Elliot `PopRSP`",
        _LONG_TAIL,
        needs=("item_popularity", "history"),
    ),
    ListEntry(
        "exposure_gini",
        "ExposureGini",
        "concentration of rank-weighted exposure",
        "global",
        "LensKit",
        "LensKit `ExposureGini` (tested, 6e-9: LensKit sums in float32); `rank_weight=None` is `ListGini`, "
        "which is `GiniIndex`",
        (("num_items", None), ("rank_weight", ("geometric", 0.85))),
    ),
    ListEntry(
        "mean_pop_rank",
        "MeanPopRank",
        "popularity quantile of the items",
        "per-user mean",
        "LensKit",
        "LensKit `MeanPopRank` (tested, 2e-16)",
        (_POPULARITY,),
        needs=("item_popularity",),
    ),
    ListEntry(
        "item_group_exposure",
        "ItemGroupExposure",
        "share of the slots per item group",
        "global",
        "Singh & Joachims 2018 (exposure)",
        "no library (reference, worked case)",
        (("item_groups", REQUIRED), ("num_item_groups", None), ("rank_weight", None)),
        needs=("item_groups",),
    ),
    ListEntry(
        "rank_biased_overlap",
        "RankBiasedOverlap",
        "agreement of two models' lists",
        "per-user mean, two models",
        "Webber et al. 2010",
        "LensKit `rank_biased_overlap` (tested, 3e-16)",
        (("patience", 0.85), ("normalize", "lenskit"), ("num_items", None)),
        needs=("two_lists",),
    ),
    ListEntry(
        "intersection",
        "Intersection",
        "share of model a's top k in model b's",
        "per-user mean, two models",
        "RecTools",
        "RecTools `Intersection` (tested, 0)",
        (("ref_k", None), ("num_items", None)),
        needs=("two_lists",),
    ),
)

LIST_REGISTRY: dict = {entry.name: entry for entry in LIST_ENTRIES}
