from ._engine import scalar_metric_names
from .beyond_accuracy import AveragePopularity, GiniIndex, ItemCoverage, Novelty, ShannonEntropy, TailPercentage
from .ranking import F1, MAP, MRR, NDCG, HitRate, Precision, Recall, RPrecision
from .ranking_metrics import RankingMetrics
from .score_based import AUC, GAUC, MAE, RMSE, LogLoss

__all__ = [
    # ranking quality at cut-offs
    "NDCG", "HitRate", "Recall", "Precision", "MAP", "MRR", "F1", "RPrecision", "RankingMetrics",
    # beyond accuracy
    "ItemCoverage", "GiniIndex", "ShannonEntropy", "AveragePopularity", "TailPercentage", "Novelty",
    # score-based
    "GAUC", "AUC", "LogLoss", "MAE", "RMSE",
    # Engine logging
    "scalar_metric_names",
]
