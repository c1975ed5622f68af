"""Readers of evaluation files, through Arrow's readers (``pyarrow.csv``, ``pyarrow.parquet``).

- TREC qrels (``qid 0 docid rel``) and parquet/CSV interaction tables become an
  :class:`~ignite_recsys.Interactions` table (:func:`read_trec_qrels`, :func:`read_interactions`).
- TREC runs (``qid Q0 docid rank score tag``) and parquet/CSV run tables (user, item, score
  columns) are read in chunks of rows (:func:`run_chunks`), so that a run is evaluated in memory
  that does not grow with its number of rows.

TREC files are read as trec_eval reads them: fields separated by any run of spaces and tabs,
whitespace at the ends of a line and Windows line endings ignored; the ``Q0``, ``rank`` and
``tag`` fields are not used (trec_eval and ranx ignore them too: the score
orders the run). A malformed file raises a :class:`FileFormatError` that names the file, the line
and the column. These readers need ``pip install "ignite_recsys[files]"`` (pyarrow).
"""

from __future__ import annotations

import contextlib
import csv as csv_module
import os
import re
import stat
import warnings
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from .._core.input_checks import InputWarning
from ._arrow import arrow_of, numpy_of, plain_text
from ._optional import require
from .interactions import (
    INT64_HINT,
    VALUE_COLUMNS,
    DuplicateInteractionError,
    IdMap,
    Interactions,
    beyond_int64,
    column,
    repeated_column,
)

TREC_RUN_FIELDS = ("qid", "q0", "docid", "rank", "score", "tag")
TREC_QRELS_FIELDS = ("qid", "iteration", "docid", "rel")
USER_COLUMNS = ("user", "user_id", "userid", "qid", "query_id", "query")
ITEM_COLUMNS = ("item", "item_id", "itemid", "docid", "doc_id", "doc")
SCORE_COLUMNS = ("score", "prediction", "rating")
CANONICAL_INTEGER = r"^(0|-?[1-9][0-9]*)$"  # text read as an integer id (a negative one is then refused)
CHUNK_BYTES = 3 << 20  # bytes of text per chunk of a TREC or CSV file (evaluate() reads up to 32 ahead)
CHUNK_ROWS = 1 << 20  # rows per chunk of a parquet file


class FileFormatError(ValueError):
    """A malformed evaluation file: ``path``, ``line`` (1-based; the row for parquet files, 1-based)
    and ``column`` (1-based field number, or a column name) say where."""

    def __init__(self, path: Any, line: Optional[int], column: Any, message: str, unit: str = "line"):
        self.path, self.line, self.column = str(path), line, column
        where = [self.path]
        if line is not None:
            where.append(f"{unit} {line}")
        if column is not None:
            where.append(f"column {column}")
        super().__init__(f"{', '.join(where)}: {message}")


# the compressions Arrow's input streams detect from a file name, by suffix
CODECS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".lz4": "lz4"}


def file_format(path: Any, format: Optional[str] = None) -> str:
    """ "trec", "parquet", "csv" or "tsv": ``format`` if given, else from the file name."""
    if format is not None:
        if format not in ("trec", "parquet", "csv", "tsv"):
            raise ValueError(f"format must be one of 'trec', 'parquet', 'csv', 'tsv' or None, got {format!r}")
        return format
    name = os.fspath(path).lower()
    for suffix in CODECS:
        name = name[: -len(suffix)] if name.endswith(suffix) else name
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith(".csv"):
        return "csv"
    if name.endswith(".tsv"):
        return "tsv"
    return "trec"


@contextlib.contextmanager
def decompressing(path: Any) -> Iterator[None]:
    """Around the reads of a text file: where its name says it is compressed (``CODECS``) and its
    bytes do not decompress (plain text named ``.gz``, a download cut short), a FileFormatError
    naming the file and the codec in place of the codec's bare OSError."""
    try:
        yield
    except OSError as error:
        codec = next((name for suffix, name in CODECS.items() if os.fspath(path).lower().endswith(suffix)), None)
        if codec is None or isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError)):
            raise
        message = f"cannot be read as {codec} data, as its name says ({error}): is it compressed, and whole?"
        raise FileFormatError(path, None, None, message) from None


def _check_exists(path: Any) -> None:
    """A FileNotFoundError for a path that does not exist, an IsADirectoryError for a directory;
    any other file that can be opened is read: a regular file, a pipe or FIFO (``/dev/stdin``,
    the shell's ``<(...)``), a character device."""
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path}: is a directory, not a file")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")


