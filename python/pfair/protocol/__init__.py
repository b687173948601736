"""The SteFFLe round as a protocol between parties (``docs/privacy.md``, ``docs/deploy.md``).

* :class:`SiloMessage` — exactly what a silo sends in a round; :class:`LocalDiagnostics` — what it
  keeps.
* :class:`SiloParty` — one silo: data, keys, persistent ledger, gradient provider;
  ``step(θ, W, round) → SiloMessage``.
* :class:`ServerParty` — validates replies, reweights, runs the Rust ``server_update``; with
  ``max_violation`` it adapts λ from the silos' :class:`ViolationRelease` (``adapt_lam``).
* :class:`Simulation` — N silo parties and one server in process (the estimators' runner).
* :mod:`pfair.protocol.hybrid` — the hybrid modes' parties.
"""

from pfair.protocol.messages import PARTS, LocalDiagnostics, SiloMessage, ViolationRelease
from pfair.protocol.server import ServerParty, reply_limits
from pfair.protocol.silo import SiloKeys, SiloParty
from pfair.protocol.simulation import RunState, Simulation

__all__ = ["PARTS", "LocalDiagnostics", "RunState", "ServerParty", "SiloKeys", "SiloMessage", "SiloParty",
           "Simulation", "ViolationRelease", "reply_limits"]
