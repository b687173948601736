"""The typed stub ``_core.pyi`` names exactly what the Rust extension exports."""

import ast
from pathlib import Path

import pytest

import pfair
from pfair import _core


def test_stub_matches_the_extension_module():
    stub = Path(pfair.__file__).with_name("_core.pyi")
    tree = ast.parse(stub.read_text())
    declared = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    declared |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign)}
    exported = {n for n in dir(_core) if not n.startswith("_")} | {"__version__"}
    assert declared == exported


@pytest.mark.slow
def test_import_pfair_is_light_and_its_names_load_on_first_use():
    # A Flower ClientApp starts a fresh process per message: importing pfair.flower.client_app
    # must not pull in scikit-learn (about a second), and pfair's public names still resolve.
    import subprocess
    import sys

    code = ("import sys, pfair; assert 'sklearn' not in sys.modules, 'sklearn imported'; "
            "from pfair.exceptions import PrivacyWarning; assert 'sklearn' not in sys.modules; "
            "pfair.SteFFLe; pfair.datasets.load_adult; pfair.Federation; "
            "from pfair.exceptions import NotFittedError; from sklearn.exceptions import NotFittedError as S; "
            "assert issubclass(NotFittedError, S) and issubclass(NotFittedError, RuntimeError); "
            "assert sorted(dir(pfair)) == sorted(pfair.__all__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
