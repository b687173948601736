//! Partitioners that split one data set across silos, and a measure of how different the silos
//! are (Gupta et al. 2024, App. E.2.3, Algorithm 3).
//!
//! * [`heterogeneous`]: the paper's partitioner. Sort by an attribute, cut the sorted order into
//!   K contiguous prior blocks, let silo k take `⌊s_k·h⌋` records drawn uniformly from block k,
//!   then fill every silo up to its size from the pool of the unassigned records.
//! * [`dirichlet`]: Dirichlet(α) skew of a categorical column (label or sensitive attribute), in
//!   the style of flwr-datasets, optionally with silo sizes that are met exactly.
//! * [`equal_sizes`], [`power_law_sizes`]: silo sizes summing exactly to n.
//! * [`heterogeneity_tv`], [`heterogeneity_eta2`]: how far the silos are from the pooled data.
//!
//! Every function returns one silo id per record (`i64`, as NumPy wants it). Randomness comes from
//! the seeded ChaCha streams of [`crate::noise`], keyed by fixed chunk, block or category numbers,
//! never by thread, so a seed gives the same partition on any machine and any thread count.
//! Records are addressed by `u32` indices internally, so `n < 2³²`.

use std::fmt;

use rand::Rng;
use rand_distr::{Distribution, Gamma};
use rayon::prelude::*;

use crate::noise::{stream, Purpose};

/// A rejected argument: which one, and why. The Python binding turns it into `ValueError`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionError {
    pub argument: &'static str,
    pub message: String,
}

impl fmt::Display for PartitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.argument, self.message)
    }
}

impl std::error::Error for PartitionError {}

fn reject<T>(argument: &'static str, message: impl Into<String>) -> Result<T, PartitionError> {
    Err(PartitionError { argument, message: message.into() })
}

// Stream tags (the `round` coordinate of `noise::stream`). They are far above any training round
// so that a partition seeded like a training run never reuses one of its streams.
const TAG_BASE: u64 = 0x5041_5254 << 32; // "PART"
const TAG_PRIOR_BLOCK: u64 = TAG_BASE | (1 << 28);
const TAG_POOL: u64 = TAG_BASE | (2 << 28);
const TAG_DIRICHLET: u64 = TAG_BASE | (3 << 28);
/// Plus the category number; as it stays below 2³², this never meets the smaller tags above.
const TAG_CATEGORY_SHUFFLE: u64 = TAG_BASE | (4 << 28);
/// Marks the `silo` coordinate of a bucket stream of [`shuffle`], apart from its chunk streams.
const BUCKET_STREAM: u64 = 1 << 63;

/// Records per chunk of the parallel passes. Fixed (not derived from the thread count) so that
/// the streams a chunk uses, and hence the result, do not depend on the machine.
const CHUNK: usize = 1 << 16;
/// Slices up to this length are shuffled by plain Fisher–Yates; longer ones are first scattered
/// into buckets of about this size (which fit in L2 cache).
const SHUFFLE_LEAF: usize = 1 << 15;

/// A raw pointer that threads may share to write disjoint positions of one buffer.
#[derive(Clone, Copy)]
struct SharedMut<T>(*mut T);
// SAFETY: only used for writes to positions that no two threads share (see each use).
unsafe impl<T: Send> Send for SharedMut<T> {}
unsafe impl<T: Send> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    /// # Safety
    /// `i` is in bounds and no other thread reads or writes position `i` concurrently.
    #[inline]
    unsafe fn write(self, i: usize, value: T) {
        self.0.add(i).write(value)
    }
}

// ---------------------------------------------------------------------------------------------
// Silo sizes
// ---------------------------------------------------------------------------------------------

/// `n_silos` sizes summing to `n`: `⌊n/K⌋` each, and the first `n mod K` silos one more.
pub fn equal_sizes(n: usize, n_silos: usize) -> Result<Vec<usize>, PartitionError> {
    check_n_silos(n, n_silos)?;
    let (q, r) = (n / n_silos, n % n_silos);
    Ok((0..n_silos).map(|k| q + usize::from(k < r)).collect())
}

/// Power-law (Zipf) silo sizes: `s_k = min_size + round((n − K·min_size) · w_k / Σw)` with
/// `w_k = (k+1)^(−exponent)`, rounded by largest remainder so that `Σ s_k = n` exactly. The sizes
/// are non-increasing in k; `exponent = 0` gives [`equal_sizes`] (up to which silos get the
/// remainder). Deterministic: there is nothing random in it.
pub fn power_law_sizes(
    n: usize,
    n_silos: usize,
    exponent: f64,
    min_size: usize,
) -> Result<Vec<usize>, PartitionError> {
    check_n_silos(n, n_silos)?;
    if !exponent.is_finite() || exponent < 0.0 {
        return reject("exponent", format!("must be finite and >= 0, got {exponent}"));
    }
    let floor_total = min_size.checked_mul(n_silos).filter(|&t| t <= n);
    let Some(floor_total) = floor_total else {
        return reject("min_size", format!("n_silos * min_size = {n_silos} * {min_size} exceeds n = {n}"));
    };
    let weights: Vec<f64> = (0..n_silos).map(|k| ((k + 1) as f64).powf(-exponent)).collect();
    let mut spare = vec![0u64; n_silos];
    round_preserving_sum(&weights, (n - floor_total) as u64, &mut spare);
    Ok(spare.into_iter().map(|s| min_size + s as usize).collect())
}

