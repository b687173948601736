"""Fairness notions as objects: what the ψ-term, the p_s histogram, a fairness target and the
reports need to know about a notion, in one class per notion.

The model is fairlearn's reductions ``Moment`` classes, where a constraint assigns each record an
*event* and compares the groups' rates within each event. Here a notion assigns each record a
*block* from the record's label only (the ψ-term of Lowy et al., "A stochastic optimization
framework for fair risk minimization", 2022, conditions on what is known at training time, so a
block may depend on ``y`` but never on the prediction), or none when the record is outside the
penalty. Everything else follows from the block:

* the ψ-term has one dual block ``W_b`` (``k × l``) and one row of proportions ``p(s = r | b)``
  per block (``n_blocks``);
* the p_s histogram counts ``c[b, r] = #{i : block(y_i) = b, s_i = r}`` (:meth:`group_counts`);
* a fairness target's violation histogram counts ``c[b, r, ŷ]`` (:meth:`violation_counts`) and
  the violation is the largest gap, over blocks and the compared predicted classes, of the
  groups' rates ``P(ŷ = c | s = r, b)`` (:meth:`violation_from_counts`), which is the public
  metric (:meth:`metric`) on exact counts.

The Rust kernel has the same notions (``Fairness`` in ``rust/src/psi/types.rs``, whose ``block``
is :meth:`FairnessNotion.blocks_of` for one record); a notion crosses the binding as its ``name``
and positive class (:meth:`FairnessNotion.core_args`). Adding a notion is one subclass here (the
registry :data:`NOTIONS` picks it up) and one arm of that enum.

A public name (``fairness="equalized_odds"``) becomes an object in one place,
:func:`pfair._validation.resolve_fairness`; every module below the estimators takes the object.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np


def _plain(value: object) -> object:
    """A label or group as a plain Python value for a message: a NumPy scalar's ``.item()``, other
    values (a label name of a Dataset's Federation, a string) as they are."""
    return value.item() if isinstance(value, np.generic) else value


#: The notions by public name, in the order they were added (filled by subclassing).
NOTIONS: dict[str, type["FairnessNotion"]] = {}
#: Prefix of the ledger key of a silo's released histogram of s (:attr:`FairnessNotion.histogram_name`).
HISTOGRAM_PREFIX = "p_s_histogram:"


@dataclass(frozen=True)
class FairnessNotion:
    """A fairness notion: the blocks of the ψ-term and what follows from them.

    ``positive`` is the index of the positive class; only notions with
    :attr:`uses_positive` read it (the others carry it unread, as the Rust enum ignores it)."""

    positive: int = 1

    #: Public name (``fairness=`` of the estimators, ``--fairness`` of the command line).
    name: ClassVar[str] = ""
    #: Name of the public metric in :mod:`pfair.metrics` (fairlearn's name where fairlearn has it).
    metric_name: ClassVar[str] = ""
    #: Whether the blocks depend on the positive class.
    uses_positive: ClassVar[bool] = False
    #: Whether every record is in some block (else a histogram may count fewer than ``n`` records).
    covers_every_record: ClassVar[bool] = True
    #: Whether the block of a record depends on its label (a holder of s alone cannot count it).
    needs_labels: ClassVar[bool] = True

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.name:
            NOTIONS[cls.name] = cls

    # ------------------------------------------------------------------ the blocks
    def n_blocks(self, n_classes: int) -> int:
        """Number of ψ blocks (rows of ``p_s``, ``W`` blocks)."""
        return 1

    def blocks_of(self, y: np.ndarray) -> np.ndarray:
        """The block of each record from its label index (int64; −1: outside the penalty)."""
        raise NotImplementedError

    def compared_classes(self, n_classes: int) -> Sequence[int]:
        """The predicted classes ``c`` whose rates ``P(ŷ = c | s, b)`` the violation compares."""
        return range(int(n_classes))

    def describe_block(self, b: int, classes: np.ndarray) -> str:
        """Which records block ``b`` holds, for error messages (``classes``: the label values)."""
        raise NotImplementedError

    def check_classes(self, n_classes: int) -> None:
        """Raise if the positive class is not a class index (for notions that read it)."""
        self._check_index()
        if self.uses_positive and not 0 <= self.positive < int(n_classes):
            raise ValueError(f"positive_class={self.positive} is not a class index in 0..{int(n_classes) - 1}")

    def _check_index(self) -> None:
        """A label given as ``positive_class`` is turned into its class index by ``fit``, which sees
        the labels; settings used without a fit (a deployment's run config, a server) need the
        index itself."""
        if not isinstance(self.positive, (int, np.integer)) or isinstance(self.positive, (bool, np.bool_)):
            raise ValueError(f"positive_class={self.positive!r} is a label: fit resolves a label against the labels "
                             "it sees, but these settings are used without a fit (a deployment, a run config); pass "
                             "the class index instead (the label's position among the sorted labels, classes_)")

    def core_args(self) -> dict:
        """The notion as the Rust bindings take it (``fairness=``, ``positive=``)."""
        self._check_index()
        return {"fairness": self.name, "positive": int(self.positive)}

    @property
    def histogram_name(self) -> str:
        """Key of a silo's released histogram of s in its ledger (also the subject of its noise
        stream): the name, and the positive class where the blocks depend on it."""
        return f"{HISTOGRAM_PREFIX}{self.name}" + (f":{self.positive}" if self.uses_positive else "")

    # ------------------------------------------------------------------ counts
    def group_counts(self, y: np.ndarray, s: np.ndarray, *, n_groups: int, n_classes: int) -> np.ndarray:
        """Counts ``c[b, r]`` of group ``r`` in each block (``blocks × k``, float64) of one silo's
        records. A record changes one cell by one; one record's change (its s, or the whole
        record) moves one unit between two cells, or adds or removes one unit when a side is
        outside every block: L2 norm at most √2."""
        k, B = int(n_groups), self.n_blocks(n_classes)
        b = self.blocks_of(np.asarray(y, dtype=np.int64))
        keep = b >= 0
        s = np.asarray(s, dtype=np.int64)
        return np.bincount(b[keep] * k + s[keep], minlength=B * k).reshape(B, k).astype(float)

    def violation_counts(self, y: np.ndarray, pred: np.ndarray, s: np.ndarray, *, n_groups: int,
                         n_classes: int) -> np.ndarray:
        """Exact ``blocks × k × l`` histogram of (block, s, ŷ) of one silo's records (float64)."""
        k, l, B = int(n_groups), int(n_classes), self.n_blocks(n_classes)
        y, pred, s = (np.asarray(v, dtype=np.int64) for v in (y, pred, s))
        b = self.blocks_of(y)
        keep = b >= 0
        flat = np.bincount((b[keep] * k + s[keep]) * l + pred[keep], minlength=B * k * l)
        return flat.reshape(B, k, l).astype(np.float64)

    def violation_from_counts(self, counts: np.ndarray) -> float:
        """The violation of a pooled (possibly noisy) ``blocks × k × l`` histogram, as the public
        metric defines it on exact data.

        Negative cells are clamped to 0 (post-processing). Per block, the rates ``P(ŷ = c | s = r)``
        of the groups whose (clamped) total is positive; the block's gap is
        ``max_c (max_r − min_r)`` over the compared classes (:meth:`compared_classes`); the
        violation is the largest gap over blocks with at least two groups (0 if none has)."""
        c = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
        if c.ndim != 3:
            raise ValueError(f"a violation histogram is blocks × groups × classes, got shape {c.shape}")
        gaps = []
        for block in c:
            totals = block.sum(axis=1)
            present = totals > 0
            if np.count_nonzero(present) < 2:
                continue
            rates = block[present] / totals[present, None]
            if self.uses_positive:
                rates = rates[:, list(self.compared_classes(rates.shape[1]))]
            gaps.append(float(np.max(rates.max(axis=0) - rates.min(axis=0))))
        return max(gaps) if gaps else 0.0

    def violation_sd(self, counts: np.ndarray, *, std: float) -> float:
        """Standard deviation of :meth:`violation_from_counts` due to noise of std ``std`` per
        cell of the pooled histogram (0 when exact), to first order: a rate ``a_c / N`` of a group
        of ``N`` records moves by at most ``std / N`` per unit of noise on its cells
        (``∂r/∂a = (1 − r)/N``, ``∂r/∂a' = −r/N`` for the other cells, and ``(1 − r)² + r² ≤ 1``),
        so the gap between the groups of the largest and the smallest rate has
        ``sd ≤ std · √(1/N_max² + 1/N_min²)``; taken for the block and class of the largest gap."""
        if std <= 0:
            return 0.0
        c = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
        best, sd = -1.0, 0.0
        for block in c:
            totals = block.sum(axis=1)
            present = np.flatnonzero(totals > 0)
            if present.size < 2:
                continue
            rates = block[present] / totals[present, None]
            for cls in self.compared_classes(rates.shape[1]):
                hi, lo = int(np.argmax(rates[:, cls])), int(np.argmin(rates[:, cls]))
                gap = rates[hi, cls] - rates[lo, cls]
                if gap > best:
                    best = gap
                    sd = std * math.sqrt(1.0 / totals[present[hi]] ** 2 + 1.0 / totals[present[lo]] ** 2)
        return float(sd)

@dataclass(frozen=True)
class DemographicParity(FairnessNotion):
    """Independence of the prediction and s: one block, every record (fairlearn's
    ``DemographicParity``)."""

    name: ClassVar[str] = "demographic_parity"
    metric_name: ClassVar[str] = "demographic_parity_difference"
    needs_labels: ClassVar[bool] = False

    def blocks_of(self, y: np.ndarray) -> np.ndarray:
        return np.zeros(np.shape(y)[0], dtype=np.int64)

    def describe_block(self, b: int, classes: np.ndarray) -> str:
        return "in the data"


@dataclass(frozen=True)
class EqualizedOdds(FairnessNotion):
    """Independence given the label: one block per class ``y`` (fairlearn's ``EqualizedOdds``
    for binary labels)."""

    name: ClassVar[str] = "equalized_odds"
    metric_name: ClassVar[str] = "equalized_odds_difference"

    def n_blocks(self, n_classes: int) -> int:
        return int(n_classes)

    def blocks_of(self, y: np.ndarray) -> np.ndarray:
        return np.asarray(y, dtype=np.int64)

    def describe_block(self, b: int, classes: np.ndarray) -> str:
        return f"among records with label {_plain(classes[b])!r}"


@dataclass(frozen=True)
class EqualOpportunity(FairnessNotion):
    """Independence given ``y = positive``; other records are outside the penalty (fairlearn's
    ``TruePositiveRateParity``); the violation compares the rate of the positive class."""

    name: ClassVar[str] = "equal_opportunity"
    metric_name: ClassVar[str] = "equal_opportunity_difference"
    uses_positive: ClassVar[bool] = True
    covers_every_record: ClassVar[bool] = False

    def blocks_of(self, y: np.ndarray) -> np.ndarray:
        return np.where(np.asarray(y) == self.positive, 0, -1).astype(np.int64)

    def compared_classes(self, n_classes: int) -> Sequence[int]:
        return [self.positive]

    def describe_block(self, b: int, classes: np.ndarray) -> str:
        return f"among records with label {_plain(classes[self.positive])!r}"


@dataclass(frozen=True)
class FalsePositiveRateParity(FairnessNotion):
    """Independence given ``y ≠ positive`` (the negatives; ``y = 0`` for binary labels with
    ``positive_class=1``); the positive records are outside the penalty (fairlearn's
    ``FalsePositiveRateParity``); the violation compares the rate of the positive class among
    the negatives, the false-positive rate."""

    name: ClassVar[str] = "false_positive_rate_parity"
    metric_name: ClassVar[str] = "false_positive_rate_difference"
    uses_positive: ClassVar[bool] = True
    covers_every_record: ClassVar[bool] = False

    def blocks_of(self, y: np.ndarray) -> np.ndarray:
        return np.where(np.asarray(y) != self.positive, 0, -1).astype(np.int64)

    def compared_classes(self, n_classes: int) -> Sequence[int]:
        return [self.positive]

    def describe_block(self, b: int, classes: np.ndarray) -> str:
        return f"among records whose label is not {_plain(classes[self.positive])!r}"


#: The public names, in order (the vocabulary of ``fairness=`` and ``--fairness``).
FAIRNESS_NOTIONS: tuple[str, ...] = tuple(NOTIONS)
