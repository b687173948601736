r"""The summary table: fairness violation at matched error, and SteFFLe's reduction.

Definitions (also in ``docs/experiments.md``). Throughout, "error" and "violation" (DP or EO,
per the setting's ``fairness``) are means over seeds.

*Selection on validation, reported on test* (``select="validation"``, the default whenever the
runs have a validation split). Every configuration (knob value × tuned hyper-parameters) of a
method has a validation point (error, violation on the validation split carved from the
training data) and a test point. The method's front is chosen on validation alone: the
configurations whose validation error is below the validation trivial error, non-dominated in
(validation error, validation violation). The comparison then reads the *test* violation (and
test error) of exactly those configurations, placed on the axis of their validation error:
below, "error" e means validation error and V_m(e) the test violation of the selected
configurations interpolated along it (a mixture of two selected models chosen on validation
has the mixture's test error and at most the mixture's test violation). No test number
influences which configurations are compared. ``select="test"`` is the same with the test split
in both roles (the protocol of sweeps without a validation split, optimistic: it picks the
luckiest configurations on the numbers it reports).

*Setting.* ``(dataset, fairness, ε, h, N)``. A non-private method (run once with ε = ∞) belongs
to every finite-ε setting of its ``(dataset, fairness, h, N)`` as a reference.

*Points.* For a method in a setting, one point per configuration (knob value × tuned
hyper-parameters): its errors and violations, averaged over the seeds that finished without
error. The front and the curve below are :func:`selected_front`'s (see above).

*Collapsed points.* A point whose error is ``≥ e_triv − margin``, where ``e_triv`` is the error
of the constant majority-class predictor on the test set, is no better than that constant
predictor (which has zero violation and is available to everyone for free); it is left out of
the front. A method all of whose points are collapsed is flagged ``collapsed`` ("collapsed to
the trivial predictor") and not compared. ``margin = 0`` by default, which is exactly "the whole
front has error ≥ the trivial error"; a positive margin asks for error *clearly* below it.

*Front.* The Pareto front P_m of the remaining points: those not dominated by another point
(q dominates p when ``err_q ≤ err_p`` and ``viol_q ≤ viol_p`` with one inequality strict). Sorted
by error, the front's violations strictly decrease.

*Violation at error e* (a non-increasing function):

    V_m(e) = undefined (NaN)                             for e < e_min(m), the front's lowest error,
           = linear interpolation of the front at e      for e_min(m) ≤ e ≤ e_max(m),
           = the front's lowest violation                for e > e_max(m).

The interpolation is achievable: predicting with one of two classifiers chosen at random (with
probabilities t, 1 − t) has error exactly the mixture of their errors and a DP or EO violation
at most the mixture of their violations (each group rate mixes linearly; |·| and max are
convex). Beyond e_max a model with lower error is allowed at e.

*Matched error* of SteFFLe (the ``reference``) and a baseline B: e* = max(e_min(S), e_min(B)),
the lowest error both fronts reach; *reduction* = 1 − V_S(e*) / V_B(e*), the paper's "x% lower
violation at the same accuracy" (positive: SteFFLe's violation is lower). If V_B(e*) = 0 the
reduction is 0 when V_S(e*) = 0 too and −∞ otherwise.

*Reduction over the error range.* The reduction at e* looks at the most accurate end of the
fronts only, where the fairness penalty is weakest. To compare the whole trade-off, the mean
violations over the errors both methods reach below the trivial one,

    V̄_m = (1 / (e_hi − e*)) ∫_{e*}^{e_hi} V_m(e) de,      e_hi = e_triv − margin,

are reported with ``range_reduction`` = 1 − V̄_S / V̄_B (same conventions; NaN when e* = e_hi).
The integral is exact: the V's are piecewise linear.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pandas as pd

from pfair.experiments.methods import FAIRNESS_CHOICES, METHODS
from pfair.experiments.sweep import ANY_FAIRNESS, ANY_SILOS, RENAMED, add_constant_columns, load_runs

__all__ = [
    "SETTING_COLUMNS",
    "SELECTIONS",
    "broadcast",
    "selected_front",
    "has_validation",
    "pareto_mask",
    "front",
    "violation_at",
    "matched_reduction",
    "mean_violation",
    "tradeoff_points",
    "summarize",
    "format_summary",
]

SETTING_COLUMNS = ["dataset", "fairness", "epsilon", "heterogeneity", "silos"]


def pareto_mask(errors: Any, violations: Any) -> np.ndarray:
    """Boolean mask of the non-dominated points when both coordinates are minimised.

    Point p is dominated when another point q has ``err_q ≤ err_p`` and ``viol_q ≤ viol_p`` with
    at least one strict inequality. Exact duplicates do not dominate each other (both are kept).
    NaN points are never on the front."""
    e = np.asarray(errors, dtype=float)
    v = np.asarray(violations, dtype=float)
    if e.shape != v.shape or e.ndim != 1:
        raise ValueError(f"errors and violations must be 1-D of equal length, got {e.shape} and {v.shape}")
    ok = np.isfinite(e) & np.isfinite(v)
    mask = np.zeros(e.shape, dtype=bool)
    for i in np.flatnonzero(ok):
        le = (e[ok] <= e[i]) & (v[ok] <= v[i])
        strict = (e[ok] < e[i]) | (v[ok] < v[i])
        mask[i] = not np.any(le & strict)
    return mask


def front(errors: Any, violations: Any) -> tuple[np.ndarray, np.ndarray]:
    """The Pareto front as ``(errors, violations)`` sorted by increasing error (then strictly
    decreasing violation), duplicates removed."""
    e = np.asarray(errors, dtype=float)
    v = np.asarray(violations, dtype=float)
    m = pareto_mask(e, v)
    pts = sorted(set(zip(e[m].tolist(), v[m].tolist())))
    return np.array([p[0] for p in pts], dtype=float), np.array([p[1] for p in pts], dtype=float)


def violation_at(front_errors: Any, front_violations: Any, error: float) -> float:
    """V(e) of a front (sorted by error, as returned by :func:`front`): NaN below the front's
    lowest error, linear interpolation inside, the lowest violation beyond its highest error."""
    fe = np.asarray(front_errors, dtype=float)
    fv = np.asarray(front_violations, dtype=float)
    if fe.size == 0 or not math.isfinite(error) or error < fe[0]:
        return math.nan
    if error >= fe[-1]:
        return float(fv[-1])
    return float(np.interp(error, fe, fv))


def mean_violation(front_errors: Any, front_violations: Any, lo: float, hi: float) -> float:
    """(1/(hi − lo)) ∫_lo^hi V(e) de for a front's V (:func:`violation_at`); NaN if ``hi <= lo``
    or V is undefined at ``lo``. Exact: V is linear between the front's errors and flat beyond."""
    fe = np.asarray(front_errors, dtype=float)
    if not hi > lo or math.isnan(violation_at(fe, front_violations, lo)):
        return math.nan
    xs = np.unique(np.concatenate([[lo, hi], fe[(fe > lo) & (fe < hi)]]))
    ys = np.array([violation_at(fe, front_violations, x) for x in xs])
    return float(np.sum((ys[1:] + ys[:-1]) * np.diff(xs)) / 2 / (hi - lo))


