"""The one shared ranking step: any :class:`~ignite_recsys._core.adapters.RankingInput` becomes one
:class:`RankedBatch`, the per-position quantities of each user's top ``depth`` candidates
(relevance indicator, gain, and what MAP / MRR / HitRate need) plus the per-user relevant count
and the ideal gains. Every ranking metric reduces from it (per-user formulas in
:mod:`.formulas`, reductions in :mod:`ignite_recsys.metrics._users`).

Only candidates are ranked: with ``exclude`` an excluded item takes no position, and positions
past a user's candidates are empty (no hit, no gain; Precision still divides by k). The relevant
count |R| and the ideal ranking count every relevant item, excluded or not (RecBole's behaviour
with history masking), so ``RankedItems(ids)`` scores exactly as its list would with every other
item excluded. Selection goes through :mod:`.selection`, ties through :mod:`.ties`, labels
through :mod:`.relevance`.

A :class:`RankingRequest` says what to compute while the batch is read; every field of the
:class:`RankedBatch` is there whatever it says: what the request did not ask for is derived from
the batch's :class:`Ranking` on first use and kept (a request changes the speed, never a value).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional

import torch

from .._validation import GainFunction
from . import tuning
from .adapters import RankingInput
from .full_rows import hits_at_own_depth, own_depth
from .item_sets import ITEM_BITS, ItemTable, distinct_in_rows, first_in_rows, listed_of_mask, sort_id_rows
from .relevance import (
    custom_ideal_gains,
    LabelPass,
    RankingHints,
    Relevance,
    TopLabels,
    any_nan,
    binary_ideal_gains,
    count_nonnegative,
    count_true,
    full_row_checks,
    gain_flags,
    gains,
    ideal_is_binary,
    ideal_needs_selection,
    invalid_flags,
    pass_groups,
    relevant_counts,
    relevance_pass,
    selected_ideal_gains,
)
from .selection import (
    listed_bound,
    stable_topk,
    stable_topk_and_values,
    stable_topk_excluding,
    stable_topk_excluding_listed,
    untied_topk,
)
from .vectors import vector_boundary_ties, vector_candidates, vector_group_totals, vector_top_scores
from .ties import (
    boundary_ties,
    last_group_totals,
    rows_to_read,
    stable_positions,
    tie_continues,
    tie_expectations,
)

# (hit, [the gain of each gain function], hit x hits so far, first hit), each (batch, depth) float64
Positions = tuple[torch.Tensor, list[torch.Tensor], torch.Tensor, torch.Tensor]
# (boundary scores (batch, 1), rows to read, gain functions) -> (count, relevant count, [total gains])
GroupTotals = Callable[[torch.Tensor, Optional[torch.Tensor], tuple], tuple]

_NAN_SCORES = "y_pred contains NaN scores (+inf and -inf are allowed)"
_ITEM_MASK = (1 << ITEM_BITS) - 1


@dataclass(frozen=True)
class RankingRequest:
    """What the metrics of one update need from the ranking step: the top ``depth`` positions, the
    relevance rule, the tie rule, the gains (``gain_function``; None: none needed), the ideal
    ranking's gains (``ideal``) and |R| itself (``count_relevant``; else only whether |R| > 0)."""

    depth: int
    relevance_threshold: Optional[float]
    ties: str = "stable"
    gain_function: Optional[GainFunction] = None
    ideal: bool = False
    count_relevant: bool = True
    extra_gains: tuple = ()  # further gain functions whose per-position gains are asked for
    # which items are judged (bpref): None (not asked), "nonnegative" (labels >= 0; negative labels
    # are unjudged, as trec_eval) or "all" (every stored label, negative ones included, as ranx);
    # the formula derives them (``RankedBatch.judged``), the label pass then counts |R|
    judged: Optional[str] = None
    relevant_candidates: bool = False  # |R| among the candidates (fall-out's denominator)

    @property
    def counts_relevant(self) -> bool:
        """Whether |R| itself is needed: asked for, or for fall-out's or bpref's counts."""
        return self.count_relevant or self.relevant_candidates or self.judged is not None

    @property
    def gain_functions(self) -> tuple:
        """Every gain function asked for, the request's own first."""
        own = () if self.gain_function is None else (self.gain_function,)
        return tuple(dict.fromkeys(own + tuple(self.extra_gains)))


class Compaction(NamedTuple):
    """Ranked ids with their excluded ids removed: the ids (batch, K) and the column each kept
    id moves to (``_compact_columns``)."""

    ids: torch.Tensor
    column: torch.Tensor


class Judged(NamedTuple):
    """bpref's judged non-relevant items: (batch, depth) 1 where the ranked item is judged and not
    relevant, and (batch,) their number for each user."""

    at_positions: torch.Tensor
    total: torch.Tensor


