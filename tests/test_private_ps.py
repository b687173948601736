"""p_s="dp": silos release Gaussian histograms of s, charged to the same ledger as training."""

from __future__ import annotations

import numpy as np
import pytest

from pfair import SteFFLe, _core
from pfair.federation import Federation
from pfair.privacy.calibration import composed_epsilon
from pfair.privacy.histogram import HISTOGRAM_SENSITIVITY, noisy_counts, silo_counts


def data(n=3000, seed=0, k=3):
    rng = np.random.default_rng(seed)
    s = rng.choice(k, size=n, p=[0.5, 0.3, 0.2][:k] / np.sum([0.5, 0.3, 0.2][:k]))
    X = rng.normal(size=(n, 3))
    X[:, 0] += s
    y = (X[:, 0] + rng.normal(size=n) > 1).astype(int)
    return X, y, s, rng.integers(0, 3, size=n)


FAST = dict(epochs=5, batch_size=64, seed=0)


@pytest.mark.parametrize("fairness", ["demographic_parity", "equalized_odds"])
def test_histogram_and_training_compose_within_budget(fairness):
    X, y, s, silos = data()
    m = SteFFLe(epsilon=1.0, p_s="dp", fairness=fairness, **FAST).fit(X, y, sensitive_features=s, silos=silos)
    rep = m.privacy_report_
    assert (rep["p_s"] == "dp").all()
    for j, ledger in enumerate(m.ledgers_):
        names = [e.name for e in ledger.events]
        assert names[0] == "p_s_histogram" and names.count("p_s_histogram") == 1
        assert len(names) == 1 + FAST["epochs"]
        spent = ledger.epsilon_spent()
        assert 0.97 <= spent <= 1.0  # the composition uses the whole budget, no more
        assert rep.loc[j, "epsilon_spent"] == pytest.approx(spent)
        assert composed_epsilon(ledger.events, ledger.delta) == pytest.approx(spent, rel=1e-9)
    # The histogram alone costs its share (10%) of epsilon.
    hist = m.ledgers_[0].events[0]
    assert composed_epsilon([hist], m.ledgers_[0].delta) == pytest.approx(0.1, rel=0.03)


def test_training_noise_is_larger_when_part_of_the_budget_went_to_the_histogram():
    X, y, s, silos = data()
    public = SteFFLe(epsilon=1.0, **FAST).fit(X, y, sensitive_features=s, silos=silos)
    private = SteFFLe(epsilon=1.0, p_s="dp", **FAST).fit(X, y, sensitive_features=s, silos=silos)
    assert (private.privacy_report_["noise_multiplier"] > public.privacy_report_["noise_multiplier"]).all()


def test_released_counts_are_noised_with_sensitivity_sqrt2_and_reproducible():
    X, y, s, silos = data()
    fed = Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    counts = silo_counts(fed, 0, "equalized_odds", 1)
    assert counts.shape == (2, 3) and counts.sum() == fed.sizes[0]
    a = noisy_counts(counts, 2.0, seed=4, silo=0)
    b = noisy_counts(counts, 2.0, seed=4, silo=0)
    c = noisy_counts(counts, 2.0, seed=4, silo=1)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # One record's s change moves one unit between two cells of its block: L2 change sqrt(2).
    s2 = fed.silos[0].s.copy()
    s2[0] = (s2[0] + 1) % 3
    fed.silos[0].s, old = s2, fed.silos[0].s
    moved = silo_counts(fed, 0, "equalized_odds", 1)
    fed.silos[0].s = old
    assert np.linalg.norm(moved - counts) == pytest.approx(HISTOGRAM_SENSITIVITY)
    # The stream differs from the training noise stream of round 0.
    assert not np.array_equal(_core.gaussian_stream(4, 0, 0, 6, purpose="histogram"), _core.gaussian_stream(4, 0, 0, 6))


def test_estimated_proportions_are_close_to_the_truth():
    X, y, s, silos = data(30000)
    m = SteFFLe(epsilon=1.0, p_s="dp", **FAST)
    fed = Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    est = m._group_proportions(fed)
    np.testing.assert_allclose(est, fed.group_proportions("demographic_parity"), atol=0.01)


def test_p_s_dp_errors():
    X, y, s, silos = data(600)
    with pytest.raises(ValueError, match="p_s='dp' needs epsilon"):
        SteFFLe(p_s="dp", **FAST).fit(X, y, sensitive_features=s, silos=silos)
    with pytest.raises(ValueError, match="p_s_epsilon_share must be in"):
        SteFFLe(p_s="dp", epsilon=1.0, p_s_epsilon_share=1.5, **FAST).fit(X, y, sensitive_features=s, silos=silos)
