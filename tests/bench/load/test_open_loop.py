"""Open-loop pacing: sends never leave early, a stall of the client's event loop is seen and reported,
lateness is stored per request and summarized, and the client leaves no garbage cycles behind.

Timing assertions are lower bounds on an injected stall, never bounds on the absence of lag, so a
loaded CI machine cannot make them fail."""

import asyncio
import gc
import time

import numpy as np
import pytest

from bakeoff.bench.client.monitor import STALL_BOUND_MS, LoopMonitor
from bakeoff.bench.client.prompts import RequestSpec
from bakeoff.bench.client.runtime import gc_paused, run_async
from bakeoff.bench.client.transport import StreamingClient
from bakeoff.bench.load.loadgen import PointId, Sender, open_loop, wait_until
from bakeoff.bench.metrics.summary import summarize
from bakeoff.plan import Workload
from bakeoff.serving.emulator.scripted import ScriptedServerProcess, arrival_stats

STALL_S = 0.050


@pytest.fixture(scope="module")
def server():
    with ScriptedServerProcess({"ttft_ms": 2, "itl_ms": 1, "tokens_per_chunk": 1, "output_tokens": 4}) as s:
        yield s


def _sender(client, n):
    w = Workload(name="ol", input_len=8, output_len=4, load="rate", rates=[200])
    return Sender(
        client,
        w,
        "scripted",
        PointId("r", "t", w.name, 200, 0),
        [RequestSpec(8, 4, prompt="a b c d e f g h")] * n,
        0,
        30,
    )


def test_a_stall_on_the_event_loop_is_detected_and_reported(server):
    """A callback that blocks the loop for 50 ms during an open-loop point: the point records a
    loop stall of at least 50 ms, the sends due meanwhile as late, and flags the point."""
    offsets = np.arange(60) * 0.005  # a send due every 5 ms, so some fall inside the stall

    async def point():
        client = StreamingClient(server.url, timeout_s=30)
        try:
            sender = _sender(client, len(offsets))
            await client.warm(8)
            sender.start_clock()
            loop = asyncio.get_running_loop()
            t_stall = loop.time() + 0.1
            loop.call_at(t_stall, time.sleep, STALL_S)  # the deliberate blocking call
            with LoopMonitor() as mon:
                sent = await open_loop(sender.send, offsets, t0=sender.t0)
        finally:
            await client.close()
        recs = sender.records(sent)
        return recs, mon.figures([r.send_lag for r in recs])

    recs, figures = run_async(point())
    assert figures["loop_stall_ms_max"] >= STALL_S * 1e3 and figures["client_stalled"] and figures["client_bound"]
    s = summarize(recs, gpus=1, emulated=False, load_mode="rate", rate=200, client=figures)
    assert s["completed"] == 60
    assert s["loop_stall_ms_max"] >= STALL_S * 1e3 > STALL_BOUND_MS
    assert s["client_stalled"] is True and s["client_bound"] is True
    # the send due 5 ms into the stall left at its end: lateness stored per request and summarized
    assert max(r.send_lag for r in recs) >= STALL_S - 0.006
    assert s["send_lag_ms_max"] >= (STALL_S - 0.006) * 1e3
    # TTFT from the scheduled send carries that lateness; TTFT from the actual send does not
    assert s["ttft_from_schedule_ms_p99"] > s["ttft_ms_p99"]


def test_sends_never_leave_before_their_schedule():
    """uvloop timers round to the nearest ms: a plain sleep can end 0.5 ms early."""
    offsets = np.cumsum(np.random.default_rng(3).exponential(0.002, 200))
    sent = {}

    class R:
        def __init__(self, i):
            self.index = i

    async def send(i, scheduled=None):
        sent[i] = time.perf_counter()
        return R(i)

    async def go():
        t0 = time.perf_counter() + 0.01
        out = await open_loop(send, offsets, t0=t0)
        return t0, out

    t0, out = run_async(go())
    assert [r.index for r in out] == list(range(200))
    assert min(sent[i] - (t0 + offsets[i]) for i in range(200)) >= 0