@dataclass
class Ranking:
    """How one batch was ranked: what a ``RankedBatch`` derives its further fields from."""

    batch: RankingInput
    relevance: Relevance
    threshold: Optional[float]  # the relevance threshold as given (the gains read it)
    order: torch.Tensor  # (batch, depth) int64 item ids in rank order, -1 past the candidates
    top_labels: torch.Tensor  # (batch, depth) float64 labels of the ranked items, 0 where none
    listed: Optional[torch.Tensor]  # (batch, depth) bool, a position holds an item (None: all do)
    compaction: Optional[Compaction]  # ranked ids only
    labels: Optional[torch.Tensor]  # the dense labels, contiguous (None for sparse and id targets)
    label_pass: LabelPass  # the pass over the labels (its group maxima start the ideal selection)
    positions_of: Callable[[tuple], Positions]  # the per-position quantities under gain functions


@dataclass
class RankedBatch:
    """What every ranking metric needs of one batch. Tensors are float64, shape (batch, depth)
    unless noted; under ``ties="average"`` each is the expectation over tie orderings. Every field
    is present; those not asked for in the request are derived on first use and kept."""

    num_items: int
    depth: int
    hit: torch.Tensor  # 1 if the item at position i is relevant
    hit_times_hits_so_far: torch.Tensor  # hit_i * (number of hits in positions 1..i)
    first_hit: torch.Tensor  # 1 if position i holds the first relevant item
    has_relevant: torch.Tensor  # (batch,) bool, |R| > 0
    invalid: dict[str, torch.Tensor]  # message -> 0-d bool tensor, True when the batch holds an invalid value
    ranking: Ranking
    gain_function: Optional[GainFunction]  # the request's own (None: ``gain`` refuses)
    # the gains of the ranked items under each gain function asked for (``gain_of``)
    gains: dict[GainFunction, torch.Tensor] = field(default_factory=dict)
    # the formulas' running sums: {(cut-offs, discount): {quantity: (batch, len(cut-offs))}}
    running_sums: dict[tuple, dict[str, torch.Tensor]] = field(default_factory=dict)
    # kept on first use: see the properties of the same name
    _num_relevant: Optional[torch.Tensor] = field(default=None, repr=False)
    _num_candidates: Optional[torch.Tensor] = field(default=None, repr=False)
    _boundary_tie: Optional[torch.Tensor] = field(default=None, repr=False)
    _ideal_gain: Optional[torch.Tensor] = field(default=None, repr=False)
    _num_relevant_candidates: Optional[torch.Tensor] = field(default=None, repr=False)
    _judged: dict[str, Judged] = field(default_factory=dict, repr=False)

    @property
    def num_relevant(self) -> torch.Tensor:
        """(batch,) |R|, the number of relevant items (counted here unless the request asked)."""
        if self._num_relevant is None:
            self._num_relevant = _relevant_count(self.ranking.batch, self.ranking.threshold)
        return self._num_relevant

    @property
    def candidates_are_all_items(self) -> bool:
        """Whether every item of the catalog is a candidate (dense scores, nothing excluded)."""
        return self._num_candidates is None

    @property
    def num_candidates(self) -> torch.Tensor:
        """(batch,) the number of each user's candidates (the catalog unless items were excluded
        or the predictions are ranked ids)."""
        if self._num_candidates is None:
            shape, device = self.has_relevant.shape, self.hit.device
            self._num_candidates = torch.full(shape, float(self.num_items), dtype=torch.float64, device=device)
        return self._num_candidates

    @property
    def boundary_tie(self) -> torch.Tensor:
        """1 where the candidates at positions i and i + 1 have equal scores, so that a cut-off at
        i splits a group of tied scores (0 everywhere for ranked ids, which hold no scores)."""
        if self._boundary_tie is None:
            self._boundary_tie = torch.zeros_like(self.hit)
        return self._boundary_tie

    @property
    def gain(self) -> torch.Tensor:
        """The gain of the item at position i under the request's gain function (0 if not relevant)."""
        return self.gain_of(_own_gain(self.gain_function))

    def gain_of(self, gain_function: GainFunction) -> torch.Tensor:
        """The gain of the item at position i under ``gain_function``; its value checks join ``invalid``."""
        if gain_function not in self.gains:
            values = self.ranking.positions_of((gain_function,))[1][0]
            self.invalid.update(gain_flags(gain_function, values, None))
            self.gains[gain_function] = values
        return self.gains[gain_function]

    @property
    def holds_ideal_gain(self) -> bool:
        """Whether the ideal gains are computed (asked for, or read once)."""
        return self._ideal_gain is not None

    @property
    def ideal_gain(self) -> torch.Tensor:
        """The gains of the ideal ranking (relevance sorted descending) under the request's gain
        function; its value checks join ``invalid``."""
        if self._ideal_gain is None:
            own = _own_gain(self.gain_function)
            self._ideal_gain = _ideal_gains(self, own)
            self.invalid.update(gain_flags(own, self.gains.get(own), self._ideal_gain))
        return self._ideal_gain

    def judged(self, kind: str) -> Judged:
        """bpref's judged non-relevant items; ``kind``: ``"nonnegative"`` (a negative label is
        unjudged, as trec_eval) or ``"all"`` (every stored label is judged, as ranx)."""
        if kind not in self._judged:
            self._judged[kind] = _judged_nonrelevant(self.ranking, kind, self.num_relevant, self.depth)
        return self._judged[kind]

    @property
    def num_relevant_candidates(self) -> torch.Tensor:
        """(batch,) the relevant items among each user's candidates (fall-out)."""
        if self._num_relevant_candidates is None:
            self._num_relevant_candidates = _relevant_candidates(self.ranking, self.num_relevant)
        return self._num_relevant_candidates


