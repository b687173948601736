"""Fairness and accuracy metrics for classifiers with k >= 2 groups and l >= 2 classes.

Plain functions in the scikit-learn / fairlearn style: ``f(y_true, y_pred, *, sensitive_features)``.
Labels and groups may be any hashable values that numpy can sort (ints, strings, bools); they are
encoded by :mod:`pfair._validation` (the one module that checks and encodes inputs), so the order
of groups is the sorted order of their values. All probabilities are empirical frequencies over the records passed in.

Papers: Gupta, Poornash, Razaviyayn and Lowy, "A Stochastic Optimization Framework for Private
and Fair Learning From Decentralized Data" (2024) ("Gupta et al."); Tran, Fioretto and Van
Hentenryck, "Differentially Private and Fair Deep Learning: A Lagrangian Dual Approach" (2021)
("Tran et al."); Wu, Curtis and Robinson, "Using Synthetic Data to Mitigate Unfairness and
Preserve Privacy through Single-Shot Federated Learning" ("Wu et al.").

The fairness metrics carry fairlearn's names, signatures and (for binary labels) values, and
extend them to more classes as Gupta et al. (2024) do; the same names are the ``history_``
columns, the command line's output and the keys of :func:`fairness_report`. Definitions (``P``
is the empirical probability, ``s`` the sensitive attribute, ``y`` the true label and ``ŷ`` the
prediction):

* :func:`demographic_parity_difference`, Gupta et al. App. E.1 eq. (11)::

      max_{y', s1, s2} | P[ŷ=y' | s=s1] - P[ŷ=y' | s=s2] |

* :func:`equalized_odds_difference`, Gupta et al. App. E.1 eq. (12); by default the per-true-class form::

      max_{y, y', s1, s2} | P[ŷ=y' | s=s1, y] - P[ŷ=y' | s=s2, y] |

  which is zero exactly when ŷ is independent of s given y (Hardt et al. 2016). The literal
  one-vs-rest form of eq. (12) is available with ``conditioning="one_vs_rest"``. Both equal
  fairlearn's ``equalized_odds_difference`` (max of TPR and FPR gaps) for binary labels.
* :func:`equal_opportunity_difference`: the gap in true-positive rate of ``pos_label`` across groups.
* :func:`false_positive_rate_difference`: the gap in false-positive rate of ``pos_label`` across
  groups (among the records of every other class).
* :func:`accuracy_parity_violation` (Tran et al. 2021, §4.1): the gap in per-group accuracy.
* :func:`statistical_parity_difference` (Wu et al. 2024, eq. (4)) and
  :func:`decision_boundary_covariance` (Wu et al. 2024, eq. (2), after Zafar et al. 2017).
* fairlearn's ratios and a ``MetricFrame``-style :func:`group_report`, with fairlearn's
  definitions.

``demographic_parity_violation``, ``equalized_odds_violation`` and
``equal_opportunity_violation`` are aliases of the three ``*_difference`` functions, kept for
compatibility.

Every maximum over a pair of groups ``s1, s2`` equals the maximum minus the minimum of the
per-group quantity, which is how it is computed. Validation happens once, at the public
boundary (:func:`_prepare`), and raises ``ValueError``/``TypeError`` with the argument's name and the fix.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from pfair._validation import (
    as_records,
    check_same_length,
    code_of,
    encode_label_pair,
    encode_metric_groups,
    sorted_codes,
)
from pfair._warn import warn_once
from pfair.privacy.report import FullTable

__all__ = [
    "accuracy_parity_violation",
    "decision_boundary_covariance",
    "demographic_parity_violation",
    "equal_opportunity_violation",
    "equalized_odds_violation",
    "fairness_report",
    "misclassification_error",
    "statistical_parity_difference",
    "trivial_error",
]


# --------------------------------------------------------------------------------------------
# Validated, encoded inputs (checked and encoded by pfair._validation, the one input module)
# --------------------------------------------------------------------------------------------


def _label_code(labels: np.ndarray, label: Hashable, name: str) -> int:
    return code_of(labels, label, name, "labels found in y_true/y_pred")


def _same_kind(labels: np.ndarray, label: Hashable) -> bool:
    """True if ``label`` is a number and so are all ``labels``, or a str and so are all labels."""

    def kind(v: Any) -> str:
        if isinstance(v, (bool, np.bool_, int, float, np.number)):
            return "number"
        return type(v).__name__

    return {kind(v) for v in labels.tolist()} == {kind(label)}


class _Encoded(NamedTuple):
    """Validated inputs as integer codes; ``labels[c]`` and ``groups[g]`` are the user's values."""

    labels: np.ndarray
    y_true: np.ndarray | None
    y_pred: np.ndarray
    groups: np.ndarray
    s: np.ndarray


def _prepare(
    y_true: Any, y_pred: Any, sensitive_features: Any, *, need_y_true: bool = True
) -> _Encoded:
    """Validate and encode the common inputs (the single validation point of every metric)."""
    yp = as_records(y_pred, "y_pred")
    yt = as_records(y_true, "y_true") if (need_y_true or y_true is not None) else None
    sf = as_records(sensitive_features, "sensitive_features")
    arrays = {"y_pred": yp, "sensitive_features": sf}
    if yt is not None:
        arrays = {"y_true": yt, **arrays}
    check_same_length(**arrays)
    labels, yt_codes, yp_codes = encode_label_pair(yt, yp)
    groups, s_codes = encode_metric_groups(sf)
    return _Encoded(labels, yt_codes, yp_codes, groups, s_codes)


# --------------------------------------------------------------------------------------------
# Pure computations on integer codes
# --------------------------------------------------------------------------------------------


