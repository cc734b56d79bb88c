"""Price and throughput at rack scale, by hand: every node billed, per GPU, per rack."""

from __future__ import annotations

import math

import pytest

from bakeoff.cost import rack_scale
from bakeoff.plan import Target


def test_rack_scale_figures_are_the_hand_arithmetic():
    t = Target(
        name="gb",
        provider="local",
        instance_type="BM.GPU.GB200.4",  # 64 USD/node-h in the catalog: 16 USD/GPU-h
        model="deepseek-r1",
        quantization="nvfp4",
        cluster={"rack": "gb200-nvl72", "nodes": 3, "decode": {"workers": 2, "tp": 4}},
    )
    r = rack_scale(t, output_tps=1200.0)
    assert r["gpus"] == 12 and r["usd_per_gpu_hour"] == pytest.approx(16.0)
    assert r["usd_per_target_hour"] == pytest.approx(3 * 64.0) and r["usd_per_rack_hour"] == pytest.approx(72 * 16.0)
    assert r["output_tps_per_gpu"] == pytest.approx(100.0) and r["output_tps_per_rack"] == pytest.approx(7200.0)
    assert r["usd_per_m_output"] == pytest.approx(16.0 / (100.0 * 3600) * 1e6)
    assert r["rack"] == "gb200-nvl72"
    one = Target(name="b", provider="local", instance_type="BM.GPU.B200.8", model="deepseek-r1", quantization="fp8")
    assert rack_scale(one, 800.0)["rack"] == "72 GPUs of 8-GPU nodes"
    assert math.isnan(rack_scale(one, 0.0)["usd_per_m_output"])  # nothing served: no price
