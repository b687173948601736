"""A SuperNode's silo host: one long-lived process that answers the silo's messages with its data
kept in memory, so that a message does not re-read the shard from disk, re-hash it for the
ledger's binding, or rebuild the Rust ``SiloSet`` of the run's training split.

Flower hands every message to a new ClientApp process (a fork of a warm process,
:mod:`pfair.flower.fast_superexec`), which forgets everything when it ends. The warm process
forks this host once, before it forks any ClientApp, and names its socket in
``$PFAIR_SILO_HOST`` (a Unix socket in a directory only the node's user can open); a ClientApp
then does Flower's part of a message (pull it, decode it, push the reply) and sends the silo's
part — the node config, the message's config and its decoded arrays — to the host, which answers
with :func:`pfair.flower.client_app.answer`, exactly the function a ClientApp runs when there is no
host (or the host does not answer: the ClientApp then answers itself).

What the host keeps between messages (:class:`NodeCache`): the silo's
:class:`~pfair.flower.node.SiloNode` — its shard and test shard as read, the fingerprint its ledger
is bound to, and the ``SiloSet`` of each training split — keyed by the whole node config, the
group and class counts, the model spec and the identity of the shard files (device, inode, size,
modification and change times): another node config, a rewritten shard or a new model is a new
entry. What it does not keep: the ledger and the run's plan (read from disk and checked under
the node's lock for every message, as without a host, so a ledger changed by anyone else is
seen), and any noise key (a silo's keys are drawn from the OS for every message, or derived from
its own ``noise-seed``, and never written anywhere). Nothing is released that a ClientApp without
a host would not release: the host runs the same code on the same inputs.

``PFAIR_SILO_HOST=0`` in the SuperNode's environment turns the host off.
"""

from __future__ import annotations

import glob
import json
import os
import pickle
import select
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
import traceback
from collections import OrderedDict
from typing import Any, Callable, Mapping

from pfair.flower.node import SiloNode

#: Environment variable naming the host's socket (set by the warm process for its forks), or
#: ``0`` in a SuperNode's environment to run without a host.
HOST_ENV = "PFAIR_SILO_HOST"
#: SiloNodes kept (one per node config in practice; a few for tests that run nodes side by side).
MAX_NODES = 4
_HEADER = struct.Struct("!Q")
#: Prefix of a host's socket directory in the temporary directory.
PREFIX = "pfair-silo-host-"


def remove_stale(base: str | None = None, min_age: float = 60.0) -> list[str]:
    """Remove the socket directories of this user's hosts that are gone (a host killed with
    SIGKILL, as a teardown's last resort does, cannot remove its own); returns what was removed.
    Only directories older than ``min_age`` s: a host starting beside this one (every SuperNode of
    a loopback deployment starts at once) has made its directory but may not listen yet."""
    removed = []
    for directory in glob.glob(os.path.join(base or tempfile.gettempdir(), PREFIX + "*")):
        try:
            st = os.stat(directory)
            if st.st_uid != os.getuid() or time.time() - st.st_mtime < min_age:
                continue
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.settimeout(1.0)  # a live host with a full backlog must not hang this start
            try:
                probe.connect(os.path.join(directory, "socket"))
                continue  # a live host
            except (ConnectionRefusedError, FileNotFoundError):
                pass
            finally:
                probe.close()
            shutil.rmtree(directory)
            removed.append(directory)
        except OSError:
            continue
    return removed


def file_identity(path: Any) -> tuple | None:
    """What identifies a file's content for the cache: device, inode, size, modification and change
    times (ns); None when there is no such file."""
    if path in (None, ""):
        return None
    try:
        st = os.stat(str(path))
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class NodeCache:
    """The :class:`~pfair.flower.node.SiloNode` of each node config, reused while its key holds
    (see the module docstring); at most :data:`MAX_NODES`, least recently used first out."""

    def __init__(self, build: Callable[..., Any] | None = None, max_nodes: int = MAX_NODES) -> None:
        if build is None:
            build = SiloNode
        self.build, self.max_nodes = build, int(max_nodes)
        self.nodes: OrderedDict[tuple, Any] = OrderedDict()
        #: How many SiloNodes were built (each one read its shard).
        self.built = 0

    @staticmethod
    def key(node_config: Mapping[str, Any], n_groups: int | None, n_classes: int | None,
            model: Mapping[str, Any] | None) -> tuple:
        config = json.dumps({str(k): node_config[k] for k in node_config}, sort_keys=True, default=str)
        return (config, n_groups, n_classes, json.dumps(model, sort_keys=True, default=str),
                file_identity(node_config.get("data-path")), file_identity(node_config.get("test-path")))

    def get(self, node_config: Mapping[str, Any], *, n_groups: int | None = None, n_classes: int | None = None,
            model: Mapping[str, Any] | None = None) -> Any:
        key = self.key(node_config, n_groups, n_classes, model)
        node = self.nodes.get(key)
        if node is None:
            node = self.build(node_config, n_groups=n_groups, n_classes=n_classes, model=model)
            self.built += 1
            self.nodes[key] = node
            while len(self.nodes) > self.max_nodes:
                self.nodes.popitem(last=False)
        self.nodes.move_to_end(key)
        return node


