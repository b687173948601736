//! One SteFFLe round (Gupta et al. 2024, Algorithm 1), the silo's side: every silo draws its
//! batch, computes the exact gradient parts and noises its message ([`silo_step`]). The server's
//! side is [`crate::server`]; the in-process simulation of many rounds is [`crate::schedule`].
//! A distributed deployment uses these same functions.

use rayon::prelude::*;

use crate::config::{check_finite_non_negative, ConfigError};
use crate::features::Features;
use crate::noise::{add_gaussian, NoiseKey, Purpose};
use crate::psi::{batch_gradients, batch_gradients_adaptive_into, batch_gradients_into, BatchGradients, Code, Point, Protect, Records, Workspace};
use crate::sampling::Sampling;
use crate::subspace::Subspace;

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
#[derive(Clone, Debug, PartialEq)]
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
    /// A public subspace `h_θ` is projected on after its noise (attribute mode only; None: no
    /// projection). See [`crate::subspace`].
    pub subspace: Option<Subspace>,
    /// The adaptive clip norm (attribute mode only; None: the fixed `clip_theta` of `protect`):
    /// each round clips the `b_i` to the `q`-quantile `C_t` of its batch's s-free scales `S_i`
    /// ([`crate::psi::clip_scale`]) and scales `sigma_theta`, then a std per unit of clip norm, by
    /// `C_t`. Same noise multiplier, same accounting (`docs/privacy.md`, "An adaptive clip norm").
    pub clip_quantile: Option<f64>,
    /// Row scales of `h_W`'s noise (attribute mode only; None: the same `sigma_w` on every
    /// coordinate): row `(b, r)` of `h_W` (its `l` coordinates) takes noise of std
    /// `sigma_w · w_row_scale[b·k + r]`, with `w_row_scale` the released `p(r | b)^{-1/2}` and
    /// `sigma_w` a std per unit of it ([`crate::sensitivity`], `docs/privacy.md`, "Noise on h_W row
    /// by row").
    pub w_row_scale: Option<Vec<f64>>,
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
        let cfg = SiloConfig { sampling, protect, sigma_loss, sigma_theta, sigma_w, send_psi, subspace: None, clip_quantile: None, w_row_scale: None };
        cfg.validate()?;
        Ok(cfg)
    }

    /// This configuration with `h_W`'s noise scaled row by row by `scale` (`blocks × k` values,
    /// each finite and > 0: the released `p(r | b)^{-1/2}`); refused in record mode, where the
    /// `W` part is clipped as a whole and its sensitivity does not split by rows.
    pub fn with_w_row_scale(mut self, scale: Vec<f64>) -> Result<Self, ConfigError> {
        self.w_row_scale = Some(scale);
        self.validate()?;
        Ok(self)
    }

    /// This configuration with `h_θ` projected on `subspace` after its noise; refused in record
    /// mode, where the subspace (a function of the silo's features) would be a release of them.
    pub fn with_subspace(mut self, subspace: Subspace) -> Result<Self, ConfigError> {
        self.subspace = Some(subspace);
        self.validate()?;
        Ok(self)
    }

    /// This configuration with the adaptive clip norm at quantile `q` ∈ (0, 1]; refused in record
    /// mode, where a quantile of the records' scales would read the protected records.
    pub fn with_clip_quantile(mut self, q: f64) -> Result<Self, ConfigError> {
        self.clip_quantile = Some(q);
        self.validate()?;
        Ok(self)
    }

    /// The check [`SiloConfig::new`] makes first: each noise std finite and ≥ 0.
    pub fn check_noise_stds(sigma_loss: f64, sigma_theta: f64, sigma_w: f64) -> Result<(), ConfigError> {
        check_finite_non_negative(&[("sigma_loss", sigma_loss), ("sigma_theta", sigma_theta), ("sigma_w", sigma_w)])
    }

    /// Checks a configuration built as a struct literal as [`SiloConfig::new`] would.
    pub fn validate(&self) -> Result<(), ConfigError> {
        SiloConfig::check_noise_stds(self.sigma_loss, self.sigma_theta, self.sigma_w)?;
        self.sampling.validate()?;
        self.protect.validate()?;
        if self.subspace.is_some() && !matches!(self.protect, Protect::Attribute { .. }) {
            return Err(ConfigError::Subspace(
                "only in attribute mode: in record mode the features are protected, and a basis computed from them \
                 would release them"
                    .into(),
            ));
        }
        if let Some(scale) = &self.w_row_scale {
            if scale.is_empty() || scale.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
                return Err(ConfigError::WRows(format!(
                    "w_row_scale must be a non-empty list of finite values > 0 (the released p(r|b)^(-1/2)), got {scale:?}"
                )));
            }
            if !matches!(self.protect, Protect::Attribute { .. }) {
                return Err(ConfigError::WRows(
                    "row-scaled noise on h_W is only for attribute mode: in record mode the W part is clipped as a \
                     whole, so its sensitivity does not split by rows"
                        .into(),
                ));
            }
        }
        if let Some(q) = self.clip_quantile {
            if !(q > 0.0 && q <= 1.0) {
                return Err(ConfigError::ClipQuantile(format!("clip_quantile must be in (0, 1], got {q}")));
            }
            if !matches!(self.protect, Protect::Attribute { .. }) {
                return Err(ConfigError::ClipQuantile(
                    "an adaptive clip norm is only for attribute mode: in record mode the scales it reads are the \
                     protected records (use a fixed clip)"
                        .into(),
                ));
            }
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
/// can be drawn ahead of the round (the shared schedule of [`crate::schedule`]).
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
    apply_noise_scaled(msg, cfg, z, 1.0);
}

