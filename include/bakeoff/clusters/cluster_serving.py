"""Serving readiness of a cluster target, role by role.

A cluster's endpoint is its router; the router's own /health only says each node answers. The
deploy step's readiness check of a cluster therefore looks at every prefill and decode node itself
(its /health and /v1/models, over the node's pinned certificate) before the router counts, so a
benchmark never starts while one role is down. A node that does not serve is classified from its
own logs (agent, console), and the failure names its role, index and instance: that is what a
person acts on. Once every role serves, deploy.json gains ``roles``: each node's role, image, engine
arguments, parallelism and instance, as the node was asked to run them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bakeoff import store
from bakeoff.clusters import cluster
from bakeoff.core.endpoint import Endpoint
from bakeoff.core.instance import Instance
from bakeoff.serving import deploy
from bakeoff.serving.readiness import classify, mask

if TYPE_CHECKING:
    from bakeoff.plan.target import Target


def nodes_of(out_dir: str | store.StorePath, node_cert: str | None = None) -> list[cluster.ClusterNode]:
    """The cluster's nodes as provision recorded them (cluster.json beside deploy.json). With ``node_cert``
    each must be reached over TLS pinned to it: a cluster.json edited to name another host gets no key."""
    doc = store.read_json(store.at(out_dir) / "cluster.json", None)
    if not isinstance(doc, dict) or not doc.get("nodes"):
        raise deploy.DeployFailed("cluster.json names no nodes: provision did not finish", "crash", "no cluster.json")
    nodes = [
        cluster.ClusterNode(
            n.get("index"),
            n.get("role"),
            n.get("slug"),
            Instance.from_dict(n["instance"]) if n.get("instance") else None,
        )
        for n in doc["nodes"]
    ]
    for n in nodes:
        recorded = n.instance.tls_cert if n.instance else None
        if node_cert and recorded != node_cert:
            why = f"{n.role} node {n.index}: cluster.json records a certificate that is not the target's"
            raise deploy.DeployFailed(f"{why}; the run's key is not sent to it", "crash", why)
    return nodes


def check_cluster_serving(
    target: Target,
    instance: Instance,
    *,
    api_key: str | None,
    out_dir: str | store.StorePath,
    waited_s: float,
    credentials: deploy.Credentials | None = None,
    masked: tuple[str, ...] = (),
    node_cert: str | None = None,
) -> Endpoint | None:
    """One look at the cluster whose front (its router) is ``instance``: the router's endpoint once every
    role's node serves the model, None while one comes up. DeployFailed naming the role and node: at
    once when that node's output shows a certain failure, else for the first node still down after
    ``deploy.deploy_timeout(target)``. ``node_cert``: the certificate the target's nodes serve with
    (serving.tls.node_identity); a node recorded with another is refused before the run's key is sent."""
    nodes = nodes_of(out_dir, node_cert)
    down = cluster.look_roles(nodes, target, api_key)
    timed_out = waited_s >= deploy.deploy_timeout(target)
    for n in (n for n in nodes if n.index in down):
        failure, detail = classify_node(n, down[n.index], api_key, credentials)
        if not timed_out and failure not in deploy.CERTAIN_FAILURES:
            continue
        detail = mask(detail, api_key, *masked)
        where = f"{n.role} node {n.index} ({n.instance_id})"
        store.write_json(
            store.at(out_dir) / "deploy.json",
            {"ready": False, "failure": failure, "detail": f"{where}: {detail}", "role": n.role, "node": n.index},
        )
        raise deploy.DeployFailed(
            f"{target.name}: {where} did not become ready ({failure}): {detail}", failure, f"{where}: {detail}"
        )
    if down:
        return None
    return deploy.check_serving(
        target,
        instance,
        api_key=api_key,
        out_dir=out_dir,
        waited_s=waited_s,
        credentials=credentials,
        masked=masked,
        provenance={"roles": cluster.provenance(nodes, target)},
    )


def classify_node(
    node: cluster.ClusterNode, why: str, api_key: str | None, credentials: deploy.Credentials | None
) -> tuple[str, str]:
    """How a node that does not serve failed, from its own logs (agent, console): readiness.classify."""
    inst = cluster.inst_of(node)
    return classify(deploy.node_output(inst, api_key, credentials), why)


def certain_failure(api_key: str | None, credentials: deploy.Credentials | None) -> cluster.Failed:
    """For cluster.check_roles at provision: a node's failure that waiting cannot help (OOM, image pull,
    weights, crash), in words with the key masked; None while it may still come up."""

    def failed(node: cluster.ClusterNode, why: str) -> str | None:
        failure, detail = classify_node(node, why, api_key, credentials)
        return f"{failure}: {mask(detail, api_key)}" if failure in deploy.CERTAIN_FAILURES else None

    return failed
