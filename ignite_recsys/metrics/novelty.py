"""Novelty of the top-k lists, from the items' training popularity: Elliot's relevance-aware EPC
and EFD (Vargas & Castells 2011) and RecTools' mean inverse user frequency. Per-user means
(per-user values, intervals and user groups as every
:class:`~ignite_recsys.metrics._users.UserMean`); the popularity is looked up for the listed ids
only.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Union

import torch

from .. import _validation as V
from .._core.adapters import RankingInput
from ._lists import (
    NUM_USERS,
    RANK_WEIGHT,
    DeviceCopies,
    ListMean,
    at_cutoffs,
    at_items,
    rank_weight_values,
    relevant_at,
)
from ._state import _identity
from .beyond_accuracy import ItemValueMean


def _self_information(popularity: torch.Tensor, metric: str) -> torch.Tensor:
    """-log2(c / sum c) per item; an item with count 0 gets the rarest seen item's value."""
    seen = popularity > 0
    if not bool(seen.any()):
        raise ValueError(f"item_popularity must hold at least one positive count for {metric}")
    rarest = popularity[seen].min()
    return -torch.log2(torch.where(seen, popularity, rarest) / popularity.sum())


class _ExpectedNovelty(ListMean):
    """Elliot's EPC / EFD: the rank-discounted sum of the novelty of the relevant listed items,
    divided by the discounts of the list's positions."""

    _parameter_constraints = {
        "item_popularity": V.ITEM_VECTOR,
        "relevance_threshold": V.positive_real(),
        "rank_weight": RANK_WEIGHT,
        "ignore_zero_hits": V.BOOLEAN,
    }

    def __init__(
        self,
        top_k: Union[int, Sequence[int]],
        item_popularity: torch.Tensor,
        relevance_threshold: float = 1.0,
        rank_weight: Any = "log2",
        ignore_zero_hits: bool = True,
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
        *,
        per_user: bool = False,
        num_groups: Optional[int] = None,
    ):
        self.top_k = list(top_k)  # type: ignore[arg-type]  # checked and sorted: a list
        self.item_popularity = item_popularity  # a float64 copy (ITEM_VECTOR)
        self.relevance_threshold = relevance_threshold
        self.rank_weight = rank_weight
        self.ignore_zero_hits = ignore_zero_hits
        weights = rank_weight_values("rank_weight", rank_weight, self.top_k[-1])
        if weights is None:
            weights = torch.ones(self.top_k[-1], dtype=torch.float64)
        self._copies = DeviceCopies(novelty=self._novelty(item_popularity), weights=weights)
        super().__init__(output_transform, device, skip_unrolling, per_user=per_user, num_groups=num_groups)

    def _novelty(self, popularity: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _catalog_size(self) -> int:
        return self.item_popularity.numel()

    def _list_values(self, batch: RankingInput, order: torch.Tensor) -> tuple:
        listed = order >= 0
        relevant, has_relevant, checks = relevant_at(batch, order, self.relevance_threshold)
        novelty = at_items(self._copies.get("novelty", order.device), order)
        weights = self._copies.get("weights", order.device)[: order.shape[1]]
        found = at_cutoffs(weights * relevant * novelty, self.top_k)
        possible = at_cutoffs(weights * listed, self.top_k)
        values = torch.where(possible > 0, found / possible.clamp(min=1e-300), 0.0)
        counted = has_relevant if self.ignore_zero_hits else torch.ones_like(has_relevant)
        return values, counted.to(torch.float64), checks


class EPC(_ExpectedNovelty):
    r"""Expected popularity complement (Vargas & Castells, "Rank and Relevance in Novelty and
    Diversity Metrics for Recommender Systems", RecSys 2011), as Elliot computes it
    (``elliot/evaluation/metrics/novelty/EPC``), averaged over users:

    .. math:: \mathrm{EPC@k}(u) = \frac{\sum_{i=1}^{n} w(i)\, \mathrm{rel}(\hat r_i)
              \bigl(1 - \phi(\hat r_i) / |U|\bigr)}{\sum_{i=1}^{n} w(i)},
              \qquad n = \min(k, |\hat R(u)|)

    with :math:`\phi(j)` the number of distinct training users of item j, :math:`|U|` the number of
    training users, rel binary (``y >= relevance_threshold``) and w the rank discount,
    :math:`1/\log_2(i + 1)` by default (Elliot's). The denominator runs over the list's own
    positions. As Elliot, users without a relevant item are skipped (``ignore_zero_hits=False``
    counts them with 0); a counted user with an empty list gets 0.

    Args:
        item_popularity: 1-D tensor, the distinct training users of each item (its length is
            the catalog size).
        num_users: :math:`|U|`, the number of training users (at least every entry of item_popularity).
        rank_weight: the discount w: ``"log2"`` (default), ``None`` (every rank 1: the plain
            mean of the paper's non-discounted form), ``"log2_clip"``, ``("geometric", p)`` or a
            callable of the ranks.

    >>> import torch
    >>> from ignite_recsys import EPC
    >>> metric = EPC(top_k=2, item_popularity=torch.tensor([3, 1]), num_users=4)
    >>> metric.update((torch.tensor([[0.9, 0.1]]), torch.tensor([[0.0, 1.0]])))
    >>> [round(v, 4) for v in metric.compute()]  # (0.75 / log2(3)) / (1 + 1 / log2(3))
    [0.2901]
    """

    _parameter_constraints = {"num_users": NUM_USERS}

    def __init__(
        self,
        top_k: Union[int, Sequence[int]],
        item_popularity: torch.Tensor,
        num_users: int,
        relevance_threshold: float = 1.0,
        rank_weight: Any = "log2",
        ignore_zero_hits: bool = True,
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
        *,
        per_user: bool = False,
        num_groups: Optional[int] = None,
    ):
        self.num_users = num_users
        super().__init__(
            top_k,
            item_popularity,
            relevance_threshold,
            rank_weight,
            ignore_zero_hits,
            output_transform,
            device,
            skip_unrolling,
            per_user=per_user,
            num_groups=num_groups,
        )

    def _novelty(self, popularity: torch.Tensor) -> torch.Tensor:
        return 1.0 - popularity / self.num_users


class EFD(_ExpectedNovelty):
    r"""Expected free discovery (Vargas & Castells, RecSys 2011), as Elliot computes it
    (``elliot/evaluation/metrics/novelty/EFD``), averaged over users: :class:`EPC` with the
    novelty :math:`-\log_2(\phi(j) / \sum_l \phi(l))` (self-information) in place of
    :math:`1 - \phi(j)/|U|`:

    .. math:: \mathrm{EFD@k}(u) = \frac{\sum_{i=1}^{n} w(i)\, \mathrm{rel}(\hat r_i)
              \bigl(-\log_2 \frac{\phi(\hat r_i)}{\sum_l \phi(l)}\bigr)}{\sum_{i=1}^{n} w(i)}

    An item never seen in training (count 0) gets the largest novelty of a seen item,
    :math:`-\log_2(\min_{\phi(l) > 0} \phi(l) / \sum_l \phi(l))`, as Elliot. Conventions and
    arguments as :class:`EPC` (no ``num_users``).

    >>> import torch
    >>> from ignite_recsys import EFD
    >>> metric = EFD(top_k=2, item_popularity=torch.tensor([3, 1]))
    >>> metric.update((torch.tensor([[0.9, 0.1]]), torch.tensor([[0.0, 1.0]])))
    >>> [round(v, 4) for v in metric.compute()]  # (2 / log2(3)) / (1 + 1 / log2(3))
    [0.7737]
    """

    def _novelty(self, popularity: torch.Tensor) -> torch.Tensor:
        return _self_information(popularity, "EFD")


class MeanInvUserFreq(ItemValueMean):
    r"""Mean inverse user frequency of the recommended items, RecTools ``MeanInvUserFreq``,
    averaged over users:

    .. math:: \mathrm{MIUF@k}(u) = \frac{1}{n} \sum_{i=1}^{n} -\log_2 \frac{\max(\phi(\hat r_i), 1)}{|U|},
              \qquad n = \min(k, |\hat R(u)|)

    with :math:`\phi(j)` the distinct training users of item j (an item never seen counts 1, as
    RecTools) and :math:`|U|` the training users. RecTools' conventions: divided by the list's length
    :math:`\min(k, |\hat R(u)|)` (its docstring writes k); a user with an empty list is not counted.

    Relation to :class:`Novelty`: with ``item_popularity`` counting distinct users, every (user,
    item) pair once in training and no unseen item in the lists, MIUF@k equals
    ``Novelty@k - log2(N / |U|)``, N = ``item_popularity.sum()`` the training interactions: the
    same self-information measured against the users instead of the interactions (tested).

    Args:
        item_popularity: 1-D tensor, the distinct training users of each item.
        num_users: :math:`|U|`, the number of training users.

    >>> import torch
    >>> from ignite_recsys import MeanInvUserFreq
    >>> metric = MeanInvUserFreq(top_k=2, item_popularity=torch.tensor([2, 1]), num_users=4)
    >>> metric.update((torch.tensor([[0.9, 0.1]]), torch.zeros(1, 2)))
    >>> metric.compute()  # (log2(4 / 2) + log2(4 / 1)) / 2
    [1.5]
    """

    _parameter_constraints = {"num_users": NUM_USERS}

    def __init__(
        self,
        top_k: Union[int, Sequence[int]],
        item_popularity: torch.Tensor,
        num_users: int,
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
        *,
        per_user: bool = False,
        num_groups: Optional[int] = None,
    ):
        self.num_users = num_users
        super().__init__(
            top_k, item_popularity, output_transform, device, skip_unrolling, per_user=per_user, num_groups=num_groups
        )

    def _values_of_items(self, popularity: torch.Tensor) -> torch.Tensor:
        return torch.log2(self.num_users / popularity.clamp(min=1.0))
