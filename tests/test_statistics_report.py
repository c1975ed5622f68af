"""Report (models × metrics table with significance markers) against hand-written strings,
numpy/scipy intervals and scipy paired t-tests with a numpy Holm correction."""

import numpy as np
import pytest
import torch
from scipy import stats as sps

import ignite_recsys as R
from ignite_recsys.data import IdMap


def _holm(p):
    p = np.asarray(p, dtype=float)
    m = len(p)
    order = np.argsort(p)
    out, running = np.empty(m), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


SUMMARY = {
    "BPR": {"ndcg@10": (0.3, (0.28, 0.32)), "recall@10": (0.25, (0.2, 0.3))},
    "Pop_2": {"ndcg@10": (0.2, (0.19, 0.21)), "recall@10": (0.26, (0.25, 0.27))},
}


def test_markdown_of_summaries_exact():
    report = R.Report(SUMMARY, digits=3)
    assert report.to_markdown() == (
        "| Model | ndcg@10 | recall@10 |\n"
        "|:--|--:|--:|\n"
        "| BPR | **0.300** ± 0.020 | 0.250 ± 0.050 |\n"
        "| Pop_2 | 0.200 ± 0.010 | **0.260** ± 0.010 |\n"
        "\n"
        "Mean ± half-width of the 95% confidence interval; bold: best per column."
    )


def test_latex_of_summaries_exact_with_lower_is_better():
    report = R.Report(SUMMARY, digits=2, lower_is_better=["recall@10"])
    assert report.to_latex(label="tab:res") == (
        "\\begin{table}\n\\centering\n"
        "\\caption{Mean $\\pm$ half-width of the 95\\% confidence interval; bold: best per column (the lowest for "
        "recall@10).}\n"
        "\\label{tab:res}\n"
        "\\begin{tabular}{lrr}\n\\toprule\n"
        "Model & ndcg@10 & recall@10 \\\\\n\\midrule\n"
        "BPR & \\textbf{0.30} $\\pm$ 0.02 & \\textbf{0.25} $\\pm$ 0.05 \\\\\n"
        "Pop\\_2 & 0.20 $\\pm$ 0.01 & 0.26 $\\pm$ 0.01 \\\\\n"
        "\\bottomrule\n\\end{tabular}\n\\end{table}"
    )


def _per_user(seed=3, users=40):
    rng = np.random.default_rng(seed)
    base = rng.random((users, 2))
    return {
        "base": {"a": base[:, 0], "b": base[:, 1]},
        "better": {
            "a": base[:, 0] + 0.1 + 0.05 * rng.standard_normal(users),
            "b": base[:, 1] + 0.01 * rng.standard_normal(users),
        },
        "worse": {
            "a": base[:, 0] - 0.2 + 0.05 * rng.standard_normal(users),
            "b": base[:, 1] - 0.003 + 0.2 * rng.standard_normal(users),
        },
    }


def test_markers_match_scipy_and_holm():
    values = _per_user()
    report = R.Report(values, baseline="base")
    keys = [(m, c) for m in ("better", "worse") for c in ("a", "b")]
    raw = [sps.ttest_rel(values[m][c], values["base"][c]).pvalue for m, c in keys]
    holm = _holm(raw)
    assert sorted(report.tests) == sorted(keys)
    expected = {}
    for (m, c), p in zip(keys, holm):
        assert report.adjusted_p_values[m, c] == pytest.approx(p, rel=1e-9)
        diff = np.mean(values[m][c] - values["base"][c])
        expected[m, c] = ("†" if diff > 0 else "‡") if p < 0.05 else ""
        assert report.marker(m, c) == expected[m, c]
    assert {mark for mark in expected.values()} == {"†", "‡", ""}  # the case exercises each marker
    assert report.marker("base", "a") == ""
    # the rendered cells carry them, and the caption says what they mean
    text = report.to_markdown()
    for (m, c), mark in expected.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| {m} |"))
        cell = row.split(" | ")[1 + ["a", "b"].index(c)]
        assert cell.split(" ± ")[0].endswith(mark) if mark else not any(x in cell for x in "†‡")
    assert "than base (paired t-test on the users both models count, Holm-adjusted p < 0.05 over 4 comparisons)" in text


