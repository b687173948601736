"""Validation inside the silos: a held-out share per silo, released figures at checkpoints, and the
choice of the model a fit returns.

Every silo keeps ``validation_share`` of its records out of training (a fixed random subset drawn
from the public ``seed`` and the silo's index: which positions are held out says nothing about
the records). After each checkpoint epoch (:meth:`pfair.settings.SteFFLeSettings.checkpoint_epochs`)
silo j releases, for the model θ_e the server just published,

* its **validation table** ``V_j[y, ŷ] = #{i held out: y_i = y, argmax F(x_i; θ_e) = ŷ}``. It reads x
  and y only. With ``protect="attribute"`` (the guarantee covers s alone) it is exact and costs
  nothing. With ``protect="record"`` it is a Gaussian release: replacing one held-out record moves
  one count from one cell to another (L2 change √2; 0 for a record in the training share), so
  ``V_j + N(0, (z_val √2)²)`` per cell is a Gaussian mechanism of sensitivity √2, charged to the
  silo's ledger before it is computed;
* with a fairness target, its **violation histogram** over all its records
  (:mod:`pfair.fairness_target`: sensitivity √2 under replace-one of s or of a whole record).
  It counts every record, not only the held-out ones, because a DP count's noise is fixed while
  a group's size sets the precision of its rates: on a silo of Adult at the default budget the
  held-out share alone would put ±0.04 of noise on a rate, the whole silo ±0.005.

The server adds the silos' tables (clamped at 0) and reads, per checkpoint, the validation
error ``Σ_{y≠ŷ} V[y, ŷ] / Σ V``, the **constant predictor's** error ``1 − max_y Σ_ŷ V[y, ŷ] / Σ V``
(its largest class) and, with a target, the released violation. All of it is post-processing of
releases. The model a fit returns is chosen from these figures alone (:class:`Selector`):

* the **guard** compares the model with the constant predictor on the same held-out records, by
  the paired difference ``D = error − constant error`` (a mean of ``d_i = 1{ŷ_i ≠ y_i} − 1{c* ≠ y_i}
  ∈ {−1, 0, 1}``) and its standard deviation, exact from the pooled table (plus, in record mode,
  the noise on the cells D reads): :attr:`CheckpointFigures.difference_sd`. At level
  ``GUARD_ALPHA`` (one-sided, 5 %), with ``margin = z_α · sd``, a model is **clearly better** when
  ``D < −margin``, **shown not better** when ``D ≥ margin`` (a model identical to the constant, D = 0
  with sd 0, is always caught), and **within noise** otherwise;
* without a target the last model is returned when it is clearly better, silently; when it is
  within noise, the last model with a milder warning (``ConvergenceWarning``: the figures are too
  noisy to tell it from the constant, with the margin, the held-out records and the fix); when it
  is shown not better, the most accurate checkpoint that is clearly better at level α/K (it was
  chosen as the best of K: Bonferroni), else the most accurate checkpoint, with a
  ``NotBetterThanConstantWarning``. A model truly better than the constant is therefore warned as
  not better with probability at most α, and a model truly no better is returned without a word
  with probability at most α (both over the draw of the held-out records; docs/optimisation.md,
  section 6, measures them). At a fixed λ > 0 a last model shown not better gives way to the
  **constant predictor itself** (``selected_epoch_ = 0``: the linear model with zero weights and
  the intercepts ``log p_c / p_0`` of the pooled table's class shares, a deep module with its last
  linear layer so set: post-processing), warned: it is the fairest model there is (violation 0
  under every notion) and at least as accurate as the last model, while an earlier checkpoint would
  be more accurate only by being less fair than λ asks, by an amount no release of a fixed-λ fit
  measures. A module that cannot be the constant (no last linear layer) returns its last model when
  that is *at* the constant (D within the margin or :data:`AT_CONSTANT`), else the checkpoints as
  at λ = 0, with a warning that says they may be less fair than λ asks;
* with ``max_violation=t`` the most accurate checkpoint not shown worse than the constant whose
  released violation is at most t with one standard deviation of its noise to spare
  (:meth:`CheckpointFigures.meets`), said when it is only within noise of the constant; when none
  meets t, the fairest checkpoint not shown worse, with a warning.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field, fields
from statistics import NormalDist
from typing import Any

import numpy as np

from pfair.exceptions import ConvergenceWarning, NotBetterThanConstantWarning
from pfair.federation import Federation

#: L2 sensitivity of a silo's validation table under replace-one of a record (record mode).
VALIDATION_SENSITIVITY = math.sqrt(2.0)
#: Name of the ledger event of one validation-table release (record mode).
VALIDATION_EVENT = "validation_table"
#: Level of the guard's one-sided tests (:class:`CheckpointFigures`): a model better than the
#: constant predictor is shown not better, and one no better is shown better, with probability at
#: most this (over the draw of the held-out records; normal approximation of the paired mean).
GUARD_ALPHA = 0.05
#: A fit with a fixed fairness weight λ > 0 whose last model is within this much validation error of
#: the constant predictor (or within the guard's margin) is *at* the constant: the penalty drove it
#: there, and the fit returns it (warned) instead of an earlier, less fair checkpoint.
AT_CONSTANT = 0.005


@functools.lru_cache(maxsize=64)
def z_of(alpha: float) -> float:
    """The one-sided normal quantile ``z_α = Φ⁻¹(1 − α)`` (1.645 at α = 0.05); cached (every
    checkpoint's figures read it several times, at the same few levels)."""
    return NormalDist().inv_cdf(1.0 - float(alpha))


def held_out_count(n_records: int, share: float) -> int:
    """How many of a silo's ``n_records`` :func:`holdout` keeps out of training: ``⌊share · n⌋``
    (a function of public values: the server computes it from the silo's size)."""
    return int(math.floor(float(share) * int(n_records)))


def training_sizes(sizes: Any, share: float) -> list[int]:
    """The records each silo of ``sizes`` trains on: its size less :func:`held_out_count`."""
    return [int(n) - held_out_count(int(n), share) for n in sizes]


def holdout(n_records: int, share: float, *, seed: int, silo: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices ``(train, validation)`` of a silo of ``n_records``: ``⌊share · n⌋`` positions
    held out, drawn from the public ``seed`` and the silo's index (a function of public values only,
    so it reveals nothing about the records). Both sorted."""
    n = int(n_records)
    n_val = held_out_count(n, share)
    if n_val == 0:
        return np.arange(n), np.zeros(0, dtype=np.int64)
    rng = np.random.default_rng([int(seed), int(silo), 0x7661])
    val = np.sort(rng.choice(n, size=n_val, replace=False))
    keep = np.ones(n, dtype=bool)
    keep[val] = False
    return np.flatnonzero(keep), val


def split_federation(fed: Any, share: float, *, seed: int) -> tuple[Any, list]:
    """``(training federation, held-out silos)`` of ``fed``: each silo's :func:`holdout` split, the
    training part a :class:`~pfair.federation.Federation` of the same encodings (rows of the same
    matrix: no copy of the features), the held-out parts :class:`~pfair.federation.Silo` objects
    (None where a silo holds out nothing). With ``share = 0`` the federation itself and no held-out
    silos."""
    if share <= 0:
        return fed, [None] * fed.n_silos
    train, held = [], []
    for j, silo in enumerate(fed.silos):
        tr, va = holdout(len(silo), share, seed=seed, silo=j)
        train.append(silo.subset(tr))
        held.append(silo.subset(va) if va.size else None)
    out = Federation(train, classes=fed.classes_, groups=fed.groups_, feature_names=fed.feature_names,
                     sensitive_name=fed.sensitive_name)
    for name in ("silo_names_", "label_names", "group_names"):
        if hasattr(fed, name):
            setattr(out, name, getattr(fed, name))
    return out, held


def validation_table(y: np.ndarray, pred: np.ndarray, n_classes: int) -> np.ndarray:
    """Exact counts ``V[y, ŷ]`` (``l × l``) of records by label and prediction."""
    l = int(n_classes)  # noqa: E741
    flat = np.bincount(np.asarray(y, dtype=np.int64) * l + np.asarray(pred, dtype=np.int64), minlength=l * l)
    return flat.reshape(l, l).astype(np.float64)


@dataclass(frozen=True)
class CheckpointFigures:
    """What the server read of one checkpoint: the released validation figures of the model after
    ``epoch`` (0-based), pooled over the silos that answered.

    ``error`` and ``constant_error``: of the model and of the constant predictor (the largest
    class); ``n``: the held-out records the table counts (noisy in record mode); ``noise_sd``: the
    noise std of one pooled cell (0 when exact); ``violation``: the released violation (None
    without a target); ``lam``: λ of the epoch; ``cells``: of the pooled table."""

    epoch: int
    error: float
    constant_error: float
    n: float
    noise_sd: float = 0.0
    violation: float | None = None
    violation_sd: float = 0.0
    lam: float | None = None
    #: Cells of the pooled table (l × l).
    cells: int = 4
    #: ``p₊``: share of the held-out records the model gets wrong where the constant predictor is
    #: right (``Σ_{ŷ≠c*} V[c*, ŷ] / n``); None: unknown (then bounded, see :attr:`difference_sd`).
    worse_share: float | None = None
    #: ``p₋``: share the model gets right where the constant predictor is wrong
    #: (``Σ_{y≠c*} V[y, y] / n``).
    better_share: float | None = None
    #: ``c*``: the class the constant predictor predicts (the pooled table's first largest row).
    constant_class: int = 0

    @classmethod
    def _of(cls, *values: Any) -> "CheckpointFigures":
        """The figures with every field given, in the order of the fields, made without the frozen
        dataclass's ``__init__`` (its keyword parsing and one ``object.__setattr__`` per field, which
        cost more than the figures of a checkpoint): the same object, field for field."""
        if len(values) != len(_FIGURE_FIELDS):
            raise TypeError(f"CheckpointFigures._of takes {len(_FIGURE_FIELDS)} values, got {len(values)}")
        fig = object.__new__(cls)
        fig.__dict__.update(zip(_FIGURE_FIELDS, values))
        return fig

    @property
    def difference(self) -> float:
        """``D = error − constant_error``: the mean over the held-out records of
        ``d_i = 1{ŷ_i ≠ y_i} − 1{c* ≠ y_i}`` (``p₊ − p₋``); negative when the model is better.
        From the shares when known: a model identical to the constant is then exactly 0, not a
        rounding error below it."""
        if self.worse_share is not None and self.better_share is not None:
            return self.worse_share - self.better_share
        return self.error - self.constant_error

    @property
    def difference_sd(self) -> float:
        """Standard deviation of :attr:`difference`. The two errors are read on the same records,
        so the sampling part is that of a paired mean, ``Var d / n`` with
        ``Var d = p₊ + p₋ − (p₊ − p₋)²`` (exact from the table; without the shares, the bound
        ``p₊ + p₋ ≤ error + constant error``). In record mode D's numerator
        ``Σ_{ŷ≠c*} V[c*, ŷ] − Σ_{y≠c*} V[y, y]`` reads ``2(l − 1)`` noisy cells: ``+ 2(l − 1) σ² / n²``."""
        n = max(self.n, 1.0)
        d = self.difference
        if self.worse_share is None or self.better_share is None:
            spread = self.error + self.constant_error
        else:
            spread = self.worse_share + self.better_share
        var_d = max(spread - d * d, 0.0)
        return math.sqrt(var_d / n + self._noise_variance)

    @property
    def _noise_variance(self) -> float:
        """Variance the noise adds to a difference of ``2(l − 1)`` cells over n: ``2(l − 1) σ² / n²``
        (0 when exact)."""
        n = max(self.n, 1.0)
        l = max(int(round(math.sqrt(self.cells))), 2)  # noqa: E741
        return 2 * (l - 1) * (self.noise_sd / n) ** 2

    @property
    def error_variance(self) -> float:
        """Variance of :attr:`error` alone: the held-out records' ``e(1 − e)/n`` plus the noise on
        the ``2(l − 1)`` cells a change of the error reads (record mode)."""
        return self.error * (1 - self.error) / max(self.n, 1.0) + self._noise_variance

    def margin_at(self, alpha: float) -> float:
        """``z_α · sd(D)``: how far from 0 the difference must be to decide at level ``alpha``."""
        return z_of(alpha) * self.difference_sd

    @property
    def margin(self) -> float:
        """:meth:`margin_at` the guard's level ``GUARD_ALPHA``."""
        return self.margin_at(GUARD_ALPHA)

    def better_at(self, alpha: float) -> bool:
        """Whether the model is better than the constant predictor at level ``alpha``: ``D < −z_α sd``."""
        return self.difference < -self.margin_at(alpha)

    @property
    def clearly_better(self) -> bool:
        """Better than the constant predictor at level ``GUARD_ALPHA`` (``D < −margin``)."""
        return self.better_at(GUARD_ALPHA)

    @property
    def shown_not_better(self) -> bool:
        """Shown no better than the constant predictor at level ``GUARD_ALPHA``: ``D ≥ margin``. A
        model identical to the constant (``D = 0``, sd 0) is always shown not better."""
        return self.difference >= self.margin

    @property
    def verdict(self) -> str:
        """``"better"``, ``"not better"`` or ``"within noise"`` (module docstring)."""
        return "better" if self.clearly_better else "not better" if self.shown_not_better else "within noise"

    def meets(self, target: float) -> bool:
        """Whether the released violation meets ``target`` with one standard deviation of its noise
        to spare (``v̂ + sd ≤ t``): among several checkpoints, the one of the smallest noisy v̂ is
        the one whose noise was most negative, so the plain ``v̂ ≤ t`` would favour models over t."""
        return self.violation is not None and self.violation + self.violation_sd <= target

    def as_constant(self) -> "CheckpointFigures":
        """The figures of the constant predictor itself on the same held-out records (epoch −1:
        no checkpoint): its error, D = 0, violation 0 (it predicts one class for everyone)."""
        return CheckpointFigures(epoch=-1, error=self.constant_error, constant_error=self.constant_error, n=self.n,
                                 noise_sd=self.noise_sd, violation=None if self.violation is None else 0.0,
                                 violation_sd=self.violation_sd, lam=self.lam, cells=self.cells, worse_share=0.0,
                                 better_share=0.0, constant_class=self.constant_class)

    def as_row(self) -> dict[str, float]:
        """The history columns of these figures."""
        row = {"validation_error": self.error, "constant_error": self.constant_error}
        if self.violation is not None:
            row["violation_released"] = self.violation
        return row


