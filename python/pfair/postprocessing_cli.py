"""``pfair postprocess``: private post-processing on a bundled data set or your CSV, measured
against the mixing line (docs/postprocessing.md)."""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from typing import Any

# The command imports what it runs inside its function: this parser is built at every `pfair` start.
from pfair.cli_common import _float_or_none, add_data_arguments, load_federation

#: The test-set violation each constraint is measured by (pfair.metrics, default arguments); its keys
#: are :data:`pfair.postprocessing.CONSTRAINTS`, the command's choices (spelled here, not imported:
#: pfair.postprocessing loads scikit-learn and SciPy, which every ``pfair`` start would then pay).
METRIC = {"demographic_parity": "demographic_parity_difference", "equalized_odds": "equalized_odds_difference",
          "equal_opportunity": "equal_opportunity_difference"}


def _margin(text: str) -> float | str:
    """``--margin``: ``auto`` or a number >= 0 (:func:`pfair.postprocessing.check_margin`)."""
    from pfair.postprocessing import check_margin

    try:
        return check_margin(text, "--margin")
    except ValueError:
        raise argparse.ArgumentTypeError(f"--margin takes 'auto' or a finite number >= 0, not {text!r}") from None


def add_postprocess_parser(sub: Any) -> None:
    p = sub.add_parser(
        "postprocess", help="per-group thresholds from the silos' DP score histograms (uses s at prediction)",
        description="Split the training records into silos, train logistic regression on their x and y, let\n"
                    "each silo release a DP histogram of its scores by (bin, s, y), choose per-group\n"
                    "thresholds (Hardt, Price and Srebro 2016), and print the test error and violation next\n"
                    "to the mixing line of the logistic regression.",
        epilog="example:\n  pfair postprocess --dataset adult --epsilon 1 --constraints equalized_odds",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_arguments(p)
    p.add_argument("--epsilon", type=_float_or_none, default=1.0,
                   help="each silo's ledger after the release (default 1; 'none': exact counts, not private)")
    p.add_argument("--delta", type=float, default=None, help="each silo's delta (default 1/n_j^2)")
    p.add_argument("--constraints", default="demographic_parity", choices=list(METRIC),
                   help="the fairness constraint on the per-group rates (default demographic_parity)")
    p.add_argument("--max-violation", type=float, default=0.0, metavar="T",
                   help="tolerance on the per-group rates (default 0)")
    p.add_argument("--margin", type=_margin, default="auto", metavar="M",
                   help="how far below T the rule holds the violation estimated from the released histograms: "
                        "auto (default: the table's resolution, about one standard deviation of how far its noise "
                        "can move the smallest group's rate, so that T holds on the records within about that) or a "
                        "number >= 0 (0: T on the noisy table)")
    p.add_argument("--bins", type=int, default=20, help="score bins (default 20)")
    p.add_argument("--seed", type=int, default=0, help="seeds the partition and the randomised predictions")
    p.add_argument("--noise-seed", type=int, default=None,
                   help="reproducible noise, for simulations only (the guarantee does not hold against who knows it)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=postprocess_command)


def postprocess_command(args: argparse.Namespace) -> int:
    import numpy as np

    from pfair import metrics
    from pfair.postprocessing import PrivateThresholdOptimizer
    from pfair.references import mixing_line

    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds, fed = load_federation(args)
        model = PrivateThresholdOptimizer(constraints=args.constraints, max_violation=args.max_violation,
                                          margin=args.margin,
                                          epsilon=args.epsilon, delta=args.delta, bins=args.bins,
                                          noise_seed=args.noise_seed).fit(fed)
    pred = model.predict(ds.X_test, sensitive_features=ds.s_test, random_state=args.seed)
    metric = getattr(metrics, METRIC[args.constraints])
    err = float(np.mean(pred != ds.y_test))
    vio = float(metric(ds.y_test, pred, sensitive_features=ds.s_test))
    line = mixing_line(ds.y_test, model.estimator_.predict(ds.X_test), sensitive_features=ds.s_test,
                       fairness=args.constraints)
    report = model.privacy_report_
    result = {"dataset": ds.name, "constraints": args.constraints, "epsilon": args.epsilon, "silos": fed.n_silos,
              "test_error": err, METRIC[args.constraints]: vio, "mixing_line_error": line.error_at(vio),
              "beats_mixing_line": line.beats(err, vio), "trivial_error": line.error_constant,
              "base_error": line.error_model, "base_violation": line.violation_model,
              "epsilon_spent": None if args.epsilon is None else float(report["epsilon_spent"].max()),
              "sigma_counts": [float(v) for v in report["sigma_counts"]],
              "max_violation": args.max_violation, "margin": model.rule_.margin, "resolution": model.resolution_,
              "violation_released": model.rule_.violation,
              "warnings": [str(w.message) for w in caught], "seconds": time.perf_counter() - t0}
    if args.json:
        print(json.dumps(result))
        return 0
    for w in result["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    print(f"data set      {ds.name}: {sum(fed.sizes)} training records in {fed.n_silos} silos {fed.sizes}")
    print(f"test error    {err:.4f}   (trivial constant predictor: {line.error_constant:.4f}; the base model "
          f"{line.error_model:.4f} at {line.violation_model:.4f})")
    print(f"{METRIC[args.constraints]}  {vio:.4f}")
    print(f"target        {args.max_violation:g} on the rates; {model.rule_.violation:.4f} on the released table, held "
          f"{model.rule_.margin:.4f} below it (--margin {args.margin}; the table's resolution {model.resolution_:.4f})")
    print(f"mixing line   {line.error_at(vio):.4f} at that violation: "
          f"{'beaten' if result['beats_mixing_line'] else 'NOT beaten'} (no s, no budget)")
    if args.epsilon is None:
        print("privacy       none (epsilon = none)")
    else:
        print(f"privacy       one score histogram per silo, ({args.epsilon:g}, delta)-DP w.r.t. {ds.sensitive_name}")
        print(report[["n_records", "noise_multiplier", "sigma_counts", "epsilon_release", "epsilon_spent", "delta",
                      "guarantee"]])
    print(f"time          {result['seconds']:.1f} s")
    return 0
