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

A second data set no estimator was tuned to (``--data toplaw``): a catalog of ``--items`` items
with descending scores and one test item per user at full rank ``ceil(items * u**a)``, u uniform:
``a = 3`` for the model ``steep3`` and ``a = 5`` for ``steep5`` (a top-heavy rank law; ``steep5``
is the better model at every cut-off, exactly).

``--output FILE`` writes the Markdown table of both data sets (no timing in it: a rerun of the
command it names gives the same file); docs/sampled.md includes docs/_generated/sampled_table.inc,
written by

    python benchmarks/bench_sampled.py --docs

``--timing`` measures ``SampledMetrics.compute()`` (every estimator, first call: nothing cached)
at ``--timing-items`` items (default 1,000,000) and 100 negatives.

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
DOCS_TABLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "_generated")
DOCS_ARGUMENTS = ["--users", "150", "--items", "3000", "--seeds", "10", "--negatives", "50", "100"]


def toplaw_models(users, items, seed=0):
    """(exact full ranks per model (users,), model -> positives (users,)): item i of the catalog
    scores -i (rank i + 1); each user's test item is at rank ceil(items * u**a)."""
    generator = torch.Generator().manual_seed(seed)
    uniform = torch.rand(users, generator=generator, dtype=torch.float64)
    ranks = {f"steep{a}": (items * uniform**a).ceil().clamp(1, items).to(torch.int64) for a in (3, 5)}
    return ranks


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
    metric = SampledMetrics(top_k=[10], metrics=["ndcg", "recall"], num_negatives=n, seed=seed, estimators=ESTIMATORS)
    for start in range(0, scores.shape[0], batch):
        rows = slice(start, start + batch)
        metric.update((scores[rows], positives[rows], train[rows]))
    return metric.compute(), metric.num_candidates()


def toplaw_estimates(items, positives, n, seed):
    """SampledMetrics of a model scoring item i as -i (a model callable: no score matrix)."""
    metric = SampledMetrics(
        top_k=[10],
        metrics=["ndcg", "recall"],
        num_negatives=n,
        seed=seed,
        estimators=ESTIMATORS,
        model=lambda users, candidates: -candidates.to(torch.float64),
        num_items=items,
    )
    for start in range(0, len(positives), 64):
        part = positives[start : start + 64]
        metric.update((torch.arange(len(part)), part))
    return metric.compute(), metric.num_candidates()


def compute_time(items=1_000_000, n=100, users=200):
    """Seconds of SampledMetrics.compute() (every estimator, nothing cached) at ``items`` items."""
    from ignite_recsys._core import sampled_estimators as E

    ranks = toplaw_models(users, items)["steep3"]
    metric = SampledMetrics(
        top_k=[10],
        metrics=["ndcg", "recall", "precision", "map", "mrr"],
        num_negatives=n,
        estimators=ESTIMATORS,
        model=lambda users, candidates: -candidates.to(torch.float64),
        num_items=items,
    )
    for start in range(0, users, 8):
        part = ranks[start : start + 8] - 1
        metric.update((torch.arange(len(part)), part))
    for cached in (E.least_squares_rows, E.krichene_rendle_tables, E._bounded_least_bias_column, E.bin_probabilities):
        cached.cache_clear()
    import scipy.optimize  # noqa: F401  (imported once per process: not part of compute's own time)

    times = {}
    for estimator in ESTIMATORS:
        metric.estimators = [estimator]
        started = time.perf_counter()
        metric.compute()
        times[estimator] = time.perf_counter() - started
    metric.estimators = list(ESTIMATORS)
    metric._tables.clear()
    for cached in (E.least_squares_rows, E.krichene_rendle_tables, E._bounded_least_bias_column, E.bin_probabilities):
        cached.cache_clear()
    started = time.perf_counter()
    metric.compute()
    times["all"] = time.perf_counter() - started
    return times, metric.mle_gap


def rows_of(estimates, exact, models, n):
    rows = []
    for name, k in METRICS:
        key = f"{name}@{k}"
        first, second = models
        truth_order = np.sign(exact[first][key] - exact[second][key])
        for estimator in ESTIMATORS:
            per_model = {m: np.array([v[f"{key}/{estimator}"] for v in estimates[m]]) for m in models}
            agreement = np.mean(np.sign(per_model[first] - per_model[second]) == truth_order)
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
    return rows


COLUMNS = ["model", "n", "metric", "estimator", "exact", "mean estimate", "bias", "sd", "RMSE", "A>B agrees"]


def markdown(rows):
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for model, n, key, estimator, truth, mean, bias, sd, rmse, agreement in rows:
        lines.append(
            f"| {model} | {n} | {key} | {estimator} | {truth:.4f} | {mean:.4f} | {bias:+.4f} | {sd:.4f} | "
            f"{rmse:.4f} | {agreement:.0%} |"
        )
    return "\n".join(lines)


