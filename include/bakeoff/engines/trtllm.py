"""TensorRT-LLM: ``trtllm-serve`` under one MPI launcher rank, as InferenceX launches it, with its KV cache,
attention DP and speculative decoding in an extra LLM-API options file; behind the node's front."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from bakeoff.engines.base import Boot, Engine, Names
from bakeoff.engines.options import draft, kv_offload, num, speculative
from bakeoff.plan.serving_options import KvOffload
from bakeoff.plan.target import Target

TRTLLM_OPTIONS = "/etc/bakeoff/trtllm-options.yaml"  # on the node, and at the same path in the container


@dataclass(frozen=True)
class Trtllm(Engine):
    def argv(self, target: Target, port: int, host: str) -> list[str]:
        speculative(target, self.name)
        kv_offload(target, self.name)
        # one MPI launcher rank, trtllm-serve spawning its TP workers, as InferenceX launches it
        own = ["-n", "1", "--oversubscribe", "--allow-run-as-root", "trtllm-serve", target.checkpoint_id]
        own += ["--host", host, "--port", str(port), "--backend", "pytorch"]
        if target.model_spec.trust_remote_code:  # a catalog fact, never the plan's (models.yaml)
            own.append("--trust_remote_code")
        own += ["--tp_size", str(target.tensor_parallel), "--pp_size", str(target.pipeline_parallel)]
        own += ["--ep_size", str(target.expert_parallel)]
        return [*own, "--extra_llm_api_options", TRTLLM_OPTIONS]

    def switches(self, target: Target, acceptance: float | None, kv: KvOffload | None) -> dict[str, str]:
        if acceptance is None:
            return {}
        # counts accepted draft tokens only: the golden AL minus one
        return {"TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS": num(acceptance - 1)}

    def files(self, target: Target) -> dict[str, str]:
        """The extra LLM-API options: KV cache dtype and host tier, attention DP, speculative decoding."""
        options: dict[str, Any] = {
            "kv_cache_config": {"dtype": self.kv_cache_dtype[target.kv_cache_dtype]},
            "enable_attention_dp": target.data_parallel_attention,
            "print_iter_log": True,
        }
        spec = speculative(target, self.name)
        if spec is not None and spec.method == "mtp":
            options["speculative_config"] = {
                "decoding_type": "MTP",
                "num_nextn_predict_layers": spec.num_speculative_tokens,
            }
        elif spec is not None:  # eagle3 with its draft model
            options["speculative_config"] = {
                "decoding_type": "Eagle3",
                "max_draft_len": spec.num_speculative_tokens,
                "speculative_model": draft(target, spec),
            }
        kv = kv_offload(target, self.name)
        if kv is not None:  # trtllm_native: KvCacheConfig.host_cache_size, bytes of host memory for evicted blocks
            options["kv_cache_config"]["host_cache_size"] = int(kv.host_memory_gb * 1e9)
        return {TRTLLM_OPTIONS: yaml.safe_dump(options, sort_keys=True)}


ENGINE = Trtllm(
    name="trtllm",
    boot=Boot("mpirun", fronted=True, parser_word="trtllm-serve"),
    # pre-quantized checkpoints (nvidia/*-NVFP4, *-FP8) load as they are: no quantization flags
    kv_cache_dtype={"auto": "auto", "bf16": "auto", "fp8": "fp8", "fp8_e4m3": "fp8"},
    set_by_target=frozenset({"--tp_size", "--port", "--host"}),
    names=Names(re.compile(r"\b(tensorrt[_-]llm|trtllm)\b"), own_metrics=True),  # TensorRT-LLM says tensorrt_llm
    frameworks=("tensorrt", "trtllm"),
)
