"""What the metrics of the top-k lists share beyond the ranking step: constructor arguments given
once per catalog (item features, rank weights, item categories), copies of them on the inputs'
device, values at the cut-offs, the relevance of the listed items and the users' histories (the
exclusion of an update).

Every function here runs on any device without reading a value on the host (checked on the
``meta`` device); the constructor-time checks read their arguments on the host once.
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Sequence
from typing import Any, Optional, TypeVar

import torch

from .. import _validation as V
from .._core.adapters import RankingInput, parse_ranking_input
from .._core.input_checks import check_id_range
from .._core.item_sets import ITEM_BITS
from .._core.ranking import ranked_candidates
from .._core.relevance import Relevance, any_nan, count_true
from .._core.tuning import device_constant
from .._registry import LIST_REGISTRY, ListEntry
from ._engine import CutoffResults
from ._state import _identity
from ._users import UserMean, UserRows

_ITEM_MASK = (1 << ITEM_BITS) - 1
_LABEL_NAN = "y contains NaN relevance values (negative labels, -inf included, are allowed: not relevant)"


# --- Constructor arguments -----------------------------------------------------------------------
def check_item_matrix(name: str, value: Any, columns: str = "num_features", non_negative: bool = False) -> torch.Tensor:
    """A 2-D (num_items, width) tensor of finite real values (``non_negative``: >= 0), as a
    float64 CPU copy."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a 2-D torch.Tensor (num_items, {columns}), got {type(value).__name__}")
    if value.layout != torch.strided:
        raise TypeError(f"{name} must be a dense tensor (num_items, {columns}), got layout {value.layout}")
    if value.ndim != 2 or value.shape[0] == 0 or value.shape[1] == 0:
        raise ValueError(
            f"{name} must be a non-empty 2-D tensor (num_items, {columns}), got shape {tuple(value.shape)}"
        )
    if value.is_complex():
        raise TypeError(f"{name} must hold real numbers, got dtype {value.dtype}")
    copy = value.detach().to("cpu", torch.float64).clone()
    if not bool(torch.isfinite(copy).all()) or (non_negative and bool((copy < 0).any())):
        kind = "finite, non-negative weights (1 = the item is in the category)" if non_negative else "finite values"
        raise ValueError(f"{name} must hold {kind} (no NaN or infinity)")
    return copy


_NOT_ACCEPTED = object()
ITEM_MATRIX = V.Custom(
    "a non-empty 2-D tensor (num_items, num_features) of finite real values",
    lambda name, value, arguments: check_item_matrix(name, value),
    (torch.zeros(3), torch.zeros(0, 2), torch.tensor([[float("nan")]]), [[1.0]], None, _NOT_ACCEPTED),
)

RANK_WEIGHT_NAMES = ("log2", "log2_clip")


def check_rank_weight(name: str, value: Any) -> Any:
    """None, ``"log2"``, ``"log2_clip"``, ``("geometric", p)`` with 0 < p < 1, or a callable."""
    if value is None or callable(value):
        return value
    if isinstance(value, str):
        return V.check_choice(name, value, RANK_WEIGHT_NAMES)
    if isinstance(value, (tuple, list)) and len(value) == 2 and value[0] == "geometric":
        p = value[1]
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 < float(p) < 1:
            raise ValueError(
                f"{name}: the patience p of ('geometric', p) must be a number strictly between 0 and 1, got {p!r}"
            )
        return ("geometric", float(p))
    raise TypeError(
        f"{name} must be None (every rank weighs 1), 'log2', 'log2_clip', ('geometric', p) or a callable mapping "
        f"ranks to weights, got {value!r} of type {type(value).__name__}"
    )


RANK_WEIGHT = V.Custom(
    "None (every rank weighs 1), 'log2' (1/log2(r+1)), 'log2_clip' (1/log2(max(r, 2))), ('geometric', p) "
    "(p^(r-1)) or a callable mapping ranks 1, 2, ... (float64 tensor) to weights",
    lambda name, value, arguments: check_rank_weight(name, value),
    ("no such weight", ("geometric", 1.5), ("geometric", 0.0), 3, _NOT_ACCEPTED),
)


