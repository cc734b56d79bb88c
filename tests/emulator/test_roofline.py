"""Roofline arithmetic on hand-computed numbers, and the scheduler's admission rules.

Catalog figures used (hardware.yaml): H100 80 GB, 3.35 TB/s, 989 dense BF16 TFLOPS; B200 179 GiB
usable. Models (models.yaml): Llama 3.1 8B = 8.03e9 params, 32 layers, 8 KV heads x 128.
"""

from __future__ import annotations

import asyncio

import pytest
from emulator_fixtures import make_target

from bakeoff.serving.emulator.engine import Rejected, RooflineEngine, Sequence
from bakeoff.twin.roofline import Roofline


def h100_8b(**emu):
    t = make_target(
        name="h100-8b",
        instance_type="p5.48xlarge",
        model="llama-3.1-8b",
        quantization="bf16",
        kv_cache_dtype="auto",
        tensor_parallel=1,
        emulator={"prefill_efficiency": 0.5, "decode_efficiency": 0.5} | emu,
    )
    return Roofline.for_target(t)


def test_kv_capacity_and_sizes():
    r = h100_8b()
    assert r.kv_bytes_per_token == 131072  # 2 x 32 x 8 x 128 x 2 bytes
    # (80e9 x 0.9 - 8.03e9 x 2) / 131072 = 55.94e9 / 131072 = 426788.3
    assert r.kv_capacity_tokens == 426788


def test_prefill_is_compute_bound():
    # 2 x 8.03e9 x 1000 FLOPs / (989e12 x 0.5) = 32.477 ms
    assert h100_8b().prefill_s(1000) == pytest.approx(0.0324772, rel=1e-5)


def test_decode_step_is_memory_bound():
    # (16.06e9 weights + 1000 x 131072 KV) / (3.35e12 x 0.5) = 9.6663 ms
    assert h100_8b().decode_step_s(1, 1000) == pytest.approx(0.00966631, rel=1e-5)
    assert h100_8b().decode_step_s(0, 0) == 0.0


def test_decode_step_turns_compute_bound_at_large_batch():
    r = h100_8b(prefill_efficiency=0.05, decode_efficiency=1.0)
    # compute 2 x 8.03e9 x 256 / (989e12 x 0.05) = 83.14 ms > memory 16.06e9 / 3.35e12 = 4.79 ms
    assert r.decode_step_s(256, 0) == pytest.approx(0.0831418, rel=1e-5)


def test_tensor_parallel_divides_time_and_adds_memory():
    t = make_target(
        name="h100-70b",
        instance_type="p5.48xlarge",
        model="llama-3.1-70b",
        quantization="bf16",
        kv_cache_dtype="auto",
        tensor_parallel=8,
        emulator={"decode_efficiency": 0.5},
    )
    r = Roofline.for_target(t)
    # (8 x 80e9 x 0.9 - 141.2e9) / (2 x 80 x 8 x 128 x 2) = 434.8e9 / 327680 = 1326904.3
    assert r.kv_capacity_tokens == 1326904
    # 141.2e9 / (3.35e12 x 8 x 0.5) = 10.537 ms
    assert r.decode_step_s(1, 0) == pytest.approx(0.0105373, rel=1e-5)


def test_usable_gib_and_fp8_kv():
    t = make_target(name="b200", instance_type="BM.GPU.B200.8", tensor_parallel=1)  # 70B fp8, kv fp8
    # (179 x 2^30 x 0.9 - 70.6e9) / (2 x 80 x 8 x 128 x 1) = 102379807846 / 163840 = 624876.8
    assert Roofline.for_target(t).kv_capacity_tokens == 624876


