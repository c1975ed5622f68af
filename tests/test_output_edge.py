"""The edges of the command line's output: a table in every format for every result (one user
counted, sampled estimates without an interval), names written literally in Markdown (rendered
by markdown-it-py) and LaTeX (compiled by pdflatex where installed), no input overwritten, outputs
written atomically, pipes and FIFOs read, a full device reported in one line, and refusals that
name the options as typed."""

import contextlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyarrow")
markdown_it = pytest.importorskip("markdown_it")

from ignite_recsys import Report  # noqa: E402
from ignite_recsys.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def cli(*arguments):
    """``main([...])`` with stdout and stderr captured: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(argument) for argument in arguments])
    return code, out.getvalue(), err.getvalue()


def run_module(*arguments, **options):
    """``python -m ignite_recsys ...`` in a subprocess (the real entry point): CompletedProcess."""
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "ignite_recsys", *map(str, arguments)],
        cwd=ROOT,
        env=environment,
        check=False,
        timeout=300,
        **options,
    )


def write_files(folder, users=6, items=12, seed=0, relevant_users=None, run_names=("a.trec",)):
    """A qrels (the first ``relevant_users`` users with a relevant item, the others graded 0 only)
    and runs ranking every item for every user; returns (qrels path, run paths, {user: {item: grade}},
    [{user: {item: score}}])."""
    rng = np.random.default_rng(seed)
    relevant_users = users if relevant_users is None else relevant_users
    qrels = {}
    for user in range(users):
        chosen = rng.choice(items, 3, replace=False)
        qrels[f"u{user}"] = {f"i{item}": (int(rng.integers(1, 3)) if user < relevant_users else 0) for item in chosen}
    (folder / "test.qrels").write_text(
        "".join(f"{u} 0 {i} {g}\n" for u, judged in qrels.items() for i, g in judged.items())
    )
    paths, runs = [], []
    for name in run_names:
        run = {}
        for user in range(users):  # distinct scores: no tie to break
            run[f"u{user}"] = {f"i{item}": float(score) for item, score in enumerate(rng.permutation(items))}
        lines = [
            f"{u} Q0 {i} {rank} {score} x\n"
            for u, scored in run.items()
            for rank, (i, score) in enumerate(sorted(scored.items(), key=lambda x: -x[1]), 1)
        ]
        (folder / name).write_text("".join(lines))
        paths.append(folder / name)
        runs.append(run)
    return folder / "test.qrels", paths, qrels, runs


def ndcg_at(judged, scored, k):
    """NDCG@k with exponential gains 2^g - 1 and log2(rank + 1) discounts, from the formula."""
    ranked = sorted(scored, key=lambda item: (-scored[item], item))[:k]
    dcg = sum((2 ** judged.get(item, 0) - 1) / math.log2(rank + 2) for rank, item in enumerate(ranked))
    ideal = sorted(judged.values(), reverse=True)[:k]
    idcg = sum((2**g - 1) / math.log2(rank + 2) for rank, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else math.nan


# --- Markdown through markdown-it-py -----------------------------------------------------------
def markdown_table(text):
    """The cells of the first table of ``text`` as markdown-it-py renders them (plain text of each
    cell's inline content), and whether any cell holds markup (emphasis, link, code, HTML)."""
    tokens = markdown_it.MarkdownIt("commonmark").enable("table").enable("strikethrough").parse(text)
    rows, row, markup = [], None, []
    for token in tokens:
        if token.type == "tr_open":
            row = []
        elif token.type == "tr_close":
            rows.append(row)
            row = None
        elif token.type == "inline" and row is not None:
            row.append("".join(child.content for child in token.children if child.type in ("text", "text_special")))
            markup += [
                child.type
                for child in token.children
                if child.type not in ("text", "text_special", "strong_open", "strong_close")
            ]
    return rows, markup


NAMES = [
    "_best_.trec",
    "__init__.trec",
    "x&lt;y.trec",
    "a*b*.trec",
    "[ours] dense",
    "p|q",
    "back\\slash",
    "`tick`",
    "<b>x</b>",
    "~~s~~",
    "a&amp;b",
]


@pytest.mark.parametrize("name", NAMES)
def test_markdown_cells_show_names_as_written(name):
    """Rendered by a CommonMark parser, each model and column name reads exactly as written: no
    emphasis from _ or *, no entity from &lt;, no HTML tag, no extra cell from |."""
    report = Report({name: {name: (0.5, (0.4, 0.6))}, "other": {name: (0.25, (0.2, 0.3))}})
    rows, markup = markdown_table(report.to_markdown())
    assert rows[0] == ["Model", name]
    assert [row[0] for row in rows[1:]] == [name, "other"]
    assert rows[1][1] == "0.5000 ± 0.1000"  # bold's markers are markup, its text the number
    assert markup == []


def test_markdown_escape_pinned():
    assert Report({"_best_": {"fall_out@5": (0.5, (0.4, 0.6))}}).to_markdown().splitlines()[:3] == [
        "| Model | fall_out@5 |",
        "|:--|--:|",
        "| \\_best\\_ | **0.5000** ± 0.1000 |",
    ]


# --- LaTeX: pinned text, and compiled where pdflatex is installed ------------------------------
PREAMBLE = r"""\documentclass{article}
\usepackage[T1]{fontenc}
\IfFileExists{booktabs.sty}{\usepackage{booktabs}}{\newcommand{\toprule}{\hline}\newcommand{\midrule}{\hline}\newcommand{\bottomrule}{\hline}}
\begin{document}
"""


def compile_latex(folder, tables):
    """pdflatex on a document holding ``tables``; returns the log (a failure raises)."""
    source = folder / "tables.tex"
    source.write_text(PREAMBLE + "\n\n".join(tables) + "\n\\end{document}\n", encoding="utf-8")
    done = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "tables.tex"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    log = (folder / "tables.log").read_text(errors="replace") if (folder / "tables.log").exists() else done.stdout
    assert done.returncode == 0, log[-3000:]
    return log


def test_latex_row_starting_with_a_bracket_pinned():
    """After ``\\\\`` LaTeX reads ``[`` as the start of an optional length ("Missing number"):
    brackets in names are braced."""
    table = Report({"base": {"ndcg@10": (0.5, (0.4, 0.6))}, "[ours] dense": {"ndcg@10": (0.25, (0.2, 0.3))}}).to_latex()
    assert "base & \\textbf{0.5000} $\\pm$ 0.1000 \\\\\n{[}ours{]} dense & 0.2500 $\\pm$ 0.0500 \\\\" in table


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
def test_latex_tables_compile(tmp_path):
    names = ["[ours] dense", "_best_", "50% & $x$", "#1 {a} ~b^c", "back\\slash", "<a|b>"]
    tables = [
        Report({name: {name: (0.5, (0.4, 0.6))}, "b": {name: (0.3, (math.nan, math.nan))}}).to_latex() for name in names
    ]
    log = compile_latex(tmp_path, tables)
    assert "Missing number" not in log and "Undefined control sequence" not in log


# --- Intervals that do not exist: a dash in every format --------------------------------------
@pytest.mark.parametrize("format", ["table", "markdown", "latex", "json"])
def test_one_user_counted_renders_in_every_format(tmp_path, format):
    """Two test users, one with a relevant item: the mean is that user's NDCG, and there is no
    interval; every format writes it (Markdown and LaTeX exited 2 with an internal message)."""
    qrels_path, [run_path], qrels, [run] = write_files(tmp_path, users=2, relevant_users=1)
    code, out, err = cli(
        "evaluate",
        "--qrels",
        qrels_path,
        "--run",
        run_path,
        "--metrics",
        "ndcg@10",
        "--format",
        format,
        "--no-progress",
    )
    assert code == 0, err
    expected = ndcg_at(qrels["u0"], run["u0"], 10)
    if format == "json":
        document = json.loads(out)
        assert document["means"]["ndcg@10"] == pytest.approx(expected, abs=1e-12)
        assert document["intervals"]["ndcg@10"] is None
        assert document["users_counted"] == {"ndcg@10": 1}
    elif format == "table":
        assert out.splitlines()[1].split() == ["ndcg@10", f"{expected:.4f}", "-"]
    elif format == "markdown":
        rows, _ = markdown_table(out)
        assert rows[1] == ["a.trec", f"{expected:.4f} ± –"]
    else:
        assert f"a.trec & \\textbf{{{expected:.4f}}} $\\pm$ -- \\\\" in out


@pytest.mark.parametrize("format", ["table", "markdown", "latex", "json"])
def test_sampled_estimates_render_in_every_format(tmp_path, format):
    """mle has no interval: --sampled failed in Markdown and LaTeX."""
    qrels_path, [run_path], _, _ = write_files(tmp_path, users=8, items=40)
    code, out, err = cli(
        "evaluate",
        "--qrels",
        qrels_path,
        "--run",
        run_path,
        "--metrics",
        "ndcg@10",
        "--sampled",
        "10",
        "--format",
        format,
        "--no-progress",
    )
    assert code == 0, err
    if format == "json":
        assert json.loads(out)["intervals"]["ndcg@10/mle"] is None
    elif format == "markdown":
        rows, _ = markdown_table(out)
        assert rows[0][-1] == "ndcg@10/mle" and rows[1][-1].endswith(" ± –")
    elif format == "latex":
        assert "$\\pm$ -- \\\\" in out
    else:
        assert [line.split()[-1] for line in out.splitlines() if line.startswith("ndcg@10/mle")] == ["-"]
        assert "over the" in out and "each ranked among 10 sampled negatives" in out


@pytest.mark.parametrize("format", ["table", "markdown", "latex", "json"])
def test_compare_with_one_user_counted(tmp_path, format):
    """No paired test is possible with one user: the table is written without one (exit 2 before)."""
    qrels_path, paths, qrels, runs = write_files(tmp_path, users=3, relevant_users=1, run_names=("a.trec", "b.trec"))
    code, out, err = cli(
        "compare",
        "--qrels",
        qrels_path,
        "--run",
        paths[0],
        "--run",
        paths[1],
        "--metrics",
        "ndcg@10",
        "--format",
        format,
        "--no-progress",
    )
    assert code == 0, err
    means = [ndcg_at(qrels["u0"], run["u0"], 10) for run in runs]
    if format == "json":
        rows = json.loads(out)["rows"]
        assert [row["mean"] for row in rows] == pytest.approx(means, abs=1e-12)
        assert [row["p_value"] for row in rows] == [None, None] and [row["users_counted"] for row in rows] == [1, 1]
    elif format == "markdown":
        rows, _ = markdown_table(out)
        assert [row[1].split(" ± ")[1] for row in rows[1:]] == ["–", "–"]
        assert "No test against a.trec" in out
    elif format == "latex":
        assert out.count("$\\pm$ -- \\\\") == 2
    else:
        assert "no test where a run or the baseline counts fewer than two users" in out


def test_report_cells_without_users():
    """Per-user cells with one value (no interval) or none (no mean) show dashes and take no test."""
    report = Report(
        {
            "A": {"x": np.array([0.5, np.nan]), "y": np.array([np.nan, np.nan])},
            "B": {"x": [0.2, np.nan], "y": [0.1, 0.3]},
        },
        baseline="A",
    )
    assert report.tests == {}
    rows, _ = markdown_table(report.to_markdown())
    assert rows[1:] == [["A", "0.5000 ± –", "–"], ["B", "0.2000 ± –", "0.2000 ± 1.2706"]]
    with pytest.raises(ValueError, match="low <= mean <= high"):
        Report({"A": {"x": (0.5, (math.nan, 0.6))}})
    # two users each, one user both count: no test, the intervals of each shown
    report = Report({"A": {"x": [0.5, 0.6, np.nan]}, "B": {"x": [np.nan, 0.2, 0.3]}}, baseline="A")
    assert report.tests == {} and "No test against A" in report.to_markdown()


# --- The differential check: every format renders every result of a randomized set -----------
SPECIAL = "_*&<>|[]`\\~#$%^{}"


def random_name(rng, taken):
    while True:
        name = "".join(rng.choice(list("ab" + SPECIAL)) for _ in range(int(rng.integers(1, 8)))) + ".trec"
        if name not in taken and not name.startswith((".", "~")):
            return name


def test_every_format_renders_every_result_of_a_randomized_set(tmp_path):
    """Random qrels with 0, 1 or more users with a relevant item, runs named with Markdown and
    LaTeX specials, evaluate (per-user, sampled) and compare (per-user) in every format: exit 0 (or
    6 when no user is counted), Markdown cells equal to the names and to the means (independent
    NDCG from the formula) through markdown-it-py, JSON with null where there is no interval, and
    every LaTeX table compiled in one document where pdflatex is installed."""
    rng = np.random.default_rng(2024)
    latex = []
    for case in range(6):
        folder = tmp_path / f"case{case}"
        folder.mkdir()
        users = int(rng.integers(2, 7))
        relevant = [0, 1, users][case % 3]
        names = []
        for _ in range(2):
            names.append(random_name(rng, names))
        qrels_path, paths, qrels, runs = write_files(
            folder, users=users, items=30, seed=case, relevant_users=relevant, run_names=names
        )
        expected = [
            [value for value in (ndcg_at(qrels[u], run[u], 10) for u in qrels) if not math.isnan(value)] for run in runs
        ]
        for format in ("table", "markdown", "latex", "json"):
            for command in (
                ["evaluate", "--run", paths[0]] + (["--per-user"] if format in ("table", "json") else []),
                ["evaluate", "--run", paths[0], "--sampled", "5"],
                ["compare", "--run", paths[0], "--run", paths[1]]
                + (["--per-user"] if format in ("table", "json") else []),
            ):
                code, out, err = cli(
                    *command, "--qrels", qrels_path, "--metrics", "ndcg@10", "--format", format, "--no-progress"
                )
                if relevant == 0:  # no user counted: nothing to evaluate
                    assert code == 6 and out == "" and "nothing to evaluate" in err, (command, err)
                    continue
                assert code == 0, (command, format, err)
                if format == "markdown":
                    rows, markup = markdown_table(out)
                    assert markup == []
                    assert [row[0] for row in rows[1:]] == names[: len(rows) - 1]
                    if "--sampled" not in command:
                        shown = [row[1].split(" ± ") for row in rows[1:]]
                        for (mean, half), values in zip(shown, expected):
                            assert mean == f"{np.mean(values):.4f}"
                            assert (half == "–") == (len(values) < 2)
                elif format == "json":
                    document = json.loads(out)
                    if command[0] == "evaluate" and "--sampled" not in command:
                        assert (document["intervals"]["ndcg@10"] is None) == (len(expected[0]) < 2)
                        assert document["users_counted"]["ndcg@10"] == len(expected[0])
                        per_user = [row["ndcg@10"] for row in document["per_user"] if row["ndcg@10"] is not None]
                        assert sorted(per_user) == pytest.approx(sorted(expected[0]), abs=1e-12)
                    elif command[0] == "compare":
                        for name, values in zip(names, expected):
                            kept = [row["ndcg@10"] for row in document["per_user"][name] if row["ndcg@10"] is not None]
                            assert sorted(kept) == pytest.approx(sorted(values), abs=1e-12)
                elif format == "latex":
                    latex.append(out)
                else:
                    assert "nan" not in out
    for _ in range(8):  # Report from per-user cells of 0, 1 or more users, names full of specials
        names = []
        for _ in range(3):
            names.append(random_name(rng, names))
        cells = {}
        for name in names:
            cells[name] = {}
            for column in names[:2]:
                values = rng.random(5)
                values[rng.permutation(5)[: int(rng.choice([5, 4, 3, 0]))]] = np.nan
                cells[name][column] = values
        report = Report(cells, baseline=names[0])
        rows, markup = markdown_table(report.to_markdown())
        assert markup == [] and rows[0] == ["Model", *names[:2]]
        for row, name in zip(rows[1:], names):
            assert row[0] == name
            for text, column in zip(row[1:], names[:2]):
                kept = cells[name][column][~np.isnan(cells[name][column])]
                if len(kept) == 0:
                    assert text == "–"
                else:
                    mean, half = text.split(" ± ")
                    assert mean.rstrip("†‡") == f"{kept.mean():.4f}" and (half == "–") == (len(kept) < 2)
        latex.append(report.to_latex())
    if shutil.which("pdflatex"):
        compile_latex(tmp_path, latex)


# --- No input overwritten; atomic writes -------------------------------------------------------
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(
    command=st.sampled_from(["evaluate", "compare"]),
    target=st.sampled_from(["qrels", "run", "run2", "exclude"]),
    spelling=st.sampled_from(["same", "dot", "parent", "absolute", "symlink", "hardlink"]),
    format=st.sampled_from(["table", "json", "latex", "markdown"]),
    flag=st.sampled_from(["--output", "-o"]),
    with_exclude=st.booleans(),
)
def test_no_output_path_equal_to_an_input_is_ever_written(
    tmp_path_factory, command, target, spelling, format, flag, with_exclude
):
    """Whatever the command, the options and the spelling of the path (relative, absolute, through
    a symbolic or hard link), an output that is one of the inputs is refused (exit 2) and the file
    keeps its bytes."""
    folder = tmp_path_factory.mktemp("inputs")
    qrels_path, paths, _, _ = write_files(folder, users=4, run_names=("a.trec", "b.trec"))
    exclude = folder / "train.qrels"
    exclude.write_text("u0 0 i0 1\n")
    if target == "exclude" and not with_exclude:
        target = "qrels"
    if target == "run2" and command == "evaluate":
        target = "run"
    victim = {"qrels": qrels_path, "run": paths[0], "run2": paths[1], "exclude": exclude}[target]
    before = victim.read_bytes()
    spelled = {
        "same": str(victim),
        "dot": str(victim.parent / "." / victim.name),
        "parent": str(victim.parent / ".." / victim.parent.name / victim.name),
        "absolute": os.path.abspath(victim),
    }.get(spelling)
    if spelling == "symlink":
        spelled = str(folder / "link.out")
        os.symlink(victim, spelled)
    elif spelling == "hardlink":
        spelled = str(folder / "hard.out")
        os.link(victim, spelled)
    runs = ["--run", paths[0]] + (["--run", paths[1]] if command == "compare" else [])
    options = ["--exclude", exclude] if with_exclude else []
    code, out, err = cli(
        command,
        "--qrels",
        qrels_path,
        *runs,
        *options,
        "--metrics",
        "ndcg@10",
        "--format",
        format,
        flag,
        spelled,
        "--no-progress",
    )
    assert code == 2 and "would replace it" in err, err
    assert victim.read_bytes() == before


def test_a_device_given_as_input_and_output_is_not_refused():
    """Writing to a device does not replace it: ``--qrels /dev/stdin --output /dev/stdout`` on one
    terminal (both the same device) is not an output over an input."""
    import argparse

    from ignite_recsys.cli import _check_output

    arguments = argparse.Namespace(qrels="/dev/null", run=["/dev/null"], exclude=None, output="/dev/null")
    _check_output(arguments)  # no UsageError


def test_outputs_are_written_atomically(tmp_path, monkeypatch):
    """The output goes to a temporary file in the same folder, renamed over the target: a write
    that fails leaves the target as it was and no temporary file; the target keeps its mode."""
    qrels_path, [run_path], _, _ = write_files(tmp_path)
    target = tmp_path / "out" / "result.json"
    target.parent.mkdir()
    target.write_text("old results\n")
    os.chmod(target, 0o640)
    arguments = [
        "evaluate",
        "--qrels",
        qrels_path,
        "--run",
        run_path,
        "--metrics",
        "ndcg@10",
        "--format",
        "json",
        "--output",
        target,
        "--no-progress",
    ]

    def failing_replace(source, destination):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    code, _, err = cli(*arguments)
    assert code == 3 and "cannot write --output" in err
    assert target.read_text() == "old results\n" and os.listdir(target.parent) == ["result.json"]
    monkeypatch.undo()
    code, _, err = cli(*arguments)
    assert code == 0, err
    assert json.loads(target.read_text())["means"]["ndcg@10"] > 0
    assert os.stat(target).st_mode & 0o777 == 0o640 and os.listdir(target.parent) == ["result.json"]


# --- Pipes, FIFOs, directories, a full device --------------------------------------------------
def run_as_table(run_path):
    return (
        "user,item,score\n"
        + "".join(f"{u},{i},{s}\n" for u, _, i, _, s, _ in (line.split() for line in run_path.read_text().splitlines()))
    ).encode()


def test_a_run_read_from_a_pipe_and_from_a_fifo(tmp_path):
    """A pipe (/dev/fd/N, as the shell's <(...) gives) and a FIFO, as a TREC run and as a CSV table,
    give what the file gives ("no such file" before: the check was os.path.isfile)."""
    qrels_path, [run_path], _, _ = write_files(tmp_path)
    arguments = [
        "evaluate",
        "--qrels",
        qrels_path,
        "--metrics",
        "ndcg@10,recall@5",
        "--format",
        "json",
        "--no-progress",
    ]
    code, from_file, err = cli(*arguments, "--run", run_path)
    assert code == 0, err
    for kind, format_options, data in [
        ("pipe", [], run_path.read_bytes()),
        ("fifo", [], run_path.read_bytes()),
        ("fifo", ["--run-format", "csv"], run_as_table(run_path)),
    ]:
        if kind == "pipe":
            read, write = os.pipe()
            path = f"/dev/fd/{read}"

            def feed(write=write, data=data):
                with os.fdopen(write, "wb") as handle:
                    handle.write(data)
        else:
            path = tmp_path / f"run{len(format_options)}.fifo"
            os.mkfifo(path)

            def feed(path=path, data=data):
                with open(path, "wb") as handle:
                    handle.write(data)

        writer = threading.Thread(target=feed)
        writer.start()
        code, out, err = cli(*arguments, "--run", path, *format_options)
        writer.join(timeout=30)
        if kind == "pipe":
            os.close(read)
        assert code == 0, (kind, err)
        assert json.loads(out)["means"] == json.loads(from_file)["means"]


@pytest.mark.slow
def test_a_run_read_from_stdin(tmp_path):
    """`cat run | ignite-recsys evaluate --run /dev/stdin`, through the real entry point."""
    qrels_path, [run_path], _, _ = write_files(tmp_path)
    arguments = ["evaluate", "--qrels", qrels_path, "--metrics", "ndcg@10", "--format", "json", "--no-progress"]
    code, from_file, err = cli(*arguments, "--run", run_path)
    done = run_module(*arguments, "--run", "/dev/stdin", input=run_path.read_text(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["means"] == json.loads(from_file)["means"]


def test_a_directory_gets_its_own_message(tmp_path):
    qrels_path, _, _, _ = write_files(tmp_path)
    code, _, err = cli("evaluate", "--qrels", qrels_path, "--run", tmp_path, "--metrics", "ndcg@10", "--no-progress")
    assert code == 3 and "is a directory" in err and "no such file" not in err


def test_a_full_standard_output_is_one_line_like_a_full_output_file(tmp_path):
    """`> /dev/full` printed a traceback; it says what --output /dev/full says, with its exit code."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    qrels_path, [run_path], _, _ = write_files(tmp_path)
    arguments = ["evaluate", "--qrels", qrels_path, "--run", run_path, "--metrics", "ndcg@10", "--no-progress"]
    err = io.StringIO()
    with open("/dev/full", "w") as full, contextlib.redirect_stdout(full), contextlib.redirect_stderr(err):
        code = main([str(argument) for argument in arguments])
    to_file = cli(*arguments, "--output", "/dev/full")
    assert code == to_file[0] == 3
    for message in (err.getvalue(), to_file[2]):
        [line] = message.splitlines()
        assert line.startswith("ignite-recsys: error: cannot write") and "No space left on device" in line


@pytest.mark.slow
def test_a_full_standard_output_through_the_entry_point(tmp_path):
    """The same through ``python -m ignite_recsys ... > /dev/full``: no traceback at exit either."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    qrels_path, [run_path], _, _ = write_files(tmp_path)
    arguments = ["evaluate", "--qrels", qrels_path, "--run", run_path, "--metrics", "ndcg@10", "--no-progress"]
    with open("/dev/full", "w") as full:
        done = run_module(*arguments, stdout=full, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 3
    [line] = done.stderr.splitlines()
    assert line.startswith("ignite-recsys: error: cannot write to standard output") and "No space left" in line


# --- What a new user tripped on ----------------------------------------------------------------
def test_compare_per_user_gives_every_runs_values(tmp_path):
    """compare --per-user: each run's per-user values (table lines run, metric, user, value; JSON
    per_user lists), equal to NDCG@10 from the formula."""
    qrels_path, paths, qrels, runs = write_files(tmp_path, users=6, relevant_users=5, run_names=("a.trec", "b.trec"))
    arguments = [
        "compare",
        "--qrels",
        qrels_path,
        "--run",
        paths[0],
        "--run",
        paths[1],
        "--metrics",
        "ndcg@10",
        "--per-user",
        "--no-progress",
    ]
    code, out, err = cli(*arguments)
    assert code == 0, err
    lines = out.split("run\tmetric\tuser\tvalue\n")[1].splitlines()
    for name, run in zip(("a.trec", "b.trec"), runs):
        values = {user: ndcg_at(qrels[user], run[user], 10) for user in qrels}
        shown = {
            fields[2]: float(fields[3])
            for fields in (line.split("\t") for line in lines)
            if fields[0] == name and fields[2] != "all"
        }
        assert shown == pytest.approx(
            {user: value for user, value in values.items() if not math.isnan(value)}, abs=5e-5
        )
    code, out, err = cli(*arguments, "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    for name, run in zip(("a.trec", "b.trec"), runs):
        got = {row["user"]: row["ndcg@10"] for row in document["per_user"][name]}
        assert set(got) == set(qrels)
        for user in qrels:
            value = ndcg_at(qrels[user], run[user], 10)
            assert got[user] is None if math.isnan(value) else got[user] == pytest.approx(value, abs=1e-12)


def test_the_footer_says_how_many_users_each_mean_counts(tmp_path):
    """46 test users of which 6 have no relevant item: the means count 40, and the footer says so
    and why (it said "46 test users" only)."""
    qrels_path, [run_path], qrels, _ = write_files(tmp_path, users=46, relevant_users=40)
    code, out, err = cli(
        "evaluate", "--qrels", qrels_path, "--run", run_path, "--metrics", "ndcg@10,recall@5", "--no-progress"
    )
    assert code == 0, err
    assert "each mean: over 40 of the 46 test users; 6 not counted, as they have no relevant test item" in out
    assert "--ignore-zero-hits false" in out
    code, out, err = cli(
        "evaluate", "--qrels", qrels_path, "--run", run_path, "--metrics", "ndcg@10", "--trec-eval", "--no-progress"
    )
    assert code == 0 and "each mean: over all 46 test users" in out


def test_refusals_name_the_options_as_typed(tmp_path):
    qrels_path, [run_path], _, _ = write_files(tmp_path)
    base = ["evaluate", "--qrels", qrels_path, "--run", run_path, "--metrics", "ndcg@10", "--no-progress"]
    code, _, err = cli(*base, "--sampled", "100", "--trec-eval")
    assert code == 2 and "--trec-eval" in err
    assert not any(name in err for name in ("gain_function", "ignore_zero_hits", "map_normalization"))
    code, _, err = cli(*base, "--sampled", "100", "--gain-function", "linear")
    assert code == 2 and "--gain-function" in err and "gain_function" not in err
    code, _, err = cli(*base, "--batch-size", "0")
    assert code == 2 and "--batch-size must be" in err and "batch_size" not in err
    code, _, err = cli(*base, "--sampled", "0")
    assert code == 2 and "--sampled must be" in err and "num_negatives" not in err


@pytest.mark.parametrize("command", ["evaluate", "compare"])
def test_an_unknown_option_prints_the_commands_own_usage(tmp_path, command):
    code, out, err = cli(command, "--qrels", "q", "--run", "r", "--metrics", "ndcg@10", "--bogus")
    assert code == 2
    assert (
        f"usage: ignite-recsys {command}" in err
        and f"ignite-recsys {command}: error: unrecognized arguments: --bogus" in err
    )
