"""User groups (num_groups, UserGroups) and user ids (UserIds) of the per-user-mean metrics:
per-group means and intervals against numpy means and scipy intervals over each group's users
(from the numpy per-user references), per-user values in user-id order, the Engine keys, the
refusals, and two gloo processes equal to one."""

import json
import os
import re

import numpy as np
import pytest
import torch
import ignite.distributed as idist
from ignite.engine import Engine

import ignite_recsys as R
from ignite_recsys import UserGroups, UserIds
from test_statistics import ALL, TOP_K, _batches, _expected_rows, _metric, _scipy_interval
from conftest import eager_error
from gloo import run_in_processes

NUM_GROUPS = 5  # group 4 never appears; group 3 holds a single user


def _group_ids(batches, seed=0):
    """Per batch, (users,) int64 group ids in [0, 3), and one user of group 3."""
    rng = np.random.default_rng(seed)
    groups = [torch.from_numpy(rng.integers(0, 3, size=scores.shape[0])) for scores, _ in batches]
    groups[0][2] = 3  # users 0 and 1 of _batches have no relevant item
    return groups


def _fed(metric, batches, groups):
    for (scores, relevance), ids in zip(batches, groups):
        metric.update((scores, relevance, UserGroups(ids)))
    return metric


def _as_columns(result):
    """compute()'s result as a flat list of numbers (list per k, float, or dict)."""
    if isinstance(result, dict):
        return list(result.values())
    return list(result) if isinstance(result, list) else [result]


# --- Per-group means and intervals equal the references ---------------------------------------
@pytest.mark.parametrize("name", ALL)
def test_group_means_and_intervals_equal_numpy_and_scipy(name):
    batches = _batches(21, sizes=(30, 1, 25, 14))
    groups = _group_ids(batches)
    metric = _fed(_metric(name, num_groups=NUM_GROUPS), batches, groups)
    rows = _expected_rows(name, batches)
    rows = rows.reshape(rows.shape[0], -1)
    group_of = torch.cat(groups).numpy()
    got_means, got_intervals = metric.compute_groups(), metric.confidence_interval_groups(0.9)
    assert len(got_means) == len(got_intervals) == NUM_GROUPS
    counts = []
    for group in range(NUM_GROUPS):
        mine = rows[group_of == group]
        counted = mine[~np.isnan(mine[:, 0])]
        counts.append(len(counted))
        means, intervals = _as_columns(got_means[group]), _as_columns(got_intervals[group])
        for column in range(rows.shape[1]):
            if len(counted) == 0:
                assert np.isnan(means[column])
            else:
                assert means[column] == pytest.approx(counted[:, column].mean(), abs=1e-12, rel=1e-12)
            if len(counted) < 2:
                assert np.isnan(intervals[column]).all()
            else:
                np.testing.assert_allclose(
                    intervals[column], _scipy_interval(counted[:, column], 0.9), rtol=1e-10, atol=1e-9
                )
    assert metric.group_counts() == counts
    assert counts[3] == 1 and counts[4] == 0
    # the groups partition the counted users: their sums are the metric's
    np.testing.assert_allclose(metric._group_sum.sum(0), metric._sum, rtol=1e-12)
    assert float(metric._group_count.sum()) == float(metric._count)


def test_ranking_metrics_groups_are_dicts_equal_to_the_single_classes():
    batches = _batches(22, sizes=(40, 20))
    groups = _group_ids(batches, seed=1)
    many = _fed(R.RankingMetrics(TOP_K, ["ndcg", "mrr", "r_precision"], num_groups=NUM_GROUPS), batches, groups)
    ndcg = _fed(R.NDCG(TOP_K, num_groups=NUM_GROUPS), batches, groups)
    rp = _fed(R.RPrecision(num_groups=NUM_GROUPS), batches, groups)
    for group, result in enumerate(many.compute_groups()):
        assert list(result) == [f"{m}@{k}" for m in ("ndcg", "mrr") for k in TOP_K] + ["r_precision"]
        np.testing.assert_array_equal([result[f"ndcg@{k}"] for k in TOP_K], ndcg.compute_groups()[group])
        np.testing.assert_array_equal(result["r_precision"], rp.compute_groups()[group])
    intervals = many.confidence_interval_groups()
    assert intervals[0]["ndcg@3"] == ndcg.confidence_interval_groups()[0][1]


