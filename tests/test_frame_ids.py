"""Interactions.from_frame maps external ids of any type to dense ids (as RecTools and LensKit):
numbers checked against numpy and pytrec_eval on the original ids."""

import warnings

import numpy as np
import pytest
import torch

import ignite_recsys as R
from ignite_recsys import IdMap, Interactions

pd = pytest.importorskip("pandas")


def _frame(seed=0, users=40, base=5000, step=7, distinct=300):
    """Users with integer ids 100, 103, ...; items among ``distinct`` ids base, base + step, ..."""
    rng = np.random.default_rng(seed)
    catalog = base + step * np.arange(distinct)
    rows = [(100 + 3 * user, item) for user in range(users) for item in rng.choice(catalog, 4, replace=False)]
    return pd.DataFrame(rows, columns=["user", "item"]), catalog


def test_integer_ids_are_mapped_like_strings():
    frame, catalog = _frame()
    test = Interactions.from_frame(frame)
    distinct = np.unique(frame["item"])
    assert test.item_map is not None and test.user_map is not None
    assert test.num_items == len(distinct) and test.item_map.ids.tolist() == distinct.tolist()
    assert test.user_map.ids.tolist() == sorted(set(frame["user"]))
    assert isinstance(test.item_map, IdMap) and R.IdMap is IdMap
    assert Interactions.from_frame(frame, num_items=1000).num_items == 1000  # the catalog given
    # a training table numbered by the test table's maps (the documented way), repeated clicks merged
    train = Interactions.from_frame(frame, user_map=test.user_map, item_map=test.item_map, duplicates="max")
    assert train.item_map is test.item_map and len(train) == len(test)
    # each user's items, decoded, are the frame's
    first = test.users[:1]
    items = test.item_ids(first).ids[0]
    expected = sorted(frame.loc[frame["user"] == test.user_map.ids[0], "item"])
    assert test.item_map.decode(items[items >= 0]).tolist() == expected


def test_map_ids_false_and_tensors_keep_dense_ids():
    frame = pd.DataFrame({"user": [0, 2, 2], "item": [4, 1, 3]})
    kept = Interactions.from_frame(frame, map_ids=False)
    assert kept.user_map is None and kept.item_map is None and kept.num_items == 5
    tensors = Interactions.from_frame({"user": torch.tensor([0, 2, 2]), "item": torch.tensor([4, 1, 3])})
    assert tensors.item_map is None and tensors.num_items == 5
    assert tensors.item_ids(torch.tensor([2])).ids.tolist() == [[1, 3]]
    mapped = Interactions.from_frame({"user": torch.tensor([0, 2, 2]), "item": torch.tensor([4, 1, 3])}, map_ids=True)
    assert mapped.item_map.ids.tolist() == [1, 3, 4] and mapped.num_items == 3
    with pytest.raises(TypeError, match="map_ids"):
        Interactions.from_frame(frame, map_ids="yes")


def test_a_model_scores_the_mapped_catalog():
    frame, catalog = _frame(seed=1)
    # the maps the model numbers users and items by, given to the table (a table's own map of
    # integer ids is refused with a model: tests/test_model_ids.py)
    users, _ = R.IdMap.from_values(frame["user"].to_numpy())
    items, _ = R.IdMap.from_values(frame["item"].to_numpy())
    test = Interactions.from_frame(frame, user_map=users, item_map=items)
    rng = np.random.default_rng(2)
    scores = torch.from_numpy(rng.random((len(test.user_map), test.num_items)))
    result = R.evaluate(lambda users: scores[users], test, ["recall@5", "hit_rate@10"], progress=False)
    # numpy from the formula on the original ids: column j of the scores is item item_map.ids[j]
    recall, hit = [], []
    for row, user in enumerate(test.user_map.ids):
        relevant = set(frame.loc[frame["user"] == user, "item"])
        order = np.argsort(-scores[row].numpy(), kind="stable")
        top = [test.item_map.ids[j] for j in order]
        recall.append(len(relevant & set(top[:5])) / len(relevant))
        hit.append(float(bool(relevant & set(top[:10]))))
    assert result["recall@5"] == pytest.approx(np.mean(recall), abs=1e-12)
    assert result["hit_rate@10"] == pytest.approx(np.mean(hit), abs=1e-12)


