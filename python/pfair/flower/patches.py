"""Every change pfair makes to Flower's internals, in one place and behind one version check.

pfair's protocol uses Flower's public API only (``Grid``, ``Message``, records, the ClientApp and
ServerApp decorators, the ``Strategy`` hooks). What this module changes is *timing* on one machine
(the loopback deployment of the tests and ``pfair deploy local``: polls, retries, held pulls, and
which of Flower's HTTP middlewares a request passes through when they would hand it on untouched)
and one *bound* on the server side; none of it changes a message, a release or a charge:

====================================  ====================================================  ==========
patch                                 what it replaces (Flower module global or default)    process
====================================  ====================================================  ==========
:func:`bound_object_pulls`            ``flwr.superlink.grid.http_grid.pull_objects``        ServerApp
:func:`short_pull_backoff`            defaults of ``flwr.supercore.inflatable.inflatable_   every
                                      utils.pull_objects`` and the helpers passing theirs
:func:`wake_on_new_runs`              ``InMemoryLinkState.create_run``,                     SuperLink
                                      ``SqlLinkState.create_run``
:func:`hold_pulls`                    ``pull_messages``, ``pull_object`` of                 SuperLink
                                      ``flwr.superlink.servicer.fleet.fleet_handlers`` and
                                      ``...servicer.runtime.runtime_handlers``; the
                                      ``store_message_ins``, ``store_message_res``,
                                      ``store_object`` of both link states
:func:`link_superexec_popen`          ``flwr.superlink.cli.flower_superlink.subprocess``    SuperLink
:func:`skip_idle_middleware`          the Control, Fleet and tracing middleware classes     SuperLink,
                                      named in ``flwr.superlink.main`` and                  SuperNode
                                      ``flwr.supernode.main``
:func:`direct_middleware`             ``create_app`` of ``flwr.superlink.main`` and         SuperLink,
                                      ``flwr.supernode.main`` (the ``BaseHTTPMiddleware``   SuperNode
                                      layers of Fleet and Runtime API calls)
:func:`node_idle_poll`                ``flwr.supernode.start_client_internal.time``         SuperNode
:func:`node_superexec_popen`          ``flwr.supernode.start_client_internal.subprocess``   SuperNode
:func:`wake_after_pull`               ``start_client_internal._pull_and_store_message``     SuperNode
:func:`route_app_launches`            ``flwr.supercore.superexec.executor.                  SuperExec
                                      subprocess_executor.subprocess``
:func:`superexec_wait`                ``flwr.supercore.superexec.run_superexec.time``       SuperExec
====================================  ====================================================  ==========

Each was read against the Flower releases in :data:`PATCHED_RELEASES` (``tests/test_flower.py``
checks that every replaced name is still where it is replaced); :func:`patchable` is the one
version check. Under any other Flower release no patch is applied (each function returns False,
with one warning): the deployment then runs at Flower's own pace (a SuperNode polls every 3 s, a
reply's objects are pulled for up to Flower's own limit), which is slower but not different.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import logging
import os
import subprocess
import threading
import time
import types
from typing import Any, Callable

# Each patch imports the Flower internals it changes inside its function: a process loads only those
# of the component it runs (SuperLink, SuperNode or SuperExec), and a Flower laid out otherwise
# skips that patch instead of failing at import.

log = logging.getLogger("pfair.flower")

#: The Flower releases (major, minor) whose internals the patches below were read against; the
#: ``flower`` extra of pyproject.toml accepts exactly these (``flwr>=1.41.0,<1.43``).
PATCHED_RELEASES = ((1, 41), (1, 42))


def flower_release() -> tuple[int, int] | None:
    """The installed Flower's (major, minor), or None when Flower is not installed or its version
    does not parse."""
    try:  # lazy: importlib.metadata is 60 modules the fast_* launchers otherwise do not load
        from importlib.metadata import version

        parts = version("flwr").split(".")
        return int(parts[0]), int(parts[1])
    except Exception:  # noqa: BLE001 - not installed, or a version string we cannot read
        return None


@functools.lru_cache(maxsize=1)
def patchable() -> bool:
    """Whether the installed Flower is one of :data:`PATCHED_RELEASES` (warned once otherwise)."""
    release = flower_release()
    ok = release in PATCHED_RELEASES
    if not ok:
        log.warning("Flower %s is not one of the releases pfair's loopback tuning was written for (%s): running "
                    "Flower's own polling and retries (slower, same protocol)",
                    "?" if release is None else ".".join(map(str, release)),
                    ", ".join(f"{a}.{b}" for a, b in PATCHED_RELEASES))
    return ok


def module_with(module: types.ModuleType, **attrs: Any) -> types.ModuleType:
    """A copy of ``module``'s namespace with ``attrs`` replaced: assigned to a Flower module's
    global (e.g. its ``time`` or ``subprocess``), it changes what that one module calls and
    nothing else in the process."""
    shim = types.ModuleType(module.__name__)
    shim.__dict__.update(module.__dict__)
    shim.__dict__.update(attrs)
    return shim


# ---------------------------------------------------------------------- ServerApp
#: First and longest wait between two pulls of a reply's objects inside an exchange (s): a reply is
#: announced before its objects are uploaded, and on loopback they follow within milliseconds.
PULL_BACKOFF = (0.02, 0.2)
#: The monotonic deadline of the server's exchange in progress (None: Flower's own limits apply).
PULL_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("pfair_pull_deadline", default=None)


def bound_object_pulls() -> bool:
    """Bound the object pulls of Flower's ``HttpGrid.pull_messages`` by :data:`PULL_DEADLINE`;
    returns whether Flower's grid could be bound (else its defaults stay).

    Flower pulls the objects of every announced reply with retries for up to two hours
    (``flwr.supercore.constant.PULL_MAX_TIME``), backing off up to 10 s. When a silo's process
    dies after announcing its reply but before its objects arrive, the whole ``pull_messages``
    call waits until the SuperLink's upload session expires (about 3 minutes here), past any
    round timeout, and the replies of the other silos wait with it. Inside the transport's
    exchange (:meth:`pfair.flower.server_app.SiloLink.exchange`) the pulls get the time left in
    the round instead (backing off from 0.02 s to at most 0.2 s, :data:`PULL_BACKOFF`); such a reply then ends as
    Flower's "message unavailable" error reply, which the round logs and drops like a missing one."""
    if not patchable():
        return False
    try:
        from flwr.superlink.grid import http_grid
    except ImportError:  # pragma: no cover - another Flower layout
        return False
    real = getattr(http_grid, "pull_objects", None)
    if real is None:  # pragma: no cover - another Flower layout
        return False
    if getattr(real, "_pfair_bounded", False):
        return True

    def pull_objects(*args: Any, **kwargs: Any) -> Any:
        deadline = PULL_DEADLINE.get()
        if deadline is not None:
            kwargs.update(max_time=max(0.0, deadline - time.monotonic()), initial_backoff=PULL_BACKOFF[0],
                          backoff_cap=PULL_BACKOFF[1])
        return real(*args, **kwargs)

    pull_objects._pfair_bounded = True  # type: ignore[attr-defined]
    http_grid.pull_objects = pull_objects
    return True


