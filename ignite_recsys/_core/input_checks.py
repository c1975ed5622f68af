"""The checks of ``update``'s inputs: structure (types, ranks, shapes, dtypes, devices), checked on
the host before anything runs, and value checks (NaN scores, ids outside the catalog, ...), which
are 0-d bool flags computed on the inputs' device: read at once for CPU inputs, deferred to
``compute()`` for the others (see ``metrics/_state.py``), so that ``update`` never waits for an
accelerator.

A flag dict maps the message a failing check raises to its flag."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from types import FrameType
from typing import Any, Optional, Union

import ignite
import torch

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
RANKED_IDS_HINT = "if y_pred holds ranked item ids (e.g. from argsort or topk().indices), pass RankedItems(y_pred)"


class InputWarning(UserWarning):
    """An input that is accepted but looks like a mistake (ranked ids passed as scores, scores and
    labels swapped). Checked on the first update after each ``reset`` of a CPU input."""


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
        check_dense_tensor(name, tensor)
        if tensor.ndim != 2:
            raise ValueError(f"{name} must be 2-D (batch, num_items), got shape {tuple(tensor.shape)}")
    if y_pred.shape != y.shape:
        hint = ""
        if not y_pred.is_floating_point() and y_pred.shape[0] == y.shape[0] and y_pred.shape[1] < y.shape[1]:
            hint = f"; {RANKED_IDS_HINT}"
        raise ValueError(
            f"y_pred and y must be in the same shape, got {tuple(y_pred.shape)} and {tuple(y.shape)}{hint}"
        )
    if y_pred.shape[0] == 0:
        raise ValueError("y_pred and y must hold at least one user (batch dimension is 0)")
    if y_pred.shape[1] == 0:
        raise ValueError("y_pred and y must hold at least one item (num_items dimension is 0)")
    scores = SCORE_DTYPES + tuple(INTEGER_SCORE_DTYPES)
    check_dtype("y_pred", y_pred, scores, "floating-point, integer or bool scores")
    check_dtype("y", y, LABEL_DTYPES, "bool, integer or floating-point relevance")
    if y_pred.device != y.device:
        raise ValueError(f"y_pred and y must be on the same device, got {y_pred.device} and {y.device}")
    # Metrics read values only: no autograd graph is kept or needed.
    y_pred = values_only(y_pred)
    if y_pred.dtype in INTEGER_SCORE_DTYPES:  # an exact copy (see INTEGER_SCORE_DTYPES)
        y_pred = y_pred.to(INTEGER_SCORE_DTYPES[y_pred.dtype])
    return y_pred, values_only(y)


def check_pointwise(output: Any) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
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
        check_dense_tensor(name, tensor)
        if tensor.shape != y_pred.shape:
            raise ValueError(f"{name} must have the shape of y_pred {tuple(y_pred.shape)}, got {tuple(tensor.shape)}")
        if tensor.device != y_pred.device:
            raise ValueError(f"{name} must be on y_pred's device {y_pred.device}, got {tensor.device}")
    if y_pred.ndim == 0 or y_pred.numel() == 0:
        raise ValueError(
            f"y_pred must hold at least one entry in at least one dimension, got shape {tuple(y_pred.shape)}"
        )
    check_dtype("y_pred", y_pred, SCORE_DTYPES, "floating-point scores")
    check_dtype("y", y, LABEL_DTYPES, "bool, integer or floating-point targets")
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = observed entry), got dtype {mask.dtype}")
    # Metrics read values only: no autograd graph is kept in the state.
    return values_only(y_pred), values_only(y), (None if mask is None else values_only(mask))


def check_dense_tensor(name: str, tensor: Any) -> None:
    if not isinstance(tensor, torch.Tensor):
        hint = ""
        if type(tensor).__name__ in ("RankedItems", "ItemIds"):
            hint = " (this metric reads dense tensors; ranked ids and id lists are for the ranking and catalog metrics)"
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}{hint}")
    if tensor.layout != torch.strided:
        raise TypeError(
            f"{name} must be a dense (strided) tensor, got layout {tensor.layout}; convert it with {name}.to_dense()"
        )


def check_dtype(name: str, tensor: torch.Tensor, accepted: tuple, what: str, hint: str = "") -> None:
    if tensor.dtype not in accepted:
        names = ", ".join(str(dtype).replace("torch.", "") for dtype in accepted)
        raise TypeError(f"{name} must hold {what} ({names}), got dtype {tensor.dtype}{hint}")


def check_id_range(name: str, ids: torch.Tensor, num_items: Optional[int]) -> dict:
    """Value check of padded ids (run on the device): within [0, num_items) or -1."""
    upper = num_items if num_items is not None else (1 << 31)
    return {f"{name} holds item ids outside [0, {upper}) other than -1 (no item)": ((ids < -1) | (ids >= upper)).any()}


# --- Value-check flags ---------------------------------------------------------------------------
def stacked_flags(flags: dict) -> torch.Tensor:
    """(len(flags),) bool tensor of the flags (0-d or one-element bool tensors), in their order; no
    host read."""
    return torch.stack([flag if flag.ndim == 0 else flag.reshape(()) for flag in flags.values()])


def any_flag(flags: dict) -> torch.Tensor:
    """0-d bool tensor: one of the flags is set; no host read."""
    return stacked_flags(flags).any()


def raise_if_invalid(flags: dict) -> None:
    """Eager value check of CPU inputs: raise the ValueError of the first flag that is set.
    Several flags are read on the host at once (one read, then the failing one is looked for)."""
    if not flags or (len(flags) > 1 and not bool(any_flag(flags))):
        return
    for message, flag in flags.items():
        if bool(flag):
            raise ValueError(message)


# --- Warnings that point at the user's line -------------------------------------------------------
def _package_dir(module: Any) -> str:
    return os.path.dirname(os.path.abspath(module.__file__)) + os.sep


def warn_user(message: str, category: type) -> None:
    """``warnings.warn`` attributed to the first frame outside this library, ignite and torch (the
    user's line that called ``update``, ``compute`` or ``Engine.run``): ``skip_file_prefixes``
    on Python >= 3.12."""
    skipped = tuple(_package_dir(module) for module in (sys.modules["ignite_recsys"], ignite, torch))
    if sys.version_info >= (3, 12):
        warnings.warn(message, category, stacklevel=2, skip_file_prefixes=skipped)
    else:
        warnings.warn(message, category, stacklevel=_outside_stacklevel(skipped))


def _outside_stacklevel(skipped: tuple) -> int:
    """The ``stacklevel`` of :func:`warn_user`'s ``warnings.warn`` that reaches the first frame
    outside the ``skipped`` directories, for Python < 3.12, which has no ``skip_file_prefixes``:
    the number of frames between varies (an ``update`` called by the user, or from inside
    ``Engine.run``), so they are counted. The one place the package reads the call stack."""
    frame: Optional[FrameType] = sys._getframe(2)  # warn_user's caller
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(skipped):
        frame, level = frame.f_back, level + 1
    return level + 1


# --- Inputs that are accepted but look like mistakes ----------------------------------------------
_INTEGRAL_PREFIX = 1024  # model scores are fractional within their first values: the rest is not read


def _integral(row: torch.Tensor) -> bool:
    """Whether every value of the float ``row`` is integral: its first ``_INTEGRAL_PREFIX`` values,
    then, only if those are, the whole row."""
    head = row[:_INTEGRAL_PREFIX]
    if not bool((head == head.round()).all()):
        return False
    return row.shape[0] <= _INTEGRAL_PREFIX or bool((row == row.round()).all())


def warn_if_suspicious(y_pred: Union[torch.Tensor, None], y: Union[torch.Tensor, None]) -> None:
    """CPU, first update after a reset: warn (:class:`InputWarning`) when the integer scores of
    the first user are a permutation of the item ids (ranked ids passed as scores), or when that
    user's scores are all integral and its labels are not (``(y, y_pred)`` swapped). Reads one
    row of each."""
    if y_pred is None or y_pred.device.type != "cpu" or y_pred.ndim != 2 or y_pred.numel() == 0:
        return
    first = y_pred[0]
    if first.dtype == torch.bool:
        return
    if not first.is_floating_point():
        if first.shape[0] > 1 and bool((first.sort().values == torch.arange(first.shape[0], dtype=first.dtype)).all()):
            warn_user(
                "y_pred holds integer scores that are a permutation of the item ids; higher scores rank first, "
                f"so ranked ids would be ranked backwards: {RANKED_IDS_HINT}",
                InputWarning,
            )
        return
    if y is None or not y.is_floating_point() or y.shape != y_pred.shape:
        return
    if _integral(first) and not _integral(y[0]):
        warn_user(
            "y_pred holds integral values while y holds fractional ones: the tuple is (y_pred, y), scores "
            "first; were they swapped?",
            InputWarning,
        )
