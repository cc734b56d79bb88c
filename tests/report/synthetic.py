"""Synthetic stored runs for cost, report and UI tests: point and request tables in the
POINT_COLUMNS / RequestRecord schema, written through bakeoff.store like a real run, with a
latency model simple enough that tests can compute expected figures by hand."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

from bakeoff import store
from bakeoff.bench.metrics.summary import POINT_COLUMNS
from bakeoff.plan import Plan, plan_from_dict

XSS = "<script>alert(1)</script>"  # a target name every renderer must show as text


def plan_dict(
    names=("mi355x-vllm", "b200-vllm"), *, concurrency=(1, 4, 16), repeats=1, slo=None, utilisation=1.0, notes=""
) -> dict:
    types = ["BM.GPU.MI355X.8", "BM.GPU.B200.8", "BM.GPU.H200.8"]
    return {
        "name": "synthetic",
        "description": "synthetic run for tests",
        "budget_usd": 100,
        "targets": [
            {
                "name": n,
                "provider": "local",
                "instance_type": types[i % len(types)],
                "model": "llama-3.1-70b",
                "tensor_parallel": 8,
                "notes": notes,
            }
            for i, n in enumerate(names)
        ],
        "workloads": [
            {
                "name": "chat-1k-128",
                "input_len": 1024,
                "output_len": 128,
                "concurrency": list(concurrency),
                "requests_per_point": 8,
                "warmup_requests": 0,
                "repeats": repeats,
            }
        ],
        "slo": slo if slo is not None else {"ttft_p99_ms": 500, "tpot_p99_ms": 40},
        "pricing": {"utilisation": utilisation},
    }


def make_plan(**kw) -> Plan:
    return plan_from_dict(plan_dict(**kw))


def point_row(
    plan: Plan,
    target,
    workload,
    c: int,
    repeat: int,
    *,
    tpot_ms: float,
    ttft_ms: float,
    run_id: str,
    emulated: bool = True,
) -> dict:
    """One point: c streams each decoding at 1000/tpot tokens/s; fixed input/output lengths."""
    gpus = target.gpus_used
    req_rate = c / ((ttft_ms + tpot_ms * (workload.output_len - 1)) / 1000)
    out_tps = req_rate * workload.output_len
    in_tps = req_rate * workload.input_len
    slo = plan.slo
    meets = (slo.ttft_p99_ms is None or ttft_ms * 1.5 <= slo.ttft_p99_ms) and (
        slo.tpot_p99_ms is None or tpot_ms * 1.2 <= slo.tpot_p99_ms
    )
    row = {k: None for k in POINT_COLUMNS}
    row.update(
        run_id=run_id,
        target=target.slug,
        workload=workload.name,
        concurrency=c,
        repeat=repeat,
        gpus=gpus,
        emulated=emulated,
        completed=workload.requests_at(c),
        failed=0,
        error_rate=0.0,
        duration_s=30.0,
        request_throughput=req_rate,
        input_tps=in_tps,
        output_tps=out_tps,
        total_tps=in_tps + out_tps,
        output_tps_per_gpu=out_tps / gpus,
        total_tps_per_gpu=(in_tps + out_tps) / gpus,
        ttft_ms_mean=ttft_ms,
        ttft_ms_p50=ttft_ms,
        ttft_ms_p90=ttft_ms * 1.3,
        ttft_ms_p99=ttft_ms * 1.5,
        tpot_ms_mean=tpot_ms,
        tpot_ms_p50=tpot_ms,
        tpot_ms_p90=tpot_ms * 1.1,
        tpot_ms_p99=tpot_ms * 1.2,
        itl_ms_mean=tpot_ms,
        itl_ms_p50=tpot_ms,
        itl_ms_p90=tpot_ms * 1.1,
        itl_ms_p99=tpot_ms * 1.3,
        e2e_ms_mean=ttft_ms + tpot_ms * 127,
        e2e_ms_p50=ttft_ms + tpot_ms * 127,
        e2e_ms_p90=(ttft_ms + tpot_ms * 127) * 1.1,
        e2e_ms_p99=(ttft_ms + tpot_ms * 127) * 1.2,
        interactivity=1000 / tpot_ms,
        goodput_rps=req_rate if meets else 0.0,
        good_fraction=1.0 if meets else 0.0,
        meets_slo=meets,
    )
    return row


def requests_frame(row: dict, n: int, rng: np.random.Generator) -> pd.DataFrame:
    ttft = rng.gamma(8, row["ttft_ms_p50"] / 8000, n)
    tpot = rng.gamma(20, row["tpot_ms_p50"] / 20000, n)
    out = np.full(n, 128)
    return pd.DataFrame(
        {
            "run_id": row["run_id"],
            "target": row["target"],
            "workload": row["workload"],
            "concurrency": row["concurrency"],
            "repeat": row["repeat"],
            "index": np.arange(n),
            "warmup": False,
            "send_time": time.time() + np.arange(n) * 0.1,
            "start_offset": np.arange(n) * 0.1,
            "ttft": ttft,
            "ttfa": ttft,
            "e2e": ttft + tpot * (out - 1),
            "prompt_tokens": 1024,
            "output_tokens": out,
            "output_tokens_client": out,
            "tokens_source": "usage",
            "requested_input_len": 1024,
            "requested_output_len": 128,
            "ignore_eos": True,
            "finish_reason": "length",
            "status_code": 200,
            "error_kind": None,
            "error": None,
        }
    )


def make_run(
    root: Path,
    plan: Plan,
    run_id: str = "manual__2026-11-01T00:00:00+00:00",
    *,
    speed: dict[str, float] | None = None,
    missing=(),
    quarantine=(),
    emulated: bool = True,
    started_at: float | None = None,
    validation: bool = True,
    jitter: float = 0.0,
    seed: int = 0,
    held_hours: dict[str, float] | None = None,
) -> Path:
    """Write a whole run: points (+ requests) per target and level, step records, validation.json.

    speed: target slug -> TPOT at concurrency 1 in ms (default 10, 12, 14 ... by order).
    TPOT grows 5% per extra stream and TTFT 20 ms per stream, so SLOs cut off at known levels.
    """
    rng = np.random.default_rng(seed)
    rdir = store.run_dir(plan.name, run_id, root)
    started = started_at or time.time()
    targets = {}
    for i, t in enumerate(plan.targets):
        base = (speed or {}).get(t.slug, 10.0 + 2 * i)
        entry: dict = {"name": t.name}
        hours = (held_hours or {}).get(t.slug)
        if hours is not None:
            entry["provision"] = {"launched_at": started, "instance_id": f"i-{i}"}
            entry["terminate"] = {"terminated_at": started + hours * 3600}
        targets[t.slug] = entry
        if t.slug in missing:
            continue
        tdir = store.target_dir(plan.name, run_id, t.slug, root)
        for w in plan.workloads:
            for c in w.concurrency:
                for r in range(w.repeats):
                    noise = 1 + jitter * rng.standard_normal()
                    row = point_row(
                        plan,
                        t,
                        w,
                        c,
                        r,
                        tpot_ms=base * (1 + 0.05 * (c - 1)) * noise,
                        ttft_ms=100 + 20 * c,
                        run_id=run_id,
                        emulated=emulated,
                    )
                    store.save_point(tdir, w.name, c, r, requests_frame(row, w.requests_at(c), rng), row)
    store.write_json(rdir / "plan.json", plan.model_dump(mode="json"))
    record_run(rdir, {"plan": plan.name, "run_id": run_id, "started_at": started, "emulated": emulated}, targets)
    if validation:
        store.write_json(
            rdir / "validation.json",
            {
                "passed": not quarantine and not missing,
                "targets": {
                    t.slug: (
                        {"passed": False, "failures": ["ttft <= e2e: 3 of 32 rows fail"]}
                        if t.slug in quarantine
                        else {"passed": False, "failures": ["no results"]}
                        if t.slug in missing
                        else {"passed": True, "failures": []}
                    )
                    for t in plan.targets
                },
            },
        )
    return rdir


def record_run(rdir, start: dict, targets: dict[str, dict]) -> None:
    """The step records a run's steps would write: the start record (target names), then each
    target's steps ({slug: {"name": ..., step: facts}})."""
    store.record(rdir, store.START, {**start, "targets": {s: {"name": e.get("name")} for s, e in targets.items()}})
    for slug, entry in targets.items():
        for step, facts in entry.items():
            if step != "name":
                store.record(rdir, step, facts, slug=slug)


