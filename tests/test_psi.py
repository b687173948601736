"""The Rust ψ-kernels against an independent NumPy reference and the χ² identity of the FERMI objective."""

from __future__ import annotations

import numpy as np
import pytest

from pfair import _core
from reference import chi2_penalty, objective, softmax_probs

NOTIONS = ["demographic_parity", "equalized_odds", "equal_opportunity", "false_positive_rate_parity"]


def random_problem(rng, *, n, d, k, l, fairness):
    X = rng.normal(size=(n, d))
    y = rng.integers(0, l, size=n)
    s = rng.integers(0, k, size=n)
    y[:l] = np.arange(l)
    s[:k] = np.arange(k)
    blocks = l if fairness == "equalized_odds" else 1
    theta = rng.normal(size=(d + 1) * (l - 1))
    W = rng.normal(size=(blocks, k, l))
    inv = 1.0 + 2.0 * rng.random((blocks, k))
    return X, y, s, theta, W, inv


def rust_gradients(X, y, s, theta, W, inv, *, k, l, fairness, batch=None, denom=None, **kw):
    batch = np.arange(len(y)) if batch is None else batch
    return _core.batch_gradients(
        X, y, s, theta, W.ravel(), inv.ravel(), n_groups=k, n_classes=l, batch=batch,
        denom=float(len(batch) if denom is None else denom), fairness=fairness, positive=1, **kw,
    )


def relative_error(a, b):
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12)


@pytest.mark.parametrize("fairness", NOTIONS)
@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("l", [2, 4])
def test_gradients_match_finite_differences_of_reference(fairness, k, l):
    rng = np.random.default_rng(100 * k + l)
    X, y, s, theta, W, inv = random_problem(rng, n=40, d=4, k=k, l=l, fairness=fairness)
    g = rust_gradients(X, y, s, theta, W, inv, k=k, l=l, fairness=fairness)
    h = 1e-5

    def f(th, w):
        return objective(X, y, s, th, w, inv, k=k, l=l, fairness=fairness)

    fd_loss = np.zeros_like(theta)
    fd_psi_theta = np.zeros_like(theta)
    for t in range(theta.size):
        e = np.zeros_like(theta)
        e[t] = h
        (lp, pp), (lm, pm) = f(theta + e, W), f(theta - e, W)
        fd_loss[t] = (lp - lm) / (2 * h)
        fd_psi_theta[t] = (pp - pm) / (2 * h)
    fd_psi_w = np.zeros(W.size)
    for t in range(W.size):
        e = np.zeros(W.size)
        e[t] = h
        fd_psi_w[t] = (f(theta, W + e.reshape(W.shape))[1] - f(theta, W - e.reshape(W.shape))[1]) / (2 * h)

    assert relative_error(g["loss_grad"], fd_loss) < 1e-6
    assert relative_error(g["psi_theta_sfree"] + g["psi_theta"], fd_psi_theta) < 1e-6
    assert relative_error(g["psi_w_sfree"] + g["psi_w"], fd_psi_w) < 1e-6
    loss, psi = f(theta, W)
    assert g["loss"] == pytest.approx(loss, rel=1e-12)
    assert g["psi"] == pytest.approx(psi, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("l", [2, 3])
def test_a_large_batch_is_the_sum_of_its_parts(l):
    """The kernel runs a batch in chunks of 1,024 records, each in two passes (probabilities
    first, then the sums): a batch of 2,500 shuffled records gives the sums of five sub-batches of
    500 (one chunk each), for every part, the loss and ψ."""
    rng = np.random.default_rng(l)
    X, y, s, theta, W, inv = random_problem(rng, n=2500, d=5, k=2, l=l, fairness="demographic_parity")
    batch = rng.permutation(2500)
    kw = dict(k=2, l=l, fairness="demographic_parity", denom=2500.0, protect="attribute", clip_theta=0.5)
    whole = rust_gradients(X, y, s, theta, W, inv, batch=batch, **kw)
    parts = [rust_gradients(X, y, s, theta, W, inv, batch=batch[a : a + 500], **kw) for a in range(0, 2500, 500)]
    for key in ("loss_grad", "psi_theta_sfree", "psi_theta", "psi_w_sfree", "psi_w", "loss", "psi"):
        np.testing.assert_allclose(whole[key], sum(p[key] for p in parts), rtol=1e-11, atol=1e-14)
    assert whole["n_clipped"] == sum(p["n_clipped"] for p in parts) > 0


@pytest.mark.parametrize("fairness", NOTIONS)
def test_public_parts_do_not_depend_on_s(fairness):
    rng = np.random.default_rng(7)
    k, l = 3, 3
    X, y, s, theta, W, inv = random_problem(rng, n=30, d=3, k=k, l=l, fairness=fairness)
    a = rust_gradients(X, y, s, theta, W, inv, k=k, l=l, fairness=fairness)
    b = rust_gradients(X, y, rng.integers(0, k, size=30), theta, W, inv, k=k, l=l, fairness=fairness)
    for key in ("loss_grad", "psi_theta_sfree", "psi_w_sfree"):
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.allclose(a["psi_w"], b["psi_w"])


def test_predict_proba_matches_reference_and_logistic_regression():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(50, 3))
    for l in (2, 5):
        theta = rng.normal(size=4 * (l - 1))
        np.testing.assert_allclose(_core.predict_proba(X, theta, l), softmax_probs(X, theta, l), rtol=1e-12)
    theta = rng.normal(size=4)
    z = X @ theta[:3] + theta[3]
    np.testing.assert_allclose(_core.predict_proba(X, theta, 2)[:, 1], 1 / (1 + np.exp(-z)), rtol=1e-12)


