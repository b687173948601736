"""Set-up shared by every run, in process, on Flower and in the hybrid topologies.

* :func:`resolve_ledgers`: each silo's persistent ledger for a fit, bound to its data;
* :func:`released_proportions`: the p_s round — public proportions, the silos' DP histograms
  combined, or the pooled exact ones (not covered by the guarantee);
* :func:`build_server`: the :class:`~pfair.protocol.server.ServerParty` with the reply limits each
  silo's noise plan allows;
* :func:`initial_model`: θ₀ and W₀ (zeros, or a previous model for a warm start), checked.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pfair.exceptions import LedgerMismatch
from pfair.federation import silo_fingerprints
from pfair.privacy.ledger import PrivacyLedger
from pfair.privacy.proportions import combine_histograms, public_proportions
from pfair.protocol.plan import RunPlan, inv_sqrt_proportions
from pfair.protocol.server import ServerParty, reply_limits
from pfair.settings import SteFFLeSettings


def resolve_ledgers(settings: SteFFLeSettings, fed: Any, ledgers: Any) -> list:
    """Each silo's ledger for a fit: the ones passed (objects or JSON paths), fresh ones
    (``"new"``, for simulations), or by default the ledger the federation's silo already holds
    (created on its first private fit), so budgets persist across fits on one Federation."""
    n = fed.n_silos
    if not settings.private:
        if ledgers not in (None, "new"):
            raise ValueError("ledgers= applies to private fits only (epsilon is None)")
        return [None] * n
    deltas = [settings.delta_for(size) for size in fed.sizes]
    if isinstance(ledgers, str) and ledgers == "new":
        out = [PrivacyLedger(epsilon=settings.epsilon, delta=deltas[j], silo=j) for j in range(n)]
    elif ledgers is None:
        out = []
        for j, silo in enumerate(fed.silos):
            if silo.ledger is None:
                silo.ledger = PrivacyLedger(epsilon=settings.epsilon, delta=deltas[j], silo=j)
            out.append(silo.ledger)
    else:
        if isinstance(ledgers, (str, bytes)) or not isinstance(ledgers, Sequence) or len(ledgers) != n:
            raise ValueError(f"ledgers must be 'new', None or a list of {n} PrivacyLedger objects or JSON paths "
                             "(one per silo)")
        out = []
        for j, item in enumerate(ledgers):
            if isinstance(item, PrivacyLedger):
                out.append(item)
                continue
            if not isinstance(item, (str, os.PathLike)):
                raise TypeError(f"ledgers[{j}] must be a PrivacyLedger or a path, got {type(item).__name__}")
            if os.path.exists(item):
                out.append(PrivacyLedger.load(item))
            else:
                out.append(PrivacyLedger(epsilon=settings.epsilon, delta=deltas[j], silo=j, path=item))
    for j, (ledger, fingerprint) in enumerate(zip(out, silo_fingerprints(fed.silos))):
        ledger.bind(fingerprint, legacy=fed.silos[j].legacy_fingerprint)
        check_budget_fits(settings, ledger, j)
    return out


def check_budget_fits(settings: SteFFLeSettings, ledger: PrivacyLedger, silo: Any) -> None:
    """Refuse a fit asking for more ε than the silo's ledger was made with."""
    if settings.epsilon > ledger.epsilon * (1 + 1e-12):
        raise LedgerMismatch(
            f"silo {silo}: epsilon={settings.epsilon:g} is more than its ledger's budget {ledger.epsilon:g}; a silo's "
            "budget is fixed when its ledger is made"
        )


def released_proportions(plan: RunPlan, *, groups: np.ndarray, classes: np.ndarray,
                         histograms: Callable[[], list] | None = None,
                         pooled: Callable[[], np.ndarray] | None = None) -> np.ndarray:
    """Released ``p(s | block)`` (``blocks × k``): uniform and never used when nothing sent depends
    on s (λ = 0); the user's public proportions; the silos' DP histograms (``histograms()`` releases
    and returns them, each charged to its silo's ledger) combined; or the pooled exact proportions
    (``pooled()``; reproducing the paper only, not covered by the guarantee)."""
    st = plan.settings
    if not st.sends_psi:
        return plan.uniform_proportions()
    if st.p_s_source == "public":
        return public_proportions(st.p_s, fairness=st.fairness, groups=groups, classes=classes,
                                  positive=st.positive_class)
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
