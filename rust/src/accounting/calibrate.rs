//! Calibration: the noise multiplier that meets a target (ε, δ) after `steps` steps of a scheme.

use super::bounds::StepBound;
use super::convert::epsilon_at_order;
use super::{
    check_delta, check_epsilon, check_orders, check_scheme_rate, default_orders, AccountingError, Result, Scheme, Z_MAX,
    Z_MIN,
};

/// Orders without improvement after which [`epsilon_scan`] stops.
const SCAN_PATIENCE: usize = 16;

/// ε after `steps` steps at noise multiplier `z`, as [`epsilon_for`](super::epsilon_for), but
/// scanning the ascending `orders` and stopping once ε(α) has not improved for [`SCAN_PATIENCE`]
/// orders (the RDP term grows with α while the conversion term shrinks, so ε(α) falls, then
/// rises). The WOR differences are computed only as far as the scan goes (the
/// [`StepBound`] keeps them), which is what makes calibration fast.
/// A minimum over fewer orders is still a valid ε, and never below the full one, so a noise
/// multiplier calibrated with it never under-noises; `test_noise_multiplier_for_contract` checks
/// that it stays within the 2% contract of the full ε.
fn epsilon_scan(z: f64, q: f64, steps: u64, delta: f64, scheme: Scheme, orders: &[f64]) -> (f64, f64) {
    let mut at_order = order_epsilon(z, q, steps, delta, scheme);
    let mut eps_at = |i: usize| at_order(orders[i]);
    // Pass 1: the integer orders up to 16, every third one above, and every STRIDE-th order, ascending, until SCAN_PATIENCE / 2
    // evaluations bring no improvement on a finite ε. Pass 2: every order within a stride of
    // the best one. ε(α) falls, then rises (integer orders are often the tighter ones: the
    // fractional-order Poisson series sums magnitudes), so this finds the minimum's
    // neighbourhood; a minimum over fewer orders is still a valid ε.
    const STRIDE: usize = 6;
    let n = orders.len();
    let (mut best, mut at, mut since) = (f64::INFINITY, 0usize, 0usize);
    for (i, &a) in orders.iter().enumerate() {
        if i % STRIDE != 0 && !(a.fract() == 0.0 && (a <= 16.0 || (a as u64) % 3 == 0)) {
            continue;
        }
        let eps = eps_at(i);
        if eps < best {
            (best, at, since) = (eps, i, 0);
        } else if best.is_finite() {
            since += 1;
            if since >= SCAN_PATIENCE / 2 {
                break;
            }
        }
    }
    let first = at;
    for j in first.saturating_sub(STRIDE - 1)..(first + STRIDE).min(n) {
        if j != first {
            let eps = eps_at(j);
            if eps < best {
                (best, at) = (eps, j);
            }
        }
    }
    (best.max(0.0), orders[at])
}

/// The ε that each order certifies after `steps` steps at noise multiplier `z` (one term of
/// [`epsilon_for`](super::epsilon_for)'s minimum), computing the step's RDP order by order.
fn order_epsilon(z: f64, q: f64, steps: u64, delta: f64, scheme: Scheme) -> impl FnMut(f64) -> f64 {
    let t = super::Event { scheme, q, z, steps }.releases() as f64;
    let mut step = StepBound::new(scheme, q, z);
    move |a| epsilon_at_order(a, step.rdp(a) * t, delta)
}

/// Calibration stops once `ε(z) ≥ (1 − CALIBRATION_TOL) · target` (contract: within 2%).
pub const CALIBRATION_TOL: f64 = 0.005;

/// The smallest-found noise multiplier `z` whose ε (at `delta`, over `steps` steps of `scheme` at
/// rate `q`, default orders) is at most `epsilon` and at least `(1 − 0.005)·epsilon`.
///
/// Method: ε(z) is non-increasing in `z`. Starting at `z = 1`, the bracket is doubled (or halved)
/// until it straddles the target inside `[Z_MIN, Z_MAX] = [1e-3, 1e6]`, then narrowed by
/// safeguarded secant steps in (log z, log ε), always keeping `hi` feasible (`ε(hi) ≤ epsilon`)
/// — so the returned value never under-noises. During the search ε is evaluated by scanning the
/// orders upwards and stopping past the minimum ([`epsilon_scan`]), which can only over-state ε;
/// where ε(z) jumps past the target, the jump is located again with the full-order ε.
/// A target that `Z_MIN` already meets returns `Z_MIN` (feasible: calibration never refuses a
/// target some `z` in the bracket meets). Error: [`AccountingError::Unreachable`] if
/// `ε(Z_MAX) > epsilon`.
pub fn noise_multiplier_for(epsilon: f64, delta: f64, q: f64, steps: u64, scheme: Scheme) -> Result<f64> {
    noise_multiplier_for_orders(epsilon, delta, q, steps, scheme, &default_orders())
}

