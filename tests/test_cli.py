"""The command line through its real entry point (``python -m ignite_recsys`` in a subprocess),
its numbers checked against pytrec_eval, scipy and numpy written from the formulas."""

import contextlib
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from ignite_recsys._registry import ALL_METRICS, ranking_metrics_options

pytrec_eval = pytest.importorskip("pytrec_eval")
pytest.importorskip("pyarrow")

ROOT = Path(__file__).resolve().parents[1]


def _subprocess(*arguments):
    """``python -m ignite_recsys ...`` from the repository root: (exit code, stdout, stderr)."""
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "ignite_recsys", *map(str, arguments)],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    return done.returncode, done.stdout, done.stderr


def _in_process(*arguments):
    """``ignite_recsys.cli.main([...])`` with stdout and stderr captured: (exit code, stdout, stderr)."""
    from ignite_recsys.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(argument) for argument in arguments])
    return code, out.getvalue(), err.getvalue()


# Each test runs through the real entry point in a subprocess (marked slow: every start imports
# torch and ignite, seconds each) and, in the default suite, through main() in this process.
@pytest.fixture(params=[pytest.param("subprocess", marks=pytest.mark.slow), "in_process"])
def cli(request):
    return _subprocess if request.param == "subprocess" else _in_process


def _files(folder, seed=0, runs=2, users=30, items=25):
    """A graded qrels and ``runs`` runs of a shared pool (some users missing from a run, some
    users without a relevant item); their dicts for pytrec_eval."""
    rng = np.random.default_rng(seed)
    qrels = {}
    for user in range(users):
        chosen = rng.choice(items, rng.integers(1, 7), replace=False)
        qrels[f"q{user}"] = {f"d{item}": int(rng.integers(0, 4)) for item in chosen}
    lines = [f"{q} 0 {d} {rel}\n" for q, judged in qrels.items() for d, rel in judged.items()]
    (folder / "test.qrels").write_text("".join(lines))
    paths, dicts = [], []
    for index in range(runs):
        run = {}
        for user in range(users):
            if rng.random() < 0.1:
                continue
            chosen = rng.choice(items, 12, replace=False)
            run[f"q{user}"] = {f"d{item}": float(rng.integers(0, 1000)) / 1000 for item in chosen}
        path = folder / f"run{index}.trec"
        rows = [
            f"{q} Q0 {d} {rank} {score} r{index}\n"
            for q, scored in run.items()
            for rank, (d, score) in enumerate(sorted(scored.items(), key=lambda x: -x[1]), 1)
        ]
        path.write_text("".join(rows))
        paths.append(path)
        dicts.append(run)
    return folder / "test.qrels", paths, qrels, dicts


def _trec(qrels, run, measures):
    """pytrec_eval's per-query values, 0 for a query the run does not hold (trec_eval -c)."""
    values = pytrec_eval.RelevanceEvaluator(qrels, set(measures)).evaluate(run)
    return {measure: np.array([values.get(q, {}).get(measure, 0.0) for q in sorted(qrels)]) for measure in measures}


