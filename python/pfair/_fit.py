"""The fit that :class:`pfair.SteFFLe` and :class:`pfair.torch.DeepSteFFLe` share.

Both estimators turn their hyper-parameters into one frozen :class:`~pfair.settings.SteFFLeSettings`,
build a :class:`~pfair.federation.Federation` from the inputs of ``fit``, run SteFFLe on it through
the run engine, and keep what the run produced as fitted attributes. :class:`SteFFLeFit` holds
those steps; each estimator adds only its model (a linear-softmax θ, or a ``torch.nn.Module``).

The engine is called from one method, :meth:`SteFFLeFit._run`; nothing else here knows how a run is
executed.
"""

from __future__ import annotations

import math
import sys
import warnings
from dataclasses import replace
from numbers import Integral
from typing import Any, Callable, ClassVar

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.utils.validation import validate_data

from pfair import metrics
from pfair._validation import (as_features, as_labels, as_vector, check_default_delta, label_indices,
                                positive_class_index)
from pfair._warn import warn_once
from pfair.exceptions import NonPrivateFitWarning, PrivacyWarning
from pfair.federation import Federation, check_group_counts
from pfair.privacy.report import PrivacyReport
from pfair.protocol.simulation import Simulation
from pfair.settings import SteFFLeSettings
from pfair.validation import held_out_count, holdout

#: A history callback of the run engine: ``on_epoch(epoch, θ, W, info)`` returns the epoch's row.
OnEpoch = Callable[[int, np.ndarray, np.ndarray, dict], "dict | None"]


#: A feature column whose |mean| or standard deviation exceeds this is refused by ``fit``: SteFFLe's
#: step sizes, clip norms and W radius are set for standardised features (mean 0, std 1), and a
#: column 1000 times larger makes the first steps overshoot until θ diverges.
FEATURE_SCALE_LIMIT = 10.0
#: A column that is not an indicator (values 0 and 1 only) and not constant is *off scale* when its
#: standard deviation lies outside this range or its |mean| is above :data:`FEATURE_MEAN_LIMIT`:
#: nothing diverges, but the default run trains it too slowly (a column of std 0.1 moves its logit
#: a tenth as fast; one of mean 3 ties its coefficient to the intercept's), and on 1,500 records of
#: rates in [0, 1] (std 0.12, mean 0.2) 20 epochs ended at the constant predictor where logistic
#: regression on the same columns is 0.14 more accurate (``tests/test_feature_scaling.py``).
FEATURE_STD_RANGE = (0.5, 5.0)
#: See :data:`FEATURE_STD_RANGE`.
FEATURE_MEAN_LIMIT = 2.0


#: Bytes of the float64 temporary of a chunk of rows in :func:`_column_stats`' second pass (not a
#: copy of the whole matrix).
STATS_CHUNK_BYTES = 1 << 24

#: A sensitive group with fewer training records than this in a block of the fairness notion (the
#: whole data for demographic parity, a label's records for equalized odds) is warned about by a fit
#: that sends the fairness term (:func:`check_group_sizes`): a rate read from 30 records is
#: uncertain by about ±0.09, the threshold of ``pfair.metrics.small_group_notes`` for the records a metric reads.
SMALL_GROUP_RECORDS = 30


def check_group_sizes(name: str, fed: Federation, st: SteFFLeSettings, stacklevel: int = 4) -> None:
    """Refuse a fit that sends the fairness term (``lam > 0`` or ``max_violation``) where a sensitive
    group has no record in a block of its notion (:func:`pfair.federation.check_group_counts`: its
    ``p_s^{-1/2}`` is undefined; a private fit's noisy proportions would otherwise hide it and release a
    violation of 1), and warn (once per process for the same groups) when it trains on a group with fewer than
    :data:`SMALL_GROUP_RECORDS` records in a block of its notion, naming each with its counts. The
    penalty weighs a group's rate by the records behind it, so such a group's rate is mostly
    sampling noise; in a private fit it also sets the noise of every group: one record's s moves
    ``2 p_r^{-1/2} F_i`` between two rows of W's gradient, so its sensitivity is
    ``Δ_W = (2/m)(1/ρ₁ + 1/ρ₂)^{1/2}`` for the two rarest shares ρ₁, ρ₂ (docs/privacy.md), noise that
    every row of W, the common groups' included, carries. The counts are the silos' own, read in the
    process that holds them (the simulation); nothing is released."""
    if not st.sends_psi or fed.n_silos == 0:
        return
    notion = st.notion
    k, l = fed.n_groups, fed.n_classes
    # blocks × k over the training records only: every record's counts less the held-out ones' (a
    # tenth by default: the rows indexed are the few held out, not the training nine tenths).
    counts = np.asarray(fed.group_counts(notion), dtype=np.int64)
    for j, silo in enumerate(fed.silos):
        _, held = holdout(len(silo), st.validation_share, seed=st.seed, silo=j)
        if held.size:
            counts -= np.asarray(notion.group_counts(silo.y[held], silo.s[held], n_groups=k, n_classes=l),
                                 dtype=np.int64)
    names = getattr(fed, "group_names", None)
    groups = np.asarray(list(names) if names is not None and len(names) == k else fed.groups_, dtype=object)
    label_names = getattr(fed, "label_names", None)
    classes = (np.asarray(label_names, dtype=object) if label_names is not None
               and len(label_names) == l else np.asarray(fed.classes_))
    check_group_counts(counts, notion, groups, classes)
    small = [(b, r, int(counts[b, r])) for b in range(counts.shape[0]) for r in range(counts.shape[1])
             if 0 < counts[b, r] < SMALL_GROUP_RECORDS]
    if not small:
        return
    groups = groups.tolist()
    listed = "; ".join(f"group {groups[r]!r}: {c} of {int(counts[b].sum()):,} {notion.describe_block(b, classes)}"
                       for b, r, c in small)
    message = (f"{name}: fewer than {SMALL_GROUP_RECORDS} training records of a sensitive group where fairness={st.fairness!r} "
               f"compares its rate ({listed}). The fairness term reads such a rate from those records, so it is "
               "mostly sampling noise (a rate of 30 records is uncertain by about ±0.09)")
    if st.private:
        shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
        worst = max(float(np.sqrt(np.sum(np.sort(row)[:2] ** -1.0))) for row in shares)
        message += (f"; and in a private fit the noise on W's step, which every group's row carries, grows with the "
                    f"two rarest groups' shares as (1/ρ₁ + 1/ρ₂)^½: {worst:.0f} here against 2 for two groups of "
                    f"equal size")
    warn_once(message + ". Merge each with a related group, or leave its records out of the fairness term's groups",
              UserWarning, kind=("small groups", name, st.fairness, st.private, tuple(small)), stacklevel=stacklevel)


