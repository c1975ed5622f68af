"""Two recommenders compared as curves of NDCG@k and Recall@k over k, with confidence bands,
written to a PNG.

What it shows: one ``RankingMetrics`` with 50 cut-offs gives whole metric@k curves from a single
ranking step per batch, and ``confidence_interval`` a Student-t band around each curve from the
streamed sums of squares (no per-user values kept). Models: a popularity baseline and matrix
factorisation (BPR).

    python examples/plot_metric_at_k.py [--out metric_at_k.png] [--level 0.95] [--data u.data]
"""

from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

import data  # noqa: E402
from models import popularity_scores, train_mf  # noqa: E402
from ignite_recsys import RankingMetrics  # noqa: E402

NAMES = {"ndcg": "NDCG@k", "recall": "Recall@k"}


def curves(score_users, split, top_k, level=0.95):
    """{"ndcg": [value per k], "ndcg_interval": [(low, high) per k], ...}"""
    # ties="average": the popularity baseline gives many items the same count, and nothing orders
    # them, so each tied order counts equally (the expected value); untied scores (matrix
    # factorisation) give the same values as the default tie rule.
    metric = RankingMetrics(top_k, metrics=list(NAMES), ties="average")
    with torch.no_grad():
        for batch in split.batches(score_users):
            metric.update(batch)
    values, intervals = metric.compute(), metric.confidence_interval(level)
    result = {name: [values[f"{name}@{k}"] for k in top_k] for name in NAMES}
    result.update({f"{name}_interval": [intervals[f"{name}@{k}"] for k in top_k] for name in NAMES})
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    data.add_arguments(parser)
    parser.add_argument("--max-k", type=int, default=50)
    parser.add_argument("--out", default="metric_at_k.png")
    parser.add_argument("--level", type=float, default=0.95, help="confidence level of the bands")
    args = parser.parse_args(argv)

    split = data.from_arguments(args)
    top_k = list(range(1, args.max_k + 1))
    models = {"popularity": popularity_scores(split.train), "matrix factorisation": train_mf(split.train, epochs=4)}
    results = {name: curves(model, split, top_k, args.level) for name, model in models.items()}

    figure, axes = plt.subplots(1, len(NAMES), figsize=(10, 4))
    for axis, (metric, label) in zip(axes, NAMES.items()):
        for model, values in results.items():
            (line,) = axis.plot(top_k, values[metric], label=model)
            low, high = zip(*values[f"{metric}_interval"])
            axis.fill_between(top_k, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
        axis.set_xlabel("k")
        axis.set_title(label)
        axis.grid(alpha=0.3)
    axes[0].legend()
    figure.suptitle(f"{split.description}; bands: {args.level:.0%} confidence intervals")
    figure.tight_layout()
    figure.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    for model, values in results.items():
        print(f"{model:>22}: NDCG@10 {values['ndcg'][9]:.4f}  Recall@{args.max_k} {values['recall'][-1]:.4f}")
    return results, args.out


if __name__ == "__main__":
    main()