def _counts(row_codes: np.ndarray, col_codes: np.ndarray, n_rows: int, n_cols: int) -> np.ndarray:
    """Contingency table: entry [r, c] counts records with row code r and column code c."""
    flat = np.bincount(row_codes * n_cols + col_codes, minlength=n_rows * n_cols)
    return flat.reshape(n_rows, n_cols).astype(np.float64)


def _rate_table(group_codes: np.ndarray, hit: np.ndarray, k: int) -> np.ndarray:
    """Counts table with two columns [miss, hit] per group, used for one-vs-rest rates."""
    return _counts(group_codes, hit, k, 2)


def _max_gap_over_present_groups(counts: np.ndarray) -> float | None:
    """``counts[g, c]``: records of group g with predicted class c, within one conditioning set.

    Returns max over c of (max - min over groups present) of P[ŷ=c | g], or None when fewer than
    two groups are present (the gap is undefined).
    """
    totals = counts.sum(axis=1)
    present = totals > 0
    if np.count_nonzero(present) < 2:
        return None
    rates = counts[present] / totals[present, None]
    return float(np.max(rates.max(axis=0) - rates.min(axis=0)))


def _names(values: np.ndarray, mask: np.ndarray) -> list:
    return values[mask].tolist()


def _weights(sample_weight: Any, n: int) -> np.ndarray:
    if sample_weight is None:
        return np.ones(n)
    w = as_records(sample_weight, "sample_weight")
    check_same_length(y_pred=np.empty(n), sample_weight=w)
    try:
        w = w.astype(np.float64)
    except (TypeError, ValueError):
        raise TypeError("sample_weight must be numbers (one non-negative weight per record)") from None
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("sample_weight must be finite and >= 0 (one weight per record)")
    return w


_METHODS = ("between_groups", "to_overall")


def _check_method(method: str) -> None:
    if method not in _METHODS:
        raise ValueError(f"method={method!r} is not supported; pass 'between_groups' or 'to_overall'.")


def _check_agg(agg: str) -> None:
    if agg not in ("worst_case", "mean"):
        raise ValueError(f"agg={agg!r} is not supported; pass 'worst_case' or 'mean'.")


def _classes(e: _Encoded, pos_label: Hashable | None) -> list[int]:
    """Predicted classes whose rates are compared: every label for ``pos_label=None``, else the
    code of ``pos_label``; none when ``pos_label`` is of the labels' kind but never occurs (its
    rate is 0 in every group, as fairlearn's ``selection_rate``). Another kind is an error."""
    if pos_label is None:
        return list(range(e.labels.size))
    if _same_kind(e.labels, pos_label) and not any(v == pos_label for v in e.labels.tolist()):
        return []
    return [_label_code(e.labels, pos_label, "pos_label")]


def _set_gap(e: _Encoded, w: np.ndarray, in_set: np.ndarray, classes: list[int], method: str) -> float | None:
    """The gap of one conditioning set (the records ``in_set``).

    Per group g with positive weight in the set, the weighted rate ``r_g(c) = P_w[ŷ = c | s = g,
    set]`` of each class c in ``classes``; ``between_groups``: ``max_c (max_g r_g(c) − min_g r_g(c))``,
    ``to_overall``: ``max_c max_g |r_g(c) − r(c)|`` with ``r(c)`` the rate over the whole set.
    Groups absent from the set have no rate and are left out; ``None`` when fewer than two groups
    are present (the gap is undefined)."""
    k = e.groups.size
    s, yp, ws = e.s[in_set], e.y_pred[in_set], w[in_set]
    totals = np.bincount(s, weights=ws, minlength=k)
    present = totals > 0
    if np.count_nonzero(present) < 2:
        return None
    gaps = [0.0]
    for c in classes:
        hit = ws * (yp == c)
        rates = np.bincount(s, weights=hit, minlength=k)[present] / totals[present]
        if method == "between_groups":
            gaps.append(float(rates.max() - rates.min()))
        else:
            gaps.append(float(np.max(np.abs(rates - hit.sum() / ws.sum()))))
    return max(gaps)


def _dp_gap(e: _Encoded, w: np.ndarray, pos_label: Hashable | None, method: str) -> float:
    gap = _set_gap(e, w, np.ones(e.y_pred.shape[0], dtype=bool), _classes(e, pos_label), method)
    if gap is None:
        raise ValueError(
            "demographic parity difference is undefined: fewer than 2 groups of sensitive_features "
            "have positive sample_weight; pass positive weights for at least 2 groups."
        )
    return gap


def _eo_gaps(e: _Encoded, w: np.ndarray, pos_label: Hashable | None, conditioning: str, method: str) -> list:
    """The gaps that equalized odds combines (``None`` where a set has fewer than 2 groups)."""
    assert e.y_true is not None
    if pos_label is None and conditioning == "per_class":
        everything = list(range(e.labels.size))
        return [_set_gap(e, w, e.y_true == y, everything, method) for y in np.unique(e.y_true)]
    gaps = []
    for c in (range(e.labels.size) if pos_label is None else _classes(e, pos_label)):
        gaps.append(_set_gap(e, w, e.y_true == c, [c], method))  # true-positive rate of c
        gaps.append(_set_gap(e, w, e.y_true != c, [c], method))  # false-positive rate of c
    return gaps or [0.0]  # pos_label of the labels' kind that never occurs: every rate is 0


