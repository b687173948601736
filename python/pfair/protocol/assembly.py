"""Putting a run together: the one place where a run is assembled from its parties.

Every run — in process (:class:`~pfair.protocol.simulation.Simulation`, standard or hybrid
topology) or deployed (the Flower ServerApp) — builds only its silo side and its transport, and
hands them to :func:`start_run`, which does the rest in this order:

1. **preflight**: each silo warns about budget spent by earlier fits and refuses the run before
   anything of it is released when what its ledger has left cannot pay for it;
2. **the p_s round** (the caller's ``proportions()``, through
   :func:`~pfair.protocol.setup.released_proportions`): given proportions, the silos' DP
   histograms (each charged to its silo's ledger) or the pooled exact ones;
3. **noise plans**: each silo calibrates its noise against what its own ledger has left and
   registers the run there (:meth:`SiloSide.plan_rounds`);
4. **θ₀, W₀** (:func:`~pfair.protocol.setup.initial_model`: zeros, a model's own initial
   parameters, or a warm start's previous model) and the :class:`~pfair.protocol.driver.RunState`;
   a resumed run instead adopts the interrupted run's state (:meth:`SiloSide.adopt`);
5. **the server**, with the reply limits the noise plans allow, and the λ a resumed run had reached;
6. **the convergence monitor** (:func:`monitor_for`), **the transport** and the
   :class:`~pfair.protocol.driver.Driver`, which starts after the last epoch done and past every
   round a ledger has already charged (a round charged but lost in an interruption is never
   answered again).

:meth:`AssembledRun.go` then runs the epochs. Nothing here draws noise or charges a budget itself:
every release and charge is made by a silo, through :mod:`pfair.privacy.mechanisms`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

from pfair.federation import silo_fingerprints
from pfair.privacy.calibration import warn_if_over_budget
from pfair.protocol.convergence import ConvergenceMonitor
from pfair.protocol.driver import Driver, RunState, Transport
from pfair.protocol.plan import RunPlan
from pfair.protocol.setup import initial_model
from pfair.settings import SteFFLeSettings


class SiloSide(Protocol):
    """The silos of a run as the assembler sees them (in process, hybrid, or over Flower)."""

    #: How many silos plan noise and hold a ledger (a hybrid topology's sensitive silos).
    n_silos: int

    def preflight(self, total_rounds: int) -> None:
        """Warn about earlier spending; refuse (raise) before anything of the run is released."""

    def group_counts(self) -> list:
        """The p_s round's DP histograms (``p_s="dp"``), each charged to its silo's ledger first."""

    def plan_rounds(self, proportions: np.ndarray, total_rounds: int) -> dict:
        """Each answering silo's noise plan (``{silo: NoisePlan}``), its run registered in its ledger."""

    def adopt(self, state: RunState) -> None:
        """Go on with an interrupted run: check it is this one (data, settings), adopt its plans."""

    def run_ids(self) -> list:
        """The ids the silos' ledgers know the run by."""

    def fingerprints(self) -> list:
        """What binds a resumed run to its data (empty: nothing to check)."""

    def next_rounds(self) -> list:
        """For each silo whose rounds are charged, the next round its ledger would charge."""

    def batch_keys(self) -> list | None:
        """Each silo's batch key, kept in the run state for a resume (None: nothing to keep)."""


class EveryoneRefused(Exception):
    """Every silo of a deployment refused the run during its set-up: nothing will be trained."""


@dataclass
class RemoteSilos:
    """The silo side of a deployment (a :class:`SiloSide`): the silos answer in their own
    processes, each planning against its own ledger; the server relays. ``plans(proportions,
    total_rounds)`` asks them for their noise plans (``{silo: NoisePlan}`` of those that accepted);
    ``refused()`` says how many have refused so far (the set-up stops with :class:`EveryoneRefused`
    once all ``n_silos`` have). A deployment keeps no run state to resume from, so nothing is
    adopted, fingerprinted or kept here."""

    n_silos: int
    plans: Callable[[np.ndarray, int], dict]
    refused: Callable[[], int]
    run_id: str

    def _check(self) -> None:
        if self.refused() >= self.n_silos:
            raise EveryoneRefused(f"all {self.n_silos} silos refused the run")

    def preflight(self, total_rounds: int) -> None:
        self._check()

    def group_counts(self) -> list:
        raise ValueError("a deployment's DP histograms come with the silos' hello (pass proportions=)")

    def plan_rounds(self, proportions: np.ndarray, total_rounds: int) -> dict:
        out = self.plans(proportions, int(total_rounds))
        self._check()
        return out

    def adopt(self, state: RunState) -> None:
        raise ValueError("a deployment does not resume from a run state")

    def run_ids(self) -> list:
        return [self.run_id]

    def fingerprints(self) -> list:
        return []

    def next_rounds(self) -> list:
        return []

    def batch_keys(self) -> None:
        return None


