"""Set-up shared by every run, in process, on Flower and in the hybrid topologies.

* :func:`resolve_ledgers` (over :func:`ledgers_for`, which the hybrid topologies' sensitive silos
  use too): each silo's persistent ledger for a fit, bound to its data; :func:`begin_run`
  registers a run in it;
* :func:`released_proportions`: the p_s round — given proportions, the silos' DP histograms
  combined, or the pooled exact ones (not covered by the guarantee);
* :func:`build_server`: the :class:`~pfair.protocol.server.ServerParty` with the reply limits each
  silo's noise plan allows;
* :func:`initial_model`: θ₀ and W₀ (zeros, or a previous model for a warm start), checked.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pfair.exceptions import LedgerMismatch, PrivacyWarning
from pfair.federation import silo_fingerprints
from pfair.privacy.ledger import PrivacyLedger
from pfair.privacy.proportions import combine_histograms, public_proportions
from pfair.protocol.plan import RunPlan, inv_sqrt_proportions
from pfair.protocol.server import ServerParty, reply_limits
from pfair.settings import DELTA_WARN_SHARE, SteFFLeSettings, check_delta


def resolve_ledgers(settings: SteFFLeSettings, fed: Any, ledgers: Any) -> list:
    """Each silo's ledger for a fit: the ones passed (objects or JSON paths), fresh ones
    (``"new"``, for simulations), or by default the ledger the federation's silo already holds
    (created on its first private fit), so budgets persist across fits on one Federation."""
    return ledgers_for(settings, ledgers, sizes=fed.sizes, fingerprints=lambda: silo_fingerprints(fed.silos),
                       labels=list(range(fed.n_silos)), held=fed.silos,
                       legacy=[silo.legacy_fingerprint for silo in fed.silos])


def ledgers_for(settings: SteFFLeSettings, ledgers: Any, *, sizes: Sequence[int],
                fingerprints: Callable[[], Sequence[str]], labels: Sequence[Any], held: Sequence[Any] | None = None,
                legacy: Sequence[Any] | None = None, what: str = "silo") -> list:
    """The ledgers of the parties that spend budget (the silos of a standard run, the sensitive
    silos of a hybrid topology), one per entry of ``sizes`` (each party's number of records, which
    fixes its δ), each bound to its data (``fingerprints()``, computed only in a private fit) and
    checked against the budget asked for.

    ``ledgers``: ``"new"`` (fresh ledgers), a list of :class:`PrivacyLedger` objects or JSON paths
    (one per party; a path that does not exist yet is created there), or None: the ledger each
    object of ``held`` keeps in its ``ledger`` attribute (created on its first private fit), or
    fresh ledgers when nothing holds them. ``labels`` name the parties in the ledgers and errors,
    ``legacy`` computes each party's fingerprint as an older pfair made it (re-bound on a match)."""
    n = len(sizes)
    if not settings.private:
        if ledgers not in (None, "new"):
            raise ValueError("ledgers= applies to private fits only (epsilon is None)")
        return [None] * n

    near = [j for j in range(n)  # a vacuous δ is refused before any ledger is made or read
            if check_delta(settings.delta_for(sizes[j]), sizes[j], party=f"{what} {labels[j]}", warn=False)]
    if near:
        shown = ", ".join(f"{labels[j]} (delta={settings.delta_for(sizes[j]):g}, n={sizes[j]})" for j in near[:5])
        warnings.warn(f"{len(near)} {what}(s) have delta > {DELTA_WARN_SHARE:g}/n for their n records: {shown}"
                      f"{', ...' if len(near) > 5 else ''}; the standard requirement is delta much smaller than 1/n "
                      "(a delta near 1/n allows exposing a record outright with that probability). Pass a smaller "
                      "delta or merge small silos", PrivacyWarning, stacklevel=4)

    def fresh(j: int, path: Any = None) -> PrivacyLedger:
        return PrivacyLedger(epsilon=settings.epsilon, delta=settings.delta_for(sizes[j]), silo=labels[j], path=path)

    if (isinstance(ledgers, str) and ledgers == "new") or (ledgers is None and held is None):
        out = [fresh(j) for j in range(n)]
    elif ledgers is None:
        out = []
        for j, holder in enumerate(held):
            if holder.ledger is None:
                holder.ledger = fresh(j)
            out.append(holder.ledger)
    else:
        if isinstance(ledgers, (str, bytes)) or not isinstance(ledgers, Sequence) or len(ledgers) != n:
            raise ValueError(f"ledgers must be 'new', None or a list of {n} PrivacyLedger objects or JSON paths "
                             f"(one per {what})")
        out = []
        for j, item in enumerate(ledgers):
            if isinstance(item, PrivacyLedger):
                out.append(item)
                continue
            if not isinstance(item, (str, os.PathLike)):
                raise TypeError(f"ledgers[{j}] must be a PrivacyLedger or a path, got {type(item).__name__}")
            out.append(PrivacyLedger.load(item) if os.path.exists(item) else fresh(j, item))
    for j, (ledger, fingerprint) in enumerate(zip(out, fingerprints())):
        ledger.bind(fingerprint, legacy=legacy[j] if legacy is not None else None)
        check_budget_fits(settings, ledger, labels[j])
    return out


