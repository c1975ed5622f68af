"""Reading a run: its items are looked up only among the items the test (and exclusion) table
holds for the users of each chunk, every other item being an unjudged item of its list (checked
against pytrec_eval over many small chunks, with items judged for other users, items no table
knows, exclusions, and a repeated unjudged item); the reader threads end with the call; the
lists are padded and batched as the metrics take them; only the fields read are checked as text."""

from __future__ import annotations

import numpy as np
import pytest

import ignite_recsys as R
from ignite_recsys.data import FileFormatError, files, read_trec_qrels
from ignite_recsys.data.runs import RunStream, run_chunks

pytest.importorskip("pyarrow")
pytrec_eval = pytest.importorskip("pytrec_eval")

TREC_EVAL = dict(gain_function="linear_rank", map_normalization="relevant", ignore_zero_hits=False)
MEASURES = {"ndcg@10": "ndcg_cut_10", "precision@5": "P_5", "map@100": "map_cut_100", "r_precision": "Rprec"}


def _tables(seed: int = 0) -> tuple:
    """qrels and run dicts over one pool of 40 documents (so a user's list holds documents judged
    for other users), with documents no qrels judges, and exclusions of judged and unjudged ones."""
    rng = np.random.default_rng(seed)
    qrels, run, exclude = {}, {}, {}
    for q in range(60):
        judged = rng.choice(40, int(rng.integers(1, 8)), replace=False)
        qrels[f"q{q}"] = {f"d{d}": int(rng.integers(0, 3)) for d in judged}
        ranked = rng.choice(70, int(rng.integers(5, 30)), replace=False)  # d40..d69: judged for nobody
        run[f"q{q}"] = {f"d{d}": float(s) for d, s in zip(ranked, rng.permutation(len(ranked)) / 3 + 1)}
        exclude[f"q{q}"] = [f"d{d}" for d in rng.choice(ranked, 2, replace=False)]
    return qrels, run, exclude


def _write(folder, qrels, run, exclude=None):
    (folder / "test.qrels").write_text(
        "".join(f"{q} 0 {d} {g}\n" for q, docs in qrels.items() for d, g in docs.items())
    )
    ordered = {q: sorted(docs.items(), key=lambda item: -item[1]) for q, docs in run.items()}
    (folder / "run.trec").write_text(
        "".join(f"{q} Q0 {d} {r} {s!r} t\n" for q, docs in ordered.items() for r, (d, s) in enumerate(docs, 1))
    )
    if exclude is not None:
        (folder / "train.csv").write_text(
            "user,item\n" + "".join(f"{q},{d}\n" for q, docs in exclude.items() for d in docs)
        )


@pytest.mark.parametrize("chunk_bytes", [2000, 1 << 20])  # about six users a chunk, and one chunk
@pytest.mark.parametrize("excluded", [False, True])
def test_a_run_over_a_shared_pool_equals_trec_eval_per_user(tmp_path, monkeypatch, chunk_bytes, excluded):
    monkeypatch.setattr(files, "CHUNK_BYTES", chunk_bytes)
    qrels, run, exclude = _tables()
    _write(tmp_path, qrels, run, exclude)
    result = R.evaluate(
        tmp_path / "run.trec",
        tmp_path / "test.qrels",
        metrics=list(MEASURES),
        exclude=tmp_path / "train.csv" if excluded else None,
        per_user=True,
        progress=False,
        **TREC_EVAL,
    )
    if excluded:  # the reference: the excluded rows removed from the run by hand
        run = {q: {d: s for d, s in docs.items() if d not in exclude[q]} for q, docs in run.items()}
    reference = pytrec_eval.RelevanceEvaluator(qrels, set(MEASURES.values())).evaluate(run)
    users = list(result.user_ids)
    assert users == sorted(qrels)
    for key, measure in MEASURES.items():
        ours = dict(zip(users, result.per_user()[key].tolist()))
        for query in qrels:
            assert ours[query] == pytest.approx(reference[query][measure], abs=1e-12), (key, query)


