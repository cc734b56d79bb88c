"""Spread one point over several client processes when one core cannot keep up.

Each worker builds the same request specs (they are deterministic), warms its connections, waits
at a barrier for the others and starts at one shared monotonic instant (CLOCK_MONOTONIC is
system-wide on Linux), so the merged records form one point with one clock. Open loop: the schedule
is generated once by the caller and dealt round-robin, each worker sending its requests at their
scheduled offsets from that instant. Closed loop: the concurrency is split exactly (C over W
processes: C // W each, one more for the first C % W) and every slot, in whichever process it
frees up, takes the next request of one shared queue (``SharedOrder``), so C stay in flight until
the requests run out. An open-loop ``max_concurrency`` is split the same exact way.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import time

from bakeoff.bench.loadgen import send_lag_figures
from bakeoff.bench.records import RequestRecord

_now = time.perf_counter
START_LEAD_S = 0.2
_sync: tuple | None = None  # (barrier, start time, next request), inherited by each worker process


def _init(barrier, start, next_index) -> None:
    global _sync
    _sync = (barrier, start, next_index)


class SharedOrder:
    """The closed loop's one queue of request indices across processes (a shared counter): each
    index is taken once, in order (warm-up requests first), by whichever slot frees up first. A
    fixed share of the requests per process would leave the process with fewer slots working alone,
    below the concurrency budget, once the others ran out."""

    def __init__(self, counter, total: int):
        self.counter, self.total = counter, total

    def __iter__(self) -> "SharedOrder":
        return self

    def __next__(self) -> int:
        with self.counter.get_lock():
            i = self.counter.value
            if i >= self.total:
                raise StopIteration
            self.counter.value = i + 1
        return i


def _agree_start() -> float:
    """Block until every worker is warmed up, then return one start instant for all."""
    barrier, start, _ = _sync
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
    n_warm, specs = workloads.point_specs(
        wl, key, repeat, concurrency, offsets, specs, sizer=ctx.sizer, seed=ctx.prompt_seed
    )
    mine = [i for i in range(len(specs)) if i % n_workers == w]  # open loop: this worker's deal

    async def go():
        client = StreamingClient(
            ctx.endpoint.base_url,
            api_key=ctx.api_key,
            timeout_s=wl.request_timeout_s,
            tls_cert=ctx.endpoint.tls_cert,
            connection=wl.ttft_connection,
        )
        try:
            sender = Sender(
                client,
                wl,
                ctx.endpoint.model,
                PointId(ctx.run_id, ctx.target.slug, wl.name, key, repeat),
                specs,
                n_warm,
                wl.request_timeout_s,
            )
            c = _share(concurrency or wl.max_concurrency or 0, n_workers, w) or None
            await client.warm(max(1, c or 64 // n_workers))
            t_start = await asyncio.get_running_loop().run_in_executor(None, _agree_start)
            await asyncio.sleep(max(0.0, t_start - _now()))
            sender.t0 = t_start
            stop_at = t_start + wl.max_point_s if wl.max_point_s else None
            with LoopMonitor() as mon:
                if concurrency:
                    sent = await sender.run_closed(
                        max(1, c), stop_at=stop_at, indices=SharedOrder(_sync[2], len(specs))
                    )
                else:
                    sub = {i: float(offsets[i]) for i in mine}

                    async def send(j, scheduled=None):
                        return await sender.send(mine[j], scheduled=sub[mine[j]])

                    sent = await open_loop(
                        send,
                        [sub[i] for i in mine],
                        stop_at=stop_at,
                        t0=t_start,
                        warmup=sum(i < n_warm for i in mine),
                        max_concurrency=c,
                    )
            recs = sender.records(sent)
            lags = [r.send_lag for r in recs if r.send_lag is not None]
            return recs, mon.figures(lags or None)
        finally:
            await client.close()

    return run_async(go())


async def measure_in_workers(
    ctx, *, key: int, repeat: int, concurrency=None, offsets=None, specs=None
) -> tuple[list[RequestRecord], dict]:
    n = ctx.workload.workers
    budget = concurrency or ctx.workload.max_concurrency
    if budget:
        n = min(n, budget)  # every process gets at least one slot of the budget
    if not concurrency and offsets is not None:
        n = max(1, min(n, len(offsets)))
    loop = asyncio.get_running_loop()
    mp = multiprocessing.get_context("spawn")
    barrier, start, next_index = mp.Barrier(n), mp.Value("d", 0.0), mp.Value("q", 0)
    with concurrent.futures.ProcessPoolExecutor(
        n, mp_context=mp, initializer=_init, initargs=(barrier, start, next_index)
    ) as ex:
        futs = [
            loop.run_in_executor(ex, _worker, ctx, w, n, key, repeat, concurrency, offsets, specs) for w in range(n)
        ]
        results = await asyncio.gather(*futs)
    recs = sorted((r for rs, _ in results for r in rs), key=lambda r: r.index)
    figs = [f for _, f in results]
    send = send_lag_figures([r.send_lag for r in recs])  # over the whole point, not per worker
    return recs, {
        "client_cpu_pct": sum(f["client_cpu_pct"] for f in figs),
        "loop_lag_ms_p99": max(f["loop_lag_ms_p99"] for f in figs),
        "loop_stall_ms_max": max(f["loop_stall_ms_max"] for f in figs),
        "client_stalled": any(f["client_stalled"] for f in figs),
        **send,
        "client_bound": any(f["client_bound"] for f in figs),
        "workers": n,
    }
