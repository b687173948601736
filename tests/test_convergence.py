"""The W step, silent-failure warnings and clipping defaults (docs/optimisation.md)."""

import warnings

import numpy as np
import pytest

import pfair
from pfair import SteFFLe
from pfair.exceptions import ConvergenceWarning
from pfair.protocol.convergence import COLLAPSE_SHARE
from pfair.settings import PRIVATE_CLIPS


@pytest.fixture(scope="module")
def german():
    return pfair.datasets.load("german")


def fit(data, **kw):
    params = dict(epochs=5, batch_size=64, seed=0, epsilon=None)
    params.update(kw)
    return SteFFLe(**params).fit(data.X_train, data.y_train, sensitive_features=data.s_train)


def convergence_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, ConvergenceWarning)]


def test_huge_lambda_warns_divergence_with_the_numbers(german):
    # The constant θ step (pfair before theta_step="scaled") moves by λ·η_θ per unit of ψ-gradient.
    with pytest.warns(ConvergenceWarning, match=r"diverged at epoch 1: ‖θ‖ = [0-9.e+]+") as rec:
        model = fit(german, lam=1e9, theta_step="constant")
    assert model.history_["theta_norm"].max() > 1e3
    assert any("lam = 1e+09" in m for m in convergence_warnings(rec))
    # The diverged last model is no better than the constant predictor, which the fit returns.
    assert model.selected_epoch_ == 0 and np.all(model.coef_ == 0.0)
    assert any("returned the constant predictor" in m for m in convergence_warnings(rec))


def test_the_scaled_theta_step_does_not_diverge_at_a_huge_lambda(german):
    # η_θ / max(1, λ): the ψ-part of a θ step is at most η_θ·‖∇ψ‖ whatever λ, so θ stays bounded
    # where the constant step above sends it past 10³ in one epoch.
    model = fit(german, lam=1e9, epochs=3)
    assert np.all(np.isfinite(model.theta_))
    assert np.linalg.norm(model.theta_) < 50
    assert model.history_["lr_theta"].iloc[0] == pytest.approx(0.5 / 1e9)


def test_bad_learning_rate_warns_divergence(german):
    with pytest.warns(ConvergenceWarning, match="diverged"):
        fit(german, lr_theta=1e4)


def test_paper_w_step_past_its_stability_limit_collapses_and_warns(german):
    # λ·η_W = 10: W oscillates onto the radius and the model is no better than predicting one class
    # for everyone at any checkpoint (the collapse check sees one class at epochs 1-4; at epoch 5 the
    # model predicts both, at the constant's error): the checkpoint guard says so.
    # At λ > 0 a model at the constant predictor is what the penalty drove it to: the constant
    # predictor itself is returned, warned.
    with pytest.warns(ConvergenceWarning, match=r"the last model is no better than the constant predictor "
                                                r"\(validation error (0\.\d+) against the constant's \1.*"
                                                r"returned the constant predictor.*lam=10 the fairness term "
                                                r".* drove the model onto or past the constant") as rec:
        model = fit(german, lam=10.0, w_step="paper")
    assert model.selected_epoch_ == 0
    pred = model.predict(german.X_train)
    assert np.max(np.bincount(pred)) / len(pred) >= COLLAPSE_SHARE
    assert not any("diverged" in m for m in convergence_warnings(rec))


def test_normalised_w_step_does_not_collapse_where_the_paper_step_does(german):
    # The W step alone: the θ step constant in λ, as when this was measured (docs/optimisation.md §1).
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = fit(german, lam=10.0, theta_step="constant")
    pred = model.predict(german.X_test)
    assert 0.02 < np.mean(pred == 1) < 0.98
    # Same λ, same data: the paper's W step ends at the radius, the normalised one inside it.
    paper = SteFFLe(lam=10.0, epsilon=None, epochs=5, batch_size=64, w_step="paper", theta_step="constant")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        paper.fit(german.X_train, german.y_train, sensitive_features=german.s_train)
    assert np.linalg.norm(paper.W_) == pytest.approx(2.0)
    assert np.linalg.norm(model.W_) < 1.9