def test_evaluate_several_cutoffs_json_and_output_file(tmp_path, cli):
    qrels_path, [run_path, _], qrels, [run, _] = _files(tmp_path)
    code, out, err = cli(
        "evaluate", "--qrels", qrels_path, "--run", run_path, "--metrics", "ndcg@1,5,10,P@5", "--trec-eval",
        "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    means = json.loads(out)["means"]
    reference = _trec(qrels, run, ["ndcg_cut_1", "ndcg_cut_5", "ndcg_cut_10", "P_5"])
    assert list(means) == ["ndcg@1", "ndcg@5", "ndcg@10", "precision@5"]
    for key, measure in zip(means, reference):
        assert means[key] == pytest.approx(reference[measure].mean(), abs=1e-12)
    target = tmp_path / "out" / "result.json"
    target.parent.mkdir()
    code, out, err = cli(
        "evaluate", "--qrels", qrels_path, "--run", run_path, "--metrics", "ndcg@1,5,10,P@5", "--trec-eval",
        "--format", "json", "--output", target,
    )  # fmt: skip
    assert code == 0 and out == "", err
    assert json.loads(target.read_text())["means"] == means
    code, _, err = cli("evaluate", "--qrels", qrels_path, "--run", run_path, "--metrics", "P@1", "-o", tmp_path)
    assert code == 3 and "cannot write --output" in err


def test_per_user_lines_as_trec_eval_q(tmp_path, cli):
    qrels_path, [run_path, _], qrels, [run, _] = _files(tmp_path, seed=1)
    code, out, err = cli(
        "evaluate", "--qrels", qrels_path, "--run", run_path, "--metrics", "ndcg@10,map@1000", "--trec-eval",
        "--per-user",
    )  # fmt: skip
    assert code == 0, err
    rows = [line.split("\t") for line in out.strip().splitlines()]
    per_user = {(metric, user): float(value) for metric, user, value in rows}
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "map_cut_1000"}).evaluate(run)
    for user in qrels:
        expected = reference.get(user, {"ndcg_cut_10": 0.0, "map_cut_1000": 0.0})
        assert per_user["ndcg@10", user] == pytest.approx(expected["ndcg_cut_10"], abs=5e-5)  # printed to 4 places
        assert per_user["map@1000", user] == pytest.approx(expected["map_cut_1000"], abs=5e-5)
    assert len(rows) == 2 * len(qrels) + 2
    all_rows = _trec(qrels, run, ["ndcg_cut_10"])
    assert per_user["ndcg@10", "all"] == pytest.approx(all_rows["ndcg_cut_10"].mean(), abs=5e-5)
    code, out, err = cli(
        "evaluate", "--qrels", qrels_path, "--run", run_path, "--metrics", "ndcg@10", "--per-user", "--format", "json"
    )
    assert code == 0, err
    document = json.loads(out)
    by_user = {row["user"]: row["ndcg@10"] for row in document["per_user"]}
    assert set(by_user) == set(qrels)
    # the default conventions: exponential gains, users without a relevant item not counted (null)
    for user, judged in qrels.items():
        if max(judged.values()) < 1:
            assert by_user[user] is None
    code, _, err = cli(
        "evaluate", "--qrels", qrels_path, "--run", run_path, "--metrics", "P@1", "--per-user", "--format", "latex"
    )
    assert code == 2 and "--per-user" in err


