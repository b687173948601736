"""Regenerates the record-mode table of docs/accounting.md ("The PLD currency"): the noise
multiplier of hidden fixed-size batches (``sampling="without_replacement"``, replace-one) by RDP
(Wang, Balle and Kasiviswanathan 2019, record mode's calibration before) and by the PLD currency
(record mode's default), on an Adult-sized silo (n = 11,305, batch 256, 40 epochs = 1,800 rounds,
δ = 1/n²) and a Credit-Card-sized one (n = 7,500, 1,200 rounds).

    python docs/pld_table.py

Columns: the target ε; z by RDP; z by the PLD with an empty ledger; z by the PLD after the silo's
DP histogram of s (the default, ``p_s="dp"`` with 10% of ε by itself), which is what a default
fit uses; the noise reduction of that z against RDP's after the same histogram; the ε the PLD
prices the RDP-calibrated rounds at; the ε RDP prices the PLD-calibrated rounds at.
"""

import math

from pfair import _core
from pfair.privacy.proportions import histogram_noise_multiplier

ROWS = [("Adult", 11305), ("Credit Card", 7500)]
BATCH, EPOCHS, SHARE = 256, 40, 0.1
WOR = "without_replacement"


def main() -> None:
    print("| silo | n | T | ε | z RDP | z PLD | z RDP after histogram | z PLD after histogram | noise std "
          "| PLD ε of the RDP z | RDP ε of the PLD z |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, n in ROWS:
        delta, q = 1.0 / n**2, BATCH / n
        steps = EPOCHS * math.ceil(n / BATCH)
        for eps in (1.0, 3.0, 9.0):
            z_rdp = _core.noise_multiplier_for(eps, delta, q, steps, WOR)
            z_pld = _core.pld_noise_multiplier_for(eps, delta, q, steps, WOR)
            hist = [("full_batch", 1.0, histogram_noise_multiplier(epsilon=eps, share=SHARE, delta=delta), 1)]
            z_rdp_h = _core.ledger_noise_multiplier_after(hist, delta, eps, WOR, q, steps, "best")
            z_pld_h = _core.ledger_noise_multiplier_after(hist, delta, eps, WOR, q, steps, "pld")
            pld_of_rdp = _core.pld_epsilon_for(z_rdp, q, steps, delta, WOR)
            rdp_of_pld = _core.epsilon_for(z_pld, q, steps, delta, WOR)[0]
            print(f"| {name} | {n} | {steps} | {eps:g} | {z_rdp:.2f} | {z_pld:.2f} | {z_rdp_h:.2f} | {z_pld_h:.2f} | "
                  f"{z_pld_h / z_rdp_h - 1:+.0%} | {pld_of_rdp:.3f} | {rdp_of_pld:.2f} |")


if __name__ == "__main__":
    main()
