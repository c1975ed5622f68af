"""Diversity and serendipity of the top-k lists: per-user means (per-user values, intervals and
user groups as every :class:`~ignite_recsys.metrics._users.UserMean`).

Both read the top-k item ids of each user from the shared ranking step and look up what they
need for those ids only: item features for :class:`IntraListDiversity` (O(batch · k · d) work
and O(batch · k²) distances, never O(batch · num_items · d)), a per-item popularity rank for
:class:`Serendipity`.
"""

from __future__ import annotations

from typing import Callable, Union

import torch

from .. import _validation as V
from .._core.adapters import RankingInput
from .._core.relevance import any_nan
from ._lists import ITEM_MATRIX, ListMean, at_cutoffs, at_items, entry_of, list_lengths, relevant_at

DistanceFunction = Union[str, Callable[[torch.Tensor], torch.Tensor]]
_NOT_ACCEPTED = object()


def _check_distance(name: str, value) -> DistanceFunction:
    if callable(value):
        return value
    if not isinstance(value, str):
        raise TypeError(
            f"{name} must be 'cosine', 'hamming' or a callable mapping features (batch, k, d) to distances "
            f"(batch, k, k), got {value!r} of type {type(value).__name__}"
        )
    return V.check_choice(name, value, ("cosine", "hamming"))


