"""Every function-level import in the library says why it is not at the top of its module (the package
order itself is tests/architecture/test_layer_ranks.py's)."""

from __future__ import annotations

import ast
import re

from scripts.import_graph import LIB, function_level_imports, library_modules

# A function-level import's reason: a trailing comment with words after any noqa code.
REASON = re.compile(r"^\s*(?:noqa:\s*[A-Z]+\d+(?:\s*,\s*[A-Z]+\d+)*)?\s*[-:;]?\s*(?P<why>(?!noqa)\S.{3,})$")


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
