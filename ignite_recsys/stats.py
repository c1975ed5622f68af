"""Statistics for reporting results: paired significance tests between two models evaluated on
the same users (from per-user values; :class:`~ignite_recsys.Paired` streams the t-test), and
corrections for several comparisons.

The Student-t distribution comes from :mod:`scipy.stats` (see ``_tdist``), the reference
implementation that scientific Python uses; the library's own code only combines it with the
per-user values. The metrics' :meth:`confidence_interval` uses the same quantiles.
"""

from __future__ import annotations

import inspect
import math
import numbers
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch
from ignite.metrics import Metric

from . import _validation as V
from ._tdist import paired_t_p_value, t_quantile

__all__ = ["PairedTestResult", "PerUserValues", "paired_test", "correct_p_values"]

PAIRED_TEST_METHODS = ("t", "randomization")
CORRECTION_METHODS = ("holm", "bonferroni")


@dataclass(frozen=True)
class PairedTestResult:
    """The result of :func:`paired_test`.

    Attributes:
        p_value: two-sided p-value of "the mean difference is 0".
        mean_difference: mean over users of ``a - b``.
        confidence_interval: (low, high) Student-t interval of the mean difference at ``level``.
        method: ``"t"`` or ``"randomization"``.
        num_users: the users compared (after dropping pairs with a NaN).
        mean_a, mean_b: the means over those users of ``a`` and of ``b``.
    """

    p_value: float
    mean_difference: float
    confidence_interval: tuple
    method: str
    num_users: int
    mean_a: float = math.nan
    mean_b: float = math.nan


@dataclass(frozen=True)
class PerUserValues:
    """Per-user values with the users they belong to: ``values`` (1-D, a tensor, array or
    sequence) and ``user_ids`` (1-D, as many, ids of one kind, the same id for the same user), so
    that :func:`paired_test` and :class:`~ignite_recsys.Report` pair them with another model's by
    user rather than by position (the same users in another order are put in order; other
    users are refused). :meth:`EvaluationResult.to_report` gives them.

    >>> from ignite_recsys import PerUserValues, paired_test
    >>> a = PerUserValues([0.5, 0.7, 0.9], user_ids=["u1", "u2", "u3"])
    >>> b = PerUserValues([0.8, 0.4, 0.5], user_ids=["u3", "u1", "u2"])
    >>> round(paired_test(a, b).mean_difference, 6)  # u1 with u1: (0.1 + 0.2 + 0.1) / 3
    0.133333
    >>> c = PerUserValues([0.4, 0.5, 0.8], user_ids=["u1", "u2", "u4"])
    >>> paired_test(a, c)
    Traceback (most recent call last):
    ...
    ValueError: a and b hold different users (the user ids of their per-user values differ): ...
    """

    values: Any
    user_ids: Any

    def __post_init__(self):
        if _length(self.values) != _length(self.user_ids):
            raise ValueError(
                f"PerUserValues needs one user id per value, got {_length(self.values)} values and "
                f"{_length(self.user_ids)} user ids"
            )
        if not isinstance(self.user_ids, (torch.Tensor, np.ndarray)):
            numbers_ = {"integers": "numbers", "floats": "numbers"}
            found = {_KIND_NAMES.get(_python_kind(type(id_)), "other values") for id_ in self.user_ids}
            kinds = sorted({numbers_.get(kind, kind) for kind in found})
            if len(kinds) > 1:  # numpy would make every id text (1 pairs with "1"), or True a 1
                raise ValueError(f"PerUserValues: user_ids mixes {' and '.join(kinds)}: give every id of one kind")


def _length(values: Any) -> int:
    shape = np.shape(values.cpu() if isinstance(values, torch.Tensor) else values)
    if len(shape) != 1:
        raise ValueError(f"PerUserValues holds 1-D values and user ids (one per user), got shape {shape}")
    return shape[0]


def declared(value: Any, name: str, default: Any = None) -> Any:
    """``value.name`` where the value's class or the value itself defines ``name``, else ``default``:
    never through a ``__getattr__``. (An ignite ``Metric`` answers any unknown attribute with a
    function whose call builds a ``MetricsLambda``, which resets the metric.)"""
    try:
        inspect.getattr_static(value, name)
    except AttributeError:
        return default
    return getattr(value, name)


def _holds_cut_offs(values: Any) -> bool:
    """Whether ``values`` is a metric or result whose per-user values ``k`` picks from (not plain
    values or :class:`PerUserValues`)."""
    plain = isinstance(values, (PerUserValues, torch.Tensor, np.ndarray))
    return not plain and callable(declared(values, "per_user"))


