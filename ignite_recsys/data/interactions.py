"""Interactions: (user, item[, value]) rows held once, served per batch of users.

:class:`Interactions` stores a test set, a training history or any (user, item) table compactly,
CSR-like (rows sorted by user then item, one offset per user that has rows), and gives for any
batch of user ids the rows the metrics take: a sparse CSR ``(batch, num_items)`` tensor whose
stored values are the grades (:meth:`Interactions.csr`) or padded id lists
(:meth:`Interactions.item_ids`), without a dense ``(batch, num_items)`` tensor.

:class:`IdMap` maps original ids (strings, or integers that are not dense) to dense ids
``0..n-1``; one map shared by the test, training and run tables keeps their ids in agreement.
"""

from __future__ import annotations

import warnings
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch

from .._core.input_checks import InputWarning
from .._core.item_sets import MAX_NUM_ITEMS
from ..inputs import ItemIds
from ._arrow import TextIndex, arrow_of, kept, numpy_of, plain_text

DUPLICATE_RULES = ("error", "max", "sum")
# the usual names of a grade column (read_interactions reads the first a table has)
VALUE_COLUMNS = ("value", "rating", "relevance", "rel", "grade", "label")


# --- columns ---------------------------------------------------------------------------------
def _is_arrow(values: Any) -> bool:
    return type(values).__module__.startswith("pyarrow") and hasattr(values, "type")


def column(name: str, values: Any) -> Any:
    """``values`` as a 1-D numpy array, or as a pyarrow array when it is one (kept for fast string
    lookups). Accepts torch tensors, numpy arrays, sequences, pandas/polars Series, pyarrow arrays."""
    if isinstance(values, torch.Tensor):
        if values.layout != torch.strided:
            raise TypeError(f"{name} must be a dense tensor, got layout {values.layout}")
        values = values.detach().cpu().numpy()
    elif _is_arrow(values):
        if hasattr(values, "combine_chunks"):
            values = values.combine_chunks()
        if values.null_count:
            raise ValueError(f"{name} must not hold missing values (null), got {values.null_count}")
        return plain_text(values)
    elif type(values).__module__.startswith("polars"):
        values = values.to_numpy()
    elif hasattr(values, "to_numpy") and not isinstance(values, np.ndarray):  # pandas
        values = values.to_numpy()
    array = array_as_given(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one entry per interaction), got shape {array.shape}")
    return array


def array_as_given(values: Any) -> np.ndarray:
    """``np.asarray(values)``, except that a list or tuple holding text beside other values (a
    number, None, NaN) is an object array of them as given, where numpy would make all of them
    text (1 read as "1", None as "None"): the caller then names the odd value."""
    array = np.asarray(values)
    if array.dtype.kind in "US" and isinstance(values, (list, tuple)):
        if not all(isinstance(value, (str, bytes)) for value in values):
            return np.asarray(values, dtype=object)
    return array


def id_kind(name: str, values: Any) -> str:
    """ "int" or "str" for an id column; a TypeError naming ``name`` otherwise."""
    if _is_arrow(values):
        import pyarrow as pa

        kind = values.type
        if pa.types.is_dictionary(kind):
            kind = kind.value_type
        if pa.types.is_integer(kind):
            check_int64_range(name, values)
            return "int"
        if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
            return "str"
        raise TypeError(f"{name} must hold integer or string ids, got arrow type {values.type}")
    if values.dtype.kind in "iu":
        check_int64_range(name, values)
        return "int"
    if values.dtype.kind in "US":
        return "str"
    if values.dtype.kind == "O":
        if len(values) and not all(isinstance(value, str) for value in values):
            missing = next(((row, value) for row, value in enumerate(values) if _is_missing(value)), None)
            if missing is not None:  # named before another kind: pandas makes a column with one object
                raise TypeError(f"{name} must not hold missing values, got {missing[1]!r} at row {missing[0]}")
            odd = next(value for value in values if not isinstance(value, str))
            raise TypeError(
                f"{name} must hold integer or string ids, got a {type(odd).__name__} ({odd!r}) among objects"
            )
        return "str"
    hint = " (a column with missing values is float: drop those rows first)" if values.dtype.kind == "f" else ""
    raise TypeError(f"{name} must hold integer or string ids, got dtype {values.dtype}{hint}")


def _to_numpy(values: Any) -> np.ndarray:
    if _is_arrow(values):
        import pyarrow as pa

        if pa.types.is_dictionary(values.type):
            values = values.dictionary_decode()
        return numpy_of(values)
    return values


# grades given in a narrower float keep it in the targets: the relevance threshold is compared in
# the labels' dtype (a float32 grade 0.7 meets the threshold 0.7, as float32 labels do)
_NARROW_GRADES = {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16}


