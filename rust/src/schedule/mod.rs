//! Many rounds in one process: the silos' steps of each round ([`crate::round`]), then the
//! server's step ([`crate::server`]), for rounds `start .. start + n_rounds` ([`run_rounds`]).
//! How a round's silo steps are spread over threads is its [`Schedule`]; every schedule gives the
//! same bits, because each silo writes its own message and the server adds them in silo order.

mod shared;

use rayon::prelude::*;

use crate::psi::{BatchGradients, Dims, Fairness, Point, PsiInputs};
use crate::round::{silo_step_into, Silo, SiloConfig, SiloKeys, StepScratch};
use crate::sampling::Sampling;
use crate::server::{server_update, ServerConfig};

pub use shared::SHARED_AHEAD;

/// A run of rounds `start .. start + n_rounds`: the silos, what each does, and the server's step.
#[derive(Clone, Copy, Debug)]
pub struct RoundsRequest<'a> {
    pub silos: &'a [Silo],
    pub dims: Dims,
    pub fairness: Fairness,
    /// The ψ-term's `p_s^{-1/2}` table ([`PsiInputs::inv_sqrt_ps`]).
    pub inv_sqrt_ps: &'a [f64],
    /// Silo `j` runs with `silo_cfgs[j]` and `keys[j]`.
    pub silo_cfgs: &'a [SiloConfig],
    pub keys: &'a [SiloKeys],
    /// The silos' weights `ω` in the server's step (summing to 1); a silo of weight 0 (one that
    /// refused, e.g. out of budget) is not asked at all.
    pub weights: &'a [f64],
    pub server: ServerConfig,
    pub start: u64,
    pub n_rounds: u64,
    /// The round after which θ and W are kept in [`RoundsOutcome::snapshot`].
    pub snapshot_round: Option<u64>,
}

impl<'a> RoundsRequest<'a> {
    /// No round yet ([`RoundsRequest::rounds`] sets them) of `silos`: silo `j` with
    /// `silo_cfgs[j]`, `keys[j]` and weight `weights[j]`; `psi_tables` = (fairness, `p_s^{-1/2}`).
    pub fn new(
        silos: &'a [Silo],
        dims: Dims,
        psi_tables: (Fairness, &'a [f64]),
        silo_cfgs: &'a [SiloConfig],
        keys: &'a [SiloKeys],
        weights: &'a [f64],
        server: ServerConfig,
    ) -> Self {
        let (fairness, inv_sqrt_ps) = psi_tables;
        RoundsRequest { silos, dims, fairness, inv_sqrt_ps, silo_cfgs, keys, weights, server, start: 0, n_rounds: 0, snapshot_round: None }
    }

    /// The same request for rounds `start .. start + n_rounds`.
    pub fn rounds(self, start: u64, n_rounds: u64) -> Self {
        RoundsRequest { start, n_rounds, ..self }
    }

    /// The same request, keeping θ and W after round `round` (if any).
    pub fn snapshot(self, round: Option<u64>) -> Self {
        RoundsRequest { snapshot_round: round, ..self }
    }

    /// The silos that answer (weight > 0), in silo order.
    fn active(&self) -> Vec<usize> {
        (0..self.silos.len()).filter(|&j| self.weights[j] > 0.0).collect()
    }

    /// The point `(θ, W)` of a round, with the run's shapes and tables.
    fn point<'p>(&'p self, theta: &'p [f64], w: &'p [f64]) -> Point<'p> {
        Point { dims: self.dims, theta, psi: PsiInputs { fairness: self.fairness, w, inv_sqrt_ps: self.inv_sqrt_ps } }
    }
}

/// Per-round summaries of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundsOutcome {
    /// Weighted mean over silos of each round's batch loss.
    pub loss: Vec<f64>,
    /// Weighted mean over silos of each round's batch ψ.
    pub psi: Vec<f64>,
    /// Number of active per-record clippings, summed over silos, per round.
    pub clipped: Vec<usize>,
    /// θ and W after round `snapshot_round`, when it was inside the run.
    pub snapshot: Option<(Vec<f64>, Vec<f64>)>,
}


