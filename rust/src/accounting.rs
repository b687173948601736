//! Rényi-DP accountant for the Gaussian mechanism under the three batch schemes pfair uses.
//!
//! Units: a *noise multiplier* `z` is `noise std / L2 sensitivity`, where the sensitivity is
//! measured under the adjacency each function names:
//!
//! * [`Scheme::WithoutReplacement`] and [`Scheme::FullBatch`]: **replace-one** sensitivity (one
//!   record's `s` replaced; the record stays in the data set), the convention of
//!   `crate::sensitivity`, so `z = σ / Δ_replace`.
//! * [`Scheme::Poisson`]: **add/remove-one** sensitivity (the largest norm of one record's
//!   contribution). This is the textbook sampled-Gaussian contract, kept so it can be checked
//!   against other libraries; it is *not* an accountant for pfair's adjacency.
//! * [`Scheme::PoissonReplaceOne`]: Poisson sampling under replace-one adjacency, with `z`
//!   measured against the *add/remove* sensitivity `Δ_ar` (max norm of one record's contribution,
//!   so `‖u − u'‖ ≤ 2 Δ_ar`). See [`rdp_poisson_replace_one`] and `docs/accounting.md`.
//!
//! Every RDP value is a per-step Rényi divergence bound `ε(α)` at order `α > 1`; composition adds
//! them (Mironov 2017, Prop. 1); the (ε, δ) conversion is Balle et al. 2020, Thm. 21.
//! Numerics: all sums are done in log space. The WOR bound's forward differences are evaluated
//! exactly (as Gaussian integrals, see [`wor_even_difference`]), not by float64 differencing.

use std::f64::consts::{LN_2, PI};
use std::fmt;

/// Which batch scheme a mechanism's steps use (and hence which RDP bound applies).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Fixed-size batches of `m = q n` records drawn uniformly without replacement; replace-one
    /// adjacency (Wang, Balle, Kasiviswanathan 2019).
    WithoutReplacement,
    /// Poisson sampling with rate `q`; add/remove-one adjacency (Mironov, Talwar, Zhang 2019).
    Poisson,
    /// Poisson sampling with rate `q`; replace-one adjacency via [`rdp_poisson_replace_one`].
    PoissonReplaceOne,
    /// Every record in every step (`q = 1`); replace-one adjacency.
    FullBatch,
    /// Each record enters a step's batch with probability `q` (independently across steps), and
    /// WHO is in the batch is public: the rest of the message reveals it. Replace-one adjacency,
    /// no secrecy of the sample assumed. See [`rdp_public_batch`].
    PublicBatch,
}

impl Scheme {
    /// Parses the public names `"without_replacement"`, `"poisson"`, `"poisson_replace_one"`,
    /// `"full_batch"`, `"public_batch"`.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "without_replacement" => Ok(Scheme::WithoutReplacement),
            "poisson" => Ok(Scheme::Poisson),
            "poisson_replace_one" => Ok(Scheme::PoissonReplaceOne),
            "full_batch" => Ok(Scheme::FullBatch),
            "public_batch" => Ok(Scheme::PublicBatch),
            other => Err(AccountingError::UnknownSampling(other.to_string())),
        }
    }

    /// The public name (inverse of [`Scheme::parse`]).
    pub fn name(&self) -> &'static str {
        match self {
            Scheme::WithoutReplacement => "without_replacement",
            Scheme::Poisson => "poisson",
            Scheme::PoissonReplaceOne => "poisson_replace_one",
            Scheme::FullBatch => "full_batch",
            Scheme::PublicBatch => "public_batch",
        }
    }
}

