"""The peer cases as inputs of ignite_recsys' metric classes, for the checks that run the library
itself in a peer's venv (``test_peer_*_metrics.py``). ignite_recsys is imported from this checkout
(the repository root is put first on ``sys.path``; in a venv without the package installed that
is the one found), so the venv needs torch, pytorch-ignite and scipy, not the package."""

from __future__ import annotations

import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import ignite_recsys as R  # noqa: E402


def ranked_items(lists, width):
    """RankedItems of the lists, padded with -1 to ``width`` positions."""
    ids = -np.ones((len(lists), width), dtype=np.int64)
    for u, items in enumerate(lists):
        ids[u, : len(items)] = items
    return R.RankedItems(torch.as_tensor(ids))


def dense_labels(users, n_items):
    """(users, n_items) float64 labels of the cases (0 for unjudged items)."""
    labels = np.zeros((len(users), n_items))
    for u, user in enumerate(users):
        for item, grade in user["labels"].items():
            labels[u, item] = grade
    return torch.as_tensor(labels)


def per_user(metric, *outputs):
    """The metric's per-user values (users, len(top_k)) after one update per output, as numpy."""
    for output in outputs:
        metric.update(output)
    return metric.per_user().numpy()
