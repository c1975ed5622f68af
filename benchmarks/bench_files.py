"""Files to means: ``ignite_recsys.evaluate`` against pytrec_eval on TREC files, call time and peak memory.

The files are not tuned to either reader: string ids (``u<n>``, ``doc<n>``), scores with 7
decimals, users in random order of their ids, each user's 100 rows in rank order, 10 graded
judgments per user (grades 0-2, about half of the judged items in the run). Metrics: nDCG@10,
P@10, Recall@100 and AP@100 with trec_eval's conventions (linear gains, AP over |R|, users
without a relevant item counted, scores compared in float32 as trec_eval stores them).

Each measurement runs in a fresh process, with the libraries imported before the clock starts:

- ignite_recsys: ``evaluate(run, qrels, metrics, ...)`` from the file paths to the means;
- pytrec_eval: ``parse_qrel`` and ``parse_run`` (its readers), ``RelevanceEvaluator(...).evaluate``
  and the means over the queries.

Peak memory is the call's: the process's peak resident set (VmHWM, reset through
``/proc/self/clear_refs`` just before the call) less its resident set before the call. The two
tools alternate, ``--repeats`` times each; medians are printed with the ratios, and the means of
both tools are checked to agree.

    python benchmarks/bench_files.py --rows 1000000 --repeats 5
    python benchmarks/bench_files.py --rows 1000000 --rows 10000000 --repeats 3   # 10M rows: slow
    python benchmarks/bench_files.py --rows 1000000 --profile      # where evaluate's time goes (py-spy)
    python benchmarks/bench_files.py --rows 1000000 --import-pandas   # pandas imported before the clock
    python benchmarks/bench_files.py --rows 10000000 --repeats 3 --load 1   # one busy process beside both tools

``--load L`` starts L busy processes (pure-Python spin loops, as ``bench_update.py --load``) before
the timings and stops them after: both tools run under the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

if os.path.dirname(os.path.abspath(__file__)) not in sys.path:  # loaded from a file path (the tests)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _arguments import whole_number  # noqa: E402  (this folder; argparse only: the timed children load it too)

PER_USER, JUDGED = 100, 10
METRICS = ["ndcg@10", "P@10", "recall@100", "map@100"]
TREC_NAMES = {"ndcg@10": "ndcg_cut_10", "precision@10": "P_10", "recall@100": "recall_100", "map@100": "map_cut_100"}
# the children import the package of this checkout
CHILD_ENV = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
# trec_eval's conventions, and its float32 scores (scores 1e-7 apart tie there at 10M rows)
CONVENTIONS = dict(
    gain_function="linear_rank", map_normalization="relevant", ignore_zero_hits=False, score_precision="float32"
)


def run_rows(text: str) -> int:
    """An argparse type: run rows, whole users of ``PER_USER`` rows each."""
    rows = whole_number(PER_USER)(text)
    if rows % PER_USER:
        raise argparse.ArgumentTypeError(f"expected a multiple of {PER_USER} (users of {PER_USER} rows), got {text!r}")
    return rows


def generate(folder: str, rows: int) -> tuple:
    """run.trec (``rows`` rows) and qrels.trec in ``folder``; returns their paths."""
    import numpy as np

    users = rows // PER_USER
    run_path, qrels_path = os.path.join(folder, "run.trec"), os.path.join(folder, "qrels.trec")
    if os.path.exists(run_path) and os.path.exists(qrels_path):
        return run_path, qrels_path
    rng = np.random.default_rng(0)
    order = rng.permutation(users)  # users in random order of their ids
    catalog = max(1000, users * 5)
    with open(run_path + ".part", "w") as run_file, open(qrels_path + ".part", "w") as qrels_file:
        for start in range(0, users, 10_000):
            block = order[start : start + 10_000]
            items = rng.integers(0, catalog, (len(block), PER_USER * 2))
            items = np.sort(items, axis=1)  # distinct items per user: drop repeats, keep 100
            items = np.array([np.unique(row)[:PER_USER] for row in items])
            items = rng.permuted(items, axis=1)
            scores = -np.sort(-rng.random((len(block), PER_USER)) * 30, axis=1)  # each user's rows in rank order
            qid = np.repeat(np.char.add("u", block.astype(str)), PER_USER)
            doc = np.char.add("doc", items.reshape(-1).astype(str))
            rank = np.tile(np.arange(1, PER_USER + 1).astype(str), len(block))
            score = np.char.mod("%.7f", scores.reshape(-1))
            run_file.write(
                "".join(f"{q} Q0 {d} {r} {s} run\n" for q, d, r, s in zip(qid.tolist(), doc.tolist(), rank, score))
            )
            judged = np.concatenate(
                [items[:, : JUDGED // 2], catalog + items[:, JUDGED // 2 : JUDGED]],
                1,  # half in the run, half not
            )
            grades = rng.integers(0, 3, judged.shape)
            qqid = np.repeat(np.char.add("u", block.astype(str)), JUDGED)
            qdoc = np.char.add("doc", judged.reshape(-1).astype(str))
            qrels_file.write(
                "".join(
                    f"{q} 0 {d} {g}\n" for q, d, g in zip(qqid.tolist(), qdoc.tolist(), grades.reshape(-1).tolist())
                )
            )
    os.replace(run_path + ".part", run_path)
    os.replace(qrels_path + ".part", qrels_path)
    return run_path, qrels_path


def _resident() -> tuple:
    """(VmRSS, VmHWM) of this process in MiB."""
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def work(tool: str, run: str, qrels: str, import_pandas: bool = False) -> dict:
    """File to means with one tool in this process; the call's seconds and peak memory (MiB)."""
    if import_pandas:  # pyarrow imports pandas on its first pyarrow.array(): before the clock
        import pandas  # noqa: F401
    if tool == "ignite_recsys":
        import pyarrow.compute  # noqa: F401  (the modules the readers use, imported as pytrec_eval is)
        import pyarrow.csv  # noqa: F401

        import ignite_recsys

        def call() -> dict:
            result = ignite_recsys.evaluate(run, qrels, METRICS, progress=False, **CONVENTIONS)
            return dict(result.means)

    else:
        import pytrec_eval

        def call() -> dict:
            with open(qrels) as handle:
                judged = pytrec_eval.parse_qrel(handle)
            with open(run) as handle:
                ranked = pytrec_eval.parse_run(handle)
            measures = {"ndcg_cut.10", "P.10", "recall.100", "map_cut.100"}
            per_query = pytrec_eval.RelevanceEvaluator(judged, measures).evaluate(ranked)
            return {  # every judged user counts (trec_eval -c): the run ranks every judged user here
                key: sum(values[name] for values in per_query.values()) / len(judged)
                for key, name in TREC_NAMES.items()
            }

    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # resets VmHWM to the current resident set
    before, _ = _resident()
    start = time.perf_counter()
    means = call()
    seconds = time.perf_counter() - start
    _, peak = _resident()
    return {"seconds": seconds, "peak_mib": peak - before, "means": means}


