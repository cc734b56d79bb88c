"""How many client cores a workload's top load needs, from what one client core was measured to carry.

A benchmark client that cannot keep up sets the pace itself (late open-loop sends, throughput capped
by parsing), so the plan check states the client cores each workload needs and warns when its
``workers`` are fewer. The per-core figures are measurements, not guesses; re-measure them with
``python benchmarks/client_fidelity.py --only open`` and ``--only workers`` when the client changes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from bakeoff.bench.client.workloads import trace_specs

if TYPE_CHECKING:
    import pandas as pd

    from bakeoff.plan import Plan
    from bakeoff.plan.workload import SlaSearch, Workload

# Open-loop sends one client core kept on schedule: 2,000 requests/s at 94% of a core, send lag p99
# 0.17 ms (64 in / 16 out, scripted server on its own core; measured 2026-11-30, `--only open`).
REQUESTS_PER_CORE_S = 2_000.0
# Output tokens/s one client process ingested on one core: 174,853 tokens per client CPU-second,
# closed loop against the scripted server on its own core (C=64, 256 tokens per request, one token
# per SSE chunk; 2 processes: 1.90x; measured 2026-11-30, `--only workers`).
TOKENS_PER_CORE_S = 175_000.0
# A core is planned at most this busy: at 90% (monitor.CPU_BOUND) a point is flagged client_bound.
HEADROOM = 0.8
# Closed-loop loads have no rate of their own: each sequence is assumed to stream at most this fast
# (a small model on a current GPU at low batch), so C sequences need up to C x this tokens/s.
FAST_STREAM_TOKENS_S = 250.0


def _sla(w: Workload) -> SlaSearch:
    if w.sla is None:
        raise ValueError(f"workload {w.name}: load sla needs an sla block")
    return w.sla


def top_load(w: Workload) -> tuple[float, float] | None:
    """(requests/s, output tokens/s) the client must carry at the workload's highest load; None
    when the run decides the load (a trace that cannot be read here)."""
    lo, hi = w.length_bounds(w.output_len)
    mean_out = (lo + hi) / 2
    over = _sla(w).over if w.load == "sla" else ("rate" if w.load == "rate" else "concurrency")
    if w.load == "trace":
        try:
            offsets, specs = trace_specs(w)
        except (OSError, ValueError):
            return None
        span = float(offsets[-1]) if len(offsets) > 1 else 0.0
        rate = (len(offsets) - 1) / span if span > 0 else float(len(offsets))
        return rate, rate * sum(s.output_len for s in specs) / len(specs)
    if over == "rate":
        rate = max(w.rates) if w.load == "rate" else _sla(w).max
        return rate, rate * mean_out
    c = max(w.levels()) if w.load == "concurrency" else _sla(w).max
    tokens_s = c * FAST_STREAM_TOKENS_S
    return tokens_s / mean_out, tokens_s


def cores_needed(w: Workload) -> int | None:
    load = top_load(w)
    if load is None:
        return None
    req, tok = load
    return max(1, math.ceil(max(req / REQUESTS_PER_CORE_S, tok / TOKENS_PER_CORE_S) / HEADROOM))


def client_cores(plan: Plan) -> list[dict[str, Any]]:
    """Per workload: its top load, the client cores it needs and the worker processes it has."""
    out = []
    for i, w in enumerate(plan.workloads):
        load = top_load(w)
        out.append(
            {
                "index": i,
                "workload": w.name,
                "workers": max(w.workers, w.client_fleet),  # client processes, on one host or a fleet
                "cores_needed": cores_needed(w),
                "requests_s": load[0] if load else None,
                "tokens_s": load[1] if load else None,
            }
        )
    return out


def line(row: dict[str, Any]) -> str:
    """What the plan states about the client's cores for one workload."""
    if row["cores_needed"] is None:
        return f"client for {row['workload']}: top load set by the run; {row['workers']} worker process(es)"
    return (
        f"client for {row['workload']}: top load ~{row['requests_s']:,.0f} requests/s, "
        f"~{row['tokens_s']:,.0f} output tokens/s needs {row['cores_needed']} core(s); "
        f"{row['workers']} worker process(es)"
    )


def warnings(plan: Plan) -> list[str]:
    """One warning per workload whose top load needs more client cores than its worker processes."""
    out = []
    for r in client_cores(plan):
        n = r["cores_needed"]
        if n is not None and n > r["workers"]:
            out.append(
                f"workloads[{r['index']}].workers: {r['workload']}'s top load (~{r['requests_s']:,.0f} "
                f"requests/s, ~{r['tokens_s']:,.0f} output tokens/s) needs about {n} client cores, and "
                f"{r['workers']} worker process(es) are configured (one core carries ~"
                f"{REQUESTS_PER_CORE_S:,.0f} requests/s or ~{TOKENS_PER_CORE_S:,.0f} tokens/s at "
                f"{HEADROOM:.0%} busy); set workers: {n} and run the benchmark task where {n} cores are "
                "free, or the client, not the server, may set the pace"
            )
    return out


def sizing_check(plan: Plan, points: pd.DataFrame) -> list[str]:
    """Per workload with points: the plan check's client sizing against what the loop monitor saw,
    saying which of the two was wrong when they disagree (nothing when they agree the client kept up)."""
    if points.empty or "client_bound" not in points:
        return []
    out = []
    for r in client_cores(plan):
        pts = points[points["workload"] == r["workload"]]
        if pts.empty:
            continue
        bound = pts[pts["client_bound"].astype("boolean").fillna(False).astype(bool)]
        need, have = r["cores_needed"], r["workers"]
        seen = f"{len(bound)} of {len(pts)} points"
        levels = ", ".join(f"c={c}" for c in sorted(bound["concurrency"].unique()))
        if need is None:
            if len(bound):
                out.append(
                    f"{r['workload']}: the client set the pace at {seen} ({levels}); plan check could not size "
                    f"this load ahead of the run; give it more client processes (workers or client_fleet)"
                )
        elif need <= have and len(bound):
            out.append(
                f"{r['workload']}: plan check sized the client at {need} core(s) for its top load and "
                f"{have} process(es) were configured, yet the client set the pace at {seen} ({levels}): the "
                "sizing was wrong for this client machine (slower or busier than the per-core figures it "
                "assumes, or sharing its cores with the server); measure with more client processes "
                "(workers or client_fleet) or a bigger client machine"
            )
        elif need > have and len(bound):
            out.append(
                f"{r['workload']}: as plan check warned ({need} client core(s) needed, {have} process(es) "
                f"configured), the client set the pace at {seen} ({levels}); set workers: {need} or client_fleet"
            )
        elif need > have:
            out.append(
                f"{r['workload']}: plan check asked for {need} client core(s) and {have} process(es) were "
                f"configured, yet the server set the pace at all {len(pts)} points: the sizing was pessimistic "
                "for this run (its closed-loop streams ran slower than it assumes)"
            )
    return out
