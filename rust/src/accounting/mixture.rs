//! Exact accounting of releases that are Gaussian *given public information*: full-batch
//! Gaussians, shuffled epochs, and random public batches as a binomial mixture.
//!
//! If the batch membership B of every round is public and independent of the protected data,
//! the transcript is (B, Y) and, conditional on B, Y is an adaptive composition of Gaussian
//! mechanisms in which the protected record takes part `K(B)` times. Then (Dong, Roth, Su 2019,
//! "Gaussian differential privacy", Cor. 3.3) Y | B is `√K/z`-GDP, tight, and because B has the
//! same law under both neighbours the hockey-stick divergence of (B, Y) is the average of the
//! conditional ones:
//!
//! `δ(ε) = E_B[ δ_Gauss(ε; √(K(B))/z) ]`.
//!
//! For independent rate-q batches K ~ Bin(T, q); for shuffled epochs K is fixed (the number of
//! epochs touched). Several such mechanisms compose to `μ² = Σ_j K_j / z_j²` with independent
//! `K_j`. This module keeps the law of μ² as a finite pmf ([`Mu2Pmf`]) and sums
//! `Σ_i p_i δ_Gauss(ε; √v_i)` over it. Every approximation rounds towards more privacy loss:
//! binomial tails below `e^{−70}` of the mode are moved to μ² = ∞ (δ = 1) or up to the lowest
//! kept point, and when several binomials must be convolved, each support point `K/z_j²` is
//! rounded UP onto a grid (δ_Gauss increases with μ), so the value is an upper bound.

use super::gaussian::{epsilon_for_log_delta, log_gaussian_delta, mu_for_log_delta, solve_feasible};
use super::bounds::log_add;
use super::{
    check_delta, check_epsilon, check_rate, check_scheme_rate, check_z, AccountingError, Event, Result, Scheme, Z_MAX,
    Z_MIN,
};

/// `log p` below which (relative to the mode) a binomial term is folded into a tail.
const TAIL: f64 = 70.0;
/// Most grid points of a convolved μ² law.
const MAX_GRID: usize = 200_000;

/// `K ~ Bin(trials, q)` releases of a Gaussian with noise multiplier `z`: adds `K/z²` to μ².
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Binomial {
    pub trials: u64,
    pub q: f64,
    pub z: f64,
}

/// The law of μ² of a composition: a fixed part (full-batch and shuffled releases, `Σ K/z²`)
/// plus independent binomial parts (random public batches).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Mixture {
    pub fixed_mu2: f64,
    pub binomials: Vec<Binomial>,
}

/// A truncated binomial pmf in log space: `log P(K = k)` for `k = lo..=hi`, with the mass above
/// `hi` (bounded, geometric tail) and below `lo`.
pub(super) struct BinomialWindow {
    pub(super) lo: u64,
    pub(super) lp: Vec<f64>,
    pub(super) log_upper: f64,
    pub(super) log_lower: f64,
}

fn log_choose(n: u64, k: u64) -> f64 {
    libm::lgamma(n as f64 + 1.0) - libm::lgamma(k as f64 + 1.0) - libm::lgamma((n - k) as f64 + 1.0)
}