def _reduction(v_ref: float, v_other: float) -> float:
    """1 − v_ref / v_other; 0 if both are 0, −inf if only ``v_other`` is 0, NaN if either is."""
    if math.isnan(v_ref) or math.isnan(v_other):
        return math.nan
    if v_other > 0:
        return 1.0 - v_ref / v_other
    return 0.0 if v_ref == 0 else -math.inf


def matched_reduction(ref_front: tuple[Any, Any], other_front: tuple[Any, Any],
                      upper_error: float = math.nan) -> dict[str, float]:
    """Compare two fronts (each ``(errors, violations)`` as returned by :func:`front`).

    Returns ``matched_error`` e* = max(lowest errors), ``reference_violation`` V_ref(e*),
    ``violation`` V_other(e*), ``reduction`` = 1 − V_ref(e*)/V_other(e*) (0 if both are 0, −inf
    if only V_other is 0) and, over [e*, ``upper_error``] (normally the trivial error),
    ``reference_mean_violation``, ``mean_violation`` and ``range_reduction`` = 1 − V̄_ref/V̄_other
    (NaN if ``upper_error <= e*`` or is NaN). Everything is NaN when a front is empty."""
    re, rv = (np.asarray(a, dtype=float) for a in ref_front)
    oe, ov = (np.asarray(a, dtype=float) for a in other_front)
    out = dict.fromkeys(("matched_error", "reference_violation", "violation", "reduction",
                         "reference_mean_violation", "mean_violation", "range_reduction"), math.nan)
    if re.size == 0 or oe.size == 0:
        return out
    e_star = float(max(re[0], oe[0]))
    v_ref = violation_at(re, rv, e_star)
    v_oth = violation_at(oe, ov, e_star)
    m_ref = mean_violation(re, rv, e_star, upper_error)
    m_oth = mean_violation(oe, ov, e_star, upper_error)
    out.update(matched_error=e_star, reference_violation=v_ref, violation=v_oth, reduction=_reduction(v_ref, v_oth),
               reference_mean_violation=m_ref, mean_violation=m_oth, range_reduction=_reduction(m_ref, m_oth))
    return out


