"""A noise-free run at a large λ: how long it trains (``pfair.settings.LAMBDA_STRETCH_CAP`` and
``LAMBDA_STRETCH_ROUNDS``).

Under the scaled θ step (``η_θ / max(1, λ/λ_c)``) a non-private fit at λ = 100 moves its loss a
hundred times more slowly than at λ = 1; with the epochs of λ ≤ λ_c its run ends before it has
minimised ``L + λ ψ̄``. ``batch_size="auto"`` multiplies a noise-free run's epochs and decay period
by ``k_λ = min(λ/λ_c, max(cap, rounds / (E·R)))``, E·R the run's rounds before the stretch. This
script compares five rules on the acceptance's non-private fits (``convergence.py``: every table ×
{demographic parity, equalized odds} × λ ∈ {0, 1, 3, 8, 20, 40, 100} × seeds 0–2):

* cap 1, the run before the stretch (20 epochs at every λ): ``convergence_runs_nonprivate_20.csv``;
* cap 10 alone (the rule before the rounds): ``convergence_runs_stretch_cap_10.csv``;
* cap 100 (``k_λ = λ``: 2,000 epochs at λ = 100): ``convergence_runs_lambda_full.csv``;
* cap 10 with 4,000 rounds (the default): the non-private rows of ``convergence_runs_before_floor.csv``
  (the acceptance's runs before the floor of an epoch's rounds, like the other variants');
* cap 10 with 8,000 rounds: ``convergence_runs_stretch_rounds_8000.csv``.

(A table whose fits resolve to the runs of cap 10 alone takes those fits' rows.) For each: the
acceptance's non-private criteria (``convergence.criteria``), the mean seconds of a fit per λ, and
per table and notion the mean test error and violation at λ ≥ 8. Then caps 1 and 10 on five
settings the acceptance does not use, standing in for a user's tables (``HELDOUT`` of
``target_dual_step.py`` but census-KDD: Adult with s = race, COMPAS and Law School with s = sex,
``make_synthetic(20000, 20, dependence=1.5, seed=7)`` and ``make_synthetic(8000, 10, dependence=2.5,
seed=3)``; λ ∈ {0, 3, 8, 20, 100}, both notions, seeds 0–2, each fit against its seed's λ = 0
mixing line; runs in ``lambda_stretch_heldout.csv``); and the three cap-10 rules on six small tables
the rounds were not chosen on (``SMALL_HELDOUT``; λ ∈ {0, 3, 8, 20, 40, 100}; runs in
``lambda_stretch_rounds_heldout.csv``). Printout: ``lambda_stretch_log.txt``.

    python docs/optimisation/lambda_stretch.py --run 100   # the cap-100 runs (about 80 min on 2 cores)
    python docs/optimisation/lambda_stretch.py --run "10, 8000 rounds"   # a rule's runs (minutes)
    python docs/optimisation/lambda_stretch.py --heldout   # the held-out runs (about 4 min)
    python docs/optimisation/lambda_stretch.py --small-heldout   # the small tables (about 10 min)
    python docs/optimisation/lambda_stretch.py --tables-only
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

import pandas as pd

import pfair
import pfair.datasets

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import convergence as cv  # noqa: E402

#: label → (cap, rounds, runs): ``LAMBDA_STRETCH_CAP`` and ``LAMBDA_STRETCH_ROUNDS`` (0: none) of each
#: variant and the CSV of its acceptance fits.
VARIANTS = {
    "1": (1.0, 0, cv.NONPRIVATE_20),
    "10": (10.0, 0, HERE / "convergence_runs_stretch_cap_10.csv"),
    "100": (100.0, 0, HERE / "convergence_runs_lambda_full.csv"),
    # The default of the time: the acceptance's runs before a noise-free run on small silos took the
    # rounds of 16 an epoch (docs/optimisation.md, "A run's rounds on small tables"), which the other
    # variants here did not have either.
    "10, 4000 rounds": (10.0, 4000, HERE / "convergence_runs_before_floor.csv"),
    "10, 8000 rounds": (10.0, 8000, HERE / "convergence_runs_stretch_rounds_8000.csv"),
}
HELDOUT_RUNS = HERE / "lambda_stretch_heldout.csv"
HELDOUT_SETTINGS = ["adult, s = race", "compas, s = sex", "law_school, s = sex", "synthetic 20k, d = 1.5",
                    "synthetic 8k, d = 2.5"]
HELDOUT_LAMS = [0.0, 3.0, 8.0, 20.0, 100.0]


@contextlib.contextmanager
def stretch_rule(cap: float, rounds: int):
    """``LAMBDA_STRETCH_CAP = cap`` and ``LAMBDA_STRETCH_ROUNDS = rounds`` while the block runs."""
    import pfair.settings

    before = pfair.settings.LAMBDA_STRETCH_CAP, pfair.settings.LAMBDA_STRETCH_ROUNDS
    pfair.settings.LAMBDA_STRETCH_CAP, pfair.settings.LAMBDA_STRETCH_ROUNDS = float(cap), int(rounds)
    try:
        yield
    finally:
        pfair.settings.LAMBDA_STRETCH_CAP, pfair.settings.LAMBDA_STRETCH_ROUNDS = before


def resolved_epochs(name: str, cap: float, rounds: int) -> list[int]:
    """The epochs each of the acceptance's non-private fits of ``name`` resolves to under the rule."""
    from pfair.settings import SteFFLeSettings
    from pfair.validation import training_sizes

    data, out = cv.load(name), []
    with stretch_rule(cap, rounds):
        for seed in cv.SEEDS:
            sizes = cv.federation(data, seed).sizes
            for lam in cv.LAMS:
                st = SteFFLeSettings(epsilon=None, lam=lam)
                out.append(int(st.for_sizes(training_sizes(sizes, st.validation_share)).epochs))
    return out


