//! Prediction of the linear-softmax model: logits `z_v = x̃·θ[:, v-1]` (`z_0 = 0`), class
//! probabilities `F = softmax(z)`, predicted classes `argmax z`.

use super::dot::{dense_dot_and_square, dense_dots4, lane_sum, sparse_logit, sparse_logit_pair, LANES};
use crate::features::Rows;


/// Writes the class probabilities `F(x)` of one record into `probs` (length `l`).
#[inline]
pub fn predict_proba_row(x: &[f64], theta: &[f64], l: usize, probs: &mut [f64]) {
    logits_row(x, theta, l, probs);
    softmax_in_place(probs);
}

/// The logits of one record into `z` (length `l`; the reference class 0 has logit 0).
#[inline]
fn logits_row(x: &[f64], theta: &[f64], l: usize, z: &mut [f64]) {
    let lm1 = l - 1;
    let d = x.len();
    z[0] = 0.0;
    if lm1 == 1 {
        // Two classes: the training kernel's dot product of a dense row (no branch per entry: on
        // one-hot data the test for a zero mispredicts), so a dense row's logit has its bits.
        z[1] = theta[d] + dense_dot_and_square(x, &theta[..d]).0;
        return;
    }
    for v in 1..l {
        z[v] = theta[d * lm1 + (v - 1)];
    }
    for (j, &xj) in x.iter().enumerate() {
        if xj != 0.0 {
            let row = &theta[j * lm1..(j + 1) * lm1];
            for v in 1..l {
                z[v] += xj * row[v - 1];
            }
        }
    }
}

/// The predicted class of one record: the class of the largest logit (ties: the lower class),
/// which is the class of the largest probability without computing the softmax (`z` is scratch
/// of length `l`).
#[inline]
pub fn predict_class_row(x: &[f64], theta: &[f64], l: usize, z: &mut [f64]) -> usize {
    logits_row(x, theta, l, z);
    argmax(z)
}

/// The predicted class of row `i` of `rows` ([`predict_class_row`]; `z` is scratch of length `l`).
/// A row held as float64 is read as a slice (the dense dot product's bits); other rows (CSR,
/// float32) entry by entry, in column order.
#[inline]
pub fn predict_class<R: Rows>(rows: &R, i: usize, theta: &[f64], l: usize, z: &mut [f64]) -> usize {
    if let Some(x) = rows.dense_row(i) {
        return predict_class_row(x, theta, l, z);
    }
    let (d, lm1) = (rows.n_features(), l - 1);
    if l == 2 {
        let mut z1 = theta[d];
        rows.for_each(i, |j, xj| z1 += xj * theta[j]);
        return (z1 > 0.0) as usize;
    }
    z[0] = 0.0;
    for v in 1..l {
        z[v] = theta[d * lm1 + (v - 1)];
    }
    rows.for_each(i, |j, xj| {
        for v in 1..l {
            z[v] += xj * theta[j * lm1 + (v - 1)];
        }
    });
    argmax(z)
}

/// The class of the largest probability of row `i` of `rows`, as `argmax` over
/// [`predict_proba_row`] of the row written out as a dense float64 row (ties: the lower class):
/// the predictions the released checkpoint tables count, with the bits of that computation
/// whatever the layout. A float64 row is read as a slice, a float32 one converted into `buf`
/// (length `d`), a CSR row summed over its stored entries in the dense dot product's lanes
/// (column `j` in lane `j mod LANES`, in column order; an absent entry adds `0 · θ_j = ±0`, which
/// changes no lane when θ is finite, so the caller passes `theta_finite = false` for a θ with a
/// NaN or an infinity and a CSR row then takes the dense path through `buf`). `z` is scratch of
/// length `l`.
#[inline]
pub fn predict_class_of_proba<R: Rows>(
    rows: &R,
    i: usize,
    theta: &[f64],
    theta_finite: bool,
    l: usize,
    z: &mut [f64],
    buf: &mut [f64],
) -> usize {
    let d = rows.n_features();
    if let Some(x) = rows.dense_row(i) {
        logits_row(x, theta, l, z);
        return class_of_logits(z);
    }
    if let Some((cols, vals)) = rows.sparse_row(i).filter(|_| l == 2 && theta_finite) {
        if let Some(class) = sparse_two_class_if_clear(theta, d, cols, vals) {
            return class;
        }
        let mut lanes = [0.0; LANES];
        for (&j, &v) in cols.iter().zip(vals) {
            lanes[j as usize % LANES] += v * theta[j as usize];
        }
        z[0] = 0.0;
        z[1] = theta[d] + lane_sum(&lanes);
        return class_of_logits(z);
    }
    if !rows.dense_row_into(i, buf) {
        buf.iter_mut().for_each(|b| *b = 0.0);
        rows.for_each(i, |j, v| buf[j] = v);
    }
    logits_row(buf, theta, l, z);
    class_of_logits(z)
}

