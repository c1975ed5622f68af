"""Optional dependencies of :mod:`ignite_recsys.data`, imported only where they are used."""

from __future__ import annotations

import importlib
from types import ModuleType

EXTRA = 'pip install "ignite_recsys[files]"'


def require(module: str, purpose: str) -> ModuleType:
    """``import module``, or an ImportError that names the extra providing it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        package = module.split(".")[0]
        raise ImportError(
            f"{purpose} needs the package {package!r}, which is not installed: {EXTRA} installs it "
            f"(with pyarrow, pandas and polars)"
        ) from error


def loaded(module: str) -> ModuleType | None:
    """The module if it is importable, else None (no error)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None