def test_an_unjudged_item_ranked_twice_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "CHUNK_BYTES", 64)
    (tmp_path / "test.qrels").write_text("q1 0 a 1\nq2 0 b 1\n")
    # q2 ranks z twice: z is judged for nobody (and b, judged for q2, once)
    (tmp_path / "run.trec").write_text("q1 Q0 a 1 3 t\nq1 Q0 z 2 2 t\nq2 Q0 z 1 3 t\nq2 Q0 b 2 2 t\nq2 Q0 z 3 1 t\n")
    with pytest.raises(FileFormatError, match=r"line 5.*ranks item 'z' twice \(also at line 3\)"):
        R.evaluate(tmp_path / "run.trec", tmp_path / "test.qrels", ["P@1"], progress=False)


@pytest.mark.parametrize("repeated", [False, True])
def test_items_whose_text_hashes_collide_are_told_apart_by_their_text(tmp_path, monkeypatch, repeated):
    """The reader tells a list's unjudged items apart by a hash of their text, and compares the
    text of rows whose hashes are equal: with every hash equal, the lists are still read right,
    and a repeated item is still refused."""
    from ignite_recsys.data import runs

    monkeypatch.setattr(files, "CHUNK_BYTES", 2000)
    monkeypatch.setattr(runs, "text_hashes", lambda array: np.zeros(len(array), dtype=np.uint64))
    qrels, run, _ = _tables(seed=2)
    _write(tmp_path, qrels, run)
    if repeated:  # q7 ranks its last item again, below the others
        lines = (tmp_path / "run.trec").read_text().splitlines(keepends=True)
        last = max(number for number, line in enumerate(lines) if line.startswith("q7 "))
        query, _, document, rank, _, tag = lines[last].split()
        lines.insert(last + 1, f"{query} Q0 {document} {int(rank) + 1} 0.0 {tag}\n")
        (tmp_path / "run.trec").write_text("".join(lines))
        message = rf"line {last + 2}.*ranks item '{document}' twice \(also at line {last + 1}\)"
        with pytest.raises(FileFormatError, match=message):
            R.evaluate(tmp_path / "run.trec", tmp_path / "test.qrels", ["P@1"], progress=False)
        return
    result = R.evaluate(
        tmp_path / "run.trec", tmp_path / "test.qrels", list(MEASURES), per_user=True, progress=False, **TREC_EVAL
    )
    reference = pytrec_eval.RelevanceEvaluator(qrels, set(MEASURES.values())).evaluate(run)
    for key, measure in MEASURES.items():
        ours = dict(zip(result.user_ids, result.per_user()[key].tolist()))
        for query in qrels:
            assert ours[query] == pytest.approx(reference[query][measure], abs=1e-12), (key, query)


def test_the_judged_items_get_their_ids_in_the_item_map(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "CHUNK_BYTES", 2000)
    qrels, run, _ = _tables(seed=1)
    _write(tmp_path, qrels, run)
    test = read_trec_qrels(tmp_path / "test.qrels")
    base = len(test.item_map)
    ids = dict(zip(test.item_map.ids.tolist(), range(base)))
    stream = RunStream(run_chunks(tmp_path / "run.trec"), test, unknown_base=base, match_only=(test,))
    checked = 0
    for positions, items, lengths in stream:
        for position, row in zip(positions, np.split(items, np.cumsum(lengths)[:-1])):
            user = test.user_map.ids[int(test.users[position])]
            ranked = [d for d, _ in sorted(run[user].items(), key=lambda item: -item[1])]
            for document, code in zip(ranked, row.tolist()):
                if document in qrels[user]:  # judged for this user: its id in the map
                    assert code == ids[document]
                else:  # any other: its id in the map (judged for another user of the chunk) or one past the map's
                    assert code == ids.get(document) or code >= base
                checked += 1
            assert len(set(row.tolist())) == len(row)
    assert checked == sum(map(len, run.values()))


def _reader_threads() -> list:
    import threading

    return [thread.name for thread in threading.enumerate() if thread.name.startswith("ignite_recsys-run-")]