def run(label: str) -> None:
    """The acceptance's non-private fits under variant ``label``, appended to its CSV. A table whose
    fits resolve to the same runs as under cap 10 alone (``"10"``) takes those fits' rows (the same
    settings on the same data: the same fits, bit for bit)."""
    cap, rounds, path = VARIANTS[label]
    base = VARIANTS["10"]
    for name in cv.TABLES:
        done = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["table"])
        if name in set(done["table"]):
            continue
        if rounds and resolved_epochs(name, cap, rounds) == resolved_epochs(name, base[0], base[1]):
            df = nonprivate_runs(base[2])
            df = df[df["table"] == name]
        else:
            with stretch_rule(cap, rounds):
                df = cv.run_table(name, cv.SEEDS, cv.NOTIONS, cv.LAMS, [None])
        df.to_csv(path, mode="a", header=not path.exists(), index=False)


def setting_fits(data, lams: list[float], **keys) -> list[dict]:  # noqa: ANN001
    """The non-private fits of ``data`` under the rule in force: both notions, seeds 0–2, λ ∈
    ``lams`` (starting at 0), each read against its seed's λ = 0 mixing line; ``keys`` label every row."""
    rows = []
    for fairness in cv.NOTIONS:
        for seed in cv.SEEDS:
            line = None
            for lam in lams:
                r = cv.fit_one(data, fairness, lam, None, seed)
                pred = r.pop("pred")
                if lam == 0:
                    line = cv.mixing_line(data.y_test, pred, sensitive_features=data.s_test, fairness=fairness)
                r["below_line"] = line.margin(r["error"], r["violation"])
                rows.append(dict(**keys, fairness=fairness, seed=seed, lam=lam, **r))
    return rows


def rising_count(runs: pd.DataFrame) -> tuple[int, int]:
    """(settings whose mean violation over the seeds rises by more than 0.02 from a smaller λ to a
    larger one, settings): a setting is a (``setting``, notion) pair of ``runs``."""
    means = runs.groupby(["setting", "fairness", "lam"])["violation"].mean()
    groups = [s.sort_index().to_numpy() for _, s in means.groupby(level=[0, 1])]
    rising = sum(max(v[j] - v[i] for i in range(len(v)) for j in range(i + 1, len(v))) > 0.02 for v in groups)
    return int(rising), len(groups)


def run_heldout() -> None:
    """Caps 1 and 10 alone (no budget of rounds: the rules these runs compared) on the held-out
    settings (non-private), appended to :data:`HELDOUT_RUNS`."""
    from target_dual_step import HELDOUT

    for name in HELDOUT_SETTINGS:
        data = HELDOUT[name]()
        for cap in (1.0, 10.0):
            with stretch_rule(cap, 0):
                rows = setting_fits(data, HELDOUT_LAMS, setting=name, cap=cap)
            pd.DataFrame(rows).to_csv(HELDOUT_RUNS, mode="a", header=not HELDOUT_RUNS.exists(), index=False)


#: Small tables the rounds of the stretch (``LAMBDA_STRETCH_ROUNDS``) were not chosen on: runs of 20
#: to 140 rounds before the stretch, as the small tables users bring (a few thousand records).
SMALL_HELDOUT = {
    "german, s = age": lambda: pfair.datasets.load("german", sensitive="age"),
    "bank, s = marital": lambda: pfair.datasets.load("bank", sensitive="marital"),
    "compas, s = sex": lambda: pfair.datasets.load("compas", sensitive="sex"),
    "synthetic 8k, d = 2.5": lambda: pfair.datasets.make_synthetic(8000, 10, silos=3, dependence=2.5, seed=3),
    "synthetic 3k, d = 1.5": lambda: pfair.datasets.make_synthetic(3000, 20, silos=3, dependence=1.5, seed=5),
    "synthetic 2.4k, d = 2": lambda: pfair.datasets.make_synthetic(2400, 20, silos=3, dependence=2.0, seed=11),
}
SMALL_HELDOUT_RUNS = HERE / "lambda_stretch_rounds_heldout.csv"
SMALL_HELDOUT_LAMS = [0.0, 3.0, 8.0, 20.0, 40.0, 100.0]


