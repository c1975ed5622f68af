"""docs/vectors.md: its python blocks run in order, in one namespace, and check their own values."""

from __future__ import annotations

import pathlib
import re
import warnings

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"


def test_the_vectors_page_runs_and_checks_its_numbers():
    blocks = re.findall(r"^```python\n(.*?)^```$", (DOCS / "vectors.md").read_text(), flags=re.MULTILINE | re.DOTALL)
    assert len(blocks) >= 3
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for block in blocks:
            exec(compile(block, "vectors.md", "exec"), namespace)
