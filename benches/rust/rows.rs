//! The large-data epoch against the time it takes only to read its rows: the physical floor of an
//! epoch whose rows do not fit in cache. `cargo bench --bench rows` (env `ROWS_N` records,
//! default 2,000,000; `ROWS_D` features, default 100; `ROWS_REPS`, default 5; `ROWS_BATCH`, default
//! 64; `ROWS_DTYPE=f32` for float32 features).
//!
//! Data as `benches/python/scale.py` makes them: `n × d` float64 features, 1,000 silos, silo of
//! record `i` is `i mod 1000`, so each silo is a list of rows of one shared matrix
//! (`ROWS_LAYOUT=ranges`: silo `j` holds the `j`-th block of consecutive rows). Each rep times,
//! alternately:
//! * **epoch**: one shuffled epoch of private SteFFLe rounds (`run_rounds_scheduled`, silos on the
//!   rayon pool);
//! * **read**: the same rounds' batches drawn the same way, one value of every cache line of each
//!   batch row loaded, with the kernel's prefetch distance, silos on the rayon pool: no noise, no
//!   server step, and no arithmetic that could hold the loads back;
//! * **read in order**: the whole matrix, one value of every cache line, in parallel blocks.
//!
//! The ratio epoch / read says how far the epoch is from the memory system's limit for this access
//! pattern (random rows of 400 or 800 bytes).

use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;

use pfair_core::features::{prefetch, Features, RowMap, SharedMatrix, SharedRows};
use pfair_core::noise::NoiseKey;
use pfair_core::psi::{Code, Dims, Fairness, Protect};
use pfair_core::round::{draw_batch_into, Silo, SiloConfig, SiloKeys};
use pfair_core::schedule::{run_rounds_scheduled, RoundsRequest, Schedule};
use pfair_core::server::ServerConfig;
use pfair_core::sampling::Sampling;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn stats(mut t: Vec<f64>) -> (f64, f64) {
    t.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (t[0], t[t.len() / 2])
}

/// Reads every cache line of the rows of `batch` (one value of each 64 bytes, into four
/// independent sums), prefetching 6 rows ahead as the kernel does. The loads are all there is:
/// summing every value in one chain of dependent adds instead (100 adds of 3–4 cycles a row)
/// would time the adds, not the memory.
fn read_batch(matrix: &SharedMatrix, rows: &RowMap, batch: &[usize]) -> f64 {
    match (matrix.as_f64(), matrix.as_f32()) {
        (Some(x), _) => read_lines(x, matrix.d(), rows, batch),
        (_, Some(x)) => read_lines(x, matrix.d(), rows, batch),
        _ => unreachable!("a shared matrix holds float64 or float32"),
    }
}

