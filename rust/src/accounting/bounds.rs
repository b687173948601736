//! Per-step RDP bounds of the Gaussian mechanism, one per batch scheme, and [`rdp_step`], the
//! one place that maps a [`Scheme`] to its bound. Units and adjacencies: see the module docs of
//! [`crate::accounting`].

use std::f64::consts::{LN_2, PI};

use super::{check_order, check_rate, check_scheme_rate, check_z, Result, Scheme};

// ---------------------------------------------------------------------------------------------
// Log-space helpers.

/// `log(e^x + e^y)`.
#[inline]
pub(super) fn log_add(x: f64, y: f64) -> f64 {
    let (a, b) = if x < y { (x, y) } else { (y, x) };
    if a == f64::NEG_INFINITY {
        return b;
    }
    (a - b).exp().ln_1p() + b
}

/// `log|C(α, k)|` for real `α` and integer `k ≥ 0`, via `log|Γ|` (reflection handled by libm).
#[inline]
fn log_abs_binom(alpha: f64, k: f64) -> f64 {
    libm::lgamma(alpha + 1.0) - libm::lgamma(k + 1.0) - libm::lgamma(alpha - k + 1.0)
}

/// `log erfc(x)`, accurate in the far right tail where `erfc` underflows.
pub(super) fn log_erfc(x: f64) -> f64 {
    if x < 25.0 {
        libm::erfc(x).ln()
    } else {
        // Asymptotic expansion of log erfc at +∞ (Abramowitz & Stegun 7.1.23).
        let x2 = x * x;
        -0.5 * PI.ln() - x.ln() - x2 - 0.5 / x2 + 0.625 / (x2 * x2) - 37.0 / 24.0 / (x2 * x2 * x2)
            + 353.0 / 64.0 / (x2 * x2 * x2 * x2)
    }
}

fn is_integer(alpha: f64) -> bool {
    alpha.fract() == 0.0
}

// ---------------------------------------------------------------------------------------------
// Per-step RDP bounds.

/// RDP of the Gaussian mechanism at order `α` (Mironov 2017, Prop. 7): `ε(α) = α / (2 z²)`,
/// `z` = noise std / L2 sensitivity under the adjacency in use.
pub fn rdp_gaussian(z: f64, alpha: f64) -> Result<f64> {
    check_z(z)?;
    check_order(alpha)?;
    Ok(alpha / (2.0 * z * z))
}

/// `log A_α` of the Poisson-sampled Gaussian for integer `α` (Mironov, Talwar, Zhang 2019,
/// Sec. 3.3): `A_α = Σ_{i=0}^{α} C(α,i) q^i (1−q)^{α−i} exp((i² − i) / (2 z²))`.
fn poisson_log_a_int(q: f64, z: f64, alpha: u64) -> f64 {
    let (lq, l1q) = (q.ln(), (-q).ln_1p());
    let a = alpha as f64;
    let mut log_a = f64::NEG_INFINITY;
    // log C(α, i) by the recurrence C(α, i+1) = C(α, i)·(α − i)/(i + 1) (no lgamma per term).
    let mut lc = 0.0;
    for i in 0..=alpha {
        let fi = i as f64;
        let term = lc + fi * lq + (a - fi) * l1q + (fi * fi - fi) / (2.0 * z * z);
        log_a = log_add(log_a, term);
        lc += ((a - fi) / (fi + 1.0)).ln();
    }
    log_a
}

/// Series cap of [`poisson_log_a_frac`] (as in dp-accounting); if it does not converge the order
/// is reported as `+∞` (never used), which is conservative.
const MAX_FRAC_TERMS: usize = 1000;

/// `log A_α` of the Poisson-sampled Gaussian for fractional `α` (Mironov, Talwar, Zhang 2019,
/// Sec. 3.3): `A_α` is split at `x₀ = z² log(1/q − 1) + 1/2` into two convergent series whose
/// terms carry `erfc` tails. Like dp-accounting, the magnitudes `|C(α,i)|` are summed, which can
/// only over-estimate `A_α` (never under-account).
fn poisson_log_a_frac(q: f64, z: f64, alpha: f64) -> f64 {
    let (lq, l1q) = (q.ln(), (-q).ln_1p());
    let x0 = z * z * (1.0 / q - 1.0).ln() + 0.5;
    let s2z = std::f64::consts::SQRT_2 * z;
    let (mut a0, mut a1) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    let (mut last0, mut last1) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    let mut lc = 0.0; // log|C(α, i)|, updated by the recurrence |C(α, i+1)| = |C(α, i)|·|α − i|/(i + 1)
    for i in 0..MAX_FRAC_TERMS {
        let fi = i as f64;
        let j = alpha - fi;
        let t0 = lc + fi * lq + j * l1q;
        let t1 = lc + j * lq + fi * l1q;
        let e0 = 0.5f64.ln() + log_erfc((fi - x0) / s2z);
        let e1 = 0.5f64.ln() + log_erfc((x0 - j) / s2z);
        let s0 = t0 + (fi * fi - fi) / (2.0 * z * z) + e0;
        let s1 = t1 + (j * j - j) / (2.0 * z * z) + e1;
        a0 = log_add(a0, s0);
        a1 = log_add(a1, s1);
        let total = log_add(a0, a1);
        if s0 < last0 && s1 < last1 && s0.max(s1) < total - 30.0 {
            return total;
        }
        last0 = s0;
        last1 = s1;
        lc += (alpha - fi).abs().ln() - (fi + 1.0).ln();
    }
    f64::INFINITY
}

