"""The Flower ClientApp: one silo (:class:`pfair.flower.node.SiloNode`).

Every message is handled in a fresh process by Flower; the silo's state that must persist (its
ledger and its run's noise plan) lives in its ``state-dir``, never in the run config. Its noise
keys come from its own OS entropy for every message (or its own ``noise-seed`` node config, for
reproducing a simulation). A handler decodes the message (Flower's part) and hands the silo's
part to :func:`answer`: in the node's silo host when there is one (:mod:`pfair.flower.silo_host`,
which keeps the silo's data in memory between messages), else in its own process. Message types:

``query.hello``  the p_s round: size, and the DP histogram of s when the run uses ``p_s="dp"``
``query.plan``   calibrate the noise for the run from the released proportions; reply the plan
``train``        one SteFFLe round: exactly the parts of a :class:`~pfair.protocol.SiloMessage`
``query.checkpoint`` after a checkpoint epoch: the validation table of the silo's held-out records and,
                 with ``max_violation``, its noisy (block, s, ŷ) histogram (:mod:`pfair.validation`)
``evaluate``     metrics of θ on the local test shard, if the node has one: a DP release charged to
                 its ledger, once per run (exact only where the node config opts in)
``query.report`` the ledger's public summary (budget, ε spent, runs)
``query.score_histogram`` for private post-processing: the silo's noisy (score bin, s, y) table of
                 a model's scores (θ and the bin edges from the server), charged to its ledger

A refusal for want of budget (:class:`~pfair.exceptions.PrivacyBudgetExceeded`, its subclass
:class:`~pfair.exceptions.BudgetTooSmall`) is a typed reply (:func:`pfair.flower.codec.refusal`);
any other exception (a round asked twice, a run under other terms than planned, a malformed
message) is returned by Flower to the server as an error reply.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

import numpy as np
from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp

from pfair.exceptions import PrivacyBudgetExceeded
from pfair.flower import codec, silo_host
from pfair.flower.models import parse_model_spec
from pfair.flower.node import SiloNode, settings_from_run_config

app = ClientApp()


def _settings(cfg: dict):
    return settings_from_run_config({"settings": cfg["settings"]})


def _node(node_config: dict, cfg: dict, nodes: silo_host.NodeCache | None) -> SiloNode:
    model = parse_model_spec(cfg["model"]) if "model" in cfg else None
    kw = dict(n_groups=int(cfg["n-groups"]), n_classes=int(cfg["n-classes"]), model=model)
    return nodes.get(node_config, **kw) if nodes is not None else SiloNode(node_config, **kw)


def answer(kind: str, node: SiloNode, cfg: dict, inputs: dict[str, Any]) -> Any:
    """The silo's part of a message of ``kind`` (its config ``cfg``, its decoded arrays
    ``inputs``): what :data:`REPLIES` turns into the reply. Runs in the silo host or in the
    ClientApp's process, the same code on the same inputs."""
    if kind == "hello":
        out = node.hello(_settings(cfg))
        meta = dict(silo=node.silo_id, n_records=out["n_records"], n_features=out["n_features"])
        if "refused" in out:  # what is left of its budget cannot give a useful model: it takes no part
            meta[codec.REFUSED] = out["refused"]
        return meta, out.get("histogram")
    if kind == "plan":
        return node.silo_id, node.plan(_settings(cfg), inputs["proportions"], int(cfg["total-rounds"]),
                                       str(cfg["run-id"]))
    if kind == "train":
        return node.train(_settings(cfg), str(cfg["run-id"]), int(cfg["round"]), inputs["theta"], inputs["w"])
    if kind == "checkpoint":
        return node.checkpoint(_settings(cfg), str(cfg["run-id"]), int(cfg["epoch"]), inputs["theta"])
    if kind == "evaluate":
        return node.evaluate(_settings(cfg), str(cfg["run-id"]), np.asarray(inputs["theta"]))
    if kind == "report":
        return node.silo_id, node.report()
    if kind == "score_histogram":
        return node.silo_id, node.score_histogram(inputs["theta"], inputs["edges"], float(cfg["epsilon"]))
    raise ValueError(f"no silo answer for a message of kind {kind!r}")


