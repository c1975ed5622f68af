"""Base classes: the streaming state, the deferred value checks, sync, and the per-k results.

``StreamingMean`` holds ``num_values`` float64 sums and one float64 count, O(num_values) on
``device`` and summed across processes. Subclasses say how a batch turns into (sums, count).
``StatefulMetric`` (the base of every metric here) makes ``state_dict`` a snapshot, checks what
``load_state_dict`` is given, reduces copies of the state in ``compute`` and keeps a loaded state
when an Engine resumes mid-epoch. ``MeanOverUsers`` adds the relevance options of the per-user
ranking metrics; ``CutoffMetric`` the cut-offs ``top_k``.

Value checks (NaN scores, negative relevance, ...) run eagerly for CPU inputs: ``update`` raises
before any state changes. For CUDA inputs they run on the device without synchronising: the bad
batch adds nothing and ``compute`` raises.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Callable, Optional, Sequence, Union

import ignite.distributed as idist
import torch
from ignite.engine import Events
from ignite.exceptions import NotComputableError
from ignite.metrics.metric import Metric, reinit__is_reduced

from .. import _validation as V
from .._core.adapters import RankingInput, parse_ranking_input
from .._core.ranking import RankedBatch, rank_input
from .._core.tuning import device_constant
from ._engine import CutoffResults, OptionalOutputKeys


def _identity(output: Any) -> Any:
    return output


def screen(invalid: dict, on_cpu: bool) -> torch.Tensor:
    """Raise now for CPU inputs; otherwise return a 0-d bool tensor, True when the batch must
    add nothing. ``invalid`` maps an error message to a 0-d bool tensor."""
    if on_cpu:
        V.raise_if_invalid(invalid)
    return V.any_flag(invalid)


def screen_or_pass(invalid: dict, on_cpu: bool) -> Union[torch.Tensor, None]:
    """As :func:`screen`, but None when the values were checked on the host and passed: the
    caller then has nothing to leave out and saves a select per state tensor."""
    if on_cpu and V.raise_if_invalid(invalid):
        return None
    return V.any_flag(invalid)


def raise_for_invalid_updates(metric: Metric, num_invalid_updates: torch.Tensor) -> None:
    if num_invalid_updates > 0:
        raise ValueError(
            f"{type(metric).__name__}: {int(num_invalid_updates)} update(s) since the last reset held invalid "
            "values (checked on the device, so reported here); they were left out. Fix the inputs and "
            "reset the metric."
        )


_PER_RANK = "__metric_state_per_rank"  # the one key of ignite's ``Metric.state_dict()``


class StatefulMetric(Metric):
    """What every metric here shares about its arguments and its state (the tensors named in
    ``_state_dict_all_req_keys``):

    - Constructor arguments are declared in ``_parameter_constraints`` (merged along the class
      hierarchy) and checked before the constructor body runs (``_validation.validated_init``).

    - ``state_dict()`` is a snapshot (copies), and ``load_state_dict`` copies in, so neither side
      changes when the other is updated.
    - ``load_state_dict`` refuses a state of another shape (another configuration: cut-offs,
      metric names, catalog size, histogram size) with a ValueError naming the state key and both
      shapes, before anything changes.
    - ``compute`` reduces copies of the state across processes (``_reduced``): the local state is
      the same after ``compute``, whether it returns or raises.
    - A metric loaded from a checkpoint and attached to an Engine that resumes mid-epoch keeps
      the loaded state at that epoch's ``EPOCH_STARTED`` instead of resetting it.
    """

    _resume_pending = False  # set by load_state_dict, consumed by the next ``started``
    _parameter_constraints: dict = {"output_transform": V.CALLABLE}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__init__" in vars(cls):
            cls.__init__ = V.validated_init(vars(cls)["__init__"])

    # Shapes ------------------------------------------------------------------------------------
    def _state_shapes(self) -> dict:
        """The shape each state tensor must have (None: any size in that dimension). By default
        the current shapes, which ``reset`` fixed from the configuration."""
        return {key: tuple(getattr(self, key).shape) for key in self._state_dict_all_req_keys}

    def _configuration(self) -> str:
        names = ("top_k", "metrics", "num_items", "resolution_bits", "num_groups")
        # self.__dict__, not getattr: ignite's Metric answers any unknown attribute with a function
        return ", ".join(f"{n}={self.__dict__[n]!r}" for n in names if self.__dict__.get(n) is not None)

    def _check_state(self, state: Any) -> None:
        name = type(self).__name__
        if not isinstance(state, Mapping):
            raise TypeError(f"{name}.load_state_dict: the state must be a mapping, got {type(state).__name__}")
        for key, expected in self._state_shapes().items():
            if key not in state:
                raise ValueError(f"{name}.load_state_dict: the state has no {key!r} (keys: {sorted(state)})")
            value = state[key]
            if not isinstance(value, torch.Tensor) or value.is_complex():
                raise TypeError(f"{name}.load_state_dict: {key!r} must be a real tensor, got {value!r:.60}")
            shape = tuple(value.shape)
            if len(shape) != len(expected) or any(e is not None and e != s for e, s in zip(expected, shape)):
                wanted = tuple("any" if e is None else e for e in expected)
                raise ValueError(
                    f"{name}.load_state_dict: {key!r} has shape {shape}, this metric ({self._configuration()}) "
                    f"expects {wanted}; the state comes from a metric with another configuration"
                )

    # Checkpoints -------------------------------------------------------------------------------
    def state_dict(self):
        state = super().state_dict()
        state[_PER_RANK] = [
            {key: value.clone() if isinstance(value, torch.Tensor) else value for key, value in per_rank.items()}
            for per_rank in state[_PER_RANK]
        ]
        return state

    def load_state_dict(self, state_dict: Mapping) -> None:
        rank = idist.get_rank()
        if (
            isinstance(state_dict, Mapping)
            and list(state_dict) == [_PER_RANK]
            and isinstance(state_dict[_PER_RANK], Sequence)
            and len(state_dict[_PER_RANK]) == idist.get_world_size()
        ):  # otherwise ignite raises its own error below
            per_rank = list(state_dict[_PER_RANK])
            self._check_state(per_rank[rank])
            current = {key: getattr(self, key) for key in self._state_dict_all_req_keys}
            per_rank[rank] = {
                key: value.detach().to(current[key].device, current[key].dtype, copy=True)
                if key in current
                else value
                for key, value in per_rank[rank].items()
            }
            state_dict = {_PER_RANK: per_rank}
        super().load_state_dict(state_dict)
        self._resume_pending = True

    def started(self, engine) -> None:
        """Reset at the start of each epoch, except when the Engine resumes mid-epoch from a
        checkpoint this metric was loaded from: the state then holds that epoch's first batches."""
        resuming, self._resume_pending = self._resume_pending, False
        state = engine.state
        if (
            resuming
            and engine.last_event_name == Events.EPOCH_STARTED
            and state.epoch_length
            and state.iteration % state.epoch_length != 0
        ):
            return
        self.reset()

    # Distributed -------------------------------------------------------------------------------
    def _reduced(self, *specs: str) -> list:
        """The state tensors named in ``specs`` (``"name"`` or ``"name:OP"``, OP among SUM, MIN,
        MAX; SUM by default) reduced over processes, as copies: the state itself never changes.
        In a single process the state tensors themselves (callers must not modify them)."""
        values = []
        for spec in specs:
            key, _, op = spec.partition(":")
            value = getattr(self, key)
            if idist.get_world_size() > 1:
                value = idist.all_reduce(value.clone(), op=op or "SUM")
            values.append(value)
        return values


