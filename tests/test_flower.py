"""SteFFLe on a real Flower deployment on loopback: SuperLink and SuperNodes as separate processes.

Every deployment binds 127.0.0.1 on free ports, runs in its own temporary FLWR_HOME with
telemetry, update checks and dependency installation off, is bounded in time, and is torn down
with its process groups (LoopbackDeployment is a context manager). A deployment costs 15-25 s
(process start-up and Flower's HTTP round trips), so each test is a comprehensive run. The fault
tests are in tests/test_flower_faults.py (a second file, so that pytest-xdist runs the two on both
workers).
"""

from __future__ import annotations

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
from pfair.flower.deploy import run_deployment, write_federation  # noqa: E402
from pfair.privacy.ledger import PrivacyLedger  # noqa: E402

from flower_support import data, settings  # noqa: E402


@pytest.mark.slow
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
    assert all(0.99 * 2.0 < e <= 2.0 for e in spent)
    # Each silo spent what the simulation's did, plus its evaluation release (a DP release of its
    # test shard, charged to the same ledger).
    from pfair.privacy.calibration import composed_epsilon

    for c, sim_spent in zip(cfgs, sim.privacy_report_["epsilon_spent"]):
        events = PrivacyLedger.load(Path(c["state-dir"]) / "ledger.json").events
        assert [e.name for e in events].count("evaluation") == 1
        training = [e for e in events if e.name != "evaluation"]
        assert composed_epsilon(training, sim.privacy_report_["delta"].iloc[0]) == pytest.approx(sim_spent, rel=1e-12)
    assert res["settings"]["p_s"] == "dp" and res["settings"]["noise_seed"] is None
    assert res["evaluation"]["n_test"] == 90 and 0 <= res["evaluation"]["test_error"] < 0.5
    assert not res["events"]
    assert res["timing"]["silos_joined_s"] > 0 and len(res["timing"]["round_s"]) == 3
    # Each silo's state on disk: its ledger (bound to its data) and the run's noise plan.
    ledger = PrivacyLedger.load(Path(cfgs[0]["state-dir"]) / "ledger.json")
    assert ledger.fingerprint is not None and list(ledger.runs) == [res["run_id"]]


