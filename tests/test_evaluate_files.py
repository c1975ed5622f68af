"""Interactions, evaluate() and the file readers: values against the metric classes, pytrec_eval
(trec_eval) and ranx on generated data, and every kind of bad input."""

from __future__ import annotations

import io
import json
import math
import sys
import warnings

import numpy as np
import pytest
import torch

import ignite_recsys as R
from ignite_recsys.data import FileFormatError, Interactions, read_interactions, read_trec_qrels
from ignite_recsys.evaluation import parse_metrics

pa = pytest.importorskip("pyarrow")
pc = pytest.importorskip("pyarrow.compute")
pq = pytest.importorskip("pyarrow.parquet")
pd = pytest.importorskip("pandas")
pytrec_eval = pytest.importorskip("pytrec_eval")

TREC_EVAL = dict(gain_function="linear_rank", map_normalization="relevant", ignore_zero_hits=False)
# our key -> trec_eval measure (pytrec_eval names)
TREC_MEASURES = {
    "ndcg@10": "ndcg_cut_10",
    "precision@5": "P_5",
    "recall@20": "recall_20",
    "map@100": "map_cut_100",
    "mrr@1000": "recip_rank",
    "r_precision": "Rprec",
    "hit_rate@5": "success_5",
}
METRICS = ["ndcg@10", "P@5", "recall@20", "map@100", "recip_rank@1000", "r_precision", "success@5"]


# --- Interactions ----------------------------------------------------------------------------
def test_non_consecutive_users_get_their_own_rows_where_the_old_helper_mixed_them():
    """The scenario of docs/inputs.md: test users [0, 1, 3], a batch of users [0, 3]."""
    test_users, test_items, num_items = torch.tensor([0, 0, 1, 3, 3]), torch.tensor([1, 4, 0, 2, 5]), 6

    def old_test_set_of(users):  # the hand-written helper the docs offered
        start = torch.searchsorted(test_users, users)
        end = torch.searchsorted(test_users, users[-1:], right=True)
        row_pointers = torch.cat([start, end]) - start[0]
        items = test_items[start[0] : end[0]]
        return torch.sparse_csr_tensor(row_pointers, items, torch.ones(len(items)), size=(len(users), num_items))

    batch = torch.tensor([0, 3])
    expected = np.zeros((2, num_items))
    expected[0, [1, 4]] = 1  # user 0: items 1 and 4
    expected[1, [2, 5]] = 1  # user 3: items 2 and 5
    with warnings.catch_warnings():  # torch's beta notice for sparse CSR, given once a process (or not)
        warnings.simplefilter("ignore", UserWarning)
        wrong = old_test_set_of(batch).to_dense().numpy()
    assert wrong[0, 0] == 1 and not np.array_equal(wrong, expected)  # user 1's item 0 landed in user 0's row
    table = Interactions(test_users, test_items, num_items=num_items)
    np.testing.assert_array_equal(table.csr(batch).to_dense().numpy(), expected)
    ids = table.item_ids(batch)
    assert ids.ids.tolist() == [[1, 4], [2, 5]]
    # any order, repeats, and users without rows
    np.testing.assert_array_equal(
        table.csr(torch.tensor([3, 2, 0, 3])).to_dense().numpy(),
        expected[[1, 0, 0, 1]] * np.array([[1], [0], [1], [1]]),
    )


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.uint64])
def test_integer_ids_of_any_dtype(dtype):
    users, items = np.array([5, 2, 5], dtype=dtype), np.array([1, 0, 3], dtype=dtype)
    table = Interactions(users, items, values=np.array([2, 1, 3]))
    assert table.num_items == 4 and table.users.tolist() == [2, 5]
    assert table.item_ids(torch.tensor([5, 2])).ids.tolist() == [[1, 3], [0, -1]]
    assert table.item_ids(torch.tensor([5])).grades.tolist() == [[2.0, 3.0]]


def test_string_ids_are_mapped_and_a_shared_map_numbers_every_table_alike():
    test = Interactions(["bob", "ann", "bob"], ["x", "y", "z"], values=[1, 2, 3])
    assert list(test.user_map.ids) == ["ann", "bob"] and list(test.item_map.ids) == ["x", "y", "z"]
    train = Interactions(["ann", "cid"], ["w", "x"], user_map=test.user_map, item_map=test.item_map)
    assert list(test.item_map.ids) == ["x", "y", "z", "w"]  # appended: earlier numbers unchanged
    assert test.num_items == 4 and train.num_items == 4  # read when used: the shared map grew
    assert train.item_ids(test.user_ids(["ann", "cid"])).ids.tolist() == [[3], [0]]  # w is 3, x is 0
    assert test.item_ids(test.user_ids(["bob"])).ids.tolist() == [[0, 2]]
    assert list(test.original_users(torch.tensor([1, 0]))) == ["bob", "ann"]


def test_from_frame_takes_pandas_polars_pyarrow_and_dicts_alike():
    polars = pytest.importorskip("polars")
    columns = {"u": ["b", "a", "b"], "i": [3, 1, 2], "v": [1.0, 2.0, 3.0]}
    tables = [
        Interactions.from_frame(frame, user="u", item="i", value="v")
        for frame in (pd.DataFrame(columns), polars.DataFrame(columns), pa.table(columns), columns)
    ]
    for table in tables:  # integer item ids are mapped too: 1, 2, 3 -> 0, 1, 2
        assert list(table.user_map.ids) == ["a", "b"]
        assert table.item_map.ids.tolist() == [1, 2, 3]
        assert table.item_ids(torch.tensor([0, 1])).ids.tolist() == [[0, -1], [1, 2]]
        assert table.item_ids(torch.tensor([1])).grades.tolist() == [[3.0, 1.0]]
    for frame in (pd.DataFrame(columns), polars.DataFrame(columns), pa.table(columns), columns):
        kept = Interactions.from_frame(frame, user="u", item="i", value="v", map_ids=False)
        assert kept.item_map is None and kept.num_items == 4
        assert kept.item_ids(torch.tensor([0, 1])).ids.tolist() == [[1, -1], [2, 3]]
    with pytest.raises(ValueError, match="no column 'user'.*columns are"):
        Interactions.from_frame(pd.DataFrame(columns))


def test_duplicated_pairs_raise_or_merge_as_asked():
    with pytest.raises(ValueError, match=r"\(user 1, item 2\) is given more than once, at rows \[0, 2\]"):
        Interactions([1, 0, 1], [2, 2, 2], values=[1, 1, 1])
    assert Interactions([1, 0, 1], [2, 2, 2], values=[1, 5, 3], duplicates="max").item_ids([1]).grades.tolist() == [[3]]
    assert Interactions([1, 0, 1], [2, 2, 2], values=[1, 5, 3], duplicates="sum").item_ids([1]).grades.tolist() == [[4]]
    assert len(Interactions([1, 1], [2, 2], duplicates="max")) == 1


@pytest.mark.parametrize(
    "users, items, error, match",
    [
        ([0, -1], [0, 1], ValueError, "users must be non-negative integer ids, got -1 at row 1"),
        ([0, 1], [0, -3], ValueError, "items must be non-negative"),
        ([0.0, 1.0], [0, 1], TypeError, "users must hold integer or string ids, got dtype float64"),
        ([0, 1], [True, False], TypeError, "items must hold integer or string ids"),
        (["a", 1], [0, 1], TypeError, "users must hold integer or string ids"),
        ([0, 1], [0], ValueError, "one entry per interaction"),
    ],
)
def test_bad_ids_are_refused(users, items, error, match):
    with pytest.raises(error, match=match):
        Interactions(np.array(users, dtype=object) if "a" in users else users, items)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_grades_that_are_not_finite_are_refused(tmp_path, bad):
    """NaN and infinite grades (which ItemIds refuses too) name their row; in a CSV table, their
    line: an infinite grade passed the reader and was refused by the metric without a file."""
    with pytest.raises(ValueError, match=rf"values must be finite grades, got {bad} at row 1"):
        Interactions([0, 1], [0, 1], values=[1.0, bad])
    (tmp_path / "t.csv").write_text(f"user,item,rating\nu1,b,1\nu2,b,{bad}\n")
    expected = "must not be NaN" if math.isnan(bad) else f"value must be a finite grade, got {bad}"
    with pytest.raises(FileFormatError, match=rf"t.csv, line 3, column rating: .*{expected}"):
        read_interactions(tmp_path / "t.csv")


