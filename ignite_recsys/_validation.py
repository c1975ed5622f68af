"""Constructor arguments, declared: one table of constraints per class, checked in one place.

Each metric class names its arguments' constraints in ``_parameter_constraints`` (argument name ->
:class:`Constraint`, merged along the class hierarchy, as scikit-learn's
``_parameter_constraints``); a constructor decorated with :func:`checks_constructor` has every
declared argument checked once, bound to its signature, before its body runs, and builds the
metric from the normalised values its body receives (``top_k`` sorted, an item vector copied to
float64, ...). A constraint writes its own message, which names the argument and says
what was expected, and offers :meth:`Constraint.invalid_values` that the tests feed to every
argument of every class (as scikit-learn's ``generate_invalid_param_val``).

The checks of ``update``'s inputs live beside the input adapters (``_core/input_checks.py``).
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar, Union, cast

import torch

from ._core.item_sets import MAX_NUM_ITEMS

TIE_RULES = ("stable", "average")
GAIN_FUNCTIONS = ("exp_rank", "linear_rank", "binary", "exp_rank_shifted", "exponential", "linear")
# The descriptive names of the built-in gains and the ignite names they stand for.
GAIN_ALIASES = {"exponential": "exp_rank", "linear": "linear_rank"}
GainFunction = Union[str, Callable[[torch.Tensor], torch.Tensor]]


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type. It is a :class:`TypeError`, as Python's convention asks, and
    also a :class:`ValueError`, which is what ignite's ``rec_sys`` metrics raise in the same case,
    so that code catching either keeps working (as numpy's ``AxisError`` is both a ValueError and
    an IndexError)."""


_NOT_ACCEPTED = object()  # of no accepted type for any argument


# --- Constraints ---------------------------------------------------------------------------------
class Constraint:
    """What one argument accepts. ``check(name, value, arguments)`` returns the value to use or
    raises a TypeError / ValueError naming the argument; ``arguments`` are the call's other
    arguments, already checked when they come earlier in the signature. ``expected`` says in
    words what it accepts."""

    expected: str

    def check(self, name: str, value: Any, arguments: Mapping) -> Any:
        raise NotImplementedError

    def invalid_values(self) -> list:
        """Values this constraint refuses (for the tests of every argument)."""
        return [_NOT_ACCEPTED]


@dataclass(frozen=True)
class Boolean(Constraint):
    expected: str = "a bool"

    def check(self, name, value, arguments):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {value!r} of type {type(value).__name__}")
        return value

    def invalid_values(self):
        return [1, "yes", None, _NOT_ACCEPTED]


@dataclass(frozen=True)
class Interval(Constraint):
    """A real (``kind=float``) or integer (``kind=int``) number between ``low`` and ``high``
    (None: unbounded), each end included or not; ``optional``: None is accepted too."""

    kind: type
    low: Optional[float] = None
    high: Optional[float] = None
    low_included: bool = True
    high_included: bool = True
    optional: bool = False

    @property
    def expected(self) -> str:  # type: ignore[override]
        what = "an int" if self.kind is int else "a finite number"
        if self.kind is int and self.low == 1 and self.high is None:
            return "a positive int" + (" or None" if self.optional else "")
        bounds, shown = [], (lambda bound: str(int(bound)) if self.kind is int else f"{bound:g}")
        if self.low is not None:
            bounds.append(f"{'>=' if self.low_included else '>'} {shown(self.low)}")
        if self.high is not None:
            bounds.append(f"{'<=' if self.high_included else '<'} {shown(self.high)}")
        text = what + (" " + " and ".join(bounds) if bounds else "")
        return text + (" or None" if self.optional else "")

    def check(self, name, value, arguments):
        if value is None and self.optional:
            return None
        integral = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        real = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if not (integral if self.kind is int else real):
            raise TypeError(f"{name} must be {self.expected}, got {value!r} of type {type(value).__name__}")
        if self.kind is not int and not math.isfinite(value):
            raise ValueError(f"{name} must be {self.expected}, got {value}")
        below = self.low is not None and (value < self.low or (value == self.low and not self.low_included))
        above = self.high is not None and (value > self.high or (value == self.high and not self.high_included))
        if below or above:
            raise ValueError(f"{name} must be {self.expected}, got {value}")
        return int(value) if self.kind is int else float(value)

    def invalid_values(self):
        values: list = ["1", True, _NOT_ACCEPTED]
        if not self.optional:
            values.append(None)
        if self.kind is not int:
            values.append(math.nan)
        else:
            values.append(1.5)
        if self.low is not None:
            values.append(self.low - 1 if not self.low_included or self.kind is int else self.low - 0.5)
            if not self.low_included:
                values.append(self.kind(self.low))
        if self.high is not None:
            values.append(self.high + 1)
            if not self.high_included:
                values.append(self.kind(self.high))
        return values