def _is_stream(path: Any) -> bool:
    """Whether ``path`` is a pipe, FIFO or device rather than a regular file: it can be read once,
    from its start to its end (no seek)."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _input(path: Any) -> Any:
    """Arrow's input stream of the file ``path``, decompressed as its name says (``CODECS``); a
    pipe or FIFO through a Python file object, as Arrow's own file reader needs to seek."""
    pa = require("pyarrow", "reading files")
    if not _is_stream(path):
        return pa.input_stream(os.fspath(path), compression="detect")
    codec = next((name for suffix, name in CODECS.items() if os.fspath(path).lower().endswith(suffix)), None)
    return pa.input_stream(open(path, "rb"), compression=codec)


_STREAMED_TABLES: dict = {}  # (device, inode) of a pipe -> its bytes, between the header's read and the rows'


def _table_source(path: Any, last: bool) -> Any:
    """What Arrow's table readers open for ``path``: the path of a regular file; the whole bytes of
    a pipe or FIFO (a parquet file needs to seek, and a CSV table's header is read before its
    rows), read once and kept until the rows are read (``last``)."""
    pa = require("pyarrow", "reading tables")
    if not _is_stream(path):
        return os.fspath(path)
    info = os.stat(path)
    key = (info.st_dev, info.st_ino)
    if key not in _STREAMED_TABLES:
        with decompressing(path), _input(path) as stream:
            _STREAMED_TABLES[key] = pa.py_buffer(b"".join(iter(lambda: stream.read(1 << 20), b"")))
    data = _STREAMED_TABLES.pop(key) if last else _STREAMED_TABLES[key]
    return pa.BufferReader(data)


# --- TREC text files -------------------------------------------------------------------------
def _text_blocks(path: Any, block_size: int) -> Iterator[bytes]:
    """The blocks of whole lines of a text file (about ``block_size`` bytes each; a UTF-8
    byte-order mark at the start is dropped). Lines end in LF (a CR before it is dropped later,
    a CR elsewhere reads as a space), or, in a file whose first block holds a CR and no LF
    (classic Mac OS line ends), in CR, CRLF or LF: each then given as LF."""
    rest, first = b"", True
    old_mac: Optional[bool] = None  # whether lines end in CR: decided at the file's first line end
    with decompressing(path), _input(path) as stream:
        while True:
            data = stream.read(block_size)
            if first:
                data, first = (data[3:] if data.startswith(b"\xef\xbb\xbf") else data), False
            if not data:
                if rest:
                    yield rest + b"\n"
                return
            data = rest + data if rest else data
            if old_mac is None and b"\n" in data:
                old_mac = False
            elif old_mac is None and b"\r" in data[:-1]:  # a CR before the last byte: not the CR of a CRLF
                old_mac = True
            if old_mac:  # a CR at the end is kept for the next read, which may start with its LF
                held = b"\r" if data.endswith(b"\r") else b""
                data = data[: len(data) - len(held)].replace(b"\r\n", b"\n").replace(b"\r", b"\n") + held
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                rest = data
                continue
            block, rest = (data, b"") if cut == len(data) else (data[:cut], data[cut:])
            yield block


_SPACES = re.compile(rb" {2,}")


def _spaces_only(block: bytes) -> bytes:
    """``block`` with tabs and carriage returns as spaces (CRLF as LF): one-byte searches, cheap;
    only the blocks that hold them are rewritten."""
    if b"\r" in block:
        block = block.replace(b"\r\n", b"\n")
        if b"\r" in block:
            block = block.replace(b"\r", b" ")
    if b"\t" in block:
        block = block.replace(b"\t", b" ")
    return block


def _one_space(block: bytes) -> bytes:
    """The lines of ``_spaces_only(block)`` with their fields separated by one space: runs of
    spaces become one, and none is left at the start or end of a line."""
    if b"  " in block:
        block = _SPACES.sub(b" ", block)
    if b" \n" in block:
        block = block.replace(b" \n", b"\n")
    if b"\n " in block:
        block = block.replace(b"\n ", b"\n")
    return block[1:] if block.startswith(b" ") else block


