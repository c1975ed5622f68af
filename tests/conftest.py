import numpy as np
import pytest
import torch

import ignite_recsys as R

# name -> (class, extra constructor kwargs that select the default convention)
CUTOFF_CLASSES = {
    "ndcg": R.NDCG,
    "hit_rate": R.HitRate,
    "recall": R.Recall,
    "precision": R.Precision,
    "map": R.MAP,
    "mrr": R.MRR,
    "f1": R.F1,
}


def run_metric(metric, batches):
    metric.reset()
    for batch in batches:
        metric.update(batch)
    return metric.compute()


def random_batch(rng, users, items, *, graded=False, ties=False, relevant_share=0.3, zero_users=0):
    """Scores (float32) and relevance (float32) with optional heavy ties and empty users."""
    if ties:
        scores = rng.integers(0, 4, size=(users, items)).astype(np.float32)
    else:
        scores = rng.permutation(users * items).reshape(users, items).astype(np.float32)
    relevant = rng.random((users, items)) < relevant_share
    labels = rng.integers(1, 5, size=(users, items)) if graded else np.ones((users, items))
    relevance = np.where(relevant, labels, 0).astype(np.float32)
    relevance[:zero_users] = 0
    return torch.from_numpy(scores), torch.from_numpy(relevance)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
