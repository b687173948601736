//! Mini-batch sampling schemes. The accountant must match the scheme exactly (docs/accounting.md):
//! fixed-size sampling without replacement (the default), Poisson sampling, shuffled epochs, or
//! the full batch.
//!
//! A shuffled epoch visits the silo's records in the order of a keyed pseudorandom permutation
//! ([`EpochPermutation`]), one slice of `m` positions per round; it costs O(m) per round and
//! keeps no state between rounds.

use rand::Rng;

use crate::config::ConfigError;

/// How a silo draws its batch each round.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sampling {
    /// A uniformly random subset of exactly `m` records.
    WithoutReplacement { m: usize },
    /// Each record independently with probability `q`; sums are divided by the expected size.
    Poisson { q: f64 },
    /// Shuffled epochs: a silo with `n` records has `b = ⌈n/m⌉` rounds per epoch; round `t` takes
    /// positions `[(t mod b)·m, min((t mod b + 1)·m, n))` of a permutation of `0..n` that is fresh
    /// for each epoch `t / b`. Every record is used exactly once per epoch; sums are divided by
    /// `m` (the short last batch too).
    Shuffle { m: usize },
    /// Every record, every round.
    FullBatch,
}

impl Sampling {
    /// Fixed-size sampling of `m ≥ 1` records without replacement.
    pub fn without_replacement(m: usize) -> Result<Self, ConfigError> {
        if m == 0 {
            return Err(ConfigError::BatchSize);
        }
        Ok(Sampling::WithoutReplacement { m })
    }

    /// Shuffled epochs of batches of `m ≥ 1` records (see [`Sampling::Shuffle`]).
    pub fn shuffle(m: usize) -> Result<Self, ConfigError> {
        if m == 0 {
            return Err(ConfigError::BatchSize);
        }
        Ok(Sampling::Shuffle { m })
    }

    /// Poisson sampling with rate `q ∈ (0, 1]`.
    pub fn poisson(q: f64) -> Result<Self, ConfigError> {
        if !(q > 0.0 && q <= 1.0) {
            return Err(ConfigError::SampleRate(q));
        }
        Ok(Sampling::Poisson { q })
    }

    /// The scheme of public name `"without_replacement"` (batch of `batch_size`), `"poisson"`
    /// (rate `sample_rate`), `"shuffle"` (batches of `batch_size`) or `"full_batch"`; the argument
    /// the scheme does not use is ignored.
    pub fn parse(name: &str, batch_size: usize, sample_rate: f64) -> Result<Self, ConfigError> {
        match name {
            "without_replacement" => Sampling::without_replacement(batch_size),
            "shuffle" => Sampling::shuffle(batch_size),
            "poisson" => Sampling::poisson(sample_rate),
            "full_batch" => Ok(Sampling::FullBatch),
            other => Err(ConfigError::UnknownSampling(other.to_string())),
        }
    }

    /// Checks a scheme built directly from its variant as its constructor would.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match *self {
            Sampling::WithoutReplacement { m } => Sampling::without_replacement(m).map(drop),
            Sampling::Poisson { q } => Sampling::poisson(q).map(drop),
            Sampling::Shuffle { m } => Sampling::shuffle(m).map(drop),
            Sampling::FullBatch => Ok(()),
        }
    }

    /// The fixed denominator of the batch means: `m`, `q·n`, or `n`.
    pub fn denominator(&self, n: usize) -> f64 {
        match *self {
            Sampling::WithoutReplacement { m } | Sampling::Shuffle { m } => m as f64,
            Sampling::Poisson { q } => q * n as f64,
            Sampling::FullBatch => n as f64,
        }
    }

    /// The sampling rate `q` seen by the accountant (`m/n` for shuffled epochs: the fraction of
    /// the epoch one round uses).
    pub fn rate(&self, n: usize) -> f64 {
        match *self {
            Sampling::WithoutReplacement { m } | Sampling::Shuffle { m } => m as f64 / n as f64,
            Sampling::Poisson { q } => q,
            Sampling::FullBatch => 1.0,
        }
    }

    /// Rounds per epoch of a shuffled silo with `n` records, `⌈n/m⌉` (at least 1); 1 otherwise.
    pub fn rounds_per_epoch(&self, n: usize) -> u64 {
        match *self {
            Sampling::Shuffle { m } => n.div_ceil(m).max(1) as u64,
            _ => 1,
        }
    }

    /// Which batch stream round `round` draws from: its epoch `round / b` for shuffled epochs
    /// (one permutation per epoch), the round itself otherwise.
    pub fn stream_index(&self, round: u64, n: usize) -> u64 {
        round / self.rounds_per_epoch(n)
    }

    /// Writes the sorted indices of round `round`'s batch from `0..n` into `out` (cleared
    /// first). `rng` must be the batch stream of [`Sampling::stream_index`]`(round, n)`: for
    /// shuffled epochs the epoch's permutation is keyed by it, and `round` picks the slice.
    ///
    /// Every scheme costs O(batch) (plus sorting the batch), never O(n), except the full batch:
    /// without replacement by Floyd's algorithm, Poisson by geometric skips, shuffled epochs by
    /// evaluating the epoch's permutation on the round's slice of positions.
    pub fn draw_into<R: Rng + ?Sized>(&self, rng: &mut R, n: usize, round: u64, out: &mut Vec<usize>) {
        out.clear();
        match *self {
            Sampling::WithoutReplacement { m } => floyd_into(rng, n, m.min(n), out),
            Sampling::Poisson { q } => poisson_into(rng, n, q, out),
            Sampling::Shuffle { m } => {
                let perm = EpochPermutation::new(rng, n);
                let pos = (round % self.rounds_per_epoch(n)) as usize * m;
                let slice = pos..(pos + m).min(n);
                if perm.tabulates() {
                    // The round function tabulated once per epoch (and thread) costs far fewer
                    // SipHash calls than evaluating it for every position (same values).
                    FEISTEL_TABLES.with(|cell| {
                        let mut tables = cell.borrow_mut();
                        let table = tables.get(&perm);
                        perm.apply_range_with(table, slice, |i| out.push(i));
                    });
                } else {
                    out.extend(slice.map(|p| perm.apply(p)));
                }
                sort_distinct(out, n);
            }
            Sampling::FullBatch => out.extend(0..n),
        }
    }

    /// Draws the indices of one batch from `0..n` (for shuffled epochs: the first batch of the
    /// epoch keyed by `rng`; use [`Sampling::draw_into`] for any other round).
    pub fn draw<R: Rng + ?Sized>(&self, rng: &mut R, n: usize) -> Vec<usize> {
        let mut out = Vec::new();
        self.draw_into(rng, n, 0, &mut out);
        out
    }
}