def _eo_gap(e: _Encoded, w: np.ndarray, pos_label: Hashable | None, conditioning: str, method: str,
            agg: str) -> float:
    defined = [g for g in _eo_gaps(e, w, pos_label, conditioning, method) if g is not None]
    if not defined:
        raise ValueError(
            "equalized odds difference is undefined: no true class in y_true has records from 2 or "
            f"more groups of sensitive_features (groups {e.groups.tolist()}). Pass a sample in "
            "which at least one class occurs in at least 2 groups."
        )
    return float(max(defined)) if agg == "worst_case" else float(np.mean(defined))


def _eopp_gap(e: _Encoded, w: np.ndarray, pos_label: Hashable, method: str) -> float:
    return _pos_rate_gap(e, w, pos_label, method, among_positives=True)


def _fpr_gap(e: _Encoded, w: np.ndarray, pos_label: Hashable, method: str) -> float:
    return _pos_rate_gap(e, w, pos_label, method, among_positives=False)


def _pos_rate_gap(e: _Encoded, w: np.ndarray, pos_label: Hashable, method: str, *, among_positives: bool) -> float:
    """The gap of the rate of ŷ = ``pos_label`` among the records of class ``pos_label`` (the
    true-positive rate) or among the others (the false-positive rate); ``ValueError`` naming the
    groups when fewer than two have such records."""
    assert e.y_true is not None
    p = _label_code(e.labels, pos_label, "pos_label")
    in_set = (e.y_true == p) if among_positives else (e.y_true != p)
    gap = _set_gap(e, w, in_set, [p], method)
    if gap is None:
        present = np.bincount(e.s[in_set], weights=w[in_set], minlength=e.groups.size) > 0
        if among_positives:
            what, records, rate, members = ("equal opportunity difference", f"records of pos_label={pos_label!r}",
                                            "true-positive-rate", "positives")
        else:
            what, records, rate, members = ("false positive rate difference",
                                            f"records other than pos_label={pos_label!r}", "false-positive-rate",
                                            "negatives")
        raise ValueError(
            f"{what} is undefined: y_true has {records} only in group(s) {_names(e.groups, present)} of "
            f"sensitive_features (groups without such records: {_names(e.groups, ~present)}); a {rate} gap "
            f"needs 2 groups with {members}. Pass a larger sample or another pos_label."
        )
    return gap


def _accuracy_gap(e: _Encoded) -> float:
    assert e.y_true is not None
    correct = (e.y_true == e.y_pred).astype(np.int64)
    gap = _max_gap_over_present_groups(_rate_table(e.s, correct, e.groups.size))
    assert gap is not None
    return gap


def _error(y_true_codes: np.ndarray, y_pred_codes: np.ndarray) -> float:
    return float(np.mean(y_true_codes != y_pred_codes))


def _trivial_error(y_true_codes: np.ndarray) -> float:
    return float(1.0 - np.bincount(y_true_codes).max() / y_true_codes.shape[0])


# --------------------------------------------------------------------------------------------
# Public metrics
# --------------------------------------------------------------------------------------------


def demographic_parity_difference(
    y_true: Any, y_pred: Any, *, sensitive_features: Any, method: str = "between_groups",
    sample_weight: Any = None, pos_label: Hashable | None = None,
) -> float:
    r"""Demographic parity difference (Gupta et al. 2024, App. E.1, eq. 11; fairlearn's name).
    ``demographic_parity_difference`` in ``history_``, the command line and :func:`fairness_report`.

    .. math::

        \max_{y' \in \mathcal{Y}} \max_{s_1, s_2 \in \mathcal{S}}
        \left| P[\hat y = y' \mid s = s_1] - P[\hat y = y' \mid s = s_2] \right|

    over every predicted class ``y'`` and every pair of groups (``method="between_groups"``); with
    ``method="to_overall"`` the pair is replaced by the largest ``|P[ŷ=y' | s=g] − P[ŷ=y']|``. It is
    0 exactly when the distribution of predictions is the same in every group, and at most 1.

    For binary labels the maximum over ``y' ∈ {0, 1}`` is the gap in selection rate
    ``P[ŷ = 1 | s = g]`` (the two classes' rates sum to 1 in every group), so this equals
    ``fairlearn.metrics.demographic_parity_difference``, also with ``method`` and
    ``sample_weight``. For more classes it is the paper's generalisation (fairlearn would compare
    only ``ŷ = 1``); pass ``pos_label=p`` for that one-vs-rest number.

    Parameters
    ----------
    y_true : array-like of shape (n,) or None
        Ignored; accepted so that every metric has the signature
        ``f(y_true, y_pred, *, sensitive_features)``. If given, its length is checked.
    y_pred : array-like of shape (n,)
        Predicted labels (any hashable, sortable values).
    sensitive_features : array-like of shape (n,)
        Group of each record; at least 2 distinct groups.
    method : {"between_groups", "to_overall"}
        As in fairlearn (see above).
    sample_weight : array-like of shape (n,), optional
        Non-negative weights; the rates are weighted frequencies.
    pos_label : hashable, optional
        Compare only the rate of this predicted label (fairlearn's selection rate of
        ``pos_label``); a label of the predictions' kind that never occurs has rate 0 everywhere.

    Returns
    -------
    float in [0, 1].
    """
    _check_method(method)
    e = _prepare(y_true, y_pred, sensitive_features, need_y_true=False)
    return _dp_gap(e, _weights(sample_weight, e.y_pred.shape[0]), pos_label, method)


