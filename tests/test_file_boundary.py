"""The file and run-table boundary of evaluate(): a result only for input that was read.

TREC files are read as trec_eval reads them (any run of spaces/tabs between fields, whitespace at
the ends of a line, CRLF); a line of the wrong shape is an error naming the file and line; an
empty run or one without a test user warns; run tables refuse missing ids with their row and
column; run scores compare as float32 on request (trec_eval's storage); users whose rows are split
are grouped. Expected values come from pytrec_eval."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import ignite_recsys as R
from ignite_recsys.data import FileFormatError, Interactions

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pd = pytest.importorskip("pandas")
pl = pytest.importorskip("polars")
pytrec_eval = pytest.importorskip("pytrec_eval")

TREC_EVAL = dict(gain_function="linear_rank", map_normalization="relevant", ignore_zero_hits=False)
MEASURES = {"ndcg@10": "ndcg_cut_10", "precision@5": "P_5", "map@100": "map_cut_100", "mrr@1000": "recip_rank"}
QRELS = "q1 0 d1 1\nq1 0 d2 0\nq2 0 d1 2\nq2 0 d3 1\n"


def _trec_eval_means(qrels: dict, run: dict) -> dict:
    """pytrec_eval's means over the qrels' queries (a query the run misses counts 0, as -c)."""
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "P.5", "map_cut.100", "recip_rank"}).evaluate(run)
    return {
        key: float(np.mean([per_query[q][measure] if q in per_query else 0.0 for q in qrels]))
        for key, measure in MEASURES.items()
    }


def _evaluate(run, qrels, **options):
    return R.evaluate(run, qrels, list(MEASURES), progress=False, **TREC_EVAL, **options)


def _assert_means(result, expected):
    for key, value in expected.items():
        assert result[key] == pytest.approx(value, abs=1e-12), key


# --- item: every line malformed is an error, not an empty run -----------------------------------
@pytest.mark.parametrize(
    "text, line, match",
    [
        ("q1 Q0 d1 1 1.0\nq2 Q0 d2 1 1.0\n", 1, "expected 6 fields .* got 5"),
        ("q1 Q0 d1 1 1.0 x y\nq2 Q0 d2 1 1.0 x y\n", 1, "expected 6 fields .* got 7"),
        ("q1 Q0 d1 1 1.0 x\nq2 Q0 d2 1 1.0 x y\n", 2, "got 7: 'q2 Q0 d2 1 1.0 x y'"),
        ("\n\n", 1, "a blank line"),
        ("q1 Q0 d1 1 1.0 x\n   \t \nq2 Q0 d2 1 1.0 x\n", 2, "a blank line"),
    ],
)
def test_a_run_of_malformed_lines_is_an_error_naming_the_file_and_line(tmp_path, text, line, match):
    (tmp_path / "q").write_text(QRELS)
    (tmp_path / "r.trec").write_text(text)
    with pytest.raises(FileFormatError, match=match) as raised:
        _evaluate(tmp_path / "r.trec", tmp_path / "q")
    assert raised.value.path == str(tmp_path / "r.trec") and raised.value.line == line
    (tmp_path / "q.trec").write_text(text.replace(" Q0 ", " 0 "))  # the same lines as qrels: 4 fields expected
    with pytest.raises(FileFormatError, match="q.trec, line"):
        R.evaluate(tmp_path / "r.trec", tmp_path / "q.trec", ["P@1"], progress=False)


WHITESPACE = [
    lambda line: line + " ",  # a trailing space
    lambda line: line.replace(" ", "  "),  # two spaces between fields
    lambda line: line.replace(" ", "\t"),  # tabs
    lambda line: line.replace(" ", " \t "),  # a mix
    lambda line: "  " + line + "\t",  # spaces before, a tab after
    lambda line: line + "\r",  # Windows line endings
    lambda line: line + " \r",
]


@pytest.mark.parametrize("variant", range(len(WHITESPACE)))
def test_whitespace_as_trec_eval_reads_it(tmp_path, variant):
    """Every line of the run and the qrels in one whitespace variant: the values pytrec_eval gives
    on the plain files (its parse_run / parse_qrel split on any whitespace)."""
    run_text = "q1 Q0 d2 1 0.9 t\nq1 Q0 d1 2 0.5 t\nq2 Q0 d3 1 0.7 t\nq2 Q0 d1 2 0.7 t\nq9 Q0 d1 1 1.0 t\n"
    change = WHITESPACE[variant]
    (tmp_path / "r").write_text("".join(change(line) + "\n" for line in run_text.splitlines()))
    (tmp_path / "q").write_text("".join(change(line) + "\n" for line in QRELS.splitlines()))
    with open(tmp_path / "r") as run_file, open(tmp_path / "q") as qrels_file:
        run, qrels = pytrec_eval.parse_run(run_file), pytrec_eval.parse_qrel(qrels_file)
    result = _evaluate(tmp_path / "r", tmp_path / "q")
    _assert_means(result, _trec_eval_means(qrels, run))
    assert result.info["run_rows"] == 5 and result.info["run_rows_not_in_test"] == 1
    assert result.info["warnings"] == []


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_id(tmp_path):
    (tmp_path / "q").write_bytes(b"\xef\xbb\xbf" + QRELS.encode())
    (tmp_path / "r").write_bytes(b"\xef\xbb\xbfq1 Q0 d1 1 0.9 t\nq2 Q0 d3 1 0.7 t\n")
    assert R.evaluate(tmp_path / "r", tmp_path / "q", ["P@1"], progress=False).means == {"precision@1": 1.0}


def test_an_empty_run_and_a_run_without_test_users_warn_and_say_so(tmp_path):
    (tmp_path / "q").write_text(QRELS)
    (tmp_path / "empty").write_text("")
    with pytest.warns(R.InputWarning, match="holds no rows"):
        result = _evaluate(tmp_path / "empty", tmp_path / "q")
    assert result.info["run_rows"] == 0 and len(result.info["warnings"]) == 1
    (tmp_path / "other").write_text("1 Q0 d1 1 0.9 t\n2 Q0 d1 1 0.9 t\n")  # ids of another kind
    with pytest.warns(R.InputWarning, match="none of the 2 rows .* is of a test user"):
        result = _evaluate(tmp_path / "other", tmp_path / "q")
    assert result.info["run_rows_not_in_test"] == 2 and "ids match" in result.info["warnings"][0]
    with pytest.warns(R.InputWarning, match="holds no rows"):
        R.evaluate(pd.DataFrame({"user": [], "item": [], "score": []}), tmp_path / "q", ["P@1"], progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (tmp_path / "good").write_text("q1 Q0 d1 1 0.9 t\n")
        assert _evaluate(tmp_path / "good", tmp_path / "q").info["warnings"] == []


def test_a_run_none_of_whose_items_the_test_table_holds_warns_and_says_so(tmp_path):
    """Item ids of another spelling ("D1" for "d1"): every metric is 0, as pytrec_eval gives it,
    with a warning that says why."""
    (tmp_path / "q").write_text(QRELS)
    (tmp_path / "r").write_text("q1 Q0 D1 1 0.9 t\nq1 Q0 D2 2 0.5 t\nq2 Q0 D3 1 0.7 t\n")
    with open(tmp_path / "r") as run_file, open(tmp_path / "q") as qrels_file:
        expected = _trec_eval_means(pytrec_eval.parse_qrel(qrels_file), pytrec_eval.parse_run(run_file))
    assert set(expected.values()) == {0.0}
    for run in (
        tmp_path / "r",
        pd.DataFrame({"user": ["q1", "q1", "q2"], "item": ["D1", "D2", "D3"], "score": [0.9, 0.5, 0.7]}),
    ):
        with pytest.warns(
            R.InputWarning,
            match=r"none of the 3 items the run .* ranks for test users is an item of the test table.*item ids match",
        ):
            result = _evaluate(run, tmp_path / "q")
        _assert_means(result, expected)
        assert len(result.info["warnings"]) == 1 and "item ids match" in result.info["warnings"][0]
    # one item of the test table among them (a judged, not relevant one): no warning
    (tmp_path / "r").write_text("q1 Q0 D1 1 0.9 t\nq1 Q0 d2 2 0.5 t\nq2 Q0 D3 1 0.7 t\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _evaluate(tmp_path / "r", tmp_path / "q").info["warnings"] == []


@pytest.mark.parametrize("suffix, codec", [(".gz", "gzip"), (".bz2", "bz2"), (".zst", "zstd"), (".lz4", "lz4")])
def test_a_file_named_compressed_that_is_not_is_an_error_naming_it(tmp_path, suffix, codec):
    """Plain text under a compressed name (a run saved as run.gz without gzip): the codec's own
    error, without the file's name, became a FileFormatError that names the file and the codec."""
    (tmp_path / "q").write_text(QRELS)
    run = "q1 Q0 d1 1 0.9 t\n"
    (tmp_path / f"r{suffix}").write_text(run)
    (tmp_path / f"q{suffix}").write_text(QRELS)
    (tmp_path / f"q.csv{suffix}").write_text("user,item\nq1,d1\n")
    (tmp_path / f"r.csv{suffix}").write_text("user,item,score\nq1,d1,0.9\n")
    cases = [
        (f"r{suffix}", lambda: R.evaluate(tmp_path / f"r{suffix}", tmp_path / "q", ["P@1"], progress=False)),
        (f"q{suffix}", lambda: R.evaluate(tmp_path / "r.csv", tmp_path / f"q{suffix}", ["P@1"], progress=False)),
        (f"q.csv{suffix}", lambda: R.data.read_interactions(tmp_path / f"q.csv{suffix}")),
        (f"r.csv{suffix}", lambda: R.evaluate(tmp_path / f"r.csv{suffix}", tmp_path / "q", ["P@1"], progress=False)),
    ]
    (tmp_path / "r.csv").write_text("user,item,score\nq1,d1,0.9\n")
    for name, call in cases:
        with pytest.raises(FileFormatError, match=rf"{re.escape(name)}: cannot be read as {codec} data"):
            call()
    if suffix == ".gz":  # a gzip file cut short (a download that stopped) is named as well
        import gzip

        (tmp_path / "cut.gz").write_bytes(gzip.compress(run.encode() * 50000)[:2000])
        with pytest.raises(EOFError):  # Python's own gzip reader refuses it too
            gzip.open(tmp_path / "cut.gz").read()
        with pytest.raises(FileFormatError, match=r"cut.gz: cannot be read as gzip data"):
            R.evaluate(tmp_path / "cut.gz", tmp_path / "q", ["P@1"], progress=False)


