"""Review reproduction (not for main): a resumed record-mode fit must return the model the
uninterrupted fit returns. The Driver of a resumed run started with an empty Selector, so a best
checkpoint from before the interruption was forgotten (noise_seed 2: epoch 2 vs epoch 4 on main)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from pfair import SteFFLe
from support import fit_interrupted
from test_ledgers import FAST, fed


@pytest.mark.parametrize("noise_seed", [2, 5])
def test_a_resumed_fit_selects_the_checkpoint_the_uninterrupted_fit_selects(noise_seed):
    kw = dict(FAST, epochs=5, noise_seed=noise_seed, protect="record")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = SteFFLe(epsilon=1.0, **kw).fit(fed(), ledgers="new")
        f = fed()
        m = SteFFLe(epsilon=1.0, **kw)
        fit_interrupted(m, f, at_epoch=3)
        m.fit(f, resume=True)
    assert m.selected_epoch_ == whole.selected_epoch_
    np.testing.assert_array_equal(m.theta_, whole.theta_)