def _irregular(block: bytes) -> bool:
    """Whether the lines of ``_spaces_only(block)`` may hold other spacing than one space between
    fields (a run of spaces, a space at the start or end of a line) or a blank line, the only ways
    to an empty field: two bytes <= 32 in a row, or one first (one pass of numpy; another control
    byte only costs a normalization that changes nothing)."""
    low = np.frombuffer(block, dtype=np.uint8) <= 32
    return bool(len(low)) and (bool(low[0]) or bool((low[1:] & low[:-1]).any()))


def trec_chunks(
    path: Any,
    fields: Sequence[str],
    keep: Sequence[str],
    block_size: Optional[int] = None,
    threads: bool = True,
    numbers: Sequence[str] = (),
) -> Iterator[tuple]:
    """(first line number, {field: pyarrow string array}) of each chunk of a TREC file; the kept
    fields named in ``numbers`` as float64 arrays where all of a chunk's values read as numbers
    (Arrow's parser, the one a cast from text uses), else as text, for the caller to name the line
    of a value that does not.

    Fields are separated by any run of spaces and tabs; spaces at the start and end of a line and
    Windows line endings are ignored (as trec_eval and pytrec_eval read them). A line without
    exactly ``len(fields)`` fields, a blank line included, raises a FileFormatError naming it.
    Each block is parsed as single-space separated (Arrow's reader), after normalizing the
    spacing of a block that has other spacing: with ``threads``, in pieces on Arrow's threads (a
    file read while nothing else runs); without, whole on the calling thread, which saves Arrow's
    hand-offs and the pieces' joining (a run parsed on a thread of its own beside the metrics)."""
    pa = require("pyarrow", "reading TREC files")
    csv = require("pyarrow.csv", "reading TREC files")
    _check_exists(path)
    parse_options = csv.ParseOptions(delimiter=" ", quote_char=False, escape_char=False, ignore_empty_lines=False)

    def converting(number: Any) -> Any:
        """The kept fields as text (UTF-8 checked; plain strings convert at twice the speed of
        dictionaries), those of ``numbers`` as ``number``; the others are counted on each line but
        not converted, as trec_eval skips them (none can be empty: the spacing is normalized
        below, so "nan" is NaN, not a missing value)."""
        return csv.ConvertOptions(
            column_types={name: number if name in numbers else pa.string() for name in keep},
            null_values=[],
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
            include_columns=list(keep),
        )

    as_numbers, as_text = converting(pa.float64()), converting(pa.string())

    def parse(block: bytes) -> Any:
        # pieces of 256 KiB parsed on Arrow's threads, or (threads=False) the whole block as one
        read_options = csv.ReadOptions(
            column_names=list(fields), use_threads=threads, block_size=1 << 18 if threads else len(block) + 1
        )

        def read(convert_options: Any) -> Any:
            return csv.read_csv(
                pa.py_buffer(block),
                read_options=read_options,
                parse_options=parse_options,
                convert_options=convert_options,
            )

        if numbers:
            try:
                return read(as_numbers)
            except pa.ArrowInvalid:  # a value that is not a number, or a malformed line: read as text
                pass
        return read(as_text)

    line = 1
    for block in _text_blocks(path, block_size or CHUNK_BYTES):
        block = _spaces_only(block)
        if _irregular(block):
            block = _one_space(block)
            if block.startswith(b"\n") or b"\n\n" in block:  # Arrow's reader reads a blank line as empty fields
                raise _first_bad_line(path, line, block, fields, keep, ValueError("a blank line"))
        try:
            table = parse(block)
        except (pa.ArrowInvalid, UnicodeDecodeError) as error:
            raise _first_bad_line(path, line, block, fields, keep, error) from None
        if table.num_rows:
            yield line, {name: _one_array(table.column(name)) for name in keep}
        line += table.num_rows  # one row a line: a blank line is refused above