def run_small_heldout(labels: list[str]) -> None:
    """Variants ``labels`` on :data:`SMALL_HELDOUT` (non-private, both notions, seeds 0–2, each fit
    against its seed's λ = 0 mixing line), appended to :data:`SMALL_HELDOUT_RUNS`."""
    done = pd.read_csv(SMALL_HELDOUT_RUNS) if SMALL_HELDOUT_RUNS.exists() else pd.DataFrame(columns=["setting", "rule"])
    for name, make in SMALL_HELDOUT.items():
        data = make()
        for label in labels:
            if ((done["setting"] == name) & (done["rule"] == label)).any():
                continue
            cap, rounds, _ = VARIANTS[label]
            with stretch_rule(cap, rounds):
                rows = setting_fits(data, SMALL_HELDOUT_LAMS, setting=name, rule=label)
            pd.DataFrame(rows).to_csv(SMALL_HELDOUT_RUNS, mode="a", header=not SMALL_HELDOUT_RUNS.exists(),
                                      index=False)


def heldout_tables() -> None:
    """Print the held-out comparison: per cap, the settings whose mean violation rises by more than
    0.02 between two λ, the fits below their λ = 0 mixing line and the mean margin (λ > 0), the fits
    that returned the constant predictor and the seconds of all fits; then per setting and notion
    the mean test error / violation at λ ≥ 8."""
    runs = pd.read_csv(HELDOUT_RUNS)
    print("\nHeld-out settings, non-private, λ ∈ {0, 3, 8, 20, 100}, seeds 0–2\n")
    print("| cap | rising > 0.02 | below the line (λ > 0) | mean margin (λ > 0) | returned the constant | seconds |")
    print("|---|---|---|---|---|---|")
    for cap, g in runs.groupby("cap"):
        rising, settings = rising_count(g)
        pos = g[g["lam"] > 0]
        print(f"| {cap:g} | {rising} of {settings} | {int((pos['below_line'] > 0).sum())} of {len(pos)} | "
              f"{pos['below_line'].mean():+.3f} | {int((g['selected'] == 0).sum())} | {g['seconds'].sum():.0f} |")
    print("\n| setting | fairness | λ | cap 1 | cap 10 |")
    print("|---|---|---|---|---|")
    means = runs.groupby(["setting", "fairness", "lam", "cap"])[["error", "violation"]].mean()
    for (setting, fairness, lam), _ in means.groupby(level=[0, 1, 2]):
        if lam < 8:
            continue
        cells = [f"{means.loc[(setting, fairness, lam, cap), 'error']:.3f} / "
                 f"{means.loc[(setting, fairness, lam, cap), 'violation']:.3f}" for cap in (1.0, 10.0)]
        print(f"| {setting} | {fairness} | {lam:g} | " + " | ".join(cells) + " |")