pub(super) fn binomial_window(t: u64, q: f64) -> BinomialWindow {
    if q >= 1.0 {
        return BinomialWindow { lo: t, lp: vec![0.0], log_upper: f64::NEG_INFINITY, log_lower: f64::NEG_INFINITY };
    }
    let (lq, l1q) = (q.ln(), (-q).ln_1p());
    let odds = lq - l1q;
    let k0 = (((t + 1) as f64 * q).floor() as u64).min(t);
    let lp0 = log_choose(t, k0) + k0 as f64 * lq + (t - k0) as f64 * l1q;
    // log p(k+1) − log p(k)
    let up = |k: u64| ((t - k) as f64 / (k + 1) as f64).ln() + odds;
    let mut upper = vec![];
    let (mut k, mut lp) = (k0, lp0);
    let mut log_upper = f64::NEG_INFINITY;
    while k < t {
        let r = up(k);
        let next = lp + r;
        k += 1;
        if next < lp0 - TAIL {
            // Σ_{j≥k} p(j) ≤ p(k) / (1 − p(k+1)/p(k)): the ratio falls past the mode.
            let rr = if k < t { up(k).min(-1e-300) } else { f64::NEG_INFINITY };
            log_upper = next - (-rr.exp()).ln_1p();
            break;
        }
        lp = next;
        upper.push(lp);
    }
    let mut lower = vec![];
    let (mut k, mut lp) = (k0, lp0);
    let mut log_lower = f64::NEG_INFINITY;
    while k > 0 {
        let prev = lp - up(k - 1);
        k -= 1;
        if prev < lp0 - TAIL {
            let rr = if k > 0 { (-up(k - 1)).min(-1e-300) } else { f64::NEG_INFINITY };
            log_lower = prev - (-rr.exp()).ln_1p();
            k += 1;
            break;
        }
        lp = prev;
        lower.push(lp);
    }
    lower.reverse();
    let lo = k;
    let mut lps = lower;
    lps.push(lp0);
    lps.extend(upper);
    // Every term came from p(k0) by exact ratios, so the rounding of lgamma in p(k0) (≈ 1e-10
    // relative for T = 10⁵) is one common factor: normalise it away (the pmf sums to 1).
    let total = lps.iter().fold(log_add(log_upper, log_lower), |a, &l| log_add(a, l));
    for l in lps.iter_mut() {
        *l -= total;
    }
    BinomialWindow { lo, lp: lps, log_upper: log_upper - total, log_lower: log_lower - total }
}

/// A finite law of μ² (values ascending) with mass at μ² = ∞; `log δ(ε)` sums over it.
pub struct Mu2Pmf {
    v: Vec<f64>,
    lp: Vec<f64>,
    /// `log Σ_{j ≤ i} p_j`
    lcum: Vec<f64>,
    /// `log Σ_{j ≥ i} p_j`
    lcum_up: Vec<f64>,
    /// index of the largest `p_i`
    mode: usize,
    log_inf: f64,
}

impl Mu2Pmf {
    fn new(v: Vec<f64>, lp: Vec<f64>, log_inf: f64) -> Self {
        let mut lcum = Vec::with_capacity(lp.len());
        let mut acc = f64::NEG_INFINITY;
        for &l in &lp {
            acc = log_add(acc, l);
            lcum.push(acc);
        }
        let mut lcum_up = vec![f64::NEG_INFINITY; lp.len()];
        let mut acc = f64::NEG_INFINITY;
        for i in (0..lp.len()).rev() {
            acc = log_add(acc, lp[i]);
            lcum_up[i] = acc;
        }
        let mode = (0..lp.len()).fold(0, |m, i| if lp[i] > lp[m] { i } else { m });
        Mu2Pmf { v, lp, lcum, lcum_up, mode, log_inf }
    }

    /// The law of μ² of `mix` (exact for at most one binomial, rounded up onto a grid for more).
    pub fn of(mix: &Mixture) -> Self {
        let fixed = mix.fixed_mu2;
        let parts: Vec<(BinomialWindow, f64)> =
            mix.binomials.iter().map(|b| (binomial_window(b.trials, b.q), 1.0 / (b.z * b.z))).collect();
        match parts.len() {
            0 => Mu2Pmf::new(vec![fixed], vec![0.0], f64::NEG_INFINITY),
            1 => {
                let (w, s) = &parts[0];
                let v = (0..w.lp.len()).map(|i| fixed + (w.lo + i as u64) as f64 * s).collect();
                let mut lp = w.lp.clone();
                lp[0] = log_add(lp[0], w.log_lower); // lower tail moved up to the lowest point
                Mu2Pmf::new(v, lp, w.log_upper)
            }
            _ if parts.iter().map(|(w, _)| w.lp.len() as f64).product::<f64>() <= MAX_GRID as f64 => {
                Self::enumerated(fixed, &parts)
            }
            _ => Self::convolved(fixed, &parts),
        }
    }

