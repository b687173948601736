"""The one epoch loop of a SteFFLe run, over interchangeable transports.

A run's life (``docs/architecture.md`` draws it):

1. a :class:`~pfair.protocol.plan.RunPlan` fixes every derived quantity (rounds per epoch, T, weights,
   the random iterate, the budget split);
2. set-up (:mod:`pfair.protocol.setup`): ledgers, the p_s round, each silo's noise plan, and the
   server with the reply limits those plans allow;
3. :class:`Driver` runs the epochs. Each epoch it asks the transport which silos answer (a transport
   that charges a whole epoch at once does it here), runs the epoch's rounds through the transport,
   checks the released θ, keeps the random iterate, writes the history row, and with a fairness
   target asks the silos for their violation releases and takes the server's dual step on λ.

A transport moves the messages of the rounds and nothing else:

* :class:`~pfair.protocol.transports.PartyLoop`: :meth:`SiloParty.step` → :meth:`ServerParty.update`
  round by round, in process (any gradient provider);
* :class:`~pfair.protocol.transports.RustBatched`: every silo's steps and the server update of an
  epoch in one Rust call (proven equal to the party loop, bit for bit);
* the hybrid topologies' party loop and Rust path (:mod:`pfair.protocol.hybrid`);
* Flower (:class:`pfair.flower.server_app.FlowerTransport`): the same rounds as messages to
  ClientApps.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from pfair.exceptions import PrivacyWarning
from pfair.fairness_target import n_releases, release_std
from pfair.protocol.plan import RunPlan


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


class Transport(Protocol):
    """How an epoch's messages travel (see the module docstring)."""

    def answering(self, epoch: int, refused: set) -> list[int]:
        """The silos that answer ``epoch``; a transport that charges an epoch at once charges it
        here and adds the silos that refused to ``refused`` (warned)."""

    def rounds(self, theta: np.ndarray, w: np.ndarray, epoch: int, *, lr: float, active: list[int],
               refused: set) -> EpochOutcome:
        """Run the epoch's rounds from (θ, W)."""

    def violations(self, theta: np.ndarray, epoch: int, active: list[int], refused: set) -> list:
        """``(silo, ViolationRelease)`` pairs of the silos that answered the release after ``epoch``."""


def refuse(refused: set, silo: int, what: str, exc: BaseException, stacklevel: int = 4) -> None:
    """Record that ``silo`` refused (its budget is spent) and warn: it is not asked again."""
    refused.add(silo)
    warnings.warn(f"silo {silo} refused {what} and stops answering: {exc}", PrivacyWarning, stacklevel=stacklevel)


class Driver:
    """Runs the epochs of one run (see the module docstring).

    ``server``: the :class:`~pfair.protocol.server.ServerParty` whose λ, step sizes and fairness
    controller the rounds use (None in the hybrid topologies, whose server has a fixed λ);
    ``monitor``: a :class:`~pfair.protocol.convergence.ConvergenceMonitor`; ``keep_exact``: keep the
    exact batch diagnostics in the history (exact diagnostics asked for, or nothing private)."""

    def __init__(self, plan: RunPlan, transport: Transport, *, server: Any, monitor: Any, keep_exact: bool,
                 plans: Sequence[Any] | dict = ()) -> None:
        self.plan, self.transport, self.server, self.monitor = plan, transport, server, monitor
        self.keep_exact = bool(keep_exact)
        self.noise_plans = dict(plans) if isinstance(plans, dict) else dict(enumerate(plans))
        self.refused: set[int] = set()
        self._warned_lam_max = False

    def run(self, state: RunState, *, start_epoch: int = 0, on_epoch: Callable[..., dict | None] | None = None,
            progress: bool = False) -> RunState:
        """Train from ``state`` (θ, W, history) for the epochs ``start_epoch ..``; updates and
        returns ``state``. ``on_epoch(epoch, θ, W, info)`` returns the history row of an epoch."""
        st, server = self.plan.settings, self.server
        theta, w = state.theta.copy(), state.w.copy()
        epochs: Any = range(start_epoch, st.epochs)
        if progress:
            from pfair._progress import progress_bar

            epochs = progress_bar(epochs, desc="SteFFLe", unit="epoch", total=st.epochs, initial=start_epoch)
        for epoch in epochs:
            active = self.transport.answering(epoch, self.refused)
            if not active:
                warnings.warn(f"every silo has refused; training stopped after {epoch} of {st.epochs} epochs",
                              PrivacyWarning, stacklevel=3)
                break
            lr = st.lr_at(epoch)
            before = theta
            out = self.transport.rounds(theta, w, epoch, lr=lr, active=active, refused=self.refused)
            theta, w = out.theta, out.w
            if out.snapshot is not None:
                state.snapshot = out.snapshot
            if not np.all(np.isfinite(theta)):
                raise FloatingPointError(
                    f"training diverged at epoch {epoch + 1}: standardise the features (mean 0, std 1: "
                    f"make_pipeline(StandardScaler(), SteFFLe(...))) if they are not, else lower lr_theta (now "
                    f"{lr:g}) or lam, or clip harder")
            self.monitor.after_epoch(epoch + 1, theta, w, lr)
            info = {"epoch": epoch + 1, "lr_theta": lr}
            if out.answered is not None:
                info["silos_answering"] = out.answered
            info.update({"theta_norm": float(np.linalg.norm(theta)), "w_norm": float(np.linalg.norm(w)),
                         "update_norm": float(np.linalg.norm(theta - before))})
            if self.keep_exact:
                info.update(out.exact)
            if server is not None and server.controller is not None:
                info.update(self.target_step(theta, epoch, active))
                state.lam = server.lam
            state.epochs_done, state.theta, state.w = epoch + 1, theta, w
            row = on_epoch(epoch, theta, w, info) if on_epoch is not None else info
            if row is not None:
                state.history.append(row)
                if progress and hasattr(epochs, "set_postfix"):
                    epochs.set_postfix({k: f"{v:.4g}" for k, v in row.items()
                                        if k in ("train_loss", "test_error", "update_norm")})
        self.monitor.finish(st.w_radius)
        return state

    def target_step(self, theta: np.ndarray, epoch: int, active: list[int]) -> dict:
        """End of ``epoch`` with ``max_violation``: the answering silos' violation releases
        (:meth:`SiloParty.release_violation`, through the transport) and one dual step on λ
        (:meth:`ServerParty.adapt_lam`). No release after the last epoch (its λ would steer
        nothing). Returns the history entries ``lam`` (λ of this epoch) and
        ``violation_released`` (the pooled v̂ the server computed, NaN if none)."""
        st, server = self.plan.settings, self.server
        row = {"lam": server.lam, "violation_released": math.nan}
        if epoch >= n_releases(st.epochs):
            return row
        releases = self.transport.violations(theta, epoch, active, self.refused)
        limits = {j: (p.n_records, release_std(st, p.delta)) for j, p in self.noise_plans.items()}
        v = server.adapt_lam(releases, epoch, n_classes=self.plan.n_classes, limits=limits)
        if v is not None:
            row["violation_released"] = v
            if server.lam >= server.controller.lam_max and not self._warned_lam_max:
                self._warned_lam_max = True
                warnings.warn(f"max_violation={st.max_violation:g}: λ reached its cap {server.controller.lam_max:g} "
                              f"after epoch {epoch + 1} with the released violation still {v:.3g}; the target may be "
                              "out of reach of the ψ penalty with these settings", UserWarning, stacklevel=4)
        return row
