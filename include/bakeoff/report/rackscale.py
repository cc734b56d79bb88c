"""The report's rack-scale section: what a multi-node target (plan.cluster) costs and serves per GPU and
per rack, beside the run's 8-GPU single-node targets.

Per cluster target and workload: the price per GPU-hour, per rack-hour (an NVL72 rack; 72 GPUs of
8-GPU nodes otherwise, the same silicon count: ``cost.rack_scale``) and for the whole target (every node
billed); output tokens/s per GPU and per rack at the cheapest load level meeting the SLO; the cost per
million tokens there; the break-even GPU-hour price against the cheapest 8-GPU single node of the same
run at the same SLO (``cost.break_even_usd_per_gpu_hour``: below it the cluster is cheaper); energy per
output token, measured where a point measured power, else estimated from all-in kW per GPU. A figure
of an emulated target is stamped EMULATED where it is shown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bakeoff import cost
from bakeoff.plan import multinode
from bakeoff.plan.cluster import racks
from bakeoff.report.numbers import field

if TYPE_CHECKING:
    import pandas as pd

    from bakeoff.plan import Plan, Target

BASELINE_GPUS = 8  # the single node a rack is weighed against


@dataclass(frozen=True)
class RackRow:
    """One cluster target at one workload, as the rack-scale section shows it (NaN: not served at the SLO)."""

    workload: str
    slug: str
    name: str
    shape: str  # "gb300-nvl72: 2 of 18 trays, KV nixl (in the NVLink domain)"; else "2 nodes of 8 GPUs, KV ..."
    nodes: int
    gpus: int
    usd_per_gpu_hour: float
    usd_per_rack_hour: float
    usd_per_target_hour: float
    output_tps_per_gpu: float
    output_tps_per_rack: float
    usd_per_m: float  # on the report's basis (output or total tokens), at the SLO
    baseline: str  # the 8-GPU single node weighed against ("" when the run has none at the SLO)
    baseline_usd_per_m: float
    break_even_usd_per_gpu_hour: float
    joules_per_output_token: float
    energy_source: str
    emulated: bool
    price_source: str


def _speculative(t: Target) -> str:
    """', MTP k=3' when the target serves speculative decoding; ', MTP in the recipe, not served' when its
    recipe arm has it and the target turned it off (plan.multinode.arm_speculative)."""
    if t.speculative is not None:
        return f", {t.speculative.method.upper()} k={t.speculative.num_speculative_tokens}"
    arm = (multinode.provenance(t.recipe, t.recipe_arm) or {}).get("speculative")
    return f", {arm.upper()} in the recipe, not served" if arm else ""


def _shape(t: Target) -> str:
    c = t.cluster
    if c is None:
        return "1 node"
    if c.rack:
        trays = racks()[c.rack]["trays"]
        return f"{c.rack}: {t.nodes} of {trays} trays, KV {c.kv_label}{_speculative(t)}"
    return f"{t.nodes} nodes of {t.instance.gpus} GPUs, KV {c.kv_label}{_speculative(t)}"


def _baseline(plan: Plan, at: pd.DataFrame, basis: str) -> Any:
    """The cheapest ranked 8-GPU single-node target meeting the SLO in this workload's rows, or None."""
    single = {t.slug for t in plan.targets if t.cluster is None and t.instance.gpus == BASELINE_GPUS}
    col = f"usd_per_m_{basis}"
    if at.empty or col not in at:
        return None
    ok = at[at["target"].isin(single) & at["ranked"].astype(bool) & at["slo_met"].astype(bool) & at[col].notna()]
    return None if ok.empty else ok.sort_values(col).iloc[0]


def rows(plan: Plan, at_slo: pd.DataFrame, basis: str) -> list[RackRow]:
    """The section's rows: every cluster target at every workload of the run's cost at the SLO."""
    clusters = [t for t in plan.targets if t.cluster is not None]
    if not clusters or at_slo.empty:
        return []
    col = f"usd_per_m_{basis}"
    out = []
    for wl in sorted(at_slo["workload"].unique()):
        at = at_slo[at_slo["workload"] == wl]
        base = _baseline(plan, at, basis)
        for t in clusters:
            mine = at[at["target"] == t.slug]
            r = mine.iloc[0] if not mine.empty else {}
            met = bool(r.get("slo_met", False)) if len(mine) else False
            per_gpu = field(r, "output_tps_per_gpu") if met else math.nan
            rs = cost.rack_scale(t, per_gpu * t.gpus_used if met else 0.0)
            own = field(r, col) if met else math.nan
            base_cost = field(base, col) if base is not None else math.nan
            be = cost.break_even_usd_per_gpu_hour(float(rs["usd_per_gpu_hour"]), own, base_cost)
            kw = field(r, "kw_per_gpu")
            out.append(
                RackRow(
                    workload=str(wl),
                    slug=t.slug,
                    name=t.name,
                    shape=_shape(t),
                    nodes=t.nodes,
                    gpus=t.gpus_used,
                    usd_per_gpu_hour=float(rs["usd_per_gpu_hour"]),
                    usd_per_rack_hour=float(rs["usd_per_rack_hour"]),
                    usd_per_target_hour=float(rs["usd_per_target_hour"]),
                    output_tps_per_gpu=per_gpu,
                    output_tps_per_rack=per_gpu * cost.RACK_GPUS,
                    usd_per_m=own,
                    baseline="" if base is None else str(base["name"]),
                    baseline_usd_per_m=base_cost,
                    break_even_usd_per_gpu_hour=be,
                    joules_per_output_token=kw * 1000 / per_gpu if per_gpu > 0 else math.nan,
                    energy_source=str(r.get("energy_source", "")) if met else "",
                    emulated=t.emulated or bool(r.get("emulated", False)),
                    price_source=t.price_source,
                )
            )
    return out


def stamp(r: RackRow) -> str:
    """What the row's figures are: EMULATED (the hardware emulator's) or measured."""
    return "EMULATED" if r.emulated else "measured"


def table(rows: list[RackRow]) -> list[dict[str, Any]]:
    """The section as flat records, one per cluster target and workload (the report's rack-scale CSV):
    the Markdown, HTML and PDF tables' figures unrounded, ``figures`` EMULATED or measured per row."""
    return [
        {
            "workload": r.workload,
            "target": r.name,
            "figures": stamp(r),
            "shape": r.shape,
            "nodes": r.nodes,
            "gpus_billed": r.gpus,
            "usd_per_gpu_hour": r.usd_per_gpu_hour,
            "usd_per_rack_hour": r.usd_per_rack_hour,
            "usd_per_target_hour": r.usd_per_target_hour,
            "price_source": r.price_source,
            "output_tps_per_gpu": r.output_tps_per_gpu,
            "output_tps_per_rack": r.output_tps_per_rack,
            "usd_per_m_at_slo": r.usd_per_m,
            "baseline_8gpu_node": r.baseline,
            "baseline_usd_per_m": r.baseline_usd_per_m,
            "break_even_usd_per_gpu_hour": r.break_even_usd_per_gpu_hour,
            "joules_per_output_token": r.joules_per_output_token,
            "energy_source": r.energy_source,
        }
        for r in rows
    ]