def _runs(runs: Any) -> pd.DataFrame:
    if isinstance(runs, pd.DataFrame):
        return runs.rename(columns=RENAMED)  # rows of schema ≤ 2 keep working
    if isinstance(runs, (str, os.PathLike)):
        return load_runs(runs)
    if isinstance(runs, (list, tuple)):
        return pd.concat([_runs(r) if isinstance(r, pd.DataFrame) else load_runs(r) for r in runs],
                         ignore_index=True)
    raise TypeError(f"runs must be a DataFrame, the path of a sweep's results or a list of them, "
                    f"got {type(runs).__name__}")


def broadcast(df: pd.DataFrame) -> pd.DataFrame:
    """Rows placed in every setting they belong to: a row with ``fairness = "any"`` (a method
    that ignores the notion) once per notion present for its data set (both if none is), and a
    row with ``heterogeneity = NaN, silos = 0`` (a method that does not use the partition) once
    per (h, N) present for its data set (h = 0, N = 1 if none is)."""
    df = df.copy()
    if "config" not in df.columns:
        df["config"] = ""
    df["config"] = df["config"].fillna("").astype(str)
    parts = [df[(df["fairness"] != ANY_FAIRNESS)]]
    anyf = df[df["fairness"] == ANY_FAIRNESS]
    for ds, grp in anyf.groupby("dataset", sort=False):
        notions = sorted(set(df.loc[(df["dataset"] == ds) & (df["fairness"] != ANY_FAIRNESS), "fairness"]))
        for notion in notions or list(FAIRNESS_CHOICES):
            parts.append(grp.assign(fairness=notion))
    df = pd.concat(parts, ignore_index=True)
    free = df["heterogeneity"].isna() & (df["silos"] == ANY_SILOS)
    parts = [df[~free]]
    for ds, grp in df[free].groupby("dataset", sort=False):
        here = df.loc[(df["dataset"] == ds) & ~free, ["heterogeneity", "silos"]].drop_duplicates()
        pairs = list(here.itertuples(index=False, name=None)) or [(0.0, 1)]
        for h, n in pairs:
            parts.append(grp.assign(heterogeneity=float(h), silos=int(n)))
    return pd.concat(parts, ignore_index=True)


