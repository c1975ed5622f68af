"""evaluate() under 2 gloo processes on CPU equals one process: each process reads its share of
the users (of a run file, of a model's scores), the sums are reduced, per-user values gathered."""

from __future__ import annotations

import json
import os
import tempfile

import ignite.distributed as idist
import numpy as np
import pytest
import torch

import ignite_recsys as R
from gloo import run_in_processes

pytestmark = pytest.mark.slow  # multi-process (gloo) runs: .ci/run runs them

pytest.importorskip("pyarrow")
METRICS = ["ndcg@10", "recall@5", "map@20", "r_precision"]


def _write_files(folder):
    rng = np.random.default_rng(4)
    qrels, run = [], []
    for user in rng.choice(300, 50, replace=False):
        for item in rng.choice(40, rng.integers(1, 6), replace=False):
            qrels.append(f"u{user} 0 i{item} {rng.integers(0, 3)}\n")
        if rng.random() < 0.8:
            for rank, item in enumerate(rng.choice(60, 25, replace=False), 1):
                run.append(f"u{user} Q0 i{item} {rank} {rng.integers(0, 6) / 5} t\n")
    with open(os.path.join(folder, "test.qrels"), "w") as handle:
        handle.writelines(qrels)
    with open(os.path.join(folder, "run.trec"), "w") as handle:
        handle.writelines(run)


def _evaluate_all(folder):
    # the model indexes the original user ids (rows 0..18 of the scores): ids kept as they are
    test = R.Interactions.from_frame(
        {"user": np.arange(30) % 7 * 3, "item": np.arange(30) % 11}, duplicates="max", map_ids=False
    )
    scores = torch.from_numpy(np.random.default_rng(0).random((19, 11)))
    options = dict(progress=False, per_user=True, gain_function="linear_rank", batch_size=4)
    results = {
        "run": R.evaluate(os.path.join(folder, "run.trec"), os.path.join(folder, "test.qrels"), METRICS, **options),
        "model": R.evaluate(lambda users: scores[users], test, METRICS, **options),
    }
    return {
        name: {
            "means": result.means,
            "intervals": result.intervals,
            "info": result.info,
            "users": [str(user) for user in result.user_ids.tolist()],
            "per_user": {key: value.tolist() for key, value in result.per_user().items()},
        }
        for name, result in results.items()
    }


def _worker(local_rank, folder, data_folder):
    with open(os.path.join(folder, f"rank{idist.get_rank()}.json"), "w") as handle:
        json.dump(_evaluate_all(data_folder), handle)


def test_two_processes_equal_one():
    with tempfile.TemporaryDirectory() as data_folder:
        _write_files(data_folder)
        expected = _evaluate_all(data_folder)
        for rank, got in enumerate(run_in_processes(_worker, data_folder)):
            for name, value in expected.items():
                assert got[name]["users"] == value["users"], (name, rank)
                assert got[name]["info"] == value["info"]
                for key in METRICS:
                    np.testing.assert_allclose(got[name]["means"][key], value["means"][key], atol=1e-12)
                    np.testing.assert_allclose(got[name]["intervals"][key], value["intervals"][key], atol=1e-9)
                    np.testing.assert_allclose(got[name]["per_user"][key], value["per_user"][key], atol=1e-12)


def _one_user_results():
    """One test user (item 2 relevant, ranked second by the model): rank 1 holds no user."""
    test = R.Interactions(torch.tensor([0]), torch.tensor([2]), num_items=4)
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.2]])
    ranked = (torch.tensor([0]), torch.tensor([[1, 2, 3]]))
    sampled = {"num_negatives": 3, "estimators": ["naive"]}  # every other item: rank 2 whatever the draw
    return {
        "model": R.evaluate(lambda users: scores[users], test, ["ndcg@3"], progress=False).means,
        "ranked": R.evaluate(ranked, test, ["ndcg@3"], progress=False).means,
        "sampled": R.evaluate(lambda users: scores[users], test, ["ndcg@3"], sampled=sampled, progress=False).means,
    }


def _one_user_worker(local_rank, folder):
    with open(os.path.join(folder, f"rank{idist.get_rank()}.json"), "w") as handle:
        json.dump(_one_user_results(), handle)


def test_a_process_without_a_test_user_takes_part_without_a_batch():
    """split() of no users gave rank 1 one empty batch, which the metrics refuse ("at least one
    user"): rank 1 raised and rank 0 lost its peer. Now both give NDCG@3 of rank 2 (1 / log2 3)."""
    expected = 1 / np.log2(3)
    single = _one_user_results()
    assert single == {
        "model": {"ndcg@3": expected},
        "ranked": {"ndcg@3": expected},
        "sampled": {"ndcg@3/naive": expected},
    }
    for got in run_in_processes(_one_user_worker):
        assert got == single


def _sampled_per_item_results():
    """Nine users of two test items each; a test item scores 1 (above every other item: rank 1,
    NDCG@3 = 1) or 0 (below the 3 negatives, all other items scoring 0.5: rank 4, NDCG@3 = 0)
    whatever the draw."""
    users = torch.arange(9).repeat_interleave(2)
    items = torch.stack([torch.arange(9) % 10, (torch.arange(9) + 3) % 10], 1).reshape(-1)
    test = R.Interactions(users, items, num_items=10)
    scores = torch.full((9, 10), 0.5, dtype=torch.float64)
    scores[users, items] = ((users + items) % 2 == 0).double()
    sampled = {"num_negatives": 3, "estimators": ["naive"]}
    result = R.evaluate(lambda u: scores[u], test, ["ndcg@3"], sampled=sampled, per_user=True, progress=False)
    return {"users": result.user_ids.tolist(), "values": result.per_user()["ndcg@3/naive"].tolist()}


def _sampled_per_item_worker(local_rank, folder):
    with open(os.path.join(folder, f"rank{idist.get_rank()}.json"), "w") as handle:
        json.dump(_sampled_per_item_results(), handle)


def test_sampled_per_item_values_are_gathered_in_user_order():
    """evaluate(sampled=..., per_user=True) under 2 processes (users 0, 2, ... on rank 0; 1, 3,
    ... on rank 1) gives every test item's value with its user, in the order of one process."""
    expected_users = [user for user in range(9) for _ in range(2)]
    expected_values = [
        float((user + item) % 2 == 0) for user in range(9) for item in sorted((user % 10, (user + 3) % 10))
    ]
    single = _sampled_per_item_results()
    assert single == {"users": expected_users, "values": expected_values}
    for got in run_in_processes(_sampled_per_item_worker):
        assert got == single
