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

In every hybrid topology sensitive silo c releases noised SUMS of the clipped s-dependent parts over
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

The round, party by party
-------------------------
The features and labels of a record live in a *non-sensitive* silo and its s in a *sensitive*
silo:

1. :meth:`NonSensitiveParty.step` draws its batch (:func:`pfair.protocol.keys.hybrid_batch_key`) and
   sends the server its s-free parts (means over its batch); it hands each sensitive silo the ids of
   that silo's records in its batch (inside the organisation that runs both, as in the paper's
   setting).
2. :meth:`SensitiveParty.step` charges its ledger, sums the clipped s-dependent parts over its
   records in the round's batches, adds noise from its own secret key (scaled to the sensitivity
   of a sum, ``2 C_θ`` and ``2 (1/ρ₁ + 1/ρ₂)^{1/2}``) and sends the noised sums — or nothing when
   none of its records was drawn, unless ``dummy_noise``.
3. :meth:`HybridServer.update` checks every reply as :class:`~pfair.protocol.server.ServerParty`
   does (who sent it, the round, lengths, dtype, finite values, norms within what clipping and noise
   allow), drops what fails, averages the s-free parts over the non-sensitive silos, divides the
   sensitive sums by the union's size ``|∪ B_j|`` and takes the SteFFLe step.

Checkpoints (docs/privacy.md, "Checkpoints of the hybrid topologies")
----------------------------------------------------------------------
Each non-sensitive silo holds out ``validation_share`` of its records by the standard rule
(:func:`pfair.validation.holdout`); the rounds sample the rest. After a checkpoint epoch
:meth:`NonSensitiveParty.release_table` releases the exact validation table of its held-out records
(x and y only: exact and free, as a standard silo's in attribute mode) and, under a fairness target,
:meth:`SensitiveParty.begin_violation` / :meth:`~SensitiveParty.finish_violation` charge, then noise
with the silo's own key, the violation histogram of all its records (sensitivity √2; its K releases
charged in advance when its rounds are calibrated). :meth:`HybridServer.read_checkpoint` pools them
and takes the dual step on λ; the one Driver selects the model and warns. Sensitive silos refuse a
run their ledger cannot pay for usefully (:class:`~pfair.exceptions.BudgetTooSmall`), with the
union of the batches as the divisor of their sums.

:class:`HybridParties` is the topology's silo side (layout, ledgers, keys; the p_s histograms and
noise plans of its sensitive silos; a resumed run's adoption), the same interface
(:class:`~pfair.protocol.assembly.SiloSide`) as the standard topology's silos, so the run is put
together by the one assembler (:func:`pfair.protocol.assembly.start_run`) and a hybrid fit resumes
and warm-starts as a standard one does. :class:`HybridPartyLoop` and :class:`HybridBatched` are its
two transports for the one epoch loop (:class:`~pfair.protocol.driver.Driver`). The Rust path
(``HybridSet.run_rounds``) is the same arithmetic; a test checks the two agree bit for bit.
"""

from __future__ import annotations

import logging
import math
import uuid
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from pfair import _core
from pfair._validation import check_default_delta
from pfair.exceptions import PrivacyBudgetExceeded
from pfair.fairness_target import VIOLATION_EVENT, VIOLATION_SENSITIVITY, LambdaController
from pfair.federation import silo_fingerprints
from pfair.privacy import mechanisms
from pfair.privacy.calibration import NoiseRequest, check_noise_to_signal, plan_silo_noise, warn_if_spent
from pfair.privacy.fingerprint import data_fingerprint
from pfair.privacy.ledger import PrivacyLedger
from pfair.privacy.proportions import HISTOGRAM_PREFIX, HISTOGRAM_SENSITIVITY, histogram_event
from pfair.protocol.assembly import check_ledgers_hold_run, check_same_run
from pfair.protocol.driver import EpochOutcome, RunState
from pfair.protocol.keys import (HYBRID_GROUP_COUNTS, group_counts_release, hybrid_batch_key, noise_key, release_run,
                                 violation_release)
from pfair.protocol.messages import CheckpointRelease
from pfair.protocol.plan import RunPlan, inv_sqrt_proportions
from pfair.protocol.server import TAIL, check_counts, check_header, check_part
from pfair.protocol.setup import begin_run, ledgers_for, resolve_ledgers
from pfair.protocol.silo import checkpoint_event
from pfair.validation import holdout, pooled_figures

log = logging.getLogger("pfair.server")


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


def check_hybrid_settings(st: Any) -> None:
    """Refuse settings a hybrid topology cannot run (each message names the fix)."""
    mode = st.mode
    if st.protect != "attribute":
        raise ValueError(f"mode={mode!r} protects the sensitive attribute only; use protect='attribute'")
    if st.sampling != "without_replacement":
        raise ValueError(f"mode={mode!r} samples fixed-size batches; use sampling='without_replacement'")
    if st.p_s_source == "dp" and st.notion.needs_labels:
        raise ValueError(f"mode={mode!r} with fairness={st.fairness!r} needs p(s | y), but a sensitive silo does "
                         "not hold y: pass public proportions (p_s=[[...], ...]) or p_s='pooled' (the paper's "
                         "assumption, not covered by the guarantee)")
    if st.silo_weights != "uniform":
        raise ValueError(f"mode={mode!r} averages over the union of the silos' batches, so silo_weights "
                         "does not apply; leave silo_weights='uniform'")
    if st.calibration != "rdp":
        raise ValueError(f"mode={mode!r} calibrates with the numeric accountant only; use calibration='rdp' "
                         "(the paper's closed form exists for the standard mode)")


@dataclass(frozen=True)
class NonSensitiveMessage:
    """A non-sensitive silo's reply: s-free parts (means over its batch of ``batch_size`` records)."""

    silo: int
    round: int
    batch_size: int
    loss_grad: np.ndarray
    psi_theta_sfree: np.ndarray
    psi_w_sfree: np.ndarray


