"""The one place where arguments and inputs are checked.

Constructor arguments are declared, not checked by hand: each metric class names its arguments'
constraints in ``_parameter_constraints`` (a mapping from argument name to a :class:`Param`, merged
along the class hierarchy, as scikit-learn's ``_parameter_constraints``), and
:func:`validated_init` checks every declared argument once, before the constructor body runs, and
passes the normalised values on (``top_k`` sorted, an item vector copied to float64, ...).

Every check raises before any metric state changes, names the argument, and says what was
expected. Checks of tensor *values* (NaN scores, negative relevance) need the values on the host;
they are done eagerly for CPU inputs and deferred to ``compute()`` for CUDA inputs, so that
``update`` never synchronises with the GPU (see ``raise_if_invalid``).
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Union

import torch

TIE_RULES = ("stable", "average")
# dtypes accepted as scores and as relevance labels (others, e.g. uint16/32/64 or float8, lack the
# kernels the ranking step needs: they are refused here with a TypeError, before anything runs)
SCORE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
LABEL_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64) + SCORE_DTYPES
# Integer (and bool) scores of ranking inputs, as ignite's rec_sys metrics accept them: each is
# converted to the smallest floating dtype that holds all its values exactly (float32 up to 16 bits;
# float64 for int32 and int64, exact up to 2**53 in magnitude: larger int64 scores are rounded to
# the nearest float64, so scores closer than their spacing there would tie). The conversion is a
# copy of y_pred (4 or 8 bytes per entry) for the duration of the update.
INTEGER_SCORE_DTYPES = {
    torch.bool: torch.float32,
    torch.uint8: torch.float32,
    torch.int8: torch.float32,
    torch.int16: torch.float32,
    torch.int32: torch.float64,
    torch.int64: torch.float64,
}
GAIN_FUNCTIONS = ("exp_rank", "linear_rank", "binary", "exp_rank_shifted")
GainFunction = Union[str, Callable[[torch.Tensor], torch.Tensor]]


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type. It is a :class:`TypeError`, as Python's convention asks, and
    also a :class:`ValueError`, which is what ignite's ``rec_sys`` metrics raise in the same case,
    so that code catching either keeps working (as numpy's ``AxisError`` is both a ValueError and
    an IndexError)."""


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
    if len(set(values)) != len(values):
        raise ValueError(f"top_k must not contain duplicates, got {list(values)}")
    return tuple(sorted(int(k) for k in values))


def _show(values: Any) -> str:
    return repr(list(values)) if isinstance(values, Sequence) else repr(values)


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r} of type {type(value).__name__}")
    return value


def check_positive_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} of type {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value}")
    return float(value)


