"""Two models compared on the same users, streamed: the paired t-test without per-user values."""

from __future__ import annotations

from typing import Any

import torch
from ignite.exceptions import NotComputableError

from .. import _validation as V
from .._tdist import paired_t_p_value, t_quantile
from ..inputs import UserGroups, UserIds
from ..stats import PairedTestResult
from ._state import BatchTotals, StatefulMetric, _identity
from ._users import UserMean, centered_moments, deviation_rows, saved_entry, shifted

_PAIRED_FIELDS = ("mean_a", "mean_b", "mean_difference", "p_value")


def _check_paired_metric(metric: Any) -> Any:
    if not isinstance(metric, UserMean):
        raise TypeError(
            "metric must be a metric that averages over users (NDCG, HitRate, Recall, Precision, MAP, MRR, F1, "
            f"RPrecision, RankingMetrics, AveragePopularity, TailPercentage, Novelty), got {type(metric).__name__}"
        )
    keys = tuple(metric.required_output_keys or ())
    if keys != ("y_pred", "y"):  # e.g. RankBiasedOverlap: two models already
        raise TypeError(
            f"metric must score one model's predictions, got {type(metric).__name__}, which compares two models "
            f"itself (update keys {keys})"
        )
    if metric.keeps_per_user or metric.num_groups is not None:
        raise ValueError(
            f"metric must be built without per_user and num_groups: Paired keeps no per-user values and no "
            f"groups, got {type(metric).__name__}(per_user={metric.keeps_per_user}, num_groups={metric.num_groups})"
        )
    return metric


