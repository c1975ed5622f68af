"""Time one metric update against its peers, on the same data in one process.

Data: float32 scores, binary float32 labels with ~20 relevant items per user, B users per batch,
top_k = [1, 5, 10, 20, 50, 100]. Reported: median seconds and the ratio to `torch.topk(scores, 100)`
alone; peak extra resident memory of an update (in a fresh subprocess, over the inputs already
allocated, by resetting Linux's peak-RSS counter) and its growth over 20 updates. Writes a table to stdout, JSON and a PNG plot:

    python benchmarks/bench_update.py [--sizes 1000 10000 100000 1000000] [--batch 256] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch

TOP_K = [1, 5, 10, 20, 50, 100]


def make_data(batch, items, seed=0):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.rand(batch, items, generator=generator)
    labels = (torch.rand(batch, items, generator=generator) < min(1.0, 20 / items)).float()
    return scores, labels


def median_seconds(candidates, repeats):
    """Median time of each candidate in steady state. Repeats run in rounds (every candidate in
    each round), so a slow spell of a shared machine affects all candidates alike and the ratios
    hold; within a round each candidate runs once untimed first, as in an epoch of updates (its
    buffers and caches warm, not those its predecessor left)."""
    times = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, fn in candidates.items():
            fn()
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def candidates(scores, labels, items):
    import ignite_recsys as R

    def ours(metric, targets=labels):
        def run():
            metric.reset()
            metric.update((scores, targets))
        return run

    six = ["ndcg", "hit_rate", "recall", "precision", "map", "mrr"]
    out = {
        "torch.topk(100)": lambda: torch.topk(scores, 100),
        "RankingMetrics (6 metrics x 6 k)": ours(R.RankingMetrics(TOP_K, metrics=six)),
        # the same binary labels as bool: NDCG's ideal ranking then needs only the relevant count
        "RankingMetrics, bool labels": ours(R.RankingMetrics(TOP_K, metrics=six), labels.bool()),
    }
    for name in ("NDCG", "HitRate", "Recall", "Precision", "MAP", "MRR"):
        out[f"{name}"] = ours(getattr(R, name)(TOP_K))
    from ignite.metrics.rec_sys import NDCG as IgniteNDCG, HitRate as IgniteHitRate

    out["ignite NDCG"] = ours(IgniteNDCG(TOP_K))
    out["ignite HitRate"] = ours(IgniteHitRate(TOP_K))
    if items <= 100_000:  # at 1M it needs ~19 GB
        from torchmetrics.retrieval import RetrievalNormalizedDCG

        def torchmetrics_epoch():
            metric = RetrievalNormalizedDCG(top_k=100)
            indexes = torch.arange(scores.shape[0]).unsqueeze(1).expand_as(scores)
            metric.update(scores, labels.bool(), indexes=indexes)
            metric.compute()

        out["torchmetrics NDCG (update+compute)"] = torchmetrics_epoch
    try:
        import ranx

        def ranx_top100():
            values, indices = torch.topk(scores, 100)
            run = ranx.Run.from_dict({
                f"q{u}": {f"d{i}": v for i, v in zip(indices[u].tolist(), values[u].tolist())}
                for u in range(scores.shape[0])
            })
            rows, cols = labels.nonzero(as_tuple=True)
            qrels_dict = {f"q{u}": {} for u in range(scores.shape[0])}
            for u, i in zip(rows.tolist(), cols.tolist()):
                qrels_dict[f"q{u}"][f"d{i}"] = 1
            qrels = ranx.Qrels.from_dict({q: d for q, d in qrels_dict.items() if d})
            run = ranx.Run.from_dict({q: run[q] for q in qrels.keys()})
            ranx.evaluate(qrels, run, [f"ndcg@{k}" for k in TOP_K])

        out["ranx (top-100 run, inputs built)"] = ranx_top100
    except ImportError:
        pass
    return out


# Functions of the memory probes (run in fresh subprocesses; other benchmark scripts reuse them).
PEAK_HELPERS = r"""
def rss(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith(field))

def peak_extra(fn):
    # Linux: writing 5 to clear_refs resets the peak resident set size (VmHWM) to the current RSS
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    base = rss("VmRSS:")
    fn()
    return rss("VmHWM:") - base
