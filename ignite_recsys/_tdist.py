"""Student's t distribution, from :mod:`scipy.stats` (the reference implementation of scientific
Python), and the intervals and p-values built on it. scipy is imported when first needed."""

from __future__ import annotations

import math

import numpy as np
import torch


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with df degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(p, df))


def t_quantiles(p: float, df: torch.Tensor) -> torch.Tensor:
    """The p-quantile of Student's t for each entry of a tensor of degrees of freedom (NaN where
    df < 1), float64 on df's device."""
    from scipy.stats import t

    df_host = df.detach().to("cpu", torch.float64).numpy()
    with np.errstate(invalid="ignore"):
        quantiles = t.ppf(p, np.where(df_host >= 1, df_host, np.nan))
    return torch.as_tensor(quantiles, dtype=torch.float64).to(df.device)


def two_sided_p(statistic: float, df: float) -> float:
    """P(|T| >= |statistic|) for Student's t with df degrees of freedom."""
    from scipy.stats import t

    return float(2 * t.sf(abs(statistic), df))


def paired_t_p_value(mean: float, sem: float, df: float) -> float:
    """Two-sided p-value of the paired t-test; with no spread, 1.0 for a zero mean, else 0.0."""
    if sem == 0:
        return 1.0 if mean == 0 else 0.0
    return two_sided_p(mean / sem, df)


def t_intervals(total: torch.Tensor, deviations: torch.Tensor, count: torch.Tensor, level: float) -> tuple:
    r"""(low, high) Student-t intervals of means from sums, sums of squared deviations from the
    mean and counts (broadcast), :math:`\bar x \pm t_{(1+\text{level})/2,\, n-1}\, s / \sqrt n` with
    :math:`s^2 = \sum (x - \bar x)^2 / (n - 1)`; NaN where count < 2."""
    n = count.to(torch.float64)
    mean = total / n
    variance = (deviations / (n - 1)).clamp(min=0)
    quantile = t_quantiles((1 + level) / 2, n - 1)
    half = torch.where(n >= 2, quantile * torch.sqrt(variance / n), torch.nan)
    return mean - half, mean + half


def mean_interval(values: np.ndarray, level: float) -> tuple:
    """(mean, low, high) of 1-D values: the Student-t interval of their mean."""
    n = values.shape[0]
    mean = float(values.mean())
    half = t_quantile((1 + level) / 2, n - 1) * float(values.std(ddof=1)) / math.sqrt(n)
    return mean, mean - half, mean + half