/// Bad input to the accountant, or a calibration that cannot be met. Never a panic.
#[derive(Clone, Debug, PartialEq)]
pub enum AccountingError {
    /// `sample_rate` must lie in (0, 1].
    SampleRate(f64),
    /// `full_batch` needs `sample_rate == 1`.
    FullBatchRate(f64),
    /// `noise_multiplier` must be finite and > 0.
    NoiseMultiplier(f64),
    /// `delta` must lie in (0, 1).
    Delta(f64),
    /// `epsilon` must be finite and > 0.
    Epsilon(f64),
    /// `steps` must be ≥ 1.
    Steps,
    /// Every RDP order must be finite and > 1.
    Order(f64),
    /// The order list is empty.
    NoOrders,
    /// `orders` and `rdp` have different lengths.
    LengthMismatch { orders: usize, rdp: usize },
    /// An RDP value is NaN.
    RdpValue(f64),
    /// Unknown sampling scheme name.
    UnknownSampling(String),
    /// Even the largest noise multiplier of the bracket does not reach the target ε.
    Unreachable { epsilon: f64, z_max: f64, epsilon_at_z_max: f64 },
    /// Even the smallest noise multiplier of the bracket already meets the target ε.
    TargetTooLoose { epsilon: f64, z_min: f64, epsilon_at_z_min: f64 },
    /// Bisection ended without an ε within the tolerance (ε(z) not continuous enough).
    NotConverged { epsilon: f64, best: f64 },
}

impl AccountingError {
    /// The public argument the error is about (used for Python `ValueError` messages).
    pub fn argument(&self) -> &'static str {
        match self {
            AccountingError::SampleRate(_) | AccountingError::FullBatchRate(_) => "sample_rate",
            AccountingError::NoiseMultiplier(_) => "noise_multiplier",
            AccountingError::Delta(_) => "delta",
            AccountingError::Epsilon(_) => "epsilon",
            AccountingError::Steps => "steps",
            AccountingError::Order(_) | AccountingError::NoOrders => "orders",
            AccountingError::LengthMismatch { .. } | AccountingError::RdpValue(_) => "rdp",
            AccountingError::UnknownSampling(_) => "sampling",
            AccountingError::Unreachable { .. }
            | AccountingError::TargetTooLoose { .. }
            | AccountingError::NotConverged { .. } => "epsilon",
        }
    }
}

impl fmt::Display for AccountingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccountingError::SampleRate(q) => {
                write!(f, "sample_rate must be in (0, 1] (batch size / silo size); got {q}")
            }
            AccountingError::FullBatchRate(q) => write!(
                f,
                "sample_rate must be 1 when sampling='full_batch'; got {q} (use 'without_replacement' for mini-batches)"
            ),
            AccountingError::NoiseMultiplier(z) => write!(
                f,
                "noise_multiplier must be finite and > 0 (noise std / L2 sensitivity); got {z}"
            ),
            AccountingError::Delta(d) => write!(f, "delta must be in (0, 1), e.g. 1/n^2; got {d}"),
            AccountingError::Epsilon(e) => write!(f, "epsilon must be finite and > 0; got {e}"),
            AccountingError::Steps => write!(f, "steps must be an integer >= 1; got 0"),
            AccountingError::Order(a) => {
                write!(f, "every RDP order must be finite and > 1; got {a}")
            }
            AccountingError::NoOrders => write!(f, "orders must not be empty"),
            AccountingError::LengthMismatch { orders, rdp } => write!(
                f,
                "rdp must have one value per order; got {rdp} values for {orders} orders"
            ),
            AccountingError::RdpValue(r) => write!(f, "rdp values must not be NaN; got {r}"),
            AccountingError::UnknownSampling(s) => write!(
                f,
                "sampling must be one of 'without_replacement', 'poisson', 'poisson_replace_one', 'full_batch', 'public_batch'; got {s:?}"
            ),
            AccountingError::Unreachable { epsilon, z_max, epsilon_at_z_max } => write!(
                f,
                "epsilon={epsilon} is unreachable: even noise_multiplier={z_max:e} gives epsilon={epsilon_at_z_max}; raise epsilon or delta, or lower steps or sample_rate"
            ),
            AccountingError::TargetTooLoose { epsilon, z_min, epsilon_at_z_min } => write!(
                f,
                "epsilon={epsilon} is met even by noise_multiplier={z_min:e} (epsilon={epsilon_at_z_min}); such a loose target is outside the calibration bracket"
            ),
            AccountingError::NotConverged { epsilon, best } => write!(
                f,
                "calibration for epsilon={epsilon} did not reach the 2% tolerance (best feasible epsilon {best})"
            ),
        }
    }
}

impl std::error::Error for AccountingError {}

/// Result type of the accountant.
pub type Result<T> = std::result::Result<T, AccountingError>;