fn read_lines<T: Copy + Into<f64>>(x: &[T], d: usize, rows: &RowMap, batch: &[usize]) -> f64 {
    let per_line = 64 / std::mem::size_of::<T>();
    let mut acc = [0.0f64; 4];
    for (k, &i) in batch.iter().enumerate() {
        if let Some(&ahead) = batch.get(k + 6) {
            let r = rows.row(ahead);
            for line in x[r * d..(r + 1) * d].chunks(per_line) {
                prefetch(line.as_ptr());
            }
        }
        let r = rows.row(i);
        for (q, line) in x[r * d..(r + 1) * d].chunks(per_line).enumerate() {
            acc[q % 4] += line[0].into();
        }
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// The sum of a matrix read in order, one value of each cache line, in parallel blocks.
fn read_sequential<T: Copy + Into<f64> + Sync>(x: &[T]) -> f64 {
    let per_line = 64 / std::mem::size_of::<T>();
    x.par_chunks(1 << 16)
        .map(|c| {
            let mut acc = [0.0f64; 4];
            for (q, line) in c.chunks(per_line).enumerate() {
                acc[q % 4] += line[0].into();
            }
            (acc[0] + acc[1]) + (acc[2] + acc[3])
        })
        .sum()
}

/// Asks for transparent huge pages on the (not yet touched) buffer of `v`, as NumPy does for its
/// large arrays: with 4 kB pages every random row is a TLB miss, and the comparison with what
/// pfair sees from Python would be unfair.
fn huge_pages<T>(v: &Vec<T>) {
    #[cfg(target_os = "linux")]
    {
        extern "C" {
            fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
        }
        const MADV_HUGEPAGE: i32 = 14;
        let (start, len) = (v.as_ptr() as usize, v.capacity() * std::mem::size_of::<T>());
        let aligned = start.next_multiple_of(1 << 21);
        if len > (aligned - start) + (1 << 21) {
            // SAFETY: the range lies inside the allocation of `v`; madvise only sets a hint.
            unsafe { madvise(aligned as *mut _, (len - (aligned - start)) & !((1 << 21) - 1), MADV_HUGEPAGE) };
        }
    }
}

fn main() {
    let (n, d, n_silos) = (env("ROWS_N", 2_000_000), env("ROWS_D", 100), 1000);
    let (reps, m) = (env("ROWS_REPS", 5), env("ROWS_BATCH", 64));
    let mut st = 7u64;
    let mut next = move || {
        st = st.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (st >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut x: Vec<f64> = Vec::with_capacity(n * d);
    huge_pages(&x);
    x.extend((0..n * d).map(|_| next() * 2.0 - 1.0));
    let y: Vec<Code> = (0..n).map(|i| (x[i * d] + 0.3 * x[i * d + 1] > 0.0) as Code).collect();
    let s: Vec<Code> = (0..n).map(|_| (next() < 0.4) as Code).collect();
    let f32_rows = std::env::var("ROWS_DTYPE").is_ok_and(|v| v == "f32");
    let matrix = Arc::new(if f32_rows {
        let mut x32: Vec<f32> = Vec::with_capacity(n * d);
        huge_pages(&x32);
        x32.extend(x.iter().map(|&v| v as f32));
        drop(x);
        SharedMatrix::from_vec_f32(x32, d)
    } else {
        SharedMatrix::from_vec_f64(x, d)
    });
    // ROWS_LAYOUT=ranges: silo j holds the j-th block of consecutive rows instead (a federation
    // whose data arrive silo by silo).
    let ranges = std::env::var("ROWS_LAYOUT").is_ok_and(|v| v == "ranges");
    let silo_rows: Vec<RowMap> = (0..n_silos)
        .map(|j| {
            let rows: Vec<usize> = if ranges { (j * n / n_silos..(j + 1) * n / n_silos).collect() } else { (j..n).step_by(n_silos).collect() };
            RowMap::from_rows(&rows)
        })
        .collect();
    let silos: Vec<Silo> = silo_rows
        .iter()
        .map(|rows| {
            let list: Vec<usize> = (0..rows.len()).map(|i| rows.row(i)).collect();
            Silo {
                y: list.iter().map(|&r| y[r]).collect(),
                s: list.iter().map(|&r| s[r]).collect(),
                x: Features::Shared(SharedRows { matrix: matrix.clone(), rows: rows.clone() }),
            }
        })
        .collect();
    let dims = Dims { d, k: 2, l: 2 };
    let cfg = SiloConfig {
        sampling: Sampling::Shuffle { m },
        protect: Protect::Attribute { clip_theta: 0.5 },
        sigma_loss: 0.0,
        sigma_theta: 0.14,
        sigma_w: 0.58,
        send_psi: true,
        subspace: None,
        clip_quantile: None,
        w_row_scale: None,
    };
    let cfgs = vec![cfg; n_silos];
    let keys: Vec<SiloKeys> =
        (0..n_silos).map(|_| SiloKeys { batch: NoiseKey::from_entropy().unwrap(), noise: NoiseKey::from_entropy().unwrap() }).collect();
    let weights = vec![1.0 / n_silos as f64; n_silos];
    let server = ServerConfig { lam: 1.0, lr_theta: 0.1, lr_w: 0.1, w_radius: 10.0 };
    let inv = vec![(1.0f64 / 0.6).sqrt(), (1.0f64 / 0.4).sqrt()];
    let rounds = (n / n_silos).div_ceil(m) as u64;
    let (mut t_epoch, mut t_read, mut t_seq) = (Vec::new(), Vec::new(), Vec::new());
    let mut sink = 0.0;
    for rep in 0..reps as u64 {
        let start = rep * rounds;
        let (mut th, mut wv) = (vec![0.0; dims.theta_len()], vec![0.0; 4]);
        let t = Instant::now();
        let req = RoundsRequest::new(&silos, dims, (Fairness::DemographicParity, &inv), &cfgs, &keys, &weights, server)
            .rounds(start, rounds);
        run_rounds_scheduled(&req, &mut th, &mut wv, Schedule::Parallel);
        t_epoch.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for round in start..start + rounds {
            sink += (0..n_silos)
                .into_par_iter()
                .map_init(Vec::new, |batch, j| {
                    draw_batch_into(&cfgs[j], &keys[j], j as u64, round, silos[j].len(), batch);
                    read_batch(&matrix, &silo_rows[j], batch)
                })
                .sum::<f64>();
        }
        t_read.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        sink += match (matrix.as_f64(), matrix.as_f32()) {
            (Some(x), _) => read_sequential(x),
            (_, Some(x)) => read_sequential(x),
            _ => unreachable!(),
        };
        t_seq.push(t.elapsed().as_secs_f64());
    }
    let gb = (n * d * if f32_rows { 4 } else { 8 }) as f64 / 1e9;
    let dtype = if f32_rows { "float32" } else { "float64" };
    let layout = if ranges { "consecutive rows".to_string() } else { format!("rows i mod {n_silos}") };
    println!("{n} x {d} {dtype} ({gb:.2} GB), {n_silos} silos ({layout}), batch {m}, {rounds} rounds, {reps} reps (sink {sink:.3e})");
    let (e, em) = stats(t_epoch);
    let (r, rm) = stats(t_read);
    let (q, qm) = stats(t_seq);
    println!("  epoch             min {e:.3} s  median {em:.3} s  ({:.1} GB/s of rows)", gb / e);
    println!("  read its rows     min {r:.3} s  median {rm:.3} s  ({:.1} GB/s)", gb / r);
    println!("  read in order     min {q:.3} s  median {qm:.3} s  ({:.1} GB/s)", gb / q);
    println!("  epoch / read: {:.2} (min), {:.2} (median)", e / r, em / rm);
}
