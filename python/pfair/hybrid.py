"""Hybrid centralization (seed 003 §4, App. F; SPEC §6): who holds s is not who holds (x, y).

``SteFFLe(mode=...)``:

* ``"standard"``: every silo holds whole records and noises its own ψ parts (Algorithm 1).
* ``"divisions"`` (mode a): each silo is split into a non-sensitive division, which samples the batch
  and sends the s-free parts, and a sensitive division, which alone sees s and sends the noised
  s-dependent parts. With one silo this is the paper's single-silo case.
* ``"central_sensitive"`` (mode b): N non-sensitive silos and ONE sensitive silo holding s for all
  records (universal record ids).
* ``"hybrid"`` (mode c): p non-sensitive silos (``silos=``) and s sensitive silos
  (``sensitive_silos=``, one id per record) over universal record ids.

In every hybrid mode sensitive silo c releases noised SUMS of the clipped s-dependent parts over
``I_c = (∪_j B_j) ∩ S_c``; the server divides by ``|∪_j B_j|``, so each silo's noise is scaled to
its intersected batch (``rust/src/hybrid.rs``). The sum of one record's part changes by at most
``Δ_θ = 2 C_θ`` and ``Δ_W = 2 (1/ρ₁ + 1/ρ₂)^{1/2}`` when its s changes (docs/privacy.md with m = 1).
A record of non-sensitive silo j enters the batch with probability ``q_j = m / n_j`` (sampling
without replacement), independently in every round. The batch itself is NOT secret: the
non-sensitive silos send exact sums over it, which reveal its members to anyone who knows the
non-sensitive data. So sensitive silo c is accounted with the public-batch bound
(``docs/accounting.md``): in a round its record is drawn with probability ``q_c = max_j q_j`` over
the silos j that hold its records, and then the round is a Gaussian mechanism. That is the only
amplification used (the paper's subsampling amplification would need a hidden batch).
``amplification=False`` gives up even that and charges every round as a full Gaussian
mechanism (q = 1). Only the sensitive silos hold s, so only they spend budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from pfair import _core

MODES = ("standard", "divisions", "central_sensitive", "hybrid")


@dataclass(frozen=True)
class HybridLayout:
    """Universal records (pooled in silo order), their non-sensitive and sensitive holders."""

    members: list[np.ndarray]
    owner: np.ndarray
    n_sensitive: int


def layout_for(mode: str, sizes: list[int], sensitive_silos: np.ndarray | None) -> HybridLayout:
    """The holders of every pooled record for a hybrid ``mode``."""
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    members = [np.arange(bounds[j], bounds[j + 1], dtype=np.int64) for j in range(len(sizes))]
    n = int(bounds[-1])
    if mode == "divisions":
        owner = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
        return HybridLayout(members, owner, len(sizes))
    if mode == "central_sensitive":
        return HybridLayout(members, np.zeros(n, dtype=np.int64), 1)
    if sensitive_silos is None:
        raise ValueError("mode='hybrid' needs sensitive_silos= (the sensitive silo of each record) in fit")
    names, owner = np.unique(np.asarray(sensitive_silos), return_inverse=True)
    if owner.shape[0] != n:
        raise ValueError(f"sensitive_silos has {owner.shape[0]} entries but there are {n} records")
    return HybridLayout(members, owner.astype(np.int64), len(names))


def sensitive_sample_rates(layout: HybridLayout, batch_size: int, amplification: bool) -> np.ndarray:
    """``q_c = max_j m / n_j`` over the non-sensitive silos j holding records of sensitive silo c."""
    if not amplification:
        return np.ones(layout.n_sensitive)
    q = np.zeros(layout.n_sensitive)
    for members in layout.members:
        rate = batch_size / len(members)
        for c in np.unique(layout.owner[members]):
            q[c] = max(q[c], rate)
    return q


class HybridRunner:
    """Runs SteFFLe epochs in a hybrid mode; holds the sensitive silos' noise plans and ledgers."""

    def __init__(self, model: Any, fed: Any, proportions: np.ndarray, sensitive_silos: Any, total_rounds: int) -> None:
        from pfair.privacy.accountant import epsilon_for, noise_multiplier_for
        from pfair.privacy.calibration import SiloNoise
        from pfair.privacy.ledger import PrivacyLedger

        if model.protect != "attribute":
            raise ValueError(f"mode={model.mode!r} protects the sensitive attribute only; use protect='attribute'")
        if model.sampling != "without_replacement":
            raise ValueError(f"mode={model.mode!r} samples fixed-size batches; use sampling='without_replacement'")
        if model.p_s != "public":
            raise ValueError(f"mode={model.mode!r} supports p_s='public' only")
        if model.silo_weights != "uniform":
            raise ValueError(f"mode={model.mode!r} averages over the union of the silos' batches, so silo_weights "
                             "does not apply; leave silo_weights='uniform'")
        if model.calibration != "rdp":
            raise ValueError(f"mode={model.mode!r} calibrates with the numeric accountant only; use calibration='rdp' "
                             "(the paper's closed form exists for the standard mode)")
        X, y, s = fed.pooled()
        ids = None
        if sensitive_silos is not None:
            ids = np.asarray(sensitive_silos)
            order = getattr(fed, "row_order_", None)
            if order is not None and ids.shape[0] == order.shape[0]:
                ids = ids[order]  # align with the pooled (silo-sorted) order of the records
        layout = layout_for(model.mode, fed.sizes, ids)
        k, l = fed.n_groups, fed.n_classes
        self.hset = _core.HybridSet(
            X, y, s, layout.members, layout.owner, n_sensitive=layout.n_sensitive, n_groups=k, n_classes=l,
            fairness=model.fairness, positive=model.positive_class,
        )
        self.model = model
        self.inv = np.ascontiguousarray(proportions.ravel() ** -0.5)
        self.clip = float(model.clip) if model.clip is not None else math.inf
        _, d_theta, d_w = _core.sensitivities(
            self.inv, n_groups=k, denom=1.0, fairness=model.fairness, positive=model.positive_class,
            clip_theta=self.clip,
        )
        rates = sensitive_sample_rates(layout, model.batch_size, model.amplification)
        sizes_c = np.bincount(layout.owner, minlength=layout.n_sensitive)
        private = model.epsilon is not None
        self.plans, self.ledgers = [], []
        for c in range(layout.n_sensitive):
            delta = model.delta if model.delta is not None else 1.0 / max(int(sizes_c[c]), 2) ** 2
            scheme = "public_batch" if rates[c] < 1 else "full_batch"
            q = float(rates[c])
            if not private:
                z, stds, eps = 0.0, [0.0, 0.0], math.inf
            elif model.lam == 0:  # nothing that depends on s is sent
                z, stds, eps = math.inf, [0.0, 0.0], 0.0
            else:
                z = noise_multiplier_for(epsilon=model.epsilon, delta=delta, sample_rate=q, steps=total_rounds,
                                         sampling=scheme)
                stds = _core.noise_stds([d_theta, d_w], z)
                eps = epsilon_for(noise_multiplier=z, sample_rate=q, steps=total_rounds, delta=delta, sampling=scheme)
            if private:
                self.ledgers.append(PrivacyLedger(epsilon=model.epsilon, delta=delta, silo=f"sensitive {c}"))
            self.plans.append(SiloNoise(
                silo=c, n_records=int(sizes_c[c]), sampling="without_replacement", sample_rate=q, steps=total_rounds,
                denominator=1.0, sensitivity_loss=0.0, sensitivity_theta=d_theta, sensitivity_w=d_w,
                noise_multiplier=z, sigma_loss=0.0, sigma_theta=stds[0], sigma_w=stds[1],
                target_epsilon=model.epsilon, delta=delta, epsilon=eps, calibration="rdp", protect="attribute",
                sends_psi=model.lam > 0, accounting=scheme,
            ))
        self.layout = layout

    def run_epoch(self, theta: np.ndarray, w: np.ndarray, *, lr: float, start: int, n_rounds: int,
                  snapshot_round: int | None) -> tuple[np.ndarray, np.ndarray, dict[str, Any], Any]:
        m = self.model

        def rounds(count: int) -> dict[str, Any]:
            return self.hset.run_rounds(
                theta, w, self.inv, batch_size=m.batch_size, clip_theta=self.clip,
                sigma_theta=[p.sigma_theta for p in self.plans], sigma_w=[p.sigma_w for p in self.plans],
                dummy_noise=m.dummy_noise, lam=float(m.lam), lr_theta=lr, lr_w=float(m.lr_w),
                w_radius=float(m.w_radius or math.inf), seed=int(m.seed), start=start, n_rounds=count,
            )

        out = rounds(n_rounds)
        snap = None
        if snapshot_round is not None and start <= snapshot_round < start + n_rounds:
            # Replay up to the snapshot round (the seeded streams make this exact).
            part = rounds(snapshot_round - start + 1)
            snap = (part["theta"], part["w"])
        summary = {"batch_loss": float(np.mean(out["loss"])), "batch_psi": float(np.mean(out["psi"]))}
        return out["theta"], out["w"], summary, snap