def test_a_csv_header_of_quoted_names_is_read_as_the_names(tmp_path):
    """R's write.csv and pandas' QUOTE_ALL quote the header's names ("user","item"), with R's
    row-name column first: the names are the unquoted text, as in the rows; pytrec_eval's values."""
    (tmp_path / "q.csv").write_text('"","user","item","rel"\n"1","q1","d1",1\n"2","q1","d2",0\n"3","q2","d3",2\n')
    (tmp_path / "r.csv").write_text('"user","item","score"\n"q1","d2",0.9\n"q1","d1",0.5\n"q2","d3",0.7\n')
    qrels = {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 2}}
    run = {"q1": {"d2": 0.9, "d1": 0.5}, "q2": {"d3": 0.7}}
    test = R.data.read_interactions(tmp_path / "q.csv", value="rel")
    result = _evaluate(tmp_path / "r.csv", test)
    _assert_means(result, _trec_eval_means(qrels, run))


def test_a_csv_table_whose_every_row_is_malformed_is_an_error_naming_the_line(tmp_path):
    (tmp_path / "q").write_text(QRELS)
    (tmp_path / "r.csv").write_text("user,item,score\nq1,d1,0.5,9\nq2,d1,0.5,9\n")
    with pytest.raises(FileFormatError, match="r.csv, line 2: expected 3 fields, got 4"):
        R.evaluate(tmp_path / "r.csv", tmp_path / "q", ["P@1"], progress=False)
    (tmp_path / "t.csv").write_text("user,item\nq1,d1,x\n")
    with pytest.raises(FileFormatError, match="t.csv, line 2: expected 2 fields, got 3"):
        R.evaluate(tmp_path / "r.csv", tmp_path / "t.csv", ["P@1"], progress=False)


