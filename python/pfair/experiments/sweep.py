"""Sweeps: expand a grid into cells, run them in parallel, append one CSV row per cell, resume.

A *cell* is one fit: ``(method, dataset, fairness, epsilon, heterogeneity, silos, knob, seed)``.
:func:`expand_grid` builds the cells of the Cartesian product of the grid's axes with two
collapses that avoid running the same fit twice:

* a method without a knob (``fedavg``, ``central_erm``) runs once per other grid point, with
  ``knob = NaN``, instead of once per knob value;
* a method that is not private (``fedavg``, ``central_erm``, ``fermi``, ``nonprivate_steffle``,
  ``single_shot``) runs once with ``epsilon = inf`` instead of once per ε (summaries and plots
  show it in every ε panel as a reference).

The seed drives everything random in a cell: the partition into silos
(:meth:`pfair.Federation.for_dataset`, sorted by age where the data set has it), the batches,
the noise (passed as ``noise_seed``: a sweep is a simulation by one analyst, and its reproducible
noise is not a deployment's secret noise — the ``noise`` column of ``runs.csv`` says so) and any
random initialisation. Metrics are measured on the data set's fixed test
split. So a cell's row depends only on its key and on the sweep's fixed settings (epochs, batch
size, hyper-parameter overrides), which ``sweep.json`` records next to ``runs.csv``: resuming
into a directory whose settings differ is refused, and cells whose key is already in
``runs.csv`` are skipped. The data set and the fairness notion are part of the key, so one
directory may hold sweeps of several data sets and notions without mixing their rows.

The parent process appends each finished row to ``runs.csv`` at once (and flushes), so an
interrupted sweep keeps everything that finished. Workers are separate processes (spawned, so no
Rust thread pool is forked) with ``RAYON_NUM_THREADS=1`` and single-threaded BLAS, one per core,
each loading every data set once.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import inspect
import json
import math
import multiprocessing
import os
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

# pfair.datasets and pfair.estimators are imported inside the functions that run cells: this module
# loads at every `pfair` start (the sweep parser's choices), which loads no scikit-learn.
from pfair import __version__, metrics
from pfair._progress import progress_bar
from pfair.experiments.methods import FAIRNESS_CHOICES, METHODS, check_methods, get_method, violation_column
from pfair.exceptions import ConvergenceWarning
from pfair.federation import Federation
from pfair.settings import SteFFLeSettings
from pfair.validation import training_sizes as silo_training_sizes

__all__ = [
    "Cell", "SweepResult", "COLUMNS", "KEY_COLUMNS", "RUNS_FILE", "SETTINGS_FILE",
    "expand_grid", "parse_values", "run_cell", "run_sweep", "load_runs", "cell_key", "parse_params",
    "format_config", "parse_config", "validation_indices", "split_validation", "VAL_FRACTION", "ANY_FAIRNESS",
    "ANY_SILOS",
]

RUNS_FILE = "runs.csv"
SETTINGS_FILE = "sweep.json"
#: Version of the ``runs.csv`` schema. 1: no ``config`` key, no validation columns (read back
#: with ``config = ""`` and NaN validation metrics); 2: both; 3: fairlearn's metric names
#: (``demographic_parity_difference`` for 2's ``dp_violation``, and so on: :data:`RENAMED`).
SCHEMA = 3

#: Columns of schema ≤ 2 and their names since schema 3 (fairlearn's vocabulary). Older files
#: are read with the new names, and a resumed sweep rewrites their header first.
RENAMED = {"dp_violation": "demographic_parity_difference", "eo_violation": "equalized_odds_difference",
           "val_dp_violation": "val_demographic_parity_difference",
           "val_eo_violation": "val_equalized_odds_difference"}

#: Fraction of each data set's training split held out as the validation split (default).
VAL_FRACTION = 0.2

#: ``fairness`` of a method that ignores the notion (run once, measured on both notions).
ANY_FAIRNESS = "any"
#: ``silos`` of a method that does not use the partition (run once per data set and seed).
ANY_SILOS = 0

#: Columns that identify a cell; two rows with equal keys are the same fit.
KEY_COLUMNS = ["method", "dataset", "fairness", "epsilon", "heterogeneity", "silos", "knob", "config", "seed"]

#: Every column of ``runs.csv``, in order (see ``docs/experiments.md`` for their meaning).
COLUMNS = KEY_COLUMNS + [
    "knob_name", "hyper_parameter", "private", "federated",
    "test_error", "trivial_error", "demographic_parity_difference", "equalized_odds_difference", "violation",
    "val_error", "val_trivial_error", "val_demographic_parity_difference", "val_equalized_odds_difference",
    "val_violation",
    "epsilon_spent", "noise", "seconds", "epochs", "batch_size", "n_train", "n_val", "n_test",
    "warnings", "warning_messages", "error", "finished_at",
]


# ---------------------------------------------------------------------------------------- grid
@dataclass(frozen=True)
class Cell:
    """One fit of a sweep. ``epsilon`` is ``inf`` for non-private methods, ``knob`` NaN for
    methods without a knob, ``config`` the cell's tuned hyper-parameters as canonical text
    (``"lr_theta=0.1"``, see :func:`format_config`; empty: the defaults), ``fairness`` is
    :data:`ANY_FAIRNESS` for a method that ignores the notion, and ``heterogeneity = NaN``,
    ``silos =`` :data:`ANY_SILOS` for a method that does not use the partition."""

    method: str
    dataset: str
    fairness: str
    epsilon: float
    heterogeneity: float
    silos: int
    knob: float
    config: str
    seed: int

    def key(self) -> tuple[str, ...]:
        """The cell's key (see :func:`cell_key`)."""
        return cell_key(asdict(self))


