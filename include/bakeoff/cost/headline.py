"""The few lines a person reads first after a run: who is cheaper at the SLO, by how much, and
whether the repeats support saying so.

``build_headline`` turns the cost tables into the JSON document the cost step stores as cost.json
(every report format reads that one sentence); ``headline_table`` prints it for the terminal.
A target is called cheaper only when the bootstrap interval of the cost difference over repeats
excludes parity (``cost._add_verdict``); otherwise the sentence says there is no clear winner.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from bakeoff import store
from bakeoff.plan import Plan
from bakeoff.store import StorePath


def _r(x: object, nd: int = 4) -> Any:
    """JSON-safe rounding: NaN becomes None."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    if isinstance(x, (float, np.floating)):
        return round(float(x), nd)
    if isinstance(x, (np.integer,)):
        return int(x)
    return x


def _ranking_row(r: pd.Series, col: str) -> dict[str, Any]:
    return {
        "target": r["name"],
        "usd_per_m": _r(r[col]),
        "ci": [_r(r[f"{col}_ci_low"]), _r(r[f"{col}_ci_high"])],
        "concurrency": _r(r["concurrency"]),
        "interactivity": _r(r["interactivity"], 2),
        "usd_per_gpu_hour": _r(r["usd_per_gpu_hour"]),
        "vs_cheapest_pct": _r(r["vs_cheapest_pct"], 1),
        "vs_cheapest_pct_ci": [_r(r["vs_cheapest_pct_ci_low"], 1), _r(r["vs_cheapest_pct_ci_high"], 1)],
        "clearly_dearer": bool(r["clearly_dearer"]) if r["rank"] != 1 else None,
        "break_even_usd_per_gpu_hour": _r(r["break_even_usd_per_gpu_hour"]),
    }


def _verdict(ranking: list[dict[str, Any]]) -> dict[str, Any]:
    """Cheapest by the point estimate, and whether every rival's interval of the difference excludes parity."""
    if len(ranking) < 2:
        return {"cheaper": ranking[0]["target"] if ranking else None, "clear": bool(ranking), "tied_with": []}
    tied = [r["target"] for r in ranking[1:] if not r["clearly_dearer"]]
    return {"cheaper": ranking[0]["target"], "clear": not tied, "tied_with": tied}


def _summary(ranking: list[dict[str, Any]], verdict: dict[str, Any], basis: str, stamp: str) -> str:
    if not ranking:
        return f"no target has a cost at the SLO (none met it, or none passed validation){stamp}"
    a = ranking[0]
    if len(ranking) == 1:
        return f"only {a['target']} has a cost at the SLO: {a['usd_per_m']:.4g} USD/M {basis} tokens{stamp}"
    if verdict["clear"]:
        b = ranking[1]
        lo, hi = b["vs_cheapest_pct_ci"]
        more = f"{lo:.1f}%" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}% to {hi:.1f}%"
        return (
            f"{a['target']} is cheapest at the SLO: {a['usd_per_m']:.4g} USD/M {basis} tokens vs "
            f"{b['usd_per_m']:.4g} for {b['target']} ({(1 - a['usd_per_m'] / b['usd_per_m']) * 100:.1f}% less; "
            f"{b['target']} costs {more} more, 95% interval over repeats); "
            f"{b['target']} matches it at {b['break_even_usd_per_gpu_hour']:.4g} USD/GPU-h "
            f"(now {b['usd_per_gpu_hour']:.4g}){stamp}"
        )
    b = next(r for r in ranking[1:] if r["target"] in verdict["tied_with"])
    lo, hi = b["vs_cheapest_pct_ci"]
    why = (
        f"the 95% interval of the difference over repeats, {lo:.1f}% to {hi:.1f}%, includes parity"
        if lo is not None and hi is not None
        else "too few repeats for an interval (set the workload's repeats to 2 or more for a verdict)"
    )
    return (
        f"no clear winner at the SLO: {a['target']} {a['usd_per_m']:.4g} vs {b['target']} {b['usd_per_m']:.4g} "
        f"USD/M {basis} tokens; {why}{stamp}"
    )


# How a client-bound level is measured with the server setting the pace instead.
CLIENT_FIX = "more client processes (the workload's workers or client_fleet) or a bigger client machine"