std::thread_local! {
    /// The tabulated round functions of the shuffled epochs' permutations this thread drew from
    /// ([`EpochPermutation::tabulate`]), so that each is computed once per epoch, not per batch.
    static FEISTEL_TABLES: std::cell::RefCell<FeistelTables> = std::cell::RefCell::new(FeistelTables::default());
    /// Membership bits of Floyd's algorithm, one bit per record, reused by every draw on the
    /// thread (only the bits a draw set are cleared afterwards, so a draw costs O(m)).
    static CHOSEN: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A uniformly random `m`-subset of `0..n`, sorted, by Floyd's algorithm (Bentley and Floyd,
/// "Programming pearls: a sample of brilliance", 1987): for `j = n-m .. n-1` draw `t` uniform on
/// `0..=j` and take `t`, or `j` if `t` is taken already. Every `m`-subset has probability
/// `1 / C(n, m)`; `m` draws, O(m) work.
fn floyd_into<R: Rng + ?Sized>(rng: &mut R, n: usize, m: usize, out: &mut Vec<usize>) {
    CHOSEN.with(|cell| {
        let mut bits = cell.borrow_mut();
        let words = n.div_ceil(64);
        if bits.len() < words {
            bits.resize(words, 0);
        }
        // Indices below 2^32 are drawn as u32 (half the random bytes of a u64 draw).
        let small = n <= u32::MAX as usize;
        for j in n - m..n {
            let t = if small { rng.gen_range(0..=j as u32) as usize } else { rng.gen_range(0..=j) };
            let pick = if bits[t / 64] >> (t % 64) & 1 == 1 { j } else { t };
            bits[pick / 64] |= 1 << (pick % 64);
            out.push(pick);
        }
        if words <= 4 * m {
            // Few words: read the picks back in increasing order from the bits (no sort).
            drain_bits(&mut bits[..words], out);
        } else {
            for &i in out.iter() {
                bits[i / 64] = 0;
            }
            out.sort_unstable();
        }
    });
}

/// Replaces `out` by the indices whose bits are set in `bits`, in increasing order, and clears
/// those bits.
///
/// A batch sets about one bit in a word or two, so a loop that stops at each word's last bit
/// would mispredict about once a word. Instead every word writes [`DRAIN_SLOTS`] slots whatever
/// its count (the slots past the count hold junk that the next word overwrites), and only a word
/// with more bits than that loops over the rest.
fn drain_bits(bits: &mut [u64], out: &mut Vec<usize>) {
    let total: usize = bits.iter().map(|w| w.count_ones() as usize).sum();
    out.clear();
    out.resize(total + DRAIN_SLOTS, 0);
    let mut len = 0;
    for (w, word) in bits.iter_mut().enumerate() {
        let mut v = std::mem::take(word);
        let count = v.count_ones() as usize;
        let base = w * 64;
        let slots: &mut [usize; DRAIN_SLOTS] = (&mut out[len..len + DRAIN_SLOTS]).try_into().expect("DRAIN_SLOTS slots");
        for slot in slots.iter_mut() {
            // A zero word gives 64 here: junk, in a slot past the count.
            *slot = base + v.trailing_zeros() as usize;
            v &= v.wrapping_sub(1);
        }
        let mut at = len + DRAIN_SLOTS;
        while v != 0 {
            out[at] = base + v.trailing_zeros() as usize;
            v &= v - 1;
            at += 1;
        }
        len += count;
    }
    out.truncate(total);
}

/// Slots [`drain_bits`] writes for every word.
const DRAIN_SLOTS: usize = 4;

/// Sorts `out`, whose entries are distinct and below `n`: through the thread's membership bits
/// when they are few against the entries (`n/64 ≤ 4·len`: one pass to set them, one to read them
/// back), else by `sort_unstable`. Either way the same sorted list.
fn sort_distinct(out: &mut Vec<usize>, n: usize) {
    let words = n.div_ceil(64);
    if words > 4 * out.len() {
        out.sort_unstable();
        return;
    }
    CHOSEN.with(|cell| {
        let mut bits = cell.borrow_mut();
        if bits.len() < words {
            bits.resize(words, 0);
        }
        let count = out.len();
        for &i in out.iter() {
            bits[i / 64] |= 1 << (i % 64);
        }
        drain_bits(&mut bits[..words], out);
        debug_assert_eq!(out.len(), count, "sort_distinct: entries must be distinct");
    });
}

/// Each of `0..n` independently with probability `q`, in increasing order, by geometric skips:
/// the gap before the next chosen record is `⌊ln U / ln(1-q)⌋` with `U` uniform on `(0, 1]`,
/// i.e. `P(gap = g) = (1-q)^g q`. One uniform per chosen record: O(q·n) work.
fn poisson_into<R: Rng + ?Sized>(rng: &mut R, n: usize, q: f64, out: &mut Vec<usize>) {
    if q >= 1.0 {
        out.extend(0..n);
        return;
    }
    let log_keep = (-q).ln_1p();
    let mut i = 0usize;
    while i < n {
        let u = 1.0 - rng.gen::<f64>(); // in (0, 1]
        let gap = (u.ln() / log_keep).floor();
        if gap >= (n - i) as f64 {
            break;
        }
        i += gap as usize;
        out.push(i);
        i += 1;
    }
}

/// A keyed pseudorandom permutation of `0..n`: a balanced Feistel network on `2h` bits
/// (`2^{2h} ≥ n`, `2^{2h} < 4n` for `n > 1`) with [`FEISTEL_ROUNDS`] rounds whose round function is
/// SipHash-2-4 (a keyed pseudorandom function), restricted to `0..n` by cycle walking (apply the
/// network again until the value falls in `0..n`; the expected number of passes is below 4).
///
/// One evaluation costs O(1) and the permutation is never materialised, so a batch of `m`
/// positions costs O(m) with no state between rounds. It is pseudorandom, not a uniform draw
/// from all `n!` orders (no O(1)-state construction is); under a secret key its order cannot be
/// predicted, and under a seeded key it is public, like every seeded batch.
#[derive(Clone, Copy, Debug)]
pub struct EpochPermutation {
    n: usize,
    half: u32,
    k0: u64,
    k1: u64,
}

/// Positions [`EpochPermutation::apply_range_with`] walks through the network at once.
const WALK_LANES: usize = 8;

/// Rounds of the Feistel network of [`EpochPermutation`].
pub const FEISTEL_ROUNDS: u64 = 6;

/// Largest round-function table (entries) a draw builds: 6 · 2^17 (3 MB).
pub const FEISTEL_TABLE_MAX: usize = 6 << 17;

/// Entries [`FeistelTables`] keeps per thread before it starts afresh (64 MB).
const FEISTEL_CACHE_MAX: usize = 16 << 20;

/// Round-function tables by permutation key. An epoch's table serves all of that epoch's
/// batches; tables of past epochs are dropped together when the entries pass
/// [`FEISTEL_CACHE_MAX`] (1,000 silos of 2,000 records take 1.5 MB an epoch).
#[derive(Default)]
pub struct FeistelTables {
    tables: std::collections::HashMap<(u64, u64, u32), Vec<u32>>,
    entries: usize,
}

impl FeistelTables {
    /// The table of `perm`, built on first use.
    pub fn get(&mut self, perm: &EpochPermutation) -> &[u32] {
        let key = (perm.k0, perm.k1, perm.half);
        if !self.tables.contains_key(&key) {
            let size = (FEISTEL_ROUNDS as usize) << perm.half;
            if self.entries + size > FEISTEL_CACHE_MAX {
                self.tables.clear();
                self.entries = 0;
            }
            let mut table = Vec::with_capacity(size);
            perm.tabulate(&mut table);
            self.entries += size;
            self.tables.insert(key, table);
        }
        &self.tables[&key]
    }
}

impl EpochPermutation {
    /// The permutation of `0..n` keyed by two words of `rng`.
    pub fn new<R: Rng + ?Sized>(rng: &mut R, n: usize) -> Self {
        let bits = usize::BITS - n.saturating_sub(1).leading_zeros();
        let half = bits.max(2).div_ceil(2);
        EpochPermutation { n, half, k0: rng.gen(), k1: rng.gen() }
    }

    /// One pass of the Feistel network on `2·half` bits (a bijection of `0..2^{2·half}`).
    #[inline]
    fn feistel(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half) - 1;
        let (mut left, mut right) = (x >> self.half, x & mask);
        for r in 0..FEISTEL_ROUNDS {
            let f = siphash24(self.k0, self.k1, (r << 32) | right) & mask;
            (left, right) = (right, left ^ f);
        }
        (left << self.half) | right
    }

    /// Whether draws read the round function from a table ([`EpochPermutation::tabulate`],
    /// `FEISTEL_ROUNDS · 2^half` SipHash calls, about `√(2n)·FEISTEL_ROUNDS`, against about
    /// `2·FEISTEL_ROUNDS` per position evaluated directly): when the table is at most
    /// [`FEISTEL_TABLE_MAX`] entries, that is for silos below about 2^33 records.
    pub fn tabulates(&self) -> bool {
        FEISTEL_ROUNDS << self.half <= FEISTEL_TABLE_MAX as u64
    }

    /// The round function for every round `r` and right half `x`: `table[r · 2^half + x]`.
    pub fn tabulate(&self, table: &mut Vec<u32>) {
        let size = 1u64 << self.half;
        let mask = size - 1;
        table.clear();
        for r in 0..FEISTEL_ROUNDS {
            // half ≤ 32, so every value fits in 32 bits.
            table.extend((0..size).map(|x| (siphash24(self.k0, self.k1, (r << 32) | x) & mask) as u32));
        }
    }

    /// [`EpochPermutation::apply`] with the round function read from `table`
    /// ([`EpochPermutation::tabulate`]); the same value.
    #[inline]
    pub fn apply_with(&self, table: &[u32], p: usize) -> usize {
        let mask = (1u64 << self.half) - 1;
        let mut x = p as u64;
        loop {
            let (mut left, mut right) = (x >> self.half, x & mask);
            for r in 0..FEISTEL_ROUNDS {
                let f = table[((r << self.half) | right) as usize] as u64;
                (left, right) = (right, left ^ f);
            }
            x = (left << self.half) | right;
            if (x as usize) < self.n {
                return x as usize;
            }
        }
    }

    /// The images of the positions `range` (each below `n`) under the permutation, passed to
    /// `emit` in no particular order, with the round function read from `table`
    /// ([`EpochPermutation::tabulate`]): the values of [`EpochPermutation::apply_with`].
    ///
    /// One position's walk is a chain of dependent table loads (`FEISTEL_ROUNDS` per pass of the
    /// network, and the passes of its cycle walking one after the other); [`WALK_LANES`]
    /// positions walk at once here, so that their loads overlap. A lane whose value falls in
    /// `0..n` emits it and takes the next position.
    pub fn apply_range_with(&self, table: &[u32], range: std::ops::Range<usize>, mut emit: impl FnMut(usize)) {
        let mask = (1u64 << self.half) - 1;
        let mut next = range.start;
        let mut x = [0u64; WALK_LANES];
        let mut live = [false; WALK_LANES];
        for (xl, ll) in x.iter_mut().zip(live.iter_mut()) {
            if next < range.end {
                (*xl, *ll) = (next as u64, true);
                next += 1;
            }
        }
        while live.iter().any(|&l| l) {
            // One pass of the network on every lane (a finished lane's value is below 2^{2·half},
            // so it indexes the table safely; it is not emitted).
            let mut left = x.map(|v| v >> self.half);
            let mut right = x.map(|v| v & mask);
            for r in 0..FEISTEL_ROUNDS {
                for (lv, rv) in left.iter_mut().zip(right.iter_mut()) {
                    let f = table[((r << self.half) | *rv) as usize] as u64;
                    (*lv, *rv) = (*rv, *lv ^ f);
                }
            }
            for ((xl, ll), (lv, rv)) in x.iter_mut().zip(live.iter_mut()).zip(left.iter().zip(right.iter())) {
                *xl = (lv << self.half) | rv;
                if *ll && (*xl as usize) < self.n {
                    emit(*xl as usize);
                    if next < range.end {
                        *xl = next as u64;
                        next += 1;
                    } else {
                        *ll = false;
                    }
                }
            }
        }
    }

    /// The image of position `p < n`.
    #[inline]
    pub fn apply(&self, p: usize) -> usize {
        debug_assert!(p < self.n);
        let mut x = p as u64;
        loop {
            x = self.feistel(x);
            if (x as usize) < self.n {
                return x as usize;
            }
        }
    }
}

/// SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast short-input PRF", 2012) of one 64-bit
/// word under the key `(k0, k1)`.
#[inline]
pub fn siphash24(k0: u64, k1: u64, m: u64) -> u64 {
    let mut v = [k0 ^ 0x736f_6d65_7073_6575, k1 ^ 0x646f_7261_6e64_6f6d, k0 ^ 0x6c79_6765_6e65_7261, k1 ^ 0x7465_6462_7974_6573];
    #[inline(always)]
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    // Message: one 8-byte block, then the final block holding the length (8) in its top byte.
    for block in [m, 8u64 << 56] {
        v[3] ^= block;
        round(&mut v);
        round(&mut v);
        v[0] ^= block;
    }
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::noise::{stream, Purpose};

    #[test]
    fn without_replacement_draws_distinct_indices_of_exact_size() {
        let mut rng = stream(1, 0, 0, Purpose::Batch);
        let b = Sampling::WithoutReplacement { m: 50 }.draw(&mut rng, 60);
        assert_eq!(b.len(), 50);
        assert!(b.windows(2).all(|w| w[0] < w[1]) && *b.last().unwrap() < 60);
    }

    #[test]
    fn without_replacement_is_uniform() {
        let mut counts = [0usize; 10];
        let mut rng = stream(2, 0, 0, Purpose::Batch);
        for _ in 0..20_000 {
            for i in (Sampling::WithoutReplacement { m: 3 }).draw(&mut rng, 10) {
                counts[i] += 1;
            }
        }
        // Each index is drawn with probability 3/10: 6000 expected, sd ≈ 65.
        assert!(counts.iter().all(|&c| (c as f64 - 6000.0).abs() < 400.0), "{counts:?}");
    }

    /// χ² statistic of observed counts against equal expected counts.
    fn chi2_uniform(counts: &[f64]) -> f64 {
        let e = counts.iter().sum::<f64>() / counts.len() as f64;
        counts.iter().map(|o| (o - e).powi(2) / e).sum()
    }

    #[test]
    fn without_replacement_subsets_are_uniform() {
        // n = 6, m = 3: 20 subsets, each with probability 1/20. χ² with 19 degrees of freedom;
        // P(χ² > 43.8) = 0.001.
        let mut counts = std::collections::HashMap::new();
        let mut rng = stream(12, 0, 0, Purpose::Batch);
        let mut out = Vec::new();
        for _ in 0..40_000 {
            Sampling::WithoutReplacement { m: 3 }.draw_into(&mut rng, 6, 0, &mut out);
            *counts.entry(out.clone()).or_insert(0.0) += 1.0;
        }
        assert_eq!(counts.len(), 20);
        let c: Vec<f64> = counts.values().copied().collect();
        assert!(chi2_uniform(&c) < 43.8, "{counts:?}");
        // m = n: every record; large n, small m: distinct, in range, and the scratch bits are
        // clear again (a second draw on the same thread is still of full size).
        Sampling::WithoutReplacement { m: 6 }.draw_into(&mut rng, 6, 0, &mut out);
        assert_eq!(out, vec![0, 1, 2, 3, 4, 5]);
        for _ in 0..3 {
            Sampling::WithoutReplacement { m: 64 }.draw_into(&mut rng, 1_000_000, 0, &mut out);
            assert_eq!(out.len(), 64);
            assert!(out.windows(2).all(|w| w[0] < w[1]) && out[63] < 1_000_000);
        }
    }

    #[test]
    fn poisson_membership_is_independent_with_rate_q() {
        // Each of 8 records with probability 0.3, independently: the 256 subsets have
        // probabilities 0.3^|S| 0.7^(8-|S|). χ² with 255 degrees of freedom; P(χ² > 330.5) ≈ 0.001.
        let (n, q, draws) = (8usize, 0.3, 200_000);
        let mut counts = vec![0f64; 1 << n];
        let mut rng = stream(13, 0, 0, Purpose::Batch);
        let mut out = Vec::new();
        for _ in 0..draws {
            Sampling::Poisson { q }.draw_into(&mut rng, n, 0, &mut out);
            assert!(out.windows(2).all(|w| w[0] < w[1]));
            counts[out.iter().map(|&i| 1usize << i).sum::<usize>()] += 1.0;
        }
        let chi2: f64 = counts
            .iter()
            .enumerate()
            .map(|(mask, o)| {
                let k = (mask as u32).count_ones() as i32;
                let e = draws as f64 * q.powi(k) * (1.0 - q).powi(n as i32 - k);
                (o - e).powi(2) / e
            })
            .sum();
        assert!(chi2 < 330.5, "chi2 = {chi2}");
        Sampling::Poisson { q: 1.0 }.draw_into(&mut rng, 5, 0, &mut out);
        assert_eq!(out, vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn poisson_has_rate_q() {
        let mut rng = stream(3, 0, 0, Purpose::Batch);
        let total: usize = (0..200).map(|_| Sampling::Poisson { q: 0.1 }.draw(&mut rng, 1000).len()).sum();
        assert!((total as f64 / 200.0 - 100.0).abs() < 3.0);
    }

    /// The batch of round `t` as the round code draws it: epoch stream, then the slice.
    fn shuffle_batch(m: usize, key: u64, silo: u64, t: u64, n: usize) -> Vec<usize> {
        let s = Sampling::Shuffle { m };
        let mut out = Vec::new();
        s.draw_into(&mut stream(key, silo, s.stream_index(t, n), Purpose::Batch), n, t, &mut out);
        out
    }

    #[test]
    fn shuffle_draws_equal_the_plain_walk_of_each_position_sorted() {
        // The reference: the epoch's permutation keyed by the same stream, each position of the
        // round's slice walked alone with SipHash evaluated directly, then a comparison sort.
        for (n, m) in [(1usize, 1usize), (5, 2), (100, 7), (2000, 64), (11_305, 256), (70_000, 64), (300_000, 1000)] {
            let s = Sampling::Shuffle { m };
            for t in [0u64, 1, s.rounds_per_epoch(n) - 1, s.rounds_per_epoch(n) + 2] {
                let mut rng = stream(9, 4, s.stream_index(t, n), Purpose::Batch);
                let perm = EpochPermutation::new(&mut rng, n);
                let pos = (t % s.rounds_per_epoch(n)) as usize * m;
                let mut want: Vec<usize> = (pos..(pos + m).min(n)).map(|p| perm.apply(p)).collect();
                want.sort_unstable();
                assert_eq!(shuffle_batch(m, 9, 4, t, n), want, "n = {n}, m = {m}, t = {t}");
            }
        }
    }

    #[test]
    fn siphash24_matches_the_reference_vector_and_std() {
        // Aumasson–Bernstein test vector: key 00..0f, message 00..07.
        let k0 = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let k1 = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        let m = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(siphash24(k0, k1, m), 0x93f5_f579_9a93_2462);
        #[allow(deprecated)]
        let std_hash = |x: u64| {
            use std::hash::Hasher;
            let mut h = std::hash::SipHasher::new_with_keys(k0, k1);
            h.write(&x.to_le_bytes());
            h.finish()
        };
        for x in [0u64, 1, 12345, u64::MAX] {
            assert_eq!(siphash24(k0, k1, x), std_hash(x));
        }
    }

    #[test]
    fn tabulated_feistel_equals_the_direct_evaluation() {
        use rand::SeedableRng;
        for n in [1usize, 2, 3, 5, 17, 64, 100, 1000, 2000, 11_305, 70_000] {
            for seed in 0..4u64 {
                let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(seed * 1000 + n as u64);
                let perm = EpochPermutation::new(&mut rng, n);
                let mut table = Vec::new();
                perm.tabulate(&mut table);
                for p in (0..n).step_by((n / 300).max(1)) {
                    assert_eq!(perm.apply_with(&table, p), perm.apply(p), "n = {n}, seed = {seed}, p = {p}");
                }
            }
        }
    }

    #[test]
    fn walking_positions_in_lanes_gives_each_position_its_image() {
        use rand::SeedableRng;
        for n in [1usize, 2, 3, 5, 17, 64, 100, 1000, 2000, 11_305, 70_000] {
            let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(n as u64);
            let perm = EpochPermutation::new(&mut rng, n);
            let mut table = Vec::new();
            perm.tabulate(&mut table);
            // Ranges shorter than, equal to and longer than the lanes, at the start, middle and end.
            for range in [0..n.min(1), 0..n.min(3), 0..n.min(4), n / 3..n.min(n / 3 + 7), n.saturating_sub(9)..n, 0..n] {
                let mut got = Vec::new();
                perm.apply_range_with(&table, range.clone(), |i| got.push(i));
                let mut want: Vec<usize> = range.clone().map(|p| perm.apply(p)).collect();
                got.sort_unstable();
                want.sort_unstable();
                assert_eq!(got, want, "n = {n}, range = {range:?}");
            }
        }
    }

    #[test]
    fn sort_distinct_sorts_through_bits_or_by_comparison() {
        use rand::{seq::SliceRandom, SeedableRng};
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(3);
        // (n, len): bits when n/64 ≤ 4·len, a comparison sort otherwise; the bits are left clear.
        for (n, len) in [(1usize, 1usize), (64, 5), (2000, 64), (15_000, 256), (1_000_000, 64), (70, 70)] {
            for _ in 0..3 {
                let mut all: Vec<usize> = (0..n).collect();
                all.shuffle(&mut rng);
                let mut v = all[..len].to_vec();
                let mut want = v.clone();
                want.sort_unstable();
                sort_distinct(&mut v, n);
                assert_eq!(v, want, "n = {n}, len = {len}");
                CHOSEN.with(|c| assert!(c.borrow().iter().all(|&w| w == 0)));
            }
        }
    }

    #[test]
    fn draining_bits_lists_every_set_bit_in_order_whatever_a_word_holds() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(5);
        // Words with 0 to 64 bits set (more than DRAIN_SLOTS takes the loop), empty and full
        // words at both ends, and a previous content of `out` that must not survive.
        for density in [0.0, 0.01, 0.03, 0.1, 0.5, 0.9, 1.0] {
            for words in [1usize, 2, 7, 177] {
                let mut bits: Vec<u64> = (0..words)
                    .map(|_| (0..64).fold(0u64, |w, b| if rng.gen_bool(density) { w | 1 << b } else { w }))
                    .collect();
                if words > 2 {
                    (bits[0], bits[words - 1]) = (u64::MAX, 0);
                }
                let want: Vec<usize> = (0..words * 64).filter(|&i| bits[i / 64] >> (i % 64) & 1 == 1).collect();
                let mut out = vec![7; 300];
                drain_bits(&mut bits, &mut out);
                assert_eq!(out, want, "density {density}, {words} words");
                assert!(bits.iter().all(|&w| w == 0));
            }
        }
    }

    #[test]
    fn cached_tables_belong_to_their_permutation() {
        use rand::SeedableRng;
        let mut tables = FeistelTables::default();
        let perms: Vec<EpochPermutation> = (0..6u64)
            .map(|seed| EpochPermutation::new(&mut rand_chacha::ChaCha20Rng::seed_from_u64(seed), [100, 2000, 70_000][seed as usize % 3]))
            .collect();
        // Interleaved, as silos draw in turn: each lookup gives that permutation's values.
        for _ in 0..2 {
            for perm in &perms {
                let table = tables.get(perm).to_vec();
                for p in (0..perm.n).step_by(7) {
                    assert_eq!(perm.apply_with(&table, p), perm.apply(p));
                }
            }
        }
        assert_eq!(tables.tables.len(), perms.len());
        assert!(perms.iter().all(|p| p.tabulates()));
    }

    #[test]
    fn shuffle_epoch_is_a_permutation() {
        for (n, m) in [(1usize, 1usize), (2, 1), (3, 2), (10, 3), (64, 8), (100, 7), (1000, 256), (4097, 100)] {
            let b = n.div_ceil(m) as u64;
            assert_eq!(Sampling::Shuffle { m }.rounds_per_epoch(n), b);
            for epoch in 0..3u64 {
                let mut seen = vec![0u32; n];
                for t in epoch * b..(epoch + 1) * b {
                    let batch = shuffle_batch(m, 5, 2, t, n);
                    let pos = (t % b) as usize * m;
                    assert_eq!(batch.len(), (pos + m).min(n) - pos, "n={n} m={m} t={t}");
                    assert!(batch.windows(2).all(|w| w[0] < w[1]));
                    batch.iter().for_each(|&i| seen[i] += 1);
                }
                assert!(seen.iter().all(|&c| c == 1), "n={n} m={m} epoch {epoch}: {seen:?}");
            }
        }
    }

    #[test]
    fn shuffle_short_last_batch_keeps_the_divisor_m() {
        let s = Sampling::Shuffle { m: 4 };
        assert_eq!(s.rounds_per_epoch(10), 3);
        assert_eq!(shuffle_batch(4, 1, 0, 2, 10).len(), 2);
        assert_eq!(shuffle_batch(4, 1, 0, 5, 10).len(), 2);
        assert_eq!(s.denominator(10), 4.0);
        assert_eq!(s.rate(10), 0.4);
        // n < m: one round per epoch, every record, still divided by m.
        assert_eq!(s.rounds_per_epoch(3), 1);
        assert_eq!(shuffle_batch(4, 1, 0, 7, 3), vec![0, 1, 2]);
        assert_eq!(s.denominator(3), 4.0);
    }

    #[test]
    fn shuffle_batches_differ_across_epochs_silos_and_keys() {
        let (n, m) = (1000, 100);
        let base = shuffle_batch(m, 1, 0, 0, n);
        assert_eq!(base, shuffle_batch(m, 1, 0, 0, n));
        assert_ne!(base, shuffle_batch(m, 1, 0, 10, n)); // next epoch, same slot
        assert_ne!(base, shuffle_batch(m, 1, 1, 0, n)); // another silo
        assert_ne!(base, shuffle_batch(m, 2, 0, 0, n)); // another key
        assert_ne!(base, shuffle_batch(m, 1, 0, 1, n)); // next round, same epoch
        // Secret keys: the epoch's permutation follows the key too.
        let s = Sampling::Shuffle { m };
        let secret = crate::noise::NoiseKey::from_entropy().unwrap();
        let mut a = Vec::new();
        s.draw_into(&mut secret.stream(0, 0, Purpose::Batch), n, 0, &mut a);
        assert_ne!(a, base);
        assert_eq!(a.len(), m);
    }

    #[test]
    fn shuffle_position_distribution_is_uniform() {
        // Over many epochs, the record at position 0 is uniform on 0..n: chi-square with n-1 = 19
        // degrees of freedom; P(χ² > 43.8) = 0.001.
        let (n, epochs) = (20usize, 20_000u64);
        let s = Sampling::Shuffle { m: 5 };
        let mut counts = vec![0f64; n];
        let mut pair = vec![0f64; n];
        for e in 0..epochs {
            let perm = EpochPermutation::new(&mut stream(9, 0, e, Purpose::Batch), n);
            counts[perm.apply(0)] += 1.0;
            pair[perm.apply(7)] += 1.0;
            assert_eq!(s.stream_index(e * 4 + 3, n), e);
        }
        let expected = epochs as f64 / n as f64;
        for c in [&counts, &pair] {
            let chi2: f64 = c.iter().map(|o| (o - expected).powi(2) / expected).sum();
            assert!(chi2 < 43.8, "chi2 = {chi2}, counts {c:?}");
        }
        // Membership of the first batch: each record with probability m/n = 1/4.
        let mut inb = vec![0f64; n];
        for e in 0..epochs {
            for i in shuffle_batch(5, 3, 0, e * 4, n) {
                inb[i] += 1.0;
            }
        }
        let (p, tot) = (0.25, epochs as f64);
        let chi2: f64 = inb.iter().map(|o| (o - p * tot).powi(2) / (p * tot * (1.0 - p))).sum();
        assert!(chi2 < 43.8, "chi2 = {chi2}, counts {inb:?}");
    }

    #[test]
    fn constructors_accept_good_values() {
        assert_eq!(Sampling::without_replacement(1), Ok(Sampling::WithoutReplacement { m: 1 }));
        assert_eq!(Sampling::poisson(1.0), Ok(Sampling::Poisson { q: 1.0 }));
        assert_eq!(Sampling::poisson(1e-6), Ok(Sampling::Poisson { q: 1e-6 }));
        assert_eq!(Sampling::parse("without_replacement", 256, 1.0), Ok(Sampling::WithoutReplacement { m: 256 }));
        // The argument a scheme does not use is not checked.
        assert_eq!(Sampling::parse("without_replacement", 8, f64::NAN), Ok(Sampling::WithoutReplacement { m: 8 }));
        assert_eq!(Sampling::parse("poisson", 0, 0.25), Ok(Sampling::Poisson { q: 0.25 }));
        assert_eq!(Sampling::parse("full_batch", 0, -1.0), Ok(Sampling::FullBatch));
        assert_eq!(Sampling::parse("shuffle", 64, f64::NAN), Ok(Sampling::Shuffle { m: 64 }));
        assert_eq!(Sampling::Shuffle { m: 3 }.validate(), Ok(()));
        assert_eq!(Sampling::FullBatch.validate(), Ok(()));
        assert_eq!(Sampling::Poisson { q: 0.5 }.validate(), Ok(()));
    }

    #[test]
    fn constructors_reject_bad_values_with_the_binding_messages() {
        let msg = |r: Result<Sampling, ConfigError>| r.unwrap_err().to_string();
        assert_eq!(msg(Sampling::without_replacement(0)), "batch_size must be >= 1");
        assert_eq!(msg(Sampling::parse("without_replacement", 0, 1.0)), "batch_size must be >= 1");
        assert_eq!(msg(Sampling::parse("shuffle", 0, 1.0)), "batch_size must be >= 1");
        assert_eq!(Sampling::Shuffle { m: 0 }.validate(), Err(ConfigError::BatchSize));
        for (q, shown) in [(0.0, "0"), (1.5, "1.5"), (-0.1, "-0.1"), (f64::NAN, "NaN"), (f64::INFINITY, "inf")] {
            assert_eq!(msg(Sampling::poisson(q)), format!("sample_rate must be in (0, 1], got {shown}"));
            assert_eq!(msg(Sampling::parse("poisson", 10, q)), format!("sample_rate must be in (0, 1], got {shown}"));
        }
        assert_eq!(
            msg(Sampling::parse("bernoulli", 10, 0.5)),
            "sampling=\"bernoulli\" is unknown; use 'without_replacement', 'poisson', 'shuffle' or 'full_batch'"
        );
        assert_eq!(Sampling::WithoutReplacement { m: 0 }.validate(), Err(ConfigError::BatchSize));
        assert_eq!(Sampling::Poisson { q: 2.0 }.validate(), Err(ConfigError::SampleRate(2.0)));
    }

    #[test]
    fn full_batch_and_denominators() {
        let mut rng = stream(4, 0, 0, Purpose::Batch);
        assert_eq!(Sampling::FullBatch.draw(&mut rng, 4), vec![0, 1, 2, 3]);
        assert_eq!(Sampling::FullBatch.denominator(4), 4.0);
        assert_eq!(Sampling::Poisson { q: 0.5 }.denominator(10), 5.0);
        assert_eq!(Sampling::WithoutReplacement { m: 8 }.rate(32), 0.25);
        assert_eq!(Sampling::FullBatch.rate(7), 1.0);
    }
}
