"""Arrays and settings on Flower records, and back (the wire format of a pfair deployment)."""

from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from pfair.protocol.messages import PARTS, SiloMessage, ViolationRelease


def arrays(**named: np.ndarray) -> ArrayRecord:
    """An ArrayRecord of float64 arrays (Flower wants each value wrapped in ``Array``)."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v, dtype=np.float64)) for k, v in named.items()})


def read_arrays(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: np.asarray(v.numpy()) for k, v in record.items()}


def silo_message_content(msg: SiloMessage) -> RecordDict:
    """A silo's reply: exactly the five parts, the silo id and the round."""
    return RecordDict({"parts": arrays(**msg.to_arrays()),
                       "meta": ConfigRecord({"silo": int(msg.silo), "round": int(msg.round)})})


def read_silo_message(content: RecordDict) -> SiloMessage:
    """Decode a reply (raises ValueError on a malformed one; the server then rejects it)."""
    try:
        parts = read_arrays(content["parts"])
        meta = content["meta"]
        silo, rnd = int(meta["silo"]), int(meta["round"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed silo reply: {exc!r}") from None
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise ValueError(f"unexpected parts {unknown} in a silo reply")
    return SiloMessage.from_arrays(silo, rnd, parts)


def violation_content(rel: ViolationRelease) -> RecordDict:
    """A silo's violation release (``max_violation``): its noisy histogram, the silo id and the epoch."""
    return RecordDict({"arrays": arrays(**rel.to_arrays()),
                       "meta": ConfigRecord({"silo": int(rel.silo), "epoch": int(rel.epoch)})})


def read_violation(content: RecordDict) -> ViolationRelease:
    """Decode a violation release (raises ValueError on a malformed one; the server then rejects it)."""
    try:
        arrs = read_arrays(content["arrays"])
        meta = content["meta"]
        silo, epoch = int(meta["silo"]), int(meta["epoch"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed violation release: {exc!r}") from None
    if set(arrs) != {"violation_counts"}:
        raise ValueError(f"a violation release holds exactly 'violation_counts', got {sorted(arrs)}")
    return ViolationRelease.from_arrays(silo, epoch, arrs)


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
