"""Point metrics that declare themselves: each unit names its columns, their unit and formula, and
computes them from one point (AIPerf's one-class-per-metric package is the model).

The per-point table's columns (``bench.metrics.POINT_COLUMNS``) are the declared units' columns in
order, so the contract cannot drift from what ``summarize`` produces, and ``docs/metrics.md``'s
column table is rendered from the same declarations (``markdown_table``; a test holds the page to it).
A unit whose columns another step fills (the node's power sampler, the server's counters) declares
them with that ``source`` and no ``compute``: summarize leaves them None for that step to set.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bakeoff.plan.slo import Slo

SUMMARIZE = "bench.metrics.summarize"


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
    """One unit: its columns and how they are computed from the point (and the columns computed
    before it, for figures derived from others: meets_slo, interactivity)."""

    columns: tuple[Column, ...]
    compute: Compute | None = None
    source: str = SUMMARIZE

    def values(self, point: Point, so_far: Mapping[str, Any]) -> dict[str, Any]:
        names = [c.name for c in self.columns]
        if self.compute is None:
            return dict.fromkeys(names)
        got = dict(self.compute(point, so_far))
        if sorted(got) != sorted(names):
            raise RuntimeError(f"point metric {names}: computed {sorted(got)}, not its declared columns")
        return {n: got[n] for n in names}


def one(name: str, unit: str, formula: str, fn: Callable[[Point], Any]) -> Metric:
    """A unit of one column computed from the point alone."""
    return Metric((Column(name, unit, formula),), lambda p, _: {name: fn(p)})


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


def markdown_table(units: Sequence[Metric]) -> str:
    """The columns as docs/metrics.md lists them (column, unit, formula, filled by)."""
    lines = ["| column | unit | formula | filled by |", "|---|---|---|---|"]
    for m in units:
        for c in m.columns:
            lines.append(f"| `{c.name}` | {c.unit} | {c.formula} | `{m.source}` |")
    return "\n".join(lines)