/// [`apply_noise`] with `h_θ`'s std `cfg.sigma_theta · theta_scale` (the adaptive clip norm's
/// `C_t`, where `sigma_theta` is a std per unit of clip norm; 1 otherwise).
fn apply_noise_scaled(msg: &mut BatchGradients, cfg: &SiloConfig, z: &[f64], theta_scale: f64) {
    let [n_loss, n_theta, n_w] = noised_lengths(cfg, msg.loss_grad.len(), msg.psi_w.len());
    debug_assert_eq!(z.len(), n_loss + n_theta + n_w);
    let (z_loss, rest) = z.split_at(n_loss);
    let (z_theta, z_w) = rest.split_at(n_theta);
    let add = |part: &mut [f64], z: &[f64], sigma: f64| part.iter_mut().zip(z).for_each(|(v, z)| *v += sigma * z);
    add(&mut msg.loss_grad, z_loss, cfg.sigma_loss);
    if cfg.send_psi {
        add(&mut msg.psi_theta, z_theta, cfg.sigma_theta * theta_scale);
        match &cfg.w_row_scale {
            // Row (b, r): its l coordinates at std sigma_w · p(r|b)^{-1/2}. The bindings check
            // that the rows divide h_W (w_len = rows · l) before a round.
            Some(scale) if !z_w.is_empty() => {
                let l = msg.psi_w.len() / scale.len();
                for ((row, z), c) in msg.psi_w.chunks_mut(l).zip(z_w.chunks(l)).zip(scale) {
                    add(row, z, cfg.sigma_w * c);
                }
            }
            _ => add(&mut msg.psi_w, z_w, cfg.sigma_w),
        }
        if let Some(sub) = &cfg.subspace {
            // Post-processing of the noised release by a map that does not read s.
            sub.project(&mut msg.psi_theta);
        }
    } else {
        for part in [&mut msg.psi_theta_sfree, &mut msg.psi_theta, &mut msg.psi_w_sfree, &mut msg.psi_w] {
            part.iter_mut().for_each(|v| *v = 0.0);
        }
        msg.psi = 0.0;
    }
}

/// Exact gradient parts of one batch of a silo (no noise), divided by `denom`.
pub fn silo_parts(silo: &Silo, at: Point<'_>, batch: &[usize], denom: f64, protect: Protect) -> BatchGradients {
    crate::with_rows!(&silo.x, rows => batch_gradients(Records { rows, y: &silo.y, s: &silo.s }, at, batch, denom, protect))
}