def _lower_bounds(part: pd.DataFrame, basis: str) -> list[dict[str, Any]]:
    """Targets whose cheapest level meeting the SLO was client-bound: that level and its cost, and
    whether it is the target's only figure (no level the server set the pace for met the SLO)."""
    col = f"client_bound_usd_per_m_{basis}"
    out = []
    for _, r in part[part["ranked"] & part["lower_bound"].fillna(False).astype(bool)].iterrows():
        out.append(
            {
                "target": r["name"],
                "concurrency": int(r["client_bound_concurrency"]),  # set wherever lower_bound is
                "usd_per_m": _r(r[col]),
                "only": r["paced_by"] == "client",
            }
        )
    return out


def _lower_bound_text(rows: list[dict[str, Any]], basis: str) -> str:
    """The headline's clause for client-bound figures: a lower bound for the hardware, and the fix."""
    parts = []
    for b in rows:
        figure = f"{b['usd_per_m']:.4g} USD/M {basis} tokens at c={b['concurrency']}"
        if b["only"]:
            parts.append(
                f"{b['target']} met the SLO only where the client set the pace ({figure}): a lower bound for "
                "the hardware, not its figure, and not ranked"
            )
        else:
            parts.append(
                f"{b['target']}'s cheapest level meeting the SLO was client-bound ({figure}), so its figure above "
                "is a lower bound for the hardware"
            )
    return "; ".join(parts) + f"; measure it with {CLIENT_FIX}" if parts else ""


def build_headline(
    plan: Plan,
    run_id: str,
    basis: str,
    emulated: bool,
    tdf: pd.DataFrame,
    at_slo: pd.DataFrame,
    evaluation: pd.DataFrame,
) -> dict[str, Any]:
    """The cost step's headline document (cost.json): per workload the ranking and the verdict, the
    summary sentence of the first workload, who was left out, and what the evaluation cost."""
    col = f"usd_per_m_{basis}"
    workloads: dict[str, Any] = {}
    for wl in sorted(at_slo["workload"].unique()) if not at_slo.empty else []:
        part = at_slo[at_slo["workload"] == wl]
        ranking = [_ranking_row(r, col) for _, r in part[part["rank"].notna()].sort_values("rank").iterrows()]
        missed = part[part["ranked"] & ~part["slo_met"].astype(bool)]["name"].tolist()
        workloads[wl] = {
            "ranking": ranking,
            "client_bound": _lower_bounds(part, basis) if "lower_bound" in part else [],
            "misses_slo": missed,
            "cheapest": ranking[0]["target"] if ranking else None,
            "verdict": _verdict(ranking),
        }
    first: dict[str, Any] = next(iter(workloads.values()), {"ranking": [], "verdict": _verdict([])})
    stamp = " (EMULATED)" if emulated else ""
    spend = evaluation[evaluation["spends"]]["usd"].sum()  # emulated / static targets bill nothing
    would = evaluation["usd"].sum(min_count=1)
    return {
        "plan": plan.name,
        "run_id": run_id,
        "emulated": emulated,
        "basis": basis,
        "summary": _summary(first["ranking"], first["verdict"], basis, stamp)
        + (f" — {lb}" if (lb := _lower_bound_text(first.get("client_bound") or [], basis)) else ""),
        "utilisation": plan.pricing.utilisation,
        "slo": plan.slo.model_dump(exclude_none=True),
        "slo_words": plan.slo.in_words(),
        "workloads": workloads,
        "quarantined": tdf[tdf["status"] == "quarantined"]["name"].tolist(),
        "no_results": tdf[tdf["status"] == "no_results"]["name"].tolist(),
        "evaluation_cost_usd": _r(spend, 2),
        "evaluation_cost_if_billed_usd": _r(would, 2),
    }


def headline_table(run_dir: str | StorePath) -> str:
    """Plain-text headline from the run's cost.json (written by the cost step)."""
    doc = store.read_json(store.at(run_dir) / "cost.json")
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
        for b in part.get("client_bound") or []:
            lines.append(
                f"    client-bound (a lower bound for the hardware): {b['target']} at c={_num(b.get('concurrency'))}, "
                f"{_num(b.get('usd_per_m'))} USD/M"
                + (" (its only level meeting the SLO; not ranked)" if b["only"] else "")
            )
        if part.get("misses_slo"):
            lines.append(f"    missed the SLO at every load: {', '.join(part['misses_slo'])}")
    for key, label in (("quarantined", "did not pass validation"), ("no_results", "produced no results")):
        if doc.get(key):
            lines.append(f"  {label}: {', '.join(doc[key])}")
    return "\n".join(lines)


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"
