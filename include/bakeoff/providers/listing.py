"""A listed cloud node as bakeoff's Instance: every cloud reads the same tags (target, run, serving port,
expiry) and resolves the same addresses, so the record of a node is built one way whichever API
listed it; each cloud passes only what its API spells differently (id, state, IP, type, region)."""

from __future__ import annotations

import httpx

from bakeoff.core.instance import Instance
from bakeoff.core.launch import AGENT_PORT
from bakeoff.providers import tags as node_tags
from bakeoff.providers.tags import TAG_RUN, TAG_TARGET


def resolve_address(
    address_map_url: str | None, provider: str, instance_id: str, host: str | None, port: int | None
) -> tuple[str | None, int | None, int | None]:
    """Where the serving port and the node agent's port are reached from here: the node's IP and
    ports, or, when a port-forwarding layer publishes addresses (the sandbox, an SSH/SSM tunnel),
    what that layer says."""

    if not address_map_url:
        return host, port, AGENT_PORT
    try:
        r = httpx.get(f"{address_map_url.rstrip('/')}/{provider}/{instance_id}", timeout=5.0)
    except httpx.HTTPError:
        return None, None, None
    if r.status_code != 200:
        return None, None, None
    d = r.json()
    return d.get("host"), d.get("port"), d.get("agent_port")


def launched_emulated(address_map_url: str | None, provider: str, instance_id: str) -> bool:
    """Whether the layer that launched the node (the sandbox's registry, behind its address map) records
    ``instance_id`` as emulator-backed: asked by instance id, on the worker's side, so nothing the node
    runs can answer for it. No address map, no answer, or anything but a literal ``true``: False."""
    if not address_map_url:
        return False
    try:
        r = httpx.get(f"{address_map_url.rstrip('/')}/{provider}/{instance_id}", timeout=5.0)
        return r.status_code == 200 and r.json().get("emulated") is True
    except (httpx.HTTPError, ValueError, AttributeError):
        return False


def listed_instance(
    provider: str,
    instance_id: str,
    tags: dict[str, str],
    state: str,
    ip: str | None,
    address_map_url: str | None,
    *,
    instance_type: str,
    region: str | None,
    launched_at: float | None,
    cloud_state: str | None,
    zone: str | None = None,
) -> Instance:
    """One listed node: the serving port from its tags, its addresses resolved only once it runs (a
    pending node has no forwarded ports yet), and the agent's port beside the cloud's state and zone."""
    port = node_tags.port_of(tags)
    host, agent_port = ip, None
    if state == "running":
        host, port, agent_port = resolve_address(address_map_url, provider, instance_id, ip, port)
    return Instance(
        provider=provider,
        id=instance_id,
        target=tags.get(TAG_TARGET, ""),
        run_id=tags.get(TAG_RUN, ""),
        state=state,
        host=host,
        port=port,
        instance_type=instance_type,
        region=region,
        launched_at=launched_at,
        expires_at=node_tags.expiry_of(tags),
        tags=tags,
        cloud_state=cloud_state,
        zone=zone,
        agent_port=agent_port,
    )
