//! The batch-gradient kernel: the gradient parts of one batch of a silo (see the module docs
//! of [`crate::psi`] for the math).

use super::clip_scale::{binary_block_factors, fairness_scale, quantile_clip};
use super::dot::{dense_dot_and_square, sparse_logit, sparse_logit_pair};
use super::norm;
use super::predict::softmax_in_place;
use super::types::{BatchGradients, Code, Dims, Point, Protect, PsiInputs, Records};
use crate::features::Rows;

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
/// feature for sparse rows). A dense binary row's logit is summed in `LANES` partial sums (`psi/dot.rs`).
pub fn batch_gradients<R: Rows>(data: Records<'_, R>, at: Point<'_>, batch: &[usize], denom: f64, protect: Protect) -> BatchGradients {
    let mut out = BatchGradients::zeros(at.dims, at.psi.fairness);
    batch_gradients_into(data, at, batch, denom, protect, &mut Workspace::default(), &mut out);
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
    /// The batch's s-free scales `S_i` of an adaptive clip norm, and for two classes the factor
    /// of each block they are read from ([`super::clip_scale`]).
    scales: Vec<f64>,
    block_factors: Vec<f64>,
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


/// [`batch_gradients`] into `out` (overwritten, resized to `dims`), with scratch `ws`.
///
/// On x86-64 processors with AVX2 the same code runs compiled for AVX2 (chosen at run time; the
/// wheel itself targets baseline x86-64): four doubles per vector instead of two. It is the same
/// arithmetic in the same order, without fused multiply-adds, so the bits do not change (a test
/// compares both builds).
pub fn batch_gradients_into<R: Rows>(
    data: Records<'_, R>,
    at: Point<'_>,
    batch: &[usize],
    denom: f64,
    protect: Protect,
    ws: &mut Workspace,
    out: &mut BatchGradients,
) {
    let (Records { rows, y, s }, Point { dims, theta, psi }) = (data, at);
    let call = KernelCall { rows, y, s, dims, theta, psi, batch, denom, protect, quantile: None };
    run_kernel(&call, ws, out)
}

/// [`batch_gradients_into`] in attribute mode with the adaptive clip norm: the `b_i` are clipped
/// to `C_t`, the `quantile`-quantile of the batch's s-free scales `S_i` ([`super::clip_scale`]),
/// computed from the class probabilities and `‖x̃_i‖` of the kernel's first pass (no extra pass
/// over the rows). `C_t` is returned and left in `out.clip_theta`. The whole batch is one chunk
/// (the quantile needs every record's scale before the second pass).
pub fn batch_gradients_adaptive_into<R: Rows>(
    data: Records<'_, R>,
    at: Point<'_>,
    batch: &[usize],
    denom: f64,
    quantile: f64,
    ws: &mut Workspace,
    out: &mut BatchGradients,
) -> f64 {
    let (Records { rows, y, s }, Point { dims, theta, psi }) = (data, at);
    let protect = Protect::Attribute { clip_theta: 0.0 };
    let call = KernelCall { rows, y, s, dims, theta, psi, batch, denom, protect, quantile: Some(quantile) };
    run_kernel(&call, ws, out);
    out.clip_theta
}

/// The kernel, in the build the processor takes.
fn run_kernel<R: Rows>(call: &KernelCall<'_, R>, ws: &mut Workspace, out: &mut BatchGradients) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the processor has AVX2 (checked at run time just above).
        return unsafe { batch_gradients_avx2(call, ws, out) };
    }
    batch_gradients_body(call, ws, out)
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
    /// The adaptive clip's quantile (attribute mode; `protect`'s clip is then replaced by it).
    quantile: Option<f64>,
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
// Why this stays one long function: it was split once into named steps (column_norms,
// first_pass_row, general_record_row and an Accumulator), and the split cost 5% more instructions
// on the CSR kernel under cachegrind (24.67e9 against 23.52e9 for 10^5 calls; the optimiser no
// longer kept the per-record state in registers across the steps), so commit 3ecaa15 went back to
// this body. Split it again only with a cachegrind count that shows no loss.
#[inline(always)]
fn batch_gradients_body<R: Rows>(call: &KernelCall<'_, R>, ws: &mut Workspace, out: &mut BatchGradients) {
    let &KernelCall { rows, y, s, dims, theta, psi, batch, denom, mut protect, quantile } = call;
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
    out.clip_theta = match protect {
        Protect::Attribute { clip_theta } | Protect::Record { clip_theta, .. } => clip_theta,
    };
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
    let term = PsiTerm { k, psi, q, inv_m };
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
    // An adaptive clip needs every record's scale before the second pass: one chunk.
    let chunk_len = if quantile.is_some() { batch.len().max(1) } else { KERNEL_CHUNK };
    let all_probs = zeroed(&mut ws.probs, batch.len().min(chunk_len) * l);
    let norms = zeroed(&mut ws.norms, batch.len().min(chunk_len));
    let g = zeroed(&mut ws.g, l);
    let beta_b = zeroed(&mut ws.beta_b, lm1);
    let w_rec = zeroed(&mut ws.w_rec, k * l);
    // Two classes in attribute mode (the common case) take an unrolled copy of the per-record
    // step below: the same operations in the same order, without loops over the classes.
    let mut binary_attribute = match protect {
        Protect::Attribute { clip_theta } if lm1 == 1 && !generic_only() => Some(clip_theta),
        _ => None,
    };

    // The batch in chunks of at most KERNEL_CHUNK records (a full batch of a large silo does not
    // need probabilities for all its records at once); each chunk in two passes.
    for (c, chunk) in batch.chunks(chunk_len).enumerate() {
        let first = c * chunk_len;
        // Pass 1, every record first: class probabilities and ‖x̃‖. The records do not depend on
        // each other here, so one record's loads and exponential overlap the next one's; the sums
        // over records below keep their order.
        let paired = lm1 == 1 && !split && !generic_only() && sparse_binary_first_pass(call, first, chunk, all_probs, norms);
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

        if let Some(quantile) = quantile {
            // The adaptive clip: the quantile of the batch's s-free scales, from pass 1's F and ‖x̃‖.
            let scales = &mut ws.scales;
            scales.clear();
            if lm1 == 1 {
                // Two classes: S_i = ‖x̃_i‖ F_0 F_1 M_b, one factor M_b per block and batch.
                let factors = &mut ws.block_factors;
                binary_block_factors(psi, k, blocks, factors);
                for ((&i, probs), &x_norm) in chunk.iter().zip(all_probs.chunks_exact(2)).zip(norms.iter()) {
                    scales.push(match psi.fairness.block(y[i] as u32) {
                        Some(b) => x_norm * (probs[0] * probs[1]) * factors[b],
                        None => 0.0,
                    });
                }
            } else {
                for ((&i, probs), &x_norm) in chunk.iter().zip(all_probs.chunks_exact(l)).zip(norms.iter()) {
                    scales.push(fairness_scale(probs, x_norm, y[i], psi, k));
                }
            }
            let clip = quantile_clip(scales, quantile);
            protect = Protect::Attribute { clip_theta: clip };
            binary_attribute = binary_attribute.map(|_| clip);
            out.clip_theta = clip;
        }

        // Pass 2, record by record in batch order: the coefficients, then acc += x̃ ⊗ β.
        for ((&i, probs), &x_norm) in chunk.iter().zip(all_probs.chunks_exact(l)).zip(norms.iter()) {
            let yi = y[i] as usize;
            let si = s[i] as usize;
            let dense_row = dense_row_of(rows, i, converts, &mut row_buf);
            // Loss: cross-entropy, ∇_z ℓ = F - e_y, i.e. β = F_v - [y = v] for v ≥ 1.
            log_likelihood.add(probs[yi]);
            if let Some(clip_theta) = binary_attribute {
                binary_attribute_row(&term, Record { probs, x_norm, yi, si }, clip_theta, coef, prob_sum, out);
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

/// What every record of a batch shares in pass 2: the number of groups, the ψ-term's inputs,
/// `q[b][u] = ‖W_b[:, u]‖²` and `1/m`.
struct PsiTerm<'a> {
    k: usize,
    psi: PsiInputs<'a>,
    q: &'a [f64],
    inv_m: f64,
}

/// One record in pass 2: its class probabilities `F`, `‖x̃‖`, label and group.
#[derive(Clone, Copy)]
struct Record<'a> {
    probs: &'a [f64],
    x_norm: f64,
    yi: usize,
    si: usize,
}

/// Pass 1 of [`batch_gradients_into`] for two classes and sparse rows (false, doing nothing,
/// when the rows are not stored sparse): two records at a time ([`sparse_logit_pair`]), each
/// with the chains of one record alone, so the bits are the same. `chunk` is the batch from
/// position `first`.
#[inline(always)]
fn sparse_binary_first_pass<R: Rows>(
    call: &KernelCall<'_, R>,
    first: usize,
    chunk: &[usize],
    probs: &mut [f64],
    norms: &mut [f64],
) -> bool {
    let &KernelCall { rows, y, s, theta, batch, .. } = call;
    let d = call.dims.d;
    if !chunk.first().is_some_and(|&i| rows.sparse_row(i).is_some()) {
        return false;
    }
    let prefetch = |bi: usize| prefetch_ahead(rows, (y, s), batch, bi);
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
pub(super) struct LogSum {
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
    pub(super) const SCALE: i32 = 500;
    /// `2^-SCALE`; the product stays in `[2^-2·SCALE, 1]` (or just above 1 by rounding). As
    /// literals (`f64::from_bits` is not `const` before Rust 1.83; a test checks both powers).
    pub(super) const TINY: f64 = 3.054_936_363_499_605e-151;
    /// `2^SCALE`.
    pub(super) const UP: f64 = 3.273_390_607_896_142e150;

    #[inline(always)]
    pub(super) fn add(&mut self, p: f64) {
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

    pub(super) fn total(&self) -> f64 {
        self.product.ln() - self.scalings * f64::from(Self::SCALE) * std::f64::consts::LN_2 + self.direct
    }
}

/// The per-record step of [`batch_gradients_into`] for two classes in attribute mode: the loss,
/// the coefficients `[β_loss | β_a | β_b]` (β_b clipped), and the ψ and W sums; each operation
/// as in the general code, in the same order (a test checks the bits).
#[inline(always)]
fn binary_attribute_row(
    term: &PsiTerm<'_>,
    rec: Record<'_>,
    clip_theta: f64,
    coef: &mut [f64],
    prob_sum: &mut [f64],
    out: &mut BatchGradients,
) {
    let &PsiTerm { k, psi, q, inv_m, .. } = term;
    let Record { probs, x_norm, yi, si } = rec;
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
    pub(super) static GENERIC_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Tests set this to run the baseline build of the kernel where the AVX2 one would run.
    pub(super) static BASELINE_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[inline]
fn generic_only() -> bool {
    #[cfg(test)]
    return GENERIC_ONLY.with(|c| c.get());
    #[cfg(not(test))]
    false
}
