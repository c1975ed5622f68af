"""Differential fuzzing of the file boundary: hypothesis writes a qrels and a run as TREC files
(whitespace variants, CRLF, a byte-order mark), CSV tables (a byte-order mark) or parquet tables,
with text, integer or unicode ids, tied scores, users missing on either side, split users, empty
files, and one fault at most (a repeated pair, a malformed line, a missing id). For each,
``evaluate()`` either gives pytrec_eval's value for every test user (a test user the run misses
counts 0, as trec_eval -c), or raises the FileFormatError a person would point at: the same file
and line (row for parquet). A few cases go through ``python -m ignite_recsys evaluate``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ignite_recsys as R
from ignite_recsys.data import FileFormatError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytrec_eval = pytest.importorskip("pytrec_eval")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TREC_EVAL = dict(gain_function="linear_rank", map_normalization="relevant", ignore_zero_hits=False)
MEASURES = {
    "ndcg@10": "ndcg_cut_10",
    "precision@5": "P_5",
    "recall@20": "recall_20",
    "map@100": "map_cut_100",
    "mrr@1000": "recip_rank",
}
TREC_MEASURES = {"ndcg_cut.10", "P.5", "recall.20", "map_cut.100", "recip_rank"}
SCORES = [0.5, 1.0, 1.0 + 1e-9, 2.0, -1.0, 0.0, 1.0 / 3.0, 123456.789012]  # repeats tie; 1 + 1e-9 ties 1 in float32
UNICODE = "aZé中ßΩ_.9"  # no "-": "-9" in a CSV reads as a negative integer id, refused
FAULTS = [None] * 6 + ["dup_run", "dup_qrels", "bad_run", "bad_qrels", "null_run", "null_qrels", "empty_run"]
FUZZ = settings(
    max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None
)
FUZZ_SLOW = settings(
    max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None
)


@dataclass
class Case:
    kind: str  # the ids: "text", "int" or "unicode"
    qrels: list  # (user, item, grade) rows, in file order
    run: list  # (user, item, score) rows, in file order
    run_format: str
    qrels_format: str
    spacing: int  # TREC whitespace variant
    crlf: bool
    bom: bool
    fault: object = None
    fault_row: dict = field(default_factory=dict)  # file -> 0-based row of the fault


def _ids(draw, kind, count, prefix):
    if kind == "int":
        values = draw(st.lists(st.integers(0, 10**6), min_size=count, max_size=count, unique=True))
        return values
    if kind == "unicode":
        text = st.text(alphabet=UNICODE, min_size=1, max_size=3)
        return draw(st.lists(text, min_size=count, max_size=count, unique=True))
    return [
        f"{prefix}{value}" for value in draw(st.lists(st.integers(0, 999), min_size=count, max_size=count, unique=True))
    ]


@st.composite
def cases(draw):
    kind = draw(st.sampled_from(["text", "int", "unicode"]))
    users = _ids(draw, kind, draw(st.integers(1, 6)), "q")
    items = _ids(draw, kind, draw(st.integers(1, 14)), "d")
    formats = st.sampled_from(["trec", "trec", "csv", "parquet"])
    run_format, qrels_format = draw(formats), draw(formats)
    fault = draw(st.sampled_from(FAULTS))
    if fault in ("bad_run", "null_run") and run_format == "parquet":
        fault = "null_run"
    if fault in ("bad_qrels", "null_qrels") and qrels_format == "parquet":
        fault = "null_qrels"
    if fault in ("null_run",) and run_format == "trec":
        fault = "bad_run"
    if fault in ("null_qrels",) and qrels_format == "trec":
        fault = "bad_qrels"
    judged = draw(st.lists(st.sampled_from(users), min_size=1, unique=True))
    qrels = []
    for user in judged:
        for item in draw(st.lists(st.sampled_from(items), min_size=1, unique=True)):
            qrels.append((user, item, draw(st.integers(0, 3))))
    ranked = draw(st.lists(st.sampled_from(users), unique=True))  # users missing on either side
    run = []
    distinct = kind == "int" and run_format == "parquet"  # integer columns tie by number, trec_eval by text
    for user in ranked:
        chosen = draw(st.lists(st.sampled_from(items), unique=True))
        if distinct:
            scores = draw(st.lists(st.integers(-50, 50), min_size=len(chosen), max_size=len(chosen), unique=True))
            scores = [value / 7 for value in scores]
        else:
            scores = [draw(st.sampled_from(SCORES)) for _ in chosen]
        run += [(user, item, score) for item, score in zip(chosen, scores)]
    if draw(st.booleans()):  # users' rows interleaved
        run = [run[i] for i in draw(st.permutations(range(len(run))))]
    if fault == "empty_run":
        run = []
    case = Case(
        kind, qrels, run, run_format, qrels_format, draw(st.integers(0, 5)), draw(st.booleans()), draw(st.booleans())
    )
    if fault == "dup_run" and run:
        at = draw(st.integers(0, len(run) - 1))
        where = draw(st.integers(0, len(run)))
        run.insert(where, (run[at][0], run[at][1], draw(st.sampled_from(SCORES))))
    elif fault == "dup_qrels":
        at = draw(st.integers(0, len(qrels) - 1))
        qrels.insert(draw(st.integers(0, len(qrels))), (qrels[at][0], qrels[at][1], 1))
    elif fault in ("bad_run", "null_run") and run:
        case.fault_row["run"] = draw(st.integers(0, len(run) - 1))
    elif fault in ("bad_qrels", "null_qrels"):
        case.fault_row["qrels"] = draw(st.integers(0, len(qrels) - 1))
    case.fault = fault if fault not in ("dup_run", "bad_run", "null_run") or run else None
    return case


# --- writing the files ---------------------------------------------------------------------------
def _join(fields, spacing):
    text = [" ", "  ", "\t", " \t", " ", " "][spacing].join(fields)
    return {4: "  " + text, 5: text + " \t"}.get(spacing, text)


def _write(folder, name, rows, columns, file_format, case, trec_fields):
    """The file for ``rows``; returns (path, the fault's line or row number as the reader names it)."""
    fault_at = case.fault_row.get(name)
    bad = case.fault in ("bad_run", "bad_qrels", "null_run", "null_qrels") and fault_at is not None
    if file_format == "parquet":
        path = os.path.join(folder, f"{name}.parquet")
        data = {column: [row[i] for row in rows] for i, column in enumerate(columns)}
        if bad:
            data[columns[0]][fault_at] = None
        types = [pa.int64() if case.kind == "int" else pa.string()] * 2 + [pa.float64()]
        pq.write_table(pa.table({c: pa.array(v, t) for (c, v), t in zip(data.items(), types)}), path)
        return path, (fault_at + 1 if bad else None)
    end = "\r\n" if case.crlf else "\n"
    if file_format == "csv":
        path = os.path.join(folder, f"{name}.csv")
        lines = [",".join(columns)]
        for index, row in enumerate(rows):
            values = [str(value) if not isinstance(value, float) else repr(value) for value in row]
            if bad and index == fault_at:
                values = values + ["extra"] if case.fault.startswith("bad") else [""] + values[1:]
            lines.append(",".join(values))
        offset = 2
    else:
        path = os.path.join(folder, name)
        lines = []
        for index, row in enumerate(rows):
            values = [str(value) if not isinstance(value, float) else repr(value) for value in row]
            fields = trec_fields(values)
            if bad and index == fault_at:
                fields = fields[:-1]
            lines.append(_join(fields, case.spacing))
        offset = 1
    text = end.join(lines) + (end if lines else "")
    data = text.encode()
    with open(path, "wb") as handle:
        handle.write((b"\xef\xbb\xbf" if case.bom else b"") + data)
    return path, (fault_at + offset if bad else None)


def _files(folder, case):
    qrels_path, qrels_line = _write(
        folder, "qrels", case.qrels, ["user", "item", "rel"], case.qrels_format, case, lambda v: [v[0], "0", v[1], v[2]]
    )
    run_path, run_line = _write(
        folder,
        "run",
        case.run,
        ["user", "item", "score"],
        case.run_format,
        case,
        lambda v: [v[0], "Q0", v[1], "0", v[2], "tag"],
    )
    return qrels_path, qrels_line, run_path, run_line


# --- what a person expects -----------------------------------------------------------------------
def _expected_error(case, qrels_path, qrels_line, run_path, run_line):
    """(path, line, message pattern) of the error a person would point at, or None."""
    if case.fault in ("bad_qrels", "null_qrels"):
        return qrels_path, qrels_line, "fields|missing value"
    seen: dict = {}
    for line, (user, item, _) in enumerate(case.qrels):
        if (user, item) in seen:
            offset = {"trec": 1, "csv": 2, "parquet": 1}[case.qrels_format]
            return qrels_path, line + offset, "more than once"
        seen[(user, item)] = line
    if case.fault in ("bad_run", "null_run"):
        return run_path, run_line, "fields|missing value"
    judged = {user for user, _, _ in case.qrels}
    pairs: dict = {}
    for line, (user, item, _) in enumerate(case.run):
        if (user, item) in pairs and user in judged:
            offset = {"trec": 1, "csv": 2, "parquet": 1}[case.run_format]
            return run_path, line + offset, "twice"
        pairs[(user, item)] = line
    return None


def _trec_eval(case):
    """pytrec_eval's value of each qrels user (0 for a user the run misses)."""
    qrels: dict = {}
    for user, item, grade in case.qrels:
        qrels.setdefault(str(user), {})[str(item)] = int(grade)
    run: dict = {}
    for user, item, score in case.run:
        run.setdefault(str(user), {})[str(item)] = float(score)
    per_query = pytrec_eval.RelevanceEvaluator(qrels, TREC_MEASURES).evaluate(run) if run else {}
    return {
        user: {key: per_query[user][measure] if user in per_query else 0.0 for key, measure in MEASURES.items()}
        for user in qrels
    }


def _check(case):
    with tempfile.TemporaryDirectory() as folder:
        qrels_path, qrels_line, run_path, run_line = _files(folder, case)
        error = _expected_error(case, qrels_path, qrels_line, run_path, run_line)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = R.evaluate(
                    run_path,
                    qrels_path,
                    list(MEASURES),
                    per_user=True,
                    progress=False,
                    score_precision="float32",
                    **TREC_EVAL,
                )
            except FileFormatError as raised:
                assert error is not None, f"refused valid input: {raised}"
                path, line, pattern = error
                assert raised.path == path and raised.line == line, (str(raised), path, line)
                assert any(word in str(raised) for word in pattern.split("|")), str(raised)
                return
        assert error is None, f"accepted input that should be refused: {error}"
        expected = _trec_eval(case)
        ids = result.user_ids.tolist() if hasattr(result.user_ids, "tolist") else list(result.user_ids)
        users = [str(user) for user in ids]
        assert sorted(users) == sorted(expected)
        for key in MEASURES:
            values = result.per_user()[key].numpy()
            for user, value in zip(users, values):
                assert value == pytest.approx(expected[user][key], abs=1e-9), (key, user, case)
        judged = {str(user) for user, _, _ in case.qrels}
        no_test_user = not any(str(user) in judged for user, _, _ in case.run)
        # a warning also where no item the run ranks for test users is an item of the test table;
        # none where one is judged for its own user (in between, the reader may look among the
        # items of the chunk's users or of the whole table)
        pairs = {(str(user), str(item)) for user, item, _ in case.qrels}
        test_items = {str(item) for _, item, _ in case.qrels}
        of_test_users = [(str(user), str(item)) for user, item, _ in case.run if str(user) in judged]
        must_warn = no_test_user or not any(item in test_items for _, item in of_test_users)
        must_not_warn = any(pair in pairs for pair in of_test_users)
        warned = [w for w in caught if issubclass(w.category, R.InputWarning)]
        assert bool(warned) == bool(result.info["warnings"])
        if must_warn or must_not_warn:
            assert bool(warned) == must_warn, (case, [str(w.message) for w in warned])
        assert result.info["run_rows"] == len(case.run)


@FUZZ
@given(cases())
def test_files_to_values_equal_trec_eval_or_name_the_line(case):
    _check(case)


@pytest.mark.slow
@FUZZ_SLOW
@given(cases())
def test_files_to_values_equal_trec_eval_or_name_the_line_many(case):
    _check(case)


# --- the command line ----------------------------------------------------------------------------
def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "ignite_recsys", "evaluate", *args], cwd=ROOT, capture_output=True, text=True
    )


