"""The registry of methods a sweep can run: name → estimator, knob, privacy, federation.

Every method of a sweep is swept over one scalar *knob* (``--lam`` on the command line), which
is mapped onto the hyper-parameter that trades accuracy for fairness in that method::

    name                 estimator                           knob             private  federated
    steffle              pfair.SteFFLe                       lam              yes      yes
    nonprivate_steffle   pfair.baselines.NonPrivateSteFFLe   lam              no       yes
    fermi                pfair.baselines.FERMI               lam              no       no (pooled)
    dp_fermi             pfair.baselines.DPFERMI             lam              yes      no (pooled)
    pfld                 pfair.baselines.PFLD                lam_max          yes      no (pooled)
    single_shot          pfair.baselines.SingleShotSyntheticFL  rho_o = 10·v  no       yes
    fedavg               pfair.baselines.FedAvg              none             no       yes
    central_erm          pfair.baselines.CentralERM          none             no       no (pooled)
    eg                   experiments.reference.ExponentiatedGradientLR  difference_bound = v  no  no (pooled)

The knob value v becomes ``hyper-parameter = scale · v``: scale 1 for λ (SteFFLe, FERMI,
DP-FERMI) and λ_max (PF-LD, whose multipliers live in [0, λ_max], so λ_max plays λ's role), and
scale 10 for the single-shot method's covariance penalty ρ_o, so that the paper's λ ∈ [0, 2]
spans ρ_o ∈ [0, 20] around the single-shot method's default ρ_o = 10. fairlearn's ExponentiatedGradient
(``eg``) takes its constraint bound ``difference_bound`` = v, so for it a *smaller* knob is fairer.
Methods without a knob run once per grid point (knob = NaN); methods that are not private run
once with ε = ∞; methods that ignore the fairness notion run once with ``fairness = "any"``; and
``eg``, which pools the records and is deterministic given them, runs once per data set, notion
and seed whatever the partition (see :mod:`pfair.experiments.sweep`).

Fixed hyper-parameters are the estimators' defaults, except ``epochs`` and ``batch_size``
(shared by every SGD-based method and set by the sweep), ``track_history=False`` and
``progress=False``. ``overrides`` (``--param METHOD.NAME=VALUE``) change any other one.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

__all__ = ["METHODS", "MethodSpec", "get_method", "check_methods", "FAIRNESS_CHOICES", "violation_column"]

#: Fairness notions a sweep can target, and the column of the CSV that measures each.
FAIRNESS_CHOICES: dict[str, str] = {
    "demographic_parity": "demographic_parity_difference",
    "equalized_odds": "equalized_odds_difference",
}


def violation_column(fairness: str) -> str:
    """The CSV column holding the violation of ``fairness`` (``demographic_parity_difference`` or
    ``equalized_odds_difference``, fairlearn's names)."""
    if fairness not in FAIRNESS_CHOICES:
        raise ValueError(f"fairness={fairness!r} is not supported; choose one of {', '.join(FAIRNESS_CHOICES)}")
    return FAIRNESS_CHOICES[fairness]


# Each method's class is imported when a sweep asks for it: `pfair`'s start reads this registry (the
# sweep parser's choices) and loads no scikit-learn.
def _steffle() -> type:
    from pfair.estimators import SteFFLe

    return SteFFLe


def _eg() -> type:
    from pfair.experiments.reference import ExponentiatedGradientLR

    return ExponentiatedGradientLR


def _baseline(name: str) -> Callable[[], type]:
    def factory() -> type:
        from pfair import baselines

        return getattr(baselines, name)

    return factory


@dataclass(frozen=True)
class MethodSpec:
    """How a sweep builds and reads one method.

    Attributes
    ----------
    name : the name used on the command line and in the ``method`` column.
    estimator : zero-argument callable returning the estimator class (imported lazily).
    knob : the hyper-parameter the sweep's knob sets, or None (the method runs once per grid
        point with knob = NaN).
    knob_scale : hyper-parameter value = ``knob_scale · knob``.
    private : whether the method takes ``epsilon`` (and so runs once per ε); otherwise it runs
        once with ε = ∞.
    federated : whether the model is trained across silos (False: the silos are pooled, so the
        partition only fixes the order of the records).
    fairness_aware : whether ``fairness=`` is passed to the estimator.
    description : one line for ``pfair sweep --help`` and the docs.
    step_size : the name of the method's step-size hyper-parameter (the one a tuning grid
        varies next to the knob), or None.
    uses_partition : False when the fit does not depend on the partition into silos at all
        (pooled and deterministic given the records): the sweep then runs it once per data set,
        notion and seed, and the summary places it in every (h, N).
    """

    name: str
    estimator: Callable[[], type]
    knob: str | None
    knob_scale: float
    private: bool
    federated: bool
    fairness_aware: bool
    description: str
    step_size: str | None = None
    uses_partition: bool = True

    def parameters(self) -> list[str]:
        """Names of the estimator's ``__init__`` parameters."""
        sig = inspect.signature(self.estimator().__init__)
        return [p for p in sig.parameters if p != "self"]

    def hyper_parameter(self, knob: float) -> float:
        """The value the knob gives to :attr:`knob` (NaN when the method has no knob)."""
        return math.nan if self.knob is None else self.knob_scale * float(knob)

    def build(self, *, knob: float, fairness: str, epsilon: float, epochs: int, batch_size: int | str, seed: int,
              overrides: Mapping[str, Any] | None = None) -> Any:
        """An unfitted estimator for one cell of the grid.

        ``epsilon`` is ignored (must be ∞) for non-private methods; ``epochs``/``batch_size`` are
        passed to the methods that take them; ``overrides`` are passed last and win."""
        accepted = set(self.parameters())
        kwargs: dict[str, Any] = {"seed": int(seed)}
        # A sweep is a simulation run by one analyst: its noise is keyed by the cell's seed
        # (``noise_seed``) so that cells are reproducible and resumable. ``runs.csv`` says so.
        batch = batch_size if isinstance(batch_size, str) else int(batch_size)  # "auto": the estimator's rule
        for name, value in (("epochs", int(epochs)), ("batch_size", batch),
                            ("track_history", False), ("progress", False), ("noise_seed", int(seed))):
            if name in accepted:
                kwargs[name] = value
        if self.fairness_aware:
            kwargs["fairness"] = fairness
        if self.private:
            if not math.isfinite(epsilon):
                raise ValueError(f"method {self.name!r} is private and needs a finite epsilon, got {epsilon}")
            kwargs["epsilon"] = float(epsilon)
        if self.knob is not None:
            kwargs[self.knob] = self.hyper_parameter(knob)
        for name, value in (overrides or {}).items():
            if name not in accepted:
                raise ValueError(f"param: {name!r} is not a parameter of {self.name} "
                                 f"({self.estimator().__name__}); valid: {sorted(accepted)}")
            kwargs[name] = value
        return self.estimator()(**kwargs)


METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in (
        MethodSpec("steffle", _steffle, "lam", 1.0, private=True, federated=True, fairness_aware=True,
                   description="SteFFLe: per-silo ISRL-DP fair federated learning (Gupta et al. 2024)",
                   step_size="lr_theta"),
        MethodSpec("pfld", _baseline("PFLD"), "lam_max", 1.0, private=True, federated=False, fairness_aware=True,
                   description="PF-LD: private fair Lagrangian dual, central DP (Tran et al. 2021)",
                   step_size="lr"),
        MethodSpec("fedavg", _baseline("FedAvg"), None, 1.0, private=False, federated=True, fairness_aware=False,
                   description="FedAvg: non-private, non-fair federated averaging", step_size="lr"),
        MethodSpec("central_erm", _baseline("CentralERM"), None, 1.0, private=False, federated=False,
                   fairness_aware=False, description="central ERM: non-private, non-fair SGD on pooled data",
                   step_size="lr"),
        MethodSpec("fermi", _baseline("FERMI"), "lam", 1.0, private=False, federated=False, fairness_aware=True,
                   description="FERMI: non-private fair, pooled data", step_size="lr_theta"),
        MethodSpec("dp_fermi", _baseline("DPFERMI"), "lam", 1.0, private=True, federated=False,
                   fairness_aware=True, description="DP-FERMI: central DP fair, pooled data", step_size="lr_theta"),
        MethodSpec("nonprivate_steffle", _baseline("NonPrivateSteFFLe"), "lam", 1.0, private=False, federated=True,
                   fairness_aware=True, description="SteFFLe without noise (sigma = 0), federated",
                   step_size="lr_theta"),
        MethodSpec("single_shot", _baseline("SingleShotSyntheticFL"), "rho_o", 10.0, private=False, federated=True,
                   fairness_aware=False,
                   description="single-shot synthetic-data fair FL, rho_o = 10 x knob, no DP claim (Wu et al. 2024)",
                   step_size="outer_lr"),
        MethodSpec("eg", _eg, "difference_bound", 1.0, private=False, federated=False, fairness_aware=True,
                   description="fairlearn ExponentiatedGradient over logistic regression, difference_bound = knob "
                               "(smaller is fairer), non-private, pooled", step_size="eta0", uses_partition=False),
    )
}


def get_method(name: str) -> MethodSpec:
    """The registry entry of ``name``; ``ValueError`` listing the valid names otherwise."""
    if name not in METHODS:
        raise ValueError(f"methods: unknown method {name!r}; choose from {', '.join(METHODS)}")
    return METHODS[name]


def check_methods(names: Any) -> list[str]:
    """Validated, de-duplicated method names in the given order (a comma-separated string or a list)."""
    if isinstance(names, str):
        names = [n for n in names.split(",")]
    out: list[str] = []
    for raw in names:
        name = str(raw).strip()
        if not name:
            continue
        get_method(name)
        if name not in out:
            out.append(name)
    if not out:
        raise ValueError(f"methods: no method given; choose from {', '.join(METHODS)}")
    return out