/// The smallest noise multiplier (to a ratio of 1.005, rounded up) that the ledger's PLD
/// currency certifies for (ε, δ) after `steps` steps on an empty ledger: the calibration of
/// [`super::ledger_pld_noise_multiplier_after`] with nothing held (coarse grid, bracketed by
/// the RDP answer; a few ms). It lives here, with the other calibrations, rather than in `pld.rs`,
/// which the ledger builds on: that keeps the ledger → PLD dependency one way.
pub fn pld_noise_multiplier_for(epsilon: f64, delta: f64, q: f64, steps: u64, scheme: Scheme) -> Result<f64> {
    check_epsilon(epsilon)?;
    check_delta(delta)?;
    match super::ledger::ledger_pld_noise_multiplier_after(&[], delta, epsilon, scheme, q, steps)? {
        Some(z) => Ok(z),
        None => Err(AccountingError::Unreachable { epsilon, z_max: super::AFTER_Z_MAX, epsilon_at_z_max: f64::NAN }),
    }
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
    let mut order_at_hi = sorted[0];
    let mut eps_at = |z: f64| -> Result<f64> {
        let (eps, order) = epsilon_scan(z, q, steps, delta, scheme, &sorted);
        if eps <= epsilon {
            order_at_hi = order;
        }
        Ok(eps)
    };

    let (mut lo, mut hi);
    let e1 = eps_at(1.0)?;
    let (mut e_lo, mut e_hi);
    // An order that certifies Z_MAX when the scan (which can over-state ε) did not.
    let mut seed_at_z_max = None;
    if e1 > epsilon {
        (lo, e_lo, hi) = (1.0, e1, 2.0);
        loop {
            e_hi = eps_at(hi)?;
            if e_hi <= epsilon {
                break;
            }
            if hi >= Z_MAX {
                // Refuse only what the full-order ε (what `epsilon_for` reports) refuses too.
                let mut at_order = order_epsilon(Z_MAX, q, steps, delta, scheme);
                let full: Vec<f64> = sorted.iter().map(|&a| at_order(a).max(0.0)).collect();
                match sorted.iter().zip(&full).find(|(_, &e)| e <= epsilon) {
                    Some((&a, &e)) => {
                        seed_at_z_max = Some(a);
                        e_hi = e;
                        break;
                    }
                    None => {
                        let least = full.iter().copied().fold(f64::INFINITY, f64::min);
                        return Err(AccountingError::Unreachable { epsilon, z_max: Z_MAX, epsilon_at_z_max: least });
                    }
                }
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
                // Z_MIN itself meets the target: feasible, and the least noise the bracket allows.
                return Ok(Z_MIN);
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
        if mid <= lo || mid >= hi || hi / lo - 1.0 < JUMP_WIDTH {
            break;
        }
        let e_mid = eps_at(mid)?;
        if e_mid <= epsilon {
            (hi, e_hi) = (mid, e_mid);
        } else {
            (lo, e_lo) = (mid, e_mid);
        }
    }
    // ε(z) may jump past the target (the optimal order switches as z grows, e.g. to one where
    // δ alone already covers the release): then no z lands within 2% below it, and the bracket
    // narrows to JUMP_WIDTH. The scan may place the jump late (it can over-state ε), so the jump
    // is located again with the full-order ε, which is what `epsilon_for` and the ledgers report:
    // the result is the smallest z that meets the target, to a relative 1e-9.
    let seed = seed_at_z_max.unwrap_or(order_at_hi);
    Ok(smallest_feasible(epsilon, (lo, hi), seed, Release { q, steps, delta, scheme }, &sorted))
}

/// What [`smallest_feasible`] calibrates for: `steps` releases subsampled at rate `q` under
/// `scheme`, reported at `delta`.
#[derive(Clone, Copy, Debug)]
struct Release {
    q: f64,
    steps: u64,
    delta: f64,
    scheme: Scheme,
}

/// A bracket narrower than this (relative) that still misses the 2% band is taken for a jump.
const JUMP_WIDTH: f64 = 1e-3;

/// The smallest `z ≤ hi` whose full-order ε meets `target` (to a relative 1e-9), given that order
/// `seed` certifies `hi` and a guess `floor < hi` (`bracket` = `(floor, hi)`), for `steps`
/// releases subsampled at rate `q` under `scheme`, at `delta` (`release`).
///
/// Every z that some order α certifies is feasible, so bisecting with the ε of a few orders (the
/// set `S`, never below the full ε) finds a feasible z cheaply. One full evaluation just below it
/// (stopping at the first order that certifies) either confirms that it is the smallest, or names
/// a further order for `S` (or shows that the floor itself is feasible, which is then halved), and
/// the search repeats. Each repeat grows `S` or lowers the floor, so this ends; only the last,
/// confirming evaluation visits every order.
fn smallest_feasible(target: f64, bracket: (f64, f64), seed: f64, release: Release, orders: &[f64]) -> f64 {
    let (mut floor, mut hi) = bracket;
    let Release { q, steps, delta, scheme } = release;
    let over = |z: f64, set: &[f64]| {
        let mut at_order = order_epsilon(z, q, steps, delta, scheme);
        set.iter().map(|&a| at_order(a)).fold(f64::INFINITY, f64::min).max(0.0)
    };
    // The first order certifying `z`, if any: the full-order test, stopping at a certificate.
    let certify = |z: f64| {
        let mut at_order = order_epsilon(z, q, steps, delta, scheme);
        orders.iter().copied().find(|&a| at_order(a).max(0.0) <= target)
    };
    let mut set = vec![seed];
    loop {
        // Invariant: the orders in `set` certify `hi`.
        let mut lo = floor;
        while hi / lo - 1.0 > 1e-9 {
            let mid = (lo * hi).sqrt();
            if mid <= lo || mid >= hi {
                break;
            }
            if over(mid, &set) <= target {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        let Some(a) = certify(lo) else {
            return hi;
        };
        if lo > floor && set.contains(&a) {
            return hi; // only by rounding: `set` did not certify `lo`
        }
        if !set.contains(&a) {
            set.push(a);
        }
        hi = lo;
        if lo <= floor {
            if floor <= Z_MIN {
                return Z_MIN;
            }
            floor = (floor / 2.0).max(Z_MIN);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::epsilon_for;

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
    fn a_jump_past_the_target_returns_the_smallest_feasible_z() {
        // ε(z) falls from ≈ 0.59 to 0 between z = 0.68 and z = 0.80: no z meets 0.5 within 2%.
        let (q, delta) = (1e-4, 3.9e-4);
        let z = noise_multiplier_for(0.5, delta, q, 1, Scheme::WithoutReplacement).unwrap();
        let eps = |z: f64| epsilon_for(z, q, 1, delta, Scheme::WithoutReplacement, &default_orders()).unwrap().0;
        assert!(eps(z) <= 0.5, "z={z} eps={}", eps(z));
        assert!(eps(z * (1.0 - 1e-6)) > 0.5, "z={z} is not the smallest feasible z");
    }

    #[test]
    fn the_jump_is_located_with_the_full_order_epsilon() {
        // Hypothesis found this target: the early-stopping scan over-states ε near the jump, so
        // the scan alone returned z = 0.843 although smaller z also meet the target exactly.
        for (scheme, delta) in [(Scheme::PoissonReplaceOne, 3.56e-4), (Scheme::PoissonReplaceOne, 1e-3)] {
            let q = 1e-4;
            let z = noise_multiplier_for(0.5, delta, q, 1, scheme).unwrap();
            let eps = |z: f64| epsilon_for(z, q, 1, delta, scheme, &default_orders()).unwrap().0;
            assert!(eps(z) <= 0.5, "{scheme:?} δ={delta}: z={z} eps={}", eps(z));
            assert!(eps(z) >= 0.98 * 0.5 || eps(z * (1.0 - 1e-6)) > 0.5, "{scheme:?} δ={delta}: z={z} is not the smallest");
        }
    }

    #[test]
    fn noise_multiplier_for_fails_clearly_outside_the_bracket() {
        // ε so small that even z = 1e6 cannot reach it.
        let e = noise_multiplier_for(1e-9, 1e-10, 1.0, 1_000_000, Scheme::FullBatch).unwrap_err();
        assert!(matches!(e, AccountingError::Unreachable { .. }), "{e}");
        // ε so large that z = 1e-3 already meets it: the bracket's end, which is feasible.
        assert_eq!(noise_multiplier_for(1e9, 0.5, 1e-4, 1, Scheme::Poisson).unwrap(), Z_MIN);
    }
}
