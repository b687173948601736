//! Exact accounting of Gaussian mechanisms: the analytic Gaussian mechanism (Balle, Wang 2018,
//! "Improving the Gaussian mechanism for differential privacy: analytical calibration and optimal
//! denoising", Thm. 8) and μ-Gaussian DP composition (Dong, Roth, Su 2019/2022, "Gaussian
//! differential privacy", Cor. 2.5 and Thm. 3.2).
//!
//! A Gaussian mechanism whose L2 sensitivity is Δ and noise std σ is μ-GDP with `μ = Δ/σ = 1/z`;
//! its privacy profile is exactly
//!
//! `δ(ε; μ) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)`,
//!
//! and k adaptively composed μ_i-GDP mechanisms are `sqrt(Σ μ_i²)`-GDP (tight for Gaussians).
//! Everything here is evaluated in log space (`log Φ` by `erfc` and its asymptotic series), so
//! no value is NaN for tiny δ or huge μ.

use std::f64::consts::{LN_2, SQRT_2};

use super::bounds::log_erfc;
use super::{check_delta, check_epsilon, AccountingError, Result};

/// `log Φ(x)` for the standard normal CDF, accurate in both tails.
pub fn log_ndtr(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x == f64::INFINITY {
        return 0.0;
    }
    if x == f64::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    if x > 3.0 {
        // Φ(x) = 1 − erfc(x/√2)/2, and log1p keeps the tiny complement.
        (-0.5 * libm::erfc(x / SQRT_2)).ln_1p()
    } else {
        log_erfc(-x / SQRT_2) - LN_2
    }
}

/// `log(e^a − e^b)` for `a ≥ b` (`−∞` when they are equal).
#[inline]
pub(super) fn log_sub(a: f64, b: f64) -> f64 {
    if b == f64::NEG_INFINITY {
        return a;
    }
    if b >= a {
        return f64::NEG_INFINITY;
    }
    a + (-(b - a).exp_m1()).ln()
}

/// `log δ(ε; μ)` of the μ-GDP privacy profile (Balle, Wang 2018, Thm. 8), `ε ≥ 0`, `μ ≥ 0`.
pub fn log_gaussian_delta(eps: f64, mu: f64) -> f64 {
    if mu <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if mu == f64::INFINITY {
        return 0.0;
    }
    let a = log_ndtr(-eps / mu + 0.5 * mu);
    let b = eps + log_ndtr(-eps / mu - 0.5 * mu);
    log_sub(a, b).min(0.0)
}

/// δ(ε; μ) of a μ-GDP mechanism (unchecked; `ε ≥ 0`, `μ ≥ 0`).
#[inline]
pub(super) fn gaussian_delta_unchecked(eps: f64, mu: f64) -> f64 {
    log_gaussian_delta(eps, mu).exp()
}

fn check_mu(mu: f64) -> Result<()> {
    if mu.is_finite() && mu > 0.0 {
        Ok(())
    } else {
        Err(AccountingError::Mu(mu))
    }
}

/// δ at which a μ-GDP mechanism is ε-DP: `Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)` (Balle, Wang 2018).
pub fn gaussian_delta(epsilon: f64, mu: f64) -> Result<f64> {
    if !(epsilon.is_finite() && epsilon >= 0.0) {
        return Err(AccountingError::Epsilon(epsilon));
    }
    check_mu(mu)?;
    Ok(gaussian_delta_unchecked(epsilon, mu))
}

