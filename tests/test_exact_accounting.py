"""Exact accounting: analytic Gaussian / GDP, shuffled epochs, the binomial mixture, the ledger's
exact currency, and calibration that never refuses a feasible target."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from pfair import _core
from pfair.privacy import MechanismEvent, PrivacyBudgetExceeded, PrivacyLedger
from pfair.privacy.accountant import (
    epsilon_for,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_mu,
    noise_multiplier_for,
)

N = 11_305
Q = 256 / N
B = 45  # ⌈11,305 / 256⌉ rounds per epoch
DELTA = 1 / N**2


def ref_gaussian_delta(eps: float, mu: float) -> float:
    """Balle & Wang 2018, Thm. 8, in scipy."""
    return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)


@pytest.mark.parametrize("eps,mu", [(0.5, 0.3), (1.0, 1.0), (2.0, 3.0), (0.2, 0.1)])
def test_gaussian_delta_is_balle_wang(eps, mu):
    assert gaussian_delta(epsilon=eps, mu=mu) == pytest.approx(ref_gaussian_delta(eps, mu), rel=1e-9)


def test_gaussian_inverses_are_robust_and_on_the_feasible_side():
    for d, mu in [(1e-5, 0.5), (1e-12, 2.0), (1e-200, 1.0), (1e-8, 50.0)]:
        e = gaussian_epsilon(delta=d, mu=mu)
        assert math.isfinite(e) and gaussian_delta(epsilon=e, mu=mu) <= d * (1 + 1e-9)
        assert gaussian_mu(epsilon=e, delta=d) == pytest.approx(mu, rel=1e-8)
    assert gaussian_delta(epsilon=1.0, mu=1e6) == pytest.approx(1.0)
    assert 0.0 <= gaussian_delta(epsilon=30.0, mu=0.5) < 1e-100
    # Composition: K releases at z are √K/z-GDP.
    assert _core.gdp_compose([0.3, 0.4]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="mu"):
        gaussian_epsilon(delta=1e-5, mu=0.0)


def test_adult_setting_shuffle_mixture_and_rdp():
    """The Adult-sized silo: RDP public batch 37.4, exact binomial mixture 34.9, shuffle 32.5."""
    kw = dict(epsilon=1.0, delta=DELTA, sample_rate=Q, steps=40 * B)
    rdp = noise_multiplier_for(sampling="public_batch", **kw)
    mix = noise_multiplier_for(sampling="public_batch", accountant="exact", **kw)
    shuf = noise_multiplier_for(sampling="shuffle", accountant="exact", **kw)
    assert rdp == pytest.approx(37.4, abs=0.05)
    assert mix == pytest.approx(34.9, abs=0.05)
    assert shuf == pytest.approx(32.5, abs=0.05)
    # Shuffle: 40 epochs are 40 Gaussian releases, μ = √40/z, exactly.
    assert gaussian_delta(epsilon=1.0, mu=math.sqrt(40) / shuf) == pytest.approx(DELTA, rel=1e-6)
    assert gaussian_delta(epsilon=1.0, mu=math.sqrt(40) / shuf) <= DELTA


def test_mixture_is_the_binomial_average_of_gaussians():
    t, q, z, eps = 80, 0.05, 1.5, 0.7
    k = np.arange(1, t + 1)
    want = float(np.sum(stats.binom.pmf(k, t, q) * np.array([ref_gaussian_delta(eps, math.sqrt(i) / z) for i in k])))
    got = _core.exact_delta_for(z, q, t, eps, "public_batch")
    assert got == pytest.approx(want, rel=1e-8)
    # q = 1 is the full batch; shuffle at q = 1 too.
    full = epsilon_for(noise_multiplier=3.0, sample_rate=1.0, steps=7, delta=1e-6, sampling="full_batch", accountant="exact")
    for s in ("public_batch", "shuffle"):
        assert epsilon_for(noise_multiplier=3.0, sample_rate=1.0, steps=7, delta=1e-6, sampling=s,
                           accountant="exact") == pytest.approx(full, rel=1e-10)


@settings(max_examples=25, deadline=None)
@given(z=st.floats(0.5, 80.0), q=st.floats(1e-3, 0.5), steps=st.integers(1, 3000), delta=st.floats(1e-10, 1e-3))
def test_mixture_never_exceeds_rdp_and_falls_with_z(z, q, steps, delta):
    kw = dict(sample_rate=q, steps=steps, delta=delta, sampling="public_batch")
    exact = epsilon_for(noise_multiplier=z, accountant="exact", **kw)
    rdp = epsilon_for(noise_multiplier=z, **kw)
    assert exact <= rdp * (1 + 1e-12)
    assert epsilon_for(noise_multiplier=1.1 * z, accountant="exact", **kw) <= exact


def test_shuffle_counts_epochs():
    z = 5.0
    for steps, k in [(1, 1), (B, 1), (B + 1, 2), (40 * B, 40)]:
        e = epsilon_for(noise_multiplier=z, sample_rate=Q, steps=steps, delta=DELTA, sampling="shuffle", accountant="exact")
        assert e == pytest.approx(gaussian_epsilon(delta=DELTA, mu=math.sqrt(k) / z), rel=1e-10)
        # RDP of shuffle is K full-batch Gaussians.
        assert epsilon_for(noise_multiplier=z, sample_rate=Q, steps=steps, delta=DELTA, sampling="shuffle") == pytest.approx(
            epsilon_for(noise_multiplier=z, sample_rate=1.0, steps=k, delta=DELTA, sampling="full_batch"), rel=1e-12)
    with pytest.raises(ValueError, match="hides its batch"):
        epsilon_for(noise_multiplier=z, sample_rate=Q, steps=3, delta=DELTA, sampling="without_replacement", accountant="exact")


# --------------------------------------------------------------------------------- calibration

def test_the_reported_refusal_is_gone():
    for s in ("without_replacement", "poisson_replace_one", "public_batch", "shuffle"):
        z = noise_multiplier_for(epsilon=0.5, delta=3.56e-4, sample_rate=1e-4, steps=1, sampling=s)
        assert epsilon_for(noise_multiplier=z, sample_rate=1e-4, steps=1, delta=3.56e-4, sampling=s) <= 0.5


@settings(max_examples=60, deadline=None)
@given(
    scheme=st.sampled_from(["without_replacement", "poisson_replace_one", "public_batch", "shuffle", "full_batch"]),
    accountant=st.sampled_from(["rdp", "best"]),
    log_eps=st.floats(-2.0, 1.5), log_q=st.floats(-4.0, 0.0), steps=st.integers(1, 2000),
    log_delta=st.floats(-10.0, -2.0),
)
def test_calibration_never_refuses_a_feasible_target(scheme, accountant, log_eps, log_q, steps, log_delta):
    eps, delta = 10**log_eps, 10**log_delta
    q = 1.0 if scheme == "full_batch" else 10**log_q
    kw = dict(sample_rate=q, steps=steps, delta=delta, sampling=scheme, accountant=accountant)
    feasible = epsilon_for(noise_multiplier=_core.Z_MAX, **kw) <= eps
    try:
        z = noise_multiplier_for(epsilon=eps, delta=delta, sample_rate=q, steps=steps, sampling=scheme, accountant=accountant)
    except ValueError:
        assert not feasible
        return
    assert _core.Z_MIN <= z <= _core.Z_MAX
    assert epsilon_for(noise_multiplier=z, **kw) <= eps * (1 + 1e-9)



@pytest.mark.parametrize("scheme", ["poisson", "poisson_replace_one"])
def test_a_huge_noise_multiplier_is_not_credited_with_epsilon_zero_by_rounding(scheme):
    """Found by the property test above: at z = 1e6 the Poisson series' rounding (1e-17) took the
    per-step RDP of some orders below 0, which the conversion turns into ε = 0, so epsilon_for
    called a target met that the calibration (whose scan skipped those orders) refused. Below
    1e-14 the bound is now the joint-convexity one, and the two agree."""
    kw = dict(sample_rate=1e-3, steps=1, delta=1e-9, sampling=scheme, accountant="rdp")
    at_max = epsilon_for(noise_multiplier=_core.Z_MAX, **kw)
    assert at_max > 0.01  # the order floor: log(1/δ)/(α_max − 1) and the like, not 0
    assert epsilon_for(noise_multiplier=3e5, **kw) >= at_max * (1 - 1e-9)  # non-increasing in z
    with pytest.raises(ValueError, match="unreachable"):
        noise_multiplier_for(epsilon=0.01, delta=1e-9, sample_rate=1e-3, steps=1, sampling=scheme, accountant="rdp")
    z = noise_multiplier_for(epsilon=at_max * 1.01, delta=1e-9, sample_rate=1e-3, steps=1, sampling=scheme,
                             accountant="rdp")
    assert z <= _core.Z_MAX and epsilon_for(noise_multiplier=z, **kw) <= at_max * 1.01


# ------------------------------------------------------------------------------------ ledger

def test_ledger_charged_epoch_by_epoch_equals_the_calibration():
    z = noise_multiplier_for(epsilon=1.0, delta=DELTA, sample_rate=Q, steps=40 * B, sampling="public_batch", accountant="exact")
    ledger = PrivacyLedger(epsilon=1.0, delta=DELTA)
    ledger.begin_run("r", sampling="public_batch", sample_rate=Q, noise_multiplier=z, planned_steps=40 * B)
    for epoch in range(40):
        ledger.charge_rounds("r", epoch * B, B)
    want = epsilon_for(noise_multiplier=z, sample_rate=Q, steps=40 * B, delta=DELTA, sampling="public_batch", accountant="exact")
    assert ledger.epsilon_spent() == pytest.approx(want, rel=1e-12)
    assert ledger.epsilons()["rdp"] > 1.0 >= ledger.epsilon_spent()  # RDP alone would have refused


def test_shuffle_run_costs_the_epochs_its_answered_rounds_touch(tmp_path):
    z = noise_multiplier_for(epsilon=1.0, delta=DELTA, sample_rate=Q, steps=40 * B, sampling="shuffle", accountant="exact")
    ledger = PrivacyLedger(epsilon=1.0, delta=DELTA, path=tmp_path / "l.json")
    ledger.begin_run("s", sampling="shuffle", sample_rate=Q, noise_multiplier=z, planned_steps=40 * B)
    ledger.charge_rounds("s", 0, 10)           # epoch 0
    ledger.charge_rounds("s", 10, 35)          # rest of epoch 0: free
    assert ledger.epsilon_spent() == pytest.approx(gaussian_epsilon(delta=DELTA, mu=1 / z), rel=1e-10)
    ledger.charge_rounds("s", 100, 1)          # skips to epoch 2 (round 100 // 45)
    ledger.charge_rounds("s", 130, 20)         # epochs 2 and 3
    assert sum(e.epochs for e in ledger.events) == 3
    assert ledger.epsilon_spent() == pytest.approx(gaussian_epsilon(delta=DELTA, mu=math.sqrt(3) / z), rel=1e-10)
    # The whole plan fits exactly; one round more of a new epoch would not.
    for epoch in range(4, 40):
        ledger.charge_rounds("s", epoch * B, B)
    assert ledger.epsilon_spent() <= 1.0
    back = PrivacyLedger.load(tmp_path / "l.json")
    assert back.epsilon_spent() == ledger.epsilon_spent() and back.runs == ledger.runs
    # Epoch 1 was skipped, so one more epoch fits the budget and a second does not.
    ledger.charge(MechanismEvent(name="more", sampling="shuffle", sample_rate=Q, noise_multiplier=z, steps=1))
    with pytest.raises(PrivacyBudgetExceeded):
        ledger.charge(MechanismEvent(name="more", sampling="shuffle", sample_rate=Q, noise_multiplier=z, steps=1))


def test_ledger_refuses_past_the_budget_in_each_currency():
    # Exact currency (public batches): refuses where the exact ε would exceed the budget.
    z = noise_multiplier_for(epsilon=1.0, delta=DELTA, sample_rate=Q, steps=40 * B, sampling="public_batch", accountant="exact")
    ledger = PrivacyLedger(epsilon=1.0, delta=DELTA)
    ledger.charge(MechanismEvent(name="r", sampling="public_batch", sample_rate=Q, noise_multiplier=z, steps=40 * B))
    with pytest.raises(PrivacyBudgetExceeded):
        ledger.charge(MechanismEvent(name="r", sampling="public_batch", sample_rate=Q, noise_multiplier=z, steps=B))
    # PLD currency (hidden batches): a hidden-batch event makes the exact currency unavailable, and
    # the PLD refuses past the budget (RDP alone would refuse much earlier).
    zw = noise_multiplier_for(epsilon=1.0, delta=DELTA, sample_rate=Q, steps=40 * B, sampling="without_replacement",
                              accountant="pld")
    hidden = PrivacyLedger(epsilon=1.0, delta=DELTA)
    hidden.charge(MechanismEvent(name="w", sampling="without_replacement", sample_rate=Q, noise_multiplier=zw, steps=40 * B))
    assert hidden.epsilons()["exact"] == math.inf
    assert hidden.epsilons()["rdp"] > 1.5 and 0.99 <= hidden.epsilon_spent() <= 1.0
    with pytest.raises(PrivacyBudgetExceeded):
        hidden.charge(MechanismEvent(name="w", sampling="without_replacement", sample_rate=Q, noise_multiplier=zw, steps=5 * B))


def test_old_format_reads_and_tampered_files_are_refused(tmp_path):
    ledger = PrivacyLedger(epsilon=1.0, delta=1e-6)
    ledger.charge(MechanismEvent.gaussian_histogram(noise_multiplier=20.0))
    d = ledger.to_dict()
    old = dict(d, format=1)
    assert PrivacyLedger.from_dict(old).epsilon_spent() == ledger.epsilon_spent()
    assert PrivacyLedger.from_dict(dict(d, format=2)).epsilon_spent() == ledger.epsilon_spent()
    with pytest.raises(ValueError, match="unknown ledger format 4"):
        PrivacyLedger.from_dict(dict(d, format=4))
    ledger.begin_run("s", sampling="shuffle", sample_rate=0.1, noise_multiplier=30.0, planned_steps=100)
    ledger.charge_rounds("s", 0, 25)
    d = ledger.to_dict()
    tampered = json.loads(json.dumps(d))
    tampered["events"][-1]["epochs"] = 0  # 25 rounds at b = 10 touch at least 2 epochs
    with pytest.raises(ValueError, match="epochs=0 is impossible"):
        PrivacyLedger.from_dict(tampered)
    tampered = json.loads(json.dumps(d))
    tampered["runs"]["s"]["last_epoch"] = 0
    with pytest.raises(ValueError, match="corrupt"):
        PrivacyLedger.from_dict(tampered)
    with pytest.raises(ValueError, match="rounds_per_epoch"):
        ledger.begin_run("t", sampling="shuffle", sample_rate=0.1, noise_multiplier=30.0, planned_steps=100,
                         rounds_per_epoch=11)


def test_an_epoch_of_charging_is_cheap_at_a_thousand_silos():
    """Measured, not asserted as a speed target (benches hold those): one epoch of charges for
    1,000 silos of different sizes; reported in docs/accounting.md."""
    ledgers = []
    for j in range(1000):
        n = 5000 + 7 * j
        ledger = PrivacyLedger(epsilon=1.0, delta=1 / n**2)
        ledger.begin_run("r", sampling="public_batch", sample_rate=256 / n, noise_multiplier=30.0 + j / 100,
                         planned_steps=40 * math.ceil(n / 256))
        ledgers.append((ledger, math.ceil(n / 256)))
    for epoch in range(3):
        t0 = time.perf_counter()
        for ledger, b in ledgers:
            ledger.charge_rounds("r", epoch * b, b)
        elapsed = time.perf_counter() - t0
        print(f"1,000 silos, epoch {epoch}: {elapsed * 1e3:.1f} ms")
    assert all(len(ledger.events) == 3 for ledger, _ in ledgers)


# ------------------------------------------------------------------------------------ PF-LD

@pytest.mark.parametrize("q,share", [(Q, 0.25), (1.0, 0.25), (Q, 0.6)])
def test_pfld_budgets_compose_jointly_to_the_target(q, share):
    from pfair.baselines.pfld import joint_noise

    t_p, t_d = 39 * (1 if q == 1.0 else B), 39
    z_p, z_d, joint, basic = joint_noise(epsilon=1.0, delta=DELTA, sample_rate=q, primal_steps=t_p, dual_steps=t_d,
                                         dual_share=share)
    assert joint <= 1.0 and joint == pytest.approx(1.0, rel=1e-6)
    assert basic > 1.05 * joint  # the same noise priced by basic composition (ε_p + ε_d, δ/2 each)
    # Independent check of the joint account: the mixture over the primal's K, by scipy.
    k = np.arange(0, t_p + 1)
    pmf = stats.binom.pmf(k, t_p, q) if q < 1 else (k == t_p).astype(float)
    mu = np.sqrt(k / z_p**2 + t_d / z_d**2)
    d = float(np.sum(pmf * np.array([ref_gaussian_delta(1.0, m) for m in mu])))
    assert d == pytest.approx(DELTA, rel=1e-4)
    # Both noises are below the basic split's (share of ε and δ/2 each), in the same ratio.
    scheme = "full_batch" if q == 1.0 else "public_batch"
    zp0 = noise_multiplier_for(epsilon=(1 - share) * 1.0, delta=DELTA / 2, sample_rate=q, steps=t_p, sampling=scheme,
                               accountant="exact")
    zd0 = noise_multiplier_for(epsilon=share * 1.0, delta=DELTA / 2, sample_rate=1.0, steps=t_d, sampling="full_batch",
                               accountant="exact")
    assert z_p < zp0 and z_d < zd0 and z_d / z_p == pytest.approx(zd0 / zp0, rel=1e-9)


# --------------------------------------------------------------------------------------- PLD

def _dpa_pld_epsilon(z, q, steps, delta, relation, pessimistic=True):
    import dp_accounting as dpa
    from dp_accounting.pld import privacy_loss_distribution as pld

    rel = {"add_remove": dpa.NeighboringRelation.ADD_OR_REMOVE_ONE, "replace_one": dpa.NeighboringRelation.REPLACE_ONE}
    d = pld.from_gaussian_mechanism(z, sampling_prob=q, value_discretization_interval=1e-3,
                                    pessimistic_estimate=pessimistic, neighboring_relation=rel[relation])
    return d.self_compose(steps).get_epsilon_for_delta(delta)


@pytest.mark.parametrize("z,steps", [(1.0, 100), (3.0, 400)])
def test_pld_matches_dp_accounting_for_poisson(z, steps):
    q, d = 256 / 12211, 1e-6
    ours = epsilon_for(noise_multiplier=z, sample_rate=q, steps=steps, delta=d, sampling="poisson", accountant="pld")
    assert ours == pytest.approx(_dpa_pld_epsilon(z, q, steps, d, "add_remove"), rel=1e-3)
    ours = _core.pld_epsilon_for(z, q, steps, d, "poisson_replace_one")
    assert ours == pytest.approx(_dpa_pld_epsilon(z, q, steps, d, "replace_one"), rel=1e-3)
    assert ours < _core.epsilon_for(z, q, steps, d, "poisson_replace_one")[0]


def test_pld_without_replacement_lies_between_a_realised_pair_and_rdp():
    q, z, steps, d = 256 / 12211, 2.0, 300, 1e-6
    ours = _core.pld_epsilon_for(z, q, steps, d, "without_replacement")
    rdp = _core.epsilon_for(z, q, steps, d, "without_replacement")[0]
    # Lower bound: data where the other records contribute 0 and the replaced one Δ or 0 realise
    # (1−q)N(0)+qN(1/z) vs N(0) in either order; dp-accounting's optimistic estimate of that pair.
    lower = _dpa_pld_epsilon(z, q, steps, d, "add_remove", pessimistic=False)
    assert lower <= ours < rdp
    z_pld = noise_multiplier_for(epsilon=1.0, delta=d, sample_rate=q, steps=steps, sampling="without_replacement",
                                 accountant="pld")
    assert z_pld < noise_multiplier_for(epsilon=1.0, delta=d, sample_rate=q, steps=steps, sampling="without_replacement")
    assert _core.pld_epsilon_for(z_pld, q, steps, d, "without_replacement") <= 1.0


# ------------------------------------------------------------------------------- calibration

@pytest.mark.parametrize("sampling,scheme", [("without_replacement", "public_batch"), ("shuffle", "shuffle"),
                                             ("full_batch", "full_batch")])
def test_silo_plans_use_the_exact_accountant_and_rdp_stays_an_option(sampling, scheme):
    from pfair.notions import DemographicParity
    from pfair.privacy.calibration import NoiseRequest, accounting_scheme, plan_silo_noise, sample_rate_and_denominator

    kw = dict(silo=0, n_records=N, batch_size=256, sampling=sampling, steps=40 * B, epsilon=1.0, delta=DELTA,
              notion=DemographicParity(), protect="attribute",
              clip_loss=1.0, clip_theta=1.0, clip_w=1.0, calibration="rdp", sends_psi=True)
    props = np.array([[1 / 3, 2 / 3]])
    assert accounting_scheme(sampling, "attribute") == scheme
    best = plan_silo_noise(NoiseRequest(**kw), props)
    rdp = plan_silo_noise(NoiseRequest(**kw, accountant="rdp"), props)
    assert best.accounting == rdp.accounting == scheme
    assert best.noise_multiplier < rdp.noise_multiplier
    # Both meet the budget in the ledger's currency; the exact plan lands at 99.75% of it.
    assert best.epsilon == pytest.approx(0.9975, rel=1e-6) and rdp.epsilon <= 1.0
    q, m = sample_rate_and_denominator(sampling, N, 256)
    assert m == (N if sampling == "full_batch" else 256) and q == (1.0 if sampling == "full_batch" else Q)
