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

    /// The extension module `pfair._core`.
    #[pymodule]
    #[pyo3(name = "_core")]
    fn core_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        Ok(())
    }
}
