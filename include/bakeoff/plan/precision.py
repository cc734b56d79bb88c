"""Weight and KV-cache precisions a target may name, and what each costs in bytes and compute."""

from __future__ import annotations

from typing import Literal, get_args

Quantization = Literal["bf16", "fp8", "nvfp4", "mxfp4"]
# the one list of weight formats: plans, claims and the catalog all check against it
QUANTIZATIONS: tuple[str, ...] = get_args(Quantization)
# bytes per weight for each quantization: nvfp4 = 4 bits + an FP8 scale per 16 weights; mxfp4 = 4 bits +
# an E8M0 scale per 32 (OCP MX)
QUANT_BYTES = {"bf16": 2.0, "fp8": 1.0, "nvfp4": 0.5625, "mxfp4": 0.53125}
KV_BYTES = {"auto": 2.0, "bf16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0}
COMPUTE_DTYPE = {"bf16": "bf16", "fp8": "fp8", "nvfp4": "fp4", "mxfp4": "fp4"}