def test_integer_ids_past_int32_in_frames_equal_pytrec_eval():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    base = 2**40
    test_frame = pd.DataFrame({"user": [base, base, 3], "item": [base + 5, base + 9, base + 5], "rel": [1, 2, 1]})
    run_frame = pd.DataFrame(
        {
            "user": [base, base, base, 3, 3],
            "item": [base + 9, 4, base + 5, base + 7, base + 5],
            "score": [3, 2, 1, 2, 1],
        }
    )
    test = Interactions.from_frame(test_frame, value="rel")
    result = R.evaluate(run_frame, test, ["ndcg@3", "mrr@3"], gain_function="linear", progress=False)
    qrels = {str(base): {str(base + 5): 1, str(base + 9): 2}, "3": {str(base + 5): 1}}
    run = {str(base): {str(base + 9): 3.0, "4": 2.0, str(base + 5): 1.0}, "3": {str(base + 7): 2.0, str(base + 5): 1.0}}
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_3", "recip_rank"}).evaluate(run)
    assert result["ndcg@3"] == pytest.approx(np.mean([v["ndcg_cut_3"] for v in reference.values()]), abs=1e-12)
    assert result["mrr@3"] == pytest.approx(np.mean([v["recip_rank"] for v in reference.values()]), abs=1e-12)


def test_unsigned_ids_past_int64_are_refused_naming_the_column():
    frame = {"user": np.array([1, 2], dtype=np.uint64), "item": np.array([2**63 + 1, 5], dtype=np.uint64)}
    with pytest.raises(ValueError, match="items: id 9223372036854775809 at row 0 does not fit in int64"):
        Interactions.from_frame(frame)


@pytest.mark.parametrize("form", ["frame", "parquet"])
@pytest.mark.parametrize("role", ["user", "item"])
def test_float_run_ids_are_refused_against_any_test_table(tmp_path, form, role):
    """A float id column (pandas after a merge with missing values): as text 123456789012.0 reads
    1.23456789012e+11, which matches no qrels id, so the run would score 0 without a word. It is
    refused, naming the column and row, against text-id qrels as against an integer-id table;
    the same run with integer ids gives pytrec_eval's value."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    pytest.importorskip("pyarrow.parquet")  # to_parquet
    (tmp_path / "qrels").write_text("1 0 123456789012 1\n2 0 7 1\n")
    ids = {"user": [1, 1, 2], "item": [123456789012, 5, 7]}
    run = pd.DataFrame({**ids, "score": [2.0, 1.0, 1.0]})
    floats = run.astype({role: float})
    if form == "parquet":
        floats.to_parquet(tmp_path / "run.parquet")
        floats = tmp_path / "run.parquet"
    tables = (tmp_path / "qrels", Interactions.from_frame(pd.DataFrame({"user": [1, 2], "item": [123456789012, 7]})))
    for test in tables:
        with pytest.raises(ValueError, match=rf"column {role}: ids must be integers or strings, got double"):
            R.evaluate(floats, test, ["recall@10"], progress=False)
    run_dict = {"1": {"123456789012": 2.0, "5": 1.0}, "2": {"7": 1.0}}
    qrels = {"1": {"123456789012": 1}, "2": {"7": 1}}
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"recall_10"}).evaluate(run_dict)
    result = R.evaluate(run, tmp_path / "qrels", ["recall@10"], progress=False)
    assert result["recall@10"] == pytest.approx(np.mean([v["recall_10"] for v in expected.values()]))


def test_ranked_lists_against_a_table_that_mapped_its_item_ids_are_refused():
    """Ranked lists' items are dense ids: against a table that numbered its integer items
    5000, 5007, 7093 as 0, 1, 2, a list of the original ids would be read as other items (a
    perfect list scored 0). Refused, naming the ids; with map_ids=False the original ids are the
    dense ids, and the lists give pytrec_eval's values."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    logs = pd.DataFrame({"user": [31, 31, 78], "item": [5000, 5007, 7093]})
    ranked = torch.tensor([[5007, 4, 5000], [7093, -1, -1]])
    users = torch.tensor([31, 78])
    with pytest.raises(ValueError, match=r"integer item ids to dense ids 0..2 \(ids 5000 .. 7093\).*ranked lists"):
        R.evaluate((users, ranked), Interactions.from_frame(logs), ["recall@2"], progress=False)
    kept = Interactions.from_frame(logs, map_ids=False)
    result = R.evaluate((users, ranked), kept, ["recall@2", "mrr@3"], progress=False)
    run = {"31": {"5007": 3.0, "4": 2.0, "5000": 1.0}, "78": {"7093": 3.0}}
    qrels = {"31": {"5000": 1, "5007": 1}, "78": {"7093": 1}}
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"recall_2", "recip_rank"}).evaluate(run)
    assert result["recall@2"] == pytest.approx(np.mean([v["recall_2"] for v in expected.values()]))
    assert result["mrr@3"] == pytest.approx(np.mean([v["recip_rank"] for v in expected.values()]))


