# Ported from pytorch/ignite: tests/ignite/metrics/rec_sys/test_hitrate_metric.py
# at master de08e799cfb55a6cf4aa778575d6bad725385453, where the file was last changed by
# commit dc85d0f935d4 (the same file as in the installed release 0.5.5).
# Changed: the import of the metric (ignite_recsys instead of ignite.metrics.rec_sys), and
# ignite's private state attribute `_hits_per_k` (test_accumulator_detached and
# TestDistributed.test_accumulator_device), which is `_sum` here: the same per-k sums, so the
# same property is tested (marked 'adapted'). Everything else is ignite's test as written.
# The fixtures `available_device` and `distributed` are stand-ins in tests/conftest.py for
# ignite's tests/ignite/conftest.py: each `distributed` test runs in 2 spawned gloo processes
# on CPU (2 processes, for a 2-core CI machine).
#
# The original file is distributed under the following license:
#
# BSD 3-Clause License
#
# Copyright (c) 2018-present, PyTorch-Ignite team
# All rights reserved.
#
# Redistribution and use in source and binary forms, with or without
# modification, are permitted provided that the following conditions are met:
#
# * Redistributions of source code must retain the above copyright notice, this
#   list of conditions and the following disclaimer.
#
# * Redistributions in binary form must reproduce the above copyright notice,
#   this list of conditions and the following disclaimer in the documentation
#   and/or other materials provided with the distribution.
#
# * Neither the name of the copyright holder nor the names of its
#   contributors may be used to endorse or promote products derived from
#   this software without specific prior written permission.
#
# THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS"
# AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE
# IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE
# DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR CONTRIBUTORS BE LIABLE
# FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL
# DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR
# SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER
# CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY,
# OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE
# OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.

import pytest
import torch
import numpy as np

import ignite.distributed as idist
from ignite.engine import Engine
from ignite.exceptions import NotComputableError
from ignite_recsys import HitRate


def manual_hit_rate(
    y_pred: np.ndarray,
    y: np.ndarray,
    top_k: list[int],
    ignore_zero_hits: bool = True,
) -> list[float]:
    """Manual implementation of HitRate using numpy for verification."""
    sorted_top_k = sorted(top_k)

    if ignore_zero_hits:
        valid_mask = np.any(y > 0, axis=-1)
        y_pred = y_pred[valid_mask]
        y = y[valid_mask]

    n_samples = y.shape[0]
    if n_samples == 0:
        raise ValueError("No valid samples for manual hit rate computation.")

    sorted_indices = np.argsort(-y_pred, axis=-1)

    results = []
    for k in sorted_top_k:
        k_indices = sorted_indices[:, :k]
        hits = 0
        for i in range(n_samples):
            if np.any(y[i, k_indices[i]] > 0):
                hits += 1
        results.append(hits / n_samples)

    return results


def test_zero_sample():
    metric = HitRate(top_k=[1, 5])
    with pytest.raises(NotComputableError, match=r"HitRate must have at least one example"):
        metric.compute()


def test_shape_mismatch():
    metric = HitRate(top_k=[1])
    y_pred = torch.randn(4, 10)
    y = torch.ones(4, 5)  # Mismatched items count
    with pytest.raises(ValueError, match="y_pred and y must be in the same shape"):
        metric.update((y_pred, y))


def test_empty_top_k():
    with pytest.raises(ValueError, match="top_k must have at least one positive value"):
        HitRate(top_k=[])


def test_invalid_top_k_type():
    with pytest.raises(ValueError, match="top_k must be either int or a list"):
        HitRate(top_k="invalid")


def test_int_top_k(available_device):
    metric = HitRate(top_k=2, device=available_device)
    y_pred = torch.tensor([[4.0, 2.0, 3.0, 1.0]])
    y_true = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    metric.update((y_pred, y_true))
    res = metric.compute()
    expected = manual_hit_rate(y_pred.numpy(), y_true.numpy(), [2])
    np.testing.assert_allclose(res, expected)


