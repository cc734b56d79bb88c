"""Synthetic, internally consistent runs written through the real results store, for quality tests.

Requests follow the RequestRecord contract (seconds); points summarise them with the POINT_COLUMNS
definitions (ms). Tests plant one defect at a time into otherwise clean data.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bakeoff.bench.metrics.records import RequestRecord
from bakeoff.bench.metrics.summary import POINT_COLUMNS
from bakeoff.plan import plan_from_dict
from bakeoff.store import save_point

RUN_ID = "manual__2026-11-29T00:00:00+00:00"
OUT_LEN = 16


def make_plan(**quality):
    return plan_from_dict(
        {
            "name": "quality-test",
            "budget_usd": 10,
            "targets": [
                {
                    "name": "mi355x-vllm",
                    "provider": "local",
                    "instance_type": "BM.GPU.MI355X.8",
                    "model": "llama-3.1-70b",
                    "tensor_parallel": 8,
                },
                {
                    "name": "b200-vllm",
                    "provider": "local",
                    "instance_type": "BM.GPU.B200.8",
                    "model": "llama-3.1-70b",
                    "tensor_parallel": 8,
                },
            ],
            "workloads": [
                {
                    "name": "w",
                    "input_len": 64,
                    "output_len": OUT_LEN,
                    "concurrency": [1, 2],
                    "requests_per_point": 8,
                    "warmup_requests": 0,
                    "repeats": 2,
                }
            ],
            "quality": quality,
        }
    )


def make_requests(target: str, concurrency: int, repeat: int, n: int = 8, speed: float = 1.0) -> pd.DataFrame:
    rows = []
    for i in range(n):
        ttft = (0.050 + 0.001 * i) / speed
        itl = 0.010 / speed
        chunks = [ttft + k * itl for k in range(OUT_LEN)]
        rows.append(
            RequestRecord(
                run_id=RUN_ID,
                target=target,
                workload="w",
                concurrency=concurrency,
                repeat=repeat,
                index=i,
                warmup=False,
                send_time=1.8e9 + i,
                start_offset=0.1 * i,
                ttft=ttft,
                ttfa=ttft,
                e2e=chunks[-1],
                chunk_offsets=chunks,
                prompt_tokens=64,
                output_tokens=OUT_LEN,
                output_tokens_client=OUT_LEN,
                tokens_source="usage",
                requested_input_len=64,
                requested_output_len=OUT_LEN,
                ignore_eos=True,
                finish_reason="length",
                status_code=200,
            ).to_row()
        )
    return pd.DataFrame(rows)


def summarise(req: pd.DataFrame, gpus: int = 8) -> dict:
    """A point row from requests (enough of the benchmark definitions for validation to check)."""
    ok = req[req["error_kind"].isna()]
    first = req.iloc[0]
    row = {c: None for c in POINT_COLUMNS}
    row.update(
        run_id=first["run_id"],
        target=first["target"],
        workload=first["workload"],
        concurrency=int(first["concurrency"]),
        repeat=int(first["repeat"]),
        gpus=gpus,
        emulated=True,
        completed=len(ok),
        failed=len(req) - len(ok),
        error_rate=(len(req) - len(ok)) / len(req),
    )
    duration = float((req["start_offset"] + req["e2e"].fillna(0)).max())
    row["duration_s"] = duration
    out_tokens = ok["output_tokens"].sum()
    row.update(
        request_throughput=len(ok) / duration,
        output_tps=out_tokens / duration,
        input_tps=ok["prompt_tokens"].sum() / duration,
    )
    row["total_tps"] = row["input_tps"] + row["output_tps"]
    row["output_tps_per_gpu"], row["total_tps_per_gpu"] = row["output_tps"] / gpus, row["total_tps"] / gpus
    tpot = (ok["e2e"] - ok["ttft"]) / (ok["output_tokens"] - 1)
    itl = np.concatenate([np.diff(c) for c in ok["chunk_offsets"]]) if len(ok) else np.array([])
    for name, vals in (("ttft", ok["ttft"]), ("tpot", tpot), ("e2e", ok["e2e"]), ("itl", itl)):
        ms = np.asarray(vals, dtype=float) * 1000
        row[f"{name}_ms_mean"] = float(ms.mean())
        for p in (50, 90, 99):
            row[f"{name}_ms_p{p}"] = float(np.percentile(ms, p))
    row.update(
        interactivity=1000 / row["tpot_ms_p50"],
        goodput_rps=row["request_throughput"],
        good_fraction=1.0,
        meets_slo=True,
    )
    return row


def write_run(run_dir, plan, mutate=None, skip=()):
    """Write every planned point of every target; mutate(target, c, r, requests) may plant a defect
    and return (requests, point_row_or_None); skip lists (target, c, r) never written."""
    for i, t in enumerate(plan.targets):
        for w in plan.workloads:
            for c in w.concurrency:
                for r in range(w.repeats):
                    if (t.slug, c, r) in skip:
                        continue
                    req = make_requests(t.slug, c, r, n=w.requests_at(c), speed=1.0 + 0.2 * i)
                    point = None
                    if mutate:
                        req, point = mutate(t.slug, c, r, req)
                    save_point(run_dir / f"target={t.slug}", w.name, c, r, req, point or summarise(req))
    return run_dir
