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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from .._validation import GainFunction
from . import tuning
from .adapters import RankingInput
from .full_rows import hits_at_own_depth, own_depth
from .relevance import (
    RankingHints,
    Relevance,
    any_nan,
    count_true,
    binary_ideal_gains,
    full_row_checks,
    gain_flags,
    gains,
    ideal_gains,
    ideal_needs_selection,
    invalid_flags,
    pass_groups,
    relevance_pass,
)
from .item_sets import distinct_in_rows, listed_of_mask
from .selection import (
    listed_bound,
    stable_topk,
    stable_topk_excluding,
    stable_topk_excluding_listed,
    untied_topk,
)
from .ties import (
    boundary_ties,
    last_group_totals,
    rows_to_read,
    stable_positions,
    tie_continues,
    tie_expectations,
)


@dataclass
class RankedBatch:
    """What every ranking metric needs of one batch. Tensors are float64, shape (batch, depth)
    unless noted; under ``ties="average"`` each is the expectation over tie orderings."""

    num_items: int
    depth: int
    hit: torch.Tensor  # 1 if the item at position i is relevant
    hit_times_hits_so_far: torch.Tensor  # hit_i * (number of hits in positions 1..i)
    first_hit: torch.Tensor  # 1 if position i holds the first relevant item
    num_relevant: Optional[torch.Tensor]  # (batch,) |R| = the number of relevant items, if asked
    has_relevant: torch.Tensor  # (batch,) bool, |R| > 0
    gain: Optional[torch.Tensor]  # gain of the item at position i (0 if not relevant)
    ideal_gain: Optional[torch.Tensor]  # gains of the ideal ranking, descending
    invalid: dict  # message -> 0-d bool tensor, True when the batch holds an invalid value
    num_candidates: Optional[torch.Tensor] = None  # (batch,) float64 when items were excluded or listed
    # (batch, depth) float64: 1 where the candidates at positions i and i + 1 have equal scores, so
    # that a cut-off at i splits a group of tied scores (None when there are no scores)
    boundary_tie: Optional[torch.Tensor] = None
    # the gains of the ranked items under each gain function asked for (the request's own and its
    # ``extra_gains``): {gain function: (batch, depth)}
    gains: dict = field(default_factory=dict)
    # (batch, depth) 1 where the ranked item is judged and not relevant (``judged``), and (batch,)
    # the number of judged non-relevant items of each user
    judged_nonrelevant: Optional[torch.Tensor] = None
    num_judged_nonrelevant: Optional[torch.Tensor] = None
    # (batch,) the relevant items among each user's candidates (``relevant_candidates``)
    num_relevant_candidates: Optional[torch.Tensor] = None


_NAN_SCORES = "y_pred contains NaN scores (+inf and -inf are allowed)"


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
    # are unjudged, as trec_eval) or "all" (every stored label, negative ones included, as ranx)
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


def rank_input(batch: RankingInput, request: RankingRequest, hints: Optional[RankingHints] = None) -> RankedBatch:
    """The shared ranking step for any input form (see the module docstring). ``hints``: the
    calling metric's ``RankingHints`` (speed only). Threads: ``tuning.ranking_threads``."""
    with tuning.ranking_threads():
        return _rank_input(batch, request, hints)