#: The fields of :class:`CheckpointFigures`, in order (:meth:`CheckpointFigures._of`).
_FIGURE_FIELDS = tuple(f.name for f in fields(CheckpointFigures))


def pooled_figures(tables: list[np.ndarray], *, epoch: int, noise_sd: float = 0.0, violation: float | None = None,
                   violation_sd: float = 0.0, lam: float | None = None) -> CheckpointFigures | None:
    """The :class:`CheckpointFigures` of the silos' validation tables (each ``l × l``, noisy or
    exact), pooled and clamped at 0; None when they hold no record.

    Exact tables (every cell an integer below 2⁵³, as every release without noise is) are pooled
    in Python integers: their sums are exact in any order, and each figure is one correctly
    rounded division, so the figures are those of the NumPy path, which noisy tables take (a
    pooled 2 × 2 table is a few cells, where NumPy's calls cost more than the arithmetic)."""
    if not tables:
        return None
    pooled = _pooled_integer_table(tables)
    if pooled is not None:
        return _integer_figures(pooled, len(tables), epoch=epoch, noise_sd=noise_sd, violation=violation,
                                violation_sd=violation_sd, lam=lam)
    V = np.maximum(np.sum(tables, axis=0), 0.0)
    n = float(V.sum())
    if n <= 0:
        return None
    error = float((n - np.trace(V)) / n)
    rows = V.sum(axis=1)
    c = int(np.argmax(rows))
    constant = float(1.0 - rows[c] / n)
    worse = float((rows[c] - V[c, c]) / n)  # y = c*, ŷ ≠ c*: only the model wrong
    better = float((np.trace(V) - V[c, c]) / n)  # y ≠ c*, ŷ = y: only the constant wrong
    sd = float(noise_sd) * math.sqrt(len(tables))
    return CheckpointFigures(epoch=int(epoch), error=error, constant_error=constant, n=n, noise_sd=sd,
                             violation=violation, violation_sd=float(violation_sd), lam=lam, cells=int(V.size),
                             worse_share=worse, better_share=better, constant_class=c)


