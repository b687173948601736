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


def model_arrays(theta: np.ndarray, w: np.ndarray) -> ArrayRecord:
    """θ and W for the silos, end to end in one array (``model``; the length of θ goes in the
    message's config as ``theta-length``, :func:`model_config`): one Flower array instead of two,
    two objects fewer at each hop."""
    return arrays(**{MODEL: np.concatenate([np.ravel(theta), np.ravel(w)])})


def model_config(theta: np.ndarray) -> dict[str, int]:
    """The config entry that splits :func:`model_arrays` back into θ and W."""
    return {THETA_LENGTH: int(np.size(theta))}


def read_model(content: RecordDict) -> tuple[np.ndarray, np.ndarray]:
    """θ and W of a message built with :func:`model_arrays` and :func:`model_config` (raises
    ValueError on a malformed one)."""
    try:
        record = read_arrays(content["arrays"])
        n = int(content["config"][THETA_LENGTH])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed model message: {exc!r}") from None
    model = record.get(MODEL)
    if set(record) != {MODEL} or model is None or model.ndim != 1 or not 0 <= n <= model.size:
        raise ValueError(f"a model message holds one array {MODEL!r} (θ then W) and {THETA_LENGTH!r} within it; got "
                         f"arrays {sorted(record)} and {THETA_LENGTH}={n}")
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
    """A silo's reply: exactly the five parts, the silo id and the round.

    The parts travel end to end in one float64 array (``packed``), with their lengths in the
    ``meta`` record (``part-lengths``): every array of a Flower message is two objects, each
    moved by its own HTTP request at every hop, so one array instead of five saves 8 requests a
    hop (a reply takes three hops: ClientApp → SuperNode → SuperLink → ServerApp)."""
    parts = msg.to_arrays()
    flat = [np.ascontiguousarray(parts[p], dtype=np.float64).ravel() for p in PARTS]
    return RecordDict({"parts": arrays(**{PACKED: np.concatenate(flat)}),
                       "meta": ConfigRecord({"silo": int(msg.silo), "round": int(msg.round),
                                             PART_LENGTHS: [int(f.size) for f in flat]})})


def read_silo_message(content: RecordDict) -> SiloMessage:
    """Decode a reply (raises ValueError on a malformed one; the server then rejects it). Only the
    layout is checked here; the values (lengths against the model, finiteness, norms, round) are
    the server's (:meth:`pfair.protocol.ServerParty.update`)."""
    try:
        packed_record = read_arrays(content["parts"])
        meta = content["meta"]
        silo, rnd = int(meta["silo"]), int(meta["round"])
        raw_lengths = meta[PART_LENGTHS]
        if isinstance(raw_lengths, (str, bytes)):
            raise TypeError(f"{PART_LENGTHS!r} is a string")
        lengths = [int(v) for v in raw_lengths]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed silo reply: {exc!r}") from None
    if set(packed_record) != {PACKED}:
        raise ValueError(f"a silo reply holds one array {PACKED!r} (its parts end to end), got {sorted(packed_record)}")
    packed = packed_record[PACKED]
    if packed.ndim != 1 or len(lengths) != len(PARTS) or min(lengths) < 0 or sum(lengths) != packed.size:
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
