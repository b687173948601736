"""A fitted model as one file that is safe to load from someone else: :func:`save_model`,
:func:`load_model` (``pfair train --save-model``, ``pfair deploy local --save-model``,
``pfair predict``).

The file is a zip archive of JSON and ``.npy`` arrays, nothing else:

* ``model.json`` — ``{"format": "pfair-model", "format_version": 1, "pfair_version": ...,
  "estimator": "SteFFLe" | "DeepSteFFLe", "params": {...}, "attributes": {...}, "arrays": {...},
  "preprocessor": {...} | null, "data": {...} | null, "privacy_report": [...], "checkpoints": [...],
  "module": {...} | null, "metadata": {...}}``: the estimator's settings (``get_params``), its
  fitted scalars and label encodings, the preprocessing (:class:`pfair.datasets.TablePreprocessor`),
  the label and group names, the per-silo privacy report, and for ``DeepSteFFLe`` the factory that
  builds the module (``"package.module:function"`` and its JSON keyword arguments);
* ``arrays/*.npy`` — θ, W, the preprocessing's means and scales, and every tensor of a
  ``DeepSteFFLe`` module's ``state_dict``, each read with ``numpy.load(..., allow_pickle=False)``.

Loading parses JSON and numeric arrays only; it runs no code from the file. The one exception is a
``DeepSteFFLe``'s module, whose architecture is code: :func:`load_model` imports and calls the
factory the file names only when it matches the caller's ``allow_models`` patterns (default
``pfair.torch.models:*``, pfair's own architectures; the rule of a Flower silo,
:mod:`pfair.flower.models`), and the file's arrays must then fill the module's ``state_dict``
exactly (names, shapes, dtypes).

Versions: ``format_version`` is :data:`FORMAT_VERSION` today. A reader loads every format version up
to its own and refuses a newer one with a ``ValueError`` that names both and says to upgrade pfair;
the version changes whenever a reader of the previous one could not read the file correctly.

pickle and joblib (``joblib.dump(model, path)``) also work on fitted estimators, and keep
everything (``history_``, ``ledgers_``); use them only for files you wrote yourself: loading a pickle
runs whatever code it names.
"""

from __future__ import annotations

import fnmatch
import importlib
import io
import json
import os
import tempfile
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Union

import numpy as np
import pandas as pd

# torch and pfair's torch modules are imported inside the deep-model paths: torch is an optional extra.
from pfair import __version__
from pfair.datasets import TablePreprocessor
from pfair.estimators import SteFFLe
from pfair.privacy.report import PrivacyReport

__all__ = ["FORMAT", "FORMAT_VERSION", "SavedModel", "save_model", "load_model", "linear_model"]

#: The ``format`` entry of every pfair model file's ``model.json``.
FORMAT = "pfair-model"
#: The model-file format this pfair writes, and the newest it reads.
FORMAT_VERSION = 1
MANIFEST = "model.json"
#: Kinds of numpy dtype a file's label or group encodings may have (ints, unsigned, floats, bools,
#: text); object arrays are stored as text.
_ENCODING_KINDS = "iufbUO"

PathLike = Union[str, os.PathLike]


