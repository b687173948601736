"""scikit-learn style estimators. :class:`SteFFLe` is Algorithm 1 of Gupta, Poornash, Razaviyayn
and Lowy, "A Stochastic Optimization Framework for Private and Fair Learning From Decentralized
Data" (2024).

SteFFLe solves ``min_θ max_W  L(θ) + λ · mean_i ψ_i(θ, W)`` (the FERMI objective) by noisy
federated stochastic gradient descent-ascent. In round t every silo j draws a batch, computes its
loss gradient g_j and the ψ-gradient parts (``rust/src/psi/``), clips and noises the parts that
depend on the sensitive attribute, and sends them; the server sets

    θ ← θ − η_θ Σ_j ω_j [g_j + λ(a_θ,j + h_θ,j)],    W ← Π_D(W + λ η_W Σ_j ω_j [a_W,j + h_W,j])

(``rust/src/round.rs``), where by default (``w_step="normalised"``) the server passes
``η_W / λ`` as the W step so that W moves by ``η_W ∇_W ψ̄`` at every λ (see ``w_step``). Each
silo calibrates its own noise to its own (ε, δ) and keeps its own ledger; it refuses to send a
message that would exceed its budget.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from sklearn.base import ClassifierMixin
from sklearn.utils.validation import validate_data

from pfair import _core, metrics
from pfair._fit import SteFFLeFit, refuse_fit_arguments
from pfair._validation import as_features
from pfair.exceptions import NotFittedError


class LinearSoftmaxMixin(ClassifierMixin):
    """Prediction for a fitted linear-softmax model stored in ``theta_`` (``(d+1)·(l-1)``).

    A scikit-learn classifier (``ClassifierMixin``: ``score`` is accuracy, ``is_classifier`` is
    True); list it before the :class:`~sklearn.base.BaseEstimator` base (:class:`pfair._fit.SteFFLeFit`,
    ``_ParamsMixin``), as scikit-learn requires."""

    theta_: np.ndarray
    classes_: np.ndarray
    n_features_in_: int

    def _check_fitted(self) -> None:
        if not hasattr(self, "theta_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first")

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities ``F(x) = softmax(0, x̃·θ)``, shape ``(n, l)``."""
        self._check_fitted()
        Xa = as_features(X)
        # n_features_in_ and, for a model fitted on a DataFrame, the column names.
        validate_data(self, X, reset=False, skip_check_array=True)
        return _core.predict_proba(Xa, self.theta_, len(self.classes_))

    def predict(self, X: Any) -> np.ndarray:
        """Most probable class, in the original label categories."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

    def decision_function(self, X: Any) -> np.ndarray:
        """Logits ``x̃·θ``: shape ``(n,)`` for two classes (the log-odds of ``classes_[1]``),
        ``(n, l)`` otherwise (class 0 the reference, logit 0)."""
        self._check_fitted()
        Xa = as_features(X)
        validate_data(self, X, reset=False, skip_check_array=True)
        logits = np.hstack([Xa, np.ones((Xa.shape[0], 1))]) @ self.theta_.reshape(Xa.shape[1] + 1, -1)
        return logits[:, 0] if len(self.classes_) == 2 else np.hstack([np.zeros((Xa.shape[0], 1)), logits])

    def group_report(self, X: Any, y: Any, *, sensitive_features: Any, pos_label: Any = None) -> pd.DataFrame:
        """Per-group count, selection rate, error, TPR and FPR of this model's predictions, plus
        the overall, difference and ratio rows (:func:`pfair.metrics.group_report`).
        ``pos_label`` defaults to ``classes_[1]`` (the positive class of a binary task)."""
        self._check_fitted()
        label = self.classes_[1] if pos_label is None else pos_label
        return metrics.group_report(y, self.predict(X), sensitive_features=sensitive_features, pos_label=label)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()  # type: ignore[misc]
        tags.input_tags.allow_nan = False
        tags.classifier_tags.multi_class = True
        tags.classifier_tags.poor_score = False
        return tags

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


class SteFFLe(LinearSoftmaxMixin, SteFFLeFit):
    """Private and fair federated logistic/softmax regression: SteFFLe (Gupta, Poornash, Razaviyayn
    and Lowy, "A Stochastic Optimization Framework for Private and Fair Learning From Decentralized
    Data", 2024, Alg. 1).

    The defaults (``batch_size``, ``lr_theta``, ``lr_w``, ``w_radius``, ``clip``, ``epochs``) were
    chosen on validation splits of the bundled data sets, at ε = 1 and without privacy, by
    :mod:`pfair.experiments.defaults` (docs/optimisation.md).

    Parameters
    ----------
    fairness : {"demographic_parity", "equalized_odds", "equal_opportunity", "false_positive_rate_parity"}
        The notion the ψ-term enforces (:mod:`pfair.notions`): independence of the prediction
        and s, given y, given y = ``positive_class``, or given y ≠ ``positive_class``.
    lam : float, λ ≥ 0, weight of the fairness penalty (0: no penalty, and nothing sent depends on s).
    epsilon, delta : each silo's ISRL-DP budget over all its fits. Default ``epsilon=1.0``, the same
        as ``pfair train``. ``epsilon=None``: non-private (nothing clipped or noised), warned with a
        :class:`~pfair.exceptions.NonPrivateFitWarning` at every fit. ``delta=None``: 1/n_j² for silo j. A second fit on the same silos gets only what the first
        left (the budget lives in the silos' ledgers).
    epochs : int. One epoch is ``ceil(mean silo size / batch_size)`` rounds. With
        ``batch_size="auto"`` in a private attribute-mode fit at ``lam > 0`` (below), the epochs, like
        ``lr_theta`` and ``decay_every``, are stated for a batch of ``pfair.settings.AUTO_RUN_BATCH``
        (1,024) and multiplied by ``k = m / 1024`` at the batch m the rule picks (rounded up). With
        ``batch_size="auto"`` in a non-private fit at a fixed ``lam`` above λ_c = 1 (``theta_step=
        "scaled"``), the epochs and ``decay_every`` are stated for λ ≤ λ_c and multiplied by
        ``k_λ = min(lam / λ_c, max(LAMBDA_STRETCH_CAP, LAMBDA_STRETCH_ROUNDS / (E·R)))`` (10, and
        4,000 rounds; E·R the run's rounds before the stretch, so a small table's short run may take
        up to the whole ``lam / λ_c``): its θ step is ``lr_theta / (lam / λ_c)``, so the loss needs
        that many times the rounds (``SteFFLeSettings.lambda_stretch_for``; docs/optimisation.md, "A
        noise-free run at a large λ"). Such a noise-free run (any fixed ``lam``, no ``max_violation``) on
        silos of R < 16 rounds an epoch states its epochs for 16 (``pfair.settings.ROUNDS_PER_EPOCH_FLOOR``)
        and multiplies them and ``decay_every`` by 16 / R where that is larger than the λ stretch:
        gradient descent needs steps, not passes (German's three silos of 225 training records run
        320 epochs of one round instead of 20; docs/optimisation.md, "A run's rounds on small
        tables"). A stated ``batch_size`` runs the epochs given.
    batch_size : int or "auto", m, the fixed batch size (``sampling="poisson"``: the expected size).
        ``"auto"`` (default): ``min(cap, smallest silo)`` (the silo sizes are public), the cap
        depending on whether the rounds carry noise (``SteFFLeSettings.auto_batch``):
        ``pfair.settings.AUTO_BATCH_PRIVATE`` (8,192) when they do (``epsilon`` set and ``lam > 0``
        or ``max_violation``):
        with public batches (attribute mode) ε depends on the epochs, not on m, while the noise on a
        batch mean falls as 1/m, so large batches are cheap in privacy; above 1,024 the run is then
        stretched to the batch (``lr_theta``, ``epochs`` and ``decay_every`` times k = m / 1024: the
        rounds of ``epochs`` passes at 1,024, each averaging k times the records), which at the same
        ε lowers the noise on θ's path relative to its drift by √k (docs/optimisation.md, "A private
        fit's run length"; with a fairness target too: "A fairness target's run"); a fixed
        ``batch_size`` runs exactly the epochs and step given; ``AUTO_BATCH_NONPRIVATE`` when they
        do not (``epsilon=None``, or ``lam=0`` in attribute mode, which sends nothing that depends
        on s), where a large batch only means fewer steps;
        ``AUTO_BATCH_RECORD`` with ``protect="record"``, where a small hidden batch amplifies
        privacy (docs/optimisation.md).
    lr_theta, lr_w : step sizes η_θ (decayed by ``lr_decay`` every ``decay_every`` epochs), η_W.
    lr_decay, decay_every : float and int, or "auto" (default): η_θ is multiplied by ``lr_decay``
        every ``decay_every`` epochs. ``"auto"``: for the default private run (``epsilon`` set,
        ``lam > 0`` or ``max_violation``, attribute mode, ``batch_size="auto"``) η_θ is multiplied by
        0.4 every quarter of the epochs (``pfair.settings.PRIVATE_DECAY``, ``PRIVATE_DECAY_PERIODS``;
        before the stretch multiplies the period with the epochs), so that the last iterates, which
        carry the noise of each step, move at about a sixteenth of the step and the returned model jitters less
        (docs/optimisation.md, "The end of a private run"); every other fit takes 0.8 every 10
        epochs (``AUTO_DECAY``, the paper's).
    w_step : "normalised" (default) or "paper". The paper's ascent step is ``λ η_W``; the W-problem
        has curvature ``2λ E[F_u]``, so past ``λ η_W E[F_u] = 1`` W oscillates onto the radius and
        training collapses to a constant predictor (on Adult at λ ≈ 2.6 with η_W = 0.5).
        ``"normalised"`` steps W by ``η_W ∇_W ψ̄`` whatever λ (stable for η_W < 1). Server-side
        post-processing: privacy is the same either way. See docs/optimisation.md.
    theta_step : "scaled" (default) or "constant". ``"scaled"`` takes θ steps of
        ``η_θ / max(1, λ/λ_c)`` (λ_c = ``pfair.settings.THETA_STEP_LAMBDA`` = 1, so λ ≤ 1 keeps η_θ): the smoothness of
        ``L + λ ψ̄`` in θ grows with λ while W's step is normalised, and gradient descent-ascent
        converges only while θ moves slowly against W (Lin, Jin and Jordan, 2020); with a constant
        step the iterates cycle from epoch to epoch once λ matters. ``"constant"``: η_θ whatever λ
        (pfair before 0.2). Server-side: privacy is the same either way. See docs/optimisation.md.
    theta_subspace : None (default) or an integer r ≥ 1 (private fits in attribute mode only). Each
        silo projects its noised θ-part ``h_θ`` on the top r principal directions ``U`` of its own
        ``x̃ = [x, 1]`` (eigenvectors of ``Σ_i x̃_i x̃_iᵀ``) before sending it: ``(U Uᵀ ⊗ I) h_θ``. The
        noise then has norm ``σ_θ √(r(l−1))`` instead of ``σ_θ √((d+1)(l−1))``, and the part of the
        fairness gradient outside the span is lost. ``U`` reads x only, which attribute mode does
        not protect, so this is post-processing of the release: ε, δ and every sensitivity are
        unchanged (docs/privacy.md, "A public subspace for h_θ"; measured in docs/optimisation.md).
    w_radius : D, each W block is projected on the Frobenius ball of radius D (None: no projection).
    clip : C_θ, per-record clip norm of the s-dependent θ-part b_i. ``"auto"`` (default): when
        ``epsilon`` is set ``"adaptive"`` (below) or 0.25 where that does not apply, no clipping in a
        non-private fit; None: no clipping (refused when
        private, where the sensitivity needs a clip norm). ``"adaptive"`` (what ``"auto"`` means for the default
        private run: ``protect="attribute"``, ``mode="standard"``, ``batch_size="auto"``, a fixed
        ``lam`` or a ``max_violation``): each round clips to the 0.9-quantile
        C_t of its batch's s-free scales S_i (the mean of ‖b_i‖ over the groups under the released
        proportions) and scales the noise with it, ``σ_θ = z √P · 2 C_t / m``: the same z and ε as a
        fixed clip, since C_t reads x, y, θ, W and the released p_s only (docs/privacy.md, "An
        adaptive clip norm"). A batch you set, record mode, the hybrid modes and
        ``calibration="paper"`` take 0.25.
    clip_loss, clip_w : per-record clip norms of the loss gradient and of ∇_W ψ_i, used only with
        ``protect="record"``; ``"auto"``: 1.0 and 2.0 when private, no clipping otherwise.
    sampling : {"auto", "shuffle", "without_replacement", "poisson", "full_batch"}; the accountant
        matches it exactly. ``"shuffle"``: shuffled epochs (every record exactly once per epoch, in
        batches of m with divisor m), accounted exactly as √K/z-GDP for K epochs. ``"auto"``
        (default): ``"shuffle"`` with ``protect="attribute"`` (the batch is public anyway, and this
        is the cheapest exact account), ``"without_replacement"`` with ``protect="record"`` (a
        hidden fixed-size batch amplifies privacy).
    protect : "attribute" (neighbours differ in one record's s; the paper) or "record" (a whole record).
    calibration : "auto" (default), "rdp", "pld" or "paper". ``"rdp"``: the numeric accountant (the
        exact Gaussian account for shuffled epochs, full and public batches, RDP for hidden ones).
        ``"pld"`` (hidden batches of ``protect="record"`` only): the privacy-loss distribution of
        the rounds' dominating pair composed with everything the silo's ledger holds, about half
        the RDP noise for fixed-size batches; the run is charged in full when it is planned (a
        run that stops early has paid every planned round). ``"auto"``: ``"pld"`` where it
        applies, else ``"rdp"``. ``"paper"``: the paper's closed form (its rounds past the
        budget are refused, so training may stop early — warned).
    p_s : group proportions of the ψ-term. Public proportions (an array of k, or classes × k for
        equalized odds, or a mapping group → proportion, keyed by the groups' values or, for a
        Federation that holds codes (``pfair.datasets.load_csv``), by their names in
        ``group_names``); ``"dp"`` (each silo releases a DP
        histogram of s, charged to its ledger; the default when ``epsilon`` is set); ``"pooled"``
        (exact proportions of the pooled data: the paper's assumption, NOT covered by the
        guarantee, warned; the default of a non-private fit).
    p_s_epsilon_share : with ``p_s="dp"``, the fraction of each silo's ε the histogram uses alone;
        the training noise is calibrated to the composition of both.
    output : "last" or "random" (the paper's uniformly random iterate).
    silo_weights : "uniform" (the paper's 1/N) or "size" (n_j / n).
    positive_class : the positive label of equal opportunity and false-positive-rate parity: an int is a
        class index into ``classes_`` (the sorted labels; default 1), any other value the label
        itself (``positive_class="approved"``). With labels that are not 0 and 1, an index is warned
        about, naming the label it picks.
    mode : "standard", "divisions", "central_sensitive" or "hybrid": the topology, i.e. who holds s
        (see :mod:`pfair.protocol.topologies`; the hybrid topologies need ``protect="attribute"``;
        they hold out ``validation_share``, release checkpoints and take ``max_violation`` as the
        standard topology does, resume and warm-start; in process only, not over Flower).
        ``mode`` means the topology only: what is protected is ``protect=``, and how the noise is
        calibrated ``calibration=`` (docs/architecture.md, "Glossary").
    amplification, dummy_noise : hybrid topologies only: account with the chance that a record is not
        in a round's batch (the public-batch bound; the batch itself is never assumed secret), and
        let sensitive silos that hold no record of a round's batch send zero-mean noise.
    seed : int, seeds what is public anyway: the batch order in attribute mode with shuffled
        epochs or the full batch (and in a non-private fit), and the random iterate. A private
        fit's batches drawn without replacement or by Poisson sampling come from the secret key
        instead (their account averages over the draw, which a known seed would fix in advance).
        The noise never depends on it.
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
    max_violation : float in (0, 1) or None. A fairness target t instead of a raw λ (then leave
        ``lam`` at its default): the fit returns the most accurate checkpoint model whose released
        violation is at most t with one standard deviation of its noise to spare (v̂ + sd ≤ t; sd = 0
        where the release is exact; ``checkpoints_``) (the metric v of ``fairness``:
        :func:`pfair.metrics.demographic_parity_difference` for ``"demographic_parity"``,
        :func:`~pfair.metrics.equalized_odds_difference` for ``"equalized_odds"``,
        :func:`~pfair.metrics.equal_opportunity_difference` of the positive class for
        ``"equal_opportunity"``, :func:`~pfair.metrics.false_positive_rate_difference` of the
        positive class for ``"false_positive_rate_parity"``, each with its defaults;
        :attr:`pfair.notions.FairnessNotion.metric_name`), and warns, returning the fairest model
        still clearly better than the constant predictor, when none meets t. λ starts at 0 and is
        adapted at every checkpoint by projected dual ascent towards 0.85·t (capped at 100), and
        halved whenever the model is not clearly better than the constant predictor on the held-out
        records, so it never pushes the model into inversion. v̂ is the violation of the model on
        all the silos' records: exact when non-private; in a private fit each silo releases its
        histogram of (block, s, prediction) with Gaussian noise (L2 sensitivity √2 under replace-one
        of s or of a whole record), charged to its ledger (:mod:`pfair.fairness_target`,
        ``docs/privacy.md``). The linear model in every topology (in the hybrid ones each
        sensitive silo releases the histogram of its records), ``DeepSteFFLe`` and the Flower
        deployment.
    max_violation_epsilon_share : the fraction of each silo's ε that the checkpoints' violation
        releases use alone; the training noise is calibrated to the composition of everything.
    lam_lr : η_λ, the dual step size of ``max_violation`` per epoch.
    validation_share : float in [0, 0.5), default 0.1. The share of each silo's records held out
        of training (positions drawn from the public ``seed``; :mod:`pfair.validation`). After each
        checkpoint every silo releases the table of its held-out records by label and prediction:
        exact and free with ``protect="attribute"`` (it reads x and y only), a Gaussian release of
        sensitivity √2 charged to its ledger with ``protect="record"``. From these the fit knows
        the validation error of every checkpoint model and of the constant predictor, and returns
        the last model unless it is not clearly better than the constant predictor (then the best
        checkpoint, warned). 0: nothing held out; the tables then count the training records. In the
        hybrid topologies the non-sensitive silos hold records out and release the (exact) tables;
        there ``validation_share=0`` without ``max_violation`` means no checkpoints at all.
    checkpoints : "auto" or int. How many times the silos release these figures: ``"auto"`` is
        after every epoch where that is free (non-private, or attribute mode without a target),
        else 8 evenly spaced epochs with a target and 2 (the middle and the last) without; the last
        epoch is always one.
    validation_epsilon_share : with ``protect="record"``, the fraction of each silo's ε that the
        validation tables use alone (default 0.2: priced alone; composed with the rounds, whose
        Gaussian noise adds in quadrature, they cost the training far less).

    Features: the step sizes and clip norms assume standardised features. A column with |mean| or
    std above 10 (``pfair._fit.FEATURE_SCALE_LIMIT``: training diverges), or one that is not a 0/1
    indicator with std outside [0.5, 5] or |mean| above 2 (``FEATURE_STD_RANGE``,
    ``FEATURE_MEAN_LIMIT``: training is slow, and a default run may end at the constant
    predictor), makes ``fit`` on arrays standardise the features with the training data's mean and
    std (indicators as they are) when ``protect="attribute"`` or ``epsilon=None`` (warned; the
    fitted ``coef_``/``intercept_`` are in the original units, ``feature_scaling_`` holds the
    statistics). In a private ``protect="record"`` fit, where those statistics would be an
    unprotected release about the records, and for a ``Federation``, a column above 10 is refused
    with the fix (``make_pipeline(StandardScaler(), SteFFLe(...))``) and the others are warned about.

    A scikit-learn classifier: it works in ``Pipeline``, ``cross_val_score`` and ``GridSearchCV``
    with metadata routing of ``sensitive_features`` and ``silos`` (``docs/sklearn.md``, which also
    explains why cross-validating a private model multiplies its privacy cost).

    Attributes
    ----------
    theta_, coef_, intercept_, W_, classes_, groups_, n_features_in_
    feature_names_in_ : column names, when fitted on a DataFrame
    history_ : DataFrame, one row per epoch. A private fit records released values only: the step
        size, how many silos answered, the norms of θ, W and of the update, and metrics on
        ``eval_set`` (data the caller holds, not the silos'). Non-private fits and
        ``exact_diagnostics=True`` add the batch loss, ψ, clip counts and training-set metrics.
        Metric columns are ``<split>_loss``, ``<split>_error``,
        ``<split>_demographic_parity_difference`` and ``<split>_equalized_odds_difference``
        (:mod:`pfair.metrics`), ``<split>`` being ``train`` or ``test`` (``eval_set``).
    privacy_report_ : :class:`~pfair.privacy.report.PrivacyReport` (a DataFrame that prints in full;
        ``.explain()`` says what each column means), one row per silo (σ's, noise multiplier, steps, ε spent over all its
        fits, δ, where p_s came from, whether the noise is secret).
    lam_ : λ of the returned model's epoch (the fixed ``lam``, or where ``max_violation`` took it).
        With ``max_violation``, ``history_`` has columns ``lam`` (λ of each epoch) and
        ``violation_released`` (the v̂ the server computed after a checkpoint: from noisy releases
        in a private fit, exact otherwise; NaN between checkpoints).
    checkpoints_ : DataFrame, one row per checkpoint (index: epoch, 1-based): the released
        ``validation_error``, ``constant_error`` (the constant predictor's), ``margin`` (how much
        lower the error must be to count as clearly better), ``clearly_better``, and with a target
        ``violation_released``, ``violation_sd`` (the standard deviation of its noise; 0 where it is
        exact), ``meets_target`` (``violation_released + violation_sd <= max_violation``: a checkpoint
        meets the target with one sd to spare, so that the one picked for its low noisy figure is not
        one above it) and ``lam``; ``history_`` holds the figures per epoch.
    selected_epoch_ : the epoch (1-based) of the checkpoint model the fit returned; 0 for the
        constant predictor (zero weights, the intercepts of the held-out class shares), which a fit
        at a fixed ``lam > 0`` returns when its last model is shown no better than it, and any fit
        without a target when even its most accurate checkpoint is shown worse than it (warned).
    ledgers_ : list of per-silo :class:`pfair.privacy.PrivacyLedger` (persistent; save them with
        ``ledger.save(path)`` and pass them back with ``fit(..., ledgers=[...])``).
    """

    def __init__(
        self,
        *,
        fairness: str = "demographic_parity",
        lam: float = 1.0,
        epsilon: float | None = 1.0,
        delta: float | None = None,
        epochs: int = 20,
        batch_size: int | str = "auto",
        lr_theta: float = 0.5,
        lr_w: float = 0.5,
        w_radius: float | None = 2.0,
        clip: float | str | None = "auto",
        clip_loss: float | str | None = "auto",
        clip_w: float | str | None = "auto",
        sampling: str = "auto",
        protect: str = "attribute",
        calibration: str = "auto",
        p_s: Any = None,
        p_s_epsilon_share: float = 0.1,
        lr_decay: float | str = "auto",
        decay_every: int | str = "auto",
        w_step: str = "normalised",
        theta_step: str = "scaled",
        theta_subspace: int | None = None,
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
        max_violation: float | None = None,
        max_violation_epsilon_share: float = 0.5,
        lam_lr: float = 10.0,
        validation_share: float = 0.1,
        checkpoints: int | str = "auto",
        validation_epsilon_share: float = 0.2,
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
        self.theta_step = theta_step
        self.theta_subspace = theta_subspace
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
        self.max_violation = max_violation
        self.max_violation_epsilon_share = max_violation_epsilon_share
        self.lam_lr = lam_lr
        self.validation_share = validation_share
        self.checkpoints = checkpoints
        self.validation_epsilon_share = validation_epsilon_share

    _checks_feature_scale = True

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        # Private noise comes from the operating system unless noise_seed is set.
        tags.non_deterministic = self.epsilon is not None and self.noise_seed is None
        return tags

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
        **unsupported: Any,
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
        ledgers; by default the ledgers the interrupted fit charged) where the ledgers say it
        stopped, in every topology; no round is charged twice, and ledgers that did not record the
        interrupted run are refused.

        ``sensitive_features`` is required when ``lam > 0`` (a clear ``ValueError`` otherwise).
        With ``lam=0`` it may be omitted: nothing sent depends on s, so the fit is plain federated
        (private) logistic/softmax regression and ``history_`` has no fairness columns. This is
        what scikit-learn's generic checks and a plain ``fit(X, y)`` can exercise.

        ``silos`` is one silo id per record, or a list of index arrays (one per silo, together
        every row exactly once).

        ``sample_weight`` is refused with a ``TypeError`` that says why: each record's contribution
        is clipped to one norm and the noise is calibrated to what one record can change, so a
        weight would change the sensitivity the guarantee rests on (see
        :func:`pfair._fit.refuse_fit_arguments`).

        In scikit-learn tools (``Pipeline``, ``cross_val_score``, ``GridSearchCV``) route the
        sensitive attribute (and silo ids) with metadata routing::

            sklearn.set_config(enable_metadata_routing=True)
            est = SteFFLe(...).set_fit_request(sensitive_features=True, silos=True)
            cross_val_score(est, X, y, params={"sensitive_features": s, "silos": ids})

        Privacy of cross-validation: every fit on arrays builds a new Federation with new ledgers,
        so each of the ``cv × candidates (+ refit)`` fits spends each silo's full ε on records the
        other fits also use. The real cost of a grid search on the same records is the *sum* of
        the fits' ε (basic composition), not the ε of one fit. Ledgers cannot see this (every fit
        starts from fresh ones); a private fit on arrays inside ``sklearn.model_selection`` raises a
        ``PrivacyWarning`` (folds fitted by hand in a loop are not detected). Tune hyper-parameters on public or synthetic data, or budget
        ``epsilon / n_fits`` per fit, or fit on one Federation so its ledgers refuse what is over
        budget."""
        refuse_fit_arguments(type(self).__name__, unsupported)
        st = self.settings()
        fed = self._federation(X, y, sensitive_features, silos, st)
        st = self._settings_for_data(st, fed)
        if st.mode == "hybrid" and sensitive_silos is None:
            raise ValueError("mode='hybrid' needs sensitive_silos= (the sensitive silo of each record)")
        self._check_privacy(st, fed, X)
        self._adopt_encodings(fed)
        on_epoch = self._on_epoch(st, fed, eval_set)
        previous = self._resume_state(st, resume)
        state, plans = self._run(st, fed, ledgers=ledgers, on_epoch=on_epoch, previous=previous,
                                 init=self._warm_start_model(st, previous), sensitive_silos=sensitive_silos)
        self._adopt(state, plans, st, fed.n_groups, fed.n_classes)
        return self

    def _set_theta(self, theta: np.ndarray) -> None:
        # The epoch's θ is that of the standardised features when fit standardised them: theta_ is
        # kept in the original units, so a fit interrupted after this epoch predicts on X as given.
        self.theta_ = self._fold_scaling(np.asarray(theta, dtype=np.float64))

    def _history_proba(self, X: Any) -> np.ndarray:
        # X is scaled as in training (the silos' records, eval_set standardised by _on_epoch).
        return _core.predict_proba(as_features(X), self._fold_scaling(self.theta_, inverse=True), len(self.classes_))


#: scikit-learn checks (``sklearn.utils.estimator_checks``) that call ``fit(X, y)`` and so cannot
#: pass for an estimator that needs ``sensitive_features`` (SteFFLe with ``lam > 0``, PFLD with
#: ``lam_max > 0``, SingleShotSyntheticFL): the generic checks have no way to pass a sensitive
#: attribute, and inventing one would hide a missing argument. Each raises the ``ValueError`` that
#: names ``sensitive_features`` and the routing fix. With ``lam=0`` (``lam_max=0``) the fit does
#: not need s and every check passes (tests/test_sklearn.py).
NEEDS_SENSITIVE_FEATURES = (
    "check_classifier_data_not_an_array", "check_classifiers_classes", "check_classifiers_one_label",
    "check_classifiers_train", "check_decision_proba_consistency", "check_dict_unchanged",
    "check_dont_overwrite_parameters", "check_dtype_object", "check_estimators_dtypes",
    "check_estimators_fit_returns_self", "check_estimators_nan_inf", "check_estimators_overwrite_params",
    "check_estimators_pickle", "check_f_contiguous_array_estimator", "check_fit2d_1feature",
    "check_fit2d_1sample", "check_fit2d_predict1d", "check_fit_check_is_fitted", "check_fit_idempotent",
    "check_fit_score_takes_y", "check_methods_sample_order_invariance", "check_methods_subset_invariance",
    "check_n_features_in", "check_n_features_in_after_fitting", "check_pipeline_consistency",
    "check_positive_only_tag_during_fit", "check_readonly_memmap_input", "check_supervised_y_2d",
)


#: scikit-learn checks that fit on features of mean ~100 (``X + 100`` or a shifted blob): a private
#: SteFFLe with ``protect="record"`` refuses them (standardising inside the fit would release the
#: records' mean and std, which a record-level guarantee does not cover); every other SteFFLe
#: standardises them itself (docs/sklearn.md).
UNSCALED_FEATURES = ("check_fit_check_is_fitted", "check_fit_idempotent", "check_n_features_in")


def expected_failed_checks(estimator: Any) -> dict[str, str]:
    """The scikit-learn checks ``estimator`` is expected to fail, each with its reason, for
    ``check_estimator(est, expected_failed_checks=...)`` and ``parametrize_with_checks``.
    Empty when the estimator can fit without ``sensitive_features`` (``lam=0``, ``lam_max=0``,
    or an estimator that never uses s) and is not a private ``protect="record"`` SteFFLe."""
    params = estimator.get_params() if hasattr(estimator, "get_params") else {}
    needs_s = (params.get("lam", 0) > 0 or params.get("lam_max", 0) > 0
               or type(estimator).__name__ == "SingleShotSyntheticFL")
    failed: dict[str, str] = {}
    if (getattr(type(estimator), "_checks_feature_scale", False) and params.get("protect") == "record"
            and getattr(estimator, "epsilon", None) is not None):
        failed.update({name: (f"fits on features of mean ~100, which a private {type(estimator).__name__} with "
                              "protect='record' refuses: standardising inside the fit would release the records' "
                              "mean and std; fit raises a ValueError naming make_pipeline(StandardScaler(), ...)")
                       for name in UNSCALED_FEATURES})
    if not needs_s:
        return failed
    reason = (f"calls fit(X, y) without sensitive_features, which {type(estimator).__name__} needs to measure "
              "and penalise unfairness; fit raises a ValueError naming sensitive_features and metadata routing")
    return {**failed, **{name: reason for name in NEEDS_SENSITIVE_FEATURES}}
