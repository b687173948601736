"""From a privacy target to each silo's noise: sensitivities → noise multiplier → noise stds.

A silo's message in round t has noised parts p (ψ_θ and ψ_W; also the loss gradient when whole
records are protected) with replace-one sensitivities Δ_p (``rust/src/sensitivity.rs``,
``docs/privacy.md``). Released together with noise stds σ_p they form one Gaussian mechanism with
effective noise multiplier ``z = (Σ_p (Δ_p/σ_p)²)^{-1/2}``, composed over the T rounds with the
bound :func:`accounting_scheme` picks. ``calibration="rdp"`` picks the smallest z whose RDP account meets
(ε, δ) and sets ``σ_p = z √P Δ_p``; ``calibration="pld"`` (record mode's default, hidden batches
only) picks the smallest z whose PLD account (the privacy-loss distribution of the rounds'
dominating pair composed with everything the ledger holds) meets (ε, δ), and the whole run is
charged when it is registered; ``calibration="paper"`` uses the closed form of Gupta et al. 2024
Thm 3.3 and then *measures* the ε that those σ's really deliver with the same accountant.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Optional

import numpy as np

from pfair import _core
from pfair.exceptions import BudgetTooSmall, PrivacyBudgetExceeded, PrivacyWarning
from pfair.notions import FairnessNotion
from pfair.privacy.accountant import PLD_SCHEMES, noise_multiplier_for
from pfair.privacy.ledger import MechanismEvent, PrivacyLedger
from pfair.privacy.paper import paper_noise_stds
from pfair.privacy.proportions import inv_sqrt_proportions

__all__ = ["MAX_NOISE_TO_SIGNAL", "PrivacyWarning", "NoisePlan", "NoiseRequest", "accountant_for", "accounting_scheme",
           "noise_to_signal", "plan_silo_noise", "pld_noise_multiplier_after", "sample_rate_and_denominator"]

#: A silo refuses a run whose :func:`noise_to_signal` ratio is above this (:class:`~pfair.exceptions.
#: BudgetTooSmall`): measured on the bundled tables (``python docs/spent_silo.py``, its output in
#: ``docs/spent_silo.txt``; docs/privacy.md, "A silo with too little left says no"), every fit at a
#: ratio above it was no better than the constant predictor, and every default fit (ε = 1) is far
#: below it.
MAX_NOISE_TO_SIGNAL = 1.5


@dataclass(frozen=True)
class NoisePlan:
    """How one silo noises its messages, and what that buys.

    ``noise_multiplier`` is the effective z of the joint Gaussian mechanism (std / replace-one
    sensitivity); ``epsilon`` is what the exact accountant says the T rounds deliver at ``delta``.
    """

    silo: int
    n_records: int
    sampling: str
    sample_rate: float
    steps: int
    denominator: float
    sensitivity_loss: float
    sensitivity_theta: float
    sensitivity_w: float
    noise_multiplier: float
    sigma_loss: float
    sigma_theta: float
    sigma_w: float
    target_epsilon: float | None
    delta: float | None
    epsilon: float
    calibration: str
    protect: str
    sends_psi: bool
    accounting: str
    #: ``sigma_w`` is a std per unit of ``p(r | b)^{-1/2}``: row ``(b, r)`` of ``h_W`` takes
    #: ``sigma_w · p(r | b)^{-1/2}`` (:attr:`~pfair.settings.SteFFLeSettings.w_noise_rows`); False:
    #: ``sigma_w`` on every coordinate.
    w_rows: bool = False

    def w_noise_stds(self, inv_sqrt_ps: np.ndarray) -> np.ndarray:
        """The std of ``h_W``'s noise on each row ``(b, r)`` (``blocks × k``, flat) under the released
        ``inv_sqrt_ps``."""
        inv = np.asarray(inv_sqrt_ps, dtype=np.float64).ravel()
        return self.sigma_w * inv if self.w_rows else np.full(inv.shape, self.sigma_w)

    def as_dict(self) -> dict:
        return asdict(self)


def sample_rate_and_denominator(sampling: str, n: int, batch_size: int) -> tuple[float, float]:
    """``(q, m)`` of a silo with ``n`` records: the sample rate the accountant sees and the fixed
    divisor of the batch means — ``(1, n)`` for the full batch, ``(m/n, m)`` without replacement,
    ``(q, q·n)`` with Poisson sampling, ``(m/n, m)`` for shuffled epochs (``q = m/n``, at most 1;
    the divisor stays ``m`` when a silo has fewer than ``m`` records, as in Rust's
    ``Sampling::denominator``). The Rust ``SiloConfig`` and every gradient provider divide by this
    ``m``."""
    if sampling == "full_batch":
        return 1.0, float(n)
    q = min(1.0, batch_size / n)
    return q, float(batch_size) if sampling in ("without_replacement", "shuffle") else q * n


def accounting_scheme(sampling: str, protect: str) -> str:
    """The accountant's bound for a silo's rounds under pfair's replace-one adjacency.

    * ``protect="attribute"``: the s-free parts of each message (loss gradient, a_θ, a_W) are
      sent exactly, and they reveal which records are in the batch. Amplification by a hidden
      sample is therefore not available; the rounds are accounted as ``"public_batch"`` (each
      record is in the batch with probability q, and then the round is a Gaussian mechanism),
      or ``"full_batch"``.
    * ``protect="record"``: everything sent is clipped and noised, the batch stays hidden, and
      the subsampled accounts apply: by default (``calibration="pld"``) the PLD of the scheme's
      dominating pair, with RDP as the cross-check — WBK 2019 for ``"without_replacement"``, and
      for Poisson batches the replace-one bound of ``docs/accounting.md`` (noise multiplier
      against the add/remove sensitivity); the plain ``"poisson"`` bound is add/remove-one only.
    * ``sampling="shuffle"`` (either mode): shuffled epochs, ``√K/z``-GDP with K the epochs
      touched — exact, and valid whether or not the batch is public.

    Which accountant prices the scheme is :func:`accountant_for`.
    """
    if sampling in ("full_batch", "shuffle"):
        return sampling
    if protect == "attribute":
        return "public_batch"
    return "poisson_replace_one" if sampling == "poisson" else sampling


def accountant_for(scheme: str, accountant: str = "best") -> str:
    """The accountant calibration uses for ``scheme``: ``"best"`` (default) is the exact Gaussian
    account for schemes that are Gaussian given public information (full batch, shuffled epochs,
    public batches as a binomial mixture — the "public_batch_exact" account) and RDP for hidden
    batches; ``"rdp"`` keeps RDP everywhere (e.g. to reproduce earlier runs). Either way the
    ledger reports the minimum of the valid accountants, so the guarantee is the same."""
    if accountant not in ("best", "rdp"):
        raise ValueError(f"accountant must be 'best' or 'rdp'; got {accountant!r}")
    return accountant


def composed_epsilon(events: list[MechanismEvent], delta: float) -> float:
    """ε at ``delta`` of the composition of ``events``: the minimum of the RDP composition (Balle
    et al. 2020 conversion) and, when every event is Gaussian given public information, the
    exact Gaussian-mixture account — the ledger's currency, recomputed from the events alone."""
    counts: dict = {}
    for e in events:
        key = (e.sampling, e.sample_rate, e.noise_multiplier)
        counts[key] = counts.get(key, 0) + e.count()
    items = [(s, q, z, t) for (s, q, z), t in counts.items()]
    return float(min(_core.ledger_epsilons(items, delta))) if items else 0.0


