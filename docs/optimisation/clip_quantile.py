"""The adaptive clip norm's quantile: which quantile of a batch's s-free bounds B_i to clip to.

At ε = 1, on the acceptance's tables where the non-private fits are well below their mixing line
(Adult, COMPAS and the three synthetic tables of ``convergence.py``), both notions, λ ∈ {1, 3, 8,
20, 40, 100}, seeds 0–2: default SteFFLe fits (``clip="auto"``, which is ``"adaptive"`` for them)
with ``pfair.settings.ADAPTIVE_CLIP_QUANTILE`` set to each quantile, scored like the acceptance's
private criterion (the margin below each seed's own λ = 0 model's mixing line; > 0 is below). The
default quantile's fits are the acceptance's own (``convergence_runs.csv``), the former fixed clip's
are ``convergence_runs_fixedclip.csv``; this script runs the other quantiles into
``clip_quantile.csv`` (resumable) and prints the comparison. Printout: ``clip_quantile_log.txt``.

    python docs/optimisation/clip_quantile.py            # ~30 min on 2 cores
    python docs/optimisation/clip_quantile.py --print    # the comparison from the CSVs only
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

import pfair.settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convergence as cv  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE / "clip_quantile.csv"
TABLES = ["adult", "compas", "synthetic1", "synthetic2", "synthetic3"]
QUANTILES = [0.25, 0.9]
LAMS = [0.0, 1.0, 3.0, 8.0, 20.0, 40.0, 100.0]


def run(tables: list[str]) -> None:
    done = pd.read_csv(OUT) if OUT.exists() else pd.DataFrame(columns=["table", "q"])
    for q in QUANTILES:
        for name in tables:
            if ((done["table"] == name) & (done["q"].astype(float) == q)).any():
                continue
            pfair.settings.ADAPTIVE_CLIP_QUANTILE = q
            df = cv.run_table(name, cv.SEEDS, cv.NOTIONS, LAMS, [1.0]).assign(q=q)
            df.to_csv(OUT, mode="a", header=not OUT.exists(), index=False)
    pfair.settings.ADAPTIVE_CLIP_QUANTILE = 0.5


def comparison() -> str:
    today = pd.read_csv(HERE / "convergence_runs.csv")
    today["epsilon"] = today["epsilon"].astype(str)
    nonprivate = today[today["epsilon"] == "none"]
    np_margin = nonprivate[nonprivate.lam > 0].groupby(["table", "fairness", "lam"])["below_line"].mean()
    runs = {f"q = {q:g}": g for q, g in pd.read_csv(OUT).groupby("q")} if OUT.exists() else {}
    runs[f"q = {pfair.settings.ADAPTIVE_CLIP_QUANTILE:g} (default)"] = today[today["epsilon"] != "none"]
    runs["fixed 0.25 (before)"] = pd.read_csv(HERE / "convergence_runs_fixedclip.csv")
    rows = []
    for label, r in runs.items():
        r = r[(r.lam > 0) & r.table.isin(TABLES)]
        for (table, fairness), sub in r.groupby(["table", "fairness"]):
            m = sub.join(np_margin.rename("np"), on=["table", "fairness", "lam"])
            strong = m[m["np"] >= 0.02]  # where the non-private point is well below its line
            rows.append(dict(table=table, fairness=fairness, clip=label, mean_margin=float(sub["below_line"].mean()),
                             below=f"{int((strong['below_line'] > 0).sum())} of {len(strong)}"))
    out = pd.DataFrame(rows).sort_values(["table", "fairness", "clip"])
    lines = ["| table | fairness | clip | mean margin (all λ) | below the line where the non-private fit is ≥ 0.02 below |",
             "|---|---|---|---|---|"]
    lines += [f"| {r.table} | {r.fairness} | {r.clip} | {r.mean_margin:+.4f} | {r.below} |" for r in out.itertuples()]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", nargs="+", default=TABLES)
    ap.add_argument("--print", action="store_true", help="the comparison from the CSVs only")
    args = ap.parse_args()
    if not args.print:
        run(args.tables)
    print(comparison())


if __name__ == "__main__":
    main()