@pytest.mark.parametrize("kw", [dict(lam=0.0), dict(lam=1.0), dict(lam=1.0, epsilon=3.0, noise_seed=3)])
def test_default_runs_do_not_warn(german, kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        warnings.simplefilter("ignore", pfair.exceptions.PrivacyWarning)
        fit(german, **kw)


def test_a_private_fit_no_better_than_the_constant_predictor_is_said_out_loud(german):
    """ε = 1 and λ = 5 on German credit's 750 training records: the models are no better than
    predicting the majority class (the last one's test error 0.44 against 0.30), and no check used
    to say so (the model predicts both classes, so the collapse check is silent). On the 75
    held-out records the last model's error is 0.44 against the constant's 0.37: above it, but
    within the 5 % test's margin of 0.117 (75 records cannot show it worse), so the fit says the
    figures cannot tell it from the constant, with the held-out size and the fix. (The clip of 0.25,
    the former default, keeps the scenario: with the adaptive clip the last model is shown worse,
    which the guard says in its other words.)"""
    with pytest.warns(ConvergenceWarning, match=r"validation figures cannot tell the model from the constant predictor: "
                                                r"validation "
                                                r"error 0\.\d+ against the constant's 0\.\d+, difference \+0\.\d+, "
                                                r"margin 0\.\d+ .* on 75 held-out records.*a larger validation_share"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pfair.exceptions.PrivacyWarning)
            m = fit(german, lam=5.0, epsilon=1.0, noise_seed=3, clip=0.25)
    ck = m.checkpoints_
    last = ck.iloc[-1]
    assert not last["clearly_better"] and last["validation_error"] > last["constant_error"]
    assert last["validation_error"] - last["constant_error"] < last["margin"]  # within noise: not shown worse


def test_server_lr_w_is_the_normalised_step():
    st = SteFFLe(lam=4.0, lr_w=0.5).settings()
    assert st.server_lr_w() == pytest.approx(0.125)  # the server multiplies by λ: W moves by 0.5·∇ψ
    assert SteFFLe(lam=4.0, lr_w=0.5, w_step="paper").settings().server_lr_w() == 0.5
    assert SteFFLe(lam=0.0, lr_w=0.5).settings().server_lr_w() == 0.5
    with pytest.raises(ValueError, match="w_step"):
        SteFFLe(w_step="fast").settings()


def test_nonprivate_fit_does_not_clip_by_default(german):
    st = SteFFLe(epsilon=None).settings()
    assert (st.clip, st.clip_loss, st.clip_w) == (None, None, None)
    assert all(v == float("inf") for v in st.clips().values())
    model = fit(german, lam=1.0, epochs=2)
    assert model.history_["clipped"].sum() == 0
    clipped = fit(german, lam=1.0, epochs=2, clip=1e-3)
    assert clipped.history_["clipped"].sum() > 0


def test_private_fit_uses_a_clip_and_refuses_none(german):
    st = SteFFLe(epsilon=1.0).settings()
    assert (st.clip, st.clip_loss, st.clip_w) == ("adaptive", PRIVATE_CLIPS["clip_loss"], PRIVATE_CLIPS["clip_w"])
    st = SteFFLe(epsilon=1.0, protect="record").settings()
    assert (st.clip, st.clip_loss, st.clip_w) == tuple(PRIVATE_CLIPS[k] for k in ("clip", "clip_loss", "clip_w"))
    assert SteFFLe(epsilon=1.0, clip=2.0).settings().clip == 2.0
    with pytest.raises(ValueError, match="clip must be set when epsilon is set"):
        SteFFLe(epsilon=1.0, clip=None).settings()
    with pytest.raises(ValueError, match="clip must be a positive number, None .* or 'auto'"):
        SteFFLe(clip="yes").settings()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pfair.exceptions.PrivacyWarning)
        model = fit(german, lam=2.0, epsilon=1.0, noise_seed=1, epochs=2, exact_diagnostics=True)
    assert model.privacy_report_["sigma_theta"].iloc[0] > 0
    assert model.history_["clipped"].sum() > 0  # the default C_θ binds for some records


def test_hybrid_modes_warn_too(german):
    n = german.X_train.shape[0]
    with pytest.warns(ConvergenceWarning, match="diverged at epoch 1"):
        SteFFLe(mode="divisions", lam=1e9, epochs=2, batch_size=64, p_s="pooled", theta_step="constant").fit(
            german.X_train, german.y_train, sensitive_features=german.s_train, silos=np.arange(n) % 3,
            sensitive_silos=np.arange(n) % 2)


