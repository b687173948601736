"""Baselines SteFFLe is compared against (Gupta et al. 2024, §5).

* :class:`CentralERM` — non-private, non-fair minibatch SGD on the pooled data.
* :class:`FedAvg` — federated averaging with local SGD steps (non-private, non-fair).
* :class:`FERMI`, :class:`DPFERMI`, :class:`NonPrivateSteFFLe` — named configurations of
  :class:`pfair.SteFFLe` (central non-private, central DP, federated non-private).
* :class:`PFLD` — private and fair Lagrangian dual (Tran et al. 2021), central DP w.r.t. s.
* :class:`SingleShotSyntheticFL` — single-shot fair FL with bilevel synthetic data (Wu et al. 2024).

``docs/baselines.md`` describes what each computes, its privacy accounting and its deviations
from the paper.
"""

from pfair.baselines.configs import DPFERMI, FERMI, NonPrivateSteFFLe
from pfair.baselines.pfld import PFLD
from pfair.baselines.sgd import CentralERM, FedAvg
from pfair.baselines.single_shot import SingleShotSyntheticFL, SyntheticClientProblem

__all__ = [
    "CentralERM",
    "DPFERMI",
    "FERMI",
    "FedAvg",
    "NonPrivateSteFFLe",
    "PFLD",
    "SingleShotSyntheticFL",
    "SyntheticClientProblem",
]
