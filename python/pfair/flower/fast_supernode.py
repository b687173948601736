"""``python -m pfair.flower.fast_supernode ARGS``: Flower's ``flower-supernode ARGS`` with a
shorter idle poll, for loopback runs (the tests and ``pfair deploy local``).

Flower 1.41's SuperNode sleeps 3 s between two pulls when no message is waiting
(``flwr.supernode.start_client_internal``), so on one machine every round waits up to 3 s for a
node to notice it. This entry point caps that module's sleeps at ``PFAIR_SUPERNODE_POLL``
seconds (default 0.2) and then runs Flower's own command unchanged: same arguments, same
protocol, same node. A deployment on separate machines uses ``flower-supernode`` itself
(``docs/deploy.md``); the poll only changes how soon an idle node asks again.
"""

from __future__ import annotations

import os
import sys
import time
import types


def main() -> int:
    from flwr.supernode import start_client_internal
    from flwr.supernode.cli import flower_supernode

    poll = float(os.environ.get("PFAIR_SUPERNODE_POLL", "0.2"))
    shim = types.ModuleType("time")
    shim.__dict__.update(time.__dict__)
    shim.sleep = lambda seconds: time.sleep(min(float(seconds), poll))  # type: ignore[attr-defined]
    start_client_internal.time = shim  # type: ignore[attr-defined]
    sys.argv[0] = "flower-supernode"
    return flower_supernode() or 0


if __name__ == "__main__":  # pragma: no cover - run as a process by LoopbackDeployment
    sys.exit(main())
