"""Statistics for reporting results: paired significance tests between two models evaluated on
the same users (from per-user values, or streamed by :class:`Paired`), and corrections for
several comparisons.

The Student-t distribution comes from :mod:`scipy.stats` (imported when first needed), the
reference implementation that scientific Python uses; the library's own code only combines it
with the per-user values. The metrics' :meth:`confidence_interval` uses the same quantiles.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch
from ignite.exceptions import NotComputableError
from ignite.metrics.metric import reinit__is_reduced

from . import _validation as V
from .inputs import UserGroups, UserIds
from .metrics._base import StatefulMetric, UserStatistics, _identity, raise_for_invalid_updates, screen
from .metrics._engine import OptionalOutputKeys, ScalarResults

__all__ = ["Paired", "PairedTestResult", "Report", "paired_test", "correct_p_values"]

PAIRED_TEST_METHODS = ("t", "randomization")
CORRECTION_METHODS = ("holm", "bonferroni")


def _t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with df degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(p, df))


def _t_quantiles(p: float, df: torch.Tensor) -> torch.Tensor:
    """The p-quantile of Student's t for each entry of a tensor of degrees of freedom (NaN where
    df < 1), float64 on df's device."""
    from scipy.stats import t

    df_host = df.detach().to("cpu", torch.float64).numpy()
    with np.errstate(invalid="ignore"):
        quantiles = t.ppf(p, np.where(df_host >= 1, df_host, np.nan))
    return torch.as_tensor(quantiles, dtype=torch.float64).to(df.device)


def _t_two_sided_p(statistic: float, df: float) -> float:
    from scipy.stats import t

    return float(2 * t.sf(abs(statistic), df))


@dataclass(frozen=True)
class PairedTestResult:
    """The result of :func:`paired_test`.

    Attributes:
        p_value: two-sided p-value of "the mean difference is 0".
        mean_difference: mean over users of ``a - b``.
        confidence_interval: (low, high) Student-t interval of the mean difference at ``level``.
        method: ``"t"`` or ``"randomization"``.
        num_users: the users compared (after dropping pairs with a NaN).
        mean_a, mean_b: the means over those users of ``a`` and of ``b``.
    """

    p_value: float
    mean_difference: float
    confidence_interval: tuple
    method: str
    num_users: int
    mean_a: float = math.nan
    mean_b: float = math.nan


def _values_of(name: str, values: Any, k: Any) -> np.ndarray:
    """A 1-D float64 numpy array from a tensor/array/sequence or a metric built with per_user=True."""
    if callable(getattr(values, "per_user", None)) and not isinstance(values, (torch.Tensor, np.ndarray)):
        metric = values
        values = metric.per_user()
        if isinstance(values, dict):
            if k is None and len(values) == 1:
                (values,) = values.values()
            elif k in values:
                values = values[k]
            else:
                raise ValueError(f"k must name one of {list(values)} for {name} ({type(metric).__name__}), got {k!r}")
        elif values.ndim == 2:
            top_k = list(getattr(metric, "top_k", []))
            if k is None and values.shape[1] == 1:
                values = values[:, 0]
            elif k in top_k and not isinstance(k, bool):
                values = values[:, top_k.index(k)]
            else:
                raise ValueError(f"k must be one of the cut-offs {top_k} of {name} ({type(metric).__name__}), got {k!r}")
    if isinstance(values, torch.Tensor):
        values = values.detach().to("cpu", torch.float64).numpy()
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be 1-D real per-user values or a metric with per_user=True: {error}") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per user), got shape {array.shape}")
    if np.isinf(array).any():
        raise ValueError(f"{name} must hold finite values (NaN marks a user to leave out)")
    return array


def _user_ids_of(value: Any) -> Optional[torch.Tensor]:
    """The user ids of a metric's per-user values, when its updates came with UserIds."""
    if isinstance(value, UserStatistics) and value.keeps_per_user:
        try:
            return value.per_user_ids()
        except RuntimeError:
            return None
    return None


