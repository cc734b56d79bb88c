"""SLO tiers and the capacity search a plan may ask for (``slo_tiers:``, ``capacity:``).

A tier is a name and a set of bounds in the plan's SLO vocabulary (``Slo``): a plan naming tiers gets,
per workload and target, the most concurrent requests or agent sessions each tier sustains
(``bench.load.capacity``), within one budget of points per target and workload.
"""

from __future__ import annotations

import re

from pydantic import Field, model_validator

from bakeoff.plan.fields import Strict
from bakeoff.plan.workload import MAX_CONCURRENCY

TIER_NAME = r"^[a-z][a-z0-9_-]{0,31}$"
MAX_TIERS = 6
# the buyers' usual tiers, strictest first; a stored plan's keys come back sorted, so this is their order
USUAL = ("interactive", "standard", "batch")


class CapacitySearch(Strict):
    """Where the capacity search starts, the highest load it may probe, and its budget of points."""

    start: int = Field(1, ge=1, le=MAX_CONCURRENCY, description="first concurrency (or concurrent sessions) probed")
    max: int = Field(256, ge=1, le=MAX_CONCURRENCY, description="highest load ever probed")
    points: int = Field(12, ge=2, le=64, description="points measured per target and workload for every tier together")

    @model_validator(mode="after")
    def _order(self) -> CapacitySearch:
        if self.start > self.max:
            raise ValueError(f"start ({self.start}) must not exceed max ({self.max}); raise max or lower start")
        return self


def check_tiers(names: list[str]) -> None:
    """Tier names are short plain words (they name report rows and CSV values), and few."""
    if len(names) > MAX_TIERS:
        raise ValueError(f"slo_tiers: at most {MAX_TIERS} tiers, got {len(names)}; keep the ones buyers ask about")
    for n in names:
        if not re.fullmatch(TIER_NAME, n):
            raise ValueError(
                f"slo_tiers.{n[:40]!r}: a tier name is a lowercase word (letters, digits, - or _), e.g. interactive"
            )


def ordered(names: list[str]) -> list[str]:
    """Tier names as the report lists them: the usual tiers strictest first, then any others by name."""
    return [n for n in USUAL if n in names] + sorted(n for n in names if n not in USUAL)