def _grades(values: Any, count: int) -> tuple:
    """(the grades of ``count`` interactions as float64 numpy, the torch dtype the targets give
    them: bfloat16, float32 or float16 where given so, else float64); a TypeError or ValueError for values
    that are not numbers, of another length, NaN or infinite. bfloat16 tensors (no numpy dtype)
    are read through their exact float32 values and keep their dtype in the targets."""
    if isinstance(values, torch.Tensor) and values.dtype == torch.bfloat16:
        return _grades(values.float(), count)[0], torch.bfloat16
    values = _to_numpy(column("values", values))
    if values.dtype.kind not in "biuf":
        raise TypeError(f"values must be numbers (the grades), got dtype {values.dtype}")
    dtype = _NARROW_GRADES.get(values.dtype, torch.float64)
    values = values.astype(np.float64)
    if len(values) != count:
        raise ValueError(f"values must have one entry per interaction, got {len(values)} for {count} interactions")
    if not np.isfinite(values).all():
        row = int(np.argmax(~np.isfinite(values)))
        raise ValueError(f"values must be finite grades, got {values[row]} at row {row}")
    return values, dtype


def _is_missing(value: Any) -> bool:
    """Whether an object is a missing value: None, a float NaN, pandas' NA or NaT."""
    return (
        value is None or (isinstance(value, float) and value != value) or type(value).__name__ in ("NAType", "NaTType")
    )


_INT64_MAX = np.iinfo(np.int64).max


def beyond_int64(values: Any) -> Optional[tuple]:
    """(row, id) of the first integer id of ``values`` (numpy or pyarrow, a dictionary too) past
    int64's range, or None: only unsigned 64-bit ids can be."""
    if _is_arrow(values):
        import pyarrow as pa
        import pyarrow.compute as pc

        base = values.type.value_type if pa.types.is_dictionary(values.type) else values.type
        if base != pa.uint64() or not len(values):
            return None
        values = values.dictionary_decode() if pa.types.is_dictionary(values.type) else values
        if (pc.max(values).as_py() or 0) <= _INT64_MAX:
            return None
        values = numpy_of(values, null=0)
    if values.dtype != np.uint64 or not values.size or values.max() <= _INT64_MAX:
        return None
    row = int(np.argmax(values > _INT64_MAX))
    return row, int(values[row])


# what to do with integer ids that int64 cannot hold
INT64_HINT = "integer ids are read as int64; give such ids as strings, e.g. the column cast to string"


def check_int64_range(name: str, values: Any) -> None:
    """A ValueError naming ``name``, the row and the id of the first integer id past int64's range
    (a uint64 hash of 2**63 or more), which int64 ids would wrap around to a negative one."""
    found = beyond_int64(values)
    if found is not None:
        raise ValueError(f"{name}: id {found[1]} at row {found[0]} does not fit in int64 ({INT64_HINT})")


def _check_int_ids(name: str, values: np.ndarray, negative: bool = False) -> np.ndarray:
    """int64 ids, each >= 0 unless ``negative`` (a ValueError naming the first bad row otherwise)."""
    check_int64_range(name, values)
    values = values.astype(np.int64, copy=False)
    if not negative and values.size and values.min() < 0:
        row = int(np.argmax(values < 0))
        raise ValueError(
            f"{name} must be non-negative integer ids, got {values[row]} at row {row} "
            "(map the ids with an IdMap or use string ids)"
        )
    return values