def _rank_input(batch: RankingInput, request: RankingRequest, hints: Optional[RankingHints]) -> RankedBatch:
    depth, relevance_threshold, ties = request.depth, request.relevance_threshold, request.ties
    gain_function, ideal = request.gain_function, request.ideal
    gain_functions = request.gain_functions
    if batch.is_dense:
        ranked, order, top_labels = _rank_dense(
            batch.scores,
            batch.labels,
            depth=depth,
            relevance_threshold=relevance_threshold,
            ties=ties,
            gain_function=gain_function,
            ideal=ideal,
            count_relevant=request.counts_relevant,
            hints=hints,
            gain_functions=gain_functions,
        )
        ranked.invalid.update(batch.invalid)
        return _with_extras(ranked, batch, request, (order, top_labels, None, None))
    if batch.ranked_ids is not None:
        depth = ranked_ids_depth(batch, depth, ideal)
    # one position more than the cut-offs need: whether a cut-off splits tied scores
    order, num_candidates, invalid, column = _candidates(batch, depth + 1)
    invalid.update(batch.invalid)
    # A ranked list narrower than the cut-offs: the positions past it are empty, but they are
    # still positions of the ranking (the ideal ranking, and NDCG's IDCG@k, fill them)
    width = depth + 1 if batch.num_items is None else min(depth + 1, batch.num_items)
    if batch.scores is None:  # no ties to look for past the cut-offs: no extra position
        width = min(width, depth)
    if order.shape[1] < width:
        order = torch.nn.functional.pad(order, (0, width - order.shape[1]), value=-1)
    # a list padded wider than the catalog holds -1 past num_items positions (its ids are distinct)
    depth = min(depth, order.shape[1], batch.num_items or depth)
    # scores without an exclusion list an item at every position
    tie = None if batch.scores is None else boundary_ties(batch.scores, order, depth, complete=not batch.has_exclusion)
    order = order[:, :depth]
    listed = order >= 0

    label_dtype = batch.labels.dtype if batch.labels is not None else batch.targets.values.dtype
    relevance = Relevance.of(relevance_threshold, label_dtype)
    zero = torch.zeros((), dtype=torch.float64, device=order.device)
    if batch.labels is not None:
        labels = batch.labels.contiguous()
        # the ideal ranking's first selection step is taken in the same pass over the labels
        selects_labels = ideal and ideal_needs_selection(labels, gain_function)
        count = request.counts_relevant or (ideal and not selects_labels)  # the binary ideal counts
        num_relevant, has_relevant, label_nan, label_maxima, label_candidates = relevance_pass(
            labels,
            relevance,
            count=count,
            groups=pass_groups(labels, depth, selects_labels, count),
            depth=depth,
            hints=hints,
        )
        # ids outside the catalog are refused by a value check; clamped here so that the gather is safe
        safe = order.clamp(min=0, max=labels.shape[1] - 1)
        top_labels = torch.where(listed, labels.gather(1, safe).to(torch.float64), zero)
    else:
        table = batch.targets
        values = table.values.to(torch.float64)
        num_relevant = table.per_user_sum(relevance.indicator(values))
        has_relevant = num_relevant > 0
        label_nan = any_nan(values)
        if batch.ranked_ids is None:
            top_labels = table.lookup(order)[0].to(torch.float64)
        else:  # a merge with the rows sorted once, then the ids' compaction
            ids = batch.ranked_ids
            flat, _ = table.find_in_rows(*_sorted_rows(batch))
            at_ids = torch.zeros(ids.numel() + 1, dtype=torch.float64, device=ids.device)
            at_ids.index_put_((flat,), values, accumulate=True)  # merged duplicates add 0
            top_labels = _compact(at_ids[:-1].view(ids.shape), column, 0.0)[:, :depth]
            if top_labels.shape[1] < depth:  # empty positions
                top_labels = torch.nn.functional.pad(top_labels, (0, depth - top_labels.shape[1]))
    if ties == "stable" or batch.scores is None:  # a ranked id list has no ties
        top_scores = None
    else:
        nan = torch.full((), float("nan"), dtype=batch.scores.dtype, device=order.device)
        top_scores = torch.where(listed, batch.scores.gather(1, order.clamp(min=0)), nan)
    positions = _positions(
        top_labels,
        relevance,
        gain_functions,
        relevance_threshold,
        top_scores,
        tie,
        lambda boundary, rows: _candidate_group_totals(
            batch, boundary, relevance, gain_functions, relevance_threshold, rows
        ),
    )

    ideal_gain = None
    if ideal:
        if batch.labels is not None:
            ideal_gain = ideal_gains(
                labels,
                num_relevant,
                depth,
                relevance,
                gain_function,
                label_maxima,
                relevance_threshold,
                label_candidates,
            )
        elif not ideal_needs_selection(batch.targets.values, gain_function):
            ideal_gain = binary_ideal_gains(num_relevant, depth, gain_function, relevance_threshold)
        else:
            best = batch.targets.top_values(depth)
            ideal_gain = gains(best, relevance.indicator(best), gain_function, relevance_threshold)

    invalid.update(
        invalid_flags(invalid.pop(_NAN_SCORES, torch.zeros((), dtype=torch.bool, device=order.device)), label_nan)
    )
    ranked = _ranked_batch(
        batch.num_items or 0,
        depth,
        positions,
        num_relevant,
        has_relevant,
        gain_function,
        gain_functions,
        ideal_gain,
        invalid,
        num_candidates,
        tie,
    )
    return _with_extras(ranked, batch, request, (order, top_labels, listed, column))


