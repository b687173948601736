//! Per-batch gradients of the FERMI min-max objective for a linear-softmax model.
//!
//! Model. Features `x ∈ R^d` are augmented with a constant, `x̃ = (x, 1)`. The parameters
//! `θ ∈ R^{(d+1)×(l-1)}` (row-major) give logits `z_0 = 0`, `z_v = x̃·θ[:, v-1]` for
//! `v = 1..l-1`, and class probabilities `F(x) = softmax(z) ∈ Δ^l`. Class 0 is the reference
//! class, so `l = 2` is exactly logistic regression, `F = (1-σ(z_1), σ(z_1))`.
//!
//! Objective (Gupta et al. 2024, eq. 4 and App. D). For `W ∈ R^{k×l}` and `q_u = ‖W[:,u]‖²`,
//!
//! ```text
//! ψ_i(θ, W) = -Σ_u F_u(x_i) q_u + 2 p_s(s_i)^{-1/2} (W F(x_i))[s_i] - 1
//! ```
//!
//! and training solves `min_θ max_W  L(θ) + λ · (1/m) Σ_i ψ_i(θ, W)`.
//! Equalized odds uses one `W_y` and `p_{s|y}` per label class; equal opportunity applies the term
//! only to records of the positive class. The divisor is always the batch size `m`, never a count
//! that depends on the data, so that sensitivities stay fixed.
//!
//! Gradients. With `J = ∂F/∂z` (`J_uv = F_u(δ_uv - F_v)`), the chain rule gives, for any vector
//! `g = ∇_F G`, `∇_{θ[:,v-1]} G = x̃ · F_v (g_v - F·g)`. For ψ, `∇_F ψ_i = -q + 2 p_s(s_i)^{-1/2}
//! W[s_i, :]`, whose first part does not depend on `s_i`. Hence the split used for privacy:
//!
//! ```text
//! ∇_θ ψ_i = a_θ,i + b_i,   a_θ,i = x̃ ⊗ J(-q)                  (independent of s)
//!                          b_i   = x̃ ⊗ J(2 p_s(s_i)^{-1/2} W[s_i,:])   (depends on s)
//! ∇_W ψ_i = a_W,i + c_i,   a_W,i = -2 W diag(F_i)              (independent of s)
//!                          c_i   = 2 p_s(s_i)^{-1/2} e_{s_i} F_iᵀ  (depends on s)
//! ```
//!
//! Only `b` and `c` see the sensitive attribute, so only they are clipped and noised (see
//! `docs/privacy.md` for the sensitivities). Because `b_i = x̃ ⊗ β_i` is an outer product,
//! `‖b_i‖_F = ‖x̃‖ ‖β_i‖` and clipping costs O(l) per record.

use crate::config::{check_clips, ConfigError};
use crate::features::Rows;

/// Fairness notion enforced by the ψ-term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fairness {
    /// Independence of prediction and `s` (one `W`, marginal `p_s`).
    DemographicParity,
    /// Independence given the label: one `W_y` and `p_{s|y}` per class `y`.
    EqualizedOdds,
    /// Independence given `y = positive`; other records do not enter the penalty.
    EqualOpportunity { positive: u32 },
}

impl Fairness {
    /// The notion of public name `"demographic_parity"`, `"equalized_odds"` or
    /// `"equal_opportunity"` (with `positive` the positive class; ignored by the others).
    pub fn parse(name: &str, positive: u32) -> Result<Self, ConfigError> {
        match name {
            "demographic_parity" => Ok(Fairness::DemographicParity),
            "equalized_odds" => Ok(Fairness::EqualizedOdds),
            "equal_opportunity" => Ok(Fairness::EqualOpportunity { positive }),
            other => Err(ConfigError::UnknownFairness(other.to_string())),
        }
    }

    /// Number of `W` blocks (`k × l` each).
    pub fn n_blocks(&self, n_classes: usize) -> usize {
        match self {
            Fairness::EqualizedOdds => n_classes,
            _ => 1,
        }
    }

    /// The `W` block a record with label `y` uses, or `None` if it is outside the penalty.
    #[inline]
    pub fn block(&self, y: u32) -> Option<usize> {
        match *self {
            Fairness::DemographicParity => Some(0),
            Fairness::EqualizedOdds => Some(y as usize),
            Fairness::EqualOpportunity { positive } => (y == positive).then_some(0),
        }
    }
}

/// A record's label or group index. 16 bits: at 10⁸ records the labels and groups take 0.4 GB,
/// not 0.8 GB as `u32`; problems have at most [`MAX_CODES`] classes and groups.
pub type Code = u16;
/// The most classes, and the most groups, a problem may have (codes are [`Code`]).
pub const MAX_CODES: usize = Code::MAX as usize + 1;

/// Problem shapes: `d` features, `k` sensitive groups, `l` classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub d: usize,
    pub k: usize,
    pub l: usize,
}

impl Dims {
    /// Length of `θ`, `(d+1)(l-1)`.
    pub fn theta_len(&self) -> usize {
        (self.d + 1) * (self.l - 1)
    }
    /// Length of all `W` blocks, `blocks · k · l`.
    pub fn w_len(&self, fairness: Fairness) -> usize {
        fairness.n_blocks(self.l) * self.k * self.l
    }
}

/// How records are protected, i.e. what a neighbouring data set may change.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Protect {
    /// Only the sensitive attribute of one record may change (the paper's setting). The loss
    /// gradient and the s-independent ψ parts are exact; `b` is clipped to `clip_theta`.
    Attribute { clip_theta: f64 },
    /// A whole record may change (DP-SGD style). Every per-record gradient is clipped: the loss
    /// gradient to `clip_loss`, `∇_θ ψ_i` to `clip_theta` and `∇_W ψ_i` to `clip_w`.
    Record { clip_loss: f64, clip_theta: f64, clip_w: f64 },
}

