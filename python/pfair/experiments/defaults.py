"""The protocol that chose SteFFLe's default hyper-parameters, as code (docs/optimisation.md).

Validation data only, never test data:

1. On every bundled data set, the *training* split is cut once (seed 0, stratified by (y, s))
   into 80 % train and 20 % validation; the test split is never loaded into a model here.
2. The train part goes to 3 homogeneous silos (a fixed random assignment), the paper's N = 3.
3. Every configuration of the grid is fitted in two *regimes*: private, ε = 1 per silo
   (δ = 1/n_j², attribute mode, ``p_s="dp"``, the settings' default sampling), and non-private
   (``epsilon=None``: nothing clipped or noised), for the regime's λ values (``REGIMES``) and
   ``SEEDS`` seeds (a seed sets the public batch order and, when private, ``noise_seed``, which makes the simulation
   reproducible; a deployment leaves it None). Stage 1 runs at ``BASE1`` (the clip norm only when
   private: nothing is clipped without privacy), every other setting at the estimator's default.
4. A configuration's score on a data set is the mean over λ and seeds of
   ``validation error / constant-predictor error + validation DP violation``: 1 is the constant
   predictor; lower is better, and a λ that buys fairness with error is charged for the error.
   A configuration's score in a regime is its mean score over the data sets (each weighs the same).
5. Stage 1 searches batch size × ``lr_theta`` × epochs (``STAGE1``) in both regimes. The regimes
   share one ``lr_theta`` and one number of epochs (one default each, whatever ``epsilon``),
   while ``batch_size="auto"`` may resolve to a different cap per regime: the selected
   (lr_theta, epochs) minimises the sum over the regimes of the score of the regime's best batch
   at that (lr_theta, epochs), and each regime's cap is that best batch (:func:`select_shared`).
   A non-private configuration must train every data set (:func:`admissible`: its λ = 0
   validation error within ``UNDERTRAINED_SE`` standard errors of the grid's best).
   Stage 2 searches the clip norm (private only), ``lr_w`` and ``w_radius`` around the stage-1
   winner, selected on the sum of both regimes' scores.
6. Printed checks, per regime and data set at the selected configuration: validation error and
   violation at each λ against the constant predictor's error; and Adult's non-private validation
   error at λ = 0 at the selected configuration against the best of the stage-1 grid.

Batch sizes larger than a silo are capped to the silo (the ``batch_size="auto"`` rule), so small
data sets run full-batch rounds. ``census_kdd`` (224k records) is subsampled to ``MAX_TRAIN``
training records to bound the cost of the grid; its score weighs like any other data set's.

    python -m pfair.experiments.defaults --out docs/optimisation/defaults_runs.csv
"""

from __future__ import annotations

import argparse
import itertools
import time
import warnings
from typing import Any, Iterable

import numpy as np
import pandas as pd

import pfair
from pfair import metrics
from pfair.settings import SteFFLeSettings
from pfair.validation import training_sizes

#: Seeds per (configuration, λ): the batch order, and the noise when private.
SEEDS = (0, 1, 2)
#: Training records of a data set the protocol uses at most (census_kdd only exceeds it).
MAX_TRAIN = 40_000
N_SILOS = 3
#: The regimes a configuration is scored in: per-silo ε (None: non-private) and the λ values
#: (1 is the estimator's default λ). A private fit at λ = 0 in attribute mode sends nothing that
#: depends on s: its rounds carry no noise and it is the non-private fit, so λ = 0 is scored once,
#: in the non-private regime.
REGIMES = {"private": dict(epsilon=1.0, lams=(1.0, 2.0, 8.0)),
           "non-private": dict(epsilon=None, lams=(0.0, 1.0, 2.0, 8.0))}
#: A non-private configuration is admissible only if on every data set its λ = 0 validation error
#: is within this many standard errors (√(e(1 − e)/n_val) at the grid's best e) of the grid's best.
UNDERTRAINED_SE = 1.0

