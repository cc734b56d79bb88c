"""Point metrics that declare themselves: each unit names its columns, their unit and formula, the
columns it reads (``requires``), and computes its own from one point and those (AIPerf's metric
classes are the model: a tag, a unit, the tags it requires, a compute function).

The per-point table's columns (``bench.metrics.summary.POINT_COLUMNS``) are the declared units' columns in
order, so the contract cannot drift from what ``summarize`` produces, and ``docs/metrics.md``'s
column table is rendered from the same declarations (``markdown_table``; a test holds the page to it).
The order units are computed in is not the order they are listed in: ``evaluation_order`` sorts them
so each comes after the units computing what it requires, and refuses a required column that no unit
computes, or a cycle, when the metrics are declared rather than when a point is summarised.
A unit whose columns another step fills (the node's power sampler, the server's counters) declares
them with that ``source`` and no ``compute``: summarize leaves them None for that step to set.
"""

from __future__ import annotations

import graphlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bakeoff.plan.slo import Slo

SUMMARIZE = "bench.metrics.summary.summarize"


@dataclass(frozen=True)
class Point:
    """What every unit reads of one point, computed once by summarize: the measured (non-warm-up)
    request rows, the succeeded ones, the point's duration and token totals, and its settings."""

    measured: Sequence[Mapping[str, Any]]
    ok: Sequence[Mapping[str, Any]]
    duration: float
    input_tokens: int
    output_tokens: int
    gpus: int
    emulated: bool
    slo: Slo | None
    max_error_rate: float | None
    load_mode: str
    rate: float | None
    client: Mapping[str, Any]
    prompts: Mapping[str, Any]
    tpots: Sequence[float]  # per request (s), outputs of > 1 token
    gaps: Sequence[float]  # token-chunk gaps (s), pooled

    def per_s(self, x: float) -> float:
        """A count over the point's duration; NaN when the duration is unknown or 0."""
        return x / self.duration if self.duration and self.duration > 0 else math.nan


@dataclass(frozen=True)
class Column:
    name: str
    unit: str
    formula: str


Compute = Callable[[Point, Mapping[str, Any]], Mapping[str, Any]]


@dataclass(frozen=True)
class Metric:
    """One unit: its columns, the columns of other units it reads (``requires``: figures derived
    from others, as meets_slo and interactivity are) and how it computes its own from the point and
    those; it sees only the columns it requires, so an undeclared input fails rather than hides."""

    columns: tuple[Column, ...]
    compute: Compute | None = None
    source: str = SUMMARIZE
    requires: tuple[str, ...] = ()

    def values(self, point: Point, computed: Mapping[str, Any]) -> dict[str, Any]:
        names = [c.name for c in self.columns]
        if self.compute is None:
            return dict.fromkeys(names)
        got = dict(self.compute(point, {n: computed[n] for n in self.requires}))
        if sorted(got) != sorted(names):
            raise RuntimeError(f"point metric {names}: computed {sorted(got)}, not its declared columns")
        return {n: got[n] for n in names}


def one(name: str, unit: str, formula: str, fn: Callable[[Point], Any]) -> Metric:
    """A unit of one column computed from the point alone."""
    return Metric((Column(name, unit, formula),), lambda p, _: {name: fn(p)})


def derived(
    name: str, unit: str, formula: str, requires: Sequence[str], fn: Callable[[Point, Mapping[str, Any]], Any]
) -> Metric:
    """A unit of one column computed from the point and the columns it requires."""
    return Metric((Column(name, unit, formula),), lambda p, got: {name: fn(p, got)}, requires=tuple(requires))


def filled(source: str, columns: Sequence[tuple[str, str, str]]) -> Metric:
    """Columns another step fills after summarize (``source`` names it)."""
    return Metric(tuple(Column(*c) for c in columns), None, source)


def columns_of(units: Sequence[Metric]) -> list[str]:
    """Every declared column in order; a name declared twice is refused."""
    names = [c.name for m in units for c in m.columns]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise RuntimeError(f"point metrics: columns declared more than once: {twice}")
    return names


def evaluation_order(units: Sequence[Metric]) -> tuple[Metric, ...]:
    """The computed units in an order where each follows those computing the columns it requires
    (graphlib's topological sort). A required column that no computed unit declares (a typo, or a
    column another step fills later) and a cycle of requirements are refused, naming the columns."""
    computed = [m for m in units if m.compute is not None]
    by_column = {c.name: i for i, m in enumerate(computed) for c in m.columns}
    graph: dict[int, set[int]] = {}
    for i, m in enumerate(computed):
        missing = [n for n in m.requires if n not in by_column]
        if missing:
            raise RuntimeError(f"point metric {_names(m)}: requires {missing}, which no computed metric declares")
        graph[i] = {by_column[n] for n in m.requires}
    try:
        return tuple(computed[i] for i in graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        cycle = " -> ".join(str(_names(computed[i])) for i in e.args[1])
        raise RuntimeError(f"point metrics: their requirements form a cycle: {cycle}") from e


def _names(m: Metric) -> list[str]:
    return [c.name for c in m.columns]


def markdown_table(units: Sequence[Metric]) -> str:
    """The columns as docs/metrics.md lists them (column, unit, formula, filled by)."""
    lines = ["| column | unit | formula | filled by |", "|---|---|---|---|"]
    for m in units:
        for c in m.columns:
            lines.append(f"| `{c.name}` | {c.unit} | {c.formula} | `{m.source}` |")
    return "\n".join(lines)
