"""Set-up and per-epoch privacy bookkeeping at 1,000 silos, as ratios measured in one run.

* the epoch's ledger charges: every silo's :meth:`PrivacyLedger.charge_rounds` one by one
  (what the simulation did) against :func:`charge_rounds_together` (one Rust call);
* a silo's calibration after its ledger (the DP histogram of ``p_s="dp"`` is always there):
  the Python bisection it used to be (each step a validated event and a Rust call) against the
  Rust bisection, uncached and cached (silos of one size share the answer);
* the finiteness check of a feature matrix: NumPy's (a boolean temporary the size of X)
  against ``_core.nonfinite_rows`` (parallel, no temporary).

Run with ``pytest benches/python/test_setup_bench.py -s``; ``docs/dev/performance-notebook.md`` records them.
"""

from __future__ import annotations

import numpy as np

from pfair import _core
from pfair.privacy import MechanismEvent, PrivacyLedger
from pfair.privacy import calibration
from pfair.privacy.ledger import charge_rounds_together

from test_epoch_bench import interleaved, report

SILOS, Q, Z, DELTA = 1000, 64 / 10_000, 30.0, 1e-8


def _ledgers(n: int) -> list[PrivacyLedger]:
    out = []
    for j in range(n):
        ledger = PrivacyLedger(epsilon=1.0, delta=DELTA, silo=j)
        ledger.charge(MechanismEvent.gaussian_histogram(noise_multiplier=40.0))
        ledger.begin_run("run", sampling="public_batch", sample_rate=Q, noise_multiplier=Z, planned_steps=10**6)
        out.append(ledger)
    return out


def test_epoch_charges_one_rust_call_against_one_call_per_silo():
    one, together = _ledgers(SILOS), _ledgers(SILOS)
    state = {"one": 0, "together": 0}
    rounds = 157  # an epoch of 10,000 records in batches of 64

    def each():
        for ledger in one:
            ledger.charge_rounds("run", state["one"], rounds)
        state["one"] += rounds

    def all_at_once():
        assert not any(charge_rounds_together([(lg, "run") for lg in together], state["together"], rounds))
        state["together"] += rounds

    stats = interleaved({"one call per silo": each, "one Rust call": all_at_once}, reps=10)
    report(f"epoch charges of {SILOS} ledgers", stats, "one call per silo")
    assert [lg.to_dict() for lg in one] == [lg.to_dict() for lg in together]


def _python_bisection(ledger: PrivacyLedger, steps: int) -> float:
    def eps(z: float) -> float:
        return ledger.epsilon_with([MechanismEvent(name="r", sampling="public_batch", sample_rate=Q,
                                                   noise_multiplier=z, steps=steps)])

    lo, hi = 1e-3, 1.0
    while eps(hi) > 1.0:
        lo, hi = hi, hi * 4
    while hi / lo > 1.005:
        mid = (lo * hi) ** 0.5
        lo, hi = (lo, mid) if eps(mid) <= 1.0 else (mid, hi)
    return hi


def test_calibration_after_the_histogram_rust_against_python():
    ledger = _ledgers(1)[0]
    steps = 40 * 157

    def rust_uncached():
        calibration._z_after.cache_clear()
        return calibration.noise_multiplier_after(ledger, epsilon=1.0, sample_rate=Q, steps=steps,
                                                  sampling="public_batch")

    def rust_cached():
        return calibration.noise_multiplier_after(ledger, epsilon=1.0, sample_rate=Q, steps=steps,
                                                  sampling="public_batch")

    stats = interleaved({"python bisection": lambda: _python_bisection(ledger, steps), "rust": rust_uncached,
                         "rust, cached": rust_cached}, reps=20)
    report("calibration of one silo after its DP histogram", stats, "python bisection")
    assert rust_uncached() == _python_bisection(ledger, steps)


def test_finiteness_check_rust_against_numpy():
    X = np.random.default_rng(0).standard_normal((500_000, 100))
    stats = interleaved({"numpy isfinite": lambda: bool(np.isfinite(X).all()),
                         "nonfinite_rows": lambda: _core.nonfinite_rows(X) == 0}, reps=10)
    report("finiteness of a 500,000 x 100 matrix", stats, "numpy isfinite")
    X[123_456, 7] = np.nan
    assert _core.nonfinite_rows(X) == 1
