"""pfair: private and fair federated learning with a Rust core.

Every silo's outgoing messages are differentially private with respect to the sensitive
attribute (ISRL-DP) while the model is trained for demographic parity, equalized odds or equal
opportunity with the FERMI min-max objective (SteFFLe: Gupta, Poornash, Razaviyayn and Lowy, "A
Stochastic Optimization Framework for Private and Fair Learning From Decentralized Data", 2024).

Quick start::

    import pfair
    data = pfair.datasets.load_adult()
    fed = pfair.Federation.partition(data, n_silos=3, heterogeneity=0.0, by="age", seed=0)
    model = pfair.SteFFLe(fairness="demographic_parity", lam=1.0, epsilon=1.0).fit(fed)
    model.predict(data.X_test); model.privacy_report_
    pfair.save_model(model, "model.pfair", dataset=data)   # pfair.load_model("model.pfair").predict(rows)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pfair import _core

__version__: str = _core.__version__

__all__ = ["Federation", "PrivateThresholdOptimizer", "SteFFLe", "datasets", "load_model", "metrics", "model_selection",
           "partition", "postprocessing", "privacy", "references", "save_model", "__version__"]

# The names below load on first use (PEP 562): ``import pfair`` stays cheap for the processes
# that need only part of it (a Flower ClientApp starts a fresh process for every message, and
# scikit-learn and pandas alone take seconds to import there).
_SUBMODULES = {"datasets", "metrics", "model_selection", "partition", "postprocessing", "privacy", "references"}
_CLASSES = {"SteFFLe": "pfair.estimators", "Federation": "pfair.federation",
            "PrivateThresholdOptimizer": "pfair.postprocessing", "save_model": "pfair.model_file",
            "load_model": "pfair.model_file"}

if TYPE_CHECKING:  # pragma: no cover
    from pfair import datasets, metrics, model_selection, partition, postprocessing, privacy, references
    from pfair.estimators import SteFFLe
    from pfair.federation import Federation
    from pfair.model_file import load_model, save_model
    from pfair.postprocessing import PrivateThresholdOptimizer


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"pfair.{name}")
    if name in _CLASSES:
        value = getattr(importlib.import_module(_CLASSES[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pfair' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
