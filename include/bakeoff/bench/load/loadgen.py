"""Load generation: closed-loop concurrency, open-loop arrivals (Poisson/gamma), trace replay.

Every mode produces one RequestRecord per request through the same ``Sender``; request bodies are
built before the clock starts so the hot path only writes bytes, and records are built after the
point so bookkeeping never delays a send.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from bakeoff.bench.client.prompts import RequestSpec
from bakeoff.bench.client.runtime import gc_paused
from bakeoff.bench.client.tasks import TaskSet, task_failure
from bakeoff.bench.client.transport import Outcome, StreamingClient
from bakeoff.bench.metrics.records import RequestRecord

if TYPE_CHECKING:
    from bakeoff.bench.client.clock import Offsets
    from bakeoff.plan.workload import Workload

_now = time.perf_counter
MISMATCH = 0.10  # usage vs client count disagreement that gets flagged


def request_body(spec: RequestSpec, workload: Workload, model: str) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) for one request: streamed, usage requested, greedy, max_tokens."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": spec.output_len,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if workload.ignore_eos:
        body["ignore_eos"] = True
    body.update(spec.extra)
    if workload.endpoint == "chat":
        body["messages"] = spec.chat_messages()
        return "/v1/chat/completions", body
    body["prompt"] = spec.completion_prompt()
    return "/v1/completions", body


@dataclass
class PointId:
    run_id: str
    target: str
    workload: str
    concurrency: int
    repeat: int


def to_record(
    out: Outcome,
    pid: PointId,
    spec: RequestSpec,
    index: int,
    warmup: bool,
    t0: float,
    ignore_eos: bool,
    scheduled: float | None = None,
) -> RequestRecord:
    st = out.state
    rec = RequestRecord(
        run_id=pid.run_id,
        target=pid.target,
        workload=pid.workload,
        concurrency=pid.concurrency,
        repeat=pid.repeat,
        index=index,
        warmup=warmup,
        send_time=out.wall_send,
        start_offset=out.t_send - t0,
        requested_input_len=spec.input_len,
        requested_output_len=spec.output_len,
        ignore_eos=ignore_eos,
        status_code=out.status,
        elapsed=out.t_end - out.t_send,
        scheduled_offset=scheduled,
    )
    if scheduled is not None:
        rec.send_lag = rec.start_offset - scheduled
    rec.ttft, rec.ttfa = st.ttft, st.ttfa
    rec.chunk_offsets = st.offsets
    rec.chunks = len(st.offsets)
    rec.finish_reason = st.finish_reason
    counted, rec.client_count_method = st.client_count()
    rec.output_tokens_client = counted
    usage = st.usage or {}
    if usage.get("completion_tokens") is not None:
        rec.output_tokens = int(usage["completion_tokens"])
        rec.tokens_source = "usage"
        rec.token_mismatch = abs(rec.output_tokens - counted) > MISMATCH * max(rec.output_tokens, counted, 1)
    else:
        rec.output_tokens = counted
        rec.tokens_source = "client"
        rec.output_pieces = st.reasoning + st.answer  # not a column: for tokenize.recount_outputs
    if usage.get("prompt_tokens") is not None:
        rec.prompt_tokens = int(usage["prompt_tokens"])
    if out.error is not None:
        rec.error_kind = out.error.kind
        rec.error = str(out.error)[:500]
    else:
        rec.e2e = out.t_end - out.t_send
    return rec


class Sender:
    """Pre-builds every request, then sends request i on demand and returns its record."""

    def __init__(
        self,
        client: StreamingClient,
        workload: Workload,
        model: str,
        pid: PointId,
        specs: list[RequestSpec],
        warmup: int,
        timeout_s: float,
    ):
        self.client, self.pid, self.specs, self.warmup = client, pid, specs, warmup
        self.ignore_eos = workload.ignore_eos
        self.timeout_s = timeout_s
        self.raw = [client.build(*request_body(s, workload, model)) for s in specs]
        self.t0 = _now()

    def start_clock(self) -> None:
        self.t0 = _now()

    async def send(self, i: int, scheduled: float | None = None) -> Sent:
        """Send request i; the record is built later (``records``), so that a closed-loop worker
        sends its next request as soon as this one ends instead of after the bookkeeping."""
        return Sent(i, await self.client.stream(self.raw[i], self.timeout_s), scheduled)

    async def run_closed(
        self, concurrency: int, *, stop_at: float | None = None, indices: Iterable[int] | None = None
    ) -> list[Sent]:
        """Closed loop over the requests (or ``indices``, any iterable of them: worker processes pass
        one shared queue, workers.SharedOrder): C in flight, each slot
        sending its next request as soon as its previous one ends. Warm-up requests go first
        through the same slots, so measurement starts at steady state; ``stop_at`` (perf_counter)
        stops new measured sends."""
        order = indices if indices is not None else list(range(len(self.raw)))
        with gc_paused():
            done = await self.client.closed_loop(
                self.raw, order, max(1, concurrency), timeout_s=self.timeout_s, stop_at=stop_at, warmup=self.warmup
            )
        return [Sent(i, out, None) for i, out in done]

    def records(self, sent: list[Sent]) -> list[RequestRecord]:
        return sorted(
            (
                to_record(
                    x.out,
                    self.pid,
                    self.specs[x.index],
                    x.index,
                    x.index < self.warmup,
                    self.t0,
                    self.ignore_eos,
                    x.scheduled,
                )
                for x in sent
            ),
            key=lambda r: r.index,
        )


class Sent:
    __slots__ = ("index", "out", "scheduled")

    def __init__(self, index: int, out: Outcome, scheduled: float | None):
        self.index, self.out, self.scheduled = index, out, scheduled


def arrival_offsets(n: int, rate: float, kind: str = "poisson", burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    """Send times (s from the first) of n requests at ``rate`` req/s.

    poisson: exponential gaps. gamma: gaps ~ Gamma(shape=burstiness, scale=1/(rate x burstiness)),
    mean 1/rate, coefficient of variation 1/sqrt(burstiness) (vLLM's convention).
    """
    if rate <= 0:
        raise ValueError(f"rate: must be > 0 requests/s, got {rate}")
    rng = np.random.default_rng(seed)
    if kind == "poisson":
        gaps = rng.exponential(1.0 / rate, n)
    elif kind == "gamma":
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    else:
        raise ValueError(f"arrival: unknown process {kind!r}; use poisson or gamma")
    return np.concatenate([[0.0], np.cumsum(gaps[:-1])]) if n else np.zeros(0)


# uvloop (libuv) timers have 1 ms granularity and round to the nearest ms, so a sleep can end up to
# 0.5 ms early or late: sleep until this long before the due time, then yield to the loop until it.
_SPIN_S = 0.0006


async def wait_until(due: float) -> None:
    """Return at perf_counter ``due`` -- never before, and within a loop iteration after. The last
    fraction of a ms is spent yielding to the event loop (responses keep being read), not asleep."""
    delay = due - _now()
    if delay > _SPIN_S:
        await asyncio.sleep(delay - _SPIN_S)
    while _now() < due:
        await asyncio.sleep(0)


async def open_loop(
    send: Callable[..., Awaitable[Any]],
    offsets: Offsets,
    *,
    max_concurrency: int | None = None,
    stop_at: float | None = None,
    warmup: int = 0,
    t0: float | None = None,
) -> list[Any]:
    """Send request i at t0 + offsets[i] regardless of responses (capped in flight).

    Waits end on the due time, never before it (``wait_until``); garbage collection is paused for
    the point (``gc_paused``); a send that is late stays late: the schedule is never shifted, so
    lateness shows up per request (``send_lag``) instead of silently changing the offered load.
    """
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    t0 = _now() if t0 is None else t0
    loop = asyncio.get_running_loop()
    # results are collected as each request ends: one gather over thousands of tasks at the end
    # would block the loop for tens of ms just as the last sends are due
    finished: asyncio.Future[None] = loop.create_future()

    def fail(exc: BaseException) -> None:  # a send raised: the point fails with it, now
        if not finished.done():
            finished.set_exception(task_failure(exc))

    tasks = TaskSet(on_error=fail)
    results: list[Any] = []
    scheduling = [True]

    async def one(i: int, off: float) -> Any:
        try:
            return await send(i, scheduled=off)
        finally:
            if sem:
                sem.release()

    def collect(task: asyncio.Task[Any]) -> None:  # runs after the TaskSet has let go of the task
        if finished.done() or task.cancelled() or task.exception() is not None:
            return
        results.append(task.result())
        if not len(tasks) and not scheduling[0]:
            finished.set_result(None)

    with gc_paused():
        try:
            for i, off in enumerate(offsets):
                off = float(off)
                await wait_until(t0 + off)
                if finished.done() or (stop_at is not None and i >= warmup and _now() > stop_at):
                    break  # a send raised (the point fails), or time is up
                if sem:
                    await sem.acquire()
                tasks.spawn(one(i, off)).add_done_callback(collect)
            scheduling[0] = False
            if len(tasks) and not finished.done():
                await finished
            elif finished.done():
                finished.result()
        finally:
            tasks.cancel()  # cancelled or failed: leave nothing running behind
    return sorted(results, key=lambda r: r.index)
