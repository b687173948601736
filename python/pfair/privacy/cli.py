"""``pfair privacy``: calibrate a noise multiplier for a silo, or price one.

    pfair privacy --epsilon 1 --delta 1e-5 --batch 256 --silo-size 12000 --epochs 40
    pfair privacy --noise-multiplier 2.0 --delta 1e-5 --batch 256 --silo-size 12000 --epochs 40

``q = batch / silo_size`` and ``steps = epochs · ceil(silo_size / batch)``. The default
``--sampling shuffle`` (shuffled epochs) is how a SteFFLe silo protecting the sensitive attribute
is accounted by default (its s-free parts reveal the batch; one Gaussian release per epoch);
``public_batch`` is random visible batches; ``without_replacement`` and ``poisson_replace_one``
assume a hidden batch and fit ``protect="record"``. ``--accountant best`` (default) gives the
smaller of the RDP bound and the exact account (shuffle, public batches, full batch) or the PLD
(hidden batches). The main CLI calls :func:`add_privacy_parser`.
"""

from __future__ import annotations

import argparse
import json
import math

from pfair.privacy.accountant import ACCOUNTANTS, SAMPLING_SCHEMES, epsilon_for, noise_multiplier_for
from pfair.settings import default_delta

__all__ = ["add_privacy_parser", "privacy_command"]

#: What each scheme assumes, and what its noise multiplier is measured against.
SCHEME_NOTES = {
    "shuffle": "shuffled epochs, batch membership public (SteFFLe's default with protect='attribute'): one "
               "Gaussian release per epoch; z = std / replace-one sensitivity",
    "public_batch": "batch membership public, as in SteFFLe with protect='attribute'; z = std / replace-one sensitivity",
    "without_replacement": "hidden fixed-size batch (all of the message noised, e.g. protect='record'); "
                           "z = std / replace-one sensitivity",
    "poisson_replace_one": "hidden Poisson batch, replace-one neighbours; z = std / add-remove sensitivity",
    "poisson": "hidden Poisson batch, ADD/REMOVE neighbours only (not pfair's adjacency); "
               "z = std / add-remove sensitivity",
    "full_batch": "every record in every step; z = std / replace-one sensitivity",
}


def add_privacy_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``privacy`` subcommand on an argparse ``subparsers`` object."""
    p = subparsers.add_parser("privacy", help="calibrate or price a silo's DP noise")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--epsilon", type=float, help="target epsilon: print the calibrated noise multiplier")
    target.add_argument("--noise-multiplier", type=float, help="noise std / L2 sensitivity: print the epsilon spent")
    p.add_argument("--delta", type=float, default=None, help="target delta (default 1/silo_size^2)")
    p.add_argument("--batch", type=int, required=True, help="batch size m")
    p.add_argument("--silo-size", type=int, required=True, help="records in the silo n")
    p.add_argument("--epochs", type=int, required=True, help="passes over the silo")
    p.add_argument("--sampling", choices=SAMPLING_SCHEMES, default="shuffle",
                   help="batch scheme (default shuffle: SteFFLe protecting s; public_batch: random visible "
                        "batches; without_replacement / poisson_replace_one: hidden batches)")
    p.add_argument("--accountant", choices=ACCOUNTANTS, default="best",
                   help="rdp (Renyi-DP bound), exact (shuffle/public_batch/full_batch), pld (hidden batches; "
                        "slower) or best (default: the smallest valid one)")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.set_defaults(func=privacy_command)
    return p


def privacy_command(args) -> int:
    """Run ``pfair privacy`` on parsed ``args``; prints the result and returns 0."""
    if args.batch < 1 or args.silo_size < 1 or args.batch > args.silo_size:
        raise SystemExit("--batch must be in [1, --silo-size]")
    if args.epochs < 1:
        raise SystemExit("--epochs must be >= 1")
    q = args.batch / args.silo_size
    if args.sampling == "full_batch":
        if args.batch != args.silo_size:
            raise SystemExit("--sampling full_batch needs --batch equal to --silo-size")
        q = 1.0
    steps = args.epochs * math.ceil(args.silo_size / args.batch)
    delta = args.delta if args.delta is not None else default_delta(args.silo_size)
    out = {"sample_rate": q, "steps": steps, "delta": delta, "sampling": args.sampling, "accountant": args.accountant,
           "assumes": SCHEME_NOTES[args.sampling]}
    try:
        if args.epsilon is not None:
            z = noise_multiplier_for(epsilon=args.epsilon, delta=delta, sample_rate=q, steps=steps, sampling=args.sampling,
                                     accountant=args.accountant)
            eps = epsilon_for(noise_multiplier=z, sample_rate=q, steps=steps, delta=delta, sampling=args.sampling,
                              accountant=args.accountant)
            out.update(target_epsilon=args.epsilon, noise_multiplier=z, epsilon=eps)
        else:
            eps = epsilon_for(noise_multiplier=args.noise_multiplier, sample_rate=q, steps=steps, delta=delta,
                              sampling=args.sampling, accountant=args.accountant)
            out.update(noise_multiplier=args.noise_multiplier, epsilon=eps)
    except (ValueError, TypeError) as e:
        raise SystemExit(f"pfair privacy: {e}")
    if args.json:
        print(json.dumps(out))
    elif args.epsilon is not None:
        print(f"noise multiplier {out['noise_multiplier']:.4f} (epsilon {out['epsilon']:.4f} <= {args.epsilon}, "
              f"delta {delta:.3g}, q {q:.5f}, steps {steps}, {args.sampling})")
    else:
        print(f"epsilon {out['epsilon']:.4f} (delta {delta:.3g}, noise multiplier {args.noise_multiplier}, "
              f"q {q:.5f}, steps {steps}, {args.sampling})")
    if not args.json:
        print(f"  {args.sampling}: {out['assumes']}")
    return 0
