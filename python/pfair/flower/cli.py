"""``pfair deploy local``: a whole SteFFLe deployment on this machine, in one command.

It partitions a bundled data set into per-silo shards (as ``pfair train`` does), starts a
SuperLink and one SuperNode per silo on 127.0.0.1 (each silo with its own shard, state
directory and budget), runs the pfair Flower app, prints the same summary as ``pfair train``
(computed by this process, the analyst, from the final model), and tears everything down.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

# Each command imports what it runs inside its function (numpy, pandas, the run engine, Flower): these
# parsers are built at every `pfair` start (see pfair.cli).
from pfair.cli_common import (_batch_size, add_data_arguments, add_save_model_argument, checkpoint_summary,
                              load_federation, print_summary, print_tune, save_run_model, stretch_reason)
from pfair.flower import require_flwr


def add_deploy_parser(sub: Any) -> None:
    p = sub.add_parser("deploy", help="run SteFFLe as separate Flower parties (needs pfair[flower])")
    where = p.add_subparsers(dest="where", required=True)
    q = where.add_parser(
        "local", help="SuperLink + one SuperNode per silo on 127.0.0.1, run, summary, teardown",
        description="Split a bundled data set or your CSV into silos, start one Flower SuperNode per silo\n"
                    "(each with its own shard, test shard, state directory and ledger) and a SuperLink on\n"
                    "127.0.0.1, run SteFFLe, print the same summary as `pfair train`, and tear it all down.\n"
                    "The defaults are pfair train's (epsilon 1, 20 epochs, batch_size auto from the silo\n"
                    "sizes), and every setting is checked against the silos before anything starts or\n"
                    "any budget is spent. Measured on 2 cores with Adult and 3 silos: the parties start\n"
                    "in 3-5 s and a round costs 0.6-1.3 s (every message is a Flower exchange); with the\n"
                    "data, set-up, the evaluation and the teardown a run of R rounds takes about\n"
                    "15 + 1.2 R s; an epoch is ceil(mean training records per silo / batch size) rounds.\n"
                    "Exit codes: 0 done; 1 a party failed; 2 bad arguments; 3 no silo would answer (or\n"
                    "answered) a round, nothing trained; 4 a model was trained but some silos refused or\n"
                    "answered no round (named); 130 interrupted.",
        epilog="examples:\n  pfair deploy local --dataset german --epochs 2\n"
               "  pfair deploy local --csv loans.csv --label default --sensitive sex --workdir wd",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_arguments(q)
    from pfair.notions import FAIRNESS_NOTIONS
    from pfair.settings import SteFFLeSettings

    d = SteFFLeSettings()
    q.add_argument("--epsilon", type=float, default=1.0,
                   help="each silo's budget and the run's target epsilon (default 1, as pfair train)")
    q.add_argument("--delta", type=float, default=None, help="each silo's delta (default 1/n_j^2)")
    q.add_argument("--lam", type=float, default=1.0, help="fairness weight lambda")
    q.add_argument("--fairness", default=d.fairness, choices=list(FAIRNESS_NOTIONS),
                   help=f"fairness notion the penalty enforces (default {d.fairness})")
    q.add_argument("--epochs", type=int, default=d.epochs,
                   help=f"passes over each silo's records (default {d.epochs}, as pfair train; each round costs "
                        "0.6-1.3 s on Flower, see above)")
    q.add_argument("--batch-size", type=_batch_size, default=d.batch_size,
                   help="records per silo per round; auto (default): pfair train's rule (min(8192, smallest silo's "
                        "training records) for private rounds, the epochs and step then times batch / 1024), resolved "
                        "from the silo sizes before anything starts")
    q.add_argument("--p-s", dest="p_s", default="dp", help="'dp' (default) or comma-separated public proportions")
    q.add_argument("--protect", default="attribute", choices=["attribute", "record"],
                   help="what the guarantee covers: the sensitive attribute of a record (default) or the whole "
                        "record; record runs shuffled epochs (the only random batches a deployed silo answers, "
                        "since their account is valid however the server stops a run)")
    q.add_argument("--seed", type=int, default=0, help="seeds the partition and the (public) batch order")
    q.add_argument("--round-timeout", type=float, default=120.0, help="seconds the server waits for a round's replies")
    q.add_argument("--timeout", type=float, default=3600.0, help="seconds the whole run may take")
    q.add_argument("--workdir", default=None,
                   help="where shards, silo states (ledgers), logs and the result go, relative or absolute; kept "
                        "after the run (default: a temporary directory, removed after the run unless --keep-workdir)")
    q.add_argument("--keep-workdir", action="store_true",
                   help="keep the temporary working directory (its path is printed)")
    q.add_argument("--new-ledgers", action="store_true",
                   help="start the silos' ledgers in --workdir over (their budgets start again); without it a "
                        "workdir whose ledgers have spent budget trains on what is left, with a warning")
    q.add_argument("--tune", action="store_true",
                   help="choose lr_theta among 0.25 and 1.0 (pfair.flower.tune.DEPLOY_GRID; times batch / 1024 for a "
                        "private run stretched to its batch): one run per candidate "
                        "on the same SuperNodes, the budget --epsilon split between them (docs/model_selection.md)")
    q.add_argument("--json", action="store_true", help="print one JSON object instead of text (the keys of "
                                                       "`pfair train --json`, plus the deployment's own)")

    add_save_model_argument(q)
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
    from pfair.flower.node import default_anchor, histogram_release, reset_state

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


def deployed_tune_summary(search: dict) -> dict:
    """The ``tune`` JSON of ``pfair deploy local --tune`` (the keys of ``pfair train --tune``'s)."""
    spent = [e for e in search["epsilon_spent"] if e is not None]
    keep = ("epsilon_target", "validation_error", "constant_error", "violation_released", "chosen")
    rows = [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()
             if k.startswith("param_") or k in keep} for r in search["results"]]
    return {"best_params": search["best_params"], "candidates": len(rows), "accounting": search["accounting"],
            "epsilon_search": max(spent) if spent else None, "epsilon_random_stopping": None,
            "selection_warning": search["selection_warning"], "results": rows}