/// Runs the rounds of `req` in place on `(theta, w)`, under [`Schedule::Auto`].
pub fn run_rounds(req: &RoundsRequest<'_>, theta: &mut [f64], w: &mut [f64]) -> RoundsOutcome {
    run_rounds_scheduled(req, theta, w, Schedule::Auto)
}

/// How [`run_rounds_scheduled`] runs the silos of a round. Every schedule gives the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// [`Schedule::Parallel`] for rounds of at least [`PARALLEL_MIN_WORK`] row entries, else
    /// [`Schedule::Shared`] when the pool has more than one thread and there are several silos
    /// or several rounds, else [`Schedule::Sequential`]; [`Schedule::Sequential`] whenever the
    /// machine is oversubscribed at the start of the call ([`crate::threads::machine_busy`]).
    Auto,
    /// Every silo step on the calling thread, one after the other.
    Sequential,
    /// The silo steps of each round on the rayon pool (a fork-join per round).
    Parallel,
    /// The silo steps of each round shared between the calling thread and one helper thread,
    /// which draws the batches and noise of the coming rounds when it has no step to run
    /// (`schedule/shared.rs`). Neither thread hands work to the other: each takes what is left, so a
    /// descheduled helper slows a round down to the sequential schedule, no more.
    Shared,
}

/// Row entries a round touches (`Σ batch size × stored entries per row`) below which the silos of
/// a round do not run as a fork-join on the rayon pool, but on the calling thread and one helper
/// ([`Schedule::Shared`]). With a few small silo steps (Adult: 3 × 256 rows of 14 entries, ≈ 14k)
/// a per-round hand-off and any worker the operating system has descheduled cost more than the
/// second core saves (`docs/dev/performance-notebook.md`: 4 ms sequential vs 20 ms median on the pool under
/// load). Large rounds (many silos, dense rows) amortise it and run on the rayon pool.
pub const PARALLEL_MIN_WORK: f64 = 100_000.0;

/// Expected row entries a silo's step touches: batch size times mean stored entries per row.
pub fn step_work(silo: &Silo, cfg: &SiloConfig) -> f64 {
    let n = silo.len().max(1);
    let per_row = silo.x.entries_per_row();
    let m = match cfg.sampling {
        Sampling::WithoutReplacement { m } | Sampling::Shuffle { m } => m.min(n) as f64,
        Sampling::Poisson { q } => q * n as f64,
        Sampling::FullBatch => n as f64,
    };
    m * (per_row + 4.0)
}


/// The schedule [`Schedule::Auto`] stands for, given the answering silos `active`.
fn auto_schedule(req: &RoundsRequest<'_>, active: &[usize]) -> Schedule {
    let work: f64 = active.iter().map(|&j| step_work(&req.silos[j], &req.silo_cfgs[j])).sum();
    // One thread when the machine is oversubscribed (crate::threads): a fork-join or a helper
    // thread would wait for descheduled threads, and a second thread gains the process no CPU
    // time when the scheduler shares the cores between sessions (docs/dev/performance-notebook.md).
    let threads = crate::threads::threads_now();
    if active.len() > 1 && work >= PARALLEL_MIN_WORK && threads > 1 {
        Schedule::Parallel
    } else if (req.n_rounds > 1 || active.len() > 1) && threads > 1 && !active.is_empty() {
        Schedule::Shared
    } else {
        Schedule::Sequential
    }
}

