"""The one epoch loop of a SteFFLe run, over interchangeable transports.

A run's life (``docs/architecture.md`` draws it):

1. a :class:`~pfair.protocol.plan.RunPlan` fixes every derived quantity (rounds per epoch, T, weights,
   the random iterate, the budget split);
2. set-up, put together by :func:`pfair.protocol.assembly.start_run` from the pieces of
   :mod:`pfair.protocol.setup`: ledgers, the p_s round, each silo's noise plan, θ₀, and the server
   with the reply limits those plans allow;
3. :class:`Driver` runs the epochs. Each epoch it asks the transport which silos answer (a transport
   that charges a whole epoch at once does it here), runs the epoch's rounds through the transport,
   checks the released θ, keeps the random iterate, and after each checkpoint epoch asks the silos
   for their checkpoint releases (:mod:`pfair.validation`: the validation table of their held-out
   records, and with a fairness target the violation histogram), from which the server reads the
   figures of the model, takes its dual step on λ, and the :class:`~pfair.validation.Selector`
   keeps the candidates; then it writes the history row;
4. at the end, the model the fit returns is chosen from the released figures alone: the last one,
   unless it is not clearly better than the constant predictor or a fairness target asks for
   another (warned); at a fixed λ > 0 a last model shown no better than the constant predictor is
   replaced by the constant predictor itself where the model can be one (the linear model; a deep
   module with a last linear layer).

A transport moves the messages of the rounds and nothing else:

* :class:`~pfair.protocol.transports.PartyLoop`: :meth:`SiloParty.step` → :meth:`ServerParty.update`
  round by round, in process (any gradient provider);
* :class:`~pfair.protocol.transports.RustBatched`: every silo's steps and the server update of an
  epoch in one Rust call (proven equal to the party loop, bit for bit);
* the hybrid topologies' party loop and Rust path (:mod:`pfair.protocol.topologies`);
* Flower (:class:`pfair.flower.server_app.FlowerTransport`): the same rounds as messages to
  ClientApps.
"""

from __future__ import annotations

import bisect
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from pfair._progress import progress_bar
from pfair.exceptions import PrivacyWarning
from pfair.fairness_target import VIOLATION_SENSITIVITY
from pfair.protocol.plan import RunPlan
from pfair.validation import VALIDATION_SENSITIVITY, Selector, warn_selection


@dataclass
class RunState:
    """Where a run stands after each epoch; what a driver needs to resume it."""

    run_ids: list
    plans: list
    proportions: np.ndarray
    epochs_done: int
    theta: np.ndarray
    w: np.ndarray
    snapshot: Any = None
    history: list = field(default_factory=list)
    fingerprints: list = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    #: λ of the next epoch when it is adapted to ``max_violation`` (None: the fixed ``lam``).
    lam: float | None = None
    #: The released figures of every checkpoint so far (:class:`~pfair.validation.CheckpointFigures`).
    checkpoints: list = field(default_factory=list)
    #: The checkpoint epoch (0-based) of the model the run returns, when it was chosen from the
    #: checkpoints (None: the last model, or the random iterate; −1: the constant predictor).
    selected: int | None = None
    #: Why the returned model is not simply the last one (None when it is and nothing is wrong).
    selection_warning: str | None = None
    #: Factor on η_θ left by :func:`damp_cycles` (1: no cycle seen), and the sign of the last
    #: significant change of the released validation error (0: none yet).
    lr_scale: float = 1.0
    trend: int = 0
    #: After each epoch, the next round each charging silo's ledger would charge (in the order of
    #: ``SiloSide.next_rounds``): a resume refuses a ledger that has charged fewer, an older copy of
    #: the one the interrupted run charged (empty: not recorded, e.g. a deployment's remote silos).
    ledger_rounds: list = field(default_factory=list)
    #: The :class:`~pfair.validation.Selector` of the run (the models it keeps), so that a resumed
    #: run chooses among the checkpoints before the interruption too (None: not started).
    selector: Any = None
    #: Each silo's batch key (``_core.NoiseKey``), so that a resumed run draws the rest of an
    #: epoch from the same permutation. Not a field (not in ``asdict``, ``repr`` or ``==``), and
    #: secret keys never leave the process: a pickled or deep-copied state holds None here.
    batch_keys = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["batch_keys"] = None
        return state


