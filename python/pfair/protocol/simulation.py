"""The in-process run: the parties of a topology, set up once and driven by the one epoch loop.

:class:`Simulation` builds a :class:`~pfair.protocol.plan.RunPlan` and the parties from frozen
settings and a :class:`~pfair.Federation`:

* the standard topology (every silo holds whole records): N :class:`SiloParty` objects and one
  :class:`ServerParty`. :meth:`Simulation.run` runs the p_s round (public proportions, each silo's
  DP histogram, or the pooled exact ones), lets every silo calibrate its noise against its own
  ledger, builds the server with the reply limits those plans allow, and hands the epochs to the
  :class:`~pfair.protocol.driver.Driver` over a transport: ``fast=True`` (the linear model) runs an
  epoch of every silo's steps and the server update in one Rust call
  (:class:`~pfair.protocol.transports.RustBatched`), ``fast=False`` round by round through the
  parties (:class:`~pfair.protocol.transports.PartyLoop`), exactly as a deployment runs them; a test
  checks the two agree bit for bit;
* the hybrid topologies (``mode="divisions"``, ``"central_sensitive"``, ``"hybrid"``): who holds s
  is not who holds (x, y); the parties and their set-up are in :mod:`pfair.protocol.topologies`, driven
  by the same :class:`~pfair.protocol.driver.Driver`.

Training history of a private fit holds only released values (θ and W after each epoch, the
silos that answered, metrics on the user's ``eval_set``) unless ``exact_diagnostics=True``.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from pfair.validation import split_federation
from pfair.federation import silo_fingerprints, silo_set_of
from pfair.privacy.calibration import warn_if_over_budget, warn_if_spent
from pfair.protocol.convergence import ConvergenceMonitor
from pfair.protocol.driver import Driver, RunState
from pfair.protocol.keys import SiloKeys
from pfair.protocol.plan import RunPlan, inv_sqrt_proportions
from pfair.protocol.setup import build_server, initial_model, released_proportions, resolve_ledgers
from pfair.protocol.silo import SiloParty, silo_config
from pfair.protocol.transports import PartyLoop, RustBatched
from pfair.providers.linear import CheckpointCounter, LinearProvider
from pfair.settings import SteFFLeSettings

__all__ = ["RunState", "Simulation", "resolve_ledgers"]


def monitor_for(settings: SteFFLeSettings, n_classes: int, **kw: Any) -> ConvergenceMonitor:
    """The run's divergence and collapse monitor (:mod:`pfair.protocol.convergence`)."""
    st = settings
    return ConvergenceMonitor(n_classes=n_classes, lam=float(st.lam),
                              lr_w_text=f"lr_theta = {st.lr_theta:g}, lr_w = {st.lr_w:g}, w_step = {st.w_step!r}",
                              **kw)


