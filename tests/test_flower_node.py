"""A hostile server against one deployed silo, without the transport: the methods of
:class:`pfair.flower.node.SiloNode` are what the Flower ClientApp runs for each message, with the
settings the server sends in that message. A run's noise plan is made for the settings of its
plan round; a message of the run under any other settings must be refused before anything is
computed or charged (otherwise: noise-free ψ parts after a λ = 0 plan, a raised clip norm under
the planned noise, or a batch seed chosen per round so that one record is in every batch)."""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest

import pfair
from pfair.exceptions import LedgerConflict, PrivacyWarning, ReplayRefused, SettingsMismatch
from pfair.flower.node import PLAN_FILE, SiloNode, settings_from_run_config
from pfair.privacy.ledger import PrivacyLedger
from pfair.protocol.messages import SiloMessage
from pfair.protocol.silo import SiloParty
from pfair.providers.linear import LinearProvider
from pfair import _core

from support import toy_data

N = 400


@pytest.fixture
def node_config(tmp_path):
    X, y, s, _ = toy_data(n=N)
    shard = pfair.datasets.write_shard(tmp_path / "silo0.csv", X, y, s)
    return {"data-path": str(shard), "state-dir": str(tmp_path / "state"), "silo-id": 0, "epsilon": 2.0,
            "n-groups": 2, "n-classes": 2}


def run_settings(**kw):
    # A fixed clip (the adaptive default would send h_θ = 0 at this module's W, whose rows are
    # equal; the adaptive clip has its own test below).
    base = dict(epsilon=2.0, lam=1.0, epochs=2, batch_size=50, p_s=[0.5, 0.5], seed=1, clip=0.25)
    return settings_from_run_config({"settings": json.dumps(base | kw)})


def node(config):
    return SiloNode(config, n_groups=2, n_classes=2)


