//! A public subspace for the noised θ-part in attribute mode (`theta_subspace` in Python).
//!
//! A silo's `h_θ = (1/m) Σ b̃_i + N(0, σ_θ² I)` lives in `(d+1) × (l−1)` coordinates, one row per
//! feature of `x̃ = [x, 1]`, and its noise has norm about `σ_θ √((d+1)(l−1))`. Each `b̃_i` is
//! `x̃_i ⊗ β_i`, so the signal lies in the span of the silo's rows `x̃_i`, and most of it in the
//! span of their top principal directions. With an orthonormal basis `U` ((d+1) × r) of such
//! directions, a silo sends `(U Uᵀ ⊗ I) h_θ`: the noise keeps the same standard deviation per
//! direction but lives in `r (l−1)` dimensions instead of `(d+1)(l−1)`.
//!
//! Privacy: in attribute mode only `s` is protected, and `U` is a function of the silo's `x`
//! alone (the eigenvectors of `Σ_i x̃_i x̃_iᵀ`, [`gram`]), identical on two data sets that differ
//! in one record's `s`. The projection is then a fixed linear map applied to the release of the
//! Gaussian mechanism after its noise: post-processing, which costs no privacy and changes no
//! sensitivity (`docs/privacy.md`, "A public subspace for h_θ"). In record mode `x` is protected
//! and `U` would leak it: [`crate::round::SiloConfig::validate`] refuses the combination.

use std::sync::Arc;

use crate::config::ConfigError;
use crate::features::{Features, Rows};

/// Largest deviation of `UᵀU` from the identity accepted for a basis.
const ORTHONORMAL_TOL: f64 = 1e-6;

/// An orthonormal basis `U` of `rank` columns in `R^rows` (row-major, `rows × rank`).
#[derive(Clone, Debug, PartialEq)]
pub struct Subspace {
    basis: Arc<[f64]>,
    rows: usize,
    rank: usize,
}

impl Subspace {
    /// The subspace spanned by the columns of `basis` (`rows × rank`, row-major), checked: finite,
    /// `1 ≤ rank ≤ rows`, columns orthonormal within 1e-6.
    pub fn new(basis: Vec<f64>, rows: usize, rank: usize) -> Result<Self, ConfigError> {
        if rank == 0 || rank > rows || basis.len() != rows * rank {
            return Err(ConfigError::Subspace(format!(
                "the basis must be a (d+1) x r array with 1 <= r <= d+1, got {} values for {rows} x {rank}",
                basis.len()
            )));
        }
        if basis.iter().any(|v| !v.is_finite()) {
            return Err(ConfigError::Subspace("the basis must be finite".into()));
        }
        for a in 0..rank {
            for b in a..rank {
                let dot: f64 = (0..rows).map(|j| basis[j * rank + a] * basis[j * rank + b]).sum();
                let want = if a == b { 1.0 } else { 0.0 };
                if (dot - want).abs() > ORTHONORMAL_TOL {
                    return Err(ConfigError::Subspace(format!(
                        "the basis columns must be orthonormal (column {a} . column {b} = {dot})"
                    )));
                }
            }
        }
        Ok(Subspace { basis: basis.into(), rows, rank })
    }

    /// Length of a basis vector: `d + 1`.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The basis, `rows × rank` row-major.
    pub fn basis(&self) -> &[f64] {
        &self.basis
    }

    /// Number of basis vectors `r`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// `v ← (U Uᵀ ⊗ I) v` for `v` of `rows × cols` values, row-major (row `j` holds feature `j`'s
    /// `cols` coefficients, as θ does). `v.len()` must be a multiple of `rows`.
    pub fn project(&self, v: &mut [f64]) {
        let (rows, rank) = (self.rows, self.rank);
        debug_assert_eq!(v.len() % rows, 0);
        let cols = v.len() / rows;
        let mut coef = vec![0.0; rank * cols];
        for j in 0..rows {
            let u = &self.basis[j * rank..(j + 1) * rank];
            for c in 0..cols {
                let vj = v[j * cols + c];
                for (k, uk) in u.iter().enumerate() {
                    coef[k * cols + c] += uk * vj;
                }
            }
        }
        for j in 0..rows {
            let u = &self.basis[j * rank..(j + 1) * rank];
            for c in 0..cols {
                v[j * cols + c] = u.iter().enumerate().map(|(k, uk)| uk * coef[k * cols + c]).sum();
            }
        }
    }
}

