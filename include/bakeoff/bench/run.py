"""Run a workload against one endpoint: every load point x repeat, each saved as soon as it ends.

This is what the DAG's benchmark task and ``python -m bakeoff bench`` call. A failed request is a
record, never an exception; a point that cannot be measured at all (server gone) still saves what
it has, so nothing measured is lost.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa

from bakeoff import store
from bakeoff.bench.client import clock, sizing, workloads
from bakeoff.bench.client.prompts import RequestSpec, prompt_seed
from bakeoff.bench.client.runtime import run_async
from bakeoff.bench.client.tokenize import discover, recount_outputs
from bakeoff.bench.client.transport import StreamingClient
from bakeoff.bench.fleet.members import BROKER_ENV, FleetPoint, MemberWork, measure_in_fleet, run_fleet
from bakeoff.bench.fleet.workers import measure_in_workers
from bakeoff.bench.load.calibration import calibrate, calibration_line
from bakeoff.bench.load.capacity import judge_of, search_tiers
from bakeoff.bench.load.loadgen import PointId, arrival_offsets
from bakeoff.bench.load.point import AdhocTarget, Ctx, PowerSource, client_for, measure_here, measure_sessions
from bakeoff.bench.load.session_load import SessionSender, TurnSent, point_seed, point_sessions
from bakeoff.bench.load.sla import search
from bakeoff.bench.metrics import server_metrics
from bakeoff.bench.metrics.records import REQUEST_FIELDS, RequestRecord
from bakeoff.bench.metrics.summary import summarize
from bakeoff.bench.sessions import workload as sessions
from bakeoff.plan.capacity import CapacitySearch, ordered
from bakeoff.plan.target import Target
from bakeoff.plan.workload import rate_key
from bakeoff.serving.energy import point_energy, power_trace
from bakeoff.serving.provenance import snapshot_provenance

if TYPE_CHECKING:
    from bakeoff.bench.client.clock import Offsets
    from bakeoff.bench.sessions.workload import Session
    from bakeoff.core.endpoint import Endpoint
    from bakeoff.plan.slo import Slo
    from bakeoff.plan.workload import Sessions, Workload

log = logging.getLogger(__name__)


_ARROW = {
    "str": pa.string(),
    "int": pa.int64(),
    "float": pa.float64(),
    "bool": pa.bool_(),
    "list[float]": pa.list_(pa.float64()),
}
REQUEST_SCHEMA = pa.schema([pa.field(f.name, _ARROW[str(f.type).replace(" | None", "")]) for f in REQUEST_FIELDS])


def records_frame(records: list[RequestRecord]) -> pd.DataFrame:
    """Per-request table with a fixed Arrow schema, so a point where every request failed (all
    latencies null) still has float columns and a results folder reads back as one dataset."""
    table = pa.Table.from_pylist([r.to_row() for r in records], schema=REQUEST_SCHEMA)
    # nullable ints and strings keep their type when all null; list columns become numpy float arrays,
    # which pyarrow writes back as list<double> even when every list is empty
    return table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype(), pa.string(): pd.StringDtype()}.get)


def _save(
    ctx: Ctx,
    key: int,
    repeat: int,
    recs: list[RequestRecord],
    figures: dict[str, Any],
    *,
    mode: str,
    rate: float | None,
    prov: dict[str, Any] | None,
    server: dict[str, Any] | None = None,
) -> dict[str, Any]:
    summary = summarize(
        recs,
        gpus=ctx.gpus,
        slo=ctx.slo,
        emulated=ctx.emulated,
        max_error_rate=ctx.max_error_rate,
        load_mode=mode,
        rate=rate,
        client=figures,
        prompts=_prompts(ctx),
    )
    trace = ctx.out_dir / "power" / f"{ctx.workload.name}-c{key}-r{repeat}.json"
    summary.update(_point_power(ctx, recs, trace), ttft_connection=ctx.workload.ttft_connection)
    summary.update(server or {})
    store.save_point(ctx.out_dir, ctx.workload.name, key, repeat, records_frame(recs), summary)
    if prov is not None:
        store.write_json(ctx.out_dir / "provenance" / f"{ctx.workload.name}-c{key}-r{repeat}.json", prov)
    log.info(
        "%s %s %s=%s r%d: %d ok, %d failed, %.1f output tok/s/GPU%s",
        ctx.target.slug,
        ctx.workload.name,
        mode,
        rate if rate is not None else key,
        repeat,
        summary["completed"],
        summary["failed"],
        summary["output_tps_per_gpu"],
        " (client-bound)" if summary["client_bound"] else "",
    )
    return summary


def _prompts(ctx: Ctx) -> dict[str, Any]:
    """How this workload's prompts were made (bench.metrics.summary.summarize records it per point)."""
    w = ctx.workload
    sized = workloads.sizes_prompts(w)
    return {
        "sized": sized,
        "prompt_seed": ctx.prompt_seed,
        "input_len_tolerance": w.input_len_tolerance,
        "prompt_sizing": ctx.sizer.method if ctx.sizer is not None and sized else "file",
    }


