"""Sphinx configuration. Build: ``python -m sphinx -W -b html docs docs/_build/html``.

The per-metric reference pages are written at build time (into ``docs/api/``, not in git) from
``ignite_recsys.__all__``: one page per metric with its docstring (formula, arguments, example,
the library convention it matches) and its methods.
"""

import ast
import inspect
import pathlib
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))

import ignite_recsys  # noqa: E402
from ignite.metrics import Metric  # noqa: E402
from ignite_recsys._registry import ENTRIES, LIST_ENTRIES, LIST_NEEDS  # noqa: E402
from ignite_recsys.metrics import FAMILIES  # noqa: E402

project = "ignite_recsys"
author = "the ignite_recsys developers"
copyright = "the ignite_recsys developers"
release = ignite_recsys.__version__
# MathJax from the sphinx-mathjax-offline package (copied into _static/mathjax), not from a CDN:
# the formulas render without network access.
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
myst_enable_extensions = ["dollarmath"]
exclude_patterns = ["_build"]
autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_preserve_defaults = True
autodoc_inherit_docstrings = False
napoleon_google_docstring = True
html_theme = "alabaster"
html_theme_options = {"page_width": "1240px", "sidebar_width": "220px", "body_max_width": "none"}
html_static_path = ["_static"]
html_css_files = ["custom.css"]  # code blocks, tables and formulas stay within the text column
nitpicky = False

GROUPS = {
    **FAMILIES,  # the metric classes, by family
    "Input forms and diagnostics": [
        "ItemIds",
        "RankedItems",
        "DotScores",
        "Observed",
        "UserGroups",
        "UserIds",
        "BoundaryTieWarning",
        "InputWarning",
    ],
    "Statistics": ["PairedTestResult", "PerUserValues", "Report", "Paired", "GroupGap"],
    "Files and data frames": ["Interactions", "IdMap", "EvaluationResult"],
}

# The first sentence of the pages of the input forms: which side of ``update((y_pred, y[, exclude]))``.
SIDES = {
    "ItemIds": "``ItemIds`` goes on the ``y`` side of the update tuple: the targets (each user's relevant "
    "items), or the third element, ``exclude`` (the items to leave out of the ranking), as padded "
    "item ids.",
    "RankedItems": "``RankedItems`` goes on the ``y_pred`` side of the update tuple: the predictions, as "
    "each user's ranked item ids, best first.",
    "DotScores": "``DotScores`` goes on the ``y_pred`` side of the update tuple: the predictions, as user "
    "and item vectors whose dot products (plus an item bias) are the scores, ranked a tile of items at a time.",
    "Observed": "``Observed`` goes in the third place of the update tuple of ``AUC``, ``LogLoss``, ``MAE`` "
    "and ``RMSE``: the entries they count (a bare bool tensor there is ``exclude``, which they refuse).",
}


def _write_metric_pages(app):
    listed = [name for names in GROUPS.values() for name in names]
    metrics = [name for name in ignite_recsys.__all__ if isinstance(getattr(ignite_recsys, name), type)]
    missing = sorted(set(metrics) - set(listed))  # functions are documented where they are used
    if missing:
        raise RuntimeError(f"docs/conf.py GROUPS lacks {missing}")
    folder = ROOT / "api"
    folder.mkdir(exist_ok=True)
    index = [
        "Metric reference",
        "================",
        "",
        "Every metric is an :class:`ignite.metrics.Metric`: ``reset()``, ``update(output)``, "
        "``compute()``, ``attach(engine, name)``. :doc:`../arguments` lists the arguments they share; "
        ":doc:`ranking_metrics_table` the ranking metrics at a glance.",
        "",
        ".. toctree::",
        "   :hidden:",
        "",
        "   ranking_metrics_table",
        "",
    ]
    for group, names in GROUPS.items():
        index += [group, "-" * len(group), "", ".. toctree::", "   :maxdepth: 1", ""]
        index += [f"   {name}" for name in names] + [""]
        for name in names:
            members = [
                m
                for m in (
                    "update",
                    "compute",
                    "compute_dict",
                    "reset",
                    "error_bound",
                    "tail_items",
                    "boundary_tie_share",
                    "confidence_interval",
                    "per_user",
                    "per_user_ids",
                    "compute_groups",
                    "confidence_interval_groups",
                    "group_counts",
                    "to_markdown",
                    "to_latex",
                    "caption",
                    "marker",
                    "from_frame",
                    "csr",
                    "item_ids",
                    "counts",
                    "user_ids",
                    "original_users",
                    "from_values",
                    "encode",
                    "decode",
                    "to_pandas",
                    "to_report",
                    "compare",
                )
                if m in dir(getattr(ignite_recsys, name))
            ]
            page = [
                name,
                "=" * len(name),
                "",
                f".. autoclass:: ignite_recsys.{name}",
                f"   :members: {', '.join(members)}",
                "",
            ]
            if issubclass(getattr(ignite_recsys, name), Metric):
                page += [
                    "Arguments not described above (``top_k``, ``ignore_zero_hits``, ``relevance_threshold``, "
                    "``ties``, ``output_transform``, ``device``, ``skip_unrolling``) are described in "
                    ":doc:`../arguments`; conventions of other libraries in :doc:`../conventions`.",
                    "",
                ]
            else:
                has_inputs_page = (ROOT / "inputs.md").exists() and name in ("ItemIds", "RankedItems")
                page += ["See :doc:`../inputs` for the input forms." if has_inputs_page else "", ""]
            if name in SIDES:  # the page starts with the side of the update tuple the form belongs to
                page[3:3] = [SIDES[name], ""]
            _write_if_changed(folder / f"{name}.rst", "\n".join(page))
    _write_if_changed(folder / "index.rst", "\n".join(index))


