"""Cost at the SLO, one definition for what is predicted and what is measured: of a target's points on one
workload (one per load level the plan asks for), those that meet the SLO, and of them the cheapest per unit
of the ranking basis (a tie goes to the higher load). ``bakeoff predict`` chooses among the twin's predicted
points and the cost step among the measured ones with this same function, so the two name the same thing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def cheapest(points: Sequence[Mapping[str, Any]], key: str) -> Mapping[str, Any] | None:
    """The point at the SLO: ``meets_slo`` true, lowest ``key`` (a missing or NaN cost sorts last), then the
    highest ``concurrency``; None when no point meets the SLO."""

    def order(p: Mapping[str, Any]) -> tuple[float, float]:
        cost = p.get(key)
        cost = float(cost) if cost is not None and not math.isnan(float(cost)) else math.inf
        return cost, -float(p.get("concurrency") or 0)

    meeting = [p for p in points if bool(p.get("meets_slo"))]
    return min(meeting, key=order) if meeting else None
