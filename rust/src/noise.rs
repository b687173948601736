//! Random streams and Gaussian noise, keyed by a secret or (on request) by a public seed.
//!
//! Every random draw of a silo in a round comes from its own ChaCha20 stream, selected by
//! `(silo, round, purpose)` under a [`NoiseKey`]:
//!
//! * [`NoiseKey::Secret`] (the default for everything private): 256 bits from the operating
//!   system's entropy, fresh per silo and per fit. The stream key of `(silo, round, purpose)` is
//!   the first 32 bytes of ChaCha20 block `4·silo + purpose` of nonce `round` under the secret,
//!   i.e. ChaCha20 used as a pseudo-random function. Without the secret, the noise is
//!   unpredictable, so neither a replay of the fit nor two fits with different ε can cancel it.
//! * [`NoiseKey::Seeded`]: the seed is expanded to a 256-bit key (four SplitMix64 outputs, the
//!   first a bijection of the seed, so different seeds give different keys), and that key takes
//!   the place of the secret in the same pseudo-random function. Anyone who knows the seed knows
//!   the noise, so this is only for public randomness (the attribute-mode batch order, which the
//!   exact s-free parts reveal anyway) and for reproducible simulations the user asked for
//!   explicitly (`noise_seed=`). The seed and the silo enter the derivation in different places:
//!   silo `b` of seed `a` and silo `a` of seed `b` draw independent streams (an earlier
//!   derivation mixed the two symmetrically and gave them the same one).
//!
//! Either way the same key gives the same bits whatever the thread schedule, and different
//! silos, rounds and purposes get independent streams. Batch sampling and noise use different
//! purposes, so changing the batch size never changes which noise a round adds.
//!
//! **Release streams** ([`NoiseKey::release_stream_key`]): a release that is not a round's
//! message (a DP histogram, a checkpoint table, an evaluation) is named by an identifier of any
//! length (its kind, run, epoch or index and silo, encoded injectively by the caller: `pfair`'s
//! `protocol/keys.py`). Its stream key is the ChaCha20 cascade (Bellare, Canetti, Krawczyk 1996)
//! over that identifier, started from block 0 of nonce 0 under the silo's key — a block no round
//! stream uses (theirs are `4·silo + purpose` with purpose 1, 2 or 3, never a multiple of 4). Two
//! distinct identifiers get independent streams however large their numbers are: no arithmetic
//! maps two of them onto one input of the PRF.

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

/// The key a silo's streams are derived from. `Debug` never prints a secret.
#[derive(Clone, PartialEq, Eq)]
pub enum NoiseKey {
    /// A public seed: reproducible by anyone who knows it.
    Seeded(u64),
    /// 256 secret bits (from [`NoiseKey::from_entropy`]).
    Secret([u8; 32]),
}

impl std::fmt::Debug for NoiseKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoiseKey::Seeded(seed) => write!(f, "NoiseKey::Seeded({seed})"),
            NoiseKey::Secret(_) => write!(f, "NoiseKey::Secret(..)"),
        }
    }
}

/// The operating system's entropy source failed; nothing secret can be drawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntropyError(pub String);

impl std::fmt::Display for EntropyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the operating system's entropy source failed: {}", self.0)
    }
}

impl std::error::Error for EntropyError {}

impl NoiseKey {
    /// A fresh secret key: 256 bits from the operating system (`getrandom`).
    pub fn from_entropy() -> Result<Self, EntropyError> {
        use rand::RngCore;
        let mut key = [0u8; 32];
        rand::rngs::OsRng.try_fill_bytes(&mut key).map_err(|e| EntropyError(e.to_string()))?;
        Ok(NoiseKey::Secret(key))
    }

    /// Whether the key is secret (not derivable from anything public).
    pub fn is_secret(&self) -> bool {
        matches!(self, NoiseKey::Secret(_))
    }