@dataclass
class EpochOutcome:
    """What a transport returns for an epoch's rounds."""

    theta: np.ndarray
    w: np.ndarray
    #: How many silos' replies the server used (None: the transport does not say).
    answered: int | None = None
    #: Exact batch diagnostics (read every record's s: kept only when asked for or not private).
    exact: dict = field(default_factory=dict)
    #: (θ, W) after the round ``plan.pick`` if it fell in this epoch.
    snapshot: tuple | None = None
    #: ``exact`` computed on demand (None: ``exact`` holds them): a transport whose diagnostics
    #: cost a reduction leaves them uncomputed unless the history keeps them (:meth:`diagnostics`).
    exact_of: Callable[[], dict] | None = None

    def diagnostics(self) -> dict:
        """The exact batch diagnostics (:attr:`exact`, computed by :attr:`exact_of` when given)."""
        return self.exact if self.exact_of is None else self.exact_of()


class Transport(Protocol):
    """How an epoch's messages travel (see the module docstring)."""

    def answering(self, epoch: int, refused: set) -> list[int]:
        """The silos that answer ``epoch``; a transport that charges an epoch at once charges it
        here and adds the silos that refused to ``refused`` (warned)."""

    def rounds(self, theta: np.ndarray, w: np.ndarray, epoch: int, *, lr: float, active: list[int],
               refused: set) -> EpochOutcome:
        """Run the epoch's rounds from (θ, W)."""

    def checkpoint(self, theta: np.ndarray, epoch: int, active: list[int], refused: set) -> list:
        """``(silo, CheckpointRelease)`` pairs of the silos that answered the release after ``epoch``."""


def refuse(refused: set, silo: int, what: str, exc: BaseException, stacklevel: int = 4) -> None:
    """Record that ``silo`` refused (its budget is spent) and warn: it is not asked again."""
    refused.add(silo)
    warnings.warn(f"silo {silo} refused {what} and stops answering: {exc}", PrivacyWarning, stacklevel=stacklevel)