// ---------------------------------------------------------------------------------------------
// Validation (one place, used by every public function).

fn check_rate(q: f64) -> Result<()> {
    if q.is_finite() && q > 0.0 && q <= 1.0 {
        Ok(())
    } else {
        Err(AccountingError::SampleRate(q))
    }
}

fn check_z(z: f64) -> Result<()> {
    if z.is_finite() && z > 0.0 {
        Ok(())
    } else {
        Err(AccountingError::NoiseMultiplier(z))
    }
}

fn check_order(alpha: f64) -> Result<()> {
    if alpha.is_finite() && alpha > 1.0 {
        Ok(())
    } else {
        Err(AccountingError::Order(alpha))
    }
}

fn check_orders(orders: &[f64]) -> Result<()> {
    if orders.is_empty() {
        return Err(AccountingError::NoOrders);
    }
    orders.iter().try_for_each(|&a| check_order(a))
}

fn check_delta(delta: f64) -> Result<()> {
    if delta.is_finite() && delta > 0.0 && delta < 1.0 {
        Ok(())
    } else {
        Err(AccountingError::Delta(delta))
    }
}

fn check_epsilon(eps: f64) -> Result<()> {
    if eps.is_finite() && eps > 0.0 {
        Ok(())
    } else {
        Err(AccountingError::Epsilon(eps))
    }
}