def _one_array(column: Any) -> Any:
    """A pyarrow column as one array (its only chunk as it is: combine_chunks copies it)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _first_bad_line(
    path: Any, first: int, block: bytes, fields: Sequence[str], keep: Sequence[str], error: Exception
) -> FileFormatError:
    """The error for the first line of ``block`` (fields already separated by one space) that
    does not hold ``len(fields)`` fields, or whose ``keep`` fields are not UTF-8 text (the others
    are not read); this scan runs only on that error path."""
    kept_at = [fields.index(name) for name in keep]
    expected = f"{len(fields)} fields ({' '.join(fields)}) separated by spaces or tabs"
    for number, text in enumerate(block.split(b"\n")[:-1], first):
        count = len(text.split(b" ")) if text else 0
        if count == 0:
            return FileFormatError(path, number, None, f"a blank line (expected {expected})")
        if count != len(fields):
            shown = text.decode("utf-8", "replace")[:120]
            return FileFormatError(path, number, None, f"expected {expected}, got {count}: {shown!r}")
        parts = text.split(b" ")
        for at in kept_at:
            try:
                parts[at].decode("utf-8")
            except UnicodeDecodeError:
                return FileFormatError(path, number, f"{at + 1} ({fields[at]})", "is not UTF-8 text")
    return FileFormatError(path, None, None, f"cannot be read: {error}")


def _malformed_row(path: Any, row: Any, expected: str) -> FileFormatError:
    """The error for the first row Arrow's reader reported with the wrong number of fields."""
    number = row.number if row.number is not None else _line_of(path, row.text)
    return FileFormatError(path, number, None, f"expected {expected}, got {row.actual_columns}: {row.text[:120]!r}")


def _line_of(path: Any, text: str) -> Optional[int]:
    """The number of the first line that reads ``text`` (Arrow's parallel reader does not number the
    malformed rows it reports; this scan runs only on that error path)."""
    if _is_stream(path):  # a pipe, read once already
        return None
    wanted = text.encode()
    with decompressing(path), _input(path) as stream:
        for number, line in enumerate(_lines(stream), 1):
            if line.rstrip(b"\r") == wanted:
                return number
    return None


def _lines(stream: Any) -> Iterator[bytes]:
    rest = b""
    while True:
        block = stream.read(1 << 20)
        if not block:
            if rest:
                yield rest
            return
        parts = (rest + block).split(b"\n")
        rest = parts.pop()
        yield from parts


def _batches(reader: Any, path: Any) -> Iterator[Any]:
    """The record batches of a streaming reader; Arrow's parse errors name the file."""
    pa = require("pyarrow", "reading files")
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except pa.ArrowInvalid as error:
            raise FileFormatError(path, None, None, f"cannot be read: {error}") from None
        yield batch


def parse_numbers(
    path: Any, array: Any, first_line: int, column: Any, what: str, integer: bool = False, unit: str = "line"
) -> np.ndarray:
    """float64 (or int64) numpy values of a string column; a FileFormatError naming the line and
    column of the first value that is not a number (NaN refused)."""
    pa = require("pyarrow", "reading files")
    try:
        values = numpy_of(array.cast(pa.int64() if integer else pa.float64()))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        values = None
    if values is None:  # the first value Arrow does not read (only on this error path): a binary search
        low, high = 0, len(array) - 1  # the prefix up to ``high`` fails, the one before ``low`` reads
        while low < high:
            middle = (low + high) // 2
            try:
                array.slice(0, middle + 1).cast(pa.int64() if integer else pa.float64())
                low = middle + 1
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                high = middle
        text = array[low].as_py()
        kind = "a number"
        if integer:  # digits past int64's range, or another form (a '+', spaces, a point)
            digits = isinstance(text, str) and re.fullmatch("-?[0-9]+", text) is not None
            kind = "an integer within int64" if digits else "an integer"
        raise FileFormatError(path, first_line + low, column, f"{what} must be {kind}, got {text!r}", unit)
    if not integer and np.isnan(values).any():
        row = int(np.argmax(np.isnan(values)))
        raise FileFormatError(path, first_line + row, column, f"{what} must not be NaN", unit)
    return values