def spent_ledgers(silos_dir: Any) -> dict[int, float]:
    """ε already spent by each silo's ledger under ``silos_dir`` (``silo<j>/state/ledger.json``)."""
    from pfair.privacy.ledger import PrivacyLedger

    out = {}
    for path in sorted(Path(silos_dir).glob("silo*/state/ledger.json")):
        spent = PrivacyLedger.load(path).epsilon_spent()
        if spent > 0:
            out[int(path.parent.parent.name[len("silo"):])] = spent
    return out


class _WorkdirLock:
    """An exclusive lock of ``--workdir`` for the whole command (``deploy.lock`` there): a second
    ``pfair deploy local`` in the same workdir is refused before it starts anything."""

    def __init__(self, work: Any) -> None:
        import fcntl

        self.path = work / "deploy.lock"
        self.fh = open(self.path, "a+")
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.fh.seek(0)
            holder = self.fh.read().strip() or "?"
            self.fh.close()
            raise ValueError(f"--workdir {str(work)!r} is in use by another `pfair deploy local` (pid {holder}): its "
                             "silos' ledgers and result files are that run's. Wait until it ends, or pass another "
                             "--workdir") from None
        self.fh.seek(0)
        self.fh.truncate()
        self.fh.write(str(os.getpid()))
        self.fh.flush()

    def release(self) -> None:
        self.fh.close()


