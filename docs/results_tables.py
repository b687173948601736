"""Markdown tables for docs/results.md from a sweep's summary (``pfair summary DIR`` writes it).

    python docs/results_tables.py results/paper/summary.csv

One table per (data set, fairness notion): for every (ε, h), SteFFLe's best error, then its
comparison with PF-LD at the matched error e* (violation of each, SteFFLe's reduction, and the
reduction of the mean violation over [e*, trivial error]), and the same reduction against the
non-private, federated SteFFLe (negative: what privacy costs). Definitions: docs/experiments.md.
"""

from __future__ import annotations

import math
import sys

import pandas as pd


def _pct(v: float) -> str:
    return "—" if not math.isfinite(v) else f"{100 * v:+.0f}%"


def _num(v: float) -> str:
    return "—" if not math.isfinite(v) else f"{v:.4f}"


def _cell(row: pd.Series | None) -> tuple[str, ...]:
    """(V_SteFFLe(e*), V_method(e*), reduction, range reduction) or why there is no comparison."""
    if row is None:
        return ("—",) * 4
    if row["status"] != "compared":
        return ("—", "—", str(row["status"]), "—")
    return (_num(row["reference_violation"]), _num(row["violation"]), _pct(row["reduction"]),
            _pct(row["range_reduction"]))


def tables(summary: pd.DataFrame) -> str:
    out = []
    private = summary[summary["epsilon"].apply(math.isfinite)]
    for (ds, fair), grp in private.groupby(["dataset", "fairness"], sort=False):
        trivial = grp["trivial_error"].iloc[0]
        out.append(f"**{ds}, {fair.replace('_', ' ')}** (trivial error {trivial:.4f})\n")
        out.append("| ε | h | SteFFLe min error | SteFFLe min violation | V_SteFFLe(e*) | V_PF-LD(e*) | vs PF-LD | "
                   "range | vs non-private SteFFLe |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        for (eps, h), rows in grp.groupby(["epsilon", "heterogeneity"], sort=True):
            by = {r["method"]: r for _, r in rows.iterrows()}
            ref = by.get("steffle")
            if ref is None:
                continue
            v_s, v_p, red, rng = _cell(by.get("pfld"))
            np_cell = _cell(by.get("nonprivate_steffle"))
            ref_txt = (_num(ref["min_error"]), _num(ref["min_violation"])) if not ref["collapsed"] else ("collapsed", "—")
            out.append(f"| {eps:g} | {h:g} | {ref_txt[0]} | {ref_txt[1]} | {v_s} | {v_p} | {red} | {rng} | "
                       f"{np_cell[2]} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(tables(pd.read_csv(sys.argv[1] if len(sys.argv) > 1 else "results/paper/summary.csv")))
