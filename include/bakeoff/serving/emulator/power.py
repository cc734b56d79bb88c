"""EMULATED GPU power, served through an emulated NVML or amdsmi, so the emulator's energy per token takes
the node's own path: ``serving.gpu_counters`` reads these objects exactly as it reads ``pynvml`` or
``amdsmi`` on a GPU node, and writes the same ``power.csv`` rows (source ``nvml=EMULATED`` or
``amdsmi=EMULATED``).

Each GPU the target uses (tensor_parallel x pipeline_parallel, indices 0..n-1) draws

    watts = idle_w + (tdp_w - idle_w) x busy

where tdp_w is the GPU's TDP from the hardware catalog, idle_w = IDLE_FRACTION x tdp_w, and busy is
the fraction of the time the emulated engine spent in steps, prefill or decode. The energy counter is
that power's exact integral since start-up, idle_w x elapsed + (tdp_w - idle_w) x busy seconds; the
power reading is the mean since the previous power reading. All GPUs of the group draw the same: the
roofline runs them in lockstep. IDLE_FRACTION is an assumption of the emulator, not a measured fact,
and the linear model ignores how power depends on what a step does (compute-bound prefill vs
memory-bound decode); the figures are EMULATED.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from enum import IntEnum
from typing import Any

from bakeoff.serving import gpu_counters
from bakeoff.serving.emulator.engine import RooflineEngine, stop_task

IDLE_FRACTION = 0.15  # assumed idle draw, as a fraction of TDP
VERSION = "EMULATED"


def watts(tdp_w: float, busy: float) -> float:
    """Draw of one GPU that was busy for the fraction `busy` (clamped to 0..1) of an interval."""
    idle_w = IDLE_FRACTION * tdp_w
    return idle_w + (tdp_w - idle_w) * min(1.0, max(0.0, busy))


class EmulatedGpus:
    """The group's energy and power from the engine's busy time (``busy(now)``: wall seconds in steps). A
    time-scaled emulator (``time_scale`` s: every delay runs s times as long) counts energy on the emulated
    hardware's clock, as the benchmark keeps every duration (``bench.client.clock``): a wall second is 1/s of the
    GPU's seconds, so the counter gains power x wall seconds / s; power, a ratio, is unscaled."""

    def __init__(
        self,
        busy: Callable[[float], float],
        tdp_w: float,
        n_gpus: int,
        time_scale: float = 1.0,
        now: Callable[[], float] = time.monotonic,  # the engine's clock (busy_seconds takes its readings)
    ) -> None:
        self.busy, self.tdp_w, self.n, self.scale, self.now = busy, tdp_w, n_gpus, time_scale, now
        self.t0 = now()
        self.busy0 = busy(self.t0)
        self._last: dict[int, tuple[float, float]] = {}

    def joules(self) -> float:
        """One GPU's energy since start-up."""
        t = self.now()
        idle_w = IDLE_FRACTION * self.tdp_w
        return (idle_w * (t - self.t0) + (self.tdp_w - idle_w) * (self.busy(t) - self.busy0)) / self.scale

    def watts(self, gpu: int) -> float:
        """GPU ``gpu``'s mean draw since its previous reading (since start-up at the first)."""
        t = self.now()
        t_prev, b_prev = self._last.get(gpu, (self.t0, self.busy0))
        b = self.busy(t)
        self._last[gpu] = (t, b)
        return watts(self.tdp_w, (b - b_prev) / (t - t_prev) if t > t_prev else 0.0)


class EmulatedNvml:
    """The part of ``pynvml`` (nvidia-ml-py) that ``gpu_counters.NvmlReader`` calls, in NVML's units."""

    def __init__(self, gpus: EmulatedGpus) -> None:
        self.gpus = gpus

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus.n

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlSystemGetNVMLVersion(self) -> str:
        return VERSION

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:  # mJ
        return int(self.gpus.joules() * 1000)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:  # mW
        return int(self.gpus.watts(h) * 1000)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        return 0  # the emulator never throttles


class _ClkType(IntEnum):
    GFX = 0


class _TempType(IntEnum):
    HOTSPOT = 1


class _TempMetric(IntEnum):
    CURRENT = 0


class EmulatedAmdsmi:
    """The part of AMD's ``amdsmi`` that ``gpu_counters.AmdsmiReader`` calls, in its units: the energy
    accumulator in ticks of ``counter_resolution`` µJ (15.3 µJ, as MI300 reports), power in W."""

    AmdSmiClkType = _ClkType
    AmdSmiTemperatureType = _TempType
    AmdSmiTemperatureMetric = _TempMetric
    RESOLUTION_UJ = 15.3

    def __init__(self, gpus: EmulatedGpus) -> None:
        self.gpus = gpus

    def amdsmi_init(self) -> None:
        pass

    def amdsmi_get_processor_handles(self) -> list[int]:
        return list(range(self.gpus.n))

    def amdsmi_get_lib_version(self) -> dict[str, Any]:
        return {"release": VERSION}

    def amdsmi_get_energy_count(self, h: int) -> dict[str, Any]:
        ticks = int(self.gpus.joules() * 1e6 / self.RESOLUTION_UJ)
        return {"energy_accumulator": ticks, "counter_resolution": self.RESOLUTION_UJ, "timestamp": 0}

    def amdsmi_get_power_info(self, h: int) -> dict[str, Any]:
        return {"socket_power": round(self.gpus.watts(h)), "average_socket_power": "N/A"}


def reader(vendor: str, gpus: EmulatedGpus) -> gpu_counters.Reader:
    """The library reader a node of this vendor would use, over the emulated library; its source EMULATED."""
    if vendor == "amd":
        return gpu_counters.AmdsmiReader(EmulatedAmdsmi(gpus))
    return gpu_counters.NvmlReader(EmulatedNvml(gpus))


class PowerSampler:
    """Samples the emulated library every ``interval_s`` into ``path`` through ``gpu_counters.CounterSampler``,
    as the node's agent does through the real one."""

    def __init__(
        self,
        engine: RooflineEngine,
        path: str | os.PathLike[str],
        tdp_w: float,
        n_gpus: int,
        interval_s: float = 1.0,
        vendor: str = "nvidia",
        time_scale: float = 1.0,
    ) -> None:
        self.engine, self.path, self.interval_s, self.time_scale = engine, path, interval_s, time_scale
        self.tdp_w, self.n_gpus, self.vendor = tdp_w, n_gpus, vendor
        self._sampler: gpu_counters.CounterSampler | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Open the file now, so a bad path fails the start-up rather than a background task."""
        gpus = EmulatedGpus(self.engine.busy_seconds, self.tdp_w, self.n_gpus, self.time_scale)
        self._sampler = gpu_counters.CounterSampler(reader(self.vendor, gpus), self.path)
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="power-sampler")

    async def stop(self) -> None:
        await stop_task(self._task)
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None

    async def _loop(self) -> None:
        assert self._sampler is not None  # start() made it
        clock, t = time.monotonic, time.monotonic()
        while True:
            self._sampler.sample()
            t += self.interval_s
            await asyncio.sleep(max(0.0, t - clock()))
