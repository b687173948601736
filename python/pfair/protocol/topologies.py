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
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from pfair import _core
from pfair.federation import silo_fingerprints
from pfair.privacy import mechanisms
from pfair.privacy.calibration import NoiseRequest, plan_silo_noise, warn_if_spent
from pfair.privacy.fingerprint import data_fingerprint
from pfair.privacy.proportions import HISTOGRAM_PREFIX, HISTOGRAM_SENSITIVITY, histogram_event
from pfair.protocol.assembly import check_ledgers_hold_run, check_same_run
from pfair.protocol.driver import EpochOutcome, RunState
from pfair.protocol.keys import HYBRID_GROUP_COUNTS, group_counts_release, hybrid_batch_key, noise_key
from pfair.protocol.plan import RunPlan, inv_sqrt_proportions
from pfair.protocol.server import TAIL, check_header, check_part
from pfair.protocol.setup import begin_run, ledgers_for, resolve_ledgers

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


class SensitiveParty:
    """Sensitive silo ``c``: its records' s, its secret noise key, its ledger and noise plan."""

    def __init__(self, c: int, hset: Any, *, plan: Any, key: Any, ledger: Any, run_id: str, clip_theta: float,
                 dummy_noise: bool) -> None:
        self.c, self.hset, self.plan, self.key, self.ledger, self.run_id = int(c), hset, plan, key, ledger, run_id
        self.clip_theta, self.dummy_noise = float(clip_theta), bool(dummy_noise)

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

    #: λ is fixed in the hybrid topologies (no fairness target); the θ step's factor stays 1.
    controller = None
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
        return _core.server_update(theta, w, self.block_len, [(g, a_t, h_t, a_w, h_w)], [1.0], lam=self.lam,
                                   lr_theta=float(lr_theta), lr_w=self.lr_w, w_radius=self.w_radius)


