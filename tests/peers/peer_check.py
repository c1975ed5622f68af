"""Assert a peer's value equals the reference's and, when ``PEER_DIFFS_FILE`` is set, append the absolute
difference to that file (``run_all.sh`` prints the largest per check)."""

from __future__ import annotations

import math
import os


def agree(check: str, got, want, tol: float = 1e-9) -> None:
    got, want = float(got), float(want)
    if math.isnan(want) or math.isnan(got):
        assert math.isnan(want) and math.isnan(got), f"{check}: peer {got}, reference {want}"
        diff = 0.0
    else:
        diff = abs(got - want)
        assert diff <= tol, f"{check}: peer {got!r}, reference {want!r}, |diff| {diff:.3g} > {tol:g}"
    path = os.environ.get("PEER_DIFFS_FILE")
    if path:
        with open(path, "a") as f:
            f.write(f"{check}\t{diff!r}\t{tol!r}\n")