def test_interval_cells_match_scipy():
    values = _per_user()
    values["base"]["a"][[3, 7]] = np.nan  # users not counted
    report = R.Report(values)
    kept = values["base"]["a"][~np.isnan(values["base"]["a"])]
    low, high = sps.t.interval(0.95, len(kept) - 1, loc=kept.mean(), scale=sps.sem(kept))
    row = report.to_markdown().splitlines()[2]
    assert row.startswith(f"| base | {kept.mean():.4f} ± {(high - low) / 2:.4f} |")


def test_from_metrics_with_per_user():
    torch.manual_seed(0)
    relevance = (torch.rand(60, 30) < 0.2).float()
    metrics, rows = {}, {}
    for model, noise in (("A", 0.5), ("B", 3.0)):
        scores = relevance + noise * torch.randn(60, 30)
        metrics[model] = {"ndcg@3": R.NDCG([1, 3], per_user=True), "recall@3": R.Recall(3, per_user=True)}
        ranking = R.RankingMetrics(3, metrics=["ndcg"], per_user=True)
        for metric in [*metrics[model].values(), ranking]:
            metric.update((scores, relevance))
        metrics[model]["ndcg@3 (rm)"] = ranking.per_user()["ndcg@3"]
        rows[model] = {
            "ndcg@3": metrics[model]["ndcg@3"].per_user()[:, 1].numpy(),
            "recall@3": metrics[model]["recall@3"].per_user()[:, 0].numpy(),
        }
    report = R.Report(metrics, baseline="B")
    for column in ("ndcg@3", "recall@3"):
        a, b = rows["A"][column], rows["B"][column]
        kept = ~(np.isnan(a) | np.isnan(b))
        assert report.tests["A", column].p_value == pytest.approx(sps.ttest_rel(a[kept], b[kept]).pvalue, rel=1e-9)
        assert report.tests["A", column].num_users == kept.sum()
    assert report.tests["A", "ndcg@3"].p_value == report.tests["A", "ndcg@3 (rm)"].p_value
    assert "†" in report.to_markdown()


def test_bad_arguments():
    with pytest.raises(ValueError, match="baseline"):
        R.Report(SUMMARY, baseline="nope")
    with pytest.raises(TypeError, match="results"):
        R.Report([])
    with pytest.raises(ValueError, match="low <= mean <= high"):
        R.Report({"A": {"x": (0.5, (0.6, 0.7))}})
    with pytest.raises(ValueError, match="alpha"):
        R.Report(SUMMARY, alpha=5)
    with pytest.raises(ValueError, match="lower_is_better"):
        R.Report(SUMMARY, lower_is_better=["mrr"])
    with pytest.raises(ValueError, match="k must"):
        R.Report({"A": {"ndcg": R.NDCG([1, 3], per_user=True)}})


def test_statistics_page_report_example_prints_its_table(capsys):
    import pathlib
    import re

    page = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "statistics.md").read_text()
    codes = re.findall(r"```python\n(.*?)```", page, re.S)
    shown = re.findall(r"```text\n(.*?)```", page, re.S)
    namespace = {}
    exec(compile(codes[0], "statistics.md", "exec"), namespace)
    capsys.readouterr()
    exec(compile(codes[1], "statistics.md", "exec"), namespace)
    assert capsys.readouterr().out == shown[1]
    # the marker agrees with the worked example's Holm-adjusted p-values (0.033 and 0.27)
    assert "**0.3529**† ± 0.0156" in shown[1] and "0.2835** ± 0.0117 |" in shown[1]


