"""The defaults chosen by pfair.experiments.defaults (docs/optimisation.md, section 4): at ε = 1
per silo, the default run is clearly better than the constant predictor and a larger λ buys a
lower demographic-parity violation. Reproducible noise (noise_seed) keeps it deterministic."""

import ast
import inspect
import json
import math
import re
import shlex
import warnings
from pathlib import Path

import numpy as np
import pytest

import pfair
from pfair import SteFFLe, metrics
from pfair.exceptions import ConvergenceWarning, NonPrivateFitWarning
from pfair.settings import (AUTO_BATCH_NONPRIVATE, AUTO_BATCH_PRIVATE, AUTO_BATCH_RECORD, AUTO_RUN_BATCH,
                            LAMBDA_STRETCH_CAP, LAMBDA_STRETCH_ROUNDS, MAX_EPOCHS, PRIVATE_DECAY, THETA_STEP_LAMBDA, SteFFLeSettings)

from support import toy_data

SEEDS = (0, 1, 2, 3, 4)


def fits(name, lam):
    data = pfair.datasets.load(name)
    silos = np.random.default_rng(0).integers(0, 3, size=data.X_train.shape[0])
    errors, violations = [], []
    for seed in SEEDS:
        model = pfair.SteFFLe(lam=lam, epsilon=1.0, seed=seed, noise_seed=3000 + seed, track_history=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pfair.exceptions.PrivacyWarning)
            warnings.simplefilter("error", ConvergenceWarning)
            # ... but a last model no better than the constant predictor is what the checkpoint guard
            # is for: it returns a better checkpoint (warned), which is what a user gets.
            warnings.simplefilter("ignore", pfair.exceptions.NotBetterThanConstantWarning)
            model.fit(data.X_train, data.y_train, sensitive_features=data.s_train, silos=silos)
        pred = model.predict(data.X_test)
        errors.append(np.mean(pred != data.y_test))
        violations.append(metrics.demographic_parity_difference(data.y_test, pred, sensitive_features=data.s_test))
    return float(np.mean(errors)), float(np.mean(violations)), metrics.trivial_error(data.y_test)


# (data set, a large λ, the violation ratio it must reach): measured over the five seeds used
# here at the defaults of the protocol's final pass, 0.0425 / 0.1725 on Adult at λ = 16 (error
# 0.2164, the bound 0.9 · 0.2479 = 0.223: λ = 16 is past the protocol's largest scored λ, 8) and
# 0.1418 / 0.2314 on COMPAS at λ = 8 (0.61; error 0.3698). At the former defaults: 0.0166 / 0.1847
# and 0.168 / 0.213.
@pytest.mark.slow
@pytest.mark.parametrize("name,high_lam,ratio", [("adult", 16.0, 0.5), ("compas", 8.0, 0.9)])
def test_default_private_run_beats_the_constant_predictor_and_lambda_buys_fairness(name, high_lam, ratio):
    err0, viol0, trivial = fits(name, 0.0)
    err1, viol1, _ = fits(name, pfair.SteFFLe().lam)  # the default λ
    err_hi, viol_hi, _ = fits(name, high_lam)
    # Clearly better than predicting the majority class for everyone (which has violation 0).
    assert err1 < 0.8 * trivial
    assert err_hi < 0.9 * trivial
    # The violation falls as λ grows (means over five noise seeds).
    assert viol1 < viol0
    assert viol_hi < ratio * viol0


def test_auto_batch_is_capped_by_the_smallest_silo_and_depends_on_whether_the_rounds_carry_noise():
    private, free, record = AUTO_BATCH_PRIVATE, AUTO_BATCH_NONPRIVATE, AUTO_BATCH_RECORD
    assert private != free  # the protocol chose them apart (docs/optimisation.md, section 4)
    st = pfair.SteFFLe().settings()  # ε = 1, λ = 1: noisy rounds
    assert st.batch_size == "auto" and st.noisy_rounds
    assert st.for_sizes([10**6, 10**6]).batch_size == private
    assert st.for_sizes([10**6, 250]).batch_size == min(private, 250)  # a small silo runs full-batch rounds
    # No noise in the rounds: epsilon=None, or λ = 0 in attribute mode (nothing sent depends on s).
    for params in (dict(epsilon=None), dict(epsilon=None, lam=0.0), dict(lam=0.0), dict(epsilon=None, protect="record")):
        st = pfair.SteFFLe(**params).settings()
        assert not st.noisy_rounds, params
        assert st.for_sizes([10**6]).batch_size == free, params
    # A fairness target raises λ from 0, so its rounds carry noise: it runs the private run a fixed
    # λ > 0 runs, stretched to its batch, with the adaptive clip and the private decay
    # (docs/optimisation/target_defaults.py).
    target = pfair.SteFFLe(max_violation=0.05, lam=1.0).settings()
    fixed = pfair.SteFFLe(lam=8.0).settings()
    for sizes in ([10**6], [10176], [800]):
        t, f = target.for_sizes(sizes), fixed.for_sizes(sizes)
        assert (t.batch_size, t.lr_theta, t.epochs, t.decay_every) == (f.batch_size, f.lr_theta, f.epochs, f.decay_every)
    assert target.for_sizes([10**6]).batch_size == private and target.clip == "adaptive"
    assert (target.lr_decay, target.decay_every) == (PRIVATE_DECAY, 5)
    assert target.for_sizes([800]).batch_size == 800 and target.for_sizes([800]).lr_theta == target.lr_theta
    # A batch the user chose keeps the step as given; a non-private target takes the plain defaults.
    assert pfair.SteFFLe(max_violation=0.05, batch_size=512).settings().for_sizes([10**6]).lr_theta == target.lr_theta
    free_target = pfair.SteFFLe(max_violation=0.05, epsilon=None).settings().for_sizes([10**6])
    assert (free_target.batch_size, free_target.lr_theta) == (free, target.lr_theta)
    # Record mode noises every round.
    assert pfair.SteFFLe(protect="record").settings().for_sizes([10**6]).batch_size == record
    assert pfair.SteFFLe(protect="record", lam=0.0).settings().for_sizes([10**6]).batch_size == record
    assert pfair.SteFFLe(batch_size=64).settings().for_sizes([20000]).batch_size == 64
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1 or 'auto'"):
        pfair.SteFFLe(batch_size="large").settings()
    # A fit resolves it from the public silo sizes: 3 silos of 250 German records train on 225 each
    # (a tenth held out for validation), 1 round/epoch.
    data = pfair.datasets.load("german")
    model = pfair.SteFFLe(epochs=2).fit(data.X_train, data.y_train, sensitive_features=data.s_train,
                                        silos=np.arange(data.X_train.shape[0]) % 3)
    assert model.privacy_report_["denominator"].eq(225).all()


