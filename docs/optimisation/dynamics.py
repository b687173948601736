"""Per-epoch picture of SteFFLe's min-max dynamics: does training settle, or cycle?

For each data set, λ and θ-step rule it fits SteFFLe (3 silos, seed 0 unless told) and records
after every epoch, beside the fit's own history (validation error on the silos' held-out records,
the released figures), what only a simulation can see: the training-set violation, the test error
and violation, ‖θ‖, and ‖W − W*(θ)‖, how far the server's W is from the best response to the
epoch's θ (W*(θ)_{ru} = E[F_u 1{s=r}] / (√p_r E[F_u]) over the pooled training records, the
maximiser of the concave W-problem; demographic parity only).

The θ-step rules (``--rules``):

* ``constant``: η_θ as set, whatever λ (pfair before the fix: ``theta_step="constant"``);
* ``scaled``: η_θ / max(1, λ/λ_c), pfair's default (``theta_step="scaled"``, λ_c =
  ``pfair.settings.THETA_STEP_LAMBDA``), halved at each reversal of the validation error;
* ``scaled:C``: η_θ / max(1, λ/C) without the halving (a candidate constant C);
* ``scaled@LR``: the scaled rule from ``lr_theta=LR``;
* ``average``: the constant rule, returning the mean of the last five epochs' θ (averaging released
  iterates, free in privacy).

    python docs/optimisation/dynamics.py --data synthetic2 adult --lams 1 8 40 \
        --rules constant scaled --out docs/optimisation/dynamics.csv

``synthetic<D>`` is ``make_synthetic(60000, 40, silos=3, dependence=D, seed=0)``. ``--epsilon 1``
makes the fits private (ε = 1, attribute mode, the default budget split). Non-private fits state
their batch (256, what ``"auto"`` resolves to on these silos), so every rule runs the same epochs
(``"auto"`` would stretch a noise-free run at a large λ: docs/optimisation.md, "A noise-free run at a
large λ").
"""

from __future__ import annotations

import argparse
import csv
import math
import time
import warnings
from typing import Any

import numpy as np

import pfair
from pfair import metrics
from pfair.settings import AUTO_BATCH_NONPRIVATE, SteFFLeSettings

COLUMNS = ["data", "epsilon", "lam", "rule", "seed", "epoch", "lr_theta", "validation_error", "constant_error",
           "train_dp", "test_error", "test_dp", "test_eo", "theta_norm", "w_gap", "selected"]


def load(name: str) -> Any:
    """A bundled table, or ``synthetic<D>`` (dependence D)."""
    if name.startswith("synthetic"):
        dep = float(name[len("synthetic"):] or 2)
        return pfair.datasets.make_synthetic(60000, 40, silos=3, dependence=dep, seed=0)
    return pfair.datasets.load(name)


def federation(data: Any, seed: int) -> Any:
    if data.name == "synthetic":
        return pfair.Federation.from_dataset(data, data.attrs_train["silo"].to_numpy())
    return pfair.Federation.for_dataset(data, 3, heterogeneity=0.0, seed=seed)


def best_response(theta: np.ndarray, X: np.ndarray, s: np.ndarray, p: np.ndarray, l: int) -> np.ndarray:  # noqa: E741
    """W*(θ) of demographic parity (k × l) on the records (X, s) with proportions p."""
    F = pfair._core.predict_proba(np.ascontiguousarray(X), np.ascontiguousarray(theta), l)
    k = len(p)
    joint = np.stack([F[s == r].sum(axis=0) for r in range(k)]) / len(s)  # E[F_u 1{s=r}]
    return joint / (np.sqrt(p)[:, None] * F.mean(axis=0)[None, :])


def rule_params(rule: str, lam: float) -> dict:
    """Estimator settings of a rule at λ."""
    if rule == "constant" or rule == "average":
        return {"theta_step": "constant"}
    if rule == "scaled":
        return {"theta_step": "scaled"}
    if rule.startswith("scaled@"):  # the scaled rule from another lr_theta
        return {"theta_step": "scaled", "lr_theta": float(rule.split("@")[1])}
    if rule.startswith("scaled:"):
        c = float(rule.split(":")[1])
        return {"theta_step": "constant", "lr_theta": SteFFLeSettings().lr_theta / max(1.0, lam / c)}
    raise ValueError(f"unknown rule {rule!r}")


