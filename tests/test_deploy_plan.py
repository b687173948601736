"""pfair deploy local plans before it starts anything (issue 37, items 2-5): the fast checks, with
no Flower process (the deployments themselves are in tests/test_flower.py, slow)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("flwr", reason="the flower extra is not installed (pip install 'pfair[flower]')")

from pfair.cli import main  # noqa: E402


def loans(path: Path, n: int = 600, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    table = pd.DataFrame({"age": rng.integers(18, 80, n), "income": rng.normal(50, 10, n).round(1),
                          "sex": rng.choice(["f", "m"], n)})
    table["default"] = np.where(table["income"] + rng.normal(0, 5, n) > 50, "yes", "no")
    table.to_csv(path, index=False)
    return path


def data_args(csv: Path) -> list[str]:
    return ["--csv", str(csv), "--label", "default", "--positive-label", "yes", "--sensitive", "sex", "--silos", "2"]


def spent(workdir: Path) -> list[float]:
    from pfair.privacy.ledger import PrivacyLedger

    return [PrivacyLedger.load(p).epsilon_spent() for p in sorted(workdir.glob("silos/silo*/state/ledger.json"))]


def test_deploy_defaults_are_train_s(capsys):
    from pfair.cli import build_parser

    deploy = build_parser().parse_args(["deploy", "local"])
    train = build_parser().parse_args(["train"])
    assert (deploy.epsilon, deploy.epochs, deploy.batch_size) == (train.epsilon, train.epochs, train.batch_size) \
        == (1.0, 20, "auto")


def test_a_batch_larger_than_a_silo_stops_before_any_process_or_budget(tmp_path, capsys):
    """600 rows: 2 silos of 225 records, 203 of them for training. --batch-size 2048 (the former
    default) is refused by the server's plan, checked here before a process starts: exit 2, one
    line naming the batch and the silo, no Flower directory, no budget spent."""
    csv = loans(tmp_path / "loans.csv")
    code = main(["deploy", "local", *data_args(csv), "--batch-size", "2048", "--workdir", str(tmp_path / "wd")])
    err = capsys.readouterr().err
    assert code == 2 and "batch_size=2048 is larger than silo 0, which trains on 203 records (the rest of its records are held out" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "wd" / "flower").exists() and spent(tmp_path / "wd") == []


def test_silos_that_would_refuse_stop_the_run_before_anything_starts(tmp_path, capsys):
    """epsilon 0.001 pays for nothing a run releases: every silo's plan-round check refuses, found
    before any process starts; exit 3, each silo named with its reason, nothing spent."""
    csv = loans(tmp_path / "loans.csv")
    code = main(["deploy", "local", *data_args(csv), "--epsilon", "0.001", "--epochs", "2",
                 "--workdir", str(tmp_path / "wd")])
    err = capsys.readouterr().err
    assert code == 3 and "every silo would refuse this run, so nothing was started and nothing spent" in err
    lines = [ln.strip() for ln in err.splitlines() if ln.strip().startswith("silo ")]
    # what each silo's node would answer: its budget cannot pay for the run's releases (here the
    # evaluation release, 0.05 of a deployed silo's budget, alone exceeds it)
    assert [ln.split(":")[0] for ln in lines] == ["silo 0", "silo 1"]
    assert all("PrivacyBudgetExceeded" in ln or "BudgetTooSmall" in ln for ln in lines), lines
    assert not (tmp_path / "wd" / "flower").exists() and spent(tmp_path / "wd") == [0.0, 0.0]


def test_a_busy_workdir_and_a_file_as_workdir_are_refused_up_front(tmp_path, capsys):
    from pfair.flower.cli import _WorkdirLock

    csv = loans(tmp_path / "loans.csv")
    (tmp_path / "wd").mkdir()
    lock = _WorkdirLock(tmp_path / "wd")  # another deployment holds the workdir
    try:
        code = main(["deploy", "local", *data_args(csv), "--epochs", "2", "--workdir", str(tmp_path / "wd")])
    finally:
        lock.release()
    err = capsys.readouterr().err
    import os

    assert code == 2 and f"is in use by another `pfair deploy local` (pid {os.getpid()})" in err
    assert not (tmp_path / "wd" / "silos").exists()
    (tmp_path / "afile").write_text("x")
    code = main(["deploy", "local", *data_args(csv), "--workdir", str(tmp_path / "afile")])
    assert code == 2 and "--workdir" in capsys.readouterr().err and (tmp_path / "afile").read_text() == "x"


def test_ctrl_c_stops_with_one_line_naming_what_was_kept_and_spent(tmp_path, capsys, monkeypatch):
    import pfair.flower.deploy as deploy

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(deploy, "run_deployment", interrupted)
    csv = loans(tmp_path / "loans.csv")
    code = main(["deploy", "local", *data_args(csv), "--epochs", "2", "--workdir", str(tmp_path / "wd")])
    err = capsys.readouterr().err.strip()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 130 and len(lines) == 2 and lines[0].startswith("deploying") and "Traceback" not in err
    assert "interrupted; every party was stopped" in err and str(tmp_path / "wd") in err
    assert "no silo spent any budget" in err


def test_a_party_failure_is_one_line_from_the_log():
    from pfair.flower.deploy import last_error, one_line

    log = ("\x1b[92mINFO \x1b[0m:      Start `flwr-serverapp` process\n\x1b[91mERROR \x1b[0m:     ServerApp raised\n"
           "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n    raise\n"
           "pfair.exceptions.SettingsMismatch: silo 1: the run asks for epsilon=3\n"
           "\x1b[91mERROR \x1b[0m:     Exit Code: 201\nFor more information, visit: <https://flower.ai/...>\n")
    assert last_error(log) == "SettingsMismatch: silo 1: the run asks for epsilon=3"
    assert one_line("code 0: " + log) == "SettingsMismatch: silo 1: the run asks for epsilon=3"
    assert one_line("no reply within the round timeout") == "no reply within the round timeout"


def test_refused_and_silent_silos_are_named_one_line_each():
    from pfair.flower.cli import _refusal_lines

    res = {"status": "completed", "rounds": 4, "refusals": {"0": "code 0: Traceback ...\nBudgetTooSmall: silo 0: x"},
           "silos": [{"silo": 0, "rounds_answered": 0}, {"silo": 1, "rounds_answered": 0},
                     {"silo": 2, "rounds_answered": 4}],
           "events": [{"event": "error_reply", "silo": 1, "reason": "code 0: SettingsMismatch: silo 1: other run"}]}
    assert _refusal_lines(res) == ["silo 0: BudgetTooSmall: silo 0: x",
                                   "silo 1: answered none of the 4 rounds (SettingsMismatch: silo 1: other run)"]
