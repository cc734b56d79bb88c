"""The report's Per watt section: what each target serves per joule and per kW at the SLO, and what it costs
once the plan's electricity is paid for, per target and workload with intervals over repeats.

The figures come from ``cost.cost_at_slo`` (the cheapest load level meeting the SLO, ``cost.PER_WATT``):
output tokens per joule (and J per output token), output tokens/s per kW of measured GPU power (none where
no point measured it), per kW of the node's nameplate share (the catalog's all-in kW per GPU), and the cost
per million output tokens with energy at the plan's USD/kWh. Each row names its energy figure's kind,
"measured, energy counters, GPU only" or "estimated, nameplate"; a workload whose rows mix the kinds is
ranked by neither here, and a caveat says so (``report.caveats``). EMULATED where the target is.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bakeoff.cost import PER_WATT
from bakeoff.report.numbers import field

if TYPE_CHECKING:
    import pandas as pd

Interval = tuple[float, float, float]  # estimate, low, high (NaN bounds: one repeat)


@dataclass(frozen=True)
class WattRow:
    """One target at one workload at the SLO."""

    workload: str
    name: str
    tokens_per_joule: Interval
    joules_per_token: float
    tps_per_kw_gpu: Interval  # measured GPU power only
    tps_per_kw_nameplate: Interval
    usd_per_m_with_energy: Interval
    usd_per_kwh: float
    energy_source: str
    throttled: bool
    emulated: bool


def _interval(row: pd.Series, col: str) -> Interval:
    return (field(row, col), field(row, f"{col}_ci_low"), field(row, f"{col}_ci_high"))


def rows(at_slo: pd.DataFrame, usd_per_kwh: float) -> list[WattRow]:
    """Every target that met the SLO, per workload, in the at-SLO table's order."""
    if at_slo.empty or "slo_met" not in at_slo or PER_WATT[0] not in at_slo:
        return []
    out = []
    for _, r in at_slo[at_slo["slo_met"].fillna(False).astype(bool)].iterrows():
        out.append(
            WattRow(
                workload=str(r["workload"]),
                name=str(r["name"]),
                tokens_per_joule=_interval(r, "output_tokens_per_joule"),
                joules_per_token=field(r, "joules_per_output_token_at_slo"),
                tps_per_kw_gpu=_interval(r, "output_tps_per_kw_gpu_measured"),
                tps_per_kw_nameplate=_interval(r, "output_tps_per_kw_nameplate"),
                usd_per_m_with_energy=_interval(r, "usd_per_m_output_with_energy"),
                usd_per_kwh=usd_per_kwh,
                energy_source=str(r.get("energy_source", "")),
                throttled=bool(r.get("throttled", False)),
                emulated=bool(r.get("emulated", False)),
            )
        )
    return out


def with_ci(iv: Interval, fmt: Callable[[float], str]) -> str:
    """``estimate (low–high)``, the estimate alone with one repeat, a dash without one."""
    m, lo, hi = iv
    if not math.isfinite(m):
        return "–"
    return f"{fmt(m)} ({fmt(lo)}–{fmt(hi)})" if math.isfinite(lo) and math.isfinite(hi) else fmt(m)


HEAD = (
    "workload",
    "target",
    "out tokens/J (95% CI)",
    "J/out token",
    "out tok/s per kW GPU, measured",
    "out tok/s per kW nameplate",
    "USD/M out with energy",
    "energy figure",
)


def cells(r: WattRow, fmt: Callable[[float], str]) -> list[str]:
    """A row's cells as every format shows them (HEAD's order), throttling beside the energy figure's kind."""
    kind = r.energy_source + ("; throttled" if r.throttled else "")
    return [
        r.workload,
        r.name,
        with_ci(r.tokens_per_joule, fmt),
        fmt(r.joules_per_token),
        with_ci(r.tps_per_kw_gpu, fmt),
        with_ci(r.tps_per_kw_nameplate, fmt),
        with_ci(r.usd_per_m_with_energy, fmt),
        kind,
    ]


def mixed_workloads(rs: list[WattRow]) -> list[str]:
    """Workloads whose rows mix measured and estimated energy: not comparable in one ranking."""
    kinds: dict[str, set[bool]] = {}
    for r in rs:
        kinds.setdefault(r.workload, set()).add(r.energy_source.startswith("measured"))
    return sorted(w for w, k in kinds.items() if len(k) > 1)


def stamp(r: WattRow) -> str:
    """EMULATED (the hardware emulator's figures) or measured, as every section stamps a row."""
    return "EMULATED" if r.emulated else "measured"


def table(rs: list[WattRow]) -> list[dict[str, Any]]:
    """The section as flat records (the report's per-watt CSV), unrounded, each interval as three columns."""
    out = []
    for r in rs:
        rec: dict[str, Any] = {"workload": r.workload, "target": r.name, "figures": stamp(r)}
        for key, (m, lo, hi) in (
            ("output_tokens_per_joule", r.tokens_per_joule),
            ("output_tps_per_kw_gpu_measured", r.tps_per_kw_gpu),
            ("output_tps_per_kw_nameplate", r.tps_per_kw_nameplate),
            ("usd_per_m_output_with_energy", r.usd_per_m_with_energy),
        ):
            rec[key], rec[f"{key}_ci_low"], rec[f"{key}_ci_high"] = m, lo, hi
        rec.update(
            joules_per_output_token=r.joules_per_token,
            usd_per_kwh=r.usd_per_kwh,
            energy_source=r.energy_source,
            throttled=r.throttled,
        )
        out.append(rec)
    return out