def _values_of(name: str, values: Any, k: Any) -> np.ndarray:
    """A 1-D float64 numpy array from a tensor/array/sequence, :class:`PerUserValues` or a metric
    built with per_user=True."""
    if isinstance(values, PerUserValues):
        values = values.values
    elif _holds_cut_offs(values):
        if not declared(values, "keeps_per_user", True):
            raise ValueError(f"{name} ({type(values).__name__}) keeps no per-user values: build it with per_user=True")
        metric = values
        values = metric.per_user()
        if isinstance(values, dict):
            by_lower = {str(key).lower(): key for key in values}
            if k is None and len(values) == 1:
                (values,) = values.values()
            elif k in values:
                values = values[k]
            elif isinstance(k, str) and k.lower() in by_lower:  # "NDCG@10" names "ndcg@10"
                values = values[by_lower[k.lower()]]
            else:
                raise ValueError(f"k must name one of {list(values)} for {name} ({type(metric).__name__}), got {k!r}")
        elif values.ndim == 2:
            top_k = list(declared(metric, "top_k", []))
            if k is None and values.shape[1] == 1:
                values = values[:, 0]
            elif k in top_k and not isinstance(k, bool):
                values = values[:, top_k.index(k)]
            else:
                raise ValueError(
                    f"k must be one of the cut-offs {top_k} of {name} ({type(metric).__name__}), got {k!r}"
                )
    elif isinstance(values, Metric):
        raise TypeError(
            f"{name} ({type(values).__name__}) gives no per-user values: pass a metric built with per_user=True "
            "(one that averages over users), an evaluation result or the per-user values themselves"
        )
    if isinstance(values, torch.Tensor):
        values = values.detach().to("cpu", torch.float64).numpy()
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be 1-D real per-user values or a metric with per_user=True: {error}") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per user), got shape {array.shape}")
    if np.isinf(array).any():
        raise ValueError(f"{name} must hold finite values (NaN marks a user to leave out)")
    return array


def _user_ids_of(value: Any) -> Any:
    """The user ids of per-user values: those of :class:`PerUserValues`, or of a metric's
    per-user values when its updates came with UserIds; else None."""
    if isinstance(value, PerUserValues):
        return value.user_ids
    if callable(getattr(type(value), "to_report", None)):  # an EvaluationResult: its original user ids
        return getattr(value, "user_ids", None)
    if declared(value, "keeps_per_user", False) and callable(declared(value, "per_user_ids")):
        try:
            return value.per_user_ids()
        except RuntimeError:
            return None
    return None


_KIND_NAMES = {"b": "booleans", "i": "integers", "u": "integers", "f": "floats", "U": "text", "S": "bytes"}


def _python_kind(kind: type) -> str:
    """The numpy kind letter of a Python or numpy scalar type (``O`` for any other)."""
    for types, letter in (
        ((bool, np.bool_), "b"),
        ((numbers.Integral,), "i"),
        ((numbers.Real,), "f"),
        ((str,), "U"),
        ((bytes,), "S"),
    ):
        if issubclass(kind, types):
            return letter
    return "O"


def _array_kind(array: np.ndarray) -> str:
    """The numpy kind letter of an array's ids; of an object array, that of its elements where
    they are all of one kind (``O`` where mixed)."""
    if array.dtype.kind != "O":
        return array.dtype.kind
    kinds = {_python_kind(type(id_)) for id_ in array.ravel()}
    return kinds.pop() if len(kinds) == 1 else "O"


def _id_arrays(ids_a: Any, ids_b: Any) -> Optional[tuple]:
    """Two 1-D sequences of user ids as numpy arrays whose ``==`` is exact equality of ids: both
    of one kind (integers, floats, text, ...), integer-valued floats beside integers read as
    int64 (numpy would compare int64 and float64 as floats, so that 2**53 + 1 equals 2**53);
    None where a float id beside integers is not an integer (then no id of one equals the
    other's). A ValueError where one holds numbers and the other text or other values."""
    a, b = (np.asarray(ids.cpu() if isinstance(ids, torch.Tensor) else ids) for ids in (ids_a, ids_b))
    kinds = [_KIND_NAMES.get(_array_kind(array), "other values") for array in (a, b)]
    if kinds[0] == kinds[1]:
        return a, b
    if set(kinds) != {"integers", "floats"}:
        raise ValueError(
            f"a's user ids are {kinds[0]} and b's are {kinds[1]} (e.g. read from a CSV file and from a TREC "
            "file), so the users cannot be paired: give both ids of one kind"
        )
    exact = []
    for array in (a, b):
        if array.dtype.kind == "f":
            whole = np.isfinite(array) & (np.floor(array) == array) & (array >= -(2.0**63)) & (array < 2.0**63)
            if not whole.all():
                return None
            array = array.astype(np.int64)
        exact.append(array)
    return exact[0], exact[1]


