"""Hybrid centralization (Gupta et al. 2024, §4 and App. F): who holds s is not who holds (x, y).

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

from pfair.settings import MODES  # noqa: F401  (re-exported: pfair.hybrid.MODES)


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


def check_hybrid_settings(st: Any) -> None:
    """Refuse settings a hybrid topology cannot run (each message names the fix)."""
    mode = st.mode
    if st.protect != "attribute":
        raise ValueError(f"mode={mode!r} protects the sensitive attribute only; use protect='attribute'")
    if st.sampling != "without_replacement":
        raise ValueError(f"mode={mode!r} samples fixed-size batches; use sampling='without_replacement'")
    if st.p_s_source == "dp" and st.fairness != "demographic_parity":
        raise ValueError(f"mode={mode!r} with fairness={st.fairness!r} needs p(s | y), but a sensitive silo does "
                         "not hold y: pass public proportions (p_s=[[...], ...]) or p_s='pooled' (the paper's "
                         "assumption, not covered by the guarantee)")
    if st.silo_weights != "uniform":
        raise ValueError(f"mode={mode!r} averages over the union of the silos' batches, so silo_weights "
                         "does not apply; leave silo_weights='uniform'")
    if st.calibration != "rdp":
        raise ValueError(f"mode={mode!r} calibrates with the numeric accountant only; use calibration='rdp' "
                         "(the paper's closed form exists for the standard mode)")


def plan_sensitive_noise(st: Any, c: int, *, n_records: int, sample_rate: float, steps: int,
                         inv_sqrt_ps: np.ndarray, n_groups: int, ledger: Any, delta: float, clip: float) -> Any:
    """Noise plan of sensitive silo ``c``: its noised sums have sensitivities ``Δ_θ = 2 C_θ`` and
    ``Δ_W = 2 (1/ρ₁ + 1/ρ₂)^{1/2}`` (divisor 1), and its rounds are accounted as public batches
    drawn with probability ``q_c`` (:func:`sensitive_sample_rates`; ``"full_batch"`` when q_c = 1),
    calibrated to what its ledger has left."""
    from pfair.exceptions import PrivacyBudgetExceeded
    from pfair.privacy.accountant import noise_multiplier_for
    from pfair.privacy.calibration import SiloNoise, noise_multiplier_after
    from pfair.privacy.ledger import MechanismEvent

    _, d_theta, d_w = _core.sensitivities(inv_sqrt_ps, n_groups=n_groups, denom=1.0, fairness=st.fairness,
                                          positive=st.positive_class, clip_theta=clip)
    scheme = "public_batch" if sample_rate < 1 else "full_batch"
    q = float(sample_rate)
    if not st.private:
        z, stds, eps = 0.0, [0.0, 0.0], math.inf
    elif not st.sends_psi:  # nothing that depends on s is sent
        z, stds, eps = math.inf, [0.0, 0.0], ledger.epsilon_spent()
    else:
        if ledger.epsilon_spent() >= st.epsilon:
            raise PrivacyBudgetExceeded(f"sensitive silo {c}: its ledger has no budget left")
        if ledger.events:
            z = noise_multiplier_after(ledger, epsilon=st.epsilon, sample_rate=q, steps=steps, sampling=scheme)
        else:
            z = noise_multiplier_for(epsilon=st.epsilon, delta=delta, sample_rate=q, steps=steps, sampling=scheme)
        stds = _core.noise_stds([d_theta, d_w], z)
        eps = ledger.epsilon_with([MechanismEvent(name="steffle_rounds", sampling=scheme, sample_rate=q,
                                                  noise_multiplier=z, steps=steps)])
    return SiloNoise(
        silo=c, n_records=int(n_records), sampling="without_replacement", sample_rate=q, steps=int(steps),
        denominator=1.0, sensitivity_loss=0.0, sensitivity_theta=d_theta, sensitivity_w=d_w, noise_multiplier=z,
        sigma_loss=0.0, sigma_theta=stds[0], sigma_w=stds[1], target_epsilon=st.epsilon, delta=delta, epsilon=eps,
        calibration="rdp", protect="attribute", sends_psi=st.sends_psi, accounting=scheme,
    )
