//! The binding layer: the extension module `pfair._core`. Each file wraps one part of the core
//! (`psi`: ψ kernels and sensitivities; `noise`: noise keys and their streams; `round`: silos,
//! their keyed draws, rounds and the server's step; `hybrid`: hybrid centralization;
//! `accounting`; `partition`), `convert` holds the conversions and checks they share,
//! `kwargs` the keyword-only arguments that bindings read into parameter structs, and `errors`
//! the one mapping of errors to Python `ValueError`.

use pyo3::prelude::*;

mod accounting;
mod convert;
mod errors;
mod hybrid;
mod kwargs;
mod noise;
mod partition;
mod psi;
mod round;

/// The extension module `pfair._core`.
#[pymodule]
#[pyo3(name = "_core")]
fn core_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // ψ kernels, sensitivities, noise
    m.add_function(wrap_pyfunction!(psi::predict_proba, m)?)?;
    m.add_function(wrap_pyfunction!(psi::predict_counts, m)?)?;
    m.add_function(wrap_pyfunction!(psi::batch_gradients, m)?)?;
    m.add_function(wrap_pyfunction!(psi::sensitivities, m)?)?;
    m.add_function(wrap_pyfunction!(psi::noise_stds, m)?)?;
    m.add_function(wrap_pyfunction!(psi::effective_noise_multiplier, m)?)?;
    // noise keys and keyed draws
    m.add_class::<noise::PyNoiseKey>()?;
    m.add_function(wrap_pyfunction!(noise::gaussian_stream, m)?)?;
    m.add_function(wrap_pyfunction!(noise::gaussian_release, m)?)?;
    // federation and rounds
    m.add_class::<round::PySiloConfig>()?;
    m.add_class::<round::PySiloSet>()?;
    m.add_function(wrap_pyfunction!(round::draw_batch, m)?)?;
    m.add_function(wrap_pyfunction!(round::noise_message, m)?)?;
    m.add_function(wrap_pyfunction!(round::server_update, m)?)?;
    m.add_function(wrap_pyfunction!(round::nonfinite_rows, m)?)?;
    m.add_class::<hybrid::PyHybridSet>()?;
    // privacy accounting
    accounting::register(m)?;
    // partitioners
    m.add_function(wrap_pyfunction!(partition::partition_heterogeneous, m)?)?;
    m.add_function(wrap_pyfunction!(partition::partition_dirichlet, m)?)?;
    m.add_function(wrap_pyfunction!(partition::partition_power_law_sizes, m)?)?;
    m.add_function(wrap_pyfunction!(partition::partition_heterogeneity_tv, m)?)?;
    m.add_function(wrap_pyfunction!(partition::partition_heterogeneity_eta2, m)?)?;
    m.add_function(wrap_pyfunction!(partition::silo_order, m)?)?;
    Ok(())
}
