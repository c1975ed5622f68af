"""The state every metric here keeps: declared once, reset, accumulated, checkpointed, reduced.

A metric declares each state tensor once, in its constructor, with :meth:`StatefulMetric.add_state`
(name, shape, cross-process reduction, fill value), as torchmetrics' ``add_state``. That one
declaration drives ``reset``, the keys of ``state_dict``, the checks of ``load_state_dict`` and the
reduction across processes in ``compute``. State is float64 on the metric's ``device``.

An update turns its inputs into one :class:`BatchTotals` (the batch's total for some states, its
value checks) and adds them with one operation. Value checks (NaN scores, negative ids, ...) are
read at once for CPU inputs: ``update`` raises before any state changes. For other devices they
stay on the device, so that ``update`` never waits for it: a bad batch adds nothing and
``compute`` raises.

``state_dict()`` is a snapshot that carries the configuration the state was made under (cut-offs,
metric names, conventions, number of groups, ...); ``load_state_dict`` refuses a state of another
configuration with a ValueError that names the difference, before anything changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import types
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

import ignite.distributed as idist
import torch
from ignite.engine import Events
from ignite.exceptions import NotComputableError
from ignite.metrics.metric import EpochWise, Metric, reinit__is_reduced

from .. import _validation as V
from .._core.input_checks import raise_if_invalid, stacked_flags
from . import _engine


def _identity(output: Any) -> Any:
    return output


def values_checked_on_host(device: torch.device) -> bool:
    """Whether the value checks of inputs on ``device`` are read at once (CPU: ``update`` raises)
    or deferred to ``compute`` (every other device: no synchronisation in ``update``)."""
    return torch.device(device).type == "cpu"


class FailedChecks:
    """How many updates failed each deferred value check since the last reset, on this process:
    one float64 count per check message, on the metric's device, added to without a host read
    and read only by ``compute()`` when some update failed, so that its error says what was wrong.
    Not part of the state: a state loaded from a checkpoint, or other processes' updates, come
    with their total alone (``_num_invalid_updates``)."""

    def __init__(self) -> None:
        self._counts: dict[tuple, torch.Tensor] = {}  # the messages of one set of checks -> counts

    def add(self, messages: tuple, flags: torch.Tensor, device: torch.device) -> None:
        counts = self._counts.get(messages)
        if counts is None:
            counts = self._counts[messages] = torch.zeros(len(messages), dtype=torch.float64, device=device)
        counts.add_(flags if flags.device == counts.device else flags.to(counts.device))

    def described(self) -> str:
        """A line ``"- message: n updates"`` for each check that failed, in the order first seen."""
        totals: dict[str, int] = {}
        for messages, counts in self._counts.items():
            for message, count in zip(messages, counts.tolist()):
                if count:
                    totals[message] = totals.get(message, 0) + int(count)
        return "".join(f"\n- {message}: {count} update{'s' * (count != 1)}" for message, count in totals.items())


@dataclass(frozen=True)
class StateSpec:
    """One declared state tensor: its shape at reset (a tuple, or a callable giving it), the
    shape ``load_state_dict`` accepts (None in a dimension: any size), its reduction across
    processes ("SUM", "MIN" or "MAX") and its fill value at reset."""

    name: str
    shape: Union[tuple, Callable[[], tuple]]
    reduce: str = "SUM"
    fill: float = 0.0
    load_shape: Union[tuple, Callable[[], tuple], None] = None
    # a state dict without it loads with the fill value (a state added after states were saved)
    optional: bool = False

    def current_shape(self) -> tuple:
        return tuple(self.shape() if callable(self.shape) else self.shape)

    def accepted_shape(self) -> tuple:
        shape = self.load_shape if self.load_shape is not None else self.shape
        return tuple(shape() if callable(shape) else shape)


@dataclass
class BatchTotals:
    """What one batch adds: ``sums`` (state name -> the batch's total, added to that state), the
    value checks ``invalid`` (message -> 0-d bool flag) and, for metrics that keep per-user values,
    the batch's ``rows`` (batch, num_values) (NaN: a user not counted) and user ids."""

    sums: dict
    invalid: dict = field(default_factory=dict)
    rows: Optional[torch.Tensor] = None
    users: Optional[torch.Tensor] = None


_PER_RANK = "__metric_state_per_rank"  # the one key of ignite's ``Metric.state_dict()``
_CONFIGURATION = "configuration"  # the configuration a state was made under, beside ignite's key
# constructor arguments that do not change what the state means
_NOT_CONFIGURATION = ("output_transform", "device", "skip_unrolling", "per_user", "num_threads")


def raise_for_invalid_updates(metric: Metric, num_invalid_updates: torch.Tensor) -> None:
    """The deferred value checks' ValueError, naming the checks that failed on this process."""
    if num_invalid_updates > 0:
        failed = metric.__dict__.get("_failed_checks")
        lines = failed.described() if failed is not None else ""
        if not lines:
            where = " Their checks failed on another process or before a state was loaded."
        elif idist.get_world_size() > 1:
            where = " The checks that failed on this process:"
        else:
            where = " The checks that failed:"
        raise ValueError(
            f"{type(metric).__name__}: {int(num_invalid_updates)} update(s) since the last reset held invalid "
            "values (checked on the device, so reported here); they were left out: fix the inputs and reset "
            f"the metric.{where}{lines}"
        )


class StatefulMetric(Metric):
    """What every metric here shares about its arguments, its state and an Engine:

    - Constructor arguments are declared in ``_parameter_constraints`` (merged along the class
      hierarchy) and checked before the constructor's body runs, by its decorator
      :func:`~ignite_recsys._validation.checks_constructor` (bound to its signature; the body
      receives the checked, normalised values, kept as ``_arguments``), or by
      :meth:`_validate_call` for a constructor of ``*args, **kwargs`` whose class declares its
      signature.
    - State tensors are declared with :meth:`add_state`; ``reset`` makes them, ``compute`` reduces
      copies of them across processes (:meth:`_reduced`: the local state is unchanged, whether
      ``compute`` returns or raises).
    - ``state_dict()`` is a snapshot (copies) that records the configuration; ``load_state_dict``
      copies in, refusing a state of another configuration or shape, before anything changes.
    - A metric loaded from a checkpoint and attached to an Engine that resumes mid-epoch keeps the
      loaded state at that epoch's ``EPOCH_STARTED`` instead of resetting it.
    - An Engine gets ``compute()``'s result and one scalar per value (:mod:`._engine`, which the
      Engine methods here call); a metric names its values with ``_value_labels()`` (None: a
      single value, the attach name is its scalar).
    - A mean of ``_num_values()`` values (``sums / count``, states ``_sum`` and ``_count``) is
      declared by :meth:`_add_mean_states` and computed by :meth:`_mean`.
    """

    _resume_pending = False  # set by load_state_dict, consumed by the next ``started``
    _parameter_constraints: dict = {"output_transform": V.CALLABLE}
    optional_output_keys: tuple = ()  # the keys read from a dict output beyond required_output_keys
    num_groups: Optional[int] = None  # user groups reported (metrics that average over users, num_groups=G)
    _counted = "counted user"  # what a mean's ``count`` counts, for the NotComputableError message
    # (ignite's Metric answers any unknown attribute with a function: these are declared for checkers)
    _states: dict
    _arguments: dict  # the checked constructor arguments, the configuration a state is saved under
    _device: torch.device
    _num_invalid_updates: torch.Tensor
    _inputs_looked_at: bool
    _failed_checks: FailedChecks
    _sum: torch.Tensor
    _count: torch.Tensor

    def __init__(
        self,
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
    ):
        self.add_state("_num_invalid_updates", ())  # batches whose deferred value checks failed
        super().__init__(output_transform, device=device, skip_unrolling=skip_unrolling)

    def _validate_call(self, args: tuple, kwargs: Mapping) -> dict:
        """The arguments' check for a constructor that takes ``*args, **kwargs`` and whose
        class declares its signature (``__signature__``: a list metric's registry entry): the call
        bound to that signature (a TypeError for a wrong call, as a plain function raises),
        checked, normalised and kept as ``_arguments``."""
        bound = inspect.signature(type(self)).bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = V.validate(V.declared_constraints(type(self)), bound.arguments)
        self.__dict__["_arguments"] = arguments
        return arguments

    def _keep_arguments(self, arguments: Mapping, *names: str) -> None:
        """Each of ``names`` of the checked ``arguments`` as an attribute of the same name."""
        for name in names:
            setattr(self, name, arguments[name])

    # Declared state ----------------------------------------------------------------------------
    def add_state(
        self,
        name: str,
        shape: Union[tuple, Callable[[], tuple]],
        reduce: str = "SUM",
        fill: float = 0.0,
        load_shape: Union[tuple, Callable[[], tuple], None] = None,
        optional: bool = False,
    ) -> None:
        """Declare a float64 state tensor (call it in the constructor, before ``super().__init__``)."""
        if reduce not in ("SUM", "MIN", "MAX"):
            raise ValueError(f"reduce must be 'SUM', 'MIN' or 'MAX', got {reduce!r}")
        states = self.__dict__.setdefault("_states", {})
        states[name] = StateSpec(name, shape, reduce, fill, load_shape, optional)

    @property
    def _state_dict_all_req_keys(self) -> tuple:  # type: ignore[override]
        return tuple(self.__dict__.get("_states", {}))

    @reinit__is_reduced
    def reset(self) -> None:
        for spec in self._states.values():
            setattr(self, spec.name, self._new_state(spec))
        self._inputs_looked_at = False
        self._failed_checks = FailedChecks()

    def _new_state(self, spec: StateSpec) -> torch.Tensor:
        return torch.full(spec.current_shape(), spec.fill, dtype=torch.float64, device=self._device)

    # Updates -----------------------------------------------------------------------------------
    def _parse(self, output: Any) -> Any:
        """The checked inputs of ``update`` (what ``_batch_totals`` takes)."""
        raise NotImplementedError

    def _batch_totals(self, inputs: Any) -> BatchTotals:
        raise NotImplementedError

    def _inputs_device(self, inputs: Any) -> torch.device:
        return inputs.device

    num_threads: Optional[int] = None  # torch's intra-op threads during update (None: unchanged)

    @reinit__is_reduced
    def update(self, output: Any) -> None:
        looked_at = self._inputs_looked_at  # the warnings on a first batch: for the first one accepted
        try:
            with self._thread_setting():
                inputs = self._parse(output)
                if self._hold(inputs):
                    return
                self._apply_held()
                self._apply(inputs)
        except BaseException:
            self._inputs_looked_at = looked_at
            raise

    def _apply(self, inputs: Any) -> None:
        """Add one checked batch to the state (nothing if its value checks fail)."""
        totals = self._batch_totals(inputs)
        bad = self._screen(totals.invalid, self._inputs_device(inputs))
        self._add(totals.sums, bad)
        self._keep(totals, bad)

    def _screen(self, invalid: dict, device: torch.device) -> Optional[torch.Tensor]:
        """The value checks ``invalid`` of a batch on ``device``: read now for inputs checked on
        the host (raise, or None: nothing to leave out); otherwise a 0-d bool tensor, True when
        the batch must add nothing, each failed check counted for ``compute()``'s error (None
        when there are no checks)."""
        if values_checked_on_host(device):
            raise_if_invalid(invalid)
            return None
        if not invalid:
            return None
        flags = stacked_flags(invalid)
        self._failed_checks.add(tuple(invalid), flags, self._device)
        return flags.any()

    def _hold(self, inputs: Any) -> bool:
        """Whether ``inputs`` are held for a later step instead of added now (see
        :mod:`ignite_recsys._core.gathering`; a metric that holds batches also defines
        :meth:`_apply_held`)."""
        return False

    def _apply_held(self) -> None:
        """Add the held batches, if any (called before any other batch and any read of the state)."""

    def _settle(self) -> None:
        """:meth:`_apply_held` under the update's thread setting, before the state is read."""
        with self._thread_setting():
            self._apply_held()

    def _thread_setting(self):
        """torch's threads during ``update`` (a context manager): ``num_threads``, if set."""
        return _threads(self.num_threads)

    def _add(self, sums: dict, bad: Optional[torch.Tensor]) -> None:
        """Add each batch total to its state (one operation for all; nothing from a bad batch) and
        count a bad batch."""
        if bad is not None:
            sums = {name: torch.where(bad, 0.0, total) for name, total in sums.items()}
            sums["_num_invalid_updates"] = bad.to(torch.float64)
        names = list(sums)
        totals = [total if total.device == self._device else total.to(self._device) for total in sums.values()]
        torch._foreach_add_([getattr(self, name) for name in names], totals)

    def _keep(self, totals: BatchTotals, bad: Optional[torch.Tensor]) -> None:
        """Keep what grows with the users (per-user values), for metrics that do."""

    # A streamed mean ---------------------------------------------------------------------------
    def _add_mean_states(self) -> None:
        """Declare ``_sum`` (num_values,) and ``_count``: the state of :meth:`_mean`."""
        self.add_state("_sum", lambda: (self._num_values(),))
        self.add_state("_count", ())

    def _num_values(self) -> int:
        return 1

    def _result(self, means: list) -> Any:
        return means

    def _empty_message(self) -> str:
        return f"{type(self).__name__} must have at least one {self._counted} before compute()."

    def _mean(self) -> Any:
        """``_result`` of the means ``_sum / _count`` (NotComputableError before a counted one)."""
        total, count = self._checked("_sum", "_count")
        if count == 0:
            raise NotComputableError(self._empty_message())
        return self._result((total / count).tolist())

    # An Engine ---------------------------------------------------------------------------------
    def _value_labels(self) -> Optional[list[str]]:
        return None

    def _scalar_keys(self, name: str) -> list[str]:
        return _engine.scalar_keys(self, name)

    def _scalar_items(self, name: str, result: Any) -> list[tuple[str, Any]]:
        return _engine.scalar_items(self, name, result)

    def _group_keys(self, name: str) -> list[str]:
        return _engine.group_keys(self, name)

    def _tagged_output_keys(self) -> dict:
        """Further keys of a dict output passed after the others, each wrapped in its class (e.g.
        "groups" as ``UserGroups``), when the dict holds them."""
        return {}

    def _from_mapping(self, output: Mapping) -> tuple:
        return _engine.from_mapping(self, output)

    def attach(self, engine, name: str, usage=EpochWise()) -> None:
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        _engine.check_keys_are_free(self, engine, name)
        super().attach(engine, name, usage)

    def completed(self, engine, name: str) -> None:
        _engine.write_results(self, engine, name)

    def iteration_completed(self, engine) -> None:
        _engine.update_from_engine(self, engine)

    # Results -----------------------------------------------------------------------------------
    def _reduced(self, *names: str) -> list:
        """The state tensors ``names`` reduced over processes by their declared reduction, as
        copies: the state itself never changes. In a single process the state tensors themselves
        (callers must not modify them)."""
        self._settle()
        values = []
        for name in names:
            value = getattr(self, name)
            if idist.get_world_size() > 1:
                value = idist.all_reduce(value.clone(), op=self._states[name].reduce)
            values.append(value)
        return values

    def _checked(self, *names: str) -> list:
        """``_reduced(*names)``, after raising for updates whose deferred value checks failed."""
        num_invalid, *values = self._reduced("_num_invalid_updates", *names)
        raise_for_invalid_updates(self, num_invalid)
        return values

    # Checkpoints -------------------------------------------------------------------------------
    # arguments of this class whose agreement the states' shapes check (e.g. a catalog size that
    # may also come from the batches)
    _checked_by_shape: tuple = ()

    def _configuration(self) -> dict:
        """The configuration a state is made under: the metric's class and every checked
        constructor argument that changes what the state means, as text (a tensor argument by a
        digest of its values)."""
        arguments = self.__dict__.get("_arguments", {})
        skipped = _NOT_CONFIGURATION + self._checked_by_shape
        described = {name: _describe(value) for name, value in arguments.items() if name not in skipped}
        return {"metric": type(self).__name__, **described}

    def state_dict(self):
        """ignite's state dict (``{"__metric_state_per_rank": [one dict of tensors per process]}``,
        copies) with the configuration it was made under, ``"configuration"``: {argument: text}."""
        self._settle()
        state = super().state_dict()
        state[_PER_RANK] = [
            {key: value.clone() if isinstance(value, torch.Tensor) else value for key, value in per_rank.items()}
            for per_rank in state[_PER_RANK]
        ]
        state[_CONFIGURATION] = self._configuration()
        return state

    def _normalized(self, configuration: Mapping) -> dict:
        """A recorded configuration with each setting under one name (a subclass merges the
        arguments that are other names of one setting), so that equal settings compare equal."""
        return dict(configuration)

    def _check_configuration(self, saved: Any) -> None:
        """Refuse a state saved under another configuration, naming each difference; warn when a
        callable argument could only be compared by name."""
        if isinstance(saved, Mapping):
            saved = self._normalized(saved)
            mine = self._normalized(self._configuration())
            if saved.get("metric") != mine["metric"]:
                article = "an" if mine["metric"][:1] in "AEIOU" else "a"
                raise ValueError(
                    f"{mine['metric']}.load_state_dict: the state comes from a {saved.get('metric')}, not "
                    f"{article} {mine['metric']}"
                )
            # a callable recorded by its name alone (as states were saved before code digests)
            by_name = [
                key
                for key, text in saved.items()
                if isinstance(text, str) and isinstance(mine.get(key), str) and mine[key].startswith(f"{text} (code ")
            ]
            differences = [
                f"{key}={saved.get(key, '(not set)')} (this metric: {mine.get(key, '(not set)')})"
                for key in sorted(set(saved) | set(mine))
                if saved.get(key) != mine.get(key) and key not in by_name
            ]
            if differences:
                raise ValueError(
                    f"{type(self).__name__}.load_state_dict: the state was saved under another configuration: "
                    f"{'; '.join(differences)}. Build the metric with the arguments it was saved with."
                )
            unsure = [key for key, text in mine.items() if isinstance(text, str) and _UNSURE in text] + by_name
            if unsure:
                warnings.warn(
                    f"{type(self).__name__}.load_state_dict: {', '.join(unsure)} could not be compared in full with "
                    f"the state's ({_UNSURE}): make sure the state was saved with the same function",
                    UserWarning,
                    stacklevel=3,
                )

    def _check_state(self, state: Any) -> None:
        name = type(self).__name__
        if not isinstance(state, Mapping):
            raise TypeError(f"{name}.load_state_dict: the state must be a mapping, got {type(state).__name__}")
        for spec in self._states.values():
            key, expected = spec.name, spec.accepted_shape()
            if key not in state and spec.optional:
                continue
            if key not in state:
                raise ValueError(f"{name}.load_state_dict: the state has no {key!r} (keys: {sorted(state)})")
            value = state[key]
            if not isinstance(value, torch.Tensor) or value.is_complex():
                raise TypeError(f"{name}.load_state_dict: {key!r} must be a real tensor, got {value!r:.60}")
            shape = tuple(value.shape)
            if len(shape) != len(expected) or any(e is not None and e != s for e, s in zip(expected, shape)):
                wanted = tuple("any" if e is None else e for e in expected)
                raise ValueError(
                    f"{name}.load_state_dict: {key!r} has shape {shape}, this metric ({self._described()}) "
                    f"expects {wanted}; the state comes from a metric with another configuration"
                )

    def _described(self) -> str:
        names = ("top_k", "metrics", "num_items", "resolution_bits", "num_groups")
        # self.__dict__, not getattr: ignite's Metric answers any unknown attribute with a function
        return ", ".join(f"{n}={self.__dict__[n]!r}" for n in names if self.__dict__.get(n) is not None)

    def load_state_dict(self, state_dict: Mapping) -> None:
        rank = idist.get_rank()
        if isinstance(state_dict, Mapping) and _CONFIGURATION in state_dict:
            self._check_configuration(state_dict[_CONFIGURATION])
            state_dict = {key: value for key, value in state_dict.items() if key != _CONFIGURATION}
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
                for key, value in per_rank[rank].items()
                if key in current
            }
            for spec in self._states.values():
                if spec.name not in per_rank[rank]:  # optional (checked): its fill value
                    per_rank[rank][spec.name] = self._new_state(spec)
            state_dict = {_PER_RANK: per_rank}
        super().load_state_dict(state_dict)
        self._failed_checks = FailedChecks()  # the loaded state's invalid updates come as a total
        self._resume_pending = True

    def started(self, engine) -> None:
        """Reset where the usage starts accumulating (each epoch, or the run), except when the
        Engine resumes from a checkpoint this metric was loaded from: mid-epoch, the state then
        holds that epoch's first batches; for a usage over the whole run (``RunningBatchWise``,
        reset when the run starts), the batches before the checkpoint."""
        resuming, self._resume_pending = self._resume_pending, False
        state = engine.state
        if resuming and engine.last_event_name == Events.EPOCH_STARTED:
            if state.epoch_length and state.iteration % state.epoch_length != 0:
                return
        elif resuming and engine.last_event_name == Events.STARTED and state.iteration > 0:
            return
        self.reset()


