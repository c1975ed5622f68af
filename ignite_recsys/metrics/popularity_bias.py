"""Popularity bias and exposure of the top-k lists.

Per-user means (per-user values, intervals, user groups): :class:`APLT`, :class:`ACLT` (Elliot's
long tail), :class:`MeanPopRank` (LensKit). Global over all lists, not means over users (no
per-user values): :class:`PopRSP`, :class:`PopREO` (two per-group sums), :class:`ExposureGini`
and :class:`ItemGroupExposure` (one rank-weighted exposure per catalog item, as
:class:`~ignite_recsys.GiniIndex` counts).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from ignite.exceptions import NotComputableError

from .. import _validation as V
from .._core.adapters import RankingInput
from ._engine import CutoffResults
from ._lists import (
    RANK_WEIGHT,
    ListMean,
    at_cutoffs,
    DeviceCopies,
    at_items,
    configure,
    declare_constructor,
    entry_of,
    history_sums,
    parse_catalog_lists,
    rank_weight_values,
    relevant_at,
    relevant_counts,
    top_items,
)
from ._state import BatchTotals, StatefulMetric
from .beyond_accuracy import CatalogCounts, gini_sums

_NOT_ACCEPTED = object()
POP_RATIO = V.Interval(float, 0, 1, low_included=False)


def elliot_short_head(popularity: torch.Tensor, pop_ratio: float) -> torch.Tensor:
    """(num_items,) bool, True for Elliot's short head: items by descending popularity (equal
    counts in item order) join it until their summed popularity reaches ``pop_ratio`` of the
    total (the item that reaches it included; the first item always)."""
    order = torch.sort(popularity, descending=True, stable=True).indices
    counts = popularity[order]
    before = counts.cumsum(0) - counts
    joins = (popularity.sum() * pop_ratio - before) > 0
    joins[0] = True
    head = torch.zeros(popularity.shape, dtype=torch.bool)
    head[order] = joins
    return head


class APLT(ListMean):
    r"""Average percentage of long-tail items (Abdollahpouri, Burke & Mobasher, "Controlling
    Popularity Bias in Learning-to-Rank Recommendation", RecSys 2017; Elliot ``APLT``), averaged
    over users:

    .. math:: \mathrm{APLT@k}(u) = \frac{|\hat R_k(u) \cap \Gamma|}{\min(k, |\hat R(u)|)}

    The long tail :math:`\Gamma` follows Elliot's rule: items in descending training popularity
    (equal counts in item order) form the short head until their counts reach ``pop_ratio`` of
    all training interactions (the item that reaches it included); every other item, unseen
    ones included, is long tail (:attr:`tail_items`). A user with an empty list is not counted
    (Elliot divides by zero). :class:`~ignite_recsys.TailPercentage` is the same ratio with
    RecBole's tail rule.

    Args:
        item_popularity: 1-D tensor, the distinct training users of each item (Elliot's
            popularity).
        pop_ratio: the short head's share of the training interactions, in (0, 1] (Elliot: 0.8).

    >>> import torch
    >>> from ignite_recsys import APLT
    >>> metric = APLT(top_k=2, item_popularity=torch.tensor([10, 5, 2, 1, 1]))  # tail: items 3 and 4
    >>> metric.update((torch.tensor([[0.9, 0.0, 0.0, 0.8, 0.0], [0.0, 0.0, 0.0, 0.9, 0.8]]), torch.zeros(2, 5)))
    >>> metric.compute()
    [0.75]
    """

    entry = entry_of("aplt")
    _parameter_constraints = {"item_popularity": V.ITEM_VECTOR, "pop_ratio": POP_RATIO}
    pop_ratio: float

    def _values_of_items(self, popularity: torch.Tensor) -> torch.Tensor:
        return (~elliot_short_head(popularity, self.pop_ratio)).to(torch.float64)

    @property
    def tail_items(self) -> torch.Tensor:
        """Ids of the long-tail items, ascending."""
        return torch.nonzero(self._item_values).flatten()


class ACLT(ListMean):
    r"""Average coverage of long-tail items (Abdollahpouri, Burke & Mobasher, "Managing Popularity
    Bias in Recommender Systems with Personalized Re-ranking", FLAIRS 2019; Elliot ``ACLT``): the
    number of long-tail items in each user's top k, averaged over users.

    .. math:: \mathrm{ACLT@k}(u) = |\hat R_k(u) \cap \Gamma|

    The long tail :math:`\Gamma` and the arguments as :class:`APLT`; a user with an empty list is
    not counted.

    >>> import torch
    >>> from ignite_recsys import ACLT
    >>> metric = ACLT(top_k=[1, 2], item_popularity=torch.tensor([10, 5, 2, 1, 1]))
    >>> metric.update((torch.tensor([[0.9, 0.0, 0.0, 0.8, 0.0], [0.0, 0.0, 0.0, 0.9, 0.8]]), torch.zeros(2, 5)))
    >>> metric.compute()
    [0.5, 1.5]
    """

    entry = entry_of("aclt")
    _parameter_constraints = APLT._parameter_constraints
    pop_ratio: float
    _values_of_items = APLT._values_of_items
    tail_items = APLT.tail_items

    def _list_values(self, batch: RankingInput, order: torch.Tensor) -> tuple:
        listed = order >= 0
        in_tail = at_items(self._copies.get("item_values", order.device), order) * listed
        return at_cutoffs(in_tail, self.top_k), listed[:, 0].to(torch.float64), {}


class MeanPopRank(ListMean):
    r"""Mean popularity rank of the recommended items (obscurity), LensKit ``MeanPopRank``
    (after Ekstrand & Mahant's obscurity and Vargas & Castells' popularity-based novelty),
    averaged over users:

    .. math:: \mathrm{MeanPopRank@k}(u) = \frac{1}{n} \sum_{i=1}^{n} q(\hat r_i),
              \qquad n = \min(k, |\hat R(u)|)

    :math:`q(j)` is the popularity rank of item j as a quantile among the items seen in
    training: its average rank by ascending count (equal counts share the mean of their ranks)
    divided by the number of seen items, so the most popular item has q = 1 and the least
    popular seen one 1/n_seen (LensKit's code; its docstring speaks of min-max scaling); an item
    never seen has q = 0. A user with an empty list is not counted (LensKit: NaN).

    Args:
        item_popularity: 1-D tensor, the training popularity of each item (LensKit's default
            ``count="users"``: distinct users; ``"interactions"``: interaction counts).

    >>> import torch
    >>> from ignite_recsys import MeanPopRank
    >>> metric = MeanPopRank(top_k=2, item_popularity=torch.tensor([5, 0, 1]))  # q = (1, 0, 1/2)
    >>> metric.update((torch.tensor([[0.9, 0.0, 0.8]]), torch.zeros(1, 3)))
    >>> metric.compute()
    [0.75]
    """

    entry = entry_of("mean_pop_rank")
    _parameter_constraints = {"item_popularity": V.ITEM_VECTOR}

    def _values_of_items(self, popularity: torch.Tensor) -> torch.Tensor:
        seen = popularity > 0
        ascending = popularity[seen].sort().values
        below = torch.searchsorted(ascending, popularity, right=False).to(torch.float64)
        equal = torch.searchsorted(ascending, popularity, right=True).to(torch.float64) - below
        quantile = (below + (equal + 1) / 2) / max(ascending.numel(), 1)
        return torch.where(seen, quantile, 0.0)


class _PopularityParity(CutoffResults, StatefulMetric):
    """Zhu et al.'s parity of the short head and the long tail: per group g, P(g) = (slots of
    g's items in the top-k lists that count) / (g's items that could count), summed over all
    users; the result is std(P) / mean(P) over the two groups (population std)."""

    optional_output_keys = ("exclude",)
    _parameter_constraints = {"top_k": V.TOP_K, "item_popularity": V.ITEM_VECTOR, "pop_ratio": POP_RATIO}

    item_popularity: torch.Tensor
    pop_ratio: float
    top_k: list
    _copies: DeviceCopies

    def _prepare(self) -> dict:
        """The state (per cut-off and group, and per group) and the groups of the catalog's items."""
        self.add_state("_hits", (len(self.top_k), 2))
        self.add_state("_available", (2,))
        head = elliot_short_head(self.item_popularity, self.pop_ratio)
        return {"groups": torch.stack([head, ~head], 1).to(torch.float64)}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        declare_constructor(cls, super(), kwargs)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(**configure(self, args, kwargs))

    def _parse(self, output: Any) -> RankingInput:
        return parse_catalog_lists(output, self.item_popularity.numel(), type(self).__name__, "item_popularity", False)

    def _batch_totals(self, batch: RankingInput) -> BatchTotals:
        order, invalid = top_items(batch, self.top_k)
        groups = self._copies.get("groups", order.device)
        counted, available, checks = self._counted_slots(batch, order, groups)
        per_position = (at_items(groups, order) * counted.unsqueeze(2)).sum(0, keepdim=True)  # (1, depth, 2)
        hits = at_cutoffs(per_position, self.top_k)[0]
        return BatchTotals({"_hits": hits, "_available": available}, {**invalid, **checks})

    def _counted_slots(self, batch: RankingInput, order: torch.Tensor, groups: torch.Tensor) -> tuple:
        """((batch, depth) float64: which listed slots count; (2,) the batch's items that could
        count, per group; value checks)."""
        raise NotImplementedError

    def compute(self) -> list:
        hits, available = self._checked("_hits", "_available")
        if float(available.sum()) == 0:
            raise NotComputableError(f"{type(self).__name__} must have at least one {self._counted} before compute().")
        share = hits / available  # NaN for a group with nothing available
        mean = share.mean(1)
        # both groups at 0 (no hit in either): no disparity, 0 (std / mean would be 0 / 0, Elliot's NaN)
        return torch.where(mean == 0, 0.0, share.std(1, correction=0) / mean).tolist()


class PopRSP(_PopularityParity):
    r"""Popularity-based ranking-based statistical parity (Zhu, Wang & Caverlee, "Measuring and
    Mitigating Item Under-Recommendation Bias in Personalized Ranking Systems", SIGIR 2020;
    Elliot ``PopRSP``), over all users' lists (not a mean over users):

    .. math:: P(g) = \frac{\sum_u |\hat R_k(u) \cap g|}{\sum_u |g \setminus H_u|},\qquad
              \mathrm{PopRSP@k} = \frac{\mathrm{std}(P(\text{head}), P(\text{tail}))}
              {\mathrm{mean}(P(\text{head}), P(\text{tail}))}

    (population std: :math:`|P_h - P_t| / (P_h + P_t)`), 0 when both groups are recommended in
    proportion to the items each user could get, both at 0 included (where Elliot's 0 / 0 gives
    NaN). Head and tail follow Elliot's rule
    (:class:`APLT`). :math:`H_u` is the user's training history: the ``exclude`` entry of the
    update (without one, every item is available to every user). Every user counts, one with an
    empty list adds only to the denominators. ``compute()`` returns a list in ascending k order;
    NaN for a group with no available item.

    >>> import torch
    >>> from ignite_recsys import PopRSP
    >>> metric = PopRSP(top_k=2, item_popularity=torch.tensor([10, 5, 2, 1, 1]))  # head {0, 1, 2}
    >>> metric.update((torch.tensor([[0.9, 0.0, 0.0, 0.8, 0.0]]), torch.zeros(1, 5)))
    >>> [round(v, 4) for v in metric.compute()]  # P = (1/3, 1/2)
    [0.2]
    """

    entry = entry_of("pop_rsp")
    _counted = "user"

    def _counted_slots(self, batch: RankingInput, order: torch.Tensor, groups: torch.Tensor) -> tuple:
        history, _ = history_sums(batch, groups)
        available = batch.num_users * groups.sum(0) - history.sum(0)
        return (order >= 0).to(torch.float64), available, {}


class PopREO(_PopularityParity):
    r"""Popularity-based ranking-based equal opportunity (Zhu, Wang & Caverlee, SIGIR 2020; Elliot
    ``PopREO``), over all users' lists (not a mean over users):

    .. math:: P(g) = \frac{\sum_u |\hat R_k(u) \cap R_u \cap g|}{\sum_u |(R_u \cap g) \setminus H_u|},
              \qquad \mathrm{PopREO@k} = \frac{\mathrm{std}(P(\text{head}), P(\text{tail}))}
              {\mathrm{mean}(P(\text{head}), P(\text{tail}))}

    with :math:`R_u` the user's relevant items (``y >= relevance_threshold``) and :math:`H_u` its
    training history, the ``exclude`` entry of the update: P(g) is the recall of g's relevant
    items. Users without a relevant item add nothing (Elliot skips them). Head and tail follow
    Elliot's rule (:class:`APLT`). NaN for a group without a relevant item; 0 when both groups'
    recall is 0 (no disparity; Elliot's 0 / 0 gives NaN).

    >>> import torch
    >>> from ignite_recsys import PopREO
    >>> metric = PopREO(top_k=2, item_popularity=torch.tensor([10, 5, 2, 1, 1]))
    >>> relevance = torch.tensor([[1.0, 1.0, 0.0, 1.0, 0.0]])  # head {0, 1}, tail {3} relevant
    >>> metric.update((torch.tensor([[0.9, 0.0, 0.0, 0.8, 0.0]]), relevance))
    >>> [round(v, 4) for v in metric.compute()]  # P = (1/2, 1/1)
    [0.3333]
    """

    entry = entry_of("pop_reo")
    _counted = "relevant item"
    _parameter_constraints = {"relevance_threshold": V.positive_real()}
    relevance_threshold: float

    def _counted_slots(self, batch: RankingInput, order: torch.Tensor, groups: torch.Tensor) -> tuple:
        relevant, _, checks = relevant_at(batch, order, self.relevance_threshold)
        return relevant, relevant_counts(batch, self.relevance_threshold, groups).sum(0), checks


class ExposureGini(CatalogCounts):
    r"""Gini index of the items' rank-weighted exposure over all top-k lists, LensKit
    ``ExposureGini`` (0: every catalog item equally exposed; higher: more concentrated).

    .. math:: e_j = \sum_u \sum_{i \le k} w(i)\, [\hat r_{u,i} = j],\qquad
              \mathrm{ExposureGini@k} = \frac{\sum_{j=1}^{n} (2j - n - 1)\, e_{(j)}}{n \sum_j e_{(j)}}

    over all n catalog items (:math:`e_{(1)} \le \dots \le e_{(n)}`, 0 for items never shown),
    w the rank weight, LensKit's default ``GeometricRankWeight(0.85)``: :math:`0.85^{i-1}`.
    ``rank_weight=None`` counts every slot 1: LensKit ``ListGini``, which is
    :class:`~ignite_recsys.GiniIndex` (RecBole's convention) as well. LensKit sums the exposure
    in float32; here in float64.

    Args:
        rank_weight: ``("geometric", p)`` (default p = 0.85), ``"log2"``, ``"log2_clip"``
            (LensKit's ``LogRankWeight()``), None, or a callable of the ranks.
        num_items: the catalog size (needed with :class:`~ignite_recsys.RankedItems`
            predictions; otherwise taken from the first batch).

    >>> import torch
    >>> from ignite_recsys import ExposureGini
    >>> metric = ExposureGini(top_k=2)
    >>> metric.update((torch.tensor([[5.0, 4, 0, 0, 0], [5, 0, 4, 0, 0], [5, 4, 0, 0, 0]]), torch.zeros(3, 5)))
    >>> [round(v, 4) for v in metric.compute()]
    [0.555]
    """

    entry = entry_of("exposure_gini")
    _parameter_constraints = {"rank_weight": RANK_WEIGHT}

    def _prepare(self) -> dict:
        return {"weights": rank_weight_values("rank_weight", self.rank_weight, self.top_k[-1])}

    def _from_counts(self, counts: torch.Tensor) -> torch.Tensor:
        weighted, total = gini_sums(counts)
        return (weighted / (counts.shape[1] * total)).clamp(min=0.0)


def _check_item_groups(name: str, value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a 1-D torch.Tensor of group ids, one per item, got {type(value).__name__}")
    if value.ndim != 1 or value.numel() == 0:
        raise ValueError(
            f"{name} must be a non-empty 1-D tensor (one group id per item), got shape {tuple(value.shape)}"
        )
    if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer group ids, got dtype {value.dtype}")
    ids = value.detach().to("cpu", torch.int64).clone()
    if bool((ids < 0).any()):
        raise ValueError(f"{name} must hold group ids >= 0, got {int(ids.min())}")
    return ids


def _check_num_item_groups(name: str, value: Any, arguments: dict) -> Optional[int]:
    groups = arguments.get("item_groups")
    if value is None:
        return None
    value = V.check_positive_int(name, value)
    if isinstance(groups, torch.Tensor) and int(groups.max()) >= value:
        raise ValueError(f"{name}={value}: item_groups holds the group id {int(groups.max())}, outside [0, {value})")
    return value


class ItemGroupExposure(CatalogCounts):
    r"""The share of the top-k slots of all users' lists taken by each group of items (a provider,
    a category, popular and niche items, ...), optionally rank-weighted: the exposure of item
    groups (Singh & Joachims, "Fairness of Exposure in Rankings", KDD 2018, with position-based
    exposure).

    .. math:: \mathrm{share@k}(g) = \frac{\sum_u \sum_{i \le k} w(i)\, [\hat r_{u,i} \in g]}
              {\sum_u \sum_{i \le k} w(i)\, [\text{position } i \text{ holds an item}]}

    Global over all lists (not a mean over users). ``compute()`` returns, in ascending k order, a
    list of the groups' shares (summing to 1); attached to an Engine as ``name``, each share is
    also a scalar ``"<name>@<k>/item_group<g>"``.

    Args:
        item_groups: 1-D integer tensor, the group id (>= 0) of each item; its length is the
            catalog size.
        num_item_groups: the number of groups (default: the largest id + 1).
        rank_weight: None (default: every slot 1, the share of slots), ``"log2"``
            (:math:`1/\log_2(i+1)`, as the exposure of Singh & Joachims), ``"log2_clip"``,
            ``("geometric", p)`` or a callable of the ranks.

    >>> import torch
    >>> from ignite_recsys import ItemGroupExposure
    >>> metric = ItemGroupExposure(top_k=2, item_groups=torch.tensor([0, 1, 1]))
    >>> metric.update((torch.tensor([[0.9, 0.8, 0.0], [0.0, 0.9, 0.8]]), torch.zeros(2, 3)))
    >>> metric.compute()
    [[0.25, 0.75]]
    """

    _parameter_constraints = {
        "item_groups": V.Custom(
            "a non-empty 1-D tensor of integer group ids >= 0, one per item",
            lambda name, value, arguments: _check_item_groups(name, value),
            (
                torch.tensor([0.5]),
                torch.tensor([-1]),
                torch.zeros(2, 2, dtype=torch.int64),
                [0, 1],
                None,
                _NOT_ACCEPTED,
            ),
        ),
        "num_item_groups": V.Custom(
            "a positive int above every id of item_groups, or None",
            _check_num_item_groups,
            (0, 1.5, "2", 1, _NOT_ACCEPTED),
        ),
        "rank_weight": RANK_WEIGHT,
    }

    entry = entry_of("item_group_exposure")
    item_groups: torch.Tensor
    num_item_groups: int

    def _prepare(self) -> dict:
        self.num_items = self.item_groups.numel()
        if self.num_item_groups is None:
            self.num_item_groups = int(self.item_groups.max()) + 1
        weights = rank_weight_values("rank_weight", self.rank_weight, self.top_k[-1])
        return {"weights": weights, "groups": self.item_groups}

    def _from_counts(self, counts: torch.Tensor) -> torch.Tensor:
        groups = self._copies.get("groups", counts.device)
        per_group = torch.zeros(counts.shape[0], self.num_item_groups, dtype=torch.float64, device=counts.device)
        per_group.index_add_(1, groups, counts)
        return per_group / counts.sum(1, keepdim=True)

    def _scalar_keys(self, name: str) -> list:
        return [f"{name}@{k}/item_group{g}" for k in self.top_k for g in range(self.num_item_groups)]

    def _scalar_items(self, name: str, result: Any) -> list:
        return list(zip(self._scalar_keys(name), [share for shares in result for share in shares]))
