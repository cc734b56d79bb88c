"""Predict a plan before renting anything: per target and workload, throughput per GPU against
interactivity, cost at the plan's SLO with its error band, the run's time and spend, and a ranking that
says which pairs the band cannot separate (``bakeoff predict PLAN``; the DAG and the UI call
``predict_plan``).

Every figure is the calibrated twin's (bakeoff.twin.target): the band is its 80% error on rows it
never saw, widened where the model is read through a calibrated neighbour. The SLO's p99 limits are
compared with the predicted typical TPOT and TTFT (the twin predicts no tail). A target without a
basis is listed with the reason and left out of the ranking; its spend is the budget guard's
pessimistic estimate.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from bakeoff import budget
from bakeoff.twin import calibration
from bakeoff.twin.target import NoCalibration, TargetTwin, twin_for

if TYPE_CHECKING:
    from bakeoff.plan import Plan
    from bakeoff.plan.settings import Slo
    from bakeoff.plan.target import Target
    from bakeoff.plan.workload import Workload

MAX_LITTLE_ITER = 30


def _lengths(w: Workload) -> tuple[int, int, int]:
    """(input, output, input that needs prefill: the shared prefix is cached after the first request)."""
    new = int(round(w.input_len * (1 - w.prefix_ratio)))
    return w.input_len, w.output_len, max(1, new)


def _point(tw: TargetTwin, w: Workload, c: float, band: float) -> dict[str, Any]:
    i, o, fresh = _lengths(w)
    cap = tw.max_concurrency(i, o)
    running = max(1.0, min(c, cap))
    tpot = tw.tpot_s(running, i, o, fresh)
    per_gpu = running / tpot / tw.tp
    return {
        "concurrency": round(c, 2),
        "running": int(round(running)),
        "tpot_ms": round(tpot * 1000, 2),
        "ttft_ms": round((tw.ttft_s(fresh) + tpot) * 1000, 1),
        "interactivity": round(1 / tpot, 1),
        "tokens_s_per_gpu": round(per_gpu, 1),
        "tokens_s_per_gpu_band": [round(per_gpu * math.exp(-band), 1), round(per_gpu * math.exp(band), 1)],
        "kv_bound": c > cap,
    }


def _rate_concurrency(tw: TargetTwin, w: Workload, rate: float) -> float:
    """Little's law, iterated: requests in flight = rate x (TTFT + output x TPOT at that many in flight)."""
    i, o, fresh = _lengths(w)
    c = 1.0
    cap = tw.max_concurrency(i, o)
    for _ in range(MAX_LITTLE_ITER):
        running = min(c, cap)
        nxt = rate * (tw.ttft_s(fresh) + o * tw.tpot_s(running, i, o, fresh) * max(c, 1) / max(running, 1))
        if abs(nxt - c) < 0.01 * c or nxt > 100 * cap:
            c = nxt
            break
        c = nxt
    return c


def _at_slo(tw: TargetTwin, w: Workload, slo: Slo, usd_per_hour: float, gpus: int, band: float) -> dict[str, Any]:
    """The highest concurrency per replica whose predicted TPOT and TTFT meet the SLO, and its cost."""
    i, o, fresh = _lengths(w)
    tpot_limit = min((x for x in (slo.tpot_p99_ms, slo.tpot_p50_ms) if x), default=None)
    ttft = (tw.ttft_s(fresh) + tw.tpot_s(1, i, o, fresh)) * 1000
    if slo.ttft_p99_ms and ttft > slo.ttft_p99_ms:
        return {"meets": False, "reason": f"TTFT {ttft:.0f} ms alone exceeds the SLO's {slo.ttft_p99_ms:g} ms"}
    lo, hi = 1, tw.max_concurrency(i, o)
    if tpot_limit and tw.tpot_s(1, i, o) * 1000 > tpot_limit:
        return {
            "meets": False,
            "reason": f"TPOT {tw.tpot_s(1, i, o) * 1000:.1f} ms at concurrency 1 exceeds {tpot_limit:g} ms",
        }
    if tpot_limit:
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if tw.tpot_s(mid, i, o, fresh) * 1000 <= tpot_limit:
                lo = mid
            else:
                hi = mid - 1
    else:
        lo = hi
    per_gpu = lo / tw.tpot_s(lo, i, o, fresh) / tw.tp
    node_tokens_s = per_gpu * tw.tp * tw.replicas
    usd_per_mtok = usd_per_hour / (node_tokens_s * 3600) * 1e6
    return {
        "meets": True,
        "concurrency": lo,
        "tpot_ms": round(tw.tpot_s(lo, i, o, fresh) * 1000, 2),
        "tokens_s_per_gpu": round(per_gpu, 1),
        "usd_per_mtok": round(usd_per_mtok, 4),
        "usd_per_mtok_band": [round(usd_per_mtok * math.exp(-band), 4), round(usd_per_mtok * math.exp(band), 4)],
        "gpus": gpus,
    }


