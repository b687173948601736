//! One SteFFLe round (Gupta et al. 2024, Algorithm 1): every silo computes and noises its message
//! ([`silo_step`]); the server averages the messages and takes a descent step in θ and a
//! projected ascent step in W ([`server_update`]). The in-process simulation ([`run_rounds`])
//! and a distributed deployment use these same two functions.

use rayon::prelude::*;

use crate::config::{check_finite_non_negative, is_positive, ConfigError};
use crate::features::Features;
use crate::noise::{add_gaussian, NoiseKey, Purpose};
use crate::psi::{batch_gradients, batch_gradients_into, BatchGradients, Code, Dims, Protect, PsiInputs, Workspace};
use crate::sampling::Sampling;

/// The data one silo holds: features (dense or CSR), labels and group indices.
#[derive(Clone, Debug)]
pub struct Silo {
    pub x: Features,
    pub y: Vec<Code>,
    pub s: Vec<Code>,
}

impl Silo {
    pub fn len(&self) -> usize {
        self.y.len()
    }
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }
}

/// What one silo does in a round: how it samples, what it protects, how much noise it adds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SiloConfig {
    pub sampling: Sampling,
    pub protect: Protect,
    /// Noise standard deviations of the (loss, ψ_θ, ψ_W) parts; the loss entry is used only in
    /// `Record` mode.
    pub sigma_loss: f64,
    pub sigma_theta: f64,
    pub sigma_w: f64,
    /// Whether the ψ parts are sent at all. With `λ = 0` they are useless, and a silo that does
    /// not send them releases nothing that depends on `s` (zero privacy cost in `Attribute` mode).
    pub send_psi: bool,
}

impl SiloConfig {
    /// A silo's configuration, checked: the noise stds must be finite and ≥ 0 (checked first),
    /// and `sampling` and `protect` valid as their own constructors require.
    pub fn new(
        sampling: Sampling,
        protect: Protect,
        sigma_loss: f64,
        sigma_theta: f64,
        sigma_w: f64,
        send_psi: bool,
    ) -> Result<Self, ConfigError> {
        let cfg = SiloConfig { sampling, protect, sigma_loss, sigma_theta, sigma_w, send_psi };
        cfg.validate()?;
        Ok(cfg)
    }

    /// The check [`SiloConfig::new`] makes first: each noise std finite and ≥ 0.
    pub fn check_noise_stds(sigma_loss: f64, sigma_theta: f64, sigma_w: f64) -> Result<(), ConfigError> {
        check_finite_non_negative(&[("sigma_loss", sigma_loss), ("sigma_theta", sigma_theta), ("sigma_w", sigma_w)])
    }

    /// Checks a configuration built as a struct literal as [`SiloConfig::new`] would.
    pub fn validate(&self) -> Result<(), ConfigError> {
        SiloConfig::check_noise_stds(self.sigma_loss, self.sigma_theta, self.sigma_w)?;
        self.sampling.validate()?;
        self.protect.validate()
    }
}

/// Server hyper-parameters of one round.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServerConfig {
    pub lam: f64,
    pub lr_theta: f64,
    pub lr_w: f64,
    /// Radius of the Frobenius ball each `W` block is projected on (`∞`: no projection).
    pub w_radius: f64,
}

impl ServerConfig {
    /// The server's update parameters, checked: `lam`, `lr_theta` and `lr_w` finite and ≥ 0,
    /// then `w_radius > 0` (`inf`: no projection).
    pub fn new(lam: f64, lr_theta: f64, lr_w: f64, w_radius: f64) -> Result<Self, ConfigError> {
        let cfg = ServerConfig { lam, lr_theta, lr_w, w_radius };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks a configuration built as a struct literal as [`ServerConfig::new`] would.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_finite_non_negative(&[("lam", self.lam), ("lr_theta", self.lr_theta), ("lr_w", self.lr_w)])?;
        if !is_positive(self.w_radius) {
            return Err(ConfigError::WRadius(self.w_radius));
        }
        Ok(())
    }
}

/// The keys of one silo's random streams in a fit.
///
/// `noise` keys the Gaussian noise (secret by default). `batch` keys the batch draw: in
/// attribute mode the batch is public anyway (the exact s-free parts reveal it), so it may come
/// from the user's seed; in record mode the hidden batch is part of the privacy argument
/// (amplification by subsampling), so `batch` must be as secret as `noise`.
#[derive(Clone, Debug, PartialEq)]
pub struct SiloKeys {
    pub batch: NoiseKey,
    pub noise: NoiseKey,
}

impl SiloKeys {
    /// Both streams keyed by one public seed (reproducible; no secrecy).
    pub fn seeded(seed: u64) -> Self {
        SiloKeys { batch: NoiseKey::Seeded(seed), noise: NoiseKey::Seeded(seed) }
    }
}

/// The batch of silo `silo_id` (with `n` records) in round `round`, sorted.
pub fn draw_batch(cfg: &SiloConfig, keys: &SiloKeys, silo_id: u64, round: u64, n: usize) -> Vec<usize> {
    let mut out = Vec::new();
    draw_batch_into(cfg, keys, silo_id, round, n, &mut out);
    out
}

/// [`draw_batch`] into a reused buffer. The batch stream is `(silo, round, Batch)`, or
/// `(silo, epoch, Batch)` for shuffled epochs (one permutation per epoch).
pub fn draw_batch_into(cfg: &SiloConfig, keys: &SiloKeys, silo_id: u64, round: u64, n: usize, out: &mut Vec<usize>) {
    let mut rng = keys.batch.stream(silo_id, cfg.sampling.stream_index(round, n), Purpose::Batch);
    cfg.sampling.draw_into(&mut rng, n, round, out);
}

/// Adds the round's Gaussian noise to the protected parts of `msg` (the loss gradient in
/// `Record` mode, then `h_θ`, then `h_W`, all from the stream `(silo, round, Noise)`), or, when
/// the ψ parts are not sent, zeroes them. The same as [`draw_noise_into`] then [`apply_noise`].
pub fn noise_message(msg: &mut BatchGradients, cfg: &SiloConfig, keys: &SiloKeys, silo_id: u64, round: u64) {
    let mut z = Vec::new();
    draw_noise_into(cfg, keys, silo_id, round, (msg.loss_grad.len(), msg.psi_w.len()), &mut z);
    apply_noise(msg, cfg, &z);
}

