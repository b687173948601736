//! Privacy-loss-distribution (PLD) accountant for hidden batches (record mode).
//!
//! A mechanism is described by a *dominating pair* (P, Q) of distributions on ℝ: for every pair
//! of neighbouring data sets and every `ε`, `H_{e^ε}(M(D) ‖ M(D')) ≤ H_{e^ε}(P ‖ Q)`, with the
//! hockey-stick divergence `H_γ(P‖Q) = sup_A P(A) − γ Q(A)`. Dominating pairs compose: the
//! product of the pairs of T adaptively composed mechanisms dominates the composition (Zhu, Dong,
//! Wang 2022, "Optimal accounting of differential privacy via characteristic function").
//! In noise-std units (`μ = 1/z`):
//!
//! * Poisson sampling, add/remove (remove direction; the add direction swaps P and Q):
//!   `P = (1−q)N(0,1) + qN(μ,1)`, `Q = N(0,1)` (ZDW 2022; `z` against the add/remove
//!   sensitivity).
//! * Poisson sampling, replace-one with the record present in both sets (pfair's adjacency), `z`
//!   against the add/remove sensitivity Δ (contributions `u, u'` with `‖u‖, ‖u'‖ ≤ Δ`):
//!   `P = (1−q)N(0,1) + qN(−μ,1)`, `Q = (1−q)N(0,1) + qN(μ,1)` (ZDW 2022, substitution
//!   relation; dp-accounting's `REPLACE_ONE` for Poisson-sampled Gaussians uses the same pair).
//! * Fixed-size batches without replacement, replace-one, `z` against the replace-one
//!   sensitivity: `P = (1−q)N(0,1) + qN(μ,1)`, `Q = N(0,1)` and its swap (ZDW 2022, for
//!   sampling without replacement under substitution, from the coupling of Balle, Barthe,
//!   Gaboardi 2018, "Privacy amplification by subsampling: tight analyses via couplings and
//!   divergences"). The pair is realised by data in which every other record contributes 0 and
//!   the replaced record contributes Δ or 0, so it is also a lower bound.
//!
//! Discretisation ("connect the dots", Doroshenko, Ghazi, Kamath, Kumar, Manurangsi 2022,
//! "Connect the dots: tighter discrete approximations of privacy loss distributions"): the
//! privacy profile `δ(ε)` of a pair is convex in `e^ε`. On a grid `ε_j = j·h` the discrete PLD
//! whose profile is the chord through `(e^{ε_j}, δ(ε_j))` (and through `(0, 1)` below the grid,
//! flat at `δ(ε_max)` above it, that mass at `+∞`) lies above the convex profile everywhere, and
//! is a valid PLD (its `E[e^{−L}] = (1 − δ(ε_0))e^{−ε_0} ≤ 1` because `δ(ε) ≥ 1 − e^ε`). Hence it
//! dominates the pair, and compositions of dominating pairs dominate: the computed δ is an
//! upper bound. Composition convolves the pmfs (FFT, repeated squaring); after each product the
//! mass above the window is moved to `+∞` and the mass below it up to the window's floor (both
//! can only increase δ). Rounding of the FFT (≈ 1e-16 of the mass per entry) is the one thing
//! not rounded pessimistically; negative entries are clamped to 0.

use std::f64::consts::PI;

use super::gaussian::{epsilon_for_log_delta, log_ndtr};
use super::{check_delta, check_rate, check_z, AccountingError, Result, Scheme};

/// Grid step of the privacy loss.
pub const PLD_GRID: f64 = 1e-3;
/// Composed losses above this go to `+∞`.
const CAP: f64 = 30.0;
/// Composed losses below this are rounded up to it.
const FLOOR: f64 = -10.0;

fn ndtr(x: f64) -> f64 {
    log_ndtr(x).exp()
}

/// Upper tail `1 − Φ(x)`.
fn sf(x: f64) -> f64 {
    log_ndtr(-x).exp()
}

/// The pair of one step. `Remove`: P = (1−q)N(0)+qN(μ), Q = N(0); `Add`: the swap;
/// `Replace`: P = (1−q)N(0)+qN(−μ), Q = (1−q)N(0)+qN(μ).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Pair {
    Remove,
    Add,
    Replace,
}

