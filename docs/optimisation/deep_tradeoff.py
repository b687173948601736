"""The deep section of docs/results.md: ``DeepSteFFLe`` at its defaults, ε × λ, on two networks.

* ``mlp`` — ``mlp(d, 2)`` (d-64-2, tanh) on Adult, sensitive attribute sex;
* ``cnn`` — ``SmallCNN(1, 10, width=8)`` on the 8×8 digits, s the ink-mass tercile
  (``load_digits_fair``).

Both with ``DeepSteFFLe``'s defaults (batch ``min(256, max(16, n_min // 32))``, step batch/256,
5 epochs, lr_w 0.25, clip 0.5, p_s released with DP in private fits): Adult's 33,915 training records give
batches of 256 and a step of 1.0, the digits' 1,348 give 16 and 0.0625. The training split in 3
silos (record i in silo i mod 3), for ε ∈ {none, 1, 3, 9} and λ ∈ {0, 1, 2, 4}, seeds 0–2 (the
seed drives the initialisation, the batches and the noise). Test error, demographic parity and
equalized odds differences on the test split, and the largest ε a silo spent; mean ± standard
deviation over the seeds.

    python docs/optimisation/deep_tradeoff.py [--seeds 0,1,2] [--models mlp,cnn] [--write docs/results.md]

With ``--write`` the tables replace the ``<!-- generated:deep -->`` block of the file. Runs are
written to ``docs/optimisation/deep_tradeoff.csv``. About 10 min on 2 cores.
"""

from __future__ import annotations

import argparse
import csv
import functools
import re
import time
import warnings
from pathlib import Path

import numpy as np
import torch

import pfair
from pfair.torch import DeepSteFFLe, load_digits_fair
from pfair.torch.models import SmallCNN, mlp

EPSILONS = [None, 1.0, 3.0, 9.0]
LAMBDAS = [0.0, 1.0, 2.0, 4.0]
OUT = Path(__file__).with_name("deep_tradeoff.csv")


#: model name -> (title, data loader, module factory, input shape)
MODELS = {
    "mlp": ("an MLP on Adult", pfair.datasets.load_adult, lambda data: mlp(data.n_features, 2), None),
    "cnn": ("a CNN on the 8×8 digits", load_digits_fair, lambda data: SmallCNN(1, 10, width=8), (1, 8, 8)),
}


@functools.lru_cache(maxsize=None)
def _load(name: str):  # noqa: ANN202
    return MODELS[name][1]()


def one(name, data, eps, lam, seed) -> dict:  # noqa: ANN001
    _, _, make, shape = MODELS[name]
    silos = np.arange(len(data.y_train)) % 3
    kw = dict(epsilon=None) if eps is None else dict(epsilon=eps, noise_seed=seed)
    model = DeepSteFFLe(make(data), input_shape=shape, lam=lam, init_seed=seed, seed=seed, track_history=False,
                        device="cpu", **kw)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(data.X_train, data.y_train, sensitive_features=data.s_train, silos=silos)
    pred = model.predict(data.X_test)
    m = pfair.metrics
    return {"model": name, "epsilon": "none" if eps is None else eps, "lam": lam, "seed": seed,
            "test_error": float(np.mean(pred != data.y_test)),
            "dp": m.demographic_parity_difference(data.y_test, pred, sensitive_features=data.s_test),
            "eo": m.equalized_odds_difference(data.y_test, pred, sensitive_features=data.s_test),
            "eps_spent": float(np.max(model.privacy_report_["epsilon_spent"])) if eps is not None else float("nan"),
            "seconds": time.perf_counter() - t0}


def table(rows: list[dict], seeds: list[int], models: list[str]) -> str:
    def ms(v: list[float]) -> str:
        return f"{np.mean(v):.4f} ± {np.std(v):.4f}"

    lines = [f"<!-- generated:deep (python docs/optimisation/deep_tradeoff.py --seeds "
             f"{','.join(map(str, seeds))} --models {','.join(models)} --write docs/results.md; {len(rows)} runs) -->"]
    for name in models:
        lines += ["", f"**{MODELS[name][0][0].upper() + MODELS[name][0][1:]}**", "",
                  "| ε | λ | test error | DP violation | EO violation | max ε spent | s per fit |",
                  "|---|---|---|---|---|---|---|"]
        lines += _rows([r for r in rows if r["model"] == name], ms)
    lines.append("<!-- /generated:deep -->")
    return "\n".join(lines)


def _rows(rows: list[dict], ms) -> list[str]:  # noqa: ANN001
    lines = []
    for eps in EPSILONS:
        for lam in LAMBDAS:
            sel = [r for r in rows if r["epsilon"] == ("none" if eps is None else eps) and r["lam"] == lam]
            if not sel:
                continue
            spent = "—" if eps is None else f"{max(r['eps_spent'] for r in sel):.4f}"
            lines.append(f"| {'none' if eps is None else f'{eps:g}'} | {lam:g} | "
                         f"{ms([r['test_error'] for r in sel])} | {ms([r['dp'] for r in sel])} | "
                         f"{ms([r['eo'] for r in sel])} | {spent} | {np.mean([r['seconds'] for r in sel]):.1f} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--write", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    seeds = [int(v) for v in args.seeds.split(",")]
    models = args.models.split(",")
    rows = []
    with OUT.open("w", newline="") as fh:
        w = None
        for name, eps, lam, seed in ((n, e, la, sd) for n in models for e in EPSILONS for la in LAMBDAS
                                     for sd in seeds):
            r = one(name, _load(name), eps, lam, seed)
            rows.append(r)
            if w is None:
                w = csv.DictWriter(fh, fieldnames=list(r))
                w.writeheader()
            w.writerow(r)
            fh.flush()
            print(r, flush=True)
    text = table(rows, seeds, models)
    print(text)
    if args.write:
        path = Path(args.write)
        doc = path.read_text()
        block = re.compile(r"<!-- generated:deep.*?<!-- /generated:deep -->", re.S)
        if not block.search(doc):
            raise SystemExit(f"{path} has no <!-- generated:deep --> block")
        path.write_text(block.sub(lambda _: text, doc))


if __name__ == "__main__":
    main()
