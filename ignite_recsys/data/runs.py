"""A run (user, item, score rows) streamed as each user's ranked item list, chunk by chunk.

A :class:`RunStream` reads the rows of one user together (users may come in any order; a
user's rows in any order): a user whose rows are split raises a :class:`SplitUserError`, and
:func:`grouped_chunks` then groups the whole run in memory. Each user's rows are ranked by score, descending; equal
scores are ordered by the tie rule:

- ``"docid"`` (default): the larger item id first, compared as text as trec_eval compares
  document ids (integer columns too: 9 before 10);
- ``"order"``: the row that comes first in the run first.

Items the test table does not know are ranked like the others (they are never relevant). A user
that ranks an item twice, a NaN score, or a score that is not a number raises a FileFormatError.
"""

from __future__ import annotations

import os
from typing import Any, Iterator, NamedTuple, Optional, Sequence

import numpy as np

from ._arrow import arrow_of, kept, numpy_of, plain_text, text_hashes
from ._optional import require
from .files import (
    CANONICAL_INTEGER,
    ITEM_COLUMNS,
    SCORE_COLUMNS,
    TREC_RUN_FIELDS,
    USER_COLUMNS,
    FileFormatError,
    _check_integer_text,
    _is_text,
    file_format,
    ids_of,
    numbers_of,
    table_chunks,
    table_columns,
    trec_chunks,
)
from .interactions import Interactions, array_as_given, frame_columns

RUN_TIES = ("docid", "order")
RUN_COLUMNS = (USER_COLUMNS, ITEM_COLUMNS, SCORE_COLUMNS)  # the usual names of a run table's columns
SCORE_PRECISIONS = ("float64", "float32")


class SplitUserError(FileFormatError):
    """A user's rows start again after other users' rows (a run read as a stream needs them
    contiguous; :func:`grouped_chunks` groups them)."""


class Chunks:
    """A run's chunks: ``(first line, user array, item array, score array)`` with where to point
    errors: ``source`` (the file or "run"), ``unit`` ("line" or "row") and the column labels."""

    def __init__(self, chunks: Iterator[tuple], source: str, unit: str, labels: dict, typed: bool = False):
        self.chunks, self.source, self.unit, self.labels = chunks, source, unit, labels
        self.typed = typed  # ids from typed (non-text) columns: tie order by value
        # the chunks as user_pieces, where a caller prepares them (on a thread of its own); None: the
        # RunStream cuts them itself
        self.pieces: Optional[Iterator[Piece]] = None


def run_file_chunks(path: Any, format: Optional[str] = None, names: Optional[dict] = None) -> Chunks:
    """The chunks of a TREC run file or a parquet/CSV run table (user, item, score columns;
    ``names``: ``{"user": ..., "item": ..., "score": ...}``, each missing role the usual name)."""
    kind = file_format(path, format)
    names = names or {}
    if kind == "trec":
        chunks = (
            (line, columns["qid"], columns["docid"], columns["score"])
            # parsed without Arrow's threads: a run is read on a thread beside the metrics
            for line, columns in trec_chunks(
                path, TREC_RUN_FIELDS, ("qid", "docid", "score"), threads=False, numbers=("score",)
            )
        )
        return Chunks(chunks, os.fspath(path), "line", {"user": "1 (qid)", "item": "3 (docid)", "score": "5 (score)"})
    chosen = table_columns(
        path,
        kind,
        {role: (names.get(role), usual) for role, usual in zip(("user", "item", "score"), RUN_COLUMNS)},
        "the run table",
    )
    order = [chosen["user"], chosen["item"], chosen["score"]]
    chunks = (
        (first, columns[order[0]], columns[order[1]], columns[order[2]])
        for first, columns in table_chunks(path, kind, order, ids=order[:2])
    )
    return Chunks(
        chunks,
        os.fspath(path),
        "row" if kind == "parquet" else "line",
        {"user": order[0], "item": order[1], "score": order[2]},
        typed=kind == "parquet",
    )


