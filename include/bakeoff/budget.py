"""Budget guard: refuse a run whose estimated spend exceeds the plan's cap, before anything starts.

estimate per target = node price x (boot + model load + planned benchmark time) x (1 + margin).
The same per-target hours arm each node's kill switch (the boot script's shutdown timer), so a node
can never bill much past what the guard approved, even if Airflow dies.
Emulated (local) targets are priced as the hardware they stand for, so a demo shows what the real
run would cost, but they spend nothing. After termination, ``record_measured_cost`` stores what the
evaluation itself cost: launch-to-termination time x price, per target.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

# Hours from the create call until the node runs the boot script (provider-side provisioning).
BOOT_H = {"local": 0.0, "static": 0.0, "aws": 0.25, "digitalocean": 0.25, "vultr": 0.5, "oci": 0.5}
DEFAULT_BOOT_H = 0.25
# Model load: image pull + weight download + engine start (graph capture / compilation).
IMAGE_PULL_H = 0.1
WEIGHTS_GBPS = 0.5            # sustained hub download + load, GB/s (pessimistic for a fresh node)
ENGINE_START_H = 0.15
MARGIN = 0.25
SPENDING = ("aws", "vultr", "digitalocean", "oci")


class BudgetExceeded(RuntimeError):
    """The plan would cost more than its cap; the message carries the breakdown."""


TOKEN_S = 0.05  # pessimistic decode time per output token


def _point_s(w, *, concurrency: float | None = None, rate: float | None = None) -> float:
    """One point's planned duration: closed loop = waves of requests x decode time; open loop =
    arrivals at the rate plus the last request's decode. max_point_s caps the sending."""
    drain = w.output_len * TOKEN_S
    if rate:
        n = w.requests_per_point or max(10, int(30 * rate))
        send = n / rate
    else:
        c = int(concurrency or 1)
        send = (w.requests_at(c) + w.warmup_at(c)) / c * drain
    if w.max_point_s:
        send = min(send, w.max_point_s)
    return send + (drain if rate else 0.0)


def _workload_s(w) -> float:
    if w.load == "rate":
        return sum(_point_s(w, rate=r) for r in w.rates)
    if w.load == "trace":
        from bakeoff.bench.workloads import trace_specs  # noqa: PLC0415
        offsets, _ = trace_specs(w)
        return float(offsets[-1]) + w.output_len * TOKEN_S
    if w.load == "sla":  # every probe may run, each no longer than one at the highest load
        top = {"rate": {"rate": w.sla.max}}.get(w.sla.over, {"concurrency": w.sla.max})
        return w.sla.max_probes * _point_s(w, **top)
    return sum(_point_s(w, concurrency=c) for c in w.levels())


def bench_hours(plan, target) -> float:
    """Planned benchmark time over every workload and repeat."""
    return sum(_workload_s(w) * w.repeats for w in plan.workloads) / 3600


def load_hours(target) -> float:
    """Image pull, weights download and engine start; nothing for a node that already serves."""
    if target.provider in ("local", "static"):
        return 0.0
    from bakeoff.plan.target import QUANT_BYTES  # noqa: PLC0415
    weights_gb = target.model_spec.params_b * QUANT_BYTES[target.quantization]
    return IMAGE_PULL_H + weights_gb / WEIGHTS_GBPS / 3600 + ENGINE_START_H


def target_hours(plan, target) -> float:
    """Budgeted node hours: (boot + model load + benchmark) x (1 + margin)."""
    boot = BOOT_H.get(target.provider, DEFAULT_BOOT_H)
    return (boot + load_hours(target) + bench_hours(plan, target)) * (1 + MARGIN)


def kill_switch_s(plan, target) -> float:
    """Seconds after boot at which the node powers itself off: the budgeted hours, capped by max_instance_hours."""
    return min(target_hours(plan, target), plan.max_instance_hours) * 3600


def estimate(plan) -> dict[str, Any]:
    rows = []
    for t in plan.targets:
        hours = target_hours(plan, t)
        rows.append({"target": t.name, "provider": t.provider, "usd_per_hour": t.usd_per_hour,
                     "boot_h": round(BOOT_H.get(t.provider, DEFAULT_BOOT_H), 3), "load_h": round(load_hours(t), 3),
                     "bench_h": round(bench_hours(plan, t), 3), "hours": round(hours, 3),
                     "usd": round(hours * t.usd_per_hour, 2), "spends": t.provider in SPENDING,
                     "kill_switch_s": round(kill_switch_s(plan, t))})
    total = round(sum(r["usd"] for r in rows), 2)
    return {"cap_usd": plan.budget_usd, "estimate_usd": total, "margin": MARGIN, "targets": rows}


def check(plan) -> dict[str, Any]:
    """The estimate, or BudgetExceeded with the breakdown. Called before any API call that costs money."""
    est = estimate(plan)
    lines = "\n".join(f"  {r['target']}: ({r['boot_h']} h boot + {r['load_h']} h model load + {r['bench_h']} h benchmark)"
                      f" x {1 + MARGIN} = {r['hours']} h x {r['usd_per_hour']} USD/h = {r['usd']} USD" for r in est["targets"])
    if est["estimate_usd"] > plan.budget_usd:
        raise BudgetExceeded(
            f"budget_usd: estimated spend {est['estimate_usd']} USD exceeds the cap of {plan.budget_usd} USD:\n{lines}\n"
            "Raise budget_usd, or drop targets, load levels or requests.")
    too_long = [r for r in est["targets"] if r["spends"] and r["hours"] > plan.max_instance_hours]
    if too_long:
        names = ", ".join(f"{r['target']} ({r['hours']} h)" for r in too_long)
        raise BudgetExceeded(f"max_instance_hours: {names} would need longer than {plan.max_instance_hours} h, so the "
                             f"kill switch would stop it mid-run:\n{lines}\nRaise max_instance_hours or shorten the workload.")
    return est


def record_measured_cost(run_dir: str | Path) -> dict[str, Any]:
    """After termination: store what the evaluation itself cost (launch to termination x price, per
    target; the arithmetic is cost.evaluation_cost) as evaluation_cost.json and in run.json, so it
    is on record even when a later step (cost, report) fails."""
    from bakeoff import pipeline, store  # noqa: PLC0415
    from bakeoff.cost import evaluation_cost  # noqa: PLC0415
    rdir = Path(run_dir)
    df = evaluation_cost(pipeline.run_plan(rdir), rdir)
    rows = [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()} for r in df.to_dict("records")]
    spent = round(sum(r["usd"] or 0.0 for r in rows if r["spends"]), 2)
    doc = {"usd": spent, "targets": rows, "at": time.time()}
    store.write_json(rdir / "evaluation_cost.json", doc)
    store.update_run(rdir, evaluation_cost={"usd": spent})
    return doc
