"""Are two source trees' fits the same, bit for bit? For refactors that must not change a number.

    python tools/same_bits.py BASE_PYTHON_DIR HEAD_PYTHON_DIR [--deep]

runs a fixed set of seeded fits (standard with p_s="dp", given p_s with equalized odds, record
protection, a private and a non-private fairness target, a hybrid topology, pooled p_s with three
classes; ``--deep`` adds DeepSteFFLe for three notions) once with each directory first on
``PYTHONPATH`` (each holding its own ``pfair`` and ``_core`` extension), and compares θ, W, the
history, the privacy report, every ledger event, λ and the checkpoint figures byte for byte.
Exit status 0 when every configuration is identical. The noise is seeded (``noise_seed``), so a
difference is a difference of the code.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile

import numpy as np

CONFIGS = {
    "standard_dp": dict(fairness="demographic_parity", epsilon=1.0, epochs=4, noise_seed=3),
    "standard_eo_given": dict(fairness="equalized_odds", epsilon=2.0, epochs=3,
                              p_s=[[0.3, 0.3, 0.4], [0.2, 0.3, 0.5]], noise_seed=5),
    "record_eo": dict(fairness="equalized_odds", epsilon=2.0, epochs=3, protect="record", noise_seed=7),
    "target_eopp": dict(fairness="equal_opportunity", epsilon=3.0, epochs=4, max_violation=0.05, noise_seed=11),
    "target_dp_nonprivate": dict(fairness="demographic_parity", epsilon=None, epochs=3, max_violation=0.05),
    "hybrid_dp": dict(fairness="demographic_parity", epsilon=2.0, epochs=3, mode="central_sensitive",
                      sampling="without_replacement", calibration="rdp", noise_seed=2),
    "pooled_eopp_l3": dict(fairness="equal_opportunity", epsilon=2.0, epochs=2, p_s="pooled", noise_seed=9,
                           positive_class=2),
}


def _data(l: int, n: int = 900, k: int = 3, seed: int = 0):  # noqa: E741
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    s = rng.integers(0, k, n)
    y = ((X[:, 0] + 0.8 * s + rng.normal(size=n)) > 0.5).astype(int) if l == 2 else rng.integers(0, l, n)
    return X, y, s, rng.integers(0, 3, n)


def _fits(out_path: str, deep: bool) -> None:
    """Run every configuration in this interpreter and pickle what each fit released."""
    import warnings

    warnings.simplefilter("ignore")
    from pfair import SteFFLe

    out = {}
    for name, kw in CONFIGS.items():
        X, y, s, silos = _data(3 if name.endswith("l3") else 2)
        m = SteFFLe(seed=1, batch_size=64, **kw).fit(X, y, sensitive_features=s, silos=silos)
        out[name] = {
            "theta": np.asarray(m.theta_), "W": np.asarray(m.W_), "lam": float(getattr(m, "lam_", np.nan)),
            "history": m.history_.to_dict(), "report": m.privacy_report_.to_dict(),
            "ledgers": [[(e.name, e.noise_multiplier, e.sample_rate, e.steps, e.sampling) for e in led.events]
                        for led in m.ledgers_],
            "checkpoints": m.checkpoints_.to_dict() if getattr(m, "checkpoints_", None) is not None else None,
        }
    if deep:
        import torch

        from pfair.torch import DeepSteFFLe
        from pfair.torch.models import mlp

        rng = np.random.default_rng(0)
        X = rng.normal(size=(600, 4))
        s = rng.integers(0, 2, 600)
        y = ((X[:, 0] + s + rng.normal(size=600)) > 0.5).astype(int)
        silos = rng.integers(0, 2, 600)
        for f in ("equal_opportunity", "equalized_odds", "demographic_parity"):
            torch.manual_seed(0)
            m = DeepSteFFLe(module=mlp(4, 2, (6,), dtype=torch.float64), fairness=f, epsilon=2.0, epochs=2,
                            batch_size=50, noise_seed=3, seed=1).fit(X, y, sensitive_features=s, silos=silos)
            out[f"deep_{f}"] = {"theta": np.asarray(m.theta_), "W": np.asarray(m.W_), "history": m.history_.to_dict()}
    with open(out_path, "wb") as fh:
        pickle.dump(out, fh)


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(u, v) for u, v in zip(a, b))
    if isinstance(a, float) and a != a:
        return isinstance(b, float) and b != b
    return a == b


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "--fits":
        _fits(argv[1], deep="--deep" in argv)
        return 0
    trees = [a for a in argv if not a.startswith("--")]
    if len(trees) != 2:
        print(__doc__)
        return 2
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, tree in enumerate(trees):
            path = os.path.join(tmp, f"{i}.pkl")
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            subprocess.run([sys.executable, os.path.abspath(__file__), "--fits", path, *(a for a in argv if a == "--deep")],
                           env=env, check=True, cwd=tmp)
            with open(path, "rb") as fh:
                results.append(pickle.load(fh))
    base, head = results
    differ = 0
    for name in base:
        fields = [f for f in base[name] if not _same(base[name][f], head[name][f])]
        print(f"{name:<24} {'same bits' if not fields else 'DIFFERS in ' + ', '.join(fields)}")
        differ += bool(fields)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
