"""``python -m pfair.flower.fast_superlink ARGS``: Flower's ``flower-superlink ARGS`` for loopback
runs (the tests and ``pfair deploy local``).

The changes, none of which touches the protocol (each a function of :mod:`pfair.flower.patches`,
behind its one version check):

* The SuperLink holds a pull that finds nothing yet — a SuperNode asking for its messages, the
  ServerApp asking for replies, either asking for an announced object not yet uploaded — until
  something is stored, for at most ``PFAIR_LINK_HOLD`` s (default 0.5; 0 turns it off), so the
  parties ask again at once instead of polling every few hundredths of a second
  (:func:`~pfair.flower.patches.hold_pulls`).
* Its HTTP app skips the Control and Fleet middleware on the requests they hand on untouched
  (:func:`~pfair.flower.patches.skip_idle_middleware`; ``PFAIR_SKIP_MIDDLEWARE=0`` keeps them),
  and runs the error translation, protobuf translation, node authentication and event log of a
  Fleet or Runtime API call without a task group per layer (:func:`~pfair.flower.patches.direct_middleware`;
  ``PFAIR_DIRECT_MIDDLEWARE=0`` keeps Flower's layers).
* The SuperExec it starts for its ServerApps is a :class:`~pfair.flower.fast_superexec.Zygote`
  forked from this process after it has imported Flower's SuperExec, its ``flwr-serverapp``
  runtime and :mod:`pfair.flower.server_app`, and it forks a run's ServerApp process from a warm
  process instead of starting it afresh (:mod:`pfair.flower.fast_superexec`). The SuperLink, its
  SuperExec and the ServerApp then import Flower once instead of three times, and the SuperLink
  wakes its SuperExec through a pipe when it creates a run instead of the SuperExec asking every
  0.1 s. ``PFAIR_WARM_CLIENTAPPS=0`` turns this off.

A deployment on separate machines uses ``flower-superlink`` itself (``docs/deploy.md``).
"""

from __future__ import annotations

import os
import sys

from pfair.flower import fast_superexec as fx
from pfair.flower import patches


def main() -> int:
    # Flower is imported when the launcher runs (`python -m`), not when this module is imported.
    from flwr.superlink.cli import flower_superlink

    patches.hold_pulls(patches.link_hold())
    patches.skip_idle_middleware()
    patches.direct_middleware()
    if os.environ.get("PFAIR_WARM_CLIENTAPPS", "1") != "0" and patches.patchable():
        from flwr.supercore.cli import flower_superexec  # noqa: F401

        fx.preload(fx.SERVERAPP_COMMAND)
        popen, wake_w = fx.waking_superexec_popen(fx.SERVERAPP_COMMAND)
        patches.link_superexec_popen(popen)
        if wake_w is not None:  # a run was created: its ServerApp task is launched at once
            patches.wake_on_new_runs(lambda: fx.notify(wake_w))

    sys.argv[0] = "flower-superlink"
    return flower_superlink() or 0


if __name__ == "__main__":  # pragma: no cover - run as a process by LoopbackDeployment
    sys.exit(main())
