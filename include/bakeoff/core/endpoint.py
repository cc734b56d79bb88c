"""An endpoint: where a target's model is served, and how to talk to it."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field, fields
from typing import Any

from pydantic import JsonValue

from bakeoff.core.facts import AsGiven
from bakeoff.core.pinning import client_context


class Provenance(AsGiven):
    """What a ready server said about itself and what was asked of it (``serving.deploy``), stored in
    endpoint.json and carried into each benchmark's snapshot. Read from every version's endpoints and
    written back with the keys it was given, so the stored JSON and the reports stay as they were."""

    # what the server says about itself: /v1/models and /version as answered
    models: JsonValue = None
    version: JsonValue = None
    # what was asked of it (``deploy.stack_facts``); a static endpoint's: what it says it serves
    stack: str | None = None
    stack_in_plan: str | None = None
    stack_label: str | None = None
    client_mode: str | None = None
    deployed_by: str | None = None
    served_model: str | None = None
    served_by: dict[str, JsonValue] | None = None
    models_offered: list[JsonValue] | None = None
    custom: dict[str, JsonValue] | None = None  # a custom stack's declaration (its routes among them)
    image: str | None = None
    entrypoint: str | None = None
    engine_args: list[str] | None = None
    env: dict[str, str] | None = None
    extra_files: dict[str, str] | None = None
    # where it runs: the round trip from here, the node's own facts, a cluster's roles
    network: dict[str, JsonValue] | None = None
    node: dict[str, JsonValue] | None = None
    roles: list[dict[str, JsonValue]] | None = None

    def to_json(self) -> dict[str, JsonValue]:
        return self.model_dump(mode="json")


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
    provenance: Provenance = field(default_factory=Provenance)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"provenance": self.provenance.to_json()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Endpoint:
        return cls(**{**d, "provenance": Provenance.model_validate(d.get("provenance") or {})})

    def route(self, kind: str, default: str) -> str | None:
        """Where the server answers ``kind`` (``tokenize``, ``metrics``): ``default`` for a built-in engine,
        a custom stack's declared route (in its provenance), None when it declares none."""
        custom = self.provenance.custom
        if custom is None:
            return default
        route = custom.get(f"{kind}_route")
        return route if isinstance(route, str) else None

    def verify(self) -> ssl.SSLContext | bool:
        """What an httpx client passes as ``verify``: this node's pinned certificate, if it has one."""
        return client_context(self.base_url, self.tls_cert)
