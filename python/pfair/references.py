"""Honest references for a fair model: what can be had without the sensitive attribute and without
spending any privacy budget.

**The mixing line.** Take a model trained with no fairness penalty (λ = 0) and replace a random
share α of its predictions by the constant predictor's (the majority class). The mix needs no
``s``, neither to train nor to predict, and no privacy budget beyond the model's own. Its
expected error and violation are linear in α. For a prediction ``ŷ_α = c`` with probability α
(independently of everything else) and ``ŷ_α = ŷ`` otherwise,

    P[ŷ_α = y' | s, y] = (1 − α) · P[ŷ = y' | s, y] + α · 1[y' = c],

so every difference of rates between two groups (demographic parity, equalized odds, equal
opportunity, any conditioning) is multiplied by ``1 − α`` and

    error(α)     = (1 − α) · error_model + α · error_constant,
    violation(α) = (1 − α) · violation_model        (the constant's violation is 0).

The line runs from the model, ``(error_model, violation_model)``, to the constant predictor,
``(error_constant, 0)``. A model that does not use ``s`` at prediction time is worth its fairness
machinery only where it lies *below* this line: at its violation, the mix reaches the error
:meth:`MixingLine.error_at` for free. :func:`mixing_line` measures the line on an evaluation set;
:meth:`MixingLine.beats` says whether an ``(error, violation)`` point lies below it.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pfair import metrics
from pfair._validation import as_records, check_choice, check_same_length, resolve_fairness, sorted_codes
from pfair.notions import NOTIONS

__all__ = ["MixingLine", "mixing_line", "FAIRNESS_METRICS"]

#: The violation each fairness notion is measured by (:mod:`pfair.metrics`, default arguments).
FAIRNESS_METRICS = {name: notion.metric_name for name, notion in NOTIONS.items()}


@dataclass(frozen=True)
class MixingLine:
    """The segment from a λ = 0 model to the constant predictor in the (error, violation) plane.

    ``error_model``, ``violation_model``: the model's test error and violation; ``error_constant``:
    the constant predictor's error (its violation is 0); ``constant``: the label it predicts;
    ``fairness``: the notion ``violation_model`` measures."""

    error_model: float
    violation_model: float
    error_constant: float
    constant: Any
    fairness: str

    def at(self, alpha: Any) -> tuple[np.ndarray | float, np.ndarray | float]:
        """``(error, violation)`` in expectation when a share ``alpha ∈ [0, 1]`` of the model's
        predictions is replaced by the constant's (scalars for a scalar ``alpha``)."""
        a = np.asarray(alpha, dtype=np.float64)
        if np.any(~np.isfinite(a)) or np.any((a < 0) | (a > 1)):
            raise ValueError(f"alpha must lie in [0, 1]; got {alpha!r}")
        err = (1 - a) * self.error_model + a * self.error_constant
        vio = (1 - a) * self.violation_model
        return (float(err), float(vio)) if a.ndim == 0 else (err, vio)

    def points(self, n: int = 11) -> pd.DataFrame:
        """``n`` evenly spaced points of the line: columns ``alpha``, ``error``, ``violation``."""
        alpha = np.linspace(0.0, 1.0, int(n))
        err, vio = self.at(alpha)
        return pd.DataFrame({"alpha": alpha, "error": err, "violation": vio})

    def error_at(self, violation: float) -> float:
        """The least error the mix reaches with a violation at most ``violation``:
        ``min(error(α))`` over ``α ∈ [max(0, 1 − violation / violation_model), 1]`` (error is
        linear in α, so one of the two ends). Equals the line's error at that violation when the
        model beats the constant predictor; the constant's error when it does not."""
        v = float(violation)
        if not np.isfinite(v) or v < 0:
            raise ValueError(f"violation must be a finite number >= 0; got {violation!r}")
        lo = 0.0 if self.violation_model <= v else 1.0 - v / self.violation_model
        return float(min(self.at(lo)[0], self.error_constant))

    def margin(self, error: float, violation: float) -> float:
        """How far ``(error, violation)`` lies below the line: ``error_at(violation) − error``
        (positive: the point beats the mix; negative: the mix is better at that violation)."""
        return self.error_at(violation) - float(error)

    def beats(self, error: float, violation: float, *, tol: float = 0.0) -> bool:
        """Whether ``(error, violation)`` lies below the line by more than ``tol`` (in error): a
        model at that point is more accurate than the mix at its fairness."""
        return self.margin(error, violation) > float(tol)


def mixing_line(y_true: Any, y_pred: Any, *, sensitive_features: Any, fairness: str = "demographic_parity",
                constant: Hashable | None = None, pos_label: Hashable = 1) -> MixingLine:
    """The :class:`MixingLine` of a λ = 0 model's predictions ``y_pred`` on an evaluation set.

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n,)
        True labels and the λ = 0 model's predictions on the evaluation set.
    sensitive_features : array-like of shape (n,)
        Group of each evaluation record (used to measure the model's violation only; the mix
        itself never reads it).
    fairness : {"demographic_parity", "equalized_odds", "equal_opportunity", "false_positive_rate_parity"}
        The violation measured (:data:`FAIRNESS_METRICS`: the :mod:`pfair.metrics` function of
        that name with its defaults; equal opportunity and false-positive-rate parity for ``pos_label``).
    constant : label, optional
        What the constant predictor predicts; default the most frequent label of ``y_true`` (ties:
        the smallest). Pass the training set's majority label to keep the evaluation labels out.
    pos_label : label, default 1
        The positive label of equal opportunity.

    Returns
    -------
    MixingLine
    """
    check_choice(fairness, "fairness", tuple(FAIRNESS_METRICS))
    yt, yp = as_records(y_true, "y_true"), as_records(y_pred, "y_pred")
    check_same_length(y_true=yt, y_pred=yp)
    if constant is None:
        labels, codes = sorted_codes(yt, "y_true")
        constant = labels[int(np.argmax(np.bincount(codes)))]
        constant = constant.item() if isinstance(constant, np.generic) else constant
    violation = metrics.notion_metric(resolve_fairness(fairness), yt, yp, sensitive_features=sensitive_features,
                                      pos_label=pos_label)
    return MixingLine(error_model=float(np.mean(yt != yp)), violation_model=float(violation),
                      error_constant=float(np.mean(yt != constant)), constant=constant, fairness=fairness)
