"""The fake clouds stay out of what bakeoff ships: no module of the library imports the sandbox or
its server-side dependencies (werkzeug, moto), which only the ``sandbox`` extra installs."""

from __future__ import annotations

import ast

from tests.conftest import ROOT

SANDBOX_ONLY = ("bakeoff_sandbox", "werkzeug", "moto")


def _imports(path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def test_the_library_never_imports_the_sandbox():
    files = sorted((ROOT / "include" / "bakeoff").rglob("*.py")) + sorted((ROOT / "plugins").glob("*.py"))
    assert len(files) > 50
    offenders = {str(f.relative_to(ROOT)): sorted(_imports(f) & set(SANDBOX_ONLY)) for f in files}
    assert {f: m for f, m in offenders.items() if m} == {}


def test_the_sandbox_is_its_own_package():
    assert not (ROOT / "include" / "bakeoff" / "sandbox").exists()
    assert (ROOT / "include" / "bakeoff_sandbox" / "__main__.py").is_file()
    assert "werkzeug" in _imports(ROOT / "include" / "bakeoff_sandbox" / "clouds.py")