# ------------------------------------------------------------------ one source of truth

#: SteFFLe's settings that every entry point must take from it.
KNOBS = ("epochs", "batch_size", "lr_theta", "lr_w", "w_radius")
ROOT = Path(__file__).resolve().parents[1]


def _defaults():
    d = SteFFLeSettings()
    return {k: getattr(d, k) for k in KNOBS}


def test_the_estimator_and_its_frozen_settings_have_the_same_defaults():
    from dataclasses import fields

    sig = inspect.signature(pfair.SteFFLe.__init__).parameters
    # epsilon differs on purpose: the estimator is private by default (1.0); the frozen settings
    # are always built from an estimator's parameters (from_estimator_params).
    shared = [f for f in fields(SteFFLeSettings) if f.name in sig and f.name != "epsilon"]
    assert {f.name for f in shared} >= set(KNOBS)
    assert {f.name: sig[f.name].default for f in shared} == {f.name: f.default for f in shared}


def test_the_defaults_are_what_the_protocol_selected_from_its_runs():
    """pfair.settings against pfair.experiments.defaults' selection, recomputed from the runs
    committed in docs/optimisation/defaults_runs.csv (a re-run that changes the selection must
    change the defaults, and the other way round)."""
    import pandas as pd

    from pfair.experiments import defaults as protocol
    from pfair.settings import PRIVATE_CLIPS

    chosen = protocol.selected(pd.read_csv(ROOT / "docs" / "optimisation" / "defaults_runs.csv"))
    d = SteFFLeSettings()
    # The private regime's batch is the one its lr_theta, epochs and decay are stated for; the cap
    # above it stretches the run (next test).
    for regime, cap in (("private", AUTO_RUN_BATCH), ("non-private", AUTO_BATCH_NONPRIVATE)):
        cfg = chosen[regime]
        assert cfg["batch_size"] == cap, regime
        assert (cfg["lr_theta"], cfg["epochs"], cfg["lr_w"], cfg["w_radius"]) == (d.lr_theta, d.epochs, d.lr_w,
                                                                                  d.w_radius), regime
        assert cfg["clip"] == PRIVATE_CLIPS["clip"]



def test_the_private_cap_is_the_run_length_the_validation_splits_chose():
    """AUTO_BATCH_PRIVATE against docs/optimisation/run_length.py's runs (run_length.csv): the cap
    whose stretched run scores best on the validation splits, mean over data sets (a re-run that
    changes the choice must change the default)."""
    import pandas as pd

    runs = pd.read_csv(ROOT / "docs" / "optimisation" / "run_length.csv")
    runs["score"] = runs["val_error"] / runs["trivial"] + runs["val_dp"]
    per = runs.groupby(["cap", "data"])["score"].mean().groupby("cap").mean()
    assert int(per.idxmin()) == AUTO_BATCH_PRIVATE and AUTO_RUN_BATCH in per.index
    # The runs are what the rule resolves to: the step, epochs and decay times m / AUTO_RUN_BATCH.
    k = runs["batch_size"].clip(lower=AUTO_RUN_BATCH) / AUTO_RUN_BATCH
    assert np.allclose(runs["lr_theta"], 0.5 * k) and (runs["epochs"] == np.ceil(20 * k - 1e-9)).all()


def test_the_rounds_floor_of_an_epoch_is_the_one_its_runs_chose():
    """ROUNDS_PER_EPOCH_FLOOR against docs/optimisation/small_silos.py's printout: the smallest floor
    measured whose German and Bank λ = 0 runs both end within 0.01 of logistic regression's training
    loss (the runs before it, 20 and 80 rounds, ended 0.06 and 0.02 above). And docs/optimisation/rounds_floor.py's runs
    (rounds_floor.csv), floors on a whole run scored on the protocol's validation splits, show none
    better or worse than no floor by more than its standard error over the tables: the score does
    not speak against a longer noise-free run. The page quotes both printouts."""
    import pandas as pd

    from pfair.settings import ROUNDS_PER_EPOCH_FLOOR

    log = (ROOT / "docs" / "optimisation" / "small_silos_log.txt").read_text().splitlines()
    gaps: dict[int, float] = {}  # the larger of the two tables' gaps to logistic regression, per floor
    for table, before in (("german", 0.05), ("bank", 0.015)):
        rows = [line.split("|")[1:-1] for line in log if line.startswith(f"| {table} |")]
        reference = float(next(row[-2] for row in rows if "logistic regression" in row[3]))
        for row in rows:
            rule = row[3].strip()
            floor = 1 if rule.startswith("none") else int(rule.split()[2]) if rule.startswith("F = ") else None
            if floor is not None:
                gap = float(row[-2]) - reference
                assert floor != 1 or gap > before, table
                gaps[floor] = max(gaps.get(floor, 0.0), gap)
    assert min(f for f, gap in gaps.items() if gap < 0.01) == ROUNDS_PER_EPOCH_FLOOR
    assert f"F = {ROUNDS_PER_EPOCH_FLOOR} (today)" in "\n".join(log)
    runs = pd.read_csv(ROOT / "docs" / "optimisation" / "rounds_floor.csv")
    runs["score"] = runs["val_error"] / runs["trivial"] + runs["val_dp"]
    per = runs.groupby(["floor", "data"])["score"].mean().unstack("data")
    diff = per.sub(per.loc[0], axis=1)
    se = diff.std(axis=1, ddof=1) / np.sqrt(diff.shape[1])
    assert (diff.mean(axis=1).abs() <= se + 1e-12).all() and len(per) == 4 and per.shape[1] >= 10
    d = SteFFLeSettings(epsilon=None)
    k = runs["epochs"] // d.epochs
    assert (runs["epochs"] == k * d.epochs).all() and (runs["decay_every"] == k * d.decay_every).all()
    assert (runs.loc[runs["floor"] == 0, "epochs"] == d.epochs).all() and (runs["lr_theta"] == d.lr_theta).all()
    assert (k > 1).any()
    page = (ROOT / "docs" / "optimisation.md").read_text()
    for name, source in (("rounds-floor", "rounds_floor"), ("rounds-floor-lam", "rounds_floor"),
                         ("small-silos", "small_silos")):
        log = (ROOT / "docs" / "optimisation" / f"{source}_log.txt").read_text().splitlines()
        body = page.split(f"<!-- generated:{name} -->\n", 1)[1].split(f"<!-- /generated:{name} -->", 1)[0]
        rows = [line for line in body.splitlines() if line.startswith("|")]
        assert rows and all(line in log for line in rows), name