def host_handler() -> Callable[[Any], Any]:
    """What a silo host answers a request with: :func:`answer_request` over one
    :class:`~pfair.flower.silo_host.NodeCache` kept for the host's life (given to
    :func:`pfair.flower.silo_host.start` by the warm process, so that the host module does not
    import this one)."""
    cache = silo_host.NodeCache()
    return lambda request: answer_request(request, cache)


def answer_request(request: tuple, nodes: silo_host.NodeCache | None = None) -> Any:
    """:func:`answer` of a request ``(kind, node_config, cfg, inputs)`` (what a ClientApp sends its
    silo host), with the node from ``nodes`` when given."""
    kind, node_config, cfg, inputs = request
    return answer(kind, _node(node_config, cfg, nodes), cfg, inputs)


def _hello_reply(result: Any) -> RecordDict:
    meta, histogram = result
    content = RecordDict({"meta": codec.config(**meta)})
    if histogram is not None:
        content["arrays"] = codec.arrays(histogram=histogram)
    return content


def _score_reply(result: Any) -> RecordDict:
    silo, out = result
    return RecordDict({"meta": codec.config(silo=silo, n_records=out["n_records"],
                                            noise_multiplier=out["noise_multiplier"]),
                       "arrays": codec.arrays(histogram=out["histogram"])})


#: How the result of :func:`answer` of each kind becomes a reply's content.
REPLIES: dict[str, Callable[[Any], RecordDict]] = {
    "hello": _hello_reply,
    "plan": lambda r: RecordDict({"meta": codec.config(silo=r[0], plan=json.dumps(r[1]))}),
    "train": codec.silo_message_content,
    "checkpoint": codec.checkpoint_content,
    "evaluate": lambda r: RecordDict({"metrics": codec.metrics(r)}),
    "report": lambda r: RecordDict({"meta": codec.config(silo=r[0], report=json.dumps(r[1]))}),
    "score_histogram": _score_reply,
}


def _inputs(kind: str, msg: Message) -> dict[str, Any]:
    """The arrays of a message of ``kind``, decoded (a malformed one raises here: an error reply)."""
    if kind in ("train", "evaluate"):
        theta, w = codec.read_model(msg.content)
        return {"theta": theta, "w": w}
    if kind in ("plan", "checkpoint", "score_histogram"):
        return codec.read_arrays(msg.content["arrays"])
    return {}


def handle(kind: str, msg: Message, context: Context) -> Message:
    """A message of ``kind``: decoded here, answered by the silo host (or here, without one), the
    reply built here. A refusal for want of budget is a typed reply (:func:`codec.refusal`)."""
    cfg = dict(msg.content["config"])
    node_config = dict(context.node_config)
    request = (kind, node_config, cfg, _inputs(kind, msg))
    try:
        host = os.environ.get(silo_host.HOST_ENV, "")
        try:
            if not host or host == "0":
                raise silo_host.HostUnavailable("no silo host")
            result = silo_host.ask(host, request)
        except silo_host.HostUnavailable:
            result = answer_request(request)
    except PrivacyBudgetExceeded as exc:
        return Message(codec.refusal(int(node_config.get("silo-id", -1)), exc), reply_to=msg)
    return Message(REPLIES[kind](result), reply_to=msg)


@app.query("hello")
def hello(msg: Message, context: Context) -> Message:
    return handle("hello", msg, context)


@app.query("plan")
def plan(msg: Message, context: Context) -> Message:
    return handle("plan", msg, context)


@app.train()
def train(msg: Message, context: Context) -> Message:
    return handle("train", msg, context)


@app.query("checkpoint")
def checkpoint(msg: Message, context: Context) -> Message:
    return handle("checkpoint", msg, context)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    return handle("evaluate", msg, context)


@app.query("report")
def report(msg: Message, context: Context) -> Message:
    return handle("report", msg, context)


@app.query("score_histogram")
def score_histogram(msg: Message, context: Context) -> Message:
    return handle("score_histogram", msg, context)
