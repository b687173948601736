"""The command line: train (text and JSON), privacy, privacy-report, datasets, errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pfair.cli import main
from pfair.privacy import epsilon_for


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_train_json_has_the_promised_keys_and_honest_privacy(capsys, tmp_path):
    out_file = tmp_path / "run.json"
    code, out, _ = run(capsys, "train", "--dataset", "adult", "--silos", "3", "--epsilon", "1", "--lam", "1.0",
                       "--epochs", "3", "--json", "--out", str(out_file))
    assert code == 0
    result = json.loads(out)
    for key in ("test_error", "demographic_parity_difference", "equalized_odds_difference", "epsilon_spent", "delta",
                "seconds", "trivial_error"):
        assert key in result
    assert 0 < result["test_error"] < result["trivial_error"]
    assert 0.9 < result["epsilon_spent"] <= 1.0
    code, out, _ = run(capsys, "privacy-report", str(out_file))
    assert code == 0 and "epsilon_spent" in out and "shuffle" in out
    code, out, _ = run(capsys, "privacy-report", str(out_file), "--json")
    rows = json.loads(out)
    assert len(rows) == 3 and all(r["epsilon_spent"] <= 1.0 for r in rows)


@pytest.mark.parametrize("mode, extra, n_ledgers", [
    ("divisions", [], 3),  # one sensitive division per silo
    ("central_sensitive", [], 1),  # one central sensitive silo
    ("hybrid", ["--sensitive-silos", "2", "--dummy-noise"], 2),
])
def test_train_runs_every_hybrid_mode_and_reports_its_sensitive_silos(capsys, tmp_path, mode, extra, n_ledgers):
    out_file = tmp_path / "run.json"
    code, out, _ = run(capsys, "train", "--dataset", "german", "--silos", "3", "--epsilon", "2", "--lam", "1.0",
                       "--epochs", "2", "--batch-size", "32", "--mode", mode, *extra, "--json", "--out", str(out_file))
    assert code == 0
    result = json.loads(out)
    assert result["mode"] == mode and result["test_error"] < 1.0
    assert len(result["noise_multiplier"]) == n_ledgers and result["epsilon_spent"] <= 2.0
    rows = json.loads(out_file.read_text())["privacy_report"]
    assert {r["accounting"] for r in rows} == {"public_batch"}
    # --no-amplification charges every round in full.
    code, out, _ = run(capsys, "train", "--dataset", "german", "--silos", "3", "--epsilon", "2", "--lam", "1.0",
                       "--epochs", "2", "--batch-size", "32", "--mode", mode, *extra, "--no-amplification",
                       "--json", "--out", str(out_file))
    assert code == 0
    rows = json.loads(out_file.read_text())["privacy_report"]
    assert {r["accounting"] for r in rows} == {"full_batch"} and all(r["sample_rate"] == 1.0 for r in rows)


def test_train_text_output_and_nonprivate(capsys):
    code, out, err = run(capsys, "train", "--dataset", "adult", "--epsilon", "none", "--lam", "0", "--epochs", "2")
    assert code == 0
    assert "test error" in out and "privacy       none" in out


def test_train_says_when_it_returns_the_constant_predictor(capsys):
    # lr_theta 0 keeps θ at zero, which predicts German's minority class: at lam > 0 the fit
    # returns the constant predictor itself, and the summary says so.
    code, out, err = run(capsys, "train", "--dataset", "german", "--epsilon", "none", "--lam", "4", "--epochs", "1",
                         "--lr-theta", "0")
    assert code == 0
    assert "model         the constant predictor (no model of the run was better)" in out
    assert "test error    0.3000   (trivial constant predictor: 0.3000)" in out
    assert "returned the constant predictor" in err


def test_privacy_command_both_directions(capsys):
    code, out, _ = run(capsys, "privacy", "--epsilon", "1", "--delta", "1e-5", "--batch", "256", "--silo-size",
                       "12000", "--epochs", "40", "--json")
    assert code == 0
    res = json.loads(out)
    z = res["noise_multiplier"]
    steps = 40 * -(-12000 // 256)
    # The default is SteFFLe's account in attribute mode: shuffled epochs, public batches, exact.
    assert res["sampling"] == "shuffle" and res["accountant"] == "best"
    eps = epsilon_for(noise_multiplier=z, sample_rate=256 / 12000, steps=steps, delta=1e-5, sampling="shuffle",
                      accountant="exact")
    assert 0.98 <= eps <= 1.0
    # Random public batches priced by RDP need more noise for the same target.
    code, out, _ = run(capsys, "privacy", "--epsilon", "1", "--delta", "1e-5", "--batch", "256", "--silo-size",
                       "12000", "--epochs", "40", "--sampling", "public_batch", "--accountant", "rdp", "--json")
    assert code == 0 and json.loads(out)["noise_multiplier"] > 1.1 * z
    # The hidden-batch bound, on request, needs less noise for the same target.
    code, out, _ = run(capsys, "privacy", "--epsilon", "1", "--delta", "1e-5", "--batch", "256", "--silo-size",
                       "12000", "--epochs", "40", "--sampling", "without_replacement", "--accountant", "rdp",
                       "--json")
    assert code == 0 and json.loads(out)["noise_multiplier"] < z / 2


def test_bad_arguments_exit_with_a_message(capsys):
    code, _, err = run(capsys, "train", "--dataset", "nope", "--epochs", "1")
    assert code == 2 and "nope" in err
    code, _, err = run(capsys, "train", "--dataset", "adult", "--epsilon", "-1", "--epochs", "1")
    assert code == 2 and "epsilon must be > 0" in err
    code, _, err = run(capsys, "privacy-report", "/nonexistent/run.json")
    assert code == 2 and "does not exist" in err


def test_datasets_listing_and_console_script(capsys):
    code, out, _ = run(capsys, "datasets")
    assert code == 0 and "adult" in out and "credit_card" in out
    proc = subprocess.run([sys.executable, "-m", "pfair.cli", "datasets"], capture_output=True, text=True, check=True)
    assert "compas" in proc.stdout


# ---------------------------------------------------------------------------------------------- user CSV
@pytest.fixture(scope="module")
def user_csv(tmp_path_factory):
    """A user's own table: the bundled German credit data written out as a CSV, plus a branch
    column that is not a feature (used only to split the records into silos)."""
    import numpy as np

    from pfair.datasets import load_frame

    frame = load_frame("german")
    frame["branch"] = np.random.default_rng(0).choice(["Bonn", "Essen", "Kiel"], size=len(frame))
    path = tmp_path_factory.mktemp("user") / "loans.csv"
    frame.to_csv(path, index=False)
    return path


def test_train_reads_a_user_csv_and_partitions_by_any_column(capsys, tmp_path, user_csv):
    base = ["train", "--csv", str(user_csv), "--label", "credit_risk", "--sensitive", "sex", "--positive-label", "1",
            "--epsilon", "2", "--epochs", "2", "--batch-size", "32", "--json"]
    out_file = tmp_path / "run.json"
    code, out, err = run(capsys, *base, "--keep", "branch", "--partition-by", "branch", "--heterogeneity", "1",
                         "--out", str(out_file))
    assert code == 0, err
    result = json.loads(out)
    assert result["dataset"] == "loans" and 0 < result["test_error"] < 1 and result["epsilon_spent"] <= 2.0
    rows = json.loads(out_file.read_text())["privacy_report"]
    assert sum(r["n_records"] + r["n_held_out"] for r in rows) == 750  # 3:1 split of 1000 records
    # A numeric feature works as the partition attribute too; so does a categorical feature.
    for column in ("age", "housing"):
        code, out, err = run(capsys, *base, "--drop", "branch", "--partition-by", column, "--heterogeneity", "0.75")
        assert code == 0, err
    # The label given as text matches the integer column; a value that is not in it is named.
    code, _, err = run(capsys, *base, "--positive-label", "good")
    assert code == 2 and "positive_label: 'good' does not occur" in err


@pytest.mark.parametrize("argv, message", [
    (["--csv", "X", "--sensitive", "sex"], "--csv needs --label COLUMN"),
    (["--label", "credit_risk"], "--label need --csv PATH"),
    (["--csv", "X", "--dataset", "adult", "--label", "a", "--sensitive", "b"], "--csv and --dataset"),
    (["--csv", "/nonexistent/loans.csv", "--label", "a", "--sensitive", "b"], "no such file"),
    (["--csv", "CSV", "--label", "credit_risk", "--sensitive", "sex", "--partition-by", "zip",
      "--heterogeneity", "0.5"], "by='zip' is not a raw attribute"),
    (["--csv", "CSV", "--label", "credit_risk", "--sensitive", "sex", "--keep", "zip"], "keep: column(s) ['zip']"),
])
def test_train_csv_errors_name_the_option(capsys, user_csv, argv, message):
    argv = [str(user_csv) if a == "CSV" else a for a in argv]
    code, _, err = run(capsys, "train", *argv, "--epochs", "1")
    assert code == 2 and message in err


def test_sweep_runs_on_a_user_csv(capsys, tmp_path, user_csv):
    code, out, err = run(capsys, "sweep", "--csv", str(user_csv), "--label", "credit_risk", "--sensitive", "sex",
                         "--positive-label", "1", "--keep", "branch", "--partition-by", "branch",
                         "--methods", "steffle,fedavg", "--epsilon", "3", "--heterogeneity", "0", "1",
                         "--lam", "1", "--seeds", "1", "--epochs", "1", "--jobs", "1",
                         "--no-progress", "--out", str(tmp_path))
    assert code == 0, err
    from pfair.experiments import load_runs

    runs = load_runs(tmp_path)
    assert len(runs) == 4 and (runs["error"].fillna("") == "").all()
    # The default batch (256) is larger than these silos (600 records in 3): each cell used its
    # smallest silo's size instead of failing.
    assert (runs["batch_size"] <= 200).all() and (runs["batch_size"] > 50).all()
    spec = runs["dataset"].iloc[0]
    assert spec.startswith("csv:") and "partition_by=branch" in spec
    # The 750 training records: 80% train the model, 20% are the validation split.
    assert (runs["n_train"] + runs["n_val"] == 750).all() and (runs["n_val"] == 150).all()
    # The same spec is accepted by --dataset (and by pfair.datasets.load).
    from pfair.datasets import load

    ds = load(spec)
    assert ds.partition_by == "branch" and "branch" in ds.attrs_train.columns
    assert not any(f.startswith("branch") for f in ds.feature_names)
    from pfair.federation import Federation

    fed = Federation.for_dataset(ds, 3, heterogeneity=1.0)  # as a sweep cell builds its silos
    assert fed.partition_by == "branch"
    assert all(silo.attrs["branch"].value_counts(normalize=True).iloc[0] > 0.9 for silo in fed.silos)
    code, _, err = run(capsys, "sweep", "--sensitive", "sex", "--out", str(tmp_path / "x"))
    assert code == 2 and "--sensitive needs --csv" in err


def _small_loans_csv(path, n: int = 300, seed: int = 0):
    """A small synthetic loans table: a text label, a sensitive column and a region to split by."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    sex = rng.choice(["f", "m"], n)
    income = rng.normal(50.0, 10.0, n) + 3.0 * (sex == "m")
    pd.DataFrame({
        "income": income, "age": rng.integers(18, 80, n), "sex": sex,
        "region": rng.choice(["north", "south", "east"], n),
        "default": np.where(income + rng.normal(0.0, 5.0, n) > 52.0, "yes", "no"),
    }).to_csv(path, index=False)
    return path


