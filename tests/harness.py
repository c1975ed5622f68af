"""One test harness for every metric and input form, modelled on torchmetrics' ``MetricTester``.

A :class:`Case` names one metric configuration (a :class:`Variant`: a registry ranking metric with
one normalization choice or gain, :class:`~ignite_recsys.RankingMetrics`, or a catalog metric)
and one value of every input axis: target form, prediction form, exclusion form, tie rule,
``ignore_zero_hits``, ``per_user``, how the batches arrive (``update`` tuples or an Engine's dict
output), dtype and device. :func:`check_metric` splits the users of a small :class:`Data` set
into several batches, runs the metric through them and compares

- ``compute()`` with the mean of the reference per-user values,
- ``per_user()`` (``per_user=True``; otherwise it must refuse) row by row, NaN for the users the
  metric does not count,
- ``confidence_interval(0.95)`` with ``scipy.stats.t`` over the reference per-user values,

all to 1e-9. :func:`run_distributed` runs many cases inside ONE group of gloo processes, each
holding a shard of the users; every process must return what one process returns.

Expected values come only from ``references.py`` (numpy written from the formulas); the library
is used through its public names and its registry of ranking metrics, so a metric or a
normalization choice added to the registry is tested here without further changes (its per-user
formula must then be added to ``references.user_values``).
"""

from __future__ import annotations

import itertools
import math
import os
import pickle
import tempfile
import warnings
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Optional

import numpy as np
import torch
from ignite.exceptions import NotComputableError

import ignite_recsys as R
import references as ref
import references_families as fam
from ignite_recsys._registry import ALL_METRICS, LIST_ENTRIES, LIST_REGISTRY, REGISTRY, REQUIRED

TOP_K = (5, 1, 12, 2)  # given unsorted (results come in ascending k); 12 is past the catalog
KS = tuple(sorted(TOP_K))
THRESHOLD = 1.0
LEVEL = 0.95
TOLERANCE = 1e-9
BATCH_PATTERN = (3, 1, 4)  # users per batch over a shard of users, the pattern repeated as needed

# --- The axes --------------------------------------------------------------------------------
TARGET_FORMS = ("dense", "coo", "csr", "ids")
PREDICTION_FORMS = ("scores", "ranked")
EXCLUDE_FORMS = ("none", "dense", "coo", "csr", "ids")
TIES = ("stable", "average")
CONTAINERS = ("tuple", "engine")  # update((y_pred, y[, exclude])) or an Engine's {"y_pred", "y", "exclude"}
DTYPES = ("float32", "float64")
DEVICES = ("cpu",) + (("cuda",) if torch.cuda.is_available() else ())
NDCG_GAINS = ("exp_rank", "linear_rank", "binary", "exp_rank_shifted")  # NDCG's named gains

AXES = {
    "target": TARGET_FORMS,
    "prediction": PREDICTION_FORMS,
    "exclude": EXCLUDE_FORMS,
    "ties": TIES,
    "ignore_zero_hits": (True, False),
    "per_user": (True, False),
    "container": CONTAINERS,
    "dtype": DTYPES,
    "device": DEVICES,
}


# --- Data ------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Data:
    """Scores (users, items) with ties and -inf; graded labels; an exclusion mask; ranked lists
    (-1 padded, one of them empty); a training popularity with an unseen item."""

    scores: np.ndarray
    labels: np.ndarray
    excluded: np.ndarray
    ranked_ids: np.ndarray
    popularity: np.ndarray

    @property
    def users(self) -> int:
        return self.scores.shape[0]

    @property
    def items(self) -> int:
        return self.scores.shape[1]

    def rows(self, rows) -> "Data":
        return Data(self.scores[rows], self.labels[rows], self.excluded[rows], self.ranked_ids[rows], self.popularity)


