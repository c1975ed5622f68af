"""Time the input forms other than dense (batch, num_items) tensors against dense inputs and peers.

Three measurements, each in one process on the same data, top_k = [1, 5, 10, 20, 50, 100],
``RankingMetrics`` with six metrics (ndcg, hit_rate, recall, precision, map, mrr; the default adds
f1) and its default arguments:

1. ``sparse``: sparse CSR targets (20 relevant items per user) with dense float32 scores at
   N = 1M, against the same targets as a dense float32 tensor, both as ratios to
   ``torch.topk(scores, 100)``; and the peak extra memory of the sparse update (fresh subprocess,
   Linux peak-RSS counter reset just before the update, glibc's mmap threshold fixed at 64 KiB,
   as in ``bench_update.py``) as a multiple of one (B, N) float32 tensor.
2. ``ranked``: ``RankedItems`` (B, K=100) with CSR targets at N = 100k and 10M: the update time
   (independent of N: only the listed ids and the stored targets are read) and ranx's
   ``evaluate`` on the same ids (its Qrels and Run built from them inside the timing; also
   ``evaluate`` alone on prebuilt ones), the same 36 metric/cut-off pairs; and one check that the
   values agree with ranx under ranx's conventions (``gain_function="linear_rank"``,
   ``map_normalization="relevant"``, ``ignore_zero_hits=False``).
3. ``exclude``: dense scores and dense labels at N = 100k with 100 excluded items per user given
   as a sparse CSR tensor, as ``ItemIds`` and as a dense bool mask, against the same update
   without exclusion.

Rounds are interleaved (every candidate once untimed, then timed, in each round), so a slow spell
of the shared machine hits all alike; a call under 50 ms is repeated within its timed sample.
Reported: median seconds, the ratio of medians to the baseline, and the spread: the smallest and
largest per-round ratio to the baseline timed in the same round. The load average (/proc/loadavg)
is printed at start and end. ``--profile`` prints a torch.profiler per-op breakdown of one update
of each form.

    python benchmarks/bench_forms.py [--sections sparse ranked exclude] [--threads 1] [--rounds 7]
                                     [--sparse-batch 256] [--profile] [--out benchmarks/results]
    python benchmarks/bench_forms.py --runs 3 --markdown   # three runs; the tables of docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings

import numpy as np
import torch

from bench_update import PEAK_HELPERS, _ratio, command_line, header_line  # noqa: E402  (same folder)

TOP_K = [1, 5, 10, 20, 50, 100]
SIX = ["ndcg", "hit_rate", "recall", "precision", "map", "mrr"]
RELEVANT_PER_USER = 20


def load_average():
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


def interleaved(candidates, rounds, baseline, min_sample=0.05):
    """Median seconds per call of each candidate, the ratio of medians to ``baseline`` and the
    spread of the per-round ratios (each candidate against the baseline timed in the same round).
    A call shorter than ``min_sample`` is repeated within its sample (the sample's mean per call),
    so that one descheduling of a shared machine weighs less."""
    calls = {}
    for name, fn in candidates.items():  # calls per sample: a sample of short calls lasts >= min_sample
        fn()
        start = time.perf_counter()
        fn()
        calls[name] = max(1, math.ceil(min_sample / max(time.perf_counter() - start, 1e-6)))
    times = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            fn()
            start = time.perf_counter()
            for _ in range(calls[name]):
                fn()
            times[name].append((time.perf_counter() - start) / calls[name])
    base = statistics.median(times[baseline])
    rows = {}
    for name, values in times.items():
        per_round = [v / b for v, b in zip(values, times[baseline])]
        rows[name] = {
            "median_s": statistics.median(values),
            "ratio": statistics.median(values) / base,
            "ratio_min": min(per_round),
            "ratio_max": max(per_round),
            "calls_per_sample": calls[name],
        }
    return rows


def print_rows(title, rows, baseline, targets=None):
    targets = targets or {}
    print(f"\n{title}")
    for name, row in rows.items():
        line = (
            f"  {name:<44} {row['median_s'] * 1e3:>10.2f} ms {row['ratio']:>7.3f}x {baseline:<14} "
            f"(rounds {row['ratio_min']:.3f}-{row['ratio_max']:.3f})"
        )
        if name in targets:
            target, sense = targets[name]
            met = row["ratio"] <= target if sense == "<=" else row["ratio"] >= target
            line += f"  target {sense} {target}: {'met' if met else 'MISSED'} ({row['ratio'] / target:.2f} of target)"
        print(line)


def relevant_ids(batch, items, seed, extra=0):
    """(batch, 20 + extra) distinct item ids per user; the first 20 are the relevant ones."""
    rng = np.random.default_rng(seed)
    return torch.from_numpy(
        np.stack([rng.choice(items, RELEVANT_PER_USER + extra, replace=False) for _ in range(batch)]).astype(np.int64)
    )


def csr_of(ids, items, dtype=torch.float32):
    """A (batch, items) CSR tensor with value 1 at each row's ids (built directly, never dense)."""
    batch, width = ids.shape
    columns = ids.sort(1).values.flatten()
    crow = torch.arange(0, batch * width + 1, width, dtype=torch.int64)
    return torch.sparse_csr_tensor(crow, columns, torch.ones(batch * width, dtype=dtype), size=(batch, items))


def dense_of(ids, items, dtype=torch.float32):
    out = torch.zeros(ids.shape[0], items, dtype=dtype)
    out.scatter_(1, ids, torch.ones(ids.shape, dtype=dtype))
    return out


def ranking_metrics(**kwargs):
    import ignite_recsys as R

    return R.RankingMetrics(TOP_K, metrics=kwargs.pop("metrics", SIX), **kwargs)


def updater(metric, output):
    def run():
        metric.reset()
        metric.update(output)

    return run


def profile(label, fn, top=12):
    """torch.profiler per-op breakdown of one call (after a warm-up call)."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    fn()
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    print(f"\nprofile of one update: {label}")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top))


# ---------------------------------------------------------------------------------------------
# 1. sparse targets

MEMORY_PROBE = (
    r"""
import sys, os, torch
sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import bench_forms as BF
batch, items, form = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.manual_seed(0)
scores = torch.rand(batch, items)
ids = BF.relevant_ids(batch, items, seed=1)
targets = BF.csr_of(ids, items) if form == "csr" else BF.dense_of(ids, items)
"""
    + PEAK_HELPERS
    + r"""
metric = BF.ranking_metrics()
metric.update((scores, targets))  # warm-up, as in any epoch
torch.topk(scores, 100)
topk_peak = peak_extra(lambda: torch.topk(scores, 100))
update_peak = peak_extra(lambda: metric.update((scores, targets)))
print(update_peak, scores.numel() * 4, topk_peak)
"""
)


def memory(batch, items, form):
    """Peak extra resident memory of one update with ``form`` targets ("csr" or "dense") over the
    inputs already allocated, one (B, N) float32 in bytes, and torch.topk's peak extra."""
    if not os.path.exists("/proc/self/clear_refs"):
        return None
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(batch), str(items), form],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    extra, one, topk = map(int, result.stdout.split())
    return {"peak_extra_bytes": extra, "one_BxN_float32_bytes": one, "torch_topk_peak_extra_bytes": topk}