class StreamingMean(OptionalOutputKeys, StatefulMetric):
    """``compute`` returns ``sums / count`` (through ``_result``), accumulated over batches."""

    _state_dict_all_req_keys = ("_sum", "_count", "_num_invalid_updates")
    _counted = "counted user"  # what ``count`` counts, for the NotComputableError message

    def __init__(
        self,
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
    ):
        super().__init__(output_transform, device=device, skip_unrolling=skip_unrolling)

    # What subclasses define ------------------------------------------------------------------
    def _num_values(self) -> int:
        return 1

    def _parse(self, output: Any) -> tuple:
        return V.check_scores_and_relevance(output)

    def _batch_totals(self, *inputs: torch.Tensor):
        """(sums (num_values,) float64, count 0-d float64, invalid-flag dict) of one batch."""
        raise NotImplementedError

    def _result(self, means: list[float]) -> Any:
        return means

    def _empty_message(self) -> str:
        return f"{type(self).__name__} must have at least one {self._counted} before compute()."

    # The machinery -----------------------------------------------------------------------------
    @reinit__is_reduced
    def reset(self) -> None:
        self._sum = torch.zeros(self._num_values(), dtype=torch.float64, device=self._device)
        self._count = torch.zeros((), dtype=torch.float64, device=self._device)
        self._num_invalid_updates = torch.zeros((), dtype=torch.float64, device=self._device)

    @reinit__is_reduced
    def update(self, output: Sequence[torch.Tensor]) -> None:
        inputs = self._parse(output)
        sums, count, invalid, *extra = self._batch_totals(*inputs)
        on_cpu = torch.device(inputs[0].device).type == "cpu"
        bad = screen_or_pass(invalid, on_cpu=on_cpu)  # None: checked on the host, nothing to leave out

        def kept(total):  # nothing from a bad batch; on the state's device (no copy when already there)
            total = total if bad is None else torch.where(bad, 0.0, total)
            return total if total.device == self._device else total.to(self._device)

        further = extra[0] if extra else {}  # further sums a subclass keeps
        states = [self._sum, self._count, *(getattr(self, key) for key in further)]
        # one operation adds every total to its state (each state on its own, as ``+=`` would)
        torch._foreach_add_(states, [kept(sums), kept(count), *(kept(total) for total in further.values())])
        if len(extra) > 1:  # per-user rows and ids (UserStatistics with per_user=True)
            self._keep_rows(extra[1], bad)
        if bad is not None:  # checks deferred to the device: count a bad batch
            self._num_invalid_updates += bad if bad.device == self._device else bad.to(self._device)

    def compute(self) -> Any:
        total, count, num_invalid = self._reduced("_sum", "_count", "_num_invalid_updates")
        raise_for_invalid_updates(self, num_invalid)
        if count == 0:
            raise NotComputableError(self._empty_message())
        return self._result((total / count).tolist())