def noise_to_signal(*, noise_multiplier: float, parts: int, denominator: float, steps: int, lam: float,
                    protect: str, clip_loss: float, clip_theta: float, dims: int = 1) -> float:
    """The noise-to-signal ratio of a silo's θ direction over a run (dimensionless; larger is noisier).

    A round moves θ along the loss gradient (norm at most ``C_loss``) plus λ times the ψ_θ mean
    (norm at most ``C_θ``); the silo's noise on that move has std ``σ = (ℓ σ_loss² + λ² σ_θ²)^{1/2}``
    per coordinate, with ``σ_p = z √P Δ_p``, ``Δ_p = 2 C_p / m`` (docs/privacy.md, "One Gaussian
    mechanism per round") and ℓ = 1 when the loss gradient is noised (``protect="record"``), else 0.
    Summed over the T rounds, the noise along any fixed direction has std ``σ √T`` while the signal
    is at most ``T (C_loss + λ C_θ)``; the ratio of the two is

        r = z √P (2/m) (ℓ C_loss² + λ² C_θ²)^{1/2} / ((C_loss + λ C_θ) √T).

    ``dims``: the linear model predicts from the logits ``x·θ``, which read every one of θ's D
    coordinates, so its noise counts D times in the logits' variance: the ratio is multiplied by
    √D (``dims = D = (d + 1)(l − 1)``). For any other model (``dims = 1``) r counts one direction
    only, a lower bound on how noisy the run is (the noise in the other coordinates and in W is
    left out), so a deep silo refuses only far past where a linear one does.

    It needs no data: z, P, m and T are the noise plan's, λ and the clip norms the settings'. 0 when
    nothing sent is noised (``z = ∞`` or no noised part)."""
    if not (0 < noise_multiplier < math.inf) or parts == 0 or steps <= 0:
        return 0.0
    lam = float(lam)
    loss = clip_loss if protect == "record" else 0.0
    signal = clip_loss + lam * clip_theta
    if not math.isfinite(signal) or signal <= 0:
        return 0.0
    noise = math.sqrt(loss ** 2 + (lam * clip_theta) ** 2)
    return float(noise_multiplier * math.sqrt(parts) * (2.0 / denominator) * noise * math.sqrt(max(1, int(dims)))
                 / (signal * math.sqrt(steps)))


