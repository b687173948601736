//! Calibration speed: `noise_multiplier_for` for T = 10^4 steps under each sampling scheme.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use pfair_core::accounting::{noise_multiplier_for, Scheme};

fn calibration(c: &mut Criterion) {
    let q = 256.0 / 12211.0;
    for (name, scheme, rate) in [
        ("without_replacement", Scheme::WithoutReplacement, q),
        ("poisson", Scheme::Poisson, q),
        ("poisson_replace_one", Scheme::PoissonReplaceOne, q),
        ("full_batch", Scheme::FullBatch, 1.0),
        ("public_batch", Scheme::PublicBatch, q),
    ] {
        c.bench_function(&format!("noise_multiplier_for/{name}/T=1e4"), |b| {
            b.iter(|| noise_multiplier_for(black_box(1.0), 1e-5, rate, 10_000, scheme).unwrap())
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = calibration
}
criterion_main!(benches);
