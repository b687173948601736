"""Which noise keeps a private fit on a table whose features carry s above its mixing line: h_θ's or h_W's.

A diagnostic, not a private fit: at ε = 1, the acceptance's default SteFFLe fits (3 silos, seeds
0–2, the stretched run, the adaptive clip and today's decay) on the two synthetic tables whose dense
features carry s (``make_synthetic`` at dependence 2 and 3, as in ``convergence.py``) under
demographic parity at λ ∈ {8, 20, 40}, run three ways: as released (both noises), with h_θ's noise
scaled by 10⁻³ (W's as released) and with h_W's noise scaled by 10⁻³ (θ's as released). The scaled
runs do NOT deliver their ε: the noise standard deviations the calibration computes are multiplied
after the fact (``pfair._core.noise_stds`` wrapped for the calibration module), which no user
setting can do. Each row: the last epoch's test error and violation (the model the run ends at,
before the guard chooses) and its margin below the seed's own λ = 0 model's mixing line (> 0:
below). Printout: ``noise_sources_log.txt``.

    python docs/optimisation/noise_sources.py      # about 3 minutes on 2 cores
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

import pfair
import pfair.privacy.calibration as calibration
from pfair import _core
from pfair.references import mixing_line

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convergence as cv  # noqa: E402

TABLES = ("synthetic2", "synthetic3")
LAMS = (8.0, 20.0, 40.0)
#: (label, factor on h_θ's noise std, factor on h_W's)
VARIANTS = (("as released", 1.0, 1.0), ("h_θ's noise × 0.001", 1e-3, 1.0), ("h_W's noise × 0.001", 1.0, 1e-3))
FAIRNESS = "demographic_parity"


class _Scaled:
    """The Rust module as the calibration sees it, with the two-part noise stds scaled."""

    def __init__(self, theta: float, w: float) -> None:
        self.theta, self.w = theta, w

    def __getattr__(self, name: str):
        return getattr(_core, name)

    def noise_stds(self, parts, z):
        out = _core.noise_stds(parts, z)
        return [out[0] * self.theta, out[1] * self.w] if len(parts) == 2 else out


def last_point(data, fed, lam: float, seed: int) -> tuple[float, float]:
    model = pfair.SteFFLe(fairness=FAIRNESS, lam=lam, epsilon=1.0, seed=seed, noise_seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(fed, ledgers="new", eval_set=(data.X_test, data.y_test, data.s_test))
    last = model.history_.iloc[-1]
    return float(last["test_error"]), float(last["test_demographic_parity_difference"])


def zero_lines(data, fairness: str) -> dict:
    """Each seed's mixing line of its private λ = 0 fit (noise as calibrated: its rounds carry none)."""
    calibration._core = _core
    lines = {}
    for seed in cv.SEEDS:
        zero = pfair.SteFFLe(fairness=fairness, lam=0.0, epsilon=1.0, seed=seed, noise_seed=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zero.fit(cv.federation(data, seed), ledgers="new")
        lines[seed] = mixing_line(data.y_test, zero.predict(data.X_test), sensitive_features=data.s_test,
                                  fairness=fairness)
    return lines


def main() -> None:
    print("| table | λ | noise | last test error | last DP | margin below the line (mean of 3 seeds) | seeds below |")
    print("|---|---|---|---|---|---|---|")
    try:
        for name in TABLES:
            data = cv.load(name)
            lines = zero_lines(data, FAIRNESS)
            for lam in LAMS:
                for label, theta, w in VARIANTS:
                    calibration._core = _Scaled(theta, w)
                    points = [last_point(data, cv.federation(data, seed), lam, seed) for seed in cv.SEEDS]
                    margins = [lines[seed].margin(e, v) for seed, (e, v) in zip(cv.SEEDS, points)]
                    err, dp = np.mean(points, axis=0)
                    print(f"| {name} | {lam:g} | {label} | {err:.3f} | {dp:.3f} | {np.mean(margins):+.3f} | "
                          f"{sum(m > 0 for m in margins)} of {len(margins)} |", flush=True)
    finally:
        calibration._core = _core


if __name__ == "__main__":
    main()
