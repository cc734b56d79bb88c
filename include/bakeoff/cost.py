"""Cost per token: measured throughput x the price in force -> what a buyer pays, at their SLO.

One definition of every cost figure, used by the DAG, the CLI and the reports alike:

  USD per GPU-hour (effective) = node price / GPUs in the node / utilisation
  USD per M tokens             = USD per GPU-hour (effective) / (tokens/s per GPU x 3600 / 1e6)
  tokens per USD               = 1e6 / USD per M tokens
  tokens per MW                = tokens/s per GPU / all-in kW per GPU x 1000   (tokens/s per MW)
  energy USD per M tokens      = kW per GPU x USD per kWh / (tokens/s per GPU x 3600 / 1e6)

Throughput per GPU divides by the GPUs serving the model (TP x PP); the price per GPU divides the
node price by the node's GPUs, i.e. a TP4 replica on an 8-GPU node pays for the 4 GPUs it uses and
the other 4 are assumed to serve another replica. Utilisation < 1 spreads idle paid hours over the
tokens actually served. Cloud node prices already include power: the energy figures are for
on-premises and TCO comparisons and are never added to the cloud cost.

A target that did not pass validation is quarantined: its numbers are kept (and shown apart) but it
never enters the ranking or the break-even prices.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bakeoff import catalog, store

PRICE_FACTORS = (0.5, 0.75, 1.0, 1.25, 1.5)
UTILISATIONS = (0.3, 0.5, 0.7, 0.85, 1.0)
CI_LEVEL = 0.95
# Optional point column: mean measured power per GPU (W) while the point ran, from providers that report it.
POWER_COLUMN = "power_w_per_gpu"


@dataclass
class CostTables:
    """Everything cost_run computes; the reports render these frames, nothing else recomputes them."""

    points: pd.DataFrame  # one row per measured point, with every cost column
    at_slo: pd.DataFrame  # one row per (target, workload): cost at the SLO, CI, break-even
    sensitivity: pd.DataFrame  # cost at the SLO under price factors and utilisations
    evaluation: pd.DataFrame  # one row per target: measured hours and cost of the run itself
    targets: pd.DataFrame  # one row per planned target: price in force, node spec, status
    headline: dict[str, Any]


def per_m_tokens(per_gpu_hour, tokens_per_s_per_gpu):
    """An hourly amount per GPU (USD, kWh) per million tokens served; scalars or columns alike.
    NaN where nothing was served (no throughput means no price)."""
    tps = np.asarray(tokens_per_s_per_gpu, dtype=float)
    served = np.where(np.isfinite(tps) & (tps > 0), tps, np.nan)
    out = np.asarray(per_gpu_hour, dtype=float) / (served * 3600 / 1e6)
    return float(out) if out.ndim == 0 else out


def effective_usd_per_gpu_hour(node_usd_per_hour: float, node_gpus: int, utilisation: float) -> float:
    """What one GPU-hour of actual serving costs once idle paid hours are spread over it."""
    if not 0 < utilisation <= 1:
        raise ValueError(f"pricing.utilisation must be in (0, 1], got {utilisation}; use e.g. 0.7 for 70%")
    return node_usd_per_hour / node_gpus / utilisation


def break_even_usd_per_gpu_hour(usd_per_gpu_hour: float, own_cost: float, rival_cost: float) -> float:
    """Price per GPU-hour at which this target's cost at the SLO equals the rival's.

    Cost is proportional to price at fixed throughput, so the break-even price scales the current
    price by rival_cost / own_cost. Below it this target is cheaper; above it the rival is.
    """
    if not (own_cost > 0 and math.isfinite(own_cost) and math.isfinite(rival_cost)):
        return float("nan")
    return usd_per_gpu_hour * rival_cost / own_cost


def mean_ci(values: list[float] | np.ndarray, level: float = CI_LEVEL) -> tuple[float, float, float]:
    """Mean and Student-t confidence interval over repeats; the interval is NaN with one repeat."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return float("nan"), float("nan"), float("nan")
    m = float(v.mean())
    if v.size < 2:
        return m, float("nan"), float("nan")
    from scipy import stats  # noqa: PLC0415 - only when repeats exist

    half = float(stats.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return m, m - half, m + half


# --- price sheets -------------------------------------------------------------------------------


def apply_price_sheet(plan, sheet: dict[str, Any] | None):
    """A buyer's price sheet (e.g. an Airflow Variable) folded into the plan's target prices.

    sheet = {"source": "ACME contract 2026-Q4", "as_of": "2026-10-01",
             "prices": {<target name or instance type>: {"usd_per_hour" | "usd_per_gpu_hour": x, "market": "reserved"}}}
    A target-name key beats an instance-type key; targets whose plan already sets a price keep it, and
    trigger-form prices (apply_overrides) are applied after and win. Returns a new, validated plan.
    """
    from bakeoff.plan import PlanError, plan_from_dict  # noqa: PLC0415 - plan imports nothing from here

    if not sheet:
        return plan
    if not isinstance(sheet, dict) or not isinstance(sheet.get("prices"), dict):
        raise PlanError(
            "price_sheet: expected {'prices': {<target or instance type>: {'usd_per_hour': ...}}, "
            "'source': ..., 'as_of': ...}"
        )
    names = {t.name for t in plan.targets}
    types = {t.instance_type for t in plan.targets}
    source = str(sheet.get("source") or "price sheet")
    if sheet.get("as_of"):
        source += f" (as of {sheet['as_of']})"
    entries = {}
    for key, entry in sheet["prices"].items():
        where = f"price_sheet.prices.{key}"
        if not isinstance(entry, dict):
            entry = {"usd_per_hour": entry}
        if not any(
            isinstance(entry.get(k), (int, float)) and entry[k] > 0 for k in ("usd_per_hour", "usd_per_gpu_hour")
        ):
            raise PlanError(f"{where}: give a positive usd_per_hour (node) or usd_per_gpu_hour")
        entries[key] = {"market": "contract", **entry, "source": source}
    # One sheet serves the whole installation: keys for other plans' targets are simply not used here.
    if not set(entries) & (names | types):
        return plan
    raw = plan.model_dump(mode="json")
    for t in raw["targets"]:
        entry = entries.get(t["name"]) or entries.get(t["instance_type"])
        if entry and not t.get("price"):
            t["price"] = entry
    return plan_from_dict(raw, source=f"{plan.name} with price sheet")


# --- inputs -------------------------------------------------------------------------------------


def _validation(run_dir: Path) -> dict[str, Any] | None:
    return store.read_json(run_dir / "validation.json")


def target_status(plan, run_dir: Path, points: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per target slug: passed / quarantined (validation failed) / no_results, with the reasons."""
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


def node_spec(target) -> str:
    it, g = target.instance, target.gpu
    if target.instance_type is None:  # a static endpoint described in the plan: only what it says
        mem = f" {g.hbm_gb:g} GB" if math.isfinite(g.hbm_gb) else ""
        note = f"; {it.note}" if it.note else ""
        return f"{it.gpus}x {g.name.upper() if g.name.islower() else g.name}{mem} (described in the plan{note})"
    return f"{it.gpus}x {g.name.upper()} {g.hbm_gb:g} GB ({it.type}, {it.provider})"


def _targets_frame(plan, status: dict[str, dict[str, Any]]) -> pd.DataFrame:
    util = plan.pricing.utilisation
    rows = []
    for t in plan.targets:
        it = t.instance
        rows.append(
            {
                "target": t.slug,
                "name": t.name,
                "gpu": t.gpu.name,
                "node_gpus": it.gpus,
                "gpus_used": t.gpus_used,
                "replicas_per_node": it.gpus // t.gpus_used,
                "node_spec": node_spec(t),
                "instance_type": it.type,
                "provider": t.provider,
                "market": t.price.market if t.price else it.market,
                "node_usd_per_hour": t.usd_per_hour,
                "usd_per_gpu_hour": t.usd_per_hour / it.gpus,
                "utilisation": util,
                "usd_per_gpu_hour_effective": effective_usd_per_gpu_hour(t.usd_per_hour, it.gpus, util),
                "price_source": t.price_source,
                "price_as_of": "" if t.price else (it.as_of or "undated"),
                "all_in_kw_per_gpu": t.gpu.all_in_kw,
                "power_source": t.gpu.source,
                "power_as_of": t.gpu.as_of,
                "status": status[t.slug]["status"],
                "ranked": status[t.slug]["ranked"],
                "failures": "; ".join(status[t.slug]["failures"]),
            }
        )
    return pd.DataFrame(rows)


# --- per point ----------------------------------------------------------------------------------


def point_costs(points: pd.DataFrame, targets: pd.DataFrame, usd_per_kwh: float) -> pd.DataFrame:
    """Every cost column for every measured point (quarantined targets included, flagged)."""
    if points.empty:
        return pd.DataFrame()
    t = targets.set_index("target")
    df = points.copy()
    df["target"] = df["target"].astype(str)
    known = df["target"].isin(t.index)
    df = df[known].reset_index(drop=True)
    tt = t.loc[df["target"]].reset_index(drop=True)
    for col in (
        "name",
        "node_spec",
        "node_gpus",
        "gpus_used",
        "usd_per_gpu_hour",
        "utilisation",
        "usd_per_gpu_hour_effective",
        "node_usd_per_hour",
        "all_in_kw_per_gpu",
        "status",
        "ranked",
    ):
        df[col] = tt[col].to_numpy()
    price = df["usd_per_gpu_hour_effective"].astype(float)
    for kind in ("output", "total"):
        tps = df[f"{kind}_tps_per_gpu"].astype(float).where(lambda s: s > 0)
        df[f"usd_per_m_{kind}"] = per_m_tokens(price, tps)
        df[f"{kind}_tokens_per_usd"] = 1e6 / df[f"usd_per_m_{kind}"]
        df[f"{kind}_tps_per_node"] = tps * df["node_gpus"]
        df[f"{kind}_tokens_per_s_per_mw"] = tps / df["all_in_kw_per_gpu"] * 1000
    df["usd_per_node_hour_effective"] = df["node_usd_per_hour"] / df["utilisation"]
    measured = df[POWER_COLUMN].astype(float) / 1000 if POWER_COLUMN in df else pd.Series(np.nan, index=df.index)
    df["kw_per_gpu"] = measured.fillna(df["all_in_kw_per_gpu"])
    df["energy_source"] = np.where(measured.notna(), "measured", "estimated: all-in kW per GPU")
    df["usd_per_kwh"] = usd_per_kwh
    df["energy_usd_per_gpu_hour"] = df["kw_per_gpu"] * usd_per_kwh
    tps_total = df["total_tps_per_gpu"].astype(float).where(lambda s: s > 0)
    df["energy_usd_per_m_total"] = per_m_tokens(df["energy_usd_per_gpu_hour"], tps_total)
    df["energy_kwh_per_m_total"] = per_m_tokens(df["kw_per_gpu"], tps_total)
    return df


# --- at the SLO ---------------------------------------------------------------------------------


def _levels(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (target, workload, concurrency): means over repeats; a level meets the SLO only
    when every repeat does."""
    g = df.groupby(["target", "workload", "concurrency"], sort=True)
    out = g.agg(
        meets_slo=("meets_slo", lambda s: bool(s.fillna(False).astype(bool).all())),
        repeats=("repeat", "nunique"),
        interactivity=("interactivity", "mean"),
        output_tps_per_gpu=("output_tps_per_gpu", "mean"),
        total_tps_per_gpu=("total_tps_per_gpu", "mean"),
        usd_per_m_output_mean=("usd_per_m_output", "mean"),
        usd_per_m_total_mean=("usd_per_m_total", "mean"),
    ).reset_index()
    return out


def cost_at_slo(costs: pd.DataFrame, targets: pd.DataFrame, basis: str) -> pd.DataFrame:
    """Per (target, workload): the cheapest load level meeting every SLO, its CI, and break-even."""
    rows = []
    t = targets.set_index("target")
    levels = _levels(costs) if not costs.empty else pd.DataFrame()
    workloads = sorted(costs["workload"].unique()) if not costs.empty else []
    for wl in workloads:
        for slug, trow in t.iterrows():
            row: dict[str, Any] = {
                "target": slug,
                "name": trow["name"],
                "workload": wl,
                "status": trow["status"],
                "ranked": bool(trow["ranked"]),
                "usd_per_gpu_hour": trow["usd_per_gpu_hour"],
                "usd_per_gpu_hour_effective": trow["usd_per_gpu_hour_effective"],
                "node_spec": trow["node_spec"],
            }
            lv = levels[(levels["target"] == slug) & (levels["workload"] == wl)] if not levels.empty else levels
            ok = lv[lv["meets_slo"]] if not lv.empty else lv
            row["levels_measured"] = int(len(lv))
            row["levels_meeting_slo"] = int(len(ok))
            if ok.empty:
                row["slo_met"] = False
                rows.append(row)
                continue
            best = ok.sort_values([f"usd_per_m_{basis}_mean", "concurrency"], ascending=[True, False]).iloc[0]
            reps = costs[
                (costs["target"] == slug) & (costs["workload"] == wl) & (costs["concurrency"] == best["concurrency"])
            ]
            row.update(
                slo_met=True,
                concurrency=int(best["concurrency"]),
                repeats=int(best["repeats"]),
                interactivity=float(best["interactivity"]),
                output_tps_per_gpu=float(best["output_tps_per_gpu"]),
                total_tps_per_gpu=float(best["total_tps_per_gpu"]),
                emulated=bool(reps["emulated"].astype(bool).any()),
            )
            for kind in ("output", "total"):
                m, lo, hi = mean_ci(reps[f"usd_per_m_{kind}"].tolist())
                row[f"usd_per_m_{kind}"], row[f"usd_per_m_{kind}_ci_low"], row[f"usd_per_m_{kind}_ci_high"] = m, lo, hi
                row[f"{kind}_tokens_per_usd"] = 1e6 / m if m > 0 else float("nan")
            for col in (
                "output_tokens_per_s_per_mw",
                "total_tokens_per_s_per_mw",
                "energy_usd_per_m_total",
                "kw_per_gpu",
                "output_tps_per_node",
                "total_tps_per_node",
            ):
                row[col] = float(reps[col].mean())
            row["energy_source"] = str(reps["energy_source"].iloc[0])
            rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    return _add_tco(_add_break_even(df, basis), targets, basis)


def _add_tco(df: pd.DataFrame, targets: pd.DataFrame, basis: str) -> pd.DataFrame:
    """Cost at the SLO had the GPUs been priced at each public TCO tier instead of the price in force."""
    tco = catalog.tco()
    gpu = targets.set_index("target")["gpu"]
    col = f"usd_per_m_{basis}"
    for i, tier in enumerate(tco["tiers"]):
        tier_price = df["target"].map(lambda s: (tco["usd_per_gpu_hour"].get(gpu[s]) or [np.nan] * 3)[i])
        df[f"tco_{tier}_usd_per_gpu_hour"] = tier_price
        df[f"{col}_tco_{tier}"] = df[col] * tier_price / df["usd_per_gpu_hour"]
    return df


def _add_break_even(df: pd.DataFrame, basis: str) -> pd.DataFrame:
    col = f"usd_per_m_{basis}"
    if col not in df:
        df[col] = np.nan
    df["rank"] = pd.NA
    df["vs_cheapest_pct"] = np.nan
    df["break_even_rival"] = ""
    df["break_even_usd_per_gpu_hour"] = np.nan
    for wl, idx in df.groupby("workload").groups.items():
        part = df.loc[idx]
        ranked = part[part["ranked"] & part[col].notna()].sort_values(col)
        if ranked.empty:
            continue
        cheapest = ranked[col].iloc[0]
        for r, (i, row) in enumerate(ranked.iterrows(), start=1):
            df.at[i, "rank"] = r
            df.at[i, "vs_cheapest_pct"] = (row[col] / cheapest - 1) * 100
            others = ranked.drop(index=i)
            if others.empty:
                continue
            rival = others.iloc[0]
            df.at[i, "break_even_rival"] = rival["name"]
            # list price per GPU-hour (before utilisation) at which this target ties the best rival
            df.at[i, "break_even_usd_per_gpu_hour"] = break_even_usd_per_gpu_hour(
                row["usd_per_gpu_hour"], row[col], rival[col]
            )
    df["break_even_price_change_pct"] = (df["break_even_usd_per_gpu_hour"] / df["usd_per_gpu_hour"] - 1) * 100
    return df


def sensitivity(at_slo: pd.DataFrame, basis: str) -> pd.DataFrame:
    """Cost at the SLO when the price moves +-50% and when utilisation runs 30-100%.

    Cost is linear in price and inverse in utilisation, so both are exact rescalings of the measured
    cost; the table makes the negotiation range visible without another run.
    """
    col = f"usd_per_m_{basis}"
    rows = []
    if at_slo.empty or col not in at_slo:
        return pd.DataFrame(rows)
    for _, r in at_slo[at_slo[col].notna()].iterrows():
        base_util = r["usd_per_gpu_hour"] / r["usd_per_gpu_hour_effective"]
        for f in PRICE_FACTORS:
            rows.append(
                {
                    "target": r["target"],
                    "name": r["name"],
                    "workload": r["workload"],
                    "ranked": r["ranked"],
                    "dimension": "price",
                    "factor": f,
                    "usd_per_gpu_hour": r["usd_per_gpu_hour"] * f,
                    "utilisation": base_util,
                    f"usd_per_m_{basis}": r[col] * f,
                }
            )
        for u in UTILISATIONS:
            rows.append(
                {
                    "target": r["target"],
                    "name": r["name"],
                    "workload": r["workload"],
                    "ranked": r["ranked"],
                    "dimension": "utilisation",
                    "factor": u,
                    "usd_per_gpu_hour": r["usd_per_gpu_hour"],
                    "utilisation": u,
                    f"usd_per_m_{basis}": r[col] * base_util / u,
                }
            )
    return pd.DataFrame(rows)


# --- cost of the evaluation itself --------------------------------------------------------------


def _epoch(v: Any) -> float | None:
    if v is None or v == "":
        return None
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return datetime.fromisoformat(str(v).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _find(doc: Any, key: str) -> Any:
    """First value of key anywhere in a nested run.json target entry (steps record it where they run)."""
    if isinstance(doc, dict):
        if key in doc:
            return doc[key]
        for v in doc.values():
            found = _find(v, key)
            if found is not None:
                return found
    return None


def evaluation_cost(plan, run_dir: Path) -> pd.DataFrame:
    """Instance hours actually held (launch to termination, from run.json) x node price.

    Emulated and static targets spend nothing; their figure is what the run would have cost on the
    hardware they stand for. A target still without a termination time is counted up to now.
    """
    run = store.read_json(run_dir / "run.json", {}) or {}
    entries = run.get("targets") or {}
    rows = []
    for t in plan.targets:
        entry = entries.get(t.slug) or {}
        launched, ended = _epoch(_find(entry, "launched_at")), _epoch(_find(entry, "terminated_at"))
        open_ended = launched is not None and ended is None
        if open_ended:
            ended = time.time()
        hours = (ended - launched) / 3600 if launched is not None and ended is not None else float("nan")
        rows.append(
            {
                "target": t.slug,
                "name": t.name,
                "provider": t.provider,
                "launched_at": launched,
                "terminated_at": None if open_ended else ended,
                "still_running": open_ended,
                "instance_hours": hours,
                "node_usd_per_hour": t.usd_per_hour,
                "usd": hours * t.usd_per_hour if math.isfinite(hours) else float("nan"),
                "spends": t.provider not in ("local", "static"),
            }
        )
    return pd.DataFrame(rows)


# --- the run ------------------------------------------------------------------------------------


def _r(x: Any, nd: int = 4) -> Any:
    """JSON-safe rounding: NaN becomes None."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    if isinstance(x, (float, np.floating)):
        return round(float(x), nd)
    if isinstance(x, (np.integer,)):
        return int(x)
    return x


def _headline(
    plan, run_id: str, basis: str, emulated: bool, tdf: pd.DataFrame, at_slo: pd.DataFrame, evaluation: pd.DataFrame
) -> dict[str, Any]:
    col = f"usd_per_m_{basis}"
    workloads: dict[str, Any] = {}
    for wl in sorted(at_slo["workload"].unique()) if not at_slo.empty else []:
        part = at_slo[at_slo["workload"] == wl]
        ranked = part[part["rank"].notna()].sort_values("rank")
        ranking = [
            {
                "target": r["name"],
                "usd_per_m": _r(r[col]),
                "ci": [_r(r[f"{col}_ci_low"]), _r(r[f"{col}_ci_high"])],
                "concurrency": _r(r["concurrency"]),
                "interactivity": _r(r["interactivity"], 2),
                "usd_per_gpu_hour": _r(r["usd_per_gpu_hour"]),
                "vs_cheapest_pct": _r(r["vs_cheapest_pct"], 1),
                "break_even_usd_per_gpu_hour": _r(r["break_even_usd_per_gpu_hour"]),
            }
            for _, r in ranked.iterrows()
        ]
        missed = part[part["ranked"] & ~part["slo_met"].astype(bool)]["name"].tolist()
        workloads[wl] = {
            "ranking": ranking,
            "misses_slo": missed,
            "cheapest": ranking[0]["target"] if ranking else None,
        }
    first = next(iter(workloads.values()), {"ranking": []})
    ranking = first["ranking"]
    stamp = " (EMULATED)" if emulated else ""
    if len(ranking) >= 2:
        a, b = ranking[0], ranking[1]
        summary = (
            f"{a['target']} is cheapest at the SLO: {a['usd_per_m']:.4g} USD/M {basis} tokens vs "
            f"{b['usd_per_m']:.4g} for {b['target']} ({(1 - a['usd_per_m'] / b['usd_per_m']) * 100:.1f}% less); "
            f"{b['target']} matches it at {b['break_even_usd_per_gpu_hour']:.4g} USD/GPU-h "
            f"(now {b['usd_per_gpu_hour']:.4g}){stamp}"
        )
    elif ranking:
        summary = f"only {ranking[0]['target']} has a cost at the SLO: {ranking[0]['usd_per_m']:.4g} USD/M {basis} tokens{stamp}"
    else:
        summary = f"no target has a cost at the SLO (none met it, or none passed validation){stamp}"
    spend = evaluation[evaluation["spends"]]["usd"].sum()  # emulated / static targets bill nothing
    would = evaluation["usd"].sum(min_count=1)
    return {
        "plan": plan.name,
        "run_id": run_id,
        "emulated": emulated,
        "basis": basis,
        "summary": summary,
        "utilisation": plan.pricing.utilisation,
        "slo": plan.slo.model_dump(exclude_none=True),
        "workloads": workloads,
        "quarantined": tdf[tdf["status"] == "quarantined"]["name"].tolist(),
        "no_results": tdf[tdf["status"] == "no_results"]["name"].tolist(),
        "evaluation_cost_usd": _r(spend, 2),
        "evaluation_cost_if_billed_usd": _r(would, 2),
    }


def compute(plan, run_dir: Path) -> CostTables:
    """All cost tables for a stored run; pure (writes nothing)."""
    run_dir = Path(run_dir)
    points = store.load_points(run_dir)
    status = target_status(plan, run_dir, points)
    tdf = _targets_frame(plan, status)
    basis = plan.pricing.rank_by
    costs = point_costs(points, tdf, plan.pricing.usd_per_kwh)
    at = cost_at_slo(costs, tdf, basis)
    sens = sensitivity(at, basis)
    ev = evaluation_cost(plan, run_dir)
    run = store.read_json(run_dir / "run.json", {}) or {}
    run_id = run.get("run_id") or (str(points["run_id"].iloc[0]) if not points.empty else run_dir.name)
    emulated = bool(plan.emulated or (not points.empty and points["emulated"].astype(bool).any()))
    return CostTables(costs, at, sens, ev, tdf, _headline(plan, run_id, basis, emulated, tdf, at, ev))


def cost_run(plan, run_dir: Path) -> dict[str, Any]:
    """The DAG's cost step: write cost.parquet (every per-point number), the at-SLO, sensitivity and
    evaluation tables beside it, and cost.json (the headline, also returned)."""
    run_dir = Path(run_dir)
    tables = compute(plan, run_dir)
    store.write_frame(run_dir / "cost.parquet", tables.points)
    store.write_frame(run_dir / "cost_at_slo.parquet", tables.at_slo)
    store.write_frame(run_dir / "cost_sensitivity.parquet", tables.sensitivity)
    store.write_frame(run_dir / "cost_evaluation.parquet", tables.evaluation)
    store.write_frame(run_dir / "cost_targets.parquet", tables.targets)
    store.write_json(run_dir / "cost.json", tables.headline)
    return tables.headline


def load_tables(run_dir: Path) -> CostTables | None:
    """The tables cost_run stored, so a report shows exactly what the cost step computed; None if
    the cost step has not run."""
    run_dir = Path(run_dir)
    names = (
        "cost.parquet",
        "cost_at_slo.parquet",
        "cost_sensitivity.parquet",
        "cost_evaluation.parquet",
        "cost_targets.parquet",
        "cost.json",
    )
    if not all((run_dir / n).exists() for n in names):
        return None
    return CostTables(*(pd.read_parquet(run_dir / n) for n in names[:5]), store.read_json(run_dir / "cost.json"))
