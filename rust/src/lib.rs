//! pfair's Rust core. The modules are plain Rust, usable and tested without Python; with the
//! `python` feature (set by maturin) this file also holds the one thin binding layer that
//! exposes them as the extension module `pfair._core`: it converts types, validates shapes,
//! releases the GIL around long work and maps errors to Python exceptions.

pub mod accounting;
pub mod noise;
pub mod psi;
pub mod round;
pub mod sampling;
pub mod sensitivity;

#[cfg(feature = "python")]
mod python {
    use pyo3::prelude::*;

    // ---- accounting bindings (crate::accounting) -------------------------------------------
    // Thin wrappers: convert types, release the GIL around order sweeps and bisection, and map
    // `AccountingError` to `ValueError("<argument>: <message>")`.
    mod accounting_py {
        use crate::accounting::{self as acc, AccountingError, Event, Scheme};
        use pyo3::exceptions::PyValueError;
        use pyo3::prelude::*;

        fn value_error(e: AccountingError) -> PyErr {
            PyValueError::new_err(format!("{}: {}", e.argument(), e))
        }

        fn scheme(name: &str) -> PyResult<Scheme> {
            Scheme::parse(name).map_err(value_error)
        }

        fn orders_or_default(orders: Option<Vec<f64>>) -> Vec<f64> {
            orders.unwrap_or_else(acc::default_orders)
        }

        /// The default RDP orders.
        #[pyfunction]
        pub fn default_orders() -> Vec<f64> {
            acc::default_orders()
        }

        /// Per-step RDP of the Gaussian mechanism, α/(2z²).
        #[pyfunction]
        pub fn rdp_gaussian(noise_multiplier: f64, order: f64) -> PyResult<f64> {
            acc::rdp_gaussian(noise_multiplier, order).map_err(value_error)
        }

        /// Per-step RDP, Poisson sampling, add/remove adjacency (MTZ 2019).
        #[pyfunction]
        pub fn rdp_poisson(sample_rate: f64, noise_multiplier: f64, order: f64) -> PyResult<f64> {
            acc::rdp_poisson(sample_rate, noise_multiplier, order).map_err(value_error)
        }

        /// Per-step RDP, fixed-size sampling without replacement, replace-one (WBK 2019).
        #[pyfunction]
        pub fn rdp_without_replacement(sample_rate: f64, noise_multiplier: f64, order: f64) -> PyResult<f64> {
            acc::rdp_without_replacement(sample_rate, noise_multiplier, order).map_err(value_error)
        }

        /// Per-step RDP, Poisson sampling, replace-one adjacency; z against add/remove sensitivity.
        #[pyfunction]
        pub fn rdp_poisson_replace_one(sample_rate: f64, noise_multiplier: f64, order: f64) -> PyResult<f64> {
            acc::rdp_poisson_replace_one(sample_rate, noise_multiplier, order).map_err(value_error)
        }

        /// Total RDP of `steps` steps of one scheme, per order.
        #[pyfunction]
        #[pyo3(signature = (sampling, sample_rate, noise_multiplier, steps, orders=None))]
        pub fn rdp_curve(
            py: Python<'_>,
            sampling: &str,
            sample_rate: f64,
            noise_multiplier: f64,
            steps: u64,
            orders: Option<Vec<f64>>,
        ) -> PyResult<Vec<f64>> {
            let e = Event { scheme: scheme(sampling)?, q: sample_rate, z: noise_multiplier, steps };
            let o = orders_or_default(orders);
            py.allow_threads(|| acc::rdp_curve(&e, &o)).map_err(value_error)
        }

        /// Total RDP of heterogeneous events `(sampling, sample_rate, noise_multiplier, steps)`.
        #[pyfunction]
        #[pyo3(signature = (events, orders=None))]
        pub fn rdp_composed(
            py: Python<'_>,
            events: Vec<(String, f64, f64, u64)>,
            orders: Option<Vec<f64>>,
        ) -> PyResult<Vec<f64>> {
            let evs = events
                .iter()
                .map(|(s, q, z, t)| Ok(Event { scheme: scheme(s)?, q: *q, z: *z, steps: *t }))
                .collect::<PyResult<Vec<Event>>>()?;
            let o = orders_or_default(orders);
            py.allow_threads(|| acc::rdp_composed(&evs, &o)).map_err(value_error)
        }

