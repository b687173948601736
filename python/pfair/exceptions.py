"""pfair's warnings and exceptions, in one place."""

from __future__ import annotations


class PrivacyWarning(UserWarning):
    """The guarantee is weaker than it looks: reproducible noise, proportions computed from
    private data, exact diagnostics, or noise that delivers more ε than its target."""


class NonPrivateFitWarning(PrivacyWarning):
    """A fit runs with ``epsilon=None``: nothing is clipped or noised, so what the silos send
    reveals their exact data. Private fits are the default (``epsilon=1.0``); the named non-private
    baselines (``FERMI``, ``NonPrivateSteFFLe``, ``CentralERM``, ``FedAvg``) do not raise it."""


class PrivacyBudgetExceeded(RuntimeError):
    """Raised when a silo would send a message past its (ε, δ) budget; nothing was sent or recorded."""


class BudgetTooSmall(PrivacyBudgetExceeded):
    """Raised when what a silo's ledger has left buys so much noise that the run cannot give a model
    better than the constant predictor (its noise-to-signal ratio is above
    :data:`pfair.privacy.calibration.MAX_NOISE_TO_SIGNAL`; docs/privacy.md, "A silo with too little
    left says no"). Raised before anything is released or charged. The attributes give the numbers:
    ``silo``, ``ratio``, ``noise_multiplier`` (what is left buys), ``needed`` (the largest z that
    would pass), ``spent`` and ``budget``."""

    def __init__(self, message: str, *, silo: object = None, ratio: float = float("nan"),
                 noise_multiplier: float = float("nan"), needed: float = float("nan"), spent: float = float("nan"),
                 budget: float = float("nan")) -> None:
        super().__init__(message)
        self.silo, self.ratio, self.noise_multiplier, self.needed = silo, ratio, noise_multiplier, needed
        self.spent, self.budget = spent, budget


class ReplayRefused(RuntimeError):
    """Raised when a silo is asked again for a round it already answered (a second answer would be
    a fresh release of the same round, which the ledger has not planned for)."""


class SettingsMismatch(ValueError):
    """Raised when a silo is asked to answer a run under other settings than those its noise plan
    was made for (a hostile or misconfigured server: another λ, clip norm, batch scheme, seed, …).
    The noise and the ledger's charges follow the plan, so such a reply could release more than the
    ledger records; nothing is computed or sent."""


class LedgerConflict(RuntimeError):
    """Raised when a ledger file changed on disk after this ledger object read it: another process
    charged the same silo meanwhile (two fits on one ledger file, or two messages handled at once
    by a deployed silo). Writing would erase that charge, so nothing is written; the refused
    release is not sent. Load the ledger again and retry."""


class LedgerRollback(LedgerConflict):
    """Raised when a ledger file is older than its journal says, or gone while its journal is not:
    it was restored from a backup, replaced or deleted. Answering from it would answer rounds again
    and spend its budget again, so nothing is answered. Restore the latest ledger file, or start the
    silo over explicitly (``pfair node reset --state-dir DIR --i-understand``)."""


class LedgerMismatch(ValueError):
    """Raised when a ledger is used with data other than the data it was bound to, or with another
    budget than its own."""


def _not_fitted_error() -> type:
    try:  # lazy: `import pfair` and a ClientApp load no scikit-learn; the fallback keeps this module importable alone
        from sklearn.exceptions import NotFittedError as sklearn_not_fitted
    except ImportError:  # pragma: no cover
        sklearn_not_fitted = ValueError

    class NotFittedError(sklearn_not_fitted, RuntimeError):  # type: ignore[misc,valid-type]
        """Raised when a model is used before ``fit``: scikit-learn's ``NotFittedError`` (a
        ``ValueError``/``AttributeError``) and a ``RuntimeError`` (what pfair raised before)."""

    NotFittedError.__module__, NotFittedError.__qualname__ = __name__, "NotFittedError"
    return NotFittedError


def __getattr__(name: str) -> type:
    # NotFittedError subclasses scikit-learn's, whose import takes a second; it is made on first
    # use so that processes that never fit (a Flower ClientApp) do not pay for it.
    if name == "NotFittedError":
        cls = globals()["NotFittedError"] = _not_fitted_error()
        return cls
    raise AttributeError(f"module 'pfair.exceptions' has no attribute {name!r}")

class ConvergenceWarning(UserWarning):
    """Training failed silently: θ diverged (its norm exploded), the model collapsed to a constant
    predictor, or it is no better than one (:class:`NotBetterThanConstantWarning`). The message
    gives the numbers, the cause and the fix."""


class NotBetterThanConstantWarning(ConvergenceWarning):
    """A fitted model is not clearly more accurate than the constant predictor (which is perfectly
    fair and needs neither s nor any budget), on the released validation figures of a fit
    (:mod:`pfair.validation`) or a silo-local check of a baseline. The message gives the two
    errors, the cause and the fix."""
