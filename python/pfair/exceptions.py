"""pfair's warnings and exceptions, in one place."""

from __future__ import annotations


class PrivacyWarning(UserWarning):
    """The guarantee is weaker than it looks: reproducible noise, proportions computed from
    private data, exact diagnostics, or noise that delivers more ε than its target."""


class PrivacyBudgetExceeded(RuntimeError):
    """Raised when a silo would send a message past its (ε, δ) budget; nothing was sent or recorded."""


class ReplayRefused(RuntimeError):
    """Raised when a silo is asked again for a round it already answered (a second answer would be
    a fresh release of the same round, which the ledger has not planned for)."""


class LedgerMismatch(ValueError):
    """Raised when a ledger is used with data other than the data it was bound to, or with another
    budget than its own."""


try:  # scikit-learn is a dependency; the fallback keeps this module importable on its own
    from sklearn.exceptions import NotFittedError as _SklearnNotFitted
except ImportError:  # pragma: no cover
    _SklearnNotFitted = ValueError  # type: ignore[misc,assignment]


class NotFittedError(_SklearnNotFitted, RuntimeError):  # type: ignore[misc,valid-type]
    """Raised when a model is used before ``fit``: scikit-learn's ``NotFittedError`` (a
    ``ValueError``/``AttributeError``) and a ``RuntimeError`` (what pfair raised before)."""
class ConvergenceWarning(UserWarning):
    """Training failed silently: θ diverged (its norm exploded) or the model collapsed to a
    constant predictor. The message gives the epoch, the norms and the share of the predicted class."""