/// RDP at order `α` of the Poisson-sampled Gaussian mechanism under ADD/REMOVE-one adjacency
/// (Mironov, Talwar, Zhang 2019, "Rényi DP of the Sampled Gaussian Mechanism", Sec. 3.3):
/// `ε(α) = log A_α / (α − 1)`, with `ε(α) = α/(2z²)` at `q = 1`. `z` = noise std / add/remove
/// sensitivity. Matches dp-accounting's `PoissonSampledDpEvent` and opacus' `compute_rdp`.
pub fn rdp_poisson(q: f64, z: f64, alpha: f64) -> Result<f64> {
    check_rate(q)?;
    check_z(z)?;
    check_order(alpha)?;
    Ok(rdp_poisson_unchecked(q, z, alpha))
}

fn rdp_poisson_unchecked(q: f64, z: f64, alpha: f64) -> f64 {
    if q == 1.0 {
        return alpha / (2.0 * z * z);
    }
    let log_a = if is_integer(alpha) {
        poisson_log_a_int(q, z, alpha as u64)
    } else {
        poisson_log_a_frac(q, z, alpha)
    };
    let mtz = log_a / (alpha - 1.0);
    if mtz >= POISSON_SERIES_FLOOR {
        return mtz;
    }
    // Below the floor the series' rounding (about 1e-17 absolute) is no longer small beside its
    // value, which it can even take below 0: a bound that small would over-state privacy (a
    // negative or tiny RDP certifies ε = 0 through the KL branch of the conversion). Joint
    // convexity of e^{(α−1)D_α} gives a bound computed without cancellation instead: P = (1−q)R +
    // qN(u, σ²) and R = N(0, σ²) give e^{(α−1)D_α(P‖R)} ≤ 1 − q + q e^{(α−1)α/(2z²)}, and the same
    // for D_α(R‖P) (the public-batch formula, `rdp_public_batch`, at add/remove sensitivity).
    rdp_public_batch_unchecked(q, z, alpha)
}

/// Per-step RDP below which [`rdp_poisson`]'s series is replaced by the joint-convexity bound
/// (which is larger, so the replacement only adds noise to a calibration). The series' absolute
/// rounding is about 1e-17 (measured up to z = 1e6); 1e-14 keeps it under 0.1% of what is kept,
/// and only noise multipliers above about 1e4 (q = 1e-3) reach it.
pub(super) const POISSON_SERIES_FLOOR: f64 = 1e-14;

/// Above this integer order the WOR bound drops the forward-difference term (dp-accounting does
/// the same); the remaining `2 e^{(j−1)ε(j)}` term is still a valid bound.
const WOR_EXACT_MAX_ORDER: u64 = 256;

/// `log|e^y − 1|`, accurate near 0 and for large `|y|` (`−∞` at `y = 0`).
#[inline]
fn log_abs_expm1(y: f64) -> f64 {
    if y > 40.0 {
        y + (-(-y).exp()).ln_1p()
    } else if y > 0.0 {
        y.exp_m1().ln()
    } else if y > -1.0 {
        (-y.exp_m1()).ln()
    } else {
        (-y.exp()).ln_1p()
    }
}

/// First and second derivative of [`log_abs_expm1`]: `1/(1 − e^{−y})` and `−e^{−y}/(1 − e^{−y})²`.
#[inline]
fn log_abs_expm1_derivatives(y: f64) -> (f64, f64) {
    if y < -30.0 {
        let e = y.exp();
        return (-e, -e);
    }
    let u = (-y).exp_m1(); // e^{−y} − 1
    (-1.0 / u, -(1.0 + u) / (u * u))
}

