"""Named configurations of :class:`pfair.SteFFLe` for the comparison rows of Gupta, Poornash, Razaviyayn
and Lowy, "A Stochastic Optimization Framework for Private and Fair Learning From Decentralized
Data" (2024, §5).

These are *not* re-implementations: each class is SteFFLe with some hyper-parameters fixed
(and, for the central rows, all silos pooled into one before fitting). Their ``__init__``
signature is SteFFLe's minus the fixed names, so ``get_params``/``set_params`` keep working and
they follow SteFFLe as it gains options.

=====================  ==========  ==============  =========================================
class                  silos       privacy         legend in Gupta et al. (2024)
=====================  ==========  ==============  =========================================
``FERMI``              pooled (1)  none (ε=None)   "Non-Private Centralized" (Lowy et al. 2022)
``DPFERMI``            pooled (1)  ε (central DP)  "Central DP SteFFLe" / DP-FERMI (Lowy 2023)
``NonPrivateSteFFLe``  as given    none (σ = 0)    "Non-Private SteFFLe"
=====================  ==========  ==============  =========================================

With one silo, SteFFLe's ISRL-DP guarantee is central DP with respect to the sensitive
attribute, so ``DPFERMI`` is DP-FERMI's setting (replace one record's s in the data set).
"""

from __future__ import annotations

import inspect
from typing import Any

import pandas as pd

from pfair.baselines._common import shards_from
from pfair.estimators import SteFFLe


def _pool(X: Any, y: Any, sensitive_features: Any, silos: Any) -> tuple[Any, Any, Any]:
    """All silos' records stacked into one silo (global encodings kept). Without
    ``sensitive_features`` the third entry is None (SteFFLe's ``fit`` decides whether that is allowed)."""
    sh = shards_from(X, y, sensitive_features, silos, need_s=False)
    Xp, yp, sp = sh.pooled()
    if hasattr(X, "columns"):  # keep the column names for feature_names_in_
        Xp = pd.DataFrame(Xp, columns=X.columns)
    return Xp, sh.classes_[yp], (sh.groups_[sp] if sh.has_s else None)


def _configure(name: str, doc: str, fixed: dict[str, Any], central: bool,
               defaults: dict[str, Any] | None = None, require: tuple[str, ...] = ()) -> type:
    base = inspect.signature(SteFFLe.__init__)
    defaults = defaults or {}
    params = [p.replace(default=defaults[n]) if n in defaults else p
              for n, p in base.parameters.items() if n not in fixed]
    sig = base.replace(parameters=params)

    def __init__(self: Any, **kwargs: Any) -> None:
        # Only the parameters are set on the instance (scikit-learn's rule); the fixed settings are
        # class attributes (est.epsilon reads them) and complete get_params() in SteFFLe.settings().
        bound = sig.bind(self, **kwargs)
        bound.apply_defaults()
        for k, v in bound.arguments.items():
            if k != "self":
                setattr(self, k, v)

    __init__.__signature__ = sig  # type: ignore[attr-defined]
    settings = {k: v for k, v in fixed.items() if k in base.parameters}
    namespace: dict[str, Any] = {"__init__": __init__, "__doc__": doc, "__module__": __name__,
                                 "_fixed_settings": settings, **settings}
    if central:

        def fit(self: Any, X: Any, y: Any = None, *, sensitive_features: Any = None, silos: Any = None,
                eval_set: Any = None, **kwargs: Any) -> Any:
            """Pool every silo into one, then fit SteFFLe on that single silo."""
            for arg in require:
                if getattr(self, arg) is None:
                    raise ValueError(f"{name} needs {arg}; for the non-private row use FERMI")
            Xp, yp, sp = _pool(X, y, sensitive_features, silos)
            return SteFFLe.fit(self, Xp, yp, sensitive_features=sp, silos=None, eval_set=eval_set, **kwargs)

        namespace["fit"] = fit
    return type(name, (SteFFLe,), namespace)


FERMI = _configure(
    "FERMI",
    """Non-private central FERMI: SteFFLe with ``epsilon=None`` on the pooled data (one silo).

    Solves ``min_θ max_W L(θ) + λ mean_i ψ_i(θ, W)`` by stochastic gradient descent-ascent with no
    noise. Parameters are SteFFLe's except ``epsilon`` (fixed to None) and ``mode``.""",
    {"epsilon": None, "mode": "standard", "p_s": "pooled"},
    central=True,
)

DPFERMI = _configure(
    "DPFERMI",
    """Central DP-FERMI: SteFFLe on the pooled data (one silo) with a privacy budget ``epsilon``.

    One silo holds every record, so the per-silo (ISRL-DP) guarantee is central (ε, δ)-DP with
    respect to the sensitive attribute. ``epsilon`` is required (default 1.0). Parameters are
    SteFFLe's except ``mode``.""",
    {"mode": "standard"},
    central=True,
    defaults={"epsilon": 1.0},
    require=("epsilon",),
)

NonPrivateSteFFLe = _configure(
    "NonPrivateSteFFLe",
    """Federated, fair, non-private SteFFLe: ``epsilon=None`` (σ = 0, nothing is clipped or noised
    for privacy) on the silos as given. Parameters are SteFFLe's except ``epsilon``.""",
    {"epsilon": None},
    central=False,
)