    /// Every combination of the parts' support points, exactly (no grid), sorted by μ².
    fn enumerated(fixed: f64, parts: &[(BinomialWindow, f64)]) -> Self {
        let mut pts: Vec<(f64, f64)> = vec![(fixed, 0.0)];
        let mut log_inf = f64::NEG_INFINITY;
        for (w, s) in parts {
            let mut next = Vec::with_capacity(pts.len() * w.lp.len());
            for (i, l) in w.lp.iter().enumerate() {
                let li = if i == 0 { log_add(*l, w.log_lower) } else { *l };
                let v = (w.lo + i as u64) as f64 * s;
                next.extend(pts.iter().map(|(a, b)| (a + v, b + li)));
            }
            pts = next;
            log_inf = log_add(log_inf, w.log_upper);
        }
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (v, lp) = pts.into_iter().unzip();
        Mu2Pmf::new(v, lp, log_inf.min(0.0))
    }

    fn convolved(fixed: f64, parts: &[(BinomialWindow, f64)]) -> Self {
        let mean: f64 = parts.iter().map(|(w, s)| (w.lo as f64 + 0.5 * w.lp.len() as f64) * s).sum();
        let span: f64 = parts.iter().map(|(w, s)| w.lp.len() as f64 * s).sum();
        let g = (1e-5 * mean / parts.len() as f64).max(span / MAX_GRID as f64).max(1e-300);
        // Dense pmf on the grid (linear probabilities; every part's mass is ≤ 1).
        let mut base = 0usize;
        let mut pmf = vec![1.0f64];
        let mut log_inf = f64::NEG_INFINITY;
        for (w, s) in parts {
            let idx: Vec<usize> = (0..w.lp.len()).map(|i| ((w.lo + i as u64) as f64 * s / g).ceil() as usize).collect();
            let off = idx[0];
            let width = idx[idx.len() - 1] - off + 1;
            let mut out = vec![0.0f64; pmf.len() + width - 1];
            for (i, l) in w.lp.iter().enumerate() {
                let mut p = l.exp();
                if i == 0 {
                    p += w.log_lower.exp();
                }
                let d = idx[i] - off;
                for (a, x) in pmf.iter().enumerate() {
                    out[a + d] += x * p;
                }
            }
            base += off;
            pmf = out;
            // P(some part is infinite) ≤ Σ of the parts' upper tails.
            log_inf = log_add(log_inf, w.log_upper);
        }
        let (mut v, mut lp) = (vec![], vec![]);
        for (i, p) in pmf.iter().enumerate() {
            if *p > 0.0 {
                v.push(fixed + (base + i) as f64 * g);
                lp.push(p.ln());
            }
        }
        Mu2Pmf::new(v, lp, log_inf.min(0.0))
    }

    /// `log Σ_i p_i δ_Gauss(ε; √(scale · v_i)) + P(μ² = ∞)`. Sums outwards from the mode and
    /// stops upwards once the remaining mass (charged δ = 1) and downwards once the rest,
    /// bounded by `δ_Gauss(ε; √(scale·v_i)) · P(μ² ≤ v_i)`, are below `e^{−30}` of the sum, and
    /// then adds those bounds: the value never drops below the full sum.
    pub fn log_delta(&self, eps: f64, scale: f64) -> f64 {
        const STOP: f64 = 30.0;
        let n = self.v.len();
        let mut acc = self.log_inf;
        for i in self.mode..n {
            acc = log_add(acc, self.lp[i] + log_gaussian_delta(eps, (scale * self.v[i]).sqrt()));
            if i + 1 < n && self.lcum_up[i + 1] < acc - STOP {
                acc = log_add(acc, self.lcum_up[i + 1]);
                break;
            }
        }
        for i in (0..self.mode).rev() {
            let ld = log_gaussian_delta(eps, (scale * self.v[i]).sqrt());
            acc = log_add(acc, self.lp[i] + ld);
            if i > 0 {
                let rest = self.lcum[i - 1] + ld;
                if rest < acc - STOP {
                    acc = log_add(acc, rest);
                    break;
                }
            }
        }
        acc.min(0.0)
    }
}

/// δ(ε) of a composition whose μ² has the law `mix` (module docs), an upper bound that is exact
/// up to tails below `e^{−70}` for at most one binomial part.
pub fn mixture_delta(epsilon: f64, mix: &Mixture) -> Result<f64> {
    if !(epsilon.is_finite() && epsilon >= 0.0) {
        return Err(AccountingError::Epsilon(epsilon));
    }
    check_mixture(mix)?;
    Ok(Mu2Pmf::of(mix).log_delta(epsilon, 1.0).exp())
}

