"""``python -m pfair.flower.fast_supernode ARGS``: Flower's ``flower-supernode ARGS`` tuned for
loopback runs (the tests and ``pfair deploy local``).

Two changes, neither of which touches the protocol:

* Flower 1.41's SuperNode sleeps 3 s between two pulls when no message is waiting
  (``flwr.supernode.start_client_internal``), so on one machine every round waits up to 3 s for
  a node to notice it. This entry point caps that module's sleeps at ``PFAIR_SUPERNODE_POLL``
  seconds (default 0.2).
* The SuperExec it starts is :mod:`pfair.flower.fast_superexec` (Flower's, with each message's
  ClientApp process forked from a warm process that has imported Flower and pfair once, instead
  of started afresh), unless ``PFAIR_WARM_CLIENTAPPS=0``.

Then it runs Flower's own command unchanged: same arguments, same node. A deployment on separate
machines uses ``flower-supernode`` itself (``docs/deploy.md``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any


def main() -> int:
    from flwr.supernode import start_client_internal
    from flwr.supernode.cli import flower_supernode

    from pfair.flower.fast_superexec import module_with

    poll = float(os.environ.get("PFAIR_SUPERNODE_POLL", "0.2"))
    start_client_internal.time = module_with(  # type: ignore[attr-defined]
        time, sleep=lambda seconds: time.sleep(min(float(seconds), poll)))

    if os.environ.get("PFAIR_WARM_CLIENTAPPS", "1") != "0":
        real = subprocess.Popen

        def popen(args: Any, *a: Any, **kw: Any) -> Any:
            if isinstance(args, (list, tuple)) and args and args[0] == "flower-superexec":
                args = [sys.executable, "-m", "pfair.flower.fast_superexec", *args[1:]]
            return real(args, *a, **kw)

        start_client_internal.subprocess = module_with(subprocess, Popen=popen)  # type: ignore[attr-defined]

    sys.argv[0] = "flower-supernode"
    return flower_supernode() or 0


if __name__ == "__main__":  # pragma: no cover - run as a process by LoopbackDeployment
    sys.exit(main())