PROPS = np.array([[0.5, 0.5]])
ROUNDS = 2 * (N // 50)
THETA, W = np.full(4, 0.1), np.full(4, 0.2)


def spent(config):
    return node(config).ledger().epsilon_spent()


def next_round(config, run_id):
    return node(config).ledger().next_round(run_id)


def test_a_run_answers_under_its_planned_settings_and_replans_to_the_same_plan(node_config):
    st = run_settings()
    plan = node(node_config).plan(st, PROPS, ROUNDS, "run-a")
    assert plan["noise_multiplier"] < np.inf and plan["sigma_theta"] > 0
    assert node(node_config).plan(st, PROPS, ROUNDS, "run-a") == plan  # a lost plan reply, asked again
    before = spent(node_config)
    msg = node(node_config).train(st, "run-a", 0, THETA, W)
    assert np.all(np.isfinite(msg.psi_theta)) and np.any(msg.psi_theta != 0)
    assert spent(node_config) > before  # charged


@pytest.mark.parametrize("changed", [
    {"lam": 0.0},                                  # planned with ψ parts noised, asked without
    {"clip": 1e6}, {"clip_w": 1e6},                # larger sensitivity under the planned noise
    {"clip": "adaptive"},                          # a clip per round under noise planned for 0.25
    {"sampling": "full_batch"},                    # every record in every round
    {"batch_size": 10},                            # another sample rate and divisor
    {"protect": "record"},                         # another mechanism altogether
    {"seed": 2},                                   # the server choosing each round's batch
    {"fairness": "equalized_odds", "p_s": [[0.5, 0.5], [0.5, 0.5]]},
    {"epsilon": 1.9},
])
def test_a_round_under_other_settings_than_planned_is_refused_before_any_charge(node_config, changed):
    node(node_config).plan(run_settings(), PROPS, ROUNDS, "run-a")
    node(node_config).train(run_settings(), "run-a", 0, THETA, W)
    before = spent(node_config)
    assert next_round(node_config, "run-a") == 1
    with pytest.raises(SettingsMismatch, match="differ: settings"):
        node(node_config).train(run_settings(**changed), "run-a", 1, THETA, W)
    assert spent(node_config) == before and next_round(node_config, "run-a") == 1
    # The planned settings still get round 1: the refusal charged and recorded nothing.
    node(node_config).train(run_settings(), "run-a", 1, THETA, W)
    assert next_round(node_config, "run-a") == 2


def test_a_run_with_an_adaptive_clip_plans_per_unit_clip_and_answers_with_its_batch_clip(node_config):
    # clip="adaptive" in the run config: the node plans per unit of clip norm (the plan of a clip of
    # 1) and answers each round with the clip of its batch.
    st = run_settings(clip="adaptive")
    assert st.adaptive_clip
    unit = node(node_config).plan(run_settings(clip=1.0), PROPS, ROUNDS, "run-u")
    plan = node(node_config).plan(st, PROPS, ROUNDS, "run-c")
    assert plan["sigma_theta"] == unit["sigma_theta"] and plan["noise_multiplier"] == unit["noise_multiplier"]
    # (At the module's W, whose rows are equal, every b_i is 0: the clip and its noise are 0.)
    assert not np.any(node(node_config).train(st, "run-c", 0, THETA, W).psi_theta)
    msg = node(node_config).train(st, "run-c", 1, THETA, np.array([0.3, -0.2, -0.1, 0.4]))
    assert np.all(np.isfinite(msg.psi_theta)) and np.any(msg.psi_theta != 0)
    # Planned adaptive, asked with the fixed clip: refused like any other change.
    with pytest.raises(SettingsMismatch, match="settings.clip"):
        node(node_config).train(run_settings(clip=0.25), "run-c", 2, THETA, W)


def test_a_lambda_zero_plan_never_turns_into_noise_free_psi_parts(node_config):
    # λ = 0: nothing depends on s, so the plan has no noise and the ledger charges nothing...
    plan = node(node_config).plan(run_settings(lam=0.0), PROPS, ROUNDS, "run-z")
    assert plan["noise_multiplier"] == np.inf and plan["sigma_theta"] == 0.0
    msg = node(node_config).train(run_settings(lam=0.0), "run-z", 0, THETA, W)
    assert not np.any(msg.psi_theta) and not np.any(msg.psi_w)
    # ... and the exact ψ parts it would then send are refused.
    with pytest.raises(SettingsMismatch, match="settings.lam"):
        node(node_config).train(run_settings(lam=1.0), "run-z", 1, THETA, W)
    assert spent(node_config) == 0.0


def test_a_replan_under_other_settings_or_rounds_is_refused(node_config):
    node(node_config).plan(run_settings(), PROPS, ROUNDS, "run-a")
    with pytest.raises(SettingsMismatch, match="settings.clip"):
        node(node_config).plan(run_settings(clip=2.0), PROPS, ROUNDS, "run-a")
    with pytest.raises(SettingsMismatch, match="rounds"):
        node(node_config).plan(run_settings(), PROPS, 10 * ROUNDS, "run-a")
    with pytest.raises(SettingsMismatch, match="n-groups=3"):
        SiloNode(node_config, n_groups=3, n_classes=2).train(run_settings(), "run-a", 0, THETA, W)


def test_a_plan_saved_without_its_settings_is_not_trusted(node_config, tmp_path):
    node(node_config).plan(run_settings(), PROPS, ROUNDS, "run-a")
    path = tmp_path / "state" / PLAN_FILE
    saved = json.loads(path.read_text())
    del saved["terms"]
    path.write_text(json.dumps(saved))
    with pytest.raises(SettingsMismatch, match="older pfair"):
        node(node_config).train(run_settings(), "run-a", 0, THETA, W)


def test_a_noise_seed_serves_one_run(node_config):
    seeded = node_config | {"noise-seed": 7}
    node(seeded).plan(run_settings(), PROPS, ROUNDS, "run-a")
    node(seeded).plan(run_settings(), PROPS, ROUNDS, "run-a")  # the same run: its saved plan
    node(seeded).train(run_settings(), "run-a", 0, THETA, W)
    # A second run would draw the same noise under other σ's: two replies of round 0 with known
    # σ's would give the exact gradient, (σ_b·a − σ_a·b) / (σ_b − σ_a).
    with pytest.raises(SettingsMismatch, match="noise-seed"):
        node(seeded).plan(run_settings(epsilon=1.0), PROPS, ROUNDS, "run-b")
    # Without a seed, every message has fresh secret noise, and a second run is planned.
    fresh = node_config | {"state-dir": node_config["state-dir"] + "-unseeded"}
    node(fresh).plan(run_settings(epsilon=1.0), PROPS, ROUNDS, "run-a")
    node(fresh).plan(run_settings(epsilon=1.0), PROPS, ROUNDS, "run-b")


def test_a_party_refuses_a_plan_made_for_other_settings():
    rng = np.random.default_rng(1)
    X, y, s = rng.normal(size=(N, 3)), rng.integers(0, 2, N), rng.integers(0, 2, N)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        base = pfair.SteFFLe(epsilon=2.0, lam=1.0, epochs=2, batch_size=50, p_s=[0.5, 0.5], clip=0.25).settings()

    def party(st):
        silo_set = _core.SiloSet([(X, y, s)], n_groups=2, n_classes=2)
        return SiloParty(silo_id=0, y=y, s=s, settings=st, provider=LinearProvider(silo_set, 0, None),
                         ledger=PrivacyLedger(epsilon=2.0, delta=st.delta_for(N), silo=0), n_groups=2,
                         n_classes=2)

    plan = party(base).plan_rounds(PROPS, ROUNDS)
    party(base).adopt(plan, PROPS)  # the same settings: adopted
    for changed in ({"lam": 0.0}, {"clip": 5.0}, {"batch_size": 25}, {"sampling": "poisson"}, {"protect": "record"}):
        with pytest.raises(SettingsMismatch, match="noise plan was made for other settings"):
            party(dataclasses.replace(base, **changed)).adopt(plan, PROPS)
    with pytest.raises(SettingsMismatch, match="sensitivity_w"):
        party(base).adopt(plan, np.array([[0.1, 0.9]]))  # other proportions: other ψ sensitivities


def test_a_record_protection_run_keeps_one_secret_batch_key_across_messages(node_config, tmp_path):
    # Each message is a new process. The rounds of a shuffled epoch must still be slices of one
    # permutation (each record in one batch an epoch, as the ledger charges), under a key that is
    # the silo's own secret: drawn at the plan round and kept in its state, never sent. (Nothing
    # held out, so that the silo trains on all its N records.)
    st = run_settings(protect="record", validation_share=0.0)
    plan = node(node_config).plan(st, PROPS, ROUNDS, "run-r")
    saved = json.loads((tmp_path / "state" / PLAN_FILE).read_text())
    assert len(bytes.fromhex(saved["batch_key"])) == 32 and saved["batch_key"] not in json.dumps(plan)
    assert (tmp_path / "state" / PLAN_FILE).stat().st_mode & 0o077 == 0
    per_epoch = N // 50
    for epoch in range(2):
        batches = [node(node_config)._planned_party(st, "run-r").draw_batch(r)
                   for r in range(epoch * per_epoch, (epoch + 1) * per_epoch)]
        assert sorted(np.concatenate(batches).tolist()) == list(range(N)), epoch
    # Another run gets another key: its permutations are not the first run's.
    other = tmp_path / "other"
    cfg = node_config | {"state-dir": str(other)}
    node(cfg).plan(st, PROPS, ROUNDS, "run-r")
    assert json.loads((other / PLAN_FILE).read_text())["batch_key"] != saved["batch_key"]
    assert not np.array_equal(node(cfg)._planned_party(st, "run-r").draw_batch(0),
                              node(node_config)._planned_party(st, "run-r").draw_batch(0))


@pytest.mark.parametrize("protect", ["attribute", "record"])
def test_a_hostile_theta_or_w_gets_a_finite_reply_that_does_not_show_s(node_config, tmp_path, protect):
    # θ of 1e308 on a feature overflows the logits of the records that have it; W of 1e308 the
    # ψ gradients. A NaN in the s-dependent parts would sit in the row of the record's group.
    st = run_settings(protect=protect)
    node(node_config).plan(st, PROPS, ROUNDS, "run-h")
    for r, (theta, w) in enumerate([(np.array([1e308, 0.0, 0.0, 0.0]), W), (THETA, np.full(4, 1e308)),
                                    (np.array([1e308, -1e308, 1e308, 0.0]), np.array([1e308, 0.2, 0.2, 0.2]))]):
        try:
            msg = node(node_config).train(st, "run-h", r, theta, w)
        except FloatingPointError:
            # Only a part sent exactly may overflow (attribute mode), which s does not enter.
            assert protect == "attribute"
            continue
        for part in (msg.psi_theta, msg.psi_w, msg.loss_grad):
            assert np.all(np.isfinite(part))


def test_hidden_batches_of_a_record_run_come_from_the_silos_kept_secret(node_config, tmp_path):
    # A record-mode run's batches are hidden: not from the server's seed, and the same permutation
    # in every message of the run (each message is a new process).
    st = run_settings(protect="record", sampling="shuffle")
    node(node_config).plan(st, PROPS, ROUNDS, "run-w")
    assert len(bytes.fromhex(json.loads((tmp_path / "state" / PLAN_FILE).read_text())["batch_key"])) == 32
    a, b = (node(node_config)._planned_party(st, "run-w") for _ in range(2))
    assert a.keys.batch.is_secret and np.array_equal(a.draw_batch(3), b.draw_batch(3))
    public = _core.draw_batch(a.config, N, key=_core.NoiseKey.seeded(1), silo=0, round=3)
    assert not np.array_equal(a.draw_batch(3), public)  # not the batch the run config's seed gives


def test_one_charge_buys_one_reply_when_messages_of_a_round_race(node_config):
    # Flower may run a node's messages in parallel processes. Two that load the ledger before
    # either charges would both pass the replay check: two independent noisy replies of one round
    # for one charge (c of them divide the noise by sqrt(c)).
    st = run_settings()
    node(node_config).plan(st, PROPS, ROUNDS, "run-a")
    first, second = (node(node_config)._planned_party(st, "run-a") for _ in range(2))
    events = len(node(node_config).ledger().events)
    first.step(THETA, W, 0)
    with pytest.raises(LedgerConflict, match="changed since this ledger read it"):
        second.step(THETA, W, 0)  # its charge would have erased the first one's
    ledger = node(node_config).ledger()
    assert ledger.next_round("run-a") == 1 and len(ledger.events) == events + 1
    # Whole messages at once: the node's lock lets one through; the others then find the round
    # answered.
    import threading

    barrier, out = threading.Barrier(5), []

    def ask():
        n = node(node_config)
        barrier.wait()
        try:
            out.append(n.train(st, "run-a", 1, THETA, W))
        except Exception as exc:  # noqa: BLE001 - the test sorts them
            out.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(5)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert sum(isinstance(o, SiloMessage) for o in out) == 1
    assert sum(isinstance(o, ReplayRefused) for o in out) == 4
    assert node(node_config).ledger().next_round("run-a") == 2


def _shard_config(tmp_path, s, name, **extra):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(len(s), 3))
    y = (rng.random(len(s)) > 0.5).astype(int)
    shard = pfair.datasets.write_shard(tmp_path / f"{name}.csv", X, y, np.asarray(s))
    return {"data-path": str(shard), "state-dir": str(tmp_path / f"{name}-state"), "silo-id": 0, "epsilon": 2.0,
            "n-classes": 2} | extra


