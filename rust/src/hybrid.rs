//! Hybrid centralization (Gupta et al. 2024, §4 and App. F): the features and labels of a record live in
//! one *non-sensitive* silo, its sensitive attribute in one *sensitive* silo, both indexed by a
//! universal record id.
//!
//! In a round every non-sensitive silo j draws its own batch `B_j` (m records without
//! replacement) and sends the s-free parts (`g`, `a_θ`, `a_W`, means over `B_j`) in the clear. It
//! hands `F(x_i)` and `∇F(x_i)` of its batch to the sensitive silos; sensitive silo c computes the
//! s-dependent parts over the intersection `I_c = (∪_j B_j) ∩ S_c` as clipped SUMS
//! `u_c = Σ_{I_c} b̃_i` and `v_c = Σ_{I_c} c_i`, and adds Gaussian noise calibrated to the
//! sensitivity of a sum (`2 C_θ` and `2 (1/ρ₁ + 1/ρ₂)^{1/2}`). Dividing by the union size then
//! scales the noise to the intersected batch. A sensitive silo whose intersection is empty sends
//! nothing, or (`dummy_noise`) a zero-mean noise message indistinguishable from a real one.
//!
//! The three modes of the paper are special cases of the layout: (a) one silo split into its
//! non-sensitive and sensitive divisions (one silo of each kind, same records), (b) one central
//! sensitive silo with N non-sensitive silos, (c) p non-sensitive and s sensitive silos.

use crate::config::{is_positive, ConfigError};
use crate::features::Features;
use crate::noise::{add_gaussian, NoiseKey, Purpose};
use crate::psi::{batch_gradients, BatchGradients, Code, Dims, Fairness, Point, Protect, PsiInputs, Records};
use crate::server::{server_update, ServerConfig};
use crate::sampling::Sampling;

/// All records, with the silo of each kind that holds them.
#[derive(Clone, Debug)]
pub struct HybridLayout {
    pub x: Features,
    pub y: Vec<Code>,
    pub s: Vec<Code>,
    /// Universal ids of the records of each non-sensitive silo.
    pub members: Vec<Vec<usize>>,
    /// The sensitive silo holding each record's `s`.
    pub owner: Vec<u32>,
    pub n_sensitive: usize,
}

/// Noise of the sensitive silos: per silo, the std of the noise on the θ-sum and on the W-sum,
/// and the key its noise streams come from (secret unless reproducible noise was asked for).
#[derive(Clone, Debug, PartialEq)]
pub struct HybridNoise {
    pub batch_size: usize,
    pub clip_theta: f64,
    pub sigma_theta: Vec<f64>,
    pub sigma_w: Vec<f64>,
    pub dummy_noise: bool,
    pub keys: Vec<NoiseKey>,
}

impl HybridNoise {
    /// The noise settings of `layout`'s rounds, checked against it, in this order: one
    /// `sigma_theta`, one `sigma_w` and one key per sensitive silo; every std finite and ≥ 0;
    /// `clip_theta > 0` (`inf`: no clipping); `batch_size` in `1..=` the size of every
    /// non-sensitive silo.
    pub fn new(
        layout: &HybridLayout,
        batch_size: usize,
        clip_theta: f64,
        sigma_theta: Vec<f64>,
        sigma_w: Vec<f64>,
        dummy_noise: bool,
        keys: Vec<NoiseKey>,
    ) -> Result<Self, ConfigError> {
        let noise = HybridNoise { batch_size, clip_theta, sigma_theta, sigma_w, dummy_noise, keys };
        noise.validate(layout)?;
        Ok(noise)
    }