def test_the_targets_dual_step_is_the_one_the_held_out_settings_kept():
    """``lam_lr`` against docs/optimisation/target_dual_step.py's runs: a larger dual step meets
    more non-private targets on the acceptance's tables, but at ε = 1 it meets fewer and on the six
    settings the acceptance does not use it lies below the mixing line less often, so the default
    stays 10, the step of the acceptance's own target runs (target_runs_before_floor.csv, made at the
    default when the candidates' runs were: before a noise-free run on small silos took the rounds of
    16 an epoch);
    the page quotes the printout. A re-run where a larger step also wins on the held-out settings
    and at ε = 1 must change the default."""
    import pandas as pd

    opt = ROOT / "docs" / "optimisation"
    default = SteFFLeSettings().lam_lr

    def below(runs: pd.DataFrame) -> int:
        return int((runs["below_line"] > 0).sum())

    def met(runs: pd.DataFrame) -> int:
        return int((runs["violation"] <= runs["target"] + np.maximum(0.02, 2 * runs["test_sd"])).sum())

    base = pd.read_csv(opt / "target_runs_before_floor.csv")
    base["epsilon"] = base["epsilon"].astype(str)
    assert len(base) == 324 and default == 10.0
    private_30 = pd.read_csv(opt / "target_runs_private_lam_lr_30.csv")
    held = pd.read_csv(opt / "target_heldout.csv")
    assert sorted(held["lam_lr"].unique()) == [default, 30.0] and held["table"].nunique() == 6
    assert met(private_30) < met(base[base["epsilon"] != "none"])
    assert below(held[held["lam_lr"] == 30.0]) < below(held[held["lam_lr"] == default])
    assert met(pd.read_csv(opt / "target_runs_lam_lr_30.csv")) > met(base[base["epsilon"] == "none"])
    log = (opt / "target_dual_step_log.txt").read_text().splitlines()
    page = (ROOT / "docs" / "optimisation.md").read_text()
    for name in ("target-dual-step", "target-dual-step-heldout"):
        body = page.split(f"<!-- generated:{name} -->\n", 1)[1].split(f"<!-- /generated:{name} -->", 1)[0]
        rows = [line for line in body.splitlines() if line.startswith("|")]
        assert rows and all(line in log for line in rows), name


def test_the_adaptive_clip_quantile_is_the_one_the_acceptance_runs_chose():
    """ADAPTIVE_CLIP_QUANTILE against docs/optimisation/clip_quantile.py's runs: among the measured
    quantiles (clip_quantile.csv, and the default's own runs in convergence_runs.csv), the one whose
    private fits lie below their mixing line in ≥ 5 of 6 fits at the most (table, λ), ties broken by
    the mean margin (a re-run that changes the choice must change the default); and the default's
    runs are the adaptive clip's (their settings say so)."""
    from support import load_script

    from pfair.settings import ADAPTIVE_CLIP_QUANTILE

    script = load_script("docs/optimisation/clip_quantile.py")
    import pandas as pd

    nonprivate = script.cv.reference_nonprivate()  # the non-private fits it was chosen against
    nonprivate = nonprivate[nonprivate.table.isin(script.TABLES)]
    scores = {}
    for label, private in script.rules().items():
        if not label.startswith("q = ") or "largest" in label:
            continue
        q = float(label.split()[2])
        private = private[private.table.isin(script.TABLES)].assign(epsilon="1")
        crit = script.cv.criteria(pd.concat([nonprivate, private]), pd.DataFrame(columns=["table", "fairness"]))
        scores[q] = (int((crit["private"]["private_below"] >= 5).sum()), float(private[private.lam > 0]["below_line"].mean()))
    assert len(scores) >= 3 and max(scores, key=scores.get) == ADAPTIVE_CLIP_QUANTILE, scores