def _holm(p_values):
    """Holm's step-down adjusted p-values, from the definition."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p)
    adjusted = np.empty_like(p)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[index]))
        adjusted[index] = running
    return adjusted


def test_compare_against_scipy_and_holm(tmp_path, cli):
    qrels_path, paths, qrels, runs = _files(tmp_path, seed=2, runs=3, users=40)
    code, out, err = cli(
        "compare", "--qrels", qrels_path, *[arg for path in paths for arg in ("--run", path)],
        "--metrics", "ndcg@5,10", "--trec-eval", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    document = json.loads(out)
    assert document["baseline"] == "run0.trec" and document["test"] == "t" and document["correction"] == "holm"
    rows = {(row["run"], row["metric"]): row for row in document["rows"]}
    values = [_trec(qrels, run, ["ndcg_cut_5", "ndcg_cut_10"]) for run in runs]
    p_values, keys = [], []
    for index, name in enumerate(["run0.trec", "run1.trec", "run2.trec"]):
        for key, measure in (("ndcg@5", "ndcg_cut_5"), ("ndcg@10", "ndcg_cut_10")):
            row = rows[name, key]
            assert row["mean"] == pytest.approx(values[index][measure].mean(), abs=1e-12)
            if index == 0:
                assert row["p_value"] is None
                continue
            difference = values[index][measure] - values[0][measure]
            assert row["difference"] == pytest.approx(difference.mean(), abs=1e-12)
            expected = scipy.stats.ttest_rel(values[index][measure], values[0][measure]).pvalue
            assert row["p_value"] == pytest.approx(expected, rel=1e-9)
            p_values.append(expected)
            keys.append((name, key))
    for key, adjusted in zip(keys, _holm(p_values)):
        assert rows[key]["adjusted_p_value"] == pytest.approx(adjusted, rel=1e-9)
        assert rows[key]["significant"] == (adjusted < 0.05)
        assert rows[key]["marker"] == ("" if adjusted >= 0.05 else "+" if rows[key]["difference"] > 0 else "-")

    code, out, err = cli(
        "compare", "--qrels", qrels_path, "--run", paths[0], "--run", paths[1], "--metrics", "ndcg@10", "--trec-eval"
    )
    assert code == 0, err
    lines = out.splitlines()
    line = next(line for line in lines if line.startswith("run1.trec"))
    expected = scipy.stats.ttest_rel(values[1]["ndcg_cut_10"], values[0]["ndcg_cut_10"]).pvalue
    printed = f"{expected:.4f}" if expected >= 1e-4 else f"{expected:.1e}"
    assert printed in line and f"{values[1]['ndcg_cut_10'].mean():.4f}" in line
    assert any(line.startswith("run0.trec") for line in lines)


def test_compare_randomization_markdown_latex_and_names(tmp_path, cli):
    qrels_path, paths, qrels, runs = _files(tmp_path, seed=3, runs=2, users=40)
    options = ["--qrels", qrels_path, "--run", paths[0], "--run", paths[1], "--metrics", "ndcg@10", "--trec-eval"]
    code, out, err = cli("compare", *options, "--stat-test", "randomization", "--format", "json")
    assert code == 0, err
    [row] = [row for row in json.loads(out)["rows"] if row["p_value"] is not None]
    values = [_trec(qrels, run, ["ndcg_cut_10"])["ndcg_cut_10"] for run in runs]
    reference = scipy.stats.permutation_test(
        (values[1] - values[0],),
        np.mean,
        permutation_type="samples",
        n_resamples=20000,
        random_state=0,
    ).pvalue
    assert row["p_value"] == pytest.approx(reference, abs=0.02)  # two Monte Carlo estimates
    code, out, err = cli("compare", *options, "--format", "markdown", "--name", "base", "--name", "new")
    assert code == 0, err
    assert out.startswith("| Model | ndcg@10 |") and "| base |" in out and "| new |" in out
    assert "significantly higher/lower than base" in out
    code, out, err = cli("compare", *options, "--format", "latex")
    assert code == 0 and "\\begin{tabular}" in out and "run1.trec" in out, err
    code, _, err = cli("compare", "--qrels", qrels_path, "--run", paths[0], "--metrics", "ndcg@10")
    assert code == 2 and "two or more runs" in err
    code, _, err = cli("compare", *options, "--name", "only-one")
    assert code == 2 and "--name" in err


def test_compare_help_example_parses_and_each_run_names_its_missing_users(tmp_path, cli):
    """The example of compare --help uses the flags the command has (it gave --test, the alias of
    --qrels, for the statistical test); the table's footer names each compared run's own test
    users missing from it, where only the baseline's were printed."""
    from ignite_recsys.cli import COMPARE_EXAMPLES, _parser

    example = COMPARE_EXAMPLES.split("\n", 2)[2].replace("\\\n", " ").split("ignite-recsys", 1)[1].split()
    arguments = _parser().parse_args(example)
    assert arguments.method == "randomization" and arguments.qrels == "test.qrels"
    qrels_path, paths, qrels, runs = _files(tmp_path, seed=5, runs=2, users=30)
    missing = [user for user in qrels if user not in runs[1]]
    assert missing and set(runs[0]) != set(runs[1])
    code, out, err = cli(
        "compare", "--qrels", qrels_path, "--run", paths[0], "--run", paths[1], "--metrics", "ndcg@10", "--trec-eval"
    )
    assert code == 0, err
    absent = [len([user for user in qrels if user not in run]) for run in runs]
    assert f"{absent[0]} not in the run (empty lists)" in out.split("(of run0.trec)")[0].splitlines()[-1]
    own = f"{absent[1]} not in the run (empty lists); 0 run row(s) of users not in the test set (of run1.trec)"
    assert any(line.endswith(own) for line in out.splitlines())
    assert "over 1 comparison)" in out


