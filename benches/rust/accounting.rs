//! Calibration speed: `noise_multiplier_for` for T = 10^4 steps under each sampling scheme.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use pfair_core::accounting::{exact_noise_multiplier_for, ledger_admits, noise_multiplier_for, Held, Scheme};

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
    // Exact accountant: closed form (shuffle, full batch) and the binomial mixture.
    for (name, scheme, rate) in
        [("shuffle", Scheme::Shuffle, q), ("full_batch", Scheme::FullBatch, 1.0), ("public_batch", Scheme::PublicBatch, q)]
    {
        c.bench_function(&format!("exact_noise_multiplier_for/{name}/T=1e4"), |b| {
            b.iter(|| exact_noise_multiplier_for(black_box(1.0), 1e-5, rate, 10_000, scheme).unwrap())
        });
    }
    // One ledger admission (a silo's epoch charge): public-batch run plus a DP histogram.
    let held = [
        Held { scheme: Scheme::PublicBatch, q, z: 34.9, count: 900 },
        Held { scheme: Scheme::FullBatch, q: 1.0, z: 20.0, count: 1 },
    ];
    c.bench_function("ledger_admits/public_batch+histogram", |b| {
        b.iter(|| ledger_admits(black_box(&held), 1e-8, 1.0).unwrap())
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = calibration
}
criterion_main!(benches);