/// The smallest ε (rounded up) at which the composition `mix` is (ε, δ)-DP.
pub fn mixture_epsilon(delta: f64, mix: &Mixture) -> Result<f64> {
    check_delta(delta)?;
    check_mixture(mix)?;
    let pmf = Mu2Pmf::of(mix);
    Ok(epsilon_for_log_delta(delta.ln(), |e| pmf.log_delta(e, 1.0)))
}

fn check_mixture(mix: &Mixture) -> Result<()> {
    if !(mix.fixed_mu2.is_finite() && mix.fixed_mu2 >= 0.0) {
        return Err(AccountingError::Mu(mix.fixed_mu2));
    }
    for b in &mix.binomials {
        check_rate(b.q)?;
        check_z(b.z)?;
        if b.trials == 0 {
            return Err(AccountingError::Steps);
        }
    }
    Ok(())
}

/// The law of the number of releases K of one event, as (fixed K, or Bin(steps, q)).
enum Releases {
    Fixed(u64),
    Binomial(u64, f64),
}

fn releases(scheme: Scheme, q: f64, steps: u64) -> Result<Releases> {
    match scheme {
        Scheme::FullBatch | Scheme::Shuffle => Ok(Releases::Fixed(Event { scheme, q, z: 1.0, steps }.releases())),
        Scheme::PublicBatch => Ok(Releases::Binomial(steps, q)),
        other => Err(AccountingError::NotExact(other)),
    }
}

fn check_event(q: f64, steps: u64, scheme: Scheme) -> Result<Releases> {
    check_scheme_rate(scheme, q)?;
    if steps == 0 {
        return Err(AccountingError::Steps);
    }
    releases(scheme, q, steps)
}

fn k_pmf(r: &Releases) -> Mu2Pmf {
    match *r {
        Releases::Fixed(k) => Mu2Pmf::new(vec![k as f64], vec![0.0], f64::NEG_INFINITY),
        Releases::Binomial(t, q) => Mu2Pmf::of(&Mixture { fixed_mu2: 0.0, binomials: vec![Binomial { trials: t, q, z: 1.0 }] }),
    }
}

/// Exact ε of `steps` rounds of `scheme` (full batch: `μ = √steps/z`; shuffle: `μ = √K/z` with K
/// the epochs touched; public batch: the binomial mixture) at noise multiplier `z`.
pub fn exact_epsilon_for(z: f64, q: f64, steps: u64, delta: f64, scheme: Scheme) -> Result<f64> {
    check_z(z)?;
    check_delta(delta)?;
    let pmf = k_pmf(&check_event(q, steps, scheme)?);
    let scale = 1.0 / (z * z);
    Ok(epsilon_for_log_delta(delta.ln(), |e| pmf.log_delta(e, scale)))
}

/// Exact δ at `epsilon` of `steps` rounds of `scheme` at noise multiplier `z` (as
/// [`exact_epsilon_for`]).
pub fn exact_delta_for(z: f64, q: f64, steps: u64, epsilon: f64, scheme: Scheme) -> Result<f64> {
    check_z(z)?;
    if !(epsilon.is_finite() && epsilon >= 0.0) {
        return Err(AccountingError::Epsilon(epsilon));
    }
    let pmf = k_pmf(&check_event(q, steps, scheme)?);
    Ok(pmf.log_delta(epsilon, 1.0 / (z * z)).exp())
}

