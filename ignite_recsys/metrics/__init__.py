from .ranking import F1, MAP, MRR, NDCG, HitRate, Precision, Recall, RPrecision
from .ranking_metrics import RankingMetrics

__all__ = ["NDCG", "HitRate", "Recall", "Precision", "MAP", "MRR", "F1", "RPrecision", "RankingMetrics"]
