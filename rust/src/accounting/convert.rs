//! Conversion of an RDP curve to (ε, δ)-DP (Balle, Barthe, Gaboardi, Hsu, Sato 2020, Thm. 21),
//! and ε / δ of `steps` steps of one scheme.

use super::{check_delta, check_epsilon, check_orders, rdp_curve, AccountingError, Event, Result, Scheme};

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
pub(super) fn epsilon_at_order(a: f64, r: f64, delta: f64) -> f64 {
    if r < 0.0 || delta * delta + (-r).exp_m1() > 0.0 {
        0.0
    } else if a > 1.01 {
        r + (-1.0 / a).ln_1p() - (delta * a).ln() / (a - 1.0)
    } else {
        f64::INFINITY
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::{default_orders, rel};

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
}
