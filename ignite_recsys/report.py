"""A models x metrics results table for papers: means, confidence intervals, significance."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any, Optional, Sequence

import numpy as np

from . import _validation as V
from ._tdist import mean_interval
from .metrics._engine import snake_case
from .stats import (
    CORRECTION_METHODS,
    PAIRED_TEST_METHODS,
    PerUserValues,
    _paired,
    _user_ids_of,
    _values_of,
    correct_p_values,
    declared,
    paired_test,
)

__all__ = ["Report"]


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
    "[": "{[}",  # a row or a cell starting with [ would be read as the optional argument of \\ (a length)
    "]": "{]}",
    "\n": " ",
    "\r": " ",
    "\t": " ",
}
# CommonMark: a backslash before ASCII punctuation shows the character as written (_ and * would
# start emphasis, ` code, [ ] a link, < > an HTML tag or autolink, & an entity such as &lt;,
# ~ strikethrough in GitHub's Markdown, | a new cell); a line break would end the table row
_MARKDOWN_SPECIAL = {char: f"\\{char}" for char in "\\`*_[]<>|&~"}
_MARKDOWN_SPECIAL.update({"\n": " ", "\r": " ", "\t": " "})


# the metrics where a lower value is better (their Report columns are bold at the lowest mean)
LOWER_IS_BETTER = frozenset(
    ("fall_out", "log_loss", "mae", "rmse", "miscalibration", "pop_reo", "pop_rsp", "gini_index", "exposure_gini")
)


def _metric_of(column: str) -> str:
    """The metric a column names: ``"fall_out@10"`` -> ``"fall_out"``, ``"ndcg@10/naive"`` -> ``"ndcg"``."""
    head, at, _ = column.split("/")[0].rpartition("@")
    return (head if at else column.split("/")[0]).lower()


def _latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(char, char) for char in text)


def _markdown_escape(text: str) -> str:
    """A model or column name as written in a Markdown table cell: CommonMark's backslash escape
    before each character that would be read as markup (``|`` would start a cell, ``_`` and ``*``
    emphasis, ``<x>`` an HTML tag, ``&lt;`` an entity)."""

    def escaped(at: int, char: str) -> str:
        # an underscore between two letters or digits never starts emphasis: fall_out stays as typed
        inside = char == "_" and 0 < at < len(text) - 1 and text[at - 1].isalnum() and text[at + 1].isalnum()
        return char if inside else _MARKDOWN_SPECIAL.get(char, char)

    return "".join(escaped(at, char) for at, char in enumerate(text))


def _column_k(metric: Any, column: str) -> Any:
    """The ``k`` that picks ``column`` ("ndcg@10") out of a metric's per-user values."""
    if isinstance(declared(metric, "metrics"), (list, tuple)):  # RankingMetrics: keys are names
        return column
    head, at, tail = column.rpartition("@")
    return int(tail) if at and tail.isdigit() else None


def _models_by_text(name: str, results: Any, arguments: Mapping) -> dict:
    """``results`` with each model named by its text (models keyed by a seed or an epoch number),
    each text different."""
    if not isinstance(results, Mapping) or not results:
        raise TypeError(f"results must be a non-empty mapping model -> {{column: cell}}, got {results!r:.80}")
    names = [str(model) for model in results]
    if len(set(names)) != len(names):
        raise ValueError(f"results must name each model by a different text (str(key)), got keys {list(results)}")
    return dict(zip(names, results.values()))


def _baseline_of(name: str, baseline: Any, arguments: Mapping) -> Optional[str]:
    """None, or the text of one of the models (``results``, checked before)."""
    if baseline is not None and str(baseline) not in arguments["results"]:
        raise ValueError(f"baseline must name one of the models {list(arguments['results'])}, got {baseline!r}")
    return None if baseline is None else str(baseline)


