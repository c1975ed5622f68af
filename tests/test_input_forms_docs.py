"""The examples of the Markdown pages run and check their own numbers, so the pages cannot go stale.

Every fenced ```python block of a page in ``PAGES`` is executed in order in one namespace; each
block asserts its printed values against hand-computed or numpy values, or against the same
computation done another way (one process, an uninterrupted run). A script shown as a file
(```{code-block} python with ``:caption: name.py``) is written out and run the way the page says:
the distributed page's script under ``torchrun`` with two gloo processes.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch
from ignite.engine import Engine

import ignite_recsys as R

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
PAGES = ["inputs.md", "checkpoints.md", "gpu.md"]  # pages whose python blocks run in order, in one namespace


def python_blocks(page: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", (DOCS / page).read_text(), flags=re.MULTILINE | re.DOTALL)


def script_files(page: str) -> dict[str, str]:
    """The scripts a page shows as files: {file name: code}."""
    found = re.findall(
        r"^```\{code-block\} python\n:caption: (\S+)\n\n(.*?)^```$",
        (DOCS / page).read_text(),
        flags=re.MULTILINE | re.DOTALL,
    )
    return dict(found)


PAGE = DOCS / "inputs.md"
BLOCKS = python_blocks("inputs.md")


def test_the_page_has_an_example_of_each_form():
    code = "\n".join(BLOCKS)
    assert len(BLOCKS) >= 7
    for form in (".csr(", "sparse_coo_tensor", "ItemIds(", "RankedItems(", "-1", 'ties="average"'):
        assert form in code, form


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta:UserWarning")
@pytest.mark.parametrize("page", PAGES)
def test_every_python_block_runs_and_checks_its_numbers(page, capsys):
    blocks = python_blocks(page)
    assert blocks
    namespace = {"__name__": page.replace(".", "_")}
    for number, block in enumerate(blocks, 1):
        try:
            exec(compile(block, f"{page} block {number}", "exec"), namespace)
        except Exception as error:  # name the block that failed
            raise AssertionError(f"docs/{page} python block {number} failed: {error!r}") from error
    printed = capsys.readouterr().out
    assert printed.count("\n") >= len([b for b in blocks if "print(" in b])


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta:UserWarning")
def test_gpu_page_holds_with_the_value_checks_deferred_as_on_a_gpu(monkeypatch, capsys):
    """docs/gpu.md's blocks with the value checks run as on a GPU (deferred to compute()): the
    error compute() raises says what was wrong, as the page shows."""
    import ignite_recsys.metrics._state as state

    monkeypatch.setattr(state, "values_checked_on_host", lambda device: False)
    test_every_python_block_runs_and_checks_its_numbers("gpu.md", capsys)


def test_distributed_page_script_runs_under_torchrun_with_two_gloo_processes(tmp_path):
    """The script of docs/distributed.md, run with the command the page shows: each process checks
    its result against the single-process evaluation of all users (the script's asserts)."""
    scripts = script_files("distributed.md")
    assert list(scripts) == ["evaluate_distributed.py"]
    command = "torchrun --standalone --nproc_per_node 2 evaluate_distributed.py"
    assert command in (DOCS / "distributed.md").read_text()
    (tmp_path / "evaluate_distributed.py").write_text(scripts["evaluate_distributed.py"])
    root = str(DOCS.parent)  # the checkout's package, when the tests run from one
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]), CUDA_VISIBLE_DEVICES=""
    )  # gloo on the CPU, whatever the machine has
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", *command.split()[1:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    printed = dict(re.findall(r"rank (\d) of 2, \d+ users: ndcg@10 ([0-9.]+)", run.stdout))
    assert sorted(printed) == ["0", "1"], run.stdout + run.stderr[-3000:]
    assert printed["0"] == printed["1"]  # both processes print the same value


def test_every_python_block_of_the_evaluate_page_runs(capsys):
    """docs/evaluate.md (files and data frames): its blocks run in order and check their numbers."""
    for module in ("pyarrow", "pandas", "pytrec_eval"):
        pytest.importorskip(module)
    page = PAGE.parent / "evaluate.md"
    blocks = re.findall(r"^```python\n(.*?)^```$", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    assert len(blocks) >= 5
    namespace = {"__name__": "evaluate_md"}
    for number, block in enumerate(blocks, 1):
        try:
            exec(compile(block, f"{page.name} block {number}", "exec"), namespace)
        except Exception as error:  # name the block that failed
            raise AssertionError(f"docs/evaluate.md python block {number} failed: {error!r}") from error
    assert capsys.readouterr().out.count("\n") >= len([b for b in blocks if "print(" in b])


@pytest.mark.parametrize("make", [R.ItemCoverage, R.GiniIndex, R.ShannonEntropy])
def test_catalog_metrics_take_exclude_from_an_engine_dict_output(make):
    scores = torch.tensor([[3.0, 2, 1, 0], [3, 2, 1, 0]])
    targets = torch.tensor([[0.0, 0, 1, 1], [0, 0, 1, 1]])
    exclude = torch.tensor([[True, True, False, False], [False, False, False, False]])
    direct = make([1])
    direct.update((scores, targets, exclude))  # user 0 gets item 2, user 1 item 0
    attached = make([1])
    evaluator = Engine(lambda engine, batch: {"y_pred": scores, "y": targets, "exclude": exclude})
    attached.attach(evaluator, "metric")
    assert evaluator.run([0]).metrics["metric"] == direct.compute()


def test_every_test_the_docs_name_exists():
    """The Guarantees page (and any other) names the tests behind each promise as file::function:
    each must exist, so that a renamed or removed test shows here."""
    text = "\n".join(path.read_text() for path in sorted(DOCS.glob("*.md")))
    named = set(re.findall(r"tests/(test_\w+\.py)::(test_\w+)", text))
    assert len(named) >= 30
    for file, function in sorted(named):
        source = (DOCS.parent / "tests" / file).read_text()
        assert re.search(rf"^\s*def {function}\(", source, flags=re.MULTILINE), f"tests/{file}::{function}"
