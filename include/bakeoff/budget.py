"""Budget guard: refuse a run whose estimated spend exceeds the plan's cap, before anything starts.

estimate per target = node price x (boot + model load + planned benchmark time) x (1 + margin).
Emulated (local) targets are priced as the hardware they stand for, so a demo shows what the real
run would cost, but they spend nothing.
"""
from __future__ import annotations

from typing import Any

BOOT_H = {"local": 0.0, "static": 0.0}
DEFAULT_BOOT_H = 0.25
MODEL_LOAD_H = 0.25
MARGIN = 0.25


class BudgetExceeded(RuntimeError):
    """The plan would cost more than its cap; the message carries the breakdown."""


def bench_hours(plan, target) -> float:
    """Planned benchmark time: requests x decode time at a pessimistic 50 ms/token, per level."""
    seconds = 0.0
    for w in plan.workloads:
        for c in w.concurrency:
            n = (w.requests_at(c) + w.warmup_at(c)) * w.repeats
            seconds += (n / c) * w.output_len * 0.05
    return seconds / 3600


def estimate(plan) -> dict[str, Any]:
    rows = []
    for t in plan.targets:
        boot = BOOT_H.get(t.provider, DEFAULT_BOOT_H)
        hours = (boot + MODEL_LOAD_H + bench_hours(plan, t)) * (1 + MARGIN)
        rows.append({"target": t.name, "usd_per_hour": t.usd_per_hour, "hours": round(hours, 3),
                     "usd": round(hours * t.usd_per_hour, 2), "spends": t.provider not in ("local", "static")})
    total = round(sum(r["usd"] for r in rows), 2)
    return {"cap_usd": plan.budget_usd, "estimate_usd": total, "targets": rows}


def check(plan) -> dict[str, Any]:
    est = estimate(plan)
    if est["estimate_usd"] > plan.budget_usd:
        lines = "\n".join(f"  {r['target']}: {r['hours']} h x {r['usd_per_hour']} USD/h = {r['usd']} USD" for r in est["targets"])
        raise BudgetExceeded(
            f"budget_usd: estimated spend {est['estimate_usd']} USD exceeds the cap of {plan.budget_usd} USD:\n{lines}\n"
            "Raise budget_usd, or drop targets, load levels or requests.")
    return est