/// [`run_rounds`] with the schedule forced. The results do not depend on the schedule.
pub fn run_rounds_scheduled(req: &RoundsRequest<'_>, theta: &mut [f64], w: &mut [f64], schedule: Schedule) -> RoundsOutcome {
    let mut out = RoundsOutcome::default();
    let active = req.active();
    let active_weights: Vec<f64> = active.iter().map(|&j| req.weights[j]).collect();
    let schedule = match schedule {
        Schedule::Auto => auto_schedule(req, &active),
        s => s,
    };
    // After the silo steps of a round: the summaries, the server step, the snapshot.
    let mut finish = |round: u64, theta: &mut [f64], w: &mut [f64], messages: &[&BatchGradients]| {
        out.loss.push(messages.iter().zip(&active_weights).map(|(m, om)| om * m.loss).sum());
        out.psi.push(messages.iter().zip(&active_weights).map(|(m, om)| om * m.psi).sum());
        out.clipped.push(messages.iter().map(|m| m.n_clipped).sum());
        server_update(theta, w, req.dims.k * req.dims.l, messages.iter().copied(), &active_weights, &req.server);
        if req.snapshot_round == Some(round) {
            out.snapshot = Some((theta.to_vec(), w.to_vec()));
        }
    };
    if schedule == Schedule::Shared {
        shared::run_shared(req, &active, theta, w, &mut finish);
        return out;
    }
    let mut scratch: Vec<StepScratch> = active.iter().map(|_| StepScratch::default()).collect();
    for round in req.start..req.start + req.n_rounds {
        {
            let at = req.point(theta, w);
            let step = |(&j, sc): (&usize, &mut StepScratch)| {
                silo_step_into(&req.silos[j], at, &req.silo_cfgs[j], &req.keys[j], j as u64, round, sc)
            };
            if schedule == Schedule::Parallel {
                active.par_iter().zip(scratch.par_iter_mut()).for_each(step);
            } else {
                active.iter().zip(scratch.iter_mut()).for_each(step);
            }
        }
        finish(round, theta, w, &scratch.iter().map(|sc| &sc.msg).collect::<Vec<_>>());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::noise::NoiseKey;
    use crate::round::silo_step;
    use crate::round::tests::{cfg, toy_silo, DIMS};

    #[test]
    fn run_rounds_schedules_agree_bit_for_bit_and_match_silo_steps() {
        let silos = vec![toy_silo(300, 3), toy_silo(200, 4), toy_silo(120, 5)];
        let cfgs = vec![cfg(0.3); 3];
        let server = ServerConfig { lam: 0.5, lr_theta: 0.5, lr_w: 0.5, w_radius: 5.0 };
        let inv = vec![(1.0f64 / 0.6).sqrt(), (1.0f64 / 0.4).sqrt()];
        let keys: Vec<SiloKeys> = (0..3).map(|j| SiloKeys::seeded(20 + j)).collect();
        let weights = [0.5, 0.0, 0.5]; // silo 1 refused: never asked
        let run = |par| {
            let (mut theta, mut w) = (vec![0.0; 3], vec![0.0; 4]);
            let req = RoundsRequest::new(&silos, DIMS, (Fairness::DemographicParity, &inv), &cfgs, &keys, &weights, server)
                .rounds(5, 30);
            let o = run_rounds_scheduled(&req, &mut theta, &mut w, par);
            (theta, w, o)
        };
        let seq = run(Schedule::Sequential);
        assert_eq!(seq, run(Schedule::Parallel));
        assert_eq!(seq, run(Schedule::Shared));
        assert_eq!(seq, run(Schedule::Auto));
        // The same as the party loop: one silo_step per active silo, then server_update.
        let (mut theta, mut w) = (vec![0.0; 3], vec![0.0; 4]);
        for round in 5..35 {
            let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &w, inv_sqrt_ps: &inv };
            let msgs: Vec<BatchGradients> =
                [0usize, 2].iter().map(|&j| silo_step(&silos[j], Point { dims: DIMS, theta: &theta, psi }, &cfgs[j], &keys[j], j as u64, round)).collect();
            server_update(&mut theta, &mut w, 4, &msgs, &[0.5, 0.5], &server);
        }
        assert_eq!((theta, w), (seq.0, seq.1));
    }

    #[test]
    fn shared_schedule_agrees_past_its_ring_and_with_one_silo() {
        // More rounds than the ring of drawn units holds, silos of different sizes and sampling
        // schemes, secret keys: the shared schedule gives the sequential bits.
        let silos = vec![toy_silo(300, 6), toy_silo(90, 7), toy_silo(500, 8), toy_silo(40, 9)];
        let mut cfgs = vec![cfg(0.3); 4];
        cfgs[1].sampling = Sampling::Poisson { q: 0.2 };
        cfgs[2].sampling = Sampling::Shuffle { m: 64 };
        let server = ServerConfig { lam: 0.5, lr_theta: 0.3, lr_w: 0.3, w_radius: 5.0 };
        let inv = vec![(1.0f64 / 0.6).sqrt(), (1.0f64 / 0.4).sqrt()];
        let keys: Vec<SiloKeys> =
            (0..4).map(|_| SiloKeys { batch: NoiseKey::from_entropy().unwrap(), noise: NoiseKey::from_entropy().unwrap() }).collect();
        let run = |silos: &[Silo], weights: &[f64], n_rounds: u64, schedule| {
            let (mut theta, mut w) = (vec![0.0; 3], vec![0.0; 4]);
            let (cfgs, keys) = (&cfgs[..silos.len()], &keys[..silos.len()]);
            let req = RoundsRequest::new(silos, DIMS, (Fairness::DemographicParity, &inv), cfgs, keys, weights, server)
                .rounds(7, n_rounds)
                .snapshot(Some(100));
            let o = run_rounds_scheduled(&req, &mut theta, &mut w, schedule);
            (theta, w, o)
        };
        let rounds = 2 * SHARED_AHEAD + 9;
        let weights = [0.4, 0.1, 0.5, 0.0];
        let seq = run(&silos, &weights, rounds, Schedule::Sequential);
        assert_eq!(seq.2.loss.len(), rounds as usize);
        assert!(seq.2.snapshot.is_some());
        for _ in 0..3 {
            assert_eq!(seq, run(&silos, &weights, rounds, Schedule::Shared));
        }
        // One silo (the helper only draws), one round, no round at all; no silo answering.
        for n_rounds in [0, 1, 40] {
            assert_eq!(run(&silos[..1], &[1.0], n_rounds, Schedule::Sequential), run(&silos[..1], &[1.0], n_rounds, Schedule::Shared));
        }
        let none = [0.0; 4];
        assert_eq!(run(&silos, &none, 5, Schedule::Sequential), run(&silos, &none, 5, Schedule::Shared));
    }

    #[test]
    fn run_rounds_learns_and_is_deterministic() {
        let silos = vec![toy_silo(300, 3), toy_silo(200, 4)];
        let cfgs = vec![cfg(0.01), cfg(0.01)];
        let server = ServerConfig { lam: 0.5, lr_theta: 0.5, lr_w: 0.5, w_radius: 5.0 };
        let inv = vec![(1.0f64 / 0.6).sqrt(), (1.0f64 / 0.4).sqrt()];
        let run = || {
            let mut theta = vec![0.0; 3];
            let mut w = vec![0.0; 4];
            let keys = [SiloKeys::seeded(11), SiloKeys::seeded(11)];
            let req = RoundsRequest::new(&silos, DIMS, (Fairness::DemographicParity, &inv), &cfgs, &keys, &[0.5, 0.5], server)
                .rounds(0, 200)
                .snapshot(Some(99));
            let o = run_rounds(&req, &mut theta, &mut w);
            (theta, w, o)
        };
        let (t1, w1, o1) = run();
        let (t2, w2, o2) = run();
        assert_eq!((t1.clone(), w1), (t2, w2));
        assert_eq!(o1, o2);
        assert_eq!(o1.loss.len(), 200);
        assert!(o1.snapshot.is_some());
        let early: f64 = o1.loss[..20].iter().sum::<f64>() / 20.0;
        let late: f64 = o1.loss[180..].iter().sum::<f64>() / 20.0;
        assert!(late < early - 0.05, "loss {early} -> {late}");
    }
}