# --- id maps ---------------------------------------------------------------------------------
class IdMap:
    """Original ids (strings or integers) to dense ids ``0..len(map)-1`` and back.

    Dense id ``i`` stands for ``map.ids[i]``. :meth:`from_values` gives the distinct values in
    sorted order; :meth:`encode` with ``add=True`` appends ids it has not seen (the numbers of the
    others never change), so one map passed to several :class:`Interactions` (``item_map=``)
    gives every table the same numbers.

    >>> from ignite_recsys.data import IdMap
    >>> items, codes = IdMap.from_values(["b", "a", "b"])
    >>> list(items.ids), codes.tolist()
    (['a', 'b'], [1, 0, 1])
    >>> items.encode(["c", "a"]).tolist(), items.encode(["c"], add=True).tolist(), len(items)
    ([-1, 0], [2], 3)
    """

    def __init__(self, ids: Any = (), *, _distinct: bool = False):
        values = column("IdMap ids", ids)
        self.kind = id_kind("IdMap ids", values) if len(values) else None
        # made by a reader or from_frame for ids it mapped on its own (not given by the user): a
        # model callable cannot know those dense ids when the originals are integers
        self.derived = False
        self._lookup: Optional[tuple] = None  # (sorted keys, their dense ids), built on use
        self._arrow: Any = None  # the keys as a pyarrow array (kept from an Arrow column, or built on use)
        self._numpy: Optional[np.ndarray] = None  # the keys as numpy (built on use from Arrow ones)
        self._sorted: Optional[tuple] = None  # (the Arrow keys sorted, their dense ids), built on use
        self._index: Any = None  # text keys: their TextIndex (False where two keys share a hash), built on use
        if _distinct and _is_arrow(values) and len(values):  # a reader's: numpy only when asked
            self._arrow = _arrow_keys(values, self.kind)
            return
        keys = _to_numpy(values)
        self._keys = keys.astype(object) if self.kind == "str" else keys.astype(np.int64)
        if not _distinct and len(np.unique(self._keys)) != len(self._keys):
            raise ValueError("IdMap ids must be distinct")

    @property
    def _keys(self) -> np.ndarray:
        if self._numpy is None:
            keys = numpy_of(self._arrow)
            self._numpy = keys.astype(object) if self.kind == "str" else keys.astype(np.int64)
        return self._numpy

    @_keys.setter
    def _keys(self, keys: np.ndarray) -> None:
        self._numpy, self._arrow, self._lookup, self._sorted, self._index = keys, None, None, None, None

    @classmethod
    def derived_map(cls) -> "IdMap":
        """An empty map that a table fills with its own ids (``derived``: not the user's numbering)."""
        id_map = cls()
        id_map.derived = True
        return id_map

    @classmethod
    def from_values(cls, values: Any, name: str = "ids") -> tuple:
        """(map of the distinct values in sorted order, each value's dense id as int64 numpy)."""
        values = column(name, values)
        kind = id_kind(name, values)
        if _is_arrow(values):
            import pyarrow as pa
            import pyarrow.compute as pc

            # one hash pass gives the distinct values and each row's index among them; their sort
            # order renumbers the rows
            if pa.types.is_dictionary(values.type):  # (its dictionary may hold unused or repeated values)
                values = values.dictionary_decode()
            encoded = pc.dictionary_encode(values)
            order = numpy_of(pc.sort_indices(encoded.dictionary)).astype(np.int64)
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order), dtype=np.int64)
            codes = rank[numpy_of(encoded.indices).astype(np.int64)]
            result = cls(encoded.dictionary.take(arrow_of(order)), _distinct=True)
            return result, codes
        values = values.astype(object) if kind == "str" else values
        unique, codes = np.unique(values, return_inverse=True)
        return cls(unique, _distinct=True), codes.reshape(-1).astype(np.int64)

    @property
    def ids(self) -> np.ndarray:
        """The original ids, indexed by dense id (numpy: object array of str, or int64)."""
        return self._keys

    def __len__(self) -> int:
        return len(self._arrow) if self._numpy is None else len(self._numpy)

    def __repr__(self) -> str:
        return f"IdMap({len(self)} {self.kind or 'no'} ids)"

    def decode(self, dense: Any) -> np.ndarray:
        """The original ids of dense ids."""
        dense = dense.cpu().numpy() if isinstance(dense, torch.Tensor) else np.asarray(dense)
        return self._keys[dense]

    def encode(self, values: Any, *, add: bool = False, name: str = "ids") -> np.ndarray:
        """Dense ids (int64 numpy) of ``values``; an id the map does not hold gets ``-1``, or with
        ``add=True`` a new dense id (appended to the map)."""
        values = column(name, values)
        kind = id_kind(name, values) if len(values) else self.kind
        if self.kind is None:
            self.kind = kind
            self._keys = self._keys.astype(object if kind == "str" else np.int64)
        if kind != self.kind:
            raise TypeError(f"{name} are {kind} ids but the id map holds {self.kind} ids")
        if kind == "int" and not _is_arrow(values):
            values = _check_int_ids(name, values, negative=True)
        if _is_arrow(values):
            codes = self._encode_arrow(values)
        else:
            codes = self._encode_numpy(values.astype(object) if kind == "str" else values.astype(np.int64))
        if add and (codes < 0).any():
            self._add(values, codes < 0)
            codes = self.encode(values, name=name)
        return codes

    def encode_among(self, values: Any, among: np.ndarray) -> np.ndarray:
        """Dense ids (int64 numpy) of the values of a pyarrow array, looked up only among the
        distinct dense ids ``among``: any other value gets -1, even one the map holds. A hash set of
        ``among`` alone is built (exact: Arrow compares the ids themselves), so a few thousand ids
        are found in a chunk without reading a map of millions."""
        import pyarrow.compute as pc

        if self.kind is None:
            return np.full(len(values), -1, dtype=np.int64)
        keys = self._arrow_view()
        if values.type != keys.type:  # large_string text, or integers of another width
            values = _arrow_keys(values, self.kind)
        among = np.asarray(among, dtype=np.int64)
        found = numpy_of(pc.index_in(values, value_set=keys.take(arrow_of(among))), null=-1).astype(np.int64)
        return np.where(found >= 0, among[np.maximum(found, 0)], -1) if len(among) else found

    def _arrow_view(self) -> Any:
        """The keys as a pyarrow array (built once from numpy ones)."""
        import pyarrow as pa

        if self._arrow is None and self.kind == "int":
            self._arrow = arrow_of(self._keys)
        elif self._arrow is None:
            self._arrow = pa.array(self._keys.tolist(), type=pa.string())
        return self._arrow

    def _add(self, values: Any, missing: np.ndarray) -> None:
        """Append the distinct ``values[missing]``, sorted, to the map."""
        if _is_arrow(values) and (self._numpy is None or not len(self._numpy)):  # stays in Arrow
            import pyarrow as pa
            import pyarrow.compute as pc

            new = pc.unique(_arrow_keys(kept(values, missing), self.kind))
            new = new.take(pc.sort_indices(new))
            keys = new if self._numpy is not None else pa.concat_arrays([self._arrow, new])
            self._numpy, self._arrow, self._lookup, self._sorted, self._index = None, keys, None, None, None
            return
        others = _to_numpy(values)[missing] if _is_arrow(values) else values[missing]
        new = np.unique(others.astype(object) if self.kind == "str" else others)
        self._keys = np.concatenate([self._keys, new.astype(self._keys.dtype)])

    def _encode_numpy(self, values: np.ndarray) -> np.ndarray:
        if self._lookup is None:
            order = np.argsort(self._keys, kind="stable")
            self._lookup = (self._keys[order], order.astype(np.int64))
        keys, dense = self._lookup
        if not len(keys):
            return np.full(len(values), -1, dtype=np.int64)
        position = np.searchsorted(keys, values).clip(max=len(keys) - 1)
        found = keys[position] == values
        return np.where(found, dense[position], -1).astype(np.int64)

    def _encode_arrow(self, values: Any) -> np.ndarray:
        import pyarrow as pa
        import pyarrow.compute as pc

        self._arrow_view()
        if pa.types.is_dictionary(values.type):  # look up each distinct value once
            codes = self._encode_arrow(values.dictionary)
            return codes[numpy_of(values.indices)] if len(values) else codes[:0]
        if self.kind == "str" and not pa.types.is_string(values.type):
            values = values.cast(pa.string())
        if self.kind == "int" and values.type != pa.int64():
            values = values.cast(pa.int64())
        if self.kind == "str":  # one hash table of the keys, kept across calls
            if self._index is None:
                self._index = TextIndex.of(self._arrow) or False
            if self._index is not False:
                return self._index.find(values)
        if len(self._arrow) <= 4 * len(values):  # a hash set of the keys, built for this call
            return numpy_of(pc.index_in(values, value_set=self._arrow), null=-1).astype(np.int64)
        # few values against many keys: a binary search in the keys sorted once
        if self._sorted is None:
            order = pc.sort_indices(self._arrow)
            self._sorted = (self._arrow.take(order), numpy_of(order).astype(np.int64))
        keys, dense = self._sorted
        if not len(keys):
            return np.full(len(values), -1, dtype=np.int64)
        position = np.minimum(numpy_of(pc.search_sorted(keys, values), null=0).astype(np.int64), len(keys) - 1)
        found = numpy_of(pc.equal(keys.take(arrow_of(position)), values), null=False)
        return np.where(found, dense[position], -1)