def preflight(st: Any, fed: Any, configs: list, *, n_groups: int, n_classes: int) -> tuple[Any, dict[int, str]]:
    """Check a deployment's settings against its silos before any process starts or any budget is
    spent: the server's plan (batch size against each silo's training records, the rounds, the
    fairness notion) and each silo's own checks as its node would make them at the plan round
    (its budget, its caps, whether what is left of its ledger buys a model better than the
    constant predictor). Returns the plan and each refusing silo's reason (``ValueError`` for
    settings no silo could run)."""
    from pfair.flower.deploy import run_config_for
    from pfair.flower.node import SiloNode, settings_from_run_config
    from pfair.flower.server_app import SteFFLeStrategy
    from pfair.protocol.plan import RunPlan
    from pfair.validation import training_sizes

    SteFFLeStrategy(st, n_silos=fed.n_silos, n_groups=n_groups, n_classes=n_classes)  # its own checks
    plan = RunPlan.build(st, training_sizes(fed.sizes, st.validation_share), n_groups=n_groups, n_classes=n_classes)
    node_st = settings_from_run_config(run_config_for(st, n_silos=fed.n_silos, n_groups=n_groups,
                                                      n_classes=n_classes, out=""))
    refusals = {}
    for cfg in configs:
        try:
            node = SiloNode(cfg, n_groups=n_groups, n_classes=n_classes)
            with node.policy.locked():
                ledger = node.ledger()
                reason = node._refusal(node._party(node_st, ledger=ledger), plan.rounds_per_epoch)
        except Exception as exc:  # what the node would answer the plan round with
            reason = f"{type(exc).__name__}: {exc}"
        if reason:
            refusals[int(cfg["silo-id"])] = reason
    return plan, refusals


def spent_now(silos_dir: Any) -> str:
    """What each silo's ledger under ``silos_dir`` has spent, as one phrase."""
    spent = spent_ledgers(silos_dir) if silos_dir.exists() else {}
    if not spent:
        return "no silo spent any budget"
    return ", ".join(f"silo {j} epsilon {e:.3g}" for j, e in sorted(spent.items()))


