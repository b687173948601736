"""Private model selection: choose among candidate settings from the figures the silos released.

:class:`PrivateSearch` fits every candidate of a grid (λ or ``max_violation``, ``batch_size``,
``lr_theta``, ``epochs``, …) on the **same silos and ledgers**, reads of each candidate only the
released validation figures of the model that fit returned (``checkpoints_`` at ``selected_epoch_``:
the validation error, the constant predictor's, and with a target the released violation; never
exact data of a private fit, never test data), and chooses:

* with a fairness target t, the most accurate candidate whose released violation meets t with one
  standard deviation of its noise to spare and which is clearly better than the constant predictor;
  when none does, the fairest candidate still clearly better than the constant (warned);
* without one, the lowest released validation error among the candidates clearly better than the
  constant predictor; when none is, the most accurate (warned).

Privacy (``docs/model_selection.md``): every candidate's rounds and releases are charged to the
silos' ledgers, which compose them; the search only splits the budget, by fitting candidate i with
the cumulative target ``ε_i`` of :func:`pfair.privacy.tuning.search_targets`, so the ledgers end at
the search's ε (the estimator's ``epsilon``) and not above it (they refuse anything past their
budget). The choice is post-processing of released figures. Papernot and Steinke's random-stopping
bound is computed for comparison (``privacy_report_``) and not charged: it covers an observer of
the returned model alone, while the server saw every candidate's rounds.
"""

from __future__ import annotations

import inspect
import math
import time
import warnings
from dataclasses import replace
from typing import Any, Sequence

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, clone
from sklearn.model_selection import ParameterGrid

from pfair.exceptions import ConvergenceWarning, NotFittedError, PrivacyWarning
from pfair.federation import Federation
from pfair.privacy.report import PrivacyReport
from pfair.privacy.tuning import compare_accounts, search_targets
from pfair.protocol.setup import resolve_ledgers
from pfair.settings import AUTO_RUN_BATCH
from pfair.validation import CheckpointFigures, training_sizes

__all__ = ["DEFAULT_LR_THETA", "DEFAULT_BATCH", "PrivateSearch", "choose_candidate", "default_grid",
           "search_settings"]

#: The step sizes of the default grid (``pfair train --tune``), stated for the batch they run at
#: (times ``k`` for a stretched run's batch, below).
DEFAULT_LR_THETA = [0.25, 1.0]
#: The other batch of the default grid when ``batch_size="auto"`` is not a stretched run (capped at
#: the smallest silo's training share); the first is ``"auto"`` resolved for the silos (256 with
#: ``protect="record"``, 1,024 with a private fairness target, the whole silo when it is smaller).
DEFAULT_BATCH = 4096


def default_grid(estimator: Any, sizes: Sequence[int]) -> dict | list[dict]:
    """The grid of ``pfair train --tune`` for silos of ``sizes`` records: the step size and the
    batch, the two levers that matter most at a fixed budget (docs/model_selection.md). At most
    four candidates:

    * where ``batch_size="auto"`` stretches the run (a private attribute-mode fit that sends ψ,
      :meth:`pfair.settings.SteFFLeSettings.for_sizes`) to a batch m above
      :data:`~pfair.settings.AUTO_RUN_BATCH`: the stretched run, written out (batch m, its epochs
      and decay, and its adaptive clip where ``clip="auto"`` gives it one), at ``lr_theta`` ∈ k · :data:`DEFAULT_LR_THETA` with ``k = m / AUTO_RUN_BATCH``,
      and the run of the estimator's own epochs at a batch of ``AUTO_RUN_BATCH`` at ``lr_theta`` ∈
      :data:`DEFAULT_LR_THETA` (a list of two grids);
    * otherwise ``lr_theta`` ∈ :data:`DEFAULT_LR_THETA` × ``batch_size`` ∈ {what ``"auto"``
      resolves to, min(:data:`DEFAULT_BATCH`, smallest training share)} (one value when they
      coincide); a noise-free run that ``"auto"`` stretches by λ
      (:meth:`~pfair.settings.SteFFLeSettings.lambda_stretch_for`; a network's,
      :func:`~pfair.settings.resolve_deep_defaults`) keeps its stretched ``epochs`` and
      ``decay_every`` at both batches, which a written-out batch would otherwise drop.

    λ stays the user's (an accuracy-only choice would always take the smallest), or is steered by
    ``max_violation``."""
    est = clone(estimator).set_params(batch_size="auto")
    st = est.settings()
    train = training_sizes(sizes, st.validation_share)
    auto = st.for_sizes(train)
    k = st.stretch(int(auto.batch_size))
    if k > 1.0:
        stretched = {name: [value] for name, value in auto.written_out().items() if name != "lr_theta"}
        return [{"lr_theta": list(DEFAULT_LR_THETA), "batch_size": [min(AUTO_RUN_BATCH, int(min(train)))]},
                {"lr_theta": [k * v for v in DEFAULT_LR_THETA], **stretched}]
    run = auto
    if "sizes" in inspect.signature(est.settings).parameters:
        # A network's settings() resolves its "auto" batch, and its λ stretch within its records
        # (pfair.settings.resolve_deep_defaults), for the silos' sizes, as its fit does.
        run = est.settings(list(sizes))
    grid: dict = {"lr_theta": list(DEFAULT_LR_THETA),
                  "batch_size": sorted({min(DEFAULT_BATCH, int(min(train))), int(run.batch_size)})}
    if int(run.epochs) != int(estimator.get_params()["epochs"]):
        # The λ stretch of a noise-free run (the linear model's lambda_stretch_for, or a network's):
        # kept at both batches.
        grid.update(epochs=[int(run.epochs)], decay_every=[int(run.decay_every)])
    return grid