def positive_int(optional: bool = False) -> Interval:
    return Interval(int, 1, optional=optional)


@dataclass(frozen=True)
class CatalogSize(Interval):
    """A number of items: a positive int up to 2**32 (the ranking keeps item ids in 32 bits)."""

    kind: type = int
    low: Optional[float] = 1
    high: Optional[float] = MAX_NUM_ITEMS

    @property
    def expected(self) -> str:  # type: ignore[override]
        return "a positive int up to 2**32 (the widest catalog ranked)" + (" or None" if self.optional else "")


def catalog_size(optional: bool = False) -> Interval:
    return CatalogSize(optional=optional)


def positive_real(optional: bool = False) -> Interval:
    return Interval(float, 0, low_included=False, optional=optional)


@dataclass(frozen=True)
class Options(Constraint):
    """One of a few strings; with ``none_means``, None stands for that choice."""

    choices: tuple
    none_means: Optional[str] = None

    @property
    def expected(self) -> str:  # type: ignore[override]
        text = f"one of {list(self.choices)}"
        return text + (f" (None: {self.none_means!r})" if self.none_means is not None else "")

    def check(self, name, value, arguments):
        if value is None and self.none_means is not None:
            return self.none_means
        return check_choice(name, value, self.choices)

    def invalid_values(self):
        return ["no such choice", 3, _NOT_ACCEPTED] + ([] if self.none_means is not None else [None])


@dataclass(frozen=True)
class IsCallable(Constraint):
    expected: str = "a callable"

    def check(self, name, value, arguments):
        if not callable(value):
            raise TypeError(f"{name} must be callable, got {type(value).__name__}")
        return value

    def invalid_values(self):
        return [None, 3, _NOT_ACCEPTED]


@dataclass(frozen=True)
class Custom(Constraint):
    """A constraint written as a function ``check(name, value, arguments)`` with its own
    message; ``invalid`` lists values it refuses."""

    expected: str
    function: Callable[..., Any]  # (name, value, arguments) -> the value to use
    invalid: tuple = (_NOT_ACCEPTED,)

    def check(self, name, value, arguments):
        return self.function(name, value, arguments)

    def invalid_values(self):
        return list(self.invalid)


BOOLEAN = Boolean()
CALLABLE = IsCallable()
TOP_K = Custom(
    "an int or a sequence of distinct positive ints",
    lambda name, value, arguments: list(check_top_k(value)),
    (0, -1, [], [1, 1], [2, 0], 1.5, "5", None, _NOT_ACCEPTED),
)
GAIN_FUNCTION = Custom(
    f"one of {list(GAIN_FUNCTIONS)} or a callable mapping relevance to gains",
    lambda name, value, arguments: check_gain_function(value, arguments.get("relevance_threshold", 1.0)),
    ("no such gain", 2, None, _NOT_ACCEPTED),
)
ITEM_VECTOR = Custom(
    "a non-empty 1-D tensor of finite values >= 0, one per item",
    # a copy: later in-place changes to the caller's tensor must not change the results
    lambda name, value, arguments: check_item_vector(name, value).clone(),
    (torch.tensor([1.0, -1.0]), torch.zeros(2, 2), torch.tensor([]), [1.0, 2.0], None, _NOT_ACCEPTED),
)


# --- The checks the constraints share ------------------------------------------------------------
MAX_TOP_K = (1 << 31) - 1  # the largest cut-off (a cut-off past a ranking reads the whole ranking)


