"""The stockout trend: capacity and quota refusals per cloud across a plan's runs.

Where capacity ran out is a procurement fact in itself (which cloud, which instance type, how often
a monthly run found none), so the Trend page shows it beside cost. Read from each run's dashboard
document (``summary``: per target ``provisioning``, condensed by ``report.provisioning.summary``);
a run published before that key existed contributes nothing rather than a zero.
"""

from __future__ import annotations

from typing import Any

from bakeoff.dashboard.runs import Run


def _prov(t: dict[str, Any]) -> dict[str, Any] | None:
    p = t.get("provisioning")
    return p if isinstance(p, dict) else None


def _refused(p: dict[str, Any]) -> int:
    r = p.get("refusals")
    if not isinstance(r, dict):
        return 0
    return sum(v for v in r.values() if isinstance(v, int) and not isinstance(v, bool) and v > 0)


def stockout_trend(mine: list[Run]) -> dict[str, Any]:
    """For runs oldest first: a chart (refusals per cloud per run, one series per cloud) and a table
    per cloud and instance type (runs that recorded provisioning, runs with a refusal, runs that got
    no node at all, refusals in all). Empty when no run recorded provisioning."""
    per_run: dict[str, dict[int, int]] = {}
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for i, r in enumerate(mine):
        for t in r.targets.values():
            p = _prov(t)
            if p is None:
                continue
            cloud, itype = str(p.get("provider") or "?"), str(p.get("instance_type") or "?")
            n = _refused(p)
            per_run.setdefault(cloud, {})
            per_run[cloud][i] = per_run[cloud].get(i, 0) + n
            counts = {"runs": 0, "refused_runs": 0, "no_node_runs": 0, "refusals": 0}
            row = table.setdefault((cloud, itype), {"cloud": cloud, "instance_type": itype, **counts})
            row["runs"] += 1
            row["refused_runs"] += 1 if n else 0
            row["no_node_runs"] += 1 if p.get("refused_everywhere") else 0
            row["refusals"] += n
            if p.get("refused_everywhere"):
                row["last_no_node"] = r.when
    if not table:
        return {"chart": None, "rows": []}
    chart = {
        "id": "trend-stockouts",
        "kind": "category",
        "labels": [r.when or r.key for r in mine],
        "x": "run (started, UTC)",
        "y": "create refusals (capacity or quota) per cloud",
        "datasets": [
            {"label": cloud, "data": [{"x": i, "y": n} for i, n in sorted(pts.items())], "line": True}
            for cloud, pts in sorted(per_run.items())
        ],
        "events": [],
    }
    return {"chart": chart, "rows": [table[k] for k in sorted(table)]}