def trace(data: Any, lam: float, rule: str, *, seed: int = 0, epsilon: float | None = None,
          fairness: str = "demographic_parity", **extra: Any) -> list[dict]:
    """The per-epoch rows of one fit (see the module docstring)."""
    fed = federation(data, seed)
    params = dict(fairness=fairness, lam=lam, epsilon=epsilon, seed=seed, p_s=None if epsilon else "pooled")
    if epsilon is not None:
        params["noise_seed"] = seed
    else:
        # The rules are compared over the same epochs: a non-private batch written out (what "auto"
        # resolves to on these silos) keeps the noise-free run at a large λ from being stretched
        # (SteFFLeSettings.lambda_stretch, docs/optimisation.md "A noise-free run at a large λ").
        params["batch_size"] = AUTO_BATCH_NONPRIVATE
    params.update(rule_params(rule, lam))
    params.update(extra)
    model = pfair.SteFFLe(**params)
    thetas, ws = [], []
    make = model._on_epoch

    def on_epoch_factory(st, f, eval_set):
        inner = make(st, f, eval_set)

        def on_epoch(epoch, theta, w, info):
            thetas.append(np.array(theta, copy=True))
            ws.append(np.array(w, copy=True))
            return inner(epoch, theta, w, info)
        return on_epoch

    model._on_epoch = on_epoch_factory
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(fed, eval_set=(data.X_test, data.y_test, data.s_test))
    Xp, yp, sp = fed.pooled()
    l, k = len(model.classes_), len(fed.groups_)
    p = np.bincount(sp, minlength=k) / len(sp)
    h = model.history_
    selected = model.selected_epoch_ if getattr(model, "selected_epoch_", None) else len(h)
    rows = []
    for i, (ep, r) in enumerate(h.iterrows()):
        th = thetas[i]
        gap = math.nan
        if fairness == "demographic_parity" and lam > 0:
            gap = float(np.linalg.norm(ws[i][: k * l].reshape(k, l) - best_response(th, Xp, sp, p, l)))
        rows.append(dict(epoch=int(ep), lr_theta=float(r.get("lr_theta", math.nan)),
                         validation_error=float(r.get("validation_error", math.nan)),
                         constant_error=float(r.get("constant_error", math.nan)),
                         train_dp=float(r.get("train_demographic_parity_difference", math.nan)),
                         test_error=float(r["test_error"]), test_dp=float(r["test_demographic_parity_difference"]),
                         test_eo=float(r["test_equalized_odds_difference"]), theta_norm=float(r["theta_norm"]),
                         w_gap=gap, selected=int(selected)))
    if rule == "average":  # the mean of the last five epochs' θ, as a sixth "epoch" row
        th = np.mean(thetas[-5:], axis=0)
        model.theta_ = model._fold_scaling(th) if getattr(model, "_scaling", None) is not None else th
        pred = model.predict(data.X_test)
        rows.append(dict(rows[-1], epoch=len(h) + 1, test_error=float(np.mean(pred != data.y_test)),
                         test_dp=metrics.demographic_parity_difference(data.y_test, pred, sensitive_features=data.s_test),
                         test_eo=metrics.equalized_odds_difference(data.y_test, pred, sensitive_features=data.s_test),
                         validation_error=math.nan, w_gap=math.nan))
    return rows


