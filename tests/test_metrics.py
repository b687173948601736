"""Tests for pfair.metrics: agreement with fairlearn, hand-computed examples, invariances, errors."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from fairlearn.metrics import (
    MetricFrame,
    demographic_parity_difference,
    equalized_odds_difference,
    true_positive_rate,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from pfair.metrics import (
    accuracy_parity_violation,
    decision_boundary_covariance,
    demographic_parity_violation,
    equal_opportunity_violation,
    equalized_odds_violation,
    fairness_report,
    misclassification_error,
    statistical_parity_difference,
    trivial_error,
)

FAIRLEARN = settings(max_examples=150, deadline=None)


# ----------------------------------------------------------------------------------------------
# Strategies
# ----------------------------------------------------------------------------------------------


@st.composite
def tasks(draw, n_labels=None, n_groups=None, max_extra=60):
    """(y_true, y_pred, s) in which every (group, true class) cell has at least one record.

    Defaults: l = 2 classes, k in {2, 3, 4} groups.
    The covering block makes every conditional rate defined, so fairlearn (which returns 0 for an
    undefined TPR) and pfair compute over the same groups.
    """
    l = draw(n_labels if n_labels is not None else st.just(2))
    k = draw(n_groups if n_groups is not None else st.integers(2, 4))
    cover_s = np.repeat(np.arange(k), l)
    cover_y = np.tile(np.arange(l), k)
    cover_p = np.array(draw(st.lists(st.integers(0, l - 1), min_size=k * l, max_size=k * l)))
    m = draw(st.integers(0, max_extra))
    extra = st.lists(st.integers(0, 10**6), min_size=m, max_size=m)
    ys = np.array(draw(extra), dtype=np.int64) % l
    ps = np.array(draw(extra), dtype=np.int64) % l
    ss = np.array(draw(extra), dtype=np.int64) % k
    y = np.concatenate([cover_y, ys])
    p = np.concatenate([cover_p, ps])
    s = np.concatenate([cover_s, ss])
    perm = np.array(draw(st.permutations(range(y.size))))
    return y[perm], p[perm], s[perm]


def _from_table(table):
    """Arrays (y_true, y_pred, s) from counts ``table[group][true class][predicted class]``."""
    y, p, s = [], [], []
    for g, rows in enumerate(table):
        for true_class, counts in enumerate(rows):
            for pred_class, n in enumerate(counts):
                y += [true_class] * n
                p += [pred_class] * n
                s += [g] * n
    return np.array(y), np.array(p), np.array(s)


# ----------------------------------------------------------------------------------------------
# Agreement with fairlearn on binary tasks, k in {2, 3, 4}
# ----------------------------------------------------------------------------------------------


def fairlearn_check(test):
    """The test run on FAIRLEARN's number of random binary tasks; marked slow (seconds each)."""
    return pytest.mark.slow(FAIRLEARN(given(tasks())(test)))


@fairlearn_check
def test_dp_matches_fairlearn_demographic_parity_difference(task):
    y, p, s = task
    ours = demographic_parity_violation(y, p, sensitive_features=s)
    theirs = demographic_parity_difference(y, p, sensitive_features=s)
    assert ours == pytest.approx(theirs, abs=1e-12)


@fairlearn_check
def test_eo_matches_fairlearn_equalized_odds_difference(task):
    # fairlearn's default is agg="worst_case": max(TPR gap, FPR gap) between groups. For l = 2,
    # y' = 1 gives the TPR (y = 1) and FPR (y = 0) gaps and y' = 0 gives the same two gaps again
    # (1 - rate), so both forms of eq. 12 equal it.
    y, p, s = task
    theirs = equalized_odds_difference(y, p, sensitive_features=s)
    assert equalized_odds_violation(y, p, sensitive_features=s) == pytest.approx(theirs, abs=1e-12)
    assert equalized_odds_violation(
        y, p, sensitive_features=s, conditioning="one_vs_rest"
    ) == pytest.approx(theirs, abs=1e-12)


@fairlearn_check
def test_eopp_matches_fairlearn_tpr_difference(task):
    y, p, s = task
    frame = MetricFrame(metrics=true_positive_rate, y_true=y, y_pred=p, sensitive_features=s)
    ours = equal_opportunity_violation(y, p, sensitive_features=s, pos_label=1)
    assert ours == pytest.approx(frame.difference(method="between_groups"), abs=1e-12)


