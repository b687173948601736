//! One SteFFLe epoch in Rust alone (no Python), timed many times in one run: min and median, and
//! the ratios between schedules (silos on the rayon pool or one after the other) and layouts.
//! `cargo bench --bench epoch` (env `EPOCH_REPS`, default 300; `EPOCH_SCHEDULES`, a comma list
//! of auto, sequential, rayon, shared, and draws (the epoch's batch and noise draws
//! alone); `EPOCH_SAMPLING=shuffle|poisson`, default without replacement; `EPOCH_ROWS` records
//! per silo, default 11,304, and `EPOCH_ROUNDS`, default an epoch's; `EPOCH_TRACE=1` prints
//! every time to stderr, to see slow stretches of the host).

use std::time::Instant;

use pfair_core::features::Features;
use pfair_core::noise::NoiseKey;
use pfair_core::psi::{Dims, Fairness, Protect};
use pfair_core::round::{draw_round_into, RoundDraws, Silo, SiloConfig, SiloKeys};
use pfair_core::schedule::{run_rounds_scheduled, RoundsRequest, Schedule};
use pfair_core::server::ServerConfig;
use pfair_core::sampling::Sampling;

mod adult_like;

/// An Adult-like silo ([`adult_like::adult_like`]), stored dense or CSR by its density.
fn silo(n: usize, d: usize, seed: u64) -> Silo {
    let (x, y, s) = adult_like::adult_like(n, d, seed);
    Silo { x: Features::auto(x, d), y, s }
}

/// Min, median and 90th percentile.
fn stats(mut t: Vec<f64>) -> (f64, f64, f64) {
    t.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (t[0], t[t.len() / 2], t[t.len() * 9 / 10])
}

fn main() {
    let reps: usize = std::env::var("EPOCH_REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let trace = std::env::var("EPOCH_TRACE").is_ok();
    let n: usize = std::env::var("EPOCH_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(11_304);
    let (d, m) = (102, 256);
    let dims = Dims { d, k: 2, l: 2 };
    let silos: Vec<Silo> = (0..3).map(|j| silo(n, d, 10 + j)).collect();
    // EPOCH_SAMPLING=shuffle draws the estimators' default batches (shuffled epochs); the
    // default here is without replacement (Floyd's algorithm).
    let sampling = match std::env::var("EPOCH_SAMPLING").as_deref() {
        Ok("shuffle") => Sampling::Shuffle { m },
        Ok("poisson") => Sampling::Poisson { q: m as f64 / n as f64 },
        Ok("without_replacement") | Err(_) => Sampling::WithoutReplacement { m },
        Ok(other) => panic!("EPOCH_SAMPLING={other}: use without_replacement, shuffle or poisson"),
    };
    let cfg = SiloConfig {
        sampling,
        protect: Protect::Attribute { clip_theta: 1.0 },
        sigma_loss: 0.0,
        sigma_theta: 0.05,
        sigma_w: 0.1,
        send_psi: true,
        subspace: None,
        clip_quantile: None,
        w_row_scale: None,
    };
    let cfgs = vec![cfg; 3];
    let server = ServerConfig { lam: 1.0, lr_theta: 0.25, lr_w: 0.5, w_radius: 2.0 };
    let weights = vec![1.0 / 3.0; 3];
    let inv = vec![(1.0f64 / 0.67).sqrt(), (1.0f64 / 0.33).sqrt()];
    let keys: Vec<SiloKeys> =
        (0..3).map(|_| SiloKeys { batch: NoiseKey::from_entropy().unwrap(), noise: NoiseKey::from_entropy().unwrap() }).collect();
    let rounds = std::env::var("EPOCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(n.div_ceil(m) as u64);
    // `draws`: only the batch and noise draws of the epoch's rounds (`draw_round_into`, as the
    // helper thread of the shared schedule draws them ahead), of a new epoch every rep (new
    // permutations and tables).
    let all = [
        ("auto", Some(Schedule::Auto)),
        ("sequential", Some(Schedule::Sequential)),
        ("rayon", Some(Schedule::Parallel)),
        ("shared", Some(Schedule::Shared)),
        ("draws", None),
    ];
    // EPOCH_SCHEDULES=auto,sequential picks some (default: the four schedules, interleaved).
    let pick = std::env::var("EPOCH_SCHEDULES").unwrap_or_else(|_| "auto,sequential,rayon,shared".into());
    let schedules: Vec<(&str, Option<Schedule>)> =
        all.into_iter().filter(|(name, _)| pick.split(',').any(|p| p == *name)).collect();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); schedules.len()];
    let mut draws = RoundDraws::default();
    // Interleaved, so that load from other processes hits every schedule alike.
    for rep in 0..reps as u64 {
        for (k, (_, schedule)) in schedules.iter().enumerate() {
            let mut th = vec![0.0; dims.theta_len()];
            let mut wv = vec![0.0; 4];
            let t = Instant::now();
            match schedule {
                Some(schedule) => {
                    let req = RoundsRequest::new(&silos, dims, (Fairness::DemographicParity, &inv), &cfgs, &keys, &weights, server)
                        .rounds(0, rounds);
                    let out = run_rounds_scheduled(&req, &mut th, &mut wv, *schedule);
                    assert_eq!(out.loss.len(), rounds as usize);
                }
                None => {
                    for r in rep * rounds..(rep + 1) * rounds {
                        for (j, (c, key)) in cfgs.iter().zip(&keys).enumerate() {
                            draw_round_into(c, key, j as u64, r, n, (dims.theta_len(), 4), &mut draws);
                        }
                    }
                }
            }
            times[k].push(t.elapsed().as_secs_f64() * 1e3);
            if trace {
                eprint!("{:.2} ", times[k][times[k].len() - 1]);
            }
        }
    }
    println!("Adult-like epoch: 3 silos x {n} rows, d = {d} (CSR), batch {m}, {rounds} rounds, {reps} reps, {sampling:?}");
    let (_, base, _) = stats(times[0].clone());
    let first = schedules[0].0;
    for (k, (name, _)) in schedules.iter().enumerate() {
        let (mn, med, p90) = stats(times[k].clone());
        println!("  {name:<10} min {mn:7.3} ms  median {med:7.3} ms  p90 {p90:7.3} ms  median/{first} {:.2}", med / base);
    }
}