def run_toplaw(args):
    ranks = toplaw_models(args.users, args.items)
    exact = {
        model: {f"{name}@{k}": exact_value(name, k, r.to(torch.float64)) for name, k in METRICS}
        for model, r in ranks.items()
    }
    rows = []
    for n in args.negatives:
        estimates = {model: [] for model in ranks}
        for seed in range(args.seeds):
            for model, r in ranks.items():
                values, _ = toplaw_estimates(args.items, r - 1, n, seed)
                estimates[model].append(values)
        rows += rows_of(estimates, exact, list(ranks), n)
    return rows


def run_synthetic(args):
    split, models = make_models(args.users, args.items, args.density, noise=args.noise)
    positives = padded_test_items(split.test)
    exact = {}
    for model, scores in models.items():
        ranks = exact_ranks(scores, split.train, split.test, positives)
        exact[model] = {f"{name}@{k}": exact_value(name, k, ranks) for name, k in METRICS}
    rows, candidates = [], None
    for n in args.negatives:
        estimates = {model: [] for model in models}
        for seed in range(args.seeds):
            for model, scores in models.items():
                values, candidates = sampled_estimates(scores, split.train, positives, n, seed)
                estimates[model].append(values)
        rows += rows_of(estimates, exact, list(models), n)
    return rows, int((positives >= 0).sum()), candidates


def write_docs_table(args, path):
    """Both data sets' tables, with the command that made them (nothing that varies by machine)."""
    synthetic_rows, num_test, candidates = run_synthetic(args)
    toplaw_rows = run_toplaw(args)
    command = "python benchmarks/bench_sampled.py " + " ".join(args.command)
    text = (
        f"Made by `{command}` (both data sets, {args.seeds} sampling seeds).\n\n"
        f"**Synthetic** (`examples/data.py`): {args.users} users, {args.items} items, {num_test} test items, "
        f"N = {candidates[1]}..{candidates[2]} candidates per test item (mean {candidates[0]}); models `taste` "
        "and `popular`.\n\n"
        + markdown(synthetic_rows)
        + f"\n\n**Top-heavy rank law**: {args.users} test items per model, {args.items} items; models `steep3` "
        "and `steep5` (`steep5` is the better one, exactly).\n\n" + markdown(toplaw_rows) + "\n"
    )
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=500)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--density", type=float, default=0.02)
    parser.add_argument("--large", action="store_true", help="100,000 items at density 0.002")
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--negatives", type=int, nargs="+", default=[50, 100, 500])
    parser.add_argument("--noise", type=float, default=1.0, help="standard deviation of the models' score noise")
    parser.add_argument("--data", choices=["synthetic", "toplaw"], default="synthetic")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--output", help="write both data sets' Markdown tables to this file")
    parser.add_argument("--docs", action="store_true", help="--output docs/_generated/sampled_table.inc at its size")
    parser.add_argument("--timing", action="store_true", help="time compute() at --timing-items items")
    parser.add_argument("--timing-items", type=int, default=1_000_000)
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--docs" in argv:
        argv = [a for a in argv if a != "--docs"] + DOCS_ARGUMENTS + ["--output", "docs/_generated/sampled_table.inc"]
    args = parser.parse_args(argv)
    args.command = [a for a in argv]
    if args.large:
        args.items, args.density = 100_000, 0.002
    started = time.time()
    if args.timing:
        times, gap = compute_time(args.timing_items)
        cells = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in times.items())
        print(
            f"compute() at {args.timing_items} items, 100 negatives, 5 metrics: {cells} (mle gap {gap:.1e}); "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        return
    if args.output:
        print(write_docs_table(args, args.output))
        print(f"load average {os.getloadavg()[0]:.1f}; {time.time() - started:.0f} s", file=sys.stderr)
        return
    if args.data == "toplaw":
        rows, header = run_toplaw(args), f"top-heavy rank law: {args.users} test items, {args.items} items"
    else:
        rows, num_test, candidates = run_synthetic(args)
        header = (
            f"{args.users} users, {args.items} items, {num_test} test items, N = {candidates[1]}..{candidates[2]} "
            f"candidates per test item (mean {candidates[0]})"
        )
    header += f"; {args.seeds} seeds; load average {os.getloadavg()[0]:.1f}; {time.time() - started:.0f} s"
    if args.markdown:
        print(header + "\n")
        print(markdown(rows))
    else:
        print(header)
        print(
            ("{:>8} {:>4} {:>10} {:>9} {:>8} {:>8} {:>8} {:>7} {:>7} {:>6}").format(
                *COLUMNS[:5], "mean", *COLUMNS[6:9], "agree"
            )
        )
        for model, n, key, estimator, truth, mean, bias, sd, rmse, agreement in rows:
            print(
                f"{model:>8} {n:4d} {key:>10} {estimator:>9} {truth:8.4f} {mean:8.4f} {bias:+8.4f} {sd:7.4f} "
                f"{rmse:7.4f} {agreement:6.0%}"
            )


if __name__ == "__main__":
    main()