def paired_test(
    a: Any,
    b: Any,
    method: str = "t",
    *,
    level: float = 0.95,
    k: Union[int, str, None] = None,
    num_permutations: int = 10000,
    seed: Optional[int] = 0,
) -> PairedTestResult:
    r"""Two-sided paired test of two models' per-user values on the same users.

    ``a`` and ``b``: 1-D tensors, arrays or sequences of the same length, user i of one being
    user i of the other, or two metrics built with ``per_user=True`` (their :meth:`per_user`;
    ``k`` picks the cut-off of a metric with several, or the ``"name@k"`` key of a
    :class:`RankingMetrics`). A user whose value is NaN in either (a user a metric does not
    count) is dropped from both. Two metrics whose updates came with
    :class:`~ignite_recsys.UserIds` list their users in user-id order, so they line up however
    the users were batched or spread over processes; if their ids differ, a ValueError.

    - ``method="t"``: the paired Student t-test on :math:`d = a - b`, as
      ``scipy.stats.ttest_rel(a, b)``: :math:`t = \bar d / (s_d / \sqrt n)` with n - 1 degrees of
      freedom. If every difference is the same, the p-value is 1.0 when it is 0 and 0.0 otherwise.
    - ``method="randomization"``: Fisher's randomization (sign-flip) test, as ranx's: the share of
      ``num_permutations`` random sign flips of the differences whose mean is at least as far
      from 0 as the observed one (Smucker, Allan & Carterette, CIKM 2007). ``seed`` makes it
      repeatable (None: fresh randomness).

    ``confidence_interval`` is the Student-t interval of the mean difference at ``level`` for
    either method.

    >>> from ignite_recsys import paired_test
    >>> result = paired_test([0.5, 0.7, 0.9, 0.4], [0.4, 0.5, 0.8, 0.4])
    >>> round(result.mean_difference, 3), round(result.p_value, 4)
    (0.1, 0.0917)
    """
    method = V.check_choice("method", method, PAIRED_TEST_METHODS)
    level = V.check_level(level)
    if method == "randomization":
        num_permutations = V.check_positive_int("num_permutations", num_permutations)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
        raise TypeError(f"seed must be an int or None, got {seed!r} of type {type(seed).__name__}")
    first, second = _values_of("a", a, k), _values_of("b", b, k)
    ids_a, ids_b = _user_ids_of(a), _user_ids_of(b)
    if ids_a is not None and ids_b is not None and not torch.equal(ids_a.cpu(), ids_b.cpu()):
        raise ValueError(
            "a and b hold different users (the user ids of their per-user values differ): evaluate both models "
            "on the same users"
        )
    if first.shape != second.shape:
        raise ValueError(f"a and b must hold the same users: got {first.shape[0]} and {second.shape[0]} values")
    kept = ~(np.isnan(first) | np.isnan(second))
    differences = first[kept] - second[kept]
    means = (float(first[kept].mean()), float(second[kept].mean())) if kept.any() else (math.nan, math.nan)
    n = differences.shape[0]
    if n < 2:
        raise ValueError(f"a and b must have at least two users with values in both, got {n}")
    mean = float(differences.mean())
    sem = float(differences.std(ddof=1)) / math.sqrt(n)
    half = _t_quantile((1 + level) / 2, n - 1) * sem
    if method == "t":
        p_value = _paired_t_p_value(mean, sem, n - 1)
    else:
        p_value = _sign_flip_p_value(differences, num_permutations, seed)
    return PairedTestResult(p_value, mean, (mean - half, mean + half), method, n, *means)


def _paired_t_p_value(mean: float, sem: float, df: float) -> float:
    """Two-sided p-value of the paired t-test; with no spread, 1.0 for a zero mean, else 0.0."""
    if sem == 0:
        return 1.0 if mean == 0 else 0.0
    return _t_two_sided_p(mean / sem, df)


