//! One ledger currency that is exact where it can be: the ε of a silo's recorded mechanisms is
//! the minimum of three valid upper bounds,
//!
//! * RDP over everything (always valid; per-step curves cached per mechanism),
//! * the exact Gaussian-mixture account ([`super::mixture`]) when every mechanism is Gaussian
//!   given public information (full batch, shuffled epochs, public batches), and
//! * the PLD currency ([`ledger_pld_epsilon`]) when some mechanism hides its batch: every
//!   mechanism's privacy-loss distribution (hidden batches by their dominating pair, the rest by
//!   the exact Gaussian mixture) composed by FFT,
//!
//! all at the ledger's δ. A mechanism is `(scheme, q, z, count)`, where `count` is the number of
//! steps, or for [`Scheme::Shuffle`] the number of Gaussian releases per record (epochs touched).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::convert::epsilon_from_rdp;
use super::mixture::{Binomial, Mixture, Mu2Pmf};
use super::pld::{gaussian_profile, Pld, PLD_LEDGER_GRID};
use super::gaussian::log_gaussian_delta;
use super::gaussian::epsilon_for_log_delta;
use super::{check_delta, default_orders, AccountingError, Event, Result, Scheme};

/// One recorded mechanism: `count` steps (releases, for shuffle) at rate `q`, noise multiplier `z`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Held {
    pub scheme: Scheme,
    pub q: f64,
    pub z: f64,
    pub count: u64,
}

type Key = (Scheme, u64, u64);

fn cache() -> &'static Mutex<HashMap<Key, Arc<Vec<f64>>>> {
    static C: OnceLock<Mutex<HashMap<Key, Arc<Vec<f64>>>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

fn orders() -> &'static [f64] {
    static O: OnceLock<Vec<f64>> = OnceLock::new();
    O.get_or_init(default_orders)
}

/// Per-release RDP curve of one mechanism over the default orders (cached: a silo charges the
/// same mechanism every epoch).
fn per_release(scheme: Scheme, q: f64, z: f64) -> Result<Arc<Vec<f64>>> {
    let key = (scheme, q.to_bits(), z.to_bits());
    if let Some(c) = cache().lock().map_err(|_| AccountingError::NoOrders)?.get(&key) {
        return Ok(c.clone());
    }
    // Shuffle's per-release bound is the full Gaussian; count already holds the releases.
    let s = if scheme == Scheme::Shuffle { Scheme::FullBatch } else { scheme };
    let qq = if scheme == Scheme::Shuffle { 1.0 } else { q };
    let curve = Arc::new(super::rdp_curve(&Event { scheme: s, q: qq, z, steps: 1 }, orders())?);
    let mut c = cache().lock().map_err(|_| AccountingError::NoOrders)?;
    if c.len() > 4096 {
        c.clear();
    }
    c.insert(key, curve.clone());
    Ok(curve)
}

fn check_held(h: &Held) -> Result<()> {
    let q = if h.scheme == Scheme::Shuffle { 1.0 } else { h.q };
    Event { scheme: if h.scheme == Scheme::Shuffle { Scheme::FullBatch } else { h.scheme }, q, z: h.z, steps: 1 }.check()?;
    if h.scheme == Scheme::Shuffle {
        super::check_rate(h.q)?;
    }
    Ok(())
}

/// ε of the RDP composition of `held` at `delta` (0 if nothing is held).
pub fn ledger_rdp_epsilon(held: &[Held], delta: f64) -> Result<f64> {
    check_delta(delta)?;
    let o = orders();
    let mut total = vec![0.0; o.len()];
    let mut any = false;
    for h in held {
        check_held(h)?;
        if h.count == 0 {
            continue;
        }
        any = true;
        let c = per_release(h.scheme, h.q, h.z)?;
        let t = h.count as f64;
        for (a, r) in total.iter_mut().zip(c.iter()) {
            *a += t * r;
        }
    }
    if !any {
        return Ok(0.0);
    }
    Ok(epsilon_from_rdp(o, &total, delta)?.0)
}

