"""Calibration of the top-k lists to each user's history (Steck 2018): a per-user mean (per-user
values, intervals and user groups as every :class:`~ignite_recsys.metrics._users.UserMean`).

The history is the ``exclude`` entry of the update, the items the ranking leaves out (usually
the user's training items), in any of its forms: a dense bool mask, a sparse tensor or
:class:`~ignite_recsys.ItemIds`. Category distributions are (batch, num_categories): the
categories of the listed items and of the history items, never of the whole catalog per user
(except the history given as a dense mask, which is read as a whole: (batch, num_items) @
(num_items, num_categories)).
"""

from __future__ import annotations

from collections.abc import Sequence as SequenceABC
from typing import Any, Optional

import torch

from .. import _validation as V
from .._core.adapters import RankingInput
from ._lists import RANK_WEIGHT, check_item_matrix, ListMean, at_cutoffs, at_items, entry_of, history_sums, rank_weights

_NOT_ACCEPTED = object()


def check_item_categories(name: str, value: Any) -> torch.Tensor:
    """The item categories as a float64 (num_items, width) CPU matrix of non-negative weights: a
    tensor as given (a 0/1 membership matrix, or weights), or a sequence of each item's category
    ids (width = the largest id + 1)."""
    if isinstance(value, torch.Tensor):
        return check_item_matrix(name, value, "num_categories", non_negative=True)
    if not isinstance(value, SequenceABC) or isinstance(value, (str, bytes)) or len(value) == 0:
        raise TypeError(
            f"{name} must be a 2-D tensor (num_items, num_categories) or a non-empty sequence of each item's "
            f"category ids, got {value!r:.60} of type {type(value).__name__}"
        )
    rows = []
    for item, ids in enumerate(value):
        if isinstance(ids, (str, bytes)) or not isinstance(ids, (SequenceABC, torch.Tensor)):
            raise TypeError(f"{name}[{item}] must be a sequence of category ids, got {type(ids).__name__}")
        ids = [int(i) if isinstance(i, int) or (isinstance(i, torch.Tensor) and i.ndim == 0) else i for i in ids]
        if any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
            raise TypeError(f"{name}[{item}] must hold integer category ids, got {ids!r:.60}")
        if any(i < 0 for i in ids):
            raise ValueError(f"{name}[{item}] holds a negative category id: {ids!r:.60}")
        rows.append(sorted(set(ids)))
    width = max((max(ids) for ids in rows if ids), default=-1) + 1
    if width == 0:
        raise ValueError(f"{name} assigns no category to any item")
    matrix = torch.zeros(len(rows), width, dtype=torch.float64)
    for item, ids in enumerate(rows):
        matrix[item, ids] = 1.0
    return matrix


def check_num_categories(name: str, value: Any, arguments: dict) -> Optional[int]:
    if value is None:
        return None
    value = V.check_positive_int(name, value)
    categories = arguments.get("item_categories")
    if isinstance(categories, torch.Tensor) and categories.shape[1] > value:
        raise ValueError(
            f"{name}={value}: item_categories has {categories.shape[1]} categories (a category id "
            f"{categories.shape[1] - 1}, or as many columns), outside [0, {value})"
        )
    return value


ITEM_CATEGORIES = V.Custom(
    "a 2-D tensor (num_items, num_categories) of non-negative weights, or a sequence of each item's category ids",
    lambda name, value, arguments: check_item_categories(name, value),
    (torch.zeros(3), torch.tensor([[-1.0]]), [[-1]], [[0.5]], [], "01", None, _NOT_ACCEPTED),
)


