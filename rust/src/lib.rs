//! pfair's Rust core. The modules are plain Rust, usable and tested without Python; with the
//! `python` feature (set by maturin) this file also holds the one thin binding layer that
//! exposes them as the extension module `pfair._core`: it converts types, validates shapes,
//! releases the GIL around long work and maps errors to Python exceptions.

pub mod noise;
pub mod partition;
pub mod psi;
pub mod round;
pub mod sampling;
pub mod sensitivity;

#[cfg(feature = "python")]
mod python {
    use pyo3::prelude::*;

    // ---- partition (rust/src/partition.rs): partitioners and heterogeneity measures ----------
    //
    // Arrays come in zero-copy as contiguous read-only NumPy views (the Python layer makes them
    // contiguous); the work runs without the GIL; silo ids go back as an int64 array that owns the
    // Rust vector (no copy). A rejected argument becomes `ValueError("<argument>: <why>")`.
    mod partition_bindings {
        use numpy::{PyArray1, PyReadonlyArray1};
        use pyo3::exceptions::PyValueError;
        use pyo3::prelude::*;

        use crate::partition;

        fn value_error(e: partition::PartitionError) -> PyErr {
            PyValueError::new_err(e.to_string())
        }

        fn slice<'a, T: numpy::Element>(name: &str, a: &'a PyReadonlyArray1<'_, T>) -> PyResult<&'a [T]> {
            a.as_slice().map_err(|_| PyValueError::new_err(format!("{name}: must be a contiguous 1-D array")))
        }

        /// Seed 003, Algorithm 3: silo id per record, given the partition attribute `values`.
        #[pyfunction]
        #[pyo3(signature = (values, n_silos, heterogeneity, seed, sizes=None))]
        pub fn partition_heterogeneous<'py>(
            py: Python<'py>,
            values: PyReadonlyArray1<'py, f64>,
            n_silos: usize,
            heterogeneity: f64,
            seed: u64,
            sizes: Option<PyReadonlyArray1<'py, i64>>,
        ) -> PyResult<Bound<'py, PyArray1<i64>>> {
            let v = slice("values", &values)?;
            let s = match &sizes {
                Some(a) => Some(slice("sizes", a)?),
                None => None,
            };
            let ids = py
                .allow_threads(|| partition::heterogeneous(v, n_silos, heterogeneity, s, seed))
                .map_err(value_error)?;
            Ok(PyArray1::from_vec(py, ids))
        }

        /// Dirichlet(alpha) skew of category codes `groups` (in [0, n)); exact `sizes` if given.
        #[pyfunction]
        #[pyo3(signature = (groups, n_silos, alpha, seed, sizes=None))]
        pub fn partition_dirichlet<'py>(
            py: Python<'py>,
            groups: PyReadonlyArray1<'py, i64>,
            n_silos: usize,
            alpha: f64,
            seed: u64,
            sizes: Option<PyReadonlyArray1<'py, i64>>,
        ) -> PyResult<Bound<'py, PyArray1<i64>>> {
            let g = slice("groups", &groups)?;
            let s = match &sizes {
                Some(a) => Some(slice("sizes", a)?),
                None => None,
            };
            let ids = py.allow_threads(|| partition::dirichlet(g, n_silos, alpha, s, seed)).map_err(value_error)?;
            Ok(PyArray1::from_vec(py, ids))
        }

        /// Zipf silo sizes summing exactly to `n`.
        #[pyfunction]
        pub fn partition_power_law_sizes<'py>(
            py: Python<'py>,
            n: usize,
            n_silos: usize,
            exponent: f64,
            min_size: usize,
        ) -> PyResult<Bound<'py, PyArray1<i64>>> {
            let sizes = partition::power_law_sizes(n, n_silos, exponent, min_size).map_err(value_error)?;
            Ok(PyArray1::from_vec(py, sizes.into_iter().map(|s| s as i64).collect()))
        }

        /// Size-weighted mean total-variation distance of the silos' category mix to the pooled one.
        #[pyfunction]
        pub fn partition_heterogeneity_tv(
            py: Python<'_>,
            silo_ids: PyReadonlyArray1<'_, i64>,
            groups: PyReadonlyArray1<'_, i64>,
        ) -> PyResult<f64> {
            let (s, g) = (slice("silo_ids", &silo_ids)?, slice("groups", &groups)?);
            py.allow_threads(|| partition::heterogeneity_tv(s, g)).map_err(value_error)
        }

        /// Correlation ratio (between-silo share of the variance) of `values`.
        #[pyfunction]
        pub fn partition_heterogeneity_eta2(
            py: Python<'_>,
            silo_ids: PyReadonlyArray1<'_, i64>,
            values: PyReadonlyArray1<'_, f64>,
        ) -> PyResult<f64> {
            let (s, v) = (slice("silo_ids", &silo_ids)?, slice("values", &values)?);
            py.allow_threads(|| partition::heterogeneity_eta2(s, v)).map_err(value_error)
        }

        pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
            m.add_function(wrap_pyfunction!(partition_heterogeneous, m)?)?;
            m.add_function(wrap_pyfunction!(partition_dirichlet, m)?)?;
            m.add_function(wrap_pyfunction!(partition_power_law_sizes, m)?)?;
            m.add_function(wrap_pyfunction!(partition_heterogeneity_tv, m)?)?;
            m.add_function(wrap_pyfunction!(partition_heterogeneity_eta2, m)?)?;
            Ok(())
        }
    }
    // ---- end partition --------------------------------------------------------------------

    /// The extension module `pfair._core`.
    #[pymodule]
    #[pyo3(name = "_core")]
    fn core_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        partition_bindings::register(m)?;
        Ok(())
    }
}
