"""The group pre-filter's selections on the host: CPU float32 rows, read through numpy.

On CPU a host read waits for nothing, and numpy's partition and sort of int64 keys (vectorised)
take a fraction of ``torch.topk``'s time on the few values left after the group maxima. The
steps are those of :mod:`.groups`: the best ``k`` groups by (maximum descending, group index
ascending), their items scoring at least T, the lowest of the chosen maxima (with the items after
the last full group), and the stable order of those candidates. Exact for the reasons given
there: every other item has at least ``k`` items ranked ahead of it.

Keys. A value's order as an int32 (``ordered``) in the high 32 bits, ``2**32 - 1 -`` its index
in the low ones: the key's descending order is the stable order (value descending, index
ascending). Stored inverted (``~key``) so that numpy's ascending partition and sort give it.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import tuning

_LOW_MASK = (1 << 32) - 1


def order_above(values, tail, tail_start: int, best: np.ndarray, threshold: np.ndarray, k: int, group: int):
    """(batch, k) int64: the items of each row in stable rank order, from ``values`` (batch, k *
    group), the items of the chosen groups ``best`` (batch, k), ``tail`` (batch, t), the items
    from ``tail_start`` on (after the last full group; t may be 0), and ``threshold`` (batch,), the
    lowest chosen maximum (``best_groups``). None where a row has fewer than ``k`` candidates
    (a NaN) or more than ``tuning.THRESHOLD_CANDIDATES_PER_K`` x ``k`` (many ties): the caller's
    selection then."""
    num_rows = values.shape[0]
    above, above_tail = values >= threshold[:, None], tail >= threshold[:, None]
    in_groups, in_tail = np.count_nonzero(above, axis=1), np.count_nonzero(above_tail, axis=1)
    counts = in_groups + in_tail
    widest = int(counts.max())
    if int(counts.min()) < k or widest > tuning.THRESHOLD_CANDIDATES_PER_K * k:
        return None
    keys = np.full((num_rows, widest), np.iinfo(np.int64).max, dtype=np.int64)  # after every candidate
    listed = np.flatnonzero(above)
    rows, columns = np.divmod(listed, values.shape[1])
    runs = best.reshape(-1).take(rows * k + columns // group)
    slots = np.arange(listed.size) - (np.cumsum(in_groups) - in_groups)[rows] + rows * widest
    keys.reshape(-1)[slots] = _inverted_keys(values.reshape(-1)[listed], runs * group + columns % group)
    if tail.shape[1]:  # each row's tail candidates after its group candidates
        listed = np.flatnonzero(above_tail)
        rows, columns = np.divmod(listed, tail.shape[1])
        first = np.cumsum(in_tail) - in_tail - in_groups
        slots = np.arange(listed.size) - first[rows] + rows * widest
        items = columns + tail_start
        keys.reshape(-1)[slots] = _inverted_keys(tail.reshape(-1)[listed], items)
    best_keys = np.sort(keys, axis=1)[:, :k]
    return torch.from_numpy(_LOW_MASK - (np.invert(best_keys) & _LOW_MASK))


def best_groups(maxima: np.ndarray, k: int) -> tuple:
    """The ``k`` best groups of each row (batch, k) int64, in no order, and the lowest chosen
    maximum of each row (batch,) float32: one partition of the maxima (the groups at least its
    k-th largest, where no other maximum ties it), and one of the groups' keys for the rows
    where one does."""
    num_rows, num_groups = maxima.shape
    lowest = np.partition(maxima, num_groups - k, axis=1)[:, num_groups - k]  # the k-th largest
    above = maxima >= lowest[:, None]
    tied = np.flatnonzero(np.count_nonzero(above, axis=1) != k)
    if tied.size == 0:
        return (np.flatnonzero(above) % num_groups).reshape(num_rows, k), lowest
    above[tied] = False
    best = np.empty((num_rows, k), dtype=np.int64)
    untied = np.ones(num_rows, dtype=bool)
    untied[tied] = False
    best[untied] = (np.flatnonzero(above) % num_groups).reshape(-1, k)
    groups = np.arange(num_groups, dtype=np.int64)
    chosen = np.partition(_inverted_keys(maxima[tied], groups), k - 1, axis=1)
    best[tied] = _LOW_MASK - (np.invert(chosen[:, :k]) & _LOW_MASK)
    lowest[tied] = np.take_along_axis(maxima[tied], best[tied, k - 1 :], 1)[:, 0]  # the k-th: the lowest
    return best, lowest


def _inverted_keys(values: np.ndarray, items: np.ndarray) -> np.ndarray:
    """~key of each float32 value and its item index (see the module docstring)."""
    bits = (values + np.float32(0.0)).view(np.int32)  # -0.0 becomes +0.0
    ordered = (bits ^ ((bits >> 31) & 0x7FFFFFFF)).astype(np.int64)
    return np.invert((ordered << 32) | (_LOW_MASK - items))
