"""In-process transports of the standard topology (every silo holds whole records).

* :class:`PartyLoop`: round by round, :meth:`SiloParty.step` of every answering silo, then
  :meth:`ServerParty.update` (which validates every reply), exactly as a deployment runs them; any
  gradient provider. Each silo charges its ledger round by round, inside its step.
* :class:`RustBatched`: the linear model's fast path. Every answering silo charges the epoch's
  rounds first (all ledgers in one Rust call), then every silo's steps and the server update of the
  epoch run in one Rust call (``SiloSet.run_rounds``, rayon), each silo with its own keys; a test
  checks it equals the party loop bit for bit.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from pfair.exceptions import PrivacyBudgetExceeded
from pfair.privacy import mechanisms
from pfair.protocol.driver import EpochOutcome, refuse
from pfair.protocol.plan import RunPlan


class PartyLoop:
    """Round-by-round messages between in-process :class:`SiloParty` objects and a :class:`ServerParty`."""

    def __init__(self, plan: RunPlan, parties: Sequence[Any], server: Any) -> None:
        self.plan, self.parties, self.server = plan, list(parties), server

    def answering(self, epoch: int, refused: set) -> list[int]:
        return [j for j in range(len(self.parties)) if j not in refused]

    def rounds(self, theta: np.ndarray, w: np.ndarray, epoch: int, *, lr: float, active: list[int],
               refused: set) -> EpochOutcome:
        start, R = self.plan.epoch_start(epoch), self.plan.rounds_per_epoch
        answered, snapshot = 0, None
        for r in range(start, start + R):
            replies = []
            for j in active:
                if j in refused:
                    continue
                try:
                    replies.append((j, self.parties[j].step(theta, w, r)))
                except PrivacyBudgetExceeded as exc:
                    refuse(refused, j, f"round {r}", exc, stacklevel=6)
            theta, w, used = self.server.update(theta, w, replies, r)
            answered = max(answered, len(used))
            if self.plan.pick == r:
                snapshot = (theta.copy(), w.copy())
        diag = [dg for p in self.parties for dg in p.diagnostics if start <= dg.round < start + R]
        exact = {"batch_loss": float(np.mean([dg.loss for dg in diag])) if diag else math.nan,
                 "batch_psi": float(np.mean([dg.psi for dg in diag])) if diag else math.nan,
                 "clipped": int(sum(dg.n_clipped for dg in diag))}
        return EpochOutcome(theta, w, answered, exact, snapshot)

    def checkpoint(self, theta: np.ndarray, epoch: int, active: list[int], refused: set) -> list:
        releases = []
        for j in active:
            if j in refused:
                continue
            try:
                releases.append((j, self.parties[j].release_checkpoint(theta, epoch)))
            except PrivacyBudgetExceeded as exc:
                refuse(refused, j, f"the checkpoint release of epoch {epoch + 1}", exc, stacklevel=6)
        return releases


class RustBatched(PartyLoop):
    """An epoch of the linear model's rounds in one Rust call (see the module docstring). A
    checkpoint's releases go through the parties in three steps: every answering silo charges its
    releases (:meth:`SiloParty.begin_checkpoint`), one Rust pass computes the exact counts of all
    the silos that charged (``counter``, a :class:`~pfair.providers.linear.CheckpointCounter`),
    and each silo noises its own (:meth:`SiloParty.finish_checkpoint`); without a counter as in
    :class:`PartyLoop`."""

    def __init__(self, plan: RunPlan, parties: Sequence[Any], server: Any, silo_set: Any,
                 inv_sqrt_ps: np.ndarray, counter: Any = None) -> None:
        super().__init__(plan, parties, server)
        self.silo_set, self.inv, self.counter = silo_set, inv_sqrt_ps, counter
        self.configs = [p.config for p in self.parties]
        #: ``(answering silos, their weights ω)`` of the last epoch.
        self._weights: tuple | None = None

    def checkpoint(self, theta: np.ndarray, epoch: int, active: list[int], refused: set) -> list:
        if self.counter is None:
            return super().checkpoint(theta, epoch, active, refused)
        parties, requests, need = self.parties, {}, []
        table = violation = False  # which counts some silo needs
        for j in active:
            if j in refused:
                continue
            try:
                req = requests[j] = parties[j].begin_checkpoint(theta, epoch)
            except PrivacyBudgetExceeded as exc:
                refuse(refused, j, f"the checkpoint release of epoch {epoch + 1}", exc, stacklevel=6)
                continue
            if req.needs_exact:
                need.append(j)
                table, violation = table or req.needs_table, violation or req.needs_counts
        exact = self.counter.counts(theta, need, table=table, violation=violation)
        none = (None, None)
        return [(j, parties[j].finish_checkpoint(req, *exact.get(j, none))) for j, req in requests.items()]

    def answering(self, epoch: int, refused: set) -> list[int]:
        """Every answering silo charges the epoch's rounds before they are computed."""
        active = super().answering(epoch, refused)
        charging = [(j, charge) for j in active if (charge := self.parties[j].round_charge()) is not None]
        results = mechanisms.charge_epoch([charge for _, charge in charging], self.plan.epoch_start(epoch),
                                          self.plan.rounds_per_epoch)
        for (j, _), exc in zip(charging, results):
            if exc is None:
                continue
            if not isinstance(exc, PrivacyBudgetExceeded):
                raise exc
            refuse(refused, j, f"epoch {epoch + 1}", exc, stacklevel=5)
        return [j for j in active if j not in refused]

    def rounds(self, theta: np.ndarray, w: np.ndarray, epoch: int, *, lr: float, active: list[int],
               refused: set) -> EpochOutcome:
        plan, st, server = self.plan, self.plan.settings, self.server
        key = tuple(active)
        if self._weights is None or self._weights[0] != key:  # the same silos answer epoch after epoch
            om = np.zeros(plan.n_silos)
            om[active] = plan.weights[active] / plan.weights[active].sum()
            self._weights = (key, om.tolist())
        out = self.silo_set.run_rounds(
            theta, w, self.inv, self.configs, self._weights[1],
            batch_keys=[p.keys.batch for p in self.parties], noise_keys=[p.keys.noise for p in self.parties],
            lam=float(server.lam), lr_theta=lr, lr_w=st.server_lr_w(server.lam), w_radius=float(st.w_radius or math.inf),
            start=plan.epoch_start(epoch), n_rounds=plan.rounds_per_epoch, snapshot_round=plan.pick,
        )
        loss, psi, clipped = out["loss"], out["psi"], out["clipped"]

        def exact() -> dict:  # three reductions, made only when the history keeps them
            return {"batch_loss": float(np.mean(loss)), "batch_psi": float(np.mean(psi)), "clipped": int(np.sum(clipped))}

        return EpochOutcome(out["theta"], out["w"], len(active), snapshot=out["snapshot"], exact_of=exact)
