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


# text hashes: each value read as 8-byte little-endian words (the last one cut to the value's
# bytes), folded in by multiply-xorshift steps (splitmix64's constants)
_LENGTH_MIX = np.uint64(0x9E3779B97F4A7C15)
_WORD_MIX = np.uint64(0xBF58476D1CE4E5B9)
_FINAL_MIX = np.uint64(0x94D049BB133111EB)
_LOW_BYTES = np.array([(1 << (8 * count)) - 1 for count in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


def text_hashes(array: Any) -> np.ndarray:
    """A 64-bit hash of each value of a pyarrow ``string`` array (no nulls): equal texts hash
    alike; different texts rarely do (a caller that needs exactness compares the texts).

    One gather of 8 bytes a row per word of the longest values (the rows still that long), so
    short ids cost two or three passes of numpy over the rows."""
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=len(array) + 1, offset=array.offset * 4)
    offsets = offsets.astype(np.int64)
    lengths = np.diff(offsets)
    low, high = (int(offsets[0]), int(offsets[-1])) if len(array) else (0, 0)
    text = np.zeros(high - low + 8, dtype=np.uint8)  # 8 bytes past the end: every word can be read
    if high > low:
        text[: high - low] = np.frombuffer(array.buffers()[2], dtype=np.uint8, count=high - low, offset=low)
    words = np.ndarray((high - low + 1,), dtype="<u8", buffer=text, strides=(1,))  # the word at each byte
    starts = offsets[:-1] - low
    hashes = lengths.astype(np.uint64) * _LENGTH_MIX
    rows: Optional[np.ndarray] = None  # the rows longer than ``done`` bytes (None: all)
    done = 0
    while True:
        at, left = (starts, lengths) if rows is None else (starts[rows] + done, lengths[rows] - done)
        word = words[at] & _LOW_BYTES[np.minimum(left, 8)]
        mixed = hashes if rows is None else hashes[rows]
        mixed ^= word
        mixed *= _WORD_MIX
        mixed ^= mixed >> np.uint64(31)
        if rows is not None:
            hashes[rows] = mixed
        done += 8
        rows = np.flatnonzero(lengths > done) if rows is None else rows[left > 8]
        if not len(rows):
            break
    hashes ^= hashes >> np.uint64(30)
    hashes *= _FINAL_MIX
    hashes ^= hashes >> np.uint64(31)
    return hashes


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
