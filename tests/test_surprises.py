"""Silent surprises a new user met, each now a clear error or warning naming the argument and the fix."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from pfair import Federation, SteFFLe
from pfair.baselines import PFLD, CentralERM
from pfair.exceptions import PrivacyWarning

from support import toy_data

QUICK = dict(sampling="full_batch", epochs=5)


def data(n=200, seed=0):
    """s shifts every feature."""
    return toy_data(n, seed, shift=(0.5, 0.5, 0.5), noise=0.3, cuts=(0.3,))


# ----------------------------------------------------------------- a continuous sensitive attribute
def test_float_sensitive_attribute_is_refused_with_binning_advice():
    X, y, s, ids = data()
    age = np.random.default_rng(1).uniform(18, 90, len(y))  # one group per record before the fix
    for fit in (lambda: SteFFLe(**QUICK).fit(X, y, sensitive_features=age),
                lambda: PFLD(epsilon=None, **QUICK).fit(X, y, sensitive_features=age),
                lambda: Federation.from_arrays(X, y, sensitive_features=age, silos=ids)):
        with pytest.raises(ValueError, match=r"sensitive_features has 200 distinct values.*must be categorical"
                                             r".*pd\.cut\(sensitive_features"):
            fit()


def test_many_integer_groups_warn_and_few_do_not():
    X, y, s, ids = data(400)
    many = np.arange(400) % 25  # 25 groups of 16 records: legitimate but unusual
    with pytest.warns(UserWarning, match="sensitive_features has 25 groups.*bin it"):
        Federation.from_arrays(X, y, sensitive_features=many, silos=ids)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Federation.from_arrays(X, y, sensitive_features=np.arange(400) % 20, silos=ids)
        # Whole-number floats are categories, not a continuous attribute.
        Federation.from_arrays(X, y, sensitive_features=s.astype(float), silos=ids)


# ----------------------------------------------------------------- a continuous label
@pytest.mark.parametrize("make", [lambda: SteFFLe(**QUICK), lambda: CentralERM(**QUICK)])
def test_continuous_y_is_refused_at_fit(make):
    X, y, s, ids = data()
    income = X[:, 0] * 1000.0 + 20000.5
    name = type(make()).__name__
    with pytest.raises(ValueError, match=rf"y looks continuous \(regression target.*{name} is a classifier"):
        make().fit(X, income, sensitive_features=s)
    # Whole-number float labels are classes.
    make().fit(X, y.astype(float), sensitive_features=s)


# ----------------------------------------------------------------- a huge lam
def test_huge_lam_warns_naming_lam_and_the_fix():
    X, y, s, ids = data()
    lr = SteFFLe().lr_theta
    with pytest.warns(UserWarning, match=rf"lam=1e\+09 with lr_theta={lr:g}.*diverge.*lower lam"):
        SteFFLe(lam=1e9, **QUICK).fit(X, y, sensitive_features=s)
    with pytest.warns(UserWarning, match="lam=400 with lr_theta=0.5"):
        SteFFLe(lam=400, lr_theta=0.5).settings()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SteFFLe(lam=10.0).settings()
        SteFFLe(lam=400, lr_theta=0.1).settings()  # 40: a small step makes a large lam workable


# ----------------------------------------------------------------- a one-record silo
def test_one_record_silo_with_default_delta_is_refused_before_training():
    X, y, s, ids = data()
    ids = np.where(np.arange(len(y)) == 7, "tiny", "big")
    with pytest.raises(ValueError, match=r"silo 'tiny' has 1 record.*delta = 1/n².*Merge silo 'tiny'.*delta="):
        SteFFLe(epsilon=1.0, **QUICK).fit(X, y, sensitive_features=s, silos=ids)
    # With an explicit delta the one-record silo gets past that check, and refuses next: its one
    # record's gradient under the noise its budget buys is no signal (pfair.exceptions.BudgetTooSmall)
    from pfair.exceptions import BudgetTooSmall

    with pytest.raises(BudgetTooSmall, match=r"silo 1: .*noise-to-signal ratio"):
        SteFFLe(epsilon=1.0, delta=1e-5, **QUICK).fit(X, y, sensitive_features=s, silos=ids)
    # A budget large enough for it trains, at the explicit delta.
    m = SteFFLe(epsilon=8.0, delta=1e-5, **QUICK).fit(X, y, sensitive_features=s, silos=ids)
    assert (m.privacy_report_["delta"] == 1e-5).all()
    # Non-private fits never need delta.
    SteFFLe(epsilon=None, **QUICK).fit(X, y, sensitive_features=s, silos=ids)


# ----------------------------------------------------------------- silos as index arrays
def test_silos_as_a_list_of_index_arrays_equals_silo_ids():
    X, y, s, ids = data()
    parts = [np.flatnonzero(ids == j) for j in range(3)]
    a = SteFFLe(epsilon=None, **QUICK).fit(X, y, sensitive_features=s, silos=parts)
    b = SteFFLe(epsilon=None, **QUICK).fit(X, y, sensitive_features=s, silos=ids)
    np.testing.assert_array_equal(a.theta_, b.theta_)
    assert a.privacy_report_.shape[0] == 3
    c = CentralERM(**QUICK).fit(X, y, silos=[list(p) for p in parts])
    np.testing.assert_array_equal(c.theta_, CentralERM(**QUICK).fit(X, y, silos=ids).theta_)


@pytest.mark.parametrize("silos, message", [
    ([np.arange(0, 100), np.arange(90, 200)], "repeats rows already assigned"),
    ([np.arange(0, 100), np.arange(100, 150)], "50 rows .* are in no index array"),
    ([np.arange(0, 100), np.arange(100, 201)], "outside 0..199"),
    ([np.arange(0, 100) + 0.5, np.arange(100, 200)], "not integer row indices"),
    ([[0, 1], 2, 3], "one silo id per record .* or a list of index arrays"),
])
def test_bad_silo_index_arrays_explain_the_format(silos, message):
    X, y, s, ids = data()
    with pytest.raises(ValueError, match=message):
        SteFFLe(**QUICK).fit(X, y, sensitive_features=s, silos=silos)


# ----------------------------------------------------------------- a sweep without the __main__ guard
def test_sweep_script_without_main_guard_names_the_guard(tmp_path):
    script = tmp_path / "noguard.py"
    script.write_text(textwrap.dedent(f"""
        from pfair.experiments import run_sweep
        run_sweep({str(tmp_path / "out")!r}, methods="fedavg", datasets="german", epsilons=[1],
                  heterogeneities=[0], silos=[3], lams="0:1:2", seeds=1, epochs=1, batch_size=32,
                  progress=False, jobs=2)
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError") and 'if __name__ == "__main__":' in last, proc.stderr[-2000:]
    assert "another sweep is running" not in last


