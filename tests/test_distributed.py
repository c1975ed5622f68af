"""Every metric under 2 and 3 gloo processes equals the single-process value on the union of data."""

import json
import os

import numpy as np
import pytest
import torch
import ignite.distributed as idist

from conftest import random_batch, run_metric
import ignite_recsys as R
from test_reliability import FACTORIES
from gloo import free_port, run_in_processes  # noqa: F401  (free_port: imported from here by older tests)

pytestmark = pytest.mark.slow  # multi-process (gloo) runs: .ci/run runs them

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
    assert run_in_processes(_empty_rank_worker) == [expected, expected]


@pytest.mark.parametrize("world_size", [2, 3])
def test_distributed_equals_single_process(world_size):
    union = [batch for share in _shares(world_size).values() for batch in share]
    expected = {name: run_metric(factory(), union) for name, factory in FACTORIES.items()}
    for rank, got in enumerate(run_in_processes(_worker, world_size, processes=world_size)):
        for name, value in expected.items():
            if isinstance(value, dict):
                assert got[name].keys() == value.keys()
                np.testing.assert_allclose(list(got[name].values()), list(value.values()), atol=1e-9)
            else:
                np.testing.assert_allclose(got[name], value, atol=1e-9, err_msg=f"{name} rank {rank}")


# --- compute() leaves the local state as it was, also when it raises ---------------------------
def _rank_batches(rank):
    """Per rank: a first batch with no relevant item (so compute() raises), then two batches."""
    rng = np.random.default_rng(11 + rank)
    scores, _ = random_batch(rng, 5, 20)
    return (scores, torch.zeros(5, 20)), [random_batch(rng, 6, 20, graded=True, ties=True) for _ in range(2)]


_RAISING_FACTORIES = {
    "auc": lambda: R.AUC(resolution_bits=12),
    "auc_bound": lambda: _AUCBound(resolution_bits=12),
    "ndcg": lambda: R.NDCG([1, 5]),
    "gauc": lambda: R.GAUC(),
}


def _raising_compute_worker(local_rank, folder):
    from ignite.exceptions import NotComputableError

    rank = idist.get_rank()
    empty, batches = _rank_batches(rank)
    results = {}
    for name, factory in _RAISING_FACTORIES.items():
        metric = factory()
        metric.update(empty)
        try:
            metric.compute()
            results[name + "_first"] = "returned"
        except NotComputableError:
            results[name + "_first"] = "NotComputableError"
        for batch in batches:
            metric.update(batch)
        results[name] = metric.compute()
    # A batch with invalid values, as the deferred (CUDA) check sees it: it adds nothing and each
    # compute() reports it once, however often compute() is called.
    import ignite_recsys.metrics._state as state

    state.values_checked_on_host = lambda device: False
    metric = R.NDCG([1, 5])
    metric.update(batches[0])
    if rank == 0:
        scores, relevance = batches[1]
        metric.update((torch.where(relevance > 0, float("nan"), scores), relevance))
    messages = []
    for _ in range(2):
        try:
            metric.compute()
        except ValueError as error:
            messages.append(str(error))
    results["invalid_messages"] = messages
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as handle:
        json.dump(results, handle)


def test_compute_that_raises_leaves_the_local_state_unchanged():
    union = [batch for rank in range(2) for batch in [_rank_batches(rank)[0]] + _rank_batches(rank)[1]]
    for rank, got in enumerate(run_in_processes(_raising_compute_worker)):
        for name, factory in _RAISING_FACTORIES.items():
            assert got[name + "_first"] == "NotComputableError", name
            np.testing.assert_allclose(got[name], run_metric(factory(), union), rtol=0, atol=1e-9, err_msg=name)
        assert len(got["invalid_messages"]) == 2
        assert all("NDCG: 1 update(s)" in message for message in got["invalid_messages"])
        # each process names the checks that failed on it (rank 0 fed the NaN scores)
        if rank == 0:
            assert all(
                message.endswith(
                    "The checks that failed on this process:\n- y_pred contains NaN scores "
                    "(+inf and -inf are allowed): 1 update"
                )
                for message in got["invalid_messages"]
            ), got["invalid_messages"]
        else:
            assert all(
                message.endswith("Their checks failed on another process or before a state was loaded.")
                for message in got["invalid_messages"]
            ), got["invalid_messages"]


