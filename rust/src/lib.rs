//! pfair's Rust core. The modules are plain Rust, usable and tested without Python; with the
//! `python` feature (set by maturin) this file also holds the one thin binding layer that
//! exposes them as the extension module `pfair._core`.

pub mod noise;
pub mod psi;
pub mod round;
pub mod sampling;
pub mod sensitivity;

#[cfg(feature = "python")]
mod bindings;
