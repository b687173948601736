"""The privacy of a hyper-parameter search: how k candidate fits on the same silos compose.

Two accounts (``docs/model_selection.md`` derives both):

**Composition** (:func:`search_targets`), the one a search charges. Every candidate fit runs on
the silos' own ledgers, so the ledger composes them like any fits on the same records; the search
only chooses *how much* each candidate gets. Candidate i (1-based) is fitted with the cumulative
target ``ε_i``: its noise is calibrated so that what the ledger held plus candidates 1..i compose to
``ε_i`` (:func:`pfair.privacy.calibration.plan_silo_noise` calibrates to what the composition
leaves), and ``ε_k`` is the search's ε. The targets split the budget evenly in the currency in
which Gaussian releases add: a μ-GDP mechanism composed k times is ``√k μ``-GDP (Dong, Roth and
Su, "Gaussian Differential Privacy", 2019), so with ``μ_0`` the GDP parameter of what the ledger
held and ``μ`` the search's,

    μ_i² = μ_0² + (μ² − μ_0²) · i / k,        ε_i = ε_GDP(μ_i; δ),

which gives candidates of one shape the same noise. Whatever the split, the ledger's total after
the last candidate is at most ``ε_k``: soundness rests on the ledger, not on the split.

**Random stopping** (Papernot and Steinke, "Hyperparameter Tuning with Renyi Differential
Privacy", 2022): run a candidate a random number K of times (K truncated negative binomial with
shape η and parameter γ, or Poisson) and release *only* the best run. If one run is
(λ, ε(λ))-RDP at every order, the released best is (λ, ε'(λ))-RDP with (their Theorem 2, for η ≥ 0)

    ε'(λ) = ε(λ) + (1 + η) · min_λ̂ [ (1 − 1/λ̂) ε(λ̂) + log(1/γ) / λ̂ ] + log E[K] / (λ − 1),

and for K ~ Poisson(m) (their Theorem 6) ``ε'(λ) = ε(λ) + m · δ̂ + log m / (λ − 1)`` with δ̂ the
δ of one run at ``ε̂ = log(1 + 1/(λ − 1))``. :func:`repeat_and_select_rdp` implements both
(geometric: η = 1, γ = 1/E[K]; logarithmic: η = 0).

It bounds what an observer of the *best run alone* learns. A pfair silo's guarantee is against the
server, which receives every round of every run: every candidate's messages are released, so the
silo's transcript is the composition of all of them and the random-stopping bound does not cover
it. A search therefore always charges composition; :func:`compare_accounts` reports what random
stopping would give for the returned model alone, for a trusted-curator setting (every run and its
figures kept inside one trusted party) and for comparison.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from pfair.privacy.accountant import (
    default_orders,
    delta_from_rdp,
    epsilon_from_rdp,
    gaussian_epsilon,
    gaussian_mu,
    rdp_curve,
)
from pfair.privacy.calibration import composed_epsilon

__all__ = ["SearchAccounts", "compare_accounts", "events_rdp", "repeat_and_select_epsilon", "repeat_and_select_rdp",
           "search_targets", "truncated_negative_binomial_gamma", "truncated_negative_binomial_mean"]


def search_targets(epsilon: float, delta: float, k: int, *, spent: float = 0.0) -> list[float]:
    """The cumulative targets ``[ε_1, …, ε_k]`` of a k-candidate search whose silos end at ``epsilon``
    (module docstring): equal shares of μ² on top of what was ``spent`` before (both at ``delta``).
    ``ε_k = epsilon``; nondecreasing; ``ε_1 > spent``."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k (the number of candidates) must be an int >= 1; got {k!r}")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and > 0; got {epsilon!r}")
    if not 0 <= spent < epsilon:
        raise ValueError(f"spent={spent!r} must be in [0, epsilon={epsilon:g}): nothing is left for a search")
    mu = gaussian_mu(epsilon=epsilon, delta=delta)
    mu0 = gaussian_mu(epsilon=spent, delta=delta) if spent > 0 else 0.0
    out = []
    for i in range(1, int(k)):
        mu_i = math.sqrt(mu0**2 + (mu**2 - mu0**2) * i / k)
        out.append(min(float(epsilon), gaussian_epsilon(delta=delta, mu=mu_i)))
    out.append(float(epsilon))
    return out


def truncated_negative_binomial_mean(gamma: float, shape: float) -> float:
    """E[K] of the truncated negative binomial ``P[K = k] ∝ (1 − γ)^k · Γ(k + η) / (Γ(η) k!)``,
    k ≥ 1: ``η (1 − γ) / (γ (1 − γ^η))``; ``(1 − γ) / (γ log(1/γ))`` at η = 0 (logarithmic);
    ``1/γ`` at η = 1 (geometric)."""
    g, eta = float(gamma), float(shape)
    if not 0 < g <= 1:
        raise ValueError(f"gamma must be in (0, 1]; got {gamma!r}")
    if g == 1:
        return 1.0
    if eta == 0:
        return (1 - g) / (g * math.log(1 / g))
    return eta * (1 - g) / (g * -math.expm1(eta * math.log(g)))