# --- catalog sizes that differ across processes -------------------------------------------------
def _catalog_size_worker(local_rank, folder):
    rank = idist.get_rank()
    batch = random_batch(np.random.default_rng(rank), 4, 10 + 2 * rank)
    messages = {}
    metrics = {"coverage": R.ItemCoverage([1, 3]), "gini": R.GiniIndex(2), "entropy": R.ShannonEntropy(3)}
    for name, metric in metrics.items():
        metric.update(batch)
        try:
            metric.compute()
            messages[name] = "returned"
        except ValueError as error:
            messages[name] = str(error)
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as handle:
        json.dump(messages, handle)


def test_different_catalog_sizes_raise_the_same_error_on_every_rank():
    got = run_in_processes(_catalog_size_worker)
    assert got[0] == got[1]
    for name, message in got[0].items():
        assert "different catalog sizes (from 10 to 12 items); pass num_items" in message, name


# --- Input forms under gloo ------------------------------------------------------------------
def _form_batches(rank, world_size):
    """Each rank's batches in the sparse, id-list and ranked-id forms, with exclusions."""
    rng = np.random.default_rng(17)
    out = []
    for index in range(4):
        scores, labels = random_batch(rng, 6, 30, graded=True, ties=True, zero_users=1)
        excluded = torch.from_numpy(rng.random((6, 30)) < 0.2)
        ids = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :8]
        ids[0, 5:] = -1
        forms = {
            "sparse": (scores, labels.to_sparse_csr(), excluded.to_sparse()),
            "ranked": (R.RankedItems(ids), labels.to_sparse(), excluded),
        }
        if index % world_size == rank:
            out.append(forms)
    return out


FORM_FACTORIES = {
    "ranking": lambda: R.RankingMetrics([1, 3, 8], metrics=["ndcg", "recall", "map", "r_precision"]),
    "ndcg_average": lambda: R.NDCG([2, 5], ties="average"),
    "coverage": lambda: R.ItemCoverage([1, 3, 8], num_items=30),
    "popularity": lambda: R.AveragePopularity([1, 3, 8], torch.arange(30) % 7),
}


def _form_worker(local_rank, folder, world_size):
    rank = idist.get_rank()
    results = {}
    for form in ("sparse", "ranked"):
        for name, factory in FORM_FACTORIES.items():
            if form == "ranked" and name == "ndcg_average":
                continue
            metric = factory()
            for batch in _form_batches(rank, world_size):
                metric.update(batch[form])
            results[f"{form}/{name}"] = metric.compute()
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as handle:
        json.dump(results, handle)


def test_input_forms_distributed_equal_single_process():
    expected = {}
    for form in ("sparse", "ranked"):
        for name, factory in FORM_FACTORIES.items():
            if form == "ranked" and name == "ndcg_average":
                continue
            union = [batch[form] for batch in _form_batches(0, 1)]
            expected[f"{form}/{name}"] = run_metric(factory(), union)
    for got in run_in_processes(_form_worker, 2):
        for key, value in expected.items():
            if isinstance(value, dict):
                assert got[key].keys() == value.keys()
                np.testing.assert_allclose(list(got[key].values()), list(value.values()), atol=1e-9, err_msg=key)
            else:
                np.testing.assert_allclose(got[key], value, atol=1e-9, err_msg=key)


# --- Confidence intervals and per-user values across processes ---------------------------------
_STAT_FACTORIES = {
    "ndcg": lambda: R.NDCG([1, 3, 8], per_user=True),
    "r_precision": lambda: R.RPrecision(per_user=True),
    "ranking_metrics": lambda: R.RankingMetrics([1, 3], ["ndcg", "mrr", "r_precision"], per_user=True),
    "novelty": lambda: R.Novelty([1, 3, 8], _POPULARITY + 1, per_user=True),
}