def run_chunks(run: Any, columns: Optional[Any] = None, format: Optional[str] = None) -> Chunks:
    """The chunks of a run given as a file path (:func:`run_file_chunks`) or an in-memory table
    (:func:`run_frame_chunks`); ``columns``: (user, item, score) names, None entries for the usual."""
    if columns is not None and (isinstance(columns, str) or len(columns) != 3):
        raise ValueError(f"run_columns must be (user, item, score) column names, got {columns!r}")
    names = {role: name for role, name in zip(("user", "item", "score"), columns or ()) if name is not None}
    if isinstance(run, (str, os.PathLike)):
        return run_file_chunks(run, format, names)
    return run_frame_chunks(run, names.get("user", "user"), names.get("item", "item"), names.get("score", "score"))


def run_frame_chunks(
    frame: Any, user: str = "user", item: str = "item", score: str = "score", rows_per_chunk: int = 1 << 20
) -> Chunks:
    """The chunks of an in-memory run table (pandas/polars DataFrame, pyarrow Table, dict of
    columns). Its rows need not be grouped by user: they are put in user order first (stable)."""
    columns = frame_columns(frame, [user, item, score], "run")
    arrays = [_arrow(columns[name], name) for name in (user, item, score)]
    if len({len(array) for array in arrays}) != 1:
        raise ValueError("run columns must have the same length")
    rows = np.arange(len(arrays[0]), dtype=np.int64)
    chunks, _ = _grouped(arrays, rows, rows_per_chunk)
    return Chunks(chunks, "run", "row", {"user": user, "item": item, "score": score}, typed=True)


def grouped_chunks(chunks: Chunks, rows_per_chunk: int = 1 << 20) -> Chunks:
    """``chunks`` read whole and put in user order (stable: each user's rows keep their order),
    for a run whose users' rows are not contiguous. Memory: the run's columns twice (as Arrow
    holds them: the text of a TREC file plus 4 bytes a field) and 16 bytes a row."""
    parts: list = [[], [], [], []]
    for chunk in chunks.chunks:
        first, users, items, scores = chunk[:4]
        for part, array in zip(parts, (users, items, scores)):
            part.append(array)
        parts[3].append(chunk[4] if len(chunk) > 4 else np.arange(first, first + len(users), dtype=np.int64))
    if not parts[3]:
        return Chunks(iter(()), chunks.source, chunks.unit, chunks.labels, chunks.typed)
    arrays = [_joined(*part) for part in parts[:3]]
    grouped, _ = _grouped(arrays, np.concatenate(parts[3]), rows_per_chunk)
    return Chunks(grouped, chunks.source, chunks.unit, chunks.labels, chunks.typed)


def _grouped(arrays: list, lines: np.ndarray, rows_per_chunk: int) -> tuple:
    """(chunks of ``(first line, users, items, scores, lines)`` with each user's rows together, in
    the order of their first row's user code; whether rows had to move)."""
    pc = require("pyarrow.compute", "evaluating a run table")
    users = numpy_of(pc.dictionary_encode(arrays[0]).indices)
    starts = np.flatnonzero(np.concatenate([[True], users[1:] != users[:-1]])) if len(users) else users
    moved = len(np.unique(users[starts])) != len(starts)
    if moved:  # not grouped by user: group them
        order = np.argsort(users, kind="stable")
        arrays = [array.take(arrow_of(order)) for array in arrays]
        lines = lines[order]

    def chunks() -> Iterator[tuple]:
        for start in range(0, len(users), rows_per_chunk):
            stop = start + rows_per_chunk
            yield (int(lines[start]), *[array.slice(start, rows_per_chunk) for array in arrays], lines[start:stop])

    return chunks(), moved