@pytest.mark.slow
def test_pfair_deploy_local_runs_end_to_end(tmp_path, capsys, monkeypatch):
    """The one-command launcher: partition, shards, SuperLink and SuperNodes, run, summary; in a
    relative workdir (the app path was doubled), with pfair train's JSON keys; a second run in the
    same workdir says it trains on what is left of the ledgers, and --new-ledgers starts them over."""
    from pfair.cli import main

    monkeypatch.chdir(tmp_path)
    args = ["deploy", "local", "--dataset", "german", "--silos", "2", "--epsilon", "2", "--epochs", "1",
            "--batch-size", "300", "--round-timeout", "60", "--timeout", "300", "--workdir", "wd", "--json"]

    def deploy(*extra):
        code = main(args + list(extra))
        return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    code, out = deploy()
    assert code == 0 and out["rounds"] == 2 and out["silos"] == 2 and out["workdir"] == str(tmp_path / "wd")
    assert 0 < out["test_error"] <= 1 and out["trivial_error"] > 0
    assert all(0 < row["epsilon_spent"] <= 2.0 and not row["refused"] for row in out["privacy"])
    assert (tmp_path / "wd" / "flower" / "result.json").exists()
    assert sorted(p.name for p in (tmp_path / "wd" / "silos" / "silo0").glob("*.parquet")) == ["test.parquet",
                                                                                              "train.parquet"]
    assert out["seconds_per_round"] > 0 and out["start_seconds"] > 0
    assert main(["train", "--dataset", "german", "--silos", "2", "--epsilon", "2", "--epochs", "1", "--json"]) == 0
    train_keys = set(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
    assert train_keys <= set(out)
    code, again = deploy()
    assert code == 0 and any("spent ledgers" in w and "--new-ledgers" in w for w in again["warnings"])
    assert min(again["noise_multiplier"]) > 2 * max(out["noise_multiplier"])  # what is left buys little
    code, fresh = deploy("--new-ledgers")
    assert code == 0 and any("started over" in w for w in fresh["warnings"])
    assert fresh["noise_multiplier"] == out["noise_multiplier"]


@pytest.mark.slow
def test_pfair_deploy_local_removes_its_temporary_workdir_and_takes_a_csv(tmp_path, capsys, monkeypatch):
    import tempfile

    from pfair.cli import main

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    rng = np.random.default_rng(0)
    n = 600
    import pandas as pd

    table = pd.DataFrame({"age": rng.integers(18, 80, n), "income": rng.normal(50, 10, n).round(1),
                          "sex": rng.choice(["f", "m"], n), "region": rng.choice(["n", "s", "e"], n)})
    table["default"] = np.where(table["income"] + rng.normal(0, 5, n) > 50, "yes", "no")
    table.to_csv(tmp_path / "loans.csv", index=False)
    code = main(["deploy", "local", "--csv", str(tmp_path / "loans.csv"), "--label", "default", "--positive-label",
                 "yes", "--sensitive", "sex", "--silos", "2", "--epsilon", "2", "--epochs", "1", "--batch-size", "100",
                 "--round-timeout", "60", "--timeout", "300", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and out["dataset"].startswith("loans") and out["silos"] == 2 and out["workdir"] is None
    assert not list(tmp_path.glob("pfair-deploy-*"))  # the temporary workdir is gone
    # The text summary, with --keep-workdir: pfair train's lines, and the kept directory named.
    data = ["--csv", str(tmp_path / "loans.csv"), "--label", "default", "--positive-label", "yes", "--sensitive", "sex",
            "--silos", "2", "--epsilon", "2", "--epochs", "1", "--batch-size", "100"]
    assert main(["deploy", "local", *data, "--round-timeout", "60", "--timeout", "300", "--keep-workdir"]) == 0
    text = capsys.readouterr().out
    kept = list(tmp_path.glob("pfair-deploy-*"))
    assert len(kept) == 1 and (kept[0] / "flower" / "result.json").exists() and str(kept[0]) in text
    assert main(["train", *data]) == 0
    labels = {line.split()[0] for line in capsys.readouterr().out.splitlines()
              if line.strip() and not line.startswith(" ") and line.split()[0].isalpha()}
    assert labels >= {"test", "model", "privacy", "training"}
    shown = {line.split()[0] for line in text.splitlines() if line.strip() and not line.startswith(" ")}
    assert labels - {"time"} <= shown, labels - shown


@pytest.mark.slow
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
        # lr_theta and lr_w as the run config's (it states SteFFLe's; DeepSteFFLe's own defaults differ).
        deep = DeepSteFFLe(mlp(3, 2, hidden=(8,)), init_seed=3, noise_seed=6, epsilon=2.0, lam=1.0, epochs=1,
                           batch_size=150, clip=0.5, p_s=[0.5, 0.5], seed=1, lr_theta=st.lr_theta, lr_w=st.lr_w,
                           device="cpu").fit(fed, ledgers="new")
    assert res["status"] == "completed" and res["rounds"] == 2 and len(res["theta"]) == deep.theta_.size == 50
    np.testing.assert_allclose(res["theta"], deep.theta_, rtol=0, atol=1e-6)
    with pytest.raises(PermissionError, match="not allowed"):
        build_module({"factory": "os:getcwd", "kwargs": {}, "init_seed": 0, "input_shape": None})
    del torch


@pytest.mark.slow
def test_a_deployed_fairness_target_equals_the_simulation(tmp_path):
    """max_violation over Flower: after each checkpoint every node answers query.checkpoint (the
    exact validation table of its held-out share and its noisy histogram, charged to its ledger);
    the server's λ path, checkpoint figures, returned θ and the ledgers equal SteFFLe.fit with the
    same noise seeds."""
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
    np.testing.assert_allclose([row["violation_released"] for row in res["lam"]],
                               sim.history_["violation_released"].to_numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose([c["error"] for c in res["checkpoints"]], sim.checkpoints_["validation_error"],
                               rtol=0, atol=1e-12)
    assert res["selected_epoch"] == sim.selected_epoch_
    spent = [row["ledger"]["epsilon_spent"] for row in res["silos"]]
    np.testing.assert_allclose(spent, sim.privacy_report_["epsilon_spent"], rtol=1e-12)
    ledger = PrivacyLedger.load(Path(cfgs[0]["state-dir"]) / "ledger.json")
    assert sum(e.steps for e in ledger.events if e.name == "violation_histogram") == 3  # 3 epochs, 3 checkpoints


@pytest.mark.slow
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
        "print('WARM ALIVE', launcher.alive(), flush=True)\n"
        # What a fork inherits: the warm process's imports, not its randomness. Two forks of a
        # process that imported pfair draw different secret noise (keys come from getrandom).
        "import pfair._core as core\n"
        "for _ in range(2):\n"
        "    if os.fork() == 0:\n"
        "        z = core.gaussian_stream(core.NoiseKey.secret(), 0, 0, 4)\n"
        "        print('NOISE', ' '.join(f'{v:.17g}' for v in z), flush=True)\n"
        "        os._exit(0)\n"
        "    os.wait()\n")
    env = {**os.environ, "PFAIR_CLIENTAPP_PRELOAD": "json"}
    import subprocess
    done = subprocess.run([__import__("sys").executable, str(script)], capture_output=True, text=True, timeout=120,
                          env=env, start_new_session=True)
    out = done.stdout
    assert done.returncode == 0, done.stderr[-2000:]
    assert "LAUNCHED _Launched" in out  # not a Popen: a fork of the warm process
    assert "usage: flwr-clientapp" in out  # Flower's own parser ran, with the launch's argv
    assert "PLAIN" in out and "WARM ALIVE False" in out
    noise = [line for line in out.splitlines() if line.startswith("NOISE")]
    assert len(noise) == 2 and noise[0] != noise[1]


@pytest.mark.slow
def test_reply_object_pulls_end_at_the_round_deadline():
    """A reply whose objects never arrive (its silo died mid-upload) ends the pull at the
    exchange's deadline, not after Flower's two-hour retry budget."""
    from flwr.superlink.grid import http_grid
    from flwr.supercore.inflatable.inflatable_utils import ObjectPullError, ObjectUnavailableError

    from pfair.flower import patches

    assert patches.bound_object_pulls() and patches.bound_object_pulls()  # idempotent
    calls = []

    def never(object_id):
        calls.append(time.monotonic())
        raise ObjectUnavailableError(object_id)

    token = patches.PULL_DEADLINE.set(time.monotonic() + 1.0)
    t0 = time.monotonic()
    try:
        with pytest.raises(ObjectPullError):
            http_grid.pull_objects(object_ids=["a"], pull_object_fn=never)
    finally:
        patches.PULL_DEADLINE.reset(token)
    assert 0.9 < time.monotonic() - t0 < 3.0 and len(calls) >= 3  # retried, every ≤ 0.5 s, until the deadline
    # Outside an exchange Flower's own limits apply (one retry after a ~1 s backoff here).
    t0 = time.monotonic()
    with pytest.raises(ObjectPullError):
        http_grid.pull_objects(object_ids=["a"], pull_object_fn=never, max_tries_per_object=2)
    assert time.monotonic() - t0 > 0.7


def _run_script(tmp_path, name: str, code: str, timeout: float = 120) -> str:
    """Run ``code`` in its own Python process (forks and Flower's patched defaults stay out of
    the test worker); returns its stdout, after checking it exited cleanly."""
    import subprocess
    import sys

    script = tmp_path / name
    script.write_text(code)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:  # the script's forks (zygotes, warm processes) go with its process group
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    assert proc.returncode == 0, out[-2000:] + err[-2000:]
    return out


@pytest.mark.slow
def test_loopback_object_pulls_back_off_from_50_ms(tmp_path):
    """pfair.flower.fast_superexec.short_pull_backoff: an object that is not there yet is asked
    again after 0.05 s, then 0.1 s, ... up to 0.5 s (Flower's own: 1 s up to 10 s), also through
    the helper that pulls a whole message, with 20× Flower's 500 tries, so that a missing object
    is given up after about as long as Flower's defaults would wait."""
    out = _run_script(tmp_path, "backoff.py", (
        "import threading\n"
        "from flwr.supercore.inflatable import inflatable_utils as iu\n"
        "from pfair.flower import fast_superexec as fx\n"
        "print('FLOWER', iu.pull_objects.__kwdefaults__['initial_backoff'],"
        " iu.pull_objects.__kwdefaults__['backoff_cap'])\n"
        "assert fx.short_pull_backoff() and fx.short_pull_backoff()  # a second call scales from Flower's\n"
        "kw = iu.pull_objects.__kwdefaults__\n"
        "print('PFAIR', kw['initial_backoff'], kw['backoff_cap'], kw['max_tries_per_object'],"
        " iu.pull_and_inflate_object_from_tree.__kwdefaults__['initial_backoff'])\n"
        "waits = []\n"
        "class Event(threading.Event):\n"
        "    def wait(self, timeout=None):\n"
        "        waits.append(timeout)\n"
        "        return False\n"
        "iu.threading = fx.module_with(threading, Event=Event)\n"
        "iu.random = fx.module_with(iu.random, uniform=lambda a, b: 0.0)  # no jitter\n"
        "tries = []\n"
        "def pull(object_id):\n"
        "    tries.append(object_id)\n"
        "    if len(tries) < 7:\n"
        "        raise iu.ObjectUnavailableError(object_id)\n"
        "    return b'x'\n"
        "print('GOT', iu.pull_objects(['a'], pull_object_fn=pull), len(tries))\n"
        "print('WAITS', ' '.join(f'{w:g}' for w in waits))\n"))
    assert "FLOWER 1 10" in out
    assert "PFAIR 0.05 0.5 10000 0.05" in out
    assert "GOT {'a': b'x'} 7" in out
    assert "WAITS 0.05 0.1 0.2 0.4 0.5 0.5" in out


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan"])
def test_a_bad_pull_backoff_names_the_variable(monkeypatch, value):
    from pfair.flower import fast_superexec as fx

    monkeypatch.setenv("PFAIR_PULL_BACKOFF", value)
    with pytest.raises(ValueError, match="PFAIR_PULL_BACKOFF"):
        fx.short_pull_backoff()  # raises before it changes anything in this process


@pytest.mark.slow
def test_a_zygote_becomes_the_superexec_with_flowers_arguments(tmp_path):
    """pfair.flower.fast_superexec.Zygote / superexec_popen: a process forked early (single
    threaded) runs Flower's own flower-superexec with the arguments of the first start, in a new
    session when asked; later starts and other commands go to the real Popen; the handle stops and
    reaps it like a Popen; an unused zygote ends with its parent's pipe; a waiting SuperExec wakes
    on notify."""
    out = _run_script(tmp_path, "zygote.py", (
        "import os, sys, time\n"
        "from pfair.flower import fast_superexec as fx\n"
        "started = []\n"
        "popen = fx.superexec_popen(fx.CLIENTAPP_COMMAND, real=lambda args, *a, **kw: started.append(list(args)))\n"
        "print('ZYGOTE', popen.zygote is not None, flush=True)\n"
        "p = popen(['flower-superexec', '--help'])\n"
        "print('HANDLE', type(p).__name__, p.pid == popen.zygote.pid, flush=True)\n"
        "print('EXIT', p.wait(timeout=60), p.poll(), flush=True)\n"
        "popen(['flower-superexec', '--insecure'])\n"
        "popen(['echo', 'hi'])\n"
        "print('REAL', started, flush=True)\n"
        # A start the zygote cannot mimic (other Popen arguments): Flower's own; the zygote ends.
        "other = []\n"
        "popen2 = fx.superexec_popen(fx.CLIENTAPP_COMMAND, real=lambda args, *a, **kw: other.append(kw))\n"
        "popen2(['flower-superexec'], stdout=None)\n"
        "_, status = os.waitpid(popen2.zygote.pid, 0)\n"
        "print('ABANDONED', other, os.waitstatus_to_exitcode(status), flush=True)\n"
        # A new session when asked (Flower's SuperLink detaches its SuperExec so).
        "z = fx.Zygote(lambda: print('SESSION', os.getsid(0) == os.getpid(), sys.argv, flush=True))\n"
        "print('EXIT2', z.start(['x', 'y'], new_session=True).wait(timeout=30), flush=True)\n"
        "try:\n"
        "    z.start(['again'])\n"
        "except RuntimeError as e:\n"
        "    print('ONCE', e, flush=True)\n"
        # terminate / wait(timeout) as Flower's SuperLink does at shutdown.
        "z = fx.Zygote(lambda: time.sleep(60))\n"
        "h = z.start(['sleeper'])\n"
        "try:\n"
        "    h.wait(timeout=0.2)\n"
        "except Exception as e:\n"
        "    print('TIMEOUT', type(e).__name__, flush=True)\n"
        "h.terminate()\n"
        "print('TERMINATED', h.wait(timeout=30), flush=True)\n"
        # Never started: ends when this side's pipe closes.
        "z = fx.Zygote(lambda: print('NEVER', flush=True))\n"
        "os.close(z._write_fd)\n"
        "_, status = os.waitpid(z.pid, 0)\n"
        "print('UNUSED', os.waitstatus_to_exitcode(status), flush=True)\n"
        # The SuperExec's wait between two polls for tasks returns when woken.
        "r, w = os.pipe()\n"
        "wait = fx.waiter(r)\n"
        "t0 = time.monotonic(); wait(0.05); idle = time.monotonic() - t0\n"
        "fx.notify(w); fx.notify(w)  # two messages: two tasks to ask for\n"
        "t0 = time.monotonic(); wait(30); wait(30); woken = time.monotonic() - t0\n"
        "t0 = time.monotonic(); wait(0.05); drained = time.monotonic() - t0\n"
        "print('WAKE', idle >= 0.04, woken < 5, drained >= 0.04, flush=True)\n"))
    assert "ZYGOTE True" in out and "HANDLE _Started True" in out
    assert "usage: flower-superexec" in out  # Flower's own parser ran in the zygote, with the start's argv
    assert "EXIT 0 0" in out
    # A second SuperExec is a fresh process of pfair's warm-fork SuperExec; anything else is untouched.
    assert "'-m', 'pfair.flower.fast_superexec', '--insecure']" in out and "['echo', 'hi']]" in out
    assert "SESSION True ['x', 'y']" in out and "EXIT2 0" in out and "ONCE a zygote starts once" in out
    assert "TIMEOUT TimeoutExpired" in out and "TERMINATED -15" in out
    assert "UNUSED 0" in out and "NEVER" not in out
    assert "ABANDONED [{'stdout': None}] 0" in out
    assert "WAKE True True True" in out


def test_every_flower_patch_stands_behind_the_one_version_check(monkeypatch):
    """pfair.flower.patches: under a Flower release the patches were not read against, none is
    applied (each returns False and Flower's own functions stay), and the installed release is one
    of PATCHED_RELEASES, which the flower extra's range matches."""
    import tomllib
    from pathlib import Path

    from flwr.superlink.grid import http_grid
    from flwr.supercore.superexec import run_superexec
    from flwr.supernode import start_client_internal

    from pfair.flower import patches

    assert patches.flower_release() in patches.PATCHED_RELEASES
    extra = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["flower"]
    low, high = min(patches.PATCHED_RELEASES), max(patches.PATCHED_RELEASES)
    assert any(f"flwr>={low[0]}.{low[1]}.0,<{high[0]}.{high[1] + 1}" in d for d in extra), extra
    monkeypatch.setattr(patches, "flower_release", lambda: (1, 99))
    patches.patchable.cache_clear()
    try:
        before = (http_grid.pull_objects, start_client_internal.time, run_superexec.time,
                  start_client_internal._pull_and_store_message)
        applied = [patches.bound_object_pulls(), patches.node_idle_poll(0.2, 0.02),
                   patches.superexec_wait(lambda s: None), patches.wake_after_pull(lambda: None),
                   patches.short_pull_backoff(), patches.node_superexec_popen(None),
                   patches.link_superexec_popen(None), patches.route_app_launches(None),
                   patches.wake_on_new_runs(lambda: None), patches.hold_pulls(0.5), patches.skip_idle_middleware(),
                   patches.direct_middleware()]
        assert applied == [False] * 12 and patches.link_hold() == 0.0
        assert before == (http_grid.pull_objects, start_client_internal.time, run_superexec.time,
                          start_client_internal._pull_and_store_message)
    finally:
        patches.patchable.cache_clear()


def test_the_flower_internals_the_loopback_tuning_replaces_are_there():
    """pfair.flower.fast_supernode / fast_superlink / fast_superexec replace module globals and
    methods of Flower 1.41; after a Flower upgrade that moves them, the deployments would still
    pass, only slower (a SuperExec asking every second). Check that each is still where it is
    replaced, and called the way it is replaced."""
    import importlib
    import inspect

    from flwr.server.superlink.linkstate import in_memory_linkstate, sql_linkstate
    from flwr.supercore.inflatable import inflatable_utils
    from flwr.supercore.superexec import run_superexec
    from flwr.supercore.superexec.executor import subprocess_executor
    from flwr.supernode import start_client_internal

    superlink_cli = importlib.import_module("flwr.superlink.cli.flower_superlink")
    assert "time.sleep(task_poll_interval)" in inspect.getsource(run_superexec)
    node = inspect.getsource(start_client_internal)
    assert "subprocess.Popen(command)" in node and '["flower-superexec"]' in node
    assert "run_id = _pull_and_store_message(" in node and "time.sleep(3)" in node and "time.sleep(0.5)" in node
    assert "self.superexec_process = subprocess.Popen(command, **get_popen_detach_kwargs())" in \
        inspect.getsource(superlink_cli)
    assert 'command = ["flower-superexec"]' in inspect.getsource(superlink_cli)
    assert "subprocess.Popen(" in inspect.getsource(subprocess_executor)
    for cls in (in_memory_linkstate.InMemoryLinkState, sql_linkstate.SqlLinkState):
        assert "create_run" in vars(cls)
    for fn in (inflatable_utils.pull_objects, inflatable_utils.pull_and_inflate_object_from_tree):
        assert {"initial_backoff", "backoff_cap", "max_tries_per_object"} <= set(fn.__kwdefaults__)
    # hold_pulls: the handlers it holds, called through their modules, and the stores that wake them.
    from flwr.superlink.servicer.fleet import fleet_handlers
    from flwr.superlink.servicer.runtime import runtime_handlers

    for module in (fleet_handlers, runtime_handlers):
        assert {"pull_messages", "pull_object"} <= set(vars(module))
        assert "object_found" in inspect.getsource(module.pull_object)
    assert "fleet_handlers.pull_messages(" in inspect.getsource(importlib.import_module("flwr.superlink.routers.fleet.router"))
    assert "handlers.pull_messages(request, state, task)" in \
        inspect.getsource(importlib.import_module("flwr.supercore.routers.runtime.router"))
    for cls in (in_memory_linkstate.InMemoryLinkState, sql_linkstate.SqlLinkState):
        assert all(callable(getattr(cls, m)) for m in ("store_message_ins", "store_message_res", "store_object"))
    # skip_idle_middleware: each middleware it skips hands on the requests it skips them for.
    from pfair.flower import patches

    link_main = importlib.import_module("flwr.superlink.main")
    for name, passes in patches.PASS_THROUGH.items():
        cls = getattr(link_main, name, None) or getattr(importlib.import_module("flwr.supernode.main"), name, None)
        if name == "RuntimeTracingMiddleware" and cls is None:
            continue  # Flower 1.42 has no tracing middleware
        cls = getattr(cls, "wrapped", cls)
        body = inspect.getsource(cls.dispatch)
        condition = {patches._control_free: "_is_control_path(request.url.path)",
                     patches._fleet_free: 'request.url.path.startswith("/v1/fleet/")',
                     patches._untraced: 'os.getenv("FLWR_TRACING_ENABLED") != "1"'}[passes]
        if name == "ControlSensitiveResponseMiddleware":  # acts on a set of Control routes only
            control = importlib.import_module("flwr.superlink.routers.control.middlewares")
            condition = "if _is_control_sensitive_route(request):"
            assert all(path.startswith("/v1/control/") for _, path in control.CONTROL_SENSITIVE_ROUTE_KEYS)
        assert condition in body, name
    assert "_get_middleware()" in inspect.getsource(link_main)
    # direct_middleware: both HTTP apps are built by their module's create_app, looked up when the
    # command starts its API, and their BaseHTTPMiddleware layers keep their dispatch where it reads it.
    from starlette.middleware.base import BaseHTTPMiddleware, _CachedRequest

    node_main = importlib.import_module("flwr.supernode.main")
    node_cli = importlib.import_module("flwr.supernode.cli.flower_supernode")
    assert callable(link_main.create_app) and callable(node_main.create_app)
    assert "fastapi_app = create_app(" in inspect.getsource(superlink_cli)
    assert "app=create_app(" in inspect.getsource(node_cli)
    assert "Middleware(BaseHTTPMiddleware, dispatch=http_error_translator)" in inspect.getsource(link_main)
    assert 'fastapi_app.middleware("http")(http_error_translator)' in inspect.getsource(node_main)
    assert "self.dispatch_func = self.dispatch if dispatch is None else dispatch" in \
        inspect.getsource(BaseHTTPMiddleware.__init__)
    assert "wrapped_receive" in vars(_CachedRequest)


def test_a_held_pull_answers_when_something_is_stored_or_at_its_end():
    """pfair.flower.patches._Stored.hold: a pull that finds nothing is asked again whenever the
    link state stores something and returned as soon as its answer is ready; with nothing stored
    it returns its last (empty) answer when the hold ends; beyond MAX_HELD pulls at once, a pull
    is answered at once."""
    import threading
    import time

    from pfair.flower import patches

    stored = patches._Stored()
    box, calls = [], [0]

    def fetch():
        calls[0] += 1
        return list(box)

    threading.Timer(0.2, lambda: (box.append("reply"), stored.bump())).start()
    t0 = time.monotonic()
    assert stored.hold(fetch, bool, 30.0) == ["reply"]
    assert time.monotonic() - t0 < 15 and calls[0] == 2  # woken by the store, not by the end of the hold
    box.clear()
    t0 = time.monotonic()
    assert stored.hold(fetch, bool, 0.3) == [] and time.monotonic() - t0 >= 0.3
    stored.held = patches.MAX_HELD  # a full house: no hold
    t0, calls[0] = time.monotonic(), 0
    assert stored.hold(fetch, bool, 30.0) == [] and calls[0] == 1 and time.monotonic() - t0 < 15
    assert stored.held == patches.MAX_HELD


def test_a_skipped_middleware_still_sees_the_requests_it_acts_on():
    """pfair.flower.patches.passing: a request whose path the middleware would hand on untouched
    goes straight to the next app; any other goes through the middleware."""
    import asyncio

    from starlette.middleware.base import BaseHTTPMiddleware

    from pfair.flower import patches

    seen = []

    class Marking(BaseHTTPMiddleware):
        async def dispatch(self, request, call_next):
            seen.append(request.url.path)
            return await call_next(request)

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    wrapped = patches.passing(Marking, patches._control_free)(app)

    async def call(path):
        sent = []

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(), "root_path": "",
                 "query_string": b"", "headers": [], "scheme": "http", "server": ("127.0.0.1", 1)}
        await wrapped(scope, receive, send)
        return [m.get("status") for m in sent if m["type"] == "http.response.start"]

    assert asyncio.run(call("/v1/fleet/pull-messages")) == [200] and seen == []
    assert asyncio.run(call("/v1/control/start-run")) == [200] and seen == ["/v1/control/start-run"]


def test_a_direct_middleware_answers_as_flowers_layer_does():
    """pfair.flower.patches.direct: Flower's own error translator and a layer that reads the
    request's body, sets request state and rewrites the response give, run directly on a Fleet
    API call, the same response as the BaseHTTPMiddleware they are (an answer, a translated
    error); a Control API call still goes through the BaseHTTPMiddleware."""
    import asyncio

    from flwr.supercore.error.http import http_error_translator
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.responses import Response

    from pfair.flower import patches

    dispatched = []

    class Rewriting(BaseHTTPMiddleware):
        async def dispatch(self, request, call_next):
            request.state.seen = await request.body()
            response = await call_next(request)
            dispatched.append(request.url.path)
            return Response(b"outer:%d" % response.status_code, status_code=response.status_code,
                            headers={"x-inner": response.headers.get("x-inner", "")})

    async def app(scope, receive, send):
        body = (await receive())["body"]  # replayed: the layer above read it first
        if body == b"fail":
            raise ValueError("handler failed")
        await send({"type": "http.response.start", "status": 201,
                    "headers": [(b"x-inner", scope["state"]["seen"])]})
        await send({"type": "http.response.body", "body": body, "more_body": True})
        await send({"type": "http.response.body", "body": b"!"})

    async def call(asgi, path, body):
        sent = []

        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(), "root_path": "",
                 "query_string": b"", "headers": [], "scheme": "http", "server": ("127.0.0.1", 1), "state": {}}
        await asgi(scope, receive, send)
        # what goes on the wire: the status, the headers, the body (however it is cut in messages)
        starts = [(m["status"], sorted(m["headers"])) for m in sent if m["type"] == "http.response.start"]
        return starts, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")

    def flower(inner):  # as Flower stacks them: the error translator outside
        return BaseHTTPMiddleware(Rewriting(inner), dispatch=http_error_translator)

    def direct(inner):
        return patches.direct(BaseHTTPMiddleware)(patches.direct(Rewriting)(inner), dispatch=http_error_translator)

    for path in ("/v1/fleet/pull-messages", "/v1/runtime/push-object"):
        for body in (b"payload", b"fail"):
            want, got = asyncio.run(call(flower(app), path, body)), asyncio.run(call(direct(app), path, body))
            assert got == want and len(want[0]) == 1, (path, body, got, want)
        assert dispatched[-2:] == [path, path]
    assert asyncio.run(call(direct(app), "/v1/fleet/pull-messages", b"payload")) == \
        ([(201, [(b"content-length", b"9"), (b"x-inner", b"payload")])], b"outer:201")
    assert asyncio.run(call(direct(app), "/v1/fleet/pull-messages", b"fail"))[0][0][0] == 500
    # a Control API call (possibly streamed) is not gathered: the BaseHTTPMiddleware runs it
    seen = []
    real_init = BaseHTTPMiddleware.__call__

    async def spy(self, scope, receive, send):
        seen.append(scope["path"])
        await real_init(self, scope, receive, send)

    try:
        BaseHTTPMiddleware.__call__ = spy
        asyncio.run(call(direct(app), "/v1/control/stream-logs", b"payload"))
        asyncio.run(call(direct(app), "/v1/fleet/pull-messages", b"payload"))
    finally:
        BaseHTTPMiddleware.__call__ = real_init
    assert seen == ["/v1/control/stream-logs"] * 2


@pytest.mark.slow
def test_loopback_superexecs_are_zygotes_of_their_node_and_link(tmp_path):
    """In a live loopback deployment, the SuperLink's and each SuperNode's SuperExec is a fork of
    that process (same command line, a child of it) with a warm process of its own, not a fresh
    ``flower-superexec``; the SuperLink's is in a session of its own, as Flower starts it; all are
    gone after teardown."""
    from pfair.flower.deploy import LoopbackDeployment, _children, descendants

    from flower_support import no_flower_processes_left

    def cmdline(pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return f.read()
        except OSError:
            return b""

    def children(pid):
        return _children().get(pid, [])

    with LoopbackDeployment(tmp_path / "flwr") as dep:
        dep.start_superlink()
        node = dep.start_supernode("supernode0", {"silo-id": 0, "data-path": str(tmp_path / "none.csv"),
                                                  "state-dir": str(tmp_path / "state"), "epsilon": 1.0})
        link = dep.procs["superlink"]
        found = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(found) < 2:
            for name, proc in (("link", link), ("node", node)):
                for c in children(proc.pid):
                    if cmdline(c) == cmdline(proc.pid) and children(c):  # a SuperExec with its warm process
                        found[name] = c
            time.sleep(0.2)
        assert set(found) == {"link", "node"}, dep.log("supernode0")[-2000:] + dep.log("superlink")[-2000:]
        everything = descendants([link.pid, node.pid])
        assert not any(b"flower-superexec" in cmdline(p) for p in everything)
        assert os.getsid(found["link"]) == found["link"] and os.getsid(found["node"]) == os.getsid(node.pid)
    assert no_flower_processes_left(dep)



def _link(grid, **kw):
    from pfair.flower.server_app import SiloLink

    return SiloLink(grid, n_silos=3, common={}, **{"round_timeout": 120.0, "poll": 0.2, **kw})


def test_a_reply_stuck_mid_upload_does_not_cost_the_live_silos_theirs():
    """SiloLink.exchange: a pull that waits out the round for a reply whose objects never
    come (its silo died mid-upload) is followed by one last pull at the deadline, which takes the
    replies that arrived meanwhile and waits for no object (the pull's time limit is now)."""
    from types import SimpleNamespace

    from pfair.flower import patches

    calls = []

    class Grid:
        def push_messages(self, messages):
            return [f"m{i}" for i, _ in enumerate(messages)]

        def pull_messages(self, ids):
            calls.append((sorted(ids), patches.PULL_DEADLINE.get() - time.monotonic()))
            if len(calls) == 1:
                time.sleep(0.6)  # stuck on m1's objects until past the round's deadline
                return []
            return [SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id="m0"))]

    msgs = [SimpleNamespace(metadata=SimpleNamespace(dst_node_id=n)) for n in (10, 11)]
    out = _link(Grid(), round_timeout=0.5, poll=0.01).exchange(msgs, timeout=0.5)
    assert [(node, reply is not None) for node, reply in out] == [(10, True), (11, False)]
    assert len(calls) == 2 and calls[1][0] == ["m0", "m1"] and calls[1][1] <= 0.0
    assert patches.PULL_DEADLINE.get() is None  # reset after the exchange


