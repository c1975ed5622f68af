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


def plain_text(array: Any) -> Any:
    """``array`` with Arrow's ``string_view`` text (polars' and DuckDB's, also as a dictionary's
    values) as ``string`` (``large_string`` past 2 GiB of text): the readers' compute kernels
    (``take`` among them) have none for views. Other arrays as they are."""
    pa = require("pyarrow", "reading files")
    kind = array.type
    dictionary = pa.types.is_dictionary(kind)
    if not pa.types.is_string_view(kind.value_type if dictionary else kind):
        return array
    text = pa.string() if array.nbytes < 1 << 31 else pa.large_string()  # string: int32 offsets
    return array.cast(pa.dictionary(kind.index_type, text) if dictionary else text)


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
# bytes), each word tagged with its place, multiplied and shifted, and the words' terms added up
# (so that the words of a long value can be taken in one pass); then splitmix64's finalizer
_LENGTH_MIX = np.uint64(0x9E3779B97F4A7C15)
_PLACE_MIX = np.uint64(0xD6E8FEB86659FD93)
_WORD_MIX = np.uint64(0xBF58476D1CE4E5B9)
_FINAL_MIX = np.uint64(0x94D049BB133111EB)
_LOW_BYTES = np.array([(1 << (8 * count)) - 1 for count in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
_FEW_ROWS = 16  # values longer than the others, whose words are then taken a value at a time


def text_hashes(array: Any) -> np.ndarray:
    """A 64-bit hash of each value of a pyarrow ``string`` array (no nulls): equal texts hash
    alike; different texts rarely do (a caller that needs exactness compares the texts).

    One gather of 8 bytes a row per word of the values (the rows still that long), so short ids
    cost two or three passes of numpy over the rows; the last few long values a pass each."""
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
    first = _terms(words[starts] & _LOW_BYTES[np.minimum(lengths, 8)], np.uint64(0))
    if len(array) and lengths.min() == 0:
        first[lengths == 0] = 0  # an empty value has no word
    hashes += first
    rows = np.flatnonzero(lengths > 8)  # the values longer than 8 * place bytes
    place = 1
    while len(rows) > _FEW_ROWS:
        left = lengths[rows] - 8 * place
        word = words[starts[rows] + 8 * place] & _LOW_BYTES[np.minimum(left, 8)]
        hashes[rows] += _terms(word, np.uint64(place))
        place += 1
        rows = rows[left > 8]
    for row in rows.tolist():  # each long value's other words in one pass
        rest = int(lengths[row]) - 8 * place
        count = -(-rest // 8)
        word = words[starts[row] + 8 * np.arange(place, place + count)]
        word[-1] &= _LOW_BYTES[rest - 8 * (count - 1)]
        hashes[row : row + 1] += _terms(word, np.arange(place, place + count, dtype=np.uint64)).sum(dtype=np.uint64)
    hashes ^= hashes >> np.uint64(30)
    hashes *= _WORD_MIX
    hashes ^= hashes >> np.uint64(27)
    hashes *= _FINAL_MIX
    hashes ^= hashes >> np.uint64(31)
    return hashes


def _terms(words: np.ndarray, places: Any) -> np.ndarray:
    """Each word's term of its value's hash (modulo 2**64): tagged with its place, multiplied,
    its high half folded into its low half."""
    with np.errstate(over="ignore"):  # (a place given as a numpy scalar: modulo 2**64 too)
        term = words ^ (places * _PLACE_MIX)
    term *= _WORD_MIX
    term ^= term >> np.uint64(32)
    return term


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