class Driver:
    """Runs the epochs of one run (see the module docstring).

    ``server``: the server party whose λ, step sizes (``lr_of_epoch``) and fairness controller
    (None: a fixed λ) the rounds use: :class:`~pfair.protocol.server.ServerParty`, or the hybrid
    topologies' :class:`~pfair.protocol.topologies.HybridServer`;
    ``monitor``: a :class:`~pfair.protocol.convergence.ConvergenceMonitor`; ``keep_exact``: keep the
    exact batch diagnostics in the history (exact diagnostics asked for, or nothing private);
    ``held_out``: the held-out records of each silo (its validation table's total; in a hybrid
    topology each non-sensitive silo's; None: the checkpoints are not asked for)."""

    def __init__(self, plan: RunPlan, transport: Transport, *, server: Any, monitor: Any, keep_exact: bool,
                 plans: Sequence[Any] | dict = (), held_out: Sequence[int] | dict | None = None,
                 constant: Callable[[int, float, np.ndarray], np.ndarray | None] | None = None) -> None:
        self.plan, self.transport, self.server, self.monitor = plan, transport, server, monitor
        self.keep_exact = bool(keep_exact)
        self.noise_plans = dict(plans) if isinstance(plans, dict) else dict(enumerate(plans))
        self.held_out = (None if held_out is None else dict(held_out) if isinstance(held_out, dict)
                         else dict(enumerate(held_out)))
        self.refused: set[int] = set()
        self._warned_lam_max = False
        st = plan.settings
        self.checkpoints = set(st.checkpoint_epochs()) if self.held_out is not None else set()
        self._sorted_checkpoints = sorted(self.checkpoints)
        #: Each silo's checkpoint limits for the server's checks (made at the first checkpoint).
        self._limits: dict | None = None
        #: θ of the constant predictor from its class, its share and the last θ (None, or a call that
        #: returns None: the model cannot be the constant predictor).
        self.constant = constant
        self.selector = Selector(target=st.max_violation, lam=0.0 if st.max_violation is not None else float(st.lam),
                                 constant=constant is not None and st.output == "last")

    def run(self, state: RunState, *, start_epoch: int = 0, on_epoch: Callable[..., dict | None] | None = None,
            progress: bool = False) -> RunState:
        """Train from ``state`` (θ, W, history) for the epochs ``start_epoch ..``; updates and
        returns ``state``. ``on_epoch(epoch, θ, W, info)`` returns the history row of an epoch."""
        st, server = self.plan.settings, self.server
        if state.selector is None:
            state.selector = self.selector
        self.selector = state.selector  # a resumed run's models kept before the interruption
        theta, w = state.theta.copy(), state.w.copy()
        epochs: Any = range(start_epoch, st.epochs)
        if progress:
            epochs = progress_bar(epochs, desc="SteFFLe", unit="epoch", total=st.epochs, initial=start_epoch)
        for epoch in epochs:
            active = self.transport.answering(epoch, self.refused)
            if not active:
                warnings.warn(f"every silo has refused; training stopped after {epoch} of {st.epochs} epochs",
                              PrivacyWarning, stacklevel=3)
                break
            server.lr_scale = state.lr_scale
            lr = server.lr_of_epoch(epoch)
            before = theta
            out = self.transport.rounds(theta, w, epoch, lr=lr, active=active, refused=self.refused)
            theta, w = out.theta, out.w
            if out.snapshot is not None:
                state.snapshot = out.snapshot
            theta_norm = vector_norm(theta)
            if not (math.isfinite(theta_norm) or np.all(np.isfinite(theta))):
                raise FloatingPointError(
                    f"training diverged at epoch {epoch + 1}: standardise the features (mean 0, std 1: "
                    f"make_pipeline(StandardScaler(), SteFFLe(...))) if they are not, else lower lr_theta (now "
                    f"{lr:g}) or {self.monitor.lam_fix()}, or clip harder")
            self.monitor.after_epoch(epoch + 1, theta, w, lr, norm=theta_norm, lam=float(server.lam))
            info = {"epoch": epoch + 1, "lr_theta": lr}
            if out.answered is not None:
                info["silos_answering"] = out.answered
            info.update({"theta_norm": theta_norm, "w_norm": vector_norm(w),
                         "update_norm": vector_norm(theta - before)})
            if self.keep_exact:
                info.update(out.diagnostics())
            if server.controller is not None:
                info["lam"] = float(server.lam)  # λ of this epoch (a checkpoint may change it)
            if epoch in self.checkpoints:
                info.update(self.checkpoint_step(state, theta, w, epoch, active))
                if server.controller is not None:
                    state.lam = server.lam
            state.epochs_done, state.theta, state.w = epoch + 1, theta, w
            row = on_epoch(epoch, theta, w, info) if on_epoch is not None else info
            if row is not None:
                state.history.append(row)
                if progress and hasattr(epochs, "set_postfix"):
                    epochs.set_postfix({k: f"{v:.4g}" for k, v in row.items()
                                        if k in ("train_loss", "test_error", "update_norm")})
        self.monitor.finish(st.w_radius)
        if state.epochs_done == st.epochs:
            self.choose(state)
        return state

    def choose(self, state: RunState) -> None:
        """The model the run returns, from the released checkpoint figures
        (:meth:`pfair.validation.Selector.choose`): kept in ``state.snapshot`` when it is not the
        last one, and warned about when the last one is not clearly better than the constant
        predictor or a fairness target asks for another. With ``output="random"`` the random
        iterate stays (only the warning)."""
        st = self.plan.settings
        chosen, why = self.selector.choose()
        if chosen is None:
            return
        fig, theta, w = chosen
        if theta is None:  # the constant predictor (Selector.constant), built from the released figures
            theta = self.constant(fig.constant_class, 1.0 - fig.constant_error, state.theta)
            if theta is None:  # this model cannot be it (a deep module without a last linear layer)
                self.selector.constant = False
                (fig, theta, w), why = self.selector.choose()
        if st.output == "last":
            last = self.selector.figures[-1]
            state.selected = fig.epoch
            if fig.epoch != last.epoch:
                state.snapshot = (theta, w)
        state.selection_warning = why
        if why is not None:
            warn_selection(why, st, stacklevel=5)

    def checkpoint_step(self, state: RunState, theta: np.ndarray, w: np.ndarray, epoch: int,
                        active: list[int]) -> dict:
        """After the checkpoint ``epoch``: the answering silos' checkpoint releases (through the
        transport), read by the server (:meth:`ServerParty.read_checkpoint`, which with a target
        also takes the dual step on λ), offered to the selector. Returns the history entries
        (``validation_error``, ``constant_error``, with a target ``violation_released``; NaN
        where no release was valid)."""
        st, server = self.plan.settings, self.server
        row = {"validation_error": math.nan, "constant_error": math.nan}
        if server.controller is not None:
            row["violation_released"] = math.nan
        releases = self.transport.checkpoint(theta, epoch, active, self.refused)
        if self._limits is None:  # the plans are fixed for the run: one set of limits
            # A server that knows its silos' limits itself (the hybrid topologies') keeps its own.
            own = getattr(server, "checkpoint_limits", None)
            self._limits = own if own is not None else {
                j: (self.held_out[j], checkpoint_std(self.plan, p.delta, "validation"),
                    p.n_records + self.held_out[j], checkpoint_std(self.plan, p.delta, "violation"))
                for j, p in self.noise_plans.items() if j in self.held_out}
        limits = self._limits
        before = bisect.bisect_left(self._sorted_checkpoints, epoch)
        since = epoch - (self._sorted_checkpoints[before - 1] if before else -1)
        fig = server.read_checkpoint(releases, epoch, n_classes=self.plan.n_classes, limits=limits, epochs_since=since)
        if fig is None:
            return row
        state.checkpoints.append(fig)
        self.selector.offer(fig, theta, w)
        row.update(fig.as_row())
        if st.theta_step == "scaled" and server.controller is None and len(state.checkpoints) >= 2:
            state.lr_scale, state.trend = damp_cycles(state.checkpoints[-2], fig, state.lr_scale, state.trend)
        if server.controller is not None and server.lam >= server.controller.lam_max and not self._warned_lam_max:
            self._warned_lam_max = True
            warnings.warn(f"max_violation={st.max_violation:g}: λ reached its cap {server.controller.lam_max:g} "
                          f"after epoch {epoch + 1} with the released violation still {fig.violation:.3g}; the target "
                          "may be out of reach of the ψ penalty with these settings", UserWarning, stacklevel=4)
        return row


