"""The linear-softmax model's gradient provider: the Rust kernel (``rust/src/psi/kernel.rs``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pfair.providers.base import BatchParts, constant_probabilities


def constant_theta(n_features: int, n_classes: int, cls: int, share: float) -> np.ndarray:
    """θ of the constant predictor of class ``cls`` for the linear-softmax model: zero weights and
    the intercepts ``b_c = log(p_c / p_0)`` (class 0 the reference) of the class probabilities
    ``p_cls = share`` (its share of the held-out records) and ``(1 − share)/(l − 1)`` for each other
    class, so ``predict`` gives ``cls`` to everyone and ``predict_proba`` those shares. Post-processing
    of the released validation tables (where ``cls`` and ``share`` come from)."""
    d, l = int(n_features), int(n_classes)  # noqa: E741
    probs = constant_probabilities(l, cls, share)
    theta = np.zeros((d + 1, l - 1))
    # Every other class has the same probability q (as class 0 when cls ≠ 0, whose logits are then
    # 0): ``cls`` must win argmax also where p = q up to rounding (all shares equal, when the table's
    # first largest class is ``cls``).
    if int(cls) == 0:
        theta[d] = np.minimum(np.log(probs[1:] / probs[0]), 0.0)
    else:
        theta[d, int(cls) - 1] = max(math.log(probs[int(cls)] / probs[0]), 1e-12)
    return theta.reshape(-1)


def linear_constant(n_features: int, n_classes: int, cls: int, share: float, theta: Any = None) -> np.ndarray:
    """:func:`constant_theta` in the form the assembler takes (``constant(c, p, θ)``; θ unused)."""
    return constant_theta(n_features, n_classes, cls, share)


class LinearProvider:
    """Parts of silo ``index`` of a Rust ``SiloSet`` (which holds the silos' data once), with the
    sampling denominator, protection mode and clip norms of ``config`` (a ``_core.SiloConfig``)."""

    def __init__(self, silo_set: Any, index: int, config: Any) -> None:
        self.silo_set = silo_set
        self.index = int(index)
        self.config = config
        self.n_records = int(silo_set.sizes[self.index])

    def parts(self, theta: np.ndarray, w: np.ndarray, inv_sqrt_ps: np.ndarray, batch: np.ndarray) -> BatchParts:
        out = self.silo_set.parts(self.index, theta, w, inv_sqrt_ps, batch, self.config)
        return BatchParts(**out)

    def noised_parts(self, theta: np.ndarray, w: np.ndarray, inv_sqrt_ps: np.ndarray, batch: np.ndarray, config: Any,
                     *, key: Any, round: int) -> BatchParts:
        """The parts of ``batch`` clipped as ``config`` says (a fixed clip, or the adaptive clip of
        the batch) with round ``round``'s noise from ``key``, in one Rust call
        (``SiloSet.noised_parts``): what :meth:`parts` then ``_core.noise_message`` give for a
        fixed clip, bit for bit."""
        out = self.silo_set.noised_parts(self.index, theta, w, inv_sqrt_ps, batch, config, key=key, round=int(round))
        return BatchParts(**out)


class CheckpointCounter:
    """The exact checkpoint counts of the linear model's silos (:mod:`pfair.validation`), computed
    in Rust where the records are held (``SiloSet.checkpoint_counts``: CSR, or rows of the user's
    matrix read in place in its own dtype; nothing is copied to float64): one pass over the
    training silos and one over the held-out silos per checkpoint, all silos at once.

    ``train``: the ``SiloSet`` of the silos' training records; ``held``: the ``SiloSet`` of the
    silos that hold records out (None: none does), and ``held_index[j]`` silo j's index in it
    (None: silo j holds nothing out); ``share``: the validation share (0: the tables count the
    training records). A silo's validation table counts its held-out records (all zeros when it
    could hold none out), or with ``share = 0`` its training records; its violation histogram
    counts all its records, training and held out.

    The predicted class of a record is the first largest of its class probabilities computed from
    its row in float64 (``rust/src/checkpoint.rs``), the class ``argmax predict_proba`` gives."""

    def __init__(self, train: Any, held: Any, held_index: list, *, share: float, n_classes: int) -> None:
        self.train, self.held, self.held_index = train, held, list(held_index)
        self.share, self.n_classes = float(share), int(n_classes)

    def counts(self, theta: np.ndarray, silos: list[int], *, table: bool, violation: bool) -> dict:
        """``{j: (table, histogram)}`` of the silos ``silos`` under θ (None where not asked for)."""
        theta = np.ascontiguousarray(theta, dtype=np.float64)
        silos = [int(j) for j in silos]
        if not silos or not (table or violation):
            return {j: (None, None) for j in silos}
        if table and not violation and self.share > 0 and self.held is not None and None not in (
                index := [self.held_index[j] for j in silos]):
            # The checkpoint of a fit without a target (the default): one pass over the held-out rows.
            tabs, _ = self.held.checkpoint_counts(theta, table=True, violation=False, silos=index)
            return {j: (t, None) for j, t in zip(silos, tabs)}
        out: dict = {j: [None, None] for j in silos}
        from_train = table and self.share <= 0
        if from_train or violation:
            tabs, hists = self.train.checkpoint_counts(theta, table=from_train, violation=violation, silos=silos)
            for i, j in enumerate(silos):
                out[j] = [tabs[i] if from_train else None, hists[i] if violation else None]
        if self.share > 0:
            held = [j for j in silos if self.held_index[j] is not None]
            if table:  # a silo too small to hold any record out: an all-zero table
                l = self.n_classes  # noqa: E741
                for j in silos:
                    if self.held_index[j] is None:
                        out[j][0] = np.zeros((l, l))
            if held:
                tabs, hists = self.held.checkpoint_counts(theta, table=table, violation=violation,
                                                          silos=[self.held_index[j] for j in held])
                for i, j in enumerate(held):
                    if table:
                        out[j][0] = tabs[i]
                    if violation:
                        out[j][1] = out[j][1] + hists[i]
        return {j: tuple(v) for j, v in out.items()}

    def for_silo(self, j: int):
        """``checkpoint_counts(θ, table, violation)`` of silo ``j`` alone (:class:`SiloParty`)."""
        def one(theta: np.ndarray, table: bool, violation: bool) -> tuple:
            return self.counts(theta, [j], table=table, violation=violation)[j]
        return one