def test_a_whole_row_from_a_metric_or_an_evaluation_result():
    """A metric (or an evaluate() result) stands for its whole row; column names of any case pick
    a RankingMetrics' values. Means and intervals against numpy/scipy on the per-user values."""
    import scipy.stats
    import torch

    import ignite_recsys as R

    generator = torch.Generator().manual_seed(3)
    labels = (torch.rand(40, 15, generator=generator) < 0.3).int()
    models = {}
    for name in ("A", "B"):
        metric = R.RankingMetrics([5], metrics=["ndcg", "recall"], per_user=True)
        metric.update((torch.rand(40, 15, generator=generator), labels))
        models[name] = metric
    report = R.Report(models, baseline="B")
    assert report.columns == ["ndcg@5", "recall@5"]
    values = models["A"].per_user()["recall@5"].numpy()
    values = values[~np.isnan(values)]
    mean, low, high = report._summary["A", "recall@5"]
    expected = scipy.stats.t.interval(0.95, len(values) - 1, values.mean(), scipy.stats.sem(values))
    assert mean == pytest.approx(values.mean()) and (low, high) == pytest.approx(expected)
    assert report.tests["A", "ndcg@5"].p_value == pytest.approx(
        scipy.stats.ttest_rel(*(np.asarray(models[m].per_user()["ndcg@5"]) for m in "AB"), nan_policy="omit").pvalue
    )
    # a header in another case still reads the RankingMetrics' values
    upper = R.Report({"A": {"NDCG@5": models["A"]}, "B": {"NDCG@5": models["B"]}})
    assert upper._summary["A", "NDCG@5"] == report._summary["A", "ndcg@5"]
    # a metric without per-user values gives its streamed means and intervals
    plain = R.NDCG([5, 10])
    plain.update((torch.rand(40, 15, generator=generator), labels))
    row = R.Report({"C": plain})
    assert row.columns == ["ndcg@5", "ndcg@10"]
    assert [row._summary["C", c][0] for c in row.columns] == pytest.approx(plain.compute())
    intervals = [bound for c in row.columns for bound in row._summary["C", c][1:]]
    assert intervals == pytest.approx([bound for pair in plain.confidence_interval() for bound in pair])


# --- pairing users -------------------------------------------------------------------------------
def _ndcg_with_ids(scores, labels, ids, batch=16, **options):
    """NDCG@5 per user, the users given in ``ids`` order, in batches of ``batch``."""
    metric = R.NDCG([5], per_user=True, **options)
    for start in range(0, len(ids), batch):
        rows = slice(start, start + batch)
        metric.update((scores[rows], labels[rows], R.UserIds(ids[rows])))
    return metric


def _models(users=30, seed=0):
    rng = np.random.default_rng(seed)
    labels = torch.tensor(rng.random((users, 12)) < 0.3).float()
    a = torch.tensor(rng.random((users, 12))) + labels  # a model better than b
    b = torch.tensor(rng.random((users, 12)))
    return a, b, labels


def _scipy_ndcg_pvalue(a, b, labels, k=5):
    """scipy's paired t-test on per-user NDCG@k from numpy (stable descending order, linear gain)."""

    def ndcg(scores):
        order = np.argsort(-scores.numpy(), axis=1, kind="stable")[:, :k]
        gains = np.take_along_axis(labels.numpy(), order, 1)
        discounts = 1 / np.log2(np.arange(2, k + 2))
        ideal = -np.sort(-labels.numpy(), axis=1)[:, :k] @ discounts
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(ideal > 0, gains @ discounts / ideal, np.nan)

    return sps.ttest_rel(ndcg(a), ndcg(b), nan_policy="omit").pvalue


def test_report_pairs_users_by_id_whatever_the_update_order():
    a, b, labels = _models()
    users = len(labels)
    shuffled = torch.from_numpy(np.random.default_rng(1).permutation(users))
    model = _ndcg_with_ids(a[shuffled], labels[shuffled], shuffled, batch=7)
    baseline = _ndcg_with_ids(b, labels, torch.arange(users), batch=16)
    expected = _scipy_ndcg_pvalue(a, b, labels)
    for results in ({"A": {"ndcg@5": model}, "B": {"ndcg@5": baseline}}, {"A": model, "B": baseline}):
        assert R.Report(results, baseline="B").tests["A", "ndcg@5"].p_value == pytest.approx(expected, rel=1e-9)


def test_report_refuses_cells_whose_users_cannot_be_paired():
    """Each of these pairs the wrong users if paired by position: the Report raises, naming the
    cells, as paired_test does on the two metrics (which the Report did not consult)."""
    a, b, labels = _models()
    users = len(labels)
    model = _ndcg_with_ids(a, labels, torch.arange(users))
    others = _ndcg_with_ids(b, labels, torch.arange(users, 2 * users))  # as many users, other ids
    reversed_ids = torch.arange(users).flip(0)
    no_ids = R.NDCG([5], per_user=True)
    no_ids.update((b[reversed_ids], labels[reversed_ids]))  # the baseline's users in reverse order
    plain = no_ids.per_user()[:, 0]
    for baseline, message in (
        (others, "hold different users"),
        (no_ids, "come with user ids and b's do not"),
        (plain, "come with user ids and b's do not"),
    ):
        for results in ({"A": {"ndcg@5": model}, "B": {"ndcg@5": baseline}}, {"A": model, "B": baseline}):
            if not isinstance(results["B"], (R.NDCG, dict)):
                continue  # a whole row is a metric or a result
            with pytest.raises(ValueError, match=rf"results\['A'\]\['ndcg@5'\] \(a\) .*{message}"):
                R.Report(results, baseline="B")
        with pytest.raises(ValueError, match=message):
            R.paired_test(model, baseline)
    # without the baseline no test is made: the table itself is still given
    assert R.Report({"A": model, "B": others}).tests == {}