@pytest.mark.parametrize("top_k", [[1], [1, 2, 4]])
@pytest.mark.parametrize("ignore_zero_hits", [True, False])
def test_compute(top_k, ignore_zero_hits, available_device):
    metric = HitRate(
        top_k=top_k,
        ignore_zero_hits=ignore_zero_hits,
        device=available_device,
    )

    y_pred = torch.tensor([[4.0, 2.0, 3.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    y_true = torch.tensor([[0, 0, 1.0, 1.0], [0, 0, 0.0, 0.0]])

    metric.update((y_pred, y_true))
    res = metric.compute()

    expected = manual_hit_rate(
        y_pred.numpy(),
        y_true.numpy(),
        top_k,
        ignore_zero_hits=ignore_zero_hits,
    )

    assert isinstance(res, list)
    assert len(res) == len(top_k)
    np.testing.assert_allclose(res, expected)


def test_accumulator_detached(available_device):
    metric = HitRate(top_k=[1], device=available_device)
    y_pred = torch.randn(4, 5, requires_grad=True)
    y = torch.randint(0, 2, (4, 5)).float()
    metric.update((y_pred, y))

    # adapted: ignite's private `_hits_per_k` is `_sum` here (the same per-k sums)
    assert metric._sum.requires_grad is False
    assert metric._sum.is_leaf is True


def test_all_zero_targets_ignore():
    metric = HitRate(top_k=[1, 3], ignore_zero_hits=True)

    y_pred = torch.randn(4, 5)
    y = torch.zeros(4, 5)

    metric.update((y_pred, y))

    with pytest.raises(NotComputableError):
        metric.compute()


@pytest.mark.slow
@pytest.mark.usefixtures("distributed")
class TestDistributed:
    def test_integration(self):
        n_iters = 10
        batch_size = 4
        num_items = 20
        top_k = [1, 5]

        rank = idist.get_rank()
        torch.manual_seed(42 + rank)
        device = idist.device()

        metric_devices = [torch.device("cpu")]
        if device.type != "xla":
            metric_devices.append(device)

        for metric_device in metric_devices:
            all_y_true = torch.randint(0, 2, (n_iters * batch_size, num_items)).float().to(device)
            all_y_pred = torch.randn((n_iters * batch_size, num_items)).to(device)

            for ignore_zero_hits in [True, False]:
                engine = Engine(
                    lambda e, i: (
                        all_y_pred[i * batch_size : (i + 1) * batch_size],
                        all_y_true[i * batch_size : (i + 1) * batch_size],
                    )
                )
                m = HitRate(
                    top_k=top_k,
                    ignore_zero_hits=ignore_zero_hits,
                    device=metric_device,
                )
                m.attach(engine, "hitrate")

                engine.run(range(n_iters), max_epochs=1)

                global_y_true = idist.all_gather(all_y_true).cpu().numpy()
                global_y_pred = idist.all_gather(all_y_pred).cpu().numpy()

                res = engine.state.metrics["hitrate"]

                true_res = manual_hit_rate(
                    global_y_pred,
                    global_y_true,
                    top_k,
                    ignore_zero_hits=ignore_zero_hits,
                )

                assert isinstance(res, list)
                assert res == pytest.approx(true_res)

                engine.state.metrics.clear()

    def test_accumulator_device(self):
        device = idist.device()
        metric = HitRate(top_k=[1, 5], device=device)

        assert metric._device == device
        # adapted: ignite's private `_hits_per_k` is `_sum` here (the same per-k sums)
        assert metric._sum.device == device

        y_pred = torch.randn(2, 10)
        y = torch.zeros(2, 10)
        metric.update((y_pred, y))

        # adapted: ignite's private `_hits_per_k` is `_sum` here (the same per-k sums)
        assert metric._sum.device == device
