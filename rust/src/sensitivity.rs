//! Replace-one sensitivities of a silo's noised message parts, and the noise they call for.
//!
//! Derivations (written out in `docs/privacy.md`):
//!
//! * `Attribute` mode, neighbour = one record's `s` changed from `r` to `r'`.
//!   - `b̃_i` is clipped to norm `C_θ`, so it moves by at most `2 C_θ`: `Δ_θ = 2 C_θ / m`.
//!   - `c_i = 2 p(r)^{-1/2} e_r F_iᵀ` moves to `2 p(r')^{-1/2} e_{r'} F_iᵀ`; the two lie in
//!     different rows, so the change has norm `2 ‖F_i‖ (1/p(r) + 1/p(r'))^{1/2}`. With
//!     `‖F_i‖₂ ≤ 1` and `p(r), p(r')` at least the two smallest group proportions `ρ₁ ≤ ρ₂` of
//!     the record's block: `Δ_W = (2/m) max_blocks (1/ρ₁ + 1/ρ₂)^{1/2} ≤ 2√2 / (m √ρ)`.
//!   - Row-scaled (`w_rows`): `h_W`'s row `(b, r)` is `2 p(r|b)^{-1/2}` times the unscaled sum
//!     `U_{b,r} = Σ_{i: b_i = b, s_i = r} F_i / m`. Moving one record from row `r` to `r'` moves
//!     `U` by `√2 ‖F_i‖ / m ≤ √2 / m` whatever the groups. Noise of std `σ p(r|b)^{-1/2}` on row
//!     `(b, r)` of `h_W` is noise of std `σ/2` on `U` (post-processing by the released
//!     proportions), so the part's ratio `Δ/σ` is that of sensitivity `Δ_W = 2√2 / m` in units
//!     of `p^{-1/2}`: the noise of each row follows its own group's scale instead of the two
//!     rarest groups'.
//!   - `g`, `a_θ`, `a_W` do not depend on `s` and are sent exactly.
//! * `Record` mode, neighbour = one whole record replaced: every per-record part is clipped to its
//!   norm `C_p`, so `Δ_p = 2 C_p / m`.
//!
//! The parts are released together, each with its own Gaussian noise `σ_p`. Dividing part `p` by
//! `σ_p` makes one Gaussian mechanism with unit noise and sensitivity `(Σ_p (Δ_p/σ_p)²)^{1/2}`,
//! so the round is accounted ONCE with the effective noise multiplier
//! `z = (Σ_p (Δ_p/σ_p)²)^{-1/2}`. We split the budget evenly: `σ_p = z √P Δ_p` for `P` parts.

use crate::psi::{Fairness, Protect};

/// Sensitivities of the noised parts, in the order (loss, ψ_θ, ψ_W). In `Attribute` mode the loss
/// gradient is not noised and its entry is 0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sensitivities {
    pub loss: f64,
    pub theta: f64,
    pub w: f64,
}

impl Sensitivities {
    /// The noised parts' sensitivities (1 or 3 parts are never used; 2 in attribute mode).
    pub fn parts(&self, protect: Protect) -> Vec<f64> {
        match protect {
            Protect::Attribute { .. } => vec![self.theta, self.w],
            Protect::Record { .. } => vec![self.loss, self.theta, self.w],
        }
    }
}

/// Replace-one sensitivities for batch denominator `denom`, `k` groups and the table
/// `inv_sqrt_ps` (`blocks × k`, `p(s=r|block)^{-1/2}`). With `w_rows` (attribute mode), `w` is
/// the sensitivity per unit of `p^{-1/2}` of the row-scaled noise (`2√2 / m`).
pub fn sensitivities(
    protect: Protect,
    fairness: Fairness,
    k: usize,
    inv_sqrt_ps: &[f64],
    denom: f64,
    w_rows: bool,
) -> Sensitivities {
    match protect {
        Protect::Attribute { clip_theta } if w_rows => {
            let _ = (fairness, k, inv_sqrt_ps);
            Sensitivities { loss: 0.0, theta: 2.0 * clip_theta / denom, w: 2.0 * 2f64.sqrt() / denom }
        }
        Protect::Attribute { clip_theta } => {
            let blocks = inv_sqrt_ps.len() / k;
            let mut worst: f64 = 0.0;
            for b in 0..blocks {
                // The two largest 1/p(r) of the block: the two smallest proportions.
                let mut inv: Vec<f64> = inv_sqrt_ps[b * k..(b + 1) * k].iter().map(|v| v * v).collect();
                inv.sort_by(|a, b| b.total_cmp(a));
                worst = worst.max((inv[0] + inv[1]).sqrt());
            }
            let _ = fairness;
            Sensitivities { loss: 0.0, theta: 2.0 * clip_theta / denom, w: 2.0 * worst / denom }
        }
        Protect::Record { clip_loss, clip_theta, clip_w } => Sensitivities {
            loss: 2.0 * clip_loss / denom,
            theta: 2.0 * clip_theta / denom,
            w: 2.0 * clip_w / denom,
        },
    }
}

