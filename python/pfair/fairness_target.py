"""A fairness target instead of a raw λ: ``SteFFLe(max_violation=0.05)``.

SteFFLe's objective ``min_θ max_W L(θ) + λ ψ(θ, W)`` trades error for fairness through λ, but
what a user has in mind is a constraint: *the violation may be at most* ``t``. pfair treats the
constrained problem ``min_θ L(θ)  s.t.  v(θ) ≤ t`` by its Lagrangian, with λ as the multiplier of
the constraint (the ψ-term, whose minimum over θ bounds the violation, stands in for v), and
adapts λ by projected dual ascent at each checkpoint
(:meth:`pfair.settings.SteFFLeSettings.checkpoint_epochs`):

    λ ← min(λ_max, max(0, λ + η_λ √Δe (v̂ − a·t)))

where ``v̂`` is the released violation of the model after the checkpoint epoch on the silos'
records, ``Δe`` the number of epochs since the last checkpoint (the epochs spent at this λ),
``η_λ`` is ``lam_lr``, ``a = AIM`` (0.85) steers v̂ a little below the target so that models
meeting ``t`` appear while there are checkpoints left to return one of them, and ``λ_max = 100``
(:meth:`LambdaController.update`). λ rises while the aim is exceeded and falls back while it is
met with room to spare; it is halved instead when the silos' held-out records show the model no
better than the constant predictor (:attr:`pfair.validation.CheckpointFigures.shown_not_better`, a test at
the guard's level) and λ > 0, so that the controller never pushes λ into the region where the
model inverts. The model a fit returns is the most accurate
checkpoint whose released violation meets the target (:class:`pfair.validation.Selector`).

Where v̂ comes from
------------------
Non-private fits compute it exactly. In a private fit it comes from released values only: after
every checkpoint epoch each silo j releases the histogram of all its records (training and held
out) under the current θ,

    c_j[b, r, ŷ] = #{ i in silo j : block(i) = b, s_i = r, argmax F(x_i; θ) = ŷ } + N(0, (z_v √2)²)

(``block`` as in the ψ-term, :meth:`pfair.notions.FairnessNotion.blocks_of`: one block for
demographic parity, the true class for equalized odds, the positive records only for equal
opportunity, the negative ones only for false-positive-rate parity; the counts are
:meth:`~pfair.notions.FairnessNotion.violation_counts`). The server adds the silos' noisy counts,
clamps them at 0 and computes the violation of the pooled table
(:meth:`~pfair.notions.FairnessNotion.violation_from_counts`, post-processing, free).

Sensitivity. θ is the released model (adaptive composition conditions on it), so each record
contributes exactly one count, to the cell of its (block, s, ŷ). Replace-one of one record's s
(``protect="attribute"``) moves that count from cell (b, r, ŷ) to (b, r', ŷ): the count vector
changes by ``e_(b,r',ŷ) − e_(b,r,ŷ)``. Replace-one of a whole record (``protect="record"``) may
change x (so ŷ), y (so b) and s at once, but still removes one count from the old record's cell
and adds one to the new record's cell (for equal opportunity and false-positive-rate parity a
record outside the notion's block contributes no count, so only one of the two moves may happen).
Either way the change has L2 norm at most √2 (0 when the cell is the same, 1 when one side is
outside the block).
One release per silo and epoch is therefore a Gaussian mechanism with sensitivity √2 and noise
multiplier z_v, charged to the silo's ledger as one full-batch Gaussian event *before* it is
computed; ``max_violation_epsilon_share`` of the silo's ε pays for the checkpoints' releases
together, and the training noise is calibrated to the composition of everything the ledger holds
plus these releases plus the rounds (:meth:`pfair.protocol.silo.SiloParty.plan_rounds`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pfair.privacy.accountant import noise_multiplier_for

#: L2 sensitivity of a silo's (block, s, ŷ) histogram under replace-one (attribute or record).
VIOLATION_SENSITIVITY = math.sqrt(2.0)
#: Name of the ledger event of one violation release.
VIOLATION_EVENT = "violation_histogram"


def violation_noise_multiplier(*, epsilon: float, share: float, delta: float, releases: int) -> float:
    """``z_v`` such that ``releases`` violation histograms alone cost ``share · epsilon`` at
    ``delta`` (full-batch Gaussian releases, composed by the ledger's accountant)."""
    return noise_multiplier_for(epsilon=share * epsilon, delta=delta, sample_rate=1.0, steps=int(releases),
                                sampling="full_batch")


def implausible(counts: np.ndarray, *, n_records: int, std: float, every_record: bool = True,
                tail: float = 8.0, cells: list | None = None, total: float | None = None) -> str | None:
    """Why a silo's violation release cannot come from ``n_records`` records plus noise of std
    ``std`` per cell (None if it can): every cell lies in ``[−std·tail, n + std·tail]`` and the
    total, ``n`` (every record counted once; at most ``n`` when not ``every_record``, a notion
    whose blocks leave records out: :attr:`pfair.notions.FairnessNotion.covers_every_record`),
    within ``std·√cells·tail``. A value outside fails with probability below e^{-tail²/2} per
    check. (The cells of a release are few: their range is read from a list, where a NumPy
    reduction costs more than the cells; the total stays NumPy's sum, and a NaN or an infinity
    leaves the range to NumPy, whose min and max propagate a NaN.) ``cells``: the cells of
    ``counts`` as a flat list of floats, when the caller has read them already; ``total``: with
    ``cells``, their sum when the caller has it exactly (cells that are integers below 2⁵³, whose
    sum is the same in any order, NumPy's included); then ``counts`` is not read."""
    n, slack = float(n_records), std * tail
    if cells is not None and total is not None:
        size, flat = len(cells), cells
        lo, hi = min(flat), max(flat)
    else:
        c = np.asarray(counts, dtype=np.float64)
        flat = c.ravel().tolist() if cells is None else cells
        lo, hi = (min(flat), max(flat)) if flat and all(map(math.isfinite, flat)) else (c.min(), c.max())
        total, size = float(c.sum()), c.size
    if lo < -slack or hi > n + slack:
        return f"a cell is outside [{-slack:.4g}, {n + slack:.4g}] (the silo has {int(n)} records)"
    spread = std * math.sqrt(size) * tail
    low = n - spread if every_record else -spread
    if not low <= total <= n + spread:
        return f"the counts add up to {total:.6g}, not what {int(n)} records allow"
    return None


#: The controller steers the violation to this fraction of the target (:attr:`LambdaController.aim`).
AIM = 0.85


@dataclass
class LambdaController:
    """Projected dual ascent on λ (see the module docstring).

    ``lam`` is the λ of the next epoch; :meth:`update` takes the violation released after an
    epoch and returns the new λ. ``path`` records ``(λ used, v̂)`` per update."""

    target: float
    lr: float
    lam: float = 0.0
    lam_max: float = 100.0
    path: list = field(default_factory=list)

    @property
    def aim(self) -> float:
        """The violation the dual step steers to: ``AIM · target``, below the target, so that
        models meeting it appear while there are checkpoints left to return one of them (the
        returned model is chosen against the target itself)."""
        return AIM * self.target

    def update(self, violation: float, *, epochs: int = 1, inverting: bool = False) -> float:
        """One dual step after ``epochs`` epochs at the current λ: ``λ + √epochs·η_λ·(v̂ − aim)``,
        projected on ``[0, λ_max]``; with ``inverting`` (the model is shown no better than the
        constant predictor) and λ > 0, λ is halved instead, whatever v̂. At λ = 0 the fairness term
        cannot be what made the model no better (it was not in the objective), and halving 0 would
        keep λ at 0 for as long as the model is no better, whatever the violation: the dual step is
        taken."""
        if not math.isfinite(violation):
            raise ValueError(f"the released violation is {violation}; λ cannot be adapted from it")
        self.path.append((self.lam, float(violation)))
        if inverting and self.lam > 0:
            self.lam = 0.5 * self.lam
        else:
            step = self.lr * math.sqrt(max(1, int(epochs))) * (violation - self.aim)
            self.lam = float(min(self.lam_max, max(0.0, self.lam + step)))
        return self.lam
