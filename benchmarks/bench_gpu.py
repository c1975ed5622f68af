"""Time metric updates on a CUDA GPU against ``torch.topk`` and the peers, on the same data.

Data: float32 scores, binary float32 labels with ~20 relevant items per user, B users per batch,
top_k = [1, 5, 10, 20, 50, 100]. Each candidate runs ``--repeats`` interleaved rounds after two
warm-up calls, timed with CUDA events; the table gives the median time, the median of the per-round
ratios to ``torch.topk(scores, 100)``, the achieved read bandwidth (scores, or scores plus labels, read
once: the floor of any exact update) and the peak GPU memory a call allocates beyond its inputs:

    python benchmarks/bench_gpu.py [--sizes 100000 1000000 10000000] [--batch 1024] [--repeats 11]

``--peak-gbs`` sets the card's memory bandwidth for the "% of peak" column (default: read from the
device name: H100 3350, H200 4800 GB/s). Without CUDA the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TOP_K = [1, 5, 10, 20, 50, 100]
SIX = ["ndcg", "hit_rate", "recall", "precision", "map", "mrr"]
PEAK_GBS = {"H100": 3350.0, "H200": 4800.0}


def make_data(batch: int, items: int, relevant: int = 20, seed: int = 0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    scores = torch.rand(batch, items, device="cuda", generator=generator)
    columns = torch.randint(0, items, (batch, relevant), device="cuda", generator=generator)
    labels = torch.zeros(batch, items, device="cuda").scatter_(1, columns, 1.0)
    return scores, labels


def candidates(scores, labels, items: int) -> dict:
    import ignite_recsys as R

    batch = scores.shape[0]

    def ours(metric, *rest, targets=labels, predictions=scores):
        def run():
            metric.reset()
            metric.update((predictions, targets, *rest))

        return run

    generator = torch.Generator(device="cuda").manual_seed(1)
    excluded = R.ItemIds(torch.randint(0, items, (batch, 100), device="cuda", generator=generator))
    ranked = R.RankedItems(torch.topk(scores, 100).indices)
    out = {
        "torch.topk(100)": lambda: torch.topk(scores, 100),
        "RankingMetrics (6 metrics x 6 k)": ours(R.RankingMetrics(TOP_K, metrics=SIX, device="cuda")),
        "RankingMetrics, CSR targets": ours(
            R.RankingMetrics(TOP_K, metrics=SIX, device="cuda"), targets=labels.to_sparse_csr()
        ),
        "RankingMetrics, RankedItems (top 100)": ours(
            R.RankingMetrics(TOP_K, metrics=SIX, device="cuda", num_items=items), predictions=ranked
        ),
        "RankingMetrics, 100 excluded ids a user": ours(R.RankingMetrics(TOP_K, metrics=SIX, device="cuda"), excluded),
    }
    for name in ("NDCG", "HitRate", "Recall", "Precision", "MAP", "MRR"):
        out[name] = ours(getattr(R, name)(TOP_K, device="cuda"))
    from ignite.metrics.rec_sys import NDCG as IgniteNDCG

    out["ignite NDCG"] = ours(IgniteNDCG(TOP_K, device="cuda"))
    if batch * items <= 200_000_000:
        try:
            from torchmetrics.retrieval import RetrievalNormalizedDCG
        except ImportError:
            pass
        else:

            def torchmetrics_update_compute():
                metric = RetrievalNormalizedDCG(top_k=100).to("cuda")
                indexes = torch.arange(batch, device="cuda").unsqueeze(1).expand_as(scores)
                metric.update(scores, labels.bool(), indexes=indexes)
                metric.compute()

            out["torchmetrics NDCG (update+compute)"] = torchmetrics_update_compute
    return out


def time_call(fn) -> float:
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / 1000.0


def peak_extra_bytes(fn) -> int:
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def measure(batch: int, items: int, repeats: int) -> list[dict]:
    scores, labels = make_data(batch, items)
    runs = candidates(scores, labels, items)
    slow = {name for name in runs if name.startswith(("ignite", "torchmetrics"))}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for fn in runs.values():  # warm-up: kernels compiled, caches allocated
        fn()
        fn()
    for round_ in range(repeats):
        for name, fn in runs.items():
            if name in slow and round_ >= 3:
                continue
            times[name].append(time_call(fn))
    base = times["torch.topk(100)"]
    rows = []
    for name, fn in runs.items():
        seconds = statistics.median(times[name])
        ratios = [t / b for t, b in zip(times[name], base)]
        rows.append(
            dict(
                name=name,
                batch=batch,
                items=items,
                seconds=seconds,
                ratio=statistics.median(ratios),
                score_gbs=batch * items * 4 / seconds / 1e9,
                scores_labels_gbs=batch * items * 8 / seconds / 1e9,
                peak_extra_gb=peak_extra_bytes(fn) / 1e9,
            )
        )
    del scores, labels, runs
    torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--peak-gbs", type=float, default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_gpu: no CUDA device; nothing to time")
        return 0
    name = torch.cuda.get_device_name()
    peak = args.peak_gbs or next((value for key, value in PEAK_GBS.items() if key in name), None)
    free, _ = torch.cuda.mem_get_info()
    print(f"# {name}, torch {torch.__version__}, CUDA {torch.version.cuda}, peak {peak} GB/s")
    print("| N | B | candidate | median ms | / topk | GB/s (scores) | GB/s (scores+labels) | % of peak | extra GB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for items in args.sizes:
        batch = args.batch
        while batch * items * 4 * 2 * 4 > free and batch > 16:  # inputs plus working room
            batch //= 2
        for row in measure(batch, items, args.repeats):
            share = f"{100 * row['scores_labels_gbs'] / peak:.0f}%" if peak else "-"
            print(
                f"| {items:,} | {batch} | {row['name']} | {row['seconds'] * 1e3:.2f} | {row['ratio']:.2f}x"
                f" | {row['score_gbs']:.0f} | {row['scores_labels_gbs']:.0f} | {share} | {row['peak_extra_gb']:.2f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