def begin_run(ledger: PrivacyLedger | None, plan: Any, run_id: str) -> bool:
    """Register run ``run_id`` of a party's noise ``plan`` in its ledger, when its rounds cost
    privacy (a ledger, and ``0 < z < ∞``): every later round is charged against this registration
    (a PLD plan prepays the whole run here). Returns whether the rounds are charged."""
    if ledger is None or plan is None or not 0 < plan.noise_multiplier < float("inf"):
        return False
    ledger.begin_run(run_id, sampling=plan.accounting, sample_rate=plan.sample_rate,
                     noise_multiplier=plan.noise_multiplier, planned_steps=plan.steps,
                     prepaid=plan.calibration == "pld")
    return True


def check_budget_fits(settings: SteFFLeSettings, ledger: PrivacyLedger, silo: Any) -> None:
    """Refuse a fit asking for more ε than the silo's ledger was made with."""
    if settings.epsilon > ledger.epsilon * (1 + 1e-12):
        raise LedgerMismatch(
            f"silo {silo}: epsilon={settings.epsilon:g} is more than its ledger's budget {ledger.epsilon:g}; a silo's "
            f"budget is fixed when its ledger is made. Fit with epsilon <= {ledger.epsilon:g} (what is left of it is "
            "what the fit gets), or, only if these records may carry a new budget, start new ledgers: "
            "fit(..., ledgers='new') or a new Federation in a simulation"
        )


def released_proportions(plan: RunPlan, *, groups: np.ndarray, classes: np.ndarray,
                         histograms: Callable[[], list] | None = None,
                         pooled: Callable[[], np.ndarray] | None = None,
                         group_names: Any = None, label_names: Any = None) -> np.ndarray:
    """Released ``p(s | block)`` (``blocks × k``): uniform and never used when nothing sent depends
    on s (λ = 0); the proportions the user gave (``"given"``: public knowledge); the silos' DP
    histograms (``histograms()`` releases and returns them, each charged to its silo's ledger)
    combined; or the pooled exact proportions
    (``pooled()``; reproducing the paper only, not covered by the guarantee)."""
    st = plan.settings
    if not st.sends_psi:
        return plan.uniform_proportions()
    if st.p_s_source == "given":
        return public_proportions(st.p_s, notion=st.notion, groups=groups, classes=classes, group_names=group_names,
                                  label_names=label_names)
    if st.p_s_source == "dp":
        if histograms is None:
            raise ValueError("p_s='dp' needs the silos' DP histograms")
        return combine_histograms(histograms())
    if pooled is None:
        raise ValueError("p_s='pooled' needs every silo's exact counts, which no silo sends here; use p_s='dp' or "
                         "public proportions")
    return pooled()


def build_server(plan: RunPlan, noise_plans: Mapping[int, Any], proportions: np.ndarray, *,
                 theta_len: int) -> ServerParty:
    """The server of a standard run: weights from the plan, reply limits from each silo's noise
    plan (a silo without a plan gets unchecked norms; it is never asked)."""
    st, inv = plan.settings, inv_sqrt_proportions(proportions)
    limits = [reply_limits(theta_len=int(theta_len), w_len=plan.w_len, settings=st, plan=noise_plans.get(j),
                           inv_sqrt_ps=inv) for j in range(plan.n_silos)]
    return ServerParty(settings=st, weights=plan.weights, limits=limits, block_len=plan.block_len,
                       rounds_per_epoch=plan.rounds_per_epoch)


def initial_model(plan: RunPlan, theta_len: int, init: tuple | None = None,
                  theta0: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """θ₀ (zeros, or ``theta0``: a deep model's initial parameters) and W₀ = 0; with ``init =
    (θ, W)`` a warm start from a previous model, whose shapes must match."""
    theta = np.zeros(int(theta_len)) if theta0 is None else np.asarray(theta0, dtype=np.float64).copy()
    w = np.zeros(plan.w_len)
    if init is None:
        return theta, w
    t0, w0 = (np.asarray(v, dtype=np.float64).ravel() for v in init)
    if t0.shape != theta.shape or w0.shape != w.shape:
        raise ValueError(f"warm_start: the previous model has θ of {t0.size} and W of {w0.size} entries; "
                         f"this federation needs {theta.size} and {w.size} (same features, groups, "
                         "classes and fairness notion)")
    return t0.copy(), w0.copy()
