"""Private post-processing over Flower: the server side of ``query.score_histogram``.

Given a base model θ (the linear model of a λ = 0 deployed SteFFLe run, say) and interior score bin
edges, the server asks every silo for its DP histogram of θ's scores by (score bin, s, y)
(:meth:`pfair.flower.node.SiloNode.score_histogram`, charged to the silo's ledger), checks each
reply, pools the noisy tables and chooses per-group thresholds from them
(:func:`pfair.postprocessing.choose_thresholds`), as :class:`pfair.PrivateThresholdOptimizer` does in
process. The rule (``q[group, bin]``, the probability of predicting class 1) is applied at
prediction time with each record's s: ``q[s, bin(score(x))]``.

* :func:`score_histogram_message` builds the message a silo answers;
* :func:`read_score_histogram` checks a reply (shape, finite, plausible for the silo's size);
* :func:`thresholds_from_histograms` pools the released tables
  (:func:`pfair.postprocessing.pool_histograms`, as the estimator does) and chooses a rule;
* :class:`ThresholdStrategy` runs all of it over a Flower grid (greeting, one exchange, reports),
  and :data:`app` is its ServerApp.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping, Sequence

import numpy as np
from flwr.app import Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from pfair.fairness_target import implausible
from pfair.flower import codec
from pfair.flower.node import settings_from_run_config
from pfair.flower.server_app import SiloLink, SteFFLeStrategy, reason_of, write_result
from pfair.postprocessing import beyond_resolution, check_margin, choose_thresholds, held_margin, pool_histograms
from pfair.privacy.score_histogram import SCORE_HISTOGRAM_SENSITIVITY, check_edges

MESSAGE_TYPE = "query.score_histogram"


def score_histogram_message(node: int, *, theta: np.ndarray, edges: np.ndarray, epsilon: float, n_groups: int,
                            n_classes: int, model: Mapping[str, Any] | None = None, group: str = "") -> Message:
    """The ``query.score_histogram`` message to ``node``: θ and the edges as arrays, ε and the
    federation's sizes in its config (the silo checks them against its own node config)."""
    cfg = {"n-groups": int(n_groups), "n-classes": int(n_classes), "epsilon": float(epsilon)}
    if model is not None:
        cfg["model"] = json.dumps(dict(model))
    content = RecordDict({"config": codec.config(**cfg),
                          "arrays": codec.arrays(theta=np.asarray(theta, dtype=np.float64),
                                                 edges=check_edges(edges, "edges"))})
    return Message(content, dst_node_id=int(node), message_type=MESSAGE_TYPE, group_id=group)


def read_score_histogram(content: RecordDict, *, n_bins: int, n_groups: int) -> tuple[np.ndarray, dict]:
    """A silo's reply: its noisy ``n_bins × n_groups × 2`` table and its meta (silo, n_records,
    noise_multiplier). Refused (``ValueError``) when malformed, or when the table cannot come from
    ``n_records`` records plus noise of the stated std (a cell or the total 8 noise stds off)."""
    meta = dict(content["meta"]) if "meta" in content else {}
    hist = codec.read_arrays(content["arrays"]).get("histogram") if "arrays" in content else None
    want = (int(n_bins), int(n_groups), 2)
    if hist is None or hist.shape != want or not np.all(np.isfinite(hist)):
        raise ValueError(f"no valid score histogram (shape {want[0]}×{want[1]}×2, finite)")
    z, n = float(meta.get("noise_multiplier", math.nan)), int(meta.get("n_records", -1))
    if not (math.isfinite(z) and z >= 0 and n >= 0):
        raise ValueError("the reply does not state its noise multiplier and number of records")
    why = implausible(hist, n_records=n, std=z * SCORE_HISTOGRAM_SENSITIVITY)
    if why is not None:
        raise ValueError(f"implausible score histogram: {why}")
    return hist, meta


def thresholds_from_histograms(histograms: Sequence[np.ndarray], *, constraints: str = "demographic_parity",
                               max_violation: float = 0.0, margin: float = 0.0) -> Any:
    """Pool the silos' released tables (sum, clamp at 0: post-processing) and choose the rule
    (:func:`pfair.postprocessing.choose_thresholds`, held ``margin`` below the target); returns the
    :class:`~pfair.postprocessing.ThresholdRule` and the pooled table."""
    pooled = pool_histograms(histograms)
    return choose_thresholds(pooled, constraints=constraints, max_violation=max_violation, margin=margin), pooled


