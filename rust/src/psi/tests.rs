use super::dot::{dense_dot_and_square, dense_dots4};
#[cfg(target_arch = "x86_64")]
use super::kernel::BASELINE_ONLY;
use super::kernel::{LogSum, GENERIC_ONLY};
use super::predict::PREDICT_BLOCK;
use super::*;
use crate::config::ConfigError;
use crate::features::Rows;
use crate::features::{Csr, Dense};

fn lcg(seed: &mut u64) -> f64 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    ((*seed >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
}

#[derive(Clone)]
struct Case {
    dims: Dims,
    x: Vec<f64>,
    y: Vec<Code>,
    s: Vec<Code>,
    theta: Vec<f64>,
    w: Vec<f64>,
    inv: Vec<f64>,
}

fn case(d: usize, k: usize, l: usize, n: usize, fairness: Fairness, seed: u64) -> Case {
    let mut st = seed;
    let dims = Dims { d, k, l };
    let x = (0..n * d).map(|_| lcg(&mut st)).collect();
    let y = (0..n).map(|i| (i % l) as Code).collect();
    let s = (0..n).map(|i| ((i / l) % k) as Code).collect();
    let theta = (0..dims.theta_len()).map(|_| lcg(&mut st)).collect();
    let w = (0..dims.w_len(fairness)).map(|_| lcg(&mut st)).collect();
    let inv = (0..fairness.n_blocks(l) * k).map(|_| 1.0 + lcg(&mut st).abs() * 2.0).collect();
    Case { dims, x, y, s, theta, w, inv }
}

impl Case {
    /// The case's labels and groups with feature rows `rows`.
    fn records<'a, R>(&'a self, rows: &'a R) -> Records<'a, R> {
        Records { rows, y: &self.y, s: &self.s }
    }

    /// The case's θ with the ψ-term's inputs `psi`.
    fn at<'a>(&'a self, psi: PsiInputs<'a>) -> Point<'a> {
        Point { dims: self.dims, theta: &self.theta, psi }
    }
}

/// Mean loss + mean ψ computed directly, for finite differences.
fn objective(c: &Case, fairness: Fairness, theta: &[f64], w: &[f64]) -> (f64, f64) {
    let all: Vec<usize> = (0..c.y.len()).collect();
    let at = Point { dims: c.dims, theta, psi: PsiInputs { fairness, w, inv_sqrt_ps: &c.inv } };
    let no_clip = Protect::Attribute { clip_theta: f64::INFINITY };
    let g = batch_gradients(c.records(&Dense { x: &c.x, d: c.dims.d }), at, &all, all.len() as f64, no_clip);
    (g.loss, g.psi)
}

#[test]
fn fairness_parse_accepts_the_public_names_and_rejects_others() {
    assert_eq!(Fairness::parse("demographic_parity", 1), Ok(Fairness::DemographicParity));
    assert_eq!(Fairness::parse("equalized_odds", 1), Ok(Fairness::EqualizedOdds));
    assert_eq!(Fairness::parse("equal_opportunity", 3), Ok(Fairness::EqualOpportunity { positive: 3 }));
    assert_eq!(
        Fairness::parse("false_positive_rate_parity", 2),
        Ok(Fairness::FalsePositiveRateParity { positive: 2 })
    );
    assert_eq!(
        Fairness::parse("parity", 1).unwrap_err().to_string(),
        "fairness=\"parity\" is unknown; use 'demographic_parity', 'equalized_odds', 'equal_opportunity' or \
         'false_positive_rate_parity'"
    );
}

#[test]
fn protect_constructors_accept_positive_and_infinite_clips() {
    let inf = f64::INFINITY;
    assert_eq!(Protect::attribute(inf), Ok(Protect::Attribute { clip_theta: inf }));
    assert_eq!(Protect::record(1.0, 2.0, inf), Ok(Protect::Record { clip_loss: 1.0, clip_theta: 2.0, clip_w: inf }));
    assert_eq!(Protect::parse("attribute", inf, 0.5, inf), Ok(Protect::Attribute { clip_theta: 0.5 }));
    assert_eq!(Protect::parse("record", 1.0, 2.0, 3.0), Ok(Protect::Record { clip_loss: 1.0, clip_theta: 2.0, clip_w: 3.0 }));
    assert_eq!(Protect::Record { clip_loss: 1.0, clip_theta: inf, clip_w: 1.0 }.validate(), Ok(()));
}

#[test]
fn protect_constructors_reject_each_bad_clip_with_the_binding_message() {
    let msg = |r: Result<Protect, ConfigError>| r.unwrap_err().to_string();
    for (v, shown) in [(0.0, "0"), (-1.0, "-1"), (f64::NAN, "NaN")] {
        let want = |arg: &str| format!("{arg} must be > 0 (use inf for no clipping), got {shown}");
        assert_eq!(msg(Protect::attribute(v)), want("clip_theta"));
        assert_eq!(msg(Protect::record(v, 1.0, 1.0)), want("clip_loss"));
        assert_eq!(msg(Protect::record(1.0, v, 1.0)), want("clip_theta"));
        assert_eq!(msg(Protect::record(1.0, 1.0, v)), want("clip_w"));
        // `parse` checks every bound, even those attribute mode does not use, and before the name.
        assert_eq!(msg(Protect::parse("attribute", v, 1.0, 1.0)), want("clip_loss"));
        assert_eq!(msg(Protect::parse("attribute", 1.0, 1.0, v)), want("clip_w"));
        assert_eq!(msg(Protect::parse("nope", 1.0, v, 1.0)), want("clip_theta"));
        assert_eq!(Protect::Attribute { clip_theta: v }.validate().unwrap_err().to_string(), want("clip_theta"));
    }
    assert_eq!(msg(Protect::parse("records", 1.0, 1.0, 1.0)), "protect=\"records\" is unknown; use 'attribute' or 'record'");
}

#[test]
fn predict_proba_row_is_logistic_for_two_classes() {
    let x = [0.5, -1.0];
    let theta = [2.0, 1.0, 0.25];
    let mut p = [0.0; 2];
    predict_proba_row(&x, &theta, 2, &mut p);
    let z: f64 = 0.5 * 2.0 - 1.0 + 0.25;
    let sig = 1.0 / (1.0 + (-z).exp());
    assert!((p[1] - sig).abs() < 1e-15 && (p[0] - (1.0 - sig)).abs() < 1e-15);
}

#[test]
fn predict_proba_fills_every_row() {
    let x = [0.0, 1.0, 1.0, 0.0];
    let theta = [1.0, 0.0, 0.0, 3.0, 0.0, 0.0];
    let mut out = [0.0; 6];
    predict_proba(&x, 2, &theta, 3, &mut out);
    for row in out.chunks(3) {
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }
    // Row 0 has x = (0, 1): z = (0, 0, 3); row 1 has x = (1, 0): z = (0, 1, 0).
    assert!(out[2] > out[1] && out[4] > out[5]);
}

#[test]
fn four_interleaved_dots_have_the_bits_of_one() {
    for d in [1, 3, 4, 7, 102] {
        let x: Vec<f64> = (0..4 * d).map(|i| ((i * 7919) % 113) as f64 / 9.0 - 5.0).collect();
        let t: Vec<f64> = (0..d).map(|i| ((i * 104729) % 97) as f64 / 31.0 - 1.5).collect();
        let four = dense_dots4(&x, &t);
        for (r, v) in four.iter().enumerate() {
            assert_eq!(v.to_bits(), dense_dot_and_square(&x[r * d..(r + 1) * d], &t).0.to_bits(), "d = {d}, row {r}");
        }
    }
}

#[test]
fn predict_counts_are_the_argmax_of_predict_proba() {
    // Dense one-hot-like rows (many zeros) and Gaussian columns, over several parallel
    // blocks, for two and three classes.
    let mut st = 5u64;
    let mut next = || {
        st = st.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (st >> 11) as f64 / (1u64 << 53) as f64
    };
    let (n, d) = (2 * PREDICT_BLOCK + 777, 7);
    let x: Vec<f64> = (0..n * d).map(|i| if i % 3 == 0 { (next() < 0.3) as u8 as f64 } else { next() * 4.0 - 2.0 }).collect();
    for l in [2, 3] {
        let theta: Vec<f64> = (0..(d + 1) * (l - 1)).map(|_| next() - 0.5).collect();
        let mut proba = vec![0.0; n * l];
        predict_proba(&x, d, &theta, l, &mut proba);
        let mut want = vec![0u64; l];
        for row in proba.chunks_exact(l) {
            let best = (0..l).fold(0, |b, v| if row[v] > row[b] { v } else { b });
            want[best] += 1;
        }
        assert_eq!(predict_counts(&x, d, &theta, l), want);
        assert!(want.iter().all(|&c| c > 0), "{want:?}");
        assert_eq!(want.iter().sum::<u64>(), n as u64);
    }
}

#[test]
fn softmax_in_place_is_stable_for_large_logits() {
    let mut z = [1000.0, 1001.0];
    softmax_in_place(&mut z);
    assert!((z[1] - 1.0 / (1.0 + (-1.0f64).exp())).abs() < 1e-12);
}

#[test]
fn log_sum_equals_the_sum_of_logarithms() {
    assert_eq!(LogSum::TINY, 2f64.powi(-LogSum::SCALE));
    assert_eq!(LogSum::UP, 2f64.powi(LogSum::SCALE));
    let mut st = 7u64;
    for case in 0..4 {
        let ps: Vec<f64> = (0..3000)
            .map(|i| match case {
                0 => lcg(&mut st).abs().max(1e-300),
                1 => 1e-200 * (1.0 + lcg(&mut st).abs()), // rescaled every third record
                2 => if i % 7 == 0 { 1e-320 } else { 0.5 }, // subnormal: counted one by one
                _ => if i % 5 == 0 { 0.0 } else { f64::NAN }, // counted as MIN_POSITIVE
            })
            .collect();
        let mut acc = LogSum::default();
        ps.iter().for_each(|&p| acc.add(p));
        let want: f64 = ps.iter().map(|p| p.max(f64::MIN_POSITIVE).ln()).sum();
        assert!((acc.total() - want).abs() <= 1e-12 * want.abs().max(1.0), "case {case}: {} vs {want}", acc.total());
    }
    assert_eq!(LogSum::default().total(), 0.0);
}

#[test]
fn clip_factor_and_norm() {
    assert_eq!(clip_factor(0.0, 1.0), 1.0);
    assert_eq!(clip_factor(4.0, 2.0), 0.5);
    assert_eq!(norm(&[3.0, 4.0]), 5.0);
}

#[test]
fn fairness_blocks() {
    assert_eq!(Fairness::DemographicParity.n_blocks(4), 1);
    assert_eq!(Fairness::EqualizedOdds.n_blocks(4), 4);
    assert_eq!(Fairness::EqualizedOdds.block(3), Some(3));
    let eo = Fairness::EqualOpportunity { positive: 1 };
    assert_eq!((eo.block(1), eo.block(0)), (Some(0), None));
    let fpr = Fairness::FalsePositiveRateParity { positive: 1 };
    assert_eq!(fpr.n_blocks(4), 1);
    assert_eq!((fpr.block(1), fpr.block(0), fpr.block(2)), (None, Some(0), Some(0)));
}

/// Every analytic gradient equals central finite differences of the objective.
#[test]
fn batch_gradients_match_finite_differences() {
    for &fairness in &[
        Fairness::DemographicParity,
        Fairness::EqualizedOdds,
        Fairness::EqualOpportunity { positive: 1 },
        Fairness::FalsePositiveRateParity { positive: 1 },
    ] {
        for &(k, l) in &[(2, 2), (3, 4), (5, 2)] {
            let c = case(3, k, l, 17, fairness, 7 + k as u64 * 31 + l as u64);
            let all: Vec<usize> = (0..17).collect();
            let at = c.at(PsiInputs { fairness, w: &c.w, inv_sqrt_ps: &c.inv });
            let no_clip = Protect::Attribute { clip_theta: f64::INFINITY };
            let gr = batch_gradients(c.records(&Dense { x: &c.x, d: c.dims.d }), at, &all, 17.0, no_clip);
            let h = 1e-6;
            for t in 0..c.theta.len() {
                let mut tp = c.theta.clone();
                tp[t] += h;
                let mut tm = c.theta.clone();
                tm[t] -= h;
                let (lp, pp) = objective(&c, fairness, &tp, &c.w);
                let (lm, pm) = objective(&c, fairness, &tm, &c.w);
                let fd_loss = (lp - lm) / (2.0 * h);
                let fd_psi = (pp - pm) / (2.0 * h);
                let an_psi = gr.psi_theta_sfree[t] + gr.psi_theta[t];
                assert!((fd_loss - gr.loss_grad[t]).abs() < 1e-6 * (1.0 + fd_loss.abs()));
                assert!((fd_psi - an_psi).abs() < 1e-6 * (1.0 + fd_psi.abs()), "{fairness:?} {k} {l}");
            }
            for t in 0..c.w.len() {
                let mut wp = c.w.clone();
                wp[t] += h;
                let mut wm = c.w.clone();
                wm[t] -= h;
                let fd = (objective(&c, fairness, &c.theta, &wp).1
                    - objective(&c, fairness, &c.theta, &wm).1)
                    / (2.0 * h);
                let an = gr.psi_w_sfree[t] + gr.psi_w[t];
                assert!((fd - an).abs() < 1e-6 * (1.0 + fd.abs()));
            }
        }
    }
}

/// Clipping bounds every per-record b_i: with a tiny clip the θ-private sum is at most m·C/m.
#[test]
fn attribute_clipping_bounds_private_theta_part() {
    let fairness = Fairness::DemographicParity;
    let c = case(4, 3, 3, 25, fairness, 99);
    let all: Vec<usize> = (0..25).collect();
    let clip = 1e-3;
    let at = c.at(PsiInputs { fairness, w: &c.w, inv_sqrt_ps: &c.inv });
    let gr = batch_gradients(c.records(&Dense { x: &c.x, d: c.dims.d }), at, &all, 25.0, Protect::Attribute { clip_theta: clip });
    assert!(norm(&gr.psi_theta) <= clip * (1.0 + 1e-12));
    assert_eq!(gr.n_clipped, 25);
}

#[test]
fn softmax_and_clipping_stay_bounded_whatever_the_logits_and_norms() {
    let mut z = [0.0, f64::INFINITY];
    softmax_in_place(&mut z);
    assert_eq!(z, [0.0, 1.0]);
    let mut z = [0.0, f64::NAN, 3.0];
    softmax_in_place(&mut z);
    assert_eq!(z, [1.0 / 3.0; 3]);
    let mut z = [f64::INFINITY, 0.0, f64::INFINITY, f64::NAN];
    softmax_in_place(&mut z);
    assert_eq!(z, [0.5, 0.0, 0.5, 0.0]);
    let mut z = [0.0, -f64::INFINITY];
    softmax_in_place(&mut z);
    assert_eq!(z, [1.0, 0.0]);
    for norm in [f64::INFINITY, f64::NAN] {
        assert_eq!(clip_factor(norm, 1.0), 0.0);
        assert_eq!(clipped(clip_factor(norm, 1.0), norm), 0.0);
    }
    assert_eq!(clipped(0.25, -4.0), -1.0);
}

/// A hostile server's θ and W: finite, but large enough that a logit, q = ‖W[:,u]‖² or a
/// record's ψ gradient overflows. Whatever overflows, every part that depends on s (both ψ
/// parts; in record mode every part) stays finite and, for one record's s flipped, moves by
/// at most its sensitivity (2·C/m for h_θ, 2·max p^{-1/2}/m for h_W in attribute mode), on
/// every kernel path (sparse binary pairs, general, dense).
#[test]
fn hostile_parameters_never_turn_s_into_a_non_finite_message() {
    for (l, dense) in [(2, false), (2, true), (3, false), (3, true)] {
        let fairness = Fairness::DemographicParity;
        let mut c = case(4, 2, l, 9, fairness, 17);
        // Record 4 alone has feature 3; a θ of 1e308 there overflows its logit.
        for i in 0..9 {
            c.x[i * 4 + 3] = if i == 4 { 2.0 } else { 0.0 };
        }
        let all: Vec<usize> = (0..9).collect();
        let run = |c: &Case, theta: &[f64], w: &[f64], protect: Protect| {
            let psi = PsiInputs { fairness, w, inv_sqrt_ps: &c.inv };
            if dense {
                batch_gradients(c.records(&Dense { x: &c.x, d: 4 }), Point { dims: c.dims, theta, psi }, &all, 9.0, protect)
            } else {
                let csr = Csr::from_dense(&c.x, 4);
                batch_gradients(c.records(&csr), Point { dims: c.dims, theta, psi }, &all, 9.0, protect)
            }
        };
        let mut theta = c.theta.clone();
        theta[3 * (l - 1)] = 1e308;
        let mut w_big = c.w.clone();
        w_big[..l].iter_mut().for_each(|v| *v = 1e308); // group 0's row
        for (theta, w) in [(&theta, &c.w), (&c.theta, &w_big), (&theta, &w_big)] {
            for protect in [Protect::Attribute { clip_theta: 0.5 }, Protect::Record { clip_loss: 1.0, clip_theta: 0.5, clip_w: 2.0 }] {
                let a = run(&c, theta, w, protect);
                let mut flipped = c.clone();
                flipped.s[4] = 1 - flipped.s[4];
                let b = run(&flipped, theta, w, protect);
                let private: [(&Vec<f64>, &Vec<f64>); 2] = [(&a.psi_theta, &b.psi_theta), (&a.psi_w, &b.psi_w)];
                for (pa, pb) in private {
                    assert!(pa.iter().chain(pb.iter()).all(|v| v.is_finite()), "l = {l}, dense = {dense}, {protect:?}");
                }
                if let Protect::Record { .. } = protect {
                    assert!(a.loss_grad.iter().all(|v| v.is_finite()));
                } else {
                    let diff: Vec<f64> = a.psi_theta.iter().zip(&b.psi_theta).map(|(x, y)| x - y).collect();
                    assert!(norm(&diff) <= 2.0 * 0.5 / 9.0 * (1.0 + 1e-12));
                    let dw: Vec<f64> = a.psi_w.iter().zip(&b.psi_w).map(|(x, y)| x - y).collect();
                    let max_inv = c.inv.iter().cloned().fold(0.0, f64::max);
                    assert!(norm(&dw) <= 2.0 * max_inv * 2f64.sqrt() / 9.0 * (1.0 + 1e-12));
                }
            }
        }
    }
}

/// In record mode every part is clipped, and without active clipping it sums to the same
/// total gradient as attribute mode.
#[test]
fn record_protection_totals_match_attribute_protection_when_unclipped() {
    let fairness = Fairness::EqualizedOdds;
    let c = case(3, 2, 3, 12, fairness, 5);
    let all: Vec<usize> = (0..12).collect();
    let psi = PsiInputs { fairness, w: &c.w, inv_sqrt_ps: &c.inv };
    let run = |p| batch_gradients(c.records(&Dense { x: &c.x, d: 3 }), c.at(psi), &all, 12.0, p);
    let a = run(Protect::Attribute { clip_theta: f64::INFINITY });
    let inf = f64::INFINITY;
    let r = run(Protect::Record { clip_loss: inf, clip_theta: inf, clip_w: inf });
    for t in 0..a.psi_theta.len() {
        assert!((a.psi_theta[t] + a.psi_theta_sfree[t] - r.psi_theta[t]).abs() < 1e-12);
        assert!((a.loss_grad[t] - r.loss_grad[t]).abs() < 1e-12);
    }
    for t in 0..a.psi_w.len() {
        assert!((a.psi_w[t] + a.psi_w_sfree[t] - r.psi_w[t]).abs() < 1e-12);
    }
    let tiny = run(Protect::Record { clip_loss: 1e-4, clip_theta: 1e-4, clip_w: 1e-4 });
    assert!(norm(&tiny.loss_grad) <= 1e-4 + 1e-15);
    assert!(norm(&tiny.psi_w) <= 1e-4 + 1e-15);
    assert!(tiny.psi_theta_sfree.iter().all(|v| *v == 0.0));
}

/// The CSR layout gives the same gradients as the dense one.
#[test]
fn sparse_rows_match_dense_rows() {
    for &(k, l) in &[(2, 2), (3, 4)] {
        let fairness = Fairness::EqualizedOdds;
        let mut c = case(6, k, l, 30, fairness, 42);
        for (idx, v) in c.x.iter_mut().enumerate() {
            if idx % 3 != 0 {
                *v = 0.0;
            }
        }
        let all: Vec<usize> = (0..30).collect();
        let psi = PsiInputs { fairness, w: &c.w, inv_sqrt_ps: &c.inv };
        let p = Protect::Attribute { clip_theta: 0.5 };
        let dense = batch_gradients(c.records(&Dense { x: &c.x, d: 6 }), c.at(psi), &all, 30.0, p);
        let csr = Csr::from_dense(&c.x, 6);
        let sparse = batch_gradients(c.records(&csr), c.at(psi), &all, 30.0, p);
        for (a, b) in dense.loss_grad.iter().chain(&dense.psi_theta).zip(sparse.loss_grad.iter().chain(&sparse.psi_theta)) {
            assert!((a - b).abs() < 1e-12);
        }
        assert_eq!(dense.psi_w, sparse.psi_w);
    }
}

#[test]
fn unrolled_binary_attribute_step_equals_the_general_one_bit_for_bit() {
    for fairness in [
        Fairness::DemographicParity,
        Fairness::EqualizedOdds,
        Fairness::EqualOpportunity { positive: 1 },
        Fairness::FalsePositiveRateParity { positive: 1 },
    ] {
        for k in [2, 3] {
            let mut c = case(7, k, 2, 60, fairness, 5 + k as u64);
            for (idx, v) in c.x.iter_mut().enumerate() {
                if idx % 3 == 1 {
                    *v = 0.0;
                }
            }
            let psi = PsiInputs { fairness, w: &c.w, inv_sqrt_ps: &c.inv };
            let batch: Vec<usize> = (0..60).step_by(3).collect(); // both labels, every group
            let csr = Csr::from_dense(&c.x, 7);
            // A clip that some records of the penalty exceed and others not (false-positive-rate
            // parity's records, the negatives, have smaller b̃ here: a smaller clip).
            let some = if matches!(fairness, Fairness::FalsePositiveRateParity { .. }) { 0.05 } else { 1.0 };
            for clip in [some, f64::INFINITY] {
                let p = Protect::Attribute { clip_theta: clip };
                let run = |generic: bool| {
                    GENERIC_ONLY.with(|g| g.set(generic));
                    let r = (
                        batch_gradients(c.records(&Dense { x: &c.x, d: 7 }), c.at(psi), &batch, 30.0, p),
                        batch_gradients(c.records(&csr), c.at(psi), &batch, 30.0, p),
                    );
                    GENERIC_ONLY.with(|g| g.set(false));
                    r
                };
                let (fast, general) = (run(false), run(true));
                assert_eq!(fast, general, "{fairness:?} k={k} clip={clip}");
                if clip == some {
                    // Some records clipped, some not: both branches of the clip ran.
                    assert!(fast.0.n_clipped > 0 && fast.0.n_clipped < batch.len(), "{}", fast.0.n_clipped);
                }
            }
        }
    }
}

#[test]
fn sparse_rows_two_at_a_time_have_the_bits_of_one_at_a_time() {
    // Rows of different lengths (some empty), odd and even batches: pass 1 on two records at
    // a time against the general code, which takes them one by one.
    let mut c = case(40, 2, 2, 300, Fairness::EqualizedOdds, 21);
    let mut st = 5u64;
    for (idx, v) in c.x.iter_mut().enumerate() {
        st = st.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        if (st >> 40) % 10 < 7 || (idx / 40) % 17 == 0 {
            *v = 0.0;
        }
    }
    let csr = Csr::from_dense(&c.x, 40);
    let lens: Vec<usize> = csr.indptr.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(lens.contains(&0) && lens.iter().max() > lens.iter().filter(|&&n| n > 0).min());
    let psi = PsiInputs { fairness: Fairness::EqualizedOdds, w: &c.w, inv_sqrt_ps: &c.inv };
    for protect in [Protect::Attribute { clip_theta: 0.2 }, Protect::Record { clip_loss: 0.3, clip_theta: 0.2, clip_w: 0.5 }] {
        for len in [1usize, 2, 7, 64, 151] {
            let batch: Vec<usize> = (0..300).rev().step_by(300 / len).take(len).collect();
            let run = |generic: bool| {
                GENERIC_ONLY.with(|g| g.set(generic));
                let r = batch_gradients(c.records(&csr), c.at(psi), &batch, 90.0, protect);
                GENERIC_ONLY.with(|g| g.set(false));
                r
            };
            assert_eq!(run(false), run(true), "{protect:?}, batch of {len}");
        }
    }
}

#[test]
fn sparse_class_one_counts_are_predict_class_counts() {
    let mut c = case(30, 2, 2, 101, Fairness::DemographicParity, 4);
    for (idx, v) in c.x.iter_mut().enumerate() {
        if (idx * 7919) % 10 < 6 || (idx / 30) % 13 == 0 {
            *v = 0.0;
        }
    }
    // Logits near zero for some rows: their signs must agree exactly.
    let csr = Csr::from_dense(&c.x, 30);
    for scale in [1.0, 1e-3] {
        let theta: Vec<f64> = c.theta.iter().map(|t| t * scale).collect();
        for step in [1usize, 2, 3, 50, 100, 101, 500] {
            let want = (0..101).step_by(step).filter(|&i| predict_class(&csr, i, &theta, 2, &mut [0.0; 2]) == 1).count() as u64;
            assert_eq!(count_class_one_sparse(&csr, step, &theta), Some(want), "step {step}");
        }
    }
    assert_eq!(count_class_one_sparse(&Dense { x: &c.x, d: 30 }, 1, &c.theta), None);
}

#[test]
fn float32_rows_give_the_bits_of_their_float64_values() {
    // Short and long rows, two and three classes: each float32 row is converted to float64
    // in each pass.
    for (d, n) in [(9, 300), (1000, 300)] {
        for l in [2, 3] {
            let c = case(d, 2, l, n, Fairness::DemographicParity, 7 + d as u64);
            let x32: Vec<f32> = c.x.iter().map(|&v| v as f32).collect();
            let rounded: Vec<f64> = x32.iter().map(|&v| v as f64).collect();
            let rows: Vec<usize> = (0..n).collect();
            let map = crate::features::RowMap::from_rows(&rows);
            let view32 = crate::features::View { x: &x32, d, rows: &map };
            let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &c.w, inv_sqrt_ps: &c.inv };
            let batch: Vec<usize> = (0..n).step_by(2).collect();
            let p = Protect::Attribute { clip_theta: 0.4 };
            let want = batch_gradients(c.records(&Dense { x: &rounded, d }), c.at(psi), &batch, 150.0, p);
            assert_eq!(batch_gradients(c.records(&view32), c.at(psi), &batch, 150.0, p), want, "d = {d}, l = {l}");
        }
    }
}

