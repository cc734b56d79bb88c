"""mypy's strict overrides hold what they say: every listed module exists, every strict override
carries the whole set of strict flags (disallow_untyped_defs is what requires an annotation on every
function), and the modules the typing gate was built for stay in it. mypy itself runs in CI
(``make typecheck``); this keeps a rename or a trimmed override from dropping a module silently."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatchcase

from scripts.import_graph import library_modules
from tests.conftest import ROOT

STRICT_FLAGS = (
    "disallow_untyped_defs",
    "disallow_incomplete_defs",
    "disallow_untyped_calls",
    "disallow_untyped_decorators",
    "disallow_any_generics",
    "disallow_subclassing_any",
    "check_untyped_defs",
    "warn_return_any",
    "no_implicit_reexport",
    "extra_checks",
)
# The modules that must stay strict: the typed core, the budget guard, the benchmark's measurement
# path, the command line, the serving side (every serving module) and every provider module (the
# clouds, OCI's parts).
MUST_BE_STRICT = (
    "bakeoff.bench.client.transport",
    "bakeoff.bench.load.point",
    "bakeoff.bench.run",
    "bakeoff.spend.budget",
    "bakeoff.cli",
    "bakeoff.cost",
    "bakeoff.core.facts",
    "bakeoff.clusters.node_slots",
    "bakeoff.run.pipeline",
    "bakeoff.plan",
    "bakeoff.cleanup.reaper",
    "bakeoff.report.caveats",
    "bakeoff.store",
)


def overrides() -> list[dict]:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    return cfg.get("overrides", [])


def strict_patterns() -> list[str]:
    return [m for o in overrides() if o.get("disallow_untyped_defs") for m in o["module"]]


def covered(module: str, patterns: list[str]) -> bool:
    """Whether mypy applies one of ``patterns`` to ``module`` (``a.*`` covers ``a`` and what is under it)."""
    return any(module == p or (p.endswith(".*") and (module == p[:-2] or fnmatchcase(module, p))) for p in patterns)


def test_every_strict_override_carries_every_strict_flag():
    for o in overrides():
        if o.get("disallow_untyped_defs"):
            missing = [f for f in STRICT_FLAGS if o.get(f) is not True]
            assert not missing, f"strict override for {o['module'][:3]}...: {missing} not set to true"


def test_every_strict_module_exists():
    modules = set(library_modules())
    gone = [p for p in strict_patterns() if not any(covered(m, [p]) for m in modules)]
    assert not gone, f"strict overrides name modules that do not exist (renamed? update pyproject.toml): {gone}"


def test_the_typed_core_budget_serving_and_providers_stay_strict():
    patterns, modules = strict_patterns(), set(library_modules())
    serving = sorted(m for m in modules if m.startswith("bakeoff.serving"))
    providers = sorted(m for m in modules if m == "bakeoff.providers" or m.startswith("bakeoff.providers."))
    loose = [m for m in (*MUST_BE_STRICT, *serving, *providers) if not covered(m, patterns)]
    assert not loose, f"modules that must be held to mypy strict are not (add them back to an override): {loose}"


# The one module left out on purpose: it subclasses the optional lm_eval package (not installed), which
# mypy reads as Any.
NOT_STRICT = ("bakeoff.quality.lm_eval_backend",)


def test_every_library_module_is_strict_but_the_named_exception():
    """A new module (a bench module listed by name, a new package) joins a strict override or fails here."""
    patterns = strict_patterns()
    loose = sorted(m for m in library_modules() if m not in NOT_STRICT and not covered(m, patterns))
    assert not loose, f"add these to a strict override in pyproject.toml (mypy --strict must pass them): {loose}"
    assert all(not covered(m, patterns) for m in NOT_STRICT), "an exception is strict now: drop it from NOT_STRICT"


def test_the_coverage_reader_reads_patterns_as_mypy_does():
    assert covered("bakeoff.plan", ["bakeoff.plan.*"]) and covered("bakeoff.plan.target", ["bakeoff.plan.*"])
    assert not covered("bakeoff.planner", ["bakeoff.plan.*"]) and not covered("bakeoff.plan.target", ["bakeoff.plan"])
