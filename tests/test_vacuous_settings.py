"""Privacy settings that guarantee nothing are refused or warned about, with the reason (issue 36,
item 5): δ ≥ 1/n_j (a random record in the clear is (0, 1/n)-DP), δ close to it, ε above the
documented limit of meaningful privacy, and user-given proportions that are not a distribution."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import pfair
from pfair import SteFFLe
from pfair.exceptions import PrivacyWarning
from pfair.flower.node import SiloNode
from pfair.settings import DELTA_WARN_SHARE, MEANINGFUL_EPSILON, check_delta

from support import toy_data, toy_federation

FAST = dict(epochs=1, batch_size=32, p_s=[0.5, 0.5])


def test_a_delta_of_one_over_n_or_more_is_refused_before_any_ledger():
    fed = toy_federation(n=300, n_silos=3, round_robin=True)  # 100 records a silo
    with pytest.raises(ValueError, match=r"delta=0\.5 is at least 1/n = 1/100.*protects nothing"):
        SteFFLe(epsilon=1.0, delta=0.5, **FAST).fit(fed)
    with pytest.raises(ValueError, match=r"delta=0\.01 is at least 1/n = 1/100"):
        SteFFLe(epsilon=1.0, delta=0.01, **FAST).fit(fed)


def test_a_delta_near_one_over_n_is_warned_and_the_default_only_for_tiny_silos():
    # 100 silos on 300 rows: 3 records each, default delta 1/9 — more than 0.1/3.
    fed = toy_federation(n=300, n_silos=100, round_robin=True)
    with pytest.warns(PrivacyWarning, match=r"delta=0\.111111 is more than 0\.1/n for its n = 3 records"):
        check_delta(pfair.settings.default_delta(3), 3, party="silo 0")
    # The default δ of such silos is refused (pfair._validation.MIN_DEFAULT_DELTA_RECORDS); a δ the
    # user chose is warned about, once for all the silos.
    with pytest.raises(ValueError, match=r"silo 0 has 3 records.*which is 0.111 for it"):
        SteFFLe(epsilon=1.0, epochs=1, batch_size=3, p_s=[0.5, 0.5], validation_share=0.0).fit(fed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SteFFLe(epsilon=1.0, delta=0.05, epochs=1, batch_size=3, p_s=[0.5, 0.5], validation_share=0.0).fit(fed)
    said = [str(w.message) for w in caught if "delta >" in str(w.message)]
    assert len(said) == 1 and said[0].startswith("100 silo(s) have delta > 0.1/n for their n records: 0 "
                                                 "(delta=0.05, n=3)"), said
    # The default 1/n² warns below 10 records only; a δ of 1e-6 never for n ≤ 10⁵.
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        check_delta(1 / 100, 10, party="silo")  # exactly 0.1/n: not above
        check_delta(1e-6, 100_000, party="silo")
    with pytest.warns(PrivacyWarning):
        check_delta(1 / 81, 9, party="silo")
    assert DELTA_WARN_SHARE == 0.1


def test_an_epsilon_above_the_meaningful_limit_is_warned_with_the_reason():
    with pytest.warns(PrivacyWarning, match=r"epsilon=1e\+09 is above 10, where a guarantee stops meaning much"):
        SteFFLe(epsilon=1e9, **FAST).settings()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        SteFFLe(epsilon=MEANINGFUL_EPSILON, **FAST).settings()


@pytest.mark.parametrize("p_s, name", [([0.6, 0.5], r"p_s"), ([[0.5, 0.5], [0.7, 0.4]], r"p_s\[1\]"),
                                       ([0.3, 0.3], r"p_s")])
def test_given_proportions_that_are_not_a_distribution_are_refused(p_s, name):
    total = float(np.sum(np.atleast_2d(p_s)[-1]))
    with pytest.raises(ValueError, match=rf"{name} must be proportions summing to 1 .*summing to {total:g}"):
        SteFFLe(epsilon=1.0, fairness="equalized_odds" if np.ndim(p_s) == 2 else "demographic_parity",
                p_s=p_s).settings()


def test_proportions_given_as_a_mapping_are_checked_at_the_fit():
    fed = toy_federation(n=300)
    with pytest.raises(ValueError, match=r"p_s must be proportions summing to 1 .*summing to 1\.1"):
        SteFFLe(epsilon=1.0, epochs=1, batch_size=32, p_s={0: 0.6, 1: 0.5}).fit(fed)
    # Typed figures that round (0.33 + 0.67, 1/3 three times) pass, and are rescaled.
    SteFFLe(epsilon=1.0, epochs=1, batch_size=32, p_s={0: 0.335, 1: 0.67}).fit(fed)


def test_a_node_refuses_a_vacuous_delta_and_warns_about_its_epsilon(tmp_path):
    X, y, s, _ = toy_data(n=400)
    shard = pfair.datasets.write_shard(tmp_path / "silo0.csv", X, y, s)
    cfg = {"data-path": str(shard), "state-dir": str(tmp_path / "state"), "silo-id": 0, "epsilon": 2.0,
           "n-groups": 2, "n-classes": 2, "delta": 0.5}
    with pytest.raises(ValueError, match=r"silo 0 \(node config delta\): delta=0\.5 is at least 1/n = 1/400"):
        SiloNode(cfg, n_groups=2, n_classes=2).ledger()
    assert not (tmp_path / "state" / "ledger.json").exists()
    with pytest.warns(PrivacyWarning, match="node config epsilon=50 is above 10"):
        SiloNode({**cfg, "epsilon": 50.0, "delta": 1e-6}, n_groups=2, n_classes=2)
