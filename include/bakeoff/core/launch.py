"""What one launch of a target boots with, typed once for the providers that launch it and the boot
script's renderer (``serving.userdata``) that reads it: neither imports the other for it. The caller
hands the renderer in with the spec (``LaunchSpec.boot``), so a cloud's create renders the script for
the target it launches (a cluster's node included) without the providers importing serving."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from bakeoff.core.errors import ProviderError

# The node agent's port: the boot script starts the agent on it, each cloud's firewall opens it beside the
# serving port, a listed node reports it, and no custom stack may take it (plan.custom_stack.RESERVED_PORTS).
AGENT_PORT = 8089

# (the plan's Target, this spec) -> the node's boot script: serving.userdata.render_for
BootRenderer = Callable[[Any, "LaunchSpec"], str]


@dataclass(frozen=True)
class LaunchSpec:
    """What one launch of a target boots with, beyond the target itself: the serving key, the expiry
    its tags carry, the kill-switch delay, the staged client bundle, the node's TLS identity and the
    names of the serving secrets its agent will receive. It holds secrets, so its repr hides them and
    it is never stored (instance.json and the records hold none of it). ``launch`` counts the target's
    earlier launches in the run (clouds' idempotency tokens include it). ``mode`` and ``scripted``
    configure the local emulator only. ``boot`` renders the boot script a cloud launches with (the
    caller's ``serving.userdata.render_for``; the local and static providers boot none)."""

    api_key: str | None = field(default=None, repr=False)
    expires_at: float | None = None
    shutdown_after_s: float | None = None
    agent: Mapping[str, Any] | None = None  # the staged client bundle: url, sha256, requirements
    launch: int = 0
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    tls: Mapping[str, str] | None = field(default=None, repr=False)  # the node's {cert, key} PEMs
    mode: str = "roofline"
    scripted: Mapping[str, Any] | None = None
    boot: BootRenderer | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, spec: LaunchSpec | Mapping[str, Any] | None) -> LaunchSpec:
        """A spec given as a mapping (a test, a caller at a JSON edge) as the typed one; an unknown key is refused."""
        if isinstance(spec, LaunchSpec):
            return spec
        doc = dict(spec or {})
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(doc) - set(known))
        if unknown:
            raise ProviderError(f"launch spec: unknown field(s) {', '.join(unknown)}; known: {', '.join(known)}")
        return cls(**doc)