def equalized_odds_difference(
    y_true: Any, y_pred: Any, *, sensitive_features: Any, method: str = "between_groups",
    sample_weight: Any = None, agg: str = "worst_case", pos_label: Hashable | None = None,
    conditioning: str = "per_class",
) -> float:
    r"""Equalized odds difference (Gupta et al. 2024, App. E.1, eq. 12; fairlearn's name).
    ``equalized_odds_difference`` in ``history_``, the command line and :func:`fairness_report`.

    ``conditioning="per_class"`` (default): for each true class ``y`` the gap

    .. math::

        D_y = \max_{y'} \max_{s_1, s_2} \left| P[\hat y=y' \mid s=s_1, y] - P[\hat y=y' \mid s=s_2, y] \right|

    and the result is ``max_y D_y`` (``agg="worst_case"``) or the mean of the ``D_y``
    (``agg="mean"``). It is 0 exactly when the prediction is independent of the group given the
    true label (equalized odds, Hardt et al. 2016; Tran et al. 2021, §4.1).

    ``conditioning="one_vs_rest"`` is eq. 12 as printed in Gupta et al. 2024: for each class
    ``y'`` the gaps of its true-positive rate ``P[ŷ=y' | s, y=y']`` and of its pooled false-positive
    rate ``P[ŷ=y' | s, y≠y']``, combined by ``agg`` over all classes. For more than two classes the
    pooled rate mixes the other classes in group-specific proportions, so it can be non-zero even
    when equalized odds holds exactly. ``pos_label=p`` keeps only class ``p``'s two gaps
    (fairlearn's definition for any label set).

    For binary labels every form is fairlearn's number: ``D_1`` is the true-positive-rate gap and
    ``D_0`` the false-positive-rate gap, so this equals ``fairlearn.metrics.equalized_odds_difference``
    (also with ``method``, ``sample_weight`` and ``agg``) whenever every group has records of both
    classes. A conditional rate is defined only when group ``g`` has records in the conditioning
    set; absent groups are left out of that set's gap, and a set with fewer than two groups is
    left out of the maximum or mean (fairlearn instead counts the rate as 0). If no set has two
    groups, ``ValueError``.

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n,)
        True and predicted labels (any hashable, sortable values, one shared label set).
    sensitive_features : array-like of shape (n,)
        Group of each record; at least 2 distinct groups.
    method : {"between_groups", "to_overall"}
        Largest minus smallest group rate, or largest distance of a group's rate to the rate of the
        whole conditioning set (as in fairlearn).
    sample_weight : array-like of shape (n,), optional
        Non-negative weights; the rates are weighted frequencies.
    agg : {"worst_case", "mean"}
        How the gaps are combined (see above).
    pos_label : hashable, optional
        Only the true- and false-positive-rate gaps of this label.
    conditioning : {"per_class", "one_vs_rest"}
        Which form of eq. 12 (see above); ignored when ``pos_label`` is given.

    Returns
    -------
    float in [0, 1].
    """
    _check_method(method)
    _check_agg(agg)
    if conditioning not in ("per_class", "one_vs_rest"):
        raise ValueError(
            f"conditioning={conditioning!r} is not supported; pass 'per_class' or 'one_vs_rest'."
        )
    e = _prepare(y_true, y_pred, sensitive_features)
    return _eo_gap(e, _weights(sample_weight, e.y_pred.shape[0]), pos_label, conditioning, method, agg)


def equal_opportunity_difference(
    y_true: Any, y_pred: Any, *, sensitive_features: Any, method: str = "between_groups",
    sample_weight: Any = None, pos_label: Hashable = 1,
) -> float:
    r"""Equal opportunity difference: the gap in true-positive rate of ``pos_label`` across
    groups (fairlearn's name; ``equal_opportunity_difference`` in :func:`fairness_report`).

    .. math::

        \max_{s_1, s_2} \left| P[\hat y = p \mid s = s_1, y = p]
                              - P[\hat y = p \mid s = s_2, y = p] \right|,
        \quad p = \text{pos\_label}

    (``method="to_overall"``: the largest distance of a group's rate to the overall one). Groups
    without any record of class ``pos_label`` have no true-positive rate and are left out; if
    fewer than two groups have such records, ``ValueError`` names them. Equals
    ``fairlearn.metrics.equal_opportunity_difference`` whenever every group has records of class
    ``pos_label``. With more than two classes it is the one-vs-rest rate of ``pos_label``.

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n,)
        True and predicted labels.
    sensitive_features : array-like of shape (n,)
        Group of each record; at least 2 distinct groups.
    method : {"between_groups", "to_overall"}
        As in fairlearn.
    sample_weight : array-like of shape (n,), optional
        Non-negative weights.
    pos_label : hashable, default 1
        The advantaged ("positive") label; must occur in y_true or y_pred.

    Returns
    -------
    float in [0, 1].
    """
    _check_method(method)
    e = _prepare(y_true, y_pred, sensitive_features)
    return _eopp_gap(e, _weights(sample_weight, e.y_pred.shape[0]), pos_label, method)


def false_positive_rate_difference(
    y_true: Any, y_pred: Any, *, sensitive_features: Any, method: str = "between_groups",
    sample_weight: Any = None, pos_label: Hashable = 1,
) -> float:
    r"""False positive rate difference: the gap in false-positive rate of ``pos_label`` across
    groups (fairlearn's name), the violation of false-positive-rate parity
    (``fairness="false_positive_rate_parity"``).

    .. math::

        \max_{s_1, s_2} \left| P[\hat y = p \mid s = s_1, y \ne p]
                              - P[\hat y = p \mid s = s_2, y \ne p] \right|,
        \quad p = \text{pos\_label}

    (``method="to_overall"``: the largest distance of a group's rate to the overall one). Groups
    without any record of another class than ``pos_label`` have no false-positive rate and are
    left out; if fewer than two groups have such records, ``ValueError`` names them. Equals
    ``fairlearn.metrics.false_positive_rate_difference`` whenever every group has such records.
    With more than two classes it is the one-vs-rest rate of ``pos_label`` among the records of
    every other class.

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n,)
        True and predicted labels.
    sensitive_features : array-like of shape (n,)
        Group of each record; at least 2 distinct groups.
    method : {"between_groups", "to_overall"}
        As in fairlearn.
    sample_weight : array-like of shape (n,), optional
        Non-negative weights.
    pos_label : hashable, default 1
        The "positive" label; must occur in y_true or y_pred.

    Returns
    -------
    float in [0, 1].
    """
    _check_method(method)
    e = _prepare(y_true, y_pred, sensitive_features)
    return _fpr_gap(e, _weights(sample_weight, e.y_pred.shape[0]), pos_label, method)