def test_a_run_id_past_int64_is_an_item_an_integer_test_table_does_not_hold(tmp_path):
    """A 20-digit docid against a table of integer ids: no id of that table, so an irrelevant item
    (as trec_eval compares the text), where Arrow's cast to int64 failed with its own error."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    (tmp_path / "test.csv").write_text("user,item,rel\n7,1,1\n7,3,1\n8,3,1\n")
    (tmp_path / "run").write_text("7 Q0 99999999999999999999 1 3 t\n7 Q0 1 2 2 t\n8 Q0 9223372036854775807 1 1 t\n")
    result = R.evaluate(tmp_path / "run", tmp_path / "test.csv", ["mrr@10", "recall@10"], progress=False)
    qrels = {"7": {"1": 1, "3": 1}, "8": {"3": 1}}
    run = {"7": {"99999999999999999999": 3.0, "1": 2.0}, "8": {"9223372036854775807": 1.0}}
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank", "recall_10"}).evaluate(run)
    assert result["mrr@10"] == pytest.approx(np.mean([v["recip_rank"] for v in expected.values()]))
    assert result["recall@10"] == pytest.approx(np.mean([v["recall_10"] for v in expected.values()]))


@pytest.mark.parametrize("form", ["table", "dictionary", "parquet"])
def test_string_view_ids_equal_pytrec_eval(tmp_path, form):
    """Arrow's string_view text (what polars and DuckDB hand over) as the run's and the test
    table's ids, in an Arrow table, dictionary-encoded, or written to parquet: read as the same
    text, with pytrec_eval's values (Arrow has no take kernel for string_view: it crashed)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pytrec_eval = pytest.importorskip("pytrec_eval")
    run = {"q1": {"d1": 0.9, "d2": 0.8, "d3": 0.1}, "q2": {"d3": 0.7, "d1": 0.6}, "q3": {"d2": 0.5}}
    qrels = {"q1": {"d2": 1, "d3": 2}, "q2": {"d1": 1}, "q4": {"d1": 1}}

    def text(values):
        array = pa.array(values, pa.string_view())
        return array.dictionary_encode() if form == "dictionary" else array

    rows = [(user, item, score) for user, items in run.items() for item, score in items.items()]
    run_table = pa.table({"user": text([r[0] for r in rows]), "item": text([r[1] for r in rows]),
                          "score": pa.array([r[2] for r in rows])})  # fmt: skip
    judged = [(user, item, grade) for user, items in qrels.items() for item, grade in items.items()]
    test_table = pa.table({"user": text([j[0] for j in judged]), "item": text([j[1] for j in judged]),
                           "value": pa.array([j[2] for j in judged])})  # fmt: skip
    if form == "parquet":
        pq.write_table(run_table, tmp_path / "run.parquet")
        pq.write_table(test_table, tmp_path / "test.parquet")
        run_table, test = tmp_path / "run.parquet", tmp_path / "test.parquet"
        assert pq.read_schema(run_table).field("item").type == pa.string_view()
    else:
        test = Interactions.from_frame(test_table, value="value")
    result = R.evaluate(run_table, test, ["ndcg@3", "recall@2"], gain_function="linear", per_user=True, progress=False)
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_3", "recall_2"}).evaluate(run)
    for key, measure in (("ndcg@3", "ndcg_cut_3"), ("recall@2", "recall_2")):
        expected = np.mean([reference[q][measure] if q in reference else 0.0 for q in qrels])
        assert result[key] == pytest.approx(expected, abs=1e-12), key


