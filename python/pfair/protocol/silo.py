"""One silo as a party of the protocol: its data, entropy, ledger and gradient provider.

A :class:`SiloParty` is what a hospital runs. It holds

* its records (a view; never sent),
* its keys (:class:`~pfair.protocol.keys.SiloKeys`, derived in :mod:`pfair.protocol.keys`):
  noise from the operating system's entropy, fresh per party, unless reproducible noise was asked
  for (``noise_seed=``); the batch order from the public ``seed`` only where it cannot matter,
* its persistent :class:`~pfair.privacy.PrivacyLedger`, which it charges *before* it computes a
  reply and which refuses any round past the budget or any round asked for twice (every charge and
  every Python-side noise draw go through :mod:`pfair.privacy.mechanisms`),
* a gradient provider (:mod:`pfair.providers`).

:meth:`SiloParty.step` is the whole silo side of a round: charge → draw the batch → exact parts →
clip/noise the s-dependent parts with the silo's own key → :class:`SiloMessage`. Diagnostics of
the exact data stay in :attr:`SiloParty.diagnostics`.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from pfair import _core
from pfair.exceptions import LedgerMismatch, PrivacyBudgetExceeded, SettingsMismatch
from pfair.privacy.calibration import (
    NoisePlan,
    NoiseRequest,
    mechanism_terms,
    plan_silo_noise,
    sample_rate_and_denominator,
)
from pfair.fairness_target import VIOLATION_EVENT, VIOLATION_SENSITIVITY
from pfair.privacy import mechanisms
from pfair.privacy.ledger import MechanismEvent, PrivacyLedger
from pfair.privacy.proportions import HISTOGRAM_SENSITIVITY, histogram_event
from pfair.privacy.subspace import principal_basis
from pfair.protocol.keys import SiloKeys, group_counts_release, release_run, validation_release, violation_release
from pfair.protocol.messages import CheckpointRelease, LocalDiagnostics, SiloMessage
from pfair.protocol.plan import BudgetSplit, budget_split, inv_sqrt_proportions
from pfair.protocol.setup import begin_run
from pfair.providers.linear import LinearProvider
from pfair.settings import SteFFLeSettings
from pfair.validation import VALIDATION_EVENT, VALIDATION_SENSITIVITY, validation_table


@dataclass
class CheckpointRequest:
    """What a silo's checkpoint release of ``epoch`` still needs after its charges
    (:meth:`SiloParty.begin_checkpoint`): the releases kept from an earlier ask (``validation``,
    ``counts``), which exact counts to compute, or the whole release when it was made already."""

    epoch: int
    validation: np.ndarray | None = None
    counts: np.ndarray | None = None
    needs_table: bool = False
    needs_counts: bool = False
    done: CheckpointRelease | None = None

    @property
    def needs_exact(self) -> bool:
        return self.done is None and (self.needs_table or self.needs_counts)


def checkpoint_event(noise_multiplier: float, name: str, steps: int = 1) -> Any:
    """The ledger event of ``steps`` checkpoint releases of one kind (``name``: the violation
    histogram or the validation table), each a full-batch Gaussian release of noise multiplier ``z``."""
    return MechanismEvent(name=name, sampling="full_batch", sample_rate=1.0, noise_multiplier=noise_multiplier,
                          steps=int(steps))


def silo_config(settings: SteFFLeSettings, n_records: int, plan: NoisePlan | None,
                subspace: np.ndarray | None = None, inv_sqrt_ps: np.ndarray | None = None) -> Any:
    """The Rust ``SiloConfig`` of a silo's rounds under ``plan`` (no noise without a plan), with
    ``h_θ`` projected on the columns of ``subspace`` after its noise (:mod:`pfair.privacy.subspace`)
    and, for a plan whose ``h_W`` noise is scaled row by row (``plan.w_rows``), the rows' scales: the
    released ``inv_sqrt_ps`` the kernel reads (Rust refuses a round under other ones)."""
    rows = None
    if plan is not None and plan.w_rows:
        if inv_sqrt_ps is None:
            raise ValueError("a noise plan whose h_W noise is scaled row by row needs the released proportions' "
                             "inv_sqrt_ps")
        rows = np.ascontiguousarray(np.asarray(inv_sqrt_ps, dtype=np.float64).ravel())
    sig = (plan.sigma_loss, plan.sigma_theta, plan.sigma_w) if plan is not None else (0.0, 0.0, 0.0)
    rate, _ = sample_rate_and_denominator(settings.sampling, n_records, settings.batch_size)
    return _core.SiloConfig(
        sampling=settings.sampling, batch_size=settings.batch_size, sample_rate=rate, protect=settings.protect,
        sigma_loss=sig[0], sigma_theta=sig[1], sigma_w=sig[2], send_psi=settings.sends_psi, **settings.clips(),
        subspace=subspace, clip_quantile=settings.clip_quantile, w_row_scale=rows,
    )


class SiloParty:
    """One silo (see the module docstring).

    Parameters
    ----------
    silo_id : int
        The silo's index in the federation (part of the stream derivation and of its messages).
    y, s : arrays
        The silo's label and group indices (for its DP histogram; they never leave the party).
    settings : SteFFLeSettings
    provider : a :class:`pfair.providers.GradientProvider` over the silo's records
    ledger : PrivacyLedger or None (non-private fits)
    keys : SiloKeys, default fresh from :meth:`SiloKeys.for_silo`
    n_groups, n_classes : the global encodings' sizes
    predict : ``predict(θ)``, the predicted class of each training record (default: the provider's)
    validation : ``(predict_held_out, y, s)`` of the silo's held-out records
        (:func:`pfair.validation.holdout`): ``predict_held_out(θ)`` their predicted classes; None
        when nothing is held out (the checkpoint figures then come from the training records)
    n_silo_records : records of the whole silo, training and held out (its δ and its ledger's);
        default the training records
    budget : the run's :class:`~pfair.protocol.plan.BudgetSplit` (``RunPlan.budget``); default
        the split the settings ask for (a deployed silo, which has no run plan, reads it once here)
    n_features : the records' number of features (the refusal rule's θ length for the linear model)
    checkpoint_counts : ``checkpoint_counts(θ, table, violation)``, the exact checkpoint counts
        computed where the records are held (:attr:`checkpoint_counts`); default from the predictions
    """

    def __init__(self, *, silo_id: int, y: np.ndarray, s: np.ndarray, settings: SteFFLeSettings, provider: Any,
                 ledger: PrivacyLedger | None, n_groups: int, n_classes: int, keys: SiloKeys | None = None,
                 predict: Callable[[np.ndarray], np.ndarray] | None = None,
                 validation: tuple[Callable[[np.ndarray], np.ndarray], np.ndarray, np.ndarray] | None = None,
                 n_silo_records: int | None = None, budget: BudgetSplit | None = None,
                 n_features: int | None = None,
                 checkpoint_counts: Callable[[np.ndarray, bool, bool], tuple] | None = None) -> None:
        self.silo_id = int(silo_id)
        #: The records' number of features d (the linear model's θ has (d + 1)(l − 1) entries), for
        #: the refusal rule (:attr:`refusal_dims`); None: unknown, the rule counts one direction.
        self.n_features = None if n_features is None else int(n_features)
        #: How the silo's ε is split between the p_s histogram, the checkpoint releases and the rounds.
        self.budget = budget if budget is not None else budget_split(settings)
        #: ``predict(θ)`` → the predicted class index of each of the silo's training records (for
        #: the checkpoint releases; the provider's ``predict`` if not given).
        self.predict = predict if predict is not None else getattr(provider, "predict", None)
        self.validation = validation
        #: ``checkpoint_counts(θ, table, violation)`` → the exact ``(validation table, violation
        #: histogram)`` of the silo under θ (None where not asked for), computed where its records
        #: are held (the linear model: one Rust pass, :class:`pfair.providers.linear.CheckpointCounter`);
        #: None: from :attr:`predict` and :attr:`validation`.
        self.checkpoint_counts = checkpoint_counts
        self.violation_z: float | None = None
        self.validation_z: float | None = None
        self._last_checkpoint: CheckpointRelease | None = None
        self._checkpoints: frozenset | None = None  # the settings' checkpoint epochs (frozen settings)
        self._y, self._s = y, s
        self.settings = settings
        self.provider = provider
        self.ledger = ledger
        self.n_groups, self.n_classes = int(n_groups), int(n_classes)
        self.keys = keys if keys is not None else SiloKeys.for_silo(settings)
        self.n_records = int(provider.n_records)
        self.n_silo_records = int(n_silo_records) if n_silo_records is not None else self.n_records
        self.plan: NoisePlan | None = None
        self.config = silo_config(settings, self.n_records, None)
        self.run_id: str | None = None
        self.inv_sqrt_ps: np.ndarray | None = None
        self.diagnostics: list[LocalDiagnostics] = []
        self._last: SiloMessage | None = None
        if ledger is not None and settings.private and abs(ledger.delta - settings.delta_for(self.n_silo_records)) > 0:
            raise LedgerMismatch(
                f"silo {silo_id}: its ledger's delta is {ledger.delta:g} but this fit asks for "
                f"{settings.delta_for(self.n_silo_records):g}; a silo's delta is fixed when its ledger is made "
                f"(pass delta={ledger.delta:g})"
            )

    # ------------------------------------------------------------------ the p_s round
    def release_group_counts(self) -> np.ndarray:
        """This silo's DP histogram of s per ψ block (``p_s="dp"``), charged to its ledger once:
        an earlier release of the same statistic is returned again at no cost."""
        st = self.settings
        if self.ledger is None:
            raise ValueError("p_s='dp' needs a private fit (epsilon) and a ledger")
        z_h = self.budget.histogram_noise_multiplier(self.ledger.delta)
        return mechanisms.release_histogram(
            lambda: st.notion.group_counts(self._y, self._s, n_groups=self.n_groups, n_classes=self.n_classes),
            ledger=self.ledger, event=histogram_event(z_h), key=self.keys.noise,
            release=group_counts_release(self.silo_id, st.notion.histogram_name),
            noise_multiplier=z_h, sensitivity=HISTOGRAM_SENSITIVITY,
            name=st.notion.histogram_name)

    # ------------------------------------------------------------------ planning
    @property
    def predicts(self) -> bool:
        """Whether the silo can compute its checkpoint releases (its provider predicts, or its
        exact counts are computed where its records are held)."""
        return self.predict is not None or self.checkpoint_counts is not None

    @property
    def refusal_lam(self) -> float:
        """The λ the refusal rule prices the rounds at: the run's, or 1 under a fairness target
        (whose λ adapts from 0 and is not known when the silo plans)."""
        st = self.settings
        return float(st.lam) if st.max_violation is None else max(1.0, float(st.lam))

    def _noise_plan(self, proportions: np.ndarray, total_rounds: int, ledger: PrivacyLedger | None) -> NoisePlan:
        st = self.settings
        request = NoiseRequest.of_settings(
            st, silo=self.silo_id, n_records=self.n_records, steps=total_rounds,
            delta=st.delta_for(self.n_silo_records) if st.private else None,
            lam=self.refusal_lam if st.private else None, dims=self.refusal_dims)
        return plan_silo_noise(request, proportions, ledger=ledger)

    def theta_basis(self) -> np.ndarray | None:
        """The basis of the public subspace ``h_θ`` is projected on (``theta_subspace``,
        :mod:`pfair.privacy.subspace`), computed once from this silo's training features; None
        without ``theta_subspace`` or when it is the whole space."""
        rank = self.settings.theta_subspace
        if rank is None:
            return None
        if "_theta_basis" not in self.__dict__:
            if not isinstance(self.provider, LinearProvider):
                raise ValueError(
                    f"silo {self.silo_id}: theta_subspace is for the linear model (its θ has one row per feature); "
                    f"this silo's model is {type(self.provider).__name__}. Leave theta_subspace=None")
            gram = self.provider.silo_set.gram(self.provider.index)
            self._theta_basis = principal_basis(gram, rank)
        return self._theta_basis

    @property
    def refusal_dims(self) -> int:
        """``dims`` of :func:`~pfair.privacy.calibration.noise_to_signal`: θ's length for the linear
        model (its logits read every coordinate), 1 for any other provider."""
        if isinstance(self.provider, LinearProvider) and self.n_features is not None:
            return (int(self.n_features) + 1) * (self.n_classes - 1)
        return 1

    def plan_rounds(self, proportions: np.ndarray, total_rounds: int, run_id: str | None = None,
                    reserve: tuple = ()) -> NoisePlan:
        """Calibrate this silo's noise for ``total_rounds`` rounds from the released
        ``proportions`` and what its ledger has spent, and register the run in the ledger.
        Pass the ``run_id`` of an earlier, interrupted run to resume it. ``reserve``: ledger events
        of later releases of the run to pay for in advance (a deployed silo's evaluation), so that
        the rounds are calibrated to what is left after them. Raises
        :class:`~pfair.exceptions.BudgetTooSmall` (nothing registered) when what is left cannot
        give a model better than the constant predictor."""
        st = self.settings
        proportions = self._proportions(proportions)
        ledger = self.ledger if st.private else None
        if ledger is not None:
            ledger = self._ledger_with_checkpoint_releases(reserve)
        plan = self._noise_plan(proportions, total_rounds, ledger)
        return self.adopt(plan, proportions, run_id)

    def preflight(self, total_rounds: int, reserve: tuple = ()) -> NoisePlan | None:
        """The noise plan this silo would make for the run, before anything of the run is released:
        on a scratch copy of its ledger holding the run's p_s histogram (when the run needs one the
        ledger has not released yet), its checkpoint releases and ``reserve``. Raises
        :class:`~pfair.exceptions.BudgetTooSmall` (or :class:`~pfair.exceptions.PrivacyBudgetExceeded`)
        when the silo would refuse the run; nothing is charged or registered. The rule does not
        depend on the proportions (uniform ones stand in for the released ones)."""
        st = self.settings
        if not st.private or self.ledger is None:
            return None
        extra = tuple(reserve)
        if st.p_s_source == "dp" and st.sends_psi and st.notion.histogram_name not in self.ledger.releases:
            extra += (histogram_event(self.budget.histogram_noise_multiplier(self.ledger.delta)),)
        ledger = self._ledger_with_checkpoint_releases(extra)
        props = np.full((st.notion.n_blocks(self.n_classes), self.n_groups), 1.0 / self.n_groups)
        return self._noise_plan(props, int(total_rounds), ledger)

    def _ledger_with_checkpoint_releases(self, reserve: tuple = ()) -> PrivacyLedger:
        """The ledger, or a scratch copy of it with the run's checkpoint releases that cost budget
        charged in advance (the violation histograms of a target, the validation tables of record
        mode) and the events of ``reserve``, so that the training noise is calibrated to the
        composition of everything: what the ledger holds, these releases and the rounds. Sets
        :attr:`violation_z` and :attr:`validation_z`."""
        self._checkpoint_noise()
        K = len(self.settings.checkpoint_epochs())
        if not reserve and (K == 0 or (self.violation_z is None and self.validation_z is None)):
            return self.ledger
        scratch = PrivacyLedger.from_dict(self.ledger.to_dict())
        for event in reserve:
            try:
                scratch.charge(event)
            except PrivacyBudgetExceeded as exc:
                raise PrivacyBudgetExceeded(
                    f"silo {self.silo_id}: what its ledger has left cannot pay for this run's {event.name} release(s) "
                    f"before its rounds; nothing was released. ({exc})") from None
        if K == 0:
            return scratch
        for z, name in ((self.violation_z, VIOLATION_EVENT), (self.validation_z, VALIDATION_EVENT)):
            if z is None:
                continue
            try:
                scratch.charge(checkpoint_event(z, name, K))
            except PrivacyBudgetExceeded as exc:
                share = ("max_violation_epsilon_share" if name == VIOLATION_EVENT else "validation_epsilon_share")
                raise PrivacyBudgetExceeded(
                    f"silo {self.silo_id}: what its ledger has left cannot pay for this run's {K} checkpoint releases "
                    f"({name}, {share} of epsilon); nothing was released. Start from new ledgers (ledgers='new' in a "
                    "simulation), raise the budget, or lower the share"
                    + (" or pass validation_share=0 (no validation tables)" if name == VALIDATION_EVENT else "")
                    + f". ({exc})") from None
        return scratch

    def _checkpoint_noise(self) -> None:
        """z_v and z_val of this silo's checkpoint releases: functions of public settings only (so a
        resumed run finds the same ones); None for a release that is exact or not made."""
        st = self.settings
        K = len(st.checkpoint_epochs())
        self.violation_z = self.validation_z = None
        if not st.private or self.ledger is None or K == 0:
            return
        split = self.budget
        if st.max_violation is not None:
            self.violation_z = split.violation_noise_multiplier(self.ledger.delta, K)
        if st.protect == "record":
            self.validation_z = split.validation_noise_multiplier(self.ledger.delta, K)

    def adopt(self, plan: NoisePlan, proportions: np.ndarray, run_id: str | None = None) -> NoisePlan:
        """Use ``plan`` (e.g. restored from an interrupted run) and register its run. Refuses
        (:class:`~pfair.exceptions.SettingsMismatch`) a plan made for other settings than this
        party's: its noise would not match what the messages then depend on."""
        proportions = self._proportions(proportions)
        self._check_plan(plan, proportions)
        self.plan = plan
        self.inv_sqrt_ps = inv_sqrt_proportions(proportions)
        self.config = silo_config(self.settings, self.n_records, plan, self.theta_basis(), self.inv_sqrt_ps)
        self._checkpoint_noise()
        self.run_id = run_id or uuid.uuid4().hex
        begin_run(self.ledger, plan, self.run_id)
        return plan

    def _proportions(self, proportions: np.ndarray) -> np.ndarray:
        """The released proportions as a ``blocks × k`` array of this silo's encodings; refuses any
        other shape. The kernels read them flat, by the silo's own numbers of groups and blocks,
        while the sensitivities are computed from the array's rows: proportions of another shape
        (a server's ``2 × 2`` for one block of 4 groups) would price a Δ_W the kernel does not
        have (up to √2 too small), and the noise with it."""
        st = self.settings
        props = np.asarray(proportions, dtype=np.float64)
        want = (st.notion.n_blocks(self.n_classes), self.n_groups)
        if props.shape != want:
            raise SettingsMismatch(
                f"silo {self.silo_id}: the proportions have shape {props.shape}, not {want} (one row per "
                f"{'class' if want[0] > 1 else 'block'} of {st.fairness}, one column per sensitive group); "
                "nothing was planned")
        if not np.all(np.isfinite(props)) or np.any(props <= 0):
            raise ValueError(f"silo {self.silo_id}: the proportions must be finite and > 0, got {props.tolist()}")
        return props

    def _check_plan(self, plan: NoisePlan, proportions: np.ndarray) -> None:
        """That ``plan`` was calibrated for this silo under this party's settings: the same silo
        and size, batch scheme and rate, protection, parts sent, target ε, and the sensitivities
        these settings' clip norms and fairness notion give for ``proportions``. A plan restored
        from disk or from an interrupted run is checked here before any round is answered."""
        st = self.settings
        want = {"silo": self.silo_id, "n_records": self.n_records, "target_epsilon": st.epsilon if st.private else None,
                **mechanism_terms(n_records=self.n_records, batch_size=st.batch_size, sampling=st.sampling,
                                  proportions=proportions, notion=st.notion,
                                  protect=st.protect, sends_psi=st.sends_psi, **st.clips(),
                                  w_rows=st.w_noise_rows)}
        have = plan.as_dict()
        differ = [k for k, v in want.items()
                  if not (v == have[k] or (isinstance(v, float) and isinstance(have[k], float)
                                           and np.isclose(v, have[k], rtol=1e-12, atol=0.0)))]
        if differ:
            raise SettingsMismatch(
                f"silo {self.silo_id}: its noise plan was made for other settings than the ones it is asked to "
                f"answer under ({', '.join(f'{k}: planned {have[k]!r}, now {want[k]!r}' for k in differ)}); "
                "nothing was computed or sent")

    @property
    def charges(self) -> bool:
        """Whether this silo's rounds cost privacy (private, and something sent depends on s)."""
        return (self.ledger is not None and self.plan is not None
                and 0 < self.plan.noise_multiplier < math.inf)

    def charge(self, first_round: int, count: int = 1) -> None:
        """Charge rounds ``first_round ..`` to the ledger, before they are computed. Raises
        :class:`~pfair.privacy.PrivacyBudgetExceeded` or :class:`~pfair.exceptions.ReplayRefused`."""
        if self.charges:
            mechanisms.charge_rounds(self.ledger, self.run_id, first_round, count)

    def round_charge(self) -> tuple[PrivacyLedger, str] | None:
        """What this silo's rounds are charged to, ``(ledger, run id)``, or None when they cost
        nothing: for a transport that charges many silos' epochs in one call
        (:func:`pfair.privacy.mechanisms.charge_epoch`) before computing them."""
        return (self.ledger, self.run_id) if self.charges else None

    # ------------------------------------------------------------------ a round
    def step(self, theta: np.ndarray, w: np.ndarray, round: int) -> SiloMessage:
        """The silo's reply to round ``round`` at the server's ``(θ, W)``.

        The same round asked again right after it was answered gets the same message (nothing new
        is released); any other repeated or skipped round is refused by the ledger."""
        if self.plan is None:
            raise RuntimeError(f"silo {self.silo_id} has no noise plan; call plan_rounds first")
        if self._last is not None and self._last.round == round:
            return self._last
        self.charge(int(round), 1)
        batch = self.draw_batch(round)
        if self.config.clip_quantile is not None:
            # An adaptive clip (the linear model): parts and noise in one call, since the clip is
            # chosen from the batch and scales the noise.
            parts = self.provider.noised_parts(theta, w, self.inv_sqrt_ps, batch, self.config, key=self.keys.noise,
                                               round=int(round))
            noised = (parts.loss_grad, parts.psi_theta_sfree, parts.psi_theta, parts.psi_w_sfree, parts.psi_w)
        else:
            parts = self.provider.parts(theta, w, self.inv_sqrt_ps, batch)
            rows = self.config.w_row_scale
            if rows is not None and not np.array_equal(rows, self.inv_sqrt_ps):
                # noise_message cannot see the proportions the parts were computed with (the Rust
                # rounds check them): h_W's rows must be noised by the scales the provider gave them.
                raise RuntimeError(f"silo {self.silo_id}: its noise config scales h_W's rows for other proportions "
                                   "than its parts were computed with; nothing was sent")
            noised = _core.noise_message(
                parts.loss_grad, parts.psi_theta_sfree, parts.psi_theta, parts.psi_w_sfree, parts.psi_w, self.config,
                key=self.keys.noise, silo=self.silo_id, round=int(round),
            )
        if not all(np.all(np.isfinite(part)) for part in noised):
            # The kernel keeps every part that depends on what the silo protects finite, whatever
            # θ and W are (probabilities stay probabilities, an overflowing record is clipped to
            # 0); a part sent exactly can still overflow under a hostile θ or W. Nothing is sent.
            raise FloatingPointError(f"silo {self.silo_id}: the reply to round {round} at the server's θ and W is not "
                                     "finite (an overflow); nothing was sent")
        msg = SiloMessage(self.silo_id, int(round), *noised)
        self.diagnostics.append(LocalDiagnostics(int(round), int(len(batch)), float(parts.loss), float(parts.psi),
                                                 int(parts.n_clipped)))
        self._last = msg
        return msg

    # ------------------------------------------------------------------ the checkpoint releases
    def release_checkpoint(self, theta: np.ndarray, epoch: int) -> CheckpointRelease:
        """This silo's release after the checkpoint ``epoch`` under the published ``θ``
        (:mod:`pfair.validation`): its validation table, exact in attribute mode (x and y only) and
        in a non-private fit, else charged (one full-batch Gaussian event, noise multiplier
        :attr:`validation_z`, sensitivity √2) and noised with the silo's own key; with a fairness
        target also its violation histogram of all its records (:attr:`violation_z`, √2). Each
        charge is made before anything is computed. The same epoch of the same run asked again
        gets the same release at no cost (a private release is kept in the ledger, so this holds
        across processes too).

        In three steps, which a transport may run for many silos at once (charge every silo, one
        pass over all their records, then each silo noises its own): :meth:`begin_checkpoint`,
        :meth:`exact_checkpoint`, :meth:`finish_checkpoint`."""
        req = self.begin_checkpoint(theta, epoch)
        if req.done is not None:
            return req.done
        table, counts = self.exact_checkpoint(theta, table=req.needs_table, violation=req.needs_counts)
        return self.finish_checkpoint(req, table, counts)

    def begin_checkpoint(self, theta: np.ndarray, epoch: int) -> "CheckpointRequest":
        """Check that ``epoch`` is a checkpoint of the run and charge its releases (validation
        table, then violation histogram) to the ledger, before anything is computed; say what
        must be computed (a release kept in the ledger from an earlier ask is reused at no cost).
        Raises :class:`~pfair.privacy.PrivacyBudgetExceeded` when the ledger refuses (when it
        refuses the histogram after charging the table, the table under ``θ`` is released first and
        kept in the ledger, as when the two were charged and released one after the other)."""
        st = self.settings
        if self._checkpoints is None:
            self._checkpoints = frozenset(st.checkpoint_epochs())
        if int(epoch) not in self._checkpoints:
            # The ledger planned these epochs' releases only.
            raise ValueError(f"silo {self.silo_id}: this run releases its validation figures after the checkpoint "
                             f"epochs {sorted(self._checkpoints)} only, not after epoch {int(epoch)}")
        if self._last_checkpoint is not None and self._last_checkpoint.epoch == epoch:
            return CheckpointRequest(int(epoch), done=self._last_checkpoint)
        if self.predict is None and self.checkpoint_counts is None:
            raise NotImplementedError("checkpoint releases need the silo's predictions, which this gradient provider "
                                      "does not offer (no predict(theta)); use pfair.SteFFLe, pfair.torch.DeepSteFFLe "
                                      "or validation_share=0 and checkpoints with a provider that predicts")
        if st.private and (self.ledger is None or self.run_id is None):
            raise RuntimeError(f"silo {self.silo_id} has not planned its releases; call plan_rounds first")
        req = CheckpointRequest(int(epoch))
        if self.validation_z is not None:
            req.validation = mechanisms.charge_release(**self._release_args(VALIDATION_EVENT, epoch), event=checkpoint_event(
                self.validation_z, VALIDATION_EVENT))
        req.needs_table = req.validation is None
        if st.max_violation is not None:
            req.needs_counts = True
            if self.violation_z is not None:
                try:
                    req.counts = mechanisms.charge_release(**self._release_args(VIOLATION_EVENT, epoch),
                                                           event=checkpoint_event(self.violation_z, VIOLATION_EVENT))
                except PrivacyBudgetExceeded:
                    if self.validation_z is not None and req.needs_table:
                        # The table was charged: release it (kept in the ledger), as a silo that
                        # answers one release and refuses the next does.
                        self._noised(VALIDATION_EVENT, epoch, self.exact_checkpoint(theta, table=True, violation=False)[0])
                    raise
                req.needs_counts = req.counts is None
        return req

    def exact_checkpoint(self, theta: np.ndarray, *, table: bool, violation: bool
                         ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The exact ``(validation table, violation histogram)`` of this silo under ``θ`` (each
        None when not asked for): from :attr:`checkpoint_counts` where the records are held (the
        linear model's one Rust pass), else from its predictions (:attr:`predict`,
        :attr:`validation`). Silo-local: released only through :meth:`finish_checkpoint`."""
        if not (table or violation):
            return None, None
        if self.checkpoint_counts is not None:
            return self.checkpoint_counts(theta, table, violation)
        st = self.settings
        cache: dict[str, np.ndarray] = {}

        def train_pred() -> np.ndarray:
            if "train" not in cache:
                cache["train"] = np.asarray(self.predict(theta), dtype=np.int64)
            return cache["train"]

        def held_pred() -> np.ndarray:
            if "held" not in cache:
                cache["held"] = np.asarray(self.validation[0](theta), dtype=np.int64)
            return cache["held"]

        val = counts = None
        if table:
            val = (validation_table(self._y, train_pred(), self.n_classes) if self.validation is None
                   else validation_table(self.validation[1], held_pred(), self.n_classes))
        if violation:
            kw = dict(n_groups=self.n_groups, n_classes=self.n_classes)
            counts = st.notion.violation_counts(self._y, train_pred(), self._s, **kw)
            if self.validation is not None:
                counts = counts + st.notion.violation_counts(self.validation[1], held_pred(), self.validation[2], **kw)
        return val, counts

    def finish_checkpoint(self, req: "CheckpointRequest", table: np.ndarray | None,
                          counts: np.ndarray | None) -> CheckpointRelease:
        """The release of ``req`` (:meth:`begin_checkpoint`) from the exact ``table`` and
        ``counts`` (:meth:`exact_checkpoint`): noised with the silo's own key where charged,
        exact otherwise."""
        if req.done is not None:
            return req.done
        st = self.settings
        val = req.validation
        if val is None:
            val = table if self.validation_z is None else self._noised(VALIDATION_EVENT, req.epoch, table)
        viol = None
        if st.max_violation is not None:
            viol = req.counts
            if viol is None:
                viol = counts if self.violation_z is None else self._noised(VIOLATION_EVENT, req.epoch, counts)
        self._last_checkpoint = CheckpointRelease(self.silo_id, req.epoch, val, viol)
        return self._last_checkpoint

    def _release_args(self, kind: str, epoch: int) -> dict:
        """The ledger, release id, noise and name of this silo's checkpoint release ``kind``
        (:data:`VALIDATION_EVENT` or :data:`VIOLATION_EVENT`) after ``epoch``."""
        run = release_run(self.ledger, self.run_id)
        if kind == VALIDATION_EVENT:
            return dict(ledger=self.ledger, release=validation_release(self.silo_id, run, int(epoch)),
                        noise_multiplier=self.validation_z, sensitivity=VALIDATION_SENSITIVITY,
                        name=f"{VALIDATION_EVENT}:{self.run_id}:{int(epoch)}")
        return dict(ledger=self.ledger, release=violation_release(self.silo_id, run, int(epoch)),
                    noise_multiplier=self.violation_z, sensitivity=VIOLATION_SENSITIVITY,
                    name=f"{VIOLATION_EVENT}:{self.run_id}:{int(epoch)}")

    def _noised(self, kind: str, epoch: int, exact: np.ndarray) -> np.ndarray:
        """``exact`` released with the noise of this silo's checkpoint release ``kind`` (charged)."""
        return mechanisms.noise_release(exact, key=self.keys.noise, **self._release_args(kind, epoch))

    def draw_batch(self, round: int) -> np.ndarray:
        """Row indices of the batch of ``round`` (keyed by the batch key; see :class:`SiloKeys`)."""
        return _core.draw_batch(self.config, self.n_records, key=self.keys.batch, silo=self.silo_id, round=int(round))
