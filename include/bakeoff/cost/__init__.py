"""Cost per token: measured throughput x the price in force -> what a buyer pays, at their SLO.

One definition of every cost figure, used by the DAG, the CLI and the reports alike:

  USD per GPU-hour (effective) = node price / GPUs in the node / utilisation
  USD per M tokens             = USD per GPU-hour (effective) / (tokens/s per GPU x 3600 / 1e6)
  tokens per USD               = 1e6 / USD per M tokens
  tokens per MW                = tokens/s per GPU / all-in kW per GPU x 1000   (tokens/s per MW)
  energy USD per M tokens      = kW per GPU x USD per kWh / (tokens/s per GPU x 3600 / 1e6)
  output tokens per joule      = output tokens/s per GPU / (kW per GPU x 1000)
  tokens/s per kW (GPU)        = output tokens/s per GPU / measured kW per GPU       (measured points only)
  tokens/s per kW (nameplate)  = output tokens/s per GPU / all-in kW per GPU (node nameplate share)
  USD per M with energy        = USD per M output tokens + energy USD per M output tokens
  USD per session              = USD per GPU-hour (effective) x GPUs used / sessions completed per hour
  USD per 1,000 agent turns    = USD per GPU-hour (effective) x GPUs used / turns answered per hour x 1000

Throughput per GPU divides by the GPUs serving the model (TP x PP); the price per GPU divides the
node price by the node's GPUs, i.e. a TP4 replica on an 8-GPU node pays for the 4 GPUs it uses and
the other 4 are assumed to serve another replica. Utilisation < 1 spreads idle paid hours over the
tokens actually served. Cloud node prices already include power: the energy figures are for
on-premises and TCO comparisons, and the cloud cost that ranks targets never includes them (the
"with energy" figure is shown beside it, for a buyer who pays for power). kW per GPU is measured where
the point measured it and estimated from the nameplate otherwise; ``energy_source`` says which, per row.

A target that did not pass validation is quarantined (``quality.status``): its numbers are kept (and
shown apart) but it never enters the ranking or the break-even prices. Intervals over repeats are
percentile bootstraps (``bench.metrics.stats``, the one CI method); a target is called dearer than the
cheapest only when the interval of their cost difference excludes zero.

Inputs come from elsewhere: prices in force from the plan (``plan.prices`` folds a price sheet in),
validation status from ``quality.status``, the evaluation's own cost from ``budget``; the headline
sentence is written by ``cost.headline``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from bakeoff import catalog, store
from bakeoff.bench.client.client_cores import sizing_check
from bakeoff.bench.metrics.stats import bootstrap_ci, difference_ci
from bakeoff.cost.headline import build_headline
from bakeoff.quality.status import target_status
from bakeoff.spend import at_slo, offers
from bakeoff.spend.budget import evaluation_cost
from bakeoff.store import StorePath

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

    from bakeoff.plan import Plan, Target

PRICE_FACTORS = (0.5, 0.75, 1.0, 1.25, 1.5)
UTILISATIONS = (0.3, 0.5, 0.7, 0.85, 1.0)
CI_LEVEL = 0.95
# Optional point column: mean measured power per GPU (W) while the point ran, from providers that report it.
POWER_COLUMN = "power_w_per_gpu"
MEASURED = "measured"  # a point's power whose method it did not record (files written before energy_method)
ESTIMATED = "estimated, nameplate"  # the catalog's all-in kW per GPU, never a reading
# Per-watt figures at the SLO, each with a bootstrap interval over repeats (the report's Per watt section).
PER_WATT = (
    "output_tokens_per_joule",
    "output_tps_per_kw_gpu_measured",
    "output_tps_per_kw_nameplate",
    "usd_per_m_output_with_energy",
)


@dataclass
class CostTables:
    """Everything cost_run computes; the reports render these frames, nothing else recomputes them."""

    points: pd.DataFrame  # one row per measured point, with every cost column
    at_slo: pd.DataFrame  # one row per (target, workload): cost at the SLO, CI, break-even
    sensitivity: pd.DataFrame  # cost at the SLO under price factors and utilisations
    evaluation: pd.DataFrame  # one row per target: measured hours and cost of the run itself
    targets: pd.DataFrame  # one row per planned target: price in force, node spec, status
    headline: dict[str, Any]


def per_m_tokens(per_gpu_hour: ArrayLike, tokens_per_s_per_gpu: ArrayLike) -> float | NDArray[np.float64]:
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


RACK_GPUS = 72  # one NVL72 rack; an 8-GPU-node cluster is compared per 72 GPUs, the same silicon count


def rack_scale(target: Target, output_tps: float) -> dict[str, float | int | str]:
    """A target's price and throughput at rack scale: USD per GPU-hour, per node-hour, per target-hour
    (every node billed) and per rack-hour (an NVL72 rack's trays, or 72 GPUs of 8-GPU nodes); output
    tokens/s per GPU and per rack; USD per million output tokens. ``output_tps``: the target's
    measured (or emulated) output tokens/s at the SLO."""
    it = target.instance
    node_gpus, nodes = it.gpus, target.nodes
    gpus = nodes * node_gpus
    usd_gpu_h = target.usd_per_hour / node_gpus
    per_gpu = output_tps / gpus if gpus else float("nan")
    return {
        "target": target.name,
        "nodes": nodes,
        "gpus": gpus,
        "rack": (target.cluster.rack if target.cluster else None) or f"{RACK_GPUS} GPUs of {node_gpus}-GPU nodes",
        "usd_per_gpu_hour": usd_gpu_h,
        "usd_per_node_hour": target.usd_per_hour,
        "usd_per_target_hour": target.usd_per_hour * nodes,
        "usd_per_rack_hour": usd_gpu_h * RACK_GPUS,
        "output_tps_per_gpu": per_gpu,
        "output_tps_per_rack": per_gpu * RACK_GPUS,
        "usd_per_m_output": float(per_m_tokens(usd_gpu_h, per_gpu)),
        "price_source": target.price_source,
    }


def node_spec(target: Target) -> str:
    it, g = target.instance, target.gpu
    if target.instance_type is None:  # a static endpoint described in the plan: only what it says
        mem = f" {g.hbm_gb:g} GB" if math.isfinite(g.hbm_gb) else ""
        note = f"; {it.note}" if it.note else ""
        return f"{it.gpus}x {g.name.upper() if g.name.islower() else g.name}{mem} (described in the plan{note})"
    return f"{it.gpus}x {g.name.upper()} {g.hbm_gb:g} GB ({it.type}, {it.provider})"


def _targets_frame(plan: Plan, status: dict[str, dict[str, Any]]) -> pd.DataFrame:
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
                "replicas_per_node": it.gpus * t.nodes // t.gpus_used,  # a cluster: 1 (one serving unit)
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
    replica_usd_per_hour = price * df["gpus_used"].astype(float)
    for col, per, scale in (("usd_per_session", "sessions_per_hour", 1.0), ("usd_per_1k_turns", "turns_per_hour", 1e3)):
        rate = df[per].astype(float).where(lambda s: s > 0) if per in df else pd.Series(np.nan, index=df.index)
        df[col] = replica_usd_per_hour / rate * scale
    return _per_watt(df, usd_per_kwh)


def _per_watt(df: pd.DataFrame, usd_per_kwh: float) -> pd.DataFrame:
    """The energy columns: measured GPU power where the point has it (its method, e.g. "measured, energy
    counters, GPU only"), else the catalog's all-in kW per GPU ("estimated, nameplate"), named per row so
    no figure passes for the other kind."""
    measured = df[POWER_COLUMN].astype(float) / 1000 if POWER_COLUMN in df else pd.Series(np.nan, index=df.index)
    method = df["energy_method"].fillna(MEASURED) if "energy_method" in df else pd.Series(MEASURED, index=df.index)
    df["kw_per_gpu"] = measured.fillna(df["all_in_kw_per_gpu"])
    df["energy_source"] = np.where(measured.notna(), method.astype(str), ESTIMATED)
    df["usd_per_kwh"] = usd_per_kwh
    df["energy_usd_per_gpu_hour"] = df["kw_per_gpu"] * usd_per_kwh
    tps_total = df["total_tps_per_gpu"].astype(float).where(lambda s: s > 0)
    tps_out = df["output_tps_per_gpu"].astype(float).where(lambda s: s > 0)
    df["energy_usd_per_m_total"] = per_m_tokens(df["energy_usd_per_gpu_hour"], tps_total)
    df["energy_kwh_per_m_total"] = per_m_tokens(df["kw_per_gpu"], tps_total)
    df["output_tokens_per_joule"] = tps_out / (df["kw_per_gpu"] * 1000)
    df["joules_per_output_token_at_level"] = df["kw_per_gpu"] * 1000 / tps_out
    df["output_tps_per_kw_gpu_measured"] = tps_out / measured
    df["output_tps_per_kw_nameplate"] = tps_out / df["all_in_kw_per_gpu"].astype(float)
    df["energy_usd_per_m_output"] = per_m_tokens(df["energy_usd_per_gpu_hour"], tps_out)
    df["usd_per_m_output_with_energy"] = df["usd_per_m_output"] + df["energy_usd_per_m_output"]
    return df


# --- at the SLO ---------------------------------------------------------------------------------


def _all(s: pd.Series) -> bool:
    return bool(s.fillna(False).astype(bool).all())


def _any(s: pd.Series) -> bool:
    return bool(s.fillna(False).astype(bool).any())


def _levels(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (target, workload, concurrency): means over repeats; a level meets the SLO only
    when every repeat does, and is client-bound when any repeat (any fleet member of it) was."""
    if "client_bound" not in df:  # points stored before the monitor's verdict was a column
        df = df.assign(client_bound=False)
    g = df.groupby(["target", "workload", "concurrency"], sort=True)
    out = g.agg(
        meets_slo=("meets_slo", _all),
        client_bound=("client_bound", _any),
        repeats=("repeat", "nunique"),
        interactivity=("interactivity", "mean"),
        output_tps_per_gpu=("output_tps_per_gpu", "mean"),
        total_tps_per_gpu=("total_tps_per_gpu", "mean"),
        usd_per_m_output_mean=("usd_per_m_output", "mean"),
        usd_per_m_total_mean=("usd_per_m_total", "mean"),
        usd_per_session_mean=("usd_per_session", "mean"),
        usd_per_1k_turns_mean=("usd_per_1k_turns", "mean"),
    ).reset_index()
    return out


def cost_at_slo(costs: pd.DataFrame, targets: pd.DataFrame, basis: str) -> pd.DataFrame:
    """Per (target, workload): the cheapest load level meeting every SLO, its CI, and break-even.

    Only levels the server set the pace for are the hardware's figure (``paced_by`` "server") and
    ranked. When the cheapest level meeting the SLO was client-bound (``lower_bound``), the figure
    understates the hardware: the row names that level (``client_bound_concurrency``, its cost in
    ``client_bound_usd_per_m``). When no server-paced level met the SLO, the row's figure is the
    client-bound level's (``paced_by`` "client"), shown as a lower bound and never ranked."""
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
            row["levels_client_bound"] = int(lv["client_bound"].sum()) if not lv.empty else 0
            row["paced_by"], row["lower_bound"] = "", False
            # a session workload is ranked by what a session costs; a request workload by its tokens
            sessions = not ok.empty and ok["usd_per_session_mean"].notna().any()
            key = "usd_per_session_mean" if sessions else f"usd_per_m_{basis}_mean"
            records = ok.to_dict("records")
            cheapest = at_slo.cheapest(records, key)  # the one definition predict uses too
            if cheapest is None:
                row["slo_met"] = False
                rows.append(row)
                continue
            # only levels the server set the pace for are the hardware's figure
            best = at_slo.cheapest([r for r in records if not r["client_bound"]], key) or cheapest
            row.update(
                paced_by="client" if best["client_bound"] else "server", lower_bound=bool(cheapest["client_bound"])
            )
            if cheapest["client_bound"]:
                row["client_bound_concurrency"] = int(cheapest["concurrency"])
                row[f"client_bound_usd_per_m_{basis}"] = float(cheapest[f"usd_per_m_{basis}_mean"])
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
                usd_per_session=float(best["usd_per_session_mean"]),
                usd_per_1k_turns=float(best["usd_per_1k_turns_mean"]),
                emulated=bool(reps["emulated"].astype(bool).any()),
            )
            for kind in ("output", "total"):
                m, lo, hi = bootstrap_ci(reps[f"usd_per_m_{kind}"].to_numpy(float), level=CI_LEVEL)
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
            for col in PER_WATT:
                m, lo, hi = bootstrap_ci(reps[col].to_numpy(float), level=CI_LEVEL)
                row[col], row[f"{col}_ci_low"], row[f"{col}_ci_high"] = m, lo, hi
            row["joules_per_output_token_at_slo"] = 1 / row["output_tokens_per_joule"]
            row["energy_source"] = " / ".join(sorted(reps["energy_source"].astype(str).unique()))  # repeats' kinds
            row["throttled"] = (
                bool(reps["throttled"].fillna(False).astype(bool).any()) if "throttled" in reps else False
            )
            rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    return _add_tco(_add_verdict(_add_break_even(df, basis), costs, basis), targets, basis)


def _add_tco(df: pd.DataFrame, targets: pd.DataFrame, basis: str) -> pd.DataFrame:
    """Cost at the SLO had the GPUs been priced at each public TCO tier instead of the price in force."""
    tco = catalog.tco()
    gpu = targets.set_index("target")["gpu"]
    col = f"usd_per_m_{basis}"
    for i, tier in enumerate(tco["tiers"]):
        tier_price = df["target"].map(lambda s, i=i: (tco["usd_per_gpu_hour"].get(gpu[s]) or [np.nan] * 3)[i])
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
    for idx in df.groupby("workload").groups.values():
        part = df.loc[idx]
        # a figure the client set the pace for is a lower bound for the hardware, never ranked
        ranked = part[part["ranked"] & part[col].notna() & (part["paced_by"] == "server")].sort_values(col)
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


def _add_verdict(df: pd.DataFrame, costs: pd.DataFrame, basis: str) -> pd.DataFrame:
    """Per ranked target: the bootstrap interval of its cost minus the cheapest's over repeats (each at
    its own level meeting the SLO), in % of the cheapest's cost, and whether it excludes parity.

    Only a target whose interval lies wholly above zero is called dearer; one repeat on either side
    gives no interval, so no claim either way.
    """
    col = f"usd_per_m_{basis}"
    df["vs_cheapest_pct_ci_low"] = np.nan
    df["vs_cheapest_pct_ci_high"] = np.nan
    df["clearly_dearer"] = False

    def repeats(row: pd.Series) -> NDArray[np.float64]:
        sel = (costs["target"] == row["target"]) & (costs["workload"] == row["workload"])
        return np.asarray(costs.loc[sel & (costs["concurrency"] == row["concurrency"]), col], dtype=float)

    for idx in df.groupby("workload").groups.values():
        part = df.loc[idx]
        ranked = part[part["rank"].notna()].sort_values("rank")
        if len(ranked) < 2:
            continue
        cheapest = ranked.iloc[0]
        base = repeats(cheapest)
        for i, row in ranked.iloc[1:].iterrows():
            _, lo, hi = difference_ci(base, repeats(row), level=CI_LEVEL)
            df.at[i, "vs_cheapest_pct_ci_low"] = lo / cheapest[col] * 100
            df.at[i, "vs_cheapest_pct_ci_high"] = hi / cheapest[col] * 100
            df.at[i, "clearly_dearer"] = bool(lo > 0)  # False for a NaN bound
    return df


def sensitivity(at_slo: pd.DataFrame, basis: str) -> pd.DataFrame:
    """Cost at the SLO when the price moves +-50% and when utilisation runs 30-100%.

    Cost is linear in price and inverse in utilisation, so both are exact rescalings of the measured
    cost; the table makes the negotiation range visible without another run.
    """
    col = f"usd_per_m_{basis}"
    rows: list[dict[str, Any]] = []
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


# --- the run ------------------------------------------------------------------------------------


def compute(plan: Plan, run_dir: str | StorePath) -> CostTables:
    """All cost tables for a stored run; pure (writes nothing). A target that fell back to another of
    its offers is priced as the type that ran (``offers.as_ran``)."""
    run_dir = store.at(run_dir)
    plan = offers.as_ran(plan, run_dir)
    points = store.load_points(run_dir)
    status = target_status(plan, run_dir, points)
    tdf = _targets_frame(plan, status)
    basis = plan.pricing.rank_by
    costs = point_costs(points, tdf, plan.pricing.usd_per_kwh)
    at = cost_at_slo(costs, tdf, basis)
    sens = sensitivity(at, basis)
    ev = evaluation_cost(plan, run_dir)
    run_id = store.run_facts(run_dir).start.run_id or (
        str(points["run_id"].iloc[0]) if not points.empty else run_dir.name
    )
    emulated = bool(plan.emulated or (not points.empty and points["emulated"].astype(bool).any()))
    headline = build_headline(plan, run_id, basis, emulated, tdf, at, ev)
    headline["client_sizing"] = sizing_check(plan, points)  # plan check's client sizing vs the monitor's verdicts
    return CostTables(costs, at, sens, ev, tdf, headline)


def cost_run(plan: Plan, run_dir: str | StorePath) -> dict[str, Any]:
    """The DAG's cost step: write cost.parquet (every per-point number), the at-SLO, sensitivity and
    evaluation tables beside it, and cost.json (the headline, also returned)."""
    run_dir = store.at(run_dir)
    tables = compute(plan, run_dir)
    store.write_frame(run_dir / "cost.parquet", tables.points)
    store.write_frame(run_dir / "cost_at_slo.parquet", tables.at_slo)
    store.write_frame(run_dir / "cost_sensitivity.parquet", tables.sensitivity)
    store.write_frame(run_dir / "cost_evaluation.parquet", tables.evaluation)
    store.write_frame(run_dir / "cost_targets.parquet", tables.targets)
    store.write_json(run_dir / "cost.json", tables.headline)
    return tables.headline


def load_tables(run_dir: str | StorePath) -> CostTables | None:
    """The tables cost_run stored, so a report shows exactly what the cost step computed; None if
    the cost step has not run."""
    run_dir = store.at(run_dir)
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
    points, at_slo, sens, evaluation, targets = (store.read_frame(run_dir / n) for n in names[:5])
    return CostTables(points, at_slo, sens, evaluation, targets, store.read_json(run_dir / "cost.json"))