def check_noise_to_signal(plan: "NoisePlan", *, lam: float | None, clip_loss: float, clip_theta: float,
                          ledger: Optional[PrivacyLedger], epsilon: float, dims: int = 1) -> None:
    """Refuse (:class:`~pfair.exceptions.BudgetTooSmall`) a noise plan whose
    :func:`noise_to_signal` ratio is above :data:`MAX_NOISE_TO_SIGNAL`: what the silo's ledger has
    left cannot buy a model better than the constant predictor. Called before anything is charged.
    ``lam=None`` skips the check (callers whose θ step is not SteFFLe's)."""
    if lam is None:
        return
    parts = (plan.protect == "record") + 2 * bool(plan.sends_psi)
    r = noise_to_signal(noise_multiplier=plan.noise_multiplier, parts=parts, denominator=plan.denominator,
                        steps=plan.steps, lam=lam, protect=plan.protect, clip_loss=clip_loss, clip_theta=clip_theta,
                        dims=dims)
    if r <= MAX_NOISE_TO_SIGNAL:
        return

    spent = ledger.epsilon_spent() if ledger is not None else 0.0
    budget = ledger.epsilon if ledger is not None else epsilon
    # The z at which the run would pass, and what a fresh ledger would give for the same run.
    z_max = plan.noise_multiplier * MAX_NOISE_TO_SIGNAL / r
    raise BudgetTooSmall(
        f"silo {plan.silo}: its ledger has spent epsilon={spent:.6g} of its budget {budget:g} (counting this run's "
        f"releases before its rounds: a p_s histogram, checkpoints, evaluations), and what is left "
        f"(epsilon={max(0.0, epsilon - spent):.3g} for this run) buys noise multiplier z={plan.noise_multiplier:.4g} "
        f"for its {plan.steps} rounds: noise-to-signal ratio {r:.3g} of the run's θ updates, above "
        f"{MAX_NOISE_TO_SIGNAL:g} (the fit would need z <= {z_max:.4g}). Above that ratio the measured fits on the bundled tables did not beat the "
        "constant predictor (docs/privacy.md, 'A silo with too little left says no'), so the silo refuses before "
        "anything is released or charged. Start a new ledger only if these records may carry a new budget "
        "(fit(..., ledgers='new') or a new Federation in a simulation; pfair node reset --state-dir DIR "
        "--i-understand or deploy --new-ledgers on a deployed silo), or train this run with fewer epochs, a larger "
        "batch or a smaller lam", silo=plan.silo, ratio=r, noise_multiplier=plan.noise_multiplier, needed=z_max,
        spent=spent, budget=budget)


