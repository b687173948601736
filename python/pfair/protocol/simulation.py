"""The in-process simulation: N :class:`SiloParty` objects and one :class:`ServerParty`.

:class:`Simulation` builds the parties from frozen settings and a :class:`~pfair.Federation`,
runs the p_s round (public proportions, each silo's DP histogram, or the pooled exact ones), lets
every silo calibrate its noise against its own ledger, and loops over epochs. Each epoch every
silo charges its ledger for the epoch's rounds *before* they are computed; a silo that refuses
(budget spent) is dropped and the others are reweighted.

Two ways to run the rounds, with identical arithmetic:

* ``fast=True`` (linear model): all silos' steps and the server update of an epoch in one Rust
  call (``SiloSet.run_rounds``), each silo with its own keys; a test checks it equals the
  party-by-party loop bit for bit.
* ``fast=False``: :meth:`SiloParty.step` → :meth:`ServerParty.update` round by round, exactly as a
  deployment runs them (any gradient provider).

Training history of a private fit holds only released values (θ and W after each epoch, the
silos that answered, metrics on the user's ``eval_set``) unless ``exact_diagnostics=True``.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from pfair import _core
from pfair.fairness_target import linear_predictor
from pfair.federation import silo_fingerprints
from pfair.exceptions import LedgerMismatch, PrivacyBudgetExceeded, PrivacyWarning
from pfair.privacy.calibration import warn_if_over_budget, warn_if_spent
from pfair.privacy.ledger import PrivacyLedger, charge_rounds_together
from pfair.privacy.proportions import combine_histograms, public_proportions
from pfair.protocol.convergence import ConvergenceMonitor
from pfair.protocol.server import ServerParty, reply_limits
from pfair.protocol.silo import SiloKeys, SiloParty, silo_config
from pfair.providers.linear import LinearProvider
from pfair.settings import SteFFLeSettings


@dataclass
class RunState:
    """Where a run stands after each epoch; what :meth:`Simulation.run` needs to resume."""

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


def resolve_ledgers(settings: SteFFLeSettings, fed: Any, ledgers: Any) -> list:
    """Each silo's ledger for a fit: the ones passed (objects or JSON paths), fresh ones
    (``"new"``, for simulations), or by default the ledger the federation's silo already holds
    (created on its first private fit), so budgets persist across fits on one Federation."""
    n = fed.n_silos
    if not settings.private:
        if ledgers not in (None, "new"):
            raise ValueError("ledgers= applies to private fits only (epsilon is None)")
        return [None] * n
    deltas = [settings.delta_for(size) for size in fed.sizes]
    if isinstance(ledgers, str) and ledgers == "new":
        out = [PrivacyLedger(epsilon=settings.epsilon, delta=deltas[j], silo=j) for j in range(n)]
    elif ledgers is None:
        out = []
        for j, silo in enumerate(fed.silos):
            if silo.ledger is None:
                silo.ledger = PrivacyLedger(epsilon=settings.epsilon, delta=deltas[j], silo=j)
            out.append(silo.ledger)
    else:
        if isinstance(ledgers, (str, bytes)) or not isinstance(ledgers, Sequence) or len(ledgers) != n:
            raise ValueError(f"ledgers must be 'new', None or a list of {n} PrivacyLedger objects or JSON paths "
                             "(one per silo)")
        out = []
        for j, item in enumerate(ledgers):
            if isinstance(item, PrivacyLedger):
                out.append(item)
                continue
            if not isinstance(item, (str, os.PathLike)):
                raise TypeError(f"ledgers[{j}] must be a PrivacyLedger or a path, got {type(item).__name__}")
            if os.path.exists(item):
                out.append(PrivacyLedger.load(item))
            else:
                out.append(PrivacyLedger(epsilon=settings.epsilon, delta=deltas[j], silo=j, path=item))
    for j, (ledger, fingerprint) in enumerate(zip(out, silo_fingerprints(fed.silos))):
        ledger.bind(fingerprint, legacy=fed.silos[j].legacy_fingerprint)
        if settings.epsilon > ledger.epsilon * (1 + 1e-12):
            raise LedgerMismatch(
                f"silo {j}: epsilon={settings.epsilon:g} is more than its ledger's budget {ledger.epsilon:g}; a silo's "
                "budget is fixed when its ledger is made"
            )
    return out


class Simulation:
    """Runs SteFFLe in process (see the module docstring)."""

    def __init__(self, settings: SteFFLeSettings, fed: Any, *, ledgers: Any = None, fast: bool = True,
                 provider_factory: Callable[..., Any] | None = None) -> None:
        st = settings.for_sizes(fed.sizes)  # batch_size="auto" → an integer from the public silo sizes
        self.settings, self.fed = st, fed
        k, l, d = fed.n_groups, fed.n_classes, fed.n_features
        self.dims = (d, k, l)
        if st.fairness == "equal_opportunity" and not 0 <= st.positive_class < l:
            raise ValueError(f"positive_class={st.positive_class} is not a class index in 0..{l - 1}")
        if st.sampling != "full_batch":
            for j, n_j in enumerate(fed.sizes):
                if st.batch_size > n_j:
                    raise ValueError(f"batch_size={st.batch_size} is larger than silo {j}, which has {n_j} records; "
                                     "use a smaller batch_size or fewer silos")
        mean_size = float(np.mean(fed.sizes))
        self.rounds_per_epoch = 1 if st.sampling == "full_batch" else max(1, math.ceil(mean_size / st.batch_size))
        self.total_rounds = st.epochs * self.rounds_per_epoch
        self.blocks = l if st.fairness == "equalized_odds" else 1
        self.state: RunState | None = None
        self.plans: list = []
        self.ledgers = resolve_ledgers(st, fed, ledgers)
        # The linear model's kernel holds the silos' data in Rust; another provider holds its own.
        # Silos that are rows of one matrix are read in place (no copy of the features).
        self.silo_set = (fed.silo_set(fairness=st.fairness, positive=st.positive_class)
                         if provider_factory is None else None)
        self.fast = fast and provider_factory is None
        #: Length of θ: (d+1)(l−1) for the linear model, the provider's parameter count otherwise
        #: (a provider other than the linear one must then be given ``init``).
        self.theta_len = (d + 1) * (l - 1)
        self.parties = []
        for j, silo in enumerate(fed.silos):
            cfg = silo_config(st, len(silo), None)
            provider = (provider_factory(j, silo, cfg) if provider_factory is not None
                        else LinearProvider(self.silo_set, j, cfg))
            predict = linear_predictor(silo.X, l) if provider_factory is None and st.max_violation is not None else None
            self.parties.append(SiloParty(silo_id=j, y=silo.y, s=silo.s, settings=st, provider=provider,
                                          ledger=self.ledgers[j], n_groups=k, n_classes=l, predict=predict))
        if st.max_violation is not None and any(p.predict is None for p in self.parties):
            raise NotImplementedError("max_violation needs each silo's predictions, which this model's gradient "
                                      "provider does not offer (no predict(theta)); use pfair.SteFFLe, "
                                      "pfair.torch.DeepSteFFLe or a fixed lam")
        n_params = getattr(self.parties[0].provider, "n_params", None) if self.parties else None
        if n_params is not None:
            self.theta_len = int(n_params)

    # ------------------------------------------------------------------ the p_s round
    def group_proportions(self) -> np.ndarray:
        """Released ``p(s | block)``: public, from the silos' DP histograms, or pooled (exact)."""
        st, fed = self.settings, self.fed
        src = st.p_s_source
        if not st.sends_psi:
            # λ = 0: the ψ parts are never sent, so p_s is never used; nothing is released for it.
            return np.full((self.blocks, fed.n_groups), 1.0 / fed.n_groups)
        if src == "public":
            return public_proportions(st.p_s, fairness=st.fairness, groups=fed.groups_, classes=fed.classes_,
                                      positive=st.positive_class)
        if src == "dp":
            return combine_histograms([p.release_group_counts() for p in self.parties])
        return fed.group_proportions(st.fairness, st.positive_class)

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

    # ------------------------------------------------------------------ the run
    def run(self, *, resume: RunState | None = None, on_epoch: Callable[[int, np.ndarray, np.ndarray, dict], dict] | None = None,
            progress: bool = False, init: tuple[np.ndarray, np.ndarray] | None = None) -> RunState:
        """Train; returns the final :class:`RunState`. ``on_epoch(epoch, θ, W, info)`` returns the
        history row of an epoch (the estimator evaluates there). With ``resume`` (the state of an
        interrupted run on the same silos and ledgers) the run goes on where the ledgers say it
        stopped, charging no round twice. ``init = (θ, W)`` starts a new run from a previous model
        (a warm start: a new run, charged on top of what the ledgers hold)."""
        st, fed = self.settings, self.fed
        d, k, l = self.dims
        R = self.rounds_per_epoch
        if resume is None:
            for party in self.parties:
                warn_if_spent(party.silo_id, party.ledger)
            proportions = self.group_proportions()
            plans = [p.plan_rounds(proportions, self.total_rounds) for p in self.parties]
            theta = np.zeros(self.theta_len)
            w = np.zeros(self.blocks * k * l)
            if init is not None:
                t0, w0 = (np.asarray(v, dtype=np.float64).ravel() for v in init)
                if t0.shape != theta.shape or w0.shape != w.shape:
                    raise ValueError(f"warm_start: the previous model has θ of {t0.size} and W of {w0.size} entries; "
                                     f"this federation needs {theta.size} and {w.size} (same features, groups, "
                                     "classes and fairness notion)")
                theta, w = t0.copy(), w0.copy()
            state = RunState([p.run_id for p in self.parties], plans, proportions, 0, theta, w,
                             fingerprints=silo_fingerprints(fed.silos), settings=st.as_dict())
            state.batch_keys = [p.keys.batch for p in self.parties]
        else:
            state = resume
            self._restore_batch_keys(state)
            silo_fingerprints(fed.silos)
            if len(state.fingerprints) != len(fed.silos) or not all(
                    silo.holds_data_of(fp) for silo, fp in zip(fed.silos, state.fingerprints)):
                raise ValueError("resume: the federation's data differ from the interrupted run's")
            if state.settings != st.as_dict():
                raise ValueError("resume: the settings differ from the interrupted run's; resume with the same ones")
            proportions = state.proportions
            plans = [p.adopt(plan, proportions, run_id) for p, plan, run_id in
                     zip(self.parties, state.plans, state.run_ids)]
        warn_if_over_budget(plans)
        self.plans, self.state = plans, state
        inv = np.ascontiguousarray(proportions.ravel() ** -0.5)
        sizes = np.asarray(fed.sizes, dtype=np.float64)
        weights = np.full(fed.n_silos, 1.0 / fed.n_silos) if st.silo_weights == "uniform" else sizes / sizes.sum()
        limits = [reply_limits(theta_len=state.theta.size, w_len=self.blocks * k * l, settings=st, plan=plan,
                               inv_sqrt_ps=inv) for plan in plans]
        server = ServerParty(settings=st, weights=weights, limits=limits, block_len=k * l, rounds_per_epoch=R)
        self.server = server
        if server.controller is not None and state.lam is not None:  # a resumed run keeps its λ
            server.lam = server.controller.lam = float(state.lam)
        # The random iterate is chosen by the public seed: which round is returned reveals nothing.
        pick = int(np.random.default_rng(st.seed).integers(0, self.total_rounds)) if st.output == "random" else None

        # Where to go on: after the last epoch done, and past any round a ledger already charged
        # (rounds charged but lost in an interruption are never answered again).
        next_rounds = [p.ledger.next_round(p.run_id) for p in self.parties if p.charges]
        start_epoch = max([state.epochs_done] + [math.ceil(r / R) for r in next_rounds])
        theta, w = state.theta.copy(), state.w.copy()
        refused: set[int] = set()
        # Divergence from released θ; collapse from each silo's own records, checked and warned
        # about locally (linear model only), never sent nor kept in the history of a private fit.
        monitor = ConvergenceMonitor(
            n_classes=l, lam=float(st.lam), lr_w_text=f"lr_theta = {st.lr_theta:g}, lr_w = {st.lr_w:g}, w_step = {st.w_step!r}",
            silo_features=list(fed.silos) if self.silo_set is not None else None,
            counts=self.silo_set.predict_counts if self.silo_set is not None else None)
        # Exact batch diagnostics depend on every record's s: kept only when asked for, or when
        # nothing is private.
        keep_exact = st.exact_diagnostics or not st.private
        configs = [p.config for p in self.parties]
        batch_keys, noise_keys = [p.keys.batch for p in self.parties], [p.keys.noise for p in self.parties]
        epochs: Any = range(start_epoch, st.epochs)
        if progress:
            from pfair._progress import progress_bar

            epochs = progress_bar(epochs, desc="SteFFLe", unit="epoch", total=st.epochs, initial=start_epoch)
        for epoch in epochs:
            start = epoch * R
            active = [j for j in range(len(self.parties)) if j not in refused]
            if self.fast:
                # Every answering silo charges the epoch's rounds before they are computed, all
                # ledgers in one Rust call; the party loop below charges round by round instead.
                charging = [j for j in active if self.parties[j].charges]
                results = charge_rounds_together(
                    [(self.parties[j].ledger, self.parties[j].run_id) for j in charging], start, R)
                for j, exc in zip(charging, results):
                    if exc is None:
                        continue
                    if not isinstance(exc, PrivacyBudgetExceeded):
                        raise exc
                    refused.add(j)
                    warnings.warn(f"silo {j} refused epoch {epoch + 1} and stops answering: {exc}",
                                  PrivacyWarning, stacklevel=3)
                active = [j for j in active if j not in refused]
            if not active:
                warnings.warn(f"every silo has refused; training stopped after {epoch} of {st.epochs} epochs",
                              PrivacyWarning, stacklevel=3)
                break
            lr = st.lr_at(epoch)
            before = theta
            if self.fast:
                om = np.zeros(fed.n_silos)
                om[active] = weights[active] / weights[active].sum()
                out = self.silo_set.run_rounds(
                    theta, w, inv, configs, om.tolist(),
                    batch_keys=batch_keys, noise_keys=noise_keys,
                    lam=float(server.lam), lr_theta=lr, lr_w=st.server_lr_w(server.lam), w_radius=float(st.w_radius or math.inf),
                    start=start, n_rounds=R, snapshot_round=pick,
                )
                theta, w = out["theta"], out["w"]
                if out["snapshot"] is not None:
                    state.snapshot = out["snapshot"]
                exact = {"batch_loss": float(np.mean(out["loss"])), "batch_psi": float(np.mean(out["psi"])),
                         "clipped": int(np.sum(out["clipped"]))} if keep_exact else {}
                answered = len(active)
            else:
                answered = 0
                for r in range(start, start + R):
                    replies = []
                    for j in active:
                        if j in refused:
                            continue
                        try:
                            replies.append((j, self.parties[j].step(theta, w, r)))
                        except PrivacyBudgetExceeded as exc:
                            refused.add(j)
                            warnings.warn(f"silo {j} refused round {r} and stops answering: {exc}",
                                          PrivacyWarning, stacklevel=3)
                    theta, w, used = server.update(theta, w, replies, r)
                    answered = max(answered, len(used))
                    if pick == r:
                        state.snapshot = (theta.copy(), w.copy())
                diag = [dg for p in self.parties for dg in p.diagnostics if start <= dg.round < start + R]
                exact = {"batch_loss": float(np.mean([dg.loss for dg in diag])) if diag else math.nan,
                         "batch_psi": float(np.mean([dg.psi for dg in diag])) if diag else math.nan,
                         "clipped": int(sum(dg.n_clipped for dg in diag))}
            if not np.all(np.isfinite(theta)):
                raise FloatingPointError(
                    f"training diverged at epoch {epoch + 1}: lower lr_theta (now {lr:g}) or lam, or clip harder"
                )
            monitor.after_epoch(epoch + 1, theta, w, lr)
            info = {"epoch": epoch + 1, "lr_theta": lr, "silos_answering": answered,
                    "theta_norm": float(np.linalg.norm(theta)), "w_norm": float(np.linalg.norm(w)),
                    "update_norm": float(np.linalg.norm(theta - before))}
            if keep_exact:
                info.update(exact)
            if server.controller is not None:
                info.update(self.target_step(theta, epoch, active, refused))
                state.lam = server.lam
            state.epochs_done, state.theta, state.w = epoch + 1, theta, w
            row = on_epoch(epoch, theta, w, info) if on_epoch is not None else info
            if row is not None:
                state.history.append(row)
                if progress and hasattr(epochs, "set_postfix"):
                    epochs.set_postfix({k2: f"{v:.4g}" for k2, v in row.items()
                                        if k2 in ("train_loss", "test_error", "update_norm")})
        state.run_ids = [p.run_id for p in self.parties]
        monitor.finish(st.w_radius)
        return state

    def target_step(self, theta: np.ndarray, epoch: int, active: list, refused: set) -> dict:
        """End of ``epoch`` with ``max_violation``: the server asks the answering silos for their
        violation releases (:meth:`SiloParty.release_violation`) and takes one dual step on λ
        (:meth:`ServerParty.adapt_lam`). No release after the last epoch (its λ would steer
        nothing). Returns the history entries ``lam`` (λ of this epoch) and
        ``violation_released`` (the pooled v̂ the server computed, NaN if none)."""
        from pfair.fairness_target import n_releases, release_std

        server = self.server
        row = {"lam": server.lam, "violation_released": math.nan}
        if epoch >= n_releases(self.settings.epochs):
            return row
        releases = []
        for j in active:
            if j in refused:
                continue
            try:
                releases.append((j, self.parties[j].release_violation(theta, epoch)))
            except PrivacyBudgetExceeded as exc:
                refused.add(j)
                warnings.warn(f"silo {j} refused the violation release of epoch {epoch + 1} and stops answering: "
                              f"{exc}", PrivacyWarning, stacklevel=4)
        limits = {j: (p.n_records, release_std(self.settings, p.plan.delta)) for j, p in enumerate(self.parties)}
        v = server.adapt_lam(releases, epoch, n_classes=self.fed.n_classes, limits=limits)
        if v is not None:
            row["violation_released"] = v
            if server.lam >= server.controller.lam_max and not getattr(self, "_warned_lam_max", False):
                self._warned_lam_max = True
                warnings.warn(f"max_violation={self.settings.max_violation:g}: λ reached its cap "
                              f"{server.controller.lam_max:g} after epoch {epoch + 1} with the released violation "
                              f"still {v:.3g}; the target may be out of reach of the ψ penalty with these settings",
                              UserWarning, stacklevel=4)
        return row