/// The class [`predict_class_of_proba`] gives a sparse row under a two-class model, when a
/// quick sum of its logit settles it; `None` when the logit is too close to `0` or to
/// [`TWO_CLASS_CLEAR`] for that (the caller then sums the lanes, whose bits decide).
///
/// The lane sum `L` (column `j` in lane `j mod LANES`) and the quick sum `F` (two chains, entries
/// in column order) add the same products `p_j = fl(x_j θ_j)` and `θ_d`, `n + 1` terms, in two
/// orders, each along at most `n + 3` additions; each is within `γ_{n+3} A` of their exact sum
/// (`A = |θ_d| + Σ|p_j|`, `γ_m = m u / (1 − m u)`, `u = 2⁻⁵³`; Higham, *Accuracy and Stability
/// of Numerical Algorithms*, 2002, §4.2), so `|L − F| ≤ 2 γ_{n+3} A`. The bound used,
/// `b = (n + 8) · 4u · Â` with `Â` the computed `A` (within `γ_{n+1}` of it), exceeds that
/// for any row of fewer than 2⁴⁰ entries. Rounding is monotone, so `fl(F − b) > c` (a float `c`)
/// implies `F − b > c` exactly: then `L > TWO_CLASS_CLEAR` (class 1); `fl(F + b) ≤ 0` implies
/// `L ≤ 0` (class 0). An overflow makes `F` or `Â` infinite or NaN, and every comparison false:
/// `None`. The caller passes a finite θ only.
#[inline(always)]
fn sparse_two_class_if_clear(theta: &[f64], d: usize, cols: &[u32], vals: &[f64]) -> Option<usize> {
    let (mut f, mut a) = ([theta[d], 0.0], [theta[d].abs(), 0.0]);
    let (cp, vp) = (cols.chunks_exact(2), vals.chunks_exact(2));
    let (cr, vr) = (cp.remainder(), vp.remainder());
    for (c, v) in cp.zip(vp) {
        let (p0, p1) = (v[0] * theta[c[0] as usize], v[1] * theta[c[1] as usize]);
        f[0] += p0;
        f[1] += p1;
        a[0] += p0.abs();
        a[1] += p1.abs();
    }
    if let (Some(&c), Some(&v)) = (cr.first(), vr.first()) {
        let p = v * theta[c as usize];
        f[0] += p;
        a[0] += p.abs();
    }
    let (f, a) = (f[0] + f[1], a[0] + a[1]);
    let bound = (cols.len() + 8) as f64 * a * f64::powi(2.0, -51);
    if f - bound > TWO_CLASS_CLEAR {
        Some(1)
    } else if f + bound <= 0.0 {
        Some(0)
    } else {
        None
    }
}

/// Where a two-class logit `z₁` (`z₀ = 0`) is at least this, the probabilities
/// `softmax([0, z₁])` differ by far more than a rounding: `e^{−z₁} ≤ 1 − 10⁻⁹`, so
/// `e^{−z₁}/(1 + e^{−z₁}) < 1/(1 + e^{−z₁})` after rounding (their gap is about `10⁻⁹ / 4`, the
/// rounding of each below `2⁻⁵³`).
const TWO_CLASS_CLEAR: f64 = 1e-9;

/// `argmax softmax(z)` of the logits `z` (first largest probability; `z` is overwritten by the
/// probabilities where they are computed). Two classes skip the exponential where the logit
/// decides the class: `z₁ ≤ 0` gives `p₀ ≥ p₁` (`e^{z₁} ≤ 1`, a tie taking class 0), and
/// `z₁ ≥` [`TWO_CLASS_CLEAR`] gives `p₁ > p₀`; a logit between, a NaN or more classes take the
/// probabilities, so the class is always that of [`softmax_in_place`]'s bits.
#[inline]
fn class_of_logits(z: &mut [f64]) -> usize {
    if z.len() == 2 {
        if z[1] <= 0.0 {
            return 0;
        }
        if z[1] >= TWO_CLASS_CLEAR {
            return 1;
        }
    }
    softmax_in_place(z);
    argmax(z)
}

/// How many strides ahead [`count_class_one_sparse`] prefetches a row's pointers, and its entries.
const STRIDED_META_AHEAD: usize = 16;
const STRIDED_ROWS_AHEAD: usize = 8;