def _in_call(frame: str) -> bool:
    """Whether a py-spy frame (``function (file:line)``) is work()'s timed call()."""
    function, _, where = frame.partition(" (")
    return function.rsplit(".", 1)[-1] == "call" and "bench_files.py" in where


def profile(run: str, qrels: str, rate: int = 250, top: int = 12) -> None:
    """py-spy (a sampling profiler: pip install py-spy) on one evaluate() call: the seconds each
    thread was busy inside the call and the functions it spent them in (inclusive)."""
    import collections
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        raw = os.path.join(folder, "samples.txt")
        command = [sys.executable, __file__, "--work", "ignite_recsys", "--run", run, "--qrels", qrels]
        subprocess.run(
            ["py-spy", "record", "--nonblocking", "-r", str(rate), "--threads", "-f", "raw", "-o", raw, "--", *command],
            env=CHILD_ENV,
            check=True,
            capture_output=True,
        )
        busy: collections.Counter = collections.Counter()
        waiting: collections.Counter = collections.Counter()
        inside: collections.Counter = collections.Counter()
        with open(raw) as samples:
            for line in samples:
                stack, count = line.rsplit(" ", 1)
                frames = stack.split(";")
                # the run's parser and reader threads' samples, and the main thread's inside call()
                thread = "parser" if "run-parser" in frames[0] else "reader" if "run-reader" in frames[0] else "main"
                if thread == "main" and not any(_in_call(frame) for frame in frames):
                    continue
                if any("_Prefetched._handed" in frame or "_Prefetched.__next__" in frame for frame in frames):
                    waiting[thread] += int(count)  # handing a piece over, or taking one (py-spy leaves out the waits)
                    continue
                busy[thread] += int(count)
                for frame in dict.fromkeys(frames[1:]):
                    inside[thread, frame] += int(count)
    print("busy seconds inside the call: " + ", ".join(f"{name} {n / rate:.2f}" for name, n in busy.most_common()))
    print(
        "seconds handing pieces between the threads: "
        + ", ".join(f"{name} {n / rate:.2f}" for name, n in waiting.most_common())
    )
    reading_test = sum(count for (thread, frame), count in inside.items() if thread == "main" and "_tables (" in frame)
    print(f"main thread reading the test table (before the run's lists): {reading_test / rate:.2f} s")
    for name in busy:  # each thread's busiest functions (inclusive), ours and Arrow's
        shown = [
            (frame, count)
            for (thread, frame), count in inside.most_common()
            if thread == name and not any(skip in frame for skip in ("importlib", "threading.py", "bench_files.py"))
        ]
        for frame, count in shown[:top]:
            print(f"{count / rate:7.2f} s  {name:<6} {frame[:110]}")


