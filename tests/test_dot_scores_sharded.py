"""DotScores with the item table split across processes (``item_offset``, ``num_items``).

Each gloo process holds a shard of the item vectors and bias (the shards in another order than
the ranks), every process gives the same users, targets and exclusion. The metrics must equal
one process fed the dense matrix ``u @ v.T + b`` of the whole table, to 1e-12 per user, with
integer vectors so that scores tie exactly, also across shard boundaries. The merge function is
checked on its own against a numpy reference; the bytes handed to the collectives per update are
bounded by users x k x world x (id + score) plus a flag per process; bad shards are refused.
"""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.distributed as dist
import ignite.distributed as idist

import ignite_recsys as R
from ignite_recsys._core.vectors import check_shards, merge_candidates
from gloo import run_in_processes

NUM_USERS, NUM_ITEMS, WIDTH = 9, 23, 3
TOLERANCE = 1e-12
# (item_offset, rows) per rank: uneven, and not in rank order
SHARDS = {2: [(11, 12), (0, 11)], 4: [(20, 3), (5, 9), (0, 5), (14, 6)]}


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    u = rng.integers(-2, 3, size=(NUM_USERS, WIDTH)).astype(np.float64)
    v = rng.integers(-2, 3, size=(NUM_ITEMS, WIDTH)).astype(np.float64)
    bias = rng.integers(-1, 2, size=NUM_ITEMS).astype(np.float64)
    test = np.stack([rng.permutation(NUM_ITEMS)[:4] for _ in range(NUM_USERS)])
    grades = rng.integers(0, 4, size=test.shape).astype(
        np.float64
    )  # |R| from 0 to 4: R-Precision ranks deeper on some processes
    history = np.stack([rng.permutation(NUM_ITEMS)[:5] for _ in range(NUM_USERS)])
    history[:, 3:] = -1  # padding
    user_ids = rng.permutation(100)[:NUM_USERS]
    return u, v, bias, test, grades, history, user_ids


def _metrics():
    return {
        "ranking": R.RankingMetrics([1, 3, 5, 10], metrics=["ndcg", "recall", "mrr", "precision", "map"]),
        "ndcg": R.NDCG(5, per_user=True),
        "coverage": R.ItemCoverage([3, 5]),
        "r_precision": R.RPrecision(),
    }


def _outputs(prediction, data):
    """Three batches: ItemIds targets and exclusion with UserIds, dense, and sparse CSR."""
    u, v, bias, test, grades, history, user_ids = data
    ids = [R.UserIds(torch.from_numpy(user_ids) + 100 * batch) for batch in range(3)]  # distinct in each batch
    test_ids = R.ItemIds(torch.from_numpy(test), torch.from_numpy(grades))
    dense = torch.zeros(NUM_USERS, NUM_ITEMS, dtype=torch.float64)
    dense.scatter_(1, torch.from_numpy(test), torch.from_numpy(grades))
    excluded = torch.zeros(NUM_USERS, NUM_ITEMS + 1, dtype=torch.bool)
    excluded.scatter_(1, torch.from_numpy(np.where(history >= 0, history, NUM_ITEMS)), True)
    excluded = excluded[:, :NUM_ITEMS]
    return [
        (prediction, test_ids, R.ItemIds(torch.from_numpy(history)), ids[0]),
        (prediction, dense, excluded, ids[1]),
        (prediction, dense.to_sparse_csr(), excluded.to_sparse_csr(), ids[2]),
    ]


def _floats(value) -> list:
    return np.asarray(value, dtype=np.float64).ravel().tolist()


def _results(metrics) -> dict:
    ranking = metrics["ranking"].compute()
    return {
        "ranking": {name: float(value) for name, value in ranking.items()},
        "ndcg": _floats(metrics["ndcg"].compute()),
        "per_user": metrics["ndcg"].per_user().tolist(),
        "user_ids": metrics["ndcg"].per_user_ids().tolist(),
        "coverage": _floats(metrics["coverage"].compute()),
        "r_precision": _floats(metrics["r_precision"].compute()),
    }