def _rank_dense(
    y_pred: torch.Tensor,
    y: torch.Tensor,
    *,
    depth: int,
    relevance_threshold: Optional[float],
    ties: str = "stable",
    gain_function: Optional[GainFunction] = None,
    ideal: bool = False,
    count_relevant: bool = True,
    hints: Optional[RankingHints] = None,
    gain_functions: tuple,
) -> RankedBatch:
    """``rank_input`` for dense ``(scores, labels)``, every item a candidate: one selection over
    the scores and one pass over the labels."""
    num_items = y_pred.shape[1]
    depth = min(depth, num_items)
    scores, labels = y_pred.contiguous(), y.contiguous()
    relevance = Relevance.of(relevance_threshold, labels.dtype)

    # one position more than the cut-offs need: whether a cut-off splits tied scores
    width = min(depth + 1, num_items)
    order = untied_topk(scores, width)
    if order is None:
        order, score_is_nan = stable_topk(scores, width, detect_nan=True, untied=False)
        tie = boundary_ties(scores, order, depth, complete=True)
    else:  # no tie and no NaN in any row
        score_is_nan = torch.zeros((), dtype=torch.bool, device=scores.device)
        tie = torch.zeros(order.shape[0], depth, dtype=torch.float64, device=scores.device)
    order = order[:, :depth] if order.shape[1] > depth else order
    selects_labels = ideal and ideal_needs_selection(labels, gain_function)
    count = count_relevant or (ideal and not selects_labels)  # the binary ideal counts
    num_relevant, has_relevant, label_nan, label_maxima, label_candidates = relevance_pass(
        labels,
        relevance,
        count=count,
        groups=pass_groups(labels, depth, selects_labels, count),
        depth=depth,
        hints=hints,
    )
    top_labels = labels.gather(1, order).to(torch.float64)
    positions = _positions(
        top_labels,
        relevance,
        gain_functions,
        relevance_threshold,
        None if ties == "stable" else scores.gather(1, order),
        tie,
        lambda boundary, rows: last_group_totals(
            scores, labels, boundary, relevance, gain_functions, relevance_threshold, rows
        ),
    )

    ideal_gain = None
    if ideal:
        ideal_gain = ideal_gains(
            labels, num_relevant, depth, relevance, gain_function, label_maxima, relevance_threshold, label_candidates
        )

    invalid = invalid_flags(score_is_nan.any(), label_nan)
    ranked = _ranked_batch(
        num_items,
        depth,
        positions,
        num_relevant,
        has_relevant,
        gain_function,
        gain_functions,
        ideal_gain,
        invalid,
        None,
        tie,
    )
    return ranked, order, top_labels


def _positions(top_labels, relevance, gain_functions, relevance_threshold, top_scores, tie, group_totals):
    """Per position of the ranking: hit, the gains of each gain function, hit x hits so far and
    first hit (``stable_positions``); with ``top_scores`` (``ties="average"``), their expectations
    over the orderings of the tied group at the last position, whose totals
    ``group_totals(boundary scores, rows to read)`` counts among the candidates."""
    top_relevant = relevance.indicator(top_labels)
    top_gains = [gains(top_labels, top_relevant, g, relevance_threshold) for g in gain_functions]
    if top_scores is None:
        return stable_positions(top_relevant, top_gains)
    continues = tie_continues(tie)
    last_group = group_totals(top_scores[:, -1:], rows_to_read(continues))
    return tie_expectations(top_scores, top_relevant, top_gains, last_group, continues)


def ranked_ids_depth(batch: RankingInput, depth: int, ideal: bool) -> int:
    """The positions worth ranking for ranked ids and cut-offs up to ``depth``: the list's
    width K (the positions past it are empty, so a cut-off past K reads position K), or, for the
    ideal ranking, at least the largest |R| (bounded by the targets' width: dense labels' catalog,
    ItemIds' width, a sparse row's entries), never more than the catalog. Memory then grows with
    the lists and the targets, not with k."""
    bound = batch.ranked_ids.shape[1]
    if ideal:
        targets = batch.labels.shape[1] if batch.labels is not None else batch.targets_width
        bound = max(bound, depth if targets is None else targets)
    if batch.num_items is not None:
        bound = min(bound, batch.num_items)
    return max(1, min(depth, bound))


