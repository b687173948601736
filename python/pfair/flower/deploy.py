"""A loopback Flower deployment: one SuperLink and N SuperNodes on 127.0.0.1, and the run.

:class:`LoopbackDeployment` starts every component in its own process group with free ports, a
fresh ``FLWR_HOME`` and ``FLWR_TELEMETRY_ENABLED=0``, ``FLWR_DISABLE_UPDATE_CHECK=1``,
``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1`` (nothing may try the network), runs the pfair
app with ``flwr run``, and always tears the groups down (also the processes Flower starts in
sessions of their own). :func:`deploy_local` is ``pfair deploy local``: it partitions a bundled
data set into per-silo shards and runs the whole deployment. See ``docs/deploy.md`` for the same
parties on separate machines.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from pfair.datasets.shards import write_shard
from pfair.flower import FLOWER_ENV

APP_PYPROJECT = """\
[project]
name = "pfair-steffle"
version = "1.0.0"
description = "SteFFLe (pfair) on Flower: the app runs pfair.flower from the installed pfair package"
dependencies = []

[tool.flwr.app]
publisher = "pfair"

[tool.flwr.app.components]
serverapp = "{serverapp}"
clientapp = "{clientapp}"

[tool.flwr.app.config]
settings = "{}"
n-silos = 3
n-groups = 2
n-classes = 2
out = ""
progress = ""
model = ""
wait-timeout = 120.0
round-timeout = 120.0
evaluate = true
# pfair.flower.thresholds:app (private post-processing) only
theta = "[]"
edges = "[]"
histogram-epsilon = 1.0
constraints = "demographic_parity"
max-violation = 0.0
margin = "auto"
"""


def write_app(directory: str | os.PathLike, *, serverapp: str = "pfair.flower.server_app:app",
              clientapp: str = "pfair.flower.client_app:app") -> Path:
    """The Flower app directory: a ``pyproject.toml`` whose components are importable objects of
    the installed pfair (Flower loads them with ``importlib``; no code is copied or installed)."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    (path / "pyproject.toml").write_text(APP_PYPROJECT.replace("{serverapp}", serverapp)
                                         .replace("{clientapp}", clientapp))
    return path


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    return kids


def descendants(pids: Sequence[int]) -> set[int]:
    """Every descendant process of ``pids`` (Linux ``/proc``)."""
    kids, out, stack = _children(), set(), list(pids)
    while stack:
        for c in kids.get(stack.pop(), []):
            if c not in out:
                out.add(c)
                stack.append(c)
    return out