def deploy_local_command(args: argparse.Namespace) -> int:
    import numpy as np
    import pandas as pd

    from pfair import _core, metrics
    from pfair.estimators import SteFFLe

    require_flwr()
    from pfair.flower.deploy import DeploymentFailed, one_line, run_deployment, write_federation
    from pfair.flower.node import default_anchor, histogram_release, reset_state
    from pfair.validation import training_sizes

    t0 = time.perf_counter()
    if args.epsilon is None or not args.epsilon > 0:
        raise ValueError(f"--epsilon {args.epsilon}: a deployment is private; give each silo's budget, a number > 0 "
                         "(default 1)")
    if args.workdir is not None and Path(args.workdir).exists() and not Path(args.workdir).is_dir():
        raise ValueError(f"--workdir {args.workdir!r} is a file, not a directory: name a directory (created if "
                         "missing) or leave --workdir out for a temporary one")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds, fed = load_federation(args)
        p_s: Any = args.p_s if args.p_s == "dp" else [float(v) for v in args.p_s.split(",")]
        estimator = SteFFLe(fairness=args.fairness, lam=args.lam, epsilon=args.epsilon, delta=args.delta,
                            epochs=args.epochs, batch_size=args.batch_size, p_s=p_s, seed=args.seed,
                            protect=args.protect, sampling="shuffle" if args.protect == "record" else "auto")
        st = estimator.settings()
        unresolved = st
        # batch_size="auto" resolved from the silos' training records, as pfair train resolves it, so
        # that the server and every silo run the same public batch (and, for a private run stretched
        # to its batch, the same epochs, step, decay and clip: written out, the silos take them as given).
        st = st.for_sizes(training_sizes(fed.sizes, st.validation_share))
        estimator.set_params(**st.written_out())
    notes = list(dict.fromkeys(str(w.message) for w in caught))
    temporary = args.workdir is None
    work = Path(tempfile.mkdtemp(prefix="pfair-deploy-")) if temporary else Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    lock = _WorkdirLock(work)
    configs: list = []
    silos_dir = work / "silos"
    keep = not temporary or args.keep_workdir
    failed_logs = None
    res: dict = {}
    search = None
    try:
        spent = spent_ledgers(silos_dir) if silos_dir.exists() else {}
        if args.new_ledgers:
            # Every silo of this workdir: a spent ledger, or an anchor whose ledger is gone (an emptied workdir).
            reset = [j for j in range(fed.n_silos)
                     if reset_state(silos_dir / f"silo{j}" / "state",
                                    anchor=default_anchor(silos_dir / f"silo{j}" / "state"), i_understand=True)]
            if reset:
                notes.append(f"--new-ledgers: the ledgers of silos {reset} in {work} started over (their budgets "
                             "start again)")
        elif spent:
            notes.append("the workdir holds spent ledgers (" + ", ".join(f"silo {j}: epsilon {e:.3g}" for j, e in
                         spent.items()) + f"): this run gets only what is left of each silo's budget {args.epsilon:g}, "
                         "so its noise is larger; pass --new-ledgers to start them over, or another --workdir")
        # Parquet: every message's ClientApp reads its silo's shard again, Parquet in about half the time of CSV.
        configs = write_federation(fed, silos_dir, test=(ds.X_test, ds.y_test, ds.s_test), fmt="parquet")
        for c in configs:
            c["epsilon"] = args.epsilon
            # Outside the workdir: a copy of the workdir restored later (or emptied) must not
            # answer rounds again, nor start the budgets over (docs/deploy.md, "Backups").
            c["ledger-anchor"] = str(default_anchor(c["state-dir"]))
            c["histogram-fairness"] = histogram_release(st.notion)
            if args.delta is not None:
                c["delta"] = args.delta
        # Everything checked before a process starts or a silo spends anything.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plan, refusals = preflight(st, fed, configs, n_groups=fed.n_groups, n_classes=fed.n_classes)
        notes += [n for n in dict.fromkeys(str(w.message) for w in caught) if n not in notes]
        if refusals:
            lines = [f"silo {j}: {one_line(r)}" for j, r in sorted(refusals.items())]
            if args.json:
                print(json.dumps({"status": "refused", "refusals": {str(j): r for j, r in refusals.items()},
                                  "warnings": notes, "started": False, "workdir": str(work) if keep else None}))
            else:
                print("error: " + ("every silo" if len(refusals) == fed.n_silos else f"{len(refusals)} of "
                      f"{fed.n_silos} silos") + " would refuse this run, so nothing was started and nothing spent:\n  "
                      + "\n  ".join(lines) + "\n(a larger --epsilon, --new-ledgers or another --workdir gives them "
                      "budget; see docs/deploy.md, 'When silos refuse')", file=sys.stderr)
            return 3
        if not args.json:
            for note in notes:
                print(f"warning: {note}", file=sys.stderr)
            print(f"deploying {fed.n_silos} silos of {ds.name} on 127.0.0.1 ({plan.total_rounds} rounds: "
                  f"{st.epochs} epochs of {plan.rounds_per_epoch}; workdir {work}) ...", file=sys.stderr)
        notes_printed = len(notes)
        if getattr(args, "tune", False):
            from pfair.flower.tune import DEPLOY_GRID, deploy_search

            # The grid's steps are stated like lr_theta: times whatever "auto" multiplied the step by (a
            # private run stretched to its batch, pfair.settings.SteFFLeSettings.for_sizes).
            k = unresolved.stretch(int(st.batch_size))
            grid = {"lr_theta": [v * k for v in DEPLOY_GRID["lr_theta"]]}
            search = deploy_search(estimator, grid, configs, n_groups=fed.n_groups, n_classes=fed.n_classes,
                                   workdir=work / "flower", round_timeout=args.round_timeout, timeout=args.timeout)
            res = search["best"]
        else:
            from pfair._progress import progress_bar

            bar = progress_bar(total=plan.total_rounds, enabled=not args.json, desc="rounds", unit="round",
                               leave=False)

            def on_round(now: dict) -> None:
                bar.update(int(now["round"]) - bar.n)
                bar.set_postfix_str(f"{now['silos']} of {now['of']} silos answered")

            try:
                res = run_deployment(st, configs, n_groups=fed.n_groups, n_classes=fed.n_classes,
                                     workdir=work / "flower", round_timeout=args.round_timeout, timeout=args.timeout,
                                     on_round=on_round)
            finally:
                bar.close()
    except KeyboardInterrupt:
        what = spent_now(silos_dir)
        kept = (f"the workdir {work} is kept (shards, ledgers, logs)" if keep else
                "the temporary workdir was removed")
        print(f"\npfair deploy local: interrupted; every party was stopped, {kept}; spent so far: {what}",
              file=sys.stderr)
        return 130
    except (DeploymentFailed, TimeoutError, RuntimeError) as exc:
        logs = work / "flower" / "logs"
        if not keep and logs.exists():  # the logs outlive the temporary workdir
            failed_logs = Path(tempfile.mkdtemp(prefix="pfair-deploy-logs-"))
            shutil.copytree(logs, failed_logs, dirs_exist_ok=True)
        cause = exc.cause if isinstance(exc, DeploymentFailed) else one_line(str(exc))
        print(f"pfair deploy local: error: {cause}\n  logs: {failed_logs or logs}; spent: {spent_now(silos_dir)}",
              file=sys.stderr)
        return 1
    finally:
        lock.release()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
            for c in configs:  # the anchors of ledgers that are gone with the workdir
                Path(c["ledger-anchor"]).unlink(missing_ok=True)
    return _deploy_report(args, res, search, ds, fed, st, estimator, notes, notes_printed, work, keep, t0,
                          stated=unresolved)