def _ranked_batch(
    num_items,
    depth,
    positions,
    num_relevant,
    has_relevant,
    gain_function,
    gain_functions,
    ideal_gain,
    invalid,
    num_candidates,
    tie,
) -> RankedBatch:
    """The ``RankedBatch`` of a ranking's ``positions``; each gain function's gain checks join
    ``invalid``."""
    hit, gain_list, hit_times_hits_so_far, first_hit = positions
    gains_by_function = dict(zip(gain_functions, gain_list))
    for g, values in gains_by_function.items():
        invalid.update(gain_flags(g, values, ideal_gain if g == gain_function else None))
    return RankedBatch(
        num_items,
        depth,
        hit,
        hit_times_hits_so_far,
        first_hit,
        num_relevant,
        has_relevant,
        gain_list[0] if gain_function is not None else None,
        ideal_gain,
        invalid,
        num_candidates,
        tie,
        gains_by_function,
    )


def _with_extras(ranked: RankedBatch, batch: RankingInput, request: RankingRequest, ranking: tuple) -> RankedBatch:
    """``ranked`` with what a few metrics ask beyond the common quantities: the judged
    non-relevant items (bpref) and |R| among the candidates (fall-out). ``ranking``: (order,
    the ranked items' labels, which positions hold an item (None: all), the ranked ids' columns
    (None without ranked ids))."""
    if request.judged is None and not request.relevant_candidates:
        return ranked
    order, top_labels, listed, column = ranking
    label_dtype = batch.labels.dtype if batch.labels is not None else batch.targets.values.dtype
    relevance = Relevance.of(request.relevance_threshold, label_dtype)
    if request.judged is not None:
        ranked.judged_nonrelevant, ranked.num_judged_nonrelevant = _judged_nonrelevant(
            batch, relevance, request.judged, ranked.num_relevant, order, top_labels, listed, column, ranked.depth
        )
    if request.relevant_candidates:
        ranked.num_relevant_candidates = _relevant_candidates(batch, relevance, ranked.num_relevant, column)
    return ranked


def _judged_nonrelevant(batch, relevance, judged, num_relevant, order, top_labels, listed, column, depth):
    """((batch, depth) 1 where the ranked item is judged and not relevant, (batch,) the number
    of judged non-relevant items). Dense labels judge every item; sparse targets and ItemIds
    judge their stored entries. ``judged="nonnegative"``: a negative label is unjudged."""
    nonnegative = judged == "nonnegative"

    def judged_nonrelevant(values: torch.Tensor) -> torch.Tensor:
        flags = 1.0 - relevance.indicator(values)
        return flags * (values >= 0) if nonnegative else flags

    if batch.labels is not None:
        at_positions = judged_nonrelevant(top_labels)
        if listed is not None:
            at_positions = at_positions * listed
        labels = batch.labels
        if nonnegative:  # relevant labels are >= the threshold > 0: the judged labels less |R|
            count = count_true(labels >= 0).to(torch.float64) - num_relevant
        else:
            count = labels.shape[1] - num_relevant
        return at_positions, count
    table = batch.targets
    values = table.values.to(torch.float64)
    first = table.distinct_entries(batch.num_items or (1 << 32))  # merged duplicates count once
    count = table.per_user_sum(judged_nonrelevant(values) * first)
    if batch.ranked_ids is None:
        stored_values, found = table.lookup(order.clamp(min=-1))
        at_positions = judged_nonrelevant(stored_values.to(torch.float64)) * found
    else:
        ids = batch.ranked_ids
        flat, _ = table.find_in_rows(*_sorted_rows(batch))
        at_ids = torch.zeros(ids.numel() + 1, dtype=torch.float64, device=ids.device)
        at_ids.index_put_((flat,), judged_nonrelevant(values) * first, accumulate=True)
        at_positions = _compact(at_ids[:-1].view(ids.shape), column, 0.0)[:, :depth]
        if at_positions.shape[1] < depth:
            at_positions = torch.nn.functional.pad(at_positions, (0, depth - at_positions.shape[1]))
    return at_positions, count


