"""The Flower ServerApp and :class:`SteFFLeStrategy`: the server of a deployed SteFFLe run.

The strategy runs the same protocol as the in-process simulation (:mod:`pfair.protocol`):

1. wait for ``n-silos`` SuperNodes; ``query.hello`` maps each node to its silo id and size and,
   with ``p_s="dp"``, collects each silo's DP histogram of s (public proportions come from the
   settings; ``"pooled"`` is refused — it would need every silo's exact counts);
2. ``query.plan`` sends the released proportions and the number of rounds T; each silo
   calibrates its own noise against its own ledger and returns its (public) plan, from which the
   server derives what a valid reply may look like;
3. T ``train`` rounds: :meth:`configure_train` sends θ and W to the silos that have not refused,
   :meth:`aggregate_train` decodes the replies and hands them to
   :meth:`pfair.protocol.ServerParty.update`, which rejects malformed or implausible replies
   (logged), reweights the rest and runs the Rust ``server_update``. A silo whose reply says it
   refused (budget spent) is not asked again; a silo that drops out is skipped and, when its
   SuperNode comes back, rejoins (its ledger makes it skip the rounds it missed). The node it
   left is not greeted again (the SuperLink lists it until its heartbeat expires), and a node
   whose hello fails is greeted again after 1, 2, 4, 8, then every 16 rounds, since each failed
   hello costs a round its timeout;
   After each checkpoint epoch, ``query.checkpoint`` asks each silo for the validation table of its
   held-out share (exact in attribute mode, noised and charged in record mode) and, with
   ``max_violation``, its noisy (block, s, ŷ) histogram at the current θ (charged to its ledger);
   the server reads the figures, adapts λ and keeps the candidates
   (:meth:`pfair.protocol.ServerParty.read_checkpoint`); the λ path is in the result's ``lam``,
   the figures in ``checkpoints``;
4. ``evaluate`` on the silos' local test shards, ``query.report`` for each silo's ε spent, and the
   model the released figures choose (θ, W, ``selected_epoch`` and metadata; the last one unless
   it is not clearly better than the constant predictor or a target asks for another:
   ``selection_warning`` says why) written as JSON to the run config's ``out`` path.

Flower's polling ``send_and_receive`` sleeps 3 s between pulls; the strategy pushes and pulls
itself every ``poll`` seconds, bounded by ``round-timeout``. The objects of a reply are pulled
within the same bound (:func:`bound_object_pulls`): a silo that dies while uploading its reply
costs the round its timeout, not Flower's upload-session expiry (minutes). A last pull at the
deadline, which waits for no object, takes the replies that arrived while that pull was waiting,
so that the live silos' replies of that round still count.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import logging
import math
import time
import uuid
from typing import Any, Iterable

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Strategy

from pfair.flower import codec
from pfair.flower.node import settings_from_run_config
from pfair.privacy.calibration import NoisePlan
from pfair.protocol.driver import EpochOutcome, RunState
from pfair.protocol.plan import RunPlan
from pfair.protocol.server import ServerParty
from pfair.protocol.setup import build_server, released_proportions
from pfair.protocol.assembly import EveryoneRefused, RemoteSilos, start_run
from pfair.settings import SteFFLeSettings
from pfair.validation import held_out_count

log = logging.getLogger("pfair.flower")

# The monotonic deadline of the exchange in progress (None: Flower's own limits apply).
_PULL_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("pfair_pull_deadline", default=None)


def bound_object_pulls() -> bool:
    """Bound the object pulls of Flower's ``HttpGrid.pull_messages`` by the current exchange's
    deadline; returns whether Flower's grid could be bound (else its defaults stay).

    Flower 1.41 pulls the objects of every announced reply with retries for up to two hours
    (``flwr.supercore.constant.PULL_MAX_TIME``), backing off up to 10 s. When a silo's process
    dies after announcing its reply but before its objects arrive, the whole ``pull_messages``
    call waits until the SuperLink's upload session expires (about 3 minutes here), past any
    round timeout, and the replies of the other silos wait with it. Inside
    :meth:`SteFFLeStrategy._exchange` the pulls get the time left in the round instead (backing
    off from 0.1 s to at most 0.5 s); such a reply then ends as Flower's "message unavailable"
    error reply, which the round logs and drops like a missing one."""
    try:
        from flwr.superlink.grid import http_grid
    except ImportError:  # pragma: no cover - another Flower layout
        return False
    real = getattr(http_grid, "pull_objects", None)
    if real is None:  # pragma: no cover - another Flower layout
        return False
    if getattr(real, "_pfair_bounded", False):
        return True

    def pull_objects(*args: Any, **kwargs: Any) -> Any:
        deadline = _PULL_DEADLINE.get()
        if deadline is not None:
            kwargs.update(max_time=max(0.0, deadline - time.monotonic()), initial_backoff=0.1,
                          backoff_cap=0.5)
        return real(*args, **kwargs)

    pull_objects._pfair_bounded = True  # type: ignore[attr-defined]
    http_grid.pull_objects = pull_objects
    return True


class SteFFLeStrategy(Strategy):
    """Runs SteFFLe over a Flower :class:`Grid` (see the module docstring)."""

    def __init__(self, settings: SteFFLeSettings, *, n_silos: int, n_groups: int, n_classes: int,
                 wait_timeout: float = 120.0, round_timeout: float = 120.0, poll: float = 0.2,
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
        self.silo_of: dict[int, int] = {}
        self.left: set[int] = set()  # nodes a silo has left for a new one
        self.hello_backoff: dict[int, tuple[int, int]] = {}  # node -> (first round to retry, rounds waited)
        self.sizes: dict[int, int] = {}
        self.plans: dict[int, dict] = {}
        self.refused: set[int] = set()
        #: Why each silo that refused did (its error reply's reason), by silo.
        self.refusals: dict[int, str] = {}
        #: Rounds in which the server used at least one silo's reply.
        self.rounds_answered = 0
        #: Rounds in which the server used each silo's reply, by silo.
        self.answered_by: dict[int, int] = {}
        #: A file rewritten after every round: ``{"round", "total", "silos"}`` (the launcher's progress line).
        self.progress = str(progress or "")
        self.events: list[dict] = []
        self.round_seconds: list[float] = []
        self.server: ServerParty | None = None
        self.theta = np.zeros(0)
        self.w = np.zeros(0)
        self._sent: dict[str, int] = {}
        self._seen = 0  # the server's rejections noted so far
        self._diverged = False
        self.lam_path: list[dict] = []

    # ------------------------------------------------------------------ transport
    def _common(self) -> dict[str, Any]:
        return {"settings": json.dumps(self.settings.as_dict() | {"p_s": _p_s_json(self.settings)}),
                "n-groups": self.n_groups, "n-classes": self.n_classes, "run-id": self.run_id,
                "model": json.dumps(self.model) if self.model is not None else ""}

    def _exchange(self, grid: Grid, messages: list[Message], timeout: float) -> list[tuple[int, Message | None]]:
        """Push, then pull every ``poll`` s until all replied or ``timeout``; returns (node, reply or
        None) for every message sent (error replies included, with their node recovered)."""
        if not messages:
            return []
        dst = {}
        ids = []
        for mid, m in zip(grid.push_messages(messages), messages):
            dst[mid] = m.metadata.dst_node_id
            ids.append(mid)
        pending, got = set(ids), {}
        deadline = time.monotonic() + timeout
        bound_object_pulls()
        token = _PULL_DEADLINE.set(deadline)
        try:
            while pending and time.monotonic() < deadline:
                self._pull(grid, pending, got)
                if pending:
                    time.sleep(self.poll)
            if pending:
                # One last look, taking only what has fully arrived: a pull that waited for a reply
                # that never completes (its silo died mid-upload) can use up the round, while the
                # replies of live silos arrived behind it.
                _PULL_DEADLINE.set(time.monotonic())
                self._pull(grid, pending, got)
        finally:
            _PULL_DEADLINE.reset(token)
        return [(dst[mid], got.get(mid)) for mid in ids]

    @staticmethod
    def _pull(grid: Grid, pending: set[str], got: dict[str, Message]) -> None:
        for r in grid.pull_messages(list(pending)):
            if r.metadata.reply_to_message_id in pending:
                got[r.metadata.reply_to_message_id] = r
                pending.discard(r.metadata.reply_to_message_id)

    def _message(self, node: int, kind: str, *, arrays: ArrayRecord | None = None, group: str = "", **cfg: Any
                 ) -> Message:
        content = RecordDict({"config": codec.config(**self._common(), **cfg)})
        if arrays is not None:
            content["arrays"] = arrays
        return Message(content, dst_node_id=node, message_type=kind, group_id=group)

    def _note(self, kind: str, **fields: Any) -> None:
        self.events.append({"event": kind, "time": time.time(), **fields})
        log.warning("%s: %s", kind, fields)

    # ------------------------------------------------------------------ discovery
    def _new_nodes(self, grid: Grid, rnd: int | None = None) -> list[int]:
        """Nodes the SuperLink lists that are not mapped to a silo: not those a silo has left for
        a new node (the SuperLink lists a dead node until its heartbeat expires), and during the
        rounds not a node whose hello failed, until its back-off (1, 2, 4, ... up to 16 rounds)
        is over: each hello that fails costs the round its timeout."""
        return [n for n in grid.get_node_ids()
                if n not in self.silo_of and n not in self.left
                and (rnd is None or rnd >= self.hello_backoff.get(n, (0, 0))[0])]

    def _hello(self, grid: Grid, nodes: Iterable[int], rnd: int | None = None) -> dict[int, RecordDict]:
        """Map new nodes to silos; returns the hello replies of the nodes that answered."""
        answers = {}
        for node, reply in self._exchange(grid, [self._message(n, "query.hello") for n in nodes], self.round_timeout):
            if reply is None or reply.has_error():
                self._note("hello_failed", node=node, reason=_reason(reply))
                if rnd is not None:
                    waited = self.hello_backoff.get(node, (0, 0))[1]
                    wait = min(16, 2 * waited) if waited else 1
                    self.hello_backoff[node] = (rnd + 1 + wait, wait)
                continue
            meta = reply.content["meta"]
            silo = int(meta["silo"])
            if not 0 <= silo < self.n_silos:
                self._note("unknown_silo", node=node, silo=silo)
                continue
            for old, s in list(self.silo_of.items()):
                if s == silo and old != node:
                    del self.silo_of[old]  # the silo came back on a new SuperNode
                    self.left.add(old)
                    self._note("silo_rejoined", silo=silo, node=node)
            self.silo_of[node] = silo
            self.sizes[silo] = int(meta["n_records"])
            answers[node] = reply.content
            if "refused" in meta and str(meta["refused"]):
                # The silo has too little budget left for a useful model: it released nothing.
                self._refuse(silo, str(meta["refused"]), "hello_refused")
        return answers

    def _wait_for_silos(self, grid: Grid) -> dict[int, RecordDict]:
        deadline = time.monotonic() + self.wait_timeout
        answers: dict[int, RecordDict] = {}
        while True:
            new = self._new_nodes(grid)
            if new:
                answers.update(self._hello(grid, new))
            if len(set(self.silo_of.values())) >= self.n_silos:
                return answers
            if time.monotonic() > deadline:
                raise TimeoutError(f"only silos {sorted(set(self.silo_of.values()))} of {self.n_silos} joined within "
                                   f"{self.wait_timeout:g} s")
            time.sleep(0.5)

    # ------------------------------------------------------------------ set-up rounds
    def _proportions(self, plan: RunPlan, answers: dict[int, RecordDict]) -> np.ndarray:
        """The p_s round (:func:`pfair.protocol.setup.released_proportions`): public, or the DP
        histograms the silos sent with their hello, checked and combined."""

        def histograms() -> list:
            by_silo = {}
            want = (plan.blocks, self.n_groups)
            for node, content in answers.items():
                if self.silo_of[node] in self.refused:
                    continue
                hist = codec.read_arrays(content["arrays"])["histogram"] if "arrays" in content else None
                if hist is None or hist.shape != want or not np.all(np.isfinite(hist)):
                    raise ValueError(f"silo {self.silo_of[node]} sent no valid DP histogram (shape "
                                     f"{want[0]}×{want[1]})")
                by_silo[self.silo_of[node]] = hist
            return [by_silo[j] for j in sorted(by_silo)]

        return released_proportions(plan, groups=np.arange(self.n_groups), classes=np.arange(self.n_classes),
                                    histograms=histograms)

    def _plan(self, grid: Grid, proportions: np.ndarray, total_rounds: int) -> None:
        msgs = [self._message(n, "query.plan", arrays=codec.arrays(proportions=proportions),
                              **{"total-rounds": total_rounds}) for n in self.silo_of]
        for node, reply in self._exchange(grid, msgs, self.round_timeout):
            silo = self.silo_of.get(node)
            if reply is None or reply.has_error():
                self._refuse(silo, _reason(reply), "plan_refused")
                continue
            self.plans[silo] = json.loads(str(reply.content["meta"]["plan"]))

    def _checkpoint(self, grid: Grid, epoch: int) -> list:
        """After the checkpoint ``epoch``, ask every silo that has not refused for its checkpoint
        release at the current θ; returns the ``(silo, CheckpointRelease)`` pairs that decoded (the
        server checks and reads them: :meth:`pfair.protocol.ServerParty.read_checkpoint`)."""
        msgs = [self._message(node, "query.checkpoint", arrays=codec.arrays(theta=self.theta), epoch=epoch)
                for node, silo in self.silo_of.items() if silo not in self.refused and silo in self.plans]
        pairs = []
        for node, reply in self._exchange(grid, msgs, self.round_timeout):
            silo = self.silo_of.get(node)
            if silo is None:
                continue
            if reply is None or reply.has_error():
                reason = _reason(reply)
                if reply is not None and "PrivacyBudgetExceeded" in reason:
                    self.refused.add(silo)
                    self.refusals.setdefault(silo, reason)
                self._note("checkpoint_refused", epoch=epoch, silo=silo, reason=reason)
                continue
            try:
                pairs.append((silo, codec.read_checkpoint(reply.content)))
            except ValueError as exc:
                self._note("malformed_reply", epoch=epoch, silo=silo, reason=str(exc))
        return pairs

    def _refuse(self, silo: int, reason: str, kind: str) -> None:
        """Record that ``silo`` refused the run (``kind``: at which step) and why; it is not asked again."""
        self.refused.add(silo)
        self.refusals.setdefault(silo, reason)
        self._note(kind, silo=silo, reason=reason)

    def _report_progress(self, done: int, total: int, silos: int) -> None:
        """Rewrite the progress file (nothing when the run config names none)."""
        if self.progress:
            write_result({"round": int(done), "total": int(total), "silos": int(silos), "of": self.n_silos},
                         self.progress)

    def _refused_result(self, grid: Grid, t0: float) -> dict[str, Any]:
        """The result of a run in which no silo answered a round: status ``"refused"``, each
        silo's reason, their ledgers (nothing trained; ``pfair deploy`` exits non-zero)."""
        reports = self._ledger_reports(grid)
        return {"status": "refused", "run_id": self.run_id, "rounds": 0, "settings": self.settings.as_dict()
                | {"p_s": _p_s_json(self.settings)},
                "refusals": {str(j): r for j, r in sorted(self.refusals.items())},
                "silos": [{"silo": j, "n_records": self.sizes.get(j), "plan": self.plans.get(j),
                           "refused": j in self.refused, "reason": self.refusals.get(j), "ledger": reports.get(j),
                           "rounds_answered": self.answered_by.get(j, 0)}
                          for j in range(self.n_silos)],
                "events": self.events, "timing": {"silos_joined_s": time.monotonic() - t0, "round_s": []}}

    def _ledger_reports(self, grid: Grid) -> dict[int, dict]:
        """``query.report`` to every silo: each silo's ledger summary (budget, ε spent, runs), by silo."""
        reports = {}
        for node, reply in self._exchange(grid, [self._message(n, "query.report") for n in self.silo_of],
                                          self.round_timeout):
            if reply is not None and not reply.has_error():
                rep = json.loads(str(reply.content["meta"]["report"]))
                reports[int(rep["silo"])] = rep
        return reports

    def _note_rejections(self, skip_no_reply: bool = False) -> None:
        """Note the server's rejections since the last call (replies it dropped)."""
        for r in self.server.rejected[self._seen:]:
            if not (skip_no_reply and r[2] == "no reply"):  # noted already when it was missed
                key = "epoch" if r[2].startswith("checkpoint release") else "round"
                self._note("rejected", **{key: r[0]}, silo=r[1], reason=r[2])
        self._seen = len(self.server.rejected)

    # ------------------------------------------------------------------ Strategy hooks
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
                        ) -> Iterable[Message]:
        """Round ``server_round − 1`` of the protocol to every silo that has not refused."""
        return [self._message(node, "train", arrays=arrays, group=str(server_round), round=server_round - 1,
                              **codec.model_config(self.theta))
                for node, silo in self.silo_of.items() if silo not in self.refused and silo in self.plans]

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Decode the replies and take the server step; replies are ``(node, Message | None)`` pairs
        as :meth:`start` collects them."""
        rnd = server_round - 1
        pairs = []
        for node, reply in replies:  # type: ignore[misc]
            silo = self.silo_of.get(node)
            if silo is None:
                continue
            if reply is None:
                self._note("no_reply", round=rnd, silo=silo)
                pairs.append((silo, None))
                continue
            if reply.has_error():
                reason = _reason(reply)
                if "PrivacyBudgetExceeded" in reason or "BudgetTooSmall" in reason:
                    self.refused.add(silo)
                    self.refusals.setdefault(silo, reason)
                self._note("error_reply", round=rnd, silo=silo, reason=reason)
                pairs.append((silo, None))
                continue
            try:
                pairs.append((silo, codec.read_silo_message(reply.content)))
            except ValueError as exc:
                self._note("malformed_reply", round=rnd, silo=silo, reason=str(exc))
                pairs.append((silo, None))
        self._note_rejections()
        self.theta, self.w, used = self.server.update(self.theta, self.w, pairs, rnd)
        self.rounds_answered += bool(len(used))
        for j in used:
            self.answered_by[int(j)] = self.answered_by.get(int(j), 0) + 1
        self._note_rejections(skip_no_reply=True)
        return codec.model_arrays(self.theta, self.w), MetricRecord({"silos_used": float(len(used))})

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
                           ) -> Iterable[Message]:
        return [self._message(node, "evaluate", arrays=arrays, **codec.model_config(self.theta))
                for node, silo in self.silo_of.items() if silo in self.plans]

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Test-size-weighted mean of the silos' local metrics (each silo's a DP release unless its
        node config allows exact evaluation); a metric some silo did not send is left out."""
        rows = [dict(r.content["metrics"]) for _, r in replies if r is not None and not r.has_error()]  # type: ignore[misc]
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

    def _theta0(self, d: int) -> np.ndarray:
        """θ₀: zeros for the linear model; the initial parameters of the model factory's module
        (initialised from its public ``init_seed``) for a deep model."""
        if self.model is None:
            return np.zeros((d + 1) * (self.n_classes - 1))
        from pfair.flower.models import build_module
        from pfair.providers.torch import module_theta

        return module_theta(build_module(self.model, allowed=self.model["factory"]))

    # ------------------------------------------------------------------ the run
    def start(self, grid: Grid, initial_arrays: ArrayRecord | None = None, num_rounds: int | None = None,
              timeout: float | None = None, train_config: ConfigRecord | None = None,
              evaluate_config: ConfigRecord | None = None, evaluate_fn: Any = None) -> dict[str, Any]:  # type: ignore[override]
        """Run the whole protocol; returns the result that :func:`main` writes (a dict)."""
        st = self.settings
        t0 = time.monotonic()
        self.summary()
        answers = self._wait_for_silos(grid)
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
                            theta0=lambda: self._theta0(d), groups=np.arange(self.n_groups),
                            classes=np.arange(self.n_classes), proportions=lambda: self._proportions(plan, answers),
                            held_out=[h if st.validation_share > 0 else self.sizes[j] for j, h in enumerate(held)],
                            keep_exact=False, on_state=adopt)
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
        theta, w = snapshot if snapshot is not None else (self.theta, self.w)
        evaluation = None
        if self.do_evaluate:
            final = codec.model_arrays(theta, w)
            evaluation = self.aggregate_evaluate(T, self._exchange(grid, list(self.configure_evaluate(T, final, ConfigRecord(), grid)),
                                                                    self.round_timeout))  # type: ignore[arg-type]
        reports = self._ledger_reports(grid)
        return {
            "status": "completed", "run_id": self.run_id, "theta": theta.tolist(), "w": w.tolist(),
            "n_features": d, "n_groups": self.n_groups, "n_classes": self.n_classes, "rounds": T, "model": self.model,
            "rounds_per_epoch": R, "settings": st.as_dict() | {"p_s": _p_s_json(st)},
            "proportions": proportions.tolist(),
            "refusals": {str(j): r for j, r in sorted(self.refusals.items())},
            "silos": [{"silo": j, "n_records": self.sizes.get(j), "plan": self.plans.get(j),
                       "refused": j in self.refused, "reason": self.refusals.get(j), "ledger": reports.get(j),
                       "rounds_answered": self.answered_by.get(j, 0)} for j in range(self.n_silos)],
            "evaluation": dict(evaluation) if evaluation is not None else None,
            "events": self.events,
            "lam": self.lam_path,
            "checkpoints": [dataclasses.asdict(f) for f in state.checkpoints],
            "selected_epoch": None if state.selected is None else state.selected + 1,
            "selection_warning": state.selection_warning,
            "timing": {"silos_joined_s": t_joined, "setup_s": t_setup, "round_s": self.round_seconds},
        }