/// Solves `f(x) = 0` for a continuous `f` that changes sign on `[good, bad]` (`f(good) ≤ 0 <
/// f(bad)`), by the Illinois variant of regula falsi, and returns the last `x` with `f(x) ≤ 0`
/// once the bracket is narrower than `tol` — so the answer is always on the feasible side.
/// Superlinear for smooth `f`; every eighth step is a bisection, so it never stalls.
pub(super) fn solve_feasible(mut good: f64, mut bad: f64, tol: f64, mut f: impl FnMut(f64) -> f64) -> f64 {
    let (mut fg, mut fb) = (f(good), f(bad));
    let mut side = 0i8;
    for it in 0..200 {
        if (good - bad).abs() <= tol {
            break;
        }
        let mut x = if fg.is_finite() && fb.is_finite() && fb != fg {
            (good * fb - bad * fg) / (fb - fg)
        } else {
            0.5 * (good + bad)
        };
        let (lo, hi) = if good < bad { (good, bad) } else { (bad, good) };
        if !(x > lo && x < hi) || it % 8 == 7 {
            x = 0.5 * (good + bad);
        }
        let fx = f(x);
        if fx <= 0.0 {
            good = x;
            fg = fx;
            if side == -1 {
                fb *= 0.5;
            }
            side = -1;
        } else {
            bad = x;
            fb = fx;
            if side == 1 {
                fg *= 0.5;
            }
            side = 1;
        }
    }
    good
}

/// The smallest ε ≥ 0 (to relative 1e-12, rounded up) at which a μ-GDP mechanism is
/// (ε, δ)-DP: the inverse in ε of [`gaussian_delta`]. `0` when `δ ≥ δ(0; μ) = 2Φ(μ/2) − 1`.
pub fn gaussian_epsilon(delta: f64, mu: f64) -> Result<f64> {
    check_delta(delta)?;
    check_mu(mu)?;
    Ok(epsilon_for_log_delta(delta.ln(), |e| log_gaussian_delta(e, mu)))
}

/// The smallest ε ≥ 0 (rounded up, relative 1e-12) with `log_delta(ε) ≤ target`, for a
/// non-increasing `log_delta`. Returns `+∞` when no finite ε reaches it.
pub(super) fn epsilon_for_log_delta(target: f64, mut log_delta: impl FnMut(f64) -> f64) -> f64 {
    if log_delta(0.0) <= target {
        return 0.0;
    }
    let mut hi = 1.0;
    while log_delta(hi) > target {
        hi *= 2.0;
        if hi > 1e8 {
            return f64::INFINITY;
        }
    }
    let lo = if hi == 1.0 { 0.0 } else { hi / 2.0 };
    // log δ(ε) is concave-ish and may be −∞ far out: clamp for the secant steps.
    solve_feasible(hi, lo, 1e-12 * hi, |e| log_delta(e).max(-1e4) - target)
}

/// The largest μ (to relative 1e-12, rounded down) such that a μ-GDP mechanism is (ε, δ)-DP:
/// the inverse in μ of [`gaussian_delta`] (δ increases with μ).
pub fn gaussian_mu(epsilon: f64, delta: f64) -> Result<f64> {
    check_epsilon(epsilon)?;
    check_delta(delta)?;
    Ok(mu_for_log_delta(delta.ln(), |mu| log_gaussian_delta(epsilon, mu)))
}

/// The largest `μ > 0` (rounded down, relative 1e-12) with `log_delta(μ) ≤ target` for a
/// non-decreasing `log_delta` that tends to `−∞` at 0 and 0 at `+∞`.
pub(super) fn mu_for_log_delta(target: f64, mut log_delta: impl FnMut(f64) -> f64) -> f64 {
    let (mut good, mut bad) = (1.0, 1.0);
    if log_delta(1.0) <= target {
        while log_delta(bad) <= target {
            good = bad;
            bad *= 2.0;
        }
    } else {
        while log_delta(good) > target {
            bad = good;
            good /= 2.0;
            if good < 1e-300 {
                return 0.0;
            }
        }
    }
    let (lg, lb) = (good.ln(), bad.ln());
    solve_feasible(lg, lb, 1e-13, |u| log_delta(u.exp()).max(-1e4) - target).exp()
}