def _relevant_candidates(batch, relevance, num_relevant, column) -> torch.Tensor:
    """(batch,) float64: the relevant items among each user's candidates (the ranked ids that are
    listed and not excluded; with scores, every item not excluded)."""
    if batch.ranked_ids is not None:
        ids = batch.ranked_ids
        kept = (column < ids.shape[1]).to(torch.float64)
        if batch.labels is not None:
            labels = batch.labels.gather(1, ids.clamp(min=0, max=batch.labels.shape[1] - 1))
            return (relevance.indicator(labels) * kept).sum(1)
        stored, _ = batch.targets.lookup(ids)
        return (relevance.indicator(stored.to(torch.float64)) * kept).sum(1)
    if not batch.has_exclusion:
        return num_relevant
    mask = batch.excluded  # (batch, num_items) bool
    if batch.labels is not None:
        return num_relevant - count_true(relevance.mask(batch.labels) & mask).to(torch.float64)
    table = batch.targets
    users = table.users.clamp(max=mask.shape[0] - 1)
    items = (table.keys & ((1 << 32) - 1)).clamp(max=mask.shape[1] - 1)
    excluded = mask[users, items] & (table.users < mask.shape[0])
    return num_relevant - table.per_user_sum(relevance.indicator(table.values.to(torch.float64)) * excluded)


def ranked_candidates(batch: RankingInput, depth: int):
    """(order (batch, D) int64 item ids in rank order, -1 past the user's candidates; the number
    of candidates (batch,) float64; value-check flags). D = min(depth, num_items) for scores,
    min(depth, K) for ranked ids."""
    return _candidates(batch, depth)[:3]


def _candidates(batch: RankingInput, depth: int):
    """``ranked_candidates`` and, for ranked ids, the column each listed id moves to
    (``_compact_columns``; None for scores)."""
    if batch.ranked_ids is not None:
        ids = batch.ranked_ids
        listed = ids >= 0
        if batch.excluded_list is not None:
            listed = listed & ~_found_in_rows(batch, batch.excluded_table)
        elif batch.excluded is not None:  # a dense mask: looked up at the ids (out-of-range ids are refused)
            mask = batch.excluded
            listed = listed & ~mask.gather(1, ids.clamp(min=0, max=mask.shape[1] - 1))
        column = _compact_columns(listed)
        order = _compact(ids, column, -1)[:, : min(depth, ids.shape[1])]
        return order, listed.sum(1, dtype=torch.float64), {}, column
    scores = batch.scores.contiguous()
    num_items = scores.shape[1]
    depth = min(depth, num_items)
    if not batch.has_exclusion:
        order, has_nan = stable_topk(scores, depth, detect_nan=True)
        num_candidates = torch.full(has_nan.shape, float(num_items), dtype=torch.float64, device=batch.device)
        return order, num_candidates, {_NAN_SCORES: has_nan.any()}, None
    most = listed_bound(scores, depth)  # None: no listed selection here (e.g. an accelerator)
    if batch.excluded_list is None and most is not None:
        # a dense mask on CPU: its entries as a list, unless too many for the group stages
        batch.excluded_list = listed_of_mask(batch.excluded, most)
    if batch.excluded_list is not None and most is not None and batch.excluded_width() <= most:
        # few excluded items per user beside the catalog: the listed selection, no mask
        rows = batch.excluded_rows
        order, has_nan = stable_topk_excluding_listed(scores, depth, rows, detect_nan=True)
        num_candidates = num_items - distinct_in_rows(rows, num_items)
        return order, num_candidates, {_NAN_SCORES: has_nan.any()}, None
    table = batch.excluded_table
    if table is None:
        order, has_nan = stable_topk_excluding(scores, depth, batch.excluded, detect_nan=True)
        num_candidates = (num_items - count_true(batch.excluded)).to(torch.float64)
        return order, num_candidates, {_NAN_SCORES: has_nan.any()}, None
    entries = (table.users, table.keys & ((1 << 32) - 1))
    order, has_nan = stable_topk_excluding(scores, depth, batch.excluded, detect_nan=True, entries=entries)
    num_candidates = num_items - table.per_user_sum(table.distinct_entries(num_items))
    return order, num_candidates, {_NAN_SCORES: has_nan.any()}, None


def _found_in_rows(batch: RankingInput, table) -> torch.Tensor:
    """(batch, K) bool: the ranked id at each position has an entry in ``table``."""
    ids = batch.ranked_ids
    flat, _ = table.find_in_rows(*_sorted_rows(batch))
    found = torch.zeros(ids.numel() + 1, dtype=torch.bool, device=ids.device)
    found.index_fill_(0, flat, True)
    return found[:-1].view(ids.shape)