@pytest.mark.slow  # two interpreters started
def test_the_command_line_reads_what_trec_eval_reads(tmp_path):
    """Tabs, trailing spaces and CRLF in the run, a byte-order mark in the qrels: pytrec_eval's
    means; a run of malformed lines: exit 4 naming the file and line."""
    rng = np.random.default_rng(11)
    qrels = {f"q{u}": {f"d{i}": int(rng.integers(0, 3)) for i in rng.choice(30, 6, replace=False)} for u in range(12)}
    run = {f"q{u}": {f"d{i}": float(rng.random()) for i in rng.choice(30, 15, replace=False)} for u in range(10)}
    lines = [f"{q}\tQ0  {d} 0 {s!r} t \r\n" for q in run for d, s in run[q].items()]
    (tmp_path / "run").write_text("".join(lines), newline="")
    (tmp_path / "qrels").write_bytes(
        b"\xef\xbb\xbf" + "".join(f"{q} 0 {d} {g}\n" for q in qrels for d, g in qrels[q].items()).encode()
    )
    done = _cli(
        "--qrels", str(tmp_path / "qrels"), "--run", str(tmp_path / "run"), "--metrics", ",".join(MEASURES),
        "--trec-eval", "--format", "json", "--no-progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    means = json.loads(done.stdout)["means"]
    per_query = pytrec_eval.RelevanceEvaluator(qrels, TREC_MEASURES).evaluate(run)
    for key, measure in MEASURES.items():
        expected = np.mean([per_query[q][measure] if q in per_query else 0.0 for q in qrels])
        assert means[key] == pytest.approx(expected, abs=1e-12), key
    (tmp_path / "bad").write_text("q1 Q0 d1 1 0.5 t x\nq2 Q0 d2 1 0.5 t x\n")  # 7 fields on every line
    done = _cli("--qrels", str(tmp_path / "qrels"), "--run", str(tmp_path / "bad"), "--metrics", "P@5", "--no-progress")
    assert done.returncode == 4 and f"{tmp_path / 'bad'}, line 1" in done.stderr, done.stderr
