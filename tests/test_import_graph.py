"""No import circles between pfair's modules: the graph of every ``import`` (at module level and
inside functions) of ``python/pfair`` has no cycle, apart from those listed in ``KNOWN`` with
what closes each."""

from __future__ import annotations

import ast
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
