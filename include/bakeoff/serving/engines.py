"""Engine renderers: what each serving engine needs to serve one target on a cloud node.

One renderer per engine (vLLM, SGLang, ATOM, TensorRT-LLM, and a ``custom`` stack the plan declares:
its argv template rendered word by word, plan/custom_stack.py), each giving
  - ``command(target, port)``: the arguments after the image (model, parallelism, quantization, KV
    dtype, speculative decoding, KV offload, then the catalog's per-GPU recipe, then the plan's own),
  - ``environment(target)``: the container's environment (catalog recipe, engine switches, the plan's env),
  - ``extra_files(target)``: files the engine reads, by their path on the node (TensorRT-LLM's extra
    options YAML); user-data writes them and mounts them read-only.

The flags are the ones InferenceX's recipes use (serving.yaml cites the script and commit per stack).
Every value is one argv word built from validated plan fields; user-data shell-quotes each again.
Nothing here sees a secret: the API key and tokens travel by files user-data writes (userdata.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from bakeoff.plan.custom_stack import CUSTOM_STACK, PLACEHOLDERS, fill

if TYPE_CHECKING:
    from bakeoff.plan.serving_options import KvOffload, Speculative
    from bakeoff.plan.target import Target

TRTLLM_OPTIONS = "/etc/bakeoff/trtllm-options.yaml"  # on the node, and at the same path in the container
KEY_FILE = "/etc/bakeoff/api_key"  # the serving key on the node, root-only (user-data writes it)
VLLM_KEY_ENV = "/etc/bakeoff/key.env"
SGLANG_CONFIG = "/etc/bakeoff/sglang.yaml"


@dataclass(frozen=True)
class Boot:
    """How the node's boot script starts one engine and hands it the serving key, declared once per
    engine so the boot script never compares engine names (printf is a builtin: no argv shows the key).

    fronted: no API-key check or TLS of its own, so it listens on loopback behind the node's front
    (front.py), which reads the key file itself."""

    entrypoint: str
    fronted: bool = False
    key_line: str = "# the engine checks no key: the front reads /etc/bakeoff/api_key itself"
    key_args: tuple[str, ...] = ()  # docker run arguments that give it the file key_line writes
    tail_args: tuple[str, ...] = ()  # after its command: where it reads its key from
    # the argv word after which (and one positional: the model or module) the engine's own parser reads
    # its flags, as engine_flags checks them
    parser_word: str = "-m"


BOOT: dict[str, Boot] = {
    "vllm": Boot(
        "vllm",
        key_line=f"printf 'VLLM_API_KEY=%s\\n' \"$(cat {KEY_FILE})\" > {VLLM_KEY_ENV}",
        key_args=("--env-file", VLLM_KEY_ENV),
        parser_word="serve",
    ),
    "sglang": Boot(
        "python3",
        key_line=f'printf \'api-key: "%s"\\n\' "$(cat {KEY_FILE})" > {SGLANG_CONFIG}',
        key_args=("-v", f"{SGLANG_CONFIG}:{SGLANG_CONFIG}:ro"),
        tail_args=("--config", SGLANG_CONFIG),
    ),
    "atom": Boot("python3", fronted=True),
    "trtllm": Boot("mpirun", fronted=True, parser_word="trtllm-serve"),
}
# a custom stack's program comes from its template; bakeoff knows no key or TLS switch of it, so it is fronted
ENGINES = (*BOOT, CUSTOM_STACK)  # the stacks a cloud node can run
FRONTED = frozenset(n for n, b in BOOT.items() if b.fronted) | {CUSTOM_STACK}


@dataclass(frozen=True)
class Routes:
    """Where readiness, token counting and the metrics scrape find a stack: the built-in engines' OpenAI
    routes, or what a custom stack declares (None: it has none)."""

    health: str = "/health"
    readiness: str = "/v1/models"
    tokenize: str | None = "/tokenize"
    metrics: str | None = "/metrics"


# plan quantization -> engine flags; None = the checkpoint says (pre-quantized weights carry their format)
_QUANT: dict[str, dict[str, list[str] | None]] = {
    "vllm": {
        "bf16": ["--dtype", "bfloat16"],
        "fp8": ["--quantization", "fp8"],
        "nvfp4": ["--quantization", "modelopt_fp4"],
        "mxfp4": None,
    },
    "sglang": {
        "bf16": ["--dtype", "bfloat16"],
        "fp8": ["--quantization", "fp8"],
        "nvfp4": ["--quantization", "modelopt_fp4"],
        "mxfp4": None,
    },
    # ATOM and TensorRT-LLM load pre-quantized checkpoints (amd/*-MXFP4, nvidia/*-NVFP4, *-FP8) as they are
    "atom": {"bf16": None, "fp8": None, "nvfp4": None, "mxfp4": None},
    "trtllm": {"bf16": None, "fp8": None, "nvfp4": None, "mxfp4": None},
}
_KV = {
    "vllm": {"auto": "auto", "bf16": "auto", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3"},
    "sglang": {"auto": "auto", "bf16": "auto", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3"},
    "atom": {"auto": "bf16", "bf16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8"},
    "trtllm": {"auto": "auto", "bf16": "auto", "fp8": "fp8", "fp8_e4m3": "fp8"},
}
# flags the target's own fields set: a catalog recipe repeating one is dropped (the report states what ran)
_SET_BY_TARGET = {
    "--kv-cache-dtype",
    "--kv_cache_dtype",
    "--quantization",
    "--dtype",
    "--tensor-parallel-size",
    "--tp-size",
    "--tp_size",
    "--port",
    "--server-port",
    "--host",
}
_SGLANG_ALGORITHM = {"mtp": "EAGLE", "eagle": "EAGLE", "eagle3": "EAGLE3", "draft": "STANDALONE"}
_VLLM_METHOD = {"mtp": "mtp", "eagle": "eagle", "eagle3": "eagle3", "dspark": "dspark", "draft": "draft_model"}


def _fail(target: Target, field: str, why: str) -> ValueError:
    return ValueError(f"targets.{target.name}.{field}: {why}")


def _engine(target: Target) -> str:
    if target.stack not in ENGINES:
        raise _fail(
            target, "stack", f"{target.stack} cannot be deployed on a cloud node; use one of: {', '.join(ENGINES)}"
        )
    return target.stack


def boot(target: Target) -> Boot:
    """The boot facts of the target's engine (refused, naming the field, for a stack no node runs); a
    custom stack's program is its template's first word, behind the node's front."""
    c = target.custom
    if _engine(target) == CUSTOM_STACK and c is not None:
        return Boot(c.command[0], fronted=True)
    return BOOT[target.stack]