_FLOAT64 = np.dtype(np.float64)


def exact_cells(table: Any) -> list[float] | None:
    """The cells of ``table`` as a flat list of floats when it is a float64 array whose every cell
    is an integer of magnitude below 2⁵³ (exact in float64, as every release without noise is:
    their sums are exact, and the same, in any order); else None."""
    if not isinstance(table, np.ndarray) or not (table.dtype is _FLOAT64 or table.dtype == _FLOAT64):
        return None
    cells = table.ravel().tolist()
    if not all(map(float.is_integer, cells)) or (cells and max(map(abs, cells)) >= 2.0 ** 53):
        return None
    return cells


def pool_exact_cells(cells: list[list[float]], l: int) -> list[list[int]]:  # noqa: E741
    """The cell-wise sum of ``l × l`` tables given by their exact cells (:func:`exact_cells`),
    clamped at 0, as Python integers (``l`` rows)."""
    sums = [max(sum(map(int, col)), 0) for col in zip(*cells)]  # cell i of every table
    return [sums[y * l:(y + 1) * l] for y in range(l)]


def _integer_figures(pooled: list[list[int]], n_tables: int, *, epoch: int, noise_sd: float,
                     violation: float | None, violation_sd: float, lam: float | None) -> CheckpointFigures | None:
    """:func:`pooled_figures` of ``n_tables`` exact tables pooled in integers (``pooled``): each
    figure one correctly rounded division, as the NumPy path computes it."""
    l = len(pooled)  # noqa: E741
    n = sum(map(sum, pooled))
    if n <= 0:
        return None
    rows_i = [sum(r) for r in pooled]
    trace_i = sum(pooled[v][v] for v in range(l))
    c = rows_i.index(max(rows_i))  # the first largest, as np.argmax
    return CheckpointFigures._of(int(epoch), (n - trace_i) / n, 1.0 - rows_i[c] / n, float(n),
                                 float(noise_sd) * math.sqrt(n_tables), violation, float(violation_sd), lam, l * l,
                                 (rows_i[c] - pooled[c][c]) / n, (trace_i - pooled[c][c]) / n, c)


