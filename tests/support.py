"""Shared by the test files: a small synthetic federation, a fit interrupted mid-run, and the
repository's scripts (docs/*.py, examples/*.py) loaded as modules.

Import with ``from support import ...`` (``conftest.py`` puts this folder on the path).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from pfair import Federation

ROOT = Path(__file__).resolve().parents[1]


def load_script(path: str) -> ModuleType:
    """The script at ``path`` (relative to the repository, e.g. ``"docs/pld_table.py"``) as a
    module, loaded from its file (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def script_output(path: str, *argv: str) -> str:
    """What the script at ``path`` prints when run (its ``main()``, given ``argv`` if any)."""
    module = load_script(path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        module.main(list(argv)) if argv else module.main()
    return out.getvalue()


def toy_data(n=900, seed=0, k=2, n_silos=3, round_robin=False, cuts=(0.5,), *, group_p=None, minority=None,
             shift=(1.0, 0.0, 0.0), weights=(1.0,), noise=0.5):
    """X, y, s, silos of n records, every draw from ``default_rng(seed)`` in this order:

    * s: uniform over k groups; ``group_p``: drawn with these probabilities (``rng.choice``);
      ``minority``: 1 with this probability, else 0 (``rng.random(n) < minority``);
    * X: three standard normal features, feature j shifted by ``shift[j] · s``;
    * y: the number of ``cuts`` below ``Σ_j weights[j] · X[:, j] + noise · N(0, 1)`` (one cut: a
      binary label, 1 above it);
    * the silo of each record uniform over ``n_silos``, or ``np.arange(n) % n_silos`` (no draw)
      when ``round_robin``.
    """
    rng = np.random.default_rng(seed)
    if minority is not None:
        s = (rng.random(n) < minority).astype(int)
    elif group_p is not None:
        s = rng.choice(k, size=n, p=group_p)
    else:
        s = rng.integers(0, k, size=n)
    X = rng.normal(size=(n, 3))
    for j, a in enumerate(shift):
        if a:
            X[:, j] += a * s
    score = weights[0] * X[:, 0]
    for j, w in enumerate(weights[1:], start=1):
        score = score + w * X[:, j]
    y = np.digitize(score + noise * rng.normal(size=n), cuts, right=True)
    silos = np.arange(n) % n_silos if round_robin else rng.integers(0, n_silos, size=n)
    return X, y, s, silos


def toy_federation(**kw) -> Federation:
    """``toy_data(**kw)`` as a Federation."""
    X, y, s, silos = toy_data(**kw)
    return Federation.from_arrays(X, y, sensitive_features=s, silos=silos)


def fit_interrupted(model, *args, at_epoch, **kwargs):
    """``model.fit(*args, **kwargs)`` stopped by a KeyboardInterrupt (a user's Ctrl-C) when its ``at_epoch``-th
    epoch ends, the earlier epochs' own ``on_epoch`` callback run as usual; the fit must raise it.
    ``Simulation.run`` is patched only for this call."""
    from pfair.protocol import simulation

    real = simulation.Simulation.run
    calls = {"n": 0}

    def interrupted(self, **a):
        user = a.get("on_epoch")

        def on_epoch(epoch, theta, w, info):
            calls["n"] += 1
            if calls["n"] == at_epoch:
                raise KeyboardInterrupt
            return user(epoch, theta, w, info) if user else info

        return real(self, **{**a, "on_epoch": on_epoch})

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(simulation.Simulation, "run", interrupted)
        with pytest.raises(KeyboardInterrupt):
            model.fit(*args, **kwargs)