@fairlearn_check
def test_accuracy_parity_matches_fairlearn_accuracy_difference(task):
    from sklearn.metrics import accuracy_score

    y, p, s = task
    frame = MetricFrame(metrics=accuracy_score, y_true=y, y_pred=p, sensitive_features=s)
    ours = accuracy_parity_violation(y, p, sensitive_features=s)
    assert ours == pytest.approx(frame.difference(method="between_groups"), abs=1e-12)


# ----------------------------------------------------------------------------------------------
# Hand-computed example, k = 3 groups, l = 3 classes
# ----------------------------------------------------------------------------------------------

# HAND[g][y] = counts of predictions (ŷ=0, ŷ=1, ŷ=2) among records of group g and true class y.
HAND = [
    [(2, 1, 0), (0, 2, 1), (1, 0, 2)],  # group 0: 9 records
    [(1, 2, 0), (1, 1, 0), (0, 1, 1)],  # group 1: 7 records
    [(3, 0, 1), (0, 1, 1), (0, 1, 1)],  # group 2: 8 records
]


def _exact(x):
    return pytest.approx(float(x), abs=1e-12)


def test_hand_example_dp():
    # P[ŷ | s]: g0 (3,3,3)/9, g1 (2,4,1)/7, g2 (3,2,3)/8.
    # ŷ=0: 3/8 - 2/7 = 5/56; ŷ=1: 4/7 - 1/4 = 9/28; ŷ=2: 3/8 - 1/7 = 13/56.  Max: 9/28.
    y, p, s = _from_table(HAND)
    assert demographic_parity_violation(y, p, sensitive_features=s) == _exact(Fraction(9, 28))


def test_hand_example_eo_per_class():
    # y=0: g0 (2/3,1/3,0), g1 (1/3,2/3,0), g2 (3/4,0,1/4) -> gaps 5/12, 2/3, 1/4
    # y=1: g0 (0,2/3,1/3), g1 (1/2,1/2,0), g2 (0,1/2,1/2) -> gaps 1/2, 1/6, 1/2
    # y=2: g0 (1/3,0,2/3), g1 (0,1/2,1/2), g2 (0,1/2,1/2) -> gaps 1/3, 1/2, 1/6.  Max: 2/3.
    y, p, s = _from_table(HAND)
    assert equalized_odds_violation(y, p, sensitive_features=s) == _exact(Fraction(2, 3))


def test_hand_example_eo_one_vs_rest():
    # class 0: TPR 2/3, 1/3, 3/4 (gap 5/12); P[ŷ=0 | y≠0] 1/6, 1/4, 0 (gap 1/4)
    # class 1: TPR 2/3, 1/2, 1/2 (gap 1/6); P[ŷ=1 | y≠1] 1/6, 3/5, 1/6 (gap 13/30)
    # class 2: TPR 2/3, 1/2, 1/2 (gap 1/6); P[ŷ=2 | y≠2] 1/6, 0, 1/3 (gap 1/3).  Max: 13/30.
    y, p, s = _from_table(HAND)
    got = equalized_odds_violation(y, p, sensitive_features=s, conditioning="one_vs_rest")
    assert got == _exact(Fraction(13, 30))


def test_hand_example_eopp_accuracy_error_trivial():
    y, p, s = _from_table(HAND)
    # TPR of class 1: 2/3, 1/2, 1/2; of class 0: 2/3, 1/3, 3/4.
    assert equal_opportunity_violation(y, p, sensitive_features=s) == _exact(Fraction(1, 6))
    got = equal_opportunity_violation(y, p, sensitive_features=s, pos_label=0)
    assert got == _exact(Fraction(5, 12))
    # accuracy per group: 6/9, 3/7, 5/8 -> 2/3 - 3/7 = 5/21
    assert accuracy_parity_violation(y, p, sensitive_features=s) == _exact(Fraction(5, 21))
    # 14 of 24 correct
    assert misclassification_error(y, p) == _exact(Fraction(10, 24))
    # true class counts 10, 7, 7 of 24 -> best constant predictor errs on 14
    assert trivial_error(y) == _exact(Fraction(14, 24))