SAMPLE_WAIT_S = 1.2  # one 1 Hz sampling interval and a margin: the sample after a point's end is there by then


def _point_power(ctx: Ctx, recs: list[RequestRecord], trace_to: store.StorePath | None = None) -> dict[str, Any]:
    """The point's measured energy from the node's own samplers (serving.energy: counters where the
    vendor's library ran, else power samples), with its 1 Hz power trace written to ``trace_to`` for
    the chart; cost prefers it to the catalog's estimate. Nothing when the node reports no samples."""
    done = [r for r in recs if not r.warmup and r.elapsed is not None]
    if ctx.power is None or not done:
        return {}
    scale = ctx.time_scale  # records hold the emulated clock's durations
    start = min(r.send_time for r in done)
    end = max(r.send_time + r.elapsed * scale for r in done if r.elapsed is not None)  # wall epoch seconds
    try:
        rows = ctx.power(start, end)
        if rows and not any(r["t"] >= end for r in rows if r["gpu"] >= 0):
            # the point ended between two 1 Hz samples: wait for the one after it, so the counters bracket it
            time.sleep(max(0.0, end + SAMPLE_WAIT_S - time.time()))
            rows = ctx.power(start, end)
    except Exception as e:  # noqa: BLE001 - power must never cost a measurement
        log.warning("power samples unavailable for %s: %s", ctx.target.slug, type(e).__name__)
        return {}
    figures = point_energy(rows, start, end, ctx.gpus, scale)
    if not figures:
        return {}
    if trace_to is not None:
        store.write_json(trace_to, {"start": start, "end": end, "trace": power_trace(rows, start, ctx.gpus)})
    out_tokens = sum(r.output_tokens or 0 for r in done if r.ok)
    joules = figures["energy_j"]
    return figures | {"joules_per_output_token": joules / out_tokens if out_tokens else None}


def _prov(ctx: Ctx) -> dict[str, Any] | None:
    if not ctx.provenance:
        return None
    try:
        return snapshot_provenance(ctx.endpoint, ctx.api_key)
    except Exception as e:  # noqa: BLE001 - provenance must never cost a measurement
        return {"error": f"{type(e).__name__}: {e}"}


async def measure_point(
    ctx: Ctx,
    client: StreamingClient,
    *,
    key: int,
    repeat: int,
    mode: str,
    concurrency: int | None = None,
    rate: float | None = None,
    offsets: Offsets | None = None,
    specs: list[RequestSpec] | None = None,
) -> dict[str, Any]:
    """Measure one point (a client fleet or worker processes when the workload asks), save it, return its summary."""
    offsets = clock.to_wall(offsets, ctx.time_scale)  # arrivals in the emulated hardware's seconds
    if ctx.workload.client_fleet > 1:
        measure = measure_in_fleet(
            ctx, key=key, repeat=repeat, concurrency=concurrency, offsets=offsets, specs=specs, run=_fleet_runner()
        )
    elif ctx.workload.workers > 1:
        measure = measure_in_workers(ctx, key=key, repeat=repeat, concurrency=concurrency, offsets=offsets, specs=specs)
    else:
        measure = measure_here(
            ctx, client, key=key, repeat=repeat, concurrency=concurrency, offsets=offsets, specs=specs
        )
    return await _measure_and_save(ctx, measure, key=key, repeat=repeat, mode=mode, rate=rate)


def _fleet_runner() -> Callable[[list[MemberWork]], FleetPoint]:
    """Local member processes, or Celery tasks on the client workers when $BAKEOFF_FLEET_BROKER is set
    (imported only then: the node's co-located client has no Celery)."""
    if not os.environ.get(BROKER_ENV, "").strip():
        return run_fleet
    from bakeoff.bench.fleet.fleet_celery import run_celery_fleet  # noqa: PLC0415 - Celery only where it is used

    return run_celery_fleet


