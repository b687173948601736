"""Sweeps, the summary table and the figures (pfair.experiments) and their CLI commands."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pfair.cli import main
from pfair.experiments import expand_grid, load_runs, parse_values, plot_results, run_sweep, summarize
from pfair.experiments.methods import METHODS, get_method
from pfair.experiments.summary import (front, matched_reduction, mean_violation, pareto_mask, tradeoff_points,
                                      violation_at)
from pfair.experiments.sweep import COLUMNS, KEY_COLUMNS, RENAMED, cell_key

# A small, fast grid on German credit (750 training records): 2 epochs, batches of 32.
TINY = dict(datasets="german", epsilons=[1, 3], heterogeneities=[0, 0.75], silos=[3], lams="0:2:3",
            epochs=2, batch_size=32, progress=False)
REQUIRED = ["method", "dataset", "fairness", "epsilon", "heterogeneity", "silos", "knob", "seed", "test_error",
            "demographic_parity_difference", "equalized_odds_difference", "epsilon_spent", "seconds", "trivial_error"]


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    result = run_sweep(out, methods="steffle,pfld,fedavg,fermi", seeds=2, jobs=1, **TINY)
    return out, result


# ---------------------------------------------------------------------------------------- grid
def test_grid_collapses_knobless_and_nonprivate_methods():
    cells = expand_grid(methods="steffle,pfld,fedavg,central_erm,fermi,single_shot,eg", datasets="adult",
                        fairness=["demographic_parity", "equalized_odds"], epsilons=[1, 3, 9],
                        heterogeneities=[0, 0.75], silos=[3], knobs="0:2:11", seeds=2,
                        method_knobs={"eg": [0.01, 0.1]}, tuning={"steffle": {"lr_theta": [0.1, 0.25]}})
    count = pd.Series([c.method for c in cells]).value_counts().to_dict()
    # private with a knob: notion × ε × h × N × λ × configs × seeds; non-private: ε = inf only; knob-less:
    # knob = NaN only; notion-agnostic (fedavg, central_erm, single_shot): one "any" notion; eg: no partition
    assert count == {"steffle": 2 * 3 * 2 * 11 * 2 * 2, "pfld": 2 * 3 * 2 * 11 * 2, "fermi": 2 * 2 * 11 * 2,
                     "single_shot": 2 * 11 * 2, "fedavg": 2 * 2, "central_erm": 2 * 2, "eg": 2 * 2 * 2}
    assert {c.config for c in cells if c.method == "steffle"} == {"lr_theta=0.1", "lr_theta=0.25"}
    assert {c.fairness for c in cells if c.method == "fedavg"} == {"any"}
    assert all(math.isnan(c.heterogeneity) and c.silos == 0 for c in cells if c.method == "eg")
    assert {c.knob for c in cells if c.method == "eg"} == {0.01, 0.1}
    assert len({c.key() for c in cells}) == len(cells)
    for c in cells:
        spec = METHODS[c.method]
        assert math.isinf(c.epsilon) == (not spec.private)
        assert math.isnan(c.knob) == (spec.knob is None)
    assert [c.seed for c in cells] == sorted(c.seed for c in cells)  # whole seeds first


def test_parse_values_linspace_lists_and_rounding():
    assert parse_values("0:2:11", "lam") == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0]
    assert parse_values(["0", "0.5", "1"], "lam") == [0.0, 0.5, 1.0]
    assert parse_values([1, 3, 9], "epsilon") == [1.0, 3.0, 9.0]
    assert parse_values("1,2 2", "silos", integer=True) == [1.0, 2.0]
    assert parse_values(["0:1:3", "0.25"], "lam") == [0.0, 0.5, 1.0, 0.25]
    for bad in ("0:2", "0:2:x", "0:2:0", "a", "1:2:3:4"):
        with pytest.raises(ValueError, match="lam: expected numbers or start:stop:count"):
            parse_values(bad, "lam")
    with pytest.raises(ValueError, match="whole numbers"):
        parse_values("1.5", "silos", integer=True)


@pytest.mark.parametrize("kwargs, pattern", [
    ({"methods": "steffle,nope"}, r"methods: unknown method 'nope'; choose from steffle, pfld, fedavg"),
    ({"knobs": "0:2"}, r"lam: expected numbers"),
    ({"heterogeneities": [0, 1.2]}, r"heterogeneity: values must be in \[0, 1\]"),
    ({"silos": [0]}, r"silos: the number of silos must be >= 1"),
    ({"seeds": 0}, r"seeds: the number of seeds must be >= 1"),
    ({"epsilons": [0]}, r"epsilon: values must be > 0"),
    ({"datasets": "nope"}, r"dataset: unknown data set 'nope'; choose from adult"),
    ({"fairness": "equal_opportunity"}, r"fairness: 'equal_opportunity' is not supported; choose from demographic_parity"),
])
def test_grid_validation_names_the_argument_and_the_choices(kwargs, pattern):
    grid = dict(methods="steffle", datasets="german")
    grid.update(kwargs)
    with pytest.raises(ValueError, match=pattern):
        expand_grid(**grid)


def test_registry_maps_the_knob_onto_each_method():
    common = dict(fairness="equalized_odds", epsilon=3.0, epochs=5, batch_size=64, seed=7)
    steffle = get_method("steffle").build(knob=1.5, **common)
    assert (steffle.lam, steffle.epsilon, steffle.fairness, steffle.epochs, steffle.batch_size) == (1.5, 3.0,
                                                                                                     "equalized_odds", 5, 64)
    assert steffle.track_history is False and steffle.progress is False and steffle.seed == 7
    assert get_method("pfld").build(knob=1.5, **common).lam_max == 1.5
    assert get_method("single_shot").build(knob=1.5, **{**common, "epsilon": math.inf}).rho_o == 15.0
    fedavg = get_method("fedavg").build(knob=math.nan, **{**common, "epsilon": math.inf})
    assert fedavg.epochs == 5 and not hasattr(fedavg, "lam")
    with pytest.raises(ValueError, match="not a parameter of pfld"):
        get_method("pfld").build(knob=1.0, overrides={"lr_theta": 0.1}, **common)


# ---------------------------------------------------------------------------------------- sweep
def test_runs_csv_has_one_row_per_cell_with_the_promised_columns(tiny_sweep):
    out, result = tiny_sweep
    cells = expand_grid(methods="steffle,pfld,fedavg,fermi", seeds=2, datasets="german", epsilons=[1, 3],
                        heterogeneities=[0, 0.75], silos=[3], knobs="0:2:3")
    raw = pd.read_csv(out / "runs.csv")
    assert list(raw.columns) == COLUMNS and set(REQUIRED) <= set(raw.columns)
    assert len(raw) == len(cells) == result.ran and result.skipped == 0 and result.failed == 0
    assert sorted(cell_key(r) for r in raw[KEY_COLUMNS].to_dict("records")) == sorted(c.key() for c in cells)
    assert set(raw["method"]) == {"steffle", "pfld", "fedavg", "fermi"}
    assert (raw["error"].isna()).all()
    assert ((raw["test_error"] > 0) & (raw["test_error"] < 1)).all()
    assert np.allclose(raw["trivial_error"], 0.3)  # German: 30% bad risks in the stratified test split
    private = raw[raw["method"].isin(["steffle", "pfld"])]
    assert (private["epsilon_spent"] <= private["epsilon"] + 1e-9).all()
    assert np.isinf(raw.loc[raw["method"].isin(["fedavg", "fermi"]), ["epsilon", "epsilon_spent"]]).all().all()
    assert raw.loc[raw["method"] == "fedavg", "knob"].isna().all()
    aware = raw["method"] != "fedavg"  # fedavg ignores the notion: fairness "any", both violations, no "violation"
    assert (raw.loc[aware, "violation"] == raw.loc[aware, "demographic_parity_difference"]).all()
    assert (raw.loc[~aware, "fairness"] == "any").all() and raw.loc[~aware, "violation"].isna().all()
    # the validation split: 20% of German's 750 training records, stratified by (y, s), measured like the test
    assert (raw["n_val"] == 150).all() and (raw["n_train"] == 600).all()
    assert ((raw["val_error"] > 0) & (raw["val_error"] < 1)).all() and np.allclose(raw["val_trivial_error"], 0.3)
    assert (raw.loc[aware, "val_violation"] == raw.loc[aware, "val_demographic_parity_difference"]).all()
    assert (out / "sweep.json").exists()


def test_resume_runs_only_the_missing_cells(tmp_path):
    grid = dict(methods="steffle,fedavg", **TINY)
    first = run_sweep(tmp_path, seeds=1, jobs=1, **grid)
    before = load_runs(tmp_path)
    second = run_sweep(tmp_path, seeds=2, jobs=1, **grid)
    after = load_runs(tmp_path)
    n_seed = len(expand_grid(methods="steffle,fedavg", datasets="german", epsilons=[1, 3], heterogeneities=[0, 0.75],
                             silos=[3], knobs="0:2:3", seeds=1))
    assert first.ran == n_seed and second.ran == n_seed and second.skipped == n_seed
    assert len(pd.read_csv(tmp_path / "runs.csv")) == 2 * n_seed == len(after)
    # the first seed's rows were not redone: same timestamps
    old = after[after["seed"] == 0].sort_values(KEY_COLUMNS)["finished_at"].to_numpy()
    assert np.array_equal(old, before.sort_values(KEY_COLUMNS)["finished_at"].to_numpy())
    assert (after.loc[after["seed"] == 1, "finished_at"] > before["finished_at"].max()).all()
    third = run_sweep(tmp_path, seeds=2, jobs=1, **grid)
    assert third.ran == 0 and len(pd.read_csv(tmp_path / "runs.csv")) == 2 * n_seed


def test_a_row_cut_short_by_an_interruption_is_rerun(tmp_path):
    grid = dict(methods="fedavg", seeds=2, jobs=1, **TINY)
    run_sweep(tmp_path, **grid)
    text = (tmp_path / "runs.csv").read_text().splitlines(keepends=True)
    (tmp_path / "runs.csv").write_text("".join(text[:-1]) + text[-1][:25])  # last row half written
    assert len(load_runs(tmp_path)) == len(text) - 2
    again = run_sweep(tmp_path, **grid)
    assert again.ran == 1 and len(load_runs(tmp_path)) == len(text) - 1


def test_resume_refuses_other_fixed_settings(tmp_path):
    run_sweep(tmp_path, methods="fedavg", seeds=1, jobs=1, **TINY)
    with pytest.raises(ValueError, match="epochs: 2 there, 3 now"):
        run_sweep(tmp_path, methods="fedavg", seeds=1, jobs=1, **{**TINY, "epochs": 3})
    with pytest.raises(ValueError, match="params"):
        run_sweep(tmp_path, methods="fedavg", seeds=1, jobs=1, params=["fedavg.lr=0.1"], **TINY)


def test_failed_cells_are_recorded_and_can_be_retried(tmp_path):
    grid = dict(methods="fedavg", seeds=1, jobs=1, params={"fedavg": {"lr": -1.0}}, **TINY)  # refused at fit
    result = run_sweep(tmp_path, **grid)
    assert result.failed == result.ran == 2 and "lr must be > 0" in result.first_error
    runs = load_runs(tmp_path)
    assert runs["test_error"].isna().all() and (runs["error"] != "").all()
    assert run_sweep(tmp_path, **grid).ran == 0
    assert run_sweep(tmp_path, retry_failed=True, **grid).ran == 2
    assert len(load_runs(tmp_path)) == 2  # the retried cells replace their old rows


@pytest.mark.slow
def test_same_seed_same_metrics_with_one_or_two_workers(tmp_path):
    grid = dict(methods="steffle,pfld,fedavg", seeds=1, **{**TINY, "heterogeneities": [0.75]})
    one = load_runs(run_sweep(tmp_path / "one", jobs=1, **grid).path)
    two = load_runs(run_sweep(tmp_path / "two", jobs=2, **grid).path)
    cols = ["test_error", "demographic_parity_difference", "equalized_odds_difference", "epsilon_spent"]
    a = one.sort_values(KEY_COLUMNS).reset_index(drop=True)
    b = two.sort_values(KEY_COLUMNS).reset_index(drop=True)
    pd.testing.assert_frame_equal(a[KEY_COLUMNS + cols], b[KEY_COLUMNS + cols])


# ---------------------------------------------------------------------------------------- summary
def test_pareto_mask_on_known_points():
    e = [0.10, 0.12, 0.15, 0.11, 0.20, 0.15]
    v = [0.30, 0.20, 0.05, 0.35, 0.05, 0.05]
    # (0.11, 0.35) is dominated by (0.10, 0.30); (0.20, 0.05) by (0.15, 0.05); the two (0.15, 0.05) tie
    assert pareto_mask(e, v).tolist() == [True, True, True, False, False, True]
    fe, fv = front(e, v)
    assert fe.tolist() == [0.10, 0.12, 0.15] and fv.tolist() == [0.30, 0.20, 0.05]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=25))
def test_pareto_front_is_exactly_the_non_dominated_points(points):
    e = np.array([p[0] for p in points], dtype=float)
    v = np.array([p[1] for p in points], dtype=float)
    mask = pareto_mask(e, v)
    assert mask.any()
    for i in range(len(e)):
        dominated = any(e[j] <= e[i] and v[j] <= v[i] and (e[j] < e[i] or v[j] < v[i]) for j in range(len(e)))
        assert mask[i] == (not dominated)
    fe, fv = front(e, v)
    assert np.all(np.diff(fe) > 0) and np.all(np.diff(fv) < 0)  # sorted, strictly trading off
    # V is non-increasing in the error
    grid = np.linspace(fe[0], fe[-1] + 1, 30)
    vals = [violation_at(fe, fv, g) for g in grid]
    assert np.all(np.diff(vals) <= 1e-12)


def test_violation_at_interpolates_and_extends_to_the_right_only():
    fe, fv = [0.10, 0.20], [0.30, 0.10]
    assert math.isnan(violation_at(fe, fv, 0.05))
    assert violation_at(fe, fv, 0.10) == pytest.approx(0.30)
    assert violation_at(fe, fv, 0.15) == pytest.approx(0.20)
    assert violation_at(fe, fv, 0.25) == pytest.approx(0.10)  # a model with lower error is acceptable
    assert math.isnan(violation_at([], [], 0.2))


def test_matched_error_and_reduction_on_hand_built_fronts():
    steffle = ([0.15, 0.20], [0.05, 0.02])
    baseline = ([0.12, 0.18], [0.20, 0.10])
    r = matched_reduction(steffle, baseline)
    assert r["matched_error"] == pytest.approx(0.15)  # max of the two lowest errors
    assert r["reference_violation"] == pytest.approx(0.05)
    assert r["violation"] == pytest.approx(0.15)  # halfway between (0.12, 0.20) and (0.18, 0.10)
    assert r["reduction"] == pytest.approx(1 - 0.05 / 0.15)
    # the other way round: the baseline starts at a higher error, so e* is its lowest error
    r = matched_reduction(([0.10, 0.20], [0.30, 0.10]), ([0.18], [0.40]))
    assert r["matched_error"] == pytest.approx(0.18)
    assert r["reference_violation"] == pytest.approx(0.14) and r["reduction"] == pytest.approx(1 - 0.14 / 0.40)
    # over the error range [e*, 0.25]: exact integrals of the piecewise-linear V's
    r = matched_reduction(steffle, baseline, upper_error=0.25)
    assert r["reference_mean_violation"] == pytest.approx((0.05 * 0.035 + 0.02 * 0.05) / 0.10)
    assert r["mean_violation"] == pytest.approx((0.125 * 0.03 + 0.10 * 0.07) / 0.10)
    assert r["range_reduction"] == pytest.approx(1 - 0.00275 / 0.01075)
    assert math.isnan(matched_reduction(steffle, baseline)["range_reduction"])  # no upper error given
    assert mean_violation([0.1, 0.2], [0.3, 0.1], 0.1, 0.2) == pytest.approx(0.2)
    assert math.isnan(mean_violation([0.1, 0.2], [0.3, 0.1], 0.05, 0.2))  # V undefined at the lower end
    assert matched_reduction(([0.1], [0.0]), ([0.1], [0.0]))["reduction"] == 0.0
    assert matched_reduction(([0.1], [0.1]), ([0.1], [0.0]))["reduction"] == -math.inf


def _hand_runs() -> pd.DataFrame:
    """Two seeds per point; trivial error 0.25. steffle and pfld at ε = 1; fedavg non-private;
    pfld at ε = 3 collapsed (every point at or above the trivial error)."""
    rows = []

    def add(method, eps, knob, errs, viols):
        for seed, (e, v) in enumerate(zip(errs, viols)):
            rows.append(dict(method=method, dataset="adult", fairness="demographic_parity", epsilon=eps,
                             heterogeneity=0.0, silos=3, knob=knob, seed=seed, test_error=e,
                             demographic_parity_difference=v, equalized_odds_difference=9.0, trivial_error=0.25, epsilon_spent=eps, error=""))

    add("steffle", 1.0, 0.0, [0.14, 0.16], [0.19, 0.21])   # mean (0.15, 0.20)
    add("steffle", 1.0, 1.0, [0.17, 0.19], [0.09, 0.11])   # mean (0.18, 0.10)
    add("steffle", 1.0, 2.0, [0.26, 0.26], [0.00, 0.00])   # collapsed point: left out of the front
    add("pfld", 1.0, 0.0, [0.16, 0.16], [0.30, 0.30])      # (0.16, 0.30)
    add("pfld", 1.0, 1.0, [0.20, 0.20], [0.20, 0.20])      # (0.20, 0.20)
    add("pfld", 3.0, 1.0, [0.25, 0.27], [0.01, 0.01])      # collapsed at ε = 3
    add("fedavg", math.inf, math.nan, [0.15, 0.15], [0.25, 0.25])
    add("steffle", 3.0, 1.0, [0.15, 0.15], [0.05, 0.05])
    return pd.DataFrame(rows)


def test_summary_table_on_hand_built_runs():
    table = summarize(_hand_runs())
    at1 = table[table["epsilon"] == 1.0].set_index("method")
    assert list(at1.index) == ["steffle", "pfld", "fedavg"]  # fedavg (ε = inf) shown at every ε
    assert at1.loc["steffle", "front_size"] == 2 and at1.loc["steffle", "n_points"] == 3
    assert at1.loc["steffle", "min_violation"] == pytest.approx(0.10)  # the collapsed (0.26, 0) is excluded
    pf = at1.loc["pfld"]
    assert pf["status"] == "compared" and pf["matched_error"] == pytest.approx(0.16)
    assert pf["reference_violation"] == pytest.approx(0.20 - 0.10 / 3)  # V_S(0.16) on (0.15,0.2)-(0.18,0.1)
    assert pf["violation"] == pytest.approx(0.30)
    assert pf["reduction"] == pytest.approx(1 - (0.20 - 0.10 / 3) / 0.30)
    assert pf["reference_mean_violation"] == pytest.approx(((0.20 - 0.10 / 3 + 0.10) / 2 * 0.02 + 0.10 * 0.07) / 0.09)
    assert pf["mean_violation"] == pytest.approx((0.25 * 0.04 + 0.20 * 0.05) / 0.09)
    assert pf["range_reduction"] == pytest.approx(1 - ((0.20 - 0.10 / 3 + 0.10) / 2 * 0.02 + 0.007) / 0.02)
    fa = at1.loc["fedavg"]
    assert fa["matched_error"] == pytest.approx(0.15) and fa["reduction"] == pytest.approx(1 - 0.20 / 0.25)
    assert at1.loc["steffle", "status"] == "reference"
    at3 = table[table["epsilon"] == 3.0].set_index("method")
    assert bool(at3.loc["pfld", "collapsed"]) and at3.loc["pfld", "status"] == "collapsed"
    assert math.isnan(at3.loc["pfld", "reduction"])
    assert at3.loc["fedavg", "reduction"] == pytest.approx(1 - 0.05 / 0.25)
    # a margin makes "clearly below the trivial error" stricter: steffle's (0.18, 0.10) drops out
    strict = summarize(_hand_runs(), margin=0.08).set_index(["epsilon", "method"])
    assert strict.loc[(1.0, "steffle"), "front_size"] == 1


def test_summary_uses_the_equalized_odds_column_for_equalized_odds():
    runs = _hand_runs().assign(fairness="equalized_odds")
    pts = tradeoff_points(runs)
    assert (pts["violation"] == 9.0).all()


# ---------------------------------------------------------------------------------------- plots, CLI
@pytest.mark.slow
def test_plots_are_written_as_png_and_svg_with_the_trivial_line(tiny_sweep, tmp_path):
    out, _ = tiny_sweep
    paths = plot_results(out, out=tmp_path)
    names = {p.name for p in paths}
    assert {"tradeoff_german_demographic_parity_N3.png", "tradeoff_german_demographic_parity_N3.svg",
            "heterogeneity_german_demographic_parity_steffle_eps1_N3.png"} <= names
    for p in paths:
        data = p.read_bytes()
        assert len(data) > 1000
        if p.suffix == ".png":
            assert data[:8] == b"\x89PNG\r\n\x1a\n"
        else:
            assert b"<svg" in data[:500] and b"trivial error 0.300" in data


def test_cli_sweep_summary_plot_end_to_end(capsys, tmp_path):
    out = tmp_path / "res"
    code = main(["sweep", "--dataset", "german", "--methods", "steffle,fedavg", "--epsilon", "1",
                 "--heterogeneity", "0", "0.75", "--silos", "3", "--lam", "0", "1", "--seeds", "2", "--epochs",
                 "2", "--batch-size", "32", "--jobs", "1", "--no-progress", "--fairness", "equalized_odds",
                 "--out", str(out)])
    stdout = capsys.readouterr().out
    assert code == 0 and "ran 12 cells (0 already" in stdout
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 12 and set(runs["fairness"]) == {"equalized_odds", "any"}
    steffle = runs[runs["method"] == "steffle"]
    assert (steffle["fairness"] == "equalized_odds").all() and (steffle["violation"] == steffle["equalized_odds_difference"]).all()
    assert main(["summary", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "german · equalized_odds · ε = 1 · h = 0 · N = 3" in stdout and "fedavg (non-private)" in stdout
    table = pd.read_csv(out / "summary.csv")
    assert len(table) == 4 and set(table["method"]) == {"steffle", "fedavg"}
    assert main(["plot", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert any(p.endswith(".png") for p in printed) and any(p.endswith(".svg") for p in printed)
    assert (out / "plots" / "tradeoff_german_equalized_odds_N3.svg").exists()


@pytest.mark.parametrize("argv, needle", [
    (["--methods", "steffle,magic"], "methods: unknown method 'magic'; choose from steffle"),
    (["--lam", "0:2"], "lam: expected numbers or start:stop:count"),
    (["--heterogeneity", "2"], "heterogeneity: values must be in [0, 1]"),
    (["--silos", "0"], "silos: the number of silos must be >= 1"),
    (["--seeds", "0"], "seeds: the number of seeds must be >= 1"),
    (["--param", "steffle.nope=1"], "param: 'nope' is not a parameter of steffle"),
])
def test_cli_sweep_errors_exit_2_and_name_the_argument(capsys, tmp_path, argv, needle):
    code = main(["sweep", "--dataset", "german", "--out", str(tmp_path / "x"), *argv])
    assert code == 2 and needle in capsys.readouterr().err


def test_cli_bad_fairness_and_missing_results_exit_2(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--fairness", "equal_chance"])
    assert exc.value.code == 2 and "--fairness" in capsys.readouterr().err
    assert main(["summary", str(tmp_path / "nothing")]) == 2
    assert "no runs.csv" in capsys.readouterr().err


def test_two_sweeps_cannot_write_into_the_same_directory(tmp_path):
    from pfair.experiments.sweep import _exclusive

    with _exclusive(tmp_path):
        with pytest.raises(ValueError, match="another sweep is running"):
            run_sweep(tmp_path, methods="fedavg", seeds=1, jobs=1, **TINY)
    assert run_sweep(tmp_path, methods="fedavg", seeds=1, jobs=1, **TINY).ran == 2


# ---------------------------------------------------------------------------------------- validation protocol
def test_validation_split_is_stratified_disjoint_and_fixed_by_the_seed():
    from pfair.experiments.sweep import split_validation, validation_indices

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 1000)
    s = (rng.random(1000) < 0.3).astype(int)
    idx = validation_indices(y, s, 0.2, seed=5)
    assert np.array_equal(idx, validation_indices(y, s, 0.2, seed=5))  # fixed by the seed
    assert not np.array_equal(idx, validation_indices(y, s, 0.2, seed=6))
    assert len(np.unique(idx)) == len(idx)
    for yv in (0, 1):
        for sv in (0, 1):
            stratum = np.flatnonzero((y == yv) & (s == sv))
            assert np.isin(idx, stratum).sum() == round(0.2 * len(stratum))  # exactly its share in every (y, s)
    assert validation_indices(y, s, 0.0, seed=5).size == 0
    with pytest.raises(ValueError, match=r"val_fraction: must be in \[0, 1\)"):
        validation_indices(y, s, 1.0, seed=0)
    from pfair.datasets import load

    ds = load("german")
    train, (Xv, yv, sv) = split_validation(ds, 0.2, seed=3)
    assert train.n_train + len(yv) == ds.n_train and len(train.attrs_train) == train.n_train
    assert train.n_test == ds.n_test and np.array_equal(train.X_test, ds.X_test)  # the test split is untouched
    # the held-out rows are exactly the training rows at the validation indices, and none of them stays in training
    held = validation_indices(ds.y_train, ds.s_train, 0.2, 3)
    assert np.array_equal(Xv, ds.X_train[held])
    kept = np.setdiff1d(np.arange(ds.n_train), held)
    assert np.array_equal(train.X_train, ds.X_train[kept])


def _selection_runs() -> pd.DataFrame:
    """One setting, two seeds, validation and test numbers per configuration. SteFFLe has three
    configurations: A looks best on test but is dominated on validation by B; C is the fair end.
    PF-LD has two. Validation trivial error 0.30, test trivial error 0.25."""
    rows = []

    def add(method, knob, config, val, test):
        for seed in (0, 1):
            d = 0.01 * (1 if seed else -1)  # seeds scatter symmetrically around the means given
            rows.append(dict(method=method, dataset="adult", fairness="demographic_parity", epsilon=1.0,
                             heterogeneity=0.0, silos=3, knob=knob, config=config, seed=seed,
                             val_error=val[0] + d, val_demographic_parity_difference=val[1], val_equalized_odds_difference=0.5,
                             val_trivial_error=0.30, test_error=test[0] + d, demographic_parity_difference=test[1],
                             equalized_odds_difference=0.5, trivial_error=0.25, epsilon_spent=1.0, error=""))

    add("steffle", 0.0, "lr_theta=0.1", val=(0.16, 0.20), test=(0.14, 0.10))  # A: lucky on test only
    add("steffle", 0.0, "lr_theta=0.25", val=(0.15, 0.18), test=(0.16, 0.22))  # B: dominates A on validation
    add("steffle", 1.0, "lr_theta=0.25", val=(0.20, 0.05), test=(0.21, 0.08))  # C
    add("pfld", 0.0, "lr=0.25", val=(0.17, 0.30), test=(0.17, 0.30))
    add("pfld", 1.0, "lr=0.25", val=(0.22, 0.10), test=(0.22, 0.10))
    return pd.DataFrame(rows)


def test_summary_selects_fronts_on_validation_and_reports_test_numbers():
    runs = _selection_runs()
    val = summarize(runs).set_index("method")  # auto: every row has validation metrics
    assert (val["selection"] == "validation").all()
    s = val.loc["steffle"]
    # front by validation: B (0.15, 0.18) and C (0.20, 0.05); A is dominated by B on validation
    assert s["front_size"] == 2 and s["min_error"] == pytest.approx(0.15)
    assert s["min_test_error"] == pytest.approx(0.16)  # B's test error, not A's lucky 0.14
    assert s["min_violation"] == pytest.approx(0.08)  # C's test violation
    assert s["trivial_error"] == pytest.approx(0.30)  # the validation trivial error bounds the band
    p = val.loc["pfld"]
    # matched on validation error: e* = max(0.15, 0.17) = 0.17; SteFFLe's test violation there is B→C
    # interpolated along validation error: 0.22 + (0.17 - 0.15) / 0.05 · (0.08 - 0.22)
    v_s = 0.22 + 0.4 * (0.08 - 0.22)
    assert p["matched_error"] == pytest.approx(0.17)
    assert p["reference_violation"] == pytest.approx(v_s) and p["violation"] == pytest.approx(0.30)
    assert p["reduction"] == pytest.approx(1 - v_s / 0.30)
    assert p["reference_test_error"] == pytest.approx(0.16 + 0.4 * 0.05) and p["test_error"] == pytest.approx(0.17)
    # the band [0.17, 0.30] of validation error, exact integrals of the piecewise-linear test violations
    ref_band = ((v_s + 0.08) / 2 * 0.03 + 0.08 * 0.10) / 0.13
    pf_band = ((0.30 + 0.10) / 2 * 0.05 + 0.10 * 0.08) / 0.13
    assert p["reference_mean_violation"] == pytest.approx(ref_band) and p["mean_violation"] == pytest.approx(pf_band)
    # selecting on test picks A instead (and matches on test error): a different, optimistic answer
    test = summarize(runs, select="test").set_index("method")
    assert (test["selection"] == "test").all()
    assert test.loc["steffle", "min_error"] == pytest.approx(0.14) and test.loc["steffle", "front_size"] == 2
    assert test.loc["pfld", "reference_violation"] == pytest.approx(0.10 - 0.03 / 0.07 * 0.02)
    assert test.loc["pfld", "reduction"] > p["reduction"] + 0.2
    # runs without a validation split fall back to test selection; asking for validation is an error
    legacy = runs.drop(columns=[c for c in runs.columns if c.startswith("val_")])
    assert (summarize(legacy)["selection"] == "test").all()
    with pytest.raises(ValueError, match="select='validation' needs validation metrics"):
        summarize(legacy, select="validation")


def test_rows_of_notion_agnostic_and_partition_free_methods_join_every_setting():
    from pfair.experiments.summary import broadcast

    runs = _selection_runs()
    runs = pd.concat([runs, runs.assign(heterogeneity=0.75)], ignore_index=True)
    base = runs.iloc[:1]
    fedavg = base.assign(method="fedavg", fairness="any", knob=math.nan, config="lr=0.1")
    eg = base.assign(method="eg", heterogeneity=math.nan, silos=0, knob=0.01, config="eta0=2")
    out = broadcast(pd.concat([runs, fedavg, eg], ignore_index=True))
    assert set(out.loc[out["method"] == "fedavg", "fairness"]) == {"demographic_parity"}
    assert sorted(out.loc[out["method"] == "eg", "heterogeneity"]) == [0.0, 0.75]
    assert set(out.loc[out["method"] == "eg", "silos"]) == {3}
    table = summarize(pd.concat([runs, eg], ignore_index=True))
    assert set(table.loc[table["method"] == "eg", "heterogeneity"]) == {0.0, 0.75}


# ---------------------------------------------------------------------------------------- ExponentiatedGradient
@pytest.mark.slow
def test_exponentiated_gradient_reference_fits_and_trades_error_for_fairness():
    from pfair import metrics
    from pfair.experiments.reference import ExponentiatedGradientLR

    rng = np.random.default_rng(1)
    n = 600
    s = (rng.random(n) < 0.5).astype(int)
    X = np.column_stack([s + rng.normal(0, 0.7, n), rng.normal(0, 1, n)])
    y = (X[:, 0] + 0.5 * X[:, 1] + rng.normal(0, 0.3, n) > 0.5).astype(int)
    silos = rng.integers(0, 3, n)
    loose = ExponentiatedGradientLR(difference_bound=0.5, max_iter=10).fit(X, y, sensitive_features=s, silos=silos)
    tight = ExponentiatedGradientLR(difference_bound=0.01, max_iter=10).fit(X, y, sensitive_features=s, silos=silos)
    v_loose = metrics.demographic_parity_violation(y, loose.predict(X), sensitive_features=s)
    v_tight = metrics.demographic_parity_violation(y, tight.predict(X), sensitive_features=s)
    e_loose, e_tight = np.mean(loose.predict(X) != y), np.mean(tight.predict(X) != y)
    assert v_loose > 0.3 and v_tight < 0.1 and e_tight > e_loose + 0.1  # fairness bought with error
    assert set(np.unique(tight.predict(X))) <= {0, 1}
    # the registry maps the knob onto eps and the notion onto the constraint; the partition is ignored
    model = get_method("eg").build(knob=0.02, fairness="equalized_odds", epsilon=math.inf, epochs=5, batch_size=64,
                                   seed=4, overrides={"eta0": 0.5})
    assert (model.difference_bound, model.fairness, model.eta0, model.seed) == (0.02, "equalized_odds", 0.5, 4)
    assert not METHODS["eg"].uses_partition and not METHODS["eg"].private
    with pytest.raises(ValueError, match="fairness: 'equal_opportunity' is not supported"):
        ExponentiatedGradientLR(fairness="equal_opportunity").fit(X, y, sensitive_features=s)
    with pytest.raises(ValueError, match="difference_bound: must be a finite number > 0"):
        ExponentiatedGradientLR(difference_bound=0).fit(X, y, sensitive_features=s)


# ---------------------------------------------------------------------------------------- the comparison grid
def test_every_method_gets_the_same_tuning_budget_and_the_grid_expands_as_documented():
    from pfair.experiments import grid

    assert set(grid.METHOD_GRIDS) == set(METHODS)
    assert {m: g.size() for m, g in grid.METHOD_GRIDS.items()} == dict.fromkeys(METHODS, grid.BUDGET)
    for name, g in grid.METHOD_GRIDS.items():  # the tuned axis is the method's own step size
        assert set(g.tuning) == ({METHODS[name].step_size} if METHODS[name].step_size else set())
    planned = grid.plan("/nonexistent", ["paper", "fig2"], None, 15)
    by = {(sw.part, sw.method): len(cs) for sw, _, cs in planned if len(cs)}
    # paper: 3 data sets × 2 notions × 3 ε × 2 h × N = 3 × 12 configs × 15 seeds for a private method
    assert by[("paper", "steffle")] == 3 * 2 * 3 * 2 * 12 * 15
    assert by[("paper", "fermi")] == 3 * 2 * 2 * 12 * 15  # non-private: ε = inf once
    assert by[("paper", "fedavg")] == 3 * 2 * 12 * 15  # notion-agnostic as well
    assert by[("paper", "eg")] == 3 * 2 * 12 * 15  # no partition: once per data set, notion and seed
    assert by[("paper", "single_shot")] == 3 * 2 * 12 * 15  # notion-agnostic
    # fig2: h ∈ {0, 0.1, …, 0.9} at N = 3, then N ∈ {1, 2, 3, 4, 6, 8, 10, 12} at h ∈ {0, 0.75}; the one
    # shared point (h = 0, N = 3) runs once
    fig2 = sum(len(cs) for sw, _, cs in planned if sw.part == "fig2" and sw.method == "steffle")
    assert fig2 == (10 + 2 * 8 - 1) * 12 * 15
    paths = {d for _, d, _ in planned}
    assert {str(p) for p in paths} >= {"/nonexistent/paper/steffle", "/nonexistent/fig2/fedavg"}


def test_grid_runs_the_steffle_family_at_todays_defaults_and_the_others_at_their_pinned_settings(monkeypatch, tmp_path):
    from pfair.experiments import grid
    from pfair.settings import SteFFLeSettings

    seen = {}

    def fake_run_sweep(directory, **kw):
        seen[Path(directory).name] = (kw["epochs"], kw["batch_size"], kw["tuning"])
        return SimpleNamespace(ran=0, skipped=0, failed=0, seconds=0.0)

    monkeypatch.setattr(grid, "run_sweep", fake_run_sweep)  # where the grid looks it up
    grid.run_grid(tmp_path, parts=["paper"], methods="steffle,dp_fermi,pfld,fedavg", seeds=1, progress=False)
    for name in ("steffle", "dp_fermi"):  # None and "auto": what pfair train resolves
        epochs, batch, tuning = seen[name]
        assert (epochs, batch) == (None, "auto")
        assert SteFFLeSettings.lr_theta in tuning[name]["lr_theta"]  # the default step is one of the two
    assert seen["pfld"][:2] == seen["fedavg"][:2] == (grid.PINNED_EPOCHS, grid.PINNED_BATCH)


def test_grid_dry_run_prints_the_plan_and_runs_nothing(capsys, tmp_path):
    from pfair.experiments import grid

    code = grid.main(["--out", str(tmp_path / "g"), "--dry-run", "--methods", "central_erm,eg", "--seeds", "2",
                      "--parts", "paper", "--jobs", "2"])
    text = capsys.readouterr().out
    assert code == 0 and not (tmp_path / "g").exists()
    assert "paper  central_erm" in text and "paper  eg" in text and "steffle" not in text
    n = 3 * 2 * 12 * 2
    assert f"total: {2 * n} cells" in text
    expected_h = sum(grid.FIT_SECONDS[d][m] * 2 * 12 * 2 for d in grid.FIT_SECONDS
                     for m in ("central_erm", "eg")) / 3600
    assert f"{expected_h:.2f} core-hours" in text and f"about {expected_h / 2:.2f} h of wall time" in text
    assert grid.main(["--out", str(tmp_path), "--dry-run", "--methods", "magic"]) == 2
    assert "unknown method 'magic'" in capsys.readouterr().err
    # a data-set subset (the pilot): COMPAS alone, one seed
    assert grid.main(["--out", str(tmp_path / "p"), "--dry-run", "--methods", "steffle", "--datasets", "compas",
                      "--seeds", "1", "--parts", "paper"]) == 0
    assert f"total: {2 * 3 * 2 * 12} cells" in capsys.readouterr().out


def test_report_blocks_are_replaced_and_pending_without_steffle(tmp_path):
    from pfair.experiments.report import replace_blocks, tables

    text = ("intro\n<!-- generated:matched -->\nold numbers\n<!-- /generated:matched -->\n"
            "<!-- generated:other -->\nkeep\n<!-- /generated:other -->\n")
    new = replace_blocks(text, {"matched": "| a |\n"}, "from x")
    assert new == ("intro\n<!-- generated:matched -->\n<!-- from x -->\n| a |\n<!-- /generated:matched -->\n"
                   "<!-- generated:other -->\nkeep\n<!-- /generated:other -->\n")
    runs = _selection_runs()
    blocks = tables(runs[runs["method"] == "pfld"])
    assert "pending regeneration" in blocks["matched"] and "pending regeneration" in blocks["verdict"]
    full = tables(runs)
    assert "| 1 | 0 | 0.150 | 0.170 | " in full["matched"] and _pct_text(1 - (0.22 + 0.4 * (0.08 - 0.22)) / 0.30) in \
        full["matched"]
    assert "| adult | demographic parity | 1 | 0 | PF-LD |" in full["verdict"] and "+64%" in full["verdict"]


def _pct_text(v: float) -> str:
    return f"{100 * v:+.0f}%".replace("-", "−")


@pytest.mark.slow
def test_paper_grid_script_dry_run_runs_nothing(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pfair

    root = Path(__file__).resolve().parents[1]
    # The pfair these tests import (the installed wheel under make test, python/ in editable mode).
    env = {**os.environ, "PYTHON": sys.executable,
           "PYTHONPATH": str(Path(pfair.__file__).resolve().parents[1]) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = tmp_path / "results"
    done = subprocess.run(["bash", str(root / "examples" / "paper_grid.sh"), str(out), "--dry-run", "--methods",
                           "steffle,fedavg", "--parts", "paper"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"{out}/paper/steffle" in done.stdout and "total: 7560 cells" in done.stdout  # 6,480 + 1,080
    assert not out.exists()


def test_schema_1_runs_read_back_and_are_summarised_with_test_selection(tmp_path):
    old_columns = ["method", "dataset", "fairness", "epsilon", "heterogeneity", "silos", "knob", "seed",
                   "test_error", "trivial_error", "dp_violation", "eo_violation", "epsilon_spent", "error",
                   "finished_at"]
    runs = _hand_runs().assign(finished_at=1.0).rename(columns={v: k for k, v in RENAMED.items()})
    runs[old_columns].to_csv(tmp_path / "runs.csv", index=False)
    back = load_runs(tmp_path)
    assert (back["config"] == "").all() and back["val_error"].isna().all() and len(back) == len(runs)
    table = summarize(tmp_path)
    assert (table["selection"] == "test").all()
    pf = table[(table["epsilon"] == 1.0) & (table["method"] == "pfld")].iloc[0]
    assert pf["reduction"] == pytest.approx(1 - (0.20 - 0.10 / 3) / 0.30)  # as in the hand-built summary test
    with pytest.raises(ValueError, match="another --out"):  # a schema-2 sweep does not append to it
        run_sweep(tmp_path, methods="fedavg", seeds=1, jobs=1, **TINY)


@pytest.mark.slow
def test_a_schema_2_sweep_with_the_old_metric_names_is_read_and_resumed_under_fairlearns_names(tmp_path):
    grid = dict(methods="fedavg", seeds=1, **{**TINY, "heterogeneities": [0.0]})
    first = run_sweep(tmp_path, **grid)
    file = tmp_path / "runs.csv"
    lines = file.read_text().splitlines(keepends=True)
    old_header = ",".join({v: k for k, v in RENAMED.items()}.get(c, c) for c in COLUMNS)
    assert "dp_violation" in old_header and "demographic_parity_difference" not in old_header
    file.write_text(old_header + "\r\n" + "".join(lines[1:]))  # as schema 2 wrote it
    settings = json.loads((tmp_path / "sweep.json").read_text())
    (tmp_path / "sweep.json").write_text(json.dumps({**settings, "schema": 2}))
    back = load_runs(tmp_path)
    assert {"demographic_parity_difference", "val_equalized_odds_difference"} <= set(back.columns)
    assert not {"dp_violation", "eo_violation"} & set(back.columns)
    pd.testing.assert_frame_equal(back, load_runs(first.path))
    # A resumed sweep upgrades the header and appends under it.
    more = run_sweep(tmp_path, **{**grid, "seeds": 2})
    assert more.ran == len(load_runs(tmp_path)) // 2 and more.skipped == len(back)
    assert file.read_text().splitlines()[0].split(",") == COLUMNS
    assert json.loads((tmp_path / "sweep.json").read_text())["schema"] == 3


# ---------------------------------------------------------------------------------------- defaults
def test_a_sweep_at_the_default_batch_runs_each_method_at_its_own_default(tmp_path):
    """`pfair sweep` without --batch-size: SteFFLe and its named configurations resolve
    batch_size="auto" as `pfair train` does (the cap depends on ε and λ), every other method takes
    its own default batch; the batch_size column says what each cell used."""
    from pfair.experiments.sweep import cell_batch

    steffle, fermi, fedavg, single = (get_method(m) for m in ("steffle", "fermi", "fedavg", "single_shot"))
    assert cell_batch(steffle, "auto", 10**6) == "auto" and cell_batch(fermi, "auto", 10**6) == "auto"
    assert cell_batch(fedavg, "auto", 10**6) == 256 and cell_batch(fedavg, "auto", 100) == 100
    assert cell_batch(single, "auto", 10**6) == "auto"  # no batch_size: never passed
    assert cell_batch(steffle, 512, 300) == 300


@pytest.mark.slow
def test_a_default_sweep_records_the_batch_each_cell_resolved(tmp_path):
    from pfair.settings import AUTO_BATCH_NONPRIVATE, AUTO_BATCH_PRIVATE, AUTO_RUN_BATCH

    # Credit Card's silos train on about 5,400 records each: above the non-private cap and the
    # batch a private run's settings are stated for, below the private cap.
    result = run_sweep(tmp_path, methods="steffle,fedavg", datasets="credit_card", epsilons=[1], heterogeneities=[0],
                       silos=[3], lams=[0, 1], seeds=1, epochs=1, jobs=1, progress=False)
    used = result.runs.groupby(["method", "knob"], dropna=False)["batch_size"].first()
    # ε = 1, λ = 1: noisy rounds, the whole smallest training share (a run stretched to it)
    assert AUTO_RUN_BATCH < used[("steffle", 1.0)] < AUTO_BATCH_PRIVATE
    assert used[("steffle", 0.0)] == AUTO_BATCH_NONPRIVATE  # λ = 0: nothing sent depends on s
    assert used.xs("fedavg").iloc[0] == 256  # FedAvg's own default
    assert json.loads((tmp_path / "sweep.json").read_text())["batch_size"] == "auto"


def test_a_run_worse_than_constant_is_silent_only_without_a_warning_that_says_so():
    """load_runs' derived columns: a run at or above the constant predictor's test error is a silent
    failure unless one of pfair's warnings said the model was no better, or that the comparison
    could not be made (the figures too noisy, a constant predictor almost always right)."""
    from pfair.experiments.sweep import add_constant_columns

    from pfair.validation import WITHIN_NOISE

    messages = ["", "SteFFLe: the last model is not clearly better than the constant predictor (validation error",
                f"SteFFLe: {WITHIN_NOISE}: validation error 0.41 (x)",
                # what runs of versions before 2026-12-08 recorded
                "the released validation figures are too noisy to tell the model from the constant predictor (x)",
                "PFLD: the constant predictor's error on the silos' training records is 0.0040, too small to tell "
                "a model from it; returned the last model", "an unrelated warning"]
    df = pd.DataFrame({"test_error": [0.5] * 6, "trivial_error": [0.4] * 6, "warning_messages": messages})
    out = add_constant_columns(df)
    assert out["worse_than_constant"].all()
    assert list(out["silent_failure"]) == [True, False, False, False, False, True]


# ---------------------------------------------------------------------- a sweep script without the __main__ guard


def test_sweep_script_without_main_guard_names_the_guard(tmp_path):
    script = tmp_path / "noguard.py"
    script.write_text(textwrap.dedent(f"""
        from pfair.experiments import run_sweep
        run_sweep({str(tmp_path / "out")!r}, methods="fedavg", datasets="german", epsilons=[1],
                  heterogeneities=[0], silos=[3], lams="0:1:2", seeds=1, epochs=1, batch_size=32,
                  progress=False, jobs=2)
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError") and 'if __name__ == "__main__":' in last, proc.stderr[-2000:]
    assert "another sweep is running" not in last
