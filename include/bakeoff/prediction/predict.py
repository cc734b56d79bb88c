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
from dataclasses import dataclass
from typing import Any

from bakeoff.plan import Plan
from bakeoff.plan.slo import Slo
from bakeoff.plan.target import Target
from bakeoff.plan.workload import Workload
from bakeoff.spend import at_slo, budget
from bakeoff.twin import calibration, holdout, score
from bakeoff.twin.calibration import engine_family
from bakeoff.twin.target import PLAN_SCENARIO, NoCalibration, TargetTwin, twin_for

MAX_LITTLE_ITER = 30


def _lengths(w: Workload) -> tuple[int, int, int]:
    """(input, output, input that needs prefill: the shared prefix is cached after the first request)."""
    new = int(round(w.input_len * (1 - w.prefix_ratio)))
    return w.input_len, w.output_len, max(1, new)


def _point(
    tw: TargetTwin, w: Workload, c: float, band: float, price: Price | None = None, slo: Slo | None = None
) -> dict[str, Any]:
    """One predicted load level: output tokens/s per GPU with its band at an interactivity (output tokens/s
    per user); with ``price``, its cost per million tokens of the plan's basis and band, and with ``slo``
    whether it meets the SLO (at_slo.cheapest then chooses among these as the cost step does among measured
    points)."""
    i, o, fresh = _lengths(w)
    cap = tw.max_concurrency(i, o)
    running = max(1.0, min(c, cap))
    tpot = tw.tpot_s(running, i, o, fresh)
    per_gpu = running / tpot / tw.tp
    ttft_ms = (tw.ttft_s(fresh) + tpot) * 1000
    out: dict[str, Any] = {
        "concurrency": round(c, 2),
        "running": int(round(running)),
        "tpot_ms": round(tpot * 1000, 2),
        "ttft_ms": round(ttft_ms, 1),
        "interactivity": round(1 / tpot, 1),
        "tokens_s_per_gpu": round(per_gpu, 1),
        "tokens_s_per_gpu_band": [round(per_gpu * math.exp(-band), 1), round(per_gpu * math.exp(band), 1)],
        "kv_bound": c > cap,
    }
    if price is not None:
        usd = price.usd_per_m(per_gpu * tw.tp * tw.replicas, (i + o) / o)
        out |= {
            "usd_per_m": round(usd, 4),
            "usd_per_m_band": [round(usd * math.exp(-band), 4), round(usd * math.exp(band), 4)],
        }
    if slo is not None:
        out["meets_slo"] = not out["kv_bound"] and _meets(slo, tpot * 1000, ttft_ms)
    return out


@dataclass(frozen=True)
class Price:
    """What a target's node costs, and the plan's ranking basis: per million output tokens, or input+output."""

    usd_per_hour: float
    basis: str  # "output" or "total" (plan.pricing.rank_by)

    def usd_per_m(self, output_tokens_s_per_node: float, total_per_output: float) -> float:
        tokens = output_tokens_s_per_node * (total_per_output if self.basis == "total" else 1.0)
        return self.usd_per_hour / (tokens * 3600) * 1e6


def _limit(slo: Slo, metric: str) -> float | None:
    """The twin predicts one figure per metric, so it is held to the tightest bound on it at any
    percentile, else the per-request bound."""
    return slo.tightest(metric) or slo.request_bounds().get(metric)


def _tpot_limit(slo: Slo) -> float | None:
    return _limit(slo, "tpot")


def _meets(slo: Slo, tpot_ms: float, ttft_ms: float) -> bool:
    """The predicted typical TPOT and TTFT against the SLO's limits (the twin predicts no tail)."""
    limit, ttft_limit = _tpot_limit(slo), _limit(slo, "ttft")
    return (limit is None or tpot_ms <= limit) and (not ttft_limit or ttft_ms <= ttft_limit)


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


