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
# the history's norms and losses and W_ of the DP-proportions hybrid move by one or two units in
# the last place (θ_ does not). There the floats are compared to within 4
# units in the last place; a changed release, key stream or charge moves them by far more.
ULPS = 0 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 4


def test_every_run_is_pinned():
    assert sorted(PINNED) == sorted(RUNS)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_run_gives_the_pinned_bits(name):
    got, pinned = run(name), PINNED[name]
    # Attributes a fit gained since (e.g. n_rounds_ of a hybrid fit) are new, not changed.
    assert set(pinned) <= set(got), sorted(set(pinned) - set(got))
    differ = same({k: got[k] for k in pinned}, pinned, name, ulps=ULPS)
    assert not differ, "\n".join(differ[:20])
