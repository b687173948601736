//! Criterion benches of the hot path: one silo's batch kernel and one full SteFFLe round
//! (3 Adult-sized silos, batch 256, 102 features), the unit behind the "< 10 ms per epoch" target.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use pfair_core::features::{Csr, Dense, Features};
use pfair_core::psi::{batch_gradients, Dims, Fairness, Point, Protect, PsiInputs, Records};
use pfair_core::noise::NoiseKey;
use pfair_core::round::{Silo, SiloConfig, SiloKeys};
use pfair_core::schedule::{run_rounds, RoundsRequest};
use pfair_core::server::ServerConfig;
use pfair_core::sampling::Sampling;

mod adult_like;
use adult_like::adult_like as silo;

fn bench_kernels(c: &mut Criterion) {
    let (n, d) = (11_304, 102);
    let dims = Dims { d, k: 2, l: 2 };
    let (x, y, s) = silo(n, d, 1);
    let csr = Csr::from_dense(&x, d);
    let theta = vec![0.01; dims.theta_len()];
    let w = vec![0.1, -0.2, 0.3, 0.05];
    let inv = vec![(1.0f64 / 0.67).sqrt(), (1.0f64 / 0.33).sqrt()];
    let batch: Vec<usize> = (0..256).map(|i| i * 41 % n).collect();
    let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &w, inv_sqrt_ps: &inv };
    let protect = Protect::Attribute { clip_theta: 1.0 };
    c.bench_function("batch_gradients dense adult-like m=256 d=102", |b| {
        let data = Records { rows: &Dense { x: &x, d }, y: &y, s: &s };
        b.iter(|| black_box(batch_gradients(data, Point { dims, theta: black_box(&theta), psi }, &batch, 256.0, protect)))
    });
    c.bench_function("batch_gradients csr adult-like m=256 d=102", |b| {
        let data = Records { rows: &csr, y: &y, s: &s };
        b.iter(|| black_box(batch_gradients(data, Point { dims, theta: black_box(&theta), psi }, &batch, 256.0, protect)))
    });

    let silos: Vec<Silo> = (0..3)
        .map(|j| {
            let (x, y, s) = silo(n, d, 10 + j);
            Silo { x: Features::auto(x, d), y, s }
        })
        .collect();
    let cfg = SiloConfig {
        sampling: Sampling::WithoutReplacement { m: 256 },
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
    let keys: Vec<SiloKeys> = (0..3)
        .map(|_| SiloKeys { batch: NoiseKey::Seeded(7), noise: NoiseKey::from_entropy().unwrap() })
        .collect();
    let rounds_per_epoch = (n as f64 / 256.0).ceil() as u64;
    c.bench_function("one epoch: 3 silos x 11304 records, batch 256 (45 rounds)", |b| {
        b.iter(|| {
            let mut th = theta.clone();
            let mut wv = w.clone();
            let req = RoundsRequest::new(&silos, dims, (Fairness::DemographicParity, &inv), &cfgs, &keys, &weights, server)
                .rounds(0, rounds_per_epoch);
            black_box(run_rounds(&req, &mut th, &mut wv))
        })
    });
}

criterion_group!(benches, bench_kernels);
criterion_main!(benches);