    /// Checks settings built as a struct literal against `layout` as [`HybridNoise::new`] would.
    pub fn validate(&self, layout: &HybridLayout) -> Result<(), ConfigError> {
        let ns = layout.n_sensitive;
        if self.sigma_theta.len() != ns || self.sigma_w.len() != ns || self.keys.len() != ns {
            return Err(ConfigError::HybridNoiseCount { n_sensitive: ns });
        }
        if let Some(&v) = self.sigma_theta.iter().chain(&self.sigma_w).find(|v| !(v.is_finite() && **v >= 0.0)) {
            return Err(ConfigError::HybridNoiseStd(v));
        }
        if !is_positive(self.clip_theta) {
            return Err(ConfigError::HybridClipTheta(self.clip_theta));
        }
        for (j, m) in layout.members.iter().enumerate() {
            if self.batch_size == 0 || self.batch_size > m.len() {
                return Err(ConfigError::HybridBatchSize { batch_size: self.batch_size, silo: j, silo_size: m.len() });
            }
        }
        Ok(())
    }
}

/// What the server receives in one round, before it averages.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HybridMessages {
    /// Each non-sensitive silo's s-free parts (means over its batch); `psi_theta`/`psi_w` empty.
    pub non_sensitive: Vec<BatchGradients>,
    /// Each sensitive silo's noised sums `(u_c, v_c)`, or `None` if it sent nothing.
    pub sensitive: Vec<Option<(Vec<f64>, Vec<f64>)>>,
    /// `|I_c|` per sensitive silo (known to the silos, used for diagnostics only).
    pub intersection: Vec<usize>,
    /// `|∪_j B_j|`.
    pub union_size: usize,
}

/// Stream id of sensitive silo `c` (distinct from the non-sensitive silos' ids).
pub fn sensitive_stream_id(n_public: usize, c: usize) -> u64 {
    (n_public + c) as u64
}

/// Universal ids of non-sensitive silo `j`'s batch in `round`, drawn from `batch_key`. The exact
/// s-free parts reveal a batch once it is drawn, but its draw must be unknown before: the
/// sensitive silos' rounds are accounted as random batches (a record drawn with probability q,
/// averaged over the draws), which a public seed would fix in advance, some record in more
/// batches than the average. So the key is secret (or a simulation's `noise_seed`).
pub fn non_sensitive_batch(layout: &HybridLayout, j: usize, batch_size: usize, batch_key: &NoiseKey, round: u64) -> Vec<usize> {
    let members = &layout.members[j];
    let m = batch_size.min(members.len());
    let local = Sampling::WithoutReplacement { m }.draw(&mut batch_key.stream(j as u64, round, Purpose::Batch), members.len());
    local.iter().map(|&i| members[i]).collect()
}

/// A batch's ids grouped by the sensitive silo that holds their `s` (in batch order).
pub fn split_by_owner(layout: &HybridLayout, batch: &[usize]) -> Vec<Vec<usize>> {
    let mut by_owner: Vec<Vec<usize>> = vec![Vec::new(); layout.n_sensitive];
    for &i in batch {
        by_owner[layout.owner[i] as usize].push(i);
    }
    by_owner
}

/// Sums (denominator 1) of every part over the records `ids`.
fn owner_parts(layout: &HybridLayout, at: Point<'_>, clip_theta: f64, ids: &[usize]) -> BatchGradients {
    let protect = Protect::Attribute { clip_theta };
    crate::with_rows!(&layout.x, rows => batch_gradients(Records { rows, y: &layout.y, s: &layout.s }, at, ids, 1.0, protect))
}

/// A message of s-free parts only (loss gradient, `a_θ`, `a_W`), all zero.
fn sfree_zeros(t_len: usize, w_len: usize) -> BatchGradients {
    let zeros = vec![0.0; t_len];
    BatchGradients { loss_grad: zeros.clone(), psi_theta_sfree: zeros, psi_w_sfree: vec![0.0; w_len], ..Default::default() }
}

/// Adds a group's s-free parts (sums, denominator 1), times `inv_m`, to a non-sensitive message.
fn add_sfree(msg: &mut BatchGradients, part: &BatchGradients, inv_m: f64) {
    for t in 0..msg.loss_grad.len() {
        msg.loss_grad[t] += part.loss_grad[t] * inv_m;
        msg.psi_theta_sfree[t] += part.psi_theta_sfree[t] * inv_m;
    }
    for t in 0..msg.psi_w_sfree.len() {
        msg.psi_w_sfree[t] += part.psi_w_sfree[t] * inv_m;
    }
    msg.loss += part.loss * inv_m;
    msg.psi += part.psi * inv_m;
}

