"""Pinned runs of the run engine: the fitted model, report and history of a standard, a
record-mode, a target, a hybrid, a resumed and a warm-started run, and of the party loop.

The values in ``tests/data/engine_pins.json`` were written by this file's :func:`main` with the
code of the commit named in the file (``"made_with"``), before the run assembly moved into
``pfair.protocol.assembly``: ``test_engine_pins.py`` runs the same fits with the code under test
and asks for the same values: the same bits but for the last digits of floats, which move with the
CPU (``test_engine_pins.REL``); ``tools/same_bits.py`` compares two commits to the bit on one
machine. Regenerate only for a change that is meant to move a release, and say why in its commit::

    PYTHONPATH=python:tests python tests/engine_pins.py --write

A new run is pinned with ``--add`` (the existing pins stay as they are; ``"added_with"`` names the
commit each added run was made with).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

PINS = Path(__file__).resolve().parent / "data" / "engine_pins.json"


def _data(n: int = 900, seed: int = 0) -> tuple:
    from support import toy_data

    return toy_data(n, seed, minority=0.35, weights=(1.0, 0.5), noise=0.3)


def _fed(n: int = 900) -> Any:
    from pfair import Federation

    X, y, s, silos = _data(n)
    return Federation.from_arrays(X, y, sensitive_features=s, silos=silos)


#: ``clip=0.25``: the pins were made when it was the private default of every mode; since the
#: adaptive clip became attribute mode's default, the runs below keep the fixed clip (so its path is
#: still pinned) and ``*_adaptive`` pin the adaptive one.
BASE = dict(lam=1.0, epochs=4, batch_size=64, lr_theta=0.5, seed=3, noise_seed=5, clip=0.25)


def _fit(**kw: Any) -> Any:
    from pfair import SteFFLe

    X, y, s, silos = _data()
    return SteFFLe(**{**BASE, **kw}).fit(X, y, sensitive_features=s, silos=silos, eval_set=(X[:200], y[:200], s[:200]))


def _hybrid(mode: str, **kw: Any) -> Any:
    from pfair import SteFFLe

    X, y, s, silos = _data()
    extra = {"sensitive_silos": np.arange(len(y)) % 3} if mode == "hybrid" else {}
    return SteFFLe(**{**BASE, "mode": mode, **kw}).fit(X, y, sensitive_features=s, silos=silos, **extra)


def _resumed(protect: str) -> Any:
    from pfair import SteFFLe
    from support import fit_interrupted

    f = _fed()
    m = SteFFLe(**{**BASE, "epochs": 5, "epsilon": 1.0, "protect": protect})
    fit_interrupted(m, f, at_epoch=3)
    return m.fit(f, resume=True)


def _warm() -> Any:
    from pfair import SteFFLe

    f = _fed()
    m = SteFFLe(**{**BASE, "epsilon": 2.0, "warm_start": True}).fit(f, ledgers="new")
    return m.fit(f, ledgers="new")


def _party_loop(**kw: Any) -> Any:
    """The standard topology through the party loop (``fast=False``), read off the run state."""
    from pfair import SteFFLe
    from pfair.protocol.simulation import Simulation

    st = SteFFLe(**{**BASE, "epsilon": 1.0, "output": "random", **kw}).settings()
    sim = Simulation(st, _fed(), ledgers="new", fast=False)
    state = sim.run()

    class Run:  # the same fields as a fitted estimator's
        theta_ = state.snapshot[0]
        W_ = state.w
        history_ = None
        privacy_report_ = None
        checkpoints_ = None

    Run.epsilon = [ledger.epsilon_spent() for ledger in sim.ledgers]
    return Run


#: name → the fit that makes it (every one with reproducible noise: ``noise_seed``).
RUNS: dict[str, Callable[[], Any]] = {
    "standard": lambda: _fit(epsilon=1.0),
    "standard_nonprivate": lambda: _fit(epsilon=None, clip="auto"),
    "record": lambda: _fit(epsilon=2.0, protect="record"),
    "target": lambda: _target(),
    # validation_share=0: what the hybrid topologies' default was before they held records out
    # (these pins were made then, and a hybrid run without a held-out share must not move).
    "hybrid": lambda: _hybrid("hybrid", epsilon=1.0, p_s=[0.65, 0.35], validation_share=0.0),
    "divisions_dp": lambda: _hybrid("divisions", epsilon=2.0, validation_share=0.0),
    "central_sensitive": lambda: _hybrid("central_sensitive", epsilon=1.0, p_s=[0.65, 0.35], validation_share=0.0),
    # The default hybrid fit (10 % held out, checkpoints, selection) and a hybrid fairness target.
    "hybrid_validated": lambda: _hybrid("hybrid", epsilon=1.0, p_s=[0.65, 0.35]),
    "divisions_validated_dp": lambda: _hybrid("divisions", epsilon=2.0),
    "hybrid_target": lambda: _hybrid("hybrid", epsilon=2.0, p_s=[0.65, 0.35], max_violation=0.05, epochs=6),
    "resumed_attribute": lambda: _resumed("attribute"),
    "resumed_record": lambda: _resumed("record"),
    "warm_start": _warm,
    "party_loop": _party_loop,
    # The adaptive clip (the default private run's since it was added), in-process and through the
    # party loop (as a deployed silo answers).
    "standard_adaptive": lambda: _fit(epsilon=1.0, clip="adaptive"),
    "party_loop_adaptive": lambda: _party_loop(clip="adaptive"),
}


def _target() -> Any:
    from pfair import SteFFLe

    X, y, s, silos = _data()
    kw = {k: v for k, v in BASE.items() if k not in ("lam", "epochs")}
    return SteFFLe(**kw, epsilon=2.0, max_violation=0.05, epochs=6).fit(X, y, sensitive_features=s, silos=silos)


def _frame(frame: Any) -> Any:
    """A DataFrame as ``{"index": [...], "columns": {name: [...]}}`` of plain Python values (floats
    kept to the bit by ``json``'s ``repr``)."""
    if frame is None:
        return None

    def plain(v: Any) -> Any:
        if isinstance(v, (np.floating, float)):
            return float(v)
        if isinstance(v, (np.integer,)):
            return int(v)
        if isinstance(v, np.bool_):
            return bool(v)
        if isinstance(v, str):
            return str(v)
        return v

    return {"index": [plain(i) for i in frame.index],
            "columns": {str(c): [plain(v) for v in frame[c]] for c in frame.columns}}


#: Columns of ``checkpoints_`` added after the pins were made, read off the pinned ones
#: (``violation_sd`` of the release, ``meets_target`` = v̂ + sd ≤ t): not pinned, so that the pins
#: stay those of the engine's releases (``tests/test_target.py`` checks them).
DERIVED_CHECKPOINT_COLUMNS = ("violation_sd", "meets_target")
#: Columns of ``privacy_report_`` added after the pins were made that describe the release rather
#: than add to it (``w_rows``: whether h_W's noise is scaled row by row; a run it changes shows in
#: its θ, W and history): not pinned.
DERIVED_REPORT_COLUMNS = ("w_rows",)


def record(model: Any) -> dict:
    """What is pinned of a fitted estimator (or a run read off the engine)."""
    checkpoints = model.checkpoints_
    if checkpoints is not None:
        checkpoints = checkpoints.drop(columns=[c for c in DERIVED_CHECKPOINT_COLUMNS if c in checkpoints.columns])
    report = model.privacy_report_
    if report is not None:
        report = report.drop(columns=[c for c in DERIVED_REPORT_COLUMNS if c in report.columns])
    out = {"theta_": np.asarray(model.theta_, dtype=np.float64).ravel().tolist(),
           "W_": np.asarray(model.W_, dtype=np.float64).ravel().tolist(),
           "history_": _frame(model.history_), "privacy_report_": _frame(report),
           "checkpoints_": _frame(checkpoints)}
    for name in ("selected_epoch_", "lam_", "epochs_done_", "n_rounds_", "epsilon"):
        value = getattr(model, name, None)
        if value is not None:
            out[name] = value if not isinstance(value, (np.floating, np.integer)) else value.item()
    return out


def run(name: str) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return record(RUNS[name]())


def same(a: Any, b: Any, where: str = "", rel: float = 0.0) -> list[str]:
    """Where ``a`` and ``b`` differ (floats to the bit, or, with ``rel`` > 0, to within ``rel``
    times the larger magnitude, and ``rel`` absolutely near 0; NaN equal to NaN)."""
    if isinstance(a, float) and isinstance(b, float):
        if (math.isnan(a) and math.isnan(b)) or a == b:
            return []
        if rel and math.isclose(a, b, rel_tol=rel, abs_tol=rel):
            return []
        return [f"{where}: {a!r} != {b!r}"]
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{where}: keys {sorted(set(a) ^ set(b))} differ"]
        return [d for k in a for d in same(a[k], b[k], f"{where}.{k}", rel)]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same(x, y, f"{where}[{i}]", rel)]
    return [] if a == b and type(a) is type(b) else [f"{where}: {a!r} != {b!r}"]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    import pfair

    commit = subprocess.run(["git", "-C", str(Path(pfair.__file__).resolve().parent), "rev-parse", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    pins = {"made_with": {"commit": commit},
            "runs": {name: run(name) for name in RUNS}}
    if "--add" in argv:
        # Pin the runs not pinned yet, leaving every existing pin (and the commit it names) as it is.
        old = json.loads(PINS.read_text())
        added = {name: run(name) for name in RUNS if name not in old["runs"]}
        old["runs"].update(added)
        old.setdefault("added_with", {}).update({name: commit for name in added})
        PINS.write_text(json.dumps(old, indent=1) + "\n")
        print(f"added {sorted(added)} to {PINS} (commit {commit})")
        return
    if "--write" in argv:
        PINS.parent.mkdir(exist_ok=True)
        PINS.write_text(json.dumps(pins, indent=1) + "\n")
        print(f"wrote {PINS} ({len(pins['runs'])} runs, commit {commit})")
    else:
        print(json.dumps({k: v["theta_"][:3] for k, v in pins["runs"].items()}, indent=1))


if __name__ == "__main__":
    main()