/// The smallest noise multiplier (to relative 1e-10, rounded up) for which `steps` rounds of
/// `scheme` are (ε, δ)-DP under the exact accountant. Full batch and shuffle in closed form
/// (`z = √K / μ(ε, δ)`); the binomial mixture by regula falsi on `log z`, started from the
/// full-batch value, which is always feasible (K ≤ T). A `z` below `Z_MIN` is returned as
/// `Z_MIN` (feasible; the bracket's end); above `Z_MAX` is [`AccountingError::Unreachable`].
pub fn exact_noise_multiplier_for(epsilon: f64, delta: f64, q: f64, steps: u64, scheme: Scheme) -> Result<f64> {
    check_epsilon(epsilon)?;
    check_delta(delta)?;
    let r = check_event(q, steps, scheme)?;
    let target = delta.ln();
    let mu = mu_for_log_delta(target, |m| log_gaussian_delta(epsilon, m));
    let z = match r {
        Releases::Fixed(k) => (k as f64).sqrt() / mu,
        Releases::Binomial(t, q) => {
            let pmf = k_pmf(&r);
            let f = |u: f64| pmf.log_delta(epsilon, (-2.0 * u).exp()).max(-1e4) - target;
            // Bracket around the Gaussian of a high quantile of K (usually feasible) and of its
            // mean (usually not); the full batch, K = T, is always feasible (K ≤ T).
            let (m, sd) = (t as f64 * q, (t as f64 * q * (1.0 - q)).sqrt());
            let full = ((t as f64).sqrt() / mu).ln();
            let mut good = ((m + 8.0 * sd + 8.0).min(t as f64).sqrt() / mu).ln();
            if f(good) > 0.0 {
                good = full;
            }
            let mut bad = (m.max(1e-300).sqrt() / mu).ln().min(good - 1e-3);
            while f(bad) <= 0.0 {
                good = bad;
                bad -= 1.0;
                if bad < Z_MIN.ln() {
                    return Ok(Z_MIN); // feasible: a larger z than a feasible one
                }
            }
            solve_feasible(good, bad, 1e-10, f).exp() * (1.0 + 1e-12)
        }
    };
    // Also a NaN z: it certifies nothing.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    if !(z <= Z_MAX) {
        let at = exact_epsilon_for(Z_MAX, q, steps, delta, scheme)?;
        return Err(AccountingError::Unreachable { epsilon, z_max: Z_MAX, epsilon_at_z_max: at });
    }
    Ok(z.max(Z_MIN))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::{epsilon_for, default_orders, gaussian_epsilon, noise_multiplier_for, rel};

    fn binom_pmf(t: u64, q: f64, k: u64) -> f64 {
        (log_choose(t, k) + k as f64 * q.ln() + (t - k) as f64 * (-q).ln_1p()).exp()
    }

    #[test]
    fn binomial_window_holds_all_but_a_bounded_tail() {
        for (t, q) in [(10, 0.3), (1800, 256.0 / 11305.0), (100_000, 1e-3), (5, 0.999)] {
            let w = binomial_window(t, q);
            let total: f64 = w.lp.iter().map(|l| l.exp()).sum();
            assert!((total - 1.0).abs() < 1e-12, "{t} {q}: {total}");
            assert!(w.log_upper < -60.0 && w.log_lower < -60.0);
            let k = w.lo + 3.min(w.lp.len() as u64 - 1);
            assert!(rel(w.lp[(k - w.lo) as usize].exp(), binom_pmf(t, q, k)) < 1e-9);
        }
    }

    #[test]
    fn mixture_is_the_direct_binomial_sum() {
        let (t, q, z, eps) = (60u64, 0.1, 2.0, 1.0);
        let want: f64 = (0..=t)
            .map(|k| binom_pmf(t, q, k) * if k == 0 { 0.0 } else { crate::accounting::gaussian_delta(eps, (k as f64).sqrt() / z).unwrap() })
            .sum();
        let got = exact_delta_for(z, q, t, eps, Scheme::PublicBatch).unwrap();
        assert!(rel(got, want) < 1e-9, "{got} {want}");
        let mix = Mixture { fixed_mu2: 0.0, binomials: vec![Binomial { trials: t, q, z }] };
        assert!(rel(mixture_delta(eps, &mix).unwrap(), want) < 1e-9);
    }

    #[test]
    fn adult_sized_silo_calibrates_as_the_spec_says() {
        // 11,305 records, batch 256, 40 epochs, δ = 1/n², ε = 1.
        let n = 11_305.0f64;
        let q = 256.0 / n;
        let b = super::super::shuffle_rounds_per_epoch(q);
        assert_eq!(b, 45);
        let delta = 1.0 / (n * n);
        let z_shuffle = exact_noise_multiplier_for(1.0, delta, q, 40 * b, Scheme::Shuffle).unwrap();
        let z_mix = exact_noise_multiplier_for(1.0, delta, q, 40 * b, Scheme::PublicBatch).unwrap();
        let z_rdp = noise_multiplier_for(1.0, delta, q, 40 * b, Scheme::PublicBatch).unwrap();
        assert!((z_shuffle - 32.5).abs() < 0.1, "{z_shuffle}");
        assert!((z_mix - 34.9).abs() < 0.1, "{z_mix}");
        assert!((z_rdp - 37.4).abs() < 0.1, "{z_rdp}");
        // The calibrated z meets the target from the feasible side, tightly.
        let e = exact_epsilon_for(z_mix, q, 40 * b, delta, Scheme::PublicBatch).unwrap();
        assert!(e <= 1.0 && e > 1.0 - 1e-6, "{e}");
        let e = exact_epsilon_for(z_shuffle, q, 40 * b, delta, Scheme::Shuffle).unwrap();
        assert!(e <= 1.0 && e > 1.0 - 1e-6, "{e}");
    }

    #[test]
    fn shuffle_is_the_gaussian_of_the_epochs_touched_and_q_one_mixture_is_the_full_batch() {
        let (z, delta) = (3.0, 1e-6);
        let q = 0.1; // 10 rounds per epoch
        for steps in [1u64, 10, 11, 95] {
            let k = steps.div_ceil(10) as f64;
            let want = gaussian_epsilon(delta, k.sqrt() / z).unwrap();
            assert!(rel(exact_epsilon_for(z, q, steps, delta, Scheme::Shuffle).unwrap(), want) < 1e-10);
        }
        let full = exact_epsilon_for(z, 1.0, 7, delta, Scheme::FullBatch).unwrap();
        assert!(rel(exact_epsilon_for(z, 1.0, 7, delta, Scheme::PublicBatch).unwrap(), full) < 1e-10);
        assert!(rel(exact_epsilon_for(z, 1.0, 7, delta, Scheme::Shuffle).unwrap(), full) < 1e-10);
        // Mixture ≤ RDP public batch, and both decrease in z.
        let o = default_orders();
        let mut last = f64::INFINITY;
        for z in [0.8, 2.0, 10.0, 40.0] {
            let m = exact_epsilon_for(z, 0.02, 2000, 1e-8, Scheme::PublicBatch).unwrap();
            let r = epsilon_for(z, 0.02, 2000, 1e-8, Scheme::PublicBatch, &o).unwrap().0;
            assert!(m <= r && m < last, "z={z}: {m} {r}");
            last = m;
        }
        assert_eq!(exact_epsilon_for(1.0, 0.1, 3, 1e-5, Scheme::WithoutReplacement).unwrap_err().argument(), "sampling");
    }

    #[test]
    fn convolved_binomials_bound_the_exact_sum_from_above_and_closely() {
        let (b1, b2) = (Binomial { trials: 40, q: 0.2, z: 2.0 }, Binomial { trials: 30, q: 0.1, z: 3.0 });
        // Small parts are enumerated exactly, large ones go through the grid.
        let w = [(binomial_window(40, 0.2), 0.25), (binomial_window(30, 0.1), 1.0 / 9.0)];
        let exact = Mu2Pmf::enumerated(0.5, &w).log_delta(0.8, 1.0);
        let grid = Mu2Pmf::convolved(0.5, &w).log_delta(0.8, 1.0);
        assert!(grid >= exact - 1e-12 && grid <= exact + 1e-3, "{grid} {exact}");
        let eps = 0.8;
        let mut want = 0.0;
        for k1 in 0..=40u64 {
            for k2 in 0..=30u64 {
                let mu2 = 0.5 + k1 as f64 / 4.0 + k2 as f64 / 9.0;
                want += binom_pmf(40, 0.2, k1) * binom_pmf(30, 0.1, k2) * crate::accounting::gaussian_delta(eps, mu2.sqrt()).unwrap();
            }
        }
        let got = mixture_delta(eps, &Mixture { fixed_mu2: 0.5, binomials: vec![b1, b2] }).unwrap();
        assert!(rel(got, want) < 1e-9, "{got} {want}");
    }
}