def check_top_k(top_k: Any) -> tuple[int, ...]:
    """Return the cut-offs sorted ascending; reject anything but distinct positive integers.

    The messages begin with the text of ignite's ``rec_sys`` metrics and add the detail after it.
    A wrong type raises :class:`ArgumentTypeError` (both a TypeError and a ValueError)."""
    values = [top_k] if _is_int(top_k) or isinstance(top_k, (bool, float)) else top_k
    if not isinstance(values, Sequence) or isinstance(values, (str, bytes)):
        raise ArgumentTypeError(
            "top_k must be either int or a list[int]: a positive int or a sequence of distinct positive ints, "
            f"got {top_k!r} of type {type(top_k).__name__}"
        )
    if len(values) == 0:
        raise ValueError("top_k must have at least one positive value, got an empty sequence")
    for k in values:
        if not _is_int(k):
            raise ArgumentTypeError(
                f"top_k must be list of positive integers only, got {_show(top_k)}: it takes ints only, "
                f"and {k!r} is of type {type(k).__name__}"
            )
        if k <= 0:
            raise ValueError(f"top_k must be list of positive integers only, got {_show(top_k)}: {k} is not positive")
        if k > MAX_TOP_K:
            raise ValueError(
                f"top_k must be at most {MAX_TOP_K} (2**31 - 1), got {k}; a cut-off past a user's list reads the "
                "whole list"
            )
    if len(set(values)) != len(values):
        raise ValueError(f"top_k must not contain duplicates, got {list(values)}")
    return tuple(sorted(int(k) for k in values))


def check_gain_function(value: Any, relevance_threshold: Optional[float] = 1.0) -> GainFunction:
    """One of ``GAIN_FUNCTIONS`` or a callable; the descriptive names ``"exponential"`` and
    ``"linear"`` become the ignite names they stand for. The message begins with ignite's text; a
    value that is neither a string nor a callable raises :class:`ArgumentTypeError` (ignite:
    ValueError)."""
    if callable(value):
        return value
    if value not in GAIN_FUNCTIONS:
        error = ValueError if isinstance(value, str) else ArgumentTypeError
        raise error(
            f"gain_function must be either 'exp_rank' or 'linear_rank' (or one of {list(GAIN_FUNCTIONS[2:])}, "
            f"or a callable mapping relevance to gains), got {value!r} of type {type(value).__name__}"
        )
    if value == "exp_rank_shifted" and relevance_threshold is None:
        raise ValueError(
            "gain_function='exp_rank_shifted' shifts by relevance_threshold, which must then be a number, got None"
        )
    return GAIN_ALIASES.get(value, value)


def check_gain_output(gains: Any, values: torch.Tensor) -> torch.Tensor:
    """The output of a custom ``gain_function`` called on ``values``: one gain per value."""
    if not isinstance(gains, torch.Tensor):
        raise TypeError(f"gain_function must return a torch.Tensor of gains, got {type(gains).__name__}")
    if gains.shape != values.shape:
        raise ValueError(
            f"gain_function must return one gain per relevance value (shape {tuple(values.shape)}), "
            f"got shape {tuple(gains.shape)}"
        )
    if gains.is_complex() or gains.dtype == torch.bool or gains.device != values.device:
        raise TypeError(
            f"gain_function must return real gains on {values.device}, got dtype {gains.dtype} on {gains.device}"
        )
    return gains.detach().to(torch.float64)


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {list(choices)}, got {value!r} of type {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def check_positive_int(name: str, value: Any) -> int:
    return positive_int().check(name, value, {})


def check_catalog_size(name: str, value: Any) -> int:
    return catalog_size().check(name, value, {})


def check_level(value: Any) -> float:
    """A confidence level strictly between 0 and 1 (e.g. 0.95)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"level must be a real number in (0, 1), got {value!r} of type {type(value).__name__}")
    if not 0 < float(value) < 1:
        raise ValueError(f"level must be strictly between 0 and 1 (e.g. 0.95), got {value}")
    return float(value)


def check_item_vector(name: str, value: Any, num_items: Optional[int] = None) -> torch.Tensor:
    """A 1-D, finite, non-negative per-item tensor (e.g. training interaction counts), as float64."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a 1-D torch.Tensor, got {type(value).__name__}")
    if value.ndim != 1 or value.numel() == 0:
        raise ValueError(f"{name} must be a non-empty 1-D tensor, got shape {tuple(value.shape)}")
    if value.is_complex() or value.dtype == torch.bool:
        raise TypeError(f"{name} must hold real numbers, got dtype {value.dtype}")
    as_float = value.detach().to("cpu", torch.float64)
    if not torch.isfinite(as_float).all() or (as_float < 0).any():
        raise ValueError(f"{name} must hold finite, non-negative values")
    if num_items is not None and value.numel() != num_items:
        raise ValueError(f"{name} must have num_items={num_items} entries, got {value.numel()}")
    return as_float