def test_plot_draws_a_sweep_of_a_user_csv_into_safe_file_names(capsys, tmp_path):
    csv = _small_loans_csv(tmp_path / "loans.csv")
    out = tmp_path / "results" / "loans"
    code, _, err = run(capsys, "sweep", "--csv", str(csv), "--label", "default", "--positive-label", "yes",
                       "--sensitive", "sex", "--partition-by", "region", "--methods", "steffle,fedavg",
                       "--epsilon", "1", "--heterogeneity", "0", "0.75", "--lam", "0", "1", "--seeds", "1",
                       "--epochs", "1", "--jobs", "1", "--no-progress", "--out", str(out))
    assert code == 0, err
    code, printed, err = run(capsys, "plot", str(out), "--format", "png")
    assert code == 0, err
    written = sorted((out / "plots").iterdir())
    names = [p.name for p in written]
    assert [str(p) for p in written] == sorted(printed.split())
    assert any(n.startswith("tradeoff_loans-") for n in names)
    assert any(n.startswith("heterogeneity_loans-") for n in names)
    for name in names:
        assert not set(name) & set("/\\?&:=*<>|\"' "), name
    # Another spec of the same file (other options) gets its own figures instead of overwriting.
    from pfair.experiments.plots import dataset_slug

    spec = "csv:/data/loans.csv?label=default&sensitive=sex"
    assert dataset_slug(spec).startswith("loans-") and dataset_slug(spec) != dataset_slug(spec + "&seed=1")
    assert dataset_slug("adult") == "adult" and dataset_slug("credit_card") == "credit_card"