impl Protect {
    /// Attribute protection with `b` clipped to `clip_theta > 0` (`inf`: no clipping).
    pub fn attribute(clip_theta: f64) -> Result<Self, ConfigError> {
        check_clips(&[("clip_theta", clip_theta)])?;
        Ok(Protect::Attribute { clip_theta })
    }

    /// Record protection with the three clipping bounds, each > 0 (`inf`: no clipping).
    pub fn record(clip_loss: f64, clip_theta: f64, clip_w: f64) -> Result<Self, ConfigError> {
        check_clips(&[("clip_loss", clip_loss), ("clip_theta", clip_theta), ("clip_w", clip_w)])?;
        Ok(Protect::Record { clip_loss, clip_theta, clip_w })
    }

    /// The mode of public name `"attribute"` or `"record"`. All three bounds are checked first,
    /// whatever the mode (attribute mode uses only `clip_theta`).
    pub fn parse(name: &str, clip_loss: f64, clip_theta: f64, clip_w: f64) -> Result<Self, ConfigError> {
        check_clips(&[("clip_loss", clip_loss), ("clip_theta", clip_theta), ("clip_w", clip_w)])?;
        match name {
            "attribute" => Protect::attribute(clip_theta),
            "record" => Protect::record(clip_loss, clip_theta, clip_w),
            other => Err(ConfigError::UnknownProtect(other.to_string())),
        }
    }

    /// Checks a mode built directly from its variant as its constructor would.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match *self {
            Protect::Attribute { clip_theta } => Protect::attribute(clip_theta).map(drop),
            Protect::Record { clip_loss, clip_theta, clip_w } => Protect::record(clip_loss, clip_theta, clip_w).map(drop),
        }
    }
}

/// The ψ-side inputs of a round: the dual variable and the group proportions.
#[derive(Clone, Copy, Debug)]
pub struct PsiInputs<'a> {
    pub fairness: Fairness,
    /// `W`, `blocks × k × l`, row-major.
    pub w: &'a [f64],
    /// `p(s = r | block)^{-1/2}`, `blocks × k`.
    pub inv_sqrt_ps: &'a [f64],
}

/// Gradient sums of one batch, each divided by the fixed denominator `m` (before any noise).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchGradients {
    /// `g`: mean loss gradient w.r.t. θ (clipped per record in `Record` mode).
    pub loss_grad: Vec<f64>,
    /// `a_θ`: s-independent part of `∇_θ ψ` (zero in `Record` mode, where it is folded into
    /// `psi_theta`).
    pub psi_theta_sfree: Vec<f64>,
    /// `Σ b̃_i / m`: clipped s-dependent part of `∇_θ ψ` (all of `∇_θ ψ` in `Record` mode).
    pub psi_theta: Vec<f64>,
    /// `a_W`: s-independent part of `∇_W ψ` (zero in `Record` mode).
    pub psi_w_sfree: Vec<f64>,
    /// `Σ c_i / m`: s-dependent part of `∇_W ψ` (all of `∇_W ψ`, clipped, in `Record` mode).
    pub psi_w: Vec<f64>,
    /// Mean cross-entropy over the batch.
    pub loss: f64,
    /// Mean ψ over the batch (divisor `m`).
    pub psi: f64,
    /// How many per-record clippings were active (a silo-local diagnostic, never sent).
    pub n_clipped: usize,
}

impl BatchGradients {
    pub fn zeros(dims: Dims, fairness: Fairness) -> Self {
        let t = dims.theta_len();
        let w = dims.w_len(fairness);
        BatchGradients {
            loss_grad: vec![0.0; t],
            psi_theta_sfree: vec![0.0; t],
            psi_theta: vec![0.0; t],
            psi_w_sfree: vec![0.0; w],
            psi_w: vec![0.0; w],
            loss: 0.0,
            psi: 0.0,
            n_clipped: 0,
        }
    }
}

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

