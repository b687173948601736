"""Review reproduction (not for main): PLD calibration after a PLD-priced run returns the floor
z = 1e-3 (epsilon = inf) when the new run's PLD at the start point z = 1 is infinite: the
bracketing fallback in ledger_pld_noise_multiplier_after steps *down* in z from an infeasible point
(step = -signum(f)·ln 4) and returns Z_MIN without evaluating it."""

from __future__ import annotations

import pytest

from pfair import _core
from pfair.exceptions import PrivacyBudgetExceeded
from pfair.privacy import MechanismEvent, PrivacyLedger
from pfair.privacy.calibration import pld_noise_multiplier_after

Q, T, D = 256 / 11305, 1800, 1 / 11305**2


def test_pld_calibration_after_a_pld_priced_run_meets_the_target_with_large_batches():
    z1 = _core.pld_noise_multiplier_for(0.8, D, Q, T, "without_replacement")
    ledger = PrivacyLedger(epsilon=1.0, delta=D)
    ledger.charge(MechanismEvent(name="first", sampling="without_replacement", sample_rate=Q, noise_multiplier=z1,
                                 steps=T))
    assert ledger.epsilons()["rdp"] > 1.0  # RDP finds nothing left: the search starts at z = 1
    z = pld_noise_multiplier_after(ledger, epsilon=1.0, sample_rate=0.5, steps=200, sampling="without_replacement")
    run = MechanismEvent(name="second", sampling="without_replacement", sample_rate=0.5, noise_multiplier=z, steps=200)
    # On main: z = 0.001 and the PLD epsilon is inf (the prepaid charge then refuses the run, so nothing
    # is released; but the calibration's contract, and the second fit, are broken).
    assert ledger.epsilons([run])["pld"] <= 1.0, z
