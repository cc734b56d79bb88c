"""Speculative decoding in the emulator: verification steps, acceptance length, vLLM's spec-decode counters."""

from __future__ import annotations

import asyncio
import re
import statistics

import pytest
from emulator_fixtures import h100_8b, make_config, make_target, serve

from bakeoff.serving.emulator.engine import RooflineEngine, Sequence
from bakeoff.serving.emulator.speculation import Acceptance, chain_probability, for_target, mean_length
from bakeoff.twin.roofline import Roofline


def spec_target(time_scale: float = 0.05, **spec):
    return h100_8b(
        speculative={"method": "eagle3", "draft_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"} | spec,
        emulator={"time_scale": time_scale},
    )


def counter(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)}_total\{{[^}}]*\}} (\S+)$", text, re.M)
    assert m, f"{name}_total missing from /metrics"
    return float(m.group(1))


def test_pinned_acceptance_length_is_exact_on_average_from_metrics(run):
    """Pinned 2.99 at k=3: 2 accepted every step plus a 0.99 coin; /metrics gives AL = 1 + accepted/drafts."""
    t = spec_target(num_speculative_tokens=3, acceptance="pinned", acceptance_length=2.99)

    async def go():
        async with serve(make_config(t)) as s:
            body = {"prompt": "alpha bravo", "max_tokens": 300, "ignore_eos": True}
            await asyncio.gather(*(s.post("/v1/completions", json=body | {"prompt": f"p{i} x"}) for i in range(12)))
            return await (await s.get("/metrics")).text()

    text = run(go())
    drafts = counter(text, "vllm:spec_decode_num_drafts")
    assert drafts > 1000
    assert counter(text, "vllm:spec_decode_num_draft_tokens") == 3 * drafts
    al = 1 + counter(text, "vllm:spec_decode_num_accepted_tokens") / drafts
    assert al == pytest.approx(2.99, abs=0.02)
    assert counter(text, "vllm:generation_tokens") == 12 * 300


def test_streams_several_tokens_per_chunk(run):
    t = spec_target(1.0, num_speculative_tokens=3, acceptance="pinned", acceptance_length=3.0)  # real-time steps

    async def go():
        async with serve(make_config(t)) as s:
            body = {"prompt": "a b", "max_tokens": 91, "ignore_eos": True, "stream": True}
            raw = await (await s.post("/v1/completions", json=body)).read()
            return [e for e in raw.decode().split("\n\n") if e.startswith("data: {")]

    events = run(go())
    # the first token comes from the prefill step; then 3 tokens per verification step: 1 + 30 x 3 = 91
    assert len(events) == 31


def test_metrics_have_no_spec_counters_without_speculative(run):
    async def go():
        async with serve(make_config(make_target())) as s:
            return await (await s.get("/metrics")).text()

    assert "spec_decode" not in run(go())


def test_version_reports_speculation_as_emulated(run):
    t = spec_target(num_speculative_tokens=2, acceptance="real")

    async def go():
        async with serve(make_config(t)) as s:
            return await (await s.get("/version")).json()

    spec = run(go())["roofline"]["speculative"]
    assert spec["method"] == "eagle3" and spec["num_speculative_tokens"] == 2 and spec["acceptance"] == "real"
    assert "EMULATED" in spec["note"]


def test_real_acceptance_varies_per_step_around_its_mean():
    """Real mode: a per-position acceptance chain whose mean is the target AL, drawn per step."""
    a = Acceptance("mtp", 3, 2.4, "real", seed=7)
    draws = [a.accepted() for _ in range(20_000)]
    assert set(draws) == {0, 1, 2, 3}
    assert 1 + statistics.fmean(draws) == pytest.approx(2.4, abs=0.03)
    p = chain_probability(3, 1.4)
    assert p + p**2 + p**3 == pytest.approx(1.4)


def test_pinned_draws_are_seeded_and_bounded():
    one, two = Acceptance("mtp", 3, 2.5, "pinned", seed=1), Acceptance("mtp", 3, 2.5, "pinned", seed=1)
    first = [one.accepted() for _ in range(100)]
    assert first == [two.accepted() for _ in range(100)] and set(first) == {1, 2}
    with pytest.raises(ValueError, match="acceptance_length"):
        Acceptance("mtp", 3, 4.5, "pinned")


def test_real_mode_mean_follows_golden_curve_or_fallback():
    glm = make_target(
        name="glm",
        instance_type="BM.GPU.MI355X.8",
        model="glm-5.2",
        quantization="mxfp4",
        kv_cache_dtype="fp8",
        tensor_parallel=8,
        speculative={"method": "mtp", "num_speculative_tokens": 3},
    )
    assert mean_length(glm) == pytest.approx(2.99)  # InferenceX's golden curve, thinking on, 3 tokens
    llama = spec_target(num_speculative_tokens=2)
    assert mean_length(llama) == pytest.approx(1 + 0.6 * 2)  # no curve for Llama: the stated fallback
    assert for_target(make_target()) is None


def tiny() -> Roofline:
    """Weights read in 1 ms; compute 0.01 ms per token: decode is memory-bound at low batch."""
    return Roofline(
        params=1e9,
        active_params=1e9,
        bytes_per_param=1.0,
        kv_bytes_per_token=1e3,
        kv_capacity_tokens=100_000,
        prefill_flops_per_s=2e14,
        decode_bytes_per_s=1e12,
        max_num_seqs=64,
        context=10_000,
        layers=32,  # a draft step costs one of them
    )


def emulated_seconds_per_token(speculation: Acceptance | None, n_out: int = 200) -> float:
    async def go():
        e = RooflineEngine(tiny(), speculation=speculation)
        seqs = [Sequence(10, n_out, n_out) for _ in range(2)]
        e.waiting.extend(seqs)
        e.plan_step()  # prefill; first tokens
        e.finish_step()
        total = 0.0
        while e.running:
            total += e.plan_step()
            e.finish_step()
        return total / (n_out - 1)

    return asyncio.run(go())


def test_verify_steps_decode_faster_per_token_at_low_batch():
    plain = emulated_seconds_per_token(None)
    spec = emulated_seconds_per_token(Acceptance("mtp", 3, 3.0, "pinned"))
    assert spec < plain / 2  # 3 tokens per step for a little more than one step's weight read