# ---------------------------------------------------------------------------------------- JSON
def _plain(value: Any) -> Any:
    """``value`` with numpy scalars and arrays as Python values, for ``json.dumps``."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _encoding(values: np.ndarray, name: str) -> dict:
    """A label or group encoding (``classes_``, ``groups_``) as JSON: its values and dtype."""
    arr = np.asarray(values)
    if arr.dtype.kind == "O":
        if not all(isinstance(v, str) for v in arr.tolist()):
            raise ValueError(f"{name} holds values of mixed types {arr.tolist()!r}; the model file stores numbers "
                             "or text: fit on labels of one type")
        return {"values": arr.tolist(), "dtype": "object"}
    if arr.dtype.kind not in _ENCODING_KINDS:
        raise ValueError(f"{name} has dtype {arr.dtype}; the model file stores numbers or text")
    return {"values": _plain(arr), "dtype": arr.dtype.str}


def _decoding(entry: Mapping[str, Any], name: str) -> np.ndarray:
    dtype = np.dtype(object) if entry["dtype"] == "object" else np.dtype(entry["dtype"])
    if dtype.kind not in _ENCODING_KINDS:
        raise ValueError(f"{name}: dtype {entry['dtype']!r} is not one a pfair model file holds")
    return np.asarray(entry["values"], dtype=dtype)


def _frame_records(frame: Optional[pd.DataFrame]) -> Optional[dict]:
    """A small DataFrame (the privacy report, the checkpoints) as JSON: index name and records."""
    if frame is None:
        return None
    index = frame.index.name or "index"
    records = frame.reset_index().rename(columns={"index": index}).to_dict(orient="records")
    return {"index": index, "records": _plain(records)}


def _records_frame(entry: Optional[Mapping[str, Any]]) -> Optional[pd.DataFrame]:
    if entry is None:
        return None
    frame = pd.DataFrame(list(entry["records"]))
    return frame.set_index(entry["index"]) if entry["index"] in frame.columns else frame


# ----------------------------------------------------------------------------------- the model
@dataclass
class SavedModel:
    """A model read by :func:`load_model`: the fitted estimator, the preprocessing that makes its
    features from a table's columns, and what the file says about the data.

    ``predict(frame)`` and ``predict_proba(frame)`` take rows with the training table's feature
    columns (any others, e.g. the label, are ignored) and return labels in the original label
    values (``label_names``) and one probability column per label. Without a preprocessor they
    take the feature matrix itself.
    """

    estimator: Any
    preprocessor: Any = None
    label_names: Optional[list] = None
    group_names: Optional[list] = None
    sensitive: Optional[str] = None
    info: dict = field(default_factory=dict)

    @property
    def privacy_report(self) -> Optional[pd.DataFrame]:
        """The per-silo privacy report the model was trained under (``estimator.privacy_report_``)."""
        return getattr(self.estimator, "privacy_report_", None)

    def transform(self, X: Any) -> np.ndarray:
        """The feature matrix the estimator takes, from a table's rows (or ``X`` itself when the
        file has no preprocessor)."""
        if self.preprocessor is None:
            return X
        return self.preprocessor.transform(X)

    def _names(self) -> Optional[np.ndarray]:
        classes = np.asarray(self.estimator.classes_)
        if self.label_names is None or classes.dtype.kind not in "iu" or \
                not np.array_equal(classes, np.arange(len(self.label_names))):
            return None
        return np.asarray(self.label_names, dtype=object)

    def predict(self, X: Any) -> np.ndarray:
        """The predicted label of every row: ``label_names[class]`` when the file knows the label
        names, the estimator's ``classes_`` otherwise."""
        pred = self.estimator.predict(self.transform(X))
        names = self._names()
        return names[pred] if names is not None else pred

    def predict_proba(self, X: Any) -> pd.DataFrame:
        """Class probabilities, one column per label (``label_names``, else ``classes_``)."""
        proba = self.estimator.predict_proba(self.transform(X))
        names = self._names()
        columns = [str(c) for c in (names if names is not None else self.estimator.classes_)]
        index = X.index if isinstance(X, pd.DataFrame) else None
        return pd.DataFrame(proba, columns=columns, index=index)


def _estimator_kind(estimator: Any) -> str:
    if isinstance(estimator, SteFFLe):
        return "SteFFLe"
    try:
        from pfair.torch.estimator import DeepSteFFLe
    except ImportError:  # no torch: it cannot be a DeepSteFFLe
        DeepSteFFLe = None
    if DeepSteFFLe is not None and isinstance(estimator, DeepSteFFLe):
        return "DeepSteFFLe"
    raise TypeError(f"save_model saves a fitted pfair.SteFFLe or pfair.torch.DeepSteFFLe, got "
                    f"{type(estimator).__name__}; for other objects (and a pipeline around them) use joblib or "
                    "pickle, for files you load yourself only")


def _import_factory(name: str) -> Callable[..., Any]:
    if not isinstance(name, str) or name.count(":") != 1:
        raise ValueError(f"module_factory must be 'package.module:function', got {name!r}")
    module_name, func = name.split(":")
    try:
        factory = getattr(importlib.import_module(module_name), func)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"module_factory {name!r} cannot be imported ({exc}); it must be a function importable "
                         "where the model is loaded, e.g. 'mypackage.models:make_net'") from None
    if not callable(factory):
        raise ValueError(f"module_factory {name!r} is not callable")
    return factory