def noise_multiplier_after(ledger: PrivacyLedger, *, epsilon: float, sample_rate: float, steps: int,
                           sampling: str, accountant: str = "best") -> float:
    """Smallest z (to 0.5%) such that what ``ledger`` has recorded plus ``steps`` rounds at z
    compose to at most ``epsilon`` at the ledger's δ, in the ledger's currency (``accountant=
    "best"``: the minimum of RDP and the exact account) or by RDP alone (``"rdp"``).

    Geometric bisection on z in Rust (``ledger_noise_multiplier_after``; ε of the composition
    decreases in z); the returned z always meets the target (the upper end of the final bracket).
    The answer is a function of the ledger's mechanisms, δ and the round schedule only, so silos
    of one size with the same history share one computation (cached).

    Raises :class:`~pfair.exceptions.PrivacyBudgetExceeded` when no z up to 1e7 meets the target.
    """
    z = _z_after(ledger.mechanisms(), float(ledger.delta), float(epsilon), str(sampling), float(sample_rate),
                 int(steps), accountant_for(sampling, accountant))
    if z is None:
        raise PrivacyBudgetExceeded(
            f"epsilon={epsilon:g} cannot be met after the earlier releases: what is left of the budget would "
            "need a noise multiplier above 1e7 (pure noise). The silo refuses to train again"
        )
    return z


def pld_noise_multiplier_after(ledger: PrivacyLedger, *, epsilon: float, sample_rate: float, steps: int,
                               sampling: str) -> float:
    """Smallest z (to 0.5%, rounded up) such that what ``ledger`` has recorded plus ``steps``
    rounds of the hidden-batch ``sampling`` at z compose to at most ``epsilon`` at the ledger's δ
    in its PLD currency (``ledger_pld_noise_multiplier_after`` in Rust: the PLD of everything
    held composed once, then secant and regula-falsi steps on log z from the RDP answer; a few
    ms for an Adult-sized silo, ``benches/python/test_pld_bench.py``). The run is charged in full
    when it is registered (:meth:`PrivacyLedger.begin_run` with ``prepaid=True``): a PLD total is
    not a valid stopping rule, so its rounds are paid before the first is answered. Cached like
    :func:`noise_multiplier_after`.

    Raises :class:`~pfair.exceptions.PrivacyBudgetExceeded` when no z up to 1e7 meets the target."""
    z = _z_after(ledger.mechanisms(), float(ledger.delta), float(epsilon), str(sampling), float(sample_rate),
                 int(steps), "pld")
    if z is None:
        raise PrivacyBudgetExceeded(
            f"epsilon={epsilon:g} cannot be met after the earlier releases: what is left of the budget would "
            "need a noise multiplier above 1e7 (pure noise). The silo refuses to train again"
        )
    return z


@functools.lru_cache(maxsize=4096)
def _z_after(mechanisms: tuple, delta: float, epsilon: float, sampling: str, q: float, steps: int,
             accountant: str) -> Optional[float]:
    return _core.ledger_noise_multiplier_after(list(mechanisms), delta, epsilon, sampling, q, steps, accountant)


@functools.lru_cache(maxsize=4096)
def _z_first(epsilon: float, delta: float, q: float, steps: int, sampling: str, accountant: str) -> float:
    """:func:`noise_multiplier_for` for a silo whose ledger is empty (cached: silos of one size share it)."""
    return noise_multiplier_for(epsilon=epsilon, delta=delta, sample_rate=q, steps=steps, sampling=sampling,
                                accountant=accountant)


