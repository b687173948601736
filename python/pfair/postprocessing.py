"""Private post-processing: per-group thresholds on a base model's scores, chosen from DP histograms
that the silos release (after Hardt, Price and Srebro, "Equality of Opportunity in Supervised
Learning", 2016).

A base model scores every record, ``p(x) = P̂[y = 1 | x]``, with no use of s. The score axis is
cut into B bins (edges fixed before anything about s is released). Each silo j releases the
histogram of its records by (score bin, group, label),

    c_j[b, r, y] = #{ i in silo j : bin(p(x_i)) = b, s_i = r, y_i = y } + N(0, (z_j √2)²)   per cell,

charged to its ledger before it is computed. The server adds the silos' noisy tables, clamps them
at 0 (post-processing, free) and chooses, per group r, the probability ``q[r, b]`` of predicting
the positive class for a record in bin b, non-decreasing in b: a threshold on the score per group,
randomised where needed (Hardt et al. randomise between two thresholds to reach a point of a
group's ROC hull; a non-decreasing q is such a mixture). The q minimise the error estimated from
the pooled table subject to the fairness constraint on the estimated rates (a linear programme),
held a margin below the target (by default the table's resolution, :func:`rate_resolution`: about
one standard deviation of how far its noise can move the smallest group's rate), so that the target
holds on the records within about that (measured: no rule more than 0.02 over its target where the
table resolves it, docs/postprocessing.md):

* ``"demographic_parity"``: the selection rates ``P[ŷ = 1 | s = r]`` within ``max_violation``;
* ``"equalized_odds"``: the true- and false-positive rates within ``max_violation`` (Hardt et al.);
* ``"equal_opportunity"``: the true-positive rates within ``max_violation`` (Hardt et al.).

The constant predictor (q ≡ 0 or q ≡ 1) meets every constraint, so on the released table the
chosen rule is never worse than it; whether it is *clearly* better, given the noise, is checked
and warned (:class:`~pfair.exceptions.NotBetterThanConstantWarning`).

Sensitivity (docs/postprocessing.md). The base model and the bin edges are fixed before the
release: in attribute mode they are functions of x and y only (which neighbours share); in record
mode the base model is itself a DP release of the same silos, charged to the same ledgers, and the
histogram is analysed conditionally on it (adaptive composition: the ledger composes both).

* ``protect="attribute"`` (neighbours differ in one record's s): that record's count moves from
  cell (b, r, y) to (b, r′, y), so the table changes by ``e_(b,r′,y) − e_(b,r,y)``: L2 norm √2
  (0 when r = r′).
* ``protect="record"`` (one whole record replaced): the old record's count leaves its cell
  (b, r, y) and the new record's count joins its own (b′, r′, y′); bin, group and label may all
  change, but it is still one count out and one count in: L2 norm at most √2. (The base model is
  what changes more in record mode, and it is paid for by its own private fit.)

Either way one release is a Gaussian mechanism of L2 sensitivity √2 and noise multiplier z_j: a
full-batch Gaussian event in the silo's ledger. ``epsilon`` is, as for :class:`pfair.SteFFLe`,
what the silo's ledger may have spent once the release is made: z_j is the smallest noise
multiplier for which everything the ledger holds plus this release composes to at most
``epsilon`` at the ledger's δ (a fresh ledger: the whole ``epsilon`` for the one release).
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy.optimize import linprog
from sklearn.base import BaseEstimator, ClassifierMixin, clone

from pfair._fit import warn_non_private
from pfair._validation import _codes_among, as_features, as_vector, check_choice
from pfair.exceptions import ConvergenceWarning, NotBetterThanConstantWarning, NotFittedError, PrivacyWarning
from pfair.federation import Federation
from pfair.privacy.accountant import epsilon_for
from pfair.privacy.ledger import PrivacyLedger
from pfair.privacy.report import PrivacyReport
from pfair.privacy.score_histogram import (MAX_BINS, SCORE_HISTOGRAM_SENSITIVITY, check_edges, release_score_histogram,
                                           score_bins, score_counts)
from pfair.protocol.keys import noise_key
from pfair.protocol.setup import resolve_ledgers
from pfair.settings import default_delta

__all__ = ["PrivateThresholdOptimizer", "ThresholdRule", "choose_thresholds", "tradeoff", "CONSTRAINTS"]

CONSTRAINTS = ("demographic_parity", "equalized_odds", "equal_opportunity")


# ------------------------------------------------------------------------------ the server's side
@dataclass(frozen=True)
class ThresholdRule:
    """Per-group randomised thresholds: ``q[r, b]`` is the probability of predicting the positive
    class for a record of group r whose score falls in bin b (non-decreasing in b).
    ``error`` and ``violation`` are the rule's values estimated from the released table;
    ``constant_error`` is the constant predictor's error on it; ``margin`` how far below
    ``max_violation`` the programme held the estimated violation (its band ``max(0, t − margin)``)."""

    q: np.ndarray
    error: float
    violation: float
    constant_error: float
    constraints: str
    max_violation: float
    margin: float = 0.0

    @property
    def band(self) -> float:
        """``max(0, max_violation − margin)``: what the programme held the estimated violation to."""
        return max(0.0, self.max_violation - self.margin)


def _constrained_blocks(P: np.ndarray, constraints: str) -> list[np.ndarray]:
    """The ``B × k`` block of a ``B × k × 2`` table that each constrained rate reads: every record
    for demographic parity, the positives for equal opportunity, the positives then the negatives
    (true- and false-positive rates) for equalized odds."""
    if constraints == "demographic_parity":
        return [P.sum(axis=2)]
    if constraints == "equal_opportunity":
        return [P[:, :, 1]]
    return [P[:, :, 1], P[:, :, 0]]


def _rate_rows(P: np.ndarray, constraints: str) -> list[np.ndarray]:
    """Per constrained rate (one for demographic parity and equal opportunity, two for equalized
    odds), the ``k × B`` coefficients with ``rate_r = Σ_b coef[r, b] q[r, b]``; rows of groups
    without records of the rate's condition are NaN (their rate is undefined and unconstrained)."""
    out = []
    for part in _constrained_blocks(P, constraints):
        mass = part.T  # k × B
        total = mass.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            out.append(np.where(total > 0, mass / total, np.nan))
    return out


