"""SteFFLe on a real Flower deployment on loopback: SuperLink and SuperNodes as separate processes.

Every deployment binds 127.0.0.1 on free ports, runs in its own temporary FLWR_HOME with
telemetry, update checks and dependency installation off, is bounded in time, and is torn down
with its process groups (LoopbackDeployment is a context manager). Each test costs ~1 minute
(Flower's SuperNode polls for work every 3 s), so the file holds few, comprehensive runs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

flwr = pytest.importorskip("flwr", reason="the flower extra is not installed (pip install 'pfair[flower]')")

import pfair  # noqa: E402
from pfair.exceptions import PrivacyWarning  # noqa: E402
from pfair.flower.deploy import (LoopbackDeployment, descendants, run_config_for, run_deployment,  # noqa: E402
                                 write_app, write_federation)
from pfair.privacy.ledger import PrivacyLedger  # noqa: E402
from pfair.protocol.server import ServerParty, reply_limits  # noqa: E402
from pfair.protocol.simulation import Simulation  # noqa: E402

TESTS = str(Path(__file__).parent)


def data(n=900, seed=0, n_silos=3):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, size=n)
    X = rng.normal(size=(n, 3))
    X[:, 0] += s
    y = (X[:, 0] + 0.5 * rng.normal(size=n) > 0.5).astype(int)
    return X, y, s, np.arange(n) % n_silos


def settings(**kw):
    base = dict(epsilon=2.0, lam=1.0, epochs=1, batch_size=150, p_s=[0.5, 0.5], seed=1)
    return pfair.SteFFLe(**{**base, **kw}).settings()


def no_flower_processes_left(dep: LoopbackDeployment) -> bool:
    return all(p.poll() is not None for p in dep.procs.values()) and not descendants([p.pid for p in dep.procs.values()])


def expected_by_parties(st, fed, answered):
    """θ, W of the same run in process, with each silo's reply used only in the rounds listed
    in ``answered[silo]`` (the others are dropped and the rest reweighted)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        sim = Simulation(st, fed, ledgers="new", fast=False)
    props = sim.group_proportions()
    for p in sim.parties:
        p.plan_rounds(props, sim.total_rounds)
    inv = sim.parties[0].inv_sqrt_ps
    limits = [reply_limits(theta_len=4, w_len=4, settings=st, plan=p.plan, inv_sqrt_ps=inv) for p in sim.parties]
    server = ServerParty(settings=st, weights=[1 / fed.n_silos] * fed.n_silos, limits=limits, block_len=4,
                         rounds_per_epoch=sim.rounds_per_epoch)
    theta, w = np.zeros(4), np.zeros(4)
    for r in range(sim.total_rounds):
        replies = [(j, p.step(theta, w, r)) for j, p in enumerate(sim.parties) if r in answered[j]]
        theta, w, _ = server.update(theta, w, replies, r)
    return theta, w, sim