/// Lengths of the noised parts in the order they are drawn: (loss gradient, `h_θ`, `h_W`), zero
/// for a part that gets no noise (its std is 0, or it is not noised in this mode, or not sent).
fn noised_lengths(cfg: &SiloConfig, theta_len: usize, w_len: usize) -> [usize; 3] {
    let on = |sigma: f64, yes: bool, len: usize| if yes && sigma != 0.0 { len } else { 0 };
    [
        on(cfg.sigma_loss, matches!(cfg.protect, Protect::Record { .. }), theta_len),
        on(cfg.sigma_theta, cfg.send_psi, theta_len),
        on(cfg.sigma_w, cfg.send_psi, w_len),
    ]
}

/// The standard normal draws of a silo's round, in the order [`apply_noise`] uses them (a part
/// with std 0 draws nothing, as [`add_gaussian`] does). They depend on neither θ nor W, so they
/// can be drawn ahead of the round (the pipelined schedule of [`run_rounds_scheduled`]).
/// `lens` = (θ length, W length).
pub fn draw_noise_into(cfg: &SiloConfig, keys: &SiloKeys, silo_id: u64, round: u64, lens: (usize, usize), out: &mut Vec<f64>) {
    out.clear();
    let total: usize = noised_lengths(cfg, lens.0, lens.1).iter().sum();
    if total > 0 {
        out.resize(total, 0.0);
        // add_gaussian on zeros gives σ·z; with σ = 1 it writes the draws z themselves.
        let mut rng = keys.noise.stream(silo_id, round, Purpose::Noise);
        add_gaussian(&mut rng, out, 1.0);
    }
}

/// Adds `σ·z` to each noised part of `msg` from the draws `z` of [`draw_noise_into`] (the same
/// arithmetic as adding fresh draws), or zeroes the ψ parts when they are not sent.
pub fn apply_noise(msg: &mut BatchGradients, cfg: &SiloConfig, z: &[f64]) {
    let [n_loss, n_theta, n_w] = noised_lengths(cfg, msg.loss_grad.len(), msg.psi_w.len());
    debug_assert_eq!(z.len(), n_loss + n_theta + n_w);
    let (z_loss, rest) = z.split_at(n_loss);
    let (z_theta, z_w) = rest.split_at(n_theta);
    let add = |part: &mut [f64], z: &[f64], sigma: f64| part.iter_mut().zip(z).for_each(|(v, z)| *v += sigma * z);
    add(&mut msg.loss_grad, z_loss, cfg.sigma_loss);
    if cfg.send_psi {
        add(&mut msg.psi_theta, z_theta, cfg.sigma_theta);
        add(&mut msg.psi_w, z_w, cfg.sigma_w);
    } else {
        for part in [&mut msg.psi_theta_sfree, &mut msg.psi_theta, &mut msg.psi_w_sfree, &mut msg.psi_w] {
            part.iter_mut().for_each(|v| *v = 0.0);
        }
        msg.psi = 0.0;
    }
}

/// Exact gradient parts of one batch of a silo (no noise), divided by `denom`.
#[allow(clippy::too_many_arguments)]
pub fn silo_parts(
    silo: &Silo,
    dims: Dims,
    theta: &[f64],
    psi: PsiInputs<'_>,
    batch: &[usize],
    denom: f64,
    protect: Protect,
) -> BatchGradients {
    crate::with_rows!(&silo.x, rows => batch_gradients(rows, &silo.y, &silo.s, dims, theta, psi, batch, denom, protect))
}

/// A silo's message for round `round`: [`draw_batch`], the exact parts ([`silo_parts`]), then
/// [`noise_message`]. `loss`, `psi` and `n_clipped` of the result are silo-local diagnostics.
#[allow(clippy::too_many_arguments)]
pub fn silo_step(
    silo: &Silo,
    dims: Dims,
    theta: &[f64],
    psi: PsiInputs<'_>,
    cfg: &SiloConfig,
    keys: &SiloKeys,
    silo_id: u64,
    round: u64,
) -> BatchGradients {
    let mut scratch = StepScratch::default();
    silo_step_into(silo, dims, theta, psi, cfg, keys, silo_id, round, &mut scratch);
    scratch.msg
}

/// What a silo's step writes into, kept between rounds: the batch, the noise draws, the
/// kernel's scratch and the message (so a round allocates nothing once the sizes are known).
#[derive(Clone, Debug, Default)]
pub struct StepScratch {
    pub batch: Vec<usize>,
    pub noise: Vec<f64>,
    pub ws: Workspace,
    pub msg: BatchGradients,
}

/// [`silo_step`] into `scratch.msg`, with the same arithmetic.
#[allow(clippy::too_many_arguments)]
pub fn silo_step_into(
    silo: &Silo,
    dims: Dims,
    theta: &[f64],
    psi: PsiInputs<'_>,
    cfg: &SiloConfig,
    keys: &SiloKeys,
    silo_id: u64,
    round: u64,
    scratch: &mut StepScratch,
) {
    let StepScratch { batch, noise, ws, msg } = scratch;
    draw_round_into(cfg, keys, silo_id, round, silo.len(), (dims.theta_len(), dims.w_len(psi.fairness)), batch, noise);
    noised_parts_into(silo, dims, theta, psi, cfg, batch, noise, ws, msg);
}

/// The draws of a silo's round that depend on neither θ nor W: its batch and its noise
/// ([`draw_batch_into`], [`draw_noise_into`]). `lens` = (θ length, W length).
#[allow(clippy::too_many_arguments)]
pub fn draw_round_into(
    cfg: &SiloConfig,
    keys: &SiloKeys,
    silo_id: u64,
    round: u64,
    n: usize,
    lens: (usize, usize),
    batch: &mut Vec<usize>,
    noise: &mut Vec<f64>,
) {
    draw_batch_into(cfg, keys, silo_id, round, n, batch);
    draw_noise_into(cfg, keys, silo_id, round, lens, noise);
}