def vector_norm(x: np.ndarray) -> float:
    """``‖x‖₂`` with the bits of ``np.linalg.norm(x)``: for a 1-D float64 array that is
    ``√(x · x)`` (what NumPy computes for one, here without its checks, which cost more than the
    dot product of a model's few hundred coordinates); any other array goes through NumPy. A sum
    of squares is finite when every entry is, unless it overflows: a caller testing finiteness
    falls back to ``np.isfinite`` when the norm is not finite."""
    if isinstance(x, np.ndarray) and x.ndim == 1 and (x.dtype is _FLOAT64 or x.dtype == _FLOAT64):
        return math.sqrt(float(x.dot(x)))
    return float(np.linalg.norm(x))


_FLOAT64 = np.dtype(np.float64)


#: The θ step is halved at a reversal of the released validation error whose two changes each
#: exceed this many standard deviations of a difference of two error rates (and :data:`CYCLE_MIN`).
CYCLE_SDS = 1.645
#: The smallest change of the validation error taken as a swing, whatever the held-out size.
CYCLE_MIN = 0.01


def damp_cycles(before: Any, after: Any, scale: float, trend: int) -> tuple[float, int]:
    """The θ-step factor and trend after a checkpoint: halve the factor when the released
    validation error reverses direction by a significant amount (a cycle of the min-max iterates).

    The change ``Δ = e_after − e_before`` counts when ``|Δ| > max(CYCLE_MIN, z·sd)`` with
    ``sd = √(e_b(1−e_b)/n_b + e_a(1−e_a)/n_a + noise)`` (two error rates of the held-out records;
    the unpaired bound, larger than the paired sd). A significant rise after a significant fall, or
    a fall after a rise, is a swing: θ overshoots the saddle point, so its step is halved. A steady
    rise (fairness taking hold) or fall (learning) changes nothing. Everything read is released
    (post-processing); θ's fixed points do not move (the whole step is scaled)."""
    delta = float(after.error - before.error)
    if abs(delta) <= max(CYCLE_MIN, CYCLE_SDS * math.sqrt(before.error_variance + after.error_variance)):
        return scale, trend
    sign = 1 if delta > 0 else -1
    if trend != 0 and sign != trend:
        scale *= 0.5
    return scale, sign


def checkpoint_std(plan: RunPlan, delta: float | None, kind: str) -> float:
    """Noise std of one cell of a silo's checkpoint release of ``kind`` (``"validation"``: the
    record-mode validation table, ``z_val · Δ``; ``"violation"``: a fairness target's violation
    histogram, ``z_v · √2``): 0 when it is exact or not made; a function of the plan's public
    settings and budget split and the silo's δ only."""
    st = plan.settings
    K = len(st.checkpoint_epochs())
    if not st.private or delta is None or K == 0:
        return 0.0
    if kind == "violation":
        if st.max_violation is None:
            return 0.0
        return plan.budget.violation_noise_multiplier(float(delta), K) * VIOLATION_SENSITIVITY
    if st.protect != "record":
        return 0.0
    return plan.budget.validation_noise_multiplier(float(delta), K) * VALIDATION_SENSITIVITY
