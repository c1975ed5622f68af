"""Beyond-accuracy metrics of the top-k lists: catalog coverage, concentration, popularity.

They read only the top-k item ids of each user, selected by the shared ranking step (score
descending, ties by lower item index, as every ranking metric here). ``y`` is accepted so that
every metric takes the same ``(y_pred, y)`` input; only its shape is checked. A cut-off k larger
than the catalog gives lists of all ``num_items`` items.

Catalog-level metrics (:class:`ItemCoverage`, :class:`GiniIndex`, :class:`ShannonEntropy`) keep
one count per catalog item and cut-off, summed across processes. Popularity-aware metrics
(:class:`AveragePopularity`, :class:`TailPercentage`, :class:`Novelty`) are means over users of a
per-item value averaged over the list, with O(len(top_k)) state.

Where libraries disagree, ``convention`` picks the definition; the default is RecBole's:

============== ============================== =====================================
metric          ``"recbole"`` (default)        alternative
============== ============================== =====================================
ItemCoverage    distinct / num_items (0.6)     ``"elliot"``: distinct count (3)
GiniIndex       concentration, ÷ n (0.5333)    ``"elliot"``: 1 - Gini, ÷ (n - 1) (0.3333)
ShannonEntropy  ln, ÷ #distinct items (0.3371) ``"log2"``: log2 entropy (1.4591; Elliot,
                                               Recommenders ``distributional_coverage``)
============== ============================== =====================================

(numbers: top-2 lists [0, 1], [0, 2], [0, 1] over 5 items, the case of the conventions page.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Optional, cast

import ignite.distributed as idist
import torch
from ignite.exceptions import NotComputableError

from .. import _validation as V
from .._core.adapters import RankingInput
from .._core.tuning import device_constant
from ._engine import CutoffResults
from ._lists import (
    DeviceCopies,
    ListMean,
    configure,
    declare_constructor,
    entry_of,
    parse_lists,
    self_information,
    top_items,
)
from ._state import _PER_RANK, BatchTotals, StatefulMetric, raise_for_invalid_updates


class CatalogCounts(CutoffResults, StatefulMetric):
    """How often each catalog item appears in the top-k lists, per cut-off: a (len(top_k),
    num_items) float64 state (exact integer counts, or summed rank weights ``rank_weight``),
    taken from the first batch unless ``num_items`` is given, and summed across processes.
    A subclass declares its registry ``entry`` and turns the counts into values (``_from_counts``)."""

    optional_output_keys = ("exclude",)  # a dict output {"y_pred", "y", "exclude"} passes its exclusion
    _parameter_constraints = {"top_k": V.TOP_K, "num_items": V.catalog_size(optional=True)}
    _checked_by_shape = ("num_items",)  # a state whose size came from the batches loads under a given size
    _counts: torch.Tensor
    top_k: list
    num_items: Optional[int] = None
    rank_weight: Any = None  # every slot counts 1
    convention: str
    _copies: DeviceCopies

    def __init_subclass__(cls, **kwargs: Any) -> None:
        declare_constructor(cls, super(), kwargs)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        machinery = configure(self, args, kwargs)
        self._buckets_by_depth: dict = {}
        # 0 items until the first batch fixes the catalog size; a saved state of any size loads
        # when num_items is not given
        self.add_state(
            "_counts",
            lambda: (len(self.top_k), self.num_items or 0),
            load_shape=lambda: (len(self.top_k), self.num_items),
        )
        super().__init__(**machinery)

    def _prepare(self) -> dict:
        """The tensors (CPU) that updates look up on the inputs' device."""
        return {}

    def load_state_dict(self, state_dict: Any) -> None:
        super().load_state_dict(self._sized(state_dict))

    def _sized(self, state_dict: Any) -> Any:
        """A state saved before any batch fixed its catalog size ((len(top_k), 0) counts: nothing
        counted) as zero counts of the size this metric is given, which it then loads under."""
        per_rank = state_dict.get(_PER_RANK) if isinstance(state_dict, Mapping) else None
        size = self.num_items
        if size is None or not isinstance(per_rank, (list, tuple)):
            return state_dict

        def sized(entry: Any) -> Any:
            counts = entry.get("_counts") if isinstance(entry, Mapping) else None
            if isinstance(counts, torch.Tensor) and counts.dim() == 2 and counts.shape[1] == 0:
                return {**entry, "_counts": counts.new_zeros(counts.shape[0], size)}
            return entry

        return {**state_dict, _PER_RANK: [sized(entry) for entry in per_rank]}

    def _parse(self, output: Any) -> RankingInput:
        expected = self._counts.shape[1] or self.num_items
        batch = parse_lists(output, expected, type(self).__name__)
        if expected and batch.num_items != expected:
            source = "given" if self.num_items else "taken from the first batch"
            raise ValueError(f"y_pred must have num_items={expected} columns ({source}), got {batch.num_items}")
        return batch

    def _batch_totals(self, batch: RankingInput) -> BatchTotals:
        """The batch's slots as (flat index into the counts, weight of the slot): added in place
        by :meth:`_add`, not through a (len(top_k), num_items) total of the batch. Cumulative sums
        over the buckets in compute give the counts at each k; only listed candidates count (-1
        marks a position past a user's candidates)."""
        num_items = cast(int, batch.num_items)  # set by _parse
        order, invalid = top_items(batch, self.top_k)
        bucket = self._bucket_of_position(order.shape[1], order.device)
        slots = ((order >= 0) & (order < num_items)).to(torch.float64)
        if self.rank_weight is not None:  # each slot counts its rank's weight
            slots = slots * self._copies.get("weights", order.device)[: order.shape[1]]
        flat_index = (bucket * num_items + order.clamp(min=0, max=num_items - 1)).flatten()
        return BatchTotals({"_counts": (flat_index, slots.flatten(), num_items)}, invalid)

    def _add(self, sums: dict, bad: Optional[torch.Tensor]) -> None:
        index, slots, num_items = sums.pop("_counts")
        if self._counts.shape[1] == 0:  # the catalog from the first batch added (a refused one fixes nothing)
            self._counts = torch.zeros(len(self.top_k), num_items, dtype=torch.float64, device=self._device)
        if bad is not None:
            slots = torch.where(bad, 0.0, slots)
        self._counts.view(-1).index_add_(0, index.to(self._device), slots.to(self._device))
        if bad is not None:  # the count of bad batches
            super()._add(sums, bad)

    def _bucket_of_position(self, depth: int, device: torch.device) -> torch.Tensor:
        """(depth,) int64: list position p (0-based) counts towards every k > p and is added to the
        first such k, bucket #{k <= p}. Made once per (depth, device); depth = min(max k, num_items)."""
        key = (depth, device)
        if key not in self._buckets_by_depth:
            positions = torch.arange(depth, dtype=torch.int64, device=device)
            cutoffs = device_constant(self.top_k, torch.int64, device)
            self._buckets_by_depth[key] = torch.searchsorted(cutoffs, positions, right=True)
        return self._buckets_by_depth[key]

    def compute(self) -> list:
        counts, num_invalid = self._synced_state()
        raise_for_invalid_updates(self, num_invalid)
        if counts.shape[1] == 0 or counts.sum() == 0:
            raise NotComputableError(
                f"{type(self).__name__} must have at least one user with an item in its top-k list before compute(): "
                "it had no update, or every list it was given was empty"
            )
        return self._from_counts(counts.cumsum(0)).tolist()

    def _synced_state(self) -> tuple:
        """The counts summed over processes (copies: the local state never changes). A process
        that saw no batch contributes zeros of the common catalog size; different sizes raise the
        same ValueError on every process."""
        if idist.get_world_size() == 1:
            return self._counts, self._num_invalid_updates
        width = self._counts.shape[1]
        # one MIN over (smallest size, -largest size); a process without a batch has no size yet
        bounds = torch.tensor([width or math.inf, -width], dtype=torch.float64)
        reduced = torch.as_tensor(idist.all_reduce(bounds, op="MIN")).tolist()
        smallest, largest = (int(v) if math.isfinite(v) else 0 for v in reduced)
        largest = -largest
        if smallest and smallest != largest:
            raise ValueError(
                f"{type(self).__name__}: processes saw different catalog sizes (from {smallest} to {largest} "
                "items); pass num_items, and give every process rows of all num_items items"
            )
        counts = self._counts
        if width == 0:
            counts = torch.zeros(len(self.top_k), largest, dtype=torch.float64, device=self._device)
        return idist.all_reduce(counts.clone()), idist.all_reduce(self._num_invalid_updates.clone())

    def _from_counts(self, counts: torch.Tensor) -> torch.Tensor:
        """(len(top_k),) values from the (len(top_k), num_items) counts at each cut-off."""
        raise NotImplementedError