def make_data(seed: int = 11, users: int = 8, items: int = 9, list_length: int = 6) -> Data:
    """Small enough for ``ties="average"``'s reference to enumerate every tie order."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 4, size=(users, items)).astype(np.float64)  # heavy ties
    scores[0, 3] = -np.inf  # a candidate scored -inf
    scores[1, :4] = -np.inf  # several, tied
    labels = np.where(rng.random((users, items)) < 0.4, rng.integers(1, 4, size=(users, items)), 0).astype(np.float64)
    labels[2] = 0  # a user without a relevant item
    labels[3, [0, 5]] = [2, 1]  # a user with relevant items ...
    excluded = rng.random((users, items)) < 0.25
    excluded[3] = True  # ... and no candidate
    excluded[4] = False
    excluded[0, 4] = True
    ranked_ids = -np.ones((users, list_length), dtype=np.int64)
    for u in range(users):
        length = 0 if u == 5 else max(list_length - u % 3, 1)  # one empty retrieval, some short lists
        ranked_ids[u, :length] = rng.permutation(items)[:length]  # an order unrelated to the scores
    popularity = rng.integers(1, 9, size=items).astype(np.float64)
    popularity[2] = 0  # an item never seen in training
    return Data(scores, labels, excluded, ranked_ids, popularity)


DATA = make_data()


# --- Input forms, from numpy rows ------------------------------------------------------------
def _tensor(array, dtype, device):
    return torch.as_tensor(np.ascontiguousarray(array)).to(dtype=dtype, device=device)


def target_form(labels: np.ndarray, form: str, dtype=torch.float32, device="cpu"):
    """Relevance (users, items) as dense, sparse COO, sparse CSR or ``ItemIds`` with grades (ids in
    descending item order, padded with -1, at least one padding column)."""
    dense = _tensor(labels, dtype, device)
    if form == "dense":
        return dense
    if form == "coo":
        return dense.to_sparse()
    if form == "csr":
        return dense.to_sparse_csr()
    if form == "ids":
        width = int((labels > 0).sum(1).max()) + 1
        ids = -np.ones((len(labels), width), dtype=np.int64)
        grades = np.zeros((len(labels), width))
        for u, row in enumerate(labels):
            items = np.nonzero(row)[0][::-1]
            ids[u, : len(items)] = items
            grades[u, : len(items)] = row[items]
        return R.ItemIds(_tensor(ids, torch.int64, device), _tensor(grades, dtype, device))
    raise ValueError(form)


def prediction_form(data: Data, form: str, dtype=torch.float32, device="cpu"):
    """Dense scores (users, items) or ``RankedItems``."""
    if form == "scores":
        return _tensor(data.scores, dtype, device)
    if form == "ranked":
        return R.RankedItems(_tensor(data.ranked_ids, torch.int64, device))
    raise ValueError(form)


def exclude_form(excluded: np.ndarray, form: str, device="cpu"):
    """The exclusion as None, a dense bool mask, sparse COO (bool), sparse CSR (float: nonzero =
    excluded) or ``ItemIds`` (padding first: any order is allowed)."""
    if form == "none":
        return None
    mask = _tensor(excluded, torch.bool, device)
    if form == "dense":
        return mask
    if form == "coo":
        return mask.to_sparse()
    if form == "csr":
        return mask.to(torch.float32).to_sparse_csr()
    if form == "ids":
        width = int(excluded.sum(1).max()) + 2
        ids = -np.ones((len(excluded), width), dtype=np.int64)
        for u, row in enumerate(excluded):
            items = np.nonzero(row)[0]
            ids[u, width - len(items) :] = items
        return R.ItemIds(_tensor(ids, torch.int64, device))
    raise ValueError(form)


def batch_output(data: Data, case: "Case"):
    """One batch of ``data``'s users in the case's forms: a tuple for ``update`` or an Engine's
    dict output."""
    dtype = getattr(torch, case.dtype)
    y_pred = prediction_form(data, case.prediction, dtype, case.device)
    y = target_form(data.labels, case.target, dtype, case.device)
    exclude = exclude_form(data.excluded, case.exclude, case.device)
    if case.spec.two_lists:  # model a's and model b's predictions, then y and the exclusion
        y_pred_b = prediction_form(second_model(data), case.prediction, dtype, case.device)
        if case.container == "engine":
            return {"y_pred_a": y_pred, "y_pred_b": y_pred_b, "y": y, "exclude": exclude}
        return (y_pred, y_pred_b, y) if exclude is None else (y_pred, y_pred_b, y, exclude)
    if case.container == "engine":
        output = {"y_pred": y_pred, "y": y}
        if exclude is not None:
            output["exclude"] = exclude
        return output
    return (y_pred, y) if exclude is None else (y_pred, y, exclude)


def split_rows(start: int, stop: int, pattern=BATCH_PATTERN) -> list:
    """The users start..stop-1 as consecutive batches with sizes cycling through ``pattern``."""
    out, sizes = [], itertools.cycle(pattern)
    while start < stop:
        end = min(start + next(sizes), stop)
        out.append(slice(start, end))
        start = end
    return out


# --- Metric variants -------------------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    """One metric configuration. ``family``: "ranking" (a registry class), "ranking_metrics",
    "catalog" (item counts over the catalog), "item_value" (a mean over users of item values) or
    "list" (a per-user list metric of the registry, at its defaults, built from its needs).
    ``options``: constructor keywords; ``reference``: ``references.user_values`` keywords;
    ``blocked``: for RankingMetrics, {metric name: its normalization keyword} of the choices that
    refuse ``ties="average"``."""

    name: str
    family: str
    metric: str  # registry name, or the catalog metric's name
    options: tuple = ()
    reference: tuple = ()
    average_ties: bool = True
    blocked: tuple = ()

    @property
    def axes(self) -> dict:
        """The values of each axis this variant takes."""
        axes = dict(AXES)
        if self.family in ("catalog", "item_value", "list"):  # no tie rule, no ignore_zero_hits
            axes["ties"], axes["ignore_zero_hits"] = ("stable",), (True,)
        if self.family == "list" and "history" in LIST_REGISTRY[self.metric].needs:
            axes["exclude"] = tuple(form for form in EXCLUDE_FORMS if form != "none")
        if self.family == "catalog":  # no per-user values
            axes["per_user"] = (False,)
        return axes

    def build(self, case: "Case", data: Data):
        """The metric of this variant for the case (raises what the constructor raises)."""
        options = dict(self.options)
        common = dict(device=case.device)
        if self.family in ("ranking", "ranking_metrics"):
            common.update(
                ignore_zero_hits=case.ignore_zero_hits,
                relevance_threshold=THRESHOLD,
                ties=case.ties,
                per_user=case.per_user,
            )
            if self.family == "ranking_metrics":
                return R.RankingMetrics(list(TOP_K), **options, **common)
            entry = REGISTRY[self.metric]
            if entry.has_cutoff:
                return getattr(R, entry.class_name)(list(TOP_K), **options, **common)
            return getattr(R, entry.class_name)(**options, **common)
        popularity = torch.as_tensor(data.popularity)
        if self.family == "list":
            entry = LIST_REGISTRY[self.metric]
            return getattr(R, entry.class_name)(
                list(TOP_K), **list_arguments(entry, data), per_user=case.per_user, **options, **common
            )
        if self.family == "item_value":
            cls = CATALOG_CLASSES[self.metric]
            return cls(list(TOP_K), popularity, per_user=case.per_user, **options, **common)
        num_items = data.items if case.prediction == "ranked" else None  # RankedItems need it
        return CATALOG_CLASSES[self.metric](list(TOP_K), num_items=num_items, **options, **common)

    @property
    def two_lists(self) -> bool:
        return self.family == "list" and "two_lists" in LIST_REGISTRY[self.metric].needs

    def without_blocked(self) -> "Variant":
        """RankingMetrics without the metrics whose choice refuses ``ties="average"``."""
        metrics = tuple(name for name in dict(self.options)["metrics"] if name not in dict(self.blocked))
        options = dict(self.options, metrics=metrics)
        return replace(self, options=tuple(options.items()), blocked=())


# the second value tried of the numeric options (the first is the default)
OTHER_VALUES = {"persistence": 0.5, "max_grade": 3.0}


def _reference_keyword(option) -> str:
    """``references.user_values``' keyword of a registry option."""
    if option.name == "gain_function":
        return "gain_kind"
    return option.argument.replace("_normalization", "_norm")  # map_normalization -> map_norm