/// A silo's message for round `round`: [`draw_batch`], the exact parts ([`silo_parts`]), then
/// [`noise_message`]. `loss`, `psi` and `n_clipped` of the result are silo-local diagnostics.
pub fn silo_step(silo: &Silo, at: Point<'_>, cfg: &SiloConfig, keys: &SiloKeys, silo_id: u64, round: u64) -> BatchGradients {
    let mut scratch = StepScratch::default();
    silo_step_into(silo, at, cfg, keys, silo_id, round, &mut scratch);
    scratch.msg
}

/// The draws of a silo's round that depend on neither θ nor W: its batch and the standard normal
/// draws of its noise ([`draw_round_into`]).
#[derive(Clone, Debug, Default)]
pub struct RoundDraws {
    pub batch: Vec<usize>,
    pub noise: Vec<f64>,
}

/// What a silo's step writes into, kept between rounds: the round's draws, the kernel's scratch
/// and the message (so a round allocates nothing once the sizes are known).
#[derive(Clone, Debug, Default)]
pub struct StepScratch {
    pub draws: RoundDraws,
    pub ws: Workspace,
    pub msg: BatchGradients,
}

/// [`silo_step`] into `scratch.msg`, with the same arithmetic.
pub fn silo_step_into(
    silo: &Silo,
    at: Point<'_>,
    cfg: &SiloConfig,
    keys: &SiloKeys,
    silo_id: u64,
    round: u64,
    scratch: &mut StepScratch,
) {
    let StepScratch { draws, ws, msg } = scratch;
    let lens = (at.dims.theta_len(), at.dims.w_len(at.psi.fairness));
    draw_round_into(cfg, keys, silo_id, round, silo.len(), lens, draws);
    noised_parts_into(silo, at, cfg, draws, ws, msg);
}

/// A silo's [`RoundDraws`] of round `round` into `out` ([`draw_batch_into`], [`draw_noise_into`]).
/// `lens` = (θ length, W length).
pub fn draw_round_into(
    cfg: &SiloConfig,
    keys: &SiloKeys,
    silo_id: u64,
    round: u64,
    n: usize,
    lens: (usize, usize),
    out: &mut RoundDraws,
) {
    draw_batch_into(cfg, keys, silo_id, round, n, &mut out.batch);
    draw_noise_into(cfg, keys, silo_id, round, lens, &mut out.noise);
}

/// A silo's message for round `round` on a batch drawn by the caller: the round's noise from
/// `keys.noise` ([`draw_noise_into`]), then [`noised_parts_into`] (the clip of the config, or the
/// adaptive clip of `batch`, and its noise). The same arithmetic as [`silo_parts`] then
/// [`noise_message`] for a fixed clip.
pub fn noised_batch(silo: &Silo, at: Point<'_>, cfg: &SiloConfig, keys: &SiloKeys, silo_id: u64, round: u64, batch: Vec<usize>) -> BatchGradients {
    let lens = (at.dims.theta_len(), at.dims.w_len(at.psi.fairness));
    let mut draws = RoundDraws { batch, noise: Vec::new() };
    draw_noise_into(cfg, keys, silo_id, round, lens, &mut draws.noise);
    let mut msg = BatchGradients::default();
    noised_parts_into(silo, at, cfg, &draws, &mut Workspace::default(), &mut msg);
    msg
}

