"""Public (ε, δ) accountant: thin, validated wrappers over the Rust core (``pfair._core``).

Units. A *noise multiplier* ``z`` is ``noise std / L2 sensitivity`` of the released statistic
under the adjacency the sampling scheme names:

``"without_replacement"`` and ``"full_batch"``
    replace-one adjacency (one record's sensitive attribute changes, the record stays), so
    ``z = σ / Δ_replace``; this is pfair's adjacency (``rust/src/sensitivity.rs``).
``"poisson"``
    add/remove-one adjacency, ``z = σ / Δ_add_remove`` — the textbook sampled-Gaussian bound
    (Mironov, Talwar, Zhang 2019) kept for cross-checks with dp-accounting/opacus. It is NOT a
    valid accountant for replace-one adjacency.
``"poisson_replace_one"``
    Poisson sampling under replace-one adjacency, with ``z`` measured against the add/remove
    sensitivity (largest norm of one record's contribution); see ``docs/accounting.md``.
``"public_batch"``
    each record is in a step's batch with probability ``q``, and the batch's membership is
    PUBLIC (the rest of the message reveals it); replace-one adjacency, ``z = σ / Δ_replace``.
    This is what a SteFFLe silo in attribute mode is: its s-free parts are exact sums over the
    batch, so the subsampled bounds above (which need a hidden batch) do not apply to it.
``"shuffle"``
    shuffled epochs: every record exactly once per epoch, in ``b = ⌈n/m⌉ = ⌈1/q⌉`` batches of
    fixed divisor ``m`` (``q = m/n``); ``steps`` rounds from an epoch's start are
    ``K = ⌈steps/b⌉`` Gaussian releases per record; replace-one, ``z = σ / Δ_replace``.

Accountants (``accountant=``):

``"rdp"`` (default)
    Rényi DP, every scheme (the bounds below).
``"exact"``
    schemes whose releases are Gaussian given public information (``"full_batch"``,
    ``"shuffle"``, ``"public_batch"``): the analytic Gaussian mechanism (Balle, Wang 2018) of
    ``μ = √K/z`` (Dong, Roth, Su 2019, GDP composition), for public batches averaged over
    ``K ~ Bin(steps, q)``. Exact, not a bound (up to rounding towards more privacy loss).
``"pld"``
    hidden-batch schemes (``"without_replacement"``, ``"poisson"``, ``"poisson_replace_one"``):
    the privacy-loss distribution of the scheme's dominating pair (Zhu, Dong, Wang 2022),
    discretised pessimistically ("connect the dots", Doroshenko et al. 2022) and composed by
    FFT; an upper bound, usually below RDP. Slow (≈ 50–200 ms per ε, seconds per calibration).
``"best"``
    the smallest valid value that is fast: the minimum of ``"exact"`` (where it applies) and
    ``"rdp"``; hidden batches stay on RDP (ask for ``"pld"`` explicitly).

The math (per step, order α > 1, then ``steps``-fold composition by addition):

* full batch: ``ε(α) = α / (2 z²)`` (Mironov 2017, Prop. 7);
* without replacement, rate ``q = m/n``: Wang, Balle, Kasiviswanathan 2019, Thm. 9/27, Cor. 10;
* Poisson, rate ``q``: ``ε(α) = log A_α / (α − 1)`` (Mironov, Talwar, Zhang 2019, Sec. 3.3);
* public batch, rate ``q``: ``ε(α) = log(1 − q + q e^{α(α−1)/(2z²)}) / (α − 1)`` (the Rényi
  divergence when the adversary sees the batch; derivation in ``docs/accounting.md``);
* shuffled epochs: ``K = ⌈steps/b⌉`` full-batch Gaussians, ``ε(α) = K α / (2 z²)`` in total;
* RDP → (ε, δ): ``ε = min_α [R(α) + log(1 − 1/α) − log(δ α)/(α − 1)]`` (Balle et al. 2020, Thm. 21).
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Optional, Sequence, Tuple

from pfair import _core

__all__ = [
    "ACCOUNTANTS",
    "EXACT_SCHEMES",
    "PLD_SCHEMES",
    "SAMPLING_SCHEMES",
    "default_orders",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_mu",
    "delta_for",
    "epsilon_for",
    "epsilon_from_rdp",
    "delta_from_rdp",
    "noise_multiplier_for",
    "rdp_curve",
    "validate_event_args",
]

SAMPLING_SCHEMES = ("without_replacement", "poisson", "poisson_replace_one", "full_batch", "public_batch", "shuffle")
#: Accountants: Rényi DP (every scheme), exact Gaussian / binomial mixture, and the best valid one.
ACCOUNTANTS = ("rdp", "exact", "pld", "best")
#: Schemes whose batch stays hidden (the PLD accountant applies).
PLD_SCHEMES = ("without_replacement", "poisson", "poisson_replace_one")
#: Schemes whose releases are Gaussian given public information (the exact accountant applies).
EXACT_SCHEMES = ("full_batch", "shuffle", "public_batch")


def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number; got {type(value).__name__} {value!r}")
    v = float(value)
    if math.isnan(v):
        raise ValueError(f"{name} must not be NaN")
    return v


def _sampling(sampling: object) -> str:
    if not isinstance(sampling, str):
        raise TypeError(f"sampling must be a str, one of {SAMPLING_SCHEMES}; got {sampling!r}")
    if sampling not in SAMPLING_SCHEMES:
        raise ValueError(f"sampling must be one of {SAMPLING_SCHEMES}; got {sampling!r}")
    return sampling


def _accountant(accountant: object, sampling: str) -> str:
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}; got {accountant!r}")
    if accountant == "exact" and sampling not in EXACT_SCHEMES:
        raise ValueError(
            f"accountant='exact' needs releases that are Gaussian given public information (sampling in "
            f"{EXACT_SCHEMES}); sampling={sampling!r} hides its batch: use accountant='rdp'"
        )
    if accountant == "pld" and sampling not in PLD_SCHEMES:
        raise ValueError(f"accountant='pld' is for hidden batches (sampling in {PLD_SCHEMES}); got {sampling!r}: "
                         "use accountant='exact'")
    if accountant == "best":
        return "exact" if sampling in EXACT_SCHEMES else "rdp"
    return str(accountant)


def _steps(steps: object) -> int:
    if isinstance(steps, bool) or not isinstance(steps, Integral):
        raise TypeError(f"steps must be an int (number of noisy releases); got {steps!r}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1 (number of noisy releases); got {steps}")
    return int(steps)


def _sample_rate(q: object, sampling: str) -> float:
    v = _real("sample_rate", q)
    if not 0.0 < v <= 1.0:
        raise ValueError(f"sample_rate must be in (0, 1] (batch size / silo size); got {v}")
    if sampling == "full_batch" and v != 1.0:
        raise ValueError(
            f"sample_rate must be 1.0 with sampling='full_batch'; got {v} "
            "(use sampling='without_replacement' for fixed-size mini-batches)"
        )
    return v


def _noise_multiplier(z: object) -> float:
    v = _real("noise_multiplier", z)
    if not (v > 0.0 and math.isfinite(v)):
        raise ValueError(f"noise_multiplier must be finite and > 0 (noise std / L2 sensitivity); got {v}")
    return v


def _delta(d: object) -> float:
    v = _real("delta", d)
    if not 0.0 < v < 1.0:
        raise ValueError(f"delta must be in (0, 1), typically 1/n^2 for a silo of n records; got {v}")
    return v


def _epsilon(e: object) -> float:
    v = _real("epsilon", e)
    if not (v > 0.0 and math.isfinite(v)):
        raise ValueError(f"epsilon must be finite and > 0; got {v}")
    return v


def _orders(orders: Optional[Sequence[float]]) -> Optional[list]:
    if orders is None:
        return None
    out = [float(a) for a in orders]
    if not out or any(not (a > 1.0 and math.isfinite(a)) for a in out):
        raise ValueError("orders must be a non-empty sequence of finite RDP orders > 1")
    return out


def validate_event_args(*, sampling: str, sample_rate: float, noise_multiplier: float, steps: int) -> Tuple[str, float, float, int]:
    """Validates one mechanism's parameters; returns them normalised (used by the ledger)."""
    s = _sampling(sampling)
    return s, _sample_rate(sample_rate, s), _noise_multiplier(noise_multiplier), _steps(steps)