def rank_weight_values(name: str, rank_weight: Any, depth: int) -> Optional[torch.Tensor]:
    """The weights of ranks 1..depth (float64, CPU), or None when every rank weighs 1; a callable's
    output is checked here, once (one finite, non-negative weight per rank)."""
    if rank_weight is None:
        return None
    ranks = torch.arange(1, depth + 1, dtype=torch.float64)
    if rank_weight == "log2":
        return 1.0 / torch.log2(ranks + 1.0)
    if rank_weight == "log2_clip":
        return 1.0 / torch.log2(ranks.clamp(min=2.0))
    if isinstance(rank_weight, tuple):
        return rank_weight[1] ** (ranks - 1.0)
    weights = rank_weight(ranks)
    if not isinstance(weights, torch.Tensor) or weights.shape != ranks.shape or weights.is_complex():
        raise ValueError(
            f"{name} must map the ranks (a float64 tensor of shape ({depth},)) to one real weight per rank, got "
            f"{type(weights).__name__}{tuple(weights.shape) if isinstance(weights, torch.Tensor) else ''}"
        )
    weights = weights.detach().to("cpu", torch.float64)
    if not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()):
        raise ValueError(f"{name} must give finite, non-negative weights, got {weights[:5].tolist()}...")
    return weights


def rank_weights(rank_weight: Any, depth: int) -> torch.Tensor:
    """:func:`rank_weight_values` of the argument ``rank_weight``, ones where every rank weighs 1."""
    weights = rank_weight_values("rank_weight", rank_weight, depth)
    return torch.ones(depth, dtype=torch.float64) if weights is None else weights


def check_num_users(name: str, value: Any, arguments: dict) -> int:
    """The number of training users: a positive int, at least every item's count of users."""
    value = V.check_positive_int(name, value)
    popularity = arguments.get("item_popularity")
    if isinstance(popularity, torch.Tensor) and float(popularity.max()) > value:
        raise ValueError(
            f"{name}={value} is below the largest entry of item_popularity ({float(popularity.max()):g}); "
            "item_popularity counts each item's distinct training users, at most num_users"
        )
    return value


NUM_USERS = V.Custom(
    "a positive int, the number of training users (at least every entry of item_popularity)",
    check_num_users,
    (0, -1, 1.5, "3", None, 2, _NOT_ACCEPTED),
)


def self_information(popularity: torch.Tensor, metric: str) -> torch.Tensor:
    """-log2(c / sum c) per item; an item with count 0 gets the rarest seen item's value."""
    seen = popularity > 0
    if not bool(seen.any()):
        raise ValueError(f"item_popularity must hold at least one positive count for {metric}")
    rarest = popularity[seen].min()
    return -torch.log2(torch.where(seen, popularity, rarest) / popularity.sum())


# --- Tensors given once, on the inputs' device ---------------------------------------------------
class DeviceCopies:
    """Copies of constructor-time CPU tensors on each device the inputs come on, made once, at
    the first update there. To a GPU they are copied from pinned memory without blocking: a
    copy from pageable memory would make that update wait for the GPU."""

    def __init__(self, **tensors: Optional[torch.Tensor]):
        self._host = tensors
        self._copies: dict = {}

    def host(self, name: str) -> torch.Tensor:
        return present(self._host[name], name)

    def get(self, name: str, device: torch.device) -> torch.Tensor:
        key = (name, device)
        if key not in self._copies:
            source = self.host(name)
            if torch.device(device).type == "cuda" and source.device.type == "cpu":
                source = source.pin_memory()
            self._copies[key] = (source, source.to(device, non_blocking=True))  # the source kept alive
        return self._copies[key][1]


