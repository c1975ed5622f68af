"""Core metrics against the numpy reference, the conventions table, the seeds and ignite 0.5.5."""

import numpy as np
import pytest
import torch
from ignite.engine import Engine
from ignite.exceptions import NotComputableError

import ignite_recsys as R
from conftest import CUTOFF_CLASSES, random_batch, run_metric
import harness as H
from references import candidate_metric_means, candidate_rankings, metric_means

TOP_K = [1, 2, 5, 10, 30]  # 30 > num_items in most cases below


def _split(scores, relevance, sizes):
    out, start = [], 0
    for size in sizes:
        out.append((scores[start : start + size], relevance[start : start + size]))
        start += size
    return out


@pytest.mark.parametrize("graded", [False, True])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("ignore_zero_hits", [True, False])
def test_every_metric_matches_numpy_reference_stable(rng, graded, ties, ignore_zero_hits):
    scores, relevance = random_batch(rng, 40, 17, graded=graded, ties=ties, zero_users=5)
    expected = metric_means(scores.numpy(), relevance.numpy(), TOP_K, ignore_zero_hits=ignore_zero_hits)
    batches = _split(scores, relevance, [7, 1, 20, 12])
    for name, cls in CUTOFF_CLASSES.items():
        got = run_metric(cls(TOP_K, ignore_zero_hits=ignore_zero_hits), batches)
        np.testing.assert_allclose(got, expected[name], rtol=0, atol=1e-12, err_msg=name)
    got = run_metric(R.RPrecision(ignore_zero_hits=ignore_zero_hits), batches)
    assert got == pytest.approx(expected["r_precision"], abs=1e-12)


@pytest.mark.parametrize("gain_function", ["exp_rank", "linear_rank"])
@pytest.mark.parametrize("ignore_zero_hits", [True, False])
@pytest.mark.parametrize("top_k", [[1, 5, 10], [1, 3]])  # groups of 16, of 64
def test_graded_ndcg_on_wide_catalog_uses_exact_ideal_ranking(rng, gain_function, ignore_zero_hits, top_k):
    """N >= 20 * depth: the ideal gains come from label group maxima taken in the relevance pass
    (plus the items after the last full group), and whether a user has a relevant item from
    those maxima; both must be exact."""
    scores, relevance = random_batch(rng, 12, 700, graded=True, relevant_share=0.05, zero_users=1)
    relevance[3, 690:] = 4  # the best labels sit in the partial last block
    relevance[4, :] = 0
    relevance[4, 650] = 2  # the only relevant item is in the partial last block
    expected = metric_means(
        scores.numpy(), relevance.numpy(), top_k, gain_kind=gain_function, ignore_zero_hits=ignore_zero_hits
    )
    metric = R.NDCG(top_k, gain_function=gain_function, ignore_zero_hits=ignore_zero_hits)
    got = run_metric(metric, _split(scores, relevance, [5, 7]))
    np.testing.assert_allclose(got, expected["ndcg"], rtol=0, atol=1e-12)


@pytest.mark.parametrize("graded", [False, True])
def test_every_metric_matches_enumerated_tie_average(rng, graded):
    """ties='average' equals the mean over every ordering of tied scores, at every cut-off."""
    scores, relevance = random_batch(rng, 30, 6, graded=graded, ties=True, relevant_share=0.4, zero_users=2)
    top_k = [1, 2, 3, 4, 6, 8]
    for ignore_zero_hits in (True, False):
        expected = metric_means(
            scores.numpy(), relevance.numpy(), top_k, ties="average", ignore_zero_hits=ignore_zero_hits
        )
        for name, cls in CUTOFF_CLASSES.items():
            got = run_metric(cls(top_k, ignore_zero_hits=ignore_zero_hits, ties="average"), [(scores, relevance)])
            np.testing.assert_allclose(got, expected[name], atol=1e-10, err_msg=name)
        got = run_metric(R.RPrecision(ignore_zero_hits=ignore_zero_hits, ties="average"), [(scores, relevance)])
        assert got == pytest.approx(expected["r_precision"], abs=1e-10)