def tradeoff_points(runs: Any) -> pd.DataFrame:
    """Mean and standard deviation over seeds of each (setting, method, knob, config): one row
    per point (rows placed in their settings by :func:`broadcast`).

    Columns: the setting columns, ``method``, ``knob``, ``config``, ``test_error``,
    ``test_error_std``, ``violation``, ``violation_std`` (for the row's ``fairness``),
    ``demographic_parity_difference``, ``equalized_odds_difference``, ``epsilon_spent`` (max over seeds), ``trivial_error``,
    ``val_error``, ``val_violation``, ``val_trivial_error`` (NaN without a validation split),
    ``n_seeds``, ``n_runs``, ``worse_than_constant`` (runs whose test error is at or above the
    constant predictor's) and ``silent_failures`` (those of them no warning of the fit flagged;
    :func:`pfair.experiments.sweep.add_constant_columns`). Rows whose fit raised are left out. Non-private methods keep
    ``epsilon = inf`` here (see :func:`summarize` for their placement in ε settings). Standard
    deviations use ddof = 0."""
    df = _runs(runs)
    if "error" in df.columns:
        df = df[df["error"].fillna("").astype(str) == ""]
    df = broadcast(df)
    unknown = sorted(set(df["fairness"]) - set(FAIRNESS_CHOICES))
    if unknown:
        raise ValueError(f"runs: unknown fairness notions {unknown}; expected {list(FAIRNESS_CHOICES)}")
    eo = df["fairness"] == "equalized_odds"
    df["violation"] = np.where(eo, df["equalized_odds_difference"], df["demographic_parity_difference"])
    for col in ("val_error", "val_demographic_parity_difference", "val_equalized_odds_difference",
                "val_trivial_error"):
        if col not in df.columns:
            df[col] = np.nan
    df["val_violation"] = np.where(eo, df["val_equalized_odds_difference"], df["val_demographic_parity_difference"])

    if "silent_failure" not in df.columns:
        df = add_constant_columns(df)
    keys = SETTING_COLUMNS + ["method", "knob", "config"]
    df["knob"] = df["knob"].fillna(-1.0)  # group NaN knobs together; restored below
    g = df.groupby(keys, sort=True, dropna=False)
    out = g.agg(
        test_error=("test_error", "mean"),
        test_error_std=("test_error", lambda x: float(np.std(x))),
        violation=("violation", "mean"),
        violation_std=("violation", lambda x: float(np.std(x))),
        demographic_parity_difference=("demographic_parity_difference", "mean"),
        equalized_odds_difference=("equalized_odds_difference", "mean"),
        epsilon_spent=("epsilon_spent", "max"),
        trivial_error=("trivial_error", "mean"),
        val_error=("val_error", "mean"),
        val_violation=("val_violation", "mean"),
        val_trivial_error=("val_trivial_error", "mean"),
        n_seeds=("seed", "nunique"),
        n_runs=("seed", "size"),
        worse_than_constant=("worse_than_constant", "sum"),
        silent_failures=("silent_failure", "sum"),
    ).reset_index()
    out.loc[out["knob"] < 0, "knob"] = np.nan
    return out


SELECTIONS = ("validation", "test")


def has_validation(points: pd.DataFrame) -> bool:
    """Whether every point has validation metrics (a sweep with a validation split)."""
    return bool(len(points)) and bool(points[["val_error", "val_violation", "val_trivial_error"]].notna().all().all())


def selected_front(pts: pd.DataFrame, select: str = "validation", margin: float = 0.0) -> pd.DataFrame:
    """The configurations a method's comparison uses, chosen on ``select``'s split, with their
    test numbers.

    ``pts``: one method's points in one setting (rows of :func:`tradeoff_points`). With
    ``select="validation"``: the points whose *validation* error is below the validation trivial
    error − ``margin``, then their Pareto front by (validation error, validation violation).
    With ``select="test"``: the same on the test split (the protocol of schema-1 sweeps, which
    have no validation split). Returns those rows sorted by the selection error, with the
    column ``x`` = the selection error (the axis on which methods are matched) and the test
    metrics ``test_error`` and ``violation`` untouched. Exact duplicates in (x, selection
    violation) keep one row."""
    if select not in SELECTIONS:
        raise ValueError(f"select: {select!r} is not a selection split; choose from {', '.join(SELECTIONS)}")
    if select == "validation":
        err, viol, triv = pts["val_error"], pts["val_violation"], pts["val_trivial_error"]
    else:
        err, viol, triv = pts["test_error"], pts["violation"], pts["trivial_error"]
    usable = (err < triv - margin).to_numpy()
    chosen = pts[usable].copy()
    chosen["x"] = err[usable].to_numpy()
    chosen["_sel_v"] = viol[usable].to_numpy()
    mask = pareto_mask(chosen["x"], chosen["_sel_v"])
    chosen = chosen[mask].sort_values(["x", "_sel_v", "knob", "config"], kind="stable")
    chosen = chosen.drop_duplicates(["x", "_sel_v"], keep="first")
    return chosen.drop(columns="_sel_v").reset_index(drop=True)


def _settings_of(points: pd.DataFrame) -> list[tuple[Any, ...]]:
    """Every (dataset, fairness, ε, h, N): each finite ε present, or ε = inf if none is."""
    settings = []
    for (ds, fair, h, n), grp in points.groupby(["dataset", "fairness", "heterogeneity", "silos"], sort=True):
        finite = sorted(e for e in grp["epsilon"].unique() if math.isfinite(e))
        for eps in finite or [math.inf]:
            settings.append((ds, fair, eps, h, n))
    return settings