class LoopbackDeployment:
    """SuperLink + SuperNodes on 127.0.0.1 (use as a context manager: teardown always runs).

    ``fast_poll`` (default): the SuperLink runs as :mod:`pfair.flower.fast_superlink` and the
    SuperNodes as :mod:`pfair.flower.fast_supernode`: Flower's commands with a 0.2 s idle poll
    instead of 3 s, short retries of object pulls, and SuperExecs that are forks of their node
    and fork each ServerApp and ClientApp process from a warm process that has imported Flower
    and pfair once (:mod:`pfair.flower.fast_superexec`), so a local round is not dominated by
    waiting and process start-up. ``fast_poll=False`` runs Flower's own commands and defaults."""

    def __init__(self, workdir: str | os.PathLike | None = None, *, fast_poll: bool = True,
                 env: Mapping[str, str] | None = None) -> None:
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="pfair-flower-"))
        self.home = self.workdir / "flwr_home"
        self.logs = self.workdir / "logs"
        self.home.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self.procs: dict[str, subprocess.Popen] = {}
        self.link_port = free_ports(1)[0]
        bindir = str(Path(sys.executable).parent)
        base = dict(os.environ)
        base.update(FLOWER_ENV, FLWR_HOME=str(self.home), PYTHONUNBUFFERED="1",
                    PATH=bindir + os.pathsep + base.get("PATH", ""))
        self.fast_poll = fast_poll
        if fast_poll:
            base["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] = "0.1"
        base.update(env or {})
        base.update(FLOWER_ENV)  # whatever the caller passed, nothing may try the network
        self.env = base
        self.bindir = Path(bindir)
        (self.home / "config.toml").write_text(
            '[superlink]\ndefault = "loop"\n\n'
            f'[superlink.loop]\naddress = "127.0.0.1:{self.link_port}"\ninsecure = true\n')

    def __enter__(self) -> "LoopbackDeployment":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.teardown()

    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen:
        with open(self.logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=self.workdir)
        self.procs[name] = proc
        return proc

    def start_superlink(self, timeout: float = 30.0) -> float:
        """Start the SuperLink; returns the seconds until it answers ``/health``."""
        t0 = time.monotonic()
        exe = ([sys.executable, "-m", "pfair.flower.fast_superlink"] if self.fast_poll
               else [str(self.bindir / "flower-superlink")])
        self._spawn("superlink", exe + ["--insecure", "--host", "127.0.0.1", "--port", str(self.link_port),
                                        "--disable-runtime-dependency-installation"])
        url = f"http://127.0.0.1:{self.link_port}/health"
        while time.monotonic() - t0 < timeout:
            if self.procs["superlink"].poll() is not None:
                raise RuntimeError(f"the SuperLink exited ({self.procs['superlink'].returncode}); see {self.logs}")
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    if r.status == 200:
                        return time.monotonic() - t0
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"the SuperLink did not answer within {timeout} s; see {self.logs}")

    def start_supernode(self, name: str, node_config: Mapping[str, Any]) -> subprocess.Popen:
        """Start a SuperNode with its own ``--node-config`` (its silo's private settings)."""
        port = free_ports(1)[0]
        cfg = " ".join(f"{k}={_toml(v)}" for k, v in node_config.items())
        # fast_poll: Flower's own command, tuned for one machine (pfair.flower.fast_supernode).
        exe = ([sys.executable, "-m", "pfair.flower.fast_supernode"] if self.fast_poll
               else [str(self.bindir / "flower-supernode")])
        return self._spawn(name, exe + ["--insecure", "--superlink", f"127.0.0.1:{self.link_port}", "--host",
                                        "127.0.0.1", "--port", str(port), "--node-config", cfg])

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Signal a component and everything it started."""
        proc = self.procs[name]
        for pid in descendants([proc.pid]) | {proc.pid}:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def run_app(self, app_dir: str | os.PathLike, run_config: Mapping[str, Any], *, timeout: float,
                background: bool = False, poll: Any = None) -> subprocess.Popen | subprocess.CompletedProcess:
        """``flwr run APP loop --stream --run-config ...``; bounded by ``timeout`` (or started in
        the background, for fault injection). ``poll``: called about twice a second while the run
        lasts (a progress display)."""
        cfg = " ".join(f"{k}={_toml(v)}" for k, v in run_config.items())
        cmd = [str(self.bindir / "flwr"), "run", str(app_dir), "loop", "--stream", "--run-config", cfg]
        proc = self._spawn("flwr-run", cmd)
        if background:
            return proc
        deadline = time.monotonic() + timeout
        while True:
            try:
                proc.wait(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    self.kill("flwr-run")
                    raise TimeoutError(f"the run did not finish within {timeout:g} s (--timeout)") from None
                if poll is not None:
                    poll()
        if poll is not None:
            poll()
        return subprocess.CompletedProcess(cmd, proc.returncode)

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def teardown(self, grace: float = 5.0) -> None:
        """Terminate every process group this deployment started (and strays), then kill."""
        roots = [p.pid for p in self.procs.values()]
        strays = descendants(roots)
        groups = set(roots)
        for pid in strays:
            try:
                groups.add(os.getpgid(pid))
            except ProcessLookupError:
                pass
        groups.discard(os.getpgid(0))
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 3.0)):
            for g in groups:
                try:
                    os.killpg(g, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if all(p.poll() is not None for p in self.procs.values()) and not any(_alive(d) for d in strays):
                    return
                time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _toml(value: Any) -> str:
    """A value as Flower's ``key=value`` config syntax (TOML)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return "'" + text + "'" if "'" not in str(value) else json.dumps(str(value))


