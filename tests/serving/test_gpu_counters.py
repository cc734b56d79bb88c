"""The vendors' library paths behind fakes that follow each library's documented API, the energy of a point
from their counters checked by hand, and the recorded-output fallbacks."""

from __future__ import annotations

import inspect
import re
from enum import IntEnum
from pathlib import Path

import pytest

from bakeoff.serving import energy, gpu_counters, power

FIXTURES = Path(__file__).parent / "fixtures"


class NVMLError(Exception):
    """pynvml raises NVMLError (with a return code) for a query the GPU does not support."""


class FakePynvml:
    """nvidia-ml-py's pynvml: nvmlDeviceGetTotalEnergyConsumption in mJ since the driver loaded,
    nvmlDeviceGetPowerUsage in mW, clocks in MHz, temperature in °C, throttle reasons a bit mask."""

    def __init__(self, mj: list[list[int]], mw: list[int], reasons: list[int]) -> None:
        self.mj, self.mw, self.reasons, self.t, self.inited = mj, mw, reasons, 0, False

    def nvmlInit(self):
        self.inited = True

    def nvmlDeviceGetCount(self):
        assert self.inited, "pynvml: nvmlInit first"
        return len(self.mw)

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"handle-{i}"

    def nvmlSystemGetNVMLVersion(self):
        return "12.580.82.07"

    def _i(self, h):
        return int(h.split("-")[1])

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return self.mj[self.t][self._i(h)]

    def nvmlDeviceGetPowerUsage(self, h):
        return self.mw[self._i(h)]

    def nvmlDeviceGetClockInfo(self, h, clock_type):
        assert clock_type == 1  # NVML_CLOCK_SM
        return 1980

    def nvmlDeviceGetTemperature(self, h, sensor):
        if self._i(h) == 1:
            raise NVMLError("Not Supported")
        return 61

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return self.reasons[self._i(h)]


class AmdSmiLibraryException(Exception):
    pass


class FakeAmdsmi:
    """AMD's amdsmi: amdsmi_get_energy_count returns the accumulator (``energy_accumulator`` from ROCm 6.1,
    ``power`` before) and ``counter_resolution`` in µJ; amdsmi_get_power_info in W, "N/A" where unsupported."""

    class AmdSmiClkType(IntEnum):
        GFX = 0

    class AmdSmiTemperatureType(IntEnum):
        EDGE = 0
        HOTSPOT = 1

    class AmdSmiTemperatureMetric(IntEnum):
        CURRENT = 0

    def __init__(self, ticks: list[int], key: str) -> None:
        self.ticks, self.key = ticks, key

    def amdsmi_init(self):
        pass

    def amdsmi_get_processor_handles(self):
        return ["p0"]

    def amdsmi_get_lib_version(self):
        return {"year": 25, "major": 3, "minor": 0, "release": 0}

    def amdsmi_get_energy_count(self, h):
        return {self.key: self.ticks.pop(0), "counter_resolution": 15.3, "timestamp": 1}

    def amdsmi_get_power_info(self, h):
        return {"current_socket_power": "N/A", "socket_power": 742, "average_socket_power": "N/A"}

    def amdsmi_get_clock_info(self, h, clk):
        return {"clk": 2100, "min_clk": 500, "max_clk": 2400, "clk_locked": False, "clk_deep_sleep": False}

    def amdsmi_get_temp_metric(self, h, sensor, metric):
        raise AmdSmiLibraryException("AMDSMI_STATUS_NOT_SUPPORTED")


def _sample(reader, path, times):
    sampler = gpu_counters.CounterSampler(reader, path)
    for t in times:
        sampler.sample(now=t)
    sampler.close()
    return power.parse_samples(path.read_text())