fn check_scheme_rate(scheme: Scheme, q: f64) -> Result<()> {
    check_rate(q)?;
    if scheme == Scheme::FullBatch && q != 1.0 {
        return Err(AccountingError::FullBatchRate(q));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Orders.

/// The default RDP orders: dp-accounting's `DEFAULT_RDP_ORDERS` (1.1..10.9 by 0.1, 11..63,
/// 128, 256, 512, 1024) extended with half-integers 11.5..19.5 and the integers 64..120 by 8,
/// 160, 192, 384, 768. Orders only ever tighten the bound (ε is a minimum over orders).
pub fn default_orders() -> Vec<f64> {
    let mut o: Vec<f64> = (1..100).map(|x| 1.0 + x as f64 / 10.0).collect();
    o.extend((11..64).map(|x| x as f64));
    o.extend((11..20).map(|x| x as f64 + 0.5));
    o.extend((8..16).map(|x| (8 * x) as f64));
    o.extend([128.0, 160.0, 192.0, 256.0, 384.0, 512.0, 768.0, 1024.0]);
    o.sort_by(|a, b| a.total_cmp(b));
    o.dedup();
    o
}

// ---------------------------------------------------------------------------------------------
// Log-space helpers.

/// `log(e^x + e^y)`.
#[inline]
fn log_add(x: f64, y: f64) -> f64 {
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
fn log_erfc(x: f64) -> f64 {
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
    log_a / (alpha - 1.0)
}

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
// Events and composition.

/// One recorded mechanism: `steps` releases of a Gaussian with noise multiplier `z` on batches
/// drawn by `scheme` at rate `q`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Event {
    pub scheme: Scheme,
    pub q: f64,
    pub z: f64,
    pub steps: u64,
}

impl Event {
    /// Validates the event's parameters.
    pub fn check(&self) -> Result<()> {
        check_scheme_rate(self.scheme, self.q)?;
        check_z(self.z)?;
        if self.steps == 0 {
            return Err(AccountingError::Steps);
        }
        Ok(())
    }
}

/// Total RDP of `event.steps` adaptive compositions at each order (Mironov 2017, Prop. 1:
/// RDP adds up under composition).
pub fn rdp_curve(event: &Event, orders: &[f64]) -> Result<Vec<f64>> {
    event.check()?;
    check_orders(orders)?;
    let (q, z, t) = (event.q, event.z, event.steps as f64);
    let per_step: Vec<f64> = match event.scheme {
        Scheme::FullBatch => orders.iter().map(|a| a / (2.0 * z * z)).collect(),
        Scheme::PublicBatch => orders.iter().map(|&a| rdp_public_batch_unchecked(q, z, a)).collect(),
        Scheme::Poisson => orders.iter().map(|&a| rdp_poisson_unchecked(q, z, a)).collect(),
        Scheme::PoissonReplaceOne => {
            orders.iter().map(|&a| rdp_poisson_replace_one_unchecked(q, z, a)).collect()
        }
        Scheme::WithoutReplacement => {
            let table = WorTable::new(z, orders);
            orders.iter().map(|&a| table.rdp(q, a)).collect()
        }
    };
    Ok(per_step.into_iter().map(|r| r * t).collect())
}

/// Total RDP of heterogeneous events (sum over events of [`rdp_curve`]).
pub fn rdp_composed(events: &[Event], orders: &[f64]) -> Result<Vec<f64>> {
    check_orders(orders)?;
    let mut total = vec![0.0; orders.len()];
    for e in events {
        for (acc, r) in total.iter_mut().zip(rdp_curve(e, orders)?) {
            *acc += r;
        }
    }
    Ok(total)
}

// ---------------------------------------------------------------------------------------------
// Conversion to (ε, δ).

fn check_curve(orders: &[f64], rdp: &[f64]) -> Result<()> {
    check_orders(orders)?;
    if orders.len() != rdp.len() {
        return Err(AccountingError::LengthMismatch { orders: orders.len(), rdp: rdp.len() });
    }
    if let Some(r) = rdp.iter().find(|r| r.is_nan()) {
        return Err(AccountingError::RdpValue(*r));
    }
    Ok(())
}

/// Smallest ε over the orders such that the RDP curve implies (ε, δ)-DP, and the order attaining
/// it. Per order (Balle, Barthe, Gaboardi, Hsu, Sato 2020, "Hypothesis testing interpretations
/// and Rényi DP", Thm. 21): `ε = r + log(1 − 1/α) − log(δ α)/(α − 1)` for `α > 1.01` (the formula
/// is unstable nearer 1); `ε = 0` when `δ² > 1 − e^{−r}` (then `δ ≥ TV ≥ …`, the KL/Pinsker-type
/// bound `δ ≤ (1 − e^{−KL})^{1/2}` with `KL ≤ r`); `+∞` otherwise. Same rules, order of
/// evaluation and tie-breaking (first minimum) as dp-accounting's `compute_epsilon`.
pub fn epsilon_from_rdp(orders: &[f64], rdp: &[f64], delta: f64) -> Result<(f64, f64)> {
    check_curve(orders, rdp)?;
    check_delta(delta)?;
    let mut best = (f64::INFINITY, orders[0]);
    for (&a, &r) in orders.iter().zip(rdp) {
        let eps = epsilon_at_order(a, r, delta);
        if eps < best.0 {
            best = (eps, a);
        }
    }
    Ok((best.0.max(0.0), best.1))
}

/// The ε that order `a` with total RDP `r` certifies at `delta` (one term of
/// [`epsilon_from_rdp`]'s minimum).
#[inline]
fn epsilon_at_order(a: f64, r: f64, delta: f64) -> f64 {
    if r < 0.0 || delta * delta + (-r).exp_m1() > 0.0 {
        0.0
    } else if a > 1.01 {
        r + (-1.0 / a).ln_1p() - (delta * a).ln() / (a - 1.0)
    } else {
        f64::INFINITY
    }
}

/// Orders without improvement after which [`epsilon_scan`] stops.
const SCAN_PATIENCE: usize = 16;

/// ε after `steps` steps at noise multiplier `z`, as [`epsilon_for`], but scanning the ascending
/// `orders` and stopping once ε(α) has not improved for [`SCAN_PATIENCE`] orders (the RDP term
/// grows with α while the conversion term shrinks, so ε(α) falls, then rises). The WOR
/// differences are computed only as far as the scan goes, which is what makes calibration fast.
/// A minimum over fewer orders is still a valid ε, and never below the full one, so a noise
/// multiplier calibrated with it never under-noises; `test_noise_multiplier_for_contract` checks
/// that it stays within the 2% contract of the full ε.
fn epsilon_scan(z: f64, q: f64, steps: u64, delta: f64, scheme: Scheme, orders: &[f64]) -> f64 {
    let t = steps as f64;
    let mut wor = (scheme == Scheme::WithoutReplacement).then(|| WorTable::new(z, &[]));
    let (mut best, mut since) = (f64::INFINITY, 0);
    for &a in orders {
        let per_step = match scheme {
            Scheme::FullBatch => a / (2.0 * z * z),
            Scheme::PublicBatch => rdp_public_batch_unchecked(q, z, a),
            Scheme::Poisson => rdp_poisson_unchecked(q, z, a),
            Scheme::PoissonReplaceOne => rdp_poisson_replace_one_unchecked(q, z, a),
            Scheme::WithoutReplacement => {
                let table = wor.as_mut().expect("table exists for WOR");
                table.ensure(a);
                table.rdp(q, a)
            }
        };
        let eps = epsilon_at_order(a, per_step * t, delta);
        if eps < best {
            (best, since) = (eps, 0);
        } else {
            since += 1;
            if since >= SCAN_PATIENCE {
                break;
            }
        }
    }
    best.max(0.0)
}

/// Smallest δ over the orders for a given ε, and the order attaining it (Balle et al. 2020,
/// Thm. 21 solved for δ: `log δ = (α−1)(r − ε + log(1 − 1/α)) − log α`, capped by the KL bound
/// `δ ≤ (1 − e^{−r})^{1/2}`), as dp-accounting's `compute_delta`. Result ≤ 1.
pub fn delta_from_rdp(orders: &[f64], rdp: &[f64], epsilon: f64) -> Result<(f64, f64)> {
    check_curve(orders, rdp)?;
    if !(epsilon.is_finite() && epsilon >= 0.0) {
        return Err(AccountingError::Epsilon(epsilon));
    }
    let mut best = (f64::INFINITY, orders[0]);
    for (&a, &r) in orders.iter().zip(rdp) {
        let mut log_delta =
            if r <= 0.0 { f64::NEG_INFINITY } else { 0.5 * (-(-r).exp()).ln_1p() };
        if a > 1.01 {
            let bound = (a - 1.0) * (r - epsilon + (-1.0 / a).ln_1p()) - a.ln();
            log_delta = log_delta.min(bound);
        }
        if log_delta < best.0 {
            best = (log_delta, a);
        }
    }
    Ok((best.0.exp().min(1.0), best.1))
}

/// ε (and optimal order) after `steps` steps of one scheme at rate `q`, noise multiplier `z`.
pub fn epsilon_for(z: f64, q: f64, steps: u64, delta: f64, scheme: Scheme, orders: &[f64]) -> Result<(f64, f64)> {
    check_delta(delta)?;
    let rdp = rdp_curve(&Event { scheme, q, z, steps }, orders)?;
    epsilon_from_rdp(orders, &rdp, delta)
}

/// δ (and optimal order) after `steps` steps of one scheme at rate `q`, noise multiplier `z`.
pub fn delta_for(z: f64, q: f64, steps: u64, epsilon: f64, scheme: Scheme, orders: &[f64]) -> Result<(f64, f64)> {
    check_epsilon(epsilon)?;
    let rdp = rdp_curve(&Event { scheme, q, z, steps }, orders)?;
    delta_from_rdp(orders, &rdp, epsilon)
}

/// Calibration bracket for [`noise_multiplier_for`]: `z ∈ [Z_MIN, Z_MAX]`.
pub const Z_MIN: f64 = 1e-3;
/// Upper end of the calibration bracket.
pub const Z_MAX: f64 = 1e6;
/// Calibration stops once `ε(z) ≥ (1 − CALIBRATION_TOL) · target` (contract: within 2%).
pub const CALIBRATION_TOL: f64 = 0.005;

/// The smallest-found noise multiplier `z` whose ε (at `delta`, over `steps` steps of `scheme` at
/// rate `q`, default orders) is at most `epsilon` and at least `(1 − 0.005)·epsilon`.
///
/// Method: ε(z) is non-increasing in `z`. Starting at `z = 1`, the bracket is doubled (or halved)
/// until it straddles the target inside `[Z_MIN, Z_MAX] = [1e-3, 1e6]`, then narrowed by
/// safeguarded secant steps in (log z, log ε), always keeping `hi` feasible (`ε(hi) ≤ epsilon`)
/// — so the returned value never under-noises. During the search ε is evaluated by scanning the
/// orders upwards and stopping past the minimum ([`epsilon_scan`]), which can only over-state ε. Errors: [`AccountingError::Unreachable`] if `ε(Z_MAX) > epsilon`,
/// [`AccountingError::TargetTooLoose`] if `ε(Z_MIN) ≤ epsilon`.
pub fn noise_multiplier_for(epsilon: f64, delta: f64, q: f64, steps: u64, scheme: Scheme) -> Result<f64> {
    noise_multiplier_for_orders(epsilon, delta, q, steps, scheme, &default_orders())
}

/// [`noise_multiplier_for`] with an explicit order list.
pub fn noise_multiplier_for_orders(
    epsilon: f64,
    delta: f64,
    q: f64,
    steps: u64,
    scheme: Scheme,
    orders: &[f64],
) -> Result<f64> {
    check_epsilon(epsilon)?;
    check_delta(delta)?;
    check_scheme_rate(scheme, q)?;
    if steps == 0 {
        return Err(AccountingError::Steps);
    }
    check_orders(orders)?;
    let mut sorted = orders.to_vec();
    sorted.sort_by(f64::total_cmp);
    let eps_at = |z: f64| -> Result<f64> { Ok(epsilon_scan(z, q, steps, delta, scheme, &sorted)) };

    let (mut lo, mut hi);
    let e1 = eps_at(1.0)?;
    let (mut e_lo, mut e_hi);
    if e1 > epsilon {
        (lo, e_lo, hi) = (1.0, e1, 2.0);
        loop {
            e_hi = eps_at(hi)?;
            if e_hi <= epsilon {
                break;
            }
            if hi >= Z_MAX {
                return Err(AccountingError::Unreachable { epsilon, z_max: Z_MAX, epsilon_at_z_max: e_hi });
            }
            (lo, e_lo) = (hi, e_hi);
            hi = (hi * 2.0).min(Z_MAX);
        }
    } else {
        (hi, e_hi, lo) = (1.0, e1, 0.5);
        loop {
            e_lo = eps_at(lo)?;
            if e_lo > epsilon {
                break;
            }
            if lo <= Z_MIN {
                return Err(AccountingError::TargetTooLoose { epsilon, z_min: Z_MIN, epsilon_at_z_min: e_lo });
            }
            (hi, e_hi) = (lo, e_lo);
            lo = (lo / 2.0).max(Z_MIN);
        }
    }
    // Invariant: ε(lo) > target ≥ ε(hi). ε(z) is close to a power law, so a secant step in
    // (log z, log ε) aimed at the middle of the accepted band usually lands in one or two steps;
    // it is kept away from the bracket's ends, and every third step is a plain geometric
    // bisection, so the bracket always shrinks.
    let goal = (1.0 - 0.5 * CALIBRATION_TOL) * epsilon;
    for step in 0..200 {
        if e_hi >= (1.0 - CALIBRATION_TOL) * epsilon {
            return Ok(hi);
        }
        let (a, b) = (lo.ln(), hi.ln());
        let mut u = 0.5 * (a + b);
        if step % 3 != 2 && e_lo.is_finite() && e_hi > 0.0 {
            let (fa, fb) = ((e_lo / goal).ln(), (e_hi / goal).ln());
            let w = b - a;
            u = (a + fa * w / (fa - fb)).clamp(a + 0.02 * w, b - 0.02 * w);
        }
        let mid = u.exp();
        if mid <= lo || mid >= hi {
            break;
        }
        let e_mid = eps_at(mid)?;
        if e_mid <= epsilon {
            (hi, e_hi) = (mid, e_mid);
        } else {
            (lo, e_lo) = (mid, e_mid);
        }
    }
    if e_hi >= 0.98 * epsilon {
        Ok(hi)
    } else {
        Err(AccountingError::NotConverged { epsilon, best: e_hi })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(a: f64, b: f64) -> f64 {
        (a - b).abs() / b.abs().max(1e-300)
    }

    #[test]
    fn default_orders_are_sorted_valid_and_contain_dp_accounting_defaults() {
        let o = default_orders();
        assert!(o.windows(2).all(|w| w[0] < w[1]));
        assert!(o.iter().all(|&a| a > 1.0 && a.is_finite()));
        for a in [1.1, 2.5, 10.9, 11.0, 63.0, 128.0, 256.0, 512.0, 1024.0] {
            assert!(o.iter().any(|&b| (a - b).abs() < 1e-12), "missing order {a}");
        }
    }

    #[test]
    fn scheme_names_round_trip_and_unknown_is_an_error() {
        for s in [Scheme::WithoutReplacement, Scheme::Poisson, Scheme::PoissonReplaceOne, Scheme::FullBatch] {
            assert_eq!(Scheme::parse(s.name()).unwrap(), s);
        }
        let e = Scheme::parse("uniform").unwrap_err();
        assert_eq!(e.argument(), "sampling");
        assert!(e.to_string().contains("uniform"));
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
    fn composition_adds_steps_and_events() {
        let o = [2.0, 4.5, 32.0];
        let e1 = Event { scheme: Scheme::WithoutReplacement, q: 0.01, z: 1.1, steps: 10 };
        let e2 = Event { scheme: Scheme::FullBatch, q: 1.0, z: 5.0, steps: 1 };
        let one = rdp_curve(&Event { steps: 1, ..e1 }, &o).unwrap();
        let ten = rdp_curve(&e1, &o).unwrap();
        for (a, b) in one.iter().zip(&ten) {
            assert!(rel(*b, 10.0 * a) < 1e-12);
        }
        let both = rdp_composed(&[e1, e2], &o).unwrap();
        for (i, a) in o.iter().enumerate() {
            assert!(rel(both[i], ten[i] + a / 50.0) < 1e-12);
        }
        assert_eq!(rdp_composed(&[], &o).unwrap(), vec![0.0; 3]);
    }

    #[test]
    fn epsilon_from_rdp_follows_balle_et_al() {
        let (o, r, d): ([f64; 2], [f64; 2], f64) = ([2.0, 10.0], [0.5, 1.0], 1e-5);
        let want = (0..2)
            .map(|i| r[i] + (1.0 - 1.0 / o[i]).ln() - (d * o[i]).ln() / (o[i] - 1.0))
            .fold(f64::INFINITY, f64::min);
        let (eps, order) = epsilon_from_rdp(&o, &r, d).unwrap();
        assert!(rel(eps, want) < 1e-12);
        assert_eq!(order, 10.0);
        // Tiny RDP: the KL bound gives ε = 0.
        assert_eq!(epsilon_from_rdp(&[2.0], &[1e-12], 1e-3).unwrap().0, 0.0);
        assert_eq!(epsilon_from_rdp(&[2.0], &[1.0, 2.0], 1e-3).unwrap_err().argument(), "rdp");
        assert_eq!(epsilon_from_rdp(&[2.0], &[f64::NAN], 1e-3).unwrap_err().argument(), "rdp");
    }

    #[test]
    fn delta_from_rdp_inverts_epsilon_from_rdp() {
        let o = default_orders();
        let r = rdp_curve(&Event { scheme: Scheme::Poisson, q: 0.01, z: 1.0, steps: 1000 }, &o).unwrap();
        let (eps, a) = epsilon_from_rdp(&o, &r, 1e-6).unwrap();
        let (delta, b) = delta_from_rdp(&o, &r, eps).unwrap();
        assert_eq!(a, b);
        assert!(rel(delta, 1e-6) < 1e-9);
        assert_eq!(delta_from_rdp(&[2.0], &[f64::INFINITY], 1.0).unwrap().0, 1.0);
    }

    #[test]
    fn epsilon_for_and_delta_for_are_consistent() {
        let o = default_orders();
        for s in [Scheme::WithoutReplacement, Scheme::Poisson, Scheme::PoissonReplaceOne] {
            let (eps, _) = epsilon_for(1.2, 0.02, 500, 1e-5, s, &o).unwrap();
            let (d, _) = delta_for(1.2, 0.02, 500, eps, s, &o).unwrap();
            assert!(rel(d, 1e-5) < 1e-8, "{s:?}");
        }
        let (eps, _) = epsilon_for(3.0, 1.0, 10, 1e-5, Scheme::FullBatch, &o).unwrap();
        assert!(eps > 0.0);
    }

    #[test]
    fn noise_multiplier_for_meets_the_target_from_below_within_tolerance() {
        for s in [Scheme::WithoutReplacement, Scheme::Poisson, Scheme::PoissonReplaceOne, Scheme::FullBatch] {
            let q = if s == Scheme::FullBatch { 1.0 } else { 256.0 / 12211.0 };
            for target in [0.5, 1.0, 9.0] {
                let z = noise_multiplier_for(target, 1e-6, q, 1920, s).unwrap();
                let (eps, _) = epsilon_for(z, q, 1920, 1e-6, s, &default_orders()).unwrap();
                assert!(eps <= target && eps >= 0.98 * target, "{s:?} {target}: z={z} eps={eps}");
            }
        }
    }

    #[test]
    fn noise_multiplier_for_fails_clearly_outside_the_bracket() {
        // ε so small that even z = 1e6 cannot reach it.
        let e = noise_multiplier_for(1e-9, 1e-10, 1.0, 1_000_000, Scheme::FullBatch).unwrap_err();
        assert!(matches!(e, AccountingError::Unreachable { .. }), "{e}");
        // ε so large that z = 1e-3 already meets it.
        let e = noise_multiplier_for(1e9, 0.5, 1e-4, 1, Scheme::Poisson).unwrap_err();
        assert!(matches!(e, AccountingError::TargetTooLoose { .. }), "{e}");
    }

    #[test]
    fn every_bad_input_is_an_error_naming_its_argument() {
        let o = default_orders();
        let s = Scheme::WithoutReplacement;
        let cases: Vec<(AccountingError, &str)> = vec![
            (epsilon_for(1.0, 0.0, 1, 1e-5, s, &o).unwrap_err(), "sample_rate"),
            (epsilon_for(1.0, 1.5, 1, 1e-5, s, &o).unwrap_err(), "sample_rate"),
            (epsilon_for(1.0, f64::NAN, 1, 1e-5, s, &o).unwrap_err(), "sample_rate"),
            (epsilon_for(1.0, 0.5, 1, 1e-5, Scheme::FullBatch, &o).unwrap_err(), "sample_rate"),
            (epsilon_for(0.0, 0.1, 1, 1e-5, s, &o).unwrap_err(), "noise_multiplier"),
            (epsilon_for(-1.0, 0.1, 1, 1e-5, s, &o).unwrap_err(), "noise_multiplier"),
            (epsilon_for(f64::NAN, 0.1, 1, 1e-5, s, &o).unwrap_err(), "noise_multiplier"),
            (epsilon_for(1.0, 0.1, 0, 1e-5, s, &o).unwrap_err(), "steps"),
            (epsilon_for(1.0, 0.1, 1, 0.0, s, &o).unwrap_err(), "delta"),
            (epsilon_for(1.0, 0.1, 1, 1.0, s, &o).unwrap_err(), "delta"),
            (delta_for(1.0, 0.1, 1, 0.0, s, &o).unwrap_err(), "epsilon"),
            (delta_for(1.0, 0.1, 1, -1.0, s, &o).unwrap_err(), "epsilon"),
            (noise_multiplier_for(0.0, 1e-5, 0.1, 1, s).unwrap_err(), "epsilon"),
            (noise_multiplier_for(f64::INFINITY, 1e-5, 0.1, 1, s).unwrap_err(), "epsilon"),
            (noise_multiplier_for(1.0, 2.0, 0.1, 1, s).unwrap_err(), "delta"),
            (noise_multiplier_for(1.0, 1e-5, 0.1, 0, s).unwrap_err(), "steps"),
            (epsilon_for(1.0, 0.1, 1, 1e-5, s, &[]).unwrap_err(), "orders"),
            (epsilon_for(1.0, 0.1, 1, 1e-5, s, &[0.5]).unwrap_err(), "orders"),
            (rdp_poisson(0.0, 1.0, 2.0).unwrap_err(), "sample_rate"),
            (rdp_without_replacement(0.1, 0.0, 2.0).unwrap_err(), "noise_multiplier"),
            (rdp_poisson_replace_one(0.1, 1.0, f64::INFINITY).unwrap_err(), "orders"),
        ];
        for (e, arg) in cases {
            assert_eq!(e.argument(), arg, "{e}");
            assert!(!e.to_string().is_empty());
        }
    }
}
