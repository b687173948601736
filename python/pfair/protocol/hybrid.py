"""Hybrid centralization as parties: non-sensitive silos, sensitive silos and their server.

In the hybrid modes (:mod:`pfair.hybrid`) the features and labels of a record live in a
*non-sensitive* silo and its s in a *sensitive* silo. A round, party by party:

1. :meth:`NonSensitiveParty.step` draws its batch from a secret key and sends the server its
   s-free parts (means over its batch); it hands each sensitive silo the ids of that silo's
   records in its batch (inside the organisation that runs both, as in the paper's setting).
2. :meth:`SensitiveParty.step` charges its ledger, sums the clipped s-dependent parts over its
   records in the round's batches, adds noise from its own secret key (scaled to the sensitivity
   of a sum, ``2 C_θ`` and ``2 (1/ρ₁ + 1/ρ₂)^{1/2}``) and sends the noised sums — or nothing when
   none of its records was drawn, unless ``dummy_noise``.
3. :meth:`HybridServer.update` averages the s-free parts over the non-sensitive silos, divides
   the sensitive sums by the union's size ``|∪ B_j|`` and takes the SteFFLe step.

The in-process runner's fast path (``HybridSet.run_rounds``) is the same arithmetic; a test checks
the two agree bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from pfair import _core


@dataclass(frozen=True)
class NonSensitiveMessage:
    """A non-sensitive silo's reply: s-free parts (means over its batch of ``batch_size`` records)."""

    silo: int
    round: int
    batch_size: int
    loss_grad: np.ndarray
    psi_theta_sfree: np.ndarray
    psi_w_sfree: np.ndarray


@dataclass(frozen=True)
class SensitiveMessage:
    """A sensitive silo's reply: the noised sums ``u = Σ clip(b_i) + N(0, σ_θ²)``, ``v = Σ c_i + N(0, σ_W²)``."""

    silo: int
    round: int
    psi_theta: np.ndarray
    psi_w: np.ndarray


class NonSensitiveParty:
    """Non-sensitive silo ``j`` of a ``_core.HybridSet`` (its x and y; no s)."""

    def __init__(self, j: int, hset: Any, *, batch_size: int, clip_theta: float, batch_key: Any) -> None:
        self.j, self.hset = int(j), hset
        self.batch_size, self.clip_theta, self.batch_key = int(batch_size), float(clip_theta), batch_key

    def step(self, theta: np.ndarray, w: np.ndarray, inv_sqrt_ps: np.ndarray, round: int
             ) -> tuple[NonSensitiveMessage, list[np.ndarray]]:
        """The message for the server, and the ids handed to each sensitive silo."""
        out = self.hset.non_sensitive_step(self.j, theta, w, inv_sqrt_ps, batch_size=self.batch_size,
                                           clip_theta=self.clip_theta, batch_key=self.batch_key, round=int(round))
        msg = NonSensitiveMessage(self.j, int(round), int(len(out["batch"])), out["loss_grad"],
                                  out["psi_theta_sfree"], out["psi_w_sfree"])
        return msg, list(out["by_owner"])


class SensitiveParty:
    """Sensitive silo ``c``: its records' s, its secret noise key, its ledger and noise plan."""

    def __init__(self, c: int, hset: Any, *, plan: Any, key: Any, ledger: Any, run_id: str, clip_theta: float,
                 dummy_noise: bool) -> None:
        self.c, self.hset, self.plan, self.key, self.ledger, self.run_id = int(c), hset, plan, key, ledger, run_id
        self.clip_theta, self.dummy_noise = float(clip_theta), bool(dummy_noise)

    @property
    def charges(self) -> bool:
        return self.ledger is not None and 0 < self.plan.noise_multiplier < math.inf

    def step(self, theta: np.ndarray, w: np.ndarray, inv_sqrt_ps: np.ndarray, round: int,
             groups: Sequence[np.ndarray]) -> SensitiveMessage | None:
        """Charge the round, then the noised sums over ``groups`` (its records in each
        non-sensitive silo's batch); None when it holds none of them and sends no dummy noise."""
        if self.charges:
            self.ledger.charge_rounds(self.run_id, int(round), 1)
        u, v, count = self.hset.sensitive_step(
            self.c, theta, w, inv_sqrt_ps, [np.asarray(g, dtype=np.int64) for g in groups], clip_theta=self.clip_theta,
            sigma_theta=self.plan.sigma_theta, sigma_w=self.plan.sigma_w, noise_key=self.key, round=int(round),
        )
        if count == 0 and not self.dummy_noise:
            return None
        return SensitiveMessage(self.c, int(round), u, v)


class HybridServer:
    """Averages the s-free parts over the non-sensitive silos, divides the sensitive sums by the
    union's size, and takes the SteFFLe step (the Rust ``server_update``)."""

    def __init__(self, *, lam: float, lr_w: float, w_radius: float, block_len: int) -> None:
        self.lam, self.lr_w, self.w_radius, self.block_len = float(lam), float(lr_w), float(w_radius), int(block_len)

    def update(self, theta: np.ndarray, w: np.ndarray, non_sensitive: Sequence[NonSensitiveMessage],
               sensitive: Sequence[SensitiveMessage | None], *, lr_theta: float) -> tuple[np.ndarray, np.ndarray]:
        n = float(len(non_sensitive))
        g, a_t, a_w = np.zeros(theta.size), np.zeros(theta.size), np.zeros(w.size)
        for m in non_sensitive:
            g += m.loss_grad / n
            a_t += m.psi_theta_sfree / n
            a_w += m.psi_w_sfree / n
        inv_b = 1.0 / max(sum(m.batch_size for m in non_sensitive), 1)
        h_t, h_w = np.zeros(theta.size), np.zeros(w.size)
        for m in sensitive:
            if m is not None:
                h_t += m.psi_theta * inv_b
                h_w += m.psi_w * inv_b
        return _core.server_update(theta, w, self.block_len, [(g, a_t, h_t, a_w, h_w)], [1.0], lam=self.lam,
                                   lr_theta=float(lr_theta), lr_w=self.lr_w, w_radius=self.w_radius)