@pytest.mark.parametrize(
    "bad_line, match",
    [("q2 Q0 d1 1 high t\n", r"line 9.*score"), ("q2 Q0 d1 1\n", "line 9: expected 6 fields"), ("", None)],
)
def test_the_reader_threads_end_with_the_call(tmp_path, monkeypatch, bad_line, match):
    """The run is parsed and grouped into lists by two threads: an error of either reaches the
    caller naming its line, a run whose users' rows are split is read again, and no thread is
    left behind in any case."""
    monkeypatch.setattr(files, "CHUNK_BYTES", 64)  # a few lines a chunk: both threads run ahead
    (tmp_path / "test.qrels").write_text("".join(f"q{u} 0 d1 1\n" for u in range(10)))
    rows = [f"q{u} Q0 d{i} {i} {1 - i / 10} t\n" for u in range(10) for i in range(1, 5)]
    rows.insert(8, bad_line or "q0 Q0 d9 9 0.95 t\n")  # (q0 again after q1: split rows) 32 lines follow
    (tmp_path / "run.trec").write_text("".join(rows))
    if match is None:
        result = R.evaluate(tmp_path / "run.trec", tmp_path / "test.qrels", ["P@1"], progress=False)
        # q0's d9 (0.95), read after q1's rows, ranks first: 9 of the 10 users hit
        assert result["P@1"] == pytest.approx(0.9) and result.info["run_grouped_in_memory"] is True
    else:
        with pytest.raises(FileFormatError, match=match):
            R.evaluate(tmp_path / "run.trec", tmp_path / "test.qrels", ["P@1"], progress=False)
    assert _reader_threads() == []


def test_a_run_is_evaluated_in_whole_batches_of_users(tmp_path, monkeypatch):
    """Chunks end anywhere in the users: the users past a chunk's last whole batch wait for the
    next chunk, so every update but the last gets batch_size users (and the values do not change)."""
    from ignite_recsys.metrics import RankingMetrics

    monkeypatch.setattr(files, "CHUNK_BYTES", 300)  # about 3 users a chunk
    qrels, run, _ = _tables(seed=2)
    _write(tmp_path, qrels, run)
    sizes = []
    update = RankingMetrics.update

    def counted(self, output):
        sizes.append(len(output[0].ids))
        return update(self, output)

    monkeypatch.setattr(RankingMetrics, "update", counted)
    result = R.evaluate(
        tmp_path / "run.trec", tmp_path / "test.qrels", ["ndcg@10"], batch_size=7, progress=False, **TREC_EVAL
    )
    assert sizes == [7] * 8 + [4]  # the 60 users
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate(run)
    assert result["ndcg@10"] == pytest.approx(np.mean([reference[q]["ndcg_cut_10"] for q in qrels]), abs=1e-12)


@pytest.mark.parametrize("lengths", [[3, 3, 3], [3, 1, 4], [2], [5, 5]])
@pytest.mark.parametrize("depth", [None, 1, 3, 10])
def test_lists_are_padded_rows_cut_at_the_depth(lengths, depth):
    from ignite_recsys.evaluation import _padded

    items = np.arange(100, 100 + sum(lengths))
    lists = np.split(items, np.cumsum(lengths)[:-1])
    kept = [list(row[:depth] if depth is not None else row) for row in lists]
    width = max(max(len(row) for row in kept), 1)
    expected = [row + [-1] * (width - len(row)) for row in kept]
    assert _padded(items, np.array(lengths), depth).tolist() == expected


def test_an_error_after_the_file_is_parsed_leaves_no_thread(tmp_path, monkeypatch):
    """The parser may be done, its queue full, when the list thread fails on the last chunk: the
    parser's last hand-over gives way too, and the call leaves no thread behind."""
    import time

    monkeypatch.setattr(files, "CHUNK_BYTES", 64)
    lists = RunStream._lists

    def slow(self, *args):  # the list thread well behind the parser
        time.sleep(0.05)
        yield from lists(self, *args)

    monkeypatch.setattr(RunStream, "_lists", slow)
    (tmp_path / "test.qrels").write_text("".join(f"q{u} 0 d1 1\n" for u in range(10)))
    rows = [f"q{u} Q0 d{i} {i} {1 - i / 10} t\n" for u in range(10) for i in range(1, 5)]
    rows[29] = "q7 Q0 d2 2 high t\n"  # (chunks of about 3 lines: a few more follow)
    (tmp_path / "run.trec").write_text("".join(rows))
    with pytest.raises(FileFormatError, match=r"line 30.*score"):
        R.evaluate(tmp_path / "run.trec", tmp_path / "test.qrels", ["P@1"], progress=False)
    assert _reader_threads() == []


