"""Frozen settings of a SteFFLe fit: validated once, read by every layer below the estimator.

:class:`SteFFLe` holds hyper-parameters the scikit-learn way; its ``get_params()`` go to
:meth:`SteFFLeSettings.from_estimator_params`, which validates them once (messages name the argument and the fix) and freezes them. The simulation, the
silo and server parties, the noise planner and the Flower apps read this object, never the
estimator, so a setting such as ``lam`` or ``epsilon`` can be followed from ``SteFFLe(...)`` to the
Rust kernel.
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Mapping

import numpy as np

from pfair._validation import check_choice, check_distribution, check_int, check_positive, resolve_fairness
from pfair.exceptions import PrivacyWarning

from pfair.notions import FAIRNESS_NOTIONS, FairnessNotion  # noqa: E402  (one vocabulary)
SAMPLINGS = ("without_replacement", "poisson", "shuffle", "full_batch")
W_STEPS = ("normalised", "paper")
#: θ-step rules (``theta_step=``): ``"scaled"`` divides η_θ by ``max(1, λ/THETA_STEP_LAMBDA)``,
#: ``"constant"`` keeps it whatever λ (:meth:`SteFFLeSettings.lr_at`).
THETA_STEPS = ("scaled", "constant")
#: λ_c of ``theta_step="scaled"``: the fairness weight at which the ψ-term's curvature in θ is taken
#: to match the loss's, so that η_θ(λ) = η_θ / max(1, λ/λ_c) keeps θ's step within 1/smoothness of
#: ``L + λ ψ̄`` and θ slower than W's tracking of its best response at every λ (docs/optimisation.md,
#: "Two time scales").
THETA_STEP_LAMBDA = 1.0
#: Clip norms that ``"auto"`` means in a private fit (a non-private fit clips nothing by default).
PRIVATE_CLIPS = {"clip": 0.25, "clip_loss": 1.0, "clip_w": 2.0}
CLIP_NAMES = tuple(PRIVATE_CLIPS)
#: ``clip="adaptive"``: each round clips the b_i of a silo's batch to this quantile of the batch's
#: s-free scales S_i, the mean of ‖b_i‖ over the groups under the released proportions
#: (``rust/src/psi/clip_scale.rs``), and scales h_θ's noise with it. Attribute mode only, where the
#: scales read nothing protected (docs/privacy.md, "An adaptive clip norm"). Chosen at ε = 1 by
#: ``docs/optimisation/clip_quantile.py`` among 0.5, 0.75 and 0.9 (docs/optimisation.md, "An
#: adaptive clip norm").
ADAPTIVE_CLIP_QUANTILE = 0.9
#: ``batch_size="auto"`` caps: a silo's batch is the cap, or the whole silo if it is smaller. The
#: caps were chosen on validation splits by :mod:`pfair.experiments.defaults` (docs/optimisation.md),
#: separately for rounds that carry noise and rounds that do not, because the data say so: with
#: noise (private, attribute mode) the noise on a batch mean falls as 1/m while ε depends on the
#: epochs, not on m, so a larger batch wins until too few rounds are left; without noise a larger
#: batch only means fewer steps. The private cap is the one whose run, stretched to its batch
#: (:data:`AUTO_RUN_BATCH`), scored best on the same splits (docs/optimisation/run_length.py).
AUTO_BATCH_PRIVATE = 8192
#: The batch a private fit's ``lr_theta``, ``epochs`` and ``decay_every`` are stated for when
#: ``batch_size="auto"`` stretches the run (:meth:`SteFFLeSettings.for_sizes`): at an automatic batch
#: m of noisy attribute-mode rounds, each is multiplied by ``k = max(1, m / AUTO_RUN_BATCH)``, so
#: the run keeps the rounds of ``epochs`` passes at this batch while each round averages k times
#: the records with k times the step (docs/optimisation.md, "A private fit's run length").
AUTO_RUN_BATCH = 1024
#: ``batch_size="auto"`` for a run whose rounds carry no noise (a non-private fit) at a fixed λ above λ_c
#: under the scaled θ step: its epochs and decay period are multiplied by
#: ``k_λ = min(λ / λ_c, LAMBDA_STRETCH_CAP)`` (:meth:`SteFFLeSettings.lambda_stretch_for`). The scaled step
#: ``η_θ / (λ/λ_c)`` slows the loss's progress λ/λ_c-fold, and gradient descent on ``L + λ ψ̄`` needs
#: iterations in proportion to its condition number, which grows as λ; the stretch gives the run the
#: rounds its step needs, up to this factor (docs/optimisation.md, "A noise-free run at a large λ"),
#: or up to the factor that makes the run :data:`LAMBDA_STRETCH_ROUNDS` rounds where that is larger.
LAMBDA_STRETCH_CAP = 10.0
#: The rounds a noise-free run at a large λ may be stretched to beyond :data:`LAMBDA_STRETCH_CAP`:
#: ``k_λ = min(λ / λ_c, max(LAMBDA_STRETCH_CAP, LAMBDA_STRETCH_ROUNDS / (E·R)))`` for a run of E
#: epochs of R rounds. The cap bounds the compute of a large table's run (Adult's silos: 40 rounds
#: an epoch, 8,000 rounds at 10 × 20 epochs); a small table's rounds are few and cheap (German's
#: silos: one round an epoch, 20 rounds a run), and with the cap its run at λ = 40 ended before its
#: model left the constant predictor. Used only where the silos' sizes are known (a deployment whose
#: parties do not know them keeps the cap).
LAMBDA_STRETCH_ROUNDS = 4000
#: A network's :data:`LAMBDA_STRETCH_ROUNDS`, in records a silo (:func:`resolve_deep_defaults`):
#: ``k_λ = min(λ / λ_c, max(LAMBDA_STRETCH_CAP, DEEP_STRETCH_RECORDS / (E·n̄)))`` for a run of E
#: epochs over silos of n̄ records on average. A network's cost is its per-record gradients, and its
#: ``"auto"`` batch gives every table at least 32 rounds an epoch, so its budget counts records:
#: 500,000 is about what the cap gives Adult's silos (11,306 records, 5 epochs, × 10), so no table's
#: run costs more than a large table's at the cap (docs/deep.md, "The θ step").
DEEP_STRETCH_RECORDS = 500_000
#: ``batch_size="auto"`` for a run whose rounds carry no noise at a fixed λ: its ``epochs`` are stated
#: for silos that make at least this many rounds an epoch, and a run on smaller silos (R rounds an
#: epoch) multiplies its epochs and decay period by ``ROUNDS_PER_EPOCH_FLOOR / R``
#: (:meth:`SteFFLeSettings.lambda_stretch_for`; the larger of this and the λ stretch). Gradient descent
#: needs steps in proportion to the problem's conditioning, not to the table's size: 20 epochs are
#: 800 rounds on Adult's silos but 20 full-batch rounds on German's (225 training records a silo),
#: whose λ = 0 model then ended with a training loss of 0.494 against logistic regression's 0.434 and a
#: test error 0.03 above logistic regression's (docs/optimisation.md, "A run's rounds on small
#: tables"). The silos' sizes are public, so the run's length stays a public setting.
ROUNDS_PER_EPOCH_FLOOR = 16
#: A private fit's noise on ``h_W`` in attribute mode (:attr:`SteFFLeSettings.w_noise_rows`): False
#: (the default), the same noise on every row, sized by the two rarest groups of a block (Gupta et al.
#: 2024's release); True, each row ``(b, r)`` takes noise in proportion to its own ``p(r | b)^{-1/2}``
#: (the release of the unscaled per-group sums, sensitivity ``√2 / m`` whatever the groups, scaled
#: after by the released proportions: docs/privacy.md, "Noise on h_W row by row"). The two are equal
#: for two groups of one half; with unequal groups the rows put less noise on the common groups' rows
#: and up to √2 times more on the rarest one's. Measured at ε = 1 and not adopted: the rarest groups'
#: rates, which set a largest-gap violation, get noisier (docs/optimisation.md, "W's noise row by
#: row"). A switch for studies, read when a fit plans its noise.
W_NOISE_ROWS = False
#: ``lr_decay`` and ``decay_every`` of ``"auto"``: the step's decay of a fit other than the default
#: private run (η_θ times 0.8 every 10 epochs).
AUTO_DECAY = (0.8, 10)
#: ``"auto"`` for the default private run (attribute mode, ``batch_size="auto"``, λ > 0 or a fairness target):
#: η_θ times 0.4 every ``epochs / PRIVATE_DECAY_PERIODS`` epochs (before the stretch multiplies the
#: period by k). Its last quarter takes about a sixteenth of the first step, and carries that much
#: less of each round's noise, so the model a fit returns jitters less on small held-out sets
#: (docs/optimisation.md, "The end of a private run").
PRIVATE_DECAY = 0.4
PRIVATE_DECAY_PERIODS = 4
#: ``batch_size="auto"`` for rounds without noise: ``epsilon=None``, or a private fit that sends
#: nothing depending on s (``lam=0`` in attribute mode, whose rounds are the non-private fit's).
AUTO_BATCH_NONPRIVATE = 256
#: ``batch_size="auto"`` with ``protect="record"`` (private), where a hidden batch amplifies privacy
#: and a small one amplifies more (best of 256/1024/4096 on the Adult and Credit Card validation splits).
AUTO_BATCH_RECORD = 256
#: DeepSteFFLe's defaults where they differ from SteFFLe's (docs/deep.md, "Defaults"; chosen on
#: validation splits by docs/optimisation/deep_defaults.py). ``"auto"`` batch and step follow
#: :func:`deep_batch_size` and :func:`deep_lr_theta`.
DEEP_DEFAULTS = {"lr_theta": "auto", "batch_size": "auto", "epochs": 5, "lr_w": 0.25}
#: (The θ step is SteFFLe's, ``theta_step="scaled"``, with the noise-free run's λ stretch
#: (:func:`resolve_deep_defaults`): measured on an MLP against the constant step by
#: docs/optimisation/deep_theta_step.py, docs/deep.md, "The θ step".)
#: Most epochs a run may have. Far beyond any useful fit (the tuned defaults use 5 to 40); a run's
#: epoch numbers name its checkpoint releases (:class:`pfair.protocol.keys.ReleaseId`), and a
#: deployed silo plans only runs whose length its settings imply, so a server cannot ask a silo to
#: plan a run of 2⁴⁰ epochs it never means to train.
MAX_EPOCHS = 100_000
#: What ``clip="auto"`` means in a private fit of a deep model (no clipping without privacy, as for
#: SteFFLe): the clip norm the deep defaults were chosen with (with ``lr_w`` 0.25 above), not the
#: linear model's :data:`PRIVATE_CLIPS` (its protocol did not train networks).
DEEP_PRIVATE_CLIP = 0.5
#: ``batch_size="auto"`` of a deep model: at most this many records per silo and round ...
DEEP_AUTO_BATCH = 256
#: ... and at least this many rounds per epoch of the smallest silo (a small data set gets
#: smaller batches rather than a handful of steps), but no batch below :data:`DEEP_MIN_BATCH`.
DEEP_ROUNDS_PER_EPOCH = 32
DEEP_MIN_BATCH = 16
#: ``lr_theta="auto"`` of a deep model: this step at a batch of :data:`DEEP_AUTO_BATCH` records,
#: in proportion to the batch otherwise (the linear scaling rule).
DEEP_LR_AT_AUTO_BATCH = 1.0
#: The topologies (``mode=``: who holds s); the protection is ``protect=``, never a "mode".
MODES = ("standard", "divisions", "central_sensitive", "hybrid")
P_S_SOURCES = ("dp", "pooled")


class RenamedValue(str):
    """A setting's value under its new name that still compares equal to its old name, with a
    ``DeprecationWarning`` (for code written against the old name). It is a ``str`` everywhere
    else: printed, written to JSON or CSV, hashed and pickled as the new name.

    Only ``==`` and ``!=`` know the old name: a lookup by hash (``value in {"public"}``, a dict
    keyed by ``"public"``, ``Series.map({"public": ...})``) and a copy that went through pickle
    (joblib workers, a saved estimator) see the new name alone. Compare with the new name."""

    old: str

    def __new__(cls, value: str, *, old: str) -> "RenamedValue":
        obj = super().__new__(cls, value)
        obj.old = old
        return obj

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str) and not str.__eq__(self, other) and str.__eq__(other, self.old):
            warnings.warn(f"the value {self.old!r} is now called {str(self)!r}; compare with {str(self)!r}",
                          DeprecationWarning, stacklevel=2)
            return True
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__

    def __reduce__(self) -> tuple:
        return (str, (str(self),))


#: The p_s source of proportions the user passes (``p_s=[...]``: public knowledge, e.g. a census).
#: It was called ``"public"``, which now means only "known to everyone, the server included"
#: (docs/architecture.md, "Glossary"); comparing with ``"public"`` still works, with a DeprecationWarning.
P_S_GIVEN = RenamedValue("given", old="public")
#: ``checkpoints="auto"`` where a checkpoint's releases cost budget (a fairness target, or
#: ``protect="record"``): this many checkpoints, evenly spaced, the last after the last epoch.
AUTO_CHECKPOINTS = 8
#: ``checkpoints="auto"`` of a record-mode fit without a fairness target: its noisy validation
#: tables only guard the returned model, and fewer releases leave each one less noise (the middle
#: and the last epoch).
AUTO_CHECKPOINTS_GUARD = 2
#: Largest ``validation_share`` accepted: the training share keeps at least half of every silo.
MAX_VALIDATION_SHARE = 0.5
#: Largest ``lam · lr_theta`` accepted without a warning under ``theta_step="constant"`` (see
#: :meth:`SteFFLeSettings.warn_about_step_sizes`).
LAM_STEP_LIMIT = 100.0
#: Largest ``lam / λ_c`` accepted without a warning under ``theta_step="scaled"``: the loss's step is
#: ``lr_theta / (lam/λ_c)``, and beyond this a fit's run (at most :data:`LAMBDA_STRETCH_CAP` times
#: longer on a large table) leaves the loss nearly untrained (Adult, non-private: test error 0.189 at
#: λ = 100, 0.218 at 400, 0.240 at 1,000, the constant predictor's 0.248 at 10⁹:
#: docs/optimisation/huge_lambda.py).
LAM_SCALED_LIMIT = 200.0


def auto_sampling(protect: str, mode: str = "standard") -> str:
    """What ``sampling="auto"`` means: ``"shuffle"`` when only the sensitive attribute is protected
    (the batch is public anyway, and shuffled epochs are accounted exactly as √epochs/z-GDP, the
    cheapest account), ``"without_replacement"`` when whole records are (a hidden fixed-size batch
    amplifies privacy) and in the hybrid topologies (which sample fixed-size batches)."""
    return "shuffle" if protect == "attribute" and mode == "standard" else "without_replacement"


def deep_batch_size(sizes: Any = None) -> int:
    """``batch_size="auto"`` of a deep model for silos of ``sizes`` records:
    ``min(DEEP_AUTO_BATCH, max(DEEP_MIN_BATCH, n_min // DEEP_ROUNDS_PER_EPOCH), n_min)`` with n_min
    the smallest silo — 256 on Adult, 16 for the 8×8 digits in 3 silos. Silo sizes are public
    (they set δ and the rounds per epoch). ``sizes=None`` (a deployment, where no party knows
    every silo's size when it calibrates): :data:`DEEP_AUTO_BATCH`."""
    if sizes is None or len(sizes) == 0:
        return DEEP_AUTO_BATCH
    smallest = int(min(int(n) for n in sizes))
    return max(1, min(DEEP_AUTO_BATCH, max(DEEP_MIN_BATCH, smallest // DEEP_ROUNDS_PER_EPOCH), smallest))


def deep_lr_theta(batch_size: int) -> float:
    """``lr_theta="auto"`` of a deep model: ``DEEP_LR_AT_AUTO_BATCH · batch / DEEP_AUTO_BATCH``, the
    linear scaling rule of SGD (Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in
    1 Hour", 2017): the step per record stays the same, so a small batch takes small steps (the
    digits CNN collapses at steps of 0.5 and more at batches of 32–64, and trains at 0.0625 at 16)."""
    return DEEP_LR_AT_AUTO_BATCH * int(batch_size) / DEEP_AUTO_BATCH


def rounds_per_epoch(sampling: str, sizes: Any, batch_size: int) -> int:
    """R = ⌈mean silo size / m⌉ rounds an epoch (at least 1); one with the full batch."""
    if sampling == "full_batch":
        return 1
    return max(1, math.ceil(float(np.mean(np.asarray(sizes, dtype=np.float64))) / batch_size))


def noise_free_stretch(lam: Any, theta_step: str, room: float | None = None) -> float:
    """``k_λ``, the factor a run whose rounds carry no noise at a fixed λ multiplies its epochs and
    decay period by when its batch is ``"auto"`` (:meth:`SteFFLeSettings.lambda_stretch_for` for the
    linear model, :func:`resolve_deep_defaults` for a network; docs/optimisation.md, "A noise-free
    run at a large λ"): under ``theta_step="scaled"`` above λ_c = :data:`THETA_STEP_LAMBDA`,

        k_λ = min(λ / λ_c, max(LAMBDA_STRETCH_CAP, room)),

    where ``room`` is how many times the run before the stretch fits in its model's budget
    (:data:`LAMBDA_STRETCH_ROUNDS` / E·R for the linear model, :data:`DEEP_STRETCH_RECORDS` / E·n̄
    for a network; None, where the silos' sizes are not known: the cap alone); else 1."""
    if theta_step != "scaled" or isinstance(lam, bool) or not isinstance(lam, numbers.Real):
        return 1.0
    cap = LAMBDA_STRETCH_CAP if room is None else max(LAMBDA_STRETCH_CAP, float(room))
    return max(1.0, min(float(lam) / THETA_STEP_LAMBDA, cap))


def deep_stretch_room(epochs: int, sizes: Any) -> float:
    """How many times a network's run of ``epochs`` epochs over silos of ``sizes`` records fits in
    :data:`DEEP_STRETCH_RECORDS` records a silo (E·n̄ before the stretch), at most ``MAX_EPOCHS /
    epochs``: the budget bounds compute and never makes a run longer than a run may be (silos of a
    few records would otherwise ask for more than :data:`MAX_EPOCHS`)."""
    mean = float(np.mean(np.asarray(sizes, dtype=np.float64)))
    return min(DEEP_STRETCH_RECORDS / (int(epochs) * mean), MAX_EPOCHS / int(epochs))


def resolve_deep_defaults(params: Mapping[str, Any], sizes: Any = None) -> dict:
    """``params`` (estimator hyper-parameters or run-config settings) with a deep model's ``"auto"``
    ``batch_size`` and ``lr_theta`` resolved for silos of ``sizes`` (None: a deployment), and a
    private fit's ``clip="auto"`` as :data:`DEEP_PRIVATE_CLIP`.

    A non-private fit (``epsilon=None``: its rounds carry no noise) at a fixed λ above λ_c under the
    scaled θ step whose batch is ``"auto"`` also has its ``epochs`` and ``decay_every`` (``"auto"``:
    :data:`AUTO_DECAY`'s period) multiplied by :func:`noise_free_stretch` (rounded up; with
    ``sizes``, up to the whole λ/λ_c within :data:`DEEP_STRETCH_RECORDS` records a silo, as the
    linear model's within :data:`LAMBDA_STRETCH_ROUNDS` rounds); once the batch is a number (resolved
    settings, or a batch the user states) nothing is stretched. ``params`` without ``epochs`` (a
    partial mapping) are not stretched."""
    out = dict(params)
    auto_batch = isinstance(out.get("batch_size"), str) and out["batch_size"] == "auto"
    if (auto_batch and "epochs" in out and out.get("epsilon") is None and out.get("max_violation") is None
            and "theta_step" in out):
        # A network's budget is in records (each costs a per-record gradient; its "auto" batch gives
        # every table at least DEEP_ROUNDS_PER_EPOCH rounds an epoch, so rounds would not tell a
        # small table from a large one): E·n̄ records a silo before the stretch.
        room = None
        if (sizes is not None and len(sizes) and not isinstance(out["epochs"], bool)
                and isinstance(out["epochs"], numbers.Integral) and out["epochs"] >= 1):
            room = deep_stretch_room(int(out["epochs"]), sizes)
        k = noise_free_stretch(out.get("lam"), out["theta_step"], room)
        if k > 1.0:
            every = out.get("decay_every", "auto")
            every = AUTO_DECAY[1] if isinstance(every, str) and every == "auto" else every
            # Only valid values are stretched: an invalid one reaches validation as the user gave it.
            if not isinstance(out["epochs"], bool) and isinstance(out["epochs"], numbers.Integral) and out["epochs"] >= 1:
                out["epochs"] = math.ceil(int(out["epochs"]) * k)
                if out["epochs"] > MAX_EPOCHS:
                    raise ValueError(f"epochs={params['epochs']} with batch_size='auto' is a run of {out['epochs']:,} "
                                     f"epochs (the epochs are stated for λ ≤ {THETA_STEP_LAMBDA:g}, and "
                                     f"lam={out['lam']:g} takes {k:.2f} times the epochs of its smaller θ step), above "
                                     f"the most a run may have ({MAX_EPOCHS:,}). Use fewer epochs, or set batch_size "
                                     "yourself")
            if not isinstance(every, bool) and isinstance(every, numbers.Integral) and every >= 1:
                out["decay_every"] = math.ceil(int(every) * k)
    if isinstance(out.get("clip"), str) and out["clip"] == "auto" and out.get("epsilon") is not None:
        out["clip"] = DEEP_PRIVATE_CLIP
    if isinstance(out.get("clip"), str) and out["clip"] == "adaptive":
        raise ValueError("clip='adaptive' is for the linear model (SteFFLe), whose kernel computes the scales it "
                         f"takes its quantile of; a deep model takes a clip norm (clip={DEEP_PRIVATE_CLIP:g}, the "
                         "deep default)")
    if isinstance(out.get("batch_size"), str) and out["batch_size"] == "auto":
        out["batch_size"] = deep_batch_size(sizes)
    if isinstance(out.get("lr_theta"), str) and out["lr_theta"] == "auto":
        batch = out.get("batch_size")
        if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)):
            raise ValueError(f"lr_theta='auto' scales the step with an integer batch_size, got batch_size={batch!r}")
        out["lr_theta"] = deep_lr_theta(int(batch))
    return out


def default_delta(n_records: int) -> float:
    """The default δ of a silo with ``n_records`` records: ``1/n²`` (smaller than the chance of
    picking any one record). Needs at least 2 records."""
    n = int(n_records)
    if n < 2:
        raise ValueError(
            f"a silo with {n} record(s) has no default delta (1/n² would be {1 / max(n, 1) ** 2:g}, not a "
            "meaningful privacy level); merge it with another silo or pass delta= explicitly (e.g. 1e-6)"
        )
    return 1.0 / float(n) ** 2


#: Above this ε a guarantee is warned about as not meaningful: e^10 ≈ 22,026 bounds how much more
#: likely any outcome may become when one record (or its s) changes, which rules out almost no
#: inference (docs/privacy.md, "Settings that guarantee nothing").
MEANINGFUL_EPSILON = 10.0
#: δ above this share of 1/n is warned about: the standard requirement is δ ≪ 1/n.
DELTA_WARN_SHARE = 0.1


def check_delta(delta: float, n_records: int, *, party: Any = "silo", warn: bool = True) -> bool:
    """Refuse a δ that makes the guarantee vacuous, warn about one that nearly does.

    Publishing one of a party's ``n`` records at random, in the clear, is (0, 1/n)-DP: a record
    changes the output only when it is the one drawn, with probability 1/n (Dwork and Roth, "The
    Algorithmic Foundations of Differential Privacy", 2014, §2.3). So δ ≥ 1/n allows exposing a
    record outright and is refused; δ > :data:`DELTA_WARN_SHARE`/n is a
    :class:`~pfair.exceptions.PrivacyWarning` (the default 1/n² is that large only below 10 records).
    Returns whether δ is that large (``warn=False``: the caller warns once for many parties)."""
    n, delta = int(n_records), float(delta)
    if n >= 1 and delta >= 1.0 / n:
        raise ValueError(f"{party}: delta={delta:g} is at least 1/n = 1/{n}, the n = {n} records it protects: an "
                         "(epsilon, delta) guarantee with delta >= 1/n allows publishing a random record in the clear, "
                         "so it protects nothing. Pass a delta well below 1/n (the default is 1/n²) or merge small "
                         "silos")
    near = n >= 1 and delta > DELTA_WARN_SHARE / n
    if near and warn:
        warnings.warn(f"{party}: delta={delta:g} is more than {DELTA_WARN_SHARE:g}/n for its n = {n} records; the "
                      "standard requirement is delta much smaller than 1/n (a delta near 1/n allows exposing a record "
                      "outright with that probability). Pass a smaller delta or merge small silos",
                      PrivacyWarning, stacklevel=3)
    return near


def parse_public_proportions(value: Any) -> np.ndarray | dict:
    """Validate user-supplied public group proportions (the shape is checked against the data in
    :func:`pfair.privacy.proportions.public_proportions`). Returns a float array or a dict."""
    if isinstance(value, Mapping):
        if not value:
            raise ValueError("p_s is an empty mapping; give one proportion per sensitive group")
        return dict(value)
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"p_s must be 'dp', 'pooled', an array of public group proportions or a mapping group -> "
            f"proportion; got {type(value).__name__}"
        ) from None
    if arr.ndim not in (1, 2) or arr.size < 2:
        raise ValueError(f"p_s as proportions must be 1-D (k groups) or 2-D (classes × k), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError("p_s proportions must be finite and > 0 (every group needs a positive share)")
    for i, row in enumerate(np.atleast_2d(arr)):
        check_distribution(row, "p_s" if arr.ndim == 1 else f"p_s[{i}]")
    return arr


def check_max_violation(p: dict) -> None:
    """Validate the fairness-target settings (``max_violation`` and its companions) in place."""
    p.setdefault("max_violation", None)
    p.setdefault("max_violation_epsilon_share", 0.5)
    p.setdefault("lam_lr", 10.0)
    target = p["max_violation"]
    check_positive(p["lam_lr"], "lam_lr")
    share = p["max_violation_epsilon_share"]
    check_positive(share, "max_violation_epsilon_share")
    if not 0 < share < 1:
        raise ValueError(f"max_violation_epsilon_share must be in (0, 1), got {share}")
    if target is None:
        return
    check_positive(target, "max_violation")
    if not 0 < target < 1:
        raise ValueError(f"max_violation must be in (0, 1) (a violation is a difference of rates), got {target}")
    if p["lam"] != 1.0:
        raise ValueError(
            f"lam={p['lam']} and max_violation={target} are alternatives: with max_violation pfair chooses λ "
            "itself (starting at 0 and adapting it every epoch); drop lam=, or drop max_violation= to fix λ")
    private = p["epsilon"] is not None
    if private and p["calibration"] == "paper":
        raise ValueError("calibration='paper' ignores the cost of the violation releases max_violation needs; "
                         "use calibration='auto'")
    p_s_dp = p["p_s"] is None or (isinstance(p["p_s"], str) and p["p_s"] == "dp")
    if private and p_s_dp and p["p_s_epsilon_share"] + share >= 1:
        raise ValueError(f"p_s_epsilon_share={p['p_s_epsilon_share']} and max_violation_epsilon_share={share} "
                         "leave nothing of epsilon for training; their sum must be below 1")


def check_validation(p: dict) -> None:
    """Validate the validation-share settings (``validation_share``, ``checkpoints``,
    ``validation_epsilon_share``) in place."""
    p.setdefault("validation_share", 0.1)
    p.setdefault("checkpoints", "auto")
    p.setdefault("validation_epsilon_share", 0.2)
    share = p["validation_share"]
    check_positive(share, "validation_share", allow_zero=True)
    if not 0 <= share < MAX_VALIDATION_SHARE:
        raise ValueError(f"validation_share must be in [0, {MAX_VALIDATION_SHARE:g}) (the share of each silo's records "
                         f"held out to validate the models of a fit; 0: none, the figures then come from the "
                         f"training records), got {share}")
    if isinstance(p["checkpoints"], str):
        if p["checkpoints"] != "auto":
            raise ValueError(f"checkpoints must be 'auto' or an integer >= 1 (how many times the silos release "
                             f"validation figures), got {p['checkpoints']!r}")
    else:
        check_int(p["checkpoints"], "checkpoints")
    vshare = p["validation_epsilon_share"]
    check_positive(vshare, "validation_epsilon_share")
    if not 0 < vshare < 1:
        raise ValueError(f"validation_epsilon_share must be in (0, 1), got {vshare}")
    private = p["epsilon"] is not None
    if private and p["protect"] == "record" and p["mode"] == "standard":
        p_s_dp = p["p_s"] is None or (isinstance(p["p_s"], str) and p["p_s"] == "dp")
        taken = (p["p_s_epsilon_share"] if p_s_dp else 0.0) + vshare + (
            p["max_violation_epsilon_share"] if p["max_violation"] is not None else 0.0)
        if taken >= 1:
            raise ValueError(f"p_s_epsilon_share, validation_epsilon_share={vshare} and max_violation_epsilon_share "
                             "leave nothing of epsilon for training; their sum must be below 1")


def default_private_run(st: Any) -> bool:
    """Whether settings ``st`` (sampling and calibration resolved) are the default private run the
    ``"auto"`` clip and decay were chosen for: private, attribute mode, ``mode="standard"``,
    ``batch_size="auto"``, batches drawn from the silos, any calibration but the paper's; with a
    fixed λ or a fairness target (docs/optimisation.md, "A fairness target's run")."""
    return (st.epsilon is not None and st.protect == "attribute" and st.mode == "standard"
            and st.calibration != "paper" and isinstance(st.batch_size, str) and st.batch_size == "auto"
            and st.sampling != "full_batch")


def auto_decay(st: Any) -> tuple[float, int]:
    """``(lr_decay, decay_every)`` that ``"auto"`` means for settings ``st``: for the default private
    run (:func:`default_private_run`) whose rounds carry noise (λ > 0) :data:`PRIVATE_DECAY` every
    ``⌈epochs / PRIVATE_DECAY_PERIODS⌉`` epochs, else :data:`AUTO_DECAY` (a private fit at λ = 0
    sends exact s-free sums only: its rounds, batch and decay are the non-private fit's)."""
    if default_private_run(st) and st.noisy_rounds:
        return PRIVATE_DECAY, max(1, math.ceil(int(st.epochs) / PRIVATE_DECAY_PERIODS))
    return AUTO_DECAY


def auto_clip(name: str, st: Any) -> float | str | None:
    """What ``"auto"`` means for the clip norm ``name`` of settings ``st`` (sampling and calibration
    resolved): no clipping without privacy; for ``clip``, ``"adaptive"`` (a norm per round from the
    batch: docs/optimisation.md, "An adaptive clip norm") where it was chosen, the default private run
    of attribute mode (``mode="standard"``, ``batch_size="auto"``, batches drawn from the silos, a
    fixed λ or a fairness target, any calibration but the paper's); otherwise the fixed norm of
    :data:`PRIVATE_CLIPS`, which a batch the user sets (at batch 256 on Adult the adaptive clip's
    noise costs more than its bias saves), record mode and the hybrid modes keep."""
    if st.epsilon is None:
        return None
    if name == "clip" and default_private_run(st):
        return "adaptive"
    return PRIVATE_CLIPS[name]


def check_adaptive_clip(p: dict) -> None:
    """Refuse ``clip="adaptive"`` where it does not apply: record mode (the scales would read the
    protected records), the hybrid modes (their sensitive silos clip in their own kernel), the
    paper's calibration (its closed form takes one clip norm)."""
    if not (isinstance(p["clip"], str) and p["clip"] == "adaptive"):
        return
    if p["protect"] != "attribute":
        raise ValueError("clip='adaptive' needs protect='attribute': a round's clip is a quantile of its batch's "
                         "scales, which read the records' features and labels, and record mode protects those. "
                         "Pass a clip norm (clip=0.25) in record mode")
    if p["mode"] != "standard":
        raise ValueError(f"clip='adaptive' is available in mode='standard' only, not mode={p['mode']!r}: pass a "
                         "clip norm (clip=0.25)")
    if p.get("calibration") == "paper":
        raise ValueError("calibration='paper' takes one fixed clip norm; use clip=0.25 with it, or "
                         "calibration='rdp' with clip='adaptive'")


def check_theta_subspace(p: dict) -> None:
    """Validate ``theta_subspace`` (None, or the rank r ≥ 1 of the public subspace a silo's noised
    θ-part is projected on; :mod:`pfair.privacy.subspace`) in place."""
    r = p.setdefault("theta_subspace", None)
    if r is None:
        return
    check_int(r, "theta_subspace")
    if p["epsilon"] is None:
        raise ValueError(f"theta_subspace={r} lowers the noise of a private fit's θ-part, and a fit without epsilon "
                         "has none: it would only discard signal. Leave theta_subspace=None, or set epsilon")
    if p["protect"] != "attribute":
        raise ValueError(f"theta_subspace={r} needs protect='attribute': its basis is computed from a silo's features, "
                         "which record mode protects. Leave theta_subspace=None")
    if p["mode"] != "standard":
        raise ValueError(f"theta_subspace is available in mode='standard' only, not mode={p['mode']!r}")


#: Noise calibrations (``calibration=``): ``"auto"`` resolves to ``"pld"`` or ``"rdp"``.
CALIBRATIONS = ("auto", "rdp", "pld", "paper")
#: Samplers whose batches record mode keeps hidden, priced by the PLD (``calibration="pld"``).
PLD_SAMPLINGS = ("without_replacement", "poisson")


def auto_calibration(protect: str, sampling: str, mode: str) -> str:
    """``calibration="auto"``: ``"pld"`` for hidden batches (record mode, fixed-size or Poisson
    batches, the standard mode), whose rounds the PLD of their dominating pair prices at about
    half the RDP noise, charged in full when the run is planned (``docs/accounting.md``, "The
    PLD currency"); ``"rdp"`` otherwise (the exact account where it applies, else RDP)."""
    if protect == "record" and mode == "standard" and sampling in PLD_SAMPLINGS:
        return "pld"
    return "rdp"


@dataclass(frozen=True)
class SteFFLeSettings:
    """Every setting of a fit, validated. See :class:`pfair.SteFFLe` for their meaning."""

    fairness: str = "demographic_parity"
    lam: float = 1.0
    epsilon: float | None = None
    delta: float | None = None
    epochs: int = 20
    batch_size: int | str = "auto"
    lr_theta: float = 0.5
    lr_w: float = 0.5
    w_radius: float | None = 2.0
    clip: float | str | None = "auto"
    clip_loss: float | str | None = "auto"
    clip_w: float | str | None = "auto"
    sampling: str = "auto"
    protect: str = "attribute"
    calibration: str = "auto"
    p_s: Any = None
    p_s_epsilon_share: float = 0.1
    lr_decay: float | str = "auto"
    decay_every: int | str = "auto"
    w_step: str = "normalised"
    theta_step: str = "scaled"
    theta_subspace: int | None = None
    output: str = "last"
    silo_weights: str = "uniform"
    positive_class: int = 1
    mode: str = "standard"
    amplification: bool = True
    dummy_noise: bool = False
    seed: int = 0
    noise_seed: int | None = None
    exact_diagnostics: bool = False
    progress: bool = False
    track_history: bool = True
    warm_start: bool = False
    max_violation: float | None = None
    max_violation_epsilon_share: float = 0.5
    lam_lr: float = 10.0
    validation_share: float = 0.1
    checkpoints: int | str = "auto"
    validation_epsilon_share: float = 0.2

    def __post_init__(self) -> None:
        # The one place "auto" clip norms and sampling are resolved (batch_size="auto" needs the
        # silo sizes: for_sizes). Clip norms: the private defaults when epsilon is set, no
        # clipping otherwise.
        if self.sampling == "auto":
            object.__setattr__(self, "sampling", auto_sampling(self.protect, self.mode))
        if self.calibration == "auto":
            object.__setattr__(self, "calibration", auto_calibration(self.protect, self.sampling, self.mode))
        for name in CLIP_NAMES:
            if isinstance(getattr(self, name), str) and getattr(self, name) == "auto":
                object.__setattr__(self, name, auto_clip(name, self))
        decay, every = auto_decay(self)
        if isinstance(self.lr_decay, str) and self.lr_decay == "auto":
            object.__setattr__(self, "lr_decay", decay)
        if isinstance(self.decay_every, str) and self.decay_every == "auto":
            object.__setattr__(self, "decay_every", every)
        # The notion object every module below the estimators takes (not a field: the settings
        # stay the public names, in asdict, repr and ==).
        object.__setattr__(self, "_notion", resolve_fairness(self.fairness, self.positive_class))

    # ------------------------------------------------------------------ derived
    @property
    def private(self) -> bool:
        return self.epsilon is not None

    @property
    def notion(self) -> FairnessNotion:
        """The fairness notion (:mod:`pfair.notions`) of ``fairness`` and ``positive_class``."""
        notion = self.__dict__.get("_notion")
        if notion is None:  # settings unpickled from before the notion objects: resolved now
            notion = resolve_fairness(self.fairness, self.positive_class)
            object.__setattr__(self, "_notion", notion)
        return notion

    @property
    def sends_psi(self) -> bool:
        """Whether the ψ parts are sent (λ > 0, or a fairness target that may raise λ); otherwise
        nothing sent depends on s."""
        return self.lam > 0 or self.max_violation is not None

    @property
    def w_noise_rows(self) -> bool:
        """Whether a private fit's ``h_W`` noise is scaled row by row (:data:`W_NOISE_ROWS`):
        attribute mode in the standard topology, any calibration but the paper's (whose closed form
        prices the isotropic release); record mode clips the W part as a whole and keeps one std."""
        return (W_NOISE_ROWS and self.protect == "attribute" and self.mode == "standard"
                and self.calibration != "paper")

    @property
    def p_s_source(self) -> str:
        """``"given"`` (proportions the user passed, :data:`P_S_GIVEN`), ``"dp"`` or ``"pooled"``."""
        if isinstance(self.p_s, str):
            return self.p_s
        return P_S_GIVEN

    def clips(self) -> dict[str, float]:
        """Clip norms as the kernels take them (``inf``: no clipping). With ``clip="adaptive"``
        ``clip_theta`` is 1: the noise plan's ``sigma_theta`` is then a std per unit of clip norm,
        which each round multiplies by its clip ``C_t`` (:attr:`clip_quantile`)."""
        inf = math.inf
        clip_theta = 1.0 if self.adaptive_clip else (self.clip or inf)
        return dict(clip_loss=self.clip_loss or inf, clip_theta=clip_theta, clip_w=self.clip_w or inf)

    @property
    def adaptive_clip(self) -> bool:
        """Whether each round picks its own clip norm (``clip="adaptive"``)."""
        return isinstance(self.clip, str) and self.clip == "adaptive"

    @property
    def clip_quantile(self) -> float | None:
        """The quantile of the batch's s-free scales S_i a round clips to
        (:data:`ADAPTIVE_CLIP_QUANTILE` with ``clip="adaptive"``), None for a fixed clip norm."""
        return ADAPTIVE_CLIP_QUANTILE if self.adaptive_clip else None

    @property
    def reference_clip(self) -> float:
        """The clip norm the refusal rule prices ``h_θ``'s noise with: the fixed ``clip``, or with
        ``clip="adaptive"`` the private default it was calibrated with (:data:`PRIVATE_CLIPS`),
        since a round's own clip is known only when the round is computed."""
        return PRIVATE_CLIPS["clip"] if self.adaptive_clip else self.clips()["clip_theta"]

    def lr_at(self, epoch: int, lam: float | None = None) -> float:
        """``η_θ`` of an epoch at fairness weight ``lam`` (default ``self.lam``; a fairness target
        passes the λ it adapted): ``lr_theta · lr_decay^⌊epoch / decay_every⌋``, divided by
        ``max(1, λ/λ_c)`` with ``theta_step="scaled"`` (λ_c = :data:`THETA_STEP_LAMBDA`): unchanged up to
        λ_c, then falling as 1/λ.

        Why: θ descends on ``L + λ ψ̄``, whose smoothness grows as ``ℓ_L + λ ℓ_ψ``, while the server's
        W step is already ``η_W/λ`` (:meth:`server_lr_w`). Gradient descent-ascent on a
        nonconvex–strongly-concave problem converges when η_θ is of order 1/(κ² ℓ) and η_W of order
        1/ℓ (Lin, Jin and Jordan, ICML 2020); with κ about constant in λ, η_θ must fall as
        1/(1 + λ ℓ_ψ/ℓ_L), which ``1/max(1, λ/λ_c)`` matches within a factor 2 (λ_c = ℓ_L/ℓ_ψ). A
        constant η_θ cycles from epoch to epoch once λ matters. The rule moves
        every stationary point nowhere (it scales the whole θ gradient) and is the server's choice
        on released messages: privacy is unchanged."""
        lr = self.lr_theta * self.lr_decay ** (epoch // self.decay_every)
        if self.theta_step == "scaled":
            lr /= max(1.0, float(self.lam if lam is None else lam) / THETA_STEP_LAMBDA)
        return lr

    @property
    def noisy_rounds(self) -> bool:
        """Whether the training rounds carry noise: a private fit that sends the s-dependent parts
        (``sends_psi``) or protects whole records. A private fit at ``lam=0`` in attribute mode sends
        exact s-free sums only: its rounds are the non-private fit's."""
        return self.private and (self.sends_psi or self.protect == "record")

    @property
    def auto_batch(self) -> int:
        """The cap ``batch_size="auto"`` takes: ``AUTO_BATCH_PRIVATE`` when the rounds carry noise
        (``AUTO_BATCH_RECORD`` with ``protect="record"``), ``AUTO_BATCH_NONPRIVATE`` when they do
        not. Every input (ε, λ, the fairness target, the mode) is a public setting."""
        if not self.noisy_rounds:
            return AUTO_BATCH_NONPRIVATE
        if self.protect == "record":
            return AUTO_BATCH_RECORD
        return AUTO_BATCH_PRIVATE

    @property
    def stretches_run(self) -> bool:
        """Whether ``batch_size="auto"`` also stretches the run to the batch it picks
        (:meth:`for_sizes`): noisy rounds in attribute mode (a private fit with λ > 0 or a fairness
        target), batches drawn from the silos (not ``sampling="full_batch"``). Every input is a
        public setting."""
        return self.noisy_rounds and self.protect == "attribute" and self.sampling != "full_batch"

    def stretch(self, batch: int) -> float:
        """``k``, the factor ``batch_size="auto"`` multiplies ``lr_theta``, ``epochs`` and
        ``decay_every`` by when it resolves to ``batch`` (:meth:`for_sizes`): ``batch /
        AUTO_RUN_BATCH`` where the run stretches (:attr:`stretches_run`) to a batch above
        :data:`AUTO_RUN_BATCH`, else 1."""
        if not self.stretches_run or batch <= AUTO_RUN_BATCH:
            return 1.0
        return batch / AUTO_RUN_BATCH

    @property
    def lambda_stretch(self) -> float:
        """:meth:`lambda_stretch_for` a run whose silos' sizes are not known (the cap alone)."""
        return self.lambda_stretch_for(None)

    def lambda_stretch_for(self, run_rounds: int | None) -> float:
        """``k_λ``, the factor ``batch_size="auto"`` multiplies ``epochs`` and ``decay_every`` by in a
        run whose rounds carry no noise (not :attr:`noisy_rounds`; at λ > 0 a non-private fit) at a
        fixed λ (no ``max_violation``) under ``theta_step="scaled"``:
        ``min(λ / λ_c, max(LAMBDA_STRETCH_CAP, LAMBDA_STRETCH_ROUNDS / run_rounds))`` above
        λ_c = :data:`THETA_STEP_LAMBDA` (:func:`noise_free_stretch`; ``run_rounds`` = E·R, the run
        before the stretch, None where the silos' sizes are not known), else 1 (and 1 once the
        batch is a number: a batch the user states runs the epochs given, and resolved settings
        are not stretched twice).

        Why: the scaled step ``η_θ / (λ/λ_c)`` keeps θ slow against W's tracking (:meth:`lr_at`),
        which also slows the loss's progress λ/λ_c-fold; with the epochs of λ ≤ λ_c the run ends
        before ``L + λ ψ̄`` is minimised (Adult, demographic parity, λ = 100: test error 0.230 after
        20 epochs, 0.189 after 200, with less violation). Gradient descent needs iterations in
        proportion to the condition number, here ``∝ (ℓ_L + λ ℓ_ψ) / ℓ_L``: ``k_λ`` times the
        rounds of λ ≤ λ_c. Without noise, more rounds cost compute only, which the cap bounds on a
        large table; a small table's run of few rounds may take the whole ``λ / λ_c`` up to
        :data:`LAMBDA_STRETCH_ROUNDS` rounds. A private run's rounds cost budget, so its length
        stays the user's (or the batch stretch's, :meth:`stretch`). Every input is a public setting
        (the silos' sizes are public).

        Where the silos' sizes are known, the factor is at least ``ROUNDS_PER_EPOCH_FLOOR · E / run_rounds``
        (:data:`ROUNDS_PER_EPOCH_FLOOR`): a run on silos of R < 16 rounds an epoch, at any fixed λ, has
        the rounds of epochs of 16 (docs/optimisation.md, "A run's rounds on small tables")."""
        return max(self.noise_free_factors(run_rounds))

    def noise_free_factors(self, run_rounds: int | None) -> tuple[float, float]:
        """``(k_λ, k_floor)``, the two factors :meth:`lambda_stretch_for` takes the larger of: the λ
        stretch (:func:`noise_free_stretch`) and the small silos' floor ``ROUNDS_PER_EPOCH_FLOOR · E /
        run_rounds`` (1 where the silos' sizes are not known); ``(1, 1)`` for a run that is not
        stretched (noisy rounds, a fairness target, a stated batch). Kept apart so that a refusal
        and a run's summary can say which one set the run's length."""
        if (self.noisy_rounds or self.max_violation is not None
                or not (isinstance(self.batch_size, str) and self.batch_size == "auto")):
            return 1.0, 1.0
        k_lam = noise_free_stretch(self.lam, self.theta_step,
                                   None if run_rounds is None else LAMBDA_STRETCH_ROUNDS / max(1, int(run_rounds)))
        if run_rounds is None:
            return k_lam, 1.0
        # A silo of few rounds an epoch: its run has the rounds of epochs of ROUNDS_PER_EPOCH_FLOOR.
        return k_lam, max(1.0, ROUNDS_PER_EPOCH_FLOOR * int(self.epochs) / max(1, int(run_rounds)))

    def written_out(self) -> dict:
        """The settings an estimator must state to run these settings (batch resolved by
        :meth:`for_sizes`) once its ``batch_size`` is a number: the batch, step, epochs, the
        decay and its period, and the clip where ``"auto"`` chose the adaptive one (with a stated
        batch, ``"auto"`` would mean the fixed clip and the decay of other runs; every other
        ``"auto"`` resolves as it did). What ``pfair deploy
        local`` sends and :func:`pfair.model_selection.default_grid` writes for the stretched run."""
        out = dict(batch_size=int(self.batch_size), lr_theta=float(self.lr_theta), epochs=int(self.epochs),
                   decay_every=int(self.decay_every), lr_decay=float(self.lr_decay))
        if self.adaptive_clip:
            out["clip"] = self.clip
        return out

    def auto_batch_size(self, sizes: Any) -> int:
        """The batch ``batch_size="auto"`` picks for silos of ``sizes`` records:
        ``min(auto_batch, smallest silo)``, at least 1 (:meth:`for_sizes`, which also stretches the run)."""
        cap = self.auto_batch
        smallest = int(min(int(n) for n in sizes)) if len(sizes) else cap
        return max(1, min(cap, smallest))

    def for_sizes(self, sizes: Any, *, sizes_known: bool = True) -> "SteFFLeSettings":
        """These settings with ``batch_size="auto"`` resolved for silos of ``sizes`` records:
        ``m = min(auto_batch, smallest silo)``. Silo sizes are public (they set δ and the rounds per
        epoch), so the batch size stays a public setting. One rule changes other settings with it:
        a private attribute-mode fit that sends ψ (:attr:`stretches_run`: a fixed λ > 0 or a
        fairness target) multiplies ``lr_theta``, ``epochs`` and ``decay_every`` by
        ``k = max(1, m / AUTO_RUN_BATCH)`` (epochs and decay rounded up): the run has the rounds of
        ``epochs`` passes at a batch of :data:`AUTO_RUN_BATCH`, each averaging k times the records
        with k times the step. Shuffled epochs are accounted as √E/z-GDP, so z grows as √E while the
        noise on a batch mean falls as 1/m: over the run the noise on θ's path relative to its drift
        falls as 1/√k at the same ε (docs/optimisation.md, "A private fit's run length").

        A run whose rounds carry no noise at a fixed λ above λ_c (:meth:`lambda_stretch_for`) multiplies
        ``epochs`` and ``decay_every`` by ``k_λ`` (rounded up), its step unchanged: the scaled θ step
        needs that many more rounds (docs/optimisation.md, "A noise-free run at a large λ"); on silos
        of fewer than :data:`ROUNDS_PER_EPOCH_FLOOR` rounds an epoch, at any fixed λ, by at least
        ``ROUNDS_PER_EPOCH_FLOOR / R`` ("A run's rounds on small tables").
        ``sizes_known=False`` (a deployed party's stand-in sizes): ``k_λ`` takes the cap alone, not
        the rounds of a run on ``sizes``.

        Other settings are returned as they are."""
        if self.batch_size != "auto":
            return self
        batch = self.auto_batch_size(sizes)
        k = self.stretch(batch)
        # The budget counts rounds of a batch; a full-batch round reads a whole silo, so a full-batch
        # run keeps the cap (its rounds are as dear as its epochs).
        run_rounds = (int(self.epochs) * rounds_per_epoch(self.sampling, sizes, batch)
                      if sizes_known and len(sizes) and self.sampling != "full_batch" else None)
        k_by_lam, k_floor = self.noise_free_factors(run_rounds)
        k_lam = max(k_by_lam, k_floor)  # lambda_stretch_for
        if k == 1.0 and k_lam == 1.0:
            return replace(self, batch_size=batch)
        epochs = math.ceil(int(self.epochs) * k * k_lam)
        if epochs > MAX_EPOCHS:
            why = (f"the epochs are stated for a batch of {AUTO_RUN_BATCH}, and a batch {k:.2f} times larger takes "
                   f"{k:.2f} times the epochs" if k > 1 else
                   f"the epochs are stated for silos of at least {ROUNDS_PER_EPOCH_FLOOR} rounds an epoch, and these "
                   f"make {int(run_rounds) // int(self.epochs)}: {k_lam:.2f} times the epochs" if k_floor > k_by_lam else
                   f"the epochs are stated for λ ≤ {THETA_STEP_LAMBDA:g}, and lam={self.lam:g} takes "
                   f"{k_lam:.2f} times the epochs of its smaller θ step")
            raise ValueError(f"epochs={self.epochs} with batch_size='auto' is a run of {epochs:,} epochs at the automatic "
                             f"batch of {batch} ({why}), above the most a run may have ({MAX_EPOCHS:,}). Use fewer "
                             "epochs, or set batch_size yourself")
        return replace(self, batch_size=batch, lr_theta=self.lr_theta * k, epochs=epochs,
                       decay_every=math.ceil(int(self.decay_every) * k * k_lam))

    def server_lr_w(self, lam: float | None = None) -> float:
        """The ``lr_w`` the server update takes, which multiplies it by λ
        (``W ← Π_D(W + λ·lr_w·Σ ω_j ∇_W ψ_j)``).

        ``w_step="normalised"`` (default): ``η_W / λ``, so W moves by ``η_W ∇_W ψ̄`` whatever λ.
        The W-problem ``max_W λ ψ̄(θ, W)`` is a concave quadratic with curvature ``2λ E[F_u]``
        per column u; the paper's step ``λ η_W`` contracts only while ``λ η_W E[F_u] < 1`` and
        beyond it W oscillates to the radius and training collapses to a constant predictor
        (docs/optimisation.md). With ``η_W / λ`` the contraction factor is ``1 − 2 η_W E[F_u]``,
        stable for every λ when ``η_W < 1``. ``lam``: the round's λ when ``max_violation`` adapts it
        (default ``self.lam``). ``w_step="paper"``: ``η_W`` as given (Algorithm 1).
        This is post-processing of the released messages on the server: privacy is unchanged."""
        lam = float(self.lam if lam is None else lam)  # λ of the round (max_violation adapts it)
        if self.w_step == "normalised" and lam > 0:
            return float(self.lr_w) / lam
        return float(self.lr_w)

    @property
    def checkpoint_releases_free(self) -> bool:
        """Whether a checkpoint releases nothing that costs budget: a non-private fit, or
        ``protect="attribute"`` without a fairness target (the validation table ``c[y, ŷ]`` reads
        x and y only, which attribute mode does not protect)."""
        return not self.private or (self.protect == "attribute" and self.max_violation is None)

    def checkpoint_epochs(self) -> tuple[int, ...]:
        """The epochs (0-based) after which the silos release their validation figures
        (:mod:`pfair.validation`): every epoch when that is free
        (:attr:`checkpoint_releases_free`), else ``AUTO_CHECKPOINTS`` of them with a fairness
        target and ``AUTO_CHECKPOINTS_GUARD`` without (or ``checkpoints`` when it is an int), evenly
        spaced, ``⌈E·i/K⌉ − 1`` for ``i = 1..K``: the last epoch is
        always one. In the hybrid topologies the same, except that with ``validation_share=0`` and
        no fairness target there are none (such a run releases no validation figures, as before the
        hybrid topologies had checkpoints)."""
        if self.mode != "standard" and self.validation_share <= 0 and self.max_violation is None:
            return ()
        E = int(self.epochs)
        if isinstance(self.checkpoints, str):
            if self.checkpoint_releases_free:
                return tuple(range(E))
            K = min(E, AUTO_CHECKPOINTS if self.max_violation is not None else AUTO_CHECKPOINTS_GUARD)
        else:
            K = min(E, int(self.checkpoints))
        return tuple(sorted({math.ceil(E * i / K) - 1 for i in range(1, K + 1)}))

    def delta_for(self, n_records: int) -> float:
        return self.delta if self.delta is not None else default_delta(n_records)

    def as_dict(self) -> dict:
        d = asdict(self)
        if not isinstance(self.p_s, (str, type(None))):
            d["p_s"] = P_S_GIVEN
        return d

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_estimator_params(cls, params: Mapping[str, Any]) -> "SteFFLeSettings":
        """Validate an estimator's hyper-parameters (its ``get_params()``, names as in
        :class:`pfair.SteFFLe`) once and freeze them. Entries that are not settings (e.g.
        DeepSteFFLe's ``module``) are not read; a setting not given takes its default.
        ``"auto"`` clip norms and sampling are resolved by the frozen object (``__post_init__``)."""
        p = {f.name: params.get(f.name, f.default) for f in fields(cls)}
        check_choice(p["fairness"], "fairness", FAIRNESS_NOTIONS)
        check_positive(p["lam"], "lam", allow_zero=True)
        check_positive(p["epsilon"], "epsilon", allow_none=True)
        if p["delta"] is not None:
            check_positive(p["delta"], "delta")
            if not 0 < p["delta"] < 1:
                raise ValueError(f"delta must be in (0, 1), got {p['delta']}; a common choice is 1/n²")
        check_int(p["epochs"], "epochs")
        if p["epochs"] > MAX_EPOCHS:
            raise ValueError(f"epochs must be at most {MAX_EPOCHS:,}, got {p['epochs']:,}; no fit needs more (the tuned "
                             "defaults use 5 to 40), and a run's length is bounded so that a silo never plans "
                             "a run it will not train. Use fewer epochs")
        if not (isinstance(p["batch_size"], str) and p["batch_size"] == "auto"):
            if isinstance(p["batch_size"], str):
                raise ValueError(f"batch_size must be an integer >= 1 or 'auto' (min({AUTO_BATCH_PRIVATE}, smallest "
                                 f"silo) when private, min({AUTO_BATCH_NONPRIVATE}, smallest silo) without noise), "
                                 f"got {p['batch_size']!r}")
            check_int(p["batch_size"], "batch_size")
        check_positive(p["lr_theta"], "lr_theta", allow_zero=True)
        check_positive(p["lr_w"], "lr_w", allow_zero=True)
        check_choice(p["w_step"], "w_step", W_STEPS)
        check_choice(p["theta_step"], "theta_step", THETA_STEPS)
        check_positive(p["w_radius"], "w_radius", allow_none=True)
        private = p["epsilon"] is not None
        for name in CLIP_NAMES:
            if isinstance(p[name], str):
                if p[name] != "auto" and not (name == "clip" and p[name] == "adaptive"):
                    also = ", 'adaptive' (a clip norm per round from the batch)" if name == "clip" else ""
                    raise ValueError(f"{name} must be a positive number, None (no clipping){also} or 'auto' "
                                     f"({PRIVATE_CLIPS[name]:g} when epsilon is set, no clipping otherwise); got {p[name]!r}")
            else:
                check_positive(p[name], name, allow_none=True)
        check_adaptive_clip(p)
        check_choice(p["sampling"], "sampling", SAMPLINGS + ("auto",))
        check_choice(p["protect"], "protect", ("attribute", "record"))
        check_choice(p["calibration"], "calibration", CALIBRATIONS)
        if p["calibration"] == "pld" and not (p["protect"] == "record" and p["mode"] == "standard"
                                               and p["sampling"] in ("auto",) + PLD_SAMPLINGS):
            raise ValueError(
                f"calibration='pld' prices hidden batches (protect='record', mode='standard', sampling in "
                f"{PLD_SAMPLINGS}); got protect={p['protect']!r}, mode={p['mode']!r}, sampling={p['sampling']!r}. "
                "Use calibration='auto' (it picks the exact account for shuffled epochs, full and public batches)")
        check_choice(p["output"], "output", ("last", "random"))
        check_choice(p["silo_weights"], "silo_weights", ("uniform", "size"))
        check_choice(p["mode"], "mode", MODES)
        for name, check, what in (("lr_decay", check_positive, "a positive number"),
                                  ("decay_every", check_int, "an integer >= 1")):
            if isinstance(p[name], str):
                if p[name] != "auto":
                    raise ValueError(f"{name} must be {what} or 'auto', got {p[name]!r}")
            else:
                check(p[name], name)
        check_int(p["seed"], "seed", minimum=0)
        if p["noise_seed"] is not None:
            check_int(p["noise_seed"], "noise_seed", minimum=0)
        share = p["p_s_epsilon_share"]
        check_positive(share, "p_s_epsilon_share")
        if not 0 < share < 1:
            raise ValueError(f"p_s_epsilon_share must be in (0, 1), got {share}")

        check_max_violation(p)
        check_validation(p)
        check_theta_subspace(p)

        p_s = p["p_s"]
        if p_s is None:
            p_s = "dp" if private else "pooled"
        elif isinstance(p_s, str):
            if p_s == "public":
                raise ValueError(
                    "p_s='public' used to mean proportions computed from every silo's exact s, which are "
                    "not public: pass the public proportions themselves (p_s=[0.33, 0.67], e.g. from a "
                    "census), p_s='dp' (each silo releases a DP histogram; the default when private) or "
                    "p_s='pooled' (exact pooled proportions, for reproducing the paper; not covered by the "
                    "guarantee)"
                )
            check_choice(p_s, "p_s", P_S_SOURCES)
        else:
            p_s = parse_public_proportions(p_s)
        p["p_s"] = p_s
        settings = cls(**p)  # resolves "auto" clip norms and sampling

        if private:
            needed = ["clip"] + (["clip_loss", "clip_w"] if p["protect"] == "record" else [])
            for name in needed:
                if getattr(settings, name) is None:
                    raise ValueError(f"{name} must be set when epsilon is set: sensitivity needs a clip norm")
            if p["calibration"] == "paper" and p["protect"] == "record":
                raise ValueError("calibration='paper' exists only for protect='attribute' (the paper's setting)")
            if p["calibration"] == "paper" and isinstance(p_s, str) and p_s == "dp":
                raise ValueError("calibration='paper' ignores the cost of a private p_s histogram; use "
                                 "calibration='rdp' with p_s='dp', or public proportions (p_s=[...]) or "
                                 "p_s='pooled' with calibration='paper'")
        if isinstance(p_s, str) and p_s == "dp" and not private:
            raise ValueError("p_s='dp' needs epsilon (a private histogram needs a budget); pass public "
                             "proportions or p_s='pooled' for a non-private fit")
        settings.warn_about_step_sizes()
        settings.warn_about_guarantee()
        return settings

    def warn_about_step_sizes(self) -> None:
        """A ``UserWarning`` when ``lam`` is so large that the fit cannot trade accuracy for fairness.

        ``theta_step="constant"``: the fairness term's θ step ``η_θ λ (a_θ + h_θ)`` swamps the loss
        step; with ``λ η_θ > LAM_STEP_LIMIT`` θ moves by hundreds per unit of ψ-gradient and training
        diverges (θ grows without bound). ``theta_step="scaled"`` (default): the fairness step is
        ``η_θ min(λ, λ_c)``, which diverges only when that exceeds ``LAM_STEP_LIMIT`` (a huge
        ``lr_theta``), but the loss's step is ``η_θ / (λ/λ_c)``; with ``λ/λ_c > LAM_SCALED_LIMIT`` the
        loss barely trains and the model ends at or near the constant predictor."""
        if self.theta_step == "scaled":
            ratio = self.lam / THETA_STEP_LAMBDA
            step = self.lr_theta * min(float(self.lam), THETA_STEP_LAMBDA)  # the fairness term's step
            if step > LAM_STEP_LIMIT:
                warnings.warn(
                    f"lam={self.lam:g} with lr_theta={self.lr_theta:g}: each θ step moves by lr_theta·min(lam, "
                    f"{THETA_STEP_LAMBDA:g}) = {step:g} times the fairness gradient, so training is likely to diverge "
                    "(θ growing without bound, one class predicted for everyone). Lower lr_theta so that "
                    f"lr_theta·min(lam, {THETA_STEP_LAMBDA:g}) <= {LAM_STEP_LIMIT:g}",
                    UserWarning,
                    stacklevel=5,
                )
            if ratio > LAM_SCALED_LIMIT:
                warnings.warn(
                    f"lam={self.lam:g}: with theta_step='scaled' each θ step takes lr_theta / (lam / "
                    f"{THETA_STEP_LAMBDA:g}) = {self.lr_theta / ratio:.3g} of the loss's gradient, {ratio:g} times less "
                    "than at lam <= 1, so the loss barely trains and the fit is likely to end at or near the "
                    f"constant predictor (fair and useless). Fairness weights are usually between 0 and 100; "
                    f"lower lam (at most {LAM_SCALED_LIMIT * THETA_STEP_LAMBDA:g}), or name the violation you "
                    "accept with max_violation",
                    UserWarning,
                    stacklevel=5,
                )
            return
        step = self.lam * self.lr_theta
        if step > LAM_STEP_LIMIT:
            warnings.warn(
                f"lam={self.lam:g} with lr_theta={self.lr_theta:g}: each θ step moves by lam·lr_theta = {step:g} "
                "times the fairness gradient, so training is likely to diverge (θ growing without bound, one class "
                f"predicted for everyone). Fairness weights are usually between 0 and 10; lower lam, or lower "
                f"lr_theta so that lam·lr_theta <= {LAM_STEP_LIMIT:g}",
                UserWarning,
                stacklevel=5,
            )

    @property
    def lam_initial(self) -> float:
        """λ of the first epoch: ``lam``, or 0 when λ is adapted to ``max_violation``."""
        return 0.0 if self.max_violation is not None else float(self.lam)

    def warn_about_guarantee(self) -> None:
        """A :class:`PrivacyWarning` for every setting that weakens what a private fit claims."""
        if not self.private:
            return
        if self.epsilon > MEANINGFUL_EPSILON:
            warnings.warn(
                f"epsilon={self.epsilon:g} is above {MEANINGFUL_EPSILON:g}, where a guarantee stops meaning much: "
                f"one record (or its s) may make any outcome e^epsilon = {math.exp(min(self.epsilon, 700.0)):.3g} times "
                "more likely. Ask for a smaller epsilon, or report the fit as not private",
                PrivacyWarning,
                stacklevel=4,
            )
        if self.noise_seed is not None:
            warnings.warn(
                f"noise_seed={self.noise_seed} makes the noise reproducible: anyone who knows it can remove the "
                "noise (replay the fit for each candidate s, or subtract two fits), so the (epsilon, delta) "
                "guarantee does not hold against them. Use it for simulations only; leave noise_seed=None "
                "for secret noise from the operating system",
                PrivacyWarning,
                stacklevel=4,
            )
        if self.p_s_source == "pooled":
            warnings.warn(
                "p_s='pooled' computes the group proportions from every silo's exact sensitive attribute and "
                "shares them; that release is not covered by the (epsilon, delta) guarantee. Pass public "
                "proportions (p_s=[...]) or use p_s='dp'",
                PrivacyWarning,
                stacklevel=4,
            )
        if self.exact_diagnostics:
            warnings.warn(
                "exact_diagnostics=True records statistics of the silos' exact data (batch loss, psi, clip "
                "counts, training fairness) in history_; they are outside the (epsilon, delta) guarantee",
                PrivacyWarning,
                stacklevel=4,
            )