def demographic_parity_violation(y_true: Any, y_pred: Any, *, sensitive_features: Any) -> float:
    """Alias of :func:`demographic_parity_difference` (defaults), kept for compatibility."""
    return demographic_parity_difference(y_true, y_pred, sensitive_features=sensitive_features)


def equalized_odds_violation(
    y_true: Any, y_pred: Any, *, sensitive_features: Any, conditioning: str = "per_class"
) -> float:
    """Alias of :func:`equalized_odds_difference` (defaults, and its ``conditioning``), kept for
    compatibility."""
    return equalized_odds_difference(y_true, y_pred, sensitive_features=sensitive_features,
                                     conditioning=conditioning)


def equal_opportunity_violation(
    y_true: Any, y_pred: Any, *, sensitive_features: Any, pos_label: Hashable = 1
) -> float:
    """Alias of :func:`equal_opportunity_difference` (defaults, and its ``pos_label``), kept for
    compatibility."""
    return equal_opportunity_difference(y_true, y_pred, sensitive_features=sensitive_features,
                                        pos_label=pos_label)


def accuracy_parity_violation(y_true: Any, y_pred: Any, *, sensitive_features: Any) -> float:
    r"""Accuracy parity violation (Tran et al. 2021, §4.1): the gap in per-group accuracy.

    .. math::

        \max_{s_1, s_2} \left| P[\hat y = y \mid s = s_1] - P[\hat y = y \mid s = s_2] \right|

    Tran et al. (2021) state accuracy parity as ``P[ŷ ≠ y | s=a] = P[ŷ ≠ y]`` for every group; this is the
    largest pairwise violation of it (the same number with error rates in place of accuracies).

    Returns
    -------
    float in [0, 1].
    """
    return _accuracy_gap(_prepare(y_true, y_pred, sensitive_features))


def statistical_parity_difference(
    y_pred: Any,
    *,
    sensitive_features: Any,
    pos_label: Hashable = 1,
    group: Hashable | None = None,
    reference_group: Hashable | None = None,
) -> float:
    r"""Statistical parity difference (SPD, Wu et al. 2024, eq. 4); signed.

    .. math::

        \mathrm{SPD} = P[\hat y = p \mid s = \text{group}]
                       - P[\hat y = p \mid s = \text{reference\_group}],
        \quad p = \text{pos\_label}.

    With two groups the defaults are ``reference_group`` = the first and ``group`` = the second
    group in sorted order, which for ``s ∈ {0, 1}`` is Wu et al.'s
    ``|{ŷ=1, s=1}|/|{s=1}| - |{ŷ=1, s=0}|/|{s=0}|``. With k > 2 groups both must be given.

    Relation to demographic parity: ``|SPD| <= demographic_parity_difference``,
    with equality for binary predictions and two groups (the demographic parity difference is the largest
    |SPD| over all pairs of groups and all predicted classes).

    Parameters
    ----------
    y_pred : array-like of shape (n,)
        Predicted labels.
    sensitive_features : array-like of shape (n,)
        Group of each record; at least 2 distinct groups.
    pos_label : hashable, default 1
        The label whose rate is compared. If it never occurs in y_pred but is of the same kind
        (number or str) as the predictions, its rate is 0 in every group and SPD = 0 (a model
        that predicts the other class for everyone); a pos_label of another kind is an error.
    group, reference_group : hashable, optional
        The two groups compared (see above).

    Returns
    -------
    float in [-1, 1].
    """
    e = _prepare(None, y_pred, sensitive_features, need_y_true=False)
    if _same_kind(e.labels, pos_label) and not any(v == pos_label for v in e.labels.tolist()):
        # A model that never predicts pos_label (e.g. the constant "trivial fair model") has
        # positive rate 0 in every group; only a pos_label of another kind is a caller error.
        hit = np.zeros_like(e.y_pred)
    else:
        hit = (e.y_pred == _label_code(e.labels, pos_label, "pos_label")).astype(np.int64)
    if group is None and reference_group is None:
        if e.groups.size != 2:
            raise ValueError(
                f"sensitive_features has {e.groups.size} groups {e.groups.tolist()}; with more "
                "than 2 groups pass group= and reference_group= to choose the pair, or use "
                "demographic_parity_difference for the worst pair."
            )
        g, r = 1, 0
    elif group is None or reference_group is None:
        raise ValueError(
            "pass both group= and reference_group= (or neither, when there are exactly 2 groups)."
        )
    else:
        g = code_of(e.groups, group, "group", "groups in sensitive_features")
        r = code_of(e.groups, reference_group, "reference_group", "groups in sensitive_features")
    table = _rate_table(e.s, hit, e.groups.size)
    rates = table[:, 1] / table.sum(axis=1)
    return float(rates[g] - rates[r])


