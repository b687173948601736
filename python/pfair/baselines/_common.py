"""Input handling and evaluation shared by the baselines.

The baselines accept the same inputs as :class:`pfair.SteFFLe`: a :class:`~pfair.Federation`, or
arrays ``X, y, sensitive_features`` with ``silos=`` (one silo id per record; ``None``: one silo).
Labels and groups are encoded once, globally, by :mod:`pfair._validation`. Two baselines need a little more:
the non-fair ones do not need ``sensitive_features`` at all, and PF-LD accepts *missing*
sensitive values (Tran et al. 2021, §7), marked ``-1``, ``NaN`` or ``None``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from sklearn.utils.validation import validate_data

from pfair import _core
from pfair._fit import history_metrics
from pfair._validation import MISSING, as_features, as_labels, encode, encode_groups, silo_ids
from pfair.federation import Federation, Silo


class Shards(Federation):
    """The silos of a baseline's fit: a :class:`~pfair.federation.Federation` whose group codes
    may be :data:`~pfair._validation.MISSING` (``-1``) where s is missing or was not given
    (``has_s`` is False when no sensitive features were passed at all). ``X``, ``y`` and ``s``
    list the silos' features, label codes and group codes."""

    def __init__(self, X: list[np.ndarray], y: list[np.ndarray], s: list[np.ndarray], classes: np.ndarray,
                 groups: np.ndarray, has_s: bool) -> None:
        super().__init__([Silo(Xj, yj, sj) for Xj, yj, sj in zip(X, y, s)], classes=classes, groups=groups)
        self.has_s = has_s

    @property
    def X(self) -> list[np.ndarray]:
        return [silo.X for silo in self.silos]

    @property
    def y(self) -> list[np.ndarray]:
        return [silo.y for silo in self.silos]

    @property
    def s(self) -> list[np.ndarray]:
        return [silo.s for silo in self.silos]


def shards_from(
    X: Any, y: Any, sensitive_features: Any, silos: Any, *, need_s: bool, allow_missing: bool = False,
    estimator: Any = None,
) -> Shards:
    """Split the inputs of ``fit`` into encoded shards (see the module docstring). With
    ``estimator``, record its ``n_features_in_`` and (for a DataFrame ``X``) ``feature_names_in_``
    the scikit-learn way."""
    if isinstance(X, Federation):
        if y is not None or sensitive_features is not None or silos is not None:
            raise ValueError("pass either a Federation, or X, y, sensitive_features and silos; not both")
        fed = X
        if estimator is not None and hasattr(estimator, "feature_names_in_"):
            del estimator.feature_names_in_
        return Shards([s.X for s in fed.silos], [s.y for s in fed.silos], [s.s for s in fed.silos],
                      fed.classes_, fed.groups_, True)
    name = type(estimator).__name__ if estimator is not None else "this estimator"
    if y is None:
        raise ValueError(f"{name} requires y to be passed, but the target y is None: call fit(X, y, ...), or "
                         "pass a Federation as X")
    Xa = as_features(X)
    if estimator is not None:
        validate_data(estimator, X, reset=True, skip_check_array=True)
    n = Xa.shape[0]
    y_codes, classes = encode(as_labels(y, n, estimator=name), "y")
    if need_s and sensitive_features is None:
        raise ValueError(
            f"{name}.fit(X, y, sensitive_features=s, ...) needs sensitive_features (the sensitive attribute of "
            "each record). In a Pipeline, cross_val_score or GridSearchCV: sklearn.set_config("
            f"enable_metadata_routing=True), {name}().set_fit_request(sensitive_features=True), and pass "
            "params={'sensitive_features': s}"
        )
    if sensitive_features is None:
        s_codes, groups, has_s = np.full(n, MISSING, dtype=np.int64), np.array([0, 1]), False
    else:
        s_codes, groups = encode_groups(sensitive_features, n, allow_missing=allow_missing)
        has_s = True
    ids = silo_ids(silos, n)
    names, codes = np.unique(ids, return_inverse=True)
    parts = [np.flatnonzero(codes == j) for j in range(len(names))]
    return Shards([Xa[p] for p in parts], [y_codes[p] for p in parts], [s_codes[p] for p in parts],
                  classes, groups, has_s)


def evaluate(theta: np.ndarray, n_classes: int, X: np.ndarray, y: np.ndarray, s: np.ndarray | None,
             split: str = "train") -> dict[str, float]:
    """Loss, error and (where s is known) demographic parity and equalized odds differences of a
    linear-softmax model (:func:`pfair._fit.history_metrics`); ``y`` and ``s`` are indices
    (``s = -1``: missing, left out of the fairness metrics)."""
    proba = _core.predict_proba(np.ascontiguousarray(X), theta, n_classes)
    known = None if s is None else s >= 0
    if known is not None and len(np.unique(s[known])) < 2:
        s = None
    return history_metrics(split, proba, y, s, known)


def non_private_report(name: str, n_silos: int) -> Any:
    """``privacy_report_`` of a baseline that gives no DP guarantee (ε = ∞ for every silo)."""
    return pd.DataFrame(
        {"silo": range(n_silos), "mechanism": name, "epsilon_spent": np.inf, "delta": np.nan,
         "noise_multiplier": 0.0, "private": False}
    ).set_index("silo")