def test_an_empty_qrels_is_an_error_naming_the_file(tmp_path):
    (tmp_path / "q").write_text("")
    (tmp_path / "r").write_text("q1 Q0 d1 1 0.9 t\n")
    with pytest.raises(FileFormatError, match="q: holds no judgments"):
        R.evaluate(tmp_path / "r", tmp_path / "q", ["P@1"], progress=False)


# --- item: tables --------------------------------------------------------------------------------
def _null_frames(column):
    values = {"user": ["a", "b", "a"], "item": ["x", "y", "y"], "score": [1.0, 2.0, 0.5]}
    values[column] = list(values[column])
    values[column][1] = None
    return [pa.table(values), pl.DataFrame(values), pd.DataFrame(values)]


@pytest.mark.parametrize("column", ["user", "item"])
def test_a_missing_id_in_a_run_table_names_its_row_and_column(column):
    test = Interactions(["a", "b"], ["x", "y"])
    for frame in _null_frames(column):
        with pytest.raises(FileFormatError, match=f"run, row 1, column {column}: a missing value"):
            R.evaluate(frame, test, ["P@1"], progress=False)
    integer = pd.DataFrame({"user": [1, None], "item": [1, 2], "score": [1.0, 2.0]})  # pandas makes it float NaN
    with pytest.raises(FileFormatError, match="run, row 1, column user: a missing value"):
        R.evaluate(integer, Interactions([1], [1]), ["P@1"], progress=False)


