"""``python -m pfair.flower.fast_supernode ARGS``: Flower's ``flower-supernode ARGS`` tuned for
loopback runs (the tests and ``pfair deploy local``).

The changes, none of which touches the protocol:

* Flower 1.41's SuperNode sleeps 3 s between two pulls when no message is waiting
  (``flwr.supernode.start_client_internal``), so on one machine every round waits up to 3 s for
  a node to notice it. The loopback SuperLink holds an empty pull until a message comes
  (:mod:`pfair.flower.fast_superlink`), so this entry point asks again after 0.005 s; with
  ``PFAIR_LINK_HOLD=0`` (no hold) it polls every ``PFAIR_SUPERNODE_POLL`` seconds (default
  0.2; ``PFAIR_SUPERNODE_BUSY_POLL``, default 0.05, within 5 s of its last message). The
  module's 0.5 s waits for a ClientApp's reply (which read the node's own state, not the
  network) become 0.005 s.
* Its Runtime API skips the tracing middleware unless ``FLWR_TRACING_ENABLED=1``
  (:func:`pfair.flower.patches.skip_idle_middleware`), and runs its error and protobuf
  translation without a task group per layer (:func:`pfair.flower.patches.direct_middleware`).
* Object pulls retry after 0.05 s instead of 1 s
  (:func:`pfair.flower.patches.short_pull_backoff`).
* The SuperExec it starts is a :class:`~pfair.flower.fast_superexec.Zygote` forked from this
  process after it has imported Flower's SuperExec, the ClientApp runtime and pfair, and it forks
  each message's ClientApp process from a warm process instead of starting it afresh
  (:mod:`pfair.flower.fast_superexec`): the SuperNode, its SuperExec and the ClientApps import
  Flower once. The node wakes its SuperExec through a pipe as soon as a message and its objects
  are stored, instead of the SuperExec asking every 0.1 s. ``PFAIR_WARM_CLIENTAPPS=0`` turns
  this off.

Then it runs Flower's own command unchanged: same arguments, same node. Each change of Flower's
internals is a function of :mod:`pfair.flower.patches` (one version check for all). A deployment on separate
machines uses ``flower-supernode`` itself (``docs/deploy.md``).
"""

from __future__ import annotations

import os
import sys

from pfair.flower import fast_superexec as fx
from pfair.flower import patches

# How long the SuperNode waits between two looks at its own state (a ClientApp's reply).
LOCAL_WAIT = 0.005
# Its idle poll of the SuperLink within 5 s of its last message (a run's next round is near).
BUSY_POLL = 0.05
# Its poll when the SuperLink holds empty pulls (the loopback SuperLink, pfair.flower.fast_superlink).
HELD_POLL = 0.005


def main() -> int:
    # Flower is imported when the launcher runs (`python -m`), not when this module is imported.
    from flwr.supernode.cli import flower_supernode

    fx.short_pull_backoff()
    patches.skip_idle_middleware()
    patches.direct_middleware()
    # Flower's 3 s is the idle poll of the SuperLink; its 0.5 s waits read this node's own state.
    # A loopback SuperLink holds an empty pull (pfair.flower.patches.hold_pulls): ask again at once.
    held = patches.link_hold() > 0
    patches.node_idle_poll(float(os.environ.get("PFAIR_SUPERNODE_POLL", str(HELD_POLL if held else 0.2))), LOCAL_WAIT,
                           busy_poll=float(os.environ.get("PFAIR_SUPERNODE_BUSY_POLL",
                                                          str(HELD_POLL if held else BUSY_POLL))))

    if os.environ.get("PFAIR_WARM_CLIENTAPPS", "1") != "0" and patches.patchable():
        # Everything the SuperExec, its warm process and a ClientApp import, imported once here;
        # the zygote is forked before the SuperNode parses its arguments (the node config among
        # them) or starts a thread.
        from flwr.supercore.cli import flower_superexec  # noqa: F401

        fx.preload(fx.CLIENTAPP_COMMAND)
        popen, wake_w = fx.waking_superexec_popen(fx.CLIENTAPP_COMMAND)
        patches.node_superexec_popen(popen)
        if wake_w is not None:  # a message and its objects are stored: a task to launch
            patches.wake_after_pull(lambda: fx.notify(wake_w))

    sys.argv[0] = "flower-supernode"
    return flower_supernode() or 0


if __name__ == "__main__":  # pragma: no cover - run as a process by LoopbackDeployment
    sys.exit(main())
