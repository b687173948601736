"""``python -m pfair.flower.fast_superlink ARGS``: Flower's ``flower-superlink ARGS`` for loopback
runs (the tests and ``pfair deploy local``).

One change, which does not touch the protocol: the SuperExec the SuperLink starts for its
ServerApps is a :class:`~pfair.flower.fast_superexec.Zygote` forked from this process after it
has imported Flower's SuperExec, its ``flwr-serverapp`` runtime and :mod:`pfair.flower.server_app`,
and it forks a run's ServerApp process from a warm process instead of starting it afresh
(:mod:`pfair.flower.fast_superexec`). The SuperLink, its SuperExec and the ServerApp then import
Flower once instead of three times, and the SuperLink wakes its SuperExec through a pipe when it
creates a run instead of the SuperExec asking every 0.1 s. ``PFAIR_WARM_CLIENTAPPS=0`` turns this
off. A deployment on separate machines uses ``flower-superlink`` itself (``docs/deploy.md``).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from typing import Any


def wake_on_new_runs(wake_fd: int) -> None:
    """Wake the SuperExec (:func:`pfair.flower.fast_superexec.notify`) whenever this SuperLink
    has created a run, whose ServerApp task it then launches at once, instead of the SuperExec
    asking for tasks every 0.1 s."""
    from flwr.server.superlink.linkstate import in_memory_linkstate, sql_linkstate

    from pfair.flower import fast_superexec as fx

    for cls in (in_memory_linkstate.InMemoryLinkState, sql_linkstate.SqlLinkState):
        real = cls.create_run

        def create_run(self: Any, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            run_id = _real(self, *args, **kwargs)
            fx.notify(wake_fd)
            return run_id

        cls.create_run = create_run  # type: ignore[method-assign]


def main() -> int:
    from flwr.superlink.cli import flower_superlink

    from pfair.flower import fast_superexec as fx

    if os.environ.get("PFAIR_WARM_CLIENTAPPS", "1") != "0":
        from flwr.supercore.cli import flower_superexec  # noqa: F401

        fx.preload(fx.SERVERAPP_COMMAND)
        popen, wake_w = fx.waking_superexec_popen(fx.SERVERAPP_COMMAND)
        module = importlib.import_module("flwr.superlink.cli.flower_superlink")  # the package shadows it
        module.subprocess = fx.module_with(subprocess, Popen=popen)
        if wake_w is not None:
            wake_on_new_runs(wake_w)

    sys.argv[0] = "flower-superlink"
    return flower_superlink() or 0


if __name__ == "__main__":  # pragma: no cover - run as a process by LoopbackDeployment
    sys.exit(main())