def at_items(per_item: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """The entries (rows) of a per-item tensor at the item ids ``order`` (-1 past a list: item 0's
    entry, to be masked by the caller; an id outside the catalog, which a value check refuses,
    clamped so that the lookup itself is safe)."""
    return per_item[order.clamp(min=0, max=per_item.shape[0] - 1)]


# --- Cut-offs ------------------------------------------------------------------------------------
def cutoff_index(top_k: Sequence[int], depth: int, device: torch.device) -> torch.Tensor:
    """(len(top_k),) int64: position min(k, depth) - 1 of each cut-off (the last one it reads)."""
    return device_constant([min(k, depth) - 1 for k in top_k], torch.int64, device)


def at_cutoffs(per_position: torch.Tensor, top_k: Sequence[int]) -> torch.Tensor:
    """Running sums over the positions (dim 1) of ``per_position`` (batch, depth, ...), read at each
    cut-off: (batch, len(top_k), ...)."""
    index = cutoff_index(top_k, per_position.shape[1], per_position.device)
    return per_position.cumsum(1).index_select(1, index)


def list_lengths(listed: torch.Tensor, top_k: Sequence[int]) -> torch.Tensor:
    """(batch, len(top_k)) float64: min(k, number of listed items) per user and cut-off."""
    return at_cutoffs(listed.to(torch.float64), top_k)


# --- What a parsed update holds ------------------------------------------------------------------
_T = TypeVar("_T")


def present(value: Optional[_T], what: str) -> _T:
    """A part of a parsed update that its form guarantees (the targets when there are no dense
    labels, an exclusion list's table, the catalog size once parsed): a Python check, no tensor read."""
    if value is None:
        raise ValueError(f"the update holds no {what}")
    return value


def catalog_size(batch: RankingInput) -> int:
    return present(batch.num_items, "catalog size (pass num_items)")


# --- Relevance of the listed items ---------------------------------------------------------------
def relevant_at(batch: RankingInput, order: torch.Tensor, threshold: float) -> tuple:
    """(relevant (batch, depth) float64 0/1 of the items at each position, 0 past the list;
    has_relevant (batch,) bool: whether the user has any relevant item, listed or not; the value
    check of NaN labels)."""
    listed = order >= 0
    if batch.labels is not None:
        labels = batch.labels
        relevance = Relevance.of(threshold, labels.dtype)
        top = labels.gather(1, order.clamp(min=0, max=labels.shape[1] - 1))
        # one pass: a user has a relevant item iff its largest label is relevant; a NaN label makes it NaN
        highest = labels.any(1) if labels.dtype == torch.bool else labels.amax(1)
        has_relevant, label_nan = relevance.mask(highest), any_nan(highest)
    else:
        table = present(batch.targets, "targets")
        relevance = Relevance.of(threshold, table.values.dtype)
        top = table.lookup(order)[0]
        has_relevant = table.per_user_sum(relevance.indicator(table.values)) > 0
        label_nan = any_nan(table.values)
    relevant = relevance.indicator(top) * listed
    return relevant, has_relevant, {_LABEL_NAN: label_nan}


# --- Histories: the exclusion of an update ------------------------------------------------------
def history_sums(batch: RankingInput, matrix: torch.Tensor) -> tuple:
    """Over each user's history (the update's exclusion, each item once): (batch, width) the sum of
    ``matrix`` (num_items, width) rows of its items, and (batch,) float64 the number of its items.
    Zeros without an exclusion."""
    num_users, num_items = batch.num_users, catalog_size(batch)
    if batch.excluded_list is not None:
        table = present(batch.excluded_table, "exclusion")
        weight = table.distinct_entries(num_items).to(torch.float64)
        items = (table.keys & _ITEM_MASK).clamp(max=num_items - 1)
        sums = torch.zeros(num_users + 1, matrix.shape[1], dtype=torch.float64, device=matrix.device)
        sums.index_add_(0, table.users.clamp(max=num_users), matrix.index_select(0, items) * weight.unsqueeze(1))
        return sums[:num_users], table.per_user_sum(weight)
    mask = batch.excluded
    if mask is not None:
        return mask.to(torch.float64) @ matrix, count_true(mask).to(torch.float64)
    zeros = torch.zeros(num_users, matrix.shape[1], dtype=torch.float64, device=matrix.device)
    return zeros, torch.zeros(num_users, dtype=torch.float64, device=matrix.device)


def history_mask(batch: RankingInput) -> Optional[torch.Tensor]:
    """(batch, num_items) bool, True at each user's history items (None without an exclusion)."""
    if batch.excluded_list is None or batch.scores is not None:
        return batch.excluded  # as given, or (with scores) the list made dense once for the update
    table, num_items = present(batch.excluded_table, "exclusion"), catalog_size(batch)
    marks = torch.zeros(batch.num_users + 1, num_items, dtype=torch.int32, device=table.keys.device)
    items = (table.keys & _ITEM_MASK).clamp(max=num_items - 1)
    # accumulated: a key held twice (an uncoalesced sparse exclusion) marks its item whatever the order
    marks.index_put_(
        (table.users.clamp(max=batch.num_users), items), (table.values != 0).to(torch.int32), accumulate=True
    )
    return marks[: batch.num_users] > 0


def in_history(batch: RankingInput, keys: torch.Tensor) -> torch.Tensor:
    """(nnz,) bool: whether each ``user << 32 | item`` key (sorted or not) is in its user's history,
    the update's exclusion (False without one): one ``searchsorted`` into an exclusion list, or a
    lookup in a dense mask."""
    if batch.excluded_list is not None:
        excluded = present(batch.excluded_table, "exclusion").keys  # sorted; entries of value 0 are padding keys
        if excluded.numel() == 0:
            return torch.zeros(keys.shape, dtype=torch.bool, device=keys.device)
        at = torch.searchsorted(excluded, keys).clamp(max=excluded.numel() - 1)
        return excluded.gather(0, at) == keys
    mask = batch.excluded
    if mask is None:
        return torch.zeros(keys.shape, dtype=torch.bool, device=keys.device)
    padded = torch.cat([mask, torch.zeros_like(mask[:1])])  # padding keys belong to the row past the users
    users = (keys >> ITEM_BITS).clamp(max=batch.num_users)
    return padded[users, (keys & _ITEM_MASK).clamp(max=catalog_size(batch) - 1)]


def relevant_counts(batch: RankingInput, threshold: float, membership: torch.Tensor) -> torch.Tensor:
    """(batch, groups) float64: each user's relevant items outside its history (each item once)
    in each group of the 0/1 ``membership`` (num_items, groups) matrix."""
    num_users, num_items = batch.num_users, catalog_size(batch)
    if batch.labels is not None:
        labels = batch.labels
        relevant = Relevance.of(threshold, labels.dtype).mask(labels)
        history = history_mask(batch)
        if history is not None:
            relevant = relevant & ~history
        # counts of 0/1 products: exact in float32 below 2**24 items
        wide = torch.float32 if num_items < (1 << 24) else torch.float64
        return (relevant.to(wide) @ membership.to(wide)).to(torch.float64)
    table = present(batch.targets, "targets")
    users = table.users.clamp(max=num_users)
    items = (table.keys & _ITEM_MASK).clamp(max=num_items - 1)
    keep = Relevance.of(threshold, table.values.dtype).mask(table.values) & table.distinct_entries(num_items)
    keep = keep & ~in_history(batch, table.keys)
    sums = torch.zeros(num_users + 1, membership.shape[1], dtype=torch.float64, device=membership.device)
    sums.index_add_(0, users, membership.index_select(0, items) * keep.to(torch.float64).unsqueeze(1))
    return sums[:num_users]


# --- The top-k lists of an update ---------------------------------------------------------------
def parse_lists(output: Any, num_items: Optional[int], metric: str, user_tags: bool = False) -> RankingInput:
    """An update's input in any form; ``num_items``: the catalog size the metric knows, needed
    (and checked against the ids) when the predictions are ranked ids."""
    batch = parse_ranking_input(output, user_tags=user_tags)
    if batch.ranked_ids is not None and batch.num_items is None:
        if not num_items:
            raise ValueError(
                f"{metric} needs the catalog size with RankedItems predictions: pass num_items to its "
                "constructor (or dense or sparse targets of width num_items)"
            )
        batch.num_items = num_items
        batch.invalid.update(check_id_range("y_pred", batch.ranked_ids, num_items))
    return batch


def parse_catalog_lists(
    output: Any, num_items: int, metric: str, argument: str, user_tags: bool = True
) -> RankingInput:
    """:func:`parse_lists` for a metric whose constructor argument ``argument`` fixes the catalog
    size ``num_items``, checked against every update."""
    batch = parse_lists(output, num_items, metric, user_tags=user_tags)
    if batch.num_items != num_items:
        raise ValueError(f"y_pred must have one column per item of {argument} ({num_items}), got {batch.num_items}")
    return batch


def top_items(batch: RankingInput, top_k: Sequence[int]) -> tuple:
    """Item ids (batch, min(max k, number of items listed)) in ranked order, -1 past a user's
    candidates, and the invalid-flag dict."""
    order, _, invalid = ranked_candidates(batch, top_k[-1])
    invalid.update(batch.invalid)
    return order, invalid


# --- Constructors: declared once, by the registry entry ------------------------------------------
_ENGINE_ARGUMENTS = (("output_transform", _identity), ("device", torch.device("cpu")), ("skip_unrolling", False))
_USER_ARGUMENTS = (("per_user", False), ("num_groups", None))


def declare_constructor(cls: type, parent: Any, kwargs: dict) -> None:
    """Give a list metric class the signature of its registry entry (``cls.entry``): ``top_k``,
    the entry's arguments, ``output_transform, device, skip_unrolling``, then keyword-only the
    entry's keywords (and ``per_user, num_groups`` for a per-user mean). :func:`configure`
    checks a call against it. ``parent``: ``super()`` of the family base's ``__init_subclass__``."""
    parent.__init_subclass__(**kwargs)
    per_user = issubclass(cls, UserMean)
    entry = vars(cls).get("entry") or getattr(cls, "entry", None)
    if not isinstance(entry, ListEntry):
        return
    positional, keyword = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter("top_k", positional)]
    parameters += [inspect.Parameter(n, positional, default=d) for n, d in entry.arguments + _ENGINE_ARGUMENTS]
    keywords = entry.keywords + (_USER_ARGUMENTS if per_user else ())
    parameters += [inspect.Parameter(n, keyword, default=d) for n, d in keywords]
    cls.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]


