"""Deep models in a deployment: the run config names a model factory; each silo builds it.

The run config's ``model`` entry (JSON, public) is ``{"factory": "pfair.torch.models:mlp",
"kwargs": {...}, "init_seed": 0, "input_shape": [...]}``. The server builds the same module to get
θ₀ (``init_seed`` makes the initialisation public and identical everywhere); every silo builds it
to compute its parts with :class:`pfair.providers.torch.TorchProvider`. A factory is code that
runs on the silo's machine, so a silo builds only factories its own node config allows
(``allow-models``, comma-separated ``module:function`` patterns; default ``pfair.torch.models:*``,
pfair's own models) — a hostile server cannot make a silo import and call anything else.
"""

from __future__ import annotations

import fnmatch
import importlib
import json
from typing import Any, Mapping

DEFAULT_ALLOWED = "pfair.torch.models:*"


def parse_model_spec(raw: Any) -> dict | None:
    """The ``model`` entry of a run config, or None for the linear model."""
    if raw in (None, "", "{}"):
        return None
    spec = json.loads(raw) if isinstance(raw, str) else dict(raw)
    if not isinstance(spec.get("factory"), str) or ":" not in spec["factory"]:
        raise ValueError("model: 'factory' must be 'package.module:function'")
    return {"factory": spec["factory"], "kwargs": dict(spec.get("kwargs") or {}),
            "init_seed": int(spec.get("init_seed", 0)), "input_shape": spec.get("input_shape")}


def build_module(spec: Mapping[str, Any], *, allowed: str = DEFAULT_ALLOWED) -> Any:
    """Import and call the factory (if ``allowed``), then initialise it from ``init_seed``."""
    patterns = [p.strip() for p in allowed.split(",") if p.strip()]
    if not any(fnmatch.fnmatchcase(spec["factory"], p) for p in patterns):
        raise PermissionError(f"model factory {spec['factory']!r} is not allowed by this silo (allow-models="
                              f"{allowed!r}); the silo refuses to run code it did not allow")
    module_name, func = spec["factory"].split(":", 1)
    factory = getattr(importlib.import_module(module_name), func)
    from pfair.torch.estimator import reset_parameters  # lazy: torch is an optional extra

    return reset_parameters(factory(**spec["kwargs"]), spec["init_seed"])
