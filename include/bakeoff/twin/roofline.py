"""Roofline timing of one inference server, from catalog figures only.

Kept free of I/O and clocks so every number the emulator produces can be checked by hand:

- one engine step processes a batch of tokens (prompt chunks being prefilled plus one token per
  decoding sequence) and takes the longer of its compute time, 2 x active params FLOPs per token at
  peak x TP x prefill_efficiency, and its memory time, the weights plus the decoding sequences'
  KV cache read once at HBM bandwidth x TP x decode_efficiency. So prefill is compute-bound and
  decode memory-bound, as on real hardware, and a mixed step costs what its heavier side costs;
- weights are read at the plan quantization's bytes per parameter (QUANT_BYTES: FP4 formats carry
  their block scales, NVFP4 0.5625, MXFP4 0.53125); FP4 compute runs at the chip's FP4 peak;
- mixture-of-experts models read only the experts the step's tokens route to. Where the model
  names its always-active part (dense_params_b: attention, dense layers, shared experts), that part
  is read once per step and only the routed experts scale with tokens: with the model's expert count E
  and top-k, the expected distinct experts T tokens hit under uniform routing, dense + routed total x
  (1 - (1 - k/E)^T) (two tokens sharing an expert read it once); without them dense + min(routed total,
  routed active x tokens); otherwise min(total, active x tokens). The twin, the single-node emulator and
  the disaggregated paper model (disagg.py) all read weights through this one method;
- the KV a token leaves comes from ModelSpec.kv_bytes_per_token (GQA heads, an MLA latent, only the
  full-attention layers of a hybrid). A sparse-attention model (DSA, MSA) reads index_topk cached
  tokens per decoding sequence, not its whole context: the engine passes kv_read_tokens, the sum of
  kv_read_tokens(context) over the decoding sequences. A hybrid's linear-attention layers keep a
  fixed state per sequence, which is neither stored in nor read from the KV cache here;
- speculative decoding (verify_step_s): the target model checks decoding x (1 + draft tokens) tokens
  in one pass, after draft_tokens draft steps that each cost one layer of the target (an MTP or
  EAGLE head is about one decoder layer: active_params / layers FLOPs per token, one layer's share
  of the weights read); the draft's own small KV cache is not counted;
- a step holds at most max_num_batched_tokens tokens (vLLM's chunked-prefill budget, 8192 unless
  the target's engine_args set --max-num-batched-tokens);
- every target-model pass may carry a fixed step_overhead_s (0 unless the calibrated twin times the
  emulator: bakeoff.twin.emulate);
- the KV cache gets what HBM holds after the weights (x 0.9, vLLM's default
  gpu_memory_utilization), which caps how many tokens can be in flight.

Tensor parallelism divides time (each GPU reads and computes its shard); pipeline stages run one
after another, so they add memory but not speed. Expert parallelism only moves which GPU holds
which expert: the same bytes are read by the same number of GPUs, so it changes nothing here
beyond what TP already models (its all-to-all traffic is not modelled).
"""

from __future__ import annotations

from dataclasses import dataclass

