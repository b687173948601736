"""The adaptive clip norm's quantile: which quantile of a batch's s-free bounds B_i to clip to.

At ε = 1, on the acceptance's tables where the non-private fits are well below their mixing line
(Adult, COMPAS and the three synthetic tables of ``convergence.py``) and the two whose groups are
most uneven (Bank, German), both notions, λ ∈ {0, 1, 3, 8, 20, 40, 100}, seeds 0–2: default
SteFFLe fits (``clip="auto"``, which is ``"adaptive"`` for them) with
``pfair.settings.ADAPTIVE_CLIP_QUANTILE`` set to each quantile, scored like the acceptance (the
margin below each seed's own λ = 0 model's mixing line, > 0 below; error over the constant
predictor's; the rise of the mean violation with λ). The default quantile's fits are the
acceptance's own (``convergence_runs.csv``), the former fixed clip's ``convergence_runs_fixedclip.csv``,
and the first form of the scale (the largest norm over the groups instead of their mean under the
released proportions, main at 476da42) ``convergence_runs_adaptive_max.csv``; this script runs the
other quantiles into ``clip_quantile.csv`` (resumable) and prints the comparison, every CSV read
with the model today's guard returns (``convergence.load_runs``). Printout: ``clip_quantile_log.txt``.

    python docs/optimisation/clip_quantile.py            # ~25 min on 2 cores
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
TABLES = ["synthetic2", "bank", "german", "synthetic3", "adult", "compas", "synthetic1"]
QUANTILES = [0.5, 0.75]
LAMS = [0.0, 1.0, 3.0, 8.0, 20.0, 40.0, 100.0]


def run(tables: list[str]) -> None:
    done = pd.read_csv(OUT) if OUT.exists() else pd.DataFrame(columns=["table", "q"])
    default = pfair.settings.ADAPTIVE_CLIP_QUANTILE
    for q in QUANTILES:
        for name in tables:
            if ((done["table"] == name) & (done["q"].astype(float) == q)).any():
                continue
            pfair.settings.ADAPTIVE_CLIP_QUANTILE = q
            df = cv.run_table(name, cv.SEEDS, cv.NOTIONS, LAMS, [1.0]).assign(q=q)
            df.to_csv(OUT, mode="a", header=not OUT.exists(), index=False)
    pfair.settings.ADAPTIVE_CLIP_QUANTILE = default


def summary() -> str:
    """One line per clip rule: the acceptance's private criteria (``convergence.criteria``) over
    these tables, with the non-private fits it was chosen against (``convergence.reference_nonprivate``)."""
    nonprivate = cv.reference_nonprivate()
    lines = []
    for label, private in rules().items():
        private = private[private.table.isin(TABLES)].assign(epsilon="1")
        c = cv.criteria(pd.concat([nonprivate[nonprivate.table.isin(TABLES)], private]),
                        pd.DataFrame(columns=["table", "fairness"]))
        per = c["per_setting"][c["per_setting"]["epsilon"] == "1"]
        pr = c["private"]
        lines.append(f"{label}: below the line in ≥ 5 of 6 fits at {int((pr['private_below'] >= 5).sum())} of {len(pr)} "
                     f"(table, λ); mean margin {private[private.lam > 0]['below_line'].mean():+.4f}; settled "
                     f"{(private['spread5'] <= 0.02).mean():.1%}; mean violation rising by more than 0.02 with λ in "
                     f"{int((per['max_rise'] > 0.02).sum())} of {len(per)} settings; per-seed spread above 0.05 in "
                     f"{int((per['max_seed_spread'] > 0.05).sum())} of {len(per)}")
    return "\n\n".join(lines)


def rules() -> dict:
    """The private runs of each clip rule, by label."""
    today = cv.load_runs(HERE / "convergence_runs.csv")
    runs = {f"q = {q:g}": g.drop(columns=["q"]) for q, g in cv.load_runs(OUT).groupby("q")} if OUT.exists() else {}
    runs[f"q = {pfair.settings.ADAPTIVE_CLIP_QUANTILE:g} (default)"] = today[today["epsilon"] != "none"]
    runs["fixed 0.25 (before)"] = cv.load_runs(HERE / "convergence_runs_fixedclip.csv")
    runs["q = 0.5 of the largest norm over the groups"] = cv.load_runs(HERE / "convergence_runs_adaptive_max.csv")
    return runs


def comparison() -> str:
    """Per table, notion and clip: the mean margin below the mixing line over λ > 0, how many fits
    are below it where the non-private fit is ≥ 0.02 below (the acceptance's private criterion, per
    notion), the mean test error over the constant predictor's, and the largest rise of the mean
    violation as λ grows (the acceptance's *monotone* criterion)."""
    nonprivate = cv.reference_nonprivate()
    np_margin = nonprivate[nonprivate.lam > 0].groupby(["table", "fairness", "lam"])["below_line"].mean()
    runs = rules()
    rows = []
    for label, r in runs.items():
        r = r[r.table.isin(TABLES)]
        for (table, fairness), sub in r.groupby(["table", "fairness"]):
            means = sub.groupby("lam")["violation"].mean().sort_index().to_numpy()
            rise = max((means[j] - means[i] for i in range(len(means)) for j in range(i + 1, len(means))), default=0.0)
            sub = sub[sub.lam > 0]
            m = sub.join(np_margin.rename("np"), on=["table", "fairness", "lam"])
            strong = m[m["np"] >= 0.02]  # where the non-private point is well below its line
            rows.append(dict(table=table, fairness=fairness, clip=label, mean_margin=float(sub["below_line"].mean()),
                             below=f"{int((strong['below_line'] > 0).sum())} of {len(strong)}",
                             over_constant=float((sub["error"] - sub["constant_error"]).mean()), rise=rise))
    out = pd.DataFrame(rows).sort_values(["table", "fairness", "clip"])
    lines = ["| table | fairness | clip | mean margin | below the line (where it counts) | error − constant's | "
             "max rise of mean violation |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.table} | {r.fairness} | {r.clip} | {r.mean_margin:+.4f} | {r.below} | {r.over_constant:+.4f} | "
              f"{r.rise:.3f} |" for r in out.itertuples()]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", nargs="+", default=TABLES)
    ap.add_argument("--print", action="store_true", help="the comparison from the CSVs only")
    args = ap.parse_args()
    if not args.print:
        run(args.tables)
    print(summary())
    print()
    print(comparison())


if __name__ == "__main__":
    main()
