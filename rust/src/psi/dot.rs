//! The dot products the kernel and prediction share. Their order of additions is fixed (lanes,
//! chains), so a logit has the same bits whichever path computes it.

/// Independent partial sums of a binary model's logit and of ‖x‖² over a dense row (column `j`
/// goes to lane `j mod LANES`), so that the adds overlap.
pub(super) const LANES: usize = 4;

/// The lanes added pairwise, in a fixed order.
#[inline(always)]
pub(super) fn lane_sum(v: &[f64; LANES]) -> f64 {
    (v[0] + v[1]) + (v[2] + v[3])
}

/// `(x · t, ‖x‖²)` of a dense row: column j goes to lane j mod LANES (independent chains, so the
/// adds overlap), and the lanes are added by [`lane_sum`].
#[inline(always)]
pub(super) fn dense_dot_and_square(x: &[f64], t: &[f64]) -> (f64, f64) {
    let (mut z, mut q) = ([0.0; LANES], [0.0; LANES]);
    let (xc, tc) = (x.chunks_exact(LANES), t.chunks_exact(LANES));
    let (xr, tr) = (xc.remainder(), tc.remainder());
    for (xs, ts) in xc.zip(tc) {
        for k in 0..LANES {
            z[k] += xs[k] * ts[k];
            q[k] += xs[k] * xs[k];
        }
    }
    for (k, (&xj, &tj)) in xr.iter().zip(tr).enumerate() {
        z[k] += xj * tj;
        q[k] += xj * xj;
    }
    (lane_sum(&z), lane_sum(&q))
}

/// The dot products with `t` of the four rows of `x` (`4 × t.len()`, row-major), each summed as
/// [`dense_dot_and_square`] sums it (same lanes, same order, so the same bits), the four rows'
/// lanes interleaved so that sixteen additions are in flight instead of four.
#[inline]
pub(super) fn dense_dots4(x: &[f64], t: &[f64]) -> [f64; 4] {
    let d = t.len();
    let rows = [&x[..d], &x[d..2 * d], &x[2 * d..3 * d], &x[3 * d..4 * d]];
    let mut z = [[0.0; LANES]; 4];
    let full = d - d % LANES;
    for c in (0..full).step_by(LANES) {
        for (zr, row) in z.iter_mut().zip(rows) {
            for k in 0..LANES {
                zr[k] += row[c + k] * t[c + k];
            }
        }
    }
    for (zr, row) in z.iter_mut().zip(rows) {
        for k in 0..d - full {
            zr[k] += row[full + k] * t[full + k];
        }
    }
    z.map(|zr| lane_sum(&zr))
}


/// A sparse row's logit under a two-class model, `θ_d + Σ x_j θ_j`, and `1 + Σ x_j²` (its
/// ‖x̃‖²): two chains of adds, entries in column order, as the kernel and [`predict_class`] sum
/// them.
#[inline(always)]
pub(super) fn sparse_logit(theta: &[f64], d: usize, row: (&[u32], &[f64])) -> (f64, f64) {
    sparse_logit_from(theta, row.0, row.1, (theta[d], 1.0))
}

/// [`sparse_logit`]'s two chains continued over the entries `cols`, `vals` from `(z, xsq)`.
#[inline(always)]
fn sparse_logit_from(theta: &[f64], cols: &[u32], vals: &[f64], (mut z, mut xsq): (f64, f64)) -> (f64, f64) {
    for (&j, &x) in cols.iter().zip(vals) {
        z += x * theta[j as usize];
        xsq += x * x;
    }
    (z, xsq)
}

/// [`sparse_logit`] of two rows side by side: each row's chains are exactly its own, so the
/// values are the same, but the processor overlaps the two rows' chains (one row's chain of
/// dependent adds, with the work around it, fills the reorder window).
#[inline(always)]
pub(super) fn sparse_logit_pair(theta: &[f64], d: usize, a: (&[u32], &[f64]), b: (&[u32], &[f64])) -> [(f64, f64); 2] {
    let ((ja, va), (jb, vb)) = (a, b);
    let (mut za, mut sa, mut zb, mut sb) = (theta[d], 1.0, theta[d], 1.0);
    let n = ja.len().min(jb.len());
    for ((&ca, &xa), (&cb, &xb)) in ja[..n].iter().zip(&va[..n]).zip(jb[..n].iter().zip(&vb[..n])) {
        za += xa * theta[ca as usize];
        sa += xa * xa;
        zb += xb * theta[cb as usize];
        sb += xb * xb;
    }
    [sparse_logit_from(theta, &ja[n..], &va[n..], (za, sa)), sparse_logit_from(theta, &jb[n..], &vb[n..], (zb, sb))]
}
