"""Where a silo's budget is charged and where Python adds noise: the only such place in Python.

Every release about a silo's data is charged to that silo's :class:`~pfair.privacy.PrivacyLedger`
*before* it is computed (the ledger refuses past the budget or a round asked twice, and then nothing
is computed), and then noised with a stream of the silo's own key:

* **rounds** (:func:`charge_rounds`, :func:`charge_epoch`): the Gaussian noise of a round's parts is
  added in Rust (``rust/src/round.rs``: ``noise_message``; ``rust/src/hybrid.rs`` for the sensitive
  silos of the hybrid topologies), with the σ's of the silo's noise plan;
* **histograms** (:func:`release_histogram`): the DP histogram of s behind ``p_s="dp"``, the
  checkpoint releases, a deployed silo's evaluations and the score histograms. A count vector ``c``
  is released as ``c + z · Δ · N(0, I)`` with ``Δ = √2``: replacing one record moves at most one
  count from one cell to another (the derivations are in :mod:`pfair.privacy.proportions` and
  :mod:`pfair.fairness_target`). Its noise is the release stream of its
  :class:`~pfair.protocol.keys.ReleaseId` (:func:`release_gaussian`), which no other release and no
  round of the silo shares.

:func:`add_noise` (``v + σ · N(0, I)``) is the one place Python adds Gaussian noise to a vector:
these releases and the PF-LD baseline's primal and dual noise use it, over :func:`gaussian`, the
one draw of a keyed standard-normal vector of the rounds' domain (the histograms draw
:func:`release_gaussian`).
"""

from __future__ import annotations

import math

from typing import Any, Callable, Sequence

import numpy as np

from pfair import _core
from pfair.privacy.ledger import MechanismEvent, PrivacyLedger, charge_rounds_together
from pfair.protocol.keys import ReleaseId


def gaussian(key: Any, silo: int, stream: int, size: int, *, purpose: str = "noise") -> np.ndarray:
    """``size`` standard-normal draws of the stream (key, silo, stream, purpose)."""
    return _core.gaussian_stream(key, int(silo), int(stream), int(size), purpose=purpose)


def release_gaussian(key: Any, release: ReleaseId, size: int) -> np.ndarray:
    """``size`` standard-normal draws of the release stream of ``release`` under ``key``."""
    if not isinstance(release, ReleaseId):
        raise TypeError(f"release must be a pfair.protocol.keys.ReleaseId, got {type(release).__name__}")
    return _core.gaussian_release(key, release.encode(), int(size))


def _noise_std(sigma: float) -> float:
    """σ as a float, refused unless finite and ≥ 0: a NaN or negative σ must never fall through to
    an exact release."""
    sigma = float(sigma)
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"noise std sigma must be a finite number >= 0, got {sigma!r}: nothing was released")
    return sigma


def add_noise(values: np.ndarray, sigma: float, key: Any, silo: int, stream: int, *,
              purpose: str = "noise") -> np.ndarray:
    """``values + σ · N(0, I)`` with the draws of the stream (key, silo, stream, purpose), shaped
    as ``values``; ``values`` unchanged when ``σ = 0`` (nothing is drawn). A σ that is negative
    or not finite (NaN, ∞) is refused: it must never fall through to an exact release."""
    if _noise_std(sigma) == 0.0:
        return values
    values = np.asarray(values, dtype=np.float64)
    return values + sigma * gaussian(key, silo, stream, values.size, purpose=purpose).reshape(values.shape)


def release_histogram(counts: np.ndarray | Callable[[], np.ndarray], *, ledger: PrivacyLedger | None, event: MechanismEvent | None, key: Any,
                      release: ReleaseId, noise_multiplier: float, sensitivity: float,
                      name: str | None = None) -> np.ndarray:
    """Charge ``event`` to ``ledger`` (refusing first), then release ``counts + z·Δ·N(0, I)``,
    the draws from the release stream of ``release`` under ``key`` (:func:`release_gaussian`).
    ``counts`` may be a function computing them, called only once the charge went through.

    With ``name`` the release is kept in the ledger under that name, and a release already kept
    there is returned again at no cost (nothing new is computed or charged). ``ledger=None`` or
    ``event=None``: nothing to charge (the caller's run is not private) — the noise is still added
    when ``noise_multiplier > 0``.

    The two halves, :func:`charge_release` and :func:`noise_release`, serve a caller that charges
    many silos' releases first and then computes their counts in one pass."""
    earlier = charge_release(ledger=ledger, event=event, release=release, noise_multiplier=noise_multiplier,
                             sensitivity=sensitivity, name=name)
    if earlier is not None:
        return earlier
    return noise_release(counts() if callable(counts) else counts, ledger=ledger, key=key, release=release,
                         noise_multiplier=noise_multiplier, sensitivity=sensitivity, name=name)


def charge_release(*, ledger: PrivacyLedger | None, event: MechanismEvent | None, release: ReleaseId,
                   noise_multiplier: float, sensitivity: float, name: str | None = None) -> np.ndarray | None:
    """The first half of :func:`release_histogram`: the release kept in ``ledger`` under ``name``
    if there is one (returned; nothing is charged), else None after charging ``event`` (refusing
    first; a bad σ or release id is refused before the charge). Nothing may be computed from the
    data before this returns; :func:`noise_release` then releases the counts."""
    if name is not None and ledger is not None:
        earlier = ledger.release(name)
        if earlier is not None:
            return np.asarray(earlier, dtype=np.float64)
    _noise_std(noise_multiplier * sensitivity)  # a bad σ is refused before the charge
    if not isinstance(release, ReleaseId):  # before the charge: a wrong call must not spend budget
        raise TypeError(f"release must be a pfair.protocol.keys.ReleaseId, got {type(release).__name__}")
    if ledger is not None and event is not None:
        ledger.charge(event)  # refuses before anything is released
    return None


def noise_release(counts: np.ndarray, *, ledger: PrivacyLedger | None, key: Any, release: ReleaseId,
                  noise_multiplier: float, sensitivity: float, name: str | None = None) -> np.ndarray:
    """The second half of :func:`release_histogram`, after :func:`charge_release` returned None:
    ``counts + z·Δ·N(0, I)`` from the release stream of ``release`` under ``key``, kept in
    ``ledger`` under ``name`` when given."""
    sigma = _noise_std(noise_multiplier * sensitivity)
    counts = np.asarray(counts, dtype=np.float64)
    released = counts if sigma == 0.0 else counts + sigma * release_gaussian(key, release, counts.size).reshape(counts.shape)
    if name is not None and ledger is not None:
        ledger.release(name, released)
    return released


def charge_rounds(ledger: PrivacyLedger | None, run_id: str, first_round: int, count: int = 1) -> None:
    """Charge rounds ``first_round ..`` of run ``run_id`` before they are computed (no-op without a
    ledger). Raises :class:`~pfair.privacy.PrivacyBudgetExceeded` or
    :class:`~pfair.exceptions.ReplayRefused`."""
    if ledger is not None:
        ledger.charge_rounds(run_id, int(first_round), int(count))


def charge_epoch(charges: Sequence[tuple[PrivacyLedger, str]], first_round: int, count: int) -> list:
    """Charge ``count`` rounds from ``first_round`` to every ``(ledger, run_id)`` in one Rust call;
    one exception or None per ledger (see :func:`pfair.privacy.ledger.charge_rounds_together`)."""
    return charge_rounds_together(list(charges), int(first_round), int(count))
