"""Spread one point over several client processes when one core cannot keep up.

Each worker builds the same request specs (they are deterministic), takes every W-th request and
its share of the concurrency, warms its connections, waits at a barrier for the others and starts
at one shared monotonic instant (CLOCK_MONOTONIC is system-wide on Linux), so the merged records
form one point with one clock.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import time

from bakeoff.bench.records import RequestRecord

_now = time.perf_counter
START_LEAD_S = 0.2
_sync: tuple | None = None        # (barrier, shared start time), inherited by each worker process


def _init(barrier, start) -> None:
    global _sync
    _sync = (barrier, start)


def _agree_start() -> float:
    """Block until every worker is warmed up, then return one start instant for all."""
    barrier, start = _sync
    if barrier.wait() == 0:
        start.value = _now() + START_LEAD_S
    barrier.wait()
    return start.value


def _share(total: int, workers: int, w: int) -> int:
    return total // workers + (1 if w < total % workers else 0)


def _worker(ctx, w: int, n_workers: int, key: int, repeat: int, concurrency, offsets, specs):
    from bakeoff.bench import workloads
    from bakeoff.bench.client import StreamingClient
    from bakeoff.bench.fidelity import LoopMonitor
    from bakeoff.bench.loadgen import PointId, Sender, open_loop
    from bakeoff.bench.runtime import run_async

    wl = ctx.workload
    n_warm, specs = workloads.point_specs(wl, key, repeat, concurrency, offsets, specs, sizer=ctx.sizer,
                                          seed=ctx.prompt_seed)
    mine = [i for i in range(len(specs)) if i % n_workers == w]

    async def go():
        client = StreamingClient(ctx.endpoint.base_url, api_key=ctx.api_key, timeout_s=wl.request_timeout_s,
                                 tls_cert=ctx.endpoint.tls_cert, connection=wl.ttft_connection)
        try:
            sender = Sender(client, wl, ctx.endpoint.model, PointId(ctx.run_id, ctx.target.slug, wl.name, key, repeat),
                            specs, n_warm, wl.request_timeout_s)
            c = _share(concurrency, n_workers, w) if concurrency else None
            await client.warm(max(1, c or (wl.max_concurrency or 64) // n_workers))
            t_start = await asyncio.get_running_loop().run_in_executor(None, _agree_start)
            await asyncio.sleep(max(0.0, t_start - _now()))
            sender.t0 = t_start
            stop_at = t_start + wl.max_point_s if wl.max_point_s else None
            with LoopMonitor() as mon:
                if concurrency:
                    sent = await sender.run_closed(max(1, c), stop_at=stop_at, indices=mine)
                else:
                    sub = {i: float(offsets[i]) for i in mine}

                    async def send(j, scheduled=None):
                        return await sender.send(mine[j], scheduled=sub[mine[j]])
                    sent = await open_loop(send, [sub[i] for i in mine], stop_at=stop_at, warmup=0, t0=t_start,
                                           max_concurrency=(wl.max_concurrency // n_workers) if wl.max_concurrency else None)
            recs = sender.records(sent)
            lags = [r.start_offset - r.scheduled_offset for r in recs if r.scheduled_offset is not None]
            return recs, mon.figures(lags or None)
        finally:
            await client.close()
    return run_async(go())


async def measure_in_workers(ctx, *, key: int, repeat: int, concurrency=None, offsets=None, specs=None
                             ) -> tuple[list[RequestRecord], dict]:
    n = ctx.workload.workers
    if concurrency:
        n = min(n, concurrency)
    loop = asyncio.get_running_loop()
    mp = multiprocessing.get_context("spawn")
    barrier, start = mp.Barrier(n), mp.Value("d", 0.0)
    with concurrent.futures.ProcessPoolExecutor(n, mp_context=mp, initializer=_init, initargs=(barrier, start)) as ex:
        futs = [loop.run_in_executor(ex, _worker, ctx, w, n, key, repeat, concurrency, offsets, specs)
                for w in range(n)]
        results = await asyncio.gather(*futs)
    recs = sorted((r for rs, _ in results for r in rs), key=lambda r: r.index)
    figs = [f for _, f in results]
    send = [f["send_lag_ms_p99"] for f in figs if f.get("send_lag_ms_p99") is not None]
    return recs, {"client_cpu_pct": sum(f["client_cpu_pct"] for f in figs),
                  "loop_lag_ms_p99": max(f["loop_lag_ms_p99"] for f in figs),
                  "send_lag_ms_p99": max(send) if send else None,
                  "client_bound": any(f["client_bound"] for f in figs), "workers": n}