class UserStatistics:
    """For a :class:`StreamingMean` whose values are means over users: the statistics a paper
    reports next to the means.

    - State ``_sum_squares`` (num_values,) float64: the sum of the squared values of the counted
      users, summed across processes like ``_sum``; :meth:`confidence_interval` reads it.
    - With ``per_user=True``, each batch's per-user values are kept on the metric's device (a list
      of per-batch tensors, appended without a host sync) and returned by :meth:`per_user`. Their
      memory grows with the number of users, so this is off by default; they are not part of
      ``state_dict()``. With :class:`~ignite_recsys.UserIds` in the updates they come in user-id
      order.
    - With ``num_groups=G``, each update also carries each user's group
      (:class:`~ignite_recsys.UserGroups`), and the states ``_group_sum`` (G, num_values),
      ``_group_count`` (G,) and ``_group_sum_squares`` (G, num_values) give each group's mean and
      interval (:meth:`compute_groups`, :meth:`confidence_interval_groups`), accumulated by one
      ``index_add_`` per state without a host sync, summed across processes.

    Subclasses define ``_user_rows``: (values (batch, num_values) float64, weight (batch,)
    float64 (1: counted, 0: not counted), invalid-flag dict, further sums or None).
    """

    _state_dict_all_req_keys = ("_sum", "_count", "_num_invalid_updates", "_sum_squares")
    _parameter_constraints = {
        "per_user": V.boolean(),
        "num_groups": V.Param("a positive int or None", lambda name, value, arguments: V.check_num_groups(value)),
    }
    _group_state_keys = ("_group_sum", "_group_count", "_group_sum_squares")
    keeps_per_user = False  # per_user=True in the constructor
    num_groups = None  # num_groups=G in the constructor

    def _keep_per_user(self, per_user: bool, num_groups: Union[int, None] = None) -> None:
        self.keeps_per_user = per_user
        self.num_groups = num_groups
        if self.num_groups is not None:  # the group sums are state: checkpointed and checked on load
            self._state_dict_all_req_keys = type(self)._state_dict_all_req_keys + self._group_state_keys

    @reinit__is_reduced
    def reset(self) -> None:
        super().reset()
        self._sum_squares = torch.zeros(self._num_values(), dtype=torch.float64, device=self._device)
        self._per_user_rows: list = []
        self._per_user_ids: list = []
        if self.num_groups is not None:
            shape = (self.num_groups, self._num_values())
            self._group_sum = torch.zeros(shape, dtype=torch.float64, device=self._device)
            self._group_count = torch.zeros(self.num_groups, dtype=torch.float64, device=self._device)
            self._group_sum_squares = torch.zeros(shape, dtype=torch.float64, device=self._device)

    def _tagged_output_keys(self) -> dict:
        """The keys of a dict output read as user tags: "groups" with num_groups, "users" with
        per_user=True (a metric built without them ignores these keys of a shared output)."""
        from ..inputs import UserGroups, UserIds

        keys = {}
        if self.num_groups is not None:
            keys["groups"] = UserGroups
        if self.keeps_per_user:
            keys["users"] = UserIds
        return keys

    def _user_rows(self, batch: RankingInput) -> tuple:
        raise NotImplementedError

    def _batch_totals(self, batch):
        return self._user_totals(*self._user_rows(batch), batch)

    def _user_totals(self, values: torch.Tensor, weight: torch.Tensor, invalid: dict, extra: dict = None,
                     batch: RankingInput = None) -> tuple:
        """``_batch_totals``' return from per-user values (batch, num_values) float64 and user
        weights (batch,) float64 (1: counted, 0: not counted)."""
        groups, users = (batch.groups, batch.users) if batch is not None else (None, None)
        self._check_user_tags(groups, users)
        weights = weight.unsqueeze(1)
        # Reduce each value over users as its own contiguous row: the summation order then does not
        # depend on how many values are combined (RankingMetrics equals the single classes bit for bit).
        weighted = values * weights
        sums, squares = torch.stack([weighted, values * weighted]).transpose(1, 2).contiguous().sum(2).unbind(0)
        extra = {**(extra or {}), "_sum_squares": squares}
        if self.num_groups is not None:
            invalid = {**invalid, **V.check_group_ids(groups, self.num_groups)}
            extra.update(_group_totals(groups.clamp(0, self.num_groups - 1), self.num_groups, values, weight))
        totals = (sums, weight.sum(), invalid, extra)
        if self.keeps_per_user:
            totals += ((torch.where(weights > 0, values, torch.nan), users),)
        return totals

    def _check_user_tags(self, groups, users) -> None:
        name = type(self).__name__
        if groups is not None and self.num_groups is None:
            raise ValueError(
                f"{name} got UserGroups but was built without num_groups: pass num_groups=<number of groups> "
                "to its constructor to report each group"
            )
        if groups is None and self.num_groups is not None:
            raise ValueError(
                f"{name} was built with num_groups={self.num_groups}: every update needs the users' groups, "
                "update((y_pred, y, UserGroups(ids))) or the key 'groups' of a dict output"
            )
        if users is not None and not self.keeps_per_user:
            raise ValueError(f"{name} got UserIds, which order the per-user values: build it with per_user=True")
        if self._per_user_rows and (users is not None) != bool(self._per_user_ids):
            raise ValueError(
                f"{name}: UserIds must come with every update since the last reset or with none "
                f"({'some' if self._per_user_ids else 'no'} earlier update had them)"
            )

    def _keep_rows(self, kept: tuple, bad: Union[torch.Tensor, None]) -> None:
        # CPU inputs never get here with bad values (update raised); a bad CUDA batch keeps NaN
        # rows, and per_user() raises as compute() does.
        rows, users = kept
        self._per_user_rows.append((rows if bad is None else torch.where(bad, torch.nan, rows)).to(self._device))
        if users is not None:
            self._per_user_ids.append(users.to(self._device))

    def _per_user_table(self) -> tuple:
        """(rows (users, num_values), ids (users,) or None) of every process, in the documented order."""
        name = type(self).__name__
        if not self.keeps_per_user:
            raise RuntimeError(f"{name}.per_user() needs the metric to be built with per_user=True")
        (num_invalid,) = self._reduced("_num_invalid_updates")
        raise_for_invalid_updates(self, num_invalid)
        if self._per_user_rows:
            rows = torch.cat(self._per_user_rows)
        else:
            rows = torch.zeros(0, self._num_values(), dtype=torch.float64, device=self._device)
        if int((~rows[:, 0].isnan()).sum()) != int(self._count):
            raise RuntimeError(
                f"{name}.per_user(): the per-user values do not match the state ({int(self._count)} counted "
                f"users, {int((~rows[:, 0].isnan()).sum())} kept); they are not part of state_dict(), so a "
                "loaded state has none: update again from a reset"
            )
        # 0: no rows here, 1: rows with user ids, 2: rows without; every process must agree
        local = 0 if not self._per_user_rows else 1 if self._per_user_ids else 2
        kinds = set(_gathered_rows(torch.tensor([[local]], dtype=torch.int64, device=rows.device))[:, 0].tolist())
        if kinds >= {1, 2}:
            raise ValueError(f"{name}.per_user(): some processes gave UserIds with their updates and others did not")
        rows = _gathered_rows(rows)
        if 1 not in kinds:
            return rows, None
        ids = torch.cat(self._per_user_ids) if self._per_user_ids else torch.zeros(0, dtype=torch.int64, device=rows.device)
        ids, order = torch.sort(_gathered_rows(ids.unsqueeze(1))[:, 0], stable=True)
        repeated = ids[1:][ids[1:] == ids[:-1]].unique()
        if repeated.numel():
            raise ValueError(
                f"{name}.per_user(): user ids must be distinct, got {repeated.numel()} id(s) more than once "
                f"(e.g. {repeated[:5].tolist()}); give each user one row in the evaluation"
            )
        return rows[order], ids

    def per_user(self) -> Any:
        """The value of every user seen since the last reset, float64 on the metric's device (needs
        ``per_user=True``): a (users, len(top_k)) tensor for a metric with cut-offs (columns in
        ascending k), a (users,) tensor for :class:`RPrecision`, a dict ``{"ndcg@10": (users,)
        tensor, ...}`` for :class:`RankingMetrics`. A user the metric does not count (no relevant
        item under ``ignore_zero_hits=True``; for the popularity metrics, an empty top-k list) has
        a row of NaN. A user with relevant items but no candidate is counted, with 0.

        Order: with :class:`~ignite_recsys.UserIds` in every update, ascending user id, across
        processes too (:meth:`per_user_ids` gives the ids; a user id seen twice raises a
        ValueError). Without them, update order; across processes the rows are gathered in rank
        order: rank 0's users first, then rank 1's, each in update order."""
        rows, _ = self._per_user_table()
        result = self._result(list(rows.unbind(1)))
        return torch.stack(result, 1) if isinstance(result, list) else result

    def per_user_ids(self) -> torch.Tensor:
        """The user ids (int64, ascending) of the rows of :meth:`per_user`, when every update came
        with :class:`~ignite_recsys.UserIds`."""
        _, ids = self._per_user_table()
        if ids is None:
            raise RuntimeError(
                f"{type(self).__name__}.per_user_ids() needs user ids with the updates: "
                "update((y_pred, y, UserIds(ids))) or the key 'users' of a dict output"
            )
        return ids

    def confidence_interval(self, level: float = 0.95) -> Any:
        r"""Student-t confidence interval of the mean over counted users, per value, from the
        streamed sums (no per-user values needed):

        .. math:: \bar x \pm t_{(1+\text{level})/2,\; n-1}\, \frac{s}{\sqrt n},\qquad
                  s^2 = \frac{\sum x^2 - n \bar x^2}{n - 1}

        with n the counted users (of all processes), as ``scipy.stats.t.interval(level, n - 1,
        mean, sem)``. Returns what ``compute()`` returns with a ``(low, high)`` tuple per value: a
        list per k, a single tuple for :class:`RPrecision`, a dict for :class:`RankingMetrics`.
        Raises NotComputableError with fewer than two counted users (no variance estimate). The
        variance comes from the sums of squares: when the spread of the values is below about
        1e-6 of their magnitude, the interval width loses relative precision."""
        level = V.check_level(level)
        total, squares, count, num_invalid = self._reduced("_sum", "_sum_squares", "_count", "_num_invalid_updates")
        raise_for_invalid_updates(self, num_invalid)
        name = type(self).__name__
        if count < 2:
            raise NotComputableError(
                f"{name}.confidence_interval() needs at least two {self._counted}s, got {int(count)}"
            )
        if bool(torch.isnan(squares).any()):
            raise NotComputableError(
                f"{name}.confidence_interval(): the state has no sums of squares (it was loaded from a "
                "state dict without them); update from a reset"
            )
        low, high = _t_intervals(total, squares, count, level)
        return self._result(list(zip(low.tolist(), high.tolist())))

    # User groups -------------------------------------------------------------------------------
    def _group_state(self, method: str) -> tuple:
        if self.num_groups is None:
            raise RuntimeError(f"{type(self).__name__}.{method}() needs the metric to be built with num_groups")
        total, count, squares, num_invalid = self._reduced(
            "_group_sum", "_group_count", "_group_sum_squares", "_num_invalid_updates"
        )
        raise_for_invalid_updates(self, num_invalid)
        return total, count, squares

    def compute_groups(self) -> list:
        """Each group's result (needs ``num_groups``): a list indexed by group id, each entry what
        ``compute()`` returns, computed over the group's counted users (of all processes). A group
        without a counted user gets NaN values (the other groups stay reportable)."""
        total, count, _ = self._group_state("compute_groups")
        means = total / count.unsqueeze(1)  # 0 / 0 = NaN for a group without a counted user
        return [self._result(row.tolist()) for row in means]

    def group_counts(self) -> list:
        """The number of counted users of each group (of all processes), a list of ints."""
        _, count, _ = self._group_state("group_counts")
        return [int(n) for n in count.tolist()]

    def confidence_interval_groups(self, level: float = 0.95) -> list:
        """:meth:`confidence_interval` of each group (needs ``num_groups``): a list indexed by
        group id; a group with fewer than two counted users gets ``(nan, nan)`` intervals."""
        level = V.check_level(level)
        total, count, squares = self._group_state("confidence_interval_groups")
        low, high = _t_intervals(total, squares, count.unsqueeze(1), level)
        return [self._result(list(zip(lo.tolist(), hi.tolist()))) for lo, hi in zip(low, high)]

    def _group_scalar_items(self, name: str) -> list:
        """(key, value) of every group's scalars for an Engine: ``"<scalar key>/group<g>"``."""
        items = []
        for group, result in enumerate(self.compute_groups()):
            for key, value in self._scalar_items(name, result) or [(name, result)]:
                items.append((f"{key}/group{group}", value))
        return items