def option_values(option) -> tuple:
    """The values of an option the harness tries, its default first."""
    if option.name == "gain_function":
        values = NDCG_GAINS
    elif option.choices:
        values = option.values
    elif isinstance(option.default, bool):
        values = (option.default, not option.default)
    elif option.name in OTHER_VALUES:
        values = (option.default, OTHER_VALUES[option.name])
    else:
        raise LookupError(
            f"add a reference for {option.name!r}: the harness tries a second value of every numeric option, "
            f"and has none for this one; add it to harness.OTHER_VALUES and make references.user_values "
            f"compute the metric under it (keyword {_reference_keyword(option)!r})"
        )
    return tuple(dict.fromkeys((option.default,) + tuple(values)))


def ranking_variants() -> list:
    """Every registry metric with each value of each of its options (the others at their
    default), and RankingMetrics of every metric, with value i of each option in its i-th
    variant."""
    out = []
    for entry in REGISTRY.values():
        chosen = [(option, value) for option in entry.options for value in option_values(option)[1:]]
        out.append(Variant(entry.name, "ranking", entry.name, average_ties=entry.average_ties))
        for option, value in chosen:
            choice = option.choice(value)
            out.append(
                Variant(
                    f"{entry.name}[{option.name}={value}]",
                    "ranking",
                    entry.name,
                    options=((option.name, value),),
                    reference=((_reference_keyword(option), value),),
                    average_ties=entry.average_ties and (choice is None or choice.average_ties),
                )
            )
    arguments = {}
    for entry in REGISTRY.values():
        for option in entry.options:
            arguments.setdefault(option.argument, option)
    rounds = max(len(option_values(option)) for option in arguments.values())
    for i in range(rounds):
        options = {"metrics": tuple(ALL_METRICS)}
        reference = {}
        for argument, option in arguments.items():
            values = option_values(option)
            options[argument] = values[i % len(values)]
            reference[_reference_keyword(option)] = values[i % len(values)]
        blocked = {}
        for entry in REGISTRY.values():
            refused = entry.refuses_average_ties(
                {option.name: options[option.argument] for option in entry.options}, "argument"
            )
            if refused:
                blocked[entry.name] = entry.name if not entry.average_ties else refused.partition("=")[0]
        out.append(
            Variant(
                f"ranking_metrics[{i}]",
                "ranking_metrics",
                "ranking_metrics",
                options=tuple(options.items()),
                reference=tuple(reference.items()),
                average_ties=not blocked,
                blocked=tuple(blocked.items()),
            )
        )
    return out


CATALOG_CLASSES = {
    "item_coverage": R.ItemCoverage,
    "gini_index": R.GiniIndex,
    "shannon_entropy": R.ShannonEntropy,
    "average_popularity": R.AveragePopularity,
    "tail_percentage": R.TailPercentage,
    "novelty": R.Novelty,
}
TAIL_RATIO = 0.3


