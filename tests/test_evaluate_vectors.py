"""evaluate() and ``ignite-recsys evaluate`` from user and item vectors (DotScores), against
NDCG and recall written from their formulas in numpy on the score matrix ``U @ V.T + b``, and
against pytrec_eval; and their refusals."""

import contextlib
import io
import json

import numpy as np
import pytest
import torch

from ignite_recsys import DotScores, Interactions, evaluate
from ignite_recsys.data import IdMap

pytrec_eval = pytest.importorskip("pytrec_eval")


def _reference(scores, relevant, excluded, k_ndcg=10, k_recall=20):
    """Per-user NDCG@k (binary gains, log2 discount, ideal over min(|R|, k)) and recall@k =
    hits / |R|, ranking each row by a stable descending sort (the lower item index first on equal
    scores) after dropping the excluded items."""
    ndcg, recall = [], []
    for row, wanted in enumerate(relevant):
        order = np.argsort(-scores[row], kind="stable")
        order = order[~np.isin(order, list(excluded.get(row, ())))]
        gains = np.isin(order, list(wanted)).astype(np.float64)
        discounts = 1.0 / np.log2(np.arange(2, k_ndcg + 2))
        ideal = discounts[: min(len(wanted), k_ndcg)].sum()
        ndcg.append((gains[:k_ndcg] * discounts[: len(gains[:k_ndcg])]).sum() / ideal)
        recall.append(gains[:k_recall].sum() / len(wanted))
    return np.array(ndcg), np.array(recall)


def _data(seed=0, users=40, items=300, d=6, integer=True):
    """Vectors (small integers in float64 by default: exact products and many ties), 1-6 test
    items and 0-15 excluded items per user, disjoint."""
    g = np.random.default_rng(seed)
    draw = (lambda shape: g.integers(-2, 3, shape).astype(np.float64)) if integer else g.standard_normal
    U, V, b = draw((users, d)), draw((items, d)), draw(items)
    relevant, excluded = [], {}
    for user in range(users):
        chosen = g.choice(items, int(g.integers(1, 7)) + int(g.integers(0, 16)), replace=False)
        cut = int(g.integers(1, 7)) if len(chosen) > 6 else len(chosen)
        relevant.append(set(chosen[:cut].tolist()))
        if len(chosen) > cut:
            excluded[user] = set(chosen[cut:].tolist())
    return U, V, b, relevant, excluded


def _pairs(sets):
    rows = [
        (user, item)
        for user, items in (sets.items() if isinstance(sets, dict) else enumerate(sets))
        for item in sorted(items)
    ]
    return np.array([r[0] for r in rows]), np.array([r[1] for r in rows])


def _tables(relevant, excluded, items):
    test = Interactions(*map(torch.from_numpy, _pairs(relevant)), num_items=items)
    train = Interactions(*map(torch.from_numpy, _pairs(excluded)), num_items=items)
    return test, train


METRICS = ["ndcg@10", "recall@20"]


