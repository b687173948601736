"""The torch backend on a CUDA GPU: the same parts as on the CPU, the same transfers per step.

Runs only where ``torch.cuda.is_available()``; on this project's CPU machines every test is skipped
with the reason. What it checks on a GPU:

* a float64 MLP's five parts, loss, ψ and clip count on ``cuda`` equal the CPU's to 1e-10, in
  attribute and record mode, for every fairness notion;
* a float32 MLP's parts agree to float32 precision, and the clipped parts stay within C;
* a hostile θ (overflowing logits) keeps the s-dependent parts finite on the GPU too;
* a step makes three host → device copies and one device → host copy plus one flag per chunk;
* ``DeepSteFFLe(device="cuda")`` gives the CPU fit's θ to float64 rounding.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA GPU on this machine: the GPU path (device='cuda') is checked where one is present",
)

from pfair.providers.torch import TorchProvider, module_theta  # noqa: E402
from pfair.torch import DeepSteFFLe  # noqa: E402
from pfair.torch.models import mlp  # noqa: E402

from test_torch import random_problem  # noqa: E402

NOTIONS = ["demographic_parity", "equalized_odds", "equal_opportunity", "false_positive_rate_parity"]
PARTS = ["loss_grad", "psi_theta_sfree", "psi_theta", "psi_w_sfree", "psi_w"]


def _problem(seed: int, k: int = 3, l: int = 3, n: int = 80, fairness: str = "demographic_parity"):  # noqa: E741
    return random_problem(np.random.default_rng(seed), k=k, l=l, fairness=fairness, n=n, d=6)


def _both(net, X, y, s, W, inv, batch, theta=None, **kw):
    out = []
    for device in ("cpu", "cuda"):
        prov = TorchProvider(net, X, y, s, device=device, chunk_size=32, **kw)
        out.append(prov.parts(prov.theta() if theta is None else theta, W, inv, batch))
    return out


@pytest.mark.parametrize("protect", ["attribute", "record"])
@pytest.mark.parametrize("fairness", NOTIONS)
def test_float64_parts_on_the_gpu_equal_the_cpu(fairness, protect):
    X, y, s, W, inv = _problem(1, fairness=fairness)
    torch.manual_seed(1)
    net = mlp(X.shape[1], 3, (16,), dtype=torch.float64)
    clips = dict(clip_theta=0.05) if protect == "attribute" else dict(clip_loss=0.2, clip_theta=0.05, clip_w=0.5)
    cpu, gpu = _both(net, X, y, s, W, inv, np.arange(70), n_groups=3, n_classes=3, denominator=70.0,
                     fairness=fairness, protect=protect, **clips)
    for key in PARTS:
        np.testing.assert_allclose(getattr(gpu, key), getattr(cpu, key), rtol=0, atol=1e-10, err_msg=key)
    assert gpu.loss == pytest.approx(cpu.loss, abs=1e-10) and gpu.psi == pytest.approx(cpu.psi, abs=1e-10)
    assert gpu.n_clipped == cpu.n_clipped


def test_float32_parts_on_the_gpu_agree_and_stay_clipped():
    X, y, s, W, inv = _problem(2)
    torch.manual_seed(2)
    net = mlp(X.shape[1], 3, (64,))
    cpu, gpu = _both(net, X, y, s, W, inv, np.arange(1), n_groups=3, n_classes=3, denominator=1.0,
                     protect="record", clip_loss=1e-3, clip_theta=1e-3, clip_w=100.0)
    for key in PARTS:
        np.testing.assert_allclose(getattr(gpu, key), getattr(cpu, key), rtol=1e-4, atol=1e-7, err_msg=key)
    for key in ("loss_grad", "psi_theta"):
        assert np.linalg.norm(getattr(gpu, key)) <= 1e-3


def test_a_hostile_theta_keeps_the_gpu_parts_finite():
    X, y, s, W, inv = _problem(3)
    torch.manual_seed(3)
    net = mlp(X.shape[1], 3, (8,), dtype=torch.float64)
    theta = module_theta(net) * 1e300
    with np.errstate(all="ignore"):
        _, gpu = _both(net, X, y, s, W, inv, np.arange(40), theta=theta, n_groups=3, n_classes=3, denominator=40.0,
                       protect="record", clip_loss=1.0, clip_theta=0.5, clip_w=2.0)
    for key in ("loss_grad", "psi_theta", "psi_w"):
        assert np.all(np.isfinite(getattr(gpu, key))), key


def test_a_gpu_step_copies_each_part_once():
    X, y, s, W, inv = _problem(4)
    torch.manual_seed(4)
    prov = TorchProvider(mlp(X.shape[1], 3, (8,)), X, y, s, n_groups=3, n_classes=3, denominator=64.0,
                         clip_theta=0.5, device="cuda", chunk_size=32)
    before = dict(prov.transfers)
    prov.parts(prov.theta(), W, inv, np.arange(64))
    assert prov.transfers["to_device"] - before["to_device"] == 3
    assert prov.transfers["to_host"] - before["to_host"] == 1 + 2  # the parts; one flag per chunk of 32


def test_deep_steffle_on_the_gpu_equals_the_cpu_fit():
    X, y, s, _, _ = _problem(5, k=2, l=2, n=300)
    out = []
    for device in ("cpu", "cuda"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = DeepSteFFLe(mlp(X.shape[1], 2, (8,), dtype=torch.float64), device=device, epochs=2,
                                batch_size=50, lam=1.0, epsilon=2.0, noise_seed=0, init_seed=0, p_s=[0.5, 0.5],
                                track_history=False)
            out.append(model.fit(X, y, sensitive_features=s).theta_)
    np.testing.assert_allclose(out[1], out[0], rtol=0, atol=1e-8)