def decision_boundary_covariance(
    scores: Any, *, sensitive_features: Any, per_group: bool = False
) -> float | np.ndarray:
    r"""Decision-boundary covariance (Wu et al. 2024, eq. 2, after Zafar et al. 2017).

    The empirical (1/n, population) covariance between group membership and the signed distance
    ``d_i`` of each record to the decision boundary (for a linear model ``d_i = θᵀa_i``; pass
    e.g. ``decision_function`` outputs or logits)::

        Cov_g = (1/n) Σ_i (1[s_i = g] - p_g) d_i,      p_g = (1/n) Σ_i 1[s_i = g]

    Groups are one-hot encoded in sorted order. With two groups, ``Cov_1`` is Wu et al.'s
    ``(1/n) Σ (s_i - s̄) d_i`` for ``s ∈ {0, 1}`` and ``Cov_0 = -Cov_1``. The entries always sum
    to 0.

    Parameters
    ----------
    scores : array-like of shape (n,)
        Real-valued signed distances to the decision boundary.
    sensitive_features : array-like of shape (n,)
        Group of each record; at least 2 distinct groups.
    per_group : bool, default False
        If False, return ``max_g |Cov_g|`` (a float ≥ 0; for two groups the ``|Cov(s, d)|`` that
        Wu et al. (2024) constrain to be ≤ ε). If True, return the signed vector ``(Cov_g)_g`` of
        shape (k,), in the sorted order of the groups.
    """
    d = as_records(scores, "scores")
    sf = as_records(sensitive_features, "sensitive_features")
    check_same_length(scores=d, sensitive_features=sf)
    if np.iscomplexobj(d) or not (np.issubdtype(d.dtype, np.number) or d.dtype == bool):
        raise TypeError(
            f"scores must be real numbers (signed distances to the decision boundary), got dtype "
            f"{d.dtype}; pass e.g. model.decision_function(X) or logits as floats."
        )
    d = d.astype(np.float64)
    if not np.all(np.isfinite(d)):
        raise ValueError("scores contains inf; pass finite signed distances.")
    groups, s = encode_metric_groups(sf)
    n = d.shape[0]
    onehot = np.zeros((n, groups.size))
    onehot[np.arange(n), s] = 1.0
    centred = onehot - onehot.mean(axis=0)
    cov = centred.T @ d / n
    if per_group:
        return cov
    return float(np.max(np.abs(cov)))


def misclassification_error(y_true: Any, y_pred: Any) -> float:
    r"""Misclassification error ``(1/n) Σ_i 1[ŷ_i ≠ y_i]`` (the test error of Gupta et al. 2024, §5)."""
    yt = as_records(y_true, "y_true")
    yp = as_records(y_pred, "y_pred")
    check_same_length(y_true=yt, y_pred=yp)
    _, t, p = encode_label_pair(yt, yp)
    assert t is not None
    return _error(t, p)


def trivial_error(y_true: Any) -> float:
    r"""Error of the best constant predictor: ``1 - max_y P[y]`` (1 - majority-label frequency).

    A model that predicts one class for everyone has zero demographic parity and equalized odds
    difference and this error; a fair
    model is useful only where its error is clearly below it (docs/experiments.md).
    """
    _, codes = sorted_codes(as_records(y_true, "y_true"), "y_true")
    return _trivial_error(codes)


#: Fewer records than this in a group (or half as many in a group and label, for the equalized-odds rates)
#: make its rate, and so the gap it enters, mostly noise: a rate from 30 records has a standard
#: error up to 0.09.
SMALL_GROUP = 30


def small_group_notes(y: Any, s: Any, group_names: Any = None, label_names: Any = None,
                      minimum: int = SMALL_GROUP, what: str = "test records") -> list[str]:
    """A note on the sensitive groups with fewer than ``minimum`` records (``what``: the CLI's
    summary reads test records), or with fewer than ``minimum // 2`` in a label (the rates
    demographic_parity_difference and equalized_odds_difference compare), with their counts (what
    fairlearn's ``MetricFrame(...).by_group`` would show next to each rate); [] when there are none.
    :func:`fairness_report` warns with it (once per process for the same note)."""
    y, s = np.asarray(y), np.asarray(s)
    small = []
    for g in np.unique(s):
        in_g = s == g
        name = group_names[int(g)] if group_names is not None and 0 <= int(g) < len(group_names) else g
        per_label = {(label_names[int(c)] if label_names is not None and 0 <= int(c) < len(label_names) else c):
                     int(np.sum(in_g & (y == c))) for c in np.unique(y)}
        if int(in_g.sum()) < minimum or min(per_label.values()) < minimum // 2:
            counts = ", ".join(f"{int(k)} with label {c}" for c, k in per_label.items())
            small.append(f"{str(name)!r} {int(in_g.sum())} ({counts})")
    if not small:
        return []
    return [f"{len(small)} of {len(np.unique(s))} sensitive groups have fewer than {minimum} {what}, or fewer "
            f"than {minimum // 2} in one label: " + "; ".join(small) + ". Their rates, and the fairness gaps that compare them, "
            f"mean little (a rate of {minimum} records is uncertain by about +-0.09): merge small groups or test on "
            "more records"]


