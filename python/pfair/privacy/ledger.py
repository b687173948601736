"""Per-silo privacy ledger: a silo's (ε, δ) budget and the mechanisms charged against it.

Each silo is its own accountant (ISRL-DP, SPEC §4). A :class:`PrivacyLedger` holds the budget and
the list of recorded :class:`MechanismEvent`; the RDP of all events is composed by addition and
converted to ε at the budget's δ (Balle et al. 2020). :meth:`PrivacyLedger.charge` refuses — by
raising :class:`PrivacyBudgetExceeded` *before* recording — any event that would push ε past the
budget, so a silo that has spent its budget stops answering.

Adjacency is replace-one (one record's sensitive attribute). Hence events with
``sampling="poisson"`` (the add/remove-one bound) are refused; use ``"poisson_replace_one"``
with the noise multiplier measured against the add/remove sensitivity.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Dict, List, Optional

import numpy as np

from pfair import _core
from pfair.privacy.accountant import _delta, _epsilon, validate_event_args

__all__ = ["MechanismEvent", "PrivacyBudgetExceeded", "PrivacyLedger"]


class PrivacyBudgetExceeded(RuntimeError):
    """Raised when charging a mechanism would exceed a silo's (ε, δ) budget."""


@dataclass(frozen=True)
class MechanismEvent:
    """``steps`` Gaussian releases with noise multiplier ``noise_multiplier`` (noise std / L2
    sensitivity under replace-one adjacency; add/remove sensitivity for ``poisson_replace_one``)
    on batches drawn by ``sampling`` at rate ``sample_rate``."""

    name: str
    sampling: str
    sample_rate: float
    noise_multiplier: float
    steps: int

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str; got {self.name!r}")
        s, q, z, t = validate_event_args(
            sampling=self.sampling, sample_rate=self.sample_rate, noise_multiplier=self.noise_multiplier, steps=self.steps
        )
        if s == "poisson":
            raise ValueError(
                "sampling='poisson' is the add/remove-one bound and does not cover pfair's replace-one "
                "adjacency; record the event with sampling='poisson_replace_one' (noise multiplier "
                "against the add/remove sensitivity) instead"
            )
        object.__setattr__(self, "sample_rate", q)
        object.__setattr__(self, "noise_multiplier", z)
        object.__setattr__(self, "steps", t)

    @classmethod
    def gaussian_histogram(cls, *, noise_multiplier: float, name: str = "dp_histogram") -> "MechanismEvent":
        """One full-batch Gaussian release, e.g. a DP histogram of ``s`` (replace-one L2
        sensitivity of a count histogram is √2)."""
        return cls(name=name, sampling="full_batch", sample_rate=1.0, noise_multiplier=noise_multiplier, steps=1)

    def as_tuple(self) -> tuple:
        return (self.sampling, self.sample_rate, self.noise_multiplier, self.steps)


@lru_cache(maxsize=256)
def _per_step_rdp(sampling: str, sample_rate: float, noise_multiplier: float, orders: tuple) -> np.ndarray:
    """RDP of ONE step of a mechanism at each order (RDP composes additively, so ``steps``
    steps cost ``steps`` times this). Cached: a silo charges the same mechanism every epoch."""
    return np.asarray(_core.rdp_curve(sampling, sample_rate, noise_multiplier, 1, list(orders)), dtype=np.float64)


class PrivacyLedger:
    """A silo's (ε, δ) budget and its recorded mechanisms.

    Parameters
    ----------
    epsilon, delta : float
        The budget: the silo's whole transcript must be (epsilon, delta)-DP.
    silo : str or int, optional
        Name used in messages and reports.
    """

    def __init__(self, *, epsilon: float, delta: float, silo: Optional[object] = None) -> None:
        self.epsilon = _epsilon(epsilon)
        self.delta = _delta(delta)
        self.silo = silo
        self.events: List[MechanismEvent] = []
        self._orders = tuple(_core.default_orders())
        # Steps recorded per distinct mechanism (in first-charged order). The total RDP is
        # Σ steps · per-step curve, so charging T rounds epoch by epoch costs exactly what a
        # calibration for T rounds computed (summing per-epoch curves drifts by a few ulps).
        self._steps: Dict[tuple, int] = {}
        self._rdp = np.zeros(len(self._orders))

    def _total(self, steps: Dict[tuple, int]) -> np.ndarray:
        total = np.zeros(len(self._orders))
        for (sampling, q, z), t in steps.items():
            total = total + t * _per_step_rdp(sampling, q, z, self._orders)
        return total

    def _with(self, event: MechanismEvent) -> Dict[tuple, int]:
        key = (event.sampling, event.sample_rate, event.noise_multiplier)
        steps = dict(self._steps)
        steps[key] = steps.get(key, 0) + event.steps
        return steps

    def _epsilon_at(self, rdp: np.ndarray) -> float:
        if not rdp.any():
            return 0.0
        return float(_core.epsilon_from_rdp(list(self._orders), rdp.tolist(), self.delta)[0])

    def epsilon_spent(self) -> float:
        """ε of all recorded events at the budget's δ (0 if none)."""
        return self._epsilon_at(self._rdp)

    def remaining(self) -> float:
        """Budget left, ``epsilon − epsilon_spent()`` (never below 0)."""
        return max(0.0, self.epsilon - self.epsilon_spent())

    def would_exceed(self, event: MechanismEvent) -> bool:
        """Whether recording ``event`` would make ε exceed the budget."""
        if not isinstance(event, MechanismEvent):
            raise TypeError(f"event must be a MechanismEvent; got {type(event).__name__}")
        return self._epsilon_at(self._total(self._with(event))) > self.epsilon

    def charge(self, event: MechanismEvent) -> float:
        """Record ``event`` if it fits the budget; return the new ε spent.

        Raises :class:`PrivacyBudgetExceeded` (nothing is recorded) if it does not fit.
        """
        if not isinstance(event, MechanismEvent):
            raise TypeError(f"event must be a MechanismEvent; got {type(event).__name__}")
        spent = self.epsilon_spent()
        steps = self._with(event)
        total = self._total(steps)
        after = self._epsilon_at(total)
        if after > self.epsilon:
            who = "silo" if self.silo is None else f"silo {self.silo!r}"
            raise PrivacyBudgetExceeded(
                f"{who}: charging {event.name!r} ({event.sampling}, sample_rate={event.sample_rate:g}, "
                f"noise_multiplier={event.noise_multiplier:g}, steps={event.steps}) would raise epsilon "
                f"from {spent:.4g} to {after:.4g}, over the budget epsilon={self.epsilon:g} at delta={self.delta:g}; "
                f"remaining epsilon={max(0.0, self.epsilon - spent):.4g}. The silo refuses to answer."
            )
        self.events.append(event)
        self._steps, self._rdp = steps, total
        return after

    def to_dict(self) -> dict:
        """A plain-dict report (budget, spent, remaining, events)."""
        spent = self.epsilon_spent()
        return {
            "silo": self.silo,
            "epsilon_budget": self.epsilon,
            "delta": self.delta,
            "epsilon_spent": spent,
            "epsilon_remaining": max(0.0, self.epsilon - spent),
            "events": [asdict(e) for e in self.events],
            "accountant": "RDP (public batch / WBK 2019 / MTZ 2019) + Balle et al. 2020 conversion, replace-one adjacency",
        }

    def __repr__(self) -> str:
        return f"PrivacyLedger(silo={self.silo!r}, epsilon={self.epsilon}, delta={self.delta}, events={len(self.events)})"