def test_private_fit_without_sensitive_features_is_refused_unless_lam_is_zero():
    X, y, s, ids = data()
    with pytest.raises(ValueError, match="needs sensitive_features="):
        SteFFLe(epsilon=1.0, **QUICK).fit(X, y, silos=ids)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        m = SteFFLe(lam=0.0, epsilon=1.0, protect="record", noise_seed=0, **QUICK).fit(X, y, silos=ids)
    assert np.isfinite(m.epsilon_spent_) and m.epsilon_spent_ <= 1.0 + 1e-9


# ----------------------------------------------------------------- the same through a CSV
def _table(n=400, seed=0):
    import pandas as pd

    rng = np.random.default_rng(seed)
    return pd.DataFrame({"income": rng.normal(50, 10, n).round(3), "sex": rng.choice(["f", "m"], n),
                         "age": rng.integers(18, 90, n) + 0.5, "x": rng.normal(size=n),
                         "default": rng.integers(0, 2, n), "zip": rng.integers(0, 40, n)})


def test_a_continuous_label_column_is_refused_naming_positive_label_and_binning(tmp_path, capsys):
    from pfair.cli import main
    from pfair.datasets import load_csv

    frame = _table()
    with pytest.raises(ValueError, match=r"label: column 'income' looks continuous .*positive_label=.*pd\.cut"):
        load_csv(frame, label="income", sensitive="sex")
    frame.to_csv(tmp_path / "t.csv", index=False)
    code = main(["train", "--csv", str(tmp_path / "t.csv"), "--label", "income", "--sensitive", "sex", "--epochs", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "looks continuous" in err and "pos_label" not in err
    # A binned label, or positive_label, is fine; many whole-number classes only warn.
    load_csv(frame.assign(income=(frame.income > 50).astype(int)), label="income", sensitive="sex")
    with pytest.warns(UserWarning, match=r"label: column 'zip' has 40 distinct values.*positive_label="):
        load_csv(frame, label="zip", sensitive="sex")


def test_a_continuous_sensitive_column_is_refused_with_binning_advice(tmp_path, capsys):
    from pfair.cli import main
    from pfair.datasets import load_csv

    frame = _table()
    with pytest.raises(ValueError, match=r"sensitive: frame\['age'\] has 72 distinct values .*pd\.cut\(frame\['age'\]"):
        load_csv(frame, label="default", sensitive="age")
    frame.to_csv(tmp_path / "t.csv", index=False)
    code = main(["train", "--csv", str(tmp_path / "t.csv"), "--label", "default", "--sensitive", "income",
                 "--epochs", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "must be categorical" in err and "no records in the test split" not in err
    binned = frame.assign(age=np.digitize(frame.age, [30, 50, 70]))
    assert load_csv(binned, label="default", sensitive="age").n_groups == 4