def _group_totals(index: torch.Tensor, num_groups: int, values: torch.Tensor, weight: torch.Tensor) -> dict:
    """Per-group sums, counts and sums of squares of one batch (each one ``index_add_``)."""
    weighted = values * weight.unsqueeze(1)
    zeros = torch.zeros(num_groups, values.shape[1], dtype=torch.float64, device=values.device)
    return {
        "_group_sum": zeros.index_add(0, index, weighted),
        "_group_count": torch.zeros(num_groups, dtype=torch.float64, device=values.device).index_add(0, index, weight),
        "_group_sum_squares": zeros.index_add(0, index, values * weighted),
    }


def _t_intervals(total: torch.Tensor, squares: torch.Tensor, count: torch.Tensor, level: float) -> tuple:
    """(low, high) Student-t intervals of means from sums, sums of squares and counts (broadcast);
    NaN where count < 2."""
    from ..stats import _t_quantiles

    n = count.to(torch.float64)
    mean = total / n
    variance = ((squares - total * mean) / (n - 1)).clamp(min=0)
    quantile = _t_quantiles((1 + level) / 2, n - 1)
    half = torch.where(n >= 2, quantile * torch.sqrt(variance / n), torch.nan)
    return mean - half, mean + half


def _gathered_rows(rows: torch.Tensor) -> torch.Tensor:
    """The (users, num_values) rows of every process, rank 0's first."""
    world_size = idist.get_world_size()
    if world_size == 1:
        return rows
    sizes = idist.all_gather(torch.tensor([rows.shape[0]], dtype=torch.int64, device=rows.device)).tolist()
    padded = torch.zeros((max(sizes), rows.shape[1]), dtype=rows.dtype, device=rows.device)
    padded[: rows.shape[0]] = rows
    gathered = idist.all_gather(padded).reshape(world_size, max(sizes), rows.shape[1])
    return torch.cat([gathered[rank, :size] for rank, size in enumerate(sizes)])


