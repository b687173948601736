"""Non-private, non-fair SGD baselines: :class:`CentralERM` and :class:`FedAvg`.

Both train the linear-softmax model ``F(x) = softmax(0, x̃·θ)`` (θ of shape ``(d+1)×(l-1)``,
class 0 the reference class; ``l = 2`` is logistic regression) on the cross-entropy

    L(θ) = (1/n) Σ_i -log F_{y_i}(x_i; θ).

The gradients come from the Rust kernel (``pfair._core``: ``SiloSet.run_rounds`` and
``SiloSet.step`` with the ψ-parts switched off), i.e. exactly the loss gradient SteFFLe uses,
with the same seeded batch streams ``(seed, silo, round)``. Nothing here looks at the sensitive
attribute; ``sensitive_features`` is optional and only feeds the fairness columns of
``history_``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from pfair import _core
from pfair._fit import _ParamsMixin
from pfair._validation import check_choice, check_int, check_positive
from pfair.baselines._common import Shards, evaluate, non_private_report, shards_from
from pfair.estimators import LinearSoftmaxMixin
from pfair.protocol.keys import seeded_key
from pfair.protocol.plan import check_batch_fits, rounds_per_epoch
from pfair.settings import SAMPLINGS
from pfair.validation import LocalCheck


class _SGDBase(LinearSoftmaxMixin, _ParamsMixin):
    """Shared validation, silo set-up and bookkeeping of the SGD baselines."""

    epochs: int
    batch_size: int
    lr: float
    lr_decay: float
    decay_every: int
    sampling: str
    seed: int
    track_history: bool

    def _validate_common(self) -> None:
        check_int(self.epochs, "epochs")
        check_int(self.batch_size, "batch_size")
        check_positive(self.lr, "lr")
        check_positive(self.lr_decay, "lr_decay")
        check_int(self.decay_every, "decay_every")
        check_choice(self.sampling, "sampling", SAMPLINGS)
        check_int(self.seed, "seed", minimum=0)

    def _prepare(self, sh: Shards) -> tuple[Any, list[Any]]:
        """A Rust silo set holding the shards (groups are irrelevant: ψ is never sent) and one
        sampling config per silo."""
        check_batch_fits(self.sampling, self.batch_size, sh.sizes)
        l = len(sh.classes_)
        silo_set = _core.SiloSet(
            [(X, y, np.zeros(len(y), dtype=np.int64)) for X, y in zip(sh.X, sh.y)], n_groups=2, n_classes=l
        )
        configs = [
            _core.SiloConfig(sampling=self.sampling, batch_size=self.batch_size,
                             sample_rate=min(1.0, self.batch_size / n_j), send_psi=False)
            for n_j in sh.sizes
        ]
        self.classes_, self.n_features_in_ = sh.classes_, sh.n_features
        if sh.has_s:
            self.groups_ = sh.groups_
        return silo_set, configs

    def _steps_per_epoch(self, n: float) -> int:
        return rounds_per_epoch(self.sampling, [n], self.batch_size)

    def _lr(self, epoch: int) -> float:
        return self.lr * self.lr_decay ** (epoch // self.decay_every)

    def _history_row(self, epoch: int, lr: float, batch_loss: float, pooled: tuple, sh: Shards) -> dict[str, Any]:
        X, y, s = pooled
        row = {"epoch": epoch + 1, "lr": lr, "batch_loss": batch_loss}
        row.update(evaluate(self.theta_, len(self.classes_), X, y, s if sh.has_s else None))
        return row


class CentralERM(_SGDBase):
    """Non-private, non-fair minibatch SGD on the pooled data (the "central ERM" row of Gupta et al. 2024).

    Every silo's records are pooled into one data set (this is a reference point, not a
    federated method) and θ is trained by

        θ ← θ − η_e · (1/m) Σ_{i∈B_t} ∇_θ[-log F_{y_i}(x_i; θ)],      η_e = lr · lr_decay^⌊e/decay_every⌋

    with batches B_t drawn by ``sampling`` from the seeded stream of round t. This is exactly
    ``SteFFLe(lam=0, epsilon=None)`` on one silo (same kernel, same batches).

    Parameters
    ----------
    epochs : int; one epoch is ``ceil(n / batch_size)`` steps (one step with ``"full_batch"``).
    batch_size : int, m.
    lr, lr_decay, decay_every : step size and its step decay (Gupta et al. 2024: 0.25, 0.8 every 10 epochs).
    sampling : {"without_replacement", "poisson", "full_batch"}.
    seed : int. Same seed, same bits.
    track_history : evaluate loss/error (and ``demographic_parity_difference``,
        ``equalized_odds_difference`` when s is given) after every epoch.

    Attributes
    ----------
    theta_, coef_, intercept_, classes_, n_features_in_, history_, privacy_report_ (non-private).
    """

    def __init__(self, *, epochs: int = 40, batch_size: int = 256, lr: float = 0.25, lr_decay: float = 0.8,
                 decay_every: int = 10, sampling: str = "without_replacement", seed: int = 0,
                 track_history: bool = True) -> None:
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.lr_decay = lr_decay
        self.decay_every = decay_every
        self.sampling = sampling
        self.seed = seed
        self.track_history = track_history

    def fit(self, X: Any, y: Any = None, *, sensitive_features: Any = None, silos: Any = None) -> "CentralERM":
        """Fit on a Federation or arrays; ``silos`` is accepted and ignored (the data are pooled)."""
        self._validate_common()
        sh = shards_from(X, y, sensitive_features, silos, need_s=False, estimator=self)
        Xp, yp, sp = sh.pooled()
        pooled = Shards([Xp], [yp], [sp], sh.classes_, sh.groups_, sh.has_s)
        silo_set, configs = self._prepare(pooled)
        l = len(sh.classes_)
        theta = np.zeros((sh.n_features + 1) * (l - 1))
        w, inv = np.zeros(2 * l), np.ones(2)
        steps = self._steps_per_epoch(len(yp))
        history = []
        check = LocalCheck(self, sh)
        for epoch in range(self.epochs):
            lr = self._lr(epoch)
            key = seeded_key(self.seed)  # batch order only: nothing here is noised
            out = silo_set.run_rounds(theta, w, inv, configs, [1.0], batch_keys=[key], noise_keys=[key], lam=0.0,
                                      lr_theta=lr, lr_w=0.0, w_radius=math.inf, start=epoch * steps, n_rounds=steps)
            theta = out["theta"]
            if not np.all(np.isfinite(theta)):
                raise FloatingPointError(f"SGD diverged at epoch {epoch}: lower lr (now {lr:g})")
            self.theta_ = theta
            check.offer(epoch)
            if self.track_history:
                history.append(self._history_row(epoch, lr, float(np.mean(out["loss"])), (Xp, yp, sp), sh))
        self.theta_ = np.asarray(theta)
        self.n_rounds_ = self.epochs * steps
        self.history_ = pd.DataFrame(history).set_index("epoch") if history else pd.DataFrame()
        self.privacy_report_ = non_private_report("central_erm", 1)
        check.choose()
        return self


class FedAvg(_SGDBase):
    """Federated averaging (McMahan et al. 2017; the "non-private non-fair FL" row of Gupta et al. 2024).

    In communication round t the server sends θ_t; silo j starts from it and takes
    ``local_steps`` minibatch SGD steps on its own data,

        θ_j ← θ_j − η_e · (1/m) Σ_{i∈B_{j,t,s}} ∇_θ[-log F_{y_i}(x_i; θ_j)],   s = 0..local_steps-1,

    and the server averages the returned models, θ_{t+1} = Σ_j ω_j θ_j, with ω_j = n_j / n
    (``silo_weights="size"``, McMahan et al.) or 1/N. Local step s of round t uses the batch
    stream ``(seed, j, t·local_steps + s)``, so with one silo and ``local_steps=1`` the iterates
    are bit-for-bit those of :class:`CentralERM` (tested).

    Parameters
    ----------
    epochs : int. An epoch is ``ceil(mean n_j / batch_size)`` local steps per silo, grouped into
        ``ceil(that / local_steps)`` communication rounds.
    local_steps : int, local SGD steps per round (1: federated SGD).
    batch_size, lr, lr_decay, decay_every, sampling, seed, track_history : as in :class:`CentralERM`
        (``lr`` is the clients' step size; the server step is plain averaging).
    silo_weights : {"size", "uniform"}.

    Attributes
    ----------
    theta_, coef_, intercept_, classes_, n_features_in_, n_rounds_, history_, privacy_report_.
    """

    def __init__(self, *, epochs: int = 40, local_steps: int = 1, batch_size: int = 256, lr: float = 0.25,
                 lr_decay: float = 0.8, decay_every: int = 10, sampling: str = "without_replacement",
                 silo_weights: str = "size", seed: int = 0, track_history: bool = True) -> None:
        self.epochs = epochs
        self.local_steps = local_steps
        self.batch_size = batch_size
        self.lr = lr
        self.lr_decay = lr_decay
        self.decay_every = decay_every
        self.sampling = sampling
        self.silo_weights = silo_weights
        self.seed = seed
        self.track_history = track_history

    def fit(self, X: Any, y: Any = None, *, sensitive_features: Any = None, silos: Any = None) -> "FedAvg":
        self._validate_common()
        check_int(self.local_steps, "local_steps")
        check_choice(self.silo_weights, "silo_weights", ("size", "uniform"))
        sh = shards_from(X, y, sensitive_features, silos, need_s=False, estimator=self)
        silo_set, configs = self._prepare(sh)
        l = len(sh.classes_)
        sizes = np.asarray(sh.sizes, dtype=np.float64)
        weights = sizes / sizes.sum() if self.silo_weights == "size" else np.full(sh.n_silos, 1.0 / sh.n_silos)
        theta = np.zeros((sh.n_features + 1) * (l - 1))
        w, inv = np.zeros(2 * l), np.ones(2)
        rounds = math.ceil(self._steps_per_epoch(float(np.mean(sh.sizes))) / self.local_steps)
        key = seeded_key(self.seed)  # batch order only: FedAvg adds no noise
        pooled = sh.pooled()
        history = []
        check = LocalCheck(self, sh)
        for epoch in range(self.epochs):
            lr = self._lr(epoch)
            losses = []
            for r in range(epoch * rounds, (epoch + 1) * rounds):
                new = np.zeros_like(theta)
                for j in range(sh.n_silos):
                    local = theta.copy()
                    for step in range(self.local_steps):
                        msg = silo_set.step(j, local, w, inv, configs[j], batch_key=key, noise_key=key,
                                            round=r * self.local_steps + step)
                        local = local - lr * msg["loss_grad"]
                        losses.append(msg["loss"])
                    new = new + weights[j] * local
                theta = new
            if not np.all(np.isfinite(theta)):
                raise FloatingPointError(f"FedAvg diverged at epoch {epoch}: lower lr (now {lr:g}) or local_steps")
            self.theta_ = theta
            check.offer(epoch)
            if self.track_history:
                history.append(self._history_row(epoch, lr, float(np.mean(losses)), pooled, sh))
        self.theta_ = np.asarray(theta)
        self.n_rounds_ = self.epochs * rounds
        self.history_ = pd.DataFrame(history).set_index("epoch") if history else pd.DataFrame()
        self.privacy_report_ = non_private_report("fedavg", sh.n_silos)
        check.choose()
        return self
