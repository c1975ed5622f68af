"""The command line: ``ignite-recsys evaluate`` and ``ignite-recsys compare`` (or ``python -m
ignite_recsys ...``).

Exit codes: 0 success; 1 an unexpected error; 2 a usage error (bad or missing options, an unknown
metric name or convention, a device torch does not have); 3 a file that does not exist or cannot
be opened or written; 4 a malformed or empty file (the message names the file, the line and the
column); 5 a missing optional package (the message names the extra to install); 6 nothing to
evaluate (no test user counted).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import stat
import sys
import tempfile
import textwrap
import warnings
from typing import Any, List, Optional, Sequence

import numpy as np
import torch

from . import _validation as V
from ._registry import ALL_METRICS, CUTOFF_METRICS, ranking_metrics_options
from .data import FileFormatError
from .data._optional import require
from .data.files import read_interactions
from .evaluation import ALIASES, evaluate
from .inputs import DotScores
from .report import Report
from .stats import CORRECTION_METHODS, PAIRED_TEST_METHODS

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NO_FILE, EXIT_MALFORMED, EXIT_MISSING_PACKAGE, EXIT_NOTHING = range(7)


def _metric_names() -> str:
    """The metric names of the registry, and the other spellings accepted, for ``--help``."""
    cut = ", ".join(name for name in ALL_METRICS if name in CUTOFF_METRICS)
    uncut = ", ".join(name for name in ALL_METRICS if name not in CUTOFF_METRICS)
    aliases = ", ".join(sorted(alias for alias, name in ALIASES.items() if alias != name))
    return (
        textwrap.fill(f"metrics: {cut} with a cut-off (ndcg@10, or several: ndcg@1,5,10), and {uncut} without one.", 96)
        + "\n"
        + textwrap.fill(f"also read: {aliases} (e.g. P@10, ndcg_cut_10, recip_rank@100, success@5, Rprec).", 96)
        + "\n"
    )


FILES = """\
files: TREC run (qid Q0 docid rank score tag) and qrels (qid 0 docid rel) text files, and
parquet or CSV/TSV tables with a header (user/qid, item/docid, score or value/rel columns).
exit codes: 0 ok, 1 unexpected error, 2 usage error, 3 file not found or not writable,
4 malformed or empty file, 5 missing optional package, 6 no test user to count.
"""

EVALUATE_EXAMPLES = """\
examples:
  ignite-recsys evaluate --qrels test.qrels --run model.trec --metrics ndcg@1,5,10,recall@20,r_precision
  ignite-recsys evaluate --qrels test.parquet --run scores.parquet --exclude train.parquet \\
      --metrics ndcg@10,P@10 --format json --output result.json
  ignite-recsys evaluate --qrels test.qrels --run model.trec --metrics ndcg_cut_10,map_cut_1000 --trec-eval --per-user
"""

COMPARE_EXAMPLES = """\
examples:
  ignite-recsys compare --qrels test.qrels --run baseline.trec --run model.trec --metrics ndcg@10,recall@20
  ignite-recsys compare --qrels test.qrels --run a.trec --run b.trec --run c.trec --metrics ndcg@10 \\
      --stat-test randomization --format latex --output table.tex