def estimated_violation(q: np.ndarray, counts: np.ndarray, constraints: str) -> float:
    """The violation of rule ``q`` on a (noisy) ``B × k × 2`` table, clamped at 0: the largest gap
    between groups of the constrained rates (groups whose rate is undefined left out)."""
    P = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
    gaps = [0.0]
    for coef in _rate_rows(P, constraints):
        rates = np.nansum(coef * q, axis=1)[~np.isnan(coef).any(axis=1)]
        if rates.size >= 2:
            gaps.append(float(rates.max() - rates.min()))
    return max(gaps)


def choose_thresholds(counts: np.ndarray, *, constraints: str = "demographic_parity",
                      max_violation: float = 0.0, margin: float = 0.0) -> ThresholdRule:
    """The rule of least estimated error on the pooled (noisy) ``B × k × 2`` table whose estimated
    violation is at most ``max(0, max_violation − margin)`` (a linear programme, HiGHS). ``margin``:
    how much of the target the table's noise may take (:func:`rate_resolution`; 0: the target on the
    noisy table as it is).

    With ``N`` the table clamped at 0 and ``n = Σ N``: minimise
    ``(1/n) Σ_{r,b} [q[r,b] N[b,r,0] + (1 − q[r,b]) N[b,r,1]]`` over ``0 ≤ q[r,b] ≤ q[r,b+1] ≤ 1``,
    subject to ``lo ≤ rate_r(q) ≤ hi`` for every group with a defined rate and
    ``hi − lo ≤ max(0, t − margin)``, per constrained rate."""
    check_choice(constraints, "constraints", CONSTRAINTS)
    t = float(max_violation)
    if not (math.isfinite(t) and 0 <= t <= 1):
        raise ValueError(f"max_violation must be in [0, 1]; got {max_violation!r}")
    margin = float(margin)
    if not (math.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be a number >= 0; got {margin!r}")
    N = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
    if N.ndim != 3 or N.shape[2] != 2:
        raise ValueError(f"a score table is bins × groups × 2 labels; got shape {N.shape}")
    n = N.sum()
    if n <= 0:
        raise ValueError("the released score table is empty after clamping the noise at 0: no rule can be chosen "
                         "from it (too few records for this epsilon and number of bins)")
    P = N / n
    B, k, _ = P.shape
    nq = k * B
    rates = _rate_rows(P, constraints)
    nv = nq + 2 * len(rates)
    c = np.zeros(nv)
    c[:nq] = (P[:, :, 0] - P[:, :, 1]).T.ravel()  # q index r·B + b
    rows, rhs = [], []
    for r in range(k):  # monotone: q[r, b] − q[r, b+1] ≤ 0
        for b in range(B - 1):
            row = np.zeros(nv)
            row[r * B + b], row[r * B + b + 1] = 1.0, -1.0
            rows.append(row)
            rhs.append(0.0)
    for m, coef in enumerate(rates):
        lo, hi = nq + 2 * m, nq + 2 * m + 1
        for r in range(k):
            if np.isnan(coef[r]).any():
                continue
            up, down = np.zeros(nv), np.zeros(nv)
            up[r * B:(r + 1) * B], up[hi] = coef[r], -1.0      # rate_r − hi ≤ 0
            down[r * B:(r + 1) * B], down[lo] = -coef[r], 1.0  # lo − rate_r ≤ 0
            rows += [up, down]
            rhs += [0.0, 0.0]
        band = np.zeros(nv)
        band[hi], band[lo] = 1.0, -1.0
        rows.append(band)
        rhs.append(max(0.0, t - margin))  # ThresholdRule.band
    res = linprog(c, A_ub=np.array(rows) if rows else None, b_ub=np.array(rhs) if rows else None,
                  bounds=[(0.0, 1.0)] * nv, method="highs")
    if res.status != 0:  # pragma: no cover - the constant rule is always feasible
        raise RuntimeError(f"the threshold programme failed: {res.message}")
    q = np.clip(res.x[:nq].reshape(k, B), 0.0, 1.0)
    positives = float(P[:, :, 1].sum())
    error = float(c[:nq] @ q.ravel() + positives)
    return ThresholdRule(q=q, error=error, violation=estimated_violation(q, N, constraints),
                         constant_error=float(min(positives, 1.0 - positives)), constraints=constraints,
                         max_violation=t, margin=margin)


def tradeoff(counts: np.ndarray, *, constraints: str = "demographic_parity",
             max_violations: Sequence[float] = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 1.0),
             margin: float = 0.0) -> pd.DataFrame:
    """The error/violation trade-off of the rules :func:`choose_thresholds` picks for each
    tolerance (each held ``margin`` below it), estimated on the released table (post-processing:
    free). Columns ``max_violation``, ``band`` (``max(0, max_violation − margin)``, what the
    programme held the estimated violation to), ``error``, ``violation``, ``constant_error``."""
    rules = [choose_thresholds(counts, constraints=constraints, max_violation=t, margin=margin)
             for t in max_violations]
    return pd.DataFrame({"max_violation": [float(t) for t in max_violations],
                         "band": [r.band for r in rules],
                         "error": [r.error for r in rules],
                         "violation": [r.violation for r in rules],
                         "constant_error": [r.constant_error for r in rules]})