@pytest.mark.parametrize("target", ["dense", "coo", "csr", "ids"])
@pytest.mark.parametrize("exclude", ["none", "dense", "ids"])
def test_tie_average_reads_the_tied_group_past_the_last_cut_off(rng, target, exclude):
    """ties='average' where the tied group at the last cut-off goes on past it (its size and
    relevant items are counted over the whole row), in every target and exclusion form, equals the
    mean over every ordering of the tied candidates."""
    scores, relevance = random_batch(rng, 24, 7, graded=True, ties=True, relevant_share=0.4, zero_users=1)
    excluded = rng.random((24, 7)) < 0.2
    top_k = [1, 3]
    sets = [set(np.nonzero(row)[0].tolist()) for row in excluded] if exclude != "none" else None
    candidates = [
        sorted((float(s) for i, s in enumerate(row) if sets is None or i not in sets[u]), reverse=True)
        for u, row in enumerate(scores.numpy())
    ]
    assert sum(len(c) > 3 and c[2] == c[3] for c in candidates) >= 3  # the case under test
    expected = candidate_metric_means(
        candidate_rankings(scores.numpy(), sets, ties="average"), relevance.numpy(), top_k
    )
    targets, exclusion = H.target_form(relevance.numpy(), target), H.exclude_form(excluded, exclude)
    batch = (scores, targets) if exclusion is None else (scores, targets, exclusion)
    for name, cls in CUTOFF_CLASSES.items():
        got = run_metric(cls(top_k, ties="average"), [batch])
        np.testing.assert_allclose(got, expected[name], atol=1e-10, err_msg=name)


def test_tie_average_first_hit_is_exact_in_large_tied_groups():
    """HitRate and MRR under ties='average' read P(first hit at slot x of a group of n tied items
    holding r relevant ones) = C(n - x, r - 1) / C(n, r): exact rational values (fractions), to
    a few ulps, also with 300,000 tied items after groups without a relevant item, where a ratio
    of lgamma terms of about n ln n lost 1e-9."""
    import math
    from fractions import Fraction

    n = 300_000
    rows = [  # (sizes of the tied groups, best first; relevant items in each)
        ([1, 1, 1, 5, n], [0, 0, 0, 0, 7]),
        ([4, n], [2, 3]),
        ([n], [1]),
        ([2, 3, n], [0, 0, 40]),
    ]
    width = max(sum(sizes) for sizes, _ in rows)
    scores = torch.full((len(rows), width), -math.inf, dtype=torch.float64)
    labels = torch.zeros(len(rows), width)
    for row, (sizes, relevant) in enumerate(rows):
        start = 0
        for group, (size, hits) in enumerate(zip(sizes, relevant)):
            scores[row, start : start + size] = float(len(sizes) - group)
            labels[row, start : start + hits] = 1.0
            start += size
    top_k = [1, 5, 10, 50]
    hit_rate = R.HitRate(top_k, relevance_threshold=1.0, ties="average")
    mrr = R.MRR(top_k, ties="average")
    for metric in (hit_rate, mrr):
        metric.update((scores, labels))
    expected_hr, expected_rr = [], []
    for k in top_k:
        hr_sum, rr_sum = Fraction(0), Fraction(0)
        for sizes, relevant in rows:
            first = next(group for group, hits in enumerate(relevant) if hits)  # earlier groups: no hit
            start, size, hits = sum(sizes[:first]), sizes[first], relevant[first]
            for slot in range(1, min(k - start, size) + 1):
                chance = Fraction(math.comb(size - slot, hits - 1), math.comb(size, hits))
                hr_sum += chance
                rr_sum += chance / (start + slot)
        expected_hr.append(float(hr_sum / len(rows)))
        expected_rr.append(float(rr_sum / len(rows)))
    np.testing.assert_allclose(hit_rate.compute(), expected_hr, rtol=1e-14, atol=0)
    np.testing.assert_allclose(mrr.compute(), expected_rr, rtol=1e-14, atol=0)


@pytest.mark.parametrize(
    "options",
    [
        dict(gain_function="linear_rank"),
        dict(gain_function="binary"),
        dict(gain_function="exp_rank_shifted", relevance_threshold=2.0),
        dict(relevance_threshold=2.5),
        dict(relevance_threshold=0.5),
    ],
)
def test_ndcg_gain_and_threshold_options(rng, options):
    scores, relevance = random_batch(rng, 30, 12, graded=True, ties=True)
    relevance = relevance * 0.75  # fractional grades: 0.75, 1.5, 2.25, 3
    kw = {"gain_kind": options.get("gain_function", "exp_rank")}
    threshold = options.get("relevance_threshold", 1.0)
    expected = metric_means(scores.numpy(), relevance.numpy(), TOP_K, threshold=threshold, **kw)
    got = run_metric(R.NDCG(TOP_K, **options), [(scores, relevance)])
    np.testing.assert_allclose(got, expected["ndcg"], atol=1e-12)
    got = run_metric(R.Recall(TOP_K, relevance_threshold=threshold), [(scores, relevance)])
    np.testing.assert_allclose(got, expected["recall"], atol=1e-12)


