"""Evaluation split over processes with ``ignite.distributed``, equal to a single-process run.

What it shows: each process scores its own share of the users (a different number per rank);
the metrics' ``compute()`` sums their states across processes, so every rank prints the same
result, which equals the single-process evaluation of all users. gloo on CPU (this script's
default, several processes on one machine), nccl with one GPU per process.

    python examples/distributed_eval.py [--nproc 2] [--backend gloo|nccl]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile

import ignite.distributed as idist
import torch

import data
from models import train_mf
from ignite_recsys import GAUC, ItemCoverage, RankingMetrics

TOP_K = [5, 10, 20]


def evaluate(model, split, users, device):
    """The metrics over ``users`` on this process; compute() reduces over all processes."""
    metrics = {
        "ranking": RankingMetrics(TOP_K, metrics=["ndcg", "recall", "map"], device=device),
        "coverage@k": ItemCoverage(TOP_K, num_items=split.train.shape[1], device=device),
        "gauc": GAUC(device=device),
    }
    model = model.to(device)
    with torch.no_grad():
        for batch in split.batches(model, users, batch_size=128, device=device):
            for metric in metrics.values():
                metric.update(batch)
    return {name: metric.compute() for name, metric in metrics.items()}


def share_of(rank: int, world: int, num_users: int) -> torch.Tensor:
    """Contiguous, uneven shares of the users: rank r gets a share proportional to r + 1."""
    total = world * (world + 1) // 2
    start = num_users * (rank * (rank + 1) // 2) // total
    end = num_users * ((rank + 1) * (rank + 2) // 2) // total
    return torch.arange(start, end)


def _rank_main(local_rank, model, split, folder):
    rank, world = idist.get_rank(), idist.get_world_size()
    users = share_of(rank, world, split.train.shape[0])
    results = evaluate(model, split, users, idist.device())
    print(
        f"rank {rank}/{world} ({len(users)} users): ndcg@10 {results['ranking']['ndcg@10']:.6f} "
        f"coverage@10 {results['coverage@k'][1]:.6f} gauc {results['gauc']:.6f}",
        flush=True,
    )
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as handle:
        json.dump(results, handle)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    data.add_arguments(parser, users=600, items=1500)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--backend", default="nccl" if torch.cuda.is_available() else "gloo")
    parser.add_argument("--master-port", type=int, default=0, help="rendezvous port (default: a free one)")
    args = parser.parse_args(argv)

    split = data.from_arguments(args)
    model = train_mf(split.train, epochs=2)
    single = evaluate(model, split, torch.arange(split.train.shape[0]), "cpu")
    print(
        f"single process ({split.train.shape[0]} users): ndcg@10 {single['ranking']['ndcg@10']:.6f} "
        f"coverage@10 {single['coverage@k'][1]:.6f} gauc {single['gauc']:.6f}"
    )
    with tempfile.TemporaryDirectory() as folder:
        port = args.master_port or _free_port()
        with idist.Parallel(backend=args.backend, nproc_per_node=args.nproc, master_port=port) as parallel:
            parallel.run(_rank_main, model, split, folder)
        per_rank = []
        for rank in range(args.nproc):
            with open(os.path.join(folder, f"rank{rank}.json")) as handle:
                per_rank.append(json.load(handle))
    largest = max(_largest_difference(single, result) for result in per_rank)
    print(f"largest difference between any rank and the single process: {largest:.2e}")
    return {"single": single, "ranks": per_rank, "largest_difference": largest}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _largest_difference(a, b):
    if isinstance(a, dict):
        return max(_largest_difference(a[key], b[key]) for key in a)
    if isinstance(a, list):
        return max(abs(x - y) for x, y in zip(a, b))
    return abs(a - b)


if __name__ == "__main__":
    main()