class IntraListDiversity(ListMean):
    r"""Intra-list diversity: the mean distance between the items of each user's top-k list,
    averaged over users (Ziegler, McNee, Konstan & Lausen, WWW 2005; RecTools
    ``IntraListDiversity``).

    .. math:: \mathrm{ILD@k}(u) = \frac{1}{n(n-1)/2} \sum_{i < j \le n} d(\hat r_i, \hat r_j),
              \qquad n = \min(k, |\hat R(u)|)

    RecTools' convention: the mean over the pairs present, so a list shorter than k is divided
    by its own number of pairs; a list of one item gives 0; a user with an empty list (every item
    excluded, or an empty :class:`~ignite_recsys.RankedItems` row) is not counted.

    Args:
        top_k: the cut-offs.
        item_features: (num_items, d) tensor, one row of features (or an embedding) per item,
            copied once as float64; only the rows of the listed items are read in an update.
        distance: ``"cosine"`` (default): :math:`1 - x \cdot y / (\lVert x\rVert \lVert y\rVert)`;
            an all-zero row has similarity 0 with every item (distance 1), as scikit-learn's
            ``cosine_distances``. ``"hamming"``: the number of features that differ
            (RecTools' ``PairwiseHammingDistanceCalculator``: a count, not a fraction). Or a
            callable taking the features of each user's list, a float64 (batch, k, d) tensor, and
            returning the pairwise distances (batch, k, k) (only the entries i < j of listed
            items are read; past a user's list the rows hold item 0's features).

    Cost: cosine and Hamming distances of 0/1 features are summed from running sums of the
    listed items' features, :math:`\sum_{i<j} x_i \cdot x_j = (\lVert \sum_i x_i\rVert^2 -
    \sum_i \lVert x_i\rVert^2)/2`: O(batch · k · d), no pairwise matrix. Hamming distances of
    other features and a callable form the (batch, k, k) matrix (Hamming: O(batch · k² · d)).
    ``compute()`` returns a list in ascending k order.

    >>> import torch
    >>> from ignite_recsys import IntraListDiversity
    >>> features = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    >>> metric = IntraListDiversity(top_k=[2, 3], item_features=features)
    >>> metric.update((torch.tensor([[0.9, 0.8, 0.7, 0.0], [0.9, 0.0, 0.1, 0.8]]), torch.zeros(2, 4)))
    >>> [round(v, 4) for v in metric.compute()]  # user 0: (1, (1 + .2929 + .2929) / 3); user 1: (0, .1953)
    [0.5, 0.3619]
    """

    _parameter_constraints = {
        "item_features": ITEM_MATRIX,
        "distance": V.Custom(
            "'cosine', 'hamming' or a callable mapping features (batch, k, d) to distances (batch, k, k)",
            lambda name, value, arguments: _check_distance(name, value),
            ("euclidean", 3, None, _NOT_ACCEPTED),
        ),
    }
    _catalog_argument = "item_features"

    entry = entry_of("intra_list_diversity")
    item_features: torch.Tensor
    distance: DistanceFunction

    def _prepare(self) -> dict:
        features = self.item_features  # a float64 copy (ITEM_MATRIX)
        self._binary = False
        if self.distance == "cosine":
            norms = features.norm(dim=1, keepdim=True)
            features = torch.where(norms > 0, features / norms.clamp(min=1e-300), 0.0)
        elif self.distance == "hamming":
            self._binary = bool(((features == 0) | (features == 1)).all())
        return {"features": features}

    def _pair_sums(self, features: torch.Tensor, listed: torch.Tensor, n: torch.Tensor) -> tuple:
        r"""(batch, len(top_k)) the sum of the distances over the pairs i < j of the first n listed
        positions at each cut-off, and value checks. Cosine and binary Hamming distances come from
        the running sums of the features, with no pairwise matrix:
        :math:`\sum_{i<j} x_i \cdot x_j = (\lVert \sum_i x_i \rVert^2 - \sum_i \lVert x_i \rVert^2) / 2`."""
        if self.distance == "cosine" or (self.distance == "hamming" and self._binary):
            x = features * listed.unsqueeze(2)  # (batch, depth, d); unit rows (cosine) or 0/1 rows
            squares = at_cutoffs((x * x).sum(2), self.top_k)  # sum of |x_i|^2 (0/1 rows: |x_i|_1)
            totals = at_cutoffs(x, self.top_k)  # (batch, len(top_k), d)
            dots = ((totals * totals).sum(2) - squares) / 2  # sum over pairs of x_i . x_j
            if self.distance == "cosine":  # 1 - x_i . x_j
                return n * (n - 1) / 2 - dots, {}
            return (n - 1) * squares - 2 * dots, {}  # |x_i| + |x_j| - 2 x_i . x_j
        depth = features.shape[1]
        if self.distance == "hamming":
            distances = (features.unsqueeze(2) != features.unsqueeze(1)).sum(3, dtype=torch.float64)
        else:
            distances = self._called(features)
        upper = torch.ones(depth, depth, dtype=torch.bool, device=features.device).triu(1)
        counted = torch.where(listed.unsqueeze(2) & listed.unsqueeze(1) & upper, distances, 0.0)
        checks = {}
        if callable(self.distance):
            checks["distance returned NaN for a pair of listed items"] = any_nan(counted)
        # the pairs (i, j), i < j, of the first n positions are those of the columns j < n
        return at_cutoffs(counted.sum(1), self.top_k), checks

    def _called(self, features: torch.Tensor) -> torch.Tensor:
        """The distances (batch, depth, depth) of a callable ``distance``, checked."""
        distances = self.distance(features)  # type: ignore[operator]  # a callable here
        expected = (features.shape[0], features.shape[1], features.shape[1])
        if not isinstance(distances, torch.Tensor):
            raise TypeError(f"distance must return a torch.Tensor of distances, got {type(distances).__name__}")
        wrong_kind = distances.is_complex() or distances.dtype == torch.bool or distances.device != features.device
        if wrong_kind or tuple(distances.shape) != expected:
            raise (TypeError if wrong_kind else ValueError)(
                f"distance must return the pairwise distances (batch, k, k) = {expected} of the features "
                f"(batch, k, d) = {tuple(features.shape)}, as real numbers on {features.device}; got shape "
                f"{tuple(distances.shape)}, dtype {distances.dtype} on {distances.device}"
            )
        return distances.detach().to(torch.float64)

    def _list_values(self, batch: RankingInput, order: torch.Tensor) -> tuple:
        listed = order >= 0
        n = list_lengths(listed, self.top_k)
        features = at_items(self._copies.get("features", order.device), order)  # (batch, depth, d)
        sums, checks = self._pair_sums(features, listed, n)
        num_pairs = n * (n - 1) / 2
        values = torch.where(num_pairs > 0, sums / num_pairs.clamp(min=1), 0.0)
        return values, listed[:, 0].to(torch.float64), checks