# --- interaction tables ----------------------------------------------------------------------
def read_trec_qrels(
    path: Any,
    *,
    user_map: Optional[IdMap] = None,
    item_map: Optional[IdMap] = None,
    duplicates: str = "error",
    num_items: Optional[int] = None,
) -> Interactions:
    """A TREC qrels file (``qid iteration docid rel``, one judgment a line) as an
    :class:`~ignite_recsys.Interactions` table: the queries are the users, the documents the items
    (string ids, mapped to dense ids: ``user_map``, ``item_map``), ``rel`` the grades (integers, as
    trec_eval reads them; 0 and negative grades are kept, and are not relevant at the default
    ``relevance_threshold=1``). A (qid, docid) judged twice raises a FileFormatError naming both
    lines unless ``duplicates`` is ``"max"`` or ``"sum"``."""
    pa = require("pyarrow", "reading TREC qrels")
    users, items, grades = [], [], []
    for line, columns in trec_chunks(path, TREC_QRELS_FIELDS, ("qid", "docid", "rel")):
        users.append(columns["qid"])
        items.append(columns["docid"])
        grades.append(parse_numbers(path, columns["rel"], line, 4, "rel", integer=True))
    if not users:
        raise FileFormatError(
            path, None, None, "holds no judgments: a TREC qrels file has one a line (qid 0 docid rel)"
        )
    users_column, items_column = pa.concat_arrays(users), pa.concat_arrays(items)
    values = np.concatenate(grades)
    for role, given in (("user", user_map), ("item", item_map)):
        if given is not None and given.kind == "int":
            raise FileFormatError(
                path,
                None,
                None,
                f"a TREC file's ids are text, and the {role} ids it is read against are integers (those of a "
                "table of integer ids, mapped or not): write these rows as a CSV or parquet table, whose integer "
                "ids are read as integers",
            )
    try:
        return Interactions(
            users_column, items_column, values, num_items, user_map=user_map, item_map=item_map, duplicates=duplicates
        )
    except DuplicateInteractionError as error:
        lines = [row + 1 for row in error.rows]
        raise FileFormatError(
            path,
            lines[-1],
            3,
            f"(qid, docid) judged more than once, at lines {lines[:5]}; pass duplicates='max' or 'sum' to merge them",
        ) from None


def table_columns(path: Any, format: str, wanted: dict, what: str) -> dict:
    """{role: column name} for a parquet/CSV table: each role's given name, or the first of its
    usual names that the table has."""
    names = table_schema_names(path, format)
    chosen = {}
    for role, (given, usual) in wanted.items():
        if given is not None:
            if given not in names:
                raise FileFormatError(path, None, None, f"{what} has no column {given!r}; its columns are {names}")
            chosen[role] = given
        elif usual:
            found = [name for name in usual if name in names]
            if len(found) != 1:
                problem = (
                    f"has several {role} columns {found}" if found else f"needs a {role} column (one of {list(usual)})"
                )
                naming = "run_columns=(user, item, score)" if "run" in what else f"{role}=..."
                raise FileFormatError(
                    path,
                    None,
                    None,
                    f"{what} {problem}: name the one to read with {naming} (--{role}-col on the command line); "
                    f"its columns are {names}",
                )
            chosen[role] = found[0]
    repeated = repeated_column(what, list(chosen.values()), names)
    if repeated:
        raise FileFormatError(path, None, None, repeated)
    return chosen


def table_schema_names(path: Any, format: str) -> list:
    _check_exists(path)
    if format == "parquet":
        parquet = require("pyarrow.parquet", "reading parquet files")
        try:
            return list(parquet.ParquetFile(_table_source(path, last=False)).schema_arrow.names)
        except Exception as error:  # pyarrow raises ArrowInvalid / OSError for a file that is not parquet
            raise FileFormatError(path, None, None, f"is not a readable parquet file: {error}") from None
    source = _table_source(path, last=False)
    with decompressing(path), _input(path) if isinstance(source, str) else source as stream:
        head = stream.read(1 << 16)
    head = head[3:] if head.startswith(b"\xef\xbb\xbf") else head  # a UTF-8 byte-order mark (Excel's "CSV UTF-8")
    header = head.split(b"\n", 1)[0].decode("utf-8", "replace").rstrip("\r")
    if not header:
        raise FileFormatError(path, 1, None, "is empty: a CSV table needs a header line naming its columns")
    # names in double quotes ("user", as R's write.csv writes them) are their text, as Arrow reads them
    return next(csv_module.reader([header], delimiter="\t" if format == "tsv" else ",", quotechar='"'))


def table_chunks(path: Any, format: str, names: Sequence[str], ids: Sequence[str] = ()) -> Iterator[tuple]:
    """(first line or row number, {name: pyarrow array}) of each chunk of a parquet or CSV table;
    a missing value (a null, or an empty field of a CSV id column ``ids``) raises a FileFormatError
    naming its line (row) and column."""
    require("pyarrow", "reading tables")
    _check_exists(path)
    if format == "parquet":
        parquet = require("pyarrow.parquet", "reading parquet files")
        row = 1
        for batch in parquet.ParquetFile(_table_source(path, last=True)).iter_batches(
            batch_size=CHUNK_ROWS, columns=list(names)
        ):
            if batch.num_rows:
                yield row, {name: plain_text(_no_nulls(path, batch.column(name), row, name, "row")) for name in names}
            row += batch.num_rows
        return
    with decompressing(path):
        yield from _csv_chunks(path, format, names, ids)