def test_dead_and_silent_nodes_are_not_greeted_every_round():
    """A node a silo has left for a new one (the SuperLink lists it until its heartbeat expires)
    gets no more hellos; a node whose hello fails is greeted again after 1, 2, 4, 8, 16 rounds, not
    every round (each failed hello costs a round its timeout)."""
    from types import SimpleNamespace

    from pfair.flower import codec

    class Grid:
        def get_node_ids(self):
            return [1, 2, 3, 4, 99]

    link = _link(Grid())
    link.silo_of = {1: 0, 2: 1, 3: 2}
    greeted = []

    def exchange(msgs, timeout=None):
        out = []
        for m in msgs:
            node = m.metadata.dst_node_id
            greeted.append(node)
            answer = None
            if node == 4:  # silo 2 back on a new SuperNode
                answer = SimpleNamespace(has_error=lambda: False,
                                         content={"meta": codec.config(silo=2, n_records=100, n_features=3)})
            out.append((node, answer))
        return out

    # (Flower's Message needs a running app's identity; the link only reads these fields.)
    link.message = lambda node, kind, **kw: SimpleNamespace(metadata=SimpleNamespace(dst_node_id=node))
    link.exchange = exchange

    for rnd in range(21):
        link.greet_new_nodes(rnd)
    assert link.silo_of == {1: 0, 2: 1, 4: 2} and link.left == {3}
    assert [n for n in greeted if n != 99] == [4]  # 3, still listed but left, is never greeted
    rounds_99 = [e["time"] for e in link.events if e["event"] == "hello_failed" and e["node"] == 99]
    assert len(rounds_99) == 5  # rounds 0, 2, 5, 10 and 19
    assert [b for n, b in sorted(link.hello_backoff.items()) if n == 99] == [(36, 16)]