def test_ignore_zero_hits_false_counts_every_user_of_the_group():
    batches = _batches(23, sizes=(20, 20), zero_users=5)
    groups = _group_ids(batches, seed=2)
    metric = _fed(R.Recall(TOP_K, ignore_zero_hits=False, num_groups=NUM_GROUPS), batches, groups)
    group_of = torch.cat(groups).numpy()
    assert metric.group_counts() == [int((group_of == g).sum()) for g in range(NUM_GROUPS)]
    rows = _expected_rows("recall", batches, ignore_zero_hits=False)
    np.testing.assert_allclose(metric.compute_groups()[1], rows[group_of == 1].mean(0), rtol=1e-12)


def _form(form, scores, relevance):
    if form == "sparse targets":
        return (scores, relevance.to_sparse())
    if form == "ranked ids":
        return (R.RankedItems(torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :8]), relevance)
    excluded = torch.zeros(scores.shape, dtype=torch.bool)
    excluded[:, 3:7] = True
    return (scores, relevance, R.ItemIds(torch.nonzero(excluded)[:, 1].reshape(-1, 4)))


@pytest.mark.parametrize("form", ["sparse targets", "ranked ids", "exclude"])
def test_groups_with_the_other_input_forms_equal_the_metric_of_each_group_alone(form):
    """Each group's values equal those of a metric without groups fed only that group's users,
    in the same input form (which the input-form tests check against the references)."""
    scores, relevance = _batches(24, sizes=(16,))[0]
    groups = torch.arange(16) % 3
    metric = R.NDCG(TOP_K, num_groups=3)
    metric.update(_form(form, scores, relevance) + (UserGroups(groups),))
    for group, result in enumerate(metric.compute_groups()):
        alone = R.NDCG(TOP_K)
        alone.update(_form(form, scores[groups == group], relevance[groups == group]))
        np.testing.assert_allclose(result, alone.compute(), rtol=1e-12, err_msg=f"group {group}")


# --- Refusals -----------------------------------------------------------------------------------
def _state(metric):
    return {key: getattr(metric, key).clone() for key in metric._state_dict_all_req_keys}


@pytest.mark.parametrize("bad", [torch.tensor([0, 1, 3, 0]), torch.tensor([0, -1, 1, 0])])
def test_group_ids_outside_the_range_are_refused_and_the_state_kept(bad):
    scores, relevance = _batches(25, sizes=(4,), zero_users=0)[0]
    metric = R.NDCG(TOP_K, num_groups=3)
    metric.update((scores, relevance, UserGroups(torch.tensor([0, 1, 2, 2]))))
    before = _state(metric)
    with pytest.raises(ValueError, match=re.escape("UserGroups ids must lie in [0, 3) (num_groups=3)")):
        metric.update((scores, relevance, UserGroups(bad)))
    for key, value in before.items():
        assert torch.equal(getattr(metric, key), value), key


def test_group_ids_outside_the_range_on_the_deferred_path_raise_in_compute(monkeypatch):
    """As on CUDA: the check runs on the device, the batch adds nothing, compute() raises."""
    import ignite_recsys.metrics._state as state

    scores, relevance = _batches(26, sizes=(4,), zero_users=0)[0]
    bad = (scores, relevance, UserGroups(torch.tensor([0, 7, 2, 2])))
    expected = eager_error(lambda: R.NDCG(TOP_K, num_groups=3), bad)  # what a CPU update says
    metric = R.NDCG(TOP_K, num_groups=3)
    metric.update((scores, relevance, UserGroups(torch.tensor([0, 1, 2, 2]))))
    before = _state(metric)
    monkeypatch.setattr(state, "values_checked_on_host", lambda device: False)
    metric.update(bad)
    for key, value in before.items():
        if key != "_num_invalid_updates":
            assert torch.equal(getattr(metric, key), value), key
    for method in (metric.compute, metric.compute_groups, metric.confidence_interval_groups):
        with pytest.raises(ValueError, match="1 update") as raised:
            method()
        assert f"\n- {expected}: 1 update" in str(raised.value)