/// The rest of a silo's step once its round is drawn: the exact parts of `batch`, then the noise
/// `z` ([`apply_noise`]), into `msg`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn noised_parts_into(
    silo: &Silo,
    dims: Dims,
    theta: &[f64],
    psi: PsiInputs<'_>,
    cfg: &SiloConfig,
    batch: &[usize],
    z: &[f64],
    ws: &mut Workspace,
    msg: &mut BatchGradients,
) {
    let denom = cfg.sampling.denominator(silo.len());
    crate::with_rows!(&silo.x, rows => {
        batch_gradients_into(rows, &silo.y, &silo.s, dims, theta, psi, batch, denom, cfg.protect, ws, msg)
    });
    apply_noise(msg, cfg, z);
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

/// Rows above which [`predict_counts_strided`] runs the silos on the rayon pool.
const PREDICT_PARALLEL_ROWS: usize = 8192;

/// How many of the silos' sampled records each of the `l` classes is predicted for, all silos
/// together: silo `j` reads its rows `0, t, 2t, …` with `t = ⌈n_j / per_silo⌉` (at most
/// `per_silo` of them; the stride of `Silo.strided_X` in Python), where its data are held (no
/// gathered copy). The collapse check of a fit (`pfair.protocol.convergence`). With `thin > 1`
/// every `thin`-th of those rows only (stride `thin · t`): a subset of the `thin = 1` sample.
pub fn predict_counts_strided(silos: &[Silo], theta: &[f64], l: usize, per_silo: usize, thin: usize) -> Vec<u64> {
    let count = |silo: &Silo| {
        let mut counts = vec![0u64; l];
        let mut z = vec![0.0; l];
        let step = silo.len().div_ceil(per_silo.max(1)).max(1).saturating_mul(thin.max(1));
        crate::with_rows!(&silo.x, rows => {
            let ones = if l == 2 { crate::psi::count_class_one_sparse(rows, step, theta) } else { None };
            match ones {
                Some(ones) => (counts[0], counts[1]) = (silo.len().div_ceil(step) as u64 - ones, ones),
                None => {
                    for i in (0..silo.len()).step_by(step) {
                        counts[crate::psi::predict_class(rows, i, theta, l, &mut z)] += 1;
                    }
                }
            }
        });
        counts
    };
    let add = |mut a: Vec<u64>, b: Vec<u64>| {
        a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
        a
    };
    let rows: usize = silos.iter().map(|s| s.len().min(per_silo.max(1))).sum::<usize>() / thin.max(1);
    if rows < PREDICT_PARALLEL_ROWS {
        silos.iter().map(count).fold(vec![0; l], add)
    } else {
        silos.par_iter().map(count).reduce(|| vec![0; l], add)
    }
}

/// Projects each `k × l` block of `w` on the Frobenius ball of radius `radius`.
pub fn project_blocks(w: &mut [f64], block_len: usize, radius: f64) {
    if !radius.is_finite() {
        return;
    }
    for block in w.chunks_exact_mut(block_len) {
        let nrm = crate::psi::norm(block);
        if nrm > radius {
            let f = radius / nrm;
            block.iter_mut().for_each(|v| *v *= f);
        }
    }
}

/// Server step: `θ ← θ - η_θ Σ_j ω_j [g_j + λ(a_θ,j + h_θ,j)]` and
/// `W ← Π_D(W + λ η_W Σ_j ω_j [a_W,j + h_W,j])`, with silo weights `ω` summing to 1.
///
/// Each coordinate takes the messages' terms one by one in message order. With many messages
/// (at least [`SERVER_PARALLEL_TERMS`] terms of θ) the coordinates of θ are split between the
/// rayon pool's threads, each taking its coordinates' terms in the same order: the same bits.
pub fn server_update<'a>(
    theta: &mut [f64],
    w: &mut [f64],
    block_len: usize,
    messages: impl IntoIterator<Item = &'a BatchGradients>,
    weights: &[f64],
    cfg: &ServerConfig,
) {
    let messages: Vec<(&BatchGradients, f64)> = messages.into_iter().zip(weights.iter().copied()).collect();
    // θ coordinates `first ..` of `part`, every message in order.
    let theta_part = |first: usize, part: &mut [f64]| {
        for &(m, om) in &messages {
            let a = cfg.lr_theta * om;
            let (g, sa, h) = (&m.loss_grad[first..], &m.psi_theta_sfree[first..], &m.psi_theta[first..]);
            for (t, v) in part.iter_mut().enumerate() {
                *v -= a * (g[t] + cfg.lam * (sa[t] + h[t]));
            }
        }
    };
    let threads = rayon::current_num_threads();
    if messages.len() * theta.len() >= SERVER_PARALLEL_TERMS && threads > 1 && theta.len() > 1 {
        let chunk = theta.len().div_ceil(threads);
        theta.par_chunks_mut(chunk).enumerate().for_each(|(c, part)| theta_part(c * chunk, part));
    } else {
        theta_part(0, theta);
    }
    for &(m, om) in &messages {
        let b = cfg.lam * cfg.lr_w * om;
        if b != 0.0 {
            for t in 0..w.len() {
                w[t] += b * (m.psi_w_sfree[t] + m.psi_w[t]);
            }
        }
    }
    project_blocks(w, block_len, cfg.w_radius);
}

/// Terms of θ (messages × θ's length) from which [`server_update`] splits θ's coordinates
/// between threads (1,000 silos of a 101-coordinate θ: 101,000).
pub const SERVER_PARALLEL_TERMS: usize = 1 << 16;

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