    /// The 256-bit ChaCha key of the stream `(silo, round, purpose)`.
    pub fn stream_key(&self, silo: u64, round: u64, purpose: Purpose) -> [u8; 32] {
        match self {
            NoiseKey::Seeded(seed) => stream_key(*seed, silo, round, purpose),
            NoiseKey::Secret(secret) => prf_key(secret, silo, round, purpose),
        }
    }

    /// The generator of the stream `(silo, round, purpose)`.
    pub fn stream(&self, silo: u64, round: u64, purpose: Purpose) -> ChaCha20Rng {
        ChaCha20Rng::from_seed(self.stream_key(silo, round, purpose))
    }

    /// The 256-bit ChaCha key of the release stream named `id` ([`release_key`] under this key,
    /// a seed's expanded by [`seed_key`]).
    pub fn release_stream_key(&self, id: &[u8]) -> [u8; 32] {
        match self {
            NoiseKey::Seeded(seed) => release_key(&seed_key(*seed), id),
            NoiseKey::Secret(secret) => release_key(secret, id),
        }
    }

    /// The generator of the release stream named `id`.
    pub fn release_stream(&self, id: &[u8]) -> ChaCha20Rng {
        ChaCha20Rng::from_seed(self.release_stream_key(id))
    }
}

/// SplitMix64 finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
#[inline]
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// PRF(`key`; nonce = round, block = 4·silo + purpose): the first 32 bytes of that ChaCha20
/// block. Distinct `(silo, round, purpose)` select distinct blocks, so the derived keys are
/// independent; silo ids are far below 2^62, so the block index never wraps.
fn prf_key(key: &[u8; 32], silo: u64, round: u64, purpose: Purpose) -> [u8; 32] {
    use rand::RngCore;
    let mut prf = ChaCha20Rng::from_seed(*key);
    prf.set_stream(round);
    prf.set_word_pos(((silo as u128) * 4 + purpose as u128) * 16);
    let mut out = [0u8; 32];
    prf.fill_bytes(&mut out);
    out
}

/// The first 32 bytes of ChaCha20 block `block` of nonce `nonce` under `key`: one evaluation of
/// ChaCha20 as a PRF on 128-bit inputs.
fn prf_block(key: &[u8; 32], nonce: u64, block: u64) -> [u8; 32] {
    use rand::RngCore;
    let mut prf = ChaCha20Rng::from_seed(*key);
    prf.set_stream(nonce);
    prf.set_word_pos((block as u128) * 16);
    let mut out = [0u8; 32];
    prf.fill_bytes(&mut out);
    out
}

/// The key of the release domain under `key`: PRF(`key`; nonce 0, block 0). Round streams use
/// blocks `4·silo + purpose` (mod 2⁶⁴) with purpose in {1, 2, 3}, never ≡ 0 mod 4, so this input
/// is never a round stream's and the release domain is independent of every round stream.
fn release_domain_key(key: &[u8; 32]) -> [u8; 32] {
    prf_block(key, 0, 0)
}

/// The 256-bit key of the release stream named `id` under `key`: the cascade
/// `k₀ = release_domain_key(key)`, `k_{i+1} = PRF(k_i; chunk_i)` over the 16-byte chunks of
/// `len(id) as u64 (little-endian) ‖ id ‖ zeros to a multiple of 16`, each chunk read as
/// (nonce, block) = two little-endian u64. The length comes first, so no encoded identifier is a
/// prefix of another's, and the cascade of a PRF over prefix-free inputs is a PRF (Bellare,
/// Canetti, Krawczyk, "Pseudorandom functions revisited: the cascade construction and its
/// concrete security", 1996): distinct identifiers give independent keys.
pub fn release_key(key: &[u8; 32], id: &[u8]) -> [u8; 32] {
    let mut msg = Vec::with_capacity(id.len() + 24);
    msg.extend_from_slice(&(id.len() as u64).to_le_bytes());
    msg.extend_from_slice(id);
    msg.resize(msg.len().div_ceil(16) * 16, 0);
    let mut k = release_domain_key(key);
    for chunk in msg.chunks_exact(16) {
        let nonce = u64::from_le_bytes(chunk[..8].try_into().expect("8 bytes"));
        let block = u64::from_le_bytes(chunk[8..].try_into().expect("8 bytes"));
        k = prf_block(&k, nonce, block);
    }
    k
}