def _arrow_keys(values: Any, kind: Optional[str]) -> Any:
    """An Arrow id column as plain ``string`` or ``int64`` values (dictionaries decoded)."""
    import pyarrow as pa

    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    wanted = pa.string() if kind == "str" else pa.int64()
    return values if values.type == wanted else values.cast(wanted)


# --- interactions ----------------------------------------------------------------------------
class Interactions:
    r"""(user, item[, value]) rows, stored once and served per batch of users.

    Args:
        users, items: one entry per interaction: torch tensors, numpy arrays, sequences, pandas or
            polars Series, pyarrow arrays. Integer ids of any integer dtype are used as they are
            (dense ids, each >= 0); strings are mapped to dense ids by an :class:`IdMap` (sorted
            order), kept as ``user_map`` / ``item_map``. (:meth:`from_frame` maps integer ids
            too.)
        values: the grade of each interaction (default: 1 for every one), stored as float64;
            NaN and infinite grades are refused.
        num_items: the catalog size; default ``len(item_map)`` when the items are mapped (read
            when used, so a shared map that grows counts its new items), else the largest item
            id + 1.
        user_map, item_map: an :class:`IdMap` to use (and extend with ids it does not hold) for
            the users or the items, e.g. ``item_map=test.item_map`` so that a training table
            and the test table number items alike. Integer ids then go through the map too.
        duplicates: what a (user, item) pair given more than once does: ``"error"`` (default, a
            ValueError naming the pair and its rows), ``"max"`` (keep the highest value, e.g. a
            training history with repeated clicks) or ``"sum"`` (add the values).

    The rows are sorted by user and then item, with one offset per user (CSR-like): memory is
    16 bytes per user (its id and offset) and 8 (16 with values) per interaction.

    >>> import torch
    >>> from ignite_recsys import Interactions
    >>> test = Interactions(torch.tensor([3, 0, 0, 1]), torch.tensor([2, 4, 1, 0]), num_items=5)
    >>> test.item_ids(torch.tensor([3, 0])).ids
    tensor([[ 2, -1],
            [ 1,  4]])
    >>> test.csr(torch.tensor([3, 2])).to_dense()
    tensor([[0., 0., 1., 0., 0.],
            [0., 0., 0., 0., 0.]], dtype=torch.float64)
    """

    def __init__(
        self,
        users: Any,
        items: Any,
        values: Any = None,
        num_items: Optional[int] = None,
        *,
        user_map: Optional[IdMap] = None,
        item_map: Optional[IdMap] = None,
        duplicates: str = "error",
    ):
        if duplicates not in DUPLICATE_RULES:
            raise ValueError(f"duplicates must be one of {list(DUPLICATE_RULES)}, got {duplicates!r}")
        for name, given in (("user_map", user_map), ("item_map", item_map)):
            if given is not None and not isinstance(given, IdMap):
                raise TypeError(f"{name} must be an IdMap or None, got {type(given).__name__}")
        if num_items is not None and (
            isinstance(num_items, bool) or not isinstance(num_items, (int, np.integer)) or num_items < 1
        ):
            raise ValueError(f"num_items must be a positive int or None, got {num_items!r}")
        if num_items is not None and num_items > MAX_NUM_ITEMS:
            raise ValueError(f"num_items must be at most 2**32 (the widest catalog the metrics rank), got {num_items}")
        user_column, item_column = column("users", users), column("items", items)
        if len(user_column) != len(item_column):
            raise ValueError(
                f"users and items must have one entry per interaction, got {len(user_column)} and {len(item_column)}"
            )
        self.user_map, user_codes = self._codes("users", user_column, user_map)
        self.item_map, item_codes = self._codes("items", item_column, item_map)
        values, self._grade_dtype = (None, torch.float64) if values is None else _grades(values, len(user_codes))
        if len(item_codes) and max(user_codes.max(), item_codes.max()) < 1 << 31:
            order = np.argsort((user_codes << 32) | item_codes, kind="stable")  # one key: faster than lexsort
        else:
            order = np.lexsort((item_codes, user_codes))
        user_codes, item_codes = user_codes[order], item_codes[order]
        values = values[order] if values is not None else None
        repeated = (user_codes[1:] == user_codes[:-1]) & (item_codes[1:] == item_codes[:-1])
        if repeated.any():
            if duplicates == "error":
                at = int(np.argmax(repeated))
                rows = sorted(order[np.flatnonzero((user_codes == user_codes[at]) & (item_codes == item_codes[at]))])
                raise DuplicateInteractionError(
                    f"(user {self._original(self.user_map, user_codes[at])!r}, item "
                    f"{self._original(self.item_map, item_codes[at])!r}) is given more than once, at rows "
                    f"{[int(row) for row in rows[:5]]}; pass duplicates='max' or 'sum' to merge repeated pairs",
                    rows=[int(row) for row in rows],
                )
            first = np.concatenate([[True], ~repeated])
            group = np.cumsum(first) - 1
            if values is not None:
                merged = np.zeros(int(group[-1]) + 1)
                if duplicates == "sum":
                    np.add.at(merged, group, values)
                else:
                    merged[:] = -np.inf
                    np.maximum.at(merged, group, values)
                values = merged
            user_codes, item_codes = user_codes[first], item_codes[first]
        self._explicit_num_items = None if num_items is None else int(num_items)
        if len(item_codes) and item_codes.max() >= MAX_NUM_ITEMS:
            raise ValueError(
                f"items: item id {int(item_codes.max())} is 2**32 or more, past the widest catalog the metrics "
                "rank; number the items densely (an item_map, or from_frame with map_ids=True)"
            )
        if num_items is not None and len(item_codes) and item_codes.max() >= num_items:
            raise ValueError(f"items must be below num_items={num_items}, got item id {int(item_codes.max())}")
        starts = (
            np.flatnonzero(np.concatenate([[True], user_codes[1:] != user_codes[:-1]]))
            if len(user_codes)
            else np.zeros(0, dtype=np.int64)
        )
        self._users = torch.from_numpy(user_codes[starts].astype(np.int64))
        self._offsets = torch.from_numpy(np.append(starts, len(user_codes)).astype(np.int64))
        self._items = torch.from_numpy(item_codes.astype(np.int64))
        self._values = None if values is None else torch.from_numpy(values.astype(np.float64))
        self._max_item = int(item_codes.max()) if len(item_codes) else -1

    @staticmethod
    def _codes(name: str, values: Any, given: Optional[IdMap]) -> tuple:
        kind = id_kind(name, values) if len(values) else (given.kind if given is not None else "int")
        if given is not None:
            return given, given.encode(values, add=True, name=name)
        if kind == "str":
            return IdMap.from_values(values, name)
        return None, _check_int_ids(name, _to_numpy(values))

    @staticmethod
    def _original(id_map: Optional[IdMap], code: int) -> Any:
        if id_map is None:
            return int(code)
        original = id_map.ids[int(code)]
        return original.item() if hasattr(original, "item") else original

    @classmethod
    def from_frame(
        cls,
        frame: Any,
        user: str = "user",
        item: str = "item",
        value: Optional[str] = None,
        num_items: Optional[int] = None,
        *,
        map_ids: Optional[bool] = None,
        **options: Any,
    ) -> "Interactions":
        """The interactions of a data frame's ``user`` and ``item`` columns (and ``value``, the
        grades): a pandas or polars DataFrame, a pyarrow Table, or a mapping of column name to
        array. ``options`` are those of the constructor (``user_map``, ``item_map``,
        ``duplicates``). A frame with a column of a usual grade name (``value``, ``rating``,
        ``relevance``, ``rel``, ``grade``, ``label``) and no ``value`` warns
        (:class:`~ignite_recsys.InputWarning`): :func:`~ignite_recsys.data.read_interactions`
        reads such a column of the same table as grades.

        The ids of a frame are external ids, as RecTools and LensKit take them: strings and
        integers alike are mapped to dense ids by an :class:`IdMap` (sorted order), kept as
        ``user_map`` / ``item_map``; ``num_items`` is then the number of distinct items, or the
        catalog given. ``map_ids=False`` keeps integer ids as they are (dense ids, each >= 0;
        strings are still mapped); the default (None) maps every column except torch tensors,
        which hold dense ids. A model's scores follow the maps: column ``j`` of
        ``scores(users)`` is item ``item_map.ids[j]``; :func:`~ignite_recsys.evaluate` with a model
        refuses a table whose integer ids it mapped on its own (unless they were already
        ``0..n-1``): pass ``map_ids=False`` for a model that indexes the original ids.

        >>> import pandas as pd
        >>> from ignite_recsys import Interactions
        >>> frame = pd.DataFrame({"user": ["ann", "bob", "ann"], "item": ["x", "y", "z"]})
        >>> test = Interactions.from_frame(frame)
        >>> list(test.user_map.ids), list(test.item_map.ids), test.num_items
        (['ann', 'bob'], ['x', 'y', 'z'], 3)
        >>> test = Interactions.from_frame(pd.DataFrame({"user": [7, 7, 9], "item": [5000, 5007, 7093]}))
        >>> test.item_map.ids.tolist(), test.num_items, test.item_ids(test.users).ids.tolist()
        ([5000, 5007, 7093], 3, [[0, 1], [2, -1]])
        """
        if map_ids is not None and not isinstance(map_ids, bool):
            raise TypeError(f"map_ids must be True, False or None, got {map_ids!r}")
        columns = frame_columns(frame, [user, item] + ([value] if value is not None else []), "frame")
        available = frame_column_names(frame)
        grades = [name for name in VALUE_COLUMNS if name in available and name not in (user, item)]
        if value is None and grades:  # read_interactions reads such a column of the same table as grades
            warnings.warn(
                f"Interactions.from_frame: the frame's column {grades[0]!r} is not read, and no value=: every row "
                f"counts as a relevant interaction of grade 1 (value={grades[0]!r} reads grades from it, as "
                "read_interactions does for a table with that column)",
                InputWarning,
                stacklevel=2,
            )
        for role, name in (("user_map", user), ("item_map", item)):
            mapped = map_ids if map_ids is not None else not isinstance(columns[name], torch.Tensor)
            if mapped and options.get(role) is None:
                options[role] = IdMap.derived_map()  # filled with the column's distinct ids, in sorted order
        return cls(
            columns[user], columns[item], columns.get(value) if value is not None else None, num_items, **options
        )

    # --- what it holds -----------------------------------------------------------------------
    @property
    def num_items(self) -> int:
        """The catalog size: ``num_items`` if given, else ``len(item_map)``, else the largest
        item id + 1."""
        if self._explicit_num_items is not None:
            return self._explicit_num_items
        if self.item_map is not None:
            return len(self.item_map)
        return self._max_item + 1

    @property
    def users(self) -> torch.Tensor:
        """The dense ids of the users with at least one interaction, ascending (int64)."""
        return self._users

    @property
    def has_values(self) -> bool:
        """Whether grades were given (else every interaction has grade 1)."""
        return self._values is not None

    def pairs(self) -> tuple:
        """Every interaction as ``(users, items, grades)``: int64 numpy dense ids, user by user,
        and the float grades (None when none were given); read-only views of the table's own arrays
        but ``users``.

        >>> Interactions([3, 1, 3], [0, 2, 1], [5.0, 1.0, 4.0]).pairs()
        (array([1, 3, 3]), array([2, 0, 1]), array([1., 5., 4.]))
        """
        users = np.repeat(self._users.numpy(), np.diff(self._offsets.numpy()))
        items, grades = self._items.numpy().view(), None if self._values is None else self._values.numpy().view()
        for own in (items, grades):
            if own is not None:
                own.flags.writeable = False  # the table's arrays: changed, they would corrupt it
        return users, items, grades

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return (
            f"Interactions({len(self)} rows, {len(self._users)} users, num_items={self.num_items}"
            f"{', graded' if self.has_values else ''})"
        )

    def original_users(self, users: Any) -> Any:
        """The original ids of dense user ids (a tensor of them back when the users are not mapped)."""
        if self.user_map is None:
            return users
        return self.user_map.decode(users)

    def user_ids(self, original: Any) -> torch.Tensor:
        """Dense user ids of original ids (strings through ``user_map``); unknown ids raise. A
        table without a user map numbers its users by their integer ids themselves: those must be
        integers (a TypeError for floats, bools, text) of users of the table."""
        if self.user_map is None:
            values = column("users", original)
            if not len(values):  # no ids (an empty list reads as float64): none to look up
                return torch.zeros(0, dtype=torch.int64)
            if id_kind("users", values) != "int":
                raise TypeError("users: the table numbers its users by integer ids (it has no user map), got text ids")
            dense = _check_int_ids("users", numpy_of(values) if _is_arrow(values) else values, negative=True)
            unknown = ~np.isin(dense, self._users.numpy())
            if unknown.any():
                raise ValueError(f"users: {dense[unknown][:5].tolist()} are not users of the table")
            return torch.from_numpy(np.array(dense, dtype=np.int64))
        codes = self.user_map.encode(original, name="users")
        if (codes < 0).any():
            raise ValueError(f"users: {column('users', original)[codes < 0][:5].tolist()} are not in the user map")
        return torch.from_numpy(codes)

    # --- per batch ---------------------------------------------------------------------------
    def _rows(self, users: Any) -> tuple:
        """(row pointers (batch + 1,), flat row indices, lengths), int64 numpy, of ``users`` (dense ids)."""
        if isinstance(users, torch.Tensor):
            if users.ndim != 1 or users.dtype not in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
                raise TypeError(
                    f"users must be a 1-D integer tensor of dense user ids, got {users.dtype} of shape "
                    f"{tuple(users.shape)}"
                )
            users = users.detach().cpu().numpy()
        users = np.asarray(users)
        if users.ndim != 1 or (users.size and users.dtype.kind not in "iu"):
            raise TypeError(f"users must be 1-D integer dense user ids, got {users.dtype} of shape {users.shape}")
        users = users.astype(np.int64, copy=False)
        known, offsets = self._users.numpy(), self._offsets.numpy()
        if len(known):
            position = np.searchsorted(known, users).clip(max=len(known) - 1)
            found = known[position] == users
            start = offsets[position]
            lengths = np.where(found, offsets[position + 1] - start, 0)
        else:
            start = lengths = np.zeros(len(users), dtype=np.int64)
        pointers = np.zeros(len(users) + 1, dtype=np.int64)
        np.cumsum(lengths, out=pointers[1:])
        flat = np.repeat(start - pointers[:-1], lengths) + np.arange(pointers[-1], dtype=np.int64)
        return pointers, flat, lengths

    def items_of(self, users: Any) -> np.ndarray:
        """The dense item ids of the interactions of ``users`` (dense ids), int64 numpy, user by user."""
        return self._items.numpy()[self._rows(users)[1]]

    def counts(self, users: Any) -> torch.Tensor:
        """The number of interactions of each of ``users`` (int64)."""
        return torch.from_numpy(self._rows(users)[2])

    def csr(
        self,
        users: Any,
        *,
        grades: bool = True,
        num_items: Optional[int] = None,
        device: Union[str, torch.device, None] = None,
    ) -> torch.Tensor:
        """The interactions of ``users`` (dense ids, any order, repeats allowed; a user without
        interactions gets an empty row) as a sparse CSR ``(len(users), num_items)`` float64 tensor
        whose stored values are the grades (``grades=False``: 1 for each, as an exclusion wants)."""
        pointers, flat, _ = self._rows(users)
        width = self.num_items if num_items is None else int(num_items)
        if self._max_item >= width:
            raise ValueError(f"num_items={width} is too small for item id {self._max_item} of these interactions")
        values = (
            torch.from_numpy(self._values.numpy()[flat]).to(self._grade_dtype)
            if grades and self._values is not None
            else torch.ones(len(flat), dtype=torch.float64)
        )
        pointers, items = torch.from_numpy(pointers), torch.from_numpy(self._items.numpy()[flat])
        with warnings.catch_warnings():  # PyTorch's one-time notice that sparse CSR support is in beta
            warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta", UserWarning)
            matrix = torch.sparse_csr_tensor(
                pointers, items, values, size=(len(pointers) - 1, width), check_invariants=False
            )
        return matrix.to(device) if device is not None else matrix

    def item_ids(
        self,
        users: Any,
        *,
        grades: bool = True,
        device: Union[str, torch.device, None] = None,
        width: Optional[int] = None,
    ) -> ItemIds:
        """The interactions of ``users`` as :class:`~ignite_recsys.ItemIds`: each row a user's items
        ascending, padded with ``-1`` to the longest row (or ``width``), with the grades."""
        pointers, flat, lengths = self._rows(users)
        longest = int(lengths.max()) if len(lengths) else 0
        width = max(longest, 1) if width is None else max(int(width), longest, 1)
        cells = np.repeat(np.arange(len(lengths), dtype=np.int64) * width - pointers[:-1], lengths) + np.arange(
            len(flat), dtype=np.int64
        )  # row * width + position in the row
        ids = np.full(len(lengths) * width, -1, dtype=np.int64)
        ids[cells] = self._items.numpy()[flat]
        values = np.zeros(len(lengths) * width)
        values[cells] = self._values.numpy()[flat] if grades and self._values is not None else 1.0
        id_rows = torch.from_numpy(ids.reshape(len(lengths), width))
        grade_rows = torch.from_numpy(values.reshape(len(lengths), width))
        if grades and self._values is not None:
            grade_rows = grade_rows.to(self._grade_dtype)
        if device is not None:
            id_rows, grade_rows = id_rows.to(device), grade_rows.to(device)
        return ItemIds(id_rows, grade_rows)


