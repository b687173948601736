//! [`Schedule::Shared`](super::Schedule::Shared): the rounds of a call run on the calling
//! thread and one helper thread, and the calling thread never waits for the helper.
//!
//! Each round is a set of *tasks*, one per answering silo: the exact parts of the silo's batch
//! plus its noise ([`noised_parts_into`]). The calling thread opens a round by publishing θ and W
//! and then takes tasks until none is left; the helper takes tasks as well, and between rounds it
//! draws the batches and noise of the coming rounds (*units*, one per silo and round; they depend
//! on neither θ nor W). A task whose unit nobody has drawn yet draws it itself.
//!
//! A machine shared with other work deschedules the helper for whole time slices (milliseconds),
//! in the middle of a task or of a unit. So the calling thread never waits for it: when the open
//! round's tasks are all taken and the helper's are still unfinished a little after the calling
//! thread's own would have been ([`grace`]), the calling thread computes them again into its own
//! scratch, and a unit that the helper is drawing it draws again into a spare. Whichever result of
//! a task is complete first is the one the round uses (a compare-and-swap on the task's state);
//! the other is dropped. This changes no bit: a task is a function of (round, silo, keys, θ, W)
//! alone (its batch and noise come from counter-based streams keyed by silo and round; its
//! kernel overwrites its scratch), so both results are the same. The helper's late result can
//! never replace the one used: task states only grow, a task of round `q` is published only over
//! a state of an earlier round, and round `q + 1` opens only when every task of `q` is published.
//! At worst (the helper never runs) the calling thread does the work alone, as
//! [`Schedule::Sequential`](super::Schedule::Sequential) would, plus one [`grace`] per round.
//!
//! Every task writes into a scratch of its own silo (the calling thread's or the helper's), and
//! the server step adds the messages in silo order on the calling thread, so the bits do not
//! depend on which thread ran what.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use super::RoundsRequest;
use crate::psi::{BatchGradients, Point};
use crate::round::{draw_round_into, noised_parts_into, RoundDraws, StepScratch};

/// Rounds whose units may be drawn ahead of the open round (the size of the units' ring).
pub const SHARED_AHEAD: u64 = 64;

/// Busy-wait iterations before a waiting thread yields its core to the operating system.
const SPINS_BEFORE_YIELD: u32 = 2_000;
/// The longest an idle helper stays parked (the calling thread wakes it when a round opens and
/// when the call ends; this bounds a missed wake-up).
const PARK: Duration = Duration::from_millis(1);

/// How long the calling thread waits for the helper's unfinished tasks of a round before it
/// computes them itself: a few times its own fastest task of the call (`fastest`: a task's wall
/// time includes any time slice the thread lost, so a mean would grow under load) plus a few
/// microseconds, at most [`GRACE_MAX`]. A helper that is running finishes well within it; one that
/// the operating system has descheduled would take a time slice (milliseconds). The calling thread
/// spins through it and never yields its core (a yield on a busy machine can cost a time slice).
fn grace(fastest: Duration) -> Duration {
    (fastest * 3 + Duration::from_micros(10)).min(GRACE_MAX)
}

/// The longest [`grace`].
const GRACE_MAX: Duration = Duration::from_micros(200);

/// A value on its own cache line (the two threads write different atomics; sharing a line would
/// make each write invalidate the other thread's copy).
#[repr(align(128))]
struct Padded<T>(T);

/// Who computed the result of a task that the round uses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Who {
    Caller = 0,
    Helper = 1,
}

/// Task states (one `u64` per task): `2(q+1) + who` once round `q`'s result is published. States
/// only grow, so a state from an older round is below both.
fn published(q: u64, who: Who) -> u64 {
    2 * (q + 1) + who as u64
}

/// θ and W of a round, for the helper's tasks (the calling thread reads its own).
struct Params {
    round: u64,
    theta: Vec<f64>,
    w: Vec<f64>,
}

/// How often the calling thread did the helper's work (for tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct SharedStats {
    /// Tasks the helper had taken but not finished in time, computed again by the calling thread.
    pub retaken_tasks: usize,
    /// Units the calling thread drew into its spare because the helper held them.
    pub spare_draws: usize,
}