/// Runs rounds `start .. start + n_rounds` in place on `(theta, w)`; silos work in parallel,
/// silo `j` with `silo_cfgs[j]` and `keys[j]`. Silos of weight 0 are skipped.
#[allow(clippy::too_many_arguments)]
pub fn run_rounds(
    silos: &[Silo],
    dims: Dims,
    theta: &mut [f64],
    w: &mut [f64],
    psi_tables: (crate::psi::Fairness, &[f64]),
    silo_cfgs: &[SiloConfig],
    keys: &[SiloKeys],
    weights: &[f64],
    server: &ServerConfig,
    start: u64,
    n_rounds: u64,
    snapshot_round: Option<u64>,
) -> RoundsOutcome {
    run_rounds_scheduled(
        silos, dims, theta, w, psi_tables, silo_cfgs, keys, weights, server, start, n_rounds, snapshot_round, Schedule::Auto,
    )
}

/// How [`run_rounds_scheduled`] runs the silos of a round. Every schedule gives the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// [`Schedule::Parallel`] for rounds of at least [`PARALLEL_MIN_WORK`] row entries, else
    /// [`Schedule::Shared`] when the pool has more than one thread and there are several silos
    /// or several rounds, else [`Schedule::Sequential`].
    Auto,
    /// Every silo step on the calling thread, one after the other.
    Sequential,
    /// The silo steps on the calling thread, while a second thread draws the batches and the
    /// noise of the coming rounds ([`draw_round_into`]: they depend on neither θ nor W). No
    /// hand-off per round: the draw thread runs ahead, up to [`PIPELINE_AHEAD`] rounds.
    Pipelined,
    /// The silo steps of each round on the rayon pool (a fork-join per round).
    Parallel,
    /// The silo steps of each round shared between the calling thread and one helper thread,
    /// which draws the batches and noise of the coming rounds when it has no step to run
    /// (`shared_schedule`). Neither thread hands work to the other: each takes what is left, so
    /// a descheduled helper slows a round down to the sequential schedule, no more.
    Shared,
}

/// How many rounds the draw thread of [`Schedule::Pipelined`] may run ahead (an Adult epoch has
/// 45 rounds: all of them are drawn while the first ones are computed).
pub const PIPELINE_AHEAD: usize = 64;

