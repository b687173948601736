"""scikit-learn style estimators. :class:`SteFFLe` is the paper's algorithm (seed 003, Alg. 1).

SteFFLe solves ``min_θ max_W  L(θ) + λ · mean_i ψ_i(θ, W)`` (the FERMI objective) by noisy
federated stochastic gradient descent-ascent. In round t every silo j draws a batch, computes its
loss gradient g_j and the ψ-gradient parts (``rust/src/psi.rs``), clips and noises the parts that
depend on the sensitive attribute, and sends them; the server sets

    θ ← θ − η_θ Σ_j ω_j [g_j + λ(a_θ,j + h_θ,j)],    W ← Π_D(W + λ η_W Σ_j ω_j [a_W,j + h_W,j])

(``rust/src/round.rs``). Each silo calibrates its own noise to its own (ε, δ) and keeps its own
ledger; it refuses to send a message that would exceed its budget.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import numpy as np
import pandas as pd

from pfair import _core
from pfair._validation import as_features, as_vector, check_choice, check_int, check_positive
from pfair.federation import FAIRNESS_NOTIONS, Federation

SAMPLINGS = ("without_replacement", "poisson", "full_batch")


class _ParamsMixin:
    """``get_params``/``set_params`` as in scikit-learn (hyper-parameters are ``__init__`` args)."""

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        names = [p for p in inspect.signature(type(self).__init__).parameters if p != "self"]
        return {name: getattr(self, name) for name in names}

    def set_params(self, **params: Any) -> "_ParamsMixin":
        valid = self.get_params()
        for key, value in params.items():
            if key not in valid:
                raise ValueError(f"{key!r} is not a parameter of {type(self).__name__}; valid: {sorted(valid)}")
            setattr(self, key, value)
        return self

    def __repr__(self) -> str:
        sig = inspect.signature(type(self).__init__).parameters
        changed = [f"{k}={v!r}" for k, v in self.get_params().items() if sig[k].default is not v and sig[k].default != v]
        return f"{type(self).__name__}({', '.join(changed)})"


class LinearSoftmaxMixin:
    """Prediction for a fitted linear-softmax model stored in ``theta_`` (``(d+1)·(l-1)``)."""

    theta_: np.ndarray
    classes_: np.ndarray
    n_features_in_: int

    def _check_fitted(self) -> None:
        if not hasattr(self, "theta_"):
            raise RuntimeError(f"this {type(self).__name__} is not fitted yet; call fit first")

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities ``F(x) = softmax(0, x̃·θ)``, shape ``(n, l)``."""
        self._check_fitted()
        Xa = as_features(X)
        if Xa.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {Xa.shape[1]} features but the model was fitted with {self.n_features_in_}")
        return _core.predict_proba(Xa, self.theta_, len(self.classes_))

    def predict(self, X: Any) -> np.ndarray:
        """Most probable class, in the original label categories."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

    def score(self, X: Any, y: Any) -> float:
        """Accuracy."""
        return float(np.mean(self.predict(X) == as_vector(y, "y")))

    @property
    def coef_(self) -> np.ndarray:
        """Weights: ``(1, d)`` for two classes (logistic regression), ``(l, d)`` otherwise, where
        class 0 is the reference class with zero weights."""
        self._check_fitted()
        d, l = self.n_features_in_, len(self.classes_)
        th = self.theta_.reshape(d + 1, l - 1)
        return th[:d].T.copy() if l == 2 else np.vstack([np.zeros(d), th[:d].T])

    @property
    def intercept_(self) -> np.ndarray:
        self._check_fitted()
        d, l = self.n_features_in_, len(self.classes_)
        th = self.theta_.reshape(d + 1, l - 1)
        return th[d].copy() if l == 2 else np.concatenate([[0.0], th[d]])


class SteFFLe(_ParamsMixin, LinearSoftmaxMixin):
    """Private and fair federated logistic/softmax regression (SteFFLe, seed 003 Alg. 1).

    Parameters
    ----------
    fairness : {"demographic_parity", "equalized_odds", "equal_opportunity"}
    lam : float, λ ≥ 0, weight of the fairness penalty (0: no penalty, and nothing sent depends on s).
    epsilon, delta : per-silo ISRL-DP target. ``epsilon=None``: non-private. ``delta=None``: 1/n_j² for
        silo j.
    epochs : int. One epoch is ``ceil(mean silo size / batch_size)`` rounds.
    batch_size : int, m, the fixed batch size (``sampling="poisson"``: the expected size).
    lr_theta, lr_w : step sizes η_θ (decayed by ``lr_decay`` every ``decay_every`` epochs), η_W.
    w_radius : D, each W block is projected on the Frobenius ball of radius D (None: no projection).
    clip : C_θ, per-record clip norm of the s-dependent θ-part b_i (None: none; required when private).
    clip_loss, clip_w : per-record clip norms of the loss gradient and of ∇_W ψ_i, used only with
        ``protect="record"``.
    sampling : {"without_replacement", "poisson", "full_batch"}; the accountant matches it exactly.
    protect : "attribute" (neighbours differ in one record's s; the paper) or "record" (a whole record).
    calibration : "rdp" (numeric accountant) or "paper" (seed 003 Thm 3.3, reported and warned).
    p_s : "public" (the paper's assumption: group proportions known) or "dp" (each silo releases a
        Gaussian-noised histogram of s; see :mod:`pfair.privacy.histogram`).
    p_s_epsilon_share : with ``p_s="dp"``, the fraction of each silo's ε the histogram uses alone;
        the training noise is calibrated to the composition of both.
    output : "last" or "random" (the paper's uniformly random iterate).
    silo_weights : "uniform" (the paper's 1/N) or "size" (n_j / n).
    positive_class : class index of the positive label (equal opportunity).
    mode : "standard", "divisions", "central_sensitive" or "hybrid": who holds s (see
        :mod:`pfair.hybrid`; the hybrid modes need ``protect="attribute"``).
    amplification, dummy_noise : hybrid modes only: account with the chance that a record is not
        in a round's batch (the public-batch bound; the batch itself is never assumed secret), and
        let sensitive silos that hold no record of a round's batch send zero-mean noise.
    seed : int, seeds batches, noise and the random iterate. Same seed, same bits.
    progress : show a progress bar over epochs.
    track_history : evaluate loss/accuracy/fairness on the training data after every epoch.

    Attributes
    ----------
    theta_, coef_, intercept_, W_, classes_, groups_, n_features_in_
    history_ : DataFrame, one row per epoch (loss, ψ, train error and violations; test ones if
        ``eval_set`` was given to ``fit``). These diagnostics are computed by the simulation on the
        pooled training data; they are NOT part of any silo's private transcript, so publishing
        them is not covered by the (ε, δ) guarantee (set ``track_history=False`` in deployments).
    privacy_report_ : DataFrame, one row per silo (σ's, noise multiplier, steps, ε spent, δ, ...).
    ledgers_ : list of per-silo :class:`pfair.privacy.PrivacyLedger`.
    """

    def __init__(
        self,
        *,
        fairness: str = "demographic_parity",
        lam: float = 1.0,
        epsilon: float | None = None,
        delta: float | None = None,
        epochs: int = 40,
        batch_size: int = 256,
        lr_theta: float = 0.25,
        lr_w: float = 0.5,
        w_radius: float | None = 2.0,
        clip: float | None = 1.0,
        clip_loss: float | None = 1.0,
        clip_w: float | None = 2.0,
        sampling: str = "without_replacement",
        protect: str = "attribute",
        calibration: str = "rdp",
        p_s: str = "public",
        p_s_epsilon_share: float = 0.1,
        lr_decay: float = 0.8,
        decay_every: int = 10,
        output: str = "last",
        silo_weights: str = "uniform",
        positive_class: int = 1,
        mode: str = "standard",
        amplification: bool = True,
        dummy_noise: bool = False,
        seed: int = 0,
        progress: bool = False,
        track_history: bool = True,
    ) -> None:
        self.fairness = fairness
        self.lam = lam
        self.epsilon = epsilon
        self.delta = delta
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr_theta = lr_theta
        self.lr_w = lr_w
        self.w_radius = w_radius
        self.clip = clip
        self.clip_loss = clip_loss
        self.clip_w = clip_w
        self.sampling = sampling
        self.protect = protect
        self.calibration = calibration
        self.p_s = p_s
        self.p_s_epsilon_share = p_s_epsilon_share
        self.lr_decay = lr_decay
        self.decay_every = decay_every
        self.output = output
        self.silo_weights = silo_weights
        self.positive_class = positive_class
        self.mode = mode
        self.amplification = amplification
        self.dummy_noise = dummy_noise
        self.seed = seed
        self.progress = progress
        self.track_history = track_history

    # ------------------------------------------------------------------ validation
    def _validate_params(self) -> None:
        check_choice(self.fairness, "fairness", FAIRNESS_NOTIONS)
        check_positive(self.lam, "lam", allow_zero=True)
        check_positive(self.epsilon, "epsilon", allow_none=True)
        if self.delta is not None:
            check_positive(self.delta, "delta")
            if not 0 < self.delta < 1:
                raise ValueError(f"delta must be in (0, 1), got {self.delta}; a common choice is 1/n²")
        check_int(self.epochs, "epochs")
        check_int(self.batch_size, "batch_size")
        check_positive(self.lr_theta, "lr_theta", allow_zero=True)
        check_positive(self.lr_w, "lr_w", allow_zero=True)
        for name in ("w_radius", "clip", "clip_loss", "clip_w"):
            check_positive(getattr(self, name), name, allow_none=True)
        check_choice(self.sampling, "sampling", SAMPLINGS)
        check_choice(self.protect, "protect", ("attribute", "record"))
        check_choice(self.calibration, "calibration", ("rdp", "paper"))
        check_choice(self.p_s, "p_s", ("public", "dp"))
        check_choice(self.output, "output", ("last", "random"))
        check_choice(self.silo_weights, "silo_weights", ("uniform", "size"))
        from pfair.hybrid import MODES

        check_choice(self.mode, "mode", MODES)
        check_positive(self.lr_decay, "lr_decay")
        check_int(self.decay_every, "decay_every")
        check_int(self.seed, "seed", minimum=0)
        if self.epsilon is not None:
            needed = ["clip"] + (["clip_loss", "clip_w"] if self.protect == "record" else [])
            for name in needed:
                if getattr(self, name) is None:
                    raise ValueError(f"{name} must be set when epsilon is set: sensitivity needs a clip norm")
            if self.calibration == "paper" and self.protect == "record":
                raise ValueError("calibration='paper' exists only for protect='attribute' (the paper's setting)")
            if self.calibration == "paper" and self.p_s == "dp":
                raise ValueError("calibration='paper' ignores the cost of a private p_s histogram; use "
                                 "calibration='rdp' with p_s='dp', or p_s='public' with calibration='paper'")
        if self.p_s == "dp" and self.epsilon is None:
            raise ValueError("p_s='dp' needs epsilon (a private histogram needs a budget); use p_s='public'")

    # ------------------------------------------------------------------ fit
    def fit(
        self,
        X: Any,
        y: Any = None,
        *,
        sensitive_features: Any = None,
        silos: Any = None,
        sensitive_silos: Any = None,
        eval_set: tuple[Any, Any, Any] | None = None,
    ) -> "SteFFLe":
        """Train on a :class:`~pfair.Federation`, or on arrays split by ``silos`` (one silo id per
        record; ``None``: one silo). ``sensitive_silos`` (``mode="hybrid"``) gives the sensitive
        silo of each record, in the order of the input rows (for a Federation built by
        ``from_arrays``/``from_dataset``/``partition``: the order of the rows it was built from).
        ``eval_set=(X, y, sensitive_features)`` adds test metrics to ``history_``."""
        self._validate_params()
        if self.mode == "hybrid" and sensitive_silos is None:
            raise ValueError("mode='hybrid' needs sensitive_silos= (the sensitive silo of each record)")
        fed = self._federation(X, y, sensitive_features, silos)
        self.classes_, self.groups_ = fed.classes_, fed.groups_
        self.n_features_in_ = fed.n_features
        k, l, d = fed.n_groups, fed.n_classes, fed.n_features
        if self.fairness == "equal_opportunity" and not 0 <= self.positive_class < l:
            raise ValueError(f"positive_class={self.positive_class} is not a class index in 0..{l - 1}")
        if self.sampling != "full_batch":
            for j, n_j in enumerate(fed.sizes):
                if self.batch_size > n_j:
                    raise ValueError(
                        f"batch_size={self.batch_size} is larger than silo {j}, which has {n_j} records; "
                        "use a smaller batch_size or fewer silos"
                    )

        mean_size = float(np.mean(fed.sizes))
        rounds_per_epoch = 1 if self.sampling == "full_batch" else max(1, math.ceil(mean_size / self.batch_size))
        total_rounds = self.epochs * rounds_per_epoch
        proportions = self._group_proportions(fed)
        if self.mode == "standard":
            runner: Any = _StandardRunner(self, fed, proportions, total_rounds)
        else:
            from pfair.hybrid import HybridRunner

            runner = HybridRunner(self, fed, proportions, sensitive_silos, total_rounds)
        if self.p_s != "dp":
            self.ledgers_ = runner.ledgers
        from pfair.privacy.calibration import warn_if_over_budget

        warn_if_over_budget(runner.plans)

        theta = np.zeros((d + 1) * (l - 1))
        blocks = proportions.shape[0]
        w = np.zeros(blocks * k * l)
        rng = np.random.default_rng(self.seed)
        pick = int(rng.integers(0, total_rounds)) if self.output == "random" else None
        snapshot = None
        history: list[dict[str, Any]] = []
        pooled = fed.pooled() if self.track_history else None

        epochs = range(self.epochs)
        if self.progress:
            from tqdm.auto import tqdm

            epochs = tqdm(epochs, desc="SteFFLe", unit="epoch")
        for epoch in epochs:
            for ledger, plan in zip(self.ledgers_, runner.plans):
                if 0 < plan.noise_multiplier < math.inf:  # z = inf: nothing sent depends on s
                    ledger.charge(_round_event(plan, rounds_per_epoch))
            lr = self.lr_theta * self.lr_decay ** (epoch // self.decay_every)
            theta, w, summary, snap = runner.run_epoch(
                theta, w, lr=lr, start=epoch * rounds_per_epoch, n_rounds=rounds_per_epoch, snapshot_round=pick
            )
            if snap is not None:
                snapshot = snap
            if not np.all(np.isfinite(theta)):
                raise FloatingPointError(
                    f"training diverged at epoch {epoch}: lower lr_theta (now {lr:g}) or lam, or clip harder"
                )
            if self.track_history:
                self.theta_ = theta
                row = {"epoch": epoch + 1, "lr_theta": lr, **summary}
                row.update(self._evaluate("train", *pooled))
                if eval_set is not None:
                    row.update(self._evaluate("test", *eval_set))
                history.append(row)
                if self.progress:
                    epochs.set_postfix(loss=f"{row['train_loss']:.4f}", dp=f"{row['train_dp_violation']:.4f}")

        if snapshot is not None:
            theta, w = snapshot
        self.theta_ = np.asarray(theta)
        self.W_ = np.asarray(w).reshape(blocks, k, l)
        if blocks == 1:
            self.W_ = self.W_[0]
        self.n_rounds_ = total_rounds
        self.history_ = pd.DataFrame(history).set_index("epoch") if history else pd.DataFrame()
        self.privacy_report_ = self._report(runner.plans)
        return self

    # ------------------------------------------------------------------ helpers
    def _federation(self, X: Any, y: Any, sensitive_features: Any, silos: Any) -> Federation:
        if isinstance(X, Federation):
            if y is not None or sensitive_features is not None or silos is not None:
                raise ValueError("pass either a Federation, or X, y, sensitive_features and silos; not both")
            return X
        if y is None or sensitive_features is None:
            raise ValueError("fit(X, y, sensitive_features=s, silos=ids) needs y and sensitive_features")
        n = as_features(X).shape[0]
        ids = np.zeros(n, dtype=np.int64) if silos is None else silos
        return Federation.from_arrays(X, y, sensitive_features=sensitive_features, silos=ids)

    def _group_proportions(self, fed: Federation) -> np.ndarray:
        if self.p_s == "public":
            self.ledgers_ = []
            return fed.group_proportions(self.fairness, self.positive_class)
        from pfair.privacy.histogram import private_group_proportions

        return private_group_proportions(self, fed)

    def _evaluate(self, split: str, X: Any, y: Any, s: Any) -> dict[str, float]:
        from pfair import metrics

        Xa = as_features(X)
        proba = _core.predict_proba(Xa, self.theta_, len(self.classes_))
        y_idx = _label_indices(as_vector(y, "y", Xa.shape[0]), self.classes_)
        pred = np.argmax(proba, axis=1)
        s_arr = as_vector(s, "sensitive_features", Xa.shape[0])
        loss = float(-np.mean(np.log(np.clip(proba[np.arange(len(y_idx)), y_idx], 1e-300, None))))
        return {
            f"{split}_loss": loss,
            f"{split}_error": float(np.mean(pred != y_idx)),
            f"{split}_dp_violation": metrics.demographic_parity_violation(y_idx, pred, sensitive_features=s_arr),
            f"{split}_eo_violation": metrics.equalized_odds_violation(y_idx, pred, sensitive_features=s_arr),
        }

    def _report(self, plans: list) -> pd.DataFrame:
        rows = []
        for j, plan in enumerate(plans):
            row = plan.as_dict()
            row["epsilon_spent"] = self.ledgers_[j].epsilon_spent() if self.ledgers_ else math.inf
            row["p_s"] = self.p_s
            rows.append(row)
        return pd.DataFrame(rows).set_index("silo")

    @property
    def epsilon_spent_(self) -> float:
        """Largest ε spent by any silo (each silo's guarantee is its own)."""
        return float(self.privacy_report_["epsilon_spent"].max())


class _StandardRunner:
    """Runs SteFFLe epochs with whole-record silos (Algorithm 1); holds each silo's noise plan."""

    def __init__(self, model: SteFFLe, fed: Federation, proportions: np.ndarray, total_rounds: int) -> None:
        from pfair.privacy.calibration import plan_silo_noise
        from pfair.privacy.ledger import PrivacyLedger

        inf = math.inf
        self.model = model
        self.clips = dict(clip_loss=model.clip_loss or inf, clip_theta=model.clip or inf, clip_w=model.clip_w or inf)
        sends_psi = model.lam > 0
        private = model.epsilon is not None
        deltas = [model.delta if model.delta is not None else 1.0 / n_j**2 for n_j in fed.sizes]
        prior = getattr(model, "_prior_events", None)  # e.g. the p_s histogram, already in the ledgers
        self.plans = [
            plan_silo_noise(
                silo=j, n_records=n_j, batch_size=model.batch_size, sampling=model.sampling, steps=total_rounds,
                epsilon=model.epsilon, delta=deltas[j], proportions=proportions, fairness=model.fairness,
                positive=model.positive_class, protect=model.protect, calibration=model.calibration,
                sends_psi=sends_psi, prior_events=prior[j] if prior else None, **self.clips,
            )
            for j, n_j in enumerate(fed.sizes)
        ]
        # In "paper" mode the closed form may deliver more than the target (it is warned about
        # and reported); the ledger then enforces what is actually delivered.
        self.ledgers = (
            [
                PrivacyLedger(epsilon=max(model.epsilon, p.epsilon) if model.calibration == "paper" else model.epsilon,
                              delta=deltas[j], silo=j)
                for j, p in enumerate(self.plans)
            ]
            if private
            else []
        )
        self.configs = [
            _core.SiloConfig(
                sampling=model.sampling, batch_size=model.batch_size, sample_rate=p.sample_rate,
                protect=model.protect, sigma_loss=p.sigma_loss, sigma_theta=p.sigma_theta, sigma_w=p.sigma_w,
                send_psi=sends_psi, **self.clips,
            )
            for p in self.plans
        ]
        sizes = np.asarray(fed.sizes, dtype=np.float64)
        self.weights = (
            np.full(fed.n_silos, 1.0 / fed.n_silos) if model.silo_weights == "uniform" else sizes / sizes.sum()
        ).tolist()
        self.silo_set = _core.SiloSet(
            [(s.X, s.y, s.s) for s in fed.silos], n_groups=fed.n_groups, n_classes=fed.n_classes,
            fairness=model.fairness, positive=model.positive_class,
        )
        self.inv = np.ascontiguousarray(proportions.ravel() ** -0.5)

    def run_epoch(self, theta: np.ndarray, w: np.ndarray, *, lr: float, start: int, n_rounds: int,
                  snapshot_round: int | None) -> tuple[np.ndarray, np.ndarray, dict[str, Any], Any]:
        m = self.model
        out = self.silo_set.run_rounds(
            theta, w, self.inv, self.configs, self.weights, lam=float(m.lam), lr_theta=lr, lr_w=float(m.lr_w),
            w_radius=float(m.w_radius or math.inf), seed=int(m.seed), start=start, n_rounds=n_rounds,
            snapshot_round=snapshot_round,
        )
        summary = {"batch_loss": float(np.mean(out["loss"])), "batch_psi": float(np.mean(out["psi"])),
                   "clipped": int(np.sum(out["clipped"]))}
        return out["theta"], out["w"], summary, out["snapshot"]


def _label_indices(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    lookup = {c: i for i, c in enumerate(classes.tolist())}
    try:
        return np.fromiter((lookup[v] for v in y.tolist()), dtype=np.int64, count=len(y))
    except KeyError as exc:
        raise ValueError(f"y contains {exc.args[0]!r}, a label not seen in fit") from None


def _round_event(plan: Any, steps: int) -> Any:
    from pfair.privacy.calibration import round_event

    return round_event(plan, steps)