def test_only_the_fields_read_must_be_utf8(tmp_path):
    """trec_eval reads the run's qid, docid and score and skips the others: a byte that is not
    UTF-8 in a skipped field is read; in a field read it is refused, naming its line and field."""
    (tmp_path / "test.qrels").write_bytes(b"q1 0 a 1\nq2 0 b 1\n")
    (tmp_path / "run.trec").write_bytes(b"q1 Q0 a 1 2.0 t\xff\nq2 \xfe b 1 2.0 t\n")
    result = R.evaluate(tmp_path / "run.trec", tmp_path / "test.qrels", ["P@1"], progress=False)
    assert result["P@1"] == 1.0
    (tmp_path / "run.trec").write_bytes(b"q1 Q0 a 1 2.0 t\xff\nq2 Q0 b 1 2.0 t\nq2 Q0 c\xff 2 1.0 t\n")
    with pytest.raises(FileFormatError, match=r"line 3, column 3 \(docid\): is not UTF-8 text"):
        R.evaluate(tmp_path / "run.trec", tmp_path / "test.qrels", ["P@1"], progress=False)


def test_text_ids_against_integer_ids_match_only_integers_written_the_one_way(tmp_path):
    """trec_eval compares ids as text: against integer ids, '-0' is not item 0, and a text that
    is not an integer (here against a map holding item -1) is no test item and no repeat."""
    (tmp_path / "test.csv").write_text("user,item\n1,0\n1,5\n2,5\n")
    (tmp_path / "run.trec").write_text("1 Q0 -0 1 2.0 t\n1 Q0 7 2 1.0 t\n2 Q0 5 1 2.0 t\n")
    result = R.evaluate(tmp_path / "run.trec", tmp_path / "test.csv", ["P@1"], per_user=True, progress=False)
    reference = pytrec_eval.RelevanceEvaluator({"1": {"0": 1, "5": 1}, "2": {"5": 1}}, {"P_1"}).evaluate(
        {"1": {"-0": 2.0, "7": 1.0}, "2": {"5": 2.0}}
    )
    assert result.per_user()["precision@1"].tolist() == [reference["1"]["P_1"], reference["2"]["P_1"]] == [0.0, 1.0]
    test = R.Interactions.from_frame({"user": ["u1", "u1"], "item": [-1, 5]})  # an integer map holding -1
    run = {"user": ["u1", "u1", "u1"], "item": ["abc", "zzz", "5"], "score": [3.0, 2.0, 1.0]}
    result = R.evaluate(run, test, ["P@1", "P@3"], progress=False)
    assert result.means == {"precision@1": 0.0, "precision@3": pytest.approx(1 / 3)}


@pytest.mark.parametrize(
    "run, where",
    [
        ("01 Q0 7 1 3.0 t\n2 Q0 40 1 2.0 t\n", r"line 1, column 1 \(qid\): user id '01' is not written as an integer"),
        ("1 Q0 7 1 3.0 t\n2 Q0 040 1 2.0 t\n2 Q0 5 2 1.0 t\n", r"line 2, column 3 \(docid\): item id '040' is not"),
        ("1 Q0 7 1 3.0 t\n1 Q0 +7 2 2.0 t\n", r"line 2, column 3 \(docid\): id must be an integer, got '\+7'"),
    ],
)
def test_text_ids_of_another_spelling_against_dense_ids_are_refused(tmp_path, run, where):
    """A test table of dense integer ids (no id map) read the run's '01' as user 1 and '040' as
    item 40 (MRR 1.0 where trec_eval, comparing text, gives 0.0; a mapped table matches none):
    refused, naming the line and column, as an id that is no integer ('Z') is."""
    import torch

    test = R.Interactions(torch.tensor([1, 2]), torch.tensor([7, 40]))
    (tmp_path / "run.trec").write_text(run)
    with pytest.raises(FileFormatError, match=where):
        R.evaluate(tmp_path / "run.trec", test, ["mrr@10"], progress=False)
    canonical = run.replace("01 Q0", "1 Q0").replace(" 040 ", " 40 ")
    if "+7" not in run:  # the same run written the one way: trec_eval's value
        (tmp_path / "run.trec").write_text(canonical)
        result = R.evaluate(tmp_path / "run.trec", test, ["mrr@10"], per_user=True, progress=False)
        parsed = [line.split() for line in canonical.splitlines()]
        trec_run: dict = {}
        for user, _, item, _, score, _ in parsed:
            trec_run.setdefault(user, {})[item] = float(score)
        reference = pytrec_eval.RelevanceEvaluator({"1": {"7": 1}, "2": {"40": 1}}, {"recip_rank"}).evaluate(trec_run)
        assert result.per_user()["mrr@10"].tolist() == [reference["1"]["recip_rank"], reference["2"]["recip_rank"]]