def _at_slo(tw: TargetTwin, w: Workload, slo: Slo, price: Price, points: list[dict[str, Any]]) -> dict[str, Any]:
    """Cost at the SLO as the report computes it (at_slo.cheapest over the plan's load levels), and, where a
    higher concurrency per replica would still meet the SLO, that figure marked as extrapolated beyond them."""
    i, o, fresh = _lengths(w)
    best = at_slo.cheapest(points, "usd_per_m")
    doc: dict[str, Any] = {"levels": [p["concurrency"] for p in points], "basis": price.basis}
    if best is None:
        ttft = (tw.ttft_s(fresh) + tw.tpot_s(1, i, o, fresh)) * 1000
        tpot1 = tw.tpot_s(1, i, o, fresh) * 1000
        limit, ttft_limit = _tpot_limit(slo), _limit(slo, "ttft")
        why = (
            f"TTFT {ttft:.0f} ms alone exceeds the SLO's {ttft_limit:g} ms"
            if ttft_limit and ttft > ttft_limit
            else f"TPOT {tpot1:.1f} ms at concurrency 1 exceeds {limit:g} ms"
            if limit and tpot1 > limit
            else "no load level the plan asks for meets it"
        )
        return doc | {"meets": False, "reason": why}
    doc |= {
        "meets": True,
        "concurrency": best["concurrency"],
        "tpot_ms": best["tpot_ms"],
        "interactivity": best["interactivity"],
        "tokens_s_per_gpu": best["tokens_s_per_gpu"],
        "usd_per_mtok": best["usd_per_m"],
        "usd_per_mtok_band": best["usd_per_m_band"],
    }
    limit = _tpot_limit(slo)
    lo, hi = 1, tw.max_concurrency(i, o)
    while limit and lo < hi:  # the highest concurrency whose predicted TPOT meets the SLO
        mid = (lo + hi + 1) // 2
        if tw.tpot_s(mid, i, o, fresh) * 1000 <= limit:
            lo = mid
        else:
            hi = mid - 1
    top = lo if limit else hi
    if top > max(doc["levels"]):
        p = _point(tw, w, top, tw.band_log, price, slo)
        if p["meets_slo"] and p["usd_per_m"] < best["usd_per_m"]:
            doc["extrapolated"] = {k: p[k] for k in ("concurrency", "tokens_s_per_gpu", "usd_per_m", "usd_per_m_band")}
    return doc


def _workload(tw: TargetTwin, w: Workload, plan: Plan, t: Target) -> dict[str, Any]:
    out: dict[str, Any] = {"workload": w.name}
    if w.kind == "sessions" or w.load in ("trace", "sla"):
        out["points"] = []
        out["note"] = f"{'sessions' if w.kind == 'sessions' else w.load} workload: priced as run time only"
        return out
    price = Price(t.usd_per_hour, plan.pricing.rank_by)
    if w.load == "rate":
        out["points"] = [
            {"rate": r, **_point(tw, w, _rate_concurrency(tw, w, r), tw.band_log, price, plan.slo)} for r in w.rates
        ]
    else:
        out["points"] = [_point(tw, w, c, tw.band_log, price, plan.slo) for c in w.levels()]
    out["at_slo"] = _at_slo(tw, w, plan.slo, price, out["points"])
    return out