def _send(sock: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv(sock: socket.socket) -> Any:
    def exactly(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the silo host closed the connection")
            buf += chunk
        return bytes(buf)

    (n,) = _HEADER.unpack(exactly(_HEADER.size))
    return pickle.loads(exactly(n))


def serve(listener: socket.socket, parent_fd: int, handle: Callable[[Any], Any]) -> None:
    """Answer requests on ``listener`` one at a time with ``handle`` until ``parent_fd`` (the
    read end of a pipe whose write end the warm process holds) reaches its end."""
    while True:
        ready, _, _ = select.select([listener, parent_fd], [], [])
        if parent_fd in ready:
            return
        conn, _ = listener.accept()
        with conn:
            try:
                request = _recv(conn)
            except (ConnectionError, OSError, pickle.UnpicklingError, EOFError):
                continue
            stop = None
            try:
                reply = ("ok", handle(request))
            except (SystemExit, KeyboardInterrupt) as exc:  # a teardown (SIGTERM): answer, then end
                reply, stop = ("error", RuntimeError("the silo host is shutting down")), exc
            except BaseException as exc:  # noqa: BLE001 - the ClientApp raises it as it would have
                reply = ("error", exc)
            try:
                _send(conn, reply)
            except (pickle.PicklingError, TypeError, AttributeError):
                _send(conn, ("error", RuntimeError(f"{type(reply[1]).__name__}: {reply[1]}")))
            except OSError:
                pass
            if stop is not None:
                raise stop


def start(handle: Callable[[Any], Any] | None = None) -> str | None:
    """Fork the host from this (single-threaded, warm) process; returns its socket's path and
    sets ``$PFAIR_SILO_HOST`` to it for this process's later forks (None, and nothing set, when
    ``$PFAIR_SILO_HOST`` is ``0``). The host ends when this process does."""
    if os.environ.get(HOST_ENV, "") == "0":
        return None
    if handle is None:  # the silo's answers come from pfair.flower.client_app.host_handler()
        raise ValueError("silo_host.start needs handle=, the function that answers a request "
                         "(pfair.flower.client_app.host_handler() for a ClientApp's)")
    remove_stale()
    directory = tempfile.mkdtemp(prefix=PREFIX)  # mode 0700: the node's user only
    path = os.path.join(directory, "socket")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    parent_r, parent_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the host (exercised through the Flower tests)
        code = 0
        try:
            os.close(parent_w)
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a teardown: remove the socket first
            serve(listener, parent_r, handle)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            code = 1
        finally:
            try:
                os.unlink(path)
                os.rmdir(directory)
            except OSError:
                pass
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    listener.close()
    os.close(parent_r)
    os.set_inheritable(parent_w, False)  # only this process (and its forks) hold the host alive
    os.environ[HOST_ENV] = path
    _STARTED.append((pid, parent_w))
    return path


_STARTED: list[tuple[int, int]] = []


def stop(timeout: float = 10.0) -> None:
    """End the hosts this process started (they see the end of their pipe) and reap them."""
    while _STARTED:
        pid, fd = _STARTED.pop()
        os.close(fd)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.01)
        else:  # pragma: no cover - a host stuck in a request
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    os.environ.pop(HOST_ENV, None)


def ask(path: str, request: Any, timeout: float | None = None) -> Any:
    """The host's answer to ``request`` (its exception raised here); raises
    :class:`HostUnavailable` when the host cannot be reached (the caller then answers itself)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.settimeout(timeout)
            sock.connect(path)
            _send(sock, request)
        except OSError as exc:
            raise HostUnavailable(str(exc)) from None
        status, value = _recv(sock)
    finally:
        sock.close()
    if status == "error":
        raise value
    return value


class HostUnavailable(ConnectionError):
    """The silo host's socket does not answer."""
