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

use super::gaussian::{epsilon_for_log_delta, log_gaussian_delta, log_ndtr};
use super::{check_delta, check_rate, check_z, AccountingError, Result, Scheme};

/// Grid step of the privacy loss for single answers ([`pld_delta_for`], [`pld_epsilon_for`]).
pub const PLD_GRID: f64 = 1e-3;
/// Grid step of the ledger's PLD currency and of PLD calibration (module docs, "Speed"): coarser,
/// still an upper bound (connect-the-dots on a coarser grid lies above the finer one's chords).
pub const PLD_LEDGER_GRID: f64 = 8e-3;
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
/// `Replace`: P = (1−q)N(0)+qN(−μ), Q = (1−q)N(0)+qN(μ); `Sym`: the pair whose profile is the
/// larger of `Remove`'s and `Add`'s at every ε (fixed-size batches without replacement under
/// replace-one adjacency, where a step may be of either kind: module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Pair {
    Remove,
    Add,
    Replace,
    Sym,
}

/// δ(ε) = H_{e^ε}(P‖Q) of one step's pair, for any real ε.
fn profile(pair: Pair, q: f64, mu: f64, eps: f64) -> f64 {
    let g = eps.exp();
    let d = match pair {
        Pair::Sym => return profile(Pair::Remove, q, mu, eps).max(profile(Pair::Add, q, mu, eps)),
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

/// δ(ε) of the Gaussian pair (N(μ), N(0)) for any real ε (for ε < 0 by the symmetry of the
/// pair, δ(ε) = 1 − e^ε + e^ε δ(−ε)).
pub(super) fn gaussian_profile(mu: f64, eps: f64) -> f64 {
    let d = if eps >= 0.0 {
        log_gaussian_delta(eps, mu).exp()
    } else {
        let g = eps.exp();
        1.0 - g + g * log_gaussian_delta(-eps, mu).exp()
    };
    d.clamp((1.0 - eps.exp()).max(0.0), 1.0)
}

/// A discrete PLD on the grid `(offset + i)·h` with mass `inf` at `+∞`.
#[derive(Clone, Debug)]
pub struct Pld {
    h: f64,
    offset: i64,
    pmf: Vec<f64>,
    inf: f64,
}

impl Pld {
    /// The connect-the-dots PLD on the grid `j·h` of a privacy profile `δ(ε)` given for every
    /// real ε (module docs): `profile` must be convex in `e^ε`, non-increasing, and at least
    /// `1 − e^ε`, which holds for the profile of any pair of distributions.
    pub(super) fn of_profile(h: f64, profile: impl Fn(f64) -> f64) -> Pld {
        // Grid ends: δ(ε_max) negligible (≤ 1e-30), and δ(ε_min) within 1e-30 of 1 − e^{ε_min}.
        let mut jmax: i64 = 1;
        while profile(jmax as f64 * h) > 1e-30 && (jmax as f64) * h < CAP {
            jmax *= 2;
        }
        let mut jmin: i64 = -1;
        while {
            let e = jmin as f64 * h;
            profile(e) - (1.0 - e.exp()) > 1e-30 && e > FLOOR
        } {
            jmin *= 2;
        }
        let n = (jmax - jmin + 1) as usize;
        let d: Vec<f64> = (0..n).map(|i| profile((jmin + i as i64) as f64 * h)).collect();
        Pld::of_grid_profile(h, jmin, &d)
    }

    /// The connect-the-dots PLD whose profile takes the values `d[i] = δ((offset + i)·h)` at the
    /// grid points, is linear in `e^ε` between them, starts from `(0, 1)` and is flat (the mass at
    /// `+∞`, `d[n−1]`) above the top one: a point's mass is the change of chord slope there times
    /// `e^ε`.
    fn of_grid_profile(h: f64, offset: i64, d: &[f64]) -> Pld {
        let n = d.len();
        let y: Vec<f64> = (0..n).map(|i| ((offset + i as i64) as f64 * h).exp()).collect();
        // Chord slopes: s_0 from (0, 1), s_j between grid points, s_{n} = 0 (flat above).
        let mut s = Vec::with_capacity(n + 1);
        s.push((d[0] - 1.0) / y[0]);
        for i in 1..n {
            s.push((d[i] - d[i - 1]) / (y[i] - y[i - 1]));
        }
        s.push(0.0);
        let pmf: Vec<f64> = (0..n).map(|i| ((s[i + 1] - s[i]) * y[i]).max(0.0)).collect();
        let mut out = Pld { h, offset, pmf, inf: d[n - 1] };
        out.truncate(0.0);
        out
    }

    /// The connect-the-dots PLD of one step's pair on the grid `j·h`.
    fn of_pair(pair: Pair, q: f64, mu: f64, h: f64) -> Pld {
        Pld::of_profile(h, |e| profile(pair, q, mu, e))
    }

    /// δ(ε) of this PLD: `inf + Σ_i p_i (1 − e^{ε − ℓ_i})₊`.
    pub fn delta(&self, eps: f64) -> f64 {
        let mut acc = self.inf;
        for (i, p) in self.pmf.iter().enumerate().rev() {
            let l = (self.offset + i as i64) as f64 * self.h;
            if l <= eps {
                break;
            }
            acc += p * -(eps - l).exp_m1();
        }
        acc.min(1.0)
    }

    /// The composition of two PLDs on one grid (product pair), truncated to the window and its
    /// tails of mass ≤ `tail` cut pessimistically ([`Pld::truncate`]).
    pub(super) fn compose(&self, other: &Pld, tail: f64) -> Pld {
        debug_assert!(self.h == other.h, "PLDs on different grids");
        let conv = convolve(&self.pmf, &other.pmf);
        let inf = 1.0 - (1.0 - self.inf) * (1.0 - other.inf);
        let mut out = Pld { h: self.h, offset: self.offset + other.offset, pmf: conv, inf };
        out.truncate(tail);
        out
    }

    /// Moves mass pessimistically: losses below the window floor (and a lower tail of mass ≤
    /// `tail`) up to the lowest loss kept; losses above the cap (and an upper tail of mass ≤
    /// `tail`) to `+∞`. Raising a loss can only raise δ(ε); moving mass `m` to `+∞` raises δ(ε)
    /// by at most `m`. So the result dominates the input, and δ is overstated by ≤ 2·`tail`.
    fn truncate(&mut self, tail: f64) {
        let h = self.h;
        let lo = (FLOOR / h).floor() as i64;
        let hi = (CAP / h).ceil() as i64;
        // Lower end: everything below `lo`, and then a prefix of mass ≤ tail.
        let mut cut = if self.offset < lo { ((lo - self.offset) as usize).min(self.pmf.len()) } else { 0 };
        let mut moved: f64 = self.pmf[..cut].iter().sum();
        while cut + 1 < self.pmf.len() && moved + self.pmf[cut] <= tail {
            moved += self.pmf[cut];
            cut += 1;
        }
        if cut > 0 {
            self.pmf.drain(..cut);
            self.offset += cut as i64;
            if self.pmf.is_empty() {
                self.pmf.push(0.0);
            }
            self.pmf[0] += moved;
        }
        // Upper end: everything above `hi`, and then a suffix of mass ≤ tail, to +∞.
        let top = self.offset + self.pmf.len() as i64 - 1;
        let mut keep = if top > hi { (hi - self.offset + 1).max(1) as usize } else { self.pmf.len() };
        let mut up: f64 = self.pmf[keep..].iter().sum();
        while keep > 1 && up + self.pmf[keep - 1] <= tail {
            up += self.pmf[keep - 1];
            keep -= 1;
        }
        self.pmf.truncate(keep);
        self.inf = (self.inf + up).min(1.0);
    }

    /// `t`-fold self-composition by repeated squaring (`tail` as in [`Pld::compose`]).
    pub(super) fn power(&self, mut t: u64, tail: f64) -> Pld {
        let mut base = self.clone();
        let mut acc: Option<Pld> = None;
        while t > 0 {
            if t & 1 == 1 {
                acc = Some(match acc {
                    None => base.clone(),
                    Some(a) => a.compose(&base, tail),
                });
            }
            t >>= 1;
            if t > 0 {
                base = base.compose(&base, tail);
            }
        }
        acc.expect("t ≥ 1")
    }

    /// Standard deviation of the finite losses (their spread, in loss units).
    fn spread(&self) -> f64 {
        let (mut m0, mut m1, mut m2) = (0.0, 0.0, 0.0);
        for (i, p) in self.pmf.iter().enumerate() {
            let l = (self.offset + i as i64) as f64 * self.h;
            m0 += p;
            m1 += p * l;
            m2 += p * l * l;
        }
        if m0 <= 0.0 {
            return 0.0;
        }
        (m2 / m0 - (m1 / m0).powi(2)).max(0.0).sqrt()
    }

    /// The connect-the-dots PLD, on the coarser grid `j·(k·h)`, of this PLD's own profile: the
    /// chords through `(e^{ε_j}, δ(ε_j))` at the coarse points lie above this (convex) profile,
    /// so the result dominates this PLD. The coarse points bracket every finite loss, so above
    /// the top one δ is the mass at `+∞`, as here. δ at the coarse points is accumulated from the
    /// top down with positive terms only (no cancellation): with `S_j` the mass above `ε_j`,
    /// `δ(ε_j) = (1 − e^{−H}) S_{j+1} + e^{−H} δ(ε_{j+1}) + Σ_{ε_j < ℓ ≤ ε_{j+1}} p (1 − e^{ε_j − ℓ})`.
    fn coarsen(&self, k: i64) -> Pld {
        let h = self.h * k as f64;
        let lo = self.offset.div_euclid(k) - 1;
        let hi = (self.offset + self.pmf.len() as i64 - 1).div_euclid(k) + 1;
        let n = (hi - lo + 1) as usize;
        let mut d = vec![0.0; n];
        let (mut above, mut delta) = (0.0f64, self.inf);
        d[n - 1] = self.inf;
        let eh = (-h).exp();
        for j in (0..n - 1).rev() {
            let e = (lo + j as i64) as f64 * h;
            let mut next = (1.0 - eh) * above + eh * (delta - self.inf) + self.inf;
            // Losses in (ε_j, ε_{j+1}]: fine indices i with e < ℓ_i ≤ e + h.
            let first = (lo + j as i64) * k + 1 - self.offset;
            let last = (lo + j as i64 + 1) * k - self.offset;
            for i in first.max(0)..=last.min(self.pmf.len() as i64 - 1) {
                let l = (self.offset + i) as f64 * self.h;
                let p = self.pmf[i as usize];
                next += p * -(e - l).exp_m1();
                above += p;
            }
            delta = next.min(1.0);
            d[j] = delta;
        }
        Pld::of_grid_profile(h, lo, &d)
    }

    /// `t`-fold self-composition ending on the grid `k·h`: squarings on this PLD's grid until a
    /// power's spread reaches `spread` (in loss units), then [`Pld::coarsen`] of that power `P_b`
    /// and of `P_{b + r}` (`t = m·b + r`, `r < b`; never a narrow PLD: coarsening one would
    /// lose much), and `P_b^{m−1} ⊗ P_{b+r}` on the coarse grid. Each step dominates the last.
    pub(super) fn power_coarse(&self, t: u64, k: i64, spread: f64, tail: f64) -> Pld {
        let mut b = 1u64;
        let mut base = self.clone();
        while 2 * b <= t / 2 && base.spread() < spread {
            base = base.compose(&base, tail);
            b *= 2;
        }
        if b == 1 && base.spread() < spread || t < 2 * b {
            return self.power(t, tail).coarsen(k);
        }
        let (m, r) = (t / b, t % b);
        let first = if r == 0 { base.clone() } else { base.compose(&self.power(r, tail), tail) };
        let cb = base.coarsen(k);
        let c_first = first.coarsen(k);
        if m == 1 {
            return c_first;
        }
        cb.power(m - 1, tail).compose(&c_first, tail)
    }

    /// [`Pld::truncate`] with tails of mass ≤ `tail` (for a PLD built from a profile).
    pub(super) fn truncate_tails(&mut self, tail: f64) {
        self.truncate(tail);
    }

    /// Mass at `+∞` plus the total of the pmf (1 up to rounding; for tests).
    #[cfg(test)]
    fn mass(&self) -> f64 {
        self.inf + self.pmf.iter().sum::<f64>()
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
        Scheme::Poisson => Ok(&[Pair::Remove, Pair::Add]),
        Scheme::WithoutReplacement => Ok(&[Pair::Sym]),
        Scheme::PoissonReplaceOne => Ok(&[Pair::Replace]),
        other => Err(AccountingError::NotExact(other)),
    }
}

/// Whether the PLD accountant prices `scheme` (the hidden-batch schemes).
pub fn is_pld_scheme(scheme: Scheme) -> bool {
    pairs(scheme).is_ok()
}

/// The composed PLDs (one per direction of the scheme's pair; their larger δ is the bound) of
/// `steps` steps on the grid `h`, tails of mass ≤ `tail` cut per composition.
pub(super) fn composed(scheme: Scheme, q: f64, z: f64, steps: u64, h: f64, tail: f64) -> Result<Vec<Pld>> {
    check_rate(q)?;
    check_z(z)?;
    if steps == 0 {
        return Err(AccountingError::Steps);
    }
    Ok(pairs(scheme)?.iter().map(|&p| Pld::of_pair(p, q, 1.0 / z, h).power(steps, tail)).collect())
}

/// Fine grid factor and spread of the ledger's hidden-batch PLDs ([`composed_coarse`]).
const COARSE_FACTOR: i64 = 8;
const COARSE_SPREAD: f64 = 8.0 * PLD_LEDGER_GRID;

/// [`composed`] ending on the ledger grid [`PLD_LEDGER_GRID`]: one step on the grid
/// `PLD_LEDGER_GRID / 8`, powers there until their spread is 40 ledger grid steps, the rest
/// on the ledger grid ([`Pld::power_coarse`]). An upper bound like [`composed`]'s.
pub(super) fn composed_coarse(scheme: Scheme, q: f64, z: f64, steps: u64, tail: f64) -> Result<Vec<Pld>> {
    check_rate(q)?;
    check_z(z)?;
    if steps == 0 {
        return Err(AccountingError::Steps);
    }
    let h = PLD_LEDGER_GRID / COARSE_FACTOR as f64;
    Ok(pairs(scheme)?
        .iter()
        .map(|&p| Pld::of_pair(p, q, 1.0 / z, h).power_coarse(steps, COARSE_FACTOR, COARSE_SPREAD, tail))
        .collect())
}

/// Tail mass cut per composition when the answer is wanted at `delta`: `1e-7·δ`, so that the
/// at most 2·60 cuts of a calibration overstate δ by well under 0.01%.
pub(super) fn tail_for(delta: f64) -> f64 {
    1e-5 * delta
}

/// δ at `epsilon` of `steps` steps of a hidden-batch scheme (`"poisson"`,
/// `"poisson_replace_one"`, `"without_replacement"`) by the PLD accountant: an upper bound (both
/// directions of an asymmetric pair; the larger). Fine grid, no tail cut.
pub fn pld_delta_for(z: f64, q: f64, steps: u64, epsilon: f64, scheme: Scheme) -> Result<f64> {
    if !(epsilon.is_finite() && epsilon >= 0.0) {
        return Err(AccountingError::Epsilon(epsilon));
    }
    Ok(composed(scheme, q, z, steps, PLD_GRID, 0.0)?.iter().map(|p| p.delta(epsilon)).fold(0.0, f64::max))
}

/// The smallest ε (rounded up, relative 1e-12) at which the PLD accountant certifies δ (fine grid).
pub fn pld_epsilon_for(z: f64, q: f64, steps: u64, delta: f64, scheme: Scheme) -> Result<f64> {
    check_delta(delta)?;
    let plds = composed(scheme, q, z, steps, PLD_GRID, tail_for(delta))?;
    Ok(epsilon_for_log_delta(delta.ln(), |e| plds.iter().map(|p| p.delta(e)).fold(0.0, f64::max).ln()))
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
        // Without replacement under replace-one: the symmetric pair (the larger of the Poisson
        // remove and add profiles at every ε), a little above the two directions composed apart
        // (WBK's RDP bound carries a factor up to 4 at second order that the pair does not).
        let w = pld_epsilon_for(z, q, t, d, Scheme::WithoutReplacement).unwrap();
        let p = pld_epsilon_for(z, q, t, d, Scheme::Poisson).unwrap();
        assert!(w >= p && w < 1.1 * p, "sym {w} vs directions {p}");
        // Replace-one costs more than add/remove (its shift is 2μ).
        let a = pld_epsilon_for(1.5, 0.05, 100, 1e-6, Scheme::Poisson).unwrap();
        let b = pld_epsilon_for(1.5, 0.05, 100, 1e-6, Scheme::PoissonReplaceOne).unwrap();
        assert!(b > a && rel(a, b) > 0.1);
    }

    #[test]
    fn sym_profile_is_the_larger_direction_and_convex() {
        let (q, mu) = (0.05, 0.4);
        let mut last_y = 0.0f64;
        let mut last_d = 1.0f64;
        let mut last_slope = f64::NEG_INFINITY;
        for j in -300..300 {
            let e = j as f64 * 0.01;
            let s = profile(Pair::Sym, q, mu, e);
            let (r, a) = (profile(Pair::Remove, q, mu, e), profile(Pair::Add, q, mu, e));
            assert_eq!(s, r.max(a));
            if e > 0.0 {
                assert!(r >= a - 1e-15, "remove dominates above 0 at {e}");
            } else if e < 0.0 {
                assert!(a >= r - 1e-15, "add dominates below 0 at {e}");
            }
            let y = e.exp();
            if j > -300 {
                let slope = (s - last_d) / (y - last_y);
                assert!(slope >= last_slope - 1e-9, "convex in e^eps at {e}");
                last_slope = slope;
            }
            (last_y, last_d) = (y, s);
        }
    }

    #[test]
    fn tail_cuts_and_the_coarse_grid_stay_above_the_fine_pld() {
        let (q, z, t, d) = (256.0 / 11305.0, 5.4, 1800u64, 1.0 / 11305f64.powi(2));
        let fine = &composed(Scheme::WithoutReplacement, q, z, t, PLD_GRID, 0.0).unwrap()[0];
        let cut = &composed(Scheme::WithoutReplacement, q, z, t, PLD_GRID, tail_for(d)).unwrap()[0];
        let coarse = &composed_coarse(Scheme::WithoutReplacement, q, z, t, tail_for(d)).unwrap()[0];
        // Clamping the FFT's negative rounding to 0 can only add mass (a larger δ).
        assert!((fine.mass() - 1.0).abs() < 1e-8 && (coarse.mass() - 1.0).abs() < 1e-8, "{} {}", fine.mass(), coarse.mass());
        for e in [0.0, 0.3, 0.7, 1.0, 1.5, 2.5] {
            let (f, c, k) = (fine.delta(e), cut.delta(e), coarse.delta(e));
            assert!(c >= f * (1.0 - 1e-9) && k >= f * (1.0 - 1e-9), "eps={e}: fine {f} cut {c} coarse {k}");
            if f > 1e-12 {
                assert!(k <= 1.05 * f, "eps={e}: coarse {k} far above fine {f}");
            }
        }
        let ef = epsilon_for_log_delta(d.ln(), |e| fine.delta(e).ln());
        let ec = epsilon_for_log_delta(d.ln(), |e| coarse.delta(e).ln());
        assert!(ec >= ef && ec <= 1.003 * ef, "coarse eps {ec} fine {ef}");
    }

    #[test]
    fn coarsening_keeps_the_profile_at_the_coarse_points() {
        let p = Pld::of_pair(Pair::Sym, 0.1, 0.5, 1e-3).power(64, 0.0);
        let c = p.coarsen(8);
        for j in -40..200 {
            let e = j as f64 * 8e-3;
            let (a, b) = (p.delta(e), c.delta(e));
            assert!((a - b).abs() <= 1e-12 + 1e-9 * a, "eps={e}: {a} vs {b}");
            let mid = e + 4e-3;
            assert!(c.delta(mid) >= p.delta(mid) * (1.0 - 1e-12), "chord below at {mid}");
        }
    }
}
