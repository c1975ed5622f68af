"""The metrics in a plain PyTorch evaluation loop, without an Ignite Engine.

What it shows: ``reset`` / ``update((scores, targets, exclude))`` / ``compute`` by hand, over
batches of users, for ranking metrics at several k (a list in ascending-k order),
``RankingMetrics`` (a dict), and the beyond-accuracy and AUC metrics, on a matrix-factorisation
model trained with a plain loop. The test items are a sparse CSR tensor per batch and the seen
training items are excluded (no position in the ranking). ``GAUC`` reads every score, so it takes
dense relevance, with the training items scored -inf (not candidates for it).

    python examples/manual_loop.py [--data u.data] [--device cuda]
"""

from __future__ import annotations

import argparse

import torch

import data
from models import train_mf
from ignite_recsys import GAUC, NDCG, AveragePopularity, ItemCoverage, RankingMetrics, Recall

GAUC_NAMES = ("gauc",)  # score-based: dense (scores, relevance), training items at -inf


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    data.add_arguments(parser)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    split = data.from_arguments(args)
    model = train_mf(split.train, epochs=args.epochs).to(args.device)
    print(split.description)

    top_k = [5, 10, 20]
    metrics = {
        "ndcg": NDCG(top_k, device=args.device),
        "recall": Recall(top_k, device=args.device),
        "all ranking": RankingMetrics(top_k, metrics=["ndcg", "recall", "mrr"], device=args.device),
        "coverage": ItemCoverage(top_k, device=args.device),
        "avg popularity": AveragePopularity(top_k, split.item_popularity, device=args.device),
        "gauc": GAUC(device=args.device),
    }
    for metric in metrics.values():
        metric.reset()
    with torch.no_grad():
        for users in torch.arange(split.train.shape[0]).split(256):
            scores, targets, exclude = split.evaluation_batch(model, users, device=args.device)
            for name, metric in metrics.items():
                if name in GAUC_NAMES:
                    masked = scores.masked_fill(split.train[users].to(args.device), float("-inf"))
                    metric.update((masked, split.test[users].to(args.device)))
                else:
                    metric.update((scores, targets, exclude))
    results = {name: metric.compute() for name, metric in metrics.items()}
    for name, value in results.items():
        if isinstance(value, list):
            print(f"{name:>15}: " + "  ".join(f"@{k} {v:.4f}" for k, v in zip(top_k, value)))
        elif isinstance(value, dict):
            print(f"{name:>15}: " + "  ".join(f"{n} {v:.4f}" for n, v in value.items()))
        else:
            print(f"{name:>15}: {value:.4f}")
    return results


if __name__ == "__main__":
    main()