/// Integers `out[k] ≥ 0` with `Σ out = total`, proportional to the non-negative `weights`: the
/// floors of `total·w_k/Σw`, then one more for the largest fractional parts (ties: lower index
/// first). All-zero weights spread `total` evenly.
pub fn round_preserving_sum(weights: &[f64], total: u64, out: &mut [u64]) {
    assert_eq!(weights.len(), out.len());
    let k = weights.len();
    if k == 0 {
        assert_eq!(total, 0, "cannot spread a positive total over no entries");
        return;
    }
    let sum: f64 = weights.iter().sum();
    let share = |w: f64| if sum > 0.0 { w / sum * total as f64 } else { total as f64 / k as f64 };
    let mut assigned: u64 = 0;
    for (o, &w) in out.iter_mut().zip(weights) {
        *o = share(w).floor() as u64;
        assigned += *o;
    }
    // Floating error can leave the floors a little above or below the total; the loops below fix
    // either, largest remainders first.
    let mut by_remainder: Vec<usize> = (0..k).collect();
    by_remainder.sort_by(|&a, &b| {
        let (ra, rb) = (share(weights[a]).fract(), share(weights[b]).fract());
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    let mut i = 0;
    while assigned < total {
        out[by_remainder[i % k]] += 1;
        assigned += 1;
        i += 1;
    }
    let mut i = k;
    while assigned > total {
        i = if i == 0 { k - 1 } else { i - 1 };
        let j = by_remainder[i];
        if out[j] > 0 {
            out[j] -= 1;
            assigned -= 1;
        }
    }
}

fn check_n_silos(n: usize, n_silos: usize) -> Result<(), PartitionError> {
    if n_silos < 1 || n_silos > n {
        return reject("n_silos", format!("must be in [1, n] = [1, {n}], got {n_silos}"));
    }
    if n > u32::MAX as usize {
        return reject("values", format!("at most {} records are supported, got {n}", u32::MAX));
    }
    Ok(())
}

/// Checks user-given sizes (one per silo, non-negative, summing to n), or makes equal ones.
fn resolve_sizes(n: usize, n_silos: usize, sizes: Option<&[i64]>) -> Result<Vec<usize>, PartitionError> {
    check_n_silos(n, n_silos)?;
    let Some(sizes) = sizes else { return equal_sizes(n, n_silos) };
    if sizes.len() != n_silos {
        return reject("sizes", format!("needs one size per silo ({n_silos}), got {}", sizes.len()));
    }
    if let Some(&s) = sizes.iter().find(|&&s| s < 0) {
        return reject("sizes", format!("must be >= 0, got {s}"));
    }
    let total: i128 = sizes.iter().map(|&s| s as i128).sum();
    if total != n as i128 {
        return reject("sizes", format!("must sum to the number of records {n}, got {total}"));
    }
    Ok(sizes.iter().map(|&s| s as usize).collect())
}

// ---------------------------------------------------------------------------------------------
// Reproducible parallel shuffling and grouping
// ---------------------------------------------------------------------------------------------

/// Fisher–Yates: a uniformly random permutation of `data` in place.
pub fn fisher_yates<T, R: Rng + ?Sized>(data: &mut [T], rng: &mut R) {
    for i in (1..data.len()).rev() {
        // 32-bit draws where they suffice: half the random bytes of a usize draw.
        let j = if i <= u32::MAX as usize { rng.gen_range(0..=i as u32) as usize } else { rng.gen_range(0..=i) };
        data.swap(i, j);
    }
}

/// Partial Fisher–Yates: moves a uniformly random `m`-subset of `data` (in random order) to its
/// first `m` positions, in `O(m)` draws.
pub fn choose_front<T, R: Rng + ?Sized>(data: &mut [T], m: usize, rng: &mut R) {
    let len = data.len();
    for i in 0..m.min(len) {
        data.swap(i, rng.gen_range(i..len));
    }
}

/// A uniformly random permutation of `data` in place, reproducible from `(seed, tag)` whatever the
/// thread count.
///
/// Rao–Sandelius shuffle (Rao 1961; Sandelius 1962): every element independently picks one of
/// `B ≈ len / 2¹⁵` buckets uniformly, the buckets are laid out one after another (a stable
/// parallel counting scatter) and each bucket is shuffled by Fisher–Yates. Given the bucket
/// sizes, every arrangement is equally likely, so the result is a uniform permutation; the work is
/// `O(len)`, parallel, and the random accesses stay inside cache-sized buckets.
pub fn shuffle<T: Copy + Send + Sync>(data: &mut [T], seed: u64, tag: u64) {
    if data.len() <= SHUFFLE_LEAF {
        fisher_yates(data, &mut stream(seed, 0, tag, Purpose::Other));
        return;
    }
    let permuted = shuffled(data, seed, tag);
    data.par_chunks_mut(CHUNK).zip(permuted.par_chunks(CHUNK)).for_each(|(d, s)| d.copy_from_slice(s));
}

/// [`shuffle`] into a new vector: the same permutation of `data`, without the copy back.
pub fn shuffled<T: Copy + Send + Sync>(data: &[T], seed: u64, tag: u64) -> Vec<T> {
    let len = data.len();
    if len <= SHUFFLE_LEAF {
        let mut out = data.to_vec();
        fisher_yates(&mut out, &mut stream(seed, 0, tag, Purpose::Other));
        return out;
    }
    let n_buckets = len.div_ceil(SHUFFLE_LEAF);
    let mut bucket = vec![0u32; len];
    bucket.par_chunks_mut(CHUNK).enumerate().for_each(|(c, ids)| {
        let mut rng = stream(seed, c as u64, tag, Purpose::Other);
        for id in ids {
            *id = rng.gen_range(0..n_buckets as u32);
        }
    });
    let (mut laid_out, starts) = counting_scatter(data, &bucket, n_buckets);
    drop(bucket);
    split_by_starts(&mut laid_out, &starts).into_par_iter().enumerate().for_each(|(b, part)| {
        fisher_yates(part, &mut stream(seed, BUCKET_STREAM | b as u64, tag, Purpose::Other));
    });
    laid_out
}

/// Stable parallel counting sort: `src` rearranged so that items of bucket 0 come first, then
/// bucket 1, …, each bucket in its original order; plus the `n_buckets + 1` bucket start offsets.
/// `bucket[i] < n_buckets` is the bucket of `src[i]`.
pub fn counting_scatter<T: Copy + Send + Sync>(
    src: &[T],
    bucket: &[u32],
    n_buckets: usize,
) -> (Vec<T>, Vec<usize>) {
    assert_eq!(src.len(), bucket.len());
    counting_scatter_with(bucket, n_buckets, |i| src[i])
}

/// [`counting_scatter`] of the items `item(0), item(1), …` (one per entry of `bucket`), made as
/// they are written: no input array of the items.
fn counting_scatter_with<T: Copy + Send + Sync>(
    bucket: &[u32],
    n_buckets: usize,
    item: impl Fn(usize) -> T + Sync,
) -> (Vec<T>, Vec<usize>) {
    // Per-chunk histograms, then each chunk's write offset in each bucket.
    let mut offsets: Vec<Vec<usize>> = bucket
        .par_chunks(CHUNK)
        .map(|ids| {
            let mut h = vec![0usize; n_buckets];
            for &b in ids {
                h[b as usize] += 1;
            }
            h
        })
        .collect();
    let mut starts = vec![0usize; n_buckets + 1];
    let mut next = 0usize;
    for b in 0..n_buckets {
        starts[b] = next;
        for h in offsets.iter_mut() {
            let count = h[b];
            h[b] = next;
            next += count;
        }
    }
    starts[n_buckets] = next;
    let len = bucket.len();
    let mut out: Vec<T> = Vec::with_capacity(len);
    let dst = SharedMut(out.as_mut_ptr());
    bucket.par_chunks(CHUNK).zip(offsets.par_iter_mut()).enumerate().for_each(|(c, (ids, at))| {
        for (k, &b) in ids.iter().enumerate() {
            // SAFETY: the offsets of (chunk, bucket) pairs are disjoint ranges of `0..len`
            // (prefix sums of the histograms), so no position is written twice.
            unsafe { dst.write(at[b as usize], item(c * CHUNK + k)) };
            at[b as usize] += 1;
        }
    });
    // SAFETY: the (chunk, bucket) ranges partition `0..len`, so every position of the spare
    // capacity was written exactly once above, and `T: Copy` has no drop to run.
    unsafe { out.set_len(len) };
    (out, starts)
}

/// The disjoint mutable slices `data[starts[b]..starts[b+1]]`.
fn split_by_starts<'a, T>(mut data: &'a mut [T], starts: &[usize]) -> Vec<&'a mut [T]> {
    let mut parts = Vec::with_capacity(starts.len().saturating_sub(1));
    for w in starts.windows(2) {
        let (head, tail) = std::mem::take(&mut data).split_at_mut(w[1] - w[0]);
        parts.push(head);
        data = tail;
    }
    parts
}