def catalog_variants() -> list:
    out = []
    for name, conventions in (
        ("item_coverage", ("recbole", "elliot")),
        ("gini_index", ("recbole", "elliot")),
        ("shannon_entropy", ("recbole", "log2")),
    ):
        for convention in conventions:
            out.append(Variant(f"{name}[{convention}]", "catalog", name, options=(("convention", convention),)))
    out.append(Variant("average_popularity", "item_value", "average_popularity"))
    out.append(Variant("tail_percentage", "item_value", "tail_percentage", options=(("tail_ratio", TAIL_RATIO),)))
    out.append(Variant("novelty", "item_value", "novelty", options=(("unseen_items", "rarest_seen"),)))
    return out


# --- The per-user list metrics of the registry -----------------------------------------------
_BASE_CATEGORIES = [[0], [1, 2], [], [3], [0, 3], [1], [2], [0, 1, 2], [3]]  # item 2: no category


@lru_cache(maxsize=None)
def list_features(items: int) -> np.ndarray:
    """Item features (items, 4) of the list metrics, the same for every data set of that size."""
    return np.random.default_rng(31).normal(size=(items, 4))


def list_categories(items: int) -> list:
    """Each item's category ids (4 categories; item 2 has none)."""
    return [_BASE_CATEGORIES[i % len(_BASE_CATEGORIES)] for i in range(items)]


LIST_NUM_USERS = 20  # training users, above every popularity count


def list_arguments(entry, data: Data) -> dict:
    """The required constructor arguments of a list metric, from what it needs."""
    given = {
        "item_popularity": torch.as_tensor(data.popularity),
        "num_users": LIST_NUM_USERS,
        "item_features": torch.as_tensor(list_features(data.items)),
        "item_categories": list_categories(data.items),
    }
    arguments = {name: given[name] for name, default in entry.arguments if default is REQUIRED}
    if "num_items" in dict(entry.arguments):  # RankedItems with ids targets need it; given always
        arguments["num_items"] = data.items
    return arguments


def second_model(data: Data) -> Data:
    """Model b of the two-list metrics: item i gets model a's score of item i - 1, a ranked list
    of model a becomes the next item ids (-1 kept)."""
    ranked = np.where(data.ranked_ids >= 0, (data.ranked_ids + 1) % data.items, -1)
    return Data(np.roll(data.scores, 1, axis=1), data.labels, data.excluded, ranked, data.popularity)


@dataclass(frozen=True)
class ListContext:
    """What a list metric's reference reads: each user's candidate ranking (model a and model
    b), labels, history (the excluded items, or empty sets) and the training popularity."""

    lists: list
    lists_b: list
    labels: np.ndarray
    histories: list
    popularity: np.ndarray

    def rows(self, value_of) -> np.ndarray:
        """(users, len(KS)): ``value_of(u, items, k)``, NaN for a user with an empty list."""
        return np.array(
            [[value_of(u, items, k) if items else np.nan for k in KS] for u, items in enumerate(self.lists)]
        )

    def with_relevant(self, value_of) -> np.ndarray:
        """Rows for the users with a relevant item (Elliot's ignore_zero_hits), NaN for the others."""
        relevant = (self.labels >= THRESHOLD).any(1)
        return np.array(
            [[value_of(u, items, k) if relevant[u] else np.nan for k in KS] for u, items in enumerate(self.lists)]
        )


def _tail(context: ListContext) -> set:
    return fam.elliot_short_head(context.popularity, 0.8)[1]


def _miscalibration(c: ListContext) -> np.ndarray:
    return np.array(
        [
            [fam.calibration_kl(items, k, sorted(c.histories[u]), list_categories(len(c.popularity)), 4) for k in KS]
            if items and c.histories[u]
            else [np.nan] * len(KS)
            for u, items in enumerate(c.lists)
        ]
    )


# name -> (ListContext -> reference per-user rows (users, len(KS)), NaN for a user not counted),
# each written from the formula in references_families.py; a per-user list metric of the registry
# without one here is refused when the variants are made ("add a reference for ...")
LIST_REFERENCES = {
    "intra_list_diversity": lambda c: c.rows(
        lambda u, items, k: fam.intra_list_diversity(items, k, list_features(len(c.popularity)))
    ),
    "serendipity": lambda c: c.rows(
        lambda u, items, k: fam.serendipity(items, c.labels[u], k, c.popularity, len(c.popularity))
    ),
    "epc": lambda c: c.with_relevant(lambda u, items, k: fam.epc(items, c.labels[u], k, c.popularity, LIST_NUM_USERS)),
    "efd": lambda c: c.with_relevant(lambda u, items, k: fam.efd(items, c.labels[u], k, c.popularity)),
    "mean_inv_user_freq": lambda c: c.rows(
        lambda u, items, k: fam.mean_inverse_user_frequency(items, k, c.popularity, LIST_NUM_USERS)
    ),
    "miscalibration": _miscalibration,
    "rank_biased_entropy": lambda c: c.rows(
        lambda u, items, k: fam.rank_biased_entropy(items, k, list_categories(len(c.popularity)), 4)
    ),
    "aplt": lambda c: c.rows(lambda u, items, k: fam.aplt(items, k, _tail(c))),
    "aclt": lambda c: c.rows(lambda u, items, k: fam.aclt(items, k, _tail(c))),
    "mean_pop_rank": lambda c: c.rows(lambda u, items, k: fam.mean_pop_rank(items, k, c.popularity)),
    "rank_biased_overlap": lambda c: np.array(
        [[fam.rank_biased_overlap(a, b, k) for k in KS] for a, b in zip(c.lists, c.lists_b)]
    ),
    "intersection": lambda c: np.array([[fam.intersection(a, b, k) for k in KS] for a, b in zip(c.lists, c.lists_b)]),
}


