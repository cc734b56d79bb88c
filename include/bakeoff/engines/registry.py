"""The one place engines are registered: a new engine is its module here plus its catalog rows
(``catalog/serving.yaml``). Callers ask the registry; no other module names an engine."""

from __future__ import annotations

from bakeoff.engines import atom, custom, emulator, sglang, trtllm, vllm
from bakeoff.engines.base import Counters, Engine, Gauges

# in the order messages list them
REGISTERED: dict[str, Engine] = {
    e.name: e
    for e in (
        vllm.ENGINE,
        sglang.ENGINE,
        atom.ENGINE,
        trtllm.ENGINE,
        custom.ENGINE,
        emulator.ENGINE,
    )
}


def deployable() -> tuple[str, ...]:
    """The stacks a cloud node can run."""
    return tuple(name for name, e in REGISTERED.items() if e.deployable)


def by_precedence() -> tuple[Engine, ...]:
    """The engines in the order words (a server's, a published framework's) are matched to them."""
    return tuple(sorted(REGISTERED.values(), key=lambda e: e.precedence))


def framework_family(framework: str) -> str | None:
    """The engine a published framework string names (None: a vendor's own harness)."""
    f = framework.lower()
    return next((e.name for e in by_precedence() if any(key in f for key in e.frameworks)), None)


def counters() -> tuple[Counters, ...]:
    """Every engine's server counters (bench.metrics.server_metrics scrapes them)."""
    return tuple(e.counters for e in REGISTERED.values() if e.counters is not None)


def gauges() -> tuple[Gauges, ...]:
    """Every engine's server gauges."""
    return tuple(e.gauges for e in REGISTERED.values() if e.gauges is not None)
