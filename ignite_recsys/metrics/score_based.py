"""Metrics of the scores themselves rather than of the top-k lists: AUC, GAUC and the pointwise
losses LogLoss, MAE and RMSE (RecBole's definitions).

:class:`GAUC` takes the usual ``(y_pred, y)`` (batch, num_items) input and ranks each user's full
row, or ``(DotScores, ItemIds)``, counted a tile of items at a time. :class:`AUC`,
:class:`LogLoss`, :class:`MAE` and :class:`RMSE` take ``(y_pred, y)`` or
``(y_pred, y, Observed(mask))`` of any (equal) shape; ``mask`` (bool, True = observed) restricts
them to the observed entries, by default all entries count. Entries outside the mask are never
read, so they may hold NaN. A bare tensor in the third place is refused: the ranking and catalog
metrics read a bool tensor there as ``exclude`` (True = excluded), the opposite meaning;
``Observed(~exclude)`` counts every entry but the excluded ones.

Memory: an update reads its inputs a chunk of entries (or of users, for GAUC) at a time, so its
temporaries stay small: on CPU cache-sized chunks; on accelerators chunks of at least 2**20
entries whose temporaries total at most one float32 copy of ``y_pred``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Callable, Optional, Union

import torch
from ignite.exceptions import NotComputableError
from ignite.metrics.metric import reinit__is_reduced

from .. import _validation as V
from .._core import tuning
from .._core.full_rows import per_user_auc
from .._core.input_checks import LABEL_DTYPES, check_dtype, check_pointwise, check_scores_and_relevance
from .._core.relevance import Relevance
from .._core.selection import ordered_int32
from .._core.vectors import finite_checks, held_out_auc
from ..inputs import DotScores, ItemIds, Observed
from ._state import BatchTotals, StatefulMetric, StreamingMean, _identity

GAUC_WEIGHTINGS = ("positives", "uniform")


def check_observed_input(metric: str, output: Any) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """``update``'s input of a pointwise metric, ``(y_pred, y)`` or ``(y_pred, y, Observed(mask))``,
    checked as ``(y_pred, y, mask or None)``. A bare tensor (or anything else) in the third place
    is refused: there the ranking and catalog metrics read a bool tensor as ``exclude``."""
    expected = "update expects a tuple (y_pred, y) or (y_pred, y, Observed(mask))"
    if not isinstance(output, Sequence) or isinstance(output, (str, bytes)):
        raise TypeError(f"{expected}, got {type(output).__name__}")
    if len(output) not in (2, 3):
        raise ValueError(f"{expected}, got a sequence of length {len(output)}")
    if len(output) == 3 and isinstance(output[2], Observed):
        output = (output[0], output[1], output[2].mask)
    elif len(output) == 3 and output[2] is not None:
        third = output[2]
        got = f"a bare {third.dtype} tensor" if isinstance(third, torch.Tensor) else type(third).__name__
        raise TypeError(
            f"{metric} reads the third element of update only as Observed(mask), the entries to count "
            f"(True = observed), got {got}. The ranking and catalog metrics read a bool tensor there as "
            "exclude (True = excluded), the opposite meaning, so a bare tensor is refused: pass "
            "(y_pred, y, Observed(mask)) to count the observed entries, or (y_pred, y, Observed(~exclude)) "
            "to count every entry but the excluded ones."
        )
    return check_pointwise(output)


class GAUC(StreamingMean):
    r"""Grouped AUC: the per-user ROC AUC over the full item list, averaged over users.

    .. math:: \mathrm{AUC}(u) = \frac{\sum_{i \in R(u)} \mathrm{rank}_i - \frac{P(P+1)}{2}}{P\,Q},
              \qquad \mathrm{GAUC} = \frac{\sum_u w_u \mathrm{AUC}(u)}{\sum_u w_u}

    with ascending ranks averaged over ties (a tied positive/negative pair counts one half), P
    positives (``y >= relevance_threshold``) and Q negatives. ``weighting="positives"``
    (default) uses :math:`w_u = P` (RecBole ``GAUC``); ``"uniform"`` the plain mean over users
    (torchmetrics ``RetrievalAUROC``). Users with no positive or no negative have no AUC and are
    left out, as in RecBole (torchmetrics would count them as 0). Items scored ``-inf`` are not
    candidates (RecBole's masking of history items). Each update sorts the full rows.

    ``update((DotScores(...), ItemIds(held_out)))`` gives the same values as the dense path fed
    the matrix made of the same tiles, in memory bounded by the tile: each user's positive
    scores are read from the tiles, sorted once, and every tile's candidates are counted against
    them with ``searchsorted`` (Mann-Whitney U). Listed ids with a grade below the threshold, and
    every unlisted item, are negatives. Other target forms are refused with DotScores.

    >>> import torch
    >>> from ignite_recsys import GAUC
    >>> scores = torch.tensor([[4.0, 3, 2, 1], [4, 3, 2, 1], [2, 2, 1, 1]])
    >>> labels = torch.tensor([[0, 1, 0, 1], [1, 0, 0, 0], [1, 0, 1, 0]])
    >>> metric = GAUC()
    >>> metric.update((scores, labels))
    >>> metric.compute()
    0.5
    >>> metric = GAUC(weighting="uniform")
    >>> metric.update((scores, labels))
    >>> round(metric.compute(), 4)
    0.5833
    """

    _counted = "user with both a positive and a negative item"
    _parameter_constraints = {"relevance_threshold": V.positive_real(), "weighting": V.Options(GAUC_WEIGHTINGS)}
    relevance_threshold: float
    weighting: str

    @V.checks_constructor
    def __init__(
        self,
        relevance_threshold: float = 1.0,
        weighting: str = "positives",
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
    ):
        self._keep_arguments(self._arguments, "relevance_threshold", "weighting")
        super().__init__(output_transform, device, skip_unrolling)

    def _parse(self, output):
        if isinstance(output, Sequence) and not isinstance(output, (str, bytes)) and len(output) == 3:
            raise ValueError(
                "GAUC takes (y_pred, y): it ranks each user's full row and takes no exclude or Observed(mask) "
                "in a third place; give the items to exclude the score -inf (they are then not candidates)"
            )
        if isinstance(output, Sequence) and len(output) == 2 and isinstance(output[0], DotScores):
            return _check_vectors_input(output[0], output[1])
        return check_scores_and_relevance(output)

    def _inputs_device(self, inputs):
        y_pred = inputs[0]
        return y_pred.user_vectors.device if isinstance(y_pred, DotScores) else y_pred.device

    def _batch_totals(self, inputs) -> BatchTotals:
        y_pred, y = inputs
        if isinstance(y_pred, DotScores):
            auc, positives, defined, invalid = held_out_auc(y_pred, y.ids, y.grades, self.relevance_threshold)
            invalid = {**finite_checks(y_pred), **invalid}
        else:
            auc, positives, defined, invalid = per_user_auc(y_pred, y, self.relevance_threshold)
        weight = defined.to(torch.float64)
        if self.weighting == "positives":
            weight = weight * positives
        return BatchTotals({"_sum": (auc * weight).sum().reshape(1), "_count": weight.sum()}, invalid)

    def _result(self, means):
        return means[0]


def _check_vectors_input(y_pred: DotScores, y: Any) -> tuple:
    """GAUC's ``(DotScores, ItemIds)``: the held-out items as ids, one user per row of the user
    vectors, on their device; the whole item table (not one process's shard)."""
    if not isinstance(y, ItemIds):
        got = f"a {y.layout} tensor" if isinstance(y, torch.Tensor) else type(y).__name__
        raise TypeError(
            f"GAUC with y_pred DotScores takes y as ItemIds (each user's held-out items, -1 padding), got {got}: "
            "a dense or sparse y would be read as a (batch, num_items) matrix, which DotScores exists to avoid"
        )
    if y_pred.sharded:
        raise ValueError(
            "GAUC takes no y_pred of DotScores with a split item table (item_offset, num_items): give the whole "
            "item table on each process"
        )
    if y.ids.shape[0] != y_pred.num_users:
        raise ValueError(
            f"y (ItemIds) must hold one row per user of y_pred (DotScores user_vectors, {y_pred.num_users}), "
            f"got {y.ids.shape[0]}"
        )
    device = y_pred.user_vectors.device
    if y.ids.device != device:
        raise ValueError(f"y (ItemIds) must be on the device of y_pred's user_vectors ({device}), got {y.ids.device}")
    check_dtype("y (ItemIds) grades", y.grades, LABEL_DTYPES, "bool, integer or floating-point relevance")
    return y_pred, y


class AUC(StatefulMetric):
    r"""Global ROC AUC over all (user, item) entries pooled together (RecBole ``AUC``,
    Recommenders ``auc``): the probability that a positive entry (``y >= relevance_threshold``)
    scores above a negative one, ties counting one half.

    Streaming in constant memory: scores go into :math:`2^{b}` ordered buckets (``b =
    resolution_bits``; the bucket is the top b bits of the order-preserving bit pattern of the
    score rounded to float32, so it adapts to any score scale: relative width
    :math:`2^{-(b-9)}`, i.e. about 5e-4 for the default b = 20) with one positive and one
    negative count each, and each bucket's lowest and highest score in float64, i.e. exactly for
    every score dtype (state :math:`2^{b+2}` float64, 32 MiB for b = 20).
    Pairs in different buckets are ordered exactly; a positive and a negative in the same bucket
    count one half. The result is therefore exact when no bucket holds two different scores (e.g.
    discrete scores), and it is always within :meth:`error_bound`
    :math:`= \frac{1}{2} \sum_{b \text{ mixed}} P_b N_b / (P N)` of the exact value, summed over
    the buckets that hold different scores. Entries scored ``-inf`` are not candidates; targets
    below the threshold, negative ones (``-inf`` included), are negatives; NaN targets are
    errors. ``update((y_pred, y, Observed(mask)))`` counts only the entries of ``mask`` (True =
    observed); a bare bool tensor there is refused, as it means ``exclude`` to the ranking metrics.

    >>> import torch
    >>> from ignite_recsys import AUC
    >>> metric = AUC()
    >>> metric.update((torch.tensor([[4.0, 3, 2, 1], [4, 3, 2, 1], [2, 2, 1, 1]]),
    ...                torch.tensor([[0, 1, 0, 1], [1, 0, 0, 0], [1, 0, 1, 0]])))
    >>> metric.compute(), metric.error_bound()
    (0.5, 0.0)
    """

    _parameter_constraints = {"relevance_threshold": V.positive_real(), "resolution_bits": V.Interval(int, 10, 24)}
    relevance_threshold: float
    resolution_bits: int
    _histogram: torch.Tensor
    _lowest: torch.Tensor
    _highest: torch.Tensor

    @V.checks_constructor
    def __init__(
        self,
        relevance_threshold: float = 1.0,
        resolution_bits: int = 20,
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
    ):
        self._keep_arguments(self._arguments, "relevance_threshold", "resolution_bits")
        num_buckets = 1 << self.resolution_bits
        # row 0: positives per bucket, row 1: negatives per bucket (ascending scores)
        self.add_state("_histogram", (2, num_buckets))
        # lowest and highest score seen in each bucket: a bucket with one distinct score is exact
        self.add_state("_lowest", (num_buckets,), reduce="MIN", fill=math.inf)
        self.add_state("_highest", (num_buckets,), reduce="MAX", fill=-math.inf)
        super().__init__(output_transform, device=device, skip_unrolling=skip_unrolling)

    def _tagged_output_keys(self) -> dict:
        return {"mask": Observed}  # a dict output {"y_pred", "y", "mask"}: the mask as Observed

    @reinit__is_reduced
    def update(self, output) -> None:
        inputs = check_observed_input("AUC", output)
        y_pred, y = inputs[0], inputs[1]
        relevance = Relevance.of(self.relevance_threshold, y.dtype)
        everything = torch.ones((), dtype=torch.bool, device=y_pred.device)
        nan_score = torch.zeros((), dtype=torch.bool, device=y_pred.device)
        bad_target = torch.zeros_like(nan_score)
        for scores, targets, observed in tuning.entry_pieces(
            inputs, tuning.CHECK_BYTES_PER_ENTRY
        ):  # the checks first: state untouched on error
            observed = everything if observed is None else observed
            nan_score |= (scores.isnan() & observed).any()
            if y.dtype.is_floating_point:
                bad_target |= (targets.isnan() & observed).any()
        invalid = {
            "y_pred contains NaN scores (+inf and -inf are allowed)": nan_score,
            "y contains NaN targets (negative targets, -inf included, are allowed: they are negatives)": bad_target,
        }
        bad = self._screen(invalid, y_pred.device)
        if bad is None:
            bad = torch.zeros((), dtype=torch.bool, device=y_pred.device)
        for scores, targets, observed in tuning.entry_pieces(inputs, tuning.LOSS_BYTES_PER_ENTRY):
            self._add_entries(scores, targets, everything if observed is None else observed, bad, relevance)
        self._num_invalid_updates += bad.to(torch.float64).to(self._device)

    def _bucket(self, scores: torch.Tensor) -> torch.Tensor:
        """int64 bucket in [0, 2**resolution_bits) of each score: the top bits of the
        order-preserving pattern of the score rounded to float32 (rounding keeps the order)."""
        shift = 32 - self.resolution_bits
        return (ordered_int32(scores) >> shift).to(torch.int64).add_(1 << (self.resolution_bits - 1))

    def _add_entries(self, scores, targets, observed, bad, relevance) -> None:
        """Adds 1-D pieces of a batch to the state (float64 scores: the lowest and highest score of
        each bucket are exact for every score dtype)."""
        scores = scores.to(torch.float64, copy=True).add_(0.0)  # never the input; -0.0 becomes +0.0
        bucket = self._bucket(scores)
        counted = observed & (scores > -math.inf) & ~bad
        is_negative = ~relevance.mask(targets)
        index = torch.add(bucket, is_negative.to(torch.int64), alpha=1 << self.resolution_bits)
        self._histogram.view(-1).index_add_(0, index.to(self._device), counted.to(self._device, torch.float64))
        bucket, counted, scores = (t.to(self._device) for t in (bucket, counted, scores))
        self._lowest.scatter_reduce_(0, bucket, torch.where(counted, scores, math.inf), "amin")
        self._highest.scatter_reduce_(0, bucket, torch.where(counted, scores, -math.inf), "amax")

    def _totals(self, histogram):
        """From the state reduced over processes: positives and negatives per bucket, #pairs."""
        positives, negatives = histogram[0], histogram[1]
        num_positive, num_negative = positives.sum(), negatives.sum()
        if num_positive == 0 or num_negative == 0:
            raise NotComputableError(
                f"AUC needs at least one positive and one negative entry, got {int(num_positive)} and "
                f"{int(num_negative)}"
            )
        return positives, negatives, num_positive * num_negative

    def compute(self) -> float:
        positives, negatives, pairs = self._totals(*self._checked("_histogram"))
        negatives_below = negatives.cumsum(0) - negatives
        return float((positives * (negatives_below + 0.5 * negatives)).sum() / pairs)

    def error_bound(self) -> float:
        """The largest possible difference between ``compute()`` and the exact AUC (0: exact)."""
        histogram, lowest, highest = self._checked("_histogram", "_lowest", "_highest")
        positives, negatives, pairs = self._totals(histogram)
        mixed = lowest < highest
        return float(0.5 * torch.where(mixed, positives * negatives, 0.0).sum() / pairs)


class PointwiseMean(StreamingMean):
    """Mean of a per-entry loss over the observed entries."""

    _counted = "observed entry"

    def _tagged_output_keys(self) -> dict:
        return {"mask": Observed}  # a dict output {"y_pred", "y", "mask"}: the mask as Observed

    def _parse(self, output):
        return check_observed_input(type(self).__name__, output)

    def _inputs_device(self, inputs):
        return inputs[0].device

    def _loss(self, y_pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _invalid(self, y_pred, y, observed) -> dict:
        """Value checks over the observed entries; ``y_pred`` and ``y`` are float64."""
        return {
            "y_pred contains NaN or infinite values": (~torch.isfinite(y_pred) & observed).any(),
            "y contains NaN or infinite values": (~torch.isfinite(y) & observed).any(),
        }

    def _batch_totals(self, inputs) -> BatchTotals:
        y_pred, y, mask = inputs
        device = y_pred.device
        total = torch.zeros(1, dtype=torch.float64, device=device)
        count = torch.zeros((), dtype=torch.float64, device=device)
        zero = torch.zeros((), dtype=torch.float64, device=device)
        everything = torch.ones((), dtype=torch.bool, device=device)
        invalid: dict = {}
        for scores, targets, observed in tuning.entry_pieces((y_pred, y, mask), tuning.LOSS_BYTES_PER_ENTRY):
            scores, targets = scores.to(torch.float64), targets.to(torch.float64)
            if observed is None:
                total += self._loss(scores, targets).sum()
                count += scores.numel()
                observed = everything
            else:
                total += torch.where(observed, self._loss(scores, targets), zero).sum()
                count += observed.sum(dtype=torch.float64)
            for message, flag in self._invalid(scores, targets, observed).items():
                invalid[message] = flag | invalid[message] if message in invalid else flag
        return BatchTotals({"_sum": total, "_count": count}, invalid)

    def _result(self, means):
        return means[0]


class MAE(PointwiseMean):
    r"""Mean absolute error over the observed entries (RecBole ``MAE``).

    .. math:: \mathrm{MAE} = \frac{1}{|S|} \sum_{(u,i) \in S} |\hat r_{ui} - r_{ui}|

    :math:`S`: the entries of ``Observed(mask)``, the third element of ``update`` (default: all);
    a bare bool tensor there is refused, as it means ``exclude`` to the ranking metrics.

    >>> import torch
    >>> from ignite_recsys import MAE, Observed
    >>> metric = MAE()
    >>> metric.update((torch.tensor([[4.0, 2.5], [1.0, 3.0]]), torch.tensor([[5.0, 0.0], [1.0, 2.0]]),
    ...                Observed(torch.tensor([[True, False], [True, True]]))))
    >>> round(metric.compute(), 4)
    0.6667
    """

    def _loss(self, y_pred, y):
        return (y_pred - y).abs()


class RMSE(PointwiseMean):
    r"""Root mean squared error over the observed entries (RecBole ``RMSE``).

    .. math:: \mathrm{RMSE} = \sqrt{\frac{1}{|S|} \sum_{(u,i) \in S} (\hat r_{ui} - r_{ui})^2}

    :math:`S`: the entries of ``Observed(mask)``, the third element of ``update`` (default: all);
    a bare bool tensor there is refused, as it means ``exclude`` to the ranking metrics.

    >>> import torch
    >>> from ignite_recsys import RMSE
    >>> metric = RMSE()
    >>> metric.update((torch.tensor([4.0, 1.0, 3.0]), torch.tensor([5.0, 1.0, 2.0])))
    >>> round(metric.compute(), 4)
    0.8165
    """

    def _loss(self, y_pred, y):
        return (y_pred - y).square()

    def _result(self, means):
        return math.sqrt(means[0])


class LogLoss(PointwiseMean):
    r"""Binary cross-entropy over the observed entries (RecBole ``LogLoss``).

    .. math:: \mathrm{LogLoss} = \frac{1}{|S|} \sum_{(u,i) \in S}
              -\left(r_{ui} \log \hat r_{ui} + (1 - r_{ui}) \log(1 - \hat r_{ui})\right)

    :math:`S`: the entries of ``Observed(mask)``, the third element of ``update`` (default: all);
    a bare bool tensor there is refused, as it means ``exclude`` to the ranking metrics.

    ``y_pred`` are probabilities, clipped to [eps, 1 - eps] as RecBole (eps = 1e-15); with
    ``from_logits=True`` they are logits and the loss is computed stably without clipping.
    ``y`` holds targets in [0, 1].

    >>> import torch
    >>> from ignite_recsys import LogLoss
    >>> probabilities, targets = torch.tensor([0.9, 0.2, 0.6]), torch.tensor([1, 0, 0])
    >>> metric = LogLoss()
    >>> metric.update((probabilities, targets))
    >>> round(metric.compute(), 4)
    0.4149
    >>> metric = LogLoss(from_logits=True)
    >>> metric.update((torch.logit(probabilities), targets))
    >>> round(metric.compute(), 4)
    0.4149
    """

    _parameter_constraints = {
        "eps": V.Interval(float, 0, 0.5, low_included=False, high_included=False),
        "from_logits": V.BOOLEAN,
    }
    eps: float
    from_logits: bool

    @V.checks_constructor
    def __init__(
        self,
        eps: float = 1e-15,
        from_logits: bool = False,
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
    ):
        self._keep_arguments(self._arguments, "eps", "from_logits")
        super().__init__(output_transform, device, skip_unrolling)

    def _loss(self, y_pred, y):
        if self.from_logits:
            return torch.nn.functional.softplus(y_pred) - y * y_pred
        p = y_pred.clamp(self.eps, 1 - self.eps)
        return -(y * torch.log(p) + (1 - y) * torch.log1p(-p))

    def _invalid(self, y_pred, y, observed):
        invalid = super()._invalid(y_pred, y, observed)
        invalid["y must hold targets in [0, 1]"] = (((y < 0) | (y > 1)) & observed).any()
        if not self.from_logits:
            invalid["y_pred must hold probabilities in [0, 1] (or pass from_logits=True)"] = (
                ((y_pred < 0) | (y_pred > 1)) & observed
            ).any()
        return invalid
