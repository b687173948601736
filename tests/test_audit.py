"""Empirical privacy audit of one SteFFLe round (attribute mode).

Two neighbouring silos differ only in the sensitive attribute of record 0. We run the real silo
step (``SiloSet.step``: Rust sampler, clipping, seeded Gaussian noise) many times on each, and play
the adversary of a DP guarantee, who knows every record's (x, y) and the other records' s:

1. Record 0 has a feature no other record has, so the EXACT loss gradient in the message tells
   whether record 0 is in the batch (SteFFLe sends the s-free parts without noise).
2. Given the batch, the message is Gaussian around a mean the adversary can compute under either
   neighbour; the optimal (Neyman–Pearson) test projects the noised parts on the difference of
   the two means, weighted by 1/σ_p².

The test's false-positive and true-positive rates, bounded with Clopper–Pearson intervals, give
a lower bound on ε at the given δ: any (ε, δ)-DP mechanism has TPR ≤ e^ε FPR + δ. The audit checks
that this lower bound never exceeds the ε pfair claims, that it DOES exceed the claim when σ is
halved, and that it exceeds what a hidden-batch accountant (WBK 2019) would claim for the same
noise — the reason pfair accounts attribute-mode rounds with the public-batch bound.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from pfair import _core
from pfair.privacy import epsilon_for

N_RECORDS, BATCH, DELTA = 20, 2, 1e-3
TRIALS = 200_000  # per neighbour
CLIP = 0.05


def _silo(s0: int) -> tuple:
    rng = np.random.default_rng(7)
    X = np.column_stack([np.zeros(N_RECORDS), rng.normal(0, 0.5, N_RECORDS)])
    X[0] = [5.0, 0.0]  # only record 0 has feature 0: the exact loss gradient shows its membership
    y = np.arange(N_RECORDS, dtype=np.int64) % 2
    s = (np.arange(N_RECORDS, dtype=np.int64) // 2) % 2
    s[0] = s0
    return X, y, s


def _setup(z: float):
    # One single-silo set per neighbour: batches and noise are keyed by (seed, silo id, round), so
    # the same (seed, round) draws the same batch in both.
    sets = [_core.SiloSet([_silo(s0)], n_groups=2, n_classes=2) for s0 in (0, 1)]
    inv = np.array([0.5, 0.5]) ** -0.5  # p_s public (fixed for both neighbours)
    theta = np.array([1.0, 0.0, 0.0])  # confident on record 0: ‖F‖ ≈ 1, so the W-part change is near Δ_W
    w = 0.7 * np.array([1.0, -1.0, -1.0, 1.0])  # opposite rows: the clipped θ-parts flip direction
    _, d_theta, d_w = _core.sensitivities(inv, n_groups=2, denom=float(BATCH), clip_theta=CLIP)
    s_theta, s_w = _core.noise_stds([d_theta, d_w], z)
    cfg = dict(sampling="without_replacement", batch_size=BATCH, sample_rate=BATCH / N_RECORDS, clip_theta=CLIP)
    noisy = _core.SiloConfig(sigma_theta=s_theta, sigma_w=s_w, **cfg)
    clean = _core.SiloConfig(**cfg)
    return sets, inv, theta, w, noisy, clean, np.array([s_theta] * 3 + [s_w] * 4)


def _vec(msg: dict) -> np.ndarray:
    return np.concatenate([msg["psi_theta"], msg["psi_w"]])


def _attack_statistics(z: float) -> tuple[np.ndarray, np.ndarray, float]:
    """LR statistic of every trial on D (silo 0) and D' (silo 1); -inf when record 0 is not drawn."""
    (set_d, set_n), inv, theta, w, noisy, clean, sig = _setup(z)
    # Difference of the two neighbours' means for a batch that contains record 0 (it does not
    # depend on the other members: their terms are the same in both).
    r0 = next(r for r in range(1000) if set_d.step(0, theta, w, inv, clean, seed=99, round=r)["loss_grad"][0] != 0)
    diff = _vec(set_n.step(0, theta, w, inv, clean, seed=99, round=r0)) - _vec(set_d.step(0, theta, w, inv, clean, seed=99, round=r0))
    weight = diff / sig**2
    dist = math.sqrt(float(np.sum(diff**2 / sig**2)))  # ≤ 1/z; = 1/z when the change attains Δ
    out = []
    for silos, seed in ((set_d, 1), (set_n, 2)):
        t = np.full(TRIALS, -np.inf)
        for r in range(TRIALS):
            msg = silos.step(0, theta, w, inv, noisy, seed=seed, round=r)
            if msg["loss_grad"][0] == 0.0:
                continue  # record 0 not drawn: the message does not depend on its s at all
            mean_d = _vec(set_d.step(0, theta, w, inv, clean, seed=seed, round=r))  # the adversary's mean under D
            t[r] = float(np.dot(_vec(msg) - mean_d, weight))
        out.append(t)
    return out[0], out[1], dist


