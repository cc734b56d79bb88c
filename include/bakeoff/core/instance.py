"""A node as the providers report it and the steps pass it on: one typed field per fact a later step
reads (how it is reached and trusted, what the cloud says of it, a local emulator node's process, a
cluster's router), in place of a free-form dict that readers searched by key.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from bakeoff.core.facts import ProvisioningRecord


@dataclass
class Instance:
    """A running (or once running) node. Small and JSON-able: it travels between tasks."""

    provider: str
    id: str
    target: str  # target slug
    run_id: str
    state: str  # pending | running | terminated | failed
    host: str | None = None  # address the serving port is reached on
    port: int | None = None  # serving port
    instance_type: str = ""
    region: str | None = None
    launched_at: float | None = None  # epoch seconds
    expires_at: float | None = None
    tags: dict[str, str] = field(default_factory=dict)
    # how later steps reach and trust it: its own certificate (provision), the client bundle it fetched,
    # its agent's port (the provider's listing) and address (node_ready)
    tls_cert: str | None = None
    client_bundle: str | None = None
    agent_port: int | None = None
    agent_url: str | None = None
    # what its cloud says of it: EC2's or OCI's lifecycle state, a REST cloud's status; its zone or domain
    cloud_state: str | None = None
    zone: str | None = None
    # an existing endpoint's own URL (static), used as given
    url: str | None = None
    # a local emulator node's process: its ids, log, config, mode, owning host and power rows
    pid: int | None = None
    pgid: int | None = None
    log: str | None = None
    config: str | None = None
    mode: str | None = None
    owner: str | None = None
    power_csv: str | None = None
    emulated: bool = False  # backed by the emulator (a local node, an emulated cluster)
    # a cluster target's front: its nodes' ids and the router's pid
    cluster: list[str] = field(default_factory=list)
    router_pid: int | None = None
    # how the create went (providers/base.CloudProvider.create): provision moves it into its record
    provisioning: ProvisioningRecord | None = None

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["provisioning"] = self.provisioning.model_dump(mode="json") if self.provisioning else None
        return doc

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Instance:
        """From ``to_dict``'s JSON (an XCom, instance.json); an earlier version's ``details`` keys that
        name a field are read as it."""
        doc = dict(d)
        known = {f.name for f in fields(cls)}
        doc = {**{k: v for k, v in (doc.pop("details", None) or {}).items() if k in known}, **doc}
        prov = doc.pop("provisioning", None)
        return cls(**doc, provisioning=ProvisioningRecord.model_validate(prov) if prov else None)

    @property
    def base_url(self) -> str:
        """https when the node was booted with a per-node certificate (``tls_cert``, pinned by every
        client; see serving/tls.py), else plain http (the loopback emulator)."""
        scheme = "https" if self.tls_cert else "http"
        return f"{scheme}://{self.host}:{self.port}"