def write_federation(fed: Any, directory: str | os.PathLike, *, test: tuple | None = None, fmt: str = "csv"
                     ) -> list[dict[str, Any]]:
    """One shard per silo (and, with ``test=(X, y, s)``, a share of the test set per silo) under
    ``directory``; returns each silo's node config (its id, shard, state directory, its number of
    records and the federation's numbers of groups and classes; without its budget)."""
    root = Path(directory)
    configs = []
    tests = None
    if test is not None:
        X, y, s = test
        parts = np.array_split(np.arange(len(y)), fed.n_silos)
        tests = [(X[p], y[p], s[p]) for p in parts]
    for j, silo in enumerate(fed.silos):
        sdir = root / f"silo{j}"
        data = write_shard(sdir / f"train.{fmt}", silo.X, silo.y, silo.s, fed.feature_names)
        # n-records: public (every silo's size is), read by a launcher (pfair.flower.tune) for its default delta
        cfg = {"silo-id": j, "data-path": str(data), "state-dir": str(sdir / "state"), "n-groups": int(fed.n_groups),
               "n-classes": int(fed.n_classes), "n-records": len(silo)}
        if tests is not None:
            cfg["test-path"] = str(write_shard(sdir / f"test.{fmt}", *tests[j], fed.feature_names))
        configs.append(cfg)
    return configs


def run_config_for(settings: Any, *, n_silos: int, n_groups: int, n_classes: int, out: str | os.PathLike,
                   round_timeout: float = 120.0, wait_timeout: float = 120.0, evaluate: bool = True,
                   model: Mapping[str, Any] | None = None, progress: str | os.PathLike = "") -> dict:
    """The run config of a SteFFLe run (public settings only; a node's noise is its own).
    ``model``: a deep model's factory spec (:mod:`pfair.flower.models`); None: the linear model.
    ``progress``: a file the ServerApp rewrites after every round (round, total, silos used)."""
    p_s = settings.p_s if isinstance(settings.p_s, str) else np.asarray(settings.p_s).tolist()
    return {"settings": json.dumps(settings.as_dict() | {"p_s": p_s, "noise_seed": None}), "n-silos": int(n_silos),
            "n-groups": int(n_groups), "n-classes": int(n_classes), "out": str(out),
            "wait-timeout": float(wait_timeout), "round-timeout": float(round_timeout), "evaluate": bool(evaluate),
            "model": json.dumps(dict(model)) if model else "", "progress": str(progress)}


# What a deep model's ClientApp imports: pfair's torch provider, and torch's compiler stack, which
# the first torch.func transform of a process imports (sympy, torch._dynamo, torch._inductor).
TORCH_PRELOAD = "pfair.torch,torch._dynamo"


class DeploymentFailed(RuntimeError):
    """A deployed run that ended without a result: :attr:`cause` is the one line that says why
    (the last exception a party logged), :attr:`logs` the folder of the parties' logs."""

    def __init__(self, cause: str, logs: Path, returncode: int | None = None) -> None:
        super().__init__(f"the Flower run failed: {cause} (the parties' logs: {logs})")
        self.cause, self.logs, self.returncode = cause, Path(logs), returncode


_TRACEBACK_NOISE = ("Traceback", "File ", "^", "During handling", "The above exception", "For more information",
                    "An unhandled exception")