def test_compare_bolds_the_lowest_fall_out(tmp_path, cli):
    """fall-out is better lower: the table bolds the run of the lowest mean (numpy from the
    formula: non-relevant items in the top 5 over all non-relevant items), not of the highest."""
    rng = np.random.default_rng(5)
    relevant = rng.random((30, 40)) < 0.15
    relevant[relevant.sum(1) == 0, 0] = True
    lines = [f"u{u} 0 d{i} {int(relevant[u, i])}\n" for u in range(30) for i in range(40)]
    (tmp_path / "q").write_text("".join(lines))
    fall_out = {}
    for name, strength in {"good": 0.9, "bad": 0.0}.items():
        scores = rng.random((30, 40)) + strength * relevant
        lines = [f"u{u} Q0 d{i} 1 {float(scores[u, i])!r} {name}\n" for u in range(30) for i in range(40)]
        (tmp_path / f"{name}.trec").write_text("".join(lines))
        top5 = np.argsort(-scores, axis=1)[:, :5]
        misses = (~np.take_along_axis(relevant, top5, 1)).sum(1)
        fall_out[name] = float(np.mean(misses / (~relevant).sum(1)))
    options = ["--qrels", tmp_path / "q", "--run", tmp_path / "good.trec", "--run", tmp_path / "bad.trec"]
    code, out, err = cli("compare", *options, "--metrics", "fall_out@5", "--format", "markdown", "--no-progress")
    assert code == 0, err
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ") and ".trec" in line}
    assert fall_out["good"] < fall_out["bad"]
    assert f"**{fall_out['good']:.4f}**" in rows["good.trec"] and "**" not in rows["bad.trec"]
    assert f"{fall_out['bad']:.4f}" in rows["bad.trec"]
    assert "the lowest for fall_out@5" in out


def _err(grades, max_grade):
    stop = (2.0 ** np.asarray(grades, dtype=float) - 1) / 2.0**max_grade
    kept = np.concatenate([[1.0], np.cumprod(1 - stop)[:-1]])
    return float(np.sum(kept * stop / np.arange(1, len(grades) + 1)))


def _rbp(relevant, persistence):
    return float((1 - persistence) * np.sum(np.asarray(relevant) * persistence ** np.arange(len(relevant))))


