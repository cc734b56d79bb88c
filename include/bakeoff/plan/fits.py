"""Whether a configuration can run at all, with the arithmetic: the weights plus a request's KV cache
within the GPUs' memory, and a tensor-parallel size that divides the node's GPUs and the model's KV heads.

A configuration that cannot run gets "does not fit" and the figures, never a number: the plan's
validation calls these (so `plan check`, `predict`, `start_run` and its approval request refuse alike),
and the emulator's roofline calls ``memory`` for the same wording. A request longer than the model's
context is the plan's own check (``Plan._fits_context``).
"""

from __future__ import annotations

import math
from typing import Protocol

from bakeoff import catalog
from bakeoff.plan.precision import KV_BYTES, QUANT_BYTES

GPU_MEMORY_UTILIZATION = 0.9  # share of each GPU's memory the engine takes (vLLM's default --gpu-memory-utilization)


class Memory(Protocol):
    """A GPU as far as memory goes (catalog.Gpu; a described GPU has no figures and is not checked)."""

    @property
    def name(self) -> str: ...
    @property
    def hbm_gb(self) -> float: ...
    @property
    def usable_gib(self) -> float | None: ...


def gpu_bytes(gpu: Memory) -> float:
    """One GPU's memory in bytes: the catalog's usable GiB where it records one, else its HBM."""
    usable = gpu.usable_gib
    return usable * 2**30 if usable else gpu.hbm_gb * 1e9


def memory(
    gpu: Memory, model: catalog.ModelSpec, quantization: str, kv_cache_dtype: str, gpus: int, tokens: int
) -> str | None:
    """Why ``model``'s weights plus one ``tokens``-token request's KV cache do not fit the memory the engine
    takes on ``gpus`` GPUs (None: they fit, or the GPU's memory is not known)."""
    per_gpu = gpu_bytes(gpu)
    if not math.isfinite(per_gpu):
        return None
    usable = per_gpu * gpus * GPU_MEMORY_UTILIZATION
    weights = model.params_b * 1e9 * QUANT_BYTES[quantization]
    kv = tokens * model.kv_bytes_per_token(KV_BYTES[kv_cache_dtype])
    if weights + kv <= usable:
        return None
    request = f" + {kv / 1e9:.3g} GB of KV cache for one {tokens}-token request" if tokens else ""
    return (
        f"does not fit: {model.name} in {quantization} is {weights / 1e9:.0f} GB of weights{request} "
        f"= {(weights + kv) / 1e9:.0f} GB, over the {usable / 1e9:.0f} GB the engine takes on {gpus} x {gpu.name} "
        f"({per_gpu / 1e9:.0f} GB x {gpus} x {GPU_MEMORY_UTILIZATION:g}); raise tensor_parallel, use a smaller "
        "quantization or a GPU with more memory"
    )


def tensor_parallel(model: catalog.ModelSpec, tp: int, parallel: int, node_gpus: int, node: str) -> str | None:
    """Why a TP group of ``tp`` (``parallel`` GPUs with pipeline stages) cannot be laid out: it must divide the
    node's GPUs (else some sit idle, billed) and, for a GQA model, divide its KV heads or be a multiple of
    them (engines shard or replicate whole heads). None: it divides."""
    if node_gpus % parallel:
        fits = [d for d in range(1, node_gpus + 1) if node_gpus % d == 0]
        return (
            f"does not fit: tensor_parallel x pipeline_parallel = {parallel} does not divide the {node_gpus} GPUs "
            f"of {node} ({node_gpus} = {node_gpus // parallel} x {parallel} + {node_gpus % parallel} idle, billed); "
            f"use one of {', '.join(map(str, fits))}"
        )
    h = model.kv_heads if model.attention == "gqa" else 0
    if h and h % tp and tp % h:
        return (
            f"does not fit: {model.name} has {h} KV heads, which tensor_parallel {tp} neither divides nor is a "
            f"multiple of ({h} / {tp} = {h / tp:g}); use a tensor_parallel that divides {h} or a multiple of it"
        )
    return None