def test_the_acceptance_reads_older_runs_with_the_model_todays_guard_returns():
    """convergence.todays_guard: a fit at a fixed λ > 0 warned that its last model is no better than
    the constant (the guard then handed back an early epoch) now returns the constant predictor;
    fits at λ = 0, unwarned ones and those already read that way stay as they are."""
    from support import load_script

    import pandas as pd

    cv = load_script("docs/optimisation/convergence.py")
    runs = pd.DataFrame({"lam": [0.0, 8.0, 8.0, 8.0, 8.0],
                         "warned": ["NotBetterThanConstantWarning", "NotBetterThanConstantWarning", None,
                                    "ConvergenceWarning", "NotBetterThanConstantWarning"],
                         "selected": [3, 1, 20, 20, 0], "epochs": [20] * 5,
                         "error": [0.10, 0.11, 0.20, 0.30, 0.25], "constant_error": [0.25] * 5,
                         "violation": [0.5, 0.6, 0.1, 0.2, 0.0], "below_line": [0.0, 0.001, 0.05, -0.04, 0.0]})
    got = cv.todays_guard(runs)
    assert got["selected"].tolist() == [3, 0, 20, 20, 0]
    assert got["error"].tolist() == [0.10, 0.25, 0.20, 0.30, 0.25]
    assert got["violation"].tolist() == [0.5, 0.0, 0.1, 0.2, 0.0]
    assert got["below_line"].tolist() == [0.0, 0.0, 0.05, -0.04, 0.0]
    assert cv.returned_constant(got).tolist() == [False, True, False, False, True]
    assert runs["selected"].tolist() == [3, 1, 20, 20, 0]  # a copy


def test_the_private_decay_is_the_one_the_acceptance_runs_chose():
    """PRIVATE_DECAY and PRIVATE_DECAY_PERIODS against docs/optimisation/private_decay.py's runs:
    among the decays whose private fits settle in ≥ 95 % of the acceptance's fits (its criterion),
    the one below the mixing line in ≥ 5 of 6 fits at the most (table, λ) (every CSV read with the
    model today's guard returns: convergence.load_runs), ties broken by the mean margin (a re-run
    that changes the choice must change the default)."""
    from support import load_script

    import pandas as pd

    from pfair.settings import PRIVATE_DECAY, PRIVATE_DECAY_PERIODS

    script = load_script("docs/optimisation/private_decay.py")
    today = script.cv.load_runs(ROOT / "docs" / "optimisation" / "convergence_runs.csv")
    nonprivate = script.cv.reference_nonprivate()  # the non-private fits it was chosen against
    scores = {}
    for factor, periods in [*script.CANDIDATES, (PRIVATE_DECAY, PRIVATE_DECAY_PERIODS)]:
        if (factor, periods) in ((0.6, 4), (0.5, 2)):
            continue  # run before the rule, with their decay on the λ = 0 fits too: another line
        private = (today[today["epsilon"] == "1"] if (factor, periods) == (PRIVATE_DECAY, PRIVATE_DECAY_PERIODS)
                   else script.cv.load_runs(script.path_of(factor, periods)))
        if (private["spread5"] <= 0.02).mean() < 0.95:
            continue
        crit = script.cv.criteria(pd.concat([nonprivate, private]), pd.DataFrame(columns=["table", "fairness"]))
        scores[(factor, periods)] = (int((crit["private"]["private_below"] >= 5).sum()),
                                     float(private[private.lam > 0]["below_line"].mean()))
    assert len(scores) >= 3 and max(scores, key=scores.get) == (PRIVATE_DECAY, PRIVATE_DECAY_PERIODS), scores


def test_auto_batch_stretches_a_private_attribute_mode_run_to_its_batch():
    st = pfair.SteFFLe().settings()  # ε = 1, λ = 1, attribute mode: noisy rounds
    assert st.stretches_run and pfair.SteFFLe(max_violation=0.05).settings().stretches_run  # a target too
    big = st.for_sizes([10**6, 10**6])
    k = AUTO_BATCH_PRIVATE / AUTO_RUN_BATCH
    assert (big.batch_size, big.lr_theta, big.epochs, big.decay_every) == (
        AUTO_BATCH_PRIVATE, st.lr_theta * k, st.epochs * k, st.decay_every * k)
    # Between the two batches: k = m / 1024, epochs and decay rounded up; at or below 1,024 nothing moves.
    mid = st.for_sizes([3000, 10**6])
    assert (mid.batch_size, mid.epochs, mid.decay_every) == (3000, 59, 15)  # every quarter of the epochs
    assert mid.lr_theta == pytest.approx(st.lr_theta * 3000 / 1024)
    small = st.for_sizes([800])
    assert (small.batch_size, small.lr_theta, small.epochs, small.decay_every) == (800, st.lr_theta, st.epochs,
                                                                                   st.decay_every)
    # The epochs a user gives are stated for a batch of AUTO_RUN_BATCH, like the step.
    user = pfair.SteFFLe(epochs=5, lr_theta=0.25, decay_every=3).settings().for_sizes([10**6])
    assert (user.epochs, user.lr_theta, user.decay_every) == (5 * k, 0.25 * k, 3 * k)
    # Not stretched: a batch the user chose, no noise, record mode, the full batch.
    for params in (dict(batch_size=4096), dict(epsilon=None), dict(lam=0.0), dict(protect="record"),
                   dict(sampling="full_batch"), dict(max_violation=0.05, batch_size=4096)):
        other = pfair.SteFFLe(**params).settings()
        resolved = other.for_sizes([10**6])
        assert (resolved.epochs, resolved.decay_every) == (other.epochs, other.decay_every), params
    # A run the stretch would take past MAX_EPOCHS is refused, naming the fix.
    with pytest.raises(ValueError, match="epochs=20000 with batch_size='auto' is a run of 160,000 epochs"):
        pfair.SteFFLe(epochs=20000).settings().for_sizes([10**6])
    assert 20000 * k > MAX_EPOCHS
    # A fit reports the run it trained: 160 epochs of batches of 8,192 on Adult's silos.
    data = pfair.datasets.load("adult")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = pfair.SteFFLe(seed=0).fit(data.X_train, data.y_train, sensitive_features=data.s_train,
                                          silos=np.arange(data.X_train.shape[0]) % 3)
    assert len(model.history_) == 160 and model.checkpoints_.index.max() == 160
    assert model.privacy_report_["denominator"].eq(AUTO_BATCH_PRIVATE).all()