def _column_stats(blocks: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of every column over the rows of ``blocks`` (2-D arrays), the
    squared deviations summed chunk by chunk (no float64 copy of a block)."""
    n = sum(b.shape[0] for b in blocks)
    total = sum(np.sum(b, axis=0, dtype=np.float64) for b in blocks)
    mean = total / max(n, 1)
    sq = np.zeros_like(mean)
    rows = max(1, STATS_CHUNK_BYTES // (8 * max(mean.size, 1)))
    for b in blocks:
        for a in range(0, b.shape[0], rows):
            dev = np.asarray(b[a:a + rows], dtype=np.float64) - mean
            sq += np.einsum("ij,ij->j", dev, dev)
    return mean, np.sqrt(sq / max(n, 1))


def constant_columns(mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Which columns are constant: a std of 0, or of rounding error only (a column of 0.7 everywhere
    has a two-pass std of about 1e-16 · n, not 0)."""
    return std <= 1e-9 * np.maximum(1.0, np.abs(mean))


def _rough_column_stats(blocks: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of every column in one pass (E[x²] − mean², accumulated in
    float64 without a temporary of X's size): exact enough to tell a column far below
    :data:`FEATURE_SCALE_LIMIT` from one near or above it."""
    n = sum(b.shape[0] for b in blocks)
    total = sum(np.sum(b, axis=0, dtype=np.float64) for b in blocks)
    squares = sum(np.einsum("ij,ij->j", b, b, dtype=np.float64) for b in blocks)
    mean = total / max(n, 1)
    return mean, np.sqrt(np.maximum(squares / max(n, 1) - mean * mean, 0.0))


def indicator_columns(mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Which columns are 0/1 indicators, from their mean and std: for values in [0, 1],
    E[x²] ≤ E[x] with equality exactly when every value is 0 or 1 (std² + mean² = mean)."""
    return (mean >= 0) & (mean <= 1) & (np.abs(std * std + mean * mean - mean) <= 1e-9)


def off_scale_columns(mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """The columns off the scale the default steps assume (:data:`FEATURE_STD_RANGE`,
    :data:`FEATURE_MEAN_LIMIT`), from their mean and std. An indicator column
    (:func:`indicator_columns`) is as one-hot encoding leaves it, and a constant column (std 0) is
    a second intercept: neither is off scale."""
    low, high = FEATURE_STD_RANGE
    off = (~indicator_columns(mean, std) & ~constant_columns(mean, std)) & (
        (std < low) | (std > high) | (np.abs(mean) > FEATURE_MEAN_LIMIT))
    return np.flatnonzero(off)


def unscaled_columns(blocks: list[np.ndarray], *, off_scale: bool = True
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(far, off, mean, std)``: the columns of ``blocks`` (2-D arrays, one per silo) far from
    standardised (:data:`FEATURE_SCALE_LIMIT`: training diverges), those off the scale the steps
    assume (:func:`off_scale_columns`: training is slow), and every column's mean and standard
    deviation. One cheap pass settles features that are clearly scaled (every fit runs this
    check); the exact two-pass statistics decide, and are returned, when a column comes within half
    the limit or off scale (``off_scale=False``: far columns only are looked for, and ``off`` is
    empty)."""
    blocks = [b.reshape(b.shape[0], -1) for b in blocks if b.shape[0] > 0]
    none = np.array([], dtype=int)
    if not blocks:
        return none, none, np.zeros(0), np.zeros(0)
    mean, std = _rough_column_stats(blocks)
    if (np.all((np.abs(mean) <= FEATURE_SCALE_LIMIT / 2) & (std <= FEATURE_SCALE_LIMIT / 2))
            and (not off_scale or off_scale_columns(mean, std).size == 0)):
        return none, none, mean, std
    mean, std = _column_stats(blocks)
    far = np.flatnonzero((np.abs(mean) > FEATURE_SCALE_LIMIT) | (std > FEATURE_SCALE_LIMIT))
    return far, np.setdiff1d(off_scale_columns(mean, std), far) if off_scale else none, mean, std


def _listed(bad: np.ndarray, mean: np.ndarray, std: np.ndarray, names: list[str] | None,
            with_stats: bool = True, hidden: str = f"mean or std above {FEATURE_SCALE_LIMIT:g}") -> str:
    """The columns ``bad``, named, with their mean and std unless ``with_stats`` is False (a
    private record-mode fit: the statistics of the records are not to be shown; ``hidden`` then
    says what is wrong with them)."""
    label = (lambda j: repr(names[j])) if names is not None and len(names) == mean.size else (lambda j: f"column {j}")
    more = f" and {bad.size - 5} more" if bad.size > 5 else ""
    stats = (lambda j: f"mean {mean[j]:.4g}, std {std[j]:.4g}") if with_stats else (lambda j: hidden)
    return ", ".join(f"{label(j)} ({stats(j)})" for j in bad[:5]) + more


#: What an off-scale column does, for the warnings (:func:`off_scale_columns`).
OFF_SCALE = (f"std outside [{FEATURE_STD_RANGE[0]:g}, {FEATURE_STD_RANGE[1]:g}] or |mean| above "
             f"{FEATURE_MEAN_LIMIT:g}")


def warn_off_scale(off: np.ndarray, mean: np.ndarray, std: np.ndarray, names: list[str] | None,
                   st: SteFFLeSettings, name: str, federation: bool, stacklevel: int = 5) -> None:
    """Warn that columns are off the scale the default steps assume (:func:`off_scale_columns`)
    where ``fit`` does not standardise them itself (a :class:`Federation`, a private
    ``protect="record"`` fit): nothing diverges, but the run may end near the constant predictor."""
    record = st.private and st.protect == "record"
    where = ("a Federation holds the silos' data as given, so pfair does not rescale it: standardise before building "
             "it" if federation else
             "a private fit with protect='record' does not use the records' statistics: standardise with statistics "
             "you may use (public or known ranges)")
    warnings.warn(
        f"{name}.fit: feature(s) {_listed(off, mean, std, names, with_stats=not record, hidden=OFF_SCALE)} are off "
        f"the scale SteFFLe's default steps assume (mean 0, std 1; {OFF_SCALE}): training along them is slow, and a "
        f"default run may end near the constant predictor. {where}, e.g. make_pipeline(StandardScaler(), "
        f"{name}(...)) on arrays", UserWarning, stacklevel=stacklevel)


def feature_scale_refusal(bad: np.ndarray, mean: np.ndarray, std: np.ndarray, names: list[str] | None,
                          st: SteFFLeSettings, name: str, federation: bool) -> ValueError:
    """The error of features far from standardised that ``fit`` does not standardise itself: in a
    private fit with ``protect="record"`` (their mean and std would be an unprotected release about
    the records), or in a :class:`Federation` (whose silos hold the data as given)."""
    record = st.private and st.protect == "record"
    if record:
        why = ("pfair does not standardise them inside a private fit with protect='record': the mean and std are "
               "statistics of the silos' records, a release that protect='record' does not cover. Standardise "
               "with statistics you may use (public or known ranges, or a scaler fitted on data you may release)")
    else:
        why = ("a Federation holds the silos' data as given, so pfair does not rescale it; standardise before "
               "building it (fit on arrays standardises for you with protect='attribute' or epsilon=None)")
    return ValueError(
        f"{name}.fit: feature(s) {_listed(bad, mean, std, names, with_stats=not record)} are far from standardised (|mean| or std above "
        f"{FEATURE_SCALE_LIMIT:g}); SteFFLe's step sizes and clip norms assume mean 0 and std 1, and on this "
        f"scale training diverges whatever lam or lr_theta. Standardise first: make_pipeline(StandardScaler(), "
        f"{name}(...)).fit(X, y, {name.lower()}__sensitive_features=s), or load the table with "
        f"pfair.datasets.load_csv, which standardises numeric columns. {why}")


def scaling_reason(far: np.ndarray, off: np.ndarray, mean: np.ndarray, std: np.ndarray,
                   names: list[str] | None) -> str:
    """Why ``fit`` standardised the features: the far columns (training diverges) and the off-scale
    ones (training is slow), listed with their statistics."""
    parts = []
    if far.size:
        parts.append(f"{_listed(far, mean, std, names)} would make training diverge")
    if off.size:
        parts.append(f"{_listed(off, mean, std, names)} {'are' if off.size > 1 else 'is'} off the scale the default "
                     f"steps assume ({OFF_SCALE}: training along them is slow, and a default run may end near the "
                     "constant predictor)")
    return "; ".join(parts)


def standardisation(mean: np.ndarray, std: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (mean, std) ``fit`` standardises with: each column's own, except that a 0/1 indicator
    column stays as it is (mean 0, std 1: one-hot encoding's scale) and a constant one is only
    centred."""
    constant = constant_columns(mean, std)
    indicator = indicator_columns(mean, std) & ~constant
    return (np.where(indicator, 0.0, mean), np.where(indicator | constant, 1.0, std))


class _ParamsMixin(BaseEstimator):
    """scikit-learn's :class:`~sklearn.base.BaseEstimator`: ``get_params``/``set_params``/``clone``
    (hyper-parameters are ``__init__`` args, stored unchanged), ``repr`` and metadata routing
    (``set_fit_request(sensitive_features=True, silos=True)``, generated from ``fit``'s keywords)."""


class SteFFLeFit(_ParamsMixin):
    """Settings, inputs, run and fitted state of a SteFFLe estimator.

    A subclass provides its model through three hooks: :meth:`_history_proba` (class
    probabilities of the model being trained, for the ``history_`` metrics), :meth:`_set_theta`
    (the model after an epoch) and :meth:`_check_settings` (settings it cannot run)."""

    #: Settings a named configuration fixes instead of taking them as parameters (e.g. FERMI's
    #: ``epsilon=None``); they complete ``get_params()`` when the settings are built.
    _fixed_settings: ClassVar[dict[str, Any]] = {}
    #: Whether ``fit`` refuses features far from standardised (:func:`check_feature_scale`): the
    #: linear model's settings assume standardised features; a deep model may normalise its inputs.
    _checks_feature_scale: ClassVar[bool] = False
    #: Whether columns off the scale the default steps assume (:func:`off_scale_columns`) are
    #: standardised too (the linear model, whose coefficients move at the step's pace), or only far
    #: ones (a network, whose inputs are taken as prepared: pixels in [0, 1] are its convention).
    _standardises_off_scale: ClassVar[bool] = True

    theta_: np.ndarray
    classes_: np.ndarray

    # ------------------------------------------------------------------ settings
    def settings(self) -> SteFFLeSettings:
        """The validated, frozen settings of the next fit (every SteFFLe hyper-parameter, including
        those a named configuration fixes)."""
        st = SteFFLeSettings.from_estimator_params({**self._fixed_settings, **self.get_params(deep=False)})
        self._check_settings(st)
        return st

    def _check_settings(self, st: SteFFLeSettings) -> None:
        """Refuse settings this estimator cannot run (every one, here)."""

    # ------------------------------------------------------------------ inputs
    def _federation(self, X: Any, y: Any, sensitive_features: Any, silos: Any, st: SteFFLeSettings) -> Federation:
        """The fit's Federation; records ``n_features_in_`` and (for a DataFrame) ``feature_names_in_``.
        Without ``sensitive_features`` only ``lam=0`` can fit (see :meth:`pfair.SteFFLe.fit`)."""
        self._has_sensitive = True
        if isinstance(X, Federation):
            if y is not None or sensitive_features is not None or silos is not None:
                raise ValueError("pass either a Federation, or X, y, sensitive_features and silos; not both")
            if hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
            self.n_features_in_ = X.n_features
            self._scaling = None
            if self._checks_feature_scale:
                # Silos that are together every row of one matrix: read it in place, not gathered.
                shared = X.shared_matrix()
                whole = shared is not None and shared.shape[0] == sum(X.sizes)
                far, off, mean, std = unscaled_columns([shared] if whole else [silo.X for silo in X.silos],
                                                       off_scale=self._standardises_off_scale)
                names = getattr(X, "feature_names", None)
                if far.size:
                    raise feature_scale_refusal(far, mean, std, names, st, type(self).__name__, federation=True)
                if off.size:
                    warn_off_scale(off, mean, std, names, st, type(self).__name__, federation=True)
            return X
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None: call "
                             "fit(X, y, sensitive_features=s), or pass a Federation as X")
        Xa = as_features(X, keep_float32=True)  # the Federation keeps float32 features as they are
        validate_data(self, X, reset=True, skip_check_array=True)  # n_features_in_, feature_names_in_
        n = Xa.shape[0]
        y_arr = as_labels(y, n, estimator=type(self).__name__)
        if sensitive_features is None:
            if st.sends_psi or st.mode != "standard":
                raise ValueError(missing_sensitive_message(type(self).__name__))
            # lam = 0: nothing sent depends on s and p_s is never computed, so a placeholder
            # attribute is never read; no fairness metric is reported.
            sensitive_features = np.arange(n) % 2
            self._has_sensitive = False
        names = [str(c) for c in X.columns] if hasattr(X, "columns") else None
        self._scaling = None
        if self._checks_feature_scale:
            Xa = self._standardise_if_unscaled(Xa, names, st)
        return Federation.from_arrays(Xa, y_arr, sensitive_features=sensitive_features, silos=silos,
                                      feature_names=names)

    def _standardise_if_unscaled(self, Xa: np.ndarray, names: list[str] | None, st: SteFFLeSettings) -> np.ndarray:
        """``Xa`` standardised when a column is far from it (:data:`FEATURE_SCALE_LIMIT`: training
        diverges) or off the scale the steps assume (:func:`off_scale_columns`: training is slow)
        and the fit may use the features' statistics (``protect="attribute"`` or non-private: the
        features are not what the guarantee protects); in a private ``protect="record"`` fit a far
        column is refused and an off-scale one warned about. The fitted ``theta_`` (``coef_``,
        ``intercept_``) is folded back to the original units, so ``predict`` takes the features as
        given; ``feature_scaling_`` holds the (mean, std) used (:func:`standardisation`)."""
        far, off, mean, std = unscaled_columns([Xa])
        if far.size == 0 and off.size == 0:
            return Xa
        name = type(self).__name__
        if st.private and st.protect == "record":
            if far.size:
                raise feature_scale_refusal(far, mean, std, names, st, name, federation=False)
            warn_off_scale(off, mean, std, names, st, name, federation=False)
            return Xa
        warnings.warn(f"{name}.fit standardised the features (mean 0, std 1, with the training data's mean and std; "
                      f"0/1 indicator columns as they are) because {scaling_reason(far, off, mean, std, names)}; the "
                      f"fitted coef_ and intercept_ are in the original units and predict takes X as given. To choose "
                      f"the scaling yourself, use make_pipeline(StandardScaler(), {name}(...)). (With "
                      f"protect='attribute' or epsilon=None the features are not what the fit protects, so their "
                      f"statistics may be used.)", UserWarning, stacklevel=4)
        self._scaling = standardisation(mean, std)
        return ((Xa - self._scaling[0]) / self._scaling[1]).astype(Xa.dtype, copy=False)

    def _fold_scaling(self, theta: np.ndarray, inverse: bool = False) -> np.ndarray:
        """θ of the standardised features as θ of the original ones (``inverse``: the other way)."""
        if getattr(self, "_scaling", None) is None:
            return theta
        mean, std = self._scaling
        th = np.array(theta, dtype=np.float64).reshape(mean.size + 1, -1)
        if inverse:
            th[mean.size] = th[mean.size] + mean @ th[:mean.size]
            th[:mean.size] = th[:mean.size] * std[:, None]
        else:
            th[:mean.size] = th[:mean.size] / std[:, None]
            th[mean.size] = th[mean.size] - mean @ th[:mean.size]
        return th.reshape(-1)

    def _check_privacy(self, st: SteFFLeSettings, fed: Federation, X: Any) -> None:
        """Before a run: a non-private fit is warned (unless the estimator is a named non-private
        configuration); in a private one, a default δ needs silos of 2 records or more, and a fit on
        arrays inside scikit-learn's model selection is warned (its real cost is the sum of the fits')."""
        if not st.private and "epsilon" not in self._fixed_settings:
            warn_non_private(type(self).__name__, stacklevel=4)
        if st.private and st.delta is None:
            check_default_delta(fed.sizes, getattr(fed, "silo_names_", None))
        if st.private and not isinstance(X, Federation) and _inside_model_selection():
            warn_model_selection_cost(type(self).__name__, stacklevel=4)

    def _settings_for_data(self, st: SteFFLeSettings, fed: Federation) -> SteFFLeSettings:
        """``st`` as the data make it: ``positive_class`` as a class index
        (:meth:`_positive_class_settings`), and ``validation_share`` 0 where it holds out no record
        of any silo (``⌊share · n⌋ = 0`` for every silo: the checkpoints would see no records, and the
        check against the constant predictor would silently not run): warned, the checkpoints then
        count the training records, as with ``validation_share=0``."""
        st = self._positive_class_settings(st, fed)
        check_group_sizes(type(self).__name__, fed, st, stacklevel=5)
        if st.validation_share > 0 and fed.n_silos and max(fed.sizes) > 0:
            if all(held_out_count(n, st.validation_share) == 0 for n in fed.sizes):
                nothing = (f"{type(self).__name__}: validation_share={st.validation_share:g} holds out no record of "
                           f"any silo (the largest has {max(fed.sizes)} records, and ⌊{st.validation_share:g}·n⌋ = 0)")
                if st.mode == "standard":
                    warnings.warn(f"{nothing}, so the checkpoints count the silos' training records instead, as with "
                                  "validation_share=0. For a held-out check, merge small silos or raise "
                                  "validation_share", UserWarning, stacklevel=4)
                    st = replace(st, validation_share=0.0)
                else:  # a hybrid topology's checkpoints need held-out records (or a target)
                    warnings.warn(f"{nothing}: mode={st.mode!r} then releases no checkpoint, and the check against "
                                  "the constant predictor does not run. Merge small silos or raise validation_share",
                                  UserWarning, stacklevel=4)
        return st

    def _positive_class_settings(self, st: SteFFLeSettings, fed: Federation) -> SteFFLeSettings:
        """``st`` with ``positive_class`` as the class index the round reads: an integer is an index
        into ``classes_``, any other value a label (:func:`pfair._validation.positive_class_index`).
        Where the notion reads the positive class and an index names a label other than itself
        (string labels, or labels 1 and 2), warn which label it is: an index taken for a label
        silently made ``"denied"`` the positive class of labels ``["approved", "denied"]``."""
        # A Federation of a Dataset (load_csv, the bundled tables) holds the labels as codes 0..l−1 and
        # their names in label_names: a label is looked up, and an index warned about, by those names.
        names = getattr(fed, "label_names", None)
        labels = (list(names) if names is not None and len(names) == len(fed.classes_)
                  else np.asarray(fed.classes_).tolist())
        given_index = isinstance(st.positive_class, Integral) and not isinstance(st.positive_class, bool)
        index = positive_class_index(st.positive_class, fed.classes_ if given_index else np.asarray(labels, dtype=object))
        if st.notion.uses_positive and given_index and labels[index] != index:
            warn_once(f"{type(self).__name__}: positive_class={index} is a class index: the positive class of "
                      f"fairness={st.fairness!r} is label {labels[index]!r} (classes_ = {labels}). Pass the label "
                      f"itself, e.g. positive_class={labels[index]!r}, to choose it by name",
                      UserWarning, kind=("positive_class", st.fairness, tuple(map(str, labels)), index), stacklevel=4)
        return st if index == st.positive_class and given_index else replace(st, positive_class=index)

    def _adopt_encodings(self, fed: Federation) -> None:
        """``classes_`` and (when the fit had a sensitive attribute) ``groups_`` of the federation."""
        self.classes_ = fed.classes_
        if self._has_sensitive:
            self.groups_ = fed.groups_
        elif hasattr(self, "groups_"):
            del self.groups_

    # ------------------------------------------------------------------ history
    def _on_epoch(self, st: SteFFLeSettings, fed: Federation, eval_set: tuple[Any, Any, Any] | None) -> OnEpoch:
        """The engine's per-epoch callback: the model of the epoch (:meth:`_set_theta`) and its
        ``history_`` row, the engine's ``info`` plus metrics on the silos' data (when allowed: a
        non-private fit, or ``exact_diagnostics``) and on ``eval_set``."""
        # Encoded once, not every epoch: class indices and group values of each evaluated set.
        pooled = evaluated = None
        if st.track_history and eval_set is not None:
            Xe, ye, se = eval_set
            if getattr(self, "_scaling", None) is not None:
                mean, std = self._scaling  # the epoch's θ is that of the standardised features
                Xe = (as_features(Xe) - mean) / std
            n = np.shape(Xe)[0]
            evaluated = (Xe, label_indices(as_vector(ye, "y", n), self.classes_),
                         None if se is None else as_vector(se, "sensitive_features", n))
        if st.track_history and (st.exact_diagnostics or not st.private):
            Xp, yp, sp = fed.pooled()  # class indices into classes_ already; groups by their codes
            pooled = (Xp, yp, sp if self._has_sensitive else None)

        def on_epoch(epoch: int, theta: np.ndarray, w: np.ndarray, info: dict) -> dict | None:
            if not st.track_history:
                return None
            self._set_theta(theta)
            row = dict(info)
            if pooled is not None:
                row.update(self._evaluate("train", *pooled))
            if evaluated is not None:
                row.update(self._evaluate("test", *evaluated))
            return row

        return on_epoch

    def _set_theta(self, theta: np.ndarray) -> None:
        """Hold the model of the epoch just run (``theta_``)."""
        self.theta_ = np.asarray(theta)

    def _history_proba(self, X: Any) -> np.ndarray:
        """Class probabilities of the current model on ``X`` (``(n, l)``)."""
        raise NotImplementedError

    def _evaluate(self, split: str, X: Any, y: np.ndarray, s: np.ndarray | None) -> dict[str, float]:
        """The ``history_`` metrics of the current model on ``X`` with class indices ``y`` (into
        ``classes_``) and groups ``s`` (any values; None: no fairness columns)."""
        return history_metrics(split, self._history_proba(X), y, s)

    # ------------------------------------------------------------------ the run
    def _resume_state(self, st: SteFFLeSettings, resume: bool) -> Any:
        """The run state of this estimator's interrupted fit that ``resume=True`` continues (None
        without ``resume``)."""
        if not resume:
            return None
        previous = getattr(self, "_run_state", None)
        if previous is None:
            raise ValueError("resume=True needs an interrupted fit of this estimator to resume")
        return previous

    def _warm_start_model(self, st: SteFFLeSettings, previous: Any) -> tuple[np.ndarray, np.ndarray] | None:
        """``(θ, W)`` a new run starts from: the fitted ``theta_`` and ``W_`` with ``warm_start``
        (not when resuming: the run state holds the model), else None (the engine's start)."""
        if (st.warm_start and previous is None and hasattr(self, "theta_")
                and hasattr(self, "W_")):
            return self._fold_scaling(self.theta_, inverse=True), self.W_
        return None

    def _run(self, st: SteFFLeSettings, fed: Federation, *, ledgers: Any, on_epoch: OnEpoch, previous: Any = None,
             init: tuple[np.ndarray, np.ndarray] | None = None, sensitive_silos: Any = None,
             provider_factory: Callable[..., Any] | None = None) -> tuple[Any, list]:
        """Run SteFFLe on ``fed``: the one call into the run engine. Returns the final run state
        and the silos' noise plans; sets ``ledgers_``, ``group_proportions_``, ``n_rounds_`` and the
        state an interrupted run resumes from.

        ``previous``: the run state to resume (:meth:`_resume_state`); ``init``: the ``(θ, W)`` of a
        new run (a warm start, or a model's own parameters); ``provider_factory``: the gradient
        provider of each silo (None: the linear model in Rust)."""
        if previous is not None and ledgers is None and getattr(self, "_run_ledgers", None) is not None:
            # The ledgers that charged the interrupted run's rounds (on arrays, a new Federation
            # would bring new ones, and a hybrid topology's sensitive silos have none of their own).
            ledgers = self._run_ledgers
        sim = Simulation(st, fed, ledgers=ledgers, fast=provider_factory is None, provider_factory=provider_factory,
                         sensitive_silos=sensitive_silos)
        try:
            state = sim.run(resume=previous, on_epoch=on_epoch, progress=st.progress, init=init)
        finally:
            # An interrupted fit can be resumed from its last completed epoch.
            if sim.state is not None:
                self._run_state = sim.state
                self._run_ledgers = sim.ledgers if st.private else None
            else:  # refused before the run started: the interrupted one is still the one to resume
                self._run_state = previous
        self._held_out = sim.held_out_of_plans if st.validation_share > 0 else None
        if st.mode != "standard":  # the sensitive silos' ledgers (None entries in a non-private fit)
            self.ledgers_ = sim.ledgers
        else:
            self.ledgers_ = [ledger for ledger in sim.ledgers if ledger is not None]
        self.group_proportions_ = state.proportions
        self.n_rounds_ = state.epochs_done * sim.rounds_per_epoch
        return state, sim.plans

    def _adopt(self, state: Any, plans: list, st: SteFFLeSettings, k: int, l: int) -> None:  # noqa: E741
        """The fitted attributes from a finished (or interrupted) run's state: θ (the snapshot for
        ``output="random"``), W as ``k × l`` (or ``classes × k × l``), history and the report."""
        theta, w = state.snapshot if state.snapshot is not None else (state.theta, state.w)
        blocks = st.notion.n_blocks(l)
        self.theta_ = self._fold_scaling(np.asarray(theta, dtype=np.float64))
        if getattr(self, "_scaling", None) is not None:
            self.feature_scaling_ = self._scaling
        elif hasattr(self, "feature_scaling_"):
            del self.feature_scaling_
        self.W_ = np.asarray(w).reshape(blocks, k, l)
        if blocks == 1:
            self.W_ = self.W_[0]
        self.epochs_done_ = state.epochs_done
        # λ of the last epoch: adapted (kept in the run state) or the fixed lam.
        self.lam_ = float(getattr(state, "lam", None) if getattr(state, "lam", None) is not None else st.lam_initial)
        self.checkpoints_ = checkpoints_frame(getattr(state, "checkpoints", []), st)
        # The released figures themselves (with their noise sd), for pfair.model_selection.
        self.checkpoint_figures_ = list(getattr(state, "checkpoints", []))
        selected = getattr(state, "selected", None)
        self.selected_epoch_ = None if selected is None else int(selected) + 1
        if selected is not None and st.max_violation is not None:
            self.lam_ = float(self.checkpoints_.loc[self.selected_epoch_, "lam"])
        self.history_ = pd.DataFrame(state.history).set_index("epoch") if state.history else pd.DataFrame()
        self.privacy_report_ = self._report(plans, st)

    def _report(self, plans: list, st: SteFFLeSettings) -> pd.DataFrame:
        rows = []
        ledgers = self.ledgers_ if st.private else []
        held = getattr(self, "_held_out", None)
        for j, plan in enumerate(plans):
            row = plan.as_dict()
            if held is not None:
                row["n_held_out"] = int(held[j])  # the silo's validation share; n_records: what the rounds sample
            row["epsilon_spent"] = ledgers[j].epsilon_spent() if ledgers else math.inf
            row["p_s"] = st.p_s_source
            row["noise"] = "secret" if st.noise_seed is None else f"reproducible (noise_seed={st.noise_seed})"
            covered = st.private and st.noise_seed is None and st.p_s_source != "pooled"
            row["guarantee"] = ("none (non-private)" if not st.private else
                                "covered" if covered else
                                "not covered: " + ", ".join(
                                    r for r, bad in (("noise_seed is known", st.noise_seed is not None),
                                                     ("p_s pooled from exact data", st.p_s_source == "pooled"))
                                    if bad))
            rows.append(row)

        frame = pd.DataFrame(rows).set_index("silo")
        # Kept as objects, so that comparing with p_s's old name "public" still works (warned).
        frame["p_s"] = pd.Series([row["p_s"] for row in rows], index=frame.index, dtype=object)
        return PrivacyReport(frame)

    @property
    def epsilon_spent_(self) -> float:
        """Largest ε spent by any silo (each silo's guarantee is its own)."""
        return float(self.privacy_report_["epsilon_spent"].max())


def checkpoints_frame(figures: list, st: SteFFLeSettings) -> pd.DataFrame:
    """``checkpoints_``: one row per checkpoint's released figures (index: epoch, 1-based)."""
    rows = []
    for f in figures:
        row = {"epoch": f.epoch + 1, "validation_error": f.error, "constant_error": f.constant_error,
               "margin": f.margin, "clearly_better": f.clearly_better}
        if st.max_violation is not None:
            # meets_target: v̂ + sd ≤ max_violation (CheckpointFigures.meets), the rule the selection reads.
            row.update({"violation_released": f.violation, "violation_sd": f.violation_sd,
                        "meets_target": f.meets(st.max_violation), "lam": f.lam})
        rows.append(row)
    return pd.DataFrame(rows).set_index("epoch") if rows else pd.DataFrame()


def history_metrics(split: str, proba: np.ndarray, y: np.ndarray, s: np.ndarray | None,
                    known: np.ndarray | None = None) -> dict[str, float]:
    """The ``history_`` columns of a model's probabilities ``proba`` on records of class indices
    ``y``: ``<split>_loss`` (cross-entropy), ``<split>_error`` and, when ``s`` is given,
    ``<split>_demographic_parity_difference`` and ``<split>_equalized_odds_difference``
    (:mod:`pfair.metrics`) over the records ``known`` (default: all). Every estimator's history
    and the baselines' use it."""
    pred = np.argmax(proba, axis=1)
    loss = float(-np.mean(np.log(np.clip(proba[np.arange(len(y)), y], 1e-300, None))))
    row = {f"{split}_loss": loss, f"{split}_error": float(np.mean(pred != y))}
    if s is not None:
        if known is not None:
            y, pred, s = y[known], pred[known], s[known]
        row[f"{split}_demographic_parity_difference"] = metrics.demographic_parity_difference(
            y, pred, sensitive_features=s)
        row[f"{split}_equalized_odds_difference"] = metrics.equalized_odds_difference(
            y, pred, sensitive_features=s)
    return row


def _inside_model_selection(depth: int = 40) -> bool:
    """Whether this call runs inside scikit-learn's cross-validation or hyper-parameter search
    (a ``sklearn.model_selection`` frame on the stack; also true in its joblib workers)."""
    frame = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            return False
        if frame.f_globals.get("__name__", "").startswith("sklearn.model_selection"):
            return True
        frame = frame.f_back
    return False


def warn_model_selection_cost(name: str, stacklevel: int = 3) -> None:
    """The :class:`PrivacyWarning` of a private fit on arrays inside cross-validation, once per
    process (:func:`pfair._warn.warn_once`: not once per fold and candidate)."""
    warn_once(
        f"a private {name} is being fitted inside scikit-learn cross-validation or a hyper-parameter search: each "
        "fold and candidate builds new silos with new ledgers, so a record's real privacy cost is the sum of the "
        "epsilon of every fit that used it, not the epsilon of one fit. Tune on public data, divide the budget "
        "(epsilon / number of fits), or fit on one Federation so its ledgers refuse what is over budget "
        "(docs/sklearn.md; shown once per process)",
        PrivacyWarning, kind=("model_selection_cost", name),
        stacklevel=stacklevel,
    )


def refuse_fit_arguments(name: str, unsupported: dict[str, Any],
                         takes: str = "sensitive_features, silos, sensitive_silos, eval_set, ledgers and resume") -> None:
    """Refuse keyword arguments ``fit`` does not take (``takes``: the ones it does), ``sample_weight``
    with its reason."""
    if not unsupported:
        return
    if "sample_weight" in unsupported:
        raise TypeError(
            f"{name}.fit does not take sample_weight: every record's gradient parts are clipped to the same norm "
            "and each silo's noise is calibrated to the change one record can make to its sums; a weight would "
            "scale a record's contribution and so change that sensitivity, and the (epsilon, delta) guarantee would "
            "no longer hold as computed. Instead, resample the rows by their weight before the fit (subsampling keeps "
            "the guarantee per row; a row repeated r times is protected only as a group of r rows), and pass the "
            "weights to the metrics, which take sample_weight= (pfair.metrics)")
    unknown = ", ".join(sorted(unsupported))
    raise TypeError(f"{name}.fit got unexpected keyword argument(s) {unknown}; it takes {takes}")


def warn_non_private(name: str, stacklevel: int = 3) -> None:
    """The :class:`~pfair.exceptions.NonPrivateFitWarning` of a fit with ``epsilon=None``."""
    warnings.warn(
        f"{name} is fitting with epsilon=None: not private. Nothing is clipped or noised, so every message a silo "
        f"sends reveals its exact data. Leave epsilon at its default (1.0, as pfair train) or set a budget for a "
        f"private fit; keep epsilon=None for non-private baselines and simulations only (silence this with "
        f"warnings.filterwarnings('ignore', category=pfair.exceptions.NonPrivateFitWarning))",
        NonPrivateFitWarning,
        stacklevel=stacklevel,
    )


def missing_sensitive_message(name: str) -> str:
    """The error of ``fit(X, y)`` without ``sensitive_features`` (lam > 0)."""
    return (
        f"{name}.fit needs sensitive_features= (the sensitive attribute of each record) when lam > 0: "
        f"call fit(X, y, sensitive_features=s). In a Pipeline, cross_val_score or GridSearchCV, route it: "
        f"sklearn.set_config(enable_metadata_routing=True), {name}().set_fit_request(sensitive_features=True), "
        "then pass params={'sensitive_features': s} (fit params of GridSearchCV.fit). Only lam=0 (no fairness "
        "penalty) fits without it"
    )
