"""Text ids looked up in one hash table of the id map's ids, kept across a run's chunks.

Ids that differ only in case, in spaces, in leading zeros ("007", "07", "7"), in Unicode
normalization, or in the last byte of a long id are different ids; an id first seen in a late
chunk is found. Expected codes come from a Python dict of the ids; expected means from
pytrec_eval."""

from __future__ import annotations

import numpy as np
import pytest

import ignite_recsys as R
from ignite_recsys.data import IdMap

pa = pytest.importorskip("pyarrow")
pytrec_eval = pytest.importorskip("pytrec_eval")

TREC_EVAL = dict(gain_function="linear_rank", map_normalization="relevant", ignore_zero_hits=False)
MEASURES = {"ndcg@10": "ndcg_cut_10", "precision@5": "P_5", "map@100": "map_cut_100", "recall@10": "recall_10"}
LONG = "x" * 70_000  # longer than one pass of the hash over the text
TRICKY = ["7", "007", "07", "+7", " 7", "7 ", "Doc", "doc", "DOC", "", "é", "e\u0301", LONG + "a", LONG + "b", "a\tb"]


def _expected(keys: list, values: list) -> np.ndarray:
    position = {key: index for index, key in enumerate(keys)}
    return np.array([position.get(value, -1) for value in values], dtype=np.int64)


@pytest.mark.parametrize("sliced", [False, True])
def test_text_ids_are_found_exactly(sliced):
    rng = np.random.default_rng(0)
    keys = TRICKY + [f"doc{n}" for n in rng.permutation(5000)]
    id_map = IdMap(pa.array(keys), _distinct=True)
    others = ["7.0", "0007", "Doc ", "d o c", LONG, LONG + "c", "doc5000", "doc-1"]
    values = list(rng.permutation(np.array(keys + others, dtype=object)))
    array = pa.array(["pad"] * 3 + values)
    array = array.slice(3) if sliced else pa.array(values)
    codes = id_map.encode(array)
    np.testing.assert_array_equal(codes, _expected(keys, values))
    # the table is kept: a second lookup (a later chunk) gives the same answers
    np.testing.assert_array_equal(id_map.encode(pa.array(values[::-1])), _expected(keys, values[::-1]))


def test_look_alikes_of_the_ids_are_not_found():
    """Values that differ from an id only in case, spaces, zeros or normalization are absent."""
    keys = ["doc", "7", "d1", "é", LONG + "a"]
    id_map = IdMap(pa.array(keys), _distinct=True)
    values = ["DOC", "Doc", "doc ", "007", "07", "D1", "d1", "e\u0301", "é", LONG + "A", LONG, "7"]
    np.testing.assert_array_equal(id_map.encode(pa.array(values)), _expected(keys, values))


def test_ids_that_share_a_hash_are_still_told_apart(monkeypatch):
    """Where two of the map's ids hash alike, the lookup does without the hash table (exact)."""
    from ignite_recsys.data import _arrow

    monkeypatch.setattr(_arrow, "text_hashes", lambda array: np.zeros(len(array), dtype=np.uint64))
    keys = ["b", "a", "007", "7"]
    id_map = IdMap(pa.array(keys), _distinct=True)
    values = ["7", "a", "A", "007", "07", "b"]
    np.testing.assert_array_equal(id_map.encode(pa.array(values)), _expected(keys, values))


def test_a_map_that_grows_finds_its_new_ids():
    id_map = IdMap(pa.array(["b", "a"]), _distinct=True)
    assert id_map.encode(pa.array(["c", "a"])).tolist() == [-1, 1]
    id_map.encode(pa.array(["c", "B"]), add=True)
    assert id_map.encode(pa.array(["B", "c", "b", "C"])).tolist() == [2, 3, 0, -1]


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))