def write_points(
    root: Path,
    plan: Plan,
    rows: list[dict],
    run_id: str = "manual__hand",
    *,
    validation: dict | None = None,
    run_targets: dict | None = None,
) -> Path:
    """Store hand-made point rows (keys: target slug, concurrency, repeat, plus any POINT_COLUMNS
    to set); everything unset takes a neutral default. For arithmetic checked by hand."""
    for r in rows:
        full = {k: None for k in POINT_COLUMNS}
        full.update(
            run_id=run_id,
            workload=plan.workloads[0].name,
            repeat=0,
            gpus=8,
            emulated=True,
            completed=8,
            failed=0,
            error_rate=0.0,
            interactivity=50.0,
            meets_slo=True,
            output_tps_per_gpu=100.0,
            total_tps_per_gpu=1000.0,
        )
        full.update(r)
        tdir = store.target_dir(plan.name, run_id, full["target"], root)
        store.write_frame(
            store.point_file(tdir, "points", full["workload"], full["concurrency"], full["repeat"]),
            pd.DataFrame([full]),
        )
    rdir = store.run_dir(plan.name, run_id, root)
    store.write_json(rdir / "plan.json", plan.model_dump(mode="json"))
    record_run(
        rdir,
        {"plan": plan.name, "run_id": run_id, "started_at": time.time()},
        run_targets or {t.slug: {"name": t.name} for t in plan.targets},
    )
    if validation is not None:
        store.write_json(rdir / "validation.json", validation)
    return rdir