def test_a_silo_reply_travels_as_one_config_record_and_a_malformed_one_is_refused():
    """pfair.flower.codec: the five parts of a reply go end to end as the float64 bytes of one
    config entry with their lengths (a reply of 3 Flower objects instead of 6: fewer HTTP requests
    at every hop), decode to the same values bit for bit, and a reply whose layout does not add up
    is refused with the reason."""
    from flwr.app import ConfigRecord

    from pfair.flower import codec
    from pfair.protocol.messages import PARTS, SiloMessage

    rng = np.random.default_rng(3)
    lengths = {"loss_grad": 7, "psi_theta_sfree": 7, "psi_theta": 7, "psi_w_sfree": 0, "psi_w": 4}
    msg = SiloMessage(silo=2, round=5, **{p: rng.standard_normal(lengths[p]) for p in PARTS})
    content = codec.silo_message_content(msg)
    assert list(content.keys()) == ["meta"] and list(content["meta"]["part-lengths"]) == [7, 7, 7, 0, 4]
    assert len(content["meta"]["packed"]) == 25 * 8
    back = codec.read_silo_message(content)
    assert (back.silo, back.round) == (2, 5)
    for p in PARTS:
        assert back.to_arrays()[p].tobytes() == msg.to_arrays()[p].tobytes()

    def with_meta(**changes):
        meta = dict(content["meta"])
        meta.update(changes)
        bad = codec.silo_message_content(msg)
        bad["meta"] = ConfigRecord({k: v for k, v in meta.items() if v is not None})
        return bad

    for bad, reason in [
        (with_meta(**{"part-lengths": [7, 7, 7, 0, 5]}), "do not split"),   # one value too many
        (with_meta(**{"part-lengths": [7, 7, 8, -1, 4]}), "do not split"),  # a negative length
        (with_meta(**{"part-lengths": [7, 7, 7, 4]}), "do not split"),      # a part missing
        (with_meta(**{"part-lengths": "7,7,7,0,4"}), "malformed"),
        (with_meta(**{"part-lengths": None}), "malformed"),                 # no lengths at all
        (with_meta(packed=None), "malformed"),                              # no values at all
        (with_meta(packed=b"\0" * 21), "multiple of 8"),                    # not whole doubles
        (with_meta(packed=[0.0] * 25), "as bytes"),                         # not bytes
    ]:
        with pytest.raises(ValueError, match=reason):
            codec.read_silo_message(bad)
    extra = codec.silo_message_content(msg)
    extra["parts"] = codec.arrays(packed=np.zeros(25))
    with pytest.raises(ValueError, match="one record 'meta'"):
        codec.read_silo_message(extra)


