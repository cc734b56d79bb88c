"""The emulator timed by the calibrated twin: a target with ``emulator: {efficiency: twin}`` gets the
roofline at the twin's fitted efficiency (one share of peak FLOPs and of HBM bandwidth, as the fit
learned it) plus the twin's per-step overhead, so its EMULATED figures are the twin's predictions and
carry its error band. A target the twin has no calibration for keeps the manual efficiencies, and
says so (``efficiency_info``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

from bakeoff import catalog
from bakeoff.plan.precision import COMPUTE_DTYPE
from bakeoff.plan.target import Target
from bakeoff.twin.roofline import Roofline
from bakeoff.twin.target import STEP_OVERHEAD_S, NoCalibration, TargetTwin, twin_for


def _twin(target: Target) -> TargetTwin | NoCalibration | None:
    return twin_for(target) if target.emulator.efficiency == "twin" else None


def emulator_roofline(target: Target) -> Roofline:
    """The emulator's roofline for a target: the twin's efficiency where asked for and calibrated."""
    base = Roofline.for_target(target)
    tw = _twin(target)
    if not isinstance(tw, TargetTwin):
        return base
    gpu, tp = catalog.gpus()[tw.gpu], target.tensor_parallel  # a twin exists only for a catalog GPU

    return dataclasses.replace(
        base,
        prefill_flops_per_s=gpu.peak_tflops(COMPUTE_DTYPE[target.quantization]) * 1e12 * tp * tw.efficiency,
        decode_bytes_per_s=gpu.hbm_tbps * 1e12 * tp * tw.efficiency,
        step_overhead_s=STEP_OVERHEAD_S,
    )


def efficiency_info(target: Target) -> dict[str, Any]:
    """What /version and the report say about the efficiency the emulator ran at."""
    tw = _twin(target)
    if isinstance(tw, TargetTwin):
        return {
            "source": "twin",
            "efficiency": round(tw.efficiency, 4),
            "step_overhead_s": STEP_OVERHEAD_S,
            "band_pct": round(math.expm1(tw.band_log) * 100, 1),
            "basis": tw.basis,
        }
    manual = {"prefill": target.emulator.prefill_efficiency, "decode": target.emulator.decode_efficiency}
    if isinstance(tw, NoCalibration):
        return {"source": "manual", **manual, "no_calibration": tw.reason}
    return {"source": "manual", **manual}


def band_pcts(targets: Iterable[Target]) -> dict[str, float]:
    """Target name -> the twin's band (+-%) for each emulated target timed by the twin, which the report
    prints beside its EMULATED figures (a manual or uncalibrated one has no band: it predicts nothing)."""
    out = {}
    for t in targets:
        if t.emulated and t.emulator.efficiency == "twin":
            e = efficiency_info(t)
            if e["source"] == "twin":
                out[t.name] = float(e["band_pct"])
    return out
