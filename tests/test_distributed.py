"""Every metric under 2 and 3 gloo processes equals the single-process value on the union of data."""

import json
import os
import tempfile

import numpy as np
import pytest
import torch
import ignite.distributed as idist

from conftest import random_batch, run_metric
import ignite_recsys as R
from test_reliability import FACTORIES

_POPULARITY = torch.arange(25) % 7
FACTORIES = dict(FACTORIES)
FACTORIES.update(
    coverage=lambda: R.ItemCoverage([1, 3, 8]),
    gini=lambda: R.GiniIndex([1, 3, 8], convention="elliot"),
    entropy=lambda: R.ShannonEntropy([1, 3, 8]),
    popularity=lambda: R.AveragePopularity([1, 3, 8], _POPULARITY),
    tail=lambda: R.TailPercentage([1, 3, 8], _POPULARITY, tail_ratio=0.3),
    novelty=lambda: R.Novelty([1, 3, 8], _POPULARITY + 1),
    gauc=lambda: R.GAUC(),
    gauc_uniform=lambda: R.GAUC(weighting="uniform"),
    auc=lambda: R.AUC(resolution_bits=12),
    auc_bound=lambda: _AUCBound(resolution_bits=12),
    mae=lambda: R.MAE(),
    rmse=lambda: R.RMSE(),
    log_loss=lambda: _BinaryLogLoss(from_logits=True),
)


class _BinaryLogLoss(R.LogLoss):
    """LogLoss of the shared batches: scores / 50 as logits, relevant items as targets 1."""

    def update(self, output):
        super().update((output[0] / 50, (output[1] > 0).float()))


class _AUCBound(R.AUC):
    """The error bound, which needs the synced lowest/highest scores per bucket."""

    def compute(self):
        return self.error_bound()


def _shares(world_size):
    """Uneven shares of users per rank: rank 0 only users without a relevant item, rank 1 a batch
    of a single user, the others the rest."""
    rng = np.random.default_rng(7)
    data = [random_batch(rng, 9, 25, graded=True, ties=True) for _ in range(3)]
    zero_users = (torch.from_numpy(rng.random((4, 25)).astype(np.float32)), torch.zeros(4, 25))
    single = (data[0][0][:1], data[0][1][:1])
    rest = [(data[0][0][1:], data[0][1][1:])] + data[1:]
    shares = {0: [zero_users], 1: [single]}
    for index, batch in enumerate(rest):
        shares.setdefault(2 + index % (world_size - 2) if world_size > 2 else 1, []).append(batch)
    return shares


def _worker(local_rank, folder, world_size):
    rank = idist.get_rank()
    batches = _shares(world_size).get(rank, [])
    results = {}
    for name, factory in FACTORIES.items():
        metric = factory()
        for batch in batches:
            metric.update(batch)
        results[name] = metric.compute()
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as handle:
        json.dump(results, handle)


def _empty_rank_worker(local_rank, folder):
    """Rank 1 sees no batch at all: the catalog size comes from rank 0."""
    rank = idist.get_rank()
    metrics = {"coverage": R.ItemCoverage([1, 3]), "gini": R.GiniIndex([1, 3]), "auc": R.AUC()}
    if rank == 0:
        for metric in metrics.values():
            metric.update(_EMPTY_RANK_BATCH)
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as handle:
        json.dump({name: metric.compute() for name, metric in metrics.items()}, handle)


_EMPTY_RANK_BATCH = random_batch(np.random.default_rng(3), 6, 11)


def test_rank_without_batches_contributes_nothing():
    expected = {
        "coverage": run_metric(R.ItemCoverage([1, 3]), [_EMPTY_RANK_BATCH]),
        "gini": run_metric(R.GiniIndex([1, 3]), [_EMPTY_RANK_BATCH]),
        "auc": run_metric(R.AUC(), [_EMPTY_RANK_BATCH]),
    }
    with tempfile.TemporaryDirectory() as folder:
        with idist.Parallel(backend="gloo", nproc_per_node=2) as parallel:
            parallel.run(_empty_rank_worker, folder)
        for rank in range(2):
            with open(os.path.join(folder, f"rank{rank}.json")) as handle:
                assert json.load(handle) == expected


@pytest.mark.parametrize("world_size", [2, 3])
def test_distributed_equals_single_process(world_size):
    union = [batch for share in _shares(world_size).values() for batch in share]
    expected = {name: run_metric(factory(), union) for name, factory in FACTORIES.items()}
    with tempfile.TemporaryDirectory() as folder:
        with idist.Parallel(backend="gloo", nproc_per_node=world_size) as parallel:
            parallel.run(_worker, folder, world_size)
        for rank in range(world_size):
            with open(os.path.join(folder, f"rank{rank}.json")) as handle:
                got = json.load(handle)
            for name, value in expected.items():
                if isinstance(value, dict):
                    assert got[name].keys() == value.keys()
                    np.testing.assert_allclose(list(got[name].values()), list(value.values()), atol=1e-9)
                else:
                    np.testing.assert_allclose(got[name], value, atol=1e-9, err_msg=f"{name} rank {rank}")
