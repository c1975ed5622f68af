"""Peak extra memory of one update, for every metric class, as a multiple of one (B, N) float32.

Data as in bench_update.py: float32 scores in [0, 1), binary float32 labels with ~20 relevant
items per user, B users, N items, top_k = [1, 5, 10, 20, 50, 100]. Each metric runs in a fresh
subprocess: the inputs are allocated, one warm-up update runs (thread pool, allocator caches, the
state), then Linux's peak-RSS counter is reset and one more update is measured; the reading is
the peak resident memory over the resident memory just before it. glibc's mmap threshold is
fixed at 64 KiB so that every buffer of 64 KiB or more is mapped when allocated and unmapped
when freed (the peak then counts the update's live buffers, not what the allocator kept).
Linux only. Writes a table to stdout:

    python benchmarks/bench_memory.py [--batch 256] [--items 100000] [--metrics AUC MAE ...] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys

import torch

TOP_K = [1, 5, 10, 20, 50, 100]

# name -> constructor expression (evaluated in the probe with R = ignite_recsys, K = TOP_K,
# N = num_items, pop = a per-item popularity vector)
METRICS = {
    "NDCG": "R.NDCG(K)",
    "HitRate": "R.HitRate(K)",
    "Recall": "R.Recall(K)",
    "Precision": "R.Precision(K)",
    "MAP": "R.MAP(K)",
    "MRR": "R.MRR(K)",
    "F1": "R.F1(K)",
    "RPrecision": "R.RPrecision()",
    "RPrecision(ties=average)": "R.RPrecision(ties='average')",
    "RankingMetrics": "R.RankingMetrics(K)",
    "ItemCoverage": "R.ItemCoverage(K, num_items=N)",
    "GiniIndex": "R.GiniIndex(K, num_items=N)",
    "ShannonEntropy": "R.ShannonEntropy(K, num_items=N)",
    "AveragePopularity": "R.AveragePopularity(K, pop)",
    "TailPercentage": "R.TailPercentage(K, pop)",
    "Novelty": "R.Novelty(K, pop)",
    "GAUC": "R.GAUC()",
    "AUC": "R.AUC()",
    "LogLoss": "R.LogLoss()",
    "MAE": "R.MAE()",
    "RMSE": "R.RMSE()",
}

PROBE = r"""
import sys, os, torch
sys.path.insert(0, os.getcwd())
import ignite_recsys as R
name, expression, B, N = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
K = [1, 5, 10, 20, 50, 100]
g = torch.Generator().manual_seed(0)
scores = torch.rand(B, N, generator=g)
labels = (torch.rand(B, N, generator=g) < min(1.0, 20 / N)).float()
pop = torch.rand(N, generator=g) * 100

def rss(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith(field))

metric = eval(expression)
metric.update((scores, labels))  # warm-up
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")  # reset the peak resident set size (VmHWM) to the current RSS
base = rss("VmRSS:")
metric.update((scores, labels))
print(rss("VmHWM:") - base)
"""


def peak_extra(name: str, batch: int, items: int) -> int:
    """Peak extra resident bytes of one update of metric ``name`` (fresh subprocess)."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    result = subprocess.run(
        [sys.executable, "-c", PROBE, name, METRICS[name], str(batch), str(items)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return int(result.stdout.split()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description="Peak extra memory of one update per metric.")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--metrics", nargs="+", default=list(METRICS), choices=list(METRICS))
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="end with the Markdown table of docs/benchmarks.md (date, machine, torch and this "
        "command in the line above it)",
    )
    args = parser.parse_args(argv)
    if not os.path.exists("/proc/self/clear_refs"):
        sys.exit("needs Linux (/proc/self/clear_refs)")
    one = args.batch * args.items * 4
    machine = f"{platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}"
    print(f"machine: {machine}; B = {args.batch}, N = {args.items:,}; one (B, N) float32 = {one / 2**20:.1f} MiB")
    print(f"  {'metric':<20} {'peak extra':>12} {'x (B,N) f32':>12}")
    report = {}
    for name in args.metrics:
        extra = peak_extra(name, args.batch, args.items)
        report[name] = extra / one
        print(f"  {name:<20} {extra / 2**20:>8.1f} MiB {extra / one:>12.2f}", flush=True)
    if args.markdown:
        from bench_update import command_line, header_line  # same folder

        lines = [
            header_line(command_line("benchmarks/bench_memory.py", argv), 1, "memory does not depend on the load"),
            "",
            f"| metric (B = {args.batch}, N = {args.items:,}) | peak extra memory | of the scores |",
            "|---|---|---|",
        ]
        lines += [f"| `{name}` | {share * one / 2**20:.1f} MiB | {share:.2f} |" for name, share in report.items()]
        print("\n" + "\n".join(lines))
    return report


if __name__ == "__main__":
    main()