@dataclass(frozen=True)
class SensitiveMessage:
    """A sensitive silo's reply: the noised sums ``u = Σ clip(b_i) + N(0, σ_θ²)``, ``v = Σ c_i + N(0, σ_W²)``."""

    silo: int
    round: int
    psi_theta: np.ndarray
    psi_w: np.ndarray


class NonSensitiveParty:
    """Non-sensitive silo ``j`` of a ``_core.HybridSet`` (its x and y; no s)."""

    def __init__(self, j: int, hset: Any, *, batch_size: int, clip_theta: float, batch_key: Any) -> None:
        self.j, self.hset = int(j), hset
        self.batch_size, self.clip_theta, self.batch_key = int(batch_size), float(clip_theta), batch_key

    def step(self, theta: np.ndarray, w: np.ndarray, inv_sqrt_ps: np.ndarray, round: int
             ) -> tuple[NonSensitiveMessage, list[np.ndarray]]:
        """The message for the server, and the ids handed to each sensitive silo."""
        out = self.hset.non_sensitive_step(self.j, theta, w, inv_sqrt_ps, batch_size=self.batch_size,
                                           clip_theta=self.clip_theta, batch_key=self.batch_key, round=int(round))
        msg = NonSensitiveMessage(self.j, int(round), int(len(out["batch"])), out["loss_grad"],
                                  out["psi_theta_sfree"], out["psi_w_sfree"])
        return msg, list(out["by_owner"])

    def release_table(self, epoch: int, table: np.ndarray) -> CheckpointRelease:
        """Its checkpoint release after ``epoch``: the validation table ``V[y, ŷ]`` of its held-out
        records (``table``, exact: it reads x and y only, which the hybrid topologies do not
        protect, as a standard silo's in attribute mode), no violation histogram (it holds no s)."""
        return CheckpointRelease(self.j, int(epoch), np.asarray(table, dtype=np.float64), None)


class SensitiveParty:
    """Sensitive silo ``c``: its records' s, its secret noise key, its ledger and noise plan."""

    def __init__(self, c: int, hset: Any, *, plan: Any, key: Any, ledger: Any, run_id: str, clip_theta: float,
                 dummy_noise: bool, violation_z: float | None = None, checkpoints: Sequence[int] = ()) -> None:
        self.c, self.hset, self.plan, self.key, self.ledger, self.run_id = int(c), hset, plan, key, ledger, run_id
        self.clip_theta, self.dummy_noise = float(clip_theta), bool(dummy_noise)
        #: z_v of its violation histograms (None: exact, in a non-private fit, or none released).
        self.violation_z = violation_z
        self.checkpoints = frozenset(int(e) for e in checkpoints)

    @property
    def charges(self) -> bool:
        return self.ledger is not None and 0 < self.plan.noise_multiplier < math.inf

    def charge(self, first_round: int, count: int = 1) -> None:
        """Charge rounds ``first_round ..`` to the ledger before they are computed (refuses past
        the budget or a round asked twice)."""
        if self.charges:
            mechanisms.charge_rounds(self.ledger, self.run_id, int(first_round), int(count))

    def step(self, theta: np.ndarray, w: np.ndarray, inv_sqrt_ps: np.ndarray, round: int,
             groups: Sequence[np.ndarray]) -> SensitiveMessage | None:
        """Charge the round, then the noised sums over ``groups`` (its records in each
        non-sensitive silo's batch); None when it holds none of them and sends no dummy noise."""
        self.charge(round)
        u, v, count = self.hset.sensitive_step(
            self.c, theta, w, inv_sqrt_ps, [np.asarray(g, dtype=np.int64) for g in groups], clip_theta=self.clip_theta,
            sigma_theta=self.plan.sigma_theta, sigma_w=self.plan.sigma_w, noise_key=self.key, round=int(round),
        )
        if count == 0 and not self.dummy_noise:
            return None
        return SensitiveMessage(self.c, int(round), u, v)

    def begin_violation(self, epoch: int) -> np.ndarray | None:
        """The first half of its checkpoint release after ``epoch`` under a fairness target: check
        that ``epoch`` is a checkpoint of the run and charge the violation histogram to its ledger
        (one full-batch Gaussian event at :attr:`violation_z`) before anything is computed. Returns
        the release kept in its ledger from an earlier ask of the same epoch of the run (no cost),
        else None (:meth:`finish_violation` then needs the exact counts). Raises
        :class:`~pfair.privacy.PrivacyBudgetExceeded` when the ledger refuses."""
        if int(epoch) not in self.checkpoints:
            raise ValueError(f"sensitive silo {self.c}: this run releases its violation histograms after the "
                             f"checkpoint epochs {sorted(self.checkpoints)} only, not after epoch {int(epoch)}")
        if self.violation_z is None:
            return None
        return mechanisms.charge_release(**self._violation_args(epoch),
                                         event=checkpoint_event(self.violation_z, VIOLATION_EVENT))

    def finish_violation(self, epoch: int, kept: np.ndarray | None, counts: np.ndarray | None) -> CheckpointRelease:
        """Its violation histogram after ``epoch``: ``kept`` (:meth:`begin_violation`), or the exact
        ``counts`` of all its records, training and held out (the non-sensitive silos hand it each
        record's ŷ and block, as they hand it F(x_i) in a round), noised with its own key at
        sensitivity √2 exactly as a standard silo's (docs/privacy.md); exact in a non-private fit."""
        if kept is None:
            kept = (np.asarray(counts, dtype=np.float64) if self.violation_z is None else
                    mechanisms.noise_release(counts, key=self.key, **self._violation_args(epoch)))
        return CheckpointRelease(self.c, int(epoch), None, kept)

    def _violation_args(self, epoch: int) -> dict:
        """The ledger, release id, noise and ledger name of its violation histogram after ``epoch``
        (the standard silos' kind, under its own key and index)."""
        return dict(ledger=self.ledger,
                    release=violation_release(self.c, release_run(self.ledger, self.run_id), int(epoch)),
                    noise_multiplier=self.violation_z, sensitivity=VIOLATION_SENSITIVITY,
                    name=f"{VIOLATION_EVENT}:{self.run_id}:{int(epoch)}")


