//! The keyword arguments of the two epoch bindings, `SiloSet.run_rounds` and
//! `HybridSet.run_rounds` (and of `HybridSet.messages`, one hybrid round), read from their `**kwargs` into structs instead of one Rust parameter
//! each (they took 14 and 17). The Python calls are unchanged: the same keywords, the same required
//! ones and defaults, and an unknown or missing keyword is a `TypeError` naming it, as for a Python
//! function with these keyword-only parameters.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::noise::PyNoiseKey;
use crate::server::ServerConfig;

/// The server's step (`lam`, `lr_theta`, `lr_w`, `w_radius`) and the rounds to run (`start`,
/// `n_rounds`): the keywords both epoch bindings take.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(super) struct EpochRounds {
    lam: f64,
    lr_theta: f64,
    lr_w: f64,
    w_radius: f64,
    pub(super) start: u64,
    pub(super) n_rounds: u64,
}

const EPOCH_ROUNDS: [&str; 6] = ["lam", "lr_theta", "lr_w", "w_radius", "start", "n_rounds"];

impl EpochRounds {
    /// The server's step, checked (`ServerConfig::new`).
    pub(super) fn server(&self) -> PyResult<ServerConfig> {
        Ok(ServerConfig::new(self.lam, self.lr_theta, self.lr_w, self.w_radius)?)
    }
}

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

/// `SiloSet.run_rounds(..., **kwargs)`'s keywords.
pub(super) fn silo_rounds(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<(EpochRounds, SiloRoundsArgs)> {
    let kw = keywords("SiloSet.run_rounds", kwargs, &[&EPOCH_ROUNDS, &["batch_keys", "noise_keys"]], &["snapshot_round"])?;
    Ok((kw.extract()?, kw.extract()?))
}

const HYBRID_ROUNDS: [&str; 6] = ["batch_size", "clip_theta", "sigma_theta", "sigma_w", "noise_keys", "batch_key"];

/// `HybridSet.run_rounds(..., **kwargs)`'s keywords.
pub(super) fn hybrid_rounds(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<(EpochRounds, HybridRoundsArgs)> {
    let kw = keywords("HybridSet.run_rounds", kwargs, &[&EPOCH_ROUNDS, &HYBRID_ROUNDS], &["dummy_noise"])?;
    Ok((kw.extract()?, kw.extract()?))
}

/// `HybridSet.messages(..., **kwargs)`'s keywords: the noise of [`HybridRoundsArgs`] and the `round`.
pub(super) fn hybrid_round(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<(HybridRoundsArgs, u64)> {
    let kw = keywords("HybridSet.messages", kwargs, &[&HYBRID_ROUNDS, &["round"]], &["dummy_noise"])?;
    Ok((kw.extract()?, kw.get_item("round")?.extract()?))
}

/// The keywords as a mapping, after refusing an unknown one or a missing required one.
fn keywords<'py>(
    function: &str,
    kwargs: Option<&Bound<'py, PyDict>>,
    required: &[&[&str]],
    optional: &[&str],
) -> PyResult<Bound<'py, PyAny>> {
    let kwargs = kwargs.ok_or_else(|| PyTypeError::new_err(format!("{function}() missing its keyword arguments")))?;
    for key in kwargs.keys() {
        let key: String = key.extract()?;
        if !required.iter().any(|names| names.contains(&key.as_str())) && !optional.contains(&key.as_str()) {
            return Err(PyTypeError::new_err(format!("{function}() got an unexpected keyword argument '{key}'")));
        }
    }
    for name in required.iter().flat_map(|names| names.iter()) {
        if !kwargs.contains(*name)? {
            return Err(PyTypeError::new_err(format!("{function}() missing required keyword argument '{name}'")));
        }
    }
    Ok(kwargs.as_any().clone())
}