def mechanism_terms(*, n_records: int, batch_size: int, sampling: str, proportions: np.ndarray,
                    notion: FairnessNotion, protect: str, clip_loss: float, clip_theta: float, clip_w: float,
                    sends_psi: bool, sample_rate: float | None = None, denominator: float | None = None,
                    w_rows: bool = False) -> dict:
    """The fields of a :class:`NoisePlan` that follow from a silo's size, settings and the
    released ``proportions`` alone: batch scheme, rate and divisor, protection, parts sent, and
    the replace-one sensitivity Δ of each noised part (0 for a part not noised). A plan is valid
    for settings only if these fields are what they give (:meth:`SiloParty.adopt` checks them).
    ``sample_rate`` and ``denominator`` replace :func:`sample_rate_and_denominator`'s (a sensitive
    silo of a hybrid topology sends sums, divisor 1, over batches drawn at its own rate).
    ``w_rows``: ``h_W``'s noise scaled row by row (attribute mode; its Δ_W is then per unit of
    ``p^{-1/2}``, ``2√2 / m``: docs/privacy.md, "Noise on h_W row by row")."""
    w_rows = bool(w_rows) and protect == "attribute"
    q, denom = sample_rate_and_denominator(sampling, n_records, batch_size)
    q = q if sample_rate is None else float(sample_rate)
    denom = denom if denominator is None else float(denominator)
    props = np.asarray(proportions, dtype=np.float64)
    d_loss, d_theta, d_w = _core.sensitivities(
        inv_sqrt_proportions(props), n_groups=props.shape[1], denom=denom, **notion.core_args(), protect=protect,
        clip_loss=clip_loss, clip_theta=clip_theta, clip_w=clip_w, w_rows=w_rows)
    return dict(sampling=sampling, sample_rate=q, denominator=denom, protect=protect, sends_psi=sends_psi,
                sensitivity_loss=d_loss if protect == "record" else 0.0,
                sensitivity_theta=d_theta if sends_psi else 0.0, sensitivity_w=d_w if sends_psi else 0.0,
                w_rows=w_rows and sends_psi)


@dataclass(frozen=True)
class NoiseRequest:
    """What a party that spends budget asks the noise planner (:func:`plan_silo_noise`) for:
    who it is and how many records its rounds sample, its batches, what its messages send and
    protect, its clip norms, the run's length and its budget. The released proportions and its
    ledger come separately (they are the run's and the silo's state, not its request).

    ``sample_rate`` and ``denominator`` replace :func:`sample_rate_and_denominator`'s (a sensitive
    silo of a hybrid topology sends sums, divisor 1, over public batches drawn at its own rate
    q_c); ``first_fit_accountant``: the accountant of a first fit on an empty ledger (the hybrid
    topologies price it by RDP at ε itself; ``accountant`` then applies to later fits only);
    ``lam``: the run's λ, given for the refusal rule (:func:`check_noise_to_signal`: a plan whose
    :func:`noise_to_signal` ratio is above :data:`MAX_NOISE_TO_SIGNAL` raises
    :class:`~pfair.exceptions.BudgetTooSmall`), with ``dims`` its θ length."""

    silo: int
    n_records: int
    batch_size: int
    sampling: str
    steps: int
    epsilon: float | None
    delta: float | None
    notion: FairnessNotion
    protect: str
    clip_loss: float
    clip_theta: float
    clip_w: float
    calibration: str
    sends_psi: bool
    accountant: str = "best"
    sample_rate: float | None = None
    denominator: float | None = None
    first_fit_accountant: str | None = None
    lam: float | None = None
    dims: int = 1
    #: The clip norm the refusal rule prices h_θ's noise with (None: ``clip_theta``); with an
    #: adaptive clip ``clip_theta`` is the unit 1 and this the fixed default
    #: (:attr:`~pfair.settings.SteFFLeSettings.reference_clip`).
    refusal_clip_theta: float | None = None
    #: ``h_W``'s noise scaled row by row (:attr:`~pfair.settings.SteFFLeSettings.w_noise_rows`).
    w_rows: bool = False

    @classmethod
    def of_settings(cls, settings: Any, *, silo: int, n_records: int, steps: int, delta: float | None,
                    **overrides: Any) -> "NoiseRequest":
        """The request of a silo of ``n_records`` training records under ``settings`` (a
        :class:`~pfair.settings.SteFFLeSettings`) for ``steps`` rounds at ``delta``; ``overrides``
        replace any field the settings would give."""
        st = settings
        fields = dict(silo=silo, n_records=n_records, batch_size=st.batch_size, sampling=st.sampling, steps=steps,
                      epsilon=st.epsilon, delta=delta, notion=st.notion, protect=st.protect,
                      calibration=st.calibration, sends_psi=st.sends_psi, **st.clips(),
                      refusal_clip_theta=st.reference_clip, w_rows=st.w_noise_rows)
        fields.update(overrides)
        return cls(**fields)

    def terms(self, proportions: np.ndarray) -> dict:
        """:func:`mechanism_terms` of this request under the released ``proportions``."""
        return mechanism_terms(n_records=self.n_records, batch_size=self.batch_size, sampling=self.sampling,
                               proportions=proportions, notion=self.notion, protect=self.protect,
                               clip_loss=self.clip_loss, clip_theta=self.clip_theta,
                               clip_w=self.clip_w, sends_psi=self.sends_psi, sample_rate=self.sample_rate,
                               denominator=self.denominator, w_rows=self.w_rows)


