"""docs/lightning.md: its script runs under PyTorch Lightning, on one process and on two CPU
processes under DDP (gloo), and checks on every process that the values equal the Ignite path's
(the script's asserts). Skipped where lightning is not installed."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning")

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _script() -> str:
    page = (DOCS / "lightning.md").read_text()
    [script] = re.findall(r"^```\{code-block\} python\n:caption: lightning_eval.py\n\n(.*?)^```$", page, re.M | re.S)
    return script


@pytest.mark.slow
@pytest.mark.parametrize("devices", [1, 2])
def test_the_lightning_page_script(tmp_path, devices):
    command = "python lightning_eval.py" + (f" --devices {devices}" if devices > 1 else "")
    assert command in (DOCS / "lightning.md").read_text()  # the command the page shows
    (tmp_path / "lightning_eval.py").write_text(_script())
    root = str(DOCS.parent)  # the checkout's package, when the tests run from one
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]), CUDA_VISIBLE_DEVICES=""
    )
    run = subprocess.run(
        [sys.executable, *command.split()[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    printed = dict(re.findall(rf"rank (\d) of {devices}: ndcg@10 ([0-9.]+)", run.stdout))
    assert sorted(printed) == [str(rank) for rank in range(devices)], run.stdout + run.stderr[-3000:]
    assert len(set(printed.values())) == 1  # every process prints the same value
