"""A ``stack: custom`` the plan declares (plan/custom_stack.py): its argv template rendered word by word,
its program as the entrypoint, always behind the node's front (bakeoff knows no key or TLS switch of it)."""

from __future__ import annotations

from dataclasses import dataclass

from bakeoff.engines.base import Boot, Engine, Routes
from bakeoff.engines.options import fail, gpus
from bakeoff.plan.custom_stack import CUSTOM_STACK, PLACEHOLDERS, CustomStack, fill
from bakeoff.plan.target import Target


@dataclass(frozen=True)
class Custom(Engine):
    @property
    def deployable(self) -> bool:
        return True

    def boot_of(self, target: Target) -> Boot:
        """The template's first word is the program; fronted."""
        return Boot(_declared(target).command[0], fronted=True)

    def routes_of(self, target: Target) -> Routes:
        """The routes the plan declares (None where it declares none)."""
        c = _declared(target)
        return Routes(c.health_route, c.readiness_route, c.tokenize_route, c.metrics_route)

    def argv(self, target: Target, port: int, host: str) -> list[str]:
        """The template after its program, each placeholder replaced by its validated value in its own word
        (never re-split, never read by a shell: the boot script quotes each word, docker execs the argv)."""
        values = {
            "model": target.checkpoint_id,
            "served_model": target.served_model_id,
            "host": host,
            "port": str(port),
            "tensor_parallel": str(target.tensor_parallel),
            "pipeline_parallel": str(target.pipeline_parallel),
            "expert_parallel": str(target.expert_parallel),
            "gpus": str(gpus(target)),
            "quantization": target.quantization,
            "kv_cache_dtype": target.kv_cache_dtype,
        }
        if set(values) != set(PLACEHOLDERS):  # one list of names: the schema's
            raise AssertionError(
                f"placeholders out of step with plan.custom_stack: {sorted(set(values) ^ set(PLACEHOLDERS))}"
            )
        return [fill(word, values) for word in _declared(target).command[1:]]


def _declared(target: Target) -> CustomStack:
    c = target.custom
    if c is None:
        raise fail(target, "custom", "stack: custom needs its custom block")
    return c


# its boot facts come from each target's template, its routes from the plan
ENGINE = Custom(name=CUSTOM_STACK)