class Miscalibration(ListMean):
    r"""Miscalibration of each user's top-k list to the user's history, Steck's :math:`C_{KL}`
    ("Calibrated Recommendations", RecSys 2018, eq. 3-5), averaged over users (0: the list's
    category distribution matches the history's; higher: less calibrated):

    .. math:: C_{KL}(p, q) = \sum_g p(g|u) \log \frac{p(g|u)}{\tilde q(g|u)},\qquad
              \tilde q = (1 - \alpha)\, q + \alpha\, p

    .. math:: p(g|u) = \frac{\sum_{i \in H_u} p(g|i)}{|H_u|},\qquad
              q(g|u) = \frac{\sum_{i=1}^{n} w(i)\, p(g|\hat r_i)}{\sum_{i=1}^{n} w(i)},
              \qquad n = \min(k, |\hat R(u)|)

    :math:`p(g|i)` is item i's category distribution (its row of ``item_categories`` divided by
    the row's sum: :math:`1/|\text{categories}(i)|` for a 0/1 membership); an item without a category counts in
    the denominators and adds to no category. :math:`H_u` is the user's history: **the exclude
    entry of the update** (each item once), so ``update((y_pred, y, exclude))`` is required, in
    any form of ``exclude``. Natural log; :math:`\alpha` = 0.01 as in the paper keeps
    :math:`\tilde q > 0`. Steck weights the list's items by rank ("e.g. as in nDCG",
    ``rank_weight="log2"``); the default ``None`` weighs them equally (the plain form).

    Users with an empty history or an empty list are not counted. No installable library has
    this metric (Elliot, LensKit, RecTools and RecPack have none); it is tested against a numpy
    reference written from the paper and against cases worked by hand.

    Args:
        item_categories: (num_items, num_categories) tensor (0/1 membership, or non-negative
            weights per category), or a sequence with each item's category ids; copied once.
        num_categories: the number of categories (default: from ``item_categories``); category
            ids must lie below it.
        alpha: the mixing weight of p into q, strictly between 0 and 1.
        rank_weight: the weight w of the list positions: None (default: equal), ``"log2"``,
            ``"log2_clip"``, ``("geometric", p)`` or a callable of the ranks.

    >>> import torch
    >>> from ignite_recsys import Miscalibration
    >>> metric = Miscalibration(top_k=2, item_categories=[[0], [0, 1], [1]])
    >>> history = torch.tensor([[True, True, False]])  # p = (0.75, 0.25)
    >>> scores = torch.tensor([[0.0, 0.5, 0.9]])  # items 0 and 1 are history: the list is [2]
    >>> metric.update((scores, torch.zeros(1, 3), history))
    >>> [round(v, 4) for v in metric.compute()]  # q = (0, 1)
    [3.1092]
    """

    _parameter_constraints = {
        "item_categories": ITEM_CATEGORIES,
        "num_categories": V.Custom(
            "a positive int at least the number of categories of item_categories, or None",
            check_num_categories,
            (0, 1.5, "2", 1, _NOT_ACCEPTED),
        ),
        "alpha": V.Interval(float, 0, 1, low_included=False, high_included=False),
        "rank_weight": RANK_WEIGHT,
    }
    _catalog_argument = "item_categories"

    entry = entry_of("miscalibration")
    item_categories: torch.Tensor
    num_categories: int
    alpha: float
    rank_weight: Any

    def _prepare(self) -> dict:
        given = self.item_categories
        width = self.num_categories if self.num_categories is not None else given.shape[1]
        matrix = torch.nn.functional.pad(given, (0, width - given.shape[1]))
        self.item_categories = matrix
        self.num_categories = width
        totals = matrix.sum(1, keepdim=True)
        categories = torch.where(totals > 0, matrix / totals.clamp(min=1e-300), 0.0)
        return {"categories": categories, "weights": rank_weights(self.rank_weight, self.top_k[-1])}

    def _parse(self, output: Any) -> RankingInput:
        batch = super()._parse(output)
        if not batch.has_exclusion:
            raise ValueError(
                "Miscalibration needs each user's history as the exclusion: update((y_pred, y, exclude)), exclude "
                "a bool mask, a sparse tensor or ItemIds of the history items (or the key 'exclude' of a dict output)"
            )
        return batch

    def _list_values(self, batch: RankingInput, order: torch.Tensor) -> tuple:
        listed = (order >= 0).to(torch.float64)
        categories = self._copies.get("categories", order.device)
        slot = self._copies.get("weights", order.device)[: order.shape[1]] * listed
        q = at_cutoffs(at_items(categories, order) * slot.unsqueeze(2), self.top_k)  # (batch, len(top_k), G)
        q = q / at_cutoffs(slot, self.top_k).clamp(min=1e-300).unsqueeze(2)
        history, length = history_sums(batch, categories)
        p = (history / length.clamp(min=1).unsqueeze(1)).unsqueeze(1)  # (batch, 1, G)
        mixed = (1 - self.alpha) * q + self.alpha * p
        terms = torch.where(p > 0, p * (torch.log(p.clamp(min=1e-300)) - torch.log(mixed.clamp(min=1e-300))), 0.0)
        counted = (length > 0).to(torch.float64) * listed[:, 0]
        return terms.sum(2), counted, {}


class RankBiasedEntropy(ListMean):
    r"""Rank-biased category entropy of each user's top-k list, LensKit ``rank_biased_entropy``
    (``entropy`` with ``rank_weight=None``), averaged over users (0: one category; higher: the
    list spreads over more categories):

    .. math:: m_g = \epsilon + \sum_{i=1}^{n} w(i)\, c_{\hat r_i, g},\qquad
              \mathrm{RBE@k}(u) = -\sum_g \frac{m_g}{\sum_h m_h} \log_2 \frac{m_g}{\sum_h m_h},
              \qquad n = \min(k, |\hat R(u)|)

    with :math:`c_{j, g}` item j's row of ``item_categories`` (as given: 0/1 or weights), w the
    rank weight (LensKit's default ``GeometricRankWeight(0.85)``: :math:`0.85^{i-1}`) and
    :math:`\epsilon` = ``smoothing`` (LensKit adds 1e-6 to every category; 0: the plain entropy).
    A user with an empty list is not counted (LensKit: NaN).

    >>> import torch
    >>> from ignite_recsys import RankBiasedEntropy
    >>> metric = RankBiasedEntropy(top_k=2, item_categories=[[0], [1], [0]], rank_weight=None, smoothing=0.0)
    >>> metric.update((torch.tensor([[0.9, 0.8, 0.7], [0.9, 0.0, 0.8]]), torch.zeros(2, 3)))
    >>> metric.compute()  # categories {0, 1}: 1 bit; {0, 0}: 0
    [0.5]
    """

    entry = entry_of("rank_biased_entropy")
    _parameter_constraints = {
        "item_categories": ITEM_CATEGORIES,
        "rank_weight": RANK_WEIGHT,
        "smoothing": V.Interval(float, 0, None),
    }
    _catalog_argument = "item_categories"
    item_categories: torch.Tensor
    rank_weight: Any
    smoothing: float

    def _prepare(self) -> dict:
        return {"categories": self.item_categories, "weights": rank_weights(self.rank_weight, self.top_k[-1])}

    def _list_values(self, batch: RankingInput, order: torch.Tensor) -> tuple:
        listed = order >= 0
        slot = self._copies.get("weights", order.device)[: order.shape[1]] * listed
        rows = at_items(self._copies.get("categories", order.device), order) * slot.unsqueeze(2)
        mass = at_cutoffs(rows, self.top_k) + self.smoothing  # (batch, len(top_k), categories)
        share = mass / mass.sum(2, keepdim=True).clamp(min=1e-300)
        entropy = -torch.where(share > 0, share * torch.log2(share.clamp(min=1e-300)), 0.0).sum(2)
        return entropy, listed[:, 0].to(torch.float64), {}
