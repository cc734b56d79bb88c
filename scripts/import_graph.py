"""The library's import graph, read from source with ``ast``: module names, each import with where it sits
(``module`` level, inside a ``function``, or ``annotation`` only under ``if TYPE_CHECKING:``), the module
and package graphs, and the cycle finder. One reading for the architecture tests (tests/architecture) and
for ``scripts/code_measures.py``, which reads old revisions through git, so nothing here needs a checkout
except ``library_modules`` and ``import_graph``, which read the work tree.

An import of ``bakeoff.a.b`` is an edge to that module, not to the packages above it; ``from pkg import x``
is the module ``pkg.x`` when x is one.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path, PurePath
from typing import Literal

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "include"
PACKAGE = "bakeoff"
Where = Literal["module", "function", "annotation"]
Graph = dict[str, set[str]]


def module_name(path: PurePath) -> str:
    """``bakeoff/serving/deploy.py`` (relative to the folder holding the package) -> ``bakeoff.serving.deploy``;
    a package's ``__init__.py`` is the package."""
    parts = list(path.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(module: str) -> str:
    """The first name under ``bakeoff`` (``bakeoff.plan.target`` -> ``plan``); ``bakeoff`` itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else PACKAGE


def library_modules(lib: Path = LIB) -> dict[str, Path]:
    """Every module of the library in the work tree: dotted name -> file."""
    return {module_name(p.relative_to(lib)): p for p in sorted((lib / PACKAGE).rglob("*.py"))}


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, Where]]:
    """Each import statement with where it sits: under ``TYPE_CHECKING`` it never runs (``annotation``, inside
    a function or not); otherwise inside a function body (``function``) or at import time (``module``)."""

    def walk(node: ast.AST, where: Where) -> Iterator[tuple[ast.Import | ast.ImportFrom, Where]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, where
            elif isinstance(child, ast.If) and is_type_checking(child.test):
                for stmt in child.body:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), "annotation")
                for stmt in child.orelse:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), where)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and where == "module":
                yield from walk(child, "function")
            else:
                yield from walk(child, where)

    yield from walk(tree, "module")


def function_level_imports(tree: ast.AST) -> list[int]:
    """Line numbers of the imports inside a function (TYPE_CHECKING blocks never run; left out)."""
    return sorted(node.lineno for node, where in imports(tree) if where == "function")


def _known(name: str, modules: Collection[str]) -> str | None:
    """The longest known module prefix of a dotted name (``bakeoff.cost.x`` -> ``bakeoff.cost``)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def targets(node: ast.Import | ast.ImportFrom, module: str, *, is_package: bool, modules: Collection[str]) -> set[str]:
    """The known modules one import statement loads, other than ``module`` itself."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = module.split(".") if is_package else module.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    return {found for n in names if (found := _known(n, modules)) and found != module}


def module_edges(module: str, tree: ast.AST, *, is_package: bool, modules: Collection[str]) -> dict[Where, set[str]]:
    """The modules ``module`` imports, by where the import sits."""
    out: dict[Where, set[str]] = {"module": set(), "function": set(), "annotation": set()}
    for node, where in imports(tree):
        out[where] |= targets(node, module, is_package=is_package, modules=modules)
    return out


def graph_of(edges: Mapping[str, Mapping[Where, set[str]]], wheres: Collection[Where]) -> Graph:
    """Module -> what it imports, counting the imports that sit in ``wheres``."""
    return {m: set().union(*(by[w] for w in wheres)) for m, by in edges.items()}


def _wheres(module_level_only: bool, type_checking: bool) -> tuple[Where, ...]:
    return ("module", *(() if module_level_only else ("function",)), *(("annotation",) if type_checking else ()))


def imported_modules(
    module: str, path: Path, modules: Collection[str], *, module_level_only: bool = False, type_checking: bool = False
) -> set[str]:
    """Library modules the file at ``path`` imports: every import that runs (only module-level ones when
    asked), annotation-only ones when asked."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    edges = module_edges(module, tree, is_package=path.name == "__init__.py", modules=modules)
    return set().union(*(edges[w] for w in _wheres(module_level_only, type_checking)))


@functools.cache
def _work_tree_edges() -> dict[str, dict[Where, set[str]]]:
    """Every library module's imports by where they sit, read once per process (the tests ask often)."""
    modules = library_modules()
    out = {}
    for m, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        out[m] = module_edges(m, tree, is_package=path.name == "__init__.py", modules=modules)
    return out


def import_graph(*, module_level_only: bool = False, type_checking: bool = False) -> Graph:
    """The work tree's module graph; ``type_checking`` counts annotation-only imports too."""
    return graph_of(_work_tree_edges(), _wheres(module_level_only, type_checking))


def package_graph(graph: Graph) -> Graph:
    """Package -> the other packages its modules import (``bakeoff.plan.target`` is in ``plan``)."""
    out: Graph = {}
    for module, deps in graph.items():
        mine = package_of(module)
        out.setdefault(mine, set()).update(p for p in map(package_of, deps) if p != mine)
    return out


def components(graph: Graph) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative); an edge to a module
    outside the graph is ignored."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            v, it = work[-1]
            for w in it:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp: set[str] = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(comp)
    return out


def cycles(graph: Graph) -> list[list[str]]:
    """One concrete cycle (a -> ... -> a) per strongly connected component of more than one module."""
    return [_a_cycle_in(comp, graph) for comp in components(graph)]


def _a_cycle_in(comp: set[str], graph: Graph) -> list[str]:
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
