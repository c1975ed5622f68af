"""docs/sampled.md's table of the estimators' errors comes from the benchmark: the page includes
the file ``benchmarks/bench_sampled.py --docs`` writes, a reduced run of the same code writes
the same kind of table, a rerun of the file's command gives the file (slow), and each claim the
page makes about the table holds on the table's rows."""

from __future__ import annotations

import importlib.util
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "docs", "_generated", "sampled_table.inc")
PAGE = os.path.join(ROOT, "docs", "sampled.md")


def _bench():
    spec = importlib.util.spec_from_file_location("bench_sampled", os.path.join(ROOT, "benchmarks", "bench_sampled.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(text):
    """{(data set, model, n, metric, estimator): (exact, mean, bias, sd, rmse, agreement)} of a table file."""
    rows, data = {}, None
    for line in text.splitlines():
        if line.startswith("**"):
            data = "synthetic" if line.startswith("**Synthetic") else "toplaw"
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 10 and cells[0] != "model":
            model, n, metric, estimator = cells[:4]
            values = [float(cell) for cell in cells[4:9]] + [float(cells[9].rstrip("%")) / 100]
            rows[(data, model, int(n), metric, estimator)] = tuple(values)
    return rows


def test_the_page_includes_the_generated_table():
    page = open(PAGE).read()
    assert "```{include} _generated/sampled_table.inc" in page
    text = open(TABLE).read()
    assert text.startswith("Made by `python benchmarks/bench_sampled.py ")
    rows = _rows(text)
    assert {key[0] for key in rows} == {"synthetic", "toplaw"}
    assert {key[4] for key in rows} == set(_bench().ESTIMATORS)


def test_a_reduced_run_writes_the_same_kind_of_table(tmp_path):
    bench = _bench()
    out = tmp_path / "table.inc"
    bench.main(["--users", "12", "--items", "300", "--seeds", "2", "--negatives", "20", "--output", str(out)])
    text = out.read_text()
    committed = open(TABLE).read()

    # the same layout line by line, but for the numbers and the sizes
    def shape(t):
        return [re.sub(r"[-+]?\d[\d.,%]*", "#", line) for line in t.splitlines() if not line.startswith("Made by")]

    reduced, full = shape(text), shape(committed)
    assert set(reduced) <= set(full)
    rows = _rows(text)
    exact_from_numpy = {}
    for (data, model, _n, metric, _estimator), values in rows.items():
        exact_from_numpy.setdefault((data, model, metric), values[0])
        assert values[0] == exact_from_numpy[(data, model, metric)]  # one exact value per model and metric


def test_the_page_claims_hold_on_the_table():
    """Each claim of the page's summary, on every data set, model, n and metric of the table."""
    rows = _rows(open(TABLE).read())
    cells = {key[:4] for key in rows}
    assert {cell[0] for cell in cells} == {"synthetic", "toplaw"}
    corrections = ("kr_bias", "kr_bv", "mle")
    for cell in cells:
        naive = rows[cell + ("naive",)]
        assert naive[2] > 0, cell  # the naive metric overstates the exact one
        for estimator in corrections:  # each default correction has a smaller RMSE than naive
            assert rows[cell + (estimator,)][4] < naive[4], (cell, estimator)
        assert rows[cell + ("kr_bias",)][5] == 1.0, cell  # kr_bias orders the models right for every seed
        assert rows[cell + ("kr_bias",)][3] == min(rows[cell + (e,)][3] for e in corrections), cell
        if rows[cell + ("naive",)][0] > 0.2:  # a high exact value: kr_bias and kr_bv underestimate it
            assert rows[cell + ("kr_bias",)][2] < 0 and rows[cell + ("kr_bv",)][2] < 0, cell
            assert rows[cell + ("kr_bias",)][2] >= -0.23, cell  # "by up to 0.22"
    assert any(rows[cell + ("naive",)][0] > 0.2 for cell in cells)
    # what does not hold on both: no estimator has the smallest RMSE in every row; mle's spread
    best = {min(corrections + ("rescaled",), key=lambda e: rows[cell + (e,)][4]) for cell in cells}
    assert len(best) > 1
    assert max(rows[cell + ("mle",)][3] for cell in cells) == pytest.approx(0.15, abs=0.005)
    assert min(rows[cell + ("mle",)][5] for cell in cells if cell[0] == "synthetic") == 0.3
    # the figures the page quotes
    page = open(PAGE).read()
    taste = rows[("synthetic", "taste", 100, "ndcg@10", "naive")]
    assert f"{taste[0]:.4f}" in page and f"{taste[1]:.2f}" in page
    steep5 = {n: rows[("toplaw", "steep5", n, "ndcg@10", "kr_bias")] for n in (50, 100)}
    assert f"NDCG@10 {steep5[50][1]:.2f} to {steep5[100][1]:.2f} for an exact {steep5[50][0]:.2f}" in page


@pytest.mark.slow
def test_the_table_is_a_rerun_of_its_command(tmp_path):
    committed = open(TABLE).read()
    command = re.match(r"Made by `python benchmarks/bench_sampled.py ([^`]*)`", committed).group(1).split()
    out = tmp_path / "table.inc"
    command[command.index("--output") + 1] = str(out)
    _bench().main(command)
    assert out.read_text().split("\n", 1)[1] == committed.split("\n", 1)[1]