# ---------------------------------------------------------------------- every process
_FLOWER_PULL_DEFAULTS: dict[str, tuple[float, int | None]] = {}


def short_pull_backoff() -> bool:
    """Make this process's object pulls retry after 0.05 s (doubling up to 0.5 s) instead of
    Flower's 1 s (up to 10 s), with 20 times as many tries, so that a pull whose object never comes
    still gives up after about the same time (500 tries up to 10 s apart: about 83 minutes);
    returns whether Flower's ``pull_objects`` was found.

    A Flower message is announced before its objects are uploaded, and the party that pulls it may
    ask for an object in between: it then backs off for 1 s. On loopback that race is lost in about
    half of the messages (the SuperNode pulling the server's message from the SuperLink, the
    ClientApp pulling it from the SuperNode), and each loss adds a second to a round that otherwise
    takes a few hundred milliseconds. ``PFAIR_PULL_BACKOFF`` sets the first wait (checked first,
    under any Flower release)."""
    raw = os.environ.get("PFAIR_PULL_BACKOFF", "0.05")
    try:
        first = float(raw)
    except ValueError:
        first = float("nan")
    if not 0 < first < 60:
        raise ValueError(f"PFAIR_PULL_BACKOFF={raw!r}: set it to the first wait in seconds, e.g. 0.05 (0 < wait < 60)")
    if not patchable():
        return False
    try:
        from flwr.supercore.inflatable import inflatable_utils
    except ImportError:  # pragma: no cover - another Flower layout
        return False
    found = False
    for fn in vars(inflatable_utils).values():  # pull_objects and the helpers that pass theirs on
        defaults = getattr(fn, "__kwdefaults__", None)
        if getattr(fn, "__module__", None) == inflatable_utils.__name__ and defaults \
                and "initial_backoff" in defaults and "backoff_cap" in defaults:
            # Flower's own values, kept the first time, so that a second call scales from them too.
            flower_cap, flower_tries = _FLOWER_PULL_DEFAULTS.setdefault(
                fn.__qualname__, (float(defaults["backoff_cap"]), defaults.get("max_tries_per_object")))
            defaults.update(initial_backoff=first, backoff_cap=10 * first)
            if flower_tries is not None:
                defaults["max_tries_per_object"] = int(flower_tries) * max(1, round(flower_cap / (10 * first)))
            found = True
    return found


