"""The checkpoint's exact counts in one Rust pass (``SiloSet.checkpoint_counts``,
:class:`pfair.providers.linear.CheckpointCounter`) equal the Python computation they replaced,
kept here as the reference: each silo's rows gathered into a float64 copy, ``predict_proba``,
``argmax``, then :func:`pfair.validation.validation_table` and
:meth:`pfair.notions.FairnessNotion.violation_counts`. And a whole run's releases (validation tables and
violation histograms, exact and noised, their charges and the ledgers) are the reference run's,
bit for bit."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import pfair
from pfair import _core
from pfair.protocol.simulation import Simulation
from pfair.validation import validation_table

from support import toy_data


def reference_predict(silo, n_classes: int):
    """``predict(θ)`` as fits computed it before: a float64 copy of the silo's rows, the class
    probabilities, the first largest."""
    X = np.ascontiguousarray(silo.X, dtype=np.float64)

    def predict(theta):
        return np.argmax(_core.predict_proba(X, np.ascontiguousarray(theta, dtype=np.float64), n_classes), axis=1)

    return predict


def reference_counts(sim: Simulation, held: list, theta: np.ndarray, j: int):
    """Silo ``j``'s exact (validation table, violation histogram) as the Python path computed them."""
    st, l, k = sim.settings, sim.fed.n_classes, sim.fed.n_groups  # noqa: E741
    silo = sim.fed.silos[j]
    train_pred = reference_predict(silo, l)(theta)
    kw = dict(n_groups=k, n_classes=l)
    counts = st.notion.violation_counts(silo.y, train_pred, silo.s, **kw)
    if st.validation_share <= 0:
        return validation_table(silo.y, train_pred, l), counts
    h = held[j]
    if h is None:
        return np.zeros((l, l)), counts
    held_pred = reference_predict(h, l)(theta)
    return validation_table(h.y, held_pred, l), counts + st.notion.violation_counts(h.y, held_pred, h.s, **kw)


def federations():
    """(name, federation): dense float64 and float32 rows of one matrix (read in place), silos with
    their own arrays (copied to Rust), one-hot-heavy rows (CSR), three classes."""
    X, y, s, silos = toy_data(n=3000, seed=4, k=3)
    yield "float64", pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    yield "float32", pfair.Federation.from_arrays(X.astype(np.float32), y, sensitive_features=s, silos=silos)
    fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    own = pfair.Federation([pfair.federation.Silo(np.array(sl.X), sl.y, sl.s) for sl in fed.silos],
                           classes=fed.classes_, groups=fed.groups_)
    yield "own arrays", own
    rng = np.random.default_rng(5)
    onehot = np.zeros((3000, 40))
    onehot[np.arange(3000), rng.integers(0, 36, 3000)] = 1.0
    onehot[:, 36:] = X[:, :3].repeat(2, axis=0)[:3000, :1] * (rng.random((3000, 4)) < 0.3)
    yield "csr", pfair.Federation.from_arrays(onehot, y, sensitive_features=s, silos=silos)
    X3, y3, s3, silos3 = toy_data(n=3000, seed=6, k=2, cuts=(-0.5, 0.5))
    yield "three classes", pfair.Federation.from_arrays(X3, y3, sensitive_features=s3, silos=silos3)


@pytest.mark.parametrize("share", [0.1, 0.0, 0.4])
@pytest.mark.parametrize("fairness", ["demographic_parity", "equalized_odds", "equal_opportunity",
                                      "false_positive_rate_parity"])