def list_variants(entries=LIST_ENTRIES, references=LIST_REFERENCES) -> list:
    """A variant for each per-user list metric of the registry that the item-value variants do not
    cover, at its defaults; each needs its reference in :data:`LIST_REFERENCES`."""
    out = []
    for entry in entries:
        if not entry.per_user or entry.name in CATALOG_CLASSES:
            continue
        if entry.name not in references:
            raise LookupError(
                f"add a reference for {entry.name!r}: every per-user list metric of the registry goes through "
                "the harness; write its per-user formula in numpy (references_families.py) and add it to "
                "harness.LIST_REFERENCES"
            )
        out.append(Variant(entry.name, "list", entry.name))
    return out


VARIANTS = {variant.name: variant for variant in ranking_variants() + catalog_variants() + list_variants()}


# --- Cases -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    variant: str
    target: str = "dense"
    prediction: str = "scores"
    exclude: str = "none"
    ties: str = "stable"
    ignore_zero_hits: bool = True
    per_user: bool = True
    container: str = "tuple"
    dtype: str = "float32"
    device: str = "cpu"

    @property
    def id(self) -> str:
        return "-".join(
            [
                self.variant,
                f"y={self.target}",
                f"pred={self.prediction}",
                f"ex={self.exclude}",
                self.ties,
                f"izh={int(self.ignore_zero_hits)}",
                f"pu={int(self.per_user)}",
                self.container,
                self.dtype,
                self.device,
            ]
        )

    @property
    def spec(self) -> Variant:
        return VARIANTS[self.variant]


def covering(axes: dict, full=()) -> list:
    """Rows (dicts axis -> value) holding the full product of the ``full`` axes and, for every
    two axes, every pair of their values (a greedy all-pairs covering array, deterministic)."""
    names = list(axes)
    pairs = {
        ((a, va), (b, vb)) for i, a in enumerate(names) for b in names[i + 1 :] for va in axes[a] for vb in axes[b]
    }

    def new_pairs(row):
        return {
            ((a, row[a]), (b, row[b])) for i, a in enumerate(names) for b in names[i + 1 :] if a in row and b in row
        }

    def fill(row):
        for name in names:
            if name in row:
                continue
            # the value covering the most pairs still open with the values chosen so far
            row[name] = max(axes[name], key=lambda v: len(new_pairs({**row, name: v}) & pairs))
        return row

    rows = []
    for values in itertools.product(*(axes[name] for name in full)):
        row = fill(dict(zip(full, values)))
        rows.append(row)
        pairs -= new_pairs(row)
    while pairs:
        (a, va), (b, vb) = min(pairs, key=lambda p: (names.index(p[0][0]), names.index(p[1][0]), repr(p)))
        row = fill({a: va, b: vb})
        rows.append(row)
        pairs -= new_pairs(row)
    return [{name: row[name] for name in names} for row in rows]


def each_value(axes: dict) -> list:
    """As few rows as hold every value of every axis (row i takes value (i + j) mod size of the
    j-th axis, so that the rows differ in their combinations)."""
    size = max(len(values) for values in axes.values())
    return [{name: values[(i + j) % len(values)] for j, (name, values) in enumerate(axes.items())} for i in range(size)]


def uncovered_pairs(rows: list, axes: dict) -> list:
    """The value pairs of two axes that no row holds (empty for a covering array)."""
    names = list(axes)
    seen = {((a, row[a]), (b, row[b])) for row in rows for i, a in enumerate(names) for b in names[i + 1 :]}
    return [
        ((a, va), (b, vb))
        for i, a in enumerate(names)
        for b in names[i + 1 :]
        for va in axes[a]
        for vb in axes[b]
        if ((a, va), (b, vb)) not in seen
    ]


def cases_for(variant: Variant, full=("target", "prediction", "exclude")) -> list:
    return [Case(variant.name, **row) for row in covering(variant.axes, full)]


# --- References ------------------------------------------------------------------------------
def _excluded_sets(data: Data, exclude: str):
    if exclude == "none":
        return None
    return [set(np.nonzero(row)[0].tolist()) for row in data.excluded]


