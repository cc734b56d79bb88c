"""The report's Capacity section: per SLO tier and target, the most concurrent requests (a request workload)
or agent sessions (a session workload) the target sustained within the tier (``bench.load.capacity``), and that
capacity per GPU, per kW and per USD/hour (requests/s served there, or concurrent sessions), with the cost
per million output tokens or per session there.

The capacity's interval is the search's bracket: at least the highest load that met the tier, below the
first that did not (a search that stopped short of closing it, on the plan's budget of points, says so).
Per kW divides by measured GPU power where the passing point measured it, else by the nameplate (all-in
kW per GPU), and the row names which. Per USD/hour divides by the target's effective price per GPU-hour.
EMULATED where the target is.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bakeoff import store
from bakeoff.cost import ESTIMATED, per_m_tokens
from bakeoff.plan.capacity import ordered
from bakeoff.report.numbers import finite

if TYPE_CHECKING:
    import pandas as pd

    from bakeoff.plan import Plan, Target


@dataclass(frozen=True)
class CapacityRow:
    workload: str
    tier: str
    name: str
    over: str  # "concurrency" (requests in flight) or "sessions" (concurrent agent sessions)
    best: float  # NaN: no load met the tier
    first_failing: float  # NaN: none failed up to the search's max
    per_gpu: float  # requests/s per GPU at that load (request workloads), concurrent sessions per GPU (sessions)
    per_kw: float
    per_usd_hour: float
    usd_per_m_output: float  # request workloads
    usd_per_session: float  # session workloads
    energy_source: str
    steps: str
    stopped_short: bool
    emulated: bool


def steps_text(steps: list[dict[str, Any]], over: str) -> str:
    """The search's probes in order: 'c1 ok, c2 ok, c4 miss, c3 ok' ('s' for sessions)."""
    unit = "s" if over == "sessions" else "c"
    return ", ".join(f"{unit}{int(s['load'])} {'ok' if s['meets'] else 'miss'}" for s in steps)


def row(
    workload: str, tier: str, target: Target, over: str, result: dict[str, Any], price: dict[str, Any]
) -> CapacityRow:
    """One tier's result for one target, priced: ``price`` is the target's row of the cost step's targets
    table (usd_per_gpu_hour_effective, all_in_kw_per_gpu, gpus_used)."""
    fig = result.get("figures") or {}
    gpus = finite(fig.get("gpus")) or finite(price.get("gpus_used"))
    best = finite(result.get("best"))
    duration = finite(fig.get("duration_s"))
    if over == "sessions":
        per_gpu = best / gpus if gpus else math.nan
    else:
        per_gpu = finite(fig.get("completed")) / duration / gpus if duration and gpus else math.nan
    measured_kw = finite(fig.get("power_w_per_gpu")) / 1000
    kw = measured_kw if measured_kw > 0 else finite(price.get("all_in_kw_per_gpu"))
    usd_gpu_h = finite(price.get("usd_per_gpu_hour_effective"))
    sessions_h = finite(fig.get("sessions_per_hour"))
    return CapacityRow(
        workload=workload,
        tier=tier,
        name=target.name,
        over=over,
        best=best,
        first_failing=finite(result.get("first_failing")),
        per_gpu=per_gpu,
        per_kw=per_gpu / kw if kw > 0 else math.nan,
        per_usd_hour=per_gpu / usd_gpu_h if usd_gpu_h > 0 else math.nan,
        usd_per_m_output=float(per_m_tokens(usd_gpu_h, finite(fig.get("output_tps_per_gpu")))),
        usd_per_session=usd_gpu_h * gpus / sessions_h if sessions_h > 0 else math.nan,
        energy_source=_kind(fig, measured_kw) if math.isfinite(best) else "",
        steps=steps_text(result.get("steps") or [], over),
        stopped_short=bool(result.get("stopped_short")),
        emulated=bool(fig.get("emulated")) or target.emulated,
    )


def _kind(fig: dict[str, Any], measured_kw: float) -> str:
    """What the per-kW figure divides by: the passing point's measured GPU power (its method), else nameplate."""
    return str(fig.get("energy_method") or "measured") if measured_kw > 0 else ESTIMATED


def rows(plan: Plan, run_dir: store.StorePath, targets: pd.DataFrame) -> list[CapacityRow]:
    """Every stored capacity search of the run, per workload, tier (the plan's order) and target."""
    prices = {str(r["target"]): r.to_dict() for _, r in targets.iterrows()} if not targets.empty else {}
    out = []
    for w in plan.workloads:
        found = {
            t.slug: store.read_json(run_dir / f"target={t.slug}" / f"capacity-{w.name}.json") for t in plan.targets
        }
        for tier in ordered(list(plan.slo_tiers)):
            for t in plan.targets:
                doc = found[t.slug]
                result = ((doc or {}).get("tiers") or {}).get(tier)
                if doc and result is not None:
                    out.append(row(w.name, tier, t, str(doc.get("over")), result, prices.get(t.slug, {})))
    return out


def capacity_text(r: CapacityRow, fmt: Callable[[float], str]) -> str:
    """'≥ 12, < 13 requests' (the bracket), '≥ 64 sessions (met at the search's max)', 'none met', with
    '— stopped short (budget)' where the budget ran out first."""
    unit = "sessions" if r.over == "sessions" else "requests"
    if not math.isfinite(r.best):
        return "none met"
    upper = (
        f", < {fmt(r.first_failing)} {unit}" if math.isfinite(r.first_failing) else f" {unit} (met at the search's max)"
    )
    return f"≥ {fmt(r.best)}{upper}" + (" — stopped short (budget)" if r.stopped_short else "")


HEAD = (
    "workload",
    "tier",
    "target",
    "capacity (concurrent)",
    "req/s or sessions per GPU",
    "per kW",
    "per USD/h",
    "USD/M out · USD/session",
    "energy figure",
    "steps",
)


def cells(r: CapacityRow, fmt: Callable[[float], str]) -> list[str]:
    """A row's cells as the Markdown and HTML tables show them (HEAD's order)."""
    money = fmt(r.usd_per_session) + " /session" if r.over == "sessions" else fmt(r.usd_per_m_output) + " /M out"
    return [
        r.workload,
        r.tier,
        r.name,
        capacity_text(r, fmt),
        fmt(r.per_gpu),
        fmt(r.per_kw),
        fmt(r.per_usd_hour),
        money,
        r.energy_source,
        r.steps,
    ]


def table(rs: list[CapacityRow]) -> list[dict[str, Any]]:
    """The section as flat records (the report's capacity CSV), unrounded."""
    return [
        {
            "workload": r.workload,
            "tier": r.tier,
            "target": r.name,
            "figures": "EMULATED" if r.emulated else "measured",
            "over": r.over,
            "capacity": r.best,
            "first_failing": r.first_failing,
            "stopped_short": r.stopped_short,
            "per_gpu": r.per_gpu,
            "per_gpu_unit": "sessions" if r.over == "sessions" else "requests/s",
            "per_kw": r.per_kw,
            "per_usd_per_hour": r.per_usd_hour,
            "usd_per_m_output": r.usd_per_m_output,
            "usd_per_session": r.usd_per_session,
            "energy_source": r.energy_source,
            "steps": r.steps,
        }
        for r in rs
    ]