def gini_sums(counts: torch.Tensor) -> tuple:
    r"""The Gini index of each row of ``counts`` (rows, n) is :math:`\sum_i (2i - n - 1) c_{(i)}
    / (n \sum_i c_{(i)})` over the row sorted ascending: ((rows,) the numerator's sum, (rows,)
    :math:`\sum_i c_{(i)}`)."""
    n = counts.shape[1]
    ascending = counts.sort(1).values
    weights = 2 * torch.arange(1, n + 1, dtype=torch.float64, device=counts.device) - n - 1
    return (weights * ascending).sum(1), ascending.sum(1)


class ItemCoverage(CatalogCounts):
    r"""Catalog coverage at k: the items that appear in at least one user's top-k list.

    .. math:: \mathrm{Coverage@k} = \frac{|\bigcup_{u \in U} \hat R_k(u)|}{|I|}

    ``convention="recbole"`` (default) returns the fraction, as RecBole ``ItemCoverage``,
    RecPack ``CoverageK`` and Recommenders ``catalog_coverage`` (when every item is in the
    training data); ``"elliot"`` returns the count :math:`|\bigcup_u \hat R_k(u)|`. RecBole's own
    runs divide by ``item_num``, which counts its [PAD] item: pass ``num_items=n + 1`` to
    reproduce those numbers.

    ``compute()`` returns a list in ascending k order whatever the order of ``top_k``, as ignite:
    ``ItemCoverage(top_k=[3, 1]).compute()`` is ``[ItemCoverage@1, ItemCoverage@3]``;
    ``compute_dict()`` labels the values: ``{"item_coverage@1": ..., "item_coverage@3": ...}``.

    >>> import torch
    >>> from ignite_recsys import ItemCoverage
    >>> metric = ItemCoverage(top_k=[1, 2])
    >>> metric.update((torch.tensor([[5.0, 4, 0, 0, 0], [5, 0, 4, 0, 0], [5, 4, 0, 0, 0]]), torch.zeros(3, 5)))
    >>> metric.compute()
    [0.2, 0.6]
    >>> metric.compute_dict()
    {'item_coverage@1': 0.2, 'item_coverage@2': 0.6}
    """

    entry = entry_of("item_coverage")
    _parameter_constraints = {"convention": V.Options(("recbole", "elliot"))}

    def _from_counts(self, counts: torch.Tensor) -> torch.Tensor:
        distinct = (counts > 0).sum(1, dtype=torch.float64)
        return distinct / counts.shape[1] if self.convention == "recbole" else distinct


