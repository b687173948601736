//! Seeded random streams and Gaussian noise.
//!
//! Every random draw of a silo in a round comes from its own ChaCha20 stream whose 256-bit key is
//! derived from `(seed, silo, round, purpose)` by SplitMix64 mixing. Hence the same seed gives
//! the same bits whatever the thread schedule, and different silos, rounds and purposes get
//! independent streams (distinct ChaCha keys). Batch sampling and noise use different purposes,
//! so changing the batch size never changes which noise a round adds.

use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use rand_distr::{Distribution, StandardNormal};

/// What a stream is used for; part of the key derivation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Purpose {
    /// Drawing the mini-batch.
    Batch = 1,
    /// Gaussian noise on the silo's message.
    Noise = 2,
    /// Anything else a caller needs (e.g. a DP histogram of `s`).
    Other = 3,
}

/// SplitMix64 finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
#[inline]
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The 256-bit ChaCha key of the stream `(seed, silo, round, purpose)`.
pub fn stream_key(seed: u64, silo: u64, round: u64, purpose: Purpose) -> [u8; 32] {
    let mut h = splitmix64(seed);
    for v in [silo, round, purpose as u64] {
        h = splitmix64(h ^ splitmix64(v));
    }
    let mut key = [0u8; 32];
    for (i, chunk) in key.chunks_exact_mut(8).enumerate() {
        h = splitmix64(h.wrapping_add(i as u64));
        chunk.copy_from_slice(&h.to_le_bytes());
    }
    key
}

/// The generator of the stream `(seed, silo, round, purpose)`.
pub fn stream(seed: u64, silo: u64, round: u64, purpose: Purpose) -> ChaCha20Rng {
    ChaCha20Rng::from_seed(stream_key(seed, silo, round, purpose))
}

/// Adds independent `N(0, sigma²)` noise to every entry of `buf`. `sigma = 0` adds nothing and
/// draws nothing.
pub fn add_gaussian<R: rand::Rng + ?Sized>(rng: &mut R, buf: &mut [f64], sigma: f64) {
    if sigma == 0.0 {
        return;
    }
    for v in buf.iter_mut() {
        let z: f64 = StandardNormal.sample(rng);
        *v += sigma * z;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngCore;

    #[test]
    fn splitmix64_is_a_known_mixer() {
        // First output of SplitMix64 seeded with 0 (reference value of the published generator).
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn stream_key_separates_every_coordinate() {
        let base = stream_key(1, 2, 3, Purpose::Noise);
        assert_eq!(base, stream_key(1, 2, 3, Purpose::Noise));
        assert_ne!(base, stream_key(2, 2, 3, Purpose::Noise));
        assert_ne!(base, stream_key(1, 3, 3, Purpose::Noise));
        assert_ne!(base, stream_key(1, 2, 4, Purpose::Noise));
        assert_ne!(base, stream_key(1, 2, 3, Purpose::Batch));
        // Swapping silo and round must not collide either.
        assert_ne!(stream_key(1, 2, 3, Purpose::Noise), stream_key(1, 3, 2, Purpose::Noise));
    }

    #[test]
    fn stream_is_reproducible() {
        let a: Vec<u64> = (0..4).map({ let mut r = stream(9, 0, 0, Purpose::Noise); move |_| r.next_u64() }).collect();
        let b: Vec<u64> = (0..4).map({ let mut r = stream(9, 0, 0, Purpose::Noise); move |_| r.next_u64() }).collect();
        assert_eq!(a, b);
    }

    #[test]
    fn add_gaussian_has_the_requested_moments() {
        let mut rng = stream(123, 0, 0, Purpose::Noise);
        let n = 200_000;
        let mut buf = vec![1.0; n];
        add_gaussian(&mut rng, &mut buf, 2.0);
        let mean = buf.iter().sum::<f64>() / n as f64;
        let var = buf.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        assert!((mean - 1.0).abs() < 0.03, "mean {mean}");
        assert!((var - 4.0).abs() < 0.06, "var {var}");
    }

    #[test]
    fn add_gaussian_with_zero_sigma_is_identity() {
        let mut rng = stream(1, 1, 1, Purpose::Noise);
        let mut buf = vec![0.5; 3];
        add_gaussian(&mut rng, &mut buf, 0.0);
        assert_eq!(buf, vec![0.5; 3]);
    }

    #[test]
    fn streams_of_different_silos_are_uncorrelated() {
        let n = 100_000;
        let mut a = vec![0.0; n];
        let mut b = vec![0.0; n];
        add_gaussian(&mut stream(5, 0, 7, Purpose::Noise), &mut a, 1.0);
        add_gaussian(&mut stream(5, 1, 7, Purpose::Noise), &mut b, 1.0);
        let corr = a.iter().zip(&b).map(|(x, y)| x * y).sum::<f64>() / n as f64;
        assert!(corr.abs() < 0.015, "corr {corr}");
    }
}