def small_heldout_tables() -> None:
    """Print the small held-out comparison of the rounds (:data:`SMALL_HELDOUT`): per variant the
    settings whose mean violation rises by more than 0.02 between two λ, the fits below their λ = 0
    mixing line and the mean margin (λ > 0), the fits that returned the constant predictor and the
    seconds; per setting the same counts; then per setting and notion the mean test error /
    violation at λ ≥ 20."""
    if not SMALL_HELDOUT_RUNS.exists():
        return
    runs = pd.read_csv(SMALL_HELDOUT_RUNS)
    labels = list(dict.fromkeys(runs["rule"]))
    print("\nSmall held-out tables, non-private, λ ∈ {" + ", ".join(f"{v:g}" for v in SMALL_HELDOUT_LAMS)
          + "}, seeds 0–2\n")
    print("| rule | rising > 0.02 | below the line (λ > 0) | mean margin (λ > 0) | returned the constant | seconds |")
    print("|---|---|---|---|---|---|")
    for label in labels:
        g = runs[runs["rule"] == label]
        rising, settings = rising_count(g)
        pos = g[g["lam"] > 0]
        print(f"| {label} | {rising} of {settings} | {int((pos['below_line'] > 0).sum())} of {len(pos)} | "
              f"{pos['below_line'].mean():+.4f} | {int((g['selected'] == 0).sum())} | {g['seconds'].sum():.0f} |")
    print("\nper setting (λ > 0): below the line / mean margin / returned the constant\n")
    print("| setting | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    for setting in dict.fromkeys(runs["setting"]):
        cells = []
        for label in labels:
            g = runs[(runs["rule"] == label) & (runs["setting"] == setting) & (runs["lam"] > 0)]
            cells.append(f"{int((g['below_line'] > 0).sum())} of {len(g)} / {g['below_line'].mean():+.4f} / "
                         f"{int((g['selected'] == 0).sum())}")
        print(f"| {setting} | " + " | ".join(cells) + " |")
    print("\n| setting | fairness | λ | " + " | ".join(labels) + " |")
    print("|---|---|---|" + "---|" * len(labels))
    means = runs.groupby(["setting", "fairness", "lam", "rule"])[["error", "violation"]].mean()
    for (setting, fairness, lam), _ in means.groupby(level=[0, 1, 2], sort=False):
        if lam < 20:
            continue
        cells = [f"{means.loc[(setting, fairness, lam, label), 'error']:.3f} / "
                 f"{means.loc[(setting, fairness, lam, label), 'violation']:.3f}" for label in labels]
        print(f"| {setting} | {fairness} | {lam:g} | " + " | ".join(cells) + " |")


def nonprivate_runs(path: Path) -> pd.DataFrame:
    runs = pd.read_csv(path)
    return runs[runs["epsilon"].astype(str) == "none"]


def nonprivate(label: str) -> pd.DataFrame:
    runs = cv.load_runs(VARIANTS[label][2])
    return runs[runs["epsilon"] == "none"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", choices=[label for label in VARIANTS if label != "1"], default=None,
                    help="run this variant's fits first")
    ap.add_argument("--heldout", action="store_true", help="run the held-out settings' fits first")
    ap.add_argument("--small-heldout", action="store_true",
                    help="run the small held-out tables' fits of cap 10 and of the rounds first")
    ap.add_argument("--tables-only", action="store_true", help="read the CSVs and print (the default)")
    args = ap.parse_args(argv)
    if args.run is not None:
        run(args.run)
    if args.heldout:
        run_heldout()
    if args.small_heldout:
        run_small_heldout([label for label in VARIANTS if label.startswith("10")])
    eg = pd.read_csv(cv.EG)
    runs = {cap: nonprivate(cap) for cap in VARIANTS}
    print("Non-private acceptance fits; epochs and decay period × min(λ, max(cap, rounds / (E·R))) (λ_c = 1; "
          "rule: cap, rounds)\n")
    print("| rule | settled | rising > 0.02 | spread > 0.05 | last returned (worst) | fairlearn's points within 0.01 "
          "| returned the constant |")
    print("|---|---|---|---|---|---|---|")
    for cap, r in runs.items():
        c = cv.criteria(r, eg)
        ps, fr = c["per_setting"], c["front"]
        n = int(ps["n_fits"].sum())
        settled = float((ps["settled"] * ps["n_fits"]).sum() / n)
        print(f"| {cap} | {settled:.1%} | {int((ps['max_rise'] > 0.02).sum())} of {len(ps)} | "
              f"{int((ps['max_seed_spread'] > 0.05).sum())} of {len(ps)} | {ps['last_returned'].min():.0%} | "
              f"{int((fr['gap'] <= 0.01).sum())} of {len(fr)} | {int(cv.returned_constant(r).sum())} of {n} |")
    print("\nMean seconds a fit, by λ (the machine's load varies: compare within a column)\n")
    lams = sorted(runs["1"]["lam"].unique())
    print("| rule | " + " | ".join(f"λ = {lam:g}" for lam in lams) + " |")
    print("|---|" + "---|" * len(lams))
    for cap, r in runs.items():
        sec = r.groupby("lam")["seconds"].mean()
        print(f"| {cap} | " + " | ".join(f"{sec[lam]:.1f}" for lam in lams) + " |")
    print("\nMean test error / violation over seeds 0–2, by rule\n")
    print("| table | fairness | λ | " + " | ".join(runs) + " |")
    print("|---|---|---|" + "---|" * len(runs))
    means = {cap: r.groupby(["table", "fairness", "lam"])[["error", "violation"]].mean() for cap, r in runs.items()}
    for (table, fairness, lam) in means["1"].index:
        if lam < 8:
            continue
        cells = [f"{m.loc[(table, fairness, lam), 'error']:.3f} / {m.loc[(table, fairness, lam), 'violation']:.3f}"
                 for m in means.values()]
        print(f"| {table} | {fairness} | {lam:g} | " + " | ".join(cells) + " |")
    heldout_tables()
    small_heldout_tables()


if __name__ == "__main__":
    os.environ.setdefault("PFAIR_PROGRESS", "0")
    main()