def test_missing_ids_in_run_and_test_files_name_the_line(tmp_path):
    (tmp_path / "q").write_text(QRELS)
    (tmp_path / "r.csv").write_text("user,item,score\nq1,d1,0.5\n,d2,0.4\n")
    with pytest.raises(FileFormatError, match="r.csv, line 3, column user: a missing value"):
        R.evaluate(tmp_path / "r.csv", tmp_path / "q", ["P@1"], progress=False)
    pq.write_table(pa.table({"user": ["q1", "q2"], "item": ["d1", None], "score": [0.5, 0.4]}), tmp_path / "r.pq")
    with pytest.raises(FileFormatError, match="r.pq, row 2, column item: a missing value"):
        R.evaluate(tmp_path / "r.pq", tmp_path / "q", ["P@1"], progress=False)


def test_a_csv_with_a_byte_order_mark_reads_with_or_without_naming_the_column(tmp_path):
    (tmp_path / "q").write_text(QRELS)
    bom = b"\xef\xbb\xbf"
    (tmp_path / "r.csv").write_bytes(bom + b"user,item,score\nq1,d1,0.5\nq2,d3,0.4\nq2,d1,0.3\n")
    (tmp_path / "t.csv").write_bytes(
        bom
        + b"user,item,rel\n"
        + b"".join(f"{u},{i},{g}\n".encode() for u, _, i, g in (line.split() for line in QRELS.splitlines()))
    )
    expected = R.evaluate(tmp_path / "r.csv", tmp_path / "q", list(MEASURES), progress=False).means
    run = {"q1": {"d1": 0.5}, "q2": {"d3": 0.4, "d1": 0.3}}
    qrels = {"q1": {"d1": 1, "d2": 0}, "q2": {"d1": 2, "d3": 1}}
    for key, value in _trec_eval_means(qrels, run).items():
        if key != "ndcg@10":  # our default gains are exponential: compared with trec_eval's below
            assert expected[key] == pytest.approx(value, abs=1e-12)
    _assert_means(_evaluate(tmp_path / "r.csv", tmp_path / "t.csv"), _trec_eval_means(qrels, run))
    named = R.evaluate(tmp_path / "r.csv", tmp_path / "t.csv", list(MEASURES), run_columns=("user", "item", "score"))
    assert named.means == expected


def test_an_exclusion_table_of_integer_ids_with_a_trec_qrels(tmp_path):
    """The qrels' ids are text; an exclusion table (CSV or parquet) of the same ids as integers
    excludes them, as a run table of integer ids matches them."""
    (tmp_path / "q").write_text("1 0 5 1\n1 0 6 1\n2 0 5 1\n")
    (tmp_path / "r").write_text("1 Q0 5 1 0.9 t\n1 Q0 6 2 0.8 t\n2 Q0 6 1 0.9 t\n2 Q0 5 2 0.8 t\n")
    (tmp_path / "x.csv").write_text("user,item\n2,6\n")
    pq.write_table(pa.table({"user": [2], "item": [6]}), tmp_path / "x.parquet")
    # user 2 without item 6 ranks 5 first: relevant; user 1 ranks 5 first: relevant
    for exclude in (tmp_path / "x.csv", tmp_path / "x.parquet"):
        assert R.evaluate(tmp_path / "r", tmp_path / "q", ["P@1"], exclude=exclude, progress=False).means == {
            "precision@1": 1.0
        }
    run_table = pd.DataFrame({"user": [1, 1, 2, 2], "item": [5, 6, 6, 5], "score": [0.9, 0.8, 0.9, 0.8]})
    assert R.evaluate(run_table, tmp_path / "q", ["P@1"], exclude=tmp_path / "x.parquet", progress=False).means == {
        "precision@1": 1.0
    }


