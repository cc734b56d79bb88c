"""ATOM (AMD's serving engine): its OpenAI server module, tensor parallelism on one node, pre-quantized
checkpoints as they are; no key check of its own, so it sits behind the node's front. It exports vLLM's
metric names, so those never say "atom" by themselves."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bakeoff.engines.base import Boot, Engine, Names
from bakeoff.engines.options import compact_json, fail, kv_offload, lmcache_env, num, pinned, speculative
from bakeoff.plan.serving_options import KvOffload
from bakeoff.plan.target import Target


@dataclass(frozen=True)
class Atom(Engine):
    def argv(self, target: Target, port: int, host: str) -> list[str]:
        if target.pipeline_parallel > 1:
            raise fail(target, "pipeline_parallel", "ATOM serves one node with tensor parallelism only; set 1")
        own = ["-m", "atom.entrypoints.openai_server", "--model", target.checkpoint_id, "--host", host]
        own += ["--server-port", str(port), "--tensor-parallel-size", str(target.tensor_parallel)]
        if target.data_parallel_attention:
            own.append("--enable-dp-attention")
        if target.expert_parallel > 1:
            own.append("--enable-expert-parallel")
        own += ["--kv_cache_dtype", self.kv_cache_dtype[target.kv_cache_dtype]]
        spec = speculative(target, self.name)
        if spec is not None:
            k = spec.num_speculative_tokens
            own += ["--method", spec.method, "--num-speculative-tokens", str(k)]
            if (al := pinned(target, spec)) is not None:  # ATOM takes a per-token rate: (AL - 1) / k
                own += ["--spec-decode-acceptance-rate", num((al - 1) / k)]
        if kv_offload(target, self.name) is not None:
            own += ["--kv-transfer-config", compact_json({"kv_connector": "lmcache_offload", "kv_role": "offload"})]
        return own

    def switches(self, target: Target, acceptance: float | None, kv: KvOffload | None) -> dict[str, str]:
        return lmcache_env(target, kv) if kv is not None and kv.backend == "lmcache" else {}


ENGINE = Atom(
    name="atom",
    boot=Boot("python3", fronted=True),
    # pre-quantized checkpoints (amd/*-MXFP4, *-FP8) load as they are: no quantization flags
    kv_cache_dtype={"auto": "bf16", "bf16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8"},
    set_by_target=frozenset({"--kv_cache_dtype", "--tensor-parallel-size", "--server-port", "--host"}),
    names=Names(re.compile(r"\batom\b")),
)
