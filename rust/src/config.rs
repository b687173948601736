//! Errors of the configuration constructors: [`crate::sampling::Sampling`],
//! [`crate::psi::Protect`] and [`crate::psi::Fairness`], [`crate::round::SiloConfig`] and
//! [`crate::server::ServerConfig`], [`crate::hybrid::HybridNoise`]. Each constructor checks its
//! arguments and returns a [`ConfigError`] whose `Display` is the message the Python binding
//! raises as `ValueError`.

use std::fmt;

/// A rejected configuration argument. Never a panic.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfigError {
    /// A clipping bound is not > 0 (`inf` means no clipping).
    Clip { argument: &'static str, value: f64 },
    /// A noise std, learning rate or λ is negative, NaN or infinite.
    NotFiniteNonNegative { argument: &'static str, value: f64 },
    /// A without-replacement batch of size 0.
    BatchSize,
    /// A Poisson sampling rate outside (0, 1].
    SampleRate(f64),
    /// The radius of the `W` ball is not > 0 (`inf` means no projection).
    WRadius(f64),
    /// Unknown sampling scheme name.
    UnknownSampling(String),
    /// Unknown protection mode name.
    UnknownProtect(String),
    /// Unknown fairness notion name.
    UnknownFairness(String),
    /// The hybrid noise needs one `sigma_theta`, one `sigma_w` and one key per sensitive silo.
    HybridNoiseCount { n_sensitive: usize },
    /// A hybrid noise std is negative, NaN or infinite.
    HybridNoiseStd(f64),
    /// The hybrid `clip_theta` is not > 0 (`inf` means no clipping).
    HybridClipTheta(f64),
    /// The hybrid batch size is 0 or larger than non-sensitive silo `silo`.
    HybridBatchSize { batch_size: usize, silo: usize, silo_size: usize },
    /// A `theta_subspace` basis that is not a finite orthonormal `(d+1) × r` array, or one asked
    /// for where it does not apply (record mode, another θ length).
    Subspace(String),
    /// An adaptive clip quantile outside (0, 1], or asked for in record mode.
    ClipQuantile(String),
    /// Row scales of `h_W`'s noise that are not finite and > 0, or asked for in record mode.
    WRows(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Clip { argument, value } => {
                write!(f, "{argument} must be > 0 (use inf for no clipping), got {value}")
            }
            ConfigError::NotFiniteNonNegative { argument, value } => {
                write!(f, "{argument} must be finite and >= 0, got {value}")
            }
            ConfigError::BatchSize => f.write_str("batch_size must be >= 1"),
            ConfigError::SampleRate(q) => write!(f, "sample_rate must be in (0, 1], got {q}"),
            ConfigError::WRadius(_) => f.write_str("w_radius must be > 0 (inf for no projection)"),
            ConfigError::UnknownSampling(name) => write!(
                f,
                "sampling={name:?} is unknown; use 'without_replacement', 'poisson', 'shuffle' or 'full_batch'"
            ),
            ConfigError::UnknownProtect(name) => {
                write!(f, "protect={name:?} is unknown; use 'attribute' or 'record'")
            }
            ConfigError::UnknownFairness(name) => write!(
                f,
                "fairness={name:?} is unknown; use 'demographic_parity', 'equalized_odds', 'equal_opportunity' or \
                 'false_positive_rate_parity'"
            ),
            ConfigError::HybridNoiseCount { n_sensitive } => write!(
                f,
                "need one sigma_theta, one sigma_w and one noise key per sensitive silo ({n_sensitive})"
            ),
            ConfigError::HybridNoiseStd(_) => f.write_str("noise stds must be finite and >= 0"),
            ConfigError::HybridClipTheta(_) => f.write_str("clip_theta must be > 0 (inf for no clipping)"),
            ConfigError::HybridBatchSize { batch_size, silo, silo_size } => write!(
                f,
                "batch_size={batch_size} must be in 1..={silo_size} (non-sensitive silo {silo})"
            ),
            ConfigError::Subspace(why) => write!(f, "theta_subspace: {why}"),
            ConfigError::ClipQuantile(why) => f.write_str(why),
            ConfigError::WRows(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Each `(argument, value)` must be finite and ≥ 0 (noise stds, learning rates, λ); the first
/// that is not is the error.
pub fn check_finite_non_negative(args: &[(&'static str, f64)]) -> Result<(), ConfigError> {
    match args.iter().find(|(_, v)| !(v.is_finite() && *v >= 0.0)) {
        Some(&(argument, value)) => Err(ConfigError::NotFiniteNonNegative { argument, value }),
        None => Ok(()),
    }
}

/// `v > 0` (false for NaN; true for `inf`, which means "no bound" for clips and radii).
pub(crate) fn is_positive(v: f64) -> bool {
    v > 0.0
}

/// Each `(argument, value)` must be a clipping bound, > 0 (`inf`: no clipping); the first that
/// is not is the error.
pub fn check_clips(args: &[(&'static str, f64)]) -> Result<(), ConfigError> {
    match args.iter().find(|(_, v)| !is_positive(*v)) {
        Some(&(argument, value)) => Err(ConfigError::Clip { argument, value }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finite_non_negative_accepts_zero_and_names_the_first_bad_argument() {
        assert_eq!(check_finite_non_negative(&[("a", 0.0), ("b", 2.5)]), Ok(()));
        let e = check_finite_non_negative(&[("a", 1.0), ("b", -1.0), ("c", f64::NAN)]).unwrap_err();
        assert_eq!(e.to_string(), "b must be finite and >= 0, got -1");
        for (v, shown) in [(f64::NAN, "NaN"), (f64::INFINITY, "inf"), (-0.5, "-0.5")] {
            let e = check_finite_non_negative(&[("lam", v)]).unwrap_err();
            assert_eq!(e.to_string(), format!("lam must be finite and >= 0, got {shown}"));
        }
    }

    #[test]
    fn clips_accept_inf_and_reject_zero_negative_and_nan() {
        assert_eq!(check_clips(&[("clip_theta", f64::INFINITY), ("clip_w", 1e-9)]), Ok(()));
        for (v, shown) in [(0.0, "0"), (-1.0, "-1"), (f64::NAN, "NaN"), (f64::NEG_INFINITY, "-inf")] {
            let e = check_clips(&[("clip_loss", 1.0), ("clip_w", v)]).unwrap_err();
            assert!(matches!(e, ConfigError::Clip { argument: "clip_w", .. }), "{e:?}");
            assert_eq!(e.to_string(), format!("clip_w must be > 0 (use inf for no clipping), got {shown}"));
        }
    }
}
