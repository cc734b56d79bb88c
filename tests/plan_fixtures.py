"""Plan pieces tests build on: the demo's targets come from vendor recipes, and a static endpoint's target
must not describe a deployment bakeoff did not make."""

from __future__ import annotations

from typing import Any

DEPLOYMENT_FIELDS = ("recipe", "image", "engine_args", "env", "speculative", "kv_offload")


def without_deployment(target: dict[str, Any]) -> dict[str, Any]:
    """The target as JSON minus what only a node bakeoff starts can have (what a static target may not say)."""
    return {k: v for k, v in target.items() if k not in DEPLOYMENT_FIELDS}