@pytest.mark.parametrize("batch_size, memory_budget", [(7, 2**28), (None, 2**28), (5, 200)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_vectors_equal_the_formula_per_user(batch_size, memory_budget, with_bias):
    """Heavy ties (small integer vectors); one tile, or tiles of 5 items (memory_budget=200 bytes
    of float64 scores for 5 users)."""
    U, V, b, relevant, excluded = _data()
    bias = b if with_bias else np.zeros_like(b)
    test, train = _tables(relevant, excluded, len(V))
    vectors = (torch.from_numpy(U), torch.from_numpy(V), torch.from_numpy(b) if with_bias else None)
    dots = DotScores(*vectors, memory_budget=memory_budget)
    result = evaluate(dots, test, METRICS, exclude=train, batch_size=batch_size, per_user=True, progress=False)
    ndcg, recall = _reference(U @ V.T + bias, relevant, excluded)
    assert result.user_ids.tolist() == list(range(len(U)))
    np.testing.assert_allclose(result.per_user()["ndcg@10"].numpy(), ndcg, rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.per_user()["recall@20"].numpy(), recall, rtol=0, atol=1e-12)
    assert abs(result["ndcg@10"] - ndcg.mean()) < 1e-12


def test_a_model_returning_dot_scores_with_id_maps():
    """A model callable returns its batch's DotScores; the tables number string ids by the maps of
    the vectors' rows (shuffled ids), and the per-user values come back under those ids."""
    U, V, b, relevant, excluded = _data(seed=1, users=25, items=120)
    g = np.random.default_rng(5)
    user_names = np.array([f"u{n:03d}" for n in g.permutation(len(U))], dtype=object)
    item_names = np.array([f"i{n:04d}" for n in g.permutation(len(V))], dtype=object)
    user_map, item_map = IdMap(user_names), IdMap(item_names)
    users, items = _pairs(relevant)
    test = Interactions(user_names[users], item_names[items], user_map=user_map, item_map=item_map)
    users, items = _pairs(excluded)
    train = Interactions(user_names[users], item_names[items], user_map=user_map, item_map=item_map)
    Ut, Vt, bt = map(torch.from_numpy, (U, V, b))
    result = evaluate(
        lambda batch: DotScores(Ut[batch], Vt, bt, memory_budget=256),  # tiles of a few items
        test,
        METRICS,
        exclude=train,
        batch_size=8,
        per_user=True,
        progress=False,
    )
    ndcg, recall = _reference(U @ V.T + b, relevant, excluded)
    by_id = {name: row for row, name in enumerate(user_names)}
    rows = [by_id[name] for name in result.user_ids]
    np.testing.assert_allclose(result.per_user()["ndcg@10"].numpy(), ndcg[rows], rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.per_user()["recall@20"].numpy(), recall[rows], rtol=0, atol=1e-12)
    whole = evaluate(DotScores(Ut, Vt, bt), test, METRICS, exclude=train, progress=False)
    assert abs(whole["ndcg@10"] - ndcg.mean()) < 1e-12 and abs(whole["recall@20"] - recall.mean()) < 1e-12


def _trec_eval(U, V, b, relevant, excluded):
    """pytrec_eval's means of ndcg_cut_10 and recall_20, the excluded items left out of the run."""
    scores = U @ V.T + b
    run = {
        str(u): {str(i): float(scores[u, i]) for i in range(len(V)) if i not in excluded.get(u, ())}
        for u in range(len(U))
    }
    qrels = {str(u): {str(i): 1 for i in items} for u, items in enumerate(relevant)}
    values = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "recall_20"}).evaluate(run)
    return {
        "ndcg@10": np.mean([v["ndcg_cut_10"] for v in values.values()]),
        "recall@20": np.mean([v["recall_20"] for v in values.values()]),
    }


def test_vectors_equal_pytrec_eval():
    U, V, b, relevant, excluded = _data(seed=2, users=30, items=200, integer=False)  # no ties
    test, train = _tables(relevant, excluded, len(V))
    dots = DotScores(*map(torch.from_numpy, (U, V)), torch.from_numpy(b))
    result = evaluate(dots, test, METRICS, exclude=train, progress=False)
    expected = _trec_eval(U, V, b, relevant, excluded)
    for key in METRICS:
        assert abs(result[key] - expected[key]) < 1e-12


def test_python_refusals():
    U, V, b, relevant, excluded = _data(users=10, items=50)
    test, train = _tables(relevant, excluded, len(V))
    Ut, Vt = torch.from_numpy(U), torch.from_numpy(V)
    with pytest.raises(TypeError, match="sampled="):
        evaluate(DotScores(Ut, Vt), test, METRICS, sampled=5, progress=False)
    with pytest.raises(TypeError, match="sampled="):
        evaluate(lambda batch: DotScores(Ut[batch], Vt), test, METRICS, sampled=5, progress=False)
    with pytest.raises(ValueError, match="num_items=60 differs from the 50 rows of item_vectors"):
        evaluate(DotScores(Ut, Vt), test, METRICS, num_items=60, progress=False)
    with pytest.raises(ValueError, match="past the 40 rows of item_vectors"):
        evaluate(DotScores(Ut, Vt[:40]), test, METRICS, progress=False)
    with pytest.raises(ValueError, match="user_vectors has 5 rows"):
        evaluate(DotScores(Ut[:5], Vt), test, METRICS, progress=False)
    with pytest.raises(ValueError, match="DotScores of 10 user and 49 item vectors"):
        evaluate(lambda batch: DotScores(Ut[batch], Vt[:49]), test, METRICS, progress=False)
    named = Interactions(np.array(["a", "b"], dtype=object), np.array(["x", "y"], dtype=object))
    with pytest.raises(ValueError, match="item_vectors has 50 rows but the test table's item map holds 2"):
        evaluate(DotScores(Ut[:2], Vt), named, METRICS, progress=False)
    # one shard of a split item table: evaluate() splits users, a split table needs the same users everywhere
    with pytest.raises(ValueError, match="whole item table"):
        evaluate(DotScores(Ut, Vt[:25], item_offset=0, num_items=50), test, METRICS, progress=False)
    with pytest.raises(ValueError, match="whole item table"):
        shard = Vt[25:]
        evaluate(lambda batch: DotScores(Ut[batch], shard, item_offset=25, num_items=50), test, METRICS, progress=False)