#: The smallest violation a released table is asked to tell apart: below it :func:`rate_resolution`
#: is held to this instead of ``max_violation`` (0, the default, cannot be verified on any noisy table).
RESOLUTION_FLOOR = 0.02


def rate_resolution(counts: np.ndarray, constraints: str, sigma: float) -> tuple[float, int]:
    """``(σ·√B / T, T)``: how far the released table's noise can move the constrained rate of its
    smallest group. ``T`` is the smallest group's count (clamped at 0) in a block a constraint
    reads (every record for demographic parity; the positives for equal opportunity; positives
    and negatives for equalized odds), ``B`` the bins and ``σ`` the noise std of a pooled cell. A
    rate is ``Σ_b q_b N_b / T`` over the group's B cells of the block, whose derivative in ``N_b`` is
    ``(q_b − rate)/T``, at most 1/T in size: the noise moves it with a std of at most ``σ√B/T``
    (to first order), and a rule chosen on the same noise can align with it. Post-processing of
    the released table: public. ``(0, T)`` without noise."""
    N = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
    totals = [t for part in _constrained_blocks(N, constraints) for t in part.sum(axis=0) if t > 0]
    if not totals:
        return 0.0, 0
    smallest = float(min(totals))
    return float(sigma) * math.sqrt(N.shape[0]) / smallest, int(round(smallest))