/// `Σ_i x̃_i x̃_iᵀ` over a silo's rows, `x̃ = [x, 1]`: a `(d+1) × (d+1)` row-major matrix whose
/// top eigenvectors are the basis of a [`Subspace`]. Reads the rows where they are held.
pub fn gram(x: &Features) -> Vec<f64> {
    crate::with_rows!(x, rows => gram_of(rows))
}

fn gram_of<R: Rows>(rows: &R) -> Vec<f64> {
    let d = rows.n_features();
    let p = d + 1;
    let mut g = vec![0.0; p * p];
    let mut entries: Vec<(usize, f64)> = Vec::with_capacity(p);
    for i in 0..rows.n_rows() {
        entries.clear();
        rows.for_each(i, |j, v| {
            if v != 0.0 {
                entries.push((j, v));
            }
        });
        entries.push((d, 1.0));
        for &(a, va) in &entries {
            let row = &mut g[a * p..(a + 1) * p];
            for &(b, vb) in &entries {
                row[b] += va * vb;
            }
        }
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basis_2d() -> Subspace {
        // Span of (1, 1, 0)/√2 in R^3.
        let h = std::f64::consts::FRAC_1_SQRT_2;
        Subspace::new(vec![h, h, 0.0], 3, 1).unwrap()
    }

    #[test]
    fn project_keeps_the_span_and_removes_the_rest() {
        let sub = basis_2d();
        // Two columns per row: (1, 2), (3, 4), (5, 6).
        let mut v = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        sub.project(&mut v);
        let want = [2.0, 3.0, 2.0, 3.0, 0.0, 0.0];
        for (a, b) in v.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{v:?}");
        }
        // Idempotent.
        let before = v.clone();
        sub.project(&mut v);
        for (a, b) in v.iter().zip(&before) {
            assert!((a - b).abs() < 1e-12);
        }
    }

    #[test]
    fn project_never_lengthens_a_vector() {
        let sub = basis_2d();
        let mut state = 7u64;
        for _ in 0..200 {
            let mut v: Vec<f64> = (0..6)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
                })
                .collect();
            let before: f64 = v.iter().map(|x| x * x).sum();
            sub.project(&mut v);
            let after: f64 = v.iter().map(|x| x * x).sum();
            assert!(after <= before + 1e-12);
        }
    }

    #[test]
    fn new_rejects_bad_bases_with_a_message() {
        let err = |b: Vec<f64>, rows, rank| Subspace::new(b, rows, rank).unwrap_err().to_string();
        assert!(err(vec![1.0, 1.0, 0.0], 3, 1).contains("orthonormal"));
        assert!(err(vec![1.0, 0.0], 3, 1).contains("(d+1) x r"));
        assert!(err(vec![], 3, 0).contains("(d+1) x r"));
        assert!(err(vec![f64::NAN, 0.0, 1.0], 3, 1).contains("finite"));
    }

    #[test]
    fn gram_is_the_same_for_dense_and_sparse_rows() {
        let x = vec![1.0, 0.0, 2.0, 0.0, 0.0, 3.0, 0.5, 0.0, 0.0];
        let dense = gram(&Features::Dense { x: x.clone(), d: 3 });
        let sparse = gram(&Features::Sparse(crate::features::Csr::from_dense(&x, 3)));
        assert_eq!(dense, sparse);
        // Entry (intercept, intercept) counts the rows; (0, 0) is Σ x_0².
        assert_eq!(dense[15], 3.0);
        assert_eq!(dense[0], 1.25);
        assert_eq!(dense[2], 2.0);
    }
}