        /// (ε, optimal order) from an RDP curve (Balle et al. 2020).
        #[pyfunction]
        pub fn epsilon_from_rdp(orders: Vec<f64>, rdp: Vec<f64>, delta: f64) -> PyResult<(f64, f64)> {
            acc::epsilon_from_rdp(&orders, &rdp, delta).map_err(value_error)
        }

        /// (δ, optimal order) from an RDP curve (Balle et al. 2020).
        #[pyfunction]
        pub fn delta_from_rdp(orders: Vec<f64>, rdp: Vec<f64>, epsilon: f64) -> PyResult<(f64, f64)> {
            acc::delta_from_rdp(&orders, &rdp, epsilon).map_err(value_error)
        }

        /// (ε, optimal order) of `steps` steps of one scheme.
        #[pyfunction]
        #[pyo3(signature = (noise_multiplier, sample_rate, steps, delta, sampling, orders=None))]
        pub fn epsilon_for(
            py: Python<'_>,
            noise_multiplier: f64,
            sample_rate: f64,
            steps: u64,
            delta: f64,
            sampling: &str,
            orders: Option<Vec<f64>>,
        ) -> PyResult<(f64, f64)> {
            let s = scheme(sampling)?;
            let o = orders_or_default(orders);
            py.allow_threads(|| acc::epsilon_for(noise_multiplier, sample_rate, steps, delta, s, &o))
                .map_err(value_error)
        }

        /// (δ, optimal order) of `steps` steps of one scheme.
        #[pyfunction]
        #[pyo3(signature = (noise_multiplier, sample_rate, steps, epsilon, sampling, orders=None))]
        pub fn delta_for(
            py: Python<'_>,
            noise_multiplier: f64,
            sample_rate: f64,
            steps: u64,
            epsilon: f64,
            sampling: &str,
            orders: Option<Vec<f64>>,
        ) -> PyResult<(f64, f64)> {
            let s = scheme(sampling)?;
            let o = orders_or_default(orders);
            py.allow_threads(|| acc::delta_for(noise_multiplier, sample_rate, steps, epsilon, s, &o))
                .map_err(value_error)
        }

        /// Smallest-found noise multiplier meeting (ε, δ) (bisection; ε ≤ target, within 2%).
        #[pyfunction]
        pub fn noise_multiplier_for(
            py: Python<'_>,
            epsilon: f64,
            delta: f64,
            sample_rate: f64,
            steps: u64,
            sampling: &str,
        ) -> PyResult<f64> {
            let s = scheme(sampling)?;
            py.allow_threads(|| acc::noise_multiplier_for(epsilon, delta, sample_rate, steps, s))
                .map_err(value_error)
        }

        pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
            m.add_function(wrap_pyfunction!(default_orders, m)?)?;
            m.add_function(wrap_pyfunction!(rdp_gaussian, m)?)?;
            m.add_function(wrap_pyfunction!(rdp_poisson, m)?)?;
            m.add_function(wrap_pyfunction!(rdp_without_replacement, m)?)?;
            m.add_function(wrap_pyfunction!(rdp_poisson_replace_one, m)?)?;
            m.add_function(wrap_pyfunction!(rdp_curve, m)?)?;
            m.add_function(wrap_pyfunction!(rdp_composed, m)?)?;
            m.add_function(wrap_pyfunction!(epsilon_from_rdp, m)?)?;
            m.add_function(wrap_pyfunction!(delta_from_rdp, m)?)?;
            m.add_function(wrap_pyfunction!(epsilon_for, m)?)?;
            m.add_function(wrap_pyfunction!(delta_for, m)?)?;
            m.add_function(wrap_pyfunction!(noise_multiplier_for, m)?)?;
            m.add("CALIBRATION_TOL", crate::accounting::CALIBRATION_TOL)?;
            Ok(())
        }
    }
    // ---- end accounting bindings -------------------------------------------------------------

    /// The extension module `pfair._core`.
    #[pymodule]
    #[pyo3(name = "_core")]
    fn core_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        accounting_py::register(m)?;
        Ok(())
    }
}