def routes(target: Target) -> Routes:
    """The routes readiness and the benchmark use for the target's stack."""
    c = target.custom
    if c is None:
        return Routes()
    return Routes(c.health_route, c.readiness_route, c.tokenize_route, c.metrics_route)


def label(target: Target) -> str:
    """How the report names the stack: the engine, or ``custom: <name>``."""
    return target.stack_spec.name if target.custom is not None else target.stack


def custom_facts(target: Target) -> dict[str, Any]:
    """A custom stack's declaration for provenance and the support matrix (nothing for a built-in engine)."""
    c = target.custom
    if c is None:
        return {}
    return {"custom": c.model_dump(mode="json"), "stack_label": label(target)}


def _model(target: Target) -> str:
    return target.checkpoint_id


def _gpus(target: Target) -> int:
    return target.tensor_parallel * target.pipeline_parallel


def _spec(target: Target, engine: str) -> Speculative | None:
    """The target's speculative config, refused here too when the engine does not render its method."""
    spec = target.speculative
    if spec is not None and spec.method not in target.stack_spec.speculative:
        raise _fail(
            target,
            "speculative.method",
            f"{spec.method} is not supported by {engine}; use one of: {', '.join(target.stack_spec.speculative)}",
        )
    return spec


def _draft(target: Target, spec: Speculative) -> str | None:
    """The draft model's repo for methods that need one (the plan's, else the model catalog's); MTP drafts
    with the heads inside the checkpoint. DSpark ships its own draft repo (e.g. Inferact/Kimi-K3-DSpark)."""
    if spec.method == "mtp":
        return None
    shipped = target.model_spec.speculative.get(spec.method)
    draft = spec.draft_model or (shipped if shipped and shipped != "native" else None)
    if not draft:
        raise _fail(
            target,
            "speculative.draft_model",
            f"{spec.method} needs a draft model and the catalog names none for {target.model}; set draft_model",
        )
    return draft


