//! The s-free scale `S_i` of a record's s-dependent θ-part, and the adaptive clip norm of a batch
//! taken from it.
//!
//! `b_i = x̃_i ⊗ J_i g(s_i)` with `g(r) = 2 p(r | block)^{-1/2} W_block[r, :]` (module docs of
//! [`crate::psi`]), so `‖b_i‖ = ‖x̃_i‖ ‖J_i g(s_i)‖`. The scale is its mean over the groups under
//! the released proportions, `S_i := ‖x̃_i‖ Σ_r p(r | block) ‖J_i g(r)‖`: what ‖b_i‖ would be on
//! average if `s_i` were drawn from `p`. It reads the record's features and label (which fix its
//! block), θ, W and the released proportions, and never `s_i`. A record outside every block (equal
//! opportunity's negatives) has `b_i = 0` and `S_i = 0`. (The largest norm over the groups, an
//! upper bound of ‖b_i‖, was measured first: a rare group's `p^{-1/2}` then sets every record's
//! scale and the noise with it, docs/optimisation.md, "An adaptive clip norm".)
//!
//! In attribute mode the neighbouring data sets differ in one `s_i` only, and the batch is drawn
//! without reading `s`, so a clip norm computed from the batch's `S_i` is the same on both
//! neighbours: clipping the `b_i` to it and adding noise proportional to it is the Gaussian
//! mechanism with the same noise multiplier (`docs/privacy.md`, "An adaptive clip norm").

use super::types::{Code, PsiInputs};

/// `S_i = ‖x̃_i‖ Σ_r p(r | b) ‖J_i g(r)‖` of one record from its class probabilities `F` (`probs`),
/// `‖x̃_i‖` and label (0 outside every block), with `p(r | b) = inv_sqrt_ps[b, r]^{-2}`. NaN (an
/// overflow under a hostile θ or W) stays NaN.
#[inline]
pub fn fairness_scale(probs: &[f64], x_norm: f64, yi: Code, psi: PsiInputs<'_>, k: usize) -> f64 {
    let Some(b) = psi.fairness.block(yi as u32) else {
        return 0.0;
    };
    let l = probs.len();
    let wb = &psi.w[b * k * l..(b + 1) * k * l];
    let mut mean = 0.0;
    for r in 0..k {
        let inv = psi.inv_sqrt_ps[b * k + r];
        let cf = 2.0 * inv;
        let g = &wb[r * l..(r + 1) * l];
        let fg: f64 = probs.iter().zip(g).map(|(p, gv)| p * cf * gv).sum();
        let mut n2 = 0.0;
        for v in 1..l {
            let beta = probs[v] * (cf * g[v] - fg);
            n2 += beta * beta;
        }
        mean += n2.sqrt() / (inv * inv);
    }
    x_norm * mean
}

/// For two classes `‖J_i g(r)‖ = F_0 F_1 |g(r)_1 − g(r)_0|`, so `S_i = ‖x̃_i‖ F_0 F_1 M_b` with
/// `M_b = Σ_r p(r | b) · 2 p(r | b)^{-1/2} |W_b[r, 1] − W_b[r, 0]|` for the record's block `b`: the
/// factors `M_b` of every block (one per batch, `blocks` of them), written into `out`.
pub fn binary_block_factors(psi: PsiInputs<'_>, k: usize, blocks: usize, out: &mut Vec<f64>) {
    out.clear();
    for b in 0..blocks {
        let mut mean = 0.0;
        for r in 0..k {
            let at = (b * k + r) * 2;
            let inv = psi.inv_sqrt_ps[b * k + r];
            mean += 2.0 * inv * (psi.w[at + 1] - psi.w[at]).abs() / (inv * inv);
        }
        out.push(mean);
    }
}