def _sign_flip_p_value(differences: np.ndarray, num_permutations: int, seed: Optional[int]) -> float:
    """Share of random sign flips whose |sum| reaches the observed |sum| (a relative tolerance of
    1e-12 absorbs rounding, so that equal sums reached in another order count as reached)."""
    rng = np.random.default_rng(seed)
    observed = abs(differences.sum())
    threshold = observed - 1e-12 * max(observed, np.abs(differences).sum())
    chunk = max(1, min(num_permutations, (1 << 22) // max(differences.shape[0], 1)))
    reached, done = 0, 0
    while done < num_permutations:
        rows = min(chunk, num_permutations - done)
        signs = rng.integers(0, 2, size=(rows, differences.shape[0]), dtype=np.int8) * 2 - 1
        reached += int((np.abs(signs @ differences) >= threshold).sum())
        done += rows
    return reached / num_permutations


def correct_p_values(p_values: Sequence[float], method: str = "holm") -> list:
    """p-values adjusted for several comparisons, in the input order.

    - ``"bonferroni"``: :math:`\\min(1, m\\,p_i)` for m comparisons.
    - ``"holm"``: Holm's step-down (Holm, 1979): with the p-values sorted ascending,
      :math:`\\tilde p_{(i)} = \\max_{j \\le i} \\min(1, (m - j + 1)\\, p_{(j)})`; it controls the
      family-wise error as Bonferroni does and rejects at least as often.

    As ``statsmodels.stats.multitest.multipletests(p, method=...)[1]``.

    >>> from ignite_recsys import correct_p_values
    >>> correct_p_values([0.01, 0.04, 0.03], method="holm")
    [0.03, 0.06, 0.06]
    """
    method = V.check_choice("method", method, CORRECTION_METHODS)
    if isinstance(p_values, (str, bytes)):
        raise TypeError(f"p_values must be a sequence of numbers, got {type(p_values).__name__}")
    try:
        values = np.asarray(p_values.detach().cpu() if isinstance(p_values, torch.Tensor) else p_values, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"p_values must be a sequence of numbers: {error}") from None
    if values.ndim != 1:
        raise ValueError(f"p_values must be 1-D, got shape {values.shape}")
    if np.isnan(values).any() or (values < 0).any() or (values > 1).any():
        raise ValueError(f"p_values must lie in [0, 1], got {values.tolist()}")
    m = values.shape[0]
    if method == "bonferroni":
        return np.minimum(1.0, values * m).tolist()
    order = np.argsort(values, kind="stable")
    stepped = np.maximum.accumulate(np.minimum(1.0, values[order] * (m - np.arange(m))))
    adjusted = np.empty(m)
    adjusted[order] = stepped
    return adjusted.tolist()


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def _latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(char, char) for char in text)


def _column_k(metric: Any, column: str) -> Any:
    """The ``k`` that picks ``column`` ("ndcg@10") out of a metric's per-user values."""
    if isinstance(getattr(metric, "metrics", None), (list, tuple)):  # RankingMetrics: keys are names
        return column
    head, at, tail = column.rpartition("@")
    return int(tail) if at and tail.isdigit() else None


class Report:
    r"""A models × metrics results table: each cell the mean with the half-width of its confidence
    interval, the best value of each column in bold, and, against a ``baseline`` model, markers
    of the paired tests that are significant after Holm's correction.

    ``results`` maps each model name to a mapping ``{"ndcg@10": cell, ...}`` (the columns are the
    keys, in first-seen order). A cell is either

    - a summary ``(mean, (low, high))``, shown as is (no test is possible), or
    - per-user values: a metric built with ``per_user=True`` (the column's ``@k`` picks the
      cut-off; a :class:`RankingMetrics` is read under the column name), or a 1-D tensor, array
      or sequence. The mean is over the users without NaN and the interval is the Student-t
      interval at ``level``, as :meth:`confidence_interval`.

    With ``baseline`` set, every other model's per-user column is compared with the baseline's by
    :func:`paired_test` (``method``, ``a`` the model, ``b`` the baseline); the p-values of all these
    comparisons are adjusted together by :func:`correct_p_values` (``correction``). A cell whose
    adjusted p-value is below ``alpha`` gets ``†`` when its mean difference is positive
    (significantly higher than the baseline) and ``‡`` when negative. Higher is better unless the
    column is named in ``lower_is_better`` (bold then marks the lowest mean).

    Attributes:
        columns: the column names. models: the model names.
        tests: ``{(model, column): PairedTestResult}`` of the comparisons made.
        adjusted_p_values: ``{(model, column): adjusted p-value}`` of the same comparisons.

    >>> from ignite_recsys import Report
    >>> report = Report({"A": {"ndcg@10": (0.35, (0.33, 0.37))}, "B": {"ndcg@10": (0.31, (0.29, 0.33))}})
    >>> print(report.to_markdown())
    | Model | ndcg@10 |
    |:--|--:|
    | A | **0.3500** ± 0.0200 |
    | B | 0.3100 ± 0.0200 |
    <BLANKLINE>
    Mean ± half-width of the 95% confidence interval; bold: best per column.
    """

    def __init__(
        self,
        results: Any,
        *,
        baseline: Optional[str] = None,
        level: float = 0.95,
        method: str = "t",
        correction: str = "holm",
        alpha: float = 0.05,
        digits: int = 4,
        lower_is_better: Sequence[str] = (),
        **test_options: Any,
    ):
        from collections.abc import Mapping

        if not isinstance(results, Mapping) or not results:
            raise TypeError(f"results must be a non-empty mapping model -> {{column: cell}}, got {results!r:.80}")
        self.level = V.check_level(level)
        self.method = V.check_choice("method", method, PAIRED_TEST_METHODS)
        self.correction = V.check_choice("correction", correction, CORRECTION_METHODS)
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 < alpha < 1:
            raise ValueError(f"alpha must be a significance level strictly between 0 and 1 (e.g. 0.05), got {alpha!r}")
        self.alpha = float(alpha)
        self.digits = V.check_positive_int("digits", digits)
        self.lower_is_better = set(lower_is_better)
        if baseline is not None and baseline not in results:
            raise ValueError(f"baseline must name one of the models {list(results)}, got {baseline!r}")
        self.baseline = baseline
        self.models = [str(model) for model in results]
        self.columns: list = []
        self._summary: dict = {}  # (model, column) -> (mean, low, high)
        per_user: dict = {}
        for model, cells in results.items():
            if not isinstance(cells, Mapping):
                raise TypeError(f"results[{model!r}] must be a mapping column -> cell, got {type(cells).__name__}")
            for column, cell in cells.items():
                if column not in self.columns:
                    self.columns.append(column)
                if isinstance(cell, tuple):
                    self._summary[model, column] = self._read_summary(model, column, cell)
                else:
                    values = _values_of(f"results[{model!r}][{column!r}]", cell, _column_k(cell, column))
                    per_user[model, column] = values
                    self._summary[model, column] = self._interval(model, column, values)
        for column in self.lower_is_better - set(self.columns):
            raise ValueError(f"lower_is_better names {column!r}, which is not a column ({self.columns})")
        self.tests: dict = {}
        if baseline is not None:
            for model in self.models:
                for column in self.columns:
                    if model != baseline and (model, column) in per_user and (baseline, column) in per_user:
                        self.tests[model, column] = paired_test(
                            per_user[model, column], per_user[baseline, column], self.method, level=self.level,
                            **test_options,
                        )
        adjusted = correct_p_values([test.p_value for test in self.tests.values()], self.correction)
        self.adjusted_p_values = dict(zip(self.tests, adjusted))

    @staticmethod
    def _read_summary(model, column, cell) -> tuple:
        try:
            mean, (low, high) = cell
            numbers_ = (float(mean), float(low), float(high))
        except (TypeError, ValueError):
            raise TypeError(f"results[{model!r}][{column!r}] must be (mean, (low, high)) or per-user values, got {cell!r:.80}") from None
        if not all(math.isfinite(x) for x in numbers_) or not numbers_[1] <= numbers_[0] <= numbers_[2]:
            raise ValueError(f"results[{model!r}][{column!r}] must be finite with low <= mean <= high, got {cell!r}")
        return numbers_

    def _interval(self, model, column, values: np.ndarray) -> tuple:
        kept = values[~np.isnan(values)]
        if kept.shape[0] < 2:
            raise ValueError(f"results[{model!r}][{column!r}] must hold at least two users with values, got {kept.shape[0]}")
        mean = float(kept.mean())
        half = _t_quantile((1 + self.level) / 2, kept.shape[0] - 1) * float(kept.std(ddof=1)) / math.sqrt(kept.shape[0])
        return mean, mean - half, mean + half

    # Rendering ---------------------------------------------------------------------------------
    def marker(self, model: str, column: str) -> str:
        """``"†"`` (significantly higher than the baseline), ``"‡"`` (lower) or ``""``."""
        test = self.tests.get((model, column))
        if test is None or not self.adjusted_p_values[model, column] < self.alpha:
            return ""
        return "†" if test.mean_difference > 0 else "‡" if test.mean_difference < 0 else ""

    def _best(self, column) -> set:
        means = {model: self._summary[model, column][0] for model in self.models if (model, column) in self._summary}
        target = (min if column in self.lower_is_better else max)(means.values())
        return {model for model, mean in means.items() if mean == target}

    def _cells(self, bold, plus_minus, dagger, double_dagger):
        rows = []
        best = {column: self._best(column) for column in self.columns}
        for model in self.models:
            row = []
            for column in self.columns:
                if (model, column) not in self._summary:
                    row.append("–" if plus_minus == "±" else "--")
                    continue
                mean, low, high = self._summary[model, column]
                text = f"{mean:.{self.digits}f}"
                if model in best[column]:
                    text = bold(text)
                mark = {"†": dagger, "‡": double_dagger, "": ""}[self.marker(model, column)]
                row.append(f"{text}{mark} {plus_minus} {(high - low) / 2:.{self.digits}f}")
            rows.append(row)
        return rows

    def caption(self, dagger: str = "†", double_dagger: str = "‡") -> str:
        """The line that explains the table's cells and markers."""
        level = f"{self.level * 100:g}%"
        text = f"Mean ± half-width of the {level} confidence interval; bold: best per column."
        if self.baseline is not None:
            test = {"t": "paired t-test", "randomization": "paired randomization test"}[self.method]
            text += (
                f" {dagger}/{double_dagger}: significantly higher/lower than {self.baseline} ({test}, "
                f"{self.correction.capitalize()}-adjusted p < {self.alpha:g} over {len(self.tests)} comparisons)."
            )
        return text

    def to_markdown(self) -> str:
        """The table in GitHub Markdown, followed by the caption line."""
        lines = ["| Model | " + " | ".join(self.columns) + " |", "|:--|" + "--:|" * len(self.columns)]
        for model, row in zip(self.models, self._cells(lambda t: f"**{t}**", "±", "†", "‡")):
            lines.append(f"| {model} | " + " | ".join(row) + " |")
        return "\n".join(lines) + "\n\n" + self.caption()

    def to_latex(self, label: Optional[str] = None) -> str:
        """A booktabs ``table`` (``\\usepackage{booktabs}``) with the caption; ``label`` adds a
        ``\\label``."""
        rows = self._cells(lambda t: f"\\textbf{{{t}}}", "$\\pm$", "$^{\\dagger}$", "$^{\\ddagger}$")
        caption = _latex_escape(self.caption("@D@", "@DD@")).replace("±", "$\\pm$").replace("@DD@", "$\\ddagger$")
        caption = caption.replace("@D@", "$\\dagger$").replace("<", "$<$")
        lines = ["\\begin{table}", "\\centering", f"\\caption{{{caption}}}"]
        if label is not None:
            lines.append(f"\\label{{{label}}}")
        lines += [f"\\begin{{tabular}}{{l{'r' * len(self.columns)}}}", "\\toprule",
                  " & ".join(["Model"] + [_latex_escape(c) for c in self.columns]) + " \\\\", "\\midrule"]
        for model, row in zip(self.models, rows):
            lines.append(" & ".join([_latex_escape(model)] + row) + " \\\\")
        lines += ["\\bottomrule", "\\end{tabular}", "\\end{table}"]
        return "\n".join(lines)


_PAIRED_FIELDS = ("mean_a", "mean_b", "mean_difference", "p_value")


def _check_paired_metric(metric: Any) -> Any:
    if not isinstance(metric, UserStatistics):
        raise TypeError(
            "metric must be a metric that averages over users (NDCG, HitRate, Recall, Precision, MAP, MRR, F1, "
            f"RPrecision, RankingMetrics, AveragePopularity, TailPercentage, Novelty), got {type(metric).__name__}"
        )
    if metric.keeps_per_user or metric.num_groups is not None:
        raise ValueError(
            f"metric must be built without per_user and num_groups: Paired keeps no per-user values and no "
            f"groups, got {type(metric).__name__}(per_user={metric.keeps_per_user}, num_groups={metric.num_groups})"
        )
    return metric


class Paired(ScalarResults, OptionalOutputKeys, StatefulMetric):
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
    d², and one count, float64, summed across processes. A user is compared when both models'
    values count (as :func:`paired_test` drops a user with NaN in either).

    ``compute()`` returns what ``metric.compute()`` returns with a :class:`PairedTestResult`
    per value (``method="t"``): ``mean_a``, ``mean_b``, ``mean_difference`` :math:`ar d`, the
    Student-t ``confidence_interval`` of the mean difference at ``level`` and the two-sided
    ``p_value`` of :math:`t = ar d / (s_d / \sqrt n)` with n - 1 degrees of freedom,
    :math:`s_d^2 = (\sum d^2 - n ar d^2) / (n - 1)`: the values of
    ``scipy.stats.ttest_rel(a, b)`` and of ``paired_test(a, b, method="t")`` on the per-user
    values. Attached to an Engine as ``name``, each value's ``mean_a``, ``mean_b``,
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
    _state_dict_all_req_keys = ("_count", "_sum_a", "_sum_b", "_sum_d", "_sum_d2", "_num_invalid_updates")

    _parameter_constraints = {
        "metric": V.Param("a metric that averages over users, built without per_user and num_groups",
                          lambda name, value, arguments: _check_paired_metric(value)),
        "level": V.Param("a confidence level strictly between 0 and 1", lambda name, value, arguments: V.check_level(value)),
    }

    def __init__(self, metric: Any, level: float = 0.95, output_transform: Any = _identity, device: Any = None,
                 skip_unrolling: bool = False):
        self.metric = metric
        self.level = level
        super().__init__(output_transform, device=metric._device if device is None else device,
                         skip_unrolling=skip_unrolling)

    @reinit__is_reduced
    def reset(self) -> None:
        size = self.metric._num_values()
        for key in ("_sum_a", "_sum_b", "_sum_d", "_sum_d2"):
            setattr(self, key, torch.zeros(size, dtype=torch.float64, device=self._device))
        self._count = torch.zeros((), dtype=torch.float64, device=self._device)
        self._num_invalid_updates = torch.zeros((), dtype=torch.float64, device=self._device)

    def _model_rows(self, model: str, y_pred: Any, rest: tuple) -> tuple:
        name = type(self.metric).__name__
        try:
            (batch,) = self.metric._parse((y_pred,) + rest)
        except (TypeError, ValueError) as error:
            raise type(error)(f"Paired({name}), model {model} (y_pred_{model}): {error}") from None
        values, weight, invalid, _ = self.metric._user_rows(batch)
        return values, weight, {f"Paired({name}), model {model}: {message}": flag for message, flag in invalid.items()}, batch

    @reinit__is_reduced
    def update(self, output: Any) -> None:
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
            raise TypeError("Paired.update takes no UserGroups or UserIds (it keeps neither groups nor per-user values)")
        rest = tuple(output[2:])
        a, weight_a, invalid_a, batch = self._model_rows("a", output[0], rest)
        b, weight_b, invalid_b, _ = self._model_rows("b", output[1], rest)
        weight = weight_a * weight_b
        bad = screen({**invalid_a, **invalid_b}, on_cpu=torch.device(batch.device).type == "cpu")
        weights = weight.unsqueeze(1)
        difference = a - b
        totals = {"_sum_a": a, "_sum_b": b, "_sum_d": difference, "_sum_d2": difference * difference}
        zero = torch.zeros((), dtype=torch.float64, device=a.device)
        for key, values in totals.items():  # each value reduced over users as its own contiguous row
            getattr(self, key).add_(torch.where(bad, zero, (values * weights).t().contiguous().sum(1)).to(self._device))
        self._count += torch.where(bad, zero, weight.sum()).to(self._device)
        self._num_invalid_updates += bad.to(torch.float64).to(self._device)

    def compute(self) -> Any:
        count, sum_a, sum_b, sum_d, sum_d2, num_invalid = self._reduced(
            "_count", "_sum_a", "_sum_b", "_sum_d", "_sum_d2", "_num_invalid_updates"
        )
        raise_for_invalid_updates(self, num_invalid)
        n = float(count)
        if n < 2:
            raise NotComputableError(
                f"Paired({type(self.metric).__name__}) needs at least two users compared (counted for both "
                f"models), got {int(n)}"
            )
        mean = sum_d / n
        sem = torch.sqrt(((sum_d2 - sum_d * mean) / (n - 1)).clamp(min=0) / n)
        half = _t_quantile((1 + self.level) / 2, n - 1) * sem
        results = [
            PairedTestResult(_paired_t_p_value(m, e, n - 1), m, (m - h, m + h), "t", int(n), ma, mb)
            for m, e, h, ma, mb in zip(
                mean.tolist(), sem.tolist(), half.tolist(), (sum_a / n).tolist(), (sum_b / n).tolist()
            )
        ]
        return self.metric._result(results)

    def _scalar_keys(self, name: str) -> list:
        keys = self.metric._scalar_keys(name) or [name]
        return [f"{key}/{field}" for key in keys for field in _PAIRED_FIELDS]

    def _scalar_items(self, name: str, result: Any) -> list:
        per_value = self.metric._scalar_items(name, result) or [(name, result)]
        return [(f"{key}/{field}", getattr(value, field)) for key, value in per_value for field in _PAIRED_FIELDS]