# --- item: trec_eval's float32 scores ------------------------------------------------------------
def test_score_precision_float32_reproduces_trec_eval(tmp_path):
    """Pairs of scores that differ past float32 precision tie in trec_eval (then the larger docid
    first): score_precision="float32" gives pytrec_eval's values, the default keeps float64."""
    rng = np.random.default_rng(3)
    run, qrels, lines = {}, {}, []
    for query in range(40):
        q = f"q{query}"
        base = rng.random(30).round(3) + 1.0
        scores = base.copy()
        scores[1::2] = base[::2] + rng.choice([1e-9, -1e-9, 3e-8, 0.0], size=15)  # pairs equal in float32
        docs = [f"d{rng.integers(0, 60)}_{j}" for j in range(30)]
        run[q] = dict(zip(docs, scores.tolist()))
        qrels[q] = {doc: int(rng.integers(0, 3)) for doc in rng.choice(docs, 8, replace=False)}
        lines += [f"{q} Q0 {doc} {rank} {score!r} t" for rank, (doc, score) in enumerate(run[q].items(), 1)]
    (tmp_path / "r").write_text("\n".join(lines) + "\n")
    (tmp_path / "q").write_text("".join(f"{q} 0 {d} {g}\n" for q in qrels for d, g in qrels[q].items()))
    expected = _trec_eval_means(qrels, run)
    result = _evaluate(tmp_path / "r", tmp_path / "q", score_precision="float32", per_user=True)
    _assert_means(result, expected)
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"map_cut.100"}).evaluate(run)
    np.testing.assert_allclose(
        result.per_user()["map@100"].numpy(), [per_query[q]["map_cut_100"] for q in result.user_ids], atol=1e-12
    )
    default = _evaluate(tmp_path / "r", tmp_path / "q")
    assert any(abs(default[key] - expected[key]) > 1e-9 for key in expected)  # the file does hit float32 ties
    with pytest.raises(ValueError, match="score_precision must be 'float64' or 'float32'"):
        _evaluate(tmp_path / "r", tmp_path / "q", score_precision="half")


# --- item: users whose rows are split -------------------------------------------------------------
@pytest.mark.parametrize("ties", ["docid", "order"])
def test_split_users_are_grouped_and_equal_trec_eval(tmp_path, ties, monkeypatch):
    from ignite_recsys.data import files

    monkeypatch.setattr(files, "CHUNK_BYTES", 300)  # several chunks
    rng = np.random.default_rng(5)
    rows = []
    for query in range(25):
        for j in rng.choice(50, 12, replace=False):
            rows.append((f"q{query}", f"d{j}", float(rng.integers(0, 6))))  # many tied scores
    order = rng.permutation(len(rows))  # users' rows interleaved
    rows = [rows[i] for i in order]
    (tmp_path / "r").write_text("".join(f"{q} Q0 {d} 0 {s} t\n" for q, d, s in rows))
    qrels = {f"q{q}": {f"d{j}": int(rng.integers(0, 3)) for j in rng.choice(50, 10, replace=False)} for q in range(30)}
    (tmp_path / "q").write_text("".join(f"{q} 0 {d} {g}\n" for q in qrels for d, g in qrels[q].items()))
    result = _evaluate(tmp_path / "r", tmp_path / "q", run_ties=ties)
    assert result.info["run_grouped_in_memory"] is True and result.info["run_rows"] == len(rows)
    in_order = sorted(range(len(rows)), key=lambda i: rows[i][0])  # stable: each user's rows keep their order
    grouped = "".join("{} Q0 {} 0 {} t\n".format(*rows[i]) for i in in_order)
    (tmp_path / "g").write_text(grouped)
    again = _evaluate(tmp_path / "g", tmp_path / "q", run_ties=ties)
    assert again.info["run_grouped_in_memory"] is False
    _assert_means(again, result.means)  # the same users, summed in another order
    if ties == "docid":  # trec_eval's tie rule
        run: dict = {}
        for q, d, s in rows:
            run.setdefault(q, {})[d] = s
        _assert_means(result, _trec_eval_means(qrels, run))
    with pytest.raises(FileFormatError, match="ranks item 'd1' twice"):  # a repeat across the split is still seen
        (tmp_path / "d").write_text("q1 Q0 d1 1 0.5 t\nq2 Q0 d1 1 0.5 t\nq1 Q0 d1 2 0.4 t\n")
        _evaluate(tmp_path / "d", tmp_path / "q")


