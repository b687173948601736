"""Private group proportions (``p_s="dp"``): every silo releases a noised histogram of s.

The ψ-term needs ``p(s = r | block)``. The paper treats these proportions as public. With
``p_s="dp"`` each silo j instead releases its counts ``c_j[b, r]`` (records of group r in ψ block b)
plus Gaussian noise, and the server pools them.

Sensitivity. Changing one record's s (attribute mode) moves one unit from cell (b, r) to (b, r′) of
the same block, since the label and hence the block are unchanged; replacing a whole record
(record mode) moves one unit from one cell to another cell, possibly of another block. Either way
the count vector changes by ``e_{cell} - e_{cell'}``, of L2 norm √2, so the histogram is a Gaussian
mechanism with sensitivity √2 (noise multiplier ``z_h = σ_h / √2``), released once (full batch,
one step). Its cost is a fraction ``p_s_epsilon_share`` of the silo's ε; the training noise is then
calibrated so that the *composition* of the histogram and the T rounds stays within (ε, δ), and the
histogram is charged to the same per-silo ledger.

Post-processing. The pooled counts are clamped below at 1 (a group must keep a positive
proportion for ``p^{-1/2}`` to exist) and normalised per block; this uses only released values,
so it costs no privacy.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pfair import _core
from pfair.privacy.accountant import noise_multiplier_for
from pfair.privacy.ledger import MechanismEvent, PrivacyLedger

HISTOGRAM_SENSITIVITY = math.sqrt(2.0)


def histogram_event(noise_multiplier: float) -> MechanismEvent:
    """The ledger event of one released histogram with noise multiplier ``z_h``."""
    return MechanismEvent.gaussian_histogram(noise_multiplier=noise_multiplier, name="p_s_histogram")


def noisy_counts(counts: np.ndarray, sigma: float, *, seed: int, silo: int) -> np.ndarray:
    """``counts + N(0, σ²)`` with noise from the silo's seeded histogram stream."""
    noise = _core.gaussian_stream(seed, silo, 0, counts.size, purpose="histogram")
    return counts + sigma * noise.reshape(counts.shape)


def silo_counts(fed: Any, j: int, fairness: str, positive: int) -> np.ndarray:
    """Silo j's counts of group r in each ψ block (``blocks × k``)."""
    silo = fed.silos[j]
    k, l = fed.n_groups, fed.n_classes
    if fairness == "demographic_parity":
        return np.bincount(silo.s, minlength=k).reshape(1, k).astype(float)
    if fairness == "equalized_odds":
        return np.bincount(silo.y * k + silo.s, minlength=l * k).reshape(l, k).astype(float)
    return np.bincount(silo.s[silo.y == positive], minlength=k).reshape(1, k).astype(float)


def private_group_proportions(model: Any, fed: Any) -> np.ndarray:
    """Pooled DP estimate of ``p(s | block)``; creates ``model.ledgers_`` with the histograms charged
    and leaves the per-silo prior events in ``model._prior_events`` for the training calibration."""
    share = float(model.p_s_epsilon_share)
    if not 0 < share < 1:
        raise ValueError(f"p_s_epsilon_share must be in (0, 1), got {share}")
    pooled = None
    model.ledgers_, model._prior_events = [], []
    for j, n_j in enumerate(fed.sizes):
        delta = model.delta if model.delta is not None else 1.0 / n_j**2
        z_h = noise_multiplier_for(epsilon=share * model.epsilon, delta=delta, sample_rate=1.0, steps=1,
                                   sampling="full_batch")
        event = histogram_event(z_h)
        ledger = PrivacyLedger(epsilon=model.epsilon, delta=delta, silo=j)
        ledger.charge(event)
        model.ledgers_.append(ledger)
        model._prior_events.append([event])
        released = noisy_counts(silo_counts(fed, j, model.fairness, model.positive_class),
                                z_h * HISTOGRAM_SENSITIVITY, seed=model.seed, silo=j)
        pooled = released if pooled is None else pooled + released
    clamped = np.maximum(pooled, 1.0)
    return clamped / clamped.sum(axis=1, keepdims=True)
