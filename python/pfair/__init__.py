"""pfair: private and fair federated learning with a Rust core.

Every silo's outgoing messages are differentially private with respect to the sensitive
attribute (ISRL-DP) while the model is trained for demographic parity, equalized odds or equal
opportunity with the FERMI min-max objective (SteFFLe, seed 003).
"""

from pfair import _core

__version__: str = _core.__version__

__all__ = ["__version__"]
