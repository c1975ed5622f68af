import numpy as np
import pytest
import torch

import ignite_recsys as R
from ignite_recsys._registry import DEFAULT_METRICS, REGISTRY


def class_of(entry):
    """The class of a registry entry (its ``class_name`` among the library's public names)."""
    return getattr(R, entry.class_name)


# name -> class of every default ranking metric with a cut-off, from the library's registry
CUTOFF_CLASSES = {name: class_of(REGISTRY[name]) for name in DEFAULT_METRICS}


def run_metric(metric, batches):
    metric.reset()
    for batch in batches:
        metric.update(batch)
    return metric.compute()


def eager_error(make, batch) -> str:
    """The ValueError a fresh ``make()`` raises in ``update`` for ``batch`` on a CPU (the value
    checks read at once), as text: what the deferred (GPU) path must name in ``compute()``."""
    with pytest.raises(ValueError) as raised:
        make().update(batch)
    return str(raised.value)


def random_batch(rng, users, items, *, graded=False, ties=False, relevant_share=0.3, zero_users=0):
    """Scores (float32) and relevance (float32) with optional heavy ties and empty users."""
    if ties:
        scores = rng.integers(0, 4, size=(users, items)).astype(np.float32)
    else:
        scores = rng.permutation(users * items).reshape(users, items).astype(np.float32)
    relevant = rng.random((users, items)) < relevant_share
    labels = rng.integers(1, 5, size=(users, items)) if graded else np.ones((users, items))
    relevance = np.where(relevant, labels, 0).astype(np.float32)
    relevance[:zero_users] = 0
    return torch.from_numpy(scores), torch.from_numpy(relevance)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# --- What the tests ported from pytorch/ignite expect (tests/test_ignite_port_*.py) --------------
# ignite's own tests/ignite/conftest.py provides `available_device` and a class-scoped
# `distributed` fixture; these are small stand-ins with the same names. Under `distributed`, each
# test runs in IGNITE_PORT_WORLD_SIZE spawned gloo processes on CPU (ignite's CI launches the
# processes with pytest-xdist instead); 2 processes, as the CI machine has 2 cores.
IGNITE_PORT_WORLD_SIZE = 2


@pytest.fixture(params=["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def available_device(request):
    return request.param


@pytest.fixture(params=["gloo_cpu"], scope="class")
def distributed(request):
    return {"backend": "gloo", "world_size": IGNITE_PORT_WORLD_SIZE, "spawn": True}


def _gloo_test_worker(local_rank, test, kwargs):
    test(**kwargs)


def _run_in_gloo_processes(test, world_size, **kwargs):
    from gloo import launch

    launch(_gloo_test_worker, test, kwargs, processes=world_size)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """A test using the `distributed` fixture above runs in spawned gloo processes; an exception
    or failed assertion in any of them fails the test."""
    context = pyfuncitem.funcargs.get("distributed")
    if "distributed" in pyfuncitem.fixturenames and isinstance(context, dict) and context.get("spawn"):
        import functools

        pyfuncitem.obj = functools.partial(_run_in_gloo_processes, pyfuncitem.obj, context["world_size"])