def test_the_rust_pass_counts_what_the_python_path_counted(share, fairness):
    rng = np.random.default_rng(11)
    for name, fed in federations():
        st = pfair.SteFFLe(lam=1.0, epochs=1, batch_size=16, validation_share=share, fairness=fairness).settings()
        sim = Simulation(st, fed)
        _, held = pfair.validation.split_federation(fed, share, seed=st.seed)
        for scale in (0.3, 3.0, 30.0):  # near-ties and saturated probabilities
            theta = rng.normal(scale=scale, size=sim.theta_len)
            got = sim.counter.counts(theta, list(range(fed.n_silos)), table=True, violation=True)
            one = sim.counter.counts(theta, [1], table=True, violation=False)
            for j in range(fed.n_silos):
                want = reference_counts(sim, held, theta, j)
                np.testing.assert_array_equal(got[j][0], want[0], err_msg=name)
                np.testing.assert_array_equal(got[j][1], want[1], err_msg=name)
                assert got[j][0].dtype == want[0].dtype == np.float64
            np.testing.assert_array_equal(one[1][0], got[1][0])
            assert one[1][1] is None


def test_logits_near_the_class_bounds_and_a_non_finite_theta_are_counted_as_the_python_path_counts():
    """Sparse two-class rows take a quick sum of the logit when it clearly settles the class, and the
    lanes otherwise (``rust/src/psi/predict.rs``): logits of about 0 and of about 10⁻⁹ (θ scaled down
    to there, and one coordinate tuned so that a row's logit cancels to the bound) and a θ with a NaN
    or an infinity give the reference's counts."""
    name, fed = [f for f in federations() if f[0] == "csr"][0]
    st = pfair.SteFFLe(lam=1.0, epochs=1, batch_size=16, validation_share=0.4, fairness="equalized_odds").settings()
    sim = Simulation(st, fed)
    assert not any(sim.counter.held.is_shared(j) for j in range(fed.n_silos))  # held as CSR
    _, held = pfair.validation.split_federation(fed, st.validation_share, seed=st.seed)
    rng = np.random.default_rng(3)
    thetas = [rng.normal(size=sim.theta_len) * scale for scale in (1e-9, 3e-10, 1e-12, 1e-300)]
    # The first held-out row of silo 0 on the bound: its logit θ_d + Σ x_j θ_j cancels to ~0 / ~1e-9.
    row = np.asarray(held[0].X[0], dtype=np.float64).ravel()
    j0 = int(np.flatnonzero(row)[0])
    for aim in (0.0, 1e-9):
        theta = rng.normal(size=sim.theta_len)
        rest = theta[-1] + float(row @ theta[:-1]) - row[j0] * theta[j0]
        theta[j0] = (aim - rest) / row[j0]
        thetas.append(theta)
    for bad in (np.nan, np.inf, -np.inf):
        theta = rng.normal(size=sim.theta_len)
        theta[j0] = bad
        thetas.append(theta)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the reference's softmax of a NaN logit
        for theta in thetas:
            got = sim.counter.counts(theta, list(range(fed.n_silos)), table=True, violation=True)
            for j in range(fed.n_silos):
                want = reference_counts(sim, held, theta, j)
                np.testing.assert_array_equal(got[j][0], want[0], err_msg=str(theta[:3]))
                np.testing.assert_array_equal(got[j][1], want[1], err_msg=str(theta[:3]))


def test_on_adult_the_rows_are_read_in_place_and_counted_as_before():
    data = pfair.datasets.load_adult()
    fed = pfair.Federation.partition(data, 3, heterogeneity=0.0, by="age", seed=0)
    st = pfair.SteFFLe(lam=1.0, epochs=1, max_violation=0.05).settings()
    sim = Simulation(st, fed)
    _, held = pfair.validation.split_federation(fed, st.validation_share, seed=st.seed)
    theta = np.random.default_rng(0).normal(scale=0.5, size=sim.theta_len)
    got = sim.counter.counts(theta, [0, 1, 2], table=True, violation=True)
    for j in range(3):
        want = reference_counts(sim, held, theta, j)
        np.testing.assert_array_equal(got[j][0], want[0])
        np.testing.assert_array_equal(got[j][1], want[1])
        assert got[j][0].sum() == len(held[j])


