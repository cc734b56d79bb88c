"""Runs measured against the roofline emulator, for the bench tests that read its figures back."""

from __future__ import annotations

from pathlib import Path

from bakeoff.bench.run import run_workload
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import Slo, Target, Workload


def emulated_target(**kw) -> Target:
    """An 8B model on an emulated H100 whose clock runs 20 times faster (override any field by keyword)."""
    base = dict(
        name="h100-8b",
        provider="local",
        instance_type="p5.48xlarge",
        model="llama-3.1-8b",
        quantization="bf16",
        kv_cache_dtype="auto",
        tensor_parallel=1,
        emulator={"time_scale": 0.05},
    )
    return Target(**(base | kw))


def run_points(url: str, target: Target, workload: Workload, out: Path) -> list[dict]:
    """Measure ``workload`` against the emulator at ``url``; the point rows."""
    ep = Endpoint(target=target.slug, base_url=url, model=target.served_model_id, stack="vllm", emulated=True)
    return run_workload(ep, target, workload, Slo(), out, "r", None, True, provenance=False, calibrate=False)
