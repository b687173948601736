"""The Flower ServerApp: the server of a deployed SteFFLe run.

Three objects, each with its own state:

* :class:`SiloLink` — the wire: which SuperNode is which silo, who refused and why, the events of
  the run, and the exchanges (push, pull every ``poll`` s within a timeout);
* :class:`SteFFLeStrategy` — a Flower :class:`~flwr.serverapp.strategy.Strategy` whose public hooks
  build a round's messages (:meth:`~SteFFLeStrategy.configure_train`) and take the server step
  from the replies (:meth:`~SteFFLeStrategy.aggregate_train`: decode, validate and reweight them,
  then the Rust ``server_update`` of :meth:`pfair.protocol.ServerParty.update`), as Flower's own
  strategies do; it keeps the server party and the run's description;
* :class:`FlowerTransport` — the transport of the one epoch loop
  (:class:`~pfair.protocol.driver.Driver`): it owns the link from the training rounds on, greets
  SuperNodes that (re)joined, and drives the strategy only through those hooks.

The protocol (the same as the in-process simulation's, :mod:`pfair.protocol`):

1. wait for ``n-silos`` SuperNodes; ``query.hello`` maps each node to its silo id and size and,
   with ``p_s="dp"``, collects each silo's DP histogram of s (public proportions come from the
   settings; ``"pooled"`` is refused — it would need every silo's exact counts);
2. ``query.plan`` sends the released proportions and the number of rounds T; each silo
   calibrates its own noise against its own ledger and returns its (public) plan, from which the
   server derives what a valid reply may look like;
3. T ``train`` rounds to the silos that have not refused. A silo refuses with a typed reply
   (:func:`pfair.flower.codec.refusal`: budget spent, or too little left for a useful model); it
   is not asked again. A silo that drops out is skipped and, when its SuperNode comes back,
   rejoins (its ledger makes it skip the rounds it missed). The node it left is not greeted again
   (the SuperLink lists it until its heartbeat expires), and a node whose hello fails is greeted
   again after 1, 2, 4, 8, then every 16 rounds, since each failed hello costs a round its
   timeout. After each checkpoint epoch, ``query.checkpoint`` asks each silo for the validation
   table of its held-out share (exact in attribute mode, noised and charged in record mode) and,
   with ``max_violation``, its noisy (block, s, ŷ) histogram at the current θ (charged to its
   ledger); the server reads the figures, adapts λ and keeps the candidates
   (:meth:`pfair.protocol.ServerParty.read_checkpoint`); the λ path is in the result's ``lam``,
   the figures in ``checkpoints``;
4. ``evaluate`` on the silos' local test shards, ``query.report`` for each silo's ε spent, and the
   model the released figures choose (θ, W, ``selected_epoch`` and metadata; the last one unless
   it is not clearly better than the constant predictor or a target asks for another:
   ``selection_warning`` says why) written as JSON to the run config's ``out`` path.

Flower's polling ``send_and_receive`` sleeps 3 s between pulls; the link pushes and pulls itself
every ``poll`` seconds, bounded by ``round-timeout``. The objects of a reply are pulled within the
same bound (:func:`pfair.flower.patches.bound_object_pulls`): a silo that dies while uploading its
reply costs the round its timeout, not Flower's upload-session expiry (minutes). A last pull at
the deadline, which waits for no object, takes the replies that arrived while that pull was
waiting, so that the live silos' replies of that round still count.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import time
import uuid
from typing import Any, Callable, Iterable

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Strategy

from pfair.flower import codec, patches
from pfair.flower.models import build_module, parse_model_spec
from pfair.flower.node import settings_from_run_config
from pfair.privacy.calibration import NoisePlan
from pfair.protocol.driver import EpochOutcome, RunState
from pfair.protocol.plan import RunPlan
from pfair.protocol.server import ServerParty
from pfair.protocol.setup import build_server, released_proportions
from pfair.protocol.assembly import EveryoneRefused, RemoteSilos, start_run
from pfair.providers.linear import linear_constant
from pfair.settings import SteFFLeSettings
from pfair.validation import held_out_count

log = logging.getLogger("pfair.flower")

#: Config entry of :meth:`SteFFLeStrategy.configure_train`: the SuperNodes a round goes to.
NODES = "nodes"


class SiloLink:
    """The server's side of the wire for one run (see the module docstring): the SuperNodes'
    silos, sizes and plans, who refused and why, the run's events and round timings, and the
    exchanges. ``common``: the config entries every message of the run carries (settings, run id,
    group and class counts, model)."""

    def __init__(self, grid: Grid, *, n_silos: int, common: dict[str, Any], round_timeout: float, poll: float,
                 progress: str = "") -> None:
        self.grid, self.n_silos, self.common = grid, int(n_silos), dict(common)
        self.round_timeout, self.poll, self.progress = float(round_timeout), float(poll), str(progress or "")
        self.silo_of: dict[int, int] = {}
        self.left: set[int] = set()  # nodes a silo has left for a new one
        self.hello_backoff: dict[int, tuple[int, int]] = {}  # node -> (first round to retry, rounds waited)
        self.sizes: dict[int, int] = {}
        self.plans: dict[int, dict] = {}
        self.refused: set[int] = set()
        #: Why each silo that refused did (its refusal's reason), by silo.
        self.refusals: dict[int, str] = {}
        #: Rounds in which the server used at least one silo's reply, and by silo.
        self.rounds_answered = 0
        self.answered_by: dict[int, int] = {}
        self.events: list[dict] = []
        self.round_seconds: list[float] = []

    # ------------------------------------------------------------------ messages
    def message(self, node: int, kind: str, *, arrays: ArrayRecord | None = None, group: str = "", **cfg: Any
                ) -> Message:
        content = RecordDict({"config": codec.config(**self.common, **cfg)})
        if arrays is not None:
            content["arrays"] = arrays
        return Message(content, dst_node_id=node, message_type=kind, group_id=group)

    def note(self, kind: str, **fields: Any) -> None:
        self.events.append({"event": kind, "time": time.time(), **fields})
        log.warning("%s: %s", kind, fields)

    def refuse(self, silo: int, reason: str, kind: str) -> None:
        """Record that ``silo`` refused the run (``kind``: at which step) and why; it is not asked again."""
        self.refused.add(silo)
        self.refusals.setdefault(silo, reason)
        self.note(kind, silo=silo, reason=reason)

    def exchange(self, messages: list[Message], timeout: float | None = None) -> list[tuple[int, Message | None]]:
        """Push, then pull every ``poll`` s until all replied or ``timeout`` (default: the round
        timeout); returns (node, reply or None) for every message sent (error replies included,
        with their node recovered)."""
        if not messages:
            return []
        timeout = self.round_timeout if timeout is None else float(timeout)
        dst = {}
        ids = []
        for mid, m in zip(self.grid.push_messages(messages), messages):
            dst[mid] = m.metadata.dst_node_id
            ids.append(mid)
        pending, got = set(ids), {}
        patches.bound_object_pulls()  # before the clock starts: its first call imports Flower's grid
        deadline = time.monotonic() + timeout
        token = patches.PULL_DEADLINE.set(deadline)
        try:
            while pending and time.monotonic() < deadline:
                self._pull(pending, got)
                if pending:
                    time.sleep(self.poll)
            if pending:
                # One last look, taking only what has fully arrived: a pull that waited for a reply
                # that never completes (its silo died mid-upload) can use up the round, while the
                # replies of live silos arrived behind it.
                patches.PULL_DEADLINE.set(time.monotonic())
                self._pull(pending, got)
        finally:
            patches.PULL_DEADLINE.reset(token)
        return [(dst[mid], got.get(mid)) for mid in ids]

    def _pull(self, pending: set[str], got: dict[str, Message]) -> None:
        for r in self.grid.pull_messages(list(pending)):
            if r.metadata.reply_to_message_id in pending:
                got[r.metadata.reply_to_message_id] = r
                pending.discard(r.metadata.reply_to_message_id)

    # ------------------------------------------------------------------ discovery
    def new_nodes(self, rnd: int | None = None) -> list[int]:
        """Nodes the SuperLink lists that are not mapped to a silo: not those a silo has left for
        a new node (the SuperLink lists a dead node until its heartbeat expires), and during the
        rounds not a node whose hello failed, until its back-off (1, 2, 4, ... up to 16 rounds)
        is over: each hello that fails costs the round its timeout."""
        return [n for n in self.grid.get_node_ids()
                if n not in self.silo_of and n not in self.left
                and (rnd is None or rnd >= self.hello_backoff.get(n, (0, 0))[0])]

    def hello(self, nodes: Iterable[int], rnd: int | None = None) -> dict[int, RecordDict]:
        """Map new nodes to silos; returns the hello replies of the nodes that answered."""
        answers = {}
        for node, reply in self.exchange([self.message(n, "query.hello") for n in nodes]):
            if reply is None or reply.has_error():
                self.note("hello_failed", node=node, reason=reason_of(reply))
                if rnd is not None:
                    waited = self.hello_backoff.get(node, (0, 0))[1]
                    wait = min(16, 2 * waited) if waited else 1
                    self.hello_backoff[node] = (rnd + 1 + wait, wait)
                continue
            meta = reply.content["meta"]
            silo = int(meta["silo"])
            if not 0 <= silo < self.n_silos:
                self.note("unknown_silo", node=node, silo=silo)
                continue
            for old, s in list(self.silo_of.items()):
                if s == silo and old != node:
                    del self.silo_of[old]  # the silo came back on a new SuperNode
                    self.left.add(old)
                    self.note("silo_rejoined", silo=silo, node=node)
            self.silo_of[node] = silo
            self.sizes[silo] = int(meta["n_records"])
            answers[node] = reply.content
            refusal = codec.read_refusal(reply.content)
            if refusal is not None:
                # The silo has too little budget left for a useful model: it released nothing.
                self.refuse(silo, refusal, "hello_refused")
        return answers

    def wait_for_silos(self, wait_timeout: float) -> dict[int, RecordDict]:
        deadline = time.monotonic() + wait_timeout
        answers: dict[int, RecordDict] = {}
        while True:
            new = self.new_nodes()
            if new:
                answers.update(self.hello(new))
            if len(set(self.silo_of.values())) >= self.n_silos:
                return answers
            if time.monotonic() > deadline:
                raise TimeoutError(f"only silos {sorted(set(self.silo_of.values()))} of {self.n_silos} joined within "
                                   f"{wait_timeout:g} s")
            time.sleep(0.5)

    def greet_new_nodes(self, rnd: int) -> None:
        """During the rounds: greet SuperNodes that (re)joined, unless their back-off runs."""
        new = self.new_nodes(rnd)
        if new:
            self.hello(new, rnd)

    # ------------------------------------------------------------------ rounds
    def answering_nodes(self) -> list[int]:
        """The nodes of the silos that planned the run and have not refused."""
        return [node for node, silo in self.silo_of.items() if silo not in self.refused and silo in self.plans]

    def plan_round(self, proportions: np.ndarray, total_rounds: int) -> None:
        """``query.plan``: each silo's noise plan for the run (a silo that fails or refuses is out)."""
        msgs = [self.message(n, "query.plan", arrays=codec.arrays(proportions=proportions),
                             **{"total-rounds": total_rounds}) for n in self.silo_of]
        for node, reply in self.exchange(msgs):
            silo = self.silo_of.get(node)
            refusal = None if reply is None or reply.has_error() else codec.read_refusal(reply.content)
            if reply is None or reply.has_error() or refusal is not None:
                self.refuse(silo, refusal or reason_of(reply), "plan_refused")
                continue
            self.plans[silo] = json.loads(str(reply.content["meta"]["plan"]))

    def checkpoint_round(self, theta: np.ndarray, epoch: int) -> list:
        """After the checkpoint ``epoch``, ask every silo that has not refused for its checkpoint
        release at ``theta``; returns the ``(silo, CheckpointRelease)`` pairs that decoded (the
        server checks and reads them: :meth:`pfair.protocol.ServerParty.read_checkpoint`)."""
        msgs = [self.message(node, "query.checkpoint", arrays=codec.arrays(theta=theta), epoch=epoch)
                for node in self.answering_nodes()]
        pairs = []
        for node, reply in self.exchange(msgs):
            silo = self.silo_of.get(node)
            if silo is None:
                continue
            if reply is None or reply.has_error():
                self.note("checkpoint_refused", epoch=epoch, silo=silo, reason=reason_of(reply))
                continue
            refusal = codec.read_refusal(reply.content)
            if refusal is not None:
                self.refused.add(silo)
                self.refusals.setdefault(silo, refusal)
                self.note("checkpoint_refused", epoch=epoch, silo=silo, reason=refusal)
                continue
            try:
                pairs.append((silo, codec.read_checkpoint(reply.content)))
            except ValueError as exc:
                self.note("malformed_reply", epoch=epoch, silo=silo, reason=str(exc))
        return pairs

    def report_progress(self, done: int, total: int, silos: int) -> None:
        """Rewrite the progress file (nothing when the run config names none)."""
        if self.progress:
            write_result({"round": int(done), "total": int(total), "silos": int(silos), "of": self.n_silos},
                         self.progress)

    def ledger_reports(self) -> dict[int, dict]:
        """``query.report`` to every silo: each silo's ledger summary (budget, ε spent, runs), by silo."""
        reports = {}
        for node, reply in self.exchange([self.message(n, "query.report") for n in self.silo_of]):
            if reply is not None and not reply.has_error():
                rep = json.loads(str(reply.content["meta"]["report"]))
                reports[int(rep["silo"])] = rep
        return reports

    def silo_rows(self, reports: dict[int, dict]) -> list[dict]:
        """The result's ``silos``: each silo's size, plan, refusal, ledger report and rounds answered."""
        return [{"silo": j, "n_records": self.sizes.get(j), "plan": self.plans.get(j), "refused": j in self.refused,
                 "reason": self.refusals.get(j), "ledger": reports.get(j),
                 "rounds_answered": self.answered_by.get(j, 0)} for j in range(self.n_silos)]


