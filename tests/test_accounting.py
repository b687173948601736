"""Accountant tests: cross-checks against dp-accounting and opacus, properties, ledger, paper."""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import importlib.util
import json
import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant
from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from pfair import _core
from pfair.privacy import (
    MechanismEvent,
    PrivacyBudgetExceeded,
    PrivacyLedger,
    default_orders,
    delta_for,
    delta_from_rdp,
    epsilon_for,
    epsilon_from_rdp,
    noise_multiplier_for,
    paper_delivered_epsilon,
    paper_noise_stds,
    rdp_curve,
)
from pfair.privacy.cli import add_privacy_parser, privacy_command

import wor_reference

NR = dpa.NeighboringRelation
ORDERS = default_orders()

QS = [1e-4, 3e-3, 0.05, 0.3, 1.0]
SIGMAS = [0.3, 1.0, 4.0, 50.0]
STEPS = [1, 300, 100_000]
DELTAS = [1e-10, 1e-5, 1e-3]


def _close(a: float, b: float, rel: float = 1e-6) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def _load_opacus_rdp():
    path = importlib.metadata.distribution("opacus").locate_file("opacus/accountants/analysis/rdp.py")
    tree = ast.parse(open(path).read())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module.split(".")[0])
    # The pure analysis file must not pull in torch or the rest of opacus.
    assert imported <= {"math", "typing", "warnings", "numpy", "scipy"}, imported
    spec = importlib.util.spec_from_file_location("opacus_rdp_analysis", str(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


OPACUS = _load_opacus_rdp()


# --------------------------------------------------------------------------- cross-checks

def _exact_wor_curve(q: float, sigma: float) -> np.ndarray:
    """Per-step WBK bound at every default order, from the high-precision reference."""
    if q == 1.0:
        return np.array(ORDERS) / (2 * sigma**2)
    return np.array([wor_reference.rdp_without_replacement(q, sigma, a) for a in ORDERS])


@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("sigma", SIGMAS)
def test_without_replacement_equals_the_high_precision_bound(q, sigma):
    # The forward differences inside the bound are taken exactly (quadrature in Rust, the
    # alternating sum in 50-400 digit arithmetic here), so the curves agree to rounding.
    ours = np.array(_core.rdp_curve("without_replacement", q, sigma, 1, ORDERS))
    np.testing.assert_allclose(ours, _exact_wor_curve(q, sigma), rtol=1e-10, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("sigma", SIGMAS)
def test_without_replacement_matches_dp_accounting_replace_one(q, sigma):
    # dp-accounting takes the forward differences by repeated float64 differencing. At an order
    # whose differences cancel fewer than 6 digits that is accurate, and there the two agree to
    # 1e-6. Beyond (σ = 50 here) its values are rounding noise (docs/accounting.md), so ε is
    # compared with dp-accounting's own conversion of the exact curve instead.
    n = 1_000_000
    m = round(q * n)
    sound = np.array([q == 1.0 or wor_reference.max_condition(sigma, a) < 6 for a in ORDERS])
    if sigma <= 4:
        assert sound.all()  # the comparison below is the whole curve here
    assert sound.sum() >= 14
    exact = _exact_wor_curve(q, sigma)
    for steps in STEPS:
        acc = RdpAccountant(ORDERS, NR.REPLACE_ONE)
        acc.compose(dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(n, m, dpa.GaussianDpEvent(sigma)), steps))
        ours = np.array(_core.rdp_curve("without_replacement", m / n, sigma, steps, ORDERS))
        ref = np.asarray(acc.rdp)
        assert np.array_equal(np.isinf(ours), np.isinf(ref))
        cmp = sound & np.isfinite(ref)
        np.testing.assert_allclose(ours[cmp], ref[cmp], rtol=1e-6, atol=1e-12)
        for delta in DELTAS:
            e_ref, _ = dpa_rdp.compute_epsilon(ORDERS, steps * exact, delta)
            e = epsilon_for(noise_multiplier=sigma, sample_rate=m / n, steps=steps, delta=delta,
                            sampling="without_replacement")
            assert _close(e, e_ref), (steps, delta, e, e_ref)
            eps = max(e_ref, 1e-3)
            d_ref, _ = dpa_rdp.compute_delta(ORDERS, steps * exact, eps)
            assert _close(delta_for(noise_multiplier=sigma, sample_rate=m / n, steps=steps, epsilon=eps,
                                    sampling="without_replacement"), d_ref)
            if sound.all():
                assert _close(e, acc.get_epsilon(delta)), (steps, delta, e)
                assert _close(delta_for(noise_multiplier=sigma, sample_rate=m / n, steps=steps, epsilon=eps,
                                        sampling="without_replacement"),
                              acc.get_delta(eps))


@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("sigma", SIGMAS)
def test_poisson_matches_dp_accounting_add_remove(q, sigma):
    for steps in STEPS:
        acc = RdpAccountant(ORDERS, NR.ADD_OR_REMOVE_ONE)
        acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), steps))
        ours = np.array(_core.rdp_curve("poisson", q, sigma, steps, ORDERS))
        ref = acc.rdp
        assert np.array_equal(np.isinf(ours), np.isinf(ref))
        fin = np.isfinite(ref)
        np.testing.assert_allclose(ours[fin], ref[fin], rtol=1e-6, atol=steps * 1e-15)
        for delta in DELTAS:
            e_ref = acc.get_epsilon(delta)
            e = epsilon_for(noise_multiplier=sigma, sample_rate=q, steps=steps, delta=delta, sampling="poisson")
            assert _close(e, e_ref), (steps, delta, e, e_ref)