def default_orders() -> list:
    """The default RDP orders (dp-accounting's defaults, extended)."""
    return list(_core.default_orders())


def rdp_curve(
    *,
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    sampling: str,
    orders: Optional[Sequence[float]] = None,
) -> Tuple[list, list]:
    """Total RDP ``R(α) = steps · ε_step(α)`` at each order; returns ``(orders, rdp)``."""
    s, q, z, t = validate_event_args(sampling=sampling, sample_rate=sample_rate, noise_multiplier=noise_multiplier, steps=steps)
    o = _orders(orders) or default_orders()
    return o, list(_core.rdp_curve(s, q, z, t, o))


def epsilon_from_rdp(*, orders: Sequence[float], rdp: Sequence[float], delta: float) -> Tuple[float, float]:
    """``(ε, optimal order)`` implied by an RDP curve at ``delta`` (Balle et al. 2020, Thm. 21)."""
    return tuple(_core.epsilon_from_rdp(_orders(orders), [float(r) for r in rdp], _delta(delta)))  # type: ignore[return-value]


def delta_from_rdp(*, orders: Sequence[float], rdp: Sequence[float], epsilon: float) -> Tuple[float, float]:
    """``(δ, optimal order)`` implied by an RDP curve at ``epsilon`` (Balle et al. 2020, Thm. 21)."""
    return tuple(_core.delta_from_rdp(_orders(orders), [float(r) for r in rdp], _epsilon(epsilon)))  # type: ignore[return-value]