/// Record indices grouped by code: `(indices, starts)` with the records of code c, in index
/// order, at `indices[starts[c]..starts[c+1]]`. Codes must be in `0..n_codes`.
pub fn group_indices(codes: &[u32], n_codes: usize) -> (Vec<u32>, Vec<usize>) {
    assert!(codes.len() <= u32::MAX as usize + 1, "at most 2^32 records");
    counting_scatter_with(codes, n_codes, |i| i as u32)
}

/// Writes `out[i] = label` for every index `i` of every `(indices, label)` run, in parallel. The
/// runs must not share an index.
fn scatter_labels(out: &mut [i64], runs: &[(&[u32], i64)]) {
    let dst = SharedMut(out.as_mut_ptr());
    let len = out.len();
    runs.par_iter()
        .flat_map(|&(idx, label)| idx.par_chunks(CHUNK).map(move |c| (c, label)))
        .for_each(|(idx, label)| {
            for &i in idx {
                assert!((i as usize) < len);
                // SAFETY: in bounds (checked) and the runs are disjoint, so each position has one
                // writer.
                unsafe { dst.write(i as usize, label) };
            }
        });
}

/// Validates category codes (`0 ≤ code < n`) and returns them as `u32` with their count
/// `max + 1`.
fn dense_codes(argument: &'static str, codes: &[i64]) -> Result<(Vec<u32>, usize), PartitionError> {
    let n = codes.len();
    if n > u32::MAX as usize {
        return reject(argument, format!("at most {} records are supported, got {n}", u32::MAX));
    }
    if let Some(&bad) = codes.par_iter().find_any(|&&c| c < 0 || c as u64 >= n as u64) {
        return reject(argument, format!("codes must be integers in [0, n) = [0, {n}), got {bad}"));
    }
    let dense: Vec<u32> = codes.par_iter().map(|&c| c as u32).collect();
    let n_codes = dense.par_iter().copied().max().map_or(0, |m| m as usize + 1);
    Ok((dense, n_codes))
}

// ---------------------------------------------------------------------------------------------
// The paper's partitioner (Algorithm 3)
// ---------------------------------------------------------------------------------------------

