//! Mini-batch sampling schemes. The accountant must match the scheme exactly (docs/accounting.md):
//! fixed-size sampling without replacement (the default), Poisson sampling, or the full batch.

use rand::Rng;

use crate::config::ConfigError;

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
    /// Fixed-size sampling of `m ≥ 1` records without replacement.
    pub fn without_replacement(m: usize) -> Result<Self, ConfigError> {
        if m == 0 {
            return Err(ConfigError::BatchSize);
        }
        Ok(Sampling::WithoutReplacement { m })
    }

    /// Poisson sampling with rate `q ∈ (0, 1]`.
    pub fn poisson(q: f64) -> Result<Self, ConfigError> {
        if !(q > 0.0 && q <= 1.0) {
            return Err(ConfigError::SampleRate(q));
        }
        Ok(Sampling::Poisson { q })
    }

    /// The scheme of public name `"without_replacement"` (batch of `batch_size`), `"poisson"`
    /// (rate `sample_rate`) or `"full_batch"`; the argument the scheme does not use is ignored.
    pub fn parse(name: &str, batch_size: usize, sample_rate: f64) -> Result<Self, ConfigError> {
        match name {
            "without_replacement" => Sampling::without_replacement(batch_size),
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
            Sampling::FullBatch => Ok(()),
        }
    }

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
    fn constructors_accept_good_values() {
        assert_eq!(Sampling::without_replacement(1), Ok(Sampling::WithoutReplacement { m: 1 }));
        assert_eq!(Sampling::poisson(1.0), Ok(Sampling::Poisson { q: 1.0 }));
        assert_eq!(Sampling::poisson(1e-6), Ok(Sampling::Poisson { q: 1e-6 }));
        assert_eq!(Sampling::parse("without_replacement", 256, 1.0), Ok(Sampling::WithoutReplacement { m: 256 }));
        // The argument a scheme does not use is not checked.
        assert_eq!(Sampling::parse("without_replacement", 8, f64::NAN), Ok(Sampling::WithoutReplacement { m: 8 }));
        assert_eq!(Sampling::parse("poisson", 0, 0.25), Ok(Sampling::Poisson { q: 0.25 }));
        assert_eq!(Sampling::parse("full_batch", 0, -1.0), Ok(Sampling::FullBatch));
        assert_eq!(Sampling::FullBatch.validate(), Ok(()));
        assert_eq!(Sampling::Poisson { q: 0.5 }.validate(), Ok(()));
    }

    #[test]
    fn constructors_reject_bad_values_with_the_binding_messages() {
        let msg = |r: Result<Sampling, ConfigError>| r.unwrap_err().to_string();
        assert_eq!(msg(Sampling::without_replacement(0)), "batch_size must be >= 1");
        assert_eq!(msg(Sampling::parse("without_replacement", 0, 1.0)), "batch_size must be >= 1");
        for (q, shown) in [(0.0, "0"), (1.5, "1.5"), (-0.1, "-0.1"), (f64::NAN, "NaN"), (f64::INFINITY, "inf")] {
            assert_eq!(msg(Sampling::poisson(q)), format!("sample_rate must be in (0, 1], got {shown}"));
            assert_eq!(msg(Sampling::parse("poisson", 10, q)), format!("sample_rate must be in (0, 1], got {shown}"));
        }
        assert_eq!(
            msg(Sampling::parse("bernoulli", 10, 0.5)),
            "sampling=\"bernoulli\" is unknown; use 'without_replacement', 'poisson' or 'full_batch'"
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