/// Adds a group's s-dependent sums `(Σ clip(b_i), Σ c_i)` to a sensitive silo's `(u, v)`.
fn add_sdep((u, v): (&mut [f64], &mut [f64]), part: &BatchGradients) {
    u.iter_mut().zip(&part.psi_theta).for_each(|(a, b)| *a += b);
    v.iter_mut().zip(&part.psi_w).for_each(|(a, b)| *a += b);
}

/// Adds sensitive silo `c`'s noise to its sums, from `key`'s stream `(n_public + c, round)`: first
/// `u` (std `sigma_theta`), then `v` (std `sigma_w`).
pub fn noise_sensitive_sums(
    (u, v): (&mut [f64], &mut [f64]),
    (sigma_theta, sigma_w): (f64, f64),
    key: &NoiseKey,
    n_public: usize,
    c: usize,
    round: u64,
) {
    let mut rng = key.stream(sensitive_stream_id(n_public, c), round, Purpose::Noise);
    add_gaussian(&mut rng, u, sigma_theta);
    add_gaussian(&mut rng, v, sigma_w);
}

/// Non-sensitive silo's message: the s-free parts, means over its batch of size `m`, given its
/// batch grouped by owner ([`split_by_owner`]). The same arithmetic as [`hybrid_messages`].
pub fn non_sensitive_message(
    layout: &HybridLayout,
    at: Point<'_>,
    clip_theta: f64,
    by_owner: &[Vec<usize>],
    m: usize,
) -> BatchGradients {
    let mut msg = sfree_zeros(at.dims.theta_len(), at.dims.w_len(at.psi.fairness));
    let inv_m = 1.0 / m as f64;
    for ids in by_owner.iter().filter(|ids| !ids.is_empty()) {
        add_sfree(&mut msg, &owner_parts(layout, at, clip_theta, ids), inv_m);
    }
    msg
}

/// Sensitive silo's exact sums `(Σ clip(b_i), Σ c_i)` over its records in the round's batches:
/// `groups[j]` lists them in non-sensitive silo `j`'s batch. The same arithmetic as
/// [`hybrid_messages`]. Returns the sums and how many records they cover.
pub fn sensitive_sums(
    layout: &HybridLayout,
    at: Point<'_>,
    clip_theta: f64,
    groups: &[Vec<usize>]) -> (Vec<f64>, Vec<f64>, usize,
) {
    let (mut u, mut v, mut count) = (vec![0.0; at.dims.theta_len()], vec![0.0; at.dims.w_len(at.psi.fairness)], 0);
    for ids in groups.iter().filter(|ids| !ids.is_empty()) {
        add_sdep((&mut u, &mut v), &owner_parts(layout, at, clip_theta, ids));
        count += ids.len();
    }
    (u, v, count)
}

/// One round of messages (see the module docs). The non-sensitive silos' batches come from
/// `batch_key` ([`non_sensitive_batch`]); the sensitive silos' noise from `noise.keys`. Each
/// (non-sensitive silo, owner) group's parts are computed once and feed both the s-free message
/// and the owner's sums; [`non_sensitive_message`] and [`sensitive_sums`] are the same
/// computation split by party.
pub fn hybrid_messages(
    layout: &HybridLayout,
    at: Point<'_>,
    noise: &HybridNoise,
    batch_key: &NoiseKey,
    round: u64,
) -> HybridMessages {
    let (t_len, w_len) = (at.dims.theta_len(), at.dims.w_len(at.psi.fairness));
    let mut sums: Vec<(Vec<f64>, Vec<f64>)> = vec![(vec![0.0; t_len], vec![0.0; w_len]); layout.n_sensitive];
    let mut counts = vec![0usize; layout.n_sensitive];
    let mut non_sensitive = Vec::with_capacity(layout.members.len());
    let mut union_size = 0;
    for j in 0..layout.members.len() {
        let m = noise.batch_size.min(layout.members[j].len());
        let batch = non_sensitive_batch(layout, j, noise.batch_size, batch_key, round);
        union_size += batch.len();
        let by_owner = split_by_owner(layout, &batch);
        let mut pub_msg = sfree_zeros(t_len, w_len);
        for (c, ids) in by_owner.iter().enumerate() {
            if ids.is_empty() {
                continue;
            }
            let part = owner_parts(layout, at, noise.clip_theta, ids);
            add_sfree(&mut pub_msg, &part, 1.0 / m as f64);
            let (u, v) = &mut sums[c];
            add_sdep((u, v), &part);
            counts[c] += ids.len();
        }
        non_sensitive.push(pub_msg);
    }
    let n_public = layout.members.len();
    let sensitive = sums
        .into_iter()
        .enumerate()
        .map(|(c, (mut u, mut v))| {
            if counts[c] == 0 && !noise.dummy_noise {
                return None;
            }
            noise_sensitive_sums((&mut u, &mut v), (noise.sigma_theta[c], noise.sigma_w[c]), &noise.keys[c], n_public, c, round);
            Some((u, v))
        })
        .collect();
    HybridMessages { non_sensitive, sensitive, intersection: counts, union_size }
}

