"""``positive_class``: a class index or the label itself, and which label an index picks is said
out loud where the labels are not 0 and 1 (before, string labels made ``"denied"`` the positive
class of ``["approved", "denied"]`` silently, and ``positive_class="approved"`` raised a bare
TypeError)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from pfair import SteFFLe, _warn
from pfair.exceptions import NonPrivateFitWarning

from support import toy_data

FIT = dict(epochs=4, sampling="full_batch", epsilon=None, lam=2.0, fairness="equal_opportunity", progress=False)


def data():
    X, y, s, ids = toy_data(600, 0, shift=(0.5, 0.5, 0.5), noise=0.3)
    return X, np.where(y == 1, "denied", "approved"), s, ids


def fit(X, y, s, ids, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateFitWarning)
        return SteFFLe(**FIT, **kw).fit(X, y, sensitive_features=s, silos=ids)


def test_a_label_picks_its_class_and_trains_as_its_index():
    X, y, s, ids = data()
    by_label = fit(X, y, s, ids, positive_class="approved")
    _warn.forget()
    with pytest.warns(UserWarning, match=r"positive_class=0 is a class index: the positive class of "
                                         r"fairness='equal_opportunity' is label 'approved' \(classes_ = "
                                         r"\['approved', 'denied'\]\)"):
        by_index = fit(X, y, s, ids, positive_class=0)
    np.testing.assert_array_equal(by_label.theta_, by_index.theta_)
    assert by_label.positive_class == "approved"  # the parameter stays as given (scikit-learn's rule)
    # The other label is another model: the penalty reads the other class's block.
    assert not np.array_equal(fit(X, y, s, ids, positive_class="denied").theta_, by_label.theta_)


def test_the_default_index_on_string_labels_is_warned_and_labels_0_and_1_are_not():
    X, y, s, ids = data()
    _warn.forget()
    with pytest.warns(UserWarning, match=r"positive_class=1 .* is label 'denied'.*positive_class='denied'"):
        fit(X, y, s, ids)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.simplefilter("ignore", NonPrivateFitWarning)
        SteFFLe(**FIT).fit(X, (y == "denied").astype(int), sensitive_features=s, silos=ids)  # labels 0 and 1
        # A notion that reads no positive class says nothing about it.
        SteFFLe(**{**FIT, "fairness": "demographic_parity"}).fit(X, y, sensitive_features=s, silos=ids)


def test_an_unknown_label_or_an_index_out_of_range_names_the_labels():
    X, y, s, ids = data()
    with pytest.raises(ValueError, match=r"positive_class='yes' is not among the labels of y \(classes_\) "
                                         r"\['approved', 'denied'\]"):
        fit(X, y, s, ids, positive_class="yes")
    y12 = np.where(y == "denied", 2, 1)
    with pytest.raises(ValueError, match=r"positive_class=2 is not a class index in 0..1 \(classes_ = \[1, 2\]\); "
                                         r"positive_class is an index into classes_, and label 2 is index 1"):
        fit(X, y12, s, ids, positive_class=2)


def test_a_label_is_looked_up_by_name_in_a_federation_that_holds_codes():
    """The review's find: load_csv and the bundled tables hold labels as codes 0..l−1 with their
    names in label_names; positive_class="approved" was refused there and positive_class=1 picked
    'denied' without a word."""
    import pfair
    from pfair import Federation

    data = pfair.datasets.make_synthetic(600, 3, silos=3, seed=0)  # label_names class_0, class_1
    fed = Federation.from_dataset(data, data.attrs_train["silo"].to_numpy())
    kw = dict(FIT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateFitWarning)
        named = SteFFLe(**kw, positive_class="class_0").fit(fed)
        _warn.forget()
        with pytest.warns(UserWarning, match=r"positive_class=0 is a class index.*is label 'class_0'"):
            indexed = SteFFLe(**kw, positive_class=0).fit(fed)
    np.testing.assert_array_equal(named.theta_, indexed.theta_)


def test_settings_with_a_label_used_without_a_fit_say_to_pass_the_index():
    from pfair.protocol.plan import RunPlan

    st = SteFFLe(fairness="equal_opportunity", positive_class="approved").settings()
    with pytest.raises(ValueError, match=r"positive_class='approved' is a label: .*pass the class index"):
        RunPlan.build(st, [100, 100], n_groups=2, n_classes=2)