def test_auto_batch_stretches_a_noise_free_run_at_a_large_lambda_by_lambda_over_lambda_c():
    """A non-private fit at a fixed λ above λ_c takes k_λ = min(λ/λ_c, LAMBDA_STRETCH_CAP) times the
    epochs and decay period (step and batch unchanged); nothing else is stretched by λ."""
    base = pfair.SteFFLe(epsilon=None).settings().for_sizes([10**6])
    for lam, k in ((0.5, 1), (THETA_STEP_LAMBDA, 1), (3.0, 3), (8.0, 8), (2.5, 2.5), (40.0, LAMBDA_STRETCH_CAP),
                   (100.0, LAMBDA_STRETCH_CAP)):
        st = pfair.SteFFLe(epsilon=None, lam=lam).settings()
        assert st.lambda_stretch == k, lam
        got = st.for_sizes([10**6, 5000])
        assert (got.batch_size, got.lr_theta) == (AUTO_BATCH_NONPRIVATE, base.lr_theta), lam
        assert (got.epochs, got.decay_every) == (math.ceil(base.epochs * k), math.ceil(base.decay_every * k)), lam
    # Epochs a user gives are stated for λ ≤ λ_c, like the private run's for a batch of 1,024.
    user = pfair.SteFFLe(epsilon=None, lam=4.0, epochs=7, decay_every=3).settings().for_sizes([10**6])
    assert (user.epochs, user.decay_every) == (28, 12)
    # Not stretched by λ: noisy rounds (their rounds cost budget), a fairness target (λ moves), the
    # constant θ step, a batch the user chose.
    for params in (dict(epsilon=1.0, lam=8.0), dict(epsilon=None, max_violation=0.05),
                   dict(epsilon=None, lam=8.0, theta_step="constant"), dict(epsilon=None, lam=8.0, batch_size=256),
                   dict(epsilon=1.0, lam=8.0, protect="record")):
        st = pfair.SteFFLe(**params).settings()
        resolved = st.for_sizes([10**6])
        k = st.stretch(int(resolved.batch_size))  # the private run's batch stretch, where it applies
        assert st.lambda_stretch == 1.0, params
        want = (math.ceil(st.epochs * k), math.ceil(st.decay_every * k))
        assert (resolved.epochs, resolved.decay_every) == want, params
    # Past MAX_EPOCHS: refused, naming λ's stretch and the fix.
    with pytest.raises(ValueError, match=r"epochs=20000 with batch_size='auto' is a run of 200,000 epochs.*lam=40"):
        pfair.SteFFLe(epsilon=None, lam=40.0, epochs=20000).settings().for_sizes([10**6])


def test_the_noise_free_stretch_cap_is_the_one_its_runs_chose():
    """LAMBDA_STRETCH_CAP and LAMBDA_STRETCH_ROUNDS against docs/optimisation/lambda_stretch.py's runs.
    Among the measured variants (cap 1: the run before the rule; caps 10 and 100; cap 10 with 4,000 or
    8,000 rounds), the default's non-private acceptance fits match the most of fairlearn's front
    within 0.01 (a re-run that changes the choice must change the default); its rounds return the
    constant predictor less often than the cap alone, on the acceptance and on the small held-out
    tables, without more settings whose violation rises with λ there; and on the first held-out
    settings the cap leaves fewer rising settings than the short run."""
    import pandas as pd
    from support import load_script

    script = load_script("docs/optimisation/lambda_stretch.py")
    eg = pd.read_csv(script.cv.EG)
    default = f"{LAMBDA_STRETCH_CAP:g}, {LAMBDA_STRETCH_ROUNDS} rounds"
    assert script.VARIANTS[default][:2] == (LAMBDA_STRETCH_CAP, LAMBDA_STRETCH_ROUNDS)
    runs = {label: script.nonprivate(label) for label in script.VARIANTS}
    matched = {label: int((script.cv.criteria(r, eg)["front"]["gap"] <= 0.01).sum()) for label, r in runs.items()}
    assert matched[default] == max(matched.values()) and len(matched) == 5, matched
    constant = {label: int(script.cv.returned_constant(r).sum()) for label, r in runs.items()}
    cap_alone = f"{LAMBDA_STRETCH_CAP:g}"
    assert constant[default] < constant[cap_alone], constant
    small = pd.read_csv(script.SMALL_HELDOUT_RUNS)
    small_constant = small.groupby("rule")["selected"].apply(lambda v: int((v == 0).sum()))
    assert small_constant[default] < small_constant[cap_alone], small_constant
    small_rising = {rule: script.rising_count(g)[0] for rule, g in small.groupby("rule")}
    assert small_rising[default] <= small_rising[cap_alone], small_rising
    # The budget: the other one measured does no better on the small tables (fewer fits below their
    # line or more that return the constant predictor would be worse; either better would pick it).
    below = small[small["lam"] > 0].groupby("rule")["below_line"].apply(lambda v: int((v > 0).sum()))
    other = next(label for label in script.VARIANTS if label.startswith("10, ") and label != default)
    assert below[default] >= below[other] and small_constant[default] <= small_constant[other], (below, small_constant)
    rising = {cap: script.rising_count(g)[0] for cap, g in pd.read_csv(script.HELDOUT_RUNS).groupby("cap")}
    assert rising[LAMBDA_STRETCH_CAP] < rising[1.0], rising