@pytest.mark.parametrize("sigma", SIGMAS)
def test_full_batch_matches_dp_accounting_gaussian(sigma):
    for steps in STEPS:
        for rel in (NR.REPLACE_ONE, NR.ADD_OR_REMOVE_ONE):
            acc = RdpAccountant(ORDERS, rel)
            acc.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(sigma), steps))
            for delta in DELTAS:
                e = epsilon_for(noise_multiplier=sigma, sample_rate=1.0, steps=steps, delta=delta, sampling="full_batch")
                assert _close(e, acc.get_epsilon(delta))


@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("sigma", SIGMAS)
def test_poisson_matches_opacus_rdp_analysis(q, sigma):
    # opacus sums the fractional-order series of MTZ 2019 with signed binomial coefficients;
    # dp-accounting (and pfair) add their magnitudes, an upper bound. So: integer orders agree to
    # 1e-6, fractional orders are never below opacus (pfair is the conservative one).
    orders = np.array(ORDERS)
    integer = orders == np.floor(orders)
    for steps in STEPS:
        ref = np.asarray(OPACUS.compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=ORDERS), dtype=float)
        ours = np.array(_core.rdp_curve("poisson", q, sigma, steps, ORDERS))
        fin = np.isfinite(ref) & np.isfinite(ours)
        assert fin.sum() >= 0.9 * len(ORDERS)
        # Absolute slack: log-space sums round at ~1e-16 per step; for RDP values of ~1e-12 per
        # step opacus is the less accurate one (e.g. α = 2 has the closed form log(1 + q²(e^{1/σ²} − 1))).
        atol = steps * 1e-13  # ~1e-16 per log-sum term, up to ~1000 terms
        np.testing.assert_allclose(ours[fin & integer], ref[fin & integer], rtol=1e-6, atol=atol)
        assert np.all(ours[fin] >= ref[fin] * (1 - 1e-6) - atol)
        for delta in DELTAS:
            o = orders[fin & integer]
            e_ref, _ = OPACUS.get_privacy_spent(orders=o, rdp=ref[fin & integer], delta=delta)
            e, _ = _core.epsilon_from_rdp(list(o), list(ours[fin & integer]), delta)
            if e > 0:  # opacus has no KL (ε = 0) branch and does not clip at 0
                assert _close(e, float(e_ref)), (steps, delta, e, e_ref)
            e_all_ref, _ = OPACUS.get_privacy_spent(orders=orders[fin], rdp=ref[fin], delta=delta)
            e_all, _ = _core.epsilon_from_rdp(list(orders[fin]), list(ours[fin]), delta)
            assert e_all >= float(e_all_ref) * (1 - 1e-6) or e_all == 0.0


