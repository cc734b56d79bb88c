"""The client watching itself while a point runs: event-loop lag and stalls, CPU, open-loop send lag.

A point is marked ``client_bound`` when the client, not the server, may have set the pace: its
process used most of a core, or its event loop woke late (every late wake-up is a timestamp taken
late) or stalled once for longer than STALL_BOUND_MS (``client_stalled``), or open-loop sends left
after their scheduled time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

import numpy as np

from bakeoff.bench.client.runtime import gc_paused

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
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            t = self._since = time.perf_counter()
            await asyncio.sleep(self.period)
            woke = time.perf_counter() - t  # >= the length of any callback run while asleep
            self.stall_max = max(self.stall_max, woke)
            self.lags.append(woke - self.period)

    def __enter__(self) -> LoopMonitor:
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()
        self._since = self.wall0
        self._gc = gc_paused()
        self._gc.__enter__()
        self._task = asyncio.get_running_loop().create_task(self._run())  # held here, cancelled on exit
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task:
            self._task.cancel()
        self.stall_max = max(self.stall_max, time.perf_counter() - self._since)  # a stall just before the end
        self.cpu = time.process_time() - self.cpu0
        self.wall = time.perf_counter() - self.wall0
        self._gc.__exit__(None, None, None)

    def figures(self, send_lags_s: list[float] | None = None, workers: int = 1) -> dict[str, Any]:
        lag_p99 = float(np.percentile(np.maximum(self.lags, 0), 99)) * 1e3 if self.lags else 0.0
        cpu = self.cpu / self.wall if self.wall > 0 else 0.0
        send = send_lag_figures(send_lags_s or [])
        return {
            **client_verdict(
                cpu * 100, lag_p99, send["send_lag_ms_p99"], workers, loop_stall_ms_max=self.stall_max * 1e3
            ),
            "send_lag_ms_p50": send["send_lag_ms_p50"],
            "send_lag_ms_max": send["send_lag_ms_max"],
        }


def send_lag_figures(lags_s: Iterable[float | None]) -> dict[str, float | None]:
    """p50/p99/max in ms of open-loop lateness (actual send - scheduled send, seconds); the max is
    kept because a stall hits a few sends hard and hides below every percentile."""
    a = np.asarray([x for x in lags_s if x is not None], dtype=float) * 1e3
    if a.size == 0:
        return {"send_lag_ms_p50": None, "send_lag_ms_p99": None, "send_lag_ms_max": None}
    p50, p99 = np.percentile(a, [50, 99])
    return {"send_lag_ms_p50": float(p50), "send_lag_ms_p99": float(p99), "send_lag_ms_max": float(a.max())}


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


def merge_figures(figs: list[dict[str, Any]], send_lags_s: Iterable[float | None]) -> dict[str, Any]:
    """One point's figures from its worker processes' own: CPU summed, the worst lag and stall,
    send lag over the whole point (not per worker)."""
    return {
        "client_cpu_pct": sum(f["client_cpu_pct"] for f in figs),
        "loop_lag_ms_p99": max(f["loop_lag_ms_p99"] for f in figs),
        "loop_stall_ms_max": max(f["loop_stall_ms_max"] for f in figs),
        "client_stalled": any(f["client_stalled"] for f in figs),
        **send_lag_figures(send_lags_s),
        "client_bound": any(f["client_bound"] for f in figs),
        "workers": len(figs),
    }
