r"""PF-LD: private and fair Lagrangian dual (Tran, Fioretto and Van Hentenryck,
"Differentially Private and Fair Deep Learning: A Lagrangian Dual Approach", AAAI 2021).

Fairness as constraints, one per (block b, group a, component u):

    v_{b,a,u}(θ) = μ_{b,u}(θ) − μ_{b,a,u}(θ) = 0,

where μ_{b,u} is the mean of h_u over the *population* of block b and μ_{b,a,u} its mean over
the records of block b in group a (Tran et al. 2021, eq. 1-2). The notions (for l ≥ 2 classes,
k ≥ 2 groups):

* ``"demographic_parity"``: one block (every record), h_u = F_u(x), u = 1..l-1;
* ``"equalized_odds"``: one block per label y, h_u = F_u(x), u = 1..l-1;
* ``"accuracy_parity"``: one block, one component, h = cross-entropy loss.

(For l = 2 these are exactly Tran et al.'s constraints on the score F_1; u = 0 is redundant
because Σ_u F_u = 1.) The Lagrangian (Tran et al. 2021, eq. 4) is ``L(θ) + Σ_i λ_i |v_i(θ)|`` with
λ_i ∈ [0, λ_max]. Every step draws a batch B of m records and takes the primal step

    θ ← θ − α [ ∇L_B(θ) + Σ_i λ_i σ_i (P_i − Q_i) + N(0, (z_p Δ_p)² I) ]    (Tran et al. 2021, eq. 10)

    P_i = Σ_{j∈B_b} ∇h_u(x_j) / (m n_b/n),        Q_i = Σ_{j∈B_b, s_j=a} clip_{C_p}(∇h_u(x_j)) / (m n_{b,a}/n)

and after every epoch the dual step releases the noisy signed violations on the whole data

    ṽ_i = Σ_{j∈D_b} h̄_u(j)/n_b − Σ_{j∈D_b, s_j=a} h̄_u(j)/n_{b,a} + N(0, (z_d Δ_d)²),   h̄ = clip_{C_d}(h)   (eq. 13)

and sets ``λ_i ← min(λ_max, λ_i + η_λ |ṽ_i|)``, ``σ_i ← sign(ṽ_i)``.

Privacy (attribute DP, central: neighbours differ in one record's *reported* s; labels,
features, which records report s, and the group counts n_{b,a} are public, as SteFFLe's
``p_s="pooled"``). Record j of block b moving from group r to r′ changes the s-dependent part
−Σ λσQ of the primal message by at most

    Δ_p = U C_p λ_max / m · max_{b, r≠r′} (n/n_{b,r} + n/n_{b,r′})

(U = l−1 components, 1 for accuracy parity), and the dual vector by at most

    Δ_d = H · max_{b, r≠r′} (1/n_{b,r}² + 1/n_{b,r′}²)^{1/2},
    H² = min((l−1)C_d², C_d, 1) for h = F (since Σ_{u≥1} F_u ≤ 1), H = C_d for the loss.

The primal steps are Gaussian mechanisms on a public batch: the step also carries the batch's
unclipped loss gradient, which reveals who was drawn, so amplification by a hidden sample is not
available and each record only benefits from being drawn with probability q = m/n per step
(the ``"public_batch"`` bound of ``docs/accounting.md``). The dual steps are full-batch Gaussian
mechanisms. Both are Gaussian given public information (the batches are public), so they compose
exactly and jointly: the record's privacy loss is that of a Gaussian with
``μ² = K/z_p² + T_d/z_d²``, ``K ~ Bin(T_p, q)`` the primal steps whose batch holds it (Dong, Roth,
Su 2019; Balle, Wang 2018; ``docs/accounting.md``), and ``δ(ε) = E_K[δ_Gauss(ε; μ)]``. The two
noises keep the ratio of the basic split (``dual_share`` of ε and δ/2 to the dual, the rest to
the primal) and are scaled down together until the joint guarantee is exactly (ε, δ): both are
below what basic composition (which the report also gives) needs. Records whose s is missing (−1/NaN/None, Tran et al. 2021, §7) enter the
loss and the population terms but no group term; the counts n_{b,a} count reporters only, which
is where Tran et al.'s Δ/r comes from.

Deviations from Tran et al. 2021 (see ``docs/baselines.md``): fixed public denominators instead of the
batch group sizes |B_{G_i}| (which depend on s, making the paper's sensitivity data-dependent);
the sign of |v_i| in the primal subgradient comes from the last *released* dual vector (the
paper's batch sign depends on s and can flip the whole term, which Theorem 1 does not cover);
in the dual step h is clipped on both the population and the group side; Δ's use n_{b,a}
rather than min|G| − 1; the data are pooled (Gupta et al. 2024 compared PF-LD as a central method).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pandas as pd

from pfair import _core
from pfair._fit import _ParamsMixin
from pfair._validation import check_choice, check_int, check_positive, resolve_fairness
from pfair.baselines._common import evaluate, shards_from
from pfair.federation import Federation
from pfair.estimators import LinearSoftmaxMixin
from pfair.exceptions import PrivacyWarning
from pfair.privacy import mechanisms
from pfair.protocol.keys import PFLD_DUAL_STREAM, PFLD_PRIMAL_STREAM, noise_key, seeded_key
from pfair.protocol.plan import check_batch_fits, rounds_per_epoch
from pfair.settings import default_delta
from pfair.validation import LocalCheck

PFLD_FAIRNESS = ("demographic_parity", "equalized_odds", "accuracy_parity")


class PFLD(LinearSoftmaxMixin, _ParamsMixin):
    """Private and fair Lagrangian dual (Tran et al. 2021, Alg. 1 with eqs. 10 and 13); see the module
    docstring for the math, the sensitivities and the deviations.

    Parameters
    ----------
    fairness : {"demographic_parity", "equalized_odds", "accuracy_parity"}
    epsilon, delta : central (ε, δ)-DP target w.r.t. the sensitive attribute; ``epsilon=None``:
        the non-private F-LD. ``delta=None``: 1/n².
    epochs : int; each epoch is ``ceil(n/batch_size)`` primal steps followed by one dual step
        (none after the last epoch, whose multipliers would never be used).
    batch_size : int, m (fixed-size batches drawn without replacement).
    lr : α, primal step size.  lr_dual : η_λ, dual step size.  lam_max : λ_max (0: plain ERM).
    clip_primal : C_p, per-record clip norm of ∇_θ h in the group terms (Tran et al. 2021 used 10).
    clip_dual : C_d, clip of |h| in the dual violations (Tran et al. 2021 used 5).
    dual_share : fraction of ε the basic split gives the dual steps; it fixes the ratio of the two
        noises, which are then calibrated jointly to (ε, δ).
    sampling : {"without_replacement", "full_batch"}.
    seed : int; seeds the batches of a non-private fit. A private fit draws them from its noise key
        (secret, or ``noise_seed``'s): its account averages over random batches, which a seed
        known in advance would fix (they are public once drawn: the exact loss gradient reveals
        them).
    noise_seed : int or None. None: noise from a secret key drawn from the operating system's
        entropy. An int makes the noise reproducible for simulations; the guarantee then does not
        hold against anyone who knows it (``PrivacyWarning``).
    track_history : per-epoch metrics in ``history_``.

    Attributes
    ----------
    theta_, coef_, intercept_, classes_, groups_, n_features_in_
    multipliers_ : λ, shape ``(blocks, k, U)``; ``signs_`` the σ used last.
    history_ : per epoch: loss/error/violations on the training data (simulation diagnostics,
        not released), ``max_multiplier``, ``mean_multiplier``, ``released_violation`` (max |ṽ|).
    privacy_report_ : one row (the data are central): sensitivities, noise multipliers and stds,
        steps, ε target and ε spent.
    """

    def __init__(self, *, fairness: str = "demographic_parity", epsilon: float | None = 1.0,
                 delta: float | None = None, epochs: int = 40, batch_size: int = 256, lr: float = 0.25,
                 lr_dual: float = 0.5, lam_max: float = 2.0, clip_primal: float | None = 1.0,
                 clip_dual: float | None = 1.0, dual_share: float = 0.25, sampling: str = "without_replacement",
                 seed: int = 0, noise_seed: int | None = None, track_history: bool = True) -> None:
        self.fairness = fairness
        self.epsilon = epsilon
        self.delta = delta
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.lr_dual = lr_dual
        self.lam_max = lam_max
        self.clip_primal = clip_primal
        self.clip_dual = clip_dual
        self.dual_share = dual_share
        self.sampling = sampling
        self.seed = seed
        self.noise_seed = noise_seed
        self.track_history = track_history

    def _validate_params(self) -> None:
        check_choice(self.fairness, "fairness", PFLD_FAIRNESS)
        check_positive(self.epsilon, "epsilon", allow_none=True)
        if self.delta is not None:
            check_positive(self.delta, "delta")
            if not self.delta < 1:
                raise ValueError(f"delta must be in (0, 1), got {self.delta}; a common choice is 1/n²")
        check_int(self.epochs, "epochs")
        check_int(self.batch_size, "batch_size")
        check_positive(self.lr, "lr")
        check_positive(self.lr_dual, "lr_dual", allow_zero=True)
        check_positive(self.lam_max, "lam_max", allow_zero=True)
        check_positive(self.clip_primal, "clip_primal", allow_none=True)
        check_positive(self.clip_dual, "clip_dual", allow_none=True)
        check_positive(self.dual_share, "dual_share")
        if not self.dual_share < 1:
            raise ValueError(f"dual_share must be in (0, 1), got {self.dual_share}")
        check_choice(self.sampling, "sampling", ("without_replacement", "full_batch"))
        check_int(self.seed, "seed", minimum=0)
        if self.noise_seed is not None:
            check_int(self.noise_seed, "noise_seed", minimum=0)
        if self.epsilon is not None:
            for name in ("clip_primal", "clip_dual"):
                if getattr(self, name) is None:
                    raise ValueError(f"{name} must be set when epsilon is set: sensitivity needs a clip bound")

    # ------------------------------------------------------------------ model pieces
    def _jacobian_rows(self, F: np.ndarray, y: np.ndarray) -> np.ndarray:
        """∂h_u/∂z for the free logits z_1..z_{l-1}: shape ``(n, U, l-1)``. ∇_θ h_u = x̃ ⊗ row."""
        if self.fairness == "accuracy_parity":
            r = F.copy()
            r[np.arange(len(y)), y] -= 1.0
            return r[:, None, 1:]
        Fu = F[:, 1:]
        return Fu[:, :, None] * (np.eye(Fu.shape[1])[None] - Fu[:, None, :])

    def _h(self, F: np.ndarray, y: np.ndarray) -> np.ndarray:
        """h values, shape ``(n, U)``: F_1..F_{l-1}, or the loss for accuracy parity."""
        if self.fairness == "accuracy_parity":
            return -np.log(np.clip(F[np.arange(len(y)), y], 1e-300, None))[:, None]
        return F[:, 1:]

    # ------------------------------------------------------------------ fit
    def fit(self, X: Any, y: Any = None, *, sensitive_features: Any = None, silos: Any = None) -> "PFLD":
        """Fit on a Federation or arrays. ``sensitive_features`` may contain missing values (−1, NaN,
        None). ``silos`` is accepted and the data are pooled (PF-LD is a central method)."""
        self._validate_params()
        has_s = sensitive_features is not None or isinstance(X, Federation)
        if not has_s and self.lam_max == 0 and y is not None:
            # lam_max = 0 is plain private ERM: no step reads s (λ stays 0, no dual step), so a
            # placeholder attribute stands in and no fairness metric is reported.
            sensitive_features = np.arange(np.asarray(y).shape[0]) % 2
        sh = shards_from(X, y, sensitive_features, silos, need_s=True, allow_missing=True, estimator=self)
        Xa, ya, sa = sh.pooled()
        n, d = Xa.shape
        k, l = len(sh.groups_), len(sh.classes_)
        self.classes_, self.groups_, self.n_features_in_ = sh.classes_, sh.groups_, d
        if not has_s:
            del self.groups_
        m = n if self.sampling == "full_batch" else self.batch_size
        check_batch_fits(self.sampling, m, [n], holder="the data")
        blocks = 1 if self.fairness == "accuracy_parity" else resolve_fairness(self.fairness).n_blocks(l)
        U = 1 if self.fairness == "accuracy_parity" else l - 1
        block = ya if blocks > 1 else np.zeros(n, dtype=np.int64)
        known = sa >= 0
        n_b = np.bincount(block, minlength=blocks).astype(float)
        n_ba = np.zeros((blocks, k))
        np.add.at(n_ba, (block[known], sa[known]), 1.0)
        for b, a in zip(*np.nonzero(n_ba == 0)):
            where = f" among records with label {sh.classes_[b]!r}" if blocks > 1 else ""
            raise ValueError(f"sensitive group {sh.groups_[a]!r} has no (reported) records{where}; every group "
                             "must be present (merge or drop it)")

        steps = rounds_per_epoch(self.sampling, [n], m)
        private = self.epsilon is not None
        delta = self.delta if self.delta is not None else default_delta(n)
        q = m / n
        t_primal, t_dual = (self.epochs - 1) * steps, self.epochs - 1  # epoch 0 has λ = 0: nothing s-dependent
        cp = self.clip_primal if self.clip_primal is not None else math.inf
        cd = self.clip_dual if self.clip_dual is not None else math.inf
        inv_pairs = _two_largest_sum(n / n_ba)
        delta_p = U * cp * self.lam_max / m * inv_pairs
        H = (min((l - 1) * cd**2, cd, 1.0) ** 0.5) if self.fairness != "accuracy_parity" else cd
        delta_d = H * _two_largest_sum(1.0 / n_ba**2) ** 0.5
        z_p = z_d = 0.0
        eps_spent = math.inf
        eps_basic = math.inf
        if private:
            z_p, z_d, eps_spent, eps_basic = joint_noise(
                epsilon=self.epsilon, delta=delta, sample_rate=1.0 if self.sampling == "full_batch" else q,
                primal_steps=t_primal, dual_steps=t_dual, dual_share=self.dual_share)
        sigma_p, sigma_d = z_p * delta_p, z_d * delta_d

        key = self._noise_key(private)
        # The primal steps are accounted as rounds with random batches ("public_batch": each record
        # drawn with probability q, averaged over the draw). A seed known before the run would fix
        # the batches, and some records would be in more of them than the average: a private fit
        # draws its batches from the noise key (secret, or noise_seed's), a non-private one from seed.
        batch_key = key if private else seeded_key(self.seed)
        batch_cfg = _core.SiloConfig(sampling="without_replacement", batch_size=m)
        noise_round = iter(range(2**62))
        Xt = np.hstack([Xa, np.ones((n, 1))])
        theta = np.zeros((d + 1) * (l - 1))
        lam = np.zeros((blocks, k, U))
        sign = np.zeros((blocks, k, U))
        pop_w = n / (m * n_b)  # population weights per block: 1/(m n_b/n)
        grp_w = n / (m * n_ba)  # group weights per (block, group)
        history: list[dict[str, Any]] = []
        released = np.nan
        check = LocalCheck(self, sh)
        for epoch in range(self.epochs):
            for step in range(steps):
                idx = (np.arange(n) if m == n else
                       _core.draw_batch(batch_cfg, n, key=batch_key, silo=0, round=epoch * steps + step))
                theta = self._primal_step(theta, Xt[idx], ya[idx], sa[idx], block[idx], lam, sign, pop_w, grp_w,
                                          cp, sigma_p, key, next(noise_round), d, l)
            if not np.all(np.isfinite(theta)):
                raise FloatingPointError(f"PF-LD diverged at epoch {epoch}: lower lr (now {self.lr:g}) or lam_max")
            if epoch < self.epochs - 1 and self.lam_max > 0:
                v = self._violations(theta, Xa, ya, sa, block, n_b, n_ba, cd, l)
                v_tilde = mechanisms.add_noise(v, sigma_d, key, PFLD_DUAL_STREAM, epoch)
                lam = np.minimum(self.lam_max, lam + self.lr_dual * np.abs(v_tilde))
                sign = np.sign(v_tilde)
                released = float(np.max(np.abs(v_tilde)))
            self.theta_ = theta
            check.offer(epoch)
            if self.track_history:
                row = {"epoch": epoch + 1, "max_multiplier": float(lam.max()), "mean_multiplier": float(lam.mean()),
                       "released_violation": released}
                row.update(evaluate(theta, l, Xa, ya, sa if has_s else None))
                history.append(row)

        self.theta_ = theta
        self.multipliers_ = lam
        self.signs_ = sign
        self.history_ = pd.DataFrame(history).set_index("epoch") if history else pd.DataFrame()
        self.privacy_report_ = pd.DataFrame([{
            "silo": "central", "neighbouring": "replace one record's reported s (central, attribute DP)",
            "private": private, "sampling": self.sampling, "sample_rate": q, "primal_steps": t_primal,
            "dual_steps": t_dual, "sensitivity_primal": delta_p, "sensitivity_dual": delta_d,
            "noise_multiplier_primal": z_p, "noise_multiplier_dual": z_d, "sigma_primal": sigma_p,
            "sigma_dual": sigma_d, "target_epsilon": self.epsilon, "delta": delta if private else np.nan,
            "epsilon_spent": eps_spent if private else math.inf,
            "epsilon_basic_composition": eps_basic if private else math.inf,
            "composition": "exact joint (binomial mixture of Gaussians, primal + dual)",
            "noise": "secret" if self.noise_seed is None else f"reproducible (noise_seed={self.noise_seed})",
            "missing_s": int((~known).sum()),
            "guarantee": self._guarantee(private),
        }]).set_index("silo")
        check.choose()
        return self

    def _guarantee(self, private: bool) -> str:
        """The report's ``guarantee``: what the (ε, δ) above holds under. The sensitivities are set
        by the exact group counts n_{b,a}, which replacing one record's s changes, so the guarantee
        takes them as public (as SteFFLe's ``p_s="pooled"``, which SteFFLe reports as not covered)."""
        if not private:
            return "none (not private)"
        why = ["the group counts n_{b,a} are exact and taken as public (they set the noise)"]
        if self.noise_seed is not None:
            why.append(f"a known noise_seed={self.noise_seed}")
        return "not covered: " + "; ".join(why)

    def _primal_step(self, theta: np.ndarray, Xb: np.ndarray, yb: np.ndarray, sb: np.ndarray, bb: np.ndarray,
                     lam: np.ndarray, sign: np.ndarray, pop_w: np.ndarray, grp_w: np.ndarray, cp: float,
                     sigma_p: float, key: Any, step: int, d: int, l: int) -> np.ndarray:
        m = len(yb)
        F = _core.predict_proba(np.ascontiguousarray(Xb[:, :d]), theta, l)
        resid = F.copy()
        resid[np.arange(m), yb] -= 1.0
        coef = resid[:, 1:] / m  # ∇ mean cross-entropy = X̃ᵀ coef
        ls = lam * sign  # (blocks, k, U)
        if np.any(ls != 0):
            J = self._jacobian_rows(F, yb)  # (m, U, l-1)
            # Population part (no s): Σ_a λσ at the record's block, weight 1/(m n_b/n).
            pop = ls.sum(axis=1)[bb] * pop_w[bb][:, None]  # (m, U)
            coef = coef + np.einsum("ju,juv->jv", pop, J)
            # Group part (uses s): per-record clipped ∇h, weight 1/(m n_{b,a}/n).
            has = sb >= 0
            jn = np.linalg.norm(J, axis=2) * np.linalg.norm(Xb, axis=1)[:, None]
            fac = np.minimum(1.0, cp / np.maximum(jn, 1e-300))
            grp = np.zeros((m, J.shape[1]))
            grp[has] = ls[bb[has], sb[has]] * grp_w[bb[has], sb[has]][:, None] * fac[has]
            s_part = -(Xb.T @ np.einsum("ju,juv->jv", grp, J)).ravel()
            s_part = mechanisms.add_noise(s_part, sigma_p, key, PFLD_PRIMAL_STREAM, step)
            return theta - self.lr * ((Xb.T @ coef).ravel() + s_part)
        return theta - self.lr * (Xb.T @ coef).ravel()

    def _noise_key(self, private: bool) -> Any:
        """Secret key from the OS, or ``noise_seed``'s (warned when private)."""
        if self.noise_seed is not None and private:
            warnings.warn(f"noise_seed={self.noise_seed} makes PF-LD's noise reproducible: the guarantee does not "
                          "hold against anyone who knows it", PrivacyWarning, stacklevel=3)
        return noise_key(self.noise_seed)

    def _violations(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, s: np.ndarray, block: np.ndarray,
                    n_b: np.ndarray, n_ba: np.ndarray, cd: float, l: int) -> np.ndarray:
        """Signed violations v_{b,a,u} on the whole data with h clipped to [-C_d, C_d]."""
        F = _core.predict_proba(np.ascontiguousarray(X), theta, l)
        h = np.clip(self._h(F, y), -cd, cd)
        blocks, k = n_ba.shape
        pop = np.zeros((blocks, h.shape[1]))
        np.add.at(pop, block, h)
        pop /= n_b[:, None]
        grp = np.zeros((blocks, k, h.shape[1]))
        has = s >= 0
        np.add.at(grp, (block[has], s[has]), h[has])
        grp /= n_ba[:, :, None]
        return pop[:, None, :] - grp


def _joint_parts(scale: float, *, ratio: float, sample_rate: float, primal_steps: int,
                 dual_steps: int) -> tuple[float, float, float, list]:
    """``(z_p, z_d, fixed μ², binomials)`` at a common ``scale``: ``z_p = scale``,
    ``z_d = ratio · scale`` (only one part: that part alone, at ``scale``)."""
    z_p = scale if primal_steps else 0.0
    z_d = (ratio * scale if primal_steps else scale) if dual_steps else 0.0
    fixed = dual_steps / z_d**2 if dual_steps else 0.0
    binomials = []
    if primal_steps:
        if sample_rate >= 1.0:
            fixed += primal_steps / z_p**2
        else:
            binomials = [(primal_steps, sample_rate, z_p)]
    return z_p, z_d, fixed, binomials


def joint_noise(*, epsilon: float, delta: float, sample_rate: float, primal_steps: int, dual_steps: int,
                dual_share: float) -> tuple[float, float, float, float]:
    """PF-LD's noise multipliers ``(z_p, z_d)`` calibrated jointly, the joint ε they deliver at
    ``delta``, and the ε that basic composition would claim for the same noise.

    The relative noise of the two parts is that of the basic split (primal: ``(1 − dual_share)·ε``
    at ``δ/2``, dual: ``dual_share·ε`` at ``δ/2``, each calibrated exactly); both are then scaled
    down together until the exact joint account, ``δ(ε) = E_K[δ_Gauss(ε; √(K/z_p² + T_d/z_d²))]``
    with ``K ~ Bin(T_p, q)``, meets ``(ε, δ)`` (geometric bisection to 1e-10; the joint ε equals
    ``epsilon`` to 1e-9 relative, never above). So both noises are below the basic split's."""
    if primal_steps == 0 and dual_steps == 0:
        return 0.0, 0.0, 0.0, 0.0
    primal_scheme = "full_batch" if sample_rate >= 1.0 else "public_batch"
    ratio = 1.0
    if primal_steps and dual_steps:
        zp0 = _core.exact_noise_multiplier_for((1 - dual_share) * epsilon, delta / 2, sample_rate, primal_steps,
                                               primal_scheme)
        zd0 = _core.exact_noise_multiplier_for(dual_share * epsilon, delta / 2, 1.0, dual_steps, "full_batch")
        ratio = zd0 / zp0
    parts = dict(ratio=ratio, sample_rate=sample_rate, primal_steps=primal_steps, dual_steps=dual_steps)

    def joint_delta(scale: float) -> float:
        _, _, fixed, binomials = _joint_parts(scale, **parts)
        return _core.mixture_delta(epsilon, fixed, binomials)

    lo, hi = 1e-3, 1.0
    while joint_delta(hi) > delta:
        lo, hi = hi, hi * 2
        if hi > 1e7:
            raise ValueError(f"epsilon={epsilon:g} at delta={delta:g} is unreachable for PF-LD: raise epsilon or delta")
    while hi / lo > 1 + 1e-10:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if joint_delta(mid) <= delta else (mid, hi)
    z_p, z_d, fixed, binomials = _joint_parts(hi, **parts)
    joint = _core.mixture_epsilon(delta, fixed, binomials)
    basic = 0.0
    if primal_steps:
        basic += _core.exact_epsilon_for(z_p, sample_rate, primal_steps, delta / 2, primal_scheme)
    if dual_steps:
        basic += _core.exact_epsilon_for(z_d, 1.0, dual_steps, delta / 2, "full_batch")
    return z_p, z_d, float(joint), float(basic)


def _two_largest_sum(a: np.ndarray) -> float:
    """max over rows b of the sum of the two largest entries of row b (the worst pair r ≠ r′)."""
    top = np.sort(a, axis=1)[:, -2:]
    return float(top.sum(axis=1).max())