def _workload(tw: TargetTwin, w: Workload, plan: Plan, t: Target) -> dict[str, Any]:
    out: dict[str, Any] = {"workload": w.name}
    if w.kind == "sessions" or w.load in ("trace", "sla"):
        out["points"] = []
        out["note"] = f"{'sessions' if w.kind == 'sessions' else w.load} workload: priced as run time only"
        return out
    if w.load == "rate":
        out["points"] = [{"rate": r, **_point(tw, w, _rate_concurrency(tw, w, r), tw.band_log)} for r in w.rates]
    else:
        out["points"] = [_point(tw, w, c, tw.band_log) for c in w.levels()]
    out["at_slo"] = _at_slo(tw, w, plan.slo, t.usd_per_hour, t.instance.gpus, tw.band_log)
    return out


def _rank(targets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per workload: calibrated targets meeting the SLO by cost per M tokens; pairs whose bands overlap."""
    by_w: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for t in targets:
        for w in t.get("workloads", []):
            s = w.get("at_slo") or {}
            if s.get("meets"):
                by_w.setdefault(w["workload"], []).append((t["target"], s))
    out = []
    for name, rows in by_w.items():
        rows.sort(key=lambda x: x[1]["usd_per_mtok"])
        unresolved = [
            (a, b)
            for k, (a, sa) in enumerate(rows)
            for b, sb in rows[k + 1 :]
            if sa["usd_per_mtok_band"][1] >= sb["usd_per_mtok_band"][0]
        ]
        out.append({"workload": name, "order": [r[0] for r in rows], "unresolved_pairs": unresolved})
    return out


def predict_plan(plan: Plan) -> dict[str, Any]:
    """The twin's prediction for every target of a validated plan (see the module docstring)."""
    est = {r["target"]: r for r in budget.estimate(plan)["targets"]}
    targets = []
    for t in plan.targets:
        tw = twin_for(t)
        row = est[t.name]
        doc: dict[str, Any] = {
            "target": t.name,
            "gpu": t.gpu.name,
            "model": t.model,
            "quantization": t.quantization,
            "stack": t.stack,
            "run_hours": row["hours"],
            "spend_usd": row["usd"],
            "spend_usd_low": row["usd_low"],
        }
        if isinstance(tw, NoCalibration):
            doc["no_calibration"] = tw.reason
        else:
            doc |= {
                "basis": tw.basis,
                "tp": tw.tp,
                "replicas": tw.replicas,
                "efficiency": round(tw.efficiency, 3),
                "band_pct": round(math.expm1(tw.band_log) * 100, 1),
                "workloads": [_workload(tw, w, plan, t) for w in plan.workloads],
            }
        targets.append(doc)
    return {"plan": plan.name, "source": calibration.source_line(), "targets": targets, "ranking": _rank(targets)}


def render(doc: dict[str, Any]) -> str:
    """The prediction as text, for ``bakeoff predict``."""
    lines = [f"plan {doc['plan']}: PREDICTED by the calibrated twin ({doc['source']})"]
    for t in doc["targets"]:
        head = f"{t['target']}: {t['gpu']} {t['model']} {t['quantization']} {t['stack']}"
        spend = f"run {t['run_hours']} h, spend {t['spend_usd_low']}-{t['spend_usd']} USD"
        if "no_calibration" in t:
            lines += [f"{head}: no calibration: {t['no_calibration']}", f"  {spend} (pessimistic estimate)"]
            continue
        lines += [
            f"{head} TP{t['tp']} x{t['replicas']}: efficiency {t['efficiency']} of the roofline, "
            f"band +-{t['band_pct']}%",
            f"  basis: {t['basis']}",
            f"  {spend}",
        ]
        for w in t["workloads"]:
            lines.append(f"  {w['workload']}" + (f": {w['note']}" if w.get("note") else ""))
            for p in w["points"]:
                load = (
                    f"rate {p['rate']:g}/s -> {p['concurrency']:g} in flight"
                    if "rate" in p
                    else f"c={p['concurrency']:g}"
                )
                lo, hi = p["tokens_s_per_gpu_band"]
                lines.append(
                    f"    {load}: {p['tokens_s_per_gpu']:g} tok/s/GPU ({lo:g}-{hi:g}) "
                    f"at {p['interactivity']:g} tok/s/user, TPOT {p['tpot_ms']:g} ms, TTFT {p['ttft_ms']:g} ms"
                    + (" (KV-bound: requests wait)" if p["kv_bound"] else "")
                )
            s = w.get("at_slo")
            if s and s["meets"]:
                lo, hi = s["usd_per_mtok_band"]
                lines.append(
                    f"    at the SLO: c={s['concurrency']} per replica, {s['tokens_s_per_gpu']:g} tok/s/GPU, "
                    f"{s['usd_per_mtok']:g} USD/M tokens ({lo:g}-{hi:g})"
                )
            elif s:
                lines.append(f"    at the SLO: not met ({s['reason']})")
    for r in doc["ranking"]:
        unsure = ", ".join(f"{a} ~ {b}" for a, b in r["unresolved_pairs"]) or "none"
        lines.append(f"ranking {r['workload']} (cost at the SLO): {' < '.join(r['order'])}; within the band: {unsure}")
    return "\n".join(lines)
