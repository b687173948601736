"""Arrays and settings on Flower records, and back (the wire format of a pfair deployment)."""

from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from pfair.protocol.messages import PARTS, CheckpointRelease, SiloMessage


def arrays(**named: np.ndarray) -> ArrayRecord:
    """An ArrayRecord of float64 arrays (Flower wants each value wrapped in ``Array``)."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v, dtype=np.float64)) for k, v in named.items()})


def read_arrays(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: np.asarray(v.numpy()) for k, v in record.items()}


PACKED = "packed"
PART_LENGTHS = "part-lengths"
MODEL = "model"
THETA_LENGTH = "theta-length"
#: The config entry of θ then W in a model message (``model`` names the run's model spec there).
THETA_W = "theta-w"
#: How float64 values travel as the bytes of a config entry (little-endian IEEE 754 doubles).
WIRE_FLOAT = np.dtype("<f8")


def to_bytes(values: np.ndarray) -> bytes:
    """Float64 values as the bytes of a config entry (:data:`WIRE_FLOAT`; exact, bit for bit)."""
    return np.ascontiguousarray(np.ravel(values), dtype=WIRE_FLOAT).tobytes()


def from_bytes(raw: Any, name: str) -> np.ndarray:
    """The float64 values of a config entry written by :func:`to_bytes` (raises ValueError when
    ``raw`` is not bytes of whole doubles)."""
    if not isinstance(raw, bytes) or len(raw) % WIRE_FLOAT.itemsize:
        kind = f"{len(raw)} bytes" if isinstance(raw, bytes) else type(raw).__name__
        raise ValueError(f"{name!r} holds float64 values as bytes (a multiple of 8), got {kind}")
    return np.frombuffer(raw, dtype=WIRE_FLOAT).astype(np.float64)


def model_arrays(theta: np.ndarray, w: np.ndarray) -> ArrayRecord:
    """θ and W end to end in one array (``model``), as Flower's strategy hooks pass a model
    (``configure_train``, ``aggregate_train``) inside the ServerApp."""
    return arrays(**{MODEL: np.concatenate([np.ravel(theta), np.ravel(w)])})


def model_config(theta: np.ndarray, w: np.ndarray) -> dict[str, Any]:
    """θ and W for the silos as two entries of the message's config: ``theta-w`` (θ then W, the
    bytes of :func:`to_bytes`) and ``theta-length``.

    In the config record rather than an array record: every record, array and array chunk of a
    Flower message is an object that each hop moves with an HTTP request of its own, so a message
    whose only record is its config is 3 objects instead of 6 (Message, RecordDict,
    ConfigRecord, against ArrayRecord, Array and ArrayChunk besides)."""
    return {THETA_W: to_bytes(np.concatenate([np.ravel(theta), np.ravel(w)])), THETA_LENGTH: int(np.size(theta))}


def read_model(content: RecordDict) -> tuple[np.ndarray, np.ndarray]:
    """θ and W of a message whose config holds :func:`model_config` (raises ValueError on a
    malformed one)."""
    try:
        cfg = content["config"]
        n = int(cfg[THETA_LENGTH])
        raw = cfg[THETA_W]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed model message: {exc!r}") from None
    model = from_bytes(raw, THETA_W)
    if not 0 <= n <= model.size:
        raise ValueError(f"a model message holds {THETA_W!r} (θ then W) and {THETA_LENGTH!r} within it; got "
                         f"{model.size} values and {THETA_LENGTH}={n}")
    return model[:n], model[n:]


def split_model(record: ArrayRecord, theta_length: int) -> tuple[np.ndarray, np.ndarray]:
    """θ and W of a :func:`model_arrays` record whose θ has ``theta_length`` values."""
    model = read_arrays(record)[MODEL]
    return model[:int(theta_length)], model[int(theta_length):]


#: The reply field of a refusal: the silo's reason (a typed field, never an error text to match).
REFUSED = "refused"
#: Which refusal: the exception class that decided it (``PrivacyBudgetExceeded``, ``BudgetTooSmall``).
REFUSAL_KIND = "refusal-kind"


def refusal(silo: int, exc: BaseException) -> RecordDict:
    """A silo's refusal (its budget is spent, or what is left cannot give a useful model) as a
    reply: ``meta`` holds the silo id, the reason and the kind. The server does not ask it again.
    Nothing about the silo's data is in it: the decision reads only its ledger and public settings."""
    return RecordDict({"meta": ConfigRecord({"silo": int(silo), REFUSED: f"{type(exc).__name__}: {exc}",
                                             REFUSAL_KIND: type(exc).__name__})})