def test_predict_proba_in_parallel_blocks_and_on_strided_arrays():
    """More rows than one block (2,048) run in parallel blocks in place; a strided matrix is
    copied first. Both give every row's reference probabilities, one-hot rows included."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(5000, 14))
    X[:, 6:] = rng.integers(0, 2, size=(5000, 8))  # zeros and ones, as one-hot columns
    for l in (2, 3):
        theta = rng.normal(size=15 * (l - 1))
        want = softmax_probs(X, theta, l)
        np.testing.assert_allclose(_core.predict_proba(X, theta, l), want, rtol=1e-12)
        wide = np.repeat(X, 2, axis=1)[:, ::2]  # the same values, not contiguous
        assert not wide.flags.c_contiguous
        np.testing.assert_allclose(_core.predict_proba(wide, theta, l), want, rtol=1e-12)


def test_predict_proba_rejects_wrong_theta_length():
    with pytest.raises(ValueError, match="theta has length"):
        _core.predict_proba(np.zeros((2, 3)), np.zeros(3), 2)
    with pytest.raises(ValueError, match="theta has length"):
        _core.predict_counts(np.zeros((2, 3)), np.zeros(3), 2)
    with pytest.raises(ValueError, match="n_classes must be >= 2"):
        _core.predict_counts(np.zeros((2, 3)), np.zeros(4), 1)


def test_predict_counts_are_the_classes_of_the_reference_probabilities():
    """The collapse check's counts: argmax of the reference probabilities per row, counted, in
    parallel blocks (5,000 rows), on a strided copy, and with no features at all."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(5000, 14))
    X[:, 6:] = rng.integers(0, 2, size=(5000, 8))
    for l in (2, 3, 4):
        theta = rng.normal(size=15 * (l - 1))
        want = np.bincount(np.argmax(softmax_probs(X, theta, l), axis=1), minlength=l)
        assert want.min() > 0
        np.testing.assert_array_equal(_core.predict_counts(X, theta, l), want)
        np.testing.assert_array_equal(_core.predict_counts(np.repeat(X, 2, axis=1)[:, ::2], theta, l), want)
    # No features: every row gets the class of the intercepts (the largest, here class 2).
    np.testing.assert_array_equal(_core.predict_counts(np.zeros((7, 0)), np.array([0.5, 1.5]), 3), [0, 0, 7])


