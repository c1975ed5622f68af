from ._engine import scalar_metric_names
from ._ranking import BoundaryTieWarning
from .beyond_accuracy import AveragePopularity, GiniIndex, ItemCoverage, Novelty, ShannonEntropy, TailPercentage
from .paired import Paired
from .ranking import *  # noqa: F401,F403  (one class per entry of the registry of ranking metrics)
from .ranking import __all__ as _ranking_names
from .ranking_metrics import RankingMetrics
from .score_based import AUC, GAUC, MAE, RMSE, LogLoss

__all__ = [
    # ranking quality at cut-offs, one class per registry entry, and many at once
    *_ranking_names, "RankingMetrics",
    # beyond accuracy
    "ItemCoverage", "GiniIndex", "ShannonEntropy", "AveragePopularity", "TailPercentage", "Novelty",
    # score-based
    "GAUC", "AUC", "LogLoss", "MAE", "RMSE",
    # two models on the same users
    "Paired",
    # Engine logging, diagnostics
    "scalar_metric_names", "BoundaryTieWarning",
]