/// Largest norm of ONE record's contribution to each noised part (its "add/remove"
/// sensitivity), in the order (loss, ψ_θ, ψ_W). This is what the Poisson replace-one bound of
/// `accounting.rs` measures its noise multiplier against: a record that is not sampled
/// contributes nothing, one that is contributes at most this much.
///
/// * `Attribute`: `‖b̃_i‖ ≤ C_θ`, and `‖c_i‖ = 2 ‖F_i‖ p(s_i)^{-1/2} ≤ 2 max_{b,r} p(r|b)^{-1/2}`.
/// * `Record`: each clipped part has norm at most its clip.
///
/// With `w_rows` (attribute mode), `‖c_i‖` in units of its row's `p^{-1/2}`: `2 ‖F_i‖ ≤ 2`.
///
/// All divided by the batch denominator.
pub fn contribution_bounds(protect: Protect, inv_sqrt_ps: &[f64], denom: f64, w_rows: bool) -> Sensitivities {
    match protect {
        // Attribute-mode rounds are accounted replace-one today (public batches, shuffled epochs,
        // the full batch), so this bound is not read by a fit; it is the one a Poisson account of
        // the row-by-row release would measure against.
        Protect::Attribute { clip_theta } if w_rows => {
            let _ = inv_sqrt_ps;
            Sensitivities { loss: 0.0, theta: clip_theta / denom, w: 2.0 / denom }
        }
        Protect::Attribute { clip_theta } => {
            let worst = inv_sqrt_ps.iter().cloned().fold(0.0, f64::max);
            Sensitivities { loss: 0.0, theta: clip_theta / denom, w: 2.0 * worst / denom }
        }
        Protect::Record { clip_loss, clip_theta, clip_w } => {
            Sensitivities { loss: clip_loss / denom, theta: clip_theta / denom, w: clip_w / denom }
        }
    }
}

/// Noise standard deviations `σ_p = z √P Δ_p` giving effective noise multiplier `z`.
pub fn noise_stds(parts: &[f64], z: f64) -> Vec<f64> {
    let scale = z * (parts.len() as f64).sqrt();
    parts.iter().map(|d| scale * d).collect()
}