def exact_figures(cells: list[list[float]], l: int, *, epoch: int, noise_sd: float = 0.0,  # noqa: E741
                  lam: float | None = None) -> CheckpointFigures | None:
    """:func:`pooled_figures` of exact ``l × l`` tables given by their cells (:func:`exact_cells`),
    without a violation: the same figures, bit for bit, without reading the arrays again."""
    if not cells:
        return None
    return _integer_figures(pool_exact_cells(cells, l), len(cells), epoch=epoch, noise_sd=noise_sd,
                            violation=None, violation_sd=0.0, lam=lam)


def _pooled_integer_table(tables: list[np.ndarray]) -> list[list[int]] | None:
    """The cell-wise sum of square ``tables`` clamped at 0, as Python integers, when every cell is
    an integer of magnitude below 2⁵³ (exact in float64) and every table is float64 or integer
    (the NumPy path computes in float64 then; a float32 table would keep it in float32); else None."""
    shape = np.shape(tables[0])
    if len(shape) != 2 or shape[0] != shape[1]:
        return None
    cells: list = []
    for t in tables:
        a = np.asarray(t)
        if a.shape != shape or not (a.dtype == np.float64 or a.dtype.kind in "iu"):
            return None
        exact = exact_cells(a.astype(np.float64, copy=False))
        if exact is None:
            return None
        cells.append(exact)
    return pool_exact_cells(cells, shape[0])