# ---------------------------------------------------------------------- SuperLink
def wake_on_new_runs(notify: Callable[[], None]) -> bool:
    """Call ``notify()`` whenever this SuperLink has created a run (its SuperExec then launches
    the ServerApp at once instead of asking for tasks every 0.1 s)."""
    if not patchable():
        return False
    from flwr.server.superlink.linkstate import in_memory_linkstate, sql_linkstate

    for cls in (in_memory_linkstate.InMemoryLinkState, sql_linkstate.SqlLinkState):
        real = cls.create_run

        def create_run(self: Any, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            run_id = _real(self, *args, **kwargs)
            notify()
            return run_id

        cls.create_run = create_run  # type: ignore[method-assign]
    return True


#: Environment variable: how long (s) the SuperLink holds a pull that finds nothing yet (0: no hold).
HOLD_ENV = "PFAIR_LINK_HOLD"
#: The hold of a loopback deployment (s): an idle SuperNode asks about twice a second.
DEFAULT_HOLD = 0.5
#: Set by a SuperLink whose pulls are held, for the processes it starts (its ServerApps).
HOLDS_ENV = "PFAIR_LINK_HOLDS"
#: Pulls held at once at most (the SuperLink answers from a pool of 40 threads); more are answered at once.
MAX_HELD = 16


def link_hold() -> float:
    """The hold of ``$PFAIR_LINK_HOLD`` (default :data:`DEFAULT_HOLD`; 0 turns it off), or 0 when
    the installed Flower is not one of :data:`PATCHED_RELEASES` (nothing is held there)."""
    raw = os.environ.get(HOLD_ENV, str(DEFAULT_HOLD))
    try:
        hold = float(raw)
    except ValueError:
        hold = float("nan")
    if not 0 <= hold <= 5:
        raise ValueError(f"{HOLD_ENV}={raw!r}: set how long the SuperLink holds an empty pull in seconds, "
                         "e.g. 0.5 (0 <= hold <= 5; 0: no hold)")
    return hold if patchable() else 0.0


class _Stored:
    """A counter of what the link state stored (messages, replies, objects) and its condition: a
    held pull re-reads the state whenever the counter moves."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.generation = 0
        self.held = 0

    def bump(self) -> None:
        with self.cond:
            self.generation += 1
            self.cond.notify_all()

    def hold(self, fetch: Callable[[], Any], ready: Callable[[Any], bool], seconds: float) -> Any:
        """``fetch()`` again each time something is stored, until ``ready`` of its answer or
        ``seconds`` have passed (then its last answer: what an unheld pull would have said)."""
        with self.cond:
            if self.held >= MAX_HELD:
                seconds = 0.0
            self.held += 1
        try:
            deadline = time.monotonic() + seconds
            while True:
                with self.cond:
                    seen = self.generation
                answer = fetch()
                left = deadline - time.monotonic()
                if left <= 0 or ready(answer):
                    return answer
                with self.cond:
                    self.cond.wait_for(lambda: self.generation != seen, timeout=left)
        finally:
            with self.cond:
                self.held -= 1


_STORED = _Stored()


def hold_pulls(seconds: float) -> bool:
    """The SuperLink answers a pull that finds nothing yet — a SuperNode's pull of its messages,
    the ServerApp's pull of replies, either's pull of an announced object not yet uploaded —
    as soon as it has something, or after ``seconds`` with the same empty answer as before.

    Flower's parties poll: on loopback, a SuperNode that polls every 0.05 s and a server that
    polls every 0.02 s make about 110 requests a second, which cost the SuperLink about half a
    core (measured: 0.6 s of CPU a round), and every miss of an object pull backs off. Held, the
    same pulls are answered when the state changes (each store of a message, a reply or an object
    wakes them), and an idle SuperNode asks twice a second. At most :data:`MAX_HELD` pulls wait at
    once; the protocol, the messages and their order are Flower's own."""
    if not patchable() or seconds <= 0:
        return False
    from flwr.server.superlink.linkstate import in_memory_linkstate, sql_linkstate
    from flwr.superlink.servicer.fleet import fleet_handlers
    from flwr.superlink.servicer.runtime import runtime_handlers

    for cls in (in_memory_linkstate.InMemoryLinkState, sql_linkstate.SqlLinkState):
        for name in ("store_message_ins", "store_message_res", "store_object"):
            real = getattr(cls, name)

            def stored(self: Any, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
                try:
                    return _real(self, *args, **kwargs)
                finally:
                    _STORED.bump()

            setattr(cls, name, stored)

    def messages_ready(answer: Any) -> bool:
        return len(answer.messages_list) > 0

    def object_ready(answer: Any) -> bool:  # unknown (not announced) or uploaded: answer now
        return not answer.object_found or answer.object_available

    for module in (fleet_handlers, runtime_handlers):
        for name, ready in (("pull_messages", messages_ready), ("pull_object", object_ready)):
            real = getattr(module, name)

            def held(*args: Any, _real: Any = real, _ready: Any = ready, **kwargs: Any) -> Any:
                return _STORED.hold(lambda: _real(*args, **kwargs), _ready, seconds)

            setattr(module, name, held)
    os.environ[HOLDS_ENV] = repr(float(seconds))
    return True


def _control_free(path: str) -> bool:
    return not path.startswith("/v1/control/")


def _fleet_free(path: str) -> bool:
    return not path.startswith("/v1/fleet/")


def _untraced(path: str) -> bool:
    return os.environ.get("FLWR_TRACING_ENABLED") != "1"


#: Flower's HTTP middleware that hands a request on untouched when its path (or the environment)
#: says so, read from its ``dispatch`` in each of :data:`PATCHED_RELEASES`: the Control API's
#: four act on ``/v1/control/`` only, the Fleet API's two on ``/v1/fleet/`` only, the Runtime
#: tracing one (1.41) only with ``FLWR_TRACING_ENABLED=1``.
PASS_THROUGH = {
    "ControlSensitiveResponseMiddleware": _control_free,
    "ControlAuthenticationMiddleware": _control_free,
    "ControlLicenseMiddleware": _control_free,
    "ControlEventLogMiddleware": _control_free,
    "NodeAuthMiddleware": _fleet_free,
    "FleetEventLogMiddleware": _fleet_free,
    "RuntimeTracingMiddleware": _untraced,
}


def passing(cls: type, passes: Callable[[str], bool]) -> type:
    """``cls`` (a Starlette ``BaseHTTPMiddleware``) as a plain ASGI middleware that hands an HTTP
    request whose path ``passes`` straight to the next app, as ``cls.dispatch`` would with
    ``call_next`` — without the task group, streams and events a ``BaseHTTPMiddleware`` sets up
    around every request — and every other request to ``cls`` itself."""
    from starlette.datastructures import URL

    class Passing:
        def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
            self.app, self.inner = app, cls(app, *args, **kwargs)

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and passes(URL(scope=scope).path):
                await self.app(scope, receive, send)
            else:
                await self.inner(scope, receive, send)

    Passing.__name__ = Passing.__qualname__ = f"Passing{cls.__name__}"
    Passing.wrapped, Passing.passes = cls, staticmethod(passes)  # type: ignore[attr-defined]
    return Passing


def _unary_protobuf(scope: Any) -> bool:
    """Whether an HTTP request is one of the Fleet or Runtime API's protobuf calls, whose every
    answer is one unary (not streamed) response."""
    from flwr.supercore.protobuf.translation import PROTOBUF_REQUEST_TYPES

    path = scope.get("path", "")
    return path.startswith(("/v1/fleet/", "/v1/runtime/")) and (scope.get("method"), path) in PROTOBUF_REQUEST_TYPES


def direct(cls: type) -> type:
    """``cls`` (a Starlette ``BaseHTTPMiddleware``, or the class itself with ``dispatch=``) as a
    plain ASGI middleware that runs the same ``dispatch`` on a Fleet or Runtime API call
    (:func:`_unary_protobuf`), with a ``call_next`` that awaits the next app in the same task
    and hands ``dispatch`` its response gathered whole, and runs ``cls`` itself on every other
    request (the Control API's streamed logs among them).

    ``BaseHTTPMiddleware`` runs the next app in a task group of its own and streams its response
    through memory streams, so that a streamed response can pass; a unary protobuf answer does not
    need that, and each such layer cost a Flower request on loopback about as much CPU as its
    handler. ``dispatch`` sees the same request (its body replayed to the next app, as
    ``BaseHTTPMiddleware`` does), the same exceptions of the next app and a response with the same
    status, headers and body; what it returns is sent as it is."""
    from starlette.middleware.base import _CachedRequest
    from starlette.responses import Response

    class Direct:
        def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
            self.app, self.inner = app, cls(app, *args, **kwargs)

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http" or not _unary_protobuf(scope):
                await self.inner(scope, receive, send)
                return
            request = _CachedRequest(scope, receive)
            app = self.app

            async def call_next(_request: Any) -> Response:
                start: dict[str, Any] = {}
                body: list[bytes] = []

                async def gather(message: Any) -> None:
                    if message["type"] == "http.response.start":
                        start.update(message)
                    elif message["type"] == "http.response.body":
                        body.append(message.get("body", b""))

                await app(scope, request.wrapped_receive, gather)
                if not start:
                    raise RuntimeError("No response returned.")
                response = Response(content=b"".join(body), status_code=start["status"])
                response.raw_headers = list(start.get("headers", []))
                return response

            response = await self.inner.dispatch_func(request, call_next)
            await response(scope, request.wrapped_receive, send)

    Direct.__name__ = Direct.__qualname__ = f"Direct{cls.__name__}"
    Direct.direct = cls  # type: ignore[attr-defined]
    return Direct


#: Environment variable: ``0`` keeps Flower's ``BaseHTTPMiddleware`` layers as they are (:func:`direct_middleware`).
DIRECT_MIDDLEWARE_ENV = "PFAIR_DIRECT_MIDDLEWARE"


def direct_middleware() -> bool:
    """The SuperLink's and SuperNode's HTTP apps run each ``BaseHTTPMiddleware`` layer that acts
    on a Fleet or Runtime API call — Flower's error translator, its protobuf translation, the
    SuperLink's node authentication and Fleet event log — through :func:`direct`: the same ``dispatch`` on the same
    request, without a task group and memory streams per layer and request. Wraps both modules'
    ``create_app`` (called by Flower's commands when they start their HTTP API); composes with
    :func:`skip_idle_middleware` (a layer skipped on some paths runs directly on the others).
    ``PFAIR_DIRECT_MIDDLEWARE=0`` keeps Flower's layers as they are."""
    if not patchable() or os.environ.get(DIRECT_MIDDLEWARE_ENV, "1") == "0":
        return False
    try:  # Starlette's request that replays its body: a private name, so a Starlette without it skips the patch
        from starlette.middleware.base import BaseHTTPMiddleware, _CachedRequest  # noqa: F401
    except ImportError:
        log.warning("pfair: Starlette has no _CachedRequest; Flower's HTTP middleware runs as it is")
        return False

    found = False
    for name in ("flwr.superlink.main", "flwr.supernode.main"):
        module = importlib.import_module(name)
        real = getattr(module, "create_app", None)
        if real is None or getattr(real, "_pfair_direct", False):
            found = found or real is not None
            continue

        def create_app(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            app = _real(*args, **kwargs)
            for middleware in app.user_middleware:
                cls = middleware.cls
                if isinstance(cls, type) and issubclass(cls, BaseHTTPMiddleware):
                    middleware.cls = direct(cls)
                elif isinstance(getattr(cls, "wrapped", None), type) and issubclass(cls.wrapped, BaseHTTPMiddleware):
                    middleware.cls = passing(direct(cls.wrapped), cls.passes)
            return app

        create_app._pfair_direct = True  # type: ignore[attr-defined]
        module.create_app = create_app
        found = True
    return found


#: Environment variable: ``0`` keeps every middleware on every request (:func:`skip_idle_middleware`).
SKIP_MIDDLEWARE_ENV = "PFAIR_SKIP_MIDDLEWARE"


def skip_idle_middleware() -> bool:
    """The SuperLink's and SuperNode's HTTP apps skip the middleware of :data:`PASS_THROUGH` for
    the requests it would hand on untouched (:func:`passing`); call before the app is built.

    Each of Flower's nine SuperLink middlewares is a ``BaseHTTPMiddleware``, which costs a task
    group, memory streams and events per request: on loopback, a round's hundred requests spent
    most of the SuperLink's CPU there. A request that one of them acts on (a Control API call, a
    SuperNode's call with node authentication or an event log) still goes through it.
    ``PFAIR_SKIP_MIDDLEWARE=0`` keeps them all."""
    if not patchable() or os.environ.get(SKIP_MIDDLEWARE_ENV, "1") == "0":
        return False

    found = False
    for name in ("flwr.superlink.main", "flwr.supernode.main"):
        module = importlib.import_module(name)
        for attr, passes in PASS_THROUGH.items():
            cls = getattr(module, attr, None)
            if isinstance(cls, type) and not hasattr(cls, "wrapped"):
                setattr(module, attr, passing(cls, passes))
                found = True
    return found


def link_superexec_popen(popen: Callable[..., Any]) -> bool:
    """The SuperLink starts its SuperExec with ``popen`` instead of ``subprocess.Popen``."""
    if not patchable():
        return False

    module = importlib.import_module("flwr.superlink.cli.flower_superlink")  # the package shadows it
    module.subprocess = module_with(subprocess, Popen=popen)  # type: ignore[attr-defined]
    return True


# ---------------------------------------------------------------------- SuperNode
#: Monotonic time of the last message this SuperNode stored (set by :func:`wake_after_pull`).
_LAST_MESSAGE = [float("-inf")]


def node_idle_poll(poll: float, local_wait: float, busy_poll: float | None = None, busy_for: float = 5.0) -> bool:
    """A SuperNode waits at most ``poll`` s between two pulls from the SuperLink when no message is
    waiting (Flower: 3 s), or ``busy_poll`` s within ``busy_for`` s of the last message it stored
    (a run's next round comes right after the server took the replies of this one), and
    ``local_wait`` s instead of 0.5 s between two looks at its own state (a ClientApp's reply,
    which reads no network)."""
    if not patchable():
        return False
    from flwr.supernode import start_client_internal

    busy = poll if busy_poll is None else min(float(busy_poll), poll)

    def sleep(seconds: float) -> None:
        if seconds < 1:
            time.sleep(min(float(seconds), local_wait))
        else:
            time.sleep(busy if time.monotonic() - _LAST_MESSAGE[0] < busy_for else poll)

    start_client_internal.time = module_with(time, sleep=sleep)  # type: ignore[attr-defined]
    return True


def node_superexec_popen(popen: Callable[..., Any]) -> bool:
    """The SuperNode starts its SuperExec with ``popen`` instead of ``subprocess.Popen``."""
    if not patchable():
        return False

    from flwr.supernode import start_client_internal

    start_client_internal.subprocess = module_with(subprocess, Popen=popen)  # type: ignore[attr-defined]
    return True


def wake_after_pull(notify: Callable[[], None]) -> bool:
    """Call ``notify()`` as soon as the SuperNode has stored a message and its objects (a task for
    its SuperExec to launch)."""
    if not patchable():
        return False
    from flwr.supernode import start_client_internal

    pull = start_client_internal._pull_and_store_message

    def pull_and_wake(*args: Any, **kwargs: Any) -> Any:
        run_id = pull(*args, **kwargs)
        if run_id is not None:
            _LAST_MESSAGE[0] = time.monotonic()
            notify()
        return run_id

    start_client_internal._pull_and_store_message = pull_and_wake  # type: ignore[attr-defined]
    return True


# ---------------------------------------------------------------------- SuperExec
def route_app_launches(popen: Callable[..., Any]) -> bool:
    """The SuperExec launches its app processes with ``popen`` instead of ``subprocess.Popen``."""
    if not patchable():
        return False

    from flwr.supercore.superexec.executor import subprocess_executor

    subprocess_executor.subprocess = module_with(subprocess, Popen=popen)  # type: ignore[attr-defined]
    return True


def superexec_wait(wait: Callable[[float], None]) -> bool:
    """The SuperExec's wait between two polls for tasks is ``wait`` (which returns early when
    woken) instead of ``time.sleep``."""
    if not patchable():
        return False
    from flwr.supercore.superexec import run_superexec as loop

    loop.time = module_with(time, sleep=wait)  # type: ignore[attr-defined]
    return True
