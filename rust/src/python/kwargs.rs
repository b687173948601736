//! Keyword-only arguments read into parameter structs: a binding whose Python signature has many
//! keyword-only arguments takes them as `**kwargs` and reads them here (`SiloSet.run_rounds` took
//! 14 parameters, `HybridSet.run_rounds` 17). The Python calls are unchanged: the same keywords,
//! the same required ones and defaults, and an unknown or missing keyword is a `TypeError` naming
//! it, as for a Python function with these keyword-only parameters ([`keywords`]).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::noise::PyNoiseKey;
use crate::server::ServerConfig;

/// The server's step (`lam`, `lr_theta`, `lr_w`, `w_radius`): keywords of `server_update` and of
/// both epoch bindings.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(super) struct ServerStep {
    lam: f64,
    lr_theta: f64,
    lr_w: f64,
    w_radius: f64,
}

pub(super) const SERVER_STEP: [&str; 4] = ["lam", "lr_theta", "lr_w", "w_radius"];

impl ServerStep {
    /// The server's step, checked (`ServerConfig::new`).
    pub(super) fn config(&self) -> PyResult<ServerConfig> {
        Ok(ServerConfig::new(self.lam, self.lr_theta, self.lr_w, self.w_radius)?)
    }
}

/// The rounds an epoch binding runs: `n_rounds` from `start`.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(super) struct RoundRange {
    pub(super) start: u64,
    pub(super) n_rounds: u64,
}

const ROUND_RANGE: [&str; 2] = ["start", "n_rounds"];

/// `SiloSet.run_rounds`'s other keywords: each silo's batch and noise keys, and the round after
/// which the state is kept (`snapshot_round=None`: none).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(super) struct SiloRoundsArgs {
    pub(super) batch_keys: Vec<PyNoiseKey>,
    pub(super) noise_keys: Vec<PyNoiseKey>,
    #[pyo3(default)]
    pub(super) snapshot_round: Option<u64>,
}

/// `HybridSet.run_rounds`'s other keywords: the sensitive silos' noise (`batch_size`, `clip_theta`,
/// `sigma_theta`, `sigma_w`, `dummy_noise=False`, `noise_keys`) and the batch key.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(super) struct HybridRoundsArgs {
    pub(super) batch_size: usize,
    pub(super) clip_theta: f64,
    pub(super) sigma_theta: Vec<f64>,
    pub(super) sigma_w: Vec<f64>,
    #[pyo3(default)]
    pub(super) dummy_noise: bool,
    pub(super) noise_keys: Vec<PyNoiseKey>,
    pub(super) batch_key: PyNoiseKey,
}

/// A silo's keys and round (`SiloSet.step`).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(super) struct RoundKeys {
    pub(super) batch_key: PyNoiseKey,
    pub(super) noise_key: PyNoiseKey,
    pub(super) round: u64,
}

/// The stream a message's noise is drawn from: `key`'s stream `(silo, round)` (`noise_message`).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(super) struct NoiseStream {
    pub(super) key: PyNoiseKey,
    pub(super) silo: u64,
    pub(super) round: u64,
}

/// A non-sensitive silo's round (`HybridSet.non_sensitive_step`).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(super) struct NonSensitiveArgs {
    pub(super) batch_size: usize,
    pub(super) clip_theta: f64,
    pub(super) batch_key: PyNoiseKey,
    pub(super) round: u64,
}

/// A sensitive silo's round (`HybridSet.sensitive_step`): no noise unless `noise_key` is given.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(super) struct SensitiveArgs {
    pub(super) clip_theta: f64,
    #[pyo3(default)]
    pub(super) sigma_theta: f64,
    #[pyo3(default)]
    pub(super) sigma_w: f64,
    #[pyo3(default)]
    pub(super) noise_key: Option<PyNoiseKey>,
    #[pyo3(default)]
    pub(super) round: u64,
}

