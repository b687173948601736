"""Regenerates the calibration table of docs/accounting.md.

    python docs/accounting_table.py

For each silo size n (Adult 12,211; Credit Card 7,500), batch 256, 40 epochs, δ = 1/n², clip 1,
p_s = (0.33, 0.67), and ε ∈ {1, 3, 9}:

* the numeric calibration z that SteFFLe uses (attribute mode: the ``public_batch`` bound, since
  the exact s-free parts reveal the batch), the ε it delivers and its noise stds
  (σ_θ = √2 z Δ_θ, σ_W = √2 z Δ_W: z split evenly over the two parts);
* for comparison, the z a hidden-batch bound (WBK 2019, sampling without replacement) would
  claim is enough, and the ε it really delivers under ``public_batch``;
* the paper's closed form (Gupta et al. 2024, Thm. 3.3) priced with the exact sensitivities: its z and the
  ε it delivers under ``public_batch``.
"""

import math

from pfair.privacy import epsilon_for, noise_multiplier_for, paper_delivered_epsilon

ROWS = [("Adult", 12211), ("Credit Card", 7500)]
BATCH, EPOCHS, CLIP, PS = 256, 40, 1.0, (0.33, 0.67)


def main() -> None:
    print("| silo | n | ε target | δ | T | z (public batch) | σ_θ | σ_W | ε delivered | z (hidden-batch claim) "
          "| its true ε | paper z | paper true ε |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, n in ROWS:
        delta = 1.0 / n**2
        steps = EPOCHS * math.ceil(n / BATCH)
        q = BATCH / n
        d_theta = 2 * CLIP / BATCH
        d_w = (2 / BATCH) * math.sqrt(1 / PS[0] + 1 / PS[1])
        for eps in (1.0, 3.0, 9.0):
            kw = dict(sample_rate=q, steps=steps)
            z = noise_multiplier_for(epsilon=eps, delta=delta, sampling="public_batch", **kw)
            got = epsilon_for(noise_multiplier=z, delta=delta, sampling="public_batch", **kw)
            z_hidden = noise_multiplier_for(epsilon=eps, delta=delta, sampling="without_replacement", **kw)
            true_hidden = epsilon_for(noise_multiplier=z_hidden, delta=delta, sampling="public_batch", **kw)
            p = paper_delivered_epsilon(epsilon=eps, delta=delta, n=n, batch=BATCH, epochs=EPOCHS, clip=CLIP,
                                        group_proportions=PS)
            print(
                f"| {name} | {n} | {eps:g} | {delta:.2e} | {steps} | {z:.3f} | {math.sqrt(2) * z * d_theta:.4f} | "
                f"{math.sqrt(2) * z * d_w:.4f} | {got:.3f} | {z_hidden:.3f} | {true_hidden:.3f} | "
                f"{p['noise_multiplier']:.3f} | {p['delivered_epsilon']:.3f} |"
            )


if __name__ == "__main__":
    main()