def _gappy_csv(path):
    """The small loans table with its income column 70% empty."""
    import numpy as np
    import pandas as pd

    frame = pd.read_csv(_small_loans_csv(path, n=400))
    frame.loc[np.random.default_rng(2).random(len(frame)) < 0.7, "income"] = np.nan
    frame.to_csv(path, index=False)
    return path, int(frame["income"].isna().sum())


def test_train_csv_refuses_a_mostly_empty_column_unless_dropna(capsys, tmp_path):
    from pfair.datasets import MAX_DROPPED_SHARE

    csv, n_missing = _gappy_csv(tmp_path / "gappy.csv")
    base = ["train", "--csv", str(csv), "--label", "default", "--positive-label", "yes", "--sensitive", "sex",
            "--epsilon", "none", "--epochs", "1", "--json"]
    code, _, err = run(capsys, *base)
    assert code == 2 and f"'income' {n_missing}" in err and "--dropna" in err and "--drop income" in err
    code, out, err = run(capsys, *base, "--dropna")
    assert code == 0, err
    result = json.loads(out)
    assert any(f"{n_missing} of 400 rows" in w and "dropped" in w for w in result["warnings"])
    code, out, err = run(capsys, *base, "--drop", "income")
    assert code == 0, err
    assert not any("missing value" in w for w in json.loads(out)["warnings"])
    # The help names the threshold the loader applies.
    from pfair.cli import build_parser

    sub = build_parser()._subparsers._group_actions[0].choices["train"]
    assert f"{MAX_DROPPED_SHARE:.0%}" in sub.format_help().replace("\n", " ")
    code, _, err = run(capsys, "train", "--dropna", "--epochs", "1")
    assert code == 2 and "--dropna need --csv" in err