class HybridServer:
    """Checks every reply, averages the s-free parts over the non-sensitive silos, divides the
    sensitive sums by the union's size, and takes the SteFFLe step (the Rust ``server_update``).

    A sensitive silo's sums hold at most ``|∪ B_j|`` records, each clipped to ``C_θ`` in θ and
    with ``‖c_i‖ ≤ 2 max p^{-1/2}`` in W, so ``‖u‖ ≤ C_θ |∪ B_j| + σ_θ(√D + 8)`` and likewise for
    ``v`` (a Gaussian vector of std σ in D coordinates passes ``σ(√D + 8)`` with probability below
    1.3e-14). A non-sensitive silo's batch holds exactly ``m`` records."""

    def __init__(self, *, lam: float, lr_w: float, w_radius: float, block_len: int, theta_len: int, w_len: int,
                 n_non_sensitive: int, batch_size: int, clip_theta: float, max_inv_sqrt_ps: float,
                 sigmas: Sequence[tuple[float, float]], settings: Any = None) -> None:
        self.settings = settings
        self.lam, self.lr_w, self.w_radius, self.block_len = float(lam), float(lr_w), float(w_radius), int(block_len)
        self.theta_len, self.w_len = int(theta_len), int(w_len)
        self.n_non_sensitive, self.batch_size = int(n_non_sensitive), int(batch_size)
        self.clip_theta, self.max_inv = float(clip_theta), float(max_inv_sqrt_ps)
        self.sigmas = list(sigmas)
        self.rejected: list[tuple[int, Any, str]] = []
        #: λ adapted to ``max_violation`` (as :class:`~pfair.protocol.server.ServerParty`'s), else None.
        self.controller = (LambdaController(target=float(settings.max_violation), lr=float(settings.lam_lr))
                           if settings is not None and settings.max_violation is not None else None)
        if self.controller is not None:
            self.lam = float(settings.lam_initial)
        #: What each checkpoint release may hold (set by :meth:`HybridParties.build_server`):
        #: ``{"tables": {j: n_j}, "histograms": {c: (n_c, std_c)}}``, the records a non-sensitive silo's
        #: exact table counts and a sensitive silo's histogram counts with the noise std of one cell.
        self.checkpoint_limits: dict | None = None

    #: The θ step's factor from the damping of cycles (:func:`pfair.protocol.driver.damp_cycles`).
    lr_scale: float = 1.0

    def lr_of_epoch(self, epoch: int) -> float:
        """η_θ of ``epoch``, as :meth:`ServerParty.lr_of_epoch` gives it: :meth:`SteFFLeSettings.lr_at`
        at λ, times :attr:`lr_scale`."""
        if self.settings is None:
            raise ValueError("this HybridServer was made without settings; it has no step schedule")
        return self.settings.lr_at(epoch, self.lam) * self.lr_scale

    def _reject(self, round: int, silo: Any, reason: str) -> None:
        log.warning("round %d: rejected the reply of silo %r: %s", round, silo, reason)
        self.rejected.append((round, silo, reason))

    def check_non_sensitive(self, msg: Any, silo: int, round: int) -> str | None:
        """Why a non-sensitive silo's reply must be rejected, or None."""
        reason = check_header(msg, NonSensitiveMessage, silo=silo, round=round, who="non-sensitive silo")
        if reason is not None:
            return reason
        if msg.batch_size != self.batch_size:
            return f"claims a batch of {msg.batch_size} records, the batch size is {self.batch_size}"
        for name, length in (("loss_grad", self.theta_len), ("psi_theta_sfree", self.theta_len),
                             ("psi_w_sfree", self.w_len)):
            reason = check_part(getattr(msg, name), name, length)
            if reason is not None:
                return reason
        return None

    def check_sensitive(self, msg: Any, silo: int, round: int, union: int) -> str | None:
        """Why a sensitive silo's reply must be rejected, or None (no reply is acceptable)."""
        reason = check_header(msg, SensitiveMessage, silo=silo, round=round, who="sensitive silo")
        if reason is not None:
            return reason
        if not 0 <= silo < len(self.sigmas):
            return f"unknown sensitive silo {silo!r}"
        s_theta, s_w = self.sigmas[silo]
        max_t = self.clip_theta * union + s_theta * (math.sqrt(self.theta_len) + TAIL)
        max_w = 2.0 * self.max_inv * union + s_w * (math.sqrt(self.w_len) + TAIL)
        return (check_part(msg.psi_theta, "psi_theta", self.theta_len, max_t)
                or check_part(msg.psi_w, "psi_w", self.w_len, max_w))

    def update(self, theta: np.ndarray, w: np.ndarray, non_sensitive: Sequence[Any],
               sensitive: Sequence[Any], *, lr_theta: float, round: int) -> tuple[np.ndarray, np.ndarray]:
        """One server step from the replies of ``round``: ``non_sensitive[j]`` from non-sensitive
        silo j and ``sensitive[c]`` (or None) from sensitive silo c. Rejected replies are logged,
        kept in :attr:`rejected` and left out; with no valid non-sensitive reply θ and W stay."""
        ns = []
        for j, m in enumerate(non_sensitive):
            reason = "no reply" if m is None else self.check_non_sensitive(m, j, round)
            if reason is None:
                ns.append(m)
            else:
                self._reject(round, ("non-sensitive", j), reason)
        if not ns:
            log.warning("round %d: no valid non-sensitive reply; the model is unchanged", round)
            return np.asarray(theta, dtype=np.float64), np.asarray(w, dtype=np.float64)
        union = sum(m.batch_size for m in ns)
        n = float(len(ns))
        g, a_t, a_w = np.zeros(theta.size), np.zeros(theta.size), np.zeros(w.size)
        for m in ns:
            g += m.loss_grad / n
            a_t += m.psi_theta_sfree / n
            a_w += m.psi_w_sfree / n
        inv_b = 1.0 / max(union, 1)
        h_t, h_w = np.zeros(theta.size), np.zeros(w.size)
        for c, m in enumerate(sensitive):
            if m is None:
                continue
            reason = self.check_sensitive(m, c, round, union)
            if reason is not None:
                self._reject(round, ("sensitive", c), reason)
                continue
            h_t += m.psi_theta * inv_b
            h_w += m.psi_w * inv_b
        lr_w = self.lr_w if self.controller is None else self.settings.server_lr_w(self.lam)
        return _core.server_update(theta, w, self.block_len, [(g, a_t, h_t, a_w, h_w)], [1.0], lam=self.lam,
                                   lr_theta=float(lr_theta), lr_w=lr_w, w_radius=self.w_radius)

    # ------------------------------------------------------------------ the checkpoints
    def read_checkpoint(self, releases: Sequence[tuple[Any, Any]], epoch: int, *, n_classes: int,
                        limits: dict | None = None, epochs_since: int = 1) -> Any:
        """Consume the checkpoint releases of ``epoch`` (post-processing), as
        :meth:`ServerParty.read_checkpoint <pfair.protocol.server.ServerParty.read_checkpoint>` does,
        from the two kinds of silo: ``(("non-sensitive", j), release)`` with the exact validation
        table of non-sensitive silo j's held-out records, and ``(("sensitive", c), release)`` with
        sensitive silo c's noised violation histogram (under a fairness target). Each is checked
        (:func:`~pfair.protocol.server.check_counts`: shape, float, finite, and counts its records
        plus its noise can produce, against :attr:`checkpoint_limits`; ``limits`` is not used), the
        valid tables pooled into the figures, the valid histograms summed into the released
        violation, and with a target the dual step on λ taken (halved where the figures show the
        model no better than the constant predictor). None (λ unchanged) when no table was valid;
        the figures without a violation (λ unchanged) when no histogram was."""
        st, l = self.settings, int(n_classes)  # noqa: E741
        target = self.controller is not None
        own = self.checkpoint_limits or {"tables": {}, "histograms": {}}
        shape = (st.notion.n_blocks(l), self.block_len // l, l)
        tables, hists, stds = [], [], []
        for who, rel in releases:
            kind, silo = who if isinstance(who, tuple) and len(who) == 2 else (None, None)
            if kind == "non-sensitive" and silo in own["tables"]:
                want, name, limit, every = (l, l), "validation table", (own["tables"][silo], 0.0), True
            elif kind == "sensitive" and target and silo in own["histograms"]:
                want, name, limit, every = shape, "violation histogram", own["histograms"][silo], \
                    st.notion.covers_every_record
            else:
                reason = f"unknown silo {who!r}"
                want = None
            if want is not None:
                if not isinstance(rel, CheckpointRelease):
                    reason = "no reply" if rel is None else f"not a CheckpointRelease but {type(rel).__name__}"
                elif rel.silo != silo or rel.epoch != epoch:
                    reason = f"claims silo {rel.silo!r} epoch {rel.epoch}, expected silo {silo!r} epoch {epoch}"
                else:
                    arr = rel.validation if kind == "non-sensitive" else rel.counts
                    reason = check_counts(arr, name, want, limit, every)
            if reason is not None:
                log.warning("epoch %d: rejected the checkpoint release of silo %r: %s", epoch, who, reason)
                self.rejected.append((epoch, who, "checkpoint release: " + reason))
            elif kind == "non-sensitive":
                tables.append(np.asarray(rel.validation, dtype=np.float64))
            else:
                hists.append(np.asarray(rel.counts, dtype=np.float64))
                stds.append(limit[1])
        if not tables:
            log.warning("epoch %d: no valid checkpoint release%s", epoch,
                        f"; lambda stays {self.lam:g}" if target else "")
            return None
        v = sd_v = None
        if target and hists:
            pooled = np.sum(hists, axis=0)
            v = st.notion.violation_from_counts(pooled)
            sd_v = st.notion.violation_sd(pooled, std=max(stds) * math.sqrt(len(hists)))
        elif target:
            log.warning("epoch %d: no valid violation histogram; lambda stays %g", epoch, self.lam)
        fig = pooled_figures(tables, epoch=epoch, noise_sd=0.0, violation=v, violation_sd=sd_v or 0.0,
                             lam=float(self.lam))
        if fig is not None and v is not None:
            self.lam = self.controller.update(v, epochs=epochs_since, inverting=fig.shown_not_better)
        return fig


class HybridParties:
    """The silo side of a hybrid run: the layout, the sensitive silos' ledgers, keys, p_s histograms
    and noise plans, the parties and the server they answer (see the module docstring for the modes and the accounting).

    ``ledgers``: None (in ``"divisions"`` mode the federation silos' persistent ledgers, otherwise
    new ones), ``"new"``, or one :class:`~pfair.privacy.PrivacyLedger` or path per sensitive silo."""

    def __init__(self, settings: Any, fed: Any, sensitive_silos: Any, *, ledgers: Any = None) -> None:
        # Each non-sensitive silo holds out its validation share by the standard simulation's rule
        # (pfair.validation.holdout: the public seed and the silo's index); the rounds see the rest.
        bounds = np.concatenate([[0], np.cumsum(fed.sizes)]).astype(np.int64)
        split = [holdout(n, settings.validation_share, seed=settings.seed, silo=j) for j, n in enumerate(fed.sizes)]
        #: Pooled rows (in the whole federation's order) of each non-sensitive silo's held-out records.
        self.held_rows = [bounds[j] + va for j, (_, va) in enumerate(split)]
        train_rows = np.concatenate([bounds[j] + tr for j, (tr, _) in enumerate(split)])
        train_sizes = [len(tr) for tr, _ in split]
        plan = RunPlan.build(settings, train_sizes, n_groups=fed.n_groups, n_classes=fed.n_classes)
        st = plan.settings
        check_hybrid_settings(st)
        X, y, s = fed.pooled()
        ids = None
        if sensitive_silos is not None:
            ids = np.asarray(sensitive_silos)
            order = getattr(fed, "row_order_", None)
            if order is not None and ids.shape[0] == order.shape[0]:
                ids = ids[order]  # align with the pooled (silo-sorted) order of the records
        whole = layout_for(st.mode, fed.sizes, ids)
        tb = np.concatenate([[0], np.cumsum(train_sizes)]).astype(np.int64)
        layout = HybridLayout([np.arange(tb[j], tb[j + 1], dtype=np.int64) for j in range(len(train_sizes))],
                              whole.owner[train_rows], whole.n_sensitive)
        if any(h.size for h in self.held_rows):
            Xt, yt, s_t = X[train_rows], y[train_rows], s[train_rows]
        else:  # nothing held out: the pooled arrays themselves (the run as before validation existed)
            Xt, yt, s_t = X, y, s
        k, l = fed.n_groups, fed.n_classes
        self.plan, self.settings, self.fed, self.layout, self.whole_owner = plan, st, fed, layout, whole.owner
        self.hset = _core.HybridSet(
            Xt, yt, s_t, layout.members, layout.owner, n_sensitive=layout.n_sensitive, n_groups=k, n_classes=l,
            **st.notion.core_args(),
        )
        #: Records of each sensitive silo: all of them (its ledger's δ) and those the rounds sample.
        self.sizes_c = np.bincount(whole.owner, minlength=layout.n_sensitive)
        self.train_c = np.bincount(layout.owner, minlength=layout.n_sensitive)
        if np.any(self.train_c == 0):
            c = int(np.flatnonzero(self.train_c == 0)[0])
            raise ValueError(f"sensitive silo {c} holds s of held-out records only (validation_share="
                             f"{st.validation_share:g}); lower validation_share or give it more records")
        if st.private and st.delta is None:  # the default δ = 1/n² of each sensitive silo, as a silo's
            check_default_delta([int(v) for v in self.sizes_c], [f"sensitive {c}" for c in range(layout.n_sensitive)])
        self.deltas = [st.delta_for(max(int(self.sizes_c[c]), 2)) for c in range(layout.n_sensitive)]
        # The pooled records, kept for the checkpoint counts only when the run has checkpoints.
        self._pooled = (X, y, s) if st.checkpoint_epochs() else None
        self.ledgers = self._ledgers(ledgers, X, y, s)
        self.keys = [noise_key(st.noise_seed) for _ in range(layout.n_sensitive)]
        self.batch_key = hybrid_batch_key(st)
        self.clip = float(st.clip) if st.clip is not None else math.inf
        self.theta_len = plan.linear_theta_len(fed.n_features)
        self._s = s_t  # the training records' s (the p_s histogram counts them, as a standard silo's does)
        self.plans: list = []
        self.proportions: np.ndarray | None = None
        self.run_id = uuid.uuid4().hex
        self.checkpoint_epochs = tuple(st.checkpoint_epochs())
        #: z_v of each sensitive silo's violation histograms (None: exact, or none released).
        self.violation_z: list = [None] * layout.n_sensitive
        self._counters: tuple | None = None

    @property
    def held_out(self) -> list[int] | None:
        """Records each non-sensitive silo's validation table counts (its held-out records, or with
        ``validation_share=0`` its training records); None when the run has no checkpoints."""
        if not self.checkpoint_epochs:
            return None
        if self.settings.validation_share > 0:
            return [int(h.size) for h in self.held_rows]
        return [int(len(m)) for m in self.layout.members]

    def held_out_of_sensitive(self) -> list[int]:
        """Held-out records of each sensitive silo (the privacy report's ``n_held_out``)."""
        rows = np.concatenate(self.held_rows)
        return np.bincount(self.whole_owner[rows], minlength=self.layout.n_sensitive).astype(int).tolist()

    def _ledgers(self, ledgers: Any, X: Any, y: Any, s: Any) -> list:
        """The sensitive silos' ledgers (:func:`pfair.protocol.setup.ledgers_for`): in
        ``"divisions"`` mode by default the federation silos' own, otherwise fresh ones by default."""
        st, n_s = self.settings, self.layout.n_sensitive
        if st.private and ledgers is None and st.mode == "divisions":
            return resolve_ledgers(st, self.fed, None)

        def fingerprints() -> list[str]:
            rows = [np.flatnonzero(self.whole_owner == c) for c in range(n_s)]
            return [data_fingerprint(X[r], y[r], s[r]) for r in rows]

        return ledgers_for(st, ledgers, sizes=[max(int(n), 2) for n in self.sizes_c], fingerprints=fingerprints,
                           labels=[f"sensitive {c}" for c in range(n_s)], what="sensitive silo")

    # ------------------------------------------------------------------ set-up
    def release_group_counts(self, c: int) -> np.ndarray:
        """``p_s="dp"``: sensitive silo c's DP histogram of its records' s (sensitivity √2, a share
        of its ε, charged to its ledger first), kept in the ledger: a later fit on the same ledger
        gets the same release again at no cost, never a second draw of the same stream at another σ
        (which, with a known noise seed, would give the exact counts away)."""
        ledger, k = self.ledgers[c], self.plan.n_groups
        z_h = self.plan.budget.histogram_noise_multiplier(ledger.delta)
        return mechanisms.release_histogram(
            lambda: np.bincount(self._s[self.layout.owner == c], minlength=k).reshape(1, k).astype(float),
            ledger=ledger, event=histogram_event(z_h), key=self.keys[c], release=group_counts_release(c, HYBRID_GROUP_COUNTS), noise_multiplier=z_h,
            sensitivity=HISTOGRAM_SENSITIVITY, name=HISTOGRAM_PREFIX + HYBRID_GROUP_COUNTS)

    # ------------------------------------------------------------------ the silo side (SiloSide)
    @property
    def n_silos(self) -> int:
        """The silos that plan noise and hold a ledger: the sensitive silos."""
        return self.layout.n_sensitive

    def preflight(self, total_rounds: int) -> None:
        """Warn about what earlier fits spent of each sensitive silo's ledger; then each sensitive
        silo decides whether it takes part, before anything of the run is released, as a standard
        silo does (:meth:`SiloParty.preflight <pfair.protocol.silo.SiloParty.preflight>`): its
        plan on a scratch copy of its ledger holding the run's p_s histogram (when not released
        yet) and its checkpoint releases, under uniform proportions, refused
        (:class:`~pfair.exceptions.BudgetTooSmall`) when too noisy (:meth:`_check_refusal`)."""
        for c, ledger in enumerate(self.ledgers):
            warn_if_spent(f"sensitive {c}", ledger)
        st = self.settings
        if not st.private:
            return
        k, blocks = self.plan.n_groups, st.notion.n_blocks(self.plan.n_classes)
        uniform = np.full((blocks, k), 1.0 / k)
        for c, ledger in enumerate(self.ledgers):
            if ledger is None:
                continue
            extra = ()
            if (st.p_s_source == "dp" and st.sends_psi
                    and HISTOGRAM_PREFIX + HYBRID_GROUP_COUNTS not in ledger.releases):
                extra = (histogram_event(self.plan.budget.histogram_noise_multiplier(ledger.delta)),)
            self._plan(c, uniform, int(total_rounds), self._ledger_with_checkpoints(c, extra))

    def group_counts(self) -> list:
        """The p_s round: every sensitive silo's DP histogram of s (:meth:`release_group_counts`)."""
        return [self.release_group_counts(c) for c in range(self.layout.n_sensitive)]

    def plan_rounds(self, proportions: np.ndarray, total_rounds: int) -> dict:
        """The sensitive silos' noise plans from the released ``proportions``, each calibrated
        against its own ledger (public-batch accounting at its rate ``q_c``) with the run's
        checkpoint releases charged in advance (:meth:`_ledger_with_checkpoints`), refused when too
        noisy (:meth:`_check_refusal`), the run registered."""
        self._use_proportions(proportions)
        self.plans = [self._plan(c, self.proportions, int(total_rounds), self._ledger_with_checkpoints(c))
                      for c in range(self.layout.n_sensitive)]
        self._register()
        return dict(enumerate(self.plans))

    def _plan(self, c: int, proportions: np.ndarray, total_rounds: int, ledger: Any) -> Any:
        """Sensitive silo c's noise plan against ``ledger``, checked by the refusal rule."""
        st = self.settings
        rates = sensitive_sample_rates(self.layout, st.batch_size, st.amplification)
        # Sums over public batches drawn at its own rate q_c (divisor 1), the s-dependent parts only,
        # priced by RDP on a first fit (check_hybrid_settings has refused every other choice).
        plan = plan_silo_noise(
            NoiseRequest.of_settings(st, silo=c, n_records=int(self.train_c[c]), steps=int(total_rounds),
                                     delta=self.deltas[c], sampling="without_replacement", protect="attribute",
                                     clip_loss=math.inf, clip_theta=self.clip, clip_w=math.inf, calibration="rdp",
                                     sample_rate=float(rates[c]), denominator=1.0, first_fit_accountant="rdp"),
            proportions, ledger=ledger)
        self._check_refusal(plan, ledger)
        return plan

    def _check_refusal(self, plan: Any, ledger: Any) -> None:
        """The standard silos' refusal rule (:func:`~pfair.privacy.calibration.check_noise_to_signal`,
        docs/privacy.md "A silo with too little left says no") for a sensitive silo: its noised sums
        enter the θ step divided by the union of the batches, ``U = Σ_j min(m, n_j)`` records, so
        ``U`` stands where a standard silo's batch divisor ``m`` does; λ as a standard silo prices it
        (the run's, or ``max(1, λ)`` under a fairness target), ``D = (d + 1)(l − 1)``."""
        st = self.settings
        if not st.private:
            return
        union = float(sum(min(st.batch_size, len(m)) for m in self.layout.members))
        lam = float(st.lam) if st.max_violation is None else max(1.0, float(st.lam))
        check_noise_to_signal(replace(plan, denominator=union), lam=lam, clip_loss=st.clips()["clip_loss"],
                              clip_theta=self.clip, ledger=ledger, epsilon=float(st.epsilon), dims=self.theta_len)

    def _checkpoint_noise(self) -> None:
        """z_v of each sensitive silo's violation histograms: the standard silos' rule
        (:meth:`BudgetSplit.violation_noise_multiplier <pfair.protocol.plan.BudgetSplit.violation_noise_multiplier>`
        at its ledger's δ for the run's K checkpoints), a function of public settings only, so a
        resumed run finds the same; None without a target, without checkpoints or in a
        non-private fit (exact)."""
        st, K = self.settings, len(self.checkpoint_epochs)
        self.violation_z = [
            self.plan.budget.violation_noise_multiplier(ledger.delta, K)
            if st.private and ledger is not None and K and st.max_violation is not None else None
            for ledger in self.ledgers]

    def _ledger_with_checkpoints(self, c: int, extra: tuple = ()) -> Any:
        """Sensitive silo c's ledger, or a scratch copy of it with ``extra`` and the run's K
        violation histograms charged in advance, so that its rounds are calibrated to the
        composition of everything it releases (the claimed ε includes them)."""
        self._checkpoint_noise()
        ledger, z, K = self.ledgers[c], self.violation_z[c], len(self.checkpoint_epochs)
        if ledger is None or (z is None and not extra):
            return ledger
        scratch = PrivacyLedger.from_dict(ledger.to_dict())
        events = list(extra) + ([checkpoint_event(z, VIOLATION_EVENT, K)] if z is not None else [])
        for event in events:
            try:
                scratch.charge(event)
            except PrivacyBudgetExceeded as exc:
                share = ("max_violation_epsilon_share" if event.name == VIOLATION_EVENT else "p_s_epsilon_share")
                raise PrivacyBudgetExceeded(
                    f"sensitive silo {c}: what its ledger has left cannot pay for this run's {event.name} release(s) "
                    "before its rounds; nothing was released. Start from new ledgers (ledgers='new'), raise the "
                    f"budget, or lower {share}. ({exc})") from None
        return scratch

    def _use_proportions(self, proportions: np.ndarray) -> None:
        self.proportions = np.asarray(proportions, dtype=np.float64)
        self.inv = inv_sqrt_proportions(self.proportions)

    def _register(self) -> None:
        for ledger, plan in zip(self.ledgers, self.plans):
            begin_run(ledger, plan, self.run_id)

    def adopt(self, state: RunState) -> None:
        """Go on with an interrupted run of these silos: the same data and settings, its
        proportions, noise plans and run id (registered again, so its rounds go on being charged)."""
        check_same_run(state, self.settings, self.fed.silos)
        if len(state.plans) != self.layout.n_sensitive or len(state.run_ids) != 1:
            raise ValueError("resume: the interrupted run has other sensitive silos than this one")
        check_ledgers_hold_run(self.ledgers, state.plans, state.run_ids * len(state.plans))
        self._use_proportions(state.proportions)
        self.plans, self.run_id = list(state.plans), str(state.run_ids[0])
        self._checkpoint_noise()
        self._register()

    def run_ids(self) -> list:
        return [self.run_id]

    def fingerprints(self) -> list:
        return silo_fingerprints(self.fed.silos)

    def next_rounds(self) -> list:
        return [ledger.next_round(self.run_id) for ledger, plan in zip(self.ledgers, self.plans)
                if ledger is not None and 0 < plan.noise_multiplier < math.inf]

    def batch_keys(self) -> None:
        """Nothing to keep: every round's batches are drawn anew (never a shuffled epoch)."""
        return None

    # ------------------------------------------------------------------ the checkpoint counts
    def checkpoint_counts(self, theta: np.ndarray, *, tables: Sequence[int], histograms: Sequence[int]) -> tuple:
        """The exact counts under θ (silo-local; released only through the parties): ``{j: V_j}``,
        the validation table of non-sensitive silo j's held-out records (with
        ``validation_share=0`` its training records; all zeros when it could hold none out), and
        ``{c: c_c}``, the violation histogram of all sensitive silo c's records, training and held
        out. One Rust pass each (``SiloSet.checkpoint_counts`` over rows of the pooled matrix read
        in place; a record's class is the first largest of its class probabilities, as in the
        standard topology)."""
        l = self.plan.n_classes  # noqa: E741
        table_sets, hist_set = self._checkpoint_sets()
        theta = np.ascontiguousarray(theta, dtype=np.float64)
        out_t: dict = {int(j): np.zeros((l, l)) for j in tables}
        index, tset = table_sets
        want = [int(j) for j in tables if index[int(j)] is not None]
        if want:
            tabs, _ = tset.checkpoint_counts(theta, table=True, violation=False, silos=[index[j] for j in want])
            out_t.update({j: tabs[i] for i, j in enumerate(want)})
        out_h: dict = {}
        if len(histograms):
            cs = [int(c) for c in histograms]
            _, hists = hist_set.checkpoint_counts(theta, table=False, violation=True, silos=cs)
            out_h = {c: hists[i] for i, c in enumerate(cs)}
        return out_t, out_h

    def _checkpoint_sets(self) -> tuple:
        """The ``SiloSet`` of the rows each non-sensitive silo's table counts (with each silo's index
        in it, None for a silo with no such row) and the ``SiloSet`` of every sensitive silo's
        records, made at the first checkpoint."""
        if self._counters is None:
            st, (X, y, s) = self.settings, self._pooled
            k, l = self.plan.n_groups, self.plan.n_classes  # noqa: E741
            if st.validation_share > 0:
                rows = list(self.held_rows)
            else:
                bounds = np.concatenate([[0], np.cumsum(self.fed.sizes)]).astype(np.int64)
                rows = [np.arange(bounds[j], bounds[j + 1], dtype=np.int64) for j in range(len(self.fed.sizes))]
            index, kept = [], []
            for r in rows:
                index.append(len(kept) if r.size else None)
                if r.size:
                    kept.append(r)
            X = np.ascontiguousarray(X)
            y64, s64 = np.ascontiguousarray(y, dtype=np.int64), np.ascontiguousarray(s, dtype=np.int64)
            args = dict(n_groups=k, n_classes=l, **st.notion.core_args())
            # A table reads y and ŷ only: the non-sensitive silos' set holds no s (zeros in its place).
            tset = (_core.SiloSet.from_matrix(X, [y64[r] for r in kept], [np.zeros(r.size, dtype=np.int64) for r in kept],
                                              kept, **args)
                    if kept else None)
            owners = [np.flatnonzero(self.whole_owner == c) for c in range(self.layout.n_sensitive)]
            hset = _core.SiloSet.from_matrix(X, [y64[r] for r in owners], [s64[r] for r in owners], owners, **args)
            self._counters = ((index, tset), hset)
        return self._counters

    # ------------------------------------------------------------------ the parties and the server
    def build_server(self, noise_plans: Any, proportions: np.ndarray, theta_len: int) -> "HybridServer":
        """The server of the run, with the reply limits the sensitive silos' noise plans allow."""
        st, plan = self.settings, self.plan
        plans = [noise_plans[c] for c in range(self.layout.n_sensitive)]
        server = HybridServer(lam=st.lam, lr_w=st.server_lr_w(), w_radius=float(st.w_radius or math.inf),
                              block_len=plan.block_len, theta_len=int(theta_len), w_len=plan.w_len,
                              n_non_sensitive=len(self.layout.members), batch_size=st.batch_size,
                              clip_theta=self.clip, max_inv_sqrt_ps=float(np.max(inv_sqrt_proportions(proportions))),
                              sigmas=[(p.sigma_theta, p.sigma_w) for p in plans], settings=st)
        held = self.held_out
        if held is not None:
            # A table is exact (std 0); a histogram counts all of the silo's records, each cell
            # noised with std z_v √2 (0 when exact). Functions of public settings and sizes only.
            server.checkpoint_limits = {
                "tables": dict(enumerate(held)),
                "histograms": {c: (int(self.sizes_c[c]), 0.0 if z is None else z * VIOLATION_SENSITIVITY)
                               for c, z in enumerate(self.violation_z)}}
        return server

    def parties(self) -> tuple[list, list]:
        """The run's silos as parties: the non-sensitive silos and the sensitive silos, with this
        set-up's plans, keys and ledgers (after :meth:`plan_rounds` or :meth:`adopt`)."""
        st = self.settings
        ns = [NonSensitiveParty(j, self.hset, batch_size=st.batch_size, clip_theta=self.clip, batch_key=self.batch_key)
              for j in range(len(self.layout.members))]
        sens = [SensitiveParty(c, self.hset, plan=p, key=key, ledger=ledger, run_id=self.run_id,
                               clip_theta=self.clip, dummy_noise=st.dummy_noise, violation_z=self.violation_z[c],
                               checkpoints=self.checkpoint_epochs)
                for c, (p, key, ledger) in enumerate(zip(self.plans, self.keys, self.ledgers))]
        return ns, sens

    def transport(self, server: "HybridServer", *, fast: bool = True) -> "HybridPartyLoop":
        """This topology's Rust path (``fast``) or its party loop, for the one epoch loop."""
        return HybridBatched(self, server) if fast else HybridPartyLoop(self, server)


class HybridPartyLoop:
    """Round by round through the hybrid parties; a sensitive silo charges each round in its step."""

    def __init__(self, setup: HybridParties, server: HybridServer) -> None:
        self.setup, self.plan, self.server = setup, setup.plan, server
        self.ns, self.sens = setup.parties()

    def answering(self, epoch: int, refused: set) -> list[int]:
        return list(range(len(self.sens)))

    def rounds(self, theta: np.ndarray, w: np.ndarray, epoch: int, *, lr: float, active: list[int],
               refused: set) -> EpochOutcome:
        start, R, inv, snapshot = self.plan.epoch_start(epoch), self.plan.rounds_per_epoch, self.setup.inv, None
        for r in range(start, start + R):
            replies = [party.step(theta, w, inv, r) for party in self.ns]
            msgs = [sp.step(theta, w, inv, r, [handoff[sp.c] for _, handoff in replies]) for sp in self.sens]
            theta, w = self.server.update(theta, w, [m for m, _ in replies], msgs, lr_theta=lr, round=r)
            if self.plan.pick == r:
                snapshot = (theta.copy(), w.copy())
        return EpochOutcome(theta, w, None, {}, snapshot)

    def checkpoint(self, theta: np.ndarray, epoch: int, active: list[int], refused: set) -> list:
        """The checkpoint releases after ``epoch``: every non-sensitive silo's exact validation
        table and, under a fairness target, every sensitive silo's violation histogram (charged
        before it is computed), keyed ``("non-sensitive", j)`` and ``("sensitive", c)`` for
        :meth:`HybridServer.read_checkpoint`."""
        st = self.setup.settings
        if epoch not in self.setup.checkpoint_epochs:
            raise ValueError(f"this run releases its validation figures after the checkpoint epochs "
                             f"{list(self.setup.checkpoint_epochs)} only, not after epoch {int(epoch)}")
        # Every sensitive silo charges its histogram first (or finds it kept from an earlier ask);
        # the counts of those that charged are computed only then, in one pass.
        hists = []
        if st.max_violation is not None:
            kept = {p.c: p.begin_violation(epoch) for p in self.sens}
            need = [c for c, k in kept.items() if k is None]
            exact = self.setup.checkpoint_counts(theta, tables=[], histograms=need)[1] if need else {}
            hists = [(("sensitive", p.c), p.finish_violation(epoch, kept[p.c], exact.get(p.c))) for p in self.sens]
        tables, _ = self.setup.checkpoint_counts(theta, tables=range(len(self.ns)), histograms=[])
        return [(("non-sensitive", p.j), p.release_table(epoch, tables[p.j])) for p in self.ns] + hists


class HybridBatched(HybridPartyLoop):
    """An epoch of the hybrid rounds in one Rust call (``HybridSet.run_rounds``); every sensitive
    silo charges the epoch's rounds first. The same arithmetic as :class:`HybridPartyLoop` on
    well-formed replies."""

    def answering(self, epoch: int, refused: set) -> list[int]:
        """Every sensitive silo charges the epoch's rounds before they are computed."""
        for party in self.sens:
            party.charge(self.plan.epoch_start(epoch), self.plan.rounds_per_epoch)
        return list(range(len(self.sens)))

    def rounds(self, theta: np.ndarray, w: np.ndarray, epoch: int, *, lr: float, active: list[int],
               refused: set) -> EpochOutcome:
        s, st, start = self.setup, self.setup.settings, self.plan.epoch_start(epoch)

        def rounds(count: int) -> dict[str, Any]:
            return s.hset.run_rounds(
                theta, w, s.inv, batch_size=st.batch_size, clip_theta=s.clip,
                sigma_theta=[p.sigma_theta for p in s.plans], sigma_w=[p.sigma_w for p in s.plans],
                dummy_noise=st.dummy_noise, noise_keys=s.keys, lam=float(self.server.lam), lr_theta=lr,
                lr_w=st.server_lr_w(self.server.lam), w_radius=float(st.w_radius or math.inf), batch_key=s.batch_key,
                start=start,
                n_rounds=count,
            )

        out = rounds(self.plan.rounds_per_epoch)
        snapshot = None
        pick = self.plan.pick
        if pick is not None and start <= pick < start + self.plan.rounds_per_epoch:
            # Replay up to the snapshot round (the keyed streams make this exact).
            part = rounds(pick - start + 1)
            snapshot = (part["theta"], part["w"])
        exact = {"batch_loss": float(np.mean(out["loss"])), "batch_psi": float(np.mean(out["psi"]))}
        return EpochOutcome(out["theta"], out["w"], None, exact, snapshot)


__all__ = ["HybridBatched", "HybridParties", "HybridPartyLoop", "HybridServer", "NonSensitiveMessage",
           "NonSensitiveParty", "SensitiveMessage", "SensitiveParty"]