class GiniIndex(CatalogCounts):
    r"""Gini index of how often items are recommended (0: every item equally often).

    .. math:: \mathrm{Gini@k} = \frac{\sum_{i=1}^{n} (2i - n - 1)\, c_{(i)}}{n \sum_{i=1}^{n} c_{(i)}}

    with :math:`c_{(1)} \le \dots \le c_{(n)}` the top-k counts of all n catalog items (0 for
    items never recommended). ``convention="recbole"`` (default) is RecBole's ``GiniIndex``
    (higher = more concentrated); ``"elliot"`` is Elliot's
    :math:`1 - \sum_i (2i-n-1) c_{(i)} / ((n-1) \sum_i c_{(i)})` (higher = more diverse).

    ``compute()`` returns a list in ascending k order whatever the order of ``top_k``, as ignite:
    ``GiniIndex(top_k=[3, 1]).compute()`` is ``[GiniIndex@1, GiniIndex@3]``; ``compute_dict()``
    labels the values: ``{"gini_index@1": ..., "gini_index@3": ...}``.

    >>> import torch
    >>> from ignite_recsys import GiniIndex
    >>> metric = GiniIndex(top_k=2)
    >>> metric.update((torch.tensor([[5.0, 4, 0, 0, 0], [5, 0, 4, 0, 0], [5, 4, 0, 0, 0]]), torch.zeros(3, 5)))
    >>> [round(v, 4) for v in metric.compute()]
    [0.5333]
    """

    entry = entry_of("gini_index")
    _parameter_constraints = {"convention": V.Options(("recbole", "elliot"))}

    def _from_counts(self, counts: torch.Tensor) -> torch.Tensor:
        n = counts.shape[1]
        weighted, total = gini_sums(counts)
        concentration = weighted / total
        if self.convention == "recbole":
            return concentration / n
        return 1 - concentration / max(n - 1, 1)


