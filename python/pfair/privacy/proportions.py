"""Group proportions p_s for the ψ-term, from released values only.

The ψ-term needs ``p(s = r | block)`` (the blocks of the fairness notion,
:meth:`pfair.notions.FairnessNotion.blocks_of`: one for demographic parity, equal opportunity and
false-positive-rate parity, one per class for equalized odds). Everything derived from them — the
noise scale of the W part (its sensitivity is ``(2/m)(1/ρ₁ + 1/ρ₂)^{1/2}``) and every check that a
group is present — must use values that are public or already released, or a neighbouring data
set (one record's s changed) could change a noise scale or raise a different error. Three sources:

``p_s=[...]`` (public)
    Proportions the user supplies (e.g. from a census). Costs nothing; the guarantee covers
    everything.
``p_s="dp"`` (the default of a private fit)
    Each silo releases its counts ``c_j[b, r]`` plus Gaussian noise; the server adds the noisy
    counts, clamps them below at 1 and normalises each block (post-processing, free). Changing one
    record's s (attribute mode) moves one unit between two cells of one block; replacing a record
    (record mode) moves one unit between any two cells. Either way the count vector changes by
    ``e_cell − e_cell′``, of L2 norm √2: a Gaussian mechanism with sensitivity √2, released once,
    costing a share ``p_s_epsilon_share`` of the silo's ε, charged to the silo's ledger (and kept
    there, so a later fit reuses the release for free).
``p_s="pooled"``
    Exact proportions of all silos' data pooled: the paper's assumption, for reproduction only.
    Not covered by the guarantee (warned, and reported as ``p_s = pooled``).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from pfair._validation import check_distribution
from pfair.notions import HISTOGRAM_PREFIX, FairnessNotion  # noqa: F401  (the ledger key's prefix, re-exported)
from pfair.privacy.accountant import noise_multiplier_for
from pfair.privacy.ledger import MechanismEvent

HISTOGRAM_SENSITIVITY = math.sqrt(2.0)


def inv_sqrt_proportions(proportions: np.ndarray) -> np.ndarray:
    """``p(s | block)^{-1/2}`` as the flat, contiguous float64 vector the kernels read."""
    return np.ascontiguousarray(np.asarray(proportions, dtype=np.float64).ravel() ** -0.5)


def histogram_event(noise_multiplier: float) -> MechanismEvent:
    """The ledger event of one released histogram with noise multiplier ``z_h``."""
    return MechanismEvent.gaussian_histogram(noise_multiplier=noise_multiplier, name="p_s_histogram")


def histogram_noise_multiplier(*, epsilon: float, share: float, delta: float) -> float:
    """``z_h`` such that the histogram alone costs ``share · epsilon`` at ``delta``."""
    return noise_multiplier_for(epsilon=share * epsilon, delta=delta, sample_rate=1.0, steps=1, sampling="full_batch",
                                accountant="exact")


def combine_histograms(noisy_counts: list[np.ndarray]) -> np.ndarray:
    """Server side of ``p_s="dp"``: add the silos' noisy counts, clamp at 1, normalise per block."""
    if not noisy_counts:
        raise ValueError("no silo released a histogram; p_s cannot be estimated")
    pooled = np.sum([np.asarray(c, dtype=np.float64) for c in noisy_counts], axis=0)
    clamped = np.maximum(pooled, 1.0)
    return clamped / clamped.sum(axis=1, keepdims=True)


def _by_name(codes: np.ndarray, names: Sequence[Any] | None) -> dict:
    """``name -> code`` of codes that have names (one name per code, in order), else empty."""
    if names is None or len(names) != len(codes):
        return {}
    return dict(zip(list(names), codes.tolist()))


def public_proportions(p_s: Any, *, notion: FairnessNotion, groups: np.ndarray, classes: np.ndarray,
                       group_names: Sequence[Any] | None = None, label_names: Sequence[Any] | None = None
                       ) -> np.ndarray:
    """User-supplied proportions as a ``blocks × k`` array, each block normalised to 1.

    Accepts an array (``k`` or ``blocks × k``) or a mapping ``group -> proportion`` (equalized
    odds: ``class -> {group -> proportion}`` or ``class -> array``). A federation whose groups and
    classes are codes (``pfair.datasets.load_csv``: ``0..k−1``) has their names in
    ``group_names`` and ``label_names``: a mapping may name them instead of the codes."""
    k, blocks = len(groups), notion.n_blocks(len(classes))
    groups_by_name = _by_name(groups, group_names)
    classes_by_name = _by_name(classes, label_names)

    known = set(groups.tolist())

    def row(v: Any, where: str) -> np.ndarray:
        if isinstance(v, Mapping):
            v = {g if g in known else groups_by_name.get(g, g): p for g, p in v.items()}
            unknown = [g for g in v if g not in known]
            if unknown:
                names = f" (named {list(group_names)})" if group_names is not None else ""
                raise ValueError(f"p_s{where} names groups {unknown} that are not in the data's groups "
                                 f"{groups.tolist()}{names}")
            missing = [g for g in groups.tolist() if g not in v]
            if missing:
                raise ValueError(f"p_s{where} has no proportion for groups {missing}; every group needs one")
            v = [v[g] for g in groups.tolist()]
        a = np.asarray(v, dtype=np.float64).ravel()
        if a.shape != (k,):
            raise ValueError(f"p_s{where} has {a.size} proportions but there are {k} sensitive groups {groups.tolist()}")
        if not np.all(np.isfinite(a)) or np.any(a <= 0):
            raise ValueError(f"p_s{where} proportions must be finite and > 0, got {a.tolist()}")
        check_distribution(a, f"p_s{where}")
        return a / a.sum()

    per_class = blocks == len(classes) and blocks > 1  # one block per class (equalized odds)
    if isinstance(p_s, Mapping) and per_class and not all(c in p_s for c in classes.tolist()):
        p_s = {classes_by_name.get(c, c): v for c, v in p_s.items()}
    if isinstance(p_s, Mapping) and per_class and all(c in p_s for c in classes.tolist()):
        out = np.vstack([row(p_s[c], f"[{c!r}]") for c in classes.tolist()])
    elif isinstance(p_s, Mapping):
        out = row(p_s, "")[None, :]
        if blocks > 1:
            raise ValueError(f"fairness={notion.name!r} needs one row of proportions per class: pass "
                             "{class: {group: p}} or a (classes × groups) array")
    else:
        a = np.asarray(p_s, dtype=np.float64)
        if a.ndim == 1:
            if blocks > 1:
                raise ValueError(f"fairness={notion.name!r} needs p(s | y) for each of the {blocks} classes: a "
                                 f"({blocks} × {k}) array, got a 1-D array")
            out = row(a, "")[None, :]
        else:
            if a.shape[0] != blocks:
                raise ValueError(f"p_s has {a.shape[0]} rows but fairness={notion.name!r} needs {blocks}")
            out = np.vstack([row(a[b], f"[{b}]") for b in range(blocks)])
    return out