def bench_sparse(args):
    batch, items = args.sparse_batch, args.sparse_items
    torch.manual_seed(0)
    scores = torch.rand(batch, items)
    ids = relevant_ids(batch, items, seed=1)
    csr, dense = csr_of(ids, items), dense_of(ids, items)
    candidates = {
        "torch.topk(100)": lambda: torch.topk(scores, 100),
        "RankingMetrics, dense float targets": updater(ranking_metrics(), (scores, dense)),
        "RankingMetrics, CSR targets": updater(ranking_metrics(), (scores, csr)),
    }
    rows = interleaved(candidates, args.rounds, "torch.topk(100)")
    print_rows(
        f"1. sparse targets: B={batch}, N={items:,}, {RELEVANT_PER_USER} relevant per user",
        rows,
        "topk",
        {"RankingMetrics, CSR targets": (0.7, "<=")},
    )
    mem = {form: memory(batch, items, form) for form in ("csr", "dense")}
    for form, m in mem.items():
        if m:
            print(
                f"  peak extra memory, {form} targets: {m['peak_extra_bytes'] / 2**20:.1f} MiB = "
                f"{m['peak_extra_bytes'] / m['one_BxN_float32_bytes']:.3f} x one (B, N) float32 "
                f"({m['one_BxN_float32_bytes'] / 2**20:.1f} MiB); "
                f"torch.topk {m['torch_topk_peak_extra_bytes'] / 2**20:.1f} MiB"
            )
    if args.profile:
        profile(f"CSR targets, N={items:,}", candidates["RankingMetrics, CSR targets"])
        profile(f"dense targets, N={items:,}", candidates["RankingMetrics, dense float targets"])
    return {"batch": batch, "items": items, "rows": rows, "memory": mem}


# ---------------------------------------------------------------------------------------------
# 2. ranked ids


