"""``DeepSteFFLe``: SteFFLe (Gupta, Poornash, Razaviyayn and Lowy, "A Stochastic Optimization
Framework for Private and Fair Learning From Decentralized Data", 2024, Alg. 1) for any
``torch.nn.Module``.

The estimator only configures: it validates the SteFFLe settings (the same
:class:`~pfair.settings.SteFFLeSettings` as :class:`pfair.SteFFLe`), builds one
:class:`~pfair.providers.torch.TorchProvider` per silo, and runs the protocol party by party
(:class:`~pfair.protocol.simulation.Simulation` with ``fast=False``): every silo charges its ledger,
draws its batch, asks its provider for the exact parts and noises them with its own secret key;
the server checks and averages the replies. θ is the flat float64 vector of the module's trainable
parameters; W is the FERMI dual variable (blocks × k × l). See ``docs/deep.md``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import os
import warnings
from dataclasses import replace
from typing import Any, Iterator

import numpy as np
import torch
from torch import nn

from sklearn.base import ClassifierMixin

from pfair._fit import (
    SteFFLeFit,
    feature_scale_refusal,
    missing_sensitive_message,
    refuse_fit_arguments,
    scaling_reason,
    standardisation,
    unscaled_columns,
)
from pfair._validation import as_vector
from pfair.exceptions import ConvergenceWarning, NotFittedError
from pfair.federation import Federation
from pfair.metrics import trivial_error
from pfair.providers.torch import (
    TorchProvider,
    check_per_record,
    module_theta,
    resolve_device,
    set_module_theta,
)
from pfair.settings import DEEP_DEFAULTS, SteFFLeSettings, resolve_deep_defaults

# DeepSteFFLe's defaults differ from ``pfair.SteFFLe``'s where :data:`pfair.settings.DEEP_DEFAULTS` says:
# the linear model's (SGD step 0.25, batch up to 4,096, 40 epochs) do not train a network in a few
# epochs (an MLP on Adult: test error 0.232 after 5 epochs, the constant predictor's 0.248).
# ``batch_size="auto"``: at most 256 records and at least 32 rounds per epoch of the smallest silo;
# ``lr_theta="auto"``: 1.0 at a batch of 256, in proportion to the batch otherwise. Chosen on
# validation splits of Adult (an MLP) and the 8×8 digits (a CNN) by
# ``docs/optimisation/deep_defaults.py`` (docs/deep.md, "Defaults").

#: Records of the training data read by the constant-predictor check at the end of a fit.
CHECK_RECORDS = 10_000
#: Below this many trainable parameters, ``n_threads=None`` gives torch one intra-op thread (below).
MANY_PARAMS = 100_000


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity; ``os.cpu_count()`` where there is none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def fit_threads(n_threads: int | None, n_params: int, device: torch.device) -> tuple[int, int]:
    """``(torch intra-op threads, Rust pool threads)`` of a fit.

    ``n_threads`` is the budget: an integer, or None for :func:`available_cores`. The Rust (rayon)
    pool gets the budget: in a deep fit it only runs the server update (parallel when the silos'
    θ-terms reach 2¹⁶), between two torch calls, never at the same time as them. Torch gets the
    budget too when the module has at least :data:`MANY_PARAMS` trainable parameters or runs on a
    GPU; a smaller module on the CPU gets one thread, since its per-record work per operation is
    too small to split: measured on 2 shared cores, the docs/deep.md digits example took 12–24 s
    with 2 torch threads (OpenMP's threads spin while they wait for a core another process holds)
    and 1.5–2.4 s with one. An explicit ``n_threads`` is used as given for both."""
    if n_threads is not None:
        return n_threads, n_threads
    budget = available_cores()
    if device.type != "cpu" or n_params >= MANY_PARAMS:
        return budget, budget
    return 1, budget


@contextlib.contextmanager
def threads(n_torch: int, n_rust: int) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n_torch)`` and ``RAYON_NUM_THREADS=n_rust``
    (read when the Rust pool starts, i.e. at the process's first parallel Rust call; a pool already
    running keeps its size), and restore both after."""
    before = torch.get_num_threads()
    env = os.environ.get("RAYON_NUM_THREADS")
    torch.set_num_threads(int(n_torch))
    os.environ["RAYON_NUM_THREADS"] = str(int(n_rust))
    try:
        yield
    finally:
        torch.set_num_threads(before)
        if env is None:
            os.environ.pop("RAYON_NUM_THREADS", None)
        else:
            os.environ["RAYON_NUM_THREADS"] = env


def reset_parameters(module: nn.Module, seed: int) -> nn.Module:
    """Re-initialise every submodule that has ``reset_parameters`` from ``torch`` RNG seeded by
    ``seed`` (the global RNG is left as it was). Returns the module."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        for sub in module.modules():
            fn = getattr(sub, "reset_parameters", None)
            if callable(fn):
                fn()
    return module


class DeepSteFFLe(ClassifierMixin, SteFFLeFit):
    """Private and fair federated training of a ``torch.nn.Module`` with SteFFLe.

    Parameters
    ----------
    module : torch.nn.Module
        Maps a batch ``(n, *input_shape)`` to ``(n, l)`` logits. It is copied at ``fit`` (the
        trained copy is ``module_``); it must not mix the records of a batch (no BatchNorm in
        training mode: use GroupNorm) and must be deterministic (no Dropout in training mode).
    input_shape : tuple or None
        Shape of one input, e.g. ``(1, 8, 8)``; rows of the 2-D federation arrays are reshaped to
        it. None: ``X.shape[1:]`` of an array of images passed to ``fit``, else ``(d,)``.
    device : "auto" (CUDA when available), "cpu", "cuda", ...
        Where the gradients are computed. The noise is always added on the CPU in float64 by the
        silo party, from its secret key.
    chunk_size : int or None
        Records per vmap call of the per-record gradients (memory ∝ chunk_size × #parameters);
        None: as many as fit in 1 GiB of per-record gradients on the CPU, a quarter of the free
        memory on a GPU (at most 1,024).
    init_seed : int or None
        Re-initialise the module's parameters (``reset_parameters`` of every layer) from this
        seed before training, for reproducible runs. None: start from the module's own values.
    predict_batch_size : int, records per forward pass in ``predict_proba``.
    n_threads : int or None
        Threads of the fit and of prediction: torch's intra-op threads (``torch.set_num_threads``,
        restored after) and the Rust pool's (``RAYON_NUM_THREADS``). None: the cores this process
        may use (``os.sched_getaffinity``), with one torch thread for a module of fewer than
        100,000 parameters on the CPU, whose operations are too small to split
        (:func:`fit_threads`).
    **SteFFLe settings
        Every parameter of :class:`pfair.SteFFLe` (``fairness``, ``lam``, ``epsilon``, ``delta``,
        ``epochs``, ``batch_size``, ``lr_theta``, ``lr_w``, ``w_radius``, ``clip``, ``clip_loss``,
        ``clip_w``, ``sampling``, ``protect``, ``calibration``, ``p_s``, ``noise_seed``, ...), with
        the same meaning and defaults, except ``lr_theta="auto"``, ``batch_size="auto"``, ``epochs=5``,
        ``lr_w=0.25``, when private, ``clip="auto"`` = 0.5, and ``lr_decay``/``decay_every`` ``"auto"`` = 0.8
        every 10 epochs (:data:`pfair.settings.DEEP_DEFAULTS`: SGD on a network needs more, smaller
        steps than the linear model; the batch is resolved to a number first, so the linear default
        private run's faster decay does not apply): the batch is
        ``min(256, max(16, n_min // 32))`` records for a smallest silo of n_min records, the step
        ``batch / 256`` (1.0 at a batch of 256; the linear scaling rule); ``mode`` must be ``"standard"``
        and ``theta_subspace`` None (it projects the rows of a linear model's θ). The θ step is
        SteFFLe's (``theta_step="scaled"``: ``η_θ / max(1, λ)``), and as for SteFFLe a non-private fit
        at a fixed ``lam`` above 1 with the ``"auto"`` batch runs ``min(lam, 10)`` times the
        ``epochs`` and decay period (:func:`pfair.settings.resolve_deep_defaults`; docs/deep.md,
        "The θ step").

    Attributes
    ----------
    theta_ : flat float64 θ (the trainable parameters, ``parameters_to_vector`` order)
    module_ : the trained module (a copy of ``module`` holding ``theta_``)
    selected_epoch_ : as in SteFFLe; 0 for the constant predictor (the module's last linear layer
        with weight 0 and the bias of the held-out class shares), which a fit at a fixed ``lam > 0``
        returns when its last model is shown no better than it (warned), if the module has one
    W_, classes_, groups_, n_features_in_, input_shape_, n_params_, device_
    history_, privacy_report_, ledgers_, epochs_done_, n_rounds_, group_proportions_ : as in SteFFLe.
    """

    def __init__(self, module: nn.Module, *, input_shape: Any = None, device: Any = "auto",
                 chunk_size: int | None = None, init_seed: int | None = None, predict_batch_size: int = 1024,
                 n_threads: int | None = None,
                 # pfair.SteFFLe's parameters, in its order, with DEEP_DEFAULTS' defaults (scikit-learn's
                 # get_params reads this signature; tests/test_torch.py checks it against SteFFLe's).
                 fairness: str = "demographic_parity", lam: float = 1.0, epsilon: float | None = 1.0,
                 delta: float | None = None, epochs: int = 5, batch_size: int | str = "auto",
                 lr_theta: float | str = "auto", lr_w: float = 0.25, w_radius: float | None = 2.0,
                 clip: float | str | None = "auto", clip_loss: float | str | None = "auto",
                 clip_w: float | str | None = "auto", sampling: str = "auto", protect: str = "attribute",
                 calibration: str = "auto", p_s: Any = None, p_s_epsilon_share: float = 0.1,
                 lr_decay: float | str = "auto", decay_every: int | str = "auto", w_step: str = "normalised",
                 theta_step: str = "scaled",
                 theta_subspace: int | None = None, output: str = "last",
                 silo_weights: str = "uniform", positive_class: int = 1, mode: str = "standard",
                 amplification: bool = True, dummy_noise: bool = False, seed: int = 0, noise_seed: int | None = None,
                 exact_diagnostics: bool = False, progress: bool = False, track_history: bool = True,
                 warm_start: bool = False, max_violation: float | None = None,
                 max_violation_epsilon_share: float = 0.5, lam_lr: float = 10.0, validation_share: float = 0.1,
                 checkpoints: int | str = "auto", validation_epsilon_share: float = 0.2,
                 **unknown: Any) -> None:
        if unknown:
            raise TypeError(f"DeepSteFFLe got unexpected argument(s) {sorted(unknown)}; valid: "
                            f"{sorted(self._get_param_names())}")
        # Every parameter is set as given (scikit-learn's rule): the arguments of this call.
        for name, value in locals().items():
            if name not in ("self", "unknown"):
                setattr(self, name, value)

    def __repr__(self) -> str:
        shown = []
        for p in inspect.signature(type(self).__init__).parameters.values():
            if p.name == "self" or p.kind == p.VAR_KEYWORD:
                continue
            v = getattr(self, p.name)
            if p.name == "module":
                shown.append(f"module={type(v).__name__}(...)")
                continue
            try:
                same = bool(p.default is v or p.default == v)
            except (ValueError, TypeError):
                same = False
            if not same:
                shown.append(f"{p.name}={v!r}")
        return f"{type(self).__name__}({', '.join(shown)})"

    # ------------------------------------------------------------------ settings
    def settings(self, sizes: Any = None) -> SteFFLeSettings:
        """The validated, frozen settings of a fit on silos of ``sizes`` records, with
        ``batch_size="auto"`` and ``lr_theta="auto"`` resolved by the deep rule
        (:func:`pfair.settings.resolve_deep_defaults`; ``sizes=None``: silos of unknown size, as in
        a deployment: batch 256, step 1.0)."""
        params = resolve_deep_defaults({**self._fixed_settings, **self.get_params(deep=False)}, sizes)
        st = SteFFLeSettings.from_estimator_params(params)
        self._check_settings(st)
        return st

    def _for_sizes(self, st: SteFFLeSettings, sizes: Any) -> SteFFLeSettings:
        """``st`` (validated by :meth:`settings` for silos of unknown size) with the deep rule's
        ``"auto"`` batch and step for silos of ``sizes`` records, and a noise-free run's λ stretch
        within its records (what :meth:`settings` gives with ``sizes``), without validating every
        setting again; ``st`` itself when nothing changes."""
        auto = resolve_deep_defaults({**self._fixed_settings, **self.get_params(deep=False)}, sizes)
        changed = {name: auto[name] for name in ("batch_size", "lr_theta", "epochs", "decay_every")
                   if not isinstance(auto[name], str) and auto[name] != getattr(st, name)}
        return dataclasses.replace(st, **changed) if changed else st

    def _check_settings(self, st: SteFFLeSettings) -> None:
        if st.mode != "standard":
            raise ValueError(f"mode={st.mode!r}: DeepSteFFLe supports mode='standard' only (every silo holds "
                             "its records' s); use pfair.SteFFLe for the hybrid topologies of a linear model")
        if st.theta_subspace is not None:
            raise ValueError(f"theta_subspace={st.theta_subspace} projects a linear model's θ-part on directions of its "
                             "features (θ has one row per feature); a network's parameters have no such rows. Leave "
                             "theta_subspace=None (it is pfair.SteFFLe's option)")

    def _check_deep_params(self) -> None:
        if not isinstance(self.module, nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(self.module).__name__}")
        if self.chunk_size is not None and (isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int)
                                            or self.chunk_size < 1):
            raise ValueError(f"chunk_size must be an integer >= 1 or None (automatic), got {self.chunk_size!r}")
        if self.init_seed is not None and (isinstance(self.init_seed, bool) or not isinstance(self.init_seed, int)
                                           or self.init_seed < 0):
            raise ValueError(f"init_seed must be an integer >= 0 or None, got {self.init_seed!r}")
        if isinstance(self.predict_batch_size, bool) or not isinstance(self.predict_batch_size, int) \
                or self.predict_batch_size < 1:
            raise ValueError(f"predict_batch_size must be an integer >= 1, got {self.predict_batch_size!r}")
        if self.n_threads is not None and (isinstance(self.n_threads, bool) or not isinstance(self.n_threads, int)
                                           or self.n_threads < 1):
            raise ValueError(f"n_threads must be an integer >= 1 or None (the cores this process may use), "
                             f"got {self.n_threads!r}")

    def _threads(self, n_params: int) -> Any:
        return threads(*fit_threads(self.n_threads, n_params, self.device_))

    # ------------------------------------------------------------------ fit
    def fit(self, X: Any, y: Any = None, *, sensitive_features: Any = None, silos: Any = None,
            eval_set: tuple[Any, Any, Any] | None = None, ledgers: Any = None, resume: bool = False,
            **unsupported: Any) -> "DeepSteFFLe":
        """Train on a :class:`~pfair.Federation`, or on arrays split by ``silos`` (one silo id per
        record; None: one silo). ``X`` may be 2-D (records × features) or an array of images
        ``(n, *input_shape)``. ``eval_set=(X, y, sensitive_features)`` adds metrics on data you
        hold to ``history_``. ``ledgers`` and ``resume`` as in :meth:`pfair.SteFFLe.fit`.

        Arrays far from standardised (a column with |mean| or std above 10) are standardised with
        the training data's mean and std when the fit may use them (``protect="attribute"`` or
        ``epsilon=None``), and refused in a private ``protect="record"`` fit or in a Federation,
        as :class:`pfair.SteFFLe` does. A network cannot be folded back to the original units, so
        the scaling stays part of the fitted model: ``feature_scaling_ = (mean, std)``, set before
        the first round (an interrupted fit keeps it), applied by ``predict``/``predict_proba``;
        ``module_`` takes standardised inputs. A warm start or ``resume`` keeps the scaling the
        module was trained with. ``sample_weight`` is refused with the reason
        (:func:`pfair._fit.refuse_fit_arguments`)."""
        refuse_fit_arguments(type(self).__name__, unsupported,
                             takes="sensitive_features, silos, eval_set, ledgers and resume")
        # Validated once here; the deep rule's "auto" batch and step, which need the silo sizes,
        # are filled in once the federation is known (_for_sizes).
        st = self.settings()
        self._check_deep_params()
        shape = None if self.input_shape is None else tuple(int(v) for v in self.input_shape)
        if not isinstance(X, Federation):
            arr = X.to_numpy() if hasattr(X, "to_numpy") else np.asarray(X)
            if arr.ndim > 2:
                if shape is not None and tuple(arr.shape[1:]) != shape:
                    raise ValueError(f"X has records of shape {arr.shape[1:]} but input_shape={shape}; they must "
                                     "match (or leave input_shape=None)")
                shape = tuple(arr.shape[1:])
                X = arr.reshape(arr.shape[0], -1)
        if sensitive_features is None and not isinstance(X, Federation):
            raise ValueError(missing_sensitive_message(type(self).__name__))
        warm = (st.warm_start or resume) and hasattr(self, "module_") and hasattr(self, "theta_")
        # A warm start or a resumed fit continues a module trained on inputs scaled as before.
        self._keep_scaling = (getattr(self, "feature_scaling_", None),) if warm else None
        fed = self._federation(X, y, sensitive_features, silos, st)
        st = self._for_sizes(self._settings_for_data(st, fed), fed.sizes)
        if self._scaling is not None:
            self.feature_scaling_ = self._scaling
        elif hasattr(self, "feature_scaling_"):
            del self.feature_scaling_
        self._check_privacy(st, fed, X)
        d, k, l = fed.n_features, fed.n_groups, fed.n_classes
        shape = shape or (d,)
        if int(np.prod(shape)) != d:
            raise ValueError(f"input_shape={shape} has {int(np.prod(shape))} entries but the records have {d} "
                             "features; they must match")
        self._adopt_encodings(fed)
        self.n_features_in_, self.input_shape_ = d, shape
        self.device_ = resolve_device(self.device)

        previous = self._resume_state(st, resume)
        if warm:
            module = self.module_
        else:
            module = copy.deepcopy(self.module)
            if self.init_seed is not None:
                reset_parameters(module, self.init_seed)
        module = module.to(self.device_)
        check_per_record(module)
        self.module_ = module
        theta0 = np.asarray(self.theta_, dtype=np.float64).copy() if warm else module_theta(module)
        blocks = st.notion.n_blocks(l)
        w0 = np.asarray(self.W_, dtype=np.float64).ravel().copy() if (warm and hasattr(self, "W_")) \
            else np.zeros(blocks * k * l)

        def factory(j: int, silo: Any, cfg: Any) -> TorchProvider:
            return TorchProvider.for_silo(module, silo, st, n_groups=k, n_classes=l, input_shape=shape,
                                          device=self.device_, chunk_size=self.chunk_size)

        self.n_params_ = int(theta0.size)
        with self._threads(self.n_params_):
            state, plans = self._run(st, fed, ledgers=ledgers, on_epoch=self._on_epoch(st, fed, eval_set),
                                     previous=previous, init=None if previous is not None else (theta0, w0),
                                     provider_factory=factory)
        self._adopt(state, plans, st, k, l)
        set_module_theta(self.module_, self.theta_)
        if len(self.checkpoints_) == 0:  # else the checkpoint guard (pfair.validation) has decided
            self._check_better_than_constant(fed)
        return self

    _checks_feature_scale = True
    _standardises_off_scale = False

    def _standardise_if_unscaled(self, Xa: np.ndarray, names: list[str] | None, st: SteFFLeSettings) -> np.ndarray:
        """``Xa`` standardised per column when a column is far from it (|mean| or std above 10), as
        :meth:`pfair._fit.SteFFLeFit._standardise_if_unscaled` decides for those (allowed with
        ``protect="attribute"`` or ``epsilon=None``, refused in a private ``protect="record"`` fit),
        with the difference that the scaling is kept as the model's input transform
        (``feature_scaling_``) instead of being folded into θ. A warm start or resume reuses the
        previous fit's scaling (or none), the units its module was trained in."""
        name = type(self).__name__
        if self._keep_scaling is not None:
            (kept,) = self._keep_scaling
            self._scaling = kept
            return Xa if kept is None else ((Xa - kept[0]) / kept[1]).astype(Xa.dtype, copy=False)
        # Only far columns: a network takes its inputs as prepared (pixels in [0, 1] are its
        # convention, and a per-pixel rescaling is not what a convolution expects), unlike the
        # linear model, whose off-scale columns train slowly (pfair._fit.off_scale_columns).
        far, _, mean, std = unscaled_columns([Xa], off_scale=False)
        if far.size == 0:
            return Xa
        if st.private and st.protect == "record":
            raise feature_scale_refusal(far, mean, std, names, st, name, federation=False)
        warnings.warn(
            f"{name}.fit standardised the inputs (mean 0, std 1 per feature, with the training data's mean and std; "
            f"0/1 indicator columns as they are) because {scaling_reason(far, far[:0], mean, std, names)}; predict and "
            f"predict_proba apply the same scaling (feature_scaling_), and module_ takes standardised inputs. To "
            f"choose the scaling yourself, standardise X before the fit. (With protect='attribute' or epsilon=None "
            f"the features are not what the fit protects, so their statistics may be used.)", UserWarning,
            stacklevel=4)
        self._scaling = standardisation(mean, std)
        return ((Xa - self._scaling[0]) / self._scaling[1]).astype(Xa.dtype, copy=False)

    def _fold_scaling(self, theta: np.ndarray, inverse: bool = False) -> np.ndarray:
        """θ as it is: the input scaling is ``feature_scaling_``, not folded into the network."""
        return np.asarray(theta, dtype=np.float64)

    def _check_better_than_constant(self, fed: Federation) -> None:
        """Warn (:class:`~pfair.exceptions.ConvergenceWarning`) when the trained module is no better on
        the training records than the best constant predictor: it did not train. Read in process,
        on at most :data:`CHECK_RECORDS` records (a seeded sample), by the estimator that holds the
        silos' data anyway; nothing is released."""
        n = sum(fed.sizes)
        if n == 0:
            return
        rows = np.arange(n)
        if n > CHECK_RECORDS:
            rows = np.sort(np.random.default_rng(0).choice(n, CHECK_RECORDS, replace=False))
        X, y, _ = fed.pooled(rows)  # the sampled records only, not a copy of every silo (scaled as trained)
        error = float(np.mean(np.argmax(self._module_proba(self._inputs(X)), axis=1) != y))
        constant = trivial_error(y)
        if error >= constant:
            warnings.warn(
                f"the trained module's training error {error:.3f} is no better than the constant predictor's "
                f"{constant:.3f}: it did not train. The defaults ({DEEP_DEFAULTS}: a batch of at most 256 records and at "
                "least 32 rounds per epoch, a step of batch/256) were chosen for an MLP on tabular data and a small "
                "CNN on images: a smaller lr_theta when the model collapsed to one class, more epochs or a larger "
                "lr_theta when it barely moved; also lower lam, or raise epsilon / clip when the noise swamps the "
                "updates",
                ConvergenceWarning, stacklevel=3)

    def _set_theta(self, theta: np.ndarray) -> None:
        self.theta_ = np.asarray(theta)
        set_module_theta(self.module_, self.theta_)

    def _history_proba(self, X: Any) -> np.ndarray:
        # The engine's sets are scaled as the module was trained (the silos' records; eval_set
        # standardised by _on_epoch).
        return self._module_proba(self._inputs(X))

    # ------------------------------------------------------------------ prediction
    def _check_fitted(self) -> None:
        if not hasattr(self, "module_") or not hasattr(self, "classes_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first")

    def _inputs(self, X: Any) -> np.ndarray:
        arr = X.to_numpy() if hasattr(X, "to_numpy") else np.asarray(X)
        try:
            arr = np.asarray(arr, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError("X must be numeric (records × features, or images (n, *input_shape))") from None
        shape = self.input_shape_
        if arr.ndim == 2 and arr.shape[1] == self.n_features_in_:
            return arr.reshape((arr.shape[0], *shape))
        if tuple(arr.shape[1:]) == tuple(shape):
            return arr
        raise ValueError(f"X has shape {arr.shape}; the model takes (n, {self.n_features_in_}) features or "
                         f"(n, *{tuple(shape)}) inputs")

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities ``softmax(module_(x))``, shape ``(n, l)``, float64; ``x`` is ``X``
        scaled by ``feature_scaling_`` when the fit standardised its inputs."""
        self._check_fitted()
        arr = self._inputs(X)
        scaling = getattr(self, "feature_scaling_", None)
        if scaling is not None:
            mean, std = scaling
            arr = ((arr.reshape(arr.shape[0], -1) - mean) / std).reshape(arr.shape)
        return self._module_proba(arr)

    def _module_proba(self, arr: np.ndarray) -> np.ndarray:
        """``softmax(module_(arr))`` of inputs ``arr`` already shaped (and scaled) for the module."""
        if not np.isfinite(arr).all():
            raise ValueError("X contains NaN or inf; impute or drop those rows")
        dtype = next(p.dtype for p in self.module_.parameters())
        out = []
        with torch.no_grad(), self._threads(getattr(self, "n_params_", 0)):
            for start in range(0, arr.shape[0], self.predict_batch_size):
                xb = torch.from_numpy(arr[start:start + self.predict_batch_size]).to(self.device_, dtype)
                out.append(torch.softmax(self.module_(xb).to(torch.float64), dim=1).cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, len(self.classes_)))

    def predict(self, X: Any) -> np.ndarray:
        """Most probable class, in the original label categories."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

    def score(self, X: Any, y: Any) -> float:
        """Accuracy."""
        pred = self.predict(X)
        return float(np.mean(pred == as_vector(y, "y", pred.shape[0])))

    def _evaluate(self, split: str, X: Any, y: Any, s: Any) -> dict[str, float]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return super()._evaluate(split, X, y, s)