/// Server step of a hybrid round: s-free parts averaged over the non-sensitive silos (equal
/// batch sizes), s-dependent parts `Σ_c u_c / |∪B|`, then the usual descent-ascent update.
pub fn hybrid_server_update(
    theta: &mut [f64],
    w: &mut [f64],
    block_len: usize,
    msgs: &HybridMessages,
    cfg: &ServerConfig) -> (f64, f64,
) {
    let n = msgs.non_sensitive.len() as f64;
    let mut agg = BatchGradients {
        loss_grad: vec![0.0; theta.len()],
        psi_theta_sfree: vec![0.0; theta.len()],
        psi_theta: vec![0.0; theta.len()],
        psi_w_sfree: vec![0.0; w.len()],
        psi_w: vec![0.0; w.len()],
        ..Default::default()
    };
    for p in &msgs.non_sensitive {
        for t in 0..theta.len() {
            agg.loss_grad[t] += p.loss_grad[t] / n;
            agg.psi_theta_sfree[t] += p.psi_theta_sfree[t] / n;
        }
        for t in 0..w.len() {
            agg.psi_w_sfree[t] += p.psi_w_sfree[t] / n;
        }
        agg.loss += p.loss / n;
        agg.psi += p.psi / n;
    }
    let inv_b = 1.0 / msgs.union_size.max(1) as f64;
    for (u, v) in msgs.sensitive.iter().flatten() {
        for (a, ut) in agg.psi_theta.iter_mut().zip(u) {
            *a += ut * inv_b;
        }
        for (a, vt) in agg.psi_w.iter_mut().zip(v) {
            *a += vt * inv_b;
        }
    }
    let (loss, psi) = (agg.loss, agg.psi);
    server_update(theta, w, block_len, &[agg], &[1.0], cfg);
    (loss, psi)
}

/// A run of hybrid rounds `start .. start + n_rounds` ([`run_hybrid_rounds`]).
#[derive(Clone, Copy, Debug)]
pub struct HybridRun<'a> {
    pub layout: &'a HybridLayout,
    pub dims: Dims,
    pub fairness: Fairness,
    /// The ψ-term's `p_s^{-1/2}` table ([`PsiInputs::inv_sqrt_ps`]).
    pub inv_sqrt_ps: &'a [f64],
    pub noise: &'a HybridNoise,
    pub server: ServerConfig,
    /// The key of the non-sensitive silos' batches ([`non_sensitive_batch`]).
    pub batch_key: &'a NoiseKey,
    pub start: u64,
    pub n_rounds: u64,
}

