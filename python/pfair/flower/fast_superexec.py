"""``python -m pfair.flower.fast_superexec ARGS``: Flower's ``flower-superexec ARGS`` whose app
processes are forked from a warm process, for loopback runs (the tests and ``pfair deploy local``).

A Flower 1.41 SuperNode hands every message to a new ``flwr-clientapp`` process, started by its
SuperExec, and the SuperLink's own SuperExec starts a new ``flwr-serverapp`` process for every
run. Most of such a process's life is importing Flower and pfair (about 2 s of CPU here, for a
round that computes in milliseconds), and on one machine all parties' processes compete for the
same cores. This module runs Flower's SuperExec unchanged except for those launches: at start it
forks a *warm* process (before the SuperExec opens any connection or starts a Python thread)
that has imported the app's modules, and every ``flwr-clientapp ARGS`` (or ``flwr-serverapp
ARGS``) the SuperExec would start becomes a fork of the warm process that runs Flower's own
``flwr-clientapp`` (``flwr-serverapp``) function with the same ``ARGS``. Other task types are
started as before.

:class:`Zygote` goes one step further: :mod:`pfair.flower.fast_supernode` and
:mod:`pfair.flower.fast_superlink` import Flower's SuperExec and the apps' modules *before*
they start, fork a zygote while no other Python thread runs (the native threads of OpenBLAS and
of pyarrow's allocator exist already; both libraries prepare for fork, as they do for the warm
process's forks), and when Flower starts its
``flower-superexec`` process the zygote becomes that SuperExec, with the same arguments. A
SuperNode, its SuperExec and its warm process then import Flower once instead of three times.

Nothing private is shared between messages by this: the zygote is forked before the SuperNode
parses its arguments (the node config among them) or opens any data, key or connection, so it and
the warm process hold only imported code (the warm process never runs an app itself; both carry
the SuperNode's command line, as ``ps`` shows), each fork pulls its message over Flower's
Runtime API exactly as a fresh process would, and a silo's secret keys come from the operating
system's entropy (``getrandom``), which a fork does not copy. The one process that does keep the
silo's data between messages is the silo host the warm process forks before any app
(:mod:`pfair.flower.silo_host`): it holds the shard as read, never a key, the ledger or the plan,
and answers only through a socket in a directory of the node's user. A deployment on separate
machines uses ``flower-supernode`` itself (``docs/deploy.md``).

``PFAIR_CLIENTAPP_PRELOAD``: comma-separated modules the warm process imports (default: Flower's
ClientApp runtime and :mod:`pfair.flower.client_app`; add ``torch`` for deep models).
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from typing import Any, Callable

from pfair.flower import patches
from pfair.flower.patches import module_with, short_pull_backoff  # noqa: F401 - re-exported

# An app command Flower's SuperExec launches -> (module, function) of Flower's own entry point.
APP_COMMANDS = {
    "flwr-clientapp": ("flwr.supernode.cli.flwr_clientapp", "flwr_clientapp"),
    "flwr-serverapp": ("flwr.superlink.cli.flwr_serverapp", "flwr_serverapp"),
}
CLIENTAPP_COMMAND = "flwr-clientapp"
SERVERAPP_COMMAND = "flwr-serverapp"
# The modules an app's process needs: Flower's entry point and pfair's app.
APP_MODULES = {
    CLIENTAPP_COMMAND: (APP_COMMANDS[CLIENTAPP_COMMAND][0], "pfair.flower.client_app"),
    SERVERAPP_COMMAND: (APP_COMMANDS[SERVERAPP_COMMAND][0], "pfair.flower.server_app"),
}
# What an app would otherwise import on every message: httpx's transport (httpcore, h11) when it
# opens the Runtime API client, and a silo's Parquet shard reader. Optional: a fork imports a
# missing one itself (or does not need it).
WARM_EXTRAS = ("httpcore", "h11", "pyarrow.parquet", "pyarrow.dataset", "pfair.datasets.shards", "encodings.cp437")


def preload_modules(command: str = CLIENTAPP_COMMAND) -> list[str]:
    """The modules a warm process for ``command`` imports: the app's, then
    ``PFAIR_CLIENTAPP_PRELOAD`` (ClientApps only)."""
    extra = os.environ.get("PFAIR_CLIENTAPP_PRELOAD", "") if command == CLIENTAPP_COMMAND else ""
    return list(APP_MODULES[command]) + [m.strip() for m in extra.split(",") if m.strip()]


def preload(command: str = CLIENTAPP_COMMAND) -> None:
    """Import what an app process of ``command`` needs (a module that fails to import is reported
    and left to the app's process, which then fails as a fresh process would)."""
    for name in preload_modules(command):
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a fork imports what is missing itself
            print(f"pfair.flower.fast_superexec: could not preload {name}: {exc}", file=sys.stderr, flush=True)
    for name in WARM_EXTRAS:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    short_pull_backoff()


def _exit_with(body: Callable[[], int | None]) -> None:
    """Run ``body`` in a forked process, then end the process with the exit code a fresh process
    running it would have (``SystemExit``'s code, 1 and a traceback on an exception); never
    returns."""
    code = 1
    try:
        code = int(body() or 0)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - report and exit, as a fresh process would
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def _run_app(request: dict[str, Any], pipe_fd: int) -> None:
    """In a fork of the warm process: Flower's own app command with the request's arguments;
    never returns."""

    def body() -> None:
        os.close(pipe_fd)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        if request.get("suppress_output"):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
        sys.argv = list(request["argv"])
        module, function = APP_COMMANDS[sys.argv[0]]
        getattr(importlib.import_module(module), function)()

    _exit_with(body)


def _warm_process(read_fd: int, command: str) -> None:
    """The warm process: import ``command``'s modules, then fork one child per request line
    (JSON) read from ``read_fd``; exits when the SuperExec closes the pipe. Never returns."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forks are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the SuperExec handles Ctrl-C; EOF ends us
    preload(command)
    if command == CLIENTAPP_COMMAND:
        # The silo's data in memory between messages: one host per node, forked before any app.
        # Imported here (after preload): a SuperExec serving ServerApps never loads the ClientApp.
        from pfair.flower import silo_host
        from pfair.flower.client_app import host_handler

        try:
            silo_host.start(handle=host_handler())
        except OSError as exc:  # the ClientApps then answer themselves, as without a host
            print(f"pfair.flower.fast_superexec: no silo host: {exc}", file=sys.stderr, flush=True)
    # Everything imported so far is kept out of the collector: each fork's first full collection
    # would otherwise walk (and copy, page by page) the whole inherited heap; measured: 0.15-0.2 s
    # of CPU in every ClientApp of a warm process whose counters stood near that collection.
    gc.collect()
    gc.freeze()
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        for line in iter(pipe.readline, b""):
            try:
                request = json.loads(line)
            except ValueError:
                continue
            if os.fork() == 0:
                _run_app(request, pipe.fileno())
    os._exit(0)


class WarmLauncher:
    """The SuperExec's side: sends each ``command`` launch to the warm process."""

    def __init__(self, command: str = CLIENTAPP_COMMAND, close_in_child: tuple[int, ...] = ()) -> None:
        if command not in APP_COMMANDS:
            raise ValueError(f"command={command!r}: a warm process runs one of {sorted(APP_COMMANDS)}")
        self.command = command
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the warm process (exercised through the Flower tests)
            for fd in (write_fd, *close_in_child):
                os.close(fd)
            _warm_process(read_fd, command)
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
    """Route the SuperExec's launches of ``launcher.command`` to ``launcher``; any other command,
    or a launch when the warm process is gone, is started by ``subprocess.Popen`` as before."""
    real = subprocess.Popen

    def popen(args: Any, *a: Any, **kw: Any) -> Any:
        argv = list(args) if isinstance(args, (list, tuple)) else None
        if argv and os.path.basename(str(argv[0])) == launcher.command and not a and set(kw) <= {"stdout", "stderr"}:
            quiet = kw.get("stdout") is subprocess.DEVNULL
            if launcher.alive() and launcher.launch([launcher.command] + [str(v) for v in argv[1:]], quiet):
                return _Launched(argv)
        return real(args, *a, **kw)

    patches.route_app_launches(popen)


def run_superexec(command: str = CLIENTAPP_COMMAND, wake_fd: int | None = None) -> int:
    """Flower's ``flower-superexec`` (arguments from ``sys.argv``) with ``command`` launches forked
    from a warm process; call it while this process has no thread and no connection.

    ``wake_fd``: the read end of a pipe the SuperNode writes a byte to when a message has
    arrived (:func:`notify`). The SuperExec then waits for that byte between two polls for
    tasks, up to Flower's default 1 s, instead of polling every 0.1 s: a message is launched as
    soon as it is stored, and an idle node stops asking."""
    if wake_fd is not None and patches.superexec_wait(waiter(wake_fd)):
        os.environ["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] = "1.0"
    launcher = WarmLauncher(command, close_in_child=() if wake_fd is None else (wake_fd,))
    install(launcher)
    from flwr.supercore.cli import flower_superexec

    sys.argv[0] = "flower-superexec"
    return flower_superexec() or 0


def waiter(wake_fd: int) -> Callable[[float], None]:
    """A ``time.sleep`` that returns early, taking one byte off the pipe, when a byte is waiting on
    ``wake_fd`` (:func:`notify`)."""
    os.set_blocking(wake_fd, False)

    def wait(seconds: float) -> None:
        ready, _, _ = select.select([wake_fd], [], [], max(0.0, float(seconds)))
        if ready:
            try:
                os.read(wake_fd, 1)  # one wake per task: a second one pending returns the next wait at once
            except BlockingIOError:  # pragma: no cover - drained by a concurrent read
                pass

    return wait


def notify(wake_fd: int) -> None:
    """Wake a SuperExec waiting in :func:`run_superexec` (never blocks)."""
    try:
        os.write(wake_fd, b"!")
    except (BlockingIOError, BrokenPipeError):  # already woken, or gone
        pass


class _Started:
    """The part of :class:`subprocess.Popen` Flower uses of the SuperExec it starts (``pid``,
    ``poll``, ``wait``, ``terminate``, ``kill``), for a zygote that became it."""

    def __init__(self, pid: int, args: list[str]) -> None:
        self.pid, self.args, self.returncode = pid, args, None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: its status is lost (subprocess.Popen says 0 too)
                self.returncode = 0
            else:
                if done:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
            time.sleep(0.01)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """A process forked now that waits for one command line and then runs ``target()`` with it
    as ``sys.argv`` (in a new session if asked), so that a process started later (Flower's
    SuperExec) shares this process's imports instead of importing everything afresh.

    Fork only while no other Python thread runs (:meth:`fork_if_safe`). If the parent exits
    before :meth:`start`, the zygote sees the end of its pipe and exits too."""

    def __init__(self, target: Callable[[], int], close_in_child: tuple[int, ...] = ()) -> None:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the zygote (exercised through the Flower tests)
            for fd in (write_fd, *close_in_child):
                os.close(fd)
            self._wait_and_run(read_fd, target)
        os.close(read_fd)
        self.pid, self._write_fd, self.started = pid, write_fd, False

    @classmethod
    def fork_if_safe(cls, target: Callable[[], int], close_in_child: tuple[int, ...] = ()) -> "Zygote | None":
        """A zygote, or None when this process already runs another Python thread (a fork would
        copy that thread's locks, not the thread). Native library threads are not seen here;
        the ones an import of numpy or pyarrow starts are made safe by their libraries' fork
        handlers."""
        if threading.active_count() != 1:
            return None
        return cls(target, close_in_child)

    @staticmethod
    def _wait_and_run(read_fd: int, target: Callable[[], int]) -> None:
        def body() -> int:
            with os.fdopen(read_fd, "rb") as pipe:
                line = pipe.readline()
            if not line:  # the parent closed its end without a start
                return 0
            request = json.loads(line)
            if request.get("new_session"):
                os.setsid()
            sys.argv = list(request["argv"])
            return target()

        _exit_with(body)

    def abandon(self) -> None:
        """Let the zygote end without running its target (it sees the end of its pipe)."""
        if not self.started:
            self.started = True
            os.close(self._write_fd)

    def start(self, argv: list[str], *, new_session: bool = False) -> _Started:
        """Run the target with ``argv``; only once."""
        if self.started:
            raise RuntimeError("a zygote starts once")
        self.started = True
        line = json.dumps({"argv": [str(a) for a in argv], "new_session": bool(new_session)}).encode() + b"\n"
        with os.fdopen(self._write_fd, "wb") as pipe:
            pipe.write(line)
        return _Started(self.pid, list(argv))


def superexec_popen(command: str, real: Callable[..., Any] = subprocess.Popen,
                    wake: tuple[int, int] | None = None) -> Callable[..., Any]:
    """A ``subprocess.Popen`` for a Flower module that starts ``flower-superexec``: the first
    such start becomes a zygote forked now (running :func:`run_superexec` for ``command``) when
    no other Python thread runs, otherwise ``python -m pfair.flower.fast_superexec``
    (ClientApps) or Flower's own command; every other command is started by ``real``.
    ``wake``: a pipe (read end, write end) whose read end the zygote's SuperExec waits on."""
    wake_fd, keep_fd = (None, None) if wake is None else wake
    zygote = Zygote.fork_if_safe(lambda: run_superexec(command, wake_fd),
                                 close_in_child=() if keep_fd is None else (keep_fd,))
    if wake_fd is not None:
        os.close(wake_fd)  # the zygote holds it; this process writes to the other end

    def popen(args: Any, *a: Any, **kw: Any) -> Any:
        if isinstance(args, (list, tuple)) and args and args[0] == "flower-superexec":
            if zygote is not None and not zygote.started:
                if not a and set(kw) <= {"start_new_session"}:
                    return zygote.start(list(args), new_session=bool(kw.get("start_new_session")))
                zygote.abandon()  # a start the zygote cannot mimic: Flower's own process instead
            if command == CLIENTAPP_COMMAND:
                args = [sys.executable, "-m", "pfair.flower.fast_superexec", *args[1:]]
        return real(args, *a, **kw)

    popen.zygote = zygote  # type: ignore[attr-defined]
    return popen


def waking_superexec_popen(command: str) -> tuple[Callable[..., Any], int | None]:
    """:func:`superexec_popen` with a wake pipe: the ``Popen`` and the pipe's write end, for
    :func:`notify` (None when no zygote could be forked; the SuperExec then polls as Flower's
    does)."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    popen = superexec_popen(command, wake=(wake_r, wake_w))
    if popen.zygote is None:  # type: ignore[attr-defined]
        os.close(wake_w)
        return popen, None
    return popen, wake_w


def main() -> int:
    # Fork the warm process first: this process has no thread and no connection yet.
    return run_superexec(CLIENTAPP_COMMAND)


if __name__ == "__main__":  # pragma: no cover - run as a process by pfair.flower.fast_supernode
    sys.exit(main())
