"""Train a matrix-factorisation recommender with Ignite and evaluate it every epoch.

What it shows: an Ignite trainer (BPR loss, progress bar) and an evaluator ``Engine`` with
``RankingMetrics`` (NDCG, HitRate, Recall, Precision, MAP, MRR at several k) plus beyond-accuracy
metrics attached; the test items arrive as a sparse CSR tensor per batch of users and each
user's training items are excluded (they take no position in the ranking); every
``"<metric>@<k>"`` scalar is logged after each epoch.

    python examples/engine_eval.py                         # synthetic data, seconds on a CPU
    python examples/engine_eval.py --data ml-100k/u.data   # MovieLens-100k
"""

from __future__ import annotations

import argparse

import torch
from ignite.engine import Engine, Events
from ignite.handlers import ProgressBar

import data
from models import MatrixFactorization, bpr_batches, bpr_step
from ignite_recsys import GiniIndex, ItemCoverage, RankingMetrics

TOP_K = [5, 10, 20]
LOGGED = [
    "ranking/ndcg@10",
    "ranking/recall@20",
    "ranking/hit_rate@10",
    "ranking/map@10",
    "coverage@10",
    "gini@10",
]


def build_evaluator(model, split: data.Split, device="cpu") -> Engine:
    """An evaluator over batches of user ids: scores all items, excludes seen ones, compares with test."""

    @torch.no_grad()
    def score_users(engine, users):
        model.eval()
        return split.evaluation_batch(model, users, device)  # (scores, test items CSR, training items CSR)

    evaluator = Engine(score_users)
    RankingMetrics(TOP_K, device=device).attach(evaluator, "ranking")
    ItemCoverage(TOP_K, device=device).attach(evaluator, "coverage")
    GiniIndex(TOP_K, device=device).attach(evaluator, "gini")
    return evaluator


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    data.add_arguments(parser)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--eval-batch-size", type=int, default=256)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    split = data.from_arguments(args)
    print(split.description, f"| train {int(split.train.sum())}, test {int(split.test.sum())} interactions")
    model = MatrixFactorization(*split.train.shape, dim=args.dim)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    trainer = Engine(lambda engine, batch: bpr_step(model, optimizer, batch))
    if not args.no_progress:
        ProgressBar(persist=False).attach(trainer, output_transform=lambda loss: {"bpr": loss})
    evaluator = build_evaluator(model, split)
    user_batches = list(torch.arange(split.train.shape[0]).split(args.eval_batch_size))
    history = []

    @trainer.on(Events.EPOCH_COMPLETED)
    def evaluate(engine):
        metrics = evaluator.run(user_batches).metrics
        history.append({name: metrics[name] for name in LOGGED})
        print(f"epoch {engine.state.epoch}: " + "  ".join(f"{n} {metrics[n]:.4f}" for n in LOGGED))

    epochs = [bpr_batches(split.train, args.batch_size, seed=epoch) for epoch in range(args.epochs)]
    trainer.set_data(epochs[0])
    trainer.add_event_handler(Events.EPOCH_STARTED, lambda e: e.set_data(epochs[e.state.epoch - 1]))
    trainer.run(epochs[0], max_epochs=args.epochs)
    return history


if __name__ == "__main__":
    main()
