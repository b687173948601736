"""pfair.flower.silo_host: a SuperNode's silo data kept in memory between messages. The cache must
answer exactly as a fresh ClientApp does, re-read a shard that changed, keep one node config's
silo apart from another's, and leave the ledger and the noise keys to every message."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

pytest.importorskip("flwr", reason="the flower extra is not installed (pip install 'pfair[flower]')")

import pfair  # noqa: E402
from pfair.flower import client_app, silo_host  # noqa: E402
from pfair.privacy.ledger import PrivacyLedger  # noqa: E402

from support import toy_data  # noqa: E402

N = 400
SETTINGS = json.dumps(dict(epsilon=2.0, lam=1.0, epochs=2, batch_size=50, p_s=[0.5, 0.5], seed=1))
CFG = {"settings": SETTINGS, "n-groups": 2, "n-classes": 2, "model": "", "run-id": "r1"}


def _config(tmp_path, name, **extra):
    X, y, s, _ = toy_data(n=N)
    shard = pfair.datasets.write_shard(tmp_path / f"{name}.csv", X, y, s)
    return {"data-path": str(shard), "state-dir": str(tmp_path / f"{name}-state"), "silo-id": 0, "epsilon": 2.0,
            "n-groups": 2, "n-classes": 2, "noise-seed": 3, "ledger-anchor": str(tmp_path / f"{name}.anchor"),
            **extra}


def _run(config, nodes, rounds=2):
    """hello, plan and ``rounds`` train messages as a ClientApp sends them; the train replies."""
    ask = lambda kind, cfg, inputs: client_app.answer_request((kind, config, cfg, inputs), nodes)  # noqa: E731
    ask("hello", CFG, {})
    ask("plan", CFG | {"total-rounds": 2 * (N // 50)}, {"proportions": np.array([[0.5, 0.5]])})
    return [ask("train", CFG | {"round": r}, {"theta": np.full(4, 0.1), "w": np.full(4, 0.2)}) for r in range(rounds)]


def test_a_cached_silo_answers_bit_for_bit_as_a_fresh_one_and_reads_its_shard_once(tmp_path):
    cached_cfg, fresh_cfg = _config(tmp_path, "a"), _config(tmp_path, "b")
    nodes = silo_host.NodeCache()
    cached = _run(cached_cfg, nodes, rounds=3)
    fresh = _run(fresh_cfg, None, rounds=3)  # a new SiloNode (shard read) for every message
    assert nodes.built == 1  # five messages, one read of the shard
    for a, b in zip(cached, fresh):
        for part, value in a.to_arrays().items():
            np.testing.assert_array_equal(value, b.to_arrays()[part])
    # The ledger stays on disk, charged by every message as without a cache.
    for cfg in (cached_cfg, fresh_cfg):
        ledger = PrivacyLedger.load(os.path.join(cfg["state-dir"], "ledger.json"))
        assert ledger.next_round("r1") == 3
    assert PrivacyLedger.load(os.path.join(cached_cfg["state-dir"], "ledger.json")).to_dict()["events"] == \
        PrivacyLedger.load(os.path.join(fresh_cfg["state-dir"], "ledger.json")).to_dict()["events"]


def test_a_changed_shard_or_another_node_config_is_a_new_silo(tmp_path):
    cfg = _config(tmp_path, "a")
    nodes = silo_host.NodeCache()
    first = nodes.get(cfg, n_groups=2, n_classes=2)
    assert nodes.get(dict(cfg), n_groups=2, n_classes=2) is first and nodes.built == 1
    # Another budget, another state directory: another silo.
    assert nodes.get(cfg | {"epsilon": 1.0}, n_groups=2, n_classes=2) is not first and nodes.built == 2
    # The same path rewritten with other records: read again (and its ledger, bound to the old
    # records' fingerprint, now refuses it).
    X, y, s, _ = toy_data(n=N, seed=7)
    tmp = tmp_path / "other.csv"
    pfair.datasets.write_shard(tmp, X, y, s)
    shutil.move(str(tmp), cfg["data-path"])
    again = nodes.get(cfg, n_groups=2, n_classes=2)
    assert again is not first and nodes.built == 3
    np.testing.assert_array_equal(again.X, X)


def _echo_or_refuse(request):
    if request == "refuse":
        from pfair.exceptions import PrivacyBudgetExceeded

        raise PrivacyBudgetExceeded("silo 0: nothing is left")
    return os.getpid(), request


def test_the_host_answers_over_its_socket_and_a_clientapp_answers_itself_without_it(tmp_path, monkeypatch):
    from pfair.exceptions import PrivacyBudgetExceeded

    monkeypatch.delenv(silo_host.HOST_ENV, raising=False)
    path = silo_host.start(handle=_echo_or_refuse)
    try:
        assert os.environ[silo_host.HOST_ENV] == path
        assert oct(os.stat(os.path.dirname(path)).st_mode)[-3:] == "700"  # the node's user only
        pid, echoed = silo_host.ask(path, ("x", {"a": np.arange(3)}))
        assert pid != os.getpid() and echoed[0] == "x"
        np.testing.assert_array_equal(echoed[1]["a"], np.arange(3))
        # An exception in the host is raised in the ClientApp, as it would have been raised there.
        with pytest.raises(PrivacyBudgetExceeded, match="nothing is left"):
            silo_host.ask(path, "refuse")
    finally:
        silo_host.stop()
    assert silo_host.HOST_ENV not in os.environ and not os.path.exists(path)  # ended, its socket removed
    with pytest.raises(silo_host.HostUnavailable):
        silo_host.ask(str(tmp_path / "no-such-socket"), ("x",))
    monkeypatch.setenv(silo_host.HOST_ENV, "0")
    assert silo_host.start() is None


def test_a_killed_hosts_socket_directory_is_removed_by_the_next_host(tmp_path):
    """A host killed with SIGKILL leaves its socket directory; the next host's start removes the
    directories no host listens on, and leaves a live one alone."""
    import socket

    dead = tmp_path / (silo_host.PREFIX + "dead")
    dead.mkdir()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(dead / "socket"))
    s.close()  # bound, never listening again: what a killed host leaves
    live = tmp_path / (silo_host.PREFIX + "live")
    live.mkdir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(live / "socket"))
    listener.listen(1)
    try:
        assert silo_host.remove_stale(str(tmp_path)) == []  # too young: a host may be starting there
        assert silo_host.remove_stale(str(tmp_path), min_age=0) == [str(dead)]
        assert not dead.exists() and live.exists()
    finally:
        listener.close()
