r"""fairlearn's ExponentiatedGradient as a non-private, pooled reference for the sweeps.

Agarwal, Beygelzimer, Dudík, Langford and Wallach, "A Reductions Approach to Fair
Classification" (2018) reduce fair classification to a sequence of cost-sensitive problems:

    min_{Q ∈ Δ(H)} err(Q)   subject to   γ_j(Q) ≤ ε   for every constraint j,

where Q is a randomised classifier over a base class H (here logistic regression), and γ_j the
constraint moments of demographic parity (|P(h = 1 | s = a) − P(h = 1)|) or equalized odds
(the same within each label y). It solves the Lagrangian saddle point by exponentiated gradient
on the multipliers (step ``eta0``), each best response being one weighted fit of the base
learner. The result is a mixture of base classifiers; its ``predict`` draws one of them per
record (``random_state``): the guarantee is on that randomised classifier.

:class:`ExponentiatedGradientLR` wraps ``fairlearn.reductions.ExponentiatedGradient`` with a
``sklearn.linear_model.LogisticRegression`` base so that a sweep can build and fit it like the
other methods: ``fit`` takes a :class:`pfair.Federation` (or ``X, y, sensitive_features,
silos``), pools the silos (the method is central and not private) and ignores their partition;
the fit is deterministic given the records (``seed`` only fixes the randomised predictions).
The sweep's knob is the constraint's ``difference_bound`` (the bound on every constraint moment;
fairlearn's ``eps`` only sets the L1 bound 1/eps of the multipliers since fairlearn 0.7): *smaller*
is fairer.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from pfair.baselines._common import shards_from

__all__ = ["ExponentiatedGradientLR"]

_CONSTRAINTS = ("demographic_parity", "equalized_odds")


class ExponentiatedGradientLR:
    """Non-private fair classification by fairlearn's ExponentiatedGradient over logistic regression.

    Parameters
    ----------
    fairness : ``"demographic_parity"`` or ``"equalized_odds"`` (fairlearn's
        ``DemographicParity`` or ``EqualizedOdds`` constraint).
    difference_bound : the bound on every constraint moment, |P(h = 1 | s = a) − P(h = 1)| ≤
        bound (within each label for equalized odds). Must be > 0.
    eps : fairlearn's ``eps``: the multipliers' L1 norm is bounded by 1/eps (the Lagrangian
        game's B); fairlearn's default 0.01.
    eta0 : initial step of the exponentiated-gradient update of the multipliers.
    max_iter : at most this many best responses (base-learner fits).
    C : inverse L2 regularisation strength of the logistic-regression base learner.
    base_max_iter : L-BFGS iterations of each base fit.
    seed : seeds the randomised predictions (the fit itself is deterministic).
    """

    def __init__(self, *, fairness: str = "demographic_parity", difference_bound: float = 0.01, eps: float = 0.01,
                 eta0: float = 2.0, max_iter: int = 50, C: float = 1.0, base_max_iter: int = 200,
                 seed: int = 0) -> None:
        self.fairness = fairness
        self.difference_bound = difference_bound
        self.eps = eps
        self.eta0 = eta0
        self.max_iter = max_iter
        self.C = C
        self.base_max_iter = base_max_iter
        self.seed = seed

    def _validate(self) -> None:
        if self.fairness not in _CONSTRAINTS:
            raise ValueError(f"fairness: {self.fairness!r} is not supported by ExponentiatedGradientLR; "
                             f"choose from {', '.join(_CONSTRAINTS)}")
        for name in ("difference_bound", "eps", "eta0", "C"):
            value = getattr(self, name)
            if not isinstance(value, (int, float, np.integer, np.floating)) or not value > 0 or not np.isfinite(value):
                raise ValueError(f"{name}: must be a finite number > 0, got {value!r}")
        for name in ("max_iter", "base_max_iter"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name}: must be a whole number >= 1, got {value!r}")

    def fit(self, X: Any, y: Any = None, *, sensitive_features: Any = None, silos: Any = None
            ) -> "ExponentiatedGradientLR":
        """Pool the silos and fit. ``X`` is a :class:`pfair.Federation`, or arrays with ``y``,
        ``sensitive_features`` (and ``silos``, ignored apart from validation)."""
        try:  # lazy: fairlearn is an optional extra (pfair[experiments])
            from fairlearn.reductions import DemographicParity, EqualizedOdds, ExponentiatedGradient
            from sklearn.linear_model import LogisticRegression
        except ImportError:  # pragma: no cover - both are in the test and experiments extras
            raise ImportError("ExponentiatedGradientLR needs fairlearn and scikit-learn: "
                              "pip install 'pfair[experiments]'") from None

        self._validate()
        sh = shards_from(X, y, sensitive_features, silos, need_s=True)
        Xp, yp, sp = sh.pooled()
        moment = DemographicParity if self.fairness == "demographic_parity" else EqualizedOdds
        constraint = moment(difference_bound=float(self.difference_bound))
        base = LogisticRegression(C=float(self.C), max_iter=int(self.base_max_iter))
        eg = ExponentiatedGradient(base, constraint, eps=float(self.eps), max_iter=int(self.max_iter),
                                   eta0=float(self.eta0))
        with warnings.catch_warnings():
            # fairlearn 0.15 trips pandas' deprecation warnings on every iteration; nothing to act on
            warnings.filterwarnings("ignore", module=r"fairlearn\..*")
            warnings.filterwarnings("ignore", message=r".*incompatible dtype.*|.*key that does not exist.*")
            eg.fit(Xp, yp, sensitive_features=sp)
        self.model_ = eg
        self.classes_ = sh.classes_
        self.groups_ = sh.groups_
        self.n_predictors_ = int(len(eg.predictors_))
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Labels of the randomised classifier (one base classifier drawn per record, seeded)."""
        if not hasattr(self, "model_"):
            raise ValueError("this ExponentiatedGradientLR is not fitted yet; call fit first")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"fairlearn\..*")
            codes = np.asarray(self.model_.predict(np.asarray(X, dtype=float), random_state=int(self.seed)))
        return self.classes_[codes.astype(np.int64)]
