"""Silos as real parties on Flower (``pip install pfair[flower]``; flwr 1.41 or 1.42, Python ≥ 3.11).

* :mod:`pfair.flower.client_app` — a Flower ClientApp that is one silo
  (:class:`pfair.flower.node.SiloNode`): its own shard, its own entropy, its own persistent ledger.
* :mod:`pfair.flower.server_app` — a ServerApp whose :class:`SteFFLeStrategy` runs the p_s round,
  the noise-plan round and the descent–ascent rounds with the same server update as the
  simulation, validating every reply.
* :mod:`pfair.flower.deploy` — a loopback deployment on 127.0.0.1 (``pfair deploy local``) and the
  commands for separate machines (``docs/deploy.md``).
* :mod:`pfair.flower.tune` — private model selection on a deployment (``deploy_search``): every
  candidate a run on the same SuperNodes and ledgers (``docs/model_selection.md``).
* :mod:`pfair.flower.fast_superlink`, :mod:`pfair.flower.fast_supernode`,
  :mod:`pfair.flower.fast_superexec` — Flower's own commands tuned for one machine (what the
  loopback deployment runs): shorter polls and retries, SuperExecs woken instead of polling, and
  app processes forked from processes that imported Flower and pfair once.
* :mod:`pfair.flower.silo_host` — one process per SuperNode that keeps the silo's data in memory
  between messages (its ClientApps hand it the silo's part of each message).
* :mod:`pfair.flower.patches` — every change pfair makes to Flower's internals, behind one
  version check (:data:`~pfair.flower.patches.PATCHED_RELEASES`).

Flower never tries the network from pfair: every component pfair starts gets
``FLWR_TELEMETRY_ENABLED=0`` and ``FLWR_DISABLE_UPDATE_CHECK=1``.
"""

from __future__ import annotations

import os

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")

FLOWER_ENV = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
              "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}


def require_flwr() -> None:
    """Import check with the fix in the message."""
    try:
        import flwr  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("pfair.flower needs Flower: pip install 'pfair[flower]' (flwr 1.41 or 1.42, Python >= 3.11)") from exc
