"""The run engine returns what it returned before the run assembly moved, but for the last digits
of its floats, which move with the CPU (``REL`` below; ``tests/engine_pins.py`` says how
``tests/data/engine_pins.json`` was made, and from which commit): θ, W, the privacy report, the
history and the checkpoints of a standard, non-private, record-mode, target, hybrid (three
topologies, one with DP proportions), resumed (both protections), warm-started and party-loop
run."""

from __future__ import annotations

import json

import pytest

from engine_pins import PINS, RUNS, run, same

PINNED = json.loads(PINS.read_text())["runs"]
# The pins hold the bits one machine wrote (under NumPy 2, as .venv has). Their last digits depend
# on the machine as well as on the code: NumPy picks its SIMD loops (exp, log, power, reductions)
# and OpenBLAS its dot kernel for the CPU at run time, and NumPy 1.x (the lower end of pfair's
# range, make test-lowest) rounds some reductions differently. Seen: on an AMD EPYC host (NumPy's
# X86_V3 loops, OpenBLAS's Haswell kernel) against the Intel Xeon that wrote the pins, the
# history's norms and one entry of a hybrid run's W_ moved by one unit in the last place; under
# NumPy 1.26.0 the history's norms and losses, W_ and θ_ by at most 2.7e-15 relative. So floats
# are compared to 1e-12 relative (1e-12 absolute near 0): a changed release, key stream or charge
# moves them by far more (noise of scale σ). Two commits on one machine are compared to the bit by
# tools/same_bits.py.
REL = 1e-12


def test_every_run_is_pinned():
    assert sorted(PINNED) == sorted(RUNS)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_run_gives_the_pinned_values(name):
    got, pinned = run(name), PINNED[name]
    # Attributes a fit gained since (e.g. n_rounds_ of a hybrid fit) are new, not changed.
    assert set(pinned) <= set(got), sorted(set(pinned) - set(got))
    differ = same({k: got[k] for k in pinned}, pinned, name, rel=REL)
    assert not differ, "\n".join(differ[:20])
