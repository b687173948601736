"""A ClientApp for the fault tests: pfair's silo, except that a node whose node config has
``corrupt=1`` returns a broken reply in each round (NaN, a wrong shape, a huge norm, a stale round).
Loaded by the SuperNodes of ``tests/test_flower_faults.py`` through PYTHONPATH."""

from __future__ import annotations

import numpy as np
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from pfair.flower import client_app as real
from pfair.flower import codec

app = ClientApp()

CORRUPTIONS = ("nan", "shape", "norm", "stale")


@app.query("hello")
def hello(msg: Message, context: Context) -> Message:
    return real.hello(msg, context)


@app.query("plan")
def plan(msg: Message, context: Context) -> Message:
    return real.plan(msg, context)


@app.query("report")
def report(msg: Message, context: Context) -> Message:
    return real.report(msg, context)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    return real.evaluate(msg, context)


@app.train()
def train(msg: Message, context: Context) -> Message:
    reply = real.train(msg, context)
    if int(context.node_config.get("corrupt", 0)) != 1:
        return reply
    rnd = int(msg.content["config"]["round"])
    sm = codec.read_silo_message(reply.content)
    parts = sm.to_arrays()
    kind = CORRUPTIONS[rnd % len(CORRUPTIONS)]
    meta_round = rnd
    if kind == "nan":
        parts["psi_w"] = parts["psi_w"].copy()
        parts["psi_w"][0] = np.nan
    elif kind == "shape":
        parts["psi_theta"] = parts["psi_theta"][:-1]
    elif kind == "norm":
        parts["psi_theta"] = parts["psi_theta"] * 1e6
    else:
        meta_round = rnd - 1
    from pfair.protocol.messages import SiloMessage

    bad = SiloMessage.from_arrays(sm.silo, meta_round, parts)
    return Message(codec.silo_message_content(bad), reply_to=msg)
