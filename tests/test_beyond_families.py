"""The beyond-accuracy families (diversity, serendipity, novelty, calibration, popularity bias and
exposure, two-model overlap, the group gap) against the numpy references of
``references_families.py`` (written from the papers and the peers' code; imports nothing of ours).

Every metric runs over the users of ``harness.DATA`` (ties, -inf scores, a user without candidates,
a user without a relevant item, an empty ranked list, an item unseen in training) in several
batches, through every prediction form and every exclusion form, with the target forms and the two
containers (``update`` tuples, an Engine's dict output) spread over the cases; per-user means also
check ``per_user()``, ``confidence_interval()`` (scipy's Student-t interval) and ``compute_groups()``.
Further: streaming equals one batch, two gloo processes equal one, the ``meta`` device runs every
update without reading a value, bad input is refused by name with the state unchanged.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile

import numpy as np
import pytest
import references_families as fam
import torch
from harness import DATA, exclude_form, prediction_form, split_rows, target_form
from ignite.exceptions import NotComputableError
from references import candidate_rankings
from scipy import stats

import ignite_recsys as R

TOP_K = [5, 1, 12, 2]  # unsorted; 12 is past the catalog of 9 items
KS = sorted(TOP_K)
TOLERANCE = 1e-9
LEVEL = 0.95
NUM_ITEMS = DATA.items
COUNTS = DATA.popularity  # distinct training users per item; item 2 never seen
NUM_TRAIN_USERS = int(COUNTS.max()) + 3
_rng = np.random.default_rng(29)
FEATURES = _rng.normal(size=(NUM_ITEMS, 4))
BINARY = (_rng.random((NUM_ITEMS, 6)) < 0.4).astype(np.float64)
INTEGER_FEATURES = _rng.integers(0, 3, size=(NUM_ITEMS, 5)).astype(np.float64)
CATEGORIES = [sorted(_rng.choice(4, size=int(_rng.integers(1, 4)), replace=False).tolist()) for _ in range(NUM_ITEMS)]
CATEGORIES[6] = []  # an item without a category
ITEM_GROUPS = [0, 1, 2, 0, 1, 2, 0, 1, 1]
GROUPS = np.array([0, 1, 0, 1, 2, 0, 1, 1])  # user groups of DATA's 8 users
# a second model: other scores (ties) and other ranked lists
SCORES_B = _rng.integers(0, 4, size=DATA.scores.shape).astype(np.float64)
RANKED_B = -np.ones_like(DATA.ranked_ids)
for _u in range(DATA.users):
    _length = 0 if _u == 6 else max(DATA.ranked_ids.shape[1] - (_u + 1) % 3, 1)
    RANKED_B[_u, :_length] = _rng.permutation(NUM_ITEMS)[:_length]


def euclidean(features: torch.Tensor) -> torch.Tensor:
    """A callable distance: (batch, k, d) -> (batch, k, k)."""
    return torch.cdist(features, features)


def _euclidean_reference(x, y):
    return float(np.linalg.norm(np.asarray(x) - np.asarray(y)))


def _tensor(array, dtype=torch.float64):
    return torch.as_tensor(np.asarray(array), dtype=dtype)


# --- The metrics and their references --------------------------------------------------------------
class Spec:
    """One metric configuration: ``build(**common)`` makes it; ``rows(lists, sets)`` gives the
    reference per-user values (users, len(KS)), NaN for users not counted, or ``total(lists, sets)``
    the reference of a global metric (a list per k). ``lists``: each user's candidate ranking;
    ``sets``: each user's excluded items (history), or None."""

    def __init__(self, build, rows=None, total=None, needs_exclusion=False, two_models=False):
        self.build, self.rows, self.total = build, rows, total
        self.needs_exclusion, self.two_models = needs_exclusion, two_models

    @property
    def per_user_mean(self) -> bool:
        return self.rows is not None


def _per_user(value_of):
    """Rows from ``value_of(user, list, k)``, NaN for a user with an empty list."""

    def rows(lists, sets, labels=DATA.labels):
        return np.array([[value_of(u, items, k) if items else np.nan for k in KS] for u, items in enumerate(lists)])

    return rows


def _has_relevant(u):
    return bool((DATA.labels[u] >= 1).any())


HEAD, TAIL = fam.elliot_short_head(COUNTS, 0.8)
HEAD_HALF, TAIL_HALF = fam.elliot_short_head(COUNTS, 0.5)


def _calibration_rows(alpha=0.01, discount=None):
    def rows(lists, sets):
        out = []
        for u, items in enumerate(lists):
            history = sorted(sets[u])
            if not items or not history:
                out.append([np.nan] * len(KS))
                continue
            out.append(
                [fam.calibration_kl(items, k, history, CATEGORIES, 4, alpha=alpha, rank_discount=discount) for k in KS]
            )
        return np.array(out)

    return rows


def _histories(sets):
    return [set() for _ in range(DATA.users)] if sets is None else sets


def _epc_rows(novelty, **kw):
    def rows(lists, sets):
        out = []
        for u, items in enumerate(lists):
            if not _has_relevant(u) and kw.get("skip", True):
                out.append([np.nan] * len(KS))
                continue
            out.append([novelty(items, DATA.labels[u], k) for k in KS])
        return np.array(out)

    return rows


