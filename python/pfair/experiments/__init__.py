"""Experiments: parameter sweeps over methods and settings, trade-off plots and a summary table.

The three steps of checking the paper's claim (SteFFLe has a lower fairness violation than the
baselines at the same accuracy, at every privacy level and heterogeneity) on real data::

    from pfair.experiments import run_sweep, summarize, plot_results
    run_sweep("results", methods=["steffle", "pfld", "fedavg"], datasets="adult",
              epsilons=[1, 3, 9], heterogeneities=[0, 0.75], silos=[3], lams="0:2:11", seeds=15)
    print(summarize("results"))        # violation at matched test error, reduction vs each baseline
    plot_results("results")            # results/plots/*.png and *.svg

or ``pfair sweep ...``, ``pfair summary results/``, ``pfair plot results/``. Modules:
:mod:`~pfair.experiments.methods` (the registry of methods and their knobs),
:mod:`~pfair.experiments.sweep` (grid, parallel runner, resume, CSV),
:mod:`~pfair.experiments.summary` (selection on validation, Pareto fronts, interpolation, the
table), :mod:`~pfair.experiments.plots`, :mod:`~pfair.experiments.reference` (fairlearn's
ExponentiatedGradient as a non-private reference), :mod:`~pfair.experiments.grid` (the
comparison grid of ``docs/results.md`` as data, ``python -m pfair.experiments.grid``) and
:mod:`~pfair.experiments.report` (its tables). ``docs/experiments.md`` documents the CSV, the
protocol and the definitions.
"""

from pfair.experiments.methods import METHODS, MethodSpec
from pfair.experiments.plots import plot_results  # matplotlib is imported only when drawing
from pfair.experiments.summary import format_summary, summarize, tradeoff_points
from pfair.experiments.sweep import SweepResult, expand_grid, load_runs, parse_values, run_sweep

__all__ = [
    "METHODS",
    "MethodSpec",
    "SweepResult",
    "expand_grid",
    "format_summary",
    "load_runs",
    "parse_values",
    "plot_results",
    "run_sweep",
    "summarize",
    "tradeoff_points",
]