def _rankings(data: Data, prediction: str, exclude: str, ties: str):
    sets = _excluded_sets(data, exclude)
    if prediction == "ranked":
        return ref.candidate_rankings(excluded=sets, ranked_ids=data.ranked_ids)
    return ref.candidate_rankings(data.scores, sets, ties=ties)


@lru_cache(maxsize=None)
def _ranking_rows(
    data: Data, prediction: str, excluded: bool, ties: str, reference: tuple, judged_all: bool = True
) -> dict:
    """Per-user values of every metric of every user (counted or not). ``judged_all``: every item
    carries a judgement (dense labels); else only the stored ones (the nonzero labels of the
    sparse and id forms), which only bpref reads."""
    rankings = _rankings(data, prediction, "dense" if excluded else "none", ties)
    judged = None if judged_all else [set(np.flatnonzero(row).tolist()) for row in data.labels]
    return ref.candidate_user_rows(
        rankings, data.labels, KS, ignore_zero_hits=False, threshold=THRESHOLD, judged_sets=judged, **dict(reference)
    )


def _reads_judgements(variant: "Variant") -> bool:
    names = [variant.metric] if variant.family == "ranking" else list(dict(variant.options).get("metrics", ()))
    return "bpref" in names


def _item_values(data: Data, metric: str):
    popularity = data.popularity
    if metric == "average_popularity":
        return lambda i: float(popularity[i])
    if metric == "tail_percentage":
        tail = ref.recbole_tail_items(popularity.tolist(), TAIL_RATIO)
        return lambda i: float(i in tail)
    if metric == "novelty":  # unseen items: the self-information of the rarest seen item
        rarest = popularity[popularity > 0].min()
        return lambda i: -math.log2((popularity[i] if popularity[i] > 0 else rarest) / popularity.sum())
    raise ValueError(metric)


def reference_rows(case: Case, data: Data) -> Optional[dict]:
    """{key: per-user values (users,)} with NaN for the users not counted, or None for the
    catalog metrics (no per-user values). Keys as in :func:`as_values`."""
    variant = case.spec
    if variant.family == "catalog":
        return None
    if variant.family == "list":
        sets = _excluded_sets(data, case.exclude)
        context = ListContext(
            [r[0] for r in _rankings(data, case.prediction, case.exclude, "stable")],
            [r[0] for r in _rankings(second_model(data), case.prediction, case.exclude, "stable")],
            data.labels,
            [set() for _ in range(data.users)] if sets is None else sets,
            data.popularity,
        )
        rows = LIST_REFERENCES[variant.metric](context)
        return {f"{variant.metric}@{k}": rows[:, j] for j, k in enumerate(KS)}
    if variant.family == "item_value":
        lists = [r[0] for r in _rankings(data, case.prediction, case.exclude, "stable")]
        rows = ref.list_value_rows(lists, _item_values(data, variant.metric), KS)
        return {f"{variant.metric}@{k}": rows[:, j] for j, k in enumerate(KS)}
    ties = "stable" if case.prediction == "ranked" else case.ties
    judged_all = case.target == "dense" or not _reads_judgements(variant)
    rows = _ranking_rows(data, case.prediction, case.exclude != "none", ties, variant.reference, judged_all)
    counted = np.logical_or(not case.ignore_zero_hits, (data.labels >= THRESHOLD).any(1))
    names = [variant.metric] if variant.family == "ranking" else list(dict(variant.options)["metrics"])
    out = {}
    for name in names:
        if name == "r_precision":
            out[name] = np.where(counted, rows[name], np.nan)
        else:
            for j, k in enumerate(KS):
                out[f"{name}@{k}"] = np.where(counted, rows[name][:, j], np.nan)
    return out


def _catalog_reference(case: Case, data: Data) -> dict:
    variant = case.spec
    lists = [r[0] for r in _rankings(data, case.prediction, case.exclude, "stable")]
    convention = dict(variant.options)["convention"]
    formula = {"item_coverage": ref.coverage, "gini_index": ref.gini, "shannon_entropy": ref.entropy}[variant.metric]
    return {f"{variant.metric}@{k}": formula([items[:k] for items in lists], data.items, convention) for k in KS}


@lru_cache(maxsize=None)
def _t_quantile(degrees_of_freedom: int) -> float:
    from scipy import stats  # here: the gloo processes do not need it

    return float(stats.t.ppf((1 + LEVEL) / 2, degrees_of_freedom))


def _interval(values: np.ndarray):
    """``scipy.stats.t.interval(LEVEL, n - 1, mean, sem)`` of the non-NaN values (the quantile
    cached per n), NotComputableError for fewer than two; and the tolerance of its ends.

    The metric's interval comes from streamed sums and sums of squares, s^2 = (sum x^2 - n mean^2)
    / (n - 1), whose rounding error is about eps * sum x^2 / (n - 1) (as its docstring says, the
    width loses relative precision when the spread is tiny against the magnitude). The tolerance
    is :data:`TOLERANCE` plus that error carried through the square root, which is negligible
    unless the values (nearly) all agree, e.g. the same whole-catalog list for every user."""
    values = values[~np.isnan(values)]
    n = len(values)
    if n < 2:
        return NotComputableError, None
    mean = float(values.mean())
    variance = float(values.var(ddof=1))
    quantile = _t_quantile(n - 1)
    half = quantile * math.sqrt(variance / n)
    rounding = 8 * np.finfo(np.float64).eps * float((values * values).sum()) / (n - 1)
    slack = quantile * (math.sqrt((variance + rounding) / n) - math.sqrt(max(variance - rounding, 0.0) / n))
    return (mean - half, mean + half), TOLERANCE + slack