class ShannonEntropy(CatalogCounts):
    r"""Entropy of the distribution of recommended items over all top-k lists.

    .. math:: H@k = -\sum_{i} p(i) \log p(i), \qquad p(i) = \frac{c_i}{\sum_j c_j}

    ``convention="recbole"`` (default) is RecBole's ``ShannonEntropy``: natural log, and the sum
    divided by the number of distinct recommended items (as its code does, unlike its docstring).
    ``"log2"`` is the plain base-2 entropy (Elliot ``ShannonEntropy`` for equal-length lists,
    Recommenders ``distributional_coverage``).

    ``compute()`` returns a list in ascending k order whatever the order of ``top_k``, as ignite:
    ``ShannonEntropy(top_k=[3, 1]).compute()`` is ``[ShannonEntropy@1, ShannonEntropy@3]``;
    ``compute_dict()`` labels the values: ``{"shannon_entropy@1": ..., "shannon_entropy@3": ...}``.

    >>> import torch
    >>> from ignite_recsys import ShannonEntropy
    >>> scores = torch.tensor([[5.0, 4, 0, 0, 0], [5, 0, 4, 0, 0], [5, 4, 0, 0, 0]])
    >>> metric = ShannonEntropy(top_k=2)
    >>> metric.update((scores, torch.zeros(3, 5)))
    >>> [round(v, 4) for v in metric.compute()]
    [0.3371]
    >>> metric = ShannonEntropy(top_k=2, convention="log2")
    >>> metric.update((scores, torch.zeros(3, 5)))
    >>> [round(v, 4) for v in metric.compute()]
    [1.4591]
    """

    entry = entry_of("shannon_entropy")
    _parameter_constraints = {"convention": V.Options(("recbole", "log2"))}

    def _from_counts(self, counts: torch.Tensor) -> torch.Tensor:
        share = counts / counts.sum(1, keepdim=True)
        terms = torch.where(counts > 0, -share * torch.log(share.clamp(min=1e-300)), torch.zeros_like(share))
        entropy = terms.sum(1)
        if self.convention == "recbole":
            return entropy / (counts > 0).sum(1, dtype=torch.float64)
        return entropy / math.log(2)


class AveragePopularity(ListMean):
    r"""Average training popularity of the recommended items (RecBole ``AveragePopularity``,
    Elliot ``ARP`` when popularity counts distinct users).

    .. math:: \mathrm{AvgPop@k} = \frac{1}{|U|} \sum_{u} \frac{1}{|\hat R_k(u)|} \sum_{i \in \hat R_k(u)} \phi(i)

    Args:
        item_popularity: 1-D tensor, :math:`\phi(i)` = training interaction count of each item.

    ``compute()`` returns a list in ascending k order whatever the order of ``top_k``, as ignite:
    ``AveragePopularity(top_k=[3, 1]).compute()`` is
    ``[AveragePopularity@1, AveragePopularity@3]``; ``compute_dict()`` labels the values:
    ``{"average_popularity@1": ..., "average_popularity@3": ...}``.

    >>> import torch
    >>> from ignite_recsys import AveragePopularity
    >>> metric = AveragePopularity(top_k=2, item_popularity=torch.tensor([10, 5, 2, 1, 1]))
    >>> metric.update((torch.tensor([[5.0, 4, 0, 0, 0], [5, 0, 4, 0, 0], [5, 4, 0, 0, 0]]), torch.zeros(3, 5)))
    >>> metric.compute()
    [7.0]
    """

    entry = entry_of("average_popularity")
    _parameter_constraints = {"item_popularity": V.ITEM_VECTOR}

    def _values_of_items(self, popularity: torch.Tensor) -> torch.Tensor:
        return popularity


