"""End to end, file to means: ignite_recsys.evaluate against ranx, pytrec_eval and ir-measures.

Generates a run of USERS x 100 rows and qrels of USERS x 20 rows (default 100k users: a
10-million-row run, 2 million judgments) as TREC files and as parquet tables, then times each
tool from the files to the mean of nDCG@10, Recall@20, P@10 and AP@100, each in its own process,
and reads that process's peak memory (max RSS) with resource.getrusage(RUSAGE_CHILDREN) in a
process that starts nothing else. Prints the medians over --repeats runs and the ratios against
ignite_recsys (TREC files), and checks that every tool reports the same means.

- ignite_recsys: ``evaluate(run, qrels, metrics, gain_function="linear_rank",
  map_normalization="relevant", ignore_zero_hits=False)`` on the TREC files and on parquet.
- ranx: ``Qrels.from_file`` / ``Run.from_file`` (kind "trec"), then ``evaluate``; and
  ``Qrels.from_parquet`` / ``Run.from_parquet``.
- pytrec_eval: its own readers ``pytrec_eval.parse_qrel`` / ``parse_run``, then
  ``RelevanceEvaluator.evaluate`` and the mean over queries.
- ir-measures: ``read_trec_qrels`` / ``read_trec_run`` and ``calc_aggregate``.

    python benchmarks/bench_files.py --users 100000 --repeats 3
    python benchmarks/bench_files.py --users 2000 --repeats 1     # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

PER_USER, JUDGED = 100, 20
CATALOG = 200_003  # prime: user u ranks items (u * 7919 + j * 104729) % CATALOG, distinct for j < 100
TOOLS = ("ignite_recsys", "ignite_recsys_parquet", "ranx", "ranx_parquet", "pytrec_eval", "ir_measures")


def generate(folder: str, users: int) -> None:
    """run.trec / run.parquet (users x 100 rows, distinct scores per user) and qrels.trec /
    qrels.parquet (users x 20 judgments, grades 1-3, half of them in the run)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    step = 20_000
    run_writer = qrels_writer = None
    with open(os.path.join(folder, "run.trec"), "w") as run_file, open(os.path.join(folder, "qrels.trec"), "w") as qf:
        for start in range(0, users, step):
            u = np.arange(start, min(users, start + step))
            j = np.arange(PER_USER)
            items = (u[:, None] * 7919 + j[None, :] * 104729) % CATALOG
            scores = rng.permuted(np.tile(np.arange(PER_USER), (len(u), 1)), axis=1) / PER_USER + 0.01
            order = np.argsort(-scores, axis=1)  # the file lists each user's rows by rank
            items, scores = np.take_along_axis(items, order, 1), np.take_along_axis(scores, order, 1)
            qid = np.repeat(np.char.add("u", u.astype(str)), PER_USER)
            doc = np.char.add("i", items.reshape(-1).astype(str))
            rank = np.tile(np.arange(1, PER_USER + 1), len(u)).astype(str)
            score = np.char.mod("%.2f", scores.reshape(-1))
            lines = [
                " ".join(row)
                for row in zip(
                    qid.tolist(), ["Q0"] * len(qid), doc.tolist(), rank.tolist(), score.tolist(), ["bench"] * len(qid)
                )
            ]
            run_file.write("\n".join(lines) + "\n")
            table = pa.table({"user": qid, "item": doc, "score": scores.reshape(-1)})
            run_writer = run_writer or pq.ParquetWriter(os.path.join(folder, "run.parquet"), table.schema)
            run_writer.write_table(table)
            jq = np.arange(0, 2 * PER_USER, 2 * PER_USER // JUDGED)  # 0, 10, ..., 190: ten in the run
            judged = (u[:, None] * 7919 + jq[None, :] * 104729) % CATALOG
            grades = rng.integers(1, 4, judged.shape)
            qqid = np.repeat(np.char.add("u", u.astype(str)), JUDGED)
            qdoc = np.char.add("i", judged.reshape(-1).astype(str))
            qf.write(
                "\n".join(
                    f"{a} 0 {b} {c}" for a, b, c in zip(qqid.tolist(), qdoc.tolist(), grades.reshape(-1).tolist())
                )
                + "\n"
            )
            qtable = pa.table({"user": qqid, "item": qdoc, "rel": grades.reshape(-1)})
            qrels_writer = qrels_writer or pq.ParquetWriter(os.path.join(folder, "qrels.parquet"), qtable.schema)
            qrels_writer.write_table(qtable)
    run_writer.close()
    qrels_writer.close()


def work(tool: str, folder: str) -> dict:
    """File to means with one tool; returns the means and the seconds."""
    trec_run, trec_qrels = os.path.join(folder, "run.trec"), os.path.join(folder, "qrels.trec")
    parquet_run, parquet_qrels = os.path.join(folder, "run.parquet"), os.path.join(folder, "qrels.parquet")
    start = time.perf_counter()
    if tool.startswith("ignite_recsys"):
        import ignite_recsys

        run, qrels = (parquet_run, parquet_qrels) if tool.endswith("parquet") else (trec_run, trec_qrels)
        result = ignite_recsys.evaluate(
            run,
            qrels,
            ["ndcg@10", "recall@20", "P@10", "map@100"],
            progress=False,
            gain_function="linear_rank",
            map_normalization="relevant",
            ignore_zero_hits=False,
        )
        means = result.means
    elif tool.startswith("ranx"):
        import ranx

        if tool.endswith("parquet"):
            qrels = ranx.Qrels.from_parquet(parquet_qrels, q_id_col="user", doc_id_col="item", score_col="rel")
            run = ranx.Run.from_parquet(parquet_run, q_id_col="user", doc_id_col="item", score_col="score")
        else:
            qrels, run = ranx.Qrels.from_file(trec_qrels, kind="trec"), ranx.Run.from_file(trec_run, kind="trec")
        values = ranx.evaluate(qrels, run, ["ndcg@10", "recall@20", "precision@10", "map@100"])
        means = dict(zip(["ndcg@10", "recall@20", "precision@10", "map@100"], values.values()))
    elif tool == "pytrec_eval":
        import pytrec_eval

        with open(trec_qrels) as handle:
            qrels = pytrec_eval.parse_qrel(handle)
        with open(trec_run) as handle:
            run = pytrec_eval.parse_run(handle)
        names = {"ndcg@10": "ndcg_cut_10", "recall@20": "recall_20", "precision@10": "P_10", "map@100": "map_cut_100"}
        per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.20", "P.10", "map_cut.100"}).evaluate(
            run
        )
        means = {key: statistics.fmean(values[name] for values in per_query.values()) for key, name in names.items()}
    elif tool == "ir_measures":
        import ir_measures
        from ir_measures import AP, P, R, nDCG

        measures = [nDCG @ 10, R @ 20, P @ 10, AP @ 100]
        values = ir_measures.calc_aggregate(
            measures, ir_measures.read_trec_qrels(trec_qrels), ir_measures.read_trec_run(trec_run)
        )
        means = dict(zip(["ndcg@10", "recall@20", "precision@10", "map@100"], (values[m] for m in measures)))
    else:
        raise ValueError(f"unknown tool {tool!r}")
    return {"seconds": time.perf_counter() - start, "means": {key: float(value) for key, value in means.items()}}