def _arrow(values: Any, name: str) -> Any:
    """A run column as one pyarrow array; a missing value (null, None, NaN in a text column) is
    refused with its row (0-based, as the frame's positions) and column."""
    pa = require("pyarrow", "evaluating a run table")
    module = type(values).__module__
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        array = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    elif module.startswith("polars"):
        array = values.to_arrow()
        array = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
    else:
        if hasattr(values, "detach"):
            values = values.detach().cpu().numpy()
        from_pandas = module.startswith("pandas")  # pandas' missing values: None and NaN
        if from_pandas:
            values = values.to_numpy()
        values = array_as_given(values) if not isinstance(values, np.ndarray) else values
        try:
            array = pa.array(values, from_pandas=from_pandas or values.dtype == object)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            raise TypeError(f"run column {name!r} must hold ids or numbers of one type, got {error}") from None
    if array.null_count:
        row = int(np.argmax(numpy_of(array.is_null())))
        raise FileFormatError(
            "run", row, name, "a missing value (null): every row needs a user, an item and a score", "row"
        )
    if pa.types.is_dictionary(array.type):
        pc = require("pyarrow.compute", "evaluating a run table")
        if len(pc.unique(array.dictionary)) != len(array.dictionary):  # one id under two codes: decoded
            array = array.dictionary_decode()
    return plain_text(array)