/// For a two-class model on sparse rows: how many of the rows `0, step, 2·step, …` are predicted
/// as class 1 (`None`, doing nothing, when the rows are not stored sparse): two rows at a time
/// ([`sparse_logit_pair`]), each logit the chain of [`predict_class`], so the counts are its.
pub fn count_class_one_sparse<R: Rows>(rows: &R, step: usize, theta: &[f64]) -> Option<u64> {
    let (n, d, step) = (rows.n_rows(), rows.n_features(), step.max(1));
    if n == 0 {
        return Some(0);
    }
    rows.sparse_row(0)?;
    let mut ones = 0u64;
    let mut i = 0;
    while i + step < n {
        // The strided rows are far apart (no hardware prefetch follows them) and cold after an
        // epoch's rounds: ask for the row pointers well ahead and for the rows a little ahead.
        // Hints only: the values read are the same.
        rows.prefetch_meta(i + STRIDED_META_AHEAD * step);
        rows.prefetch_meta(i + (STRIDED_META_AHEAD + 1) * step);
        rows.prefetch_row(i + STRIDED_ROWS_AHEAD * step);
        rows.prefetch_row(i + (STRIDED_ROWS_AHEAD + 1) * step);
        let [(za, _), (zb, _)] = sparse_logit_pair(theta, d, rows.sparse_row(i)?, rows.sparse_row(i + step)?);
        ones += (za > 0.0) as u64 + (zb > 0.0) as u64;
        i += 2 * step;
    }
    if i < n {
        let (z, _) = sparse_logit(theta, d, rows.sparse_row(i)?);
        ones += (z > 0.0) as u64;
    }
    Some(ones)
}

/// The index of the largest entry (ties: the lowest index).
#[inline]
fn argmax(z: &[f64]) -> usize {
    let mut best = 0;
    for v in 1..z.len() {
        if z[v] > z[best] {
            best = v;
        }
    }
    best
}

/// How many rows of `x` (`n × d`, row-major) each of the `l` classes is predicted for
/// ([`predict_class_row`]); blocks of [`PREDICT_BLOCK`] rows run on the rayon pool.
pub fn predict_counts(x: &[f64], d: usize, theta: &[f64], l: usize) -> Vec<u64> {
    use rayon::prelude::*;
    let count = |x: &[f64]| {
        let mut counts = vec![0u64; l];
        let mut z = vec![0.0; l];
        let mut rest = x;
        if l == 2 && d > 0 {
            // Four rows at a time: sixteen independent sums instead of four, the same per row.
            let quads = x.chunks_exact(4 * d);
            rest = quads.remainder();
            for quad in quads {
                let logits = dense_dots4(quad, &theta[..d]);
                for v in logits {
                    counts[(theta[d] + v > 0.0) as usize] += 1;
                }
            }
        }
        for row in rest.chunks_exact(d.max(1)) {
            counts[predict_class_row(&row[..d], theta, l, &mut z)] += 1;
        }
        counts
    };
    let n = x.len().checked_div(d).unwrap_or(0);
    if n <= PREDICT_BLOCK || crate::threads::machine_busy() {
        return count(x);
    }
    x.par_chunks(d * PREDICT_BLOCK).map(count).reduce(
        || vec![0; l],
        |mut a, b| {
            a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
            a
        },
    )
}

/// Numerically stable softmax, a probability vector whatever the logits: with logits of +∞ (an
/// overflow under a hostile θ) its limit, equal mass on those classes; with a NaN logit and none
/// of +∞, the uniform distribution. The ψ part c_i = 2 p(s_i)^{-1/2} e_{s_i} F_iᵀ is not clipped:
/// its sensitivity rests on F_i being a probability vector, so a NaN in F_i would show s_i in the
/// message (the row it lands in). Finite logits take the usual path, bit for bit.
#[inline]
pub fn softmax_in_place(z: &mut [f64]) {
    let max = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::INFINITY || z.iter().any(|v| v.is_nan()) {
        softmax_degenerate(z);
        return;
    }
    let mut sum = 0.0;
    for v in z.iter_mut() {
        // exp(0) = 1 exactly: the largest logit needs no call (half the calls for l = 2).
        *v = if *v == max && max.is_finite() { 1.0 } else { (*v - max).exp() };
        sum += *v;
    }
    for v in z.iter_mut() {
        *v /= sum;
    }
}

/// [`softmax_in_place`] of logits with a +∞ or a NaN (see there).
#[cold]
fn softmax_degenerate(z: &mut [f64]) {
    let top = z.iter().filter(|&&v| v == f64::INFINITY).count();
    let l = z.len() as f64;
    for v in z.iter_mut() {
        *v = match top {
            0 => 1.0 / l,
            _ if *v == f64::INFINITY => 1.0 / top as f64,
            _ => 0.0,
        };
    }
}

