"""A ``DeepSteFFLe`` epoch against a DP-SGD epoch of Opacus and the bare per-record bound, in ONE run.

For each model (the MLP d-32-2 on Adult; the 8×8 digits ``SmallCNN``), on the same records, the
same batch (256) and the same torch threads, the script times, alternating the three so that the
machine's drift hits them alike:

* ``deep``   — one epoch of ``DeepSteFFLe`` (one silo, ε = 1, λ = 4, attribute mode, shuffled
  epochs): every round the silo party charges its ledger, draws its batch, asks its
  ``TorchProvider`` for the five parts (per-record gradients for the clipped ψ part), noises them,
  and the server checks and applies them. Timed between two epoch callbacks (setup excluded).
* ``opacus`` — one epoch of Opacus's DP-SGD (``PrivacyEngine.make_private``, Poisson sampling,
  noise multiplier 1, clip 1, plain SGD): per-sample gradients by hooks, clip, noise, step.
* ``bare``   — the lower bound of the per-record work: ``vmap(grad)`` of the loss over the epoch's
  records in chunks of 256 with ``torch.func``, per-record norms, clip factors and one weighted
  sum per parameter tensor, in float32, and nothing else.

Prints one line per model with the medians and the ratios deep/opacus and deep/bare (only ratios
within one run are comparable on a shared machine). Opacus is a bench-only dependency (the library
never imports it); the script says so and skips it when it is missing.

    python benches/python/deep_vs_dpsgd.py [--reps 3] [--threads 1] [--models mlp,cnn]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

import pfair
from pfair.torch import DeepSteFFLe, load_digits_fair, reset_parameters
from pfair.torch.models import SmallCNN, mlp

BATCH = 256


class _Timed(DeepSteFFLe):
    """DeepSteFFLe that stamps the end of every epoch (the engine's per-epoch callback)."""

    stamps: list[float] = []

    def _on_epoch(self, st, fed, eval_set):  # noqa: ANN001, ANN202
        inner = super()._on_epoch(st, fed, eval_set)

        def on_epoch(*args):  # noqa: ANN002, ANN202
            _Timed.stamps.append(time.perf_counter())
            return inner(*args)

        return on_epoch


def deep_epoch(make, X, y, s, input_shape, k) -> float:  # noqa: ANN001
    """Seconds of the second of two epochs (the first pays the one-off costs)."""
    _Timed.stamps = []
    model = _Timed(make(), input_shape=input_shape, epsilon=1.0, lam=4.0, epochs=2, batch_size=BATCH, clip=1.0,
                   lr_theta=0.1, p_s=[1.0 / k] * k, init_seed=0, device="cpu", track_history=False,
                   n_threads=torch.get_num_threads())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, y, sensitive_features=s)
    return _Timed.stamps[-1] - _Timed.stamps[-2]


def opacus_epoch(make, X, y, input_shape) -> float:  # noqa: ANN001
    from opacus import PrivacyEngine

    net = make()
    data = torch.utils.data.TensorDataset(torch.from_numpy(X.astype(np.float32)).reshape((-1, *input_shape)),
                                          torch.from_numpy(y.astype(np.int64)))
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net, opt, loader = PrivacyEngine().make_private(module=net, optimizer=opt, data_loader=loader,
                                                        noise_multiplier=1.0, max_grad_norm=1.0)
    loss_fn = nn.CrossEntropyLoss()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its hooks warn that the inputs need no gradient
        t0 = time.perf_counter()
        for xb, yb in loader:
            opt.zero_grad()
            loss_fn(net(xb), yb).backward()
            opt.step()
        return time.perf_counter() - t0


def bare_epoch(make, X, y, input_shape) -> float:  # noqa: ANN001
    net = make()
    params = {n: p.detach() for n, p in net.named_parameters()}
    xs = torch.from_numpy(X.astype(np.float32)).reshape((-1, *input_shape))
    ys = torch.from_numpy(y.astype(np.int64))

    def loss(p, xi, yi):  # noqa: ANN001, ANN202
        out = functional_call(net, p, (xi.unsqueeze(0),))
        return nn.functional.cross_entropy(out, yi.unsqueeze(0))

    per_record = vmap(grad(loss), in_dims=(None, 0, 0))
    t0 = time.perf_counter()
    for start in range(0, len(ys), BATCH):
        g = per_record(params, xs[start:start + BATCH], ys[start:start + BATCH])
        flat = [t.reshape(t.shape[0], -1) for t in g.values()]
        norms = torch.stack([torch.linalg.vector_norm(t, dim=1) for t in flat]).norm(dim=0)
        factor = (1.0 / norms).clamp(max=1.0)
        _ = [factor @ t for t in flat]
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default="mlp,cnn")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    try:
        import opacus  # noqa: F401
        have_opacus = True
    except ImportError:
        have_opacus = False
        print("opacus is not installed (a bench-only dependency): its column is skipped")

    cases = {}
    if "mlp" in args.models:
        adult = pfair.datasets.load_adult()
        d = adult.n_features
        cases["mlp"] = (lambda: reset_parameters(mlp(d, 2, (32,)), 0), adult.X_train, adult.y_train,
                        adult.s_train, (d,), adult.n_groups)
    if "cnn" in args.models:
        digits = load_digits_fair()
        cases["cnn"] = (lambda: reset_parameters(SmallCNN(1, 10, width=8), 0), digits.X_train, digits.y_train,
                        digits.s_train, (1, 8, 8), digits.n_groups)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), batch {BATCH}")
    for name, (make, X, y, s, shape, k) in cases.items():
        times: dict[str, list[float]] = {"deep": [], "opacus": [], "bare": []}
        for _ in range(args.reps):
            times["deep"].append(deep_epoch(make, X, y, s, shape, k))
            if have_opacus:
                times["opacus"].append(opacus_epoch(make, X, y, shape))
            times["bare"].append(bare_epoch(make, X, y, shape))
        med = {key: statistics.median(v) for key, v in times.items() if v}
        line = f"{name}: n={len(y)}  " + "  ".join(f"{key} {v:.3f} s" for key, v in med.items())
        if "opacus" in med:
            line += f"  deep/opacus {med['deep'] / med['opacus']:.2f}"
        line += f"  deep/bare {med['deep'] / med['bare']:.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
