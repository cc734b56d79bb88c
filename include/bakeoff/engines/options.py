"""The target's fields as every engine reads them: refused here, naming the field, when the engine does not
render what the target asks (a speculative method, a KV-offload backend, a golden acceptance length)."""

from __future__ import annotations

import json
from typing import Any

from bakeoff.plan.serving_options import KvOffload, Speculative
from bakeoff.plan.target import Target


def fail(target: Target, field: str, why: str) -> ValueError:
    return ValueError(f"targets.{target.name}.{field}: {why}")


def gpus(target: Target) -> int:
    return target.tensor_parallel * target.pipeline_parallel


def speculative(target: Target, engine: str) -> Speculative | None:
    """The target's speculative config, refused here too when the engine does not render its method."""
    spec = target.speculative
    if spec is not None and spec.method not in target.stack_spec.speculative:
        raise fail(
            target,
            "speculative.method",
            f"{spec.method} is not supported by {engine}; use one of: {', '.join(target.stack_spec.speculative)}",
        )
    return spec


def draft(target: Target, spec: Speculative) -> str | None:
    """The draft model's repo for methods that need one (the plan's, else the model catalog's); MTP drafts
    with the heads inside the checkpoint. DSpark ships its own draft repo (e.g. Inferact/Kimi-K3-DSpark)."""
    if spec.method == "mtp":
        return None
    shipped = target.model_spec.speculative.get(spec.method)
    repo = spec.draft_model or (shipped if shipped and shipped != "native" else None)
    if not repo:
        raise fail(
            target,
            "speculative.draft_model",
            f"{spec.method} needs a draft model and the catalog names none for {target.model}; set draft_model",
        )
    return repo


def pinned(target: Target, spec: Speculative | None) -> float | None:
    """The golden acceptance length a pinned-acceptance target holds the engine to (None: not pinned)."""
    if spec is None or spec.acceptance != "pinned":
        return None
    al = target.pinned_acceptance_length
    if al is None:
        raise fail(
            target,
            "speculative.acceptance_length",
            f"no golden acceptance length for {target.model} at {spec.num_speculative_tokens} tokens; set one",
        )
    return al


def kv_offload(target: Target, engine: str) -> KvOffload | None:
    """The target's host-memory KV tier, refused when the engine's catalog row does not offer its backend."""
    kv = target.kv_offload
    if kv is not None and kv.backend not in target.stack_spec.kv_offload:
        choices = ", ".join(target.stack_spec.kv_offload) or "none"
        raise fail(target, "kv_offload.backend", f"{kv.backend} is not available on {engine}; use one of: {choices}")
    return kv


def per_rank_gb(target: Target, kv: KvOffload) -> int:
    """The host tier's GB per rank (at least one)."""
    return max(1, int(kv.host_memory_gb // gpus(target)))


def lmcache_env(target: Target, kv: KvOffload) -> dict[str, str]:
    """LMCache's local CPU tier, GB per rank (the engines that offer the lmcache backend)."""
    return {
        "PYTHONHASHSEED": "0",
        "LMCACHE_LOCAL_CPU": "True",
        "LMCACHE_MAX_LOCAL_CPU_SIZE": str(per_rank_gb(target, kv)),
        "LMCACHE_CHUNK_SIZE": "256",
    }


def num(x: float) -> str:
    """A float as a short word: 2.0 -> '2', 2.4900001 -> '2.49'."""
    return f"{round(x, 4):g}"


def compact_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)
