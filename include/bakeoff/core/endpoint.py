"""An endpoint: where a target's model is served, and how to talk to it."""

from __future__ import annotations

import ssl
from dataclasses import asdict, dataclass, field
from typing import Any

from bakeoff.core.pinning import client_context


@dataclass
class Endpoint:
    """JSON-able; never holds the API key itself, only the name of where to find it."""

    target: str  # target slug
    base_url: str  # e.g. https://203.0.113.7:8000 (cloud node) or http://127.0.0.1:8123
    model: str  # the model id the server answers to
    stack: str
    emulated: bool = False
    api_key_env: str | None = None  # environment variable holding the key, if any
    agent_url: str | None = None  # the node agent (co-located client, logs, power), if one runs
    tls_cert: str | None = None  # the node's own certificate (PEM, public): https clients pin it
    power_csv: str | None = None  # the node's power rows, readable here (a local emulator node; others: the agent)
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Endpoint:
        return cls(**d)

    def route(self, kind: str, default: str) -> str | None:
        """Where the server answers ``kind`` (``tokenize``, ``metrics``): ``default`` for a built-in engine,
        a custom stack's declared route (in its provenance), None when it declares none."""
        custom = self.provenance.get("custom")
        if not isinstance(custom, dict):
            return default
        route = custom.get(f"{kind}_route")
        return route if isinstance(route, str) else None

    def verify(self) -> ssl.SSLContext | bool:
        """What an httpx client passes as ``verify``: this node's pinned certificate, if it has one."""
        return client_context(self.base_url, self.tls_cert)