def test_nvml_energy_is_the_counter_difference_per_gpu(tmp_path):
    # two GPUs read at 100, 101, 102 s: GPU0 gains 700 J then 700 J, GPU1 500 J then 300 J
    nvml = FakePynvml(
        mj=[[1_000_000, 2_000_000], [1_700_000, 2_500_000], [2_400_000, 2_800_000]],
        mw=[700_000, 400_000],
        reasons=[0x1, 0x4 | 0x40],  # GPU0 idle (not a slowdown); GPU1 power cap and HW thermal
    )
    reader = gpu_counters.NvmlReader(nvml)
    assert reader.source == "nvml=12.580.82.07"
    times = [100.0, 101.0, 102.0]
    sampler = gpu_counters.CounterSampler(reader, tmp_path / "power.csv")
    for i, t in enumerate(times):
        nvml.t = i
        sampler.sample(now=t)
    sampler.close()
    rows = power.parse_samples((tmp_path / "power.csv").read_text())
    assert len(rows) == 6 and rows[0]["energy_j"] == 1000.0 and rows[1]["watts"] == 400.0
    # window 100.5 .. 102 s: GPU0 2400 - 1350 = 1050 J (interpolated at 100.5 s), GPU1 2800 - 2250 = 550 J
    got = energy.point_energy(rows, 100.5, 102.0, gpus=2)
    assert got["energy_method"] == energy.COUNTERS
    assert got["energy_j"] == pytest.approx(1050.0 + 550.0)
    assert got["power_w_per_gpu"] == pytest.approx(1600.0 / 2 / 1.5)
    assert got["energy_library"] == "nvml=12.580.82.07" and got["energy_sample_s"] == 1.0
    assert got["throttled"] and got["throttle_reasons"] == "hw_thermal+sw_power_cap"
    assert got["node_power_w"] is None and got["node_power"] == energy.NODE_MISSING
    # GPU 0 alone: idle is not a slowdown
    assert energy.point_energy(rows, 100.5, 102.0, gpus=1)["throttled"] is False


def test_nvml_unsupported_field_is_blank_not_a_lost_sample():
    nvml = FakePynvml(mj=[[5_000, 6_000]], mw=[100_000, 90_000], reasons=[0, 0])
    readings = gpu_counters.NvmlReader(nvml).read()
    assert readings[0].temp_c == 61 and readings[1].temp_c is None
    assert gpu_counters.row(1.0, readings[1], "nvml=x") == "1.000000,1,90.00,6.000,1980,,,nvml=x\n"


@pytest.mark.parametrize("key", ["energy_accumulator", "power"])  # ROCm >= 6.1 and earlier
def test_amdsmi_energy_is_accumulator_times_resolution(tmp_path, key):
    # ticks of 15.3 µJ: 1e8 ticks = 1530 J; +4e7 ticks = +612 J per second
    amd = FakeAmdsmi([100_000_000, 140_000_000, 180_000_000], key)
    reader = gpu_counters.AmdsmiReader(amd)
    assert reader.source == "amdsmi=25.3.0.0"
    rows = _sample(reader, tmp_path / "power.csv", [10.0, 11.0, 12.0])
    assert [r["energy_j"] for r in rows] == pytest.approx([1530.0, 2142.0, 2754.0])
    assert rows[0]["watts"] == 742.0  # socket_power; "N/A" fields are skipped
    got = energy.point_energy(rows, 10.0, 12.0, gpus=1)
    assert got["energy_j"] == pytest.approx(1224.0) and got["power_w_per_gpu"] == pytest.approx(612.0)
    assert got["energy_method"] == energy.COUNTERS and not got["throttled"]


def test_cli_rows_fall_back_to_power_samples():
    # nvidia-smi's sampler: epoch_s,gpu,watts, no counters: mean W x GPUs x window
    rows = power.parse_samples("10.0,0,400\n11.0,0,600\n10.0,1,300\n11.0,1,300\n")
    got = energy.point_energy(rows, 10.0, 11.0, gpus=2)
    assert got["energy_method"] == energy.SAMPLES and got["energy_library"] == "cli"
    assert got["power_w_per_gpu"] == pytest.approx((500.0 + 300.0) / 2)
    assert got["energy_j"] == pytest.approx(800.0)


