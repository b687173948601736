"""scikit-learn style estimators. :class:`SteFFLe` is Algorithm 1 of Gupta, Poornash, Razaviyayn
and Lowy, "A Stochastic Optimization Framework for Private and Fair Learning From Decentralized
Data" (2024).

SteFFLe solves ``min_θ max_W  L(θ) + λ · mean_i ψ_i(θ, W)`` (the FERMI objective) by noisy
federated stochastic gradient descent-ascent. In round t every silo j draws a batch, computes its
loss gradient g_j and the ψ-gradient parts (``rust/src/psi.rs``), clips and noises the parts that
depend on the sensitive attribute, and sends them; the server sets

    θ ← θ − η_θ Σ_j ω_j [g_j + λ(a_θ,j + h_θ,j)],    W ← Π_D(W + λ η_W Σ_j ω_j [a_W,j + h_W,j])

(``rust/src/round.rs``), where by default (``w_step="normalised"``) the server passes
``η_W / λ`` as the W step so that W moves by ``η_W ∇_W ψ̄`` at every λ (see ``w_step``). Each
silo calibrates its own noise to its own (ε, δ) and keeps its own ledger; it refuses to send a
message that would exceed its budget.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import numpy as np
import pandas as pd

from pfair import _core
from pfair._validation import as_features, as_vector
from pfair.federation import Federation
from pfair.settings import SteFFLeSettings


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
    """Private and fair federated logistic/softmax regression: SteFFLe (Gupta, Poornash, Razaviyayn
    and Lowy, "A Stochastic Optimization Framework for Private and Fair Learning From Decentralized
    Data", 2024, Alg. 1).

    The defaults (``batch_size``, ``lr_theta``, ``lr_w``, ``w_radius``, ``clip``, ``epochs``) were
    chosen on validation splits of the bundled data sets at ε = 1 by
    :mod:`pfair.experiments.defaults` (docs/optimisation.md).

    Parameters
    ----------
    fairness : {"demographic_parity", "equalized_odds", "equal_opportunity"}
    lam : float, λ ≥ 0, weight of the fairness penalty (0: no penalty, and nothing sent depends on s).
    epsilon, delta : each silo's ISRL-DP budget over all its fits. ``epsilon=None``: non-private.
        ``delta=None``: 1/n_j² for silo j. A second fit on the same silos gets only what the first
        left (the budget lives in the silos' ledgers).
    epochs : int. One epoch is ``ceil(mean silo size / batch_size)`` rounds.
    batch_size : int or "auto", m, the fixed batch size (``sampling="poisson"``: the expected size).
        ``"auto"`` (default): ``min(4096, smallest silo)`` (``pfair.settings.AUTO_BATCH``; the silo
        sizes are public); ``min(256, smallest silo)`` with ``protect="record"``, where a small
        hidden batch amplifies privacy. With public batches (attribute mode) ε depends on the
        epochs, not on m, while the noise on a batch mean falls as 1/m: large batches are cheap in
        privacy (docs/optimisation.md).
    lr_theta, lr_w : step sizes η_θ (decayed by ``lr_decay`` every ``decay_every`` epochs), η_W.
    w_step : "normalised" (default) or "paper". The paper's ascent step is ``λ η_W``; the W-problem
        has curvature ``2λ E[F_u]``, so past ``λ η_W E[F_u] = 1`` W oscillates onto the radius and
        training collapses to a constant predictor (on Adult at λ ≈ 2.6 with η_W = 0.5).
        ``"normalised"`` steps W by ``η_W ∇_W ψ̄`` whatever λ (stable for η_W < 1). Server-side
        post-processing: privacy is the same either way. See docs/optimisation.md.
    w_radius : D, each W block is projected on the Frobenius ball of radius D (None: no projection).
    clip : C_θ, per-record clip norm of the s-dependent θ-part b_i. ``"auto"`` (default): 0.5 when
        ``epsilon`` is set, no clipping in a non-private fit; None: no clipping (refused when
        private, where the sensitivity needs a clip norm).
    clip_loss, clip_w : per-record clip norms of the loss gradient and of ∇_W ψ_i, used only with
        ``protect="record"``; ``"auto"``: 1.0 and 2.0 when private, no clipping otherwise.
    sampling : {"without_replacement", "poisson", "full_batch"}; the accountant matches it exactly.
    protect : "attribute" (neighbours differ in one record's s; the paper) or "record" (a whole record).
    calibration : "rdp" (numeric accountant) or "paper" (the paper's closed form; its rounds past the
        budget are refused, so training may stop early — warned).
    p_s : group proportions of the ψ-term. Public proportions (an array of k, or classes × k for
        equalized odds, or a mapping group → proportion); ``"dp"`` (each silo releases a DP
        histogram of s, charged to its ledger; the default when ``epsilon`` is set); ``"pooled"``
        (exact proportions of the pooled data: the paper's assumption, NOT covered by the
        guarantee, warned; the default of a non-private fit).
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
    seed : int, seeds what is public anyway: the batch order in attribute mode and the random
        iterate. The noise never depends on it.
    noise_seed : int or None. None (default): every silo draws its noise keys from the operating
        system's entropy, fresh per fit. An int makes the noise reproducible, for simulations only:
        anyone who knows it can remove the noise, so the guarantee does not hold against them (a
        ``PrivacyWarning`` is raised and the privacy report says so).
    exact_diagnostics : record statistics of the silos' exact data (batch loss, ψ, clip counts,
        training-set fairness) in ``history_`` of a private fit; outside the guarantee (warned).
    progress : show a progress bar over epochs.
    track_history : keep one row per epoch in ``history_``.
    warm_start : start the next fit from this estimator's ``theta_`` and ``W_`` (a new run on the
        silos' ledgers: it spends on top of what earlier fits spent, like any fit).

    Attributes
    ----------
    theta_, coef_, intercept_, W_, classes_, groups_, n_features_in_
    history_ : DataFrame, one row per epoch. A private fit records released values only: the step
        size, how many silos answered, the norms of θ, W and of the update, and metrics on
        ``eval_set`` (data the caller holds, not the silos'). Non-private fits and
        ``exact_diagnostics=True`` add the batch loss, ψ, clip counts and training-set metrics.
    privacy_report_ : DataFrame, one row per silo (σ's, noise multiplier, steps, ε spent over all its
        fits, δ, where p_s came from, whether the noise is secret).
    ledgers_ : list of per-silo :class:`pfair.privacy.PrivacyLedger` (persistent; save them with
        ``ledger.save(path)`` and pass them back with ``fit(..., ledgers=[...])``).
    """

    def __init__(
        self,
        *,
        fairness: str = "demographic_parity",
        lam: float = 1.0,
        epsilon: float | None = None,
        delta: float | None = None,
        epochs: int = 40,
        batch_size: int | str = "auto",
        lr_theta: float = 0.25,
        lr_w: float = 0.25,
        w_radius: float | None = 2.0,
        clip: float | str | None = "auto",
        clip_loss: float | str | None = "auto",
        clip_w: float | str | None = "auto",
        sampling: str = "without_replacement",
        protect: str = "attribute",
        calibration: str = "rdp",
        p_s: Any = None,
        p_s_epsilon_share: float = 0.1,
        lr_decay: float = 0.8,
        decay_every: int = 10,
        w_step: str = "normalised",
        output: str = "last",
        silo_weights: str = "uniform",
        positive_class: int = 1,
        mode: str = "standard",
        amplification: bool = True,
        dummy_noise: bool = False,
        seed: int = 0,
        noise_seed: int | None = None,
        exact_diagnostics: bool = False,
        progress: bool = False,
        track_history: bool = True,
        warm_start: bool = False,
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
        self.w_step = w_step
        self.output = output
        self.silo_weights = silo_weights
        self.positive_class = positive_class
        self.mode = mode
        self.amplification = amplification
        self.dummy_noise = dummy_noise
        self.seed = seed
        self.noise_seed = noise_seed
        self.exact_diagnostics = exact_diagnostics
        self.progress = progress
        self.track_history = track_history
        self.warm_start = warm_start

    def settings(self) -> SteFFLeSettings:
        """The validated, frozen settings of the next fit (every SteFFLe hyper-parameter, including
        those a named configuration fixes)."""
        names = [p for p in inspect.signature(SteFFLe.__init__).parameters if p != "self"]
        return SteFFLeSettings.from_params({name: getattr(self, name) for name in names})

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
        ledgers: Any = None,
        resume: bool = False,
    ) -> "SteFFLe":
        """Train on a :class:`~pfair.Federation`, or on arrays split by ``silos`` (one silo id per
        record; ``None``: one silo). ``sensitive_silos`` (``mode="hybrid"``) gives the sensitive
        silo of each record, in the order of the input rows (for a Federation built by
        ``from_arrays``/``from_dataset``/``partition``: the order of the rows it was built from).
        ``eval_set=(X, y, sensitive_features)`` adds metrics on data you hold to ``history_``.

        ``ledgers``: None (default) charges the ledgers the Federation's silos hold (created on
        their first private fit; arrays build a new Federation, hence new ledgers), a list of one
        :class:`~pfair.privacy.PrivacyLedger` or JSON path per silo (a path that does not exist yet
        becomes a new ledger written there), or ``"new"`` for fresh ledgers (simulations only).
        ``resume=True`` continues this estimator's interrupted fit (same data, settings and
        ledgers) where the ledgers say it stopped; no round is charged twice."""
        st = self.settings()
        fed = self._federation(X, y, sensitive_features, silos)
        if st.mode == "hybrid" and sensitive_silos is None:
            raise ValueError("mode='hybrid' needs sensitive_silos= (the sensitive silo of each record)")
        self.classes_, self.groups_ = fed.classes_, fed.groups_
        self.n_features_in_ = fed.n_features
        pooled = fed.pooled() if st.track_history and (st.exact_diagnostics or not st.private) else None

        def on_epoch(epoch: int, theta: np.ndarray, w: np.ndarray, info: dict) -> dict | None:
            if not st.track_history:
                return None
            self.theta_ = np.asarray(theta)
            row = dict(info)
            if pooled is not None:
                row.update(self._evaluate("train", *pooled))
            if eval_set is not None:
                row.update(self._evaluate("test", *eval_set))
            return row

        if st.mode != "standard":
            from pfair.hybrid import HybridRunner

            if resume:
                raise ValueError(f"resume=True is available in mode='standard' only, not mode={st.mode!r}")
            runner = HybridRunner(st, fed, sensitive_silos, ledgers=ledgers)
            state = runner.run(on_epoch=on_epoch, progress=st.progress)
            plans, self.ledgers_ = runner.plans, runner.ledgers
        else:
            from pfair.protocol.simulation import Simulation

            previous = getattr(self, "_run_state", None) if resume else None
            if resume and previous is None:
                raise ValueError("resume=True needs an interrupted fit of this estimator to resume")
            sim = Simulation(st, fed, ledgers=ledgers)
            init = None
            if st.warm_start and not resume and hasattr(self, "theta_") and hasattr(self, "W_"):
                init = (self.theta_, self.W_)
            try:
                state = sim.run(resume=previous, on_epoch=on_epoch, progress=st.progress, init=init)
            finally:
                # An interrupted fit can be resumed from its last completed epoch.
                self._run_state = sim.state if sim.state is not None else previous
            plans, self.ledgers_ = sim.plans, [ledger for ledger in sim.ledgers if ledger is not None]
            self.group_proportions_ = state.proportions
            self.n_rounds_ = state.epochs_done * sim.rounds_per_epoch
        self._adopt(state, plans, st, fed.n_groups, fed.n_classes)
        return self

    def _adopt(self, state: Any, plans: list, st: SteFFLeSettings, k: int, l: int) -> None:
        """The fitted attributes from a finished (or interrupted) run's state: θ (the snapshot for
        ``output="random"``), W as ``k × l`` (or ``classes × k × l``), history and the report."""
        theta, w = state.snapshot if state.snapshot is not None else (state.theta, state.w)
        blocks = l if st.fairness == "equalized_odds" else 1
        self.theta_ = np.asarray(theta, dtype=np.float64)
        self.W_ = np.asarray(w).reshape(blocks, k, l)
        if blocks == 1:
            self.W_ = self.W_[0]
        self.epochs_done_ = state.epochs_done
        self.history_ = pd.DataFrame(state.history).set_index("epoch") if state.history else pd.DataFrame()
        self.privacy_report_ = SteFFLe._report(self, plans, st)  # DeepSteFFLe shares this

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

    def _report(self, plans: list, st: SteFFLeSettings) -> pd.DataFrame:
        rows = []
        ledgers = self.ledgers_ if st.private else []
        for j, plan in enumerate(plans):
            row = plan.as_dict()
            row["epsilon_spent"] = ledgers[j].epsilon_spent() if ledgers else math.inf
            row["p_s"] = st.p_s_source
            row["noise"] = "secret" if st.noise_seed is None else f"reproducible (noise_seed={st.noise_seed})"
            covered = st.private and st.noise_seed is None and st.p_s_source != "pooled"
            row["guarantee"] = ("none (non-private)" if not st.private else
                                "covered" if covered else
                                "not covered: " + ", ".join(
                                    r for r, bad in (("noise_seed is known", st.noise_seed is not None),
                                                     ("p_s pooled from exact data", st.p_s_source == "pooled"))
                                    if bad))
            rows.append(row)
        return pd.DataFrame(rows).set_index("silo")

    @property
    def epsilon_spent_(self) -> float:
        """Largest ε spent by any silo (each silo's guarantee is its own)."""
        return float(self.privacy_report_["epsilon_spent"].max())


def _label_indices(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    lookup = {c: i for i, c in enumerate(classes.tolist())}
    try:
        return np.fromiter((lookup[v] for v in y.tolist()), dtype=np.int64, count=len(y))
    except KeyError as exc:
        raise ValueError(f"y contains {exc.args[0]!r}, a label not seen in fit") from None