def test_the_numbers_of_groups_and_classes_are_the_silo_s_own(tmp_path):
    # They used to come from the server with every message, and reading the shard refused codes
    # at or past them: a free, repeatable probe of max(s) (or max(y)) that tells apart two
    # neighbours whose one record has s = 1 or s = 2.
    s = np.zeros(60, dtype=int)
    s[:20] = 1
    answers = []
    for target in (1, 2):
        s[0] = target
        cfg = _shard_config(tmp_path, s, f"t{target}", **{"n-groups": 3})
        SiloNode(cfg, n_groups=3, n_classes=2).report()  # the federation's numbers: answered
        for said in ({"n_groups": 2, "n_classes": 2}, {"n_groups": 3, "n_classes": 3}):
            with pytest.raises(SettingsMismatch) as info:
                SiloNode(cfg, **said).report()
            answers.append(str(info.value))
        assert SiloNode(cfg).report()["epsilon_spent"] == 0.0
    assert answers[:2] == answers[2:]  # the same refusal for both neighbours
    # Refused before the shard is read; and a node config without them names the key.
    missing = _shard_config(tmp_path, s, "gone", **{"n-groups": 3}) | {"data-path": str(tmp_path / "none.csv")}
    with pytest.raises(SettingsMismatch, match="n-groups=2"):
        SiloNode(missing, n_groups=2, n_classes=2)
    with pytest.raises(ValueError, match="no 'n-groups'"):
        SiloNode({k: v for k, v in missing.items() if k != "n-groups"}, n_groups=3, n_classes=2)


