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
    for key in ("test_error", "dp_violation", "eo_violation", "epsilon_spent", "delta", "seconds", "trivial_error"):
        assert key in result
    assert 0 < result["test_error"] < result["trivial_error"]
    assert 0.9 < result["epsilon_spent"] <= 1.0
    code, out, _ = run(capsys, "privacy-report", str(out_file))
    assert code == 0 and "epsilon_spent" in out and "public" in out
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


def test_privacy_command_both_directions(capsys):
    code, out, _ = run(capsys, "privacy", "--epsilon", "1", "--delta", "1e-5", "--batch", "256", "--silo-size",
                       "12000", "--epochs", "40", "--json")
    assert code == 0
    res = json.loads(out)
    z = res["noise_multiplier"]
    steps = 40 * -(-12000 // 256)
    # The default is SteFFLe's account in attribute mode (the batch is public).
    assert res["sampling"] == "public_batch"
    eps = epsilon_for(noise_multiplier=z, sample_rate=256 / 12000, steps=steps, delta=1e-5, sampling="public_batch")
    assert 0.98 <= eps <= 1.0
    # The hidden-batch bound, on request, needs less noise for the same target.
    code, out, _ = run(capsys, "privacy", "--epsilon", "1", "--delta", "1e-5", "--batch", "256", "--silo-size",
                       "12000", "--epochs", "40", "--sampling", "without_replacement", "--json")
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