def _fmt(value: Any) -> str:
    """Canonical text of a key value: floats to 12 significant digits (so values read back from
    the CSV match the grid's), ``nan``, ``inf``; integers and strings as they are."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return f"{v:.12g}"
    return str(value)


def cell_key(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The key of a row or cell: its :data:`KEY_COLUMNS` as canonical text."""
    out = []
    for col in KEY_COLUMNS:
        value = row[col]
        if col in ("silos", "seed"):
            value = int(value)
        elif col == "config":
            value = "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
        elif col in ("epsilon", "heterogeneity", "knob"):
            value = float(value)
        out.append(_fmt(value))
    return tuple(out)


def parse_values(spec: Any, name: str, *, integer: bool = False) -> list[float]:
    """Numbers from a grid axis: a number, a list of numbers, or ``"start:stop:count"`` strings,
    each meaning ``numpy.linspace(start, stop, count)`` (both ends included), e.g. ``"0:2:11"``
    is 0, 0.2, ..., 2. Strings may also be plain numbers or comma-separated lists. Values are
    rounded to 12 significant digits (so 0.6000000000000001 becomes 0.6) and de-duplicated,
    keeping the first occurrence. ``integer=True`` requires whole numbers.

    Raises ``ValueError`` naming ``name`` on bad syntax."""
    items = spec if isinstance(spec, (list, tuple, np.ndarray)) else [spec]
    hint = f"{name}: expected numbers or start:stop:count (numpy.linspace), e.g. 0:2:11 or 0 0.5 1"
    values: list[float] = []
    for item in items:
        if isinstance(item, str):
            for token in [t for t in item.replace(",", " ").split() if t]:
                if ":" in token:
                    parts = token.split(":")
                    try:
                        start, stop, count = float(parts[0]), float(parts[1]), parts[2]
                        n = int(count)
                        if len(parts) != 3 or n < 1 or str(n) != count.strip():
                            raise ValueError
                    except (ValueError, IndexError):
                        raise ValueError(f"{hint}; got {token!r}") from None
                    values.extend(np.linspace(start, stop, n).tolist())
                else:
                    try:
                        values.append(float(token))
                    except ValueError:
                        raise ValueError(f"{hint}; got {token!r}") from None
        elif isinstance(item, (int, float, np.integer, np.floating)) and not isinstance(item, bool):
            values.append(float(item))
        else:
            raise ValueError(f"{hint}; got {item!r}")
    out: list[float] = []
    for v in values:
        if not math.isfinite(v):
            raise ValueError(f"{name}: values must be finite, got {v}")
        v = float(f"{v:.12g}")
        if integer and v != int(v):
            raise ValueError(f"{name}: values must be whole numbers, got {v:g}")
        if v not in out:
            out.append(v)
    if not out:
        raise ValueError(f"{hint}; got nothing")
    return out


def _check_datasets(names: Any) -> list[str]:
    from pfair.datasets import list_datasets

    names = [names] if isinstance(names, str) else list(names)
    valid = list_datasets()
    out = []
    for raw in names:
        if str(raw).startswith("csv:"):  # a user CSV (pfair.datasets.csv_spec), taken verbatim
            from pfair.datasets import parse_csv_spec

            parse_csv_spec(str(raw))
            # Loaded once here (and kept for the cells of this process): a table the loader
            # refuses stops the sweep with its message instead of failing every cell.
            _dataset(str(raw))
            out += [str(raw)] if str(raw) not in out else []
            continue
        for name in str(raw).split(","):
            key = name.strip().lower().replace("-", "_")
            if not key:
                continue
            if key not in valid:
                raise ValueError(f"dataset: unknown data set {name!r}; choose from {', '.join(valid)}")
            if key not in out:
                out.append(key)
    if not out:
        raise ValueError(f"dataset: no data set given; choose from {', '.join(valid)}")
    return out


def _check_fairness(fairness: Any) -> list[str]:
    items = [fairness] if isinstance(fairness, str) else list(fairness)
    out = []
    for f in items:
        if f not in FAIRNESS_CHOICES:
            raise ValueError(f"fairness: {f!r} is not supported; choose from {', '.join(FAIRNESS_CHOICES)}")
        if f not in out:
            out.append(f)
    if not out:
        raise ValueError(f"fairness: no notion given; choose from {', '.join(FAIRNESS_CHOICES)}")
    return out


def _check_seeds(seeds: Any) -> list[int]:
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        if seeds < 1:
            raise ValueError(f"seeds: the number of seeds must be >= 1, got {seeds} (seeds are 0..seeds-1)")
        return list(range(int(seeds)))
    out = [int(s) for s in parse_values(seeds, "seeds", integer=True)]
    if any(s < 0 for s in out):
        raise ValueError(f"seeds: seeds must be >= 0, got {out}")
    return out


def format_config(params: Mapping[str, Any]) -> str:
    """Canonical text of a cell's tuned hyper-parameters: ``name=value`` pairs sorted by name,
    joined by ``,`` (values as JSON; floats to 12 significant digits), ``""`` for none."""
    parts = []
    for name in sorted(params):
        value = params[name]
        if isinstance(value, (float, np.floating)) and not isinstance(value, bool):
            text = _fmt(float(value))
        elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            text = str(int(value))
        else:
            text = json.dumps(value)
        parts.append(f"{name}={text}")
    return ",".join(parts)


