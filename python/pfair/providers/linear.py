"""The linear-softmax model's gradient provider: the Rust kernel (``rust/src/psi/kernel.rs``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pfair.providers.base import BatchParts


class LinearProvider:
    """Parts of silo ``index`` of a Rust ``SiloSet`` (which holds the silos' data once), with the
    sampling denominator, protection mode and clip norms of ``config`` (a ``_core.SiloConfig``)."""

    def __init__(self, silo_set: Any, index: int, config: Any) -> None:
        self.silo_set = silo_set
        self.index = int(index)
        self.config = config
        self.n_records = int(silo_set.sizes[self.index])

    def parts(self, theta: np.ndarray, w: np.ndarray, inv_sqrt_ps: np.ndarray, batch: np.ndarray) -> BatchParts:
        out = self.silo_set.parts(self.index, theta, w, inv_sqrt_ps, batch, self.config)
        return BatchParts(**out)
