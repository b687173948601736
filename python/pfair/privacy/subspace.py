"""A public subspace for a silo's noised θ-part (``theta_subspace=r``, attribute mode).

A silo's release ``h_θ = (1/m) Σ_B b̃_i + N(0, σ_θ² I)`` has one row per coordinate of
``x̃ = [x, 1]`` (and one column per class but the first), and its noise has norm about
``σ_θ √((d+1)(l−1))`` whatever the signal. Each ``b̃_i = x̃_i ⊗ β_i``, so the signal lies in the span
of the silo's rows; its bulk lies in the span of their top principal directions, the top ``r``
eigenvectors ``U`` of ``G = Σ_i x̃_i x̃_iᵀ`` (uncentred, so the intercept's direction is one of them).
With ``theta_subspace=r`` the silo sends ``(U Uᵀ ⊗ I) h_θ``: the same noise per direction, in
``r (l−1)`` dimensions instead of ``(d+1)(l−1)``, so its norm falls by ``√(r / (d+1))``; the signal
outside the span is lost (it is small where the features' variance is concentrated, which is
where they carry s most).

Privacy: in attribute mode only s is protected, and ``U`` reads the silo's x only, so it is the
same on two data sets that differ in one record's s; the projection is a fixed linear map applied
to the Gaussian mechanism's output after its noise — post-processing, with the same ε, δ and
sensitivities (``docs/privacy.md``, "A public subspace for h_θ"). In record mode x is protected,
and the settings refuse it.

The Gram matrix is computed in Rust where the records are held (``SiloSet.gram``); its
eigenvectors here (``numpy.linalg.eigh``); the projection in Rust after the noise
(``rust/src/subspace.rs``)."""

from __future__ import annotations

import numpy as np


def principal_basis(gram: np.ndarray, rank: int) -> np.ndarray | None:
    """The top ``rank`` eigenvectors of the symmetric ``gram`` ((d+1) × (d+1)) as the columns of a
    ``(d+1) × rank`` array (largest eigenvalue first), or None when ``rank ≥ d + 1`` (the subspace
    is the whole space: nothing to project)."""
    g = np.asarray(gram, dtype=np.float64)
    if g.ndim != 2 or g.shape[0] != g.shape[1]:
        raise ValueError(f"gram must be a square matrix, got shape {g.shape}")
    rank = int(rank)
    if rank < 1:
        raise ValueError(f"theta_subspace must be an integer >= 1, got {rank}")
    if rank >= g.shape[0]:
        return None
    _, vecs = np.linalg.eigh((g + g.T) / 2.0)
    return np.ascontiguousarray(vecs[:, ::-1][:, :rank])