def test_proportions_of_another_shape_than_the_silo_s_are_refused(tmp_path):
    # One block of 4 groups, sent as 2 x 2: the sensitivity would come from rows of 2 groups
    # while the kernel reads 4 (a Delta_W up to sqrt(2) too small).
    cfg = _shard_config(tmp_path, np.arange(400) % 4, "four", **{"n-groups": 4})
    st = run_settings(p_s=[0.25] * 4)
    with pytest.raises(SettingsMismatch, match=r"shape \(2, 2\), not \(1, 4\)"):
        SiloNode(cfg).plan(st, np.array([[0.01, 1e6], [0.01, 1e6]]), ROUNDS, "run-x")
    assert not (tmp_path / "four-state" / PLAN_FILE).exists()
    SiloNode(cfg).plan(st, np.array([[0.01, 1e6, 0.01, 1e6]]), ROUNDS, "run-x")


def test_a_noise_seed_releases_one_histogram(node_config):
    # Every histogram of one seed has the same noise: a demographic parity histogram and the two
    # equal opportunity ones, at epsilons the server picks, solve for the noise and the exact
    # counts, without knowing the seed.
    every = {"histogram-fairness": "demographic_parity,equal_opportunity:0,equal_opportunity:1"}
    seeded = node_config | {"noise-seed": 7, "epsilon": 8.0} | every
    dp = run_settings(epsilon=2.0, p_s="dp")
    first = node(seeded).hello(dp)["histogram"]
    np.testing.assert_array_equal(node(seeded).hello(dp)["histogram"], first)  # the same release, again
    for positive in (0, 1):
        with pytest.raises(SettingsMismatch, match="released a histogram already"):
            node(seeded).hello(run_settings(epsilon=1.0, p_s="dp", fairness="equal_opportunity",
                                            positive_class=positive))
    fresh = node_config | {"epsilon": 8.0} | every
    node(fresh).hello(dp)
    node(fresh).hello(run_settings(epsilon=1.0, p_s="dp", fairness="equal_opportunity", positive_class=0))