/// A sparse row's logit under a two-class model, `θ_d + Σ x_j θ_j`, and `1 + Σ x_j²` (its
/// ‖x̃‖²): two chains of adds, entries in column order, as the kernel and [`predict_class`] sum
/// them.
#[inline(always)]
fn sparse_logit(theta: &[f64], d: usize, row: (&[u32], &[f64])) -> (f64, f64) {
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
fn sparse_logit_pair(theta: &[f64], d: usize, a: (&[u32], &[f64]), b: (&[u32], &[f64])) -> [(f64, f64); 2] {
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
    let n = if d == 0 { 0 } else { x.len() / d };
    if n <= PREDICT_BLOCK {
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
    if out.len() / l <= PREDICT_BLOCK {
        rows(x, out);
    } else {
        x.par_chunks(d.max(1) * PREDICT_BLOCK).zip(out.par_chunks_mut(l * PREDICT_BLOCK)).for_each(|(x, out)| rows(x, out));
    }
}

/// Rows per parallel task of [`predict_proba`].
const PREDICT_BLOCK: usize = 2048;

/// `out_v = F_v (g_v - F·g)` for `v = 1..l-1` (the reference class 0 has no parameters).
#[inline]
fn pull_back(probs: &[f64], g: &[f64], out: &mut [f64]) {
    let fg: f64 = probs.iter().zip(g).map(|(p, gi)| p * gi).sum();
    for v in 1..probs.len() {
        out[v - 1] = probs[v] * (g[v] - fg);
    }
}

/// Factor `min(1, c / norm)` that clips a vector of norm `norm` to `c` (1 for a zero vector), and
/// 0 for a vector whose norm is not finite (an overflow under a hostile θ or W): such a vector has
/// no direction to keep, and any vector of the ball, 0 included, keeps the sensitivity. Scale with
/// [`clipped`], not `f * v` (0 · ∞ is NaN).
#[inline]
pub fn clip_factor(norm: f64, c: f64) -> f64 {
    if norm <= c {
        1.0
    } else if norm.is_finite() {
        c / norm
    } else {
        0.0 // ∞ or NaN (NaN fails `<=`)
    }
}

/// `f · v` for a clip factor `f` of [`clip_factor`]: exactly 0 when `f` is 0 (`v` may then be
/// infinite or NaN).
#[inline]
pub fn clipped(f: f64, v: f64) -> f64 {
    if f == 0.0 {
        0.0
    } else {
        f * v
    }
}

/// Gradient sums of one batch of a silo, divided by `denom` (the batch size `m`).
///
/// `x` is `n × d` row-major, `y` and `s` are class and group indices, `batch` lists the rows
/// of the batch. In `Attribute` mode each `b_i` is clipped to norm `clip_theta` before summing;
/// `c_i` needs no clipping (its change is bounded through `p_s`, see `docs/privacy.md`).
///
/// Every θ-part of a record is `x̃ ⊗ β` for some `β ∈ R^{l-1}`, so the kernel makes two passes
/// over each feature row: one for the logits and `‖x̃‖²`, one that accumulates the three
/// (already scaled and clipped) `β`s into a `3 × (d+1) × (l-1)` accumulator (interleaved per
/// feature for sparse rows). A dense binary row's logit is summed in [`LANES`] partial sums.
#[allow(clippy::too_many_arguments)]
pub fn batch_gradients<R: Rows>(
    rows: &R,
    y: &[Code],
    s: &[Code],
    dims: Dims,
    theta: &[f64],
    psi: PsiInputs<'_>,
    batch: &[usize],
    denom: f64,
    protect: Protect,
) -> BatchGradients {
    let mut out = BatchGradients::zeros(dims, psi.fairness);
    batch_gradients_into(rows, y, s, dims, theta, psi, batch, denom, protect, &mut Workspace::default(), &mut out);
    out
}

/// Scratch buffers of [`batch_gradients_into`], kept between rounds so that a round allocates
/// nothing once they have their sizes.
#[derive(Clone, Debug, Default)]
pub struct Workspace {
    q: Vec<f64>,
    prob_sum: Vec<f64>,
    acc: Vec<f64>,
    coef: Vec<f64>,
    probs: Vec<f64>,
    norms: Vec<f64>,
    g: Vec<f64>,
    beta_b: Vec<f64>,
    w_rec: Vec<f64>,
    row: Vec<f64>,
}

/// `v` resized to `len` and filled with zeros (no allocation once it has the size).
#[inline]
fn zeroed(v: &mut Vec<f64>, len: usize) -> &mut [f64] {
    v.clear();
    v.resize(len, 0.0);
    v
}

/// Rows of the batch whose feature rows are prefetched ahead of use: the CSR row pointers
/// [`PREFETCH_META`] rows ahead, the row data [`PREFETCH_ROWS`] rows ahead.
const PREFETCH_ROWS: usize = 6;
/// Records per chunk of [`batch_gradients_into`]'s two passes (a batch of 256 is one chunk).
const KERNEL_CHUNK: usize = 1024;
const PREFETCH_META: usize = 12;

/// Independent partial sums of a binary model's logit and of ‖x‖² over a dense row (column `j`
/// goes to lane `j mod LANES`), so that the adds overlap.
const LANES: usize = 4;

/// The lanes added pairwise, in a fixed order.
#[inline(always)]
fn lane_sum(v: &[f64; LANES]) -> f64 {
    (v[0] + v[1]) + (v[2] + v[3])
}

/// `(x · t, ‖x‖²)` of a dense row: column j goes to lane j mod LANES (independent chains, so the
/// adds overlap), and the lanes are added by [`lane_sum`].
#[inline(always)]
fn dense_dot_and_square(x: &[f64], t: &[f64]) -> (f64, f64) {
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
fn dense_dots4(x: &[f64], t: &[f64]) -> [f64; 4] {
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

/// [`batch_gradients`] into `out` (overwritten, resized to `dims`), with scratch `ws`.
///
/// On x86-64 processors with AVX2 the same code runs compiled for AVX2 (chosen at run time; the
/// wheel itself targets baseline x86-64): four doubles per vector instead of two. It is the same
/// arithmetic in the same order, without fused multiply-adds, so the bits do not change (a test
/// compares both builds).
#[allow(clippy::too_many_arguments)]
pub fn batch_gradients_into<R: Rows>(
    rows: &R,
    y: &[Code],
    s: &[Code],
    dims: Dims,
    theta: &[f64],
    psi: PsiInputs<'_>,
    batch: &[usize],
    denom: f64,
    protect: Protect,
    ws: &mut Workspace,
    out: &mut BatchGradients,
) {
    let call = KernelCall { rows, y, s, dims, theta, psi, batch, denom, protect };
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the processor has AVX2 (checked at run time just above).
        return unsafe { batch_gradients_avx2(&call, ws, out) };
    }
    batch_gradients_body(&call, ws, out)
}

/// The inputs of one kernel call, handed to each build of [`batch_gradients_body`].
struct KernelCall<'a, R> {
    rows: &'a R,
    y: &'a [Code],
    s: &'a [Code],
    dims: Dims,
    theta: &'a [f64],
    psi: PsiInputs<'a>,
    batch: &'a [usize],
    denom: f64,
    protect: Protect,
}

/// Whether the processor has AVX2 (cached by the standard library after the first test).
#[cfg(target_arch = "x86_64")]
#[inline]
fn has_avx2() -> bool {
    #[cfg(test)]
    if BASELINE_ONLY.with(|c| c.get()) {
        return false;
    }
    std::is_x86_feature_detected!("avx2")
}

/// [`batch_gradients_body`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn batch_gradients_avx2<R: Rows>(call: &KernelCall<'_, R>, ws: &mut Workspace, out: &mut BatchGradients) {
    batch_gradients_body(call, ws, out)
}

/// The kernel of [`batch_gradients_into`] (inlined into each build of it).
#[inline(always)]
fn batch_gradients_body<R: Rows>(call: &KernelCall<'_, R>, ws: &mut Workspace, out: &mut BatchGradients) {
    let &KernelCall { rows, y, s, dims, theta, psi, batch, denom, protect } = call;
    let Dims { d, k, l } = dims;
    debug_assert_eq!(rows.n_features(), d);
    let lm1 = l - 1;
    let blocks = psi.fairness.n_blocks(l);
    let (t_len, w_len) = (dims.theta_len(), dims.w_len(psi.fairness));
    zeroed(&mut out.loss_grad, t_len);
    zeroed(&mut out.psi_theta_sfree, t_len);
    zeroed(&mut out.psi_theta, t_len);
    zeroed(&mut out.psi_w_sfree, w_len);
    zeroed(&mut out.psi_w, w_len);
    (out.loss, out.psi, out.n_clipped) = (0.0, 0.0, 0);
    let mut log_likelihood = LogSum::default();
    let inv_m = 1.0 / denom;

    // q[b][u] = ‖W_b[:, u]‖², shared by every record of the batch.
    let q = zeroed(&mut ws.q, blocks * l);
    for b in 0..blocks {
        for r in 0..k {
            for u in 0..l {
                let wv = psi.w[(b * k + r) * l + u];
                q[b * l + u] += wv * wv;
            }
        }
    }
    let q: &[f64] = q;
    // Per-block sum of F over records in the block (a_W = -2 W_b diag(ΣF)/m).
    let prob_sum = zeroed(&mut ws.prob_sum, blocks * l);

    // Accumulator of Σ x̃ ⊗ β for the three β = [β_loss | β_a | β_b] (row d: the intercept).
    // Dense rows: three parts, each (d+1) × (l−1), so that a row's update is three contiguous
    // axpys. Sparse rows: row j holds [β_loss | β_a | β_b], so that an entry's update touches
    // one cache line. Either layout adds the same terms in the same order.
    let width = 3 * lm1;
    let part = (d + 1) * lm1;
    // Dense rows not stored as float64 (float32) are converted into `row_buf` one at a time.
    let mut row_buf = std::mem::take(&mut ws.row);
    row_buf.resize(d, 0.0);
    let converts = batch.first().is_some_and(|&i| rows.dense_row(i).is_none() && rows.dense_row_into(i, &mut row_buf));
    let split = converts || batch.first().is_some_and(|&i| rows.dense_row(i).is_some());
    let acc = zeroed(&mut ws.acc, 3 * part);
    let coef = zeroed(&mut ws.coef, width);
    let all_probs = zeroed(&mut ws.probs, batch.len().min(KERNEL_CHUNK) * l);
    let norms = zeroed(&mut ws.norms, batch.len().min(KERNEL_CHUNK));
    let g = zeroed(&mut ws.g, l);
    let beta_b = zeroed(&mut ws.beta_b, lm1);
    let w_rec = zeroed(&mut ws.w_rec, k * l);
    // Two classes in attribute mode (the common case) take an unrolled copy of the per-record
    // step below: the same operations in the same order, without loops over the classes.
    let binary_attribute = match protect {
        Protect::Attribute { clip_theta } if lm1 == 1 && !generic_only() => Some(clip_theta),
        _ => None,
    };

    // The batch in chunks of at most KERNEL_CHUNK records (a full batch of a large silo does not
    // need probabilities for all its records at once); each chunk in two passes.
    for (c, chunk) in batch.chunks(KERNEL_CHUNK).enumerate() {
        let first = c * KERNEL_CHUNK;
        // Pass 1, every record first: class probabilities and ‖x̃‖. The records do not depend on
        // each other here, so one record's loads and exponential overlap the next one's; the sums
        // over records below keep their order.
        let paired = lm1 == 1 && !split && !generic_only() && sparse_binary_first_pass(rows, (y, s), batch, first, chunk, theta, d, all_probs, norms);
        if !paired {
            for (bi, (&i, probs)) in chunk.iter().zip(all_probs.chunks_exact_mut(l)).enumerate() {
                let (local, bi) = (bi, first + bi);
                prefetch_ahead(rows, (y, s), batch, bi);
                let mut xsq = 1.0;
                probs[0] = 0.0;
                probs[1..].copy_from_slice(&theta[d * lm1..(d + 1) * lm1]);
                let dense_row = dense_row_of(rows, i, converts, &mut row_buf);
                if let (1, Some(x)) = (lm1, dense_row) {
                    let (z, q) = dense_dot_and_square(x, &theta[..d]);
                    probs[1] += z;
                    xsq += q;
                } else if lm1 == 1 {
                    // Sparse rows are short: one chain, in column order.
                    let mut z = probs[1];
                    rows.for_each(i, |j, xj| {
                        z += xj * theta[j];
                        xsq += xj * xj;
                    });
                    probs[1] = z;
                } else {
                    rows.for_each(i, |j, xj| {
                        xsq += xj * xj;
                        for (p, t) in probs[1..].iter_mut().zip(&theta[j * lm1..(j + 1) * lm1]) {
                            *p += xj * t;
                        }
                    });
                }
                softmax_in_place(probs);
                norms[local] = xsq.sqrt();
            }
        }

        // Pass 2, record by record in batch order: the coefficients, then acc += x̃ ⊗ β.
        for ((&i, probs), &x_norm) in chunk.iter().zip(all_probs.chunks_exact(l)).zip(norms.iter()) {
            let yi = y[i] as usize;
            let si = s[i] as usize;
            let dense_row = dense_row_of(rows, i, converts, &mut row_buf);
            // Loss: cross-entropy, ∇_z ℓ = F - e_y, i.e. β = F_v - [y = v] for v ≥ 1.
            log_likelihood.add(probs[yi]);
            if let Some(clip_theta) = binary_attribute {
                binary_attribute_row(probs, x_norm, yi, si, dims, psi, q, clip_theta, inv_m, coef, prob_sum, out);
            } else {
                let (c_loss, rest) = coef.split_at_mut(lm1);
                let (c_a, c_b) = rest.split_at_mut(lm1);
                for v in 1..l {
                    c_loss[v - 1] = probs[v] - if v == yi { 1.0 } else { 0.0 };
                }
                if let Protect::Record { clip_loss, .. } = protect {
                    let f = clip_factor(x_norm * norm(c_loss), clip_loss);
                    if f < 1.0 {
                        out.n_clipped += 1;
                    }
                    c_loss.iter_mut().for_each(|v| *v = clipped(f, *v));
                }
                c_a.iter_mut().for_each(|v| *v = 0.0);
                c_b.iter_mut().for_each(|v| *v = 0.0);

                if let Some(b) = psi.fairness.block(yi as u32) {
                    let wb = &psi.w[b * k * l..(b + 1) * k * l];
                    let qb = &q[b * l..(b + 1) * l];
                    let cf = 2.0 * psi.inv_sqrt_ps[b * k + si];

                    // ψ_i = -F·q + cf (W F)[s_i] - 1
                    let wf: f64 = wb[si * l..(si + 1) * l].iter().zip(probs.iter()).map(|(w, p)| w * p).sum();
                    let fq: f64 = probs.iter().zip(qb).map(|(p, qq)| p * qq).sum();
                    out.psi += -fq + cf * wf - 1.0;

                    for u in 0..l {
                        g[u] = -qb[u];
                    }
                    pull_back(probs, g, c_a);
                    for u in 0..l {
                        g[u] = cf * wb[si * l + u];
                    }
                    pull_back(probs, g, beta_b);

                    match protect {
                        Protect::Attribute { clip_theta } => {
                            let f = clip_factor(x_norm * norm(beta_b), clip_theta);
                            if f < 1.0 {
                                out.n_clipped += 1;
                            }
                            for (c, bb) in c_b.iter_mut().zip(beta_b.iter()) {
                                *c = clipped(f, *bb);
                            }
                            for (ps, p) in prob_sum[b * l..(b + 1) * l].iter_mut().zip(probs.iter()) {
                                *ps += p;
                            }
                            let cw = &mut out.psi_w[(b * k + si) * l..(b * k + si + 1) * l];
                            for (o, p) in cw.iter_mut().zip(probs.iter()) {
                                *o += cf * p * inv_m;
                            }
                        }
                        Protect::Record { clip_theta, clip_w, .. } => {
                            // All of ∇_θ ψ_i goes into the private part, clipped as one vector.
                            for (c, bb) in c_a.iter_mut().zip(beta_b.iter()) {
                                *c += bb;
                            }
                            let f = clip_factor(x_norm * norm(c_a), clip_theta);
                            if f < 1.0 {
                                out.n_clipped += 1;
                            }
                            for (cb, ca) in c_b.iter_mut().zip(c_a.iter_mut()) {
                                *cb = clipped(f, *ca);
                                *ca = 0.0;
                            }
                            // Whole ∇_W ψ_i = -2 W_b diag(F) + cf e_{s_i} Fᵀ, clipped in Frobenius norm.
                            for r in 0..k {
                                for u in 0..l {
                                    w_rec[r * l + u] = -2.0 * wb[r * l + u] * probs[u];
                                }
                            }
                            for u in 0..l {
                                w_rec[si * l + u] += cf * probs[u];
                            }
                            let f = clip_factor(norm(w_rec), clip_w);
                            if f < 1.0 {
                                out.n_clipped += 1;
                            }
                            for (o, v) in out.psi_w[b * k * l..(b + 1) * k * l].iter_mut().zip(w_rec.iter()) {
                                *o += clipped(f, *v) * inv_m;
                            }
                        }
                    }
                }
            }

            // acc += x̃ ⊗ β for the three β.
            match (lm1, dense_row.filter(|_| split)) {
                (1, Some(x)) => {
                    for (a, &c) in acc.chunks_exact_mut(part).zip(coef.iter()) {
                        for (av, &xj) in a[..d].iter_mut().zip(x) {
                            *av += xj * c;
                        }
                    }
                }
                (_, Some(x)) => {
                    for (a, c) in acc.chunks_exact_mut(part).zip(coef.chunks_exact(lm1)) {
                        for (av, &xj) in a[..d * lm1].chunks_exact_mut(lm1).zip(x) {
                            for (ac, cv) in av.iter_mut().zip(c) {
                                *ac += xj * cv;
                            }
                        }
                    }
                }
                (1, None) => {
                    // Sparse rows of a binary model: three coefficients, a fixed-size update per entry.
                    let (c0, c1, c2) = (coef[0], coef[1], coef[2]);
                    rows.for_each(i, |j, xj| {
                        let a: &mut [f64; 3] = (&mut acc[j * 3..j * 3 + 3]).try_into().expect("width 3");
                        a[0] += xj * c0;
                        a[1] += xj * c1;
                        a[2] += xj * c2;
                    });
                }
                _ => rows.for_each(i, |j, xj| {
                    for (a, c) in acc[j * width..(j + 1) * width].iter_mut().zip(coef.iter()) {
                        *a += xj * c;
                    }
                }),
            }
            if split {
                for (a, c) in acc.chunks_exact_mut(part).zip(coef.chunks_exact(lm1)) {
                    for (ac, cv) in a[d * lm1..].iter_mut().zip(c) {
                        *ac += cv;
                    }
                }
            } else {
                for (a, c) in acc[d * width..].iter_mut().zip(coef.iter()) {
                    *a += c;
                }
            }
        }
    }

    // Unpack the accumulator into the three θ-parts.
    let outs = [&mut out.loss_grad, &mut out.psi_theta_sfree, &mut out.psi_theta];
    if split {
        for (o, a) in outs.into_iter().zip(acc.chunks_exact(part)) {
            for (ov, av) in o.iter_mut().zip(a) {
                *ov = av * inv_m;
            }
        }
    } else {
        for (p, o) in outs.into_iter().enumerate() {
            for (j, ov) in o.chunks_exact_mut(lm1).enumerate() {
                for (v, x) in ov.iter_mut().enumerate() {
                    *x = acc[j * width + p * lm1 + v] * inv_m;
                }
            }
        }
    }
    if let Protect::Attribute { .. } = protect {
        for b in 0..blocks {
            for r in 0..k {
                for u in 0..l {
                    let idx = (b * k + r) * l + u;
                    out.psi_w_sfree[idx] = -2.0 * psi.w[idx] * prob_sum[b * l + u] * inv_m;
                }
            }
        }
    }
    out.loss = -log_likelihood.total() * inv_m;
    out.psi *= inv_m;
    ws.row = row_buf;
}

/// Pass 1 of [`batch_gradients_into`] for two classes and sparse rows (false, doing nothing,
/// when the rows are not stored sparse): two records at a time ([`sparse_logit_pair`]), each
/// with the chains of one record alone, so the bits are the same.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn sparse_binary_first_pass<R: Rows>(
    rows: &R,
    codes: (&[Code], &[Code]),
    batch: &[usize],
    first: usize,
    chunk: &[usize],
    theta: &[f64],
    d: usize,
    probs: &mut [f64],
    norms: &mut [f64],
) -> bool {
    if !chunk.first().is_some_and(|&i| rows.sparse_row(i).is_some()) {
        return false;
    }
    let prefetch = |bi: usize| prefetch_ahead(rows, codes, batch, bi);
    let row = |i: usize| rows.sparse_row(i).expect("sparse rows");
    let mut finish = |t: usize, (z, xsq): (f64, f64)| {
        let p = &mut probs[2 * t..2 * t + 2];
        (p[0], p[1]) = (0.0, z);
        softmax_in_place(p);
        norms[t] = xsq.sqrt();
    };
    let mut t = 0;
    while t + 1 < chunk.len() {
        prefetch(first + t);
        prefetch(first + t + 1);
        let [a, b] = sparse_logit_pair(theta, d, row(chunk[t]), row(chunk[t + 1]));
        finish(t, a);
        finish(t + 1, b);
        t += 2;
    }
    if t < chunk.len() {
        prefetch(first + t);
        finish(t, sparse_logit(theta, d, row(chunk[t])));
    }
    true
}