def monitor_for(settings: SteFFLeSettings, n_classes: int, **kw: Any) -> ConvergenceMonitor:
    """The run's divergence and collapse monitor (:mod:`pfair.protocol.convergence`)."""
    st = settings
    return ConvergenceMonitor(n_classes=n_classes, lam=float(st.lam), target=st.max_violation,
                              w_blocks=st.notion.n_blocks(n_classes),
                              lr_w_text=f"lr_theta = {st.lr_theta:g}, lr_w = {st.lr_w:g}, w_step = {st.w_step!r}",
                              **kw)


def check_same_run(state: RunState, settings: SteFFLeSettings, silos: Sequence[Any]) -> None:
    """Refuse to resume ``state`` on other data (each of ``silos`` must hold the data of its
    fingerprint) or under other settings."""
    silo_fingerprints(silos)  # the fingerprints not known yet, computed in parallel
    if len(state.fingerprints) != len(silos) or not all(
            silo.holds_data_of(fp) for silo, fp in zip(silos, state.fingerprints)):
        raise ValueError("resume: the federation's data differ from the interrupted run's")
    if state.settings != settings.as_dict():
        raise ValueError("resume: the settings differ from the interrupted run's; resume with the same ones")


def check_ledgers_hold_run(ledgers: Sequence[Any], plans: Sequence[Any], run_ids: Sequence[str]) -> None:
    """Refuse to resume a run on ledgers that did not record it: each silo whose rounds are
    charged must resume on the ledger that charged the interrupted run's rounds, or those rounds
    would be forgotten and the resumed run would be charged for its own rounds only."""
    for j, (ledger, plan, run_id) in enumerate(zip(ledgers, plans, run_ids)):
        charged = ledger is not None and plan is not None and 0 < plan.noise_multiplier < math.inf
        if charged and run_id not in ledger.runs:
            raise ValueError(f"resume: the ledger of silo {ledger.silo!r} holds no record of the interrupted run, whose "
                             "rounds were charged to another ledger; resume on the same ledgers (the interrupted "
                             "fit's, or their paths)")


def check_ledgers_not_older(state: RunState, now: Sequence[int]) -> None:
    """Refuse to resume ``state`` on a ledger that has charged fewer rounds of the run than it had
    at the end of the interrupted run's last epoch (``state.ledger_rounds``): an older copy of the
    ledger (a restored backup, a copy of ``ledgers_`` taken earlier) would accept the run, forget
    the rounds charged since, and the resumed run would go on from the later epoch, so that those
    rounds were released but not on the ledger that reports ε. ``now``: the silos' next rounds
    after adopting the run (:meth:`SiloSide.next_rounds`, the same order)."""
    recorded = list(getattr(state, "ledger_rounds", None) or [])
    now = list(now)
    if not recorded or len(recorded) != len(now):
        return
    behind = [(n, r) for n, r in zip(now, recorded) if n < r]
    if behind:
        n, r = behind[0]
        raise ValueError(f"resume: {len(behind)} ledger(s) older than the interrupted run: one has charged {n} of the "
                         f"run's rounds where the run had charged {r} by the end of its last epoch. Resume on the "
                         "ledgers the interrupted fit left (their files as they are now), not on a copy made before")


@dataclass
class AssembledRun:
    """A run put together by :func:`start_run`, ready for its epochs."""

    plan: RunPlan
    silos: SiloSide
    state: RunState
    server: Any
    transport: Transport
    driver: Driver
    #: The first epoch to run (0 for a new run).
    start_epoch: int

    def go(self, *, on_epoch: Callable[..., dict | None] | None = None, progress: bool = False) -> RunState:
        """Run the epochs (:meth:`Driver.run`); returns the final state."""
        def after_epoch(epoch: int, theta: np.ndarray, w: np.ndarray, info: dict) -> dict | None:
            # What each ledger has charged by the end of this epoch, for check_ledgers_not_older.
            self.state.ledger_rounds = list(self.silos.next_rounds())
            return on_epoch(epoch, theta, w, info) if on_epoch is not None else info

        self.driver.run(self.state, start_epoch=self.start_epoch, on_epoch=after_epoch, progress=progress)
        self.state.run_ids = self.silos.run_ids()
        return self.state