def same_users(a: Any, b: Any) -> bool:
    """Whether two 1-D sequences of user ids (tensors, arrays, lists) hold the same ids in the
    same order (compared exactly, see ``_id_arrays``)."""
    arrays = _id_arrays(a, b)
    if arrays is None:
        return False
    a, b = arrays
    return a.shape == b.shape and bool((a == b).all())


def _paired(a: Any, b: Any, first: np.ndarray, second: np.ndarray) -> tuple:
    """The per-user values ``first`` (of ``a``) and ``second`` (of ``b``) paired user by user:
    both with user ids (the same users; ``second`` put in ``a``'s user order where the order
    differs, which needs each id once) or neither (paired by position). A ValueError where the
    users cannot be paired."""
    ids_a, ids_b = _user_ids_of(a), _user_ids_of(b)
    if (ids_a is None) != (ids_b is None):
        named, other = ("a", "b") if ids_a is not None else ("b", "a")
        raise ValueError(
            f"{named}'s per-user values come with user ids and {other}'s do not, so the users cannot be paired: "
            "give both with their users (metrics updated with UserIds, results of evaluate(), PerUserValues), "
            "or neither (then in the same user order)"
        )
    if ids_a is None or same_users(ids_a, ids_b):
        return first, second
    order = _alignment(ids_a, ids_b)
    if order is None or order.shape != second.shape:
        raise ValueError(
            "a and b hold different users (the user ids of their per-user values differ): evaluate both models "
            "on the same users (in another order, each user id once)"
        )
    return first, second[order]


def _alignment(ids_a: Any, ids_b: Any) -> Optional[np.ndarray]:
    """For each user of ``ids_a``, the position of the same id in ``ids_b``: where both hold the
    same ids, each once, in any order; else None."""
    arrays = _id_arrays(ids_a, ids_b)
    if arrays is None:
        return None
    a, b = arrays
    if a.ndim != 1 or a.shape != b.shape:
        return None
    try:
        order_a, order_b = np.argsort(a, kind="stable"), np.argsort(b, kind="stable")
        sorted_a, sorted_b = a[order_a], b[order_b]
        unique = a.size < 2 or bool((sorted_a[1:] != sorted_a[:-1]).all())
        if not (unique and bool((sorted_a == sorted_b).all())):
            return None
    except TypeError:  # ids that do not compare with each other (mixed kinds): not aligned
        return None
    order = np.empty(a.shape[0], dtype=np.int64)
    order[order_a] = order_b
    return order


def paired_test(
    a: Any,
    b: Any,
    method: str = "t",
    *,
    level: float = 0.95,
    k: Union[int, str, None] = None,
    num_permutations: int = 10000,
    seed: Optional[int] = 0,
) -> PairedTestResult:
    r"""Two-sided paired test of two models' per-user values on the same users.

    ``a`` and ``b``: 1-D tensors, arrays or sequences of the same length, user i of one being
    user i of the other; per-user values with their users (:class:`PerUserValues`); or two
    metrics built with ``per_user=True`` or results of :func:`~ignite_recsys.evaluate` with
    ``per_user=True`` (their :meth:`per_user`; ``k`` picks the cut-off of a metric with several,
    or the ``"name@k"`` key of a :class:`RankingMetrics` or a result; a ``k`` with no metric or
    result on either side is a ValueError). A user whose value is NaN
    in either (a user a metric does not count) is dropped from both. Metrics whose updates came
    with :class:`~ignite_recsys.UserIds` list their users in user-id order, so they line up
    however the users were batched or spread over processes. Where both sides have user ids,
    they must be the same users, each once where their orders differ (b's values are then taken
    in a's user order); where only one side has them (the other a metric
    updated without UserIds, or plain values), the users cannot be paired: a ValueError either
    way.

    - ``method="t"``: the paired Student t-test on :math:`d = a - b`, as
      ``scipy.stats.ttest_rel(a, b)``: :math:`t = \bar d / (s_d / \sqrt n)` with n - 1 degrees of
      freedom. If every difference is the same, the p-value is 1.0 when it is 0 and 0.0 otherwise.
    - ``method="randomization"``: Fisher's randomization (sign-flip) test, as ranx's: the share of
      ``num_permutations`` random sign flips of the differences whose mean is at least as far
      from 0 as the observed one (Smucker, Allan & Carterette, CIKM 2007). ``seed`` makes it
      repeatable (None: fresh randomness).

    ``confidence_interval`` is the Student-t interval of the mean difference at ``level`` for
    either method.

    >>> from ignite_recsys import paired_test
    >>> result = paired_test([0.5, 0.7, 0.9, 0.4], [0.4, 0.5, 0.8, 0.4])
    >>> round(result.mean_difference, 3), round(result.p_value, 4)
    (0.1, 0.0917)
    """
    method = V.check_choice("method", method, PAIRED_TEST_METHODS)
    level = V.check_level(level)
    if method == "randomization":
        num_permutations = V.check_positive_int("num_permutations", num_permutations)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
        raise TypeError(f"seed must be an int or None, got {seed!r} of type {type(seed).__name__}")
    if k is not None and not (_holds_cut_offs(a) or _holds_cut_offs(b)):
        raise ValueError(
            f"k={k!r} picks the cut-off of a metric or result, and neither a nor b is one (both are "
            "per-user values already): leave k out"
        )
    first, second = _paired(a, b, _values_of("a", a, k), _values_of("b", b, k))
    if first.shape != second.shape:
        raise ValueError(f"a and b must hold the same users: got {first.shape[0]} and {second.shape[0]} values")
    kept = ~(np.isnan(first) | np.isnan(second))
    differences = first[kept] - second[kept]
    means = (float(first[kept].mean()), float(second[kept].mean())) if kept.any() else (math.nan, math.nan)
    n = differences.shape[0]
    if n < 2:
        raise ValueError(f"a and b must have at least two users with values in both, got {n}")
    mean = float(differences.mean())
    sem = float(differences.std(ddof=1)) / math.sqrt(n)
    half = t_quantile((1 + level) / 2, n - 1) * sem
    if method == "t":
        p_value = paired_t_p_value(mean, sem, n - 1)
    else:
        p_value = _sign_flip_p_value(differences, num_permutations, seed)
    return PairedTestResult(p_value, mean, (mean - half, mean + half), method, n, *means)