def test_a_counter_that_goes_back_falls_back_to_power_samples():
    """A driver reload resets NVML's counter: that GPU's difference would be negative."""
    text = "10.0,0,500,9000,,,,nvml=1\n11.0,0,500,10,,,,nvml=1\n12.0,0,500,510,,,,nvml=1\n"
    got = energy.point_energy(power.parse_samples(text), 10.0, 12.0, gpus=1)
    assert got["energy_method"] == energy.SAMPLES and got["energy_j"] == pytest.approx(1000.0)


def test_node_power_rows_are_averaged_and_never_counted_as_a_gpu(tmp_path):
    nvml = FakePynvml(mj=[[0], [1_000_000]], mw=[1_000_000], reasons=[0])
    reader = gpu_counters.NvmlReader(nvml)
    node = iter([6000.0, 7000.0])
    sampler = gpu_counters.CounterSampler(reader, tmp_path / "p.csv", node=lambda: next(node))
    for i, t in enumerate((0.0, 1.0)):
        nvml.t = i
        sampler.sample(now=t)
    sampler.close()
    rows = power.parse_samples((tmp_path / "p.csv").read_text())
    got = energy.point_energy(rows, 0.0, 1.0, gpus=1)
    assert got["energy_j"] == pytest.approx(1000.0)  # the node's 6-7 kW is not GPU energy
    assert got["node_power_w"] == pytest.approx(6500.0) and got["node_power"] == "measured, IPMI DCMI"
    assert [p[1] for p in energy.power_trace(rows, 0.0, 1)] == [-1, -1, 0, 0]


def test_dcmi_recorded_outputs():
    assert gpu_counters.parse_dcmi_power((FIXTURES / "ipmitool_dcmi_power_reading.txt").read_text()) == 2712.0
    # a BMC whose power measurement is deactivated gives figures that are not a reading
    deactivated = (FIXTURES / "ipmitool_dcmi_power_reading_deactivated.txt").read_text()
    assert gpu_counters.parse_dcmi_power(deactivated) is None
    assert gpu_counters.parse_dcmi_power("Error: DCMI command failed\n") is None


def test_the_agents_thread_samples_the_library_where_it_loads(tmp_path, monkeypatch):
    """`bakeoff agent --gpu-vendor nvidia` on a node whose pynvml imports: rows appear in counters.csv."""
    import sys
    import threading
    import time

    nvml = FakePynvml(mj=[[1_000, 2_000]], mw=[300_000, 310_000], reasons=[0, 0])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    stop = threading.Event()
    path = tmp_path / "counters.csv"
    try:
        assert gpu_counters.start_thread("nvidia", path, interval_s=0.01, stop=stop) == "nvml=12.580.82.07"
        for _ in range(500):  # until two samples of both GPUs are there (no wall-time figure is asserted)
            if path.is_file() and len(power.parse_samples(path.read_text())) >= 4:
                break
            time.sleep(0.01)
    finally:
        stop.set()
    rows = power.parse_samples(path.read_text())
    assert len(rows) >= 4 and {r["gpu"] for r in rows} == {0, 1} and rows[0]["energy_j"] == 1.0


def test_no_library_means_the_cli_sampler_stays(tmp_path, monkeypatch):
    """A node without pynvml (None in sys.modules: its import fails): main says so and exits 3, writing nothing."""
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert gpu_counters.open_reader("nvidia") is None
    assert gpu_counters.main(["--vendor", "nvidia", "--csv", str(tmp_path / "p.csv")]) == 3
    assert not (tmp_path / "p.csv").exists()


def test_the_readers_call_only_the_libraries_read_functions():
    """The agent opens the GPUs for telemetry: every NVML or amdsmi call it makes is an init or a read."""

    src = inspect.getsource(gpu_counters)
    calls = set(re.findall(r"[\".](nvml[A-Z]\w+|amdsmi_\w+)[\"(]", src))
    assert calls, "no library calls found"
    writes = sorted(c for c in calls if not re.search(r"(^nvmlInit$|^amdsmi_init$|Get|_get_)", c))
    assert not writes, f"not a read: {writes}"