class SteFFLeStrategy(Strategy):
    """SteFFLe's server as a Flower strategy (see the module docstring): its hooks build a round's
    messages and take the server step from the replies; :meth:`run` runs the whole protocol."""

    def __init__(self, settings: SteFFLeSettings, *, n_silos: int, n_groups: int, n_classes: int,
                 wait_timeout: float = 120.0, round_timeout: float = 120.0, poll: float = 0.02,
                 evaluate: bool = True, model: dict | None = None, progress: str = "") -> None:
        if not settings.private:
            raise ValueError("a deployment runs private fits only: set epsilon")
        if settings.mode != "standard":
            raise ValueError(f"mode={settings.mode!r}: the Flower deployment runs the standard mode")
        if settings.p_s_source == "pooled":
            raise ValueError("p_s='pooled' needs every silo's exact counts, which no silo sends; use p_s='dp' or "
                             "public proportions")
        self.settings = settings
        self.n_silos, self.n_groups, self.n_classes = int(n_silos), int(n_groups), int(n_classes)
        self.wait_timeout, self.round_timeout, self.poll = float(wait_timeout), float(round_timeout), float(poll)
        self.do_evaluate = bool(evaluate)
        self.model = model  # None: the linear model; else a factory spec (pfair.flower.models)
        self.run_id = uuid.uuid4().hex
        #: A file rewritten after every round: ``{"round", "total", "silos"}`` (the launcher's progress line).
        self.progress = str(progress or "")
        self.link: SiloLink | None = None  # the run's wire, from :meth:`run` on
        self.server: ServerParty | None = None
        self.theta = np.zeros(0)  # θ₀ and W₀ of the run (the rounds' models travel through the hooks)
        self.w = np.zeros(0)
        self._configured: dict[int, tuple[np.ndarray, np.ndarray, dict[int, int]]] = {}
        self._seen = 0  # the server's rejections noted so far
        self._diverged = False
        self.lam_path: list[dict] = []

    def common(self) -> dict[str, Any]:
        """The config entries every message of the run carries."""
        return {"settings": json.dumps(self.settings.as_dict() | {"p_s": _p_s_json(self.settings)}),
                "n-groups": self.n_groups, "n-classes": self.n_classes, "run-id": self.run_id,
                "model": json.dumps(self.model) if self.model is not None else ""}

    # The silos' public facts, as the link learnt them.
    @property
    def sizes(self) -> dict[int, int]:
        return self.link.sizes if self.link is not None else {}

    @property
    def plans(self) -> dict[int, dict]:
        return self.link.plans if self.link is not None else {}

    @property
    def refused(self) -> set[int]:
        return self.link.refused if self.link is not None else set()

    @property
    def refusals(self) -> dict[int, str]:
        return self.link.refusals if self.link is not None else {}

    @property
    def events(self) -> list[dict]:
        return self.link.events if self.link is not None else []

    @property
    def rounds_answered(self) -> int:
        return self.link.rounds_answered if self.link is not None else 0

    def _note(self, kind: str, **fields: Any) -> None:
        self.link.note(kind, **fields)

    def _note_rejections(self, skip_no_reply: bool = False) -> None:
        """Note the server's rejections since the last call (replies it dropped)."""
        for r in self.server.rejected[self._seen:]:
            if not (skip_no_reply and r[2] == "no reply"):  # noted already when it was missed
                key = "epoch" if r[2].startswith("checkpoint release") else "round"
                self._note("rejected", **{key: r[0]}, silo=r[1], reason=r[2])
        self._seen = len(self.server.rejected)

    # ------------------------------------------------------------------ set-up rounds
    def _proportions(self, plan: RunPlan, answers: dict[int, RecordDict]) -> np.ndarray:
        """The p_s round (:func:`pfair.protocol.setup.released_proportions`): public, or the DP
        histograms the silos sent with their hello, checked and combined."""
        silo_of = self.link.silo_of

        def histograms() -> list:
            by_silo = {}
            want = (plan.blocks, self.n_groups)
            for node, content in answers.items():
                if silo_of[node] in self.refused:
                    continue
                hist = codec.read_arrays(content["arrays"])["histogram"] if "arrays" in content else None
                if hist is None or hist.shape != want or not np.all(np.isfinite(hist)):
                    raise ValueError(f"silo {silo_of[node]} sent no valid DP histogram (shape "
                                     f"{want[0]}×{want[1]})")
                by_silo[silo_of[node]] = hist
            return [by_silo[j] for j in sorted(by_silo)]

        return released_proportions(plan, groups=np.arange(self.n_groups), classes=np.arange(self.n_classes),
                                    histograms=histograms)

    def _plan(self, grid: Grid, proportions: np.ndarray, total_rounds: int) -> None:
        self.link.plan_round(proportions, total_rounds)

    def _refused_result(self, grid: Grid, t0: float) -> dict[str, Any]:
        """The result of a run in which no silo answered a round: status ``"refused"``, each
        silo's reason, their ledgers (nothing trained; ``pfair deploy`` exits non-zero)."""
        reports = self.link.ledger_reports()
        return {"status": "refused", "run_id": self.run_id, "rounds": 0, "settings": self.settings.as_dict()
                | {"p_s": _p_s_json(self.settings)},
                "refusals": {str(j): r for j, r in sorted(self.refusals.items())},
                "silos": self.link.silo_rows(reports),
                "events": self.events, "timing": {"silos_joined_s": time.monotonic() - t0, "round_s": []}}

    # ------------------------------------------------------------------ Strategy hooks
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
                        ) -> Iterable[Message]:
        """Round ``server_round − 1`` of the protocol: θ and W (``arrays``) to the SuperNodes
        ``config["nodes"]``, whose silos are ``config["silos"]``."""
        nodes, silos = [int(n) for n in config[NODES]], [int(j) for j in config["silos"]]
        theta, w = codec.split_model(arrays, self.theta.size)
        self._configured[server_round] = (theta, w, dict(zip(nodes, silos)))
        return [self.link.message(node, "train", group=str(server_round), round=server_round - 1,
                                  **codec.model_config(theta, w)) for node in nodes]

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The server step of round ``server_round − 1`` from the replies (each from a SuperNode the
        round was configured for; a silo configured but not among them counts as missing): decode,
        then :meth:`pfair.protocol.ServerParty.update` (which rejects malformed or implausible
        replies, reweights the rest and runs the Rust ``server_update``). Returns the new θ and W
        and ``silos_used``, ``silos`` (which silos' replies were used)."""
        rnd = server_round - 1
        theta, w, sent = self._configured.pop(server_round)
        pairs, seen = [], set()
        for reply in replies:
            node = int(reply.metadata.src_node_id)
            silo = sent.get(node)
            if silo is None or node in seen:
                continue
            seen.add(node)
            try:
                pairs.append((silo, codec.read_silo_message(reply.content)))
            except ValueError as exc:
                self._note("malformed_reply", round=rnd, silo=silo, reason=str(exc))
        pairs += [(silo, None) for node, silo in sent.items() if node not in seen]
        self._note_rejections()
        theta, w, used = self.server.update(theta, w, pairs, rnd)
        self._note_rejections(skip_no_reply=True)
        return codec.model_arrays(theta, w), MetricRecord({"silos_used": float(len(used)),
                                                           "silos": [int(j) for j in used]})

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
                           ) -> Iterable[Message]:
        nodes = [int(n) for n in config[NODES]]
        theta, w = codec.split_model(arrays, self.theta.size)
        return [self.link.message(node, "evaluate", **codec.model_config(theta, w)) for node in nodes]

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Test-size-weighted mean of the silos' local metrics (each silo's a DP release unless its
        node config allows exact evaluation); a metric some silo did not send is left out."""
        rows = [dict(r.content["metrics"]) for r in replies if not r.has_error() and "metrics" in r.content]
        rows = [r for r in rows if r.get("n_test", 0) > 0]
        if not rows:
            return None
        n = sum(r["n_test"] for r in rows)
        keys = [k for k in rows[0] if k != "n_test" and all(k in r for r in rows)]
        return MetricRecord({k: float(sum(r[k] * r["n_test"] for r in rows) / n) for k in keys} | {"n_test": float(n)})

    def summary(self) -> None:
        st = self.settings
        log.info("SteFFLe over Flower: %d silos, epsilon=%s, lam=%s, %s, p_s=%s", self.n_silos, st.epsilon, st.lam,
                 st.fairness, st.p_s_source)

    def start(self, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int = 3, timeout: float = 3600,
              train_config: ConfigRecord | None = None, evaluate_config: ConfigRecord | None = None,
              evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None) -> Any:
        """Not Flower's loop: a SteFFLe run has its own rounds (hello, plan, training, checkpoints),
        whose number follows from the settings and the silos' sizes. Use :meth:`run`."""
        raise NotImplementedError("SteFFLeStrategy runs the SteFFLe protocol with run(grid); Flower's start() loop "
                                  "(num_rounds of train and evaluate) does not fit it")

    def _theta0(self, d: int) -> np.ndarray:
        """θ₀: zeros for the linear model; the initial parameters of the model factory's module
        (initialised from its public ``init_seed``) for a deep model."""
        if self.model is None:
            return np.zeros((d + 1) * (self.n_classes - 1))
        from pfair.providers.torch import module_theta  # lazy: torch is an optional extra

        return module_theta(build_module(self.model, allowed=self.model["factory"]))

    def _constant(self, d: int) -> Any:
        """``constant(c, p, θ)``: θ of the constant predictor (the linear model's, or the model
        factory's module with its last linear layer so set; None where it has none), which a run at a
        fixed λ > 0 returns when its last model is shown no better (:class:`pfair.validation.Selector`)."""
        if self.model is None:
            return functools.partial(linear_constant, d, self.n_classes)
        from pfair.providers.torch import constant_module_theta  # lazy: torch is an optional extra

        module = build_module(self.model, allowed=self.model["factory"])
        shape = tuple(self.model["input_shape"] or (d,))
        return lambda c, p, theta: constant_module_theta(module, theta, self.n_classes, shape, c, p)

    # ------------------------------------------------------------------ the run
    def run(self, grid: Grid) -> dict[str, Any]:
        """Run the whole protocol on ``grid``; returns the result that :func:`main` writes (a dict)."""
        st = self.settings
        t0 = time.monotonic()
        self.summary()
        self.link = SiloLink(grid, n_silos=self.n_silos, common=self.common(), round_timeout=self.round_timeout,
                             poll=self.poll, progress=self.progress)
        answers = self.link.wait_for_silos(self.wait_timeout)
        t_joined = time.monotonic() - t0
        d = {int(c["meta"]["n_features"]) for c in answers.values()}
        if len(d) != 1:
            raise ValueError(f"the silos' shards have different numbers of features: {sorted(d)}")
        d = d.pop()
        # Each silo trains on all but its held-out share (pfair.validation.holdout), whose size is
        # a function of its public size.
        held = [held_out_count(self.sizes[j], st.validation_share) for j in range(self.n_silos)]
        plan = RunPlan.build(st, [self.sizes[j] - held[j] for j in range(self.n_silos)], n_groups=self.n_groups,
                             n_classes=self.n_classes)
        st, R, T = plan.settings, plan.rounds_per_epoch, plan.total_rounds

        def noise_plans(proportions: np.ndarray, total_rounds: int) -> dict:
            self._plan(grid, proportions, total_rounds)
            return {j: NoisePlan(**p) for j, p in self.plans.items()}

        def adopt(state: RunState) -> None:
            self.theta, self.w = state.theta, state.w

        silos = RemoteSilos(self.n_silos, plans=noise_plans, refused=lambda: len(self.refused), run_id=self.run_id)
        try:
            run = start_run(plan, silos, server=lambda plans, props, n: build_server(plan, plans, props, theta_len=n),
                            transport=lambda server, state: FlowerTransport(self, grid, plan), theta_len=0,
                            theta0=lambda: self._theta0(d), proportions=lambda: self._proportions(plan, answers),
                            held_out=[h if st.validation_share > 0 else self.sizes[j] for j, h in enumerate(held)],
                            keep_exact=False, on_state=adopt,
                            constant=self._constant(d))
        except EveryoneRefused:
            return self._refused_result(grid, t0)
        self.server, proportions, monitor = run.server, run.state.proportions, run.driver.monitor
        t_setup = time.monotonic() - t0

        def on_epoch(epoch: int, theta: np.ndarray, w: np.ndarray, info: dict) -> dict:
            if monitor.diverged and not self._diverged:
                self._diverged = True
                self._note("diverged", round=(epoch + 1) * R - 1, theta_norm=float(np.linalg.norm(theta)))
            self._note_rejections()
            if "lam" in info:
                v = info.get("violation_released", math.nan)
                self.lam_path.append({"epoch": epoch + 1, "lam": info["lam"],
                                      "violation_released": None if math.isnan(v) else v})
            return info

        state = run.go(on_epoch=on_epoch)
        if self.rounds_answered == 0:  # every silo refused every round: nothing was trained
            return self._refused_result(grid, t0)
        snapshot = state.snapshot
        theta, w = snapshot if snapshot is not None else (state.theta, state.w)
        evaluation = None
        if self.do_evaluate:
            config = ConfigRecord({NODES: [n for n, j in self.link.silo_of.items() if j in self.plans]})
            msgs = list(self.configure_evaluate(T, codec.model_arrays(theta, w), config, grid))
            evaluation = self.aggregate_evaluate(T, [r for _, r in self.link.exchange(msgs) if r is not None])
        reports = self.link.ledger_reports()
        return {
            "status": "completed", "run_id": self.run_id, "theta": theta.tolist(), "w": w.tolist(),
            "n_features": d, "n_groups": self.n_groups, "n_classes": self.n_classes, "rounds": T, "model": self.model,
            "rounds_per_epoch": R, "settings": st.as_dict() | {"p_s": _p_s_json(st)},
            "proportions": proportions.tolist(),
            "refusals": {str(j): r for j, r in sorted(self.refusals.items())},
            "silos": self.link.silo_rows(reports),
            "evaluation": dict(evaluation) if evaluation is not None else None,
            "events": self.events,
            "lam": self.lam_path,
            "checkpoints": [dataclasses.asdict(f) for f in state.checkpoints],
            "selected_epoch": None if state.selected is None else state.selected + 1,
            "selection_warning": state.selection_warning,
            "timing": {"silos_joined_s": t_joined, "setup_s": t_setup, "round_s": self.link.round_seconds},
        }


