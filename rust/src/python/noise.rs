//! Noise keys and keyed Gaussian streams (`crate::noise`): `NoiseKey`, `gaussian_stream`,
//! `gaussian_release`.

use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use super::errors::BindResult;
use crate::noise::{add_gaussian, NoiseKey, Purpose};

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

/// Draws `n` standard-normal numbers from the release stream named `release_id` under `key`
/// (`crate::noise::release_key`): the bytes are the release's identifier as
/// `pfair.protocol.keys.ReleaseId.encode` writes it.
#[pyfunction]
pub(super) fn gaussian_release<'py>(
    py: Python<'py>,
    key: &PyNoiseKey,
    release_id: &[u8],
    n: usize,
) -> Bound<'py, PyArray1<f64>> {
    let mut v = vec![0.0; n];
    add_gaussian(&mut key.inner.release_stream(release_id), &mut v, 1.0);
    v.into_pyarray(py)
}
