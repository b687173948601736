"""Command line: ``pfair train``, ``pfair privacy``, ``pfair privacy-report``, ``pfair datasets``,
``pfair sweep``, ``pfair summary``, ``pfair plot``, ``pfair deploy local``.

``pfair train --dataset adult --silos 3 --heterogeneity 0 --epsilon 1 --lam 1.0 [--json]`` trains
SteFFLe on a bundled data set split into silos and prints test error, fairness violations and the
privacy spent.

``pfair sweep --dataset adult --methods steffle,pfld,fedavg --epsilon 1 3 9 --heterogeneity 0 0.75
--silos 3 --lam 0:2:11 --seeds 15 --out results/`` runs a grid of fits in parallel into
``results/runs.csv`` (resumable); ``pfair summary results/`` and ``pfair plot results/`` turn it
into the summary table and the figures (see :mod:`pfair.experiments` and docs/experiments.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from typing import Any, Sequence


def _float_or_none(text: str) -> float | None:
    return None if text.lower() in ("none", "inf", "off") else float(text)


def add_train_parser(sub: Any) -> None:
    p = sub.add_parser("train", help="train SteFFLe on a bundled data set and report error, fairness, privacy")
    p.add_argument("--dataset", default="adult", help="bundled data set name (see `pfair datasets`)")
    p.add_argument("--sensitive", default=None, help="sensitive attribute (data-set specific, e.g. sex, race)")
    p.add_argument("--silos", type=int, default=3, help="number of silos N")
    p.add_argument("--heterogeneity", type=float, default=0.0, help="h in [0, 1] of the paper's partitioner")
    p.add_argument("--partition-by", default=None, help="attribute the partitioner sorts by (default: age)")
    p.add_argument("--epsilon", type=_float_or_none, default=1.0, help="per-silo epsilon; 'none' = non-private")
    p.add_argument("--delta", type=float, default=None, help="per-silo delta (default 1/n_j^2)")
    p.add_argument("--lam", type=float, default=1.0, help="fairness weight lambda")
    p.add_argument("--fairness", default="demographic_parity",
                   choices=["demographic_parity", "equalized_odds", "equal_opportunity"])
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--batch-size", type=lambda t: "auto" if t == "auto" else int(t), default="auto",
                   help="records per silo and round; auto: min(4096, smallest silo)")
    p.add_argument("--lr-theta", type=float, default=0.25)
    p.add_argument("--lr-w", type=float, default=0.25)
    p.add_argument("--w-radius", type=_float_or_none, default=2.0)
    p.add_argument("--clip", type=lambda t: "auto" if t == "auto" else _float_or_none(t), default="auto",
                   help="clip norm of the s-dependent part; auto: 1.0 when private, none otherwise")
    p.add_argument("--sampling", default="without_replacement", choices=["without_replacement", "poisson", "full_batch"])
    p.add_argument("--protect", default="attribute", choices=["attribute", "record"])
    p.add_argument("--calibration", default="rdp", choices=["rdp", "paper"])
    p.add_argument("--p-s", dest="p_s", type=_p_s_arg, default=None,
                   help="group proportions: 'dp' (each silo releases a DP histogram; default when private), "
                        "'pooled' (exact pooled proportions: paper reproduction, not covered by the guarantee), "
                        "or public proportions as comma-separated numbers, e.g. 0.33,0.67")
    p.add_argument("--mode", default="standard", choices=["standard", "divisions", "central_sensitive", "hybrid"],
                   help="who holds s (hybrid centralization, see pfair.hybrid)")
    p.add_argument("--sensitive-silos", type=int, default=None,
                   help="--mode hybrid: number of sensitive silos (records assigned to them at random)")
    p.add_argument("--dummy-noise", action="store_true",
                   help="hybrid modes: sensitive silos with no record in a round's batch send zero-mean noise")
    p.add_argument("--no-amplification", dest="amplification", action="store_false",
                   help="hybrid modes: charge every round in full (q = 1) instead of the public-batch rate")
    p.add_argument("--seed", type=int, default=0, help="seeds the partition and the (public) batch order")
    p.add_argument("--noise-seed", type=int, default=None,
                   help="make the noise reproducible (simulations only: the guarantee does not hold against "
                        "anyone who knows it); default: secret noise from the operating system")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--out", default=None, help="also write the result, with the per-silo privacy report, to this JSON file")
    p.set_defaults(func=train_command)


def add_privacy_report_parser(sub: Any) -> None:
    p = sub.add_parser("privacy-report", help="print the per-silo privacy report of a run saved with `pfair train --out`")
    p.add_argument("run", help="JSON file written by `pfair train --out`")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=privacy_report_command)


REPORT_COLUMNS = ["n_records", "sampling", "accounting", "sample_rate", "steps", "noise_multiplier", "sigma_loss",
                  "sigma_theta", "sigma_w", "target_epsilon", "epsilon_spent", "delta", "p_s", "noise", "guarantee",
                  "calibration", "protect"]


def _p_s_arg(text: str) -> Any:
    if text in ("dp", "pooled"):
        return text
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--p-s {text!r}: use 'dp', 'pooled' or comma-separated proportions such as 0.33,0.67") from None
    return values


def privacy_report_command(args: argparse.Namespace) -> int:
    import pandas as pd

    try:
        with open(args.run) as fh:
            run = json.load(fh)
    except FileNotFoundError:
        raise ValueError(f"run file {args.run!r} does not exist; write one with `pfair train ... --out FILE`") from None
    if "privacy_report" not in run:
        raise ValueError(f"{args.run!r} has no privacy_report; it was not written by `pfair train --out`")
    if args.json:
        print(json.dumps(run["privacy_report"]))
        return 0
    df = pd.DataFrame(run["privacy_report"]).set_index("silo")
    print(f"{run['dataset']}: mode {run.get('mode', 'standard')}, epsilon target {run['epsilon']}, "
          f"p_s {df['p_s'].iloc[0]}")
    print(df[[c for c in REPORT_COLUMNS if c in df.columns]].to_string(float_format=lambda v: f"{v:.4g}"))
    return 0


def train_command(args: argparse.Namespace) -> int:
    from pfair import datasets, metrics
    from pfair.estimators import SteFFLe
    from pfair.federation import Federation

    import numpy as np

    t0 = time.perf_counter()
    kwargs = {"sensitive": args.sensitive} if args.sensitive else {}
    ds = datasets.load(args.dataset, **kwargs)
    fed = Federation.for_dataset(ds, args.silos, heterogeneity=args.heterogeneity, by=args.partition_by,
                                 seed=args.seed)
    sensitive_silos = None
    if args.mode == "hybrid":
        n_sens = args.sensitive_silos or 2
        sensitive_silos = np.random.default_rng(args.seed).integers(0, n_sens, size=fed.n_records)
    model = SteFFLe(
        fairness=args.fairness, lam=args.lam, epsilon=args.epsilon, delta=args.delta, epochs=args.epochs,
        batch_size=args.batch_size, lr_theta=args.lr_theta, lr_w=args.lr_w, w_radius=args.w_radius,
        clip=args.clip, sampling=args.sampling, protect=args.protect, calibration=args.calibration,
        p_s=args.p_s, mode=args.mode, amplification=args.amplification, dummy_noise=args.dummy_noise, seed=args.seed,
        noise_seed=args.noise_seed, progress=not args.json, track_history=not args.json,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(fed, sensitive_silos=sensitive_silos)
    pred = model.predict(ds.X_test)
    report = metrics.fairness_report(ds.y_test, pred, sensitive_features=ds.s_test)
    report_df = model.privacy_report_
    eps_spent = model.epsilon_spent_ if args.epsilon is not None else None
    delta = float(report_df["delta"].max()) if args.epsilon is not None else None
    result = {
        "dataset": ds.name,
        "fairness": args.fairness,
        "silos": args.silos,
        "mode": args.mode,
        "heterogeneity": args.heterogeneity,
        "lam": args.lam,
        "epsilon": args.epsilon,
        "test_error": report["test_error"],
        "trivial_error": report["trivial_error"],
        "dp_violation": report["dp_violation"],
        "eo_violation": report["eo_violation"],
        "epsilon_spent": eps_spent,
        "delta": delta,
        "noise_multiplier": [float(z) for z in report_df["noise_multiplier"]],
        "warnings": [str(w.message) for w in caught],
        "seconds": time.perf_counter() - t0,
    }
    if args.out:
        rows = report_df.reset_index().replace({np.inf: None}).to_dict(orient="records")
        with open(args.out, "w") as fh:
            json.dump({**result, "privacy_report": rows}, fh, indent=1, default=float)
    if args.json:
        print(json.dumps(result))
        return 0
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    print(f"data set      {ds.name}: {fed.n_records} training records in {fed.n_silos} silos {fed.sizes}, "
          f"h = {args.heterogeneity}")
    print(f"test error    {result['test_error']:.4f}   (trivial constant predictor: {result['trivial_error']:.4f})")
    print(f"DP violation  {result['dp_violation']:.4f}")
    print(f"EO violation  {result['eo_violation']:.4f}")
    if args.epsilon is None:
        print("privacy       none (epsilon = none)")
    else:
        cols = ["n_records", "sample_rate", "steps", "noise_multiplier", "sigma_theta", "sigma_w", "epsilon_spent", "delta"]
        who = "silo" if args.mode == "standard" else "sensitive silo"
        print(f"privacy       per-{who} ({args.epsilon:g}, delta)-ISRL-DP w.r.t. {ds.sensitive_name}; "
              f"max epsilon spent {eps_spent:.4f}; p_s {report_df['p_s'].iloc[0]}; noise {report_df['noise'].iloc[0]}; "
              f"calibration {args.calibration}")
        print(report_df[cols].to_string(float_format=lambda v: f"{v:.4g}"))
    print(f"time          {result['seconds']:.1f} s")
    return 0


def add_experiment_parsers(sub: Any) -> None:
    """``pfair sweep``, ``pfair summary`` and ``pfair plot`` (thin wrappers of :mod:`pfair.experiments`)."""
    from pfair.experiments.methods import FAIRNESS_CHOICES, METHODS

    p = sub.add_parser("sweep", help="run a grid of methods x settings x seeds in parallel into DIR/runs.csv (resumable)",
                       description="Run every cell (method, dataset, fairness, epsilon, heterogeneity, silos, knob, "
                                   "seed) of a grid not yet in OUT/runs.csv. Numeric options take numbers or "
                                   "start:stop:count (numpy.linspace), e.g. --lam 0:2:11.")
    p.add_argument("--dataset", nargs="+", default=["adult"], help="bundled data set name(s) (see `pfair datasets`)")
    p.add_argument("--methods", default="steffle,pfld,fedavg",
                   help=f"comma-separated methods: {', '.join(METHODS)}")
    p.add_argument("--fairness", nargs="+", default=["demographic_parity"], choices=list(FAIRNESS_CHOICES))
    p.add_argument("--epsilon", nargs="+", default=["1", "3", "9"],
                   help="per-silo epsilon of the private methods (non-private ones run once with inf)")
    p.add_argument("--heterogeneity", nargs="+", default=["0", "0.75"], help="h in [0, 1] of the partitioner")
    p.add_argument("--silos", nargs="+", default=["3"], help="number(s) of silos N >= 1")
    p.add_argument("--lam", nargs="+", default=["0:2:11"],
                   help="knob values: lambda (lam_max for pfld, rho_o/10 for single_shot); none for fedavg, "
                        "central_erm")
    p.add_argument("--seeds", type=int, default=15, help="number of seeds (0..seeds-1); a seed drives partition, "
                                                        "batches and noise")
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--param", action="append", default=[], metavar="METHOD.NAME=VALUE",
                   help="override a method's hyper-parameter, e.g. single_shot.outer_steps=50 (repeatable)")
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: all cores)")
    p.add_argument("--out", default="results", help="results directory (default: results)")
    p.add_argument("--retry-failed", action="store_true", help="run again the cells whose fit raised")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=sweep_command)

    p = sub.add_parser("summary", help="violation at matched test error and SteFFLe's reduction vs each baseline")
    p.add_argument("path", help="results directory of `pfair sweep` (or its runs.csv)")
    p.add_argument("--reference", default="steffle", help="method the others are compared with (default steffle)")
    p.add_argument("--margin", type=float, default=0.0,
                   help="points with error >= trivial error - margin count as collapsed (default 0)")
    p.add_argument("--csv", default=None, help="where to write the table (default PATH/summary.csv)")
    p.set_defaults(func=summary_command)

    p = sub.add_parser("plot", help="trade-off, heterogeneity and silo-count figures (PNG and SVG)")
    p.add_argument("path", help="results directory of `pfair sweep` (or its runs.csv)")
    p.add_argument("--out", default=None, help="figure directory (default PATH/plots)")
    p.add_argument("--method", default="steffle", help="method of the heterogeneity and silo-count figures")
    p.add_argument("--epsilon", type=float, default=1.0, help="epsilon of those figures (default 1)")
    p.add_argument("--format", nargs="+", default=["png", "svg"], dest="formats")
    p.set_defaults(func=plot_command)


def sweep_command(args: argparse.Namespace) -> int:
    """``pfair sweep``: :func:`pfair.experiments.run_sweep`; exit 130 when interrupted, 1 when every
    cell it ran failed."""
    from pfair.experiments import run_sweep

    try:
        result = run_sweep(
            args.out, methods=args.methods, datasets=args.dataset, fairness=args.fairness, epsilons=args.epsilon,
            heterogeneities=args.heterogeneity, silos=args.silos, lams=args.lam, seeds=args.seeds,
            epochs=args.epochs, batch_size=args.batch_size, params=args.param, jobs=args.jobs,
            progress=not args.no_progress, retry_failed=args.retry_failed,
        )
    except KeyboardInterrupt:
        print(f"\npfair sweep: interrupted; finished cells are kept in {args.out}/runs.csv; "
              "run the same command again to resume", file=sys.stderr)
        return 130
    print(f"ran {result.ran} cells ({result.skipped} already in {result.path}) in {result.seconds:.1f} s; "
          f"{len(result.runs)} rows in total")
    if result.failed:
        print(f"warning: {result.failed} of {result.ran} cells failed (see the error column); first: "
              f"{result.first_error}", file=sys.stderr)
    return 1 if result.ran and result.failed == result.ran else 0


def summary_command(args: argparse.Namespace) -> int:
    """``pfair summary``: print :func:`pfair.experiments.summarize` and write it to summary.csv."""
    from pathlib import Path

    from pfair.experiments.summary import format_summary, summarize

    table = summarize(args.path, reference=args.reference, margin=args.margin)
    base = Path(args.path)
    target = Path(args.csv) if args.csv else (base if base.is_dir() else base.parent) / "summary.csv"
    table.to_csv(target, index=False)
    print(format_summary(table), end="")
    print(f"written to {target}")
    return 0


def plot_command(args: argparse.Namespace) -> int:
    """``pfair plot``: :func:`pfair.experiments.plot_results`; prints the files written."""
    from pfair.experiments import plot_results

    try:
        paths = plot_results(args.path, out=args.out, formats=args.formats, method=args.method, epsilon=args.epsilon)
    except ImportError as exc:
        print(f"pfair plot: error: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pfair", description="Private and fair federated learning (SteFFLe).")
    sub = parser.add_subparsers(dest="command", required=True)
    add_train_parser(sub)
    from pfair.privacy.cli import add_privacy_parser

    add_privacy_parser(sub)
    add_privacy_report_parser(sub)
    add_experiment_parsers(sub)
    from pfair.flower.cli import add_deploy_parser

    add_deploy_parser(sub)
    ds = sub.add_parser("datasets", help="list the bundled data sets")
    ds.set_defaults(func=datasets_command)
    return parser


def datasets_command(args: argparse.Namespace) -> int:
    from pfair import datasets

    print("\n".join(datasets.list_datasets()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError) as exc:
        print(f"pfair {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