def test_ledger_charged_epoch_by_epoch_equals_one_charge_of_all_steps():
    # A silo calibrates for T rounds at once and charges them epoch by epoch; the two must agree
    # bit for bit, or a budget equal to the calibrated epsilon refuses the last epoch.
    for sampling, q, z in [("public_batch", 256 / 12211, 3.3), ("without_replacement", 64 / 700, 3.3),
                           ("full_batch", 1.0, 60.0)]:
        hist = MechanismEvent.gaussian_histogram(noise_multiplier=7.0)
        whole = PrivacyLedger(epsilon=100.0, delta=1e-8)
        whole.charge(hist)
        whole.charge(MechanismEvent(name="r", sampling=sampling, sample_rate=q, noise_multiplier=z, steps=40 * 48))
        parts = PrivacyLedger(epsilon=whole.epsilon_spent(), delta=1e-8)
        parts.charge(hist)
        for _ in range(40):
            parts.charge(MechanismEvent(name="r", sampling=sampling, sample_rate=q, noise_multiplier=z, steps=48))
        assert parts.epsilon_spent() == whole.epsilon_spent()
        with pytest.raises(PrivacyBudgetExceeded):
            parts.charge(MechanismEvent(name="r", sampling=sampling, sample_rate=q, noise_multiplier=z, steps=1))


def test_heterogeneous_composition_matches_dp_accounting():
    acc = RdpAccountant(ORDERS, NR.REPLACE_ONE)
    acc.compose(dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(12211, 256, dpa.GaussianDpEvent(3.0)), 1920))
    acc.compose(dpa.GaussianDpEvent(20.0))
    ledger = PrivacyLedger(epsilon=100.0, delta=1e-8, silo="adult-0")
    ledger.charge(MechanismEvent(name="rounds", sampling="without_replacement", sample_rate=256 / 12211, noise_multiplier=3.0, steps=1920))
    ledger.charge(MechanismEvent.gaussian_histogram(noise_multiplier=20.0))
    assert _close(ledger.epsilons()["rdp"], acc.get_epsilon(1e-8))
    # The ledger's currency is the smallest valid bound: here the PLD of the rounds' dominating
    # pair composed with the histogram, well below RDP.
    by = ledger.epsilons()
    assert ledger.epsilon_spent() == min(by.values()) == by["pld"] < 0.8 * by["rdp"]


# --------------------------------------------------------------------------- replace-one Poisson

@pytest.mark.slow
@pytest.mark.parametrize("q", [0.01, 0.25, 0.7])
@pytest.mark.parametrize("z", [0.6, 1.5, 5.0])
@pytest.mark.parametrize("alpha", [1.5, 2.0, 5.0, 12.0])
def test_poisson_replace_one_bounds_the_exact_divergence(q, z, alpha):
    bound = _core.rdp_poisson_replace_one(q, z, alpha)
    for a in np.linspace(-1 / z, 1 / z, 5):
        for b in np.linspace(-1 / z, 1 / z, 4):
            def log_p(x, m):
                return np.logaddexp(np.log1p(-q) + stats.norm.logpdf(x), np.log(q) + stats.norm.logpdf(x, m))

            f = lambda x: np.exp(alpha * log_p(x, a) + (1 - alpha) * log_p(x, b))  # noqa: E731
            val, _ = integrate.quad(f, -40, 40, points=[0.0, a, b], limit=400, epsabs=0, epsrel=1e-12)
            exact = math.log(val) / (alpha - 1)
            assert exact <= bound * (1 + 1e-9) + 1e-12, (a, b, exact, bound)


# --------------------------------------------------------------------------- properties

SCHEMES = ["without_replacement", "poisson", "poisson_replace_one", "public_batch"]
zs = st.floats(0.4, 30.0)
qs = st.floats(1e-4, 0.5)
steps_st = st.integers(1, 20_000)


@settings(max_examples=40, deadline=None)
@given(scheme=st.sampled_from(SCHEMES), z=zs, q=qs, steps=steps_st, delta=st.floats(1e-10, 1e-3))
def test_epsilon_is_monotone(scheme, z, q, steps, delta):
    e = lambda **kw: epsilon_for(**{"noise_multiplier": z, "sample_rate": q, "steps": steps, "delta": delta, "sampling": scheme, **kw})  # noqa: E731
    base = e()
    assert e(noise_multiplier=z * 1.1) <= base + 1e-12
    assert e(sample_rate=min(1.0, q * 1.3)) >= base - 1e-12
    assert e(steps=steps * 2) >= base - 1e-12


