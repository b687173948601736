//! [`Schedule::Shared`](super::Schedule::Shared): the rounds of a call run on the calling
//! thread and one helper thread, with no hand-off that either thread must wait for.
//!
//! Each round is a set of *tasks*, one per answering silo: the exact parts of the silo's batch
//! plus its noise ([`noised_parts_into`]). The calling thread opens a round by publishing θ and W
//! and then takes tasks until none is left; the helper takes tasks as well, and between rounds it
//! draws the batches and noise of the coming rounds (*units*, one per silo and round; they depend
//! on neither θ nor W). A task whose unit nobody has drawn yet draws it itself. So when the
//! helper is not running (the operating system descheduled it), the calling thread does all the
//! work alone, as [`Schedule::Sequential`](super::Schedule::Sequential) would, and waits
//! only for a task or a unit the helper has already started.
//!
//! Every task writes into its own silo's scratch, and the server step adds the messages in silo
//! order on the calling thread, so the bits do not depend on which thread ran what.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

use super::RoundsRequest;
use crate::psi::{BatchGradients, Point};
use crate::round::{draw_round_into, noised_parts_into, RoundDraws, StepScratch};

/// Rounds whose units may be drawn ahead of the open round (the size of the units' ring).
pub const SHARED_AHEAD: u64 = 64;

/// Busy-wait iterations before a waiting thread yields its core to the operating system.
const SPINS_BEFORE_YIELD: u32 = 2_000;
/// Yields of an idle helper before it naps ([`NAP_MICROS`] at a time) instead.
const YIELDS_BEFORE_NAP: u32 = 2_000;
/// An idle helper's nap.
const NAP_MICROS: u64 = 50;

/// A value on its own cache line (the two threads write different atomics; sharing a line would
/// make each write invalidate the other thread's copy).
#[repr(align(128))]
struct Padded<T>(T);

/// Unit states (one `u64` per ring entry): `2(q+1)` while round `q`'s unit is being drawn,
/// `2(q+1) + 1` once it is drawn. States only grow, so a state from an older round is below both.
fn claimed(q: u64) -> u64 {
    2 * (q + 1)
}
fn drawn(q: u64) -> u64 {
    2 * (q + 1) + 1
}

/// What the two threads share during one call.
struct Board<'a> {
    req: &'a RoundsRequest<'a>,
    active: &'a [usize],
    lens: (usize, usize),
    /// The open round's claims: `(round + 1) << 32 | next task`; 0 while no round is open.
    claim: Padded<AtomicU64>,
    /// Tasks of the open round that are finished.
    done: Padded<AtomicUsize>,
    /// Rounds (counted from `start`) whose tasks are all finished.
    finished: Padded<AtomicU64>,
    /// Set when the call is over, or when the helper stopped by a panic.
    stop: Padded<AtomicBool>,
    helper_failed: AtomicBool,
    /// θ and W of the open round, for the helper's tasks (the calling thread reads its own).
    params: RwLock<(Vec<f64>, Vec<f64>)>,
    /// Ring of units (one silo's [`RoundDraws`] of one round): entry
    /// `(q mod min(SHARED_AHEAD, n_rounds)) · tasks + t`.
    units: Vec<Mutex<RoundDraws>>,
    states: Vec<AtomicU64>,
    /// One scratch per task (silo), whoever runs it.
    scratch: Vec<Mutex<StepScratch>>,
}