/// `log E[(e^Y − 1)^p]` for `Y ~ N(−s²/2, s²)`, `s = 1/z`, and even `p ≥ 2`.
///
/// Why this is the forward difference: `E[e^{jY}] = e^{−js²/2 + j²s²/2} = F(j)`, so by the binomial
/// theorem `Δ^p F(0) = Σ_j C(p,j)(−1)^{p−j} F(j) = E[(e^Y − 1)^p]`. The alternating sum loses
/// about `log10(E[(e^Y+1)^p] / E[(e^Y−1)^p])` digits to cancellation (all of them for z ≳ 10 and
/// p ≳ 20), the integral loses none: its integrand `φ(y)(e^y − 1)^p` is non-negative and entire.
///
/// Method: `g(y) = log φ(y) + p·log|e^y − 1|` is strictly concave on each side of 0
/// (`g'' ≤ −1/s²`), so each side has one mode, found by safeguarded Newton. The trapezoid rule
/// with step `w/5` (`w = (−g''(mode))^{−1/2}`, the mode's width) walks out from each mode until
/// `g` has fallen 46 nats (relative 1e-20). For an entire, Gaussian-tailed integrand the rule
/// converges faster than any power of the step, so this is exact to rounding (checked against
/// 400-digit arithmetic in `tests/test_accounting.py`). When a side's walk reaches 0 before its
/// tail is negligible, both sides are summed on one uniform grid across 0 instead.
fn log_moment_expm1(z: f64, p: f64) -> f64 {
    let s2 = 1.0 / (z * z);
    let mu = -0.5 * s2;
    let norm = -0.5 * (2.0 * PI * s2).ln();
    let g = |y: f64| norm - (y - mu) * (y - mu) / (2.0 * s2) + p * log_abs_expm1(y);
    let derivs = |y: f64| {
        let (d1, d2) = log_abs_expm1_derivatives(y);
        (-(y - mu) / s2 + p * d1, -1.0 / s2 + p * d2)
    };
    // Mode of one side: g' is decreasing there, +∞ at the left end and −∞ at the right end.
    let mode = |right: bool| -> f64 {
        let (mut lo, mut hi) = if right { (0.0, 1.0) } else { (-1.0, 0.0) };
        if right {
            while derivs(hi).0 > 0.0 {
                lo = hi;
                hi *= 2.0;
            }
        } else {
            while derivs(lo).0 < 0.0 {
                hi = lo;
                lo *= 2.0;
            }
        }
        let mut y = 0.5 * (lo + hi);
        for _ in 0..200 {
            let (d1, d2) = derivs(y);
            if d1 > 0.0 { lo = y } else { hi = y }
            let newton = y - d1 / d2;
            let next = if newton > lo && newton < hi { newton } else { 0.5 * (lo + hi) };
            if (next - y).abs() <= 1e-15 * y.abs().max(1e-300) || hi - lo <= 1e-15 * y.abs() {
                return next;
            }
            y = next;
        }
        y
    };
    const DROP: f64 = 46.0;
    // Walk from the mode in both directions; returns (log of the side's integral, step, far ends,
    // whether the walk reached 0 before the tail was negligible).
    let side = |right: bool| -> (f64, f64, f64, f64, bool) {
        let y0 = mode(right);
        let g0 = g(y0);
        let h = 0.2 / (-derivs(y0).1).sqrt();
        let mut sum = 1.0;
        let mut hit_zero = false;
        let mut ends = [y0, y0];
        for (e, dir) in [1.0f64, -1.0].into_iter().enumerate() {
            let mut k = 1.0;
            loop {
                let y = y0 + dir * k * h;
                if (y > 0.0) != right || y == 0.0 {
                    hit_zero = true;
                    break;
                }
                let v = g(y) - g0;
                ends[e] = y;
                if v < -DROP {
                    break;
                }
                sum += v.exp();
                k += 1.0;
            }
        }
        (g0 + (h * sum).ln(), h, ends[1].min(ends[0]), ends[0].max(ends[1]), hit_zero)
    };
    let (left, h_l, far_l, _, zero_l) = side(false);
    let (right, h_r, _, far_r, zero_r) = side(true);
    if !(zero_l || zero_r) {
        return log_add(left, right);
    }
    // Modes near 0: one uniform grid over both sides (the integrand is smooth across 0).
    let h = h_l.min(h_r);
    let n = ((far_r - far_l) / h).ceil() as usize + 1;
    let gmax = (0..=n).map(|k| g(far_l + k as f64 * h)).fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = (0..=n).map(|k| (g(far_l + k as f64 * h) - gmax).exp()).sum();
    gmax + (h * sum).ln()
}

/// `log Δ^{2m} F(0)`, where `F(j) = exp((j−1) ε(j))`, `ε(j) = j/(2z²)`, is the Gaussian's
/// moment sequence and `Δ` the forward difference (WBK 2019, Thm. 27 uses the even-order
/// differences). `Δ⁰F(0) = 1`, `Δ²F(0) = e^{1/z²} − 1` in closed form, the rest by
/// [`log_moment_expm1`]. (dp-accounting takes these differences by repeated float64
/// differencing, which returns rounding noise for z ≳ 10 beyond order ~15; see
/// `docs/accounting.md`.)
fn wor_even_difference(z: f64, m: usize) -> f64 {
    match m {
        0 => 0.0,
        1 => (1.0 / (z * z)).exp_m1().ln(),
        _ => log_moment_expm1(z, 2.0 * m as f64),
    }
}

/// `log` of the bracket `1 + Σ_{j≥2} …` of WBK 2019 Thm. 9/27 for integer `α ≥ 1`. `even` must
/// hold [`wor_even_difference`] for `m = 0..=m_max` with `2·m_max ≥ α` when `α ≤ 256`.
fn wor_log_a_int(q: f64, z: f64, alpha: u64, even: &[f64]) -> f64 {
    if alpha <= 1 {
        return 0.0;
    }
    let eps = |x: f64| x / (2.0 * z * z);
    let cgf = |x: f64| x * (x + 1.0) / (2.0 * z * z);
    let a = alpha as f64;
    let lq = q.ln();
    // log(e^{ε(2)} − 1), the j = 2 term's first option.
    let log_e2m1 = eps(2.0) + (-(-eps(2.0)).exp()).ln_1p();
    let ln4 = 4f64.ln();
    let mut log_a = 0.0;
    let mut lc = log_abs_binom(a, 2.0); // log C(α, i), advanced by the recurrence below
    for i in 2..=alpha {
        let fi = i as f64;
        if i > 2 {
            lc += ((a - fi + 1.0) / fi).ln();
        }
        let s = if i == 2 {
            2.0 * lq + lc + (ln4 + log_e2m1).min(eps(2.0) + LN_2)
        } else {
            let bound = if alpha <= WOR_EXACT_MAX_ORDER {
                let lo = even[(i / 2) as usize];
                let hi = even[i.div_ceil(2) as usize];
                (ln4 + 0.5 * (lo + hi)).min(LN_2 + cgf(fi - 1.0))
            } else {
                LN_2 + cgf(fi - 1.0)
            };
            bound + fi * lq + lc
        };
        log_a = log_add(log_a, s);
    }
    log_a
}

