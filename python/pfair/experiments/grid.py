r"""The comparison grid behind ``docs/results.md``, as data, with a one-command runner.

Every method gets the **same tuning budget**: :data:`BUDGET` configurations per (setting, seed).
A method with a knob gets 6 knob values × 2 step sizes; a method without a knob (FedAvg, central
ERM: they are single points, not trade-offs) gets 12 step sizes. The knob ranges are chosen so
that each method reaches its own low-violation end (checked by the pilot, see
``docs/experiments.md``): λ up to 8 for the FERMI family (at λ = 2 COMPAS's violation had not
floored), λ_max up to 8 for PF-LD, a constraint bound from 0.16 (≈ unconstrained) down to 0.005
for ExponentiatedGradient (smaller is fairer there), ρ_o up to 2,560 for the single-shot method.

Parts (each a list of sweeps; every method writes to its own directory ``OUT/<part>/<method>``
so that one method can be rerun by deleting its directory, e.g. after a change to SteFFLe's
optimiser)::

    paper   Credit Card, Adult, COMPAS × demographic parity, equalized odds × ε ∈ {1, 3, 9}
            × h ∈ {0, 0.75} × N = 3 × 15 seeds, every method
    fig2    Credit Card, demographic parity, ε = 1: h ∈ {0, 0.1, …, 0.9} at N = 3, and
            N ∈ {1, 2, 3, 4, 6, 8, 10, 12} at h ∈ {0, 0.75}; SteFFLe and FedAvg, 15 seeds

``python -m pfair.experiments.grid --out results`` runs everything (resumable), then writes the
summaries, the figures and the markdown tables (:mod:`pfair.experiments.report`).
``--dry-run`` prints the cell counts and the estimated compute instead; ``--methods``,
``--parts``, ``--datasets`` and ``--seeds`` restrict the grid (e.g. the non-private references alone:
``--methods central_erm,fedavg,fermi,eg``).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from pfair.experiments.methods import METHODS, check_methods
from pfair.experiments.report import write_report
from pfair.experiments.sweep import VAL_FRACTION, Cell, _check_datasets, expand_grid, run_sweep

__all__ = ["BUDGET", "METHOD_GRIDS", "PARTS", "Sweep", "sweeps", "cells", "estimate_seconds", "run_grid", "main"]

#: Configurations per method, (setting, seed): the shared tuning budget.
BUDGET = 12

_LAMS = [0.0, 0.5, 1.0, 2.0, 4.0, 8.0]

#: Epochs and batch of the methods whose runs were made before SteFFLe's defaults were chosen on
#: validation splits (PF-LD, the single-shot method, FedAvg, central ERM, ExponentiatedGradient):
#: their code and defaults have not changed since, so their runs stand.
PINNED_EPOCHS = 40
PINNED_BATCH = 256

#: SteFFLe and its configurations (FERMI, DP-FERMI, non-private SteFFLe) run at today's defaults:
#: the estimator's epochs and ``batch_size="auto"``, with its step size tuned over the two best
#: values of the defaults protocol (docs/optimisation.md, section 4: 0.5, the default, and 1).
_STEFFLE = dict(tuning={"lr_theta": (0.5, 1.0)}, epochs=None, batch_size="auto")


@dataclass(frozen=True)
class MethodGrid:
    """A method's knob values, tuning grid and fixed overrides in the comparison grid.

    ``seeds`` caps the number of seeds (None: the part's), for methods too slow for all of them;
    ``params`` are fixed hyper-parameter overrides (``--param``); ``epochs`` and ``batch_size``
    are passed to the sweep (``None`` and ``"auto"``: the estimator's defaults, as ``pfair
    train`` resolves them)."""

    knobs: tuple[float, ...] = ()
    tuning: dict[str, tuple[float, ...]] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    seeds: int | None = None
    epochs: int | None = PINNED_EPOCHS
    batch_size: int | str = PINNED_BATCH

    def size(self) -> int:
        n = max(1, len(self.knobs))
        for values in self.tuning.values():
            n *= len(values)
        return n


#: Every method's grid: 6 knobs × 2 step sizes, or 12 step sizes without a knob (:data:`BUDGET`).
METHOD_GRIDS: dict[str, MethodGrid] = {
    "steffle": MethodGrid(tuple(_LAMS), **_STEFFLE),
    "nonprivate_steffle": MethodGrid(tuple(_LAMS), **_STEFFLE),
    "fermi": MethodGrid(tuple(_LAMS), **_STEFFLE),
    "dp_fermi": MethodGrid(tuple(_LAMS), **_STEFFLE),
    "pfld": MethodGrid(tuple(_LAMS), {"lr": (0.1, 0.25)}),
    "eg": MethodGrid((0.005, 0.01, 0.02, 0.04, 0.08, 0.16), {"eta0": (0.5, 2.0)}),  # difference_bound
    # ρ_o = 10 × knob, at the method's default 200 outer steps; the pilot on COMPAS had not
    # floored at ρ_o = 80 (DP violation 0.12–0.16) and floored near ρ_o = 640 (0.01)
    "single_shot": MethodGrid((0.0, 1.0, 4.0, 16.0, 64.0, 256.0), {"outer_lr": (0.02, 0.05)}),
    "fedavg": MethodGrid((), {"lr": (0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.35, 0.5, 0.75, 1.0)}),
    "central_erm": MethodGrid((), {"lr": (0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.35, 0.5, 0.75, 1.0)}),
}

#: Methods whose code the private trade-off does not touch (their rows stay valid when SteFFLe's
#: optimiser or accounting changes); FERMI is SteFFLe with ε = None, so it is *not* one of them.
INDEPENDENT_REFERENCES = ("central_erm", "fedavg", "eg")

PAPER_METHODS = ("steffle", "pfld", "dp_fermi", "single_shot", "fedavg", "central_erm", "fermi",
                 "nonprivate_steffle", "eg")


@dataclass(frozen=True)
class Sweep:
    """One call of :func:`pfair.experiments.run_sweep` of a part, for one method."""

    part: str
    method: str
    datasets: tuple[str, ...]
    fairness: tuple[str, ...]
    epsilons: tuple[float, ...]
    heterogeneities: tuple[float, ...]
    silos: tuple[int, ...]
    seeds: int

    def grid(self) -> MethodGrid:
        return METHOD_GRIDS[self.method]

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`~pfair.experiments.sweep.expand_grid` (and ``run_sweep``)."""
        g = self.grid()
        return dict(methods=[self.method], datasets=list(self.datasets), fairness=list(self.fairness),
                    epsilons=list(self.epsilons), heterogeneities=list(self.heterogeneities),
                    silos=list(self.silos), knobs=list(g.knobs) or [0.0],
                    seeds=min(self.seeds, g.seeds) if g.seeds else self.seeds,
                    method_knobs=None, tuning={self.method: {k: list(v) for k, v in g.tuning.items()}})


#: The parts: name → list of (datasets, fairness, ε, h, N, methods).
PARTS: dict[str, list[dict[str, Any]]] = {
    "paper": [dict(datasets=("credit_card", "adult", "compas"), fairness=("demographic_parity", "equalized_odds"),
                   epsilons=(1.0, 3.0, 9.0), heterogeneities=(0.0, 0.75), silos=(3,), methods=PAPER_METHODS)],
    "fig2": [
        dict(datasets=("credit_card",), fairness=("demographic_parity",), epsilons=(1.0,),
             heterogeneities=tuple(round(0.1 * i, 1) for i in range(10)), silos=(3,), methods=("steffle", "fedavg")),
        dict(datasets=("credit_card",), fairness=("demographic_parity",), epsilons=(1.0,),
             heterogeneities=(0.0, 0.75), silos=(1, 2, 3, 4, 6, 8, 10, 12), methods=("steffle", "fedavg")),
    ],
}

#: Seconds per fit on 80% of the training split (the rest is the validation split), one Rust
#: thread, on the project's 2-core machine. The FERMI family at today's defaults: the median
#: ``seconds`` of its grid runs of 2026-11-28 (jobs 2, the machine shared); FERMI and non-private
#: SteFFLe those of 2026-12-07 (their runs at λ > 1 stretched by min(λ, 10)). The others at 40 epochs
#: and batch 256: wall time of single fits on the full training split scaled by 0.8 (SGD methods,
#: EG), and CPU time of single fits on the 80% split (single-shot, 200 outer steps; Credit Card
#: measured, Adult and COMPAS scaled from their 50-step times).
FIT_SECONDS: dict[str, dict[str, float]] = {
    "credit_card": {"central_erm": 0.18, "fedavg": 0.17, "fermi": 0.13, "nonprivate_steffle": 0.15, "steffle": 0.12,
                    "dp_fermi": 0.05, "pfld": 0.8, "eg": 6.0, "single_shot": 2.9},
    "adult": {"central_erm": 0.43, "fedavg": 0.33, "fermi": 0.2, "nonprivate_steffle": 0.18, "steffle": 0.15,
              "dp_fermi": 0.09, "pfld": 0.9, "eg": 8.0, "single_shot": 4.5},
    "compas": {"central_erm": 0.02, "fedavg": 0.03, "fermi": 0.03, "nonprivate_steffle": 0.045, "steffle": 0.03,
               "dp_fermi": 0.01, "pfld": 0.06, "eg": 0.3, "single_shot": 1.3},
}


def sweeps(parts: Sequence[str] = ("paper", "fig2"), methods: Any = None, seeds: int = 15,
           datasets: Any = None) -> list[Sweep]:
    """The sweeps of the chosen parts, one per (part entry, method), restricted to ``methods``
    and ``datasets`` (None: all)."""
    wanted = None if methods is None else set(check_methods(methods))
    keep = None if datasets is None else set(_check_datasets(datasets))
    out = []
    for part in parts:
        if part not in PARTS:
            raise ValueError(f"parts: unknown part {part!r}; choose from {', '.join(PARTS)}")
        for entry in PARTS[part]:
            for method in entry["methods"]:
                names = tuple(d for d in entry["datasets"] if keep is None or d in keep)
                if (wanted is not None and method not in wanted) or not names:
                    continue
                out.append(Sweep(part, method, names, entry["fairness"], entry["epsilons"],
                                 entry["heterogeneities"], entry["silos"], int(seeds)))
    return out


def cells(sweep: Sweep) -> list[Cell]:
    """The cells of one sweep."""
    return expand_grid(**sweep.kwargs())


def estimate_seconds(cell_list: Sequence[Cell]) -> float:
    """Single-core compute of the cells from :data:`FIT_SECONDS` (1 s for unknown pairs)."""
    return float(sum(FIT_SECONDS.get(c.dataset, {}).get(c.method, 1.0) for c in cell_list))


def _directory(out: Path, sweep: Sweep) -> Path:
    return out / sweep.part / sweep.method


def plan(out: str | Path, parts: Sequence[str], methods: Any, seeds: int, datasets: Any = None
         ) -> list[tuple[Sweep, Path, list[Cell]]]:
    """Each sweep with its directory and cells (duplicates across a part's entries removed)."""
    out = Path(out)
    result = []
    seen: dict[Path, set[tuple[str, ...]]] = {}
    for sw in sweeps(parts, methods, seeds, datasets):
        directory = _directory(out, sw)
        keys = seen.setdefault(directory, set())
        new = [c for c in cells(sw) if c.key() not in keys]
        keys.update(c.key() for c in new)
        result.append((sw, directory, new))
    return result


def describe(planned: Sequence[tuple[Sweep, Path, list[Cell]]], jobs: int) -> str:
    """The dry-run text: cells and estimated compute per part and method, and in total."""
    lines = [f"{'part':<6} {'method':<19} {'cells':>7} {'configs':>7} {'seeds':>5} {'core-hours':>10}  directory"]
    total_cells, total_s = 0, 0.0
    for sw, directory, cs in planned:
        s = estimate_seconds(cs)
        total_cells += len(cs)
        total_s += s
        n_seeds = len({c.seed for c in cs})
        lines.append(f"{sw.part:<6} {sw.method:<19} {len(cs):>7} {sw.grid().size():>7} {n_seeds:>5} "
                     f"{s / 3600:>10.2f}  {directory}")
    lines.append(f"total: {total_cells} cells, {total_s / 3600:.2f} core-hours, about {total_s / 3600 / jobs:.2f} h "
                 f"of wall time with {jobs} job(s)")
    return "\n".join(lines)


def run_grid(out: str | Path, *, parts: Sequence[str] = ("paper", "fig2"), methods: Any = None, seeds: int = 15,
             jobs: int = 2, progress: bool = True, val_fraction: float = VAL_FRACTION,
             datasets: Any = None) -> list[Path]:
    """Run (resume) every sweep of the plan, each method at its grid's epochs and batch
    (:class:`MethodGrid`); return the directories written."""
    done = []
    for sw, directory, cs in plan(out, parts, methods, seeds, datasets):
        if not cs:
            continue
        kw = sw.kwargs()
        kw.pop("knobs")
        g = sw.grid()
        print(f"[{sw.part}] {sw.method}: {len(cs)} cells into {directory}", flush=True)
        result = run_sweep(directory, lams=list(g.knobs) or [0.0], epochs=g.epochs, batch_size=g.batch_size,
                           params={sw.method: dict(g.params)} if g.params else None, jobs=jobs,
                           progress=progress, val_fraction=val_fraction, **kw)
        print(f"  ran {result.ran}, skipped {result.skipped}, failed {result.failed} in {result.seconds:.0f} s"
              + (f"; first error: {result.first_error}" if result.failed else ""), flush=True)
        done.append(directory)
    return done


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pfair.experiments.grid",
                                     description="Run the comparison grid of docs/results.md (resumable), then "
                                                 "write its summaries, figures and tables.")
    parser.add_argument("--out", default="results", help="results directory (default results)")
    parser.add_argument("--parts", nargs="+", default=["paper", "fig2"], choices=list(PARTS))
    parser.add_argument("--methods", default=None, help=f"comma-separated subset of {', '.join(METHOD_GRIDS)}")
    parser.add_argument("--datasets", default=None, help="comma-separated subset of the data sets (e.g. compas)")
    parser.add_argument("--seeds", type=int, default=15)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--dry-run", action="store_true", help="print the cells and estimated compute; run nothing")
    parser.add_argument("--no-report", action="store_true", help="do not write summaries, figures and tables")
    parser.add_argument("--docs", default=None,
                        help="also regenerate the generated blocks of this markdown file (docs/results.md)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    try:
        planned = plan(args.out, args.parts, args.methods, args.seeds, args.datasets)
    except ValueError as exc:
        print(f"grid: error: {exc}", file=sys.stderr)
        return 2
    print(describe(planned, args.jobs))
    if args.dry_run:
        return 0
    run_grid(args.out, parts=args.parts, methods=args.methods, seeds=args.seeds, jobs=args.jobs,
             progress=not args.no_progress, datasets=args.datasets)
    if not args.no_report:
        for path in write_report(args.out, docs=args.docs):
            print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
