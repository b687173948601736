r"""Single-shot fair FL with synthetic data (Wu, Curtis and Robinson, "Using Synthetic
Data to Mitigate Unfairness and Preserve Privacy through Single-Shot Federated Learning", 2024).

Each client c turns its data ``{(x_i, s_i, y_i)}_{i≤N}`` into a small synthetic set
``{(x̂_i, ŝ_i, ŷ_i)}_{i≤N_s}``; only the synthetic sets are sent, once, and the server fits a plain
(fairness-unaware) regularised logistic regression on their union.

Model: ``z = ãᵀθ`` with ``ã = (x, 1)`` (p = d+1 parameters), labels ``ŷ ∈ {−1, +1}`` (class
index 1 ↦ +1). The inner problem (Wu et al. 2024, eq. 11) trains on the synthetic points,

    θ*(x̂) = argmin_θ  ℓ_r(θ; x̂) = (1/N_s) Σ_i log(1 + e^{−ŷ_i â_iᵀθ}) + λ_θ/(2p²) ‖θ‖²,

solved by L-BFGS (scipy), then polished by two Newton steps so that the optimality condition
holds to machine precision (the implicit gradient below assumes it). The outer problem
(Wu et al. 2024, eq. 12, penalty form) is

    P(x̂) = ℓ(θ*; real) + (ρ_o/4) Σ_r cov_r(θ*)² + (ρ_s/4) Σ_r ĉov_r(θ*, x̂)² + λ_x/(2(N_s p)²) ‖x̂‖²,

    cov_r(θ) = (1/N) Σ_i (1[s_i = r] − p_r) ã_iᵀθ    (decision-boundary covariance, Wu et al. 2024, eq. 2)

on the client's real data (ĉov_r on the synthetic data). For two groups ``(1/4)Σ_r cov_r² =
(1/2)cov_1²``, which is Wu et al.'s ``ρ_o/(2N²)(Σ_i (s_i − s̄) a_iᵀθ)²``; for k > 2 groups every
group's one-hot covariance is penalised.

Implicit gradient (Wu et al. 2024, eqs. 13-14). With ``g(θ, x̂) = ∇_θ ℓ_r = 0`` at θ*, the implicit
function theorem gives ``∂θ*/∂x̂ = −H⁻¹ ∂g/∂x̂`` with ``H = ∇²_θ ℓ_r``, so with one linear
solve ``v = H⁻¹ ∇_θ P``:

    ∇_{x̂_i} P = ∂_{x̂_i} P|_θ  −  ∂_{x̂_i} [g(θ*, x̂)ᵀ v]
              = ∂_{x̂_i} P|_θ  −  (c_i v_x + (â_iᵀv) w_i θ_x),

    c_i = −ŷ_i σ(−z_i)/N_s,  w_i = σ(z_i)σ(−z_i)/N_s,  z_i = ŷ_i â_iᵀθ,  H = Σ_i w_i â_i â_iᵀ + λ_θ/p² I,

where ``v_x``, ``θ_x`` drop the intercept entry. The outer steps use Adam.

Privacy: Wu et al. (2024) argue that sending synthetic data instead of models limits leakage but gives
no differential-privacy guarantee, and none is claimed here: ``privacy_report_`` says ε = ∞.
The method is for binary labels (l = 2; its inner model is logistic regression); k ≥ 2 groups.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from pfair._fit import _ParamsMixin
from pfair._validation import check_choice, check_int, check_positive
from pfair.baselines._common import evaluate, non_private_report, shards_from
from pfair.estimators import LinearSoftmaxMixin
from pfair.validation import warn_if_no_better_than_constant


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _log1pexp(z: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, z)


def _augment(X: np.ndarray) -> np.ndarray:
    return np.hstack([X, np.ones((X.shape[0], 1))])


def _centred_onehot(s: np.ndarray, k: int) -> np.ndarray:
    """``(n, k)`` matrix of ``1[s_i = r] − p_r``."""
    oh = np.zeros((len(s), k))
    oh[np.arange(len(s)), s] = 1.0
    return oh - oh.mean(axis=0)


def solve_inner(A: np.ndarray, y_pm: np.ndarray, lam_theta: float, theta0: np.ndarray | None = None,
                max_iter: int = 100) -> np.ndarray:
    """``argmin_θ ℓ_r(θ)`` for augmented features ``A`` and labels ±1 (L-BFGS, then Newton polish)."""
    n, p = A.shape
    reg = lam_theta / p**2

    def fun(th: np.ndarray) -> tuple[float, np.ndarray]:
        z = y_pm * (A @ th)
        val = float(np.mean(_log1pexp(-z)) + 0.5 * reg * th @ th)
        grad = A.T @ (-y_pm * _sigmoid(-z)) / n + reg * th
        return val, grad

    th = np.zeros(p) if theta0 is None else theta0.copy()
    th = minimize(fun, th, jac=True, method="L-BFGS-B", options={"maxiter": max_iter, "gtol": 1e-10}).x
    for _ in range(3):  # Newton polish: the implicit gradient needs ∇ℓ_r(θ*) = 0 to high accuracy
        z = y_pm * (A @ th)
        w = _sigmoid(z) * _sigmoid(-z) / n
        H = (A * w[:, None]).T @ A + reg * np.eye(p)
        th = th - np.linalg.solve(H, fun(th)[1])
    return th


class SyntheticClientProblem:
    """One client's bilevel problem: ``value(x̂)`` and ``value_and_grad(x̂)`` (implicit gradient).

    ``X, s, y`` are the real data (s group indices 0..k-1, y in {0, 1}); ``s_hat, y_hat`` the
    fixed synthetic groups and labels. See the module docstring for the formulas.
    """

    def __init__(self, X: np.ndarray, s: np.ndarray, y: np.ndarray, s_hat: np.ndarray, y_hat: np.ndarray, *,
                 n_groups: int, rho_o: float, rho_s: float, lam_theta: float, lam_x: float,
                 inner_max_iter: int = 100) -> None:
        self.A = _augment(X)
        self.y_pm = 2.0 * y - 1.0
        self.S = _centred_onehot(s, n_groups)
        self.S_hat = _centred_onehot(s_hat, n_groups)
        self.y_hat_pm = 2.0 * y_hat - 1.0
        self.rho_o, self.rho_s, self.lam_theta, self.lam_x = rho_o, rho_s, lam_theta, lam_x
        self.inner_max_iter = inner_max_iter
        self.theta: np.ndarray | None = None  # warm start of the inner solver

    def inner(self, x_hat: np.ndarray) -> np.ndarray:
        self.theta = solve_inner(_augment(x_hat), self.y_hat_pm, self.lam_theta, self.theta, self.inner_max_iter)
        return self.theta

    def _parts(self, x_hat: np.ndarray, th: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """(P, ∇_θ P, ∂_x̂ P at fixed θ)."""
        N, Ns = self.A.shape[0], x_hat.shape[0]
        p = self.A.shape[1]
        A_hat = _augment(x_hat)
        z = self.y_pm * (self.A @ th)
        C = self.S.T @ self.A / N  # rows c_r: cov_r = c_r·θ
        C_hat = self.S_hat.T @ A_hat / Ns
        cov, cov_hat = C @ th, C_hat @ th
        reg_x = self.lam_x / (2.0 * (Ns * p) ** 2)
        val = (np.mean(_log1pexp(-z)) + 0.25 * self.rho_o * cov @ cov + 0.25 * self.rho_s * cov_hat @ cov_hat
               + reg_x * np.sum(x_hat**2))
        g_theta = (self.A.T @ (-self.y_pm * _sigmoid(-z)) / N + 0.5 * self.rho_o * C.T @ cov
                   + 0.5 * self.rho_s * C_hat.T @ cov_hat)
        direct = 2.0 * reg_x * x_hat + 0.5 * self.rho_s * np.outer(self.S_hat @ cov_hat / Ns, th[:-1])
        return float(val), g_theta, direct

    def value(self, x_hat: np.ndarray) -> float:
        return self._parts(x_hat, self.inner(x_hat))[0]

    def value_and_grad(self, x_hat: np.ndarray) -> tuple[float, np.ndarray]:
        th = self.inner(x_hat)
        val, g_theta, direct = self._parts(x_hat, th)
        Ns, p = x_hat.shape[0], th.shape[0]
        A_hat = _augment(x_hat)
        zh = self.y_hat_pm * (A_hat @ th)
        w = _sigmoid(zh) * _sigmoid(-zh) / Ns
        H = (A_hat * w[:, None]).T @ A_hat + self.lam_theta / p**2 * np.eye(p)
        v = np.linalg.solve(H, g_theta)  # the one linear solve of the implicit function theorem
        c = -self.y_hat_pm * _sigmoid(-zh) / Ns
        mixed = np.outer(c, v[:-1]) + np.outer((A_hat @ v) * w, th[:-1])  # ∂_x̂ [g(θ, x̂)ᵀ v]
        return val, direct - mixed


class SingleShotSyntheticFL(LinearSoftmaxMixin, _ParamsMixin):
    """Wu et al.'s single-shot fair FL: clients learn fair synthetic sets, the server fits on their union.

    Parameters
    ----------
    rho_o : ρ_o ≥ 0, penalty on the decision-boundary covariance on the client's real data.
    rho_s : ρ_s ≥ 0, the same on the synthetic data (Wu et al. 2024 recommend 0).
    lam_theta : λ_θ, inner (and server) ridge weight, scaled by 1/(2p²) as in Wu et al. 2024, eq. 11.
    lam_x : λ_x, outer weight on ‖x̂‖², scaled by 1/(2(N_s p)²) (Wu et al. 2024, eq. 12).
    synthetic_size : float in (0, 1] (fraction of each client's records) or int (records per client).
    labels : "balanced" (equal numbers of every (s, y) pair, Wu et al. 2024, §4) or "proportional"
        (the client's own pair frequencies; with ``synthetic_size=1.0`` the client's (s_i, y_i)).
    outer_steps, outer_lr : Adam iterations and step size (Wu et al. 2024 used 1000 steps).
    inner_max_iter : L-BFGS iterations of each inner solve (Wu et al. 2024: 100).
    seed : int; seeds the Gaussian initialisation of x̂ (per-feature mean/std of the client data).

    Attributes
    ----------
    theta_, coef_, intercept_, classes_, groups_, n_features_in_
    synthetic_ : list of per-client DataFrames-free tuples ``(X_hat, s_hat, y_hat)`` (indices).
    client_history_ : DataFrame, outer objective per client and outer step.
    history_ : one row with the final model's loss/error/violations on the pooled real data.
    privacy_report_ : non-private (no DP guarantee; see the module docstring).
    """

    def __init__(self, *, rho_o: float = 10.0, rho_s: float = 0.0, lam_theta: float = 1e-2, lam_x: float = 1e-4,
                 synthetic_size: float = 0.1, labels: str = "balanced", outer_steps: int = 200,
                 outer_lr: float = 0.05, inner_max_iter: int = 100, seed: int = 0) -> None:
        self.rho_o = rho_o
        self.rho_s = rho_s
        self.lam_theta = lam_theta
        self.lam_x = lam_x
        self.synthetic_size = synthetic_size
        self.labels = labels
        self.outer_steps = outer_steps
        self.outer_lr = outer_lr
        self.inner_max_iter = inner_max_iter
        self.seed = seed

    def _validate_params(self) -> None:
        check_positive(self.rho_o, "rho_o", allow_zero=True)
        check_positive(self.rho_s, "rho_s", allow_zero=True)
        check_positive(self.lam_theta, "lam_theta")
        check_positive(self.lam_x, "lam_x", allow_zero=True)
        size = self.synthetic_size
        if isinstance(size, bool) or not isinstance(size, (Integral, Real)):
            raise TypeError(f"synthetic_size must be a fraction in (0, 1] or a positive int, got {size!r}")
        if isinstance(size, Integral):
            check_int(size, "synthetic_size", minimum=2)
        elif not 0 < size <= 1:
            raise ValueError(f"synthetic_size as a float is a fraction and must be in (0, 1], got {size}")
        check_choice(self.labels, "labels", ("balanced", "proportional"))
        check_int(self.outer_steps, "outer_steps", minimum=0)
        check_positive(self.outer_lr, "outer_lr")
        check_int(self.inner_max_iter, "inner_max_iter")
        check_int(self.seed, "seed", minimum=0)

    def _synthetic_labels(self, s: np.ndarray, y: np.ndarray, size: int, k: int,
                          rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        if self.labels == "proportional":
            if size == len(y):
                return s.copy(), y.copy()
            pick = np.sort(rng.choice(len(y), size=size, replace=False))
            return s[pick], y[pick]
        cells = [(a, c) for a in range(k) for c in (0, 1)]
        order = np.arange(size) % len(cells)
        return np.array([cells[i][0] for i in order]), np.array([cells[i][1] for i in order])

    def fit(self, X: Any, y: Any = None, *, sensitive_features: Any = None, silos: Any = None) -> "SingleShotSyntheticFL":
        """Fit on a Federation or arrays with ``silos=`` (each silo is a client)."""
        self._validate_params()
        sh = shards_from(X, y, sensitive_features, silos, need_s=True, estimator=self)
        if len(sh.classes_) != 2:
            raise ValueError(f"SingleShotSyntheticFL needs binary labels (Wu et al.'s logistic model); y has "
                             f"{len(sh.classes_)} classes")
        k, d = len(sh.groups_), sh.n_features
        self.classes_, self.groups_, self.n_features_in_ = sh.classes_, sh.groups_, d
        synthetic, rows = [], []
        for j, (Xj, sj, yj) in enumerate(zip(sh.X, sh.s, sh.y)):
            rng = np.random.default_rng([self.seed, j])
            size = (self.synthetic_size if isinstance(self.synthetic_size, Integral)
                    else max(2, int(round(self.synthetic_size * len(yj)))))
            if size > len(yj) and self.labels == "proportional":
                raise ValueError(f"synthetic_size={size} exceeds client {j}'s {len(yj)} records")
            s_hat, y_hat = self._synthetic_labels(sj, yj, size, k, rng)
            x_hat = rng.normal(Xj.mean(axis=0), Xj.std(axis=0) + 1e-12, size=(size, d))
            problem = SyntheticClientProblem(Xj, sj, yj, s_hat, y_hat, n_groups=k, rho_o=self.rho_o,
                                             rho_s=self.rho_s, lam_theta=self.lam_theta, lam_x=self.lam_x,
                                             inner_max_iter=self.inner_max_iter)
            x_hat = self._adam(problem, x_hat, j, rows)
            synthetic.append((x_hat, s_hat, y_hat))
        Xs = np.vstack([t[0] for t in synthetic])
        ys = np.concatenate([t[2] for t in synthetic])
        self.theta_ = solve_inner(_augment(Xs), 2.0 * ys - 1.0, self.lam_theta, max_iter=max(self.inner_max_iter, 500))
        self.synthetic_ = synthetic
        self.client_history_ = pd.DataFrame(rows)
        Xp, yp, sp = sh.pooled()
        self.history_ = pd.DataFrame([{"epoch": 1, **evaluate(self.theta_, 2, Xp, yp, sp)}]).set_index("epoch")
        self.privacy_report_ = non_private_report("single_shot_synthetic (no DP claim)", sh.n_silos)
        warn_if_no_better_than_constant(self, sh)
        return self

    def _adam(self, problem: SyntheticClientProblem, x: np.ndarray, client: int, rows: list) -> np.ndarray:
        b1, b2, eps = 0.9, 0.999, 1e-8
        m1, m2 = np.zeros_like(x), np.zeros_like(x)
        for t in range(1, self.outer_steps + 1):
            val, g = problem.value_and_grad(x)
            rows.append({"client": client, "step": t, "objective": val})
            m1 = b1 * m1 + (1 - b1) * g
            m2 = b2 * m2 + (1 - b2) * g * g
            x = x - self.outer_lr * (m1 / (1 - b1**t)) / (np.sqrt(m2 / (1 - b2**t)) + eps)
        return x
