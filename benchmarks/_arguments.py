"""Argument types shared by the benchmark scripts (no torch import: the timed children of
``bench_files.py`` load it too)."""

from __future__ import annotations

import argparse


def whole_number(minimum: int):
    """An argparse type: a whole number of at least ``minimum`` (a clear refusal of 0 sizes,
    rows, batches, rounds or runs, which would otherwise fail deep in a run)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number of at least {minimum}, got {text!r}")
        return value

    return parse
