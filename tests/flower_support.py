"""Shared by the Flower test files (tests/test_flower.py, tests/test_flower_faults.py): small data,
settings, and the in-process protocol run a deployment is compared with."""

from __future__ import annotations

import warnings
from functools import partial
from pathlib import Path

import numpy as np

import pfair
from pfair.exceptions import PrivacyWarning
from pfair.flower.deploy import LoopbackDeployment, descendants
from pfair.protocol.server import ServerParty, reply_limits
from pfair.protocol.simulation import Simulation

from support import toy_data

TESTS = str(Path(__file__).parent)


# The Flower tests' data: 900 records by default, dealt to the silos in turn.
data = partial(toy_data, round_robin=True)


def settings(**kw):
    base = dict(epsilon=2.0, lam=1.0, epochs=1, batch_size=150, p_s=[0.5, 0.5], seed=1)
    return pfair.SteFFLe(**{**base, **kw}).settings()


def no_flower_processes_left(dep: LoopbackDeployment) -> bool:
    return all(p.poll() is not None for p in dep.procs.values()) and not descendants([p.pid for p in dep.procs.values()])


def expected_by_parties(st, fed, answered):
    """θ, W of the same run in process, with each silo's reply used only in the rounds listed
    in ``answered[silo]`` (the others are dropped and the rest reweighted)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        sim = Simulation(st, fed, ledgers="new", fast=False)
    props = sim.group_proportions()
    for p in sim.parties:
        p.plan_rounds(props, sim.total_rounds)
    inv = sim.parties[0].inv_sqrt_ps
    limits = [reply_limits(theta_len=4, w_len=4, settings=st, plan=p.plan, inv_sqrt_ps=inv) for p in sim.parties]
    server = ServerParty(settings=st, weights=[1 / fed.n_silos] * fed.n_silos, limits=limits, block_len=4,
                         rounds_per_epoch=sim.rounds_per_epoch)
    theta, w = np.zeros(4), np.zeros(4)
    for r in range(sim.total_rounds):
        replies = [(j, p.step(theta, w, r)) for j, p in enumerate(sim.parties) if r in answered[j]]
        theta, w, _ = server.update(theta, w, replies, r)
    return theta, w, sim