def _csv_chunks(path: Any, format: str, names: Sequence[str], ids: Sequence[str]) -> Iterator[tuple]:
    """``table_chunks`` of a CSV (or TSV) table."""
    pa = require("pyarrow", "reading tables")
    csv = require("pyarrow.csv", "reading CSV files")
    pc = require("pyarrow.compute", "reading CSV files")
    malformed: list = []

    def invalid_row(row):
        malformed.append(row)
        return "skip"

    source = _table_source(path, last=True)
    reader = csv.open_csv(
        _input(path) if isinstance(source, str) else pa.input_stream(source),
        read_options=csv.ReadOptions(block_size=CHUNK_BYTES),
        parse_options=csv.ParseOptions(
            delimiter="\t" if format == "tsv" else ",", invalid_row_handler=invalid_row, ignore_empty_lines=False
        ),
        convert_options=csv.ConvertOptions(
            include_columns=list(names), column_types={name: pa.string() for name in names}, strings_can_be_null=False
        ),
    )
    line = 2  # the header is line 1
    for batch in _batches(reader, path):
        if malformed:
            raise _malformed_row(path, malformed[0], f"{malformed[0].expected_columns} fields")
        if batch.num_rows:
            columns = {name: _no_nulls(path, batch.column(name), line, name, "line") for name in names}
            for name in ids:
                empty = np.flatnonzero(numpy_of(pc.binary_length(columns[name])) == 0)
                if len(empty):
                    raise FileFormatError(path, line + int(empty[0]), name, "a missing value (an empty id)")
                broken = _rows_with_line_breaks(columns[name])
                if len(broken):  # a quote left open reads the lines after it as one id: rows would be lost
                    raise FileFormatError(
                        path,
                        line + int(broken[0]),
                        name,
                        f"an id holding a line break ({columns[name][int(broken[0])].as_py()[:40]!r}...): a double "
                        "quote left open joins the lines after it into one field; quote the whole field, or remove "
                        "the quote",
                    )
            yield line, columns
        line += batch.num_rows
    if malformed:  # the rows after the last batch, or every row, refused
        raise _malformed_row(path, malformed[0], f"{malformed[0].expected_columns} fields")


def _rows_with_line_breaks(array: Any) -> np.ndarray:
    """The rows of a text column whose value holds a line break (``\\n`` or ``\\r``), looked for
    only where the column's bytes hold a control character (one minimum over them: fast)."""
    pa = require("pyarrow", "reading CSV files")
    pc = require("pyarrow.compute", "reading CSV files")
    data = array.buffers()[2]
    if data is None or data.size == 0:
        return np.zeros(0, dtype=np.int64)
    if pc.min(pa.Array.from_buffers(pa.uint8(), data.size, [None, data])).as_py() > ord("\r"):
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(numpy_of(pc.match_substring_regex(array, "[\\r\\n]")))


def _no_nulls(path: Any, array: Any, first: int, name: str, unit: str) -> Any:
    if array.null_count:
        row = int(np.argmax(numpy_of(array.is_null())))
        raise FileFormatError(path, first + row, name, "a missing value (null)", unit)
    return array


def _chosen_columns(path: Any, kind: str, user: Optional[str], item: Optional[str], value: Optional[str]) -> dict:
    """{role: column name} of ``read_interactions``' table: the names given, else the usual ones
    (a FileFormatError for several grade columns of usual names); an InputWarning names the columns
    left unread when no grade column is read (one of another name would be read as grade 1)."""
    names = table_schema_names(path, kind)
    if value is None:
        graded = [name for name in VALUE_COLUMNS if name in names and name not in (user, item)]
        if len(graded) > 1:
            raise FileFormatError(
                path, None, None, f"the table has several grade columns {graded}: name the one to read with value="
            )
        value = graded[0] if graded else None
    chosen = table_columns(
        path, kind, {"user": (user, USER_COLUMNS), "item": (item, ITEM_COLUMNS), "value": (value, ())}, "the table"
    )
    unread = [name for name in names if name not in chosen.values()]
    if "value" not in chosen and unread:
        warnings.warn(
            f"{os.fspath(path)}: the columns {unread} are not read, and no grade column: every row counts as a "
            f"relevant interaction of grade 1 (value={unread[0]!r} reads grades from a column; the usual names of "
            f"one are {list(VALUE_COLUMNS)})",
            InputWarning,
            stacklevel=3,
        )
    return chosen