def test_ranked_lists_with_users_that_are_not_integer_ids_are_refused():
    """users of (users, ranked) against a table of dense ids: 0.7, 2.2, 3.9 were cut to 0, 2, 3 and
    evaluated as those users; bool users as 0 and 1. Refused, naming users and the dtype; the
    integer ids give pytrec_eval's values."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    test = Interactions(torch.tensor([0, 2, 3]), torch.tensor([1, 0, 2]), num_items=4)
    ranked = torch.tensor([[1, 0], [3, 0], [2, 1]])
    for users in (
        torch.tensor([0.7, 2.2, 3.9]),
        np.array([0.0, 2.0, 3.0]),
        [0.0, 2.0, 3.0],
        torch.tensor([True, False, True]),
    ):
        with pytest.raises(TypeError, match=r"users must be integer user ids .*, got (float|bool)"):
            R.evaluate((users, ranked), test, ["mrr@2"], progress=False)
    result = R.evaluate((np.array([0, 2, 3]), ranked), test, ["mrr@2"], progress=False)
    run = {"0": {"1": 2.0, "0": 1.0}, "2": {"3": 2.0, "0": 1.0}, "3": {"2": 2.0, "1": 1.0}}
    qrels = {"0": {"1": 1}, "2": {"0": 1}, "3": {"2": 1}}
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run)
    assert result["mrr@2"] == pytest.approx(np.mean([v["recip_rank"] for v in expected.values()]))


@pytest.mark.parametrize("mapped", [False, True])
def test_ranked_lists_of_users_the_test_table_lacks_are_skipped_and_counted(mapped):
    """A user of (users, ranked) without test interactions is skipped and counted, as a run's
    rows are, whether the table maps its user ids (text ids, a frame) or not (dense ids): with a
    map it raised. pytrec_eval's values over the test users (a test user the lists miss: 0)."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    ranked = torch.tensor([[1, 0, 2], [2, 1, 0], [0, 1, 2], [1, 2, 0]])
    if mapped:
        test = Interactions(["a", "a", "b", "c"], torch.tensor([0, 1, 2, 0]), num_items=3)
        users, names = ["a", "b", "zz", "yy"], ["a", "b", "zz", "yy"]
    else:
        test = Interactions(torch.tensor([0, 0, 1, 2]), torch.tensor([0, 1, 2, 0]), num_items=3)
        users, names = torch.tensor([0, 1, 5, 7]), ["0", "1", "5", "7"]
    result = R.evaluate((users, ranked), test, ["recall@1", "mrr@3"], progress=False)
    assert result.info["run_rows_not_in_test"] == 2 and result.info["test_users_not_in_run"] == 1
    tested = ["a", "b", "c"] if mapped else ["0", "1", "2"]
    qrels = {tested[0]: {"0": 1, "1": 1}, tested[1]: {"2": 1}, tested[2]: {"0": 1}}
    run = {name: {str(item): 3.0 - rank for rank, item in enumerate(row.tolist())} for name, row in zip(names, ranked)}
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"recall_1", "recip_rank"}).evaluate(run)
    for key, measure in (("recall@1", "recall_1"), ("mrr@3", "recip_rank")):
        want = np.mean([expected[user][measure] if user in expected else 0.0 for user in tested])
        assert result[key] == pytest.approx(want, abs=1e-12)
    twice = users[:3] + ["zz"] if mapped else torch.tensor([0, 1, 5, 5])
    with pytest.raises(ValueError, match="users must be distinct"):
        R.evaluate((twice, ranked), test, ["recall@1"], progress=False)


def test_user_ids_of_a_table_without_a_user_map_are_its_integer_users():
    """Interactions.user_ids on a table of dense user ids: 2.7 read as user 2, True as 1, an
    unsigned id past int64 as -1 and a user the table lacks passed through. Refused as a mapped
    table refuses them; the table's own users come back as they are."""
    test = Interactions(torch.tensor([0, 2, 3]), torch.tensor([1, 4, 5]))
    assert test.user_ids([3, 0]).tolist() == [3, 0]
    assert test.user_ids(np.array([2], dtype=np.uint8)).tolist() == [2]
    for empty in ([], (), np.array([], dtype=np.int64)):  # an empty list reads as float64
        ids = test.user_ids(empty)
        assert ids.dtype == torch.int64 and ids.tolist() == []
    for bad, error, message in (
        ([2.7], TypeError, "users must hold integer or string ids, got dtype float64"),
        ([True], TypeError, "users must hold integer or string ids, got dtype bool"),
        (["2"], TypeError, "no user map"),
        (np.array([2**64 - 1], dtype=np.uint64), ValueError, "does not fit in int64"),
        ([99, 2, -4], ValueError, r"users: \[99, -4\] are not users of the table"),
    ):
        with pytest.raises(error, match=message):
            test.user_ids(bad)