def _significance_level(name: str, alpha: Any, arguments: Mapping) -> float:
    """A probability strictly between 0 and 1 (a bool is no number here)."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 < float(alpha) < 1:
        raise ValueError(f"alpha must be a significance level strictly between 0 and 1 (e.g. 0.05), got {alpha!r}")
    return float(alpha)


def _column_names(name: str, columns: Any, arguments: Mapping) -> Optional[set]:
    """None, or the set of the column names given (which must be columns: checked once the columns
    are read)."""
    if columns is None:
        return None
    if isinstance(columns, (str, bytes)) or not isinstance(columns, Iterable):
        raise TypeError(f"lower_is_better must be None or a sequence of column names, got {columns!r:.80}")
    return set(columns)


class Report:
    r"""A models × metrics results table: each cell the mean with the half-width of its confidence
    interval, the best value of each column in bold, and, against a ``baseline`` model, markers
    of the paired tests that are significant after Holm's correction.

    ``results`` maps each model name to a mapping ``{"ndcg@10": cell, ...}`` (the columns are the
    keys, in first-seen order), or to a whole row: a metric (``RankingMetrics``, a metric with
    cut-offs or of one value) or an :class:`~ignite_recsys.EvaluationResult`, whose values are the
    columns (per-user values when it keeps them, else its means and intervals). A cell is either

    - a summary ``(mean, (low, high))``, shown as is (no test is possible); ``(nan, nan)`` where
      there is no interval (fewer than two users counted, an estimate without one), and a NaN
      mean where no user is counted: such a value shows as a dash, or
    - per-user values: a metric built with ``per_user=True`` (the column's ``@k`` picks the
      cut-off; a :class:`RankingMetrics` is read under the column name), values with their users
      (:class:`~ignite_recsys.PerUserValues`), or a 1-D tensor, array or sequence. The mean is
      over the users without NaN and the interval is the Student-t interval at ``level``, as
      :meth:`confidence_interval` (with one user counted there is no interval; with none, no
      mean: they show as a dash, and such a cell is not tested).

    With ``baseline`` set, every other model's per-user column is compared with the baseline's by
    :func:`paired_test` (``method``, ``a`` the model, ``b`` the baseline), which pairs users by id
    where both cells have ids (metrics updated with :class:`~ignite_recsys.UserIds`, results of
    :func:`~ignite_recsys.evaluate`, :class:`~ignite_recsys.PerUserValues`), by position where
    neither has, and raises a ValueError naming the cell otherwise; the p-values of all these
    comparisons are adjusted together by :func:`correct_p_values` (``correction``). A cell whose
    adjusted p-value is below ``alpha`` gets ``†`` when its mean difference is positive
    (significantly higher than the baseline) and ``‡`` when negative. Higher is better unless the
    column is named in ``lower_is_better`` (bold then marks the lowest mean); by default (None)
    those of the metrics where lower is better: ``fall_out``, ``log_loss``, ``mae``, ``rmse``,
    ``miscalibration``, ``pop_reo``, ``pop_rsp``, ``gini_index``, ``exposure_gini`` (a column
    ``"fall_out@10"`` is ``fall_out``'s). Bold marks every mean that shows as the best at ``digits``.

    Attributes:
        columns: the column names. models: the model names, as text (models keyed by a seed or
            an epoch number, ``Report({0: ..., 1: ...})``, are named ``"0"``, ``"1"``).
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

    level: float
    alpha: float
    digits: int
    models: list
    columns: list
    baseline: Optional[str]
    lower_is_better: set
    tests: dict
    adjusted_p_values: dict

    _parameter_constraints = {
        "results": V.Custom("a non-empty mapping model -> {column: cell}", _models_by_text),
        "baseline": V.Custom("None or one of the models", _baseline_of),
        "level": V.Custom("a real number strictly between 0 and 1", lambda name, value, _: V.check_level(value)),
        "method": V.Options(PAIRED_TEST_METHODS),
        "correction": V.Options(CORRECTION_METHODS),
        "alpha": V.Custom("a significance level strictly between 0 and 1", _significance_level),
        "digits": V.positive_int(),
        "lower_is_better": V.Custom("None or a sequence of column names", _column_names),
    }

    @V.checks_arguments(_parameter_constraints)
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
        lower_is_better: Optional[Sequence[str]] = None,
        **test_options: Any,
    ):
        self.level, self.method, self.correction, self.alpha, self.digits = level, method, correction, alpha, digits
        self.baseline = baseline
        self.models = list(results)  # named by their text: checked different by the declaration
        self.columns: list = []
        self._summary: dict = {}  # (model, column) -> (mean, low, high)
        per_user = self._read_cells(results)
        lower = {column for column in self.columns if _metric_of(column) in LOWER_IS_BETTER}
        if lower_is_better is not None:  # a set of names (the declaration): each must be a column
            lower = set(lower_is_better)
        for column in lower - set(self.columns):
            raise ValueError(f"lower_is_better names {column!r}, which is not a column ({self.columns})")
        self.lower_is_better = lower
        self.tests = self._paired_tests(per_user, test_options)
        adjusted = correct_p_values([test.p_value for test in self.tests.values()], self.correction)
        self.adjusted_p_values = dict(zip(self.tests, adjusted))

    def _read_cells(self, results: Mapping) -> dict:
        """Fill the columns and each cell's summary; return the per-user values of the cells that
        have them, ``{(model, column): values}``."""
        per_user: dict = {}
        for model, cells in results.items():
            _check_summary_level(model, cells, self.level)
            cells = _row_of(cells, self.level)
            if not isinstance(cells, Mapping):
                raise TypeError(
                    f"results[{model!r}] must be a mapping column -> cell, a metric or an EvaluationResult, got "
                    f"{type(cells).__name__}"
                )
            for column, cell in cells.items():
                if column not in self.columns:
                    self.columns.append(column)
                if isinstance(cell, tuple):
                    self._summary[model, column] = self._read_summary(model, column, cell)
                else:
                    values = _values_of(f"results[{model!r}][{column!r}]", cell, _column_k(cell, column))
                    ids = _user_ids_of(cell)  # the tests pair users by id where the cell has them
                    per_user[model, column] = values if ids is None else PerUserValues(values, ids)
                    self._summary[model, column] = self._interval(model, column, values)
        return per_user

    def _paired_tests(self, per_user: dict, test_options: dict) -> dict:
        """``{(model, column): PairedTestResult}``: each model's per-user column against the
        baseline's, where at least two users count in both."""
        tests: dict = {}
        baseline = self.baseline
        if baseline is None:
            return tests
        for model in self.models:
            for column in self.columns:
                if model == baseline or (model, column) not in per_user or (baseline, column) not in per_user:
                    continue
                try:
                    if _both_counted(per_user[model, column], per_user[baseline, column]) < 2:
                        continue  # no test: fewer than two users both count
                    tests[model, column] = paired_test(
                        per_user[model, column],
                        per_user[baseline, column],
                        self.method,
                        level=self.level,
                        **test_options,
                    )
                except ValueError as error:
                    raise ValueError(
                        f"results[{model!r}][{column!r}] (a) cannot be tested against the baseline "
                        f"results[{baseline!r}][{column!r}] (b): {error}"
                    ) from None
        return tests

    @staticmethod
    def _read_summary(model, column, cell) -> tuple:
        try:
            mean, (low, high) = cell
            numbers_ = (float(mean), float(low), float(high))
        except (TypeError, ValueError):
            raise TypeError(
                f"results[{model!r}][{column!r}] must be (mean, (low, high)) or per-user values, got {cell!r:.80}"
            ) from None
        mean, low, high = numbers_
        no_interval = math.isnan(low) and math.isnan(high)
        finite = all(math.isfinite(x) for x in numbers_) and low <= mean <= high
        if not (finite or (no_interval and not math.isinf(mean))):
            raise ValueError(
                f"results[{model!r}][{column!r}] must be finite with low <= mean <= high, or (mean, (nan, nan)) "
                f"where there is no interval (NaN mean: no user counted), got {cell!r}"
            )
        return numbers_

    def _interval(self, model, column, values: np.ndarray) -> tuple:
        """(mean, low, high) of the users without NaN: (value, nan, nan) for one user, all NaN for none."""
        kept = values[~np.isnan(values)]
        if kept.shape[0] < 2:
            return (float(kept[0]) if kept.shape[0] else math.nan), math.nan, math.nan
        return mean_interval(kept, self.level)

    # Rendering ---------------------------------------------------------------------------------
    def marker(self, model: str, column: str) -> str:
        """``"†"`` (significantly higher than the baseline), ``"‡"`` (lower) or ``""``."""
        test = self.tests.get((model, column))
        if test is None or not self.adjusted_p_values[model, column] < self.alpha:
            return ""
        return "†" if test.mean_difference > 0 else "‡" if test.mean_difference < 0 else ""

    def _best(self, column) -> set:
        """The models whose mean shows as the column's best at ``digits`` (equal as shown: all of them)."""
        shown = {
            model: round(self._summary[model, column][0], self.digits)
            for model in self.models
            if (model, column) in self._summary and not math.isnan(self._summary[model, column][0])
        }
        if not shown:
            return set()
        target = (min if column in self.lower_is_better else max)(shown.values())
        return {model for model, mean in shown.items() if mean == target}

    def _cells(self, bold, plus_minus, dagger, double_dagger):
        rows = []
        best = {column: self._best(column) for column in self.columns}
        dash = "–" if plus_minus == "±" else "--"
        for model in self.models:
            row = []
            for column in self.columns:
                if (model, column) not in self._summary or math.isnan(self._summary[model, column][0]):
                    row.append(dash)
                    continue
                mean, low, high = self._summary[model, column]
                text = f"{mean:.{self.digits}f}"
                text = text[1:] if text.startswith("-") and float(text) == 0 else text  # -0.0000: 0 as shown
                if model in best[column]:
                    text = bold(text)
                mark = {"†": dagger, "‡": double_dagger, "": ""}[self.marker(model, column)]
                half = dash if math.isnan(low) else f"{(high - low) / 2:.{self.digits}f}"
                row.append(f"{text}{mark} {plus_minus} {half}")
            rows.append(row)
        return rows

    def caption(self, dagger: str = "†", double_dagger: str = "‡", name: Any = str) -> str:
        """The line that explains the table's cells and markers (``name``: how a model or column
        name is written in it)."""
        level = f"{self.level * 100:g}%"
        lowest = [name(column) for column in self.columns if column in self.lower_is_better]
        best = f"best per column (the lowest for {', '.join(lowest)})" if lowest else "best per column"
        text = f"Mean ± half-width of the {level} confidence interval; bold: {best}."
        summaries = self._summary.values()
        if any(math.isnan(low) and not math.isnan(mean) for mean, low, _ in summaries):
            text += " ± –: no interval (one user counted, or an estimate without one)."
        if any(math.isnan(mean) for mean, _, _ in summaries):
            text += " –: no user counted."
        if self.baseline is not None and self.tests:
            test = {"t": "paired t-test", "randomization": "paired randomization test"}[self.method]
            count = f"{len(self.tests)} comparison{'s' if len(self.tests) > 1 else ''}"
            text += (
                f" {dagger}/{double_dagger}: significantly higher/lower than {name(self.baseline)} ({test} on the "
                f"users both models count, {self.correction.capitalize()}-adjusted p < {self.alpha:g} over {count})."
            )
        elif self.baseline is not None:
            text += (
                f" No test against {name(self.baseline)}: no column holds per-user values of two or more users of "
                "it and another model."
            )
        return text

    def to_markdown(self) -> str:
        """The table in GitHub Markdown, followed by the caption line."""
        header = " | ".join(_markdown_escape(column) for column in self.columns)
        lines = [f"| Model | {header} |", "|:--|" + "--:|" * len(self.columns)]
        for model, row in zip(self.models, self._cells(lambda t: f"**{t}**", "±", "†", "‡")):
            lines.append(f"| {_markdown_escape(model)} | " + " | ".join(row) + " |")
        return "\n".join(lines) + "\n\n" + self.caption(name=_markdown_escape)

    def to_latex(self, label: Optional[str] = None) -> str:
        """A booktabs ``table`` (``\\usepackage{booktabs}``) with the caption; ``label`` adds a
        ``\\label``."""
        rows = self._cells(lambda t: f"\\textbf{{{t}}}", "$\\pm$", "$^{\\dagger}$", "$^{\\ddagger}$")
        caption = _latex_escape(self.caption("@D@", "@DD@")).replace("±", "$\\pm$").replace("@DD@", "$\\ddagger$")
        caption = caption.replace("@D@", "$\\dagger$").replace("–", "--")
        lines = ["\\begin{table}", "\\centering", f"\\caption{{{caption}}}"]
        if label is not None:
            lines.append(f"\\label{{{label}}}")
        lines += [
            f"\\begin{{tabular}}{{l{'r' * len(self.columns)}}}",
            "\\toprule",
            " & ".join(["Model"] + [_latex_escape(c) for c in self.columns]) + " \\\\",
            "\\midrule",
        ]
        for model, row in zip(self.models, rows):
            lines.append(" & ".join([_latex_escape(model)] + row) + " \\\\")
        lines += ["\\bottomrule", "\\end{tabular}", "\\end{table}"]
        return "\n".join(lines)


