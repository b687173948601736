//! The server's step of a SteFFLe round (Gupta et al. 2024, Algorithm 1): it averages the silos'
//! messages and takes a descent step in θ and a projected ascent step in W ([`server_update`]).

use rayon::prelude::*;

use crate::config::{check_finite_non_negative, is_positive, ConfigError};
use crate::psi::BatchGradients;

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
            for ((wt, a), h) in w.iter_mut().zip(&m.psi_w_sfree).zip(&m.psi_w) {
                *wt += b * (a + h);
            }
        }
    }
    project_blocks(w, block_len, cfg.w_radius);
}

/// Terms of θ (messages × θ's length) from which [`server_update`] splits θ's coordinates
/// between threads (1,000 silos of a 101-coordinate θ: 101,000).
pub const SERVER_PARALLEL_TERMS: usize = 1 << 16;


#[cfg(test)]
mod tests {
    use super::*;
    use crate::psi::norm;

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
    fn project_blocks_clips_each_block() {
        let mut w = vec![3.0, 4.0, 0.3, 0.4];
        project_blocks(&mut w, 2, 1.0);
        assert!((norm(&w[..2]) - 1.0).abs() < 1e-12);
        assert_eq!(&w[2..], &[0.3, 0.4]);
        project_blocks(&mut w, 2, f64::INFINITY);
        assert!((norm(&w[..2]) - 1.0).abs() < 1e-12);
    }

    #[test]
    // The test spells the formula with indices, as the docs write it.
    #[allow(clippy::needless_range_loop)]
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
}