from bakeoff.catalog import Gpu, ModelSpec
from bakeoff.plan import fits
from bakeoff.plan.fits import GPU_MEMORY_UTILIZATION
from bakeoff.plan.precision import COMPUTE_DTYPE, KV_BYTES, QUANT_BYTES
from bakeoff.plan.target import Target

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
    dense_params: float | None = None  # always-read part of active_params (None: not known)
    layers: int = 1  # decoder layers; a draft step costs one of them
    index_topk: int | None = None  # sparse attention: cached tokens one decode step reads per sequence
    step_overhead_s: float = 0.0  # fixed time of every target-model pass (launches, all-reduce; the twin sets it)
    experts: int | None = None  # routed experts per MoE layer (None: dense, or not known)
    experts_per_token: int | None = None  # top-k: routed experts each token picks

    @classmethod
    def for_target(cls, target: Target) -> Roofline:
        emu = target.emulator
        gpu = target.gpu
        if not isinstance(gpu, Gpu):  # a static endpoint's described hardware has no figures to time
            raise ValueError(
                f"targets.{target.name}.hardware: the emulator times a catalog GPU and {gpu.name} is not one; "
                "give the target a catalog instance_type"
            )
        budget = _engine_arg(target.engine_args, "--max-num-batched-tokens")
        return cls.for_parts(
            gpu,
            target.model_spec,
            target.quantization,
            kv_cache_dtype=target.kv_cache_dtype,
            tp=target.tensor_parallel,
            gpus_used=target.gpus_used,
            prefill_efficiency=emu.prefill_efficiency,
            decode_efficiency=emu.decode_efficiency,
            max_num_seqs=emu.max_num_seqs,
            max_num_batched_tokens=int(budget) if budget else MAX_NUM_BATCHED_TOKENS,
            name=target.name,
        )

    @classmethod
    def for_parts(
        cls,
        gpu: Gpu,
        model: ModelSpec,
        quantization: str,
        *,
        kv_cache_dtype: str = "auto",
        tp: int,
        gpus_used: int,
        prefill_efficiency: float,
        decode_efficiency: float,
        max_num_seqs: int,
        max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS,
        name: str = "",
    ) -> Roofline:
        """One server (a TP group of ``tp`` GPUs, holding its weights on ``gpus_used``) from catalog
        figures: a target's, or one worker role of a multi-node recipe."""
        bytes_per_param = QUANT_BYTES[quantization]
        weights = model.params_b * 1e9 * bytes_per_param
        usable = fits.gpu_bytes(gpu) * gpus_used * GPU_MEMORY_UTILIZATION
        kv_free = usable - weights
        kv_per_token = model.kv_bytes_per_token(KV_BYTES[kv_cache_dtype])
        # the plan's own arithmetic: weights and one token of KV (a request's length is the plan's check)
        if why := fits.memory(gpu, model, quantization, kv_cache_dtype, gpus_used, 1):
            raise ValueError(f"{name or model.name}: {why}")
        peak = gpu.peak_tflops(COMPUTE_DTYPE[quantization]) * 1e12
        return cls(
            params=model.params_b * 1e9,
            active_params=model.active_params_b * 1e9,
            bytes_per_param=bytes_per_param,
            kv_bytes_per_token=kv_per_token,
            kv_capacity_tokens=int(kv_free // kv_per_token),
            prefill_flops_per_s=peak * tp * prefill_efficiency,
            decode_bytes_per_s=gpu.hbm_tbps * 1e12 * tp * decode_efficiency,
            max_num_seqs=max_num_seqs,
            context=model.context,
            max_num_batched_tokens=max_num_batched_tokens,
            dense_params=model.dense_params_b * 1e9 if model.dense_params_b is not None else None,
            layers=model.layers,
            index_topk=model.index_topk,
            experts=model.experts,
            experts_per_token=model.experts_per_token,
        )

    def weights_read(self, tokens: int) -> float:
        """Bytes of weights one pass over `tokens` tokens reads (MoE: only the routed-to experts)."""
        if tokens <= 0:
            return 0.0
        if self.dense_params is None:
            return min(self.params, self.active_params * tokens) * self.bytes_per_param
        routed_params = self.params - self.dense_params
        if self.experts and self.experts_per_token:  # expected distinct experts T tokens' top-k picks hit
            e, k = self.experts, self.experts_per_token
            routed = routed_params * (1 - (1 - k / e) ** tokens)
        else:
            routed = min(routed_params, (self.active_params - self.dense_params) * tokens)
        return (self.dense_params + routed) * self.bytes_per_param

    def kv_read_tokens(self, context_tokens: int) -> int:
        """Cached tokens one decode step of a sequence with this context reads (sparse attention: index_topk)."""
        return min(context_tokens, self.index_topk) if self.index_topk is not None else context_tokens

    def step_s(self, prefill_tokens: int, decoding: int, kv_tokens: int, kv_read_tokens: int | None = None) -> float:
        """Seconds for one step: prefill_tokens of prompts plus one token for each of `decoding`
        sequences, whose caches hold kv_tokens; kv_read_tokens (default kv_tokens) is what their
        attention reads, the sum of kv_read_tokens(context) per decoding sequence."""
        return self._pass_s(prefill_tokens + decoding, kv_tokens if kv_read_tokens is None else kv_read_tokens)

    def _pass_s(self, tokens: int, kv_read: int) -> float:
        if tokens <= 0:
            return 0.0
        memory_s = (self.weights_read(tokens) + kv_read * self.kv_bytes_per_token) / self.decode_bytes_per_s
        compute_s = 2 * self.active_params * tokens / self.prefill_flops_per_s
        return max(memory_s, compute_s) + self.step_overhead_s

    def draft_step_s(self, decoding: int) -> float:
        """Seconds for one draft step over `decoding` sequences: one decoder layer's worth of the target."""
        if decoding <= 0:
            return 0.0
        memory_s = self.weights_read(decoding) / self.layers / self.decode_bytes_per_s
        compute_s = 2 * self.active_params / self.layers * decoding / self.prefill_flops_per_s
        return max(memory_s, compute_s)

    def verify_step_s(
        self,
        decoding: int,
        draft_tokens: int,
        kv_tokens: int,
        kv_read_tokens: int | None = None,
        prefill_tokens: int = 0,
    ) -> float:
        """Seconds for one speculative-decoding step: draft_tokens draft steps, then one target pass
        over decoding x (1 + draft_tokens) tokens (plus any prompt chunk sharing the step) that
        reads the cache once."""
        if draft_tokens < 0:
            raise ValueError(f"draft_tokens must be >= 0, got {draft_tokens}")
        kv_read = kv_tokens if kv_read_tokens is None else kv_read_tokens
        target_s = self._pass_s(prefill_tokens + decoding * (1 + draft_tokens), kv_read)
        return draft_tokens * self.draft_step_s(decoding) + target_s

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