def test_a_run_whose_plan_was_replaced_cannot_be_planned_again(node_config, tmp_path):
    st = run_settings(epsilon=1.0, protect="record")
    plan = node(node_config).plan(st, PROPS, ROUNDS, "run-a")
    # A plan file lost before any round (the ledger registered the run): planned again, the same.
    (tmp_path / "state" / PLAN_FILE).unlink()
    assert node(node_config).plan(st, PROPS, ROUNDS, "run-a") == plan
    node(node_config).train(st, "run-a", 0, THETA, W)
    node(node_config).plan(st, PROPS, ROUNDS, "run-b")  # replaces run-a's plan (and batch key)
    with pytest.raises(SettingsMismatch, match="cannot be planned again"):
        node(node_config).plan(st, PROPS, ROUNDS, "run-a")


def _race_round(config, st, start):
    """A message of round 1 handled in its own process, at wall-clock time ``start``."""
    import time

    node = SiloNode(config)
    time.sleep(max(0.0, start - time.time()))
    try:
        node.train(st, "run-a", 1, THETA, W)
        return "reply"
    except Exception as exc:  # noqa: BLE001 - the test counts them
        return type(exc).__name__


@pytest.mark.slow
def test_messages_of_one_round_in_separate_processes_get_one_reply(node_config):
    import concurrent.futures
    import multiprocessing
    import time

    st = run_settings()
    node(node_config).plan(st, PROPS, ROUNDS, "run-a")
    node(node_config).train(st, "run-a", 0, THETA, W)
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(3, mp_context=ctx) as pool:
        start = time.time() + 8.0  # after the workers have imported pfair
        futures = [pool.submit(_race_round, node_config, st, start) for _ in range(3)]
        outcomes = sorted(f.result(timeout=120) for f in futures)
    assert outcomes == ["ReplayRefused", "ReplayRefused", "reply"]
    assert node(node_config).ledger().next_round("run-a") == 2


