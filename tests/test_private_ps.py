"""Group proportions from released values only: public, a DP histogram per silo, or pooled (warned).

The DP histogram is charged to the same ledger as training; everything derived from p_s (Δ_W, σ_W,
the check that every group is present) uses released values, so a neighbouring data set (one
record's s changed) never changes a noise scale and never raises a different error.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from pfair import SteFFLe, _core
from pfair.exceptions import PrivacyWarning
from pfair.federation import Federation
from pfair.privacy.calibration import composed_epsilon
from pfair._validation import resolve_fairness
from pfair.privacy.proportions import HISTOGRAM_SENSITIVITY, public_proportions
from pfair.protocol.simulation import Simulation

from support import toy_data


def data(n=3000, seed=0, k=3):
    """Groups of unequal sizes (0.5 : 0.3 : 0.2, the first k of them)."""
    p = np.array([0.5, 0.3, 0.2][:k])
    return toy_data(n, seed, k, group_p=p / p.sum(), noise=1.0, cuts=(1.0,))


FAST = dict(epochs=5, batch_size=64, seed=0)


@pytest.mark.parametrize("fairness", ["demographic_parity", "equalized_odds", "false_positive_rate_parity"])
def test_histogram_and_training_compose_within_budget(fairness):
    X, y, s, silos = data()
    m = SteFFLe(epsilon=1.0, fairness=fairness, **FAST).fit(X, y, sensitive_features=s, silos=silos)
    rep = m.privacy_report_
    assert (rep["p_s"] == "dp").all()  # the default of a private fit
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
    public = SteFFLe(epsilon=1.0, p_s=[0.5, 0.3, 0.2], **FAST).fit(X, y, sensitive_features=s, silos=silos)
    private = SteFFLe(epsilon=1.0, p_s="dp", **FAST).fit(X, y, sensitive_features=s, silos=silos)
    assert (private.privacy_report_["noise_multiplier"] > public.privacy_report_["noise_multiplier"]).all()


def test_released_counts_are_noised_with_sensitivity_sqrt2_from_the_silos_secret_key():
    X, y, s, silos = data()
    fed = Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    silo = fed.silos[0]
    eo = resolve_fairness("equalized_odds")
    counts = eo.group_counts(silo.y, silo.s, n_groups=3, n_classes=2)
    assert counts.shape == (2, 3) and counts.sum() == fed.sizes[0]
    # One record's s change moves one unit between two cells of its block: L2 change √2.
    s2 = silo.s.copy()
    s2[0] = (s2[0] + 1) % 3
    moved = eo.group_counts(silo.y, s2, n_groups=3, n_classes=2)
    assert np.linalg.norm(moved - counts) == pytest.approx(HISTOGRAM_SENSITIVITY)
    # Two fits release different histograms (secret keys); the noise has the calibrated scale.
    rel = []
    for _ in range(2):
        sim = Simulation(SteFFLe(epsilon=1.0, fairness="equalized_odds", **FAST).settings(), fed, ledgers="new")
        rel.append(sim.parties[0].release_group_counts())
    assert not np.array_equal(rel[0], rel[1])
    event = sim.ledgers[0].events[0]
    sigma = event.noise_multiplier * HISTOGRAM_SENSITIVITY
    assert np.all(np.abs(rel[0] - counts) < 8 * sigma)
    # The histogram's release stream is not the training noise stream of round 0.
    from pfair.protocol.keys import group_counts_release

    key = _core.NoiseKey.seeded(4)
    assert not np.array_equal(_core.gaussian_release(key, group_counts_release(0, "p_s").encode(), 6),
                              _core.gaussian_stream(key, 0, 0, 6))


def test_a_released_histogram_is_reused_by_later_fits_at_no_cost():
    X, y, s, silos = data()
    fed = Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    first = SteFFLe(epsilon=2.0, epochs=1, batch_size=64).fit(fed)
    with pytest.warns(PrivacyWarning, match="spent"):
        second = SteFFLe(epsilon=2.0, epochs=1, batch_size=64).fit(fed)
    np.testing.assert_array_equal(first.group_proportions_, second.group_proportions_)
    assert all([e.name for e in ledger.events].count("p_s_histogram") == 1 for ledger in second.ledgers_)


def test_estimated_proportions_are_close_to_the_truth():
    """The noise is secret, so the tolerance follows from its scale, not from one draw: with σ_j the
    per-cell noise of silo j's histogram and N records, the pooled estimate of group g is off by
    about (e_g − p_g Σ_h e_h) / N, e the summed noise, a normal of standard deviation at most
    √(Σ_j σ_j²)·√max(1, k − 1) / N. Six of those (a failure about once in 10⁸ runs) is still under
    0.01 at this N: the estimate is as close as the calibrated noise allows, and close."""
    X, y, s, silos = data(300_000)
    fed = Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    sim = Simulation(SteFFLe(epsilon=1.0, **FAST).settings(), fed, ledgers="new")
    estimate = sim.group_proportions()
    events = [ledger.events[0] for ledger in sim.ledgers]
    assert [e.name for e in events] == ["p_s_histogram"] * len(fed.silos)
    sigma = np.sqrt(sum((e.noise_multiplier * HISTOGRAM_SENSITIVITY) ** 2 for e in events))
    tol = 6 * sigma * np.sqrt(max(1, fed.n_groups - 1)) / sum(fed.sizes)
    assert 0.001 < tol < 0.01
    np.testing.assert_allclose(estimate, fed.group_proportions("demographic_parity"), atol=tol)


@pytest.mark.parametrize("p_s", [[0.5, 0.3, 0.2], "dp"])
@pytest.mark.parametrize("fairness", ["demographic_parity", "equalized_odds", "false_positive_rate_parity"])
def test_neighbouring_data_get_identical_noise_scales_and_no_data_dependent_error(p_s, fairness):
    """Change one record's s (to a group that then has no record with that label): the planned
    noise scales are identical, and neither neighbour raises. With p_s="dp" the scales are a
    function of the released histogram only; we hand both neighbours the same release."""
    X, y, s, silos = data(600, k=3)
    # Make group 2 absent among label-1 records of the neighbour: only record i has (y=1, s=2).
    keep = ~((y == 1) & (s == 2))
    X, y, s, silos = X[keep], y[keep], s[keep], silos[keep]
    i = int(np.flatnonzero(y == 1)[0])
    s_nb = s.copy()
    s_nb[i] = 2
    p = p_s if isinstance(p_s, str) else ([p_s, p_s] if fairness == "equalized_odds" else p_s)
    plans = []
    for sv in (s, s_nb):
        fed = Federation.from_arrays(X, y, sensitive_features=sv, silos=silos, groups=[0, 1, 2])
        st = SteFFLe(epsilon=1.0, fairness=fairness, p_s=p, **FAST).settings()
        sim = Simulation(st, fed, ledgers="new")
        if p_s == "dp":
            released = np.full((2 if fairness == "equalized_odds" else 1, 3), 50.0)
            props = released / released.sum(axis=1, keepdims=True)
        else:
            props = sim.group_proportions()
        plans.append([party.plan_rounds(props, sim.total_rounds) for party in sim.parties])
    for a, b in zip(*plans):
        assert (a.sigma_theta, a.sigma_w, a.noise_multiplier) == (b.sigma_theta, b.sigma_w, b.noise_multiplier)
    if fairness == "equalized_odds":
        # Pooled exact proportions would have been a perfect distinguisher: one neighbour raises.
        fed = Federation.from_arrays(X, y, sensitive_features=s, silos=silos, groups=[0, 1, 2])
        with pytest.raises(ValueError, match="has no records"):
            fed.group_proportions("equalized_odds")


def test_public_proportions_are_validated():
    groups, classes = np.array(["a", "b"]), np.array([0, 1])
    kw = dict(groups=groups, classes=classes)
    dp, eo = resolve_fairness("demographic_parity"), resolve_fairness("equalized_odds")
    np.testing.assert_allclose(public_proportions({"a": 0.25, "b": 0.75}, notion=dp, **kw),
                               [[0.25, 0.75]])
    np.testing.assert_allclose(public_proportions([[0.5, 0.5], [0.25, 0.749]], notion=eo, **kw),
                               [[0.5, 0.5], [0.25 / 0.999, 0.749 / 0.999]])  # within 0.01 of 1: rescaled
    # Counts are not proportions (they were rescaled silently once): refused, naming the row.
    with pytest.raises(ValueError, match=r"p_s must be proportions summing to 1 .*summing to 4"):
        public_proportions({"a": 1, "b": 3}, notion=dp, **kw)
    with pytest.raises(ValueError, match=r"p_s\[1\] must be proportions summing to 1"):
        public_proportions([[0.5, 0.5], [1, 3]], notion=eo, **kw)
    with pytest.raises(ValueError, match="no proportion for groups"):
        public_proportions({"a": 1}, notion=dp, **kw)
    with pytest.raises(ValueError, match="one row of proportions per class|for each of the 2 classes"):
        public_proportions([0.5, 0.5], notion=eo, **kw)
    with pytest.raises(ValueError, match="3 proportions but there are 2"):
        public_proportions([0.2, 0.3, 0.5], notion=dp, **kw)
    with pytest.raises(ValueError, match="finite and > 0"):
        SteFFLe(p_s=[0.0, 1.0]).settings()


def test_a_mapping_may_name_the_groups_and_classes_of_a_federation_that_holds_codes():
    """Before: a Federation from pfair.datasets.load_csv holds groups and classes as codes 0..k−1
    (names in group_names, label_names), and p_s={"female": ..., "male": ...} was refused as naming
    groups not in the data, though the docstring says "a mapping group → proportion"."""
    groups, classes = np.arange(2), np.arange(2)
    named = dict(groups=groups, classes=classes, group_names=["female", "male"], label_names=["no", "yes"])
    dp, eo = resolve_fairness("demographic_parity"), resolve_fairness("equalized_odds")
    np.testing.assert_array_equal(public_proportions({"male": 0.75, "female": 0.25}, notion=dp, **named),
                                  public_proportions({0: 0.25, 1: 0.75}, notion=dp, **named))
    np.testing.assert_allclose(public_proportions({"no": {"female": 0.5, "male": 0.5}, "yes": [0.2, 0.8]},
                                                  notion=eo, **named), [[0.5, 0.5], [0.2, 0.8]])
    with pytest.raises(ValueError, match=r"names groups \['Female'\] that are not in the data's groups \[0, 1\] "
                                         r"\(named \['female', 'male'\]\)"):
        public_proportions({"Female": 0.25, "male": 0.75}, notion=dp, **named)
    # End to end: a Federation of a Dataset keeps the names through the held-out split.
    import pfair

    data = pfair.datasets.make_synthetic(600, 3, silos=3, seed=0)
    fed = Federation.from_dataset(data, data.attrs_train["silo"].to_numpy())
    by_code = {int(g): p for g, p in zip(fed.groups_, (0.4, 0.6))}
    by_name = {name: by_code[int(g)] for g, name in zip(fed.groups_, fed.group_names)}
    kw = dict(epsilon=1.0, lam=1.0, epochs=1, noise_seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = SteFFLe(p_s=by_name, **kw).fit(fed, ledgers="new")
        b = SteFFLe(p_s=by_code, **kw).fit(fed, ledgers="new")
    np.testing.assert_array_equal(a.theta_, b.theta_)


def test_p_s_errors_and_warnings():
    X, y, s, silos = data(600)
    with pytest.raises(ValueError, match="p_s='dp' needs epsilon"):
        SteFFLe(p_s="dp", epsilon=None, **FAST).fit(X, y, sensitive_features=s, silos=silos)
    with pytest.raises(ValueError, match="p_s_epsilon_share must be in"):
        SteFFLe(p_s="dp", epsilon=1.0, p_s_epsilon_share=1.5, **FAST).fit(X, y, sensitive_features=s, silos=silos)
    with pytest.raises(ValueError, match="not public: pass the public proportions"):
        SteFFLe(p_s="public").settings()
    with pytest.warns(PrivacyWarning, match="pooled"):
        m = SteFFLe(p_s="pooled", epsilon=1.0, **FAST).fit(X, y, sensitive_features=s, silos=silos)
    assert (m.privacy_report_["guarantee"] == "not covered: p_s pooled from exact data").all()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        SteFFLe(epsilon=1.0, **FAST).fit(X, y, sensitive_features=s, silos=silos)  # the default warns of nothing
