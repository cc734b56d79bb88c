"""SGLang: ``python3 -m sglang.launch_server`` with InferenceX's flags; its key by a config file; its
window gauges (cache hit rate, acceptance length) read after a point."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bakeoff.engines.base import KEY_FILE, Boot, Engine, Gauges, Names
from bakeoff.engines.options import draft, kv_offload, num, per_rank_gb, speculative
from bakeoff.plan.serving_options import KvOffload
from bakeoff.plan.target import Target

SGLANG_CONFIG = "/etc/bakeoff/sglang.yaml"
_ALGORITHM = {"mtp": "EAGLE", "eagle": "EAGLE", "eagle3": "EAGLE3", "draft": "STANDALONE"}


@dataclass(frozen=True)
class Sglang(Engine):
    def argv(self, target: Target, port: int, host: str) -> list[str]:
        tp, ep = target.tensor_parallel, target.expert_parallel
        own = ["-m", "sglang.launch_server", "--model-path", target.checkpoint_id, "--host", host, "--port", str(port)]
        own += ["--tp-size", str(tp), "--pp-size", str(target.pipeline_parallel)]
        if ep > 1:
            own += ["--ep-size", str(ep)]
        if target.data_parallel_attention:
            own += ["--dp", str(tp), "--enable-dp-attention"]
        quant = self.quantization[target.quantization] or ()
        own += [*quant, "--kv-cache-dtype", self.kv_cache_dtype[target.kv_cache_dtype]]
        own.append("--enable-metrics")
        spec = speculative(target, self.name)
        if spec is not None:
            k = spec.num_speculative_tokens
            own += ["--speculative-algorithm", _ALGORITHM[spec.method], "--speculative-num-steps", str(k)]
            own += ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(k + 1)]
            if (repo := draft(target, spec)) is not None:
                own += ["--speculative-draft-model-path", repo]
        kv = kv_offload(target, self.name)
        if kv is not None:  # hicache: --hicache-size is GB of host memory per rank
            per_rank = per_rank_gb(target, kv)
            own += ["--enable-hierarchical-cache", "--hicache-size", str(per_rank)]
            own += ["--hicache-write-policy", "write_through"]
        return own

    def switches(self, target: Target, acceptance: float | None, kv: KvOffload | None) -> dict[str, str]:
        if acceptance is None:
            return {}
        return {
            "SGLANG_SIMULATE_ACC_LEN": num(acceptance),
            "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
            "SGLANG_SIMULATE_ACC_TOKEN_MODE": "real-draft-token",
        }


ENGINE = Sglang(
    name="sglang",
    boot=Boot(
        "python3",
        key_line=f'printf \'api-key: "%s"\\n\' "$(cat {KEY_FILE})" > {SGLANG_CONFIG}',
        key_args=("-v", f"{SGLANG_CONFIG}:{SGLANG_CONFIG}:ro"),
        tail_args=("--config", SGLANG_CONFIG),
        tls_flags=("--ssl-certfile", "--ssl-keyfile"),
    ),
    quantization={
        "bf16": ("--dtype", "bfloat16"),
        "fp8": ("--quantization", "fp8"),
        "nvfp4": ("--quantization", "modelopt_fp4"),
        "mxfp4": None,
    },
    kv_cache_dtype={"auto": "auto", "bf16": "auto", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3"},
    set_by_target=frozenset({"--kv-cache-dtype", "--quantization", "--dtype", "--tp-size", "--port", "--host"}),
    names=Names(re.compile(r"\bsglang\b"), own_metrics=True),
    gauges=Gauges(source="sglang-gauges", hit_rate="sglang:cache_hit_rate", accept_length="sglang:spec_accept_length"),
    frameworks=("sglang",),
    precedence=2,
)
