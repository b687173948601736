"""The tables of docs/optimisation.md, sections 4 and 5, from the protocol's runs and the checks.

    python docs/optimisation/defaults_tables.py                                 # print them
    python docs/optimisation/defaults_tables.py --write docs/optimisation.md    # and replace its blocks

Reads ``docs/optimisation/defaults_runs.csv`` (``python -m pfair.experiments.defaults --out ...``)
and ``docs/optimisation/defaults_check.csv`` / ``defaults_adult_grid.csv`` (``python
docs/optimisation/defaults_check.py [--adult-grid] --out ...``) and
``docs/optimisation/record_vs_attribute.csv`` (section 5); replaces the ``<!-- generated:defaults-NAME -->`` blocks of the page. The selection is
recomputed from the runs by the protocol's own functions (:mod:`pfair.experiments.defaults`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

HERE = Path(__file__).parent


def _md(df: pd.DataFrame) -> str:
    """A Markdown table: scores to 3 decimals, settings as they are (``:g``)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(str(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    for _, row in df.iterrows():
        cells = [(f"{v:.3f}" if "score" in str(c) or c in REGIME_COLUMNS else f"{v:g}") if isinstance(v, float)
                 else str(v) for c, v in row.items()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


REGIME_COLUMNS = ("private", "non-private")


def selection(runs: pd.DataFrame) -> dict:
    """The protocol's selection, recomputed from its runs by its own functions."""
    from pfair.experiments import defaults as d

    s1, s2 = runs[runs["stage"] == "stage1"], runs[runs["stage"] == "stage2"]
    best1, summary = d.select_shared(s1, list(d.STAGE1))
    best2, t2 = d.select_stage2(s2)
    return dict(best1=best1, summary=summary, stage2=t2, best2=best2)


def tables(runs: pd.DataFrame, check: pd.DataFrame | None, grid: pd.DataFrame | None = None) -> dict[str, str]:
    from pfair.experiments import defaults as d

    sel = selection(runs)
    s1 = runs[runs["stage"] == "stage1"]
    out = {}
    summary = sel["summary"].head(6).copy()
    summary = summary[[c for c in summary.columns if c != "score (sum)"] + ["score (sum)"]]
    summary.columns = [c.replace("batch_size", "batch").replace("score (sum)", "sum of scores") for c in summary.columns]
    out["defaults-stage1"] = _md(summary)
    t = d.scores(s1, list(d.STAGE1))
    t["admissible"] = d.admissible(s1, list(d.STAGE1)).reindex(t.index)
    parts = []
    for regime in d.REGIMES:
        top = t.sort_values(regime).head(5).reset_index()
        top = top[list(d.STAGE1) + [regime] + (["admissible"] if regime == "non-private" else [])]
        top = top.rename(columns={regime: f"score ({regime})", "batch_size": "batch"})
        parts.append(f"Best five of the {regime} regime alone:\n\n" + _md(top))
    out["defaults-regimes"] = "\n\n".join(parts)
    gap = d.adult_gap(s1, sel["best1"], list(d.STAGE1))
    best_at = ", ".join(f"{k} {d._plain(v)}" for k, v in gap["best_at"].items())
    a = s1[(s1["data"] == "adult") & (s1["lam"] == 0.0) & (s1["regime"] == "non-private")]
    old = a[(a["batch_size"] == 4096) & (a["lr_theta"] == 0.25) & (a["epochs"] == 40)]["val_error"].mean()
    out["defaults-adult"] = (f"Adult, non-private, λ = 0, validation error: {gap['selected']:.4f} at the selected "
                             f"configuration, {gap['best']:.4f} at the grid's best ({best_at}): "
                             f"{gap['gap']:.4f} apart; {old:.4f} at the former defaults (batch 4096, lr_theta "
                             f"0.25, 40 epochs). {len(runs)} runs in all.")
    t2 = sel["stage2"].head(6).reset_index().rename(columns={"sum": "sum of scores"})
    out["defaults-stage2"] = _md(t2)
    if check is not None:
        c = check.groupby(["data", "epsilon", "lam"])[["batch_size", "test_error", "demographic_parity_difference",
                                                      "trivial"]].mean().reset_index()
        rows = []
        for (name, eps), sub in c.groupby(["data", "epsilon"], sort=False):
            row = {"data": name, "ε": eps, "batch": int(sub["batch_size"].iloc[-1]),
                   "constant": f"{sub['trivial'].iloc[0]:.4f}"}
            for _, r in sub.iterrows():
                row[f"λ = {r['lam']:g}: error / DP"] = f"{r['test_error']:.4f} / {r['demographic_parity_difference']:.3f}"
            rows.append(row)
        out["defaults-check"] = _md(pd.DataFrame(rows))
    if grid is not None:
        mean = grid.groupby(["config", "batch_size", "lr_theta", "epochs"])["test_error"].mean().reset_index()
        default = mean[mean["config"] == "defaults"].iloc[0]
        top = mean[mean["config"] == "grid"].sort_values("test_error").head(5)
        rows = [dict(setting="defaults", batch=int(default["batch_size"]), lr_theta=default["lr_theta"],
                     epochs=int(default["epochs"]), test_error=f"{default['test_error']:.4f}")]
        rows += [dict(setting=f"grid, {i + 1}.", batch=int(r["batch_size"]), lr_theta=r["lr_theta"],
                      epochs=int(r["epochs"]), test_error=f"{r['test_error']:.4f}") for i, (_, r) in enumerate(top.iterrows())]
        gap = default["test_error"] - top["test_error"].iloc[0]
        out["defaults-adult-grid"] = _md(pd.DataFrame(rows)) + (
            f"\n\nThe defaults are {gap:.4f} above the grid's best (mean of {grid['seed'].nunique()} seeds).")
    return out


def record_vs_attribute(df: pd.DataFrame) -> dict[str, str]:
    """Section 5's blocks from ``record_vs_attribute.csv``: each mode at the batch of least
    validation score (test split, mean of the seeds), and the validation scores per batch."""
    df = df.assign(score=df["val_error"] / df["trivial_val"] + df["val_dp"])
    score = df.groupby(["data", "protect", "batch"])["score"].mean()
    rows = []
    for (name, protect), per_batch in score.groupby(level=["data", "protect"]):
        batch = int(per_batch.idxmin()[2])
        sel = df[(df["data"] == name) & (df["protect"] == protect) & (df["batch"] == batch)]
        test = sel.groupby("lam")[["test_error", "test_dp"]].mean()
        z = sel.loc[sel["lam"] > 0, "z"].max()
        row = {"data": name, "mode (batch)": f"{protect} ({batch})", "z": f"{z:.1f}"}
        for lam, r in test.iterrows():
            row[f"λ = {lam:g}: error / DP"] = f"{r['test_error']:.4f} / {r['test_dp']:.3f}"
        rows.append(row)
    table = score.unstack("batch").reset_index()
    table.columns = [f"validation score, batch {c}" if isinstance(c, (int, float)) else c for c in table.columns]
    means = score.groupby(level=["protect", "batch"]).mean().unstack("batch").reset_index()
    means.insert(0, "data", "mean")
    means.columns = table.columns
    return {"record-vs-attribute": _md(pd.DataFrame(rows)),
            "record-vs-attribute-scores": _md(pd.concat([table, means], ignore_index=True))}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=str(HERE / "defaults_runs.csv"))
    ap.add_argument("--check", default=str(HERE / "defaults_check.csv"))
    ap.add_argument("--grid", default=str(HERE / "defaults_adult_grid.csv"))
    ap.add_argument("--record", default=str(HERE / "record_vs_attribute.csv"),
                    help="section 5's runs (python docs/optimisation/record_vs_attribute.py --out ...)")
    ap.add_argument("--write", default=None, help="markdown page whose generated blocks to replace")
    args = ap.parse_args(argv)
    runs = pd.read_csv(args.runs)
    check = pd.read_csv(args.check) if Path(args.check).exists() else None
    grid = pd.read_csv(args.grid) if Path(args.grid).exists() else None
    blocks = tables(runs, check, grid)
    if Path(args.record).exists():
        blocks.update(record_vs_attribute(pd.read_csv(args.record)))
    for name, body in blocks.items():
        print(f"<!-- {name} -->\n{body}\n")
    if args.write:
        from pfair.experiments.report import replace_blocks

        page = Path(args.write)
        page.write_text(replace_blocks(page.read_text(), blocks,
                                       provenance="generated by python docs/optimisation/defaults_tables.py"))


if __name__ == "__main__":
    main()
