"""What a silo sends in a round, and what it keeps.

A :class:`SiloMessage` holds exactly the parts the privacy analysis covers (``docs/privacy.md``):

============================  ==========================================  ===========================
field                          attribute mode (``protect="attribute"``)    record mode
============================  ==========================================  ===========================
``loss_grad``  g               exact mean of ∇ℓ over the batch (no s)      clipped, noised
``psi_theta_sfree``  a_θ       exact (no s)                                zero (folded into h_θ)
``psi_theta``  h_θ             clipped Σ b_i / m + N(0, σ_θ²)              clipped ∇_θψ, noised
``psi_w_sfree``  a_W           exact (no s)                                zero (folded into h_W)
``psi_w``  h_W                 Σ c_i / m + N(0, σ_W²)                      clipped ∇_Wψ, noised
============================  ==========================================  ===========================

plus the round and the silo's id. After each checkpoint epoch a silo also sends, when the server
asks, a :class:`CheckpointRelease`: the validation table of its held-out records and, with a
fairness target (``max_violation``), its Gaussian-noised histogram of (block, s, ŷ) under the
current θ (:mod:`pfair.validation`, :mod:`pfair.fairness_target`).
:class:`LocalDiagnostics` (batch loss, ψ, clip count) read the
silo's exact data; they never leave the silo and are not part of any message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

PARTS = ("loss_grad", "psi_theta_sfree", "psi_theta", "psi_w_sfree", "psi_w")


@dataclass(frozen=True)
class SiloMessage:
    """One silo's reply to round ``round``: the five parts of :data:`PARTS` as float64 vectors."""

    silo: Any
    round: int
    loss_grad: np.ndarray
    psi_theta_sfree: np.ndarray
    psi_theta: np.ndarray
    psi_w_sfree: np.ndarray
    psi_w: np.ndarray

    def parts(self) -> tuple[np.ndarray, ...]:
        """The five parts in the order of :data:`PARTS` (the order ``server_update`` takes)."""
        return tuple(getattr(self, p) for p in PARTS)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain arrays for a transport (e.g. a Flower ``ArrayRecord``)."""
        return {p: np.asarray(getattr(self, p)) for p in PARTS}

    @classmethod
    def from_arrays(cls, silo: Any, round: int, arrays: dict[str, Any]) -> "SiloMessage":
        missing = [p for p in PARTS if p not in arrays]
        if missing:
            raise ValueError(f"a silo message needs the parts {list(PARTS)}; missing {missing}")
        return cls(silo=silo, round=int(round), **{p: np.asarray(arrays[p]) for p in PARTS})


@dataclass(frozen=True)
class LocalDiagnostics:
    """What a silo's step saw of its own exact data. Never sent; outside the DP guarantee."""

    round: int
    batch_size: int
    loss: float
    psi: float
    n_clipped: int
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CheckpointRelease:
    """One silo's release after the checkpoint epoch ``epoch`` (:mod:`pfair.validation`), under the
    model θ the server published after it:

    * ``validation``: its validation table ``V[y, ŷ]`` (``l × l``) of its held-out records; exact with
      ``protect="attribute"`` (x and y only), plus N(0, (z_val √2)²) per cell with
      ``protect="record"``;
    * ``counts``: with a fairness target, its violation histogram of all its records per (block, s,
      predicted class), ``blocks × k × l``, plus N(0, (z_v √2)²) per cell in a private fit (exact in
      a non-private one); None without a target."""

    silo: Any
    epoch: int
    validation: np.ndarray | None = None
    counts: np.ndarray | None = None

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain arrays for a transport."""
        out = {}
        if self.validation is not None:
            out["validation_table"] = np.asarray(self.validation)
        if self.counts is not None:
            out["violation_counts"] = np.asarray(self.counts)
        return out

    @classmethod
    def from_arrays(cls, silo: Any, epoch: int, arrays: dict[str, Any]) -> "CheckpointRelease":
        unknown = set(arrays) - {"validation_table", "violation_counts"}
        if unknown or not arrays:
            raise ValueError(f"a checkpoint release holds 'validation_table' and/or 'violation_counts', got "
                             f"{sorted(arrays)}")
        get = (lambda k: np.asarray(arrays[k]) if k in arrays else None)
        return cls(silo=silo, epoch=int(epoch), validation=get("validation_table"), counts=get("violation_counts"))
