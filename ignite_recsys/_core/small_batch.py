"""The ranking step of a small dense batch on CPU (a few users, e.g. one test batch of a full-sort
evaluation loop), in a handful of operations.

A torch operation costs a few microseconds before it reads any data; numpy's per-call cost is
several times lower. For a batch of a few thousand scores the general ranking step's forty-odd
operations cost far more than the work, so here one ``torch.topk`` selects, numpy compares,
counts and accumulates the positions on the CPU tensors' own memory (no copy of the inputs), and
the gains go through the one :func:`~.relevance.gains` (the same float64 operations as every
other path). The path is chosen by the device type and the batch's size only
(``tuning.small_batch``), never on an accelerator.

Exactness: ``torch.topk``'s order is the stable order (score descending, index ascending) when the
best ``depth + 1`` scores of every row decrease strictly (no tie and no NaN, which ``topk`` ranks
first and which compares false); any other batch returns None and takes the general step, which
breaks ties by index and reports NaN scores. Counts of 0/1 flags and their running sums are exact
in float64 whichever library adds them.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from . import tuning
from .relevance import Relevance, gains

_COMPARE = {torch.ge: np.greater_equal, torch.gt: np.greater}
_FLOATS = (torch.float32, torch.float64)


def small_dense_ranking(
    scores: torch.Tensor,
    labels: torch.Tensor,
    depth: int,
    relevance: Relevance,
    gain_functions: tuple,
    threshold: Optional[float],
    ideal_gain_function,
    count: bool,
) -> Optional[tuple]:
    """The dense ranking step (``ties="stable"``) of a small CPU batch, or None where it does not
    apply (another device, a larger batch, other dtypes, a custom gain, tied or NaN scores among
    the best ``depth + 1``). Returns (order (batch, depth) int64, positions as
    ``ties.stable_positions`` gives them, |R| (float64, None unless ``count``), has a relevant
    item (bool), the labels hold a NaN (0-dim bool), the ideal gains (None unless
    ``ideal_gain_function``), the ranked labels (float64)). ``depth`` is at most the number of
    items."""
    num_items = scores.shape[1]
    width = min(depth + 1, num_items)
    wanted = gain_functions + (() if ideal_gain_function is None else (ideal_gain_function,))
    if (
        width < 2
        or not tuning.small_batch(scores)
        or scores.dtype not in _FLOATS
        or labels.dtype not in _FLOATS
        or labels.device != scores.device
        or any(callable(g) for g in wanted)
    ):
        return None
    values, indices = _plain(scores).topk(width, 1)
    top_scores = values.numpy()
    if not (top_scores[:, 1:] < top_scores[:, :-1]).all():  # a tie or a NaN: the general step
        return None
    order = np.ascontiguousarray(indices.numpy()[:, :depth])
    y = _plain(labels).numpy()
    compare = _COMPARE[relevance.compare]
    relevant = compare(y, relevance.value)
    counts = relevant.sum(1, dtype=np.float64)
    top = y[np.arange(y.shape[0])[:, None], order].astype(np.float64)
    hit = compare(top, relevance.value).astype(np.float64)
    hits_so_far = hit.cumsum(1)
    first_hit = (hits_so_far == 1.0) * hit
    hit_times_hits_so_far = hit * hits_so_far
    top_gains = [_gains(top, hit, g, threshold) for g in gain_functions]
    ideal = None
    if ideal_gain_function is not None:  # gains of (batch, depth) labels, as the general step's
        ideal = _gains(*_ideal_labels(y, relevant, counts, depth, ideal_gain_function), ideal_gain_function, threshold)
    return (
        torch.from_numpy(order),
        (torch.from_numpy(hit), top_gains, torch.from_numpy(hit_times_hits_so_far), torch.from_numpy(first_hit)),
        torch.from_numpy(counts) if count else None,
        torch.from_numpy(counts > 0),
        torch.from_numpy(np.array(np.isnan(y.max()))),
        ideal,
        torch.from_numpy(top),
    )


def _plain(x: torch.Tensor) -> torch.Tensor:
    """``x`` without its autograd history (numpy reads no tensor that requires grad)."""
    return x.detach() if x.requires_grad else x


def _gains(values: np.ndarray, relevant: np.ndarray, gain_function, threshold) -> torch.Tensor:
    """:func:`~.relevance.gains` of numpy float64 arrays (the same operations as every path)."""
    return gains(torch.from_numpy(values), torch.from_numpy(relevant), gain_function, threshold)


def _ideal_labels(y: np.ndarray, relevant: np.ndarray, counts: np.ndarray, depth: int, gain_function) -> tuple:
    """The ideal ranking's labels and relevance flags (batch, depth) float64, as
    ``relevance.ideal_gains`` ranks them: each row's relevant labels (``relevant``, |R| =
    ``counts`` of them), largest first, then 0 labels that are not relevant (a label that is not
    relevant gains 0 whatever its value, and every relevant label exceeds every other). Binary
    gains: 1 at the first |R| positions."""
    positions = np.arange(depth)
    if gain_function == "binary":
        flags = (positions < counts[:, None]).astype(np.float64)
        return flags, flags
    rows, columns = np.nonzero(relevant)  # row by row
    values = y[rows, columns].astype(np.float64)
    ranked = values[np.lexsort((-values, rows))]  # rows ascending, each row's labels descending
    row_counts = counts.astype(np.int64)
    position = np.arange(len(rows)) - (np.cumsum(row_counts) - row_counts)[rows]
    kept = position < depth
    best = np.zeros((y.shape[0], depth))
    best[rows[kept], position[kept]] = ranked[kept]
    return best, (positions < counts[:, None]).astype(np.float64)