def test_a_small_table_stretches_its_noise_free_run_up_to_the_rounds_budget():
    """k_λ = min(λ/λ_c, max(LAMBDA_STRETCH_CAP, LAMBDA_STRETCH_ROUNDS / (E·R))): a table whose run is
    few rounds (German's silos: one round an epoch, 20 rounds) takes the whole λ/λ_c until the run
    reaches the budget; a large one keeps the cap; a deployed party that does not know the silos'
    sizes keeps the cap too (a network's budget is in records: tests/test_torch.py)."""
    from pfair.settings import noise_free_stretch, rounds_per_epoch

    # room: how many times the run before the stretch fits in the budget (here LAMBDA_STRETCH_ROUNDS / E·R).
    assert noise_free_stretch(100.0, "scaled", 200.0) == 100.0 and noise_free_stretch(1000.0, "scaled", 200.0) == 200.0
    assert noise_free_stretch(100.0, "scaled", 50.0) == 50.0
    assert noise_free_stretch(100.0, "scaled", 5.0) == LAMBDA_STRETCH_CAP == noise_free_stretch(100.0, "scaled")
    assert noise_free_stretch(100.0, "constant", 200.0) == 1.0 and noise_free_stretch(0.5, "scaled", 200.0) == 1.0
    st = pfair.SteFFLe(epsilon=None, lam=100.0).settings()
    assert st.lambda_stretch_for(20) == 100.0 and st.lambda_stretch_for(80) == LAMBDA_STRETCH_ROUNDS / 80
    assert st.lambda_stretch_for(800) == LAMBDA_STRETCH_CAP == st.lambda_stretch_for(None) == st.lambda_stretch
    german = [225, 225, 225]  # training records a silo: batch 225, one round an epoch
    # λ = 8: the small silos' floor (16 rounds an epoch: 320 epochs) is larger than the λ stretch's 160.
    for lam, epochs in ((8.0, 320), (40.0, 800), (100.0, 2000), (150.0, 3000)):
        st = pfair.SteFFLe(epsilon=None, lam=lam).settings()
        got = st.for_sizes(german)
        assert got.batch_size == 225 and got.epochs == epochs, (lam, got.epochs)
        assert got.decay_every == math.ceil(10 * epochs / 20), lam
        assert got.epochs * rounds_per_epoch(got.sampling, german, got.batch_size) <= LAMBDA_STRETCH_ROUNDS, lam
        # Stand-in sizes (a deployed party): the cap alone.
        assert st.for_sizes([256], sizes_known=False).epochs == 20 * min(lam, LAMBDA_STRETCH_CAP), lam
    big = pfair.SteFFLe(epsilon=None, lam=100.0).settings().for_sizes([10_175] * 3)  # Adult's: 40 rounds an epoch
    assert big.epochs == 20 * LAMBDA_STRETCH_CAP
    # A full-batch round reads a whole silo: its run keeps the cap whatever the table's size.
    full = pfair.SteFFLe(epsilon=None, lam=100.0, sampling="full_batch").settings()
    assert full.for_sizes([10_175] * 3).epochs == full.for_sizes(german).epochs == 20 * LAMBDA_STRETCH_CAP
    # COMPAS's silos: 6 rounds an epoch, 120 a run: k_λ = 4000/120 = 33.3 at λ ≥ 33.3.
    compas = pfair.SteFFLe(epsilon=None, lam=100.0).settings().for_sizes([1384, 1383, 1383])
    assert compas.epochs == math.ceil(20 * LAMBDA_STRETCH_ROUNDS / 120)
    # The same through a deployed silo's reading of a run config (no sizes): the cap.
    from pfair.flower.policy import settings_from_run_config

    node = settings_from_run_config({"settings": {"epsilon": None, "lam": 100.0}})
    assert node.epochs == 20 * LAMBDA_STRETCH_CAP