@pytest.mark.parametrize(
    "ids, error, message",
    [
        (torch.tensor([0.0, 1.0, 1.0, 0.0]), TypeError, "UserGroups ids must hold integer group ids"),
        (torch.tensor([[0, 1, 1, 0]]), ValueError, "UserGroups ids must be 1-D"),
        ([0, 1, 1, 0], TypeError, "UserGroups ids must be a torch.Tensor"),
        (torch.tensor([0, 1, 1, 0]).to_sparse(), TypeError, "UserGroups ids must be a dense tensor"),
    ],
)
def test_malformed_group_ids_are_refused_when_wrapped(ids, error, message):
    with pytest.raises(error, match=re.escape(message)):
        UserGroups(ids)


def test_group_ids_of_another_batch_size_and_misuse_are_refused():
    scores, relevance = _batches(27, sizes=(4,), zero_users=0)[0]
    metric = R.NDCG(TOP_K, num_groups=3)
    with pytest.raises(ValueError, match=re.escape("UserGroups ids must hold one id per user of the batch (4), got 3")):
        metric.update((scores, relevance, UserGroups(torch.tensor([0, 1, 2]))))
    with pytest.raises(ValueError, match="built with num_groups=3: every update needs the users' groups"):
        metric.update((scores, relevance))
    with pytest.raises(ValueError, match="update holds UserGroups twice"):
        metric.update(
            (
                scores,
                relevance,
                UserGroups(torch.zeros(4, dtype=torch.int64)),
                UserGroups(torch.zeros(4, dtype=torch.int64)),
            )
        )
    assert float(metric._count) == 0
    plain = R.NDCG(TOP_K)
    with pytest.raises(ValueError, match="got UserGroups but was built without num_groups"):
        plain.update((scores, relevance, UserGroups(torch.zeros(4, dtype=torch.int64))))
    with pytest.raises(RuntimeError, match=re.escape("compute_groups() needs the metric to be built with num_groups")):
        plain.compute_groups()
    with pytest.raises(TypeError, match="UserGroups is taken only by the metrics that average over users"):
        R.ItemCoverage(TOP_K).update((scores, relevance, UserGroups(torch.zeros(4, dtype=torch.int64))))


@pytest.mark.parametrize("value, error", [(0, ValueError), (-2, ValueError), (2.0, TypeError), (True, TypeError)])
def test_num_groups_must_be_a_positive_int(value, error):
    with pytest.raises(error, match="num_groups must be a positive int or None"):
        R.MRR(TOP_K, num_groups=value)


@pytest.mark.parametrize(
    "factory",
    [
        lambda **kw: R.HitRate(TOP_K, **kw),
        lambda **kw: R.Precision(TOP_K, **kw),
        lambda **kw: R.MAP(TOP_K, **kw),
        lambda **kw: R.F1(TOP_K, **kw),
        lambda **kw: R.RankingMetrics(TOP_K, **kw),
        lambda **kw: R.TailPercentage(TOP_K, torch.arange(25), **kw),
        lambda **kw: R.Novelty(TOP_K, torch.arange(25) + 1, **kw),
        lambda **kw: R.AveragePopularity(TOP_K, torch.arange(25), **kw),
    ],
)
def test_every_per_user_mean_metric_takes_num_groups(factory):
    assert factory(num_groups=2).num_groups == 2 and factory().num_groups is None


