"""Plain NumPy reference implementations used only by tests (the one allowed duplicate of the math).

They follow the FERMI objective of Gupta et al. 2024 (eq. 4, App. D) literally and are deliberately
written differently from the Rust kernels (dense matrices, no outer-product tricks) so that agreement
means something.
"""

from __future__ import annotations

import numpy as np


def softmax_probs(X: np.ndarray, theta: np.ndarray, l: int) -> np.ndarray:
    d = X.shape[1]
    T = theta.reshape(d + 1, l - 1)
    Xt = np.hstack([X, np.ones((X.shape[0], 1))])
    Z = np.hstack([np.zeros((X.shape[0], 1)), Xt @ T])
    Z -= Z.max(axis=1, keepdims=True)
    P = np.exp(Z)
    return P / P.sum(axis=1, keepdims=True)


def block_of(y: np.ndarray, fairness: str, positive: int = 1) -> np.ndarray:
    """W block of each record, -1 if it does not enter the penalty."""
    if fairness == "demographic_parity":
        return np.zeros_like(y)
    if fairness == "equalized_odds":
        return y.copy()
    if fairness == "false_positive_rate_parity":
        return np.where(y != positive, 0, -1)
    return np.where(y == positive, 0, -1)


def objective(X, y, s, theta, W, inv_sqrt_ps, *, k, l, fairness, positive=1, denom=None):
    """(mean cross-entropy, mean ψ) with divisor ``denom`` (default: number of records).

    ``W`` has shape (blocks, k, l); ``inv_sqrt_ps`` has shape (blocks, k).
    """
    n = len(y)
    denom = n if denom is None else denom
    P = softmax_probs(X, theta, l)
    loss = -np.log(P[np.arange(n), y]).sum() / denom
    blocks = block_of(y, fairness, positive)
    psi = 0.0
    for i in range(n):
        b = blocks[i]
        if b < 0:
            continue
        Wb = W[b]
        q = (Wb**2).sum(axis=0)
        psi += -P[i] @ q + 2 * inv_sqrt_ps[b, s[i]] * (Wb @ P[i])[s[i]] - 1
    return loss, psi / denom


def chi2_penalty(P: np.ndarray, s: np.ndarray, k: int) -> float:
    """χ²(p̂_{ŷ,s} ‖ p̂_ŷ p̂_s) with soft predictions ``P`` (Gupta et al. 2024, App. A eq. 5)."""
    n, l = P.shape
    joint = np.zeros((k, l))
    for r in range(k):
        joint[r] = P[s == r].sum(axis=0) / n
    p_s = np.bincount(s, minlength=k) / n
    p_y = P.mean(axis=0)
    prod = np.outer(p_s, p_y)
    return float(((joint - prod) ** 2 / prod).sum())