def _ascend_w(X, y, s, theta, inv, *, k, l, fairness, steps=3000, lr=0.5):
    """Gradient ascent on mean ψ in W using the Rust gradients (ψ is strongly concave in W)."""
    blocks = l if fairness == "equalized_odds" else 1
    W = np.zeros((blocks, k, l))
    for _ in range(steps):
        g = rust_gradients(X, y, s, theta, W, inv, k=k, l=l, fairness=fairness)
        W = W + lr * (g["psi_w_sfree"] + g["psi_w"]).reshape(W.shape)
    return W, rust_gradients(X, y, s, theta, W, inv, k=k, l=l, fairness=fairness)["psi"]


def identity_problem(seed, *, n, d, k, l):
    """X (n × d), s in k groups, y in l classes and θ, drawn in that order from default_rng(seed),
    each independent of the others: the caller makes a feature depend on s and θ use it."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    s = rng.integers(0, k, size=n)
    y = rng.integers(0, l, size=n)
    return X, s, y, rng.normal(size=(d + 1) * (l - 1))


@pytest.mark.parametrize("k,l", [(2, 2), (3, 2), (4, 3)])
def test_max_over_w_of_mean_psi_is_chi2_divergence(k, l):
    """The FERMI identity: max_W mean_i ψ_i(θ, W) = χ²(p̂_{ŷ,s} ‖ p̂_ŷ p̂_s) with the data's own p̂_s."""
    n = 300
    X, s, y, theta = identity_problem(10 * k + l, n=n, d=3, k=k, l=l)
    X[:, 0] += s  # make predictions depend on s so that the divergence is not ~0
    theta.reshape(4, l - 1)[0] = 1.5 * np.arange(1, l)  # the s-correlated feature drives ŷ
    p_s = np.bincount(s, minlength=k) / n
    inv = (p_s**-0.5).reshape(1, k)
    _, value = _ascend_w(X, y, s, theta, inv, k=k, l=l, fairness="demographic_parity")
    expected = chi2_penalty(softmax_probs(X, theta, l), s, k)
    assert expected > 0.01
    assert value == pytest.approx(expected, rel=1e-6)


def test_max_over_w_for_equalized_odds_is_label_weighted_conditional_chi2():
    """With one W_y per class and divisor m, max_W mean ψ = Σ_y p̂(y) χ²(p̂_{ŷ,s|y} ‖ p̂_{ŷ|y} p̂_{s|y})."""
    n, k, l = 400, 3, 2
    X, s, y, theta = identity_problem(3, n=n, d=2, k=k, l=l)
    X[:, 1] -= s
    theta[1] = -1.5
    inv = np.stack([(np.bincount(s[y == c], minlength=k) / (y == c).sum()) ** -0.5 for c in range(l)])
    _, value = _ascend_w(X, y, s, theta, inv, k=k, l=l, fairness="equalized_odds")
    P = softmax_probs(X, theta, l)
    expected = sum((y == c).mean() * chi2_penalty(P[y == c], s[y == c], k) for c in range(l))
    assert value == pytest.approx(expected, rel=1e-6)


def test_max_over_w_for_equal_opportunity_is_the_positive_class_term():
    """Only records with y = positive enter ψ (divisor m): max_W mean ψ = p̂(y=1) χ²(p̂_{ŷ,s|y=1} ‖ p̂_{ŷ|y=1} p̂_{s|y=1})."""
    n, k, l = 400, 3, 3
    X, s, y, theta = identity_problem(4, n=n, d=2, k=k, l=l)
    X[:, 0] += s
    theta.reshape(3, l - 1)[0] = [1.5, -1.0]
    pos = y == 1
    inv = ((np.bincount(s[pos], minlength=k) / pos.sum()) ** -0.5).reshape(1, k)
    _, value = _ascend_w(X, y, s, theta, inv, k=k, l=l, fairness="equal_opportunity")
    expected = pos.mean() * chi2_penalty(softmax_probs(X, theta, l)[pos], s[pos], k)
    assert expected > 0.005
    assert value == pytest.approx(expected, rel=1e-6)