def test_hand_example_spd():
    _, p, s = _from_table(HAND)
    # P[ŷ=1 | s=2] - P[ŷ=1 | s=0] = 2/8 - 3/9
    got = statistical_parity_difference(p, sensitive_features=s, group=2, reference_group=0)
    assert got == _exact(Fraction(2, 8) - Fraction(3, 9))


def test_report_on_string_labels_leaves_out_only_the_positive_label_metric_nobody_named():
    """Before: any string labels raised "pos_label=1 is not among the labels" from the bundle."""
    y, p, s = _from_table(HAND)
    names = np.array(["no", "yes", "maybe", "never"])[: max(y.max(), p.max()) + 1]  # "yes" is label 1
    words = fairness_report(names[y], names[p], sensitive_features=s)
    codes = fairness_report(y, p, sensitive_features=s)
    assert np.isnan(words["equal_opportunity_difference"]) and np.isnan(words["eopp_violation"])
    for key in ("test_error", "trivial_error", "demographic_parity_difference", "equalized_odds_difference",
                "accuracy_parity_violation"):
        assert words[key] == codes[key], key
    named = fairness_report(names[y], names[p], sensitive_features=s, pos_label="yes")
    assert named["equal_opportunity_difference"] == codes["equal_opportunity_difference"]
    with pytest.raises(ValueError, match=r"pos_label=1 is not among the labels found in y_true/y_pred"):
        fairness_report(names[y], names[p], sensitive_features=s, pos_label=1)  # named, and wrong: said


def test_hand_example_report():
    y, p, s = _from_table(HAND)
    report = fairness_report(y, p, sensitive_features=s)
    assert list(report) == [
        "test_error",
        "trivial_error",
        "demographic_parity_difference",
        "equalized_odds_difference",
        "equal_opportunity_difference",
        "accuracy_parity_violation",
        "dp_violation",
        "eo_violation",
        "eopp_violation",
    ]
    expected = [
        Fraction(5, 12),
        Fraction(7, 12),
        Fraction(9, 28),
        Fraction(2, 3),
        Fraction(1, 6),
        Fraction(5, 21),
        Fraction(9, 28),
        Fraction(2, 3),
        Fraction(1, 6),
    ]
    assert list(report.values()) == [_exact(v) for v in expected]


def test_hand_example_decision_boundary_covariance():
    # mean d = 1/3, p_g = 1/3, group sums of d: 0, 3, -1 -> Cov_g = sum_g/6 - 1/9
    d = [1.0, -1.0, 2.0, 1.0, -3.0, 2.0]
    s = ["a", "a", "b", "b", "c", "c"]
    vec = decision_boundary_covariance(d, sensitive_features=s, per_group=True)
    np.testing.assert_allclose(vec, [-1 / 9, 7 / 18, -5 / 18], atol=1e-12)
    assert decision_boundary_covariance(d, sensitive_features=s) == _exact(Fraction(7, 18))


def test_eo_forms_differ_when_equalized_odds_holds():
    # Same P[ŷ | y] in both groups (class 0 -> half 0, half 1; class 1 -> 1; class 2 -> 2) but
    # different class mixes: per-class EO is 0; the pooled y≠1 rate is 1/4 vs 1/8.
    table = [
        [(1, 1, 0), (0, 2, 0), (0, 0, 2)],
        [(1, 1, 0), (0, 2, 0), (0, 0, 6)],
    ]
    y, p, s = _from_table(table)
    assert equalized_odds_violation(y, p, sensitive_features=s) == 0.0
    got = equalized_odds_violation(y, p, sensitive_features=s, conditioning="one_vs_rest")
    assert got == _exact(Fraction(1, 8))


def test_spd_of_a_model_that_never_predicts_pos_label_is_zero():
    assert statistical_parity_difference([0, 0, 0, 0], sensitive_features=S) == 0.0
    assert statistical_parity_difference(["no"] * 4, sensitive_features=S, pos_label="yes") == 0.0


def test_binary_two_groups_spd_and_covariance_match_seed_004():
    s = np.array([0, 0, 0, 1, 1, 1, 1])
    p = np.array([1, 0, 0, 1, 1, 1, 0])
    # |{ŷ=1, s=1}| / |{s=1}| - |{ŷ=1, s=0}| / |{s=0}| = 3/4 - 1/3
    assert statistical_parity_difference(p, sensitive_features=s) == _exact(
        Fraction(3, 4) - Fraction(1, 3)
    )
    assert demographic_parity_violation(None, p, sensitive_features=s) == _exact(
        Fraction(3, 4) - Fraction(1, 3)
    )
    d = np.array([0.5, -1.0, 2.0, 0.25, 3.0, -0.5, 1.0])
    seed_cov = np.mean((s - s.mean()) * d)
    vec = decision_boundary_covariance(d, sensitive_features=s, per_group=True)
    np.testing.assert_allclose(vec, [-seed_cov, seed_cov], atol=1e-12)