/// What the two threads share during one call.
struct Board<'a> {
    req: &'a RoundsRequest<'a>,
    active: &'a [usize],
    lens: (usize, usize),
    /// The open round's claims: `(round + 1) << 32 | next task`; 0 while no round is open.
    claim: Padded<AtomicU64>,
    /// Tasks of the open round whose result is published.
    done: Padded<AtomicUsize>,
    /// Per task: [`published`] of the last round whose result is published.
    results: Vec<AtomicU64>,
    /// Rounds (counted from `start`) whose tasks are all finished.
    finished: Padded<AtomicU64>,
    /// θ and W of the open round (replaced, never written in place while the helper holds them).
    params: Mutex<Arc<Params>>,
    /// Ring of units (one silo's [`RoundDraws`] of one round): entry
    /// `(q mod min(SHARED_AHEAD, n_rounds)) · tasks + t`, written under its write lock only.
    units: Vec<RwLock<RoundDraws>>,
    /// Per entry: `q + 1` of the round whose unit it holds (0: none); changed under the entry's
    /// write lock only.
    drawn: Vec<AtomicU64>,
    /// The helper's scratch per task (silo).
    helper_scratch: Vec<Mutex<StepScratch>>,
    /// Tests only: how long the helper sleeps in the middle of each of its tasks and draws.
    stall: Duration,
}

impl Board<'_> {
    fn tasks(&self) -> usize {
        self.active.len()
    }

    fn entry(&self, q: u64, t: usize) -> usize {
        (q % SHARED_AHEAD.min(self.req.n_rounds)) as usize * self.tasks() + t
    }

    /// Draws unit `(q, t)` into `unit`.
    fn draw(&self, q: u64, t: usize, unit: &mut RoundDraws) {
        let (req, j) = (self.req, self.active[t]);
        draw_round_into(&req.silo_cfgs[j], &req.keys[j], j as u64, req.start + q, req.silos[j].len(), self.lens, unit);
    }

    /// The helper draws unit `(q, t)` into the ring unless it is there (or a later round's is);
    /// `block`: wait for the entry's lock rather than give up.
    fn helper_draw(&self, q: u64, t: usize, block: bool) {
        let e = self.entry(q, t);
        if self.drawn[e].load(Ordering::Acquire) > q {
            return;
        }
        let mut unit = if block {
            self.units[e].write().unwrap()
        } else {
            match self.units[e].try_write() {
                Ok(g) => g,
                Err(_) => return,
            }
        };
        if self.drawn[e].load(Ordering::Acquire) <= q {
            self.draw(q, t, &mut unit);
            if !self.stall.is_zero() {
                std::thread::sleep(self.stall);
            }
            self.drawn[e].store(q + 1, Ordering::Release);
        }
    }

    /// Publishes task `t` of round `q` as computed by `who`, unless a result is already
    /// published; true if this one is used.
    fn publish(&self, q: u64, t: usize, who: Who) -> bool {
        let state = &self.results[t];
        let mut old = state.load(Ordering::Acquire);
        loop {
            if old >= published(q, Who::Caller) {
                return false;
            }
            match state.compare_exchange_weak(old, published(q, who), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    self.done.0.fetch_add(1, Ordering::Release);
                    return true;
                }
                Err(now) => old = now,
            }
        }
    }

    fn is_published(&self, q: u64, t: usize) -> bool {
        self.results[t].load(Ordering::Acquire) >= published(q, Who::Caller)
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

    /// The helper's task `t` of round `q`: into its own scratch, published unless the calling
    /// thread's result came first (or the round is over).
    fn helper_task(&self, q: u64, t: usize) {
        let params = Arc::clone(&self.params.lock().unwrap());
        if params.round != q || self.is_published(q, t) {
            return; // a claim of a round that is over, or the calling thread did it already
        }
        self.helper_draw(q, t, true);
        let e = self.entry(q, t);
        let unit = self.units[e].read().unwrap();
        if self.drawn[e].load(Ordering::Acquire) != q + 1 {
            return; // the entry holds a later round: round q is over
        }
        let (req, j) = (self.req, self.active[t]);
        let mut sc = self.helper_scratch[t].lock().unwrap();
        let StepScratch { ws, msg, .. } = &mut *sc;
        noised_parts_into(&req.silos[j], req.point(&params.theta, &params.w), &req.silo_cfgs[j], &unit, ws, msg);
        if !self.stall.is_zero() {
            std::thread::sleep(self.stall);
        }
        drop(sc);
        drop(unit);
        self.publish(q, t, Who::Helper);
    }

    /// The calling thread's task `t` of round `q` into `mine`, never waiting for the helper: the
    /// unit from the ring if it is there and free, else drawn into the ring if the entry is free,
    /// else into `spare`. Returns whether it drew into the spare.
    fn caller_task(&self, at: Point<'_>, q: u64, t: usize, mine: &mut StepScratch, spare: &mut RoundDraws) -> bool {
        let (req, j) = (self.req, self.active[t]);
        let StepScratch { ws, msg, .. } = mine;
        let mut compute = |unit: &RoundDraws| noised_parts_into(&req.silos[j], at, &req.silo_cfgs[j], unit, ws, msg);
        let e = self.entry(q, t);
        let mut used_spare = false;
        if let Some(unit) = self.units[e].try_read().ok().filter(|_| self.drawn[e].load(Ordering::Acquire) == q + 1) {
            compute(&unit);
        } else if let Ok(mut unit) = self.units[e].try_write() {
            if self.drawn[e].load(Ordering::Acquire) != q + 1 {
                self.draw(q, t, &mut unit);
                self.drawn[e].store(q + 1, Ordering::Release);
            }
            compute(&unit);
        } else {
            self.draw(q, t, spare);
            compute(spare);
            used_spare = true;
        }
        self.publish(q, t, Who::Caller);
        used_spare
    }

    /// One step of the helper: a task of the open round if one is left, else the next unit ahead;
    /// false if there was nothing to do. `next_unit` counts the units in order (round
    /// `next_unit / tasks`, task `next_unit % tasks`).
    fn help_once(&self, next_unit: &mut u64) -> bool {
        let n = self.tasks() as u64;
        if n == 0 {
            return false; // no silo answers: nothing to run or draw
        }
        if let Some((q, t)) = self.try_claim() {
            self.helper_task(q, t);
            return true;
        }
        let finished = self.finished.0.load(Ordering::Acquire);
        *next_unit = (*next_unit).max(finished * n);
        let q = *next_unit / n;
        if q < self.req.n_rounds && q < finished + SHARED_AHEAD {
            self.helper_draw(q, (*next_unit % n) as usize, false);
            *next_unit += 1;
            return true;
        }
        false
    }
}

