"""A silo's DP histogram of a model's scores by (score bin, s, y): the release behind
:class:`pfair.PrivateThresholdOptimizer` (in process) and a deployed silo's ``query.score_histogram``
(:meth:`pfair.flower.node.SiloNode.score_histogram`).

NumPy and the ledger only, so that a deployed silo's process stays cheap to start. The sensitivity
(√2 under replace-one of s or of a whole record, given the model and the bin edges) is derived in
:mod:`pfair.postprocessing` and docs/postprocessing.md.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pfair.exceptions import PrivacyBudgetExceeded
from pfair.privacy import mechanisms
from pfair.privacy.calibration import noise_multiplier_after
from pfair.privacy.ledger import MechanismEvent, PrivacyLedger
from pfair.protocol.keys import score_release

#: L2 sensitivity of a silo's (score bin, s, y) table under replace-one of s or of a whole record.
SCORE_HISTOGRAM_SENSITIVITY = math.sqrt(2.0)
#: Name of the ledger event of one score-histogram release.
SCORE_HISTOGRAM_EVENT = "score_histogram"
#: Most score bins a release may have (a deployed silo refuses more).
MAX_BINS = 1000


# ------------------------------------------------------------------------------ the silo's side
def score_bins(scores: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin of each score for the interior ``edges`` (increasing): bin b holds
    ``edges[b-1] <= score < edges[b]``, so there are ``len(edges) + 1`` bins."""
    return np.searchsorted(np.asarray(edges, dtype=np.float64), np.asarray(scores, dtype=np.float64),
                           side="right").astype(np.int64)


def check_edges(edges: Any, name: str = "bins") -> np.ndarray:
    """Interior bin edges as a float64 vector: finite, strictly increasing, at most
    :data:`MAX_BINS` − 1 of them; an error naming ``name`` otherwise."""
    e = np.asarray(edges, dtype=np.float64).ravel()
    if e.size == 0 or e.size >= MAX_BINS or not np.all(np.isfinite(e)) or np.any(np.diff(e) <= 0):
        raise ValueError(f"{name} must be 1 to {MAX_BINS - 1} finite, strictly increasing interior bin edges of the "
                         f"score; got {e.size} value(s){'' if e.size == 0 else ' that are not'}")
    return e


def score_counts(bins: np.ndarray, s: np.ndarray, y: np.ndarray, *, n_bins: int, n_groups: int) -> np.ndarray:
    """Exact ``n_bins × n_groups × 2`` table of one silo's records by (score bin, group, label);
    ``y`` are label indices in {0, 1}."""
    b, s, y = (np.asarray(v, dtype=np.int64) for v in (bins, s, y))
    flat = np.bincount((b * int(n_groups) + s) * 2 + y, minlength=int(n_bins) * int(n_groups) * 2)
    return flat.reshape(int(n_bins), int(n_groups), 2).astype(np.float64)


def score_histogram_noise_multiplier(ledger: PrivacyLedger, epsilon: float) -> float:
    """``z`` of one release: the smallest noise multiplier such that what ``ledger`` holds plus one
    full-batch Gaussian release at ``z`` composes to at most ``epsilon`` at the ledger's δ (raises
    :class:`~pfair.exceptions.PrivacyBudgetExceeded` when nothing is left), by RDP or the exact
    account. A ledger holding a run priced by its PLD (a record-mode fit's default) has, by RDP,
    already spent more than its budget: such a release is refused with that reason and the fix."""
    if ledger.epsilon_spent() >= epsilon:
        raise PrivacyBudgetExceeded(
            f"silo {ledger.silo!r}: its ledger has spent epsilon={ledger.epsilon_spent():.4g} already, nothing is left "
            f"under epsilon={epsilon:g} for a score histogram. Ask for a larger epsilon (at most the ledger's budget "
            f"{ledger.epsilon:g}) or use silos whose records have not spent their budget")
    try:
        return noise_multiplier_after(ledger, epsilon=float(epsilon), sample_rate=1.0, steps=1, sampling="full_batch")
    except PrivacyBudgetExceeded as exc:
        if any(run.get("prepaid") for run in ledger.runs.values()):
            raise PrivacyBudgetExceeded(
                f"silo {ledger.silo!r}: its ledger holds a run priced by its PLD (a record-mode fit's default, "
                "calibration='auto'), whose RDP bound is above what is left: a score histogram priced by RDP or "
                "the exact account cannot be added. Fit the base model with calibration='rdp' when a later "
                f"release must share the budget. ({exc})") from None
        raise


def release_score_histogram(counts: Any, *, ledger: PrivacyLedger, epsilon: float, key: Any, silo: int
                            ) -> tuple[np.ndarray, float]:
    """One silo's release: calibrate z (:func:`score_histogram_noise_multiplier`), charge the event
    to ``ledger`` (refused past the budget, before anything is computed), then return
    ``counts + z·√2·N(0, I)`` (``counts`` an array or a function computing it) and z. The noise is
    the release stream of the silo's i-th score histogram (:func:`pfair.protocol.keys.score_release`),
    which no other release of the silo shares."""
    z = score_histogram_noise_multiplier(ledger, epsilon)
    earlier = sum(1 for e in ledger.events if e.name == SCORE_HISTOGRAM_EVENT)
    noisy = mechanisms.release_histogram(
        counts, ledger=ledger, event=MechanismEvent.gaussian_histogram(noise_multiplier=z, name=SCORE_HISTOGRAM_EVENT),
        key=key, release=score_release(int(silo), earlier), noise_multiplier=z,
        sensitivity=SCORE_HISTOGRAM_SENSITIVITY)
    return noisy, z
