"""The few lines a person reads first after a run: who is cheapest at the SLO, and by how much."""

from __future__ import annotations

from pathlib import Path

from bakeoff import store


def headline_table(run_dir: str | Path) -> str:
    """Plain-text headline from the run's cost.json (written by the cost step)."""
    doc = store.read_json(Path(run_dir) / "cost.json")
    if not doc:
        return "  (no cost headline: the cost step did not run)"
    stamp = "EMULATED — " if doc.get("emulated") else ""
    lines = [f"  {stamp}{doc.get('summary', '')}"]
    for workload, part in (doc.get("workloads") or {}).items():
        lines.append(f"  workload {workload}: cost at the SLO, USD per million {doc.get('basis', 'total')} tokens")
        lines.append(
            f"    {'target':<24} {'USD/M':>9} {'conc':>5} {'tok/s/user':>10} {'USD/GPU-h':>9} {'break-even':>10}"
        )
        for r in part.get("ranking", []):
            lines.append(
                f"    {r['target']:<24} {_num(r.get('usd_per_m')):>9} {_num(r.get('concurrency')):>5} "
                f"{_num(r.get('interactivity')):>10} {_num(r.get('usd_per_gpu_hour')):>9} "
                f"{_num(r.get('break_even_usd_per_gpu_hour')):>10}"
            )
        if part.get("misses_slo"):
            lines.append(f"    missed the SLO at every load: {', '.join(part['misses_slo'])}")
    for key, label in (("quarantined", "did not pass validation"), ("no_results", "produced no results")):
        if doc.get(key):
            lines.append(f"  {label}: {', '.join(doc[key])}")
    return "\n".join(lines)


def _num(v) -> str:
    return "-" if v is None else f"{v:.4g}"