/// What the calling thread and the helper share beyond the call: the helper's way into the
/// [`Board`], which lives on the calling thread's stack.
///
/// The calling thread does not join the helper at the end of the call (a helper descheduled then
/// would hold it up for a time slice): it closes the gate and waits only while the helper is
/// inside, that is in the middle of one step of [`Board::help_once`]. The helper enters for each
/// step and never touches the board outside. Both sides store, then load the other's flag, in
/// sequentially consistent order (Dekker's handshake), so either the helper sees the gate closed
/// and stays out, or the calling thread sees it inside and waits.
struct Gate {
    open: AtomicBool,
    inside: AtomicBool,
    /// Set when the helper panicked (the calling thread then panics too).
    failed: AtomicBool,
}

/// The board's address, for the helper thread (see [`Gate`] for why it stays valid while used).
struct BoardPtr(*const Board<'static>);
// SAFETY: the board is Sync (atomics, locks and shared references; checked below), and the
// pointer is read only inside the gate.
unsafe impl Send for BoardPtr {}
const _: () = {
    fn board_is_sync<T: Sync>() {}
    let _ = board_is_sync::<Board<'static>>;
};

/// The helper thread's loop: a step inside the gate, then, with nothing to do, a spin, a yield of
/// the core or a short nap outside it, until the gate is closed.
fn helper_loop(gate: &Gate, board: &BoardPtr) {
    /// Leaves the gate however the step ends (also by a panic).
    struct Leave<'g>(&'g Gate);
    impl Drop for Leave<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                self.0.failed.store(true, Ordering::SeqCst);
            }
            self.0.inside.store(false, Ordering::SeqCst);
        }
    }
    let mut next_unit = 0u64;
    let mut idle = 0u32;
    loop {
        let worked = {
            gate.inside.store(true, Ordering::SeqCst);
            let _leave = Leave(gate);
            if !gate.open.load(Ordering::SeqCst) {
                return;
            }
            // SAFETY: the gate is open and we are inside, so the calling thread has not left
            // run_shared and the board is alive (it waits for `inside` to clear after closing).
            let board = unsafe { &*board.0 };
            board.help_once(&mut next_unit)
        };
        if worked {
            idle = 0;
            continue;
        }
        // Nothing to do: spin a little (the next round opens soon), then park until the calling
        // thread opens one. An idle helper that spun or yielded on would burn CPU time that, on
        // a busy machine, the scheduler takes from the process's share, the calling thread's.
        idle = idle.saturating_add(1);
        if idle < SPINS_BEFORE_YIELD {
            std::hint::spin_loop();
        } else {
            std::thread::park_timeout(PARK);
            idle = 0;
        }
    }
}