def test_moe_reads_only_routed_experts():
    t = make_target(
        name="oss",
        instance_type="p5.48xlarge",
        model="gpt-oss-120b",
        quantization="mxfp4",
        tensor_parallel=1,
        emulator={"decode_efficiency": 0.5},
    )
    r = Roofline.for_target(t)
    # MXFP4: 4 bits + an E8M0 scale per 32 = 0.53125 bytes/param
    # 1 seq: 5.1e9 x 0.53125 / 1.675e12 = 1.6175 ms; 4 seqs: 4x that; 100 seqs: all 117e9 params = 37.108 ms
    assert r.decode_step_s(1, 0) == pytest.approx(0.00161754, rel=1e-5)
    assert r.decode_step_s(4, 0) == pytest.approx(0.00647015, rel=1e-5)
    assert r.decode_step_s(100, 0) == pytest.approx(0.0371082, rel=1e-5)


def test_model_that_does_not_fit_is_refused():
    t = make_target(
        name="too-big", instance_type="p5.48xlarge", model="llama-3.1-405b", quantization="bf16", tensor_parallel=1
    )
    with pytest.raises(ValueError, match="raise tensor_parallel"):
        Roofline.for_target(t)


def test_mixed_step_costs_its_heavier_side():
    r = h100_8b()
    # 20 prompt tokens + 4 decoding: compute 2 x 8.03e9 x 24 / 4.945e14 = 0.78 ms < memory
    # (16.06e9 + 4000 x 131072) / 1.675e12 = 9.9011 ms
    assert r.step_s(20, 4, 4000) == pytest.approx(0.00990105, rel=1e-5)
    # 4000 prompt tokens: compute 2 x 8.03e9 x 4004 / 4.945e14 = 130.039 ms dominates
    assert r.step_s(4000, 4, 4000) == pytest.approx(0.1300389, rel=1e-5)


def test_batched_token_budget_from_engine_args():
    t = make_target(engine_args=["--max-num-batched-tokens", "2048"])
    assert Roofline.for_target(t).max_num_batched_tokens == 2048
    assert Roofline.for_target(make_target(engine_args=["--max-num-batched-tokens=512"])).max_num_batched_tokens == 512
    assert Roofline.for_target(make_target()).max_num_batched_tokens == 8192


def tiny(capacity: int, max_num_seqs: int = 8, budget: int = 8192) -> Roofline:
    """Weights read in 1 ms; 0.01 ms of compute per token; 1e5 KV bytes per token."""
    return Roofline(
        params=1e9,
        active_params=1e9,
        bytes_per_param=1.0,
        kv_bytes_per_token=1e5,
        kv_capacity_tokens=capacity,
        prefill_flops_per_s=2e14,
        decode_bytes_per_s=1e12,
        max_num_seqs=max_num_seqs,
        context=10_000,
        max_num_batched_tokens=budget,
    )


def test_scheduler_step_accounting():
    async def go():
        e = RooflineEngine(tiny(1000))
        a, b = Sequence(100, 3, 10), Sequence(50, 1, 10)
        e.waiting.extend([a, b])
        first = e.plan_step()  # both admitted and prefilled: 150 tokens, nothing decoding yet
        e.finish_step()
        second = e.plan_step()  # a decodes alone (b finished with its single token)
        return first, second, e, a, b

    first, second, e, a, b = asyncio.run(go())
    assert first == pytest.approx(2 * 1e9 * 150 / 2e14)  # compute 1.5 ms > weights 1 ms
    assert b.done and b.produced == 1 and a.produced == 1
    assert second == pytest.approx((1e9 + 101 * 1e5) / 1e12)  # weights + a's 101 KV tokens
    assert e.running == [a] and e.reserved == 110 and e.kv_tokens == 101


def test_long_prompts_are_prefilled_in_chunks():
    """Budget 64 tokens per step: a decoding sequence takes 1, the 100-token prompt the rest."""

    async def go():
        e = RooflineEngine(tiny(1000, budget=64))
        d = Sequence(1, 10, 10)
        e.waiting.append(d)
        e.plan_step()
        e.finish_step()  # d has its first token and now decodes
        a = Sequence(100, 5, 5)
        e.waiting.append(a)
        steps = []
        for _ in range(3):
            steps.append(e.plan_step())
            e.finish_step()
            steps.append((a.prefilled, a.produced, d.produced))
        return steps

    s = asyncio.run(go())
    assert s[1] == (63, 0, 2) and s[3] == (100, 1, 3) and s[5] == (100, 2, 4)
    assert s[0] == pytest.approx(max(2e9 * 64 / 2e14, (1e9 + 2 * 1e5) / 1e12))  # 1 ms: weights + d's 2 KV tokens