class MeanOverUsers(UserStatistics, StreamingMean):
    """The mean over counted users of per-user values. A user is counted if it has a relevant
    item or if ``ignore_zero_hits`` is False. An item is relevant when ``y >= relevance_threshold``
    compared in y's dtype (as torch compares; see :class:`~ignite_recsys._core.relevance.Relevance`),
    or when ``y > 0`` if ``relevance_threshold`` is None."""

    _parameter_constraints = {
        "ignore_zero_hits": V.boolean(),
        "relevance_threshold": V.positive_real(optional=True),
        "ties": V.one_of(V.TIE_RULES),
    }

    def __init__(
        self,
        ignore_zero_hits: bool = True,
        relevance_threshold: float = 1.0,
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
        ties: str = "stable",
        *,
        per_user: bool = False,
        num_groups: Optional[int] = None,
    ):
        self._keep_per_user(per_user, num_groups)
        self.ignore_zero_hits = ignore_zero_hits
        self.relevance_threshold = relevance_threshold
        self.ties = ties
        super().__init__(output_transform, device, skip_unrolling)

    optional_output_keys = ("exclude",)  # a dict output {"y_pred", "y", "exclude"} passes its exclusion

    def _parse(self, output: Any) -> tuple:
        return (parse_ranking_input(output, user_tags=True),)

    def _per_user(self, batch: RankingInput):
        """(values (batch, num_values) float64, has a relevant item (batch,) bool, invalid-flag dict)."""
        raise NotImplementedError

    def _empty_message(self) -> str:
        return (
            f"{type(self).__name__} must have at least one counted user before compute() "
            "(with ignore_zero_hits=True, users without a relevant item are not counted)."
        )

    def _user_rows(self, batch):
        values, has_relevant, invalid, *ties = self._per_user(batch)
        if self.ignore_zero_hits:
            weight = has_relevant.to(torch.float64)
        else:
            weight = torch.ones(has_relevant.shape, dtype=torch.float64, device=has_relevant.device)
        return values, weight, invalid, {"_boundary_ties": weight @ ties[0]} if ties else None