/// Runs the rounds of `req` for the silos `active` under
/// [`Schedule::Shared`](super::Schedule::Shared); `finish(round, θ, W, messages)` is the calling
/// thread's work after each round's tasks (summaries and the server step), as in the other
/// schedules. `stall` is zero but in tests: the helper then sleeps that long in the middle of
/// each of its tasks and draws, and the calling thread must do its work, with the same bits.
pub(super) fn run_shared(
    req: &RoundsRequest<'_>,
    active: &[usize],
    theta: &mut [f64],
    w: &mut [f64],
    mut finish: impl FnMut(u64, &mut [f64], &mut [f64], &[&BatchGradients]),
    stall: Duration,
) -> SharedStats {
    let (start, n_rounds) = (req.start, req.n_rounds);
    let tasks = active.len();
    assert!(tasks < 1 << 32, "too many silos for the shared schedule");
    let mut stats = SharedStats::default();
    if n_rounds == 0 {
        return stats; // no helper to start
    }
    // The ring holds the units of at most SHARED_AHEAD rounds (fewer when the call has fewer).
    let ring = SHARED_AHEAD.min(n_rounds) as usize * tasks;
    let board = Board {
        req,
        active,
        lens: (req.dims.theta_len(), req.dims.w_len(req.fairness)),
        claim: Padded(AtomicU64::new(0)),
        done: Padded(AtomicUsize::new(0)),
        results: (0..tasks).map(|_| AtomicU64::new(0)).collect(),
        finished: Padded(AtomicU64::new(0)),
        params: Mutex::new(Arc::new(Params { round: u64::MAX, theta: theta.to_vec(), w: w.to_vec() })),
        units: (0..ring).map(|_| RwLock::new(RoundDraws::default())).collect(),
        drawn: (0..ring).map(|_| AtomicU64::new(0)).collect(),
        helper_scratch: (0..tasks).map(|_| Mutex::new(StepScratch::default())).collect(),
        stall,
    };
    // The calling thread's own scratch per task, and a spare unit.
    let mut mine: Vec<StepScratch> = (0..tasks).map(|_| StepScratch::default()).collect();
    let mut spare = RoundDraws::default();
    let mut fastest = GRACE_MAX; // the calling thread's fastest task of the call
    let gate = Arc::new(Gate { open: AtomicBool::new(true), inside: AtomicBool::new(false), failed: AtomicBool::new(false) });
    let helper = {
        let (gate, ptr) = (Arc::clone(&gate), BoardPtr((&board as *const Board<'_>).cast()));
        std::thread::spawn(move || helper_loop(&gate, &ptr)).thread().clone()
    };
    // Closes the gate however the calling thread leaves (also by a panic), and waits while the
    // helper is inside: only then may the board go.
    struct Close<'g>(&'g Gate, std::thread::Thread);
    impl Drop for Close<'_> {
        fn drop(&mut self) {
            self.0.open.store(false, Ordering::SeqCst);
            self.1.unpark();
            let mut spins = 0u32;
            while self.0.inside.load(Ordering::SeqCst) {
                if spins < SPINS_BEFORE_YIELD {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
    {
        let close = Close(&gate, helper.clone());
        let board = &board;
        for q in 0..n_rounds {
            {
                let mut params = board.params.lock().unwrap();
                match Arc::get_mut(&mut params) {
                    Some(p) => {
                        p.theta.copy_from_slice(theta);
                        p.w.copy_from_slice(w);
                        p.round = q;
                    }
                    None => *params = Arc::new(Params { round: q, theta: theta.to_vec(), w: w.to_vec() }),
                }
            }
            board.done.0.store(0, Ordering::Release);
            board.claim.0.store((q + 1) << 32, Ordering::Release);
            helper.unpark();
            {
                let at = req.point(theta, w);
                let mut run = |t: usize, fastest: &mut Duration, stats: &mut SharedStats| {
                    let t0 = Instant::now();
                    stats.spare_draws += board.caller_task(at, q, t, &mut mine[t], &mut spare) as usize;
                    *fastest = (*fastest).min(t0.elapsed());
                };
                while let Some((_, t)) = board.try_claim() {
                    run(t, &mut fastest, &mut stats);
                }
                // Every task is taken: wait a little for the helper's, then take them over.
                let ready = || board.done.0.load(Ordering::Acquire) == tasks;
                let (since, grace) = (Instant::now(), grace(fastest));
                while !ready() && since.elapsed() < grace && !gate.failed.load(Ordering::SeqCst) {
                    std::hint::spin_loop();
                }
                for t in 0..tasks {
                    if !board.is_published(q, t) {
                        run(t, &mut fastest, &mut stats);
                        stats.retaken_tasks += 1;
                    }
                }
            }
            board.claim.0.store(0, Ordering::Release);
            {
                let helper_won: Vec<_> = (0..tasks)
                    .map(|t| {
                        let state = board.results[t].load(Ordering::Acquire);
                        debug_assert!(state >= published(q, Who::Caller));
                        (state == published(q, Who::Helper)).then(|| board.helper_scratch[t].lock().unwrap())
                    })
                    .collect();
                let messages: Vec<&BatchGradients> =
                    helper_won.iter().zip(&mine).map(|(h, m)| h.as_ref().map_or(&m.msg, |g| &g.msg)).collect();
                finish(start + q, theta, w, &messages);
            }
            board.finished.0.store(q + 1, Ordering::Release);
        }
        drop(close);
    }
    assert!(!gate.failed.load(Ordering::SeqCst), "the helper thread of the shared schedule panicked");
    stats
}
