//! pfair's Rust core. The modules are plain Rust, usable and tested without Python; with the
//! `python` feature (set by maturin) the `python` module adds the one thin binding layer that
//! exposes them as the extension module `pfair._core`: it converts types, validates shapes,
//! releases the GIL around long work and maps errors to Python exceptions. The configuration
//! types check their own arguments (constructors returning [`config::ConfigError`]).

pub mod accounting;
pub mod checkpoint;
pub mod config;
pub mod features;
pub mod hybrid;
pub mod noise;
pub mod partition;
pub mod psi;
pub mod round;
pub mod sampling;
pub mod schedule;
pub mod sensitivity;
pub mod server;
pub mod subspace;
pub mod threads;

#[cfg(feature = "python")]
mod python;