def _rank(targets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per workload: calibrated targets meeting the SLO by cost per M tokens; pairs whose bands overlap."""
    by_w: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for t in targets:
        for w in t.get("workloads", []):
            s = w.get("at_slo") or {}
            if s.get("meets"):
                by_w.setdefault(w["workload"], []).append((t["target"], s))
    alone = {t["target"] for t in targets if t.get("cell_rows", 2) < 2}
    out = []
    for name, rows in by_w.items():
        rows.sort(key=lambda x: x[1]["usd_per_mtok"])
        pairs = [(a, sa, b, sb) for k, (a, sa) in enumerate(rows) for b, sb in rows[k + 1 :]]
        within = [(a, b) for a, sa, b, sb in pairs if sa["usd_per_mtok_band"][1] >= sb["usd_per_mtok_band"][0]]
        # apart, but a side rests on the only published row of its kind (or none): no basis to separate them
        no_basis = [(a, b) for a, _, b, _ in pairs if (a, b) not in within and {a, b} & alone]
        out.append(
            {
                "workload": name,
                "order": [r[0] for r in rows],
                "unresolved_pairs": [*within, *no_basis],
                "no_basis_pairs": no_basis,
            }
        )
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
                "band_kind": tw.band_kind,
                # published setups of its GPU x engine x precision at the scenario it is read at (score.cell)
                "cell_rows": score.cell_rows(
                    holdout.setups(),
                    tw.gpu,
                    engine_family(t.stack),
                    "fp4" if t.quantization.endswith("fp4") else t.quantization,
                    PLAN_SCENARIO,
                ),
                "workloads": [_workload(tw, w, plan, t) for w in plan.workloads],
            }
        targets.append(doc)
    return {
        "plan": plan.name,
        "source": calibration.source_line(),
        "basis": "input+output" if plan.pricing.rank_by == "total" else "output",
        "targets": targets,
        "ranking": _rank(targets),
    }


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
            f"band +-{t['band_pct']}% ({t['band_kind']}, measured on hold-outs)",
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
                    f"    {load}: {p['tokens_s_per_gpu']:g} output tok/s per GPU ({lo:g}-{hi:g}) "
                    f"at {p['interactivity']:g} output tok/s per user, TPOT {p['tpot_ms']:g} ms, "
                    f"TTFT {p['ttft_ms']:g} ms"
                    + (f", {p['usd_per_m']:g} USD per M {doc['basis']} tokens" if "usd_per_m" in p else "")
                    + ("" if "meets_slo" not in p else ", meets the SLO" if p["meets_slo"] else ", misses the SLO")
                    + (" (KV-bound: requests wait)" if p["kv_bound"] else "")
                )
            s = w.get("at_slo")
            if not s:
                continue
            levels = ", ".join(f"{c:g}" for c in s["levels"])
            if s["meets"]:
                lo, hi = s["usd_per_mtok_band"]
                lines.append(
                    f"    at the SLO (the cheapest of the plan's levels {levels} that meets it, as the report picks): "
                    f"c={s['concurrency']:g}, {s['tokens_s_per_gpu']:g} output tok/s per GPU at {s['interactivity']:g} "
                    f"tok/s per user, {s['usd_per_mtok']:g} USD per M {doc['basis']} tokens ({lo:g}-{hi:g})"
                )
            else:
                lines.append(f"    at the SLO: not met at the plan's levels {levels} ({s['reason']})")
            if x := s.get("extrapolated"):
                lo, hi = x["usd_per_m_band"]
                lines.append(
                    f"    EXTRAPOLATED beyond the plan's levels (this plan does not measure it): "
                    f"c={x['concurrency']:g} per replica would still meet the SLO at {x['tokens_s_per_gpu']:g} "
                    "output tok/s per GPU, "
                    f"{x['usd_per_m']:g} USD per M {doc['basis']} tokens ({lo:g}-{hi:g})"
                )
    for r in doc["ranking"]:
        no_basis = set(r.get("no_basis_pairs", []))
        unsure = ", ".join(f"{a} ~ {b}" for a, b in r["unresolved_pairs"] if (a, b) not in no_basis) or "none"
        line = f"ranking {r['workload']} (cost at the SLO): {' < '.join(r['order'])}; within the band: {unsure}"
        if no_basis:
            line += "; no basis to separate (a side rests on the only published row of its kind): " + ", ".join(
                f"{a} ~ {b}" for a, b in r["no_basis_pairs"]
            )
        lines.append(line)
    return "\n".join(lines)