class ThresholdStrategy(SteFFLeStrategy):
    """The ServerApp's strategy: greet the silos (``query.hello`` under ``settings``, which a λ = 0
    run with public proportions makes free), ask each for its score histogram of θ, choose the
    thresholds, and collect the silos' ledger reports."""

    def __init__(self, settings: Any, *, theta: np.ndarray, edges: np.ndarray, epsilon: float,
                 constraints: str = "demographic_parity", max_violation: float = 0.0, margin: float | str = "auto",
                 **kw: Any) -> None:
        super().__init__(settings, **kw)
        if self.n_classes != 2:
            raise ValueError(f"post-processing thresholds a score: binary labels only, not {self.n_classes} classes")
        margin = check_margin(margin, "margin (the run config's margin)")
        self.base_theta = np.asarray(theta, dtype=np.float64).ravel()
        self.edges = check_edges(edges, "edges")
        self.epsilon, self.constraints, self.max_violation = float(epsilon), constraints, float(max_violation)
        self.margin = margin

    def run(self, grid: Grid) -> dict[str, Any]:
        self.link = link = SiloLink(grid, n_silos=self.n_silos, common=self.common(), round_timeout=self.round_timeout,
                                    poll=self.poll, progress=self.progress)
        link.wait_for_silos(self.wait_timeout)
        msgs = [score_histogram_message(n, theta=self.base_theta, edges=self.edges, epsilon=self.epsilon,
                                        n_groups=self.n_groups, n_classes=self.n_classes, model=self.model)
                for n in link.silo_of]
        tables, released = {}, {}
        for node, reply in link.exchange(msgs):
            silo = link.silo_of.get(node)
            refusal = None if reply is None or reply.has_error() else codec.read_refusal(reply.content)
            if reply is None or reply.has_error() or refusal is not None:
                self._note("score_histogram_refused", silo=silo, reason=refusal or reason_of(reply))
                continue
            try:
                hist, meta = read_score_histogram(reply.content, n_bins=self.edges.size + 1, n_groups=self.n_groups)
            except ValueError as exc:
                self._note("malformed_reply", silo=silo, reason=str(exc))
                continue
            tables[silo], released[silo] = hist, meta
        pooled = pool_histograms([tables[j] for j in sorted(tables)])
        # How far the pooled noise can move the smallest group's constrained rate (as
        # PrivateThresholdOptimizer.resolution_): the rule's margin below the target with "auto";
        # coarser than the target, it holds on the noisy table only.
        sigma = math.sqrt(sum((float(released[j]["noise_multiplier"]) * SCORE_HISTOGRAM_SENSITIVITY) ** 2
                              for j in tables))
        margin, resolution, _ = held_margin(self.margin, pooled, self.constraints, sigma)
        rule = choose_thresholds(pooled, constraints=self.constraints, max_violation=self.max_violation, margin=margin)
        if beyond_resolution(resolution, self.max_violation):
            self._note("target_beyond_resolution", resolution=resolution, max_violation=self.max_violation)
        reports = link.ledger_reports()
        return {
            "status": "completed", "theta": self.base_theta.tolist(), "edges": self.edges.tolist(),
            "q": rule.q.tolist(), "constraints": self.constraints, "max_violation": self.max_violation,
            "margin": margin,
            "error_released": rule.error, "violation_released": rule.violation,
            "constant_error_released": rule.constant_error, "resolution_released": resolution, "pooled": pooled.tolist(),
            "silos": [{"silo": j, "n_records": self.sizes.get(j), "answered": j in tables,
                       "noise_multiplier": released.get(j, {}).get("noise_multiplier"), "ledger": reports.get(j)}
                      for j in range(self.n_silos)],
            "events": self.events,
        }


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point: the run config of :func:`pfair.flower.deploy.run_config_for` plus ``theta``,
    ``edges`` (JSON lists), ``histogram-epsilon``, ``constraints``, ``max-violation`` and ``margin``
    (``"auto"``, the default, or a number)."""
    rc = context.run_config
    strategy = ThresholdStrategy(settings_from_run_config(rc), theta=json.loads(str(rc["theta"])),
                                 edges=json.loads(str(rc["edges"])), epsilon=float(rc["histogram-epsilon"]),
                                 constraints=str(rc.get("constraints", "demographic_parity")),
                                 max_violation=float(rc.get("max-violation", 0.0)), margin=rc.get("margin", "auto"),
                                 n_silos=int(rc["n-silos"]),
                                 n_groups=int(rc["n-groups"]), n_classes=int(rc["n-classes"]),
                                 wait_timeout=float(rc["wait-timeout"]), round_timeout=float(rc["round-timeout"]),
                                 evaluate=False)
    write_result(strategy.run(grid), str(rc["out"]))