def parse_config(text: Any) -> dict[str, Any]:
    """The hyper-parameters of a ``config`` (the inverse of :func:`format_config`)."""
    if text is None or (isinstance(text, float) and math.isnan(text)) or not str(text).strip():
        return {}
    out: dict[str, Any] = {}
    for part in str(text).split(","):
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"config: expected name=value pairs joined by ',', got {text!r}")
        try:
            out[name.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[name.strip()] = value
    return out


def _configs(method: str, axes: Mapping[str, Any] | None) -> list[str]:
    """Every configuration of a method's tuning grid ``{param: values}`` (Cartesian product)."""
    if not axes:
        return [""]
    spec = get_method(method)
    names = sorted(axes)
    for name in names:
        if name not in spec.parameters():
            raise ValueError(f"tuning: {name!r} is not a parameter of {method}; valid: {sorted(spec.parameters())}")
        if name in ("seed", "epsilon", "fairness") or name == spec.knob:
            raise ValueError(f"tuning: {method}.{name} is set by the grid itself; tune another parameter")
    grids = [parse_values(axes[n], f"tuning {method}.{n}") for n in names]
    out = [""]
    for name, values in zip(names, grids):
        out = [",".join(p for p in (c, format_config({name: v})) if p) for c in out for v in values]
    return out


def expand_grid(
    *,
    methods: Any,
    datasets: Any,
    fairness: Any = "demographic_parity",
    epsilons: Any = (1.0,),
    heterogeneities: Any = (0.0,),
    silos: Any = (3,),
    knobs: Any = "0:2:11",
    seeds: Any = 15,
    method_knobs: Mapping[str, Any] | None = None,
    tuning: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Cell]:
    """Every cell of a grid, seeds outermost (an interrupted sweep has whole seeds done first).

    ``methods``: names of :data:`pfair.experiments.methods.METHODS` (list or comma-separated).
    ``datasets``: bundled data set names or user CSV specs
    (:func:`pfair.datasets.csv_spec`). ``fairness``: one or more of ``demographic_parity``,
    ``equalized_odds``. ``epsilons`` (> 0), ``heterogeneities`` (in [0, 1]), ``silos`` (whole,
    >= 1) and ``knobs`` (>= 0): numbers or ``start:stop:count`` strings (:func:`parse_values`).
    ``seeds``: a count n (seeds 0..n-1) or explicit seeds. ``method_knobs``: per-method knob
    values replacing ``knobs`` for that method (``{"pfld": "0:8:6"}``). ``tuning``: per-method
    hyper-parameter grids ``{"steffle": {"lr_theta": [0.1, 0.25]}}``; each cell of the method
    is repeated for every configuration of the Cartesian product (the ``config`` column).

    Collapses (no fit runs twice): a method without a knob gets knob NaN; a non-private method
    gets ε = inf; a method that ignores the fairness notion (``fairness_aware=False``) gets
    ``fairness = "any"`` (its row holds both violations); a method that does not use the
    partition (``uses_partition=False``) gets ``heterogeneity = NaN, silos = 0``. The summary
    and the plots place such rows in every setting they belong to. All arguments are validated
    here; errors are ``ValueError`` naming the argument and the valid choices."""
    method_names = check_methods(methods)
    dataset_names = _check_datasets(datasets)
    notions = _check_fairness(fairness)
    eps = parse_values(epsilons, "epsilon")
    if any(e <= 0 for e in eps):
        raise ValueError(f"epsilon: values must be > 0, got {eps}")
    hs = parse_values(heterogeneities, "heterogeneity")
    if any(not 0 <= h <= 1 for h in hs):
        raise ValueError(f"heterogeneity: values must be in [0, 1], got {hs}")
    ns = [int(n) for n in parse_values(silos, "silos", integer=True)]
    if any(n < 1 for n in ns):
        raise ValueError(f"silos: the number of silos must be >= 1, got {ns}")
    ks = parse_values(knobs, "lam")
    if any(k < 0 for k in ks):
        raise ValueError(f"lam: knob values must be >= 0, got {ks}")
    per_method_knobs: dict[str, list[float]] = {}
    for name, spec_knobs in (method_knobs or {}).items():
        get_method(name)
        values = parse_values(spec_knobs, f"knobs of {name}")
        if any(k < 0 for k in values):
            raise ValueError(f"knobs of {name}: values must be >= 0, got {values}")
        per_method_knobs[name] = values
    for name in (tuning or {}):
        get_method(name)
    configs = {name: _configs(name, (tuning or {}).get(name)) for name in method_names}
    seed_list = _check_seeds(seeds)

    cells: list[Cell] = []
    for seed in seed_list:
        for dataset in dataset_names:
            for name in method_names:
                spec = METHODS[name]
                method_notions = notions if spec.fairness_aware else [ANY_FAIRNESS]
                partition = [(h, n) for h in hs for n in ns] if spec.uses_partition else [(math.nan, ANY_SILOS)]
                for notion in method_notions:
                    for h, n in partition:
                        for e in (eps if spec.private else [math.inf]):
                            for k in (per_method_knobs.get(name, ks) if spec.knob is not None else [math.nan]):
                                for config in configs[name]:
                                    cells.append(Cell(name, dataset, notion, e, h, n, k, config, seed))
    return cells


# ---------------------------------------------------------------------------------------- settings
def parse_params(items: Any) -> dict[str, dict[str, Any]]:
    """Hyper-parameter overrides ``{method: {name: value}}`` from ``"method.name=value"`` strings
    (values parsed as JSON, so ``0.1``, ``true``, ``null``, ``"x"``; anything else is a string)
    or from such a dict. Method and parameter names are validated."""
    if items is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    if isinstance(items, Mapping):
        pairs = [(m, n, v) for m, d in items.items() for n, v in dict(d).items()]
    else:
        pairs = []
        for item in ([items] if isinstance(items, str) else items):
            target, sep, text = str(item).partition("=")
            method, dot, name = target.partition(".")
            if not sep or not dot or not name:
                raise ValueError(f"param: expected METHOD.NAME=VALUE (e.g. steffle.lr_theta=0.1), got {item!r}")
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                value = text
            pairs.append((method.strip(), name.strip(), value))
    for method, name, value in pairs:
        spec = get_method(method)
        if name not in spec.parameters():
            raise ValueError(f"param: {name!r} is not a parameter of {method}; valid: {sorted(spec.parameters())}")
        if name in ("seed", "epsilon", "fairness") or name == spec.knob:
            raise ValueError(f"param: {method}.{name} is set by the sweep grid itself; use the grid options")
        out.setdefault(method, {})[name] = value
    return out


def _settings(epochs: int, batch_size: int | str, params: Mapping[str, Mapping[str, Any]],
              val_fraction: float = VAL_FRACTION) -> dict[str, Any]:
    batch = batch_size if batch_size == "auto" else int(batch_size)
    return {"schema": SCHEMA, "epochs": int(epochs), "batch_size": batch,
            "params": {m: dict(sorted(p.items())) for m, p in sorted(params.items())},
            "val_fraction": float(val_fraction), "pfair_version": __version__}


_CHECKED_SETTINGS = ("schema", "epochs", "batch_size", "params", "val_fraction")


def _check_or_write_settings(out: Path, settings: dict[str, Any]) -> None:
    """Write ``sweep.json``, or check that the one already there has the same fixed settings."""
    path = out / SETTINGS_FILE
    runs = out / RUNS_FILE
    if path.exists():
        old = json.loads(path.read_text())
        upgrade = old.get("schema") == 2 and settings["schema"] == 3  # only metric names differ (RENAMED)
        if upgrade:
            old = {**old, "schema": 3}
        diff = {k: (old.get(k), settings[k]) for k in _CHECKED_SETTINGS if old.get(k) != settings[k]}
        if diff:
            text = "; ".join(f"{k}: {a!r} there, {b!r} now" for k, (a, b) in diff.items())
            raise ValueError(f"out: {out} holds a sweep run with other fixed settings ({text}); its rows are not "
                             "comparable with this sweep's: use the same settings to resume, or another --out")
        if upgrade:
            path.write_text(json.dumps(old, indent=1) + "\n")
    elif runs.exists() and runs.stat().st_size > 0:
        raise ValueError(f"out: {runs} exists but {path} does not, so its settings are unknown; "
                         "use another --out directory")
    else:
        path.write_text(json.dumps(settings, indent=1) + "\n")


# ---------------------------------------------------------------------------------------- worker
_DATASETS: dict[str, Any] = {}
_SPLITS: dict[tuple[str, int, float], tuple[Any, tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}


def _dataset(name: str) -> Any:
    """The data set ``name``, loaded once per process."""
    if name not in _DATASETS:
        from pfair import datasets

        _DATASETS[name] = datasets.load(name)
    return _DATASETS[name]


def validation_indices(y: Any, s: Any, fraction: float, seed: int) -> np.ndarray:
    """Sorted indices of the training records held out for validation: in every stratum
    (y, s), ``round(fraction · size)`` records drawn without replacement by a generator seeded
    with ``(seed, 0x7A11D)`` (independent of the partition's and the noise's streams). Empty when
    ``fraction == 0``. Raises ``ValueError`` unless ``0 <= fraction < 1``."""
    if not 0 <= fraction < 1:
        raise ValueError(f"val_fraction: must be in [0, 1) (0: no validation split), got {fraction}")
    y = np.asarray(y)
    s = np.asarray(s)
    if fraction == 0:
        return np.zeros(0, dtype=np.int64)
    rng = np.random.default_rng([int(seed), 0x7A11D])
    picked = []
    strata = np.unique(np.stack([y, s], axis=1), axis=0)
    for yv, sv in strata:
        members = np.flatnonzero((y == yv) & (s == sv))
        k = int(round(fraction * len(members)))
        if k:
            picked.append(rng.choice(members, size=k, replace=False))
    return np.sort(np.concatenate(picked)) if picked else np.zeros(0, dtype=np.int64)


def split_validation(ds: Any, fraction: float, seed: int) -> tuple[Any, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(train, (X_val, y_val, s_val))``: the data set with the validation records
    (:func:`validation_indices`) removed from its training split (raw attributes too, so the
    partition into silos sees only the remaining records), and the validation records. The test
    split is untouched. With ``fraction == 0`` the data set is returned as is and the validation
    arrays are empty."""
    idx = validation_indices(ds.y_train, ds.s_train, fraction, seed)
    if idx.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return ds, (ds.X_train[:0], empty, empty)
    keep = np.ones(ds.n_train, dtype=bool)
    keep[idx] = False
    train = dataclasses.replace(ds, X_train=ds.X_train[keep], y_train=ds.y_train[keep], s_train=ds.s_train[keep],
                                attrs_train=ds.attrs_train.iloc[np.flatnonzero(keep)].reset_index(drop=True))
    return train, (ds.X_train[idx], ds.y_train[idx], ds.s_train[idx])


def _split(name: str, seed: int, fraction: float) -> tuple[Any, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`split_validation` of a data set, cached per process (a few seeds at a time)."""
    key = (name, int(seed), float(fraction))
    if key not in _SPLITS:
        if len(_SPLITS) >= 8:
            _SPLITS.pop(next(iter(_SPLITS)))
        _SPLITS[key] = split_validation(_dataset(name), fraction, seed)
    return _SPLITS[key]


def _init_worker(dataset_names: Sequence[str]) -> None:
    """Worker initializer: one Rust thread (before any Rust parallel code runs in this process;
    the sweep already runs one worker per core) and the data sets loaded up front."""
    os.environ["RAYON_NUM_THREADS"] = "1"
    warnings.simplefilter("ignore")  # warnings of the fits are recorded per row, not printed
    for name in dataset_names:
        _dataset(name)


def _metrics(y: np.ndarray, pred: np.ndarray, s: np.ndarray, prefix: str) -> dict[str, float]:
    if len(y) == 0:
        return {}
    report = metrics.fairness_report(y, pred, sensitive_features=s, warn_small_groups=False)
    names = {"test_error": "error", "trivial_error": "trivial_error",
             "demographic_parity_difference": "demographic_parity_difference",
             "equalized_odds_difference": "equalized_odds_difference"}
    if prefix == "test":
        return {k: float(report[k]) for k in names}
    return {f"{prefix}_{v}": float(report[k]) for k, v in names.items()}


def cell_batch(spec: Any, batch_size: int | str, smallest: int) -> int | str:
    """The ``batch_size`` a cell passes to its method, whose smallest silo holds ``smallest``
    records: a number, capped by that silo; ``"auto"`` stays ``"auto"`` for the methods built on
    SteFFLe (SteFFLe's rule: :attr:`pfair.settings.SteFFLeSettings.auto_batch`, resolved at the fit
    from the cell's ε, λ and silo sizes), and is each other method's own default batch, capped by
    that silo."""
    from pfair.estimators import SteFFLe

    if batch_size != "auto":
        return min(int(batch_size), int(smallest))
    if issubclass(spec.estimator(), SteFFLe):
        return "auto"
    own = inspect.signature(spec.estimator().__init__).parameters.get("batch_size")
    return min(int(own.default), int(smallest)) if own is not None else "auto"


def training_sizes(spec: Any, sizes: Any) -> list[int]:
    """The records each silo of ``sizes`` trains on under method ``spec``: SteFFLe and its
    configurations hold out ``validation_share`` (:func:`pfair.validation.training_sizes`), the other
    methods train on every record."""
    from pfair.estimators import SteFFLe

    if not issubclass(spec.estimator(), SteFFLe):
        return [int(n) for n in sizes]
    return silo_training_sizes(sizes, SteFFLeSettings.validation_share)


def _used_batch(model: Any, spec: Any, batch: int | str, fed: Any) -> float:
    """The batch a fitted cell used (its ``batch_size`` column); NaN for a method without one."""
    if hasattr(model, "settings"):  # SteFFLe and its configurations: their rule, after any override
        sizes = training_sizes(spec, list(fed.sizes) if spec.federated else [int(sum(fed.sizes))])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the fit already raised (and the row counted) its warnings
            return float(model.settings().for_sizes(sizes).batch_size)
    return math.nan if batch == "auto" else float(batch)


def run_cell(cell: Cell, epochs: int, batch_size: int | str, params: Mapping[str, Mapping[str, Any]] | None = None,
             val_fraction: float = VAL_FRACTION) -> dict[str, Any]:
    """Fit one cell and return its ``runs.csv`` row (a dict over :data:`COLUMNS`).

    The cell's seed fixes the validation split (:func:`split_validation`, ``val_fraction`` of the
    training split, stratified by (y, s)); the method is trained on the rest and measured on the
    validation split (``val_*`` columns) and on the test split. A method that ignores the
    fairness notion (``fairness = "any"``) gets ``violation = NaN``: the summary reads the
    column of each setting's notion.

    Exceptions of the fit (e.g. a batch larger than a silo, divergence) do not propagate: the row
    gets NaN metrics and the message in ``error``. Warnings are counted in ``warnings`` and their
    distinct messages joined in ``warning_messages``."""
    spec = get_method(cell.method)
    row: dict[str, Any] = {c: math.nan for c in COLUMNS}
    row.update(asdict(cell))
    row.update(knob_name=spec.knob or "", hyper_parameter=spec.hyper_parameter(cell.knob), private=spec.private,
               federated=spec.federated, epochs=int(epochs), warnings=0,
               warning_messages="", error="")
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            train, (X_val, y_val, s_val) = _split(cell.dataset, cell.seed, val_fraction)
            ds = _dataset(cell.dataset)
            row.update(n_train=train.n_train, n_val=len(y_val), n_test=ds.n_test)
            silos = cell.silos if cell.silos != ANY_SILOS else 1
            h = 0.0 if math.isnan(cell.heterogeneity) else cell.heterogeneity
            fed = Federation.for_dataset(train, silos, heterogeneity=h, seed=cell.seed)
            # A batch never exceeds what a silo trains on (for SteFFLe and its configurations: its
            # records less the held-out share): small user tables get their smallest silo's size.
            batch = cell_batch(spec, batch_size, min(training_sizes(spec, fed.sizes)))
            row["batch_size"] = math.nan if batch == "auto" else batch  # "auto": resolved after the fit
            overrides = dict((params or {}).get(cell.method, {}))
            tuned = parse_config(cell.config)
            clash = sorted(set(overrides) & set(tuned))
            if clash:
                raise ValueError(f"param: {cell.method}.{clash[0]} is both a fixed override and tuned by the grid")
            overrides.update(tuned)
            fairness = cell.fairness if cell.fairness != ANY_FAIRNESS else "demographic_parity"
            model = spec.build(knob=cell.knob, fairness=fairness, epsilon=cell.epsilon, epochs=epochs,
                               batch_size=batch, seed=cell.seed, overrides=overrides)
            model.fit(fed)
            row["batch_size"] = _used_batch(model, spec, batch, fed)
            seeded = getattr(model, "noise_seed", None)
            row["noise"] = ("none" if not spec.private else
                            f"reproducible (noise_seed={seeded})" if seeded is not None else "secret")
            row.update(_metrics(ds.y_test, model.predict(ds.X_test), ds.s_test, "test"))
            row.update(_metrics(y_val, model.predict(X_val) if len(y_val) else y_val, s_val, "val"))
            if cell.fairness in FAIRNESS_CHOICES:
                row["violation"] = row[violation_column(cell.fairness)]
                row["val_violation"] = row.get(f"val_{violation_column(cell.fairness)}", math.nan)
            row["epsilon_spent"] = (float(model.privacy_report_["epsilon_spent"].max()) if spec.private
                                    else math.inf)
        except Exception as exc:  # noqa: BLE001 - recorded in the row; the sweep goes on
            row["error"] = f"{type(exc).__name__}: {exc}".replace("\n", " ")
            with contextlib.suppress(Exception):
                row["trivial_error"] = metrics.trivial_error(_dataset(cell.dataset).y_test)
    row["seconds"] = time.perf_counter() - t0
    # The fit-quality warnings first, so that the cut below never drops them (add_constant_columns).
    ordered = sorted(caught, key=lambda w: not issubclass(w.category, ConvergenceWarning))
    messages = list(dict.fromkeys(str(w.message).replace("\n", " ") for w in ordered))
    row["warnings"] = len(caught)
    row["warning_messages"] = " | ".join(messages)[:1000]
    row["finished_at"] = time.time()
    return row


# ---------------------------------------------------------------------------------------- CSV
def _runs_path(path: str | os.PathLike) -> Path:
    p = Path(path)
    return p / RUNS_FILE if p.is_dir() or p.suffix != ".csv" else p


def load_runs(path: str | os.PathLike, *, drop_failed: bool = False) -> pd.DataFrame:
    """The rows of ``runs.csv`` (``path`` is the file or its directory), one per cell: a cell
    run twice (``retry_failed``) keeps its last row; a row cut short by an interruption is
    dropped. ``drop_failed=True`` also drops rows whose fit raised (non-empty ``error``)."""
    file = _runs_path(path)
    if not file.exists():
        raise ValueError(f"path: no {RUNS_FILE} at {file}; run `pfair sweep --out DIR` first")
    df = pd.read_csv(file, dtype={c: str for c in ("method", "dataset", "fairness", "knob_name", "warning_messages",
                                                   "error", "config")}, keep_default_na=True)
    df = df.rename(columns=RENAMED)
    if "config" not in df.columns and "finished_at" in df.columns:  # schema 1: defaults, no validation split
        df.insert(df.columns.get_loc("knob") + 1 if "knob" in df.columns else 0, "config", "")
        for col in COLUMNS:
            if col.startswith("val_") or col == "n_val":
                df[col] = math.nan
    missing = [c for c in KEY_COLUMNS + ["finished_at"] if c not in df.columns]
    if missing:
        raise ValueError(f"path: {file} is not a sweep's runs.csv (missing columns {missing})")
    df = df[df["finished_at"].notna() & df["seed"].notna()].copy()
    df["silos"] = df["silos"].astype(int)
    df["seed"] = df["seed"].astype(int)
    for col in ("error", "warning_messages", "knob_name", "config"):
        if col in df.columns:
            df[col] = df[col].fillna("").astype(str)
    df["_key"] = [cell_key(r) for r in df[KEY_COLUMNS].to_dict(orient="records")]
    df = df.drop_duplicates("_key", keep="last").drop(columns="_key").reset_index(drop=True)
    if drop_failed and "error" in df.columns:
        df = df[df["error"] == ""].reset_index(drop=True)
    return add_constant_columns(df)


#: Text of every warning pfair gives about a model no better than the constant predictor (the
#: checkpoint guard and the baselines' check, pfair.validation; the collapse check,
#: pfair.protocol.convergence), and of those that say the comparison could not be made (figures
#: that cannot tell the model from the constant at the guard's level, "too noisy to tell" in runs
#: before 2026-12-08; a baseline's training records that cannot tell them apart; in runs of older
#: versions, a constant predictor almost always right): the user was told either way.
CONSTANT_WARNINGS = ("clearly better than the constant predictor", "collapsed to a constant predictor",
                     "no better than the constant predictor", "not clearly below the constant predictor's",
                     "too noisy to tell the model from the constant predictor", "too small to tell a model from it",
                     "cannot tell the model from the constant predictor")


def add_constant_columns(df: pd.DataFrame) -> pd.DataFrame:
    """The derived columns of a sweep's rows (computed when read, not stored): ``worse_than_constant``
    (test error at or above the constant predictor's), ``constant_warned`` (a warning of the fit said
    its model was not clearly better than the constant predictor) and ``silent_failure`` (worse
    than constant without such a warning: what a user must never get)."""
    if df.empty or "test_error" not in df.columns:
        return df
    worse = (df["test_error"] >= df["trivial_error"]).fillna(False).astype(bool)
    text = df["warning_messages"].fillna("") if "warning_messages" in df.columns else pd.Series("", index=df.index)
    warned = text.map(lambda m: any(w in m for w in CONSTANT_WARNINGS)).astype(bool)
    df["worse_than_constant"] = worse
    df["constant_warned"] = warned
    df["silent_failure"] = worse & ~warned
    return df


class _RowWriter:
    """Appends rows to ``runs.csv`` and flushes after each one."""

    def __init__(self, file: Path) -> None:
        exists = file.exists() and file.stat().st_size > 0
        if exists:
            with open(file, newline="") as fh:
                header = next(csv.reader(fh), [])
            if header != COLUMNS and [RENAMED.get(c, c) for c in header] == COLUMNS:
                _upgrade_header(file)  # schema 2 with the old metric names
                header = COLUMNS
            if header != COLUMNS:
                raise ValueError(f"out: {file} has columns {header}, not this version's {COLUMNS}; "
                                 "use another --out directory")
            with open(file, "rb") as fh:  # a row cut short by an interruption: start on a new line
                fh.seek(-1, os.SEEK_END)
                needs_newline = fh.read(1) != b"\n"
        self._fh = open(file, "a", newline="")
        self._writer = csv.DictWriter(self._fh, fieldnames=COLUMNS)
        if not exists:
            self._writer.writeheader()
        elif needs_newline:
            self._fh.write("\r\n")
        self._fh.flush()

    def write(self, row: Mapping[str, Any]) -> None:
        self._writer.writerow({c: _csv_value(row.get(c, math.nan)) for c in COLUMNS})
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def _upgrade_header(file: Path) -> None:
    """Rewrite a schema-2 ``runs.csv`` header with fairlearn's names (atomically; rows unchanged)."""
    with open(file, newline="") as fh:
        fh.readline()
        rest = fh.read()
    tmp = file.with_name(file.name + ".tmp")
    with open(tmp, "w", newline="") as fh:
        csv.writer(fh).writerow(COLUMNS)
        fh.write(rest)
    os.replace(tmp, file)


def _csv_value(value: Any) -> Any:
    if isinstance(value, (float, np.floating)):
        return repr(float(value))  # round-trips exactly; nan and inf as text
    if isinstance(value, np.integer):
        return int(value)
    return value


# ---------------------------------------------------------------------------------------- runner
@dataclass
class SweepResult:
    """What :func:`run_sweep` did: ``runs`` is every row of ``runs.csv`` afterwards (see
    :func:`load_runs`); ``ran``/``skipped``/``failed`` count this call's cells."""

    runs: pd.DataFrame
    path: Path
    ran: int
    skipped: int
    failed: int
    seconds: float
    first_error: str = ""


@contextlib.contextmanager
def _single_threaded_children() -> Iterator[None]:
    """Environment inherited by the workers: one Rust (rayon) thread and single-threaded BLAS,
    since the sweep already runs one worker per core."""
    names = ("RAYON_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    saved = {n: os.environ.get(n) for n in names}
    os.environ.update({n: "1" for n in names})
    try:
        yield
    finally:
        for n, v in saved.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v


LOCK_FILE = ".sweep.lock"


@contextlib.contextmanager
def _exclusive(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``out`` for the sweep: two sweeps appending to the same
    ``runs.csv`` would run the same cells twice. (POSIX ``flock``; elsewhere no lock.)"""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(out / LOCK_FILE, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ValueError(f"out: another sweep is running into {out}; wait for it or use another --out") from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


GUARD_HINT = (
    "put the call under `if __name__ == \"__main__\":` in your script: sweep workers are spawned processes "
    "that import the script again, and without the guard each of them starts the sweep again"
)


def _refuse_in_spawned_import() -> None:
    """``run_sweep`` called while a spawned worker imports the caller's script (no ``__main__`` guard)."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(f"run_sweep was called while a worker process was starting: {GUARD_HINT}")


def _executor(jobs: int, dataset_names: Sequence[str]) -> ProcessPoolExecutor:
    # spawn, not fork: a forked child would inherit a Rust thread pool whose threads it lacks
    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(list(dataset_names),))


def run_sweep(
    out: str | os.PathLike,
    *,
    methods: Any,
    datasets: Any,
    fairness: Any = "demographic_parity",
    epsilons: Any = (1.0, 3.0, 9.0),
    heterogeneities: Any = (0.0, 0.75),
    silos: Any = (3,),
    lams: Any = "0:2:11",
    seeds: Any = 15,
    epochs: int | None = None,
    batch_size: int | str = "auto",
    params: Any = None,
    jobs: int | None = None,
    progress: bool = True,
    retry_failed: bool = False,
    method_knobs: Mapping[str, Any] | None = None,
    tuning: Mapping[str, Mapping[str, Any]] | None = None,
    val_fraction: float = VAL_FRACTION,
) -> SweepResult:
    """Run every cell of a grid that ``out/runs.csv`` does not hold yet; return all rows.

    Parameters
    ----------
    out : results directory; gets ``runs.csv`` (one row per cell, :data:`COLUMNS`) and
        ``sweep.json`` (the fixed settings, checked when resuming).
    methods, datasets, fairness, epsilons, heterogeneities, silos, seeds : the grid (see
        :func:`expand_grid`); ``lams`` is the knob axis (``"0:2:11"`` = numpy.linspace(0, 2, 11),
        or numbers).
    epochs, batch_size : passed to every method that has them (not to ``single_shot``); a cell
        whose smallest silo has fewer records than ``batch_size`` uses that silo's size (the
        ``batch_size`` column says what was used). Defaults: SteFFLe's, the same as ``pfair
        train``'s (``epochs=None`` is SteFFLe's default number of epochs; ``batch_size="auto"``,
        :func:`cell_batch`).
    params : hyper-parameter overrides, ``{"steffle": {"lr_theta": 0.1}}`` or
        ``["steffle.lr_theta=0.1"]`` (:func:`parse_params`).
    jobs : worker processes (default ``os.cpu_count()``); 1 runs in this process.
    progress : show a tqdm progress bar over cells.
    retry_failed : run again the cells whose row has an ``error`` (by default a failed cell
        counts as done, since a deterministic failure would fail again).
    method_knobs, tuning : per-method knob values and hyper-parameter grids (see
        :func:`expand_grid`).
    val_fraction : fraction of each training split held out for validation, stratified by
        (y, s) and fixed by the seed (:func:`split_validation`); 0 disables it. Recorded in
        ``sweep.json``.
    """
    _refuse_in_spawned_import()
    t0 = time.perf_counter()
    cells = expand_grid(methods=methods, datasets=datasets, fairness=fairness, epsilons=epsilons,
                        heterogeneities=heterogeneities, silos=silos, knobs=lams, seeds=seeds,
                        method_knobs=method_knobs, tuning=tuning)
    if epochs is None:
        epochs = SteFFLeSettings().epochs
    epochs = _check_positive_int(epochs, "epochs")
    validation_indices(np.zeros(0), np.zeros(0), float(val_fraction), 0)  # checks the range
    if not (isinstance(batch_size, str) and batch_size == "auto"):
        batch_size = _check_positive_int(batch_size, "batch_size (a whole number >= 1 or 'auto')")
    jobs = _check_positive_int((os.cpu_count() or 1) if jobs is None else jobs, "jobs")
    overrides = parse_params(params)
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"out: {out_dir} exists and is not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    file = out_dir / RUNS_FILE
    with _exclusive(out_dir):
        _check_or_write_settings(out_dir, _settings(epochs, batch_size, overrides, val_fraction))
        return _run(cells, file, epochs, batch_size, overrides, jobs, progress, retry_failed, t0, float(val_fraction))


def _run(cells: list[Cell], file: Path, epochs: int, batch_size: int | str, overrides: Mapping[str, Mapping[str, Any]],
         jobs: int, progress: bool, retry_failed: bool, t0: float, val_fraction: float = VAL_FRACTION
         ) -> SweepResult:
    done: set[tuple[str, ...]] = set()
    if file.exists() and file.stat().st_size > 0:
        previous = load_runs(file)
        if retry_failed:
            previous = previous[previous["error"] == ""]
        done = {cell_key(r) for r in previous[KEY_COLUMNS].to_dict(orient="records")}
    todo = [c for c in cells if c.key() not in done]
    skipped = len(cells) - len(todo)

    writer = _RowWriter(file)
    failed, first_error = 0, ""
    bar = _progress_bar(len(todo), progress)
    dataset_names = sorted({c.dataset for c in todo})
    try:
        for row in _execute(todo, epochs, batch_size, overrides, jobs, dataset_names, val_fraction):
            writer.write(row)
            if row["error"]:
                failed += 1
                first_error = first_error or f"{row['method']} (seed {row['seed']}): {row['error']}"
                bar.set_postfix(failed=failed)
            bar.update(1)
    finally:
        bar.close()
        writer.close()
    return SweepResult(load_runs(file), file, len(todo), skipped, failed, time.perf_counter() - t0, first_error)


def _execute(todo: Sequence[Cell], epochs: int, batch_size: int | str, params: Mapping[str, Mapping[str, Any]],
             jobs: int, dataset_names: Sequence[str], val_fraction: float = VAL_FRACTION
             ) -> Iterator[dict[str, Any]]:
    """Rows of the cells as they finish: in this process for ``jobs=1``, else in a process pool
    with at most ``2·jobs`` cells in flight (so an interruption wastes little)."""
    if not todo:
        return
    if jobs == 1:
        for cell in todo:
            yield run_cell(cell, epochs, batch_size, params, val_fraction)
        return
    pending: set[Future] = set()
    queue = iter(todo)
    # Workers are spawned on demand by submit, and inherit the environment at that moment.
    with _single_threaded_children():
        executor = _executor(min(jobs, len(todo)), dataset_names)
        try:
            for cell in _take(queue, 2 * jobs):
                pending.add(executor.submit(run_cell, cell, epochs, batch_size, params, val_fraction))
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for cell in _take(queue, len(finished)):
                    pending.add(executor.submit(run_cell, cell, epochs, batch_size, params, val_fraction))
                for future in finished:
                    try:
                        result = future.result()
                    except BrokenProcessPool:
                        raise RuntimeError(
                            "a sweep worker process died. If you called run_sweep from a script, "
                            f"{GUARD_HINT}. Otherwise a worker crashed or ran out of memory: run with jobs=1 to see "
                            "the error"
                        ) from None
                    yield result
        except BaseException:  # interrupted (or the consumer stopped): do not wait for cells in flight
            executor.shutdown(wait=False, cancel_futures=True)
            raise
        executor.shutdown(wait=True)


def _take(it: Iterator[Cell], n: int) -> list[Cell]:
    out = []
    for _ in range(n):
        try:
            out.append(next(it))
        except StopIteration:
            break
    return out


def _progress_bar(total: int, enabled: bool) -> Any:
    return progress_bar(total=total, desc="sweep", unit="cell", enabled=enabled, dynamic_ncols=True)


def _check_positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: must be a whole number >= 1, got {value!r}")
    return int(value)