def _run(prediction, data, with_bias_seed: int) -> dict:
    metrics = _metrics()
    for output in _outputs(prediction, data):
        for metric in metrics.values():
            metric.update(output if metric is metrics["ndcg"] else output[:3])
    return _results(metrics)


def _single(seed: int) -> dict:
    data = _data(seed)
    u, v, bias = data[:3]
    return _run(torch.from_numpy(u @ v.T + bias), data, seed)


def _equal_worker(local_rank, folder, world, seed):
    rank = idist.get_rank()
    data = _data(seed)
    u, v, bias = (torch.from_numpy(x) for x in data[:3])
    offset, rows = SHARDS[world][rank]
    shard = R.DotScores(
        u, v[offset : offset + rows], bias[offset : offset + rows], 64, item_offset=offset, num_items=NUM_ITEMS
    )
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as handle:
        json.dump(_run(shard, data, seed), handle)


def _assert_close(got: dict, expected: dict) -> None:
    assert got["ranking"].keys() == expected["ranking"].keys()
    np.testing.assert_allclose(list(got["ranking"].values()), list(expected["ranking"].values()), atol=TOLERANCE)
    np.testing.assert_allclose(got["ndcg"], expected["ndcg"], atol=TOLERANCE)
    assert got["user_ids"] == expected["user_ids"]  # every user once, in user-id order
    np.testing.assert_allclose(got["per_user"], expected["per_user"], atol=TOLERANCE)
    np.testing.assert_allclose(got["coverage"], expected["coverage"], atol=TOLERANCE)
    np.testing.assert_allclose(got["r_precision"], expected["r_precision"], atol=TOLERANCE)


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_sharded_equals_one_process_on_the_whole_table(world):
    seed = 3
    expected = _single(seed)
    assert len(expected["per_user"]) == 3 * NUM_USERS  # three batches, every user counted once each
    for got in run_in_processes(_equal_worker, world, seed, processes=world):
        _assert_close(got, expected)


def _reference_merge(ids: np.ndarray, values: np.ndarray, k: int) -> tuple:
    """Per row: the listed candidates sorted by score descending, then id ascending; -1 after."""
    out_ids, out_values = [], []
    for row_ids, row_values in zip(ids, values):
        pairs = sorted((-value, item) for item, value in zip(row_ids, row_values) if item >= 0)[:k]
        out_ids.append([item for _, item in pairs] + [-1] * (k - len(pairs)))
        out_values.append([-value for value, _ in pairs])
    return out_ids, out_values


def test_merge_candidates_equals_numpy_reference():
    rng = np.random.default_rng(5)
    for _ in range(50):
        users, shards, k = rng.integers(1, 5), rng.integers(1, 5), int(rng.integers(1, 6))
        catalog = rng.permutation(40)[: shards * k]
        ids = catalog.reshape(1, -1).repeat(users, 0)
        ids = np.stack([rng.permutation(row) for row in ids])
        ids[rng.random(ids.shape) < 0.2] = -1  # fewer candidates than k in some shards
        values = rng.integers(-2, 3, size=ids.shape).astype(np.float64)  # many exact ties
        got_ids, got_values = merge_candidates(torch.from_numpy(ids), torch.from_numpy(values), k)
        want_ids, want_values = _reference_merge(ids, values, k)
        assert got_ids.tolist() == want_ids
        for row, want in zip(got_values.tolist(), want_values):
            assert row[: len(want)] == want


# --- the bytes handed to the collectives, and the refusals -------------------------------------