def start_run(plan: RunPlan, silos: SiloSide, *,
              server: Callable[[Mapping[int, Any], np.ndarray, int], Any],
              transport: Callable[[Any, RunState], Transport],
              theta_len: int, proportions: Callable[[], np.ndarray],
              theta0: np.ndarray | Callable[[], np.ndarray] | None = None,
              init: tuple | None = None, resume: RunState | None = None,
              monitor: Mapping[str, Any] | None = None, held_out: Sequence[int] | Mapping[int, int] | None = None,
              keep_exact: bool | None = None,
              on_state: Callable[[RunState], None] | None = None,
              constant: Callable[[int, float, np.ndarray], np.ndarray | None] | None = None) -> AssembledRun:
    """Assemble a run (see the module docstring).

    ``server(noise_plans, proportions, theta_len)`` builds the server party from the answering
    silos' noise plans; ``transport(server, state)`` the transport. ``theta_len``: θ's length
    (ignored when ``theta0`` gives θ₀: a deep model's initial parameters, or a function returning
    them, called after the noise plans); ``init = (θ, W)``: a warm start; ``resume``: the state of
    an interrupted run of these silos. ``proportions()`` runs the p_s round (not called on a
    resume): the simulation's :meth:`~pfair.protocol.simulation.Simulation.group_proportions`, or
    a deployment's server reading the DP histograms the silos sent with their hello, both through
    :func:`~pfair.protocol.setup.released_proportions`. ``monitor``: keyword arguments of
    :func:`monitor_for` (what the collapse check may read, locally); ``held_out``: each silo's
    held-out records (None: no checkpoint releases); ``keep_exact``: keep the exact batch
    diagnostics in the history (default: asked for, or nothing private). ``on_state`` sees the
    run state as soon as it exists (an interrupted run can then be resumed from it). ``constant(c, p, θ)``:
    θ of the constant predictor of class c with share p made from the last model θ, or None where
    the model cannot be one (the linear model: :func:`~pfair.providers.linear.constant_theta`; a deep
    one: :meth:`~pfair.providers.torch.TorchProvider.constant_theta`), which the driver returns at a
    fixed λ > 0 when the last model is shown no better than it (None: never)."""
    st = plan.settings
    if resume is None:
        silos.preflight(plan.total_rounds)
        released = proportions()
        noise_plans = silos.plan_rounds(released, plan.total_rounds)
        if theta0 is not None and callable(theta0):
            theta0 = theta0()
        theta, w = initial_model(plan, theta_len, init, theta0=theta0)
        state = RunState(silos.run_ids(), [noise_plans.get(j) for j in range(silos.n_silos)], released, 0, theta,
                         w, fingerprints=silos.fingerprints(), settings=st.as_dict())
        state.batch_keys = silos.batch_keys()
    else:
        state = resume
        silos.adopt(state)
        check_ledgers_not_older(state, silos.next_rounds())
    if on_state is not None:
        on_state(state)
    answering = {j: p for j, p in enumerate(state.plans) if p is not None}
    warn_if_over_budget(list(answering.values()))
    party = server(answering, state.proportions, int(state.theta.size))
    if getattr(party, "controller", None) is not None and state.lam is not None:  # a resumed run keeps its λ
        party.lam = party.controller.lam = float(state.lam)
    start_epoch = max([state.epochs_done] + [math.ceil(r / plan.rounds_per_epoch) for r in silos.next_rounds()])
    moves = transport(party, state)
    watch = monitor_for(st, plan.n_classes, **dict(monitor or {}))
    driver = Driver(plan, moves, server=party, monitor=watch,
                    keep_exact=(st.exact_diagnostics or not st.private) if keep_exact is None else keep_exact,
                    plans=answering, held_out=held_out, constant=constant)
    return AssembledRun(plan, silos, state, party, moves, driver, start_epoch)
