"""User fairness: how far apart the user groups of a per-user-mean metric are.

:func:`group_gap` reads a metric built with ``num_groups`` (any metric that averages over users:
NDCG, RankingMetrics, IntraListDiversity, ...) after its updates and reports, per value, the
group with the highest mean, the one with the lowest, their difference and ratio, and Welch's
t-interval and test of the difference, from the streamed per-group sums (no per-user values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from ignite.exceptions import NotComputableError

from . import _validation as V
from ._tdist import t_quantile, two_sided_p
from .metrics._users import UserMean

__all__ = ["GroupGap", "group_gap"]


@dataclass(frozen=True)
class GroupGap:
    """The gap between the best and the worst user group of one value (see :func:`group_gap`).

    Attributes:
        high_group, low_group: the ids of the groups with the highest and the lowest mean (on
            equal means, the higher id is ``high_group`` and the lower ``low_group``).
        high, low: those two groups' means.
        gap: ``high - low`` (>= 0).
        ratio: ``high / low`` (``inf`` when low is 0 and high is not, NaN when both are 0).
        confidence_interval: (low, high) Welch t-interval of the difference of the two groups'
            means at ``level``; (nan, nan) when either group has fewer than two users.
        p_value: two-sided p-value of Welch's t-test of equal means (NaN as the interval; with
            no spread in either group, 1.0 for equal means, else 0.0).
        df: Welch–Satterthwaite degrees of freedom.
        num_users: the counted users of (high_group, low_group).
    """

    high_group: int
    low_group: int
    high: float
    low: float
    gap: float
    ratio: float
    confidence_interval: tuple
    p_value: float
    df: float
    num_users: tuple


def _group_moments(metric: UserMean) -> tuple:
    """(sums (G, V), counts (G,), sums of squared deviations from each group's mean (G, V)) of a
    metric's groups, over all processes: the per-group state of
    :class:`~ignite_recsys.metrics._users.UserMean`."""
    return metric._group_state("group_gap")


def _shaped_like(template: Any, values: list) -> Any:
    """``values`` in the structure of one group's result (a dict, a list or a single value)."""
    if isinstance(template, dict):
        return dict(zip(template, values))
    if isinstance(template, (list, tuple)):
        return list(values)
    return values[0]


def _gap(means: list, counts: list, variances: list, level: float) -> GroupGap:
    present = sorted((g for g, n in enumerate(counts) if n > 0), key=lambda g: (means[g], g))
    low, high = present[0], present[-1]
    gap = means[high] - means[low]
    if means[low] != 0:
        ratio = means[high] / means[low]
    else:
        ratio = math.nan if means[high] == 0 else math.copysign(math.inf, means[high])
    n_high, n_low = counts[high], counts[low]
    # Welch's interval and test: none below two users a group; a point and p = 1 or 0 without spread
    interval, p_value, df = (math.nan, math.nan), math.nan, math.nan
    if n_high >= 2 and n_low >= 2:
        a, b = variances[high] / n_high, variances[low] / n_low
        se = math.sqrt(a + b)
        if se == 0:
            interval, p_value = (gap, gap), 1.0 if gap == 0 else 0.0
        else:
            df = (a + b) ** 2 / (a * a / (n_high - 1) + b * b / (n_low - 1))
            half = t_quantile((1 + level) / 2, df) * se
            interval, p_value = (gap - half, gap + half), two_sided_p(gap / se, df)
    return GroupGap(high, low, means[high], means[low], gap, ratio, interval, p_value, df, (n_high, n_low))


def group_gap(metric: Any, level: float = 0.95) -> Any:
    r"""The spread of a per-user-mean metric across user groups, per value: for the group with
    the highest mean and the one with the lowest (among groups with a counted user), their
    difference ``gap`` and ratio, with Welch's t-interval of the difference at ``level``

    .. math:: \bar x_h - \bar x_l \pm t_{(1+\text{level})/2,\,\nu}\,
              \sqrt{s_h^2/n_h + s_l^2/n_l},\qquad
              \nu = \frac{(s_h^2/n_h + s_l^2/n_l)^2}{\frac{(s_h^2/n_h)^2}{n_h - 1} + \frac{(s_l^2/n_l)^2}{n_l - 1}}

    and the two-sided p-value of Welch's test of equal means: the values of
    ``scipy.stats.ttest_ind(high, low, equal_var=False)`` and of its ``confidence_interval(level)``
    on the two groups' per-user values, here from the streamed per-group sums, sums of squares
    and counts (summed across processes).

    ``metric``: a metric that averages over users (:class:`~ignite_recsys.NDCG`,
    :class:`~ignite_recsys.RankingMetrics`, :class:`~ignite_recsys.IntraListDiversity`, ...),
    built with ``num_groups`` and updated with :class:`~ignite_recsys.UserGroups`. Returns what
    ``metric.compute()`` returns with a :class:`GroupGap` per value (a list per k, a dict for
    RankingMetrics, a single one for RPrecision). Raises NotComputableError when fewer than two
    groups have a counted user.

    The two groups are chosen after looking at the data, as the extremes: with more than two
    groups the interval and the p-value describe that pair, and understate the chance of a gap
    this large among G groups of equal means (use them for two groups, or correct for the
    G(G-1)/2 pairs, e.g. with :func:`~ignite_recsys.correct_p_values`).

    >>> import torch
    >>> from ignite_recsys import HitRate, UserGroups, group_gap
    >>> metric = HitRate(top_k=1, num_groups=2)
    >>> scores = torch.tensor([[0.9, 0.1], [0.9, 0.1], [0.9, 0.1], [0.1, 0.9], [0.9, 0.1], [0.1, 0.9]])
    >>> relevance = torch.tensor([[1, 0], [1, 0], [0, 1], [0, 1], [0, 1], [1, 0]])
    >>> metric.update((scores, relevance, UserGroups(torch.tensor([0, 0, 0, 1, 1, 1]))))
    >>> [gap] = group_gap(metric)
    >>> gap.high_group, gap.low_group, round(gap.gap, 4), round(gap.ratio, 4)
    (0, 1, 0.3333, 2.0)
    """
    if not isinstance(metric, UserMean):
        raise TypeError(
            f"metric must be a metric that averages over users (NDCG, RankingMetrics, IntraListDiversity, ...), got "
            f"{type(metric).__name__}"
        )
    if metric.num_groups is None:
        raise ValueError(f"metric must be built with num_groups to compare groups, got {type(metric).__name__} without")
    level = V.check_level(level)
    template = metric.compute_groups()[0]
    total, count, deviations = _group_moments(metric)
    counts = [int(n) for n in count.tolist()]
    present = sum(n > 0 for n in counts)
    if present < 2:
        raise NotComputableError(
            f"group_gap needs at least two groups with a counted user, got {present} (counts per group: {counts})"
        )
    n = count.to(torch.float64).unsqueeze(1)
    means = total / n
    variances = (deviations / (n - 1)).clamp(min=0)
    gaps = [_gap(m, counts, v, level) for m, v in zip(means.t().tolist(), variances.t().tolist())]
    return _shaped_like(template, gaps)