def ranked_data(batch, items, length, seed):
    """Relevant ids (batch, 20) and ranked lists (batch, length) of distinct ids: each user's list
    holds 0-20 of their relevant items among non-relevant ones, in random order; every 8th user's
    list ends early (-1 after 90 positions), as a retrieval that found fewer."""
    rng = np.random.default_rng(seed)
    pool = relevant_ids(batch, items, seed, extra=length).numpy()
    relevant = pool[:, :RELEVANT_PER_USER]
    ranked = np.empty((batch, length), dtype=np.int64)
    for u in range(batch):
        hits = rng.integers(0, RELEVANT_PER_USER + 1)
        row = np.concatenate([relevant[u, :hits], pool[u, RELEVANT_PER_USER : RELEVANT_PER_USER + length - hits]])
        ranked[u] = rng.permutation(row)
        if u % 8 == 7:
            ranked[u, 90:] = -1
    return torch.from_numpy(relevant), torch.from_numpy(ranked)


RANX_NAMES = {
    "ndcg": "ndcg",
    "hit_rate": "hit_rate",
    "recall": "recall",
    "precision": "precision",
    "map": "map",
    "mrr": "mrr",
    "f1": "f1",
}


def ranx_inputs(relevant, ranked):
    import ranx

    qrels = ranx.Qrels.from_dict({f"q{u}": {f"d{i}": 1 for i in row} for u, row in enumerate(relevant.tolist())})
    run = ranx.Run.from_dict(
        {
            f"q{u}": {f"d{i}": float(len(row) - p) for p, i in enumerate(row) if i >= 0}
            for u, row in enumerate(ranked.tolist())
        }
    )
    return qrels, run


def bench_ranked(args):
    import ignite_recsys as R
    import ranx

    ranx_metrics = [f"{RANX_NAMES[m]}@{k}" for m in SIX for k in TOP_K]
    threads = args.threads or 0
    report = {}
    rows_by_size = {}
    for items in args.ranked_sizes:
        relevant, ranked = ranked_data(args.batch, items, args.length, seed=2)
        y = csr_of(relevant, items)
        y_pred = R.RankedItems(ranked)
        qrels, run = ranx_inputs(relevant, ranked)

        def ranx_built():
            q, r = ranx_inputs(relevant, ranked)
            ranx.evaluate(q, r, ranx_metrics, threads=threads, save_results_in_run=False)

        candidates = {
            "RankingMetrics, RankedItems + CSR": updater(ranking_metrics(), (y_pred, y)),
            "ranx.evaluate (Qrels, Run built)": ranx_built,
            "ranx.evaluate (prebuilt)": lambda: ranx.evaluate(
                qrels, run, ranx_metrics, threads=threads, save_results_in_run=False
            ),
        }
        rows = interleaved(candidates, args.rounds, "RankingMetrics, RankedItems + CSR")
        rows_by_size[items] = rows
        for name in ("ranx.evaluate (Qrels, Run built)", "ranx.evaluate (prebuilt)"):
            rows[name]["speedup"] = rows[name]["ratio"]
        print_rows(
            f"2. RankedItems B={args.batch}, K={args.length}, CSR targets, N={items:,} "
            f"(ratios: time / RankingMetrics update; ranx: {len(ranx_metrics)} metrics)",
            rows,
            "ours",
            {"ranx.evaluate (Qrels, Run built)": (20, ">=")},
        )
        report[items] = {"rows": rows, "agreement": agreement(relevant, ranked, items)}
        if args.profile:
            profile(f"RankedItems + CSR, N={items:,}", candidates["RankingMetrics, RankedItems + CSR"])
    if len(rows_by_size) >= 2:
        sizes = sorted(rows_by_size)
        times = [rows_by_size[n]["RankingMetrics, RankedItems + CSR"]["median_s"] for n in sizes]
        ratio = max(times) / min(times)
        print(
            f"\n  update time at N={sizes[-1]:,} / at N={sizes[0]:,}: {times[-1] / times[0]:.3f} "
            f"(max/min {ratio:.3f}; target <= 1.5: {'met' if ratio <= 1.5 else 'MISSED'}, {ratio / 1.5:.2f} of target)"
        )
        report["size_ratio"] = times[-1] / times[0]
    return report


