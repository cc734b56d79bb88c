"""Serving engines: what each needs to serve one target on a cloud node, one module per engine
(vllm, sglang, atom, trtllm, custom, emulator), registered in ``registry.py``.

Through the target's engine:
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

from typing import Any

from bakeoff.engines.base import Boot, Engine, Routes
from bakeoff.engines.options import draft, fail, kv_offload, pinned, speculative
from bakeoff.engines.registry import REGISTERED, deployable
from bakeoff.plan.target import Target

ENGINES = deployable()  # the stacks a cloud node can run
# the built-in engines' boot facts, as engine_flags reads their parser word (a custom stack's are its template's)
BOOT: dict[str, Boot] = {name: e.boot for name, e in REGISTERED.items() if e.boot is not None}


def _engine(target: Target) -> Engine:
    if target.stack not in ENGINES:
        raise fail(
            target, "stack", f"{target.stack} cannot be deployed on a cloud node; use one of: {', '.join(ENGINES)}"
        )
    return REGISTERED[target.stack]


def boot(target: Target) -> Boot:
    """The boot facts of the target's engine (refused, naming the field, for a stack no node runs); a
    custom stack's program is its template's first word, behind the node's front."""
    return _engine(target).boot_of(target)


def routes(target: Target) -> Routes:
    """The routes readiness and the benchmark use for the target's stack."""
    return REGISTERED[target.stack].routes_of(target)


def label(target: Target) -> str:
    """How the report names the stack: the engine, or ``custom: <name>``."""
    return target.stack_spec.name if target.custom is not None else target.stack


def custom_facts(target: Target) -> dict[str, Any]:
    """A custom stack's declaration for provenance and the support matrix (nothing for a built-in engine)."""
    c = target.custom
    if c is None:
        return {}
    return {"custom": c.model_dump(mode="json"), "stack_label": label(target)}


def draft_repo(target: Target) -> str | None:
    """The speculative draft's own repo, if the target's method needs one (the weights step fetches it)."""
    return draft(target, target.speculative) if target.speculative is not None else None


def _drop_flags(args: list[str], flags: frozenset[str]) -> list[str]:
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


def command(target: Target, port: int, host: str = "0.0.0.0") -> list[str]:
    """Arguments after the image: the target's own flags, then the catalog's per-GPU recipe (less the
    flags the target sets, so the report never states a setting the server did not use), then the
    plan's engine_args, which win over both. ``host`` is 127.0.0.1 behind the node's front (``Boot.fronted``)."""
    engine = _engine(target)
    own = engine.argv(target, port, host)
    recipe = _drop_flags(list(target.stack_spec.args.get(target.gpu.name, [])), engine.set_by_target)
    return own + recipe + list(target.engine_args)


def environment(target: Target) -> dict[str, str]:
    """Catalog environment for this GPU and stack, the engine switches the target's options need
    (pinned acceptance, KV-offload tiers), then the plan's env on top."""
    engine = _engine(target)
    env = dict(target.stack_spec.env.get(target.gpu.name, {}))
    acceptance = pinned(target, speculative(target, engine.name))
    env |= engine.switches(target, acceptance, kv_offload(target, engine.name))
    return {**env, **target.env}


def extra_files(target: Target) -> dict[str, str]:
    """Files the engine reads, by path on the node: TensorRT-LLM's extra LLM-API options."""
    return _engine(target).files(target)
