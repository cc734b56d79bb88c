"""All-or-nothing provisioning of a target that spans nodes, as a layer above the providers.

A cluster target (plan.cluster) is N nodes of one instance type, each with a role (prefill, decode,
or idle: a rack's unused tray). This module asks the target's provider for each node through its
ordinary per-instance API (create, check_ready, terminate), under one deadline for the whole
cluster: either every node is running and reachable by then, or every node that was asked for is
released (a partial cluster never starts a benchmark, and never outlives the deadline) and
ClusterFailed names the node and its role.

Nodes are ordinary instances of the run: each carries the run's tags and its own target tag
``<target slug>--n<i>`` (teardown.NODE_SEP), so the sweep (every instance tagged with the run), the
reaper (each tagged instance by its run and expiry) and each node's kill switch (the same
``expires_at`` and ``shutdown_after_s`` in every node's spec) treat them as one unit, and
teardown.terminate_tagged(slug=<target>) finds all of a target's nodes. Every step is timed, so the
caller can print or store the timeline per node.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from bakeoff import faults, teardown
from bakeoff.plan.cluster import layout_for
from bakeoff.providers.base import TAG_TARGET, Instance, Provider, ProviderError

log = logging.getLogger(__name__)

TAG_ROLE = "bakeoff:role"  # prefill | decode | idle
TAG_CLUSTER = "bakeoff:cluster"  # the target's slug, on each of its nodes


def node_slug(target_slug: str, index: int) -> str:
    """The target tag of one node: a slug never holds ``--`` (Target.slug collapses runs of dashes)."""
    return f"{target_slug}{teardown.NODE_SEP}n{index}"


class NodeTarget:
    """One node of a cluster target as a provider sees it: the target, with its own name and slug (so
    per-(run, target) idempotency keys, names and tags differ per node). Everything else is the target's."""

    def __init__(self, target: Any, index: int, role: str):
        self._target, self.index, self.role = target, index, role
        self.name = f"{target.name} node {index} {role}"
        self.slug = node_slug(target.slug, index)

    def __getattr__(self, item: str) -> Any:
        return getattr(self._target, item)


@dataclass
class ClusterNode:
    """One node and its timeline (seconds from the cluster's start; None: never reached)."""

    index: int
    role: str
    slug: str
    instance: dict[str, Any] | None = None
    asked_s: float | None = None
    created_s: float | None = None
    ready_s: float | None = None
    released_s: float | None = None
    error: str | None = None

    @property
    def instance_id(self) -> str | None:
        return (self.instance or {}).get("id")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ClusterResult:
    target: str
    nodes: list[ClusterNode]
    deadline_s: float
    released: list[str] = field(default_factory=list)

    def by_role(self, role: str) -> list[ClusterNode]:
        return [n for n in self.nodes if n.role == role]

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "deadline_s": self.deadline_s,
            "nodes": [n.to_dict() for n in self.nodes],
            "released": list(self.released),
        }


class ClusterFailed(ProviderError):
    """Some node could not be created or was not ready in time; every node asked for was released."""

    def __init__(self, message: str, result: ClusterResult, errors: dict[str, str]):
        left = f"; could not release: {errors}" if errors else ""
        super().__init__(f"{message}; released {len(result.released)} node(s) of {result.target}{left}")
        self.result, self.errors = result, dict(errors)


def provision(
    provider: Provider,
    target: Any,
    run_id: str,
    *,
    tags: dict[str, str],
    spec: dict[str, Any],
    deadline_s: float | None = None,
    poll_s: float = 0.05,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ClusterResult:
    """Create every node of the cluster target, then look at each until all are ready; at the first
    failure, or at the deadline (the plan's ``cluster.deadline_s`` unless given), release every node
    and raise ClusterFailed naming the node and its role."""
    cluster = target.cluster
    if cluster is None:
        raise ValueError(f"targets.{target.name}.cluster: not a cluster target")
    roles = layout_for(cluster, target.instance.gpus)
    result = ClusterResult(target.slug, [], float(deadline_s if deadline_s is not None else cluster.deadline_s))
    result.nodes = [ClusterNode(i, role, node_slug(target.slug, i)) for i, role in enumerate(roles)]
    t0 = clock()
    deadline = t0 + result.deadline_s
    last = len(result.nodes) - 1
    for node in result.nodes:
        if clock() >= deadline:
            _fail(
                provider, run_id, result, t0, clock, f"cluster {target.name}: deadline passed before node {node.index}"
            )
        node.asked_s = clock() - t0
        nt = NodeTarget(target, node.index, node.role)
        try:
            if node.index == last:
                faults.maybe_fail("node_create", target)
            inst = provider.create(
                nt,
                run_id,
                tags={**tags, TAG_TARGET: nt.slug, TAG_ROLE: node.role, TAG_CLUSTER: target.slug},
                spec={**spec, "role": node.role, "node": node.index, "nodes": len(result.nodes)},
            )
        except Exception as e:  # noqa: BLE001 - any failure releases the whole cluster
            node.error = f"{type(e).__name__}: {e}"
            _fail(
                provider,
                run_id,
                result,
                t0,
                clock,
                f"cluster {target.name}: node {node.index} ({node.role}) could not be created: {node.error}",
            )
        node.instance = inst.to_dict()
        node.created_s = clock() - t0
    pending = list(result.nodes)
    while pending:
        for node in list(pending):
            try:
                ready = provider.check_ready(Instance.from_dict(node.instance or {}))
            except Exception as e:  # noqa: BLE001
                node.error = f"{type(e).__name__}: {e}"
                _fail(
                    provider,
                    run_id,
                    result,
                    t0,
                    clock,
                    f"cluster {target.name}: node {node.index} ({node.role}) ended before it was ready: {node.error}",
                )
            if ready is not None:
                node.instance, node.ready_s = ready.to_dict(), clock() - t0
                pending.remove(node)
        if pending and clock() >= deadline:
            late = ", ".join(f"node {n.index} ({n.role})" for n in pending)
            for n in pending:
                n.error = f"not ready after {result.deadline_s:.0f}s"
            _fail(
                provider,
                run_id,
                result,
                t0,
                clock,
                f"cluster {target.name}: {late} not running with an address after the cluster deadline "
                f"{result.deadline_s:.0f}s (targets.{target.name}.cluster.deadline_s)",
            )
        if pending:
            sleep(min(poll_s, max(0.0, deadline - clock())))
    return result


def _fail(
    provider: Provider, run_id: str, result: ClusterResult, t0: float, clock: Callable[[], float], why: str
) -> None:
    errors: dict[str, str] = {}
    release(provider, run_id, result, errors, t0=t0, clock=clock)
    log.error("%s", why)
    raise ClusterFailed(why, result, errors)


def release(
    provider: Provider,
    run_id: str,
    result: ClusterResult,
    errors: dict[str, str],
    *,
    t0: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[str]:
    """Terminate every node of the cluster: the ids it knows first, then whatever the run's tag finds
    for the target's nodes (a create whose answer was lost). Failures go to ``errors``."""
    start = clock() if t0 is None else t0
    known = [n.instance_id for n in result.nodes if n.instance_id]
    done = teardown.terminate_ids(provider, run_id, [i for i in known if i], errors)
    _, more, unlisted = teardown.terminate_tagged(provider, run_id, errors, slug=result.target, skip=set(known))
    errors.update(unlisted)
    now = clock() - start
    for n in result.nodes:
        if n.instance_id and f"{provider.name}:{n.instance_id}" not in errors:
            n.released_s = now
    result.released = sorted({*result.released, *(i for i in known if i), *done, *more})
    return result.released