def expected_outcome(case: Case, data: Data = DATA) -> dict:
    """What the metric must return, from the references: {"compute": {key: value}, "per_user":
    {key: (users,)} or RuntimeError, "interval": {key: (low, high)} or NotComputableError}; or
    {"error": (type, text)} when the constructor must refuse the case. (Shared between cases
    that differ only in forms the references do not see: do not modify.)"""
    ties = (
        "stable" if case.prediction == "ranked" or case.spec.family in ("catalog", "item_value", "list") else case.ties
    )
    target = "dense" if case.target == "dense" or not _reads_judgements(case.spec) else "coo"
    return _expected(
        data,
        case.variant,
        case.prediction,
        case.exclude != "none",
        ties,
        case.ignore_zero_hits,
        case.per_user,
        case.ties,
        target,
    )


@lru_cache(maxsize=None)
def _expected(data, name, prediction, excluded, ties, ignore_zero_hits, per_user, asked_ties, target="dense") -> dict:
    variant = VARIANTS[name]
    case = Case(
        name,
        target=target,
        prediction=prediction,
        exclude="dense" if excluded else "none",
        ties=ties,
        ignore_zero_hits=ignore_zero_hits,
        per_user=per_user,
    )
    if asked_ties == "average" and not variant.average_ties and variant.family == "ranking":
        return {"error": (ValueError, "ties='average'")}
    if variant.family == "catalog":
        return {"compute": _catalog_reference(case, data), "per_user": None, "interval": None}
    if variant.family == "list" and "history" in LIST_REGISTRY[variant.metric].needs and not excluded:
        return {"error": (ValueError, "history as the exclusion")}
    rows = reference_rows(case, data)
    if asked_ties == "average" and variant.blocked:
        blocked = dict(variant.blocked)
        rows = {key: value for key, value in rows.items() if key.partition("@")[0] not in blocked}
    intervals = {key: _interval(values) for key, values in rows.items()}
    tolerances = {key: tolerance for key, (_, tolerance) in intervals.items()}
    intervals = {key: interval for key, (interval, _) in intervals.items()}
    if all(interval is NotComputableError for interval in intervals.values()):
        intervals = NotComputableError
    return {
        "compute": {key: float(np.nanmean(values)) for key, values in rows.items()},
        "per_user": rows if per_user else RuntimeError,
        "interval": intervals,
        "interval_tolerance": tolerances,
    }


# --- Running a metric ------------------------------------------------------------------------
def as_values(result: Any, variant: Variant) -> dict:
    """compute(), per_user() or confidence_interval() as {"<metric>@<k>" or "r_precision": value}."""
    if isinstance(result, dict):
        return dict(result)
    if variant.metric == "r_precision":
        return {"r_precision": result}
    if isinstance(result, torch.Tensor):  # per_user(): (users, len(top_k))
        return {f"{variant.metric}@{k}": result[:, j] for j, k in enumerate(KS)}
    return {f"{variant.metric}@{k}": value for k, value in zip(KS, result)}


def _numpy(values: dict) -> dict:
    return {key: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else v for key, v in values.items()}


def _call(function):
    try:
        return function()
    except Exception as error:  # recorded, compared with what the reference expects
        return error


def run_case(case: Case, data: Data = DATA, rows: Optional[slice] = None) -> dict:
    """Run the case's metric over ``data``'s users ``rows`` (default: all) in batches and return
    what it gives, in the form of :func:`expected_outcome` (exceptions as (type, text))."""
    variant = case.spec
    start, stop = (0, data.users) if rows is None else (rows.start, rows.stop)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", R.BoundaryTieWarning)
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        if case.ties == "average" and variant.blocked:
            for name, argument in variant.blocked:  # each refusing choice is refused by name
                single = replace(variant, options=tuple(dict(variant.options, metrics=(name,)).items()), blocked=())
                error = _call(lambda: single.build(case, data))
                if not isinstance(error, ValueError) or argument not in str(error):
                    raise AssertionError(f"RankingMetrics with {argument} and ties='average' did not refuse: {error!r}")
            variant = variant.without_blocked()
        metric = _call(lambda: variant.build(case, data))
        if isinstance(metric, Exception):
            return {"error": (type(metric), str(metric))}
        batches = [batch_output(data.rows(part), case) for part in split_rows(start, stop)]
        if case.container == "engine":
            from ignite.engine import Engine

            engine = Engine(lambda engine, batch: batch)
            metric.attach(engine, "metric")
            ran = _call(lambda: engine.run(batches, max_epochs=1))
            attached = None if isinstance(ran, Exception) else engine.state.metrics["metric"]
        else:
            ran = _call(lambda: [metric.update(batch) for batch in batches])
            attached = None
        if isinstance(ran, Exception):  # an input the metric refuses (e.g. no history where it needs one)
            return {"error": (type(ran), str(ran))}
        computed = _call(metric.compute)
        if isinstance(computed, Exception):
            return {"error": (type(computed), str(computed))}
        outcome = {"compute": as_values(computed, variant), "per_user": None, "interval": None}
        if attached is not None:
            outcome["engine"] = as_values(attached, variant)
        if variant.family != "catalog":
            per_user = _call(metric.per_user)
            per_user = per_user if isinstance(per_user, Exception) else _numpy(as_values(per_user, variant))
            outcome["per_user"] = type(per_user) if isinstance(per_user, Exception) else per_user
            interval = _call(lambda: metric.confidence_interval(LEVEL))
            outcome["interval"] = type(interval) if isinstance(interval, Exception) else as_values(interval, variant)
        return outcome


