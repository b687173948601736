//! A checkpoint's exact counts in one pass over each silo's records, where the records are held
//! (CSR, dense float64 or float32 rows of a shared matrix, in place: nothing is copied).
//!
//! After a checkpoint epoch each silo releases, for the published θ (`pfair.validation`,
//! `pfair.fairness_target`):
//!
//! * its validation table `V[y, ŷ] = #{i : y_i = y, ŷ_i = ŷ}` (`l × l`), and
//! * with a fairness target, its violation histogram `c[b, r, ŷ] = #{i : block(i) = b, s_i = r,
//!   ŷ_i = ŷ}` (`blocks × k × l`; `block` as in the ψ term: one block for demographic parity, the
//!   label for equalized odds, the positive records only for equal opportunity),
//!
//! with `ŷ_i = argmax F(x_i; θ)` as [`crate::psi::predict_class_of_proba`] computes it (the
//! bits of the class probabilities of the row in float64). These are the exact counts; the
//! charge and the noise of a private release are added by the caller (Python's
//! `pfair.privacy.mechanisms`), after the charge and before anything leaves the silo.

use rayon::prelude::*;

use crate::psi::{predict_class_of_proba, Dims, Fairness};
use crate::round::Silo;

/// Rows per task when a pass runs on the rayon pool.
const BLOCK_ROWS: usize = 4096;
/// Below this many rows in all, a pass runs on the calling thread (a fork-join costs more than
/// it saves, and under load much more).
const PARALLEL_ROWS: usize = 16_384;

/// What one pass counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// The validation table `V[y, ŷ]`.
    pub table: bool,
    /// The violation histogram `c[b, r, ŷ]`.
    pub violation: bool,
}

/// One silo's exact counts: `table` (`l · l`, row-major by `y`) and `violation` (`blocks · k · l`),
/// empty when not wanted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SiloCounts {
    pub table: Vec<u64>,
    pub violation: Vec<u64>,
}

impl SiloCounts {
    fn zeros(dims: Dims, fairness: Fairness, wanted: Wanted) -> Self {
        let l = dims.l;
        SiloCounts {
            table: vec![0; if wanted.table { l * l } else { 0 }],
            violation: vec![0; if wanted.violation { fairness.n_blocks(l) * dims.k * l } else { 0 }],
        }
    }

    fn add(mut self, other: SiloCounts) -> Self {
        self.table.iter_mut().zip(other.table).for_each(|(a, b)| *a += b);
        self.violation.iter_mut().zip(other.violation).for_each(|(a, b)| *a += b);
        self
    }
}

/// The counts of the records `rows` of `silo` under `theta`.
fn count_rows(silo: &Silo, rows: std::ops::Range<usize>, theta: &[f64], dims: Dims, fairness: Fairness, wanted: Wanted) -> SiloCounts {
    let (k, l) = (dims.k, dims.l);
    let mut out = SiloCounts::zeros(dims, fairness, wanted);
    let mut z = vec![0.0; l];
    let mut buf = vec![0.0; dims.d];
    let finite = theta.iter().all(|t| t.is_finite());
    crate::with_rows!(&silo.x, x => {
        for i in rows {
            let pred = predict_class_of_proba(x, i, theta, finite, l, &mut z, &mut buf);
            let y = silo.y[i] as usize;
            if wanted.table {
                out.table[y * l + pred] += 1;
            }
            if wanted.violation {
                if let Some(b) = fairness.block(silo.y[i].into()) {
                    out.violation[(b * k + silo.s[i] as usize) * l + pred] += 1;
                }
            }
        }
    });
    out
}

