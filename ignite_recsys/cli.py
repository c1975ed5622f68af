"""The command line: ``ignite-recsys evaluate`` (or ``python -m ignite_recsys evaluate``).

Exit codes: 0 success; 1 an unexpected error; 2 a usage error (bad or missing options, an unknown
metric name or convention); 3 a file that does not exist or cannot be opened; 4 a malformed file
(the message names the file, the line and the column); 5 a missing optional package (the message
names the extra to install); 6 nothing to evaluate (no test user counted).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Optional, Sequence

import torch

from .data import FileFormatError
from .data.files import read_interactions
from .evaluation import evaluate
from .report import Report

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NO_FILE, EXIT_MALFORMED, EXIT_MISSING_PACKAGE, EXIT_NOTHING = range(7)

EXAMPLE = """\
example:
  ignite-recsys evaluate --qrels test.qrels --run model.trec --metrics ndcg@10,recall@20,r_precision
  ignite-recsys evaluate --qrels test.parquet --run scores.parquet --exclude train.parquet \\
      --metrics ndcg@10,P@10 --format json
  ignite-recsys evaluate --qrels test.qrels --run model.trec --metrics ndcg_cut_10,map_cut_1000 --trec-eval

metrics: ndcg, hit_rate, recall, precision, map, mrr, f1 with a cut-off (ndcg@10, P@10,
ndcg_cut_10, recip_rank@100, success@5) and r_precision (Rprec).
files: TREC run (qid Q0 docid rank score tag) and qrels (qid 0 docid rel) text files, and
parquet or CSV/TSV tables with a header (user/qid, item/docid, score or value/rel columns).
exit codes: 0 ok, 1 unexpected error, 2 usage error, 3 file not found, 4 malformed file,
5 missing optional package, 6 no test user to count.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ignite-recsys",
        description="Recommender and retrieval evaluation from files, with ignite_recsys's metrics.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    evaluate = commands.add_parser(
        "evaluate",
        help="evaluate a run against test interactions (qrels)",
        description="Evaluate a run against test interactions (qrels): each user's "
        "items ranked by score, metrics averaged over the test users.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    evaluate.add_argument(
        "--qrels",
        "--test",
        dest="qrels",
        required=True,
        help="test interactions: a TREC qrels file or a parquet/CSV table",
    )
    evaluate.add_argument("--run", required=True, help="the run: a TREC run file or a parquet/CSV table")
    evaluate.add_argument("--metrics", required=True, help="comma-separated names, e.g. ndcg@10,recall@20")
    evaluate.add_argument("--exclude", help="interactions to exclude (e.g. the training history), a file")
    evaluate.add_argument("--format", choices=("table", "json", "latex"), default="table", help="output format")
    evaluate.add_argument(
        "--qrels-format",
        choices=("trec", "parquet", "csv", "tsv"),
        help="default: from the file name (.parquet, .csv, .tsv; anything else is TREC)",
    )
    evaluate.add_argument("--run-format", choices=("trec", "parquet", "csv", "tsv"), help="as --qrels-format")
    evaluate.add_argument("--user-col", help="the user column of the tables (default: user, qid, ...)")
    evaluate.add_argument("--item-col", help="the item column of the tables (default: item, docid, ...)")
    evaluate.add_argument("--value-col", help="the grade column of the test table (default: value, rel, ...)")
    evaluate.add_argument("--score-col", help="the score column of the run table (default: score)")
    evaluate.add_argument("--num-items", type=int, help="the catalog size (default: from the test table)")
    evaluate.add_argument(
        "--trec-eval",
        action="store_true",
        help="trec_eval's conventions: linear gains, MAP "
        "divided by |R|, users without a relevant item counted (as ranx)",
    )
    evaluate.add_argument("--gain-function", choices=("exp_rank", "linear_rank", "binary", "exp_rank_shifted"))
    evaluate.add_argument(
        "--relevance-threshold", type=float, help="an item is relevant when its grade is at least this (default 1)"
    )
    evaluate.add_argument("--map-normalization", choices=("min_k_relevant", "relevant", "hits"))
    evaluate.add_argument("--recall-normalization", choices=("relevant", "min_k_relevant"))
    evaluate.add_argument("--precision-normalization", choices=("k", "min_k_items"))
    evaluate.add_argument(
        "--ignore-zero-hits",
        choices=("true", "false"),
        help="skip users without a relevant item (default true; false counts them as 0)",
    )
    evaluate.add_argument(
        "--run-ties",
        choices=("docid", "order"),
        default="docid",
        help="equal scores: the larger item id first (trec_eval; default) or file order",
    )
    evaluate.add_argument("--level", type=float, default=0.95, help="confidence level of the intervals")
    evaluate.add_argument("--batch-size", type=int, help="users per update (default 16384)")
    evaluate.add_argument("--device", default="cpu", help="torch device of the metrics")
    evaluate.add_argument("--no-progress", action="store_true", help="no progress bar")
    evaluate.add_argument("--sampled", type=int, metavar="N", help="rank each test item among N sampled negatives")
    return parser


