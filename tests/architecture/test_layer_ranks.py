"""The library's packages are an order: each has a rank in docs/architecture.md and imports only packages
of a strictly lower rank (or itself). Every import counts: at module level, inside a function and under
``if TYPE_CHECKING:``: an annotation names a type the reader must look up, so an annotation-only cycle is
still two modules that cannot be read apart. The edges still against the order are listed there too, each
with its reason, and the list can only shrink (an entry no import needs any more fails)."""

from __future__ import annotations

import re

from scripts.import_graph import cycles, import_graph, imported_modules, package_graph
from tests.conftest import ROOT

DOC = ROOT / "docs" / "architecture.md"
RANKS = "<!-- package-ranks: begin -->", "<!-- package-ranks: end -->"
AGAINST = "<!-- against-the-order: begin -->", "<!-- against-the-order: end -->"
RANK_ROW = re.compile(r"^\| (?P<rank>\d+) \| `(?P<pkg>[\w.]+)` \| (?P<why>.+) \|$")
AGAINST_ROW = re.compile(r"^\| `(?P<src>[\w.]+)` → `(?P<dst>[\w.]+)` \| (?P<why>.+) \|$")


def _block(text: str, markers: tuple[str, str]) -> list[str]:
    begin, end = markers
    assert begin in text and end in text, f"{DOC.name}: the markers {begin} ... {end} are missing"
    return [line.strip() for line in text.split(begin, 1)[1].split(end, 1)[0].splitlines()]


def documented_ranks(text: str) -> dict[str, int]:
    """Package -> rank, from the rank table; a row without a reason is not a row."""
    return {m["pkg"]: int(m["rank"]) for line in _block(text, RANKS) if (m := RANK_ROW.match(line))}


def documented_exceptions(text: str) -> set[tuple[str, str]]:
    return {(m["src"], m["dst"]) for line in _block(text, AGAINST) if (m := AGAINST_ROW.match(line))}


def against_the_order(packages: dict[str, set[str]], ranks: dict[str, int]) -> set[tuple[str, str]]:
    """Every package edge that does not go to a strictly lower rank."""
    return {(a, b) for a, deps in packages.items() for b in deps if ranks[b] >= ranks[a]}


def test_every_package_has_a_rank_and_every_rank_a_package():
    ranks, packages = documented_ranks(DOC.read_text(encoding="utf-8")), package_graph(import_graph())
    assert sorted(ranks) == sorted(packages), (
        f"packages without a rank in {DOC.name}: {sorted(set(packages) - set(ranks))}; "
        f"ranked but gone: {sorted(set(ranks) - set(packages))}"
    )


def test_a_package_imports_only_lower_ranks_counting_every_import_kind():
    text = DOC.read_text(encoding="utf-8")
    ranks, allowed = documented_ranks(text), documented_exceptions(text)
    found = against_the_order(package_graph(import_graph(type_checking=True)), ranks)
    new = sorted(found - allowed)
    assert not new, (
        f"imports against the rank order of {DOC.name} (module level, function level and TYPE_CHECKING "
        "all count): " + ", ".join(f"{a} ({ranks[a]}) -> {b} ({ranks[b]})" for a, b in new) + "; move the shared "
        "type down (bakeoff.core imports nothing of the project) or the code up, rather than re-rank"
    )
    stale = sorted(allowed - found)
    assert not stale, f"{DOC.name} lists edges against the order that no import makes any more (drop them): {stale}"


def test_no_module_cycle_counting_annotation_only_imports():
    found = cycles(import_graph(type_checking=True))
    assert not found, "import cycles (TYPE_CHECKING imports counted):\n" + "\n".join(
        "  " + " -> ".join(c) for c in found
    )


def test_the_order_check_finds_an_import_upwards_and_a_same_rank_one():
    packages = {"core": set(), "plan": {"core"}, "providers": {"plan", "serving"}, "serving": {"providers"}}
    ranks = {"core": 0, "plan": 1, "providers": 2, "serving": 2}
    assert against_the_order(packages, ranks) == {("providers", "serving"), ("serving", "providers")}
    text = (
        f"{RANKS[0]}\n| rank | package | why |\n|---|---|---|\n| 0 | `core` | shared types |\n| 1 | `plan` |\n"
        f"{RANKS[1]}\n{AGAINST[0]}\n| `plan` → `core` | a reason |\n{AGAINST[1]}"
    )
    assert documented_ranks(text) == {"core": 0} and documented_exceptions(text) == {("plan", "core")}


def test_annotation_only_imports_are_edges_when_asked(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bakeoff import budget\n")
    modules = {"bakeoff": src, "bakeoff.budget": src}
    assert imported_modules("bakeoff.x", src, modules) == set()
    assert imported_modules("bakeoff.x", src, modules, type_checking=True) == {"bakeoff.budget"}
