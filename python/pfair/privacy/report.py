"""`PrivacyReport`: the per-silo privacy report as a DataFrame that prints in full.

``print(df)`` of a plain DataFrame with ~25 columns elides the middle ones as ``...`` (pandas'
``display.max_columns``), and the hidden ones are exactly those a reader needs to judge the
guarantee (``accounting``, ``noise``, ``guarantee``).  `PrivacyReport` is a DataFrame whose text
form is always the whole table, and `PrivacyReport.explain` says what each column means.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

__all__ = ["FullTable", "PrivacyReport", "REPORT_COLUMN_MEANINGS"]

#: One line per column of ``SteFFLe.privacy_report_`` (see docs/privacy.md, "The privacy report").
REPORT_COLUMN_MEANINGS: dict[str, str] = {
    "n_records": "records the silo trains on (n_j; its records less the held-out share)",
    "n_held_out": "records the silo holds out to validate the models (validation_share); they set delta "
                  "with the others, and their validation tables are released at the checkpoints",
    "sampling": "how the silo draws its batch each round",
    "sample_rate": "q, the chance that a training record is in a round's batch (m / n_j)",
    "steps": "rounds the silo answers (T), over which the budget is spread",
    "denominator": "the fixed divisor m of the silo's batch means",
    "sensitivity_loss": "replace-one sensitivity of the loss-gradient part (0: sent without noise)",
    "sensitivity_theta": "replace-one sensitivity of the s-dependent theta part (with clip='adaptive': per unit "
                         "of clip norm, each round's is 2 C_t / m)",
    "sensitivity_w": "replace-one sensitivity of the W (fairness adversary) part (with w_rows: per unit of "
                     "p(r|b)^(-1/2), 2 sqrt(2) / m)",
    "noise_multiplier": "z = noise std / sensitivity of the joint Gaussian mechanism (inf: nothing "
                        "sent depends on the protected data)",
    "sigma_loss": "noise std actually added to the loss-gradient part",
    "sigma_theta": "noise std actually added to the theta part (with clip='adaptive': per unit of clip norm, "
                   "each round adds sigma_theta * C_t for its clip C_t)",
    "sigma_w": "noise std actually added to the W part (with w_rows: per unit of p(r|b)^(-1/2); row (b, r) "
               "of the W part gets sigma_w * p(r|b)^(-1/2))",
    "w_rows": "whether the W part's noise is scaled row by row, each group's row by its own p(r|b)^(-1/2) "
              "(attribute mode), instead of one std on every row",
    "target_epsilon": "the silo's budget epsilon (what you asked for)",
    "delta": "the silo's delta (default 1/n^2, n = every record the silo holds)",
    "epsilon": "epsilon of the silo's earlier spending plus every planned round of this fit",
    "epsilon_spent": "epsilon the silo's ledger has recorded, over every fit on its data",
    "accounting": "how the rounds are priced: shuffle (every record once per epoch, the batch is visible; "
                  "one Gaussian release per epoch, exact), public_batch (random visible batches; exact "
                  "binomial mixture or RDP, whichever is smaller), without_replacement / poisson_replace_one "
                  "(hidden batch: PLD of its dominating pair with calibration pld, else RDP), full_batch",
    "calibration": "rdp (numeric accountant), pld (PLD of hidden batches, run charged when planned) or paper (the "
                   "paper's closed form)",
    "protect": "what a neighbouring data set changes: one record's sensitive attribute, or a whole record",
    "sends_psi": "whether the silo sends the fairness term's parts at all (False when lam = 0)",
    "p_s": "where the group proportions came from: given (the user's, public), dp (a private histogram, "
           "charged) or pooled (exact data: outside the guarantee)",
    "noise": "secret (drawn from the operating system) or reproducible (a known noise_seed)",
    "guarantee": "covered, or not covered and why (a known noise seed, pooled p_s), or none",
    "sigma_counts": "noise std added to each cell of the silo's score histogram (PrivateThresholdOptimizer)",
    "epsilon_release": "epsilon of the score histogram release alone, at the silo's delta",
}


class FullTable(pd.DataFrame):
    """A DataFrame whose ``print`` shows every row and column: ``str`` and ``repr`` are
    ``to_string()`` with floats to 4 significant digits, whatever ``pandas.options.display``
    says; everything else is a plain DataFrame. Base of the reports pfair returns."""

    _metadata: list[str] = []

    @property
    def _constructor(self) -> Any:
        return type(self)

    def __repr__(self) -> str:
        return self.to_string(float_format=lambda v: f"{v:.4g}")

    __str__ = __repr__


class PrivacyReport(FullTable):
    """A privacy report (one row per silo) whose ``print`` shows every column (:class:`FullTable`)."""

    def explain(self) -> pd.DataFrame:
        """One row per column of the report: its value(s) across silos (floats to 4 significant
        digits) and its meaning.  Print it with ``.to_string()`` to see whole sentences."""
        rows = []
        for column in self.columns:
            col = self[column]
            numeric = pd.api.types.is_float_dtype(col)
            values = pd.unique(col.map(lambda v: f"{v:.4g}") if numeric else col.astype(str))
            shown = values[0] if len(values) == 1 else ", ".join(values[:4]) + (" ..." if len(values) > 4 else "")
            rows.append({"column": column, "value": shown,
                         "meaning": REPORT_COLUMN_MEANINGS.get(column, "")})
        return pd.DataFrame(rows).set_index("column")
