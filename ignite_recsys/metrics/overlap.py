"""Two models' top-k lists for the same users compared: rank-biased overlap (LensKit) and the
intersection (RecTools), per-user means with per-user values, intervals and user groups.

``update((y_pred_a, y_pred_b))``, ``update((y_pred_a, y_pred_b, y))`` or ``update((y_pred_a,
y_pred_b, y, exclude))`` (``y`` may be None): each model's predictions in any form (dense scores
or :class:`~ignite_recsys.RankedItems`), ranked by the shared ranking step with the same
exclusion; ``y`` is not read (only its shape is checked, as by the other list metrics). From an
Engine, a dict output with the keys ``"y_pred_a"``, ``"y_pred_b"`` (and ``"y"``, ``"exclude"``),
as :class:`~ignite_recsys.Paired` takes it. :class:`~ignite_recsys.UserGroups` and
:class:`~ignite_recsys.UserIds` come last, as in every update.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from .. import _validation as V
from .._core.tuning import device_constant
from ..inputs import ItemIds, RankedItems, UserGroups, UserIds
from ._engine import CutoffResults
from ._lists import (
    DeviceCopies,
    at_cutoffs,
    configure,
    declare_constructor,
    entry_of,
    list_lengths,
    parse_lists,
    top_items,
)
from ._users import UserMean, UserRows

_ABSENT = 1 << 40  # the position of an item absent from the other list: past every cut-off


def positions_in(order: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """(batch, depth) int64: the position of each item of ``order`` in the list ``other`` (batch,
    other depth), ``_ABSENT`` where it is not there or the position of ``order`` holds no item;
    one sort and one searchsorted per row."""
    ordered, columns = other.sort(1)
    at = torch.searchsorted(ordered, order.contiguous()).clamp(max=other.shape[1] - 1)
    found = (ordered.gather(1, at) == order) & (order >= 0)
    return torch.where(found, columns.gather(1, at), _ABSENT)


def _no_targets(y_pred: Any) -> ItemIds:
    """Targets of no item for an update without ``y`` (one -1 id per user)."""
    ids = y_pred.ids if isinstance(y_pred, RankedItems) else y_pred
    users = ids.shape[0] if ids.ndim else 1
    return ItemIds(torch.full((users, 1), -1, dtype=torch.int64, device=ids.device))


class _TwoLists(CutoffResults, UserMean):
    """A per-user mean of a value of two models' top-k lists (see the module docstring)."""

    required_output_keys = ("y_pred_a", "y_pred_b")
    optional_output_keys = ("y", "exclude")
    _counted = "user"
    _parameter_constraints = {"top_k": V.TOP_K, "num_items": V.catalog_size(optional=True)}
    num_items: Optional[int] = None
    top_k: list
    _copies: DeviceCopies

    def _prepare(self) -> dict:
        """What the constructor derives from the arguments (the tensors to copy to the inputs' device)."""
        return {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        declare_constructor(cls, super(), kwargs)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(**configure(self, args, kwargs))

    def _num_values(self) -> int:
        return len(self.top_k)

    def _reference_cutoffs(self) -> list:
        """The cut-offs whose positions of model b's list are read."""
        return self.top_k

    def _parse(self, output: Any) -> tuple:
        name = type(self).__name__
        if not isinstance(output, (tuple, list)):
            raise TypeError(
                f"{name}.update expects a tuple (y_pred_a, y_pred_b), (y_pred_a, y_pred_b, y) or (y_pred_a, y_pred_b, "
                f"y, exclude), got {type(output).__name__}"
            )
        entries: list = list(output)
        tags: list = []
        while entries and isinstance(entries[-1], (UserGroups, UserIds)):
            tags.insert(0, entries.pop())
        if len(entries) not in (2, 3, 4):
            raise ValueError(
                f"{name}.update expects a tuple (y_pred_a, y_pred_b[, y[, exclude]]) of 2 to 4 entries (then "
                f"UserGroups / UserIds), got {len(entries)} entries"
            )
        y = entries[2] if len(entries) > 2 else None
        exclude = entries[3] if len(entries) > 3 else None
        batches = []
        for model, y_pred in (("a", entries[0]), ("b", entries[1])):
            if not isinstance(y_pred, (torch.Tensor, RankedItems)):
                raise TypeError(
                    f"{name}: y_pred_{model} must be a torch.Tensor of scores (batch, num_items) or RankedItems, got "
                    f"{type(y_pred).__name__}"
                )
            inputs = (y_pred, _no_targets(y_pred) if y is None else y) + ((exclude,) if exclude is not None else ())
            if model == "a":
                inputs += tuple(tags)
            try:
                batches.append(parse_lists(inputs, self.num_items, name, user_tags=model == "a"))
            except (TypeError, ValueError) as error:
                raise type(error)(f"{name}, model {model} (y_pred_{model}): {error}") from None
        a, b = batches
        for model, batch in (("a", a), ("b", b)):
            if self.num_items is not None and batch.num_items != self.num_items:
                raise ValueError(
                    f"{name}: y_pred_{model} must have num_items={self.num_items} columns (given), got "
                    f"{batch.num_items}"
                )
        if a.num_items is not None and b.num_items is not None and a.num_items != b.num_items:
            raise ValueError(
                f"{name}: y_pred_a and y_pred_b must rank the same catalog, got {a.num_items} and {b.num_items} items"
            )
        return a, b

    def _inputs_device(self, inputs: tuple) -> torch.device:
        return inputs[0].device

    def _user_rows(self, inputs: tuple) -> UserRows:
        a, b = inputs
        order_a, invalid_a = top_items(a, self.top_k)
        order_b, invalid_b = top_items(b, self._reference_cutoffs())
        invalid = {f"y_pred_a: {message}": flag for message, flag in invalid_a.items()}
        invalid.update({f"y_pred_b: {message}": flag for message, flag in invalid_b.items()})
        values, weight = self._compare(order_a, positions_in(order_a, order_b))
        return UserRows(values, weight, invalid, groups=a.groups, users=a.users)

    def _compare(self, order: torch.Tensor, in_other: torch.Tensor) -> tuple:
        """(values (batch, len(top_k)), weight (batch,)) from model a's list and the position of
        each of its items in model b's list."""
        raise NotImplementedError


class RankBiasedOverlap(_TwoLists):
    r"""Rank-biased overlap of two models' top-k lists (Webber, Moffat & Zobel, "A Similarity
    Measure for Indefinite Rankings", TOIS 2010), as LensKit ``rank_biased_overlap(a, b,
    GeometricRankWeight(p), n=k)`` computes it, averaged over users:

    .. math:: \mathrm{RBO@k}(u) = \frac{\sum_{d=1}^{k} p^{d-1} A_d}{\sum_{d=1}^{k} p^{d-1}},\qquad
              A_d = \frac{|a_{1:d} \cap b_{1:d}|}{d}

    (``normalize="lenskit"``, default: identical lists of k items give 1). ``normalize="webber"``
    gives Webber's truncated sum :math:`(1 - p) \sum_{d \le k} p^{d-1} A_d`, at most
    :math:`1 - p^k`. A list shorter than d still divides by d, so short lists lower the
    agreement; every user counts (two empty lists give 0, as LensKit).

    Args:
        top_k: the depths k.
        patience: p, strictly between 0 and 1 (LensKit's default 0.85).
        normalize: ``"lenskit"`` or ``"webber"``.
        num_items: the catalog size, needed only with :class:`~ignite_recsys.RankedItems` for
            both models (to check the ids).

    >>> import torch
    >>> from ignite_recsys import RankBiasedOverlap
    >>> metric = RankBiasedOverlap(top_k=3, patience=0.5)
    >>> model_a = torch.tensor([[0.0, 0.9, 0.8, 0.7, 0.0]])  # [1, 2, 3]
    >>> model_b = torch.tensor([[0.0, 0.8, 0.9, 0.0, 0.7]])  # [2, 1, 4]
    >>> metric.update((model_a, model_b))
    >>> [round(v, 4) for v in metric.compute()]  # (0 + 0.5 * 1 + 0.25 * 2/3) / 1.75
    [0.381]
    """

    _parameter_constraints = {
        "patience": V.Interval(float, 0, 1, low_included=False, high_included=False),
        "normalize": V.Options(("lenskit", "webber")),
    }

    entry = entry_of("rank_biased_overlap")
    patience: float
    normalize: str

    def _prepare(self) -> dict:
        depths = torch.arange(1, self.top_k[-1] + 1, dtype=torch.float64)
        series = (self.patience ** (depths - 1)).cumsum(0)
        scale = 1 / series if self.normalize == "lenskit" else torch.full_like(series, 1 - self.patience)
        # w_d / d at each depth d, and the scale at each cut-off
        return {"depth_weights": self.patience ** (depths - 1) / depths, "scale": scale[[k - 1 for k in self.top_k]]}

    def _compare(self, order: torch.Tensor, in_other: torch.Tensor) -> tuple:
        depth = self.top_k[-1]
        positions = torch.arange(order.shape[1], device=order.device)
        # an item of a at position i and of b at position j is in both prefixes of depth d > max(i, j)
        joins = torch.maximum(positions, in_other).clamp(max=depth)
        overlap = torch.zeros(order.shape[0], depth + 1, dtype=torch.float64, device=order.device)
        overlap.scatter_add_(1, joins, torch.ones(joins.shape, dtype=torch.float64, device=order.device))
        depth_weights, scale = (self._copies.get(name, order.device) for name in ("depth_weights", "scale"))
        agreement = overlap[:, :depth].cumsum(1) * depth_weights  # w_d |a_{1:d} ∩ b_{1:d}| / d
        values = at_cutoffs(agreement, self.top_k) * scale
        return values, torch.ones(order.shape[0], dtype=torch.float64, device=order.device)


class Intersection(_TwoLists):
    r"""The share of model a's top-k items that are also in model b's top ``ref_k`` list, RecTools
    ``Intersection(k, ref_k)``, averaged over users:

    .. math:: \mathrm{Intersection@k}(u) = \frac{|a_{1:k} \cap b_{1:k'}|}{\min(k, |a|)},
              \qquad k' = \texttt{ref\_k} \text{ (default: k)}

    RecTools' conventions: divided by the length of a's cut list, not k; a user whose list of
    model a is empty is not counted; one whose list of model b is empty counts 0. Symmetric in
    the two models only when both lists hold at least k items and ``ref_k`` is k.

    Args:
        top_k: the cut-offs k of model a's lists.
        ref_k: the cut-off of model b's lists (default None: the same k).
        num_items: the catalog size, needed only with :class:`~ignite_recsys.RankedItems` for
            both models.

    >>> import torch
    >>> from ignite_recsys import Intersection
    >>> metric = Intersection(top_k=[1, 2])
    >>> model_a = torch.tensor([[0.9, 0.8, 0.0, 0.0], [0.9, 0.8, 0.0, 0.0]])  # [0, 1] twice
    >>> model_b = torch.tensor([[0.8, 0.9, 0.0, 0.0], [0.0, 0.0, 0.9, 0.8]])  # [1, 0], [2, 3]
    >>> metric.update((model_a, model_b))
    >>> metric.compute()
    [0.0, 0.5]
    """

    _parameter_constraints = {"ref_k": V.positive_int(optional=True)}

    entry = entry_of("intersection")
    ref_k: Optional[int]

    def _reference_cutoffs(self) -> list:
        return self.top_k if self.ref_k is None else [self.ref_k]

    def _compare(self, order: torch.Tensor, in_other: torch.Tensor) -> tuple:
        listed = order >= 0
        if self.ref_k is None:  # in both top k: positions i < k in a and j < k in b
            positions = torch.arange(order.shape[1], device=order.device)
            joins = torch.maximum(positions, in_other)
            cutoffs = device_constant(self.top_k, torch.int64, order.device).view(1, -1, 1)
            shared = (joins.unsqueeze(1) < cutoffs).sum(2, dtype=torch.float64)
        else:
            shared = at_cutoffs((in_other < self.ref_k).to(torch.float64), self.top_k)
        lengths = list_lengths(listed, self.top_k)
        return shared / lengths.clamp(min=1), listed[:, 0].to(torch.float64)