@contextlib.contextmanager
def _threads(count: Optional[int]):
    """torch's intra-op threads set to ``count`` inside the block and restored after it (None:
    nothing changes)."""
    if count is None or count == torch.get_num_threads():
        yield
        return
    saved = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def _describe(value: Any) -> str:
    """A configuration value as text: a tensor by shape and a digest of its values, a function by
    its qualified name and a digest of its code, defaults and captured values, a metric by its
    class and configuration."""
    if isinstance(value, torch.Tensor):
        return _tensor_text(value)
    if isinstance(value, StatefulMetric):
        return f"{type(value).__name__}({', '.join(f'{k}={v}' for k, v in value._configuration().items())})"
    if callable(value):
        return _callable_text(value)
    return repr(value)


# in the text of a callable that cannot be compared in full (load_state_dict then warns)
_UNSURE = "compared by name only"


def _tensor_text(value: torch.Tensor) -> str:
    data = value.detach().to("cpu", torch.float64).contiguous().numpy().tobytes()
    return f"tensor{tuple(value.shape)}:{hashlib.sha1(data).hexdigest()[:12]}"


def _callable_text(value: Any) -> str:
    """``module.qualname (code <digest>)``: two different functions of one name (two lambdas)
    differ by their code, defaults or captured values. A callable without Python code (a builtin,
    a callable object), or one that captures values other than numbers, strings and tensors, is
    marked ``_UNSURE``."""
    name = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', type(value).__name__)}"
    code = getattr(value, "__code__", None)
    if not isinstance(code, types.CodeType):
        return f"{name} ({_UNSURE}: no Python code)"
    captured = [cell.cell_contents for cell in (getattr(value, "__closure__", None) or ())]
    captured += list(getattr(value, "__defaults__", None) or ())
    captured += list((getattr(value, "__kwdefaults__", None) or {}).items())
    texts = [_plain_text(item) for item in captured] + _globals_texts(code, getattr(value, "__globals__", {}))
    owner = getattr(value, "__self__", None)  # a bound method's instance: its attributes
    if owner is not None and not isinstance(owner, types.ModuleType):
        attributes = getattr(owner, "__dict__", None)
        texts.append(None if attributes is None else _plain_text(sorted(attributes.items())))
    digest = hashlib.sha1("|".join([_code_text(code)] + [t or "?" for t in texts]).encode()).hexdigest()[:12]
    if any(text is None for text in texts):
        return f"{name} (code {digest}; {_UNSURE} for the values it captures)"
    return f"{name} (code {digest})"


