//! The one place that turns a rejected argument into a Python exception: every binding error is
//! a `ValueError` whose text is the message below. Accounting errors read
//! `"<argument>: <message>"`, partition errors `"<argument>: <why>"` and configuration errors
//! their message (both their `Display`), and the binding layer's own checks their message as
//! written.

use std::fmt;

use pyo3::exceptions::PyValueError;
use pyo3::PyErr;

use crate::accounting::AccountingError;
use crate::config::ConfigError;
use crate::partition::PartitionError;

/// A rejected argument: the text of the `ValueError` it becomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct BindingError(String);

/// Result of a binding-layer check; `?` turns its error into `ValueError` in a `PyResult`.
pub(super) type BindResult<T> = Result<T, BindingError>;

impl From<String> for BindingError {
    fn from(message: String) -> Self {
        BindingError(message)
    }
}

impl From<&str> for BindingError {
    fn from(message: &str) -> Self {
        BindingError(message.to_string())
    }
}

impl From<AccountingError> for BindingError {
    fn from(e: AccountingError) -> Self {
        BindingError(format!("{}: {}", e.argument(), e))
    }
}

impl From<PartitionError> for BindingError {
    fn from(e: PartitionError) -> Self {
        BindingError(e.to_string())
    }
}

impl From<ConfigError> for BindingError {
    fn from(e: ConfigError) -> Self {
        BindingError(e.to_string())
    }
}

impl fmt::Display for BindingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<BindingError> for PyErr {
    fn from(e: BindingError) -> Self {
        PyValueError::new_err(e.0)
    }
}

impl From<AccountingError> for PyErr {
    fn from(e: AccountingError) -> Self {
        BindingError::from(e).into()
    }
}

impl From<PartitionError> for PyErr {
    fn from(e: PartitionError) -> Self {
        BindingError::from(e).into()
    }
}

impl From<ConfigError> for PyErr {
    fn from(e: ConfigError) -> Self {
        BindingError::from(e).into()
    }
}

/// `ValueError(message)`, for the places where there is no `Result` to apply `?` to.
pub(super) fn value_error(message: impl Into<BindingError>) -> PyErr {
    message.into().into()
}