def check_relevance_threshold(value: Any) -> Union[float, None]:
    """A finite threshold > 0 (relevant: ``y >= t``), or None (relevant: ``y > 0``)."""
    if value is None:
        return None
    return check_positive_float("relevance_threshold", value)


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {list(choices)}, got {value!r} of type {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def check_gain_function(value: Any, relevance_threshold: Union[float, None] = 1.0) -> GainFunction:
    """One of ``GAIN_FUNCTIONS`` or a callable. The message begins with ignite's text; a value that
    is neither a string nor a callable raises :class:`ArgumentTypeError` (ignite: ValueError)."""
    if callable(value):
        return value
    if value not in GAIN_FUNCTIONS:
        error = ValueError if isinstance(value, str) else ArgumentTypeError
        raise error(
            f"gain_function must be either 'exp_rank' or 'linear_rank' (or one of {list(GAIN_FUNCTIONS[2:])}, "
            f"or a callable mapping relevance to gains), got {value!r} of type {type(value).__name__}"
        )
    if value == "exp_rank_shifted" and relevance_threshold is None:
        raise ValueError("gain_function='exp_rank_shifted' shifts by relevance_threshold, which must then be a number, got None")
    return value


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


def check_positive_int(name: str, value: Any) -> int:
    if not _is_int(value):
        raise TypeError(f"{name} must be an int, got {value!r} of type {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value}")
    return int(value)


def values_only(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` without its autograd graph: detached where it has one (no operation otherwise)."""
    return tensor.detach() if tensor.requires_grad else tensor


def check_scores_and_relevance(output: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Structural checks of ``update``'s ``(y_pred, y)``: types, ranks, shapes, dtypes, devices."""
    if not isinstance(output, Sequence) or isinstance(output, (str, bytes)):
        raise TypeError(f"update expects a tuple (y_pred, y), got {type(output).__name__}")
    if len(output) != 2:
        raise ValueError(f"update expects a tuple (y_pred, y) of 2 tensors, got a sequence of length {len(output)}")
    y_pred, y = output
    for name, tensor in (("y_pred", y_pred), ("y", y)):
        _check_dense_tensor(name, tensor)
        if tensor.ndim != 2:
            raise ValueError(f"{name} must be 2-D (batch, num_items), got shape {tuple(tensor.shape)}")
    if y_pred.shape != y.shape:
        raise ValueError(
            f"y_pred and y must be in the same shape, got {tuple(y_pred.shape)} and {tuple(y.shape)}"
        )
    if y_pred.shape[0] == 0:
        raise ValueError("y_pred and y must hold at least one user (batch dimension is 0)")
    if y_pred.shape[1] == 0:
        raise ValueError("y_pred and y must hold at least one item (num_items dimension is 0)")
    scores = SCORE_DTYPES + tuple(INTEGER_SCORE_DTYPES)
    _check_dtype("y_pred", y_pred, scores, "floating-point, integer or bool scores")
    _check_dtype("y", y, LABEL_DTYPES, "bool, integer or floating-point relevance")
    if y_pred.device != y.device:
        raise ValueError(f"y_pred and y must be on the same device, got {y_pred.device} and {y.device}")
    # Metrics read values only: no autograd graph is kept or needed.
    y_pred = values_only(y_pred)
    if y_pred.dtype in INTEGER_SCORE_DTYPES:  # an exact copy (see INTEGER_SCORE_DTYPES)
        y_pred = y_pred.to(INTEGER_SCORE_DTYPES[y_pred.dtype])
    return y_pred, values_only(y)


def check_pointwise(output: Any) -> tuple[torch.Tensor, torch.Tensor, Union[torch.Tensor, None]]:
    """Structural checks of a pointwise ``update`` input ``(y_pred, y)`` or ``(y_pred, y, mask)``:
    tensors of one shape (any number of dimensions), ``mask`` bool (True = observed entry)."""
    if not isinstance(output, Sequence) or isinstance(output, (str, bytes)):
        raise TypeError(f"update expects a tuple (y_pred, y) or (y_pred, y, mask), got {type(output).__name__}")
    if len(output) not in (2, 3):
        raise ValueError(
            f"update expects a tuple (y_pred, y) or (y_pred, y, mask), got a sequence of length {len(output)}"
        )
    y_pred, y = output[0], output[1]
    mask = output[2] if len(output) == 3 else None
    named = [("y_pred", y_pred), ("y", y)] + ([("mask", mask)] if mask is not None else [])
    for name, tensor in named:
        _check_dense_tensor(name, tensor)
        if tensor.shape != y_pred.shape:
            raise ValueError(f"{name} must have the shape of y_pred {tuple(y_pred.shape)}, got {tuple(tensor.shape)}")
        if tensor.device != y_pred.device:
            raise ValueError(f"{name} must be on y_pred's device {y_pred.device}, got {tensor.device}")
    if y_pred.ndim == 0 or y_pred.numel() == 0:
        raise ValueError(f"y_pred must hold at least one entry in at least one dimension, got shape {tuple(y_pred.shape)}")
    _check_dtype("y_pred", y_pred, SCORE_DTYPES, "floating-point scores")
    _check_dtype("y", y, LABEL_DTYPES, "bool, integer or floating-point targets")
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = observed entry), got dtype {mask.dtype}")
    # Metrics read values only: no autograd graph is kept in the state.
    return values_only(y_pred), values_only(y), (None if mask is None else values_only(mask))


def check_num_items(name: str, value: Any) -> Union[int, None]:
    return None if value is None else check_positive_int(name, value)


def check_item_vector(name: str, value: Any, num_items: int | None = None) -> torch.Tensor:
    """A 1-D, finite, non-negative per-item tensor (e.g. training interaction counts)."""
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


def any_flag(flags: dict[str, torch.Tensor]) -> torch.Tensor:
    """0-d bool tensor: one of the flags (0-d or one-element bool tensors) is set; no host read."""
    return torch.stack([flag if flag.ndim == 0 else flag.reshape(()) for flag in flags.values()]).any()


def raise_if_invalid(flags: dict[str, torch.Tensor]) -> bool:
    """Eager value check for CPU inputs: ``flags`` maps a message to a 0-d bool tensor. Returns
    True: the values were checked here (a stand-in that checks nothing returns None). Several
    flags are read on the host at once (one read, then the failing one is looked for)."""
    if len(flags) > 1 and not bool(any_flag(flags)):
        return True
    for message, flag in flags.items():
        if bool(flag):
            raise ValueError(message)
    return True


def _check_dense_tensor(name: str, tensor: Any) -> None:
    if not isinstance(tensor, torch.Tensor):
        hint = ""
        if type(tensor).__name__ in ("RankedItems", "ItemIds"):
            hint = " (this metric reads dense tensors; ranked ids and id lists are for the ranking and catalog metrics)"
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}{hint}")
    if tensor.layout != torch.strided:
        raise TypeError(
            f"{name} must be a dense (strided) tensor, got layout {tensor.layout}; "
            f"convert it with {name}.to_dense()"
        )


def _check_dtype(name: str, tensor: torch.Tensor, accepted: tuple, what: str) -> None:
    if tensor.dtype not in accepted:
        names = ", ".join(str(dtype).replace("torch.", "") for dtype in accepted)
        raise TypeError(f"{name} must hold {what} ({names}), got dtype {tensor.dtype}")


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)



def check_level(value: Any) -> float:
    """A confidence level strictly between 0 and 1 (e.g. 0.95)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"level must be a real number in (0, 1), got {value!r} of type {type(value).__name__}")
    if not 0 < value < 1:
        raise ValueError(f"level must be strictly between 0 and 1 (e.g. 0.95), got {value}")
    return float(value)


# --- Declared constructor arguments --------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    """The constraint on one constructor argument: ``check(name, value, arguments)`` returns the
    value to use or raises a TypeError/ValueError naming the argument; ``arguments`` are the call's
    other arguments, already checked when they come earlier in the signature. ``expected`` says in
    words what is accepted."""

    expected: str
    check: Callable[[str, Any, Mapping], Any]


def boolean() -> Param:
    return Param("a bool", lambda name, value, arguments: check_bool(name, value))


def one_of(choices: Sequence[str]) -> Param:
    choices = tuple(choices)
    return Param(f"one of {list(choices)}", lambda name, value, arguments: check_choice(name, value, choices))


def positive_real(optional: bool = False) -> Param:
    def check(name, value, arguments):
        return None if optional and value is None else check_positive_float(name, value)

    return Param("a finite number > 0" + (" or None" if optional else ""), check)


def positive_int(optional: bool = False) -> Param:
    def check(name, value, arguments):
        return None if optional and value is None else check_positive_int(name, value)

    return Param("a positive int" + (" or None" if optional else ""), check)


TOP_K = Param("an int or a sequence of distinct positive ints", lambda name, value, arguments: check_top_k(value))
GAIN_FUNCTION = Param(
    f"one of {list(GAIN_FUNCTIONS)} or a callable mapping relevance to gains",
    lambda name, value, arguments: check_gain_function(value, arguments.get("relevance_threshold", 1.0)),
)
ITEM_VECTOR = Param(
    "a non-empty 1-D tensor of finite values >= 0, one per item",
    # a copy: later in-place changes to the caller's tensor must not change the results
    lambda name, value, arguments: check_item_vector(name, value).clone(),
)


def int_between(low: int, high: int) -> Param:
    def check(name, value, arguments):
        value = check_positive_int(name, value)
        if not low <= value <= high:
            raise ValueError(f"{name} must be between {low} and {high}, got {value}")
        return value

    return Param(f"an int between {low} and {high}", check)


def positive_real_below(high: float) -> Param:
    def check(name, value, arguments):
        value = check_positive_float(name, value)
        if value >= high:
            raise ValueError(f"{name} must be below {high}, got {value}")
        return value

    return Param(f"a number > 0 and below {high}", check)


CALLABLE = Param("a callable", lambda name, value, arguments: check_callable(name, value))


def check_callable(name: str, value: Any) -> Callable:
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__}")
    return value


def declared_constraints(cls: type) -> dict:
    """The ``_parameter_constraints`` of ``cls`` and its bases (a subclass's declaration wins)."""
    merged: dict = {}
    for klass in reversed(cls.__mro__):
        merged.update(vars(klass).get("_parameter_constraints", {}))
    return merged


def validated_init(init: Callable) -> Callable:
    """Wrap a constructor so that the outermost call checks every declared argument (see the module
    docstring) and hands the checked values to the constructor body; the base classes' constructors
    it calls then receive checked values and check nothing again. A constructor that only forwards
    ``*args, **kwargs`` leaves the checks to the next one that names its arguments."""
    signature = inspect.signature(init)
    forwards = any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in signature.parameters.values())
    if forwards:
        return init

    @functools.wraps(init)
    def checked_init(self, *args, **kwargs):
        if self.__dict__.get("_arguments_checked"):
            return init(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)  # a TypeError for a wrong call, as without the wrapper
        bound.apply_defaults()
        constraints = declared_constraints(type(self))
        arguments = bound.arguments
        for name in list(arguments)[1:]:
            if name in constraints:
                arguments[name] = constraints[name].check(name, arguments[name], arguments)
        self.__dict__["_arguments_checked"] = True
        try:
            return init(*bound.args, **bound.kwargs)
        finally:
            del self.__dict__["_arguments_checked"]

    return checked_init


def check_num_groups(value: Any) -> Union[int, None]:
    """The number of user groups a metric reports (None: no groups)."""
    if value is None:
        return None
    if not _is_int(value):
        raise TypeError(f"num_groups must be a positive int or None, got {value!r} of type {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"num_groups must be a positive int or None, got {value}")
    return int(value)


def check_group_ids(groups: torch.Tensor, num_groups: int) -> dict:
    """Value check of an update's group ids (run on the device): within [0, num_groups)."""
    outside = (groups < 0) | (groups >= num_groups)
    return {f"UserGroups ids must lie in [0, {num_groups}) (num_groups={num_groups})": outside.any()}