# --- metric names ----------------------------------------------------------------------------
def test_metric_names_and_aliases():
    keys = [
        metric.key
        for metric in parse_metrics(
            [
                "ndcg@10",
                "nDCG@10",
                "ndcg_cut_10",
                "P@5",
                "P_5",
                "hit_rate@3",
                "success@3",
                "HR@3",
                "recip_rank@100",
                "RR@100",
                "map_cut_20",
                "AP@20",
                "r_precision",
                "Rprec",
                "R@7",
                "f1@4",
            ]
        )
    ]
    assert keys == ["ndcg@10", "precision@5", "hit_rate@3", "mrr@100", "map@20", "r_precision", "recall@7", "f1@4"]
    assert [metric.key for metric in parse_metrics("ndcg@10, recall@20")] == ["ndcg@10", "recall@20"]
    with pytest.raises(ValueError, match=r"unknown metric 'bleu@4': known names are \[.*'ndcg'.*\]"):
        parse_metrics(["bleu@4"])
    with pytest.raises(ValueError, match="'map' needs a cut-off, e.g. 'map@10'"):
        parse_metrics(["map"])
    with pytest.raises(ValueError, match="unknown metric 'ndcg@\u0661\u0660'"):  # a cut-off of ASCII digits only
        parse_metrics(["ndcg@\u0661\u0660"])
    # the registry's other metrics, and the count of hits as ranx and RecPack mean it
    assert [(m.name, m.k) for m in parse_metrics(["hits@10", "DCG@5", "fallout@3", "bpref@100", "err@20"])] == [
        ("hits", 10),
        ("dcg", 5),
        ("fall_out", 3),
        ("bpref", 100),
        ("err", 20),
    ]
    with pytest.raises(ValueError, match="takes no cut-off"):
        parse_metrics(["r_precision@5"])


# --- evaluate() from a model's scores ------------------------------------------------------
def _random_tables(seed=0, num_users=40, num_items=30):
    rng = np.random.default_rng(seed)
    users = rng.choice(200, num_users, replace=False)  # non-consecutive ids
    test_rows = [
        (u, i, g)
        for u in users
        for i, g in zip(rng.choice(num_items, rng.integers(1, 6), replace=False), rng.integers(0, 4, 6))
    ]
    train_rows = [(u, i) for u in users for i in rng.choice(num_items, rng.integers(0, 8), replace=False)]
    test = Interactions(*map(np.array, zip(*test_rows)), num_items=num_items)
    train = Interactions(*map(np.array, zip(*train_rows)), num_items=num_items)
    scores = torch.from_numpy(rng.random((200, num_items)))
    return test, train, scores, rng


@pytest.mark.parametrize("with_exclusion", [False, True])
def test_evaluate_a_model_equals_the_metric_classes(with_exclusion):
    test, train, scores, _ = _random_tables()
    options = dict(
        metrics=["ndcg", "recall", "precision", "map", "mrr", "hit_rate", "f1", "r_precision"],
        gain_function="linear_rank",
    )
    expected = R.RankingMetrics([3, 10], **options, per_user=True)
    users = test.users  # every test user, in one dense update
    rows = scores[users]
    relevance = torch.zeros_like(rows)
    for row, user in enumerate(users.tolist()):
        ids = test.item_ids(torch.tensor([user]))
        relevance[row, ids.ids[0][ids.ids[0] >= 0]] = ids.grades[0][ids.ids[0] >= 0]
    history = train.csr(users).to_dense() > 0
    expected.update((rows, relevance, history) if with_exclusion else (rows, relevance))
    calls = []

    def model(batch):
        calls.append(batch.clone())
        return scores[batch]

    result = R.evaluate(
        model,
        test,
        exclude=train if with_exclusion else None,
        metrics=["ndcg@3", "ndcg@10", "R@10", "P@3", "map@10", "mrr@10", "hit_rate@3", "f1@10", "r_precision"],
        batch_size=7,
        progress=False,
        per_user=True,
        gain_function="linear_rank",
    )
    reference = expected.compute()
    for key, value in result.means.items():
        assert value == pytest.approx(reference[key], abs=1e-12), key
    assert torch.cat(calls).tolist() == users.tolist() and max(len(c) for c in calls) == 7
    per_user = expected.per_user()
    for key, values in result.per_user().items():
        torch.testing.assert_close(values, per_user[key], equal_nan=True)
    assert result.user_ids.tolist() == users.tolist()
    intervals = expected.confidence_interval()
    assert result.intervals["ndcg@10"] == pytest.approx(intervals["ndcg@10"])


def test_evaluate_ranked_ids_equals_ranked_items():
    test, _, scores, _ = _random_tables(1)
    users = test.users[::2]  # half the test users are not ranked: empty lists
    ranked = scores[users].argsort(1, descending=True)[:, :10]
    result = R.evaluate((users, ranked), test, metrics=["ndcg@5", "recall@10"], progress=False, ignore_zero_hits=False)
    expected = R.RankingMetrics([5, 10], metrics=["ndcg", "recall"], ignore_zero_hits=False)
    everyone = test.users
    lists = torch.full((len(everyone), 10), -1)
    lists[::2] = ranked
    expected.update((R.RankedItems(lists), test.item_ids(everyone)))
    reference = expected.compute()
    assert result["ndcg@5"] == pytest.approx(reference["ndcg@5"], abs=1e-12)
    assert result["recall@10"] == pytest.approx(reference["recall@10"], abs=1e-12)
    assert result.info["test_users_not_in_run"] == len(everyone) - len(users)


# --- runs and qrels as files: trec_eval and ranx ----------------------------------------------
def _generated(seed=0, ties=False):
    """qrels and run dicts with string ids: graded judgments (0 included), queries missing from
    the run, a run query without judgments, documents the qrels never judged."""
    rng = np.random.default_rng(seed)
    qrels, run = {}, {}
    for q in rng.choice(500, 80, replace=False):
        docs = rng.choice(60, rng.integers(1, 9), replace=False)
        qrels[f"q{q}"] = {f"d{d}": int(rng.integers(0, 4)) for d in docs}
        if rng.random() < 0.85:
            ranked = rng.choice(90, rng.integers(1, 40), replace=False)
            values = rng.integers(0, 5, len(ranked)) / 4 if ties else rng.permutation(len(ranked)) / 7 + 0.5
            run[f"q{q}"] = {f"d{d}": float(s) for d, s in zip(ranked, values)}
    run["q_not_judged"] = {"d1": 2.0, "d2": 1.0}
    return qrels, run


def _write_trec(folder, qrels, run, shuffle_rows=None):
    qrels_path, run_path = folder / "test.qrels", folder / "model.trec"
    qrels_path.write_text("".join(f"{q} 0 {d} {g}\n" for q, docs in qrels.items() for d, g in docs.items()))
    lines = [f"{q} Q0 {d} {rank} {s!r} tag\n" for q, docs in run.items() for rank, (d, s) in enumerate(docs.items(), 1)]
    run_path.write_text("".join(lines))
    return qrels_path, run_path


def _trec_eval(qrels, run):
    measures = {"ndcg_cut.10", "P.5", "recall.20", "map_cut.100", "recip_rank", "Rprec", "success.5"}
    return pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize("ties", [False, True])
def test_a_trec_run_file_equals_trec_eval_per_user(tmp_path, ties, device):
    """Per user, on the CPU and with the metrics on a GPU (the files are read on the host either way)."""
    qrels, run = _generated(ties=ties)
    qrels_path, run_path = _write_trec(tmp_path, qrels, run)
    result = R.evaluate(
        run_path, qrels_path, metrics=METRICS, per_user=True, progress=False, device=device, **TREC_EVAL
    )
    reference = _trec_eval(qrels, run)
    users = list(result.user_ids)
    assert sorted(users) == sorted(qrels) and users == sorted(users)
    for key, measure in TREC_MEASURES.items():
        ours = dict(zip(users, result.per_user()[key].tolist()))
        # trec_eval evaluates the run's queries; the queries the run misses count 0 (trec_eval -c)
        for query in qrels:
            assert ours[query] == pytest.approx(reference[query][measure] if query in run else 0.0, abs=1e-12), (
                key,
                query,
            )
        assert result[key] == pytest.approx(np.mean([ours[q] for q in qrels]), abs=1e-12)
    assert result.info == {
        "test_users": 80,
        "run_rows": sum(map(len, run.values())),
        "run_rows_not_in_test": 2,
        "test_users_not_in_run": sum(q not in run for q in qrels),
        "run_grouped_in_memory": False,
        "warnings": [],
    }