#: The budget shares of a fit's own releases, priced alone against its ε (``pfair.protocol.plan.BudgetSplit``).
SHARE_PARAMS = ("p_s_epsilon_share", "max_violation_epsilon_share", "validation_epsilon_share")
#: Parameters a search may not vary: the budget is the search's, the ledgers' δ and noise are the silos'.
FIXED_PARAMS = ("epsilon", "delta", "noise_seed", "warm_start", "validation_share", "protect")


def choose_candidate(figures: Sequence[CheckpointFigures | None],
                     target: float | None) -> tuple[int, str | None]:
    """``(index, warning)``: the candidate a search returns from the figures of the model each
    candidate returned (module docstring); ``warning`` is None when the choice needed no fallback.
    A candidate without figures (``None``) is never chosen unless every one lacks them (then the
    first, warned)."""
    idx = [i for i, f in enumerate(figures) if f is not None]
    if not idx:
        return 0, "no candidate released validation figures (validation_share=0 and no checkpoints?)"
    ok = [i for i in idx if figures[i].clearly_better]  # type: ignore[union-attr]
    err = lambda i: figures[i].error  # noqa: E731
    if target is None:
        if ok:
            return min(ok, key=err), None
        best = min(idx, key=err)
        f = figures[best]
        return best, (f"no candidate is clearly better than the constant predictor; returned the most accurate "
                      f"(validation error {f.error:.4f} against the constant's {f.constant_error:.4f})")  # type: ignore[union-attr]
    meets = [i for i in ok if figures[i].meets(target)]  # type: ignore[union-attr]
    if meets:
        return min(meets, key=err), None
    fair = [i for i in ok if figures[i].violation is not None]  # type: ignore[union-attr]
    if fair:
        best = min(fair, key=lambda i: figures[i].violation)  # type: ignore[union-attr]
        f = figures[best]
        return best, (f"no candidate met max_violation={target:g} with one sd of its noise to spare while clearly "
                      f"better than the constant predictor; returned the fairest such candidate (released violation "
                      f"{f.violation:.4f}, validation error {f.error:.4f})")  # type: ignore[union-attr]
    best = min(idx, key=err)
    f = figures[best]
    return best, (f"no candidate is clearly better than the constant predictor; returned the most accurate "
                  f"(validation error {f.error:.4f} against the constant's {f.constant_error:.4f}), "
                  f"max_violation={target:g} unchecked")  # type: ignore[union-attr]


def search_settings(params: dict, *, epsilon_i: float | None, epsilon_1: float | None,
                    defaults: dict) -> dict:
    """The parameters of one candidate of a private search: its grid ``params``, the cumulative
    target ``epsilon_i`` as ``epsilon``, and each release share ``s`` (``defaults`` holds the
    estimator's) scaled to ``s · ε_1 / ε_i`` so that the candidate's own releases (the DP histogram
    of s, the violation and validation releases) are priced alone at ``s · ε_1``, the same for every
    candidate, instead of at a share of the cumulative target. ``epsilon_i=None``: non-private."""
    out = dict(params)
    if epsilon_i is None:
        return out
    out["epsilon"] = float(epsilon_i)
    for name in SHARE_PARAMS:
        if name in defaults:
            share = float(out.get(name, defaults[name]))
            out[name] = share * float(epsilon_1) / float(epsilon_i)  # type: ignore[arg-type]
    return out