def _bytes_worker(local_rank, folder, world):
    rank = idist.get_rank()
    data = _data(1)
    u, v, bias = (torch.from_numpy(x).float() for x in data[:3])
    offset, rows = SHARDS[world][rank]
    shard = R.DotScores(u, v[offset : offset + rows], bias[offset : offset + rows], item_offset=offset, num_items=23)
    tensor_bytes, object_bytes = [], []
    gather, gather_object = dist.all_gather, dist.all_gather_object

    def counted(outputs, tensor, *args, **kwargs):
        tensor_bytes.append(tensor.numel() * tensor.element_size())
        return gather(outputs, tensor, *args, **kwargs)

    def counted_object(outputs, value, *args, **kwargs):
        object_bytes.append(len(pickle.dumps(value)))
        return gather_object(outputs, value, *args, **kwargs)

    dist.all_gather, dist.all_gather_object = counted, counted_object
    try:
        metric = R.NDCG(10)
        metric.update((shard, R.ItemIds(torch.from_numpy(data[3])), R.ItemIds(torch.from_numpy(data[5]))))
    finally:
        dist.all_gather, dist.all_gather_object = gather, gather_object
    refusals = _refusals(rank, world, u, v, bias, data)
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as handle:
        json.dump({"tensor": tensor_bytes, "object": object_bytes, "refusals": refusals}, handle)


def _refusals(rank, world, u, v, bias, data) -> dict:
    """The message of each refused update (every process must refuse), and whether the metric
    kept its state."""
    test, history = R.ItemIds(torch.from_numpy(data[3])), R.ItemIds(torch.from_numpy(data[5]))
    offset, rows = SHARDS[world][rank]

    def shard(offset=offset, rows=rows, num_items=NUM_ITEMS):
        return R.DotScores(u, v[offset : offset + rows], item_offset=offset, num_items=num_items)

    cases = {
        "overlap": lambda: shard(offset=max(0, offset - 1)),
        "gap": lambda: shard(rows=rows - 1) if offset == 0 else shard(),
        "num_items": lambda: shard(num_items=NUM_ITEMS + rank),
        # the users of a batch split across processes (as a DistributedSampler does): other users on one
        # an infinite entry in one process's item rows (+inf scores, no NaN): refused on every process
        "inf": lambda: R.DotScores(
            u,
            v[offset : offset + rows].index_fill(1, torch.tensor([0]), float("inf") if rank == 1 else 0.0),
            item_offset=offset,
            num_items=NUM_ITEMS,
        ),
        # fewer users than processes: refused on every process, none left waiting in a collective
        "one user": lambda: R.DotScores(u[:1], v[offset : offset + rows], item_offset=offset, num_items=NUM_ITEMS),
        "users": lambda: R.DotScores(
            u.roll(1, 0) if rank == 1 else u, v[offset : offset + rows], item_offset=offset, num_items=NUM_ITEMS
        ),
    }
    metric = R.NDCG(5)
    metric.update((shard(), test, history))
    before = _floats(metric.compute())
    messages = {}
    for name, make in cases.items():
        try:
            metric.update((make(), test, history))
            messages[name] = None
        except ValueError as error:
            messages[name] = str(error)
    # one process's targets of another batch size: its own parse fails, the others are told
    short = R.ItemIds(torch.from_numpy(data[3])[:-1]) if rank == 1 else test
    try:
        metric.update((shard(), short, history))
        messages["parse"] = None
    except ValueError as error:
        messages["parse"] = str(error)
    past = torch.from_numpy(data[3]).clone()
    past[0, 0] = NUM_ITEMS  # an id past the catalog
    for name, output in (
        ("target", (shard(), R.ItemIds(past), history)),
        ("exclude", (shard(), test, R.ItemIds(past))),
    ):
        try:
            metric.update(output)
            messages[name] = None
        except ValueError as error:
            messages[name] = str(error)
    try:
        R.NDCG(5, ties="average").update((shard(), test, history))
        messages["average"] = None
    except ValueError as error:
        messages["average"] = str(error)
    messages["kept"] = _floats(metric.compute()) == before
    return messages


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_collective_bytes_and_refusals(world):
    k = 10 + 1  # NDCG@10 ranks one position more (whether the cut-off splits tied scores)
    # ids int64, float32 scores; per process a NaN flag and two float64 sums of its users
    bound = NUM_USERS * k * world * (8 + 4) + 4 * 8 * world  # and a flag of non-finite item vectors
    for got in run_in_processes(_bytes_worker, world, processes=world):
        assert sum(got["tensor"]) * world <= bound  # each process hands its part; the gathered total
        assert sum(got["tensor"]) > 0
        assert max(got["object"]) < 200  # the shards' host ints: a few dozen bytes
        refusals = got["refusals"]
        assert "overlap" in refusals["overlap"] and "item_offset" in refusals["overlap"]
        assert "gap" in refusals["gap"] or "end at item" in refusals["gap"]
        assert "num_items must be the same on every process" in refusals["num_items"]
        assert "user_vectors differ between the processes" in refusals["users"]
        assert "infinite value" in refusals["inf"]
        assert refusals["one user"] is not None  # refused on every process (a process left waiting would hang)
        assert "refused" in refusals["parse"] or "y" in refusals["parse"]
        assert "y" in refusals["target"] and str(NUM_ITEMS) in refusals["target"]
        assert "exclude" in refusals["exclude"]
        assert 'ties="average"' in refusals["average"]
        assert refusals["kept"]