def _globals_texts(code: types.CodeType, namespace: dict) -> list:
    """The module-level values a function's code reads, as ``name=text`` (None where the value is
    not plain data); modules, functions and classes it names are left out (their code is not
    compared)."""
    names = set(code.co_names)
    nested = [constant for constant in code.co_consts if isinstance(constant, types.CodeType)]
    while nested:
        inner = nested.pop()
        names.update(inner.co_names)
        nested += [constant for constant in inner.co_consts if isinstance(constant, types.CodeType)]
    texts = []
    for name in sorted(names & set(namespace)):
        value = namespace[name]
        if isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)):
            continue
        text = _plain_text(value)
        texts.append(None if text is None else f"{name}={text}")
    return texts


def _code_text(code: types.CodeType) -> str:
    """A code object as text that does not depend on the process (nested code by its text)."""
    constants = [_code_text(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts]
    return "|".join([code.co_code.hex(), repr(code.co_names), repr(code.co_varnames), *constants])


def _plain_text(value: Any) -> Optional[str]:
    """A captured value as text when it is plain data (None: it cannot be compared)."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return repr(value)
    if isinstance(value, torch.Tensor):
        return _tensor_text(value)
    if isinstance(value, (tuple, list)):
        texts = [_plain_text(item) for item in value]
        return None if any(text is None for text in texts) else f"({', '.join(texts)})"  # type: ignore[arg-type]
    return None


class StreamingMean(StatefulMetric):
    """``compute`` returns the mean ``sums / count`` of ``num_values`` values (through ``_result``):
    float64 states ``_sum`` (num_values,) and ``_count``, summed across processes."""

    def __init__(
        self,
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
    ):
        self._add_mean_states()
        super().__init__(output_transform, device, skip_unrolling)

    def compute(self) -> Any:
        return self._mean()