# --- Checkpoints --------------------------------------------------------------------------------
def test_group_state_is_checkpointed_and_checked_on_load():
    batches = _batches(28)
    groups = _group_ids(batches)
    metric = _fed(R.MRR(TOP_K, num_groups=NUM_GROUPS), batches, groups)
    restored = R.MRR(TOP_K, num_groups=NUM_GROUPS)
    restored.load_state_dict(metric.state_dict())
    np.testing.assert_array_equal(restored.compute_groups(), metric.compute_groups())
    with pytest.raises(ValueError, match="another configuration: num_groups=5 \\(this metric: 4\\)"):
        R.MRR(TOP_K, num_groups=4).load_state_dict(metric.state_dict())
    with pytest.raises(ValueError, match="another configuration: num_groups=None \\(this metric: 5\\)"):
        R.MRR(TOP_K, num_groups=NUM_GROUPS).load_state_dict(R.MRR(TOP_K).state_dict())
    # a state without its configuration (saved before states carried one) is checked by its shapes
    bare = {"__metric_state_per_rank": metric.state_dict()["__metric_state_per_rank"]}
    with pytest.raises(ValueError, match="'_group_sum' has shape \\(5, 3\\).*expects \\(4, 3\\)"):
        R.MRR(TOP_K, num_groups=4).load_state_dict(bare)
    with pytest.raises(ValueError, match="the state has no '_group_sum'"):
        R.MRR(TOP_K, num_groups=NUM_GROUPS).load_state_dict(
            {"__metric_state_per_rank": R.MRR(TOP_K).state_dict()["__metric_state_per_rank"]}
        )
    assert "_group_sum" not in R.MRR(TOP_K).state_dict()["__metric_state_per_rank"][0]


def test_an_ignite_state_is_refused_by_a_metric_with_groups():
    from ignite.metrics.rec_sys import NDCG as IgniteNDCG

    theirs = IgniteNDCG([1, 3])
    theirs.update(_batches(29)[0])
    with pytest.raises(ValueError, match="no per-group sums"):
        R.NDCG([1, 3], num_groups=2).load_state_dict(theirs.state_dict())


# --- Engine -------------------------------------------------------------------------------------
def test_engine_writes_one_scalar_per_value_and_group_from_a_dict_output():
    batches = _batches(30, sizes=(12, 9))
    groups = _group_ids(batches)
    outputs = [{"y_pred": s, "y": y, "groups": g} for (s, y), g in zip(batches, groups)]
    engine = Engine(lambda e, batch: batch)
    ndcg = R.NDCG(TOP_K, num_groups=NUM_GROUPS)
    ndcg.attach(engine, "ndcg")
    R.RankingMetrics(TOP_K, ["recall"], num_groups=NUM_GROUPS).attach(engine, "ranking")
    R.RPrecision(num_groups=NUM_GROUPS).attach(engine, "rp")
    R.MRR(TOP_K).attach(engine, "mrr")  # built without groups: the shared output's "groups" is not read
    metrics = engine.run(outputs).metrics
    expected = _fed(R.NDCG(TOP_K, num_groups=NUM_GROUPS), batches, groups).compute_groups()
    for group in range(NUM_GROUPS):
        for k, value in zip(TOP_K, expected[group]):
            np.testing.assert_equal(metrics[f"ndcg@{k}/group{group}"], value)
        assert f"ranking/recall@3/group{group}" in metrics and f"rp/group{group}" in metrics
    plain = R.MRR(TOP_K)
    for batch in batches:
        plain.update(batch)
    assert metrics["mrr"] == plain.compute()
    names = R.scalar_metric_names(engine)
    assert names[:3] == ["ndcg@1", "ndcg@3", "ndcg@8"]
    assert names[3 : 3 + NUM_GROUPS] == [f"ndcg@1/group{g}" for g in range(NUM_GROUPS)]
    assert "rp" in names and "rp/group0" in names and "ranking/recall@8/group4" in names
    assert not any(key.startswith("mrr@1/group") for key in metrics)