# The search evaluates ε by scanning orders upwards and stopping past the minimum; the returned z
# is checked here against the full-order ε that users see.
@settings(max_examples=300, deadline=None)
@given(scheme=st.sampled_from(SCHEMES + ["full_batch"]), eps=st.floats(0.2, 10.0), q=qs, steps=st.integers(1, 100_000), delta=st.floats(1e-10, 1e-3))
def test_noise_multiplier_for_contract(scheme, eps, q, steps, delta):
    if scheme == "full_batch":
        q = 1.0
    z = noise_multiplier_for(epsilon=eps, delta=delta, sample_rate=q, steps=steps, sampling=scheme)
    got = epsilon_for(noise_multiplier=z, sample_rate=q, steps=steps, delta=delta, sampling=scheme)
    assert got <= eps
    # Within 2% of the target, unless ε(z) jumps past it: then z is the smallest feasible z.
    below = epsilon_for(noise_multiplier=z * (1 - 1e-6), sample_rate=q, steps=steps, delta=delta, sampling=scheme)
    assert got >= 0.98 * eps or below > eps


def test_noise_multiplier_for_a_target_that_epsilon_jumps_past():
    """ε(z) of one step at q = 1e-4 falls from ≈ 0.59 to 0 between z = 0.68 and 0.80; a target of
    0.5 is met by every z past the jump, and calibration returns the jump (it used to raise)."""
    kw = dict(delta=3.56e-4, sample_rate=1e-4, steps=1, sampling="without_replacement")
    z = noise_multiplier_for(epsilon=0.5, **kw)
    assert 0.68 < z < 0.8
    assert epsilon_for(noise_multiplier=z, **kw) <= 0.5 < epsilon_for(noise_multiplier=z * (1 - 1e-6), **kw)


@settings(max_examples=40, deadline=None)
@given(scheme=st.sampled_from(SCHEMES), z=zs, q=qs, steps=steps_st, delta=st.floats(1e-10, 1e-3))
def test_delta_for_inverts_epsilon_for(scheme, z, q, steps, delta):
    eps = epsilon_for(noise_multiplier=z, sample_rate=q, steps=steps, delta=delta, sampling=scheme)
    if eps > 1e-6:
        back = delta_for(noise_multiplier=z, sample_rate=q, steps=steps, epsilon=eps, sampling=scheme)
        assert math.isclose(back, delta, rel_tol=1e-6)


def test_rdp_helpers_round_trip():
    orders, rdp = rdp_curve(noise_multiplier=1.1, sample_rate=0.02, steps=1000, sampling="without_replacement")
    assert orders == ORDERS and len(rdp) == len(orders)
    eps, order = epsilon_from_rdp(orders=orders, rdp=rdp, delta=1e-6)
    assert eps == epsilon_for(noise_multiplier=1.1, sample_rate=0.02, steps=1000, delta=1e-6,
                              sampling="without_replacement")
    d, order2 = delta_from_rdp(orders=orders, rdp=rdp, epsilon=eps)
    assert order == order2 and math.isclose(d, 1e-6, rel_tol=1e-8)


# --------------------------------------------------------------------------- bad inputs

GOOD = dict(noise_multiplier=1.0, sample_rate=0.01, steps=10, delta=1e-5, sampling="public_batch")


@pytest.mark.parametrize(
    "change, exc, arg",
    [
        ({"sample_rate": 0.0}, ValueError, "sample_rate"),
        ({"sample_rate": 1.5}, ValueError, "sample_rate"),
        ({"sample_rate": float("nan")}, ValueError, "sample_rate"),
        ({"sample_rate": "0.1"}, TypeError, "sample_rate"),
        ({"noise_multiplier": 0.0}, ValueError, "noise_multiplier"),
        ({"noise_multiplier": -2.0}, ValueError, "noise_multiplier"),
        ({"noise_multiplier": float("nan")}, ValueError, "noise_multiplier"),
        ({"delta": 0.0}, ValueError, "delta"),
        ({"delta": 1.0}, ValueError, "delta"),
        ({"steps": 0}, ValueError, "steps"),
        ({"steps": 2.5}, TypeError, "steps"),
        ({"sampling": "uniform"}, ValueError, "sampling"),
        ({"sampling": "full_batch"}, ValueError, "sample_rate"),
    ],
)
def test_epsilon_for_rejects_bad_input(change, exc, arg):
    with pytest.raises(exc, match=arg):
        epsilon_for(**{**GOOD, **change})