@pytest.mark.parametrize("chunk_bytes", [300_000, 1 << 20])
def test_a_run_of_blocks_past_arrows_piece_size_equals_trec_eval(tmp_path, monkeypatch, chunk_bytes):
    """A run's blocks parsed whole on the parser's thread (each above Arrow's 256 KiB pieces),
    users cut across blocks, some lines with other spacing: pytrec_eval's values on the file."""
    from ignite_recsys.data import files

    monkeypatch.setattr(files, "CHUNK_BYTES", chunk_bytes)
    rng = np.random.default_rng(3)
    run_lines, qrels_lines = [], []
    for user in rng.permutation(600):
        for item in rng.choice(5000, 30, replace=False):
            line = f"u{user} Q0 doc{item} 0 {rng.normal():.6f} tag"
            run_lines.append(line if rng.random() > 0.01 else "  " + line.replace(" ", "\t ") + " \r")
        qrels_lines += [f"u{user} 0 doc{item} {rng.integers(0, 3)}" for item in rng.choice(5000, 5, replace=False)]
    (tmp_path / "r").write_text("\n".join(run_lines) + "\n")
    (tmp_path / "q").write_text("\n".join(qrels_lines) + "\n")
    assert (tmp_path / "r").stat().st_size > 2 * (1 << 18)
    with open(tmp_path / "r") as run_file, open(tmp_path / "q") as qrels_file:
        run, qrels = pytrec_eval.parse_run(run_file), pytrec_eval.parse_qrel(qrels_file)
    result = _evaluate(tmp_path / "r", tmp_path / "q")
    _assert_means(result, _trec_eval_means(qrels, run))
    assert result.info["run_rows"] == len(run_lines)


@pytest.mark.parametrize("chunk_bytes", [90, 1 << 20])
def test_scores_in_every_number_form_equal_trec_eval(tmp_path, monkeypatch, chunk_bytes):
    """Scores written as integers, with signs, exponents, leading or trailing points, "inf",
    read as numbers by the parser in chunks (and as text in the chunks around a bad score): the
    values pytrec_eval gives, and the bad score's line named."""
    from ignite_recsys.data import files

    monkeypatch.setattr(files, "CHUNK_BYTES", chunk_bytes)
    forms = ["3", "+2.5", "-0", ".5", "5.", "1e2", "2E-1", "-1e400", "inf", "-inf", "0.000001", "00012"]
    rng = np.random.default_rng(4)
    lines = []
    for user in range(12):
        for rank, item in enumerate(rng.choice(20, 6, replace=False)):
            lines.append(f"u{user} Q0 d{item} {rank} {forms[(user + rank) % len(forms)]} t")
    (tmp_path / "r").write_text("\n".join(lines) + "\n")
    (tmp_path / "q").write_text("".join(f"u{user} 0 d{item} 1\n" for user in range(12) for item in range(0, 20, 3)))
    with open(tmp_path / "r") as run_file, open(tmp_path / "q") as qrels_file:
        run, qrels = pytrec_eval.parse_run(run_file), pytrec_eval.parse_qrel(qrels_file)
    _assert_means(_evaluate(tmp_path / "r", tmp_path / "q"), _trec_eval_means(qrels, run))
    lines[40] = lines[40].rsplit(" ", 2)[0] + " 1,5 t"
    (tmp_path / "r").write_text("\n".join(lines) + "\n")
    with pytest.raises(FileFormatError, match=r"line 41, column 5 \(score\): score must be a number, got '1,5'"):
        _evaluate(tmp_path / "r", tmp_path / "q")


