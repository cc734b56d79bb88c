"""docs/architecture.md held to the code: the package dependency table is the imports there are, and
every function-level import in the library says why it is not at the top of its module."""

from __future__ import annotations

import ast
import re

from tests.conftest import ROOT
from tests.unit.test_import_layers import LIB, PACKAGE, _is_type_checking, import_graph, library_modules

DOC = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- package-imports: begin -->", "<!-- package-imports: end -->"
ROW = re.compile(r"^\| `(?P<pkg>[\w.]+)` \| (?P<deps>.*) \|$")
# A function-level import's reason: a trailing comment with words after any noqa code.
REASON = re.compile(r"^\s*(?:noqa:\s*[A-Z]+\d+(?:\s*,\s*[A-Z]+\d+)*)?\s*[-:;]?\s*(?P<why>(?!noqa)\S.{3,})$")


def package_of(module: str) -> str:
    """The first name under ``bakeoff`` (``bakeoff.plan.target`` -> ``plan``); ``bakeoff`` itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else PACKAGE


def package_imports() -> dict[str, set[str]]:
    """Which package imports which (every import that runs, function-level ones included)."""
    out: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        deps = out.setdefault(package_of(module), set())
        deps.update(p for p in map(package_of, targets) if p != package_of(module))
    return out


def documented_imports(text: str) -> dict[str, set[str]]:
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    table: dict[str, set[str]] = {}
    for line in block.splitlines():
        m = ROW.match(line.strip())
        if m:
            deps = m["deps"].strip()
            table[m["pkg"]] = set() if deps == "nothing" else {d.strip(" `") for d in deps.split(",")}
    return table


def test_the_package_table_is_the_imports_there_are():
    text = DOC.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, f"{DOC.name}: the package table's markers are missing"
    doc, code = documented_imports(text), package_imports()
    assert sorted(doc) == sorted(code), f"packages missing from the table: {sorted(set(code) - set(doc))}; " + (
        f"listed but gone: {sorted(set(doc) - set(code))}"
    )
    outside = {p: sorted(code[p] - doc[p]) for p in code if code[p] - doc[p]}
    assert not outside, (
        f"imports outside the table in {DOC.name} (package: what it imports without leave): {outside}; "
        "import through a package the table allows, or widen the table on purpose"
    )
    stale = {p: sorted(doc[p] - code[p]) for p in doc if doc[p] - code[p]}
    assert not stale, f"{DOC.name} allows imports no module makes any more (drop them): {stale}"


def test_the_table_reader_reads_rows_and_nothing():
    text = f"{BEGIN}\n| package | may import |\n|---|---|\n| `cost` | `store` |\n| `store` | nothing |\n{END}"
    assert documented_imports(text) == {"cost": {"store"}, "store": set()}
    assert package_of("bakeoff.plan.target") == "plan" and package_of("bakeoff") == "bakeoff"


def function_level_imports(tree: ast.AST) -> list[int]:
    """Line numbers of the imports inside a function (TYPE_CHECKING blocks never run; left out)."""
    lines: list[int] = []

    def walk(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                continue
            here = inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if here and isinstance(child, (ast.Import, ast.ImportFrom)):
                lines.append(child.lineno)
            walk(child, here)

    walk(tree, False)
    return lines


def unexplained_imports(source: str) -> list[str]:
    lines = source.splitlines()
    return [
        lines[n - 1].strip()
        for n in function_level_imports(ast.parse(source))
        if not REASON.match(lines[n - 1].partition("#")[2])
    ]


def test_every_function_level_import_says_why():
    missing = []
    for path in library_modules().values():
        for line in unexplained_imports(path.read_text(encoding="utf-8")):
            missing.append(f"{path.relative_to(LIB)}: {line}")
    assert not missing, (
        "function-level imports without their reason (a trailing comment after the noqa code, e.g. "
        "'# noqa: PLC0415 - scipy only in the cost step'):\n  " + "\n  ".join(missing)
    )


def test_the_reason_check_tells_a_reason_from_a_bare_noqa():
    src = (
        "def f():\n"
        "    import a  # noqa: PLC0415\n"
        "    import b  # noqa: PLC0415 - b loads scipy\n"
        "    from c import d  # only for static endpoints\n"
        "import e\n"
    )
    assert unexplained_imports(src) == ["import a  # noqa: PLC0415"]
