"""Faults on a real Flower deployment on loopback: a silo killed mid-run, malformed replies, budgets
that run out (see tests/test_flower.py for how deployments are run and torn down)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

flwr = pytest.importorskip("flwr", reason="the flower extra is not installed (pip install 'pfair[flower]')")

import pfair  # noqa: E402
from pfair.flower.deploy import LoopbackDeployment, run_config_for, run_deployment, write_app, write_federation  # noqa: E402
from pfair.privacy.ledger import PrivacyLedger  # noqa: E402

from flower_support import TESTS, data, expected_by_parties, no_flower_processes_left, settings  # noqa: E402

# Every test here runs a Flower deployment (tens of seconds): not in `make test-fast`.
pytestmark = pytest.mark.slow


def test_a_killed_silo_is_dropped_and_rejoins_without_double_charging(tmp_path):
    """Silo 2's SuperNode is killed (SIGKILL) after it answered round 0; the run goes on with
    the others (reweighted), silo 2 comes back on a new SuperNode, skips the rounds it missed and
    answers the rest. Its ledger charges exactly the rounds it answered, and the final model equals
    the in-process protocol with the same replies dropped."""
    X, y, s, silos = data(n=1500)
    fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    cfgs = write_federation(fed, tmp_path / "data")
    for c in cfgs:
        c.update({"epsilon": 2.0, "noise-seed": 9})
    st = settings(epochs=1, batch_size=100)  # 5 rounds
    with LoopbackDeployment(tmp_path / "flwr") as dep:
        dep.start_superlink()
        for j, c in enumerate(cfgs):
            dep.start_supernode(f"supernode{j}", c)
        out = tmp_path / "result.json"
        # 12 s: a live silo answers a loopback round in about 2 s (warm ClientApps), also on a
        # loaded machine (the suite runs on both cores); a dead one costs the round this timeout.
        rc = run_config_for(st, n_silos=3, n_groups=2, n_classes=2, out=out, round_timeout=12)
        run = dep.run_app(write_app(dep.workdir / "app"), rc, timeout=400, background=True)
        ledger_file = Path(cfgs[2]["state-dir"]) / "ledger.json"

        def answered(path):
            led = json.loads(path.read_text()) if path.exists() else {"runs": {}}
            return max([r["next_round"] for r in led["runs"].values()] or [0])

        deadline = time.monotonic() + 120
        while answered(ledger_file) < 1:
            assert time.monotonic() < deadline and run.poll() is None, dep.log("flwr-run")[-2000:]
            time.sleep(0.2)
        dep.kill("supernode2", signal.SIGKILL)
        time.sleep(14)  # the next round times out without silo 2
        dep.start_supernode("supernode2b", cfgs[2])
        run.wait(timeout=300)
        res = json.loads(out.read_text())
    assert no_flower_processes_left(dep)
    assert res["status"] == "completed"
    missed = sorted({e["round"] for e in res["events"] if e.get("silo") == 2 and e["event"] in ("no_reply",
                                                                                                 "error_reply")})
    # (The round it was answering when killed may be lost after it charged it: it counts as missed.)
    assert missed and missed[-1] < res["rounds"] - 1 and any(e["event"] == "silo_rejoined" for e in res["events"])
    answered_by_2 = [r for r in range(res["rounds"]) if r not in missed]
    assert answered_by_2[-1] == res["rounds"] - 1  # it came back and answered the last rounds
    led = PrivacyLedger.load(ledger_file)
    (run_record,) = led.runs.values()
    charged = sum(e.steps for e in led.events if e.name == "steffle_rounds")
    # No double charge: a round charged but lost by the kill is the only possible extra.
    assert charged in (len(answered_by_2), len(answered_by_2) + 1)
    assert run_record["next_round"] == res["rounds"]
    # The replies the server used: every round, minus what it logged as missing or rejected (on a
    # loaded machine a live silo may miss the round timeout too).
    dropped = {(e["silo"], e["round"]) for e in res["events"] if "round" in e and "silo" in e}
    answered = {j: {r for r in range(res["rounds"]) if (j, r) not in dropped} for j in range(3)}
    assert answered[2] == set(answered_by_2)
    theta, w, _ = expected_by_parties(dataclasses.replace(st, noise_seed=9), fed, answered)
    np.testing.assert_allclose(res["theta"], theta, rtol=0, atol=1e-12)


def test_malformed_replies_are_rejected_and_a_spent_budget_ends_the_run_cleanly(tmp_path):
    """Silo 3 returns, round by round, NaN, a wrong shape, a huge norm and a stale round: each is
    rejected (logged with the reason) and never averaged in — the model equals the protocol run
    with silo 3 dropped. Silo 1's own budget (its node config) is below what the run asks: it
    refuses at the plan round and the run goes on without it. Paper calibration then makes every
    silo refuse mid-run and the run ends cleanly."""
    X, y, s, silos = data(n=1600, n_silos=4)
    fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    cfgs = write_federation(fed, tmp_path / "data")
    for c in cfgs:
        c.update({"epsilon": 2.0, "noise-seed": 5})
    cfgs[3]["corrupt"] = 1
    cfgs[1]["epsilon"] = 1.0
    st = settings(epochs=1, batch_size=100)  # 4 rounds
    env = {"PYTHONPATH": TESTS + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = run_deployment(st, cfgs, n_groups=2, n_classes=2, workdir=tmp_path / "flwr", round_timeout=60, timeout=300,
                         clientapp="flower_hostile:app", env=env, evaluate=False)
    rejected = [e for e in res["events"] if e["event"] in ("rejected", "malformed_reply")]
    assert [e["silo"] for e in rejected] == [3, 3, 3, 3]
    reasons = " | ".join(e["reason"] for e in rejected)
    for what in ("NaN", "length", "norm", "round"):
        assert what in reasons, reasons
    assert any(e["event"] == "plan_refused" and e["silo"] == 1 and "budget" in e["reason"] for e in res["events"])
    assert res["silos"][1]["refused"] and res["silos"][1]["ledger"]["epsilon_spent"] == 0.0
    dropped = {(e["silo"], e["round"]) for e in res["events"] if "round" in e and "silo" in e}
    answered = {j: ({r for r in range(4) if (j, r) not in dropped} if j in (0, 2) else set()) for j in range(4)}
    theta, _, _ = expected_by_parties(dataclasses.replace(st, noise_seed=5), fed, answered)
    np.testing.assert_allclose(res["theta"], theta, rtol=0, atol=1e-12)

    # calibration="paper" under-noises here: each silo's ledger keeps its budget and refuses.
    cfgs2 = write_federation(fed, tmp_path / "data2")
    for c in cfgs2:
        c.update({"epsilon": 1.0})
    st2 = settings(epsilon=1.0, epochs=4, batch_size=100, calibration="paper")
    res2 = run_deployment(st2, cfgs2, n_groups=2, n_classes=2, workdir=tmp_path / "flwr2", round_timeout=60,
                          timeout=400, evaluate=False)
    assert res2["status"] == "completed"
    assert all(row["refused"] for row in res2["silos"])
    assert any(e["event"] == "all_refused" for e in res2["events"])
    assert all(row["ledger"]["epsilon_spent"] <= 1.0 for row in res2["silos"])
