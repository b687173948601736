"""Where every random stream's key comes from: the only place keys are derived in Python.

A key (``_core.NoiseKey``) is a 256-bit secret or a public seed expanded to 256 bits; the Rust core
derives each stream from a key, the silo, the round and a purpose with ChaCha20 as a PRF, so two
streams never coincide. What each key may be follows from the threat model (the server and every
other silo know every public setting, including any seed a user typed):

* **noise** (:func:`noise_key`): fresh from the operating system's entropy, per party and per fit;
  ``noise_seed=`` makes it reproducible, and then the guarantee does not hold against anyone who knows
  that seed (the estimator warns).
* **batches of a silo** (:func:`batch_key`): the public ``seed`` only where it cannot matter —
  attribute mode with shuffled epochs or the full batch, whose accounts hold for every record
  whatever the batches are — and in a non-private fit. Otherwise the silo's noise key: in record
  mode the hidden batch is part of the privacy argument, and the bound for random public batches
  averages over the draw, which a seed known in advance would fix.
* **batches of the hybrid topologies' non-sensitive silos** (:func:`hybrid_batch_key`): the sensitive
  silos are accounted as random batches, so a private run draws them from a secret key too.
* **a deployed silo's batch key** (:func:`restore_key`): drawn once at the plan round and kept, so
  the rounds of one shuffled epoch, answered by separate processes, come from one permutation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from pfair import _core
from pfair.settings import SteFFLeSettings


def secret_key() -> Any:
    """A fresh key from the operating system's entropy (never leaves its process)."""
    return _core.NoiseKey.secret()


def seeded_key(seed: int) -> Any:
    """The key of a public seed: for what is public anyway (batch order, PF-LD's non-private batches)."""
    return _core.NoiseKey.seeded(int(seed))


def new_secret() -> bytes:
    """256 fresh bits from the operating system, for a key a silo keeps in its own state (a deployed
    silo's batch key, written with its plan; :func:`restore_key` makes the key of them)."""
    return os.urandom(32)


def restore_key(secret: bytes) -> Any:
    """The key of secret bits a silo kept in its own state (:func:`new_secret`)."""
    return _core.NoiseKey.from_secret(secret)


def noise_key(noise_seed: int | None) -> Any:
    """A party's noise key: secret, or ``noise_seed``'s when reproducible noise was asked for."""
    return seeded_key(noise_seed) if noise_seed is not None else secret_key()


def batches_from_seed(settings: SteFFLeSettings) -> bool:
    """Whether a silo's batches may come from the public ``seed`` (see the module docstring)."""
    return settings.protect == "attribute" and (not settings.private or settings.sampling in ("shuffle", "full_batch"))


def batch_key(settings: SteFFLeSettings, noise: Any) -> Any:
    """A standard silo's batch key: the public seed's where :func:`batches_from_seed`, else ``noise``."""
    return seeded_key(settings.seed) if batches_from_seed(settings) else noise


def hybrid_batch_key(settings: SteFFLeSettings) -> Any:
    """The non-sensitive silos' batch key in the hybrid topologies: the public seed's in a non-private
    run, otherwise ``noise_seed``'s or a secret one."""
    return seeded_key(settings.seed) if not settings.private else noise_key(settings.noise_seed)


@dataclass(frozen=True)
class SiloKeys:
    """The two keys of a silo's random streams (``_core.NoiseKey``); see the module docstring."""

    batch: Any
    noise: Any

    @classmethod
    def for_silo(cls, settings: SteFFLeSettings) -> "SiloKeys":
        """Fresh secret noise (or ``noise_seed``'s) and the batch key the protection mode allows."""
        noise = noise_key(settings.noise_seed)
        return cls(batch=batch_key(settings, noise), noise=noise)