def _show(values: Any) -> str:
    return repr(list(values)) if isinstance(values, Sequence) else repr(values)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


# --- The declaration of a class's arguments ------------------------------------------------------
Function = TypeVar("Function", bound=Callable[..., Any])


def declared_constraints(cls: type) -> dict:
    """The ``_parameter_constraints`` of ``cls`` and its bases (a subclass's declaration wins)."""
    merged: dict = {}
    for klass in reversed(cls.__mro__):
        merged.update(vars(klass).get("_parameter_constraints", {}))
    return merged


def validate(constraints: Mapping, arguments: Mapping) -> dict:
    """``arguments`` (name -> value, in signature order) with each one that ``constraints``
    declares checked and normalised (``top_k`` sorted, ...); a constraint sees the arguments
    before it already checked."""
    checked = dict(arguments)
    for name in checked:
        if name in constraints:
            checked[name] = constraints[name].check(name, checked[name], checked)
    return checked


def checks_constructor(init: Function) -> Function:
    """Decorator of a metric's ``__init__``: each call is bound to the signature of the class that
    runs this constructor, defaults applied, every argument that ``type(self)``'s
    ``_parameter_constraints`` declare is checked (:func:`validate`), and the body receives the
    checked, normalised values (``top_k`` sorted, an item vector copied, ...), all of which are
    also kept as ``self._arguments`` (the configuration a state is saved under). A call the
    signature refuses raises Python's TypeError, naming the constructor.

    The class bound to is the most derived class of ``type(self)`` whose constructor is this
    one, found by looking the decorated function up along the MRO: a subclass that inherits the
    constructor (a ranking metric of one registry entry) binds to its own declared
    ``__signature__``, whose keyword-only options reach the body's ``**`` parameter."""

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        owner = next((klass for klass in type(self).__mro__ if _constructor(klass) is checked), type(self))
        try:
            bound = _signature_of(owner, init).bind(self, *args, **kwargs)
        except TypeError as error:
            raise TypeError(f"{init.__qualname__}() {error}") from None
        bound.apply_defaults()
        arguments = validate(declared_constraints(type(self)), dict(list(bound.arguments.items())[1:]))
        self.__dict__["_arguments"] = arguments
        init(self, **arguments)

    return cast(Function, checked)


def _constructor(klass: type) -> Any:
    """The constructor ``klass`` runs (its own or inherited)."""
    return next(vars(base)["__init__"] for base in klass.__mro__ if "__init__" in vars(base))


def _signature_of(cls: type, init: Callable) -> inspect.Signature:
    """The signature calls are checked against: the class's declared one (with ``self``) when it
    has one, else the constructor's."""
    declared = vars(cls).get("__signature__")
    if declared is None:
        return inspect.signature(init)
    self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return declared.replace(parameters=[self_parameter, *declared.parameters.values()])


# --- The declaration of a function's arguments ---------------------------------------------------


def checks_arguments(constraints: Mapping) -> Callable[[Function], Function]:
    """Decorator: each call of the function checks the arguments ``constraints`` declares
    (:func:`validate`, bound to the function's own signature, defaults applied) and passes on the
    values the constraints return. The constructors of the classes that are not metrics (a
    :class:`~ignite_recsys.Report`) and the functions of the package declare their arguments so.

    >>> @checks_arguments({"digits": positive_int()})
    ... def shown(value, *, digits=4):
    ...     return f"{value:.{digits}f}"
    >>> shown(0.5, digits=2)
    '0.50'
    >>> shown(0.5, digits=0)
    Traceback (most recent call last):
    ...
    ValueError: digits must be a positive int, got 0
    """

    def decorate(function: Function) -> Function:
        signature = inspect.signature(function)
        unknown = set(constraints) - set(signature.parameters)
        if unknown:
            raise TypeError(f"{function.__qualname__} declares constraints of no argument of its: {sorted(unknown)}")

        @functools.wraps(function)
        def checked(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            bound.arguments.update(validate(constraints, bound.arguments))
            return function(*bound.args, **bound.kwargs)

        return cast(Function, checked)

    return decorate