def _state_arrays(module: Any) -> dict[str, np.ndarray]:
    out = {}
    for key, tensor in module.state_dict().items():
        try:
            out[key] = tensor.detach().cpu().numpy()
        except TypeError as exc:  # e.g. bfloat16, which numpy has no dtype for
            raise ValueError(f"module tensor {key!r} of dtype {tensor.dtype} cannot be stored as a numpy array "
                             f"({exc}); cast the module to float32 or float64 first") from None
    return out


def _fill_module(module: Any, arrays: Mapping[str, np.ndarray], factory: str) -> Any:
    """``module`` holding ``arrays`` as its ``state_dict``: every name, shape and dtype must match."""
    import torch

    expected = module.state_dict()
    if set(expected) != set(arrays):
        raise ValueError(f"module_factory {factory!r} builds a module whose state_dict has the tensors "
                         f"{sorted(expected)} but the model has {sorted(arrays)}: not the architecture it was "
                         "trained with")
    for key, tensor in expected.items():
        arr = arrays[key]
        if tuple(tensor.shape) != arr.shape or str(tensor.dtype).replace("torch.", "") != str(arr.dtype):
            raise ValueError(f"module_factory {factory!r}: tensor {key!r} is {tuple(tensor.shape)} {tensor.dtype} "
                             f"in the module it builds, {arr.shape} {arr.dtype} in the model: not the architecture "
                             "it was trained with (check the factory's keyword arguments)")
    module.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in arrays.items()}, strict=True)
    return module


