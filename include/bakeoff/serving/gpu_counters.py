"""GPU energy counters read through the vendors' own libraries, one method for both vendors.

NVIDIA: NVML through ``nvidia-ml-py`` (imported as ``pynvml``): ``nvmlDeviceGetTotalEnergyConsumption``
(mJ since the driver loaded), ``nvmlDeviceGetPowerUsage`` (mW), SM clock, temperature and the clock
throttle reasons. AMD: ``amdsmi``: ``amdsmi_get_energy_count`` (an accumulator in ticks of
``counter_resolution`` µJ), ``amdsmi_get_power_info`` (W), the GFX clock and the hotspot temperature.
A reader takes the library module as an argument, so the emulator hands it its emulated NVML or amdsmi
(``serving.emulator.power``) and tests a fake that follows the documented API; the sampler writes the
same ``power.csv`` rows either way. Where no library loads, the boot script's CLI sampler
(``serving.power.sampler_script``) writes the 3-column rows instead, and a point falls back to integrating
power samples (``serving.energy``).

Row: ``epoch_s,gpu,watts,energy_j,clock_mhz,temp_c,throttle,source``; ``energy_j`` the cumulative
counter in joules, ``throttle`` the active slowdown reasons joined by ``+`` (empty when none),
``source`` the library and its version (``nvml=12.580.82``). Node power, where the node exposes it
(IPMI DCMI), is a row with gpu ``-1`` and only ``watts``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

NODE = -1  # the gpu index of a node-level power row

# NVML's clocks throttle (event) reasons that mean the GPU ran slower than it was asked to: power cap,
# hardware slowdown, thermal slowdowns and the power brake. Idle, application clocks, sync boost and
# display clock are not slowdowns under load (nvml.h, nvmlClocksThrottleReason*).
NVML_SLOWDOWNS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}
NVML_CLOCK_SM = 1  # nvmlClockType_t NVML_CLOCK_SM
NVML_TEMPERATURE_GPU = 0  # nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU


@dataclass(frozen=True)
class Reading:
    """One GPU at one instant; None where the library does not say."""

    gpu: int
    watts: float | None
    energy_j: float | None
    clock_mhz: float | None = None
    temp_c: float | None = None
    throttle: str = ""


class Reader(Protocol):
    source: str  # library=version, as the rows carry it

    def read(self) -> list[Reading]: ...


def _call(lib: Any, name: str, *args: Any) -> Any:
    """``lib.name(*args)``, None where the GPU does not support it (NVML raises NVMLError, amdsmi
    AmdSmiLibraryException) or the library's version has no such call."""
    try:
        return getattr(lib, name)(*args)
    except Exception:  # noqa: BLE001 - an unsupported field is None, never a lost sample
        return None


class NvmlReader:
    """Every GPU NVML sees, through ``pynvml`` (nvidia-ml-py) or a module with its API."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        nvml.nvmlInit()
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        version = _call(nvml, "nvmlSystemGetNVMLVersion") or "unknown"
        self.source = f"nvml={_text(version)}"

    def read(self) -> list[Reading]:
        nv, out = self.nvml, []
        for i, h in enumerate(self.handles):
            mj = _call(nv, "nvmlDeviceGetTotalEnergyConsumption", h)
            mw = _call(nv, "nvmlDeviceGetPowerUsage", h)
            reasons = _call(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", h) or 0
            out.append(
                Reading(
                    gpu=i,
                    watts=mw / 1000 if mw is not None else None,
                    energy_j=mj / 1000 if mj is not None else None,
                    clock_mhz=_call(nv, "nvmlDeviceGetClockInfo", h, NVML_CLOCK_SM),
                    temp_c=_call(nv, "nvmlDeviceGetTemperature", h, NVML_TEMPERATURE_GPU),
                    throttle="+".join(name for bit, name in NVML_SLOWDOWNS.items() if int(reasons) & bit),
                )
            )
        return out


class AmdsmiReader:
    """Every GPU amdsmi sees, through AMD's ``amdsmi`` Python library or a module with its API."""

    def __init__(self, amdsmi: Any) -> None:
        self.amdsmi = amdsmi
        amdsmi.amdsmi_init()
        self.handles = list(amdsmi.amdsmi_get_processor_handles())
        v = _call(amdsmi, "amdsmi_get_lib_version") or {}
        version = ".".join(str(v[k]) for k in ("year", "major", "minor", "release") if k in v) or "unknown"
        self.source = f"amdsmi={version}"

    def read(self) -> list[Reading]:
        a, out = self.amdsmi, []
        for i, h in enumerate(self.handles):
            energy = _call(a, "amdsmi_get_energy_count", h) or {}
            # ROCm 6.1+ names the accumulator energy_accumulator; earlier releases called it power
            ticks = energy.get("energy_accumulator", energy.get("power"))
            res_uj = _number(energy.get("counter_resolution"))
            info = _call(a, "amdsmi_get_power_info", h) or {}
            clock = _call(a, "amdsmi_get_clock_info", h, a.AmdSmiClkType.GFX) or {}
            hotspot = a.AmdSmiTemperatureType.HOTSPOT, a.AmdSmiTemperatureMetric.CURRENT
            out.append(
                Reading(
                    gpu=i,
                    watts=_number(
                        info.get("socket_power", info.get("current_socket_power", info.get("average_socket_power")))
                    ),
                    energy_j=_scaled(_number(ticks), res_uj),
                    clock_mhz=_number(clock.get("clk", clock.get("cur_clk"))),
                    temp_c=_number(_call(a, "amdsmi_get_temp_metric", h, *hotspot)),
                )
            )
        return out


