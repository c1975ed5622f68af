"""The accelerator path without an accelerator: every metric's ``update`` runs on the ``meta``
device with meta inputs. A meta tensor has a shape and a dtype but no values: reading one on the
host (``.item()``, ``.tolist()``, ``bool()``), a shape that depends on values (``nonzero``,
boolean indexing, ``coalesce``) and a CPU tensor mixed into an operation all raise. So an update
that runs through here makes no host read and keeps every tensor on the metric's device, which on
CUDA means no synchronisation with the GPU.

Every ranking and catalog metric of the harness, in every input form (dense, sparse COO coalesced
or not, CSR, ItemIds targets; dense scores or RankedItems; every exclusion form), both tie rules,
plain, with per-user values, with user groups, and inside Paired.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.overrides import TorchFunctionMode

import ignite_recsys as R
import harness as H

META = torch.device("meta")
NUM_GROUPS = 3


class NoCopiesFromHost(TorchFunctionMode):
    """Raises where a tensor is made from host data on another device, or a CPU tensor is moved
    there without ``non_blocking=True``: on CUDA either is a copy from pageable memory, which
    waits for the GPU (``tuning.device_constant`` copies its constants from pinned memory without
    blocking). A meta tensor made from a Python list raises nothing by itself."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if func in (torch.tensor, torch.as_tensor) and args and not isinstance(args[0], torch.Tensor):
            moved = isinstance(result, torch.Tensor) and result.device.type != "cpu"
        else:
            source = args[0] if args else None
            moved = (
                func in (torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.copy_)
                and not kwargs.get("non_blocking", False)
                and isinstance(source, torch.Tensor)
                and isinstance(result, torch.Tensor)
                and (source.device.type == "cpu") != (result.device.type == "cpu")
            )
            if func is torch.Tensor.copy_ and len(args) > 1 and isinstance(args[1], torch.Tensor):
                moved = args[1].device.type == "cpu" and args[0].device.type != "cpu" and not kwargs.get("non_blocking")
        if moved:
            raise RuntimeError(f"{getattr(func, '__name__', func)}: host data copied to {result.device}")
        return result


def to_meta(value, coalesced: bool = True):
    """``value`` (a tensor, sparse tensor, ItemIds, RankedItems or None) with its tensors on the meta
    device; a sparse COO tensor keeps its entries (as meta) and is flagged coalesced or not."""
    if value is None:
        return None
    if isinstance(value, R.ItemIds):
        return R.ItemIds(value.ids.to(META), value.grades.to(META))
    if isinstance(value, R.RankedItems):
        return R.RankedItems(value.ids.to(META))
    if value.layout == torch.sparse_coo:
        value = value.coalesce()
        return torch.sparse_coo_tensor(
            value.indices().to(META),
            value.values().to(META),
            value.shape,
            is_coalesced=coalesced,
            check_invariants=False,
        )
    if value.layout == torch.sparse_csr:
        return torch.sparse_csr_tensor(
            value.crow_indices().to(META),
            value.col_indices().to(META),
            value.values().to(META),
            value.shape,
            check_invariants=False,
        )
    return value.to(META)


def _forms(variant):
    targets = H.TARGET_FORMS + ("coo_uncoalesced",)
    excludes = tuple(form for form in H.EXCLUDE_FORMS if form in variant.axes["exclude"]) + ("coo_uncoalesced",)
    ties = H.TIES if variant.average_ties and variant.family in ("ranking", "ranking_metrics") else ("stable",)
    return itertools.product(targets, H.PREDICTION_FORMS, excludes, ties)


def _inputs(target, prediction, exclude):
    data = H.DATA
    y = H.target_form(data.labels, target.replace("_uncoalesced", ""))
    y_pred = H.prediction_form(data, prediction)
    excluded = H.exclude_form(data.excluded, exclude.replace("_uncoalesced", ""))
    return (
        to_meta(y_pred),
        to_meta(y, coalesced=target != "coo_uncoalesced"),
        to_meta(excluded, coalesced=exclude != "coo_uncoalesced"),
    )


def _build(variant, prediction, ties, mode):
    case = H.Case(variant.name, prediction=prediction, ties=ties, per_user=mode == "per_user", device="meta")
    metric = variant.build(case, H.DATA)
    if mode == "groups":  # the same configuration with user groups
        arguments = {key: value for key, value in metric._arguments.items() if key != "num_groups"}
        metric = type(metric)(**arguments, num_groups=NUM_GROUPS)
    return metric


MODES = ("plain", "per_user", "groups", "paired")
CASES = [
    pytest.param(
        variant, target, prediction, exclude, ties, id=f"{variant.name}-{target}-{prediction}-{exclude}-{ties}"
    )
    for variant in H.VARIANTS.values()
    if not variant.two_lists  # two models' lists: on the meta device in test_beyond_families.py
    for target, prediction, exclude, ties in _forms(variant)
]


@pytest.mark.slow
@pytest.mark.parametrize("variant, target, prediction, exclude, ties", CASES)
def test_update_runs_on_the_meta_device(variant, target, prediction, exclude, ties):
    y_pred, y, exclude_meta = _inputs(target, prediction, exclude)
    rest = () if exclude_meta is None else (exclude_meta,)
    modes = MODES if variant.family != "catalog" else ("plain",)
    for mode in modes:
        metric = _build(variant, prediction, ties, mode)
        with NoCopiesFromHost():
            states = _update(metric, mode, y_pred, y, rest)
        assert all(state.device == META and state.dtype == torch.float64 for state in states), mode


def _update(metric, mode, y_pred, y, rest) -> list:
    """Updates ``metric`` once in ``mode``; returns its state tensors."""
    if mode == "paired":
        metric = R.Paired(metric)
        metric.update((y_pred, y_pred, y, *rest))
    else:
        groups = torch.zeros(H.DATA.users, dtype=torch.int64, device=META)
        tags = (R.UserGroups(groups),) if mode == "groups" else ()
        metric.update((y_pred, y, *rest, *tags))
    return [getattr(metric, key) for key in metric._state_dict_all_req_keys]


def test_copies_from_the_host_are_caught():
    """The check itself: the mode above raises on a tensor made from a list on the device and on a
    CPU tensor moved there, and lets device-side work through."""
    with NoCopiesFromHost():
        with pytest.raises(RuntimeError, match="host data copied"):
            torch.tensor([1, 2], device=META)
        with pytest.raises(RuntimeError, match="host data copied"):
            torch.arange(3).to(META)
        torch.arange(3).to(META, non_blocking=True)  # from pinned memory on CUDA: no wait
        with pytest.raises(RuntimeError, match="host data copied"):
            torch.zeros(3, device=META).copy_(torch.ones(3))
        torch.stack([torch.zeros((), device=META), torch.full((), 2.0, device=META)])


def test_meta_inputs_are_refused_where_a_value_is_needed():
    """The check itself: a host read of a meta tensor raises (what the test above relies on)."""
    with pytest.raises((NotImplementedError, RuntimeError)):
        torch.zeros(2, device=META).sum().item()
    with pytest.raises((NotImplementedError, RuntimeError)):
        torch.zeros(2, device=META).nonzero()