def test_callable_gain(rng):
    scores, relevance = random_batch(rng, 20, 9, graded=True)
    expected = metric_means(scores.numpy(), relevance.numpy(), TOP_K, gain_kind=lambda r: 3.0**r)
    got = run_metric(R.NDCG(TOP_K, gain_function=lambda r: 3.0**r), [(scores, relevance)])
    np.testing.assert_allclose(got, expected["ndcg"], atol=1e-12)


@pytest.mark.parametrize(
    "cls,option,reference_kw",
    [
        (R.MAP, "relevant", "map_norm"),
        (R.MAP, "hits", "map_norm"),
        (R.MAP, "min_k_relevant", "map_norm"),
        (R.Recall, "min_k_relevant", "recall_norm"),
        (R.Precision, "min_k_items", "precision_norm"),
    ],
)
def test_normalizations_match_reference(rng, cls, option, reference_kw):
    scores, relevance = random_batch(rng, 40, 13, ties=True, relevant_share=0.5, zero_users=3)
    name = {R.MAP: "map", R.Recall: "recall", R.Precision: "precision"}[cls]
    expected = metric_means(scores.numpy(), relevance.numpy(), TOP_K, **{reference_kw: option})[name]
    got = run_metric(cls(TOP_K, normalization=option), [(scores, relevance)])
    np.testing.assert_allclose(got, expected, atol=1e-12)


# --- The shared cases A-I of ../shared/reference/metric-conventions.md ------------------------
CASES = {
    "A": (3, [[4, 3, 2, 1]], [[0, 0, 1, 1]]),
    "B": (3, [[4, 3, 2, 1]], [[3, 2, 0, 1]]),
    "C": (2, [[5, 4, 3, 2, 1]], [[1, 0, 1, 1, 1]]),
    "D": (3, [[4, 3, 2, 1], [4, 3, 2, 1]], [[0, 0, 1, 1], [0, 0, 0, 0]]),
    "E": (2, [[3, 2, 2, 2, 1]], [[0, 0, 0, 1, 0]]),
    "F": (2, [[1, 1, 1, 1]], [[0, 0, 1, 1]]),
    "G": (10, [[4, 3, 2, 1]], [[0, 0, 1, 1]]),
    "H": (3, [[-1, -2, -3, -4]], [[0, 0, 1, 1]]),
    "I": (10, [[1.0] * 100], [[0] * 99 + [1]]),
}
# Rows of the table whose convention is this library's default (stable ties, skip empty users).
DEFAULT_ROWS = {
    "ndcg": ("ignite NDCG default", [0.3066, 0.9468, 0.6131, 0.3066, 0, 0, 0.5706, 0.3066, 0]),
    "recall": ("Elliot Recall", [0.5, 0.6667, 0.25, 0.5, 0, 0, 1, 0.5, 0]),
    "precision": ("Elliot Precision", [0.3333, 0.6667, 0.5, 0.3333, 0, 0, 0.2, 0.3333, 0]),
    "map": ("Recommenders map_at_k", [0.1667, 0.6667, 0.5, 0.1667, 0, 0, 0.4167, 0.1667, 0]),
    "mrr": ("Elliot MRR", [0.3333, 1, 1, 0.3333, 0, 0, 0.3333, 0.3333, 0]),
    "hit_rate": ("Elliot HR", [1, 1, 1, 1, 0, 0, 1, 1, 0]),
    "f1": ("Elliot F1", [0.4, 0.6667, 0.3333, 0.4, 0, 0, 0.3333, 0.4, 0]),
}


def _case(name):
    k, scores, relevance = CASES[name]
    return k, torch.tensor(scores, dtype=torch.float32), torch.tensor(relevance, dtype=torch.float32)


@pytest.mark.parametrize("metric", sorted(DEFAULT_ROWS))
def test_shared_cases_default_convention(metric):
    _, values = DEFAULT_ROWS[metric]
    for case, expected in zip("ABCDEFGHI", values):
        k, scores, relevance = _case(case)
        got = run_metric(CUTOFF_CLASSES[metric](k), [(scores, relevance)])
        assert got[0] == pytest.approx(expected, abs=5e-5), (metric, case)