def _sign_flip_p_value(differences: np.ndarray, num_permutations: int, seed: Optional[int]) -> float:
    """Share of random sign flips whose |sum| reaches the observed |sum| (a relative tolerance of
    1e-12 absorbs rounding, so that equal sums reached in another order count as reached)."""
    rng = np.random.default_rng(seed)
    observed = abs(differences.sum())
    threshold = observed - 1e-12 * max(observed, np.abs(differences).sum())
    chunk = max(1, min(num_permutations, (1 << 22) // max(differences.shape[0], 1)))
    reached, done = 0, 0
    while done < num_permutations:
        rows = min(chunk, num_permutations - done)
        signs = rng.integers(0, 2, size=(rows, differences.shape[0]), dtype=np.int8) * 2 - 1
        reached += int((np.abs(signs @ differences) >= threshold).sum())
        done += rows
    return reached / num_permutations


def correct_p_values(p_values: Sequence[float], method: str = "holm") -> list:
    """p-values adjusted for several comparisons, in the input order.

    - ``"bonferroni"``: :math:`\\min(1, m\\,p_i)` for m comparisons.
    - ``"holm"``: Holm's step-down (Holm, 1979): with the p-values sorted ascending,
      :math:`\\tilde p_{(i)} = \\max_{j \\le i} \\min(1, (m - j + 1)\\, p_{(j)})`; it controls the
      family-wise error as Bonferroni does and rejects at least as often.

    As ``statsmodels.stats.multitest.multipletests(p, method=...)[1]``.

    >>> from ignite_recsys import correct_p_values
    >>> correct_p_values([0.01, 0.04, 0.03], method="holm")
    [0.03, 0.06, 0.06]
    """
    method = V.check_choice("method", method, CORRECTION_METHODS)
    if isinstance(p_values, (str, bytes)):
        raise TypeError(f"p_values must be a sequence of numbers, got {type(p_values).__name__}")
    try:
        values = np.asarray(
            p_values.detach().cpu() if isinstance(p_values, torch.Tensor) else p_values, dtype=np.float64
        )
    except (TypeError, ValueError) as error:
        raise TypeError(f"p_values must be a sequence of numbers: {error}") from None
    if values.ndim != 1:
        raise ValueError(f"p_values must be 1-D, got shape {values.shape}")
    if np.isnan(values).any() or (values < 0).any() or (values > 1).any():
        raise ValueError(f"p_values must lie in [0, 1], got {values.tolist()}")
    m = values.shape[0]
    if method == "bonferroni":
        return np.minimum(1.0, values * m).tolist()
    order = np.argsort(values, kind="stable")
    stepped = np.maximum.accumulate(np.minimum(1.0, values[order] * (m - np.arange(m))))
    adjusted = np.empty(m)
    adjusted[order] = stepped
    return adjusted.tolist()
