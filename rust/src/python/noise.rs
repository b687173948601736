//! Noise keys and keyed draws (`crate::noise`, `crate::round`): `NoiseKey`, `gaussian_stream`,
//! `draw_batch`, `noise_message`.

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use super::errors::{value_error, BindResult};
use super::round::PySiloConfig;
use crate::noise::{add_gaussian, NoiseKey, Purpose};
use crate::psi::BatchGradients;
use crate::round::{self, SiloKeys};

/// The key of a silo's random streams: secret (256 bits of OS entropy) or a public seed. A secret
/// key cannot be read, printed or pickled; it lives only as long as the party that drew it.
#[pyclass(name = "NoiseKey", frozen, module = "pfair._core")]
#[derive(Clone)]
pub(super) struct PyNoiseKey {
    pub(super) inner: NoiseKey,
}

#[pymethods]
impl PyNoiseKey {
    /// A fresh secret key from the operating system's entropy.
    #[staticmethod]
    fn secret() -> PyResult<Self> {
        let inner = NoiseKey::from_entropy().map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))?;
        Ok(PyNoiseKey { inner })
    }

    /// A secret key from 32 bytes that the silo keeps itself (for instance a deployed silo's
    /// batch key of a run, drawn once with `os.urandom(32)` and saved in its own state, so that
    /// every message of the run draws from the same epoch permutations). The bytes must be
    /// secret and uniformly random; they are not kept anywhere else by the key.
    #[staticmethod]
    fn from_secret(key: &[u8]) -> BindResult<Self> {
        let key: [u8; 32] =
            key.try_into().map_err(|_| format!("key must be 32 bytes (os.urandom(32)), got {}", key.len()))?;
        Ok(PyNoiseKey { inner: NoiseKey::Secret(key) })
    }

    /// A key derived from a public seed: reproducible by anyone who knows it.
    #[staticmethod]
    fn seeded(seed: u64) -> Self {
        PyNoiseKey { inner: NoiseKey::Seeded(seed) }
    }

    /// Whether the key is secret.
    #[getter]
    fn is_secret(&self) -> bool {
        self.inner.is_secret()
    }

    fn __repr__(&self) -> String {
        match &self.inner {
            NoiseKey::Seeded(seed) => format!("NoiseKey.seeded({seed})"),
            NoiseKey::Secret(_) => "NoiseKey(secret)".to_string(),
        }
    }

    fn __reduce__(&self) -> PyResult<PyObject> {
        Err(PyTypeError::new_err(
            "a NoiseKey is not serialisable: a secret key must never leave its silo's process (seeded keys are \
             rebuilt from their seed with NoiseKey.seeded)",
        ))
    }
}

fn purpose_from(name: &str) -> BindResult<Purpose> {
    match name {
        "noise" => Ok(Purpose::Noise),
        "histogram" => Ok(Purpose::Other),
        other => Err(format!("purpose={other:?} is unknown; use 'noise' or 'histogram'").into()),
    }
}

/// Draws `n` standard-normal numbers from the stream `(silo, round, purpose)` of `key`, purpose
/// `"noise"` (a round's message noise) or `"histogram"` (the DP histogram of s).
#[pyfunction]
#[pyo3(signature = (key, silo, round, n, *, purpose="noise"))]
pub(super) fn gaussian_stream<'py>(
    py: Python<'py>,
    key: &PyNoiseKey,
    silo: u64,
    round: u64,
    n: usize,
    purpose: &str,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let purpose = purpose_from(purpose)?;
    let mut v = vec![0.0; n];
    add_gaussian(&mut key.inner.stream(silo, round, purpose), &mut v, 1.0);
    Ok(v.into_pyarray(py))
}

/// Row indices of the batch of silo `silo` (with `n` records) in round `round`, as the sampling of
/// `config` draws it from `key`'s batch stream.
#[pyfunction]
#[pyo3(signature = (config, n, *, key, silo, round))]
pub(super) fn draw_batch<'py>(
    py: Python<'py>,
    config: &PySiloConfig,
    n: usize,
    key: &PyNoiseKey,
    silo: u64,
    round: u64,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    if n == 0 {
        return Err(value_error("n must be >= 1"));
    }
    if let crate::sampling::Sampling::WithoutReplacement { m } | crate::sampling::Sampling::Shuffle { m } = config.inner.sampling {
        if m > n {
            return Err(value_error(format!("batch_size={m} is larger than the silo, which has {n} records")));
        }
    }
    let keys = SiloKeys { batch: key.inner.clone(), noise: key.inner.clone() };
    let batch = round::draw_batch(&config.inner, &keys, silo, round, n);
    Ok(batch.into_iter().map(|i| i as i64).collect::<Vec<_>>().into_pyarray(py))
}

type Parts<'py> = (
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<f64>>,
);

/// The five exact parts of a batch with the round's noise added (`round::noise_message`): the
/// loss gradient in record mode, then `h_θ`, then `h_W`, from `key`'s stream `(silo, round)`;
/// the ψ parts are zeroed when the config does not send them. Returns new arrays.
#[pyfunction]
#[pyo3(signature = (loss_grad, psi_theta_sfree, psi_theta, psi_w_sfree, psi_w, config, *, key, silo, round))]
#[allow(clippy::too_many_arguments)]
pub(super) fn noise_message<'py>(
    py: Python<'py>,
    loss_grad: PyReadonlyArray1<'py, f64>,
    psi_theta_sfree: PyReadonlyArray1<'py, f64>,
    psi_theta: PyReadonlyArray1<'py, f64>,
    psi_w_sfree: PyReadonlyArray1<'py, f64>,
    psi_w: PyReadonlyArray1<'py, f64>,
    config: &PySiloConfig,
    key: &PyNoiseKey,
    silo: u64,
    round: u64,
) -> PyResult<Parts<'py>> {
    let v = |a: &PyReadonlyArray1<'py, f64>| -> Vec<f64> { a.as_array().iter().copied().collect() };
    let mut msg = BatchGradients {
        loss_grad: v(&loss_grad),
        psi_theta_sfree: v(&psi_theta_sfree),
        psi_theta: v(&psi_theta),
        psi_w_sfree: v(&psi_w_sfree),
        psi_w: v(&psi_w),
        ..Default::default()
    };
    let t = msg.loss_grad.len();
    if msg.psi_theta_sfree.len() != t || msg.psi_theta.len() != t || msg.psi_w_sfree.len() != msg.psi_w.len() {
        return Err(value_error("the θ parts must have one length and the W parts another"));
    }
    let keys = SiloKeys { batch: key.inner.clone(), noise: key.inner.clone() };
    round::noise_message(&mut msg, &config.inner, &keys, silo, round);
    Ok((
        msg.loss_grad.into_pyarray(py),
        msg.psi_theta_sfree.into_pyarray(py),
        msg.psi_theta.into_pyarray(py),
        msg.psi_w_sfree.into_pyarray(py),
        msg.psi_w.into_pyarray(py),
    ))
}
