"""Measuring one load point: the one measurement loop.

``measure`` is the loop every point goes through -- in this process (``measure_here``), in each
worker process (bench.fleet.workers) and against the scripted server (bench.load.calibration): warm the
connections, start the clock (or agree on a start instant with the other workers), send closed
loop or on the open-loop schedule under the loop monitor, then build the records and the client's
own figures. Nothing here writes files; bench.run saves what a point measured.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bakeoff.bench.client import clock, workloads
from bakeoff.bench.client.monitor import LoopMonitor
from bakeoff.bench.client.prompts import RequestSpec
from bakeoff.bench.client.transport import StreamingClient
from bakeoff.bench.load.loadgen import PointId, Sender, Sent, open_loop
from bakeoff.bench.load.session_load import SessionSender, TurnSent
from bakeoff.bench.metrics.records import RequestRecord
from bakeoff.paths import StorePath, safe_name
from bakeoff.plan.target import Target

if TYPE_CHECKING:
    from bakeoff.bench.client.clock import Offsets
    from bakeoff.bench.client.sizing import PromptSizer
    from bakeoff.bench.client.tokenize import TokenCounter
    from bakeoff.core.endpoint import Endpoint
    from bakeoff.plan.slo import Slo
    from bakeoff.plan.workload import Workload

# (start, end epoch s) -> the node's power rows over that window (serving.power.parse_samples)
PowerSource = Callable[[float, float], list[dict[str, Any]]]


@dataclass
class AdhocTarget:
    """What run_workload needs of a target when there is no plan: a name and the GPU divisor."""

    name: str
    gpus_used: int = 1

    @property
    def slug(self) -> str:
        return safe_name(self.name.lower())


@dataclass
class Ctx:
    """Everything a point needs besides its load level."""

    endpoint: Endpoint
    target: Target | AdhocTarget  # AdhocTarget outside a plan (bakeoff-bench)
    workload: Workload
    slo: Slo | None
    out_dir: StorePath  # the target's folder in the results store
    run_id: str
    api_key: str | None
    emulated: bool
    max_error_rate: float | None = None
    provenance: bool = True
    power: PowerSource | None = None  # the node's power samples, if sampled
    sizer: PromptSizer | None = None  # written prompts in the served model's tokens
    counter: TokenCounter | None = None  # output tokens of requests without usage
    prompt_seed: int | None = None  # the run's prompt seed (prompts.prompt_seed)

    @property
    def gpus(self) -> int:
        return int(self.target.gpus_used)

    @property
    def time_scale(self) -> float:
        """The emulator's delay factor (1 on real hardware): bench.client.clock keeps figures on its clock."""
        if not isinstance(self.target, Target):  # outside a plan a target has no emulator settings
            return 1.0
        return clock.time_scale(self.target, self.emulated)

    def __getstate__(self) -> dict[str, Any]:
        # worker processes build prompts (sizer) but never count tokens; the counter may hold a
        # pinned-certificate SSL context, which does not pickle
        return {**self.__dict__, "counter": None}


def client_for(ctx: Ctx) -> StreamingClient:
    """The streaming client for the context's endpoint, as the workload asks for it."""
    w = ctx.workload
    return StreamingClient(
        ctx.endpoint.base_url,
        api_key=ctx.api_key,
        timeout_s=w.request_timeout_s,
        tls_cert=ctx.endpoint.tls_cert,
        connection=w.ttft_connection,
    )


def point_sender(
    ctx: Ctx,
    client: StreamingClient,
    *,
    key: int,
    repeat: int,
    concurrency: int | None = None,
    offsets: Offsets | None = None,
    specs: list[RequestSpec] | None = None,
) -> Sender:
    """Every request of the point built before the clock starts (the same in every worker process)."""
    w = ctx.workload
    n_warm, specs = workloads.point_specs(
        w, key, repeat, concurrency, offsets, specs, sizer=ctx.sizer, seed=ctx.prompt_seed
    )
    pid = PointId(ctx.run_id, ctx.target.slug, w.name, key, repeat)
    return Sender(client, w, ctx.endpoint.model, pid, specs, n_warm, w.request_timeout_s)