def test_report_of_evaluation_results_on_different_users_is_refused():
    table = R.Interactions(torch.arange(40).repeat_interleave(2), torch.arange(80) % 10)
    other = R.Interactions(torch.arange(40, 80).repeat_interleave(2), torch.arange(80) % 10)
    scores = torch.from_numpy(np.random.default_rng(2).random((80, 10)))
    options = dict(per_user=True, progress=False)
    a = R.evaluate(lambda users: scores[users], table, ["ndcg@5"], **options)
    b = R.evaluate(lambda users: scores[users].flip(1), table, ["ndcg@5"], **options)
    c = R.evaluate(lambda users: scores[users].flip(1), other, ["ndcg@5"], **options)
    assert R.Report({"A": a, "B": b}, baseline="B").tests["A", "ndcg@5"] == a.compare(b, "ndcg@5")
    for results in ({"A": a, "C": c}, {"A": a.to_report(), "C": c.to_report()}):
        with pytest.raises(ValueError, match=r"results\['A'\]\['ndcg@5'\] \(a\) .*hold different users"):
            R.Report(results, baseline="C")
    with pytest.raises(ValueError, match="hold different users"):
        R.paired_test(a, c, k="ndcg@5")
    with pytest.raises(ValueError, match="come with user ids"):
        R.paired_test(a, c.per_user()["ndcg@5"], k="ndcg@5")


def test_results_on_the_same_users_in_another_order_are_paired_by_user():
    """Two test tables numbering the same string users in other orders (a user map given in
    another order): compare, paired_test and Report pair each user with itself (scipy's
    ttest_rel on the per-user values put in one order by hand)."""
    rng = np.random.default_rng(3)
    names = np.array([f"user{i:02d}" for i in range(30)])
    users = np.repeat(names, 2)
    items = rng.integers(0, 12, size=60)
    items[1::2] = (items[::2] + 1 + rng.integers(0, 11, size=30)) % 12  # two distinct items a user
    table = R.Interactions(users, torch.from_numpy(items), num_items=12)
    shuffled = R.Interactions(users, torch.from_numpy(items), num_items=12, user_map=IdMap(names[rng.permutation(30)]))
    weights = {name: rng.random(12) for name in names}

    def model(test):
        ids = test.user_map.ids  # each user's scores follow its name, whatever its dense id
        return lambda batch: torch.from_numpy(np.stack([weights[str(ids[u])] for u in batch.tolist()]))

    options = dict(per_user=True, progress=False)
    a = R.evaluate(model(table), table, ["ndcg@5"], **options)
    b = R.evaluate(lambda batch: 1 - model(shuffled)(batch), shuffled, ["ndcg@5"], **options)
    assert list(a.user_ids) != list(b.user_ids)  # the orders differ: a pairing by position is wrong
    position = {str(user): i for i, user in enumerate(b.user_ids)}
    theirs = b.per_user()["ndcg@5"].numpy()[[position[str(user)] for user in a.user_ids]]
    expected = sps.ttest_rel(a.per_user()["ndcg@5"].numpy(), theirs).pvalue
    assert a.compare(b, "ndcg@5").p_value == pytest.approx(expected, rel=1e-12)
    assert R.paired_test(a, b, k="ndcg@5").p_value == pytest.approx(expected, rel=1e-12)
    assert R.Report({"A": a, "B": b}, baseline="B").tests["A", "ndcg@5"].p_value == pytest.approx(expected, rel=1e-12)


