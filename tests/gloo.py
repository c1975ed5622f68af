"""Runs a test's worker in several gloo processes on the CPU and collects what each rank wrote."""

from __future__ import annotations

import json
import os
import socket
import tempfile
from unittest import mock

import ignite.distributed as idist


def free_port() -> int:
    """A TCP port free on this machine now (a fixed port collides with concurrent runs)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# The processes see no GPU (on a machine with one, ignite gives each rank a device of its own,
# ``cuda:rank``) and run one thread each (torch, and numba under ranx): they share the cores.
_PROCESS_ENVIRONMENT = {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}


def launch(worker, *args, processes: int = 2) -> None:
    """Runs ``worker(local_rank, *args)`` in ``processes`` gloo processes on the CPU; an exception
    in any of them raises here."""
    with mock.patch.dict(os.environ, _PROCESS_ENVIRONMENT):
        with idist.Parallel(
            backend="gloo", nproc_per_node=processes, master_addr="127.0.0.1", master_port=free_port()
        ) as parallel:
            parallel.run(worker, *args)


def run_in_processes(worker, *args, processes: int = 2) -> list:
    """Runs ``worker(local_rank, folder, *args)`` as :func:`launch` does and returns the JSON each
    rank wrote to ``folder/rank{rank}.json``, by rank."""
    with tempfile.TemporaryDirectory() as folder:
        launch(worker, folder, *args, processes=processes)
        results = []
        for rank in range(processes):
            with open(os.path.join(folder, f"rank{rank}.json")) as handle:
                results.append(json.load(handle))
        return results