class RunStream:
    """Each test user's ranked item list from a run's chunks, for the users a process keeps.

    Iterating yields ``(positions, items, lengths)`` numpy int64 arrays: the users' positions in
    ``test.users``, their ranked items concatenated (dense ids, best first; unknown items get ids
    from ``unknown_base`` up) and each list's length. Afterwards ``seen`` marks the test users the
    run ranked, ``rows`` counts the rows read and ``rows_outside`` those of users not in the test
    table (not evaluated); ``items_of_test_users`` the rows of test users and ``held_items`` those
    among them whose item the test table (or a ``match_only`` table) holds: where none does, no
    ranked item can match a test item (item ids of another spelling?).

    ``match_only``: tables (the test table, an exclusion table, numbered by the test table's item
    map) whose items alone need their dense ids. A chunk's items are then looked up only among the
    items these tables hold for the chunk's users, and every other item gets an id from
    ``unknown_base`` up (the same id for the same item in the chunk), as an unknown item does: exact
    for metrics that read an item's id only to match it against those tables, and fast against a
    catalog of millions of text ids. Empty (default): each item gets its id in the test table's map."""

    def __init__(
        self,
        chunks: Chunks,
        test: Interactions,
        *,
        ties: str = "docid",
        keep: Optional[np.ndarray] = None,
        unknown_base: Optional[int] = None,
        score_precision: str = "float64",
        match_only: Sequence[Interactions] = (),
    ):
        if ties not in RUN_TIES:
            raise ValueError(f"run_ties must be one of {list(RUN_TIES)}, got {ties!r}")
        if score_precision not in SCORE_PRECISIONS:
            raise ValueError(f"score_precision must be one of {list(SCORE_PRECISIONS)}, got {score_precision!r}")
        self.chunks, self.test, self.ties = chunks, test, ties
        self.float32 = score_precision == "float32"
        self.keep = keep  # (num test users,) bool: the users this process evaluates (None: all)
        self.seen = np.zeros(len(test.users), dtype=bool)
        self.unknown_base = test.num_items if unknown_base is None else unknown_base
        self.rows = self.rows_outside = 0
        self.items_of_test_users = self.held_items = 0
        self.match_only = tuple(match_only)
        self._test_users = test.users.numpy()

    def _error(self, line: int, role: Optional[str], message: str) -> FileFormatError:
        return _line_error(self.chunks, line, role, message)

    def __iter__(self) -> Iterator[tuple]:
        pieces = self.chunks.pieces if self.chunks.pieces is not None else user_pieces(self.chunks)
        try:
            for piece in pieces:
                yield from self._lists(piece)
        finally:  # the pieces' reader stops with the lists (a generator, or a thread reading ahead)
            close = getattr(pieces, "close", None)
            if close is not None:
                close()

    def _lists(self, piece: "Piece") -> Iterator[tuple]:
        items, lines, starts, segment_users, dictionary = piece[:5]
        self.rows += len(items)
        segment_lengths = np.diff(np.append(starts, len(items)))
        position_of = self._positions(dictionary, segment_users, lines[starts])
        if piece.split_error is not None:
            raise piece.split_error
        segment_positions = position_of[segment_users]
        known = segment_positions >= 0
        repeated = known & self.seen[np.where(known, segment_positions, 0)]
        if repeated.any():
            again = int(np.argmax(repeated))
            user = dictionary[int(segment_users[again])]
            raise _split_error(self.chunks, int(lines[starts[again]]), user)
        self.seen[segment_positions[known]] = True
        if piece.score_error is not None:
            raise piece.score_error
        score_values = piece.score_values
        if self.float32:  # as trec_eval stores a run's scores: equal in float32, tied
            with np.errstate(over="ignore"):  # beyond float32's range: inf, as trec_eval
                score_values = score_values.astype(np.float32).astype(np.float64)
        item_codes, identity = self._items(items, lines, self._test_users[segment_positions[known]], piece.hashes)
        row_positions = np.repeat(segment_positions, segment_lengths)
        self.rows_outside += int((row_positions < 0).sum())
        kept = row_positions >= 0  # the rows of test users: every process counts them all, as it reads them all
        self.items_of_test_users += int(np.count_nonzero(kept))
        self.held_items += int(np.count_nonzero(item_codes[kept] < self.unknown_base))
        if self.keep is not None:
            kept &= self.keep[np.where(kept, row_positions, 0)]
        if not kept.any():
            return
        segment = np.repeat(np.arange(len(starts), dtype=np.int64), segment_lengths)[kept]
        rows = np.flatnonzero(kept)  # the kept rows' indices in the chunk
        item_codes = item_codes[kept]
        score_values, kept_lines, row_positions = score_values[kept], lines[kept], row_positions[kept]
        twice = _repeated_item(segment, item_codes, None if identity is None else (identity[kept], items, rows))
        if twice is not None:
            earlier, later = sorted((int(kept_lines[twice[0]]), int(kept_lines[twice[1]])))
            item = _show(items[int(rows[twice[0]])])
            raise self._error(later, "item", f"the user ranks item {item} twice (also at {self.chunks.unit} {earlier})")
        same_user = segment[1:] == segment[:-1]
        descending = score_values[1:] <= score_values[:-1]
        tied = same_user & (score_values[1:] == score_values[:-1])
        in_order = bool((descending | ~same_user).all())
        if in_order and not tied.any():
            order = None  # already ranked (a run written in rank order): no sort
        else:
            order = np.arange(len(segment)) if in_order else np.lexsort((-score_values, segment))
            if self.ties == "docid":
                order = self._docid_order(order, segment, score_values, items, rows)
        if order is None:
            starts = np.flatnonzero(np.concatenate([[True], ~same_user]))
            lengths = np.diff(np.append(starts, len(segment)))
            yield row_positions[starts], item_codes, lengths
            return
        segment = segment[order]
        starts = np.flatnonzero(np.concatenate([[True], segment[1:] != segment[:-1]]))
        lengths = np.diff(np.append(starts, len(segment)))
        yield row_positions[order][starts], item_codes[order], lengths

    @staticmethod
    def _docid_order(order: np.ndarray, segment: np.ndarray, scores: np.ndarray, items: Any, rows: np.ndarray) -> Any:
        """``order`` (by user, then score descending) with equal scores by item id, descending:
        only the tied rows' ids are ranked as text."""
        ranked_segment, ranked_scores = segment[order], scores[order]
        tie = (ranked_segment[1:] == ranked_segment[:-1]) & (ranked_scores[1:] == ranked_scores[:-1])
        if not tie.any():
            return order
        involved = np.zeros(len(order), dtype=bool)
        involved[:-1] |= tie
        involved[1:] |= tie
        tied_rows = order[involved]
        text_rank = np.zeros(len(segment), dtype=np.int64)  # decides only among equal scores
        text_rank[tied_rows] = _sort_rank(items.take(arrow_of(rows[tied_rows])))
        return np.lexsort((-text_rank, -scores, segment))

    def _positions(self, dictionary: Any, entries: np.ndarray, lines: np.ndarray) -> np.ndarray:
        """Each distinct user's position in test.users, -1 when the test table does not hold it;
        ``entries``: each run of one user's entry in ``dictionary``, ``lines``: its first line."""
        test = self.test
        if (
            test.user_map is not None
            and (test.user_map.kind != "int" or _is_text(dictionary))
            and not _is_float(dictionary)
        ):
            # a text id that does not read as an integer is a user the integer map does not hold
            codes = _codes_in(test.user_map, dictionary, "run users")
        else:  # integer ids without a map (or float ids, refused): a bad id is an error naming its line
            codes = self._int_ids(dictionary, entries, lines, "user")
            if test.user_map is not None:
                codes = test.user_map.encode(codes, name="run users")
        position = np.searchsorted(self._test_users, codes).clip(max=max(len(self._test_users) - 1, 0))
        if not len(self._test_users):
            return np.full(len(codes), -1, dtype=np.int64)
        return np.where((codes >= 0) & (self._test_users[position] == codes), position, -1)

    def _dense_ids(self, ids: Any, role: str) -> np.ndarray:
        """int64 ids of a run's id column read as integers (against a table of integer ids): a
        FileFormatError at the entry of a bad id, and of a text id not written as an integer the
        one way (``07`` or ``+7`` would be read as 7, another id)."""
        source, label, unit = self.chunks.source, self.chunks.labels[role], self.chunks.unit
        mapped = (self.test.user_map if role == "user" else self.test.item_map) is not None  # -1 may be an id
        values = numpy_of(ids_of(source, ids, 0, label, "int", unit, negative=mapped))
        if _is_text(ids) and _leading_zero(ids):  # read as integers: only a leading 0 makes another spelling
            _check_integer_text(source, ids, 0, label, role, unit)
        return values

    def _int_ids(self, dictionary: Any, index: np.ndarray, lines: np.ndarray, role: str) -> np.ndarray:
        """int64 ids of a dictionary of ids (text parsed); errors point at the first line using a bad
        entry (``index``: the entry of each of ``lines``, in file order)."""
        try:
            return self._dense_ids(dictionary, role)
        except FileFormatError as error:
            bad = error.line  # the dictionary entry
            row = int(np.argmax(index == bad))
            message = str(error).split(": ", 1)[1]
            raise self._error(int(lines[row]), role, message) from None

    def _items(self, items: Any, lines: np.ndarray, users: np.ndarray, hashes: Optional[np.ndarray]) -> tuple:
        """(the dense item id of each row, None or each row's text hash: ``hashes`` when given,
        else computed where needed). An item the test table
        does not know (with ``match_only``: that those tables do not hold for ``users``, the
        chunk's test users) gets an id from ``unknown_base`` up that no other item of its list
        has: one per row where the text hashes are given (they then tell the items apart), else
        the same id for the same item in this chunk."""
        pa = require("pyarrow", "reading a run")
        pc = require("pyarrow.compute", "reading a run")
        test = self.test
        # float ids are refused there, naming the line, whatever the map (as text 123456789012.0 is 1.23456789012e+11)
        if test.item_map is None or (test.item_map.kind == "int" and not _is_text(items)) or _is_float(items):
            try:
                ids = self._dense_ids(items, "item")
            except FileFormatError as error:
                message = str(error).split(": ", 1)[1]
                raise self._error(int(lines[error.line]), "item", message) from None
            if test.item_map is None:
                return ids, None
            codes = test.item_map.encode(ids, name="run items")
            unknown = codes < 0
            if unknown.any():  # the same id for the same unknown item
                codes[unknown] = self.unknown_base + np.unique(ids[unknown], return_inverse=True)[1].reshape(-1)
            return codes, None
        held = None
        if self.match_only and test.item_map.kind is not None:
            held = np.sort(np.concatenate([table.items_of(users) for table in self.match_only]))
            held = held[np.concatenate([[True], held[1:] != held[:-1]])] if len(held) else held
        if held is not None and test.item_map.kind == "str" and items.type == pa.string():
            # text ids against a text map: every row looked up among the few thousand held ids, the
            # others numbered by row; a polynomial hash of the text tells items apart where needed
            codes = test.item_map.encode_among(items, held)
            unknown = codes < 0
            codes[unknown] = self.unknown_base + np.flatnonzero(unknown)
            return codes, text_hashes(items) if hashes is None else hashes
        # each distinct id of the chunk looked up once (as text: distinct texts stay distinct items,
        # "07" and "Z" included against an integer map); the unknown ones numbered in order of first row
        encoded = items if pa.types.is_dictionary(items.type) else pc.dictionary_encode(items)
        codes = _codes_in(test.item_map, encoded.dictionary, "run items", held)
        unknown = codes < 0
        codes[unknown] = self.unknown_base + np.arange(int(unknown.sum()), dtype=np.int64)
        return codes[numpy_of(encoded.indices)], None