#[test]
fn the_avx2_build_of_the_kernel_has_the_baseline_bits() {
    // Only meaningful where the processor has AVX2 (then `batch_gradients` runs that build);
    // elsewhere both runs take the baseline build and the test checks nothing new.
    #[cfg(target_arch = "x86_64")]
    assert!(std::is_x86_feature_detected!("avx2") || std::env::var("PFAIR_TEST_NO_AVX2").is_ok(),
            "this test runs where AVX2 is present (set PFAIR_TEST_NO_AVX2 on a processor without it)");
    for (l, d) in [(2, 102), (2, 7), (3, 9)] {
        let fairness = Fairness::EqualizedOdds;
        let mut c = case(d, 2, l, 300, fairness, 40 + d as u64);
        for (idx, v) in c.x.iter_mut().enumerate() {
            if idx % 4 == 1 {
                *v = 0.0;
            }
        }
        let psi = PsiInputs { fairness, w: &c.w, inv_sqrt_ps: &c.inv };
        let batch: Vec<usize> = (0..300).step_by(2).collect();
        let csr = Csr::from_dense(&c.x, d);
        let x32: Vec<f32> = c.x.iter().map(|&v| v as f32).collect();
        let rows: Vec<usize> = (0..300).collect();
        let map = crate::features::RowMap::from_rows(&rows);
        let view32 = crate::features::View { x: &x32, d, rows: &map };
        for p in [Protect::Attribute { clip_theta: 0.3 }, Protect::Record { clip_loss: 0.5, clip_theta: 0.3, clip_w: 0.4 }] {
            let run = |baseline: bool| {
                BASELINE_ONLY.with(|g| g.set(baseline));
                let r = (
                    batch_gradients(c.records(&Dense { x: &c.x, d }), c.at(psi), &batch, 150.0, p),
                    batch_gradients(c.records(&csr), c.at(psi), &batch, 150.0, p),
                    batch_gradients(c.records(&view32), c.at(psi), &batch, 150.0, p),
                );
                BASELINE_ONLY.with(|g| g.set(false));
                r
            };
            let (avx2, baseline) = (run(false), run(true));
            assert_eq!(avx2, baseline, "l={l} d={d} {p:?}");
            assert!(baseline.0.n_clipped > 0, "{}", baseline.0.n_clipped);
        }
    }
}