def test_theta_and_w_travel_in_the_config_and_a_malformed_model_message_is_refused():
    """pfair.flower.codec: θ and W go to the silos end to end as the float64 bytes of one config
    entry, with θ's length beside it; they decode bit for bit, and a message whose split does not
    fit is refused with the reason."""
    from flwr.app import ConfigRecord, RecordDict

    from pfair.flower import codec

    rng = np.random.default_rng(4)
    theta, w = rng.standard_normal(13), rng.standard_normal(4)
    content = RecordDict({"config": codec.config(round=2, **codec.model_config(theta, w))})
    assert content["config"]["theta-length"] == 13 and len(content["config"]["theta-w"]) == 17 * 8
    t2, w2 = codec.read_model(content)
    assert t2.tobytes() == theta.tobytes() and w2.tobytes() == w.tobytes()
    model = codec.model_config(theta, w)["theta-w"]
    for length, raw, reason in [(18, model, "within it"), (-1, model, "within it"), ("x", model, "malformed"),
                                (None, model, "malformed"), (13, None, "malformed"), (13, model[:-3], "multiple of 8"),
                                (13, "0.5", "as bytes")]:
        cfg = {k: v for k, v in (("theta-length", length), ("theta-w", raw)) if v is not None}
        with pytest.raises(ValueError, match=reason):
            codec.read_model(RecordDict({"config": ConfigRecord(cfg)}))
    # The strategy hooks' ArrayRecord (inside the ServerApp) splits the same way.
    t3, w3 = codec.split_model(codec.model_arrays(theta, w), 13)
    assert t3.tobytes() == theta.tobytes() and w3.tobytes() == w.tobytes()