#: Stage 1's fixed settings: stage 2's selection of the protocol's previous pass (which scored the
#: private regime at λ ∈ {2, 8} only, from clip 0.5, lr_w 0.25, w_radius 2).
BASE1 = dict(clip=0.25, lr_w=0.5, w_radius=2.0)
STAGE1 = dict(batch_size=(256, 512, 1024, 4096, 16384), lr_theta=(0.25, 0.5, 1.0, 2.0, 4.0), epochs=(10, 20, 40))
STAGE2 = dict(clip=(0.25, 0.5, 1.0), lr_w=(0.25, 0.5), w_radius=(2.0, 4.0))
#: Knobs whose value may differ between the regimes (the others are one default for both).
PER_REGIME = ("batch_size",)


def split(name: str, seed: int = 0) -> dict[str, Any]:
    """The protocol's train/validation split of a bundled data set's training part."""
    data = pfair.datasets.load(name)
    X, y, s = data.X_train, data.y_train, data.s_train
    rng = np.random.default_rng(seed)
    n = X.shape[0]
    idx = rng.permutation(n)
    if n > MAX_TRAIN / 0.8:
        idx = idx[: int(MAX_TRAIN / 0.8)]
    # Stratified by (y, s): every (label, group) cell keeps its share in both parts.
    cell = y[idx] * (int(s.max()) + 1) + s[idx]
    val_mask = np.zeros(idx.size, dtype=bool)
    for c in np.unique(cell):
        members = np.flatnonzero(cell == c)
        val_mask[members[: max(1, int(round(0.2 * members.size)))]] = True
    tr, va = idx[~val_mask], idx[val_mask]
    silos = rng.integers(0, N_SILOS, size=tr.size)
    return dict(name=name, X=X[tr], y=y[tr], s=s[tr], silos=silos, Xv=X[va], yv=y[va], sv=s[va])