/// Effective noise multiplier `(Σ_p (Δ_p/σ_p)²)^{-1/2}` of parts released together
/// (`0` if some part with positive sensitivity gets no noise).
pub fn effective_noise_multiplier(parts: &[f64], stds: &[f64]) -> f64 {
    let mut s = 0.0;
    for (d, sd) in parts.iter().zip(stds) {
        if *d > 0.0 {
            if *sd <= 0.0 {
                return 0.0;
            }
            s += (d / sd).powi(2);
        }
    }
    if s == 0.0 {
        f64::INFINITY
    } else {
        1.0 / s.sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_sensitivities_use_two_smallest_proportions() {
        // p = (0.2, 0.3, 0.5): Δ_W = 2/m · sqrt(1/0.2 + 1/0.3).
        let inv: Vec<f64> = [0.2f64, 0.3, 0.5].iter().map(|p| p.powf(-0.5)).collect();
        let s = sensitivities(Protect::Attribute { clip_theta: 1.5 }, Fairness::DemographicParity, 3, &inv, 10.0, false);
        assert!((s.w - 0.2 * (5.0f64 + 1.0 / 0.3).sqrt()).abs() < 1e-12);
        assert!((s.theta - 0.3).abs() < 1e-12);
        assert_eq!(s.loss, 0.0);
        // Never above the coarser closed-form bound 2√2/(m√ρ).
        assert!(s.w <= 2.0 * 2f64.sqrt() / (10.0 * 0.2f64.sqrt()));
    }

    #[test]
    fn attribute_sensitivity_takes_the_worst_block() {
        let inv: Vec<f64> = [0.5f64, 0.5, 0.1, 0.9].iter().map(|p| p.powf(-0.5)).collect();
        let s = sensitivities(Protect::Attribute { clip_theta: 1.0 }, Fairness::EqualizedOdds, 2, &inv, 1.0, false);
        assert!((s.w - 2.0 * (10.0f64 + 1.0 / 0.9).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn row_scaled_w_sensitivity_is_two_root_two_over_m_whatever_the_groups() {
        // Moving one record between rows r and r' of the unscaled sums U moves U by √2 ‖F‖/m;
        // noise σ p^{-1/2} on h_W's rows is σ/2 on U, so Δ/σ is that of 2√2/m per unit p^{-1/2}.
        for ps in [[0.5f64, 0.5], [0.04, 0.96]] {
            let inv: Vec<f64> = ps.iter().map(|p| p.powf(-0.5)).collect();
            let s = sensitivities(Protect::Attribute { clip_theta: 1.0 }, Fairness::DemographicParity, 2, &inv, 8.0, true);
            assert!((s.w - 2.0 * 2f64.sqrt() / 8.0).abs() < 1e-15);
            let a = contribution_bounds(Protect::Attribute { clip_theta: 1.0 }, &inv, 8.0, true);
            assert!((a.w - 2.0 / 8.0).abs() < 1e-15);
        }
        // Two balanced groups: the same noise on every row as the isotropic release.
        let inv = [2f64.sqrt(), 2f64.sqrt()];
        let iso = sensitivities(Protect::Attribute { clip_theta: 1.0 }, Fairness::DemographicParity, 2, &inv, 1.0, false);
        let rows = sensitivities(Protect::Attribute { clip_theta: 1.0 }, Fairness::DemographicParity, 2, &inv, 1.0, true);
        assert!((iso.w - rows.w * inv[0]).abs() < 1e-12);
        // Record mode ignores the flag.
        let p = Protect::Record { clip_loss: 1.0, clip_theta: 2.0, clip_w: 3.0 };
        assert_eq!(sensitivities(p, Fairness::DemographicParity, 2, &inv, 4.0, true), sensitivities(p, Fairness::DemographicParity, 2, &inv, 4.0, false));
    }

    #[test]
    fn record_sensitivities_are_twice_the_clip_over_m() {
        let p = Protect::Record { clip_loss: 1.0, clip_theta: 2.0, clip_w: 3.0 };
        let s = sensitivities(p, Fairness::DemographicParity, 2, &[1.0, 1.0], 4.0, false);
        assert_eq!(s.parts(p), vec![0.5, 1.0, 1.5]);
    }

    #[test]
    fn contribution_bounds_are_one_record_worth() {
        let inv: Vec<f64> = [0.25f64, 0.75].iter().map(|p| p.powf(-0.5)).collect();
        let a = contribution_bounds(Protect::Attribute { clip_theta: 1.0 }, &inv, 4.0, false);
        assert_eq!(a.theta, 0.25);
        assert!((a.w - 2.0 * 2.0 / 4.0).abs() < 1e-12);
        let p = Protect::Record { clip_loss: 1.0, clip_theta: 2.0, clip_w: 3.0 };
        let r = contribution_bounds(p, &inv, 2.0, false);
        // In record mode the replace-one sensitivity is exactly twice the contribution bound.
        let s = sensitivities(p, Fairness::DemographicParity, 2, &inv, 2.0, false);
        assert_eq!((2.0 * r.loss, 2.0 * r.theta, 2.0 * r.w), (s.loss, s.theta, s.w));
    }

    #[test]
    fn noise_stds_and_effective_multiplier_are_inverse() {
        let parts = [0.3, 0.02, 7.0];
        let z = 1.7;
        let stds = noise_stds(&parts, z);
        assert!((effective_noise_multiplier(&parts, &stds) - z).abs() < 1e-12);
        assert_eq!(effective_noise_multiplier(&parts, &[1.0, 0.0, 1.0]), 0.0);
        assert_eq!(effective_noise_multiplier(&[0.0], &[0.0]), f64::INFINITY);
    }
}
