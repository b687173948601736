//! How many threads a long call may use now: the rayon pool's size on a quiet machine, one when
//! the machine is oversubscribed.
//!
//! The pool is sized once, from the cores this process may run on (Rust's
//! `available_parallelism`, which reads the affinity mask and the cgroup CPU quota on Linux, or
//! `RAYON_NUM_THREADS`). A machine shared with other work can have more runnable threads than
//! cores; a fork-join over threads that the operating system has descheduled then waits for the
//! slowest of them, and a call that would take both cores of a quiet machine runs several times
//! slower than on one (measured in `benches/python/load_bench.py`). So each long call (an epoch of
//! rounds, a checkpoint's counts) first reads how many threads are runnable on the machine
//! (`procs_running` of `/proc/stat`, which counts the calling thread) and runs on the calling
//! thread alone when they exceed the pool's threads. The reading is cached for
//! [`RECHECK`]. Every schedule gives the same bits, so this changes speed only.
//!
//! A schedule that never waits for a descheduled thread would not change that choice: Linux
//! shares the cores between sessions (autogroups, CPU cgroups), not threads, so while other
//! sessions keep the machine busy a second thread gains the process no CPU time, and what it
//! spends idling or on work done twice is taken from the calling thread (measured in
//! `docs/dev/performance-notebook.md`, "Threads under load").
//!
//! `PFAIR_ADAPTIVE_THREADS=0` turns the check off (the pool is always used, as before).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a reading of the machine's load is reused.
pub const RECHECK: Duration = Duration::from_millis(50);

/// Whether the check is on (`PFAIR_ADAPTIVE_THREADS` not set to `0`, `false` or `off`).
fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !matches!(std::env::var("PFAIR_ADAPTIVE_THREADS").as_deref(), Ok("0") | Ok("false") | Ok("off")))
}

/// The threads runnable on the machine now (`procs_running` of `/proc/stat`; the calling thread
/// is one of them), or None where that is not readable (not Linux).
pub fn runnable_threads() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_procs_running(&stat)
}

/// `procs_running` of the text of `/proc/stat`.
fn parse_procs_running(stat: &str) -> Option<u64> {
    stat.lines().find_map(|line| line.strip_prefix("procs_running")?.trim().parse().ok())
}

/// Whether a machine with `runnable` threads runnable (the caller included) is oversubscribed for a
/// call that would use `pool` threads: the other runnable threads and the call's own exceed the
/// cores the pool was sized for.
pub fn oversubscribed(runnable: u64, pool: usize) -> bool {
    runnable > pool as u64
}

/// Start of the process's clock, for the cache's time stamps.
fn epoch() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

/// The last reading: `(milliseconds since epoch() + 1) << 1 | busy`, 0 before the first.
static LAST: AtomicU64 = AtomicU64::new(0);

/// Whether the machine is oversubscribed now for a call on the rayon pool (false when the pool
/// has one thread, the check is off or the load cannot be read).
pub fn machine_busy() -> bool {
    let pool = rayon::current_num_threads();
    if pool < 2 || !enabled() {
        return false;
    }
    let now = epoch().elapsed().as_millis() as u64 + 1;
    let last = LAST.load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last >> 1) < RECHECK.as_millis() as u64 {
        return last & 1 == 1;
    }
    let busy = runnable_threads().is_some_and(|r| oversubscribed(r, pool));
    LAST.store(now << 1 | busy as u64, Ordering::Relaxed);
    busy
}

/// The threads a long call should use now: 1 when [`machine_busy`], else the pool's size.
pub fn threads_now() -> usize {
    if machine_busy() {
        1
    } else {
        rayon::current_num_threads()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_procs_running_and_decides_by_the_pool() {
        let stat = "cpu  1 2 3\nintr 5\nctxt 9\nprocs_running 3\nprocs_blocked 0\n";
        assert_eq!(parse_procs_running(stat), Some(3));
        assert_eq!(parse_procs_running("cpu 1\n"), None);
        assert!(!oversubscribed(2, 2) && oversubscribed(3, 2) && !oversubscribed(1, 1));
        #[cfg(target_os = "linux")]
        assert!(runnable_threads().is_some_and(|r| r >= 1)); // this thread is running
        assert!((1..=rayon::current_num_threads()).contains(&threads_now()));
    }
}
