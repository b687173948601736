"""The table of docs/model_selection.md, "Composition or random stopping": the epsilon of a search of k
candidates, each one run of 40 shuffled epochs at the noise that makes one run cost eps0 alone, on a
silo of 11,306 records (an Adult silo of three; delta = 1/n^2), by composition (what the silo's ledger
charges: the server sees every run) and by Papernot and Steinke's random stopping (a geometric number of
runs of mean k, the best released alone).

    python docs/model_selection_accounts.py
"""

from __future__ import annotations

from pfair.privacy.accountant import noise_multiplier_for
from pfair.privacy.calibration import composed_epsilon
from pfair.privacy.ledger import MechanismEvent
from pfair.privacy.tuning import repeat_and_select_epsilon

N, EPOCHS = 11_306, 40
DELTA = 1.0 / N**2
Q = 1024 / N  # a batch of 1,024


def run(eps0: float) -> MechanismEvent:
    steps = EPOCHS * -(-N // 1024)
    z = noise_multiplier_for(epsilon=eps0, delta=DELTA, sample_rate=Q, steps=steps, sampling="shuffle")
    return MechanismEvent(name="steffle_rounds", sampling="shuffle", sample_rate=Q, noise_multiplier=z, steps=steps)


def main() -> None:
    print("| eps0 of one run | k | composition of k runs | random stopping, mean k |")
    print("|---:|---:|---:|---:|")
    for eps0 in (0.25, 0.5, 1.0):
        one = run(eps0)
        for k in (2, 4, 8, 16):
            comp = composed_epsilon([one] * k, DELTA)
            rs = repeat_and_select_epsilon([one], mean=k, shape=1.0, delta=DELTA)
            print(f"| {eps0:g} | {k} | {comp:.2f} | {rs:.2f} |")


if __name__ == "__main__":
    main()