def epsilon_for(
    *,
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    delta: float,
    sampling: str,
    accountant: str = "rdp",
    return_order: bool = False,
):
    """ε spent by ``steps`` Gaussian releases with noise multiplier ``noise_multiplier``.

    Parameters
    ----------
    noise_multiplier : float
        ``noise std / L2 sensitivity`` under the adjacency of ``sampling`` (module docstring).
    sample_rate : float
        ``q = batch size / silo size`` in (0, 1]; exactly 1 for ``"full_batch"``.
    steps : int
        Number of noisy releases (rounds the silo answers).
    delta : float
        Target δ in (0, 1).
    sampling : str, required
        ``"without_replacement"``, ``"poisson"``, ``"poisson_replace_one"``, ``"full_batch"``,
        ``"public_batch"``. There is no default on purpose: the hidden-batch bounds
        (``"without_replacement"``, ``"poisson*"``) hold only when nothing sent reveals the
        batch; a SteFFLe silo protecting s sends exact s-free sums, so it is ``"public_batch"``. The per-step bound ε_step(α) is, respectively:
        Wang, Balle, Kasiviswanathan 2019, Thm. 9 (Gaussian form Thm. 27, fractional orders
        Cor. 10); Mironov, Talwar, Zhang 2019, Sec. 3.3; the replace-one bound of
        ``docs/accounting.md`` (weak triangle inequality, Mironov 2017 Prop. 11, and joint
        convexity); α/(2z²) (Mironov 2017, Prop. 7); ``log(1 − q + q e^{α(α−1)/(2z²)})/(α − 1)``
        (public batch, ``docs/accounting.md``). Composition adds RDP (Mironov 2017, Prop. 1).
    accountant : {"rdp", "exact", "pld", "best"}
        ``"exact"``: the smallest ε with ``E_K[δ_Gauss(ε; √K/z)] ≤ δ`` (module docstring), for
        ``sampling`` in :data:`EXACT_SCHEMES`; ``"best"``: the exact value where it applies,
        else RDP (the exact value is never above the RDP one).
    return_order : bool
        Also return the optimal RDP order (``None`` for the exact accountant).

    Returns
    -------
    float, or (float, float) with ``return_order=True``
        RDP: ``ε = min_α [steps·ε_step(α) + log(1 − 1/α) − log(δα)/(α−1)]`` over the default
        orders (Balle, Barthe, Gaboardi, Hsu, Sato 2020, Thm. 21).
    """
    s, q, z, t = validate_event_args(sampling=sampling, sample_rate=sample_rate, noise_multiplier=noise_multiplier, steps=steps)
    a = _accountant(accountant, s)
    if a == "pld":
        eps, order = min(float(_core.pld_epsilon_for(z, q, t, _delta(delta), s)),
                         float(_core.epsilon_for(z, q, t, _delta(delta), s)[0])), None
    elif a == "exact":
        eps, order = min(float(_core.exact_epsilon_for(z, q, t, _delta(delta), s)),
                         float(_core.epsilon_for(z, q, t, _delta(delta), s)[0])), None
    else:
        eps, order = _core.epsilon_for(z, q, t, _delta(delta), s)
    return (eps, order) if return_order else eps


