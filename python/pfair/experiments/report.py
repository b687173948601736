r"""Markdown tables, summaries and figures of the comparison grid (:mod:`pfair.experiments.grid`).

``write_report(out)`` reads every ``runs.csv`` under ``out/<part>/<method>/``, writes
``out/<part>/summary.csv``, ``out/<part>/plots/`` and ``out/<part>/tables.md``, and, given
``docs=``, replaces the generated blocks of that markdown file (``docs/results.md``)::

    <!-- generated:NAME -->
    ...replaced...
    <!-- /generated:NAME -->

Blocks (every number from the runs; a block whose runs are missing says what is pending):

* ``references``: the non-private references' ends (most accurate and fairest selected
  configuration, test numbers) per data set, notion and h;
* ``matched``: SteFFLe's reduction of the test violation at matched (validation) error e*
  against every other method, per data set, notion, ε and h;
* ``band``: the same for the mean violation over the error band [e*, trivial error];
* ``verdict``: per data set, notion and ε, SteFFLe against the *best* private baseline (the one
  with the lowest violation at e*, resp. over the band), next to the paper's claims;
* ``fig2``: the h and N sweeps (SteFFLe at ε = 1, Credit Card, demographic parity): its most
  accurate and fairest selected configuration per h and per N.

Definitions: ``docs/experiments.md`` and :mod:`pfair.experiments.summary`.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from pfair.experiments.methods import METHODS
from pfair.experiments.plots import plot_results
from pfair.experiments.summary import selected_front, summarize, tradeoff_points
from pfair.experiments.sweep import RUNS_FILE, load_runs

__all__ = ["collect_runs", "tables", "replace_blocks", "write_report", "PRIVATE_BASELINES", "PAPER_CLAIMS"]

#: A configuration counts only when its validation error is below the trivial error − this
#: margin, and the band ends there: a model within a point of the constant predictor's error is
#: the constant predictor for every practical purpose, and letting it in would reward collapsing
#: to it (violation 0) at the end of the band.
MARGIN = 0.01

#: The private methods SteFFLe must beat ("the best tuned baseline").
PRIVATE_BASELINES = ("pfld", "dp_fermi")

#: Gupta, Poornash, Razaviyayn and Lowy (2024): SteFFLe's violation reduction at matched error
#: ("−64%" demographic parity, "−95%" equalized odds violation), in this module's sign convention
#: (positive: SteFFLe's violation is lower).
PAPER_CLAIMS = {"demographic_parity": 0.64, "equalized_odds": 0.95}

_LABEL = {"steffle": "SteFFLe", "pfld": "PF-LD", "dp_fermi": "DP-FERMI", "single_shot": "single-shot",
          "fedavg": "FedAvg", "central_erm": "central ERM", "fermi": "FERMI", "nonprivate_steffle": "SteFFLe (σ = 0)",
          "eg": "ExpGrad"}


def collect_runs(part_dir: str | Path) -> pd.DataFrame:
    """Every row of every ``runs.csv`` under ``part_dir`` (one directory per method), or of
    ``part_dir/runs.csv`` itself; an empty frame when there is none."""
    base = Path(part_dir)
    files = sorted(base.glob(f"*/{RUNS_FILE}")) + ([base / RUNS_FILE] if (base / RUNS_FILE).exists() else [])
    frames = [load_runs(f) for f in files if f.stat().st_size > 0]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _pct(v: float) -> str:
    if not isinstance(v, (int, float, np.floating)) or math.isnan(v):
        return "—"
    if math.isinf(v):
        return "−∞" if v < 0 else "+∞"
    return f"{100 * v:+.0f}%".replace("-", "−")


def _num(v: float) -> str:
    return "—" if not isinstance(v, (int, float, np.floating)) or not math.isfinite(v) else f"{v:.3f}"


def _label(method: str) -> str:
    return _LABEL.get(method, method)


def _order(methods: Sequence[str]) -> list[str]:
    names = list(METHODS)
    return sorted(set(methods), key=lambda m: (names.index(m) if m in names else len(names), m))


def _title(ds: str, fair: str, trivial: float, selection: str) -> str:
    return (f"**{ds}, {fair.replace('_', ' ')}** (trivial {selection} error {trivial:.3f}; configurations count "
            f"below {trivial - MARGIN:.3f})\n")


def references_table(summary: pd.DataFrame) -> str:
    """The non-private methods' selected fronts: most accurate and fairest ends (test numbers)."""
    nonpriv = summary[~summary["private"].astype(bool)]
    if nonpriv.empty:
        return "*pending: no non-private runs yet.*\n"
    out = []
    # non-private rows repeat in every ε setting: keep one
    nonpriv = nonpriv.drop_duplicates(["dataset", "fairness", "heterogeneity", "silos", "method"])
    for (ds, fair), grp in nonpriv.groupby(["dataset", "fairness"], sort=False):
        out.append(_title(ds, fair, grp["trivial_error"].iloc[0], grp["selection"].iloc[0]))
        out.append("| h | method | configs | seeds | most accurate: test error | its violation | fairest: test error "
                   "| its violation |")
        out.append("|---|---|---|---|---|---|---|---|")
        for h, rows in grp.groupby("heterogeneity", sort=True):
            for _, r in rows.set_index("method").loc[_order(rows["method"])].reset_index().iterrows():
                if r["collapsed"]:
                    out.append(f"| {h:g} | {_label(r['method'])} | {r['n_points']} | {r['n_seeds']} | collapsed | — "
                               "| — | — |")
                    continue
                out.append(f"| {h:g} | {_label(r['method'])} | {r['n_points']} | {r['n_seeds']} | "
                           f"{_num(r['min_test_error'])} | {_num(r['first_violation'])} | "
                           f"{_num(r['last_test_error'])} | {_num(r['min_violation'])} |")
        out.append("")
    return "\n".join(out)