def truncated_negative_binomial_gamma(shape: float, mean: float) -> float:
    """γ of the truncated negative binomial of shape η with ``E[K] = mean`` (bisection; the
    returned γ gives a mean at least ``mean``, the side on which the bound is conservative)."""
    if not (mean >= 1 and math.isfinite(mean)):
        raise ValueError(f"mean (E[K]) must be finite and >= 1; got {mean!r}")
    if not shape >= 0:
        raise ValueError(f"shape (eta) must be >= 0; got {shape!r}")
    if shape == 1:
        return 1.0 / mean
    lo, hi = 0.0, 1.0  # the mean decreases in γ: ∞ at 0, 1 at 1
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid <= 0 or truncated_negative_binomial_mean(mid, shape) >= mean:
            lo = mid
        else:
            hi = mid
    return lo


def repeat_and_select_rdp(orders: Sequence[float], rdp: Sequence[float], *, mean: float,
                          shape: float) -> list[float]:
    """RDP at ``orders`` of releasing the best of K runs of a mechanism whose RDP is ``rdp``
    (module docstring). ``shape``: η of the truncated negative binomial (0 logarithmic, 1
    geometric), or ``math.inf`` for K ~ Poisson(mean). Orders ≤ 1 get ``inf`` (the bounds need
    λ > 1); the truncated negative binomial's values are then made nondecreasing in the order
    (RDP is), each the minimum over the orders at or above it."""
    o = np.asarray(orders, dtype=np.float64)
    r = np.asarray(rdp, dtype=np.float64)
    if o.shape != r.shape or o.ndim != 1:
        raise ValueError(f"orders and rdp must be 1-d of one length; got {o.shape} and {r.shape}")
    if not (mean >= 1 and math.isfinite(mean)):
        raise ValueError(f"mean (E[K]) must be finite and >= 1; got {mean!r}")
    out = np.full(o.shape, math.inf)
    above = o > 1
    if shape == math.inf:
        for i in np.flatnonzero(above):
            eps_hat = math.log1p(1.0 / (o[i] - 1.0))
            d_hat, _ = delta_from_rdp(orders=list(o[above]), rdp=list(r[above]), epsilon=eps_hat)
            out[i] = r[i] + mean * d_hat + math.log(mean) / (o[i] - 1.0)
        return out.tolist()
    gamma = truncated_negative_binomial_gamma(shape, mean)
    log_mean = math.log(truncated_negative_binomial_mean(gamma, shape))
    usable = o >= 1
    c = (1.0 + shape) * float(np.min((1.0 - 1.0 / o[usable]) * r[usable] + math.log(1.0 / gamma) / o[usable]))
    out[above] = r[above] + c + log_mean / (o[above] - 1.0)
    # nondecreasing in the order: the value at λ is at most the value at any λ' ≥ λ
    out = np.minimum.accumulate(out[::-1])[::-1]
    return out.tolist()


def events_rdp(events: Iterable, orders: Sequence[float] | None = None) -> tuple[list, list]:
    """``(orders, rdp)``: the RDP composition of ledger events (:class:`~pfair.privacy.ledger.MechanismEvent`,
    each ``count()`` releases of its mechanism), as the ledger's own RDP account adds them."""
    o = list(orders) if orders is not None else default_orders()
    total = np.zeros(len(o))
    for e in events:
        _, one = rdp_curve(noise_multiplier=e.noise_multiplier, sample_rate=e.sample_rate, steps=1,
                           sampling=e.sampling, orders=o)
        total += e.count() * np.asarray(one)
    return o, total.tolist()


def repeat_and_select_epsilon(events: Iterable, *, mean: float, shape: float, delta: float) -> float:
    """ε at ``delta`` of releasing the best of K runs, each run the composition of ``events``."""
    o, r = events_rdp(events)
    return float(epsilon_from_rdp(orders=o, rdp=repeat_and_select_rdp(o, r, mean=mean, shape=shape),
                                  delta=delta)[0])


@dataclass(frozen=True)
class SearchAccounts:
    """What a k-candidate search costs a silo by each account, at its δ.

    ``composition``: ε of all k candidates composed (what the silo's ledger charged: the guarantee
    against the server); ``random_stopping``: ε of the best of a geometric number of runs of mean k
    of the most expensive candidate, released alone (Papernot and Steinke 2022; not a bound on what
    the server sees); ``cheaper``: the account with the smaller ε."""

    composition: float
    random_stopping: float

    @property
    def cheaper(self) -> str:
        return "composition" if self.composition <= self.random_stopping else "random_stopping"


def compare_accounts(candidate_events: Sequence[Sequence], *, delta: float,
                     composed: float | None = None) -> SearchAccounts:
    """:class:`SearchAccounts` of a search whose candidate i charged ``candidate_events[i]``.
    ``composed``: the ledger's ε of the whole search when known (its currency may be tighter than
    RDP), else the RDP composition of every event."""
    all_events = [e for events in candidate_events for e in events]
    comp = float(composed) if composed is not None else composed_epsilon(all_events, delta)
    k = len(candidate_events)
    worst = max((repeat_and_select_epsilon(ev, mean=k, shape=1.0, delta=delta) for ev in candidate_events if ev),
                default=0.0)
    return SearchAccounts(composition=comp, random_stopping=worst)
