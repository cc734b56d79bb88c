"""SLA search: the highest concurrency (or request rate) whose point meets every SLO.

Bracket by doubling from ``start`` until a point fails (or ``max`` passes), then bisect between the
last passing and first failing load until they are one step apart (1 for concurrency; 5% of the
passing rate, or ``tolerance`` x it, for rate). Every probe is a saved point like any other.
Assumes meeting the SLOs is monotone in load; a non-monotone probe sequence is reported as such.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bakeoff.bench.load.loadgen import arrival_offsets
from bakeoff.plan.workload import Workload, rate_key


@dataclass
class SlaResult:
    over: str
    best: float | None = None
    best_summary: dict[str, Any] | None = None
    first_failing: float | None = None
    probes: list[dict[str, Any]] = field(default_factory=list)
    summaries: list[dict[str, Any]] = field(default_factory=list)
    monotone: bool = True
    stopped_short: bool = False  # the point budget ran out before the highest passing load was pinned down

    def to_dict(self) -> dict[str, Any]:
        s = self.best_summary or {}
        return {
            "over": self.over,
            "best": self.best,
            "first_failing": self.first_failing,
            "best_output_tps_per_gpu": s.get("output_tps_per_gpu"),
            "best_total_tps_per_gpu": s.get("total_tps_per_gpu"),
            "best_interactivity": s.get("interactivity"),
            "probes": self.probes,
            "monotone": self.monotone,
            "stopped_short": self.stopped_short,
        }


def _step(over: str, lo: float, tolerance: float) -> float:
    base = 1.0 if over == "concurrency" else 0.05 * lo
    return max(base, tolerance * lo)


async def search_loads(
    probe: Callable[[float], Awaitable[dict[str, Any]]],
    over: str,
    start: float,
    maximum: float,
    tolerance: float,
    max_probes: int,
    *,
    seen: dict[float, dict[str, Any]] | None = None,
    meets: Callable[[dict[str, Any]], bool] | None = None,
) -> SlaResult:
    """Generic bracketing + bisection; ``probe(load) -> summary`` (awaitable) measures one load.

    ``seen`` (load -> summary) may be shared between searches of one endpoint: a load one search measured
    is not measured again, and ``max_probes`` bounds the points measured by all of them together.
    ``meets`` judges a summary (default: its ``meets_slo``, the plan's SLO), so each search may hold the
    shared points to its own SLO. ``stopped_short`` says the budget ran out before the bracket closed."""
    res = SlaResult(over=over)
    seen = {} if seen is None else seen
    judge = meets or (lambda s: bool(s["meets_slo"]))

    async def run(load: float) -> bool:
        load = int(load) if over == "concurrency" else float(load)
        if load not in seen:
            seen[load] = await probe(load)
        s = seen[load]
        if all(p["load"] != load for p in res.probes):
            res.summaries.append(s)
            res.probes.append({"load": load, "meets_slo": judge(s), "output_tps_per_gpu": s.get("output_tps_per_gpu")})
        return judge(s)

    def affordable(load: float) -> bool:  # a load already measured costs nothing
        return len(seen) < max_probes or (int(load) if over == "concurrency" else float(load)) in seen

    lo = hi = None
    load = start
    while affordable(load):
        if await run(load):
            lo = load
            if load >= maximum:
                break
            load = min(load * 2, maximum)
        else:
            hi = load
            break
    if lo is None and hi is not None and over == "rate":  # even the start fails: bracket downwards
        load = hi / 2
        while affordable(load) and load > 1e-3:
            if await run(load):
                lo = load
                break
            hi, load = load, load / 2
    while lo is not None and hi is not None and hi - lo > _step(over, lo, tolerance):
        mid = (lo + hi) // 2 if over == "concurrency" else (lo + hi) / 2
        if not affordable(mid):
            break
        if await run(mid):
            lo = mid
        else:
            hi = mid
    if lo is not None:
        key = int(lo) if over == "concurrency" else float(lo)
        res.best, res.best_summary = key, seen[key]
    res.first_failing = hi
    passing = sorted(p["load"] for p in res.probes if p["meets_slo"])
    failing = sorted(p["load"] for p in res.probes if not p["meets_slo"])
    res.monotone = not (passing and failing and min(failing) < max(passing))
    closed = hi is not None and (lo is None or hi - lo <= _step(over, lo, tolerance))
    res.stopped_short = not closed and not (lo is not None and lo >= maximum)
    return res


async def search(workload: Workload, measure: Callable[..., Awaitable[dict[str, Any]]]) -> SlaResult:
    """The workload's SLA search; ``measure(key=, concurrency=, rate=, offsets=)`` measures and
    saves one probe (bench.run passes its point measurement) and returns its summary."""
    w, cfg = workload, workload.sla
    if cfg is None:
        raise ValueError(f"workload {w.name}: load sla needs an sla block (over, start, max)")

    async def probe(load: float) -> dict[str, Any]:
        if cfg.over == "concurrency":
            return await measure(key=int(load), concurrency=int(load), rate=None, offsets=None)
        n = w.requests_per_point or max(10, int(round(load * 30)))
        offs = arrival_offsets((w.warmup_requests or 0) + n, load, w.arrival, w.burstiness, seed=w.seed)
        return await measure(key=rate_key(load), concurrency=None, rate=load, offsets=offs)

    start = int(cfg.start) if cfg.over == "concurrency" else cfg.start
    return await search_loads(probe, cfg.over, start, cfg.max, cfg.tolerance, cfg.max_probes)