@pytest.mark.parametrize("eps", [0.0, -1.0, float("inf"), float("nan")])
def test_epsilon_must_be_positive(eps):
    with pytest.raises(ValueError, match="epsilon"):
        noise_multiplier_for(epsilon=eps, delta=1e-5, sample_rate=0.01, steps=10, sampling="public_batch")
    with pytest.raises(ValueError, match="epsilon"):
        delta_for(noise_multiplier=1.0, sample_rate=0.01, steps=10, epsilon=eps, sampling="public_batch")


def test_the_sampling_scheme_is_never_implied():
    """The hidden-batch bounds must not be what a call without a scheme gets."""
    for f, kw in ((noise_multiplier_for, dict(epsilon=1.0)), (epsilon_for, dict(noise_multiplier=2.0)),
                  (delta_for, dict(noise_multiplier=2.0, epsilon=1.0))):
        base = {k: v for k, v in dict(delta=1e-5, sample_rate=0.01, steps=10, **kw).items()
                if not (f is delta_for and k == "delta")}
        with pytest.raises(TypeError, match="sampling"):
            f(**base)


def test_core_errors_name_the_argument():
    with pytest.raises(ValueError, match="^noise_multiplier: "):
        _core.epsilon_for(0.0, 0.1, 1, 1e-5, "poisson")
    with pytest.raises(ValueError, match="^steps: "):
        _core.noise_multiplier_for(1.0, 1e-5, 0.1, 0, "poisson")
    with pytest.raises(ValueError, match="^epsilon: .*unreachable"):
        _core.noise_multiplier_for(1e-9, 1e-10, 1.0, 1_000_000, "full_batch")
    with pytest.raises(ValueError, match="^orders: "):
        _core.rdp_curve("poisson", 0.1, 1.0, 1, [0.5])


def test_keyword_only():
    with pytest.raises(TypeError):
        epsilon_for(1.0, 0.01, 10, 1e-5)  # type: ignore[misc]


# --------------------------------------------------------------------------- ledger

def _rounds(z: float, steps: int) -> MechanismEvent:
    return MechanismEvent(name="steffle_rounds", sampling="without_replacement", sample_rate=256 / 12211, noise_multiplier=z, steps=steps)


def test_ledger_enforces_the_budget_before_recording():
    ledger = PrivacyLedger(epsilon=1.0, delta=1e-8, silo=2)
    assert ledger.epsilon_spent() == 0.0
    z = noise_multiplier_for(epsilon=0.9, delta=1e-8, sample_rate=256 / 12211, steps=1920, sampling="without_replacement")
    ledger.charge(_rounds(z, 1920))
    assert 0.88 <= ledger.epsilons()["rdp"] <= 0.9
    assert ledger.epsilon_spent() == ledger.epsilons()["pld"] < 0.6  # the PLD prices the same rounds lower
    big = _rounds(z / 4, 1920)
    assert ledger.would_exceed(big)
    with pytest.raises(PrivacyBudgetExceeded) as info:
        ledger.charge(big)
    msg = str(info.value)
    assert "silo 2" in msg and "steffle_rounds" in msg and "remaining epsilon=" in msg and "budget epsilon=1" in msg
    assert isinstance(info.value, RuntimeError)
    assert len(ledger.events) == 1  # nothing recorded
    small = MechanismEvent.gaussian_histogram(noise_multiplier=500.0)
    assert not ledger.would_exceed(small)
    ledger.charge(small)
    report = ledger.to_dict()
    assert report["silo"] == 2 and len(report["events"]) == 2
    assert report["events"][1]["sampling"] == "full_batch" and report["events"][1]["steps"] == 1
    assert math.isclose(report["epsilon_spent"] + report["epsilon_remaining"], 1.0)
    json.dumps(report)


def test_ledger_composes_heterogeneous_events_by_rdp_addition():
    events = [
        _rounds(4.0, 500),
        MechanismEvent(name="poisson_rounds", sampling="poisson_replace_one", sample_rate=0.01, noise_multiplier=6.0, steps=300),
        MechanismEvent.gaussian_histogram(noise_multiplier=30.0),
    ]
    ledger = PrivacyLedger(epsilon=50.0, delta=1e-6)
    for e in events:
        ledger.charge(e)
    total = np.zeros(len(ORDERS))
    for e in events:
        total += np.array(rdp_curve(noise_multiplier=e.noise_multiplier, sample_rate=e.sample_rate, steps=e.steps, sampling=e.sampling)[1])
    assert _close(ledger.epsilons()["rdp"], epsilon_from_rdp(orders=ORDERS, rdp=list(total), delta=1e-6)[0])
    assert ledger.epsilon_spent() <= ledger.epsilons()["rdp"]
    assert ledger.epsilons()["rdp"] < sum(
        epsilon_for(noise_multiplier=e.noise_multiplier, sample_rate=e.sample_rate, steps=e.steps, delta=1e-6 / 3, sampling=e.sampling)
        for e in events
    )


