"""Capacity at SLO tiers: per tier, the most concurrent requests (a request workload) or concurrent agent
sessions (a session workload) a target sustains while a point still meets the tier's SLO.

One bracketing + bisection search per tier (``bench.load.sla.search_loads``), tiers in the plan's order, over
one shared memo of measured points: a load one tier's search measured is judged by the next tier without
being measured again, and the plan's budget bounds the points all tiers measure together. A tier whose
search ran out of budget before its bracket closed says so (``stopped_short``). The probes are saved as
points under the target's ``capacity/`` folder (evidence, never the cost tables' points), and the result
as ``capacity-<workload>.json``: per tier the highest passing load, the first failing one (the bracket
is the capacity's interval), every step, and the figures of the passing point the capacity table prices.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from bakeoff.bench.load.sla import search_loads
from bakeoff.bench.metrics.summary import request_times
from bakeoff.plan.slo import Slo

# summary, the point's request records -> whether the point meets one tier's SLO
Judge = Callable[[Mapping[str, Any], list[dict[str, Any]]], bool]
# the figures of a tier's passing point the capacity table reads (bench.metrics.summary columns)
FIGURES = (
    "gpus",
    "duration_s",
    "completed",
    "output_tps_per_gpu",
    "total_tps_per_gpu",
    "sessions_per_hour",
    "power_w_per_gpu",
    "energy_method",
    "emulated",
)


async def search_tiers(
    judges: Mapping[str, Judge],
    measure: Callable[[int], Awaitable[tuple[dict[str, Any], list[dict[str, Any]]]]],
    *,
    over: str,
    start: int,
    maximum: int,
    budget: int,
) -> dict[str, Any]:
    """Search every tier; ``measure(load) -> (summary, request records)`` measures and saves one point."""
    seen: dict[float, dict[str, Any]] = {}
    records: dict[float, list[dict[str, Any]]] = {}

    async def probe(load: float) -> dict[str, Any]:
        summary, recs = await measure(int(load))
        records[load] = recs
        return summary

    tiers: dict[str, Any] = {}
    for name, judge in judges.items():

        def meets(s: dict[str, Any], judge: Judge = judge) -> bool:
            return judge(s, records[_load_of(seen, s)])

        res = await search_loads(probe, "concurrency", start, maximum, 0.0, budget, seen=seen, meets=meets)
        best = res.best_summary or {}
        tiers[name] = {
            "best": res.best,
            "first_failing": res.first_failing,
            "stopped_short": res.stopped_short,
            "monotone": res.monotone,
            "steps": [{"load": p["load"], "meets": p["meets_slo"]} for p in res.probes],
            "figures": {k: best.get(k) for k in FIGURES} if res.best is not None else {},
        }
    return {"over": over, "budget": budget, "points_measured": len(seen), "max": maximum, "tiers": tiers}


def _load_of(seen: Mapping[float, dict[str, Any]], summary: dict[str, Any]) -> float:
    """Which load a memoized summary was measured at (the memo is keyed by load)."""
    return next(k for k, s in seen.items() if s is summary)


def judge_of(slo: Slo) -> Judge:
    """A tier's verdict on a point: its percentile bounds on the point's summary, and its own per-request
    bounds on the point's records (the summary's goodput was counted against the plan's SLO, not the tier's)."""

    def judge(summary: Mapping[str, Any], records: list[dict[str, Any]]) -> bool:
        measured = [r for r in records if not r.get("warmup")]
        share = slo.goodput_share(request_times(r) for r in measured)
        return slo.meets({**summary, "good_fraction": share})

    return judge