# ---- the command line


def _cli(*arguments):
    from ignite_recsys.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(argument) for argument in arguments])
    return code, out.getvalue(), err.getvalue()


def _write_qrels(path, sets, user_names, item_names):
    with open(path, "w") as file:
        for user, items in sets.items() if isinstance(sets, dict) else enumerate(sets):
            for item in sorted(items):
                file.write(f"{user_names[user]} 0 {item_names[item]} 1\n")


@pytest.mark.parametrize("named", [False, True])
def test_cli_vectors_equal_the_formula(tmp_path, named):
    """Row order by default (row i is id i); with --user-ids/--item-ids, rows in any order."""
    U, V, b, relevant, excluded = _data(seed=3, users=30, items=150)
    users, items = [str(n) for n in range(len(U))], [str(n) for n in range(len(V))]
    options = []
    if named:
        g = np.random.default_rng(9)
        users = [f"user{n}" for n in g.permutation(len(U))]
        items = [f"doc{n}" for n in g.permutation(len(V))]
        np.save(tmp_path / "uid.npy", np.array(users))
        np.save(tmp_path / "iid.npy", np.array(items))
        options = ["--user-ids", tmp_path / "uid.npy", "--item-ids", tmp_path / "iid.npy"]
    for name, array in (("U", U), ("V", V), ("b", b)):
        np.save(tmp_path / f"{name}.npy", array)
    _write_qrels(tmp_path / "test.qrels", relevant, users, items)
    _write_qrels(tmp_path / "train.qrels", excluded, users, items)
    code, out, err = _cli(
        "evaluate", "--user-vectors", tmp_path / "U.npy", "--item-vectors", tmp_path / "V.npy",
        "--item-bias", tmp_path / "b.npy", "--qrels", tmp_path / "test.qrels", "--exclude", tmp_path / "train.qrels",
        "--metrics", "ndcg@10,recall@20", "--format", "json", "--per-user", "--no-progress", *options,
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    ndcg, recall = _reference(U @ V.T + b, relevant, excluded)
    assert abs(result["means"]["ndcg@10"] - ndcg.mean()) < 1e-12
    assert abs(result["means"]["recall@20"] - recall.mean()) < 1e-12
    row_of = {name: row for row, name in enumerate(users)}
    for entry in result["per_user"]:
        assert abs(entry["ndcg@10"] - ndcg[row_of[entry["user"]]]) < 1e-12


def test_cli_float32_vectors_equal_pytrec_eval(tmp_path):
    U, V, b, relevant, excluded = _data(seed=4, users=20, items=100, integer=False)
    U, V, b = (array.astype(np.float32) for array in (U, V, b))
    for name, array in (("U", U), ("V", V), ("b", b)):
        np.save(tmp_path / f"{name}.npy", array)
    names = [str(n) for n in range(max(len(U), len(V)))]
    _write_qrels(tmp_path / "test.qrels", relevant, names, names)
    code, out, err = _cli(
        "evaluate", "--user-vectors", tmp_path / "U.npy", "--item-vectors", tmp_path / "V.npy",
        "--item-bias", tmp_path / "b.npy", "--qrels", tmp_path / "test.qrels", "--metrics", "ndcg@10,recall@20",
        "--format", "json", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    expected = _trec_eval(U.astype(np.float64), V.astype(np.float64), b.astype(np.float64), relevant, {})
    for key in METRICS:
        assert abs(json.loads(out)["means"][key] - expected[key]) < 1e-12


@pytest.mark.parametrize(
    "change, message",
    [
        ({"--item-vectors": "V4"}, "--item-vectors has width d = 4 but --user-vectors has d = 3"),
        ({"--item-bias": "b7"}, "--item-bias holds 7 values, but --item-vectors has 8 rows"),
        ({"--item-bias": "U"}, "--item-bias"),
        ({"--user-vectors": "ids"}, "--user-vectors"),
        ({"--user-ids": "ids"}, "--user-ids holds 3 ids, but --user-vectors has 5 rows"),
        ({"--qrels": "unknown_user"}, "user '9' of --qrels has no row in --user-vectors"),
        ({"--qrels": "unknown_item"}, "item '8' of --qrels or --exclude has no row in --item-vectors"),
        ({"--exclude": "unknown_item"}, "has no row in --item-vectors"),
        ({"--run": "test"}, "give either --run or the vectors"),
        ({"--item-vectors": None}, "evaluate needs --run, or --user-vectors and --item-vectors"),
        ({"--num-items": 9}, "--num-items=9 differs from the 8 rows"),
        ({"--sampled": 3}, "sampled"),
        ({"--item-vectors": "qrels"}, "give a .npy file"),
    ],
)
def test_cli_refusals_exit_2_with_one_line(tmp_path, change, message):
    g = np.random.default_rng(0)
    arrays = {"U": (5, 3), "V": (8, 3), "V4": (8, 4), "b7": (7,), "b": (8,)}
    for name, shape in arrays.items():
        np.save(tmp_path / f"{name}.npy", g.standard_normal(shape))
    np.save(tmp_path / "ids.npy", np.arange(3))
    (tmp_path / "test.qrels").write_text("0 0 1 1\n2 0 7 1\n")
    (tmp_path / "unknown_user.qrels").write_text("0 0 1 1\n9 0 3 1\n")
    (tmp_path / "unknown_item.qrels").write_text("0 0 1 1\n1 0 8 1\n")
    files = {"--user-vectors": "U", "--item-vectors": "V", "--qrels": "test"}
    files.update(change)
    arguments = ["evaluate", "--metrics", "ndcg@3", "--no-progress"]
    for option, value in files.items():
        if value is None:
            continue
        if option in ("--num-items", "--sampled"):
            arguments += [option, value]
        else:
            suffix = ".qrels" if option in ("--qrels", "--exclude", "--run") or value == "qrels" else ".npy"
            arguments += [option, tmp_path / f"{'test' if value == 'qrels' else value}{suffix}"]
    code, out, err = _cli(*arguments)
    assert code == 2, (out, err)
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert out == ""


def test_cli_excluded_users_without_a_row_are_read_not_evaluated(tmp_path):
    """An --exclude user without a row in --user-vectors is never evaluated: the result equals
    the one without that user's rows (numpy reference on the kept rows)."""
    U, V, b, relevant, excluded = _data(seed=6, users=12, items=60)
    np.save(tmp_path / "U.npy", U)
    np.save(tmp_path / "V.npy", V)
    names = [str(n) for n in range(100)]
    _write_qrels(tmp_path / "test.qrels", relevant, names, names)
    _write_qrels(tmp_path / "train.qrels", {**excluded, 99: {0, 1}}, names, names)
    code, out, err = _cli(
        "evaluate", "--user-vectors", tmp_path / "U.npy", "--item-vectors", tmp_path / "V.npy",
        "--qrels", tmp_path / "test.qrels", "--exclude", tmp_path / "train.qrels", "--metrics", "ndcg@10",
        "--format", "json", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    ndcg, _ = _reference(U @ V.T, relevant, excluded)
    assert abs(json.loads(out)["means"]["ndcg@10"] - ndcg.mean()) < 1e-12


def _vector_results():
    U, V, b, relevant, excluded = _data(seed=7, users=23, items=90)
    test, train = _tables(relevant, excluded, len(V))
    dots = DotScores(*map(torch.from_numpy, (U, V, b)))
    result = evaluate(dots, test, METRICS, exclude=train, batch_size=4, per_user=True, progress=False)
    return {
        "means": result.means,
        "users": result.user_ids.tolist(),
        "per_user": {key: value.tolist() for key, value in result.per_user().items()},
    }


def _vector_worker(local_rank, folder):
    import ignite.distributed as idist

    with open(f"{folder}/rank{idist.get_rank()}.json", "w") as handle:
        json.dump(_vector_results(), handle)


@pytest.mark.slow  # two gloo processes
def test_vectors_in_two_gloo_processes_equal_the_formula():
    """Each process evaluates every second test user; the sums are reduced and the per-user
    values gathered in user order, equal to the numpy reference on every rank."""
    from gloo import run_in_processes

    U, V, b, relevant, excluded = _data(seed=7, users=23, items=90)
    ndcg, recall = _reference(U @ V.T + b, relevant, excluded)
    for got in run_in_processes(_vector_worker):
        assert got["users"] == list(range(len(U)))
        np.testing.assert_allclose(got["per_user"]["ndcg@10"], ndcg, rtol=0, atol=1e-12)
        np.testing.assert_allclose(got["per_user"]["recall@20"], recall, rtol=0, atol=1e-12)
        assert abs(got["means"]["ndcg@10"] - ndcg.mean()) < 1e-12


def test_cli_parquet_vectors_with_id_columns(tmp_path):
    """Parquet vectors: the first column the row's id, then one list column (users, rows
    reversed) or one float column per entry (items, rows shuffled); equal to the formula."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    U, V, b, relevant, excluded = _data(seed=8, users=15, items=70)
    order_u, order_i = np.arange(len(U))[::-1], np.random.default_rng(1).permutation(len(V))
    pq.write_table(
        pa.table({"user": [f"u{n}" for n in order_u], "vector": [row.tolist() for row in U[order_u]]}),
        tmp_path / "U.parquet",
    )
    item_columns = {f"d{j}": V[order_i, j] for j in range(V.shape[1])}
    pq.write_table(pa.table({"item": [f"i{n}" for n in order_i], **item_columns}), tmp_path / "V.parquet")
    _write_qrels(tmp_path / "test.qrels", relevant, [f"u{n}" for n in range(len(U))], [f"i{n}" for n in range(len(V))])
    _write_qrels(tmp_path / "train.qrels", excluded, [f"u{n}" for n in range(len(U))], [f"i{n}" for n in range(len(V))])
    code, out, err = _cli(
        "evaluate", "--user-vectors", tmp_path / "U.parquet", "--item-vectors", tmp_path / "V.parquet",
        "--qrels", tmp_path / "test.qrels", "--exclude", tmp_path / "train.qrels", "--metrics", "ndcg@10,recall@20",
        "--format", "json", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    # equal scores: the earlier row of the item table first (the rows are the dense item ids)
    position = np.argsort(order_i)
    moved = [{int(position[item]) for item in items} for items in relevant]
    moved_out = {user: {int(position[item]) for item in items} for user, items in excluded.items()}
    ndcg, recall = _reference(U @ V[order_i].T, moved, moved_out)
    assert abs(json.loads(out)["means"]["ndcg@10"] - ndcg.mean()) < 1e-12
    assert abs(json.loads(out)["means"]["recall@20"] - recall.mean()) < 1e-12
    pq.write_table(pa.table({"item": [0, 1], "rank": [1, 2]}), tmp_path / "bad.parquet")
    pq.write_table(pa.table({"user": ["u0", "u0"], "v": [[1.0] * 6, [2.0] * 6]}), tmp_path / "twice.parquet")
    half = pa.table({"item": [0, 1], "a": pa.array([1.0, 2.0], pa.float16()), "b": pa.array([0.5, 1.0], pa.float16())})
    pq.write_table(half, tmp_path / "half.parquet")  # 10-bit mantissas tie scores: refused as in a .npy file
    for arguments, message in [
        (["--item-vectors", tmp_path / "bad.parquet"], "must hold an id column, then float columns"),
        (["--item-vectors", tmp_path / "half.parquet"], "must hold float32 or float64 columns, got float16"),
        (["--user-vectors", tmp_path / "twice.parquet"], "the id column of --user-vectors holds an id twice ('u0')"),
        (["--item-ids", tmp_path / "U.parquet"], "--item-ids"),
    ]:
        given = {"--user-vectors": tmp_path / "U.parquet", "--item-vectors": tmp_path / "V.parquet"}
        given.update(dict(zip(arguments[::2], arguments[1::2])))
        flat = [part for pair in given.items() for part in pair]
        code, out, err = _cli("evaluate", *flat, "--qrels", tmp_path / "test.qrels", "--metrics", "ndcg@3")
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