def test_convention_options(tmp_path, cli):
    (tmp_path / "q").write_text("u1 0 a 6\nu1 0 b 0\nu1 0 c 2\nu1 0 e 1\nu2 0 a 1\nu2 0 d 3\n")
    (tmp_path / "r").write_text(
        "u1 Q0 b 1 0.9 t\nu1 Q0 c 2 0.8 t\nu1 Q0 d 3 0.7 t\nu1 Q0 a 4 0.6 t\nu1 Q0 e 5 0.5 t\n"
        "u2 Q0 d 1 0.9 t\nu2 Q0 b 2 0.8 t\nu2 Q0 a 3 0.7 t\n"
    )
    base = ["evaluate", "--qrels", tmp_path / "q", "--run", tmp_path / "r", "--format", "json"]
    code, _, err = cli(*base, "--metrics", "err@5")
    assert code == 2 and "max_grade" in err and "Traceback" not in err
    code, out, err = cli(*base, "--metrics", "err@5", "--err-max-grade", "6")
    assert code == 0, err
    expected = np.mean([_err([0, 2, 0, 6, 1], 6), _err([3, 0, 1], 6)])
    assert json.loads(out)["means"]["err@5"] == pytest.approx(expected, abs=1e-12)
    code, out, err = cli(*base, "--metrics", "rbp@5", "--rbp-persistence", "0.5", "--rbp-graded", "false")
    assert code == 0, err
    expected = np.mean([_rbp([0, 1, 0, 1, 1], 0.5), _rbp([1, 0, 1], 0.5)])
    assert json.loads(out)["means"]["rbp@5"] == pytest.approx(expected, abs=1e-12)
    code, out, err = cli(*base, "--metrics", "ndcg@3", "--gain-function", "linear", "--discount", "log2_clip")
    assert code == 0, err
    dcg = lambda gains: sum(g / math.log2(max(i, 2)) for i, g in enumerate(gains, 1))  # noqa: E731
    expected = np.mean([dcg([0, 2, 0]) / dcg([6, 2, 1]), dcg([3, 0, 1]) / dcg([3, 1])])
    assert json.loads(out)["means"]["ndcg@3"] == pytest.approx(expected, abs=1e-12)
    code, out_linear, err = cli(*base, "--metrics", "ndcg@3", "--gain-function", "linear")
    code_named, out_named, _ = cli(*base, "--metrics", "ndcg@3", "--gain-function", "linear_rank")
    assert code == code_named == 0 and json.loads(out_linear)["means"] == json.loads(out_named)["means"], err
    code, out, err = cli(*base, "--metrics", "ndcg@3", "--gain-function", "exponential", "--ndcg-ideal", "k_relevant")
    assert code == 0, err
    exp_dcg = lambda gains: sum((2.0**g - 1) / math.log2(i + 1) for i, g in enumerate(gains, 1))  # noqa: E731
    expected = np.mean([exp_dcg([0, 2, 0]) / exp_dcg([6, 6, 6]), exp_dcg([3, 0, 1]) / exp_dcg([3, 3, 3])])
    assert json.loads(out)["means"]["ndcg@3"] == pytest.approx(expected, abs=1e-12)
    qrels = {"u1": {"a": 6, "b": 0, "c": 2, "e": 1}, "u2": {"a": 1, "d": 3}}
    run = {"u1": {"b": 0.9, "c": 0.8, "d": 0.7, "a": 0.6, "e": 0.5}, "u2": {"d": 0.9, "b": 0.8, "a": 0.7}}
    code, out, err = cli(*base, "--metrics", "bpref@1000", "--bpref-negative-labels", "unjudged")
    assert code == 0, err
    assert json.loads(out)["means"]["bpref@1000"] == pytest.approx(
        np.mean(_trec(qrels, run, ["bpref"])["bpref"]), abs=1e-12
    )
    code, _, err = cli(*base, "--metrics", "ndcg@3", "--gain-function", "cubic")
    assert code == 2 and "invalid choice" in err


def test_usage_errors_empty_files_and_help(tmp_path, cli):
    qrels_path, [run_path], _, _ = _files(tmp_path, runs=1)
    code, _, err = cli("evaluate", "--qrels", qrels_path, "--run", run_path, "--metrics", "P@1", "--device", "bogus")
    assert code == 2 and "--device 'bogus'" in err and "Traceback" not in err
    (tmp_path / "empty.qrels").write_text("")
    code, _, err = cli("evaluate", "--qrels", tmp_path / "empty.qrels", "--run", run_path, "--metrics", "P@1")
    assert code == 4 and "empty.qrels" in err and "Traceback" not in err  # docs/evaluate.md: 4 an empty file
    for command in ("evaluate", "compare"):
        code, out, _ = cli(command, "--help")
        assert code == 0
        text = " ".join(out.split())
        for name in ALL_METRICS:
            assert name in text, name
        for argument in ranking_metrics_options():
            assert "--" + argument.replace("_", "-") in text, argument


