"""``evaluate(..., sampled=...)``: a model's scores ranked against sampled negatives, through
:class:`~ignite_recsys.SampledMetrics`, with the full-catalog estimates."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ._core.input_checks import InputWarning
from ._core.sampled_estimators import METRICS
from .data.interactions import user_batches

# the SampledMetrics arguments evaluate(sampled={...}) passes on
SAMPLED_OPTIONS = ("num_negatives", "sampling", "item_weights", "estimators", "gamma", "ties", "seed")
DEFAULT_BATCH_SIZE = 256  # users per update: each reads a (batch, num_items) mask and its sort


def sampled_options(sampled: Any) -> dict:
    """``sampled`` of :func:`~ignite_recsys.evaluate` (the number of negatives, or a dict of
    SampledMetrics arguments) as keyword arguments."""
    if isinstance(sampled, bool) or not isinstance(sampled, (int, Mapping)):
        raise TypeError(
            f"sampled must be the number of negatives (an int) or a dict of SampledMetrics arguments "
            f"{list(SAMPLED_OPTIONS)}, got {sampled!r:.60}"
        )
    options = {"num_negatives": sampled} if isinstance(sampled, int) else dict(sampled)
    unknown = sorted(set(options) - set(SAMPLED_OPTIONS))
    if unknown:
        raise TypeError(f"sampled: unknown argument(s) {unknown}; evaluate passes {list(SAMPLED_OPTIONS)}")
    return options


def with_run_items(run: Any, test: Any, catalog: int, given: Any, columns: Any, format: Any) -> tuple:
    """(test, catalog) for a sampled run: negatives are drawn from the catalog, which holds every
    item the run ranks. Where the test table maps its items (``item_map``) and the run ranks items
    the map does not hold, a copy of the table whose map also holds them (appended: the test
    items keep their ids; the caller's table is left as it was) and the catalog grown to them; a
    catalog ``given`` (``num_items``) smaller than that is a ValueError. Ids of the wrong kind are
    left to the run's reader, which refuses them naming their row."""
    import copy

    from .data._arrow import kept, numpy_of
    from .data._optional import require
    from .data.runs import _as_kind, _is_float, run_chunks

    if test.item_map is None or test.item_map.kind is None:
        return test, catalog
    pa = require("pyarrow", "reading a run")
    pc = require("pyarrow.compute", "reading a run")
    items = copy.copy(test.item_map)  # _add replaces its arrays: the test table's map is not touched
    new: list = []
    for chunk in run_chunks(run, columns, format).chunks:
        ranked = chunk[2].dictionary_decode() if pa.types.is_dictionary(chunk[2].type) else chunk[2]
        if _is_float(ranked):
            continue
        # as the run's reader reads them against the map (an integer map holds text ids written as integers only)
        distinct, readable = _as_kind(pc.unique(ranked), items.kind)
        distinct = distinct if readable is None else kept(distinct, readable)
        new.append(kept(distinct, items.encode(distinct, name="run items") < 0))
    if new:  # added at once, sorted: the numbering, and so the negatives drawn, whatever the chunks and rows' order
        items.encode(np.concatenate([numpy_of(part) for part in new]), add=True, name="run items")
    if len(items) == len(test.item_map):
        return test, catalog
    if given is not None and len(items) > given:
        raise ValueError(
            f"the test table's items and the items the run ranks are {len(items)} distinct items, more than the "
            f"catalog num_items={given}: sampled negatives are drawn from the catalog, which must hold every item "
            "the run ranks"
        )
    extended = copy.copy(test)
    extended.item_map = items
    return extended, max(catalog, len(items))


def run_scores(
    run: Any, test: Any, catalog: int, ties: str, columns: Any, format: Any, score_precision: str = "float64"
) -> tuple:
    """(scores, notes, counts): a run (a file or a table) as a model's scores, ``users -> (batch,
    catalog)`` float64, each listed item scored minus its position in the user's list (``ties``
    orders equal scores, at ``score_precision``), every item the run does not list for the user
    ``-inf`` (below the listed ones, tied together); a test user the run lacks has an empty list,
    which counts 0 (its test items ``-inf``, every other item 0); the warnings of a run that ranks
    no test item (:func:`unranked_test_items`); and the counts of ``result.info``. The run is read
    whole: a user's rows need not be contiguous."""
    from .data.runs import RunStream, SplitUserError, grouped_chunks, run_chunks

    def lists(chunks):
        stream = RunStream(chunks, test, ties=ties, unknown_base=catalog, score_precision=score_precision)
        return list(stream), stream

    try:
        parts, stream = lists(run_chunks(run, columns, format))
    except SplitUserError:  # a user's rows apart: each user's rows grouped, as evaluate() does
        parts, stream = lists(grouped_chunks(run_chunks(run, columns, format)))
    if parts:
        positions, items, lengths = (np.concatenate([part[j] for part in parts]) for j in range(3))
    else:
        positions = items = lengths = np.zeros(0, dtype=np.int64)
    outside = int(np.count_nonzero(items >= catalog))
    if outside:
        raise ValueError(
            f"the run ranks {outside} item{'s' if outside > 1 else ''} for test users outside the catalog of "
            f"num_items={catalog} (integer ids past it, or text ids written otherwise than the test table's integer "
            "ids, 07 for 7): sampled negatives are drawn from the catalog, which must hold every item the run ranks"
        )
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    # each listed user's list, found by a sorted search: sized by the users, not by their largest id
    listed = test.users.numpy()[positions]
    by_user = np.argsort(listed, kind="stable")
    listed_sorted = listed[by_user]

    def list_of(users: np.ndarray) -> np.ndarray:
        at = np.minimum(np.searchsorted(listed_sorted, users), max(len(listed_sorted) - 1, 0))
        found = listed_sorted[at] == users if len(listed_sorted) else np.zeros(len(users), dtype=bool)
        return np.where(found, by_user[at] if len(by_user) else -1, -1)

    def scores(users: torch.Tensor) -> torch.Tensor:
        table = np.full((len(users), catalog), -np.inf)
        missing = []
        lists = list_of(users.cpu().numpy())
        for row, which in enumerate(lists):
            if which >= 0:
                ranked = items[offsets[which] : offsets[which + 1]]
                table[row, ranked] = -np.arange(len(ranked), dtype=np.float64)
            else:
                missing.append(row)
        if missing:  # an empty list counts 0: its test items below every other item, whatever the tie rule
            table[missing] = 0.0
            graded = test.item_ids(users.cpu()[missing])
            rows, columns = np.nonzero(((graded.ids >= 0) & (graded.grades >= 1)).numpy())
            table[np.asarray(missing)[rows], graded.ids.numpy()[rows, columns]] = -np.inf
        return torch.from_numpy(table).to(users.device)

    counts = {
        "run_rows": stream.rows,
        "run_rows_not_in_test": stream.rows_outside,
        "test_users_not_in_run": int((~stream.seen).sum()),
    }
    return scores, unranked_test_items(stream, test, positions, items, lengths, catalog), counts


def unranked_test_items(stream: Any, test: Any, positions: np.ndarray, items: np.ndarray, lengths, catalog: int):
    """The warnings of a sampled run that ranks no test item for its user (empty, of other users, or
    of items spelled otherwise): each test item is then unranked, tied at ``-inf`` with its
    unranked negatives, and its rank drawn at random among them: a number from no ranking."""
    source = stream.chunks.source
    consequence = "every test item is tied with its sampled negatives (all unranked) and ranked at random among them"
    if stream.rows == 0:
        return [f"the run {source} holds no rows: {consequence} (an export that failed?)"]
    if not stream.seen.any():
        return [
            f"none of the {stream.rows} rows of the run {source} is of a test user: {consequence} (do the run's "
            "user ids match the test set's?)"
        ]
    graded = test.item_ids(test.users[torch.from_numpy(positions)])
    rows, columns = np.nonzero(((graded.ids >= 0) & (graded.grades >= 1)).numpy())
    test_keys = rows * catalog + graded.ids.numpy()[rows, columns]
    run_keys = np.repeat(np.arange(len(positions)), lengths) * catalog + items
    if not np.isin(test_keys, run_keys).any():
        return [
            f"the run {source} ranks none of the test items for its user: {consequence} (do the run's item ids "
            "match the test set's?)"
        ]
    return []


def _read_run(run: Any, test: Any, catalog: int, known: Any, run_options: tuple) -> tuple:
    """(test, catalog, scores, notes, counts) of a sampled run (:func:`with_run_items`, :func:`run_scores`);
    each note warned (``InputWarning``) at evaluate()'s caller."""
    test, catalog = with_run_items(run, test, catalog, known, run_options[1], run_options[2])
    scores, notes, counts = run_scores(run, test, catalog, *run_options)
    for note in notes:
        warnings.warn(note, InputWarning, stacklevel=4)
    return test, catalog, scores, notes, counts


def _per_item_values(metric: Any, labels: dict, kept_users: list, test: Any) -> tuple:
    """({result key: each test item's value}, their users' original ids) of a SampledMetrics
    built with per_user=True, whose updates' users were ``kept_users`` (one per test item):
    every process's items (gathered), ordered by user as one process orders them."""
    from .metrics._users import gathered_rows

    rows = metric.per_user()
    valid = ~metric.sampled_ranks().isnan()
    mine = torch.cat(kept_users) if kept_users else torch.zeros(0, dtype=torch.int64)
    users = gathered_rows(mine.to(metric._device, torch.int64).unsqueeze(1))[:, 0].cpu()
    order = torch.sort(users, stable=True).indices
    kept = {key: rows[label][valid].cpu()[order] for key, label in labels.items() if label in rows}
    return kept, (test.original_users(users[order]) if len(users) else [])


def evaluate_sampled(
    scores: Any,
    test: Any,
    requested: list,
    sampled: Any,
    exclude: Any,
    catalog: int,
    known: Any,
    batch_size: Any,
    device: Any,
    per_user: bool,
    level: float,
    run_options: tuple,
    conventions: dict,
) -> Any:
    """The sampled path of :func:`~ignite_recsys.evaluate` (its arguments, already checked): the
    arguments of its EvaluationResult (means, intervals, level, per-item values, their user ids,
    info). ``known``: the catalog's size where it was given. A run is read whole, its items added
    to the catalog (:func:`with_run_items`), and scored by :func:`run_scores` (``run_options``:
    ties, columns, format, score precision)."""
    import ignite.distributed as idist
    from ignite.exceptions import NotComputableError

    from .metrics.sampled import SampledMetrics

    options = sampled_options(sampled)
    if conventions:
        raise TypeError(f"evaluate(..., sampled=...) takes no RankingMetrics conventions, got {sorted(conventions)}")
    if isinstance(scores, tuple):
        raise TypeError(
            "evaluate(..., sampled=...) ranks a model's scores or a run: scores must be a callable from user "
            "ids to their (batch, num_items) scores, a run file or a run table (not ranked lists)"
        )
    notes: list = []
    counts: dict = {}  # a run's: its rows, those of users outside the test table, the test users it lacks
    if not callable(scores) or hasattr(scores, "columns") or hasattr(scores, "column_names"):
        test, catalog, scores, notes, counts = _read_run(scores, test, catalog, known, run_options)
    unsupported = [item.key for item in requested if item.name not in METRICS or item.k is None]
    if unsupported:
        raise ValueError(f"evaluate(..., sampled=...) computes {list(METRICS)} at cut-offs, got {unsupported}")
    names = list(dict.fromkeys(item.name for item in requested))
    cutoffs = sorted({item.k for item in requested})
    metric = SampledMetrics(cutoffs, names, num_items=catalog, device=device, per_user=per_user, **options)
    rank, world_size = idist.get_rank(), idist.get_world_size()
    users = test.users[torch.from_numpy(np.arange(len(test.users)) % world_size == rank)]
    kept_users = []
    for batch in user_batches(users, batch_size or DEFAULT_BATCH_SIZE):
        y_pred = scores(batch.to(device))
        if not isinstance(y_pred, torch.Tensor) or tuple(y_pred.shape) != (len(batch), catalog):
            shape = tuple(y_pred.shape) if isinstance(y_pred, torch.Tensor) else type(y_pred).__name__
            raise ValueError(
                f"scores(users) must return a (batch, num_items) = ({len(batch)}, {catalog}) tensor, got {shape}"
            )
        graded = test.item_ids(batch)  # the test items: interactions graded >= 1 (all, without grades)
        listed = torch.where(graded.grades >= 1, graded.ids, -1)
        parts: tuple = (y_pred, listed.to(y_pred.device))
        if exclude is not None:
            parts += (exclude.csr(batch, grades=False, num_items=catalog, device=y_pred.device),)
        metric.update(parts)
        if per_user:
            kept_users.append(batch.unsqueeze(1).expand(listed.shape)[listed >= 0])
    values = metric.compute()
    labels = {
        f"{item.key}/{estimator}": f"{item.name}@{item.k}/{estimator}"
        for item in requested
        for estimator in metric.estimators
    }
    means = {key: values[label] for key, label in labels.items()}

    def intervals() -> dict:
        try:
            bounds = metric.confidence_interval(level)
        except NotComputableError:
            bounds = {}
        return {key: bounds.get(label, (math.nan, math.nan)) for key, label in labels.items()}

    kept, user_ids = _per_item_values(metric, labels, kept_users, test) if per_user else (None, None)
    info = {"test_users": len(test.users), "test_items": int(metric._state()[1]), **counts}
    info.update(sampled=options, warnings=notes)
    return means, intervals() if world_size > 1 else intervals, level, kept, user_ids, info
