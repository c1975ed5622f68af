"""Streaming recommender-system metrics for PyTorch and PyTorch-Ignite.

Every metric is an :class:`ignite.metrics.Metric` with constant-size float64 state: attach it to
an Ignite ``Engine`` or call ``reset`` / ``update((y_pred, y))`` / ``compute`` in a plain loop.
"""

from .metrics import *  # noqa: F401,F403
from .metrics import __all__

__version__ = "0.3.0"
