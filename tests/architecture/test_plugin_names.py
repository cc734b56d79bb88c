"""Clouds and engines are plug-ins: no module outside a plug-in branches on a cloud's or an engine's name.

A branch is any code that picks by the name: a comparison or ``in`` (``x.provider == "aws"``,
``stack in ("vllm", "sglang")``), a dict keyed by it (``{"aws": _aws}``), a lookup or a prefix test
(``t["oci"]``, ``.get("vultr")``, ``.startswith("aws")``), a ``match`` case, or a literal collection
naming two or more of them (a table of names; one word alone, such as the ``"local"`` storage
protocol, is not one). Docstrings, comments, messages and the catalog's YAML are data, not branches,
and are not read. Each name set below comes from where its plug-ins are registered, and each
allow-list entry says why that module may name them.

To engines: the engine set (``engines/registry.REGISTERED``) is held to ``engines/``,
where each engine's module declares its flags, argv, provenance words, server metric names and twin
family (``test_every_allowed_module_still_names_its_plug_ins`` says when an entry is no longer needed).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

import pytest

from bakeoff.core.provider_facts import PROVIDERS
from tests.conftest import ROOT

SCANNED = ("include/bakeoff", "include/bakeoff_sandbox", "plugins", "dags")

# Where naming a cloud is the point, each with its reason; everywhere else reads the registry's facts.
CLOUD_PLUG_INS = {
    "include/bakeoff/providers": "the registry and each cloud's own provider and pre-flight",
    # the sandbox finds each fake through the registry's ``fake``; only the fakes themselves name clouds
    "include/bakeoff_sandbox/clouds.py": "the Vultr and DigitalOcean fakes, which share one server",
    "include/bakeoff_sandbox/spec_check.py": "the status each vendored API definition refuses a request with",
}


def _engines() -> set[str]:
    from bakeoff.engines.registry import REGISTERED

    return set(REGISTERED)


ENGINE_PLUG_INS = {
    "include/bakeoff/engines": "one module per engine, registered in registry.py",
    "include/bakeoff/plan/workload.py": "length_interval's 'vllm' is vLLM's benchmark length rule, not the engine",
    "include/bakeoff/serving/emulator": "the emulator engine's own server (its 'emulator' is the plan's settings)",
    "include/bakeoff/core/provider_facts.py": "'emulator' is a provider kind there, not the engine",
}

# name set -> (its names, where they may be named)
NAME_SETS: dict[str, tuple[Callable[[], set[str]], dict[str, str]]] = {
    "cloud": (lambda: set(PROVIDERS), CLOUD_PLUG_INS),
    "engine": (_engines, ENGINE_PLUG_INS),
}
LOOKUPS = {"get", "pop", "setdefault", "startswith", "endswith"}


def _strings(node: ast.AST | None) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def _patterns(p: ast.pattern) -> Iterator[ast.AST]:
    """The values a ``match`` case compares with (its alternatives and mapping keys included)."""
    if isinstance(p, ast.MatchValue):
        yield p.value
    elif isinstance(p, ast.MatchOr):
        for q in p.patterns:
            yield from _patterns(q)
    elif isinstance(p, ast.MatchMapping):
        yield from p.keys
    elif isinstance(p, ast.MatchAs) and p.pattern is not None:
        yield from _patterns(p.pattern)


def _picked(node: ast.AST) -> list[ast.AST]:
    """The parts of ``node`` that pick by a string, when it is a branch of one of the kinds above."""
    if isinstance(node, ast.Compare):
        return [node.left, *node.comparators]
    if isinstance(node, ast.Dict):
        return [k for k in node.keys if k is not None]
    if isinstance(node, ast.Subscript):
        return [node.slice]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LOOKUPS:
        return node.args[:1]
    if isinstance(node, ast.match_case):
        return list(_patterns(node.pattern))
    return []


def name_branches(source: str, names: set[str]) -> list[str]:
    """Every place ``source`` branches on one of ``names`` (see the module's docstring)."""
    out = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        named = {s for part in _picked(node) for s in _strings(part)} & names
        if not named and isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            if len(set(_strings(node)) & names) >= 2:
                named = set(_strings(node)) & names
        if named:
            line = getattr(node, "lineno", getattr(getattr(node, "pattern", None), "lineno", 0))
            text = f"case {ast.unparse(node.pattern)}" if isinstance(node, ast.match_case) else ast.unparse(node)
            out.append(f"line {line}: {text}")
    return sorted(set(out), key=lambda s: (int(s.split(":")[0].split()[1]), s))


def _outside(allowed: dict[str, str]) -> Iterator[tuple[str, str]]:
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not any(rel == a or rel.startswith(a + "/") for a in allowed):
                yield rel, path.read_text(encoding="utf-8")


@pytest.mark.parametrize("kind", sorted(NAME_SETS))
def test_no_module_branches_on_a_plug_in_name_outside_its_plug_in(kind):
    names, allowed = NAME_SETS[kind]
    found = [f"{rel} {b}" for rel, src in _outside(allowed) for b in name_branches(src, names())]
    assert not found, (
        f"branches on a {kind}'s name outside its plug-in (declare the fact beside the {kind} and read it, "
        "e.g. the provider registry's PROVIDERS[name].preflight or engines/registry.REGISTERED):\n  "
        + "\n  ".join(found)
    )


@pytest.mark.parametrize("kind", sorted(NAME_SETS))
def test_every_allowed_module_still_names_its_plug_ins(kind):
    """An allow-list entry no module needs any more goes (a folder counts when any module in it does)."""
    names, allowed = NAME_SETS[kind]
    stale = []
    for entry in allowed:
        path = ROOT / entry
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        if not any(name_branches(f.read_text(encoding="utf-8"), names()) for f in files if f.exists()):
            stale.append(entry)
    assert not stale, f"allowed to name a {kind} but names none (drop it): {stale}"


def test_the_check_finds_every_kind_of_branch():
    names = set(PROVIDERS)
    src = (
        'if target.provider == "static": pass\n'
        'if name in ("aws", "x"): pass\n'
        'if kind == "endpoint": pass\n'
        'CHECKS = {"aws": _aws, "other": _other}\n'
        'limit = LIMITS["oci"]\n'
        'limit = LIMITS.get("vultr", 0)\n'
        "match cloud:\n"
        '    case "digitalocean" | "elsewhere":\n'
        "        pass\n"
        'CLOUDS = ("aws", "oci")\n'
        'PROTOCOLS = ("", "file", "local")\n'
        'log.info("on aws: %s", x)\n'
        'if region.startswith("oci"): pass\n'
        'def f():\n    """Not on oci."""\n'
    )
    assert name_branches(src, names) == [
        "line 1: target.provider == 'static'",
        "line 2: name in ('aws', 'x')",
        "line 4: {'aws': _aws, 'other': _other}",
        "line 5: LIMITS['oci']",
        "line 6: LIMITS.get('vultr', 0)",
        "line 8: case 'digitalocean' | 'elsewhere'",
        "line 10: ('aws', 'oci')",
        "line 13: region.startswith('oci')",
    ]
    assert name_branches('if target.stack == "sglang": pass\n', _engines()) == ["line 1: target.stack == 'sglang'"]
