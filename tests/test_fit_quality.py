"""What a user gets at the defaults, as a user would run it: the fairness target that holds, no
silent model worse than the constant predictor in a sweep, and the line `pfair train` prints."""

from __future__ import annotations

import json

import pytest

from pfair.cli import main
from pfair.experiments import load_runs


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


@pytest.mark.slow
def test_the_adult_target_holds_in_each_of_five_runs(capsys):
    """`pfair train --dataset adult --epsilon 1 --max-violation 0.04`, five times (seeds 0-4: the
    batch order, the held-out share and, so that CI reruns the same five runs, the noise): every
    run's test error ≤ 0.19 and test demographic-parity difference ≤ 0.05. (With secret noise,
    docs/optimisation/target_check.py measures the spread.)"""
    for seed in range(5):
        r = json.loads(run(capsys, "train", "--dataset", "adult", "--epsilon", "1", "--max-violation", "0.04",
                           "--seed", str(seed), "--noise-seed", str(seed), "--json"))
        assert r["test_error"] <= 0.19, (seed, r)
        assert r["demographic_parity_difference"] <= 0.05, (seed, r)
        assert r["violation_released"] is not None and r["violation_released"] <= 0.04


@pytest.mark.slow
def test_a_compas_sweep_up_to_lambda_100_has_no_silent_model_worse_than_constant(capsys, tmp_path):
    """`pfair sweep` on COMPAS at ε = 1 over λ up to 100: a run may end worse than the constant
    predictor (a large λ, or PF-LD's noise), but never without a warning."""
    run(capsys, "sweep", "--dataset", "compas", "--epsilon", "1", "--heterogeneity", "0", "--lam", "0", "10", "30",
        "100", "--seeds", "2", "--jobs", "1", "--no-progress", "--out", str(tmp_path))
    runs = load_runs(tmp_path)
    assert len(runs) >= 2 * 4 * 2 and (runs["error"] == "").all()
    assert not runs["silent_failure"].any(), runs.loc[runs["silent_failure"], ["method", "knob", "seed",
                                                                                 "test_error", "trivial_error"]]
    out = run(capsys, "summary", str(tmp_path))
    assert "≥ constant (silent)" in out


def test_pfair_train_says_which_model_it_returned_against_the_constant_predictor(capsys):
    out = run(capsys, "train", "--dataset", "adult", "--epsilon", "none", "--lam", "0", "--epochs", "3")
    line = next(ln for ln in out.splitlines() if ln.startswith("model"))
    assert "after epoch 3 of 3: validation error 0." in line and "against the constant predictor's 0." in line
    r = json.loads(run(capsys, "train", "--dataset", "adult", "--epsilon", "none", "--lam", "0", "--epochs", "3",
                       "--json"))
    assert r["selected_epoch"] == 3 and r["validation_error"] < r["constant_validation_error"]


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["credit_card", "compas"])
def test_the_target_on_credit_card_holds_and_on_compas_is_said_out_of_reach(capsys, dataset):
    """docs/privacy.md's figures for the other bundled tables, t = 0.04 at ε = 1 (seeds 0-2 with
    their noise seeds): on Credit Card every run meets the target on the test split and beats the
    constant predictor; on COMPAS the ψ penalty cannot reach 0.04 with a useful model, and every run
    says so and returns a model still better than the constant predictor."""
    for seed in range(3):
        r = json.loads(run(capsys, "train", "--dataset", dataset, "--epsilon", "1", "--max-violation", "0.04",
                           "--seed", str(seed), "--noise-seed", str(seed), "--json"))
        assert r["test_error"] < r["trivial_error"] - 0.02, (seed, r)
        said = any("max_violation=0.04 was not met" in w for w in r["warnings"])
        if dataset == "credit_card":
            assert r["demographic_parity_difference"] <= 0.05 and not said, (seed, r)
        else:
            assert said, (seed, r["warnings"])


@pytest.mark.slow
def test_a_private_adult_target_is_within_0_01_of_non_private_fermi_at_the_same_violation():
    """SteFFLe at ε = 1 with max_violation=0.04 on Adult against non-private FERMI's front (mean over
    the same seeds, λ from 2 to 100, which spans the violations such runs reach), read at each private
    run's own test violation (docs/optimisation/target_gap.py, whose functions this uses): every run's
    test error within 0.01 of the front."""
    import numpy as np
    from support import load_script

    from pfair import Federation, SteFFLe, datasets

    gap = load_script("docs/optimisation/target_gap.py")
    data = datasets.load("adult")
    fed = Federation.for_dataset(data, 3, heterogeneity=0, seed=0)
    seeds = range(3)
    points = [tuple(np.mean([gap.figures(SteFFLe(epsilon=None, lam=lam, seed=s).fit(fed), data) for s in seeds],
                            axis=0)) for lam in (2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 40.0, 100.0)]
    v_front, e_front = gap.front(points)
    for s in seeds:
        m = SteFFLe(epsilon=1.0, max_violation=0.04, seed=s, noise_seed=s).fit(fed, ledgers="new")
        v, e = gap.figures(m, data)
        # The target held; below the front's span (fairer than λ = 100 makes a non-private fit) the
        # front's error is read at its fairest point, which only makes the check stricter.
        assert v <= 0.05, (s, v)
        assert e - gap.at(v_front, e_front, v) <= 0.01, (s, v, e, gap.at(v_front, e_front, v))