class FlowerTransport:
    """The rounds of a run as Flower messages: the transport of the one epoch loop
    (:class:`~pfair.protocol.driver.Driver`) when the silos are ClientApps.

    It takes over the strategy's :class:`SiloLink` (the SuperNodes' silos, refusals, events) and
    keeps it; θ and W come from the driver and go back in the :class:`EpochOutcome`. Each round
    it greets SuperNodes that (re)joined, asks the strategy for the round's messages
    (:meth:`SteFFLeStrategy.configure_train`), waits for the replies within the round timeout,
    records missing, failed and refusing silos (a refusal is a typed reply,
    :func:`pfair.flower.codec.read_refusal`; that silo is not asked again) and hands the other
    replies to :meth:`SteFFLeStrategy.aggregate_train`, whose arrays are the new θ and W. A silo
    charges its own ledger when it answers."""

    def __init__(self, strategy: SteFFLeStrategy, grid: Grid, plan: RunPlan) -> None:
        self.strategy, self.plan = strategy, plan
        self.link: SiloLink = strategy.link if strategy.link is not None else SiloLink(
            grid, n_silos=strategy.n_silos, common=strategy.common(), round_timeout=strategy.round_timeout,
            poll=strategy.poll, progress=strategy.progress)

    def answering(self, epoch: int, refused: set) -> list[int]:
        refused |= self.link.refused
        return [j for j in range(self.link.n_silos) if j not in refused]

    def _replies(self, rnd: int, messages: list[Message]) -> list[Message]:
        """The round's exchange; notes and drops what is not a reply to aggregate."""
        link, out = self.link, []
        for node, reply in link.exchange(messages):
            silo = link.silo_of.get(node)
            if silo is None:
                continue
            if reply is None:
                link.note("no_reply", round=rnd, silo=silo)
            elif reply.has_error():
                link.note("error_reply", round=rnd, silo=silo, reason=reason_of(reply))
            elif (refusal := codec.read_refusal(reply.content)) is not None:
                link.refused.add(silo)
                link.refusals.setdefault(silo, refusal)
                link.note("refused", round=rnd, silo=silo, reason=refusal)
            else:
                out.append(reply)
        return out

    def rounds(self, theta: np.ndarray, w: np.ndarray, epoch: int, *, lr: float, active: list[int],
               refused: set) -> EpochOutcome:
        link, plan, strategy = self.link, self.plan, self.strategy
        arrays = codec.model_arrays(theta, w)
        snapshot, used = None, 0
        start = plan.epoch_start(epoch)
        for rnd in range(start, start + plan.rounds_per_epoch):
            if len(link.refused) >= link.n_silos:
                link.note("all_refused", round=rnd)
                break
            link.greet_new_nodes(rnd)
            t_round = time.monotonic()
            nodes = link.answering_nodes()
            config = ConfigRecord({NODES: nodes, "silos": [link.silo_of[n] for n in nodes]})
            replies = self._replies(rnd, list(strategy.configure_train(rnd + 1, arrays, config, link.grid)))
            arrays, metrics = strategy.aggregate_train(rnd + 1, replies)
            theta, w = codec.split_model(arrays, np.size(theta))
            silos = [int(j) for j in metrics["silos"]]
            used = max(used, len(silos))
            link.rounds_answered += bool(silos)
            for j in silos:
                link.answered_by[j] = link.answered_by.get(j, 0) + 1
            link.report_progress(rnd + 1, plan.total_rounds, len(silos))
            link.round_seconds.append(time.monotonic() - t_round)
            if plan.pick == rnd:
                snapshot = (theta.copy(), w.copy())
            if not np.all(np.isfinite(theta)):
                raise FloatingPointError(f"training diverged at round {rnd}")
        refused |= link.refused
        return EpochOutcome(theta, w, used, {}, snapshot)

    def checkpoint(self, theta: np.ndarray, epoch: int, active: list[int], refused: set) -> list:
        pairs = self.link.checkpoint_round(theta, epoch)
        refused |= self.link.refused
        return pairs


