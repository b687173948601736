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
"""

from pfair import _core
from pfair import datasets, metrics, partition, privacy
from pfair.estimators import SteFFLe
from pfair.federation import Federation

__version__: str = _core.__version__

__all__ = ["Federation", "SteFFLe", "datasets", "metrics", "partition", "privacy", "__version__"]
