"""Record mode's PLD account: the dominating pair of one step, checked by brute force; the default
calibration checked against an independent composition (dp-accounting) and against RDP; the
ledger's PLD currency and its prepaid runs (a PLD total is not a stopping rule).

Reference implementations here are independent of ``rust/src/accounting/pld.rs``: the pair's
profile from scipy's normal law, exact δ(ε) of small data sets by numerical integration, and
dp-accounting's FFT composition.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy.integrate import trapezoid
from scipy.stats import norm

from pfair import SteFFLe, _core
from pfair.exceptions import PrivacyBudgetExceeded, PrivacyWarning, ReplayRefused
from pfair.privacy import MechanismEvent, PrivacyLedger
from pfair.privacy.accountant import epsilon_for, noise_multiplier_for
from pfair.privacy.calibration import pld_noise_multiplier_after

ADULT_Q, ADULT_T, ADULT_DELTA = 256 / 11305, 1800, 1 / 11305**2


# ------------------------------------------------------------------------------ the pair's profile


def remove_profile(eps: float, q: float, mu: float) -> float:
    """H_{e^ε}((1−q)N(0,1) + qN(μ,1) ‖ N(0,1)): the loss increases in x, so the optimal set is a
    half-line {x > x_ε}."""
    g = math.exp(eps)
    if g <= 1 - q:
        return 1 - g
    x = (math.log((g - 1 + q) / q) + mu * mu / 2) / mu
    return (1 - q) * norm.sf(x) + q * norm.sf(x - mu) - g * norm.sf(x)


def add_profile(eps: float, q: float, mu: float) -> float:
    """H_{e^ε}(N(0,1) ‖ (1−q)N(0,1) + qN(μ,1)): the optimal set is {x < x_{−ε}}."""
    g = math.exp(eps)
    if math.exp(-eps) <= 1 - q:
        return 0.0
    x = (math.log((math.exp(-eps) - 1 + q) / q) + mu * mu / 2) / mu
    return norm.cdf(x) - g * ((1 - q) * norm.cdf(x) + q * norm.cdf(x - mu))


def sym_profile(eps: float, q: float, mu: float) -> float:
    """The pair pfair composes for fixed-size batches without replacement: the larger of the two."""
    return max(remove_profile(eps, q, mu), add_profile(eps, q, mu), max(0.0, 1 - math.exp(eps)))


def exact_delta(sums: np.ndarray, sums_nb: np.ndarray, sigma: float, eps: np.ndarray) -> np.ndarray:
    """δ(ε) = ∫ (p − e^ε p')₊ for p, p' uniform mixtures of N(s, σ²) over the batch sums ``sums``
    (one per batch) and ``sums_nb`` (the same batches of the neighbour), by the trapezoid rule on
    a grid of σ/400 over ±14σ around every mean."""
    lo, hi = min(sums.min(), sums_nb.min()) - 14 * sigma, max(sums.max(), sums_nb.max()) + 14 * sigma
    x = np.linspace(lo, hi, int((hi - lo) / sigma * 400) + 1)
    p = norm.pdf((x[None, :] - sums[:, None]) / sigma).mean(axis=0) / sigma
    p2 = norm.pdf((x[None, :] - sums_nb[:, None]) / sigma).mean(axis=0) / sigma
    return np.array([trapezoid(np.maximum(p - math.exp(e) * p2, 0.0), x) for e in eps])


def batch_sums(values: np.ndarray, m: int) -> np.ndarray:
    """The sum of every m-subset of ``values`` (a fixed-size batch drawn without replacement)."""
    return np.array([values[list(b)].sum() for b in itertools.combinations(range(len(values)), m)])


EPS = np.array([-1.0, -0.3, 0.0, 0.3, 0.7, 1.5])


@pytest.mark.parametrize("n,m,z", [(4, 2, 0.8), pytest.param(3, 1, 0.6, marks=pytest.mark.slow),
                                   pytest.param(5, 2, 0.7, marks=pytest.mark.slow),
                                   pytest.param(5, 4, 1.0, marks=pytest.mark.slow)])
def test_one_step_pair_is_attained_and_never_exceeded_by_brute_force(n, m, z):
    """Every data set of n ≤ 5 records with contributions in {−C, 0, C} (replace-one sensitivity of
    the batch sum Δ = 2C), every replacement of one record by another value there, both orders, and
    random contributions in [−C, C]: the exact δ(ε) of one noised batch sum never exceeds the pair's
    profile at μ = Δ/σ, and the largest over the configurations attains it (other records −C, the
    replaced one C or −C, or the mirror image)."""
    C, rng = 1.0, np.random.default_rng(n * 10 + m)
    q, sigma = m / n, z * 2 * C
    bound = np.array([sym_profile(e, q, 1 / z) for e in EPS])
    worst = np.zeros_like(EPS)
    configs = [np.array(c) for c in itertools.combinations_with_replacement((-C, 0.0, C), n - 1)]
    configs += [rng.uniform(-C, C, size=n - 1) for _ in range(6)]
    # Records are exchangeable: the replaced record is the first one.
    for others in configs:
        pairs = [(a, b) for a in (-C, 0.0, C) for b in (-C, 0.0, C) if a != b]
        pairs += [tuple(rng.uniform(-C, C, size=2)) for _ in range(2)]
        for a, b in pairs:
            d = exact_delta(batch_sums(np.r_[a, others], m), batch_sums(np.r_[b, others], m), sigma, EPS)
            assert np.all(d <= bound * (1 + 1e-6) + 1e-9), (n, m, others, a, b, d, bound)
            worst = np.maximum(worst, d)
    assert np.allclose(worst, bound, rtol=1e-5, atol=1e-9), (n, m, worst, bound)


def test_rust_pair_is_the_reference_profile_from_above():
    """One step of ``without_replacement`` in Rust (connect-the-dots on its grid) lies on or above
    the reference profile, and within the chord's error of it."""
    for q, z in [(0.4, 0.7), (0.05, 2.0), (ADULT_Q, 5.4)]:
        for e in [0.0, 0.05, 0.3, 1.0]:
            ref = sym_profile(e, q, 1 / z)
            got = _core.pld_delta_for(z, q, 1, e, "without_replacement")
            assert ref * (1 - 1e-9) - 1e-15 <= got <= ref * 1.01 + 1e-12, (q, z, e, got, ref)


# ------------------------------------------------------------------------------ composition, independently


def dp_accounting_epsilon(q: float, z: float, steps: int, delta: float, histogram_z: float | None = None) -> float:
    """ε of ``steps`` steps of the symmetric pair (plus one Gaussian release at ``histogram_z``) by
    dp-accounting's composition, from the reference profile discretised by dp-accounting's own
    connect-the-dots at 1e-4 (finer than pfair's 8e-3 ledger grid)."""
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld import privacy_loss_distribution as pld

    h, mu = 1e-4, 1 / z
    lo = -1
    while sym_profile(lo * h, q, mu) - (1 - math.exp(lo * h)) > 1e-30 and lo * h > -10:
        lo *= 2
    hi = 1
    while sym_profile(hi * h, q, mu) > 1e-30 and hi * h < 30:
        hi *= 2
    deltas = [sym_profile(j * h, q, mu) for j in range(lo, hi + 1)]
    step = pld.PrivacyLossDistribution(pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(h, lo, hi, deltas))
    total = step.self_compose(steps)
    if histogram_z is not None:
        total = total.compose(pld.from_gaussian_mechanism(histogram_z, value_discretization_interval=h))
    return total.get_epsilon_for_delta(delta)


def test_default_record_calibration_meets_the_target_by_dp_accounting():
    """The Adult-sized silo: histogram (z_h = 20) then 1,800 rounds calibrated by the PLD currency
    to ε = 1; dp-accounting's independent composition of the same pair says ε ≤ 1."""
    ledger = PrivacyLedger(epsilon=1.0, delta=ADULT_DELTA)
    ledger.charge(MechanismEvent.gaussian_histogram(noise_multiplier=20.0))
    z = pld_noise_multiplier_after(ledger, epsilon=1.0, sample_rate=ADULT_Q, steps=ADULT_T,
                                   sampling="without_replacement")
    independent = dp_accounting_epsilon(ADULT_Q, z, ADULT_T, ADULT_DELTA, histogram_z=20.0)
    assert 0.97 <= independent <= 1.0, (z, independent)


@pytest.mark.slow
def test_a_record_protection_fit_delivers_its_epsilon_by_dp_accounting():
    """A default record-mode fit (PLD calibration, histogram of s, validation tables at the
    checkpoints): every silo's ledger holds these Gaussian releases and one prepaid run, and
    dp-accounting's composition of them is within the budget."""
    rng = np.random.default_rng(1)
    n = 1500
    s = rng.integers(0, 2, size=n)
    X = rng.normal(size=(n, 3)) + s[:, None] * 0.5
    y = (X[:, 0] + rng.normal(size=n) > 0.5).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        m = SteFFLe(epsilon=1.0, protect="record", epochs=3, batch_size=64, seed=0).fit(
            X, y, sensitive_features=s, silos=np.arange(n) % 3)
    rep = m.privacy_report_
    assert (rep["calibration"] == "pld").all() and (rep["accounting"] == "without_replacement").all()
    for ledger in m.ledgers_[:1]:  # silos of one size: one computation
        (run,) = [e for e in ledger.events if e.sampling == "without_replacement"]
        gaussian = [e for e in ledger.events if e.sampling == "full_batch"]
        # The histogram of s and the 2 checkpoints' validation tables (record mode: charged).
        assert sorted(e.name for e in gaussian)[-1] == "validation_table"
        assert sum(e.steps for e in gaussian if e.name == "validation_table") == 2
        assert run.steps == rep["steps"].iloc[0]  # the whole plan, charged once
        # Full-batch Gaussian releases compose into one Gaussian of μ² = Σ steps / z².
        z_gauss = sum(e.steps / e.noise_multiplier ** 2 for e in gaussian) ** -0.5
        eps = dp_accounting_epsilon(run.sample_rate, run.noise_multiplier, run.steps, ledger.delta,
                                    histogram_z=z_gauss)
        assert eps <= 1.0 and ledger.epsilon_spent() <= 1.0
        assert ledger.epsilons()["pld"] >= eps * (1 - 1e-3)  # pfair's coarser grid is the pessimistic one


@pytest.mark.parametrize("q,z,steps", [(ADULT_Q, 10.67, ADULT_T), (ADULT_Q, 5.4, ADULT_T), (0.05, 1.2, 40),
                                       (0.01, 0.8, 3000), (0.3, 3.0, 50)])
def test_pld_epsilon_is_never_above_rdp(q, z, steps):
    """The RDP bound (Wang, Balle and Kasiviswanathan 2019) stays as the cross-check: for the same
    rounds the PLD ε is never above it, and at the RDP-calibrated Adult noise it is about half."""
    d = ADULT_DELTA
    rdp = epsilon_for(noise_multiplier=z, sample_rate=q, steps=steps, delta=d, sampling="without_replacement")
    pld = _core.pld_epsilon_for(z, q, steps, d, "without_replacement")
    ledger = _core.ledger_epsilons([("without_replacement", q, z, steps)], d)
    assert pld <= rdp and ledger[2] <= rdp
    assert pld <= ledger[2] <= pld * 1.003 + 1e-9  # the ledger's coarse grid: above, and close
    if z == 10.67:
        assert 0.4 < pld / rdp < 0.5


def test_default_calibration_is_pld_for_hidden_batches_only():
    from pfair.settings import SteFFLeSettings

    assert SteFFLeSettings.from_estimator_params({"protect": "record", "epsilon": 1.0}).calibration == "pld"
    assert SteFFLeSettings.from_estimator_params({"protect": "record", "epsilon": 1.0,
                                                  "sampling": "poisson"}).calibration == "pld"
    for kw in ({"protect": "record", "sampling": "shuffle"}, {"protect": "attribute"},
               {"protect": "record", "sampling": "full_batch"}):
        assert SteFFLeSettings.from_estimator_params({**kw, "epsilon": 1.0}).calibration == "rdp"
    with pytest.raises(ValueError, match="calibration='pld' prices hidden batches"):
        SteFFLeSettings.from_estimator_params({"protect": "attribute", "calibration": "pld", "epsilon": 1.0})


def test_pld_calibration_halves_record_noise_on_an_adult_silo():
    """The Adult-sized silo at ε = 1: RDP z = 10.67, PLD z ≈ 5.4 (−50%), and the PLD z meets the
    target by the fine-grid accountant."""
    z_rdp = noise_multiplier_for(epsilon=1.0, delta=ADULT_DELTA, sample_rate=ADULT_Q, steps=ADULT_T,
                                 sampling="without_replacement")
    z = noise_multiplier_for(epsilon=1.0, delta=ADULT_DELTA, sample_rate=ADULT_Q, steps=ADULT_T,
                             sampling="without_replacement", accountant="pld")
    assert z_rdp == pytest.approx(10.67, abs=0.01)
    assert 0.48 < z / z_rdp < 0.52
    assert 0.99 <= _core.pld_epsilon_for(z, ADULT_Q, ADULT_T, ADULT_DELTA, "without_replacement") <= 1.0


# ------------------------------------------------------------------------------ the ledger's PLD currency


def _run_ledger(tmp_path=None) -> tuple[PrivacyLedger, float]:
    ledger = PrivacyLedger(epsilon=1.0, delta=ADULT_DELTA, silo=0,
                           path=None if tmp_path is None else tmp_path / "ledger.json")
    ledger.charge(MechanismEvent.gaussian_histogram(noise_multiplier=20.0))
    z = pld_noise_multiplier_after(ledger, epsilon=1.0, sample_rate=ADULT_Q, steps=ADULT_T,
                                   sampling="without_replacement")
    return ledger, z


def test_a_prepaid_run_is_charged_in_full_when_registered(tmp_path):
    ledger, z = _run_ledger(tmp_path)
    before = ledger.epsilon_spent()
    ledger.begin_run("r", sampling="without_replacement", sample_rate=ADULT_Q, noise_multiplier=z,
                     planned_steps=ADULT_T, prepaid=True)
    spent = ledger.epsilon_spent()
    assert before < spent <= 1.0 and len(ledger.events) == 2 and ledger.events[1].steps == ADULT_T
    # Rounds cost nothing more; replays and rounds past the plan are still refused.
    ledger.charge_rounds("r", 0, 45)
    assert ledger.epsilon_spent() == spent and len(ledger.events) == 2
    with pytest.raises(ReplayRefused):
        ledger.charge_rounds("r", 10, 1)
    with pytest.raises(PrivacyBudgetExceeded, match="planned"):
        ledger.charge_rounds("r", ADULT_T - 1, 2)
    # A resume registers the same run and pays nothing again; a different plan is refused.
    reloaded = PrivacyLedger.load(tmp_path / "ledger.json")
    reloaded.begin_run("r", sampling="without_replacement", sample_rate=ADULT_Q, noise_multiplier=z,
                       planned_steps=ADULT_T, prepaid=True)
    assert reloaded.epsilon_spent() == spent and reloaded.next_round("r") == 45
    from pfair.exceptions import LedgerMismatch
    with pytest.raises(LedgerMismatch):
        reloaded.begin_run("r", sampling="without_replacement", sample_rate=ADULT_Q, noise_multiplier=z,
                           planned_steps=ADULT_T)
    # Nothing is left: a second prepaid run is refused before anything is recorded.
    with pytest.raises(PrivacyBudgetExceeded):
        reloaded.begin_run("s", sampling="without_replacement", sample_rate=ADULT_Q, noise_multiplier=z,
                           planned_steps=ADULT_T, prepaid=True)
    assert "s" not in reloaded.runs and len(reloaded.events) == 2
    # A stopped run has paid for its plan: the ledger is what it would be after every round.
    full = PrivacyLedger(epsilon=1.0, delta=ADULT_DELTA)
    full.charge(MechanismEvent.gaussian_histogram(noise_multiplier=20.0))
    full.charge(MechanismEvent(name="steffle_rounds", sampling="without_replacement", sample_rate=ADULT_Q,
                               noise_multiplier=z, steps=ADULT_T))
    assert full.epsilon_spent() == spent


def test_prepaid_runs_only_for_pld_schemes():
    ledger = PrivacyLedger(epsilon=1.0, delta=1e-6)
    with pytest.raises(ValueError, match="prepaid"):
        ledger.begin_run("r", sampling="shuffle", sample_rate=0.1, noise_multiplier=30.0, planned_steps=100,
                         prepaid=True)


def test_pld_calibration_refuses_when_nothing_is_left():
    ledger = PrivacyLedger(epsilon=1.0, delta=1e-6)
    ledger.charge(MechanismEvent.gaussian_histogram(noise_multiplier=5.0))
    with pytest.raises(PrivacyBudgetExceeded, match="cannot be met"):
        pld_noise_multiplier_after(ledger, epsilon=ledger.epsilon_spent() * (1 - 1e-9), sample_rate=0.1, steps=100,
                                   sampling="without_replacement")


def test_a_second_fit_after_a_pld_priced_one_gets_what_the_pld_says_is_left():
    """RDP prices the first run above the budget; the PLD currency says what is left, and the
    second run's calibration meets the budget by it."""
    ledger, z = _run_ledger()
    ledger.begin_run("first", sampling="without_replacement", sample_rate=ADULT_Q, noise_multiplier=1.5 * z,
                     planned_steps=ADULT_T, prepaid=True)
    assert ledger.epsilons()["rdp"] > 1.0 > ledger.epsilon_spent()
    z2 = pld_noise_multiplier_after(ledger, epsilon=1.0, sample_rate=ADULT_Q, steps=ADULT_T,
                                    sampling="without_replacement")
    ledger.begin_run("second", sampling="without_replacement", sample_rate=ADULT_Q, noise_multiplier=z2,
                     planned_steps=ADULT_T, prepaid=True)
    assert 0.99 <= ledger.epsilon_spent() <= 1.0 and z2 > z


# ---------------------------------------------------------------------- calibration after a PLD-priced run


#: An Adult-sized silo (11,305 records, batch 256, 1,800 rounds) and its δ = 1/n².
Q_ADULT, T_ADULT, D_ADULT = 256 / 11305, 1800, 1 / 11305**2


def test_pld_calibration_after_a_pld_priced_run_meets_the_target_with_large_batches():
    z1 = _core.pld_noise_multiplier_for(0.8, D_ADULT, Q_ADULT, T_ADULT, "without_replacement")
    ledger = PrivacyLedger(epsilon=1.0, delta=D_ADULT)
    ledger.charge(MechanismEvent(name="first", sampling="without_replacement", sample_rate=Q_ADULT, noise_multiplier=z1,
                                 steps=T_ADULT))
    assert ledger.epsilons()["rdp"] > 1.0  # RDP finds nothing left: the search starts at z = 1
    z = pld_noise_multiplier_after(ledger, epsilon=1.0, sample_rate=0.5, steps=200, sampling="without_replacement")
    run = MechanismEvent(name="second", sampling="without_replacement", sample_rate=0.5, noise_multiplier=z, steps=200)
    # Before the fix: z = 0.001 and the PLD epsilon inf (the bracketing stepped down in z from an
    # infeasible start and returned Z_MIN unevaluated; the prepaid charge then refused the run).
    assert ledger.epsilons([run])["pld"] <= 1.0, z
