"""numpy <-> pyarrow for the readers, through the arrays' buffers.

pyarrow's ``Array.to_numpy``, ``pyarrow.array`` and Python scalars in ``pyarrow.compute`` calls
import pandas on their first use when it is installed (about half a second and 50 MiB): the
readers convert primitive arrays through their buffers instead, so that reading a file and
evaluating it never imports pandas.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ._optional import require


def _numpy_dtype(kind: Any) -> Optional[np.dtype]:
    pa = require("pyarrow", "reading files")
    if pa.types.is_integer(kind):
        return np.dtype(f"{'i' if pa.types.is_signed_integer(kind) else 'u'}{kind.bit_width // 8}")
    if pa.types.is_floating(kind) and kind.bit_width in (32, 64):
        return np.dtype(f"f{kind.bit_width // 8}")
    return None


def numpy_of(array: Any, null: Any = None) -> np.ndarray:
    """A writable numpy copy of a pyarrow array of integers, floats or booleans; a null becomes
    ``null`` (which must then be given). Other types go through ``Array.to_numpy``."""
    pa = require("pyarrow", "reading files")
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    kind, count, offset = array.type, len(array), array.offset
    if pa.types.is_boolean(kind):
        bits = np.frombuffer(array.buffers()[1], dtype=np.uint8)
        values: np.ndarray = np.unpackbits(bits, count=offset + count, bitorder="little")[offset:].astype(bool)
    else:
        dtype = _numpy_dtype(kind)
        if dtype is None:
            return array.to_numpy(zero_copy_only=False)
        values = np.frombuffer(array.buffers()[1], dtype=dtype, count=count, offset=offset * dtype.itemsize).copy()
    if array.null_count:
        if null is None:
            raise ValueError("numpy_of: the array holds nulls and no value was given for them")
        bits = np.frombuffer(array.buffers()[0], dtype=np.uint8)
        valid = np.unpackbits(bits, count=offset + count, bitorder="little")[offset:].astype(bool)
        values = np.where(valid, values, null).astype(values.dtype)
    return values


def arrow_of(values: np.ndarray) -> Any:
    """A pyarrow array over a numpy array of integers or floats (bools as int8 indices are not
    needed: masks are passed as the positions they keep)."""
    pa = require("pyarrow", "reading files")
    values = np.ascontiguousarray(values)
    kind = pa.from_numpy_dtype(values.dtype)
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def kept(array: Any, mask: np.ndarray) -> Any:
    """The rows of a pyarrow array where the numpy bool ``mask`` is True."""
    return array.take(arrow_of(np.flatnonzero(mask)))
