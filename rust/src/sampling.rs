//! Mini-batch sampling schemes. The accountant must match the scheme exactly (SPEC §4):
//! fixed-size sampling without replacement (the default), Poisson sampling, or the full batch.

use rand::Rng;

/// How a silo draws its batch each round.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sampling {
    /// A uniformly random subset of exactly `m` records.
    WithoutReplacement { m: usize },
    /// Each record independently with probability `q`; sums are divided by the expected size.
    Poisson { q: f64 },
    /// Every record, every round.
    FullBatch,
}

impl Sampling {
    /// The fixed denominator of the batch means: `m`, `q·n`, or `n`.
    pub fn denominator(&self, n: usize) -> f64 {
        match *self {
            Sampling::WithoutReplacement { m } => m as f64,
            Sampling::Poisson { q } => q * n as f64,
            Sampling::FullBatch => n as f64,
        }
    }

    /// The sampling rate `q` seen by the accountant.
    pub fn rate(&self, n: usize) -> f64 {
        match *self {
            Sampling::WithoutReplacement { m } => m as f64 / n as f64,
            Sampling::Poisson { q } => q,
            Sampling::FullBatch => 1.0,
        }
    }

    /// Draws the indices of one batch from `0..n`.
    pub fn draw<R: Rng + ?Sized>(&self, rng: &mut R, n: usize) -> Vec<usize> {
        match *self {
            Sampling::WithoutReplacement { m } => {
                let mut idx = rand::seq::index::sample(rng, n, m.min(n)).into_vec();
                idx.sort_unstable();
                idx
            }
            Sampling::Poisson { q } => (0..n).filter(|_| rng.gen::<f64>() < q).collect(),
            Sampling::FullBatch => (0..n).collect(),
        }
    }
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

    #[test]
    fn poisson_has_rate_q() {
        let mut rng = stream(3, 0, 0, Purpose::Batch);
        let total: usize = (0..200).map(|_| Sampling::Poisson { q: 0.1 }.draw(&mut rng, 1000).len()).sum();
        assert!((total as f64 / 200.0 - 100.0).abs() < 3.0);
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