def assert_outcome(got: dict, expected: dict, context: str = "") -> None:
    """``got`` equals ``expected`` to :data:`TOLERANCE` (NaN where NaN; same exceptions); the
    interval to ``expected["interval_tolerance"]`` where given (see :func:`_interval`)."""
    if "error" in expected:
        assert "error" in got, f"{context}: expected {expected['error'][0].__name__}, got {got}"
        error_type, text = expected["error"]
        assert issubclass(got["error"][0], error_type) and text in got["error"][1], f"{context}: {got['error']}"
        return
    assert "error" not in got, f"{context}: raised {got['error'][0].__name__}: {got['error'][1]}"
    want = expected["compute"]
    assert list(got["compute"]) == list(want), f"{context}: keys {list(got['compute'])} != {list(want)}"
    for key, value in want.items():
        np.testing.assert_allclose(
            got["compute"][key], value, rtol=0, atol=TOLERANCE, err_msg=f"{context} compute {key}"
        )
        if "engine" in got:
            assert got["engine"][key] == got["compute"][key], f"{context}: engine.state.metrics differs at {key}"
    if expected["per_user"] is None or isinstance(expected["per_user"], type):
        assert got["per_user"] == expected["per_user"], f"{context}: per_user() gave {got['per_user']}"
    else:
        assert list(got["per_user"]) == list(expected["per_user"]), f"{context}: per_user keys"
        for key, rows in expected["per_user"].items():
            column = np.asarray(got["per_user"][key])
            assert column.dtype == np.float64 and column.shape == rows.shape, f"{context}: per_user {key}"
            np.testing.assert_allclose(column, rows, rtol=0, atol=TOLERANCE, err_msg=f"{context} per_user {key}")
    if expected["interval"] is None:
        assert got["interval"] is None
        return
    if expected["interval"] is NotComputableError:  # fewer than two counted users
        assert got["interval"] is NotComputableError, f"{context}: confidence_interval() gave {got['interval']}"
        return
    assert isinstance(got["interval"], dict), f"{context}: confidence_interval() raised {got['interval']}"
    tolerances = expected.get("interval_tolerance") or {}
    for key, interval in expected["interval"].items():
        np.testing.assert_allclose(
            got["interval"][key],
            interval,
            rtol=0,
            atol=tolerances.get(key, TOLERANCE),
            err_msg=f"{context} confidence_interval {key}",
        )


def check_metric(case: Case, data: Data = DATA) -> dict:
    """Run the case in this process and compare it with the references; returns the outcome."""
    got = run_case(case, data)
    assert_outcome(got, expected_outcome(case, data), case.id)
    return got


# --- Distributed -----------------------------------------------------------------------------
def shard(rank: int, world_size: int, users: int) -> slice:
    """Rank ``rank``'s contiguous share of the users (rank 0 first, as per_user() gathers them)."""
    bounds = np.linspace(0, users, world_size + 1).round().astype(int)
    return slice(int(bounds[rank]), int(bounds[rank + 1]))


def _gloo_cases(folder: str, cases: list, data: Data) -> None:
    import ignite.distributed as idist

    rank, world_size = idist.get_rank(), idist.get_world_size()
    outcomes = [run_case(case, data, shard(rank, world_size, data.users)) for case in cases]
    with open(os.path.join(folder, f"rank{rank}.pkl"), "wb") as handle:
        pickle.dump(outcomes, handle)


def run_distributed(cases: list, data: Data = DATA, world_size: int = 2) -> list:
    """Run every case inside ONE group of ``world_size`` gloo processes, each on its shard of the
    users; returns, per rank, the list of outcomes (as :func:`run_case`)."""
    from conftest import _run_in_gloo_processes

    with tempfile.TemporaryDirectory() as folder:
        _run_in_gloo_processes(_gloo_cases, world_size, folder=folder, cases=list(cases), data=data)
        per_rank = []
        for rank in range(world_size):
            with open(os.path.join(folder, f"rank{rank}.pkl"), "rb") as handle:
                per_rank.append(pickle.load(handle))
    return per_rank
