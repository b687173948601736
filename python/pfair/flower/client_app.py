"""The Flower ClientApp: one silo (:class:`pfair.flower.node.SiloNode`).

Every message is handled in a fresh process by Flower; the silo's state that must persist (its
ledger and its run's noise plan) lives in its ``state-dir``, never in the run config. Its noise
keys come from its own OS entropy for every message (or its own ``noise-seed`` node config, for
reproducing a simulation). Message types:

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

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from pfair.exceptions import PrivacyBudgetExceeded
from pfair.flower import codec
from pfair.flower.node import SiloNode, settings_from_run_config

app = ClientApp()


def _refusing(handler):
    """Answer a refusal for want of budget as a typed reply (:func:`pfair.flower.codec.refusal`)."""
    import functools

    @functools.wraps(handler)
    def wrapped(msg: Message, context: Context) -> Message:
        try:
            return handler(msg, context)
        except PrivacyBudgetExceeded as exc:
            return Message(codec.refusal(int(context.node_config.get("silo-id", -1)), exc), reply_to=msg)

    return wrapped


def _node(msg: Message, context: Context) -> tuple[SiloNode, ConfigRecord]:
    from pfair.flower.models import parse_model_spec

    cfg = msg.content["config"]
    model = parse_model_spec(cfg["model"]) if "model" in cfg else None
    node = SiloNode(context.node_config, n_groups=int(cfg["n-groups"]), n_classes=int(cfg["n-classes"]), model=model)
    return node, cfg


def _settings(cfg: ConfigRecord):
    return settings_from_run_config({"settings": cfg["settings"]})


@app.query("hello")
def hello(msg: Message, context: Context) -> Message:
    node, cfg = _node(msg, context)
    out = node.hello(_settings(cfg))
    meta = dict(silo=node.silo_id, n_records=out["n_records"], n_features=out["n_features"])
    if "refused" in out:  # what is left of its budget cannot give a useful model: it takes no part
        meta[codec.REFUSED] = out["refused"]
    content = RecordDict({"meta": codec.config(**meta)})
    if "histogram" in out:
        content["arrays"] = codec.arrays(histogram=out["histogram"])
    return Message(content, reply_to=msg)


@app.query("plan")
@_refusing
def plan(msg: Message, context: Context) -> Message:
    node, cfg = _node(msg, context)
    proportions = codec.read_arrays(msg.content["arrays"])["proportions"]
    result = node.plan(_settings(cfg), proportions, int(cfg["total-rounds"]), str(cfg["run-id"]))
    return Message(RecordDict({"meta": codec.config(silo=node.silo_id, plan=json.dumps(result))}), reply_to=msg)


@app.train()
@_refusing
def train(msg: Message, context: Context) -> Message:
    node, cfg = _node(msg, context)
    theta, w = codec.read_model(msg.content)
    reply = node.train(_settings(cfg), str(cfg["run-id"]), int(cfg["round"]), theta, w)
    return Message(codec.silo_message_content(reply), reply_to=msg)


@app.query("checkpoint")
@_refusing
def checkpoint(msg: Message, context: Context) -> Message:
    node, cfg = _node(msg, context)
    theta = codec.read_arrays(msg.content["arrays"])["theta"]
    reply = node.checkpoint(_settings(cfg), str(cfg["run-id"]), int(cfg["epoch"]), theta)
    return Message(codec.checkpoint_content(reply), reply_to=msg)


@app.evaluate()
@_refusing
def evaluate(msg: Message, context: Context) -> Message:
    node, cfg = _node(msg, context)
    theta, _ = codec.read_model(msg.content)
    out = node.evaluate(_settings(cfg), str(cfg["run-id"]), np.asarray(theta))
    return Message(RecordDict({"metrics": codec.metrics(out)}), reply_to=msg)


@app.query("report")
def report(msg: Message, context: Context) -> Message:
    node, _ = _node(msg, context)
    return Message(RecordDict({"meta": codec.config(silo=node.silo_id, report=json.dumps(node.report()))}),
                   reply_to=msg)


@app.query("score_histogram")
@_refusing
def score_histogram(msg: Message, context: Context) -> Message:
    node, cfg = _node(msg, context)
    sent = codec.read_arrays(msg.content["arrays"])
    out = node.score_histogram(sent["theta"], sent["edges"], float(cfg["epsilon"]))
    content = RecordDict({"meta": codec.config(silo=node.silo_id, n_records=out["n_records"],
                                               noise_multiplier=out["noise_multiplier"]),
                          "arrays": codec.arrays(histogram=out["histogram"])})
    return Message(content, reply_to=msg)