class Paired(StatefulMetric):
    r"""Two models compared on the same users, streamed: the paired t-test of a per-user-mean
    metric without keeping any per-user value.

    ``metric`` is a configured metric that averages over users (:class:`NDCG`, :class:`HitRate`,
    :class:`Recall`, :class:`Precision`, :class:`MAP`, :class:`MRR`, :class:`F1`,
    :class:`RPrecision`, :class:`RankingMetrics`, :class:`AveragePopularity`,
    :class:`TailPercentage`, :class:`Novelty`), built without ``per_user`` and ``num_groups``;
    it serves as the definition of the per-user values (its own state is not updated).
    ``update((y_pred_a, y_pred_b, y))`` or ``update((y_pred_a, y_pred_b, y, exclude))`` takes
    both models' predictions against the same targets, each in any form the metric accepts
    (dense scores or :class:`RankedItems`; targets dense, sparse or :class:`ItemIds`); from an
    Engine, a dict output with the keys ``"y_pred_a"``, ``"y_pred_b"``, ``"y"`` (and
    ``"exclude"``).

    State, per value (per k, per ``"name@k"``): the sums over users of a, b, d = a - b and
    (d - c)², c a shift (the mean d of the first batch with compared users, kept in the state),
    and one count, float64, summed across processes (each process's squares are brought to the
    common mean before they are summed). A user is compared when both models'
    values count (as :func:`paired_test` drops a user with NaN in either).

    ``compute()`` returns what ``metric.compute()`` returns with a :class:`PairedTestResult`
    per value (``method="t"``): ``mean_a``, ``mean_b``, ``mean_difference`` :math:`\bar d`, the
    Student-t ``confidence_interval`` of the mean difference at ``level`` and the two-sided
    ``p_value`` of :math:`t = \bar d / (s_d / \sqrt n)` with n - 1 degrees of freedom,
    :math:`s_d^2 = \sum (d - \bar d)^2 / (n - 1)`, from the shifted squares (differences near
    1e8 with a spread of 0.01 keep the precision of the spread): the values of
    ``scipy.stats.ttest_rel(a, b)`` and of ``paired_test(a, b, method="t")`` on the per-user
    values. If every difference is the same (two identical models, say), the p-value is 1.0 when
    it is 0 and 0.0 otherwise, and the interval is that difference at both ends, as
    ``paired_test`` gives (scipy gives NaN). Attached to an Engine as ``name``, each value's ``mean_a``, ``mean_b``,
    ``mean_difference`` and ``p_value`` are also scalars under the metric's own scalar keys:
    ``"<name>@10/p_value"``, ``"<name>/ndcg@10/p_value"`` for :class:`RankingMetrics`,
    ``"<name>/p_value"`` for :class:`RPrecision`.

    >>> import torch
    >>> from ignite_recsys import NDCG, Paired
    >>> comparison = Paired(NDCG(top_k=2))
    >>> relevance = torch.tensor([[1, 0, 0, 1], [0, 1, 0, 0], [0, 0, 1, 1]])
    >>> model_a = torch.tensor([[0.9, 0.1, 0.2, 0.8], [0.1, 0.9, 0.3, 0.2], [0.2, 0.1, 0.9, 0.3]])
    >>> model_b = torch.tensor([[0.1, 0.9, 0.2, 0.8], [0.9, 0.1, 0.3, 0.2], [0.8, 0.1, 0.2, 0.9]])
    >>> comparison.update((model_a, model_b, relevance))
    >>> [result] = comparison.compute()
    >>> round(result.mean_a, 4), round(result.mean_b, 4), round(result.p_value, 4)  # scipy's ttest_rel: 0.0651
    (1.0, 0.3333, 0.0651)
    """

    required_output_keys = ("y_pred_a", "y_pred_b", "y")
    optional_output_keys = ("exclude",)

    _parameter_constraints = {
        "metric": V.Custom(
            "a metric that averages over users, built without per_user and num_groups",
            lambda name, value, arguments: _check_paired_metric(value),
        ),
        "level": V.Custom(
            "a confidence level strictly between 0 and 1",
            lambda name, value, arguments: V.check_level(value),
            ("0.9", 0.0, 1.0, 1.5, None),
        ),
    }
    metric: Any  # the metric of each model (a UserMean)
    level: float
    _sum_d: torch.Tensor
    _count: torch.Tensor
    _shift: torch.Tensor
    _sum_d_deviations: torch.Tensor

    @V.checks_constructor
    def __init__(
        self,
        metric: Any,
        level: float = 0.95,
        output_transform: Any = _identity,
        device: Any = None,
        skip_unrolling: bool = False,
    ):
        self._keep_arguments(self._arguments, "metric", "level")
        size = metric._num_values()
        self.add_state("_count", ())
        for key in ("_sum_a", "_sum_b", "_sum_d", "_sum_d2"):
            self.add_state(key, (size,))
        self.add_state("_shift", (size,), optional=True)  # of _sum_d2 (saved without: 0)
        # sum (d - _shift) from the small deviations (saved without: _sum_d - _count * _shift)
        self.add_state("_sum_d_deviations", (size,), optional=True)
        super().__init__(
            output_transform, device=metric._device if device is None else device, skip_unrolling=skip_unrolling
        )

    def load_state_dict(self, state_dict: Any) -> None:
        saved = saved_entry(state_dict)
        super().load_state_dict(state_dict)
        if saved is not None and not {"_sum_d_deviations", "_shift"} <= set(saved):  # about the shift loaded
            self._sum_d_deviations.copy_(self._sum_d - self._count * self._shift)

    def _model_rows(self, model: str, y_pred: Any, rest: tuple):
        name = type(self.metric).__name__
        try:
            batch = self.metric._parse((y_pred,) + rest)
        except (TypeError, ValueError) as error:
            raise type(error)(f"Paired({name}), model {model} (y_pred_{model}): {error}") from None
        rows = self.metric._user_rows(batch)
        rows.invalid = {f"Paired({name}), model {model}: {message}": flag for message, flag in rows.invalid.items()}
        return rows, batch

    def _parse(self, output: Any) -> tuple:
        if not isinstance(output, (tuple, list)):
            raise TypeError(
                "Paired.update expects a tuple (y_pred_a, y_pred_b, y) or (y_pred_a, y_pred_b, y, exclude), "
                f"got {type(output).__name__}"
            )
        if len(output) not in (3, 4):
            raise ValueError(
                "Paired.update expects a tuple (y_pred_a, y_pred_b, y) or (y_pred_a, y_pred_b, y, exclude) of 3 "
                f"or 4 entries, got a sequence of length {len(output)}"
            )
        if any(isinstance(entry, (UserGroups, UserIds)) for entry in output):
            raise TypeError(
                "Paired.update takes no UserGroups or UserIds (it keeps neither groups nor per-user values)"
            )
        rest = tuple(output[2:])
        a, batch = self._model_rows("a", output[0], rest)
        b, _ = self._model_rows("b", output[1], rest)
        return a, b, batch.device

    def _inputs_device(self, inputs: tuple) -> torch.device:
        return inputs[2]

    def _batch_totals(self, inputs: tuple) -> BatchTotals:
        a, b, _ = inputs
        weight = a.weight * b.weight
        weights = weight.unsqueeze(1)
        difference = a.values - b.values
        count = weight.sum()
        values = {"_sum_a": a.values, "_sum_b": b.values, "_sum_d": difference}
        # each value reduced over users as its own contiguous row
        sums = {key: (value * weights).t().contiguous().sum(1) for key, value in values.items()}
        shift, deviation = shifted(difference, sums["_sum_d"], count, self._count, self._shift)
        squares, deviations = deviation_rows(deviation, weights)
        sums["_sum_d2"], sums["_sum_d_deviations"] = (rows.t().contiguous().sum(1) for rows in (squares, deviations))
        return BatchTotals({**sums, "_shift": shift, "_count": count}, {**a.invalid, **b.invalid})

    def compute(self) -> Any:
        sum_a, sum_b = self._checked("_sum_a", "_sum_b")
        sum_d, count, deviations = centered_moments(
            self._sum_d, self._count, self._sum_d2, self._shift, self._sum_d_deviations
        )
        n = float(count)
        if n < 2:
            raise NotComputableError(
                f"Paired({type(self.metric).__name__}) needs at least two users compared (counted for both "
                f"models), got {int(n)}"
            )
        mean = sum_d / n
        sem = torch.sqrt((deviations / (n - 1)).clamp(min=0) / n)
        half = t_quantile((1 + self.level) / 2, n - 1) * sem
        results = [
            PairedTestResult(paired_t_p_value(m, e, n - 1), m, (m - h, m + h), "t", int(n), ma, mb)
            for m, e, h, ma, mb in zip(
                mean.tolist(), sem.tolist(), half.tolist(), (sum_a / n).tolist(), (sum_b / n).tolist()
            )
        ]
        return self.metric._result(results)

    def _scalar_keys(self, name: str) -> list:
        keys = self.metric._scalar_keys(name) or [name]
        return [f"{key}/{field}" for key in keys for field in _PAIRED_FIELDS]

    def _scalar_items(self, name: str, result: Any) -> list:
        per_value = self.metric._scalar_items(name, result)
        return [(f"{key}/{field}", getattr(value, field)) for key, value in per_value for field in _PAIRED_FIELDS]
