"""pfair's imports: no circles between its modules (the graph of every ``import``, at module level
and inside functions, of ``python/pfair`` has no cycle, apart from those listed in ``KNOWN`` with
what closes each), and no import inside a function that is not a deliberate lazy one (the policy of
docs/architecture.md, "Imports")."""

from __future__ import annotations

import ast
import importlib.util
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "python" / "pfair"

#: Circles still open, each with what closes it: none. (Closed: pfair.cli ↔ pfair.flower.cli, whose
#: shared pieces pfair.flower.cli imports from pfair.cli_common; pfair.notions → pfair.metrics →
#: pfair._validation → pfair.notions, whose metric lookup is pfair.metrics.notion_metric; and
#: pfair.flower.client_app ↔ pfair.flower.silo_host, whose handler the warm process passes in.)
KNOWN: list[set[str]] = []


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """``module -> the pfair modules it imports`` (``from a import b`` counts ``a.b`` when that is a
    module of its own, else ``a``)."""
    modules = {module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name and t != "pfair":
                    graph[name].add(t)
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = set()
            while True:
                w = stack.pop()
                on.discard(w)
                part.add(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(part)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_reader_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    graph = import_graph()
    assert "pfair.protocol.assembly" in graph["pfair.protocol.simulation"]
    assert "pfair.protocol.topologies" in graph["pfair.protocol.simulation"]


def test_pfair_has_no_import_circle():
    found = circles(import_graph())
    assert sorted(map(sorted, found)) == sorted(map(sorted, KNOWN)), found


# ---------------------------------------------------------------------------------------------------
# Lazy imports: every import inside a function is one of these, each with why; all others belong at
# module level. Checked statically (ast), so the list is exact and the check costs milliseconds.

_CLI = "a command imports what it runs: every `pfair` start builds all the parsers"
_SKLEARN_AT_START = "`pfair`'s start loads this module (the sweep parser's choices) and no scikit-learn"
_TORCH = "torch is an optional extra (deep models only)"

#: Modules whose functions may import pfair's modules lazily, and why.
LAZY_MODULES: dict[str, str] = {
    "pfair.cli": _CLI,
    "pfair.cli_common": _CLI,
    "pfair.flower.cli": _CLI,
    "pfair.postprocessing_cli": _CLI,
    "pfair.flower.fast_superexec": "its warm process imports the ClientApp and its silo host only when it serves ClientApps",
}

#: Any other function-level import of a pfair module: (module, imported module) -> why.
LAZY_IMPORTS: dict[tuple[str, str], str] = {
    ("pfair.experiments.methods", "pfair.estimators"): _SKLEARN_AT_START,
    ("pfair.experiments.methods", "pfair.baselines"): _SKLEARN_AT_START,
    ("pfair.experiments.methods", "pfair.experiments.reference"): _SKLEARN_AT_START,
    ("pfair.experiments.sweep", "pfair.datasets"): _SKLEARN_AT_START,
    ("pfair.experiments.sweep", "pfair.estimators"): _SKLEARN_AT_START,
    ("pfair.flower.node", "pfair.datasets.shards"): "pfair.datasets loads scikit-learn, which a ClientApp's start must not",
    ("pfair.flower.node", "pfair.providers.torch"): _TORCH,
    ("pfair.flower.server_app", "pfair.providers.torch"): _TORCH,
    ("pfair.flower.models", "pfair.torch.estimator"): _TORCH,
    ("pfair.model_file", "pfair.torch.estimator"): _TORCH,
    ("pfair.model_file", "pfair.providers.torch"): _TORCH,
}

#: The standard-library modules a function may import, and why (any other belongs at module level).
LAZY_STDLIB: dict[str, str] = {
    "fcntl": "POSIX only: the import is tried, and the lock skipped where it fails",
    "importlib.metadata": "about 60 modules, which the Flower launchers otherwise do not load",
}


def _is_stdlib(name: str) -> bool:
    root = name.split(".")[0]
    names = getattr(sys, "stdlib_module_names", None)  # Python >= 3.10
    if names is not None:
        return root in names
    spec = importlib.util.find_spec(root)  # pragma: no cover - Python 3.9
    origin = getattr(spec, "origin", None) or ""
    return origin in ("built-in", "frozen") or (origin.startswith(sysconfig.get_paths()["stdlib"])
                                                and "site-packages" not in origin)


def function_level_imports(sources: dict[str, tuple[str, bool]], modules: set[str]) -> list[tuple[str, int, str, str]]:
    """``(module, line, kind, target)`` of every import inside a function of ``sources`` (``module ->
    (its source, whether it is a package)``): ``kind`` is ``"pfair"`` (target: the pfair module of
    ``modules`` it loads), ``"stdlib"`` or ``"other"`` (target: the module named)."""
    out = []
    for name, (source, is_package) in sources.items():
        package = name if is_package else name.rpartition(".")[0]
        tree = ast.parse(source)
        top = {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names}
        top |= {n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module and not n.level}

        def visit(node: ast.AST, inside: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)) and inside:
                    if isinstance(child, ast.Import):
                        named = [a.name for a in child.names]
                    else:
                        base = child.module or ""
                        if child.level:
                            up = package.split(".")[: len(package.split(".")) - child.level + 1]
                            base = ".".join(up + ([base] if base else []))
                        named = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in child.names]
                    for target in named:
                        if target.split(".")[0] == "pfair":
                            while target not in modules and "." in target:
                                target = target.rpartition(".")[0]
                            out.append((name, child.lineno, "pfair", target))
                        else:
                            kind = "stdlib" if _is_stdlib(target) else "other"
                            out.append((name, child.lineno, kind, target if target not in top else target + " (at module level too)"))
                visit(child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(tree, False)
    return sorted(set(out))


def unexplained(found: list[tuple[str, int, str, str]]) -> list[tuple[str, int, str]]:
    """The function-level imports of ``found`` that the lists above do not explain."""
    bad = []
    for module, line, kind, target in found:
        if kind == "pfair" and module not in LAZY_MODULES and (module, target) not in LAZY_IMPORTS:
            bad.append((module, line, target))
        elif kind == "stdlib" and target not in LAZY_STDLIB:
            bad.append((module, line, target))
        elif kind == "other" and target.endswith("(at module level too)"):
            bad.append((module, line, target))
    return bad


def _pfair_sources() -> tuple[dict[str, tuple[str, bool]], set[str]]:
    paths = {module_name(p): p for p in ROOT.rglob("*.py")}
    return {m: (p.read_text(encoding="utf-8"), p.name == "__init__.py") for m, p in paths.items()}, set(paths)


def test_the_lazy_import_check_finds_a_planted_one():
    sources, modules = _pfair_sources()
    planted = {
        # a library module importing pfair, the standard library and numpy (which it has) inside functions
        "pfair.protocol.driver": ("import numpy as np\n\ndef f():\n    from pfair.settings import SteFFLeSettings\n"
                                  "    import json\n    import numpy as np\n    import fcntl\n", False),
        # deliberate ones: a command of the CLI, torch in the model file, a package's relative import
        "pfair.cli": ("def g():\n    from pfair.estimators import SteFFLe\n", False),
        "pfair.model_file": ("def h():\n    x = lambda: __import__('torch')\n    from pfair.torch.estimator import DeepSteFFLe\n", False),
        "pfair.datasets": ("def k():\n    from ._csv import read_csv_dataset\n", True),
    }
    found = function_level_imports(planted, modules)
    assert ("pfair.datasets", 2, "pfair", "pfair.datasets._csv") in found
    assert unexplained(found) == [("pfair.datasets", 2, "pfair.datasets._csv"),
                                  ("pfair.protocol.driver", 4, "pfair.settings"),
                                  ("pfair.protocol.driver", 5, "json"),
                                  ("pfair.protocol.driver", 6, "numpy (at module level too)")]
    assert len(function_level_imports(sources, modules)) > 50  # the reader sees pfair's own


def test_every_function_level_import_is_a_deliberate_lazy_one():
    sources, modules = _pfair_sources()
    found = function_level_imports(sources, modules)
    assert unexplained(found) == [], "move these to module level, or add them with a reason to the lists above"
    pairs = {(m, t) for m, _, kind, t in found if kind == "pfair"}
    assert set(LAZY_IMPORTS) <= pairs, f"no longer lazy (remove from LAZY_IMPORTS): {sorted(set(LAZY_IMPORTS) - pairs)}"
    assert set(LAZY_MODULES) <= {m for m, _ in pairs}, sorted(set(LAZY_MODULES) - {m for m, _ in pairs})
    assert set(LAZY_STDLIB) == {t for _, _, kind, t in found if kind == "stdlib"}