def draft_repo(target: Target) -> str | None:
    """The speculative draft's own repo, if the target's method needs one (the weights step fetches it)."""
    return _draft(target, target.speculative) if target.speculative is not None else None


def _pinned(target: Target, spec: Speculative | None) -> float | None:
    if spec is None or spec.acceptance != "pinned":
        return None
    al = target.pinned_acceptance_length
    if al is None:
        raise _fail(
            target,
            "speculative.acceptance_length",
            f"no golden acceptance length for {target.model} at {spec.num_speculative_tokens} tokens; set one",
        )
    return al


def _kv_offload(target: Target, engine: str) -> KvOffload | None:
    kv = target.kv_offload
    if kv is not None and kv.backend not in target.stack_spec.kv_offload:
        choices = ", ".join(target.stack_spec.kv_offload) or "none"
        raise _fail(target, "kv_offload.backend", f"{kv.backend} is not available on {engine}; use one of: {choices}")
    return kv


def _num(x: float) -> str:
    """A float as a short word: 2.0 -> '2', 2.4900001 -> '2.49'."""
    return f"{round(x, 4):g}"


def _json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def _drop_flags(args: list[str], flags: set[str]) -> list[str]:
    """Remove ``--flag value`` pairs (and ``--flag=value``) the target sets explicitly."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in flags:
            skip = "=" not in a
            continue
        out.append(a)
    return out


def _vllm(target: Target, port: int, host: str) -> list[str]:
    tp, ep = target.tensor_parallel, target.expert_parallel
    # DP attention as InferenceX runs it: attention data-parallel over the TP GPUs, the experts spread over them
    dpa = target.data_parallel_attention
    parallel = (
        ["--tensor-parallel-size", "1", "--data-parallel-size", str(tp)] if dpa else ["--tensor-parallel-size", str(tp)]
    )
    own = ["serve", _model(target), "--host", host, "--port", str(port), *parallel]
    own += ["--pipeline-parallel-size", str(target.pipeline_parallel)]
    if ep > 1:
        own.append("--enable-expert-parallel")
    own += [*(_QUANT["vllm"][target.quantization] or []), "--kv-cache-dtype", _KV["vllm"][target.kv_cache_dtype]]
    spec = _spec(target, "vllm")
    if spec is not None:
        conf: dict[str, Any] = {
            "method": _VLLM_METHOD[spec.method],
            "num_speculative_tokens": spec.num_speculative_tokens,
        }
        if (draft := _draft(target, spec)) is not None:
            conf["model"] = draft
        if (al := _pinned(target, spec)) is not None:
            conf |= {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": al}
        own += ["--speculative-config", _json(conf)]
    kv = _kv_offload(target, "vllm")
    if kv is not None and kv.backend == "vllm_native":
        cpu = int(kv.host_memory_gb * 1e9)
        extra = {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": cpu, "secondary_tiers": []}
        own += [
            "--kv-transfer-config",
            _json({"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": extra}),
        ]
    elif kv is not None:  # lmcache
        own += ["--kv-transfer-config", _json({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})]
    return own


def _sglang(target: Target, port: int, host: str) -> list[str]:
    tp, ep = target.tensor_parallel, target.expert_parallel
    own = ["-m", "sglang.launch_server", "--model-path", _model(target), "--host", host, "--port", str(port)]
    own += ["--tp-size", str(tp), "--pp-size", str(target.pipeline_parallel)]
    if ep > 1:
        own += ["--ep-size", str(ep)]
    if target.data_parallel_attention:
        own += ["--dp", str(tp), "--enable-dp-attention"]
    own += [*(_QUANT["sglang"][target.quantization] or []), "--kv-cache-dtype", _KV["sglang"][target.kv_cache_dtype]]
    own.append("--enable-metrics")
    spec = _spec(target, "sglang")
    if spec is not None:
        k = spec.num_speculative_tokens
        own += ["--speculative-algorithm", _SGLANG_ALGORITHM[spec.method], "--speculative-num-steps", str(k)]
        own += ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(k + 1)]
        if (draft := _draft(target, spec)) is not None:
            own += ["--speculative-draft-model-path", draft]
    kv = _kv_offload(target, "sglang")
    if kv is not None:  # hicache: --hicache-size is GB of host memory per rank
        per_rank = max(1, int(kv.host_memory_gb // _gpus(target)))
        own += [
            "--enable-hierarchical-cache",
            "--hicache-size",
            str(per_rank),
            "--hicache-write-policy",
            "write_through",
        ]
    return own


def _atom(target: Target, port: int, host: str) -> list[str]:
    if target.pipeline_parallel > 1:
        raise _fail(target, "pipeline_parallel", "ATOM serves one node with tensor parallelism only; set 1")
    own = ["-m", "atom.entrypoints.openai_server", "--model", _model(target), "--host", host]
    own += ["--server-port", str(port), "--tensor-parallel-size", str(target.tensor_parallel)]
    if target.data_parallel_attention:
        own.append("--enable-dp-attention")
    if target.expert_parallel > 1:
        own.append("--enable-expert-parallel")
    own += ["--kv_cache_dtype", _KV["atom"][target.kv_cache_dtype]]
    spec = _spec(target, "atom")
    if spec is not None:
        k = spec.num_speculative_tokens
        own += ["--method", spec.method, "--num-speculative-tokens", str(k)]
        if (al := _pinned(target, spec)) is not None:  # ATOM takes a per-token rate: (AL - 1) / k
            own += ["--spec-decode-acceptance-rate", _num((al - 1) / k)]
    if _kv_offload(target, "atom") is not None:
        own += ["--kv-transfer-config", _json({"kv_connector": "lmcache_offload", "kv_role": "offload"})]
    return own


def _trtllm(target: Target, port: int, host: str) -> list[str]:
    _spec(target, "trtllm")
    _kv_offload(target, "trtllm")
    # one MPI launcher rank, trtllm-serve spawning its TP workers, as InferenceX launches it
    own = [
        "-n",
        "1",
        "--oversubscribe",
        "--allow-run-as-root",
        "trtllm-serve",
        _model(target),
        "--host",
        host,
        "--port",
        str(port),
        "--backend",
        "pytorch",
    ]
    if target.model_spec.trust_remote_code:  # a catalog fact, never the plan's (models.yaml)
        own.append("--trust_remote_code")
    own += ["--tp_size", str(target.tensor_parallel), "--pp_size", str(target.pipeline_parallel)]
    own += ["--ep_size", str(target.expert_parallel)]
    return [*own, "--extra_llm_api_options", TRTLLM_OPTIONS]


def _custom(target: Target, port: int, host: str) -> list[str]:
    """The template after its program, each placeholder replaced by its validated value in its own word
    (never re-split, never read by a shell: the boot script quotes each word, docker execs the argv)."""
    c = target.custom
    if c is None:
        raise _fail(target, "custom", "stack: custom needs its custom block")
    values = {
        "model": _model(target),
        "served_model": target.served_model_id,
        "host": host,
        "port": str(port),
        "tensor_parallel": str(target.tensor_parallel),
        "pipeline_parallel": str(target.pipeline_parallel),
        "expert_parallel": str(target.expert_parallel),
        "gpus": str(_gpus(target)),
        "quantization": target.quantization,
        "kv_cache_dtype": target.kv_cache_dtype,
    }
    if set(values) != set(PLACEHOLDERS):  # one list of names: the schema's
        raise AssertionError(
            f"placeholders out of step with plan.custom_stack: {sorted(set(values) ^ set(PLACEHOLDERS))}"
        )
    return [fill(word, values) for word in c.command[1:]]


_RENDER: dict[str, Callable[[Target, int, str], list[str]]] = {
    "vllm": _vllm,
    "sglang": _sglang,
    "atom": _atom,
    "trtllm": _trtllm,
    CUSTOM_STACK: _custom,
}


def command(target: Target, port: int, host: str = "0.0.0.0") -> list[str]:
    """Arguments after the image: the target's own flags, then the catalog's per-GPU recipe (less the
    flags the target sets, so the report never states a setting the server did not use), then the
    plan's engine_args, which win over both. ``host`` is 127.0.0.1 behind the node's front (``FRONTED``)."""
    engine = _engine(target)
    own = _RENDER[engine](target, port, host)
    recipe = _drop_flags(list(target.stack_spec.args.get(target.gpu.name, [])), _SET_BY_TARGET)
    return own + recipe + list(target.engine_args)


def environment(target: Target) -> dict[str, str]:
    """Catalog environment for this GPU and stack, the engine switches the target's options need
    (pinned acceptance, KV-offload tiers), then the plan's env on top."""
    engine = _engine(target)
    env = dict(target.stack_spec.env.get(target.gpu.name, {}))
    spec = _spec(target, engine)
    al = _pinned(target, spec)
    if al is not None and engine == "sglang":
        env |= {
            "SGLANG_SIMULATE_ACC_LEN": _num(al),
            "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
            "SGLANG_SIMULATE_ACC_TOKEN_MODE": "real-draft-token",
        }
    elif al is not None and engine == "trtllm":  # counts accepted draft tokens only: the golden AL minus one
        env["TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"] = _num(al - 1)
    kv = _kv_offload(target, engine)
    if kv is not None and kv.backend == "lmcache":  # LMCache's local CPU tier, GB per rank
        per_rank = max(1, int(kv.host_memory_gb // _gpus(target)))
        env |= {
            "PYTHONHASHSEED": "0",
            "LMCACHE_LOCAL_CPU": "True",
            "LMCACHE_MAX_LOCAL_CPU_SIZE": str(per_rank),
            "LMCACHE_CHUNK_SIZE": "256",
        }
    elif kv is not None and kv.backend == "vllm_native":  # identical prefixes hash alike across ranks
        env["PYTHONHASHSEED"] = "42"
    return {**env, **target.env}


def extra_files(target: Target) -> dict[str, str]:
    """Files the engine reads, by path on the node: TensorRT-LLM's extra LLM-API options."""
    if _engine(target) != "trtllm":
        return {}
    options: dict[str, Any] = {
        "kv_cache_config": {"dtype": _KV["trtllm"][target.kv_cache_dtype]},
        "enable_attention_dp": target.data_parallel_attention,
        "print_iter_log": True,
    }
    spec = _spec(target, "trtllm")
    if spec is not None and spec.method == "mtp":
        options["speculative_config"] = {
            "decoding_type": "MTP",
            "num_nextn_predict_layers": spec.num_speculative_tokens,
        }
    elif spec is not None:  # eagle3 with its draft model
        options["speculative_config"] = {
            "decoding_type": "Eagle3",
            "max_draft_len": spec.num_speculative_tokens,
            "speculative_model": _draft(target, spec),
        }
    kv = _kv_offload(target, "trtllm")
    if kv is not None:  # trtllm_native: KvCacheConfig.host_cache_size, bytes of host memory for evicted blocks
        options["kv_cache_config"]["host_cache_size"] = int(kv.host_memory_gb * 1e9)
    return {TRTLLM_OPTIONS: yaml.safe_dump(options, sort_keys=True)}