/// Class probabilities for all rows of `x` (`n × d`, row-major) into `out` (`n × l`).
/// Blocks of [`PREDICT_BLOCK`] rows run on the rayon pool.
pub fn predict_proba(x: &[f64], d: usize, theta: &[f64], l: usize, out: &mut [f64]) {
    use rayon::prelude::*;
    let rows = |x: &[f64], out: &mut [f64]| {
        for (row, probs) in x.chunks_exact(d.max(1)).zip(out.chunks_exact_mut(l)) {
            predict_proba_row(&row[..d], theta, l, probs);
        }
    };
    if out.len() / l <= PREDICT_BLOCK || crate::threads::machine_busy() {
        rows(x, out);
    } else {
        x.par_chunks(d.max(1) * PREDICT_BLOCK).zip(out.par_chunks_mut(l * PREDICT_BLOCK)).for_each(|(x, out)| rows(x, out));
    }
}

/// Rows per parallel task of [`predict_proba`].
pub(super) const PREDICT_BLOCK: usize = 2048;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_class_of_logits_is_the_argmax_of_the_probabilities() {
        let mut z1s = vec![0.0, -0.0, 1e-300, 5e-324, 1e-17, 1.1e-16, 2.3e-16, 1e-12, 1e-10, 9.99e-10, 1e-9, 1.0000001e-9, 1e-8, 0.3, 40.0, 800.0];
        z1s.extend(z1s.clone().iter().map(|v| -v));
        z1s.extend([f64::INFINITY, f64::NEG_INFINITY, f64::NAN, f64::MAX, f64::MIN]);
        // Logits around the threshold and the rounding boundary of exp, densely.
        for k in 0..2000 {
            z1s.push(1e-9 * (0.5 + k as f64 / 1000.0));
            z1s.push(k as f64 * 2f64.powi(-60));
        }
        for z1 in z1s {
            let mut z = [0.0, z1];
            let got = class_of_logits(&mut z);
            let mut p = [0.0, z1];
            softmax_in_place(&mut p);
            assert_eq!(got, argmax(&p), "z1 = {z1:e}");
        }
        let mut z = [0.0, 0.2, 0.2];
        assert_eq!(class_of_logits(&mut z), 1);
    }

    /// The class of a sparse two-class row from its lanes: the computation the quick sum must agree with.
    fn lane_class(theta: &[f64], d: usize, cols: &[u32], vals: &[f64]) -> usize {
        let mut lanes = [0.0; LANES];
        for (&j, &v) in cols.iter().zip(vals) {
            lanes[j as usize % LANES] += v * theta[j as usize];
        }
        class_of_logits(&mut [0.0, theta[d] + lane_sum(&lanes)])
    }

    #[test]
    fn a_quick_sparse_logit_decides_only_what_the_lanes_decide() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let d = 64;
        let (mut settled, mut left) = (0, 0);
        for case in 0..30_000 {
            let theta: Vec<f64> = (0..=d).map(|_| rng.gen_range(-2.0..2.0) * 10f64.powi(rng.gen_range(-3..4))).collect();
            let n = rng.gen_range(0..=d);
            let mut cols: Vec<u32> = rand::seq::index::sample(&mut rng, d, n).into_iter().map(|c| c as u32).collect();
            cols.sort_unstable();
            let mut vals: Vec<f64> = cols.iter().map(|_| rng.gen_range(-3.0..3.0)).collect();
            if case % 2 == 1 && n >= 1 {
                // Cancel the logit to about 0 or to about TWO_CLASS_CLEAR: the last entry takes
                // what the others leave, give or take a few ulps and a few multiples of the threshold.
                let last = n - 1;
                let rest: f64 = theta[d] + cols[..last].iter().zip(&vals[..last]).map(|(&c, &v)| v * theta[c as usize]).sum::<f64>();
                let aim = [0.0, TWO_CLASS_CLEAR, -TWO_CLASS_CLEAR, 2.0 * TWO_CLASS_CLEAR][rng.gen_range(0..4)];
                let t = theta[cols[last] as usize];
                if t != 0.0 {
                    vals[last] = (aim - rest) / t + rng.gen_range(-4.0..4.0) * f64::EPSILON * ((aim - rest) / t).abs();
                }
            }
            match sparse_two_class_if_clear(&theta, d, &cols, &vals) {
                Some(c) => {
                    settled += 1;
                    assert_eq!(c, lane_class(&theta, d, &cols, &vals), "case {case}: cols {cols:?}, vals {vals:?}");
                }
                None => left += 1,
            }
        }
        // Most rows are settled by the quick sum; the cancelled ones near a bound are left to the lanes.
        assert!(settled > 15_000 && left > 300, "settled {settled}, left to the lanes {left}");
        // An overflow settles nothing.
        let theta = vec![f64::MAX, f64::MAX, 0.0];
        assert_eq!(sparse_two_class_if_clear(&theta, 2, &[0, 1], &[2.0, -2.0]), None);
    }
}