/// δ(ε) = H_{e^ε}(P‖Q) of one step's pair, for any real ε.
fn profile(pair: Pair, q: f64, mu: f64, eps: f64) -> f64 {
    let g = eps.exp();
    let d = match pair {
        Pair::Remove => {
            // L(x) = log(1 − q + q e^{μx − μ²/2}) increases; L > ε ⟺ x > x_ε.
            if g <= 1.0 - q {
                return (1.0 - g).max(0.0);
            }
            let x = (((g - 1.0 + q) / q).ln() + 0.5 * mu * mu) / mu;
            (1.0 - q) * sf(x) + q * sf(x - mu) - g * sf(x)
        }
        Pair::Add => {
            // L'(x) = −L(x) under Q; L' > ε ⟺ L(x) < −ε ⟺ x < x_{−ε}.
            let gi = (-eps).exp();
            if gi <= 1.0 - q {
                return 0.0;
            }
            let x = (((gi - 1.0 + q) / q).ln() + 0.5 * mu * mu) / mu;
            ndtr(x) - g * ((1.0 - q) * ndtr(x) + q * ndtr(x - mu))
        }
        Pair::Replace => {
            // L(x) = log((1−q) + q e^{−μx−μ²/2}) − log((1−q) + q e^{μx−μ²/2}) decreases in x.
            let l = |x: f64| {
                let a = (q.ln() - mu * x - 0.5 * mu * mu, (1.0 - q).ln());
                let b = (q.ln() + mu * x - 0.5 * mu * mu, (1.0 - q).ln());
                super::bounds::log_add(a.0, a.1) - super::bounds::log_add(b.0, b.1)
            };
            let (mut lo, mut hi) = (-1.0, 1.0);
            while l(lo) <= eps {
                lo *= 2.0;
                if lo < -1e6 {
                    return 0.0;
                }
            }
            while l(hi) > eps {
                hi *= 2.0;
                if hi > 1e6 {
                    return (1.0 - g).max(0.0);
                }
            }
            for _ in 0..100 {
                let m = 0.5 * (lo + hi);
                if m == lo || m == hi {
                    break;
                }
                if l(m) > eps {
                    lo = m;
                } else {
                    hi = m;
                }
            }
            // The optimal set is {x < x*}; hi is x* to rounding (p − e^ε q vanishes at x*).
            let x = hi;
            let p = (1.0 - q) * ndtr(x) + q * ndtr(x + mu);
            let qq = (1.0 - q) * ndtr(x) + q * ndtr(x - mu);
            p - g * qq
        }
    };
    d.clamp((1.0 - g).max(0.0), 1.0)
}

/// A discrete PLD on the grid `(offset + i)·h` with mass `inf` at `+∞`.
#[derive(Clone, Debug)]
pub struct Pld {
    offset: i64,
    pmf: Vec<f64>,
    inf: f64,
}

impl Pld {
    /// The connect-the-dots PLD of one step's pair (module docs).
    fn of_pair(pair: Pair, q: f64, mu: f64) -> Pld {
        let h = PLD_GRID;
        // Grid ends: δ(ε_max) negligible (≤ 1e-30), and δ(ε_min) within 1e-30 of 1 − e^{ε_min}.
        let mut jmax: i64 = 1;
        while profile(pair, q, mu, jmax as f64 * h) > 1e-30 && (jmax as f64) * h < CAP {
            jmax *= 2;
        }
        let mut jmin: i64 = -1;
        while {
            let e = jmin as f64 * h;
            profile(pair, q, mu, e) - (1.0 - e.exp()) > 1e-30 && e > FLOOR
        } {
            jmin *= 2;
        }
        let n = (jmax - jmin + 1) as usize;
        let y: Vec<f64> = (0..n).map(|i| ((jmin + i as i64) as f64 * h).exp()).collect();
        let d: Vec<f64> = (0..n).map(|i| profile(pair, q, mu, (jmin + i as i64) as f64 * h)).collect();
        // Chord slopes: s_0 from (0, 1), s_j between grid points, s_{n} = 0 (flat above).
        let mut s = Vec::with_capacity(n + 1);
        s.push((d[0] - 1.0) / y[0]);
        for i in 1..n {
            s.push((d[i] - d[i - 1]) / (y[i] - y[i - 1]));
        }
        s.push(0.0);
        let pmf: Vec<f64> = (0..n).map(|i| ((s[i + 1] - s[i]) * y[i]).max(0.0)).collect();
        Pld { offset: jmin, pmf, inf: d[n - 1] }
    }

