//! The draws of one Adult-like epoch alone: every silo's batch and noise of every round
//! (`draw_round_into`), 3 silos × 11,304 records, batch 256, 45 rounds, as the helper thread of
//! the shared schedule draws them ahead of the kernel. `cargo bench --bench draws` (env
//! `DRAWS_SAMPLING=shuffle|without_replacement|poisson`, default shuffle, the estimators'
//! default; `DRAWS_N` records per silo, default 11,304; `DRAWS_REPS`, default 400). Each rep is
//! a new epoch (new permutations and tables).

use std::time::Instant;

use pfair_core::noise::NoiseKey;
use pfair_core::psi::Protect;
use pfair_core::round::{draw_round_into, SiloConfig, SiloKeys};
use pfair_core::sampling::Sampling;

fn main() {
    let n: usize = std::env::var("DRAWS_N").ok().and_then(|v| v.parse().ok()).unwrap_or(11_304);
    let (m, silos) = (256usize, 3u64);
    let rounds = n.div_ceil(m) as u64;
    let reps: u64 = std::env::var("DRAWS_REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
    let sampling = match std::env::var("DRAWS_SAMPLING").as_deref() {
        Ok("without_replacement") => Sampling::WithoutReplacement { m },
        Ok("poisson") => Sampling::Poisson { q: m as f64 / n as f64 },
        Ok("shuffle") | Err(_) => Sampling::Shuffle { m },
        Ok(other) => panic!("DRAWS_SAMPLING={other}: use shuffle, without_replacement or poisson"),
    };
    let cfg = SiloConfig {
        sampling,
        protect: Protect::Attribute { clip_theta: 1.0 },
        sigma_loss: 0.0,
        sigma_theta: 0.05,
        sigma_w: 0.1,
        send_psi: true,
    };
    let keys = SiloKeys { batch: NoiseKey::from_entropy().unwrap(), noise: NoiseKey::from_entropy().unwrap() };
    let (mut batch, mut noise) = (Vec::new(), Vec::new());
    let mut times = Vec::new();
    let mut sink = 0usize;
    for rep in 0..reps {
        let t = Instant::now();
        for r in 0..rounds {
            for j in 0..silos {
                draw_round_into(&cfg, &keys, j, rep * rounds + r, n, (103, 4), &mut batch, &mut noise);
                sink = sink.wrapping_add(batch[batch.len() / 2]);
            }
        }
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("draws of an epoch of {silos} silos x {n} records ({sampling:?}, {} units): min {:.1} µs, median {:.1} µs (sink {sink})",
             silos * rounds, times[0], times[times.len() / 2]);
}