def agreement(relevant, ranked, items):
    """Largest difference between RankingMetrics under ranx's conventions and ranx.evaluate."""
    import ignite_recsys as R
    import ranx

    names = SIX + ["f1"]
    metric = R.RankingMetrics(
        TOP_K, metrics=names, gain_function="linear_rank", map_normalization="relevant", ignore_zero_hits=False
    )
    metric.update((R.RankedItems(ranked), csr_of(relevant, items)))
    ours = metric.compute()
    qrels, run = ranx_inputs(relevant, ranked)
    theirs = ranx.evaluate(
        qrels, run, [f"{RANX_NAMES[m]}@{k}" for m in names for k in TOP_K], save_results_in_run=False
    )
    differences = {f"{m}@{k}": abs(ours[f"{m}@{k}"] - theirs[f"{RANX_NAMES[m]}@{k}"]) for m in names for k in TOP_K}
    worst = max(differences, key=differences.get)
    print(
        f"  agreement with ranx (NDCG linear_rank, MAP normalization relevant, ignore_zero_hits=False), "
        f"{len(differences)} values: largest |difference| {differences[worst]:.2e} at {worst} "
        f"({'agree to 1e-6' if differences[worst] <= 1e-6 else 'DISAGREE'})"
    )
    return {"largest_abs_difference": differences[worst], "at": worst}


# ---------------------------------------------------------------------------------------------
# 3. exclusion


def bench_exclude(args):
    import ignite_recsys as R

    batch, items, per_user = args.batch, args.exclude_items, args.excluded_per_user
    torch.manual_seed(0)
    scores = torch.rand(batch, items)
    pool = relevant_ids(batch, items, seed=3, extra=per_user)
    labels = dense_of(pool[:, :RELEVANT_PER_USER], items)
    excluded = pool[:, RELEVANT_PER_USER:]  # disjoint from the relevant items, as a user's history
    exclude_csr = csr_of(excluded, items, dtype=torch.bool)
    exclude_ids = R.ItemIds(excluded)
    exclude_dense = dense_of(excluded, items, dtype=torch.bool)
    candidates = {
        "RankingMetrics, no exclusion": updater(ranking_metrics(), (scores, labels)),
        "torch.topk(100)": lambda: torch.topk(scores, 100),
        "exclude CSR (100 per user)": updater(ranking_metrics(), (scores, labels, exclude_csr)),
        "exclude ItemIds (100 per user)": updater(ranking_metrics(), (scores, labels, exclude_ids)),
        "exclude dense bool": updater(ranking_metrics(), (scores, labels, exclude_dense)),
    }
    rows = interleaved(candidates, args.rounds, "RankingMetrics, no exclusion")
    print_rows(
        f"3. exclusion: B={batch}, N={items:,}, dense scores and labels, {per_user} excluded per user",
        rows,
        "no exclusion",
        {
            "exclude CSR (100 per user)": (1.15, "<="),
            "exclude ItemIds (100 per user)": (1.15, "<="),
            "exclude dense bool": (1.15, "<="),
        },
    )
    if args.profile:
        profile(f"exclude CSR, N={items:,}", candidates["exclude CSR (100 per user)"])
        profile(f"no exclusion, N={items:,}", candidates["RankingMetrics, no exclusion"])
    return {"batch": batch, "items": items, "rows": rows}


def _median_ms(values):
    value = statistics.median(values) * 1e3
    return f"{value:.3g} ms" if value < 100 else f"{value:.0f} ms"