def test_shared_cases_other_table_rows():
    rows = [  # (table row, constructor, values A..I)
        (
            "reference linear, empty users count 0",
            lambda k: R.NDCG(k, False, gain_function="linear_rank"),
            [0.3066, 0.895, 0.6131, 0.1533, 0, 0, 0.5706, 0.3066, 0],
        ),
        (
            "torchmetrics/sklearn NDCG tie-averaged",
            lambda k: R.NDCG(k, False, gain_function="linear_rank", ties="average"),
            [0.3066, 0.895, 0.6131, 0.1533, 0.2103, 0.5, 0.5706, 0.3066, 0.0454],
        ),
        (
            "RecBole NDCG binary (stable ties)",
            lambda k: R.NDCG(k, False, gain_function="binary"),
            [0.3066, 0.7654, 0.6131, 0.1533, 0, 0, 0.5706, 0.3066, 0],
        ),
        (
            "Elliot nDCG t=1",
            lambda k: R.NDCG(k, gain_function="exp_rank_shifted"),
            [0.3066, 0.9468, 0.6131, 0.3066, 0, 0, 0.5706, 0.3066, 0],
        ),
        (
            "Elliot nDCG t=0",
            lambda k: R.NDCG(k, gain_function=lambda r: 2 ** (r + 1) - 1),
            [0.3066, 0.9283, 0.6131, 0.3066, 0, 0, 0.5706, 0.3066, 0],
        ),
        ("ranx recall", lambda k: R.Recall(k, False), [0.5, 0.6667, 0.25, 0.25, 0, 0, 1, 0.5, 0]),
        (
            "rectorch-style recall min(k,|R|)",
            lambda k: R.Recall(k, normalization="min_k_relevant"),
            [0.5, 0.6667, 0.5, 0.5, None, None, 1, 0.5, 0],
        ),
        ("ranx precision", lambda k: R.Precision(k, False), [0.3333, 0.6667, 0.5, 0.1667, 0, 0, 0.2, 0.3333, 0]),
        (
            "torchmetrics adaptive_k",
            lambda k: R.Precision(k, False, normalization="min_k_items"),
            [0.3333, 0.6667, 0.5, 0.1667, 0, None, 0.5, None, 0],
        ),
        (
            "ranx map (|R|)",
            lambda k: R.MAP(k, False, normalization="relevant"),
            [0.1667, 0.6667, 0.25, 0.0833, 0, 0, 0.4167, 0.1667, 0],
        ),
        ("RecBole MAP min(k,|R|)", lambda k: R.MAP(k, False), [0.1667, 0.6667, 0.5, 0.0833, 0, None, None, 0.1667, 0]),
        (
            "torchmetrics MAP (hits)",
            lambda k: R.MAP(k, False, normalization="hits"),
            [0.3333, 1, 1, 0.1667, 0, None, 0.4167, None, 0],
        ),
        ("ranx mrr", lambda k: R.MRR(k, False), [0.3333, 1, 1, 0.1667, 0, 0, 0.3333, 0.3333, 0]),
        ("ranx hit_rate", lambda k: R.HitRate(k, False), [1, 1, 1, 0.5, 0, 0, 1, 1, 0]),
        ("ranx f1", lambda k: R.F1(k, False), [0.4, 0.6667, 0.3333, 0.2, 0, 0, 0.3333, 0.4, 0]),
    ]
    for label, make, values in rows:
        for case, expected in zip("ABCDEFGHI", values):
            if expected is None:  # that library's tie or k>n behaviour is not ours; see docs
                continue
            k, scores, relevance = _case(case)
            got = run_metric(make(k), [(scores, relevance)])[0]
            assert got == pytest.approx(expected, abs=5e-5), (label, case)
    for case, expected in zip("ABCDEFGHI", [0, 0.6667, 0.75, 0, 0, 0, 0, 0, 0]):  # ranx r-precision
        _, scores, relevance = _case(case)
        assert run_metric(R.RPrecision(ignore_zero_hits=False), [(scores, relevance)]) == pytest.approx(
            expected, abs=5e-5
        ), case


# --- The seed documents' own numbers --------------------------------------------------------
def test_seed_rectorch_examples():
    scores, truth = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]]), torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0]])
    recall = run_metric(R.Recall([2, 3], normalization="min_k_relevant"), [(scores, truth)])
    assert recall == pytest.approx([1.0, 0.66666667])
    assert run_metric(R.NDCG(2, gain_function="binary"), [(scores, truth)]) == pytest.approx([1.0])
    scores, truth = torch.tensor([[4.0, 3.0, 2.0, 1.0]]), torch.tensor([[0.0, 0.0, 1.0, 1.0]])
    assert run_metric(R.NDCG(3, gain_function="binary"), [(scores, truth)]) == pytest.approx([0.306573596])