def test_a_trec_run_file_equals_ranx_means(tmp_path):
    ranx = pytest.importorskip("ranx")
    qrels, run = _generated(seed=3)
    qrels_path, run_path = _write_trec(tmp_path, qrels, run)
    result = R.evaluate(
        run_path,
        qrels_path,
        metrics=["ndcg@10", "P@5", "recall@20", "map@100", "mrr@100", "hit_rate@5", "f1@10", "r_precision"],
        progress=False,
        **TREC_EVAL,
    )
    ranx_qrels = ranx.Qrels({q: {d: g for d, g in docs.items()} for q, docs in qrels.items()})
    ranx_run = ranx.Run({q: docs for q, docs in run.items() if q in qrels})
    ranx_run.make_comparable(ranx_qrels)
    names = {
        "ndcg@10": "ndcg@10",
        "precision@5": "precision@5",
        "recall@20": "recall@20",
        "map@100": "map@100",
        "mrr@100": "mrr@100",
        "hit_rate@5": "hit_rate@5",
        "f1@10": "f1@10",
        "r_precision": "r-precision",
    }
    reference = ranx.evaluate(ranx_qrels, ranx_run, list(names.values()), make_comparable=True)
    for key, name in names.items():
        assert result[key] == pytest.approx(reference[name], abs=1e-6), key


def test_parquet_csv_and_data_frames_give_the_trec_values(tmp_path):
    polars = pytest.importorskip("polars")
    qrels, run = _generated(seed=5)
    qrels_path, run_path = _write_trec(tmp_path, qrels, run)
    expected = R.evaluate(run_path, qrels_path, metrics=METRICS, progress=False, **TREC_EVAL).means
    qrels_rows = [(q, d, g) for q, docs in qrels.items() for d, g in docs.items()]
    run_rows = [(q, d, s) for q, docs in run.items() for d, s in docs.items()]
    qrels_table = pa.table(dict(zip(["user", "item", "rel"], map(list, zip(*qrels_rows)))))
    run_table = pa.table(dict(zip(["user", "item", "score"], map(list, zip(*run_rows)))))
    pq.write_table(qrels_table, tmp_path / "test.parquet")
    pq.write_table(run_table, tmp_path / "run.parquet", row_group_size=100)
    run_table.to_pandas().to_csv(tmp_path / "run.csv", index=False)
    shuffled = run_table.to_pandas().sample(frac=1.0, random_state=0)  # rows in any order: in memory they are grouped
    for scores in (tmp_path / "run.parquet", tmp_path / "run.csv", run_table, shuffled, polars.from_pandas(shuffled)):
        result = R.evaluate(scores, tmp_path / "test.parquet", metrics=METRICS, progress=False, **TREC_EVAL)
        for key, value in expected.items():
            assert result.means[key] == pytest.approx(value, abs=1e-12), (type(scores), key)
    frame_test = Interactions.from_frame(qrels_table.to_pandas(), value="rel")
    assert R.evaluate(shuffled, frame_test, metrics=METRICS, progress=False, **TREC_EVAL).means == pytest.approx(
        expected, abs=1e-12
    )


def test_integer_ids_in_tables_and_a_trec_run(tmp_path):
    """A parquet test table with integer ids and a TREC run of the same ids as text."""
    pq.write_table(pa.table({"user": [3, 3, 8], "item": [0, 2, 1]}), tmp_path / "test.parquet")
    (tmp_path / "run.trec").write_text(
        "3 Q0 2 1 0.9 t\n3 Q0 5 2 0.8 t\n3 Q0 0 3 0.7 t\n8 Q0 0 1 0.5 t\n9 Q0 1 1 0.5 t\n"
    )
    result = R.evaluate(
        tmp_path / "run.trec", tmp_path / "test.parquet", metrics=["recall@2", "mrr@3"], progress=False, per_user=True
    )
    assert result.user_ids.tolist() == [3, 8]
    assert result.per_user()["recall@2"].tolist() == [0.5, 0.0]
    assert result.per_user()["mrr@3"].tolist() == [1.0, 0.0]


def test_ties_follow_trec_eval_by_default_and_the_file_order_on_request(tmp_path):
    (tmp_path / "q").write_text("u 0 a 1\n")
    (tmp_path / "r").write_text("u Q0 a 1 1.0 t\nu Q0 b 2 1.0 t\nu Q0 c 3 2.0 t\n")
    # trec_eval: c (2.0), then the tie a/b by docid descending: b, a -> a at rank 3
    assert R.evaluate(tmp_path / "r", tmp_path / "q", ["mrr@3"], progress=False)["mrr@3"] == pytest.approx(1 / 3)
    assert R.evaluate(tmp_path / "r", tmp_path / "q", ["mrr@3"], progress=False, run_ties="order")["mrr@3"] == 0.5
    reference = _trec_eval({"u": {"a": 1}}, {"u": {"a": 1.0, "b": 1.0, "c": 2.0}})
    assert reference["u"]["recip_rank"] == pytest.approx(1 / 3)


def test_exclusion_from_a_file_and_from_a_table(tmp_path):
    (tmp_path / "test.qrels").write_text("u1 0 a 1\nu1 0 c 1\nu2 0 b 1\n")
    (tmp_path / "train.csv").write_text("user,item\nu1,b\nu1,b\nu2,a\nu3,z\n")  # a repeated click is merged
    (tmp_path / "run.trec").write_text("u1 Q0 b 1 3 t\nu1 Q0 a 2 2 t\nu1 Q0 c 3 1 t\nu2 Q0 a 1 5 t\nu2 Q0 b 2 4 t\n")
    result = R.evaluate(
        tmp_path / "run.trec", tmp_path / "test.qrels", ["P@1", "mrr@3"], exclude=tmp_path / "train.csv", progress=False
    )
    # u1: b excluded, a first (hit); u2: a excluded, b first (hit)
    assert result.means == {"precision@1": 1.0, "mrr@3": 1.0}
    unexcluded = R.evaluate(tmp_path / "run.trec", tmp_path / "test.qrels", ["P@1"], progress=False)
    assert unexcluded["P@1"] == 0.0
    test = read_interactions(tmp_path / "test.qrels")
    with pytest.raises(ValueError, match="exclude must number users and items as test does"):
        R.evaluate(tmp_path / "run.trec", test, ["P@1"], exclude=Interactions(["u1"], ["b"]), progress=False)


@pytest.mark.parametrize("looked_up", [3, 40, 400])  # few values against many keys, and many
def test_an_id_map_of_arrow_ids_finds_each_id_or_none(looked_up):
    rng = np.random.default_rng(looked_up)
    keys = [f"doc{i}" for i in rng.permutation(100)]
    values = [f"doc{i}" for i in rng.integers(0, 130, looked_up)]  # ids past 99 are not in the map
    id_map, codes = R.IdMap.from_values(pa.array(keys))
    expected = {key: position for position, key in enumerate(sorted(keys))}
    assert codes.tolist() == [expected[key] for key in keys]
    found = id_map.encode(pa.array(values))
    assert found.tolist() == [expected.get(value, -1) for value in values]
    assert id_map.encode(pc.dictionary_encode(pa.array(values))).tolist() == found.tolist()


