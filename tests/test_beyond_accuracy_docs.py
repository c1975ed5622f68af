"""The examples of docs/beyond_accuracy.md run and check their own numbers, so the page cannot go stale.

Every fenced ```python block of the page is executed in order; each block asserts its values
against hand-computed ones (the formulas written out in the block)."""

from __future__ import annotations

import pathlib
import re

PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "beyond_accuracy.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", PAGE.read_text(), flags=re.MULTILINE | re.DOTALL)


def test_the_page_has_an_example_of_each_family():
    code = "\n".join(BLOCKS)
    for name in (
        "IntraListDiversity",
        "EPC",
        "MeanInvUserFreq",
        "Miscalibration",
        "APLT",
        "PopRSP",
        "ExposureGini",
        "ItemGroupExposure",
        "RankBiasedOverlap",
        "Intersection",
        "group_gap",
    ):
        assert name + "(" in code, name


def test_every_python_block_runs_and_checks_its_numbers(capsys):
    for number, block in enumerate(BLOCKS, 1):
        try:
            exec(compile(block, f"{PAGE.name} block {number}", "exec"), {"__name__": "beyond_accuracy_md"})
        except Exception as error:  # name the block that failed
            raise AssertionError(f"docs/beyond_accuracy.md python block {number} failed: {error!r}") from error
    printed = capsys.readouterr().out
    assert printed.count("\n") >= len([b for b in BLOCKS if "print(" in b])
