//! One ledger currency that is exact where it can be: the ε of a silo's recorded mechanisms is
//! the minimum of two valid upper bounds,
//!
//! * RDP over everything (always valid; per-step curves cached per mechanism), and
//! * the exact Gaussian-mixture account ([`super::mixture`]) when every mechanism is Gaussian
//!   given public information (full batch, shuffled epochs, public batches),
//!
//! both at the ledger's δ. A mechanism is `(scheme, q, z, count)`, where `count` is the number of
//! steps, or for [`Scheme::Shuffle`] the number of Gaussian releases per record (epochs touched).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::convert::epsilon_from_rdp;
use super::mixture::{Binomial, Mixture, Mu2Pmf};
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

/// The law of μ² of `held` if every mechanism is Gaussian given public information, else `None`.
pub fn ledger_mixture(held: &[Held]) -> Result<Option<Mixture>> {
    let mut mix = Mixture::default();
    for h in held {
        check_held(h)?;
        if h.count == 0 {
            continue;
        }
        match h.scheme {
            Scheme::FullBatch | Scheme::Shuffle => mix.fixed_mu2 += h.count as f64 / (h.z * h.z),
            Scheme::PublicBatch => {
                // Equal (q, z) merge exactly: Bin(a, q) + Bin(b, q) = Bin(a + b, q).
                match mix.binomials.iter_mut().find(|b| b.q == h.q && b.z == h.z) {
                    Some(b) => b.trials += h.count,
                    None => mix.binomials.push(Binomial { trials: h.count, q: h.q, z: h.z }),
                }
            }
            _ => return Ok(None),
        }
    }
    Ok(Some(mix))
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
    Ok(ledger_rdp_epsilon(held, delta)? <= budget)
}

/// ε of `held` at `delta` in the ledger's currency: the minimum of RDP and the exact account
/// (`exact = true`), or RDP alone (`exact = false`, the `accountant="rdp"` option).
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
}
