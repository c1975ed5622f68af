from .._registry import LIST_ENTRIES
from ._engine import scalar_metric_names
from ._ranking import BoundaryTieWarning
from .beyond_accuracy import AveragePopularity, GiniIndex, ItemCoverage, Novelty, ShannonEntropy, TailPercentage
from .calibration import Miscalibration, RankBiasedEntropy
from .diversity import IntraListDiversity, Serendipity
from .novelty import EFD, EPC, MeanInvUserFreq
from .overlap import Intersection, RankBiasedOverlap
from .paired import Paired
from .popularity_bias import ACLT, APLT, ExposureGini, ItemGroupExposure, MeanPopRank, PopREO, PopRSP
from .ranking import *  # noqa: F401,F403  (one class per entry of the registry of ranking metrics)
from .ranking import __all__ as _ranking_names
from .ranking_metrics import RankingMetrics, RecallAtFixedPrecision
from .sampled import SampledMetrics
from .score_based import AUC, GAUC, MAE, RMSE, LogLoss

# The metric classes by family: what the package exports, and the groups of the API reference
FAMILIES = {
    # one class per registry entry, and many at once
    "Ranking quality at cut-offs": [*_ranking_names, "RankingMetrics", "RecallAtFixedPrecision"],
    # the metrics of the top-k lists, in the order of their registry (two models' lists last)
    "Beyond accuracy": [entry.class_name for entry in LIST_ENTRIES],
    "Score-based": ["GAUC", "AUC", "LogLoss", "MAE", "RMSE"],
    "Sampled evaluation": ["SampledMetrics"],  # test items among sampled negatives, full-catalog estimates
}

__all__ = [
    *(name for names in FAMILIES.values() for name in names),
    "Paired",  # two models on the same users
    # Engine logging, diagnostics
    "scalar_metric_names",
    "BoundaryTieWarning",
]
