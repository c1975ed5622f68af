"""The README's claims that can be checked against the library: the classes its lists name, the
metrics of the registry, which classes take ``convention``, the extras and commands it shows."""

import inspect
import re
from pathlib import Path

import ignite.metrics
import pytest

import ignite_recsys as R
from ignite_recsys._registry import ENTRIES

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
LISTS = README[: README.index("## Install")]  # the bullet lists of what the library has


def _names(text):
    return set(re.findall(r"`([A-Z][A-Za-z0-9]+)`", text))


def test_every_class_the_lists_name_exists():
    missing = sorted(name for name in _names(LISTS) if not hasattr(R, name))
    assert missing == []


def test_every_metric_is_listed():
    metric_classes = {
        name
        for name in R.__all__
        if inspect.isclass(getattr(R, name)) and issubclass(getattr(R, name), ignite.metrics.Metric)
    }
    assert metric_classes - _names(LISTS) == set()
    assert {entry.class_name for entry in ENTRIES} <= _names(LISTS)  # every registry ranking metric


def test_the_classes_said_to_take_convention_take_it():
    [sentence] = re.findall(r"- Beyond accuracy: (.*?) \(RecBole's definitions by default", LISTS, re.S)
    said = _names(sentence)
    assert said == {"ItemCoverage", "GiniIndex", "ShannonEntropy"}
    for name in said:
        assert "convention" in inspect.signature(getattr(R, name)).parameters, name
    # and the beyond-accuracy classes named before the next sentence, without it, do not take it
    [rest] = re.findall(r"by `convention`\), (.*?);", LISTS, re.S)
    for name in _names(rest):
        assert "convention" not in inspect.signature(getattr(R, name)).parameters, name


def test_the_install_lines_name_extras_that_exist_and_the_commands_run_files_that_exist():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = {
        extra for group in re.findall(r'pip install (?:-e )?"\.\[([a-z,]+)\]"', README) for extra in group.split(",")
    }
    assert named and named <= set(extras)
    assert {"files", "test", "examples", "docs"} <= named
    for script in re.findall(r"^python (examples/\S+\.py)", README, re.M):
        assert (ROOT / script).is_file(), script
    assert "python -m pytest" in README


def test_no_figure_that_goes_stale_with_the_next_test():
    """A count of the tests ("5,278 tests") is wrong as soon as one is added: the README states
    the suite's run time without one."""
    assert re.findall(r"\b\d[\d,]* tests\b", README) == []


def test_what_ci_runs_is_what_the_readme_says():
    """The README says .ci/run checks the docs' rendering where Chromium is installed: it does,
    after building the docs, and the check skips with a printed line without a browser."""
    if not (ROOT / ".ci" / "run").exists():
        pytest.skip("the tests run from an sdist (the wheel check of .ci/run), which carries no .ci/run")
    ci = (ROOT / ".ci" / "run").read_text()
    assert "docs/check_rendering.py" in README
    build = ci.index("python -m sphinx -W -q -b html docs docs/_build/html")
    check = ci.index("python docs/check_rendering.py --no-build")
    assert build < check
    source = (ROOT / "docs" / "check_rendering.py").read_text()
    assert 'print("check_rendering: skipped, no Chromium found' in source