/// An order-preserving map of finite-or-infinite `f64` to `u64` (−0.0 and 0.0 map alike).
#[inline]
fn sort_key(v: f64) -> u64 {
    let bits = (v + 0.0).to_bits(); // + 0.0 turns −0.0 into 0.0
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

/// The record indices ordered by `values`, ties broken by index (a stable order), `O(n)` work.
///
/// Parallel LSD radix sort of `(key, index)` pairs on 11-bit digits of the order-preserving key,
/// each pass a stable [`counting_scatter`]; passes whose digit is the same for every record are
/// skipped (for integer-valued attributes such as age most are). Stability of every pass keeps
/// equal keys in index order. Short inputs use a comparison sort of the pairs.
pub fn stable_order(values: &[f64]) -> Vec<u32> {
    let n = values.len();
    let mut pairs: Vec<(u64, u32)> =
        values.par_iter().enumerate().map(|(i, &v)| (sort_key(v), i as u32)).collect();
    if n < RADIX_MIN {
        pairs.sort_unstable();
    } else {
        const BITS: u32 = 11;
        let mut digit = vec![0u32; n];
        for shift in (0..64).step_by(BITS as usize) {
            digit.par_iter_mut().zip(pairs.par_iter()).for_each(|(d, &(key, _))| {
                *d = ((key >> shift) & ((1 << BITS) - 1)) as u32;
            });
            let first = digit[0];
            if digit.par_iter().all(|&d| d == first) {
                continue;
            }
            pairs = counting_scatter(&pairs, &digit, 1 << BITS).0;
        }
    }
    pairs.into_par_iter().map(|(_, i)| i).collect()
}

/// Below this many records [`stable_order`] uses a comparison sort.
const RADIX_MIN: usize = 1 << 16;

/// The paper's heterogeneity partitioner (Gupta et al. 2024, App. E.2.3, Algorithm 3): one silo id in
/// `0..n_silos` per record.
///
/// 1. Order the records by `values` (the partition attribute A, e.g. age), ties by index, and cut
///    that order into contiguous prior blocks of sizes `s_0, s_1, …` (block k is the k-th lowest
///    range of A).
/// 2. Silo k takes `m_k = ⌊s_k·h⌋` records drawn uniformly without replacement from block k.
/// 3. The other `Σ (s_k − m_k)` records form the pool. As in the paper, silo 0, then 1, … draws
///    its remaining `s_k − m_k` records uniformly without replacement from what is left of the
///    pool; we do it in one go, by a uniform shuffle of the pool cut into consecutive runs, which
///    has the same distribution.
///
/// `h = 0` gives a uniformly random partition (homogeneous silos); `h = 1` gives the sorted
/// contiguous blocks. Silo sizes are exact: `sizes` if given (non-negative, summing to n), else
/// [`equal_sizes`] — `n/K` each, the first `n mod K` silos one more when K does not divide n; the
/// paper's `⌊(n/K)·h⌋` is `⌊s_k·h⌋` with these sizes. `O(n log n)` work (the sort), parallel.
pub fn heterogeneous(
    values: &[f64],
    n_silos: usize,
    heterogeneity: f64,
    sizes: Option<&[i64]>,
    seed: u64,
) -> Result<Vec<i64>, PartitionError> {
    let n = values.len();
    if !(0.0..=1.0).contains(&heterogeneity) {
        return reject("heterogeneity", format!("must be in [0, 1], got {heterogeneity}"));
    }
    let sizes = resolve_sizes(n, n_silos, sizes)?;
    if let Some(i) = values.par_iter().position_first(|v| v.is_nan()) {
        return reject("values", format!("contains NaN (first at index {i})"));
    }

    let mut order = stable_order(values);
    let mut starts = Vec::with_capacity(n_silos + 1);
    starts.push(0usize);
    for &s in &sizes {
        starts.push(starts.last().unwrap() + s);
    }
    let taken: Vec<usize> = sizes.iter().map(|&s| ((s as f64) * heterogeneity).floor() as usize).collect();

    // Step 2, each block with its own stream: its first m_k entries become silo k's.
    split_by_starts(&mut order, &starts).into_par_iter().enumerate().for_each(|(k, block)| {
        choose_front(block, taken[k], &mut stream(seed, k as u64, TAG_PRIOR_BLOCK, Purpose::Other));
    });

    // Step 3: the pool is every block's tail; shuffle it and hand out consecutive runs.
    let pool_len: usize = sizes.iter().zip(&taken).map(|(s, m)| s - m).sum();
    let mut pool: Vec<u32> = Vec::with_capacity(pool_len);
    for k in 0..n_silos {
        pool.extend_from_slice(&order[starts[k] + taken[k]..starts[k + 1]]);
    }
    let pool = shuffled(&pool, seed, TAG_POOL);

    let mut runs: Vec<(&[u32], i64)> = Vec::with_capacity(2 * n_silos);
    let mut at = 0usize;
    for k in 0..n_silos {
        let need = sizes[k] - taken[k];
        runs.push((&order[starts[k]..starts[k] + taken[k]], k as i64));
        runs.push((&pool[at..at + need], k as i64));
        at += need;
    }
    let mut out = vec![0i64; n];
    scatter_labels(&mut out, &runs);
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Dirichlet skew of a categorical column
// ---------------------------------------------------------------------------------------------

/// One draw `p ~ Dirichlet(α, …, α)` into `out` (`Σ p = 1`).
///
/// `p_k = g_k / Σ g` with `g_k ~ Gamma(α, 1)`, computed in log space so that small α (where the
/// gammas underflow to 0) still gives a valid point: for `α < 1`,
/// `Gamma(α) = Gamma(α+1) · U^{1/α}` with `U ~ Uniform(0, 1]` (Marsaglia & Tsang 2000, §6).
pub fn sample_dirichlet<R: Rng + ?Sized>(rng: &mut R, alpha: f64, out: &mut [f64]) {
    assert!(alpha > 0.0 && alpha.is_finite());
    let boosted = alpha < 1.0;
    let gamma = Gamma::new(if boosted { alpha + 1.0 } else { alpha }, 1.0).expect("alpha > 0");
    for o in out.iter_mut() {
        let g: f64 = gamma.sample(rng);
        *o = g.ln();
        if boosted {
            let u = 1.0 - rng.gen::<f64>(); // in (0, 1]
            *o += u.ln() / alpha;
        }
    }
    let max = out.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut sum = 0.0;
    for o in out.iter_mut() {
        *o = (*o - max).exp();
        sum += *o;
    }
    for o in out.iter_mut() {
        *o /= sum;
    }
}

/// Iterative proportional fitting (Deming & Stephan 1940; Sinkhorn): rescales the rows and
/// columns of the non-negative `rows × cols` matrix `m` (row-major) towards the margins
/// `row_totals`, `col_totals` (equal grand totals). The limit is the matrix with those margins
/// closest to the input in Kullback–Leibler divergence. Stops when every column is within `tol`
/// of its target or after `max_iter` sweeps; the last step is a row scaling, so the row sums are
/// exact (up to rounding) on return. Returns the number of sweeps.
pub fn ipf(m: &mut [f64], row_totals: &[f64], col_totals: &[f64], tol: f64, max_iter: usize) -> usize {
    let (r, c) = (row_totals.len(), col_totals.len());
    assert_eq!(m.len(), r * c);
    let mut col_sum = vec![0.0; c];
    for sweep in 1..=max_iter {
        col_sum.iter_mut().for_each(|s| *s = 0.0);
        for row in m.chunks_exact(c) {
            for (s, &v) in col_sum.iter_mut().zip(row) {
                *s += v;
            }
        }
        let col_scale: Vec<f64> =
            col_sum.iter().zip(col_totals).map(|(&s, &t)| if s > 0.0 { t / s } else { 0.0 }).collect();
        let converged = col_sum.iter().zip(col_totals).all(|(s, t)| (s - t).abs() <= tol);
        if !converged {
            for row in m.chunks_exact_mut(c) {
                for (v, &f) in row.iter_mut().zip(&col_scale) {
                    *v *= f;
                }
            }
        }
        for (row, &t) in m.chunks_exact_mut(c).zip(row_totals) {
            let s: f64 = row.iter().sum();
            let f = if s > 0.0 { t / s } else { 0.0 };
            row.iter_mut().for_each(|v| *v *= f);
        }
        if converged {
            return sweep;
        }
    }
    max_iter
}

/// Makes the integer matrix `x` (`rows × cols`, row-major) have column sums `col_totals` exactly
/// without changing its row sums or making an entry negative, staying close to the real target
/// `y`: while some column has an excess, move units within one row from the column with the
/// largest excess to the column with the largest deficit, choosing the row whose move most
/// reduces `|x − y|` (the one most over-rounded in the first column and under-rounded in the
/// second). Requires `Σ col_totals = Σ x`. Each move zeroes an excess, a deficit or an entry of
/// an excess column, and columns never change sign of excess, so it ends after at most
/// `2·cols + rows·cols` moves.
pub fn repair_columns(x: &mut [u64], y: &[f64], col_totals: &[u64], rows: usize) {
    let cols = col_totals.len();
    assert_eq!(x.len(), rows * cols);
    let mut excess: Vec<i64> = col_totals.iter().map(|&t| -(t as i64)).collect();
    for row in x.chunks_exact(cols) {
        for (e, &v) in excess.iter_mut().zip(row) {
            *e += v as i64;
        }
    }
    assert_eq!(excess.iter().sum::<i64>(), 0, "column totals must sum to the matrix total");
    loop {
        let (from, &e_from) = excess.iter().enumerate().max_by_key(|&(k, &e)| (e, std::cmp::Reverse(k))).unwrap();
        if e_from == 0 {
            return;
        }
        let (to, &e_to) = excess.iter().enumerate().min_by_key(|&(k, &e)| (e, k)).unwrap();
        let row = (0..rows)
            .filter(|&r| x[r * cols + from] > 0)
            .max_by(|&a, &b| {
                let gain = |r: usize| {
                    (x[r * cols + from] as f64 - y[r * cols + from]) - (x[r * cols + to] as f64 - y[r * cols + to])
                };
                gain(a).total_cmp(&gain(b)).then(b.cmp(&a))
            })
            .expect("a column with excess has a positive entry");
        let amount = (e_from as u64).min((-e_to) as u64).min(x[row * cols + from]);
        x[row * cols + from] -= amount;
        x[row * cols + to] += amount;
        excess[from] -= amount as i64;
        excess[to] += amount as i64;
    }
}

/// The `categories × silos` count matrix of [`dirichlet`]: how many records of each category
/// each silo gets. Row c is `n_c · p_c` with `p_c ~ Dir(α·1_K)` (stream per category), rounded by
/// largest remainder; with `sizes`, the real matrix is first fitted to the column margins by
/// [`ipf`] and the rounded matrix repaired by [`repair_columns`], so both margins are exact.
pub fn dirichlet_counts(
    category_counts: &[usize],
    n_silos: usize,
    alpha: f64,
    sizes: Option<&[usize]>,
    seed: u64,
) -> Vec<u64> {
    let k = n_silos;
    let mut y = vec![0.0f64; category_counts.len() * k];
    y.par_chunks_mut(k).zip(category_counts.par_iter()).enumerate().for_each(|(c, (row, &n_c))| {
        sample_dirichlet(&mut stream(seed, c as u64, TAG_DIRICHLET, Purpose::Other), alpha, row);
        // A tiny floor keeps every entry positive so that IPF can always reach the margins
        // (a strictly positive matrix with any positive margins has a fitted limit).
        let floor = 1e-9;
        for v in row.iter_mut() {
            *v = n_c as f64 * (*v + floor) / (1.0 + k as f64 * floor);
        }
    });
    if let Some(sizes) = sizes {
        let rows: Vec<f64> = category_counts.iter().map(|&n| n as f64).collect();
        let cols: Vec<f64> = sizes.iter().map(|&s| s as f64).collect();
        ipf(&mut y, &rows, &cols, 0.25, 2000);
    }
    let mut x = vec![0u64; y.len()];
    x.par_chunks_mut(k).zip(y.par_chunks(k)).zip(category_counts.par_iter()).for_each(|((xr, yr), &n_c)| {
        round_preserving_sum(yr, n_c as u64, xr);
    });
    if let Some(sizes) = sizes {
        let totals: Vec<u64> = sizes.iter().map(|&s| s as u64).collect();
        repair_columns(&mut x, &y, &totals, category_counts.len());
    }
    x
}

/// Dirichlet(α) skew of a categorical column (label or sensitive attribute), in the style of
/// flwr-datasets' `DirichletPartitioner`: one silo id in `0..n_silos` per record.
///
/// `groups` holds category codes in `[0, n)` (the Python layer encodes any labels). For each
/// category c, silo proportions `p_c ~ Dirichlet(α·1_K)` are drawn and the category's records,
/// shuffled, are cut into consecutive runs of `x_{c,k}` records (see [`dirichlet_counts`]).
///
/// * Without `sizes`, `x_{c,k}` is `n_c·p_{c,k}` rounded (largest remainder): silo sizes are
///   random and a silo can be empty when α is small or K large.
/// * With `sizes` (non-negative, summing to n), the matrix `n_c·p_{c,k}` is fitted by IPF to
///   row sums `n_c` and column sums `s_k` (the KL-closest matrix with both margins), rounded, and
///   repaired: every silo gets exactly `s_k` records and every record exactly one silo.
///
/// Large α gives homogeneous silos; small α concentrates each category on few silos. `O(n)`
/// work besides the `O(C·K)` matrix, parallel.
pub fn dirichlet(
    groups: &[i64],
    n_silos: usize,
    alpha: f64,
    sizes: Option<&[i64]>,
    seed: u64,
) -> Result<Vec<i64>, PartitionError> {
    let n = groups.len();
    if !(alpha > 0.0 && alpha.is_finite()) {
        return reject("alpha", format!("must be finite and > 0, got {alpha}"));
    }
    check_n_silos(n, n_silos)?;
    let sizes = match sizes {
        Some(s) => Some(resolve_sizes(n, n_silos, Some(s))?),
        None => None,
    };
    let (codes, n_codes) = dense_codes("groups", groups)?;
    let (mut by_category, starts) = group_indices(&codes, n_codes);
    drop(codes);
    let counts: Vec<usize> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    let x = dirichlet_counts(&counts, n_silos, alpha, sizes.as_deref(), seed);

    let parts = split_by_starts(&mut by_category, &starts);
    parts.into_par_iter().enumerate().for_each(|(c, part)| {
        shuffle(part, seed, TAG_CATEGORY_SHUFFLE.wrapping_add(c as u64));
    });
    let mut runs: Vec<(&[u32], i64)> = Vec::with_capacity(n_codes * n_silos);
    for c in 0..n_codes {
        let mut at = starts[c];
        for k in 0..n_silos {
            let len = x[c * n_silos + k] as usize;
            runs.push((&by_category[at..at + len], k as i64));
            at += len;
        }
        debug_assert_eq!(at, starts[c + 1]);
    }
    let mut out = vec![0i64; n];
    scatter_labels(&mut out, &runs);
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Heterogeneity measures
// ---------------------------------------------------------------------------------------------

/// Validates silo ids against a second column of the same length; returns them grouped.
fn silos_of(silo_ids: &[i64], other_len: usize, other: &'static str) -> Result<(Vec<u32>, Vec<usize>), PartitionError> {
    if silo_ids.len() != other_len {
        return reject(other, format!("needs one entry per record ({}), got {other_len}", silo_ids.len()));
    }
    if silo_ids.is_empty() {
        return reject("silo_ids", "is empty");
    }
    let (codes, n_silos) = dense_codes("silo_ids", silo_ids)?;
    Ok(group_indices(&codes, n_silos))
}

/// Size-weighted mean total-variation distance between each silo's distribution of a categorical
/// column and the pooled one:
///
/// `H_TV = Σ_k (n_k/n) · ½ Σ_c |p̂(c | k) − p̂(c)|`, in `[0, 1)`.
///
/// 0 when every silo has the pooled mix; larger when silos specialise. Under a uniformly random
/// partition it is `O(√(C·K/n))` (sampling noise), not 0. `O(n)` work, parallel over silos.
pub fn heterogeneity_tv(silo_ids: &[i64], groups: &[i64]) -> Result<f64, PartitionError> {
    let n = groups.len();
    let (by_silo, starts) = silos_of(silo_ids, n, "groups")?;
    let (codes, n_codes) = dense_codes("groups", groups)?;
    let mut global = vec![0usize; n_codes];
    for &c in &codes {
        global[c as usize] += 1;
    }
    let p: Vec<f64> = global.iter().map(|&g| g as f64 / n as f64).collect();
    let weighted: f64 = starts
        .par_windows(2)
        .map_init(
            || (vec![0usize; n_codes], Vec::<u32>::new()),
            |(count, touched), w| {
                let members = &by_silo[w[0]..w[1]];
                if members.is_empty() {
                    return 0.0;
                }
                for &i in members {
                    let c = codes[i as usize];
                    if count[c as usize] == 0 {
                        touched.push(c);
                    }
                    count[c as usize] += 1;
                }
                // Categories absent from the silo contribute p̂(c) each: 1 − Σ_touched p̂(c).
                let size = members.len() as f64;
                let (mut dist, mut p_touched) = (0.0, 0.0);
                for &c in touched.iter() {
                    dist += (count[c as usize] as f64 / size - p[c as usize]).abs();
                    p_touched += p[c as usize];
                    count[c as usize] = 0;
                }
                touched.clear();
                dist += (1.0 - p_touched).max(0.0);
                size * 0.5 * dist
            },
        )
        .sum();
    Ok(weighted / n as f64)
}

/// Correlation ratio η² of a numeric column on the silo id: the share of its variance that lies
/// between silos,
///
/// `η² = Σ_k n_k (x̄_k − x̄)² / Σ_i (x_i − x̄)²`, in `[0, 1]`.
///
/// 0 when every silo has the pooled mean; for the paper's partitioner silo means move
/// `≈ h·(block mean − x̄)`, so η² grows like `h²` up to its value for sorted blocks (close to 1
/// for many silos). Under a uniformly random partition its mean is `(K−1)/(n−1)`. A constant
/// column gives 0. `O(n)` work, parallel.
pub fn heterogeneity_eta2(silo_ids: &[i64], values: &[f64]) -> Result<f64, PartitionError> {
    let n = values.len();
    let (by_silo, starts) = silos_of(silo_ids, n, "values")?;
    if let Some(i) = values.par_iter().position_first(|v| !v.is_finite()) {
        return reject("values", format!("must be finite (first bad value at index {i})"));
    }
    let mean = values.par_iter().sum::<f64>() / n as f64;
    let total: f64 = values.par_iter().map(|v| (v - mean) * (v - mean)).sum();
    if total == 0.0 {
        return Ok(0.0);
    }
    let between: f64 = starts
        .par_windows(2)
        .map(|w| {
            let members = &by_silo[w[0]..w[1]];
            if members.is_empty() {
                return 0.0;
            }
            let dev: f64 = members.iter().map(|&i| values[i as usize] - mean).sum();
            dev * dev / members.len() as f64
        })
        .sum();
    Ok((between / total).clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn silo_sizes(ids: &[i64], k: usize) -> Vec<usize> {
        let mut s = vec![0; k];
        for &i in ids {
            s[i as usize] += 1;
        }
        s
    }

    fn ages(n: usize, seed: u64) -> Vec<f64> {
        let mut rng = stream(seed, 0, 0, Purpose::Other);
        (0..n).map(|_| (18.0 + 60.0 * rng.gen::<f64>()).floor()).collect()
    }

    #[test]
    fn partition_error_names_the_argument() {
        let e = heterogeneous(&[1.0, 2.0], 1, 1.5, None, 0).unwrap_err();
        assert_eq!(e.argument, "heterogeneity");
        assert!(e.to_string().starts_with("heterogeneity: "));
    }

    #[test]
    fn equal_sizes_give_the_remainder_to_the_first_silos() {
        assert_eq!(equal_sizes(10, 3).unwrap(), vec![4, 3, 3]);
        assert_eq!(equal_sizes(9, 3).unwrap(), vec![3, 3, 3]);
        assert_eq!(equal_sizes(3, 4).unwrap_err().argument, "n_silos");
        assert_eq!(equal_sizes(3, 0).unwrap_err().argument, "n_silos");
    }

    #[test]
    fn power_law_sizes_sum_to_n_and_decrease() {
        for (n, k, a, m) in [(1000, 10, 1.0, 1), (10, 10, 2.0, 1), (12345, 7, 0.5, 100), (100, 3, 0.0, 0)] {
            let s = power_law_sizes(n, k, a, m).unwrap();
            assert_eq!(s.iter().sum::<usize>(), n);
            assert!(s.iter().all(|&x| x >= m));
            assert!(s.windows(2).all(|w| w[0] >= w[1]), "{s:?}");
        }
        // Zipf with exponent 1 over 3 silos: weights 1, 1/2, 1/3 of 1100 = 600, 300, 200.
        assert_eq!(power_law_sizes(1100, 3, 1.0, 0).unwrap(), vec![600, 300, 200]);
        assert_eq!(power_law_sizes(10, 3, 1.0, 4).unwrap_err().argument, "min_size");
        assert_eq!(power_law_sizes(10, 3, -1.0, 1).unwrap_err().argument, "exponent");
    }

    #[test]
    fn round_preserving_sum_is_exact_and_proportional() {
        let mut out = [0u64; 3];
        round_preserving_sum(&[1.0, 1.0, 1.0], 10, &mut out);
        assert_eq!(out, [4, 3, 3]);
        round_preserving_sum(&[0.5, 0.3, 0.2], 7, &mut out);
        assert_eq!(out, [4, 2, 1]); // 3.5, 2.1, 1.4: floors 3, 2, 1, and the .5 gets the extra
        round_preserving_sum(&[0.0, 0.0, 0.0], 2, &mut out);
        assert_eq!(out.iter().sum::<u64>(), 2);
        let w: Vec<f64> = (0..1000).map(|i| 1.0 / (i as f64 + 1.0)).collect();
        let mut big = vec![0u64; 1000];
        round_preserving_sum(&w, 987_654, &mut big);
        assert_eq!(big.iter().sum::<u64>(), 987_654);
    }

    #[test]
    fn fisher_yates_is_uniform_over_permutations() {
        let mut rng = stream(1, 0, 0, Purpose::Other);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..60_000 {
            let mut v = [0u8, 1, 2];
            fisher_yates(&mut v, &mut rng);
            *counts.entry(v).or_insert(0usize) += 1;
        }
        // 6 permutations, 10 000 expected each, sd ≈ 91.
        assert_eq!(counts.len(), 6);
        assert!(counts.values().all(|&c| (c as f64 - 10_000.0).abs() < 500.0), "{counts:?}");
    }

    #[test]
    fn choose_front_picks_uniform_subsets() {
        let mut rng = stream(2, 0, 0, Purpose::Other);
        let mut hits = [0usize; 10];
        for _ in 0..20_000 {
            let mut v: Vec<usize> = (0..10).collect();
            choose_front(&mut v, 3, &mut rng);
            let mut front = v[..3].to_vec();
            front.sort_unstable();
            front.dedup();
            assert_eq!(front.len(), 3);
            for &i in &v[..3] {
                hits[i] += 1;
            }
        }
        // Each index is chosen with probability 3/10: 6000 expected, sd ≈ 65.
        assert!(hits.iter().all(|&c| (c as f64 - 6000.0).abs() < 400.0), "{hits:?}");
    }

    #[test]
    fn shuffle_is_a_reproducible_uniform_permutation() {
        // Large enough for the bucketed path.
        let n = 5 * SHUFFLE_LEAF + 17;
        let mut a: Vec<u32> = (0..n as u32).collect();
        shuffle(&mut a, 7, 1);
        let mut b: Vec<u32> = (0..n as u32).collect();
        shuffle(&mut b, 7, 1);
        assert_eq!(a, b);
        let mut c: Vec<u32> = (0..n as u32).collect();
        shuffle(&mut c, 8, 1);
        assert_ne!(a, c);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert!(sorted.iter().enumerate().all(|(i, &v)| v as usize == i));
        // Uniform permutation: an element from any fifth of the input lands in any fifth of the
        // output with probability 1/5. 25 cells of ≈ 6554 each (sd ≈ 72) per shuffle.
        for seed in 0..3 {
            let mut v: Vec<u32> = (0..n as u32).collect();
            shuffle(&mut v, seed, 2);
            let mut cells = [[0usize; 5]; 5];
            for (pos, &x) in v.iter().enumerate() {
                cells[x as usize * 5 / n][pos * 5 / n] += 1;
            }
            let want = n as f64 / 25.0;
            assert!(cells.iter().flatten().all(|&c| (c as f64 - want).abs() < 450.0), "{cells:?}");
        }
    }

    #[test]
    fn counting_scatter_is_a_stable_grouping() {
        let src = [10, 11, 12, 13, 14, 15];
        let bucket = [2, 0, 2, 1, 0, 2];
        let (out, starts) = counting_scatter(&src, &bucket, 4);
        assert_eq!(out, vec![11, 14, 13, 10, 12, 15]);
        assert_eq!(starts, vec![0, 2, 3, 6, 6]);
    }

    #[test]
    fn group_indices_lists_each_code_in_index_order() {
        let codes: Vec<u32> = (0..200_000u32).map(|i| (i * 7919) % 5).collect();
        let (idx, starts) = group_indices(&codes, 5);
        for c in 0..5 {
            let part = &idx[starts[c]..starts[c + 1]];
            assert!(part.windows(2).all(|w| w[0] < w[1]));
            assert!(part.iter().all(|&i| codes[i as usize] == c as u32));
        }
        assert_eq!(starts[5], 200_000);
    }

    #[test]
    fn scatter_labels_writes_each_run() {
        let mut out = vec![-1i64; 5];
        scatter_labels(&mut out, &[(&[4, 0][..], 7), (&[2][..], 3), (&[1, 3][..], 0)]);
        assert_eq!(out, vec![7, 0, 3, 0, 7]);
    }

    #[test]
    fn dense_codes_rejects_negative_and_too_large_codes() {
        assert_eq!(dense_codes("groups", &[0, 2, 1]).unwrap(), (vec![0, 2, 1], 3));
        assert_eq!(dense_codes("groups", &[0, -1]).unwrap_err().argument, "groups");
        assert_eq!(dense_codes("groups", &[0, 2]).unwrap_err().argument, "groups");
    }

    #[test]
    fn sort_key_preserves_the_order_of_f64() {
        let v = [f64::NEG_INFINITY, -1e300, -1.0, -1e-300, -0.0, 0.0, 1e-300, 1.0, f64::INFINITY];
        for w in v.windows(2) {
            assert!(sort_key(w[0]) <= sort_key(w[1]), "{} {}", w[0], w[1]);
        }
        assert_eq!(sort_key(-0.0), sort_key(0.0));
    }

    #[test]
    fn stable_order_breaks_ties_by_index() {
        assert_eq!(stable_order(&[2.0, 1.0, 2.0, -0.0, 0.0, 1.0]), vec![3, 4, 1, 5, 0, 2]);
        // The radix path, with ties, negatives and infinities, against a stable comparison sort.
        let mut rng = stream(6, 0, 0, Purpose::Other);
        let v: Vec<f64> = (0..RADIX_MIN + 999)
            .map(|i| match i % 7 {
                0 => f64::INFINITY,
                1 => -3.5,
                _ => (rng.gen::<f64>() - 0.5) * 1e3,
            })
            .collect();
        let mut want: Vec<u32> = (0..v.len() as u32).collect();
        want.sort_by(|&a, &b| v[a as usize].total_cmp(&v[b as usize]));
        assert_eq!(stable_order(&v), want);
    }

    #[test]
    fn heterogeneous_sizes_are_exact_and_every_record_has_one_silo() {
        let v = ages(10_007, 1);
        for h in [0.0, 0.3, 1.0] {
            let ids = heterogeneous(&v, 10, h, None, 5).unwrap();
            assert_eq!(ids.len(), v.len());
            assert_eq!(silo_sizes(&ids, 10), equal_sizes(10_007, 10).unwrap());
        }
        let sizes = [5000i64, 3000, 2000, 7];
        let ids = heterogeneous(&v, 4, 0.5, Some(&sizes), 5).unwrap();
        assert_eq!(silo_sizes(&ids, 4), vec![5000, 3000, 2000, 7]);
    }

    #[test]
    fn heterogeneous_one_is_sorted_blocks_and_zero_is_homogeneous() {
        let v = ages(20_000, 2);
        let sorted = heterogeneous(&v, 4, 1.0, None, 3).unwrap();
        let order = stable_order(&v);
        for (pos, &i) in order.iter().enumerate() {
            assert_eq!(sorted[i as usize], (pos / 5000) as i64);
        }
        let mixed = heterogeneous(&v, 4, 0.0, None, 3).unwrap();
        let global = v.iter().sum::<f64>() / v.len() as f64;
        for k in 0..4 {
            let m: Vec<f64> = v.iter().zip(&mixed).filter(|(_, &s)| s == k).map(|(&x, _)| x).collect();
            let mean = m.iter().sum::<f64>() / m.len() as f64;
            // sd of an age is ≈ 17.3, so the mean of 5000 has sd ≈ 0.25.
            assert!((mean - global).abs() < 1.2, "silo {k}: {mean} vs {global}");
        }
    }

    #[test]
    fn heterogeneous_is_deterministic_and_rejects_bad_input() {
        let v = ages(50_000, 3);
        assert_eq!(heterogeneous(&v, 7, 0.4, None, 9).unwrap(), heterogeneous(&v, 7, 0.4, None, 9).unwrap());
        assert_ne!(heterogeneous(&v, 7, 0.4, None, 9).unwrap(), heterogeneous(&v, 7, 0.4, None, 10).unwrap());
        assert_eq!(heterogeneous(&[1.0, f64::NAN], 1, 0.0, None, 0).unwrap_err().argument, "values");
        assert_eq!(heterogeneous(&[1.0, 2.0], 3, 0.0, None, 0).unwrap_err().argument, "n_silos");
        assert_eq!(heterogeneous(&[1.0, 2.0], 2, 0.0, Some(&[1, 2]), 0).unwrap_err().argument, "sizes");
        assert_eq!(heterogeneous(&[1.0, 2.0], 2, -0.1, None, 0).unwrap_err().argument, "heterogeneity");
    }

    #[test]
    fn heterogeneous_eta2_grows_with_h() {
        let v = ages(40_000, 4);
        let mut last = -1.0;
        for h in [0.0, 0.25, 0.5, 0.75, 1.0] {
            let e: f64 = (0..3)
                .map(|s| heterogeneity_eta2(&heterogeneous(&v, 5, h, None, s).unwrap(), &v).unwrap())
                .sum::<f64>()
                / 3.0;
            assert!(e > last, "h = {h}: {e} <= {last}");
            last = e;
        }
        assert!(last > 0.9);
    }

    #[test]
    fn sample_dirichlet_has_the_dirichlet_moments() {
        let mut rng = stream(11, 0, 0, Purpose::Other);
        for alpha in [0.05, 0.5, 3.0] {
            let (k, trials) = (4usize, 40_000);
            let mut p = vec![0.0; k];
            let (mut s1, mut s2) = (0.0, 0.0);
            for _ in 0..trials {
                sample_dirichlet(&mut rng, alpha, &mut p);
                assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12 && p.iter().all(|&x| x >= 0.0));
                s1 += p[0];
                s2 += p[0] * p[0];
            }
            let mean = s1 / trials as f64;
            let var = s2 / trials as f64 - mean * mean;
            // E p_0 = 1/K, Var p_0 = (1/K)(1 − 1/K)/(Kα + 1).
            let want_var = 0.25 * 0.75 / (4.0 * alpha + 1.0);
            assert!((mean - 0.25).abs() < 0.01, "alpha {alpha}: mean {mean}");
            assert!((var / want_var - 1.0).abs() < 0.06, "alpha {alpha}: var {var} vs {want_var}");
        }
        // Tiny α must not underflow into NaN.
        let mut p = vec![0.0; 10];
        sample_dirichlet(&mut rng, 1e-4, &mut p);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn ipf_reaches_both_margins() {
        let mut m = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let sweeps = ipf(&mut m, &[10.0, 20.0], &[5.0, 10.0, 15.0], 1e-9, 1000);
        assert!(sweeps < 1000);
        for r in 0..2 {
            assert!((m[r * 3..r * 3 + 3].iter().sum::<f64>() - [10.0, 20.0][r]).abs() < 1e-9);
        }
        for c in 0..3 {
            assert!((m[c] + m[3 + c] - [5.0, 10.0, 15.0][c]).abs() < 1e-6);
        }
        // The KL projection keeps the cross-ratio: (1·6)/(3·4) = 0.5.
        assert!((m[0] * m[5] / (m[2] * m[3]) - 0.5).abs() < 1e-6);
    }

    #[test]
    fn repair_columns_fixes_columns_and_keeps_rows() {
        // Rows sum to 5 and 5; columns must become 4, 3, 3.
        let mut x = vec![5, 0, 0, 3, 2, 0];
        let y = vec![3.0, 1.0, 1.0, 1.0, 2.0, 2.0];
        repair_columns(&mut x, &y, &[4, 3, 3], 2);
        assert_eq!(x[0] + x[3], 4);
        assert_eq!(x[1] + x[4], 3);
        assert_eq!(x[2] + x[5], 3);
        assert_eq!(x[..3].iter().sum::<u64>(), 5);
        assert_eq!(x[3..].iter().sum::<u64>(), 5);
    }

    #[test]
    fn dirichlet_counts_have_exact_margins() {
        let counts = [700usize, 200, 100];
        for alpha in [0.01, 0.3, 10.0] {
            let free = dirichlet_counts(&counts, 5, alpha, None, 1);
            for c in 0..3 {
                assert_eq!(free[c * 5..c * 5 + 5].iter().sum::<u64>(), counts[c] as u64);
            }
            let sizes = [400usize, 300, 150, 100, 50];
            let x = dirichlet_counts(&counts, 5, alpha, Some(&sizes), 1);
            for c in 0..3 {
                assert_eq!(x[c * 5..c * 5 + 5].iter().sum::<u64>(), counts[c] as u64);
            }
            for k in 0..5 {
                assert_eq!((0..3).map(|c| x[c * 5 + k]).sum::<u64>(), sizes[k] as u64);
            }
        }
    }

    #[test]
    fn dirichlet_respects_sizes_and_is_deterministic() {
        let groups: Vec<i64> = (0..30_000).map(|i| (i % 3) as i64).collect();
        let sizes = [10_000i64, 8_000, 6_000, 4_000, 2_000];
        let ids = dirichlet(&groups, 5, 0.2, Some(&sizes), 4).unwrap();
        assert_eq!(silo_sizes(&ids, 5), vec![10_000, 8_000, 6_000, 4_000, 2_000]);
        assert_eq!(ids, dirichlet(&groups, 5, 0.2, Some(&sizes), 4).unwrap());
        assert_ne!(ids, dirichlet(&groups, 5, 0.2, Some(&sizes), 5).unwrap());
        let free = dirichlet(&groups, 5, 0.2, None, 4).unwrap();
        assert_eq!(free.len(), 30_000);
        assert!(free.iter().all(|&k| (0..5).contains(&k)));
        assert_eq!(dirichlet(&groups, 5, 0.0, None, 0).unwrap_err().argument, "alpha");
        assert_eq!(dirichlet(&[0, -2], 1, 1.0, None, 0).unwrap_err().argument, "groups");
    }

    #[test]
    fn dirichlet_tv_falls_with_alpha() {
        let groups: Vec<i64> = (0..20_000).map(|i| (i % 4) as i64).collect();
        let mut last = f64::INFINITY;
        for alpha in [0.05, 0.3, 2.0, 100.0] {
            let tv: f64 = (0..4)
                .map(|s| heterogeneity_tv(&dirichlet(&groups, 8, alpha, None, s).unwrap(), &groups).unwrap())
                .sum::<f64>()
                / 4.0;
            assert!(tv < last, "alpha {alpha}: {tv} >= {last}");
            last = tv;
        }
        assert!(last < 0.05);
    }

    #[test]
    fn heterogeneity_tv_of_known_partitions() {
        // Two silos, each holding one of two equally frequent groups: TV 0.5 each.
        assert!((heterogeneity_tv(&[0, 0, 1, 1], &[0, 0, 1, 1]).unwrap() - 0.5).abs() < 1e-12);
        // Identical mixes: 0.
        assert_eq!(heterogeneity_tv(&[0, 1, 0, 1], &[0, 0, 1, 1]).unwrap(), 0.0);
        // Silo 0 = {a, a, b} vs global (1/2, 1/2): TV 1/6, weight 3/4; silo 1 = {b}: TV 1/2, weight 1/4.
        let want = 0.75 / 6.0 + 0.25 * 0.5;
        assert!((heterogeneity_tv(&[0, 0, 0, 1], &[0, 0, 1, 1]).unwrap() - want).abs() < 1e-12);
        assert_eq!(heterogeneity_tv(&[0, 1], &[0]).unwrap_err().argument, "groups");
    }

    #[test]
    fn heterogeneity_eta2_of_known_partitions() {
        // Silo means 1 and 3 around 2; within-silo spread 0: all variance between silos.
        assert!((heterogeneity_eta2(&[0, 0, 1, 1], &[1.0, 1.0, 3.0, 3.0]).unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(heterogeneity_eta2(&[0, 1, 0, 1], &[1.0, 1.0, 3.0, 3.0]).unwrap(), 0.0);
        assert_eq!(heterogeneity_eta2(&[0, 1], &[5.0, 5.0]).unwrap(), 0.0);
        // Values 0, 1, 2, 3 in silos {0, 1}, {2, 3}: between 2·1² + 2·1² = 4, total 5.
        assert!((heterogeneity_eta2(&[0, 0, 1, 1], &[0.0, 1.0, 2.0, 3.0]).unwrap() - 0.8).abs() < 1e-12);
        assert_eq!(heterogeneity_eta2(&[0, 1], &[0.0, f64::NAN]).unwrap_err().argument, "values");
    }
}