def read_interactions(
    path: Any,
    *,
    user: Optional[str] = None,
    item: Optional[str] = None,
    value: Optional[str] = None,
    format: Optional[str] = None,
    user_map: Optional[IdMap] = None,
    item_map: Optional[IdMap] = None,
    duplicates: str = "error",
    num_items: Optional[int] = None,
) -> Interactions:
    """An :class:`~ignite_recsys.Interactions` table from a file: a TREC qrels file (see
    :func:`read_trec_qrels`), or a parquet or CSV/TSV table (header line) whose ``user`` and
    ``item`` columns hold the ids and ``value`` (optional) the grades. Without names, the usual
    ones are looked for: ``user``/``user_id``/``qid``..., ``item``/``item_id``/``docid``...,
    and (values, when present) ``value``/``rating``/``relevance``/``rel``/``grade``/``label``
    (a table with several of these needs ``value=``).
    Without a grade column every row is a relevant interaction of grade 1; where the table has
    other columns, none of them read, an :class:`~ignite_recsys.InputWarning` names them (a
    grade column of another name, such as BEIR's ``score``, needs ``value=``). Against a given
    ``user_map`` or ``item_map`` of integer ids, a text id not written as an integer (``07``,
    ``+7``, ``Z``) raises a FileFormatError naming its line: read as 7, ``07`` would be another id."""
    kind = file_format(path, format)
    if kind == "trec":
        return read_trec_qrels(path, user_map=user_map, item_map=item_map, duplicates=duplicates, num_items=num_items)
    pa = require("pyarrow", "reading tables")
    chosen = _chosen_columns(path, kind, user, item, value)
    roles = ["user", "item"] + (["value"] if "value" in chosen else [])
    parts: dict = {role: [] for role in roles + ["value_types"]}
    unit = "row" if kind == "parquet" else "line"
    kinds: dict = {}
    # ids read as the kind of a map given (integers as text for a map of text ids, as a run's are)
    maps = {"user": user_map, "item": item_map}
    for role, given in maps.items():
        if given is not None and given.kind is not None:
            kinds[role] = given.kind
    ids = [chosen["user"], chosen["item"]]
    read: dict = {"user": [], "item": []}  # (first line, id column) of each chunk, as read
    for first, columns in table_chunks(path, kind, [chosen[role] for role in roles], ids=ids):
        for role in read:
            read[role].append((first, columns[chosen[role]]))
        if "value" in chosen:
            grades = columns[chosen["value"]]
            parts["value"].append(numbers_of(path, grades, first, chosen["value"], "value", unit=unit, finite=True))
            parts["value_types"].append(grades.type)
    if not read["user"]:
        raise FileFormatError(path, None, None, "holds no rows")
    for role, chunks in read.items():  # the ids' kind from every chunk: 7 and 007 in two chunks are two ids
        if role not in kinds:
            kinds[role] = "int" if all(id_kind_of(array) == "int" for _, array in chunks) else "str"
        elif kinds[role] == "int":  # a map of integer ids given: 07 would be read as 7, which it is not
            for first, array in chunks:
                _check_integer_text(path, array, first, chosen[role], role, unit)
        parts[role] = [ids_of(path, array, first, chosen[role], kinds[role], unit) for first, array in chunks]
    users = pa.concat_arrays(parts["user"])
    items = pa.concat_arrays(parts["item"])
    values = np.concatenate(parts["value"]) if "value" in parts else None
    if values is not None and all(kind == pa.float32() for kind in parts["value_types"]):
        values = values.astype(np.float32)  # exact: float32 grades keep their dtype (the threshold's comparison)
    try:
        return Interactions(  # a table's ids are external ids, mapped as Interactions.from_frame maps them
            users,
            items,
            values,
            num_items,
            user_map=IdMap.derived_map() if user_map is None else user_map,
            item_map=IdMap.derived_map() if item_map is None else item_map,
            duplicates=duplicates,
        )
    except DuplicateInteractionError as error:
        offset = 1 if kind == "parquet" else 2
        lines = [row + offset for row in error.rows]
        raise FileFormatError(
            path,
            lines[-1],
            None,
            f"(user, item) given more than once, at {unit}s {lines[:5]}; pass duplicates='max' or 'sum' to merge them",
            unit,
        ) from None