def _conventions(args: argparse.Namespace) -> dict:
    conventions: dict = {}
    if args.trec_eval:
        conventions.update(gain_function="linear_rank", map_normalization="relevant", ignore_zero_hits=False)
    for name in (
        "gain_function",
        "relevance_threshold",
        "map_normalization",
        "recall_normalization",
        "precision_normalization",
    ):
        if getattr(args, name) is not None:
            conventions[name] = getattr(args, name)
    if args.ignore_zero_hits is not None:
        conventions["ignore_zero_hits"] = args.ignore_zero_hits == "true"
    return conventions


def _render(result, args: argparse.Namespace) -> str:
    if args.format == "json":
        return json.dumps(
            {
                "means": result.means,
                "intervals": {key: list(value) for key, value in result.intervals.items()},
                "level": result.level,
                "info": result.info,
            },
            indent=2,
            default=lambda value: None if isinstance(value, float) and math.isnan(value) else value,
        )
    if args.format == "latex":
        name = os.path.basename(str(args.run))
        return Report(
            {name: {key: (result.means[key], result.intervals[key]) for key in result.means}}, level=result.level
        ).to_latex()
    width = max(len(key) for key in result.means)
    lines = [f"{'metric':<{width}}  {'mean':>8}  {int(round(result.level * 100))}% interval"]
    for key, mean in result.means.items():
        low, high = result.intervals[key]
        lines.append(f"{key:<{width}}  {mean:8.4f}  [{low:.4f}, {high:.4f}]")
    info = result.info
    lines.append(
        f"\n{info['test_users']} test users; {info.get('test_users_not_in_run', 0)} not in the run "
        f"(empty lists); {info.get('run_rows_not_in_test', 0)} run row(s) of users not in the test set"
    )
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse exits 2 on usage errors, 0 for --help
        return int(stop.code or 0)
    from ignite.exceptions import NotComputableError

    def fail(code: int, message: str) -> int:
        print(f"ignite-recsys: error: {message}", file=sys.stderr)
        return code

    try:
        table = {"user": args.user_col, "item": args.item_col}
        test = read_interactions(
            args.qrels, format=args.qrels_format, value=args.value_col, num_items=args.num_items, **table
        )
        exclude = None
        if args.exclude is not None:
            exclude = read_interactions(
                args.exclude, format=None, user_map=test.user_map, item_map=test.item_map, duplicates="max", **table
            )
        columns = (args.user_col, args.item_col, args.score_col)
        result = evaluate(
            args.run,
            test,
            args.metrics,
            exclude=exclude,
            num_items=args.num_items,
            batch_size=args.batch_size,
            device=args.device,
            level=args.level,
            progress=not args.no_progress,
            run_ties=args.run_ties,
            run_columns=columns,
            run_format=args.run_format,
            num_threads=max(1, torch.get_num_threads() - 1),
            sampled=args.sampled,
            **_conventions(args),
        )
    except FileNotFoundError as error:
        return fail(EXIT_NO_FILE, str(error))
    except FileFormatError as error:
        return fail(EXIT_MALFORMED, str(error))
    except ImportError as error:
        return fail(EXIT_MISSING_PACKAGE, str(error))
    except NotComputableError as error:
        return fail(EXIT_NOTHING, f"nothing to evaluate: {error}")
    except (ValueError, TypeError) as error:
        return fail(EXIT_USAGE, str(error))
    except OSError as error:
        return fail(EXIT_NO_FILE, str(error))
    print(_render(result, args))
    return EXIT_OK


def console() -> None:
    """The ``ignite-recsys`` console script."""
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    console()