def test_sweep_csv_dropna_travels_in_the_spec(capsys, tmp_path):
    csv, n_missing = _gappy_csv(tmp_path / "gappy.csv")
    base = ["sweep", "--csv", str(csv), "--label", "default", "--positive-label", "yes", "--sensitive", "sex",
            "--methods", "fedavg", "--heterogeneity", "0", "--seeds", "1", "--epochs", "1", "--jobs", "1",
            "--no-progress"]
    code, _, err = run(capsys, *base, "--out", str(tmp_path / "refused"))
    assert code == 2 and f"'income' {n_missing}" in err and "--dropna" in err
    # A spec given to --dataset is checked the same way before any cell runs.
    from pfair.datasets import csv_spec

    spec = csv_spec(csv, label="default", sensitive="sex", positive_label="yes")
    code, _, err = run(capsys, "sweep", "--dataset", spec, *base[9:], "--out", str(tmp_path / "refused2"))
    assert code == 2 and f"'income' {n_missing}" in err
    assert not (tmp_path / "refused2" / "runs.csv").exists()
    code, _, err = run(capsys, *base, "--dropna", "--out", str(tmp_path / "ok"))
    assert code == 0, err
    assert f"warning: load_csv: {n_missing} of 400 rows" in err
    from pfair.experiments import load_runs

    runs = load_runs(tmp_path / "ok")
    assert (runs["error"].fillna("") == "").all() and "dropna=True" in runs["dataset"].iloc[0]
    assert (runs["n_train"] + runs["n_val"] + runs["n_test"] == 400 - n_missing).all()


# ---------------------------------------------------------------------------------------------- feedback
def test_version_flag(capsys):
    import pfair

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"pfair {pfair.__version__}"


