"""The library is layered: no import cycle between its modules, and the DAG files import only what parses cheaply.

Every import counts, function-level ones included: a cycle closed by an import inside a function is
still a cycle (it only moves the failure from import time to the first call). Imports under
``if TYPE_CHECKING:`` never run and are left out. An import of ``bakeoff.a.b`` is an edge to that
module, not to the packages above it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT

LIB = ROOT / "include"
PACKAGE = "bakeoff"
# What a DAG file may import at module level from the library: parsed every few seconds by the
# dag-processor, so only cheap modules (no pandas, GX, boto3, httpx); steps are imported inside tasks.
DAG_PARSE_ALLOWED = {"bakeoff.providers.registry", "bakeoff.run.steps", "bakeoff.prediction.spend_index"}
HEAVY = ("pandas", "numpy", "pyarrow", "great_expectations", "aiohttp", "httpx", "boto3", "oci", "matplotlib")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(LIB).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def library_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((LIB / PACKAGE).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    tree: ast.AST, *, module_level_only: bool = False, type_checking: bool = False
) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements that run: everywhere (or only at module level), under TYPE_CHECKING only when asked."""
    todo = list(ast.iter_child_nodes(tree))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
            todo.extend(node.orelse)
            continue
        if module_level_only and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        todo.extend(ast.iter_child_nodes(node))


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest known module prefix of a dotted name (``bakeoff.cost.x`` -> ``bakeoff.cost``)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imported_modules(
    module: str, path: Path, modules: dict[str, Path], *, module_level_only: bool = False, type_checking: bool = False
) -> set[str]:
    """Library modules this file imports; ``from pkg import x`` is the module ``pkg.x`` when x is one."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in _imports(tree, module_level_only=module_level_only, type_checking=type_checking):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_pkg else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for t in targets:
            found = _resolve(t, modules)
            if found and found != module:
                out.add(found)
    return out


def import_graph(*, module_level_only: bool = False, type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the library modules it imports; ``type_checking`` counts annotation-only imports too."""
    modules = library_modules()
    return {
        m: imported_modules(m, p, modules, module_level_only=module_level_only, type_checking=type_checking)
        for m, p in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One concrete cycle (a -> ... -> a) per strongly connected component of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_a_cycle_in(comp, graph) for comp in components]


def _a_cycle_in(comp: set[str], graph: dict[str, set[str]]) -> list[str]:
    """Shortest path back to the component's first module (breadth-first), as a closed list."""
    start = min(comp)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [*reversed(path), start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return sorted(comp)  # unreachable for a strongly connected component


def test_the_cycle_finder_finds_a_cycle_and_names_it():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_function_level_and_from_package_imports_are_edges(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "from bakeoff import cost\n"
        "if TYPE_CHECKING:\n    from bakeoff import budget\n"
        "def f():\n    from bakeoff.quality import status\n    import bakeoff.plan.prices\n",
        encoding="utf-8",
    )
    modules = {m: Path() for m in ("bakeoff", "bakeoff.cost", "bakeoff.spend.budget", "bakeoff.quality.status")}
    modules["bakeoff.plan.prices"] = Path()
    found = imported_modules("bakeoff.x", src, modules)
    assert found == {"bakeoff.cost", "bakeoff.quality.status", "bakeoff.plan.prices"}
    assert imported_modules("bakeoff.x", src, modules, module_level_only=True) == {"bakeoff.cost"}


def test_the_library_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles (every import counts, function-level ones too):\n" + "\n".join(
        "  " + " -> ".join(c) for c in found
    )


def test_dag_files_import_only_cheap_library_modules_at_parse_time():
    """Module-level library imports in dags/ are limited to DAG_PARSE_ALLOWED, and those modules pull
    in no heavy dependency at module level either (test_dag_integrity checks the same at run time)."""
    modules = library_modules()
    for dag_file in sorted((ROOT / "dags").glob("*.py")):
        direct = imported_modules(dag_file.stem, dag_file, modules, module_level_only=True)
        assert direct <= DAG_PARSE_ALLOWED, (
            f"{dag_file.name} imports {sorted(direct - DAG_PARSE_ALLOWED)} at parse time"
        )
    graph = import_graph(module_level_only=True)
    reach, todo = set(), [m for m in DAG_PARSE_ALLOWED if m in graph]
    while todo:
        m = todo.pop()
        if m not in reach:
            reach.add(m)
            todo.extend(graph[m])
            todo.extend(p for p in _parents(m) if p in graph)  # importing a.b.c runs a and a.b first
    for m in sorted(reach):
        tree = ast.parse(modules[m].read_text(encoding="utf-8"))
        third_party = {
            a.name.split(".")[0]
            for n in _imports(tree, module_level_only=True)
            if isinstance(n, ast.Import)
            for a in n.names
        } | {
            (n.module or "").split(".")[0]
            for n in _imports(tree, module_level_only=True)
            if isinstance(n, ast.ImportFrom) and not n.level
        }
        assert not third_party & set(HEAVY), (
            f"{m} (imported while parsing the DAG) imports {sorted(third_party & set(HEAVY))}"
        )