@pytest.mark.parametrize(
    "users, error, message",
    [
        (["a", None, "b"], TypeError, "users must not hold missing values, got None at row 1"),
        (["a", float("nan"), "b"], TypeError, "users must not hold missing values, got nan at row 1"),
        ([1, "a", 2], TypeError, r"users must hold integer or string ids, got a int \(1\)"),
        (["a", 1, "b"], TypeError, r"users must hold integer or string ids, got a int \(1\)"),
    ],
)
def test_a_list_of_text_ids_beside_other_values_is_refused_naming_one(users, error, message):
    """numpy makes a list of text and other values all text: None was the user "None", NaN the
    user "nan", 1 the user "1" (a run's 1 beside text ids too). Refused naming the value, for a
    table, a frame given as a dict of lists, and a run; a pandas column of objects names the
    missing value rather than the first integer."""
    items = torch.tensor([0, 1, 2])
    with pytest.raises(error, match=message):
        Interactions(users, items)
    with pytest.raises(error, match=message):
        Interactions.from_frame({"user": users, "item": [0, 1, 2]})
    test = Interactions(["a", "b"], torch.tensor([0, 1]), num_items=3)
    with pytest.raises((TypeError, R.data.FileFormatError), match="run|row 1"):
        R.evaluate({"user": users, "item": [0, 1, 2], "score": [1.0, 0.5, 0.2]}, test, ["mrr@2"], progress=False)
    with pytest.raises(TypeError, match="users must not hold missing values, got None at row 1"):
        Interactions.from_frame(pd.DataFrame({"user": [1, None, 2], "item": [0, 1, 2]}, dtype=object))


def test_a_frame_with_an_unread_grade_column_warns():
    """A frame with a `rating` column and no value=: every row is read as grade 1, where
    read_interactions reads that column of the same table as grades (NDCG@3 1.0 against
    pytrec_eval's 0.797 with the grades). It warns, naming the column and value=; with
    value="rating" the grades give pytrec_eval's value."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    frame = pd.DataFrame({"user": ["a", "a", "a"], "item": ["x", "y", "z"], "rating": [1, 2, 3], "ts": [5, 6, 7]})
    with pytest.warns(R.InputWarning, match=r"column 'rating' is not read.*value='rating'"):
        R.Interactions.from_frame(frame)
    run = pd.DataFrame({"user": ["a", "a", "a"], "item": ["x", "y", "z"], "score": [3.0, 2.0, 1.0]})
    graded = R.Interactions.from_frame(frame, value="rating")
    result = R.evaluate(run, graded, ["ndcg@3"], gain_function="linear", progress=False)
    qrels = {"a": {"x": 1, "y": 2, "z": 3}}
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_3"}).evaluate({"a": {"x": 3.0, "y": 2.0, "z": 1.0}})
    assert result["ndcg@3"] == pytest.approx(expected["a"]["ndcg_cut_3"], abs=1e-12)
    with warnings.catch_warnings():  # no grade column of a usual name: nothing to say
        warnings.simplefilter("error")
        R.Interactions.from_frame(frame.drop(columns="rating"))


@pytest.mark.parametrize("graded", [False, True])
def test_pairs_give_back_every_interaction_user_by_user(graded):
    """Interactions.pairs(): the table's rows as dense (user, item, grade), ordered by user, the
    duplicates merged by the table's rule: the same multiset as the pairs given."""
    rng = np.random.default_rng(5)
    users, items = rng.integers(0, 40, 300), rng.integers(0, 1000, 300)
    unique = {}
    for user, item, grade in zip(users, items, rng.integers(1, 5, 300).astype(float)):
        unique[(int(user), int(item))] = max(grade, unique.get((int(user), int(item)), 0.0))
    keys = list(unique)
    table = Interactions(
        [u for u, _ in keys], [i for _, i in keys], [unique[k] for k in keys] if graded else None, num_items=1000
    )
    got_users, got_items, got_grades = table.pairs()
    assert got_users.dtype == got_items.dtype == np.int64 and (np.diff(got_users) >= 0).all()
    want = sorted((u, i, unique[(u, i)] if graded else None) for u, i in keys)
    got = sorted(zip(got_users.tolist(), got_items.tolist(), got_grades.tolist() if graded else [None] * len(keys)))
    assert got == want
    assert (got_grades is None) == (not graded)
    for own in (got_items, got_grades) if graded else (got_items,):  # the table's arrays: read-only
        with pytest.raises(ValueError, match="read-only"):
            own[0] = -1
    assert table.pairs()[1].tolist() == got_items.tolist()