def _order(methods: Any) -> list[str]:
    names = list(METHODS)
    return sorted(set(methods), key=lambda m: (names.index(m) if m in names else len(names), m))


def summarize(runs: Any, *, reference: str = "steffle", margin: float = 0.0, select: str = "auto") -> pd.DataFrame:
    """The summary table of a sweep (``runs``: a DataFrame of ``runs.csv`` rows, its path, or a
    list of either).

    ``select``: ``"validation"`` (configurations chosen on the validation split, reported on
    test), ``"test"`` (chosen and reported on test: the older protocol) or ``"auto"``
    (validation when every row has validation metrics, else test). The chosen protocol is in
    the ``selection`` column.

    One row per (setting, method), with the definitions of the module docstring, where a
    method's front is :func:`selected_front` and the error axis is the selection split's error:

    ``dataset, fairness, epsilon, heterogeneity, silos`` — the setting; ``method``;
    ``reference`` — the method compared against (default ``steffle``); ``private``;
    ``selection``; ``trivial_error`` (of the selection split); ``n_points`` (configurations),
    ``n_seeds`` (fewest seeds of a point); ``front_size``; ``min_error`` (the front's lowest
    selection error) and ``min_violation`` (the *test* violation of its last, fairest point);
    ``min_test_error`` (the test error of its first point); ``collapsed`` (no configuration below
    the trivial error − margin); ``matched_error`` e*, ``violation`` V_method(e*) and
    ``reference_violation`` V_ref(e*) (test violations, interpolated along the selection
    error), ``test_error`` and ``reference_test_error`` (their test errors at e*, the same way),
    ``reduction`` 1 − V_ref(e*)/V_method(e*); ``mean_violation``, ``reference_mean_violation``
    and ``range_reduction``, the same for the mean over the band [e*, trivial − margin];
    ``status``: ``compared``, ``reference``, ``collapsed`` (this method), ``reference
    collapsed`` or ``no reference``.

    For the reference's own row, ``matched_error`` is its e_min and ``violation`` V_ref(e_min).
    """
    if margin < 0 or not math.isfinite(margin):
        raise ValueError(f"margin must be >= 0 and finite, got {margin}")
    if select not in SELECTIONS + ("auto",):
        raise ValueError(f"select: {select!r} is not supported; choose from validation, test, auto")
    points = tradeoff_points(runs)
    if select == "auto":
        select = "validation" if has_validation(points) else "test"
    elif select == "validation" and not has_validation(points):
        raise ValueError("select='validation' needs validation metrics in every row; these runs have none "
                         "(a schema-1 sweep or val_fraction=0): use select='test' or rerun with a validation split")
    trivial_col = "val_trivial_error" if select == "validation" else "trivial_error"
    rows = []
    for setting in _settings_of(points):
        ds, fair, eps, h, n = setting
        here = points[(points["dataset"] == ds) & (points["fairness"] == fair) & (points["heterogeneity"] == h)
                      & (points["silos"] == n) & ((points["epsilon"] == eps) | np.isinf(points["epsilon"]))]
        if here.empty:
            continue
        trivial = float(here[trivial_col].mean())
        fronts: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        info: dict[str, dict[str, Any]] = {}
        for method in _order(here["method"]):
            pts = here[here["method"] == method].copy()
            pts[trivial_col] = trivial
            sel = selected_front(pts, select, margin)
            fe, fv, ft = (sel[c].to_numpy(dtype=float) for c in ("x", "violation", "test_error"))
            fronts[method] = (fe, fv, ft)
            spec = METHODS.get(method)
            info[method] = {
                "private": bool(spec.private) if spec else bool(np.isfinite(pts["epsilon"]).all()),
                "n_points": len(pts), "n_seeds": int(pts["n_seeds"].min()), "front_size": len(fe),
                "min_error": float(fe[0]) if len(fe) else math.nan,
                "min_violation": float(fv[-1]) if len(fv) else math.nan,
                "min_test_error": float(ft[0]) if len(ft) else math.nan,
                "collapsed": len(fe) == 0,
                "runs": int(pts["n_runs"].sum()), "worse_than_constant": int(pts["worse_than_constant"].sum()),
                "silent_failures": int(pts["silent_failures"].sum()),
            }
        ref = fronts.get(reference)
        for method, (fe, fv, ft) in fronts.items():
            row: dict[str, Any] = dict(zip(SETTING_COLUMNS, setting))
            row.update(method=method, reference=reference, selection=select, trivial_error=trivial, **info[method])
            cmp = dict.fromkeys(("matched_error", "violation", "reference_violation", "test_error",
                                 "reference_test_error", "reduction", "mean_violation", "reference_mean_violation",
                                 "range_reduction"), math.nan)
            if method == reference:
                status = "collapsed" if info[method]["collapsed"] else "reference"
                if len(fe):
                    cmp.update(matched_error=float(fe[0]), violation=float(fv[0]), reference_violation=float(fv[0]),
                               test_error=float(ft[0]), reference_test_error=float(ft[0]))
            elif info[method]["collapsed"]:
                status = "collapsed"
            elif ref is None:
                status = "no reference"
            elif len(ref[0]) == 0:
                status = "reference collapsed"
            else:
                cmp.update(matched_reduction(ref[:2], (fe, fv), upper_error=trivial - margin))
                e_star = cmp["matched_error"]
                cmp.update(test_error=violation_at(fe, ft, e_star), reference_test_error=violation_at(ref[0], ref[2],
                                                                                                     e_star))
                status = "compared"
            row.update(cmp, status=status)
            rows.append(row)
    columns = SETTING_COLUMNS + ["method", "reference", "private", "selection", "trivial_error", "n_points",
                                 "n_seeds", "front_size", "min_error", "min_test_error", "min_violation", "collapsed",
                                 "matched_error", "violation", "reference_violation", "test_error",
                                 "reference_test_error", "reduction", "mean_violation", "reference_mean_violation",
                                 "range_reduction", "runs", "worse_than_constant", "silent_failures", "status"]
    return pd.DataFrame(rows, columns=columns)


