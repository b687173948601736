"""Test configuration: put this folder on the path, so that the test files import the NumPy
reference implementations (``reference``) and the shared builders and helpers (``support``,
``flower_support``) as modules; and the fixtures several files share (UCI Adult, loaded once
per test session, and its standard federation)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="session")
def adult():
    """The bundled UCI Adult data set (``pfair.datasets.load_adult()``), loaded once per session.
    Read-only: a test that changes it must copy it."""
    from pfair.datasets import load_adult

    return load_adult()


@pytest.fixture(scope="session")
def adult_federation(adult):
    """Adult's training records in 3 silos as the command line builds them
    (``Federation.for_dataset(adult, 3, heterogeneity=0, seed=0)``: the paper's partitioner by
    age). Shared by every test of the session: fit it with ``ledgers="new"`` (or non-private), so
    that no fit leaves a ledger on its silos for the next test."""
    from pfair import Federation

    return Federation.for_dataset(adult, 3, heterogeneity=0, seed=0)


@pytest.fixture(autouse=True)
def _warnings_shown_afresh():
    """pfair shows a warning of one kind once per process (pfair._warn): each test starts afresh."""
    from pfair._warn import forget

    forget()


@pytest.fixture(autouse=True)
def _ledger_anchors(tmp_path_factory, monkeypatch):
    """Every test's deployed silos keep their default ledger anchors (``pfair.flower.node.default_anchor``)
    in a directory of their own, not in the user's ``~/.local/state``: what one test's silos
    journalled never meets another's, and the Flower processes a test starts inherit it."""
    monkeypatch.setenv("PFAIR_ANCHOR_DIR", str(tmp_path_factory.mktemp("anchors")))