/// Runs the hybrid rounds of `run` in place on `(theta, w)`; returns per-round (loss, ψ).
pub fn run_hybrid_rounds(run: &HybridRun<'_>, theta: &mut [f64], w: &mut [f64]) -> (Vec<f64>, Vec<f64>) {
    let HybridRun { layout, dims, fairness, inv_sqrt_ps, noise, server, batch_key, start, n_rounds } = *run;
    let mut losses = Vec::with_capacity(n_rounds as usize);
    let mut psis = Vec::with_capacity(n_rounds as usize);
    for round in start..start + n_rounds {
        let msgs = {
            let at = Point { dims, theta, psi: PsiInputs { fairness, w, inv_sqrt_ps } };
            hybrid_messages(layout, at, noise, batch_key, round)
        };
        let (l, p) = hybrid_server_update(theta, w, dims.k * dims.l, &msgs, &server);
        losses.push(l);
        psis.push(p);
    }
    (losses, psis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::round::tests::toy_data;
    use crate::round::{Silo, SiloConfig, SiloKeys};
    use crate::schedule::{run_rounds, RoundsRequest};

    fn data(n: usize) -> (Vec<f64>, Vec<Code>, Vec<Code>) {
        toy_data(n, 17)
    }

    const DIMS: Dims = Dims { d: 2, k: 2, l: 2 };

    fn layout(n: usize, n_public: usize, n_sensitive: usize) -> HybridLayout {
        let (x, y, s) = data(n);
        let members = (0..n_public).map(|j| (0..n).filter(|i| i % n_public == j).collect()).collect();
        let owner = (0..n).map(|i| ((i / 7) % n_sensitive) as u32).collect();
        HybridLayout { x: Features::auto(x, 2), y, s, members, owner, n_sensitive }
    }

    fn quiet(n_sensitive: usize, m: usize) -> HybridNoise {
        HybridNoise { batch_size: m, clip_theta: f64::INFINITY, sigma_theta: vec![0.0; n_sensitive], sigma_w: vec![0.0; n_sensitive], dummy_noise: false, keys: vec![NoiseKey::Seeded(0); n_sensitive] }
    }

    /// Mode (a) — one silo, its divisions — without noise is exactly standard SteFFLe with one
    /// silo: the same batches, the same update.
    #[test]
    fn divisions_of_one_silo_equal_the_standard_round() {
        let lay = layout(200, 1, 1);
        let (x, y, s) = data(200);
        let silo = Silo { x: Features::auto(x, 2), y, s };
        let keys = SiloKeys::seeded(5);
        let cfg = SiloConfig { sampling: Sampling::WithoutReplacement { m: 32 }, protect: Protect::Attribute { clip_theta: f64::INFINITY }, sigma_loss: 0.0, sigma_theta: 0.0, sigma_w: 0.0, send_psi: true, subspace: None, clip_quantile: None, w_row_scale: None };
        let server = ServerConfig { lam: 1.0, lr_theta: 0.3, lr_w: 0.3, w_radius: 3.0 };
        let inv = [1.2, 1.6];
        let (mut t1, mut w1) = (vec![0.0; 3], vec![0.1; 4]);
        let (mut t2, mut w2) = (vec![0.0; 3], vec![0.1; 4]);
        let (silos, cfgs, keys) = ([silo], [cfg], [keys]);
        let req = RoundsRequest::new(&silos, DIMS, (Fairness::DemographicParity, &inv), &cfgs, &keys, &[1.0], server).rounds(0, 20);
        run_rounds(&req, &mut t1, &mut w1);
        let run = HybridRun {
            layout: &lay,
            dims: DIMS,
            fairness: Fairness::DemographicParity,
            inv_sqrt_ps: &inv,
            noise: &quiet(1, 32),
            server,
            batch_key: &NoiseKey::Seeded(5),
            start: 0,
            n_rounds: 20,
        };
        run_hybrid_rounds(&run, &mut t2, &mut w2);
        for (a, b) in t1.iter().chain(&w1).zip(t2.iter().chain(&w2)) {
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
    }

    /// Without noise, how the sensitive attribute is spread over sensitive silos does not change
    /// the update (the sums just add up).
    #[test]
    fn sensitive_layout_does_not_change_the_noiseless_update() {
        let inv = [1.2, 1.6];
        let server = ServerConfig { lam: 1.0, lr_theta: 0.3, lr_w: 0.3, w_radius: 3.0 };
        let run = |n_s| {
            let lay = layout(300, 3, n_s);
            let (mut t, mut w) = (vec![0.0; 3], vec![0.1; 4]);
            let run = HybridRun {
                layout: &lay,
                dims: DIMS,
                fairness: Fairness::DemographicParity,
                inv_sqrt_ps: &inv,
                noise: &quiet(n_s, 16),
                server,
                batch_key: &NoiseKey::Seeded(9),
                start: 0,
                n_rounds: 10,
            };
            run_hybrid_rounds(&run, &mut t, &mut w);
            (t, w)
        };
        let (a, b) = (run(1), run(4));
        for (x, y) in a.0.iter().chain(&a.1).zip(b.0.iter().chain(&b.1)) {
            assert!((x - y).abs() < 1e-12);
        }
    }

    #[test]
    fn only_sensitive_silos_add_noise_and_dummies_are_optional() {
        let lay = layout(100, 2, 5);
        let w = vec![0.2, -0.1, 0.3, 0.0];
        let inv = [1.2, 1.6];
        let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &w, inv_sqrt_ps: &inv };
        let theta = vec![0.1, 0.2, 0.0];
        let mut noisy = HybridNoise { batch_size: 2, clip_theta: 1.0, sigma_theta: vec![1.0; 5], sigma_w: vec![1.0; 5], dummy_noise: false, keys: vec![NoiseKey::from_entropy().unwrap(); 5] };
        let a = hybrid_messages(&lay, Point { dims: DIMS, theta: &theta, psi }, &noisy, &NoiseKey::Seeded(1), 0);
        let b = hybrid_messages(&lay, Point { dims: DIMS, theta: &theta, psi }, &quiet(5, 2), &NoiseKey::Seeded(1), 0);
        assert_eq!(a.non_sensitive, b.non_sensitive); // the non-sensitive silos' messages carry no noise
        assert_eq!(a.union_size, 4);
        let silent = a.sensitive.iter().filter(|m| m.is_none()).count();
        assert_eq!(silent, a.intersection.iter().filter(|&&c| c == 0).count());
        assert!(silent >= 1); // 4 records cannot reach 5 sensitive silos
        noisy.dummy_noise = true;
        let c = hybrid_messages(&lay, Point { dims: DIMS, theta: &theta, psi }, &noisy, &NoiseKey::Seeded(1), 0);
        assert!(c.sensitive.iter().all(|m| m.is_some()));
        for (m, &cnt) in c.sensitive.iter().zip(&c.intersection) {
            if cnt == 0 {
                let (u, _) = m.as_ref().unwrap();
                assert!(u.iter().any(|v| *v != 0.0)); // pure zero-mean noise
            }
        }
    }

    #[test]
    fn hybrid_noise_new_accepts_good_values() {
        let lay = layout(30, 3, 2); // non-sensitive silos of 10 records each
        let keys = vec![NoiseKey::Seeded(1); 2];
        let n = HybridNoise::new(&lay, 10, f64::INFINITY, vec![0.0, 1.0], vec![2.0, 0.0], true, keys.clone());
        assert_eq!(
            n,
            Ok(HybridNoise { batch_size: 10, clip_theta: f64::INFINITY, sigma_theta: vec![0.0, 1.0], sigma_w: vec![2.0, 0.0], dummy_noise: true, keys })
        );
        assert!(HybridNoise::new(&lay, 1, 0.5, vec![0.0; 2], vec![0.0; 2], false, vec![NoiseKey::Seeded(0); 2]).is_ok());
        assert_eq!(quiet(2, 4).validate(&lay), Ok(()));
    }

    #[test]
    fn hybrid_noise_new_rejects_each_bad_value_with_the_binding_message() {
        let lay = layout(30, 3, 2);
        let new = |m: usize, clip: f64, st: Vec<f64>, sw: Vec<f64>, nk: usize| {
            HybridNoise::new(&lay, m, clip, st, sw, false, vec![NoiseKey::Seeded(0); nk]).unwrap_err().to_string()
        };
        let count = "need one sigma_theta, one sigma_w and one noise key per sensitive silo (2)";
        assert_eq!(new(4, 1.0, vec![0.0], vec![0.0; 2], 2), count);
        assert_eq!(new(4, 1.0, vec![0.0; 2], vec![0.0; 3], 2), count);
        assert_eq!(new(4, 1.0, vec![0.0; 2], vec![0.0; 2], 1), count);
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(new(4, 1.0, vec![0.0, bad], vec![0.0; 2], 2), "noise stds must be finite and >= 0");
            assert_eq!(new(4, 1.0, vec![0.0; 2], vec![bad, 0.0], 2), "noise stds must be finite and >= 0");
        }
        for bad in [0.0, -1.0, f64::NAN] {
            assert_eq!(new(4, bad, vec![0.0; 2], vec![0.0; 2], 2), "clip_theta must be > 0 (inf for no clipping)");
        }
        assert_eq!(new(0, 1.0, vec![0.0; 2], vec![0.0; 2], 2), "batch_size=0 must be in 1..=10 (non-sensitive silo 0)");
        assert_eq!(new(11, 1.0, vec![0.0; 2], vec![0.0; 2], 2), "batch_size=11 must be in 1..=10 (non-sensitive silo 0)");
        let uneven = layout(31, 3, 2); // silo 0 has 11 records, silos 1 and 2 have 10
        let e = HybridNoise::new(&uneven, 11, 1.0, vec![0.0; 2], vec![0.0; 2], false, vec![NoiseKey::Seeded(0); 2]).unwrap_err();
        assert_eq!(e.to_string(), "batch_size=11 must be in 1..=10 (non-sensitive silo 1)");
        // The counts come first, then the stds, then the clip, then the batch size.
        assert_eq!(new(0, 0.0, vec![-1.0; 2], vec![0.0; 2], 1), count);
        assert_eq!(new(0, 0.0, vec![-1.0; 2], vec![0.0; 2], 2), "noise stds must be finite and >= 0");
        assert_eq!(new(0, 0.0, vec![0.0; 2], vec![0.0; 2], 2), "clip_theta must be > 0 (inf for no clipping)");
    }

    #[test]
    fn the_per_party_split_equals_the_round() {
        let lay = layout(120, 3, 4);
        let w = vec![0.2, -0.1, 0.3, 0.0];
        let inv = [1.2, 1.6];
        let psi = PsiInputs { fairness: Fairness::DemographicParity, w: &w, inv_sqrt_ps: &inv };
        let theta = vec![0.1, 0.2, 0.0];
        let key = NoiseKey::from_entropy().unwrap();
        let noise = HybridNoise { batch_size: 6, clip_theta: 0.5, sigma_theta: vec![0.3; 4], sigma_w: vec![0.7; 4], dummy_noise: true, keys: vec![key; 4] };
        let whole = hybrid_messages(&lay, Point { dims: DIMS, theta: &theta, psi }, &noise, &NoiseKey::Seeded(5), 2);
        let batches: Vec<Vec<usize>> = (0..3).map(|j| non_sensitive_batch(&lay, j, 6, &NoiseKey::Seeded(5), 2)).collect();
        let split: Vec<Vec<Vec<usize>>> = batches.iter().map(|b| split_by_owner(&lay, b)).collect();
        for (by_owner, want) in split.iter().zip(&whole.non_sensitive) {
            let msg = non_sensitive_message(&lay, Point { dims: DIMS, theta: &theta, psi }, 0.5, by_owner, 6);
            assert_eq!(&msg, want);
        }
        for c in 0..4 {
            let groups: Vec<Vec<usize>> = split.iter().map(|g| g[c].clone()).collect();
            let (mut u, mut v, count) = sensitive_sums(&lay, Point { dims: DIMS, theta: &theta, psi }, 0.5, &groups);
            assert_eq!(count, whole.intersection[c]);
            noise_sensitive_sums((&mut u, &mut v), (0.3, 0.7), &noise.keys[c], 3, c, 2);
            assert_eq!(Some((u, v)), whole.sensitive[c]);
        }
    }

    #[test]
    fn sensitive_stream_ids_do_not_collide_with_public_silos() {
        assert_eq!(sensitive_stream_id(3, 0), 3);
        assert_eq!(sensitive_stream_id(3, 2), 5);
    }
}