def delta_for(
    *,
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    epsilon: float,
    sampling: str,
    accountant: str = "rdp",
    return_order: bool = False,
):
    """δ at which ``steps`` Gaussian releases are ``epsilon``-DP (inverse of :func:`epsilon_for`).

    RDP: ``log δ = min_α [(α−1)(R(α) − ε + log(1 − 1/α)) − log α]`` (Balle et al. 2020, Thm. 21),
    capped at 1. Exact: ``E_K[δ_Gauss(ε; √K/z)]``. Units and arguments as in :func:`epsilon_for`.
    """
    s, q, z, t = validate_event_args(sampling=sampling, sample_rate=sample_rate, noise_multiplier=noise_multiplier, steps=steps)
    a = _accountant(accountant, s)
    if a == "pld":
        d, order = min(float(_core.pld_delta_for(z, q, t, _epsilon(epsilon), s)),
                       float(_core.delta_for(z, q, t, _epsilon(epsilon), s)[0])), None
    elif a == "exact":
        d, order = min(float(_core.exact_delta_for(z, q, t, _epsilon(epsilon), s)),
                       float(_core.delta_for(z, q, t, _epsilon(epsilon), s)[0])), None
    else:
        d, order = _core.delta_for(z, q, t, _epsilon(epsilon), s)
    return (d, order) if return_order else d


def noise_multiplier_for(
    *,
    epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    sampling: str,
    accountant: str = "rdp",
) -> float:
    """Noise multiplier ``z`` (noise std / L2 sensitivity) so that ``steps`` releases are (ε, δ)-DP.

    ``accountant="exact"`` (or ``"best"`` for a scheme in :data:`EXACT_SCHEMES`): the smallest
    ``z`` (to relative 1e-10, rounded up) whose exact ε meets the target — in closed form
    ``z = √K / μ(ε, δ)`` for full batches and shuffled epochs, by regula falsi on ``log z`` for
    the binomial mixture (< 1 ms; ``docs/accounting.md``).

    ε(z) is :func:`epsilon_for` (RDP bounds cited there, composed over ``steps`` and converted
    with Balle et al. 2020, Thm. 21); it does not increase with z. The bracket ``z ∈ [1e-3, 1e6]``
    is grown by doubling from ``z = 1`` and narrowed by safeguarded secant steps in
    (log z, log ε), always keeping the feasible end, so the returned ``z`` satisfies
    ``0.995·epsilon ≤ epsilon_for(z) ≤ epsilon`` (contract: ≤ target and within 2%). Method and
    timings: ``docs/accounting.md``.

    Raises
    ------
    ValueError
        Bad argument (message names it), or a target unreachable inside the bracket.
    """
    s = _sampling(sampling)
    args = (_epsilon(epsilon), _delta(delta), _sample_rate(sample_rate, s), _steps(steps), s)
    a = _accountant(accountant, s)
    if a == "exact":
        return float(_core.exact_noise_multiplier_for(*args))
    if a == "pld":
        return float(_core.pld_noise_multiplier_for(*args))
    return float(_core.noise_multiplier_for(*args))


def gaussian_delta(*, epsilon: float, mu: float) -> float:
    """δ(ε; μ) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2): the exact privacy profile of a μ-GDP
    mechanism (a Gaussian with sensitivity/std = μ; Balle, Wang 2018, Thm. 8)."""
    e = _real("epsilon", epsilon)
    if not (e >= 0.0 and math.isfinite(e)):
        raise ValueError(f"epsilon must be finite and >= 0; got {e}")
    return float(_core.gaussian_delta(e, _mu(mu)))


def gaussian_epsilon(*, delta: float, mu: float) -> float:
    """The smallest ε (rounded up) at which a μ-GDP mechanism is (ε, δ)-DP (inverse of
    :func:`gaussian_delta` in ε)."""
    return float(_core.gaussian_epsilon(_delta(delta), _mu(mu)))


def gaussian_mu(*, epsilon: float, delta: float) -> float:
    """The largest μ (rounded down) for which μ-GDP implies (ε, δ)-DP. ``K`` Gaussian releases
    with noise multiplier ``z`` are ``√K/z``-GDP (Dong, Roth, Su 2019), so ``z = √K / μ``."""
    return float(_core.gaussian_mu(_epsilon(epsilon), _delta(delta)))


def _mu(mu: object) -> float:
    v = _real("mu", mu)
    if not (v > 0.0 and math.isfinite(v)):
        raise ValueError(f"mu must be finite and > 0 (sensitivity / noise std); got {v}")
    return v
