"""A target that spans nodes: how many (or which rack shape), and the prefill / decode roles placed on them.

A plain target is one node. ``cluster: {nodes: 4, prefill: {...}, decode: {...}}`` makes it a
disaggregated deployment of N nodes of its instance type; ``cluster: {rack: gb200-nvl72}`` makes it
an NVL72-shaped one (the rack fixes GPUs per tray and the NVLink domain; ``nodes`` then counts the
rack's trays the target takes, all of them by default). Which clouds place nodes together, and which
rack shapes they sell, is the catalog's ``clusters.yaml`` (with sources and dates); a cluster on a
cloud without an offer, a rack the cloud does not list, or roles that do not fit the nodes is refused
here, naming the field. The cluster layer (bakeoff.clusters.cluster) provisions the nodes all or nothing.
"""

from __future__ import annotations

import math
from functools import lru_cache
from importlib import resources
from typing import Any, Literal, get_args

import yaml
from pydantic import Field, model_validator

from bakeoff.plan.fields import Strict

RackShape = Literal["gb200-nvl72", "gb300-nvl72"]
# the KV transfer engines the vendored recipes name (nixl, MoRI, Mooncake, UCX) and plain NVLink
KvTransfer = Literal["nixl", "mori", "mooncake", "ucx", "nvlink"]
KV_TRANSFERS = frozenset(get_args(KvTransfer))


@lru_cache
def _raw() -> dict[str, Any]:
    text = resources.files("bakeoff.catalog").joinpath("clusters.yaml").read_text()
    return yaml.safe_load(text) or {}


def racks() -> dict[str, dict[str, Any]]:
    """Rack shapes: GPU, trays, GPUs per tray, source and date."""
    return dict(_raw().get("racks") or {})


def offers() -> dict[str, dict[str, Any]]:
    """Per cloud: its placement, node limit, the rack shapes it sells (instance type, market), sources."""
    return dict(_raw().get("offers") or {})