def _number(v: object) -> float | None:
    """A library value as a float; amdsmi answers "N/A" where a field is unsupported."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _scaled(ticks: float | None, res_uj: float | None) -> float | None:
    """amdsmi's accumulator in joules: ticks x resolution (µJ) / 1e6."""
    return ticks * res_uj / 1e6 if ticks is not None and res_uj else None


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def row(t: float, r: Reading, source: str) -> str:
    """One ``power.csv`` line (see the module's docstring)."""

    def f(v: float | None, digits: int) -> str:
        return "" if v is None else f"{v:.{digits}f}"

    return (
        f"{t:.6f},{r.gpu},{f(r.watts, 2)},{f(r.energy_j, 3)},{f(r.clock_mhz, 0)},{f(r.temp_c, 0)},"
        f"{r.throttle},{source}\n"
    )


_DCMI = re.compile(r"Instantaneous power reading:\s*([0-9.]+)\s*Watts", re.IGNORECASE)


def parse_dcmi_power(text: str) -> float | None:
    """``ipmitool dcmi power reading`` -> the node's instantaneous watts; None when it gives none, or when
    the BMC says its power measurement is deactivated (its figures are then not a reading)."""
    m = _DCMI.search(text)
    if m is None or re.search(r"Power reading state is:\s*deactivated", text, re.IGNORECASE):
        return None
    return float(m.group(1))


def dcmi_reader() -> Callable[[], float | None] | None:
    """The node's power through IPMI DCMI where ipmitool answers (bare metal); None where it is missing."""
    tool = shutil.which("ipmitool")
    if tool is None:
        return None

    def read() -> float | None:
        try:
            out = subprocess.run([tool, "dcmi", "power", "reading"], capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.SubprocessError):
            return None
        return parse_dcmi_power(out.stdout) if out.returncode == 0 else None

    return read if read() is not None else None


class CounterSampler:
    """Appends a row per GPU (and the node, where it has a reading) to ``path`` per ``sample()``. Each line
    goes out in one os.write on an O_APPEND file, so a reader never sees a torn row."""

    def __init__(self, reader: Reader, path: str | os.PathLike[str], node: Callable[[], float | None] | None = None):
        self.reader, self.path, self.node = reader, path, node
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def sample(self, now: float | None = None) -> None:
        t = time.time() if now is None else now
        lines = [row(t, r, self.reader.source) for r in self.reader.read()]
        node_w = self.node() if self.node else None
        if node_w is not None:
            lines.append(row(t, Reading(gpu=NODE, watts=node_w, energy_j=None), "dcmi"))
        for line in lines:
            os.write(self._fd, line.encode())

    def close(self) -> None:
        os.close(self._fd)


def open_reader(vendor: str) -> Reader | None:
    """The vendor's library where it loads on this node (amdsmi also from ROCm's own path); None otherwise,
    and the boot script's CLI sampler is the fallback."""
    try:
        if vendor == "amd":
            sys.path.append("/opt/rocm/share/amd_smi")
            import amdsmi  # type: ignore[import-not-found]  # noqa: PLC0415 - only on an AMD node, and only where ROCm installed it

            return AmdsmiReader(amdsmi)
        import pynvml  # type: ignore[import-untyped]  # noqa: PLC0415 - only on an NVIDIA node

        return NvmlReader(pynvml)
    except Exception:  # noqa: BLE001 - no library (or no driver) means the CLI fallback, not a failed boot
        return None


def start_thread(
    vendor: str, path: str | os.PathLike[str], interval_s: float = 1.0, stop: threading.Event | None = None
) -> str | None:
    """Sample the vendor's library into ``path`` every ``interval_s`` on a daemon thread (the node agent's)
    until ``stop`` is set; the library's source, or None where no library loads (the CLI sampler's rows
    are then the power path)."""
    reader = open_reader(vendor)
    if reader is None:
        return None
    sampler = CounterSampler(reader, path, dcmi_reader())
    done = stop or threading.Event()

    def loop() -> None:
        while not done.is_set():
            try:
                sampler.sample()
            except Exception:  # noqa: BLE001 - one failed read is a missing sample, never a dead sampler
                pass
            done.wait(interval_s)
        sampler.close()

    threading.Thread(target=loop, name="gpu-counters", daemon=True).start()
    return reader.source


def main(argv: list[str] | None = None) -> int:
    """``python -m bakeoff.serving.gpu_counters --vendor nvidia --csv power.csv``: sample at 1 Hz until killed;
    exits 3 when the vendor's library does not load (the caller keeps its CLI sampler)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vendor", choices=("nvidia", "amd"), required=True)
    p.add_argument("--csv", required=True)
    p.add_argument("--interval-s", type=float, default=1.0)
    args = p.parse_args(argv)
    reader = open_reader(args.vendor)
    if reader is None:
        print(f"bakeoff: no {args.vendor} energy library; the CLI power sampler stays", file=sys.stderr)
        return 3
    sampler = CounterSampler(reader, args.csv, dcmi_reader())
    print(f"bakeoff-provenance: energy counters {reader.source}", flush=True)
    while True:
        sampler.sample()
        time.sleep(args.interval_s)


if __name__ == "__main__":
    sys.exit(main())