def test_postprocess_offers_exactly_the_constraints_of_the_estimator():
    """pfair postprocess spells its --constraints choices (METRIC's keys) instead of importing
    pfair.postprocessing at every start; they must stay the estimator's."""
    from pfair.cli import build_parser
    from pfair.postprocessing import CONSTRAINTS
    from pfair.postprocessing_cli import METRIC

    assert tuple(METRIC) == CONSTRAINTS
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["postprocess"]
    assert next(a for a in sub._actions if a.dest == "constraints").choices == list(CONSTRAINTS)


@pytest.mark.slow
def test_the_command_line_starts_without_scikit_learn_or_the_run_engine():
    """Every `pfair` start builds all the parsers: that must not import scikit-learn, SciPy or the
    run engine (each command imports what it runs; docs/architecture.md, "Imports")."""
    code = ("import sys, contextlib, io, pfair.cli\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: pfair.cli.main(['--help'])\n"
            "    except SystemExit: pass\n"
            "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy', 'torch', 'flwr')}\n"
            "             | {m for m in sys.modules if m in ('pfair.estimators', 'pfair.protocol', 'pfair.datasets')}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_every_option_of_every_subcommand_has_help_text():
    import argparse

    from pfair.cli import build_parser

    missing, commands = [], []

    def walk(p: argparse.ArgumentParser, name: str) -> None:  # every (nested) subcommand
        commands.append(name)
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub_parser in action.choices.items():
                    walk(sub_parser, f"{name} {sub_name}")
            elif not isinstance(action, argparse._HelpAction) and not action.help:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "pfair")
    assert not missing, f"options without help text: {missing}"
    assert {"pfair train", "pfair sweep", "pfair privacy-report", "pfair deploy local"} <= set(commands)


def test_privacy_report_shows_accounting_noise_and_guarantee(capsys, tmp_path):
    out_file = tmp_path / "run.json"
    code, _, err = run(capsys, "train", "--dataset", "german", "--epsilon", "1", "--epochs", "1", "--batch-size", "32",
                       "--json", "--out", str(out_file))
    assert code == 0, err
    code, out, _ = run(capsys, "privacy-report", str(out_file))
    header = out.splitlines()[1].split()
    for column in ("accounting", "noise", "guarantee", "sampling", "epsilon_spent"):
        assert column in header
    assert "shuffle" in out and "covered" in out and "…" not in out and "..." not in out


def test_privacy_report_object_prints_in_full():
    import pandas as pd

    from pfair import SteFFLe, datasets
    from pfair.federation import Federation
    from pfair.privacy.report import REPORT_COLUMN_MEANINGS, PrivacyReport

    model = SteFFLe(epsilon=1, epochs=1, batch_size=32, progress=False).fit(
        Federation.partition(datasets.load("german"), 3))
    report = PrivacyReport(model.privacy_report_)
    with pd.option_context("display.max_columns", 4, "display.width", 40):
        text = str(report)
        assert "..." in str(pd.DataFrame(report))  # what a plain DataFrame would print
    assert "..." not in text and "…" not in text
    for column in ("accounting", "noise", "guarantee", "epsilon_spent"):
        assert column in text.splitlines()[0]
    assert isinstance(report[["noise", "guarantee"]], PrivacyReport)
    explained = report.explain()
    assert list(explained.index) == list(report.columns)
    assert set(report.columns) <= set(REPORT_COLUMN_MEANINGS), "every column has a meaning"
    assert explained.loc["guarantee", "value"] == "covered"


@pytest.mark.slow
def test_no_progress_bar_in_a_redirected_log(tmp_path):
    import os

    log = tmp_path / "log.txt"
    env = {k: v for k, v in os.environ.items() if k not in ("PFAIR_PROGRESS", "TQDM_DISABLE")}
    with open(log, "w") as fh:
        subprocess.run([sys.executable, "-m", "pfair.cli", "train", "--dataset", "german", "--epochs", "3",
                        "--batch-size", "32"], stdout=fh, stderr=fh, check=True, env=env)
    text = log.read_text()
    assert "test error" in text and "epoch/s" not in text and "\r" not in text
    # Forced on, the same run draws its bar into the log.
    with open(log, "w") as fh:
        subprocess.run([sys.executable, "-m", "pfair.cli", "train", "--dataset", "german", "--epochs", "3",
                        "--batch-size", "32"], stdout=fh, stderr=fh, check=True, env={**env, "PFAIR_PROGRESS": "1"})
    assert "epoch" in log.read_text()


