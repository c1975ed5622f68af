"""Sphinx configuration. Build: ``python -m sphinx -W -b html docs docs/_build/html``.

The per-metric reference pages are written at build time (into ``docs/api/``, not in git) from
``ignite_recsys.__all__``: one page per metric with its docstring (formula, arguments, example,
the library convention it matches) and its methods.
"""

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))

import ignite_recsys  # noqa: E402
from ignite.metrics import Metric  # noqa: E402
from ignite_recsys._registry import ENTRIES  # noqa: E402

project = "ignite_recsys"
author = "the ignite_recsys developers"
copyright = "the ignite_recsys developers"
release = ignite_recsys.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.mathjax", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
myst_enable_extensions = ["dollarmath"]
exclude_patterns = ["_build"]
autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_preserve_defaults = True
autodoc_inherit_docstrings = False
napoleon_google_docstring = True
html_theme = "alabaster"
html_theme_options = {"page_width": "1180px", "sidebar_width": "240px"}
nitpicky = False

GROUPS = {
    # every ranking metric of the registry, then the class that computes several at once
    "Ranking quality at cut-offs": [entry.class_name for entry in ENTRIES] + ["RankingMetrics"],
    "Beyond accuracy": ["ItemCoverage", "GiniIndex", "ShannonEntropy", "AveragePopularity", "TailPercentage",
                        "Novelty", "IntraListDiversity", "Serendipity", "EPC", "EFD", "MeanInvUserFreq",
                        "Miscalibration", "APLT", "ACLT", "PopREO", "PopRSP", "ExposureGini", "MeanPopRank",
                        "ItemGroupExposure", "RankBiasedOverlap", "Intersection"],
    "Score-based": ["GAUC", "AUC", "LogLoss", "MAE", "RMSE"],
    "Input forms and diagnostics": ["ItemIds", "RankedItems", "UserGroups", "UserIds", "BoundaryTieWarning",
                                    "InputWarning"],
    "Statistics": ["PairedTestResult", "Report", "Paired", "GroupGap"],
}


def _write_metric_pages(app):
    listed = [name for names in GROUPS.values() for name in names]
    metrics = [name for name in ignite_recsys.__all__ if isinstance(getattr(ignite_recsys, name), type)]
    missing = sorted(set(metrics) - set(listed))  # functions are documented where they are used
    if missing:
        raise RuntimeError(f"docs/conf.py GROUPS lacks {missing}")
    folder = ROOT / "api"
    folder.mkdir(exist_ok=True)
    index = ["Metric reference", "================", "",
             "Every metric is an :class:`ignite.metrics.Metric`: ``reset()``, ``update(output)``, "
             "``compute()``, ``attach(engine, name)``. :doc:`../arguments` lists the arguments they share; "
             ":doc:`ranking_metrics_table` the ranking metrics at a glance.", "",
             ".. toctree::", "   :hidden:", "", "   ranking_metrics_table", ""]
    for group, names in GROUPS.items():
        index += [group, "-" * len(group), "", ".. toctree::", "   :maxdepth: 1", ""]
        index += [f"   {name}" for name in names] + [""]
        for name in names:
            members = [m for m in ("update", "compute", "compute_dict", "reset", "error_bound", "tail_items",
                                   "boundary_tie_share", "confidence_interval", "per_user", "per_user_ids",
                                   "compute_groups", "confidence_interval_groups", "group_counts",
                                   "to_markdown", "to_latex", "caption", "marker")
                       if m in dir(getattr(ignite_recsys, name))]
            page = [name, "=" * len(name), "", f".. autoclass:: ignite_recsys.{name}",
                    f"   :members: {', '.join(members)}", ""]
            if issubclass(getattr(ignite_recsys, name), Metric):
                page += ["Arguments not described above (``top_k``, ``ignore_zero_hits``, ``relevance_threshold``, "
                         "``ties``, ``output_transform``, ``device``, ``skip_unrolling``) are described in "
                         ":doc:`../arguments`; conventions of other libraries in :doc:`../conventions`.", ""]
            else:
                has_inputs_page = (ROOT / "inputs.md").exists() and name in ("ItemIds", "RankedItems")
                page += ["See :doc:`../inputs` for the input forms." if has_inputs_page else "", ""]
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
    lines = ["The ranking metrics", "===================", "",
             "Every ranking metric, its class, its name in :class:`~ignite_recsys.RankingMetrics` "
             "(``metrics=[...]`` and the ``\"name@k\"`` keys of its results) and the conventions "
             "it offers (its class's keyword / RankingMetrics' keyword), with the libraries each choice "
             "reproduces.", "",
             ".. list-table::", "   :header-rows: 1", "   :widths: 12 14 34 40", "",
             "   * - name", "     - class", "     - what it measures", "     - conventions"]
    for row in rows:
        lines.append(f"   * - {row[0]}")
        lines += [f"     - {cell}" for cell in row[1:]]
    _write_if_changed(ROOT / "api" / "ranking_metrics_table.rst", "\n".join(lines) + "\n")


def _write_if_changed(path, text):
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def setup(app):
    app.connect("builder-inited", _write_metric_pages)
    app.connect("builder-inited", _write_registry_page)
