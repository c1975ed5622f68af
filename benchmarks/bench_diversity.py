"""Time one update of the beyond-accuracy families against one RankingMetrics update, on the same
data in one process.

Data: float32 scores (B, N), binary float32 labels with ~20 relevant items per user, float32 item
features (N, d), top_k = [1, 5, 10, 20, 50, 100]. Every metric ranks the same scores (the shared
ranking step) and then reads what it needs for the top-k ids only: IntraListDiversity gathers
(B, k, d) features and forms (B, k, k) distances. Reported per metric: the median seconds of an
update and its ratio to the RankingMetrics update (the median of the per-round ratios, with their
range), and ``torch.topk(scores, 100)`` alone for scale.

    python benchmarks/bench_diversity.py                      # B=256, N=100k, d=64, 7 rounds
    python benchmarks/bench_diversity.py --sizes 10000 100000 --repeats 11
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_update import round_times  # noqa: E402

TOP_K = [1, 5, 10, 20, 50, 100]


def candidates(batch: int, items: int, dim: int, seed: int = 0) -> dict:
    import ignite_recsys as R

    generator = torch.Generator().manual_seed(seed)
    scores = torch.rand(batch, items, generator=generator)
    other = torch.rand(batch, items, generator=generator)
    labels = (torch.rand(batch, items, generator=generator) < min(1.0, 20 / items)).float()
    features = torch.randn(items, dim, generator=generator)
    popularity = torch.randint(0, 1000, (items,), generator=generator).float()
    categories = (torch.rand(items, 20, generator=generator) < 0.1).float()
    history = R.ItemIds(torch.randint(0, items, (batch, 50), generator=generator))

    metrics = {
        "RankingMetrics": (R.RankingMetrics(TOP_K), (scores, labels)),
        "IntraListDiversity": (R.IntraListDiversity(TOP_K, features), (scores, labels)),
        "IntraListDiversity (callable)": (
            R.IntraListDiversity(TOP_K, features, distance=lambda f: torch.cdist(f, f)),
            (scores, labels),
        ),
        "Serendipity": (R.Serendipity(TOP_K, popularity), (scores, labels)),
        "EPC": (R.EPC(TOP_K, popularity, 1000), (scores, labels)),
        "MeanInvUserFreq": (R.MeanInvUserFreq(TOP_K, popularity, 1000), (scores, labels)),
        "Miscalibration (history: 50 ids)": (R.Miscalibration(TOP_K, categories), (scores, labels, history)),
        "PopREO": (R.PopREO(TOP_K, popularity), (scores, labels)),
        "ExposureGini": (R.ExposureGini(TOP_K), (scores, labels)),
        "RankBiasedOverlap (two models)": (R.RankBiasedOverlap(TOP_K), (scores, other)),
    }
    out = {"torch.topk(scores, 100)": lambda: torch.topk(scores, 100)}
    for name, (metric, output) in metrics.items():
        out[name] = lambda metric=metric, output=output: metric.update(output)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000], help="catalog sizes N")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--dim", type=int, default=64, help="feature dimension d")
    parser.add_argument("--repeats", type=int, default=7, help="rounds (every candidate once per round)")
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} threads; B={args.batch}, d={args.dim}, top_k={TOP_K}, {args.repeats} rounds"
    )
    for items in args.sizes:
        times = round_times(candidates(args.batch, items, args.dim), args.repeats)
        base = times["RankingMetrics"]
        print(f"\nN = {items}")
        print(f"{'update':36} {'median s':>10} {'x RankingMetrics':>17} {'(range)':>16}")
        for name, values in times.items():
            ratios = [value / reference for value, reference in zip(values, base)]
            print(
                f"{name:36} {statistics.median(values):10.4f} {statistics.median(ratios):17.2f} "
                f"{f'({min(ratios):.2f}-{max(ratios):.2f})':>16}"
            )


if __name__ == "__main__":
    main()