/// State for WOR bounds at one noise multiplier: the even forward differences, computed up to
/// the largest integer order asked for so far.
struct WorTable {
    z: f64,
    even: Vec<f64>,
}

impl WorTable {
    fn new(z: f64, orders: &[f64]) -> Self {
        let mut t = WorTable { z, even: vec![0.0] };
        for &a in orders {
            t.ensure(a);
        }
        t
    }

    /// Extends the differences so that [`WorTable::rdp`] can evaluate order `alpha`.
    fn ensure(&mut self, alpha: f64) {
        let need = (alpha.ceil() as u64).clamp(2, WOR_EXACT_MAX_ORDER);
        let m_max = need.div_ceil(2) as usize;
        while self.even.len() <= m_max {
            let m = self.even.len();
            self.even.push(wor_even_difference(self.z, m));
        }
    }

    fn rdp(&self, q: f64, alpha: f64) -> f64 {
        let z = self.z;
        if q == 1.0 {
            return alpha / (2.0 * z * z);
        }
        if is_integer(alpha) {
            wor_log_a_int(q, z, alpha as u64, &self.even) / (alpha - 1.0)
        } else {
            // WBK 2019, Cor. 10: (α−1)ε(α) is convex in α, so interpolate linearly between the
            // neighbouring integers' (α−1)ε(α) = log A.
            let (f, c) = (alpha.floor(), alpha.ceil());
            let x = wor_log_a_int(q, z, f as u64, &self.even);
            let y = wor_log_a_int(q, z, c as u64, &self.even);
            let t = alpha - f;
            ((1.0 - t) * x + t * y) / (alpha - 1.0)
        }
    }
}

/// RDP at order `α` of the Gaussian mechanism on a fixed-size batch drawn WITHOUT replacement,
/// sampling rate `q = m/n`, under REPLACE-ONE adjacency (Wang, Balle, Kasiviswanathan 2019,
/// "Subsampled Rényi DP and analytical moments accountant", Thm. 9 in its Gaussian-strengthened
/// form Thm. 27; fractional orders by Cor. 10). `z` = noise std / replace-one sensitivity of the
/// batch statistic. For integer `α`:
///
/// `(α−1) ε(α) ≤ log(1 + q² C(α,2) min{4(e^{ε(2)}−1), 2e^{ε(2)}}
///              + Σ_{j=3}^{α} q^j C(α,j) min{4 (Δ^{2⌊j/2⌋}F(0) Δ^{2⌈j/2⌉}F(0))^{1/2}, 2e^{(j−1)ε(j)}})`,
///
/// with `ε(j) = j/(2z²)` and `F(j) = e^{(j−1)ε(j)}`. Equals dp-accounting's
/// `SampledWithoutReplacementDpEvent` with `NeighboringRelation.REPLACE_ONE` wherever float64
/// differencing of `F` is well conditioned, and is the exact bound (tighter) where it is not.
pub fn rdp_without_replacement(q: f64, z: f64, alpha: f64) -> Result<f64> {
    check_rate(q)?;
    check_z(z)?;
    check_order(alpha)?;
    Ok(WorTable::new(z, &[alpha]).rdp(q, alpha))
}

/// RDP at order `α` of one step of a Gaussian mechanism on a random batch whose membership is
/// PUBLIC, under replace-one adjacency: the protected record is in the batch with probability `q`
/// (and then the step is a Gaussian mechanism with noise multiplier `z`), otherwise the step does
/// not depend on it at all. `z` = noise std / replace-one sensitivity of the batch statistic.
///
/// `ε(α) = log(1 − q + q·e^{α(α−1)/(2z²)}) / (α − 1)`, exactly.
///
/// Why (and why not the subsampled bounds): a SteFFLe silo in attribute mode sends the
/// s-independent parts of its message (loss gradient, a_θ, a_W) without noise. They are sums over
/// the batch of known functions of (x, y), so an adversary who knows the non-sensitive data can
/// read off the batch B. Amplification by subsampling (WBK 2019, MTZ 2019) needs B to stay
/// hidden, and both bounds assume a base mechanism that is private for ANY change of a record,
/// which exact sums of (x, y) are not. So give the adversary B outright: the output (B, O) is a
/// post-processing-free refinement of O, so `D_α(O | O') ≤ D_α((B, O) | (B, O'))`, and since B has
/// the same law under both neighbours, `e^{(α−1) D_α((B,O)‖(B,O'))} = E_B[e^{(α−1) D_α(O|B ‖ O'|B)}]`.
/// Given B the two outputs coincide when the record is not in B, and are Gaussians whose means
/// differ by at most the sensitivity when it is, with `D_α = α/(2z²)` (Mironov 2017, Prop. 7).
/// Hence `e^{(α−1)ε(α)} = (1 − q) + q e^{(α−1)α/(2z²)}`. This is the joint-convexity bound of
/// `docs/accounting.md` and, when B is revealed, it is attained. Steps compose by adding RDP.
pub fn rdp_public_batch(q: f64, z: f64, alpha: f64) -> Result<f64> {
    check_rate(q)?;
    check_z(z)?;
    check_order(alpha)?;
    Ok(rdp_public_batch_unchecked(q, z, alpha))
}