def _leading_zero(texts: Any) -> bool:
    """Whether a text column of integers holds one written with a leading zero (``07``, ``-0``,
    ``00``): two cheap passes, where a regular expression over every id costs about 60 ns each."""
    pa = require("pyarrow", "reading a run")
    pc = require("pyarrow.compute", "reading a run")
    texts = texts.dictionary_decode() if pa.types.is_dictionary(texts.type) else texts
    zero_first = pc.and_(pc.starts_with(texts, "0"), pc.greater(pc.binary_length(texts), 1))
    return bool(pc.any(pc.or_(zero_first, pc.starts_with(texts, "-0"))).as_py())


def _is_float(ids: Any) -> bool:
    """Whether a run's id column holds floats (refused: their text is not the id a user wrote)."""
    pa = require("pyarrow", "reading a run")
    return pa.types.is_floating(ids.type.value_type if pa.types.is_dictionary(ids.type) else ids.type)


def _codes_in(id_map: Any, ids: Any, name: str, among: Optional[np.ndarray] = None) -> np.ndarray:
    """Dense ids in ``id_map`` of the distinct run ``ids`` (looked up only among the dense ids
    ``among`` when given: ``IdMap.encode_among``), -1 for an id the map does not hold; against an
    integer map, a text that does not read as an integer written the one way holds none."""
    values, readable = _as_kind(ids, id_map.kind)
    codes = id_map.encode(values, name=name) if among is None else id_map.encode_among(values, among)
    if readable is not None:
        codes[~readable] = -1
    return codes