def fairness_report(
    y_true: Any, y_pred: Any, *, sensitive_features: Any, pos_label: Hashable | None = None,
    warn_small_groups: bool = True,
) -> dict[str, float]:
    """Bundle of the headline metrics for one model on one evaluation set.

    Returns a dict with keys ``test_error`` (:func:`misclassification_error`), ``trivial_error``,
    ``demographic_parity_difference``, ``equalized_odds_difference`` (per-class form),
    ``equal_opportunity_difference`` (for ``pos_label``) and ``accuracy_parity_violation``, each
    with the defaults of its function. The keys ``dp_violation``, ``eo_violation`` and
    ``eopp_violation`` repeat the three fairness numbers under their former names, kept for
    compatibility. Raises like the individual metrics, except that ``equal_opportunity_difference``
    is NaN where it is undefined (fewer than two groups with records of ``pos_label``, as in a
    small test split) and where ``pos_label`` was left out (None: the label 1) and no label is 1
    (string labels): a bundle must not fail on a metric the caller may not have asked for
    (:func:`equal_opportunity_difference` alone raises, naming the groups; a ``pos_label`` given
    and not among the labels raises here too).

    ``warn_small_groups``: warn (once for the same groups) when a group has fewer than
    :data:`SMALL_GROUP` records or fewer than half as many with one label (:func:`small_group_notes`);
    False for a caller that says it itself (``pfair train``'s summary names the groups) or records its
    own warnings (a sweep's rows).
    """
    e = _prepare(y_true, y_pred, sensitive_features)
    assert e.y_true is not None
    if warn_small_groups:
        for note in small_group_notes(np.asarray(y_true), np.asarray(sensitive_features), what="records"):
            warn_once(f"fairness_report: {note}", UserWarning, stacklevel=2)
    w = np.ones(e.y_pred.shape[0])
    dp = _dp_gap(e, w, None, "between_groups")
    eo = _eo_gap(e, w, None, "per_class", "between_groups", "worst_case")
    try:
        eopp = _eopp_gap(e, w, 1 if pos_label is None else pos_label, "between_groups")
    except ValueError as exc:
        # A pos_label given and not among the labels is the caller's error; the default 1 on labels
        # without a 1 ("no"/"yes") is a metric nobody asked for.
        if "is undefined" not in str(exc) and not (pos_label is None and "is not among" in str(exc)):
            raise
        eopp = float("nan")
    return {
        "test_error": _error(e.y_true, e.y_pred),
        "trivial_error": _trivial_error(e.y_true),
        "demographic_parity_difference": dp,
        "equalized_odds_difference": eo,
        "equal_opportunity_difference": eopp,
        "accuracy_parity_violation": _accuracy_gap(e),
        "dp_violation": dp,
        "eo_violation": eo,
        "eopp_violation": eopp,
    }


# --------------------------------------------------------------------------------------------
# fairlearn-compatible names and the per-group report
# --------------------------------------------------------------------------------------------
#
# The ratios and the per-group report keep fairlearn's definitions exactly: rates one-vs-rest for
# ``pos_label`` (default 1), a rate with no records counted as 0.

class _Rates(NamedTuple):
    """Weighted per-group rates for one positive label (``nan`` where a rate has no records)."""

    groups: np.ndarray
    count: np.ndarray
    selection_rate: np.ndarray
    error: np.ndarray
    true_positive_rate: np.ndarray
    false_positive_rate: np.ndarray
    overall: dict


def _positive_hits(e: _Encoded, pos_label: Hashable) -> tuple[np.ndarray, np.ndarray]:
    """``(ŷ = pos_label, y = pos_label)`` as booleans. A ``pos_label`` of the labels' kind that
    never occurs gives all-False (rates 0, as fairlearn's ``selection_rate``); another kind is an error."""
    if _same_kind(e.labels, pos_label) and not any(v == pos_label for v in e.labels.tolist()):
        none = np.zeros(e.y_pred.shape[0], dtype=bool)
        return none, none.copy()
    p = _label_code(e.labels, pos_label, "pos_label")
    assert e.y_true is not None
    return e.y_pred == p, e.y_true == p