def test_a_ledger_mismatch_does_not_tell_the_server_a_hash_of_the_data(node_config, tmp_path):
    node(node_config).report()
    fingerprint = node(node_config).ledger().fingerprint
    other = _shard_config(tmp_path, np.arange(N) % 2, "other", **{"n-groups": 2})
    other["state-dir"] = node_config["state-dir"]
    with pytest.raises(pfair.exceptions.LedgerMismatch) as info:
        SiloNode(other).report()
    text, digest = str(info.value), fingerprint.split(":")[-1]
    assert "other data" in text and digest[:8] not in text and str(SiloNode(other).silo_id) in text


@pytest.mark.parametrize("protect", ["attribute", "record"])
def test_a_node_answers_its_checkpoints_from_its_held_out_share_and_charges_what_costs(node_config, protect):
    """The node holds out ⌊0.1 N⌋ positions of its shard (the public rule the server also uses for
    the sizes), trains on the rest, and answers query.checkpoint: the exact table of the held-out
    records in attribute mode (free), a charged, noised one in record mode; epochs that are not
    the run's checkpoints are refused, uncharged."""
    from pfair.validation import held_out_count

    st = run_settings(protect=protect)
    assert st.checkpoint_epochs() == (0, 1)  # 2 epochs: both checkpoints
    held = held_out_count(N, st.validation_share)
    rounds = 2 * -(-(N - held) // 50)
    node(node_config).plan(st, PROPS, rounds, "run-c")
    node(node_config).train(st, "run-c", 0, np.zeros(4), np.zeros(4))  # checkpoints follow a run's rounds
    ledger = node(node_config).ledger()
    before = len(ledger.events)
    theta = np.array([0.3, -0.2, 0.1, 0.0])
    with pytest.raises(ValueError, match=r"checkpoint epochs \[0, 1\] only"):
        node(node_config).checkpoint(st, "run-c", 2, theta)
    rel = node(node_config).checkpoint(st, "run-c", 1, theta)
    charged = [e.name for e in node(node_config).ledger().events[before:]]
    assert rel.silo == 0 and rel.epoch == 1 and rel.counts is None  # no target: no histogram
    if protect == "attribute":
        assert charged == [] and rel.validation.sum() == held and np.all(rel.validation == np.round(rel.validation))
    else:
        assert charged == ["validation_table"] and not np.all(rel.validation == np.round(rel.validation))
    again = node(node_config).checkpoint(st, "run-c", 1, theta)  # asked again: the same release, free
    np.testing.assert_array_equal(again.validation, rel.validation)
    assert len(node(node_config).ledger().events) == before + len(charged)


def test_a_run_config_naming_a_deep_model_takes_the_deep_defaults():
    # Settings a run config leaves out take DeepSteFFLe's defaults when it names a torch model
    # (a batch of 256 and a step of 1.0, as for silos of unknown size), SteFFLe's otherwise.
    model = json.dumps({"factory": "pfair.torch.models:mlp", "kwargs": {"n_features": 3, "n_classes": 2}})
    deep = settings_from_run_config({"settings": json.dumps({"epsilon": 2.0}), "model": model})
    linear = settings_from_run_config({"settings": json.dumps({"epsilon": 2.0}), "model": ""})
    assert (deep.lr_theta, deep.batch_size, deep.epochs) == (1.0, 256, 5)
    from pfair.settings import AUTO_BATCH_PRIVATE, AUTO_BATCH_RECORD, AUTO_RUN_BATCH, SteFFLeSettings

    # A linear private run's "auto" is not stretched to a batch the silos may not hold: no party
    # knows every silo's size, so it is the batch its epochs and step are stated for.
    d = SteFFLeSettings()
    assert AUTO_BATCH_PRIVATE > AUTO_RUN_BATCH
    assert (linear.lr_theta, linear.batch_size, linear.epochs) == (d.lr_theta, AUTO_RUN_BATCH, d.epochs)
    # Its clip is the default private run's adaptive one; a deep model's the deep default.
    from pfair.settings import DEEP_PRIVATE_CLIP

    assert linear.clip == "adaptive" and deep.clip == DEEP_PRIVATE_CLIP
    # And its decay the default private run's (times 0.4 every quarter of the epochs); a deep model's 0.8 every 10.
    from pfair.settings import AUTO_DECAY, PRIVATE_DECAY

    assert (linear.lr_decay, linear.decay_every) == (PRIVATE_DECAY, 5)
    assert (deep.lr_decay, deep.decay_every) == AUTO_DECAY
    # A deployed fairness target resolves as a fixed λ does: the same batch, step, clip and decay.
    target = settings_from_run_config({"settings": json.dumps({"epsilon": 2.0, "max_violation": 0.05}), "model": ""})
    assert target.max_violation == 0.05
    assert ((target.batch_size, target.lr_theta, target.epochs, target.clip, target.lr_decay, target.decay_every)
            == (linear.batch_size, linear.lr_theta, linear.epochs, linear.clip, linear.lr_decay, linear.decay_every))
    record = settings_from_run_config({"settings": json.dumps({"epsilon": 2.0, "protect": "record"}), "model": ""})
    assert (record.batch_size, record.epochs) == (AUTO_BATCH_RECORD, d.epochs)
    # A stated batch keeps the step rule (in proportion to the batch); stated settings are kept.
    small = settings_from_run_config({"settings": json.dumps({"epsilon": 2.0, "batch_size": 64}), "model": model})
    assert (small.batch_size, small.lr_theta) == (64, 0.25)
    given = settings_from_run_config({"settings": json.dumps({"epsilon": 2.0, "lr_theta": 0.1, "epochs": 2}),
                                      "model": model})
    assert (given.lr_theta, given.epochs) == (0.1, 2)


def test_a_warm_node_keeps_a_bounded_number_of_training_splits(node_config):
    """In a warm silo host a SiloNode lives as long as its SuperNode, and the server chooses each
    run's seed and held-out share: a split (a copy of the training rows) and a Rust data set per
    (share, seed) kept for ever would grow with every hello (200 seeds left 400 entries, found in
    review). At most SiloNode.MAX_CACHED are kept, the newest."""
    n = node(node_config)
    notion = run_settings().notion.core_args()
    for seed in range(20):
        n._silo_set(0.1, seed, notion)
        assert len(n._splits) <= SiloNode.MAX_CACHED
    assert ("silo_set", 0.1, 19, tuple(sorted(notion.items()))) in n._splits  # the newest run's is kept
    train, _, X, _, _ = n._split(0.1, 19)
    assert X.shape[0] == train.size  # and a split evicted earlier is made again when asked
    assert n._split(0.1, 0)[0].size == train.size
