"""Detect the two silent failures of a SteFFLe fit and warn with the numbers.

* **Divergence** — from released values only (θ after each epoch), so the server may check it in a
  private fit: ``‖θ‖ ≥ DIVERGED_NORM``, or ``‖θ‖`` growing by more than ``GROWTH`` in one epoch
  to above 100. A linear-softmax model with ``‖θ‖ = 10³`` on standardised features has logits in
  the hundreds: its probabilities are 0/1 to machine precision and its gradients vanish, so it
  does not come back. (A non-finite θ stays an error: :class:`FloatingPointError`.)
* **Collapse to a constant predictor** — one class predicted for at least ``COLLAPSE_SHARE`` of
  the records. This reads the silos' records, so it is a *silo-local* check: each silo looks at
  its own records (at most ``SAMPLE`` of them, a fixed stride, and with many silos at most
  ``TOTAL_SAMPLE`` over all silos: 1,000 silos read 20 records each, so the check costs a small
  share of an epoch at any scale; the simulation's Rust core reads these rows where it holds the
  silos' data, other callers gather them once per fit when they take at most 64 MB) and the
  warning is raised in the process that holds them (the simulation). The shares are never sent,
  and never stored in the ``history_`` of a private fit.

  After the first epoch the check reads every ``THIN``-th of those rows first. They are a subset
  of the sample, so with ``m`` of them outside their most predicted class, the sample's most
  predicted class has at most ``T − m`` of its ``T`` records. When ``(T − m) / T`` is below
  ``COLLAPSE_SHARE`` the model is not constant on the sample, and that settles it; otherwise the
  whole sample is read. The outcome is the one the whole sample gives, at an eighth of the reads
  in the common case (a model that predicts both classes).

Both warn once per fit, as :class:`pfair.exceptions.ConvergenceWarning`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from pfair import _core
from pfair.exceptions import ConvergenceWarning

#: ‖θ‖ from which training counts as diverged.
DIVERGED_NORM = 1e3
#: Growth of ‖θ‖ in one epoch (from at least 10, so to at least 100) that counts as diverging.
GROWTH = 10.0
#: Share of the records predicted as one class from which the model counts as constant.
COLLAPSE_SHARE = 0.999
#: Records per silo the collapse check reads (a fixed stride over the silo's rows).
SAMPLE = 2000
#: Records read by all silos together (per silo: ``TOTAL_SAMPLE // n_silos``, at most ``SAMPLE``).
TOTAL_SAMPLE = 20_000
#: The sampled rows of all silos are gathered once per fit and kept if they take at most this many
#: bytes (then an epoch's check is one prediction call, not one per silo).
SAMPLE_CACHE_BYTES = 64 << 20
#: The collapse check reads every ``THIN``-th sampled row first (module docstring).
THIN = 8


def sampled_rows(X: Any, sample: int) -> np.ndarray:
    """A fixed stride of at most ``sample`` of a silo's feature rows: an array's, or a
    :class:`~pfair.federation.Silo`'s (whose sampled rows alone are gathered, so a silo made of
    rows of a shared matrix is never copied whole)."""
    if hasattr(X, "strided_X"):
        return X.strided_X(sample)
    n = X.shape[0]
    return X if n <= sample else X[:: math.ceil(n / sample)]


def local_prediction_counts(X: Any, theta: np.ndarray, n_classes: int, sample: int = SAMPLE,
                            thin: int = 1) -> np.ndarray:
    """How many of (a fixed stride of at most ``sample`` of) a silo's records each class is
    predicted for; with ``thin > 1``, of every ``thin``-th of those records only. Silo-local: it
    reads the silo's features, an array or a :class:`~pfair.federation.Silo` (whose sampled rows
    alone are gathered, so a silo made of rows of a shared matrix is never copied whole)."""
    return prediction_counts(sampled_rows(X, sample)[::thin], theta, n_classes)


def prediction_counts(rows: np.ndarray, theta: np.ndarray, n_classes: int) -> np.ndarray:
    """How many of ``rows`` each class is predicted for (the class of the largest logit: the
    largest probability, without the softmax)."""
    return _core.predict_counts(np.ascontiguousarray(rows), np.ascontiguousarray(theta, dtype=np.float64), n_classes)


@dataclass
class ConvergenceMonitor:
    """Follows a fit epoch by epoch (see the module docstring).

    ``silo_features``: the silos' feature arrays, or the :class:`~pfair.federation.Silo` objects
    (read lazily: nothing is copied up front), for the silo-local collapse check (None: no
    collapse check, e.g. a model other than the linear one). ``counts``, when given, does that
    check's reading instead: ``counts(theta, per_silo, thin)`` is how many of every silo's rows
    ``0, t, 2t, …`` (``t = ⌈n_j / per_silo⌉``, the rows :func:`sampled_rows` picks; with
    ``thin > 1`` every ``thin``-th of them) each class is predicted for, all silos together
    (``pfair._core.SiloSet.predict_counts``, which reads the rows where the Rust core holds
    them)."""

    n_classes: int
    lam: float
    lr_w_text: str
    #: W's blocks (the fairness notion's; ``w_radius`` bounds each block's norm, not W's).
    w_blocks: int = 1
    #: ``max_violation`` when λ is a fairness target's (then the warnings name the λ the controller
    #: had set, and its fixes), else None.
    target: float | None = None
    silo_features: Sequence[Any] | None = None
    counts: Callable[[np.ndarray, int], np.ndarray] | None = field(default=None, repr=False)
    diverged: bool = False
    collapse_since: int | None = None
    collapse_info: dict = field(default_factory=dict)
    last_norm: float = 0.0
    ever_varied: bool = False
    #: The largest λ of the epochs checked so far (a target's controller moves it).
    lam_seen: float = 0.0
    #: λ of the epoch the current collapse began (None: no collapse).
    collapse_lam: float | None = None
    #: All silos' sampled rows, gathered on the first check (False: too large to keep).
    _sample: Any = field(default=None, repr=False)
    #: Records in the whole sample (known after the first check).
    _sample_total: int | None = field(default=None, repr=False)

    def _lam_text(self, lam: float) -> str:
        """The λ of a warning: the fixed ``lam``, or the one a fairness target's controller set."""
        if self.target is None:
            return f"lam = {lam:g}"
        return (f"λ = {lam:.3g} (set by max_violation={self.target:g}'s controller, at most {self.lam_seen:.3g} "
                "in this fit)")

    def lam_fix(self) -> str:
        """What lowers λ: ``lam`` itself, or a fairness target's settings."""
        return "λ (a larger max_violation or a smaller lam_lr)" if self.target is not None else "lam"

    def after_epoch(self, epoch: int, theta: np.ndarray, w: np.ndarray, lr_theta: float,
                    norm: float | None = None, lam: float | None = None) -> None:
        """Check θ after epoch ``epoch`` (1-based), trained at ``lam`` (default: the fit's ``lam``),
        and warn on divergence (``norm``: ‖θ‖ when the caller has it, else computed here)."""
        lam = self.lam if lam is None else float(lam)
        self.lam_seen = max(self.lam_seen, lam)
        norm = float(np.linalg.norm(theta)) if norm is None else float(norm)
        if not self.diverged and (norm >= DIVERGED_NORM or (self.last_norm > 0 and norm > GROWTH * max(self.last_norm, 10.0))):
            self.diverged = True
            warnings.warn(
                f"training diverged at epoch {epoch}: ‖θ‖ = {norm:.4g} (was {self.last_norm:.4g} the epoch before), "
                f"‖W‖ = {float(np.linalg.norm(w)):.4g}, lr_theta = {lr_theta:g}, {self._lam_text(lam)}. The θ step "
                "scales with lr_theta·(1 + lam·‖∇ψ‖) and with the features' scale: standardise the features (mean 0, "
                f"std 1: make_pipeline(StandardScaler(), SteFFLe(...))) if they are not, else lower lr_theta or "
                f"{self.lam_fix()}",
                ConvergenceWarning, stacklevel=4,
            )
        self.last_norm = norm
        if self.silo_features is None:
            return
        per_silo = max(1, min(SAMPLE, TOTAL_SAMPLE // max(1, len(self.silo_features))))
        counts = self._collapse_counts(theta, per_silo)
        total = sum(counts) if counts is not None else 0
        share = max(counts) / total if total else 0.0
        if share >= COLLAPSE_SHARE:
            if self.collapse_since is None:
                self.collapse_since, self.collapse_lam = epoch, lam
            self.collapse_info = dict(epoch=epoch, share=share, cls=counts.index(max(counts)), theta_norm=norm,
                                      w_norm=float(np.linalg.norm(w)), w_block_norm=self._largest_block_norm(w),
                                      records=total)
        else:
            self.collapse_since, self.collapse_info = None, {}
            self.ever_varied = True

    def _largest_block_norm(self, w: np.ndarray) -> float:
        """The largest norm of W's blocks (W's norm when it does not split into ``w_blocks``)."""
        flat = np.asarray(w, dtype=np.float64).ravel()
        if self.w_blocks > 1 and flat.size % self.w_blocks == 0:
            return float(np.linalg.norm(flat.reshape(self.w_blocks, -1), axis=1).max())
        return float(np.linalg.norm(flat))

    def _collapse_counts(self, theta: np.ndarray, per_silo: int) -> list[int] | None:
        """The whole sample's counts per class (Python integers: a few of them, where NumPy's
        reductions cost more than the sums), or None when every ``THIN``-th sampled row already
        shows that no class has ``COLLAPSE_SHARE`` of the sample (module docstring)."""
        total = self._sample_total
        if total and THIN > 1:
            sub = np.asarray(self._counts(theta, per_silo, THIN)).tolist()
            outside = sum(sub) - max(sub)
            if (total - outside) / total < COLLAPSE_SHARE:
                return None
        counts = np.asarray(self._counts(theta, per_silo)).tolist()
        self._sample_total = sum(counts)
        return counts

    def _counts(self, theta: np.ndarray, per_silo: int, thin: int = 1) -> np.ndarray:
        """Records of all silos' samples predicted as each class (every ``thin``-th sampled row
        with ``thin > 1``)."""
        if self.counts is not None:
            return self.counts(np.ascontiguousarray(theta, dtype=np.float64), per_silo, thin)
        assert self.silo_features is not None
        if self._sample is None:
            parts = [sampled_rows(X, per_silo) for X in self.silo_features]
            small = sum(p.shape[0] * p.shape[1] for p in parts) * 8 <= SAMPLE_CACHE_BYTES
            self._sample = np.concatenate(parts).astype(np.float64, copy=False) if small else False
        if self._sample is not False:
            return prediction_counts(self._sample[::thin], theta, self.n_classes)
        return sum(local_prediction_counts(X, theta, self.n_classes, per_silo, thin) for X in self.silo_features)

    def finish(self, w_radius: float | None) -> None:
        """Warn if the final model is a constant predictor (silo-local numbers)."""
        if self.collapse_since is None:
            return
        c = self.collapse_info
        at_radius = w_radius is not None and c["w_block_norm"] >= 0.999 * w_radius
        warnings.warn(
            f"training collapsed to a constant predictor from epoch {self.collapse_since} on: the model predicts "
            f"class index {c['cls']} for {100 * c['share']:.2f}% of {c['records']} of the silos' records (a silo-local "
            f"check; nothing of it was sent), ‖θ‖ = {c['theta_norm']:.4g}, ‖W‖ = {c['w_norm']:.4g}"
            + ((f" (at the radius w_radius = {w_radius:g})" if self.w_blocks == 1 else
                f" (a block of W at the radius w_radius = {w_radius:g}, which bounds each of its {self.w_blocks} "
                "blocks)") if at_radius else "")
            + (". It never predicted more than one class in this fit: it may be under-trained (more epochs or a "
               "larger lr_theta)" if not self.ever_varied else "")
            + f". {self._lam_text(self.collapse_lam if self.collapse_lam is not None else self.lam)} may be past "
            f"what the data allow, or the steps are too large ({self.lr_w_text}); try a smaller {self.lam_fix()} "
            "or lr_theta"
            + (" or w_step='normalised' (the paper's W step λ·lr_w oscillates once λ·lr_w·E[F] > 1)"
               if "'paper'" in self.lr_w_text else ""),
            ConvergenceWarning, stacklevel=4,
        )