/// `held` split into the law of μ² of its mechanisms that are Gaussian given public information
/// and its mechanisms that hide their batch (equal scheme, rate and noise merged into one).
fn split_held(held: &[Held]) -> Result<(Mixture, Vec<Held>)> {
    let mut mix = Mixture::default();
    let mut hidden: Vec<Held> = Vec::new();
    for h in held {
        check_held(h)?;
        if h.count == 0 {
            continue;
        }
        match h.scheme {
            Scheme::FullBatch | Scheme::Shuffle => mix.fixed_mu2 += h.count as f64 / (h.z * h.z),
            // Equal (q, z) merge exactly: Bin(a, q) + Bin(b, q) = Bin(a + b, q).
            Scheme::PublicBatch => match mix.binomials.iter_mut().find(|b| b.q == h.q && b.z == h.z) {
                Some(b) => b.trials += h.count,
                None => mix.binomials.push(Binomial { trials: h.count, q: h.q, z: h.z }),
            },
            _ => match hidden.iter_mut().find(|x| x.scheme == h.scheme && x.q == h.q && x.z == h.z) {
                Some(x) => x.count += h.count,
                None => hidden.push(*h),
            },
        }
    }
    Ok((mix, hidden))
}

/// The law of μ² of `held` if every mechanism is Gaussian given public information, else `None`.
pub fn ledger_mixture(held: &[Held]) -> Result<Option<Mixture>> {
    let (mix, hidden) = split_held(held)?;
    Ok(if hidden.is_empty() { Some(mix) } else { None })
}

/// ε of the exact account of `held` at `delta`, `+∞` when some mechanism hides its batch.
pub fn ledger_exact_epsilon(held: &[Held], delta: f64) -> Result<f64> {
    check_delta(delta)?;
    Ok(match ledger_mixture(held)? {
        None => f64::INFINITY,
        Some(m) if m.fixed_mu2 == 0.0 && m.binomials.is_empty() => 0.0,
        Some(m) => {
            let pmf = Mu2Pmf::of(&m);
            epsilon_for_log_delta(delta.ln(), |e| pmf.log_delta(e, 1.0))
        }
    })
}

type DeltaKey = (u64, u64, u64);

/// `δ_Gauss(ε; √(fixed + k/z²))` for `k = 0, 1, …`, cached per `(ε, z, fixed)`: a silo charging
/// epoch after epoch asks for the same budget ε with the same z, only the binomial's T grows.
fn deltas_by_k() -> &'static Mutex<HashMap<DeltaKey, Vec<f64>>> {
    static C: OnceLock<Mutex<HashMap<DeltaKey, Vec<f64>>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// `δ(ε)` of `fixed + K/z²`, `K ~ Bin(t, q)`: the same sum as [`Mu2Pmf::log_delta`] over the same
/// truncated window as [`binomial_window`] (terms below `e^{−70}` of the mode; the upper tail
/// bounded by a geometric series and charged δ = 1, the lower tail moved up to the window's
/// lowest point), in linear space, with the Gaussian factors taken from [`deltas_by_k`].
fn single_binomial_delta(eps: f64, fixed: f64, b: &Binomial) -> Result<f64> {
    let (t, q) = (b.trials, b.q);
    let key = (eps.to_bits(), b.z.to_bits(), fixed.to_bits());
    let mut c = deltas_by_k().lock().map_err(|_| AccountingError::NoOrders)?;
    if c.len() > 4096 {
        c.clear();
    }
    let d = c.entry(key).or_default();
    let need = |k: u64, d: &mut Vec<f64>| {
        while d.len() as u64 <= k {
            let kk = d.len() as f64;
            d.push(log_gaussian_delta(eps, (fixed + kk / (b.z * b.z)).sqrt()).exp());
        }
    };
    if q >= 1.0 {
        need(t, d);
        return Ok(d[t as usize]);
    }
    let odds = q / (1.0 - q);
    let floor = (-70.0f64).exp();
    let k0 = (((t + 1) as f64 * q).floor() as u64).min(t);
    need(k0, d);
    // Relative to p(k0) = 1: walk up and down with p(k+1)/p(k) = (t−k)/(k+1)·q/(1−q).
    let (mut total, mut acc) = (1.0, d[k0 as usize]);
    let (mut k, mut p) = (k0, 1.0);
    while k < t {
        let r = (t - k) as f64 / (k + 1) as f64 * odds;
        p *= r;
        k += 1;
        if p < floor {
            let rr = if k < t { (t - k) as f64 / (k + 1) as f64 * odds } else { 0.0 };
            let tail = p / (1.0 - rr.min(1.0 - 1e-16));
            total += tail;
            acc += tail; // δ ≤ 1
            break;
        }
        need(k, d);
        total += p;
        acc += p * d[k as usize];
    }
    let (mut k, mut p) = (k0, 1.0);
    let mut lowest = k0;
    while k > 0 {
        let r = k as f64 / (t - k + 1) as f64 / odds; // p(k−1)/p(k)
        p *= r;
        k -= 1;
        if p < floor {
            let rr = if k > 0 { k as f64 / (t - k + 1) as f64 / odds } else { 0.0 };
            let tail = p / (1.0 - rr.min(1.0 - 1e-16));
            total += tail;
            acc += tail * d[lowest as usize];
            break;
        }
        total += p;
        acc += p * d[k as usize];
        lowest = k;
    }
    Ok((acc / total).min(1.0))
}

