"""Time the selection that excludes items (``stable_topk_excluding``) against its peers.

Data: float32 scores uniform in [0, 1), B users, N items, k = 100, a bool mask with 100 excluded
items per user. Candidates, timed in interleaved rounds (each runs once untimed, then once timed,
in every round, so a slow spell of a shared machine hits all alike); medians reported with the
ratios to ``torch.topk(scores, 100)`` and to ``stable_topk`` (no exclusion):

* torch.topk: values and indices of the k largest scores (no tie rule, no exclusion);
* stable_topk: the library's exact selection without exclusion;
* stable_topk_excluding: exact selection of the candidates;
* listed rows: ``stable_topk_excluding_listed``, the exclusion as sorted rows of ids (the path
  of sparse and ``ItemIds`` exclusions on CPU): the exclusions entering the group stages where
  E x 64 <= N, else the plain selection of k + E items, the excluded ones dropped;
* masked copy: ``scores.masked_fill(excluded, -inf)`` then ``stable_topk`` (the naive way: a full
  copy of the batch, and wrong when a candidate scores -inf).

    python benchmarks/bench_exclusion.py [--sizes 10000 100000 1000000] [--batch 256] [--rounds 9] [--threads N]
"""

from __future__ import annotations

import argparse

import torch

from bench_update import median_seconds  # noqa: E402  (same folder)


def make_data(batch, items, excluded_per_user=100, seed=0):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.rand(batch, items, generator=generator)
    excluded = torch.zeros(batch, items, dtype=torch.bool)
    chosen = torch.rand(batch, items, generator=generator).topk(min(excluded_per_user, items), 1).indices
    excluded.scatter_(1, chosen, True)
    return scores, excluded


def main():
    from ignite_recsys._core.item_sets import sorted_rows
    from ignite_recsys._core.selection import stable_topk, stable_topk_excluding, stable_topk_excluding_listed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--large-batch", type=int, default=64, help="batch for N >= 1M (memory, time)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--k", type=int, default=100)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    k = args.k
    with open("/proc/loadavg") as f:
        load_before = f.read().split()[:3]
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, load average {' '.join(load_before)}")
    header = f"{'N':>9} {'B':>4}  {'candidate':<22} {'median ms':>10} {'/ topk':>7} {'/ stable':>9}"
    print(header)
    for items in args.sizes:
        batch = args.large_batch if items >= 1_000_000 else args.batch
        scores, excluded = make_data(batch, items)
        rows = sorted_rows(excluded.to_sparse_csr())
        candidates = {
            "torch.topk": lambda: torch.topk(scores, k),
            "stable_topk": lambda: stable_topk(scores, k),
            "stable_topk_excluding": lambda: stable_topk_excluding(scores, k, excluded),
            "listed rows": lambda: stable_topk_excluding_listed(scores, k, rows),
            "masked copy + stable": lambda: stable_topk(scores.masked_fill(excluded, float("-inf")), k),
        }
        medians = median_seconds(candidates, args.rounds)
        for name, seconds in medians.items():
            print(
                f"{items:>9} {batch:>4}  {name:<22} {seconds * 1e3:>10.2f} "
                f"{seconds / medians['torch.topk']:>7.2f} {seconds / medians['stable_topk']:>9.2f}"
            )
    with open("/proc/loadavg") as f:
        print(f"load average after: {' '.join(f.read().split()[:3])}")


if __name__ == "__main__":
    main()