def _rate(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num/den`` with 0 where ``den = 0`` (scikit-learn's and fairlearn's zero_division=0)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


def _rates(y_true: Any, y_pred: Any, sensitive_features: Any, pos_label: Hashable, sample_weight: Any) -> _Rates:
    e = _prepare(y_true, y_pred, sensitive_features)
    assert e.y_true is not None
    w = _weights(sample_weight, e.y_pred.shape[0])
    pred_pos, true_pos = _positive_hits(e, pos_label)
    wrong = e.y_true != e.y_pred
    k = e.groups.size

    def per_group(mask: np.ndarray) -> np.ndarray:
        return np.bincount(e.s, weights=w * mask, minlength=k)

    def overall(num_mask: np.ndarray, den_mask: np.ndarray) -> float:
        return float(_rate(np.array([np.sum(w * num_mask)]), np.array([np.sum(w * den_mask)]))[0])

    ones = np.ones_like(wrong)
    tot = per_group(ones)
    pos, neg = per_group(true_pos), per_group(~true_pos)
    return _Rates(
        groups=e.groups,
        count=np.bincount(e.s, minlength=k).astype(np.float64),
        selection_rate=_rate(per_group(pred_pos), tot),
        error=_rate(per_group(wrong), tot),
        true_positive_rate=_rate(per_group(pred_pos & true_pos), pos),
        false_positive_rate=_rate(per_group(pred_pos & ~true_pos), neg),
        overall={
            "count": float(e.y_pred.shape[0]),
            "selection_rate": overall(pred_pos, ones),
            "error": overall(wrong, ones),
            "true_positive_rate": overall(pred_pos & true_pos, true_pos),
            "false_positive_rate": overall(pred_pos & ~true_pos, ~true_pos),
        },
    )


def _difference(values: np.ndarray, overall: float, method: str) -> float:
    if method == "between_groups":
        return float(values.max() - values.min())
    return float(np.max(np.abs(values - overall)))


def _ratio(values: np.ndarray, overall: float, method: str) -> float:
    with np.errstate(invalid="ignore", divide="ignore"):
        if method == "between_groups":
            return float(values.min() / values.max()) if values.max() > 0 else float("nan")
        ratios = np.minimum(values / overall, overall / values) if overall > 0 else np.full_like(values, np.nan)
        return float(np.min(ratios))


def _combine(a: float, b: float, agg: str) -> float:
    if agg == "worst_case":
        return max(a, b)
    if agg == "mean":
        return (a + b) / 2.0
    raise ValueError(f"agg={agg!r} is not supported; pass 'worst_case' or 'mean'.")


def demographic_parity_ratio(
    y_true: Any, y_pred: Any, *, sensitive_features: Any, method: str = "between_groups",
    sample_weight: Any = None, pos_label: Hashable = 1,
) -> float:
    r"""Demographic parity ratio: smallest over largest group selection rate
    (``"to_overall"``: the smallest ``min(r_g/r, r/r_g)``); 1 is parity. As fairlearn's; ``nan``
    when every selection rate is 0."""
    _check_method(method)
    yt = y_pred if y_true is None else y_true
    r = _rates(yt, y_pred, sensitive_features, pos_label, sample_weight)
    return _ratio(r.selection_rate, r.overall["selection_rate"], method)


def equalized_odds_ratio(
    y_true: Any, y_pred: Any, *, sensitive_features: Any, method: str = "between_groups",
    sample_weight: Any = None, agg: str = "worst_case", pos_label: Hashable = 1,
) -> float:
    r"""Equalized odds ratio: the smaller (``"worst_case"``) or the mean of the TPR and FPR
    ratios across groups. As fairlearn's."""
    _check_method(method)
    r = _rates(y_true, y_pred, sensitive_features, pos_label, sample_weight)
    a = _ratio(r.true_positive_rate, r.overall["true_positive_rate"], method)
    b = _ratio(r.false_positive_rate, r.overall["false_positive_rate"], method)
    return min(a, b) if agg == "worst_case" else _combine(a, b, agg)


def equal_opportunity_ratio(
    y_true: Any, y_pred: Any, *, sensitive_features: Any, method: str = "between_groups",
    sample_weight: Any = None, pos_label: Hashable = 1,
) -> float:
    r"""Equal opportunity ratio: smallest over largest group true-positive rate. As fairlearn's."""
    _check_method(method)
    r = _rates(y_true, y_pred, sensitive_features, pos_label, sample_weight)
    return _ratio(r.true_positive_rate, r.overall["true_positive_rate"], method)


def group_report(
    y_true: Any, y_pred: Any, *, sensitive_features: Any, pos_label: Hashable = 1, sample_weight: Any = None,
) -> pd.DataFrame:
    r"""Per-group metrics, like fairlearn's ``MetricFrame``: one row per group with

    * ``count`` — records (unweighted),
    * ``selection_rate`` — ``P[ŷ = p | s = g]``, ``p = pos_label``,
    * ``error`` — ``P[ŷ ≠ y | s = g]`` (one minus the accuracy),
    * ``true_positive_rate`` — ``P[ŷ = p | s = g, y = p]``,
    * ``false_positive_rate`` — ``P[ŷ = p | s = g, y ≠ p]``,

    (rates weighted by ``sample_weight``; a rate with no records is 0, as in fairlearn), then the
    rows ``overall`` (all records), ``difference`` (largest minus smallest group value:
    ``MetricFrame.difference()``) and ``ratio`` (smallest over largest: ``MetricFrame.ratio()``).
    The group rows equal ``MetricFrame(...).by_group``; the difference of ``selection_rate`` is
    :func:`demographic_parity_difference`, and the larger of the TPR and FPR differences is
    :func:`equalized_odds_difference`. With more than two classes the rates are one-vs-rest for
    ``pos_label``. The table is a DataFrame that ``print`` shows in full.
    """
    r = _rates(y_true, y_pred, sensitive_features, pos_label, sample_weight)
    cols = ["count", "selection_rate", "error", "true_positive_rate", "false_positive_rate"]
    by_group = pd.DataFrame({c: getattr(r, c) for c in cols}, index=pd.Index(r.groups.tolist(), dtype=object))
    extra = pd.DataFrame(
        [r.overall, {c: _difference(by_group[c].to_numpy(), 0.0, "between_groups") for c in cols},
         {c: _ratio(by_group[c].to_numpy(), 0.0, "between_groups") for c in cols}],
        index=["overall", "difference", "ratio"],
    )
    out = pd.concat([by_group, extra[cols]])
    out.index.name = getattr(sensitive_features, "name", None) or "sensitive_features"

    return FullTable(out)  # prints every column


__all__ += [
    "demographic_parity_difference",
    "demographic_parity_ratio",
    "equal_opportunity_difference",
    "equal_opportunity_ratio",
    "equalized_odds_difference",
    "equalized_odds_ratio",
    "false_positive_rate_difference",
    "group_report",
]


def notion_metric(notion: Any, y_true: Any, y_pred: Any, *, sensitive_features: Any, pos_label: Any = 1) -> float:
    """The public metric of a fairness notion (:class:`pfair.notions.FairnessNotion`): the function
    of this module named by its ``metric_name``, with its defaults (``pos_label``: the positive
    class's label value, for notions that read it). Here rather than a method of the notion, so that
    the notions do not import this module (which imports the validation module, which imports
    them)."""
    fn = globals()[notion.metric_name]
    if notion.uses_positive:
        return fn(y_true, y_pred, sensitive_features=sensitive_features, pos_label=pos_label)
    return fn(y_true, y_pred, sensitive_features=sensitive_features)