/// Whether `held` is (budget, δ)-DP by either accountant: the exact δ at `budget` when it
/// applies (no root finding; cached Gaussian factors), else / then RDP (cached curves).
pub fn ledger_admits(held: &[Held], delta: f64, budget: f64) -> Result<bool> {
    check_delta(delta)?;
    if let Some(m) = ledger_mixture(held)? {
        let ld = match m.binomials.as_slice() {
            [] if m.fixed_mu2 == 0.0 => f64::NEG_INFINITY,
            [b] => single_binomial_delta(budget, m.fixed_mu2, b)?.ln(),
            _ => Mu2Pmf::of(&m).log_delta(budget, 1.0),
        };
        if ld <= delta.ln() {
            return Ok(true);
        }
    }
    if ledger_rdp_epsilon(held, delta)? <= budget {
        return Ok(true);
    }
    Ok(match ledger_pld(held, delta)? {
        Some(p) => p.delta(budget) <= delta,
        None => false,
    })
}

/// ε of `held` at `delta` by the ledger's filters: the minimum of RDP and the exact account
/// (`exact = true`), or RDP alone (`exact = false`, the `accountant="rdp"` option). The ledger's
/// currency is the minimum of this and [`ledger_pld_epsilon`]; calibrations of rounds charged
/// as they are answered use this one (the PLD prices only runs charged in full at plan time).
pub fn ledger_epsilon(held: &[Held], delta: f64, exact: bool) -> Result<f64> {
    let rdp = ledger_rdp_epsilon(held, delta)?;
    Ok(if exact { rdp.min(ledger_exact_epsilon(held, delta)?) } else { rdp })
}

/// Largest noise multiplier the calibration after a ledger looks at before it gives up (pure noise).
pub const AFTER_Z_MAX: f64 = 1e7;

