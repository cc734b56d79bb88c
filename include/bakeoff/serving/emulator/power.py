"""EMULATED GPU power samples, written like the node's sampler (bakeoff.serving.power.sampler_script),
so the power.csv -> energy-per-token path can be rehearsed without a GPU.

Each GPU the target uses (tensor_parallel x pipeline_parallel, indices 0..n-1) draws

    watts = idle_w + (tdp_w - idle_w) x busy

where tdp_w is the GPU's TDP from the hardware catalog, idle_w = IDLE_FRACTION x tdp_w, and busy is
the fraction of the last sampling interval (wall time) the emulated engine spent in steps, prefill
or decode. All GPUs of the group draw the same: the roofline runs them in lockstep. IDLE_FRACTION is
an assumption of the emulator, not a measured fact, and the linear model ignores how power depends
on what a step does (compute-bound prefill vs memory-bound decode); the figures are EMULATED.
"""

from __future__ import annotations

import asyncio
import os
import time

from bakeoff.serving.emulator.engine import RooflineEngine, stop_task

IDLE_FRACTION = 0.15  # assumed idle draw, as a fraction of TDP


def watts(tdp_w: float, busy: float) -> float:
    """Draw of one GPU that was busy for the fraction `busy` (clamped to 0..1) of an interval."""
    idle_w = IDLE_FRACTION * tdp_w
    return idle_w + (tdp_w - idle_w) * min(1.0, max(0.0, busy))


def rows(epoch_s: float, n_gpus: int, w: float) -> list[bytes]:
    """One ``epoch_s,gpu,watts`` CSV line per GPU, as the node's sampler writes them."""
    return [f"{epoch_s:.6f},{gpu},{w:.2f}\n".encode() for gpu in range(n_gpus)]


class PowerSampler:
    """Appends rows to `path` every `interval_s` from the engine's busy time (engine.busy_seconds).

    The file is opened O_APPEND and each row goes out in one os.write of a complete line, so a
    reader (or a second writer) never sees a torn row; at most the last line can be missing.
    """

    def __init__(
        self, engine: RooflineEngine, path: str | os.PathLike[str], tdp_w: float, n_gpus: int, interval_s: float = 1.0
    ) -> None:
        self.engine, self.path, self.tdp_w, self.n_gpus, self.interval_s = engine, path, tdp_w, n_gpus, interval_s
        self._fd: int | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Open the file now, so a bad path fails the start-up rather than a background task."""
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="power-sampler")

    async def stop(self) -> None:
        await stop_task(self._task)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def sample(self, busy: float) -> None:
        """Write one row per GPU stamped now (epoch seconds)."""
        if self._fd is None:
            raise RuntimeError("PowerSampler.sample: call start() first, it opens the file")
        now = time.time()
        for line in rows(now, self.n_gpus, watts(self.tdp_w, busy)):
            os.write(self._fd, line)

    async def _loop(self) -> None:
        clock = time.monotonic
        prev_t = clock()
        prev_busy = self.engine.busy_seconds(prev_t)
        self.sample(0.0)  # an idle row at start-up, as the node's sampler gives before load
        while True:
            await asyncio.sleep(max(0.0, prev_t + self.interval_s - clock()))
            t = clock()
            busy = self.engine.busy_seconds(t)
            self.sample((busy - prev_busy) / (t - prev_t) if t > prev_t else 0.0)
            prev_t, prev_busy = t, busy
