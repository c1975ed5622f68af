"""Small CPU batches, ranked together.

An update of the ranking metrics costs about a hundred torch operations whatever its size, some
microseconds each on CPU: a batch of a few users (RecBole's full-sort test loader on MovieLens-100k
feeds 472 batches of 1-2 users over 1,682 items) spends far more on them than on its scores. So,
on CPU, a plain ``(scores, labels)`` batch of fewer than ``GATHER_BELOW`` scores is copied and held,
and the held batches are ranked as one batch:

- when they hold ``GATHER_UP_TO`` scores or more, or ``MAX_HELD_BATCHES`` batches (a held batch
  costs about a kilobyte of its own whatever its size: 1-item batches would otherwise take
  hundreds of megabytes before their scores reach the first limit);
- before any batch that is not held (so batches are counted in the order they came);
- before any read of the state: ``compute``, the per-user values, ``state_dict``, the reduction
  across processes.

Only a batch that passes every value check the ranking step makes is held (no NaN score, no NaN
label, no label above ``SAFE_LABEL``, which keeps every built-in gain finite, and no metric with
checks of its own or a custom gain function): a bad batch still raises in its own ``update``
before any state changes. The ranking step's per-user values depend on each user's row alone, and
the state takes them batch by batch as it would have without holding: the state, and so every
result, is the same, to the last bit, as without holding.
Memory is bounded: at most ``GATHER_UP_TO + GATHER_BELOW`` scores and labels, in at most
``MAX_HELD_BATCHES`` batches, are held.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from .adapters import RankingInput
from .tuning import cpu_tuned

GATHER_BELOW = 1 << 17  # a batch of fewer scores than this is held (on CPU)
GATHER_UP_TO = 1 << 18  # the held batches are ranked once they hold this many scores
MAX_HELD_BATCHES = 1 << 10  # ... or this many batches
SAFE_LABEL = 64.0  # the largest label held: 2 ** 64 - 1 and every other built-in gain stay finite


def holdable(batch: RankingInput) -> bool:
    """Whether ``batch`` may be held: a plain dense batch on CPU, small, without user tags, whose
    values pass the ranking step's checks (read on the host, which waits for nothing on CPU)."""
    pair = batch.dense_pair()
    if pair is None or batch.groups is not None or batch.users is not None or not cpu_tuned(batch.device):
        return False
    scores, labels = pair
    if scores.numel() >= GATHER_BELOW:
        return False
    if math.isnan(float(scores.amax())):
        return False
    if labels.dtype == torch.bool:
        return True
    highest = float(labels.amax())  # NaN if a label is NaN
    return highest <= SAFE_LABEL


class HeldBatches:
    """The held batches of one metric: copies of their scores and labels, in order."""

    def __init__(self) -> None:
        self._scores: list = []
        self._labels: list = []
        self.entries = 0

    def clear(self) -> None:
        self._scores, self._labels, self.entries = [], [], 0

    def __bool__(self) -> bool:
        return bool(self._scores)

    def __len__(self) -> int:
        return len(self._scores)

    def full(self) -> bool:
        """Whether the held batches are to be ranked now (``GATHER_UP_TO`` scores or
        ``MAX_HELD_BATCHES`` batches)."""
        return self.entries >= GATHER_UP_TO or len(self) >= MAX_HELD_BATCHES

    def accepts(self, scores: torch.Tensor, labels: torch.Tensor) -> bool:
        """Whether a batch joins the held ones as it is: the same number of items and dtypes."""
        if not self._scores:
            return True
        first_scores, first_labels = self._scores[0], self._labels[0]
        return (
            scores.shape[1] == first_scores.shape[1]
            and scores.dtype == first_scores.dtype
            and labels.dtype == first_labels.dtype
        )

    def hold(self, scores: torch.Tensor, labels: torch.Tensor) -> None:
        """Keep copies (the caller may change its tensors after ``update``)."""
        self._scores.append(scores.detach().clone())  # no autograd graph kept alive by what is held
        self._labels.append(labels.detach().clone())
        self.entries += scores.numel()

    def take(self) -> Optional[tuple[RankingInput, list[int]]]:
        """The held batches as one batch and the number of users of each (None when none is
        held), and hold none."""
        if not self._scores:
            return None
        sizes = [scores.shape[0] for scores in self._scores]
        scores = self._scores[0] if len(self._scores) == 1 else torch.cat(self._scores)
        labels = self._labels[0] if len(self._labels) == 1 else torch.cat(self._labels)
        self.clear()
        return RankingInput(scores.shape[0], scores.shape[1], scores.device, scores=scores, labels=labels), sizes
