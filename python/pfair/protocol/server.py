"""The server as a party of the protocol: check every reply, then one Rust ``server_update``.

:meth:`ServerParty.update` is the whole server side of a round. It validates each
:class:`~pfair.protocol.SiloMessage` (its silo is expected, the round is the current one, every
part is present with the right length, float, finite, and the noised parts' norms are within what
the clip norms and noise scales make possible), drops what fails (logged, never averaged in),
renormalises the weights of the silos that answered, and calls the Rust ``server_update``:

    θ ← θ − η_θ Σ_j ω_j [g_j + λ(a_θ,j + h_θ,j)],     W ← Π_D(W + λ η_W Σ_j ω_j [a_W,j + h_W,j])

with ``η_θ`` decayed by ``lr_decay`` every ``decay_every`` epochs, divided by ``max(1, λ)`` with
``theta_step="scaled"`` and halved at each cycle the released validation error shows
(:meth:`SteFFLeSettings.lr_at`, :func:`pfair.protocol.driver.damp_cycles`), and each W block projected on the
Frobenius ball of radius D. The ``η_W`` passed is :meth:`SteFFLeSettings.server_lr_w`: ``lr_w / λ``
by default (``w_step="normalised"``, so W moves by ``lr_w ∇_W ψ̄`` at every λ), ``lr_w`` with
``w_step="paper"``; a choice of the server on released messages, so privacy is unchanged. The simulation's fast path runs the same Rust function.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from pfair import _core
from pfair.fairness_target import LambdaController, implausible
from pfair.notions import FairnessNotion
from pfair.protocol.messages import PARTS, CheckpointRelease, SiloMessage
from pfair.settings import SteFFLeSettings
from pfair.validation import CheckpointFigures, exact_cells, exact_figures, pooled_figures

log = logging.getLogger("pfair.server")

#: A noised part's norm exceeds ``bound + σ (√D + TAIL)`` with probability below e^{-TAIL²/2}.
TAIL = 8.0


@dataclass(frozen=True)
class ReplyLimits:
    """What a silo's reply may look like: part lengths and the largest plausible norms of the
    s-dependent parts (``inf``: not checked)."""

    lengths: dict
    max_norms: dict


def reply_limits(*, theta_len: int, w_len: int, settings: SteFFLeSettings, plan: Any,
                 inv_sqrt_ps: np.ndarray) -> ReplyLimits:
    """Limits for a silo with noise ``plan`` (a :class:`~pfair.privacy.calibration.NoisePlan`).

    Without noise, ``‖h_θ‖ ≤ C_θ · n_j / m`` (every record clipped to C_θ, at most n_j of them,
    divided by the fixed m) and ``‖h_W‖ ≤ 2 max p^{-1/2} · n_j / m`` (‖c_i‖ ≤ 2 p(s_i)^{-1/2}); in
    record mode ``‖h_W‖ ≤ C_W n_j / m`` and ``‖g‖ ≤ C_loss n_j / m``. Gaussian noise of std σ in
    D coordinates adds at most ``σ(√D + 8)`` except with probability < 1.3e-14.
    """
    lengths = {"loss_grad": theta_len, "psi_theta_sfree": theta_len, "psi_theta": theta_len,
               "psi_w_sfree": w_len, "psi_w": w_len}
    inf = math.inf
    norms = {p: inf for p in PARTS}
    if plan is not None and settings.clip is not None:
        scale = plan.n_records / plan.denominator
        c = settings.clips()
        w_bound = (c["clip_w"] if settings.protect == "record" else 2.0 * float(np.max(inv_sqrt_ps))) * scale
        if not settings.adaptive_clip:
            # An adaptive clip (a round's own C_t, which the server does not see) leaves h_θ unchecked,
            # as the exact s-free parts are.
            norms["psi_theta"] = c["clip_theta"] * scale + plan.sigma_theta * (math.sqrt(theta_len) + TAIL)
        # Row-scaled noise (plan.w_rows): std σ_r on row r's coordinates; its norm is at most
        # (Σ σ_r² l)^{1/2} + max σ_r · 8 with the same probability (Gaussian concentration of a
        # max σ_r-Lipschitz function), which is σ(√D + 8) when every σ_r is σ.
        stds = plan.w_noise_stds(inv_sqrt_ps)
        per_row = w_len / max(1, stds.size)
        norms["psi_w"] = w_bound + math.sqrt(float(np.sum(stds ** 2)) * per_row) + float(np.max(stds)) * TAIL
        if settings.protect == "record":
            norms["loss_grad"] = c["clip_loss"] * scale + plan.sigma_loss * (math.sqrt(theta_len) + TAIL)
    return ReplyLimits(lengths, norms)


def check_header(msg: Any, kind: type, *, silo: Any, round: int, who: str = "silo") -> str | None:
    """Why ``msg`` is not a ``kind`` from ``silo`` answering ``round`` (None if it is)."""
    if not isinstance(msg, kind):
        return f"not a {kind.__name__} but {type(msg).__name__}"
    if msg.silo != silo:
        return f"claims to come from {who} {msg.silo!r}, expected {silo!r}"
    if msg.round != round:
        return f"answers round {msg.round}, the current round is {round}"
    return None


def check_part(v: Any, name: str, length: int, max_norm: float = math.inf) -> str | None:
    """Why a message part must be rejected (not a 1-D float array of ``length`` finite values with
    a norm at most ``max_norm``), or None."""
    if not isinstance(v, np.ndarray) or v.ndim != 1:
        return f"part {name} is not a 1-D array"
    if v.dtype.kind != "f":
        return f"part {name} has dtype {v.dtype}, expected float"
    if v.shape[0] != length:
        return f"part {name} has length {v.shape[0]}, expected {length}"
    if not np.all(np.isfinite(v)):
        return f"part {name} has NaN or inf"
    nrm = float(np.linalg.norm(v))
    if nrm > max_norm:
        return f"part {name} has norm {nrm:.4g}, more than the clip norms and noise allow ({max_norm:.4g})"
    return None


def check_message(msg: Any, *, silo: Any, round: int, limits: ReplyLimits) -> str | None:
    """Why ``msg`` must be rejected, or None if it is acceptable."""
    reason = check_header(msg, SiloMessage, silo=silo, round=round)
    for p in PARTS:
        if reason is not None:
            return reason
        reason = check_part(getattr(msg, p), p, limits.lengths[p], limits.max_norms[p])
    return reason


class ServerParty:
    """The server of a SteFFLe run (see the module docstring).

    Parameters
    ----------
    settings : SteFFLeSettings
    weights : one weight ω_j per silo (summing to 1: uniform, or by size)
    limits : one :class:`ReplyLimits` per silo
    block_len : k·l, the size of one W block
    rounds_per_epoch : for the step-size schedule
    """

    def __init__(self, *, settings: SteFFLeSettings, weights: Sequence[float], limits: Sequence[ReplyLimits],
                 block_len: int, rounds_per_epoch: int) -> None:
        self.settings = settings
        self.weights = np.asarray(weights, dtype=np.float64)
        self.limits = list(limits)
        self.block_len = int(block_len)
        self.rounds_per_epoch = int(rounds_per_epoch)
        self.rejected: list[tuple[int, Any, str]] = []
        #: λ of the current epoch: ``lam``, or adapted to ``max_violation`` by :attr:`controller`.
        self.lam = settings.lam_initial
        self.controller = (LambdaController(target=float(settings.max_violation), lr=float(settings.lam_lr))
                           if settings.max_violation is not None else None)

    #: Factor on η_θ from the damping of cycles (:func:`pfair.protocol.driver.damp_cycles`).
    lr_scale: float = 1.0

    def lr_of_epoch(self, epoch: int) -> float:
        """η_θ of ``epoch``: :meth:`SteFFLeSettings.lr_at` at the current λ, times :attr:`lr_scale`."""
        return self.settings.lr_at(epoch, self.lam) * self.lr_scale

    def lr_theta(self, round: int) -> float:
        return self.lr_of_epoch(round // self.rounds_per_epoch)

    def accept(self, messages: Sequence[tuple[Any, Any]], round: int) -> list[tuple[int, SiloMessage]]:
        """The valid ``(silo, message)`` pairs of a round; the others are logged and recorded in
        :attr:`rejected` (a failed silo may send ``None``)."""
        ok = []
        for silo, msg in messages:
            if msg is None:
                reason = "no reply"
            elif not (isinstance(silo, (int, np.integer)) and 0 <= silo < len(self.limits)):
                reason = f"unknown silo {silo!r}"
            else:
                reason = check_message(msg, silo=silo, round=round, limits=self.limits[silo])
            if reason is None:
                ok.append((int(silo), msg))
            else:
                log.warning("round %d: rejected the reply of silo %r: %s", round, silo, reason)
                self.rejected.append((round, silo, reason))
        return ok

    def update(self, theta: np.ndarray, w: np.ndarray, messages: Sequence[tuple[Any, Any]],
               round: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """One server step from the replies ``(silo, message)`` of ``round``; returns the new
        ``(θ, W)`` and the silos whose replies were used. With no valid reply θ and W stay."""
        ok = self.accept(messages, round)
        if not ok:
            log.warning("round %d: no valid reply; the model is unchanged", round)
            return np.asarray(theta, dtype=np.float64), np.asarray(w, dtype=np.float64), []
        om = self.weights[[j for j, _ in ok]]
        om = om / om.sum()
        st = self.settings
        th, wv = _core.server_update(
            np.ascontiguousarray(theta, dtype=np.float64), np.ascontiguousarray(w, dtype=np.float64), self.block_len,
            [m.parts() for _, m in ok], om.tolist(), lam=float(self.lam), lr_theta=self.lr_theta(round),
            lr_w=st.server_lr_w(self.lam), w_radius=float(st.w_radius or math.inf),
        )
        return th, wv, [j for j, _ in ok]

    # ------------------------------------------------------------------ the checkpoints
    def read_checkpoint(self, releases: Sequence[tuple[Any, Any]], epoch: int, *, n_classes: int,
                        limits: dict | None = None, epochs_since: int = 1) -> CheckpointFigures | None:
        """Consume the silos' :class:`CheckpointRelease` of ``epoch`` (post-processing): check them,
        pool the valid ones' validation tables (and violation histograms, with a target) into
        :class:`~pfair.validation.CheckpointFigures`, and with a target take the dual step on λ
        (``epochs_since`` epochs at the current λ; halved when the figures show the model no better
        than the constant predictor, :attr:`~pfair.validation.CheckpointFigures.shown_not_better`). Returns None (λ unchanged) when no release was valid.

        ``limits`` maps a silo to ``(n_validation, validation_std, n_records, violation_std)``: the
        records its table and its histogram count and the noise std of one of their cells (0: exact,
        so the table must add up to exactly ``n_validation``). Counts that such records plus such
        noise cannot produce are rejected (:func:`pfair.fairness_target.implausible`)."""
        st = self.settings
        l = int(n_classes)  # noqa: E741
        target = self.controller is not None
        if not target:
            exact = self._exact_releases(releases, epoch, l, limits)
            if exact is not None:
                return exact_figures(exact[0], l, epoch=epoch, noise_sd=max(exact[1]), lam=float(self.lam))
        shape = (st.notion.n_blocks(l), self.block_len // l, l)
        tables, hists, stds = [], [], []
        for silo, rel in releases:
            reason = self._check_checkpoint(silo, rel, epoch, l, shape, st.notion if target else None, limits)
            if reason is None:
                tables.append(np.asarray(rel.validation, dtype=np.float64))
                if target:
                    hists.append(np.asarray(rel.counts, dtype=np.float64))
                stds.append(limits[silo][1] if limits is not None else 0.0)
            else:
                log.warning("epoch %d: rejected the checkpoint release of silo %r: %s", epoch, silo, reason)
                self.rejected.append((epoch, silo, "checkpoint release: " + reason))
        if not tables:
            log.warning("epoch %d: no valid checkpoint release%s", epoch,
                        f"; lambda stays {self.lam:g}" if target else "")
            return None
        v = sd_v = None
        if target:
            pooled = np.sum(hists, axis=0)
            v = st.notion.violation_from_counts(pooled)
            std = max(limits[j][3] for j, _ in releases if j in limits) if limits else 0.0
            sd_v = st.notion.violation_sd(pooled, std=std * math.sqrt(len(hists)))
        fig = pooled_figures(tables, epoch=epoch, noise_sd=max(stds), violation=v, violation_sd=sd_v or 0.0,
                             lam=float(self.lam))
        if fig is None:
            return None
        if target:
            # Halved where the figures show the model no better than the constant predictor at the
            # guard's level (not its point estimate: on a small held-out share that is above the
            # constant's by chance at every other checkpoint, and λ was halved back each time).
            self.lam = self.controller.update(v, epochs=epochs_since, inverting=fig.shown_not_better)
        return fig

    @staticmethod
    def _exact_releases(releases: Sequence[tuple[Any, Any]], epoch: int, l: int,  # noqa: E741
                        limits: dict | None) -> tuple[list, list] | None:
        """The common case of a checkpoint without a fairness target, read without NumPy: when
        every release is valid (the checks of :meth:`_check_checkpoint`) and its validation table
        is exact (:func:`~pfair.validation.exact_cells`: float64 cells that are integers below
        2⁵³, as every table released without noise is), ``(the tables' cells, their noise stds)``;
        else None, and the caller takes the general path, which rejects what must be rejected and
        logs why. The figures pooled from these cells are those of the general path, bit for bit:
        both pool the same integers (:func:`~pfair.validation.pooled_figures`), and the total the
        plausibility check reads is exact, hence NumPy's sum."""
        if not releases:
            return None
        cells, stds = [], []
        for silo, rel in releases:
            if type(rel) is not CheckpointRelease or rel.silo != silo or rel.epoch != epoch:
                return None
            v = rel.validation
            if type(v) is not np.ndarray or v.shape != (l, l):
                return None
            c = exact_cells(v)
            if c is None:
                return None
            if limits is not None:
                if silo not in limits:
                    return None
                n, std = limits[silo][0], limits[silo][1]
                if implausible(v, n_records=n, std=std, every_record=True, cells=c, total=float(sum(c))) is not None:
                    return None
                stds.append(std)
            else:
                stds.append(0.0)
            cells.append(c)
        return cells, stds

    @staticmethod
    def _check_checkpoint(silo: Any, rel: Any, epoch: int, l: int, shape: tuple,  # noqa: E741
                          notion: FairnessNotion | None, limits: dict | None) -> str | None:
        """Why a checkpoint release is rejected (None: it is valid). ``notion``: the fairness
        notion of the violation histogram it must hold (None: no target, no histogram)."""
        if not isinstance(rel, CheckpointRelease):
            return "no reply" if rel is None else f"not a CheckpointRelease but {type(rel).__name__}"
        if rel.silo != silo or rel.epoch != epoch:
            return f"claims silo {rel.silo!r} epoch {rel.epoch}, expected silo {silo!r} epoch {epoch}"
        if limits is not None and silo not in limits:
            return f"unknown silo {silo!r}"
        # (name, array, shape, whether it counts every record, index of its (n, std) in limits)
        parts = [("validation table", rel.validation, (l, l), True, 0)]
        if notion is not None:
            parts.append(("violation histogram", rel.counts, shape, notion.covers_every_record, 2))
        for name, arr, want, every, at in parts:
            reason = check_counts(arr, name, want, None if limits is None else limits[silo][at:at + 2], every)
            if reason is not None:
                return reason
        return None


def check_counts(arr: Any, name: str, shape: tuple, limit: tuple | None, every_record: bool) -> str | None:
    """Why the counts ``arr`` of a checkpoint release (its validation table or violation histogram,
    ``name``) must be rejected, or None: not a float array of ``shape`` with finite cells, or (with
    ``limit = (n, std)``: the records it counts and the noise std of one cell, 0 when exact) counts
    that such records plus such noise cannot produce (:func:`pfair.fairness_target.implausible`)."""
    if arr is None:
        return f"no {name}"
    c = np.asarray(arr)
    if c.shape != shape:
        return f"the {name} has shape {c.shape}, expected {shape}"
    if c.dtype.kind != "f":
        return f"the {name} has dtype {c.dtype}, expected float"
    cells = c.ravel().tolist()  # a few cells: cheaper as a list than in two NumPy calls
    if not all(map(math.isfinite, cells)):
        return f"the {name} has NaN or inf"
    if limit is not None:
        why = implausible(c, n_records=limit[0], std=limit[1], every_record=every_record,
                          cells=cells if c.dtype == np.float64 else None)
        if why is not None:
            return f"the {name}: {why}"
    return None
