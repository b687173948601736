"""Fairness/accuracy trade-off of SteFFLe on UCI Adult (N = 3 silos by age, h = 0).

Prints the configuration it runs, then a Markdown table of mean test error, demographic parity
and equalized odds difference over seeds for each (ε, λ). The first two tables of
docs/results.md come from this script, at today's SteFFLe defaults:

    python examples/adult_tradeoff.py --seeds 3 --epsilons none 1 3
    python examples/adult_tradeoff.py --seeds 3 --epsilons 1 3 --batch-size 256

Seed ``i`` drives the partition, the batches and (``noise_seed=i``, a simulation: the noise is
known to whoever knows the seed) the noise, so a rerun prints the same table;
tests/test_doc_blocks.py reruns both tables and compares every row with the page.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

import pfair
from pfair import metrics


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--lams", type=float, nargs="+", default=[0.0, 0.5, 1.0, 1.5, 2.0])
    ap.add_argument("--epsilons", type=str, nargs="+", default=["none", "1"])
    ap.add_argument("--batch-size", type=lambda t: "auto" if t == "auto" else int(t), default="auto",
                    help="default: SteFFLe's batch_size='auto'")
    ap.add_argument("--lr-theta", type=float, default=None, help="default: SteFFLe's")
    return ap.parse_args(argv)


def estimator(args: argparse.Namespace, lam: float, epsilon: float | None, seed: int) -> pfair.SteFFLe:
    """The SteFFLe of one cell: the defaults except the batch size and η_θ the arguments set."""
    step = {} if args.lr_theta is None else {"lr_theta": args.lr_theta}
    return pfair.SteFFLe(lam=lam, epsilon=epsilon, seed=seed, noise_seed=seed, batch_size=args.batch_size,
                         track_history=False, progress=False, **step)


def config_line(args: argparse.Namespace) -> str:
    """The settings every private cell runs with, as docs/results.md quotes them."""
    from pfair.settings import (AUTO_BATCH_NONPRIVATE, AUTO_BATCH_PRIVATE, AUTO_DECAY, AUTO_RUN_BATCH,
                                LAMBDA_STRETCH_CAP, THETA_STEP_LAMBDA)

    st = estimator(args, 1.0, 1.0, 0).settings()
    batch = (f"batch {st.batch_size}" if st.batch_size != "auto" else
             f"batch auto (up to {AUTO_BATCH_PRIVATE} when private at λ > 0, the epochs, η_θ and the decay period "
             f"then times batch / {AUTO_RUN_BATCH} above {AUTO_RUN_BATCH}; else up to {AUTO_BATCH_NONPRIVATE}, "
             f"the epochs and the decay period then times min(λ, {LAMBDA_STRETCH_CAP:g}) above λ = "
             f"{THETA_STEP_LAMBDA:g})")
    step = " / max(1, λ)" if st.theta_step == "scaled" else ""
    clip = (f"clip C_θ adaptive (each round the {st.clip_quantile:g}-quantile of its batch's s-free scales)"
            if st.adaptive_clip else f"clip C_θ = {st.clip:g}")
    decay = f"×{st.lr_decay:g} every {st.decay_every} epochs"
    if (st.lr_decay, st.decay_every) != AUTO_DECAY:  # the default private run's decay ("auto")
        decay += f" when private at λ > 0, else ×{AUTO_DECAY[0]:g} every {AUTO_DECAY[1]}"
    return (f"{st.epochs} epochs, {batch}, η_θ = {st.lr_theta:g}{step} ({decay}), η_W = {st.lr_w:g}, "
            f"W radius {st.w_radius:g}, {clip}, "
            f"sampling {st.sampling}, p_s {st.p_s_source}, δ = 1/n_j²")


def table(args: argparse.Namespace) -> list[str]:
    """The Markdown rows (header first) for ``args``."""
    import warnings

    data = pfair.datasets.load_adult()
    lines = ["| ε | λ | test error | DP violation | EO violation | max ε spent |", "|---|---|---|---|---|---|"]
    for eps_text in args.epsilons:
        eps = None if eps_text == "none" else float(eps_text)
        for lam in args.lams:
            rows = []
            for seed in range(args.seeds):
                fed = pfair.Federation.partition(data, 3, heterogeneity=0.0, by="age", seed=seed)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # noise_seed and the non-private notice, said above
                    model = estimator(args, lam, eps, seed).fit(fed)
                r = metrics.fairness_report(data.y_test, model.predict(data.X_test), sensitive_features=data.s_test)
                spent = model.epsilon_spent_ if eps is not None else float("nan")
                rows.append((r["test_error"], r["demographic_parity_difference"], r["equalized_odds_difference"], spent))
            m = np.mean(rows, axis=0)
            sd = np.std(rows, axis=0)
            spent = "—" if eps is None else f"{m[3]:.4f}"
            lines.append(f"| {eps_text} | {lam:g} | {m[0]:.4f} ± {sd[0]:.4f} | {m[1]:.4f} ± {sd[1]:.4f} | "
                         f"{m[2]:.4f} ± {sd[2]:.4f} | {spent} |")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    data = pfair.datasets.load_adult()
    trivial = metrics.trivial_error(data.y_test)
    print(f"Adult: {data.X_train.shape[0]} training / {data.X_test.shape[0]} test records; trivial error {trivial:.4f}")
    print(config_line(args) + "\n")
    print("\n".join(table(args)))


if __name__ == "__main__":
    main()
