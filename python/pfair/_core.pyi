"""Type stubs of the Rust extension module ``pfair._core`` (see ``rust/src/lib.rs``)."""

__version__: str
