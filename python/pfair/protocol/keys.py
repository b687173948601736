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

**Which stream a release draws** (:class:`ReleaseId`). A round's message draws the stream
``(silo, round, purpose)`` of the silo's noise key. Every other release of a silo (the DP
histogram of s, a checkpoint's validation table and violation histogram, a deployed silo's
evaluation, a score histogram) is named by a :class:`ReleaseId` — its kind, silo, run, subject and
epoch or index — whose injective byte encoding (:meth:`ReleaseId.encode`) the Rust core turns into
a stream key by a ChaCha20 cascade in a domain no round stream uses (``rust/src/noise.rs``,
``release_key``; ``docs/privacy.md``, "Noise streams"). Two releases share noise only if they have
the same identifier, which a ledger charges and keeps once: there is no arithmetic (a base plus an
epoch) that a long run or a chosen epoch could make two kinds meet in.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

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


# ------------------------------------------------------------------------------------ round streams
#: The PF-LD baseline's two round streams under its one (central) key, in the slot a silo's index
#: takes in a federated round's stream ``(silo, round, purpose)``: the primal step's noise (round =
#: the step) and the dual step's noise on the violations (round = the epoch).
PFLD_PRIMAL_STREAM = 0
PFLD_DUAL_STREAM = 1


# ------------------------------------------------------------------------------------ release ids
#: The kinds of release a silo noises outside its rounds (the first field of a :class:`ReleaseId`).
GROUP_COUNTS = "group_counts"  # the DP histogram of s behind p_s="dp" (pfair.privacy.proportions)
VALIDATION_TABLE = "validation_table"  # a checkpoint's validation table, record mode (pfair.validation)
VIOLATION_HISTOGRAM = "violation_histogram"  # a checkpoint's violation histogram (pfair.fairness_target)
EVALUATION = "evaluation"  # a deployed silo's evaluation table (pfair.flower.node)
SCORE_HISTOGRAM = "score_histogram"  # a score histogram for post-processing (pfair.privacy.score_histogram)
RELEASE_KINDS = (GROUP_COUNTS, VALIDATION_TABLE, VIOLATION_HISTOGRAM, EVALUATION, SCORE_HISTOGRAM)


@dataclass(frozen=True)
class ReleaseId:
    """What identifies one release of a silo, and so its noise stream.

    ``kind``: one of :data:`RELEASE_KINDS`; ``silo``: the silo's index; ``run``: the run it belongs
    to, named by :func:`release_run` (``""`` for a release of the silo rather than of a run: the p_s histogram, kept across runs,
    and a score histogram); ``subject``: what it is of when one kind holds several (the p_s
    histogram's statistic, e.g. ``"p_s:equalized_odds:1"``); ``index``: the checkpoint epoch, or
    the i-th release of its kind (evaluations of a run, score histograms of a silo).

    :meth:`encode` is injective: ``DOMAIN`` and then every field as its UTF-8 bytes (integers in
    decimal) preceded by their length as 8 little-endian bytes, so the fields can be read back
    from the bytes. The Rust core derives the stream from these bytes under the silo's key
    (``_core.gaussian_release``)."""

    kind: str
    silo: int
    run: str = ""
    subject: str = ""
    index: int = 0

    DOMAIN: ClassVar[bytes] = b"pfair/release/v1"

    def __post_init__(self) -> None:
        if self.kind not in RELEASE_KINDS:
            raise ValueError(f"release kind {self.kind!r} is unknown; add it to RELEASE_KINDS in "
                             f"pfair/protocol/keys.py (known: {', '.join(RELEASE_KINDS)})")
        for name in ("silo", "index"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"a release's {name} must be an integer >= 0, got {value!r}")
            object.__setattr__(self, name, int(value))
        for name in ("run", "subject"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"a release's {name} must be a str, got {type(getattr(self, name)).__name__}")

    def encode(self) -> bytes:
        """The injective byte encoding the release's stream is derived from."""
        fields = (self.DOMAIN, self.kind.encode(), str(self.silo).encode(), self.run.encode(),
                  self.subject.encode(), str(self.index).encode())
        return b"".join(len(f).to_bytes(8, "little") + f for f in fields)


def release_run(ledger: Any, run_id: str | None) -> str:
    """How run ``run_id`` is named in its releases' identifiers: ``"ledger:k"`` when it is the k-th
    run (from 0) that the silo's ``ledger`` registered, else ``"id:"`` and its id.

    The position, not the id: an in-process run's id is a fresh random one, and a seeded fit
    (``noise_seed``) must release the same noise again from a fresh ledger; two runs of one
    ledger still have different positions, so they never share a release stream. The prefixes
    keep the two forms apart (a server may name a run ``"ledger:0"``)."""
    runs = list(getattr(ledger, "runs", None) or ())
    if run_id is not None and run_id in runs:
        return f"ledger:{runs.index(run_id)}"
    return f"id:{run_id or ''}"


#: The statistic of a hybrid topology's sensitive silo's p_s histogram (its counts of s).
HYBRID_GROUP_COUNTS = "sensitive_counts_of_s"


def group_counts_release(silo: int, statistic: str) -> ReleaseId:
    """The p_s histogram of ``statistic`` (its ledger name), one per silo whatever the run."""
    return ReleaseId(GROUP_COUNTS, silo, subject=statistic)


def validation_release(silo: int, run: str, epoch: int) -> ReleaseId:
    """The validation table of checkpoint ``epoch`` of ``run`` (its :func:`release_run` name)."""
    return ReleaseId(VALIDATION_TABLE, silo, run=run, index=epoch)


def violation_release(silo: int, run: str, epoch: int) -> ReleaseId:
    """The violation histogram of checkpoint ``epoch`` of ``run`` (its :func:`release_run` name)."""
    return ReleaseId(VIOLATION_HISTOGRAM, silo, run=run, index=epoch)


def evaluation_release(silo: int, run: str, i: int) -> ReleaseId:
    """A deployed silo's ``i``-th evaluation of ``run`` (its :func:`release_run` name)."""
    return ReleaseId(EVALUATION, silo, run=run, index=i)


def score_release(silo: int, i: int) -> ReleaseId:
    """The silo's ``i``-th score histogram."""
    return ReleaseId(SCORE_HISTOGRAM, silo, index=i)