def _own_gain(gain_function: Optional[GainFunction]) -> GainFunction:
    if gain_function is None:
        raise ValueError(
            "the ranking step was asked for no gain_function: a metric that reads gains declares Needs(gains=True)"
        )
    return gain_function


def rank_input(batch: RankingInput, request: RankingRequest, hints: Optional[RankingHints] = None) -> RankedBatch:
    """The shared ranking step for any input form (see the module docstring). ``hints``: the
    calling metric's ``RankingHints`` (speed only). Threads: ``tuning.ranking_threads``."""
    with tuning.ranking_threads():
        dense = batch.dense_pair()
        if dense is not None:
            return _rank_dense(batch, *dense, request, hints)
        return _rank_candidates(batch, request, hints)


def _rank_dense(
    batch: RankingInput, scores: torch.Tensor, labels: torch.Tensor, request: RankingRequest, hints
) -> RankedBatch:
    """``rank_input`` for dense ``(scores, labels)``, every item a candidate: one selection over
    the scores and one pass over the labels."""
    num_items, threshold = scores.shape[1], request.relevance_threshold
    depth = min(request.depth, num_items)
    scores, labels = scores.contiguous(), labels.contiguous()
    relevance = Relevance.of(threshold, labels.dtype)

    # the label pass on a helper thread beside this one's selection of the scores, where passes are shared
    labels_job = tuning.side_job(lambda: _label_pass(labels, relevance, request, depth, hints), labels)
    # one position more than the cut-offs need: whether a cut-off splits tied scores
    width = min(depth + 1, num_items)
    order = untied_topk(scores, width)
    if order is None:
        order, score_is_nan, top_values = stable_topk_and_values(scores, width)
        tie = boundary_ties(scores, order, depth, complete=True, ranked=top_values)
    else:  # no tie and no NaN in any row
        score_is_nan = torch.zeros((), dtype=torch.bool, device=scores.device)
        tie = torch.zeros(order.shape[0], depth, dtype=torch.float64, device=scores.device)
    order = order[:, :depth] if order.shape[1] > depth else order
    top_labels = labels.gather(1, order).to(torch.float64)  # before the label pass's result: it may still run
    top_scores = None if request.ties == "stable" else scores.gather(1, order)

    def group_totals(boundary, rows, gain_functions):
        return last_group_totals(scores, labels, boundary, relevance, gain_functions, threshold, rows)

    positions_of = _positions_of(top_labels, relevance, threshold, top_scores, tie, group_totals)
    positions = positions_of(request.gain_functions)  # before the label pass's result: it may still run
    counted = _label_pass(labels, relevance, request, depth, hints) if labels_job is None else labels_job.result()
    ranking = Ranking(batch, relevance, threshold, order, top_labels, None, None, labels, counted, positions_of)
    ranked = _ranked_batch(ranking, request, num_items, depth, {}, score_is_nan.any(), None, tie, positions)
    ranked.invalid.update(batch.invalid)
    return ranked