def _write_registry_page(app):
    """The table of the ranking metrics, read from the library's registry (the same table
    RankingMetrics, the classes and the tests read)."""
    rows = []
    for entry in ENTRIES:
        name = f"``{entry.name}@k``" if entry.has_cutoff else f"``{entry.name}``"
        options = []
        for option in entry.options:
            choices = "; ".join(
                f"``{c.value!r}``{' (default)' if c.value == option.default else ''}: {c.reproduces}"
                for c in option.choices
            )
            keyword = option.name if option.name == option.argument else f"{option.name}`` / ``{option.argument}"
            options.append(f"``{keyword}``: {choices}")
        options = "; ".join(options) if options else "—"
        description = entry.summary.replace("|", "\\|")  # |R| is not a substitution
        if entry.reproduces:
            description += f" Reproduces: {entry.reproduces}."
        rows.append([name, f":class:`~ignite_recsys.{entry.class_name}`", description, options])
    lines = [
        "The ranking metrics",
        "===================",
        "",
        "Every ranking metric, its class, its name in :class:`~ignite_recsys.RankingMetrics` "
        '(``metrics=[...]`` and the ``"name@k"`` keys of its results) and the conventions '
        "it offers (its class's keyword / RankingMetrics' keyword), with the libraries each choice "
        "reproduces.",
        "",
        ".. list-table::",
        "   :header-rows: 1",
        "   :widths: 12 14 34 40",
        "",
        "   * - name",
        "     - class",
        "     - what it measures",
        "     - conventions",
    ]
    for row in rows:
        lines.append(f"   * - {row[0]}")
        lines += [f"     - {cell}" for cell in row[1:]]
    _write_if_changed(ROOT / "api" / "ranking_metrics_table.rst", "\n".join(lines) + "\n")


def _write_if_changed(path, text):
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _defaults_by_bytes(app, obj, bound_method):
    """Sphinx's ``autodoc_preserve_defaults`` cuts each default's source text by the AST's column
    offsets, which count UTF-8 bytes, not characters: on a line with a non-ASCII character before
    or in a default (``Report.caption(dagger="†", ...)``) the text comes out shifted and mangled.
    Runs after Sphinx's own handler and reads those defaults again, by bytes."""
    function = getattr(obj, "__func__", obj)
    signature = getattr(obj, "__signature__", None) or getattr(function, "__signature__", None)
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return
    if signature is None or source.isascii():
        return
    node = ast.parse(source).body[0]
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return
    lines = [line.encode() for line in source.splitlines()]
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p.name for p in signature.parameters.values() if p.kind in kinds and p.default is not p.empty]
    keyword = [p.name for p in signature.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    nodes = dict(zip(positional, node.args.defaults[-len(positional) :] if positional else []))
    nodes.update({name: value for name, value in zip(keyword, node.args.kw_defaults) if value is not None})
    parameters = []
    for parameter in signature.parameters.values():
        value = nodes.get(parameter.name)
        if value is not None and value.lineno == value.end_lineno and hasattr(parameter.default, "name"):
            text = lines[value.lineno - 1][value.col_offset : value.end_col_offset].decode()
            parameter = parameter.replace(default=type(parameter.default)(text))  # Sphinx's DefaultValue
        parameters.append(parameter)
    try:
        obj.__signature__ = signature.replace(parameters=parameters)
    except AttributeError:
        function.__signature__ = signature.replace(parameters=parameters)


def _write_list_registry_page(app):
    """The table of the metrics of the top-k lists (included by beyond_accuracy.md), read from the
    library's registry (the same entries the classes, ``functional`` and the tests read)."""
    lines = [
        "| metric | measures | kind | reads | source / convention | reproduces |",
        "|---|---|---|---|---|---|",
    ]
    for entry in LIST_ENTRIES:
        reads = ", ".join(f"`{need}`" for need in entry.needs if need in LIST_NEEDS) or "the lists only"
        name = f"`{entry.class_name}`" + (f" (`functional.{entry.name}`)" if entry.per_user else "")
        lines.append(f"| {name} | {entry.summary} | {entry.kind} | {reads} | {entry.source} | {entry.reproduces} |")
    _write_if_changed(ROOT / "api" / "list_metrics_table.inc", "\n".join(lines) + "\n")


def setup(app):
    app.connect("autodoc-before-process-signature", _defaults_by_bytes)
    app.connect("builder-inited", _write_metric_pages)
    app.connect("builder-inited", _write_registry_page)
    app.connect("builder-inited", _write_list_registry_page)