def test_per_user_values_pair_by_their_ids():
    values = np.array([0.5, 0.7, 0.9, 0.2])
    other = np.array([0.4, 0.5, 0.8, 0.3])
    ids = ["u1", "u2", "u3", "u4"]
    expected = sps.ttest_rel(values, other).pvalue
    assert R.paired_test(R.PerUserValues(values, ids), R.PerUserValues(other, ids)).p_value == pytest.approx(expected)
    # the same users in another order: b's values are taken in a's user order
    shuffled = [2, 0, 3, 1]
    moved = R.PerUserValues(other[shuffled], [ids[i] for i in shuffled])
    assert R.paired_test(R.PerUserValues(values, ids), moved).p_value == pytest.approx(expected, rel=1e-12)
    flips = R.paired_test(R.PerUserValues(values, ids), moved, method="randomization")
    assert flips == R.paired_test(values, other, method="randomization")
    with pytest.raises(ValueError, match="different users"):  # a repeated id cannot be put in order
        R.paired_test(
            R.PerUserValues(values, ["u1", "u1", "u2", "u3"]), R.PerUserValues(other, ["u2", "u1", "u1", "u3"])
        )
    with pytest.raises(ValueError, match="different users"):  # another user (4.5)
        R.paired_test(R.PerUserValues(values, [1, 2, 3, 4]), R.PerUserValues(other, [4.5, 3, 2, 1]))
    with pytest.raises(ValueError, match="one user id per value"):
        R.PerUserValues(values, ids[:3])
    with pytest.raises(ValueError, match="1-D"):
        R.PerUserValues(values.reshape(2, 2), [[1, 2], [3, 4]])


def test_user_ids_are_compared_exactly_whatever_their_type():
    # numpy compares int64 with float64 as floats: 2**53 + 1 as an integer equalled 2**53 as a
    # float, and a's users were paired with b's others. Integer-valued float ids beside integers
    # are compared as integers; text beside numbers is refused naming both kinds.
    big = 2**53
    values, other = np.array([0.9, 0.1, 0.5, 0.3]), np.array([0.2, 0.8, 0.4, 0.35])
    ids = np.array([big, big + 1, big + 2, big + 3], dtype=np.int64)
    moved = np.array([big + 1, big, big + 3, big + 2], dtype=np.int64)
    exact = [list(moved).index(user) for user in ids]
    expected = sps.ttest_rel(values, other[exact]).pvalue
    a = R.PerUserValues(values, ids)
    assert R.paired_test(a, R.PerUserValues(other, moved)).p_value == pytest.approx(expected, rel=1e-12)
    # the same ids as float64 are no longer those users (2**53 + 1 rounds to 2**53): refused
    rounded = R.PerUserValues(other, moved.astype(np.float64))
    with pytest.raises(ValueError, match="different users"):
        R.paired_test(a, rounded)
    with pytest.raises(ValueError, match="different users"):
        R.Report({"A": {"ndcg@10": a}, "B": {"ndcg@10": rounded}}, baseline="B")
    # small integer-valued floats are the integers they hold, in any order
    small = R.PerUserValues(other[[1, 0, 3, 2]], [2.0, 1.0, 4.0, 3.0])
    expected = sps.ttest_rel(values, other).pvalue
    assert R.paired_test(R.PerUserValues(values, [1, 2, 3, 4]), small).p_value == pytest.approx(expected, rel=1e-12)
    assert R.paired_test(R.PerUserValues(values, torch.tensor([1, 2, 3, 4])), small).p_value == pytest.approx(
        expected, rel=1e-12
    )
    with pytest.raises(ValueError, match="different users"):  # 1.5 is no integer user
        R.paired_test(R.PerUserValues(values, [1, 2, 3, 4]), R.PerUserValues(other, [1.5, 2.0, 3.0, 4.0]))
    # text beside integers: refused naming the kinds, also for text in an object array
    for text in (["1", "2", "3", "4"], np.array(["1", "2", "3", "4"], dtype=object)):
        with pytest.raises(ValueError, match="a's user ids are integers and b's are text"):
            R.paired_test(R.PerUserValues(values, [1, 2, 3, 4]), R.PerUserValues(other, text))
    # one list mixing integers and text (numpy would make them all text) or booleans: refused
    with pytest.raises(ValueError, match="user_ids mixes numbers and text"):
        R.PerUserValues(values, [1, "2", 3, 4])
    with pytest.raises(ValueError, match="user_ids mixes booleans and numbers"):
        R.PerUserValues(values, [True, 2, 3, 4])


def test_paired_test_of_a_metric_without_per_user_values_names_it():
    metric = R.NDCG([5])
    with pytest.raises(ValueError, match=r"a \(NDCG\) keeps no per-user values: build it with per_user=True"):
        R.paired_test(metric, [0.1, 0.2])


