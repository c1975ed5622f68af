"""Edges of reading and evaluating: integer ids past int64 in every table form refused with the
column, row and id (never wrapped around to a negative id); TREC files with classic Mac OS line
ends (CR alone) read as their LF twins (pytrec_eval gives the expected values); one rule for the
progress bar of ``evaluate()`` and the command line; ``y`` optional in the functions of the list
metrics that read no relevance."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest
import torch

import ignite_recsys as R
from ignite_recsys import functional as F
from ignite_recsys.data import FileFormatError, IdMap, Interactions, read_interactions
from ignite_recsys.data.files import trec_chunks

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

BIG = 2**63 + 5  # a uint64 hash past int64: as int64 it would read -9223372036854775803
INT64_MAX = 2**63 - 1


def _uint64_table(user_ids, item_ids):
    return pa.table({"user": pa.array(user_ids, pa.uint64()), "item": pa.array(item_ids, pa.uint64())})


# --- integer ids past int64 ----------------------------------------------------------------------
@pytest.mark.parametrize("form", ["arrow", "arrow_chunked", "arrow_dictionary", "pandas", "polars"])
def test_from_frame_refuses_a_uint64_id_past_int64_naming_column_row_and_id(form):
    table = _uint64_table([1, 2, 3], [7, BIG, 9])
    if form == "arrow_chunked":
        table = pa.concat_tables([table.slice(0, 1), table.slice(1)])
    elif form == "arrow_dictionary":
        table = table.set_column(1, "item", table.column("item").dictionary_encode())
    elif form == "pandas":
        table = pytest.importorskip("pandas").DataFrame(table.to_pydict()).astype("uint64")
    elif form == "polars":
        table = pytest.importorskip("polars").from_arrow(table)
    with pytest.raises(ValueError, match=f"items: id {BIG} at row 1 does not fit in int64.*as strings"):
        Interactions.from_frame(table, user="user", item="item")


def test_every_arrow_entry_point_refuses_ids_past_int64():
    users = pa.array([1, BIG], pa.uint64())
    with pytest.raises(ValueError, match=f"users: id {BIG} at row 1 does not fit in int64"):
        Interactions(users, pa.array([0, 1], pa.int64()))
    with pytest.raises(ValueError, match=f"IdMap ids: id {BIG} at row 1 does not fit in int64"):
        IdMap(users)
    with pytest.raises(ValueError, match=f"ids: id {BIG} at row 1 does not fit in int64"):
        IdMap.from_values(users)
    with pytest.raises(ValueError, match=f"run users: id {BIG} at row 1 does not fit in int64"):
        IdMap([1, 2]).encode(users, name="run users")
    with pytest.raises(ValueError, match=f"ids: id {2**63} at row 0 does not fit in int64"):
        IdMap.from_values(np.array([2**63], dtype=np.uint64))


def test_uint64_ids_within_int64_are_read_as_they_are():
    table = _uint64_table([1, INT64_MAX], [INT64_MAX, 3])
    test = Interactions.from_frame(table, user="user", item="item")
    assert test.user_map.ids.tolist() == [1, INT64_MAX]
    assert test.item_map.ids.tolist() == [3, INT64_MAX]
    assert test.item_ids(test.users).ids.tolist() == [[1], [0]]  # user 1 -> item INT64_MAX (dense 1)


def test_a_parquet_file_of_uint64_ids_past_int64_is_refused_not_wrapped(tmp_path):
    # (wrapped, the ids read as -9223372036854775803 and -1, and the evaluation went on)
    pq.write_table(_uint64_table([1, BIG, 2**64 - 1], [BIG, 3, 4]), tmp_path / "t.parquet")
    with pytest.raises(FileFormatError, match=f"t.parquet, row 2, column user: id {BIG} does not fit in int64"):
        read_interactions(tmp_path / "t.parquet")
    run = pa.table(
        {"user": pa.array([1, 2], pa.uint64()), "item": pa.array([3, BIG], pa.uint64()), "score": [1.0, 2.0]}
    )
    pq.write_table(run, tmp_path / "run.parquet")
    pq.write_table(_uint64_table([1, 2], [3, 4]), tmp_path / "ok.parquet")
    with pytest.raises(FileFormatError, match=f"run.parquet, row 2, column item: id {BIG} does not fit in int64"):
        R.evaluate(tmp_path / "run.parquet", tmp_path / "ok.parquet", ["P@1"], progress=False)


def test_ids_past_int64_given_as_strings_are_read(tmp_path):
    table = pa.table({"user": ["1", str(BIG)], "item": [str(BIG), "3"]})
    test = Interactions.from_frame(table, user="user", item="item")
    assert test.user_map.ids.tolist() == ["1", str(BIG)]


# --- classic Mac OS line ends (CR alone) ------------------------------------------------------------
QRELS = "q1 0 d1 1\nq1 0 d2 0\nq1 0 d3 2\nq2 0 d1 1\nq2 0 d4 1\n"
RUN = "q1 Q0 d3 1 0.9 r\nq1 Q0 d2 2 0.8 r\nq1 Q0 d1 3 0.7 r\nq2 Q0 d4 1 0.5 r\nq2 Q0 d2 2 0.4 r\n"


def _pytrec_means(qrels: str, run: str) -> dict:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    judged: dict = {}
    for line in qrels.splitlines():
        user, _, item, grade = line.split()
        judged.setdefault(user, {})[item] = int(grade)
    ranked: dict = {}
    for line in run.splitlines():
        user, _, item, _, score, _ = line.split()
        ranked.setdefault(user, {})[item] = float(score)
    values = pytrec_eval.RelevanceEvaluator(judged, {"ndcg_cut.10", "P.1", "recip_rank"}).evaluate(ranked)
    return {
        "ndcg@10": np.mean([v["ndcg_cut_10"] for v in values.values()]),
        "precision@1": np.mean([v["P_1"] for v in values.values()]),
        "mrr@10": np.mean([v["recip_rank"] for v in values.values()]),
    }


@pytest.mark.parametrize("ends", ["cr", "cr_no_final"])
def test_trec_files_with_cr_line_ends_read_as_with_lf(tmp_path, ends):
    def written(text: str) -> bytes:
        if ends == "cr":
            return text.replace("\n", "\r").encode()
        return text.rstrip("\n").replace("\n", "\r").encode()

    (tmp_path / "q").write_bytes(written(QRELS))
    (tmp_path / "r").write_bytes(written(RUN))
    result = R.evaluate(
        tmp_path / "r", tmp_path / "q", ["ndcg@10", "P@1", "mrr@10"], progress=False, gain_function="linear_rank"
    )
    expected = _pytrec_means(QRELS, RUN)
    for key, value in expected.items():
        assert result[key] == pytest.approx(value, abs=1e-12), key


def test_cr_line_ends_across_block_boundaries(tmp_path):
    """Blocks of every size from 1 byte: a CR at a block's end (its LF, if any, in the next
    block) ends one line, and the lines and their numbers are those of the LF file."""
    text = "a 0 x 1\rb 0 y 2\rc 0 z 3\rd 0 w 4\r"
    (tmp_path / "q").write_bytes(text.encode())
    for size in range(1, len(text) + 2):
        chunks = list(
            trec_chunks(tmp_path / "q", ("qid", "iteration", "docid", "rel"), ("qid", "rel"), block_size=size)
        )
        lines = [first + row for first, columns in chunks for row in range(len(columns["qid"]))]
        users = [value for _, columns in chunks for value in columns["qid"].to_pylist()]
        assert users == ["a", "b", "c", "d"] and lines == [1, 2, 3, 4], size


def test_crlf_and_lf_after_a_first_block_of_cr_line_ends(tmp_path):
    """A file whose first block ends its lines in CR alone takes CRLF and LF as line ends too
    (a CR at a block's end followed by the next block's LF is one line end)."""
    text = b"a 0 x 1\rb 0 y 2\rc 0 z 3\r\nd 0 w 4\ne 0 v 5\r\n"
    (tmp_path / "q").write_bytes(text)
    for size in range(1, 25):  # a first block without LF (the first is at byte 25)
        chunks = list(trec_chunks(tmp_path / "q", ("qid", "iteration", "docid", "rel"), ("qid",), block_size=size))
        users = [value for _, columns in chunks for value in columns["qid"].to_pylist()]
        lines = [first + row for first, columns in chunks for row in range(len(columns["qid"]))]
        assert users == ["a", "b", "c", "d", "e"] and lines == [1, 2, 3, 4, 5], size


def test_a_malformed_line_of_a_cr_file_is_named(tmp_path):
    (tmp_path / "q").write_bytes(b"q1 0 d1 1\rq1 0 d2\rq2 0 d1 1\r")
    (tmp_path / "r").write_bytes(RUN.encode())
    with pytest.raises(FileFormatError, match=r"q, line 2: expected 4 fields .* got 3"):
        R.evaluate(tmp_path / "r", tmp_path / "q", ["P@1"], progress=False)


def test_a_lone_cr_in_a_file_of_lf_lines_is_a_space(tmp_path):
    (tmp_path / "q").write_bytes(b"q1 0 d1 1\r \nq2 0 d1\r1\n")  # LF first: CR stays a space
    (tmp_path / "r").write_bytes(RUN.encode())
    result = R.evaluate(tmp_path / "r", tmp_path / "q", ["P@3"], progress=False)
    assert result["P@3"] == pytest.approx(np.mean([1 / 3, 0.0]), abs=1e-12)


# --- one rule for the progress bar -----------------------------------------------------------------
class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("terminal", [False, True])
def test_evaluate_draws_its_bar_only_on_a_terminal(monkeypatch, terminal):
    pytest.importorskip("tqdm")
    stream = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    test = Interactions(torch.tensor([0, 1, 2]), torch.tensor([1, 2, 3]), num_items=5)
    scores = torch.rand(3, 5, generator=torch.Generator().manual_seed(0))
    R.evaluate(lambda users: scores[users], test, ["P@1"], batch_size=1)  # progress=True, the default
    assert ("evaluate:" in stream.getvalue()) == terminal
    stream.truncate(0)
    R.evaluate(lambda users: scores[users], test, ["P@1"], batch_size=1, progress=False)
    assert "evaluate:" not in stream.getvalue()


def test_progress_rule():
    from ignite_recsys.evaluation import progress_shown

    assert progress_shown(True, _Terminal()) and not progress_shown(False, _Terminal())
    assert not progress_shown(True, io.StringIO())
    closed = io.StringIO()
    closed.close()
    assert not progress_shown(True, closed)  # isatty raises ValueError on a closed stream
    assert not progress_shown(True, object())  # no isatty at all


# --- y optional where a list metric reads no relevance --------------------------------------------
def _mean_popularity_reference(scores: np.ndarray, popularity: np.ndarray, k: int) -> np.ndarray:
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return popularity[top].mean(1)


def test_list_functions_take_no_y_where_they_read_no_relevance():
    rng = np.random.default_rng(3)
    scores = rng.random((4, 9)).astype(np.float32)
    popularity = rng.integers(0, 50, 9).astype(np.float64)
    expected = _mean_popularity_reference(scores, popularity, 3)
    pop = torch.from_numpy(popularity)
    given = torch.from_numpy(scores)
    for values in (
        F.average_popularity(given, None, [3], pop),
        F.average_popularity(given, top_k=[3], item_popularity=pop),
        F.average_popularity(R.RankedItems(torch.from_numpy(np.argsort(-scores, 1)[:, :5])), None, [3], pop),
    ):
        np.testing.assert_allclose(values[:, 0].numpy(), expected, rtol=0, atol=1e-12)
    labels = torch.from_numpy(rng.integers(0, 2, (4, 9)))
    features = torch.from_numpy(rng.random((9, 5)))
    for name, extra in (("novelty", pop), ("intra_list_diversity", features), ("mean_pop_rank", pop)):
        function = getattr(F, name)
        assert torch.equal(function(given, None, [2, 3], extra), function(given, labels, [2, 3], extra)), name


def test_functions_that_read_relevance_still_need_y():
    pop = torch.arange(9.0)
    with pytest.raises(TypeError, match="y must be a torch.Tensor"):
        F.serendipity(torch.rand(4, 9), None, [3], pop)
    with pytest.raises(TypeError, match="missing a required argument: 'y'"):
        F.epc(torch.rand(4, 9), top_k=[3], item_popularity=pop, num_users=4)