def test_ledger_and_event_validation():
    with pytest.raises(ValueError, match="poisson_replace_one"):
        MechanismEvent(name="x", sampling="poisson", sample_rate=0.1, noise_multiplier=1.0, steps=1)
    with pytest.raises(ValueError, match="noise_multiplier"):
        MechanismEvent(name="x", sampling="full_batch", sample_rate=1.0, noise_multiplier=0.0, steps=1)
    with pytest.raises(ValueError, match="steps"):
        _rounds(1.0, 0)
    with pytest.raises(ValueError, match="epsilon"):
        PrivacyLedger(epsilon=0.0, delta=1e-5)
    with pytest.raises(ValueError, match="delta"):
        PrivacyLedger(epsilon=1.0, delta=0.0)
    with pytest.raises(TypeError, match="MechanismEvent"):
        PrivacyLedger(epsilon=1.0, delta=1e-5).charge(("full_batch", 1.0, 1.0, 1))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- paper vs numeric

def test_paper_closed_form_under_noises_adult_sized_silos():
    n, m = 12211, 256
    steps = 40 * math.ceil(n / m)
    delta = 1 / n**2
    s_theta, s_w = paper_noise_stds(epsilon=1.0, delta=delta, n=n, steps=steps, rho=0.33, clip=1.0)
    assert math.isclose(s_w**2, 16 * steps * math.log(1 / delta) / (n**2 * 0.33))
    assert s_theta == s_w  # clip = 1
    d_theta, d_w = 2 / m, (2 / m) * math.sqrt(1 / 0.33 + 1 / 0.67)
    z = ((d_theta / s_theta) ** 2 + (d_w / s_w) ** 2) ** -0.5
    # The paper's messages carry the exact loss gradient, so the batch is public.
    delivered = epsilon_for(noise_multiplier=z, sample_rate=m / n, steps=steps, delta=delta, sampling="public_batch")
    rep = paper_delivered_epsilon(epsilon=1.0, delta=delta, n=n, batch=m, epochs=40, clip=1.0, group_proportions=(0.33, 0.67))
    assert math.isclose(rep["noise_multiplier"], z) and math.isclose(rep["delivered_epsilon"], delivered)
    print(f"paper closed form, Adult-sized silo: z = {z:.3f}, delivered epsilon = {delivered:.3f} (target 1)")
    assert delivered > 5.0
    # Even under the hidden-batch bound its theorem assumed, it under-noises (by a factor of about 1.7).
    hidden = paper_delivered_epsilon(epsilon=1.0, delta=delta, n=n, batch=m, epochs=40, clip=1.0,
                                     group_proportions=(0.33, 0.67), sampling="without_replacement")
    assert 1.5 < hidden["delivered_epsilon"] < 2.0
    # The numeric calibration meets the target with more noise.
    z_num = noise_multiplier_for(epsilon=1.0, delta=delta, sample_rate=m / n, steps=steps, sampling="public_batch")
    assert z_num > z


# --------------------------------------------------------------------------- CLI

def _run_cli(argv, capsys):
    parser = argparse.ArgumentParser(prog="pfair")
    add_privacy_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    return capsys.readouterr().out


def test_cli_calibrates_and_prices(capsys):
    base = ["privacy", "--delta", "1e-5", "--batch", "256", "--silo-size", "12000", "--epochs", "40", "--json"]
    out = json.loads(_run_cli(base + ["--epsilon", "1"], capsys))
    assert out["steps"] == 40 * math.ceil(12000 / 256) and math.isclose(out["sample_rate"], 256 / 12000)
    assert 0.98 <= out["epsilon"] <= 1.0
    back = json.loads(_run_cli(base + ["--noise-multiplier", str(out["noise_multiplier"])], capsys))
    assert math.isclose(back["epsilon"], out["epsilon"])
    text = _run_cli(base[:-1] + ["--noise-multiplier", "2.0"], capsys)
    assert text.startswith("epsilon ")
    assert privacy_command is not None
