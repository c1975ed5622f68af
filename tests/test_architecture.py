"""The package's import graph has no cycle, counting every import (at module level or inside a
function: a lazy import that only hides a cycle counts as the cycle it hides)."""

from __future__ import annotations

import ast
import inspect
import pathlib
import tomllib

import pytest

import ignite_recsys
import ignite_recsys as R
from ignite_recsys import _validation as V

PACKAGE = pathlib.Path(ignite_recsys.__file__).parent


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _imports(name: str, path: pathlib.Path, modules: dict) -> set:
    """The package's modules that ``name`` imports (``from .x import y`` imports ``x.y`` when that
    is a module, else ``x``)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    found.add(f"{target}.{alias.name}")
                elif target in modules:
                    found.add(target)
    found.discard(name)
    return found


def _cycle(graph: dict):
    """A cycle of the graph as a list of modules, or None."""
    state: dict = {}
    stack: list = []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for other in sorted(graph[node]):
            if state.get(other) == "open":
                return stack[stack.index(other) :] + [other]
            if other not in state:
                found = visit(other)
                if found:
                    return found
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_import_graph_has_no_cycle():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert graph["ignite_recsys.metrics._state"] >= {"ignite_recsys._validation", "ignite_recsys.metrics._engine"}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


# --- Composition: a short chain of classes, constructors checked in the open ---------------------
def _metric_classes() -> list:
    """Every subclass of ignite's Metric that the package defines."""
    import importlib
    import inspect

    from ignite.metrics import Metric

    found: dict = {}
    for name in sorted(_modules()):
        for value in vars(importlib.import_module(name)).values():
            if inspect.isclass(value) and issubclass(value, Metric) and value.__module__.startswith("ignite_recsys"):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return list(found.values())


def _package_classes(cls) -> list:
    return [klass.__name__ for klass in cls.__mro__ if klass.__module__.startswith("ignite_recsys")]


def test_every_metric_class_has_at_most_five_package_classes_in_its_mro():
    classes = _metric_classes()
    assert len(classes) > 40
    long = {cls.__name__: _package_classes(cls) for cls in classes if len(_package_classes(cls)) > 5}
    assert long == {}
    assert _package_classes(__import__("ignite_recsys").NDCG) == [
        "NDCG",
        "CutoffResults",
        "RankingMean",
        "UserMean",
        "StatefulMetric",
    ]


_CHECKED = V.checks_constructor(lambda self: None).__code__  # the code of every checks_constructor wrapper


def test_no_constructor_is_wrapped_at_class_creation():
    """The one wrapper a constructor carries is the ``@V.checks_constructor`` written above it in
    its class body: nothing rewrites a constructor when its class is created."""
    wrapped = {}
    for cls in _metric_classes():
        init = vars(cls).get("__init__")
        if init is None or not hasattr(init, "__wrapped__"):
            continue
        decorators = inspect.getsource(init).split("def __init__")[0]
        wrapped[cls.__name__] = init.__code__ is _CHECKED and "@V.checks_constructor" in decorators
    assert len(wrapped) >= 10
    assert [name for name, declared in wrapped.items() if not declared] == []


def test_every_metric_constructor_checks_its_arguments_at_its_top():
    """Each constructor a metric class defines has its arguments checked before its body runs:
    decorated with ``checks_constructor`` (bound to its signature), or calling
    ``configure(self, args, kwargs)`` (a list metric's registry-declared signature). The shared
    bases take the arguments their subclass checked."""
    bases = {"StatefulMetric", "UserMean", "StreamingMean"}
    unchecked = []
    for cls in _metric_classes():
        init = vars(cls).get("__init__")
        if init is None or cls.__name__ in bases or init.__code__ is _CHECKED:
            continue
        if not {"configure", "_validate_call"} & set(init.__code__.co_names):
            unchecked.append(f"{cls.__module__}.{cls.__qualname__}")
    assert unchecked == []


