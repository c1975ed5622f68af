"""The examples of docs/inputs.md run and check their own numbers, so the page cannot go stale.

Every fenced ```python block of the page is executed in order in one namespace; each block
asserts its printed values against hand-computed or numpy values.
"""

from __future__ import annotations

import pathlib
import re

import pytest
import torch
from ignite.engine import Engine

import ignite_recsys as R

PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "inputs.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", PAGE.read_text(), flags=re.MULTILINE | re.DOTALL)


def test_the_page_has_an_example_of_each_form():
    code = "\n".join(BLOCKS)
    assert len(BLOCKS) >= 7
    for form in (".csr(", "sparse_coo_tensor", "ItemIds(", "RankedItems(", "-1", 'ties="average"'):
        assert form in code, form


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta:UserWarning")
def test_every_python_block_runs_and_checks_its_numbers(capsys):
    namespace = {"__name__": "inputs_md"}
    for number, block in enumerate(BLOCKS, 1):
        try:
            exec(compile(block, f"{PAGE.name} block {number}", "exec"), namespace)
        except Exception as error:  # name the block that failed
            raise AssertionError(f"docs/inputs.md python block {number} failed: {error!r}") from error
    printed = capsys.readouterr().out
    assert printed.count("\n") >= len([b for b in BLOCKS if "print(" in b])


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