# ----------------------------------------------------------------------------------------------
# Properties: relabelling invariance, constant predictors, bounds, consistency
# ----------------------------------------------------------------------------------------------

MULTI = tasks(n_labels=st.integers(2, 4), n_groups=st.integers(2, 5))


@settings(max_examples=100, deadline=None)
@given(MULTI, st.randoms(use_true_random=False))
def test_invariant_to_relabelling_groups_and_classes(task, rnd):
    y, p, s = task
    k, l = s.max() + 1, max(y.max(), p.max()) + 1
    group_names = [f"group-{i}" for i in range(k)]
    rnd.shuffle(group_names)
    class_names = [f"class-{i}" for i in range(l)]
    rnd.shuffle(class_names)
    s2 = np.array(group_names, dtype=object)[s]
    y2 = np.array(class_names, dtype=object)[y]
    p2 = np.array(class_names, dtype=object)[p]
    pos = 1
    before = fairness_report(y, p, sensitive_features=s, pos_label=pos)
    after = fairness_report(y2, p2, sensitive_features=s2, pos_label=class_names[pos])
    assert after == pytest.approx(before, abs=1e-12)
    for conditioning in ("per_class", "one_vs_rest"):
        a = equalized_odds_violation(y, p, sensitive_features=s, conditioning=conditioning)
        b = equalized_odds_violation(y2, p2, sensitive_features=s2, conditioning=conditioning)
        assert a == pytest.approx(b, abs=1e-12)
    d = np.linspace(-1.0, 2.0, y.size) ** 2
    assert decision_boundary_covariance(d, sensitive_features=s) == pytest.approx(
        decision_boundary_covariance(d, sensitive_features=s2), abs=1e-12
    )


@settings(max_examples=100, deadline=None)
@given(MULTI, st.integers(0, 3))
def test_constant_predictor_has_zero_violations(task, constant):
    y, _, s = task
    p = np.full_like(y, constant)
    for conditioning in ("per_class", "one_vs_rest"):
        assert equalized_odds_violation(y, p, sensitive_features=s, conditioning=conditioning) == 0
    assert demographic_parity_violation(y, p, sensitive_features=s) == 0
    assert equal_opportunity_violation(y, p, sensitive_features=s, pos_label=1) == 0
    if constant == 1:
        assert (
            statistical_parity_difference(p, sensitive_features=s, group=1, reference_group=0) == 0
        )
    # the best constant predictor's error is the trivial error
    best = np.bincount(y).argmax()
    assert misclassification_error(y, np.full_like(y, best)) == pytest.approx(trivial_error(y))