#: How every warning that the figures could not tell a model from the constant predictor begins
#: (a ``ConvergenceWarning``, milder than :class:`~pfair.exceptions.NotBetterThanConstantWarning`).
#: The figures need not be noisy for it: exact figures of a few held-out records cannot tell a model
#: 0.01 better than the constant from it either (the warning's margin counts both uncertainties).
#: Runs of versions before 2026-12-08 said "the released validation figures are too noisy to tell
#: the model from the constant predictor" (``pfair.experiments.sweep.CONSTANT_WARNINGS`` reads both).
WITHIN_NOISE = "the validation figures cannot tell the model from the constant predictor"


def _constant_instead(model: tuple) -> tuple[tuple, "CheckpointFigures"]:
    """``((figures, None, W), figures)`` of the constant predictor read off a kept model's table (θ
    None: the caller builds it; W stays the model's)."""
    const = model[0].as_constant()
    return (const, None, model[2]), const


@dataclass
class Selector:
    """Follows the checkpoints of a run and chooses the model the fit returns (module docstring).

    It keeps at most seven models (not one per checkpoint): the last, the most accurate, the most
    accurate clearly better than the constant, and with a target the most accurate meeting it and
    the fairest, each among the checkpoints clearly better and among those within noise of the
    constant (preferred in that order)."""

    target: float | None = None
    #: The fixed fairness weight of the fit (0: none, or adapted to a target).
    lam: float = 0.0
    #: Whether the fit can return the constant predictor itself (the linear model: zero weights and
    #: intercepts only; a deep module: its last linear layer so set). At a fixed λ > 0 a last model
    #: shown no better than the constant is then replaced by it (:meth:`choose` returns
    #: ``(figures, None, W)``: the caller builds its θ).
    constant: bool = False
    figures: list = field(default_factory=list)
    _kept: dict = field(default_factory=dict, repr=False)

    def offer(self, fig: CheckpointFigures, theta: np.ndarray, w: np.ndarray) -> None:
        """The figures of the model ``(θ, W)`` after a checkpoint."""
        self.figures.append(fig)
        model = (fig, np.array(theta, copy=True), np.array(w, copy=True))
        self._kept["last"] = model
        self._keep("accurate", model, lambda f: f.error)
        if fig.clearly_better:
            self._keep("accurate_ok", model, lambda f: f.error)
        if self.target is not None and fig.violation is not None and not fig.shown_not_better:
            # "_ok": clearly better than the constant; "_noisy": within noise of it (preferred less)
            kind = "ok" if fig.clearly_better else "noisy"
            self._keep(f"fairest_{kind}", model, lambda f: f.violation)
            if fig.meets(self.target):
                self._keep(f"meets_{kind}", model, lambda f: f.error)

    def _keep(self, name: str, model: tuple, key: Any) -> None:
        kept = self._kept.get(name)
        if kept is None or key(model[0]) < key(kept[0]):
            self._kept[name] = model

    def _target_resolution(self) -> str:
        """For a missed target: where the released violations' noise (their median sd) is as large
        as the target itself, the releases cannot show a model that meets it, and the violation of a
        noisy histogram of many cells is biased upwards (the largest of many noisy gaps), so λ
        chases a gap larger than the model's: say so, with the fixes."""
        sds = sorted(f.violation_sd for f in self.figures if f.violation is not None)
        if not sds or self.target is None:
            return ""
        sd = sds[len(sds) // 2]
        if sd < self.target:
            return ""
        return (f". The released violations' noise (median sd {sd:.3g}) is as large as the target: those releases "
                f"cannot show a model within max_violation={self.target:g}, and a noisy histogram's largest gap reads "
                "above the model's (more so the more groups and classes it compares), so λ rose after noise; raise "
                "max_violation_epsilon_share or epsilon, merge small groups, or set a larger max_violation")

    def _target_path(self) -> str:
        """How λ and the released violation moved over the second half of a target's checkpoints
        (for the warning of a missed target: a λ still rising at the end wants more epochs, a
        violation that levelled off while λ rose a target beyond the fairness term's reach)."""
        figs = [f for f in self.figures if f.lam is not None and f.violation is not None]
        if len(figs) < 2:
            return ""
        a, b = figs[(len(figs) - 1) // 2], figs[-1]
        return (f"; from the checkpoint after epoch {a.epoch + 1} to the last (epoch {b.epoch + 1}) λ went from "
                f"{a.lam:.3g} to {b.lam:.3g} and the released violation from {a.violation:.4f} to {b.violation:.4f}")

    def choose(self) -> tuple[tuple | None, str | None]:
        """``((figures, θ, W), warning)``: the model to return and why it is not simply the last
        one's, or what could not be checked (None when it is the last and clearly better than the
        constant). ``(None, None)`` without checkpoints. θ is None for the constant predictor
        (:attr:`constant`; ``figures.epoch`` is −1): the caller builds it from
        ``figures.constant_class`` and ``figures.constant_error``."""
        kept = self._kept
        if "last" not in kept:
            return None, None
        last = kept["last"]
        if self.target is None:
            if last[0].clearly_better:
                return last, None
            if not last[0].shown_not_better:
                return last, f"{WITHIN_NOISE}: validation error {_fig(last[0])}; returned the last model"
            if self.lam > 0 and self.constant:
                # λ asks for fairness, and the constant predictor is the fairest model there is (violation
                # 0 under every notion) and at least as accurate as the fit's last model (shown): an
                # earlier checkpoint would be more accurate only by being less fair than λ asks, by an
                # amount no release of a fixed-λ fit measures.
                chosen, const = _constant_instead(last)
                return chosen, (
                    f"the last model is no better than the constant predictor (validation error {_fig(last[0])}; "
                    f"shown no better at the {GUARD_ALPHA:.0%} level, so wrongly warned at most {GUARD_ALPHA:.0%} of "
                    f"the time): returned the constant predictor (class {const.constant_class} of the encoded "
                    f"classes for everyone: violation 0, validation error {const.error:.4f}) instead, the fairest "
                    f"model there is and at least as accurate; no earlier checkpoint, whose fairness a fit at a "
                    f"fixed lam does not release. At lam={self.lam:g} the fairness term (in a private fit also its noise, "
                    f"whose pull grows with lam) drove the model onto or past the constant predictor, or the run was "
                    f"too short to move it from its start (then lam=0 does the same): lower lam, or set "
                    f"max_violation= for the most accurate checkpoint within a violation, or train more epochs")
            if self.lam > 0 and last[0].difference <= max(last[0].margin, AT_CONSTANT):
                # The fairness weight pushed the model onto the constant predictor, which is perfectly
                # fair: an earlier checkpoint would be more accurate only by being less fair than λ asks.
                # A run too short to move θ from its start predicts one class too: say both causes.
                return last, (f"the last model is no better than the constant predictor (validation error "
                              f"{_fig(last[0])}; shown no better at the {GUARD_ALPHA:.0%} level, so wrongly warned "
                              f"at most {GUARD_ALPHA:.0%} of the time): lam={self.lam:g} drives the model to "
                              f"predicting one class for everyone, or the run was too short to move it from its "
                              f"start (then lam=0 does the same); returned it (as fair as that, and as useless). "
                              f"Lower lam, or set max_violation= for the most accurate model within a violation, or "
                              f"train more epochs")
            # The best of K checkpoints is chosen after seeing them: it must be better at level α/K
            # (Bonferroni) for the choice to keep the guard's level.
            k = max(len(self.figures), 1)
            best = kept.get("accurate_ok")
            if best is not None and best[0].better_at(GUARD_ALPHA / k):
                # At λ > 0 an earlier checkpoint had less of the fairness term's training: say that it
                # may be less fair than λ asks (no violation is released without a target to tell).
                unfair = (f"; trained for fewer epochs under lam={self.lam:g}, it may be less fair than lam asks, "
                          f"even less than lam=0 (its violation is not released without max_violation=): lower "
                          f"lam for a last model that trains, or set max_violation= for the most accurate "
                          f"checkpoint within a violation" if self.lam > 0 else "")
                return best, (f"the last model is not clearly better than the constant predictor (validation error "
                              f"{_fig(last[0])}: shown no better at the {GUARD_ALPHA:.0%} level); returned the model "
                              f"after epoch {best[0].epoch + 1} instead (validation error {best[0].error:.4f}, better "
                              f"at level {GUARD_ALPHA / k:.2g} = {GUARD_ALPHA:.0%} / {k}, the best of {k} "
                              f"checkpoints){unfair}")
            best = kept["accurate"]
            if self.constant and best[0].shown_not_better:
                # Even the most accurate checkpoint is shown worse than the constant predictor (at λ = 0:
                # λ > 0 returned it above): the constant is more accurate than every model trained.
                chosen, const = _constant_instead(best)
                return chosen, (
                    f"no model of this fit is clearly better than the constant predictor, and even the most "
                    f"accurate checkpoint (after epoch {best[0].epoch + 1}, validation error {_fig(best[0])}) is "
                    f"shown no better at the {GUARD_ALPHA:.0%} level (worse, or predicting as it does): returned "
                    f"the constant predictor (class {const.constant_class} of the encoded classes for everyone, "
                    f"validation error {const.error:.4f}) instead, at least as accurate as any model the fit trained")
            return best, (f"no model of this fit is clearly better than the constant predictor: the best validation "
                          f"error was {_fig(best[0])}, and the last model is shown no better at the "
                          f"{GUARD_ALPHA:.0%} level; returned that model (after epoch {best[0].epoch + 1})")
        lams = [f.lam for f in self.figures if f.lam is not None]
        reached = f"; λ reached at most {max(lams):.3g}" if lams else ""
        path = self._target_path() + self._target_resolution()
        # Clearly better first (meeting the target, else the fairest), then within noise of the constant.
        if "meets_ok" in kept:
            return kept["meets_ok"], None
        for key in ("fairest_ok", "meets_noisy", "fairest_noisy"):
            if key not in kept:
                continue
            best = kept[key]
            if key == "meets_noisy":
                return best, (f"{WITHIN_NOISE}: the most accurate checkpoint meeting max_violation={self.target:g} "
                              f"(after epoch {best[0].epoch + 1}) has validation error {_fig(best[0])}; returned it")
            noisy = "" if best[0].clearly_better else (f"; {WITHIN_NOISE.replace('the validation ', 'its ')} at "
                                                       f"the {GUARD_ALPHA:.0%} level")
            which = ("the fairest checkpoint clearly better than the constant predictor" if key == "fairest_ok" else
                     "the fairest checkpoint within noise of the constant predictor (none is clearly better)")
            return best, (f"max_violation={self.target:g} was not met by any checkpoint that is not shown worse than "
                          f"the constant predictor (met: the released violation plus one standard deviation of its "
                          f"noise at most {self.target:g}, so that a checkpoint picked for a low noisy figure is not "
                          f"one above the target){reached}; returned {which} (after epoch {best[0].epoch + 1}: "
                          f"released violation {best[0].violation:.4f}, sd {best[0].violation_sd:.4f}, validation "
                          f"error {_fig(best[0])}){noisy}{path}")
        best = kept["accurate"]
        return best, (f"no model of this fit is clearly better than the constant predictor: the best validation error "
                      f"was {_fig(best[0])}, and every checkpoint is shown no better at the {GUARD_ALPHA:.0%} level; "
                      f"returned that model (after epoch {best[0].epoch + 1}), max_violation={self.target:g} "
                      f"unchecked{reached}")


#: Records the silo-local check of a baseline reads at most (:class:`LocalCheck`).
LOCAL_CHECK_RECORDS = 20_000


class LocalCheck:
    """The baselines' guard (PF-LD, FedAvg, central ERM, which hold nothing out): after each epoch
    the model's error on the silos' training records (at most :data:`LOCAL_CHECK_RECORDS`, a seeded
    sample) against the constant predictor's, and at the end the model the fit returns, chosen as
    SteFFLe's :class:`Selector` chooses without a target: the last if it is clearly better than the
    constant predictor, else the most accurate epoch, warned
    (:class:`~pfair.exceptions.NotBetterThanConstantWarning`).

    A silo-local check in the process that holds the silos' data (a simulation). It reads x and y
    only, which the baselines' attribute-level guarantees do not protect, and θ, which is already
    released: nothing of it is released or charged. ``estimator``: the baseline being fitted (its
    ``predict_proba`` at its current ``theta_``); ``shards``: the
    :class:`~pfair.federation.Federation` it is fitted on."""

    def __init__(self, estimator: Any, shards: Any) -> None:
        n = int(sum(shards.sizes))
        rows = None
        if n > LOCAL_CHECK_RECORDS:
            rows = np.sort(np.random.default_rng(0).choice(n, LOCAL_CHECK_RECORDS, replace=False))
        self._X, self._y, _ = shards.pooled(rows) if n else (None, None, None)
        self._estimator = estimator
        self._n_classes = len(shards.classes_)
        self._selector = Selector()

    def offer(self, epoch: int) -> None:
        """The figures of the estimator's current ``theta_``, after ``epoch`` (0-based)."""
        if self._X is None:
            return
        pred = np.argmax(self._estimator.predict_proba(self._X), axis=1)
        fig = pooled_figures([validation_table(self._y, pred, self._n_classes)], epoch=epoch)
        if fig is not None:
            self._selector.offer(fig, self._estimator.theta_, np.zeros(0))

    def choose(self, stacklevel: int = 3) -> bool:
        """Set the estimator's ``theta_`` to the model it returns (``selected_epoch_``: 1-based) and
        warn when that is not simply the last model; returns whether it warned."""
        model, why = self._selector.choose()
        self._estimator.selected_epoch_ = None if model is None else model[0].epoch + 1
        if model is None:
            return False
        self._estimator.theta_ = model[1]
        if why is None:
            return False
        name = type(self._estimator).__name__
        why = why.replace("validation error", "error on the training records").replace("held-out records",
                                                                                        "training records")
        if why.startswith(WITHIN_NOISE):
            # Exact figures: the silos' records are too few, or the model too close to the constant.
            why = why.replace(WITHIN_NOISE, "the silos' training records cannot tell the model from the constant "
                                            "predictor", 1)
            warnings.warn(f"{name}: {why} (a silo-local check: nothing of it was released)", ConvergenceWarning,
                          stacklevel=stacklevel)
            return True
        warnings.warn(f"{name}: {why} (a silo-local check: nothing of it was released). Try more epochs or a "
                      "larger step size if the model barely moved, a smaller fairness weight if fairness pushed it "
                      "to the constant, a larger epsilon or batch if the noise swamps the updates",
                      NotBetterThanConstantWarning, stacklevel=stacklevel)
        return True


def warn_if_no_better_than_constant(estimator: Any, shards: Any, stacklevel: int = 3) -> bool:
    """The guard of a baseline whose model is not built epoch by epoch (the single-shot method
    solves for it once at the end): :class:`LocalCheck` offered that one model. Returns whether it
    warned."""
    check = LocalCheck(estimator, shards)
    check.offer(0)
    return check.choose(stacklevel=stacklevel + 1)


def _fig(f: CheckpointFigures) -> str:
    """The figures of a comparison with the constant predictor, as the warnings print them."""
    return (f"{f.error:.4f} against the constant's {f.constant_error:.4f}, difference {f.difference:+.4f}, margin "
            f"{f.margin:.4f} = {z_of(GUARD_ALPHA):.3f} sd of the paired difference on {f.n:.0f} held-out records")


def warn_selection(message: str, settings: Any, stacklevel: int = 4) -> None:
    """The warning of a fit whose model had to be chosen
    (:class:`~pfair.exceptions.NotBetterThanConstantWarning` when the last model or every model is
    not clearly better than the constant predictor, a
    :class:`~pfair.exceptions.ConvergenceWarning` when a fairness target was not met)
    (:meth:`Selector.choose`), with the fixes to try."""
    st = settings
    if message.startswith(WITHIN_NOISE):
        fix = f"a larger validation_share (now {st.validation_share:g})"
        if st.private and st.protect == "record":
            fix += ", validation_epsilon_share or epsilon (the noise on the validation tables)"
        warnings.warn(f"{message}. Nothing shows it worse than the constant; {fix} would tell them apart (the "
                      "figures of every checkpoint are in checkpoints_)", ConvergenceWarning, stacklevel=stacklevel)
        return
    if "drives the model to predicting one class" in message or "returned the constant predictor" in message:
        warnings.warn(message, NotBetterThanConstantWarning, stacklevel=stacklevel)
        return
    if message.startswith("max_violation="):
        # A missed target (the fairest checkpoint not shown worse was returned): what its λ path says.
        fixes = ["more epochs or a larger lam_lr if λ was still rising at the end", "if the violation levelled "
                 "off while λ rose, a target the fairness term does not reach on these data: it makes the "
                 "predicted probabilities independent of s, not the decisions taken at the larger probability "
                 "(docs/optimisation.md, \"A fairness target's acceptance\"); where s may be used when deciding, "
                 "pfair.PrivateThresholdOptimizer post-processes a model's scores to such targets"]
    else:
        fixes = ["more epochs or a larger lr_theta if the model barely moved", "a smaller lam (or max_violation "
                 "further from 0) if fairness pushed it to the constant"]
    if st.private:
        fixes.append("a larger epsilon or batch_size if the noise swamps the updates")
    warnings.warn(f"{message}. Try {'; '.join(fixes)} (the figures of every checkpoint are in checkpoints_)",
                  NotBetterThanConstantWarning if message.startswith(("no model", "the last model"))
                  else ConvergenceWarning,
                  stacklevel=stacklevel)


__all__ = ["CheckpointFigures", "GUARD_ALPHA", "LocalCheck", "Selector", "WITHIN_NOISE", "VALIDATION_SENSITIVITY", "holdout", "pooled_figures",
           "validation_table"]
