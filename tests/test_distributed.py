"""Every metric under 2 and 3 gloo processes equals the single-process value on the union of data."""

import json
import os
import tempfile

import numpy as np
import pytest
import torch
import ignite.distributed as idist

from conftest import random_batch, run_metric
from test_reliability import FACTORIES


def _shares(world_size):
    """Uneven shares of users per rank: rank 0 only users without a relevant item, rank 1 a batch
    of a single user, the others the rest."""
    rng = np.random.default_rng(7)
    data = [random_batch(rng, 9, 25, graded=True, ties=True) for _ in range(3)]
    zero_users = (torch.rand(4, 25), torch.zeros(4, 25))
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