class TailPercentage(ListMean):
    r"""Share of long-tail items in the top-k lists, averaged over users (RecBole ``TailPercentage``).

    .. math:: \mathrm{Tail@k} = \frac{1}{|U|} \sum_{u} \frac{|\hat R_k(u) \cap T|}{|\hat R_k(u)|}

    The tail T follows RecBole's ``tail_ratio`` rule over the items seen in training (count > 0):
    if ``tail_ratio > 1``, the items with count <= tail_ratio; otherwise the
    ``max(floor(n_seen * tail_ratio), 1)`` items with the lowest (count, item id). As in RecBole,
    items never seen in training are not tail items unless ``unseen_items_are_tail=True``.

    ``compute()`` returns a list in ascending k order whatever the order of ``top_k``, as ignite:
    ``TailPercentage(top_k=[3, 1]).compute()`` is ``[TailPercentage@1, TailPercentage@3]``;
    ``compute_dict()`` labels the values: ``{"tail_percentage@1": ..., "tail_percentage@3": ...}``.

    >>> import torch
    >>> from ignite_recsys import TailPercentage
    >>> popularity = torch.tensor([10, 5, 2, 1, 1])
    >>> metric = TailPercentage(top_k=2, item_popularity=popularity, tail_ratio=0.6)
    >>> metric.update((torch.tensor([[5.0, 4, 0, 0, 0], [5, 0, 4, 0, 0], [5, 4, 0, 0, 0]]), torch.zeros(3, 5)))
    >>> [round(v, 4) for v in metric.compute()]
    [0.1667]
    """

    entry = entry_of("tail_percentage")
    _parameter_constraints = {
        "item_popularity": V.ITEM_VECTOR,
        "tail_ratio": V.positive_real(),
        "unseen_items_are_tail": V.BOOLEAN,
    }
    tail_ratio: float
    unseen_items_are_tail: bool

    def _values_of_items(self, popularity: torch.Tensor) -> torch.Tensor:
        seen = popularity > 0
        if self.tail_ratio > 1:
            tail = seen & (popularity <= self.tail_ratio)
        else:
            num_tail = max(int(int(seen.sum()) * self.tail_ratio), 1)
            # lowest (count, item id) first; unseen items sort last
            ascending = torch.sort(torch.where(seen, popularity, math.inf), stable=True).indices
            tail = torch.zeros_like(seen)
            tail[ascending[:num_tail]] = True
            tail &= seen
        if self.unseen_items_are_tail:
            tail |= ~seen
        return tail.to(torch.float64)

    @property
    def tail_items(self) -> torch.Tensor:
        """Ids of the tail items, ascending."""
        return torch.nonzero(self._item_values).flatten()


class Novelty(ListMean):
    r"""Mean self-information of the recommended items (Recommenders ``novelty``).

    .. math:: \mathrm{Novelty@k} = \frac{1}{|U|} \sum_{u} \frac{1}{|\hat R_k(u)|}
              \sum_{i \in \hat R_k(u)} -\log_2 \frac{\phi(i)}{\sum_j \phi(j)}

    With equal-length lists this is Recommenders' mean over all recommended (user, item) pairs.
    An item never seen in training (count 0) has infinite self-information; ``unseen_items``
    says what to do with it:

    - ``"rarest_seen"`` (default): an unseen item gets the self-information of the least popular
      seen item, :math:`-\log_2(\min_{\phi(j) > 0} \phi(j) / \sum_j \phi(j))`, the total
      unchanged (Elliot's rule for unseen items in ``EFD``). Real catalogs hold items never seen
      in training; without them the value is Recommenders' ``novelty``.
    - ``"error"``: refuse such an ``item_popularity`` (``ValueError``), e.g. to add a pseudo-count
      yourself (``item_popularity + 1``).

    Args:
        item_popularity: 1-D tensor, :math:`\phi(i)` = training interaction count of each item
            (non-negative; copied).

    ``compute()`` returns a list in ascending k order whatever the order of ``top_k``, as ignite:
    ``Novelty(top_k=[3, 1]).compute()`` is ``[Novelty@1, Novelty@3]``; ``compute_dict()`` labels
    the values: ``{"novelty@1": ..., "novelty@3": ...}``.

    >>> import torch
    >>> from ignite_recsys import Novelty
    >>> metric = Novelty(top_k=2, item_popularity=torch.tensor([10, 5, 2, 1, 1]))
    >>> metric.update((torch.tensor([[5.0, 4, 0, 0, 0], [5, 0, 4, 0, 0], [5, 4, 0, 0, 0]]), torch.zeros(3, 5)))
    >>> [round(v, 4) for v in metric.compute()]
    [1.6463]
    >>> metric = Novelty(top_k=2, item_popularity=torch.tensor([10, 5, 0, 1, 1]), unseen_items="rarest_seen")
    >>> metric.update((torch.tensor([[5.0, 0, 4, 0, 0]]), torch.zeros(1, 5)))
    >>> [round(v, 4) for v in metric.compute()]
    [2.4265]
    """

    entry = entry_of("novelty")
    _parameter_constraints = {"item_popularity": V.ITEM_VECTOR, "unseen_items": V.Options(("error", "rarest_seen"))}
    unseen_items: str

    def _values_of_items(self, popularity: torch.Tensor) -> torch.Tensor:
        if self.unseen_items == "error" and bool((popularity > 0).any()) and not bool((popularity > 0).all()):
            raise ValueError(
                "item_popularity must be positive for Novelty (an item with count 0 has infinite "
                'self-information); pass unseen_items="rarest_seen" or add a pseudo-count, e.g. '
                "item_popularity + 1"
            )
        return self_information(popularity, "Novelty")