/// `server_update(..., **kwargs)`'s keywords.
pub(super) fn server_step(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<ServerStep> {
    keywords("server_update", kwargs, &[&SERVER_STEP], &[])?.extract()
}

/// `SiloSet.step(..., **kwargs)`'s keywords.
pub(super) fn round_keys(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<RoundKeys> {
    keywords("SiloSet.step", kwargs, &[&["batch_key", "noise_key", "round"]], &[])?.extract()
}

/// `noise_message(..., **kwargs)`'s keywords.
pub(super) fn noise_stream(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<NoiseStream> {
    keywords("noise_message", kwargs, &[&["key", "silo", "round"]], &[])?.extract()
}

/// `SiloSet.run_rounds(..., **kwargs)`'s keywords.
pub(super) fn silo_rounds(
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<(ServerStep, RoundRange, SiloRoundsArgs)> {
    let required: [&[&str]; 3] = [&SERVER_STEP, &ROUND_RANGE, &["batch_keys", "noise_keys"]];
    let kw = keywords("SiloSet.run_rounds", kwargs, &required, &["snapshot_round"])?;
    Ok((kw.extract()?, kw.extract()?, kw.extract()?))
}

const HYBRID_ROUNDS: [&str; 6] = ["batch_size", "clip_theta", "sigma_theta", "sigma_w", "noise_keys", "batch_key"];

/// `HybridSet.run_rounds(..., **kwargs)`'s keywords.
pub(super) fn hybrid_rounds(
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<(ServerStep, RoundRange, HybridRoundsArgs)> {
    let required: [&[&str]; 3] = [&SERVER_STEP, &ROUND_RANGE, &HYBRID_ROUNDS];
    let kw = keywords("HybridSet.run_rounds", kwargs, &required, &["dummy_noise"])?;
    Ok((kw.extract()?, kw.extract()?, kw.extract()?))
}

/// `HybridSet.messages(..., **kwargs)`'s keywords: the noise of [`HybridRoundsArgs`] and the `round`.
pub(super) fn hybrid_round(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<(HybridRoundsArgs, u64)> {
    let kw = keywords("HybridSet.messages", kwargs, &[&HYBRID_ROUNDS, &["round"]], &["dummy_noise"])?;
    Ok((kw.extract()?, kw.get_item("round")?.extract()?))
}

/// `HybridSet.non_sensitive_step(..., **kwargs)`'s keywords.
pub(super) fn non_sensitive(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<NonSensitiveArgs> {
    let required = ["batch_size", "clip_theta", "batch_key", "round"];
    keywords("HybridSet.non_sensitive_step", kwargs, &[&required], &[])?.extract()
}

/// `HybridSet.sensitive_step(..., **kwargs)`'s keywords.
pub(super) fn sensitive(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<SensitiveArgs> {
    let optional = ["sigma_theta", "sigma_w", "noise_key", "round"];
    keywords("HybridSet.sensitive_step", kwargs, &[&["clip_theta"]], &optional)?.extract()
}

/// The keywords as a mapping, after refusing an unknown one or a missing required one.
pub(super) fn keywords<'py>(
    function: &str,
    kwargs: Option<&Bound<'py, PyDict>>,
    required: &[&[&str]],
    optional: &[&str],
) -> PyResult<Bound<'py, PyAny>> {
    let Some(kwargs) = kwargs else {
        // No keyword at all: name the first required one, as a missing one among others is named.
        return match required.iter().flat_map(|names| names.iter()).next() {
            Some(name) => Err(PyTypeError::new_err(format!("{function}() missing required keyword argument '{name}'"))),
            None => Err(PyTypeError::new_err(format!("{function}() takes keyword arguments; none were given"))),
        };
    };
    let mut known = 0;
    for name in required.iter().flat_map(|names| names.iter()) {
        if !kwargs.contains(*name)? {
            return Err(PyTypeError::new_err(format!("{function}() missing required keyword argument '{name}'")));
        }
        known += 1;
    }
    for name in optional {
        known += usize::from(kwargs.contains(*name)?);
    }
    if kwargs.len() > known {
        // Some keyword is neither required nor optional: name it (the only path that reads the keys).
        for key in kwargs.keys() {
            let key: String = key.extract()?;
            if !required.iter().any(|names| names.contains(&key.as_str())) && !optional.contains(&key.as_str()) {
                return Err(PyTypeError::new_err(format!("{function}() got an unexpected keyword argument '{key}'")));
            }
        }
    }
    Ok(kwargs.as_any().clone())
}
