"""Privacy accounting for pfair silos: the RDP accountant, the persistent per-silo ledger, the
group proportions, and the paper's closed-form noise (for reproduction). See ``docs/accounting.md``
and ``docs/privacy.md``."""

from pfair.privacy.accountant import (
    SAMPLING_SCHEMES,
    default_orders,
    delta_for,
    delta_from_rdp,
    epsilon_for,
    epsilon_from_rdp,
    noise_multiplier_for,
    rdp_curve,
)
from pfair.exceptions import LedgerConflict, LedgerMismatch, PrivacyWarning, ReplayRefused
from pfair.privacy.ledger import MechanismEvent, PrivacyBudgetExceeded, PrivacyLedger, data_fingerprint
from pfair.privacy.paper import effective_noise_multiplier, paper_delivered_epsilon, paper_noise_stds

__all__ = [
    "LedgerConflict",
    "LedgerMismatch",
    "PrivacyWarning",
    "ReplayRefused",
    "data_fingerprint",
    "SAMPLING_SCHEMES",
    "MechanismEvent",
    "PrivacyBudgetExceeded",
    "PrivacyLedger",
    "default_orders",
    "delta_for",
    "delta_from_rdp",
    "effective_noise_multiplier",
    "epsilon_for",
    "epsilon_from_rdp",
    "noise_multiplier_for",
    "paper_delivered_epsilon",
    "paper_noise_stds",
    "rdp_curve",
]
