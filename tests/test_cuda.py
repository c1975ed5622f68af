"""The CUDA path on a real GPU (skipped without one).

Every ranking and catalog metric of the harness, in every input form the ``meta``-device test
covers (dense, sparse COO coalesced or not, CSR, ItemIds targets; dense scores or RankedItems;
every exclusion form), both tie rules, plain, with per-user values, with user groups and inside
Paired:

* ``update`` runs under ``torch.cuda.set_sync_debug_mode("error")``: any synchronisation with the
  host (``.item()``, ``nonzero``, a boolean index, a copy to the CPU) raises;
* the state stays on the GPU in float64, and ``compute`` equals the CPU path's to 1e-12.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import ignite_recsys as R
import harness as H
from test_meta_device import CASES, MODES, NUM_GROUPS

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _uncoalesced(value):
    """A sparse COO tensor flagged as not coalesced (its entries unchanged)."""
    value = value.coalesce()
    return torch.sparse_coo_tensor(value.indices(), value.values(), value.shape, is_coalesced=False)


def _inputs(target, prediction, exclude, device):
    data = H.DATA
    y = H.target_form(data.labels, target.replace("_uncoalesced", ""), device=device)
    y_pred = H.prediction_form(data, prediction, device=device)
    excluded = H.exclude_form(data.excluded, exclude.replace("_uncoalesced", ""), device=device)
    if target == "coo_uncoalesced":
        y = _uncoalesced(y)
    if exclude == "coo_uncoalesced" and excluded is not None:
        excluded = _uncoalesced(excluded)
    return y_pred, y, excluded


def _build(variant, prediction, ties, mode, device):
    case = H.Case(variant.name, prediction=prediction, ties=ties, per_user=mode == "per_user", device=device)
    metric = variant.build(case, H.DATA)
    if mode == "groups":
        arguments = {key: value for key, value in metric._arguments.items() if key != "num_groups"}
        metric = type(metric)(**arguments, num_groups=NUM_GROUPS)
    if mode == "paired":
        metric = R.Paired(metric)
    return metric


def _update(metric, mode, y_pred, y, excluded, device):
    rest = () if excluded is None else (excluded,)
    if mode == "paired":
        metric.update((y_pred, y_pred, y, *rest))
        return
    tags = ()
    if mode == "groups":
        groups = torch.arange(H.DATA.users, device=device) % NUM_GROUPS
        tags = (R.UserGroups(groups),)
    metric.update((y_pred, y, *rest, *tags))


def _numbers(value) -> list[float]:
    """Every number in a result (dicts, tuples, dataclasses, tensors), in a fixed order."""
    if isinstance(value, dict):
        return [number for key in sorted(value, key=str) for number in _numbers(value[key])]
    if isinstance(value, (list, tuple)):
        return [number for item in value for number in _numbers(item)]
    if dataclasses.is_dataclass(value):
        return _numbers(dataclasses.astuple(value))
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", torch.float64).flatten().tolist()
    if isinstance(value, (int, float)):
        return [float(value)]
    return []


def _assert_state_on(metric, device_type, mode):
    for key in metric._state_dict_all_req_keys:
        state = getattr(metric, key)
        if isinstance(state, torch.Tensor):
            assert state.device.type == device_type and state.dtype == torch.float64, (mode, key)


@pytest.mark.parametrize("variant, target, prediction, exclude, ties", CASES)
def test_cuda_update_is_sync_free_and_equals_cpu(variant, target, prediction, exclude, ties):
    modes = MODES if variant.family != "catalog" else ("plain",)
    cuda_inputs = _inputs(target, prediction, exclude, "cuda")
    cpu_inputs = _inputs(target, prediction, exclude, "cpu")
    for mode in modes:
        on_gpu = _build(variant, prediction, ties, mode, "cuda")
        on_cpu = _build(variant, prediction, ties, mode, "cpu")
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(2):  # a second batch adds to the state
                _update(on_gpu, mode, *cuda_inputs, "cuda")
        finally:
            torch.cuda.set_sync_debug_mode("default")
        for _ in range(2):
            _update(on_cpu, mode, *cpu_inputs, "cpu")
        _assert_state_on(on_gpu, "cuda", mode)
        got, want = _numbers(on_gpu.compute()), _numbers(on_cpu.compute())
        assert len(got) == len(want) > 0, mode
        for a, b in zip(got, want):
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12, abs=1e-12), mode