def _as_kind(dictionary: Any, kind: Optional[str]) -> tuple:
    """(run ids as the id map's kind, which of them read as such): text for a text map, integers
    for an integer map, where a text that does not read as an integer is given a placeholder and
    marked False (None: every id reads)."""
    pa = require("pyarrow", "reading a run")
    pc = require("pyarrow.compute", "reading a run")
    is_text = pa.types.is_string(dictionary.type) or pa.types.is_large_string(dictionary.type)
    if kind == "str" and not is_text:
        return dictionary.cast(pa.string()), None
    if kind == "int" and is_text:
        integer = numpy_of(pc.match_substring_regex(dictionary, CANONICAL_INTEGER))
        long = np.flatnonzero(integer & (numpy_of(pc.utf8_length(dictionary)) > 18))
        for entry in long:  # past int64 (20 digits): an id no integer map holds
            integer[entry] = -(2**63) <= int(dictionary[int(entry)].as_py()) < 2**63
        ids = np.zeros(len(dictionary), dtype=np.int64)
        ids[integer] = numpy_of(kept(dictionary, integer).cast(pa.int64()))
        return arrow_of(ids), integer
    return dictionary, None


class Piece(NamedTuple):
    """The rows of whole users of a run, with what reading them needs no test table for."""

    items: Any  # pyarrow array of the rows' item ids
    lines: np.ndarray  # each row's line (or row) in the run
    starts: np.ndarray  # the first row of each run of one user
    runs: np.ndarray  # each run's user, as its entry in ``dictionary``
    dictionary: Any  # the distinct users
    score_values: np.ndarray  # float64 as read; empty on an error
    hashes: Optional[np.ndarray]  # the items' text hashes, for text items
    split_error: Optional[FileFormatError]  # a user with two runs of rows in the piece
    score_error: Optional[FileFormatError]  # a score that is not a number


