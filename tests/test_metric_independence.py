"""A metric's value never depends on which other metrics are computed with it: every registry
metric from ``evaluate`` alone equals the same metric in a group with all the others, for a TREC
run, ranked ids and a model's dense scores, at cut-offs inside, at and past the lists' length.
Fall-out, whose denominator reads the whole list, is also checked against a numpy reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ignite_recsys as R
from ignite_recsys._registry import ALL_METRICS, CUTOFF_METRICS

from references_families import fall_out as fall_out_reference

pytest.importorskip("pyarrow")

NUM_USERS, NUM_ITEMS, LIST = 12, 9, 6
CUTOFFS = (1, 4, 6, 20)  # inside, at and past the lists (6 items) and the catalog (9)


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = np.where(rng.random((NUM_USERS, NUM_ITEMS)) < 0.35, rng.integers(1, 4, (NUM_USERS, NUM_ITEMS)), 0)
    labels[0] = 0  # a user without a relevant item
    judged = rng.random((NUM_USERS, NUM_ITEMS)) < 0.8
    judged |= labels > 0
    scores = rng.random((NUM_USERS, NUM_ITEMS))
    ranked = np.argsort(-scores, axis=1, kind="stable")[:, :LIST]
    ranked[3, 4:] = -1  # a shorter list
    return labels, judged, scores, ranked


def _test_table(labels, judged):
    users, items = np.nonzero(judged)
    return R.Interactions(
        torch.from_numpy(users),
        torch.from_numpy(items),
        torch.from_numpy(labels[users, items].astype(np.float64)),
        num_items=NUM_ITEMS,
    )


def _write_trec(tmp_path, labels, judged, ranked):
    qrels, run = tmp_path / "qrels.txt", tmp_path / "run.txt"
    with open(qrels, "w") as handle:
        for u, i in zip(*np.nonzero(judged)):
            handle.write(f"{u} 0 {i} {int(labels[u, i])}\n")
    with open(run, "w") as handle:
        for u in range(1, NUM_USERS):  # user 0 has no list: an empty one
            for rank, i in enumerate(item for item in ranked[u] if item >= 0):
                handle.write(f"{u} Q0 {i} {rank + 1} {100 - rank} run\n")
    return str(run), str(qrels)


def _names(name):
    return [name] if name not in CUTOFF_METRICS else [f"{name}@{k}" for k in CUTOFFS]


ALL = [key for name in ALL_METRICS for key in _names(name)]


@pytest.fixture(scope="module")
def forms(tmp_path_factory):
    labels, judged, scores, ranked = _data()
    test = _test_table(labels, judged)
    run, qrels = _write_trec(tmp_path_factory.mktemp("independence"), labels, judged, ranked)
    dense = torch.from_numpy(scores)
    return {
        "run": (run, qrels),
        "ranked": ((torch.arange(NUM_USERS), torch.from_numpy(ranked)), test),
        "scores": ((lambda users: dense[users]), test),
    }


@pytest.mark.parametrize("form", ["run", "ranked", "scores"])
@pytest.mark.parametrize("conventions", [{}, {"ignore_zero_hits": False, "gain_function": "linear_rank"}])
def test_every_metric_alone_equals_it_in_a_group(forms, form, conventions):
    scores, test = forms[form]
    group = R.evaluate(scores, test, ALL, progress=False, **conventions).means
    for key in ALL:
        alone = R.evaluate(scores, test, [key], progress=False, **conventions).means[key]
        assert alone == pytest.approx(group[key], abs=1e-12), (form, key, alone, group[key])


@pytest.mark.parametrize("form", ["run", "ranked"])
@pytest.mark.parametrize("k", [1, 2, 4, 20])
@pytest.mark.parametrize("others", [[], ["ndcg@20"], ["recall@50", "r_precision"]])
def test_fall_out_of_lists_against_numpy(forms, form, k, others):
    """Fall-out of a ranked list: the non-relevant items in its top k over its non-relevant items
    (the listed ids are the candidates), alone or beside metrics with larger cut-offs."""
    labels, _, _, ranked = _data()
    scores, test = forms[form]
    value = R.evaluate(scores, test, [f"fall_out@{k}", *others], progress=False).means[f"fall_out@{k}"]
    values = []
    for u in range(NUM_USERS):
        if not (labels[u] > 0).any():
            continue  # skipped: no relevant item (ignore_zero_hits=True)
        listed = [int(i) for i in ranked[u] if i >= 0] if (form == "ranked" or u > 0) else []
        values.append(fall_out_reference(listed, labels[u], listed, k))
    assert value == pytest.approx(np.mean(values), abs=1e-12)


def test_fall_out_of_a_run_does_not_depend_on_the_other_metrics(tmp_path):
    """One relevant and four non-relevant items, all ranked: fall-out@2 is 1/4 alone as with NDCG@5."""
    qrels, run = tmp_path / "q.txt", tmp_path / "r.txt"
    qrels.write_text("".join(f"q1 0 d{i} {int(i == 1)}\n" for i in range(1, 6)))
    run.write_text("".join(f"q1 Q0 d{i} {i} {10 - i} x\n" for i in range(1, 6)))
    assert R.evaluate(str(run), str(qrels), ["fall_out@2"], progress=False)["fall_out@2"] == 0.25
    assert R.evaluate(str(run), str(qrels), ["fall_out@2", "ndcg@5"], progress=False)["fall_out@2"] == 0.25