def _epsilon_lower_bound(t_d: np.ndarray, t_n: np.ndarray, dist: float, confidence: float = 0.999) -> float:
    """Largest ε certified by a threshold test, over thresholds fixed in advance (Bonferroni)."""
    # Under D the statistic is N(0, dist²) and under D' N(dist², dist²) (given record 0 is drawn).
    thresholds = dist * np.array([1.5, 2.0, 2.5, 3.0, 3.5])
    alpha = (1 - confidence) / (2 * len(thresholds))
    best = 0.0
    for t in thresholds:
        fp, tp = int(np.sum(t_d > t)), int(np.sum(t_n > t))
        fpr_hi = stats.beta.ppf(1 - alpha, fp + 1, TRIALS - fp)  # Clopper–Pearson upper bound
        tpr_lo = stats.beta.ppf(alpha, tp, TRIALS - tp + 1) if tp > 0 else 0.0
        if tpr_lo - DELTA > 0:
            best = max(best, math.log((tpr_lo - DELTA) / fpr_hi))
    return best


def _claimed(z: float, sampling: str) -> float:
    return epsilon_for(noise_multiplier=z, sample_rate=BATCH / N_RECORDS, steps=1, delta=DELTA, sampling=sampling)


@pytest.fixture(scope="module")
def audit_at_z1():
    return _attack_statistics(1.0)


def test_the_neighbours_are_a_worst_case_pair(audit_at_z1):
    _, _, dist = audit_at_z1
    assert 0.95 <= dist * 1.0 <= 1.0 + 1e-9  # the change attains (95%+) the sensitivity the noise is scaled to


def test_audit_lower_bound_stays_below_the_claimed_epsilon(audit_at_z1):
    t_d, t_n, dist = audit_at_z1
    # About q = 20% of the trials draw record 0, as the sampler promises.
    assert abs(np.mean(np.isfinite(t_d)) - BATCH / N_RECORDS) < 0.01
    lower = _epsilon_lower_bound(t_d, t_n, dist)
    claimed = _claimed(1.0, "public_batch")
    assert 1.0 < lower <= claimed, (lower, claimed)


def test_audit_breaks_a_hidden_batch_claim(audit_at_z1):
    # Accounting the same round as a subsampled Gaussian with a hidden batch (WBK 2019) would
    # claim an epsilon the attack beats: the exact s-free parts reveal the batch.
    t_d, t_n, dist = audit_at_z1
    lower = _epsilon_lower_bound(t_d, t_n, dist)
    assert lower > _claimed(1.0, "without_replacement")


def test_audit_catches_a_halved_sigma():
    # A bug that halved every noise std would keep claiming the epsilon of z = 1; the audit of the
    # noise actually added (z = 0.5) must exceed that claim.
    t_d, t_n, dist = _attack_statistics(0.5)
    assert _epsilon_lower_bound(t_d, t_n, dist) > _claimed(1.0, "public_batch")
