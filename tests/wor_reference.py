"""High-precision reference of the sampling-without-replacement RDP bound (tests only).

Wang, Balle and Kasiviswanathan 2019 (Thm. 9 in the Gaussian form of Thm. 27) bound, for integer
α ≥ 2, the RDP of the subsampled Gaussian (replace-one adjacency) by

    (α−1) ε(α) ≤ log(1 + q² C(α,2) min{4(e^{ε(2)}−1), 2e^{ε(2)}}
                     + Σ_{j=3}^{α} q^j C(α,j) min{4 (Δ^{2⌊j/2⌋}F(0) Δ^{2⌈j/2⌉}F(0))^{1/2}, 2 e^{(j−1)ε(j)}}),

with ε(j) = j/(2z²) and F(j) = e^{(j−1)ε(j)}; above α = 256 only the second option of the min is
used (as pfair and dp-accounting do), and fractional orders interpolate (α−1)ε(α) linearly
between the neighbouring integers (their Cor. 10).

Here the forward differences are taken by the plain alternating binomial sum in mpmath with
enough digits to survive its cancellation, i.e. independently of pfair's quadrature. The same
module measures that cancellation: ``condition(z, k) = log10(Σ_j C(k,j) F(j) / Δ^k F(0))`` is the
number of decimal digits a float64 evaluation of Δ^k F(0) by differencing loses to rounding.
"""

from __future__ import annotations

import functools
import math

import mpmath as mp

MAX_EXACT_ORDER = 256


@functools.lru_cache(maxsize=None)
def _differences(z: float, k_max: int) -> tuple:
    """(log Δ^k F(0), log10 of its cancellation factor) for k = 0..k_max.

    Δ^k F(0) is the plain alternating binomial sum, evaluated in mpmath (binomials by Pascal's
    rule); the factor is Σ_j C(k,j) F(j) / Δ^k F(0). The precision doubles until every factor
    leaves at least 30 correct digits."""
    dps = 50
    while True:
        out = _differences_at(z, k_max, dps)
        if max(c for _, c in out[2::2]) < dps - 30:  # only even orders are used
            return out
        dps *= 2


def _differences_at(z: float, k_max: int, dps: int) -> tuple:
    with mp.workdps(dps):
        t = mp.mpf(1) / mp.mpf(z) ** 2
        F = [mp.e ** (mp.mpf(j) * (j - 1) * t / 2) for j in range(k_max + 1)]
        row = [mp.mpf(1)]
        out = []
        for k in range(k_max + 1):
            if k > 0:
                row = [mp.mpf(1)] + [row[j - 1] + row[j] for j in range(1, k)] + [mp.mpf(1)]
            pos = mp.fsum(row[j] * F[j] for j in range(k % 2, k + 1, 2))
            neg = mp.fsum(row[j] * F[j] for j in range(1 - k % 2, k + 1, 2))
            diff, total = pos - neg, pos + neg
            if diff <= 0:  # Δ¹F(0) = 0 exactly; an even order ≤ 0 means too few digits
                out.append((-math.inf, math.inf))
            else:
                out.append((float(mp.log(diff)), float(mp.log10(total / diff))))
        return tuple(out)


def condition(z: float, k: int) -> float:
    """log10 of the cancellation factor of the alternating sum for Δ^k F(0) (16: no digit left)."""
    return _differences(z, MAX_EXACT_ORDER)[k][1]


def _log_binom(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _log_a(q: float, z: float, alpha: int) -> float:
    """log of the bound's bracket at integer α ≥ 2. Every term is positive, so float64 log-space
    sums are exact to rounding once the differences are."""
    e = lambda x: x / (2.0 * z * z)  # noqa: E731
    logs = [0.0, 2 * math.log(q) + _log_binom(alpha, 2)
            + min(math.log(4) + math.log(math.expm1(e(2))), math.log(2) + e(2))]
    diffs = _differences(z, MAX_EXACT_ORDER) if alpha <= MAX_EXACT_ORDER else None
    for j in range(3, alpha + 1):
        cap = math.log(2) + (j - 1) * e(j)
        if diffs is not None:
            lo, hi = diffs[2 * (j // 2)][0], diffs[2 * ((j + 1) // 2)][0]
            cap = min(math.log(4) + 0.5 * (lo + hi), cap)
        logs.append(j * math.log(q) + _log_binom(alpha, j) + cap)
    rest = logs[1:]  # log(1 + S), S = Σ e^v, with log1p so tiny RDP values keep their digits
    top = max(rest)
    log_s = top + math.log(math.fsum(math.exp(v - top) for v in rest))
    return math.log1p(math.exp(log_s)) if log_s < 0 else log_s + math.log1p(math.exp(-log_s))


def rdp_without_replacement(q: float, z: float, alpha: float) -> float:
    """Per-step RDP bound at order α (0 < q < 1); fractional α by Cor. 10's interpolation."""
    if alpha == int(alpha):
        return _log_a(q, z, int(alpha)) / (alpha - 1)
    lo, hi = math.floor(alpha), math.ceil(alpha)
    t = alpha - lo
    log_lo = _log_a(q, z, lo) if lo >= 2 else 0.0
    return ((1 - t) * log_lo + t * _log_a(q, z, hi)) / (alpha - 1)


def max_condition(z: float, alpha: float) -> float:
    """Worst log10 cancellation factor among the differences the bound at order α uses."""
    a = math.ceil(alpha)
    if a > MAX_EXACT_ORDER or a < 3:
        return 0.0
    return max(condition(z, k) for k in range(2, 2 * math.ceil(a / 2) + 1, 2))
