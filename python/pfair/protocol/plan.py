"""The run plan: every quantity of a SteFFLe run that follows from the settings and the federation's
public shape, computed once and checked once.

Every driver of a run (the in-process simulation, the hybrid topologies, the Flower strategy) reads
these numbers from one :class:`RunPlan` instead of deriving them again:

* ``blocks``: the number of W blocks, ``l`` for equalized odds (one per class) and 1 otherwise;
* ``rounds_per_epoch`` R: ``⌈mean silo size / m⌉`` (1 with the full batch), so that an epoch touches
  about every record once; ``total_rounds`` T = epochs · R;
* ``weights`` ω_j of the server's average: uniform, or ``n_j / Σ n`` with ``silo_weights="size"``;
* ``pick``: the round whose iterate is returned with ``output="random"``, drawn from the public
  ``seed`` (which round is returned reveals nothing about the data);
* the budget split of each silo's ε (:class:`BudgetSplit`).

:func:`~pfair.privacy.proportions.inv_sqrt_proportions` turns released proportions into the
``p(s)^{-1/2}`` vector the kernels read; it is the only place that power is taken.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from pfair.fairness_target import violation_noise_multiplier
from pfair.privacy.proportions import histogram_noise_multiplier, inv_sqrt_proportions  # noqa: F401  (re-exported)
from pfair.settings import SteFFLeSettings, rounds_per_epoch  # noqa: F401  (re-exported)


def check_batch_fits(sampling: str, batch_size: int, sizes: Sequence[int], *, holder: str | None = None,
                     names: Sequence[Any] | None = None, held_out: bool = False) -> None:
    """Refuse a batch larger than a silo (every batch scheme but the full batch draws m records).
    ``holder`` names the one holder of a central method's pooled data (e.g. ``"the data"``);
    ``names``: the silos' names (as the other messages call them); ``held_out``: ``sizes`` are what
    the silos train on once their validation share is held out (said in the message)."""
    if sampling == "full_batch":
        return
    for j, n_j in enumerate(sizes):
        if batch_size > n_j:
            if holder is not None:
                raise ValueError(f"batch_size={batch_size} is larger than {holder} ({int(n_j)} records)")
            label = names[j] if names is not None and j < len(names) else j
            label = label.item() if hasattr(label, "item") else label
            trains = " trains on" if held_out else " has"
            why = " (the rest of its records are held out for validation: validation_share)" if held_out else ""
            raise ValueError(f"batch_size={batch_size} is larger than silo {label!r}, which{trains} {int(n_j)} "
                             f"records{why}; use a smaller batch_size or fewer silos")


#: ``batch_size="auto"`` warns when the smallest silo makes every silo's batch at least this many
#: times smaller than the next smallest silo would.
SHRINK_WARN_FACTOR = 4


def warn_if_one_silo_shrinks_the_batch(settings: SteFFLeSettings, sizes: Sequence[int],
                                       names: Sequence[Any] | None = None) -> None:
    """Warn when ``batch_size="auto"`` (``min(cap, smallest silo)``) is set by one small silo far
    below what the other silos would take: every silo then draws batches that small, for many more
    and much noisier rounds. Names the silo, its size, the rounds per epoch with and without it,
    and the fixes."""
    if settings.batch_size != "auto" or settings.sampling == "full_batch" or len(sizes) < 2:
        return
    # The batches alone: the run each would stretch to is not this warning's business (and a run on
    # the others alone may be one the settings could not plan).
    resolved = settings.auto_batch_size(list(sizes))
    order = np.argsort(np.asarray(sizes), kind="stable")
    small, nxt = int(order[0]), int(order[1])
    without = settings.auto_batch_size([n for j, n in enumerate(sizes) if j != small])
    if without < SHRINK_WARN_FACTOR * resolved:
        return
    label = (lambda j: f"'{names[j]}'") if names is not None and len(names) == len(sizes) else (lambda j: str(j))
    rounds = rounds_per_epoch(settings.sampling, sizes, resolved)
    rounds_without = rounds_per_epoch(settings.sampling, sizes, without)
    warnings.warn(
        f"batch_size='auto' is min({settings.auto_batch}, "
        f"smallest silo) = {resolved} because silo {label(small)} has only {int(sizes[small])} record(s): every silo "
        f"draws batches of {resolved}, {rounds} rounds per epoch instead of {rounds_without} with the batch of "
        f"{without} the next smallest silo ({label(nxt)}, {int(sizes[nxt])} records) allows, and each step is much "
        f"noisier. Merge silo {label(small)} into another or leave it out of the fit; or set batch_size yourself "
        f"(every silo must hold a batch, so at most {int(sizes[small])} while it is in), or sampling='full_batch' for "
        "a small federation",
        UserWarning, stacklevel=6)


@dataclass(frozen=True)
class BudgetSplit:
    """How a silo's ε is split between its releases (each a share of the target ε, priced alone).

    ``histogram``: the DP histogram of s behind ``p_s="dp"`` (0 when p_s is public or pooled; with
    λ = 0 nothing depends on s and the histogram is never released, so its share is left unspent);
    ``violation``: the violation releases of a fairness target at its checkpoints (0 without one);
    ``validation``: the validation tables of ``protect="record"`` at the checkpoints (0 in
    attribute mode, where they read only x and y and are exact and free). The rounds are
    calibrated to what the composition of everything leaves, so they get the rest (``rounds``
    reports ``1 − histogram − violation − validation`` as a share; the composition of Gaussian
    releases costs the rounds less than that, docs/privacy.md)."""

    epsilon: float | None
    histogram: float = 0.0
    violation: float = 0.0
    validation: float = 0.0

    @property
    def rounds(self) -> float:
        return 1.0 - self.histogram - self.violation - self.validation

    def epsilon_of(self, share: float) -> float:
        """ε of one share (``share · ε``); ``inf`` in a non-private run."""
        return math.inf if self.epsilon is None else share * self.epsilon

    def histogram_noise_multiplier(self, delta: float) -> float:
        """``z_h`` of the p_s histogram: one full-batch Gaussian release costing its share alone."""
        return histogram_noise_multiplier(epsilon=self.epsilon, share=self.histogram, delta=delta)

    def violation_noise_multiplier(self, delta: float, releases: int) -> float:
        """``z_v`` of the violation releases: ``releases`` full-batch Gaussian releases costing their
        share together."""
        return violation_noise_multiplier(epsilon=self.epsilon, share=self.violation, delta=delta, releases=releases)

    def validation_noise_multiplier(self, delta: float, releases: int) -> float:
        """``z_val`` of the record-mode validation tables: ``releases`` full-batch Gaussian releases
        costing their share together."""
        return violation_noise_multiplier(epsilon=self.epsilon, share=self.validation, delta=delta, releases=releases)


def budget_split(settings: SteFFLeSettings) -> BudgetSplit:
    """The :class:`BudgetSplit` these settings ask for."""
    if not settings.private:
        return BudgetSplit(None)
    checkpoints = len(settings.checkpoint_epochs())
    hist = settings.p_s_epsilon_share if settings.p_s_source == "dp" else 0.0
    viol = settings.max_violation_epsilon_share if settings.max_violation is not None and checkpoints else 0.0
    val = settings.validation_epsilon_share if settings.protect == "record" and checkpoints else 0.0
    return BudgetSplit(float(settings.epsilon), float(hist), float(viol), float(val))


@dataclass(frozen=True)
class RunPlan:
    """The derived quantities of one run (see the module docstring). Build with :meth:`build`."""

    settings: SteFFLeSettings
    sizes: tuple
    n_groups: int
    n_classes: int
    blocks: int
    rounds_per_epoch: int
    total_rounds: int
    weights: np.ndarray = field(compare=False, repr=False)
    pick: int | None
    budget: BudgetSplit

    @classmethod
    def build(cls, settings: SteFFLeSettings, sizes: Sequence[int], *, n_groups: int, n_classes: int,
              names: Sequence[Any] | None = None) -> "RunPlan":
        """Resolve ``"auto"`` values from the public silo sizes, check the settings against the
        federation's shape, and derive the plan. Raises ``ValueError`` naming the argument; warns
        when one small silo shrinks the automatic batch of every silo (``names``: the silos' names
        for that warning)."""
        warn_if_one_silo_shrinks_the_batch(settings, list(sizes), names)
        st = settings.for_sizes(list(sizes))
        k, l = int(n_groups), int(n_classes)
        st.notion.check_classes(l)
        check_batch_fits(st.sampling, st.batch_size, sizes, names=names, held_out=st.validation_share > 0)
        R = rounds_per_epoch(st.sampling, sizes, st.batch_size)
        T = st.epochs * R
        n = np.asarray(sizes, dtype=np.float64)
        weights = np.full(n.size, 1.0 / n.size) if st.silo_weights == "uniform" else n / n.sum()
        pick = int(np.random.default_rng(st.seed).integers(0, T)) if st.output == "random" else None
        return cls(st, tuple(int(v) for v in sizes), k, l, st.notion.n_blocks(l), R, T, weights, pick,
                   budget_split(st))

    @property
    def n_silos(self) -> int:
        return len(self.sizes)

    @property
    def block_len(self) -> int:
        """k·l, the length of one W block."""
        return self.n_groups * self.n_classes

    @property
    def w_len(self) -> int:
        return self.blocks * self.block_len

    def linear_theta_len(self, n_features: int) -> int:
        """Length of θ of the linear-softmax model: (d + 1)(l − 1)."""
        return (int(n_features) + 1) * (self.n_classes - 1)

    def epoch_start(self, epoch: int) -> int:
        """The first round of ``epoch``."""
        return int(epoch) * self.rounds_per_epoch

    def uniform_proportions(self) -> np.ndarray:
        """The proportions of a run that sends nothing depending on s (λ = 0): never used, never released."""
        return np.full((self.blocks, self.n_groups), 1.0 / self.n_groups)

    def ends_epoch(self, round: int) -> bool:
        """Whether round ``round`` is the last of its epoch."""
        return (int(round) + 1) % self.rounds_per_epoch == 0