@pytest.mark.slow
def test_the_deep_warm_preload_covers_what_a_deep_silo_step_imports(tmp_path):
    """A deep model's ClientApps are forks of a warm process that imported TORCH_PRELOAD; a silo
    step (the torch provider's per-record gradients through torch.func) must then import nothing
    more of torch or sympy, which would cost every message about 2 s of CPU (the first torch.func
    transform of a process imports torch's compiler stack)."""
    pytest.importorskip("torch", reason="the torch extra is not installed (pip install 'pfair[torch]')")
    out = _run_script(tmp_path, "preload.py", (
        "import importlib, sys, warnings\n"
        "import numpy as np\n"
        "from pfair.flower.deploy import TORCH_PRELOAD\n"
        "for name in TORCH_PRELOAD.split(','):\n"
        "    importlib.import_module(name)\n"
        "import pfair\n"
        "from pfair.torch import DeepSteFFLe\n"
        "from pfair.torch.models import mlp\n"
        "rng = np.random.default_rng(0)\n"
        "X, y, s = rng.standard_normal((120, 3)), rng.integers(0, 2, 120), rng.integers(0, 2, 120)\n"
        "fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=np.arange(120) % 2)\n"
        "before = set(sys.modules)\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n"
        "    DeepSteFFLe(mlp(3, 2, hidden=(4,)), epsilon=2.0, epochs=1, batch_size=54, p_s=[0.5, 0.5],\n"
        "                device='cpu').fit(fed, ledgers='new')\n"
        "new = sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('torch', 'sympy'))\n"
        "print('NEW', len(new), new[:12])\n"), timeout=300)
    assert "NEW 0 []" in out, out[-1500:]