SPECS = {
    "ild_cosine": Spec(
        lambda **kw: R.IntraListDiversity(TOP_K, _tensor(FEATURES), **kw),
        _per_user(lambda u, items, k: fam.intra_list_diversity(items, k, FEATURES)),
    ),
    "ild_hamming": Spec(
        lambda **kw: R.IntraListDiversity(TOP_K, _tensor(BINARY), distance="hamming", **kw),
        _per_user(lambda u, items, k: fam.intra_list_diversity(items, k, BINARY, distance="hamming")),
    ),
    "ild_hamming_integer": Spec(
        lambda **kw: R.IntraListDiversity(TOP_K, _tensor(INTEGER_FEATURES), distance="hamming", **kw),
        _per_user(lambda u, items, k: fam.intra_list_diversity(items, k, INTEGER_FEATURES, distance="hamming")),
    ),
    "ild_callable": Spec(
        lambda **kw: R.IntraListDiversity(TOP_K, _tensor(FEATURES), distance=euclidean, **kw),
        _per_user(lambda u, items, k: fam.intra_list_diversity(items, k, FEATURES, distance=_euclidean_reference)),
    ),
    "serendipity": Spec(
        lambda **kw: R.Serendipity(TOP_K, _tensor(COUNTS), **kw),
        _per_user(lambda u, items, k: fam.serendipity(items, DATA.labels[u], k, COUNTS, NUM_ITEMS)),
    ),
    "serendipity_threshold": Spec(
        lambda **kw: R.Serendipity(TOP_K, _tensor(COUNTS), relevance_threshold=2.0, **kw),
        _per_user(lambda u, items, k: fam.serendipity(items, DATA.labels[u], k, COUNTS, NUM_ITEMS, threshold=2.0)),
    ),
    "epc": Spec(
        lambda **kw: R.EPC(TOP_K, _tensor(COUNTS), NUM_TRAIN_USERS, **kw),
        _epc_rows(lambda items, labels, k: fam.epc(items, labels, k, COUNTS, NUM_TRAIN_USERS)),
    ),
    "epc_geometric_all_users": Spec(
        lambda **kw: R.EPC(
            TOP_K, _tensor(COUNTS), NUM_TRAIN_USERS, rank_weight=("geometric", 0.8), ignore_zero_hits=False, **kw
        ),
        _epc_rows(
            lambda items, labels, k: fam.epc(items, labels, k, COUNTS, NUM_TRAIN_USERS, discount=("geometric", 0.8)),
            skip=False,
        ),
    ),
    "efd": Spec(
        lambda **kw: R.EFD(TOP_K, _tensor(COUNTS), **kw),
        _epc_rows(lambda items, labels, k: fam.efd(items, labels, k, COUNTS)),
    ),
    "efd_uniform": Spec(
        lambda **kw: R.EFD(TOP_K, _tensor(COUNTS), rank_weight=None, **kw),
        _epc_rows(lambda items, labels, k: fam.efd(items, labels, k, COUNTS, discount=lambda r: np.ones(len(r)))),
    ),
    "miuf": Spec(
        lambda **kw: R.MeanInvUserFreq(TOP_K, _tensor(COUNTS), NUM_TRAIN_USERS, **kw),
        _per_user(lambda u, items, k: fam.mean_inverse_user_frequency(items, k, COUNTS, NUM_TRAIN_USERS)),
    ),
    "miscalibration": Spec(
        lambda **kw: R.Miscalibration(TOP_K, CATEGORIES, **kw), _calibration_rows(), needs_exclusion=True
    ),
    "miscalibration_ranked": Spec(
        lambda **kw: R.Miscalibration(TOP_K, CATEGORIES, alpha=0.2, rank_weight="log2", **kw),
        _calibration_rows(alpha=0.2, discount="log2"),
        needs_exclusion=True,
    ),
    "aplt": Spec(
        lambda **kw: R.APLT(TOP_K, _tensor(COUNTS), **kw), _per_user(lambda u, items, k: fam.aplt(items, k, TAIL))
    ),
    "aclt": Spec(
        lambda **kw: R.ACLT(TOP_K, _tensor(COUNTS), pop_ratio=0.5, **kw),
        _per_user(lambda u, items, k: fam.aclt(items, k, TAIL_HALF)),
    ),
    "mean_pop_rank": Spec(
        lambda **kw: R.MeanPopRank(TOP_K, _tensor(COUNTS), **kw),
        _per_user(lambda u, items, k: fam.mean_pop_rank(items, k, COUNTS)),
    ),
    "pop_rsp": Spec(
        lambda **kw: R.PopRSP(TOP_K, _tensor(COUNTS), **kw),
        total=lambda lists, sets: [fam.pop_rsp(lists, _histories(sets), k, HEAD, TAIL) for k in KS],
    ),
    "pop_reo": Spec(
        lambda **kw: R.PopREO(TOP_K, _tensor(COUNTS), pop_ratio=0.5, **kw),
        total=lambda lists, sets: [
            fam.pop_reo(lists, list(DATA.labels), _histories(sets), k, HEAD_HALF, TAIL_HALF) for k in KS
        ],
    ),
    "exposure_gini": Spec(
        lambda **kw: R.ExposureGini(TOP_K, num_items=NUM_ITEMS, **kw),
        total=lambda lists, sets: [fam.exposure_gini(lists, NUM_ITEMS, k) for k in KS],
    ),
    "exposure_gini_log2_clip": Spec(
        lambda **kw: R.ExposureGini(TOP_K, num_items=NUM_ITEMS, rank_weight="log2_clip", **kw),
        total=lambda lists, sets: [fam.exposure_gini(lists, NUM_ITEMS, k, discount="log2_clip") for k in KS],
    ),
    "item_group_exposure": Spec(
        lambda **kw: R.ItemGroupExposure(TOP_K, torch.tensor(ITEM_GROUPS), **kw),
        total=lambda lists, sets: [fam.group_exposure_share(lists, ITEM_GROUPS, 3, k).tolist() for k in KS],
    ),
    "item_group_exposure_log2": Spec(
        lambda **kw: R.ItemGroupExposure(TOP_K, torch.tensor(ITEM_GROUPS), num_item_groups=4, rank_weight="log2", **kw),
        total=lambda lists, sets: [
            fam.group_exposure_share(lists, ITEM_GROUPS, 4, k, discount="log2").tolist() for k in KS
        ],
    ),
    "rbo": Spec(
        lambda **kw: R.RankBiasedOverlap(TOP_K, num_items=NUM_ITEMS, **kw),
        lambda a, b: np.array([[fam.rank_biased_overlap(x, y, k) for k in KS] for x, y in zip(a, b)]),
        two_models=True,
    ),
    "rbo_webber": Spec(
        lambda **kw: R.RankBiasedOverlap(TOP_K, patience=0.6, normalize="webber", num_items=NUM_ITEMS, **kw),
        lambda a, b: np.array(
            [[fam.rank_biased_overlap(x, y, k, p=0.6, normalize="webber") for k in KS] for x, y in zip(a, b)]
        ),
        two_models=True,
    ),
    "intersection": Spec(
        lambda **kw: R.Intersection(TOP_K, num_items=NUM_ITEMS, **kw),
        lambda a, b: np.array([[fam.intersection(x, y, k) for k in KS] for x, y in zip(a, b)]),
        two_models=True,
    ),
    "intersection_ref_k": Spec(
        lambda **kw: R.Intersection(TOP_K, ref_k=3, num_items=NUM_ITEMS, **kw),
        lambda a, b: np.array([[fam.intersection(x, y, k, 3) for k in KS] for x, y in zip(a, b)]),
        two_models=True,
    ),
}
GLOBAL = {name for name, spec in SPECS.items() if not spec.per_user_mean}