def test_engine_group_keys_that_collide_raise():
    engine = Engine(lambda e, batch: batch)
    R.GAUC().attach(engine, "ndcg@3/group1")
    with pytest.raises(ValueError, match="would both write \\['ndcg@3/group1'\\]"):
        R.NDCG(TOP_K, num_groups=2).attach(engine, "ndcg")
    R.NDCG(TOP_K, num_groups=1).attach(engine, "ndcg")  # group 1 does not exist: no collision
    engine = Engine(lambda e, batch: batch)
    R.GAUC().attach(engine, "quality/group1")
    with pytest.raises(ValueError, match="quality/group1"):
        R.RPrecision(num_groups=2).attach(engine, "quality")
    engine = Engine(lambda e, batch: batch)
    R.RankingMetrics(TOP_K, ["ndcg"], num_groups=2).attach(engine, "model")
    with pytest.raises(ValueError, match="'model/ndcg@1/group0'"):
        R.NDCG(TOP_K, num_groups=2).attach(engine, "model/ndcg")


# --- User ids -----------------------------------------------------------------------------------
def _id_batches(seed=31):
    batches = _batches(seed, sizes=(9, 4, 11))
    rng = np.random.default_rng(seed)
    ids = torch.from_numpy(rng.permutation(1000)[:24]).split([9, 4, 11])
    return batches, list(ids)


@pytest.mark.parametrize("name", ["ndcg", "r_precision", "novelty"])
def test_per_user_with_ids_comes_in_user_id_order(name):
    batches, ids = _id_batches()
    metric = _metric(name, per_user=True)
    for batch, users in zip(batches, ids):
        metric.update(batch + (UserIds(users),))
    order = np.argsort(torch.cat(ids).numpy(), kind="stable")
    expected = _expected_rows(name, batches)[order]
    np.testing.assert_allclose(metric.per_user().numpy(), expected, rtol=1e-12, atol=1e-12)
    assert metric.per_user_ids().tolist() == sorted(torch.cat(ids).tolist())


def test_user_ids_with_groups_and_ranking_metrics():
    batches, ids = _id_batches(32)
    metric = R.RankingMetrics(TOP_K, ["ndcg", "r_precision"], per_user=True, num_groups=2)
    for batch, users in zip(batches, ids):
        metric.update(batch + (UserIds(users), UserGroups(users % 2)))  # either order of the two
    order = np.argsort(torch.cat(ids).numpy(), kind="stable")
    np.testing.assert_allclose(
        metric.per_user()["r_precision"].numpy(), _expected_rows("r_precision", batches)[order], atol=1e-12
    )
    values = metric.per_user()["ndcg@3"].numpy()
    odd = (metric.per_user_ids() % 2 == 1).numpy()
    assert metric.compute_groups()[1]["ndcg@3"] == pytest.approx(np.nanmean(values[odd]), abs=1e-12)


def test_paired_test_of_metrics_fed_in_different_orders_lines_the_users_up():
    batches, ids = _id_batches(33)
    worse = [(-scores, relevance) for scores, relevance in batches]
    a, b = R.NDCG(TOP_K, per_user=True), R.NDCG(TOP_K, per_user=True)
    for batch, users in zip(batches, ids):
        a.update(batch + (UserIds(users),))
    for batch, users in reversed(list(zip(worse, ids))):
        b.update(batch + (UserIds(users),))
    order = np.argsort(torch.cat(ids).numpy(), kind="stable")
    expected_a, expected_b = _expected_rows("ndcg", batches)[order, 2], _expected_rows("ndcg", worse)[order, 2]
    kept = ~np.isnan(expected_a)
    from scipy import stats as sps

    assert R.paired_test(a, b, k=8).p_value == pytest.approx(
        sps.ttest_rel(expected_a[kept], expected_b[kept]).pvalue, abs=1e-9
    )
    other = R.NDCG(TOP_K, per_user=True)
    for batch, users in zip(worse, ids):
        other.update(batch + (UserIds(users + 1000),))
    with pytest.raises(ValueError, match="a and b hold different users"):
        R.paired_test(a, other, k=8)


