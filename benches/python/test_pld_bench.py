"""Record mode's PLD calibration on an Adult-sized silo (q = 256/11,305, T = 1,800, ε = 1,
δ = 1/n²), as ratios measured in one run:

* the PLD calibration a fit runs (``ledger_pld_noise_multiplier_after``: coarse ledger grid,
  tails cut, secant steps from the RDP answer), uncached, after the silo's DP histogram;
* the RDP calibration it replaces as record mode's default (``ledger_noise_multiplier_after``);
* ONE evaluation of δ(ε) on the fine grid (10⁻³) without tail cuts, the unit of the calibration
  before (it took 5–10 of them, 0.39 s a call).

Run with ``pytest benches/python/test_pld_bench.py -s``; docs/accounting.md ("Calibration timings")
records them.
"""

from __future__ import annotations

from pfair import _core

from test_epoch_bench import interleaved, report

Q, T, DELTA = 256 / 11305, 1800, 1 / 11305**2
HIST = [("full_batch", 1.0, 20.0, 1)]


def test_pld_calibration_against_rdp_and_one_fine_evaluation():
    state = {"eps": 1.0}

    def fresh() -> float:
        # A new target every call: no cache anywhere can answer it.
        state["eps"] *= 1.0 + 1e-6
        return state["eps"]

    def pld():
        _core.ledger_noise_multiplier_after(HIST, DELTA, fresh(), "without_replacement", Q, T, "pld")

    def rdp():
        _core.ledger_noise_multiplier_after(HIST, DELTA, fresh(), "without_replacement", Q, T, "best")

    def fine():
        _core.pld_delta_for(5.4 * state["eps"], Q, T, 1.0, "without_replacement")

    stats = interleaved({"PLD calibration": pld, "RDP calibration": rdp, "one fine-grid delta": fine}, reps=7)
    report("record mode's calibration, Adult-sized silo", stats, "one fine-grid delta")
    # The whole PLD calibration costs about what one fine-grid evaluation did (the old calibration
    # needed 5-10): well under the 50 ms a per-fit default may take on an idle machine.
    assert stats["PLD calibration"][0] < 2.0 * stats["one fine-grid delta"][0]