class PrivateSearch(BaseEstimator):
    """Choose among candidate settings of a pfair estimator from its released validation figures,
    with the privacy of the whole search charged to the silos' ledgers.

    Parameters
    ----------
    estimator : a pfair estimator (:class:`~pfair.SteFFLe` or ``DeepSteFFLe``). Its ``epsilon`` is
        the budget of the **whole search** (every silo's ledger ends at most there), its
        ``validation_share`` the held-out share every candidate is judged on.
    param_grid : dict or list of dicts, as :class:`sklearn.model_selection.ParameterGrid` (e.g.
        ``{"lam": [0.5, 2], "batch_size": [256, 1024]}``). It may not vary ``epsilon``, ``delta``,
        ``noise_seed``, ``warm_start``, ``validation_share`` or ``protect``.
    max_violation : float, None or "auto". The fairness target the choice uses: "auto" (default)
        is the estimator's ``max_violation`` when the grid does not vary it; with a target, every
        candidate is fitted with ``max_violation`` (the estimator's or the grid's), so that its
        silos release its violation at the checkpoints.
    accounting : "composition" (the only value): the ledgers compose every candidate. Papernot and
        Steinke's random-stopping bound is reported in ``privacy_report_`` for comparison; it does
        not bound what the server sees (module docstring), so it is not charged.

    Attributes
    ----------
    results_ : DataFrame, one row per candidate: its parameters (``param_<name>``), the cumulative
        ``epsilon_target`` it was fitted with, ``epsilon_spent`` (largest over the silos after it),
        the released figures of the model it returned (``selected_epoch``, ``validation_error``,
        ``constant_error``, ``margin``, ``clearly_better``, ``violation_released``), the largest
        ``noise_multiplier`` of its rounds over the silos (inf: it sent nothing depending on s), ``lam``,
        ``fit_seconds``, ``warning`` (its own fit's convergence warning), ``chosen``, ``accounting``.
    best_index_, best_params_, best_estimator_ : the chosen candidate (already fitted: it is not
        refitted, which would spend more).
    selection_warning_ : why the choice had to fall back (None otherwise).
    privacy_report_ : :class:`~pfair.privacy.report.PrivacyReport`, one row per silo: ``delta``,
        ``epsilon_before`` (its ledger before the search), ``epsilon_spent`` (after: the search's
        guarantee, composition of every candidate), ``epsilon_budget``, ``candidates``,
        ``accounting`` ("composition"), ``epsilon_random_stopping`` (the best of a geometric number of
        runs of mean k of the most expensive candidate, released alone) and ``cheaper_account``.
    ledgers_ : the silos' ledgers.
    candidate_events_ : per candidate, per silo, the ledger events its fit charged.
    """

    def __init__(self, estimator: Any, param_grid: Any, *, max_violation: float | None | str = "auto",
                 accounting: str = "composition") -> None:
        self.estimator = estimator
        self.param_grid = param_grid
        self.max_violation = max_violation
        self.accounting = accounting

    # ------------------------------------------------------------------ set-up
    def _candidates(self) -> list[dict]:
        grid = list(ParameterGrid(self.param_grid))
        if not grid:
            raise ValueError("param_grid is empty: give at least one candidate, e.g. {'lam': [0.5, 2.0]}")
        known = self.estimator.get_params(deep=False)
        for params in grid:
            for name in params:
                if name in FIXED_PARAMS:
                    raise ValueError(f"param_grid may not vary {name!r}: the search's budget, delta, noise and held-out "
                                     f"share are fixed for all candidates; set it on the estimator instead")
                if name not in known:
                    raise ValueError(f"param_grid: {type(self.estimator).__name__} has no parameter {name!r}")
        return grid

    def _target(self, grid: list[dict]) -> float | None:
        if self.max_violation != "auto":
            return None if self.max_violation is None else float(self.max_violation)  # type: ignore[arg-type]
        values = {params.get("max_violation", getattr(self.estimator, "max_violation", None)) for params in grid}
        if len(values) > 1:
            raise ValueError(f"param_grid varies max_violation ({sorted(v for v in values if v is not None)}); "
                             "set PrivateSearch(max_violation=t) to say which target the choice must meet")
        value = values.pop()
        return None if value is None else float(value)

    def _target_param(self, params: dict, target: float | None) -> dict:
        """``{"max_violation": target}`` for a candidate that must release its violation, else ``{}``."""
        if target is not None and "max_violation" in self.estimator.get_params(deep=False) and "max_violation" not in params:
            return {"max_violation": target}
        return {}

    def _federation(self, X: Any, y: Any, sensitive_features: Any, silos: Any) -> Any:
        if isinstance(X, Federation):
            if y is not None or sensitive_features is not None or silos is not None:
                raise ValueError("fit(Federation) takes no y, sensitive_features or silos: the federation holds them")
            return X
        if y is None or sensitive_features is None or silos is None:
            raise ValueError("fit(X, y, sensitive_features=..., silos=...) needs all four (or pass a Federation)")
        return Federation.from_arrays(X, y, sensitive_features=sensitive_features, silos=silos)

    def _ledgers(self, fed: Any, ledgers: Any, epsilon: float) -> list:
        """The silos' ledgers (:func:`pfair.protocol.setup.resolve_ledgers`), made with the search's
        budget where new (a Federation's silo keeps its ledger, so a later fit or search on it sees
        what this one spent)."""
        return resolve_ledgers(replace(self.estimator.settings(), epsilon=float(epsilon)), fed, ledgers)

    # ------------------------------------------------------------------ fit
    def fit(self, X: Any, y: Any = None, *, sensitive_features: Any = None, silos: Any = None,
            ledgers: Any = None) -> "PrivateSearch":
        """Fit every candidate on ``X`` (a :class:`~pfair.Federation`, or arrays with ``y``,
        ``sensitive_features`` and ``silos``) and choose one. ``ledgers``: None (a Federation's
        own persistent ledgers), ``"new"`` (fresh ones: simulations), or one PrivacyLedger or JSON
        path per silo."""
        if self.accounting != "composition":
            raise ValueError(
                f"accounting={self.accounting!r}: only 'composition' is sound for a pfair search. The random-stopping "
                "bound (Papernot and Steinke 2022) covers an observer of the returned model alone, but every silo's "
                "guarantee is against the server, which receives every round of every candidate; "
                "privacy_report_['epsilon_random_stopping'] shows that bound for comparison")
        grid = self._candidates()
        target = self._target(grid)
        fed = self._federation(X, y, sensitive_features, silos)
        defaults = self.estimator.get_params(deep=False)
        private = defaults.get("epsilon") is not None
        k = len(grid)
        if private:
            total = float(defaults["epsilon"])
            book = self._ledgers(fed, ledgers, total)  # refuses a total above a ledger's budget

            before = [ledger.epsilon_spent() for ledger in book]
            spent = max(before)
            if spent >= total:
                raise ValueError(f"the silos' ledgers have spent epsilon={spent:.4g} already, nothing is left of the "
                                 f"search's epsilon={total:g}; use new ledgers (ledgers='new', simulations only) or a "
                                 "larger budget")
            delta = min(ledger.delta for ledger in book)
            pays = [spends(clone(self.estimator).set_params(**params, **self._target_param(params, target)))
                    for params in grid]
            paid = list(search_targets(total, delta, max(1, sum(pays)), spent=spent))
            # Candidate i gets the target of the first paying candidate at or after it: one that
            # spends nothing (lambda = 0 in attribute mode) takes no share of the split.
            targets: list[float | None] = [paid[min(sum(pays[:i]), len(paid) - 1)] for i in range(k)]
        else:
            if ledgers not in (None, "new"):
                raise ValueError("ledgers= applies to private searches only (the estimator's epsilon is None)")
            book, before, targets, paid = [], [], [None] * k, []
        rows, fitted, figures, charged = [], [], [], []
        seen: set = set()
        for i, params in enumerate(grid):
            p = search_settings(params, epsilon_i=targets[i], epsilon_1=paid[0] if private else None,
                                defaults=defaults)
            p.update(self._target_param(params, target))
            est = clone(self.estimator).set_params(**p)
            n_events = [len(ledger.events) for ledger in book]
            t0 = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                est.fit(fed, ledgers=book if private else None)
            seconds = time.perf_counter() - t0
            own = []
            for w in caught:
                if issubclass(w.category, ConvergenceWarning):
                    own.append(str(w.message))
                elif issubclass(w.category, PrivacyWarning) and "its ledger has already spent" in str(w.message):
                    continue  # expected: candidate i spends on top of candidates 1..i-1 (the search's split)
                elif (w.category, str(w.message)) not in seen:
                    seen.add((w.category, str(w.message)))
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            charged.append([ledger.events[n:] for ledger, n in zip(book, n_events)])
            fig = returned_figures(est)
            figures.append(fig)
            fitted.append(est)
            row: dict[str, Any] = {f"param_{name}": value for name, value in params.items()}
            row.update({"epsilon_target": targets[i],
                        "epsilon_spent": max((ledger.epsilon_spent() for ledger in book), default=math.inf)
                        if private else math.inf,
                        "selected_epoch": getattr(est, "selected_epoch_", None)})
            row.update(figure_columns(fig))
            z = est.privacy_report_["noise_multiplier"] if "noise_multiplier" in est.privacy_report_ else []
            row.update({"noise_multiplier": float(np.max(z)) if len(z) else math.nan,
                        "lam": getattr(est, "lam_", None), "fit_seconds": seconds,
                        "warning": "; ".join(own) if own else None})
            rows.append(row)
        best, why = choose_candidate(figures, target)
        self.best_index_ = int(best)
        self.best_params_ = dict(grid[best])
        self.best_estimator_ = fitted[best]
        self.selection_warning_ = why
        self.target_ = target
        results = pd.DataFrame(rows)
        results["chosen"] = results.index == best
        results["accounting"] = "composition" if private else "none (non-private)"
        self.results_ = results
        self.ledgers_ = book
        #: per candidate, per silo: the ledger events its fit charged
        self.candidate_events_ = charged
        self.privacy_report_ = self._report(book, before, charged, k)
        self.classes_ = getattr(self.best_estimator_, "classes_", None)
        if why is not None:
            warnings.warn(f"PrivateSearch: {why}. Try candidates with more epochs or a larger lr_theta, a smaller lam "
                          "or a looser max_violation, or a larger epsilon (results_ holds every candidate's figures)",
                          ConvergenceWarning, stacklevel=2)
        return self

    def _report(self, book: list, before: list, charged: list, k: int) -> Any:
        rows = []
        for j, ledger in enumerate(book):
            acc = compare_accounts([c[j] for c in charged], delta=ledger.delta, composed=ledger.epsilon_spent())
            rows.append({"silo": j, "delta": ledger.delta, "epsilon_before": before[j],
                         "epsilon_spent": ledger.epsilon_spent(), "epsilon_budget": ledger.epsilon, "candidates": k,
                         "accounting": "composition", "epsilon_random_stopping": acc.random_stopping,
                         "cheaper_account": acc.cheaper})
        if not rows:
            return PrivacyReport(pd.DataFrame([{"silo": "all", "candidates": k, "accounting": "none (non-private)",
                                                "epsilon_spent": math.inf}]).set_index("silo"))
        return PrivacyReport(pd.DataFrame(rows).set_index("silo"))

    # ------------------------------------------------------------------ the chosen model
    def _best(self) -> Any:
        if not hasattr(self, "best_estimator_"):
            raise NotFittedError("this PrivateSearch is not fitted yet; call fit first")
        return self.best_estimator_

    def predict(self, X: Any) -> np.ndarray:
        """The chosen candidate's predictions."""
        return self._best().predict(X)

    def predict_proba(self, X: Any) -> np.ndarray:
        """The chosen candidate's class probabilities."""
        return self._best().predict_proba(X)

    def score(self, X: Any, y: Any) -> float:
        """The chosen candidate's accuracy on ``(X, y)``."""
        return float(self._best().score(X, y))

    @property
    def epsilon_spent_(self) -> float:
        """Largest ε any silo's ledger holds after the search (each silo's guarantee is its own)."""
        return float(self.privacy_report_["epsilon_spent"].max())


