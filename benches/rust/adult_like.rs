//! Adult-like data shared by the benches (`mod adult_like;` in each bench that uses it).

use pfair_core::psi::Code;

/// Adult-like rows: 6 standardised numeric columns and 8 one-hot blocks over the other columns;
/// labels positive with probability 0.24, group 1 with probability 0.33. Returns `(x, y, s)`,
/// `x` row-major `n × d`.
pub fn adult_like(n: usize, d: usize, seed: u64) -> (Vec<f64>, Vec<Code>, Vec<Code>) {
    let mut st = seed;
    let mut next = || {
        st = st.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (st >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut x = vec![0.0; n * d];
    let block = (d - 6) / 8;
    for row in x.chunks_exact_mut(d) {
        for v in row.iter_mut().take(6) {
            *v = next() * 2.0 - 1.0;
        }
        for b in 0..8 {
            row[6 + b * block + ((next() * block as f64) as usize).min(block - 1)] = 1.0;
        }
    }
    let y = (0..n).map(|_| (next() < 0.24) as Code).collect();
    let s = (0..n).map(|_| (next() < 0.33) as Code).collect();
    (x, y, s)
}