/// Before batch position `bi` is read: the rows are random, so their loads would miss the caches
/// one after the other; ask for them ahead (the row pointers of position `bi` + [`PREFETCH_META`]
/// first, then the row data of position `bi` + [`PREFETCH_ROWS`], whose pointers are in by then).
/// The label and group of position `bi` + [`PREFETCH_META`] are asked for too: the second pass
/// reads them, and a large silo's labels are not in cache either (at 10⁷ records on 1,000 silos,
/// 7% of the kernel's samples waited on those two loads).
#[inline(always)]
fn prefetch_ahead<R: Rows>(rows: &R, (y, s): (&[Code], &[Code]), batch: &[usize], bi: usize) {
    if let Some(&p) = batch.get(bi + PREFETCH_META) {
        rows.prefetch_meta(p);
        if let (Some(yp), Some(sp)) = (y.get(p), s.get(p)) {
            crate::features::prefetch(yp);
            crate::features::prefetch(sp);
        }
    }
    if let Some(&p) = batch.get(bi + PREFETCH_ROWS) {
        rows.prefetch_row(p);
    }
}

/// Row `i` as a float64 slice when the kernel reads rows whole: in place when stored as float64,
/// else (`converts`: float32 storage) converted into `buf`; `None` for rows read entry by entry.
#[inline(always)]
fn dense_row_of<'a, R: Rows>(rows: &'a R, i: usize, converts: bool, buf: &'a mut [f64]) -> Option<&'a [f64]> {
    if converts {
        rows.dense_row_into(i, buf);
        Some(buf)
    } else {
        rows.dense_row(i)
    }
}