def _as_lists(value):
    if isinstance(value, dict):
        return {key: _as_lists(item) for key, item in value.items()}
    if isinstance(value, torch.Tensor):
        return value.tolist()
    return value


def _statistics_worker(local_rank, folder):
    rank = idist.get_rank()
    batches = _shares(2).get(rank, [])
    results = {}
    for name, factory in _STAT_FACTORIES.items():
        metric = factory()
        for batch in batches:
            metric.update(batch)
        results[name] = {"interval": metric.confidence_interval(0.9), "rows": _as_lists(metric.per_user())}
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as handle:
        json.dump(results, handle)


def test_confidence_interval_and_per_user_distributed_equal_single_process():
    """Rank 0 holds users without a relevant item (NaN rows), rank 1 the rest: the interval equals
    the single-process one on all users, and per_user() lists rank 0's users, then rank 1's."""
    shares = _shares(2)
    union = shares[0] + shares[1]
    expected = {}
    for name, factory in _STAT_FACTORIES.items():
        metric = factory()
        for batch in union:
            metric.update(batch)
        expected[name] = {"interval": metric.confidence_interval(0.9), "rows": _as_lists(metric.per_user())}
    for rank, got in enumerate(run_in_processes(_statistics_worker)):
        for name, value in expected.items():
            interval, rows = value["interval"], value["rows"]
            if isinstance(interval, dict):
                assert list(got[name]["interval"]) == list(interval)
                interval, got_interval = list(interval.values()), list(got[name]["interval"].values())
                rows, got_rows = list(rows.values()), list(got[name]["rows"].values())
            else:
                got_interval, got_rows = got[name]["interval"], got[name]["rows"]
            np.testing.assert_allclose(got_interval, interval, rtol=0, atol=1e-9, err_msg=f"{name} rank {rank}")
            np.testing.assert_allclose(got_rows, rows, rtol=0, atol=1e-12, err_msg=f"{name} rank {rank}")


# --- SampledMetrics' per-item values under gloo ------------------------------------------------
_SAMPLED_HITS = [True, False, True, False, False, True, True, True, False, True]  # row i's test item
_SAMPLED_SHARES = {0: [0, 1, 2], 1: [3, 4, 5, 6, 7, 8, 9]}  # uneven: 3 items on rank 0, 7 on rank 1


def _sampled_worker(local_rank, folder):
    """Each rank's test items: scored +inf where a hit (rank 1 among any negatives), -inf elsewhere
    (last of 21), so the per-item hits are known whatever the negatives drawn."""
    rank = idist.get_rank()
    rows = _SAMPLED_SHARES[rank]
    scores = torch.rand(len(rows), 30, dtype=torch.float64, generator=torch.Generator().manual_seed(rank))
    positives = torch.arange(len(rows))
    hits = torch.tensor([_SAMPLED_HITS[row] for row in rows])
    scores[positives, positives] = torch.where(hits, torch.inf, -torch.inf).double()
    metric = R.SampledMetrics(top_k=[10], metrics=["hit_rate"], num_negatives=20, estimators=["naive"], per_user=True)
    metric.update((scores, positives))
    result = {
        "per_user": metric.per_user()["hit_rate@10/naive"].tolist(),
        "ranks": metric.sampled_ranks().tolist(),
        "mean": metric.compute()["hit_rate@10/naive"],
    }
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as handle:
        json.dump(result, handle)


def test_sampled_per_user_values_are_gathered_on_every_rank():
    """per_user() and sampled_ranks() hold every process's test items on every process (rank 0's
    first), as the other metrics' per_user(): their mean is compute()'s."""
    expected = [float(hit) for hit in _SAMPLED_HITS]
    for rank, got in enumerate(run_in_processes(_sampled_worker)):
        assert got["per_user"] == expected, f"rank {rank}"
        assert got["ranks"] == [1.0 if hit else 21.0 for hit in _SAMPLED_HITS], f"rank {rank}"
        assert got["mean"] == pytest.approx(np.mean(expected))
