"""Command line: ``pfair train``, ``pfair predict``, ``pfair privacy``, ``pfair privacy-report``, ``pfair datasets``,
``pfair sweep``, ``pfair summary``, ``pfair plot``, ``pfair deploy local``.

``pfair train --dataset adult --silos 3 --heterogeneity 0 --epsilon 1 --lam 1.0 [--json]`` trains
SteFFLe on a bundled data set split into silos and prints test error, the fairness metrics
(``demographic_parity_difference``, ``equalized_odds_difference``, :mod:`pfair.metrics`) and the
privacy spent; ``--max-violation T`` replaces ``--lam`` by a fairness target;
``pfair train --csv data.csv --label COL --sensitive COL [--positive-label V]
[--partition-by COL] [--dropna]`` does the same on your own table (:func:`pfair.datasets.load_csv`;
rows with a missing value are dropped with a warning up to 5% of the table, refused beyond unless
``--dropna``).

``pfair train ... --save-model model.pfair`` writes the model with its preprocessing, settings and
privacy report (:func:`pfair.save_model`); ``pfair predict --model model.pfair --csv new.csv --out
preds.csv [--proba]`` applies it to new rows.

``pfair sweep --dataset adult --methods steffle,pfld,fedavg --epsilon 1 3 9 --heterogeneity 0 0.75
--silos 3 --lam 0:2:11 --seeds 15 --out results/`` runs a grid of fits in parallel into
``results/runs.csv`` (resumable; ``--csv`` and the same options run it on your table); ``pfair summary results/`` and ``pfair plot results/`` turn it
into the summary table and the figures (see :mod:`pfair.experiments` and docs/experiments.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

# Each command imports what it runs inside its function: `pfair --help` and every other command load
# neither the run engine nor scikit-learn unless they use them (docs/architecture.md, "Imports").
from pfair import __version__
# The pieces the subcommands share; re-exported here for the subcommand modules that still import
# them from pfair.cli.
from pfair.cli_common import (  # noqa: F401
    PRIVACY_COLUMNS,
    _batch_size,
    _csv_given,
    _csv_spec,
    _float_or_none,
    add_data_arguments,
    add_save_model_argument,
    checkpoint_summary,
    load_data,
    load_federation,
    print_summary,
    print_tune,
    privacy_notes,
    save_run_model,
    small_group_notes,
    stretch_reason,
)


def add_train_parser(sub: Any) -> None:
    from pfair.notions import FAIRNESS_NOTIONS, NOTIONS
    from pfair.settings import SteFFLeSettings

    p = sub.add_parser(
        "train", help="train SteFFLe on a bundled data set or your CSV and report error, fairness, privacy",
        description="Split the training records into silos, train SteFFLe (each silo's messages\n"
                    "differentially private w.r.t. the sensitive attribute) and print the test error,\n"
                    "the fairness gaps and each silo's privacy report.",
        epilog="examples:\n  pfair train --dataset adult --epsilon 1 --lam 1\n"
               "  pfair train --csv loans.csv --label default --sensitive sex --positive-label 1 "
               "--partition-by region --heterogeneity 0.75",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_arguments(p)
    p.add_argument("--epsilon", type=_float_or_none, default=1.0,
                   help="each silo's privacy budget epsilon (default 1); 'none' = non-private")
    p.add_argument("--delta", type=float, default=None, help="each silo's delta (default 1/n_j^2 for a silo of n_j records)")
    p.add_argument("--lam", type=float, default=1.0,
                   help="fairness weight lambda >= 0: 0 = plain (private) logistic regression, larger = fairer (default 1)")
    p.add_argument("--fairness", default=SteFFLeSettings.fairness, choices=list(FAIRNESS_NOTIONS),
                   help=f"fairness notion the penalty enforces (default {SteFFLeSettings.fairness})")
    p.add_argument("--max-violation", type=float, default=None, metavar="T",
                   help="fairness target in (0, 1) instead of --lam: pfair adapts lambda at checkpoints and returns "
                        "the most accurate checkpoint model whose --fairness metric ("
                        + ", ".join(c.metric_name for c in NOTIONS.values()) + ", in that order) on the silos' "
                        "records is at most T; in a private fit it is measured from noisy per-silo releases that use "
                        "--max-violation-epsilon-share of each silo's epsilon, and a checkpoint meets T with one "
                        "standard deviation of that noise to spare (leave --lam at its default)")
    p.add_argument("--max-violation-epsilon-share", type=float, default=SteFFLeSettings.max_violation_epsilon_share,
                   metavar="SHARE",
                   help="with --max-violation and --epsilon: fraction of each silo's epsilon spent on the releases "
                        f"that measure the violation (default {SteFFLeSettings.max_violation_epsilon_share:g})")
    p.add_argument("--validation-share", type=float, default=SteFFLeSettings.validation_share, metavar="SHARE",
                   help="share of each silo's records held out to validate the checkpoint models: the fit returns the "
                        "last model unless it is not clearly better than the constant predictor there "
                        f"(default {SteFFLeSettings.validation_share:g}; 0: validate on the training records)")
    p.add_argument("--lam-lr", type=float, default=None,
                   help="with --max-violation: the dual step size of lambda (default: SteFFLe's lam_lr)")
    # One source of truth: every default below is SteFFLe's (pfair.settings, chosen by
    # pfair.experiments.defaults); the help texts read them from there.
    from pfair.settings import (AUTO_BATCH_NONPRIVATE, AUTO_BATCH_PRIVATE, AUTO_BATCH_RECORD, AUTO_DECAY,
                                AUTO_RUN_BATCH, LAMBDA_STRETCH_CAP, LAMBDA_STRETCH_ROUNDS, PRIVATE_CLIPS, PRIVATE_DECAY, PRIVATE_DECAY_PERIODS,
                                SteFFLeSettings, THETA_STEP_LAMBDA)

    d = SteFFLeSettings()
    p.add_argument("--epochs", type=int, default=d.epochs,
                   help=f"passes over each silo's records (default {d.epochs}); with the auto batch, a non-private run "
                        f"(--epsilon none) at a fixed --lam above {THETA_STEP_LAMBDA:g} takes "
                        f"min(lam / {THETA_STEP_LAMBDA:g}, {LAMBDA_STRETCH_CAP:g}) times the epochs and decay period "
                        f"(its theta step is smaller by that factor; a run of fewer rounds may take more, up to "
                        f"lam / {THETA_STEP_LAMBDA:g} within {LAMBDA_STRETCH_ROUNDS:,} rounds)")
    p.add_argument("--batch-size", type=_batch_size, default=d.batch_size,
                   help=f"records per silo per round; auto (default): min({AUTO_BATCH_PRIVATE}, smallest silo) when "
                        f"the rounds carry noise (--epsilon set and --lam > 0 or --max-violation; above "
                        f"{AUTO_RUN_BATCH} the epochs, --lr-theta and the decay period are then multiplied by batch / "
                        f"{AUTO_RUN_BATCH}), min({AUTO_BATCH_NONPRIVATE}, smallest silo) when they do not (--epsilon "
                        f"none, or --lam 0), "
                        f"{AUTO_BATCH_RECORD} with --protect record")
    p.add_argument("--lr-theta", type=float, default=d.lr_theta,
                   help=f"step size of the model parameters theta (default {d.lr_theta:g}, times {AUTO_DECAY[0]:g} "
                        f"every {AUTO_DECAY[1]} epochs; a private run at the auto batch with --lam > 0 or "
                        f"--max-violation: times {PRIVATE_DECAY:g} every 1/{PRIVATE_DECAY_PERIODS} of its epochs)")
    p.add_argument("--lr-w", type=float, default=d.lr_w,
                   help=f"step size of the fairness adversary W, the ascent player (default {d.lr_w:g})")
    p.add_argument("--w-radius", type=_float_or_none, default=d.w_radius,
                   help="D: each W block is projected onto the Frobenius ball of radius D; 'none' = no "
                        f"projection (default {d.w_radius:g})")
    p.add_argument("--clip", type=lambda t: t if t in ("auto", "adaptive") else _float_or_none(t), default="auto",
                   help="per-record clip norm C of the s-dependent gradient part, which the noise is scaled "
                        "to; auto (default): adaptive for a private run with --protect attribute and the auto "
                        f"batch, {PRIVATE_CLIPS['clip']:g} for other private runs, no clipping without privacy; "
                        "adaptive: each round's 0.9-quantile of its batch's s-free scales (--protect attribute); "
                        "'none' = no clipping (only with --epsilon none)")
    p.add_argument("--sampling", default="auto", choices=["auto", "shuffle", "without_replacement", "poisson", "full_batch"],
                   help="how a silo draws its batch each round: shuffle = every record once per epoch "
                        "(exact accounting); auto (default) = shuffle with --protect attribute, "
                        "without_replacement with --protect record")
    p.add_argument("--protect", default="attribute", choices=["attribute", "record"],
                   help="what the guarantee covers: the sensitive attribute of a record (default) or the whole record")
    p.add_argument("--calibration", default="auto", choices=["auto", "rdp", "pld", "paper"],
                   help="noise calibration: auto (default: pld for record mode's hidden batches, else rdp), rdp "
                        "(numeric accountant: exact for shuffled epochs and public batches, Renyi DP for hidden "
                        "ones), pld (privacy-loss distribution of hidden batches, whole run charged when planned) "
                        "or paper (the paper's closed form; rounds past the budget are refused, so training may "
                        "stop early)")
    p.add_argument("--p-s", dest="p_s", type=_p_s_arg, default=None,
                   help="group proportions: 'dp' (each silo releases a DP histogram; default when private), "
                        "'pooled' (exact pooled proportions: paper reproduction, not covered by the guarantee), "
                        "or public proportions as comma-separated numbers, e.g. 0.33,0.67")
    p.add_argument("--mode", default="standard", choices=["standard", "divisions", "central_sensitive", "hybrid"],
                   help="who holds s (hybrid centralization, see pfair.protocol.topologies)")
    p.add_argument("--sensitive-silos", type=int, default=None,
                   help="--mode hybrid: number of sensitive silos (records assigned to them at random)")
    p.add_argument("--dummy-noise", action="store_true",
                   help="hybrid topologies: sensitive silos with no record in a round's batch send zero-mean noise")
    p.add_argument("--no-amplification", dest="amplification", action="store_false",
                   help="hybrid topologies: charge every round in full (q = 1) instead of the public-batch rate")
    p.add_argument("--seed", type=int, default=0, help="seeds the partition and the (public) batch order")
    p.add_argument("--noise-seed", type=int, default=None,
                   help="make the noise reproducible (simulations only: the guarantee does not hold against "
                        "anyone who knows it); default: secret noise from the operating system")
    p.add_argument("--tune", action="store_true",
                   help="choose lr_theta (0.25, 1) and batch_size (auto, 4096) from the silos' released "
                        "validation figures; every candidate spends from the same --epsilon (docs/model_selection.md)")
    p.add_argument("--tune-grid", type=json.loads, default=None, metavar="JSON",
                   help='with --tune: the grid instead of the default, e.g. \'{"lr_theta": [0.5, 1], "epochs": [20, 40]}\'')
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text (no progress bar)")
    p.add_argument("--out", default=None, help="also write the result, with the per-silo privacy report, to this JSON file")
    add_save_model_argument(p)
    p.set_defaults(func=train_command)


def add_predict_parser(sub: Any) -> None:
    p = sub.add_parser(
        "predict", help="apply a saved model (pfair train --save-model) to the rows of a CSV",
        description="Read a model file written by `pfair train --save-model` (or pfair.save_model), make the\n"
                    "features of every row of --csv with the model's own preprocessing (the columns, encodings\n"
                    "and scaling it was trained with; other columns are ignored) and write one prediction per row,\n"
                    "in the original label values, in the order of the file.",
        epilog="example:\n  pfair predict --model model.pfair --csv new.csv --out preds.csv --proba",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, metavar="PATH", help="the model file")
    p.add_argument("--csv", required=True, metavar="PATH", help="the rows to predict (a CSV with the feature columns)")
    p.add_argument("--out", default=None, metavar="PATH",
                   help="write the predictions to this CSV (default: print them)")
    p.add_argument("--proba", action="store_true",
                   help="also write each label's probability, one column proba_<label> per label")
    p.add_argument("--with", dest="with_columns", nargs="+", default=None, metavar="COL",
                   help="copy these columns of --csv to the output, e.g. an id")
    p.add_argument("--unknown-category", default=None, choices=["error", "ignore"],
                   help="a category the model was not trained on: error (the default, naming the column and values) "
                        "or ignore (an all-zero block: the column adds nothing to that row's score)")
    p.add_argument("--dropna", action="store_true",
                   help="rows with a missing value in a feature column get an empty prediction (with a warning "
                        "saying how many) instead of stopping the command; pfair does not impute")
    p.add_argument("--allow-models", default="pfair.torch.models:*", metavar="PATTERNS",
                   help="DeepSteFFLe files: the module factories (module:function patterns, comma-separated) this "
                        "command may import and run to rebuild the network (default: pfair's own, "
                        "pfair.torch.models:*)")
    p.set_defaults(func=predict_command)


def predict_command(args: argparse.Namespace) -> int:
    """``pfair predict``: :func:`pfair.load_model`, then its ``predict`` (and ``predict_proba``)."""
    import pandas as pd

    from pfair.model_file import load_model

    saved = load_model(args.model, allow_models=args.allow_models)
    if not os.path.exists(args.csv):
        raise ValueError(f"--csv {args.csv!r}: no such file")
    frame = pd.read_csv(args.csv)
    if saved.preprocessor is None:
        raise ValueError(f"--model {args.model!r} holds no preprocessing (saved without dataset= or preprocessor=), "
                         "so the columns of a CSV cannot be made into its features; load it in Python with "
                         "pfair.load_model and pass the feature matrix")
    if args.unknown_category is not None:
        saved.preprocessor.set_params(handle_unknown=args.unknown_category)
    missing = [c for c in (args.with_columns or []) if c not in frame.columns]
    if missing:
        raise ValueError(f"--with: column(s) {missing!r} not in {args.csv!r}")
    out = frame[list(args.with_columns or [])].copy()
    features = list(saved.preprocessor.feature_names_in_)
    missing_columns = [c for c in features if c not in frame.columns]
    if missing_columns:
        raise ValueError(f"--csv {args.csv!r} has no column(s) {missing_columns!r}; the model's features are made from "
                         f"{features!r} (other columns are ignored)")
    complete = ~frame[features].isna().any(axis=1).to_numpy()
    if not complete.all():
        if not args.dropna:
            counts = frame[features].isna().sum()
            raise ValueError(f"--csv {args.csv!r}: {int((~complete).sum()):,} of {len(frame):,} rows have a missing "
                             "value in a feature column (" + ", ".join(f"{c!r} {int(k):,}" for c, k in counts.items()
                                                                      if k) +
                             "); pfair does not impute: pass --dropna to give those rows an empty prediction, or fill "
                             "them first")
        print(f"warning: {int((~complete).sum()):,} of {len(frame):,} rows have a missing value in a feature column "
              "and get an empty prediction (--dropna)", file=sys.stderr)
    rows = frame[complete]
    out["prediction"] = pd.Series(saved.predict(rows), index=rows.index, dtype=object)
    if args.proba:
        proba = saved.predict_proba(rows)
        for column in proba.columns:
            out[f"proba_{column}"] = proba[column]
    if args.out is None:
        out.to_csv(sys.stdout, index=False)
        return 0
    out.to_csv(args.out, index=False)
    counts = out["prediction"].dropna().value_counts().sort_index()
    print(f"wrote {int(complete.sum()):,} predictions to {args.out} ("
          + ", ".join(f"{label}: {int(k):,}" for label, k in counts.items()) + ")")
    return 0


def add_privacy_report_parser(sub: Any) -> None:
    p = sub.add_parser("privacy-report", help="print the per-silo privacy report of a run saved with `pfair train --out`")
    p.add_argument("run", help="JSON file written by `pfair train --out`")
    p.add_argument("--json", action="store_true", help="print the report as a JSON list of rows")
    p.add_argument("--explain", action="store_true",
                   help="one row per column: its values and what it means (PrivacyReport.explain())")
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
    except IsADirectoryError:
        raise ValueError(f"run file {args.run!r} is a directory; name the JSON file `pfair train --out FILE` wrote "
                         "(pfair deploy local: WORKDIR/run.json)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"run file {args.run!r} is not JSON ({exc}); privacy-report reads the file `pfair train ... "
                         "--out FILE` writes (pfair deploy local: WORKDIR/run.json)") from None
    if not isinstance(run, dict) or "privacy_report" not in run:
        raise ValueError(f"{args.run!r} has no privacy_report; it was not written by `pfair train --out`")
    if args.json:
        print(json.dumps(run["privacy_report"]))
        return 0
    from pfair.privacy.report import PrivacyReport

    df = PrivacyReport(pd.DataFrame(run["privacy_report"]).set_index("silo"))
    print(f"{run['dataset']}: mode {run.get('mode', 'standard')}, epsilon target {run['epsilon']}, "
          f"p_s {df['p_s'].iloc[0]}")
    if args.explain:
        print(df.explain().to_string())
        return 0
    print(df[[c for c in REPORT_COLUMNS if c in df.columns]])
    print("(each column explained: pfair privacy-report FILE --explain; in Python: model.privacy_report_.explain())")
    return 0


def _metric_or_nan(notion: Any, y: Any, pred: Any, s: Any) -> float:
    """The notion's public metric on a test split, NaN where it is undefined (fewer than two
    groups in its block, as :func:`pfair.metrics.fairness_report` leaves equal opportunity)."""
    from pfair import metrics

    try:
        return float(metrics.notion_metric(notion, y, pred, sensitive_features=s))
    except ValueError as exc:
        if "is undefined" not in str(exc):
            raise
        return float("nan")


def train_command(args: argparse.Namespace) -> int:
    from pfair import metrics
    from pfair.estimators import SteFFLe
    from pfair.federation import Federation
    from pfair._validation import resolve_fairness
    from pfair.notions import NOTIONS

    import numpy as np

    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as load_caught:  # e.g. rows dropped for missing values
        warnings.simplefilter("always")
        ds = load_data(args)
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
        noise_seed=args.noise_seed, progress=not args.json,
        track_history=not args.json or args.max_violation is not None,
        max_violation=args.max_violation, max_violation_epsilon_share=args.max_violation_epsilon_share,
        validation_share=args.validation_share,
        **({} if args.lam_lr is None else {"lam_lr": args.lam_lr}),
    )
    search = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if args.tune:
            search, model = tuned_model(model, fed, args)
        else:
            model.fit(fed, sensitive_silos=sensitive_silos)
    from pfair.validation import training_sizes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fit raised (and caught) the settings' warnings already
        st = model.settings()
        # The batch the silos drew: "auto" resolved on the records they train on (less the held-out share).
        resolved = st.for_sizes(training_sizes(fed.sizes, st.validation_share))
        # ... and the run's length and step: a private run stretched to its batch trains more epochs.
        batch, lr_theta, epochs = int(resolved.batch_size), float(resolved.lr_theta), int(resolved.epochs)
        stretched = stretch_reason(st, batch, training_sizes(fed.sizes, st.validation_share), epochs)
    caught = list(load_caught) + list(caught)
    pred = model.predict(ds.X_test)
    # the summary prints its own note on small test groups, with their names
    report = metrics.fairness_report(ds.y_test, pred, sensitive_features=ds.s_test, warn_small_groups=False)
    own_metric = NOTIONS[args.fairness].metric_name  # the --fairness notion's own metric, in the result too
    if own_metric not in report:
        report[own_metric] = _metric_or_nan(resolve_fairness(args.fairness), ds.y_test, pred, ds.s_test)
    report_df = model.privacy_report_
    if search is not None and search.ledgers_:
        # the chosen candidate's report holds its ledgers as its fit left them; the search's are final
        report_df = report_df.copy()
        report_df["epsilon_spent"] = search.privacy_report_["epsilon_spent"].to_numpy()
    eps_spent = (search or model).epsilon_spent_ if args.epsilon is not None else None
    delta = float(report_df["delta"].max()) if args.epsilon is not None else None
    result = {
        "dataset": ds.name,
        "fairness": args.fairness,
        "silos": args.silos,
        "mode": args.mode, "protect": args.protect,
        "heterogeneity": args.heterogeneity,
        "lam": args.lam if args.max_violation is None else None,
        "epsilon": args.epsilon,
        "epochs": epochs,
        "epochs_stated": int(st.epochs),
        "epochs_why": stretched,
        "batch_size": batch,
        "lr_theta": lr_theta,
        "test_error": report["test_error"],
        "trivial_error": report["trivial_error"],
        "demographic_parity_difference": report["demographic_parity_difference"],
        "equalized_odds_difference": report["equalized_odds_difference"],
        own_metric: report[own_metric],
        "max_violation": args.max_violation,
        "final_lam": float(model.lam_),
        **checkpoint_summary(getattr(model, "checkpoints_", None), getattr(model, "selected_epoch_", None),
                             epochs),
        "epsilon_spent": eps_spent,
        "delta": delta,
        "noise_multiplier": [float(z) for z in report_df["noise_multiplier"]],
        "warnings": [str(w.message) for w in caught],
        "seconds": time.perf_counter() - t0,
    }
    if search is not None:
        result["tune"] = tune_summary(search)
    if args.save_model:
        result["model_file"] = save_run_model(model, args.save_model, ds, result, report_df, "pfair train")
    if args.out:
        rows = report_df.reset_index().replace({np.inf: None}).to_dict(orient="records")
        with open(args.out, "w") as fh:
            json.dump({**result, "privacy_report": rows}, fh, indent=1, default=float)
    if args.json:
        print(json.dumps(result))
        return 0
    print_summary(result, args, ds, fed, report_df, where="silos")
    if search is not None:
        print_tune(result["tune"])
    if args.epsilon is not None:
        print("              (all columns, each explained: pfair train ... --out run.json; "
              "pfair privacy-report run.json --explain)")
    if args.save_model:
        print(f"model         saved to {args.save_model} (pfair predict --model {args.save_model} --csv new.csv)")
    print(f"time          {result['seconds']:.1f} s")
    return 0


def tuned_model(model: Any, fed: Any, args: argparse.Namespace) -> tuple[Any, Any]:
    """``pfair train --tune``: a :class:`~pfair.model_selection.PrivateSearch` of ``model`` over
    ``--tune-grid`` (default :func:`pfair.model_selection.default_grid`) on ``fed``'s ledgers;
    returns the search and the chosen (fitted) model."""
    from pfair.model_selection import PrivateSearch, default_grid

    if args.mode != "standard":
        raise SystemExit("pfair train --tune: mode must be standard")
    grid = args.tune_grid if args.tune_grid is not None else default_grid(model, fed.sizes)
    search = PrivateSearch(model, grid).fit(fed)
    return search, search.best_estimator_


def tune_summary(search: Any) -> dict:
    """The JSON of a search ``pfair train --tune`` reports: the chosen parameters, the candidates'
    released figures, and the search's privacy (the largest ε any silo's ledger holds after it)."""
    rows = search.results_.replace({float("inf"): None})
    keep = [c for c in rows.columns if c.startswith("param_")] + ["epsilon_target", "validation_error",
                                                                 "constant_error", "violation_released", "chosen"]
    rep = search.privacy_report_
    return {"best_params": {k: (v.item() if hasattr(v, "item") else v) for k, v in search.best_params_.items()},
            "candidates": int(len(rows)), "accounting": str(rep["accounting"].iloc[0]),
            "epsilon_search": None if not search.ledgers_ else float(search.epsilon_spent_),
            "epsilon_random_stopping": None if not search.ledgers_ else float(rep["epsilon_random_stopping"].max()),
            "selection_warning": search.selection_warning_,
            "results": rows[keep].astype(object).where(rows[keep].notna(), None).to_dict(orient="records")}


def add_experiment_parsers(sub: Any) -> None:
    """``pfair sweep``, ``pfair summary`` and ``pfair plot`` (thin wrappers of :mod:`pfair.experiments`)."""
    from pfair.experiments.methods import FAIRNESS_CHOICES, METHODS

    p = sub.add_parser("sweep", help="run a grid of methods x settings x seeds in parallel into DIR/runs.csv (resumable)",
                       description="Run every cell (method, dataset, fairness, epsilon, heterogeneity, silos, knob, "
                                   "seed) of a grid not yet in OUT/runs.csv. Numeric options take numbers or "
                                   "start:stop:count (numpy.linspace), e.g. --lam 0:2:11.")
    add_data_arguments(p, sweep=True)
    p.add_argument("--methods", default="steffle,pfld,fedavg",
                   help=f"comma-separated methods: {', '.join(METHODS)}")
    p.add_argument("--fairness", nargs="+", default=["demographic_parity"], choices=list(FAIRNESS_CHOICES),
                   help="fairness notion(s) (default demographic_parity)")
    p.add_argument("--epsilon", nargs="+", default=["1", "3", "9"],
                   help="per-silo epsilon of the private methods (non-private ones run once with inf)")
    p.add_argument("--heterogeneity", nargs="+", default=["0", "0.75"], help="h in [0, 1] of the partitioner")
    p.add_argument("--silos", nargs="+", default=["3"], help="number(s) of silos N >= 1")
    p.add_argument("--lam", nargs="+", default=["0:2:11"],
                   help="knob values: lambda (lam_max for pfld, rho_o/10 for single_shot); none for fedavg, "
                        "central_erm")
    p.add_argument("--seeds", type=int, default=15, help="number of seeds (0..seeds-1); a seed drives partition, "
                                                        "batches and noise")
    from pfair.settings import SteFFLeSettings

    d = SteFFLeSettings()
    p.add_argument("--epochs", type=int, default=d.epochs,
                   help=f"passes over each silo's records per fit (default {d.epochs}, SteFFLe's)")
    p.add_argument("--batch-size", type=_batch_size, default=d.batch_size,
                   help="records per silo per round; auto (default): SteFFLe's rule for SteFFLe, FERMI, DP-FERMI "
                        "and non-private SteFFLe (see pfair train --help), each other method's own default; a cell "
                        "whose smallest silo is smaller uses its size")
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
    p.add_argument("--format", nargs="+", default=["png", "svg"], dest="formats",
                   help="figure file formats (default png svg)")
    p.set_defaults(func=plot_command)


def _check_loads(spec: str) -> None:
    """Load a user CSV before a sweep starts, through the sweep's own once-per-process loader (so
    :func:`pfair.experiments.run_sweep`'s check finds it loaded), printing the loader's warnings
    once as the CLI prints warnings; a table the loader refuses stops the sweep with its message."""
    from pfair.experiments.sweep import _dataset

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _dataset(spec)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)


def sweep_command(args: argparse.Namespace) -> int:
    """``pfair sweep``: :func:`pfair.experiments.run_sweep`; exit 130 when interrupted, 1 when every
    cell it ran failed."""
    from pfair.experiments import run_sweep

    if _csv_given(args):
        names = [_csv_spec(args)]
    else:
        for opt, value in (("--sensitive", args.sensitive), ("--partition-by", args.partition_by)):
            if value is not None:
                raise ValueError(f"{opt} needs --csv PATH in a sweep (bundled data sets use their default "
                                 "sensitive attribute and split by age where they have it)")
        names = args.dataset or ["adult"]
    for name in names:
        if name.startswith("csv:"):
            _check_loads(name)
    try:
        result = run_sweep(
            args.out, methods=args.methods, datasets=names, fairness=args.fairness, epsilons=args.epsilon,
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
    parser.add_argument("--version", action="version", version=f"pfair {__version__}",
                        help="print the installed pfair version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    add_train_parser(sub)
    from pfair.privacy.cli import add_privacy_parser

    add_privacy_parser(sub)
    add_privacy_report_parser(sub)
    add_predict_parser(sub)
    add_experiment_parsers(sub)
    from pfair.flower.cli import add_deploy_parser, add_node_parser

    add_deploy_parser(sub)
    add_node_parser(sub)
    from pfair.postprocessing_cli import add_postprocess_parser

    add_postprocess_parser(sub)
    ds = sub.add_parser("datasets", help="list the bundled data sets (your own CSV: pfair train --csv)")
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
    except KeyboardInterrupt:
        # One line, not a traceback (pfair deploy local and pfair sweep say more themselves).
        kept = {"train": "nothing was written (--out and --save-model are written at the end) and nothing was "
                         "spent outside this process (a fit's ledgers live in it)",
                "predict": "no output file was completed"}.get(args.command, "nothing was completed")
        print(f"\npfair {args.command}: interrupted; {kept}", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