def _rank_candidates(batch: RankingInput, request: RankingRequest, hints) -> RankedBatch:
    """``rank_input`` for every other form: ranked ids, exclusions, sparse or id targets."""
    threshold = request.relevance_threshold
    depth = request.depth if batch.ranked_ids is None else ranked_ids_depth(batch, request.depth, request.ideal)
    relevance = Relevance.of(threshold, batch.label_dtype)
    labels = None if batch.labels is None else batch.labels.contiguous()
    labels_job = None
    if labels is not None and batch.ranked_ids is None:  # scores: the depth after ``_cut`` is known
        cut_depth = min(depth, labels.shape[1])
        # the label pass on a helper thread beside this one's selection, where passes are shared
        labels_job = tuning.side_job(lambda: _label_pass(labels, relevance, request, cut_depth, hints), labels)
    # one position more than the cut-offs need: whether a cut-off splits tied scores
    order, num_candidates, invalid, compaction = _candidates(batch, depth + 1)
    invalid.update(batch.invalid)
    order, depth, tie = _cut(batch, order, depth)
    listed = order >= 0
    if labels is not None:
        counted = None if labels_job is None else labels_job.result()
        if counted is None or depth != cut_depth:  # (scores are cut to min(depth, num_items): the same)
            counted = _label_pass(labels, relevance, request, depth, hints)
        # ids outside the catalog are refused by a value check; clamped here so that the gather is safe
        safe = order.clamp(min=0, max=labels.shape[1] - 1)
        zero = torch.zeros((), dtype=torch.float64, device=order.device)
        top_labels = torch.where(listed, labels.gather(1, safe).to(torch.float64), zero)
    else:
        counted, top_labels = _target_pass(batch, relevance, order, compaction, depth)
    scores = batch.scores
    if request.ties != "stable" and batch.vectors is not None:  # the scores kept by the tiled selection
        top_scores = vector_top_scores(batch, order)
    elif request.ties == "stable" or scores is None:  # a ranked id list has no ties
        top_scores = None
    else:
        nan = torch.full((), float("nan"), dtype=scores.dtype, device=order.device)
        top_scores = torch.where(listed, scores.gather(1, order.clamp(min=0)), nan)

    def group_totals(boundary, rows, gain_functions):
        return _candidate_group_totals(batch, boundary, relevance, gain_functions, threshold, rows)

    positions_of = _positions_of(top_labels, relevance, threshold, top_scores, tie, group_totals)
    ranking = Ranking(batch, relevance, threshold, order, top_labels, listed, compaction, labels, counted, positions_of)
    nan_scores = invalid.pop(_NAN_SCORES, torch.zeros((), dtype=torch.bool, device=order.device))
    return _ranked_batch(ranking, request, batch.num_items or 0, depth, invalid, nan_scores, num_candidates, tie)


def ranked_ids_depth(batch: RankingInput, depth: int, ideal: bool) -> int:
    """The positions worth ranking for ranked ids and cut-offs up to ``depth``: the list's
    width K (the positions past it are empty, so a cut-off past K reads position K), or, for the
    ideal ranking, at least the largest |R| (bounded by the targets' width: dense labels' catalog,
    ItemIds' width, a sparse row's entries), never more than the catalog. Memory then grows with
    the lists and the targets, not with k."""
    bound = batch.id_rows.shape[1]
    if ideal:
        targets = batch.labels.shape[1] if batch.labels is not None else batch.targets_width
        bound = max(bound, depth if targets is None else targets)
    if batch.num_items is not None:
        bound = min(bound, batch.num_items)
    return max(1, min(depth, bound))