def test_the_run_is_read_ahead_while_the_test_table_is_read_within_its_bound(tmp_path, monkeypatch):
    """A run file's parser starts before the test table is read and stops RUN_PIECES_AHEAD
    pieces ahead until the lists take the first; the means are pytrec_eval's."""
    import time

    from ignite_recsys import evaluation

    monkeypatch.setattr(files, "CHUNK_BYTES", 64)  # a piece is a user or two
    monkeypatch.setattr(evaluation, "RUN_PIECES_AHEAD", 3)
    made = []
    pieces = evaluation.user_pieces

    def counted(*args, **kwargs):
        for piece in pieces(*args, **kwargs):
            made.append(time.perf_counter())
            yield piece

    tables = evaluation._tables
    read = {}

    def slow_tables(*args):
        time.sleep(0.3)  # the parser has the time to read the whole run meanwhile
        read["at"] = time.perf_counter()
        return tables(*args)

    monkeypatch.setattr(evaluation, "user_pieces", counted)
    monkeypatch.setattr(evaluation, "_tables", slow_tables)
    (tmp_path / "test.qrels").write_text("".join(f"q{u} 0 d{u % 3} 1\n" for u in range(20)))
    (tmp_path / "run.trec").write_text(
        "".join(f"q{u} Q0 d{i} {i} {1 - i / 10} t\n" for u in range(20) for i in range(3))
    )
    result = R.evaluate(tmp_path / "run.trec", tmp_path / "test.qrels", ["P@1", "recall@2"], progress=False)
    ahead = sum(at < read["at"] for at in made)
    assert ahead == 3 + 1  # the bound, and the piece made while waiting for a place
    assert len(made) > 10
    with open(tmp_path / "run.trec") as run_file, open(tmp_path / "test.qrels") as qrels_file:
        run, qrels = pytrec_eval.parse_run(run_file), pytrec_eval.parse_qrel(qrels_file)
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"P.1", "recall.2"}).evaluate(run)
    assert result["P@1"] == pytest.approx(np.mean([value["P_1"] for value in expected.values()]))
    assert result["recall@2"] == pytest.approx(np.mean([value["recall_2"] for value in expected.values()]))
    assert _reader_threads() == []


@pytest.mark.parametrize("run_name", ["run.trec", "missing.trec", "run.parquet"])
def test_an_error_in_the_test_table_comes_first_and_leaves_no_thread(tmp_path, run_name):
    """The run's reader, started before the test table is read, stops when the test table is
    refused; the test table's error is raised, as it was before the run was read (a missing run
    file or a run table without its columns included)."""
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    (tmp_path / "run.trec").write_text("".join(f"q{u} Q0 d{i} {i} 1.0 t\n" for u in range(2000) for i in range(5)))
    pq.write_table(pa.table({"x": ["q1"], "y": ["d1"]}), tmp_path / "run.parquet")
    (tmp_path / "test.qrels").write_text("q1 0 d1 1\nq1 0 d1\n")
    with pytest.raises(FileFormatError, match=r"test.qrels, line 2: expected 4 fields"):
        R.evaluate(tmp_path / run_name, tmp_path / "test.qrels", ["P@1"], progress=False)
    assert _reader_threads() == []


def test_pieces_prepared_ahead_are_ranked_in_the_streams_score_precision(tmp_path):
    """Pieces prepared ahead hold the scores as read; the stream compares them in its own
    precision: 0.50000001 and 0.5 differ in float64 and tie in float32 (then the larger docid,
    d2, comes first, as trec_eval)."""
    from ignite_recsys.data.runs import user_pieces

    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 0.50000001 t\nq1 Q0 d2 2 0.5 t\n")
    (tmp_path / "test.qrels").write_text("q1 0 d1 1\nq1 0 d2 1\n")
    test = read_trec_qrels(tmp_path / "test.qrels")
    d1, d2 = test.item_map.encode(["d1", "d2"]).tolist()
    for precision, expected in (("float64", [d1, d2]), ("float32", [d2, d1])):
        chunks = run_chunks(tmp_path / "run.trec")
        chunks.pieces = user_pieces(chunks)
        assert [part[1].tolist() for part in RunStream(chunks, test, score_precision=precision)] == [expected]