def test_columns_of_metrics_where_lower_is_better_are_bold_at_their_lowest():
    """fall_out (and the error and disparity metrics) are better lower: a table that bolded the
    highest fall-out marked the weaker model best. Inferred from the column's metric unless
    lower_is_better is given; means equal at the shown digits are all bold."""
    cells = {
        "strong": {
            "ndcg@5": (0.41, (0.40, 0.42)),
            "fall_out@5": (0.0098, (0.009, 0.0106)),
            "rmse": (0.81, (0.8, 0.82)),
        },
        "weak": {"ndcg@5": (0.20, (0.19, 0.21)), "fall_out@5": (0.1027, (0.1, 0.1054)), "rmse": (0.95, (0.9, 1.0))},
    }
    table = R.Report(cells).to_markdown()
    assert "| strong | **0.4100** ± 0.0100 | **0.0098** ± 0.0008 | **0.8100** ± 0.0100 |" in table
    assert "| weak | 0.2000 ± 0.0100 | 0.1027 ± 0.0027 | 0.9500 ± 0.0500 |" in table
    assert "bold: best per column (the lowest for fall_out@5, rmse)." in table
    # given explicitly, the list is the caller's: here none is lower-is-better
    assert (
        "| weak | 0.2000 ± 0.0100 | **0.1027** ± 0.0027 | **0.9500** ± 0.0500 |"
        in R.Report(cells, lower_is_better=()).to_markdown()
    )
    tied = R.Report({"a": {"ndcg@5": (0.50004, (0.4, 0.6))}, "b": {"ndcg@5": (0.50003, (0.4, 0.6))}}).to_markdown()
    assert "| a | **0.5000** ± 0.1000 |" in tied and "| b | **0.5000** ± 0.1000 |" in tied


def test_a_result_of_another_level_without_per_user_values_is_refused():
    """A result evaluated with level=0.9 and no per-user values carries 90% intervals: the table
    showed them under a caption saying 95%. Refused unless the Report's level is the result's;
    with it, the cell is scipy's 90% half-width."""
    rng = np.random.default_rng(1)
    scores = torch.from_numpy(rng.random((40, 12)))
    test = R.Interactions(torch.arange(40).repeat_interleave(2), torch.from_numpy(rng.integers(0, 12, 80)),
                          num_items=12, duplicates="max")  # fmt: skip
    result = R.evaluate(lambda users: scores[users], test, ["recall@3"], level=0.9, progress=False)
    with pytest.raises(ValueError, match=r"results\['A'\] holds intervals at level=0.9 .* Report shows level=0.95"):
        R.Report({"A": result})
    kept = R.evaluate(lambda users: scores[users], test, ["recall@3"], per_user=True, progress=False).per_user()
    values = kept["recall@3"].numpy()
    half = (values.std(ddof=1) / np.sqrt(len(values))) * sps.t.ppf(0.95, len(values) - 1)
    report = R.Report({"A": result}, level=0.9, digits=6)
    assert f"| A | **{values.mean():.6f}** ± {half:.6f} |" in report.to_markdown()
    assert "90% confidence interval" in report.caption()


def test_names_are_escaped_and_a_zero_shows_without_its_sign():
    """Model and column names as written, in Markdown (| would start a cell, * emphasis, <x> a
    tag) and LaTeX (< > | print other glyphs in its default font); a mean of -1e-5 at four
    digits shows 0.0000 (it showed -0.0000, bold beside 0.0000); a baseline without any test
    says so in the caption, and one comparison is singular."""
    values = np.array([-1e-5, 1e-5, -2e-5, 0.0])
    report = R.Report({"BM25|tuned": {"c*d<e>": (-1e-5, (-1e-4, 1e-4))}, "m": {"c*d<e>": (0.0, (-1e-4, 1e-4))}},
                      baseline="m")  # fmt: skip
    markdown = report.to_markdown()
    assert "| Model | c\\*d\\<e\\> |" in markdown and "| BM25\\|tuned | **0.0000** ± 0.0001 |" in markdown
    assert "-0.0000" not in markdown
    assert "No test against m" in report.caption()
    latex = report.to_latex()
    assert "BM25\\textbar{}tuned" in latex and "c*d\\textless{}e\\textgreater{}" in latex
    one = R.Report({"a": {"x": values + 1}, "b": {"x": values}}, baseline="b")
    assert "over 1 comparison)" in one.caption()