/// Smallest noise multiplier `z` (to relative 0.5%) such that what `held` records plus `steps`
/// rounds of `scheme` at rate `q` and multiplier `z` compose to at most `epsilon` at `delta` in the
/// ledger's currency ([`ledger_epsilon`]). Geometric bisection on `z` (ε of the composition does
/// not increase with `z`) from the bracket `[1e-3, 1]`, grown ×4 until feasible; the returned `z`
/// is the upper, feasible end of the final bracket. `None` when even [`AFTER_Z_MAX`] does not meet
/// the target (nothing useful is left of the budget).
pub fn ledger_noise_multiplier_after(
    held: &[Held],
    delta: f64,
    epsilon: f64,
    scheme: Scheme,
    q: f64,
    steps: u64,
    exact: bool,
) -> Result<Option<f64>> {
    let count = if scheme == Scheme::Shuffle { super::shuffle_releases(q, steps) } else { steps };
    let mut with: Vec<Held> = held.to_vec();
    with.push(Held { scheme, q, z: 1.0, count });
    let last = with.len() - 1;
    let mut eps = |z: f64| -> Result<f64> {
        with[last].z = z;
        ledger_epsilon(&with, delta, exact)
    };
    let (mut lo, mut hi) = (1e-3, 1.0);
    while eps(hi)? > epsilon {
        lo = hi;
        hi *= 4.0;
        if hi > AFTER_Z_MAX {
            return Ok(None);
        }
    }
    while hi / lo > 1.005 {
        let mid = (lo * hi).sqrt();
        if eps(mid)? <= epsilon {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(Some(hi))
}

// ------------------------------------------------------------------------------------------
// The PLD currency (docs/accounting.md, "The PLD currency").

type PldKey = (u8, u64, u64, u64, u64);

fn pld_cache() -> &'static Mutex<HashMap<PldKey, Arc<Pld>>> {
    static C: OnceLock<Mutex<HashMap<PldKey, Arc<Pld>>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// `f()` cached under `key` (the cache is cleared when it holds 256 PLDs).
fn cached_pld(key: PldKey, f: impl FnOnce() -> Result<Pld>) -> Result<Arc<Pld>> {
    if let Some(p) = pld_cache().lock().map_err(|_| AccountingError::NoOrders)?.get(&key) {
        return Ok(p.clone());
    }
    let p = Arc::new(f()?);
    let mut c = pld_cache().lock().map_err(|_| AccountingError::NoOrders)?;
    if c.len() >= 256 {
        c.clear();
    }
    c.insert(key, p.clone());
    Ok(p)
}

/// The PLD of `count` steps of one hidden-batch mechanism on the ledger's grid: the symmetric
/// pair (the larger δ of the remove and add directions at every ε) for fixed-size batches and
/// for add/remove Poisson, the replace pair for `poisson_replace_one`.
fn hidden_pld(scheme: Scheme, q: f64, z: f64, count: u64, tail: f64) -> Result<Arc<Pld>> {
    let s = if scheme == Scheme::Poisson { Scheme::WithoutReplacement } else { scheme };
    cached_pld((s as u8, q.to_bits(), z.to_bits(), count, tail.to_bits()), || {
        let mut p = super::pld::composed_coarse(s, q, z, count, tail)?;
        Ok(p.remove(0))
    })
}

/// The PLD of everything in `held` that is Gaussian given public information (the exact
/// mixture's pair, discretised by connect-the-dots), `None` if there is none.
fn public_pld(mix: &Mixture, tail: f64) -> Result<Option<Arc<Pld>>> {
    if mix.fixed_mu2 == 0.0 && mix.binomials.is_empty() {
        return Ok(None);
    }
    let h = PLD_LEDGER_GRID;
    if mix.binomials.is_empty() {
        let mu = mix.fixed_mu2.sqrt();
        return Ok(Some(cached_pld((u8::MAX, mu.to_bits(), 0, 0, tail.to_bits()), || {
            let mut p = Pld::of_profile(h, |e| gaussian_profile(mu, e));
            p.truncate_tails(tail);
            Ok(p)
        })?));
    }
    // A symmetric pair (each Gaussian component is), so δ(ε) = 1 − e^ε + e^ε δ(−ε) below 0.
    let pmf = Mu2Pmf::of(mix);
    let prof = |e: f64| -> f64 {
        let d = if e >= 0.0 {
            pmf.log_delta(e, 1.0).exp()
        } else {
            let g = e.exp();
            1.0 - g + g * pmf.log_delta(-e, 1.0).exp()
        };
        d.clamp((1.0 - e.exp()).max(0.0), 1.0)
    };
    let mut p = Pld::of_profile(h, prof);
    p.truncate_tails(tail);
    Ok(Some(Arc::new(p)))
}

/// The PLD of `held` in the ledger's PLD currency, and whether some mechanism hides its batch
/// (only then is the currency computed: otherwise the exact account is already tight).
fn ledger_pld(held: &[Held], delta: f64) -> Result<Option<Pld>> {
    let tail = super::pld::tail_for(delta);
    let (mix, hidden) = split_held(held)?;
    if hidden.is_empty() {
        return Ok(None);
    }
    let mut acc: Option<Pld> = public_pld(&mix, tail)?.map(|p| (*p).clone());
    for h in &hidden {
        let p = hidden_pld(h.scheme, h.q, h.z, h.count, tail)?;
        acc = Some(match acc {
            None => (*p).clone(),
            Some(a) => a.compose(&p, tail),
        });
    }
    Ok(acc)
}

/// ε of `held` at `delta` by the PLD currency: the composition of every mechanism's PLD
/// (hidden batches by their dominating pair, the rest by the exact Gaussian mixture), `+∞`
/// when no mechanism hides its batch (the exact account applies then).
pub fn ledger_pld_epsilon(held: &[Held], delta: f64) -> Result<f64> {
    check_delta(delta)?;
    Ok(match ledger_pld(held, delta)? {
        None => f64::INFINITY,
        Some(p) => epsilon_for_log_delta(delta.ln(), |e| p.delta(e).ln()),
    })
}

/// Smallest noise multiplier `z` (to a ratio of 1.005, rounded up) such that what `held`
/// records plus `steps` steps of the hidden-batch `scheme` at rate `q` and multiplier `z` meet
/// (ε, δ) in the PLD currency. The PLD of `held` is composed once; the search starts from the
/// RDP answer (feasible in practice: the PLD of these pairs is below RDP) and runs regula falsi
/// on `log z` ([`super::gaussian::solve_feasible`], which returns the feasible end). `None` when
/// even [`AFTER_Z_MAX`] does not meet ε.
pub fn ledger_pld_noise_multiplier_after(
    held: &[Held],
    delta: f64,
    epsilon: f64,
    scheme: Scheme,
    q: f64,
    steps: u64,
) -> Result<Option<f64>> {
    check_delta(delta)?;
    super::check_epsilon(epsilon)?;
    super::check_rate(q)?;
    if !super::pld::is_pld_scheme(scheme) {
        return Err(AccountingError::NotExact(scheme));
    }
    if steps == 0 {
        return Err(AccountingError::Steps);
    }
    let tail = super::pld::tail_for(delta);
    // `held` alone: its hidden part through ledger_pld, its public part as a PLD of its own.
    let others: Option<Pld> = if held.iter().any(|h| super::pld::is_pld_scheme(h.scheme) && h.count > 0) {
        ledger_pld(held, delta)?
    } else {
        let mix = ledger_mixture(held)?.unwrap_or_default();
        public_pld(&mix, tail)?.map(|p| (*p).clone())
    };
    // Search variable u = log z; f(u) = log ε(e^u) − log ε_target ≤ 0 is feasible, with ε(z)
    // the PLD currency's ε at δ of everything held plus the run. ε is close to ∝ 1/z (exactly
    // so for a Gaussian at small μ), so f is close to linear in u with slope −1, and secant
    // steps land near the root at once.
    let target = epsilon.ln();
    let mut memo: HashMap<u64, f64> = HashMap::new();
    let mut f = |u: f64| -> f64 {
        *memo.entry(u.to_bits()).or_insert_with(|| {
            let run = match super::pld::composed_coarse(scheme, q, u.exp(), steps, tail) {
                Ok(mut p) => p.remove(0),
                Err(_) => return f64::INFINITY,
            };
            let all = match &others {
                None => run,
                Some(o) => o.compose(&run, tail),
            };
            let e = epsilon_for_log_delta(delta.ln(), |e| all.delta(e).ln());
            if e.is_nan() {
                return f64::INFINITY; // never read a NaN as feasible (f64::max would drop it)
            }
            e.max(1e-300).ln() - target
        })
    };
    // RDP finds nothing left after an earlier PLD-priced run (RDP prices it higher): start at 1.
    let start = ledger_noise_multiplier_after(held, delta, epsilon, scheme, q, steps, true)?.unwrap_or(1.0);
    // Bracket by secant steps from the RDP answer (first step: slope −1), each at most ×4 or ÷4
    // in z and aimed 0.5% past the root, so that the next point lands on its other side.
    let (mut u0, mut f0) = (start.ln(), f(start.ln()));
    let mut u1 = u0 + f0.clamp(-4f64.ln(), 4f64.ln()) + if f0 > 0.0 { 0.005 } else { -0.005 };
    let mut f1 = f(u1);
    let mut tries = 0;
    while (f0 <= 0.0) == (f1 <= 0.0) {
        tries += 1;
        if tries > 60 || u1 > AFTER_Z_MAX.ln() {
            return Ok(None);
        }
        if u1 < super::Z_MIN.ln() {
            // Feasible down to the floor only if the floor itself is: evaluate it.
            let um = super::Z_MIN.ln();
            let fm = f(um);
            if fm <= 0.0 {
                return Ok(Some(super::Z_MIN));
            }
            (u1, f1) = (um, fm);
            continue;
        }
        let slope = (f1 - f0) / (u1 - u0);
        // f decreases in u: an infeasible point (f > 0, or +inf where the PLD's window cannot
        // certify ε) needs more noise, a feasible one less.
        let step = if slope.is_finite() && slope < 0.0 { -f1 / slope } else if f1 > 0.0 { 4f64.ln() } else { -4f64.ln() };
        let step = step.clamp(-4f64.ln(), 4f64.ln()) + if f1 > 0.0 { 0.005 } else { -0.005 };
        (u0, f0) = (u1, f1);
        u1 += step;
        f1 = f(u1);
    }
    let (good, bad) = if f0 <= 0.0 { (u0, u1) } else { (u1, u0) };
    Ok(Some(super::gaussian::solve_feasible(good, bad, 1.005f64.ln(), f).exp()))
}

/// [`ledger_admits`] for many ledgers at once (one call per epoch for all silos): entry `i` is
/// `(held_i, δ_i, budget_i)`. Entries that are equal (silos of one size with the same history)
/// are evaluated once; distinct ones in parallel when there are many.
pub fn ledgers_admit(entries: &[(Vec<Held>, f64, f64)]) -> Result<Vec<bool>> {
    use rayon::prelude::*;
    // Group equal entries: the answer is a function of (held, δ, budget) only.
    let mut first: HashMap<Vec<(u8, u64, u64, u64)>, usize> = HashMap::new();
    let mut rep: Vec<usize> = Vec::with_capacity(entries.len());
    let mut unique: Vec<usize> = Vec::new();
    for (i, (held, delta, budget)) in entries.iter().enumerate() {
        let mut key: Vec<(u8, u64, u64, u64)> =
            held.iter().map(|h| (h.scheme as u8, h.q.to_bits(), h.z.to_bits(), h.count)).collect();
        key.push((u8::MAX, delta.to_bits(), budget.to_bits(), 0));
        let j = *first.entry(key).or_insert_with(|| {
            unique.push(i);
            unique.len() - 1
        });
        rep.push(j);
    }
    let answer = |&i: &usize| ledger_admits(&entries[i].0, entries[i].1, entries[i].2);
    let answers: Vec<bool> = if unique.len() >= 16 {
        unique.par_iter().map(answer).collect::<Result<_>>()?
    } else {
        unique.iter().map(answer).collect::<Result<_>>()?
    };
    Ok(rep.into_iter().map(|j| answers[j]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::{exact_epsilon_for, rel, shuffle_releases};

    #[test]
    fn exact_currency_is_the_minimum_and_merges_equal_mechanisms() {
        let (q, z, d) = (256.0 / 11305.0, 34.9, 1.0 / 11305f64.powi(2));
        let one = [Held { scheme: Scheme::PublicBatch, q, z, count: 1800 }];
        let split: Vec<Held> = (0..40).map(|_| Held { scheme: Scheme::PublicBatch, q, z, count: 45 }).collect();
        let e1 = ledger_exact_epsilon(&one, d).unwrap();
        assert_eq!(e1, ledger_exact_epsilon(&split, d).unwrap());
        assert!(rel(e1, exact_epsilon_for(z, q, 1800, d, Scheme::PublicBatch).unwrap()) < 1e-12);
        assert!(e1 < ledger_rdp_epsilon(&one, d).unwrap());
        assert!(ledger_admits(&one, d, e1 * (1.0 + 1e-9)).unwrap());
        // The cached linear-space sum is the mixture sum.
        let b = Binomial { trials: 1800, q, z };
        let m = Mixture { fixed_mu2: 0.01, binomials: vec![b] };
        let want = Mu2Pmf::of(&m).log_delta(0.9, 1.0).exp();
        assert!(rel(single_binomial_delta(0.9, 0.01, &b).unwrap(), want) < 1e-10);
        assert!(!ledger_admits(&one, d, e1 * (1.0 - 1e-6)).unwrap());
        // Shuffle: count is K.
        let k = shuffle_releases(q, 1800);
        let s = [Held { scheme: Scheme::Shuffle, q, z, count: k }];
        assert!(rel(ledger_exact_epsilon(&s, d).unwrap(), exact_epsilon_for(z, q, 1800, d, Scheme::Shuffle).unwrap()) < 1e-12);
        // A hidden batch leaves only RDP.
        let h = [Held { scheme: Scheme::WithoutReplacement, q, z: 3.0, count: 10 }];
        assert_eq!(ledger_exact_epsilon(&h, d).unwrap(), f64::INFINITY);
        assert_eq!(ledger_rdp_epsilon(&[], d).unwrap(), 0.0);
    }

    #[test]
    fn calibration_after_a_ledger_meets_the_target_within_half_a_percent() {
        let (q, d, n) = (256.0 / 11305.0, 1.0 / 11305f64.powi(2), 1800);
        let hist = [Held { scheme: Scheme::FullBatch, q: 1.0, z: 20.0, count: 1 }];
        for exact in [true, false] {
            let z = ledger_noise_multiplier_after(&hist, d, 1.0, Scheme::PublicBatch, q, n, exact).unwrap().unwrap();
            let mut with = hist.to_vec();
            with.push(Held { scheme: Scheme::PublicBatch, q, z, count: n });
            assert!(ledger_epsilon(&with, d, exact).unwrap() <= 1.0);
            with[1].z = z / 1.006;
            assert!(ledger_epsilon(&with, d, exact).unwrap() > 1.0, "z is not the smallest to 0.5%");
        }
        // Shuffle: the event counts epochs, not rounds.
        let z = ledger_noise_multiplier_after(&[], d, 1.0, Scheme::Shuffle, q, n, true).unwrap().unwrap();
        let k = shuffle_releases(q, n);
        assert!(ledger_epsilon(&[Held { scheme: Scheme::Shuffle, q, z, count: k }], d, true).unwrap() <= 1.0);
        // Nothing left: None, not a huge z.
        let spent = [Held { scheme: Scheme::FullBatch, q: 1.0, z: 0.05, count: 1 }];
        assert_eq!(ledger_noise_multiplier_after(&spent, d, 1.0, Scheme::PublicBatch, q, n, true).unwrap(), None);
    }

    #[test]
    fn many_ledgers_admit_as_each_alone() {
        let (q, d) = (256.0 / 11305.0, 1.0 / 11305f64.powi(2));
        let entries: Vec<(Vec<Held>, f64, f64)> = (0..40)
            .map(|i| {
                let held = vec![Held { scheme: Scheme::PublicBatch, q, z: 30.0 + (i % 7) as f64, count: 45 * (1 + i % 5) }];
                (held, d, [0.05, 0.2, 1.0][i as usize % 3])
            })
            .collect();
        let many = ledgers_admit(&entries).unwrap();
        for ((held, delta, budget), got) in entries.iter().zip(&many) {
            assert_eq!(*got, ledger_admits(held, *delta, *budget).unwrap());
        }
        assert!(many.iter().any(|&b| b) && many.iter().any(|&b| !b));
        assert!(ledgers_admit(&[]).unwrap().is_empty());
    }

    #[test]
    fn pld_calibration_from_an_infeasible_start_goes_up_not_to_the_floor() {
        // After a PLD-priced run RDP finds nothing left, so the search starts at z = 1, where a
        // run of large batches has an infinite PLD ε: the bracket must grow z, and the floor
        // Z_MIN may be returned only if it is feasible.
        let (q, t, d) = (256.0 / 11305.0, 1800u64, 1.0 / 11305f64.powi(2));
        let z1 = super::super::pld_noise_multiplier_for(0.8, d, q, t, Scheme::WithoutReplacement).unwrap();
        let first = Held { scheme: Scheme::WithoutReplacement, q, z: z1, count: t };
        let z = ledger_pld_noise_multiplier_after(&[first], d, 1.0, Scheme::WithoutReplacement, 0.5, 200)
            .unwrap()
            .unwrap();
        let run = Held { scheme: Scheme::WithoutReplacement, q: 0.5, z, count: 200 };
        assert!(ledger_pld_epsilon(&[first, run], d).unwrap() <= 1.0, "z = {z}");
        let tighter = Held { z: z / 1.006, ..run };
        assert!(ledger_pld_epsilon(&[first, tighter], d).unwrap() > 1.0, "z = {z} is not the smallest to 0.5%");
    }

    #[test]
    fn pld_currency_composes_the_histogram_with_a_hidden_run() {
        let (q, t, d) = (256.0 / 11305.0, 1800u64, 1.0 / 11305f64.powi(2));
        let hist = Held { scheme: Scheme::FullBatch, q: 1.0, z: 20.0, count: 1 };
        // Nothing hidden: no PLD currency (the exact account is tight there).
        assert_eq!(ledger_pld_epsilon(&[hist], d).unwrap(), f64::INFINITY);
        let z = ledger_pld_noise_multiplier_after(&[hist], d, 1.0, Scheme::WithoutReplacement, q, t).unwrap().unwrap();
        let run = Held { scheme: Scheme::WithoutReplacement, q, z, count: t };
        let both = ledger_pld_epsilon(&[hist, run], d).unwrap();
        assert!(both <= 1.0, "{both}");
        let tighter = Held { z: z / 1.006, ..run };
        assert!(ledger_pld_epsilon(&[hist, tighter], d).unwrap() > 1.0, "z is not the smallest to 0.5%");
        // The run alone costs less than with the histogram, and the PLD is below RDP.
        let alone = ledger_pld_epsilon(&[run], d).unwrap();
        assert!(alone < both && both < ledger_rdp_epsilon(&[hist, run], d).unwrap());
        // Admission goes by the PLD when RDP refuses.
        assert!(ledger_rdp_epsilon(&[hist, run], d).unwrap() > 1.0);
        assert!(ledger_admits(&[hist, run], d, 1.0).unwrap());
        assert!(!ledger_admits(&[hist, tighter], d, 1.0).unwrap());
        // A second PLD-priced run after the first, where RDP finds nothing left: the PLD does.
        let first = Held { z: z * 1.5, ..run };
        assert!(ledger_rdp_epsilon(&[hist, first], d).unwrap() > 1.0);
        let z2 = ledger_pld_noise_multiplier_after(&[hist, first], d, 1.0, Scheme::WithoutReplacement, q, t)
            .unwrap()
            .unwrap();
        let second = Held { z: z2, ..run };
        assert!(ledger_pld_epsilon(&[hist, first, second], d).unwrap() <= 1.0 && z2 > z);
        // Equal mechanisms merge: two halves cost what the whole does.
        let half = Held { count: t / 2, ..run };
        assert_eq!(ledger_pld_epsilon(&[hist, half, half], d).unwrap(), both);
        // An empty ledger: the same as the public calibration.
        let z0 = ledger_pld_noise_multiplier_after(&[], d, 1.0, Scheme::WithoutReplacement, q, t).unwrap().unwrap();
        assert_eq!(z0, super::super::pld_noise_multiplier_for(1.0, d, q, t, Scheme::WithoutReplacement).unwrap());
        assert!(z0 < z && z0 < 0.55 * super::super::noise_multiplier_for(1.0, d, q, t, Scheme::WithoutReplacement).unwrap());
        // Not for schemes the exact account prices.
        assert!(ledger_pld_noise_multiplier_after(&[], d, 1.0, Scheme::Shuffle, q, t).is_err());
    }
}