def test_collapse_check_gives_the_same_counts_with_and_without_the_gathered_sample(monkeypatch):
    from pfair.protocol import convergence

    rng = np.random.default_rng(0)
    silos = [rng.normal(size=(n, 4)) + j for j, n in enumerate((500, 60, 3000))]
    thetas = [np.array([1.0, 0, 0, 0, 0]), np.array([1.0, -1, 0.5, 0, 0.2]), np.array([0.0, 0, 0, 0, 40])]

    def shares(cache_bytes):
        monkeypatch.setattr(convergence, "SAMPLE_CACHE_BYTES", cache_bytes)
        mon = convergence.ConvergenceMonitor(n_classes=2, lam=1.0, lr_w_text="", silo_features=silos)
        out = []
        for epoch, theta in enumerate(thetas, 1):
            mon.after_epoch(epoch, theta, np.zeros(4), 0.1)
            out.append((mon.collapse_since, dict(mon.collapse_info)))
        return out, mon._sample

    gathered, sample = shares(64 << 20)
    per_silo, none = shares(0)
    assert isinstance(sample, np.ndarray) and sample.shape == (500 + 60 + 1500, 4)  # 3,000 rows at stride 2 and none is False
    assert gathered == per_silo
    assert gathered[0][0] is None and gathered[2][0] == 3  # the last θ predicts one class everywhere
    assert gathered[2][1]["records"] == 2060 and gathered[2][1]["share"] == 1.0
    per = convergence.SAMPLE  # three silos: each reads up to SAMPLE rows
    want = sum(convergence.local_prediction_counts(X, thetas[1], 2, per) for X in silos)
    got = convergence.prediction_counts(sample, thetas[1], 2)
    np.testing.assert_array_equal(got, want)
    assert 0 < got[0] < got.sum()


def test_a_targets_collapse_and_divergence_name_the_lambda_its_controller_set():
    """With ``max_violation`` the fit's ``lam`` (1 by default) is not what trained: the warnings
    name the λ of the epoch the collapse began (and the largest λ of the fit), and the fixes that
    lower it (a larger target, a smaller dual step), not "a smaller lam"."""
    from pfair.protocol import convergence

    silos = [np.random.default_rng(0).normal(size=(400, 4))]
    mon = convergence.ConvergenceMonitor(n_classes=2, lam=1.0, lr_w_text="lr_theta = 0.5", silo_features=silos,
                                         target=0.05)
    varied, constant = np.array([1.0, 0, 0, 0, 0]), np.array([0.0, 0, 0, 0, 40])  # intercept last
    for epoch, (theta, lam) in enumerate([(varied, 0.0), (varied, 19.0), (varied, 38.0), (constant, 28.5),
                                          (constant, 14.25)], 1):
        mon.after_epoch(epoch, theta, np.zeros(4), 0.5, lam=lam)
    with pytest.warns(ConvergenceWarning) as caught:
        mon.finish(None)
    text = str(caught[0].message)
    assert "from epoch 4 on" in text and "λ = 28.5 (set by max_violation=0.05's controller, at most 38" in text
    assert "a larger max_violation or a smaller lam_lr" in text and "lam = 1" not in text
    fixed = convergence.ConvergenceMonitor(n_classes=2, lam=8.0, lr_w_text="", silo_features=silos)
    fixed.after_epoch(1, constant, np.zeros(4), 0.5)
    with pytest.warns(ConvergenceWarning, match=r"lam = 8 may be past .* try a smaller lam or lr_theta"):
        fixed.finish(None)
    with pytest.warns(ConvergenceWarning, match=r"λ = 60 \(set by max_violation=0.05's controller.*smaller lam_lr\)"):
        mon.after_epoch(6, np.full(5, 1e4), np.zeros(4), 0.5, lam=60.0)


def test_the_collapse_warning_reads_w_radius_per_block():
    """``w_radius`` bounds each block of W (one per label under equalized odds): W of two blocks
    of norm 1.9 (‖W‖ 2.69) is not at a radius of 2, W with one block of norm 2 is."""
    from pfair.protocol import convergence

    silos = [np.random.default_rng(0).normal(size=(400, 4))]
    constant = np.array([0.0, 0, 0, 0, 40])

    def message(w):
        mon = convergence.ConvergenceMonitor(n_classes=2, lam=1.0, lr_w_text="", silo_features=silos, w_blocks=2)
        mon.after_epoch(1, constant, w, 0.5)
        with pytest.warns(ConvergenceWarning) as caught:
            mon.finish(2.0)
        return str(caught[0].message)

    inside = message(np.array([1.9, 0.0, 0.0, 1.9]))
    assert "‖W‖ = 2.687" in inside and "radius" not in inside
    assert "a block of W at the radius w_radius = 2, which bounds each of its 2 blocks" in message(
        np.array([1.2, 1.6, 0.3, 0.0]))