def ranked_candidates(batch: RankingInput, depth: int) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(order (batch, D) int64 item ids in rank order, -1 past the user's candidates; the number
    of candidates (batch,) float64; value-check flags). D = min(depth, num_items) for scores,
    min(depth, K) for ranked ids. Threads as in ``rank_input`` (``tuning.ranking_threads``)."""
    with tuning.ranking_threads():
        return _candidates(batch, depth)[:3]


def _candidates(batch: RankingInput, depth: int) -> tuple[torch.Tensor, torch.Tensor, dict, Optional[Compaction]]:
    """``ranked_candidates`` and, for ranked ids, their ``Compaction`` (None for scores)."""
    ids = batch.ranked_ids
    if ids is not None:
        listed = ids >= 0
        table = batch.excluded_table  # an exclusion list (None: a dense mask, or none)
        if table is not None:
            listed = listed & ~_found_in_rows(batch, ids, table)
        elif batch.excluded is not None:  # a dense mask: looked up at the ids (out-of-range ids are refused)
            mask = batch.excluded
            listed = listed & ~mask.gather(1, ids.clamp(min=0, max=mask.shape[1] - 1))
        column = _compact_columns(listed)
        order = _compact(ids, column, -1)[:, : min(depth, ids.shape[1])]
        return order, listed.sum(1, dtype=torch.float64), {}, Compaction(ids, column)
    if batch.vectors is not None:  # scored a tile of items at a time
        return vector_candidates(batch, depth)
    scores = batch.score_rows.contiguous()
    num_items = scores.shape[1]
    depth = min(depth, num_items)
    if not batch.has_exclusion:
        order, has_nan = stable_topk(scores, depth, detect_nan=True)
        num_candidates = torch.full(has_nan.shape, float(num_items), dtype=torch.float64, device=batch.device)
        return order, num_candidates, {_NAN_SCORES: has_nan.any()}, None
    most = listed_bound(scores, depth)  # None: no listed selection here (e.g. an accelerator)
    if batch.excluded_list is None and most is not None:
        # a dense mask on CPU: its entries as a list, unless too many for the group stages
        batch.excluded_list = listed_of_mask(batch.exclusion_mask, most)
    if batch.excluded_list is not None and most is not None and batch.excluded_width() <= most:
        # few excluded items per user beside the catalog: the listed selection, no mask
        rows = batch.exclusion_rows
        order, has_nan = stable_topk_excluding_listed(scores, depth, rows, detect_nan=True)
        num_candidates = num_items - distinct_in_rows(rows, num_items)
        return order, num_candidates, {_NAN_SCORES: has_nan.any()}, None
    table = batch.excluded_table
    if table is None:
        order, has_nan = stable_topk_excluding(scores, depth, batch.exclusion_mask, detect_nan=True)
        num_candidates = (num_items - count_true(batch.exclusion_mask)).to(torch.float64)
        return order, num_candidates, {_NAN_SCORES: has_nan.any()}, None
    entries = (table.users, table.keys & _ITEM_MASK)
    order, has_nan = stable_topk_excluding(scores, depth, batch.exclusion_mask, detect_nan=True, entries=entries)
    num_candidates = num_items - table.per_user_sum(table.distinct_entries(num_items))
    return order, num_candidates, {_NAN_SCORES: has_nan.any()}, None


def _found_in_rows(batch: RankingInput, ids: torch.Tensor, table: ItemTable) -> torch.Tensor:
    """(batch, K) bool: the ranked id at each position has an entry in ``table``."""
    flat, _ = table.find_in_rows(*_sorted_rows(batch, ids))
    found = torch.zeros(ids.numel() + 1, dtype=torch.bool, device=ids.device)
    found.index_fill_(0, flat, True)
    return found[:-1].view(ids.shape)


def _cut(batch: RankingInput, order: torch.Tensor, depth: int) -> tuple[torch.Tensor, int, Optional[torch.Tensor]]:
    """The candidates' ``order`` (one position past ``depth``) cut to the positions ranked, that
    depth, and the boundary ties (None without scores)."""
    # A ranked list narrower than the cut-offs: the positions past it are empty, but they are
    # still positions of the ranking (the ideal ranking, and NDCG's IDCG@k, fill them)
    width = depth + 1 if batch.num_items is None else min(depth + 1, batch.num_items)
    if batch.scores is None and batch.vectors is None:  # no ties to look for past the cut-offs: no extra position
        width = min(width, depth)
    if order.shape[1] < width:
        order = torch.nn.functional.pad(order, (0, width - order.shape[1]), value=-1)
    # a list padded wider than the catalog holds -1 past num_items positions (its ids are distinct)
    depth = min(depth, order.shape[1], batch.num_items or depth)
    # scores without an exclusion list an item at every position
    if batch.vectors is not None:
        return order[:, :depth], depth, vector_boundary_ties(batch, order, depth)
    tie = None if batch.scores is None else boundary_ties(batch.scores, order, depth, complete=not batch.has_exclusion)
    return order[:, :depth], depth, tie


def _label_pass(labels: torch.Tensor, relevance: Relevance, request: RankingRequest, depth: int, hints) -> LabelPass:
    """The one pass over dense labels (``relevance_pass``): |R| where the request needs it, and the
    ideal ranking's first selection step where it needs the top labels."""
    selects_labels = request.ideal and ideal_needs_selection(labels, request.gain_function)
    count = request.counts_relevant or (request.ideal and not selects_labels)  # the binary ideal counts
    groups = pass_groups(labels, depth, selects_labels, count)
    return relevance_pass(
        labels, relevance, count=count, groups=groups, depth=depth, hints=hints, select=selects_labels
    )


def _target_pass(
    batch: RankingInput, relevance: Relevance, order: torch.Tensor, compaction: Optional[Compaction], depth: int
) -> tuple[LabelPass, torch.Tensor]:
    """The pass over sparse or id targets: (|R| and its checks, the labels of the ranked items)."""
    table = batch.target_table
    values = table.values.to(torch.float64)
    num_relevant = table.per_user_sum(relevance.indicator(values))
    counted = LabelPass(num_relevant, num_relevant > 0, any_nan(values), None, None)
    if compaction is None:
        return counted, table.lookup(order)[0].to(torch.float64)
    # a merge with the rows sorted once, then the ids' compaction (merged duplicates add 0)
    return counted, _at_ranked_ids(batch, table, values, compaction, depth)


