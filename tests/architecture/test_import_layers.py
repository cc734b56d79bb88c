"""The library is layered: no import cycle between its modules, and the DAG files import only what parses cheaply.

Every import counts, function-level ones included: a cycle closed by an import inside a function is
still a cycle (it only moves the failure from import time to the first call). Imports under
``if TYPE_CHECKING:`` never run and are left out. The graph is scripts/import_graph.py's, the one
scripts/code_measures.py counts with.
"""

from __future__ import annotations

import ast
from pathlib import Path

from scripts.import_graph import cycles, import_graph, imported_modules, imports, library_modules, package_of
from tests.conftest import ROOT

# What a DAG file may import at module level from the library: parsed every few seconds by the
# dag-processor, so only cheap modules (no pandas, GX, boto3, httpx); steps are imported inside tasks.
DAG_PARSE_ALLOWED = {"bakeoff.providers.registry", "bakeoff.run.steps", "bakeoff.prediction.spend_index"}
HEAVY = ("pandas", "numpy", "pyarrow", "great_expectations", "aiohttp", "httpx", "boto3", "oci", "matplotlib")


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def test_the_cycle_finder_finds_a_cycle_and_names_it():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_a_module_belongs_to_the_first_package_under_the_library():
    assert package_of("bakeoff.plan.target") == "plan" and package_of("bakeoff") == "bakeoff"


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
        at_import = [n for n, where in imports(tree) if where == "module"]
        third_party = {a.name.split(".")[0] for n in at_import if isinstance(n, ast.Import) for a in n.names} | {
            (n.module or "").split(".")[0] for n in at_import if isinstance(n, ast.ImportFrom) and not n.level
        }
        assert not third_party & set(HEAVY), (
            f"{m} (imported while parsing the DAG) imports {sorted(third_party & set(HEAVY))}"
        )
