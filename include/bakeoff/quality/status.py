"""Where each planned target stands after validation: ranked, quarantined, or without results.

The cost step reads this to keep a target that failed a quality gate out of the ranking and the
break-even prices while still showing its numbers apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from bakeoff import store
from bakeoff.store import StorePath

if TYPE_CHECKING:
    from bakeoff.plan import Plan


def _validation(run_dir: StorePath) -> dict[str, Any] | None:
    doc: dict[str, Any] | None = store.read_json(run_dir / "validation.json")  # validate_run's summary
    return doc


def target_status(plan: Plan, run_dir: StorePath, points: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per target slug: passed / not_validated / quarantined (validation failed) / no_results, with the
    reasons; ``ranked`` says whether its cost may enter the ranking."""
    val = _validation(run_dir)
    have = set(points["target"].astype(str)) if not points.empty else set()
    out = {}
    for t in plan.targets:
        v = ((val or {}).get("targets") or {}).get(t.slug)
        failures = list((v or {}).get("failures") or [])
        if t.slug not in have and t.name not in have:
            status = "no_results"
            failures = failures or ["no benchmark results were stored for this target"]
        elif val is None:
            status = "not_validated"
        elif v is None or not v.get("passed"):
            status = "quarantined"
            failures = failures or ["validation has no passing result for this target"]
        else:
            status = "passed"
        out[t.slug] = {"status": status, "failures": failures, "ranked": status in ("passed", "not_validated")}
    return out