def measure(tool: str, run: str, qrels: str, import_pandas: bool = False) -> dict:
    child = subprocess.run(
        [sys.executable, __file__, "--work", tool, "--run", run, "--qrels", qrels]
        + (["--import-pandas"] if import_pandas else []),
        capture_output=True,
        text=True,
        env=CHILD_ENV,
    )
    if child.returncode != 0:
        raise RuntimeError(f"{tool} failed: {child.stderr[-2000:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rows", type=run_rows, action="append", help="run rows, a multiple of 100 (repeatable; default 1000000)"
    )
    parser.add_argument("--repeats", type=whole_number(1), default=5)
    parser.add_argument("--folder", default="/tmp/ignite_recsys_bench_files")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy samples of one evaluate() per size: busy seconds by thread and function",
    )
    parser.add_argument(
        "--import-pandas", action="store_true", help="import pandas before the clock (pyarrow imports it on first use)"
    )
    parser.add_argument(
        "--load", type=whole_number(0), default=0, help="busy processes competing for the cores during the timings"
    )
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--qrels", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.work:
        print(json.dumps(work(args.work, args.run, args.qrels, import_pandas=args.import_pandas)))
        return
    # (imported here, not in the timed children: bench_update imports torch)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_update import Load  # same folder

    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} on {os.cpu_count()} cores")
    if args.load:
        print(f"busy processes started for the timings: {args.load}")
    for rows in args.rows or [1_000_000]:
        folder = os.path.join(args.folder, str(rows))
        os.makedirs(folder, exist_ok=True)
        started = time.perf_counter()
        run, qrels = generate(folder, rows)
        print(f"\n{rows:,} run rows, {rows // PER_USER * JUDGED:,} judgments ({time.perf_counter() - started:.0f} s)")
        if args.profile:
            profile(run, qrels)
            continue
        results: dict = {"ignite_recsys": [], "pytrec_eval": []}
        with Load(args.load):
            for _ in range(args.repeats):
                for tool in results:  # alternating, under the same load
                    results[tool].append(measure(tool, run, qrels, args.import_pandas))
        ours, theirs = results["ignite_recsys"], results["pytrec_eval"]
        for key in TREC_NAMES:
            if abs(ours[0]["means"][key] - theirs[0]["means"][key]) > 1e-9:
                print(f"  means differ: {key} {ours[0]['means'][key]} vs {theirs[0]['means'][key]}")
        print(f"{'tool':<16}{'call s (median)':>16}{'peak MiB (median)':>19}   all call times")
        for tool, values in results.items():
            seconds = statistics.median(value["seconds"] for value in values)
            peak = statistics.median(value["peak_mib"] for value in values)
            every = " ".join(f"{value['seconds']:.2f}" for value in values)
            print(f"{tool:<16}{seconds:16.2f}{peak:19.0f}   {every}")
        speed = statistics.median(v["seconds"] for v in theirs) / statistics.median(v["seconds"] for v in ours)
        memory = statistics.median(v["peak_mib"] for v in ours) / statistics.median(v["peak_mib"] for v in theirs)
        print(f"ignite_recsys: {speed:.2f}x pytrec_eval's speed, {memory:.2f}x its peak memory")
        print(f"means: {json.dumps(ours[0]['means'])}")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
