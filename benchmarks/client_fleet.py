"""A point's client over a fleet of member processes (bench.fleet), and the fleet a 1M tokens/s rack needs.

    python benchmarks/client_fleet.py [--members 2] [--requests 2048] [--rate 400] [--skew-ms 250] [--celery]

Ingest: closed loop C=64, 256 output tokens per request (one token per SSE chunk), against the
scripted server with zero TTFT/ITL, through one fleet point of 1 and then ``--members`` member
processes: per member, the output tokens/s it ingested and per client CPU-second. The per-process
figure is extrapolated on paper to the members a rack emitting RACK_TOKENS_S needs, each member
planned at client_cores.HEADROOM of a core.

Open loop: ``--rate`` requests/s (Poisson) for 2 s dealt round-robin over the members, member 1's
clock running ``--skew-ms`` ahead (fault injection, as a host whose clock is off): the merged
point's send lag (actual - scheduled send on each member's monotonic clock from the shared start),
each member's measured clock offset and round trip, and the corrected send times against the shared
start plus the schedule (what the offset correction buys: uncorrected, member 1's would be off by
the skew).

``--celery``: the same open-loop and ingest points again with the members as Celery tasks
(bench.fleet_celery) on ``--members`` client workers (one member slot each) on a redis-server
started here on loopback: what the broker adds before the start (launch to shared start, against
local processes'), and that the merged point is the same.

EMULATED, loopback. Caveat: this machine has 2 CPU cores shared with other work and the server;
the members and the server compete for them, so the per-process figure here is a floor.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.fleet_fixtures, for --celery
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))

from bakeoff.bench.cli import AdhocTarget
from bakeoff.bench.client import client_cores
from bakeoff.bench.client.monitor import send_lag_figures
from bakeoff.bench.fleet import members as fleet
from bakeoff.bench.load.loadgen import arrival_offsets
from bakeoff.bench.load.point import Ctx
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import Workload
from bakeoff.serving.emulator.scripted import ScriptedServerProcess

# MLPerf Inference v6.1, closed division, Server scenario: CoreWeave GB300 NVL72 (72 GPUs, 18 nodes),
# gpt-oss-120b, 1,160,490 tokens/s (mlcommons/inference_results_v6.1 summary.csv, commit
# 7bf15fd8089655a71fb75c81a744d7ba5a632424, copied 2026-11-30).
RACK_TOKENS_S = 1_160_490.0
INGEST_C, INGEST_OUT = 64, 256
MEMBERS_PER_NODE = 16  # a client node planned with 16 cores for members (an assumption, not a measurement)


def _ctx(url: str, w: Workload) -> Ctx:
    ep = Endpoint(target="scripted", base_url=url, model="scripted", stack="scripted", emulated=True)
    return Ctx(ep, AdhocTarget("scripted"), w, None, Path(tempfile.gettempdir()), "fleet", None, True, provenance=False)


def _span(recs) -> float:
    ok = [r for r in recs if r.ok and not r.warmup]
    return max(r.start_offset + r.elapsed for r in ok) - min(r.start_offset for r in ok) if ok else float("nan")


Runner = Callable[[list[fleet.MemberWork]], fleet.FleetPoint]


def _timed(run: Runner, works: list[fleet.MemberWork]) -> fleet.FleetPoint:
    """The point, with how long its members took from launch to the shared start."""
    t = time.time()
    point = run(works)
    hosts = ", ".join(point.figures["client_hosts"])
    print(f"\n(launch to shared start: {(point.start_time - t) * 1e3:,.0f} ms; members on {hosts})")
    return point


def ingest(
    url: str, members: int, requests: int, label: str = "", run: Runner = fleet.run_fleet
) -> tuple[float, float]:
    """One closed-loop ingest point over ``members``; (merged tokens/s, mean tokens per member CPU-second)."""
    w = Workload(
        name="ingest",
        input_len=8,
        output_len=INGEST_OUT,
        concurrency=[INGEST_C],
        requests_per_point=requests,
        warmup_requests=INGEST_C,
        request_timeout_s=120,
    )
    works = fleet.member_works(_ctx(url, w), key=INGEST_C, repeat=0, concurrency=INGEST_C, members=members)
    point = _timed(run, works)
    deals = {m.member: set(fleet.dealt(len(point.records), members, m.member, INGEST_C)) for m in point.members}
    by_member = {m: [r for r in point.records if r.index in deal] for m, deal in deals.items()}
    total = sum(r.output_tokens or 0 for r in point.records if r.ok and not r.warmup)
    span = _span(point.records)
    print(
        f"\nIngest{label}, {members} member(s): {total / span:,.0f} output tokens/s merged over {span:.2f} s, "
        f"client-bound: {point.figures['client_bound']}"
    )
    print("| member | slots | ok | output tokens/s | client CPU | tokens per client CPU-second |")
    print("| --- | --- | --- | --- | --- | --- |")
    per_cpu = []
    for m in point.members:
        recs = [r for r in by_member[m.member] if r.ok and not r.warmup]
        tps = sum(r.output_tokens or 0 for r in recs) / _span(recs)
        cpu = m.figures["client_cpu_pct"]
        per_cpu.append(tps / max(cpu / 100, 1e-9))
        slots = fleet.shares(INGEST_C, members)[m.member]
        print(f"| {m.member} | {slots} | {len(recs):,} | {tps:,.0f} | {cpu:.0f}% | {per_cpu[-1]:,.0f} |")
    return total / span, float(np.mean(per_cpu))


def open_loop(url: str, members: int, rate: float, skew_s: float, run: Runner = fleet.run_fleet) -> None:
    """One open-loop point over ``members``, member 1's clock skewed: send lag and clock offsets."""
    n = int(rate * 2)
    w = Workload(name="open", input_len=8, output_len=16, load="rate", rates=[rate], requests_per_point=n)
    offsets = [float(o) for o in arrival_offsets(n, rate, "poisson", 1.0, seed=0)]
    works = fleet.member_works(_ctx(url, w), key=int(rate * 1000), repeat=0, offsets=offsets, members=members)
    if members > 1:
        works[1].clock_skew_s = skew_s
    point = _timed(run, works)
    f = point.figures
    print(
        f"\nOpen loop, {members} members, {rate:,.0f} requests/s x {n:,} (Poisson), member 1's clock "
        f"{skew_s * 1e3:+.0f} ms off: merged send lag p50 {f['send_lag_ms_p50']:.3f} / p99 "
        f"{f['send_lag_ms_p99']:.3f} / max {f['send_lag_ms_max']:.3f} ms, client-bound: {f['client_bound']}, "
        f"{len(point.records):,} records merged of {n:,} scheduled"
    )
    print(
        "| member | injected skew (ms) | measured offset (ms) | clock round trip (ms) | send lag p50 / p99 (ms) "
        "| offset error (ms) | corrected send - due p50 / p99 (ms) | client-bound |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for m in point.members:
        mine = set(fleet.dealt(n, members, m.member, None))
        recs = [r for r in point.records if r.index in mine]
        lag = send_lag_figures([r.send_lag for r in recs])
        due = np.asarray([r.send_time - (point.start_time + r.scheduled_offset) for r in recs]) * 1e3
        skew = works[m.member].clock_skew_s * 1e3
        print(
            f"| {m.member} | {skew:+.0f} | {m.offset_s * 1e3:+.3f} | {m.rtt_s * 1e3:.3f} | "
            f"{lag['send_lag_ms_p50']:.3f} / {lag['send_lag_ms_p99']:.3f} | {m.offset_s * 1e3 + skew:+.3f} | "
            f"{np.percentile(due, 50):.3f} / {np.percentile(due, 99):.3f} | {m.figures['client_bound']} |"
        )


def celery_points(a: argparse.Namespace) -> None:
    """The open-loop and ingest points with members on Celery client workers (loopback Redis)."""
    from bakeoff.bench.fleet import fleet_celery  # noqa: PLC0415 - Celery only for --celery
    from tests.fleet_fixtures import client_workers, redis_server  # noqa: PLC0415 - pytest only for --celery

    names = [f"clients-{m}" for m in range(a.members)]
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp)) as url:
        os.environ.setdefault("BAKEOFF_SECRET_KEY", os.urandom(32).hex())  # both ends derive their keys from it
        os.environ["BAKEOFF_FLEET_BROKER"] = url
        with client_workers(url, names, Path(tmp), {}):
            print(f"\n--- members on {a.members} Celery client workers (redis on loopback) ---")
            with ScriptedServerProcess({"ttft_ms": 5, "itl_ms": 1, "tokens_per_chunk": 1, "output_tokens": 16}) as srv:
                open_loop(srv.url, a.members, a.rate, a.skew_ms / 1e3, run=fleet_celery.run_celery_fleet)
            script = {"ttft_ms": 0, "itl_ms": 0, "tokens_per_chunk": 1, "output_tokens": INGEST_OUT}
            with ScriptedServerProcess(script) as srv:
                ingest(srv.url, a.members, a.requests, " (Celery members)", run=fleet_celery.run_celery_fleet)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=2)
    ap.add_argument("--requests", type=int, default=2048, help="measured requests of each ingest point")
    ap.add_argument("--rate", type=float, default=400.0, help="open-loop requests/s")
    ap.add_argument("--skew-ms", type=float, default=250.0, help="member 1's injected clock skew")
    ap.add_argument("--celery", action="store_true", help="again with members on Celery client workers")
    a = ap.parse_args(argv)
    print(f"EMULATED, loopback; {os.cpu_count()} CPUs on this machine, shared with the server and other work")
    t0 = time.perf_counter()
    script = {"ttft_ms": 0, "itl_ms": 0, "tokens_per_chunk": 1, "output_tokens": INGEST_OUT}
    with ScriptedServerProcess(script) as srv:
        ingest(srv.url, 1, 256, " (warm-up)")
        one_tps, one_cpu = ingest(srv.url, 1, a.requests)
        fleet_tps, per_process = ingest(srv.url, a.members, a.requests)
    with ScriptedServerProcess({"ttft_ms": 5, "itl_ms": 1, "tokens_per_chunk": 1, "output_tokens": 16}) as srv:
        open_loop(srv.url, a.members, a.rate, a.skew_ms / 1e3)
    if a.celery:
        celery_points(a)
    planned = per_process * client_cores.HEADROOM
    need = math.ceil(RACK_TOKENS_S / planned)
    print(
        f"\nPer process, measured here: {per_process:,.0f} output tokens per client CPU-second (mean of "
        f"{a.members} members; 1 member alone: {one_cpu:,.0f}); {a.members} members / 1 = "
        f"{fleet_tps / one_tps:.2f}x wall throughput on this machine's cores.\n"
        f"On paper, a GB300 NVL72 serving gpt-oss-120b at {RACK_TOKENS_S:,.0f} tokens/s (MLPerf Inference v6.1 "
        f"Server, CoreWeave; mlcommons/inference_results_v6.1, copied 2026-11-30)\nneeds {RACK_TOKENS_S:,.0f} / "
        f"({per_process:,.0f} x {client_cores.HEADROOM:.0%} "
        f"headroom) = {need} member processes, one core each: {math.ceil(need / MEMBERS_PER_NODE)} client "
        f"node(s) of {MEMBERS_PER_NODE} member cores (the project's planning figure, "
        f"{client_cores.TOKENS_PER_CORE_S:,.0f} per core, gives "
        f"{math.ceil(RACK_TOKENS_S / (client_cores.TOKENS_PER_CORE_S * client_cores.HEADROOM))}).\n"
        "Caveat: 2 CPU cores shared by the server, the members and other work; one token per SSE chunk "
        "(a server sending several per chunk costs the client less per token); a client core of another "
        f"kind (the rack's own Grace cores) carries a different figure. Took {time.perf_counter() - t0:.0f} s."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