class HybridParties:
    """The silo side of a hybrid run: the layout, the sensitive silos' ledgers, keys, p_s histograms
    and noise plans, the parties and the server they answer (see the module docstring for the modes and the accounting).

    ``ledgers``: None (in ``"divisions"`` mode the federation silos' persistent ledgers, otherwise
    new ones), ``"new"``, or one :class:`~pfair.privacy.PrivacyLedger` or path per sensitive silo."""

    def __init__(self, settings: Any, fed: Any, sensitive_silos: Any, *, ledgers: Any = None) -> None:
        plan = RunPlan.build(settings, fed.sizes, n_groups=fed.n_groups, n_classes=fed.n_classes)
        st = plan.settings
        check_hybrid_settings(st)
        X, y, s = fed.pooled()
        ids = None
        if sensitive_silos is not None:
            ids = np.asarray(sensitive_silos)
            order = getattr(fed, "row_order_", None)
            if order is not None and ids.shape[0] == order.shape[0]:
                ids = ids[order]  # align with the pooled (silo-sorted) order of the records
        layout = layout_for(st.mode, fed.sizes, ids)
        k, l = fed.n_groups, fed.n_classes
        self.plan, self.settings, self.fed, self.layout = plan, st, fed, layout
        self.hset = _core.HybridSet(
            X, y, s, layout.members, layout.owner, n_sensitive=layout.n_sensitive, n_groups=k, n_classes=l,
            **st.notion.core_args(),
        )
        self.sizes_c = np.bincount(layout.owner, minlength=layout.n_sensitive)
        self.deltas = [st.delta_for(max(int(self.sizes_c[c]), 2)) for c in range(layout.n_sensitive)]
        self.ledgers = self._ledgers(ledgers, X, y, s)
        self.keys = [noise_key(st.noise_seed) for _ in range(layout.n_sensitive)]
        self.batch_key = hybrid_batch_key(st)
        self.clip = float(st.clip) if st.clip is not None else math.inf
        self.theta_len = plan.linear_theta_len(fed.n_features)
        self._s = s
        self.plans: list = []
        self.proportions: np.ndarray | None = None
        self.run_id = uuid.uuid4().hex

    def _ledgers(self, ledgers: Any, X: Any, y: Any, s: Any) -> list:
        """The sensitive silos' ledgers (:func:`pfair.protocol.setup.ledgers_for`): in
        ``"divisions"`` mode by default the federation silos' own, otherwise fresh ones by default."""
        st, n_s = self.settings, self.layout.n_sensitive
        if st.private and ledgers is None and st.mode == "divisions":
            return resolve_ledgers(st, self.fed, None)

        def fingerprints() -> list[str]:
            rows = [np.flatnonzero(self.layout.owner == c) for c in range(n_s)]
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
        """Warn about what earlier fits spent of each sensitive silo's ledger."""
        for c, ledger in enumerate(self.ledgers):
            warn_if_spent(f"sensitive {c}", ledger)

    def group_counts(self) -> list:
        """The p_s round: every sensitive silo's DP histogram of s (:meth:`release_group_counts`)."""
        return [self.release_group_counts(c) for c in range(self.layout.n_sensitive)]

    def plan_rounds(self, proportions: np.ndarray, total_rounds: int) -> dict:
        """The sensitive silos' noise plans from the released ``proportions``, each calibrated
        against its own ledger (public-batch accounting at its rate ``q_c``), the run registered."""
        st = self.settings
        self._use_proportions(proportions)
        rates = sensitive_sample_rates(self.layout, st.batch_size, st.amplification)
        # Sums over public batches drawn at its own rate q_c (divisor 1), the s-dependent parts only,
        # priced by RDP on a first fit (check_hybrid_settings has refused every other choice).
        self.plans = [plan_silo_noise(
            NoiseRequest.of_settings(st, silo=c, n_records=int(self.sizes_c[c]), steps=int(total_rounds),
                                     delta=self.deltas[c], sampling="without_replacement", protect="attribute",
                                     clip_loss=math.inf, clip_theta=self.clip, clip_w=math.inf, calibration="rdp",
                                     sample_rate=float(rates[c]), denominator=1.0, first_fit_accountant="rdp"),
            self.proportions, ledger=self.ledgers[c])
            for c in range(self.layout.n_sensitive)]
        self._register()
        return dict(enumerate(self.plans))

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

    # ------------------------------------------------------------------ the parties and the server
    def build_server(self, noise_plans: Any, proportions: np.ndarray, theta_len: int) -> "HybridServer":
        """The server of the run, with the reply limits the sensitive silos' noise plans allow."""
        st, plan = self.settings, self.plan
        plans = [noise_plans[c] for c in range(self.layout.n_sensitive)]
        return HybridServer(lam=st.lam, lr_w=st.server_lr_w(), w_radius=float(st.w_radius or math.inf),
                            block_len=plan.block_len, theta_len=int(theta_len), w_len=plan.w_len,
                            n_non_sensitive=len(self.layout.members), batch_size=st.batch_size, clip_theta=self.clip,
                            max_inv_sqrt_ps=float(np.max(inv_sqrt_proportions(proportions))),
                            sigmas=[(p.sigma_theta, p.sigma_w) for p in plans], settings=st)

    def parties(self) -> tuple[list, list]:
        """The run's silos as parties: the non-sensitive silos and the sensitive silos, with this
        set-up's plans, keys and ledgers (after :meth:`plan_rounds` or :meth:`adopt`)."""
        st = self.settings
        ns = [NonSensitiveParty(j, self.hset, batch_size=st.batch_size, clip_theta=self.clip, batch_key=self.batch_key)
              for j in range(len(self.layout.members))]
        sens = [SensitiveParty(c, self.hset, plan=p, key=key, ledger=ledger, run_id=self.run_id,
                               clip_theta=self.clip, dummy_noise=st.dummy_noise)
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
        raise NotImplementedError("checkpoint releases (validation, max_violation) are available in mode='standard' "
                                  "only")


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
                dummy_noise=st.dummy_noise, noise_keys=s.keys, lam=float(st.lam), lr_theta=lr,
                lr_w=st.server_lr_w(), w_radius=float(st.w_radius or math.inf), batch_key=s.batch_key, start=start,
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