class FlowerTransport:
    """The rounds of a run as Flower messages: the transport of the one epoch loop
    (:class:`~pfair.protocol.driver.Driver`) when the silos are ClientApps.

    Each round it greets SuperNodes that (re)joined, sends θ and W to every silo that has not
    refused, waits for the replies within the round timeout and hands them to the server
    (:meth:`SteFFLeStrategy.aggregate_train`, which validates them). A silo charges its own ledger
    when it answers; one that refused (budget spent) is not asked again."""

    def __init__(self, strategy: SteFFLeStrategy, grid: Grid, plan: RunPlan) -> None:
        self.strategy, self.grid, self.plan = strategy, grid, plan

    def answering(self, epoch: int, refused: set) -> list[int]:
        refused |= self.strategy.refused
        return [j for j in range(self.strategy.n_silos) if j not in refused]

    def rounds(self, theta: np.ndarray, w: np.ndarray, epoch: int, *, lr: float, active: list[int],
               refused: set) -> EpochOutcome:
        strat, grid, plan = self.strategy, self.grid, self.plan
        strat.theta, strat.w = theta, w
        arrays = codec.model_arrays(theta, w)
        snapshot, used = None, 0
        start = plan.epoch_start(epoch)
        for rnd in range(start, start + plan.rounds_per_epoch):
            if len(strat.refused) >= strat.n_silos:
                strat._note("all_refused", round=rnd)
                break
            new = strat._new_nodes(grid, rnd)
            if new:
                strat._hello(grid, new, rnd)
            t_round = time.monotonic()
            msgs = list(strat.configure_train(rnd + 1, arrays, ConfigRecord(), grid))
            replies = strat._exchange(grid, msgs, strat.round_timeout)
            arrays, metrics = strat.aggregate_train(rnd + 1, replies)  # type: ignore[arg-type]
            used = max(used, int(metrics["silos_used"]))
            strat._report_progress(rnd + 1, plan.total_rounds, int(metrics["silos_used"]))
            strat.round_seconds.append(time.monotonic() - t_round)
            if plan.pick == rnd:
                snapshot = (strat.theta.copy(), strat.w.copy())
            if not np.all(np.isfinite(strat.theta)):
                raise FloatingPointError(f"training diverged at round {rnd}")
        refused |= strat.refused
        return EpochOutcome(strat.theta, strat.w, used, {}, snapshot)

    def checkpoint(self, theta: np.ndarray, epoch: int, active: list[int], refused: set) -> list:
        self.strategy.theta = theta
        pairs = self.strategy._checkpoint(self.grid, epoch)
        refused |= self.strategy.refused
        return pairs


def _reason(reply: Message | None) -> str:
    if reply is None:
        return "no reply within the round timeout"
    if reply.has_error():
        return f"code {reply.error.code}: {reply.error.reason}"
    return ""


def _p_s_json(settings: SteFFLeSettings) -> Any:
    p = settings.p_s
    return p if isinstance(p, str) else np.asarray(p, dtype=np.float64).tolist()


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point: settings and sizes from the run config, the result to ``out``."""
    rc = context.run_config
    from pfair.flower.models import parse_model_spec

    st = settings_from_run_config(rc)
    strategy = SteFFLeStrategy(st, n_silos=int(rc["n-silos"]), n_groups=int(rc["n-groups"]),
                               n_classes=int(rc["n-classes"]), wait_timeout=float(rc["wait-timeout"]),
                               round_timeout=float(rc["round-timeout"]), evaluate=bool(rc["evaluate"]),
                               model=parse_model_spec(rc.get("model", "")), progress=str(rc.get("progress", "")))
    write_result(strategy.start(grid), str(rc["out"]))


def write_result(result: dict, out: str) -> None:
    """A ServerApp's result as JSON at ``out`` (atomically; nothing when ``out`` is empty)."""
    if out:
        import os

        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1, default=float)
        os.replace(tmp, out)
