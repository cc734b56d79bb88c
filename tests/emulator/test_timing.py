"""Timing is roughly what the model says. Bounds are loose on purpose: exact figures are measured by
benchmarks/emulator_fidelity.py, not asserted here."""

from __future__ import annotations

import asyncio
import time

from emulator_fixtures import h100_8b, make_config, make_target, serve


async def timed_stream(s, path, body):
    t0 = time.perf_counter()
    r = await s.post(path, json=body | {"stream": True})
    marks = []
    async for line in r.content:
        if line.startswith(b"data: {"):
            marks.append(time.perf_counter() - t0)
    return marks


def test_scripted_ttft_and_itl(run):
    cfg = {"mode": "scripted", "scripted": {"ttft_ms": 60, "itl_ms": 8, "tokens_per_chunk": 1}}

    async def go():
        async with serve(cfg) as s:
            return await timed_stream(s, "/v1/completions", {"prompt": "x", "max_tokens": 21, "ignore_eos": True})

    marks = run(go())
    assert len(marks) == 21
    assert 0.055 <= marks[0] <= 0.5  # TTFT 60 ms
    assert 0.14 <= marks[-1] - marks[0] <= 0.8  # 20 gaps x 8 ms = 160 ms


def test_scripted_multi_token_chunks(run):
    cfg = {"mode": "scripted", "scripted": {"ttft_ms": 0, "itl_ms": 5, "tokens_per_chunk": 4}}

    async def go():
        async with serve(cfg) as s:
            r = await (
                await s.post(
                    "/v1/completions", json={"prompt": "x", "max_tokens": 10, "ignore_eos": True, "stream": True}
                )
            ).read()
            return [e for e in r.decode().split("\n\n") if e.startswith("data: {")]

    events = run(go())
    assert len(events) == 3  # 4 + 4 + 2 tokens


def test_scripted_deadlines_do_not_drift_under_concurrency(run):
    """64 concurrent streams end about when the script says, not later as slop accumulates."""
    cfg = {"mode": "scripted", "scripted": {"ttft_ms": 20, "itl_ms": 5, "tokens_per_chunk": 1}}

    async def go():
        async with serve(cfg) as s:
            body = {"prompt": "x", "max_tokens": 41, "ignore_eos": True}
            return await asyncio.gather(*(timed_stream(s, "/v1/completions", body) for _ in range(64)))

    for marks in run(go()):
        assert len(marks) == 41
        assert 0.215 <= marks[-1] <= 1.0  # 20 + 40 x 5 = 220 ms


def test_roofline_timing_follows_the_model(run):
    """H100 / Llama 3.1 8B bf16 at decode efficiency 0.5: ~9.6 ms per step, prefill 0.03 ms/token."""
    target = h100_8b(emulator={"prefill_efficiency": 0.5, "decode_efficiency": 0.5})

    async def go():
        async with serve(make_config(target)) as s:
            body = {"prompt": " ".join(["w"] * 1000), "max_tokens": 21, "ignore_eos": True}
            return await timed_stream(s, "/v1/completions", body)

    one = run(go())
    assert 0.030 <= one[0] <= 0.5  # prefill 32.5 ms
    assert 0.17 <= one[-1] - one[0] <= 1.0  # 20 steps x 9.7 ms = 194 ms


def test_time_scale_stretches_delays(run):
    # MI355X 70B fp8 TP8, decode efficiency 0.65: 70.6e9 / (8e12 x 8 x 0.65) = 1.70 ms/step -> 17.0 ms
    slow = make_target(emulator={"time_scale": 10.0})

    async def go():
        async with serve(make_config(slow)) as s:
            return await timed_stream(s, "/v1/completions", {"prompt": "a b", "max_tokens": 11, "ignore_eos": True})

    marks = run(go())
    assert 0.15 <= marks[-1] - marks[0] <= 1.0  # 10 steps x 17.0 ms = 170 ms