impl Board<'_> {
    fn tasks(&self) -> usize {
        self.active.len()
    }

    fn entry(&self, q: u64, t: usize) -> usize {
        (q % SHARED_AHEAD.min(self.req.n_rounds)) as usize * self.tasks() + t
    }

    /// Draws unit `(q, t)` if nobody has claimed it; true if this call drew it.
    fn try_draw(&self, q: u64, t: usize) -> bool {
        let e = self.entry(q, t);
        let state = &self.states[e];
        let old = state.load(Ordering::Acquire);
        if old >= claimed(q) || state.compare_exchange(old, claimed(q), Ordering::AcqRel, Ordering::Acquire).is_err() {
            return false;
        }
        let (req, j) = (self.req, self.active[t]);
        let mut unit = self.units[e].lock().unwrap();
        draw_round_into(&req.silo_cfgs[j], &req.keys[j], j as u64, req.start + q, req.silos[j].len(), self.lens, &mut unit);
        drop(unit);
        state.store(drawn(q), Ordering::Release);
        true
    }

    /// Makes sure unit `(q, t)` is drawn: draws it, or waits for the thread drawing it.
    fn ensure_drawn(&self, q: u64, t: usize) {
        let state = &self.states[self.entry(q, t)];
        if state.load(Ordering::Acquire) == drawn(q) || self.try_draw(q, t) {
            return;
        }
        self.wait(|| state.load(Ordering::Acquire) == drawn(q));
    }

    /// Takes the next task of the open round, if one is left: `(round, task)`.
    fn try_claim(&self) -> Option<(u64, usize)> {
        let mut c = self.claim.0.load(Ordering::Acquire);
        loop {
            let (round, t) = (c >> 32, (c & 0xFFFF_FFFF) as usize);
            if round == 0 || t >= self.tasks() {
                return None;
            }
            match self.claim.0.compare_exchange_weak(c, c + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some((round - 1, t)),
                Err(now) => c = now,
            }
        }
    }

    /// Task `t` of round `q` (counted from `start`) with θ and W as given.
    fn run_task(&self, at: Point<'_>, q: u64, t: usize) {
        self.ensure_drawn(q, t);
        let (req, j) = (self.req, self.active[t]);
        let unit = self.units[self.entry(q, t)].lock().unwrap();
        let mut sc = self.scratch[t].lock().unwrap();
        let StepScratch { ws, msg, .. } = &mut *sc;
        noised_parts_into(&req.silos[j], at, &req.silo_cfgs[j], &unit, ws, msg);
        drop(sc);
        drop(unit);
        self.done.0.fetch_add(1, Ordering::Release);
    }

    /// Busy-waits until `ready()`, yielding the core after a while; panics if the helper died
    /// (its panic is then re-raised when the scope joins it).
    fn wait(&self, ready: impl Fn() -> bool) {
        let mut spins = 0u32;
        while !ready() {
            if self.helper_failed.load(Ordering::Acquire) {
                panic!("the helper thread of the shared schedule stopped");
            }
            if spins < SPINS_BEFORE_YIELD {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// The helper's loop: tasks of the open round first, then units ahead, until the call ends.
    fn help(&self) {
        let n = self.tasks() as u64;
        if n == 0 {
            return; // no silo answers: nothing to run or draw
        }
        let mut next_unit = 0u64; // units in order: round q, task t = next_unit / n, next_unit % n
        let mut idle = 0u32;
        while !self.stop.0.load(Ordering::Acquire) {
            if let Some((q, t)) = self.try_claim() {
                let params = self.params.read().unwrap();
                self.run_task(self.req.point(&params.0, &params.1), q, t);
                idle = 0;
                continue;
            }
            let finished = self.finished.0.load(Ordering::Acquire);
            next_unit = next_unit.max(finished * n);
            let q = next_unit / n;
            if q < self.req.n_rounds && q < finished + SHARED_AHEAD {
                self.try_draw(q, (next_unit % n) as usize);
                next_unit += 1;
                idle = 0;
                continue;
            }
            // Nothing to do: spin a little, then yield the core, then sleep in short naps (a
            // helper with nothing left to draw, e.g. for one silo, does not hold a core for the
            // rest of the call; the calling thread never waits for a helper that is not busy).
            idle = idle.saturating_add(1);
            if idle < SPINS_BEFORE_YIELD {
                std::hint::spin_loop();
            } else if idle < SPINS_BEFORE_YIELD + YIELDS_BEFORE_NAP {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(NAP_MICROS));
            }
        }
    }
}

/// Sets `helper_failed` if the helper unwinds, so the calling thread stops waiting for it.
struct FailFlag<'a>(&'a AtomicBool);

impl Drop for FailFlag<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Release);
        }
    }
}

/// Runs the rounds of `req` for the silos `active` under
/// [`Schedule::Shared`](super::Schedule::Shared); `finish(round, θ, W, messages)` is the calling
/// thread's work after each round's tasks (summaries and the server step), as in the other
/// schedules.
pub(super) fn run_shared(
    req: &RoundsRequest<'_>,
    active: &[usize],
    theta: &mut [f64],
    w: &mut [f64],
    mut finish: impl FnMut(u64, &mut [f64], &mut [f64], &[&BatchGradients]),
) {
    let (start, n_rounds) = (req.start, req.n_rounds);
    let tasks = active.len();
    assert!(tasks < 1 << 32, "too many silos for the shared schedule");
    if n_rounds == 0 {
        return; // no helper to start
    }
    // The ring holds the units of at most SHARED_AHEAD rounds (fewer when the call has fewer).
    let ring = SHARED_AHEAD.min(n_rounds) as usize * tasks;
    let board = Board {
        req,
        active,
        lens: (req.dims.theta_len(), req.dims.w_len(req.fairness)),
        claim: Padded(AtomicU64::new(0)),
        done: Padded(AtomicUsize::new(0)),
        finished: Padded(AtomicU64::new(0)),
        stop: Padded(AtomicBool::new(false)),
        helper_failed: AtomicBool::new(false),
        params: RwLock::new((theta.to_vec(), w.to_vec())),
        units: (0..ring).map(|_| Mutex::new(RoundDraws::default())).collect(),
        states: (0..ring).map(|_| AtomicU64::new(0)).collect(),
        scratch: (0..tasks).map(|_| Mutex::new(StepScratch::default())).collect(),
    };
    std::thread::scope(|scope| {
        let board = &board;
        scope.spawn(move || {
            let _flag = FailFlag(&board.helper_failed);
            board.help();
        });
        // Stops the helper however the calling thread leaves the scope (also by a panic).
        struct Stop<'b>(&'b AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        let _stop = Stop(&board.stop.0);
        for q in 0..n_rounds {
            {
                let mut params = board.params.write().unwrap();
                params.0.copy_from_slice(theta);
                params.1.copy_from_slice(w);
            }
            board.done.0.store(0, Ordering::Relaxed);
            board.claim.0.store((q + 1) << 32, Ordering::Release);
            {
                let at = req.point(theta, w);
                while let Some((q_task, t)) = board.try_claim() {
                    board.run_task(at, q_task, t);
                }
            }
            board.wait(|| board.done.0.load(Ordering::Acquire) == tasks);
            board.claim.0.store(0, Ordering::Release);
            {
                let guards: Vec<_> = board.scratch.iter().map(|m| m.lock().unwrap()).collect();
                let messages: Vec<&BatchGradients> = guards.iter().map(|g| &g.msg).collect();
                finish(start + q, theta, w, &messages);
            }
            board.finished.0.store(q + 1, Ordering::Release);
        }
    });
}