"""

MEMORY_PROBE = r"""
import sys, os, torch
sys.path.insert(0, os.getcwd())
import ignite_recsys as R
batch, items = int(sys.argv[1]), int(sys.argv[2])
g = torch.Generator().manual_seed(0)
scores = torch.rand(batch, items, generator=g)
labels = (torch.rand(batch, items, generator=g) < min(1.0, 20 / items)).float()
""" + PEAK_HELPERS + r"""
metric = R.RankingMetrics([1, 5, 10, 20, 50, 100])
metric.update((scores, labels))  # warm-up: thread pool and allocator caches, as in any epoch
torch.topk(scores, 100)
topk_peak = peak_extra(lambda: torch.topk(scores, 100))
update_peak = peak_extra(lambda: metric.update((scores, labels)))
after_one = rss("VmRSS:")
for _ in range(20):
    metric.update((scores, labels))
assert metric._sum.numel() == 7 * 6  # the state itself never grows (7 metrics x 6 k)
print(update_peak, rss("VmRSS:") - after_one, scores.numel() * 4, topk_peak)
"""


def memory(batch, items):
    """Peak extra resident memory of one RankingMetrics update over the inputs already allocated
    (and of torch.topk, for scale), and the RSS growth over 20 more updates. Linux only."""
    if not os.path.exists("/proc/self/clear_refs"):
        return None
    # A fixed mmap threshold: glibc then maps every allocation of 64 KiB or more afresh and
    # unmaps it when freed, so the peak RSS counts the update's live buffers, not whatever the
    # allocator happened to keep from earlier frees (without it the reading varies 0-5 MiB).
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    result = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(batch), str(items)],
                            capture_output=True, text=True, check=True, env=env)
    extra, growth, one_temporary, topk = map(int, result.stdout.split())
    return {"peak_extra_bytes": extra, "growth_over_20_updates_bytes": growth,
            "one_BxN_float32_bytes": one_temporary, "torch_topk_peak_extra_bytes": topk}


def main(argv=None):
    parser = argparse.ArgumentParser(description="Benchmark metric updates against peers.")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=11, help="rounds; the medians of 11 move less between runs on a shared machine than those of 7")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)

    machine = f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads"
    print(f"machine: {machine}; batch {args.batch}; top_k {TOP_K}")
    report = {"machine": machine, "batch": args.batch, "top_k": TOP_K, "sizes": {}}
    for items in args.sizes:
        scores, labels = make_data(args.batch, items)
        all_candidates = candidates(scores, labels, items)
        slow = {name: fn for name, fn in all_candidates.items()
                if name.startswith(("ignite NDCG", "torchmetrics")) and items >= 100_000}
        fast = {name: fn for name, fn in all_candidates.items() if name not in slow}
        measured = {**median_seconds(fast, args.repeats), **median_seconds(slow, 1)}
        rows = {name: measured[name] for name in all_candidates}
        base = rows["torch.topk(100)"]
        mem = memory(args.batch, items)
        report["sizes"][items] = {"seconds": rows, "ratio_to_topk": {k: v / base for k, v in rows.items()}, "memory": mem}
        print(f"\nN = {items:,}   (torch.topk {base * 1e3:.2f} ms)")
        for name, seconds in rows.items():
            print(f"  {name:<38} {seconds * 1e3:>10.2f} ms {seconds / base:>8.2f}x topk")
        if mem:
            print(f"  RankingMetrics update peak extra memory: {mem['peak_extra_bytes'] / 2**20:.1f} MiB "
                  f"(one (B,N) float32 = {mem['one_BxN_float32_bytes'] / 2**20:.1f} MiB; torch.topk "
                  f"{mem['torch_topk_peak_extra_bytes'] / 2**20:.1f} MiB); "
                  f"growth over 20 updates: {mem['growth_over_20_updates_bytes'] / 2**20:.1f} MiB")
        del scores, labels

    with open(os.path.join(args.out, "bench_update.json"), "w") as handle:
        json.dump(report, handle, indent=2)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        sizes = list(report["sizes"])
        fig, ax = plt.subplots(figsize=(8, 5))
        names = list(report["sizes"][sizes[0]]["ratio_to_topk"])
        for name in names:
            points = [(n, report["sizes"][n]["ratio_to_topk"].get(name)) for n in sizes]
            points = [(n, r) for n, r in points if r is not None]
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
        ax.set_xscale("log"), ax.set_yscale("log")
        ax.set_xlabel("items N"), ax.set_ylabel("time / torch.topk(100)")
        ax.set_title(f"update time relative to torch.topk, B={args.batch}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "bench_update.png"), dpi=120)
    except ImportError:
        print("matplotlib not installed: no plot")
    return report


if __name__ == "__main__":
    main()