@settings(max_examples=100, deadline=None)
@given(MULTI)
def test_bounds_and_spd_below_dp(task):
    y, p, s = task
    report = fairness_report(y, p, sensitive_features=s)
    for value in report.values():
        assert 0.0 <= value <= 1.0
    assert report["test_error"] >= 0.0
    dp = report["dp_violation"]
    for g in np.unique(s):
        for r in np.unique(s):
            spd = statistical_parity_difference(
                p, sensitive_features=s, pos_label=0, group=g, reference_group=r
            )
            assert abs(spd) <= dp + 1e-12
    vec = decision_boundary_covariance(p.astype(float), sensitive_features=s, per_group=True)
    assert vec.sum() == pytest.approx(0.0, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(tasks(n_groups=st.just(2)))
def test_binary_two_groups_abs_spd_equals_dp(task):
    y, p, s = task
    dp = demographic_parity_violation(y, p, sensitive_features=s)
    assert abs(statistical_parity_difference(p, sensitive_features=s)) == pytest.approx(dp)


def test_accepts_pandas_lists_and_column_vectors():
    y, p, s = _from_table(HAND)
    expected = fairness_report(y, p, sensitive_features=s)
    got = fairness_report(
        pd.Series(y).tolist(),
        pd.Series(p),
        sensitive_features=pd.DataFrame({"race": s}),
    )
    assert got == expected
    assert demographic_parity_violation(
        y.reshape(-1, 1), p.reshape(-1, 1), sensitive_features=s.reshape(-1, 1)
    ) == pytest.approx(expected["dp_violation"])


def test_groups_absent_within_a_class_are_left_out():
    # class 1 occurs only in group "b": EO uses class 0 only; eopp for class 0 is defined.
    y = ["0", "0", "0", "0", "1", "1"]
    p = ["0", "1", "1", "1", "1", "0"]
    s = ["a", "a", "b", "b", "b", "b"]
    # class 0: group a (1/2, 1/2), group b (0, 1) -> 1/2
    assert equalized_odds_violation(y, p, sensitive_features=s) == _exact(Fraction(1, 2))
    assert equal_opportunity_violation(y, p, sensitive_features=s, pos_label="0") == _exact(
        Fraction(1, 2)
    )


# ----------------------------------------------------------------------------------------------
# Errors name the argument and the fix
# ----------------------------------------------------------------------------------------------

Y = [0, 1, 1, 0]
P = [0, 1, 0, 0]
S = [0, 0, 1, 1]


@pytest.mark.parametrize(
    "call, exc, pattern",
    [
        (
            lambda: demographic_parity_violation(Y, P[:3], sensitive_features=S),
            ValueError,
            r"y_true has 4, y_pred has 3, sensitive_features has 4",
        ),
        (
            lambda: equalized_odds_violation(Y, P, sensitive_features=S[:2]),
            ValueError,
            r"sensitive_features has 2",
        ),
        (lambda: misclassification_error([], []), ValueError, r"y_true is empty"),
        (lambda: trivial_error([]), ValueError, r"y_true is empty"),
        (
            lambda: accuracy_parity_violation(Y, [0, np.nan, 1, 0], sensitive_features=S),
            ValueError,
            r"y_pred contains 1 missing value.*position 1",
        ),
        (
            lambda: demographic_parity_violation(Y, P, sensitive_features=[0, None, 1, 1]),
            ValueError,
            r"sensitive_features contains 1 missing",
        ),
        (
            lambda: equalized_odds_violation(Y, P, sensitive_features=[3, 3, 3, 3]),
            ValueError,
            r"sensitive_features has a single group \(3\).*at least 2 groups",
        ),
        (
            lambda: equal_opportunity_violation(Y, P, sensitive_features=S, pos_label="yes"),
            ValueError,
            r"pos_label='yes' is not among the labels .*\[0, 1\]",
        ),
        (
            lambda: equal_opportunity_violation([0, 1, 0, 0], P, sensitive_features=S),
            ValueError,
            r"pos_label=1 only in group\(s\) \[0\].*without such records: \[1\]",
        ),
        (
            lambda: equalized_odds_violation([0, 0, 1, 1], P, sensitive_features=S),
            ValueError,
            r"equalized odds difference is undefined",
        ),
        (
            lambda: equalized_odds_violation(Y, P, sensitive_features=S, conditioning="pairs"),
            ValueError,
            r"conditioning='pairs'.*'per_class' or 'one_vs_rest'",
        ),
        (
            lambda: equalized_odds_violation(None, P, sensitive_features=S),
            TypeError,
            r"y_true is None",
        ),
        (lambda: misclassification_error(1, P), TypeError, r"y_true must be a 1-D array-like"),
        (lambda: misclassification_error("0110", P), TypeError, r"y_true must be a 1-D"),
        (
            lambda: demographic_parity_violation(Y, np.zeros((4, 2)), sensitive_features=S),
            ValueError,
            r"y_pred must be 1-D .*shape \(4, 2\)",
        ),
        (
            lambda: demographic_parity_violation(
                Y, P, sensitive_features=pd.DataFrame({"a": S, "b": S})
            ),
            ValueError,
            r"sensitive_features is a DataFrame with 2 columns",
        ),
        (
            lambda: misclassification_error(np.array([0, "a", 1, 0], dtype=object), P),
            TypeError,
            r"y_true and y_pred mixes values",
        ),
        (
            lambda: statistical_parity_difference([0, 1, 1], sensitive_features=[0, 1, 2]),
            ValueError,
            r"3 groups.*pass group= and reference_group=",
        ),
        (
            lambda: statistical_parity_difference(P, sensitive_features=S, group=1),
            ValueError,
            r"pass both group= and reference_group=",
        ),
        (
            lambda: statistical_parity_difference(
                P, sensitive_features=S, group=1, reference_group="z"
            ),
            ValueError,
            r"reference_group='z' is not among the groups",
        ),
        (
            lambda: decision_boundary_covariance(["x", "y", "z", "w"], sensitive_features=S),
            TypeError,
            r"scores must be real numbers",
        ),
        (
            lambda: decision_boundary_covariance([0.0, np.inf, 1.0, 2.0], sensitive_features=S),
            ValueError,
            r"scores contains inf",
        ),
        (
            lambda: decision_boundary_covariance([0.0, 1.0, 1.0], sensitive_features=S),
            ValueError,
            r"scores has 3, sensitive_features has 4",
        ),
        (
            lambda: fairness_report(Y, P, sensitive_features=S, pos_label=2),
            ValueError,
            r"pos_label=2 is not among",
        ),
        (
            lambda: statistical_parity_difference(P, sensitive_features=S, pos_label="1"),
            ValueError,
            r"pos_label='1' is not among the labels",
        ),
    ],
)
def test_errors_name_the_argument(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


# --------------------------------------------------------------------------------------------
# fairlearn-compatible names and the per-group report, against fairlearn itself
# --------------------------------------------------------------------------------------------

import fairlearn.metrics as flm  # noqa: E402

import pfair.metrics as pm  # noqa: E402

FAIRLEARN_NAMES = ["demographic_parity_difference", "demographic_parity_ratio", "equalized_odds_difference",
                   "equalized_odds_ratio", "equal_opportunity_difference", "equal_opportunity_ratio"]


def _multigroup(seed, n=400, groups=("a", "b", "c", "d")):
    rng = np.random.default_rng(seed)
    s = rng.choice(groups, n)
    y = rng.integers(0, 2, n)
    bias = np.array([0.1 * groups.index(g) for g in s])
    yp = (rng.random(n) < 0.2 + bias + 0.3 * y).astype(int)
    return y, yp, s, rng.random(n)


@pytest.mark.parametrize("name", FAIRLEARN_NAMES)
@pytest.mark.parametrize("method", ["between_groups", "to_overall"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fairlearn_names_equal_fairlearn(name, method, seed):
    y, yp, s, w = _multigroup(seed, groups=("a", "b", "c", "d") if seed else ("m", "f"))
    ours, theirs = getattr(pm, name), getattr(flm, name)
    assert ours(y, yp, sensitive_features=s, method=method) == pytest.approx(
        theirs(y, yp, sensitive_features=s, method=method), abs=1e-12)
    assert ours(y, yp, sensitive_features=s, method=method, sample_weight=w) == pytest.approx(
        theirs(y, yp, sensitive_features=s, method=method, sample_weight=w), abs=1e-12)
    if "odds" in name:
        assert ours(y, yp, sensitive_features=s, method=method, agg="mean") == pytest.approx(
            theirs(y, yp, sensitive_features=s, method=method, agg="mean"), abs=1e-12)


def test_fairlearn_names_match_the_violation_family_for_binary_labels():
    for seed in range(3):
        y, yp, s, _ = _multigroup(seed)
        assert pm.demographic_parity_difference(y, yp, sensitive_features=s) == pytest.approx(
            demographic_parity_violation(y, yp, sensitive_features=s), abs=1e-12)
        assert pm.equalized_odds_difference(y, yp, sensitive_features=s) == pytest.approx(
            equalized_odds_violation(y, yp, sensitive_features=s), abs=1e-12)
        assert pm.equal_opportunity_difference(y, yp, sensitive_features=s) == pytest.approx(
            equal_opportunity_violation(y, yp, sensitive_features=s), abs=1e-12)


def test_fairlearn_names_are_the_papers_generalisation_for_more_classes():
    rng = np.random.default_rng(5)
    y, yp, s = rng.integers(0, 3, 300), rng.integers(0, 3, 300), rng.choice(["x", "y", "z"], 300)
    # Default: the maximum over every predicted class of the selection-rate gap (Gupta et al. eq. 11).
    per_class = [flm.demographic_parity_difference(y, yp == c, sensitive_features=s) for c in range(3)]
    assert pm.demographic_parity_difference(y, yp, sensitive_features=s) == pytest.approx(max(per_class), abs=1e-12)
    assert demographic_parity_violation(y, yp, sensitive_features=s) == pm.demographic_parity_difference(
        y, yp, sensitive_features=s)
    # pos_label=1 is fairlearn's one-vs-rest number, at most the maximum.
    assert pm.demographic_parity_difference(y, yp, sensitive_features=s, pos_label=1) == pytest.approx(
        flm.demographic_parity_difference(y, yp, sensitive_features=s), abs=1e-12)
    # Equalized odds: per true class y, the largest gap of P[ŷ = c | s, y] over c; then the max or mean.
    d = [max(flm.demographic_parity_difference(y[y == t], yp[y == t] == c, sensitive_features=s[y == t])
             for c in range(3)) for t in range(3)]
    assert pm.equalized_odds_difference(y, yp, sensitive_features=s) == pytest.approx(max(d), abs=1e-12)
    assert pm.equalized_odds_difference(y, yp, sensitive_features=s, agg="mean") == pytest.approx(
        np.mean(d), abs=1e-12)
    assert pm.equalized_odds_difference(y, yp, sensitive_features=s, pos_label=1) == pytest.approx(
        flm.equalized_odds_difference(y == 1, yp == 1, sensitive_features=s), abs=1e-12)
    # one_vs_rest: fairlearn's number for each class as the positive one, the worst of them.
    ovr = [flm.equalized_odds_difference(y == c, yp == c, sensitive_features=s) for c in range(3)]
    assert pm.equalized_odds_difference(y, yp, sensitive_features=s, conditioning="one_vs_rest") == pytest.approx(
        max(ovr), abs=1e-12)
    assert equalized_odds_violation(y, yp, sensitive_features=s, conditioning="one_vs_rest") == pytest.approx(
        max(ovr), abs=1e-12)


def test_weighted_multiclass_to_overall_against_fairlearn_per_class():
    rng = np.random.default_rng(6)
    y, yp, s, w = rng.integers(0, 3, 300), rng.integers(0, 3, 300), rng.choice(["x", "y"], 300), rng.random(300)
    theirs = max(flm.demographic_parity_difference(y, yp == c, sensitive_features=s, method="to_overall",
                                                   sample_weight=w) for c in range(3))
    assert pm.demographic_parity_difference(y, yp, sensitive_features=s, method="to_overall",
                                            sample_weight=w) == pytest.approx(theirs, abs=1e-12)


def _metric_frame(y, yp, s, w=None):
    def error(y_true, y_pred, sample_weight=None):
        return 1.0 - np.average(np.asarray(y_true) == np.asarray(y_pred), weights=sample_weight)

    metrics = {"count": flm.count, "selection_rate": flm.selection_rate, "error": error,
               "true_positive_rate": flm.true_positive_rate, "false_positive_rate": flm.false_positive_rate}
    params = None
    if w is not None:
        params = {k: {"sample_weight": w} for k in metrics if k != "count"}
    return flm.MetricFrame(metrics=metrics, y_true=y, y_pred=yp, sensitive_features=s, sample_params=params)


@pytest.mark.parametrize("weighted", [False, True])
def test_group_report_equals_metric_frame(weighted):
    y, yp, s, w = _multigroup(3)
    w = w if weighted else None
    report = pm.group_report(y, yp, sensitive_features=s, sample_weight=w)
    mf = _metric_frame(y, yp, s, w)
    by_group = report.loc[list(mf.by_group.index)]
    pd.testing.assert_frame_equal(by_group.astype(float), mf.by_group.astype(float), check_names=False, atol=1e-12)
    for col in report.columns:
        assert report.loc["overall", col] == pytest.approx(float(mf.overall[col]), abs=1e-12)
        assert report.loc["difference", col] == pytest.approx(float(mf.difference()[col]), abs=1e-12)
        assert report.loc["ratio", col] == pytest.approx(float(mf.ratio()[col]), abs=1e-12)
    assert report.loc["difference", "selection_rate"] == pytest.approx(
        pm.demographic_parity_difference(y, yp, sensitive_features=s, sample_weight=w), abs=1e-12)
    assert max(report.loc["difference", ["true_positive_rate", "false_positive_rate"]]) == pytest.approx(
        pm.equalized_odds_difference(y, yp, sensitive_features=s, sample_weight=w), abs=1e-12)


def test_group_report_hand_example_and_errors():
    y = [1, 1, 0, 0, 1, 0]
    yp = [1, 0, 0, 1, 1, 1]
    s = pd.Series(["a", "a", "a", "b", "b", "b"], name="sex")
    r = pm.group_report(y, yp, sensitive_features=s)
    assert r.index.name == "sex" and list(r.index) == ["a", "b", "overall", "difference", "ratio"]
    assert r.loc["a", "count"] == 3 and r.loc["a", "selection_rate"] == pytest.approx(1 / 3)
    assert r.loc["a", "true_positive_rate"] == pytest.approx(1 / 2) and r.loc["b", "false_positive_rate"] == 1.0
    assert r.loc["a", "error"] == pytest.approx(1 / 3) and r.loc["b", "error"] == pytest.approx(2 / 3)
    with pd.option_context("display.max_columns", 3, "display.width", 40):
        text = str(r)
    assert "..." not in text and all(c in text for c in r.columns)  # print shows every column
    with pytest.raises(ValueError, match="method='worst' is not supported"):
        pm.demographic_parity_difference(y, yp, sensitive_features=s, method="worst")
    with pytest.raises(ValueError, match="sample_weight must be finite and >= 0"):
        pm.group_report(y, yp, sensitive_features=s, sample_weight=[1, 1, 1, -1, 1, 1])
    with pytest.raises(ValueError, match="pos_label='yes' is not among the labels"):
        pm.group_report(y, yp, sensitive_features=s, pos_label="yes")


def test_model_group_report_uses_the_positive_class():
    from pfair import SteFFLe

    y, _, s, _ = _multigroup(4)
    rng = np.random.default_rng(0)
    X = np.column_stack([y + 0.5 * rng.normal(size=len(y)), rng.normal(size=len(y))])
    labels = np.array(["bad", "good"])[y]
    m = SteFFLe(sampling="full_batch", epochs=10).fit(X, labels, sensitive_features=s)
    r = m.group_report(X, labels, sensitive_features=s)
    pd.testing.assert_frame_equal(r, pm.group_report(labels, m.predict(X), sensitive_features=s, pos_label="good"))
    assert r.loc["overall", "error"] == pytest.approx(1 - m.score(X, labels))


# ---------------------------------------------------------------------- a tiny test split


def test_fairness_report_of_a_tiny_test_split_leaves_equal_opportunity_undefined():
    """A 20-row table leaves 5 test records; when one group has no positive record the bundle's
    equal_opportunity_difference is NaN (nobody asked for it) instead of failing the whole report;
    the metric alone still says why, and a pos_label not among the labels still fails."""
    import math

    import numpy as np

    from pfair import metrics

    y, s, p = np.array([0, 0, 1, 1, 0]), np.array([0, 0, 1, 1, 1]), np.array([0, 1, 1, 0, 0])
    report = metrics.fairness_report(y, p, sensitive_features=s)
    assert math.isnan(report["equal_opportunity_difference"]) and report["test_error"] == 0.4
    assert report["demographic_parity_difference"] == pytest.approx(0.5 - 1 / 3)
    with pytest.raises(ValueError, match="groups without such records: \\[0\\]"):
        metrics.equal_opportunity_difference(y, p, sensitive_features=s)
    with pytest.raises(ValueError, match="pos_label=2 is not among"):
        metrics.fairness_report(y, p, sensitive_features=s, pos_label=2)


def test_fairness_report_warns_about_groups_of_few_records():
    """A group of 10 records: its rates, and the gaps that compare them, are mostly sampling noise;
    the report says so once, with the group's counts per label; balanced groups are not warned."""
    import warnings

    import pfair.metrics as pfair_metrics
    from pfair._warn import forget

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    s = np.r_[np.zeros(190, dtype=int), np.ones(10, dtype=int)]
    forget()
    with pytest.warns(UserWarning, match=r"fairness_report: 1 of 2 sensitive groups have fewer than 30 records.*'1' 10 "
                                         rf"\({int(np.sum(y[s == 1] == 0))} with label 0, "
                                         rf"{int(np.sum(y[s == 1] == 1))} with label 1\)"):
        pfair_metrics.fairness_report(y, y, sensitive_features=s)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pfair_metrics.fairness_report(y, y, sensitive_features=np.r_[np.zeros(100, dtype=int), np.ones(100, dtype=int)])