def markdown_tables(runs, command):
    """The Markdown tables of docs/benchmarks.md from the reports of ``runs`` (one per run): each
    cell the median over runs of the run's median, with the range of the runs."""
    head = header_line(command, len(runs), load_averages=[run["load_start"].split()[0] for run in runs])
    tables = []
    if "sparse" in runs[0]:
        first = runs[0]["sparse"]
        rows = [run["sparse"]["rows"] for run in runs]
        lines = [f"| sparse targets, B = {first['batch']}, N = {first['items']:,} | time | ratio |", "|---|---|---|"]
        for name, label in (
            ("torch.topk(100)", "`torch.topk(scores, 100)`"),
            ("RankingMetrics, dense float targets", "update, dense float targets"),
            ("RankingMetrics, CSR targets", "update, CSR targets"),
        ):
            ratio = "1" if name == "torch.topk(100)" else _ratio([r[name]["ratio"] for r in rows]) + " `torch.topk`"
            lines.append(f"| {label} | {_median_ms([r[name]['median_s'] for r in rows])} | {ratio} |")
        for form in ("dense", "csr"):
            mem = first["memory"].get(form)
            if mem:
                lines.append(
                    f"| peak extra memory, {'CSR' if form == 'csr' else 'dense'} targets | "
                    f"{mem['peak_extra_bytes'] / 2**20:.1f} MiB | "
                    f"{mem['peak_extra_bytes'] / mem['one_BxN_float32_bytes']:.3f} of the scores |"
                )
        tables.append("\n".join(lines))
    if "ranked" in runs[0]:
        sizes = [n for n in runs[0]["ranked"] if n != "size_ratio"]
        lines = [
            "| `RankedItems` (B = 256, K = 100), CSR targets | " + " | ".join(f"N = {int(n):,}" for n in sizes) + " |",
            "|---" * (len(sizes) + 1) + "|",
        ]
        ours = "RankingMetrics, RankedItems + CSR"
        lines.append(
            "| update | "
            + " | ".join(_median_ms([run["ranked"][n]["rows"][ours]["median_s"] for run in runs]) for n in sizes)
            + " |"
        )
        for name, label in (
            ("ranx.evaluate (Qrels, Run built)", "ranx `evaluate`, its inputs built, time / ours"),
            ("ranx.evaluate (prebuilt)", "ranx `evaluate` alone, time / ours"),
        ):
            lines.append(
                f"| {label} | "
                + " | ".join(_ratio([run["ranked"][n]["rows"][name]["ratio"] for run in runs]) for n in sizes)
                + " |"
            )
        largest = [max(run["ranked"][n]["agreement"]["largest_abs_difference"] for run in runs) for n in sizes]
        lines.append("| largest difference to ranx (42 values) | " + " | ".join(f"{d:.1e}" for d in largest) + " |")
        tables.append("\n".join(lines))
    if "exclude" in runs[0]:
        first = runs[0]["exclude"]
        rows = [run["exclude"]["rows"] for run in runs]
        lines = [
            f"| exclusions, B = {first['batch']}, N = {first['items']:,} | time | time / update without |",
            "|---|---|---|",
        ]
        for name, label in (
            ("RankingMetrics, no exclusion", "update without exclusion"),
            ("exclude CSR (100 per user)", "100 excluded per user, CSR"),
            ("exclude ItemIds (100 per user)", "100 excluded per user, `ItemIds`"),
            ("exclude dense bool", "100 excluded per user, dense bool mask"),
        ):
            ratio = "1" if name == "RankingMetrics, no exclusion" else _ratio([r[name]["ratio"] for r in rows])
            lines.append(f"| {label} | {_median_ms([r[name]['median_s'] for r in rows])} | {ratio} |")
        tables.append("\n".join(lines))
    return head + "\n\n" + "\n\n".join(tables)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sections", nargs="+", default=["sparse", "ranked", "exclude"], choices=["sparse", "ranked", "exclude"]
    )
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument(
        "--sparse-batch", type=int, default=256, help="batch of section 1 (B x 1M float32 = 1 GiB at 256)"
    )
    parser.add_argument("--sparse-items", type=int, default=1_000_000)
    parser.add_argument("--ranked-sizes", type=int, nargs="+", default=[100_000, 10_000_000])
    parser.add_argument("--length", type=int, default=100, help="K, the length of the ranked lists")
    parser.add_argument("--exclude-items", type=int, default=100_000)
    parser.add_argument("--excluded-per-user", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="whole runs, one after the other; the tables give the median of the runs' medians and their range",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (and ranx threads)")
    parser.add_argument("--profile", action="store_true", help="torch.profiler breakdown of one update per form")
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="end with the Markdown tables of docs/benchmarks.md (date, machine, torch and this "
        "command in the line above them)",
    )
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    if args.threads:
        torch.set_num_threads(args.threads)
        try:
            import numba

            numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
        except ImportError:
            pass
    machine = (
        f"{platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    sections = {"sparse": bench_sparse, "ranked": bench_ranked, "exclude": bench_exclude}
    runs = []
    for _ in range(args.runs):
        start_load = load_average()
        print(
            f"machine: {machine}; top_k {TOP_K}; {args.rounds} interleaved rounds; load average at start {start_load}"
        )
        report = {"machine": machine, "top_k": TOP_K, "rounds": args.rounds, "load_start": start_load}
        for name in args.sections:
            report[name] = sections[name](args)
        report["load_end"] = load_average()
        print(f"\nload average at end {report['load_end']}")
        runs.append(report)
    os.makedirs(args.out, exist_ok=True)
    suffix = f"_threads{args.threads}" if args.threads else ""
    with open(os.path.join(args.out, f"bench_forms{suffix}.json"), "w") as handle:
        json.dump(runs[0] if len(runs) == 1 else runs, handle, indent=2, default=str)
    if args.markdown:
        print("\n" + markdown_tables(runs, command_line("benchmarks/bench_forms.py", argv)))
    return runs[0] if len(runs) == 1 else runs


if __name__ == "__main__":
    main()
