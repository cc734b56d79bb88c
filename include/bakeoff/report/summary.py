"""A run as the dashboard reads it: one small JSON document written beside the run's manifest.

The dashboard pages compare hundreds of runs; reading each run's Parquet tables on every page view
would take seconds on object storage. So the publish step condenses what the pages show (headline
verdict, spend, per target: configuration, cost at the SLO with its interval, throughput per GPU at
the SLO, the Pareto frontier, TCO tiers, validation and accuracy, whether it was provisioned) into
the manifest's ``dashboard`` key, and each plan's index.json carries it to the UI in one read.
Figures come only from the cost step's stored tables (``cost.load_tables``): nothing is recomputed.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any

import pandas as pd

from bakeoff import cost, store
from bakeoff.core.numbers import as_float
from bakeoff.plan import Plan, Target
from bakeoff.plan.checkpoints import checkpoint_of
from bakeoff.report.data import flatten
from bakeoff.report.provisioning import summaries as provisioning_summaries

VERSION = 1
# provenance keys worth a configuration diff (image digests, drivers, engine version)
_PROV_KEY = re.compile(r"image|digest|driver|rocm|cuda|version", re.I)
_SECRETISH = re.compile(r"key|secret|passw|authoriz|credential|(^|[._])token$", re.I)


def _num(x: object, nd: int = 6) -> float | None:
    v = as_float(x)
    return round(v, nd) if math.isfinite(v) else None


def _provenance(tdir: store.StorePath) -> dict[str, str]:
    doc = store.read_json(tdir / "provenance.json") or (store.read_json(tdir / "endpoint.json") or {}).get("provenance")
    flat = flatten(doc or {})
    return {
        k: str(v)[:300]
        for k, v in flat.items()
        if _PROV_KEY.search(k) and not _SECRETISH.search(k) and isinstance(v, (str, int, float))
    }


def _config(t: Target, trow: dict[str, Any], prov: dict[str, str]) -> dict[str, Any]:
    spec = t.speculative
    return {
        "provider": t.provider,
        "instance_type": t.instance_type or "",
        "gpu": str(t.gpu.name),
        "engine": t.stack,
        "model": t.model,
        "checkpoint": checkpoint_of(t),
        "precision": t.quantization,
        "kv_cache_dtype": t.kv_cache_dtype,
        "parallelism": f"TP{t.tensor_parallel} PP{t.pipeline_parallel} EP{t.expert_parallel}",
        "speculative": f"{spec.method} x{spec.num_speculative_tokens}" if spec else "none",
        "image": t.image or "",
        "engine_args": " ".join(t.engine_args),
        "usd_per_node_hour": _num(trow.get("node_usd_per_hour")),
        "usd_per_gpu_hour": _num(trow.get("usd_per_gpu_hour")),
        "price_source": str(trow.get("price_source") or ""),
        **{f"provenance: {k}": v for k, v in sorted(prov.items())},
    }


def _frontier(points: pd.DataFrame, slug: str, workload: str) -> list[dict[str, Any]]:
    """Per load level (means over repeats): interactivity, throughput and cost per GPU, SLO met."""
    part = points[(points["target"] == slug) & (points["workload"] == workload)]
    out = []
    for c, lv in part.groupby("concurrency", sort=True):
        out.append(
            {
                "concurrency": _num(c),
                "interactivity": _num(lv["interactivity"].mean(), 3),
                "output_tps_per_gpu": _num(lv["output_tps_per_gpu"].mean(), 3),
                "total_tps_per_gpu": _num(lv["total_tps_per_gpu"].mean(), 3),
                "usd_per_m_output": _num(lv["usd_per_m_output"].mean()),
                "usd_per_m_total": _num(lv["usd_per_m_total"].mean()),
                "meets_slo": bool(lv["meets_slo"].fillna(False).astype(bool).all()),
                # the client, not the server, set the pace at some repeat: not the hardware's figure
                "client_bound": bool(lv["client_bound"].fillna(False).astype(bool).any())
                if "client_bound" in lv
                else False,
            }
        )
    return out


def _at_slo(row: dict[str, Any], basis: str, tiers: list[str]) -> dict[str, Any]:
    col = f"usd_per_m_{basis}"
    if not row.get("slo_met"):
        return {"slo_met": False}
    return {
        "slo_met": True,
        "usd_per_m": _num(row.get(col)),
        "ci": [_num(row.get(f"{col}_ci_low")), _num(row.get(f"{col}_ci_high"))],
        "tps_per_gpu": _num(row.get(f"{basis}_tps_per_gpu"), 3),
        "interactivity": _num(row.get("interactivity"), 3),
        "concurrency": _num(row.get("concurrency")),
        "repeats": _num(row.get("repeats")),
        "rank": _num(row.get("rank")),
        # a figure the client set the pace for, or a cheaper client-bound level: a lower bound for the hardware
        "paced_by": str(row.get("paced_by") or "server"),
        "lower_bound": bool(row.get("lower_bound")),
        "client_bound_concurrency": _num(row.get("client_bound_concurrency")),
        "tco": {tier: _num(row.get(f"{col}_tco_{tier}")) for tier in tiers},
        # per watt (cost.PER_WATT): output tokens per joule with its interval, and what kind of energy figure
        "tokens_per_joule": _num(row.get("output_tokens_per_joule")),
        "tokens_per_joule_ci": [
            _num(row.get("output_tokens_per_joule_ci_low")),
            _num(row.get("output_tokens_per_joule_ci_high")),
        ],
        "tps_per_kw_gpu": _num(row.get("output_tps_per_kw_gpu_measured"), 3),
        "tps_per_kw_nameplate": _num(row.get("output_tps_per_kw_nameplate"), 3),
        "energy_source": str(row.get("energy_source") or ""),
    }


def summarize(plan: Plan, run_dir: str | store.StorePath) -> dict[str, Any]:
    """The dashboard's document for one stored run (empty targets when the cost step did not run)."""
    run_dir = store.at(run_dir)
    run = store.run_facts(run_dir)
    tables = cost.load_tables(run_dir)
    head = (tables.headline if tables else None) or {}
    basis = head.get("basis") or plan.pricing.rank_by
    validation = store.read_json(run_dir / "validation.json") or {}
    tiers = [c.removeprefix(f"usd_per_m_{basis}_tco_") for c in _tco_columns(tables, basis)]
    trows = {r["target"]: r for r in tables.targets.to_dict("records")} if tables else {}
    at_rows = tables.at_slo.to_dict("records") if tables and not tables.at_slo.empty else []
    points = tables.points if tables is not None else None
    first_wl = next(iter(head.get("workloads") or {}), None)
    verdict = ((head.get("workloads") or {}).get(first_wl) or {}).get("verdict") or {}
    provisioning = provisioning_summaries(plan, run_dir, time.time())
    targets = {}
    for t in plan.targets:
        tdir = run_dir / f"target={t.slug}"
        steps = run.target(t.slug)
        val = (validation.get("targets") or {}).get(t.slug) or {}
        accuracy = store.read_json(tdir / "accuracy.json")
        acc_fail = [f for f in val.get("failures") or [] if str(f).startswith("accuracy")]
        status = str((trows.get(t.slug) or {}).get("status") or ("passed" if val.get("passed") else "unknown"))
        workloads = {}
        for r in at_rows:
            if r["target"] != t.slug:
                continue
            wl = str(r["workload"])
            workloads[wl] = {
                **_at_slo(r, basis, tiers),
                "frontier": _frontier(points, t.slug, wl) if points is not None and not points.empty else [],
            }
        targets[t.slug] = {
            "name": t.name,
            "emulated": bool(t.emulated),
            "config": _config(t, trows.get(t.slug) or {}, _provenance(tdir)),
            "status": status,
            "accuracy": ("failed" if acc_fail else ("passed" if accuracy else "not run"))
            + (f" ({_num(accuracy.get('score'), 3)})" if isinstance(accuracy, dict) and "score" in accuracy else ""),
            # a node was had (its provision record), or none was and nothing was measured (stockout,
            # quota, a failed launch); None when neither can be told (a static endpoint, no record)
            "provisioned": True if steps.provision is not None else (False if status == "no_results" else None),
            "workloads": workloads,
            # offers, refusals, time to running / serving-ready (report.provisioning): the stockout trend's input
            "provisioning": provisioning.get(t.slug),
        }
    return {
        "version": VERSION,
        "basis": basis,
        "slo": plan.slo.in_words(),
        "workload": first_wl,
        "verdict": {
            "cheaper": verdict.get("cheaper"),
            "clear": bool(verdict.get("clear")),
            "tied_with": list(verdict.get("tied_with") or []),
        },
        "spend_usd": _num(head.get("evaluation_cost_usd"), 2),
        "spend_if_billed_usd": _num(head.get("evaluation_cost_if_billed_usd"), 2),
        "tco_tiers": tiers,
        "approval": run.approval.as_shown() if run.approval else None,  # the approval step's record, if any
        "targets": targets,
    }


def _tco_columns(tables: cost.CostTables | None, basis: str) -> list[str]:
    if tables is None or tables.at_slo.empty:
        return []
    return [c for c in tables.at_slo.columns if c.startswith(f"usd_per_m_{basis}_tco_")]