def format_summary(table: pd.DataFrame) -> str:
    """The summary as text: a legend, then one block per setting and one line per method."""
    if table.empty:
        return "no finished runs to summarise\n"
    ref = table["reference"].iloc[0]
    lines = [
        f"Violation V (test) at matched error e* = max(lowest errors of {ref} and the method) on their Pareto "
        f"fronts (chosen and matched on the selection split);",
        f"reduction = 1 - V_{ref}(e*) / V_method(e*) (positive: {ref} is fairer at the same error); mean V and "
        "range reduction:",
        "the same averaged over errors in [e*, trivial error]. Means over seeds; see docs/experiments.md.",
        "",
    ]
    for setting, grp in table.groupby(SETTING_COLUMNS, sort=False):
        ds, fair, eps, h, n = setting
        eps_text = "non-private" if math.isinf(eps) else f"ε = {eps:g}"
        sel = grp["selection"].iloc[0] if "selection" in grp else "test"
        lines.append(f"{ds} · {fair} · {eps_text} · h = {h:g} · N = {n} · trivial {sel} error "
                     f"{grp['trivial_error'].iloc[0]:.4f} · fronts chosen on {sel}, violations on test")
        view = pd.DataFrame({
            "method": grp["method"] + np.where(grp["private"], "", " (non-private)"),
            "points": grp["n_points"],
            "seeds": grp["n_seeds"],
            "min error": grp["min_error"].map(_num),
            "e*": grp["matched_error"].map(_num),
            "test err(e*)": grp["test_error"].map(_num) if "test_error" in grp else "—",
            "V(e*)": grp["violation"].map(_num),
            f"V_{ref}(e*)": grp["reference_violation"].map(_num),
            "reduction": grp["reduction"].map(_pct),
            "mean V": grp["mean_violation"].map(_num),
            f"mean V_{ref}": grp["reference_mean_violation"].map(_num),
            "range reduction": grp["range_reduction"].map(_pct),
            "≥ constant (silent)": [f"{w} ({s})" for w, s in zip(grp["worse_than_constant"], grp["silent_failures"])],
            "status": grp["status"].replace({"collapsed": "collapsed to the trivial predictor"}),
        })
        lines.append(view.to_string(index=False))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _num(v: float) -> str:
    return "—" if not np.isfinite(v) else f"{v:.4f}"


def _pct(v: float) -> str:
    if np.isnan(v):
        return "—"
    if np.isinf(v):
        return "-inf"
    return f"{100 * v:+.1f}%"