def _sorted_rows(batch: RankingInput):
    """The ranked ids' rows sorted ascending (values, columns), sorted once per batch."""
    if batch.ranked_sorted is None:
        batch.ranked_sorted = batch.ranked_ids.sort(1)
    return batch.ranked_sorted


def _compact_columns(keep: torch.Tensor) -> torch.Tensor:
    """(batch, K) int64: the column each kept entry moves to (their order kept: the running count
    of kept entries), K (a spare column) for the others."""
    rank = keep.cumsum(1)
    return torch.where(keep, rank - 1, keep.shape[1])


def _compact(values: torch.Tensor, column: torch.Tensor, fill) -> torch.Tensor:
    """``values`` (batch, K) moved to ``column`` (``_compact_columns``), ``fill`` after the kept
    ones; one scatter, no sort."""
    out = torch.full((values.shape[0], values.shape[1] + 1), fill, dtype=values.dtype, device=values.device)
    return out.scatter_(1, column, values)[:, :-1]


def _candidate_group_totals(batch: RankingInput, boundary, relevance, gain_functions, threshold, rows=None):
    """Over each user's candidates, those scored ``boundary`` (batch, 1): their number, how many
    are relevant and their total gain under each of ``gain_functions`` (``ties="average"`` with
    dense scores): over ``rows`` only (``ties.rows_to_read``; None: every row), 0 elsewhere."""
    scores, excluded = batch.scores, batch.excluded
    if batch.labels is not None:
        return last_group_totals(scores, batch.labels, boundary, relevance, gain_functions, threshold, rows, excluded)
    count = last_group_totals(scores, None, boundary, relevance, (), threshold, rows, excluded)[0]
    table = batch.targets
    items = (table.keys & ((1 << 32) - 1)).clamp(max=scores.shape[1] - 1)
    users = table.users.clamp(max=scores.shape[0] - 1)
    tied = (scores[users, items] == boundary[users, 0]) & (table.users < scores.shape[0])
    if excluded is not None:
        tied &= ~excluded[users, items]
    values = table.values.to(torch.float64)
    relevant = relevance.indicator(values)
    gain_totals = [table.per_user_sum(tied * gains(values, relevant, g, threshold)) for g in gain_functions]
    return count, table.per_user_sum(tied * relevant), gain_totals


def hits_within_own_depth(batch: RankingInput, relevance_threshold: Optional[float], ties: str):
    """For R-Precision: (hits among each user's first |R| candidates, |R|, value-check flags),
    float64 (batch,). |R| is unbounded by any cut-off, so every candidate is ranked."""
    if batch.is_dense:
        with tuning.ranking_threads(), tuning.wide_pass(batch.scores.numel()):  # full-row sorts
            hits, num_relevant = hits_at_own_depth(batch.scores, batch.labels, relevance_threshold, ties)
        invalid = full_row_checks(batch.scores, batch.labels)
        invalid.update(batch.invalid)
        return hits, num_relevant, invalid
    width = batch.num_items if batch.scores is not None else batch.ranked_ids.shape[1]
    if tuning.cpu_tuned(batch.device):  # ranked to the batch's largest |R| only (a host read)
        width = own_depth(_relevant_count(batch, relevance_threshold), width)
    ranked = rank_input(batch, RankingRequest(width, relevance_threshold, ties))
    cut = (ranked.num_relevant.to(torch.int64) - 1).clamp(min=0, max=ranked.depth - 1).unsqueeze(1)
    hits = ranked.hit.cumsum(1).gather(1, cut).squeeze(1)
    return torch.where(ranked.num_relevant > 0, hits, 0.0), ranked.num_relevant, ranked.invalid


def _relevant_count(batch: RankingInput, relevance_threshold: Optional[float]) -> torch.Tensor:
    """(batch,) |R| of each user, as ``rank_input`` counts it."""
    if batch.labels is not None:
        return relevance_pass(batch.labels, Relevance.of(relevance_threshold, batch.labels.dtype))[0]
    values = batch.targets.values
    return batch.targets.per_user_sum(
        Relevance.of(relevance_threshold, values.dtype).indicator(values.to(torch.float64))
    )