fn rdp_public_batch_unchecked(q: f64, z: f64, alpha: f64) -> f64 {
    let x = (alpha - 1.0) * alpha / (2.0 * z * z);
    if q == 1.0 {
        return alpha / (2.0 * z * z);
    }
    // log(1 + q (e^x − 1)), without overflow for large x.
    let log_m = if x < 30.0 { (q * x.exp_m1()).ln_1p() } else { log_add((-q).ln_1p(), q.ln() + x) };
    log_m / (alpha - 1.0)
}

/// RDP at order `α` of the Poisson-sampled Gaussian mechanism under REPLACE-ONE adjacency where
/// the replaced record is always present (pfair's adjacency: one record's `s` changes). `z` is
/// measured against the ADD/REMOVE sensitivity `Δ_ar` = the largest norm of one record's
/// contribution, so the two contributions `u, u'` satisfy `‖u‖, ‖u'‖ ≤ Δ_ar`.
///
/// The two output laws are `P = (1−q)N(0,σ²) + qN(u,σ²)` and `Q = (1−q)N(0,σ²) + qN(u',σ²)`
/// (after shifting out the other records). Two valid bounds, and we return the smaller:
///
/// 1. Weak triangle inequality (Mironov 2017, Prop. 11) through `R = N(0,σ²)` (record not
///    sampled): `D_α(P‖Q) ≤ (α−½)/(α−1) · D_{2α}(P‖R) + D_{2α−1}(R‖Q)`; both terms are
///    add/remove sampled-Gaussian divergences, bounded by [`rdp_poisson`] at orders `2α` and
///    `2α−1` (MTZ 2019 bound both directions by the same `A_α`).
/// 2. Joint convexity of `exp((α−1)D_α)` (a perspective function) applied to the mixture:
///    `D_α(P‖Q) ≤ log(1 − q + q e^{(α−1)·2α/z²}) / (α−1)`, since `‖u−u'‖ ≤ 2Δ_ar`. At `q = 1`
///    this is exactly the Gaussian bound `2α/z²`.
///
/// The proof is written out in `docs/accounting.md`.
pub fn rdp_poisson_replace_one(q: f64, z: f64, alpha: f64) -> Result<f64> {
    check_rate(q)?;
    check_z(z)?;
    check_order(alpha)?;
    Ok(rdp_poisson_replace_one_unchecked(q, z, alpha))
}

fn rdp_poisson_replace_one_unchecked(q: f64, z: f64, alpha: f64) -> f64 {
    // Convexity bound: log(1 − q + q e^{c}) with c = (α−1)·2α/z², computed as
    // log(1 + q (e^c − 1)) = c + log(q + (1−q) e^{−c}) for large c.
    let c = (alpha - 1.0) * 2.0 * alpha / (z * z);
    let convex = if c > 30.0 {
        (c + (q + (1.0 - q) * (-c).exp()).ln()) / (alpha - 1.0)
    } else {
        (q * c.exp_m1()).ln_1p() / (alpha - 1.0)
    };
    if q == 1.0 {
        return convex;
    }
    let triangle = (alpha - 0.5) / (alpha - 1.0) * rdp_poisson_unchecked(q, z, 2.0 * alpha)
        + rdp_poisson_unchecked(q, z, 2.0 * alpha - 1.0);
    convex.min(triangle)
}

// ---------------------------------------------------------------------------------------------
// Dispatch by scheme.

/// Per-step RDP of one scheme at rate `q` and noise multiplier `z`, order by order: the one
/// `match` on [`Scheme`], shared by [`rdp_step`], [`rdp_curve`](super::rdp_curve) and the
/// calibration scan. For [`Scheme::WithoutReplacement`] it keeps the forward differences computed
/// so far, so a sweep over orders computes each difference once. Inputs are not checked here;
/// every caller validates them first.
pub(super) struct StepBound {
    scheme: Scheme,
    q: f64,
    z: f64,
    wor: Option<WorTable>,
}

impl StepBound {
    pub(super) fn new(scheme: Scheme, q: f64, z: f64) -> Self {
        let wor = (scheme == Scheme::WithoutReplacement).then(|| WorTable::new(z, &[]));
        StepBound { scheme, q, z, wor }
    }

    /// Per-step RDP at order `alpha` (`alpha > 1`, not checked).
    pub(super) fn rdp(&mut self, alpha: f64) -> f64 {
        let (q, z) = (self.q, self.z);
        match self.scheme {
            Scheme::FullBatch | Scheme::Shuffle => alpha / (2.0 * z * z),
            Scheme::PublicBatch => rdp_public_batch_unchecked(q, z, alpha),
            Scheme::Poisson => rdp_poisson_unchecked(q, z, alpha),
            Scheme::PoissonReplaceOne => rdp_poisson_replace_one_unchecked(q, z, alpha),
            Scheme::WithoutReplacement => {
                let table = self.wor.as_mut().expect("table exists for WOR");
                table.ensure(alpha);
                table.rdp(q, alpha)
            }
        }
    }
}