# -------------------------------------------------------------------------------------- save
def save_model(estimator: Any, path: PathLike, *, dataset: Any = None, preprocessor: Any = None,
               module_factory: Optional[str] = None, factory_kwargs: Optional[Mapping[str, Any]] = None,
               privacy_report: Optional[pd.DataFrame] = None, metadata: Optional[Mapping[str, Any]] = None) -> Path:
    """Write a fitted ``SteFFLe`` or ``DeepSteFFLe`` to ``path`` (a zip of JSON and ``.npy``
    arrays, see the module docstring); returns the path.

    ``dataset``: the :class:`~pfair.datasets.Dataset` the model was trained on; its
    ``preprocessor``, label names, group names and sensitive column go into the file, so that
    :func:`load_model` predicts from a table's rows in the original label values. ``preprocessor``:
    a fitted :class:`~pfair.datasets.TablePreprocessor` instead of (or overriding) the data set's.
    ``module_factory`` (``DeepSteFFLe`` only, required): ``"package.module:function"``, an
    importable function that returns the untrained module when called with ``factory_kwargs``
    (JSON values); the file holds the module's weights, not its code. It is called once here to
    check that its module takes the trained weights. ``privacy_report``: the report to store
    instead of ``estimator.privacy_report_``. ``metadata``: JSON values kept as they are.

    The file is written next to ``path`` and moved into place, so a reader never sees half a file.
    """
    kind = _estimator_kind(estimator)
    if not hasattr(estimator, "theta_") or not hasattr(estimator, "classes_"):
        raise ValueError(f"save_model: this {kind} is not fitted yet; call fit first")

    params = estimator.get_params(deep=False)
    params.pop("module", None)
    arrays: dict[str, np.ndarray] = {"theta": np.asarray(estimator.theta_, dtype=np.float64)}
    if hasattr(estimator, "W_"):
        arrays["W"] = np.asarray(estimator.W_, dtype=np.float64)
    scaling = getattr(estimator, "feature_scaling_", None)
    if scaling is not None:
        arrays["feature_scaling_mean"] = np.asarray(scaling[0], dtype=np.float64)
        arrays["feature_scaling_std"] = np.asarray(scaling[1], dtype=np.float64)
    names_in = getattr(estimator, "feature_names_in_", None)
    attributes: dict[str, Any] = {
        "classes_": _encoding(estimator.classes_, "classes_"),
        "groups_": None if not hasattr(estimator, "groups_") else _encoding(estimator.groups_, "groups_"),
        "n_features_in_": int(estimator.n_features_in_),
        "feature_names_in_": None if names_in is None else [str(n) for n in names_in],
        "lam_": _plain(getattr(estimator, "lam_", None)),
        "selected_epoch_": _plain(getattr(estimator, "selected_epoch_", None)),
        "epochs_done_": _plain(getattr(estimator, "epochs_done_", None)),
    }
    module_entry = None
    if kind == "DeepSteFFLe":
        if module_factory is None:
            raise ValueError(
                "save_model: a DeepSteFFLe needs module_factory='package.module:function', an importable function "
                "that returns the untrained module (with factory_kwargs=, JSON values), e.g. "
                "module_factory='pfair.torch.models:mlp', factory_kwargs={'n_features': 12, 'n_classes': 2}: the "
                "file holds the module's weights, and the loader rebuilds the module with that function")
        kwargs = dict(factory_kwargs or {})
        try:
            json.dumps(kwargs, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"factory_kwargs must be JSON values (numbers, text, lists, dicts): {exc}") from None
        state = _state_arrays(estimator.module_)
        _fill_module(_import_factory(module_factory)(**kwargs), state, module_factory)  # it loads back
        module_entry = {"factory": module_factory, "kwargs": kwargs, "tensors": {}}
        for i, (key, arr) in enumerate(state.items()):
            module_entry["tensors"][key] = f"module_{i}"
            arrays[f"module_{i}"] = arr
        attributes["input_shape_"] = [int(v) for v in estimator.input_shape_]
        attributes["n_params_"] = int(getattr(estimator, "n_params_", estimator.theta_.size))
    data_entry = None
    if dataset is not None:
        preprocessor = preprocessor if preprocessor is not None else getattr(dataset, "preprocessor", None)
        data_entry = {"name": str(dataset.name), "label_names": [str(v) for v in dataset.label_names],
                      "group_names": [str(v) for v in dataset.group_names], "sensitive": str(dataset.sensitive_name),
                      "feature_names": [str(v) for v in dataset.feature_names]}
        if dataset.n_features != estimator.n_features_in_:
            raise ValueError(f"dataset: {dataset.name!r} has {dataset.n_features} features but the model takes "
                             f"{estimator.n_features_in_}: not the data set it was trained on")
    pre_entry = None
    if preprocessor is not None:
        pre_state, pre_arrays = preprocessor.to_dict()
        if preprocessor.n_features_out_ != estimator.n_features_in_:
            raise ValueError(f"preprocessor: it makes {preprocessor.n_features_out_} features but the model takes "
                             f"{estimator.n_features_in_}")
        pre_entry = {**_plain(pre_state), "arrays": {}}
        for key, arr in pre_arrays.items():
            pre_entry["arrays"][key] = f"preprocessor_{key}"
            arrays[f"preprocessor_{key}"] = arr
    report = privacy_report if privacy_report is not None else getattr(estimator, "privacy_report_", None)
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "pfair_version": __version__, "estimator": kind,
        "params": _plain(params), "attributes": attributes,
        "arrays": {name: f"arrays/{name}.npy" for name in arrays},
        "preprocessor": pre_entry, "data": data_entry, "module": module_entry,
        "privacy_report": _frame_records(report),
        "checkpoints": _frame_records(getattr(estimator, "checkpoints_", None)),
        "metadata": _plain(dict(metadata or {})),
    }
    text = json.dumps(manifest, indent=1, allow_nan=True)  # the report's inf (non-private ε) as Infinity
    path = Path(path)
    if path.parent != Path("") and not path.parent.exists():
        raise ValueError(f"save_model: directory {str(path.parent)!r} of {str(path)!r} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent if str(path.parent) else ".")
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr(MANIFEST, text)
            for name, arr in arrays.items():
                buf = io.BytesIO()
                np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
                z.writestr(f"arrays/{name}.npy", buf.getvalue())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


# -------------------------------------------------------------------------------------- load
def read_manifest(path: PathLike) -> dict:
    """The ``model.json`` of a model file, after the format and version checks of :func:`load_model`."""
    with _open(path) as z:
        return _manifest(z, path)


def _open(path: PathLike) -> zipfile.ZipFile:
    if not os.path.exists(path):
        raise ValueError(f"model file {os.fspath(path)!r} does not exist; write one with pfair.save_model or "
                         "`pfair train ... --save-model PATH`")
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise ValueError(f"{os.fspath(path)!r} is not a pfair model file (not a zip archive); a model saved with "
                         "pickle or joblib is loaded with those, and only when you wrote it yourself") from None


def _manifest(z: zipfile.ZipFile, path: PathLike) -> dict:
    where = os.fspath(path)
    try:
        manifest = json.loads(z.read(MANIFEST))
    except KeyError:
        raise ValueError(f"{where!r} is not a pfair model file (no {MANIFEST})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where!r}: {MANIFEST} is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{where!r} is not a pfair model file ({MANIFEST} has no \"format\": \"{FORMAT}\")")
    version = manifest.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"{where!r}: format_version {version!r} is not a version of the pfair model file")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{where!r} was written by pfair {manifest.get('pfair_version', '?')} in model-file format {version}; "
            f"this pfair ({__version__}) reads formats up to {FORMAT_VERSION}: upgrade pfair "
            f"(pip install -U pfair) to load it")
    return manifest