def test_user_id_misuse_is_refused():
    batches, ids = _id_batches(34)
    metric = R.MRR(TOP_K, per_user=True)
    metric.update(batches[0] + (UserIds(ids[0]),))
    with pytest.raises(ValueError, match="UserIds must come with every update since the last reset or with none"):
        metric.update(batches[1])
    metric.update(batches[1] + (UserIds(ids[0][:4]),))  # ids already seen
    with pytest.raises(ValueError, match=re.escape("user ids must be distinct, got 4 id(s) more than once")):
        metric.per_user()
    plain = R.MRR(TOP_K, per_user=True)
    plain.update(batches[0])
    with pytest.raises(RuntimeError, match="per_user_ids\\(\\) needs user ids"):
        plain.per_user_ids()
    with pytest.raises(ValueError, match="got UserIds, which order the per-user values: build it with per_user=True"):
        R.MRR(TOP_K).update(batches[0] + (UserIds(ids[0]),))
    with pytest.raises(TypeError, match="UserIds ids must hold integer user ids"):
        UserIds(torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=re.escape("UserIds ids must hold one id per user of the batch (9), got 4")):
        R.MRR(TOP_K, per_user=True).update(batches[0] + (UserIds(ids[1]),))


def test_users_from_a_dict_output():
    batches, ids = _id_batches(35)
    engine = Engine(lambda e, batch: batch)
    metric = R.HitRate(TOP_K, per_user=True)
    metric.attach(engine, "hr")
    engine.run([{"y_pred": s, "y": y, "users": u} for (s, y), u in zip(batches, ids)])
    assert metric.per_user_ids().tolist() == sorted(torch.cat(ids).tolist())


# --- Two gloo processes equal one ----------------------------------------------------------------
def _shares():
    batches = _batches(40, sizes=(13, 1, 9, 17))
    groups = _group_ids(batches, seed=4)
    users = torch.randperm(40, generator=torch.Generator().manual_seed(0)).split([13, 1, 9, 17])
    data = list(zip(batches, groups, users))
    return {0: [data[1], data[3]], 1: [data[0], data[2]]}


_FACTORIES = {
    "ndcg": lambda: R.NDCG(TOP_K, num_groups=NUM_GROUPS, per_user=True),
    "ranking": lambda: R.RankingMetrics(TOP_K, ["mrr", "r_precision"], num_groups=NUM_GROUPS, per_user=True),
    "novelty": lambda: R.Novelty(TOP_K, torch.arange(25) % 7 + 1, num_groups=NUM_GROUPS, per_user=True),
}


def _results(batches):
    results = {}
    for name, factory in _FACTORIES.items():
        metric = factory()
        for (scores, relevance), groups, users in batches:
            metric.update((scores, relevance, UserGroups(groups), UserIds(users)))
        rows = metric.per_user()
        results[name] = {
            "groups": metric.compute_groups(),
            "intervals": metric.confidence_interval_groups(0.9),
            "counts": metric.group_counts(),
            "rows": {k: v.tolist() for k, v in rows.items()} if isinstance(rows, dict) else rows.tolist(),
            "ids": metric.per_user_ids().tolist(),
        }
    return results


def _worker(local_rank, folder):
    rank = idist.get_rank()
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as handle:
        json.dump(_results(_shares()[rank]), handle)


def _flat(value):
    if isinstance(value, dict):
        return [x for item in value.values() for x in _flat(item)]
    if isinstance(value, (list, tuple)):
        return [x for item in value for x in _flat(item)]
    return [value]


@pytest.mark.slow
def test_two_gloo_processes_equal_one():
    """Rank 0 and rank 1 hold interleaved users of every group: the groups' means, intervals and
    counts equal one process's, and the per-user rows come in user-id order, as in one process."""
    shares = _shares()
    expected = _results(shares[0] + shares[1])
    assert expected["ndcg"]["ids"] == list(range(40))
    for rank, got in enumerate(run_in_processes(_worker)):
        for name, value in expected.items():
            assert got[name]["ids"] == value["ids"] and got[name]["counts"] == value["counts"]
            for part in ("groups", "intervals", "rows"):
                np.testing.assert_allclose(
                    _flat(got[name][part]),
                    _flat(value[part]),
                    rtol=0,
                    atol=1e-9,
                    err_msg=f"{name} {part} rank {rank}",
                )
