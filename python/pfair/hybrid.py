"""Hybrid centralization (Gupta et al. 2024, §4 and App. F): who holds s is not who holds (x, y).

``SteFFLe(mode=...)``:

* ``"standard"``: every silo holds whole records and noises its own ψ parts (Algorithm 1).
* ``"divisions"`` (mode a): each silo is split into a non-sensitive division, which samples the batch
  and sends the s-free parts, and a sensitive division, which alone sees s and sends the noised
  s-dependent parts. With one silo this is the paper's single-silo case.
* ``"central_sensitive"`` (mode b): N non-sensitive silos and ONE sensitive silo holding s for all
  records (universal record ids).
* ``"hybrid"`` (mode c): p non-sensitive silos (``silos=``) and s sensitive silos
  (``sensitive_silos=``, one id per record) over universal record ids.

In every hybrid mode sensitive silo c releases noised SUMS of the clipped s-dependent parts over
``I_c = (∪_j B_j) ∩ S_c``; the server divides by ``|∪_j B_j|``, so each silo's noise is scaled to
its intersected batch (``rust/src/hybrid.rs``). The sum of one record's part changes by at most
``Δ_θ = 2 C_θ`` and ``Δ_W = 2 (1/ρ₁ + 1/ρ₂)^{1/2}`` when its s changes (docs/privacy.md with m = 1).
A record of non-sensitive silo j enters the batch with probability ``q_j = m / n_j`` (sampling
without replacement), independently in every round. The batch itself is NOT secret: the
non-sensitive silos send exact sums over it, which reveal its members to anyone who knows the
non-sensitive data. So sensitive silo c is accounted with the public-batch bound
(``docs/accounting.md``): in a round its record is drawn with probability ``q_c = max_j q_j`` over
the silos j that hold its records, and then the round is a Gaussian mechanism. That is the only
amplification used (the paper's subsampling amplification would need a hidden batch).
``amplification=False`` gives up even that and charges every round as a full Gaussian
mechanism (q = 1). Only the sensitive silos hold s, so only they spend budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from pfair import _core

from pfair.settings import MODES  # noqa: F401  (re-exported: pfair.hybrid.MODES)


@dataclass(frozen=True)
class HybridLayout:
    """Universal records (pooled in silo order), their non-sensitive and sensitive holders."""

    members: list[np.ndarray]
    owner: np.ndarray
    n_sensitive: int


def layout_for(mode: str, sizes: list[int], sensitive_silos: np.ndarray | None) -> HybridLayout:
    """The holders of every pooled record for a hybrid ``mode``."""
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    members = [np.arange(bounds[j], bounds[j + 1], dtype=np.int64) for j in range(len(sizes))]
    n = int(bounds[-1])
    if mode == "divisions":
        owner = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
        return HybridLayout(members, owner, len(sizes))
    if mode == "central_sensitive":
        return HybridLayout(members, np.zeros(n, dtype=np.int64), 1)
    if sensitive_silos is None:
        raise ValueError("mode='hybrid' needs sensitive_silos= (the sensitive silo of each record) in fit")
    names, owner = np.unique(np.asarray(sensitive_silos), return_inverse=True)
    if owner.shape[0] != n:
        raise ValueError(f"sensitive_silos has {owner.shape[0]} entries but there are {n} records")
    return HybridLayout(members, owner.astype(np.int64), len(names))


def sensitive_sample_rates(layout: HybridLayout, batch_size: int, amplification: bool) -> np.ndarray:
    """``q_c = max_j m / n_j`` over the non-sensitive silos j holding records of sensitive silo c."""
    if not amplification:
        return np.ones(layout.n_sensitive)
    q = np.zeros(layout.n_sensitive)
    for members in layout.members:
        rate = batch_size / len(members)
        for c in np.unique(layout.owner[members]):
            q[c] = max(q[c], rate)
    return q


class HybridRunner:
    """Runs SteFFLe in a hybrid mode; holds the sensitive silos' noise plans, keys and ledgers.

    The non-sensitive silos' batches come from a secret batch key (or ``noise_seed``'s; the
    public ``seed`` in a non-private fit): their exact sums reveal a batch once drawn, but the
    sensitive silos' rounds are accounted as random batches, which a public seed would fix in
    advance. Each sensitive silo's noise comes from its
    own secret key (or ``noise_seed``).
    ``ledgers``: None (in ``"divisions"`` mode the federation silos' persistent ledgers, otherwise
    new ones), ``"new"``, or one :class:`~pfair.privacy.PrivacyLedger` or path per sensitive silo.
    """

    def __init__(self, settings: Any, fed: Any, sensitive_silos: Any, *, ledgers: Any = None) -> None:
        from pfair.privacy.accountant import noise_multiplier_for
        from pfair.privacy.calibration import SiloNoise, noise_multiplier_after
        from pfair.privacy.ledger import PrivacyLedger, data_fingerprint
        from pfair.privacy.proportions import public_proportions

        st = settings.for_sizes(fed.sizes)  # batch_size="auto" → an integer from the public silo sizes
        mode = st.mode
        if st.protect != "attribute":
            raise ValueError(f"mode={mode!r} protects the sensitive attribute only; use protect='attribute'")
        if st.sampling != "without_replacement":
            raise ValueError(f"mode={mode!r} samples fixed-size batches; use sampling='without_replacement'")
        if st.p_s_source == "dp" and st.fairness != "demographic_parity":
            raise ValueError(f"mode={mode!r} with fairness={st.fairness!r} needs p(s | y), but a sensitive silo does "
                             "not hold y: pass public proportions (p_s=[[...], ...]) or p_s='pooled' (the paper's "
                             "assumption, not covered by the guarantee)")
        if st.silo_weights != "uniform":
            raise ValueError(f"mode={mode!r} averages over the union of the silos' batches, so silo_weights "
                             "does not apply; leave silo_weights='uniform'")
        if st.calibration != "rdp":
            raise ValueError(f"mode={mode!r} calibrates with the numeric accountant only; use calibration='rdp' "
                             "(the paper's closed form exists for the standard mode)")
        for j, n_j in enumerate(fed.sizes):
            if st.batch_size > n_j:
                raise ValueError(f"batch_size={st.batch_size} is larger than silo {j}, which has {n_j} records; "
                                 "use a smaller batch_size or fewer silos")
        X, y, s = fed.pooled()
        ids = None
        if sensitive_silos is not None:
            ids = np.asarray(sensitive_silos)
            order = getattr(fed, "row_order_", None)
            if order is not None and ids.shape[0] == order.shape[0]:
                ids = ids[order]  # align with the pooled (silo-sorted) order of the records
        layout = layout_for(mode, fed.sizes, ids)
        k, l = fed.n_groups, fed.n_classes
        self.settings, self.fed = st, fed
        self.rounds_per_epoch = max(1, math.ceil(float(np.mean(fed.sizes)) / st.batch_size))
        self.total_rounds = st.epochs * self.rounds_per_epoch
        self.hset = _core.HybridSet(
            X, y, s, layout.members, layout.owner, n_sensitive=layout.n_sensitive, n_groups=k, n_classes=l,
            fairness=st.fairness, positive=st.positive_class,
        )
        sizes_c = np.bincount(layout.owner, minlength=layout.n_sensitive)
        deltas = [st.delta_for(max(int(sizes_c[c]), 2)) for c in range(layout.n_sensitive)]
        self.ledgers = self._ledgers(ledgers, layout, X, y, s, deltas, data_fingerprint, PrivacyLedger)
        self.keys = [(_core.NoiseKey.seeded(st.noise_seed) if st.noise_seed is not None else _core.NoiseKey.secret())
                     for _ in range(layout.n_sensitive)]
        self.batch_key = (_core.NoiseKey.seeded(st.seed) if not st.private
                          else _core.NoiseKey.seeded(st.noise_seed) if st.noise_seed is not None
                          else _core.NoiseKey.secret())
        from pfair.privacy.calibration import warn_if_spent

        for c, ledger in enumerate(self.ledgers):
            warn_if_spent(f"sensitive {c}", ledger)
        if st.p_s_source == "public":
            proportions = public_proportions(st.p_s, fairness=st.fairness, groups=fed.groups_, classes=fed.classes_,
                                             positive=st.positive_class)
        elif st.p_s_source == "dp":
            proportions = self._released_proportions(layout, s, k)
        else:
            proportions = fed.group_proportions(st.fairness, st.positive_class)
        self.proportions = proportions
        self.inv = np.ascontiguousarray(proportions.ravel() ** -0.5)
        self.clip = float(st.clip) if st.clip is not None else math.inf
        _, d_theta, d_w = _core.sensitivities(
            self.inv, n_groups=k, denom=1.0, fairness=st.fairness, positive=st.positive_class, clip_theta=self.clip,
        )
        rates = sensitive_sample_rates(layout, st.batch_size, st.amplification)
        self.plans = []
        for c in range(layout.n_sensitive):
            scheme = "public_batch" if rates[c] < 1 else "full_batch"
            q = float(rates[c])
            if not st.private:
                z, stds, eps = 0.0, [0.0, 0.0], math.inf
            elif not st.sends_psi:  # nothing that depends on s is sent
                z, stds, eps = math.inf, [0.0, 0.0], self.ledgers[c].epsilon_spent()
            else:
                ledger = self.ledgers[c]
                if ledger.epsilon_spent() >= st.epsilon:
                    from pfair.exceptions import PrivacyBudgetExceeded

                    raise PrivacyBudgetExceeded(f"sensitive silo {c}: its ledger has no budget left")
                if ledger.events:
                    z = noise_multiplier_after(ledger, epsilon=st.epsilon, sample_rate=q,
                                               steps=self.total_rounds, sampling=scheme)
                else:
                    z = noise_multiplier_for(epsilon=st.epsilon, delta=deltas[c], sample_rate=q,
                                             steps=self.total_rounds, sampling=scheme)
                stds = _core.noise_stds([d_theta, d_w], z)
                from pfair.privacy.ledger import MechanismEvent

                eps = ledger.epsilon_with([MechanismEvent(name="steffle_rounds", sampling=scheme, sample_rate=q,
                                                          noise_multiplier=z, steps=self.total_rounds)])
            self.plans.append(SiloNoise(
                silo=c, n_records=int(sizes_c[c]), sampling="without_replacement", sample_rate=q,
                steps=self.total_rounds, denominator=1.0, sensitivity_loss=0.0, sensitivity_theta=d_theta,
                sensitivity_w=d_w, noise_multiplier=z, sigma_loss=0.0, sigma_theta=stds[0], sigma_w=stds[1],
                target_epsilon=st.epsilon, delta=deltas[c], epsilon=eps, calibration="rdp", protect="attribute",
                sends_psi=st.sends_psi, accounting=scheme,
            ))
        self.layout = layout
        import uuid

        self.run_id = uuid.uuid4().hex
        for ledger, plan in zip(self.ledgers, self.plans):
            if ledger is not None and 0 < plan.noise_multiplier < math.inf:
                ledger.begin_run(self.run_id, sampling=plan.accounting, sample_rate=plan.sample_rate,
                                 noise_multiplier=plan.noise_multiplier, planned_steps=plan.steps)

    def _released_proportions(self, layout: HybridLayout, s: np.ndarray, k: int) -> np.ndarray:
        """``p_s="dp"``: each sensitive silo releases a DP histogram of its records' s (sensitivity
        √2, a share of its ε, charged to its ledger); the server combines the noisy counts."""
        from pfair.privacy.proportions import (HISTOGRAM_SENSITIVITY, combine_histograms, histogram_event,
                                               histogram_noise_multiplier)

        st, released = self.settings, []
        for c, (ledger, key) in enumerate(zip(self.ledgers, self.keys)):
            counts = np.bincount(s[layout.owner == c], minlength=k).reshape(1, k).astype(float)
            z_h = histogram_noise_multiplier(epsilon=st.epsilon, share=st.p_s_epsilon_share, delta=ledger.delta)
            ledger.charge(histogram_event(z_h))
            noise = _core.gaussian_stream(key, c, 0, k, purpose="histogram")
            released.append(counts + z_h * HISTOGRAM_SENSITIVITY * noise.reshape(1, k))
        return combine_histograms(released)

    def _ledgers(self, ledgers: Any, layout: HybridLayout, X: Any, y: Any, s: Any, deltas: list, fingerprint: Any,
                 ledger_cls: Any) -> list:
        st, n_s = self.settings, layout.n_sensitive
        if not st.private:
            return [None] * n_s
        if ledgers is None and st.mode == "divisions":
            from pfair.protocol.simulation import resolve_ledgers

            return resolve_ledgers(st, self.fed, None)
        if ledgers is None or (isinstance(ledgers, str) and ledgers == "new"):
            out = [ledger_cls(epsilon=st.epsilon, delta=deltas[c], silo=f"sensitive {c}") for c in range(n_s)]
        else:
            if isinstance(ledgers, str) or len(ledgers) != n_s:
                raise ValueError(f"ledgers must be 'new', None or a list of {n_s} ledgers (one per sensitive silo)")
            out = [item if isinstance(item, ledger_cls) else ledger_cls.load(item) for item in ledgers]
        for c, ledger in enumerate(out):
            rows = np.flatnonzero(layout.owner == c)
            ledger.bind(fingerprint(X[rows], y[rows], s[rows]))
        return out

    def parties(self) -> tuple[list, list, Any]:
        """The run as parties (:mod:`pfair.protocol.hybrid`): non-sensitive silos, sensitive silos
        and the server, with this runner's plans, keys and ledgers."""
        from pfair.protocol.hybrid import HybridServer, NonSensitiveParty, SensitiveParty

        st = self.settings
        ns = [NonSensitiveParty(j, self.hset, batch_size=st.batch_size, clip_theta=self.clip, batch_key=self.batch_key)
              for j in range(len(self.layout.members))]
        sens = [SensitiveParty(c, self.hset, plan=plan, key=key, ledger=ledger, run_id=self.run_id,
                               clip_theta=self.clip, dummy_noise=st.dummy_noise)
                for c, (plan, key, ledger) in enumerate(zip(self.plans, self.keys, self.ledgers))]
        k, l = self.fed.n_groups, self.fed.n_classes
        server = HybridServer(lam=st.lam, lr_w=st.server_lr_w(), w_radius=float(st.w_radius or math.inf), block_len=k * l)
        return ns, sens, server

    def run(self, *, on_epoch: Any = None, progress: bool = False, fast: bool = True) -> Any:
        """Train; returns a :class:`pfair.protocol.simulation.RunState`. ``fast=False`` runs the
        rounds party by party (:meth:`parties`); the result is the same bit for bit."""
        from pfair.protocol.convergence import ConvergenceMonitor
        from pfair.protocol.simulation import RunState

        st = self.settings
        d, k, l = self.fed.n_features, self.fed.n_groups, self.fed.n_classes
        blocks = l if st.fairness == "equalized_odds" else 1
        theta, w = np.zeros((d + 1) * (l - 1)), np.zeros(blocks * k * l)
        state = RunState([self.run_id], self.plans, self.proportions, 0, theta, w)
        R = self.rounds_per_epoch
        pick = int(np.random.default_rng(st.seed).integers(0, self.total_rounds)) if st.output == "random" else None
        epochs: Any = range(st.epochs)
        if progress:
            from pfair._progress import progress_bar

            epochs = progress_bar(epochs, desc="SteFFLe", unit="epoch")
        parties = None if fast else self.parties()
        # Divergence from released θ; collapse checked by the silos that hold the features, locally
        # (pfair.protocol.convergence), never sent nor kept in the history of a private fit.
        monitor = ConvergenceMonitor(
            n_classes=l, lam=float(st.lam), lr_w_text=f"lr_theta = {st.lr_theta:g}, lr_w = {st.lr_w:g}, w_step = {st.w_step!r}",
            silo_features=list(self.fed.silos))
        for epoch in epochs:
            start = epoch * R
            lr = st.lr_at(epoch)
            before = theta
            if parties is not None:
                ns, sens, server = parties
                for r in range(start, start + R):
                    replies = [party.step(theta, w, self.inv, r) for party in ns]
                    msgs = [sp.step(theta, w, self.inv, r, [handoff[sp.c] for _, handoff in replies]) for sp in sens]
                    theta, w = server.update(theta, w, [m for m, _ in replies], msgs, lr_theta=lr)
                    if pick == r:
                        state.snapshot = (theta.copy(), w.copy())
                if not np.all(np.isfinite(theta)):
                    raise FloatingPointError(f"training diverged at epoch {epoch + 1}: lower lr_theta (now {lr:g}) or lam")
                monitor.after_epoch(epoch + 1, theta, w, lr)
                info = {"epoch": epoch + 1, "lr_theta": lr, "theta_norm": float(np.linalg.norm(theta)),
                        "w_norm": float(np.linalg.norm(w)), "update_norm": float(np.linalg.norm(theta - before))}
                row = on_epoch(epoch, theta, w, info) if on_epoch is not None else info
                if row is not None:
                    state.history.append(row)
                state.epochs_done, state.theta, state.w = epoch + 1, theta, w
                continue
            for ledger, plan in zip(self.ledgers, self.plans):
                if ledger is not None and 0 < plan.noise_multiplier < math.inf:
                    ledger.charge_rounds(self.run_id, start, R)

            def rounds(count: int) -> dict[str, Any]:
                return self.hset.run_rounds(
                    theta, w, self.inv, batch_size=st.batch_size, clip_theta=self.clip,
                    sigma_theta=[p.sigma_theta for p in self.plans], sigma_w=[p.sigma_w for p in self.plans],
                    dummy_noise=st.dummy_noise, noise_keys=self.keys, lam=float(st.lam), lr_theta=lr,
                    lr_w=st.server_lr_w(), w_radius=float(st.w_radius or math.inf), batch_key=self.batch_key, start=start,
                    n_rounds=count,
                )

            out = rounds(R)
            if pick is not None and start <= pick < start + R:
                # Replay up to the snapshot round (the keyed streams make this exact).
                part = rounds(pick - start + 1)
                state.snapshot = (part["theta"], part["w"])
            theta, w = out["theta"], out["w"]
            if not np.all(np.isfinite(theta)):
                raise FloatingPointError(f"training diverged at epoch {epoch + 1}: lower lr_theta (now {lr:g}) or lam")
            monitor.after_epoch(epoch + 1, theta, w, lr)
            info = {"epoch": epoch + 1, "lr_theta": lr, "theta_norm": float(np.linalg.norm(theta)),
                    "w_norm": float(np.linalg.norm(w)), "update_norm": float(np.linalg.norm(theta - before))}
            if st.exact_diagnostics or not st.private:
                info.update({"batch_loss": float(np.mean(out["loss"])), "batch_psi": float(np.mean(out["psi"]))})
            row = on_epoch(epoch, theta, w, info) if on_epoch is not None else info
            if row is not None:
                state.history.append(row)
            state.epochs_done, state.theta, state.w = epoch + 1, theta, w
        monitor.finish(st.w_radius)
        return state