def test_shard_without_torch_distributed_is_refused():
    metric = R.NDCG(3)
    shard = R.DotScores(torch.ones(2, 2), torch.ones(3, 2), item_offset=2, num_items=5)
    with pytest.raises(ValueError, match="torch.distributed"):
        metric.update((shard, R.ItemIds(torch.tensor([[0], [4]]))))
    with pytest.raises(ValueError, match="item_offset \\+ item_vectors rows"):
        R.DotScores(torch.ones(2, 2), torch.ones(3, 2), item_offset=3, num_items=5)
    with pytest.raises(ValueError, match="item_offset needs num_items"):
        R.DotScores(torch.ones(2, 2), torch.ones(3, 2), item_offset=1)


@pytest.mark.slow
def test_the_torchrun_script_of_the_vectors_page(tmp_path):
    """docs/vectors.md's torchrun script runs in 2 gloo processes and checks its own values."""
    page = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "vectors.md").read_text()
    script = re.search(r"caption: evaluate_item_shards.py\n\n(.*?)^```$", page, flags=re.MULTILINE | re.DOTALL)
    assert script is not None
    (tmp_path / "evaluate_item_shards.py").write_text(script.group(1))
    environment = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    done = subprocess.run(
        command + ["evaluate_item_shards.py"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = re.findall(r"rank (\d) of 2, items \[\d+, \d+\): ndcg@10 ([0-9.]+)", done.stdout)  # lines may interleave
    assert sorted(rank for rank, _ in printed) == ["0", "1"] and len({value for _, value in printed}) == 1


@pytest.mark.parametrize(
    "shards, message",
    [
        ([(0, 5, 10, 4), (4, 6, 10, 4)], "overlap at item 4"),
        ([(0, 5, 10, 4), (6, 4, 10, 4)], "leave a gap at item 5"),
        ([(0, 5, 10, 4), (5, 4, 10, 4)], "end at item 9, not at num_items \\(10\\)"),
        ([(0, 5, 10, 4), (5, 5, 11, 4)], "num_items must be the same on every process"),
        ([(0, 5, 10, 4), (5, 5, 10, 3)], "same users on every process"),
    ],
)
def test_check_shards_refuses_bad_shards(shards, message):
    with pytest.raises(ValueError, match=message):
        check_shards(shards, 4)
    check_shards([(5, 5, 10, 4), (0, 5, 10, 4)], 4)  # in any rank order


@pytest.mark.parametrize(
    "call",
    [
        lambda d, y: R.functional.ndcg(d, y, top_k=2),
        lambda d, y: R.functional.ranking_metrics(d, y, top_k=2, metrics=["recall"]),
        lambda d, y: R.functional.novelty(d, top_k=2, item_popularity=torch.ones(10)),
    ],
)
def test_functions_refuse_one_shard_of_a_split_table(call):
    # a function returns the values of its one call: with a split table those would be this
    # process's share of the users, under the names of every user's values
    shard = R.DotScores(torch.randn(3, 4), torch.randn(5, 4), item_offset=5, num_items=10)
    test = R.ItemIds(torch.tensor([[1], [2], [7]]))
    with pytest.raises(ValueError, match="split item table"):
        call(shard, test)