async def measure(
    sender: Sender,
    *,
    warm: int,
    concurrency: int | None = None,
    offsets: Offsets | None = None,
    order: Iterable[int] | None = None,
    max_concurrency: int | None = None,
    max_point_s: float | None = None,
    start_at: Callable[[], Awaitable[float]] | None = None,
) -> tuple[list[RequestRecord], dict[str, Any]]:
    """One point on this process: closed loop when ``concurrency`` is given, else open loop on
    ``offsets`` (seconds from the start, by request index).

    ``warm``: connections opened before the clock starts. ``order``: the request indices this
    process sends (all by default; worker processes pass their deal or the shared queue).
    ``start_at``: awaited after warming, returns the start instant (perf_counter) agreed with other
    processes; default now. ``max_point_s`` stops new measured sends that long after the start.
    """
    if not concurrency and offsets is None:
        raise ValueError("measure: give concurrency (closed loop) or offsets (open loop)")
    schedule: Offsets = offsets if offsets is not None else ()
    await sender.client.warm(warm)
    if start_at is None:
        sender.start_clock()
    else:
        sender.t0 = await start_at()
    stop_at = sender.t0 + max_point_s if max_point_s else None
    with LoopMonitor() as mon:
        if concurrency:
            sent = await sender.run_closed(concurrency, stop_at=stop_at, indices=order)
        elif order is None:
            sent = await open_loop(
                sender.send,
                schedule,
                max_concurrency=max_concurrency,
                stop_at=stop_at,
                warmup=sender.warmup,
                t0=sender.t0,
            )
        else:
            mine = list(order)

            async def send(j: int, scheduled: float | None = None) -> Sent:
                return await sender.send(mine[j], scheduled=scheduled)

            sent = await open_loop(
                send,
                [float(schedule[i]) for i in mine],
                max_concurrency=max_concurrency,
                stop_at=stop_at,
                warmup=sum(i < sender.warmup for i in mine),
                t0=sender.t0,
            )
    recs = sender.records(sent)
    lags = [r.send_lag for r in recs if r.send_lag is not None]
    return recs, mon.figures(lags or None)


async def measure_here(
    ctx: Ctx,
    client: StreamingClient,
    *,
    key: int,
    repeat: int,
    concurrency: int | None = None,
    offsets: Offsets | None = None,
    specs: list[RequestSpec] | None = None,
) -> tuple[list[RequestRecord], dict[str, Any]]:
    """One point on this process, with the workload's limits."""
    w = ctx.workload
    sender = point_sender(ctx, client, key=key, repeat=repeat, concurrency=concurrency, offsets=offsets, specs=specs)
    level = concurrency or w.max_concurrency or 0
    return await measure(
        sender,
        warm=min(level or 64, 1024),
        concurrency=concurrency,
        offsets=offsets,
        max_concurrency=w.max_concurrency,
        max_point_s=w.max_point_s,
    )


async def measure_sessions(
    sender: SessionSender,
    *,
    warm: int,
    concurrency: int | None = None,
    offsets: Offsets | None = None,
    duration_s: float | None = None,
) -> tuple[list[RequestRecord], dict[str, Any], list[TurnSent]]:
    """One session point: closed loop with ``concurrency`` sessions in flight, else open loop on
    ``offsets`` (session arrivals, s from the start), under the loop monitor; no measured session
    starts and no measured turn is sent ``duration_s`` after the start. Returns the turn records, the
    client's figures (turn send lateness included) and what was sent (for the trace's prediction)."""
    if not concurrency and offsets is None:
        raise ValueError("measure_sessions: give concurrency (closed loop) or offsets (open loop)")
    await sender.client.warm(warm)
    sender.start_clock()
    stop_at = sender.t0 + duration_s if duration_s else None
    with LoopMonitor() as mon:
        if concurrency:
            sent = await sender.run_closed(concurrency, stop_at=stop_at)
        else:
            sent = await sender.run_open(offsets if offsets is not None else (), stop_at=stop_at)
    recs = sender.records(sent)
    lags = [r.send_lag for r in recs if r.send_lag is not None and not r.warmup]
    return recs, mon.figures(lags or None), sent
