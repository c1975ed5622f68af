"""One base class for the streaming per-user-mean metrics: state, reset, update, sync, compute."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Union

import torch
from ignite.exceptions import NotComputableError
from ignite.metrics.metric import Metric, reinit__is_reduced, sync_all_reduce

from .. import _validation as V
from .._ranking import RankedBatch, rank


def _identity(output: Any) -> Any:
    return output


class MeanOverUsers(Metric):
    """Accumulates, per batch, the sum over counted users of ``num_values`` per-user values and the
    number of counted users; ``compute`` returns their ratio. State is O(num_values), float64, on
    ``device``, summed across processes. A user is counted if it has a relevant item or if
    ``ignore_zero_hits`` is False.

    Value checks (NaN scores, negative relevance) run eagerly for CPU inputs. For CUDA inputs they
    run on the device without synchronising: the bad batch adds nothing and ``compute`` raises.
    """

    _state_dict_all_req_keys = ("_sum", "_num_users", "_num_invalid_updates")

    def __init__(
        self,
        ignore_zero_hits: bool = True,
        relevance_threshold: float = 1.0,
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
        ties: str = "stable",
    ):
        self.ignore_zero_hits = V.check_bool("ignore_zero_hits", ignore_zero_hits)
        self.relevance_threshold = V.check_positive_float("relevance_threshold", relevance_threshold)
        self.ties = V.check_choice("ties", ties, V.TIE_RULES)
        if not callable(output_transform):
            raise TypeError(f"output_transform must be callable, got {type(output_transform).__name__}")
        super().__init__(output_transform, device=device, skip_unrolling=skip_unrolling)

    # What subclasses define ------------------------------------------------------------------
    def _num_values(self) -> int:
        raise NotImplementedError

    def _per_user(self, y_pred: torch.Tensor, y: torch.Tensor):
        """(values (batch, num_values) float64, |R| (batch,), invalid-flag dict)."""
        raise NotImplementedError

    def _result(self, means: list[float]) -> Any:
        return means

    # The machinery -----------------------------------------------------------------------------
    @reinit__is_reduced
    def reset(self) -> None:
        self._sum = torch.zeros(self._num_values(), dtype=torch.float64, device=self._device)
        self._num_users = torch.zeros((), dtype=torch.float64, device=self._device)
        self._num_invalid_updates = torch.zeros((), dtype=torch.float64, device=self._device)

    @reinit__is_reduced
    def update(self, output: Sequence[torch.Tensor]) -> None:
        y_pred, y = V.check_scores_and_relevance(output)
        values, num_relevant, invalid = self._per_user(y_pred, y)
        if y_pred.device.type == "cpu":
            V.raise_if_invalid(invalid)  # free on CPU; nothing has changed yet
        if self.ignore_zero_hits:
            weight = (num_relevant > 0).to(torch.float64)
        else:
            weight = torch.ones_like(num_relevant)
        bad = torch.stack([flag.reshape(()) for flag in invalid.values()]).any()
        zero = torch.zeros((), dtype=torch.float64, device=values.device)
        # Reduce each value over users as its own contiguous row: the summation order then does not
        # depend on how many values are combined (RankingMetrics equals the single classes bit for bit).
        per_value = (values * weight.unsqueeze(1)).t().contiguous()
        batch_sum = torch.where(bad, zero, per_value.sum(1))
        batch_users = torch.where(bad, zero, weight.sum())
        self._sum += batch_sum.to(self._device)
        self._num_users += batch_users.to(self._device)
        self._num_invalid_updates += bad.to(torch.float64).to(self._device)

    @sync_all_reduce("_sum", "_num_users", "_num_invalid_updates")
    def compute(self) -> Any:
        if self._num_invalid_updates > 0:
            raise ValueError(
                f"{type(self).__name__}: {int(self._num_invalid_updates)} update(s) since the last reset had "
                "NaN scores or negative/NaN relevance (checked on the device, so reported here); "
                "they were left out. Fix the inputs and reset the metric."
            )
        if self._num_users == 0:
            raise NotComputableError(
                f"{type(self).__name__} must have at least one counted user before compute() "
                "(with ignore_zero_hits=True, users without a relevant item are not counted)."
            )
        return self._result((self._sum / self._num_users).tolist())


class CutoffMetric(MeanOverUsers):
    """A per-user ranking metric at every cut-off in ``top_k``; ``compute`` returns a list in
    ascending-k order, and an attached Engine also gets ``"<name>@<k>"`` scalars."""

    _gain_function: Optional[V.GainFunction] = None

    def __init__(
        self,
        top_k: Union[int, Sequence[int]],
        ignore_zero_hits: bool = True,
        relevance_threshold: float = 1.0,
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
        *,
        ties: str = "stable",
    ):
        self.top_k = list(V.check_top_k(top_k))
        super().__init__(ignore_zero_hits, relevance_threshold, output_transform, device, skip_unrolling, ties)

    def _num_values(self) -> int:
        return len(self.top_k)

    def _values(self, ranked: RankedBatch) -> torch.Tensor:
        raise NotImplementedError

    def _per_user(self, y_pred, y):
        ranked = rank(
            y_pred,
            y,
            depth=self.top_k[-1],
            relevance_threshold=self.relevance_threshold,
            ties=self.ties,
            gain_function=self._gain_function,
            ideal=self._gain_function is not None,
        )
        return self._values(ranked), ranked.num_relevant, ranked.invalid

    def completed(self, engine, name: str) -> None:
        result = self.compute()
        engine.state.metrics[name] = result
        for k, value in zip(self.top_k, result):
            engine.state.metrics[f"{name}@{k}"] = value