class Serendipity(ListMean):
    r"""Serendipity as RecTools computes it (``rectools.metrics.Serendipity``, after Lab41's
    "Recommender Systems: It's Not All About the Accuracy"), averaged over users:

    .. math:: \mathrm{Ser@k}(u) = \frac{1}{n} \sum_{i=1}^{n}
              \max\bigl(p(i) - p_u(\hat r_i),\, 0\bigr)\, \mathrm{rel}(\hat r_i),
              \qquad n = \min(k, |\hat R(u)|)

    with :math:`p(i) = (N + 1 - i)/N` the user's rank-based preference for the item at position
    i, :math:`p_u(j) = (N + 1 - \mathrm{rank}(j))/N` the item's popularity-based preference
    (:math:`\mathrm{rank}(j)`: the dense rank of its training count, 1 for the most popular,
    equal counts sharing a rank; 0 for an item never seen in training), N the catalog size and
    rel the relevance of the item (``y >= relevance_threshold``). Unexpected items that are
    relevant score high; popular or irrelevant ones score 0.

    RecTools' conventions: divided by the list's length :math:`\min(k, |\hat R(u)|)`, not k; a user with an
    empty list is not counted; a user without a relevant item counts 0. Ge, Delgado-Battenfeld &
    Jannach (RecSys 2010) and Kotkov et al. define serendipity against a primitive recommender's
    lists instead (unexpected = not recommended by it); that definition needs a second model's
    lists and is not offered here. Elliot has no serendipity metric.

    Args:
        item_popularity: 1-D tensor, the training count of each item (RecTools counts
            interactions: a repeated (user, item) interaction counts again); its length is the
            catalog size N.
        relevance_threshold: an item is relevant when ``y >= relevance_threshold`` (RecTools:
            every test interaction is relevant).

    >>> import torch
    >>> from ignite_recsys import Serendipity
    >>> metric = Serendipity(top_k=2, item_popularity=torch.tensor([5, 3, 1]))
    >>> metric.update((torch.tensor([[0.1, 0.2, 0.9]]), torch.tensor([[0.0, 0.0, 1.0]])))
    >>> [round(v, 4) for v in metric.compute()]  # item 2: p = 3/3, p_u = (4 - 3)/3; mean over 2 slots
    [0.3333]
    """

    _parameter_constraints = {"item_popularity": V.ITEM_VECTOR, "relevance_threshold": V.positive_real()}

    entry = entry_of("serendipity")
    item_popularity: torch.Tensor
    relevance_threshold: float

    def _prepare(self) -> dict:
        popularity = self.item_popularity  # a float64 copy (ITEM_VECTOR)
        seen = popularity > 0
        distinct = torch.unique(popularity[seen])  # ascending
        dense_rank = distinct.numel() - torch.searchsorted(distinct, popularity)  # 1 = the largest count
        preference = (popularity.numel() + 1 - dense_rank.to(torch.float64)) / popularity.numel()
        return {"preference": torch.where(seen, preference, 0.0)}

    def _list_values(self, batch: RankingInput, order: torch.Tensor) -> tuple:
        num_items = self._catalog_size()
        listed = order >= 0
        relevant, _, checks = relevant_at(batch, order, self.relevance_threshold)
        popular = at_items(self._copies.get("preference", order.device), order)
        positions = torch.arange(1, order.shape[1] + 1, dtype=torch.float64, device=order.device)
        preferred = (num_items + 1 - positions) / num_items
        per_position = (preferred - popular).clamp(min=0.0) * relevant
        n = list_lengths(listed, self.top_k)
        values = at_cutoffs(per_position, self.top_k) / n.clamp(min=1)
        return values, listed[:, 0].to(torch.float64), checks