/// `Σ ln p` over a batch (its cross-entropy loss, a diagnostic) with one `ln` at the end instead
/// of one per record: the product of the `p`, kept in range by factors of `2^SCALE`, plus the
/// logarithms of the rare `p` below `2^-SCALE` taken one by one. Each `p` counts as
/// `max(p, f64::MIN_POSITIVE)`.
#[derive(Clone, Copy, Debug)]
struct LogSum {
    product: f64,
    scalings: f64,
    direct: f64,
}

impl Default for LogSum {
    fn default() -> Self {
        LogSum { product: 1.0, scalings: 0.0, direct: 0.0 }
    }
}

impl LogSum {
    const SCALE: i32 = 500;
    /// `2^-SCALE`; the product stays in `[2^-2·SCALE, 1]` (or just above 1 by rounding). As
    /// literals (`f64::from_bits` is not `const` before Rust 1.83; a test checks both powers).
    const TINY: f64 = 3.054_936_363_499_605e-151;
    /// `2^SCALE`.
    const UP: f64 = 3.273_390_607_896_142e150;

    #[inline(always)]
    fn add(&mut self, p: f64) {
        let p = p.max(f64::MIN_POSITIVE);
        if p >= Self::TINY {
            self.product *= p;
            if self.product < Self::TINY {
                self.product *= Self::UP;
                self.scalings += 1.0;
            }
        } else {
            self.direct += p.ln();
        }
    }