@pytest.mark.slow
def test_progress_bar_only_on_a_terminal(tmp_path):
    pytest.importorskip("tqdm")
    pty = pytest.importorskip("pty")
    termios = pytest.importorskip("termios")
    qrels_path, [run_path], _, _ = _files(tmp_path, runs=1)
    options = ["evaluate", "--qrels", qrels_path, "--run", run_path, "--metrics", "P@1", "--batch-size", "4"]
    code, _, err = _subprocess(*options)
    assert code == 0 and err == ""  # stderr captured: no bar
    leader, follower = pty.openpty()
    termios.tcsetwinsize(follower, (24, 100))  # a terminal 100 columns wide (0 would hide the bar)
    done = subprocess.run(
        [sys.executable, "-m", "ignite_recsys", *map(str, options)],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.PIPE,
        stderr=follower,
        check=False,
        timeout=300,
    )
    os.close(follower)
    seen = b""
    try:
        while True:
            chunk = os.read(leader, 4096)
            if not chunk:
                break
            seen += chunk
    except OSError:  # the terminal's other end is closed: all read
        pass
    os.close(leader)
    assert done.returncode == 0
    assert b"evaluate:" in seen and b"user" in seen  # tqdm's "evaluate: ...|  0/30 [...user/s]"


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_follows_isatty(tmp_path, monkeypatch):
    pytest.importorskip("tqdm")
    from ignite_recsys.cli import main

    qrels_path, [run_path], _, _ = _files(tmp_path, runs=1)
    options = ["evaluate", "--qrels", str(qrels_path), "--run", str(run_path), "--metrics", "P@1"]
    for stream, shown in ((io.StringIO(), False), (_Terminal(), True), (_Terminal(), False)):
        monkeypatch.setattr(sys, "stderr", stream)
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(options + ([] if shown or not stream.isatty() else ["--no-progress"])) == 0
        assert ("evaluate:" in stream.getvalue()) == shown


def test_warnings_reach_stderr_as_one_line(tmp_path, capsys, monkeypatch):
    import warnings

    import ignite_recsys.cli as cli_module

    qrels_path, [run_path], _, _ = _files(tmp_path, runs=1)
    real = cli_module.evaluate

    def warning_evaluate(*arguments, **options):
        warnings.warn("the run holds no rows", UserWarning, stacklevel=2)
        return real(*arguments, **options)

    monkeypatch.setattr(cli_module, "evaluate", warning_evaluate)
    assert cli_module.main(["evaluate", "--qrels", str(qrels_path), "--run", str(run_path), "--metrics", "P@1"]) == 0
    err = capsys.readouterr().err
    assert err == "ignite-recsys: warning: the run holds no rows\n"


def test_integer_ids_past_int32_in_tables(tmp_path, cli):
    import pyarrow as pa
    import pyarrow.parquet as pq

    base = 2**31
    test = pa.table({"user": [base + 1, base + 1, 7], "item": [base + 5, base + 9, base + 5], "rel": [1, 2, 1]})
    run = pa.table(
        {
            "user": [base + 1] * 3 + [7] * 2,
            "item": [base + 9, 3, base + 5, base + 7, base + 5],
            "score": [3, 2, 1, 2, 1],
        }
    )
    pq.write_table(test, tmp_path / "test.parquet")
    pq.write_table(run, tmp_path / "run.parquet")
    run.to_pandas().to_csv(tmp_path / "run.csv", index=False)
    qrels = {str(u): {} for u in test.column("user").to_pylist()}
    for u, i, r in zip(*(test.column(n).to_pylist() for n in ("user", "item", "rel"))):
        qrels[str(u)][str(i)] = r
    ranked = {str(u): {} for u in run.column("user").to_pylist()}
    for u, i, s in zip(*(run.column(n).to_pylist() for n in ("user", "item", "score"))):
        ranked[str(u)][str(i)] = float(s)
    expected = _trec(qrels, ranked, ["ndcg_cut_3"])["ndcg_cut_3"].mean()
    for run_path in ("run.parquet", "run.csv"):
        code, out, err = cli(
            "evaluate", "--qrels", tmp_path / "test.parquet", "--run", tmp_path / run_path, "--metrics", "ndcg@3",
            "--gain-function", "linear", "--format", "json",
        )  # fmt: skip
        assert code == 0, err
        assert json.loads(out)["means"]["ndcg@3"] == pytest.approx(expected, abs=1e-12)


