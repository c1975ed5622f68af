"""Score-based metrics under hostile input: AUC's error bound for every score dtype, AUC's target
rule, no autograd graph in any metric's state, chunked passes against references, and the peak
memory of one update."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

import ignite_recsys as R
from ignite_recsys._core import tuning

SCORE_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _auc(scores, labels, metric=None):
    metric = metric or R.AUC()
    metric.update((scores, labels))
    return metric.compute(), metric.error_bound()


# --- AUC: the bound holds for every score dtype --------------------------------------------------
def test_auc_float64_scores_closer_than_float32_precision():
    scores = torch.tensor([1 - 2e-9, 1 - 1e-9], dtype=torch.float64)  # one float32 value
    value, bound = _auc(scores, torch.tensor([0, 1]))
    assert bound > 0
    assert abs(value - 1.0) <= bound + 1e-12


def test_auc_float64_scores_equal_in_float32_distinct_buckets_state():
    # two float64 scores that round to the same float32: the bucket is marked mixed, not exact
    metric = R.AUC()
    scores = torch.tensor([0.5, 0.5 + 2**-40, 0.5, 0.5 + 2**-40], dtype=torch.float64)
    value, bound = _auc(scores, torch.tensor([0, 1, 0, 1]), metric)
    assert value == 0.5 and bound == 0.5  # exact AUC 1.0 is within the bound
    # the same values stored exactly: equal float64 scores are an exact tie
    value, bound = _auc(torch.tensor([0.5, 0.5], dtype=torch.float64), torch.tensor([0, 1]))
    assert (value, bound) == (0.5, 0.0)


def test_auc_huge_negative_float64_score_is_a_candidate():
    # -1e300 rounds to float32 -inf but is a finite score: it is ranked, not dropped
    scores = torch.tensor([-1e300, 0.5, -1e299, float("-inf")], dtype=torch.float64)
    labels = torch.tensor([1, 0, 0, 1])
    value, bound = _auc(scores, labels)
    expected = roc_auc_score([1, 0, 0], [-1e300, 0.5, -1e299])
    assert abs(value - expected) <= bound + 1e-12


def _random_scores(rng, n, dtype, kind):
    if kind == "discrete":
        values = rng.integers(0, 7, n) / 8.0
    elif kind == "continuous":
        values = rng.normal(size=n) * 10.0 ** rng.integers(-3, 4)
    else:  # levels a few float64 ulps apart, below float32 precision
        base = rng.normal(size=rng.integers(1, 6))
        values = base[rng.integers(0, len(base), n)] * (1 + rng.integers(0, 4, n) * 2.0**-40)
    return torch.tensor(values, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("dtype", SCORE_DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["discrete", "continuous", "beyond_float32"])
@pytest.mark.parametrize("bits", [10, 20])
def test_auc_within_bound_of_sklearn(dtype, kind, bits):
    rng = np.random.default_rng(abs(hash((str(dtype), kind, bits))) % 2**32)
    for _ in range(10):
        metric = R.AUC(resolution_bits=bits)
        all_scores, all_labels = [], []
        for _ in range(rng.integers(1, 4)):
            n = int(rng.integers(2, 300))
            scores = _random_scores(rng, n, dtype, kind)
            labels = torch.tensor(rng.integers(-2, 3, n))  # >= 1 positive, the rest (negatives too) negative
            metric.update((scores, labels))
            all_scores.append(scores.to(torch.float64).numpy())
            all_labels.append(labels.numpy() >= 1)
        truth = np.concatenate(all_labels)
        if truth.all() or not truth.any():
            continue
        expected = roc_auc_score(truth, np.concatenate(all_scores))
        value, bound = metric.compute(), metric.error_bound()
        assert abs(value - expected) <= bound + 1e-12
        if kind == "discrete" and bits == 20:  # eighths lie in different buckets
            assert bound == 0.0
        if bound == 0.0:
            assert value == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("dtype", SCORE_DTYPES, ids=str)
def test_update_leaves_inputs_untouched(dtype):
    scores = torch.tensor([-0.0, 0.25, -1.5, 0.0, 0.75], dtype=dtype)
    labels = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0])
    mask = torch.tensor([True, True, False, True, True])
    originals = [t.clone() for t in (scores, labels, mask)]
    for metric in (R.AUC(), R.MAE(), R.RMSE(), R.LogLoss(from_logits=True)):
        metric.update((scores, labels, R.Observed(mask)))
    for tensor, original in zip((scores, labels, mask), originals):
        assert torch.equal(tensor.view(torch.uint8), original.view(torch.uint8))  # bits: -0.0 stays -0.0


# --- AUC and GAUC: negative targets (-inf included) are negatives, NaN targets are errors -------
def test_auc_negative_targets_are_negatives():
    scores = torch.tensor([0.9, 0.8, 0.7, 0.3, 0.2])
    labels = torch.tensor([-1.0, 1.0, -5.0, 0.0, 2.0])
    value, bound = _auc(scores, labels)
    assert bound == 0.0
    assert value == pytest.approx(roc_auc_score(labels.numpy() >= 1, scores.numpy()), abs=1e-12)


def test_auc_minus_inf_targets_are_negatives():
    scores = torch.tensor([0.9, 0.8, 0.7, 0.3, 0.2])
    labels = torch.tensor([float("-inf"), 1.0, -5.0, float("-inf"), 2.0])
    value, bound = _auc(scores, labels)
    assert bound == 0.0
    assert value == pytest.approx(roc_auc_score(labels.numpy() >= 1, scores.numpy()), abs=1e-12)


@pytest.mark.parametrize("bad", [float("nan")])
def test_auc_nan_target_is_an_error_state_unchanged(bad):
    metric = R.AUC()
    metric.update((torch.tensor([0.1, 0.9]), torch.tensor([0.0, 1.0])))
    before = {name: getattr(metric, name).clone() for name in metric._state_dict_all_req_keys}
    with pytest.raises(ValueError, match="y contains NaN targets"):
        metric.update((torch.tensor([0.3, 0.4, 0.5]), torch.tensor([1.0, bad, 0.0])))
    for name, tensor in before.items():
        assert torch.equal(getattr(metric, name), tensor)
    # outside the mask it is never read
    metric.update((torch.tensor([0.3, 0.4]), torch.tensor([1.0, bad]), R.Observed(torch.tensor([True, False]))))


def test_gauc_negative_targets_and_nan_targets():
    scores = torch.tensor([[0.9, 0.8, 0.7, 0.3], [0.1, 0.2, 0.3, 0.4]])
    labels = torch.tensor([[-1.0, 1.0, -float("inf"), 0.0], [1.0, -2.0, 0.0, 1.0]])
    metric = R.GAUC(weighting="uniform")
    metric.update((scores, labels))
    expected = np.mean([roc_auc_score(labels[u].numpy() >= 1, scores[u].numpy()) for u in range(2)])
    assert metric.compute() == pytest.approx(expected, abs=1e-12)
    for bad in (float("nan"),):
        with pytest.raises(ValueError, match="y contains NaN relevance"):
            metric.update((scores, torch.tensor([[bad, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])))


# --- No autograd graph in any state -------------------------------------------------------------
def _all_metrics(num_items):
    popularity = torch.arange(num_items, dtype=torch.float32) + 1
    k = [1, 3]
    from ignite_recsys._registry import REGISTRY

    ranking = {
        entry.class_name: getattr(R, entry.class_name)(*([k] if entry.has_cutoff else []))
        for entry in REGISTRY.values()
    }  # every ranking metric of the registry
    return {
        **ranking,
        "RankingMetrics": R.RankingMetrics(k),
        "RecallAtFixedPrecision": R.RecallAtFixedPrecision(3),
        "ItemCoverage": R.ItemCoverage(k),
        "GiniIndex": R.GiniIndex(k),
        "ShannonEntropy": R.ShannonEntropy(k),
        "AveragePopularity": R.AveragePopularity(k, popularity),
        "TailPercentage": R.TailPercentage(k, popularity),
        "Novelty": R.Novelty(k, popularity),
        "GAUC": R.GAUC(),
        "AUC": R.AUC(resolution_bits=10),
        "LogLoss": R.LogLoss(),
        "MAE": R.MAE(),
        "RMSE": R.RMSE(),
        "IntraListDiversity": R.IntraListDiversity(k, torch.rand(num_items, 3)),
        "Serendipity": R.Serendipity(k, popularity),
        "EPC": R.EPC(k, popularity, num_items),
        "EFD": R.EFD(k, popularity),
        "MeanInvUserFreq": R.MeanInvUserFreq(k, popularity, num_items),
        "Miscalibration": _WithHistory(k, [[i % 3] for i in range(num_items)]),
        "RankBiasedEntropy": R.RankBiasedEntropy(k, [[i % 3] for i in range(num_items)]),
        "APLT": R.APLT(k, popularity),
        "ACLT": R.ACLT(k, popularity),
        "PopREO": R.PopREO(k, popularity),
        "PopRSP": R.PopRSP(k, popularity),
        "ExposureGini": R.ExposureGini(k),
        "MeanPopRank": R.MeanPopRank(k, popularity),
        "ItemGroupExposure": R.ItemGroupExposure(k, torch.arange(num_items) % 2),
        # two models: the labels serve as the second model's scores
        "RankBiasedOverlap": R.RankBiasedOverlap(k),
        "Intersection": R.Intersection(k),
    }


class _WithHistory(R.Miscalibration):
    """Miscalibration with a history (item 0) added to each (y_pred, y) update."""

    def update(self, output):
        history = torch.zeros(output[1].shape, dtype=torch.bool)
        history[:, 0] = True
        super().update((*output, history))


def test_every_metric_class_is_covered():
    from ignite.metrics import Metric

    classes = {
        name for name in R.__all__ if isinstance(getattr(R, name), type) and issubclass(getattr(R, name), Metric)
    }
    # Paired takes two models per update: tests/test_paired_streaming.py checks its state;
    # SampledMetrics takes test item ids: tests/test_sampled.py checks its state
    assert set(_all_metrics(5)) == classes - {"Paired", "SampledMetrics"}


@pytest.mark.parametrize("name", sorted(_all_metrics(5)))
def test_no_autograd_graph_in_state(name):
    metric = _all_metrics(6)[name]
    weights = torch.rand(4, 6, requires_grad=True)
    labels = (torch.rand(4, 6) < 0.5).float()
    labels[:, 0] = 1.0
    labels[:, 1] = 0.0
    for _ in range(20):
        scores = torch.sigmoid(weights * 2.0)  # a graph to the leaf, as a model's output
        metric.update((scores, labels))
        for attribute, value in vars(metric).items():
            if isinstance(value, torch.Tensor):
                assert value.grad_fn is None and not value.requires_grad, attribute
    assert weights.grad is None
    metric.compute()


# --- Chunked passes against references ----------------------------------------------------------
def _pointwise_reference(name, p, y):
    if name == "MAE":
        return np.abs(p - y).mean()
    if name == "RMSE":
        return math.sqrt(np.square(p - y).mean())
    q = np.clip(p, 1e-15, 1 - 1e-15)
    return float(np.mean(-(y * np.log(q) + (1 - y) * np.log1p(-q))))


@pytest.mark.parametrize("accelerator_path", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "long_strided_rows"])
@pytest.mark.parametrize("name", ["MAE", "RMSE", "LogLoss"])
def test_pointwise_chunks_match_reference(monkeypatch, name, layout, accelerator_path):
    if accelerator_path:  # the byte-budget pieces, made small so that there are many
        monkeypatch.setattr(tuning, "cpu_tuned", lambda device: False)
        monkeypatch.setattr(tuning, "ACCELERATOR_CHUNK", 1000)
    rng = np.random.default_rng(7)
    shape = {"contiguous": (3, 70, 1500), "transposed": (600, 500), "long_strided_rows": (2, 600_000)}[layout]
    p = torch.tensor(rng.random(shape))
    y = torch.tensor((rng.random(shape) < 0.3).astype(np.float32))
    mask = torch.tensor(rng.random(shape) < 0.8)
    if layout == "transposed":
        p, y, mask = p.t(), y.t(), mask.t()
    elif layout == "long_strided_rows":
        p, y, mask = p[:, ::2], y[:, ::2], mask[:, ::2]
    p[~mask] = float("nan")  # never read
    metric = getattr(R, name)()
    metric.update((p, y, R.Observed(mask)))
    keep = mask.numpy()
    expected = _pointwise_reference(name, p.numpy()[keep], y.numpy()[keep].astype(np.float64))
    assert metric.compute() == pytest.approx(expected, rel=1e-12)
    metric = getattr(R, name)()
    metric.update((p.nan_to_num(0.5), y))
    expected = _pointwise_reference(name, p.nan_to_num(0.5).numpy(), y.numpy().astype(np.float64))
    assert metric.compute() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("accelerator_path", [False, True])
def test_auc_chunks_match_sklearn(monkeypatch, accelerator_path):
    if accelerator_path:
        monkeypatch.setattr(tuning, "cpu_tuned", lambda device: False)
        monkeypatch.setattr(tuning, "ACCELERATOR_CHUNK", 5000)
    rng = np.random.default_rng(3)
    scores = torch.tensor(rng.integers(0, 1000, (500, 1300)) / 1000.0).t()  # float64, not contiguous
    labels = torch.tensor(rng.integers(0, 2, (500, 1300))).t()
    value, bound = _auc(scores, labels)
    assert bound == 0.0
    assert value == pytest.approx(roc_auc_score(labels.flatten().numpy(), scores.flatten().numpy()), abs=1e-12)


def _r_precision_reference(scores, labels, ties):
    values = []
    for s, y in zip(scores.astype(np.float64), labels >= 1):
        r = int(y.sum())
        if r == 0:
            continue
        order = sorted(range(len(s)), key=lambda i: (-s[i], i))
        if ties == "stable":
            values.append(sum(y[i] for i in order[:r]) / r)
            continue
        boundary = s[order[r - 1]]
        above, tied = s > boundary, s == boundary
        # expected relevant items among the r - |above| tied slots filled uniformly at random
        hits = y[above].sum() + (r - above.sum()) * y[tied].sum() / tied.sum()
        values.append(hits / r)
    return float(np.mean(values))


@pytest.mark.parametrize("accelerator_path", [False, True])
@pytest.mark.parametrize("ties", ["stable", "average"])
def test_r_precision_and_gauc_row_chunks(monkeypatch, ties, accelerator_path):
    monkeypatch.setattr(
        tuning, "piece_rows", lambda num_rows, row_bytes, device: 5
    )  # several rows a piece, a partial last one
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    if accelerator_path:
        monkeypatch.setattr(tuning, "cpu_tuned", lambda device: False)
        monkeypatch.setattr(tuning, "ACCELERATOR_CHUNK", 200)
    rng = np.random.default_rng(11)
    scores = rng.integers(0, 6, (37, 40)).astype(np.float32)
    labels = (rng.random((37, 40)) < 0.3).astype(np.float32)
    metric = R.RPrecision(ties=ties)
    metric.update((torch.tensor(scores), torch.tensor(labels)))
    assert metric.compute() == pytest.approx(_r_precision_reference(scores, labels, ties), abs=1e-12)
    gauc = R.GAUC(weighting="uniform")
    gauc.update((torch.tensor(scores), torch.tensor(labels)))
    defined = [u for u in range(37) if 0 < labels[u].sum() < 40]
    expected = np.mean([roc_auc_score(labels[u], scores[u]) for u in defined])
    assert gauc.compute() == pytest.approx(expected, abs=1e-12)


# --- Peak memory of one update ------------------------------------------------------------------
MEMORY_PROBE = r"""
import sys, os, torch
sys.path.insert(0, os.getcwd())
import ignite_recsys as R
B, N = 64, 200_000
g = torch.Generator().manual_seed(0)
scores = torch.rand(B, N, generator=g)
labels = (torch.rand(B, N, generator=g) < 20 / N).float()