def last_error(text: str) -> str | None:
    """The last ``SomeError: message`` line of a log (a Python exception as a traceback ends), with
    Flower's colour codes and log prefixes removed; None when there is none."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    found = None
    for line in text.splitlines():
        line = re.sub(r"^\s*(ERROR|WARNING|INFO)\s*:\s*", "", line).strip()
        m = re.match(r"^((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exceeded|Small|Mismatch|Rollback|Refused|"
                     r"Conflict|Interrupt)): (.+)$", line)
        if m:
            found = f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2)}"
    return found


def one_line(reason: str) -> str:
    """A party's error reason (an error reply's text, possibly a whole traceback) as one line."""
    text = re.sub(r"^code -?\d+: ", "", str(reason).strip())  # an error reply's Flower code
    found = last_error(text)
    if found:
        return found
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(_TRACEBACK_NOISE)]
    return lines[-1] if lines else text.strip()


def run_deployment(settings: Any, node_configs: Sequence[Mapping[str, Any]], *, n_groups: int, n_classes: int,
                   workdir: str | os.PathLike | None = None, round_timeout: float = 120.0,
                   wait_timeout: float = 120.0, timeout: float = 3600.0, evaluate: bool = True,
                   clientapp: str = "pfair.flower.client_app:app", env: Mapping[str, str] | None = None,
                   model: Mapping[str, Any] | None = None, on_round: Any = None) -> dict[str, Any]:
    """Start a loopback deployment with one SuperNode per node config, run SteFFLe with
    ``settings`` (a :class:`~pfair.settings.SteFFLeSettings`), tear everything down, and return the
    ServerApp's result (θ, W, the silos' plans and ε spent, events, timings).

    ``on_round``: called with ``{"round", "total", "silos"}`` after every round the server took
    (read about twice a second from a file the ServerApp rewrites). A run that writes no result
    raises :class:`DeploymentFailed`, whose message is one line: the cause, and the logs' folder.

    With a torch ``model``, the SuperNodes' warm process (:mod:`pfair.flower.fast_superexec`)
    also imports :mod:`pfair.torch` and ``torch._dynamo`` (:data:`TORCH_PRELOAD`), unless
    ``PFAIR_CLIENTAPP_PRELOAD`` is set: a message's ClientApp then neither imports torch afresh
    nor the compiler stack that the first ``torch.func`` transform of a process loads (about 2 s
    of CPU, every message)."""
    return run_deployments([settings], node_configs, n_groups=n_groups, n_classes=n_classes, workdir=workdir,
                           round_timeout=round_timeout, wait_timeout=wait_timeout, timeout=timeout, evaluate=evaluate,
                           clientapp=clientapp, env=env, model=model, on_round=on_round)[0]


def run_deployments(settings: Sequence[Any], node_configs: Sequence[Mapping[str, Any]], *, n_groups: int,
                    n_classes: int, workdir: str | os.PathLike | None = None, round_timeout: float = 120.0,
                    wait_timeout: float = 120.0, timeout: float = 3600.0, evaluate: bool = True,
                    clientapp: str = "pfair.flower.client_app:app", env: Mapping[str, str] | None = None,
                    model: Mapping[str, Any] | None = None, on_round: Any = None) -> list[dict[str, Any]]:
    """:func:`run_deployment` of several runs, one after the other, on one loopback deployment:
    the same SuperNodes, whose ledgers persist in their state directories, so each run spends on
    top of the runs before it (a search: :func:`pfair.flower.tune.deploy_search`). ``timeout``
    bounds each run. Returns each run's result (the first's file ``result.json``, then
    ``result1.json``, …)."""
    env = dict(env or {})
    if model and "PFAIR_CLIENTAPP_PRELOAD" not in env and "PFAIR_CLIENTAPP_PRELOAD" not in os.environ:
        env["PFAIR_CLIENTAPP_PRELOAD"] = TORCH_PRELOAD
    results = []
    with LoopbackDeployment(workdir, env=env) as dep:
        t0 = time.monotonic()
        t_link = dep.start_superlink()
        for j, cfg in enumerate(node_configs):
            dep.start_supernode(f"supernode{j}", cfg)
        app = write_app(dep.workdir / "app", clientapp=clientapp)
        for i, st in enumerate(settings):
            out = dep.workdir / ("result.json" if i == 0 else f"result{i}.json")
            progress = dep.workdir / ("progress.json" if i == 0 else f"progress{i}.json")
            for stale in (out, progress):  # a file of an earlier run must not pass for this run's
                stale.unlink(missing_ok=True)
            run_config = run_config_for(st, n_silos=len(node_configs), n_groups=n_groups, n_classes=n_classes,
                                        out=out, round_timeout=round_timeout, wait_timeout=wait_timeout,
                                        evaluate=evaluate, model=model, progress=progress)
            poll = None
            if on_round is not None:
                seen = [None]

                def poll(path: Path = progress, seen: list = seen) -> None:
                    try:
                        now = json.loads(path.read_text())
                    except (OSError, ValueError):
                        return
                    if now != seen[0]:
                        seen[0] = now
                        on_round(now)
            done = dep.run_app(app, run_config, timeout=timeout, poll=poll)
            if not out.exists():
                cause = last_error(dep.log("flwr-run")) or f"flwr run exited with code {done.returncode} and wrote " \
                                                              "no result"
                raise DeploymentFailed(cause, dep.logs, done.returncode)
            result = json.loads(out.read_text())
            result["timing"]["superlink_s"] = t_link
            result["timing"]["total_s"] = time.monotonic() - t0
            result["workdir"] = str(dep.workdir)
            results.append(result)
    return results
