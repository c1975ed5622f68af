"""Time full-catalog metrics from user and item vectors (``DotScores``) against retrieval alone.

Data: float32 user vectors (B, d) and item vectors (N, d), standard normal; per user 50 history
items to exclude and 20 held-out test items (``ItemIds``, distinct, drawn at random). The metrics:
six ranking metrics (NDCG, HitRate, Recall, Precision, MAP, MRR) at k = 1, 5, 10, 20, 50, 100.

Candidates, timed in interleaved rounds (each runs untimed, then timed, in every round, so a slow
spell of a shared machine hits all alike); medians and their ratios to faiss reported:

* faiss search: ``faiss.IndexFlatIP.search(users, 100)`` alone (the index built once, untimed):
  the top 100 ids, no exclusion, no tie rule, no metric;
* faiss + RankedItems: ``search(users, 150)`` (100 plus the 50 history items), then the six
  metrics from those ids with the history excluded by the library;
* torch matmul + topk: ``(users @ items.T).topk(100)`` per batch (the whole score block);
* whole matrix (RecBole style): ``users @ items.T`` then the six metrics from the dense scores
  with the history excluded (the dense path; its (B, N) float32 block is printed);
* DotScores: the six metrics from ``DotScores(users, items)`` with the history excluded (tiles
  of ``--budget`` bytes of scores, the exact top 100 under the tie rule).

    python benchmarks/bench_vectors.py [--users 1024] [--items 100000] [--dim 64] [--rounds 3] [--threads N]

``--memory 2000000 8000000``: instead, the peak memory of one DotScores update beyond its inputs
(the vectors, ids), B users at each catalog size, in a fresh subprocess per size (Linux: the
peak resident set is reset after a warm-up update; glibc's mmap threshold at 64 KiB, as in
``bench_memory.py``), beside the (B, N) float32 block the dense path would need.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import warnings

import torch

from _arguments import whole_number  # noqa: E402  (this folder)
from bench_update import SIX, TOP_K, median_seconds  # noqa: E402  (this folder)


def make_data(users, items, dim, history=50, test=20, seed=0):
    import ignite_recsys as R

    generator = torch.Generator().manual_seed(seed)
    user_vectors = torch.randn(users, dim, generator=generator)
    item_vectors = torch.randn(items, dim, generator=generator)
    chosen = torch.rand(users, items, generator=generator).topk(history + test, 1).indices  # distinct per user
    return user_vectors, item_vectors, R.ItemIds(chosen[:, history:]), R.ItemIds(chosen[:, :history])


def candidates(user_vectors, item_vectors, test, history, budget):
    import ignite_recsys as R

    six = lambda: R.RankingMetrics(TOP_K, metrics=SIX)  # noqa: E731
    found = {}
    try:
        import faiss

        index = faiss.IndexFlatIP(item_vectors.shape[1])
        index.add(item_vectors.numpy())
        users = user_vectors.numpy()
        found["faiss search (k=100)"] = lambda: index.search(users, 100)

        def faiss_ranked():
            _, ids = index.search(users, 100 + history.ids.shape[1])
            metric = six()
            metric.update((R.RankedItems(torch.from_numpy(ids)), test, history))
            return metric.compute()

        found["faiss + RankedItems"] = faiss_ranked
    except ImportError:
        print("faiss is not installed (pip install faiss-cpu): its rows are left out")
    found["torch matmul + topk"] = lambda: (user_vectors @ item_vectors.T).topk(100, 1)

    def whole_matrix():
        metric = six()
        metric.update((user_vectors @ item_vectors.T, test, history))
        return metric.compute()

    def dot_scores():
        metric = six()
        metric.update((R.DotScores(user_vectors, item_vectors, memory_budget=budget), test, history))
        return metric.compute()

    found["whole matrix + metrics"] = whole_matrix
    found["DotScores + metrics"] = dot_scores
    return found


PROBE = r"""
import sys, os, warnings, torch
sys.path.insert(0, os.getcwd())
warnings.simplefilter("ignore")
import ignite_recsys as R
from bench_vectors import make_data
from bench_update import SIX, TOP_K
B, N, d, budget = (int(value) for value in sys.argv[1:5])
users, items, test, history = make_data(B, N, d)

def rss(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith(field))

metric = R.RankingMetrics(TOP_K, metrics=SIX)
metric.update((R.DotScores(users, items, memory_budget=budget), test, history))  # warm-up
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")  # reset the peak resident set size (VmHWM) to the current RSS
base = rss("VmRSS:")
metric.update((R.DotScores(users, items, memory_budget=budget), test, history))
print(rss("VmHWM:") - base)
"""


def peak_extra(users, items, dim, budget) -> int:
    """Peak resident bytes of one DotScores update beyond what is resident before it."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    here = os.path.dirname(os.path.abspath(__file__))
    command = [sys.executable, "-c", PROBE, str(users), str(items), str(dim), str(budget)]
    result = subprocess.run(command, capture_output=True, text=True, check=True, env=env, cwd=here)
    return int(result.stdout.split()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=whole_number(1), default=1024)
    parser.add_argument("--items", type=whole_number(100), default=100_000)
    parser.add_argument("--dim", type=whole_number(1), default=64)
    parser.add_argument("--rounds", type=whole_number(1), default=3)
    parser.add_argument("--budget", type=whole_number(1), default=256 * 2**20, help="DotScores memory_budget, bytes")
    parser.add_argument("--threads", type=whole_number(1), default=None)
    parser.add_argument("--memory", type=whole_number(100), nargs="+", default=None, help="catalog sizes")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory:
        print(f"B={args.users} users x d={args.dim}, float32; DotScores memory_budget {args.budget / 2**20:.0f} MiB")
        print(f"{'items':>12}{'peak extra MiB':>16}{'(B, N) f32 MiB':>16}")
        for items in args.memory:
            extra = peak_extra(args.users, items, args.dim, args.budget)
            print(f"{items:>12}{extra / 2**20:>16.0f}{args.users * items * 4 / 2**20:>16.0f}")
        return
    warnings.simplefilter("ignore")  # tie warnings of random data are not the point here
    user_vectors, item_vectors, test, history = make_data(args.users, args.items, args.dim)
    found = candidates(user_vectors, item_vectors, test, history, args.budget)
    tile = min(args.items, max(1, args.budget // (args.users * 4)))
    print(
        f"B={args.users} users x N={args.items} items x d={args.dim}, float32; 50 history, 20 test items per user; "
        f"six metrics at k={TOP_K}; torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"DotScores tile {tile} items; whole matrix {args.users * args.items * 4 / 2**20:.0f} MiB; "
        f"medians of {args.rounds} rounds"
    )
    seconds = median_seconds(found, args.rounds)
    base = seconds.get("faiss search (k=100)")
    print(f"{'candidate':<26}{'seconds':>10}{'x faiss':>10}")
    for name, value in seconds.items():
        ratio = f"{value / base:.2f}" if base else "-"
        print(f"{name:<26}{value:>10.3f}{ratio:>10}")


if __name__ == "__main__":
    main()