def evaluate(part: dict, lam: float, seed: int, epsilon: float | None, **params: Any) -> dict[str, float]:
    """Fit SteFFLe at ``epsilon`` per silo (None: non-private) on the train part; validation
    error and DP violation."""
    sizes = np.bincount(part["silos"], minlength=N_SILOS)
    params = dict(params)
    # Capped at the smallest silo's training share (each silo holds out validation_share of it).
    train = training_sizes(sizes, params.get("validation_share", SteFFLeSettings().validation_share))
    params["batch_size"] = int(min(params.get("batch_size", 256), min(train)))
    if "clip" in params and epsilon is None:
        params["clip"] = None  # nothing is clipped without privacy (clip="auto")
    noise = {} if epsilon is None else {"noise_seed": 1000 + seed}
    model = pfair.SteFFLe(lam=lam, epsilon=epsilon, seed=seed, track_history=False, **noise, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(part["X"], part["y"], sensitive_features=part["s"], silos=part["silos"])
    pred = model.predict(part["Xv"])
    return dict(val_error=float(np.mean(pred != part["yv"])),
                val_dp=metrics.demographic_parity_difference(part["yv"], pred, sensitive_features=part["sv"]),
                trivial=metrics.trivial_error(part["yv"]), used_batch=params["batch_size"], n_val=int(part["yv"].size))


def grid(space: dict[str, Iterable]) -> list[dict[str, Any]]:
    keys = list(space)
    return [dict(zip(keys, values)) for values in itertools.product(*(space[k] for k in keys))]


def run_stage(parts: list[dict], configs: list[dict], base: dict[str, dict], stage: str) -> pd.DataFrame:
    """Every configuration of ``configs`` on every data set in every regime, on top of the
    regime's ``base`` settings; one row per (data set, regime, configuration, λ, seed)."""
    rows = []
    for part in parts:
        sizes = np.bincount(part["silos"], minlength=N_SILOS)
        for regime, spec in REGIMES.items():
            epsilon = spec["epsilon"]
            done: dict = {}
            for cfg in configs:
                params = {**base[regime], **cfg}
                # Two batch sizes capped to the same silo size are the same run, and so are two
                # clip norms without privacy (nothing is clipped): reuse it.
                run = {**params, "batch_size": min(params.get("batch_size", 256), sizes.min())}
                if epsilon is None:
                    run.pop("clip", None)
                key = tuple(sorted(run.items()))
                for lam in spec["lams"]:
                    for seed in SEEDS:
                        k2 = key + (("lam", lam), ("seed", seed))
                        if k2 not in done:
                            t0 = time.time()
                            done[k2] = evaluate(part, lam, seed, epsilon, **params)
                            done[k2]["seconds"] = time.time() - t0
                        rows.append(dict(stage=stage, regime=regime, data=part["name"], lam=lam, seed=seed,
                                         **params, **done[k2]))
            print(f"  {stage} {part['name']} {regime}: {len(configs)} configurations", flush=True)
    df = pd.DataFrame(rows)
    df["score"] = df["val_error"] / df["trivial"] + df["val_dp"]
    return df


def scores(df: pd.DataFrame, knobs: list[str]) -> pd.DataFrame:
    """Mean score over data sets (each data set weighs the same) per configuration, one column
    per regime."""
    per_data = df.groupby(["regime"] + knobs + ["data"], dropna=False)["score"].mean().reset_index()
    return per_data.groupby(["regime"] + knobs, dropna=False)["score"].mean().unstack("regime")


def admissible(df: pd.DataFrame, knobs: list[str]) -> pd.Series:
    """Per configuration, whether it trains every data set: its non-private λ = 0 validation error
    (mean over seeds) is within ``UNDERTRAINED_SE`` standard errors of the grid's best on every
    data set, the standard error being √(e(1 − e)/n_val) at the best e."""
    zero = df[(df["regime"] == "non-private") & (df["lam"] == 0.0)]
    err = zero.groupby(["data"] + knobs)["val_error"].mean()
    best = err.groupby(level="data").transform("min")
    n_val = zero.groupby("data")["n_val"].first().reindex(err.index.get_level_values("data")).to_numpy()
    se = np.sqrt(best * (1 - best) / n_val)
    return ((err - best) <= UNDERTRAINED_SE * se).groupby(level=knobs).all()


def select_shared(df: pd.DataFrame, knobs: list[str]) -> tuple[dict[str, dict], pd.DataFrame]:
    """Per regime, the configuration of least mean score, under two rules: only the knobs in
    ``PER_REGIME`` may differ between the regimes, and the non-private regime takes admissible
    configurations only (:func:`admissible`). For each value of the shared knobs, each regime takes
    its best per-regime knobs, and the shared value of least summed score wins."""
    table = scores(df, knobs)
    table["admissible"] = admissible(df, knobs).reindex(table.index).fillna(False).astype(bool)
    shared = [k for k in knobs if k not in PER_REGIME]
    own = [k for k in knobs if k in PER_REGIME]
    rows = []
    for value, sub in table.groupby(level=shared):
        value = value if isinstance(value, tuple) else (value,)
        row = dict(zip(shared, value))
        total = 0.0
        for regime in REGIMES:
            col = sub[regime] if regime == "private" else sub.loc[sub["admissible"], regime]
            if col.empty:
                total = np.inf
                continue
            chosen = dict(zip(knobs, col.idxmin()))
            row.update({f"{k} ({regime})": chosen[k] for k in own})
            row[f"score ({regime})"] = float(col.min())
            total += float(col.min())
        row["score (sum)"] = total
        rows.append(row)
    summary = pd.DataFrame(rows).sort_values("score (sum)").reset_index(drop=True)
    top = summary.iloc[0]
    best = {regime: {k: _plain(top[k]) for k in shared} | {k: _plain(top[f"{k} ({regime})"]) for k in own}
            for regime in REGIMES}
    return best, summary


def select_stage2(df: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    """Stage 2's selection: the (clip, lr_w, w_radius) of least summed score over the regimes
    (the non-private score does not depend on the clip norm); and the table, best first."""
    table = scores(df, list(STAGE2))
    table["sum"] = table[list(REGIMES)].sum(axis=1)
    table = table.sort_values("sum")
    return dict(zip(STAGE2, (_plain(v) for v in table.index[0]))), table


def selected(runs: pd.DataFrame) -> dict[str, dict]:
    """The protocol's selection per regime, from its runs (the CSV ``main`` writes)."""
    best1, _ = select_shared(runs[runs["stage"] == "stage1"], list(STAGE1))
    best2, _ = select_stage2(runs[runs["stage"] == "stage2"])
    return {regime: {**best1[regime], **best2} for regime in REGIMES}


def _plain(value: Any) -> Any:
    """A numpy scalar as a Python number (an int when it is whole: batch sizes and epochs)."""
    value = value.item() if hasattr(value, "item") else value
    return int(value) if isinstance(value, float) and value.is_integer() and value >= 10 else value


def at(df: pd.DataFrame, regime: str, config: dict) -> pd.DataFrame:
    """The rows of ``regime`` at ``config`` (a clip norm is ignored without privacy)."""
    sel = df[df["regime"] == regime]
    for k, v in config.items():
        if k == "clip" and regime == "non-private":
            continue
        sel = sel[sel[k] == v]
    return sel


def checks(df: pd.DataFrame, best: dict[str, dict]) -> pd.DataFrame:
    """Per regime and data set, at the selected configuration: validation error at each λ against
    the constant predictor, and the violation at each λ (mean over seeds)."""
    sel = pd.concat([at(df, regime, cfg) for regime, cfg in best.items()])
    return sel.groupby(["regime", "data", "lam"])[["val_error", "val_dp", "trivial"]].mean().unstack("lam")


def adult_gap(stage1: pd.DataFrame, best: dict[str, dict], knobs: list[str]) -> pd.Series | None:
    """Adult's non-private validation error at λ = 0 at the selected stage-1 configuration against
    the best configuration of the stage-1 grid (mean over seeds)."""
    a = stage1[(stage1["data"] == "adult") & (stage1["lam"] == 0.0) & (stage1["regime"] == "non-private")]
    if a.empty:
        return None
    per = a.groupby(knobs)["val_error"].mean()
    chosen = float(per.loc[tuple(best["non-private"][k] for k in knobs)])
    return pd.Series(dict(selected=chosen, best=float(per.min()), best_at=dict(zip(knobs, per.idxmin())),
                          gap=chosen - float(per.min())))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Choose SteFFLe's defaults on validation splits (see the module docstring).")
    ap.add_argument("--datasets", nargs="+", default=None)
    ap.add_argument("--out", default=None, help="CSV of every run")
    args = ap.parse_args(argv)

    names = args.datasets or pfair.datasets.list_datasets()
    parts = [split(n) for n in names]
    t0 = time.time()
    pd.set_option("display.width", 200)
    knobs1 = list(STAGE1)
    s1 = run_stage(parts, grid(STAGE1), {r: dict(BASE1) for r in REGIMES}, "stage1")
    best1, table1 = select_shared(s1, knobs1)
    print("stage 1, best 8 (mean score over data sets; the batch is each regime's best at that "
          "lr_theta and epochs):\n" + table1.head(8).round(4).to_string(), flush=True)
    t = scores(s1, knobs1)
    t["admissible"] = admissible(s1, knobs1).reindex(t.index)
    for regime in REGIMES:
        cols = [regime] + (["admissible"] if regime == "non-private" else [])
        print(f"stage 1, {regime} regime, its own best 6 (admissible: trains every data set at λ = 0):\n"
              + t.sort_values(regime)[cols].head(6).round(4).to_string(), flush=True)
    gap = adult_gap(s1, best1, knobs1)
    if gap is not None:
        print("Adult, non-private validation error at λ = 0, selected against the best of the grid:\n"
              + gap.to_string(), flush=True)
    s2 = run_stage(parts, grid(STAGE2), best1, "stage2")
    best2, t2 = select_stage2(s2)
    print("stage 2, best 8:\n" + t2.head(8).round(4).to_string(), flush=True)
    best = {regime: {**best1[regime], **best2} for regime in REGIMES}
    print(f"selected: {best}  ({time.time() - t0:.0f} s)")
    both = pd.concat([s1, s2], ignore_index=True)
    print("checks at the selected configuration (validation; mean over seeds):")
    print(checks(s2, {r: best2 for r in REGIMES}).round(4).to_string())
    if args.out:
        both.to_csv(args.out, index=False, float_format="%.5g")


if __name__ == "__main__":
    main()