def test_small_silos_give_a_noise_free_run_the_rounds_of_sixteen_an_epoch():
    """A run whose rounds carry no noise, with batch "auto", on silos of R < ROUNDS_PER_EPOCH_FLOOR
    rounds an epoch takes ROUNDS_PER_EPOCH_FLOOR / R times the epochs and decay period (the larger of
    that and the λ stretch); noisy rounds, a fairness target, a stated batch, a full batch and a
    deployed party's stand-in sizes keep the epochs given."""
    from pfair.settings import ROUNDS_PER_EPOCH_FLOOR, rounds_per_epoch

    assert ROUNDS_PER_EPOCH_FLOOR == 16
    german, compas, adult = [225] * 3, [1384, 1383, 1383], [10_175] * 3
    for lam in (0.0, 1.0):
        st = SteFFLe(epsilon=None, lam=lam).settings()
        got = st.for_sizes(german)
        assert (got.batch_size, got.epochs, got.decay_every) == (225, 320, 160)
        got = st.for_sizes(compas)  # 6 rounds an epoch: 16/6 times the epochs, rounded up
        assert rounds_per_epoch(got.sampling, compas, 256) == 6 and got.epochs == math.ceil(20 * 16 / 6)
        assert st.for_sizes(adult).epochs == 20  # 40 rounds an epoch
        assert st.for_sizes(german, sizes_known=False).epochs == 20
        # The epochs the user states are multiplied alike: they are stated for 16 rounds an epoch.
        assert SteFFLe(epsilon=None, lam=lam, epochs=4).settings().for_sizes(german).epochs == 64
        got = SteFFLe(epsilon=None, lam=lam, theta_step="constant").settings().for_sizes(compas)  # either θ step
        assert (got.epochs, got.decay_every) == (math.ceil(20 * 16 / 6), math.ceil(10 * 16 / 6))
    # A private λ = 0 fit in attribute mode sends nothing about s: its rounds are noise-free too.
    assert SteFFLe(epsilon=1.0, lam=0.0).settings().for_sizes(german).epochs == 320
    # Noisy rounds keep their epochs: record mode (even at λ = 0), a private λ > 0, a fairness target;
    # so do a stated batch and the full batch.
    for kept in (dict(epsilon=1.0, lam=0.0, protect="record"), dict(epsilon=1.0, lam=1.0),
                 dict(epsilon=None, lam=1.0, max_violation=0.05), dict(epsilon=1.0, lam=1.0, max_violation=0.05),
                 dict(epsilon=None, lam=1.0, batch_size=64), dict(epsilon=None, lam=1.0, sampling="full_batch")):
        st = SteFFLe(**kept).settings()
        assert st.for_sizes(german).epochs == 20, kept
    # Model selection's default grid carries the run's epochs at both of its batches.
    from pfair.model_selection import default_grid

    grid = default_grid(SteFFLe(epsilon=None, lam=0.0), [1384, 1383, 1383])  # training shares of 1,245
    assert grid["epochs"] == [math.ceil(20 * 16 / 5)] and grid["decay_every"] == [math.ceil(10 * 16 / 5)]
    # A run the floor pushes past MAX_EPOCHS is refused with the floor as the reason.
    with pytest.raises(ValueError, match="stated for silos of at least 16 rounds an epoch, and these make 1"):
        SteFFLe(epsilon=None, lam=0.0, epochs=MAX_EPOCHS // 16 + 1).settings().for_sizes([2, 2, 2])


def test_a_noise_free_fit_on_small_silos_trains_to_logistic_regression():
    """German (1,000 records, 57 features, three silos of 225 training records: one full-batch round an
    epoch): the λ = 0 fit of 20 rounds ended with a training loss 0.06 above logistic regression's
    (0.494 against 0.434); the run of 16 rounds an epoch is within 0.015 of it."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss

    data = pfair.datasets.load("german")
    fed = pfair.Federation.for_dataset(data, 3, heterogeneity=0.0, seed=0)
    reference = log_loss(data.y_train, LogisticRegression(C=1e4, max_iter=20_000).fit(
        data.X_train, data.y_train).predict_proba(data.X_train))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        floor = SteFFLe(epsilon=None, lam=0.0, p_s="pooled", seed=0).fit(fed)
        former = SteFFLe(epsilon=None, lam=0.0, p_s="pooled", seed=0, batch_size=225).fit(fed)
    assert len(floor.history_) == 320 and len(former.history_) == 20
    gap = log_loss(data.y_train, floor.predict_proba(data.X_train)) - reference
    assert 0 <= gap < 0.01, gap
    assert log_loss(data.y_train, former.predict_proba(data.X_train)) - reference > 0.04


def test_the_deep_theta_step_is_the_one_its_runs_chose():
    """DeepSteFFLe's θ step (SteFFLe's "scaled": DEEP_DEFAULTS does not override it) against
    docs/optimisation/deep_theta_step.py's runs at λ ≥ 3: the default run (non-private: stretched by
    λ; at ε = 1: as it is) lies further below its λ = 0 model's mixing line on average than the
    constant step, non-private and at ε = 1, settles (last five validation errors within 0.02) in at
    least 95 % of its non-private fits, and meets a fairness target at least as often. A re-run that
    turns any of these must change the default."""
    import pandas as pd

    from pfair.settings import DEEP_DEFAULTS

    assert "theta_step" not in DEEP_DEFAULTS and pfair.SteFFLe().theta_step == "scaled"
    runs = pd.read_csv(ROOT / "docs/optimisation/deep_theta_step.csv")
    runs = runs[runs["lam"] >= 3]
    private = runs["epsilon"].astype(str) != "none"
    default = runs[(runs["step"] == "scaled") & ((runs["k"] > 1) | private)]
    constant = runs[runs["step"] == "constant"]
    for name, want in (("non-private", ~private), ("ε = 1", private)):
        d, c = default[want.loc[default.index]], constant[want.loc[constant.index]]
        assert len(d) == len(c) == 48, name
        assert d["below_line"].mean() > c["below_line"].mean(), name
    settled = default.loc[~private.loc[default.index], "spread5"] <= 0.02
    assert settled.mean() >= 0.95, settled.mean()
    targets = pd.read_csv(ROOT / "docs/optimisation/deep_theta_step_targets.csv")
    met = (targets["violation"] <= targets["target"] + 0.02).groupby(targets["step"]).sum()
    assert met["scaled"] >= met["constant"], met


def test_a_noise_free_fit_at_a_large_lambda_trains_to_a_better_model_than_the_short_run():
    """The stretch is what the rule is for: Credit Card, demographic parity, λ = 20, non-private.
    The default run (200 epochs) ends more accurate than the same fit with its batch written out
    (20 epochs: the run before the stretch) and at least as fair, and its history has 200 epochs."""
    data = pfair.datasets.load("credit_card")
    silos = np.arange(data.X_train.shape[0]) % 3
    fits = {}
    for name, extra in (("default", {}), ("short", dict(batch_size=AUTO_BATCH_NONPRIVATE))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NonPrivateFitWarning)
            model = pfair.SteFFLe(epsilon=None, lam=20.0, seed=0, **extra).fit(
                data.X_train, data.y_train, sensitive_features=data.s_train, silos=silos)
        pred = model.predict(data.X_test)
        fits[name] = (len(model.history_), float(np.mean(pred != data.y_test)),
                      metrics.demographic_parity_difference(data.y_test, pred, sensitive_features=data.s_test))
    (n_d, err_d, dp_d), (n_s, err_s, dp_s) = fits["default"], fits["short"]
    assert (n_d, n_s) == (200, 20)
    assert err_d <= err_s - 0.005 and dp_d <= dp_s + 0.01, fits


def test_pfair_train_and_pfair_sweep_take_steffles_defaults():
    from pfair.cli import build_parser
    from pfair.experiments import run_sweep

    parser = build_parser()
    train = vars(parser.parse_args(["train"]))
    assert {k: train[k] for k in KNOBS} == _defaults()
    assert train["clip"] == "auto"
    sweep = vars(parser.parse_args(["sweep"]))
    assert (sweep["epochs"], sweep["batch_size"]) == (SteFFLeSettings().epochs, "auto")
    sig = inspect.signature(run_sweep).parameters
    assert (sig["epochs"].default, sig["batch_size"].default) == (None, "auto")  # None: SteFFLe's epochs


def _cli_lines(text: str, command: str) -> list[list[str]]:
    """The ``pfair COMMAND ...`` command lines of a page or Makefile, split into arguments."""
    text = re.sub(r"\\\n\s*", " ", text)  # continued lines
    lines = re.findall(rf"pfair {command}\b[^`\n]*", text)
    return [shlex.split(line)[1:] for line in lines if "--help" not in line and "..." not in line]


def _steffle_calls(code: str) -> list[dict]:
    """The literal keyword arguments of every ``SteFFLe(...)`` call in a Python block."""
    calls = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "SteFFLe":
                calls.append({k.arg: ast.literal_eval(k.value) for k in node.keywords
                              if k.arg in KNOBS and isinstance(k.value, ast.Constant)})
    return calls


@pytest.mark.parametrize("page", ["README.md", "Makefile", "docs/start_here.md"])
def test_quick_start_demo_and_start_here_use_the_defaults(page):
    """The README quick start, `make demo` and docs/start_here.md set no batch or step knob other
    than SteFFLe's default (a page may spell a default out, never change it)."""
    from pfair.cli import build_parser

    text = (ROOT / page).read_text()
    defaults, parser = _defaults(), build_parser()
    train = _cli_lines(text, "train")
    if page != "docs/start_here.md":
        assert train, f"{page}: no pfair train command found"
    for argv in train:
        args = vars(parser.parse_args(["train"] + argv[1:]))
        assert {k: args[k] for k in KNOBS} == defaults, (page, argv)
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    calls = [c for block in blocks for c in _steffle_calls(block)]
    if page != "Makefile":
        assert calls, f"{page}: no SteFFLe(...) call found"
    for call in calls:
        assert all(defaults[k] == v for k, v in call.items()), (page, call)