def test_split_users_with_a_bad_score_in_another_chunk_name_its_line(tmp_path, monkeypatch):
    """A run whose users' rows are split is grouped in memory from chunks whose scores were read
    as numbers and one read as text (it holds a value that is not a number): the error names the
    bad score's line, as for a run read once."""
    from ignite_recsys.data import files

    monkeypatch.setattr(files, "CHUNK_BYTES", 64)
    users = [1, 2, 1, *range(3, 20)]  # q1's rows start again after q2's
    lines = [
        f"q{user} Q0 d{3 * at + item} {item} {1 - item / 10} t" for at, user in enumerate(users) for item in range(3)
    ]
    lines[-5] = lines[-5].rsplit(" ", 2)[0] + " abc t"
    (tmp_path / "r").write_text("\n".join(lines) + "\n")
    (tmp_path / "q").write_text("".join(f"q{user} 0 d{3 * at + 1} 1\n" for at, user in enumerate(users) if at != 2))
    with pytest.raises(FileFormatError, match=r"line 56, column 5 \(score\): score must be a number, got 'abc'"):
        _evaluate(tmp_path / "r", tmp_path / "q")
    lines[-5] = lines[-5].rsplit(" ", 2)[0] + " 0.5 t"
    (tmp_path / "r").write_text("\n".join(lines) + "\n")
    with open(tmp_path / "r") as run_file, open(tmp_path / "q") as qrels_file:
        run, qrels = pytrec_eval.parse_run(run_file), pytrec_eval.parse_qrel(qrels_file)
    result = _evaluate(tmp_path / "r", tmp_path / "q")
    _assert_means(result, _trec_eval_means(qrels, run))
    assert result.info["run_grouped_in_memory"] is True


# --- item: a table's ids read as numbers only if every chunk's are ---------------------------------
@pytest.mark.parametrize("form", ["csv", "parquet"])
def test_a_tables_id_kind_comes_from_every_chunk_and_equals_trec_eval(tmp_path, monkeypatch, form):
    """The first chunks of the test table hold integer ids written the one way; a later one holds
    007 and 0042, which are other ids than 7 and 42 (text ids, as trec_eval reads them). Read in
    many chunks, the table gives pytrec_eval's values on the same rows, and the run's 7 does not
    hit the test's 007."""
    from ignite_recsys.data import files

    monkeypatch.setattr(files, "CHUNK_BYTES", 200)  # a few lines per chunk
    monkeypatch.setattr(files, "CHUNK_ROWS", 16)  # a few rows per batch
    rng = np.random.default_rng(8)
    rows = [
        (str(user), str(item), int(rng.integers(1, 3))) for user in range(1, 40) for item in rng.choice(60, 4, False)
    ]
    rows += [("5", "007", 2), ("0042", "9", 1), ("42", "7", 1)]  # after the integer-looking chunks
    users, items, grades = (list(column) for column in zip(*rows))
    if form == "csv":
        (tmp_path / "test.csv").write_text("user,item,rel\n" + "".join(f"{u},{i},{g}\n" for u, i, g in rows))
        test = tmp_path / "test.csv"
    else:
        pq.write_table(pa.table({"user": users, "item": items, "rel": grades}), tmp_path / "test.parquet")
        test = tmp_path / "test.parquet"
    run_lines = ["5 Q0 7 1 9.0 t", "5 Q0 007 2 8.0 t", "0042 Q0 9 1 1.0 t", "42 Q0 9 1 2.0 t", "42 Q0 7 2 1.0 t"]
    run_lines += [f"{u} Q0 {rng.integers(60)} 0 {rng.random():.6f} t" for u in range(1, 40)]
    (tmp_path / "r").write_text("\n".join(dict.fromkeys(run_lines)) + "\n")
    qrels: dict = {}
    for user, item, grade in rows:
        qrels.setdefault(user, {})[item] = grade
    with open(tmp_path / "r") as handle:
        run = pytrec_eval.parse_run(handle)
    read = files.read_interactions(test)  # the table's own ids, as written
    assert read.item_map.kind == "str" and read.user_map.kind == "str"
    assert {"007", "7", "9"} <= set(read.item_map.ids.tolist())
    assert {"0042", "42", "5"} <= set(read.user_map.ids.tolist())
    _assert_means(_evaluate(tmp_path / "r", test), _trec_eval_means(qrels, run))
