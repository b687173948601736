"""Private model selection on a Flower deployment: :class:`pfair.model_selection.PrivateSearch`'s
search, each candidate one SteFFLe run on the same SuperNodes.

Every candidate is a run of the deployed protocol; the SuperNodes' ledgers persist in their state
directories, so each run is calibrated to, and charged on top of, the runs before it, exactly as a
fit on a :class:`~pfair.Federation`'s ledgers is. The candidates get the cumulative targets of
:func:`pfair.privacy.tuning.search_targets` and the release shares of
:func:`pfair.model_selection.search_settings`; the choice reads each run's ``checkpoints`` at its
``selected_epoch`` (released figures; never the silos' test shards: the runs are started with
``evaluate=False``, so no evaluation release is charged or read) and uses
:func:`pfair.model_selection.choose_candidate`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from sklearn.base import clone
from sklearn.model_selection import ParameterGrid

from pfair.flower.deploy import run_deployments
from pfair.flower.node import LEDGER_FILE
from pfair.model_selection import PrivateSearch, choose_candidate, figure_columns, search_settings, spends
from pfair.privacy.ledger import PrivacyLedger
from pfair.privacy.tuning import search_targets
from pfair.settings import default_delta
from pfair.validation import CheckpointFigures

__all__ = ["DEPLOY_GRID", "deploy_search"]

#: The grid of ``pfair deploy local --tune``: the step size only (every candidate is a deployed run,
#: and a round costs about a second on Flower, so the batch stays the user's).
DEPLOY_GRID: dict = {"lr_theta": [0.25, 1.0]}


def _ledgers_before(node_configs: Sequence[Mapping[str, Any]]) -> list:
    """The SuperNodes' ledgers as their state directories hold them (None where a node has none yet).
    Read by the launcher of a loopback deployment, which wrote those directories itself."""
    out = []
    for cfg in node_configs:
        path = Path(str(cfg["state-dir"])) / LEDGER_FILE
        out.append(PrivacyLedger.load(path) if path.exists() else None)
    return out


def deploy_search(estimator: Any, param_grid: Any, node_configs: Sequence[Mapping[str, Any]], *, n_groups: int,
                  n_classes: int, max_violation: float | None | str = "auto", workdir: str | os.PathLike | None = None,
                  round_timeout: float = 120.0, wait_timeout: float = 120.0, timeout: float = 3600.0,
                  delta: float | None = None) -> dict[str, Any]:
    """Run every candidate of ``param_grid`` (a :class:`~pfair.SteFFLe` ``estimator``'s parameters,
    as :class:`~pfair.model_selection.PrivateSearch`) as one run on one loopback deployment of
    ``node_configs`` (:func:`pfair.flower.deploy.write_federation`; each node's ``epsilon`` its
    budget, at least the estimator's), and choose one from the released figures.

    ``delta``: the δ the budget split is computed at (default: the estimator's ``delta``, else the
    smallest δ among the nodes' existing ledgers, else 1/n² of the node config's ``n-records`` when
    given, else 1e-10). It only shapes the split; each node calibrates at its own δ and its ledger
    ends at most at the estimator's ε whatever the split.

    Returns ``{"best_index", "best_params", "best" (the chosen run's result), "runs" (every run's
    result), "results" (one row per candidate: parameters, epsilon_target, status, the figures of
    its returned model, chosen), "selection_warning", "epsilon_spent" (each silo's ledger after the
    search, as the nodes reported it), "accounting": "composition"}``. A run every silo refused
    (``status == "refused"``: budget spent or too small; nothing trained or released) is never
    chosen, and the warning names it; when every run was refused, ``best`` is the first run's
    refusal (``pfair deploy local --tune`` then reports the silos' reasons and exits 3)."""
    search = PrivateSearch(estimator, param_grid, max_violation=max_violation)
    grid = search._candidates()
    target = search._target(grid)
    defaults = estimator.get_params(deep=False)
    if defaults.get("epsilon") is None:
        raise ValueError("deploy_search: a deployment is private; set the estimator's epsilon (the search's budget)")
    total = float(defaults["epsilon"])
    ledgers = _ledgers_before(node_configs)
    spent = max((led.epsilon_spent() for led in ledgers if led is not None), default=0.0)
    if delta is None:
        delta = defaults.get("delta")
    if delta is None:
        known = [led.delta for led in ledgers if led is not None]
        sizes = [int(c["n-records"]) for c in node_configs if "n-records" in c]
        delta = min(known) if known else min(default_delta(n) for n in sizes) if sizes else 1e-10
    extra = [search._target_param(params, target) for params in grid]
    pays = [spends(clone(estimator).set_params(**params, **x)) for params, x in zip(grid, extra)]
    paid = search_targets(total, float(delta), max(1, sum(pays)), spent=spent)
    targets = [paid[min(sum(pays[:i]), len(paid) - 1)] for i in range(len(grid))]
    settings = []
    for i, params in enumerate(grid):
        p = search_settings(params, epsilon_i=targets[i], epsilon_1=paid[0], defaults=defaults)
        p.update(extra[i])
        settings.append(clone(estimator).set_params(**p).settings())
    runs = run_deployments(settings, node_configs, n_groups=n_groups, n_classes=n_classes, workdir=workdir,
                           round_timeout=round_timeout, wait_timeout=wait_timeout, timeout=timeout, evaluate=False)
    figures = []
    rows = []
    for i, (params, res) in enumerate(zip(grid, runs)):
        refused = res.get("status") == "refused"  # every silo refused: nothing trained, nothing released
        figs = [CheckpointFigures(**f) for f in res.get("checkpoints") or []]
        epoch = res.get("selected_epoch")
        fig = next((f for f in figs if epoch is not None and f.epoch + 1 == epoch), None)
        figures.append(None if refused else fig)
        row = {f"param_{k}": v for k, v in params.items()}
        spent = [float(s["ledger"]["epsilon_spent"]) for s in res.get("silos", []) if s.get("ledger")]
        row.update({"epsilon_target": targets[i], "status": res.get("status"), "selected_epoch": epoch,
                    **figure_columns(None if refused else fig), "epsilon_spent": max(spent) if spent else None})
        rows.append(row)
    done = [i for i, res in enumerate(runs) if res.get("status") != "refused"]
    if done:
        best, why = choose_candidate([figures[i] for i in done], target)
        best = done[best]
        if len(done) < len(runs):
            note = (f"the silos refused the runs of candidate(s) {[i for i in range(len(runs)) if i not in done]} "
                    "(budget spent or too small), which were left out")
            why = note if why is None else f"{why}; {note}"
    else:  # nothing was trained: the first run's refusal is the search's result (its reasons, its ledgers)
        best, why = 0, "the silos refused every candidate's run (budget spent or too small): nothing was trained"
    for i, row in enumerate(rows):
        row["chosen"] = i == best and bool(done)
    last = runs[-1]["silos"]
    return {"best_index": best, "best_params": dict(grid[best]), "best": runs[best], "runs": runs, "results": rows,
            "selection_warning": why, "target": target, "accounting": "composition",
            "epsilon_spent": [None if not s.get("ledger") else float(s["ledger"]["epsilon_spent"]) for s in last]}