def test_the_simulation_counts_its_collapse_sample_in_rust_as_python_would():
    """``SiloSet.predict_counts`` (what the simulation's collapse check calls) reads the same
    rows as ``Silo.strided_X`` and predicts the same classes: silos of row lists and of
    consecutive rows, dense and sparse (CSR) layouts, two and three classes."""
    from pfair.protocol import convergence

    rng = np.random.default_rng(4)
    n = 9000
    X = rng.normal(size=(n, 6))
    sparse = np.zeros((n, 30))
    sparse[np.arange(n), rng.integers(0, 30, size=n)] = 1.0  # one-hot: stored as CSR in Rust
    s = rng.integers(0, 2, size=n)
    for feats, silos in ((X, np.arange(n) % 4), (sparse, np.repeat(np.arange(3), n // 3))):
        for l in (2, 3):
            y = rng.integers(0, l, size=n)
            fed = pfair.Federation.from_arrays(feats, y, sensitive_features=s, silos=silos)
            ss = fed.silo_set()
            assert ss.is_shared(0) == (feats is X)  # the one-hot matrix is copied to CSR
            d = feats.shape[1]
            for per in (1, 700, 5000):
                theta = rng.normal(size=(d + 1) * (l - 1))
                want = sum(convergence.local_prediction_counts(silo, theta, l, per) for silo in fed.silos)
                got = ss.predict_counts(theta, per)
                np.testing.assert_array_equal(got, want)
                assert got.sum() == sum(len(range(0, len(silo), -(-len(silo) // per))) for silo in fed.silos)
    with pytest.raises(ValueError, match="per_silo must be >= 1"):
        ss.predict_counts(theta, 0)
    with pytest.raises(ValueError, match="thin must be >= 1"):
        ss.predict_counts(theta, 5, 0)
    # A thinning past every silo's size reads row 0 of each silo (no overflow of the stride).
    np.testing.assert_array_equal(ss.predict_counts(theta, 1500, 2**63), ss.predict_counts(theta, 1))
    with pytest.raises(ValueError, match="theta has length"):
        ss.predict_counts(theta[:-1], 5)


@pytest.mark.filterwarnings("ignore::pfair.exceptions.ConvergenceWarning")  # ‖θ‖ in the thousands
def test_thinned_collapse_check_decides_as_the_whole_sample_does(monkeypatch):
    """After the first epoch the collapse check reads every THIN-th sampled row first and the
    whole sample only when those do not rule a collapse out. Near the threshold and far from it,
    on the Rust path and on both Python paths, every epoch's outcome (since when, the numbers in
    the warning, whether the model ever varied) is the one of reading the whole sample each time,
    and the whole sample is not read when the subset settles it."""
    from pfair.protocol import convergence

    n = 3000
    x0 = np.arange(3 * n, dtype=float)  # one distinct value per record: class 1 iff x0 > c
    X = np.column_stack([x0, np.zeros(3 * n)])
    y = np.arange(3 * n) % 2
    s = (np.arange(3 * n) // 7) % 2
    fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=np.repeat(np.arange(3), n))
    # The sampled records: every second of each silo (3 silos, 2,000 per silo at most, stride 2);
    # cut-offs with 0, 1, …, 60 of them on the minority side, both ways, then a balanced model.
    sampled = np.sort(np.concatenate([x0[j * n:(j + 1) * n][::2] for j in range(3)]))
    cuts = [(sampled[k] - 0.5, 1.0) for k in range(0, 61, 3)] + [(sampled[-k] + 0.5, -1.0) for k in (1, 2, 5, 9, 40, 70)]
    thetas = [np.array([slope, 0.0, -slope * c]) for c, slope in cuts] + [np.array([1.0, 0.0, -float(np.median(x0))])]

    def run(thin, path):
        monkeypatch.setattr(convergence, "THIN", thin)
        monkeypatch.setattr(convergence, "SAMPLE_CACHE_BYTES", 0 if path == "per_silo" else 64 << 20)
        calls = []
        counts = None
        if path == "rust":
            ss = fed.silo_set()

            def counts(theta, per_silo, t):
                calls.append(t)
                return ss.predict_counts(theta, per_silo, t)
        mon = convergence.ConvergenceMonitor(n_classes=2, lam=1.0, lr_w_text="", silo_features=list(fed.silos),
                                             counts=counts)
        states = []
        for epoch, theta in enumerate(thetas, 1):
            mon.after_epoch(epoch, theta, np.zeros(4), 0.1)
            states.append((mon.collapse_since, dict(mon.collapse_info), mon.ever_varied))
        return states, calls

    whole, _ = run(1, "rust")
    assert sum(st[1].get("share", 0) >= COLLAPSE_SHARE for st in whole) >= 4  # some epochs collapsed …
    assert any(st[0] is None for st in whole[1:])                            # … and some did not
    assert whole[0][1]["records"] == 4500
    for path in ("gathered", "per_silo", "rust"):
        thinned, calls = run(8, path)
        assert thinned == whole, path
    # The Rust path (the last run) read the whole sample on the first epoch and near a collapse only.
    assert calls[0] == 1 and calls.count(8) == len(thetas) - 1
    full_reads = calls.count(1) - 1
    assert 0 < full_reads < len(thetas) - 1