def measure(tool: str, folder: str) -> dict:
    """Runs ``work`` in a child process and adds that child's peak RSS (MiB)."""
    child = subprocess.run(
        [sys.executable, __file__, "--work", tool, "--folder", folder], capture_output=True, text=True, check=False
    )
    if child.returncode != 0:
        return {"error": child.stderr.strip().splitlines()[-1] if child.stderr else f"exit {child.returncode}"}
    result = json.loads(child.stdout.strip().splitlines()[-1])
    result["max_rss_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # Linux: KiB
    return result


def versions() -> dict:
    import importlib.metadata as metadata

    found = {}
    for package in ("ignite_recsys", "torch", "pyarrow", "numpy", "ranx", "pytrec-eval-terrier", "ir-measures"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--folder", default=None, help="where the files go (default: a folder under /tmp)")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.work:  # the child: one tool, file to means
        print(json.dumps(work(args.work, args.folder)))
        return
    if args.measure:  # a process that starts only this one child: RUSAGE_CHILDREN is that child's
        print(json.dumps(measure(args.measure, args.folder)))
        return
    folder = args.folder or f"/tmp/ignite_recsys_bench_files_{args.users}"
    os.makedirs(folder, exist_ok=True)
    if not os.path.exists(os.path.join(folder, "qrels.parquet")):
        started = time.perf_counter()
        generate(folder, args.users)
        print(
            f"generated {args.users * PER_USER:,} run rows and {args.users * JUDGED:,} judgments in "
            f"{time.perf_counter() - started:.0f} s under {folder}",
            flush=True,
        )
    print(json.dumps(versions()), flush=True)
    runs: dict = {tool: [] for tool in args.tools.split(",")}
    for repeat in range(args.repeats):
        for tool in runs:
            done = subprocess.run(
                [sys.executable, __file__, "--measure", tool, "--folder", folder],
                capture_output=True,
                text=True,
                check=False,
            )
            result = (
                json.loads(done.stdout.strip().splitlines()[-1])
                if done.returncode == 0
                else {"error": done.stderr.strip()[-300:]}
            )
            runs[tool].append(result)
            print(f"run {repeat + 1} {tool}: {json.dumps(result)}", flush=True)
    base = runs.get("ignite_recsys")
    base_seconds = statistics.median(r["seconds"] for r in base) if base and "error" not in base[0] else None
    base_memory = statistics.median(r["max_rss_mib"] for r in base) if base_seconds else None
    print(f"\n{'tool':<24}{'seconds (median)':>18}{'x ours':>8}{'max RSS MiB':>13}{'x ours':>8}")
    reference = None
    for tool, results in runs.items():
        if any("error" in result for result in results):
            print(f"{tool:<24} failed: {results[0].get('error')}")
            continue
        seconds = statistics.median(r["seconds"] for r in results)
        memory = statistics.median(r["max_rss_mib"] for r in results)
        ratio = f"{seconds / base_seconds:8.1f}" if base_seconds else ""
        memory_ratio = f"{memory / base_memory:8.1f}" if base_memory else ""
        print(f"{tool:<24}{seconds:18.2f}{ratio}{memory:13.0f}{memory_ratio}")
        means = list(results[0]["means"].values())
        reference = reference or means
        if max(abs(a - b) for a, b in zip(means, reference)) > 1e-6:
            print(f"  {tool}'s means differ from the first tool's: {results[0]['means']}")
    print(f"\nmeans: {json.dumps(runs[next(iter(runs))][0].get('means'))}")


if __name__ == "__main__":
    main()