class Simulation:
    """Runs SteFFLe in process (see the module docstring).

    ``sensitive_silos``: the sensitive silo of each record (``mode="hybrid"`` only), in the order of
    the rows the federation was built from."""

    def __init__(self, settings: SteFFLeSettings, fed: Any, *, ledgers: Any = None, fast: bool = True,
                 provider_factory: Callable[..., Any] | None = None, sensitive_silos: Any = None) -> None:
        self.fed = fed
        self.fast = fast and provider_factory is None
        self.state: RunState | None = None
        self.plans: list = []
        if settings.mode != "standard":
            from pfair.protocol.topologies import HybridParties

            if provider_factory is not None:
                raise ValueError(f"mode={settings.mode!r} runs the linear model only")
            self.hybrid = HybridParties(settings, fed, sensitive_silos, ledgers=ledgers)
            self.plan, self.ledgers, self.plans = self.hybrid.plan, self.hybrid.ledgers, self.hybrid.plans
            self.parties = []
            return
        self.hybrid = None
        # Each silo's ledger and δ belong to all its records; it trains on all but its held-out share.
        self.whole = fed
        self.ledgers = resolve_ledgers(settings, fed, ledgers)
        fed, held = split_federation(fed, settings.validation_share, seed=settings.seed)
        self.fed = fed
        #: Records each silo holds out (its validation table's total); with none held out the table
        #: counts its training records.
        self.held_out = [len(h) if h is not None else (0 if settings.validation_share > 0 else len(s))
                         for h, s in zip(held, fed.silos)]
        plan = RunPlan.build(settings, fed.sizes, n_groups=fed.n_groups, n_classes=fed.n_classes,
                             names=getattr(fed, "silo_names_", None))
        st, k, l = plan.settings, fed.n_groups, fed.n_classes
        self.plan = plan
        # The linear model's kernel holds the silos' data in Rust; another provider holds its own.
        # Silos that are rows of one matrix are read in place (no copy of the features).
        self.silo_set = (fed.silo_set(st.notion)
                         if provider_factory is None else None)
        #: Length of θ: (d+1)(l−1) for the linear model, the provider's parameter count otherwise.
        self.theta_len = plan.linear_theta_len(fed.n_features)
        self.parties = []
        #: The linear model's exact checkpoint counts, in Rust where the records are held (the
        #: held-out rows read in place in their dtype); None for another provider.
        self.counter = self._checkpoint_counter(held) if provider_factory is None else None
        for j, silo in enumerate(fed.silos):
            cfg = silo_config(st, len(silo), None)
            provider = (provider_factory(j, silo, cfg) if provider_factory is not None
                        else LinearProvider(self.silo_set, j, cfg))
            predict = validation = None
            if provider_factory is not None:
                if held[j] is None and st.validation_share > 0:  # a silo too small to hold any record out
                    none = np.zeros(0, dtype=np.int64)
                    validation = (lambda theta, none=none: none, none, none)
                elif held[j] is not None:
                    h = held[j]
                    predict_held = getattr(provider_factory(j, h, cfg), "predict", None)
                    validation = (predict_held, h.y, h.s) if predict_held is not None else None
            self.parties.append(SiloParty(silo_id=j, y=silo.y, s=silo.s, settings=st, provider=provider,
                                          ledger=self.ledgers[j], n_groups=k, n_classes=l, predict=predict,
                                          validation=validation, n_silo_records=len(self.whole.silos[j]),
                                          budget=plan.budget, n_features=fed.n_features,
                                          checkpoint_counts=None if self.counter is None else self.counter.for_silo(j)))
        if st.max_violation is not None and not all(p.predicts for p in self.parties):
            raise NotImplementedError("max_violation needs each silo's predictions, which this model's gradient "
                                      "provider does not offer (no predict(theta)); use pfair.SteFFLe, "
                                      "pfair.torch.DeepSteFFLe or a fixed lam")
        #: Whether the silos can release checkpoint figures (their provider predicts).
        self.checkpoints = all(p.predicts for p in self.parties)
        n_params = getattr(self.parties[0].provider, "n_params", None) if self.parties else None
        if n_params is not None:
            self.theta_len = int(n_params)

    def _checkpoint_counter(self, held: list) -> CheckpointCounter:
        """The linear model's :class:`~pfair.providers.linear.CheckpointCounter`: the training
        silos' ``SiloSet`` and one of the silos that hold records out (rows of the same matrix,
        read in place)."""
        st, fed = self.plan.settings, self.fed
        index, silos = [], []
        for h in held:
            index.append(len(silos) if h is not None else None)
            if h is not None:
                silos.append(h)
        held_set = (silo_set_of(silos, n_groups=fed.n_groups, n_classes=fed.n_classes, fairness=st.notion)
                    if silos else None)
        return CheckpointCounter(self.silo_set, held_set, index, share=st.validation_share, n_classes=fed.n_classes)

    # ------------------------------------------------------------------ the plan's numbers
    @property
    def settings(self) -> SteFFLeSettings:
        return self.plan.settings

    @property
    def rounds_per_epoch(self) -> int:
        return self.plan.rounds_per_epoch

    @property
    def total_rounds(self) -> int:
        return self.plan.total_rounds

    # ------------------------------------------------------------------ the p_s round
    def group_proportions(self) -> np.ndarray:
        """Released ``p(s | block)``: public, from the silos' DP histograms, or pooled (exact)."""
        st, fed = self.settings, self.fed
        return released_proportions(
            self.plan, groups=fed.groups_, classes=fed.classes_,
            histograms=lambda: [p.release_group_counts() for p in self.parties],
            pooled=lambda: fed.group_proportions(st.notion))

    def _restore_batch_keys(self, state: RunState) -> None:
        """A resumed run's parties draw their batches from the interrupted run's batch keys.

        Fresh keys would be harmless for batches drawn anew every round, but not for shuffled
        epochs under a secret key (record mode): a silo whose epoch is not the federation's (its
        own rounds per epoch differ) resumes in the middle of it, and the rest of the epoch must
        come from the same permutation, or a record is in two batches of an epoch the ledger
        charges as one release."""
        if state.batch_keys is not None:
            for party, key in zip(self.parties, state.batch_keys):
                party.keys = SiloKeys(batch=key, noise=party.keys.noise)
        elif self.settings.sampling == "shuffle" and any(p.keys.batch.is_secret for p in self.parties):
            raise ValueError("resume: the interrupted run's secret batch keys are gone (its state was pickled or "
                             "copied, and secret keys never leave their process), and its shuffled epochs cannot go "
                             "on under other keys; start a new fit")

    def _start(self, init: tuple | None) -> RunState:
        """A new run: the p_s round, every silo's noise plan, θ₀ and W₀."""
        for party in self.parties:
            warn_if_spent(party.silo_id, party.ledger)
        # Every silo decides whether it takes part before anything of the run is released: a silo
        # whose ledger has too little left refuses here (BudgetTooSmall), before its p_s histogram.
        for party in self.parties:
            party.preflight(self.total_rounds)
        proportions = self.group_proportions()
        plans = [p.plan_rounds(proportions, self.total_rounds) for p in self.parties]
        theta, w = initial_model(self.plan, self.theta_len, init)
        state = RunState([p.run_id for p in self.parties], plans, proportions, 0, theta, w,
                         fingerprints=silo_fingerprints(self.whole.silos), settings=self.settings.as_dict())
        state.batch_keys = [p.keys.batch for p in self.parties]
        return state

    def _resume(self, state: RunState) -> RunState:
        """An interrupted run on the same silos, settings and ledgers: its plans adopted again."""
        fed = self.whole
        self._restore_batch_keys(state)
        silo_fingerprints(fed.silos)
        if len(state.fingerprints) != len(fed.silos) or not all(
                silo.holds_data_of(fp) for silo, fp in zip(fed.silos, state.fingerprints)):
            raise ValueError("resume: the federation's data differ from the interrupted run's")
        if state.settings != self.settings.as_dict():
            raise ValueError("resume: the settings differ from the interrupted run's; resume with the same ones")
        for p, plan, run_id in zip(self.parties, state.plans, state.run_ids):
            p.adopt(plan, state.proportions, run_id)
        return state

    # ------------------------------------------------------------------ the run
    def run(self, *, resume: RunState | None = None, on_epoch: Callable[[int, np.ndarray, np.ndarray, dict], dict] | None = None,
            progress: bool = False, init: tuple[np.ndarray, np.ndarray] | None = None) -> RunState:
        """Train; returns the final :class:`RunState`. ``on_epoch(epoch, θ, W, info)`` returns the
        history row of an epoch (the estimator evaluates there). With ``resume`` (the state of an
        interrupted run on the same silos and ledgers) the run goes on where the ledgers say it
        stopped, charging no round twice. ``init = (θ, W)`` starts a new run from a previous model
        (a warm start: a new run, charged on top of what the ledgers hold)."""
        if self.hybrid is not None:
            if resume is not None or init is not None:
                raise ValueError(f"resume and warm_start are available in mode='standard' only, not "
                                 f"mode={self.settings.mode!r}")
            self.state = self.hybrid.start()
            self.plans = self.hybrid.plans
            return self.hybrid.driver(fast=self.fast).run(self.state, on_epoch=on_epoch, progress=progress)
        st = self.settings
        state = self._start(init) if resume is None else self._resume(resume)
        warn_if_over_budget(state.plans)
        self.plans, self.state = state.plans, state
        server = build_server(self.plan, dict(enumerate(state.plans)), state.proportions, theta_len=state.theta.size)
        self.server = server
        if server.controller is not None and state.lam is not None:  # a resumed run keeps its λ
            server.lam = server.controller.lam = float(state.lam)
        # Where to go on: after the last epoch done, and past any round a ledger already charged
        # (rounds charged but lost in an interruption are never answered again).
        next_rounds = [p.ledger.next_round(p.run_id) for p in self.parties if p.charges]
        start_epoch = max([state.epochs_done] + [math.ceil(r / self.rounds_per_epoch) for r in next_rounds])
        transport = (RustBatched(self.plan, self.parties, server, self.silo_set, inv_sqrt_proportions(state.proportions),
                                 counter=self.counter)
                     if self.fast else PartyLoop(self.plan, self.parties, server))
        # Divergence from released θ; collapse from each silo's own records, checked and warned
        # about locally (linear model only), never sent nor kept in the history of a private fit.
        monitor = monitor_for(st, self.fed.n_classes,
                              silo_features=list(self.fed.silos) if self.silo_set is not None else None,
                              counts=self.silo_set.predict_counts if self.silo_set is not None else None)
        driver = Driver(self.plan, transport, server=server, monitor=monitor,
                        keep_exact=st.exact_diagnostics or not st.private, plans=state.plans,
                        held_out=self.held_out if self.checkpoints else None)
        driver.run(state, start_epoch=start_epoch, on_epoch=on_epoch, progress=progress)
        state.run_ids = [p.run_id for p in self.parties]
        return state