def test_wait_until_is_never_early():
    async def go():
        due = [time.perf_counter() + d for d in (0.0003, 0.0011, 0.0017, 0.004)]
        late = []
        for d in due:
            await wait_until(d)
            late.append(time.perf_counter() - d)
        return late

    assert min(run_async(go())) >= 0


def test_garbage_collection_is_paused_during_a_point_and_resumed_after():
    seen = []

    async def send(i, scheduled=None):
        seen.append(gc.isenabled())
        return type("R", (), {"index": i})()

    assert gc.isenabled()
    run_async(open_loop(send, [0.0, 0.001, 0.002]))
    assert seen == [False, False, False] and gc.isenabled()
    with gc_paused():
        with gc_paused():  # nested: the inner one leaves the outer pause alone
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_failed_send_fails_the_point_and_leaves_nothing_running():
    started = []

    async def send(i, scheduled=None):
        started.append(i)
        if i == 1:
            raise RuntimeError("boom")
        await asyncio.sleep(10)

    async def go():
        with pytest.raises(RuntimeError, match="boom"):
            await open_loop(send, [0.0, 0.001, 0.002])
        await asyncio.sleep(0)
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    assert run_async(go()) == [] and started[:2] == [0, 1]


@pytest.mark.slow
def test_finished_requests_leave_no_reference_cycles(server):
    """A request's parser, callbacks and state are freed by reference counting: with collection
    paused for a whole point, garbage left in cycles would only grow memory (and, collected, stall
    the loop)."""

    async def go():
        client = StreamingClient(server.url, timeout_s=30)
        try:
            sender = _sender(client, 40)
            await client.warm(4)
            for i in range(4):  # warm the code paths, then count
                await sender.send(i)
            gc.collect()
            gc.disable()
            try:
                for i in range(40):
                    await sender.send(i)
                return gc.collect()
            finally:
                gc.enable()
        finally:
            await client.close()

    assert run_async(go()) < 40  # fewer than one object per request


def test_point_summarizes_lateness_and_latency_from_the_schedule():
    """send_lag = start_offset - scheduled_offset; TTFT from schedule = send_lag + TTFT (exact)."""
    base = {
        "run_id": "r",
        "target": "t",
        "workload": "w",
        "concurrency": 10,
        "repeat": 0,
        "warmup": False,
        "output_tokens": 4,
        "requested_input_len": 8,
        "chunk_offsets": [],
    }
    rows = [
        {
            **base,
            "index": i,
            "scheduled_offset": i * 0.1,
            "start_offset": i * 0.1 + lag,
            "ttft": 0.020,
            "e2e": 0.050,
            "elapsed": 0.050,
        }
        for i, lag in enumerate([0.0, 0.001, 0.002, 0.030])
    ]
    s = summarize(rows, gpus=1, emulated=False, load_mode="rate", rate=10)
    assert s["send_lag_ms_max"] == pytest.approx(30.0)
    assert s["send_lag_ms_p50"] == pytest.approx(1.5)
    assert s["ttft_ms_p50"] == pytest.approx(20.0)
    assert s["ttft_from_schedule_ms_p50"] == pytest.approx(21.5)
    assert s["ttft_from_schedule_ms_p99"] == pytest.approx(20.0 + float(np.percentile([0, 1, 2, 30], 99)))
    assert s["e2e_from_schedule_ms_p99"] == pytest.approx(50.0 + float(np.percentile([0, 1, 2, 30], 99)))
    closed = summarize([{**r, "scheduled_offset": None} for r in rows], gpus=1, emulated=False)
    assert np.isnan(closed["send_lag_ms_max"]) and np.isnan(closed["ttft_from_schedule_ms_p99"])
    assert closed["client_stalled"] is False


def test_scripted_server_reports_arrival_rate_and_burstiness():
    even = arrival_stats([i * 0.01 for i in range(101)])
    assert even["arrivals"] == 101 and even["arrival_rate_rps"] == pytest.approx(100) and even["arrival_cv"] < 1e-6
    gaps = np.random.default_rng(0).exponential(0.01, 20000)
    poisson = arrival_stats(list(np.cumsum(gaps)))
    assert poisson["arrival_cv"] == pytest.approx(1.0, abs=0.03)
    assert arrival_stats([1.0])["arrival_cv"] is None