def plan_silo_noise(request: NoiseRequest, proportions: np.ndarray, *,
                    ledger: Optional[PrivacyLedger] = None) -> NoisePlan:
    """Noise plan of one silo for ``request.steps`` rounds (see the module docstring); the one
    noise planner of every party that spends budget (:class:`NoiseRequest` says what it asks).

    ``proportions`` must be released values (public, or the DP histogram's). What ``ledger``
    has recorded already (earlier fits, the DP histogram of s) is composed with the rounds: the
    training noise is calibrated so that everything together meets (ε, δ) with ``δ`` the
    ledger's. A ledger with nothing left raises :class:`PrivacyBudgetExceeded` before any round.
    Nothing is charged here; callers charge after planning.
    """
    if not isinstance(request, NoiseRequest):
        raise TypeError(f"plan_silo_noise takes a NoiseRequest (pfair.privacy.calibration), got "
                        f"{type(request).__name__}")
    r = request
    silo, n_records, sampling, steps, epsilon, delta = r.silo, r.n_records, r.sampling, r.steps, r.epsilon, r.delta
    notion, protect, calibration, sends_psi = r.notion, r.protect, r.calibration, r.sends_psi
    clip_loss, clip_theta, clip_w, sample_rate = r.clip_loss, r.clip_theta, r.clip_w, r.sample_rate
    proportions = np.asarray(proportions, dtype=np.float64)
    terms = r.terms(proportions)
    q, denom = terms["sample_rate"], terms["denominator"]
    scheme = accounting_scheme(sampling, protect)
    if sample_rate is not None and scheme == "public_batch" and q >= 1:
        scheme = "full_batch"
    inv_sqrt_ps = inv_sqrt_proportions(proportions)
    kw = dict(n_groups=proportions.shape[1], denom=denom, **notion.core_args(), protect=protect,
              clip_loss=clip_loss, clip_theta=clip_theta, clip_w=clip_w, w_rows=terms["w_rows"])
    # What the accountant's noise multiplier is measured against (docs/accounting.md, units table).
    relation = "add_remove" if scheme == "poisson_replace_one" else "replace_one"
    a_loss, a_theta, a_w = _core.sensitivities(inv_sqrt_ps, relation=relation, **kw)
    # Noised parts: those that depend on what a neighbour may change, in the order (loss, θ, W).
    names = (["loss"] if protect == "record" else []) + (["theta", "w"] if sends_psi else [])
    acct = {"loss": a_loss, "theta": a_theta, "w": a_w}
    parts = [acct[p] for p in names]
    base = dict(silo=silo, n_records=n_records, steps=steps, target_epsilon=epsilon, delta=delta,
                calibration=calibration, accounting=scheme, **terms)
    if epsilon is None:
        return NoisePlan(**base, noise_multiplier=0.0, sigma_loss=0.0, sigma_theta=0.0, sigma_w=0.0, epsilon=math.inf)
    if ledger is None:
        ledger = PrivacyLedger(epsilon=epsilon, delta=delta, silo=silo)
    spent_before = ledger.epsilon_spent()
    if not parts:  # nothing sent depends on the protected data: no noise, no cost beyond the prior
        return NoisePlan(**base, noise_multiplier=math.inf, sigma_loss=0.0, sigma_theta=0.0, sigma_w=0.0,
                         epsilon=spent_before)
    if spent_before >= epsilon:
        raise PrivacyBudgetExceeded(
            f"silo {silo}: its ledger has spent epsilon={spent_before:.6g} of its budget {epsilon:g} already "
            "(earlier fits or releases); nothing is left for training. In a simulation, start new ledgers "
            "explicitly with fit(..., ledgers='new') (or a new Federation); on real data, this silo's records cannot "
            "be used again without raising their total privacy cost"
        )

    if calibration == "pld":
        if scheme not in PLD_SCHEMES:
            raise ValueError(f"calibration='pld' prices hidden batches ({PLD_SCHEMES}); silo {silo}'s rounds are "
                             f"accounted as {scheme!r}: use calibration='auto'")
        z = pld_noise_multiplier_after(ledger, epsilon=epsilon, sample_rate=q, steps=steps, sampling=scheme)
        stds = _core.noise_stds(parts, z)
    elif calibration == "rdp":
        acct = accountant_for(scheme, r.accountant)
        if ledger.events:
            z = noise_multiplier_after(ledger, epsilon=epsilon, sample_rate=q, steps=steps, sampling=scheme,
                                       accountant=acct)
        else:
            acct = acct if r.first_fit_accountant is None else accountant_for(scheme, r.first_fit_accountant)
            # The exact accountant would land on the target itself; aim inside the band RDP
            # calibration lands in ([99.5%, 100%]), so a resumed or later fit keeps a sliver.
            target = epsilon * (1 - 0.5 * _core.CALIBRATION_TOL) if acct == "best" else epsilon
            z = _z_first(float(target), float(delta), float(q), int(steps), scheme, acct)
        stds = _core.noise_stds(parts, z)
    else:  # "paper": Gupta et al. 2024, Thm 3.3 closed form, then measured
        if terms["w_rows"]:
            raise ValueError("calibration='paper' prices the isotropic release of h_W (one std on every row); "
                             "its noise cannot be scaled row by row: plan it with w_rows=False")
        rho = float(proportions.min())
        sigma_theta, sigma_w = paper_noise_stds(
            epsilon=epsilon, delta=delta, n=n_records, steps=steps, rho=rho, clip=clip_theta
        )
        stds = [sigma_theta, sigma_w]
        z = _core.effective_noise_multiplier(parts, stds)
    event = MechanismEvent(name="steffle_rounds", sampling=scheme, sample_rate=q, noise_multiplier=z, steps=steps)
    spent = ledger.epsilon_with([event])
    sig = dict(zip(names, stds))
    plan = NoisePlan(
        **base,
        noise_multiplier=z,
        sigma_loss=sig.get("loss", 0.0),
        sigma_theta=sig.get("theta", 0.0),
        sigma_w=sig.get("w", 0.0),
        epsilon=spent,
    )
    check_noise_to_signal(plan, lam=r.lam, clip_loss=clip_loss,
                          clip_theta=clip_theta if r.refusal_clip_theta is None else r.refusal_clip_theta,
                          ledger=ledger, epsilon=epsilon, dims=r.dims)
    return plan


