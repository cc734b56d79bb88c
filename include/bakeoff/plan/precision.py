"""Weight and KV-cache precisions a target may name, and what each costs in bytes and compute."""

from __future__ import annotations

from bakeoff.catalog import QUANTIZATIONS as QUANTIZATIONS  # the catalog's one list, re-exported for plans
from bakeoff.catalog import Quantization as Quantization

# bytes per weight for each quantization: nvfp4 = 4 bits + an FP8 scale per 16 weights; mxfp4 = 4 bits +
# an E8M0 scale per 32 (OCP MX)
QUANT_BYTES = {"bf16": 2.0, "fp8": 1.0, "nvfp4": 0.5625, "mxfp4": 0.53125}
KV_BYTES = {"auto": 2.0, "bf16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0}
COMPUTE_DTYPE = {"bf16": "bf16", "fp8": "fp8", "nvfp4": "fp4", "mxfp4": "fp4"}