class BoundaryTies:
    """For metrics with cut-offs: counts, per k, the counted users whose k-th and (k + 1)-th
    candidates tie in score (state ``_boundary_ties``, summed on the device without a host sync).
    Under ``ties="stable"`` the lower item index then decides who is in the top k, which can make
    a metric look better than the model is (a model that scores every item alike gets HR@10 = 1
    when the positive item sits in column 0 of a sampled evaluation); ``compute()`` warns with
    the share of such users and points to ``ties="average"``."""

    top_k: list
    _state_dict_all_req_keys = ("_sum", "_count", "_num_invalid_updates", "_sum_squares", "_boundary_ties")

    @reinit__is_reduced
    def reset(self) -> None:
        super().reset()
        self._boundary_ties = torch.zeros(len(self.top_k), dtype=torch.float64, device=self._device)

    def _boundary_tie_columns(self, ranked: RankedBatch) -> torch.Tensor:
        """(batch, len(top_k)) float64 from the ranked batch (0 without scores)."""
        if ranked.boundary_tie is None:
            return torch.zeros(ranked.hit.shape[0], len(self.top_k), dtype=torch.float64, device=ranked.hit.device)
        device = ranked.boundary_tie.device
        columns = device_constant([min(k, ranked.depth) - 1 for k in self.top_k], torch.int64, device)
        ties = ranked.boundary_tie.index_select(1, columns)
        if all(k <= ranked.depth for k in self.top_k):
            return ties
        beyond = device_constant([k > ranked.depth for k in self.top_k], torch.bool, device)
        return torch.where(beyond, 0.0, ties)  # a cut-off past the list splits nothing

    def boundary_tie_share(self) -> list:
        """Per k (ascending), the share of counted users whose k-th and (k + 1)-th candidates
        tie in score (0.0 before any counted user)."""
        ties, count = self._reduced("_boundary_ties", "_count")
        return (ties / count.clamp(min=1)).tolist()

    def compute(self) -> Any:
        result = super().compute()
        if self.ties == "stable":
            shares = self.boundary_tie_share()
            if any(share > 0 for share in shares):
                listed = ", ".join(f"k={k}: {share:.1%}" for k, share in zip(self.top_k, shares) if share > 0)
                warnings.warn(
                    f"{type(self).__name__}: some counted users have tied scores across the cut-off ({listed}); "
                    "under ties='stable' the lower item index decides which tied item is in the top k. "
                    "Use ties='average' for the expected value over tied orders (or break ties in the scores).",
                    BoundaryTieWarning,
                    stacklevel=2,
                )
        return result