    fn total(&self) -> f64 {
        self.product.ln() - self.scalings * f64::from(Self::SCALE) * std::f64::consts::LN_2 + self.direct
    }
}

/// The per-record step of [`batch_gradients_into`] for two classes in attribute mode: the loss,
/// the coefficients `[β_loss | β_a | β_b]` (β_b clipped), and the ψ and W sums; each operation
/// as in the general code, in the same order (a test checks the bits).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn binary_attribute_row(
    probs: &[f64],
    x_norm: f64,
    yi: usize,
    si: usize,
    dims: Dims,
    psi: PsiInputs<'_>,
    q: &[f64],
    clip_theta: f64,
    inv_m: f64,
    coef: &mut [f64],
    prob_sum: &mut [f64],
    out: &mut BatchGradients,
) {
    let k = dims.k;
    let (p0, p1) = (probs[0], probs[1]);
    coef[0] = p1 - if yi == 1 { 1.0 } else { 0.0 };
    coef[1] = 0.0;
    coef[2] = 0.0;
    let Some(b) = psi.fairness.block(yi as u32) else {
        return;
    };
    let at = (b * k + si) * 2;
    let (w0, w1) = (psi.w[at], psi.w[at + 1]);
    let (q0, q1) = (q[b * 2], q[b * 2 + 1]);
    let cf = 2.0 * psi.inv_sqrt_ps[b * k + si];
    let wf = w0 * p0 + w1 * p1;
    let fq = p0 * q0 + p1 * q1;
    out.psi += -fq + cf * wf - 1.0;
    let (g0, g1) = (-q0, -q1);
    coef[1] = p1 * (g1 - (p0 * g0 + p1 * g1));
    let (g0, g1) = (cf * w0, cf * w1);
    let beta_b = p1 * (g1 - (p0 * g0 + p1 * g1));
    let f = clip_factor(x_norm * (beta_b * beta_b).sqrt(), clip_theta);
    if f < 1.0 {
        out.n_clipped += 1;
    }
    coef[2] = clipped(f, beta_b);
    prob_sum[b * 2] += p0;
    prob_sum[b * 2 + 1] += p1;
    out.psi_w[at] += cf * p0 * inv_m;
    out.psi_w[at + 1] += cf * p1 * inv_m;
}

