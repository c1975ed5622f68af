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


_PRIME = np.uint64(0x100000001B3)  # odd: invertible modulo 2**64
_PRIME_INVERSE = np.uint64(0xCE965057AFF6957B)  # _PRIME * _PRIME_INVERSE == 1 modulo 2**64
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_HASH_BYTES = 1 << 16  # bytes of text hashed per pass: the pass's temporaries fit in the cache
_POWERS: list = []  # [PRIME**j, PRIME**-j for j < _HASH_BYTES], computed on first use


def _powers(size: int) -> tuple:
    """PRIME**j and PRIME**-j modulo 2**64 for j < ``size``."""
    if size > _HASH_BYTES or not _POWERS:
        with np.errstate(over="ignore"):
            tables = []
            for base in (_PRIME, _PRIME_INVERSE):
                table = np.full(max(size, _HASH_BYTES), base, dtype=np.uint64)
                table[0] = 1
                tables.append(np.cumprod(table, out=table))
        if size > _HASH_BYTES:  # one value longer than a pass: its own tables
            return tables[0][:size], tables[1][:size]
        _POWERS[:] = tables
    return _POWERS[0][:size], _POWERS[1][:size]


def text_hashes(array: Any) -> np.ndarray:
    """A 64-bit polynomial hash of each value of a pyarrow ``string`` array (no nulls): equal
    texts hash alike; different texts rarely do (a caller that needs exactness compares the texts)."""
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=len(array) + 1, offset=array.offset * 4)
    offsets = offsets.astype(np.int64)
    text = np.frombuffer(array.buffers()[2], dtype=np.uint8) if len(array) and offsets[-1] > offsets[0] else None
    hashes = np.empty(len(array), dtype=np.uint64)
    start = 0
    while start < len(array):  # rows in passes of about _HASH_BYTES of text
        stop = max(int(np.searchsorted(offsets, offsets[start] + _HASH_BYTES, "right")) - 1, start + 1)
        stop = min(stop, len(array))
        hashes[start:stop] = _polynomial(text, offsets[start : stop + 1])
        start = stop
    return hashes


def _polynomial(text: Optional[np.ndarray], offsets: np.ndarray) -> np.ndarray:
    """sum((byte_j + 1) * PRIME**j) + length * GOLDEN of each value (j from 0 at its first byte),
    modulo 2**64: prefix sums of the text's terms, moved to each value's start by an inverse power."""
    first, lengths = offsets[:-1] - offsets[0], np.diff(offsets)
    size = int(offsets[-1] - offsets[0])
    with np.errstate(over="ignore"):
        mixed = lengths.astype(np.uint64) * _GOLDEN
        if size == 0 or text is None:
            return mixed
        powers, inverse = _powers(size)
        prefix = np.zeros(size + 1, dtype=np.uint64)
        terms = text[offsets[0] : offsets[-1]].astype(np.uint64)
        terms += np.uint64(1)
        terms *= powers
        np.cumsum(terms, out=prefix[1:])
        shift = inverse[np.minimum(first, size - 1)]
        return (prefix[first + lengths] - prefix[first]) * shift + mixed


class TextIndex:
    """A hash table of distinct texts (a pyarrow ``string`` array), built once and kept: the
    position of each looked-up text in it, or -1; exact (candidates are compared as text).
    ``TextIndex.of(keys)`` is None when two keys share a hash (then use another lookup)."""

    def __init__(self, keys: Any, hashes: np.ndarray):
        self.keys = keys
        self.bits = max(int(2 * len(keys)).bit_length(), 4)  # 2 to 4 slots a key
        bucket = (hashes >> np.uint64(64 - self.bits)).astype(np.int64)
        self.order = np.argsort(bucket, kind="stable")
        self.hashes = hashes[self.order]
        counts = np.bincount(bucket, minlength=1 << self.bits)
        self.starts = (np.cumsum(counts) - counts).astype(np.int64)
        self.counts = counts.astype(np.int64)
        self.depth = int(counts.max()) if len(counts) else 0

    @classmethod
    def of(cls, keys: Any) -> Optional["TextIndex"]:
        hashes = text_hashes(keys)
        ordered = np.sort(hashes)
        if len(ordered) > 1 and (ordered[1:] == ordered[:-1]).any():
            return None
        return cls(keys, hashes)

    def find(self, values: Any) -> np.ndarray:
        """The key position of each text of ``values`` (a pyarrow ``string`` array), -1 if absent."""
        pc = require("pyarrow.compute", "reading files")
        wanted = text_hashes(values)
        bucket = (wanted >> np.uint64(64 - self.bits)).astype(np.int64)
        starts, counts = self.starts[bucket], self.counts[bucket]
        found = np.full(len(values), -1, dtype=np.int64)
        for step in range(self.depth):  # the bucket's slots, one at a time for every value
            slot = np.where(step < counts, starts + step, 0)
            hit = (step < counts) & (self.hashes[slot] == wanted)
            found[hit] = self.order[slot[hit]]
        if not len(found) or not len(self.keys):
            return found
        candidates = self.keys.take(arrow_of(np.maximum(found, 0)))
        same = numpy_of(pc.equal(candidates, values), null=False)
        return np.where((found >= 0) & same, found, -1)