def test_progress_rule(monkeypatch):
    from pfair import _progress

    class Stream:
        def __init__(self, tty):
            self.tty = tty

        def isatty(self):
            return self.tty

    for var in ("PFAIR_PROGRESS", "TQDM_DISABLE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(_progress, "_in_notebook", lambda: False)
    monkeypatch.setattr(sys, "stderr", Stream(True))
    assert _progress.progress_wanted() and not _progress.progress_wanted(False)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert not _progress.progress_wanted()
    monkeypatch.delenv("TQDM_DISABLE")
    monkeypatch.setattr(sys, "stderr", Stream(False))
    assert not _progress.progress_wanted()
    assert list(_progress.progress_bar(range(3))) == [0, 1, 2]  # a disabled bar still iterates
    monkeypatch.setenv("PFAIR_PROGRESS", "1")
    assert _progress.progress_wanted()
    monkeypatch.setattr(_progress, "_in_notebook", lambda: True)
    monkeypatch.setenv("PFAIR_PROGRESS", "0")
    assert not _progress.progress_wanted()
    monkeypatch.delenv("PFAIR_PROGRESS")
    assert _progress.progress_wanted()  # a notebook shows bars although stderr is not a terminal


def test_missing_matplotlib_hint_fits_pip_and_source_installs(monkeypatch):
    from pfair.experiments import plots

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(ImportError) as info:
        plots._matplotlib()
    message = str(info.value)
    assert "pip install matplotlib" in message and "pip install 'pfair[plot]'" in message
    assert "pip install -e '.[plot]'" in message


def test_train_max_violation_meets_the_target(capsys):
    """--max-violation T: λ adapts and the fit returns the most accurate checkpoint whose demographic
    parity difference on the silos' records is at most T (non-private: measured exactly), which the
    unconstrained model is far from."""
    base = ["train", "--dataset", "adult", "--epsilon", "none", "--epochs", "40"]
    code, out, err = run(capsys, *base, "--lam", "0", "--json")
    assert code == 0, err
    free = json.loads(out)["demographic_parity_difference"]
    assert free > 0.15  # the target below is active
    code, out, err = run(capsys, *base, "--max-violation", "0.05", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["max_violation"] == 0.05 and result["lam"] is None and result["final_lam"] > 0
    assert 0.02 < result["violation_released"] <= 0.05, result["violation_released"]
    assert result["demographic_parity_difference"] < 0.07, result  # held-out test set
    code, out, err = run(capsys, *base, "--max-violation", "0.05")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("target"))
    assert "demographic_parity_difference <= 0.05 on the silos' records" in line and "exact, non-private" in line
    assert f"{result['violation_released']:.4f}" in line
    code, _, err = run(capsys, *base, "--max-violation", "0.05", "--lam", "2")
    assert code == 2 and "max_violation" in err and "lam" in err
    code, _, err = run(capsys, *base, "--max-violation", "1.5")
    assert code == 2 and "max_violation must be in (0, 1)" in err


# ---------------------------------------------------------------------- messages: CSV files, summary notes, plot titles, Ctrl-C


def test_csv_messages_name_the_file_and_the_columns(tmp_path, capsys):
    import numpy as np
    import pandas as pd

    from pfair.cli import main

    (tmp_path / "header.csv").write_text("a,b,sex,y\n")
    assert main(["train", "--csv", str(tmp_path / "header.csv"), "--label", "y", "--sensitive", "sex"]) == 2
    assert "header: the table has its header but no rows (columns ['y', 'sex', 'a', 'b'])" in capsys.readouterr().err
    rng = np.random.default_rng(0)
    t = pd.DataFrame({"a": rng.normal(size=50), "b": rng.normal(size=50), "sex": rng.choice(["m", "f"], 50)})
    t["y"] = (t.a > 0).astype(int)
    t.loc[3, "b"] = np.inf
    t.to_csv(tmp_path / "inf.csv", index=False)
    assert main(["train", "--csv", str(tmp_path / "inf.csv"), "--label", "y", "--sensitive", "sex"]) == 2
    assert "column(s) 'b' (1 row(s), the first on line 5 of the file) hold +inf or -inf" in capsys.readouterr().err
    (tmp_path / "run.json").write_text("silo,epsilon\n0,1\n")
    assert main(["privacy-report", str(tmp_path / "run.json")]) == 2
    assert "is not JSON" in capsys.readouterr().err


def test_summary_notes_small_groups_held_out_share_and_uneven_noise():
    import numpy as np
    import pandas as pd

    from pfair.cli import privacy_notes, small_group_notes

    y = np.array([0] * 40 + [1] * 40 + [0] * 10 + [1] * 5)
    s = np.array([0] * 80 + [1] * 15)
    (note,) = small_group_notes(y, s, ["a", "b"], ["no", "yes"])
    assert note.startswith("1 of 2 sensitive groups") and "'b' 15 (10 with label no, 5 with label yes)" in note
    assert small_group_notes(y[:80], s[:80]) == []
    report = pd.DataFrame({"n_records": [6, 9, 9], "noise_multiplier": [10.04, 8.287, 8.287],
                           "sample_rate": [1.0, 0.6667, 0.6667]}, index=pd.Index([0, 1, 2], name="silo"))
    held, noise = privacy_notes(report, [7, 10, 10])
    assert "holds out [1, 1, 1]" in held
    assert noise.startswith("silo 0 has 21% more noise than the others (noise_multiplier 10.04 against 8.287)")
    assert "batch is 100% of its training records (6)" in noise
    assert privacy_notes(report.assign(noise_multiplier=8.0), [6, 9, 9]) == []


def test_a_csv_plot_title_names_the_file_and_columns():
    from pfair.experiments.plots import dataset_title

    spec = "csv:/a/very/long/path/to/the/data/loans.csv?label=default&sensitive=sex&positive_label=yes"
    assert dataset_title(spec) == "loans.csv (label default, sensitive sex)"
    assert dataset_title("adult") == "adult" and len(dataset_title("x" * 100)) == 60


def test_ctrl_c_in_train_is_one_line(capsys, monkeypatch):
    import pfair.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["train"].set_defaults(func=interrupted)
    assert cli.main(["train"]) == 130
    err = capsys.readouterr().err.strip()
    assert err == ("pfair train: interrupted; nothing was written (--out and --save-model are written at the end) and "
                   "nothing was spent outside this process (a fit's ledgers live in it)")


def test_train_says_why_the_run_has_more_epochs_than_stated(capsys):
    """batch_size auto stretches a run; the summary says by how much and why: German's silos of one
    round an epoch (the floor of 16), a noise-free λ = 40 (the λ stretch, the larger there), Adult's
    private run at the batch of 8,192; a run that is not stretched prints its epochs alone. The JSON
    carries the stated epochs and the reason."""
    cases = [(["--dataset", "german", "--epsilon", "none", "--lam", "1"],
              "training      320 epochs (20 stated for 16 rounds an epoch; times 16 on silos of 1), batch 225"),
             (["--dataset", "german", "--epsilon", "none", "--lam", "40"],
              "training      800 epochs (20 stated for λ ≤ 1; times 40 for the θ step of lam=40), batch 225"),
             (["--dataset", "adult", "--lam", "1", "--epochs", "1"],
              "training      8 epochs (1 stated for a batch of 1,024; times 8 at the batch of 8,192), batch 8192"),
             (["--dataset", "german", "--epsilon", "none", "--lam", "1", "--batch-size", "64"],
              "training      20 epochs, batch 64")]
    for argv, line in cases:
        code, out, _ = run(capsys, "train", *argv)
        assert code == 0 and line in out, (argv, [r for r in out.splitlines() if r.startswith("training")])
    code, out, _ = run(capsys, "train", "--dataset", "german", "--epsilon", "none", "--lam", "1", "--json")
    result = json.loads(out)
    assert (result["epochs"], result["epochs_stated"]) == (320, 20) and "rounds an epoch" in result["epochs_why"]
