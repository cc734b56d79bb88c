"""The client's own error on this machine: calibration against the scripted reference server.

Before a target's benchmark the client measures itself against ``serving.emulator.scripted`` (known
TTFT and ITL) run as a subprocess on a core away from the client, and the result is stored with the
target's results, so every figure carries its ruler.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from bakeoff.bench.client.prompts import RequestSpec
from bakeoff.bench.client.runtime import run_async
from bakeoff.bench.client.transport import StreamingClient
from bakeoff.bench.load.loadgen import PointId, Sender
from bakeoff.bench.load.point import measure
from bakeoff.bench.metrics.records import RequestRecord
from bakeoff.plan.workload import Workload
from bakeoff.serving.emulator.scripted import ScriptedServerProcess, server_cpu


def calibrate(
    concurrency: int = 16, requests: int = 64, ttft_ms: float = 50.0, itl_ms: float = 5.0, output_tokens: int = 32
) -> dict[str, Any]:
    """Measure the client against the scripted server on this machine (known TTFT/ITL): its own
    error on TTFT and TPOT, recorded with a target's results so every figure carries its ruler."""
    script = {"ttft_ms": ttft_ms, "itl_ms": itl_ms, "tokens_per_chunk": 1, "output_tokens": output_tokens}
    cpu = server_cpu()
    try:
        srv = ScriptedServerProcess(script, cpu=cpu).__enter__()
    except RuntimeError:  # that CPU cannot be used here (cpuset): share the client's
        cpu = None
        srv = ScriptedServerProcess(script).__enter__()
    try:
        recs, mon = run_async(measure_scripted(srv.url, concurrency, requests, output_tokens))
    finally:
        srv.__exit__()
    # a completed request against the scripted server carries every timing and its token count
    ok: list[Any] = [r for r in recs if r.error_kind is None and not r.warmup]
    ttft_err = np.array([r.ttft for r in ok]) * 1e3 - ttft_ms
    tpot_err = np.array([(r.e2e - r.ttft) / (r.output_tokens - 1) for r in ok]) * 1e3 - itl_ms
    return {
        "concurrency": concurrency,
        "requests": len(recs),
        "ok": len(ok),
        "truth_ttft_ms": ttft_ms,
        "truth_itl_ms": itl_ms,
        "server_cpu": cpu,
        "client_cpus": sorted(os.sched_getaffinity(0)),
        "ttft_error_ms_mean": float(ttft_err.mean()) if ok else None,
        "ttft_error_ms_p99": float(np.percentile(ttft_err, 99)) if ok else None,
        "tpot_error_ms_mean": float(tpot_err.mean()) if ok else None,
        "tpot_error_ms_p99": float(np.percentile(tpot_err, 99)) if ok else None,
        **mon,
    }


def calibration_line(cal: dict[str, Any]) -> str:
    """One line on the client's own error, saying what it was measured against: a scripted local
    server at one concurrency, not the endpoint or the levels being measured."""
    if cal.get("ttft_error_ms_mean") is None:
        return f"client self-calibration: not measured ({cal.get('error', 'no successful request')})"
    where = f"on CPU {cal['server_cpu']}" if cal.get("server_cpu") is not None else "sharing the client's CPUs"
    return (
        f"client self-calibration (the client's own timing error against a local scripted server {where}, "
        f"C={cal['concurrency']}, {cal['ok']} requests; not a measurement of the endpoint): "
        f"TTFT {cal['ttft_error_ms_mean']:+.2f} ms mean, {cal['ttft_error_ms_p99']:+.2f} ms p99; "
        f"TPOT {cal['tpot_error_ms_mean']:+.3f} ms mean"
    )


async def measure_scripted(
    url: str, concurrency: int, requests: int, output_tokens: int, input_len: int = 8
) -> tuple[list[RequestRecord], dict[str, Any]]:
    """A closed-loop point against a scripted server, through the one measurement loop: no files written."""
    w = Workload(
        name="calibration",
        input_len=input_len,
        output_len=output_tokens,
        concurrency=[concurrency],
        requests_per_point=requests,
        warmup_requests=concurrency,
    )
    client = StreamingClient(url, timeout_s=60)
    try:
        specs = [RequestSpec(input_len, output_tokens, prompt=" ".join(["calibrate"] * input_len))] * (
            requests + concurrency
        )
        pid = PointId("calibration", "scripted", w.name, concurrency, 0)
        sender = Sender(client, w, "scripted", pid, specs, concurrency, 60)
        return await measure(sender, warm=concurrency, concurrency=concurrency)
    finally:
        await client.close()
