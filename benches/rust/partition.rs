//! Criterion bench of the partitioners: the paper's partitioner (Gupta et al. 2024, Algorithm 3) and the
//! Dirichlet skew with exact sizes, 10^6 rows into 1,000 silos. `cargo bench --bench partition`.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use pfair_core::noise::{stream, Purpose};
use pfair_core::partition::{dirichlet, equal_sizes, heterogeneous};
use rand::Rng;

fn bench_partition(c: &mut Criterion) {
    let n = 1_000_000;
    let mut rng = stream(0, 0, 0, Purpose::Other);
    let ages: Vec<f64> = (0..n).map(|_| (17.0 + 73.0 * rng.gen::<f64>()).floor()).collect();
    let labels: Vec<i64> = (0..n).map(|_| rng.gen_range(0..10)).collect();
    let sizes: Vec<i64> = equal_sizes(n, 1000).unwrap().into_iter().map(|s| s as i64).collect();

    let mut g = c.benchmark_group("partition_1e6_rows_1000_silos");
    g.sample_size(10);
    g.bench_function("heterogeneous_h0.5", |b| {
        b.iter(|| heterogeneous(black_box(&ages), 1000, 0.5, None, 1).unwrap())
    });
    g.bench_function("dirichlet_alpha0.5_exact_sizes", |b| {
        b.iter(|| dirichlet(black_box(&labels), 1000, 0.5, Some(&sizes), 1).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench_partition);
criterion_main!(benches);
