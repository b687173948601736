"""The closed-form noise of the SteFFLe paper (Gupta et al. 2024, Theorem 3.3), kept for reproduction.

For a silo of ``n`` records (the paper's ``ñ``), ``T`` rounds, minority fraction ``ρ`` and
target (ε, δ), the theorem sets

    σ_W²  = 16 T ln(1/δ) / (ε² n² ρ),
    σ_θ²  = 16 L_θ² D² ln(1/δ) T / (ε² n² ρ),

where the Lipschitz·radius product ``L_θ D`` bounds the s-dependent θ-gradient; pfair clips that
part per record to norm ``C`` (``clip``), so ``L_θ D`` is replaced by ``C``.

These σ's were derived with loose constants and a different sensitivity model. pfair's exact
replace-one sensitivities (docs/privacy.md) are ``Δ_θ = 2C/m`` and ``Δ_W = (2/m)(1/ρ₁ + 1/ρ₂)^{1/2}``;
the effective noise multiplier is ``z = (Σ (Δ/σ)²)^{-1/2}`` and the numeric accountant prices it
(:func:`paper_delivered_epsilon`). For Adult-sized silos the closed form under-noises: the ε it
truly delivers exceeds the target (see ``docs/accounting.md``).
"""

from __future__ import annotations

import math
from typing import Sequence, Tuple


from pfair import _core
from pfair.privacy.accountant import _delta, _epsilon, _real, _steps, epsilon_for
from pfair.privacy.proportions import inv_sqrt_proportions

__all__ = ["paper_noise_stds", "effective_noise_multiplier", "paper_delivered_epsilon"]


def paper_noise_stds(*, epsilon: float, delta: float, n: int, steps: int, rho: float, clip: float) -> Tuple[float, float]:
    """Return ``(σ_θ, σ_W)`` of Gupta et al. 2024, Thm. 3.3 with ``L_θ D`` replaced by ``clip``.

    ``σ_W = 4 (T ln(1/δ) / ρ)^{1/2} / (ε n)`` and ``σ_θ = clip · σ_W`` (absolute noise stds on the
    batch-mean messages ``h_θ``, ``h_W``; ``n`` = silo size, ``T = steps``, ``ρ`` = smallest
    group proportion).
    """
    e, d = _epsilon(epsilon), _delta(delta)
    t = _steps(steps)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int (silo size); got {n!r}")
    r = _real("rho", rho)
    if not 0.0 < r <= 0.5:
        raise ValueError(f"rho must be in (0, 0.5] (smallest group proportion); got {r}")
    c = _real("clip", clip)
    if not (c > 0.0 and math.isfinite(c)):
        raise ValueError(f"clip must be finite and > 0; got {c}")
    sigma_w = math.sqrt(16.0 * t * math.log(1.0 / d) / (e * e * n * n * r))
    return c * sigma_w, sigma_w


def effective_noise_multiplier(sensitivities: Sequence[float], stds: Sequence[float]) -> float:
    """``z = (Σ_p (Δ_p/σ_p)²)^{-1/2}`` of parts released together (one Gaussian mechanism);
    computed by the Rust core (``rust/src/sensitivity.rs``)."""
    return float(_core.effective_noise_multiplier([float(d) for d in sensitivities], [float(s) for s in stds]))


def paper_delivered_epsilon(
    *,
    epsilon: float,
    delta: float,
    n: int,
    batch: int,
    epochs: int,
    clip: float,
    group_proportions: Sequence[float],
    sampling: str = "public_batch",
) -> dict:
    """Price the paper's σ's with pfair's exact sensitivities and the numeric accountant.

    ``sampling="public_batch"`` (default) is the account that holds for the paper's algorithm,
    whose messages carry the batch's exact loss gradient; ``"without_replacement"`` prices it
    under the hidden-batch bound the paper's theorem assumed.

    Uses ``T = epochs · ceil(n / batch)``, ``q = batch / n``, ``ρ = min p_s``,
    ``Δ_θ = 2 clip / batch``, ``Δ_W = (2/batch)(1/ρ₁ + 1/ρ₂)^{1/2}`` (two smallest proportions).
    Returns a dict with the σ's, the effective noise multiplier and the delivered ε.
    """
    ps = sorted(float(p) for p in group_proportions)
    if len(ps) < 2 or ps[0] <= 0:
        raise ValueError("group_proportions must hold >= 2 positive proportions")
    steps = epochs * math.ceil(n / batch)
    sigma_theta, sigma_w = paper_noise_stds(epsilon=epsilon, delta=delta, n=n, steps=steps, rho=ps[0], clip=clip)
    inv = inv_sqrt_proportions(ps)
    _, d_theta, d_w = _core.sensitivities(inv, n_groups=len(ps), denom=float(batch), clip_theta=float(clip))
    z = effective_noise_multiplier([d_theta, d_w], [sigma_theta, sigma_w])
    q = batch / n
    delivered = epsilon_for(noise_multiplier=z, sample_rate=q, steps=steps, delta=delta, sampling=sampling)
    return {
        "target_epsilon": epsilon,
        "delta": delta,
        "steps": steps,
        "sample_rate": q,
        "sigma_theta": sigma_theta,
        "sigma_w": sigma_w,
        "sensitivity_theta": d_theta,
        "sensitivity_w": d_w,
        "noise_multiplier": z,
        "delivered_epsilon": delivered,
    }