def pool_histograms(histograms: Sequence[np.ndarray]) -> np.ndarray:
    """The silos' released tables summed and clamped at 0 (post-processing): the table the server
    chooses from, in process and in a deployment."""
    if not len(histograms):
        raise ValueError("no silo released a score histogram; no thresholds can be chosen")
    return np.maximum(np.sum([np.asarray(h, dtype=np.float64) for h in histograms], axis=0), 0.0)


def check_margin(margin: Any, where: str = "margin") -> float | str:
    """``margin`` as :class:`PrivateThresholdOptimizer` and the Flower strategy take it: ``"auto"``
    or a finite real number >= 0 (a string of one, as a run config may carry it, is read as the
    number); anything else is refused, naming ``where``."""
    if isinstance(margin, str) and margin != "auto":
        try:
            margin = float(margin)
        except ValueError:
            pass
    if isinstance(margin, str) and margin == "auto":
        return margin
    if isinstance(margin, bool) or not isinstance(margin, numbers.Real) or not (
            math.isfinite(float(margin)) and float(margin) >= 0):
        raise ValueError(f"{where} must be 'auto' (the released table's resolution) or a finite number >= 0 (0: the "
                         f"target on the noisy table as it is); got {margin!r}")
    return float(margin)


def held_margin(margin: float | str, pooled: np.ndarray, constraints: str, sigma: float) -> tuple[float, float, int]:
    """``(margin, resolution, smallest)`` for a pooled released table whose cells carry noise of std
    ``sigma``: the resolution (:func:`rate_resolution`) and the margin a rule is held to below its
    target (the resolution for ``"auto"``). Post-processing of the released table and public
    noise stds; the estimator and the Flower strategy both read it here."""
    resolution, smallest = rate_resolution(pooled, constraints, sigma)
    return (resolution if margin == "auto" else float(margin)), resolution, smallest


def beyond_resolution(resolution: float, max_violation: float) -> bool:
    """Whether a table of this :func:`rate_resolution` is too coarse to verify ``max_violation``
    (held to :data:`RESOLUTION_FLOOR` below it): the rule then meets the target on the noisy table
    only. The rule of :class:`PrivateThresholdOptimizer`'s warning and the deployment's event."""
    return resolution > max(float(max_violation), RESOLUTION_FLOOR)


def error_noise(sigmas: Sequence[float], n_cells: int, n: float) -> float:
    """Std bound of a rule's error estimated from the pooled noisy table: each of the ``n_cells``
    cells enters with a weight in [−1, 1] over ``n`` records, and the silos' noises add, so the
    std is at most ``√(Σ_j σ_j²) · √n_cells / n``."""
    return math.sqrt(float(np.sum(np.square(sigmas)))) * math.sqrt(n_cells) / max(float(n), 1.0)


