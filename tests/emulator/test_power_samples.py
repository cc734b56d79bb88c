"""The emulator's power.csv: written through the emulated NVML/amdsmi by the node's own library sampler,
idle before load, busier under load, its energy counter the integral of its power."""

from __future__ import annotations

import asyncio
import time

import pytest
from emulator_fixtures import make_config, make_target, serve

from bakeoff import catalog
from bakeoff.serving import energy, gpu_counters, power
from bakeoff.serving.emulator import power as emu_power
from bakeoff.serving.emulator.config import EmulatorConfigError, config_from_dict

TDP_W = catalog.gpus()["mi355x"].tdp_w
IDLE_W = 0.15 * TDP_W
INTERVAL_S = 0.1


def test_watts_model():
    assert emu_power.watts(1000.0, 0.0) == 150.0
    assert emu_power.watts(1000.0, 1.0) == 1000.0
    assert emu_power.watts(1000.0, 0.5) == 575.0
    assert emu_power.watts(1000.0, 3.0) == 1000.0 and emu_power.watts(1000.0, -1.0) == 150.0


def test_power_csv_needs_roofline():
    with pytest.raises(EmulatorConfigError, match="power_csv needs mode 'roofline'"):
        config_from_dict({"mode": "scripted", "power_csv": "power.csv"})


def test_samples_idle_then_loaded(run, tmp_path):
    """TP 2 x PP 2 = 4 GPUs; ~70 ms decode steps (time_scale 10) keep the engine busy for about a second."""
    csv_path = tmp_path / "power.csv"
    target = make_target(tensor_parallel=2, pipeline_parallel=2, emulator={"time_scale": 10.0})
    config = make_config(target, power_csv=str(csv_path), power_interval_s=INTERVAL_S)

    async def go():
        async with serve(config) as s:
            version = await (await s.get("/version")).json()
            await asyncio.sleep(5 * INTERVAL_S)
            start = time.time()
            body = {"prompt": "one two three", "max_tokens": 12, "ignore_eos": True}
            for resp in await asyncio.gather(*(s.post("/v1/completions", json=body) for _ in range(4))):
                assert resp.status == 200
            end = time.time()
            await asyncio.sleep(3 * INTERVAL_S)
            return version, start, end

    version, start, end = run(go())
    assert version["power"] == {
        "csv": str(csv_path),
        "interval_s": INTERVAL_S,
        "gpus": 4,
        "tdp_w": TDP_W,
        "idle_w": IDLE_W,
        "library": "amdsmi",
        "figures": "EMULATED",
    }
    text = csv_path.read_text()
    rows = power.parse_samples(text)
    assert len(rows) == len(text.splitlines()) and text.endswith("\n")  # every line complete
    assert {r["gpu"] for r in rows} == {0, 1, 2, 3}
    assert all(IDLE_W <= r["watts"] <= TDP_W for r in rows)

    before = [r["watts"] for r in rows if r["t"] < start]
    during = [r["watts"] for r in rows if start + INTERVAL_S < r["t"] <= end]
    after = [r["watts"] for r in rows if r["t"] > end + 2 * INTERVAL_S]
    assert len(before) >= 4 * 3 and set(before) == {IDLE_W}
    assert len(during) >= 4 * 3, f"load lasted {end - start:.2f} s"
    assert sum(during) / len(during) > IDLE_W + 0.5 * (TDP_W - IDLE_W)  # back-to-back steps: near TDP
    assert after and set(after) == {IDLE_W}

    assert {r["source"] for r in rows} == {"amdsmi=EMULATED"}  # an MI355X target: AMD's library path
    joules = power.energy_joules(rows, start, end)
    assert 0 < joules <= 4 * TDP_W * (end - start)
    assert joules > 4 * IDLE_W * (end - start - 2 * INTERVAL_S)
    # the counters cover the whole window, the trapezoids only between the samples inside it; at time_scale
    # 10 the counters count the emulated GPU's joules, a tenth of the wall clock's
    figures = energy.point_energy(rows, start, end, 4, time_scale=10.0)
    assert figures["energy_method"] == energy.COUNTERS
    assert joules < figures["energy_j"] * 10 <= 4 * TDP_W * (end - start)
    assert not figures["throttled"] and figures["node_power"] == energy.NODE_MISSING


def test_emulated_nvml_counter_is_the_integral_of_its_power():
    """Ten seconds, five of them busy: the counter holds 150 x 10 + 850 x 5 = 5750 J, by hand."""
    state = {"t": 100.0, "busy": 0.0}
    gpus = emu_power.EmulatedGpus(lambda _t: state["busy"], 1000.0, 2, now=lambda: state["t"])
    state.update(t=110.0, busy=5.0)
    nvml = emu_power.EmulatedNvml(gpus)
    assert nvml.nvmlDeviceGetTotalEnergyConsumption(0) == 5_750_000  # mJ
    reader = gpu_counters.NvmlReader(nvml)
    first = reader.read()
    state["t"] = 112.0  # two idle seconds
    second = reader.read()
    assert [r.gpu for r in first] == [0, 1] and [r.energy_j for r in first] == [5750.0, 5750.0]
    assert [r.watts for r in first] == [575.0, 575.0]  # half of the ten seconds busy, on every GPU alike
    assert [r.watts for r in second] == [150.0, 150.0] and second[0].energy_j == 6050.0


def test_a_time_scaled_emulator_counts_the_emulated_clocks_joules():
    """time_scale 0.25: ten wall seconds are forty of the GPU's, idle at 150 W: 6000 J, not 1500 J."""
    state = {"t": 0.0}
    gpus = emu_power.EmulatedGpus(lambda _t: 0.0, 1000.0, 1, time_scale=0.25, now=lambda: state["t"])
    state["t"] = 10.0
    assert gpus.joules() == pytest.approx(6000.0)
    # the point's window is then the wall window / 0.25, and its power the GPU's own 150 W
    rows = [
        {"t": 0.0, "gpu": 0, "watts": 150.0, "energy_j": 0.0},
        {"t": 10.0, "gpu": 0, "watts": 150.0, "energy_j": 6000.0},
    ]
    got = energy.point_energy(rows, 0.0, 10.0, 1, time_scale=0.25)
    assert got["energy_j"] == pytest.approx(6000.0) and got["power_w_per_gpu"] == pytest.approx(150.0)