@pytest.mark.slow
def test_pfair_deploy_local_protects_whole_records_as_pfair_train_does(tmp_path, capsys, monkeypatch):
    """--protect record end to end on Flower: shuffled epochs (the random batches a deployed silo
    answers), each silo's noise calibrated as the simulation calibrates the same run, and the
    summary says what the guarantee covers."""
    from pfair.cli import main

    monkeypatch.chdir(tmp_path)
    common = ["--dataset", "german", "--silos", "2", "--epsilon", "2", "--epochs", "2", "--batch-size", "100",
              "--protect", "record"]
    assert main(["deploy", "local", *common, "--round-timeout", "60", "--timeout", "300", "--workdir", "wd",
                 "--json"]) == 0
    deployed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(["train", *common, "--sampling", "shuffle", "--json"]) == 0
    simulated = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert deployed["protect"] == simulated["protect"] == "record"
    assert all(row["accounting"] == "shuffle" and not row["refused"] for row in deployed["privacy"])
    np.testing.assert_allclose(deployed["noise_multiplier"], simulated["noise_multiplier"], rtol=1e-9)
    assert all(0 < row["epsilon_spent"] <= 2.0 for row in deployed["privacy"])
    assert main(["train", *common, "--sampling", "shuffle"]) == 0
    assert "w.r.t. whole records (protect=record)" in capsys.readouterr().out


