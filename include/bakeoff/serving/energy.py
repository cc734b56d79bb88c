"""A point's energy from the node's ``power.csv`` rows, one method whatever wrote them.

Where every GPU the server uses has energy-counter readings on both sides of the point's window (the
vendors' libraries, ``serving.gpu_counters``), a GPU's energy is its counter interpolated at the window's
end minus at its start: "measured, energy counters, GPU only". Otherwise (the CLI sampler's power-only
rows, or a counter that went backwards: a driver reload) the mean sampled power per GPU times the GPUs
and the window: "measured, power samples, GPU only". Throttling seen during the window is a flag on the
point; node power (IPMI DCMI rows) is its mean over the window, or said missing.
"""

from __future__ import annotations

from statistics import median
from typing import Any

import numpy as np

from bakeoff.serving.power import SLACK_S, mean_watts_per_gpu

COUNTERS = "measured, energy counters, GPU only"
SAMPLES = "measured, power samples, GPU only"
NODE_MISSING = "missing: the node exposes no power reading (IPMI DCMI)"


def _counter_joules(rows: list[dict[str, Any]], start: float, end: float, gpus: int) -> float | None:
    """Sum over GPUs 0..gpus-1 of counter(end) - counter(start), linear between readings; None unless
    every GPU has a reading at or before start and at or after end and its counter never went back."""
    total = 0.0
    for gpu in range(gpus):
        pts = sorted((r["t"], r["energy_j"]) for r in rows if r["gpu"] == gpu and r.get("energy_j") is not None)
        if not pts or pts[0][0] > start or pts[-1][0] < end:
            return None
        ts, es = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
        if (np.diff(es) < 0).any():
            return None
        total += float(np.interp(end, ts, es) - np.interp(start, ts, es))
    return total


def point_energy(
    rows: list[dict[str, Any]], start: float, end: float, gpus: int, time_scale: float = 1.0
) -> dict[str, Any]:
    """The point's energy columns from the rows fetched around [start, end] (wall epoch seconds);
    empty without rows. A time-scaled emulator's counters already count the emulated clock's joules
    (``serving.emulator.power``); its window, in the GPU's seconds, is the wall window / ``time_scale``."""
    window = (end - start) / time_scale
    used = [r for r in rows if 0 <= r["gpu"] < gpus]
    if not used or window <= 0:
        return {}
    joules = _counter_joules(used, start, end, gpus)
    if joules is not None:
        method, watts = COUNTERS, joules / gpus / window
    else:
        w = mean_watts_per_gpu(used, start, end, gpus)
        if w is None:
            return {}
        method, watts, joules = SAMPLES, w, w * gpus * window
    inside = [r for r in used if start <= r["t"] <= end]
    reasons = sorted({x for r in inside for x in str(r.get("throttle") or "").split("+") if x})
    gpu0 = sorted(r["t"] for r in used if r["gpu"] == 0)
    node = [r["watts"] for r in rows if r["gpu"] < 0 and start - SLACK_S <= r["t"] <= end + SLACK_S]
    return {
        "power_w_per_gpu": watts,
        "energy_j": joules,
        "energy_method": method,
        "energy_library": next(
            (r["source"] for r in used if r.get("source")),
            "unnamed" if any(r.get("energy_j") is not None for r in used) else "cli",
        ),
        "energy_sample_s": median(np.diff(gpu0)) if len(gpu0) > 1 else None,
        "throttled": bool(reasons),
        "throttle_reasons": "+".join(reasons),
        "node_power_w": sum(node) / len(node) if node else None,
        "node_power": "measured, IPMI DCMI" if node else NODE_MISSING,
    }


def power_trace(rows: list[dict[str, Any]], start: float, gpus: int) -> list[list[float]]:
    """The 1 Hz power trace of the GPUs in use (and the node, gpu -1) for the chart: [s from start, gpu, W]."""
    return [
        [round(r["t"] - start, 3), r["gpu"], r["watts"]]
        for r in sorted(rows, key=lambda r: (r["gpu"], r["t"]))
        if r["gpu"] < gpus and r["watts"] is not None
    ]