def _is_text(array: Any) -> bool:
    pa = require("pyarrow", "reading files")
    kind = array.type.value_type if pa.types.is_dictionary(array.type) else array.type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def id_kind_of(array: Any) -> str:
    """ "int" for an integer column or a text column whose values all read as integers written
    the one way (``7``, not ``07`` or ``+7``: two spellings would be one id), else "str"."""
    pc = require("pyarrow.compute", "reading files")
    if not _is_text(array):
        return "int"
    return "int" if pc.all(pc.match_substring_regex(array, CANONICAL_INTEGER)).as_py() is not False else "str"


def _check_integer_text(path: Any, array: Any, first: int, name: Any, role: str, unit: str) -> None:
    """A FileFormatError naming the first text id of ``array`` that is not an integer written the
    one way (``07``, ``+7``, ``Z``), read against a given map of integer ids: as an integer it would
    be another id's (7's), and the map cannot hold it as text."""
    if id_kind_of(array) == "int":
        return
    pa = require("pyarrow", "reading files")
    pc = require("pyarrow.compute", "reading files")
    array = array.dictionary_decode() if pa.types.is_dictionary(array.type) else array
    row = int(np.argmin(numpy_of(pc.match_substring_regex(array, CANONICAL_INTEGER))))
    message = (
        f"{role} id {array[row].as_py()!r} is not written as an integer id (7, not 07 or +7), and the {role} ids "
        "it is matched with (the test table's) are integers: write the ids as that table does"
    )
    raise FileFormatError(path, first + row, name, message, unit)


def ids_of(path: Any, array: Any, first: int, name: Any, kind: str, unit: str = "line", negative: bool = False) -> Any:
    """An id column as int64 ids (each >= 0 unless ``negative``: original ids an id map holds) for
    ``kind="int"``, as text for ``"str"``; a FileFormatError naming the line and column of a bad id."""
    pa = require("pyarrow", "reading files")
    base = array.type.value_type if pa.types.is_dictionary(array.type) else array.type
    if pa.types.is_floating(base):  # refused as text ids too: 123456789012.0 would read 1.23456789012e+11
        values = numpy_of(array.dictionary_decode() if pa.types.is_dictionary(array.type) else array)
        bad = np.flatnonzero(values != np.round(values))
        row = int(bad[0]) if len(bad) else 0
        example = float(values[row]) if len(values) else None
        message = f"ids must be integers or strings, got {array.type} (e.g. {example!r})"
        raise FileFormatError(path, first + row, name, message, unit)
    if kind == "str":
        return array if _is_text(array) else array.cast(pa.string())
    if _is_text(array):
        values = parse_numbers(path, array, first, name, "id", integer=True, unit=unit)
    elif pa.types.is_integer(base):
        values = numpy_of(array.dictionary_decode() if pa.types.is_dictionary(array.type) else array)
        past = beyond_int64(values)  # a uint64 id of 2**63 or more would wrap around to a negative one
        if past is not None:
            raise FileFormatError(
                path, first + past[0], name, f"id {past[1]} does not fit in int64 ({INT64_HINT})", unit
            )
    else:
        raise FileFormatError(path, first, name, f"ids must be integers or strings, got {array.type}", unit)
    if not negative and len(values) and values.min() < 0:
        row = int(np.argmax(values < 0))
        raise FileFormatError(path, first + row, name, f"ids must be >= 0, got {values[row]}", unit)
    return arrow_of(values.astype(np.int64, copy=False))


def numbers_of(
    path: Any, array: Any, first: int, name: Any, what: str, unit: str = "line", finite: bool = False
) -> np.ndarray:
    """float64 numpy values of a column (text parsed); NaN refused with its line and column, and
    with ``finite`` (grades) infinite values too."""
    if _is_text(array):
        values = parse_numbers(path, array, first, name, what, unit=unit)
    else:
        values = numpy_of(array).astype(np.float64)
        if np.isnan(values).any():
            row = int(np.argmax(np.isnan(values)))
            raise FileFormatError(path, first + row, name, f"{what} must not be NaN", unit)
    if finite and np.isinf(values).any():
        row = int(np.argmax(np.isinf(values)))
        raise FileFormatError(path, first + row, name, f"{what} must be a finite grade, got {values[row]}", unit)
    return values


__all__ = [
    "FileFormatError",
    "read_trec_qrels",
    "read_interactions",
    "file_format",
    "trec_chunks",
    "table_chunks",
    "table_columns",
    "parse_numbers",
    "column",
]
