//! How quiet the host is right now: a fixed loop over 16 KB (it stays in the L1 cache; no memory
//! traffic, no threads, no allocation) timed 2,000 times. On a quiet core every rep takes its
//! minimum within a few percent; the share of reps more than 1.3× the minimum, and the median
//! over the minimum, say how much of any other bench's spread in this run came from the host.
//! `cargo bench --bench host` before and after a bench run (env `HOST_REPS`, default 2,000).

use std::hint::black_box;
use std::time::Instant;

fn main() {
    let reps: usize = std::env::var("HOST_REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let a: Vec<f64> = (0..2048).map(|i| i as f64 * 1e-9).collect();
    let mut times = Vec::with_capacity(reps);
    let mut sink = 0.0;
    for _ in 0..reps {
        let t = Instant::now();
        let mut s = [0.0f64; 4];
        for _ in 0..512 {
            for c in black_box(&a).chunks_exact(4) {
                for (sv, cv) in s.iter_mut().zip(c) {
                    *sv += cv;
                }
            }
        }
        sink += s.iter().sum::<f64>();
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let min = times.iter().cloned().fold(f64::INFINITY, f64::min);
    let slow = times.iter().filter(|&&t| t > 1.3 * min).count();
    let mut sorted = times.clone();
    sorted.sort_by(|x, y| x.partial_cmp(y).unwrap());
    let median = sorted[reps / 2];
    println!(
        "host check: an L1-resident loop, min {min:.3} ms, median {median:.3} ms ({:.2}× min), {slow} of {reps} reps over 1.3× min (sink {sink:.3})",
        median / min
    );
}