def _refusal_lines(res: dict) -> list[str]:
    """One line per silo that refused (why), or answered no round although asked."""
    from pfair.flower.deploy import one_line

    lines = [f"silo {j}: {one_line(reason)}" for j, reason in res.get("refusals", {}).items()]
    refused = {int(j) for j in res.get("refusals", {})}
    if res.get("status") != "refused":
        for row in res["silos"]:
            if row["silo"] not in refused and row.get("rounds_answered", 1) == 0:
                why = next((one_line(e["reason"]) for e in reversed(res["events"])
                            if e.get("silo") == row["silo"] and e.get("reason")), "no reply it sent was used")
                lines.append(f"silo {row['silo']}: answered none of the {res['rounds']} rounds ({why})")
    return lines


def _deploy_report(args: argparse.Namespace, res: dict, search: Any, ds: Any, fed: Any, st: Any, estimator: Any,
                   notes: list, notes_printed: int, work: Any, keep: bool, t0: float, *, stated: Any) -> int:
    """The deployment's summary and JSON (``stated``: the settings before ``batch_size="auto"`` was
    resolved, whose epochs the summary says it stretched)."""
    import numpy as np
    import pandas as pd

    from pfair import _core, metrics
    from pfair.validation import training_sizes

    if res.get("status") == "refused":
        # Every silo refused every round: nothing was trained. Say which silos and why; exit 3.
        lines = _refusal_lines(res)
        never = [row["silo"] for row in res["silos"] if not row["refused"]]
        if never:
            lines.append(f"silos {never} answered no round")
        if args.json:
            print(json.dumps({"status": "refused", "refusals": res["refusals"], "warnings": notes, "started": True,
                              "workdir": str(work) if keep else None}, default=float))
        else:
            print("error: no silo answered a round, so no model was trained:\n  " + "\n  ".join(lines),
                  file=sys.stderr)
        return 3
    theta = np.asarray(res["theta"])
    pred = np.argmax(_core.predict_proba(ds.X_test, theta, fed.n_classes), axis=1)
    # the summary prints its own note on small test groups, with their names
    report = metrics.fairness_report(ds.y_test, pred, sensitive_features=ds.s_test, warn_small_groups=False)
    rows = []
    for r in res["silos"]:
        plan, ledger = r["plan"] or {}, r["ledger"] or {}
        rows.append({"silo": r["silo"], **{k: plan.get(k) for k in ("n_records", "accounting", "sample_rate", "steps",
                                                                    "noise_multiplier", "sigma_theta", "sigma_w",
                                                                    "calibration")},
                     "epsilon_spent": ledger.get("epsilon_spent"), "delta": ledger.get("delta"),
                     "p_s": st.p_s_source, "noise": "secret", "refused": r["refused"],
                     "rounds_answered": r.get("rounds_answered")})
    if search is not None:  # the best run's reports are its ledgers as it left them; the search's are final
        for row, spent in zip(rows, search["epsilon_spent"]):
            row["epsilon_spent"] = spent
    report_df = pd.DataFrame(rows).set_index("silo")
    spent_now_ = [row["epsilon_spent"] for row in rows if row["epsilon_spent"] is not None]
    rounds = res["timing"]["round_s"]
    if res.get("selection_warning"):
        notes.append(res["selection_warning"])
    if search is not None and search["selection_warning"]:
        notes.append(f"the search: {search['selection_warning']}")
    refused_lines = _refusal_lines(res)
    from pfair.flower.deploy import one_line

    for e in res["events"]:
        if e["event"] == "diverged":
            notes.append(f"training diverged at round {e.get('round')}")
    result = {
        "status": "partial" if refused_lines else "completed",
        "dataset": ds.name, "fairness": args.fairness, "silos": fed.n_silos, "mode": "standard",
        "protect": args.protect,
        "heterogeneity": args.heterogeneity, "lam": args.lam, "epsilon": args.epsilon,
        "test_error": report["test_error"], "trivial_error": report["trivial_error"],
        "demographic_parity_difference": report["demographic_parity_difference"],
        "equalized_odds_difference": report["equalized_odds_difference"],
        "max_violation": None, "final_lam": float(args.lam),
        **checkpoint_summary(res.get("checkpoints", []), res.get("selected_epoch"), st.epochs),
        # what batch_size="auto" made of the stated epochs (as pfair train says it)
        "epochs_stated": int(stated.epochs),
        "epochs_why": stretch_reason(stated, int(st.batch_size), training_sizes(fed.sizes, st.validation_share),
                                     int(st.epochs)),
        "batch_size": res["settings"]["batch_size"],  # as the server's plan resolved it for the silos
        "lr_theta": res["settings"]["lr_theta"],
        "epsilon_spent": max(spent_now_) if spent_now_ else None,
        "delta": max((row["delta"] for row in rows if row["delta"] is not None), default=None),
        "noise_multiplier": [row["noise_multiplier"] for row in rows],
        "warnings": notes, "seconds": time.perf_counter() - t0,
        # the deployment's own
        "privacy": rows, "rounds": res["rounds"], "events": res["events"],
        "refusals": refused_lines,
        "start_seconds": res["timing"]["silos_joined_s"],
        "seconds_per_round": float(np.mean(rounds)) if rounds else None,
        "workdir": str(work) if keep else None,
    }
    if search is not None:
        result["tune"] = deployed_tune_summary(search)
        result["rounds"] = sum(r["rounds"] for r in search["runs"])
    if args.save_model:
        from pfair.model_file import linear_model

        # The analyst's model: the deployment's final θ, with the settings the server ran (a search's
        # chosen candidate's) and the privacy report of the silos' ledgers.
        tuned = {k: res["settings"][k] for k in ("lr_theta", "batch_size") if k in res.get("settings", {})}
        model = linear_model(estimator.set_params(**tuned), theta, classes=fed.classes_, groups=fed.groups_,
                             n_features=ds.n_features, selected_epoch=res.get("selected_epoch"))
        result["model_file"] = save_run_model(model, args.save_model, ds, result, report_df, "pfair deploy local")
    code = 4 if refused_lines else 0
    if keep:  # what `pfair train --out` writes: pfair privacy-report reads it
        report_rows = report_df.reset_index().replace({np.inf: None}).to_dict(orient="records")
        (work / "run.json").write_text(json.dumps({**result, "privacy_report": report_rows}, indent=1, default=float))
    if args.json:
        print(json.dumps(result, default=float))
        return code
    result["warnings"] = notes[notes_printed:]  # the ones not printed before the run
    print_summary(result, args, ds, fed, report_df, where="Flower silos")
    if search is not None:
        print_tune(result["tune"])
    if result["workdir"]:
        print(f"              (all columns: pfair privacy-report {work}/run.json [--explain])")
    if args.save_model:
        print(f"model         saved to {args.save_model} (pfair predict --model {args.save_model} --csv new.csv)")
    print(f"time          {result['seconds']:.1f} s ({res['rounds']} rounds, {result['seconds_per_round']:.2f} s per "
          f"round, silos joined after {result['start_seconds']:.1f} s)")
    if result["workdir"]:
        print(f"workdir       {work} (shards, silo states and ledgers, logs, result.json, run.json)")
    if refused_lines:
        print("error: the model was trained without some silos' rounds (exit code 4):\n  " + "\n  ".join(refused_lines),
              file=sys.stderr)
    return code
