"""What the command line's subcommands share (``pfair train``, ``pfair deploy``, ``pfair
postprocess``, ``pfair sweep``): the data arguments and loading a data set or a federation from
them, the ``--save-model`` argument and writing the model file, and the printed summary of a run
(its checkpoints, tuning, privacy and small-group notes).

A module of its own so that each subcommand's module imports it, never :mod:`pfair.cli` (which
imports every subcommand's parser): no import circle.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

# numpy, pandas and the rest of pfair are imported inside the functions that use them: this module
# loads at every `pfair` start (see pfair.cli).


def _float_or_none(text: str) -> float | None:
    return None if text.lower() in ("none", "inf", "off") else float(text)


def _batch_size(text: str) -> int | str:
    return "auto" if text == "auto" else int(text)


def add_data_arguments(p: argparse.ArgumentParser, *, sweep: bool = False) -> None:
    """The options that choose the data: a bundled data set or a user CSV (``--csv`` with
    ``--label``/``--sensitive``), and the silos it is split into."""
    g = p.add_argument_group("data (a bundled data set, or your CSV with --csv)")
    if sweep:
        g.add_argument("--dataset", nargs="+", default=None,
                       help="bundled data set name(s) (see `pfair datasets`) or csv specs "
                            "csv:PATH?label=COL&sensitive=COL (default: adult, unless --csv is given)")
    else:
        g.add_argument("--dataset", default=None,
                       help="bundled data set name, see `pfair datasets` (default: adult, unless --csv is given)")
    g.add_argument("--csv", default=None, metavar="PATH",
                   help="train on your own CSV file instead (needs --label and --sensitive); every column "
                        "other than the label, the sensitive one, --drop and --keep is a feature "
                        "(text columns one-hot, numbers standardised)")
    g.add_argument("--label", default=None, metavar="COL", help="--csv: the label column")
    g.add_argument("--sensitive", default=None, metavar="COL",
                   help="--csv: the sensitive-attribute column (never a feature); bundled data: which "
                        "attribute, e.g. sex or race (data-set specific)")
    g.add_argument("--positive-label", default=None, metavar="VALUE",
                   help="--csv: the label value that is the positive class (y = 1); others are y = 0 "
                        "(default: the sorted distinct values are the classes)")
    g.add_argument("--drop", nargs="+", default=None, metavar="COL", help="--csv: columns to ignore")
    g.add_argument("--keep", nargs="+", default=None, metavar="COL",
                   help="--csv: columns that are not features but can be --partition-by (e.g. a region)")
    g.add_argument("--categorical", nargs="+", default=None, metavar="COL",
                   help="--csv: columns to one-hot encode (default: every non-numeric column)")
    g.add_argument("--dropna", action="store_true", default=None,
                   help="--csv: drop every row with a missing value, however many (with a warning); default: "
                        "drop them with a warning when they are at most 5%% of the rows, refuse beyond (the error "
                        "names the columns: --drop a mostly empty one, or pass --dropna)")
    if not sweep:
        g.add_argument("--silos", type=int, default=3, help="number of silos N (default 3)")
        g.add_argument("--heterogeneity", type=float, default=0.0,
                       help="h in [0, 1]: 0 = silos are random samples, 1 = each silo is one range of "
                            "--partition-by (the paper's partitioner; default 0)")
    g.add_argument("--partition-by", default=None, metavar="COL",
                   help="column the silos differ along when --heterogeneity > 0, numeric or categorical "
                        "(default: age when the data has it); with --csv, a --drop column named here is "
                        "kept for the split but not used as a feature")


def _csv_given(args: argparse.Namespace) -> bool:
    """Check the --csv options hang together; True when a CSV was given."""
    names = ("label", "positive_label", "drop", "keep", "categorical", "dropna")
    csv_only = [f"--{name.replace('_', '-')}" for name in names if getattr(args, name, None) is not None]
    if args.csv is None:
        if csv_only:
            raise ValueError(f"{', '.join(csv_only)} need --csv PATH (your own data); bundled data sets fix them")
        return False
    if args.dataset is not None:
        raise ValueError("--csv and --dataset: give one of them (your CSV, or a bundled data set)")
    missing = [opt for opt, value in (("--label", args.label), ("--sensitive", args.sensitive)) if value is None]
    if missing:
        raise ValueError(f"--csv needs {' and '.join(missing)} COLUMN: the label and the sensitive attribute")
    return True


def _csv_spec(args: argparse.Namespace) -> str:
    """The csv spec (:func:`pfair.datasets.csv_spec`) of the --csv options, with an absolute path
    so that worker processes and later runs find the file."""
    from pfair.datasets import csv_spec

    if not os.path.exists(args.csv):
        raise ValueError(f"--csv {args.csv!r}: no such file")
    return csv_spec(os.path.abspath(args.csv), label=args.label, sensitive=args.sensitive,
                    positive_label=args.positive_label, drop=args.drop, keep=args.keep,
                    categorical=args.categorical, partition_by=args.partition_by, dropna=args.dropna)


def load_data(args: argparse.Namespace) -> Any:
    """The :class:`pfair.datasets.Dataset` the data options name."""
    from pfair import datasets

    if _csv_given(args):
        if not os.path.exists(args.csv):
            raise ValueError(f"--csv {args.csv!r}: no such file")
        keep = list(args.keep or [])
        drop = list(args.drop or [])
        if args.partition_by is not None and args.partition_by in drop:  # split by it, but not a feature
            drop.remove(args.partition_by)
            keep.append(args.partition_by)
        return datasets.load_csv(args.csv, label=args.label, sensitive=args.sensitive,
                                 positive_label=args.positive_label, drop=drop or None, keep=keep or None,
                                 categorical=args.categorical, dropna=args.dropna)
    kwargs = {"sensitive": args.sensitive} if args.sensitive else {}
    return datasets.load(args.dataset or "adult", **kwargs)


def load_federation(args: argparse.Namespace) -> tuple[Any, Any]:
    """The data set of the data arguments and its training records split into silos (``--silos``,
    ``--heterogeneity``, ``--partition-by``, ``--seed``)."""
    from pfair.federation import Federation

    ds = load_data(args)
    return ds, Federation.for_dataset(ds, args.silos, heterogeneity=args.heterogeneity, by=args.partition_by,
                                      seed=args.seed)


def add_save_model_argument(p: argparse.ArgumentParser) -> None:
    """``--save-model PATH`` of ``pfair train`` and ``pfair deploy local``."""
    p.add_argument("--save-model", default=None, metavar="PATH",
                   help="write the trained model with its preprocessing (the encodings and scaling of the features), "
                        "settings and privacy report to PATH (a zip of JSON and arrays, safe to load; "
                        "pfair predict --model PATH --csv new.csv applies it)")


def save_run_model(model: Any, path: str, ds: Any, result: dict, report_df: Any, command: str) -> str:
    """Write the model of a run (``--save-model``) with :func:`pfair.save_model`; returns the path."""
    from pfair.model_file import save_model

    keys = ("dataset", "fairness", "silos", "heterogeneity", "epsilon", "test_error", "trivial_error",
            "demographic_parity_difference", "equalized_odds_difference")
    save_model(model, path, dataset=ds, privacy_report=report_df,
               metadata={"command": command, **{k: result.get(k) for k in keys}})
    return str(path)


#: The metric (``pfair.metrics``) that ``--max-violation`` bounds, per ``--fairness``.


def checkpoint_summary(checkpoints: Any, selected_epoch: int | None, epochs: int) -> dict:
    """What ``pfair train`` and ``pfair deploy`` report of the model a fit returned: its checkpoint
    epoch (1-based) and the released validation figures there (:mod:`pfair.validation`).
    ``checkpoints``: a fit's ``checkpoints_`` frame, or a deployment's list of figures."""
    import pandas as pd

    if isinstance(checkpoints, list):
        checkpoints = pd.DataFrame([{"epoch": c["epoch"] + 1, "validation_error": c["error"],
                                     "constant_error": c["constant_error"], "violation_released": c["violation"]}
                                    for c in checkpoints]).set_index("epoch") if checkpoints else pd.DataFrame()
    out: dict[str, Any] = {"selected_epoch": selected_epoch, "epochs": epochs, "validation_error": None,
                           "constant_validation_error": None, "violation_released": None}
    if selected_epoch == 0 and checkpoints is not None and len(getattr(checkpoints, "index", [])):
        # The constant predictor, returned instead of every checkpoint (pfair.validation.Selector).
        c = float(checkpoints.iloc[-1]["constant_error"])
        out.update(validation_error=c, constant_validation_error=c, violation_released=None)
        return out
    if selected_epoch is None or checkpoints is None or selected_epoch not in getattr(checkpoints, "index", []):
        return out
    row = checkpoints.loc[selected_epoch]
    out["validation_error"] = float(row["validation_error"])
    out["constant_validation_error"] = float(row["constant_error"])
    v = row.get("violation_released")
    out["violation_released"] = None if v is None or pd.isna(v) else float(v)
    return out


def print_tune(tune: dict) -> None:
    """The text lines of ``pfair train --tune``."""
    params = ", ".join(f"{k}={v}" for k, v in tune["best_params"].items())
    print(f"tuned         {params}: the best of {tune['candidates']} candidates by their released validation figures")
    if tune["epsilon_search"] is not None:
        rs = tune.get("epsilon_random_stopping")
        print(f"search        epsilon {tune['epsilon_search']:.4f} for all {tune['candidates']} candidates together "
              f"({tune['accounting']} on each silo's ledger"
              + ("" if rs is None else f"; a random number of runs released alone would cost {rs:.4f}") + ")")
    for r in tune["results"]:
        params = ", ".join(f"{k[len('param_'):]}={r[k]}" for k in r if k.startswith("param_"))
        err = r["validation_error"]
        print(f"  {'*' if r['chosen'] else ' '} {params:<40} validation error "
              + ("n/a" if err is None else f"{err:.4f}")
              + ("" if r.get("violation_released") is None else f", violation {r['violation_released']:.4f}"))


#: Columns of the per-silo privacy table ``pfair train`` and ``pfair deploy`` print.
PRIVACY_COLUMNS = ["n_records", "accounting", "sample_rate", "steps", "noise_multiplier", "sigma_theta", "sigma_w",
                   "epsilon_spent", "delta"]


def stretch_reason(st: Any, batch: int, sizes: Any, epochs: int) -> str | None:
    """Why ``batch_size="auto"`` ran ``epochs`` where ``st.epochs`` were stated, for the summary (None
    when it did not stretch): a private run stretched to its batch (:meth:`SteFFLeSettings.stretch`),
    or a noise-free run's λ stretch or small silos' floor, whichever set its length
    (:meth:`SteFFLeSettings.noise_free_factors`)."""
    from pfair.settings import AUTO_RUN_BATCH, ROUNDS_PER_EPOCH_FLOOR, THETA_STEP_LAMBDA, rounds_per_epoch

    if int(epochs) == int(st.epochs):
        return None
    k = st.stretch(batch)
    if k > 1.0:
        return f"stated for a batch of {AUTO_RUN_BATCH:,}; times {k:.3g} at the batch of {batch:,}"
    rounds = rounds_per_epoch(st.sampling, sizes, batch)
    k_lam, k_floor = st.noise_free_factors(int(st.epochs) * rounds)
    if k_lam >= k_floor:
        return f"stated for λ ≤ {THETA_STEP_LAMBDA:g}; times {k_lam:.3g} for the θ step of lam={st.lam:g}"
    return f"stated for {ROUNDS_PER_EPOCH_FLOOR} rounds an epoch; times {k_floor:.3g} on silos of {rounds}"


def print_summary(result: dict, args: argparse.Namespace, ds: Any, fed: Any, report_df: Any, *, where: str) -> None:
    """The text summary of a run (``pfair train``, ``pfair deploy``): warnings, data, test error
    against the constant predictor, fairness gaps, the fairness target, and each silo's privacy."""
    from pfair.notions import NOTIONS
    from pfair.privacy.report import PrivacyReport

    for w in result["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    print(f"data set      {ds.name}: {fed.n_records} training records in {fed.n_silos} {where} {fed.sizes}, "
          f"h = {args.heterogeneity}")
    if result.get("batch_size") is not None:
        auto = " (batch_size auto)" if getattr(args, "batch_size", None) == "auto" else ""
        lr = result.get("lr_theta", getattr(args, "lr_theta", None))
        why = f" ({result['epochs_stated']} {result['epochs_why']})" if result.get("epochs_why") else ""
        print(f"training      {result['epochs']} epochs{why}, batch {result['batch_size']} per silo and round{auto}"
              + (f", lr_theta {lr:g}" if lr is not None else ""))
    print(f"test error    {result['test_error']:.4f}   (trivial constant predictor: {result['trivial_error']:.4f})")
    print(f"demographic_parity_difference  {result['demographic_parity_difference']:.4f}")
    print(f"equalized_odds_difference      {result['equalized_odds_difference']:.4f}")
    own = NOTIONS[args.fairness].metric_name if hasattr(args, "fairness") else None
    if own is not None and own not in ("demographic_parity_difference", "equalized_odds_difference") \
            and result.get(own) is not None:
        print(f"{own:<31}{result[own]:.4f}")
    for line in small_group_notes(ds.y_test, ds.s_test, getattr(ds, "group_names", None), getattr(ds, "label_names", None)):
        print(f"warning: {line}", file=sys.stderr)
    if result.get("validation_error") is not None:
        e, c = result["validation_error"], result["constant_validation_error"]
        which = ("the constant predictor (no model of the run was better)" if result["selected_epoch"] == 0
                 else f"after epoch {result['selected_epoch']} of {result['epochs']}")
        print(f"model         {which}: validation error {e:.4f} "
              f"against the constant predictor's {c:.4f} on the silos' held-out records"
              + ("" if result.get("epsilon") is None or getattr(args, "protect", "attribute") == "attribute"
                 else " (noisy releases)"))
    if result.get("max_violation") is not None:
        how = "noisy releases" if args.epsilon is not None else "exact, non-private"
        v = result["violation_released"]
        measured = f"{v:.4f} at that model ({how})" if v is not None else "not measured"
        metric = NOTIONS[args.fairness].metric_name
        print(f"target        {metric} <= {result['max_violation']:g} on the silos' records: "
              f"{measured}; lambda there {result['final_lam']:.4g}")
    if args.epsilon is None:
        print("privacy       none (epsilon = none)")
        return
    who = "silo" if result.get("mode", "standard") == "standard" else "sensitive silo"
    record = getattr(args, "protect", "attribute") == "record"
    covers = "whole records (protect=record)" if record else ds.sensitive_name
    deltas = sorted({f"{float(d):.2g}" for d in report_df["delta"] if d is not None and d == d}, key=float)
    delta_text = ("n/a" if not deltas else f"= {deltas[0]}" if len(deltas) == 1 else
                  f"<= {deltas[-1]} (each silo's own, 1/n^2 of its n records)")
    what = "whole records" if record else f"records' {ds.sensitive_name}"
    print(f"privacy       each {who}'s {what} protected at epsilon = {args.epsilon:g}, delta {delta_text}, over all "
          f"the fits its ledger records (this run spent at most {result['epsilon_spent']:.4f})")
    print(f"              per-{who} ISRL-DP w.r.t. {covers}; "
          f"p_s {report_df['p_s'].iloc[0]}; noise {report_df['noise'].iloc[0]}; "
          f"calibration {report_df['calibration'].iloc[0]}")
    print(PrivacyReport(report_df[PRIVACY_COLUMNS]))
    for line in privacy_notes(report_df, fed.sizes):
        print(f"note: {line}")