def _at_ranked_ids(
    batch: RankingInput, table: ItemTable, per_entry: torch.Tensor, compaction: Compaction, depth: int
) -> torch.Tensor:
    """(batch, depth) float64: the sum of ``per_entry`` (one value per entry of ``table``) over the
    entries of each ranked id, at the id's position among the candidates (0 past them)."""
    ids = compaction.ids
    flat, _ = table.find_in_rows(*_sorted_rows(batch, ids))
    at_ids = torch.zeros(ids.numel() + 1, dtype=torch.float64, device=ids.device)
    at_ids.index_put_((flat,), per_entry, accumulate=True)
    at_positions = _compact(at_ids[:-1].view(ids.shape), compaction.column, 0.0)[:, :depth]
    if at_positions.shape[1] < depth:  # empty positions
        at_positions = torch.nn.functional.pad(at_positions, (0, depth - at_positions.shape[1]))
    return at_positions


def _sorted_rows(batch: RankingInput, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The ranked ids' rows sorted ascending (values, columns), sorted once per batch."""
    if batch.ranked_sorted is None:
        batch.ranked_sorted = sort_id_rows(ids)
    return batch.ranked_sorted


def _compact_columns(keep: torch.Tensor) -> torch.Tensor:
    """(batch, K) int64: the column each kept entry moves to (their order kept: the running count
    of kept entries), K (a spare column) for the others."""
    rank = keep.cumsum(1)
    return torch.where(keep, rank - 1, keep.shape[1])


def _compact(values: torch.Tensor, column: torch.Tensor, fill: float) -> torch.Tensor:
    """``values`` (batch, K) moved to ``column`` (``_compact_columns``), ``fill`` after the kept
    ones; one scatter, no sort."""
    out = torch.full((values.shape[0], values.shape[1] + 1), fill, dtype=values.dtype, device=values.device)
    return out.scatter_(1, column, values)[:, :-1]


def _positions_of(
    top_labels: torch.Tensor,
    relevance: Relevance,
    threshold: Optional[float],
    top_scores: Optional[torch.Tensor],
    tie: Optional[torch.Tensor],
    group_totals: GroupTotals,
) -> Callable[[tuple], Positions]:
    """The per-position quantities of a ranking under given gain functions (``Positions``): hit,
    the gains, hit x hits so far and first hit (``stable_positions``); with ``top_scores``
    (``ties="average"``), their expectations over the orderings of the tied group at the last
    position, whose totals ``group_totals(boundary scores, rows to read, gain functions)`` counts
    among the candidates."""

    def positions(gain_functions: tuple) -> Positions:
        top_relevant = relevance.indicator(top_labels)
        top_gains = [gains(top_labels, top_relevant, g, threshold) for g in gain_functions]
        if top_scores is None or tie is None:
            return stable_positions(top_relevant, top_gains)
        continues = tie_continues(tie)
        last_group = group_totals(top_scores[:, -1:], rows_to_read(continues), gain_functions)
        return tie_expectations(top_scores, top_relevant, top_gains, last_group, continues)

    return positions


def _candidate_group_totals(
    batch: RankingInput,
    boundary: torch.Tensor,
    relevance: Relevance,
    gain_functions: tuple,
    threshold: Optional[float],
    rows: Optional[torch.Tensor] = None,
) -> tuple:
    """Over each user's candidates, those scored ``boundary`` (batch, 1): their number, how many
    are relevant and their total gain under each of ``gain_functions`` (``ties="average"`` with
    dense scores): over ``rows`` only (``ties.rows_to_read``; None: every row), 0 elsewhere."""
    if batch.vectors is not None:  # a second pass over the tiles
        return vector_group_totals(batch, boundary, relevance, gain_functions, threshold, rows)
    scores, excluded = batch.score_rows, batch.excluded
    if batch.labels is not None:
        return last_group_totals(scores, batch.labels, boundary, relevance, gain_functions, threshold, rows, excluded)
    count = last_group_totals(scores, None, boundary, relevance, (), threshold, rows, excluded)[0]
    table = batch.target_table
    items = (table.keys & _ITEM_MASK).clamp(max=scores.shape[1] - 1)
    users = table.users.clamp(max=scores.shape[0] - 1)
    tied = (scores[users, items] == boundary[users, 0]) & (table.users < scores.shape[0])
    if excluded is not None:
        tied &= ~excluded[users, items]
    values = table.values.to(torch.float64)
    relevant = relevance.indicator(values)
    gain_totals = [table.per_user_sum(tied * gains(values, relevant, g, threshold)) for g in gain_functions]
    return count, table.per_user_sum(tied * relevant), gain_totals


def _ranked_batch(
    ranking: Ranking,
    request: RankingRequest,
    num_items: int,
    depth: int,
    invalid: dict,
    nan_scores: torch.Tensor,
    num_candidates: Optional[torch.Tensor],
    tie: Optional[torch.Tensor],
    positions: Optional[Positions] = None,
) -> RankedBatch:
    """The ``RankedBatch`` of a ranking, with what the request asks for computed now; the checks
    of NaN scores (``nan_scores``) and labels, then of each gain, join ``invalid``. ``positions``:
    ``ranking.positions_of`` under the request's gain functions, if already computed."""
    gain_functions = request.gain_functions
    if positions is None:
        positions = ranking.positions_of(gain_functions)
    hit, gain_list, hit_times_hits_so_far, first_hit = positions
    ranked = RankedBatch(
        num_items,
        depth,
        hit,
        hit_times_hits_so_far,
        first_hit,
        ranking.label_pass.has_relevant,
        invalid,
        ranking,
        request.gain_function,
        dict(zip(gain_functions, gain_list)),
        _num_relevant=ranking.label_pass.num_relevant,
        _num_candidates=num_candidates,
        _boundary_tie=tie,
    )
    if request.ideal:
        ranked._ideal_gain = _ideal_gains(ranked, _own_gain(request.gain_function))
    invalid.update(invalid_flags(nan_scores, ranking.label_pass.has_nan))
    for g, values in ranked.gains.items():  # the request's own gain checked with the ideal gains
        invalid.update(gain_flags(g, values, ranked._ideal_gain if g == request.gain_function else None))
    return ranked


def _ideal_gains(ranked: RankedBatch, gain_function: GainFunction) -> torch.Tensor:
    """(batch, depth) the gains of the best possible ranking: of the first |R| positions when every
    relevant item gains alike, the ``depth`` largest gains under a callable gain, else of the top
    ``depth`` labels (the label pass's group maxima and candidates start that selection)."""
    ranking, depth = ranked.ranking, ranked.depth
    relevance, threshold, labels = ranking.relevance, ranking.threshold, ranking.labels
    values = labels if labels is not None else ranking.batch.target_table.values
    if ideal_is_binary(values, gain_function):
        return binary_ideal_gains(ranked.num_relevant, depth, gain_function, threshold)
    if not ideal_needs_selection(values, gain_function):  # a callable gain: its largest gains, not labels
        table = None if labels is not None else ranking.batch.target_table
        return custom_ideal_gains(labels, table, depth, relevance, gain_function, threshold)
    candidates = ranking.label_pass.candidates
    if labels is not None and not isinstance(candidates, TopLabels):
        maxima = ranking.label_pass.maxima
        return selected_ideal_gains(labels, depth, relevance, gain_function, maxima, threshold, candidates)
    if isinstance(candidates, TopLabels):  # sorted by the label pass
        best = candidates.values.to(torch.float64)
    else:
        best = ranking.batch.target_table.top_values(depth)
    return gains(best, relevance.indicator(best), gain_function, threshold)


def _judged_nonrelevant(ranking: Ranking, kind: str, num_relevant: torch.Tensor, depth: int) -> Judged:
    """``RankedBatch.judged``: dense labels judge every item; sparse targets and ItemIds judge
    their stored entries. ``kind="nonnegative"``: a negative label is unjudged."""
    batch, relevance = ranking.batch, ranking.relevance
    nonnegative = kind == "nonnegative"

    def judged_nonrelevant(values: torch.Tensor) -> torch.Tensor:
        flags = 1.0 - relevance.indicator(values)
        return flags * (values >= 0) if nonnegative else flags

    if batch.labels is not None:
        at_positions = judged_nonrelevant(ranking.top_labels)
        if ranking.listed is not None:
            at_positions = at_positions * ranking.listed
        if nonnegative:  # relevant labels are >= the threshold > 0: the judged labels less |R|
            return Judged(at_positions, count_nonnegative(batch.labels).to(torch.float64) - num_relevant)
        return Judged(at_positions, batch.labels.shape[1] - num_relevant)
    table = batch.target_table
    values = table.values.to(torch.float64)
    first = table.distinct_entries(batch.num_items or (1 << 32))  # merged duplicates count once
    count = table.per_user_sum(judged_nonrelevant(values) * first)
    if ranking.compaction is None:
        stored_values, found = table.lookup(ranking.order.clamp(min=-1))
        return Judged(judged_nonrelevant(stored_values.to(torch.float64)) * found, count)
    return Judged(_at_ranked_ids(batch, table, judged_nonrelevant(values) * first, ranking.compaction, depth), count)


def _relevant_candidates(ranking: Ranking, num_relevant: torch.Tensor) -> torch.Tensor:
    """(batch,) float64: the relevant items among each user's candidates (the ranked ids that are
    listed and not excluded; with scores, every item not excluded)."""
    batch, relevance = ranking.batch, ranking.relevance
    if ranking.compaction is not None:
        ids, column = ranking.compaction
        kept = (column < ids.shape[1]).to(torch.float64)
        if batch.labels is not None:
            labels = batch.labels.gather(1, ids.clamp(min=0, max=batch.labels.shape[1] - 1))
            return (relevance.indicator(labels) * kept).sum(1)
        stored, _ = batch.target_table.lookup(ids)
        return (relevance.indicator(stored.to(torch.float64)) * kept).sum(1)
    if not batch.has_exclusion:
        return num_relevant
    if batch.vectors is not None and batch.labels is None and batch.excluded_list is not None:
        return num_relevant - _relevant_listed(batch, relevance)  # no (batch, num_items) mask
    # CPU: the labels of each user's distinct excluded items alone (a dense mask read as a list too)
    dense_labels, rows = batch.labels, batch.excluded_rows if tuning.cpu_tuned(batch.device) else None
    if dense_labels is not None and rows is not None:
        num_items = dense_labels.shape[1]
        excluded_labels = dense_labels.gather(1, rows.clamp(max=num_items - 1)).to(torch.float64)
        kept = first_in_rows(rows, num_items).to(torch.float64)
        return num_relevant - (relevance.indicator(excluded_labels) * kept).sum(1)
    mask = batch.exclusion_mask  # (batch, num_items) bool
    if batch.labels is not None:
        return num_relevant - count_true(relevance.mask(batch.labels) & mask).to(torch.float64)
    table = batch.target_table
    users = table.users.clamp(max=mask.shape[0] - 1)
    items = (table.keys & _ITEM_MASK).clamp(max=mask.shape[1] - 1)
    excluded = mask[users, items] & (table.users < mask.shape[0])
    return num_relevant - table.per_user_sum(relevance.indicator(table.values.to(torch.float64)) * excluded)


def _relevant_listed(batch: RankingInput, relevance: Relevance) -> torch.Tensor:
    """(batch,) float64: the relevant entries of sparse or id targets that the exclusion list
    holds (one ``searchsorted`` of the targets' keys into the exclusion's sorted keys)."""
    table, excluded = batch.target_table, batch.exclusion_table.keys
    if excluded.numel() == 0:
        return torch.zeros(batch.num_users, dtype=torch.float64, device=batch.device)
    at = torch.searchsorted(excluded, table.keys).clamp(max=excluded.numel() - 1)
    listed = excluded.gather(0, at) == table.keys  # padding keys belong to no user: not summed
    return table.per_user_sum(relevance.indicator(table.values.to(torch.float64)) * listed)


def hits_within_own_depth(
    batch: RankingInput, relevance_threshold: Optional[float], ties: str
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """For R-Precision: (hits among each user's first |R| candidates, |R|, value-check flags),
    float64 (batch,). |R| is unbounded by any cut-off: on CPU the batch is ranked to its largest
    |R| (a host read) by the shared ranking step; dense rows whose largest |R| is more than
    ``tuning.OWN_DEPTH_SHARE`` of the items on CPU, and every dense row elsewhere, are sorted
    whole a few at a time (``hits_at_own_depth``); other forms elsewhere are ranked over every
    candidate."""
    dense = batch.dense_pair()
    if batch.vectors is not None:
        num_items = batch.vectors.num_items
    else:
        num_items = batch.scores.shape[1] if batch.scores is not None else batch.id_rows.shape[1]
    on_cpu = tuning.cpu_tuned(batch.device)
    # on CPU ranked to the batch's largest |R| only (a host read)
    counted = _relevant_count(batch, relevance_threshold) if on_cpu else None
    width = num_items if counted is None else own_depth(counted, num_items)
    if counted is None and batch.vectors is not None and batch.targets_width is not None:
        width = max(1, min(width, batch.targets_width))  # |R| <= the targets' width: B x width candidates
    if dense is not None and (not on_cpu or width > tuning.OWN_DEPTH_SHARE * num_items):
        scores, labels = dense
        with tuning.ranking_threads(), tuning.wide_pass(scores.numel()):  # full-row sorts
            hits, num_relevant = hits_at_own_depth(scores, labels, relevance_threshold, ties, counted)
        invalid = full_row_checks(scores, labels)
        invalid.update(batch.invalid)
        return hits, num_relevant, invalid
    ranked = rank_input(batch, RankingRequest(width, relevance_threshold, ties))
    num_relevant = ranked.num_relevant
    cut = (num_relevant.to(torch.int64) - 1).clamp(min=0, max=ranked.depth - 1).unsqueeze(1)
    hits = ranked.hit.cumsum(1).gather(1, cut).squeeze(1)
    return torch.where(num_relevant > 0, hits, 0.0), num_relevant, ranked.invalid


def _relevant_count(batch: RankingInput, relevance_threshold: Optional[float]) -> torch.Tensor:
    """(batch,) float64 |R| of each user, as ``rank_input`` counts it."""
    if batch.labels is not None:
        return relevant_counts(batch.labels, Relevance.of(relevance_threshold, batch.labels.dtype))
    values = batch.target_table.values
    return batch.target_table.per_user_sum(
        Relevance.of(relevance_threshold, values.dtype).indicator(values.to(torch.float64))
    )
