"""The gradient-provider interface (see :mod:`pfair.providers`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


def constant_probabilities(n_classes: int, cls: int, share: float) -> np.ndarray:
    """The class probabilities of the constant predictor of class ``cls`` whose share of the
    held-out records is ``share`` (clamped to ``[1/l, 1 − 10⁻⁹]``: the largest class has at least
    1/l): ``share`` for ``cls``, the rest spread evenly over the other classes. Each model's
    ``constant_theta`` turns them into its parameters (post-processing of released tables)."""
    l = int(n_classes)  # noqa: E741
    if not 0 <= int(cls) < l:
        raise ValueError(f"constant predictor: class {cls} is not one of the {l} classes")
    p = min(max(float(share), 1.0 / l), 1.0 - 1e-9)
    probs = np.full(l, (1.0 - p) / (l - 1))
    probs[int(cls)] = p
    return probs


@dataclass
class BatchParts:
    """Exact parts of one batch, each a mean with the silo's fixed denominator m:

    ``loss_grad = Σ_B ∇ℓ_i / m`` (per-record clipped in record mode),
    ``psi_theta_sfree = Σ_B a_θ,i / m``, ``psi_theta = Σ_B clip(b_i) / m``,
    ``psi_w_sfree = Σ_B a_W,i / m``, ``psi_w = Σ_B c_i / m``
    (record mode: the a-parts are folded into the clipped ψ parts and are zero).
    ``loss``, ``psi`` and ``n_clipped`` are local diagnostics of the silo's exact data, ``clip_theta``
    the clip norm the b_i were clipped to (the round's own with ``clip="adaptive"``; NaN where the
    provider does not say).
    """

    loss_grad: np.ndarray
    psi_theta_sfree: np.ndarray
    psi_theta: np.ndarray
    psi_w_sfree: np.ndarray
    psi_w: np.ndarray
    loss: float = float("nan")
    psi: float = float("nan")
    n_clipped: int = 0
    clip_theta: float = float("nan")


@runtime_checkable
class GradientProvider(Protocol):
    """Computes :class:`BatchParts` for batches of one silo's records."""

    n_records: int

    def parts(self, theta: np.ndarray, w: np.ndarray, inv_sqrt_ps: np.ndarray, batch: np.ndarray) -> BatchParts:
        """Parts of the records ``batch`` (row indices) at ``(θ, W)`` with ψ tables
        ``inv_sqrt_ps = p_s^{-1/2}`` (released proportions)."""
        ...