def _array(z: zipfile.ZipFile, manifest: dict, name: str, where: str) -> np.ndarray:
    member = manifest["arrays"].get(name)
    if member is None:
        raise ValueError(f"{where!r}: the model file lists no array {name!r}")
    try:
        raw = z.read(member)
    except KeyError:
        raise ValueError(f"{where!r}: array {member!r} is missing from the archive") from None
    try:
        return np.load(io.BytesIO(raw), allow_pickle=False)
    except ValueError as exc:  # object arrays need pickle, which is never allowed
        raise ValueError(f"{where!r}: array {member!r} is not a plain numeric array ({exc})") from None


def load_model(path: PathLike, *, allow_models: str = "pfair.torch.models:*") -> SavedModel:
    """Read a model file written by :func:`save_model` (or ``--save-model``) into a
    :class:`SavedModel`: the fitted estimator (``estimator``, with ``theta_``, ``classes_``,
    ``privacy_report_``, its settings as parameters), its ``preprocessor``, ``label_names``.

    Refused with a ``ValueError`` naming the file: a file that is not a pfair model, a format
    newer than this pfair reads (upgrade pfair), arrays that would need pickle.

    ``allow_models`` (``DeepSteFFLe`` files only): comma-separated ``module:function`` patterns
    (``fnmatch``) of the factories this call may import and call to rebuild the module; default
    pfair's own architectures. A file naming any other factory is refused until you allow it, e.g.
    ``allow_models="mypackage.models:*"``: that code runs on your machine.
    """
    where = os.fspath(path)
    with _open(path) as z:
        manifest = _manifest(z, path)
        arrays = {name: _array(z, manifest, name, where) for name in manifest["arrays"]}
    kind = manifest.get("estimator")
    attrs = manifest["attributes"]
    params = dict(manifest["params"])
    if kind == "SteFFLe":
        cls = SteFFLe
    elif kind == "DeepSteFFLe":
        from pfair.torch.estimator import DeepSteFFLe as cls
    else:
        raise ValueError(f"{where!r}: estimator {kind!r} is not one this pfair reads (SteFFLe, DeepSteFFLe)")
    known = set(cls._get_param_names())
    unknown = sorted(set(params) - known)
    if unknown:
        warnings.warn(f"{where!r}: settings {unknown} are not parameters of this pfair's {kind}; they are left out",
                      UserWarning, stacklevel=2)
    params = {k: v for k, v in params.items() if k in known}
    if kind == "DeepSteFFLe":
        est = _load_deep(cls, params, manifest, arrays, where, allow_models)
    else:
        est = cls(**params)
    est.theta_ = np.asarray(arrays["theta"], dtype=np.float64)
    if "W" in arrays:
        est.W_ = arrays["W"]
    est.classes_ = _decoding(attrs["classes_"], "classes_")
    if attrs.get("groups_") is not None:
        est.groups_ = _decoding(attrs["groups_"], "groups_")
    est.n_features_in_ = int(attrs["n_features_in_"])
    if attrs.get("feature_names_in_") is not None:
        est.feature_names_in_ = np.asarray(attrs["feature_names_in_"], dtype=object)
    for name in ("lam_", "selected_epoch_", "epochs_done_"):
        if attrs.get(name) is not None:
            setattr(est, name, attrs[name])
    if "feature_scaling_mean" in arrays:
        est.feature_scaling_ = (arrays["feature_scaling_mean"], arrays["feature_scaling_std"])
    if kind == "SteFFLe":
        d, l = est.n_features_in_, len(est.classes_)
        if est.theta_.shape != ((d + 1) * (l - 1),):
            raise ValueError(f"{where!r}: theta has {est.theta_.size} entries, not (d + 1)(l - 1) = "
                             f"{(d + 1) * (l - 1)} for {d} features and {l} classes")
    report = _records_frame(manifest.get("privacy_report"))
    if report is not None:
        est.privacy_report_ = PrivacyReport(report)
    checkpoints = _records_frame(manifest.get("checkpoints"))
    if checkpoints is not None:
        est.checkpoints_ = checkpoints
    pre = None
    if manifest.get("preprocessor") is not None:
        entry = manifest["preprocessor"]
        pre = TablePreprocessor.from_dict(entry, {k: arrays[v] for k, v in entry["arrays"].items()})
        if pre.n_features_out_ != est.n_features_in_:
            raise ValueError(f"{where!r}: the preprocessor makes {pre.n_features_out_} features, the model takes "
                             f"{est.n_features_in_}")
    data = manifest.get("data") or {}
    info = {k: manifest.get(k) for k in ("format_version", "pfair_version", "estimator", "metadata")}
    info["dataset"] = data.get("name")
    return SavedModel(estimator=est, preprocessor=pre, label_names=data.get("label_names"),
                      group_names=data.get("group_names"), sensitive=data.get("sensitive"), info=info)