"""


def _flag(argument: str) -> str:
    return "--" + argument.replace("_", "-")


def _plain(text: str) -> str:
    """A registry description without reStructuredText markup (for ``--help``)."""
    return re.sub(r"``([^`]*)``", r"\1", text).replace("%", "%%")


def _add_conventions(group: Any) -> None:
    """One option per convention argument of RankingMetrics, read from the registry."""
    for argument, option in ranking_metrics_options().items():
        description = re.sub(r",? or a callable .*$", "", option.description)  # not from a command line
        if option.choices and not any(f'"{value}"' in description for value in option.values):
            description += " (" + "; ".join(f"{c.value}: {c.reproduces}" for c in option.choices) + ")"
        help_text = f"{_plain(description)}; default {option.default!r}"
        if argument == "gain_function":
            group.add_argument(_flag(argument), choices=V.GAIN_FUNCTIONS, help=help_text)
        elif option.values:
            group.add_argument(_flag(argument), choices=option.values, help=help_text)
        elif isinstance(option.default, bool):
            group.add_argument(_flag(argument), choices=("true", "false"), help=help_text)
        elif isinstance(option.default, (int, float)):
            group.add_argument(_flag(argument), type=float, metavar="X", help=help_text)
        else:  # pragma: no cover - a new kind of convention needs its option here
            raise TypeError(f"no command-line option for the convention {argument!r}")


def _common(parser: argparse.ArgumentParser, formats: Sequence[str]) -> None:
    """The options that evaluate and compare share (``--run`` is each command's own)."""
    parser.add_argument(
        "--qrels",
        "--test",
        dest="qrels",
        required=True,
        help="test interactions: a TREC qrels file or a parquet/CSV table",
    )
    parser.add_argument(
        "--metrics",
        required=True,
        help="comma-separated names, e.g. ndcg@10,recall@20 (ndcg@1,5,10: one metric at several cut-offs)",
    )
    parser.add_argument("--exclude", help="interactions to exclude (e.g. the training history), a file")
    parser.add_argument("--format", choices=formats, default="table", help="output format (default: table)")
    parser.add_argument("--output", "-o", metavar="FILE", help="write the output to FILE instead of stdout")
    parser.add_argument(
        "--qrels-format",
        choices=("trec", "parquet", "csv", "tsv"),
        help="default: from the file name (.parquet, .csv, .tsv; anything else is TREC)",
    )
    parser.add_argument("--run-format", choices=("trec", "parquet", "csv", "tsv"), help="as --qrels-format")
    parser.add_argument("--user-col", help="the user column of the tables (default: user, qid, ...)")
    parser.add_argument("--item-col", help="the item column of the tables (default: item, docid, ...)")
    parser.add_argument("--value-col", help="the grade column of the test table (default: value, rel, ...)")
    parser.add_argument("--score-col", help="the score column of the run table (default: score)")
    parser.add_argument("--num-items", type=int, help="the catalog size (default: from the test table)")
    parser.add_argument(
        "--run-ties",
        choices=("docid", "order"),
        default="docid",
        help="equal scores: the larger item id first (trec_eval; default) or file order",
    )
    parser.add_argument("--level", type=float, default=0.95, help="confidence level of the intervals")
    parser.add_argument("--batch-size", type=int, help="users per update (default 1024)")
    parser.add_argument("--device", default="cpu", help="torch device of the metrics (cpu, cuda, cuda:1, ...)")
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar (one is shown only when stderr is a terminal)"
    )
    conventions = parser.add_argument_group("conventions (each metric's default unless given)")
    conventions.add_argument(
        "--trec-eval",
        action="store_true",
        help="trec_eval's conventions: linear gains, MAP divided by |R|, users without a relevant item "
        "counted (as ranx), scores compared as 32-bit floats; an option below overrides it",
    )
    conventions.add_argument(
        "--score-precision",
        choices=("float64", "float32"),
        help="float32: scores equal as 32-bit floats tie, as in trec_eval, which stores them so (default float64)",
    )
    conventions.add_argument(
        "--relevance-threshold", type=float, help="an item is relevant when its grade is at least this (default 1)"
    )
    conventions.add_argument(
        "--ignore-zero-hits",
        choices=("true", "false"),
        help="skip users without a relevant item (default true; false counts them as 0)",
    )
    _add_conventions(conventions)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ignite-recsys",
        description="Recommender and retrieval evaluation from files, with ignite_recsys's metrics.",
        epilog=_metric_names(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _add_evaluate_command(commands)
    _add_compare_command(commands)
    return parser


def _add_evaluate_command(commands: argparse._SubParsersAction) -> None:
    """The ``evaluate`` subcommand: one run against the test interactions."""
    evaluate_command = commands.add_parser(
        "evaluate",
        help="evaluate a run against test interactions (qrels)",
        description=textwrap.fill(
            "Evaluate a run against test interactions (qrels): each user's items ranked by score, "
            "metrics averaged over the test users.",
            96,
        ),
        epilog=EVALUATE_EXAMPLES + "\n" + _metric_names() + FILES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    evaluate_command.add_argument("--run", help="the run: a TREC run file or a parquet/CSV table")
    vectors = evaluate_command.add_argument_group(
        "vectors (instead of --run: user u scores item i by user_vectors[u] @ item_vectors[i] + item_bias[i])"
    )
    vectors.add_argument(
        "--user-vectors", metavar="U.npy", help="(users, d) floats, .npy (row u is user id u) or parquet (id, vector)"
    )
    vectors.add_argument(
        "--item-vectors", metavar="V.npy", help="(items, d) floats, .npy (row i is item id i) or parquet (id, vector)"
    )
    vectors.add_argument("--item-bias", metavar="B.npy", help="(items,) floats, .npy (default: none)")
    vectors.add_argument("--user-ids", metavar="IDS.npy", help="the id of each row of --user-vectors (default 0..n-1)")
    vectors.add_argument("--item-ids", metavar="IDS.npy", help="the id of each row of --item-vectors (default 0..n-1)")
    evaluate_command.add_argument(
        "--per-user",
        action="store_true",
        help="each user's values too: with --format table as trec_eval -q (metric, user, value lines, then "
        "'all' for the means), with --format json under per_user",
    )
    evaluate_command.add_argument(
        "--sampled",
        type=int,
        metavar="N",
        help="rank each test item among N sampled negatives (naive and corrected estimates; see the docs' Sampled "
        "evaluation page)",
    )
    _common(evaluate_command, ("table", "json", "latex", "markdown"))


def _add_compare_command(commands: argparse._SubParsersAction) -> None:
    """The ``compare`` subcommand: two or more runs on the same test interactions, paired tests."""
    compare_command = commands.add_parser(
        "compare",
        help="compare two or more runs on the same test interactions, with paired tests",
        description=textwrap.fill(
            "Compare runs on the same test interactions: each run's means, and for every run after the "
            "first a paired test against the first run on the same users, the p-values of all the "
            "comparisons corrected together (Holm by default). A mean significantly higher than the "
            "first run's is marked +, lower -, in the table (†/‡ in Markdown and LaTeX).",
            96,
        ),
        epilog=COMPARE_EXAMPLES + "\n" + _metric_names() + FILES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    compare_command.add_argument(
        "--run",
        action="append",
        required=True,
        metavar="RUN",
        help="a run (TREC run file or parquet/CSV table), given two or more times; the first is the baseline",
    )
    compare_command.add_argument(
        "--name",
        action="append",
        metavar="NAME",
        help="the name of each run in the output, in the order of --run (default: the file names)",
    )
    compare_command.add_argument(
        "--stat-test", dest="method", choices=PAIRED_TEST_METHODS, default="t", help="the paired test (default t)"
    )
    compare_command.add_argument(
        "--correction",
        choices=CORRECTION_METHODS,
        default="holm",
        help="the correction of the p-values for the number of comparisons (default holm)",
    )
    compare_command.add_argument(
        "--alpha", type=float, default=0.05, help="significance level of the markers (default 0.05)"
    )
    compare_command.add_argument(
        "--permutations", type=int, default=10000, help="random sign flips of the randomization test (default 10000)"
    )
    compare_command.add_argument("--seed", type=int, default=0, help="seed of the randomization test (default 0)")
    compare_command.add_argument(
        "--per-user",
        action="store_true",
        help="each run's per-user values too: with --format table after the comparison (run, metric, user, value "
        "lines, then 'all' for the means), with --format json under per_user (one list per run)",
    )
    _common(compare_command, ("table", "json", "latex", "markdown"))


def _conventions(args: argparse.Namespace) -> dict:
    conventions: dict = {}
    if args.trec_eval:
        conventions.update(
            gain_function="linear_rank", map_normalization="relevant", ignore_zero_hits=False, score_precision="float32"
        )
    if args.score_precision is not None:
        conventions["score_precision"] = args.score_precision
    if args.relevance_threshold is not None:
        conventions["relevance_threshold"] = args.relevance_threshold
    if args.ignore_zero_hits is not None:
        conventions["ignore_zero_hits"] = args.ignore_zero_hits == "true"
    for argument, option in ranking_metrics_options().items():
        value = getattr(args, argument)
        if value is not None:
            conventions[argument] = value == "true" if isinstance(option.default, bool) else value
    return conventions


class UsageError(ValueError):
    """A bad option value found after parsing (exit code 2)."""


def _check_device(name: str) -> None:
    try:
        torch.empty(0, device=name)
    except (RuntimeError, ValueError, AssertionError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageError(f"--device {name!r} is not a device torch can use here ({first})") from None


def _finite(value: Any) -> Any:
    """``value`` with NaN floats as None (JSON has no NaN)."""
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _users(result: Any) -> list:
    """The users of the per-user values, as the test table holds them (str or int)."""
    ids = result.user_ids
    return list(ids.tolist() if hasattr(ids, "tolist") else ids)


DASH = "-"  # a value that does not exist in the text table: no user counted, no interval


def _number(value: float, spec: str = "8.4f") -> str:
    return f"{DASH:>{spec.split('.')[0]}}" if math.isnan(value) else f"{value:{spec}}"


def _interval(low: float, high: float) -> Optional[list]:
    """An interval as JSON writes it: null where there is none (fewer than two values counted, or an
    estimate without one)."""
    return None if math.isnan(low) or math.isnan(high) else [low, high]


def _summary_table(result: Any) -> List[str]:
    width = max(len(key) for key in result.means)
    lines = [f"{'metric':<{width}}  {'mean':>8}  {int(round(result.level * 100))}% interval"]
    for key, mean in result.means.items():
        low, high = result.intervals[key]
        shown = DASH if _interval(low, high) is None else f"[{low:.4f}, {high:.4f}]"
        lines.append(f"{key:<{width}}  {_number(mean)}  {shown}")
    return lines


def _info_line(info: dict) -> str:
    if "run_rows_not_in_test" not in info:  # a model's scores or vectors: every test user is scored
        return f"{info['test_users']} test users"
    return (
        f"{info['test_users']} test users; {info.get('test_users_not_in_run', 0)} not in the run "
        f"(empty lists); {info.get('run_rows_not_in_test', 0)} run row(s) of users not in the test set"
    )


def _counted(result: Any) -> Optional[dict]:
    """``{"ndcg@10": users counted}``: the per-user values that are not NaN (None without them)."""
    if getattr(result, "_per_user", None) is None:
        return None
    return {key: int((~torch.isnan(values)).sum()) for key, values in result.per_user().items()}


def _counted_line(result: Any) -> Optional[str]:
    """How many users each mean counts, and why the others are not counted."""
    if "sampled" in result.info:  # the estimates are means over the test items
        items, negatives = result.info.get("test_items"), result.info["sampled"].get("num_negatives")
        return f"each mean: over the {items} test items, each ranked among {negatives} sampled negatives"
    counted = _counted(result)
    if counted is None:
        return None
    total = len(_users(result))
    groups: dict = {}
    for key, count in counted.items():
        groups.setdefault(count, []).append(key)
    parts = []
    for count, keys in groups.items():
        names = "each mean" if len(groups) == 1 else ", ".join(keys)
        if count == total:
            parts.append(f"{names}: over all {total} test users")
        else:
            parts.append(
                f"{names}: over {count} of the {total} test users; {total - count} not counted, as they have no "
                "relevant test item (ignore_zero_hits, the default; --ignore-zero-hits false or --trec-eval "
                "counts them as 0)"
            )
    return "; ".join(parts)


def _render_evaluation(result: Any, args: argparse.Namespace) -> str:
    if args.format == "json":
        document: dict = {
            "means": result.means,
            "intervals": {key: _interval(*value) for key, value in result.intervals.items()},
            "level": result.level,
            "info": result.info,
        }
        counted = _counted(result)
        if counted is not None and "sampled" not in result.info:
            document["users_counted"] = counted
        if args.per_user:
            document["per_user"] = _per_user_rows(result)
        return json.dumps(_finite(document), indent=2, ensure_ascii=False)
    if args.format in ("latex", "markdown"):
        name = os.path.basename(str(args.run))
        report = Report(
            {name: {key: (result.means[key], result.intervals[key]) for key in result.means}}, level=result.level
        )
        return report.to_latex() if args.format == "latex" else report.to_markdown()
    if args.per_user:  # trec_eval -q: one line per (metric, user) counted, then the means as user "all"
        lines = []
        values = {key: value.tolist() for key, value in result.per_user().items()}
        for row, user in enumerate(_users(result)):
            for key in values:
                if not math.isnan(values[key][row]):
                    lines.append(f"{key}\t{user}\t{values[key][row]:.4f}")
        lines += [f"{key}\tall\t{_number(mean, '.4f')}" for key, mean in result.means.items()]
        return "\n".join(lines)
    counted_line = _counted_line(result)
    footer = [_info_line(result.info)] + ([counted_line] if counted_line else [])
    return "\n".join(_summary_table(result) + [""] + footer)


def _run_names(args: argparse.Namespace) -> List[str]:
    if args.name is not None:
        if len(args.name) != len(args.run):
            raise UsageError(f"--name must be given once per --run ({len(args.run)} times), got {len(args.name)}")
        names = list(args.name)
    else:
        names = [os.path.basename(os.fspath(run)) or os.fspath(run) for run in args.run]
        if len(set(names)) != len(names):
            names = [os.fspath(run) for run in args.run]
    if len(set(names)) != len(names):
        raise UsageError(f"each run needs its own name, got {names}: name them with --name")
    return names


def _p_value(p: float) -> str:
    """A p-value to 4 decimals, or in scientific notation below 1e-4 (not as 0.0000)."""
    return f"{p:.4f}" if p >= 1e-4 or p == 0 else f"{p:.1e}"


def _render_comparison(report: Report, results: dict, args: argparse.Namespace) -> str:
    if args.format == "latex":
        return report.to_latex()
    if args.format == "markdown":
        return report.to_markdown()
    rows = _comparison_rows(report, results)
    if args.format == "json":
        return _comparison_json(report, results, rows, args)
    lines = _comparison_table(report, list(results), rows, args) + [""] + _comparison_footer(report, results, args)
    if args.per_user:  # each run's per-user values, as evaluate --per-user with the run first
        lines += ["", "run\tmetric\tuser\tvalue"] + _per_user_lines_of_runs(results)
    return "\n".join(lines).rstrip()


def _comparison_rows(report: Report, results: dict) -> list:
    """One row a (run, metric): its mean and, against the baseline, the test's figures."""
    rows = []
    for name in results:
        for column in report.columns:
            test = report.tests.get((name, column))
            marker = report.marker(name, column)
            rows.append(
                {
                    "run": name,
                    "metric": column,
                    "mean": results[name].means[column],
                    "users_counted": (_counted(results[name]) or {}).get(column),
                    "difference": None if test is None else test.mean_difference,
                    "p_value": None if test is None else test.p_value,
                    "adjusted_p_value": None if test is None else report.adjusted_p_values[name, column],
                    "significant": None if test is None else marker != "",
                    "marker": {"†": "+", "‡": "-", "": ""}[marker],
                }
            )
    return rows


def _comparison_json(report: Report, results: dict, rows: list, args: argparse.Namespace) -> str:
    document = {
        "baseline": report.baseline,
        "test": args.method,
        "correction": args.correction,
        "alpha": args.alpha,
        "rows": rows,
        "info": {name: result.info for name, result in results.items()},
    }
    if args.per_user:
        document["per_user"] = {name: _per_user_rows(result) for name, result in results.items()}
    return json.dumps(_finite(document), indent=2, ensure_ascii=False)


def _comparison_table(report: Report, names: List[str], rows: list, args: argparse.Namespace) -> List[str]:
    """The header and one line a row: run, metric, mean, and the difference, p-values and marker."""
    name_width = max(len("run"), *(len(name) for name in names))
    metric_width = max(len("metric"), *(len(column) for column in report.columns))
    header = (
        f"{'run':<{name_width}}  {'metric':<{metric_width}}  {'mean':>8}  {'diff':>8}  {'p':>8}  "
        f"{args.correction + ' p':>9}"
    )
    lines = [header]
    for row in rows:
        if row["p_value"] is None:
            tail = f"{'':>8}  {'':>8}  {'':>9}"
        else:
            tail = (
                f"{row['difference']:+8.4f}  {_p_value(row['p_value']):>8}  "
                f"{_p_value(row['adjusted_p_value']):>9} {row['marker']}"
            )
        line = f"{row['run']:<{name_width}}  {row['metric']:<{metric_width}}  {_number(row['mean'])}  {tail}"
        lines.append(line.rstrip())
    return lines


def _comparison_footer(report: Report, results: dict, args: argparse.Namespace) -> List[str]:
    """What the table's tests are, the users and rows read (per run where they differ), and the
    users counted."""
    names, baseline = list(results), report.baseline
    test = {"t": "paired t-test", "randomization": "paired randomization test"}[args.method]
    lines = [
        f"diff, p: against {baseline} ({test} on the users both count; {args.correction}-corrected p over "
        f"{len(report.tests)} comparison{'s' if len(report.tests) != 1 else ''}); +/-: significantly "
        f"higher/lower at {args.alpha:g}",
        _info_line(results[baseline].info) + f" (of {baseline})",
    ]
    for name, result in results.items():  # a compared run's own users and rows, where they differ
        if name != baseline and _info_line(result.info) != _info_line(results[baseline].info):
            lines.append(_info_line(result.info) + f" (of {name})")
    untested = len(names) > 1 and len(report.tests) < (len(names) - 1) * len(report.columns)
    if untested:
        lines.append("no test where a run or the baseline counts fewer than two users (blank diff and p)")
    counted_lines = [(name, _counted_line(result)) for name, result in results.items()]
    for name, text in counted_lines:
        if text and (name == baseline or text != counted_lines[0][1]):
            alike = len({text for _, text in counted_lines}) == 1
            lines.append(text + ("" if alike else f" (of {name})"))
    return lines


def _per_user_lines_of_runs(results: dict) -> List[str]:
    """Run, metric, user, value lines of each user counted, then each run's means as user "all"."""
    lines = []
    for name, result in results.items():
        kept = {key: value.tolist() for key, value in result.per_user().items()}
        for index, user in enumerate(_users(result)):
            for key in kept:
                if not math.isnan(kept[key][index]):
                    lines.append(f"{name}\t{key}\t{user}\t{kept[key][index]:.4f}")
        lines += [f"{name}\t{key}\tall\t{_number(mean, '.4f')}" for key, mean in result.means.items()]
    return lines


def _per_user_rows(result: Any) -> list:
    """``[{"user": id, "ndcg@10": value (NaN: not counted), ...}]`` of a result's per-user values."""
    values = {key: value.tolist() for key, value in result.per_user().items()}
    return [{"user": user, **{key: values[key][row] for key in values}} for row, user in enumerate(_users(result))]


def _read_test(args: argparse.Namespace, vectors: bool = False) -> tuple:
    table = {"user": args.user_col, "item": args.item_col}
    num_items = None if vectors else args.num_items  # the vectors' catalog is their item rows
    test = read_interactions(args.qrels, format=args.qrels_format, value=args.value_col, num_items=num_items, **table)
    if len(test.users) == 0:
        raise FileFormatError(args.qrels, None, None, "holds no test interactions: nothing to evaluate")
    exclude = None
    if args.exclude is not None:
        exclude = read_interactions(
            args.exclude, format=None, user_map=test.user_map, item_map=test.item_map, duplicates="max", **table
        )
    return test, exclude


VECTOR_OPTIONS = ("user_vectors", "item_vectors", "item_bias", "user_ids", "item_ids")


def _evaluated_inputs(args: argparse.Namespace) -> tuple:
    """(scores, test, exclude) of ``evaluate``: the run, or the vectors as a DotScores whose rows
    number the test table's users and items."""
    given = [_flag(name) for name in VECTOR_OPTIONS if getattr(args, name) is not None]
    if args.run is not None and given:
        raise UsageError(f"give either --run or the vectors, not both (got --run and {' '.join(given)})")
    if args.run is not None:
        return (args.run, *_read_test(args))
    if args.user_vectors is None or args.item_vectors is None:
        raise UsageError("evaluate needs --run, or --user-vectors and --item-vectors")
    (users, user_ids), (items, item_ids) = (
        _vector_file(path, option, ids, _flag(ids_name))
        for path, option, ids, ids_name in (
            (args.user_vectors, "--user-vectors", args.user_ids, "user_ids"),
            (args.item_vectors, "--item-vectors", args.item_ids, "item_ids"),
        )
    )
    if users.shape[1] != items.shape[1]:
        raise UsageError(
            f"--item-vectors has width d = {items.shape[1]} but --user-vectors has d = {users.shape[1]}: the vectors "
            "must be of one width"
        )
    bias = None if args.item_bias is None else _npy(args.item_bias, "--item-bias", 1)
    if bias is not None and len(bias) != len(items):
        raise UsageError(
            f"--item-bias holds {len(bias)} values, but --item-vectors has {len(items)} rows: give one per row"
        )
    test, exclude = _read_test(args, vectors=True)
    user_map = _row_ids(user_ids, _ids_named(args.user_vectors, "user"), len(users), "--user-vectors", test.user_map)
    item_map = _row_ids(item_ids, _ids_named(args.item_vectors, "item"), len(items), "--item-vectors", test.item_map)
    test = _numbered(test, user_map, item_map)
    _check_known_ids(user_map, len(users), "user", "--qrels", "--user-vectors")  # before exclude's users join
    exclude = None if exclude is None else _numbered(exclude, user_map, item_map)
    _check_known_ids(item_map, len(items), "item", "--qrels or --exclude", "--item-vectors")
    dtype = np.result_type(users, items, *([bias] if bias is not None else []))
    user_vectors, item_vectors = (
        torch.from_numpy(np.ascontiguousarray(array, dtype=dtype)) for array in (users, items)
    )
    item_bias = None if bias is None else torch.from_numpy(bias.astype(dtype))
    return DotScores(user_vectors, item_vectors, item_bias), test, exclude


def _npy(path: str, option: str, ndim: int) -> np.ndarray:
    """The floating-point array of the .npy file ``path`` with ``ndim`` dimensions (a UsageError naming
    ``option`` otherwise)."""
    if not str(path).endswith(".npy"):
        raise UsageError(f"{option} {path}: give a .npy file (numpy.save){' or a .parquet table' if ndim == 2 else ''}")
    array = np.load(path, allow_pickle=False)
    shape = "(rows, d)" if ndim == 2 else "(items,)"
    if array.ndim != ndim or array.dtype.kind != "f" or array.dtype.itemsize < 4:
        raise UsageError(
            f"{option} {path} must hold a {shape} array of float32 or float64, got {array.dtype} {array.shape}"
        )
    return array


def _vector_file(path: str, option: str, ids_path: Optional[str], ids_option: str) -> tuple:
    """(vectors, ids or None) of ``option``: a .npy array (the ids from the .npy file ``ids_path``,
    if given), or a parquet table whose first column holds the row ids and the other columns the
    vector's entries (float columns in order, or one list column)."""
    if not str(path).endswith(".parquet"):
        return _npy(path, option, 2), None if ids_path is None else _ids_file(ids_path, ids_option)
    if ids_path is not None:
        raise UsageError(f"{ids_option} is for a .npy {option}: the first column of {path} gives the ids")
    pa = require("pyarrow", "reading parquet vectors")
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    columns = table.columns[1:]
    kind = columns[0].type if len(columns) == 1 else None
    if kind is not None and (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    ):
        rows = columns[0].to_pylist()
        widths = {len(row) if row is not None else -1 for row in rows}
        if len(widths) > 1 or -1 in widths:
            raise UsageError(f"{option} {path}: every row's vector must have one width (no missing vector)")
        vectors = np.array(rows, dtype=np.float64).reshape(len(rows), widths.pop() if widths else 0)
    elif columns and all(pa.types.is_floating(column.type) and column.null_count == 0 for column in columns):
        if any(pa.types.is_float16(column.type) for column in columns):  # as a .npy file of float16 is
            raise UsageError(f"{option} {path} must hold float32 or float64 columns, got float16")
        vectors = np.column_stack([column.to_numpy() for column in columns])
    else:
        raise UsageError(
            f"{option} {path} must hold an id column, then float columns (the vector's entries) or one list column"
        )
    ids = table.column(0).to_numpy(zero_copy_only=False)
    return vectors, ids.astype(str) if ids.dtype.kind == "O" else ids


def _ids_named(path: str, role: str) -> str:
    """Where the ids of the vectors of ``path`` come from, as an error names it."""
    return f"the id column of --{role}-vectors" if str(path).endswith(".parquet") else f"--{role}-ids"


def _ids_file(path: str, option: str) -> np.ndarray:
    if not str(path).endswith(".npy"):
        raise UsageError(f"{option} {path}: give a .npy file (numpy.save)")
    return np.load(path, allow_pickle=False)


def _row_ids(ids: Optional[np.ndarray], option: str, rows: int, of: str, read: Any) -> Any:
    """The IdMap of the rows of ``of``: ``ids``, one per row, or 0..rows-1, as the files' ids are
    written (a TREC file's ids are text: row 7 is ``"7"``; ``read``: the map the test file was
    read with)."""
    from .data import IdMap

    if ids is None:
        ids = np.arange(rows, dtype=np.int64)
    if ids.ndim != 1 or ids.dtype.kind not in "iuU":
        raise UsageError(f"{option} must hold a 1-D array of integer or string ids, got {ids.dtype} {ids.shape}")
    if len(ids) != rows:
        raise UsageError(f"{option} holds {len(ids)} ids, but {of} has {rows} rows: give one id per row")
    if len(np.unique(ids)) != len(ids):
        raise UsageError(
            f"{option} holds an id twice ({ids[np.argmax(~_first(ids))].item()!r}): give each row its own id"
        )
    if read.kind == "str":
        return IdMap(ids.astype(str).astype(object))
    if ids.dtype.kind == "U":
        raise UsageError(f"{option} holds text ids, but the ids of --qrels are integers")
    return IdMap(ids.astype(np.int64))


def _first(ids: np.ndarray) -> np.ndarray:
    """Whether each id is the first of its value."""
    first = np.zeros(len(ids), dtype=bool)
    first[np.unique(ids, return_index=True)[1]] = True
    return first


def _numbered(table: Any, user_map: Any, item_map: Any) -> Any:
    """``table`` with its users and items numbered by the vectors' rows (an id without a row is
    appended to the map: :func:`_check_known_ids` refuses it)."""
    from .data import Interactions

    users, items, values = table.pairs()
    users, items = table.user_map.decode(users), table.item_map.decode(items)
    return Interactions(users, items, values, user_map=user_map, item_map=item_map, duplicates="max")


def _check_known_ids(id_map: Any, rows: int, role: str, where: str, option: str) -> None:
    """A UsageError where ``where`` named a ``role`` without a row in the vectors of ``option`` (the
    files were numbered by the rows' map, which appends an id it does not hold)."""
    if len(id_map) > rows:
        ids = "--user-ids" if role == "user" else "--item-ids"
        raise UsageError(
            f"{role} {id_map.ids[rows]!r} of {where} has no row in {option} ({len(id_map) - rows} such ids; "
            f"{ids} gives the id of each row, by default 0 to {rows - 1})"
        )


def _evaluate(run: Any, test: Any, exclude: Any, args: argparse.Namespace, per_user: bool) -> Any:
    return evaluate(
        run,
        test,
        args.metrics,
        exclude=exclude,
        num_items=args.num_items,
        batch_size=args.batch_size,
        device=args.device,
        level=args.level,
        per_user=per_user,
        progress=not args.no_progress,  # evaluate() draws it only on a terminal (progress_shown)
        run_ties=args.run_ties,
        run_columns=(args.user_col, args.item_col, args.score_col),
        run_format=args.run_format,
        num_threads=max(1, torch.get_num_threads() - 1),
        sampled=getattr(args, "sampled", None),
        **_conventions(args),
    )


def _inputs(args: argparse.Namespace) -> List[tuple]:
    """(option, path) of every file the command reads."""
    runs = args.run if isinstance(args.run, list) else [args.run] if args.run is not None else []
    named = [("--qrels", args.qrels)] + [("--run", run) for run in runs]
    named += [(_flag(name), getattr(args, name)) for name in VECTOR_OPTIONS if getattr(args, name, None) is not None]
    return named + ([("--exclude", args.exclude)] if args.exclude is not None else [])


def _same_file(output: str, given: str) -> bool:
    """Whether ``output`` names the regular file ``given`` (by another spelling, a symbolic or a
    hard link): writing there would replace it. A pipe or device (``--run /dev/stdin --output
    /dev/stdout`` on one terminal) is not replaced by a write."""
    if not os.path.isfile(given):
        return False
    try:
        return os.path.samefile(output, given)
    except OSError:  # the output does not exist yet
        return False


def _check_output(args: argparse.Namespace) -> None:
    """A UsageError when ``--output`` names one of the inputs (it would be replaced by the results)."""
    if args.output is None:
        return
    for option, path in _inputs(args):
        if _same_file(args.output, path):
            raise UsageError(
                f"--output {args.output} is the file given to {option}: writing the results there would replace "
                "it; give another output file"
            )


def _typed_conventions(args: argparse.Namespace) -> List[str]:
    """The options that set conventions, as typed on the command line."""
    typed = ["--trec-eval"] if args.trec_eval else []
    names = ["score_precision", "relevance_threshold", "ignore_zero_hits", *ranking_metrics_options()]
    return typed + [_flag(name) for name in names if getattr(args, name) is not None]


def _command(args: argparse.Namespace) -> str:
    """The output of the command (raises on errors, mapped to exit codes by :func:`main`)."""
    _check_output(args)
    _check_device(args.device)
    if args.per_user and args.format in ("latex", "markdown"):
        raise UsageError("--per-user is written with --format table or json")
    if args.command == "evaluate":
        sampled = args.sampled is not None
        if sampled and _typed_conventions(args):
            raise UsageError(
                f"--sampled takes none of the options that set conventions (its estimates have their own), got "
                f"{' '.join(_typed_conventions(args))}"
            )
        scores, test, exclude = _evaluated_inputs(args)
        return _render_evaluation(_evaluate(scores, test, exclude, args, args.per_user or not sampled), args)
    if len(args.run) < 2:
        raise UsageError("compare needs two or more runs: --run A --run B")
    names = _run_names(args)
    if not 0 < args.alpha < 1:
        raise UsageError(f"--alpha must lie strictly between 0 and 1 (e.g. 0.05), got {args.alpha!r}")
    if args.method == "randomization" and args.permutations < 1:
        raise UsageError(f"--permutations must be a positive integer, got {args.permutations}")
    test, exclude = _read_test(args)
    results = {name: _evaluate(run, test, exclude, args, True) for name, run in zip(names, args.run)}
    options = {"num_permutations": args.permutations, "seed": args.seed} if args.method == "randomization" else {}
    report = Report(
        {name: result.to_report() for name, result in results.items()},
        baseline=names[0],
        level=args.level,
        method=args.method,
        correction=args.correction,
        alpha=args.alpha,
        **options,
    )
    return _render_comparison(report, results, args)


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
    """A warning on stderr as one readable line (no source location)."""
    print(f"ignite-recsys: warning: {message}", file=sys.stderr)


# the arguments of evaluate() and Report that an option sets under another name
_ARGUMENT_FLAGS = {"num_negatives": "--sampled", "num_permutations": "--permutations", "method": "--stat-test"}


def _flags_named(message: str, parser: argparse.ArgumentParser) -> str:
    """``message`` with the Python argument names it starts with, or names as ``name=`` or
    ``'name'``, written as the options that set them (``batch_size must ...``: ``--batch-size``)."""
    flags = dict(_ARGUMENT_FLAGS)
    for action in parser._actions:
        long = [option for option in action.option_strings if option.startswith("--")]
        if long and ("_" in action.dest or action.dest in ("level", "alpha", "seed")):  # not words of prose
            flags.setdefault(action.dest, long[0])
    for name, flag in flags.items():
        message = re.sub(rf"(^|(?<=[\s(\['\"]))'?{name}'?(?=( must| is|=|,|\]|\)))", flag, message)
    return message


def _write(path: str, text: str) -> None:
    """``text`` into the file ``path``, atomically: written to a temporary file in the same folder,
    then renamed over ``path`` (a failed write leaves ``path`` as it was, and no temporary file).
    A path that is not a regular file (a device such as /dev/stdout, a FIFO) is written in place."""
    target = os.path.realpath(path)
    if os.path.exists(target) and not os.path.isfile(target):
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return
    descriptor, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", dir=os.path.dirname(target))
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        if os.path.exists(target):  # the file's own permissions; a new file gets those of open()
            mode = stat.S_IMODE(os.stat(target).st_mode)
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _let_go_of_stdout() -> None:
    """Standard output to /dev/null, so that what its buffer holds does not fail again at exit."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, sys.stdout.fileno())
        finally:
            os.close(null)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    parser = _parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # said with the usage of the command they were given to, not the top-level one
            commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
            commands.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as stop:  # argparse exits 2 on usage errors, 0 for --help
        return int(stop.code or 0)
    command_parser = next(
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    ).choices[args.command]
    from ignite.exceptions import NotComputableError

    def fail(code: int, message: str) -> int:
        print(f"ignite-recsys: error: {message}", file=sys.stderr)
        return code

    shown = warnings.showwarning
    warnings.showwarning = _show_warning
    try:
        text = _command(args)
    except FileNotFoundError as error:
        return fail(EXIT_NO_FILE, str(error))
    except FileFormatError as error:
        return fail(EXIT_MALFORMED, str(error))
    except ImportError as error:
        return fail(EXIT_MISSING_PACKAGE, str(error))
    except NotComputableError as error:
        return fail(EXIT_NOTHING, f"nothing to evaluate: {error}")
    except (ValueError, TypeError) as error:
        return fail(EXIT_USAGE, _flags_named(str(error), command_parser))
    except OSError as error:
        return fail(EXIT_NO_FILE, str(error))
    finally:
        warnings.showwarning = shown
    if args.output is None:
        try:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        except BrokenPipeError:  # the reader stopped early: console() says nothing
            raise
        except OSError as error:  # a full device, a closed terminal: as --output says it
            _let_go_of_stdout()
            return fail(EXIT_NO_FILE, f"cannot write to standard output: {error}")
        return EXIT_OK
    try:
        _write(args.output, text + "\n")
    except OSError as error:
        return fail(EXIT_NO_FILE, f"cannot write --output {args.output}: {error}")
    return EXIT_OK


def console() -> None:
    """The ``ignite-recsys`` console script."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped early (e.g. `| head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_OK
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    console()
