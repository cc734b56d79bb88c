"""The client watching itself: event-loop lag and CPU during a point, and self-calibration.

A point is marked ``client_bound`` when the client, not the server, may have set the pace: its
process used most of a core, or its event loop woke late (every late wake-up is a timestamp taken
late) or stalled once for longer than STALL_BOUND_MS (``client_stalled``), or open-loop sends left
after their scheduled time.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.bench.runtime import gc_paused

CPU_BOUND = 0.90  # share of one core
LAG_BOUND_MS = 5.0  # p99 event-loop lag
SEND_LAG_BOUND_MS = 10.0
# one event-loop stall longer than this marks the point client_stalled (and client_bound): at
# 1,000 requests/s it holds back ~20 sends and every read stamped in Python in that window
STALL_BOUND_MS = 20.0


class LoopMonitor:
    """Samples event-loop lag every ``period`` s and the process's CPU share while a point runs.

    Besides the lag percentiles it keeps the longest interval between two of its wake-ups
    (``stall_max``): a callback that blocks the loop for S seconds shows as at least S there,
    however rare, where a percentile over thousands of samples would hide it. Cyclic garbage
    collection is paused over the same window (``runtime.gc_paused``), so the collection of the
    point's objects runs after the figures are taken, not inside the point.
    """

    def __init__(self, period: float = 0.005):
        self.period = period
        self.lags: list[float] = []
        self.stall_max = 0.0
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        while True:
            t = self._since = time.perf_counter()
            await asyncio.sleep(self.period)
            woke = time.perf_counter() - t  # >= the length of any callback run while asleep
            self.stall_max = max(self.stall_max, woke)
            self.lags.append(woke - self.period)

    def __enter__(self) -> "LoopMonitor":
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()
        self._since = self.wall0
        self._gc = gc_paused()
        self._gc.__enter__()
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc) -> None:
        if self._task:
            self._task.cancel()
        self.stall_max = max(self.stall_max, time.perf_counter() - self._since)  # a stall just before the end
        self.cpu = time.process_time() - self.cpu0
        self.wall = time.perf_counter() - self.wall0
        self._gc.__exit__(None, None, None)

    def figures(self, send_lags_s: list[float] | None = None, workers: int = 1) -> dict[str, Any]:
        lag_p99 = float(np.percentile(np.maximum(self.lags, 0), 99)) * 1e3 if self.lags else 0.0
        cpu = self.cpu / self.wall if self.wall > 0 else 0.0
        from bakeoff.bench.loadgen import send_lag_figures  # noqa: PLC0415  (loadgen imports the client)

        send = send_lag_figures(send_lags_s or [])
        return {
            **client_verdict(
                cpu * 100, lag_p99, send["send_lag_ms_p99"], workers, loop_stall_ms_max=self.stall_max * 1e3
            ),
            "send_lag_ms_p50": send["send_lag_ms_p50"],
            "send_lag_ms_max": send["send_lag_ms_max"],
        }


def client_verdict(
    cpu_pct: float,
    loop_lag_ms_p99: float,
    send_lag_ms_p99: float | None,
    workers: int = 1,
    loop_stall_ms_max: float | None = None,
) -> dict[str, Any]:
    stalled = loop_stall_ms_max is not None and loop_stall_ms_max > STALL_BOUND_MS
    bound = (
        cpu_pct / max(1, workers) >= CPU_BOUND * 100
        or loop_lag_ms_p99 > LAG_BOUND_MS
        or stalled
        or (send_lag_ms_p99 is not None and send_lag_ms_p99 > SEND_LAG_BOUND_MS)
    )
    return {
        "client_cpu_pct": cpu_pct,
        "loop_lag_ms_p99": loop_lag_ms_p99,
        "loop_stall_ms_max": loop_stall_ms_max,
        "send_lag_ms_p99": send_lag_ms_p99,
        "client_stalled": bool(stalled),
        "client_bound": bool(bound),
    }


# --- the scripted server as a subprocess ----------------------------------------------------------
class ScriptedServerProcess:
    """Starts ``python -m bakeoff.bench.scripted_server`` on a free loopback port; kills it on exit."""

    def __init__(self, script: dict[str, Any], cpu: int | None = None, served_model: str = "scripted"):
        self.cfg = {"served_model": served_model, "scripted": script}
        self.cpu = cpu
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None

    def __enter__(self) -> "ScriptedServerProcess":
        self._dir = tempfile.TemporaryDirectory(prefix="bakeoff-scripted-")
        d = Path(self._dir.name)
        (d / "config.json").write_text(json.dumps(self.cfg))
        cmd = [
            sys.executable,
            "-m",
            "bakeoff.bench.scripted_server",
            "--config",
            str(d / "config.json"),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--port-file",
            str(d / "port"),
        ]
        if self.cpu is not None:
            cmd += ["--cpu", str(self.cpu)]
        self.proc = subprocess.Popen(cmd, start_new_session=True)
        deadline = time.monotonic() + 20
        while not (d / "port").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError("scripted server did not start (see its stderr above)")
            time.sleep(0.02)
        self.port = int((d / "port").read_text())
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._dir.cleanup()


def server_cpu() -> int | None:
    """A core for the scripted server away from the client: a child inherits the client's affinity,
    and a server sharing the client's one core would be measured as the client's own error. The
    highest usable CPU outside the client's set, else the highest of its set; None on one core."""
    try:
        mine = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return None
    try:
        usable = os.sched_getaffinity(1) | mine
    except OSError:
        usable = set(range(os.cpu_count() or 1))
    others = sorted(usable - mine)
    if others:
        return others[-1]
    return max(mine) if len(mine) > 1 else None


def calibrate(
    concurrency: int = 16, requests: int = 64, ttft_ms: float = 50.0, itl_ms: float = 5.0, output_tokens: int = 32
) -> dict[str, Any]:
    """Measure the client against the scripted server on this machine (known TTFT/ITL): its own
    error on TTFT and TPOT, recorded with a target's results so every figure carries its ruler."""
    from bakeoff.bench.scripted_server import Script  # noqa: F401  (config shape documented there)
    from bakeoff.bench.runtime import run_async
    from bakeoff.bench.sweep import measure_scripted

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
    ok = [r for r in recs if r.error_kind is None and not r.warmup]
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
