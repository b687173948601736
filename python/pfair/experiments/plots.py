"""Figures of a sweep: trade-off curves per setting, and the heterogeneity and silo-count sweeps.

Every panel plots test error (y) against the test violation (x) of the sweep's notion. Every
configuration (knob value × tuned hyper-parameters) is a faint dot, the mean over seeds; the
configurations the summary compares (:func:`pfair.experiments.summary.selected_front`, chosen on
the validation split when the runs have one) are drawn at their test coordinates with ±1
standard deviation (over seeds) error bars on both axes, joined in order of selection error.
Every panel draws the trivial error (the constant majority-class predictor on the test set) as
a horizontal line: a point on or above it is no better than predicting one class for everyone.

* ``tradeoff_<dataset>_<fairness>_N<silos>``: one panel per (h, ε), one colour per method, the
  selected fronts bold. Non-private methods (ε = ∞) appear in every ε panel, dashed.
* ``heterogeneity_<dataset>_<fairness>_<method>_eps<ε>_N<silos>`` (Gupta et al. 2024, Fig. 2): the
  reference method's trade-off curves coloured by h, at one ε (default 1), when the sweep has at
  least two values of h.
* ``silos_<dataset>_<fairness>_<method>_eps<ε>``: the same coloured by the number of silos N, one
  panel per h (the paper shows h = 0 and h = 0.75), when the sweep has at least two values of N.

``<dataset>`` in a file name is :func:`dataset_slug` of the data set's name: a bundled data set's
name as it is (``adult``), a user CSV's spec (``csv:PATH?label=..``) as the file's stem and a short
hash of the whole spec (``loans-<8 hex digits>``), so that no path separator or shell-special character
reaches a file name and two specs of one file do not overwrite each other's figures.

Figures are drawn with matplotlib's Agg canvas (no display needed) and saved as PNG and SVG.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import parse_qs

import numpy as np
import pandas as pd

from pfair.experiments.methods import METHODS
from pfair.experiments.summary import has_validation, selected_front, tradeoff_points
from pfair.experiments.sweep import load_runs

__all__ = ["plot_results", "dataset_slug", "METHOD_COLOURS"]

#: One colour per method, fixed so that figures are comparable.
METHOD_COLOURS: dict[str, str] = {
    "steffle": "#d62728", "pfld": "#1f77b4", "fedavg": "#7f7f7f", "central_erm": "#17becf",
    "fermi": "#2ca02c", "dp_fermi": "#9467bd", "nonprivate_steffle": "#ff7f0e", "single_shot": "#8c564b",
}

_VIOLATION_LABEL = {"demographic_parity": "demographic parity violation",
                    "equalized_odds": "equalized odds violation"}


#: What to run when matplotlib is missing: right for a pip install and for a source checkout.
MATPLOTLIB_HINT = ("plots need matplotlib: pip install matplotlib (the same as the plot extra: "
                   "pip install 'pfair[plot]' for an installed pfair, pip install -e '.[plot]' in a source checkout)")


#: Characters a figure's file name may hold; anything else in a data set's name is replaced.
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
#: Longest stem kept from a CSV's file name (the hash keeps names unique).
_MAX_STEM = 40


def dataset_title(name: str, width: int = 60) -> str:
    """A data set's name as a figure title shows it: a csv spec
    (``csv:/data/long/path/loans.csv?label=default&sensitive=sex``) as the file's name and its label
    and sensitive columns, ``loans.csv (label default, sensitive sex)``, which fits above a panel;
    any other name as it is, shortened to ``width`` characters with an ellipsis."""
    name = str(name)
    if name.startswith("csv:"):
        path, _, query = name[4:].partition("?")
        params = {k: v[0] for k, v in parse_qs(query).items()}
        cols = ", ".join(f"{k} {params[k]}" for k in ("label", "sensitive") if k in params)
        name = os.path.basename(path.replace("\\", "/").rstrip("/")) + (f" ({cols})" if cols else "")
    return name if len(name) <= width else name[:width - 1] + "…"


def dataset_slug(name: str) -> str:
    """A data set's name as a part of a file name: letters, digits, ``_``, ``-`` and ``.`` only.

    A name made of those already (every bundled data set: ``adult``, ``credit_card``) is returned
    unchanged. A csv spec (``csv:/data/loans.csv?label=default&sensitive=sex``, see
    :func:`pfair.datasets.csv_spec`) becomes the CSV's stem and the first 8 hex digits of the
    SHA-256 of the whole spec, ``loans-0581f23f``: readable, and distinct for two specs of the
    same file. Any other name is cleaned the same way, with the hash of the original name."""
    name = str(name)
    if name and _SAFE.search(name) is None and name[0] not in ".-":
        return name
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:8]
    stem = name
    if name.startswith("csv:"):
        path = name[4:].partition("?")[0]
        stem = os.path.splitext(os.path.basename(path.replace("\\", "/").rstrip("/")))[0]
    stem = _SAFE.sub("_", stem).strip("._-")[:_MAX_STEM].strip("._-")
    return f"{stem}-{digest}" if stem else f"dataset-{digest}"


def _matplotlib() -> Any:
    try:  # lazy: matplotlib is an optional extra (pfair[plot])
        import matplotlib
    except ImportError:  # pragma: no cover - matplotlib is in the test extra
        raise ImportError(MATPLOTLIB_HINT) from None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    return matplotlib, Figure, FigureCanvasAgg


def _new_figure(n_rows: int, n_cols: int, width: float = 4.6, height: float = 3.6) -> tuple[Any, np.ndarray]:
    _, Figure, FigureCanvasAgg = _matplotlib()
    fig = Figure(figsize=(width * n_cols + 1.2, height * n_rows + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = np.asarray(fig.subplots(n_rows, n_cols, squeeze=False))
    return fig, axes


def _save(fig: Any, out: Path, stem: str, formats: Sequence[str]) -> list[Path]:
    paths = []
    for fmt in formats:
        path = out / f"{stem}.{fmt}"
        fig.savefig(path, format=fmt, dpi=130)
        paths.append(path)
    return paths


def _trivial_line(ax: Any, trivial: float) -> None:
    ax.axhline(trivial, color="black", linestyle=":", linewidth=1.2, label=f"trivial error {trivial:.3f}", zorder=1)


def _curve(ax: Any, pts: pd.DataFrame, colour: Any, label: str, dashed: bool, select: str,
           highlight_front: bool, margin: float = 0.0) -> None:
    """One method's (or one setting's) configurations: every point faint, and the configurations
    its comparison uses (:func:`~pfair.experiments.summary.selected_front`, chosen on ``select``'s
    split) at their *test* coordinates with ±1 std error bars, joined in order of selection
    error (bold when ``highlight_front``)."""
    style = "--" if dashed else "-"
    ax.scatter(pts["violation"], pts["test_error"], color=colour, s=7, alpha=0.3, zorder=1, linewidths=0)
    sel = selected_front(pts, select, margin)
    if not len(sel):
        ax.plot([], [], color=colour, linestyle=style, label=f"{label} (collapsed)")
        return
    x, y = sel["violation"].to_numpy(), sel["test_error"].to_numpy()
    ax.errorbar(x, y, xerr=sel["violation_std"].to_numpy(), yerr=sel["test_error_std"].to_numpy(), color=colour,
                linestyle=style, linewidth=2.2 if highlight_front else 1.1, marker="o",
                markersize=5 if highlight_front else 3.5, elinewidth=0.7, capsize=2, label=label, zorder=3,
                markeredgecolor="black" if highlight_front else colour, markeredgewidth=0.5)


def _panel_title(eps: float, h: float, n: int) -> str:
    eps_text = "non-private" if math.isinf(eps) else f"ε = {eps:g}"
    return f"{eps_text}, h = {h:g}, N = {n}"


def _finish(ax: Any, fairness: str, legend: bool = True) -> None:
    ax.set_xlabel(_VIOLATION_LABEL.get(fairness, "violation"))
    ax.set_ylabel("test error")
    ax.grid(True, linewidth=0.3, alpha=0.5)
    if legend:
        ax.legend(fontsize=7, loc="best")


def _figure_legend(fig: Any, axes: np.ndarray) -> None:
    """One legend below the panels, with every label of every panel once."""
    seen: dict[str, Any] = {}
    for ax in axes.ravel():
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncols=min(4, max(1, len(seen))),
               fontsize=8, frameon=False)


def _tradeoff_figures(points: pd.DataFrame, out: Path, formats: Sequence[str], select: str,
                      margin: float = 0.0) -> list[Path]:
    paths = []
    for (ds, fair, n), grp in points.groupby(["dataset", "fairness", "silos"], sort=True):
        hs = sorted(grp["heterogeneity"].unique())
        finite = sorted(e for e in grp["epsilon"].unique() if math.isfinite(e))
        eps_cols = finite or [math.inf]
        fig, axes = _new_figure(len(hs), len(eps_cols))
        for i, h in enumerate(hs):
            for j, eps in enumerate(eps_cols):
                ax = axes[i, j]
                here = grp[(grp["heterogeneity"] == h) & ((grp["epsilon"] == eps) | np.isinf(grp["epsilon"]))]
                trivial = float(here["trivial_error"].mean()) if len(here) else math.nan
                val_trivial = float(here["val_trivial_error"].mean()) if len(here) else math.nan
                for method in [m for m in METHODS if m in set(here["method"])] + sorted(
                        set(here["method"]) - set(METHODS)):
                    pts = here[here["method"] == method]
                    spec = METHODS.get(method)
                    private = spec.private if spec else bool(np.isfinite(pts["epsilon"]).all())
                    label = method if private else f"{method} (non-private)"
                    # the summary's trivial errors: one per panel (setting), whatever the method's seeds
                    pts = pts.assign(val_trivial_error=val_trivial, trivial_error=trivial)
                    _curve(ax, pts, METHOD_COLOURS.get(method, "#333333"), label, not private, select, True,
                           margin)
                if math.isfinite(trivial):
                    _trivial_line(ax, trivial)
                ax.set_title(_panel_title(eps, h, n), fontsize=10)
                _finish(ax, fair, legend=False)
        _figure_legend(fig, axes)
        # Two lines, so that a one-panel figure does not clip the title.
        fig.suptitle(f"{dataset_title(ds)}: {fair.replace('_', ' ')} trade-off, test numbers (mean ± std over seeds)\n"
                     f"faint: every configuration; bold: the front chosen on the {select} split", fontsize=11)
        paths += _save(fig, out, f"tradeoff_{dataset_slug(ds)}_{fair}_N{n}", formats)
    return paths


def _coloured_curves(ax: Any, pts: pd.DataFrame, by: str, fairness: str, trivial: float, label: str,
                     select: str, margin: float = 0.0) -> None:
    """One curve per value of ``by``, coloured along viridis from its smallest to its largest value."""
    matplotlib, _, _ = _matplotlib()
    values = sorted(pts[by].unique())
    cmap = matplotlib.colormaps["viridis"]
    span = max(values) - min(values)
    for v in values:
        colour = cmap(0.9 * (v - min(values)) / span if span > 0 else 0.0)
        _curve(ax, pts[pts[by] == v], colour, f"{label} = {v:g}", False, select, False, margin)
    _trivial_line(ax, trivial)
    _finish(ax, fairness)


def _pick_epsilon(eps_values: Sequence[float], wanted: float) -> float | None:
    return wanted if wanted in eps_values else None


def _sweep_figures(points: pd.DataFrame, out: Path, formats: Sequence[str], method: str,
                   epsilon: float, select: str, margin: float = 0.0) -> list[Path]:
    paths = []
    pts_m = points[points["method"] == method]
    eps_text = "inf" if math.isinf(epsilon) else f"{epsilon:g}"
    for (ds, fair), grp in pts_m.groupby(["dataset", "fairness"], sort=True):
        eps = _pick_epsilon(list(grp["epsilon"].unique()), epsilon)
        if eps is None:
            continue
        grp = grp[grp["epsilon"] == eps]
        trivial = float(grp["trivial_error"].mean())
        for n, by_n in grp.groupby("silos", sort=True):
            if by_n["heterogeneity"].nunique() < 2:
                continue
            fig, axes = _new_figure(1, 1, width=5.6, height=4.2)
            _coloured_curves(axes[0, 0], by_n, "heterogeneity", fair, trivial, "h", select, margin)
            axes[0, 0].set_title(f"{dataset_title(ds, 30)}: {method}, ε = {eps:g}, N = {n}, by heterogeneity h",
                                 fontsize=10)
            paths += _save(fig, out, f"heterogeneity_{dataset_slug(ds)}_{fair}_{method}_eps{eps_text}_N{n}", formats)
        hs = [h for h, by_h in grp.groupby("heterogeneity", sort=True) if by_h["silos"].nunique() >= 2]
        if hs:
            fig, axes = _new_figure(1, len(hs), width=5.6, height=4.2)
            for ax, h in zip(axes[0], hs):
                _coloured_curves(ax, grp[grp["heterogeneity"] == h], "silos", fair, trivial, "N", select, margin)
                ax.set_title(f"{dataset_title(ds, 30)}: {method}, ε = {eps:g}, h = {h:g}, by number of silos N",
                             fontsize=10)
            paths += _save(fig, out, f"silos_{dataset_slug(ds)}_{fair}_{method}_eps{eps_text}", formats)
    return paths


def plot_results(path: str | os.PathLike | Sequence[str | os.PathLike], *, out: str | os.PathLike | None = None,
                 formats: Sequence[str] = ("png", "svg"), method: str = "steffle", epsilon: float = 1.0,
                 select: str = "auto", margin: float = 0.0) -> list[Path]:
    """Draw every figure of the sweep in ``path`` (a results directory or its ``runs.csv``, or a
    list of them, drawn together).

    ``out``: where to save (default ``<results>/plots``, of the first path). ``formats``: file
    types (PNG and SVG). ``method``, ``epsilon``: whose curves and which ε the heterogeneity and
    silo-count figures show (default SteFFLe at ε = 1, the paper's Fig. 2). ``select``: the split
    the drawn fronts are chosen on (``validation``, ``test``; ``auto``: validation when the runs
    have it). ``margin``: points with selection error ≥ trivial − margin are left out of the
    drawn fronts, as in :func:`~pfair.experiments.summary.summarize`. Returns the paths written."""
    paths_in = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    if not paths_in:
        raise ValueError("path: no results directory given")
    runs = pd.concat([load_runs(p) for p in paths_in], ignore_index=True)
    points = tradeoff_points(runs)
    src = Path(paths_in[0])
    if points.empty:
        raise ValueError(f"path: {src} has no finished runs to plot")
    if select == "auto":
        select = "validation" if has_validation(points) else "test"
    results_dir = src if src.is_dir() else src.parent
    out_dir = Path(out) if out is not None else results_dir / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = _tradeoff_figures(points, out_dir, formats, select, margin)
    paths += _sweep_figures(points, out_dir, formats, method, float(epsilon), select, margin)
    return paths