def reason_of(reply: Message | None) -> str:
    """Why a reply is missing or an error reply (Flower's code and reason)."""
    if reply is None:
        return "no reply within the round timeout"
    if reply.has_error():
        return f"code {reply.error.code}: {reply.error.reason}"
    return ""


_reason = reason_of  # the name pfair.flower.thresholds imported


def _p_s_json(settings: SteFFLeSettings) -> Any:
    p = settings.p_s
    return p if isinstance(p, str) else np.asarray(p, dtype=np.float64).tolist()


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point: settings and sizes from the run config, the result to ``out``."""
    rc = context.run_config

    st = settings_from_run_config(rc)
    strategy = SteFFLeStrategy(st, n_silos=int(rc["n-silos"]), n_groups=int(rc["n-groups"]),
                               n_classes=int(rc["n-classes"]), wait_timeout=float(rc["wait-timeout"]),
                               round_timeout=float(rc["round-timeout"]), evaluate=bool(rc["evaluate"]),
                               poll=server_poll(),
                               model=parse_model_spec(rc.get("model", "")), progress=str(rc.get("progress", "")))
    write_result(strategy.run(grid), str(rc["out"]))


#: Environment variable of the server's poll interval (s) while it waits for replies.
SERVER_POLL_ENV = "PFAIR_SERVER_POLL"


#: The server's wait between two pulls when the SuperLink holds them (:func:`pfair.flower.patches.hold_pulls`).
HELD_POLL = 0.001


def server_poll() -> float:
    """The server's poll interval: ``$PFAIR_SERVER_POLL``, else :data:`HELD_POLL` when the
    SuperLink that started this ServerApp holds pulls until a reply is there (a loopback
    deployment's, :mod:`pfair.flower.fast_superlink`: each pull then waits for the next reply
    itself), else 0.02 s (one HTTP request to the SuperLink each, only while a round's replies are
    awaited)."""
    default = str(HELD_POLL) if os.environ.get(patches.HOLDS_ENV) else "0.02"
    raw = os.environ.get(SERVER_POLL_ENV, default)
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value <= 10:
        raise ValueError(f"{SERVER_POLL_ENV}={raw!r}: set the server's poll interval in seconds, e.g. 0.02 (0 < poll <= 10)")
    return value


def write_result(result: dict, out: str) -> None:
    """A ServerApp's result as JSON at ``out`` (atomically; nothing when ``out`` is empty)."""
    if out:
        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1, default=float)
        os.replace(tmp, out)
