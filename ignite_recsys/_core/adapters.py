"""Input adapters: every accepted form of an update's ``(y_pred, y[, exclude])`` becomes one
:class:`RankingInput`, checked in one place before any state changes.

=============== ==============================================================================
``y_pred``      dense (batch, num_items) scores, :class:`~ignite_recsys.RankedItems`, or
                :class:`~ignite_recsys.DotScores` (scored a tile of items at a time by the
                ranking step, :mod:`.vectors`; the catalog is its item table)
``y``           dense (batch, num_items) relevance, a sparse COO/CSR (batch, num_items) tensor
                (stored values = grades), or :class:`~ignite_recsys.ItemIds`
``exclude``     dense bool (batch, num_items), sparse (batch, num_items) (stored entry =
                excluded), or :class:`~ignite_recsys.ItemIds`; optional
=============== ==============================================================================

The catalog size comes from the first dense or sparse tensor or item table (scores or
DotScores' item vectors, then targets, then
exclusion), else from the metric's ``num_items``; with ids alone and no ``num_items`` it stays
unknown (ids are then only checked to lie in [-1, 2**31)).

Nothing here reads a tensor value on the host or makes a shape that depends on the values, so
every form runs on any device (checked on the ``meta`` device, which refuses both).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Optional, TypeVar

import torch

from . import input_checks as checks
from ..inputs import DotScores, ItemIds, RankedItems, UserGroups, UserIds
from .input_checks import RANKED_IDS_HINT, check_id_range
from .item_sets import MAX_NUM_ITEMS, ItemTable, entries_bound, sort_id_rows, sorted_rows, sparse_outside
from .tuning import cpu_tuned
from .vectors import finite_checks


_T = TypeVar("_T")


class _Part(Generic[_T]):
    """An optional field of ``RankingInput`` read by a path that needs it: its value, or a
    ValueError naming the part the batch does not hold."""

    def __init__(self, field_name: str, what: str) -> None:
        self.field_name, self.what = field_name, what

    def __get__(self, batch: Optional[RankingInput], owner: Optional[type] = None) -> _T:
        if batch is None:  # read on the class: no value
            raise AttributeError(f"{self.field_name} is read on a RankingInput")
        value = getattr(batch, self.field_name)
        if value is None:
            raise ValueError(f"this batch holds no {self.what}")
        return value


@dataclass
class RankingInput:
    """One batch in canonical form. Exactly one of ``scores`` / ``ranked_ids`` / ``vectors`` and
    one of ``labels`` / ``targets`` is set."""

    num_users: int
    num_items: Optional[int]
    device: torch.device
    scores: Optional[torch.Tensor] = None  # (B, N) float
    ranked_ids: Optional[torch.Tensor] = None  # (B, K) int64, -1 = no item
    vectors: Optional[DotScores] = None  # scored by tiles in the ranking step (``vectors``)
    vector_top_values: Optional[torch.Tensor] = None  # the scores at the ranked order of ``vectors``
    labels: Optional[torch.Tensor] = None  # (B, N) dense relevance
    targets: Optional[ItemTable] = None  # sparse or id-list relevance
    _excluded: Optional[torch.Tensor] = None  # (B, N) bool: see ``excluded``
    # an exclusion given as a list: a sparse COO/CSR (B, N) tensor (an entry of value 0 excludes
    # nothing) or ItemIds' (B, E) id rows (-1 = none); read as ``excluded_table`` or, by the
    # selection on CPU, as ``excluded_rows``, each made on first use
    excluded_list: Optional[torch.Tensor] = None
    _excluded_table: Optional[ItemTable] = None
    _excluded_rows: Optional[torch.Tensor] = None
    # the ranked ids' rows sorted ascending, (values, indices), for RankedItems
    ranked_sorted: Optional[tuple[torch.Tensor, torch.Tensor]] = None
    # at least the most entries of a user in ``targets`` (the ItemIds width, a sparse tensor's
    # largest row on CPU): |R| never exceeds it (None: dense labels, or not known)
    targets_width: Optional[int] = None
    invalid: dict[str, torch.Tensor] = field(default_factory=dict)  # message -> 0-d bool tensor (value checks)
    groups: Optional[torch.Tensor] = None  # (B,) int64 from UserGroups, range checked by the metric
    users: Optional[torch.Tensor] = None  # (B,) int64 from UserIds
    # DotScores split across processes: the whole batch (this one is its users ``shard_rows``)
    shard_source: Optional[RankingInput] = None
    shard_rows: Optional[torch.Tensor] = None

    def dense_pair(self) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
        """(scores, labels) for the plain dense form without exclusion (the fast path of the ranking
        step), else None."""
        if self.scores is None or self.labels is None or self.has_exclusion:
            return None
        return self.scores, self.labels

    @property
    def label_dtype(self) -> torch.dtype:
        """The dtype of the relevance labels (dense, or the targets' stored values)."""
        return self.labels.dtype if self.labels is not None else self.target_table.values.dtype

    # The parts a path of the ranking step reads, for the forms that hold them
    score_rows = _Part[torch.Tensor]("scores", "scores (y_pred is RankedItems)")
    id_rows = _Part[torch.Tensor]("ranked_ids", "ranked ids (y_pred holds scores)")
    target_table = _Part[ItemTable]("targets", "sparse or ItemIds targets (y holds dense labels)")
    exclusion_mask = _Part[torch.Tensor]("excluded", "exclusion mask")
    exclusion_rows = _Part[torch.Tensor]("excluded_rows", "exclusion list")
    exclusion_table = _Part[ItemTable]("excluded_table", "exclusion list")

    @property
    def excluded(self) -> Optional[torch.Tensor]:
        """(B, N) bool, True = excluded (None without exclusion): a dense mask as given, or, for
        dense scores (or DotScores, where a reader needs a mask), an exclusion given as a list made
        dense here, on first use."""
        if self._excluded is None and self.excluded_list is not None and self.scores is not None:
            self._excluded = _dense_mask(self.exclusion_table, self.num_users, self.scores.shape[1], self.device)
        elif self._excluded is None and self.excluded_list is not None and self.vectors is not None:
            self._excluded = _dense_mask(self.exclusion_table, self.num_users, self.vectors.num_items, self.device)
        return self._excluded

    @excluded.setter
    def excluded(self, mask: Optional[torch.Tensor]) -> None:
        self._excluded = mask

    @property
    def excluded_table(self) -> Optional[ItemTable]:
        """The exclusion list as an :class:`ItemTable` (None without one)."""
        if self._excluded_table is None and self.excluded_list is not None:
            listed = self.excluded_list
            if listed.layout == torch.strided:  # id rows: every id an excluded item
                flags = torch.ones(listed.shape, dtype=torch.bool, device=listed.device)
                self._excluded_table = ItemTable.from_ids(listed, flags)
            else:
                self._excluded_table = ItemTable.from_sparse(listed, drop_zeros=True)
        return self._excluded_table

    @property
    def excluded_rows(self) -> Optional[torch.Tensor]:
        """CPU: the exclusion list as each user's items ascending, (B, E) int64 padded with
        ``ROW_PADDING`` (``item_sets.sorted_rows``; None without one)."""
        if self._excluded_rows is None and self.excluded_list is not None:
            self._excluded_rows = sorted_rows(self.excluded_list)
        return self._excluded_rows

    def excluded_width(self) -> int:
        """CPU: at least the most entries of a user in the exclusion list (which the rows of
        ``excluded_rows`` hold), read on the host without building the rows."""
        return entries_bound(self.excluded_list)

    @property
    def has_exclusion(self) -> bool:
        return self._excluded is not None or self.excluded_list is not None


_OUTSIDE = (
    "{name} (sparse) holds an entry outside its (batch, num_items) shape: a negative index or one at or "
    "past its size (torch's sparse constructors do not check them unless check_invariants=True)"
)


def _is_sparse(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.layout in (torch.sparse_coo, torch.sparse_csr)


def parse_ranking_input(output: Any, num_items: Optional[int] = None, user_tags: bool = False) -> RankingInput:
    """Check an update's argument and bring it into canonical form (no value is read on the host).
    ``user_tags``: whether trailing :class:`~ignite_recsys.UserGroups` / :class:`~ignite_recsys.UserIds`
    entries are accepted (the metrics that average over users); they land in ``groups`` / ``users``."""
    output, groups, users = _split_user_tags(output, user_tags)
    y_pred = output[0] if isinstance(output, (tuple, list)) and output else None
    if isinstance(y_pred, DotScores) and y_pred.sharded:
        return _user_share(_agreed_batch(output, num_items, groups, users), output, num_items, groups, users)
    return _with_user_tags(_parse_ranking_input(output, num_items), groups, users)


def _agreed_batch(output: tuple, num_items: Optional[int], groups, users) -> RankingInput:
    """The whole batch of an item shard, parsed, once every process has parsed its own: its
    shard, catalog and batch size and whether its parse failed are exchanged (host values), so
    that a refusal on one process is a refusal on every process, never a process left waiting
    in a collective; shards that overlap, leave gaps or disagree are refused (``check_shards``)."""
    import torch.distributed as dist

    from .vectors import _group, check_shards

    vectors = output[0]
    group = _group(vectors)
    try:
        full, error = _with_user_tags(_parse_ranking_input(output, num_items), groups, users), None
    except (TypeError, ValueError) as refused:
        full, error = None, refused
    shards: list = [None] * dist.get_world_size(group)
    mine = (vectors.item_offset, vectors.shard_items, vectors.num_items, vectors.num_users)
    dist.all_gather_object(shards, (None if error is None else f"{type(error).__name__}: {error}", mine), group=group)
    if error is not None:
        raise error
    refusals = [(rank, message) for rank, (message, _) in enumerate(shards) if message is not None]
    if refusals:
        rank, message = refusals[0]
        raise ValueError(f"the update of process {rank} (DotScores of a split item table) was refused: {message}")
    check_shards([shard for _, shard in shards], vectors.num_users)
    assert full is not None
    return full


def _user_share(full: RankingInput, output: tuple, num_items: Optional[int], groups, users) -> RankingInput:
    """DotScores split across processes: every process ranks the whole batch (``full``, whose
    checks are kept), and counts its users ``rank::world`` only, so that the sums across
    processes count each user once."""
    import torch.distributed as dist

    from .vectors import _group

    y_pred, y, exclude = _unpack(output)
    group = _group(y_pred)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    rows = torch.arange(rank, full.num_users, world, device=full.device)
    share = (y_pred.for_users(rows), _rows_of(y, rows)) + (() if exclude is None else (_rows_of(exclude, rows),))
    result = _with_user_tags(
        _parse_ranking_input(share, num_items),
        None if groups is None else groups[rows],
        None if users is None else users[rows],
    )
    result.invalid.update(full.invalid)  # the whole batch's checks: the same verdict on every process
    result.shard_source, result.shard_rows = full, rows
    return result


def _rows_of(value: Any, rows: torch.Tensor) -> Any:
    """The users at ``rows`` of targets or an exclusion (dense, sparse COO/CSR, or ItemIds)."""
    if isinstance(value, ItemIds):
        return ItemIds(value.ids[rows], value.grades[rows])
    if value.layout == torch.sparse_csr:
        value = value.to_sparse_coo()
    return value.index_select(0, rows)


_USER_TAGS = (UserGroups, UserIds)


def _split_user_tags(output: Any, accepted: bool) -> tuple:
    """``output`` without its trailing UserGroups / UserIds, and their ids (or None)."""
    tags = {}
    if isinstance(output, (tuple, list)):
        output = list(output)
        while output and isinstance(output[-1], _USER_TAGS):
            tag = output.pop()
            name = type(tag).__name__
            if not accepted:
                raise TypeError(
                    f"{name} is taken only by the metrics that average over users (NDCG, HitRate, Recall, Precision, "
                    "MAP, MRR, F1, RPrecision, RankingMetrics, AveragePopularity, TailPercentage, Novelty)"
                )
            if name in tags:
                raise ValueError(f"update holds {name} twice")
            tags[name] = tag.ids
        output = tuple(output)
    return output, tags.get("UserGroups"), tags.get("UserIds")


def _with_user_tags(result: RankingInput, groups, users) -> RankingInput:
    for name, ids in (("UserGroups", groups), ("UserIds", users)):
        if ids is not None and ids.shape[0] != result.num_users:
            raise ValueError(
                f"{name} ids must hold one id per user of the batch ({result.num_users}), got {ids.shape[0]}"
            )
        if ids is not None and ids.device != result.device:
            raise ValueError(f"{name} ids must be on the device of y_pred ({result.device}), got {ids.device}")
    result.groups, result.users = groups, users
    return result


def _parse_ranking_input(output: Any, num_items: Optional[int] = None) -> RankingInput:
    y_pred, y, exclude = _unpack(output)
    if isinstance(y_pred, torch.Tensor) and isinstance(y, torch.Tensor) and not _is_sparse(y) and exclude is None:
        scores, labels = checks.check_scores_and_relevance((y_pred, y))
        if num_items is not None and scores.shape[1] != num_items:
            raise ValueError(f"y_pred must have num_items={num_items} columns (given), got {scores.shape[1]}")
        return RankingInput(scores.shape[0], scores.shape[1], scores.device, scores=scores, labels=labels)
    _check_types(y_pred, y, exclude)
    result = _batch_shape(y_pred, y, exclude, num_items)
    # integer scores are told from ranked ids by their width where another input or num_items gives it
    width_given = isinstance(y, torch.Tensor) or isinstance(exclude, torch.Tensor) or num_items is not None
    _set_predictions(result, y_pred, integers_accepted=width_given)
    _set_targets(result, y)
    if exclude is not None:
        _set_exclusion(result, exclude)
    return result


def _unpack(output: Any) -> tuple[Any, Any, Any]:
    """(y_pred, y, exclude or None) of an update's tuple."""
    if not isinstance(output, (tuple, list)):
        raise TypeError(f"update expects a tuple (y_pred, y) or (y_pred, y, exclude), got {type(output).__name__}")
    if len(output) not in (2, 3):
        raise ValueError(
            f"update expects a tuple (y_pred, y) or (y_pred, y, exclude) of 2 or 3 entries, got a sequence of "
            f"length {len(output)}"
        )
    return output[0], output[1], output[2] if len(output) == 3 else None


def _check_types(y_pred: Any, y: Any, exclude: Any) -> None:
    """Each of ``y_pred``, ``y`` and ``exclude`` in one of its accepted forms, tensors 2-D."""
    if not isinstance(y_pred, (RankedItems, DotScores)):
        _dense_or_error("y_pred", y_pred, "scores (batch, num_items), RankedItems or DotScores")
    if not isinstance(y, (ItemIds, torch.Tensor)):
        raise TypeError(f"y must be a torch.Tensor of relevance (dense or sparse), or ItemIds, got {type(y).__name__}")
    if exclude is not None and not isinstance(exclude, (ItemIds, torch.Tensor)):
        raise TypeError(
            "exclude must be a torch.Tensor (bool mask, dense or sparse), ItemIds or None, "
            f"got {type(exclude).__name__}"
        )
    for name, value in (("y_pred", y_pred), ("y", y), ("exclude", exclude)):
        if isinstance(value, torch.Tensor) and value.ndim != 2:
            raise ValueError(f"{name} must be 2-D (batch, num_items), got shape {tuple(value.shape)}")


def _batch_shape(y_pred: Any, y: Any, exclude: Any, num_items: Optional[int]) -> RankingInput:
    """An empty ``RankingInput`` of the batch's users, catalog size and device, each checked to
    agree between the parts that hold it (the catalog: the tensors' columns, else ``num_items``)."""
    shaped = [
        (name, t.shape[1])
        for name, t in (("y_pred", y_pred), ("y", y), ("exclude", exclude))
        if isinstance(t, torch.Tensor)
    ]
    if isinstance(y_pred, DotScores):  # its item table is the catalog
        name = "y_pred (DotScores num_items)" if y_pred.sharded else "y_pred (DotScores item_vectors rows)"
        shaped.insert(0, (name, y_pred.num_items))
    if shaped:
        first_name, width = shaped[0]
        for name, other in shaped:
            if other != width:
                raise ValueError(f"{name} must have {width} columns (num_items, as {first_name}), got {other}")
        if num_items is not None and width != num_items:
            raise ValueError(f"{first_name} must have num_items={num_items} columns (given), got {width}")
        num_items = width
    batch = _batch_size(y_pred)
    for name, value in (("y", y), ("exclude", exclude)):
        if value is not None and _batch_size(value) != batch:
            raise ValueError(f"{name} must hold {batch} users (as y_pred), got {_batch_size(value)}")
    if batch == 0:
        raise ValueError("y_pred and y must hold at least one user (batch dimension is 0)")
    if num_items == 0:
        raise ValueError("y_pred and y must hold at least one item (num_items dimension is 0)")
    if num_items is not None and num_items > MAX_NUM_ITEMS:
        raise ValueError(
            f"y_pred, y and exclude must have at most 2**32 columns (the widest catalog ranked, item ids below "
            f"2**32), got {num_items}"
        )
    device = _device(y_pred)
    for name, value in (("y", y), ("exclude", exclude)):
        if value is not None and _device(value) != device:
            raise ValueError(f"{name} must be on the device of y_pred ({device}), got {_device(value)}")
    return RankingInput(batch, num_items, device)


def _set_predictions(result: RankingInput, y_pred: Any, integers_accepted: bool) -> None:
    """``y_pred`` as ranked ids (their checks among the value checks) or scores: floating-point,
    or, where ``integers_accepted`` (their width is the catalog's, given by another input),
    integer and bool scores as an exact floating-point copy (``INTEGER_SCORE_DTYPES``), as the
    dense path takes them."""
    if isinstance(y_pred, RankedItems):
        result.ranked_ids = y_pred.ids
        _check_ids(result, "y_pred", y_pred.ids, per_row_unique=True)
        return
    if isinstance(y_pred, DotScores):
        result.vectors = y_pred
        result.invalid.update(finite_checks(y_pred))
        return
    if integers_accepted and y_pred.dtype in checks.INTEGER_SCORE_DTYPES:
        y_pred = y_pred.detach().to(checks.INTEGER_SCORE_DTYPES[y_pred.dtype])
    hint = "" if y_pred.is_floating_point() or y_pred.dtype == torch.bool else f"; {RANKED_IDS_HINT}"
    checks.check_dtype("y_pred", y_pred, checks.SCORE_DTYPES, "floating-point scores", hint)
    result.scores = y_pred.detach()


def _set_targets(result: RankingInput, y: Any) -> None:
    """``y`` as an ``ItemTable`` (ItemIds, sparse) or dense labels, with its value checks."""
    if isinstance(y, ItemIds):
        checks.check_dtype("y grades", y.grades, checks.LABEL_DTYPES, "bool, integer or floating-point relevance")
        _check_ids(result, "y", y.ids)
        listed = y.ids >= 0
        grades = y.grades
        if grades.is_floating_point():
            # a padded (-1) slot's grade is never read, whatever it holds; an item's must be finite
            result.invalid[
                "y (ItemIds) grades must be finite at the listed item ids, got NaN or an infinite grade (the "
                "grades of padded -1 slots are ignored): give each item id a finite grade"
            ] = (listed & ~torch.isfinite(grades)).any()
            grades = torch.where(listed, grades, torch.zeros((), dtype=grades.dtype, device=grades.device))
        result.targets = ItemTable.from_ids(y.ids, grades)
        result.targets_width = y.ids.shape[1]
        result.invalid["y holds an item id twice for one user"] = result.targets.duplicated
    elif _is_sparse(y):
        checks.check_dtype("y", y, checks.LABEL_DTYPES, "bool, integer or floating-point relevance")
        result.targets = ItemTable.from_sparse(y.detach())
        result.invalid[_OUTSIDE.format(name="y")] = sparse_outside(y)
        if result.ranked_ids is not None or result.vectors is not None:
            # on CPU the largest row, read on the host; elsewhere the entries
            result.targets_width = entries_bound(y) if cpu_tuned(y.device) else min(y._nnz(), y.shape[1])
        result.invalid["y holds an item twice for one user"] = result.targets.duplicated
    else:
        y = _dense_or_error("y", y, "relevance (batch, num_items) (dense or sparse), or ItemIds")
        checks.check_dtype("y", y, checks.LABEL_DTYPES, "bool, integer or floating-point relevance")
        result.labels = y.detach()


def _set_exclusion(result: RankingInput, exclude: Any) -> None:
    """``exclude`` as an exclusion list (ItemIds, sparse) or a dense bool mask."""
    if isinstance(exclude, ItemIds):
        _check_ids(result, "exclude", exclude.ids)
        result.excluded_list = exclude.ids
    elif _is_sparse(exclude):
        exclude = exclude.detach()
        if exclude.layout == torch.sparse_coo and not exclude.is_coalesced() and cpu_tuned(exclude.device):
            # duplicate entries summed (torch's meaning), once for every reader; elsewhere
            # ItemTable merges them with static shapes (coalesce reads its size on the host)
            exclude = exclude.coalesce()
        result.invalid[_OUTSIDE.format(name="exclude")] = sparse_outside(exclude)
        result.excluded_list = exclude
    else:
        exclude = _dense_or_error("exclude", exclude, "bool (batch, num_items) (dense or sparse), or ItemIds")
        if exclude.dtype != torch.bool:
            raise TypeError(f"exclude must be a bool tensor (True = excluded), got dtype {exclude.dtype}")
        result.excluded = exclude.detach()  # ranked ids look their items up in it


def _dense_or_error(name: str, value: Any, expected: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of {expected}, got {type(value).__name__}")
    checks.check_dense_tensor(name, value)
    return value


def _batch_size(value: Any) -> int:
    if isinstance(value, DotScores):
        return value.num_users
    return int(value.ids.shape[0] if isinstance(value, (ItemIds, RankedItems)) else value.shape[0])


def _device(value: Any) -> torch.device:
    if isinstance(value, DotScores):
        return value.user_vectors.device
    return value.ids.device if isinstance(value, (ItemIds, RankedItems)) else value.device


def _check_ids(result: RankingInput, name: str, ids: torch.Tensor, per_row_unique: bool = False) -> None:
    """Value checks of padded ids: their range and, for ranked lists, no id twice in a row (on
    the rows sorted once, kept as ``result.ranked_sorted`` for the lookups of the ranking step;
    a sorted row's range is its first and last id)."""
    if not per_row_unique:
        result.invalid.update(check_id_range(name, ids, result.num_items))
        return
    ordered, columns = sort_id_rows(ids)
    result.ranked_sorted = (ordered, columns)
    result.invalid.update(check_id_range(name, ordered[:, :: max(ids.shape[1] - 1, 1)], result.num_items))
    if ids.shape[1] > 1:
        repeated = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
        result.invalid[f"{name} ranks an item id twice for one user"] = repeated.any()
        result.invalid[GAP_MESSAGE.format(name=name)] = ((ids[:, :-1] < 0) & (ids[:, 1:] >= 0)).any()


# A -1 inside a ranked list could mean an empty position (the next item keeps its rank) or a
# removed item (the next item moves up): either reading gives a wrong number for the other, so
# neither is guessed.
GAP_MESSAGE = (
    "{name} (RankedItems) holds -1 before an item id in a row: -1 marks the end of a list, not a gap. "
    "Move each row's -1 entries to its end, e.g. ids.gather(1, (ids < 0).to(torch.uint8).argsort(dim=1, stable=True)) "
    "(the later items move up), or give the list as it was ranked"
)


def _dense_mask(table: ItemTable, num_users: int, num_items: int, device: torch.device) -> torch.Tensor:
    """(num_users, num_items) bool, True at the table's entries whose value is nonzero."""
    mask = torch.zeros(num_users + 1, num_items, dtype=torch.bool, device=device)
    users = table.users
    items = (table.keys & ((1 << 32) - 1)).clamp(max=num_items - 1)
    mask.index_put_((users, items), table.values.to(torch.bool))
    return mask[:num_users]
