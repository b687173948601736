"""The private batch cap at 16,384 instead of 8,192: the acceptance's criteria side by side.

``batch_size="auto"`` takes for a private fit's noisy rounds the smaller of
``pfair.settings.AUTO_BATCH_PRIVATE`` (8,192) and a silo's training records, and stretches the run
to it (docs/optimisation.md, "A private fit's run length"). On the protocol's splits a cap of 16,384
scored within the standard error of 8,192 (``run_length.py --caps 16384``); this script reads the
acceptance's 378 private fits twice and prints the acceptance's summary and its private (table, λ)
counts for each, with the non-private fits as they are:

* today's cap: ``convergence_runs.csv``;
* 16,384: ``convergence_runs_cap_16384.csv``, made by ``convergence.py --private-only --cap 16384
  --no-eg --runs convergence_runs_cap_16384.csv`` (only the tables whose silos hold more than 8,192
  training records change: Adult and the three synthetic tables);

and the mean test error and violation per λ on those four tables. Printout: ``private_cap_log.txt``.

    python docs/optimisation/private_cap.py          # the comparison from the CSVs
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import convergence as cv  # noqa: E402


VARIANTS = (("cap 8,192 (today)", None), ("cap 16,384", "convergence_runs_cap_16384.csv"))


def main() -> None:
    cv.compare_variants(VARIANTS, ["adult", "synthetic1", "synthetic2", "synthetic3"])


if __name__ == "__main__":
    main()
