"""DeepSteFFLe's θ step: the constant step against the scaled one, at the deep defaults otherwise.

An MLP (``mlp(d, 2)``, d-64-2, tanh) at ``DeepSteFFLe``'s defaults (5 epochs, the ``"auto"`` batch
and step), demographic parity, on Adult (s = sex), COMPAS (s = race) and the acceptance's
synthetic tables at dependence 1 and 2 (``convergence.load``: ``make_synthetic(60000, 40,
silos=3, dependence=k)``, whose features carry s), the training split in 3 silos, seeds 0–2 (the
seed drives the initialisation, the split into silos, the batches and the noise), at
λ ∈ {0, 1, 3, 8, 20, 40}, non-private and at ε = 1. Per fit three variants:

* ``constant``: ``theta_step="constant"`` (η_θ whatever λ; the deep default before this script);
* ``scaled``: ``theta_step="scaled"`` (η_θ / max(1, λ)), with the batch stated, so the run has the
  5 epochs of λ ≤ 1;
* ``scaled`` with ``k`` = k_λ (non-private only): the default run, whose ``"auto"`` batch lets the
  library multiply the epochs and decay period by k_λ = min(λ, max(10, 500,000 / (5·n̄)))
  (``resolve_deep_defaults``; n̄ the mean silo size: 10 on Adult and the synthetic tables, up to λ
  on COMPAS, Bank and German, 13.3 on Credit Card, 18.3 on Law School).

A private fit is not stretched (its rounds cost budget), so at ε = 1 the scaled step is run once.
Read per fit: test error and demographic-parity difference of the returned model, its margin
below the mixing line of the same seed's λ = 0 model (``pfair.references.mixing_line``; > 0:
below the line, better than mixing that model with the constant predictor), the spread of the
last five validation errors (no cycle: ≤ 0.02), whether the constant predictor was returned,
seconds. A second part runs a fairness target (``max_violation`` 0.05 and 0.1) with each step,
on synthetic 2 and Adult, non-private and at ε = 1.

    python docs/optimisation/deep_theta_step.py                     # runs + summary, ~40 min on 2 cores
    python docs/optimisation/deep_theta_step.py --tables adult --epsilons none   # one block (rows replaced)
    python docs/optimisation/deep_theta_step.py --summary           # the summary of the stored runs
    python docs/optimisation/deep_theta_step.py --held-out          # the tables the choice did not see

``--held-out`` runs the first part on tables the choice was not made on (Bank, Credit Card, German,
Law School; ``HELD_OUT``), into ``deep_theta_step_heldout.csv`` and ``deep_theta_step_heldout_log.txt``
(``--tables``/``--epsilons`` select among them as above).

Runs: ``deep_theta_step.csv`` and ``deep_theta_step_targets.csv`` (a block's rows replace that
block's stored rows, so blocks may run in separate processes); summary:
``deep_theta_step_log.txt``.
"""

from __future__ import annotations

import argparse
import fcntl
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import pfair
from pfair.references import mixing_line
from pfair.settings import deep_batch_size, deep_stretch_room, noise_free_stretch
from pfair.torch import DeepSteFFLe
from pfair.torch.models import mlp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import convergence as cv  # noqa: E402  (the acceptance's tables and federations)

TABLES = ("adult", "compas", "synthetic1", "synthetic2")
TARGET_TABLES = ("synthetic2", "adult")
HELD_OUT = ("bank", "credit_card", "german", "law_school")
HELD_OUT_RUNS = HERE / "deep_theta_step_heldout.csv"
LAMS = (0.0, 1.0, 3.0, 8.0, 20.0, 40.0)
TARGETS = (0.05, 0.1)
SEEDS = (0, 1, 2)
RUNS = HERE / "deep_theta_step.csv"
TARGET_RUNS = HERE / "deep_theta_step_targets.csv"
FAIRNESS = "demographic_parity"


def arrays(fed: pfair.Federation) -> tuple[np.ndarray, ...]:
    silos = np.concatenate([np.full(len(s), j) for j, s in enumerate(fed.silos)])
    X = np.concatenate([np.asarray(s.X) for s in fed.silos])
    y = np.concatenate([fed.classes_[s.y] for s in fed.silos])
    s_ = np.concatenate([fed.groups_[s.s] for s in fed.silos])
    return X, y, s_, silos


def fit(data, fed: pfair.Federation, seed: int, epsilon: float | None, **kw) -> tuple[DeepSteFFLe, list, float]:  # noqa: ANN001
    X, y, s_, silos = arrays(fed)
    privacy = dict(epsilon=None) if epsilon is None else dict(epsilon=epsilon, noise_seed=seed)
    model = DeepSteFFLe(mlp(data.n_features, 2), fairness=FAIRNESS, init_seed=seed, seed=seed, device="cpu",
                        **privacy, **kw)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(X, y, sensitive_features=s_, silos=silos)
    return model, caught, time.perf_counter() - t0