def reference_run(st, fed, fast: bool):
    """A run whose silos compute their checkpoint counts as the Python path did, one silo after the
    other (each charging, computing and noising before the next)."""
    sim = Simulation(st, fed, ledgers="new", fast=fast)
    _, held = pfair.validation.split_federation(sim.whole, st.validation_share, seed=st.seed)
    for j, p in enumerate(sim.parties):
        p.checkpoint_counts = (lambda theta, table, violation, j=j:
                               tuple(v if want else None for v, want in
                                     zip(reference_counts(sim, held, theta, j), (table, violation))))
    sim.counter = None
    return sim


@pytest.mark.parametrize("settings", [
    dict(protect="record", max_violation=0.08),  # noised tables and histograms, both charged
    dict(max_violation=0.08),                    # exact tables, noised histograms
    dict(lam=2.0),                               # the defaults: exact tables only
    dict(lam=2.0, validation_share=0.0),         # the tables of the training records
])
def test_a_runs_releases_charges_and_ledgers_are_the_python_paths_bit_for_bit(settings):
    X, y, s, silos = toy_data(n=1500, seed=8, minority=0.3)
    fed = pfair.Federation.from_arrays(X.astype(np.float32), y, sensitive_features=s, silos=silos)
    kw = dict(epsilon=3.0, lam=1.0, epochs=4, batch_size=32, noise_seed=5, p_s=[0.7, 0.3])
    kw.update(settings)
    st = pfair.SteFFLe(**kw).settings()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = {}
        for name, sim in [("rust", Simulation(st, fed, ledgers="new")), ("reference", reference_run(st, fed, True)),
                          ("party loop", reference_run(st, fed, False))]:
            state = sim.run()
            assert isinstance(sim.counter, type(None)) == (name != "rust")
            runs[name] = (state, [p.ledger.to_dict() for p in sim.parties], sim)
    rust, ref, loop = runs["rust"], runs["reference"], runs["party loop"]
    assert len(rust[0].checkpoints) == st.epochs
    for other in (ref, loop):
        assert rust[0].checkpoints == other[0].checkpoints  # every released figure, exact equality
        assert [sorted(r.items()) for r in rust[0].history] == [sorted(r.items()) for r in other[0].history]
        np.testing.assert_array_equal(rust[0].theta, other[0].theta)
        for a, b in zip(rust[1], other[1]):
            assert _releases(a) == _releases(b)
    for a, b in zip(rust[1], ref[1]):  # the same transport: the same charges, in the same order
        assert a["events"] == b["events"] and a["epsilon_spent"] == b["epsilon_spent"]
    if st.private and (st.protect == "record" or st.max_violation is not None):
        assert any(_releases(d) for d in rust[1])  # noised releases were kept, and compared


def _releases(ledger_dict: dict) -> dict:
    """The released values a ledger keeps, as lists (run ids differ between runs: keyed by the
    release kind and epoch)."""
    out = {}
    for name, value in (ledger_dict.get("releases") or {}).items():
        kind, epoch = name.split(":")[0], name.split(":")[-1]
        out[(kind, epoch)] = np.asarray(value, dtype=np.float64).tolist()
    return out


def test_the_batched_transport_charges_every_silo_before_it_computes():
    X, y, s, silos = toy_data(n=900, seed=2, minority=0.3)
    fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    st = pfair.SteFFLe(epsilon=3.0, lam=1.0, epochs=2, batch_size=32, noise_seed=5, p_s=[0.7, 0.3],
                       protect="record").settings()
    sim = Simulation(st, fed, ledgers="new")
    order = []
    for p in sim.parties:
        charge = p.ledger.charge
        p.ledger.charge = (lambda event, charge=charge, j=p.silo_id: (order.append(("charge", j, event.name)),
                                                                      charge(event))[1])
    counts = sim.counter.counts
    sim.counter.counts = lambda theta, silos, **kw: (order.append(("count", tuple(silos))), counts(theta, silos, **kw))[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim.run()
    first = order.index(next(o for o in order if o[0] == "count"))
    charged = {o[1] for o in order[:first] if o[0] == "charge" and o[2] == "validation_table"}
    assert charged == {0, 1, 2} and order[first] == ("count", (0, 1, 2))
