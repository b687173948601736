"""``pfair deploy local``: a whole SteFFLe deployment on this machine, in one command.

It partitions a bundled data set into per-silo shards (as ``pfair train`` does), starts a
SuperLink and one SuperNode per silo on 127.0.0.1 (each silo with its own shard, state
directory and budget), runs the pfair Flower app, prints the same summary as ``pfair train``
(computed by this process, the analyst, from the final model), and tears everything down.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def add_deploy_parser(sub: Any) -> None:
    p = sub.add_parser("deploy", help="run SteFFLe as separate Flower parties (needs pfair[flower])")
    where = p.add_subparsers(dest="where", required=True)
    q = where.add_parser("local", help="SuperLink + one SuperNode per silo on 127.0.0.1, run, summary, teardown")
    q.add_argument("--dataset", default="adult", help="bundled data set name (see `pfair datasets`)")
    q.add_argument("--sensitive", default=None, help="sensitive attribute (data-set specific, e.g. sex, race)")
    q.add_argument("--silos", type=int, default=3, help="number of silos (one SuperNode each)")
    q.add_argument("--heterogeneity", type=float, default=0.0, help="h in [0, 1] of the paper's partitioner")
    q.add_argument("--partition-by", default=None, help="attribute the partitioner sorts by (default: age)")
    q.add_argument("--epsilon", type=float, required=True, help="each silo's budget and the run's target epsilon")
    q.add_argument("--delta", type=float, default=None, help="each silo's delta (default 1/n_j^2)")
    q.add_argument("--lam", type=float, default=1.0, help="fairness weight lambda")
    q.add_argument("--fairness", default="demographic_parity",
                   choices=["demographic_parity", "equalized_odds", "equal_opportunity"],
                   help="fairness notion the penalty enforces (default demographic_parity)")
    q.add_argument("--epochs", type=int, default=1, help="epochs (a round costs ~5-7 s on Flower; keep it small)")
    q.add_argument("--batch-size", type=int, default=2048, help="batch size m")
    q.add_argument("--p-s", dest="p_s", default="dp", help="'dp' (default) or comma-separated public proportions")
    q.add_argument("--seed", type=int, default=0, help="seeds the partition and the (public) batch order")
    q.add_argument("--round-timeout", type=float, default=120.0, help="seconds the server waits for a round's replies")
    q.add_argument("--timeout", type=float, default=3600.0, help="seconds the whole run may take")
    q.add_argument("--workdir", default=None, help="where shards, states, logs and the result go (default: a temp dir)")
    q.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    q.set_defaults(func=deploy_local_command)


def add_node_parser(sub: Any) -> None:
    p = sub.add_parser("node", help="manage a deployed silo's state (its ledger)")
    what = p.add_subparsers(dest="what", required=True)
    r = what.add_parser("reset", help="start a silo over: remove its ledger, journal and plan (its budget starts again)")
    r.add_argument("--state-dir", required=True, help="the silo's state directory (its node config's state-dir)")
    r.add_argument("--anchor", default=None, help="its ledger-anchor journal, if the node config sets one")
    r.add_argument("--i-understand", action="store_true",
                   help="confirm: the silo's record of what it spent is erased and its budget starts again")
    r.set_defaults(func=node_reset_command)


def node_reset_command(args: argparse.Namespace) -> int:
    from pfair.flower.node import reset_state

    try:
        removed = reset_state(args.state_dir, anchor=args.anchor, i_understand=args.i_understand)
    except ValueError as exc:
        print(f"pfair node reset: {exc}", file=sys.stderr)
        return 2
    for path in removed:
        print(f"removed {path}")
    if not removed:
        print(f"nothing to remove in {args.state_dir}")
    return 0


def deploy_local_command(args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    import numpy as np

    from pfair import _core, datasets, metrics
    from pfair.estimators import SteFFLe
    from pfair.federation import Federation
    from pfair.flower import require_flwr

    require_flwr()
    from pfair.flower.deploy import run_deployment, write_federation

    t0 = time.perf_counter()
    kwargs = {"sensitive": args.sensitive} if args.sensitive else {}
    ds = datasets.load(args.dataset, **kwargs)
    fed = Federation.for_dataset(ds, args.silos, heterogeneity=args.heterogeneity, by=args.partition_by, seed=args.seed)
    p_s: Any = args.p_s if args.p_s == "dp" else [float(v) for v in args.p_s.split(",")]
    st = SteFFLe(fairness=args.fairness, lam=args.lam, epsilon=args.epsilon, delta=args.delta, epochs=args.epochs,
                 batch_size=args.batch_size, p_s=p_s, seed=args.seed).settings()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="pfair-deploy-"))
    # Parquet: every message's ClientApp reads its silo's shard again, Parquet in about half the time of CSV.
    configs = write_federation(fed, work / "silos", test=(ds.X_test, ds.y_test, ds.s_test), fmt="parquet")
    for c in configs:
        c["epsilon"] = args.epsilon
        if args.delta is not None:
            c["delta"] = args.delta
    if not args.json:
        print(f"deploying {fed.n_silos} silos of {ds.name} on 127.0.0.1 (workdir {work}) ...", file=sys.stderr)
    res = run_deployment(st, configs, n_groups=fed.n_groups, n_classes=fed.n_classes, workdir=work / "flower",
                         round_timeout=args.round_timeout, timeout=args.timeout)
    theta = np.asarray(res["theta"])
    pred = np.argmax(_core.predict_proba(ds.X_test, theta, fed.n_classes), axis=1)
    report = metrics.fairness_report(ds.y_test, pred, sensitive_features=ds.s_test)
    silos = [{"silo": r["silo"], "n_records": r["n_records"], "refused": r["refused"],
              "noise_multiplier": (r["plan"] or {}).get("noise_multiplier"),
              "sigma_theta": (r["plan"] or {}).get("sigma_theta"), "sigma_w": (r["plan"] or {}).get("sigma_w"),
              "epsilon_spent": (r["ledger"] or {}).get("epsilon_spent"), "delta": (r["ledger"] or {}).get("delta")}
             for r in res["silos"]]
    rounds = res["timing"]["round_s"]
    result = {"dataset": ds.name, "silos": fed.n_silos, "epsilon": args.epsilon, "lam": args.lam,
              "test_error": report["test_error"], "trivial_error": report["trivial_error"],
              "demographic_parity_difference": report["demographic_parity_difference"],
              "equalized_odds_difference": report["equalized_odds_difference"],
              "privacy": silos, "rounds": res["rounds"], "events": res["events"],
              "seconds": time.perf_counter() - t0, "start_seconds": res["timing"]["silos_joined_s"],
              "seconds_per_round": float(np.mean(rounds)) if rounds else None, "workdir": str(work)}
    if args.json:
        print(json.dumps(result, default=float))
        return 0
    print(f"data set      {ds.name}: {fed.n_records} training records in {fed.n_silos} Flower silos {fed.sizes}")
    print(f"test error    {result['test_error']:.4f}   (trivial constant predictor: {result['trivial_error']:.4f})")
    print(f"demographic_parity_difference  {result['demographic_parity_difference']:.4f}")
    print(f"equalized_odds_difference      {result['equalized_odds_difference']:.4f}")
    print(f"privacy       per-silo ({args.epsilon:g}, delta)-ISRL-DP w.r.t. {ds.sensitive_name}; secret noise; "
          f"p_s {st.p_s_source}")
    for row in silos:
        print(f"  silo {row['silo']}: n={row['n_records']}  z={row['noise_multiplier']:.4g}  "
              f"epsilon spent={row['epsilon_spent']:.4f}  delta={row['delta']:.3g}" + ("  (refused)" if row["refused"] else ""))
    for e in res["events"]:
        print(f"event         {e}", file=sys.stderr)
    print(f"time          {result['seconds']:.1f} s ({res['rounds']} rounds, {result['seconds_per_round']:.2f} s per "
          f"round, silos joined after {result['start_seconds']:.1f} s)")
    return 0
