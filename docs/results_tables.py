"""The generated tables and figures of docs/results.md, from the comparison grid's runs.

    python docs/results_tables.py RESULTS_DIR                         # print the tables
    python docs/results_tables.py RESULTS_DIR --write docs/results.md # and replace its generated blocks

RESULTS_DIR is the ``--out`` of ``examples/paper_grid.sh`` (``python -m pfair.experiments.grid``):
``RESULTS_DIR/paper/<method>/runs.csv`` and ``RESULTS_DIR/fig2/<method>/runs.csv``. Writes
``RESULTS_DIR/<part>/summary.csv``, ``tables.md`` and ``plots/*.png``; with ``--write``, copies
the trade-off figures to ``docs/figures/`` and replaces every ``<!-- generated:NAME -->`` block of
the markdown file (``references``, ``matched``, ``band``, ``verdict``, ``fig2``) with the table
computed from the runs, stamped with the number of runs it came from. Blocks whose runs are
missing say what is pending. Definitions: docs/experiments.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="--out directory of examples/paper_grid.sh")
    parser.add_argument("--write", default=None, help="markdown file whose generated blocks to replace")
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args(argv)
    from pfair.experiments.report import write_report

    paths = write_report(args.results, docs=args.write, plots=not args.no_plots)
    results = Path(args.results)
    for part in ("paper", "fig2"):
        tables = results / part / "tables.md"
        if tables.exists():
            print(tables.read_text())
    if args.write:
        figures = Path(args.write).parent / "figures"
        figures.mkdir(exist_ok=True)
        for png in paths:
            if png.suffix == ".png" and png.name.startswith(("tradeoff_", "heterogeneity_", "silos_")):
                shutil.copy(png, figures / f"grid_{png.name}")
    print("\n".join(str(p) for p in paths), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