def configure(metric: Any, args: tuple, kwargs: dict) -> dict:
    """Check a list metric's constructor call (``args``, ``kwargs``) against its entry's
    signature (kept as ``_arguments``, the configuration a state is saved under), set the checked
    arguments as its attributes and make its look-ups (``_prepare``: CPU tensors copied to
    each inputs' device once, ``_copies``); return the arguments of the machinery
    (``output_transform``, ``device``, ...), for the base class."""
    machinery: dict = {}
    engine = {name for name, _ in _ENGINE_ARGUMENTS + _USER_ARGUMENTS}
    for name, value in metric._validate_call(args, kwargs).items():
        if name in engine:
            machinery[name] = value
        else:
            setattr(metric, name, value)
    metric.top_k = list(metric.top_k)
    metric._copies = DeviceCopies(**metric._prepare())
    return machinery


def entry_of(name: str) -> ListEntry:
    """The registry entry of a list metric class (``entry = entry_of("epc")`` in its body)."""
    return LIST_REGISTRY[name]


# --- The mean over users of a value of each top-k list -------------------------------------------
class ListMean(CutoffResults, UserMean):
    """The mean over users of one value of each user's top-k list, per cut-off (ascending k).

    The lists come from the shared ranking step (:func:`top_items`: score descending, ties by
    lower item index, excluded items left out; or the given ``RankedItems``). A subclass declares
    its registry ``entry`` (its constructor arguments, set as attributes), prepares what it looks
    up (``_prepare``) and turns the lists into per-user values (``_list_values``); by default the
    value is the mean over the list of a per-item value (``_values_of_items``)."""

    entry: ListEntry
    top_k: list
    _counted = "user"
    optional_output_keys = ("exclude",)  # a dict output {"y_pred", "y", "exclude"} passes its exclusion
    _parameter_constraints = {"top_k": V.TOP_K}
    _catalog_argument = "item_popularity"  # the argument that fixes the catalog size
    _copies: DeviceCopies

    def __init_subclass__(cls, **kwargs: Any) -> None:
        declare_constructor(cls, super(), kwargs)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(**configure(self, args, kwargs))

    def _prepare(self) -> dict:
        """The tensors (CPU) that updates look up on the inputs' device (by default the per-item
        values)."""
        return {"item_values": self._values_of_items(getattr(self, self._catalog_argument))}

    def _values_of_items(self, popularity: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @property
    def _item_values(self) -> torch.Tensor:
        """The per-item values (CPU), of a metric that averages them."""
        return self._copies.host("item_values")

    def _catalog_size(self) -> int:
        return int(getattr(self, self._catalog_argument).shape[0])

    def _num_values(self) -> int:
        return len(self.top_k)

    def _empty_message(self) -> str:
        return (
            f"{type(self).__name__} must have at least one user with an item in its top-k list before compute(): "
            "it had no update, or every list it was given was empty"
        )

    def _parse(self, output: Any) -> RankingInput:
        return parse_catalog_lists(output, self._catalog_size(), type(self).__name__, self._catalog_argument)

    def _user_rows(self, batch: RankingInput) -> UserRows:
        order, invalid = top_items(batch, self.top_k)
        values, weight, checks = self._list_values(batch, order)
        return UserRows(values, weight, {**invalid, **checks}, groups=batch.groups, users=batch.users)

    def _list_values(self, batch: RankingInput, order: torch.Tensor) -> tuple:
        """(values (batch, len(top_k)) float64, weight (batch,) float64: 1 for a counted user, value
        checks) from the item ids ``order`` (batch, depth) in ranked order, -1 past a user's list.
        By default each user's mean item value over the listed items of its top k; a user with
        an empty list is not counted."""
        listed = order >= 0
        values = at_items(self._copies.get("item_values", order.device), order) * listed
        lengths = list_lengths(listed, self.top_k)
        means = torch.where(lengths > 0, at_cutoffs(values, self.top_k) / lengths.clamp(min=1), 0.0)
        return means, listed[:, 0].to(torch.float64), {}
