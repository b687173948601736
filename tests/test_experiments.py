"""Sweeps, the summary table and the figures (pfair.experiments) and their CLI commands."""

from __future__ import annotations

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
from pfair.experiments.sweep import COLUMNS, KEY_COLUMNS, cell_key

# A small, fast grid on German credit (750 training records): 2 epochs, batches of 32.
TINY = dict(datasets="german", epsilons=[1, 3], heterogeneities=[0, 0.75], silos=[3], lams="0:2:3",
            epochs=2, batch_size=32, progress=False)
REQUIRED = ["method", "dataset", "fairness", "epsilon", "heterogeneity", "silos", "knob", "seed", "test_error",
            "dp_violation", "eo_violation", "epsilon_spent", "seconds", "trivial_error"]


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    result = run_sweep(out, methods="steffle,pfld,fedavg,fermi", seeds=2, jobs=1, **TINY)
    return out, result


# ---------------------------------------------------------------------------------------- grid
def test_grid_collapses_knobless_and_nonprivate_methods():
    cells = expand_grid(methods="steffle,pfld,fedavg,central_erm,fermi,single_shot", datasets="adult",
                        epsilons=[1, 3, 9], heterogeneities=[0, 0.75], silos=[3], knobs="0:2:11", seeds=2)
    count = pd.Series([c.method for c in cells]).value_counts().to_dict()
    # private with a knob: ε × h × N × λ × seeds; non-private: ε = inf only; knob-less: knob = NaN only
    assert count == {"steffle": 3 * 2 * 11 * 2, "pfld": 3 * 2 * 11 * 2, "fermi": 2 * 11 * 2,
                     "single_shot": 2 * 11 * 2, "fedavg": 2 * 2, "central_erm": 2 * 2}
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
    assert (raw["violation"] == raw["dp_violation"]).all()
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
    grid = dict(methods="fedavg", seeds=1, jobs=1, **{**TINY, "batch_size": 400})  # > a silo of 250
    result = run_sweep(tmp_path, **grid)
    assert result.failed == result.ran == 2 and "batch_size=400 is larger than silo" in result.first_error
    runs = load_runs(tmp_path)
    assert runs["test_error"].isna().all() and (runs["error"] != "").all()
    assert run_sweep(tmp_path, **grid).ran == 0
    assert run_sweep(tmp_path, retry_failed=True, **grid).ran == 2
    assert len(load_runs(tmp_path)) == 2  # the retried cells replace their old rows


def test_same_seed_same_metrics_with_one_or_two_workers(tmp_path):
    grid = dict(methods="steffle,pfld,fedavg", seeds=1, **{**TINY, "heterogeneities": [0.75]})
    one = load_runs(run_sweep(tmp_path / "one", jobs=1, **grid).path)
    two = load_runs(run_sweep(tmp_path / "two", jobs=2, **grid).path)
    cols = ["test_error", "dp_violation", "eo_violation", "epsilon_spent"]
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
                             heterogeneity=0.0, silos=3, knob=knob, seed=seed, test_error=e, dp_violation=v,
                             eo_violation=9.0, trivial_error=0.25, epsilon_spent=eps, error=""))

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
    assert len(runs) == 12 and set(runs["fairness"]) == {"equalized_odds"}
    assert (runs["violation"] == runs["eo_violation"]).all()
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
