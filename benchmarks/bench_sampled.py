"""Sampled evaluation against the exact full-catalog value: bias, RMSE and model-ranking agreement
of the naive sampled metric and of each estimator of ``SampledMetrics``.

Data: the examples' synthetic generator (``examples/data.py``: latent tastes plus a Zipf-like
popularity, 20% of each user's interactions held out), ``--users`` users and ``--items`` items
(10,000 by default; ``--large``: 100,000 at a tenth of the density, the same number of test items
per user). Two models score every item:

* ``taste``: the generating affinity without the popularity term, plus Gaussian noise;
* ``popular``: the popularity term plus Gaussian noise.

Each test item (a (user, item) pair) has an exact full-catalog rank among its candidates (every
item neither in the user's training nor test interactions, and itself), which gives the exact
NDCG@10 and Recall@10 (one relevant item per test item). Then for each number of negatives n and
each sampling seed, ``SampledMetrics`` (uniform sampling without the training and test items,
the estimators at their defaults) gives the naive sampled metric and each estimate. Reported per
model, n, metric and estimator: the mean over seeds of estimate - exact (bias) with its standard
deviation over seeds, the RMSE, and the share of seeds whose estimate orders the two models as
the exact metric does.

    python benchmarks/bench_sampled.py [--seeds 50] [--negatives 50 100 500] [--large] [--markdown]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from data import synthetic  # noqa: E402  (examples/data.py)

from ignite_recsys import SampledMetrics  # noqa: E402

METRICS = [("ndcg", 10), ("recall", 10)]
ESTIMATORS = ["naive", "kr_bias", "kr_bv", "rescaled", "mle"]


def make_models(users, items, density, seed=0, noise=1.0):
    split, (user_taste, item_taste, item_bias) = synthetic(users=users, items=items, seed=seed, density=density)
    generator = torch.Generator().manual_seed(seed + 1)
    factors = user_taste.shape[1]
    taste = user_taste @ item_taste.T / factors**0.5
    models = {
        "taste": taste + noise * torch.randn(users, items, generator=generator),
        "popular": item_bias.expand(users, items) + noise * torch.randn(users, items, generator=generator),
    }
    return split, models


def padded_test_items(test):
    """(users, p) int64 test item ids of each user, -1 padded."""
    counts = test.sum(1)
    width = int(counts.max())
    ids = torch.full((test.shape[0], width), -1, dtype=torch.int64)
    for user in range(test.shape[0]):
        items = test[user].nonzero().flatten()
        ids[user, : len(items)] = items
    return ids


def exact_ranks(scores, train, test, positives):
    """Each test item's full rank among the candidates (not training, not test items) and itself:
    1 + the candidates scored above it (continuous scores: no ties). NaN for padding."""
    candidates = torch.where(train | test, -math.inf, scores.double())
    ascending = candidates.sort(1).values
    valid = positives >= 0
    own = scores.double().gather(1, positives.clamp_min(0))
    above = scores.shape[1] - torch.searchsorted(ascending, own, right=True)
    return torch.where(valid, above.double() + 1, torch.nan)


def exact_value(name, k, ranks):
    ranks = ranks[~ranks.isnan()]
    inside = ranks <= k
    if name == "ndcg":
        return float(torch.where(inside, 1 / torch.log2(ranks + 1), 0.0).mean())
    return float(inside.double().mean())


def sampled_estimates(scores, train, positives, n, seed, batch=64):
    metric = SampledMetrics(top_k=[10], metrics=["ndcg", "recall"], num_negatives=n, seed=seed)
    for start in range(0, scores.shape[0], batch):
        rows = slice(start, start + batch)
        metric.update((scores[rows], positives[rows], train[rows]))
    return metric.compute(), metric.num_candidates()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=500)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--density", type=float, default=0.02)
    parser.add_argument("--large", action="store_true", help="100,000 items at density 0.002")
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--negatives", type=int, nargs="+", default=[50, 100, 500])
    parser.add_argument("--noise", type=float, default=1.0, help="standard deviation of the models' score noise")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    if args.large:
        args.items, args.density = 100_000, 0.002
    started = time.time()
    split, models = make_models(args.users, args.items, args.density, noise=args.noise)
    positives = padded_test_items(split.test)
    exact = {}
    for model, scores in models.items():
        ranks = exact_ranks(scores, split.train, split.test, positives)
        exact[model] = {f"{name}@{k}": exact_value(name, k, ranks) for name, k in METRICS}
    rows = []
    candidates = None
    for n in args.negatives:
        estimates = {model: [] for model in models}
        for seed in range(args.seeds):
            for model, scores in models.items():
                values, candidates = sampled_estimates(scores, split.train, positives, n, seed)
                estimates[model].append(values)
        for name, k in METRICS:
            key = f"{name}@{k}"
            truth_order = np.sign(exact["taste"][key] - exact["popular"][key])
            for estimator in ESTIMATORS:
                per_model = {m: np.array([v[f"{key}/{estimator}"] for v in estimates[m]]) for m in models}
                agreement = np.mean(np.sign(per_model["taste"] - per_model["popular"]) == truth_order)
                for model in models:
                    error = per_model[model] - exact[model][key]
                    rows.append(
                        (
                            model,
                            n,
                            key,
                            estimator,
                            exact[model][key],
                            per_model[model].mean(),
                            error.mean(),
                            error.std(ddof=1) if len(error) > 1 else math.nan,
                            math.sqrt(np.mean(error**2)),
                            agreement,
                        )
                    )
    num_test = int((positives >= 0).sum())
    load = os.getloadavg()[0]
    header = (
        f"{args.users} users, {args.items} items, {num_test} test items, N = {candidates[1]}..{candidates[2]} "
        f"candidates per test item (mean {candidates[0]}); {args.seeds} seeds; load average {load:.1f}; "
        f"{time.time() - started:.0f} s"
    )
    columns = ["model", "n", "metric", "estimator", "exact", "mean estimate", "bias", "sd", "RMSE", "A>B agrees"]
    if args.markdown:
        print(header + "\n")
        print("| " + " | ".join(columns) + " |")
        print("|" + "---|" * len(columns))
        for row in rows:
            model, n, key, estimator, truth, mean, bias, sd, rmse, agreement = row
            print(
                f"| {model} | {n} | {key} | {estimator} | {truth:.4f} | {mean:.4f} | {bias:+.4f} | {sd:.4f} | "
                f"{rmse:.4f} | {agreement:.0%} |"
            )
    else:
        print(header)
        print(
            ("{:>8} {:>4} {:>10} {:>9} {:>8} {:>8} {:>8} {:>7} {:>7} {:>6}").format(
                *columns[:5], "mean", *columns[6:9], "agree"
            )
        )
        for model, n, key, estimator, truth, mean, bias, sd, rmse, agreement in rows:
            print(
                f"{model:>8} {n:4d} {key:>10} {estimator:>9} {truth:8.4f} {mean:8.4f} {bias:+8.4f} {sd:7.4f} "
                f"{rmse:7.4f} {agreement:6.0%}"
            )


if __name__ == "__main__":
    main()