# ------------------------------------------------------------------------------ the estimator
class PrivateThresholdOptimizer(ClassifierMixin, BaseEstimator):
    """Per-group thresholds on a base model's scores, chosen from the silos' DP histograms (Hardt,
    Price and Srebro, "Equality of Opportunity in Supervised Learning", 2016). Predicting needs the
    sensitive attribute: ``predict(X, sensitive_features=s)``. Binary labels.

    Parameters
    ----------
    estimator : scikit-learn classifier, default ``LogisticRegression(max_iter=1000)``
        The base model; its score is the probability of ``classes_[1]`` (``predict_proba``, else
        the logistic function of ``decision_function``). Trained on the pooled x and y of the silos
        (never on s) unless ``prefit``.
    constraints : {"demographic_parity", "equalized_odds", "equal_opportunity"}
    max_violation : float in [0, 1], default 0
        Tolerance of the constraint on the per-group rates (0: equal rates, as Hardt et al.).
        :meth:`tradeoff` traces the error/violation trade-off for free.
    margin : "auto" (default) or float >= 0
        How far below ``max_violation`` the rule holds the violation estimated from the released
        table, so that the target holds on the records within about the noise: ``"auto"``, the
        table's ``resolution_`` (about one standard deviation of how far its noise can move the
        smallest group's rate); 0, the target on the noisy table as it is. The programme's band is
        ``max(0, max_violation − margin)``. Post-processing of the released table: no budget. Measured in docs/postprocessing.md
        ("A small group").
    epsilon, delta : each silo's ledger after the release is at most (epsilon, delta)-DP
        (delta=None: 1/n_j²; a new ledger is made with this budget). ``epsilon=None``: non-private
        (exact counts; warned).
    bins : int or array of interior edges, default 20
        The score bins. An int gives ``bins`` bins: at quantiles of the pooled training scores in
        attribute mode (the scores are functions of x, which attribute mode does not protect),
        equal-width on [0, 1] in record mode. More bins: finer thresholds, more noise in total.
    protect : {"attribute", "record"}
        Attribute mode: the base model may be trained on the silos' pooled x and y. Record mode:
        x and y are protected too, so the base model must be a private pfair estimator fitted
        with ``protect="record"`` on the same silos and ledgers, passed with ``prefit=True``
        (its cost and the histogram's compose in each ledger); anything else is refused.
    prefit : bool, default False
        Use ``estimator`` as fitted. A prefit pfair estimator that spent privacy budget must have
        charged the ledgers this fit charges (checked); a prefit model of another library must
        not have read s (it cannot be checked: it is your statement).
    noise_seed : int or None
        None: each silo's noise from the operating system's entropy. An int: reproducible noise,
        for simulations only (the guarantee does not hold against anyone who knows it; warned).

    Attributes
    ----------
    estimator_ : the fitted base model
    bin_edges_ : interior edges of the score bins
    released_counts_ : the pooled noisy (bins × groups × 2) table, clamped at 0 (what the server saw)
    rule_ : :class:`ThresholdRule` (``q`` per group and bin, estimated error and violation, the
        margin it was held to)
    resolution_ : how far the released table's noise can move the smallest group's constrained
        rate (:func:`rate_resolution`, 0 when non-private); the default ``margin``; warned when
        coarser than ``max_violation`` (or 0.02): no margin then leaves room, and the target
        holds on the noisy table only
    classes_, groups_ : label and group values
    ledgers_ : the silos' :class:`~pfair.privacy.PrivacyLedger`
    privacy_report_ : one row per silo: n_records, delta, noise_multiplier, sigma_counts (the noise
        std of a cell), epsilon_release (the release's own ε), epsilon_spent (the ledger's total),
        noise, guarantee
    """

    def __init__(self, *, estimator: Any = None, constraints: str = "demographic_parity", max_violation: float = 0.0,
                 margin: float | str = "auto", epsilon: float | None = 1.0, delta: float | None = None,
                 bins: Any = 20, protect: str = "attribute", prefit: bool = False,
                 noise_seed: int | None = None) -> None:
        self.estimator = estimator
        self.constraints = constraints
        self.max_violation = max_violation
        self.margin = margin
        self.epsilon = epsilon
        self.delta = delta
        self.bins = bins
        self.protect = protect
        self.prefit = prefit
        self.noise_seed = noise_seed

    # ------------------------------------------------------------------ fit
    def fit(self, X: Any, y: Any = None, *, sensitive_features: Any = None, silos: Any = None,
            ledgers: Any = None) -> "PrivateThresholdOptimizer":
        """Fit on a :class:`~pfair.Federation` (``X``), or on arrays split by ``silos`` (one silo
        id per record; None: one silo). ``ledgers``: as :meth:`pfair.SteFFLe.fit` (None: the
        federation's silos' own ledgers; a list of ledgers or JSON paths; ``"new"``)."""
        self._check_params()
        if isinstance(X, Federation):
            if y is not None or sensitive_features is not None or silos is not None:
                raise ValueError("pass either a Federation, or X, y, sensitive_features and silos; not both")
            fed = X
        else:
            if sensitive_features is None:
                raise ValueError("PrivateThresholdOptimizer.fit needs sensitive_features= (the group of each "
                                 "record): the thresholds are chosen per group")
            fed = Federation.from_arrays(X, y, sensitive_features=sensitive_features, silos=silos)
        if fed.n_classes != 2:
            raise ValueError(f"PrivateThresholdOptimizer needs binary labels (it thresholds a score); y has "
                             f"{fed.n_classes} classes {fed.classes_.tolist()}")
        self.classes_, self.groups_ = fed.classes_, fed.groups_
        self.n_features_in_ = fed.n_features
        private = self.epsilon is not None
        budget = _Budget(self.epsilon, self.delta)
        self.ledgers_ = [ledger for ledger in resolve_ledgers(budget, fed, ledgers) if ledger is not None]
        self.estimator_ = self._base_model(fed)
        scores = [self._scores(silo.X) for silo in fed.silos]
        self.bin_edges_ = self._edges(scores)
        n_bins, k = self.bin_edges_.size + 1, fed.n_groups
        if private and self.noise_seed is not None:
            warnings.warn(f"noise_seed={self.noise_seed} makes the silos' histogram noise reproducible: anyone who "
                          "knows it can remove the noise, so the (epsilon, delta) guarantee does not hold against "
                          "them. Use it for simulations only", PrivacyWarning, stacklevel=2)
        if not private:
            warn_non_private(type(self).__name__)
        tables, rows = [], []
        for j, (silo, sc) in enumerate(zip(fed.silos, scores)):
            exact = (lambda silo=silo, sc=sc: score_counts(score_bins(sc, self.bin_edges_), silo.s, silo.y,
                                                           n_bins=n_bins, n_groups=k))
            if private:
                ledger = self.ledgers_[j]
                noisy, z = release_score_histogram(exact, ledger=ledger, epsilon=self.epsilon,
                                                   key=noise_key(self.noise_seed), silo=j)
                rows.append(self._report_row(j, len(silo), ledger, z))
            else:
                noisy, z = exact(), 0.0
                rows.append(self._report_row(j, len(silo), None, z))
            tables.append(noisy)
        pooled = pool_histograms(tables)
        self.released_counts_ = pooled
        sigmas = [r["sigma_counts"] for r in rows]
        sigma = math.sqrt(float(np.sum(np.square(sigmas))))
        # self.margin was checked before the release (_check_params)
        margin, self.resolution_, smallest = held_margin(self.margin, pooled, self.constraints, sigma)
        self.rule_ = choose_thresholds(pooled, constraints=self.constraints, max_violation=self.max_violation,
                                       margin=margin)

        self.privacy_report_ = PrivacyReport(pd.DataFrame(rows).set_index("silo"))
        self._check_constant(pooled, sigmas)
        self._check_resolution(pooled, sigma, smallest)
        return self

    def _check_params(self) -> None:
        check_choice(self.constraints, "constraints", CONSTRAINTS)
        check_choice(self.protect, "protect", ("attribute", "record"))
        if self.epsilon is not None and not (isinstance(self.epsilon, (int, float)) and self.epsilon > 0):
            raise ValueError(f"epsilon must be a number > 0 or None; got {self.epsilon!r}")
        check_margin(self.margin)
        if self.protect == "record" and self.epsilon is not None and not self.prefit:
            raise ValueError(
                "protect='record' protects x and y too, so the base model may not be trained on the silos' pooled "
                "records here. Fit a private base model first, e.g. m = pfair.SteFFLe(lam=0, protect='record', "
                "epsilon=...).fit(fed, ledgers=L), then PrivateThresholdOptimizer(estimator=m, prefit=True, "
                "protect='record', epsilon=...).fit(fed, ledgers=L) on the same federation and ledgers, with a "
                "budget that covers both")

    def _base_model(self, fed: Any) -> Any:
        """The fitted base model: ``estimator`` as given (``prefit``, checked) or a clone trained on the
        pooled x and y (attribute mode or non-private only)."""
        if self.prefit:
            est = self.estimator
            if est is None:
                raise ValueError("prefit=True needs a fitted estimator=")
            if not hasattr(est, "classes_"):
                raise NotFittedError(f"prefit=True but estimator {type(est).__name__} is not fitted; fit it first")
            self._check_base_accounted(est)
            return est
        from sklearn.linear_model import LogisticRegression  # lazy: the default base model only

        est = clone(self.estimator) if self.estimator is not None else LogisticRegression(max_iter=1000)
        Xp, yp, _ = fed.pooled()  # x and y only: s is never read
        return est.fit(Xp, self.classes_[yp])

    def _check_base_accounted(self, est: Any) -> None:
        """A prefit base model that spent privacy budget (a pfair estimator with ``ledgers_``) must
        have spent it on the ledgers this fit charges; record mode needs such a model."""
        base_ledgers = getattr(est, "ledgers_", None) or []
        private_base = getattr(est, "epsilon", None) is not None and len(base_ledgers) > 0
        spent = any(ledger.epsilon_spent() > 0 for ledger in base_ledgers)
        if self.protect == "record" and self.epsilon is not None:
            if not private_base or getattr(est, "protect", None) != "record":
                raise ValueError(
                    f"protect='record' needs a base model that is itself private for whole records: a pfair estimator "
                    f"fitted with protect='record' and epsilon set (got {type(est).__name__}"
                    f"{'' if getattr(est, 'protect', None) is None else ' with protect=' + repr(est.protect)}). Other "
                    "base models read x and y, which record mode protects, outside any ledger")
        if not (private_base and spent) or self.epsilon is None:
            return  # nothing the base model released needs composing (a λ = 0 attribute-mode fit spends 0)
        if len(base_ledgers) != len(self.ledgers_) or any(
                mine is not theirs and (mine.fingerprint != theirs.fingerprint
                                        or mine.epsilon_spent() < theirs.epsilon_spent() * (1 - 1e-9))
                for mine, theirs in zip(self.ledgers_, base_ledgers)):
            raise ValueError(
                "the prefit base model spent privacy budget on ledgers that this fit does not charge: its cost would not "
                "be composed with the histogram's. Fit both on the same Federation (ledgers=None) or pass the same "
                "ledgers to both fits")

    def _scores(self, X: Any) -> np.ndarray:
        """The base model's probability of ``classes_[1]``."""
        est = self.estimator_
        labels = np.asarray(getattr(est, "classes_", self.classes_))
        if hasattr(est, "predict_proba"):
            proba = np.asarray(est.predict_proba(X), dtype=np.float64)
            at = np.flatnonzero(labels == self.classes_[1])
            if proba.ndim != 2 or proba.shape[1] != 2 or at.size != 1:
                raise ValueError(f"the base model's classes {labels.tolist()} are not the data's {self.classes_.tolist()}")
            return proba[:, int(at[0])]
        if hasattr(est, "decision_function"):
            d = np.asarray(est.decision_function(X), dtype=np.float64).ravel()
            return 1.0 / (1.0 + np.exp(-d))
        raise TypeError(f"the base model {type(est).__name__} has neither predict_proba nor decision_function")

    def _edges(self, scores: list[np.ndarray]) -> np.ndarray:
        if not isinstance(self.bins, (int, np.integer)) or isinstance(self.bins, bool):
            return check_edges(self.bins)
        B = int(self.bins)
        if not 2 <= B <= MAX_BINS:
            raise ValueError(f"bins must be an int in [2, {MAX_BINS}] or an array of interior edges; got {self.bins!r}")
        if self.protect == "record" and self.epsilon is not None:
            return np.linspace(0.0, 1.0, B + 1)[1:-1]  # quantiles of the records' scores are not public here
        pooled = np.concatenate(scores)
        edges = np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, B + 1)[1:-1]))
        return edges if edges.size else np.array([0.5])

    def _report_row(self, j: int, n: int, ledger: PrivacyLedger | None, z: float) -> dict:
        if ledger is None:
            return {"silo": j, "n_records": n, "delta": math.nan, "noise_multiplier": 0.0, "sigma_counts": 0.0,
                    "epsilon_release": math.inf, "epsilon_spent": math.inf, "protect": self.protect,
                    "noise": "none", "guarantee": "none (non-private)"}
        own = epsilon_for(noise_multiplier=z, sample_rate=1.0, steps=1, delta=ledger.delta, sampling="full_batch",
                          accountant="exact")
        seeded = self.noise_seed is not None
        return {"silo": j, "n_records": n, "delta": ledger.delta, "noise_multiplier": z,
                "sigma_counts": z * SCORE_HISTOGRAM_SENSITIVITY, "epsilon_release": float(own),
                "epsilon_spent": ledger.epsilon_spent(), "protect": self.protect,
                "noise": f"reproducible (noise_seed={self.noise_seed})" if seeded else "secret",
                "guarantee": "not covered: noise_seed is known" if seeded else "covered"}

    def _check_resolution(self, pooled: np.ndarray, sigma: float, smallest: int) -> None:
        """Warn when ``resolution_`` is coarser than the target (``max_violation``, or
        :data:`RESOLUTION_FLOOR` below it): no margin leaves room then (the rule's band is 0 with
        ``margin="auto"``), the rule meets the target on the noisy table, and on the records it can
        miss it by about that much or more."""
        if not beyond_resolution(self.resolution_, self.max_violation):
            return
        bound = max(float(self.max_violation), RESOLUTION_FLOOR)
        warnings.warn(
            f"{type(self).__name__}: max_violation={float(self.max_violation):g} is enforced on released counts that "
            f"resolve the smallest group's rate only to about ±{self.resolution_:.3f} (about {smallest} of its records "
            f"in a block the {self.constraints} constraint reads, {pooled.shape[0]} bins, noise std "
            f"{sigma:.3g} a pooled cell: σ·√bins / records, above {bound:g}). The rule meets the target on the noisy "
            f"table (rule_.violation = {self.rule_.violation:.3f}, within its band max(0, max_violation − margin) = "
            f"{self.rule_.band:.3f}); no margin leaves room for that much "
            "noise, and on the records its violation can exceed the target by "
            "about the resolution, more where the rule was chosen on the same noise. Fix: merge small groups, fewer "
            "bins, or a larger epsilon (resolution_ holds the figure; docs/postprocessing.md, \"What is supported\")",
            ConvergenceWarning, stacklevel=3)

    def _check_constant(self, pooled: np.ndarray, sigmas: list[float]) -> None:
        """Warn when the chosen rule is not clearly more accurate than the constant predictor on the
        released table: by less than the bound on the noise std of the estimated error
        (:func:`error_noise`)."""
        rule = self.rule_
        margin = error_noise(sigmas, pooled.size, pooled.sum())
        self.beats_constant_ = rule.constant_error - rule.error > margin
        if self.beats_constant_:
            return
        warnings.warn(
            f"{type(self).__name__}: the chosen thresholds' estimated error {rule.error:.4f} is not clearly below the "
            f"constant predictor's {rule.constant_error:.4f} (margin {margin:.4f}, the bound on the noise std of the estimate): "
            f"the constant predictor is as good and needs neither s nor a budget. Cause: "
            + ("the noise of the released histograms (per-cell std "
               f"{math.sqrt(float(np.sum(np.square(sigmas)))):.3g} over {pooled.size} cells) is large for "
               f"{pooled.sum():.0f} records" if margin > 0 else "the base model's scores separate the labels no "
               "better than chance under this constraint")
            + ". Fix: fewer bins, a larger epsilon, more records per silo, a better base model, or a larger "
            "max_violation", NotBetterThanConstantWarning, stacklevel=3)

    # ------------------------------------------------------------------ predict
    def _check_fitted(self) -> None:
        if not hasattr(self, "rule_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first")

    def predict_proba(self, X: Any, *, sensitive_features: Any) -> np.ndarray:
        """Probability of each class under the randomised rule, shape ``(n, 2)``: the positive
        class with probability ``q[group, bin(score)]``."""
        self._check_fitted()
        Xa = as_features(X)
        if Xa.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {Xa.shape[1]} features; this model was fitted on {self.n_features_in_}")
        s = as_vector(sensitive_features, "sensitive_features", Xa.shape[0])
        groups = _codes_among(s, self.groups_, "sensitive_features")
        p = self.rule_.q[groups, score_bins(self._scores(Xa), self.bin_edges_)]
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any, *, sensitive_features: Any, random_state: Any = None) -> np.ndarray:
        """Predicted labels; where the rule randomises, a draw from ``random_state`` (an int, a
        ``numpy.random.Generator`` or None)."""
        p = self.predict_proba(X, sensitive_features=sensitive_features)[:, 1]
        rng = np.random.default_rng(random_state)
        return self.classes_[(rng.random(p.size) < p).astype(int)]

    def tradeoff(self, max_violations: Sequence[float] = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 1.0)) -> pd.DataFrame:
        """The estimated error/violation trade-off over tolerances, from the released table only
        (post-processing: no further budget), each rule held to this fit's margin. See
        :func:`tradeoff`."""
        self._check_fitted()
        return tradeoff(self.released_counts_, constraints=self.constraints, max_violations=max_violations,
                        margin=self.rule_.margin)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.non_deterministic = True
        return tags


@dataclass(frozen=True)
class _Budget:
    """What :func:`pfair.protocol.setup.resolve_ledgers` reads of a fit's settings."""

    epsilon: float | None
    delta: float | None

    @property
    def private(self) -> bool:
        return self.epsilon is not None

    def delta_for(self, n_records: int) -> float:
        return float(self.delta) if self.delta is not None else default_delta(n_records)