# --- Running ---------------------------------------------------------------------------------------
def _excluded_sets(exclude):
    return None if exclude == "none" else [set(np.nonzero(row)[0].tolist()) for row in DATA.excluded]


def _lists(prediction, exclude, model="a"):
    sets = _excluded_sets(exclude)
    if model == "a":
        scores, ranked = DATA.scores, DATA.ranked_ids
    else:
        scores, ranked = SCORES_B, RANKED_B
    if prediction == "ranked":
        return [r[0] for r in candidate_rankings(excluded=sets, ranked_ids=ranked)]
    return [r[0] for r in candidate_rankings(scores, sets)]


def expected(name, prediction, exclude):
    """(per-user rows or None, compute() reference)."""
    spec = SPECS[name]
    sets = _excluded_sets(exclude)
    if spec.two_models:
        rows = spec.rows(_lists(prediction, exclude), _lists(_other(prediction), exclude, "b"))
    elif spec.per_user_mean:
        rows = spec.rows(_lists(prediction, exclude), sets)
    else:
        return None, spec.total(_lists(prediction, exclude), sets)
    return rows, [float(np.nanmean(rows[:, j])) for j in range(len(KS))]


def _other(prediction):
    return "ranked" if prediction == "scores" else "scores"


def _moved(value, device):
    """An input (a tensor, sparse too, or a wrapper of ids) on ``device``, built on CPU first (the
    meta device cannot make sparse tensors)."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, R.ItemIds):
        return R.ItemIds(value.ids.to(device), value.grades.to(device))
    if isinstance(value, (R.RankedItems, R.UserGroups, R.UserIds)):
        return type(value)(value.ids.to(device))
    if isinstance(value, dict):
        return {key: _moved(entry, device) for key, entry in value.items()}
    if isinstance(value, tuple):
        return tuple(_moved(entry, device) for entry in value)
    return value


def batches_of(name, target, prediction, exclude, container, rows=None, device="cpu", groups=False, users=False):
    """The users ``rows`` (default: all) of DATA in batches of the given forms, on ``device``."""
    return [
        _moved(batch, device) for batch in _batches(name, target, prediction, exclude, container, rows, groups, users)
    ]


def _batches(name, target, prediction, exclude, container, rows, groups, users, device="cpu"):
    spec = SPECS[name]
    out = []
    start, stop = (0, DATA.users) if rows is None else rows
    for part in split_rows(start, stop):
        data = DATA.rows(part)
        y_pred = prediction_form(data, prediction, torch.float32, device)
        y = target_form(data.labels, target, torch.float32, device)
        ex = exclude_form(data.excluded, exclude, device)
        tags = []
        if groups:
            tags.append(R.UserGroups(torch.as_tensor(GROUPS[part], device=device)))
        if users:
            tags.append(R.UserIds(torch.arange(part.start, part.stop, device=device) * 7 % 11))
        if spec.two_models:
            other = (
                _tensor(SCORES_B[part], torch.float32).to(device)
                if prediction == "ranked"
                else R.RankedItems(torch.as_tensor(RANKED_B[part], device=device))
            )
            if container == "engine":
                output = {"y_pred_a": y_pred, "y_pred_b": other, "y": y}
            else:
                output = (y_pred, other, y) + ((ex,) if ex is not None else ())
        elif container == "engine":
            output = {"y_pred": y_pred, "y": y}
        else:
            output = (y_pred, y) + ((ex,) if ex is not None else ())
        if container == "engine":
            if ex is not None:
                output["exclude"] = ex
            if groups:
                output["groups"] = tags[0]
            if users:
                output["users"] = tags[-1]
        else:
            output = output + tuple(tags)
        out.append(output)
    return out


def run(metric, batches, container="tuple"):
    if container == "engine":
        from ignite.engine import Engine

        engine = Engine(lambda engine, batch: batch)
        metric.attach(engine, "m")
        engine.run(batches, max_epochs=1)
        return engine.state.metrics["m"]
    for batch in batches:
        metric.update(batch)
    return metric.compute()


def assert_close(got, want, tolerance=TOLERANCE, context=""):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, context
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{context}: NaN pattern {got} vs {want}"
    keep = ~np.isnan(want)
    assert np.allclose(got[keep], want[keep], rtol=0, atol=tolerance), f"{context}: {got} vs {want}"


def _cases():
    cases = []
    targets = ("dense", "coo", "csr", "ids")
    for name, spec in SPECS.items():
        i = 0
        for prediction in ("scores", "ranked"):
            for exclude in ("none", "dense", "coo", "csr", "ids"):
                if spec.needs_exclusion and exclude == "none":
                    continue
                container = "engine" if i % 3 == 2 else "tuple"
                cases.append(
                    pytest.param(
                        name,
                        targets[i % 4],
                        prediction,
                        exclude,
                        container,
                        id=f"{name}-{prediction}-ex={exclude}-y={targets[i % 4]}-{container}",
                    )
                )
                i += 1
    return cases


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("name,target,prediction,exclude,container", _cases())
def test_against_the_references(name, target, prediction, exclude, container):
    spec = SPECS[name]
    rows, want = expected(name, prediction, exclude)
    per_user = spec.per_user_mean
    metric = spec.build(per_user=True) if per_user else spec.build()
    got = run(metric, batches_of(name, target, prediction, exclude, container), container)
    assert_close(got, want, context=f"{name} compute")
    if not per_user:
        return
    assert_close(metric.per_user().numpy(), rows, context=f"{name} per_user")
    assert metric.compute_dict() == dict(zip([f"{_snake(type(metric).__name__)}@{k}" for k in KS], got))
    low, high = zip(*metric.confidence_interval(LEVEL))
    for j in range(len(KS)):
        values = rows[:, j][~np.isnan(rows[:, j])]
        if np.std(values) == 0:
            interval = (values.mean(), values.mean())
        else:
            interval = stats.t.interval(LEVEL, len(values) - 1, values.mean(), stats.sem(values))
        assert_close([low[j], high[j]], interval, 1e-9, f"{name} confidence_interval@{KS[j]}")


def _snake(name):
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


@pytest.mark.parametrize("name", sorted(set(SPECS) - GLOBAL))
def test_user_groups_and_ids(name):
    """compute_groups() is the mean of each group's reference values; per_user() with UserIds
    comes in user-id order."""
    spec = SPECS[name]
    exclude = "ids"
    rows, _ = expected(name, "scores", exclude)
    metric = spec.build(num_groups=3, per_user=True)
    for batch in batches_of(name, "coo", "scores", exclude, "tuple", groups=True, users=True):
        metric.update(batch)
    for g, result in enumerate(metric.compute_groups()):
        members = rows[GROUPS == g]
        want = [
            float(np.nanmean(members[:, j])) if (~np.isnan(members[:, j])).any() else np.nan for j in range(len(KS))
        ]
        assert_close(result, want, context=f"{name} group {g}")
    ids = np.arange(DATA.users) * 7 % 11
    order = np.argsort(ids, kind="stable")
    assert metric.per_user_ids().tolist() == ids[order].tolist()
    assert_close(metric.per_user().numpy(), rows[order], context=f"{name} per_user by id")


@pytest.mark.parametrize("name", sorted(SPECS))
def test_streaming_equals_one_batch(name):
    spec = SPECS[name]
    exclude = "dense" if spec.needs_exclusion else "none"
    streamed = run(spec.build(), batches_of(name, "dense", "scores", exclude, "tuple"))
    whole = spec.build()
    data = DATA
    x = (torch.as_tensor(data.scores, dtype=torch.float32), torch.as_tensor(data.labels, dtype=torch.float32))
    if spec.two_models:
        x = (x[0], R.RankedItems(torch.as_tensor(RANKED_B)), x[1])
    if spec.needs_exclusion:
        x = x + (torch.as_tensor(data.excluded),)
    whole.update(x)
    assert_close(streamed, whole.compute(), 1e-12, name)


# --- Conventions and identities of the peers ---------------------------------------------------------
def test_miuf_is_novelty_against_the_users():
    """MeanInvUserFreq = Novelty - log2(N / |U|) when no unseen item is listed (N: interactions)."""
    counts = torch.tensor([6.0, 3, 2, 2, 1, 1])
    users = 8
    scores = torch.tensor(_rng.random((5, 6)))
    miuf, novelty = R.MeanInvUserFreq([1, 3, 6], counts, users), R.Novelty([1, 3, 6], counts)
    miuf.update((scores, torch.zeros(5, 6)))
    novelty.update((scores, torch.zeros(5, 6)))
    shift = math.log2(float(counts.sum()) / users)
    assert miuf.compute() == pytest.approx([v - shift for v in novelty.compute()], abs=1e-12)


def test_list_gini_is_gini_index():
    """LensKit's ListGini (ExposureGini with every slot 1) is GiniIndex (RecBole's convention)."""
    scores = torch.tensor(_rng.random((7, 9)))
    gini, exposure = R.GiniIndex([2, 4]), R.ExposureGini([2, 4], rank_weight=None)
    for metric in (gini, exposure):
        metric.update((scores, torch.zeros(7, 9)))
    lists = [torch.argsort(row, descending=True, stable=True).tolist() for row in scores]
    assert exposure.compute() == pytest.approx(gini.compute(), abs=1e-15)
    assert exposure.compute() == pytest.approx(
        [fam.exposure_gini(lists, 9, k, discount=None) for k in (2, 4)], abs=1e-12
    )


def test_aplt_of_elliot_and_tail_items():
    metric = R.APLT(2, torch.tensor([10, 5, 2, 1, 1]))
    assert metric.tail_items.tolist() == sorted(fam.elliot_short_head([10, 5, 2, 1, 1])[1])
    assert R.APLT(2, torch.tensor([0, 0, 0])).tail_items.tolist() == [1, 2]  # the first item heads, as Elliot


def test_elliot_hand_worked_case():
    """The training data of tests/peers/test_hand_worked.py: counts (3, 2, 1, 0, 0), 4 training
    users, histories {0, 1}, {0}, {2}, relevant {2, 3}, {1, 3}, {}; the lists at k = 3 leave the
    history out, as the ranking with the history excluded does: [2, 3, 4], [1, 4], [0, 1, 3]."""
    counts = torch.tensor([3.0, 2, 1, 0, 0])
    ids = [[2, 3, 4], [1, 4], [0, 1, 3]]
    lists = R.RankedItems(torch.tensor([[2, 3, 4], [1, 4, -1], [0, 1, 3]]))
    relevance = torch.tensor([[0.0, 0, 1, 1, 0], [0, 1, 0, 1, 0], [0, 0, 0, 0, 0]])
    history = R.ItemIds(torch.tensor([[0, 1], [0, -1], [2, -1]]))
    log3 = math.log2(3)
    epc = R.EPC(3, counts, 4)
    epc.update((lists, relevance, history))
    want_a = (0.75 / 1 + 1.0 / log3) / (1 + 1 / log3 + 1 / 2)  # items 2 (1 - 1/4) and 3 (unseen: 1) relevant
    want_b = (0.5 / 1) / (1 + 1 / log3)  # item 1 (1 - 2/4) relevant; user C has no relevant item
    assert epc.compute() == pytest.approx([(want_a + want_b) / 2], abs=1e-12)
    rsp, reo = R.PopRSP(3, counts), R.PopREO(3, counts)
    for metric in (rsp, reo):
        metric.update((lists, relevance, history))
    head, tail = 3 / 3, 5 / 8  # recommended head 0+1+2 of 0+1+2 available, tail 3+1+1 of 3+3+2
    assert rsp.compute() == pytest.approx([abs(head - tail) / (head + tail)], abs=1e-12)
    head, tail = 1 / 1, 2 / 3  # relevant hits head 0+1 of 0+1, tail 2+0 of 2+1 (outside the history)
    assert reo.compute() == pytest.approx([abs(head - tail) / (head + tail)], abs=1e-12)
    histories = [{0, 1}, {0}, {2}]
    relevances = [{2: 1, 3: 1}, {1: 1, 3: 1}, {}]
    assert reo.compute()[0] == pytest.approx(fam.pop_reo(ids, relevances, histories, 3, {0, 1}, {2, 3, 4}), abs=1e-12)
    assert rsp.compute()[0] == pytest.approx(fam.pop_rsp(ids, histories, 3, {0, 1}, {2, 3, 4}), abs=1e-12)


def test_cosine_of_a_zero_vector_follows_scikit_learn():
    from sklearn.metrics.pairwise import cosine_distances

    features = np.array([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.5, -2.0]])
    metric = R.IntraListDiversity(4, torch.tensor(features), per_user=True)
    metric.update((torch.tensor([[4.0, 3, 2, 1]]), torch.zeros(1, 4)))
    distances = cosine_distances(features)
    want = np.mean([distances[i, j] for i in range(4) for j in range(i + 1, 4)])
    assert metric.compute() == pytest.approx([want], abs=1e-12)


def test_two_models_without_targets_and_with_none():
    a = torch.tensor(_rng.random((4, 6)))
    b = torch.tensor(_rng.random((4, 6)))
    lists_a = [torch.argsort(row, descending=True, stable=True).tolist() for row in a]
    lists_b = [torch.argsort(row, descending=True, stable=True).tolist() for row in b]
    want = np.mean([fam.rank_biased_overlap(x, y, 3) for x, y in zip(lists_a, lists_b)])
    for output in ((a, b), (a, b, None), (a, b, torch.zeros(4, 6))):
        metric = R.RankBiasedOverlap(3)
        metric.update(output)
        assert metric.compute() == pytest.approx([want], abs=1e-12)
    exclude = torch.zeros(4, 6, dtype=torch.bool)
    exclude[:, 0] = True
    metric = R.Intersection(2)
    metric.update((a, b, None, exclude))
    cut = [[[i for i in row if i != 0] for row in lists] for lists in (lists_a, lists_b)]
    assert metric.compute() == pytest.approx([np.mean([fam.intersection(x, y, 2) for x, y in zip(*cut)])], abs=1e-12)


def test_identical_models_overlap_fully():
    scores = torch.tensor(_rng.random((5, 8)))
    rbo, intersection = R.RankBiasedOverlap([1, 4, 8]), R.Intersection([1, 4, 8])
    for metric in (rbo, intersection):
        metric.update((scores, scores))
        assert metric.compute() == pytest.approx([1.0, 1.0, 1.0], abs=1e-12)


def test_engine_scalars_of_item_group_exposure():
    from ignite.engine import Engine

    engine = Engine(lambda engine, batch: batch)
    R.ItemGroupExposure([2, 1], torch.tensor([0, 1, 1])).attach(engine, "exposure")
    state = engine.run([(torch.tensor([[0.9, 0.8, 0.0], [0.0, 0.9, 0.8]]), torch.zeros(2, 3))])
    assert state.metrics["exposure"] == [[0.5, 0.5], [0.25, 0.75]]
    assert state.metrics["exposure@2/item_group1"] == 0.75
    assert R.scalar_metric_names(engine) == [
        "exposure@1/item_group0",
        "exposure@1/item_group1",
        "exposure@2/item_group0",
        "exposure@2/item_group1",
    ]


def test_paired_takes_the_per_user_families():
    """Paired compares two models on any single-model per-user mean here (as on NDCG)."""
    a, b = torch.tensor(_rng.random((6, 9))), torch.tensor(_rng.random((6, 9)))
    labels = torch.as_tensor(DATA.labels[:6], dtype=torch.float32)
    metric = R.IntraListDiversity([2, 4], _tensor(FEATURES), per_user=True)
    values = []
    for scores in (a, b):
        metric.reset()
        metric.update((scores, labels))
        values.append(metric.per_user().numpy())
    comparison = R.Paired(R.IntraListDiversity([2, 4], _tensor(FEATURES)))
    comparison.update((a, b, labels))
    for j, result in enumerate(comparison.compute()):
        assert result.p_value == pytest.approx(stats.ttest_rel(values[0][:, j], values[1][:, j]).pvalue, abs=1e-10)


def test_paired_refuses_the_two_model_metrics():
    for metric in (R.RankBiasedOverlap(2), R.Intersection(2)):
        with pytest.raises(TypeError, match="compares two models itself"):
            R.Paired(metric)


# --- group_gap ----------------------------------------------------------------------------------------
def _welch(high, low, level=LEVEL):
    test = stats.ttest_ind(high, low, equal_var=False)
    return test.pvalue, tuple(test.confidence_interval(level)), test.df


@pytest.mark.parametrize("level", [0.9, 0.95])
def test_group_gap_is_welch_of_the_extreme_groups(level):
    rng = np.random.default_rng(5)
    scores = torch.tensor(rng.random((60, 30)))
    labels = torch.tensor((rng.random((60, 30)) < 0.2).astype(np.float32))
    groups = torch.tensor(rng.integers(0, 3, size=60))
    metric = R.NDCG([3, 10], num_groups=3, per_user=True)
    metric.update((scores, labels, R.UserGroups(groups)))
    values = metric.per_user().numpy()
    gaps = R.group_gap(metric, level)
    for j, gap in enumerate(gaps):
        means = [np.nanmean(values[groups.numpy() == g, j]) for g in range(3)]
        assert gap.high_group == int(np.argmax(means)) and gap.low_group == int(np.argmin(means))
        high = values[groups.numpy() == gap.high_group, j]
        low = values[groups.numpy() == gap.low_group, j]
        high, low = high[~np.isnan(high)], low[~np.isnan(low)]
        p_value, interval, df = _welch(high, low, level)
        assert gap.gap == pytest.approx(high.mean() - low.mean(), abs=1e-12)
        assert gap.ratio == pytest.approx(high.mean() / low.mean(), rel=1e-12)
        assert gap.p_value == pytest.approx(p_value, abs=1e-10)
        assert gap.confidence_interval == pytest.approx(interval, abs=1e-10)
        assert gap.df == pytest.approx(df, rel=1e-10)
        assert gap.num_users == (len(high), len(low))


def test_group_gap_of_ranking_metrics_and_families():
    rng = np.random.default_rng(6)
    scores = torch.tensor(rng.random((40, 12)))
    labels = torch.tensor((rng.random((40, 12)) < 0.3).astype(np.float32))
    groups = R.UserGroups(torch.tensor(rng.integers(0, 2, size=40)))
    ranking = R.RankingMetrics(5, metrics=["ndcg", "recall"], num_groups=2)
    ranking.update((scores, labels, groups))
    result = R.group_gap(ranking)
    assert set(result) == {"ndcg@5", "recall@5"} and isinstance(result["ndcg@5"], R.GroupGap)
    ild = R.IntraListDiversity([2, 5], torch.tensor(rng.normal(size=(12, 3))), num_groups=2, per_user=True)
    ild.update((scores, labels, groups))
    values = ild.per_user().numpy()
    for j, gap in enumerate(R.group_gap(ild)):
        sides = [values[groups.ids.numpy() == g, j] for g in (gap.high_group, gap.low_group)]
        assert gap.p_value == pytest.approx(_welch(*sides)[0], abs=1e-10)


def test_group_gap_refuses_what_it_cannot_compare():
    with pytest.raises(TypeError, match="metric"):
        R.group_gap(R.ItemCoverage(2))
    with pytest.raises(ValueError, match="num_groups"):
        R.group_gap(R.NDCG(2))
    metric = R.NDCG(2, num_groups=3)
    metric.update((torch.rand(3, 4), torch.ones(3, 4), R.UserGroups(torch.tensor([1, 1, 1]))))
    with pytest.raises(NotComputableError, match="two groups"):
        R.group_gap(metric)
    with pytest.raises(ValueError, match="level"):
        R.group_gap(metric, 1.5)
    # a group of one user: the gap is there, the interval is not
    metric.update((torch.rand(1, 4), torch.ones(1, 4), R.UserGroups(torch.tensor([2]))))
    [gap] = R.group_gap(metric)
    assert math.isnan(gap.p_value) and all(math.isnan(v) for v in gap.confidence_interval)


# --- The meta device: every update runs without reading a value ---------------------------------------
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize(
    "prediction,exclude,target",
    [("scores", "dense", "dense"), ("scores", "ids", "coo"), ("ranked", "coo", "ids"), ("ranked", "dense", "dense")],
)
def test_meta_device_update_reads_no_value(name, prediction, exclude, target):
    spec = SPECS[name]
    metric = spec.build(device="meta") if not spec.per_user_mean else spec.build(device="meta", num_groups=3)
    for batch in batches_of(name, target, prediction, exclude, "tuple", device="meta", groups=spec.per_user_mean):
        metric.update(batch)
    state = [getattr(metric, key) for key in metric._state_dict_all_req_keys]
    assert all(value.device.type == "meta" for value in state)


# --- Bad input: refused by name, the state unchanged ----------------------------------------------------
def _state(metric):
    return {key: getattr(metric, key).clone() for key in metric._state_dict_all_req_keys}


_SCORES = torch.as_tensor(DATA.scores[:3], dtype=torch.float32)
_LABELS = torch.as_tensor(DATA.labels[:3], dtype=torch.float32)
_MASK = torch.as_tensor(DATA.excluded[:3])
_NAN_SCORES = _SCORES.clone()
_NAN_SCORES[0, 1] = float("nan")
_NAN_LABELS = _LABELS.clone()
_NAN_LABELS[1, 2] = float("nan")
BAD_UPDATES = {
    "NaN scores": (
        lambda one, two: (_NAN_SCORES, one[1], _MASK) if not two else (_NAN_SCORES, _SCORES, _LABELS, _MASK),
        ValueError,
        "NaN",
    ),
    "wrong width": (
        lambda one, two: (
            (torch.rand(3, 8), torch.rand(3, 8), _MASK[:, :8]) if not two else (torch.rand(3, 8), torch.rand(3, 8))
        ),
        ValueError,
        "8",
    ),
    "id out of range": (
        lambda one, two: (
            (R.RankedItems(torch.tensor([[0, 9], [1, 2], [3, 4]])), _LABELS, _MASK)
            if not two
            else (R.RankedItems(torch.tensor([[0, 9], [1, 2], [3, 4]])), _SCORES)
        ),
        ValueError,
        "y_pred",
    ),
    "not a tuple": (lambda one, two: _SCORES, TypeError, "tuple"),
}
RELEVANCE_METRICS = {
    "serendipity",
    "serendipity_threshold",
    "epc",
    "epc_geometric_all_users",
    "efd",
    "efd_uniform",
    "pop_reo",
}


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("case", sorted(BAD_UPDATES) + ["NaN labels"])
def test_bad_updates_leave_the_state_unchanged(name, case):
    spec = SPECS[name]
    metric = spec.build()
    good = (_SCORES, _SCORES, _LABELS, _MASK) if spec.two_models else (_SCORES, _LABELS, _MASK)
    metric.update(good)
    before = _state(metric)
    if case == "NaN labels":
        if name not in RELEVANCE_METRICS:
            return
        output, error, message = (_SCORES, _NAN_LABELS, _MASK), ValueError, "NaN relevance"
    else:
        make, error, message = BAD_UPDATES[case]
        output = make(good, spec.two_models)
    with pytest.raises(error, match=re.escape(message)):
        metric.update(output)
    after = _state(metric)
    for key in before:
        assert torch.equal(before[key], after[key]), key
    assert_close(metric.compute(), _fresh(spec, good).compute(), 0.0, name)  # the bad update added nothing


def _fresh(spec, batch):
    metric = spec.build()
    metric.update(batch)
    return metric


def test_miscalibration_needs_the_history():
    metric = R.Miscalibration(2, CATEGORIES)
    with pytest.raises(ValueError, match="exclude"):
        metric.update((_SCORES, _LABELS))


def test_a_user_callable_distance_is_checked():
    metric = R.IntraListDiversity(3, _tensor(FEATURES), distance=lambda f: f.sum(2))
    with pytest.raises(ValueError, match="distance must return the pairwise distances"):
        metric.update((_SCORES, _LABELS))
    metric = R.IntraListDiversity(3, _tensor(FEATURES), distance=lambda f: [1.0])
    with pytest.raises(TypeError, match="distance must return a torch.Tensor"):
        metric.update((_SCORES, _LABELS))
    metric = R.IntraListDiversity(3, _tensor(FEATURES), distance=lambda f: torch.cdist(f, f) * float("nan"))
    with pytest.raises(ValueError, match="distance returned NaN"):
        metric.update((_SCORES, _LABELS))


@pytest.mark.parametrize(
    "make,error,message",
    [
        (lambda: R.IntraListDiversity(2, torch.rand(9)), ValueError, "item_features"),
        (lambda: R.IntraListDiversity(2, torch.tensor([[float("nan")]])), ValueError, "item_features"),
        (lambda: R.IntraListDiversity(2, torch.rand(9, 2), distance="jaccard"), ValueError, "distance"),
        (lambda: R.Miscalibration(2, [[0], [5]], num_categories=3), ValueError, "num_categories"),
        (lambda: R.Miscalibration(2, [[0], [-1]]), ValueError, "item_categories"),
        (lambda: R.Miscalibration(2, [[0], [1]], alpha=0.0), ValueError, "alpha"),
        (lambda: R.Miscalibration(2, [[0], [1]], alpha=1.0), ValueError, "alpha"),
        (lambda: R.Miscalibration(2, torch.tensor([[1.0, -1.0]])), ValueError, "item_categories"),
        (lambda: R.EPC(2, torch.tensor([5.0, 1.0]), num_users=3), ValueError, "num_users"),
        (lambda: R.EFD(2, torch.tensor([0.0, 0.0])), ValueError, "item_popularity"),
        (lambda: R.EPC(2, torch.tensor([1.0]), 2, rank_weight=("geometric", 1.0)), ValueError, "rank_weight"),
        (lambda: R.EPC(2, torch.tensor([1.0]), 2, rank_weight=lambda r: -r), ValueError, "rank_weight"),
        (lambda: R.APLT(2, torch.tensor([1.0]), pop_ratio=1.5), ValueError, "pop_ratio"),
        (lambda: R.ItemGroupExposure(2, torch.tensor([0, 3]), num_item_groups=2), ValueError, "num_item_groups"),
        (lambda: R.ItemGroupExposure(2, torch.tensor([0.0, 1.0])), TypeError, "item_groups"),
        (lambda: R.RankBiasedOverlap(2, patience=1.0), ValueError, "patience"),
        (lambda: R.RankBiasedOverlap(2, normalize="max"), ValueError, "normalize"),
        (lambda: R.Intersection(2, ref_k=0), ValueError, "ref_k"),
    ],
)
def test_bad_constructor_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_constructor_tensors_are_copied():
    features = torch.rand(4, 2)
    metric = R.IntraListDiversity(2, features)
    features[0] = 100.0
    assert metric.item_features.dtype == torch.float64 and float(metric.item_features[0, 0]) != 100.0


def test_catalog_must_match_the_constructor_tensors():
    metric = R.Serendipity(2, torch.tensor([1.0, 2, 3]))
    with pytest.raises(ValueError, match="item_popularity"):
        metric.update((torch.rand(2, 4), torch.zeros(2, 4)))
    metric = R.IntraListDiversity(2, torch.rand(3, 2))
    with pytest.raises(ValueError, match="item_features"):
        metric.update((torch.rand(2, 4), torch.zeros(2, 4)))
    metric = R.RankBiasedOverlap(2)
    with pytest.raises(ValueError, match="same catalog"):
        metric.update((torch.rand(2, 4), torch.rand(2, 5)))
    with pytest.raises(TypeError, match="y_pred_b"):
        metric.update((torch.rand(2, 4), [1, 2]))


def test_state_dict_resume():
    spec = SPECS["miscalibration"]
    batches = batches_of("miscalibration", "dense", "scores", "dense", "tuple")
    expected_value = run(spec.build(), batches)
    first = spec.build()
    first.update(batches[0])
    resumed = spec.build()
    resumed.load_state_dict(first.state_dict())
    for batch in batches[1:]:
        resumed.update(batch)
    assert resumed.compute() == expected_value
    with pytest.raises(ValueError, match="alpha"):
        R.Miscalibration(TOP_K, CATEGORIES, alpha=0.5).load_state_dict(first.state_dict())


# --- Two processes equal one ---------------------------------------------------------------------------
def _distributed_worker(local_rank, folder):
    import ignite.distributed as idist

    rank = idist.get_rank()
    rows = (0, 3) if rank == 0 else (3, DATA.users)
    results = {}
    for name, spec in SPECS.items():
        exclude = "coo" if spec.needs_exclusion or name in ("pop_rsp", "pop_reo") else "none"
        metric = spec.build(num_groups=3) if spec.per_user_mean else spec.build()
        for batch in batches_of(name, "dense", "scores", exclude, "tuple", rows=rows, groups=spec.per_user_mean):
            metric.update(batch)
        results[name] = {"compute": metric.compute()}
        if spec.per_user_mean:
            results[name]["interval"] = metric.confidence_interval()
            results[name]["groups"] = metric.compute_groups()
            results[name]["gap"] = [[g.gap, g.p_value] for g in R.group_gap(metric)]
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as handle:
        json.dump(results, handle)


@pytest.mark.slow
def test_two_processes_equal_one():
    import ignite.distributed as idist
    from test_distributed import free_port

    expected_results = {}
    for name, spec in SPECS.items():
        exclude = "coo" if spec.needs_exclusion or name in ("pop_rsp", "pop_reo") else "none"
        metric = spec.build(num_groups=3) if spec.per_user_mean else spec.build()
        for batch in batches_of(name, "dense", "scores", exclude, "tuple", groups=spec.per_user_mean):
            metric.update(batch)
        expected_results[name] = {"compute": metric.compute()}
        if spec.per_user_mean:
            expected_results[name]["interval"] = metric.confidence_interval()
            expected_results[name]["groups"] = metric.compute_groups()
            expected_results[name]["gap"] = [[g.gap, g.p_value] for g in R.group_gap(metric)]
    with tempfile.TemporaryDirectory() as folder:
        with idist.Parallel(backend="gloo", nproc_per_node=2, master_port=free_port()) as parallel:
            parallel.run(_distributed_worker, folder)
        for rank in range(2):
            with open(os.path.join(folder, f"rank{rank}.json")) as handle:
                got = json.load(handle)
            for name, values in expected_results.items():
                for key, value in values.items():
                    # k = 12 lists the whole catalog: every user has the same value, and the spread seen
                    # by the intervals and the gap's test is rounding noise
                    if key in ("interval", "gap"):
                        got[name][key], value = got[name][key][:3], value[:3]
                    assert_close(got[name][key], value, 1e-9, f"{name} {key} rank {rank}")


@pytest.mark.parametrize(
    "make",
    [
        lambda: R.ItemCoverage([2]),
        lambda: R.GiniIndex([2]),
        lambda: R.ShannonEntropy([2]),
        lambda: R.ExposureGini([2]),
    ],
)
def test_a_refused_first_batch_fixes_no_catalog_size(make):
    """Without num_items the catalog comes from the first batch: a refused one (NaN scores, 5
    items) set it, and the next valid batch of 4 items was refused for its width. Now the metric
    equals a fresh one on the valid batch; ItemCoverage against numpy (distinct top-2 items / 4)."""
    refused = torch.tensor([[0.1, float("nan"), 0.3, 0.2, 0.5]])
    scores = torch.tensor([[0.9, 0.1, 0.5, 0.2], [0.1, 0.2, 0.8, 0.7], [0.3, 0.9, 0.8, 0.1]])
    labels = torch.zeros(3, 4)
    metric = make()
    with pytest.raises(ValueError, match="NaN scores"):
        metric.update((refused, torch.zeros(1, 5)))
    metric.update((scores, labels))
    fresh = make()
    fresh.update((scores, labels))
    assert metric.compute() == fresh.compute()
    if isinstance(metric, R.ItemCoverage):
        top2 = np.argsort(-scores.numpy(), axis=1, kind="stable")[:, :2]
        assert metric.compute() == [len(np.unique(top2)) / 4]


def test_parity_of_two_groups_without_a_hit_is_zero_not_nan():
    """Both groups' P(g) at 0 (no relevant item in the top k, no item listed): std / mean is
    0 / 0; the groups fare alike, so 0 (the reference says so too), where it was a silent NaN."""
    popularity = torch.tensor([10, 9, 1, 1])  # head {0, 1}, tail {2, 3} (Elliot's rule)
    head, tail = {0, 1}, {2, 3}
    scores = torch.tensor([[0.1, 0.2, 0.3, 0.9], [0.1, 0.2, 0.9, 0.3]])  # top 1: item 3, item 2
    relevance = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]])  # neither top item is relevant
    lists = [[3, 2, 1, 0], [2, 3, 1, 0]]
    metric = R.PopREO(1, popularity)
    metric.update((scores, relevance))
    expected = fam.pop_reo(lists, [row.tolist() for row in relevance], [set(), set()], 1, head, tail)
    assert metric.compute() == [expected] == [0.0]
    empty = R.PopRSP(2, popularity)
    empty.update((R.RankedItems(torch.full((2, 2), -1)), torch.zeros(2, 4)))
    assert empty.compute() == [fam.pop_rsp([[], []], [set(), set()], 2, head, tail)] == [0.0]