def test_look_alike_ids_across_many_chunks_equal_trec_eval(tmp_path, monkeypatch):
    """A run read in chunks of a few lines: look-alike user and item ids, items first seen in the
    last chunks, unknown items in every chunk; the means equal pytrec_eval's."""
    from ignite_recsys.data import files

    monkeypatch.setattr(files, "CHUNK_BYTES", 120)  # a chunk is 3 or 4 lines
    rng = np.random.default_rng(1)
    judged_items = ["7", "doc", "d1", "é"]  # the run also ranks look-alikes of these (never relevant)
    items = judged_items + ["007", "07", "Doc", "DOC", "D1", "e\u0301"]
    users = ["1", "01", "001", "u", "U", "u1", "U1"]
    qrels: dict = {user: {} for user in users}
    run: dict = {user: {} for user in users}
    for index, user in enumerate(users):
        judged = rng.choice(judged_items, 3, replace=False)
        qrels[user] = {str(item): int(rng.integers(0, 3)) for item in judged}
        ranked = list(rng.choice(items, 6, replace=False)) + [f"new{index}", f"NEW{index}"]
        if index == len(users) - 1:  # ids seen only in the last chunk: one judged, one not
            ranked += ["late", "Late"]
            qrels[user]["late"] = 2
        scores = np.round(rng.random(len(ranked)) * 10, 3)
        run[user] = {str(item): float(score) for item, score in zip(ranked, scores)}
    _write(tmp_path / "qrels", [f"{u} 0 {d} {g}" for u in users for d, g in qrels[u].items()])
    _write(tmp_path / "run", [f"{u} Q0 {d} 0 {s:.3f} t" for u in users for d, s in run[u].items()])
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "P.5", "map_cut.100", "recall.10"}).evaluate(run)
    expected = {key: np.mean([per_query[u][name] for u in users]) for key, name in MEASURES.items()}
    result = R.evaluate(str(tmp_path / "run"), str(tmp_path / "qrels"), list(MEASURES), progress=False, **TREC_EVAL)
    assert result.info["run_rows"] == sum(len(ranked) for ranked in run.values())
    for key, value in expected.items():
        assert result[key] == pytest.approx(value, abs=1e-12), key


def test_ids_with_spaces_in_csv_tables_equal_trec_eval(tmp_path):
    """CSV ids keep their spaces: " d1", "d1" and "d1 " are three items."""
    qrels = {"u1": {"d1": 1, " d1": 2}, "u 1": {"d1 ": 1, "d1": 0}}
    run = {"u1": {"d1 ": 3.0, " d1": 2.0, "d1": 1.0}, "u 1": {" d1": 3.0, "d1 ": 2.0, "x": 1.0}}
    _write(tmp_path / "qrels.csv", ["user,item,rel"] + [f"{u},{d},{g}" for u in qrels for d, g in qrels[u].items()])
    _write(tmp_path / "run.csv", ["user,item,score"] + [f"{u},{d},{s}" for u in run for d, s in run[u].items()])
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "P.5", "map_cut.100", "recall.10"}).evaluate(run)
    result = R.evaluate(
        str(tmp_path / "run.csv"), str(tmp_path / "qrels.csv"), list(MEASURES), progress=False, **TREC_EVAL
    )
    for key, name in MEASURES.items():
        assert result[key] == pytest.approx(np.mean([per_query[u][name] for u in qrels]), abs=1e-12), key


def test_text_hashes_depend_on_the_text_alone():
    """A value hashes alike wherever it sits (first, last, among longer or shorter neighbours, in
    a slice, alone), and values that differ in one byte, at any position of any word, or in
    length (trailing zero bytes included) hash differently."""
    from ignite_recsys.data._arrow import text_hashes

    rng = np.random.default_rng(1)
    texts = ["", "\0", "a", "a\0", "a\0\0"] + ["".join(rng.choice(list("abc"), size)) for size in range(1, 40)]
    texts += [text[:at] + ("x" if text[at] != "x" else "y") + text[at + 1 :] for text in texts[5:] for at in (0, -1)]
    # long values, more than a few of them (taken word by word with the others) and alone (a value
    # at a time), one byte apart at the start, the middle or the end
    long = "".join(rng.choice(list("abc"), 3000))
    texts += [long[:at] + "z" + long[at + 1 :] for at in range(0, 3000, 97)] + [long, long + "a", long[:-1]]
    texts = list(dict.fromkeys(texts))
    alone = {text: int(text_hashes(pa.array([text]))[0]) for text in texts}
    assert len(set(alone.values())) == len(texts)
    shuffled = [texts[at] for at in rng.permutation(len(texts))]
    padded = pa.array(["z" * 50] + shuffled + ["q" * 9])
    for array, values in ((pa.array(shuffled), shuffled), (padded.slice(1, len(shuffled)), shuffled)):
        assert [int(value) for value in text_hashes(array)] == [alone[text] for text in values]
    assert text_hashes(pa.array([], pa.string())).shape == (0,)