def _load_deep(cls: Any, params: dict, manifest: dict, arrays: dict, where: str, allow_models: str) -> Any:
    import torch

    from pfair.providers.torch import resolve_device

    entry = manifest.get("module")
    if not entry or "factory" not in entry:
        raise ValueError(f"{where!r}: a DeepSteFFLe file without its module factory")
    factory_name = entry["factory"]
    patterns = [p.strip() for p in allow_models.split(",") if p.strip()]
    if not any(fnmatch.fnmatchcase(factory_name, p) for p in patterns):
        raise ValueError(
            f"{where!r} rebuilds its module with {factory_name!r}, which allow_models={allow_models!r} does not "
            f"allow: loading would import and run that code. If you trust it, pass allow_models={factory_name!r} "
            f"(pfair predict --allow-models {factory_name})")
    factory = _import_factory(factory_name)
    kwargs = dict(entry.get("kwargs") or {})
    state = {key: arrays[name] for key, name in entry["tensors"].items()}
    module = _fill_module(factory(**kwargs), state, factory_name)
    attrs = manifest["attributes"]
    est = cls(module=factory(**kwargs), **params)
    try:
        device = resolve_device(est.device)
    except ValueError as exc:
        warnings.warn(f"{where!r}: {exc}; the model is loaded on the CPU", UserWarning, stacklevel=3)
        device = torch.device("cpu")
    est.device_ = device
    est.module_ = module.to(device)
    est.input_shape_ = tuple(int(v) for v in attrs["input_shape_"])
    est.n_params_ = int(attrs.get("n_params_", 0))
    return est


# --------------------------------------------------------------------- a deployment's model
def linear_model(estimator: Any, theta: np.ndarray, *, classes: np.ndarray, groups: Optional[np.ndarray],
                 n_features: int, lam: Optional[float] = None, selected_epoch: Optional[int] = None,
                 privacy_report: Optional[pd.DataFrame] = None) -> Any:
    """``estimator`` (an unfitted ``SteFFLe`` holding a run's settings) as the fitted model of a
    θ trained elsewhere, e.g. by a Flower deployment (``pfair deploy local --save-model``): the
    attributes ``predict`` and :func:`save_model` read. ``theta`` is ``(d + 1)(l - 1)`` floats."""
    theta = np.asarray(theta, dtype=np.float64).ravel()
    l = len(classes)  # noqa: E741
    if theta.shape != ((n_features + 1) * (l - 1),):
        raise ValueError(f"theta has {theta.size} entries, not (d + 1)(l - 1) = {(n_features + 1) * (l - 1)}")
    estimator.theta_ = theta
    estimator.classes_ = np.asarray(classes)
    if groups is not None:
        estimator.groups_ = np.asarray(groups)
    estimator.n_features_in_ = int(n_features)
    estimator.lam_ = float(estimator.lam if lam is None else lam)
    estimator.selected_epoch_ = selected_epoch
    if privacy_report is not None:
        estimator.privacy_report_ = PrivacyReport(privacy_report)
    return estimator