/// The 256-bit key a public seed stands for: SplitMix64 outputs 0..4 of the generator started at
/// `seed`. The first word is a bijection of the seed, so distinct seeds give distinct keys.
pub fn seed_key(seed: u64) -> [u8; 32] {
    const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut key = [0u8; 32];
    for (i, chunk) in key.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&splitmix64(seed.wrapping_add((i as u64).wrapping_mul(GAMMA))).to_le_bytes());
    }
    key
}

/// The 256-bit ChaCha key of the stream `(seed, silo, round, purpose)`: the derivation of a
/// secret key ([`NoiseKey::stream_key`]) under [`seed_key`]`(seed)`.
pub fn stream_key(seed: u64, silo: u64, round: u64, purpose: Purpose) -> [u8; 32] {
    prf_key(&seed_key(seed), silo, round, purpose)
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
    fn seed_and_silo_are_not_interchangeable() {
        // An earlier derivation mixed seed and silo symmetrically: silo b of seed a drew the
        // stream of silo a of seed b, and every seed's silo with its own number drew the stream
        // of silo 0 of seed 0. Every (seed, silo) pair of a small grid must now draw its own.
        for purpose in [Purpose::Batch, Purpose::Noise, Purpose::Other] {
            for round in [0, 1, 44] {
                let mut keys = std::collections::HashSet::new();
                for seed in 0..16 {
                    for silo in 0..16 {
                        assert!(keys.insert(stream_key(seed, silo, round, purpose)), "({seed}, {silo}, {round}, {purpose:?})");
                    }
                }
            }
        }
    }

    #[test]
    fn seeded_derivation_is_the_secret_one_under_the_expanded_seed() {
        // Known answers: the seed's key is four SplitMix64 outputs of the generator started at
        // the seed (the published generator: state += 0x9E3779B97F4A7C15, then the mixer), and
        // its streams are those of a secret key equal to it.
        let mut state = 42u64;
        let mut want = [0u8; 32];
        for chunk in want.chunks_exact_mut(8) {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
        }
        assert_eq!(seed_key(42), want);
        let secret = NoiseKey::Secret(want);
        for (silo, round, purpose) in [(0, 0, Purpose::Batch), (3, 9, Purpose::Noise), (7, 2, Purpose::Other)] {
            assert_eq!(stream_key(42, silo, round, purpose), secret.stream_key(silo, round, purpose));
        }
        assert_ne!(seed_key(0), seed_key(1));
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
    fn seeded_key_reproduces_the_seed_streams() {
        let key = NoiseKey::Seeded(42);
        assert_eq!(key.stream_key(3, 9, Purpose::Noise), stream_key(42, 3, 9, Purpose::Noise));
        assert!(!key.is_secret());
    }

    #[test]
    fn secret_keys_are_fresh_and_separate_every_coordinate() {
        let a = NoiseKey::from_entropy().unwrap();
        let b = NoiseKey::from_entropy().unwrap();
        assert!(a.is_secret());
        assert_ne!(a, b);
        assert_ne!(a.stream_key(0, 0, Purpose::Noise), b.stream_key(0, 0, Purpose::Noise));
        let base = a.stream_key(1, 2, Purpose::Noise);
        assert_eq!(base, a.stream_key(1, 2, Purpose::Noise));
        for other in [
            a.stream_key(2, 2, Purpose::Noise),
            a.stream_key(1, 3, Purpose::Noise),
            a.stream_key(1, 2, Purpose::Batch),
            a.stream_key(2, 1, Purpose::Noise),
            a.stream_key(0, 2, Purpose::Other),
        ] {
            assert_ne!(base, other);
        }
        // The secret never shows in Debug output.
        assert_eq!(format!("{a:?}"), "NoiseKey::Secret(..)");
    }

    #[test]
    fn secret_key_derivation_is_chacha20_as_a_prf() {
        // Known-answer check against an independent evaluation of the same ChaCha20 block.
        use rand::RngCore;
        let secret = [7u8; 32];
        let key = NoiseKey::Secret(secret);
        let mut r = ChaCha20Rng::from_seed(secret);
        r.set_stream(5);
        let mut skip = vec![0u8; 64 * (4 * 3 + 2)];
        r.fill_bytes(&mut skip);
        let mut want = [0u8; 32];
        r.fill_bytes(&mut want);
        assert_eq!(key.stream_key(3, 5, Purpose::Noise), want);
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

    #[test]
    fn release_key_is_the_cascade_from_the_release_domain() {
        // Known answer: an independent evaluation of the cascade over a 10-byte identifier
        // (length 10, then the bytes, padded to 32 bytes: two steps).
        use rand::RngCore;
        let block = |key: [u8; 32], nonce: u64, blk: u64| {
            let mut r = ChaCha20Rng::from_seed(key);
            r.set_stream(nonce);
            let mut skip = vec![0u8; 64 * blk as usize];
            r.fill_bytes(&mut skip);
            let mut out = [0u8; 32];
            r.fill_bytes(&mut out);
            out
        };
        let secret = [9u8; 32];
        let id = *b"abcdefghij";
        let mut msg = [0u8; 32];
        msg[..8].copy_from_slice(&10u64.to_le_bytes());
        msg[8..18].copy_from_slice(&id);
        let word = |i: usize| u64::from_le_bytes(msg[8 * i..8 * i + 8].try_into().unwrap());
        // Block indices of this identifier are huge: compute them with set_word_pos instead.
        let at = |key: [u8; 32], nonce: u64, blk: u64| {
            let mut r = ChaCha20Rng::from_seed(key);
            r.set_stream(nonce);
            r.set_word_pos(blk as u128 * 16);
            let mut out = [0u8; 32];
            r.fill_bytes(&mut out);
            out
        };
        assert_eq!(at(secret, 3, 2), block(secret, 3, 2));
        let k0 = block(secret, 0, 0);
        let k1 = at(k0, word(0), word(1));
        let k2 = at(k1, word(2), word(3));
        assert_eq!(NoiseKey::Secret(secret).release_stream_key(&id), k2);
        assert_eq!(NoiseKey::Seeded(5).release_stream_key(&id), release_key(&seed_key(5), &id));
    }

    #[test]
    fn release_streams_are_distinct_and_never_a_round_stream() {
        // Identifiers that differ only in a large number, in length, or by trailing zeros (which
        // the padding must not erase) all get their own key; none is a round stream's key.
        let key = NoiseKey::Seeded(12345);
        let mut ids: Vec<Vec<u8>> = vec![vec![], vec![0], vec![0, 0], vec![0; 16], vec![0; 17]];
        for e in [0u64, 1, 1 << 40, (1 << 40) + 1, 3 << 40, u64::MAX] {
            ids.push(e.to_le_bytes().to_vec());
            let mut v = b"violation".to_vec();
            v.extend_from_slice(&e.to_le_bytes());
            ids.push(v);
        }
        let mut keys = std::collections::HashSet::new();
        for id in &ids {
            assert!(keys.insert(key.release_stream_key(id)), "{id:?}");
        }
        for silo in 0..8 {
            for round in [0, 1, 1 << 40, 3 << 40] {
                for purpose in [Purpose::Batch, Purpose::Noise, Purpose::Other] {
                    assert!(keys.insert(key.stream_key(silo, round, purpose)), "({silo}, {round}, {purpose:?})");
                }
            }
        }
        // Different keys, different release streams.
        assert_ne!(NoiseKey::Seeded(1).release_stream_key(b"x"), NoiseKey::Seeded(2).release_stream_key(b"x"));
    }
}