    /// δ(ε) of this PLD: `inf + Σ_i p_i (1 − e^{ε − ℓ_i})₊`.
    pub fn delta(&self, eps: f64) -> f64 {
        let h = PLD_GRID;
        let mut acc = self.inf;
        for (i, p) in self.pmf.iter().enumerate().rev() {
            let l = (self.offset + i as i64) as f64 * h;
            if l <= eps {
                break;
            }
            acc += p * -(eps - l).exp_m1();
        }
        acc.min(1.0)
    }

    /// The composition of two PLDs (product pair), truncated to the window.
    fn compose(&self, other: &Pld) -> Pld {
        let conv = convolve(&self.pmf, &other.pmf);
        let inf = 1.0 - (1.0 - self.inf) * (1.0 - other.inf);
        let mut out = Pld { offset: self.offset + other.offset, pmf: conv, inf };
        out.truncate();
        out
    }

    fn truncate(&mut self) {
        let h = PLD_GRID;
        let lo = (FLOOR / h).floor() as i64;
        let hi = (CAP / h).ceil() as i64;
        if self.offset < lo {
            let cut = ((lo - self.offset) as usize).min(self.pmf.len());
            let moved: f64 = self.pmf[..cut].iter().sum();
            self.pmf.drain(..cut);
            self.offset = lo;
            if self.pmf.is_empty() {
                self.pmf.push(0.0);
            }
            self.pmf[0] += moved;
        }
        let top = self.offset + self.pmf.len() as i64 - 1;
        if top > hi {
            let keep = (hi - self.offset + 1).max(1) as usize;
            let moved: f64 = self.pmf[keep..].iter().sum();
            self.pmf.truncate(keep);
            self.inf += moved;
        }
        // Trim negligible zeros at the ends.
        while self.pmf.len() > 1 && *self.pmf.last().unwrap() == 0.0 {
            self.pmf.pop();
        }
        self.inf = self.inf.min(1.0);
    }

    /// `t`-fold self-composition by repeated squaring.
    fn power(&self, mut t: u64) -> Pld {
        let mut base = self.clone();
        let mut acc: Option<Pld> = None;
        while t > 0 {
            if t & 1 == 1 {
                acc = Some(match acc {
                    None => base.clone(),
                    Some(a) => a.compose(&base),
                });
            }
            t >>= 1;
            if t > 0 {
                base = base.compose(&base);
            }
        }
        acc.expect("t ≥ 1")
    }
}

// ------------------------------------------------------------------------------------------
// FFT convolution (iterative radix-2).

fn fft(re: &mut [f64], im: &mut [f64], invert: bool) {
    let n = re.len();
    let mut j = 0;
    for i in 1..n {
        let mut bit = n >> 1;
        while j & bit != 0 {
            j ^= bit;
            bit >>= 1;
        }
        j |= bit;
        if i < j {
            re.swap(i, j);
            im.swap(i, j);
        }
    }
    let mut len = 2;
    while len <= n {
        let ang = 2.0 * PI / len as f64 * if invert { 1.0 } else { -1.0 };
        let (wr, wi) = (ang.cos(), ang.sin());
        for start in (0..n).step_by(len) {
            let (mut cr, mut ci) = (1.0f64, 0.0f64);
            for k in 0..len / 2 {
                let (a, b) = (start + k, start + k + len / 2);
                let (xr, xi) = (re[b] * cr - im[b] * ci, re[b] * ci + im[b] * cr);
                re[b] = re[a] - xr;
                im[b] = im[a] - xi;
                re[a] += xr;
                im[a] += xi;
                let t = cr * wr - ci * wi;
                ci = cr * wi + ci * wr;
                cr = t;
            }
        }
        len <<= 1;
    }
    if invert {
        let inv = 1.0 / n as f64;
        re.iter_mut().for_each(|x| *x *= inv);
        im.iter_mut().for_each(|x| *x *= inv);
    }
}