def test_files_to_means_never_imports_pandas(tmp_path):
    """pyarrow imports pandas on its first pyarrow.array() or Array.to_numpy() (half a second and
    50 MiB): a TREC run, qrels and an exclusion file are evaluated without it."""
    import os
    import subprocess

    (tmp_path / "test.qrels").write_text("u1 0 a 1\nu1 0 c 1\nu2 0 b 1\n")
    (tmp_path / "train.qrels").write_text("u1 0 b 1\nu2 0 a 1\nu2 0 z 1\n")
    (tmp_path / "run.trec").write_text("u1 Q0 b 1 3 t\nu1 Q0 a 2 2 t\nu1 Q0 x 3 1 t\nu2 Q0 a 1 5 t\nu2 Q0 b 2 4 t\n")
    script = (
        "import sys, ignite_recsys as R\n"
        "r = R.evaluate('run.trec', 'test.qrels', ['P@1', 'mrr@3'], exclude='train.qrels', progress=False)\n"
        "print(r.means == {'precision@1': 1.0, 'mrr@3': 1.0}, 'pandas' in sys.modules)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]


# --- bad files -------------------------------------------------------------------------------
GOOD_QRELS = "q1 0 d1 1\nq1 0 d2 0\nq2 0 d1 2\n"


@pytest.mark.parametrize(
    "run_text, line, column, match",
    [
        ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 0.4\n", 2, None, "expected 6 fields .* got 5"),
        ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 x t\n", 2, "5 (score)", "score must be a number, got 'x'"),
        ("q1 Q0 d1 1 0.5 t\nq2 Q0 d2 2 nan t\n", 2, "5 (score)", "score must not be NaN"),
        ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 0.4 t\nq1 Q0 d1 3 0.3 t\n", 3, "3 (docid)", "ranks item 'd1' twice .*line 1"),
        ("q1 Q0 d1 1 0.5 t\n\nq2 Q0 d2 1 0.4 t\n", 2, None, "blank line"),
    ],
)
def test_a_malformed_run_names_the_file_line_and_column(tmp_path, run_text, line, column, match):
    (tmp_path / "q").write_text(GOOD_QRELS)
    (tmp_path / "r.trec").write_text(run_text)
    with pytest.raises(FileFormatError, match=match) as raised:
        R.evaluate(tmp_path / "r.trec", tmp_path / "q", ["P@1"], progress=False)
    assert raised.value.path.endswith("r.trec") and raised.value.line == line and raised.value.column == column
    assert str(raised.value).startswith(f"{tmp_path / 'r.trec'}, line {line}")


def test_users_split_across_chunks_are_grouped(tmp_path, monkeypatch):
    from ignite_recsys.data import files

    monkeypatch.setattr(files, "CHUNK_BYTES", 64)  # a few lines per chunk
    rows = [f"q{u} Q0 d{i} {i} {1 - i / 10} t\n" for u in (1, 2, 3) for i in range(1, 6)] + ["q1 Q0 d9 9 0.95 t\n"]
    (tmp_path / "q").write_text("q1 0 d1 1\nq2 0 d1 1\nq3 0 d1 1\nq1 0 d9 1\n")
    (tmp_path / "r").write_text("".join(rows))
    split = R.evaluate(tmp_path / "r", tmp_path / "q", ["P@1", "mrr@5"], progress=False)
    assert split.means == {"precision@1": 1.0, "mrr@5": 1.0}  # q1's d9 (0.95) after d1 (0.9)
    assert split.info["run_grouped_in_memory"] is True
    (tmp_path / "r").write_text("".join(rows[:-1]))  # chunks end inside users' rows: the same values
    result = R.evaluate(tmp_path / "r", tmp_path / "q", ["P@1", "mrr@5"], progress=False)
    assert result.means == {"precision@1": 1.0, "mrr@5": 1.0}
    assert result.info["run_grouped_in_memory"] is False


@pytest.mark.parametrize(
    "qrels_text, line, column, match",
    [
        ("q1 0 d1 1\nq1 0 d2\n", 2, None, "expected 4 fields"),
        ("q1 0 d1 1\nq1 0 d2 high\n", 2, 4, "rel must be an integer, got 'high'"),
        ("q1 0 d1 1\nq1 0 d2 1.5\n", 2, 4, "rel must be an integer, got '1.5'"),
        # values Python's int() reads (the row is found where Arrow stops reading, not where int() does)
        ("q1 0 d1 1\nq1 0 d2 1\nq1 0 d3 1\nq1 0 d4 +1\n", 4, 4, r"rel must be an integer, got '\+1'"),
        ("q1 0 d1 1\nq1 0 d2 1_0\n", 2, 4, "rel must be an integer, got '1_0'"),
        ("q1 0 d1 1\nq1 0 d2 2\nq1 0 d3 99999999999999999999\n", 3, 4, "rel must be an integer within int64"),
        ("q1 0 d1 1\nq2 0 d2 1\nq1 0 d1 2\n", 3, 3, r"judged more than once, at lines \[1, 3\]"),
    ],
)
def test_malformed_qrels_name_the_file_line_and_column(tmp_path, qrels_text, line, column, match):
    (tmp_path / "q").write_text(qrels_text)
    with pytest.raises(FileFormatError, match=match) as raised:
        read_trec_qrels(tmp_path / "q")
    assert raised.value.line == line and raised.value.column == column


def test_bad_ids_in_tables_name_the_row(tmp_path):
    pq.write_table(pa.table({"user": [1, -2], "item": [0, 1]}), tmp_path / "neg.parquet")
    with pytest.raises(FileFormatError, match="neg.parquet, row 2, column user: ids must be >= 0, got -2"):
        read_interactions(tmp_path / "neg.parquet")
    pq.write_table(pa.table({"user": [1.0, 2.5], "item": [0, 1]}), tmp_path / "float.parquet")
    with pytest.raises(FileFormatError, match="row 2, column user: ids must be integers or strings"):
        read_interactions(tmp_path / "float.parquet")
    (tmp_path / "t.csv").write_text("user,item\n1,0\n2,x1\n")  # the items start as integers
    (tmp_path / "t.csv").write_text("user,item\n1,0\n2,-1\n")
    with pytest.raises(FileFormatError, match="t.csv, line 3, column item: ids must be >= 0"):
        read_interactions(tmp_path / "t.csv")
    (tmp_path / "s.csv").write_text("user,item,rel\n1,0,1\n2,1,\n")
    with pytest.raises(FileFormatError, match="s.csv, line 3, column rel: value must be a number"):
        read_interactions(tmp_path / "s.csv")
    (tmp_path / "n.csv").write_text("uid,item\n1,0\n")
    with pytest.raises(FileFormatError, match=r"needs a user column \(one of \['user'"):
        read_interactions(tmp_path / "n.csv")


def test_a_text_id_in_a_run_against_integer_ids_is_an_unjudged_item(tmp_path):
    """trec_eval compares ids as text: "x7" is no item of the table, ranked but not relevant."""
    pq.write_table(pa.table({"user": [3], "item": [0]}), tmp_path / "test.parquet")
    (tmp_path / "run.trec").write_text("3 Q0 x7 1 0.9 t\n3 Q0 0 2 0.8 t\n")
    result = R.evaluate(tmp_path / "run.trec", tmp_path / "test.parquet", ["P@1", "P@2"], progress=False)
    evaluator = pytrec_eval.RelevanceEvaluator({"3": {"0": 1}}, {"P.1", "P.2"})
    reference = evaluator.evaluate({"3": {"x7": 0.9, "0": 0.8}})["3"]
    assert result.means == {"precision@1": reference["P_1"], "precision@2": reference["P_2"]}


def test_empty_files(tmp_path):
    (tmp_path / "q").write_text(GOOD_QRELS)
    (tmp_path / "empty").write_text("")
    with pytest.warns(R.InputWarning, match="holds no rows"):
        result = R.evaluate(tmp_path / "empty", tmp_path / "q", ["P@1", "ndcg@3"], progress=False, per_user=True)
    assert result.means == {"precision@1": 0.0, "ndcg@3": 0.0}  # every user ranks nothing
    assert result.info["test_users_not_in_run"] == 2 and "holds no rows" in result.info["warnings"][0]
    with pytest.raises(FileFormatError, match="empty: holds no judgments"):
        R.evaluate(tmp_path / "q", tmp_path / "empty", ["P@1"], progress=False)
    with pytest.raises(FileNotFoundError, match="no such file"):
        R.evaluate(tmp_path / "missing", tmp_path / "q", ["P@1"], progress=False)


def test_tabs_and_windows_line_endings_read_as_spaces(tmp_path):
    (tmp_path / "q").write_text(GOOD_QRELS)
    run = "q1 Q0 d2 1 0.5 t\nq1 Q0 d1 2 0.4 t\nq2 Q0 d1 1 0.4 t\n"
    (tmp_path / "spaces").write_text(run)
    (tmp_path / "tabs").write_text(run.replace(" ", "\t"))
    (tmp_path / "crlf").write_bytes(run.replace("\n", "\r\n").encode())
    (tmp_path / "q_crlf").write_bytes(GOOD_QRELS.replace("\n", "\r\n").encode())
    expected = R.evaluate(tmp_path / "spaces", tmp_path / "q", ["mrr@2", "P@1"], progress=False).means
    assert expected == {"mrr@2": 0.75, "precision@1": 0.5}
    for run_file, qrels_file in (("tabs", "q"), ("crlf", "q_crlf")):
        assert (
            R.evaluate(tmp_path / run_file, tmp_path / qrels_file, ["mrr@2", "P@1"], progress=False).means == expected
        )


def test_a_malformed_csv_run_names_the_line(tmp_path):
    (tmp_path / "q").write_text(GOOD_QRELS)
    (tmp_path / "r.csv").write_text("user,item,score\nq1,d1,0.5\nq1,d2,0.4,9\n")
    with pytest.raises(FileFormatError, match="r.csv, line 3: expected 3 fields, got 4") as raised:
        R.evaluate(tmp_path / "r.csv", tmp_path / "q", ["P@1"], progress=False)
    assert raised.value.line == 3
    (tmp_path / "s.csv").write_text("user,item,score\nq1,d1,0.5\nq1,d2,high\n")
    with pytest.raises(FileFormatError, match="s.csv, line 3, column score: score must be a number, got 'high'"):
        R.evaluate(tmp_path / "s.csv", tmp_path / "q", ["P@1"], progress=False)


def test_a_gzipped_run(tmp_path):
    import gzip

    (tmp_path / "q").write_text(GOOD_QRELS)
    with gzip.open(tmp_path / "r.trec.gz", "wt") as handle:
        handle.write("q1 Q0 d1 1 0.5 t\nq2 Q0 d1 1 0.4 t\n")
    assert R.evaluate(tmp_path / "r.trec.gz", tmp_path / "q", ["P@1"], progress=False)["P@1"] == 1.0


# --- results ---------------------------------------------------------------------------------
def test_results_feed_paired_test_report_and_pandas(tmp_path):
    test, train, scores, rng = _random_tables(2, num_users=60)
    noisy = scores + torch.from_numpy(rng.random(scores.shape)) * 2
    options = dict(exclude=train, per_user=True, progress=False)
    a = R.evaluate(lambda users: scores[users], test, ["ndcg@10", "recall@10"], **options)
    b = R.evaluate(lambda users: noisy[users], test, ["ndcg@10", "recall@10"], **options)
    direct = R.paired_test(a.per_user()["ndcg@10"], b.per_user()["ndcg@10"])
    assert a.compare(b, "ndcg@10") == direct == R.paired_test(a, b, k="ndcg@10")
    assert set(a.compare(b)) == {"ndcg@10", "recall@10"}
    report = R.Report({"A": a.to_report(), "B": b.to_report()}, baseline="B")
    assert report.tests["A", "ndcg@10"] == direct
    frame = a.to_pandas()
    assert list(frame.index) == ["ndcg@10", "recall@10"] and frame.loc["ndcg@10", "mean"] == a["ndcg@10"]
    users = a.to_pandas(per_user=True)
    assert users["user"].tolist() == test.users.tolist()
    assert np.nanmean(users["recall@10"]) == pytest.approx(a["recall@10"])
    summary = R.evaluate(lambda users: scores[users], test, ["ndcg@10"], progress=False)
    assert summary.to_report() == {"ndcg@10": (summary["ndcg@10"], summary.intervals["ndcg@10"])}
    with pytest.raises(RuntimeError, match="per_user=True"):
        summary.per_user()


def test_bad_arguments_of_evaluate():
    test, _, scores, _ = _random_tables()
    with pytest.raises(TypeError, match="unexpected keyword argument.*'gain'.*conventions"):
        R.evaluate(lambda users: scores[users], test, metrics=["ndcg@10"], gain="linear_rank")
    with pytest.raises(ValueError, match=r"must return a \(batch, num_items\)"):
        R.evaluate(lambda users: scores[users][:, :5], test, metrics=["ndcg@10"], progress=False)
    with pytest.raises(TypeError, match="test must be an Interactions table or a file path"):
        R.evaluate(lambda users: scores[users], {"user": [1]}, metrics=["ndcg@10"])


def test_a_progress_bar_that_can_be_turned_off(monkeypatch):
    pytest.importorskip("tqdm")

    class Terminal(io.StringIO):  # the bar is drawn on a terminal only (tests/test_data_edge.py)
        def isatty(self):
            return True

    test, _, scores, _ = _random_tables()
    for progress in (True, False):
        monkeypatch.setattr(sys, "stderr", Terminal())
        R.evaluate(lambda users: scores[users], test, metrics=["ndcg@10"], progress=progress)
        assert ("evaluate" in sys.stderr.getvalue()) == progress


def test_without_tqdm_there_is_no_bar_and_no_error(monkeypatch, capsys):
    test, _, scores, _ = _random_tables()
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    expected = R.evaluate(lambda users: scores[users], test, metrics=["ndcg@10"], progress=False).means
    assert R.evaluate(lambda users: scores[users], test, metrics=["ndcg@10"], progress=True).means == expected
    assert capsys.readouterr().err == ""


def test_the_missing_extra_is_named(tmp_path, monkeypatch):
    (tmp_path / "q").write_text(GOOD_QRELS)
    for module in ("pyarrow", "pyarrow.csv", "pyarrow.compute", "pyarrow.parquet"):
        monkeypatch.setitem(sys.modules, module, None)  # import pyarrow now raises ImportError
    with pytest.raises(ImportError, match=r'needs the package \'pyarrow\'.*pip install "ignite_recsys\[files\]"'):
        read_trec_qrels(tmp_path / "q")
    # the core does without it
    test = Interactions(torch.tensor([0]), torch.tensor([1]), num_items=3)
    assert R.evaluate(lambda users: torch.tensor([[0.0, 1.0, 0.5]]), test, metrics=["P@1"], progress=False)["P@1"] == 1


# --- command line ----------------------------------------------------------------------------
def test_the_command_line(tmp_path, capsys):
    from ignite_recsys.cli import main

    qrels, run = _generated(seed=7)
    qrels_path, run_path = _write_trec(tmp_path, qrels, run)
    code = main(
        [
            "evaluate",
            "--qrels",
            str(qrels_path),
            "--run",
            str(run_path),
            "--metrics",
            "ndcg_cut_10,P_5",
            "--trec-eval",
            "--format",
            "json",
            "--no-progress",
        ]
    )
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    reference = _trec_eval(qrels, run)
    expected = np.mean([reference[q]["ndcg_cut_10"] if q in run else 0.0 for q in qrels])
    assert printed["means"]["ndcg@10"] == pytest.approx(expected, abs=1e-12)
    assert (
        main(["evaluate", "--qrels", str(qrels_path), "--run", str(run_path), "--metrics", "ndcg@10", "--no-progress"])
        == 0
    )
    assert "ndcg@10" in capsys.readouterr().out
    assert (
        main(
            [
                "evaluate",
                "--qrels",
                str(qrels_path),
                "--run",
                str(run_path),
                "--metrics",
                "ndcg@10",
                "--format",
                "latex",
                "--no-progress",
            ]
        )
        == 0
    )
    assert "\\begin{tabular}" in capsys.readouterr().out
    (tmp_path / "bad.trec").write_text("q1 Q0 d1 1 oops t\n")
    cases = [
        (["--run", str(tmp_path / "bad.trec"), "--metrics", "P@1"], 4, "bad.trec, line 1, column 5 (score)"),
        (["--run", str(tmp_path / "nothing"), "--metrics", "P@1"], 3, "no such file"),
        (["--run", str(run_path), "--metrics", "bleu@1"], 2, "unknown metric 'bleu@1'"),
    ]
    for extra, expected_code, message in cases:
        assert main(["evaluate", "--qrels", str(qrels_path), "--no-progress", *extra]) == expected_code
        assert message in capsys.readouterr().err
    assert main(["evaluate", "--qrels", str(qrels_path)]) == 2  # --run and --metrics missing
    assert main(["evaluate", "--help"]) == 0
    assert "ignite-recsys evaluate --qrels" in capsys.readouterr().out


def test_python_dash_m_runs_the_command_line(tmp_path):
    import subprocess

    (tmp_path / "q").write_text(GOOD_QRELS)
    (tmp_path / "r").write_text("q1 Q0 d1 1 0.5 t\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ignite_recsys",
            "evaluate",
            "--qrels",
            str(tmp_path / "q"),
            "--run",
            str(tmp_path / "r"),
            "--metrics",
            "P@1",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["means"] == {"precision@1": 0.5}


def test_text_run_ids_that_are_not_integers_match_nothing_in_an_integer_table(tmp_path):
    """A CSV test table with integer ids and a TREC run whose ids are text: a run user such as
    "Z" is a user outside the test set and a run item such as "Y" or "07" an unjudged item (trec_eval
    compares ids as text), as pytrec_eval evaluates them; neither is an error."""
    (tmp_path / "test.csv").write_text("user,item,relevance\n9,9,1\n9,4,1\n3,7,2\n")
    run = {"9": {"Y": 0.9, "9": 0.8, "07": 0.7, "4": 0.6}, "3": {"07": 0.9, "7": 0.5}, "Z": {"9": 0.5}}
    lines = [f"{q} Q0 {d} {rank} {s} t\n" for q, docs in run.items() for rank, (d, s) in enumerate(docs.items(), 1)]
    (tmp_path / "run.trec").write_text("".join(lines))
    result = R.evaluate(
        tmp_path / "run.trec",
        tmp_path / "test.csv",
        metrics=["ndcg@3", "P@2", "recip_rank@10"],
        per_user=True,
        progress=False,
        **TREC_EVAL,
    )
    qrels = {"9": {"9": 1, "4": 1}, "3": {"7": 2}}
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.3", "P.2", "recip_rank"}).evaluate(run)
    users = [str(user) for user in result.user_ids.tolist()]
    assert sorted(users) == ["3", "9"]
    for key, measure in (("ndcg@3", "ndcg_cut_3"), ("precision@2", "P_2"), ("mrr@10", "recip_rank")):
        ours = dict(zip(users, result.per_user()[key].tolist()))
        for user in qrels:
            assert ours[user] == pytest.approx(reference[user][measure], abs=1e-12), (key, user)
    assert result.info["run_rows_not_in_test"] == 1


def test_a_grade_column_of_another_name_is_named_in_a_warning(tmp_path):
    """BEIR's qrels name their grades "score": without value= the rows are all relevant (grade 1),
    which an InputWarning says, naming the column; with value="score", pytrec_eval's values."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    (tmp_path / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tdA\t2\nq1\tdB\t0\nq1\tdC\t1\nq2\tdA\t1\n")
    (tmp_path / "run").write_text("q1 Q0 dB 1 3.0 t\nq1 Q0 dC 2 2.0 t\nq1 Q0 dA 3 1.0 t\nq2 Q0 dA 1 1.0 t\n")
    columns = dict(user="query-id", item="corpus-id")
    with pytest.warns(R.InputWarning, match=r"the columns \['score'\] are not read.*value='score'"):
        read_interactions(tmp_path / "test.tsv", **columns)
    table = read_interactions(tmp_path / "test.tsv", value="score", **columns)
    result = R.evaluate(tmp_path / "run", table, ["ndcg@10", "P@1"], progress=False, **TREC_EVAL)
    qrels = {"q1": {"dA": 2, "dB": 0, "dC": 1}, "q2": {"dA": 1}}
    run = {"q1": {"dB": 3.0, "dC": 2.0, "dA": 1.0}, "q2": {"dA": 1.0}}
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "P.1"}).evaluate(run)
    assert result["ndcg@10"] == pytest.approx(np.mean([expected[q]["ndcg_cut_10"] for q in qrels]), abs=1e-12)
    assert result["P@1"] == pytest.approx(np.mean([expected[q]["P_1"] for q in qrels]), abs=1e-12)
    # a grade column read and others beside it (a timestamp): nothing to say
    (tmp_path / "ratings.csv").write_text("user,item,rating,timestamp\n1,2,4,100\n1,3,5,200\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_interactions(tmp_path / "ratings.csv").has_values


def test_a_trec_exclusion_file_against_integer_ids_is_refused_naming_the_file(tmp_path):
    """A TREC file's ids are text; a CSV test table of integer ids numbers integers. The exclusion
    file is refused with its path and the way out (a table), where an IdMap TypeError named no
    file; as a CSV table the same exclusion gives the values of the run without its rows."""
    (tmp_path / "test.csv").write_text("user,item,rel\n7,1,1\n8,3,1\n")
    (tmp_path / "run").write_text("7 Q0 2 1 3 t\n7 Q0 1 2 2 t\n8 Q0 3 1 1 t\n")
    (tmp_path / "exclude.qrels").write_text("7 0 2 1\n")
    quiet = dict(progress=False)
    with pytest.raises(FileFormatError, match=r"exclude.qrels: a TREC file's ids are text.*CSV or parquet table"):
        R.evaluate(tmp_path / "run", tmp_path / "test.csv", ["mrr@10"], exclude=tmp_path / "exclude.qrels", **quiet)
    (tmp_path / "exclude.csv").write_text("user,item\n7,2\n")
    run, test = tmp_path / "run", tmp_path / "test.csv"
    excluded = R.evaluate(run, test, ["mrr@10"], exclude=tmp_path / "exclude.csv", **quiet)
    assert excluded["mrr@10"] == 1.0  # user 7's relevant item first once item 2 is out; user 8's first


@pytest.mark.parametrize("users", ["dense", "text"])
def test_an_exclusion_file_against_a_table_of_dense_ids(tmp_path, users):
    """A test table numbering its items (and users) by their integer ids themselves, built from
    tensors, and the training history as a CSV file of the same ids: read as those ids (it was
    refused, its message suggesting integer ids in both, which it had). pytrec_eval on the run
    without the excluded rows; an id written 01 is refused naming its line."""
    names = ["0", "1", "2"] if users == "dense" else ["ann", "bob", "cid"]
    given = torch.tensor([0, 0, 1, 2]) if users == "dense" else ["ann", "ann", "bob", "cid"]
    test = Interactions(given, torch.tensor([3, 4, 0, 2]), num_items=6)
    rows = [(0, 1, 0.9), (0, 3, 0.8), (0, 5, 0.7), (0, 4, 0.6), (1, 2, 0.9), (1, 0, 0.8), (2, 5, 0.9), (2, 2, 0.1)]
    run = {"user": [names[u] if users == "text" else u for u, _, _ in rows], "item": [i for _, i, _ in rows],
           "score": [x for _, _, x in rows]}  # fmt: skip
    train = [(0, 1), (0, 5), (1, 2), (2, 4)]
    (tmp_path / "train.csv").write_text("user,item\n" + "".join(f"{names[u]},{i}\n" for u, i in train))
    result = R.evaluate(run, test, ["mrr@3", "recall@2"], exclude=tmp_path / "train.csv", per_user=True, progress=False)
    left = {names[u]: {str(i): x for v, i, x in rows if v == u and (u, i) not in train} for u in range(3)}
    qrels = {names[0]: {"3": 1, "4": 1}, names[1]: {"0": 1}, names[2]: {"2": 1}}
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank", "recall_2"}).evaluate(left)
    for key, measure in (("mrr@3", "recip_rank"), ("recall@2", "recall_2")):
        assert result[key] == pytest.approx(np.mean([expected[u][measure] for u in names]), abs=1e-12), key
    assert result["mrr@3"] == pytest.approx(5 / 6)  # 1, 1, 1/2; with the history in the lists 1/2 each
    if users == "dense":  # a TREC exclusion's text ids against the table's integer ids: refused, no map blamed
        (tmp_path / "train.qrels").write_text("".join(f"{u} 0 {i} 1\n" for u, i in train))
        with pytest.raises(FileFormatError, match=r"train.qrels: a TREC file's ids are text, and the user ids it is "):
            R.evaluate(run, test, ["mrr@3"], exclude=tmp_path / "train.qrels", progress=False)
    (tmp_path / "bad.csv").write_text(f"user,item\n{names[0]},1\n{names[1]},02\n")
    with pytest.raises(FileFormatError, match=r"bad.csv, line 3, column item: item id '02' is not written as an"):
        R.evaluate(run, test, ["mrr@3"], exclude=tmp_path / "bad.csv", progress=False)


@pytest.mark.parametrize("role", ["user", "item"])
def test_an_exclusion_id_of_another_spelling_than_integer_test_ids_is_refused(tmp_path, role):
    """A test table of integer ids and an exclusion table with "01": the run's "01" is another item
    than 1 (two spellings, two ids), but the exclusion read it as 1 and excluded the relevant item
    1 (P@1 0.0 where it is 1.0 without the padded row). Refused, naming the file, line and column;
    the same exclusion written as the test table writes ids gives the run's value without it."""
    (tmp_path / "test.csv").write_text("user,item\n1,1\n1,2\n")
    (tmp_path / "run.csv").write_text("user,item,score\n1,01,0.9\n1,1,0.8\n1,3,0.7\n")
    padded = "user,item\n1,3\n01,5\n" if role == "user" else "user,item\n1,3\n1,01\n"
    (tmp_path / "exclude.csv").write_text(padded)
    quiet = dict(progress=False)
    with pytest.raises(
        FileFormatError,
        match=rf"exclude.csv, line 3, column {role}: {role} id '01' is not written as an integer id .* are integers",
    ):
        R.evaluate(tmp_path / "run.csv", tmp_path / "test.csv", ["P@1"], exclude=tmp_path / "exclude.csv", **quiet)
    # without the padded row: the list 01, 1 (3 excluded) ranks the relevant 1 second
    (tmp_path / "exclude.csv").write_text("user,item\n1,3\n")
    result = R.evaluate(
        tmp_path / "run.csv", tmp_path / "test.csv", ["P@1", "P@2"], exclude=tmp_path / "exclude.csv", **quiet
    )
    assert result.means == {"precision@1": 0.0, "precision@2": 0.5}


def test_ties_other_than_stable_need_scores_not_a_run():
    """ties='average' shares a tied group's gains; a run is evaluated as ranked lists, so it was
    silently ranked by run_ties instead (NDCG@1 0.0 where the model callable gives 0.25). Refused
    for a run and for ranked lists; a model callable gets the tie-averaged value: one relevant item
    among 4 tied, 1/4 of its gain at position 1."""
    pd = pytest.importorskip("pandas")
    scores = torch.ones(1, 4)
    test = Interactions(torch.tensor([0]), torch.tensor([0]), num_items=4)
    run = pd.DataFrame({"user": [0, 0, 0, 0], "item": [0, 1, 2, 3], "score": [1.0, 1.0, 1.0, 1.0]})
    for given in (run, (torch.tensor([0]), torch.tensor([[3, 2, 1, 0]]))):
        with pytest.raises(ValueError, match="ties='average' .* a run or ranked lists .* model callable"):
            R.evaluate(given, test, ["ndcg@1"], ties="average", progress=False)
    result = R.evaluate(lambda users: scores[users], test, ["ndcg@1"], ties="average", progress=False)
    assert result["ndcg@1"] == pytest.approx(0.25, abs=1e-12)


def test_a_table_with_two_grade_columns_of_usual_names_needs_value(tmp_path):
    """rating and label both name grades: the first of the usual names was read without a word.
    Refused, naming both and value=; with value= the column named is read (its sum of grades)."""
    (tmp_path / "t.csv").write_text("user,item,rating,label\nu,a,5,0\nu,b,1,1\n")
    with pytest.raises(ValueError, match=r"t.csv: the table has several grade columns \['rating', 'label'\].*value="):
        read_interactions(tmp_path / "t.csv")
    for name, expected in (("rating", 6.0), ("label", 1.0)):
        table = read_interactions(tmp_path / "t.csv", value=name)
        assert float(table.csr(torch.tensor([0])).values().sum()) == expected


def test_a_column_named_twice_is_refused_in_every_table_form(tmp_path):
    """A CSV header `user,item,score,score` read the first of the two columns (MRR 0.5 where the
    second's scores give pytrec_eval's 1.0); parquet and Arrow tables raised a bare KeyError."""
    test = Interactions.from_frame(pd.DataFrame({"user": ["u1"], "item": ["b"]}))
    (tmp_path / "run.csv").write_text("user,item,score,score\nu1,a,0,0.1\nu1,b,0,0.9\nu1,c,0,0.5\n")
    with pytest.raises(FileFormatError, match=r"run.csv: the run table names the column 'score' 2 times"):
        R.evaluate(tmp_path / "run.csv", test, ["mrr@3"], progress=False)
    (tmp_path / "test.csv").write_text("user,item,rating,rating\nu1,b,0,5\nu1,c,0,1\n")
    with pytest.raises(FileFormatError, match=r"test.csv: the table names the column 'rating' 2 times"):
        read_interactions(tmp_path / "test.csv")
    table = pa.table(
        [pa.array(["u1", "u1"]), pa.array(["a", "b"]), pa.array([0.0, 0.0]), pa.array([0.1, 0.9])],
        names=["user", "item", "score", "score"],
    )
    pq.write_table(table, tmp_path / "run.parquet")
    with pytest.raises(FileFormatError, match=r"run.parquet: the run table names the column 'score' 2 times"):
        R.evaluate(tmp_path / "run.parquet", test, ["mrr@3"], progress=False)
    frame = pd.DataFrame([["u1", "a", 0.0, 0.1], ["u1", "b", 0.0, 0.9]], columns=["user", "item", "score", "score"])
    for run in (table, frame):
        with pytest.raises(ValueError, match=r"run names the column 'score' 2 times"):
            R.evaluate(run, test, ["mrr@3"], progress=False)
    # a column of another name repeated is not read: no guess, no error; the value is pytrec_eval's
    (tmp_path / "run.csv").write_text("user,item,score,note,note\nu1,a,0.1,x,y\nu1,b,0.9,x,y\nu1,c,0.5,x,y\n")
    got = R.evaluate(tmp_path / "run.csv", test, ["mrr@3"], progress=False)["mrr@3"]
    reference = pytrec_eval.RelevanceEvaluator({"u1": {"b": 1}}, {"recip_rank"}).evaluate(
        {"u1": {"a": 0.1, "b": 0.9, "c": 0.5}}
    )
    assert got == reference["u1"]["recip_rank"] == 1.0


@pytest.mark.parametrize("separator", [",", "\t"])
def test_a_quote_left_open_is_refused_not_read_as_one_id_over_several_lines(tmp_path, separator):
    """Arrow's CSV quoting joined the lines after an open quote into one id: rows of other users
    were lost (3 rows read of 5, MRR 0.17 where the lines as written give pytrec_eval's 0.33)."""
    name = "run.tsv" if separator == "\t" else "run.csv"
    lines = ["user,item,score", "u1,x,0.9", "u1,b,0.8", 'u2,"a,0.9', "u2,b,0.8", 'u3,b",0.5']
    (tmp_path / name).write_text("".join(line.replace(",", separator) + "\n" for line in lines))
    test = Interactions.from_frame(pd.DataFrame({"user": ["u1", "u2", "u3"], "item": ["b", "b", "b"]}))
    with pytest.raises(FileFormatError, match=rf"{name}, line 4, column item: an id holding a line break"):
        R.evaluate(tmp_path / name, test, ["mrr@10"], progress=False)
    # a whole quoted field (a separator inside an id) is still one id, as written
    (tmp_path / name).write_text(f'user{separator}item{separator}score\nu1{separator}"b{separator}c"{separator}0.9\n')
    test = Interactions.from_frame(pd.DataFrame({"user": ["u1"], "item": [f"b{separator}c"]}))
    assert R.evaluate(tmp_path / name, test, ["mrr@10"], progress=False)["mrr@10"] == 1.0


def test_several_usual_names_of_one_role_are_refused_unless_one_is_named(tmp_path):
    """`qid` and `user` in one run table: `user` was read by the list's order, a guess (here of the
    wrong column); refused, and read as named with run_columns (pytrec_eval's value)."""
    (tmp_path / "test.csv").write_text("user,item\nu1,b\nu2,b\n")
    (tmp_path / "run.csv").write_text("qid,user,item,score\nu1,row1,b,0.9\nu1,row1,c,0.95\nu2,row2,b,0.9\n")
    with pytest.raises(FileFormatError, match=r"has several user columns \['user', 'qid'\].*run_columns="):
        R.evaluate(tmp_path / "run.csv", tmp_path / "test.csv", ["mrr@10"], progress=False)
    got = R.evaluate(
        tmp_path / "run.csv", tmp_path / "test.csv", ["mrr@10"], run_columns=("qid", None, None), progress=False
    )["mrr@10"]
    reference = pytrec_eval.RelevanceEvaluator({"u1": {"b": 1}, "u2": {"b": 1}}, {"recip_rank"}).evaluate(
        {"u1": {"b": 0.9, "c": 0.95}, "u2": {"b": 0.9}}
    )
    assert got == pytest.approx((reference["u1"]["recip_rank"] + reference["u2"]["recip_rank"]) / 2) == 0.75
    (tmp_path / "table.csv").write_text("user,item,item_id\nu1,b,7\n")
    with pytest.raises(FileFormatError, match=r"the table has several item columns \['item', 'item_id'\].*item=\.\.\."):
        read_interactions(tmp_path / "table.csv")
    assert read_interactions(tmp_path / "table.csv", item="item_id").item_map.ids.tolist() == [7]


def test_tied_integer_ids_are_ordered_as_text_in_every_run_form(tmp_path):
    """trec_eval orders equal scores by docid compared as text (9 before 10). A CSV run did so and
    a parquet or frame copy of it compared the integers (10 before 9): MRR 1.0 against 0.5 for
    the same rows. Every form now gives pytrec_eval's value."""
    rng = np.random.default_rng(3)
    rows = [(user, item, float(rng.integers(0, 3))) for user in range(1, 25) for item in rng.choice(120, 12, False)]
    judged = {(user, int(item)) for user in range(1, 25) for item in rng.choice(120, 4, False)}
    frame = pd.DataFrame(rows, columns=["user", "item", "score"])
    (tmp_path / "test.csv").write_text("user,item\n" + "".join(f"{u},{i}\n" for u, i in sorted(judged)))
    frame.to_csv(tmp_path / "run.csv", index=False)
    frame.to_parquet(tmp_path / "run.parquet")
    qrels: dict = {}
    for user, item in judged:
        qrels.setdefault(str(user), {})[str(item)] = 1
    trec_run: dict = {}
    for user, item, score in rows:
        trec_run.setdefault(str(user), {})[str(item)] = score
    measures = {"recip_rank", "ndcg_cut_5"}
    reference = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(trec_run)
    users = sorted(qrels, key=int)
    expected = {m: [reference[u][m] for u in users] for m in measures}
    for run in (tmp_path / "run.csv", tmp_path / "run.parquet", frame, pa.Table.from_pandas(frame)):
        result = R.evaluate(
            run, tmp_path / "test.csv", ["mrr@1000", "ndcg@5"], per_user=True, progress=False, **TREC_EVAL
        )
        assert [str(u) for u in result.user_ids] == users
        np.testing.assert_allclose(result.per_user()["mrr@1000"], expected["recip_rank"], rtol=0, atol=1e-12)
        np.testing.assert_allclose(result.per_user()["ndcg@5"], expected["ndcg_cut_5"], rtol=0, atol=1e-12)


def test_an_arrow_dictionary_that_lists_an_id_twice_reads_as_its_plain_ids(tmp_path):
    """A hand-built dictionary column may list one id under two codes: an item ranked twice went
    unnoticed (MRR 0.25, where the same rows as plain text are refused), and a user's rows under
    two codes were two users. Both now read as the plain ids do."""
    (tmp_path / "q").write_text("u1 0 b 1\nu2 0 y 1\n")
    codes = pa.array([0, 1, 2, 3], pa.int32())
    items = pa.DictionaryArray.from_arrays(codes, pa.array(["x", "x", "y", "b"]))
    run = pa.table({"user": ["u1"] * 4, "item": items, "score": [0.9, 0.8, 0.7, 0.6]})
    with pytest.raises(FileFormatError, match=r"run, row 1, column item: the user ranks item 'x' twice"):
        R.evaluate(run, tmp_path / "q", ["mrr@10"], progress=False)
    users = pa.DictionaryArray.from_arrays(codes, pa.array(["u2", "u2", "u1", "u1"]))
    run = pa.table({"user": users, "item": ["x", "y", "b", "z"], "score": [0.9, 0.8, 0.7, 0.6]})
    result = R.evaluate(run, tmp_path / "q", ["mrr@10"], per_user=True, progress=False)
    reference = pytrec_eval.RelevanceEvaluator({"u1": {"b": 1}, "u2": {"y": 1}}, {"recip_rank"}).evaluate(
        {"u2": {"x": 0.9, "y": 0.8}, "u1": {"b": 0.7, "z": 0.6}}
    )
    assert list(result.user_ids) == ["u1", "u2"]
    assert result.per_user()["mrr@10"].tolist() == [reference["u1"]["recip_rank"], reference["u2"]["recip_rank"]]


def test_negative_integer_ids_of_a_mapped_test_table_are_read_in_a_run_frame(tmp_path):
    """from_frame maps integer ids, -1 included, and a run CSV's -1 matched it; a run frame's -1
    was refused ("ids must be >= 0"). Every form now matches it (pytrec_eval's values); a table of
    dense ids (no map) still refuses a negative id."""
    test = Interactions.from_frame(pd.DataFrame({"user": [-1, 2], "item": [-20, 40]}))
    frame = pd.DataFrame({"user": [-1, -1, 2], "item": [-20, -7, 40], "score": [1.0, 2.0, 1.0]})
    frame.to_csv(tmp_path / "run.csv", index=False)
    reference = pytrec_eval.RelevanceEvaluator({"-1": {"-20": 1}, "2": {"40": 1}}, {"recip_rank"}).evaluate(
        {"-1": {"-20": 1.0, "-7": 2.0}, "2": {"40": 1.0}}
    )
    for run in (frame, pa.Table.from_pandas(frame), tmp_path / "run.csv"):
        result = R.evaluate(run, test, ["mrr@10"], per_user=True, progress=False)
        assert result.per_user()["mrr@10"].tolist() == [reference["-1"]["recip_rank"], reference["2"]["recip_rank"]]
    # sampled: the catalog holds -7 too; user -1's item -20 ranks behind -7 (HR@1 0), user 2's first
    sampled = R.evaluate(
        frame, test, ["hit_rate@1"], sampled={"num_negatives": 2, "estimators": ["naive"]}, progress=False
    )
    assert sampled["hit_rate@1/naive"] == 0.5
    dense = Interactions(torch.tensor([1, 2]), torch.tensor([20, 40]))
    with pytest.raises(FileFormatError, match=r"run, row 0, column user: ids must be >= 0, got -1"):
        R.evaluate(frame, dense, ["mrr@10"], progress=False)


def test_bfloat16_grades_are_read_and_meet_the_threshold_as_bfloat16_labels_do():
    """bfloat16 grades (no numpy dtype) raised numpy's "unsupported ScalarType" naming no
    argument; read exactly, they keep their dtype: 0.7 as bfloat16 (0.69921875) meets the
    threshold 0.7 rounded to bfloat16, as RankingMetrics counts the same bfloat16 labels."""
    grades = torch.tensor([0.7, 1.0], dtype=torch.bfloat16)
    assert float(grades[0]) == 0.69921875 and float(torch.tensor(0.7, dtype=torch.bfloat16)) == 0.69921875
    labels = torch.zeros(2, 3, dtype=torch.bfloat16)
    labels[0, 0], labels[1, 1] = grades
    scores = torch.tensor([[0.9, 0.1, 0.2], [0.1, 0.9, 0.2]])
    metric = R.RankingMetrics([1], metrics=["hit_rate"], relevance_threshold=0.7, per_user=True)
    metric.update((scores, labels))
    assert metric.per_user()["hit_rate@1"].tolist() == [1.0, 1.0]
    test = Interactions(torch.tensor([0, 1]), torch.tensor([0, 1]), grades, num_items=3)
    assert test.csr(torch.arange(2)).values().dtype == torch.bfloat16
    result = R.evaluate(lambda users: scores[users], test, ["hit_rate@1"], relevance_threshold=0.7, per_user=True)
    assert result.per_user()["hit_rate@1"].tolist() == [1.0, 1.0]


def test_float32_grades_meet_the_threshold_as_float32_labels_do(tmp_path):
    """A float32 grade 0.7 was stored as float64 0.699999988 and missed relevance_threshold=0.7,
    where RankingMetrics on the same float32 labels counts it (the threshold is compared in the
    labels' dtype): user 0 dropped out of the mean. Frames, tensors and parquet now agree with
    the metric on the float32 labels."""
    grades = np.array([0.7, 1.0], dtype=np.float32)
    labels = torch.zeros(2, 3, dtype=torch.float32)
    labels[0, 0], labels[1, 1] = 0.7, 1.0
    scores = torch.tensor([[0.9, 0.1, 0.2], [0.1, 0.9, 0.2]])
    metric = R.RankingMetrics([1], metrics=["hit_rate"], relevance_threshold=0.7, per_user=True)
    metric.update((scores, labels))
    expected = metric.per_user()["hit_rate@1"].tolist()
    assert expected == [1.0, 1.0]
    frame = pd.DataFrame({"user": [0, 1], "item": [0, 1], "rating": grades})
    frame.to_parquet(tmp_path / "t.parquet")
    tables = [
        Interactions.from_frame(frame, value="rating", map_ids=False, num_items=3),
        Interactions(torch.tensor([0, 1]), torch.tensor([0, 1]), torch.from_numpy(grades), num_items=3),
    ]
    for test in tables:
        result = R.evaluate(lambda users: scores[users], test, ["hit_rate@1"], relevance_threshold=0.7, per_user=True)
        assert result.per_user()["hit_rate@1"].tolist() == expected
    run = pd.DataFrame({"user": [0, 1], "item": [0, 1], "score": [1.0, 1.0]})
    result = R.evaluate(run, tmp_path / "t.parquet", ["hit_rate@1"], relevance_threshold=0.7, per_user=True)
    assert result.per_user()["hit_rate@1"].tolist() == expected
