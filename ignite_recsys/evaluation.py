"""One call from a model's scores or a run to the means: :func:`evaluate`.

``evaluate(scores, test, metrics=[...], exclude=None)`` streams the test users in batches through
:class:`~ignite_recsys.RankingMetrics` (per-user values in user-id order through
:class:`~ignite_recsys.UserIds`), on one process or under ``torch.distributed`` (each process
evaluates its share of the users; the sums are reduced across processes, so the result equals one
process's), and returns an :class:`EvaluationResult`.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import re
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Union, cast

import numpy as np
import torch

from . import _validation as V
from ._core.input_checks import InputWarning
from ._registry import ALIASES, ALL_METRICS, CUTOFF_METRICS, NOT_ALIASES, REGISTRY, ranking_metrics_options
from .data._optional import require
from .data.files import read_interactions
from .data._arrow import numpy_of
from .data.interactions import IdMap, Interactions, column, user_batches
from .data.runs import SCORE_PRECISIONS, RunStream, SplitUserError, grouped_chunks, run_chunks, user_pieces
from .inputs import DotScores, RankedItems, UserIds
from .metrics import RankingMetrics
from .stats import PerUserValues, paired_test

# RankingMetrics' arguments that evaluate() passes on: the relevance rule, ties, the users counted,
# and every convention of the registry (gain_function, map_normalization, discount, ...)
CONVENTIONS = (
    "relevance_threshold",
    "ties",
    "ignore_zero_hits",
    "skip_users_without_relevant",
    *ranking_metrics_options(),
)

# users per update from a run: small enough that a batch's ranked lists (100 rows a user: 100k
# entries) stay in cache-sized tensors, large enough that the update's fixed cost is spread
RUN_BATCH_SIZE = 1024
# pieces of a run file (3 MiB of text each, about 3.4 MiB once parsed) read ahead while the test table is read
RUN_PIECES_AHEAD = 32
SAMPLED_RUN_BATCH_SIZE = 2048  # a sampled run draws its negatives by batch: a seed draws what it drew


def _expand_cutoffs(names: Sequence[Any]) -> list:
    """The entries of ``names`` split at commas; a bare number after a name with a cut-off is
    that name at another cut-off (``"ndcg@1,5"`` -> ``"ndcg@1"``, ``"ndcg@5"``)."""
    expanded: list = []
    for entry in names:
        if not isinstance(entry, str):
            expanded.append(entry)  # refused by parse_metrics, with its type
            continue
        previous = None
        for part in (part.strip() for part in entry.split(",")) if "," in entry else [entry]:
            if not part and "," in entry:
                continue
            if part.isdigit():
                if previous is None:
                    raise ValueError(
                        f"metrics: the cut-off {part!r} in {entry!r} follows no metric with a cut-off "
                        "(write e.g. 'ndcg@1,5,10')"
                    )
                part = previous + part
            else:
                match = re.fullmatch(r"(.+?[@_])\d+", part)
                previous = match.group(1) if match is not None else None
            expanded.append(part)
    return expanded


@dataclass(frozen=True)
class MetricName:
    """One requested metric: its result key, the registry name and the cut-off (None: none)."""

    key: str
    name: str
    k: Optional[int]


def parse_metrics(names: Union[str, Sequence[str]]) -> List[MetricName]:
    """The metrics of ``names`` (a list, or one comma-separated string) as registry names with
    cut-offs. Each name is one of the library's names or an alias (see ``ALIASES``), with a
    cut-off ``@k`` or ``_k`` (``"ndcg@10"``, ``"P@10"``, ``"ndcg_cut_10"``, ``"recip_rank@100"``);
    ``"r_precision"`` takes none. Every other metric needs its cut-off. A comma-separated entry
    may give one metric several cut-offs: ``"ndcg@1,5,10"`` is ``ndcg@1``, ``ndcg@5``, ``ndcg@10``.

    >>> [metric.key for metric in parse_metrics("ndcg@1,5,10,P_5,10,r_precision")]
    ['ndcg@1', 'ndcg@5', 'ndcg@10', 'precision@5', 'precision@10', 'r_precision']

    This is the one place that reads the library's registry of ranking metrics.
    """

    original_names = names
    if isinstance(names, str):
        names = [names]
    if isinstance(names, (bytes, dict)) or not isinstance(names, Sequence) or not names:
        raise ValueError(
            f"metrics must be a non-empty list of metric names (e.g. ['ndcg@10', 'recall@20']), got {names!r}"
        )
    names = _expand_cutoffs(names)
    if not names:
        raise ValueError(f"metrics must name at least one metric (e.g. 'ndcg@10,recall@20'), got {original_names!r}")
    known = sorted(set(ALIASES) | set(ALL_METRICS))
    parsed: List[MetricName] = []
    for original in names:
        if not isinstance(original, str):
            raise TypeError(f"metrics must be names (str), got {original!r}")
        text = original.strip().lower()
        match = re.fullmatch(r"(.+?)(?:[@_]([0-9]+))?", text)
        if match is None:
            raise ValueError(f"metrics must name a metric, got {original!r}")
        base, k = match.group(1), match.group(2)
        if (
            base not in ALIASES and base not in ALL_METRICS and k is not None and text in ALIASES
        ):  # a name ending in _<digits>
            base, k = text, None
        if base in NOT_ALIASES:
            raise ValueError(f"metric {original!r}: {NOT_ALIASES[base]}")
        name = ALIASES.get(base, base if base in ALL_METRICS else None)  # an alias, or the registry's name
        if name is None:
            raise ValueError(
                f"unknown metric {original!r}: known names are {known} (with a cut-off, e.g. 'ndcg@10', "
                "'P@10', 'ndcg_cut_10')"
            )
        if name not in ALL_METRICS:
            raise ValueError(
                f"metric {original!r} maps to {name!r}, which the library does not provide ({ALL_METRICS})"
            )
        if name in CUTOFF_METRICS:
            if k is None:
                raise ValueError(
                    f"metric {original!r} needs a cut-off, e.g. '{name}@10' (ranx's and trec_eval's "
                    f"uncut '{base}' rank the whole run: give the run's depth, e.g. '{name}@1000')"
                )
            if int(k) < 1:
                raise ValueError(f"metric {original!r}: the cut-off must be a positive int")
            key = f"{name}@{int(k)}"
        else:
            if k is not None:
                raise ValueError(f"metric {original!r}: {name!r} takes no cut-off")
            key = name
        if key not in [metric.key for metric in parsed]:
            parsed.append(MetricName(key, name, int(k) if k is not None else None))
    return parsed


class EvaluationResult:
    """The result of :func:`evaluate`.

    Attributes:
        means: ``{"ndcg@10": mean over the counted users, ...}`` in the order asked.
        intervals: ``{"ndcg@10": (low, high)}``, Student-t confidence intervals at ``level``
            (NaN with fewer than two counted users).
        level: the intervals' level.
        user_ids: with ``per_user=True``, the users of the per-user values in ascending dense id
            order: their original ids when the test table maps them (strings or integers).
        info: counts of what was read: ``test_users``, and for a run ``run_rows`` (rows read),
            ``run_rows_not_in_test`` (rows of users the test table does not hold: skipped, not
            evaluated), ``test_users_not_in_run`` (evaluated with an empty list),
            ``run_grouped_in_memory`` (the users' rows were not contiguous) and ``warnings``
            (a run without rows, or without a row of a test user). A row that cannot be read is
            never dropped: it stops the evaluation with an error naming its file, line and column.

    ``result["ndcg@10"]`` is a mean (any accepted spelling of the name works, e.g. ``"nDCG@10"``).
    """

    def __init__(self, means: dict, intervals: Any, level: float, per_user: Optional[dict], user_ids: Any, info: dict):
        self.means, self.level, self.info = means, level, info
        self._intervals = intervals  # a dict, or a callable that computes it (on first use)
        self._per_user = per_user
        self.user_ids = user_ids

    @property
    def intervals(self) -> dict:
        """``{"ndcg@10": (low, high)}``: Student-t confidence intervals of the means at ``level``
        (NaN with fewer than two counted users)."""
        if callable(self._intervals):
            self._intervals = self._intervals()
        return self._intervals

    def _key(self, key: str) -> str:
        if key in self.means:
            return key
        [metric] = parse_metrics([key])
        if metric.key not in self.means:
            raise KeyError(f"{key!r} was not evaluated; the result holds {list(self.means)}")
        return metric.key

    def __getitem__(self, key: str) -> float:
        return self.means[self._key(key)]

    def __iter__(self):
        return iter(self.means)

    def __len__(self) -> int:
        return len(self.means)

    def __repr__(self) -> str:
        values = ", ".join(f"{key}: {value:.4f}" for key, value in self.means.items())
        return f"EvaluationResult({values})"

    def per_user(self) -> Dict[str, torch.Tensor]:
        """``{"ndcg@10": (users,) float64 tensor}`` in the order of :attr:`user_ids`; NaN for a user
        the metric does not count (no relevant item under ``ignore_zero_hits=True``). Needs
        ``evaluate(..., per_user=True)``."""
        if self._per_user is None:
            raise RuntimeError("per-user values were not kept: evaluate with per_user=True")
        return self._per_user

    def to_report(self) -> dict:
        """``{"ndcg@10": cell}`` for :class:`~ignite_recsys.Report`: the per-user values with their
        users (:class:`~ignite_recsys.PerUserValues`, so that the report tests models against a
        baseline on the same users) when kept, else ``(mean, (low, high))``."""
        if self._per_user is not None:
            return {key: PerUserValues(values, self.user_ids) for key, values in self._per_user.items()}
        return {key: (self.means[key], self.intervals[key]) for key in self.means}

    def to_pandas(self, per_user: bool = False) -> Any:
        """A pandas DataFrame: one row per metric (``mean``, ``low``, ``high``), or with
        ``per_user=True`` one row per user (``user`` and one column per metric). Needs pandas."""

        pandas = require("pandas", "EvaluationResult.to_pandas()")
        if per_user:
            values = self.per_user()
            frame: dict = {"user": list(self.user_ids.tolist() if hasattr(self.user_ids, "tolist") else self.user_ids)}
            frame.update({key: value.cpu().numpy() for key, value in values.items()})
            return pandas.DataFrame(frame)
        return pandas.DataFrame(
            {
                "mean": list(self.means.values()),
                "low": [self.intervals[key][0] for key in self.means],
                "high": [self.intervals[key][1] for key in self.means],
            },
            index=pandas.Index(list(self.means), name="metric"),
        )

    def compare(self, other: "EvaluationResult", k: Optional[str] = None, method: str = "t", **options: Any) -> Any:
        """:func:`~ignite_recsys.paired_test` of this result (a) against ``other`` (b) on the same
        users: for the metric ``k`` (a result key) a ``PairedTestResult``, without ``k`` a dict of
        one per metric both results hold. Both need ``per_user=True``; users are paired by id
        (the same users, in any order)."""

        mine, theirs = self.per_user(), other.per_user()

        def test(key: str) -> Any:
            a, b = PerUserValues(mine[key], self.user_ids), PerUserValues(theirs[key], other.user_ids)
            return paired_test(a, b, method, **options)

        if k is not None:
            key = self._key(k)
            if key not in theirs:
                raise KeyError(f"{k!r} is not in the other result ({list(theirs)})")
            return test(key)
        return {key: test(key) for key in mine if key in theirs}


def _interactions(value: Any, name: str, **options: Any) -> Interactions:
    if isinstance(value, Interactions):
        return value
    if isinstance(value, (str, os.PathLike)):
        return read_interactions(value, **options)
    raise TypeError(
        f"{name} must be an Interactions table or a file path, got {type(value).__name__} (build one "
        "with Interactions(users, items) or Interactions.from_frame(frame, user=..., item=...))"
    )


def progress_shown(requested: bool, stream: Any = None) -> bool:
    """Whether a progress bar is drawn on ``stream`` (default ``sys.stderr``): asked for, and the
    stream a terminal, or the output of a Jupyter kernel (where tqdm draws a widget). Never into a
    log file or a pipe. The one rule of :func:`evaluate` and the command line."""
    if not requested:
        return False
    stream = sys.stderr if stream is None else stream
    try:
        if stream is not None and stream.isatty():
            return True
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        pass
    ipython = sys.modules.get("IPython")  # imported by a notebook's kernel; never imported here
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def _progress(total: int, enabled: bool, rank: int) -> Any:
    if not progress_shown(enabled) or rank != 0:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is optional: no bar without it
        return None
    return tqdm(total=total, unit="user", desc="evaluate", leave=False)


def _metric_names(name: str, metrics: Any, arguments: Any) -> List[MetricName]:
    return parse_metrics(metrics)


def _confidence_level(name: str, level: Any, arguments: Any) -> Any:
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level must lie strictly between 0 and 1 (e.g. 0.95), got {level!r}")
    return level


def _batch_size(name: str, batch_size: Any, arguments: Any) -> Optional[int]:
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    return batch_size


def _score_precision(name: str, score_precision: Any, arguments: Any) -> str:
    if score_precision not in SCORE_PRECISIONS:
        raise ValueError(
            f"score_precision must be 'float64' or 'float32' (trec_eval's: scores equal in float32 tie), "
            f"got {score_precision!r}"
        )
    return score_precision


def _conventions(name: str, conventions: dict, arguments: Any) -> dict:
    unknown = sorted(set(conventions) - set(CONVENTIONS))
    if unknown:
        raise TypeError(
            f"evaluate() got unexpected keyword argument(s) {unknown}; the conventions it passes to "
            f"RankingMetrics are {list(CONVENTIONS)}"
        )
    return conventions


# evaluate()'s arguments that are checked before any table is read (the tables: _tables)
_EVALUATE_CONSTRAINTS = {
    "metrics": V.Custom("metric names with cut-offs (see parse_metrics)", _metric_names),
    "batch_size": V.Custom("a positive int or None", _batch_size),
    "level": V.Custom("a confidence level strictly between 0 and 1", _confidence_level),
    "num_threads": V.positive_int(optional=True),
    "score_precision": V.Custom(f"one of {list(SCORE_PRECISIONS)}", _score_precision),
    "conventions": V.Custom(f"keywords among {list(CONVENTIONS)}", _conventions),
}


@V.checks_arguments(_EVALUATE_CONSTRAINTS)
def evaluate(
    scores: Any,
    test: Any,
    metrics: Union[str, Sequence[str]] = ("ndcg@10",),
    *,
    exclude: Any = None,
    num_items: Optional[int] = None,
    batch_size: Optional[int] = None,
    device: Union[str, torch.device] = "cpu",
    per_user: bool = False,
    level: float = 0.95,
    progress: bool = True,
    run_ties: str = "docid",
    run_columns: Optional[Sequence[str]] = None,
    run_format: Optional[str] = None,
    num_threads: Optional[int] = None,
    score_precision: str = "float64",
    sampled: Any = None,
    **conventions: Any,
) -> EvaluationResult:
    r"""Evaluate a model's scores or a run on test interactions, in one call.

    Args:
        scores: what ranks the items, one of

            - a callable from a batch of dense user ids (an int64 tensor on ``device``) to their
              ``(batch, num_items)`` scores;
            - a run: a TREC run file or a parquet/CSV run table (a path), or an in-memory table
              (pandas or polars DataFrame, pyarrow Table, dict of columns) of (user, item, score)
              rows: each user's rows ranked by score, descending, equal scores by ``run_ties``;
            - ``(users, ranked)``: a 1-D tensor of user ids (the test table's ids) and a
              ``(users, K)`` tensor of their ranked items as dense item ids (the test table's
              numbering), best first, ``-1`` padded; a test table that numbered integer item ids
              of its own is refused (ValueError: ``map_ids=False`` keeps them, or pass a run).
              A user the test table lacks is skipped and counted, as a run's rows are;
            - ``DotScores(user_vectors, item_vectors, item_bias=None)`` of every user and item:
              row ``u`` of ``user_vectors`` is the user of dense id ``u`` (``test.user_map.ids[u]``,
              or the integer id ``u`` where the test table has no map), row ``i`` of
              ``item_vectors`` the item of dense id ``i``; the catalog is the item table (a map of
              the test table's items must hold one id per row: ``item_map=IdMap(row_ids)``). Each
              batch of users is ranked over the catalog a tile of items at a time (see
              :doc:`vectors`). A model callable may also return a ``DotScores`` of its batch.
        test: the test interactions, an :class:`~ignite_recsys.Interactions` or a file path (a
            TREC qrels file, a parquet/CSV table: see :func:`~ignite_recsys.data.read_interactions`).
            Its users are the users evaluated; its values are the grades.
        metrics: names with cut-offs, e.g. ``["ndcg@10", "recall@20", "r_precision"]`` or
            ``"ndcg@10,recall@20"``; see :func:`parse_metrics` for the accepted spellings.
        exclude: interactions whose items are not recommended to their users (the training
            history): an Interactions with the same id maps as ``test`` (``user_map=`` and
            ``item_map=test.item_map``) or a file path (read with them, or where ``test`` has
            no map, its integer ids read as the dense ids; repeated pairs merged).
        num_items: the catalog size (default: the test table's). When it is known (given here
            or to the test table), ranked ids and a run's integer item ids at or past it are
            refused, and the metrics are told it.
        batch_size: users per update (default: 1024 for a model's scores and for a run, 2048 for
            a run with ``sampled``, whose negatives are drawn batch by batch; 16384 for ranked
            lists).
        device: where the metrics run and the model's user ids are sent.
        per_user: keep each user's values (:meth:`EvaluationResult.per_user`).
        level: the level of the confidence intervals.
        progress: a tqdm progress bar when tqdm is installed, drawn only where stderr is a
            terminal or in a Jupyter notebook (never into a log file or a pipe; ``progress_shown``).
        run_ties: the order of equal scores in a run: ``"docid"`` (the larger item id first, as
            trec_eval) or ``"order"`` (the earlier row first).
        run_columns: (user, item, score) column names of a run table; None (or a None entry)
            picks the usual name: ``user``/``qid``..., ``item``/``docid``..., ``score`` (an
            in-memory table: ``user``, ``item``, ``score``).
        run_format: ``"trec"``, ``"parquet"``, ``"csv"`` or ``"tsv"`` (default: from the file name).
        num_threads: torch's intra-op threads during the call, restored after it. None: the
            caller's setting, less one for a run (at least one): a run is read by background
            threads while the metrics run, and they get a core.
        score_precision: how a run's scores are compared: ``"float64"`` (default: as read) or
            ``"float32"`` (as trec_eval and pytrec_eval store them: scores equal in float32 tie,
            and ``run_ties`` orders them).
        sampled: rank each test item against sampled negatives instead of the full catalog
            (:class:`~ignite_recsys.SampledMetrics`): the number of negatives, or a dict of its
            arguments (``num_negatives``, ``sampling``, ``item_weights``, ``estimators``,
            ``gamma``, ``ties``, ``seed``). ``scores``: a model's callable or a run (an item
            the run does not list ranks below the listed ones, ties at random; the negatives are
            drawn among the test table's items and every item the run ranks); the metrics
            ``ndcg``, ``recall``, ``hit_rate``, ``precision``, ``map``, ``mrr`` at cut-offs; the
            result's keys ``"ndcg@10/naive"``, ``"ndcg@10/kr_bv"``, ...; the test items are the
            interactions graded 1 or more; per-user values are per test item (``user_ids``
            repeats a user for each of its test items). See
            :doc:`sampled`.
        conventions: passed to :class:`~ignite_recsys.RankingMetrics`: ``gain_function``,
            ``relevance_threshold``, ``ties``, ``map_normalization``, ``recall_normalization``,
            ``precision_normalization``, ``ignore_zero_hits``. ``ties`` other than ``"stable"``
            needs a model callable (a run and ranked lists are lists without scores: ValueError).

    Test users that a run does not rank get an empty list: each counts 0 when it has a relevant
    item (as trec_eval ``-c`` and ranx after ``make_comparable``). A run's users that the test
    table does not hold are not evaluated (``result.info`` counts their rows). A run without rows,
    without a row of a test user, or none of whose items for test users the test table holds
    (item ids of another spelling), warns (:class:`~ignite_recsys.InputWarning`) and says so in
    ``result.info["warnings"]``. A run whose users' rows are not contiguous is read whole and
    grouped in memory (``result.info["run_grouped_in_memory"]``).

    >>> import torch
    >>> from ignite_recsys import Interactions, evaluate
    >>> test = Interactions(torch.tensor([0, 0, 2]), torch.tensor([1, 3, 0]), num_items=4)
    >>> scores = torch.tensor([[0.1, 0.9, 0.2, 0.8], [0.0, 0.0, 0.0, 0.0], [0.3, 0.6, 0.5, 0.4]])
    >>> result = evaluate(lambda users: scores[users], test, metrics=["recall@2", "mrr@2"], progress=False)
    >>> result.means
    {'recall@2': 0.5, 'mrr@2': 0.5}
    """
    requested = cast(List[MetricName], metrics)  # parsed by the declaration (_EVALUATE_CONSTRAINTS)
    source = _source_of(scores)
    if source == "vectors" and sampled is not None:
        raise TypeError(_VECTORS_SAMPLED)
    if source not in ("model", "vectors") and sampled is None:
        _check_list_ties(conventions.get("ties", "stable"))
    if batch_size is None:
        batch_size = _default_batch_size(source, sampled)
    started = _early_run(scores, run_columns, run_format) if source == "run" and sampled is None else None
    try:
        if source == "vectors":  # the vectors' rows are the dense ids: the catalog is the item table
            test, exclude, catalog, known = _tables(test, exclude, None, True)
            catalog = known = _vector_catalog(scores, test, exclude, num_items)
            scores, source = _vector_model(scores, catalog, device), "model"
        else:
            test, exclude, catalog, known = _tables(test, exclude, num_items, source == "model")
        if sampled is not None:  # each test item among sampled negatives (sampled.py)
            from .sampled import evaluate_sampled

            scores = _refusing_vectors(scores) if source == "model" else scores
            arguments = (scores, test, requested, sampled, exclude, catalog, known, batch_size, device, per_user, level)
            run_options = (run_ties, run_columns, run_format, score_precision)
            return EvaluationResult(*evaluate_sampled(*arguments, run_options, conventions))
        # the metrics learn the catalog, except for a run of named items, whose items the test
        # table does not name are numbered past it
        told = catalog if source == "model" else known if source == "ranked" or test.item_map is None else None
        metric = _ranking_metrics(requested, told, device, per_user, conventions)
        feed = _Feed.start(test, exclude, metric, batch_size, device, per_user, progress)
        try:
            with _intra_op_threads(num_threads, reading_a_run=source == "run"):
                if source == "model":
                    _from_model(scores, feed, catalog)
                elif source == "ranked":
                    _from_ranked(scores, feed, known)
                else:
                    run = _RunOptions(run_ties, run_columns, run_format, _run_depth(requested), score_precision)
                    _from_run(scores, feed, run, known if test.item_map is None else None, started)
        finally:
            if feed.bar is not None:
                feed.bar.close()
        # info counts the whole run: every process reads all of it (and evaluates its share of the users)
        return _result(metric, requested, level, per_user, test, feed.info)
    finally:  # a run reader that started early stops with the call
        if started is not None:
            started.pieces.close()


def _source_of(scores: Any) -> str:
    """What ranks the items: ``"vectors"`` (a :class:`DotScores` of every user and item),
    ``"model"`` (a callable of user ids), ``"ranked"`` (``(users, ranked)`` tensors) or ``"run"``
    (a run file or table)."""
    if isinstance(scores, DotScores):
        return "vectors"
    is_model = (
        callable(scores)
        and not isinstance(scores, (str, os.PathLike, tuple, dict))
        and not hasattr(scores, "columns")
        and not hasattr(scores, "column_names")
    )
    return "model" if is_model else "ranked" if isinstance(scores, tuple) else "run"


def _default_batch_size(source: str, sampled: Any) -> int:
    """Users per update: 1024 for a model, vectors and a run (2048 for a sampled run), 16384 for ranked lists."""
    if source in ("model", "vectors"):
        return 1024
    if source == "ranked":
        return 16384
    return RUN_BATCH_SIZE if sampled is None else SAMPLED_RUN_BATCH_SIZE


def _ranking_metrics(
    requested: List[MetricName], told: Optional[int], device: Any, per_user: bool, conventions: dict
) -> RankingMetrics:
    """One RankingMetrics of every metric requested, at every cut-off requested (1 where none is)."""
    names = [metric.name for metric in requested]
    cutoffs = sorted({metric.k for metric in requested if metric.k is not None}) or [1]
    return RankingMetrics(
        cutoffs, metrics=list(dict.fromkeys(names)), device=device, per_user=per_user, num_items=told, **conventions
    )


def _run_depth(requested: List[MetricName]) -> Optional[int]:
    """How much of each user's list a run needs read: to the largest cut-off, or all of it (None)
    when a metric reads the whole list."""
    if any(_reads_whole_list(metric.name) for metric in requested):
        return None
    return max((metric.k for metric in requested if metric.k is not None), default=1)


@contextlib.contextmanager
def _intra_op_threads(num_threads: Optional[int], reading_a_run: bool) -> Iterator[None]:
    """torch's intra-op threads while the metrics run: ``num_threads``, or by default one fewer
    while a run is read (its reader threads get a core); the caller's setting restored after."""
    threads = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    elif reading_a_run and threads > 1:
        torch.set_num_threads(threads - 1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _check_list_ties(ties: Any) -> None:
    """A run and ranked lists reach the metrics as lists without scores: no tie rule but the
    stable one applies (an unknown rule is left to RankingMetrics' own check)."""
    if ties != "stable" and ties in V.TIE_RULES:
        raise ValueError(
            f"ties={ties!r} shares tied scores' gains, but a run or ranked lists are evaluated as lists, without "
            "their scores (a run's equal scores are ordered by run_ties): leave ties at 'stable', or pass the scores "
            "as a model callable"
        )


def _tables(test: Any, exclude: Any, num_items: Optional[int], is_model: bool) -> tuple:
    """(test, exclude, catalog, known): the tables read and checked, the catalog's size, and the
    catalog when it is known (given here or to the test table: ids past it are refused)."""
    test = _interactions(test, "test")
    if is_model:
        _check_model_ids(test)
    if len(test.users) == 0:
        raise ValueError("test holds no interactions: there are no users to evaluate")
    if exclude is not None:
        if not isinstance(exclude, Interactions):  # a file read with the maps extends them: copies, not the caller's
            test = _with_own_maps(test)
        if isinstance(exclude, (str, os.PathLike)) and (test.user_map is None or test.item_map is None):
            exclude = _exclusion_of_dense_ids(exclude, test)
        exclude = _interactions(exclude, "exclude", user_map=test.user_map, item_map=test.item_map, duplicates="max")
        if exclude.item_map is not test.item_map or exclude.user_map is not test.user_map:
            raise ValueError(
                "exclude must number users and items as test does: build it with "
                "user_map=test.user_map and item_map=test.item_map (or integer ids in both)"
            )
        if is_model:  # ids of its own, numbered after the test's, are no model's ids
            _check_model_ids(test, why=_MODEL_IDS_EXCLUDED)
    if num_items is not None:
        num_items = V.check_catalog_size("num_items", num_items)
        if num_items <= test._max_item:
            raise ValueError(
                f"num_items={num_items} is too small for the test table, whose items go up to id {test._max_item}: "
                "pass the catalog's size (or leave num_items out to use the test table's)"
            )
    catalog = test.num_items if num_items is None else num_items
    known = num_items if num_items is not None else test._explicit_num_items
    return test, exclude, catalog, known


def _result(
    metric: RankingMetrics, requested: List[MetricName], level: float, per_user: bool, test: Interactions, info: dict
) -> EvaluationResult:
    """The means, the intervals (computed when first read: their t quantiles import scipy.stats;
    at once under torch.distributed, where every process takes part) and the per-user values."""
    import ignite.distributed as idist
    from ignite.exceptions import NotComputableError

    values = metric.compute()
    means = {item.key: float(values[item.key]) for item in requested}

    def intervals() -> dict:
        try:
            bounds = metric.confidence_interval(level)
        except NotComputableError:  # fewer than two counted users
            return {item.key: (math.nan, math.nan) for item in requested}
        return {item.key: tuple(bounds[item.key]) for item in requested}

    bounds = intervals() if idist.get_world_size() > 1 else intervals
    kept, user_ids = None, None
    if per_user:
        rows = metric.per_user()
        kept = {item.key: rows[item.key].cpu() for item in requested}
        user_ids = test.original_users(metric.per_user_ids().cpu())
    return EvaluationResult(means, bounds, level, kept, user_ids, info)


def _reads_whole_list(name: str) -> bool:
    """Whether the metric reads a ranked list past its largest cut-off: R-Precision ranks to |R|,
    fall-out counts the listed non-relevant items (its denominator), so a run is not cut for them."""
    needs = REGISTRY[name].needs
    return needs.full_ranking or needs.relevant_candidates


_MODEL_IDS = (
    "a model callable is called with dense user ids and its score columns are read as dense item ids: build the "
    "test table with map_ids=False to keep the ids the model knows, or give it the user_map= / item_map= IdMaps "
    "the model numbers its users and items by"
)
_MODEL_IDS_EXCLUDED = (
    "exclude holds ids the test table does not, numbered after the test's own, while a model callable's users "
    "and score columns are read as dense ids: build both tables with the ids the model knows (Interactions from "
    "tensors, or Interactions.from_frame(..., map_ids=False) for both, e.g. of pandas.read_csv(path))"
)
_RANKED_IDS = (
    "the items of ranked lists are read as dense item ids: build the test table with map_ids=False to keep the "
    "ids of the lists, give it the item_map= IdMap they are numbered by, or pass the lists as a run table of "
    "(user, item, score) rows, whose ids are mapped"
)


def _exclusion_of_dense_ids(path: Any, test: Interactions) -> Interactions:
    """An exclusion file read against a test table that numbers its users or items by their
    integer ids themselves (no map): the file's ids of such a role are read as integers (a text id
    not written as an integer, such as ``07``, refused naming its line) and are those dense ids;
    the other role's through the test table's map."""
    given = {}
    for role, test_map in (("user", test.user_map), ("item", test.item_map)):
        if test_map is None:  # an empty map of integer ids: the file's ids read as integers, in it
            test_map = IdMap.derived_map()
            test_map.kind = "int"
        given[role] = test_map
    read = read_interactions(path, user_map=given["user"], item_map=given["item"], duplicates="max")
    users, items, values = read.pairs()
    users, items = given["user"].decode(users), given["item"].decode(items)
    return Interactions(users, items, values, user_map=test.user_map, item_map=test.item_map, duplicates="max")


def _with_own_maps(test: Interactions) -> Interactions:
    """``test`` with copies of its id maps (a shallow copy of the table), which reading another
    table with them may extend; the caller's table and maps stay as they were."""
    if test.user_map is None and test.item_map is None:
        return test
    own = copy.copy(test)
    own.user_map = None if test.user_map is None else copy.copy(test.user_map)
    own.item_map = None if test.item_map is None else copy.copy(test.item_map)
    return own


def _check_model_ids(test: Interactions, roles: tuple = ("user", "item"), why: str = _MODEL_IDS) -> None:
    """Refuse a table that numbered integer ids of its own for ``roles`` where they are read as
    dense ids: a model callable's users and score columns, the items of ranked lists (``why``
    says so)."""
    for role, id_map in (("user", test.user_map), ("item", test.item_map)):
        if role not in roles or id_map is None or not id_map.derived or id_map.kind != "int":
            continue
        if not np.array_equal(id_map.ids, np.arange(len(id_map))):
            raise ValueError(
                f"test maps its integer {role} ids to dense ids 0..{len(id_map) - 1} (ids {id_map.ids[0]} .. "
                f"{id_map.ids[-1]}), but {why}"
            )


@dataclass
class _Feed:
    """Where the batches of a model, ranked lists or a run go: the tables, the metric's update and
    reset, the progress bar, the users this process evaluates (``mine``, a mask over
    ``test.users``) and the counts of what was read (``info``)."""

    test: Interactions
    exclude: Optional[Interactions]
    update: Callable
    reset: Callable
    batch_size: int
    device: Any
    bar: Any
    mine: np.ndarray
    info: dict

    @classmethod
    def start(
        cls, test: Interactions, exclude: Any, metric: Any, batch_size: int, device: Any, per_user: bool, progress: bool
    ) -> "_Feed":
        import ignite.distributed as idist

        rank, world_size = idist.get_rank(), idist.get_world_size()
        mine = np.arange(len(test.users)) % world_size == rank

        def update(y_pred: Any, targets: Any, excluded: Any, users: torch.Tensor) -> None:
            parts = (y_pred, targets) + ((excluded,) if excluded is not None else ())
            metric.update(parts + ((UserIds(users.to(device)),) if per_user else ()))

        bar = _progress(int(mine.sum()), progress, rank)
        return cls(test, exclude, update, metric.reset, batch_size, device, bar, mine, {"test_users": len(test.users)})

    def ranked(self, users: torch.Tensor, ranked: torch.Tensor) -> None:
        """One update from the ranked item lists (dense ids, -1 padded) of ``users`` (dense ids)."""
        targets = self.test.item_ids(users, device=self.device)
        exclude = self.exclude
        excluded = exclude.item_ids(users, grades=False, device=self.device) if exclude is not None else None
        self.update(RankedItems(ranked.to(self.device)), targets, excluded, users)
        self.advance(len(users))

    def advance(self, users: int) -> None:
        if self.bar is not None:
            self.bar.update(users)


def _from_model(model: Callable, feed: _Feed, catalog: int) -> None:
    test, exclude = feed.test, feed.exclude
    users = test.users[torch.from_numpy(np.flatnonzero(feed.mine))]
    for batch in user_batches(users, feed.batch_size):
        scores = model(batch.to(feed.device))
        on = _checked_model_scores(scores, len(batch), catalog)
        targets = test.csr(batch, num_items=catalog, device=on)
        excluded = exclude.csr(batch, grades=False, num_items=catalog, device=on) if exclude is not None else None
        feed.update(scores, targets, excluded, batch)
        feed.advance(len(batch))


def _checked_model_scores(scores: Any, batch: int, catalog: int) -> torch.device:
    """The device of a model's scores for ``batch`` users: a ``(batch, num_items)`` tensor, or a
    :class:`DotScores` of ``batch`` user vectors and ``num_items`` item vectors; else a ValueError."""
    if isinstance(scores, DotScores):
        if scores.sharded:
            raise ValueError(_VECTORS_SHARDED)
        if (scores.num_users, scores.num_items) != (batch, catalog):
            raise ValueError(
                f"scores(users) returned a DotScores of {scores.num_users} user and {scores.num_items} item vectors; "
                f"it must hold one user vector per user of the batch ({batch}) and one item vector per item of "
                f"the catalog (num_items = {catalog})"
            )
        return scores.user_vectors.device
    if not isinstance(scores, torch.Tensor) or scores.ndim != 2 or tuple(scores.shape) != (batch, catalog):
        shape = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
        raise ValueError(
            f"scores(users) must return a (batch, num_items) = ({batch}, {catalog}) tensor or a DotScores, got {shape}"
        )
    return scores.device


_VECTORS_SHARDED = (
    "evaluate() takes DotScores of the whole item table: it splits the users across processes, where a split "
    "item table (item_offset, num_items) needs every process to score the same users; update a metric class "
    "in every process instead (see the vectors page)"
)

_VECTORS_SAMPLED = (
    "sampled= ranks each test item among sampled negatives from a matrix of scores (users by items); DotScores "
    "(user and item vectors) are evaluated over the whole catalog: leave sampled out, or pass a model callable "
    "that returns the scores"
)


def _refusing_vectors(model: Callable) -> Callable:
    """``model``, refusing a :class:`DotScores` it returns (the sampled path takes score matrices)."""

    def scores(users: torch.Tensor) -> Any:
        given = model(users)
        if isinstance(given, DotScores):
            raise TypeError(_VECTORS_SAMPLED)
        return given

    return scores


def _vector_catalog(vectors: DotScores, test: Interactions, exclude: Any, num_items: Optional[int]) -> int:
    """The catalog of ``evaluate(DotScores(...), test)``: the item vectors' rows, which are the test
    table's dense item ids, as the user vectors' rows are its dense user ids; a ValueError where
    the tables hold ids past the rows, or ``num_items`` or an id map disagree with them."""
    if vectors.sharded:
        raise ValueError(_VECTORS_SHARDED)
    rows, users = vectors.num_items, vectors.num_users
    if num_items is not None and num_items != rows:
        raise ValueError(f"num_items={num_items} differs from the {rows} rows of item_vectors (the catalog)")
    item_map = _numbering(test.item_map)
    if item_map is not None and len(item_map) != rows:
        raise ValueError(
            f"item_vectors has {rows} rows but the test table's item map holds {len(item_map)} items: row i of "
            "item_vectors is item_map.ids[i], so build the tables with item_map=IdMap(the id of each row)"
        )
    for name, table in (("test", test), ("exclude", exclude)):
        if table is not None and table._max_item >= rows:
            raise ValueError(
                f"{name} holds item id {table._max_item}, past the {rows} rows of item_vectors (dense item ids "
                f"0 to {rows - 1})"
            )
    last_user = int(test.users.max())
    user_map = _numbering(test.user_map)
    if last_user >= users or (user_map is not None and users > len(user_map)):
        held = f"its user map holds {len(user_map)} users" if user_map is not None else f"its ids reach {last_user}"
        raise ValueError(
            f"user_vectors has {users} rows, one per dense user id of the test table, but {held}: row u of "
            "user_vectors is user_map.ids[u] (build the tables with user_map=IdMap(the id of each row))"
        )
    return rows


def _numbering(id_map: Optional[IdMap]) -> Optional[IdMap]:
    """The map that numbers the vectors' rows: None where the ids are the dense ids themselves (no
    map, or a reader's map of integer ids 0..n-1, which may hold fewer ids than the vectors' rows)."""
    return None if id_map is None or (id_map.derived and id_map.kind == "int") else id_map


def _vector_model(vectors: DotScores, catalog: int, device: Any) -> Callable:
    """A model callable that returns the :class:`DotScores` of a batch of users: their rows of
    ``user_vectors``, and the item table (on ``device``, moved there once)."""
    items = vectors.item_vectors.to(device)
    bias = vectors.item_bias.to(device) if vectors.item_bias is not None else None
    users = vectors.user_vectors

    def scores(batch: torch.Tensor) -> DotScores:
        rows = users[batch.to(users.device)].to(device)
        return DotScores(rows, items, bias, memory_budget=vectors.memory_budget)

    return scores


def _dense_user_ids(users: Any) -> torch.Tensor:
    """The users of ``(users, ranked)`` against a table of dense user ids, as int64; a TypeError
    for ids that are not integers (floats would be cut to other users' ids, bools read as 0 and 1)."""
    values = users.detach().cpu().numpy() if isinstance(users, torch.Tensor) else np.asarray(users)
    if values.dtype.kind not in "iu":
        raise TypeError(
            f"users must be integer user ids (the test table's dense ids, one per row of ranked), got {values.dtype}"
        )
    return torch.as_tensor(values, dtype=torch.int64)


def _mapped_user_ids(test: Any, users: Any) -> torch.Tensor:
    """The dense ids of the users of ``(users, ranked)`` through the test table's user map; a user
    the map does not hold gets a negative id of its own (-1, -2, ...; the same id twice, the same
    one), which no test user has: its list is skipped and counted, as a run's rows are."""
    given = column("users", users)
    codes = test.user_map.encode(given, name="users")
    unknown = np.flatnonzero(codes < 0)
    if unknown.size:
        missing = numpy_of(given) if not isinstance(given, np.ndarray) else given
        _, first = np.unique(missing[unknown], return_inverse=True)
        codes[unknown] = -1 - first.reshape(-1)
    return torch.from_numpy(codes)


def _from_ranked(given: tuple, feed: _Feed, catalog: Optional[int] = None) -> None:
    if len(given) != 2:
        raise TypeError("scores as a tuple must be (users, ranked): user ids (n,) and ranked item ids (n, K)")
    users, ranked = given
    ranked = torch.as_tensor(ranked)
    if ranked.ndim != 2 or ranked.dtype.is_floating_point:
        raise ValueError(
            f"ranked must be a 2-D integer tensor (users, K) of item ids, -1 padded, got "
            f"{ranked.dtype} of shape {tuple(ranked.shape)}"
        )
    if catalog is not None and ranked.numel() and int(ranked.max()) >= catalog:
        raise ValueError(
            f"scores: the ranked lists hold item id {int(ranked.max())}, past the catalog of num_items={catalog} "
            f"items (ids 0 to {catalog - 1}): pass the catalog's size as num_items, or drop the ids past it"
        )
    test = feed.test
    _check_model_ids(test, ("item",), _RANKED_IDS)  # their users are original ids, their items dense ids
    dense = _mapped_user_ids(test, users) if test.user_map is not None else _dense_user_ids(users)
    if dense.ndim != 1 or len(dense) != len(ranked):
        raise ValueError(
            f"users must be 1-D with one id per row of ranked ({len(ranked)}), got shape {tuple(dense.shape)}"
        )
    if len(torch.unique(dense)) != len(dense):
        raise ValueError("users must be distinct: give each user one ranked list")
    test_users = test.users
    position = torch.searchsorted(test_users, dense.contiguous()).clamp(max=len(test_users) - 1)
    known = test_users[position] == dense
    feed.info["run_rows_not_in_test"] = int((~known).sum())
    row_of = torch.full((len(test_users),), -1, dtype=torch.int64)
    row_of[position[known]] = torch.arange(len(dense))[known]
    feed.info["test_users_not_in_run"] = int((row_of < 0).sum())
    for batch in user_batches(torch.from_numpy(np.flatnonzero(feed.mine)), feed.batch_size):
        rows = row_of[batch]
        lists = torch.where((rows >= 0).unsqueeze(1), ranked[rows.clamp(min=0)].to(torch.int64), -1)
        feed.ranked(test_users[batch], lists)


class _RunOptions(NamedTuple):
    """How evaluate() reads a run: its tie rule, columns and format, the depth its lists are cut
    at (None: whole) and the precision its scores are compared in."""

    ties: str
    columns: Optional[Sequence[str]]
    format: Optional[str]
    depth: Optional[int]
    score_precision: str


def _run_read_ahead(run: Any, columns: Any, format: Optional[str], early: int = 0) -> Any:
    """The run's chunks; a run file's parsed and cut into users' pieces by a thread of its own,
    ahead of the lists (``early`` pieces ahead until the first is taken)."""
    chunks = run_chunks(run, columns, format)
    if isinstance(run, (str, os.PathLike)):
        chunks.pieces = _Prefetched(user_pieces(chunks), name="ignite_recsys-run-parser", early=early)
    return chunks


def _early_run(scores: Any, columns: Any, format: Optional[str]) -> Any:
    """A run file's reader started before the test table is read (its parser then uses the core
    the table's reading leaves free), or None: not a file, or the reader did not start (its
    error is then raised where the run is read, after the test table's)."""
    if not isinstance(scores, (str, os.PathLike)):
        return None
    try:
        return _run_read_ahead(scores, columns, format, early=RUN_PIECES_AHEAD)
    except Exception:
        return None


def _from_run(run: Any, feed: _Feed, options: _RunOptions, known: Optional[int] = None, started: Any = None) -> None:
    """Each test user's list of ``run`` in batches of users; the users the run misses get an
    empty list. A run whose users' rows are not contiguous is read again, grouped in memory.
    ``started``: the run's chunks from :func:`_early_run`."""
    chunks = started if started is not None else _run_read_ahead(run, options.columns, options.format)
    source, grouped = chunks.source, False
    try:
        stream = _evaluated(chunks, feed, options, known)
    except SplitUserError:
        # a user's rows are split: read the whole run, group each user's rows (memory grows with
        # the run), and evaluate again from the start
        if not isinstance(run, (str, os.PathLike)):
            raise
        feed.reset()
        if feed.bar is not None:
            feed.bar.reset()
        stream = _evaluated(grouped_chunks(run_chunks(run, options.columns, options.format)), feed, options, known)
        grouped = True
    missing = torch.from_numpy(np.flatnonzero(~stream.seen & feed.mine))
    for batch in user_batches(missing, feed.batch_size):
        feed.ranked(feed.test.users[batch], torch.full((len(batch), 1), -1, dtype=torch.int64))
    notes = []
    if stream.rows == 0:
        notes.append(
            f"the run {source} holds no rows: every test user is evaluated with an empty list (an export that failed?)"
        )
    elif not stream.seen.any():
        notes.append(
            f"none of the {stream.rows} rows of the run {source} is of a test user: every test user is "
            "evaluated with an empty list (do the run's user ids match the test set's?)"
        )
    elif stream.held_items == 0:
        notes.append(
            f"none of the {stream.items_of_test_users} items the run {source} ranks for test users is an item of "
            "the test table: no ranked item can be relevant (do the run's item ids match the test set's?)"
        )
    for note in notes:
        warnings.warn(note, InputWarning, stacklevel=3)
    feed.info.update(
        run_rows=stream.rows,
        run_rows_not_in_test=stream.rows_outside,
        test_users_not_in_run=int((~stream.seen).sum()),
        run_grouped_in_memory=grouped,
        warnings=notes,
    )


def _evaluated(chunks: Any, feed: _Feed, options: _RunOptions, known: Optional[int]) -> RunStream:
    """The run's users evaluated in batches of ``feed.batch_size`` (the next chunk is read by a
    background thread meanwhile: see num_threads); the stream, for its counts."""
    test = feed.test
    base = max(test.num_items, len(test.item_map) if test.item_map is not None else 0)
    # the metrics read a ranked item's id only to find it among the user's test (and excluded) items
    stream = RunStream(
        chunks,
        test,
        ties=options.ties,
        keep=feed.mine,
        unknown_base=base,
        score_precision=options.score_precision,
        match_only=(test,) + ((feed.exclude,) if feed.exclude is not None else ()),
    )
    pending: list = []
    waiting = 0
    lists = _Prefetched(stream)
    try:
        for part in lists:
            pending.append(part)
            waiting += len(part[0])
            if waiting >= feed.batch_size:  # whole batches; the users left over wait for the next part
                pending = _flush(feed, pending, options.depth, known, whole=True)
                waiting = sum(len(part[0]) for part in pending)
    finally:  # the reader stops with the lists (an error of the metrics included)
        lists.close()
    if pending:
        _flush(feed, pending, options.depth, known)
    return stream


def _flush(feed: _Feed, parts: list, depth: Optional[int], known: Optional[int], whole: bool = False) -> list:
    """Updates from the lists of ``parts`` (``(positions, items, lengths)`` of the stream), in
    batches of ``feed.batch_size`` users; with ``whole``, the users past the last whole batch are
    not evaluated but returned as the parts still to do."""
    positions = np.concatenate([part[0] for part in parts])
    items = np.concatenate([part[1] for part in parts])
    lengths = np.concatenate([part[2] for part in parts])
    if known is not None and len(items) and int(items.max()) >= known:
        at = int(np.argmax(items >= known))
        row = int(positions[np.searchsorted(np.cumsum(lengths), at, "right")])
        user = feed.test.original_users(feed.test.users[row : row + 1])[0]
        user = user.item() if hasattr(user, "item") else user
        raise ValueError(
            f"the run ranks item {int(items[at])} (for user {user}), past the catalog of num_items={known} "
            f"items (ids 0 to {known - 1}): pass the catalog's size as num_items, or drop the ids past it"
        )
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    cut = depth if feed.exclude is None else None  # an excluded item frees a place further down
    end = len(positions) - len(positions) % feed.batch_size if whole else len(positions)
    for start in range(0, end, feed.batch_size):
        stop = min(start + feed.batch_size, end)
        ranked = _padded(items[offsets[start] : offsets[stop]], lengths[start:stop], cut)
        feed.ranked(feed.test.users[torch.from_numpy(positions[start:stop])], torch.from_numpy(ranked))
    if end == len(positions):
        return []
    return [(positions[end:], items[offsets[end] :], lengths[end:])]


def _padded(items: np.ndarray, lengths: np.ndarray, depth: Optional[int]) -> np.ndarray:
    """The lists of ``items`` (concatenated, ``lengths`` each) as rows padded with -1, cut at
    ``depth`` (None: whole)."""
    if len(lengths) and (lengths == lengths[0]).all() and lengths[0] > 0:  # lists of one length (a run's depth)
        rows = items.reshape(len(lengths), int(lengths[0]))
        return rows[:, :depth].copy() if depth is not None and depth < rows.shape[1] else rows
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    row = np.repeat(np.arange(len(lengths)), lengths)
    column = np.arange(len(items)) - np.repeat(starts, lengths)
    flat = np.arange(len(items))
    if depth is not None:
        inside = column < depth
        row, column, flat = row[inside], column[inside], flat[inside]
    width = max(int(column.max()) + 1 if len(column) else 1, 1)
    ranked = np.full((len(lengths), width), -1, dtype=np.int64)
    ranked[row, column] = items[flat]
    return ranked


class _Prefetched:
    """The items of an iterable, produced by a background thread (started at once) at most
    ``depth`` ahead, or ``early`` ahead until the consumer takes its first item (a run's text is
    parsed while the test table is read). Arrow's readers and numpy release the GIL, so the
    producer's work overlaps the consumer's. An error of the producer is raised to the consumer,
    after the items produced before it; ``close()`` (also at the end or on an error) stops the
    producer."""

    def __init__(self, items: Any, depth: int = 2, name: str = "ignite_recsys-run-reader", early: int = 0):
        import collections
        import threading

        self._items = items
        self._ready: collections.deque = collections.deque()
        self._limit = max(depth, early)
        self._depth = depth
        self._changed = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._produce, name=name, daemon=True)
        self._thread.start()

    def _handed(self, entry: tuple) -> bool:
        """Whether ``entry`` was queued before the consumer stopped."""
        with self._changed:
            while len(self._ready) >= self._limit and not self._stopped:
                self._changed.wait()
            if self._stopped:
                return False
            self._ready.append(entry)
            self._changed.notify_all()
            return True

    def _produce(self) -> None:
        try:
            for item in self._items:
                if not self._handed(("item", item)):
                    return
            self._handed(("end", None))
        except BaseException as error:  # handed to the consumer, which raises it
            self._handed(("error", error))
        finally:  # a generator of items stops here, on this thread
            close = getattr(self._items, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> "_Prefetched":
        return self

    def __next__(self) -> Any:
        with self._changed:
            while not self._ready and not self._stopped:
                self._changed.wait()
            if self._stopped:
                raise StopIteration
            kind, item = self._ready.popleft()
            self._limit = self._depth
            self._changed.notify_all()
        if kind == "item":
            return item
        self.close()
        if kind == "error":
            raise item
        raise StopIteration

    def close(self) -> None:
        with self._changed:
            self._stopped = True
            self._ready.clear()
            self._changed.notify_all()
        self._thread.join(timeout=5)