#[cfg(test)]
std::thread_local! {
    /// Tests set this to run the general per-record code where the unrolled one would run.
    static GENERIC_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Tests set this to run the baseline build of the kernel where the AVX2 one would run.
    static BASELINE_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[inline]
fn generic_only() -> bool {
    #[cfg(test)]
    return GENERIC_ONLY.with(|c| c.get());
    #[cfg(not(test))]
    false
}

/// Euclidean norm.
#[inline]
pub fn norm(v: &[f64]) -> f64 {
    v.iter().map(|a| a * a).sum::<f64>().sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
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

    /// Mean loss + mean ψ computed directly, for finite differences.
    fn objective(c: &Case, fairness: Fairness, theta: &[f64], w: &[f64]) -> (f64, f64) {
        let all: Vec<usize> = (0..c.y.len()).collect();
        let g = batch_gradients(
            &Dense { x: &c.x, d: c.dims.d },
            &c.y,
            &c.s,
            c.dims,
            theta,
            PsiInputs { fairness, w, inv_sqrt_ps: &c.inv },
            &all,
            all.len() as f64,
            Protect::Attribute { clip_theta: f64::INFINITY },
        );
        (g.loss, g.psi)
    }

    #[test]
    fn fairness_parse_accepts_the_public_names_and_rejects_others() {
        assert_eq!(Fairness::parse("demographic_parity", 1), Ok(Fairness::DemographicParity));
        assert_eq!(Fairness::parse("equalized_odds", 1), Ok(Fairness::EqualizedOdds));
        assert_eq!(Fairness::parse("equal_opportunity", 3), Ok(Fairness::EqualOpportunity { positive: 3 }));
        assert_eq!(
            Fairness::parse("parity", 1).unwrap_err().to_string(),
            "fairness=\"parity\" is unknown; use 'demographic_parity', 'equalized_odds' or 'equal_opportunity'"
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
    }

    /// Every analytic gradient equals central finite differences of the objective.
    #[test]
    fn batch_gradients_match_finite_differences() {
        for &fairness in &[
            Fairness::DemographicParity,
            Fairness::EqualizedOdds,
            Fairness::EqualOpportunity { positive: 1 },
        ] {
            for &(k, l) in &[(2, 2), (3, 4), (5, 2)] {
                let c = case(3, k, l, 17, fairness, 7 + k as u64 * 31 + l as u64);
                let all: Vec<usize> = (0..17).collect();
                let gr = batch_gradients(
                    &Dense { x: &c.x, d: c.dims.d },
                    &c.y,
                    &c.s,
                    c.dims,
                    &c.theta,
                    PsiInputs { fairness, w: &c.w, inv_sqrt_ps: &c.inv },
                    &all,
                    17.0,
                    Protect::Attribute { clip_theta: f64::INFINITY },
                );
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
        let gr = batch_gradients(
            &Dense { x: &c.x, d: c.dims.d },
            &c.y,
            &c.s,
            c.dims,
            &c.theta,
            PsiInputs { fairness, w: &c.w, inv_sqrt_ps: &c.inv },
            &all,
            25.0,
            Protect::Attribute { clip_theta: clip },
        );
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
                    batch_gradients(&Dense { x: &c.x, d: 4 }, &c.y, &c.s, c.dims, theta, psi, &all, 9.0, protect)
                } else {
                    let csr = Csr::from_dense(&c.x, 4);
                    batch_gradients(&csr, &c.y, &c.s, c.dims, theta, psi, &all, 9.0, protect)
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
    fn record_mode_totals_match_attribute_mode_when_unclipped() {
        let fairness = Fairness::EqualizedOdds;
        let c = case(3, 2, 3, 12, fairness, 5);
        let all: Vec<usize> = (0..12).collect();
        let psi = PsiInputs { fairness, w: &c.w, inv_sqrt_ps: &c.inv };
        let run = |p| batch_gradients(&Dense { x: &c.x, d: 3 }, &c.y, &c.s, c.dims, &c.theta, psi, &all, 12.0, p);
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
            let dense = batch_gradients(&Dense { x: &c.x, d: 6 }, &c.y, &c.s, c.dims, &c.theta, psi, &all, 30.0, p);
            let csr = Csr::from_dense(&c.x, 6);
            let sparse = batch_gradients(&csr, &c.y, &c.s, c.dims, &c.theta, psi, &all, 30.0, p);
            for (a, b) in dense.loss_grad.iter().chain(&dense.psi_theta).zip(sparse.loss_grad.iter().chain(&sparse.psi_theta)) {
                assert!((a - b).abs() < 1e-12);
            }
            assert_eq!(dense.psi_w, sparse.psi_w);
        }
    }

    #[test]
    fn unrolled_binary_attribute_step_equals_the_general_one_bit_for_bit() {
        for fairness in [Fairness::DemographicParity, Fairness::EqualizedOdds, Fairness::EqualOpportunity { positive: 1 }] {
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
                for clip in [1.0, f64::INFINITY] {
                    let p = Protect::Attribute { clip_theta: clip };
                    let run = |generic: bool| {
                        GENERIC_ONLY.with(|g| g.set(generic));
                        let r = (
                            batch_gradients(&Dense { x: &c.x, d: 7 }, &c.y, &c.s, c.dims, &c.theta, psi, &batch, 30.0, p),
                            batch_gradients(&csr, &c.y, &c.s, c.dims, &c.theta, psi, &batch, 30.0, p),
                        );
                        GENERIC_ONLY.with(|g| g.set(false));
                        r
                    };
                    let (fast, general) = (run(false), run(true));
                    assert_eq!(fast, general, "{fairness:?} k={k} clip={clip}");
                    if clip == 1.0 {
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
                    let r = batch_gradients(&csr, &c.y, &c.s, c.dims, &c.theta, psi, &batch, 90.0, protect);
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
                let want = batch_gradients(&Dense { x: &rounded, d }, &c.y, &c.s, c.dims, &c.theta, psi, &batch, 150.0, p);
                assert_eq!(batch_gradients(&view32, &c.y, &c.s, c.dims, &c.theta, psi, &batch, 150.0, p), want, "d = {d}, l = {l}");
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
                        batch_gradients(&Dense { x: &c.x, d }, &c.y, &c.s, c.dims, &c.theta, psi, &batch, 150.0, p),
                        batch_gradients(&csr, &c.y, &c.s, c.dims, &c.theta, psi, &batch, 150.0, p),
                        batch_gradients(&view32, &c.y, &c.s, c.dims, &c.theta, psi, &batch, 150.0, p),
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
                let fast = batch_gradients(&dense, &c.y, &c.s, c.dims, &c.theta, psi, &batch, 16.0, p);
                let slow = batch_gradients(&Generic(dense), &c.y, &c.s, c.dims, &c.theta, psi, &batch, 16.0, p);
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
        let gr = batch_gradients(
            &Dense { x: &c.x, d: c.dims.d },
            &c.y,
            &c.s,
            c.dims,
            &c.theta,
            PsiInputs { fairness, w: &c.w, inv_sqrt_ps: &c.inv },
            &negatives,
            5.0,
            Protect::Attribute { clip_theta: 1.0 },
        );
        assert_eq!(gr.psi, 0.0);
        assert!(gr.psi_w.iter().chain(&gr.psi_theta).all(|v| *v == 0.0));
        assert!(gr.loss > 0.0);
    }
}
