"""How often the constant-predictor guard is wrong, before and after its paired test (docs/optimisation.md, section 6).

``python docs/optimisation/guard_rates.py`` (about 4 minutes on one core) fits SteFFLe without a
fairness target on every bundled table of the comparison (Adult, COMPAS, Credit Card, Bank, German,
Law School), on its whole training split and on a 2,380-row subsample of it (the size of the
mortgage table of issue 35; German has 750 training rows and is used whole), 3 silos, the
defaults otherwise, in three regimes (non-private; ε = 1 protecting s, whose validation tables are
exact; ε = 1 with ``protect="record"``, whose tables are noisy), at λ ∈ {0, 1, 8, 40}, seeds 0-4.

Training does not depend on the guard (no target: the guard only chooses among the checkpoints
afterwards), so each fit is judged by both rules from the same released figures
(``checkpoint_figures_``): **before**, the rule of commit fb47668 (clearly better when the error is
below the constant's by one sd of the unpaired √(c(1 − c)/n) plus the noise, at least 0.005;
"too noisy" when that margin is half the constant's error; else warned), re-implemented below;
**after**, :class:`pfair.validation.Selector` itself, checked to choose what the fit returned
(at a fixed λ > 0 a last model shown no better gives way to the constant predictor; the summary's
last line says what the selector returned there before, a checkpoint). The test error of each
checkpoint's model comes from ``history_`` (``eval_set``: the test split, which no fit sees).

Counted on the last model, the one the guard judges (its test error against the constant
predictor's on the test split):

* a **false alarm**: a ``NotBetterThanConstantWarning`` on a fit whose test error is at least
  0.01 below the constant's;
* a **miss**: no word at all on a fit whose test error is at or above the constant's;
* **within noise**: the milder statement (before: "too noisy to tell"; after: the same, for every
  model the figures cannot tell from the constant at the 5 % level).

Writes ``guard_rates.csv`` (one row per fit) and prints the summary kept in ``guard_rates_log.txt``.
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from pfair import SteFFLe, datasets, metrics
from pfair.validation import WITHIN_NOISE, Selector

HERE = Path(__file__).resolve().parent
TABLES = ["adult", "compas", "credit_card", "bank", "german", "law_school"]
SMALL = 2380
REGIMES = {"none": dict(epsilon=None), "eps1": dict(epsilon=1.0), "eps1_record": dict(epsilon=1.0, protect="record")}
LAMS = [0.0, 1.0, 8.0, 40.0]
#: Errors this close count as equal (the CSV keeps 6 significant digits).
TOL = 1e-5


def before_rule(figs: list) -> tuple[str, int]:
    """``(statement, chosen checkpoint)`` of the guard of fb47668 (``validation.py`` there): margin
    ``max(0.005, √(c(1 − c)/n + (cells − 1)(σ/n)²))``; "silent", "noisy" (too noisy to tell) or
    "alarm"."""
    def margin(f):
        c, n = f.constant_error, max(f.n, 1.0)
        return max(0.005, math.sqrt(max(c * (1 - c), 0.0) / n + max(f.cells - 1, 1) * (f.noise_sd / n) ** 2))

    def clearly(f):
        return f.error <= f.constant_error - margin(f)

    last = figs[-1]
    if clearly(last):
        return "silent", last.epoch
    if margin(last) >= 0.5 * last.constant_error:
        return "noisy", last.epoch
    factor = math.sqrt(2.0 * math.log(max(len(figs), 2)))
    ok = [f for f in figs if clearly(f)]
    if ok:
        best = min(ok, key=lambda f: f.error)
        if best.error <= best.constant_error - factor * margin(best):
            return "alarm", best.epoch
    return "alarm", min(figs, key=lambda f: f.error).epoch


def after_rule(figs: list, lam: float, constant: bool = True) -> tuple[str, int]:
    """The same from :class:`pfair.validation.Selector` (the code a fit runs; the linear model can
    be the constant predictor, chosen epoch −1, which a fit at λ > 0 returns when its last model is
    shown no better; ``constant=False``: the selector before that, which returned a checkpoint)."""
    sel = Selector(lam=lam, constant=constant)
    for f in figs:
        sel.offer(f, np.zeros(1), np.zeros(1))
    (chosen, _, _), why = sel.choose()
    if why is None:
        return "silent", chosen.epoch
    return ("noisy" if why.startswith(WITHIN_NOISE) else "alarm"), chosen.epoch


def tables(seed: int) -> list:
    """``(name, rows, X, y, s)``: each table whole and subsampled to :data:`SMALL` rows."""
    out = []
    for name in TABLES:
        d = datasets.load(name)
        out.append((name, len(d.y_train), d.X_train, d.y_train, d.s_train, d))
        if len(d.y_train) > SMALL:
            idx = np.sort(np.random.default_rng(seed).choice(len(d.y_train), SMALL, replace=False))
            out.append((name, SMALL, d.X_train[idx], d.y_train[idx], d.s_train[idx], d))
    return out


def run(seeds: int) -> pd.DataFrame:
    rows = []
    for seed in range(seeds):
        for name, n_rows, X, y, s, d in tables(seed):
            silos = np.random.default_rng(seed).integers(0, 3, size=len(y))
            constant_test = metrics.trivial_error(d.y_test)
            for regime, kw in REGIMES.items():
                for lam in LAMS:
                    extra = dict(noise_seed=seed) if kw["epsilon"] is not None else {}
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        m = SteFFLe(lam=lam, seed=seed, **kw, **extra).fit(
                            X, y, sensitive_features=s, silos=silos, eval_set=(d.X_test, d.y_test, d.s_test))
                    figs = list(m.checkpoint_figures_)
                    test = m.history_["test_error"].to_numpy()  # one row per epoch
                    returned = float(np.mean(m.predict(d.X_test) != d.y_test))
                    if m.selected_epoch_ > 0:
                        assert abs(returned - test[m.selected_epoch_ - 1]) < 1e-12, "history_ is not per epoch"
                    row = dict(table=name, rows=n_rows, regime=regime, lam=lam, seed=seed, held_out=figs[-1].n,
                               checkpoints=len(figs), constant_test_error=constant_test,
                               last_test_error=float(test[figs[-1].epoch]),
                               validation_difference=figs[-1].difference, difference_sd=figs[-1].difference_sd)
                    said, epoch = before_rule(figs)
                    row.update(before_statement=said, before_returned_test_error=float(test[epoch]))
                    said, epoch = after_rule(figs, lam)
                    assert epoch + 1 == m.selected_epoch_, "the rule here is not the fit's"
                    row.update(after_statement=said, after_returned_test_error=returned,
                               after_constant=epoch == -1,
                               checkpoint_returned_test_error=float(test[after_rule(figs, lam, constant=False)[1]]))
                    rows.append(row)
    return pd.DataFrame(rows)


def summary(df: pd.DataFrame) -> str:
    # With a tolerance: the constant predictor's own error, 1 − 0.7, is not 0.3 in floating point.
    good = df["last_test_error"] <= df["constant_test_error"] - 0.01 + TOL
    bad = df["last_test_error"] >= df["constant_test_error"] - TOL
    lines = [f"{len(df)} fits; last model's test error ≥ 0.01 below the constant's: {int(good.sum())}; "
             f"at or above it: {int(bad.sum())}", ""]
    lines.append("| subset | rule | fits | alarms | false alarms (of good) | within noise (of good) | "
                 "misses (silent, of bad) | alarms on bad |")
    lines.append("|---|---|---|---|---|---|---|---|")
    subsets = {"all": df["rows"] > 0, f"{SMALL} rows and German": df["rows"] <= SMALL,
               "whole tables": df["rows"] > SMALL}
    for regime in REGIMES:
        subsets[f"regime {regime}"] = df["regime"] == regime
    for label, mask in subsets.items():
        for rule in ("before", "after"):
            said = df[f"{rule}_statement"]
            g, b = good & mask, bad & mask
            lines.append(f"| {label} | {rule} | {int(mask.sum())} | {int(((said == 'alarm') & mask).sum())} | "
                         f"{int(((said == 'alarm') & g).sum())} of {int(g.sum())} | "
                         f"{int(((said == 'noisy') & g).sum())} of {int(g.sum())} | "
                         f"{int(((said == 'silent') & b).sum())} of {int(b.sum())} | "
                         f"{int(((said == 'alarm') & b).sum())} of {int(b.sum())} |")
    worse = {rule: int((df[f"{rule}_returned_test_error"] >= df["constant_test_error"] - TOL).sum()) for rule in ("before", "after")}
    lines += ["", f"returned models at or above the constant's test error: before {worse['before']}, "
                  f"after {worse['after']}"]
    if "after_constant" in df:
        const = df[df["after_constant"].astype(bool)]
        # What the selector returned for them before it could return the constant: a checkpoint.
        gained = int((const["checkpoint_returned_test_error"] <= const["constant_test_error"] - 0.01 + TOL).sum())
        lines += [f"returned the constant predictor (at λ > 0, the last model shown no better): {len(const)} fits, "
                  f"all at λ > 0: {bool((const['lam'] > 0).all())}; the checkpoint the selector returned there "
                  f"before (the most accurate better at level α/K, else the most accurate) was ≥ 0.01 below the "
                  f"constant's test error in {gained}"]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default=str(HERE / "guard_rates.csv"))
    ap.add_argument("--summary-only", action="store_true", help="summarise the CSV at --out without fitting")
    args = ap.parse_args()
    t0 = time.time()
    if args.summary_only:
        print(summary(pd.read_csv(args.out)))
        return
    df = run(args.seeds)
    df.to_csv(args.out, index=False, float_format="%.6g")
    print(summary(df))
    print(f"\n{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
