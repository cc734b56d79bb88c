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
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from bakeoff.bench.client.monitor import merge_figures
from bakeoff.bench.client.prompts import RequestSpec
from bakeoff.bench.client.runtime import run_async
from bakeoff.bench.load.point import Ctx, client_for, measure, point_sender
from bakeoff.bench.metrics.records import RequestRecord

if TYPE_CHECKING:
    from bakeoff.bench.client.clock import Offsets

_now = time.perf_counter
START_LEAD_S = 0.2
# (barrier, start time, next request): multiprocessing's shared objects, inherited by each worker process
_sync: tuple[Any, Any, Any] | None = None


def _init(barrier: Any, start: Any, next_index: Any) -> None:
    global _sync
    _sync = (barrier, start, next_index)


class SharedOrder:
    """The closed loop's one queue of request indices across processes (a shared counter): each
    index is taken once, in order (warm-up requests first), by whichever slot frees up first. A
    fixed share of the requests per process would leave the process with fewer slots working alone,
    below the concurrency budget, once the others ran out."""

    def __init__(self, counter: Any, total: int):
        self.counter, self.total = counter, total

    def __iter__(self) -> SharedOrder:
        return self

    def __next__(self) -> int:
        with self.counter.get_lock():
            i: int = self.counter.value
            if i >= self.total:
                raise StopIteration
            self.counter.value = i + 1
        return i


def _agree_start() -> float:
    """Block until every worker is warmed up, then return one start instant for all."""
    if _sync is None:
        raise RuntimeError("_agree_start runs in a worker process started with _init")
    barrier, start, _ = _sync
    if barrier.wait() == 0:
        start.value = _now() + START_LEAD_S
    barrier.wait()
    t_start: float = start.value
    return t_start


def _share(total: int, workers: int, w: int) -> int:
    return total // workers + (1 if w < total % workers else 0)


def _worker(
    ctx: Ctx,
    w: int,
    n_workers: int,
    key: int,
    repeat: int,
    concurrency: int | None,
    offsets: Offsets | None,
    specs: list[RequestSpec] | None,
) -> tuple[list[RequestRecord], dict[str, Any]]:
    """One worker process's share of the point, through the one measurement loop (point.measure)."""
    wl = ctx.workload
    c = _share(concurrency or wl.max_concurrency or 0, n_workers, w) or None

    async def start_at() -> float:
        t_start = await asyncio.get_running_loop().run_in_executor(None, _agree_start)
        await asyncio.sleep(max(0.0, t_start - _now()))
        return t_start

    async def go() -> tuple[list[RequestRecord], dict[str, Any]]:
        client = client_for(ctx)
        try:
            sender = point_sender(
                ctx, client, key=key, repeat=repeat, concurrency=concurrency, offsets=offsets, specs=specs
            )
            order: Iterable[int]
            if concurrency:  # closed loop: this worker's slots take from the one shared queue
                if _sync is None:
                    raise RuntimeError("a closed-loop worker runs in a process started with _init")
                order = SharedOrder(_sync[2], len(sender.specs))
            else:  # open loop: this worker's round-robin deal of the schedule
                order = [i for i in range(len(sender.specs)) if i % n_workers == w]
            return await measure(
                sender,
                warm=max(1, c or 64 // n_workers),
                concurrency=max(1, c or 0) if concurrency else None,
                offsets=offsets,
                order=order,
                max_concurrency=c,
                max_point_s=wl.max_point_s,
                start_at=start_at,
            )
        finally:
            await client.close()

    return run_async(go())


async def measure_in_workers(
    ctx: Ctx,
    *,
    key: int,
    repeat: int,
    concurrency: int | None = None,
    offsets: Offsets | None = None,
    specs: list[RequestSpec] | None = None,
) -> tuple[list[RequestRecord], dict[str, Any]]:
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
    return recs, merge_figures([f for _, f in results], [r.send_lag for r in recs])