def warn_if_spent(silo: object, ledger: Optional[PrivacyLedger]) -> None:
    """Warn, when a fit starts, that a silo's ledger carries spending from earlier fits: the fit
    gets only what is left, so its noise is larger."""
    if ledger is not None and ledger.events:
        spent = ledger.epsilon_spent()
        left = max(0.0, ledger.epsilon - spent)
        warnings.warn(
            f"silo {silo}: its ledger has already spent epsilon={spent:.6g} of its budget {ledger.epsilon:g} on "
            f"earlier fits or releases on these records, so this fit gets only what is left: the epsilon={left:.3g} "
            f"left ({left / ledger.epsilon:.1%} of the budget). Its noise is larger than a fresh fit's, and each further "
            "fit gets less until the ledger refuses (PrivacyBudgetExceeded). The budget belongs to the records, not "
            "to one fit. To train again from a full budget, choose it explicitly: fit(..., ledgers='new') in a "
            "simulation (or a new Federation); on real data that adds to each record's total privacy cost",
            PrivacyWarning,
            stacklevel=4,
        )


def warn_if_over_budget(plans: list[NoisePlan]) -> None:
    """Warn when a silo's planned rounds would exceed its target (possible only in ``"paper"``
    mode): its ledger keeps the budget at the target and refuses the rounds past it."""
    for p in plans:
        if p.target_epsilon is not None and p.epsilon > p.target_epsilon * (1 + 1e-9):
            warnings.warn(
                f"silo {p.silo}: calibration={p.calibration!r} noise would deliver epsilon={p.epsilon:.3g} over "
                f"{p.steps} rounds under the exact accountant, above the budget {p.target_epsilon:g} at "
                f"delta={p.delta:.3g}; the silo refuses the rounds past its budget, so training stops early. "
                "Use calibration='rdp' for the requested guarantee and every round",
                PrivacyWarning,
                stacklevel=3,
            )
