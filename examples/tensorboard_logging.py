"""Log every metric value to TensorBoard as one scalar, once per epoch.

What it shows: an evaluator ``Engine`` with ``RankingMetrics``, ``ItemCoverage`` and ``GAUC``
attached, evaluated after each epoch of a stand-in "training" (a model whose scores get less
noisy each epoch), and Ignite's TensorBoard ``OutputHandler`` given
``metric_names=scalar_metric_names(evaluator)``: one tag per value, named
``"validation/ranking/ndcg@10"``, ``"validation/coverage@10"``, ``"validation/gauc"``.
(``metric_names="all"`` would also log each per-k list as ``".../coverage/0"``, ``"/1"``, ...)

Without TensorBoard (``pip install tensorboard``) it prints the tags and values and writes no
event files.

    python examples/tensorboard_logging.py --log-dir runs/demo && tensorboard --logdir runs
"""

from __future__ import annotations

import argparse

import torch
from ignite.engine import Engine, Events
from ignite.handlers import global_step_from_engine
from ignite.handlers.tensorboard_logger import OutputHandler, TensorboardLogger

import data
from ignite_recsys import GAUC, ItemCoverage, RankingMetrics, scalar_metric_names

TOP_K = [5, 10, 20]


def make_logger(log_dir: str):
    """Ignite's TensorBoard logger, or None when neither tensorboard nor tensorboardX is installed."""
    try:
        return TensorboardLogger(log_dir=log_dir)
    except ImportError as error:  # ModuleNotFoundError included
        print(f"TensorBoard is not available ({type(error).__name__}); printing the values instead.")
        return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    data.add_arguments(parser, users=500, items=1000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--log-dir", default="runs/ignite_recsys")
    args = parser.parse_args(argv)
    split, (user_taste, item_taste, item_bias) = data.synthetic(args.users, args.items)
    noise = torch.randn(args.users, args.items, generator=torch.Generator().manual_seed(1))

    def model(users, epoch):  # stands in for a model that learns: less noise every epoch
        return user_taste[users] @ item_taste.T / 4 + item_bias + noise[users] * 2 / epoch

    trainer = Engine(lambda engine, batch: None)  # the training step would go here
    evaluator = Engine(lambda engine, users: split.score(lambda u: model(u, trainer.state.epoch), users))
    RankingMetrics(TOP_K, metrics=["ndcg", "recall", "hit_rate"]).attach(evaluator, "ranking")
    ItemCoverage(TOP_K).attach(evaluator, "coverage")
    GAUC().attach(evaluator, "gauc")

    names = scalar_metric_names(evaluator)  # after attaching: one key per value
    logger = make_logger(args.log_dir)
    if logger is not None:
        handler = OutputHandler(
            tag="validation", metric_names=names, global_step_transform=global_step_from_engine(trainer)
        )
        logger.attach(evaluator, log_handler=handler, event_name=Events.COMPLETED)

    user_batches = list(torch.arange(args.users).split(128))
    history = []

    @trainer.on(Events.EPOCH_COMPLETED)
    def evaluate(engine):
        metrics = evaluator.run(user_batches).metrics
        history.append({name: metrics[name] for name in names})
        print(f"epoch {engine.state.epoch}: " + "  ".join(f"{n} {metrics[n]:.4f}" for n in names[:4]) + " ...")

    trainer.run([None], max_epochs=args.epochs)
    if logger is not None:
        logger.close()
        print(f"{len(names)} scalars per epoch written to {args.log_dir}: tensorboard --logdir {args.log_dir}")
    return {"names": names, "history": history, "logger": logger}


if __name__ == "__main__":
    main()