def test_running_sequences_share_every_step():
    """Continuous batching: three requests of 5 tokens take 5 steps together, not 15."""

    async def go():
        e = RooflineEngine(tiny(1000))
        seqs = [Sequence(10, 5, 5) for _ in range(3)]
        e.waiting.extend(seqs)
        steps = 0
        while e.running or e.waiting:
            e.plan_step()
            e.finish_step()
            steps += 1
        return steps, seqs

    steps, seqs = asyncio.run(go())
    assert steps == 5 and all(s.produced == 5 and s.done for s in seqs)


def test_kv_capacity_makes_requests_wait():
    async def go():
        e = RooflineEngine(tiny(capacity=100))
        seqs = [Sequence(20, 20, 20) for _ in range(3)]  # each reserves 40 of 100 KV tokens
        e.waiting.extend(seqs)
        e.plan_step()
        admitted, waiting = len(e.running), len(e.waiting)
        for _ in range(20):  # first two finish after 20 tokens
            e.finish_step()
            e.plan_step()
        return admitted, waiting, e

    admitted, waiting, e = asyncio.run(go())
    assert (admitted, waiting) == (2, 1)
    assert len(e.running) == 1 and not e.waiting and e.reserved == 40


def test_max_num_seqs_makes_requests_wait():
    async def go():
        e = RooflineEngine(tiny(capacity=10_000, max_num_seqs=2))
        e.waiting.extend(Sequence(1, 5, 5) for _ in range(5))
        e.plan_step()
        return len(e.running), len(e.waiting)

    assert asyncio.run(go()) == (2, 3)


def test_requests_that_can_never_fit_are_rejected():
    e = RooflineEngine(tiny(capacity=100))
    with pytest.raises(Rejected, match="KV cache"):
        e.check(60, 50)
    with pytest.raises(Rejected, match="maximum context length"):
        e.check(9_000, 2_000)
    e.check(50, 50)


def test_a_gpu_the_catalog_does_not_know_is_refused_by_name():
    """A static endpoint's described hardware has no figures: the roofline says so, not an AttributeError."""
    from tests.providers.cloud_helpers import described

    t = described().targets[0]
    with pytest.raises(ValueError, match=r"targets\.[\w-]+\.hardware: .*RTX 6000 Ada is not one; give the target"):
        Roofline.for_target(t)


def test_moe_weights_read_are_the_expected_distinct_experts_and_the_twin_reads_them_the_same_way():
    from bakeoff import catalog
    from bakeoff.twin import operating

    gpu, model = catalog.gpus()["b200"], catalog.models()["deepseek-r1"]
    emu = Roofline.for_parts(
        gpu, model, "nvfp4", tp=8, gpus_used=8, prefill_efficiency=1.0, decode_efficiency=1.0, max_num_seqs=256
    )
    e, k = model.experts, model.experts_per_token
    assert e and k and emu.dense_params is not None
    routed = emu.params - emu.dense_params
    for tokens in (1, 8, 64, 1024):
        hit = 1 - (1 - k / e) ** tokens  # two tokens sharing an expert read it once
        assert emu.weights_read(tokens) == pytest.approx((emu.dense_params + routed * hit) * emu.bytes_per_param)
    # fewer bytes than k x T experts once tokens share experts, never more than every weight
    linear = emu.dense_params + min(routed, (emu.active_params - emu.dense_params) * 8)
    assert emu.weights_read(8) < linear * emu.bytes_per_param
    assert emu.weights_read(100_000) <= emu.params * emu.bytes_per_param
    # the twin's roofline is the emulator's: the same weights for the same tokens
    twin = operating.roofline(gpu, model, "nvfp4", 8)
    assert [twin.weights_read(t) for t in (1, 8, 64)] == [emu.weights_read(t) for t in (1, 8, 64)]
