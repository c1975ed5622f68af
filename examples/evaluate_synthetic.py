"""Evaluation demo: two recommenders on synthetic implicit feedback, scored by an Ignite evaluator.

What it shows: `RankingMetrics` attached to an Ignite `Engine` computes NDCG, HitRate, Recall,
Precision, MAP, MRR and F1 at several cut-offs from one ranking step per batch; seen training
items are masked out of the scores with -inf; the engine gets one scalar per metric and k.

Data: a synthetic user-item matrix with a popularity skew (no download), split into train and
test interactions. Models: a popularity baseline and a noisy "taste" model that knows the latent
factors that generated the data. Runs in seconds on a laptop CPU:

    python examples/evaluate_synthetic.py [--users 2000] [--items 5000] [--batch-size 256]
"""

from __future__ import annotations

import argparse

import torch
from ignite.engine import Engine

from ignite_recsys import RankingMetrics

TOP_K = [1, 5, 10, 20, 50]


def synthetic_feedback(users: int, items: int, factors: int = 16, seed: int = 0):
    """Implicit feedback from latent tastes plus item popularity; returns train and test (bool)."""
    generator = torch.Generator().manual_seed(seed)
    user_taste = torch.randn(users, factors, generator=generator)
    item_taste = torch.randn(items, factors, generator=generator)
    popularity = torch.linspace(2.0, -2.0, items)  # item 0 most popular
    affinity = user_taste @ item_taste.T / factors**0.5 + popularity
    chosen = torch.rand(users, items, generator=generator) < torch.sigmoid(affinity - 4.0)
    test = chosen & (torch.rand(users, items, generator=generator) < 0.2)
    return chosen & ~test, test, (user_taste, item_taste, popularity)


def evaluate(model_scores, train, test, batch_size):
    """An Ignite evaluator over user batches; returns engine.state.metrics."""

    def step(engine, rows):
        scores = model_scores(rows).masked_fill(train[rows], float("-inf"))  # never recommend seen items
        return scores, test[rows]

    evaluator = Engine(step)
    RankingMetrics(TOP_K).attach(evaluator, "ranking")
    batches = list(torch.arange(train.shape[0]).split(batch_size))
    return evaluator.run(batches).metrics


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)

    train, test, (user_taste, item_taste, popularity) = synthetic_feedback(args.users, args.items)
    counts = train.sum(0).float()
    noise = torch.randn(args.users, args.items, generator=torch.Generator().manual_seed(1))
    models = {
        "popularity": lambda rows: counts.expand(len(rows), -1),
        "taste model": lambda rows: user_taste[rows] @ item_taste.T / 4 + popularity + 0.5 * noise[rows],
    }
    print(f"{args.users} users, {args.items} items, {int(train.sum())} train / {int(test.sum())} test interactions")
    results = {name: evaluate(score, train, test, args.batch_size) for name, score in models.items()}

    names = ["ndcg", "hit_rate", "recall", "precision", "map", "mrr"]
    header = f"{'model':<12} {'k':>3} " + " ".join(f"{n:>9}" for n in names)
    print(header)
    print("-" * len(header))
    for model, metrics in results.items():
        for k in TOP_K:
            print(f"{model:<12} {k:>3} " + " ".join(f"{metrics[f'{n}@{k}']:>9.4f}" for n in names))
    return results


if __name__ == "__main__":
    main()