/// The `q`-quantile (nearest rank: the `⌈q n⌉`-th smallest, at least the first) of `scales`,
/// reordering them; 0 for an empty batch and for a quantile that is not finite (an overflow:
/// every `b_i` is then clipped to 0 and its noise is 0, a choice that reads no `s` either).
pub fn quantile_clip(scales: &mut [f64], q: f64) -> f64 {
    if scales.is_empty() {
        return 0.0;
    }
    let n = scales.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
    let (_, v, _) = scales.select_nth_unstable_by(rank, |a, b| a.total_cmp(b));
    if v.is_finite() && *v >= 0.0 {
        *v
    } else {
        0.0
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::features::{Features, Rows};
    use crate::psi::predict::softmax_in_place;
    use crate::psi::{batch_gradients, Dims, Fairness, Point, Protect, PsiInputs, Records};

    /// `S_i` of each record of `batch` into `out` (resized), from the rows and labels only: the
    /// signature has no groups to read. The reference the kernel's adaptive clip is tested against (the
    /// kernel takes the probabilities of its own first pass: [`fairness_scale`]).
    pub(crate) fn fairness_scales_into<R: Rows>(rows: &R, y: &[Code], at: Point<'_>, batch: &[usize], out: &mut Vec<f64>) {
        let d = at.dims.d;
        let (k, l) = (at.dims.k, at.dims.l);
        let lm1 = l - 1;
        let mut probs = vec![0.0; l];
        out.clear();
        out.reserve(batch.len());
        for &i in batch {
            probs[0] = 0.0;
            probs[1..].copy_from_slice(&at.theta[d * lm1..(d + 1) * lm1]);
            let mut xsq = 1.0;
            rows.for_each(i, |j, xj| {
                xsq += xj * xj;
                for (p, t) in probs[1..].iter_mut().zip(&at.theta[j * lm1..(j + 1) * lm1]) {
                    *p += xj * t;
                }
            });
            softmax_in_place(&mut probs);
            out.push(fairness_scale(&probs, xsq.sqrt(), y[i], at.psi, k));
        }
    }

    /// A small pseudo-random generator (tests only).
    fn uniform(seed: u64) -> impl FnMut() -> f64 {
        let mut st = seed;
        move || {
            st = st.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (st >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    #[test]
    fn the_scale_is_the_mean_norm_of_the_b_part_over_the_groups_under_p() {
        // Every notion, two and three classes, three groups: S_i is Σ_r p(r) ‖b_i‖ with ‖b_i‖ for
        // each value r of s_i taken from the kernel on the one-record batch, unclipped; for two
        // classes the kernel's block factors give the same.
        for (l, fairness) in [(2, Fairness::DemographicParity), (2, Fairness::EqualizedOdds), (3, Fairness::EqualOpportunity { positive: 1 }),
                              (3, Fairness::DemographicParity), (2, Fairness::FalsePositiveRateParity { positive: 1 })] {
            let (d, k, n) = (4, 3, 40);
            let dims = Dims { d, k, l };
            let mut u = uniform(l as u64 * 17 + 3);
            let x: Vec<f64> = (0..n * d).map(|_| 4.0 * u() - 2.0).collect();
            let y: Vec<Code> = (0..n).map(|_| (u() * l as f64) as Code).collect();
            let theta: Vec<f64> = (0..dims.theta_len()).map(|_| u() - 0.5).collect();
            let w: Vec<f64> = (0..dims.w_len(fairness)).map(|_| 2.0 * u() - 1.0).collect();
            let inv: Vec<f64> = (0..fairness.n_blocks(l) * k).map(|_| 1.0 + 2.0 * u()).collect();
            let features = Features::auto(x, d);
            let psi = PsiInputs { fairness, w: &w, inv_sqrt_ps: &inv };
            let at = Point { dims, theta: &theta, psi };
            let batch: Vec<usize> = (0..n).collect();
            let mut scales = Vec::new();
            crate::with_rows!(&features, rows => fairness_scales_into(rows, &y, at, &batch, &mut scales));
            let mut factors = Vec::new();
            binary_block_factors(psi, k, fairness.n_blocks(l), &mut factors);
            for i in 0..n {
                let mut mean = 0.0;
                for r in 0..k {
                    let s = vec![r as Code; n];
                    let g = crate::with_rows!(&features, rows => batch_gradients(
                        Records { rows, y: &y, s: &s }, at, &[i], 1.0, Protect::Attribute { clip_theta: f64::INFINITY }));
                    let block = fairness.block(y[i] as u32).unwrap_or(0);
                    mean += crate::psi::norm(&g.psi_theta) / inv[block * k + r].powi(2);
                }
                assert!((mean - scales[i]).abs() <= 1e-12 * mean.max(1e-300), "{fairness:?} l={l} record {i}: {mean} != {}", scales[i]);
                if l == 2 {
                    let probs = crate::with_rows!(&features, rows => {
                        let mut z = 0.0;
                        let mut xsq = 1.0;
                        rows.for_each(i, |j, xj| { z += xj * theta[j]; xsq += xj * xj; });
                        let mut p = [0.0, z + theta[d]];
                        softmax_in_place(&mut p);
                        (p, xsq.sqrt())
                    });
                    let ((p, xn), b) = (probs, fairness.block(y[i] as u32));
                    let from_factors = b.map_or(0.0, |b| xn * (p[0] * p[1]) * factors[b]);
                    assert!((from_factors - scales[i]).abs() <= 1e-12 * mean.max(1e-300), "{fairness:?} record {i}: factors");
                }
            }
        }
    }

    #[test]
    fn quantile_clip_takes_the_nearest_rank_and_zero_when_there_is_nothing_finite() {
        let v = [5.0, 1.0, 4.0, 2.0, 3.0];
        for (q, want) in [(0.2, 1.0), (0.5, 3.0), (0.41, 3.0), (0.4, 2.0), (1.0, 5.0), (1e-9, 1.0)] {
            assert_eq!(quantile_clip(&mut v.to_vec(), q), want, "q = {q}");
        }
        assert_eq!(quantile_clip(&mut [], 0.5), 0.0);
        // A NaN or an infinity (an overflow) at the quantile: clip 0, no noise.
        assert_eq!(quantile_clip(&mut [1.0, f64::NAN], 1.0), 0.0);
        assert_eq!(quantile_clip(&mut [1.0, f64::INFINITY], 1.0), 0.0);
        assert_eq!(quantile_clip(&mut [1.0, f64::NAN], 0.5), 1.0);
    }
}
