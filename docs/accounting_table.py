"""Regenerates the calibration table of docs/accounting.md.

    python docs/accounting_table.py

For each silo size n (Adult 12,211; Credit Card 7,500), batch 256, 40 epochs, δ = 1/n², WOR
sampling, clip 1, p_s = (0.33, 0.67), and ε ∈ {1, 3, 9}: the numeric calibration z and the ε it
delivers, and the paper's closed form (seed 003 Thm. 3.3) priced with the exact sensitivities.
Numeric mode splits z evenly over the two parts: σ_θ = √2 z Δ_θ, σ_W = √2 z Δ_W.
"""

import math

from pfair.privacy import epsilon_for, noise_multiplier_for, paper_delivered_epsilon

ROWS = [("Adult", 12211), ("Credit Card", 7500)]
BATCH, EPOCHS, CLIP, PS = 256, 40, 1.0, (0.33, 0.67)


def main() -> None:
    print("| silo | n | ε target | δ | T | numeric z | numeric σ_θ | numeric σ_W | numeric ε | paper σ_θ = σ_W | paper z | paper delivered ε |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, n in ROWS:
        delta = 1.0 / n**2
        steps = EPOCHS * math.ceil(n / BATCH)
        q = BATCH / n
        d_theta = 2 * CLIP / BATCH
        d_w = (2 / BATCH) * math.sqrt(1 / PS[0] + 1 / PS[1])
        for eps in (1.0, 3.0, 9.0):
            z = noise_multiplier_for(epsilon=eps, delta=delta, sample_rate=q, steps=steps)
            got = epsilon_for(noise_multiplier=z, sample_rate=q, steps=steps, delta=delta)
            p = paper_delivered_epsilon(epsilon=eps, delta=delta, n=n, batch=BATCH, epochs=EPOCHS, clip=CLIP, group_proportions=PS)
            print(
                f"| {name} | {n} | {eps:g} | {delta:.2e} | {steps} | {z:.3f} | {math.sqrt(2) * z * d_theta:.4f} | "
                f"{math.sqrt(2) * z * d_w:.4f} | {got:.3f} | {p['sigma_w']:.4f} | {p['noise_multiplier']:.3f} | "
                f"{p['delivered_epsilon']:.3f} |"
            )


if __name__ == "__main__":
    main()