def test_seed_ignite_doc_examples():
    y_pred = torch.tensor([[4.0, 2.0, 3.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    y_true = torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    got = run_metric(R.NDCG([1, 2, 3, 4]), [(y_pred, y_true)])
    assert [round(v, 2) for v in got] == [0.0, 0.39, 0.39, 0.65]  # doc: [0.0, 0.38..., 0.38..., 0.65...]
    assert str(got[1]).startswith("0.38") and str(got[3]).startswith("0.65")
    got = run_metric(R.NDCG([1, 2, 3, 4], ignore_zero_hits=False), [(y_pred, y_true)])
    assert str(got[1]).startswith("0.19") and str(got[3]).startswith("0.32") and got[0] == 0.0


def test_seed_notebook_ap_precision_ndcg():
    """Notebook 003: the ranked lists of distinct items, one relevant item (1): AP@5 with the
    notebook's normalization (number of hits) and P@5. Its first list repeats item 1 three times,
    which no ranking of distinct items can express, so it is left out here (see docs)."""
    lists = {(2, 1, 3, 4, 5): 0.5, (3, 2, 1, 4, 5): 1 / 3, (4, 2, 3, 1, 5): 0.25, (4, 2, 3, 5, 1): 0.2}
    for ranked, ap in lists.items():
        scores = torch.zeros(1, 6)
        for position, item in enumerate(ranked):
            scores[0, item] = 10.0 - position
        scores[0, 0] = -1.0  # item 0 is unused by the notebook
        truth = torch.zeros(1, 6)
        truth[0, 1] = 1
        assert run_metric(R.MAP(5, normalization="hits"), [(scores, truth)]) == pytest.approx([ap])
        assert run_metric(R.Precision(5), [(scores, truth)]) == pytest.approx([0.2])
    # ndcg([3,2,3,0,1,2,3,2]) = 0.935908621453514: relevance listed in ranked order, linear gain, top 10.
    relevance = torch.tensor([[3.0, 2, 3, 0, 1, 2, 3, 2]])
    scores = torch.arange(8, 0, -1, dtype=torch.float32).unsqueeze(0)
    got = run_metric(R.NDCG(10, gain_function="linear_rank"), [(scores, relevance)])
    assert got == pytest.approx([0.935908621453514], abs=1e-12)


# --- Drop-in parity with ignite 0.5.5 --------------------------------------------------------
@pytest.mark.parametrize("ignore_zero_hits", [True, False])
@pytest.mark.parametrize("gain_function", ["exp_rank", "linear_rank"])
@pytest.mark.parametrize("relevance_threshold", [1.0, 2.0, 0.5])
def test_ndcg_parity_with_ignite(rng, ignore_zero_hits, gain_function, relevance_threshold):
    from ignite.metrics.rec_sys import NDCG as IgniteNDCG

    top_k = [1, 3, 7, 20]
    batches = [random_batch(rng, n, 15, graded=True, zero_users=2) for n in (5, 9, 3)]
    args = (top_k, ignore_zero_hits, relevance_threshold, gain_function)
    ours, theirs = R.NDCG(*args), IgniteNDCG(*args)
    np.testing.assert_allclose(run_metric(ours, batches), run_metric(theirs, batches), atol=1e-6)


@pytest.mark.parametrize("ignore_zero_hits", [True, False])
def test_hit_rate_parity_with_ignite(rng, ignore_zero_hits):
    from ignite.metrics.rec_sys import HitRate as IgniteHitRate

    top_k = [1, 2, 5, 10]
    batches = [random_batch(rng, n, 15, graded=True, zero_users=2) for n in (5, 9, 3)]  # integer grades
    ours, theirs = R.HitRate(top_k, ignore_zero_hits), IgniteHitRate(top_k, ignore_zero_hits)
    np.testing.assert_allclose(run_metric(ours, batches), run_metric(theirs, batches), atol=1e-6)


def test_ignite_doc_example_through_engine():
    engine = Engine(lambda engine, batch: batch)
    R.NDCG(top_k=[1, 2, 3, 4]).attach(engine, "ndcg")
    R.HitRate(top_k=[1, 4]).attach(engine, "hr")
    y_pred = torch.tensor([[4.0, 2.0, 3.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    y_true = torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    metrics = engine.run([(y_pred, y_true)]).metrics
    assert metrics["ndcg"] == [metrics[f"ndcg@{k}"] for k in (1, 2, 3, 4)]
    assert metrics["ndcg@4"] == pytest.approx(0.6509, abs=1e-4)
    assert metrics["hr"] == [0.0, 1.0] and metrics["hr@1"] == 0.0 and metrics["hr@4"] == 1.0


# --- Streaming, RankingMetrics, results order --------------------------------------------------
def test_streaming_equals_one_update_for_any_split(rng):
    scores, relevance = random_batch(rng, 50, 40, graded=True, ties=True, zero_users=4)
    for name, cls in CUTOFF_CLASSES.items():
        whole = run_metric(cls(TOP_K, ignore_zero_hits=False), [(scores, relevance)])
        for sizes in ([1] * 50, [25, 25], [3, 30, 17]):
            parts = run_metric(cls(TOP_K, ignore_zero_hits=False), _split(scores, relevance, sizes))
            np.testing.assert_allclose(parts, whole, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("ties", ["stable", "average"])
def test_ranking_metrics_equal_individual_classes(rng, ties):
    scores, relevance = random_batch(rng, 30, 25, graded=True, ties=True, zero_users=3)
    batches = _split(scores, relevance, [10, 20])
    options = dict(ignore_zero_hits=False, relevance_threshold=2.0, ties=ties)
    combined = run_metric(
        R.RankingMetrics(
            TOP_K,
            metrics=list(CUTOFF_CLASSES) + ["r_precision"],
            gain_function="linear_rank",
            map_normalization="relevant",
            recall_normalization="min_k_relevant",
            precision_normalization="min_k_items",
            **options,
        ),
        batches,
    )
    singles = {
        "ndcg": R.NDCG(TOP_K, gain_function="linear_rank", **options),
        "hit_rate": R.HitRate(TOP_K, **options),
        "recall": R.Recall(TOP_K, normalization="min_k_relevant", **options),
        "precision": R.Precision(TOP_K, normalization="min_k_items", **options),
        "map": R.MAP(TOP_K, normalization="relevant", **options),
        "mrr": R.MRR(TOP_K, **options),
        "f1": R.F1(TOP_K, **options),
    }
    for name, metric in singles.items():
        assert run_metric(metric, batches) == [combined[f"{name}@{k}"] for k in TOP_K], name
    assert combined["r_precision"] == run_metric(R.RPrecision(**options), batches)


def test_ranking_metrics_default_set_and_engine_scalars(rng):
    scores, relevance = random_batch(rng, 8, 20)
    engine = Engine(lambda engine, batch: batch)
    R.RankingMetrics([10, 5]).attach(engine, "rank")
    metrics = engine.run([(scores, relevance)]).metrics
    names = [f"{m}@{k}" for m in ("ndcg", "hit_rate", "recall", "precision", "map", "mrr", "f1") for k in (5, 10)]
    assert all(f"rank/{name}" in metrics for name in names) and "rank/r_precision" not in metrics


def test_top_k_unsorted_input_returns_sorted_order(rng):
    scores, relevance = random_batch(rng, 10, 12)
    shuffled = run_metric(R.Recall([10, 1, 5]), [(scores, relevance)])
    ordered = run_metric(R.Recall([1, 5, 10]), [(scores, relevance)])
    assert shuffled == ordered and ordered == sorted(ordered)


def test_not_computable_without_counted_users():
    metric = R.NDCG(3)
    with pytest.raises(NotComputableError):
        metric.compute()
    metric.update((torch.rand(2, 5), torch.zeros(2, 5)))
    with pytest.raises(NotComputableError):
        metric.compute()


def test_stable_ties_at_top_k_boundary_heavy_ties():
    """All-equal scores: the lowest indices are the top k, exactly; one relevant item at index j."""
    items = 5000
    scores = torch.zeros(3, items)
    relevance = torch.zeros(3, items)
    relevance[0, 99] = relevance[1, 100] = relevance[2, 0] = 1
    got = run_metric(R.MRR([100], ignore_zero_hits=False), [(scores, relevance)])
    assert got == pytest.approx([(1 / 100 + 0 + 1) / 3])
    scores[:, 4000:] = float("inf")  # 1000 items at +inf come first, in index order
    relevance[1, 4099] = 1
    got = run_metric(R.HitRate([100], ignore_zero_hits=False), [(scores, relevance)])
    assert got == pytest.approx([1 / 3])