def read_refusal(content: RecordDict) -> str | None:
    """The reason of a refusal reply (:func:`refusal`, or a hello's ``refused``), else None."""
    if "meta" not in content:
        return None
    meta = content["meta"]
    reason = meta[REFUSED] if REFUSED in meta else None
    return str(reason) if reason else None


def silo_message_content(msg: SiloMessage) -> RecordDict:
    """A silo's reply: exactly the five parts, the silo id and the round, in one config record.

    The parts travel end to end as the float64 bytes of one entry (``packed``,
    :func:`to_bytes`), with their lengths in ``part-lengths``: every record, array and chunk of a
    Flower message is an object moved by its own HTTP request at every hop (a reply takes three:
    ClientApp → SuperNode → SuperLink → ServerApp), and a reply of one config record is 3 objects
    (five arrays would be 13)."""
    parts = msg.to_arrays()
    flat = [np.ascontiguousarray(parts[p], dtype=np.float64).ravel() for p in PARTS]
    return RecordDict({"meta": ConfigRecord({"silo": int(msg.silo), "round": int(msg.round),
                                             PACKED: to_bytes(np.concatenate(flat)),
                                             PART_LENGTHS: [int(f.size) for f in flat]})})


def read_silo_message(content: RecordDict) -> SiloMessage:
    """Decode a reply (raises ValueError on a malformed one; the server then rejects it). Only the
    layout is checked here; the values (lengths against the model, finiteness, norms, round) are
    the server's (:meth:`pfair.protocol.ServerParty.update`)."""
    try:
        if set(content.keys()) != {"meta"}:
            raise ValueError(f"a silo reply holds one record 'meta', got {sorted(content.keys())}")
        meta = content["meta"]
        silo, rnd = int(meta["silo"]), int(meta["round"])
        raw_lengths = meta[PART_LENGTHS]
        if isinstance(raw_lengths, (str, bytes)):
            raise TypeError(f"{PART_LENGTHS!r} is a string")
        lengths = [int(v) for v in raw_lengths]
        raw = meta[PACKED]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed silo reply: {exc!r}") from None
    except ValueError as exc:
        raise ValueError(f"malformed silo reply: {exc}") from None
    packed = from_bytes(raw, PACKED)
    if len(lengths) != len(PARTS) or min(lengths) < 0 or sum(lengths) != packed.size:
        raise ValueError(f"a silo reply's {PART_LENGTHS} {lengths} do not split its {packed.size} values into the "
                         f"parts {list(PARTS)}")
    ends = np.cumsum(lengths)
    return SiloMessage.from_arrays(silo, rnd, {p: packed[end - n:end] for p, n, end in zip(PARTS, lengths, ends)})


def checkpoint_content(rel: CheckpointRelease) -> RecordDict:
    """A silo's checkpoint release (its validation table, and with a fairness target its noisy
    violation histogram), the silo id and the epoch."""
    return RecordDict({"arrays": arrays(**rel.to_arrays()),
                       "meta": ConfigRecord({"silo": int(rel.silo), "epoch": int(rel.epoch)})})


def read_checkpoint(content: RecordDict) -> CheckpointRelease:
    """Decode a checkpoint release (raises ValueError on a malformed one; the server then rejects it)."""
    try:
        arrs = read_arrays(content["arrays"])
        meta = content["meta"]
        silo, epoch = int(meta["silo"]), int(meta["epoch"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed checkpoint release: {exc!r}") from None
    return CheckpointRelease.from_arrays(silo, epoch, arrs)


def config(**values: Any) -> ConfigRecord:
    """A ConfigRecord; dicts and lists of non-scalars are sent as JSON strings."""
    out = {}
    for k, v in values.items():
        if isinstance(v, (dict, list, tuple)) or v is None:
            out[k] = json.dumps(v)
        elif isinstance(v, (np.integer,)):
            out[k] = int(v)
        elif isinstance(v, (np.floating,)):
            out[k] = float(v)
        else:
            out[k] = v
    return ConfigRecord(out)


def metrics(values: Mapping[str, float]) -> MetricRecord:
    return MetricRecord({k: float(v) for k, v in values.items()})