def user_pieces(chunks: Chunks) -> Iterator[Piece]:
    """The rows of ``chunks`` cut where users change (the last user of a chunk waits for the
    next one, where its rows may go on), each with its runs of users, its scores as numbers and
    its items' text hashes: the work that needs no test table, which evaluate() does on the
    parser's thread. An error found here is kept in the piece, for the RunStream to raise where
    its checks of the piece's rows reach it."""
    try:
        carry = None
        for chunk in chunks.chunks:
            first, users, items, scores = chunk[:4]
            rows = chunk[4] if len(chunk) > 4 else None
            lines = np.arange(first, first + len(users)) if rows is None else rows
            if carry is not None:
                users, items, scores = (_joined(old, new) for old, new in zip(carry[:3], (users, items, scores)))
                lines = np.concatenate([carry[3], lines])
                carry = None
            if len(users) == 0:
                continue
            starts = _run_starts(users)
            tail = int(starts[-1])  # the last user may go on in the next chunk
            carry = (users.slice(tail), items.slice(tail), scores.slice(tail), lines[tail:])
            if tail > 0:
                head = (users.slice(0, tail), items.slice(0, tail), scores.slice(0, tail), lines[:tail])
                yield _piece(chunks, *head, starts[:-1])
        if carry is not None:
            yield _piece(chunks, *carry, np.zeros(1, dtype=np.int64))
    finally:  # the chunks' reader stops with the pieces (a generator, or a thread parsing ahead)
        close = getattr(chunks.chunks, "close", None)
        if close is not None:
            close()


def _joined(*arrays: Any) -> Any:
    """pyarrow arrays as one; scores read as numbers joined to a chunk's read as text (one that
    holds a value that is not a number) as text: their shortest round-trip form."""
    pa = require("pyarrow", "reading a run")
    if len(arrays) == 1:
        return arrays[0]
    if len({array.type for array in arrays}) > 1:
        arrays = tuple(array.cast(pa.string()) if pa.types.is_floating(array.type) else array for array in arrays)
    return pa.concat_arrays(arrays)


def _piece(chunks: Chunks, users: Any, items: Any, scores: Any, lines: np.ndarray, starts: np.ndarray) -> Piece:
    pa = require("pyarrow", "reading a run")
    pc = require("pyarrow.compute", "reading a run")
    encoded = pc.dictionary_encode(users.take(arrow_of(starts)))  # a hash table of the runs' ids only
    runs, dictionary = numpy_of(encoded.indices).astype(np.int64), encoded.dictionary
    split_error = None
    ordered = np.sort(runs)  # (np.unique would import numpy.ma on first use: 35 ms)
    if (ordered[1:] == ordered[:-1]).any():
        again = _first_repeat(runs)
        split_error = _split_error(chunks, int(lines[starts[again]]), dictionary[int(runs[again])])
    score_values, score_error = np.zeros(0), None
    try:
        score_values = numbers_of(chunks.source, scores, 0, chunks.labels["score"], "score", chunks.unit)
    except FileFormatError as error:
        score_error = _line_error(chunks, int(lines[error.line]), "score", str(error).split(": ", 1)[1])
    hashes = text_hashes(items) if items.type == pa.string() else None
    return Piece(items, lines, starts, runs, dictionary, score_values, hashes, split_error, score_error)