/// Equal opportunity ignores records outside the positive class.
/// Dense rows seen only through `for_each` (no `dense_row`): the generic path.
struct Generic<'a>(Dense<'a>);
impl Rows for Generic<'_> {
    fn n_features(&self) -> usize {
        self.0.n_features()
    }
    fn n_rows(&self) -> usize {
        self.0.n_rows()
    }
    fn for_each<F: FnMut(usize, f64)>(&self, i: usize, f: F) {
        self.0.for_each(i, f)
    }
}

#[test]
fn dense_row_path_equals_the_generic_path() {
    // Bit for bit with three classes; a binary model's dense logit sums in lanes, so there
    // the two agree to rounding.
    let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-12 * (1.0 + x.abs()));
    for l in [2, 3] {
        let c = case(5, 2, l, 40, Fairness::DemographicParity, 21 + l as u64);
        let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &c.w, inv_sqrt_ps: &c.inv };
        let batch: Vec<usize> = (0..40).step_by(3).collect();
        for p in [Protect::Attribute { clip_theta: 0.5 }, Protect::Record { clip_loss: 1.0, clip_theta: 0.5, clip_w: 0.5 }] {
            let dense = Dense { x: &c.x, d: 5 };
            let fast = batch_gradients(c.records(&dense), c.at(psi), &batch, 16.0, p);
            let slow = batch_gradients(c.records(&Generic(dense)), c.at(psi), &batch, 16.0, p);
            if l == 3 {
                assert_eq!(fast, slow);
            } else {
                for (a, b) in [(&fast.loss_grad, &slow.loss_grad), (&fast.psi_theta_sfree, &slow.psi_theta_sfree),
                    (&fast.psi_theta, &slow.psi_theta), (&fast.psi_w_sfree, &slow.psi_w_sfree), (&fast.psi_w, &slow.psi_w)]
                {
                    assert!(close(a, b), "{a:?} vs {b:?}");
                }
                assert!(close(&[fast.loss, fast.psi], &[slow.loss, slow.psi]));
                assert_ne!(fast.loss_grad, vec![0.0; fast.loss_grad.len()]);
            }
        }
    }
}

#[test]
fn equal_opportunity_ignores_negative_records() {
    let fairness = Fairness::EqualOpportunity { positive: 1 };
    let c = case(2, 2, 2, 10, fairness, 3);
    let negatives: Vec<usize> = (0..10).filter(|&i| c.y[i] == 0).collect();
    let at = c.at(PsiInputs { fairness, w: &c.w, inv_sqrt_ps: &c.inv });
    let gr = batch_gradients(c.records(&Dense { x: &c.x, d: c.dims.d }), at, &negatives, 5.0, Protect::Attribute { clip_theta: 1.0 });
    assert_eq!(gr.psi, 0.0);
    assert!(gr.psi_w.iter().chain(&gr.psi_theta).all(|v| *v == 0.0));
    assert!(gr.loss > 0.0);
}