/// RDP at order `α` of ONE step of `scheme` at sampling rate `q` and noise multiplier `z` (each
/// scheme's sensitivity convention as in [`crate::accounting`]): [`rdp_without_replacement`],
/// [`rdp_poisson`], [`rdp_poisson_replace_one`], [`rdp_public_batch`], or for
/// [`Scheme::FullBatch`] (which needs `q = 1`) [`rdp_gaussian`].
pub fn rdp_step(scheme: Scheme, q: f64, z: f64, alpha: f64) -> Result<f64> {
    check_scheme_rate(scheme, q)?;
    check_z(z)?;
    check_order(alpha)?;
    Ok(StepBound::new(scheme, q, z).rdp(alpha))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::{default_orders, epsilon_for, rel};

    #[test]
    fn poisson_bounds_never_fall_below_the_second_order_term_at_any_noise() {
        // For a Poisson-sampled Gaussian, A_α ≥ 1 + C(α, 2) q² (e^{1/z²} − 1) (second-order term
        // of the binomial expansion), so ε(α) is at least about α q² (e^{1/z²} − 1) / 2. Before the
        // series floor, z = 1e6 at q = 1e-3 gave values at 1e-18 ± 1e-17, some below 0, which the
        // conversion turns into ε = 0 (issue: calibration refused a target epsilon_for called met).
        for &q in &[1e-4f64, 1e-3, 1e-2, 0.1, 0.5] {
            for &z in &[1.0f64, 10.0, 1e2, 1e3, 1e4, 1e5, 3e5, 1e6] {
                for &a in default_orders().iter().filter(|&&a| a <= 256.0) {
                    let lower = 0.5 * a * q * q * (1.0 / (z * z)).exp_m1() / 2.0;
                    for r in [rdp_poisson(q, z, a).unwrap(), rdp_poisson_replace_one(q, z, a).unwrap()] {
                        assert!(r >= lower, "q={q} z={z} α={a}: {r} < {lower}"); // +∞ (a diverging series) is a valid bound
                    }
                }
            }
        }
    }

    #[test]
    fn below_the_series_floor_the_poisson_bound_is_the_convexity_bound() {
        let (q, z) = (1e-3, 1e6);
        for a in [2.0, 4.3, 8.6, 64.0] {
            let r = rdp_poisson(q, z, a).unwrap();
            assert!(r < POISSON_SERIES_FLOOR * 10.0);
            assert_eq!(r, rdp_public_batch(q, z, a).unwrap());
        }
        // Above it the series is kept as it was (bit for bit: calibrations at usual z do not move).
        let (q, z, a) = (0.01, 2.0, 8.0);
        assert!(rdp_poisson(q, z, a).unwrap() >= POISSON_SERIES_FLOOR);
        assert!(rdp_poisson(q, z, a).unwrap() < rdp_public_batch(q, z, a).unwrap());
    }

    #[test]
    fn log_helpers_are_exact_on_easy_values() {
        assert!((log_add(2f64.ln(), 3f64.ln()) - 5f64.ln()).abs() < 1e-15);
        assert_eq!(log_add(f64::NEG_INFINITY, 1.0), 1.0);
        assert!((log_abs_binom(10.0, 3.0) - 120f64.ln()).abs() < 1e-12);
        // C(2.5, 4) = 2.5·1.5·0.5·(−0.5)/24 < 0: the magnitude is returned.
        assert!((log_abs_binom(2.5, 4.0) - (0.9375f64 / 24.0).ln()).abs() < 1e-12);
        assert!((log_erfc(1.0) - libm::erfc(1.0).ln()).abs() < 1e-14);
        // Continuity of the tail branch at the switch point.
        assert!(rel(log_erfc(25.0), libm::erfc(25.0).ln()) < 1e-12);
        assert!(log_erfc(40.0) < -1600.0);
        assert!(is_integer(3.0) && !is_integer(3.5));
    }

    #[test]
    fn gaussian_rdp_is_alpha_over_two_z_squared() {
        assert!((rdp_gaussian(2.0, 3.0).unwrap() - 3.0 / 8.0).abs() < 1e-15);
        assert_eq!(rdp_gaussian(0.0, 2.0).unwrap_err().argument(), "noise_multiplier");
        assert_eq!(rdp_gaussian(1.0, 1.0).unwrap_err().argument(), "orders");
    }

    #[test]
    fn poisson_integer_order_matches_the_direct_sum() {
        // α = 2: A_2 = (1−q)² + 2q(1−q) + q² e^{1/z²} = 1 + q²(e^{1/z²} − 1).
        let (q, z): (f64, f64) = (0.1, 1.3);
        let want = (q * q * (1.0 / (z * z)).exp_m1()).ln_1p();
        assert!(rel(rdp_poisson(q, z, 2.0).unwrap(), want) < 1e-12);
        assert!(rel(poisson_log_a_int(q, z, 2), want) < 1e-12);
        // q = 1 is the plain Gaussian.
        assert_eq!(rdp_poisson(1.0, 2.0, 4.0).unwrap(), 0.5);
    }

    #[test]
    fn poisson_fractional_order_lies_between_integer_neighbours() {
        let (q, z) = (0.01, 1.0);
        let (a, b, c) = (
            rdp_poisson(q, z, 3.0).unwrap(),
            rdp_poisson(q, z, 3.5).unwrap(),
            rdp_poisson(q, z, 4.0).unwrap(),
        );
        assert!(a <= b && b <= c, "{a} {b} {c}");
        assert!(poisson_log_a_frac(q, z, 3.5).is_finite());
    }

    /// [`wor_even_difference`] for `m = 0..=m_max`.
    fn wor_even_differences(z: f64, m_max: usize) -> Vec<f64> {
        (0..=m_max).map(|m| wor_even_difference(z, m)).collect()
    }

    /// `Δ^k F(0)` by the alternating binomial sum, in plain float64 (fine where it is well
    /// conditioned: small z and k).
    fn binomial_difference(z: f64, k: usize) -> f64 {
        let mut s = 0.0;
        for j in 0..=k {
            let c = (0..j).fold(1.0, |acc, t| acc * (k - t) as f64 / (t + 1) as f64);
            let f = ((j as f64 - 1.0) * j as f64 / (2.0 * z * z)).exp();
            s += c * if (k - j) % 2 == 0 { 1.0 } else { -1.0 } * f;
        }
        s
    }

    #[test]
    // The test spells the formula with indices, as the docs write it.
    #[allow(clippy::needless_range_loop)]
    fn even_differences_match_the_binomial_formula_where_it_is_well_conditioned() {
        for z in [0.8, 1.5, 3.0] {
            let d = wor_even_differences(z, 6);
            assert_eq!(d[0], 0.0);
            for m in 1..=6usize {
                let want = binomial_difference(z, 2 * m);
                assert!(rel(d[m], want.ln()) < 1e-10, "z={z} m={m}: {} vs {}", d[m], want.ln());
            }
        }
    }

    #[test]
    // The test spells the formula with indices, as the docs write it.
    #[allow(clippy::needless_range_loop)]
    fn even_differences_stay_exact_where_float_differencing_fails() {
        // For z → ∞, Y ~ N(−s²/2, s²) with s = 1/z is nearly N(0, s²) and e^Y − 1 ≈ Y, so
        // Δ^{2m}F(0) = E[(e^Y − 1)^{2m}] ≈ (2m−1)!! s^{2m}, with a relative correction of about
        // m³s² (from (e^y − 1)/y ≈ e^{y/2} at the modes y ≈ ±s√(2m)); float differencing gives
        // noise here.
        let z = 1e5;
        let d = wor_even_differences(z, 128);
        let mut log_dfact = 0.0; // log (2m−1)!!
        for m in 1..=128usize {
            log_dfact += ((2 * m - 1) as f64).ln();
            let approx = log_dfact - 2.0 * m as f64 * z.ln();
            assert!((d[m] - approx).abs() < 1e-3, "m={m}: {} vs {approx}", d[m]);
        }
        // The moments E|e^Y − 1|^p are log-convex in p (Lyapunov), so the second differences of
        // log Δ^{2m}F(0) in m are ≥ 0 at every z; rounding noise breaks this at once.
        for z in [0.3, 2.0, 10.0, 50.0, 300.0] {
            let d = wor_even_differences(z, 128);
            for m in 1..127 {
                assert!(d[m + 1] - 2.0 * d[m] + d[m - 1] >= -1e-9 * d[m].abs().max(1.0), "z={z} m={m}");
            }
        }
    }

    #[test]
    fn wor_order_two_matches_the_closed_form() {
        // (α−1)ε(2) = log(1 + q² min(4(e^{1/z²}−1), 2e^{1/z²})).
        let (q, z) = (0.05, 0.9);
        let e2: f64 = 1.0 / (z * z);
        let want = (q * q * (4.0 * e2.exp_m1()).min(2.0 * e2.exp())).ln_1p();
        assert!(rel(rdp_without_replacement(q, z, 2.0).unwrap(), want) < 1e-12);
        let t = WorTable::new(z, &[2.0]);
        assert!(rel(wor_log_a_int(q, z, 2, &t.even), want) < 1e-12);
    }

    #[test]
    fn wor_is_monotone_in_order_and_bounded_by_the_full_gaussian() {
        let (q, z) = (0.02, 1.0);
        let mut last = 0.0;
        for a in [2.0, 2.5, 3.0, 8.0, 64.0, 300.0] {
            let r = rdp_without_replacement(q, z, a).unwrap();
            assert!(r >= last - 1e-15, "order {a}");
            last = r;
        }
        assert_eq!(rdp_without_replacement(1.0, 2.0, 3.0).unwrap(), 3.0 / 8.0);
    }

    #[test]
    fn poisson_replace_one_bound_holds_against_exact_divergences() {
        // 1-D: P = (1−q)N(0,1) + qN(a,1), Q = (1−q)N(0,1) + qN(b,1), |a|,|b| ≤ 1/z.
        // D_α(P‖Q) = log ∫ p^α q^{1−α} / (α−1), by Simpson's rule in log space.
        fn exact(qs: f64, a: f64, b: f64, alpha: f64) -> f64 {
            let lphi = |x: f64, m: f64| -0.5 * (x - m) * (x - m) - 0.5 * (2.0 * PI).ln();
            let mix = |x: f64, m: f64| log_add((-qs).ln_1p() + lphi(x, 0.0), qs.ln() + lphi(x, m));
            let (lo, hi, n) = (-40.0, 40.0, 16000usize);
            let h = (hi - lo) / n as f64;
            let mut s = 0.0;
            for k in 0..=n {
                let x = lo + k as f64 * h;
                let w = if k == 0 || k == n { 1.0 } else if k % 2 == 1 { 4.0 } else { 2.0 };
                s += w * (alpha * mix(x, a) + (1.0 - alpha) * mix(x, b)).exp();
            }
            (s * h / 3.0).ln() / (alpha - 1.0)
        }
        let mut checked = 0;
        for &qs in &[0.01, 0.2, 0.6] {
            for &z in &[0.7, 1.5, 4.0] {
                for &alpha in &[1.5, 2.0, 4.0, 9.0] {
                    let bound = rdp_poisson_replace_one(qs, z, alpha).unwrap();
                    for &fa in &[-1.0, -0.5, 0.0, 0.5, 1.0] {
                        for &fb in &[-1.0, -0.3, 0.0, 1.0] {
                            let d = exact(qs, fa / z, fb / z, alpha);
                            assert!(d <= bound * (1.0 + 1e-9) + 1e-12, "q={qs} z={z} α={alpha} a={fa} b={fb}: {d} > {bound}");
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 3 * 3 * 4 * 20);
    }

    #[test]
    fn poisson_replace_one_is_at_least_add_remove_and_gaussian_at_full_rate() {
        let (q, z) = (0.05, 1.2);
        for a in [1.5, 2.0, 8.0] {
            assert!(rdp_poisson_replace_one(q, z, a).unwrap() >= rdp_poisson(q, z, a).unwrap());
        }
        // q = 1: replace-one sensitivity 2Δ_ar, Gaussian bound 2α/z².
        assert!(rel(rdp_poisson_replace_one(1.0, 2.0, 3.0).unwrap(), 6.0 / 4.0) < 1e-12);
    }

    #[test]
    fn public_batch_is_the_mixture_of_gaussian_and_nothing() {
        // e^{(α−1)ε} = 1 − q + q e^{(α−1)α/(2z²)}: check against the two cases it mixes.
        for (q, z) in [(0.01, 1.0), (0.2, 3.0), (0.5, 0.7), (1e-4, 40.0)] {
            for a in [1.5, 2.0, 7.5, 64.0, 1024.0] {
                let r = rdp_public_batch(q, z, a).unwrap();
                let g = a / (2.0 * z * z);
                let want = ((1.0 - q) + q * ((a - 1.0) * g).exp()).ln() / (a - 1.0);
                if want.is_finite() {
                    // the naive log(1 + tiny) above keeps only ~1e-16 / tiny of relative precision
                    let tol = 1e-12 + 1e-15 / (q * (a - 1.0) * g).min(1.0);
                    assert!(rel(r, want) < tol, "q={q} z={z} a={a}: {r} vs {want}");
                }
                // Between "never in the batch" (0) and the unsampled Gaussian, and at most q·g
                // below it: amplification without secrecy is only the chance of not being drawn.
                assert!(r > 0.0 && r <= g * (1.0 + 1e-12), "q={q} z={z} a={a}");
                assert!(r >= g + q.ln() / (a - 1.0) - 1e-12, "q={q} z={z} a={a}");
            }
        }
        assert_eq!(rdp_public_batch(1.0, 2.0, 3.0).unwrap(), 3.0 / 8.0);
        // Overflow-free for huge exponents: ε → α/(2z²) + log(q)/(α−1).
        let r = rdp_public_batch(0.1, 0.05, 1024.0).unwrap();
        assert!(rel(r, 1024.0 / (2.0 * 0.0025) + 0.1f64.ln() / 1023.0) < 1e-12);
        assert_eq!(Scheme::parse("public_batch").unwrap(), Scheme::PublicBatch);
        assert_eq!(Scheme::PublicBatch.name(), "public_batch");
    }

    #[test]
    fn public_batch_costs_more_than_a_hidden_batch() {
        // Revealing who was sampled can only help the adversary: for the parameters SteFFLe uses
        // the public-batch account is far above WBK's hidden-batch one.
        let (q, z, t) = (256.0 / 11306.0, 10.66, 1800u64);
        let orders = default_orders();
        let hidden = epsilon_for(z, q, t, 1.0 / 11306f64.powi(2), Scheme::WithoutReplacement, &orders).unwrap().0;
        let public = epsilon_for(z, q, t, 1.0 / 11306f64.powi(2), Scheme::PublicBatch, &orders).unwrap().0;
        assert!(hidden < 1.01 && public > 3.0 * hidden, "hidden {hidden}, public {public}");
    }

    #[test]
    fn rdp_step_dispatches_to_each_schemes_bound() {
        let (q, z) = (0.03, 1.7);
        for a in [1.5, 2.0, 7.5, 64.0, 300.0] {
            assert_eq!(rdp_step(Scheme::WithoutReplacement, q, z, a), rdp_without_replacement(q, z, a));
            assert_eq!(rdp_step(Scheme::Poisson, q, z, a), rdp_poisson(q, z, a));
            assert_eq!(rdp_step(Scheme::PoissonReplaceOne, q, z, a), rdp_poisson_replace_one(q, z, a));
            assert_eq!(rdp_step(Scheme::PublicBatch, q, z, a), rdp_public_batch(q, z, a));
            assert_eq!(rdp_step(Scheme::FullBatch, 1.0, z, a), rdp_gaussian(z, a));
        }
        assert_eq!(rdp_step(Scheme::FullBatch, 0.5, z, 2.0).unwrap_err().argument(), "sample_rate");
        assert_eq!(rdp_step(Scheme::Poisson, q, 0.0, 2.0).unwrap_err().argument(), "noise_multiplier");
        assert_eq!(rdp_step(Scheme::Poisson, q, z, 1.0).unwrap_err().argument(), "orders");
    }
}
