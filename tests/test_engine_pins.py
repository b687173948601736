"""The run engine returns the bits it returned before the run assembly moved
(``tests/engine_pins.py`` says how ``tests/data/engine_pins.json`` was made, and from which commit):
θ, W, the privacy report, the history and the checkpoints of a standard, non-private, record-mode,
target, hybrid (three topologies, one with DP proportions), resumed (both protections),
warm-started and party-loop run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine_pins import PINS, RUNS, run, same

PINNED = json.loads(PINS.read_text())["runs"]
# The pins were written under NumPy 2 (as .venv has: the newest release). Under NumPy 1.x (the
# lower end of pfair's range, make test-lowest) some of NumPy's own reductions round differently:
# the history's norms and losses, W_ and θ_ move in the last digits (at most 2.7e-15 relative,
# seen under NumPy 1.26.0). There the floats are compared to 1e-12 relative (1e-12 absolute near
# 0); a changed release, key stream or charge moves them by far more (noise of scale σ).
REL = 0.0 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 1e-12


def test_every_run_is_pinned():
    assert sorted(PINNED) == sorted(RUNS)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_run_gives_the_pinned_bits(name):
    got, pinned = run(name), PINNED[name]
    # Attributes a fit gained since (e.g. n_rounds_ of a hybrid fit) are new, not changed.
    assert set(pinned) <= set(got), sorted(set(pinned) - set(got))
    differ = same({k: got[k] for k in pinned}, pinned, name, rel=REL)
    assert not differ, "\n".join(differ[:20])
