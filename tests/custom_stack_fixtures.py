"""A custom stack's plan pieces for the tests: a cloud declaration pinned by digest, a local one that starts
the project's emulator through its template, and builders for a target or the error a bad block gets."""

from __future__ import annotations

import copy

import pytest

from bakeoff.plan import PlanError, load_plan, plan_from_dict
from bakeoff.plan import custom_stack as cs

KEY = "bk-" + "0123456789abcdef" * 2 + "01234567"
DIGEST = "ghcr.io/example/inhouse-llm:1.4@sha256:" + "ab" * 32
CLOUD = {
    "name": "inhouse",
    "image": DIGEST,
    "command": ["/opt/serve", "--model", "{model}", "--host", "{host}", "--port", "{port}", "--tp={tensor_parallel}"],
    "port": 9000,
    "health_route": "/healthz",
    "readiness_route": "/v1/models",
    "metrics_prefix": "inhouse:",
    "tokenize_route": "/v1/tokenize",
}
LOCAL = {
    "name": "emulated",
    "image": cs.LOCAL_IMAGE,
    "command": ["python3", "-m", "bakeoff.serving.emulator", "--port", "{port}", "--host", "{host}"],
    "health_route": "/ping",
    "tokenize_route": "/v1/count",
}


def plan_doc(provider: str, **changes) -> dict:
    raw = load_plan("mi355x-vs-b200-sandbox" if provider != "local" else "local-demo").model_dump(mode="json")
    t = next(x for x in raw["targets"] if x["provider"] == provider)
    t = {k: v for k, v in copy.deepcopy(t).items() if k not in ("speculative", "kv_offload", "recipe", "image")}
    t.update(stack="custom", quantization="fp8", checkpoint=None, engine_args=[], env={})
    t.update(changes)
    raw["targets"] = [t]
    return raw


def target(provider: str = "vultr", **changes):
    changes.setdefault("custom", CLOUD if provider != "local" else LOCAL)
    return plan_from_dict(plan_doc(provider, **changes)).targets[0]


def refused(provider: str = "vultr", **custom) -> str:
    block = {**(CLOUD if provider != "local" else LOCAL), **custom}
    with pytest.raises(PlanError) as e:
        plan_from_dict(plan_doc(provider, custom={k: v for k, v in block.items() if v is not None}))
    return str(e.value)