def test_a_deployed_run_equals_the_simulation(tmp_path):
    """Reproducible noise on purpose (each node's own noise-seed): the deployed θ and W equal
    SteFFLe.fit on the same partition, and every silo's ledger spent what the simulation's did.
    Also: public settings only in the run config, evaluation on local test shards, timings."""
    X, y, s, silos = data()
    fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    cfgs = write_federation(fed, tmp_path / "data", test=(X[:90], y[:90], s[:90]), fmt="parquet")
    for c in cfgs:
        c.update({"epsilon": 2.0, "noise-seed": 4})
    st = settings(epochs=1, batch_size=100, p_s="dp")
    res = run_deployment(st, cfgs, n_groups=2, n_classes=2, workdir=tmp_path / "flwr", round_timeout=60,
                         timeout=300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        sim = pfair.SteFFLe(noise_seed=4, **{k: getattr(st, k) for k in ("epsilon", "lam", "epochs", "batch_size",
                                                                          "p_s", "seed")}).fit(fed, ledgers="new")
    assert res["status"] == "completed" and res["rounds"] == sim.n_rounds_ == 3
    np.testing.assert_allclose(res["theta"], sim.theta_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.reshape(res["w"], sim.W_.shape), sim.W_, rtol=0, atol=1e-12)
    spent = [row["ledger"]["epsilon_spent"] for row in res["silos"]]
    np.testing.assert_allclose(spent, sim.privacy_report_["epsilon_spent"], rtol=1e-12)
    assert all(0.99 * 2.0 < e <= 2.0 for e in spent)
    assert res["settings"]["p_s"] == "dp" and res["settings"]["noise_seed"] is None
    assert res["evaluation"]["n_test"] == 90 and 0 <= res["evaluation"]["test_error"] < 0.5
    assert not res["events"]
    assert res["timing"]["silos_joined_s"] > 0 and len(res["timing"]["round_s"]) == 3
    # Each silo's state on disk: its ledger (bound to its data) and the run's noise plan.
    ledger = PrivacyLedger.load(Path(cfgs[0]["state-dir"]) / "ledger.json")
    assert ledger.fingerprint is not None and list(ledger.runs) == [res["run_id"]]


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


def test_pfair_deploy_local_runs_end_to_end(tmp_path, capsys):
    """The one-command launcher: partition, shards, SuperLink and SuperNodes, run, summary."""
    from pfair.cli import main

    code = main(["deploy", "local", "--dataset", "german", "--silos", "2", "--epsilon", "2", "--epochs", "1",
                 "--batch-size", "300", "--round-timeout", "60", "--timeout", "300", "--workdir", str(tmp_path),
                 "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and out["rounds"] == 2 and out["silos"] == 2
    assert 0 < out["test_error"] <= out["trivial_error"] + 0.1
    assert all(0 < row["epsilon_spent"] <= 2.0 and not row["refused"] for row in out["privacy"])
    assert (tmp_path / "flower" / "result.json").exists()
    assert out["seconds_per_round"] > 0 and out["start_seconds"] > 0


def test_a_deployed_deep_model_equals_deep_steffle(tmp_path):
    """A torch MLP named by the run config (a factory the silos allow) runs on the deployment
    with the torch gradient provider and gives DeepSteFFLe.fit's model; a silo refuses a factory
    its node config does not allow."""
    torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install 'pfair[torch]')")
    from pfair.flower.models import build_module
    from pfair.torch import DeepSteFFLe
    from pfair.torch.models import mlp

    X, y, s, silos = data()
    fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    cfgs = write_federation(fed, tmp_path / "data")
    for c in cfgs:
        c.update({"epsilon": 2.0, "noise-seed": 6})
    model = {"factory": "pfair.torch.models:mlp", "kwargs": {"n_features": 3, "n_classes": 2, "hidden": [8]},
             "init_seed": 3, "input_shape": None}
    st = settings(epochs=1, batch_size=150, clip=0.5)
    res = run_deployment(st, cfgs, n_groups=2, n_classes=2, workdir=tmp_path / "flwr", round_timeout=60,
                         timeout=300, model=model, evaluate=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        deep = DeepSteFFLe(mlp(3, 2, hidden=(8,)), init_seed=3, noise_seed=6, epsilon=2.0, lam=1.0, epochs=1,
                           batch_size=150, clip=0.5, p_s=[0.5, 0.5], seed=1, device="cpu").fit(fed, ledgers="new")
    assert res["status"] == "completed" and res["rounds"] == 2 and len(res["theta"]) == deep.theta_.size == 50
    np.testing.assert_allclose(res["theta"], deep.theta_, rtol=0, atol=1e-6)
    with pytest.raises(PermissionError, match="not allowed"):
        build_module({"factory": "os:getcwd", "kwargs": {}, "init_seed": 0, "input_shape": None})
    del torch


def test_a_deployed_fairness_target_equals_the_simulation(tmp_path):
    """max_violation over Flower: after each epoch but the last every node answers
    query.violation (its noisy histogram, charged to its ledger); the server's λ path, θ and the
    ledgers equal SteFFLe.fit with the same noise seeds."""
    X, y, s, silos = data()
    fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    cfgs = write_federation(fed, tmp_path / "data")
    for c in cfgs:
        c.update({"epsilon": 2.0, "noise-seed": 4})
    kw = dict(epsilon=2.0, epochs=3, batch_size=150, p_s=[0.5, 0.5], seed=1, max_violation=0.05, lam_lr=20.0)
    st = pfair.SteFFLe(**kw).settings()
    res = run_deployment(st, cfgs, n_groups=2, n_classes=2, workdir=tmp_path / "flwr", round_timeout=60,
                         timeout=300, evaluate=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        sim = pfair.SteFFLe(noise_seed=4, **kw).fit(fed, ledgers="new")
    assert res["status"] == "completed" and not res["events"]
    np.testing.assert_allclose(res["theta"], sim.theta_, rtol=0, atol=1e-12)
    lam = [row["lam"] for row in res["lam"]]
    np.testing.assert_allclose(lam, sim.history_["lam"].to_numpy(), rtol=0, atol=1e-12)
    assert lam[0] == 0.0 and lam[-1] > 0.0
    np.testing.assert_allclose([row["violation_released"] for row in res["lam"][:-1]],
                               sim.history_["violation_released"].to_numpy()[:-1], rtol=0, atol=1e-12)
    spent = [row["ledger"]["epsilon_spent"] for row in res["silos"]]
    np.testing.assert_allclose(spent, sim.privacy_report_["epsilon_spent"], rtol=1e-12)
    ledger = PrivacyLedger.load(Path(cfgs[0]["state-dir"]) / "ledger.json")
    assert sum(e.steps for e in ledger.events if e.name == "violation_histogram") == 2


def test_warm_clientapps_are_forks_running_flowers_own_command(tmp_path):
    """pfair.flower.fast_superexec: a flwr-clientapp launch becomes a fork of the warm process that
    runs Flower's own command with the same arguments; other commands start as before; the warm
    process ends when the SuperExec's side closes."""
    script = tmp_path / "launch.py"
    script.write_text(
        "import os, subprocess, sys, time\n"
        "from pfair.flower import fast_superexec as fx\n"
        "launcher = fx.WarmLauncher()\n"
        "fx.install(launcher)\n"
        "from flwr.supercore.superexec.executor import subprocess_executor as se\n"
        "p = se.subprocess.Popen(['flwr-clientapp', '--help'])\n"
        "print('LAUNCHED', type(p).__name__, launcher.pid, flush=True)\n"
        "q = se.subprocess.Popen([sys.executable, '-c', 'print(\"PLAIN\")'])\n"
        "q.wait()\n"
        "time.sleep(3)\n"
        "launcher._pipe.close()\n"
        "deadline = time.monotonic() + 20\n"
        "while launcher.alive() and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "print('WARM ALIVE', launcher.alive(), flush=True)\n")
    env = {**os.environ, "PFAIR_CLIENTAPP_PRELOAD": "json"}
    import subprocess
    done = subprocess.run([__import__("sys").executable, str(script)], capture_output=True, text=True, timeout=120,
                          env=env, start_new_session=True)
    out = done.stdout
    assert done.returncode == 0, done.stderr[-2000:]
    assert "LAUNCHED _Launched" in out  # not a Popen: a fork of the warm process
    assert "usage: flwr-clientapp" in out  # Flower's own parser ran, with the launch's argv
    assert "PLAIN" in out and "WARM ALIVE False" in out


def test_reply_object_pulls_end_at_the_round_deadline():
    """A reply whose objects never arrive (its silo died mid-upload) ends the pull at the
    exchange's deadline, not after Flower's two-hour retry budget."""
    from flwr.superlink.grid import http_grid
    from flwr.supercore.inflatable.inflatable_utils import ObjectPullError, ObjectUnavailableError

    from pfair.flower import server_app

    assert server_app.bound_object_pulls() and server_app.bound_object_pulls()  # idempotent
    calls = []

    def never(object_id):
        calls.append(time.monotonic())
        raise ObjectUnavailableError(object_id)

    token = server_app._PULL_DEADLINE.set(time.monotonic() + 1.0)
    t0 = time.monotonic()
    try:
        with pytest.raises(ObjectPullError):
            http_grid.pull_objects(object_ids=["a"], pull_object_fn=never)
    finally:
        server_app._PULL_DEADLINE.reset(token)
    assert 0.9 < time.monotonic() - t0 < 3.0 and len(calls) >= 3  # retried, every ≤ 0.5 s, until the deadline
    # Outside an exchange Flower's own limits apply (one retry after a ~1 s backoff here).
    t0 = time.monotonic()
    with pytest.raises(ObjectPullError):
        http_grid.pull_objects(object_ids=["a"], pull_object_fn=never, max_tries_per_object=2)
    assert time.monotonic() - t0 > 0.7
