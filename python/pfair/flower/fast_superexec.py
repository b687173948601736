"""``python -m pfair.flower.fast_superexec ARGS``: Flower's ``flower-superexec ARGS`` whose
ClientApp processes are forked from a warm process, for loopback runs (the tests and
``pfair deploy local``).

A Flower 1.41 SuperNode hands every message to a new ``flwr-clientapp`` process, started by its
SuperExec. Most of that process's life is importing Flower and pfair (about 2 s of CPU here, for
a round that computes in milliseconds), and on one machine the silos' processes compete for the
same cores. This entry point runs Flower's SuperExec unchanged except for that launch: at start
it forks a *warm* process (single-threaded, before the SuperExec opens any connection or thread)
that imports the ClientApp's modules once, and every ``flwr-clientapp ARGS`` the SuperExec would
start becomes a fork of the warm process that runs Flower's own ``flwr-clientapp`` function
with the same ``ARGS``. Other task types are started as before.

Nothing private is shared between messages by this: the warm process holds only imported code
(no data, no key, no connection; it never runs a ClientApp itself), each fork pulls its message
over Flower's Runtime API exactly as a fresh process would, and a silo's secret keys come from
the operating system's entropy (``getrandom``), which a fork does not copy. A deployment on
separate machines uses ``flower-supernode`` itself (``docs/deploy.md``).

``PFAIR_CLIENTAPP_PRELOAD``: comma-separated modules the warm process imports (default: Flower's
ClientApp runtime and :mod:`pfair.flower.client_app`; add ``torch`` for deep models).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import types
from typing import Any

DEFAULT_PRELOAD = ("flwr.supernode.cli.flwr_clientapp", "pfair.flower.client_app")
CLIENTAPP_COMMAND = "flwr-clientapp"


def module_with(module: types.ModuleType, **attrs: Any) -> types.ModuleType:
    """A copy of ``module``'s namespace with ``attrs`` replaced: assigned to a Flower module's
    global (e.g. its ``time`` or ``subprocess``), it changes what that one module calls and
    nothing else in the process."""
    shim = types.ModuleType(module.__name__)
    shim.__dict__.update(module.__dict__)
    shim.__dict__.update(attrs)
    return shim


def _preload() -> list[str]:
    extra = os.environ.get("PFAIR_CLIENTAPP_PRELOAD", "")
    return list(DEFAULT_PRELOAD) + [m.strip() for m in extra.split(",") if m.strip()]


def _run_clientapp(request: dict[str, Any], pipe_fd: int) -> None:
    """In a fork of the warm process: Flower's ``flwr-clientapp`` with the request's arguments;
    never returns."""
    code = 1
    try:
        os.close(pipe_fd)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        if request.get("suppress_output"):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
        sys.argv = list(request["argv"])
        from flwr.supernode.cli.flwr_clientapp import flwr_clientapp

        flwr_clientapp()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - report and exit, as a fresh process would
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def _warm_process(read_fd: int) -> None:
    """The warm process: import the ClientApp's modules, then fork one child per request line
    (JSON) read from ``read_fd``; exits when the SuperExec closes the pipe. Never returns."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forks are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the SuperExec handles Ctrl-C; EOF ends us
    for name in _preload():
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a fork imports what is missing itself
            print(f"pfair.flower.fast_superexec: could not preload {name}: {exc}", file=sys.stderr, flush=True)
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        for line in iter(pipe.readline, b""):
            try:
                request = json.loads(line)
            except ValueError:
                continue
            if os.fork() == 0:
                _run_clientapp(request, pipe.fileno())
    os._exit(0)


class WarmLauncher:
    """The SuperExec's side: sends each ``flwr-clientapp`` launch to the warm process."""

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the warm process (exercised through the Flower tests)
            os.close(write_fd)
            _warm_process(read_fd)
        os.close(read_fd)
        self.pid = pid
        self._pipe = os.fdopen(write_fd, "wb", buffering=0)
        self._lock = threading.Lock()

    def alive(self) -> bool:
        try:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return False
        return done == 0

    def launch(self, argv: list[str], suppress_output: bool) -> bool:
        """Ask for a fork running ``argv``; False if the warm process is gone."""
        line = json.dumps({"argv": argv, "suppress_output": suppress_output}).encode() + b"\n"
        with self._lock:
            try:
                self._pipe.write(line)
                return True
            except OSError:
                return False


class _Launched:
    """What the SuperExec gets back from a launch (it never waits on it)."""

    def __init__(self, args: list[str]) -> None:
        self.args, self.returncode, self.pid = args, None, None

    def poll(self) -> None:
        return None


def install(launcher: WarmLauncher) -> None:
    """Route the SuperExec's ``flwr-clientapp`` launches to ``launcher``; any other command, or a
    launch when the warm process is gone, is started by ``subprocess.Popen`` as before."""
    from flwr.supercore.superexec.executor import subprocess_executor

    real = subprocess.Popen

    def popen(args: Any, *a: Any, **kw: Any) -> Any:
        argv = list(args) if isinstance(args, (list, tuple)) else None
        if argv and os.path.basename(str(argv[0])) == CLIENTAPP_COMMAND and not a and set(kw) <= {"stdout", "stderr"}:
            quiet = kw.get("stdout") is subprocess.DEVNULL
            if launcher.alive() and launcher.launch([CLIENTAPP_COMMAND] + [str(v) for v in argv[1:]], quiet):
                return _Launched(argv)
        return real(args, *a, **kw)

    subprocess_executor.subprocess = module_with(subprocess, Popen=popen)  # type: ignore[attr-defined]


def main() -> int:
    # Fork the warm process first: this process has no thread and no connection yet.
    launcher = WarmLauncher()
    install(launcher)
    from flwr.supercore.cli import flower_superexec

    sys.argv[0] = "flower-superexec"
    return flower_superexec() or 0


if __name__ == "__main__":  # pragma: no cover - run as a process by pfair.flower.fast_supernode
    sys.exit(main())