fn convolve(a: &[f64], b: &[f64]) -> Vec<f64> {
    let out_len = a.len() + b.len() - 1;
    if a.len().min(b.len()) <= 64 {
        let mut out = vec![0.0; out_len];
        for (i, x) in a.iter().enumerate() {
            for (j, y) in b.iter().enumerate() {
                out[i + j] += x * y;
            }
        }
        return out;
    }
    let n = out_len.next_power_of_two();
    // Pack a in the real part and b in the imaginary part: one forward FFT for both.
    let (mut re, mut im) = (vec![0.0; n], vec![0.0; n]);
    re[..a.len()].copy_from_slice(a);
    im[..b.len()].copy_from_slice(b);
    fft(&mut re, &mut im, false);
    // A_k = (Z_k + conj Z_{n−k})/2, B_k = (Z_k − conj Z_{n−k})/(2i); C = A·B.
    let (mut cr, mut ci) = (vec![0.0; n], vec![0.0; n]);
    for k in 0..n {
        let m = (n - k) % n;
        let (zr, zi, wr, wi) = (re[k], im[k], re[m], -im[m]);
        let (ar, ai) = (0.5 * (zr + wr), 0.5 * (zi + wi));
        let (br, bi) = (0.5 * (zi - wi), -0.5 * (zr - wr));
        cr[k] = ar * br - ai * bi;
        ci[k] = ar * bi + ai * br;
    }
    fft(&mut cr, &mut ci, true);
    cr.truncate(out_len);
    cr.iter_mut().for_each(|x| *x = x.max(0.0));
    cr
}

// ------------------------------------------------------------------------------------------
// Public API.

fn pairs(scheme: Scheme) -> Result<&'static [Pair]> {
    match scheme {
        Scheme::Poisson | Scheme::WithoutReplacement => Ok(&[Pair::Remove, Pair::Add]),
        Scheme::PoissonReplaceOne => Ok(&[Pair::Replace]),
        other => Err(AccountingError::NotExact(other)),
    }
}

fn composed(scheme: Scheme, q: f64, z: f64, steps: u64) -> Result<Vec<Pld>> {
    check_rate(q)?;
    check_z(z)?;
    if steps == 0 {
        return Err(AccountingError::Steps);
    }
    Ok(pairs(scheme)?.iter().map(|&p| Pld::of_pair(p, q, 1.0 / z).power(steps)).collect())
}

/// δ at `epsilon` of `steps` steps of a hidden-batch scheme (`"poisson"`,
/// `"poisson_replace_one"`, `"without_replacement"`) by the PLD accountant: an upper bound (both
/// directions of an asymmetric pair; the larger).
pub fn pld_delta_for(z: f64, q: f64, steps: u64, epsilon: f64, scheme: Scheme) -> Result<f64> {
    if !(epsilon.is_finite() && epsilon >= 0.0) {
        return Err(AccountingError::Epsilon(epsilon));
    }
    Ok(composed(scheme, q, z, steps)?.iter().map(|p| p.delta(epsilon)).fold(0.0, f64::max))
}

/// The smallest ε (rounded up, relative 1e-12) at which the PLD accountant certifies δ.
pub fn pld_epsilon_for(z: f64, q: f64, steps: u64, delta: f64, scheme: Scheme) -> Result<f64> {
    check_delta(delta)?;
    let plds = composed(scheme, q, z, steps)?;
    Ok(epsilon_for_log_delta(delta.ln(), |e| plds.iter().map(|p| p.delta(e)).fold(0.0, f64::max).ln()))
}

