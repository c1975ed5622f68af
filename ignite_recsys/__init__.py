"""Streaming recommender-system metrics for PyTorch and PyTorch-Ignite.

Every metric is an :class:`ignite.metrics.Metric` with constant-size float64 state: attach it to
an Ignite ``Engine`` or call ``reset`` / ``update((y_pred, y))`` / ``compute`` in a plain loop.
"""

from .metrics import F1, MAP, MRR, NDCG, HitRate, Precision, RankingMetrics, Recall, RPrecision

__version__ = "0.1.0"

__all__ = ["NDCG", "HitRate", "Recall", "Precision", "MAP", "MRR", "F1", "RPrecision", "RankingMetrics"]