def warned(caught: list) -> str:
    return ";".join(sorted({type(w.message).__name__ for w in caught
                            if issubclass(w.category, pfair.exceptions.ConvergenceWarning)}))


def variants(lam: float, epsilon: float | None, sizes) -> list[tuple[str, float]]:  # noqa: ANN001
    """(step, k) of each variant; the default noise-free run's k is the library's k_λ for silos of
    ``sizes`` records (``noise_free_stretch`` with ``deep_stretch_room`` of 5 epochs)."""
    if lam == 0:
        return [("constant", 1.0)]
    out = [("constant", 1.0), ("scaled", 1.0)]
    if epsilon is None and lam > 1:
        out.append(("scaled", noise_free_stretch(lam, "scaled", deep_stretch_room(5, sizes))))
    return out


def run_block(name: str, epsilon: float | None) -> pd.DataFrame:
    data = cv.load(name)
    constant = float(pfair.metrics.trivial_error(data.y_test))
    rows = []
    for seed in SEEDS:
        fed = cv.federation(data, seed)
        line = None
        for lam in LAMS:
            for step, k in variants(lam, epsilon, fed.sizes):
                # k == 1 with the scaled step, noise-free: the batch "auto" resolves to (on the silos'
                # sizes, as DeepSteFFLe.fit does) stated, so the run is not stretched; k > 1: the default
                # "auto" batch, which the library stretches itself.
                batch = (deep_batch_size(fed.sizes)
                         if step == "scaled" and k == 1 and epsilon is None and lam > 1 else "auto")
                model, caught, seconds = fit(data, fed, seed, epsilon, lam=lam, theta_step=step, batch_size=batch)
                assert len(model.history_) == math.ceil(5 * k), (len(model.history_), k)
                val = model.history_["validation_error"].dropna().to_numpy()
                pred = model.predict(data.X_test)
                err = float(np.mean(pred != data.y_test))
                v = cv.violation(FAIRNESS, data.y_test, pred, data.s_test)
                if lam == 0:
                    line = mixing_line(data.y_test, pred, sensitive_features=data.s_test, fairness=FAIRNESS)
                r = dict(table=name, epsilon="none" if epsilon is None else epsilon, seed=seed, lam=lam, step=step,
                         k=k, error=err, violation=v, below_line=line.margin(err, v),
                         spread5=float(np.ptp(val[-5:])), constant_returned=model.selected_epoch_ == 0,
                         epochs=len(model.history_), constant_error=constant, warned=warned(caught), seconds=seconds)
                rows.append(r)
                print(f"{name:<10} eps={r['epsilon']} seed={seed} lam={lam:<4g} {step:<8} k={k:<4g} err={err:.4f} "
                      f"DP={v:.4f} below={r['below_line']:+.4f} spread5={r['spread5']:.3f} "
                      f"{'constant ' if r['constant_returned'] else ''}{r['warned']} ({seconds:.0f} s)", flush=True)
    return pd.DataFrame(rows)


def run_targets(name: str, epsilon: float | None) -> pd.DataFrame:
    data = cv.load(name)
    rows = []
    for seed in SEEDS:
        fed = cv.federation(data, seed)
        for target in TARGETS:
            for step in ("constant", "scaled"):
                model, caught, seconds = fit(data, fed, seed, epsilon, max_violation=target, theta_step=step)
                pred = model.predict(data.X_test)
                r = dict(table=name, epsilon="none" if epsilon is None else epsilon, seed=seed, target=target,
                         step=step, error=float(np.mean(pred != data.y_test)),
                         violation=cv.violation(FAIRNESS, data.y_test, pred, data.s_test), lam=float(model.lam_),
                         constant_returned=model.selected_epoch_ == 0, warned=warned(caught), seconds=seconds)
                rows.append(r)
                print(f"{name:<10} eps={r['epsilon']} seed={seed} target={target:g} {step:<8} err={r['error']:.4f} "
                      f"DP={r['violation']:.4f} lam={r['lam']:.1f} {r['warned']} ({seconds:.0f} s)", flush=True)
    return pd.DataFrame(rows)


def store(path: Path, block: pd.DataFrame) -> None:
    """Replace ``block``'s (table, epsilon) rows of ``path`` by ``block`` (under a lock)."""
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        old = pd.read_csv(path) if path.exists() else pd.DataFrame()
        if len(old):
            keep = ~(old["table"].isin(block["table"].unique()) & old["epsilon"].astype(str).isin(
                block["epsilon"].astype(str).unique()))
            old = old[keep]
        pd.concat([old, block], ignore_index=True).to_csv(path, index=False)
    path.with_suffix(".lock").unlink(missing_ok=True)