class BoundaryTieWarning(UserWarning):
    """Scores tie across a cut-off under ``ties="stable"`` (see :meth:`BoundaryTies.compute`)."""


class CutoffMetric(BoundaryTies, CutoffResults, MeanOverUsers):
    """A per-user ranking metric at every cut-off in ``top_k``; ``compute`` returns a list in
    ascending-k order, and an attached Engine also gets ``"<name>@<k>"`` scalars."""

    _gain_function = None
    _counts_relevant = False  # whether the values need |R| itself, not only whether |R| > 0
    _parameter_constraints = {"top_k": V.TOP_K}

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
        per_user: bool = False,
        num_groups: Optional[int] = None,
    ):
        self.top_k = list(top_k)
        super().__init__(
            ignore_zero_hits, relevance_threshold, output_transform, device, skip_unrolling, ties,
            per_user=per_user, num_groups=num_groups,
        )

    def _num_values(self) -> int:
        return len(self.top_k)

    def _values(self, ranked: RankedBatch) -> torch.Tensor:
        raise NotImplementedError

    def _per_user(self, batch):
        ranked = rank_input(
            batch,
            depth=self.top_k[-1],
            relevance_threshold=self.relevance_threshold,
            ties=self.ties,
            gain_function=self._gain_function,
            ideal=self._gain_function is not None,
            count_relevant=self._counts_relevant,
        )
        return self._values(ranked), ranked.has_relevant, ranked.invalid, self._boundary_tie_columns(ranked)