def _comparison_table(summary: pd.DataFrame, column: str) -> str:
    have = summary[summary["method"] == "steffle"]
    if have.empty:
        return "*pending regeneration: no SteFFLe runs in this grid yet (the private grid is rerun once the " \
               "optimiser and accounting changes land).*\n"
    out = []
    private = summary[summary["epsilon"].apply(math.isfinite)]
    others = [m for m in _order(private["method"]) if m != "steffle"]
    for (ds, fair), grp in private.groupby(["dataset", "fairness"], sort=False):
        out.append(_title(ds, fair, grp["trivial_error"].iloc[0], grp["selection"].iloc[0]))
        head = "| ε | h | SteFFLe e_min | e* vs best private | " + " | ".join(f"vs {_label(m)}" for m in others) + " |"
        out.append(head)
        out.append("|" + "---|" * (4 + len(others)))
        for (eps, h), rows in grp.groupby(["epsilon", "heterogeneity"], sort=True):
            by = {r["method"]: r for _, r in rows.iterrows()}
            ref = by.get("steffle")
            if ref is None:
                continue
            best = _best_private(by, "violation")
            cells = []
            for m in others:
                r = by.get(m)
                if r is None:
                    cells.append("—")
                elif r["status"] != "compared":
                    cells.append(str(r["status"]))
                else:
                    cells.append(_pct(r[column]))
            e_min = "collapsed" if ref["collapsed"] else _num(ref["min_error"])
            out.append(f"| {eps:g} | {h:g} | {e_min} | {_num(best['matched_error']) if best is not None else '—'} | "
                       + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def _best_private(by: dict[str, Any], column: str) -> Any:
    """The compared private baseline with the lowest ``column`` (its violation at e* or over the band)."""
    cands = [by[m] for m in PRIVATE_BASELINES if m in by and by[m]["status"] == "compared"
             and math.isfinite(by[m][column])]
    return min(cands, key=lambda r: r[column]) if cands else None


def verdict_table(summary: pd.DataFrame) -> str:
    """SteFFLe against the best private baseline per (data set, notion, ε), next to the paper."""
    if summary[summary["method"] == "steffle"].empty:
        return "*pending regeneration: no SteFFLe runs yet.*\n"
    out = ["| data set | notion | ε | h | best at e* | SteFFLe vs it at e* | best over band | SteFFLe vs it over band "
           "| paper (at matched error) |", "|---|---|---|---|---|---|---|---|---|"]
    private = summary[summary["epsilon"].apply(math.isfinite)]
    for (ds, fair, eps, h), rows in private.groupby(["dataset", "fairness", "epsilon", "heterogeneity"], sort=True):
        by = {r["method"]: r for _, r in rows.iterrows()}
        if "steffle" not in by:
            continue
        at = _best_private(by, "violation")
        band = _best_private(by, "mean_violation")
        paper = _pct(PAPER_CLAIMS.get(fair, math.nan))
        at_txt = (_label(at["method"]), _pct(at["reduction"])) if at is not None else ("—", "—")
        band_txt = (_label(band["method"]), _pct(band["range_reduction"])) if band is not None else ("—", "—")
        out.append(f"| {ds} | {fair.replace('_', ' ')} | {eps:g} | {h:g} | {at_txt[0]} | {at_txt[1]} | "
                   f"{band_txt[0]} | {band_txt[1]} | {paper} |")
    return "\n".join(out) + "\n"


def fig2_table(summary: pd.DataFrame) -> str:
    """SteFFLe's selected front ends per h and per N (ε = 1)."""
    s = summary[(summary["method"] == "steffle") & (summary["epsilon"] == 1.0)]
    if s.empty:
        return "*pending regeneration: no SteFFLe runs in the h and N sweeps yet.*\n"
    out = ["| h | N | configs | seeds | most accurate: test error | fairest: test error | fairest: violation |",
           "|---|---|---|---|---|---|---|"]
    for _, r in s.sort_values(["silos", "heterogeneity"]).iterrows():
        out.append(f"| {r['heterogeneity']:g} | {r['silos']} | {r['n_points']} | {r['n_seeds']} | "
                   f"{_num(r['min_test_error'])} | {_num(r['last_test_error'])} | {_num(r['min_violation'])} |")
    return "\n".join(out) + "\n"


def _with_ends(summary: pd.DataFrame, runs: pd.DataFrame, margin: float = MARGIN) -> pd.DataFrame:
    """Add the test violation of the most accurate selected point and the test error of the
    fairest one (``first_violation``, ``last_test_error``)."""
    points = tradeoff_points(runs)
    firsts, lasts = [], []
    for _, r in summary.iterrows():
        pts = points[(points["dataset"] == r["dataset"]) & (points["fairness"] == r["fairness"])
                     & (points["heterogeneity"] == r["heterogeneity"]) & (points["silos"] == r["silos"])
                     & (points["method"] == r["method"])
                     & ((points["epsilon"] == r["epsilon"]) | np.isinf(points["epsilon"]))]
        trivial_col = "val_trivial_error" if r["selection"] == "validation" else "trivial_error"
        sel = selected_front(pts.assign(**{trivial_col: r["trivial_error"]}), r["selection"], margin)
        firsts.append(float(sel["violation"].iloc[0]) if len(sel) else math.nan)
        lasts.append(float(sel["test_error"].iloc[-1]) if len(sel) else math.nan)
    return summary.assign(first_violation=firsts, last_test_error=lasts)


def tables(runs: pd.DataFrame, *, part: str = "paper", margin: float = MARGIN) -> dict[str, str]:
    """The markdown blocks of one part's runs (see the module docstring)."""
    if runs.empty:
        return {}
    summary = _with_ends(summarize(runs, margin=margin), runs, margin)
    if part == "fig2":
        return {"fig2": fig2_table(summary)}
    return {"references": references_table(summary), "matched": _comparison_table(summary, "reduction"),
            "band": _comparison_table(summary, "range_reduction"), "verdict": verdict_table(summary)}


_BLOCK = re.compile(r"(<!-- generated:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /generated:(?P=name) -->)", re.S)


def replace_blocks(text: str, blocks: dict[str, str], provenance: str = "") -> str:
    """``text`` with the body of every ``<!-- generated:NAME -->`` block whose NAME is in
    ``blocks`` replaced (other blocks are kept as they are)."""

    def sub(m: re.Match) -> str:
        name = m.group("name")
        if name not in blocks:
            return m.group(0)
        body = blocks[name].rstrip("\n") + "\n"
        if provenance:
            body = f"<!-- {provenance} -->\n" + body
        return m.group(1) + body + m.group(4)

    return _BLOCK.sub(sub, text)


def write_report(out: str | Path, *, docs: str | Path | None = None, parts: Sequence[str] = ("paper", "fig2"),
                 plots: bool = True) -> list[Path]:
    """Summaries, figures and tables of every part found under ``out``; with ``docs``, its
    generated blocks are replaced too. Returns the files written."""
    out = Path(out)
    written: list[Path] = []
    blocks: dict[str, str] = {}
    for part in parts:
        runs = collect_runs(out / part)
        if runs.empty:
            continue
        summary = summarize(runs, margin=MARGIN)
        (out / part).mkdir(parents=True, exist_ok=True)
        summary.to_csv(out / part / "summary.csv", index=False)
        written.append(out / part / "summary.csv")
        part_blocks = tables(runs, part=part)
        blocks.update(part_blocks)
        md = out / part / "tables.md"
        md.write_text("\n".join(f"### {k}\n\n{v}" for k, v in part_blocks.items()))
        written.append(md)
        if plots:
            dirs = sorted({str(p.parent) for p in (out / part).glob("*/runs.csv")})
            written += plot_results(dirs, out=out / part / "plots", formats=("png",), margin=MARGIN)
    if docs is not None:
        path = Path(docs)
        counts = {p: len(collect_runs(out / p)) for p in parts}
        provenance = "generated by python docs/results_tables.py from " + ", ".join(
            f"{p}: {n} runs" for p, n in counts.items())
        path.write_text(replace_blocks(path.read_text(), blocks, provenance))
        written.append(path)
    return written