def test_several_cutoffs_shorthand_in_the_shared_parser(tmp_path):
    from ignite_recsys import evaluate
    from ignite_recsys.evaluation import parse_metrics

    assert [m.key for m in parse_metrics("ndcg@1,5,10,P_5,10,r_precision")] == [
        "ndcg@1",
        "ndcg@5",
        "ndcg@10",
        "precision@5",
        "precision@10",
        "r_precision",
    ]
    assert [m.key for m in parse_metrics(["recall@20", "ndcg@1,5"])] == ["recall@20", "ndcg@1", "ndcg@5"]
    for bad, message in (
        ("5,ndcg@1", "follows no metric with a cut-off"),
        ("r_precision,5", "follows no metric with a cut-off"),
        (",", "at least one metric"),
        (["ndcg@10", ""], "must name a metric"),
    ):
        with pytest.raises(ValueError, match=message):
            parse_metrics(bad)
    qrels_path, [run_path], qrels, [run] = _files(tmp_path, runs=1)
    options = dict(progress=False, gain_function="linear", ignore_zero_hits=False)
    short = evaluate(run_path, qrels_path, "ndcg@1,5,10", **options)
    reference = _trec(qrels, run, ["ndcg_cut_1", "ndcg_cut_5", "ndcg_cut_10"])
    assert list(short.means) == ["ndcg@1", "ndcg@5", "ndcg@10"]
    for key, measure in zip(short.means, reference):
        assert short.means[key] == pytest.approx(reference[measure].mean(), abs=1e-12)


def test_trec_eval_option_compares_scores_as_float32(tmp_path):
    """--trec-eval reproduces trec_eval where scores differ only past float32 precision (they tie
    there, then the larger docid first); --score-precision float64 keeps them apart."""
    import pytrec_eval

    rng = np.random.default_rng(5)
    run, qrels, lines = {}, {}, []
    for query in range(30):
        q = f"q{query}"
        base = rng.random(20).round(3) + 1.0
        scores = base.copy()
        scores[1::2] = base[::2] + rng.choice([1e-9, -1e-9, 2e-8], size=10)
        docs = [f"d{j}_{rng.integers(0, 99)}" for j in range(20)]
        run[q] = dict(zip(docs, scores.tolist()))
        qrels[q] = {doc: int(rng.integers(0, 3)) for doc in rng.choice(docs, 6, replace=False)}
        lines += [f"{q} Q0 {doc} 0 {score!r} t" for doc, score in run[q].items()]
    (tmp_path / "r").write_text("\n".join(lines) + "\n")
    (tmp_path / "q").write_text("".join(f"{q} 0 {d} {g}\n" for q in qrels for d, g in qrels[q].items()))
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"map_cut.20", "ndcg_cut.10"}).evaluate(run)
    expected = {
        "map@20": np.mean([v["map_cut_20"] for v in per_query.values()]),
        "ndcg@10": np.mean([v["ndcg_cut_10"] for v in per_query.values()]),
    }
    arguments = ["evaluate", "--qrels", tmp_path / "q", "--run", tmp_path / "r", "--metrics", "map@20,ndcg@10"]
    code, out, err = _in_process(*arguments, "--trec-eval", "--format", "json", "--no-progress")
    assert code == 0, err
    means = json.loads(out)["means"]
    assert means == pytest.approx(expected, abs=1e-12)
    code, out, err = _in_process(*arguments, "--trec-eval", "--score-precision", "float64", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["means"] != pytest.approx(expected, abs=1e-12)