@pytest.mark.slow
def test_pfair_deploy_local_plans_like_pfair_train_on_a_small_csv(tmp_path, capsys, monkeypatch):
    """Issue 37, items 2-4: a 600-row table (silos of 225 records, 203 for training) deploys with
    pfair train's defaults: epsilon 1 and batch_size auto = 203 (it failed with the fixed 2048); a
    progress line per round; the summary has train's lines, the plain privacy sentence with delta's
    value, and the held-out share named. A run in which a silo answered no round exits 4, naming it."""
    from pfair.cli import main

    from test_deploy_plan import data_args, loans

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PFAIR_PROGRESS", "1")
    csv = loans(tmp_path / "loans.csv")
    args = ["deploy", "local", *data_args(csv), "--epochs", "2", "--round-timeout", "60", "--timeout", "300",
            "--workdir", "wd"]
    assert main(args) == 0
    captured = capsys.readouterr()
    out, err = captured.out, captured.err
    assert "deploying 2 silos of loans on 127.0.0.1 (2 rounds: 2 epochs of 1;" in err
    assert "2/2" in err and "2 of 2 silos answered" in err  # the progress line
    assert "training      2 epochs, batch 203 per silo and round (batch_size auto)" in out
    assert "each silo's records' sex protected at epsilon = 1, delta = 2e-05" in out
    assert "it holds out [22, 22] to validate the checkpoint models" in out
    assert main(["train", *data_args(csv), "--epochs", "2"]) == 0
    train_out = capsys.readouterr().out
    labels = {ln.split()[0] for ln in train_out.splitlines() if ln.strip() and not ln.startswith(" ")} - {"time"}
    assert labels <= {ln.split()[0] for ln in out.splitlines() if ln.strip() and not ln.startswith(" ")}
    run = json.loads((tmp_path / "wd" / "run.json").read_text())
    assert run["batch_size"] == 203 and run["epochs"] == 2 and run["status"] == "completed"
    assert [row["rounds_answered"] for row in run["privacy"]] == [2, 2]
    assert main(["privacy-report", str(tmp_path / "wd" / "run.json"), "--explain"]) == 0
    assert "noise_multiplier" in capsys.readouterr().out
    # The same run, as if silo 1 had refused every round: the model is reported, and the exit code is 4.
    import pfair.flower.deploy as deploy

    result = json.loads((tmp_path / "wd" / "flower" / "result.json").read_text())
    result["silos"][1]["rounds_answered"] = 0
    result["events"].append({"event": "error_reply", "round": 0, "silo": 1,
                             "reason": "code 0: Traceback ...\nSettingsMismatch: silo 1: another run's plan"})
    monkeypatch.setattr(deploy, "run_deployment", lambda *a, **k: result)
    assert main(args + ["--json", "--new-ledgers"]) == 4
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["status"] == "partial"
    assert out["refusals"] == ["silo 1: answered none of the 2 rounds (SettingsMismatch: silo 1: another run's plan)"]


@pytest.mark.slow
def test_a_deployment_that_times_out_says_so_in_one_line_with_logs_that_exist(tmp_path, capsys, monkeypatch):
    import tempfile

    from pfair.cli import main

    from test_deploy_plan import data_args, loans

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    csv = loans(tmp_path / "loans.csv")
    code = main(["deploy", "local", *data_args(csv), "--epochs", "2", "--timeout", "1"])
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if ln.startswith("pfair deploy local: error:"))
    assert code == 1 and "Traceback" not in err
    assert "the run did not finish within 1 s (--timeout)" in line
    logs = Path(err.split("logs: ")[1].split(";")[0])
    assert logs.is_dir() and (logs / "superlink.log").exists()  # kept, though the temporary workdir is gone
    assert not list(tmp_path.glob("pfair-deploy-[!l]*"))


@pytest.mark.slow
def test_pfair_deploy_local_runs_and_tunes_the_stretched_run_pfair_train_runs(tmp_path, capsys, monkeypatch):
    """batch_size='auto' of a private run at λ > 0 stretches the run to the batch it picks (epochs,
    step and decay times m / 1024): deploy local resolves it from the silos' training records and
    sends it written out, so the deployment runs the rounds pfair train runs on the same data."""
    import pandas as pd

    from pfair.cli import main

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(1)
    n = 4000  # two silos of about 1,350 training records each: a batch above 1,024, k ≈ 1.3
    table = pd.DataFrame({"age": rng.integers(18, 80, n), "income": rng.normal(50, 10, n).round(1),
                          "sex": rng.choice(["f", "m"], n)})
    table["default"] = np.where(table["income"] + rng.normal(0, 5, n) > 50, "yes", "no")
    table.to_csv(tmp_path / "loans.csv", index=False)
    data = ["--csv", str(tmp_path / "loans.csv"), "--label", "default", "--positive-label", "yes", "--sensitive", "sex",
            "--silos", "2", "--epsilon", "2", "--epochs", "1"]
    assert main(["deploy", "local", *data, "--round-timeout", "60", "--timeout", "300", "--json", "--tune"]) == 0
    deployed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(["train", *data, "--json"]) == 0
    trained = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert deployed["epochs"] == trained["epochs"] == 2  # ⌈1 · k⌉ = 2 epochs (not the 1 given)
    assert 1024 < deployed["batch_size"] == trained["batch_size"] < 2048
    assert deployed["selected_epoch"] == trained["selected_epoch"] == 2
    # --tune's steps are stated like lr_theta: times k, as "auto" multiplied the default 0.5 (to trained's).
    k = trained["lr_theta"] / 0.5
    assert k == pytest.approx(trained["batch_size"] / 1024)
    assert [r["param_lr_theta"] for r in deployed["tune"]["results"]] == pytest.approx([0.25 * k, 1.0 * k])
    assert deployed["lr_theta"] in [r["param_lr_theta"] for r in deployed["tune"]["results"]]


def test_the_servers_constant_predictor_is_the_simulations():
    """What a deployed run returns at a fixed λ > 0 when its last model is shown no better than the
    constant predictor: the strategy builds the same θ as the simulation (the linear model's, and a
    deep factory's module with its last linear layer set), from the released class and share only."""
    torch = pytest.importorskip("torch")
    from pfair.flower.models import build_module
    from pfair.flower.server_app import SteFFLeStrategy
    from pfair.providers.linear import constant_theta
    from pfair.providers.torch import module_theta, set_module_theta

    st = settings(epochs=1, batch_size=150)
    linear = SteFFLeStrategy(st, n_silos=3, n_groups=2, n_classes=3)._constant(4)
    np.testing.assert_array_equal(linear(2, 0.6, None), constant_theta(4, 3, 2, 0.6))
    spec = {"factory": "pfair.torch.models:mlp", "kwargs": {"n_features": 3, "n_classes": 2, "hidden": [8]},
            "init_seed": 3, "input_shape": None}
    deep = SteFFLeStrategy(st, n_silos=3, n_groups=2, n_classes=2, model=spec)._constant(3)
    module = build_module(spec)
    theta = module_theta(module) + 0.5
    const = deep(1, 0.7, theta)
    with torch.no_grad():
        out = torch.softmax(set_module_theta(module, const)(torch.randn(6, 3, dtype=torch.float64).float()), dim=1)
    np.testing.assert_allclose(out.numpy(), np.tile([0.3, 0.7], (6, 1)), atol=1e-6)
