"""The deep setting of Gupta, Poornash, Razaviyayn and Lowy, "A Stochastic Optimization Framework
for Private and Fair Learning From Decentralized Data" (2024), on your own copy of UTKFace:
ResNet-18 (GroupNorm instead of BatchNorm, defined in ``pfair.torch.models``; no torchvision and
no pretrained weights), 9 age classes as the label, race (5 groups) as the sensitive attribute,
trained with SteFFLe across silos, each silo private with respect to its records' race.

UTKFace is not downloaded: pass the folder of its images (``age_gender_race_date.jpg``, e.g. the
``UTKFace/`` folder of the "Aligned & Cropped Faces" archive; Zhang, Song and Qi, "Age
Progression/Regression by Conditional Adversarial Autoencoder", 2017)::

    python examples/utkface_resnet.py --folder ~/data/UTKFace --epsilon 3 --lam 1 --epochs 10

Useful options: ``--image-size`` (default 32; memory is 8·n·3·size² bytes for the float64 data,
580 MB at 32), ``--width`` (ResNet width, 64 = ResNet-18; 16 trains on a CPU), ``--silos``,
``--limit`` (read only the first files, for a dry run), ``--device`` (auto/cpu/cuda),
``--chunk-size`` (records per vmap call of the per-record gradients; lower it if the GPU runs out
of memory), ``--noise-seed`` (reproducible noise; the guarantee then does not hold against anyone
who knows it). Without ``--epsilon`` the fit is non-private. The script prints the test accuracy,
demographic-parity and equalized-odds violations over the 5 race groups, and each silo's privacy
report; ``--out`` writes the history and report as CSV.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--folder", required=True, type=Path, help="the UTKFace image folder (age_gender_race_date.jpg)")
    p.add_argument("--epsilon", type=float, default=None, help="each silo's ε (default: non-private)")
    p.add_argument("--delta", type=float, default=None, help="each silo's δ (default 1/n_j²)")
    p.add_argument("--lam", type=float, default=1.0, help="λ, the weight of the fairness penalty")
    p.add_argument("--fairness", default="demographic_parity",
                   choices=["demographic_parity", "equalized_odds", "equal_opportunity"])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.05, help="η_θ")
    p.add_argument("--lr-w", type=float, default=0.1, help="η_W")
    p.add_argument("--clip", type=float, default=1.0, help="C_θ, per-record clip norm of b_i")
    p.add_argument("--protect", default="attribute", choices=["attribute", "record"])
    p.add_argument("--silos", type=int, default=3)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--width", type=int, default=64, help="ResNet width (64: ResNet-18)")
    p.add_argument("--limit", type=int, default=None, help="read only the first LIMIT images")
    p.add_argument("--device", default="auto")
    p.add_argument("--chunk-size", type=int, default=None)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=0, help="split, silo assignment, batch order and initialisation")
    p.add_argument("--noise-seed", type=int, default=None)
    p.add_argument("--out", type=Path, default=None, help="folder for history.csv and privacy_report.csv")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    import pfair
    from pfair.torch import DeepSteFFLe, load_image_folder
    from pfair.torch.models import resnet18_groupnorm

    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.time()
    data = load_image_folder(args.folder, image_size=args.image_size, label="age", sensitive="race",
                             seed=args.seed, limit=args.limit)
    print(f"{data} read in {time.time() - t0:.0f} s")
    print(data.describe().T.to_string())
    fed = pfair.Federation.partition(data, args.silos, heterogeneity=0.0, by="age", seed=args.seed)
    print(fed)

    model = DeepSteFFLe(
        resnet18_groupnorm(data.n_classes, in_channels=data.input_shape[0], width=args.width),
        input_shape=data.input_shape, device=args.device, chunk_size=args.chunk_size, init_seed=args.seed,
        fairness=args.fairness, lam=args.lam, epsilon=args.epsilon, delta=args.delta, epochs=args.epochs,
        batch_size=args.batch_size, lr_theta=args.lr, lr_w=args.lr_w, clip=args.clip, protect=args.protect,
        seed=args.seed, noise_seed=args.noise_seed, progress=True,
    )
    t0 = time.time()
    model.fit(fed, eval_set=(data.X_test, data.y_test, data.s_test), ledgers="new")
    print(f"trained {model.n_params_:,} parameters for {model.epochs_done_} epochs ({model.n_rounds_} rounds) "
          f"in {time.time() - t0:.0f} s on {model.device_}")

    pred = model.predict(data.X_test)
    metrics = pfair.metrics
    print(f"test accuracy       {np.mean(pred == data.y_test):.4f}")
    dp = metrics.demographic_parity_difference(data.y_test, pred, sensitive_features=data.s_test)
    eo = metrics.equalized_odds_difference(data.y_test, pred, sensitive_features=data.s_test)
    print(f"demographic_parity_difference (race) {dp:.4f}")
    print(f"equalized_odds_difference (race)     {eo:.4f}")
    cols = ["n_records", "steps", "noise_multiplier", "sigma_theta", "sigma_w", "epsilon_spent", "delta", "noise",
            "guarantee"]
    print(model.privacy_report_[cols].to_string())
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        model.history_.to_csv(args.out / "history.csv")
        model.privacy_report_.to_csv(args.out / "privacy_report.csv")
        print(f"wrote {args.out / 'history.csv'} and {args.out / 'privacy_report.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
