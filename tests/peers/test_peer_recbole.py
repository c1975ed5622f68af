"""RecBole's evaluator against SampledMetrics' naive sampled metrics, under RecBole's sampled
protocol (one test item per user ranked among its sampled negatives: ``uni100`` and ``pop100``).

The metric draws the negatives and asks a model callable for the scores of each user's
candidates (the test item first, then its negatives); the test records them and hands the same
(users, 1 + n) score matrix, the test item in column 0, to RecBole's own ``Collector`` (top-k and
the positive matrix) and ``Evaluator`` (NDCG, Hit, Recall, Precision, MAP, MRR): the same
candidates, so the same ranks. Scores are distinct (no tie to break). RecBole's evaluator is
compared per user (``metric_info``) and as the means it reports (``metric_decimal_place=12``).

RecBole 1.2.1 runs in its own venv (``run_all.sh``: ``--system-site-packages``, so the main
environment's torch). It still spells ``np.float``, which numpy 2 removed; the test restores that
alias (it is Python's ``float``) before RecBole runs.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from peer_check import agree  # noqa: E402

recbole_collector = pytest.importorskip("recbole.evaluator.collector")
recbole_evaluator = pytest.importorskip("recbole.evaluator.evaluator")
recbole_metrics = pytest.importorskip("recbole.evaluator.metrics")
if not hasattr(np, "float"):  # (only where RecBole is installed: its own venv)
    np.float = float  # type: ignore[attr-defined]  # RecBole 1.2.1 spells np.float

import torch  # noqa: E402
from library_inputs import R  # noqa: E402  (ignite_recsys from this checkout)

TOP_K = [1, 5, 10, 20]
NAMES = {"ndcg": "NDCG", "hit_rate": "Hit", "recall": "Recall", "precision": "Precision", "map": "MAP", "mrr": "MRR"}


class Recording:
    """A model callable: distinct random scores, each call's items and scores kept."""

    def __init__(self, num_users, num_items, seed):
        generator = torch.Generator().manual_seed(seed)
        self.table = torch.randperm(num_users * num_items, generator=generator).double().view(num_users, num_items)
        self.calls = []

    def __call__(self, users, items):
        scores = self.table[users.unsqueeze(1), items]
        self.calls.append((items.clone(), scores.clone()))
        return scores


def _config():
    return {
        "metrics": list(NAMES.values()),
        "topk": TOP_K,
        "metric_decimal_place": 12,
        "eval_args": {"mode": "uni100"},
        "device": torch.device("cpu"),
    }


@pytest.mark.parametrize("sampling", ["uniform", "popularity"])
def test_naive_sampled_metrics_equal_recboles_evaluator(sampling):
    num_users, num_items, n = 300, 2000, 100
    generator = torch.Generator().manual_seed(5)
    positives = torch.randint(num_items, (num_users,), generator=generator)
    exclude = torch.rand(num_users, num_items, generator=generator) < 0.05  # the training history
    exclude[torch.arange(num_users), positives] = False
    weights = torch.randint(0, 50, (num_items,), generator=generator).double() if sampling == "popularity" else None
    model = Recording(num_users, num_items, seed=6)
    metric = R.SampledMetrics(
        top_k=TOP_K,
        metrics=list(NAMES),
        num_negatives=n,
        sampling=sampling,
        item_weights=weights,
        estimators=["naive"],
        model=model,
        num_items=num_items,
        seed=7,
        per_user=True,
    )
    users = torch.arange(num_users)
    for batch in users.split(64):
        metric.update((batch, positives[batch], exclude[batch]))
    ours = metric.compute()
    per_item = metric.per_user()

    items = torch.cat([call[0] for call in model.calls])
    scores = torch.cat([call[1] for call in model.calls])
    assert items.shape == (num_users, n + 1) and torch.equal(items[:, 0], positives)
    negatives = items[:, 1:]
    assert not exclude.gather(1, negatives).any()  # never a training item
    assert not (negatives == positives.unsqueeze(1)).any()  # never the test item

    config = _config()
    collector = recbole_collector.Collector(config)
    collector.eval_batch_collect(scores, None, torch.arange(num_users), torch.zeros(num_users, dtype=torch.int64))
    data = collector.get_data_struct()
    reported = recbole_evaluator.Evaluator(config).evaluate(data)
    for name, recbole_name in NAMES.items():
        klass = getattr(recbole_metrics, recbole_name)(config)
        info = klass.used_info(data)
        values = klass.metric_info(*info) if recbole_name in ("NDCG", "Recall", "MAP") else klass.metric_info(info[0])
        for k in TOP_K:
            key = f"{name}@{k}/naive"
            mine = per_item[key].numpy()
            for u in range(num_users):
                agree(f"RecBole {recbole_name}@k {sampling} sampled (per user)", mine[u], values[u, k - 1], 1e-12)
            agree(f"RecBole {recbole_name}@k {sampling} sampled (mean)", ours[key], values[:, k - 1].mean(), 1e-12)
            agree(
                f"RecBole {recbole_name}@k {sampling} sampled (Evaluator, 12 places)",
                ours[key],
                reported[f"{recbole_name.lower()}@{k}"],
                1e-12,
            )
