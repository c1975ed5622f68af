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

import ignite_recsys as R
import harness as H

META = torch.device("meta")
NUM_GROUPS = 3


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
        if mode == "paired":
            metric = R.Paired(metric)
            metric.update((y_pred, y_pred, y, *rest))
            states = [getattr(metric, key) for key in metric._state_dict_all_req_keys]
        else:
            tags = (
                (R.UserGroups(torch.zeros(H.DATA.users, dtype=torch.int64, device=META)),) if mode == "groups" else ()
            )
            metric.update((y_pred, y, *rest, *tags))
            states = [getattr(metric, key) for key in metric._state_dict_all_req_keys]
        assert all(state.device == META and state.dtype == torch.float64 for state in states), mode


def test_meta_inputs_are_refused_where_a_value_is_needed():
    """The check itself: a host read of a meta tensor raises (what the test above relies on)."""
    with pytest.raises((NotImplementedError, RuntimeError)):
        torch.zeros(2, device=META).sum().item()
    with pytest.raises((NotImplementedError, RuntimeError)):
        torch.zeros(2, device=META).nonzero()
