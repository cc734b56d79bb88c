"""Roofline timing of one inference server, from catalog figures only.

Kept free of I/O and clocks so every number the emulator produces can be checked by hand:

- prefill is compute-bound: 2 x active params x prompt tokens FLOPs at peak x TP x prefill_efficiency;
- a decode step is memory-bound: the weights plus the KV cache of every running sequence are read
  once per step at HBM bandwidth x TP x decode_efficiency (or compute-bound at large batches:
  2 x active params FLOPs per sequence, whichever is slower);
- the KV cache gets what HBM holds after the weights (x 0.9, vLLM's default
  gpu_memory_utilization), which caps how many tokens can be in flight.

Tensor parallelism divides time (each GPU reads and computes its shard); pipeline stages run one
after another, so they add memory but not speed. Mixture-of-experts models read only the experts
that the batch's tokens route to: min(total, active x running sequences) parameters per step.
"""
from __future__ import annotations

from dataclasses import dataclass

from bakeoff.plan.target import COMPUTE_DTYPE, KV_BYTES, QUANT_BYTES

GPU_MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True)
class Roofline:
    params: float                 # total parameters
    active_params: float          # parameters a token passes through (MoE: < params)
    bytes_per_param: float
    kv_bytes_per_token: float
    kv_capacity_tokens: int
    prefill_flops_per_s: float    # effective, whole TP group
    decode_bytes_per_s: float     # effective, whole TP group
    max_num_seqs: int
    context: int

    @classmethod
    def for_target(cls, target) -> "Roofline":
        gpu, model, emu = target.gpu, target.model_spec, target.emulator
        tp = target.tensor_parallel
        bytes_per_param = QUANT_BYTES[target.quantization]
        hbm_per_gpu = gpu.usable_gib * 2**30 if gpu.usable_gib else gpu.hbm_gb * 1e9
        weights = model.params_b * 1e9 * bytes_per_param
        kv_free = hbm_per_gpu * target.gpus_used * GPU_MEMORY_UTILIZATION - weights
        kv_per_token = model.kv_bytes_per_token(KV_BYTES[target.kv_cache_dtype])
        if kv_free <= 0:
            raise ValueError(
                f"{target.name}: {model.name} in {target.quantization} needs {weights / 1e9:.0f} GB of weights but "
                f"{target.gpus_used} x {gpu.name} hold {hbm_per_gpu * target.gpus_used * GPU_MEMORY_UTILIZATION / 1e9:.0f} GB "
                "usable; raise tensor_parallel or use a smaller quantization")
        peak = gpu.peak_tflops(COMPUTE_DTYPE[target.quantization]) * 1e12
        return cls(
            params=model.params_b * 1e9,
            active_params=model.active_params_b * 1e9,
            bytes_per_param=bytes_per_param,
            kv_bytes_per_token=kv_per_token,
            kv_capacity_tokens=int(kv_free // kv_per_token),
            prefill_flops_per_s=peak * tp * emu.prefill_efficiency,
            decode_bytes_per_s=gpu.hbm_tbps * 1e12 * tp * emu.decode_efficiency,
            max_num_seqs=emu.max_num_seqs,
            context=model.context,
        )

    def prefill_s(self, prompt_tokens: int) -> float:
        """Seconds to prefill one prompt (its first output token comes out of the same pass)."""
        return 2 * self.active_params * prompt_tokens / self.prefill_flops_per_s

    def decode_step_s(self, running: int, kv_tokens: int) -> float:
        """Seconds for one decode step over `running` sequences holding `kv_tokens` in cache."""
        if running <= 0:
            return 0.0
        weights_read = min(self.params, self.active_params * running) * self.bytes_per_param
        memory_s = (weights_read + kv_tokens * self.kv_bytes_per_token) / self.decode_bytes_per_s
        compute_s = 2 * self.active_params * running / self.prefill_flops_per_s
        return max(memory_s, compute_s)

    def summary(self) -> dict[str, float]:
        """What /version reports, so a reader can redo the arithmetic."""
        return {
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "weight_bytes": self.params * self.bytes_per_param,
            "prefill_tflops_effective": self.prefill_flops_per_s / 1e12,
            "decode_tbps_effective": self.decode_bytes_per_s / 1e12,
            "max_num_seqs": self.max_num_seqs,
        }