/// The rest of a silo's step once its round is drawn: the exact parts of the drawn batch, then
/// the drawn noise ([`apply_noise`]), into `msg`.
pub(crate) fn noised_parts_into(
    silo: &Silo,
    at: Point<'_>,
    cfg: &SiloConfig,
    draws: &RoundDraws,
    ws: &mut Workspace,
    msg: &mut BatchGradients,
) {
    let denom = cfg.sampling.denominator(silo.len());
    // The adaptive clip (attribute mode): the kernel clips to its batch's C_t and returns it, and
    // sigma_theta, a std per unit of clip norm, is scaled by it.
    let theta_scale = match (cfg.clip_quantile, cfg.protect) {
        (Some(q), Protect::Attribute { .. }) => crate::with_rows!(&silo.x, rows => {
            batch_gradients_adaptive_into(Records { rows, y: &silo.y, s: &silo.s }, at, &draws.batch, denom, q, ws, msg)
        }),
        _ => {
            crate::with_rows!(&silo.x, rows => batch_gradients_into(Records { rows, y: &silo.y, s: &silo.s }, at, &draws.batch, denom, cfg.protect, ws, msg));
            1.0
        }
    };
    apply_noise_scaled(msg, cfg, &draws.noise, theta_scale);
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
    if rows < PREDICT_PARALLEL_ROWS || crate::threads::machine_busy() {
        silos.iter().map(count).fold(vec![0; l], add)
    } else {
        silos.par_iter().map(count).reduce(|| vec![0; l], add)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::psi::{norm, Dims, Fairness, PsiInputs};

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

    pub(crate) fn toy_silo(n: usize, seed: u64) -> Silo {
        let (x, y, s) = toy_data(n, seed);
        Silo { x: Features::auto(x, 2), y, s }
    }

    pub(crate) fn cfg(sigma: f64) -> SiloConfig {
        SiloConfig {
            sampling: Sampling::WithoutReplacement { m: 32 },
            protect: Protect::Attribute { clip_theta: 1.0 },
            sigma_loss: 0.0,
            sigma_theta: sigma,
            sigma_w: sigma,
            send_psi: true,
            subspace: None,
            clip_quantile: None,
            w_row_scale: None,
        }
    }

    pub(crate) const DIMS: Dims = Dims { d: 2, k: 2, l: 2 };

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
    fn silo_step_is_reproducible_and_noise_depends_on_round() {
        let silo = toy_silo(100, 1);
        let theta = vec![0.1, -0.2, 0.05];
        let w = vec![0.3, -0.1, 0.2, 0.4];
        let inv = vec![1.5, 1.2];
        let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &w, inv_sqrt_ps: &inv };
        let k = SiloKeys::seeded(7);
        let a = silo_step(&silo, Point { dims: DIMS, theta: &theta, psi }, &cfg(0.5), &k, 0, 3);
        let b = silo_step(&silo, Point { dims: DIMS, theta: &theta, psi }, &cfg(0.5), &k, 0, 3);
        let c = silo_step(&silo, Point { dims: DIMS, theta: &theta, psi }, &cfg(0.5), &k, 0, 4);
        let d = silo_step(&silo, Point { dims: DIMS, theta: &theta, psi }, &cfg(0.5), &k, 1, 3);
        assert_eq!(a, b);
        assert_ne!(a.psi_w, c.psi_w);
        assert_ne!(a.psi_w, d.psi_w);
        // Noise only on the s-dependent parts: the exact parts agree with a noiseless step.
        let quiet = silo_step(&silo, Point { dims: DIMS, theta: &theta, psi }, &cfg(0.0), &k, 0, 3);
        assert_eq!(a.loss_grad, quiet.loss_grad);
        assert_eq!(a.psi_theta_sfree, quiet.psi_theta_sfree);
        assert_eq!(a.psi_w_sfree, quiet.psi_w_sfree);
        assert_ne!(a.psi_theta, quiet.psi_theta);
    }

    #[test]
    fn record_protection_noises_the_loss_gradient() {
        let silo = toy_silo(64, 2);
        let theta = vec![0.0; 3];
        let w = vec![0.1; 4];
        let inv = vec![1.5, 1.2];
        let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &w, inv_sqrt_ps: &inv };
        let mut c = cfg(0.0);
        c.protect = Protect::Record { clip_loss: 1.0, clip_theta: 1.0, clip_w: 1.0 };
        let k = SiloKeys::seeded(1);
        let quiet = silo_step(&silo, Point { dims: DIMS, theta: &theta, psi }, &c, &k, 0, 0);
        c.sigma_loss = 1.0;
        let noisy = silo_step(&silo, Point { dims: DIMS, theta: &theta, psi }, &c, &k, 0, 0);
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
        let mut a = silo_step(&silo, Point { dims: DIMS, theta: &theta, psi }, &c, &k, 0, 0);
        let mut b = silo_step(&flipped, Point { dims: DIMS, theta: &theta, psi }, &c, &k, 0, 0);
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
        let a = silo_step(&silo, Point { dims: DIMS, theta: &theta, psi }, &cfg(0.5), &k1, 0, 3);
        let b = silo_step(&silo, Point { dims: DIMS, theta: &theta, psi }, &cfg(0.5), &k2, 0, 3);
        // Same public batch (the exact parts agree) but independent noise.
        assert_eq!(a.loss_grad, b.loss_grad);
        assert_ne!(a.psi_theta, b.psi_theta);
        // The seeded key of the same seed reproduces the seeded stream exactly.
        let s1 = silo_step(&silo, Point { dims: DIMS, theta: &theta, psi }, &cfg(0.5), &SiloKeys::seeded(7), 0, 3);
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
        let whole = silo_step(&silo, Point { dims: DIMS, theta: &theta, psi }, &c, &k, 2, 9);
        let batch = draw_batch(&c, &k, 2, 9, silo.len());
        let at = Point { dims: DIMS, theta: &theta, psi };
        let mut pieces = silo_parts(&silo, at, &batch, c.sampling.denominator(silo.len()), c.protect);
        noise_message(&mut pieces, &c, &k, 2, 9);
        assert_eq!(whole, pieces);
    }

    #[test]
    fn row_scaled_w_noise_is_the_same_draws_times_each_rows_scale() {
        // Two blocks (equalized odds) of two groups, l = 2: four rows of two coordinates.
        let silo = toy_silo(60, 8);
        let theta = vec![0.2, -0.1, 0.3];
        let w = vec![0.1; 8];
        let inv = vec![1.1, 3.0, 1.6, 1.3];
        let psi = PsiInputs { fairness: Fairness::EqualizedOdds, w: &w, inv_sqrt_ps: &inv };
        let at = Point { dims: DIMS, theta: &theta, psi };
        let keys = SiloKeys::seeded(11);
        let flat = silo_step(&silo, at, &cfg(0.4), &keys, 1, 5);
        let rows = cfg(0.4).with_w_row_scale(inv.clone()).unwrap();
        let scaled = silo_step(&silo, at, &rows, &keys, 1, 5);
        let exact = silo_step(&silo, at, &SiloConfig { sigma_w: 0.0, ..cfg(0.4) }, &keys, 1, 5);
        // Only h_W differs; its noise on row (b, r) is the flat noise times p(r|b)^{-1/2}.
        assert_eq!(flat.psi_theta, scaled.psi_theta);
        assert_eq!(flat.loss_grad, scaled.loss_grad);
        for t in 0..8 {
            let (n_flat, n_rows) = (flat.psi_w[t] - exact.psi_w[t], scaled.psi_w[t] - exact.psi_w[t]);
            assert!(n_flat.abs() > 0.0);
            assert!((n_rows - n_flat * inv[t / 2]).abs() < 1e-12, "coordinate {t}");
        }
        // Refused in record mode and for scales that are not finite and > 0.
        let record = SiloConfig { protect: Protect::Record { clip_loss: 1.0, clip_theta: 1.0, clip_w: 1.0 }, ..cfg(0.1) };
        assert!(matches!(record.with_w_row_scale(vec![1.0, 1.0]), Err(ConfigError::WRows(_))));
        assert!(matches!(cfg(0.1).with_w_row_scale(vec![1.0, f64::NAN]), Err(ConfigError::WRows(_))));
        assert!(matches!(cfg(0.1).with_w_row_scale(vec![]), Err(ConfigError::WRows(_))));
    }

    #[test]
    fn an_adaptive_round_is_the_fixed_round_at_its_batch_clip() {
        use crate::psi::clip_scale::quantile_clip;
        use crate::psi::clip_scale::tests::fairness_scales_into;
        let dense = toy_silo(100, 5);
        // The same records stored sparse (the kernel's other first pass).
        let (x, y, s) = toy_data(100, 5);
        let sparse = Silo { x: Features::auto(x.iter().map(|v| if v.abs() < 0.3 { 0.0 } else { *v }).collect(), 2), y, s };
        let theta = vec![0.4, -0.3, 0.1];
        let w = vec![0.5, -0.2, -0.3, 0.6];
        let inv = vec![1.4, 1.7];
        let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &w, inv_sqrt_ps: &inv };
        let at = Point { dims: DIMS, theta: &theta, psi };
        let k = SiloKeys::seeded(3);
        for silo in [&dense, &sparse] {
            for q in [0.1, 0.5, 0.9, 1.0] {
                let adaptive = cfg(0.3).with_clip_quantile(q).unwrap();
                let got = silo_step(silo, at, &adaptive, &k, 1, 6);
                // The clip of the round: the quantile of the drawn batch's scales (the reference
                // computes them from its own logits, so equal up to rounding).
                let batch = draw_batch(&adaptive, &k, 1, 6, silo.len());
                let mut b = Vec::new();
                crate::with_rows!(&silo.x, rows => fairness_scales_into(rows, &silo.y, at, &batch, &mut b));
                let reference = quantile_clip(&mut b, q);
                let c = got.clip_theta;
                assert!(c > 0.0 && (c - reference).abs() <= 1e-12 * reference, "q = {q}: {c} against {reference}");
                // With that clip and σ₁ C_t, it is the fixed round bit for bit.
                let fixed = SiloConfig { protect: Protect::Attribute { clip_theta: c }, sigma_theta: 0.3 * c, ..cfg(0.3) };
                assert_eq!(got, silo_step(silo, at, &fixed, &k, 1, 6), "q = {q}");
                // The same message from a batch the caller drew.
                assert_eq!(noised_batch(silo, at, &adaptive, &k, 1, 6, batch.clone()), got);
            }
        }
        // A fixed clip through noised_batch is silo_parts then noise_message.
        let batch = draw_batch(&cfg(0.3), &k, 1, 6, dense.len());
        let mut two_steps = silo_parts(&dense, at, &batch, 32.0, cfg(0.3).protect);
        noise_message(&mut two_steps, &cfg(0.3), &k, 1, 6);
        assert_eq!(noised_batch(&dense, at, &cfg(0.3), &k, 1, 6, batch), two_steps);
    }

    #[test]
    fn an_adaptive_batch_larger_than_a_kernel_chunk_is_one_chunk_with_the_same_sums() {
        // 2,500 records: the fixed kernel takes them in chunks of 1,024, the adaptive one in one;
        // the sums run in batch order either way, so the bits agree.
        let silo = toy_silo(3000, 9);
        let theta = vec![0.2, -0.5, 0.3];
        let w = vec![0.4, -0.6, -0.1, 0.3];
        let inv = vec![1.2, 2.0];
        let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &w, inv_sqrt_ps: &inv };
        let at = Point { dims: DIMS, theta: &theta, psi };
        let k = SiloKeys::seeded(5);
        let base = SiloConfig { sampling: Sampling::WithoutReplacement { m: 2500 }, ..cfg(0.2) };
        let got = silo_step(&silo, at, &base.clone().with_clip_quantile(0.5).unwrap(), &k, 0, 1);
        let c = got.clip_theta;
        let fixed = SiloConfig { protect: Protect::Attribute { clip_theta: c }, sigma_theta: 0.2 * c, ..base };
        assert_eq!(got, silo_step(&silo, at, &fixed, &k, 0, 1));
        assert!(got.n_clipped > 0, "{}", got.n_clipped);
    }

    #[test]
    fn an_adaptive_clip_is_the_same_on_neighbours_and_bounds_their_difference() {
        // Neighbours in attribute mode: one record's s changed. The round's clip does not move,
        // and the exact h_θ moves by at most 2 C_t / m.
        let silo = toy_silo(64, 8);
        let theta = vec![0.6, 0.2, -0.4];
        let w = vec![0.7, -0.5, -0.2, 0.9];
        let inv = vec![1.3, 1.9];
        let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &w, inv_sqrt_ps: &inv };
        let at = Point { dims: DIMS, theta: &theta, psi };
        let adaptive = cfg(0.0).with_clip_quantile(0.5).unwrap();
        let k = SiloKeys::seeded(4);
        let batch = draw_batch(&adaptive, &k, 0, 2, silo.len());
        let base = noised_batch(&silo, at, &adaptive, &k, 0, 2, batch.clone());
        let c = base.clip_theta;
        assert!(c > 0.0);
        for &i in &batch {
            let mut other = Silo { x: silo.x.clone(), y: silo.y.clone(), s: silo.s.clone() };
            other.s[i] = 1 - other.s[i];
            let moved = noised_batch(&other, at, &adaptive, &k, 0, 2, batch.clone());
            assert_eq!(moved.clip_theta.to_bits(), c.to_bits(), "record {i}");
            let diff: Vec<f64> = moved.psi_theta.iter().zip(&base.psi_theta).map(|(a, b)| a - b).collect();
            assert!(norm(&diff) <= 2.0 * c / 32.0 * (1.0 + 1e-12), "record {i}: {} > {}", norm(&diff), 2.0 * c / 32.0);
            assert_eq!((&moved.loss_grad, &moved.psi_theta_sfree, &moved.psi_w_sfree), (&base.loss_grad, &base.psi_theta_sfree, &base.psi_w_sfree));
        }
    }

    #[test]
    fn an_adaptive_clip_is_refused_outside_attribute_mode_and_outside_its_range() {
        for q in [0.0, -0.1, 1.5, f64::NAN] {
            let e = cfg(0.1).with_clip_quantile(q).unwrap_err().to_string();
            assert!(e.contains("clip_quantile must be in (0, 1]"), "{e}");
        }
        let record = SiloConfig { protect: Protect::Record { clip_loss: 1.0, clip_theta: 1.0, clip_w: 1.0 }, ..cfg(0.1) };
        let e = record.with_clip_quantile(0.5).unwrap_err().to_string();
        assert!(e.contains("only for attribute mode"), "{e}");
    }

    #[test]
    fn a_subspace_projects_the_noised_theta_part_and_nothing_else() {
        use crate::subspace::Subspace;
        let silo = toy_silo(80, 4);
        let theta = vec![0.3, 0.1, -0.2];
        let w = vec![0.3, -0.1, 0.2, 0.4];
        let inv = vec![1.5, 1.2];
        let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &w, inv_sqrt_ps: &inv };
        let at = Point { dims: DIMS, theta: &theta, psi };
        let k = SiloKeys::seeded(11);
        let h = std::f64::consts::FRAC_1_SQRT_2;
        let sub = Subspace::new(vec![h, 0.0, h], 3, 1).unwrap();
        let plain = silo_step(&silo, at, &cfg(0.7), &k, 2, 9);
        let projected = silo_step(&silo, at, &cfg(0.7).with_subspace(sub.clone()).unwrap(), &k, 2, 9);
        let mut want = plain.psi_theta.clone();
        sub.project(&mut want);
        assert_eq!(projected.psi_theta, want);
        assert!((want[0] - want[2]).abs() < 1e-15 && want[1] == 0.0);
        assert_eq!((projected.loss_grad, projected.psi_theta_sfree), (plain.loss_grad, plain.psi_theta_sfree));
        assert_eq!((projected.psi_w, projected.psi_w_sfree), (plain.psi_w, plain.psi_w_sfree));
        let record = SiloConfig { protect: Protect::Record { clip_loss: 1.0, clip_theta: 1.0, clip_w: 1.0 }, ..cfg(0.7) };
        let err = record.with_subspace(sub).unwrap_err().to_string();
        assert!(err.contains("only in attribute mode"), "{err}");
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
        let a = silo_step(&owned, Point { dims: DIMS, theta: &theta, psi }, &cfg(0.4), &k, 1, 2);
        assert_eq!(a, silo_step(&shared, Point { dims: DIMS, theta: &theta, psi }, &cfg(0.4), &k, 1, 2));
        // float32 storage: the same as float64 features rounded to float32.
        let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let rounded = Silo {
            x: Features::Dense { x: rows.iter().flat_map(|&r| x32[2 * r..2 * r + 2].iter().map(|&v| v as f64)).collect(), d: 2 },
            ..owned.clone()
        };
        let m32 = Arc::new(SharedMatrix::from_vec_f32(x32, 2));
        let shared32 = Silo { x: Features::Shared(SharedRows { matrix: m32, rows: RowMap::from_rows(&rows) }), ..owned.clone() };
        let b = silo_step(&rounded, Point { dims: DIMS, theta: &theta, psi }, &cfg(0.4), &k, 1, 2);
        assert_eq!(b, silo_step(&shared32, Point { dims: DIMS, theta: &theta, psi }, &cfg(0.4), &k, 1, 2));
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
}