/// [`run_rounds`] with the schedule forced. The results do not depend on the schedule.
#[allow(clippy::too_many_arguments)]
pub fn run_rounds_scheduled(
    silos: &[Silo],
    dims: Dims,
    theta: &mut [f64],
    w: &mut [f64],
    psi_tables: (crate::psi::Fairness, &[f64]),
    silo_cfgs: &[SiloConfig],
    keys: &[SiloKeys],
    weights: &[f64],
    server: &ServerConfig,
    start: u64,
    n_rounds: u64,
    snapshot_round: Option<u64>,
    schedule: Schedule,
) -> RoundsOutcome {
    let (fairness, inv_sqrt_ps) = psi_tables;
    let lens = (dims.theta_len(), dims.w_len(fairness));
    let mut out = RoundsOutcome::default();
    // A silo with weight 0 (one that refused, e.g. out of budget) is not asked at all.
    let active: Vec<usize> = (0..silos.len()).filter(|&j| weights[j] > 0.0).collect();
    let active_weights: Vec<f64> = active.iter().map(|&j| weights[j]).collect();
    let mut scratch: Vec<StepScratch> = active.iter().map(|_| StepScratch::default()).collect();
    let schedule = match schedule {
        Schedule::Auto => {
            let work: f64 = active.iter().map(|&j| step_work(&silos[j], &silo_cfgs[j])).sum();
            let threads = rayon::current_num_threads();
            if active.len() > 1 && work >= PARALLEL_MIN_WORK && threads > 1 {
                Schedule::Parallel
            } else if (n_rounds > 1 || active.len() > 1) && threads > 1 && !active.is_empty() {
                Schedule::Shared
            } else {
                Schedule::Sequential
            }
        }
        s => s,
    };
    // After the silo steps of a round: the summaries, the server step, the snapshot.
    let mut finish = |round: u64, theta: &mut [f64], w: &mut [f64], messages: &[&BatchGradients]| {
        out.loss.push(messages.iter().zip(&active_weights).map(|(m, om)| om * m.loss).sum());
        out.psi.push(messages.iter().zip(&active_weights).map(|(m, om)| om * m.psi).sum());
        out.clipped.push(messages.iter().map(|m| m.n_clipped).sum());
        server_update(theta, w, dims.k * dims.l, messages.iter().copied(), &active_weights, server);
        if snapshot_round == Some(round) {
            out.snapshot = Some((theta.to_vec(), w.to_vec()));
        }
    };
    if schedule == Schedule::Shared {
        crate::shared_schedule::run_shared(
            silos, dims, theta, w, psi_tables, silo_cfgs, keys, &active, start, n_rounds, &mut finish,
        );
        return out;
    }
    if schedule == Schedule::Pipelined {
        // Drawn rounds go to the calling thread through a bounded channel; their buffers come back
        // through another one, so a round allocates nothing once the first ones are recycled.
        type Draws = Vec<(Vec<usize>, Vec<f64>)>;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Draws>(PIPELINE_AHEAD);
        let (back_tx, back_rx) = std::sync::mpsc::channel::<Draws>();
        let active = &active;
        std::thread::scope(|scope| {
            scope.spawn(move || {
                for round in start..start + n_rounds {
                    let mut draws = back_rx.try_recv().unwrap_or_else(|_| vec![Default::default(); active.len()]);
                    for ((batch, noise), &j) in draws.iter_mut().zip(active) {
                        draw_round_into(&silo_cfgs[j], &keys[j], j as u64, round, silos[j].len(), lens, batch, noise);
                    }
                    if tx.send(draws).is_err() {
                        return; // the calling thread stopped
                    }
                }
            });
            for round in start..start + n_rounds {
                let draws = rx.recv().expect("the draw thread of the pipelined schedule stopped");
                {
                    let psi = PsiInputs { fairness, w, inv_sqrt_ps };
                    for (((batch, z), &j), sc) in draws.iter().zip(active).zip(scratch.iter_mut()) {
                        noised_parts_into(&silos[j], dims, theta, psi, &silo_cfgs[j], batch, z, &mut sc.ws, &mut sc.msg);
                    }
                }
                let _ = back_tx.send(draws);
                finish(round, theta, w, &scratch.iter().map(|sc| &sc.msg).collect::<Vec<_>>());
            }
        });
        return out;
    }
    for round in start..start + n_rounds {
        {
            let theta_ro: &[f64] = theta;
            let psi = PsiInputs { fairness, w, inv_sqrt_ps };
            let step = |(&j, sc): (&usize, &mut StepScratch)| {
                silo_step_into(&silos[j], dims, theta_ro, psi, &silo_cfgs[j], &keys[j], j as u64, round, sc)
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
pub(crate) mod tests {
    use super::*;
    use crate::psi::{norm, Fairness};

    /// A toy silo for tests: two features, the first shifted by the group, labels from both.
    pub(crate) fn toy_data(n: usize, seed: u64) -> (Vec<f64>, Vec<Code>, Vec<Code>) {
        let mut st = seed;
        let mut next = || {
            st = st.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (st >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut x = Vec::new();
        let mut y = Vec::new();
        let mut s = Vec::new();
        for _ in 0..n {
            let si = (next() < 0.4) as Code;
            let x0 = next() * 2.0 - 1.0 + si as f64;
            let x1 = next() * 2.0 - 1.0;
            x.extend([x0, x1]);
            y.push((x0 + 0.3 * x1 + 0.2 * (next() - 0.5) > 0.4) as Code);
            s.push(si);
        }
        (x, y, s)
    }

    fn toy_silo(n: usize, seed: u64) -> Silo {
        let (x, y, s) = toy_data(n, seed);
        Silo { x: Features::auto(x, 2), y, s }
    }

    fn cfg(sigma: f64) -> SiloConfig {
        SiloConfig {
            sampling: Sampling::WithoutReplacement { m: 32 },
            protect: Protect::Attribute { clip_theta: 1.0 },
            sigma_loss: 0.0,
            sigma_theta: sigma,
            sigma_w: sigma,
            send_psi: true,
        }
    }

    const DIMS: Dims = Dims { d: 2, k: 2, l: 2 };

    #[test]
    fn silo_config_new_accepts_good_values() {
        let c = SiloConfig::new(Sampling::WithoutReplacement { m: 32 }, Protect::Attribute { clip_theta: 1.0 }, 0.0, 0.5, 0.5, true);
        assert_eq!(c, Ok(cfg(0.5)));
        let rec = Protect::Record { clip_loss: f64::INFINITY, clip_theta: 1.0, clip_w: 2.0 };
        assert!(SiloConfig::new(Sampling::Poisson { q: 1.0 }, rec, 3.0, 0.0, 0.0, false).is_ok());
        assert!(SiloConfig::new(Sampling::FullBatch, rec, 0.0, 0.0, 0.0, true).is_ok());
        assert_eq!(cfg(0.1).validate(), Ok(()));
    }

    #[test]
    fn silo_config_new_rejects_each_bad_value_with_the_binding_message() {
        let attr = Protect::Attribute { clip_theta: 1.0 };
        let wr = Sampling::WithoutReplacement { m: 4 };
        let msg = |r: Result<SiloConfig, ConfigError>| r.unwrap_err().to_string();
        assert_eq!(msg(SiloConfig::new(wr, attr, -1.0, 0.0, 0.0, true)), "sigma_loss must be finite and >= 0, got -1");
        assert_eq!(msg(SiloConfig::new(wr, attr, 0.0, f64::NAN, 0.0, true)), "sigma_theta must be finite and >= 0, got NaN");
        assert_eq!(msg(SiloConfig::new(wr, attr, 0.0, 0.0, f64::INFINITY, true)), "sigma_w must be finite and >= 0, got inf");
        assert_eq!(SiloConfig::check_noise_stds(0.0, 0.0, -2.0).unwrap_err().to_string(), "sigma_w must be finite and >= 0, got -2");
        // The stds come first, then the sampling, then the protection.
        let bad_q = Sampling::Poisson { q: 0.0 };
        let bad_clip = Protect::Attribute { clip_theta: 0.0 };
        assert_eq!(msg(SiloConfig::new(bad_q, bad_clip, -1.0, 0.0, 0.0, true)), "sigma_loss must be finite and >= 0, got -1");
        assert_eq!(msg(SiloConfig::new(bad_q, bad_clip, 0.0, 0.0, 0.0, true)), "sample_rate must be in (0, 1], got 0");
        assert_eq!(msg(SiloConfig::new(Sampling::WithoutReplacement { m: 0 }, attr, 0.0, 0.0, 0.0, true)), "batch_size must be >= 1");
        assert_eq!(
            msg(SiloConfig::new(wr, bad_clip, 0.0, 0.0, 0.0, true)),
            "clip_theta must be > 0 (use inf for no clipping), got 0"
        );
    }

    #[test]
    fn server_config_new_accepts_good_values_and_rejects_each_bad_one() {
        assert_eq!(
            ServerConfig::new(0.0, 0.5, 0.0, f64::INFINITY),
            Ok(ServerConfig { lam: 0.0, lr_theta: 0.5, lr_w: 0.0, w_radius: f64::INFINITY })
        );
        assert!(ServerConfig::new(2.0, 0.1, 0.1, 1e-3).is_ok());
        let msg = |r: Result<ServerConfig, ConfigError>| r.unwrap_err().to_string();
        assert_eq!(msg(ServerConfig::new(-1.0, 0.1, 0.1, 1.0)), "lam must be finite and >= 0, got -1");
        assert_eq!(msg(ServerConfig::new(f64::INFINITY, 0.1, 0.1, 1.0)), "lam must be finite and >= 0, got inf");
        assert_eq!(msg(ServerConfig::new(1.0, f64::NAN, 0.1, 1.0)), "lr_theta must be finite and >= 0, got NaN");
        assert_eq!(msg(ServerConfig::new(1.0, 0.1, -0.5, 1.0)), "lr_w must be finite and >= 0, got -0.5");
        for r in [0.0, -1.0, f64::NAN] {
            assert_eq!(msg(ServerConfig::new(1.0, 0.1, 0.1, r)), "w_radius must be > 0 (inf for no projection)");
        }
        // The rates come before the radius.
        assert_eq!(msg(ServerConfig::new(1.0, 0.1, -1.0, 0.0)), "lr_w must be finite and >= 0, got -1");
    }

    #[test]
    fn silo_step_is_reproducible_and_noise_depends_on_round() {
        let silo = toy_silo(100, 1);
        let theta = vec![0.1, -0.2, 0.05];
        let w = vec![0.3, -0.1, 0.2, 0.4];
        let inv = vec![1.5, 1.2];
        let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &w, inv_sqrt_ps: &inv };
        let k = SiloKeys::seeded(7);
        let a = silo_step(&silo, DIMS, &theta, psi, &cfg(0.5), &k, 0, 3);
        let b = silo_step(&silo, DIMS, &theta, psi, &cfg(0.5), &k, 0, 3);
        let c = silo_step(&silo, DIMS, &theta, psi, &cfg(0.5), &k, 0, 4);
        let d = silo_step(&silo, DIMS, &theta, psi, &cfg(0.5), &k, 1, 3);
        assert_eq!(a, b);
        assert_ne!(a.psi_w, c.psi_w);
        assert_ne!(a.psi_w, d.psi_w);
        // Noise only on the s-dependent parts: the exact parts agree with a noiseless step.
        let quiet = silo_step(&silo, DIMS, &theta, psi, &cfg(0.0), &k, 0, 3);
        assert_eq!(a.loss_grad, quiet.loss_grad);
        assert_eq!(a.psi_theta_sfree, quiet.psi_theta_sfree);
        assert_eq!(a.psi_w_sfree, quiet.psi_w_sfree);
        assert_ne!(a.psi_theta, quiet.psi_theta);
    }

    #[test]
    fn record_mode_noises_the_loss_gradient() {
        let silo = toy_silo(64, 2);
        let theta = vec![0.0; 3];
        let w = vec![0.1; 4];
        let inv = vec![1.5, 1.2];
        let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &w, inv_sqrt_ps: &inv };
        let mut c = cfg(0.0);
        c.protect = Protect::Record { clip_loss: 1.0, clip_theta: 1.0, clip_w: 1.0 };
        let k = SiloKeys::seeded(1);
        let quiet = silo_step(&silo, DIMS, &theta, psi, &c, &k, 0, 0);
        c.sigma_loss = 1.0;
        let noisy = silo_step(&silo, DIMS, &theta, psi, &c, &k, 0, 0);
        assert_ne!(quiet.loss_grad, noisy.loss_grad);
    }

    #[test]
    fn silo_without_psi_sends_nothing_that_depends_on_s() {
        let silo = toy_silo(64, 5);
        let mut flipped = silo.clone();
        flipped.s.iter_mut().for_each(|v| *v = 1 - *v);
        let theta = vec![0.2, -0.1, 0.0];
        let w = vec![0.5, -0.5, 0.1, 0.3];
        let inv = vec![1.5, 1.2];
        let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &w, inv_sqrt_ps: &inv };
        let mut c = cfg(1.0);
        c.send_psi = false;
        let k = SiloKeys::seeded(3);
        let mut a = silo_step(&silo, DIMS, &theta, psi, &c, &k, 0, 0);
        let mut b = silo_step(&flipped, DIMS, &theta, psi, &c, &k, 0, 0);
        // `n_clipped` is a silo-local diagnostic, never part of what is sent.
        (a.n_clipped, b.n_clipped) = (0, 0);
        assert_eq!(a, b);
        assert!(a.psi_w.iter().chain(&a.psi_theta).all(|v| *v == 0.0));
    }

    #[test]
    fn secret_keys_give_fresh_noise_and_keep_public_batches() {
        let silo = toy_silo(100, 1);
        let theta = vec![0.1, -0.2, 0.05];
        let w = vec![0.3, -0.1, 0.2, 0.4];
        let inv = vec![1.5, 1.2];
        let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &w, inv_sqrt_ps: &inv };
        let secret = || SiloKeys { batch: NoiseKey::Seeded(7), noise: NoiseKey::from_entropy().unwrap() };
        let (k1, k2) = (secret(), secret());
        let a = silo_step(&silo, DIMS, &theta, psi, &cfg(0.5), &k1, 0, 3);
        let b = silo_step(&silo, DIMS, &theta, psi, &cfg(0.5), &k2, 0, 3);
        // Same public batch (the exact parts agree) but independent noise.
        assert_eq!(a.loss_grad, b.loss_grad);
        assert_ne!(a.psi_theta, b.psi_theta);
        // The seeded key of the same seed reproduces the seeded stream exactly.
        let s1 = silo_step(&silo, DIMS, &theta, psi, &cfg(0.5), &SiloKeys::seeded(7), 0, 3);
        assert_ne!(s1.psi_w, a.psi_w);
    }

    #[test]
    fn silo_step_is_draw_parts_noise() {
        let silo = toy_silo(80, 4);
        let theta = vec![0.3, 0.1, -0.2];
        let w = vec![0.3, -0.1, 0.2, 0.4];
        let inv = vec![1.5, 1.2];
        let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &w, inv_sqrt_ps: &inv };
        let k = SiloKeys { batch: NoiseKey::from_entropy().unwrap(), noise: NoiseKey::from_entropy().unwrap() };
        let c = cfg(0.7);
        let whole = silo_step(&silo, DIMS, &theta, psi, &c, &k, 2, 9);
        let batch = draw_batch(&c, &k, 2, 9, silo.len());
        let mut pieces = silo_parts(&silo, DIMS, &theta, psi, &batch, c.sampling.denominator(silo.len()), c.protect);
        noise_message(&mut pieces, &c, &k, 2, 9);
        assert_eq!(whole, pieces);
    }

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
            let o = run_rounds_scheduled(
                &silos, DIMS, &mut theta, &mut w, (Fairness::DemographicParity, &inv), &cfgs, &keys, &weights, &server,
                5, 30, None, par,
            );
            (theta, w, o)
        };
        let seq = run(Schedule::Sequential);
        assert_eq!(seq, run(Schedule::Parallel));
        assert_eq!(seq, run(Schedule::Pipelined));
        assert_eq!(seq, run(Schedule::Shared));
        assert_eq!(seq, run(Schedule::Auto));
        // The same as the party loop: one silo_step per active silo, then server_update.
        let (mut theta, mut w) = (vec![0.0; 3], vec![0.0; 4]);
        for round in 5..35 {
            let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &w, inv_sqrt_ps: &inv };
            let msgs: Vec<BatchGradients> =
                [0usize, 2].iter().map(|&j| silo_step(&silos[j], DIMS, &theta, psi, &cfgs[j], &keys[j], j as u64, round)).collect();
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
            let o = run_rounds_scheduled(
                silos, DIMS, &mut theta, &mut w, (Fairness::DemographicParity, &inv), &cfgs[..silos.len()], &keys[..silos.len()],
                weights, &server, 7, n_rounds, Some(100), schedule,
            );
            (theta, w, o)
        };
        let rounds = 2 * crate::shared_schedule::SHARED_AHEAD + 9;
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
    fn strided_prediction_counts_match_predict_counts_of_the_strided_rows() {
        use crate::features::{RowMap, SharedMatrix, SharedRows};
        use std::sync::Arc;
        // A dense silo, a CSR one (mostly zeros) and a float32 shared one; strides 1, 2 and 3.
        let (x, y, s) = toy_data(700, 12);
        let mut sparse_x = x.clone();
        sparse_x.iter_mut().step_by(3).for_each(|v| *v = 0.0);
        let rows: Vec<usize> = (0..700).rev().collect();
        let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let shared = Features::Shared(SharedRows { matrix: Arc::new(SharedMatrix::from_vec_f32(x32.clone(), 2)), rows: RowMap::from_rows(&rows) });
        let silos = vec![
            Silo { x: Features::Dense { x: x[..400].to_vec(), d: 2 }, y: y[..200].to_vec(), s: s[..200].to_vec() },
            Silo { x: Features::Sparse(crate::features::Csr::from_dense(&sparse_x, 2)), y: y.clone(), s: s.clone() },
            Silo { x: shared, y: y.clone(), s: s.clone() },
        ];
        assert!(matches!(silos[1].x, Features::Sparse(_)));
        for (l, theta) in [(2, vec![1.5, -0.7, -0.4]), (3, vec![1.0, -2.0, 0.5, 0.3, -0.2, 0.1])] {
            let got = predict_counts_strided(&silos, &theta, l, 300, 1);
            // The same rows gathered densely (float32 ones rounded), through predict_counts.
            let mut want = crate::psi::predict_counts(&x[..400], 2, &theta, l); // 200 rows, stride 1
            let picked = |src: &[f64], step: usize, order: &dyn Fn(usize) -> usize| -> Vec<f64> {
                (0..700).step_by(step).flat_map(|i| src[2 * order(i)..2 * order(i) + 2].to_vec()).collect()
            };
            let x32_64: Vec<f64> = x32.iter().map(|&v| v as f64).collect();
            for part in [picked(&sparse_x, 3, &|i| i), picked(&x32_64, 3, &|i| 699 - i)] {
                want.iter_mut().zip(crate::psi::predict_counts(&part, 2, &theta, l)).for_each(|(a, b)| *a += b);
            }
            assert_eq!(got, want, "l = {l}");
            assert_eq!(got.iter().sum::<u64>(), 200 + 234 + 234);
            assert!(got.iter().all(|&c| c > 0), "{got:?}");
            // thin = 2: every second of those rows, i.e. strides 2, 6 and 6.
            let thinned = predict_counts_strided(&silos, &theta, l, 300, 2);
            let first: Vec<f64> = (0..200).step_by(2).flat_map(|i| x[2 * i..2 * i + 2].to_vec()).collect();
            let mut want2 = crate::psi::predict_counts(&first, 2, &theta, l);
            for part in [picked(&sparse_x, 6, &|i| i), picked(&x32_64, 6, &|i| 699 - i)] {
                want2.iter_mut().zip(crate::psi::predict_counts(&part, 2, &theta, l)).for_each(|(a, b)| *a += b);
            }
            assert_eq!(thinned, want2, "l = {l}");
            assert_eq!(thinned.iter().sum::<u64>(), 100 + 117 + 117);
            // Many rows: the parallel path gives the same counts.
            let many: Vec<Silo> = (0..12).map(|_| silos[1].clone()).collect();
            let one = predict_counts_strided(&many[..1], &theta, l, 700, 1);
            assert_eq!(predict_counts_strided(&many, &theta, l, 700, 1), one.iter().map(|c| 12 * c).collect::<Vec<_>>());
        }
    }

    #[test]
    fn shared_matrix_silos_match_owned_silos() {
        use crate::features::{RowMap, SharedMatrix, SharedRows};
        use std::sync::Arc;
        let (x, y, s) = toy_data(90, 8);
        let theta = vec![0.2, -0.3, 0.1];
        let w = vec![0.3, -0.1, 0.2, 0.4];
        let inv = vec![1.5, 1.2];
        let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &w, inv_sqrt_ps: &inv };
        let k = SiloKeys::seeded(4);
        let rows: Vec<usize> = (0..90).rev().step_by(2).collect(); // a list, not a range
        let pick = |v: &[Code]| rows.iter().map(|&r| v[r]).collect::<Vec<Code>>();
        let owned = Silo {
            x: Features::Dense { x: rows.iter().flat_map(|&r| x[2 * r..2 * r + 2].to_vec()).collect(), d: 2 },
            y: pick(&y),
            s: pick(&s),
        };
        let matrix = Arc::new(SharedMatrix::from_vec_f64(x.clone(), 2));
        let shared = Silo { x: Features::Shared(SharedRows { matrix, rows: RowMap::from_rows(&rows) }), y: pick(&y), s: pick(&s) };
        let a = silo_step(&owned, DIMS, &theta, psi, &cfg(0.4), &k, 1, 2);
        assert_eq!(a, silo_step(&shared, DIMS, &theta, psi, &cfg(0.4), &k, 1, 2));
        // float32 storage: the same as float64 features rounded to float32.
        let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let rounded = Silo {
            x: Features::Dense { x: rows.iter().flat_map(|&r| x32[2 * r..2 * r + 2].iter().map(|&v| v as f64)).collect(), d: 2 },
            ..owned.clone()
        };
        let m32 = Arc::new(SharedMatrix::from_vec_f32(x32, 2));
        let shared32 = Silo { x: Features::Shared(SharedRows { matrix: m32, rows: RowMap::from_rows(&rows) }), ..owned.clone() };
        let b = silo_step(&rounded, DIMS, &theta, psi, &cfg(0.4), &k, 1, 2);
        assert_eq!(b, silo_step(&shared32, DIMS, &theta, psi, &cfg(0.4), &k, 1, 2));
        assert_ne!(a.loss_grad, b.loss_grad);
    }

    #[test]
    fn shuffled_rounds_use_every_record_once_per_epoch() {
        let c = SiloConfig { sampling: Sampling::Shuffle { m: 32 }, ..cfg(0.0) };
        let k = SiloKeys { batch: NoiseKey::from_entropy().unwrap(), noise: NoiseKey::Seeded(0) };
        let n = 100; // 4 rounds per epoch, the last with 4 records
        let mut buf = Vec::new();
        for epoch in 0..2u64 {
            let mut seen = vec![0; n];
            for t in epoch * 4..epoch * 4 + 4 {
                draw_batch_into(&c, &k, 3, t, n, &mut buf);
                assert_eq!(buf, draw_batch(&c, &k, 3, t, n));
                buf.iter().for_each(|&i| seen[i] += 1);
            }
            assert!(seen.iter().all(|&v| v == 1));
        }
        assert_ne!(draw_batch(&c, &k, 3, 0, n), draw_batch(&c, &k, 3, 4, n));
    }

    #[test]
    fn project_blocks_clips_each_block() {
        let mut w = vec![3.0, 4.0, 0.3, 0.4];
        project_blocks(&mut w, 2, 1.0);
        assert!((norm(&w[..2]) - 1.0).abs() < 1e-12);
        assert_eq!(&w[2..], &[0.3, 0.4]);
        project_blocks(&mut w, 2, f64::INFINITY);
        assert!((norm(&w[..2]) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn server_update_with_coordinates_split_between_threads_has_the_sequential_bits() {
        let mut st = 3u64;
        let mut next = || {
            st = st.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (st >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        let (n, t_len, w_len) = (700, 101, 8);
        let msgs: Vec<BatchGradients> = (0..n)
            .map(|_| BatchGradients {
                loss_grad: (0..t_len).map(|_| next()).collect(),
                psi_theta_sfree: (0..t_len).map(|_| next()).collect(),
                psi_theta: (0..t_len).map(|_| next()).collect(),
                psi_w_sfree: (0..w_len).map(|_| next()).collect(),
                psi_w: (0..w_len).map(|_| next()).collect(),
                ..Default::default()
            })
            .collect();
        let weights: Vec<f64> = (0..n).map(|_| next() + 0.5).collect();
        assert!(n * t_len >= SERVER_PARALLEL_TERMS);
        let cfg = ServerConfig { lam: 1.3, lr_theta: 0.2, lr_w: 0.7, w_radius: 0.5 };
        let (theta0, w0): (Vec<f64>, Vec<f64>) = ((0..t_len).map(|_| next()).collect(), (0..w_len).map(|_| next()).collect());
        let (mut theta, mut w) = (theta0.clone(), w0.clone());
        server_update(&mut theta, &mut w, 4, &msgs, &weights, &cfg);
        // The formula, one message after the other over all coordinates.
        let (mut want_t, mut want_w) = (theta0, w0);
        for (m, &om) in msgs.iter().zip(&weights) {
            for t in 0..t_len {
                want_t[t] -= cfg.lr_theta * om * (m.loss_grad[t] + cfg.lam * (m.psi_theta_sfree[t] + m.psi_theta[t]));
            }
            for t in 0..w_len {
                want_w[t] += cfg.lam * cfg.lr_w * om * (m.psi_w_sfree[t] + m.psi_w[t]);
            }
        }
        project_blocks(&mut want_w, 4, cfg.w_radius);
        assert_eq!(theta, want_t);
        assert_eq!(w, want_w);
        // On a one-thread pool the coordinates are not split: the same bits again.
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let (mut theta1, mut w1) = (want_t.clone(), want_w.clone());
        let (mut theta2, mut w2) = (want_t.clone(), want_w.clone());
        server_update(&mut theta1, &mut w1, 4, &msgs, &weights, &cfg);
        pool.install(|| server_update(&mut theta2, &mut w2, 4, &msgs, &weights, &cfg));
        assert_eq!((theta1, w1), (theta2, w2));
    }

    #[test]
    fn server_update_follows_the_formula() {
        let mut theta = vec![1.0, 1.0];
        let mut w = vec![0.0, 0.0];
        let m = BatchGradients {
            loss_grad: vec![1.0, 2.0],
            psi_theta_sfree: vec![0.5, 0.0],
            psi_theta: vec![0.0, 1.0],
            psi_w_sfree: vec![1.0, 0.0],
            psi_w: vec![0.0, 2.0],
            ..Default::default()
        };
        let cfg = ServerConfig { lam: 2.0, lr_theta: 0.1, lr_w: 0.5, w_radius: f64::INFINITY };
        server_update(&mut theta, &mut w, 2, &[m.clone(), m], &[0.5, 0.5], &cfg);
        assert!((theta[0] - (1.0 - 0.1 * (1.0 + 2.0 * 0.5))).abs() < 1e-12);
        assert!((theta[1] - (1.0 - 0.1 * (2.0 + 2.0 * 1.0))).abs() < 1e-12);
        assert_eq!(w, vec![1.0, 2.0]);
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
            let o = run_rounds(
                &silos, DIMS, &mut theta, &mut w, (Fairness::DemographicParity, &inv), &cfgs,
                &[SiloKeys::seeded(11), SiloKeys::seeded(11)], &[0.5, 0.5], &server, 0, 200, Some(99),
            );
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
