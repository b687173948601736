"""The SteFFLe round as a protocol between parties (``docs/privacy.md``, ``docs/deploy.md``).

* :class:`SiloMessage` — exactly what a silo sends in a round; :class:`LocalDiagnostics` — what it
  keeps.
* :class:`SiloParty` — one silo: data, keys, persistent ledger, gradient provider;
  ``step(θ, W, round) → SiloMessage``.
* :class:`ServerParty` — validates replies, reweights, runs the Rust ``server_update``; reads the
  silos' :class:`CheckpointRelease` (``read_checkpoint``: validation figures, and with
  ``max_violation`` the dual step on λ).
* :class:`RunPlan` — every quantity derived from the settings and the federation, computed once
  (:mod:`pfair.protocol.plan`); :mod:`pfair.protocol.setup` — ledgers, the p_s round, the server;
  :mod:`pfair.protocol.keys` — where every key comes from.
* :class:`Driver` — the one epoch loop, over a transport (:mod:`pfair.protocol.transports`: the
  party loop and the Rust fast path; the hybrid topologies' in :mod:`pfair.protocol.topologies`; Flower's
  in :mod:`pfair.flower.server_app`).
* :class:`Simulation` — a run's parties in process (the estimators' runner), standard or hybrid.
"""

from pfair.protocol.driver import Driver, RunState
from pfair.protocol.keys import SiloKeys
from pfair.protocol.messages import PARTS, CheckpointRelease, LocalDiagnostics, SiloMessage
from pfair.protocol.plan import RunPlan
from pfair.protocol.server import ServerParty, reply_limits
from pfair.protocol.silo import SiloParty
from pfair.protocol.simulation import Simulation

__all__ = ["PARTS", "CheckpointRelease", "Driver", "LocalDiagnostics", "RunPlan", "RunState", "ServerParty", "SiloKeys",
           "SiloMessage", "SiloParty", "Simulation", "reply_limits"]