def _both_counted(a: Any, b: Any) -> int:
    """The users with a value (not NaN) in both per-user cells ``a`` and ``b``, paired as
    :func:`paired_test` pairs them (a ValueError where they cannot be)."""
    first, second = _paired(a, b, _values_of("a", a, None), _values_of("b", b, None))
    if first.shape != second.shape:
        raise ValueError(f"a and b must hold the same users: got {first.shape[0]} and {second.shape[0]} values")
    return int((~(np.isnan(first) | np.isnan(second))).sum())


def _check_summary_level(model: str, value: Any, level: float) -> None:
    """A ValueError for an evaluation result without per-user values whose intervals are at
    another level than the Report's (its cells would show them under the Report's level)."""
    if not callable(getattr(type(value), "to_report", None)) or value._per_user is not None:
        return
    if getattr(value, "level", level) != level:
        raise ValueError(
            f"results[{model!r}] holds intervals at level={value.level:g} (evaluate(..., level=...)) and no "
            f"per-user values, but the Report shows level={level:g}: pass level={value.level:g} to Report, or "
            "evaluate with per_user=True (the intervals are then computed at the Report's level)"
        )


def _row_of(value: Any, level: float) -> Any:
    """The cells of a whole row given as a metric or an evaluation result: {column: cell}, the
    column names those of its results ("ndcg@10", "r_precision"). A metric with per-user values
    gives them (tests possible); otherwise each cell is its summary (mean, (low, high))."""
    if isinstance(value, Mapping):
        return value
    if callable(getattr(type(value), "to_report", None)):  # an EvaluationResult
        return value.to_report()
    if callable(getattr(type(value), "confidence_interval", None)):  # a metric that averages over users
        means, intervals = value.compute(), value.confidence_interval(level=level)
        ids = _user_ids_of(value)  # with UserIds: each column carries them, so the tests pair by id

        def cell(values):
            return values if ids is None else PerUserValues(values, ids)

        if declared(value, "keeps_per_user", False):
            per_user = value.per_user()
            if isinstance(per_user, Mapping):
                return {key: cell(values) for key, values in per_user.items()}
        if isinstance(means, Mapping):
            keys = list(means)
            means, intervals = list(means.values()), list(intervals.values())
        elif isinstance(means, (list, tuple)):
            keys = (
                list(value.compute_dict())
                if callable(declared(value, "compute_dict"))
                else [f"@{k}" for k in value.top_k]
            )
        else:
            keys, means, intervals = [snake_case(type(value).__name__)], [means], [intervals]
        if declared(value, "keeps_per_user", False):
            rows = value.per_user()
            columns = rows.unbind(1) if rows.ndim == 2 else [rows]
            return {key: cell(values) for key, values in zip(keys, columns)}
        return {key: (mean, tuple(interval)) for key, mean, interval in zip(keys, means, intervals)}
    return value