def small_group_notes(y: Any, s: Any, group_names: Any = None, label_names: Any = None) -> list[str]:
    """:func:`pfair.metrics.small_group_notes` on the test records (imported when called, so that the
    command line starts without NumPy)."""
    from pfair.metrics import small_group_notes as notes

    return notes(y, s, group_names, label_names)


def privacy_notes(report_df: Any, sizes: Any) -> list[str]:
    """Plain notes under the privacy table: the held-out share when ``n_records`` differ from the
    silo sizes, and why one silo's noise differs from the others'."""
    import numpy as np

    notes = []
    n = [int(v) for v in report_df["n_records"]]
    sizes = [int(v) for v in sizes]
    if len(n) == len(sizes) and n != sizes:
        held = [a - b for a, b in zip(sizes, n)]
        notes.append(f"n_records is what each silo trains on: of its {sizes} records it holds out {held} to "
                     "validate the checkpoint models (--validation-share)")
    z = np.asarray([np.nan if v is None else float(v) for v in report_df["noise_multiplier"]], dtype=float)
    if z.size > 1 and np.all(np.isfinite(z)) and z.min() > 0 and z.max() / z.min() > 1.05:
        j = int(np.argmax(z))
        others = np.delete(z, j)
        why = "its budget left, or its delta, differs from the others'"
        rates = [float(v) for v in report_df["sample_rate"]] if "sample_rate" in report_df else []
        if rates and rates[j] > max(np.delete(np.asarray(rates), j)) + 1e-12:
            why = (f"its batch is {rates[j]:.0%} of its training records ({n[j]}) against at most "
                   f"{max(np.delete(np.asarray(rates), j)):.0%} for the others, so each of its records is in more "
                   "rounds and each round must hide it with more noise (batch_size auto is the smallest silo's "
                   "size; a smaller --batch-size evens it out)")
        notes.append(f"silo {report_df.index[j]} has {z[j] / np.median(others) - 1:.0%} more noise than the others "
                     f"(noise_multiplier {z[j]:.4g} against {np.median(others):.4g}): {why}")
    return notes
