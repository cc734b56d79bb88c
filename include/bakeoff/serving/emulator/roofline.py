"""Roofline timing of one inference server, from catalog figures only.

Kept free of I/O and clocks so every number the emulator produces can be checked by hand:

- one engine step processes a batch of tokens (prompt chunks being prefilled plus one token per
  decoding sequence) and takes the longer of its compute time, 2 x active params FLOPs per token at
  peak x TP x prefill_efficiency, and its memory time, the weights plus the decoding sequences'
  KV cache read once at HBM bandwidth x TP x decode_efficiency. So prefill is compute-bound and
  decode memory-bound, as on real hardware, and a mixed step costs what its heavier side costs;
- a step holds at most max_num_batched_tokens tokens (vLLM's chunked-prefill budget, 8192 unless
  the target's engine_args set --max-num-batched-tokens);
- the KV cache gets what HBM holds after the weights (x 0.9, vLLM's default
  gpu_memory_utilization), which caps how many tokens can be in flight.

Tensor parallelism divides time (each GPU reads and computes its shard); pipeline stages run one
after another, so they add memory but not speed. Mixture-of-experts models read only the experts
that the step's tokens route to: min(total, active x tokens in the step) parameters per step.
"""

from __future__ import annotations

from dataclasses import dataclass

from bakeoff.plan.target import COMPUTE_DTYPE, KV_BYTES, QUANT_BYTES

GPU_MEMORY_UTILIZATION = 0.9
MAX_NUM_BATCHED_TOKENS = 8192  # vLLM's default for its OpenAI server


def _engine_arg(args: list[str], name: str) -> str | None:
    """Value of --name from a vLLM-style argument list (``--name V`` or ``--name=V``)."""
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


@dataclass(frozen=True)
class Roofline:
    params: float  # total parameters
    active_params: float  # parameters a token passes through (MoE: < params)
    bytes_per_param: float
    kv_bytes_per_token: float
    kv_capacity_tokens: int
    prefill_flops_per_s: float  # effective, whole TP group
    decode_bytes_per_s: float  # effective, whole TP group
    max_num_seqs: int
    context: int
    max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS

    @classmethod
    def for_target(cls, target) -> Roofline:
        gpu, model, emu = target.gpu, target.model_spec, target.emulator
        tp = target.tensor_parallel
        bytes_per_param = QUANT_BYTES[target.quantization]
        hbm_per_gpu = gpu.usable_gib * 2**30 if gpu.usable_gib else gpu.hbm_gb * 1e9
        weights = model.params_b * 1e9 * bytes_per_param
        usable = hbm_per_gpu * target.gpus_used * GPU_MEMORY_UTILIZATION
        kv_free = usable - weights
        kv_per_token = model.kv_bytes_per_token(KV_BYTES[target.kv_cache_dtype])
        if kv_free <= 0:
            raise ValueError(
                f"{target.name}: {model.name} in {target.quantization} needs {weights / 1e9:.0f} GB of weights but "
                f"{target.gpus_used} x {gpu.name} hold {usable / 1e9:.0f} GB "
                "usable; raise tensor_parallel or use a smaller quantization"
            )
        peak = gpu.peak_tflops(COMPUTE_DTYPE[target.quantization]) * 1e12
        budget = _engine_arg(target.engine_args, "--max-num-batched-tokens")
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
            max_num_batched_tokens=int(budget) if budget else MAX_NUM_BATCHED_TOKENS,
        )

    def step_s(self, prefill_tokens: int, decoding: int, kv_tokens: int) -> float:
        """Seconds for one step: prefill_tokens of prompts plus one token for each of `decoding`
        sequences, whose caches hold kv_tokens."""
        tokens = prefill_tokens + decoding
        if tokens <= 0:
            return 0.0
        weights_read = min(self.params, self.active_params * tokens) * self.bytes_per_param
        memory_s = (weights_read + kv_tokens * self.kv_bytes_per_token) / self.decode_bytes_per_s
        compute_s = 2 * self.active_params * tokens / self.prefill_flops_per_s
        return max(memory_s, compute_s)

    def prefill_s(self, prompt_tokens: int) -> float:
        """Seconds to prefill one prompt alone (its first output token comes out of the same pass)."""
        return self.step_s(prompt_tokens, 0, 0)

    def decode_step_s(self, running: int, kv_tokens: int) -> float:
        """Seconds for one decode step over `running` sequences holding `kv_tokens` in cache."""
        return self.step_s(0, running, kv_tokens)

    def summary(self) -> dict[str, float]:
        """What /version reports, so a reader can redo the arithmetic."""
        return {
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "weight_bytes": self.params * self.bytes_per_param,
            "prefill_tflops_effective": self.prefill_flops_per_s / 1e12,
            "decode_tbps_effective": self.decode_bytes_per_s / 1e12,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
        }
