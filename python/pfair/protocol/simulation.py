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
  is not who holds (x, y); their parties, server and transports are in
  :mod:`pfair.protocol.topologies`.

Either way the run is put together by :func:`pfair.protocol.assembly.start_run` (the p_s round,
the noise plans, θ₀, the server, the run state, the monitor and the driver), the one place every
run is assembled: this module only builds the parties and the transport.

Training history of a private fit holds only released values (θ and W after each epoch, the
silos that answered, metrics on the user's ``eval_set``) unless ``exact_diagnostics=True``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from pfair.validation import split_federation
from pfair.federation import silo_fingerprints, silo_set_of
from pfair.privacy.calibration import warn_if_spent
from pfair.protocol.assembly import AssembledRun, check_ledgers_hold_run, check_same_run, monitor_for, start_run
from pfair.protocol.driver import RunState
from pfair.protocol.keys import SiloKeys
from pfair.protocol.plan import RunPlan, inv_sqrt_proportions
from pfair.protocol.setup import build_server, released_proportions, resolve_ledgers
from pfair.protocol.silo import SiloParty, silo_config
from pfair.protocol.topologies import HybridParties
from pfair.protocol.transports import PartyLoop, RustBatched
from pfair.providers.linear import CheckpointCounter, LinearProvider, linear_constant
from pfair.settings import SteFFLeSettings

__all__ = ["RunState", "Simulation", "SiloParties", "monitor_for", "resolve_ledgers"]


class SiloParties:
    """The silo side of the standard topology in process (a
    :class:`~pfair.protocol.assembly.SiloSide`): one :class:`SiloParty` per silo of ``whole`` (the
    federation before the held-out shares were taken out, whose data a resumed run must hold)."""

    def __init__(self, parties: Sequence[SiloParty], whole: Any, settings: SteFFLeSettings) -> None:
        self.parties, self.whole, self.settings = list(parties), whole, settings
        self.n_silos = len(self.parties)

    def preflight(self, total_rounds: int) -> None:
        for party in self.parties:
            warn_if_spent(party.silo_id, party.ledger)
        # Every silo decides whether it takes part before anything of the run is released: a silo
        # whose ledger has too little left refuses here (BudgetTooSmall), before its p_s histogram.
        for party in self.parties:
            party.preflight(total_rounds)

    def group_counts(self) -> list:
        return [p.release_group_counts() for p in self.parties]

    def plan_rounds(self, proportions: np.ndarray, total_rounds: int) -> dict:
        return {j: p.plan_rounds(proportions, total_rounds) for j, p in enumerate(self.parties)}

    def adopt(self, state: RunState) -> None:
        self._restore_batch_keys(state)
        check_same_run(state, self.settings, self.whole.silos)
        check_ledgers_hold_run([p.ledger for p in self.parties], state.plans, state.run_ids)
        for p, plan, run_id in zip(self.parties, state.plans, state.run_ids):
            p.adopt(plan, state.proportions, run_id)

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

    def run_ids(self) -> list:
        return [p.run_id for p in self.parties]

    def fingerprints(self) -> list:
        return silo_fingerprints(self.whole.silos)

    def next_rounds(self) -> list:
        return [p.ledger.next_round(p.run_id) for p in self.parties if p.charges]

    def batch_keys(self) -> list:
        return [p.keys.batch for p in self.parties]


class Simulation:
    """Runs SteFFLe in process (see the module docstring): builds the parties of the topology and
    its transport; :func:`~pfair.protocol.assembly.start_run` puts the run together.

    ``sensitive_silos``: the sensitive silo of each record (``mode="hybrid"`` only), in the order of
    the rows the federation was built from."""

    def __init__(self, settings: SteFFLeSettings, fed: Any, *, ledgers: Any = None, fast: bool = True,
                 provider_factory: Callable[..., Any] | None = None, sensitive_silos: Any = None) -> None:
        self.fed = fed
        self.fast = fast and provider_factory is None
        self.state: RunState | None = None
        self.plans: list = []
        self.server: Any = None
        #: Records each silo holds out (its validation table's total); None: the topology releases
        #: no checkpoint figures.
        self.held_out: list[int] | None = None
        #: Whether the silos can release checkpoint figures (their provider predicts).
        self.checkpoints = False
        #: Records held out by the silo of each noise plan (the privacy report's ``n_held_out``):
        #: ``held_out`` in the standard topology, each sensitive silo's in a hybrid one.
        self.held_out_of_plans: list[int] | None = None
        self.silo_set: Any = None
        self.parties: list[SiloParty] = []
        #: θ of the constant predictor from its class, share and the last θ (the linear model's, or the
        #: provider's ``constant_theta``; None: the model cannot be it): what a fit at a fixed λ > 0
        #: returns when its last model is shown no better (:class:`~pfair.validation.Selector`).
        self.constant: Callable[[int, float, np.ndarray], np.ndarray | None] | None = None
        if provider_factory is None:
            self.constant = functools.partial(linear_constant, fed.n_features, fed.n_classes)
        if settings.mode != "standard":
            if provider_factory is not None:
                raise ValueError(f"mode={settings.mode!r} runs the linear model only")
            self._hybrid_parties(settings, fed, sensitive_silos, ledgers)
        else:
            self._standard_parties(settings, fed, ledgers, provider_factory)

    # ------------------------------------------------------------------ the parties of a topology
    def _hybrid_parties(self, settings: SteFFLeSettings, fed: Any, sensitive_silos: Any, ledgers: Any) -> None:
        """The hybrid topologies (:mod:`pfair.protocol.topologies`): their silos hold everything."""
        hybrid = HybridParties(settings, fed, sensitive_silos, ledgers=ledgers)
        self.whole = fed
        self.plan, self.ledgers, self.silos, self.theta_len = hybrid.plan, hybrid.ledgers, hybrid, hybrid.theta_len
        # Each non-sensitive silo's validation table counts its held-out records; the sensitive
        # silos release the violation histograms of a target (pfair.protocol.topologies).
        self.held_out = hybrid.held_out
        self.checkpoints = self.held_out is not None
        self.held_out_of_plans = hybrid.held_out_of_sensitive()
        self._server = hybrid.build_server
        self._transport = lambda server, state: hybrid.transport(server, fast=self.fast)
        # Collapse checked by the silos that hold the features, locally (pfair.protocol.convergence).
        self._monitor = {"silo_features": list(fed.silos)}

    def _standard_parties(self, settings: SteFFLeSettings, fed: Any, ledgers: Any,
                          provider_factory: Callable[..., Any] | None) -> None:
        """Every silo holds whole records: one :class:`SiloParty` each, on all but its held-out share."""
        # Each silo's ledger and δ belong to all its records; it trains on all but its held-out share.
        self.whole = fed
        self.ledgers = resolve_ledgers(settings, fed, ledgers)
        fed, held = split_federation(fed, settings.validation_share, seed=settings.seed)
        self.fed = fed
        # With none held out the validation table counts a silo's training records.
        self.held_out = [len(h) if h is not None else (0 if settings.validation_share > 0 else len(s))
                         for h, s in zip(held, fed.silos)]
        self.held_out_of_plans = self.held_out
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
        if provider_factory is not None and self.parties:
            self.constant = getattr(self.parties[0].provider, "constant_theta", None)
        self.silos = SiloParties(self.parties, self.whole, st)
        self._server = lambda plans, proportions, theta_len: build_server(plan, plans, proportions,
                                                                          theta_len=theta_len)
        self._transport = self._standard_transport
        # Divergence from released θ; collapse from each silo's own records, checked and warned
        # about locally (linear model only), never sent nor kept in the history of a private fit.
        self._monitor = ({"silo_features": list(fed.silos), "counts": self.silo_set.predict_counts}
                         if self.silo_set is not None else {})

    def _standard_transport(self, server: Any, state: RunState) -> Any:
        """``fast``: an epoch of the linear model's rounds in one Rust call; else the party loop."""
        if self.fast:
            return RustBatched(self.plan, self.parties, server, self.silo_set, inv_sqrt_proportions(state.proportions),
                               counter=self.counter)
        return PartyLoop(self.plan, self.parties, server)

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

    # ------------------------------------------------------------------ the run
    def _pooled(self) -> np.ndarray:
        """The pooled exact proportions (``p_s="pooled"``: reproducing the paper only)."""
        return self.fed.group_proportions(self.settings.notion)

    def group_proportions(self) -> np.ndarray:
        """The p_s round alone, as :func:`~pfair.protocol.assembly.start_run` runs it: released
        ``p(s | block)``, given, from the silos' DP histograms, or pooled (exact)."""
        return released_proportions(self.plan, groups=self.fed.groups_, classes=self.fed.classes_,
                                    histograms=self.silos.group_counts, pooled=self._pooled,
                                    group_names=getattr(self.fed, "group_names", None),
                                    label_names=getattr(self.fed, "label_names", None))

    def start(self, *, resume: RunState | None = None, init: tuple[np.ndarray, np.ndarray] | None = None
              ) -> AssembledRun:
        """The run put together (:func:`~pfair.protocol.assembly.start_run`), its epochs not yet run."""

        def keep(state: RunState) -> None:  # an interrupted run can be resumed from its state
            self.state, self.plans = state, state.plans

        run = start_run(self.plan, self.silos, server=self._server, transport=self._transport,
                        theta_len=self.theta_len, proportions=self.group_proportions, init=init,
                        resume=resume, monitor=self._monitor,
                        held_out=self.held_out if self.checkpoints else None, on_state=keep,
                        constant=self.constant)
        self.server = run.server
        return run

    def run(self, *, resume: RunState | None = None, on_epoch: Callable[[int, np.ndarray, np.ndarray, dict], dict] | None = None,
            progress: bool = False, init: tuple[np.ndarray, np.ndarray] | None = None) -> RunState:
        """Train; returns the final :class:`RunState`. ``on_epoch(epoch, θ, W, info)`` returns the
        history row of an epoch (the estimator evaluates there). With ``resume`` (the state of an
        interrupted run on the same silos and ledgers) the run goes on where the ledgers say it
        stopped, charging no round twice. ``init = (θ, W)`` starts a new run from a previous model
        (a warm start: a new run, charged on top of what the ledgers hold)."""
        return self.start(resume=resume, init=init).go(on_epoch=on_epoch, progress=progress)