class ClusterRole(Strict):
    """Prefill or decode workers: how many, and each worker's parallelism (a worker's GPUs = max(tp, ep))."""

    workers: int = Field(1, ge=1, le=72)
    tp: int = Field(1, ge=1, le=72)
    ep: int = Field(1, ge=1, le=72)
    dp_attention: bool = False

    @property
    def gpus_per_worker(self) -> int:
        return max(self.tp, self.ep)

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def parallelism(self) -> str:
        """'TP4 EP4 DP-attn': one worker's parallelism, as plan check prints a target's."""
        return f"TP{self.tp} EP{self.ep}" + (" DP-attn" if self.dp_attention else "")

    def nodes_needed(self, node_gpus: int) -> int:
        """Nodes these workers take: small workers pack into a node, a large one spans whole nodes."""
        per = self.gpus_per_worker
        if per >= node_gpus:
            return self.workers * math.ceil(per / node_gpus)
        return math.ceil(self.workers / (node_gpus // per))


class Cluster(Strict):
    nodes: int | None = Field(None, ge=1, le=72, description="nodes of the target's instance type (a rack: trays)")
    rack: RackShape | None = Field(None, description="an NVLink rack shape (catalog clusters.yaml racks)")
    prefill: ClusterRole = ClusterRole()
    decode: ClusterRole = ClusterRole()
    kv_transfer: KvTransfer | None = Field(
        None, description="how KV moves prefill -> decode (default: nvlink inside a rack, nixl between nodes)"
    )
    deadline_s: float = Field(
        1800, gt=0, le=6 * 3600, description="every node up by then, or every node released (all or nothing)"
    )

    @model_validator(mode="after")
    def _shape(self) -> Cluster:
        if self.nodes is None and self.rack is None:
            raise ValueError("cluster.nodes: give nodes (e.g. 4) or a rack shape (rack: gb200-nvl72)")
        if self.rack is not None:
            trays = int(racks()[self.rack]["trays"])
            if self.nodes is not None and self.nodes > trays:
                raise ValueError(f"cluster.nodes: a {self.rack} rack has {trays} trays; nodes must be at most {trays}")
        return self

    @property
    def node_count(self) -> int:
        return self.nodes if self.nodes is not None else int(racks()[self.rack or ""]["trays"])

    @property
    def kv_path(self) -> str:
        return self.kv_transfer or ("nvlink" if self.rack else "nixl")

    @property
    def kv_label(self) -> str:
        """The KV transfer engine and the link it crosses, for people."""
        if self.kv_path == "nvlink":
            return "nvlink"
        return f"{self.kv_path} ({'in the NVLink domain' if self.kv_over_nvlink else 'over the NICs'})"

    @property
    def kv_over_nvlink(self) -> bool:
        """KV stays in the NVLink domain: inside a rack whatever engine moves it, or plain nvlink."""
        return self.rack is not None or self.kv_transfer == "nvlink"


def layout_for(cluster: Cluster, node_gpus: int) -> list[str]:
    """The role of each node: prefill nodes first, then decode, then idle (a rack's unused trays)."""
    p, d = cluster.prefill.nodes_needed(node_gpus), cluster.decode.nodes_needed(node_gpus)
    return ["prefill"] * p + ["decode"] * d + ["idle"] * max(0, cluster.node_count - p - d)


def check_offer(provider: str, rack: str | None) -> dict[str, Any]:
    """The cloud's cluster offer; ValueError naming the field when it has none, or not this rack shape."""
    offer = offers().get(provider)
    if offer is None:
        with_offer = ", ".join(sorted(offers()))
        raise ValueError(
            f"cluster: {provider} has no multi-node placement offer in the catalog (clusters.yaml); "
            f"a target spanning nodes runs on {with_offer}, or remove cluster for one node"
        )
    sold = offer.get("racks") or {}
    if rack is not None and not offer.get("any_rack") and rack not in sold:
        listed = ", ".join(sorted(sold)) or "none"
        raise ValueError(
            f"cluster.rack: {provider} does not offer {rack} (its rack shapes in the catalog: {listed}); "
            "pick one of those, another cloud, or give cluster.nodes for separate 8-GPU nodes"
        )
    return dict(offer)


def check(cluster: Cluster, provider: str, instance_type: str, node_gpus: int, gpu: str) -> None:
    """What the cloud, the instance type and the roles allow; ValueError naming the field."""
    offer = check_offer(provider, cluster.rack)
    if cluster.node_count > int(offer.get("max_nodes", 1)):
        raise ValueError(
            f"cluster.nodes: {provider} places at most {offer['max_nodes']} nodes together "
            f"({offer.get('source')}, {offer.get('as_of')}); got {cluster.node_count}"
        )
    if cluster.rack is not None:
        rack = racks()[cluster.rack]
        sold = offer.get("racks") or {}
        want = (sold.get(cluster.rack) or {}).get("instance_type")
        if want and instance_type != want:
            raise ValueError(
                f"instance_type: {provider} sells {cluster.rack} as {want} trays, not {instance_type}; "
                f"set instance_type: {want}"
            )
        if gpu != rack["gpu"] or node_gpus != int(rack["gpus_per_tray"]):
            raise ValueError(
                f"instance_type: a {cluster.rack} tray is {rack['gpus_per_tray']} {rack['gpu']} GPUs; "
                f"{instance_type} is {node_gpus} {gpu}"
            )
    for name in ("prefill", "decode"):
        role: ClusterRole = getattr(cluster, name)
        per = role.gpus_per_worker
        domain = int(racks()[cluster.rack]["trays"]) * node_gpus if cluster.rack else node_gpus
        if per > node_gpus and (per % node_gpus or (cluster.rack is None and role.tp > node_gpus)):
            raise ValueError(
                f"cluster.{name}.tp: a worker of {per} GPUs on {node_gpus}-GPU nodes must be whole nodes, and "
                f"tensor parallelism stays inside one NVLink domain ({domain} GPUs here); lower tp, or spread "
                "experts across nodes with ep"
            )
        if per < node_gpus and node_gpus % per:
            raise ValueError(f"cluster.{name}: a worker of {per} GPUs does not divide a {node_gpus}-GPU node")
    need = cluster.prefill.nodes_needed(node_gpus) + cluster.decode.nodes_needed(node_gpus)
    if need > cluster.node_count:
        raise ValueError(
            f"cluster.nodes: prefill {cluster.prefill.gpus} GPUs and decode {cluster.decode.gpus} GPUs take {need} "
            f"nodes of {node_gpus} GPUs ({instance_type}); the target has {cluster.node_count}: raise nodes or "
            "shrink a role's workers"
        )


def offer_source(provider: str, rack: str | None) -> str:
    """Where the catalog's cluster offer for this cloud (and rack) is from, for reports."""
    offer = offers().get(provider) or {}
    row = (offer.get("racks") or {}).get(rack or "") or offer
    return f"{row.get('source', 'unknown')}, {row.get('as_of', 'undated')}"