/// The exact counts of every silo of `silos` under `theta` (`dims.theta_len()` values), one pass
/// over each silo's records: on the calling thread when they are few, else in blocks of rows on
/// the rayon pool (the counts are integers: the same whatever the split).
pub fn checkpoint_counts(silos: &[&Silo], theta: &[f64], dims: Dims, fairness: Fairness, wanted: Wanted) -> Vec<SiloCounts> {
    assert_eq!(theta.len(), dims.theta_len(), "θ has {} entries, the model {}", theta.len(), dims.theta_len());
    let total: usize = silos.iter().map(|s| s.len()).sum();
    if total < PARALLEL_ROWS || crate::threads::threads_now() < 2 {
        return silos.iter().map(|s| count_rows(s, 0..s.len(), theta, dims, fairness, wanted)).collect();
    }
    let tasks: Vec<(usize, std::ops::Range<usize>)> = silos
        .iter()
        .enumerate()
        .flat_map(|(j, s)| (0..s.len()).step_by(BLOCK_ROWS).map(move |a| (j, a..(a + BLOCK_ROWS).min(s.len()))))
        .collect();
    let parts: Vec<(usize, SiloCounts)> =
        tasks.into_par_iter().map(|(j, r)| (j, count_rows(silos[j], r, theta, dims, fairness, wanted))).collect();
    let mut out: Vec<SiloCounts> = silos.iter().map(|_| SiloCounts::zeros(dims, fairness, wanted)).collect();
    for (j, c) in parts {
        out[j] = std::mem::take(&mut out[j]).add(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::{Features, RowMap, SharedMatrix, SharedRows};
    use crate::psi::{predict_proba_row, Code};
    use crate::round::tests::toy_data;
    use std::sync::Arc;

    /// The reference: every row written out as dense float64, its probabilities, the first argmax.
    fn reference(x: &[f64], y: &[Code], s: &[Code], theta: &[f64], dims: Dims, fairness: Fairness) -> (Vec<u64>, Vec<u64>) {
        let (d, k, l) = (dims.d, dims.k, dims.l);
        let mut table = vec![0u64; l * l];
        let mut viol = vec![0u64; fairness.n_blocks(l) * k * l];
        let mut p = vec![0.0; l];
        for i in 0..y.len() {
            predict_proba_row(&x[i * d..(i + 1) * d], theta, l, &mut p);
            let mut pred = 0;
            for v in 1..l {
                if p[v] > p[pred] {
                    pred = v;
                }
            }
            table[y[i] as usize * l + pred] += 1;
            if let Some(b) = fairness.block(y[i].into()) {
                viol[(b * k + s[i] as usize) * l + pred] += 1;
            }
        }
        (table, viol)
    }

    /// Sparse-ish rows: the toy data with zeros spliced in, so the CSR layout is chosen.
    fn sparse_toy(n: usize, seed: u64) -> (Vec<f64>, Vec<Code>, Vec<Code>, usize) {
        let (x, y, s) = toy_data(n, seed);
        let d = 9;
        let mut out = vec![0.0; n * d];
        for i in 0..n {
            out[i * d + (i % 7)] = x[2 * i];
            out[i * d + 8] = x[2 * i + 1];
        }
        (out, y, s, d)
    }

    #[test]
    fn counts_equal_the_dense_probabilities_in_every_layout() {
        for l in [2usize, 3] {
            for fairness in [
                Fairness::DemographicParity,
                Fairness::EqualizedOdds,
                Fairness::EqualOpportunity { positive: 1 },
                Fairness::FalsePositiveRateParity { positive: 1 },
            ] {
                let n = 20_000; // above PARALLEL_ROWS: the blocked path too
                let (x, y0, s, d) = sparse_toy(n, 7);
                let y: Vec<Code> = y0.iter().enumerate().map(|(i, &v)| if l == 3 && i % 5 == 0 { 2 } else { v }).collect();
                let dims = Dims { d, k: 2, l };
                let theta: Vec<f64> = (0..dims.theta_len()).map(|t| ((t * 37 % 11) as f64 - 5.0) * 0.173).collect();
                let want = reference(&x, &y, &s, &theta, dims, fairness);
                let rows: Vec<u32> = (0..n as u32).collect();
                let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
                let x32_as_64: Vec<f64> = x32.iter().map(|&v| v as f64).collect();
                let want32 = reference(&x32_as_64, &y, &s, &theta, dims, fairness);
                let layouts = [
                    (Features::auto(x.clone(), d), &want),
                    (Features::Dense { x: x.clone(), d }, &want),
                    (
                        Features::Shared(SharedRows {
                            matrix: Arc::new(SharedMatrix::from_vec_f64(x.clone(), d)),
                            rows: RowMap::from_list(rows.clone()),
                        }),
                        &want,
                    ),
                    (
                        Features::Shared(SharedRows { matrix: Arc::new(SharedMatrix::from_vec_f32(x32.clone(), d)), rows: RowMap::from_list(rows) }),
                        &want32,
                    ),
                ];
                assert!(layouts[0].0.is_sparse());
                for (features, want) in layouts {
                    let silo = Silo { x: features, y: y.clone(), s: s.clone() };
                    for wanted in [Wanted { table: true, violation: true }, Wanted { table: true, violation: false }] {
                        let got = checkpoint_counts(&[&silo], &theta, dims, fairness, wanted);
                        assert_eq!(got[0].table, want.0, "l={l} {fairness:?}");
                        if wanted.violation {
                            assert_eq!(got[0].violation, want.1, "l={l} {fairness:?}");
                        } else {
                            assert!(got[0].violation.is_empty());
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_non_finite_theta_counts_as_the_dense_rows_do() {
        let (x, y, s, d) = sparse_toy(500, 3);
        let dims = Dims { d, k: 2, l: 2 };
        let mut theta: Vec<f64> = (0..dims.theta_len()).map(|t| (t as f64 - 4.0) * 0.3).collect();
        theta[2] = f64::INFINITY; // 0 · ∞ = NaN on the rows whose column 2 is 0
        let want = reference(&x, &y, &s, &theta, dims, Fairness::DemographicParity);
        let silo = Silo { x: Features::auto(x, d), y, s };
        assert!(silo.x.is_sparse());
        let got = checkpoint_counts(&[&silo], &theta, dims, Fairness::DemographicParity, Wanted { table: true, violation: true });
        assert_eq!((got[0].table.clone(), got[0].violation.clone()), want);
    }

    #[test]
    fn a_sparse_row_gives_the_dense_rows_logit_bits_at_a_tie() {
        // θ chosen so that the two classes tie to the last bit on a dense row: the CSR path must
        // take the same (lower) class.
        let d = 6;
        let x = vec![0.0, 1.0, 0.0, 0.0, 2.0, 0.0];
        let theta = vec![0.0, 0.5, 0.0, 0.0, -0.25, 0.0, 0.0];
        let dims = Dims { d, k: 2, l: 2 };
        let silo = Silo { x: Features::Sparse(crate::features::Csr::from_dense(&x, d)), y: vec![1], s: vec![0] };
        let got = checkpoint_counts(&[&silo], &theta, dims, Fairness::DemographicParity, Wanted { table: true, violation: true });
        assert_eq!(got[0].table, reference(&x, &[1], &[0], &theta, dims, Fairness::DemographicParity).0);
        assert_eq!(got[0].table, vec![0, 0, 1, 0]);
    }
}