def rss(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith(field))

for name, metric in [("AUC", R.AUC()), ("LogLoss", R.LogLoss()), ("MAE", R.MAE()),
                     ("RPrecision average", R.RPrecision(ties="average")), ("GAUC", R.GAUC())]:
    metric.update((scores[:2], labels[:2]))  # warm-up: the thread pool, the state
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # resets the peak resident set size to the current one
    base = rss("VmRSS:")
    metric.update((scores, labels))
    print(name, (rss("VmHWM:") - base) / scores.numel() / 4)
"""


@pytest.mark.slow
@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="needs Linux's peak-RSS reset")
def test_peak_memory_of_one_update_within_one_float32_copy():
    """Peak extra resident memory of one update (inputs already allocated) at most one (B, N)
    float32, with room to spare: the chunked passes need a few MiB (these updates needed 7 to 14
    copies before). glibc maps every buffer of 64 KiB or more afresh, so freed ones do not count."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE], capture_output=True, text=True, check=True, env=env, cwd=root
    )
    peaks = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in result.stdout.strip().splitlines()}
    assert len(peaks) == 5
    for name, multiple in peaks.items():
        assert multiple <= 1.0, (name, peaks)


@pytest.mark.parametrize("ties", ["stable", "average"])
@pytest.mark.parametrize("deepest, sorted_whole", [(60, False), (400, True)])
def test_r_precision_ranks_to_the_largest_relevant_count_on_cpu(monkeypatch, ties, deepest, sorted_whole):
    """On CPU a dense batch is ranked by the ranking step to its largest |R| where that is at most
    1/16 of the items (2,000 here: 125), else its rows are sorted whole; against the reference
    either way (scores with ties, a user without relevant items)."""
    from ignite_recsys._core import ranking

    monkeypatch.setattr(tuning, "OWN_DEPTH_SHARE", 1 / 16)
    calls, original = [], ranking.hits_at_own_depth
    monkeypatch.setattr(ranking, "hits_at_own_depth", lambda *args: calls.append(1) or original(*args))
    rng = np.random.default_rng(13)
    scores = rng.integers(0, 50, (9, 2_000)).astype(np.float32)
    labels = (rng.random((9, 2_000)) < 0.01).astype(np.float32)
    labels[2] = 0.0
    labels[4, rng.choice(2_000, deepest, replace=False)] = 1.0
    metric = R.RPrecision(ties=ties)
    metric.update((torch.tensor(scores), torch.tensor(labels)))
    assert metric.compute() == pytest.approx(_r_precision_reference(scores, labels, ties), abs=1e-12)
    assert bool(calls) == sorted_whole
