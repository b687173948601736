"""The run engine returns the bits it returned before the run assembly moved
(``tests/engine_pins.py`` says how ``tests/data/engine_pins.json`` was made, and from which commit):
θ, W, the privacy report, the history and the checkpoints of a standard, non-private, record-mode,
target, hybrid (three topologies, one with DP proportions), resumed (both protections),
warm-started and party-loop run."""

from __future__ import annotations

import json

import pytest

from engine_pins import PINS, RUNS, run, same

PINNED = json.loads(PINS.read_text())["runs"]


def test_every_run_is_pinned():
    assert sorted(PINNED) == sorted(RUNS)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_run_gives_the_pinned_bits(name):
    got, pinned = run(name), PINNED[name]
    # Attributes a fit gained since (e.g. n_rounds_ of a hybrid fit) are new, not changed.
    assert set(pinned) <= set(got), sorted(set(pinned) - set(got))
    differ = same({k: got[k] for k in pinned}, pinned, name)
    assert not differ, "\n".join(differ[:20])
