"""Streaming recommender-system metrics for PyTorch and PyTorch-Ignite.

Every metric is an :class:`ignite.metrics.Metric` with constant-size float64 state: attach it to
an Ignite ``Engine`` or call ``reset`` / ``update((y_pred, y))`` / ``compute`` in a plain loop.
Predictions may be dense scores, :class:`RankedItems` or :class:`DotScores`; targets dense,
sparse or :class:`ItemIds`; the ranking and catalog metrics also take ``(y_pred, y, exclude)``.
:mod:`ignite_recsys.functional` gives the same per-user values from tensors in one call.
"""

from . import functional
from ._core.input_checks import InputWarning
from .fairness import GroupGap, group_gap
from .inputs import DotScores, ItemIds, Observed, RankedItems, UserGroups, UserIds
from .metrics import *  # noqa: F401,F403
from .metrics import __all__ as _metric_names
from .report import Report
from .stats import PairedTestResult, PerUserValues, correct_p_values, paired_test
from .data import IdMap, Interactions
from .evaluation import EvaluationResult, evaluate

__all__ = list(_metric_names) + [
    "ItemIds",
    "RankedItems",
    "DotScores",
    "Observed",
    "UserGroups",
    "UserIds",
    "InputWarning",
    "paired_test",
    "correct_p_values",
    "PairedTestResult",
    "PerUserValues",
    "Report",
    "functional",
    "Interactions",
    "IdMap",
    "evaluate",
    "EvaluationResult",
    "GroupGap",
    "group_gap",
]

__version__ = "0.3.0"