def markdown(df: pd.DataFrame) -> str:
    head = "| " + " | ".join(str(c) for c in df.columns) + " |"
    sep = "|" + "---|" * len(df.columns)
    body = ["| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row) + " |"
            for row in df.itertuples(index=False)]
    return "\n".join([head, sep, *body])


def label(step: str, k: float) -> str:
    return step if k == 1 else f"{step} ×k"


def summary(runs: pd.DataFrame, targets: pd.DataFrame | None) -> str:
    out = []
    runs = runs.assign(variant=[label(s, k) for s, k in zip(runs["step"], runs["k"])])
    fair = runs[runs["lam"] > 0]
    for eps in ("none", "1.0"):
        sub = fair[fair["epsilon"].astype(str) == eps]
        if not len(sub):
            continue
        out.append(f"\n## {'non-private' if eps == 'none' else 'ε = 1'}: per table and λ, mean over seeds "
                   "(error / DP / margin below the λ = 0 model's mixing line / spread of the last five "
                   "validation errors)\n")
        rows = []
        for (table, lam), g in sub.groupby(["table", "lam"], sort=False):
            row = dict(table=table, lam=f"{lam:g}")
            for v, h in g.groupby("variant", sort=False):
                row[v] = (f"{h['error'].mean():.3f} / {h['violation'].mean():.3f} / {h['below_line'].mean():+.3f} / "
                          f"{h['spread5'].mean():.3f}")
            rows.append(row)
        out.append(markdown(pd.DataFrame(rows).fillna("")))
        out.append("\ncounts over the fits at λ > 0 (of each variant's fits): below the line (margin > 0), "
                   "settled (spread ≤ 0.02), constant predictor returned; λ ≥ 3 only in brackets\n")
        rows = []
        for v, h in sub.groupby("variant", sort=False):
            big = h[h["lam"] >= 3]
            rows.append(dict(variant=v, fits=len(h), below=f"{int((h['below_line'] > 0).sum())} ({int((big['below_line'] > 0).sum())} of {len(big)})",
                             settled=f"{int((h['spread5'] <= 0.02).sum())} ({int((big['spread5'] <= 0.02).sum())})",
                             constant=f"{int(h['constant_returned'].sum())} ({int(big['constant_returned'].sum())})",
                             mean_margin=f"{h['below_line'].mean():+.4f}", seconds=f"{h['seconds'].mean():.1f}"))
        out.append(markdown(pd.DataFrame(rows)))
    if targets is not None and len(targets):
        out.append("\n## A fairness target (max_violation): mean over seeds (error / DP / λ at the end; "
                   "met: fits whose test DP ≤ target + 0.02, of the seeds)\n")
        rows = []
        for (table, eps, t), g in targets.groupby(["table", "epsilon", "target"], sort=False):
            row = dict(table=table, epsilon=str(eps), target=f"{t:g}")
            for step, h in g.groupby("step", sort=False):
                row[step] = (f"{h['error'].mean():.3f} / {h['violation'].mean():.3f} / {h['lam'].mean():.1f}, "
                             f"met {int((h['violation'] <= t + 0.02).sum())} of {len(h)}")
            rows.append(row)
        out.append(markdown(pd.DataFrame(rows)))
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", default=",".join(TABLES))
    ap.add_argument("--epsilons", default="none,1")
    ap.add_argument("--targets", default=None, help="tables of the target part (default: %s; 'none': skip)"
                    % ",".join(TARGET_TABLES))
    ap.add_argument("--summary", action="store_true", help="only print the summary of the stored runs")
    ap.add_argument("--held-out", action="store_true", help="the first part on HELD_OUT, into %s" % HELD_OUT_RUNS.name)
    args = ap.parse_args()
    torch.set_num_threads(1)
    epsilons = [None if e == "none" else float(e) for e in args.epsilons.split(",")]
    runs_path = HELD_OUT_RUNS if args.held_out else RUNS
    tables = args.tables.split(",")
    if args.held_out and args.tables == ",".join(TABLES):
        tables = list(HELD_OUT)
    if not args.summary:
        for name in tables:
            if name in ("", "none"):
                continue
            for eps in epsilons:
                store(runs_path, run_block(name, eps))
        for name in ("none" if args.held_out else (args.targets or ",".join(TARGET_TABLES))).split(","):
            if name in ("", "none"):
                continue
            for eps in epsilons:
                store(TARGET_RUNS, run_targets(name, eps))
    runs = pd.read_csv(runs_path)
    targets = None if args.held_out or not TARGET_RUNS.exists() else pd.read_csv(TARGET_RUNS)
    print(summary(runs, targets))


if __name__ == "__main__":
    main()
