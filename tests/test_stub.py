"""The typed stub ``_core.pyi`` names exactly what the Rust extension exports."""

import ast
from pathlib import Path

import pfair
from pfair import _core


def test_stub_matches_the_extension_module():
    stub = Path(pfair.__file__).with_name("_core.pyi")
    tree = ast.parse(stub.read_text())
    declared = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    declared |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign)}
    exported = {n for n in dir(_core) if not n.startswith("_")} | {"__version__"}
    assert declared == exported