def last_spread(rows: list[dict], key: str = "validation_error", n: int = 5) -> float:
    v = [r[key] for r in rows if not math.isnan(r[key])][-n:]
    return float(max(v) - min(v)) if v else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", nargs="+", default=["synthetic2", "adult"])
    ap.add_argument("--lams", type=float, nargs="+", default=[1, 8, 40])
    ap.add_argument("--rules", nargs="+", default=["constant", "scaled"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--epsilon", type=float, default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--figure", default=None, help="draw the per-epoch validation error of --out's runs here")
    ap.add_argument("--from-csv", default=None, help="read the runs of an earlier --out instead of fitting")
    ap.add_argument("--write", default=None, help="a page whose <!-- generated:dynamics --> block to replace")
    args = ap.parse_args()
    if args.from_csv:
        rows = read_csv(args.from_csv)
        if args.figure:
            figure(rows, args.figure)
        if args.write:
            write_table(rows, args.write)
        print(table(rows))
        return
    out = []
    for name in args.data:
        data = load(name)
        const = metrics.trivial_error(data.y_test)
        print(f"{name}: constant predictor {const:.4f}")
        for lam in args.lams:
            for rule in args.rules:
                for seed in args.seeds:
                    t0 = time.perf_counter()
                    rows = trace(data, lam, rule, seed=seed, epsilon=args.epsilon)
                    dt = time.perf_counter() - t0
                    for r in rows:
                        out.append(dict(data=name, epsilon=args.epsilon, lam=lam, rule=rule, seed=seed, **r))
                    last = rows[-1]
                    print(f"  lam={lam:<4g} {rule:<10} seed={seed} spread5={last_spread(rows):.3f} "
                          f"test err={last['test_error']:.3f} dp={last['test_dp']:.3f} sel={last['selected']} "
                          f"w_gap={last['w_gap']:.3f} ({dt:.1f} s) | val: "
                          + " ".join(f"{r['validation_error']:.2f}" for r in rows[-10:]), flush=True)
    if args.out:
        with open(args.out, "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=COLUMNS)
            wr.writeheader()
            for r in out:
                wr.writerow({c: r.get(c) for c in COLUMNS})
    if args.figure:
        figure(out, args.figure)
    if args.write:
        write_table(out, args.write)


def read_csv(path: str) -> list[dict]:
    with open(path) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in COLUMNS[2:]:
            if k != "rule":
                r[k] = float(r[k]) if r[k] not in ("", "None") else math.nan
        r["seed"] = int(r["seed"])
    return rows


def table(rows: list[dict]) -> str:
    """Per data set, λ and rule (seed 0): the last five epochs' validation-error span, the returned
    epoch, the last epoch's test error and violation and ‖W − W*(θ)‖."""
    lines = ["| data | λ | theta_step | last-5 span of validation error | returned epoch | test error | test DP | ‖W − W*(θ)‖ |",
             "|---|---|---|---|---|---|---|---|"]
    keys = []
    for r in rows:
        k = (r["data"], float(r["lam"]), r["rule"])
        if k not in keys:
            keys.append(k)
    for name, lam, rule in keys:
        sel = [r for r in rows if (r["data"], float(r["lam"]), r["rule"]) == (name, lam, rule) and int(r["seed"]) == 0]
        last = sel[-1]
        lines.append(f"| {name} | {lam:g} | {rule} | {last_spread(sel):.3f} | {int(last['selected'])} | "
                     f"{last['test_error']:.3f} | {last['test_dp']:.3f} | {last['w_gap']:.3f} |")
    return "\n".join(lines)


def write_table(rows: list[dict], page: str) -> None:
    from pathlib import Path

    doc = Path(page)
    text = doc.read_text()
    start, end = "<!-- generated:dynamics -->", "<!-- /generated:dynamics -->"
    a, b = text.index(start) + len(start), text.index(end)
    doc.write_text(text[:a] + "\n<!-- generated by python docs/optimisation/dynamics.py -->\n" + table(rows) + "\n"
                   + text[b:])


def figure(rows: list[dict], path: str) -> None:
    """Per-epoch validation error and test violation of seed 0: two rows per data set, one column per
    λ, one line per rule."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["data"] for r in rows))
    lams = sorted({float(r["lam"]) for r in rows})
    rules = list(dict.fromkeys(r["rule"] for r in rows))
    fig, axes = plt.subplots(2 * len(names), len(lams), figsize=(3.2 * len(lams), 2.0 * 2 * len(names)),
                             sharex=True, squeeze=False)
    for i, name in enumerate(names):
        for j, lam in enumerate(lams):
            for rule in rules:
                sel = [r for r in rows if r["data"] == name and float(r["lam"]) == lam and r["rule"] == rule
                       and int(r["seed"]) == 0 and not math.isnan(float(r["validation_error"]))]
                ep = [int(r["epoch"]) for r in sel]
                axes[2 * i, j].plot(ep, [float(r["validation_error"]) for r in sel], marker=".", ms=3,
                                    label=f"theta_step={rule}")
                axes[2 * i + 1, j].plot(ep, [float(r["test_dp"]) for r in sel], marker=".", ms=3)
            axes[2 * i, j].set_title(f"{name}, λ = {lam:g}", fontsize=9)
            axes[2 * i, j].tick_params(labelsize=7)
            axes[2 * i + 1, j].tick_params(labelsize=7)
        axes[2 * i, 0].set_ylabel("validation error", fontsize=8)
        axes[2 * i + 1, 0].set_ylabel("test DP", fontsize=8)
    for j in range(len(lams)):
        axes[-1, j].set_xlabel("epoch", fontsize=8)
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