def user_batches(users: torch.Tensor, size: int) -> tuple:
    """``users`` in batches of ``size``; none where there is no user (``split`` of an empty tensor
    gives one empty batch, which the metrics refuse: a process of a distributed evaluation may
    hold no test user)."""
    return users.split(size) if len(users) else ()


class DuplicateInteractionError(ValueError):
    """A (user, item) pair given more than once; ``rows`` are its row numbers (0-based)."""

    def __init__(self, message: str, rows: Sequence[int] = ()):
        super().__init__(message)
        self.rows = list(rows)


def frame_column_names(frame: Any, what: str = "frame") -> list:
    """The column names of a pandas/polars DataFrame, a pyarrow Table or a mapping (a TypeError
    for anything else)."""
    module = type(frame).__module__
    if isinstance(frame, dict):
        return list(frame)
    if module.startswith("pyarrow"):
        return list(frame.column_names)
    if module.startswith("polars") or module.startswith("pandas"):
        return [str(name) for name in frame.columns]
    raise TypeError(
        f"{what} must be a pandas or polars DataFrame, a pyarrow Table or a dict of columns, got {type(frame).__name__}"
    )


def frame_columns(frame: Any, names: Sequence[str], what: str) -> dict:
    """{name: column} of a pandas/polars DataFrame, a pyarrow Table or a mapping; a KeyError-free
    ValueError listing the columns when one is missing."""
    available = frame_column_names(frame, what)
    get = frame.column if type(frame).__module__.startswith("pyarrow") else frame.__getitem__
    missing = [name for name in names if name not in available]
    if missing:
        raise ValueError(f"{what} has no column {missing[0]!r}; its columns are {available}")
    problem = repeated_column(what, names, available)
    if problem:
        raise ValueError(problem)
    return {name: get(name) for name in names}


def repeated_column(what: str, read: Sequence[str], columns: Sequence[str]) -> Optional[str]:
    """The error message for a table (``what``) whose header names a column it reads (``read``)
    more than once (``columns``: every name of the header), or None."""
    repeated = [name for name in dict.fromkeys(read) if list(columns).count(name) > 1]
    if not repeated:
        return None
    return (
        f"{what} names the column {repeated[0]!r} {list(columns).count(repeated[0])} times (its columns are "
        f"{list(columns)}): which one holds the values is a guess; give each column its own name"
    )