def spends(est: Any) -> bool:
    """Whether fitting ``est`` charges the silos' ledgers: a private fit that protects whole records,
    or sends the fairness parts (λ > 0 or a target). A λ = 0 fit in attribute mode sends nothing that
    depends on s and releases its validation tables exactly (they read x and y only): it is free."""
    st = est.settings()
    return bool(st.private and (st.protect == "record" or st.sends_psi))


def returned_figures(est: Any) -> CheckpointFigures | None:
    """The released figures of the model a fitted estimator returned (its checkpoint at
    ``selected_epoch_``; at 0, the constant predictor's on the last checkpoint's records), or None
    without checkpoints."""
    figs = getattr(est, "checkpoint_figures_", None) or []
    epoch = getattr(est, "selected_epoch_", None)
    if epoch is None:
        return None
    if epoch == 0 and figs:
        return figs[-1].as_constant()
    return next((f for f in figs if f.epoch + 1 == epoch), None)


def figure_columns(fig: CheckpointFigures | None) -> dict[str, Any]:
    """The ``results_`` columns of one candidate's figures."""
    if fig is None:
        return {"validation_error": math.nan, "constant_error": math.nan, "margin": math.nan,
                "clearly_better": False, "violation_released": math.nan}
    return {"validation_error": fig.error, "constant_error": fig.constant_error, "margin": fig.margin,
            "clearly_better": fig.clearly_better,
            "violation_released": math.nan if fig.violation is None else fig.violation}