def _run_starts(users: Any) -> np.ndarray:
    """The first row of each run of equal ids of a pyarrow array (not empty): one comparison of
    neighbouring ids."""
    pc = require("pyarrow.compute", "reading a run")
    count = len(users)
    change = numpy_of(pc.not_equal(users.slice(1), users.slice(0, count - 1))) if count > 1 else np.zeros(0, bool)
    return np.flatnonzero(np.concatenate([[True], change]))


def _split_error(chunks: Chunks, line: int, user: Any) -> FileFormatError:
    return SplitUserError(
        chunks.source,
        line,
        chunks.labels.get("user"),
        f"the rows of user {_show(user)} are not contiguous: they start again here after other users' rows",
        chunks.unit,
    )


def _line_error(chunks: Chunks, line: int, role: Optional[str], message: str) -> FileFormatError:
    return FileFormatError(chunks.source, line, chunks.labels.get(role) if role else None, message, chunks.unit)


_SEGMENT_MIX = np.uint64(0x9E3779B97F4A7C15)


def _repeated_item(segment: np.ndarray, codes: np.ndarray, hashed: Optional[tuple] = None) -> Optional[tuple]:
    """The two rows (indices into ``segment``) of the first item a user ranks twice (the pair
    whose later row comes first), or None: one sort of (user run, item) keys.

    ``codes`` identify the items, unless ``hashed`` = (text hashes of the rows, the item text
    array, each row's index in it) is given: then equal keys are checked on the text."""
    if hashed is None:
        if len(codes) and codes.max() >= 1 << 31:  # ids too large to pack with the segment
            keys = np.unique(np.stack([segment, codes], 1), axis=0, return_inverse=True)[1].reshape(-1)
        else:
            keys = (segment << 32) | codes
    else:
        with np.errstate(over="ignore"):
            keys = hashed[0] + segment.astype(np.uint64) * _SEGMENT_MIX
    ordered = np.sort(keys)
    if not (ordered[1:] == ordered[:-1]).any():
        return None
    by_key = np.argsort(keys, kind="stable")
    pairs = np.flatnonzero(keys[by_key][1:] == keys[by_key][:-1])
    first, second = by_key[pairs], by_key[pairs + 1]
    if hashed is not None:  # equal hashes: the same user and the same text?
        pc = require("pyarrow.compute", "reading a run")
        _, text, rows = hashed
        same_text = pc.equal(text.take(arrow_of(rows[first])), text.take(arrow_of(rows[second])))
        same = (segment[first] == segment[second]) & numpy_of(same_text, null=False)
        first, second = first[same], second[same]
        if not len(first):
            return None
    at = int(np.argmin(np.maximum(first, second)))
    return int(first[at]), int(second[at])


def _first_repeat(values: np.ndarray) -> int:
    seen: set = set()
    for index, value in enumerate(values.tolist()):
        if value in seen:
            return index
        seen.add(value)
    return 0


def _sort_rank(items: Any) -> np.ndarray:
    """Each row's rank in ascending order of its item id as text, as trec_eval compares them
    (integer ids too: 10 before 9, whether a file's text or a typed column; equal ids share a rank)."""
    pa = require("pyarrow", "reading a run")
    pc = require("pyarrow.compute", "reading a run")
    if pa.types.is_dictionary(items.type):
        items = items.dictionary_decode()
    if not _is_text(items):
        items = items.cast(pa.string())
    encoded = pc.dictionary_encode(items)
    order = numpy_of(pc.sort_indices(encoded.dictionary))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[numpy_of(encoded.indices)]


def _show(value: Any) -> str:
    value = value.as_py() if hasattr(value, "as_py") else value
    return repr(value)