@pytest.mark.slow
def test_non_private_adult_at_lambda_0_with_the_defaults_trains_well(capsys):
    """Issue 28's criterion: `pfair train --dataset adult --epsilon none --lam 0` at the defaults
    gives test error <= 0.160 (0.171 with the former single batch cap of 4,096; the best batch and
    step setting of the protocol's grid is within 0.005 of the defaults on the validation split)."""
    from pfair.cli import main

    assert main(["train", "--dataset", "adult", "--epsilon", "none", "--lam", "0", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["test_error"] <= 0.160, result
    assert result["test_error"] < 0.7 * result["trivial_error"]


# ---------------------------------------------------------------------- private by default; one small silo and the auto batch


QUICK_FULL_BATCH = dict(epochs=8, sampling="full_batch", progress=False)


def shifted_data(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """s shifts every feature; y depends on the first two."""
    return toy_data(n, seed, shift=(0.5, 0.5, 0.5), weights=(1.0, -1.0), noise=0.3, cuts=(0.0,))


def test_steffle_is_private_by_default_like_the_cli_and_warns_when_not():
    from pfair.cli import build_parser

    assert SteFFLe().epsilon == 1.0 == build_parser().parse_args(["train"]).epsilon
    X, y, s, ids = shifted_data()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = SteFFLe(**QUICK_FULL_BATCH).fit(X, y, sensitive_features=s, silos=ids)
    assert m.epsilon_spent_ <= 1.0 and m.privacy_report_["guarantee"].eq("covered").all()
    assert not any(issubclass(w.category, NonPrivateFitWarning) for w in caught)
    with pytest.warns(NonPrivateFitWarning, match=r"epsilon=None: not private"):
        SteFFLe(epsilon=None, **QUICK_FULL_BATCH).fit(X, y, sensitive_features=s, silos=ids)


def test_one_small_silo_that_shrinks_every_silos_auto_batch_is_named_in_a_warning():
    """Before: silent; a 1-record silo made every silo draw batches of 1."""
    rng = np.random.default_rng(1)
    n = 3001
    X, y, s, _ = shifted_data(n)
    ids = np.where(np.arange(n) == 5, "tiny", np.where(np.arange(n) % 2 == 0, "a", "b"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateFitWarning)
        with pytest.warns(UserWarning, match=rf"batch_size='auto' is min\({AUTO_BATCH_NONPRIVATE}, smallest silo\) = 1 "
                                             r"because silo 'tiny' has only 1 record.*\d+ rounds per epoch instead of "
                                             r"\d+ .*Merge silo 'tiny'"):
            SteFFLe(epsilon=None, epochs=1, lam=0.0).fit(X, y, sensitive_features=s, silos=ids)
        # Silos of similar sizes, a fixed batch, or the full batch: nothing to say.
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            warnings.simplefilter("ignore", NonPrivateFitWarning)
            SteFFLe(epsilon=None, epochs=1, lam=0.0).fit(X, y, sensitive_features=s, silos=rng.integers(0, 3, n))
            SteFFLe(epsilon=None, epochs=1, lam=0.0, batch_size=1).fit(X, y, sensitive_features=s, silos=ids)


def test_auto_decay_halves_the_default_private_runs_step_every_quarter_of_its_epochs():
    from pfair.settings import AUTO_DECAY, PRIVATE_DECAY, SteFFLeSettings

    st = pfair.SteFFLe().settings()  # ε = 1, attribute mode, the auto batch
    assert (st.lr_decay, st.decay_every) == (PRIVATE_DECAY, 5)
    target = pfair.SteFFLe(max_violation=0.05).settings()  # a fairness target's run too
    assert (target.lr_decay, target.decay_every) == (PRIVATE_DECAY, 5)
    big = st.for_sizes([10**6, 10**6])  # stretched: the period is multiplied with the epochs
    assert (big.lr_decay, big.epochs, big.decay_every) == (PRIVATE_DECAY, 160, 40)
    assert pfair.SteFFLe(epochs=40).settings().decay_every == 10
    # Elsewhere 0.8 every 10 epochs; at λ = 0 too, whose private rounds are the non-private fit's.
    for other in (dict(epsilon=None), dict(lam=0.0), dict(batch_size=256), dict(max_violation=0.05, batch_size=256),
                  dict(protect="record"), dict(mode="hybrid")):
        s = pfair.SteFFLe(**other).settings()
        assert (s.lr_decay, s.decay_every) == AUTO_DECAY, other
    mine = pfair.SteFFLe(lr_decay=0.9, decay_every=3).settings()
    assert (mine.lr_decay, mine.decay_every) == (0.9, 3)
    for name, bad in (("lr_decay", "fast"), ("decay_every", "often")):
        with pytest.raises(ValueError, match=f"{name} must be .* or 'auto'"):
            SteFFLeSettings.from_estimator_params({name: bad})
