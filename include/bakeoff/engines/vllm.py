"""vLLM: ``vllm serve`` with the flags InferenceX's recipes use; its key by an env file; its Prometheus
counters (prefix cache, external tier, speculative decoding) read per point."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bakeoff.engines.base import KEY_FILE, Boot, Counters, Engine, Names
from bakeoff.engines.options import compact_json, draft, kv_offload, lmcache_env, pinned, speculative
from bakeoff.plan.serving_options import KvOffload
from bakeoff.plan.target import Target

KEY_ENV = "/etc/bakeoff/key.env"
_METHOD = {"mtp": "mtp", "eagle": "eagle", "eagle3": "eagle3", "dspark": "dspark", "draft": "draft_model"}


@dataclass(frozen=True)
class Vllm(Engine):
    def argv(self, target: Target, port: int, host: str) -> list[str]:
        tp, ep = target.tensor_parallel, target.expert_parallel
        # DP attention as InferenceX runs it: attention data-parallel over the TP GPUs, the experts spread over them
        dpa = target.data_parallel_attention
        parallel = (
            ["--tensor-parallel-size", "1", "--data-parallel-size", str(tp)]
            if dpa
            else ["--tensor-parallel-size", str(tp)]
        )
        own = ["serve", target.checkpoint_id, "--host", host, "--port", str(port), *parallel]
        own += ["--pipeline-parallel-size", str(target.pipeline_parallel)]
        if ep > 1:
            own.append("--enable-expert-parallel")
        quant = self.quantization[target.quantization] or ()
        own += [*quant, "--kv-cache-dtype", self.kv_cache_dtype[target.kv_cache_dtype]]
        spec = speculative(target, self.name)
        if spec is not None:
            conf: dict[str, Any] = {
                "method": _METHOD[spec.method],
                "num_speculative_tokens": spec.num_speculative_tokens,
            }
            if (repo := draft(target, spec)) is not None:
                conf["model"] = repo
            if (al := pinned(target, spec)) is not None:
                conf |= {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": al}
            own += ["--speculative-config", compact_json(conf)]
        kv = kv_offload(target, self.name)
        if kv is not None and kv.backend == "vllm_native":
            cpu = int(kv.host_memory_gb * 1e9)
            extra = {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": cpu, "secondary_tiers": []}
            connector = {
                "kv_connector": "OffloadingConnector",
                "kv_role": "kv_both",
                "kv_connector_extra_config": extra,
            }
            own += ["--kv-transfer-config", compact_json(connector)]
        elif kv is not None:  # lmcache
            own += ["--kv-transfer-config", compact_json({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})]
        return own

    def switches(self, target: Target, acceptance: float | None, kv: KvOffload | None) -> dict[str, str]:
        if kv is not None and kv.backend == "lmcache":
            return lmcache_env(target, kv)
        if kv is not None and kv.backend == "vllm_native":  # identical prefixes hash alike across ranks
            return {"PYTHONHASHSEED": "42"}
        return {}


COUNTERS = Counters(
    source="vllm-counters",
    prefix_hits="vllm:prefix_cache_hits",
    prefix_queries="vllm:prefix_cache_queries",
    host_hits="vllm:external_prefix_cache_hits",
    host_queries="vllm:external_prefix_cache_queries",
    spec_drafts="vllm:spec_decode_num_drafts",
    spec_draft_tokens="vllm:spec_decode_num_draft_tokens",
    spec_accepted="vllm:spec_decode_num_accepted_tokens",
)

ENGINE = Vllm(
    name="vllm",
    boot=Boot(
        "vllm",
        key_line=f"printf 'VLLM_API_KEY=%s\\n' \"$(cat {KEY_FILE})\" > {KEY_ENV}",
        key_args=("--env-file", KEY_ENV),
        tls_flags=("--ssl-certfile", "--ssl-keyfile"),
        parser_word="serve",
    ),
    quantization={
        "bf16": ("--dtype", "bfloat16"),
        "fp8": ("--quantization", "fp8"),
        "nvfp4": ("--quantization", "modelopt_fp4"),
        "mxfp4": None,
    },
    kv_cache_dtype={"auto": "auto", "bf16": "auto", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3"},
    set_by_target=frozenset(
        {"--kv-cache-dtype", "--quantization", "--dtype", "--tensor-parallel-size", "--port", "--host"}
    ),
    names=Names(re.compile(r"\bvllm\b"), own_metrics=True),
    counters=COUNTERS,
    frameworks=("vllm",),
    precedence=3,
)