def test_checks_constructor_binds_to_the_class_that_runs_the_constructor():
    """A class that inherits a checked constructor binds to its own declared signature (Recall's
    ``normalization``, declared by its registry entry, reaches the shared constructor); a
    subclass's own constructor forwarding to a checked one is checked by that one's signature."""
    recall = R.Recall([3, 1], normalization="min_k_relevant")
    assert (recall.top_k, recall.normalization) == ([1, 3], "min_k_relevant")
    with pytest.raises(TypeError, match=r"^RankingMean.__init__\(\) got an unexpected keyword argument 'discount'"):
        R.Recall([3], discount="log2")  # NDCG's option, not Recall's

    class Shallow(R.NDCG):
        def __init__(self, k):
            super().__init__(top_k=k, discount="log2_clip")

    shallow = Shallow(2)
    assert (shallow.top_k, shallow.discount, shallow._arguments["ideal"]) == ([2], "log2_clip", "achievable")
    with pytest.raises(ValueError, match="top_k must be list of positive integers only"):
        Shallow(0)


def test_a_constructor_warning_points_at_the_users_line():
    """SampledMetrics' warning for an unbounded estimator names the line that built it, past the
    constructor's checks_constructor wrapper."""
    with pytest.warns(UserWarning, match="unconstrained least-bias correction") as caught:
        R.SampledMetrics(estimators=["kr_bias_unbounded"])
    assert caught[0].filename == __file__


def _function_lengths(source: str) -> dict:
    """Each function of ``source`` (by qualified line) and its length in lines, docstring excluded."""
    lengths = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                length -= first.end_lineno - first.lineno + 1
            lengths[f"{node.name} (line {node.lineno})"] = length
    return lengths


def test_no_function_is_longer_than_a_screen():
    """At most 80 lines a function (its signature included, its docstring not)."""
    long = {
        f"{path.relative_to(PACKAGE)}: {name}": length
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, length in _function_lengths(path.read_text()).items()
        if length > 80
    }
    assert long == {}


def test_the_function_length_check_counts_lines_without_the_docstring():
    body = "\n".join(f"    x{i} = {i}" for i in range(81))
    assert list(_function_lengths(f'def f():\n    """Doc.\n\n    more."""\n{body}\n').values()) == [82]


def test_the_whole_package_is_type_checked():
    """No module is left out of mypy's checks (``ignore_errors`` in pyproject.toml)."""
    pyproject = pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("no pyproject.toml beside the tests")
    mypy = tomllib.loads(pyproject.read_text())["tool"]["mypy"]
    assert mypy["files"] == ["ignite_recsys"]
    assert not any(override.get("ignore_errors") for override in mypy.get("overrides", []))


# --- No reading of the caller's variables or frames ------------------------------------------------
_FRAME_ACCESS = ("locals()", "currentframe", "f_back", "_getframe")
# Python < 3.12 has no warnings.warn(skip_file_prefixes=...): the stacklevel that reaches the
# user's line past a varying number of library frames is counted there, in this one function
_FRAME_ACCESS_ALLOWED = {("_core/input_checks.py", "_outside_stacklevel")}


def _frame_access(source: str, relative: str) -> list:
    """``relative:line: text`` of each line of ``source`` naming one of ``_FRAME_ACCESS`` outside
    the functions of ``_FRAME_ACCESS_ALLOWED``."""
    allowed_lines: set = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and (relative, node.name) in _FRAME_ACCESS_ALLOWED:
            allowed_lines.update(range(node.lineno, node.end_lineno + 1))
    return [
        f"{relative}:{number}: {line.strip()}"
        for number, line in enumerate(source.splitlines(), 1)
        if any(name in line for name in _FRAME_ACCESS) and number not in allowed_lines
    ]


def test_no_locals_or_frames_in_the_package():
    """Arguments reach their checks bound by signature and warnings find the user's line without
    the call stack: no ``locals()``, ``inspect.currentframe``, ``f_back`` or ``sys._getframe``
    in the package but the one documented place (Python < 3.12's warning stacklevel)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        found += _frame_access(path.read_text(encoding="utf-8"), relative)
    assert found == []
    # the check finds each name, and the exception covers its function alone
    probe = "def f():\n    return locals()\ndef _outside_stacklevel():\n    return sys._getframe(2).f_back\n"
    assert _frame_access(probe, "x.py") == ["x.py:2: return locals()", "x.py:4: return sys._getframe(2).f_back"]
    assert _frame_access(probe, "_core/input_checks.py") == ["_core/input_checks.py:2: return locals()"]
    assert _frame_access("frame = inspect.currentframe()\n", "y.py") == ["y.py:1: frame = inspect.currentframe()"]
