"""Novelty of the top-k lists, from the items' training popularity: Elliot's relevance-aware EPC
and EFD (Vargas & Castells 2011) and RecTools' mean inverse user frequency. Per-user means
(per-user values, intervals and user groups as every
:class:`~ignite_recsys.metrics._users.UserMean`); the popularity is looked up for the listed ids
only.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _validation as V
from .._core.adapters import RankingInput
from ._lists import (
    NUM_USERS,
    RANK_WEIGHT,
    ListMean,
    at_cutoffs,
    at_items,
    entry_of,
    rank_weights,
    relevant_at,
    self_information,
)


# Elliot's EPC / EFD: the rank-discounted sum of the novelty of the relevant listed items, divided
# by the discounts of the list's positions
_EXPECTED_NOVELTY = {
    "item_popularity": V.ITEM_VECTOR,
    "relevance_threshold": V.positive_real(),
    "rank_weight": RANK_WEIGHT,
    "ignore_zero_hits": V.BOOLEAN,
}


def expected_novelty(metric: Any, novelty: torch.Tensor) -> dict:
    """The tensors EPC / EFD look up: the novelty of each item and the weight of each rank."""
    return {"novelty": novelty, "weights": rank_weights(metric.rank_weight, metric.top_k[-1])}


def expected_novelty_values(metric: Any, batch: RankingInput, order: torch.Tensor) -> tuple:
    """EPC / EFD's ``_list_values``: sum_i w(i) rel_i novelty_i / sum_i w(i) over the listed positions."""
    listed = order >= 0
    relevant, has_relevant, checks = relevant_at(batch, order, metric.relevance_threshold)
    novelty = at_items(metric._copies.get("novelty", order.device), order)
    weights = metric._copies.get("weights", order.device)[: order.shape[1]]
    found = at_cutoffs(weights * relevant * novelty, metric.top_k)
    possible = at_cutoffs(weights * listed, metric.top_k)
    values = torch.where(possible > 0, found / possible.clamp(min=1e-300), 0.0)
    counted = has_relevant if metric.ignore_zero_hits else torch.ones_like(has_relevant)
    return values, counted.to(torch.float64), checks


class EPC(ListMean):
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

    entry = entry_of("epc")
    _parameter_constraints = {**_EXPECTED_NOVELTY, "num_users": NUM_USERS}
    item_popularity: torch.Tensor
    num_users: int

    def _prepare(self) -> dict:
        return expected_novelty(self, 1.0 - self.item_popularity / self.num_users)

    def _list_values(self, batch: RankingInput, order: torch.Tensor) -> tuple:
        return expected_novelty_values(self, batch, order)


class EFD(ListMean):
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

    entry = entry_of("efd")
    _parameter_constraints = _EXPECTED_NOVELTY
    item_popularity: torch.Tensor

    def _prepare(self) -> dict:
        return expected_novelty(self, self_information(self.item_popularity, "EFD"))

    def _list_values(self, batch: RankingInput, order: torch.Tensor) -> tuple:
        return expected_novelty_values(self, batch, order)


class MeanInvUserFreq(ListMean):
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

    entry = entry_of("mean_inv_user_freq")
    _parameter_constraints = {"item_popularity": V.ITEM_VECTOR, "num_users": NUM_USERS}
    num_users: int

    def _values_of_items(self, popularity: torch.Tensor) -> torch.Tensor:
        return torch.log2(self.num_users / popularity.clamp(min=1.0))