/// μ of the adaptive composition of μ_i-GDP mechanisms: `sqrt(Σ μ_i²)` (Dong, Roth, Su,
/// "Gaussian differential privacy", Cor. 3.3).
pub fn gdp_compose(mus: &[f64]) -> Result<f64> {
    let mut s = 0.0;
    for &m in mus {
        if !(m.is_finite() && m >= 0.0) {
            return Err(AccountingError::Mu(m));
        }
        s += m * m;
    }
    Ok(s.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::rel;

    fn ndtr(x: f64) -> f64 {
        0.5 * libm::erfc(-x / SQRT_2)
    }

    #[test]
    fn log_ndtr_is_accurate_in_both_tails() {
        for x in [-30.0, -8.0, -1.0, 0.0, 0.5, 2.0, 3.5, 6.0] {
            assert!(rel(log_ndtr(x), ndtr(x).ln()) < 1e-13 || (log_ndtr(x) - ndtr(x).ln()).abs() < 1e-16, "{x}");
        }
        // Far left tail: log Φ(x) ≈ −x²/2 − log(−x√(2π)).
        let x: f64 = -1e4;
        let approx = -0.5 * x * x - (-x * (2.0 * std::f64::consts::PI).sqrt()).ln();
        assert!(rel(log_ndtr(x), approx) < 1e-12);
        assert!(log_ndtr(40.0) == 0.0 || log_ndtr(40.0) > -1e-300);
    }

    #[test]
    fn delta_matches_the_closed_form_and_its_limits() {
        for (e, mu) in [(0.5, 0.3), (1.0, 1.0), (3.0, 2.0), (0.1, 0.05)] {
            let want = ndtr(-e / mu + mu / 2.0) - e.exp() * ndtr(-e / mu - mu / 2.0);
            assert!(rel(gaussian_delta(e, mu).unwrap(), want) < 1e-9, "{e} {mu}");
        }
        // ε = 0: δ = 2Φ(μ/2) − 1 (total variation of the two Gaussians).
        assert!(rel(gaussian_delta(0.0, 1.0).unwrap(), 2.0 * ndtr(0.5) - 1.0) < 1e-12);
        // Huge μ: δ → 1; tiny δ: positive and finite, never NaN.
        assert!(gaussian_delta(1.0, 1e6).unwrap() > 0.999_999);
        let tiny = gaussian_delta(10.0, 0.2).unwrap();
        assert!((0.0..1e-100).contains(&tiny));
        assert!(log_gaussian_delta(10.0, 0.2).is_finite());
        assert_eq!(gaussian_delta(1.0, 0.0).unwrap_err().argument(), "mu");
    }

    #[test]
    fn epsilon_and_mu_invert_delta_from_the_feasible_side() {
        for (d, mu) in [(1e-5, 0.5), (1e-10, 2.0), (1e-300, 1.0), (0.1, 0.01), (1e-8, 30.0)] {
            let e = gaussian_epsilon(d, mu).unwrap();
            assert!(e.is_finite(), "{d} {mu}");
            assert!(gaussian_delta(e, mu).unwrap() <= d * (1.0 + 1e-9), "{d} {mu}");
            if e > 0.0 {
                assert!(gaussian_delta(e * (1.0 - 1e-9), mu).unwrap() > d * (1.0 - 1e-6), "{d} {mu}");
                let m = gaussian_mu(e, d).unwrap();
                assert!(rel(m, mu) < 1e-8, "{d} {mu}: {m}");
                assert!(gaussian_delta(e, m).unwrap() <= d * (1.0 + 1e-12));
            }
        }
        // δ above the total variation: ε = 0.
        assert_eq!(gaussian_epsilon(0.5, 0.01).unwrap(), 0.0);
    }

    #[test]
    fn composition_adds_squares() {
        assert!(rel(gdp_compose(&[0.3, 0.4]).unwrap(), 0.5) < 1e-15);
        assert_eq!(gdp_compose(&[f64::NAN]).unwrap_err().argument(), "mu");
    }
}