async def _measure_and_save(
    ctx: Ctx,
    measure: Awaitable[tuple[list[RequestRecord], dict[str, Any]]],
    *,
    key: int,
    repeat: int,
    mode: str,
    rate: float | None,
    extra: Callable[[], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Await one point's measurement between two reads of the server's provenance and counters, so
    every kind of point is saved with the same server-side figures; ``extra`` adds figures of its own
    once the point has ended."""
    before = _prov(ctx)
    scraped = _scrape(ctx)
    recs, figures = await measure
    clock.to_emulated(recs, ctx.time_scale)
    server = server_metrics.point_figures(scraped, _scrape(ctx))
    if extra is not None:
        server.update(extra())
    recount_outputs(recs, ctx.counter)
    return _save(ctx, key, repeat, recs, figures, mode=mode, rate=rate, prov=_prov_after(ctx, before), server=server)


def _scrape(ctx: Ctx) -> dict[str, Any] | None:
    """The server's counters now (bench.metrics.server_metrics); None when it exports none or is unreachable."""
    try:
        return server_metrics.scrape(ctx.endpoint, ctx.api_key)
    except Exception as e:  # noqa: BLE001 - server figures must never cost a measurement
        log.warning("server metrics unavailable for %s: %s", ctx.target.slug, type(e).__name__)
        return None


def _prov_after(ctx: Ctx, before: dict[str, Any] | None) -> dict[str, Any] | None:
    if before is None:
        return None
    after = _prov(ctx)
    return {
        "before": before,
        "after": {"metrics": (after or {}).get("metrics"), "taken_at": (after or {}).get("taken_at")},
    }


def _session_block(w: Workload) -> Sessions:
    if w.sessions is None:
        raise ValueError(f"workloads {w.name}: kind {w.kind!r} has no sessions block")
    return w.sessions


async def measure_session_point(
    ctx: Ctx,
    client: StreamingClient,
    chosen: list[Session],
    *,
    key: int,
    repeat: int,
    mode: str,
    concurrency: int | None = None,
    rate: float | None = None,
    offsets: Offsets | None = None,
) -> dict[str, Any]:
    """Measure one session point in this process, save it with the server's figures beside the hit
    rate the trace predicts, return its summary."""
    w, cfg = ctx.workload, _session_block(ctx.workload)
    scale = ctx.time_scale  # the sender scales arrivals and think times by it (emulated hardware's seconds)
    pid = PointId(ctx.run_id, ctx.target.slug, w.name, key, repeat)
    blocks = sessions.PromptBlocks(cfg.block_tokens, sizer=ctx.sizer, seed=point_seed(ctx.prompt_seed, key, repeat))
    sender = SessionSender(
        client,
        w,
        ctx.endpoint.model,
        pid,
        chosen,
        blocks,
        block_tokens=cfg.block_tokens,
        warmup=cfg.warmup_sessions,
        timeout_s=w.request_timeout_s,
        time_scale=scale,
    )
    sent: list[TurnSent] = []

    async def measure() -> tuple[list[RequestRecord], dict[str, Any]]:
        # subagents run beside their parents: room for twice the sessions' streams before the clock starts
        fan = 2 if any(s.parent is not None for s in chosen) else 1
        recs, figures, played = await measure_sessions(
            sender,
            warm=min((concurrency or w.max_concurrency or 16) * fan, 1024),
            concurrency=concurrency,
            offsets=offsets,
            duration_s=cfg.duration_s * scale if cfg.duration_s else cfg.duration_s,
        )
        sent.extend(played)
        return recs, figures

    return await _measure_and_save(
        ctx,
        measure(),
        key=key,
        repeat=repeat,
        mode=mode,
        rate=rate,
        extra=lambda: {"prefix_cache_hit_rate_expected": sender.expected_hit_rate(sent)},
    )


def _loaded_sessions(ctx: Ctx) -> tuple[list[Session], int, int | None]:
    """The workload's sessions and how many of them a point plays (point_sessions' arguments)."""
    w, cfg = ctx.workload, _session_block(ctx.workload)
    planned = ctx.target if isinstance(ctx.target, Target) else None  # a plan's: no session beyond its context
    loaded = sessions.load_sessions(
        w,
        w.seed,
        context_tokens=planned.model_spec.context if planned else None,
        model=planned.model if planned else "the model",
    )
    return loaded, cfg.warmup_sessions, cfg.max_sessions_per_point


async def _run_sessions(ctx: Ctx, client: StreamingClient) -> list[dict[str, Any]]:
    """Every point of a session workload: closed loop per concurrent_sessions level, or open loop
    per session arrival rate (Poisson or gamma arrivals, as the workload's arrival says)."""
    w, cfg = ctx.workload, _session_block(ctx.workload)
    chosen = point_sessions(*_loaded_sessions(ctx))
    n_roots = sum(1 for s in chosen if s.parent is None)
    out: list[dict[str, Any]] = []
    for c in cfg.concurrent_sessions:
        for rep in range(w.repeats):
            out.append(
                await measure_session_point(ctx, client, chosen, key=c, repeat=rep, mode="sessions", concurrency=c)
            )
    for rate in cfg.session_rates:
        for rep in range(w.repeats):
            offs = arrival_offsets(n_roots, rate, w.arrival, w.burstiness, seed=w.seed * 1000 + rep)
            out.append(
                await measure_session_point(
                    ctx, client, chosen, key=rate_key(rate), repeat=rep, mode="session_rate", rate=rate, offsets=offs
                )
            )
    return out


async def _run(
    ctx: Ctx, tiers: Mapping[str, Slo] | None = None, search_cfg: CapacitySearch | None = None
) -> list[dict[str, Any]]:
    w = ctx.workload
    client = client_for(ctx)
    out: list[dict[str, Any]] = []
    try:
        if w.kind == "sessions":
            out.extend(await _run_sessions(ctx, client))
        elif w.load == "concurrency":
            for c in w.levels():
                for rep in range(w.repeats):
                    out.append(await measure_point(ctx, client, key=c, repeat=rep, mode="concurrency", concurrency=c))
        elif w.load == "rate":
            for rate in w.rates:
                n = w.requests_per_point or max(10, int(round(rate * 30)))
                for rep in range(w.repeats):
                    offs = arrival_offsets(
                        (w.warmup_requests or 0) + n, rate, w.arrival, w.burstiness, seed=w.seed * 1000 + rep
                    )
                    out.append(
                        await measure_point(
                            ctx, client, key=rate_key(rate), repeat=rep, mode="rate", rate=rate, offsets=offs
                        )
                    )
        elif w.load == "trace":
            offs, specs = workloads.trace_specs(w, sizer=ctx.sizer, seed=ctx.prompt_seed)
            rate = (len(offs) - 1) / offs[-1] if len(offs) > 1 and offs[-1] > 0 else 1.0
            for rep in range(w.repeats):
                out.append(
                    await measure_point(
                        ctx, client, key=rate_key(rate), repeat=rep, mode="trace", rate=rate, offsets=offs, specs=specs
                    )
                )
        elif w.load == "sla":

            async def probe(**load: Any) -> dict[str, Any]:
                return await measure_point(ctx, client, repeat=0, mode="sla", **load)

            result = await search(w, probe)
            out.extend(result.summaries)
            store.write_json(ctx.out_dir / f"sla-{w.name}.json", result.to_dict())
        if tiers:
            await _capacity(ctx, client, tiers, search_cfg or CapacitySearch())
        return out
    finally:
        await client.close()


async def _capacity(ctx: Ctx, client: StreamingClient, tiers: Mapping[str, Slo], cfg: CapacitySearch) -> None:
    """The capacity at each SLO tier (bench.load.capacity): probes saved under ``capacity/``, out of the cost
    tables' points, and the result as ``capacity-<workload>.json``."""
    w = ctx.workload
    cap = replace(ctx, out_dir=ctx.out_dir / "capacity")
    chosen = point_sessions(*_loaded_sessions(ctx)) if w.kind == "sessions" else []

    async def measure(load: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        if w.kind == "sessions":
            s = await measure_session_point(cap, client, chosen, key=load, repeat=0, mode="sessions", concurrency=load)
        else:
            s = await measure_point(cap, client, key=load, repeat=0, mode="capacity", concurrency=load)
        recs = store.read_frame(store.point_file(cap.out_dir, "requests", w.name, load, 0))
        return s, recs.to_dict("records")

    result = await search_tiers(
        {name: judge_of(tiers[name]) for name in ordered(list(tiers))},  # strictest first
        measure,
        over="sessions" if w.kind == "sessions" else "concurrency",
        start=cfg.start,
        maximum=cfg.max,
        budget=cfg.points,
    )
    store.write_json(ctx.out_dir / f"capacity-{w.name}.json", result)


def run_workload(
    endpoint: Endpoint,
    target: Target | AdhocTarget,
    workload: Workload,
    slo: Slo | None,
    out_dir: str | store.StorePath,
    run_id: str,
    api_key: str | None,
    emulated: bool,
    *,
    max_error_rate: float | None = None,
    provenance: bool = True,
    calibrate: bool = True,
    power: PowerSource | None = None,
    tiers: Mapping[str, Slo] | None = None,
    capacity: CapacitySearch | None = None,
) -> list[dict[str, Any]]:
    """Run every load point x repeat of ``workload`` against ``endpoint``; save each point as it
    completes under ``out_dir`` (store.target_dir); return the point summaries. With SLO ``tiers``, then
    search each tier's capacity within ``capacity``'s budget of points (bench.load.capacity).

    First (once per target folder) the client measures itself against a local scripted server and
    stores its own TTFT/TPOT error as client_calibration.json next to the results.
    """
    ctx = Ctx(
        endpoint, target, workload, slo, store.at(out_dir), run_id, api_key, emulated, max_error_rate, provenance, power
    )
    if calibrate:
        self_calibrate(store.at(out_dir), workload)
    size_prompts(ctx)
    t = time.perf_counter()
    try:
        out = run_async(_run(ctx, tiers, capacity))
    finally:
        if ctx.counter is not None:
            ctx.counter.close()
    log.info("workload %s on %s: %d points in %.1fs", workload.name, target.slug, len(out), time.perf_counter() - t)
    return out


def size_prompts(ctx: Ctx) -> dict[str, Any]:
    """Find how to count the served model's tokens, fit the prompt sizer to it (when bakeoff writes
    prompts) and pick the run's prompt seed; stored as prompt_sizing-<workload>.json next to the
    results, achieved error included. Output tokens without usage are counted by the same route,
    or by the plain-text /tokenize when chat prompts had to be probed (SGLang's takes no messages)."""
    w = ctx.workload
    chat = w.endpoint == "chat"
    ctx.prompt_seed = prompt_seed(w, ctx.run_id)
    counter = discover(ctx.endpoint, ctx.api_key, chat=chat)
    ctx.counter = counter
    if chat and not counter.can_count_output():
        ctx.counter = discover(ctx.endpoint, ctx.api_key)
    if w.source in ("jsonl", "sharegpt"):
        ctx.sizer = None
        doc = {"workload": w.name, "method": "file", "prompt_seed": ctx.prompt_seed, "prompt_seeding": w.prompt_seeding}
    else:
        lo, hi = w.length_bounds(w.input_len)
        ctx.sizer = sizing.calibrate(counter, chat=chat, lengths=sorted({lo, (lo + hi) // 2, hi}), seed=ctx.prompt_seed)
        doc = {
            "workload": w.name,
            "method": ctx.sizer.method,
            "prompt_seed": ctx.prompt_seed,
            "prompt_seeding": w.prompt_seeding,
            "bias_tokens": ctx.sizer.bias,
            "check": ctx.sizer.check,
        }
        chk = ctx.sizer.check
        err = (
            f": sample error mean {chk['error_mean']:+.2%}, max {chk['error_max_abs']:.2%}"
            if "error_mean" in chk
            else ""
        )
        log.info("prompts for %s sized by %s (seed %d)%s", w.name, ctx.sizer.method, ctx.prompt_seed, err)
    if counter is not ctx.counter:
        counter.close()
    doc["output_count_route"] = ctx.counter.method
    store.write_json(ctx.out_dir / f"prompt_sizing-{w.name}.json", doc)
    return doc


def self_calibrate(out_dir: store.StorePath, workload: Workload) -> dict[str, Any] | None:
    """The client's own error on this machine, measured once per target folder (never fatal)."""
    path = out_dir / "client_calibration.json"
    if path.exists():
        stored: dict[str, Any] = store.read_json(path)
        return stored
    c = min(64, max((workload.levels() if workload.load == "concurrency" else []) or [workload.max_concurrency or 16]))
    try:
        doc = calibrate(concurrency=c, requests=2 * c)
    except Exception as e:  # noqa: BLE001 - the benchmark proper must still run
        doc = {"error": f"{type(e).__name__}: {e}"}
    store.write_json(path, doc)
    log.info("%s", calibration_line(doc))
    return doc