/// The smallest noise multiplier (to relative 1e-4, rounded up) that the PLD accountant
/// certifies for (ε, δ) after `steps` steps: regula falsi on `log z` between the RDP value
/// (the start; PLD ε is at most RDP ε for these schemes, checked) and below it. Each evaluation
/// composes T steps by FFT (tens of ms), so this takes ~0.1–2 s: not for per-fit defaults.
pub fn pld_noise_multiplier_for(epsilon: f64, delta: f64, q: f64, steps: u64, scheme: Scheme) -> Result<f64> {
    super::check_epsilon(epsilon)?;
    check_delta(delta)?;
    let z_rdp = super::noise_multiplier_for(epsilon, delta, q, steps, scheme)?;
    let target = delta.ln();
    let f = |u: f64| -> f64 {
        match pld_delta_for(u.exp(), q, steps, epsilon, scheme) {
            Ok(d) => d.ln().max(-1e4) - target,
            Err(_) => f64::INFINITY,
        }
    };
    let mut good = z_rdp.ln();
    while f(good) > 0.0 {
        good += 0.1;
        if good > super::Z_MAX.ln() {
            return Ok(z_rdp);
        }
    }
    let mut bad = good - 0.2;
    while f(bad) <= 0.0 {
        good = bad;
        bad -= 0.2;
        if bad < super::Z_MIN.ln() {
            return Ok(super::Z_MIN);
        }
    }
    Ok(super::gaussian::solve_feasible(good, bad, 1e-4, f).exp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::{default_orders, epsilon_for, gaussian_delta, rel};

    #[test]
    fn fft_convolution_matches_the_direct_one() {
        let a: Vec<f64> = (0..300).map(|i| ((i * 7 % 13) as f64) / 13.0).collect();
        let b: Vec<f64> = (0..200).map(|i| ((i * 5 % 11) as f64) / 11.0).collect();
        let fast = convolve(&a, &b);
        let mut slow = vec![0.0; 499];
        for (i, x) in a.iter().enumerate() {
            for (j, y) in b.iter().enumerate() {
                slow[i + j] += x * y;
            }
        }
        for (f, s) in fast.iter().zip(&slow) {
            assert!((f - s).abs() < 1e-9 * s.abs().max(1.0));
        }
    }

    #[test]
    fn q_one_is_the_analytic_gaussian_from_above() {
        // Remove pair at q = 1 is N(μ) vs N(0); T steps are √T μ-GDP.
        for (z, t) in [(1.0, 1u64), (2.0, 10), (5.0, 100)] {
            let d = pld_delta_for(z, 1.0, t, 1.0, Scheme::Poisson).unwrap();
            let want = gaussian_delta(1.0, (t as f64).sqrt() / z).unwrap();
            assert!(d >= want * (1.0 - 1e-9) && d <= want * 1.01 + 1e-15, "z={z} t={t}: {d} vs {want}");
        }
    }

    #[test]
    fn pld_is_below_rdp_for_every_hidden_scheme() {
        let o = default_orders();
        let (q, z, t, d) = (0.05, 1.2, 40u64, 1e-6);
        for s in [Scheme::Poisson, Scheme::PoissonReplaceOne, Scheme::WithoutReplacement] {
            let pld = pld_epsilon_for(z, q, t, d, s).unwrap();
            let rdp = epsilon_for(z, q, t, d, s, &o).unwrap().0;
            assert!(pld < rdp, "{s:?}: pld {pld} rdp {rdp}");
            if s != Scheme::WithoutReplacement {
                assert!(pld > 0.4 * rdp, "{s:?}: pld {pld} rdp {rdp}");
            }
        }
        // Without replacement under replace-one has the Poisson remove/add pair (WBK's RDP bound
        // carries a factor up to 4 at second order that the dominating pair does not).
        let w = pld_epsilon_for(z, q, t, d, Scheme::WithoutReplacement).unwrap();
        assert_eq!(w, pld_epsilon_for(z, q, t, d, Scheme::Poisson).unwrap());
        // Replace-one costs more than add/remove (its shift is 2μ).
        let a = pld_epsilon_for(1.5, 0.05, 100, 1e-6, Scheme::Poisson).unwrap();
        let b = pld_epsilon_for(1.5, 0.05, 100, 1e-6, Scheme::PoissonReplaceOne).unwrap();
        assert!(b > a && rel(a, b) > 0.1);
    }
}
