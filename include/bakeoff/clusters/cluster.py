"""All-or-nothing provisioning of a target that spans nodes, as a layer above the providers.

A cluster target (plan.cluster) is N nodes of one instance type, each with a role (prefill, decode,
or idle: a rack's unused tray). This module asks the target's provider for each node through its
ordinary per-instance API (create, check_ready, terminate), under one deadline for the whole
cluster: either every node is running and reachable by then, or every node that was asked for is
released (a partial cluster never starts a benchmark, and never outlives the deadline) and
ClusterFailed names the node and its role.

Capacity fallback is per cluster, not per node: a cluster's nodes must stand together, so each
node is pinned to one site at a time (an OCI availability domain, an EC2 zone or region, a region
elsewhere: ``sites``, in the plan's order), and when a node's create is refused for capacity or
quota the nodes made so far are released first, then the whole cluster is asked for again at the
next site, under the same deadline. Any other failure fails the cluster as before.

Nodes are ordinary instances of the run: each carries the run's tags and its own target tag
``<target slug>--n<i>`` (teardown.NODE_SEP), so the sweep (every instance tagged with the run), the
reaper (each tagged instance by its run and expiry) and each node's kill switch (the same
``expires_at`` and ``shutdown_after_s`` in every node's spec) treat them as one unit, and
teardown.terminate_tagged(slug=<target>) finds all of a target's nodes. Every step is timed, so the
caller can print or store the timeline per node.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import httpx

from bakeoff import faults
from bakeoff.cleanup import teardown
from bakeoff.core.instance import Instance
from bakeoff.core.launch import LaunchSpec
from bakeoff.core.pinning import pinned_context
from bakeoff.plan.cluster import layout_for
from bakeoff.plan.multinode import SCALE_OUT_GBPS
from bakeoff.plan.options import DescribedGpu, ProviderOptions
from bakeoff.plan.target import Target
from bakeoff.providers.address import node_address, url_host
from bakeoff.providers.base import TAG_TARGET, CapacityError, Provider, ProviderError
from bakeoff.providers.local import STOP_KEY_ENV, stop_key
from bakeoff.serving.deploy import stack_facts
from bakeoff.serving.emulator.config import STOP_ROUTE
from bakeoff.twin.roofline import Roofline

log = logging.getLogger(__name__)

TAG_ROLE = "bakeoff:role"  # prefill | decode | idle
TAG_CLUSTER = "bakeoff:cluster"  # the target's slug, on each of its nodes


def node_slug(target_slug: str, index: int) -> str:
    """The target tag of one node: a slug never holds ``--`` (Target.slug collapses runs of dashes)."""
    return f"{target_slug}{teardown.NODE_SEP}n{index}"


class NodeTarget:
    """One node of a cluster target as a provider sees it: the target, with its own name and slug (so
    per-(run, target) idempotency keys, names and tags differ per node) and its role's parallelism
    (one worker per node, its TP capped at the node's GPUs: a worker spanning trays is served by its
    first one in the emulator). Everything else is the target's."""

    def __init__(self, target: Target, index: int, role: str, options: ProviderOptions | None = None):
        self._target, self.index, self.role = target, index, role
        if options is not None:  # pinned to one site of the cluster's (``sites``)
            self.provider_options = options
        self.name = f"{target.name} node {index} {role}"
        self.slug = node_slug(target.slug, index)
        spec = getattr(target.cluster, role, None) if role in ("prefill", "decode") else None
        gpus = target.instance.gpus
        self.tensor_parallel = min(spec.gpus_per_worker, gpus) if spec else gpus
        self.expert_parallel = self.tensor_parallel if spec and spec.ep > 1 else 1
        self.data_parallel_attention = bool(spec and spec.dp_attention)

    def __getattr__(self, item: str) -> Any:
        return getattr(self._target, item)

    @property
    def gpus_used(self) -> int:
        return int(self.tensor_parallel)

    def model_dump(self, **kw: Any) -> dict[str, Any]:
        """The node as a single-node target (what the local emulator and a node's boot script serve)."""
        out: dict[str, Any] = self._target.model_dump(**kw)
        out.update(
            name=self.name,
            cluster=None,
            tensor_parallel=self.tensor_parallel,
            pipeline_parallel=1,
            expert_parallel=self.expert_parallel,
            data_parallel_attention=self.data_parallel_attention,
        )
        if "provider_options" in self.__dict__:
            out["provider_options"] = self.provider_options.model_dump(**kw)
        return out


def sites(target: Target) -> list[tuple[str, ProviderOptions | None]]:
    """Where the whole cluster may be asked for, in the plan's order: (label, the target's options
    pinned there), as its cloud's options class places them (``ProviderOptions.sites``: one availability
    domain on OCI, one zone or a region without zones on EC2, one region elsewhere); a single
    ``("", None)`` when the plan lists at most one place, so the provider decides as for any node."""
    out: list[tuple[str, ProviderOptions | None]] = list(target.provider_options.sites())
    return out if len(out) > 1 else [("", None)]


@dataclass
class ClusterNode:
    """One node and its timeline (seconds from the cluster's start; None: never reached)."""

    index: int
    role: str
    slug: str
    instance: Instance | None = None
    asked_s: float | None = None
    created_s: float | None = None
    ready_s: float | None = None
    released_s: float | None = None
    error: str | None = None

    @property
    def instance_id(self) -> str | None:
        return self.instance.id if self.instance is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(replace(self, instance=None)), "instance": self.instance.to_dict() if self.instance else None}


def inst_of(node: ClusterNode) -> Instance:
    """A created node's instance (ProviderError for a node never created: nothing to reach)."""
    if node.instance is None:
        raise ProviderError(f"{node.role} node {node.index} ({node.slug}) was never created")
    return node.instance


@dataclass
class ClusterResult:
    target: str
    nodes: list[ClusterNode]
    deadline_s: float
    released: list[str] = field(default_factory=list)
    started: float | None = None  # the clock's reading when provisioning began (timeline origin)
    # each site the whole cluster was asked for, in order: {where, outcome, error, released}
    sites: list[dict[str, Any]] = field(default_factory=list)

    def by_role(self, role: str) -> list[ClusterNode]:
        return [n for n in self.nodes if n.role == role]

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "deadline_s": self.deadline_s,
            "nodes": [n.to_dict() for n in self.nodes],
            "released": list(self.released),
            "sites": [dict(x) for x in self.sites],
        }

    def timeline(self) -> list[str]:
        """One line per node: seconds from the start to asked, created, ready, released ('-': never)."""
        rows = [f"{'node':>4} {'role':8} {'asked s':>8} {'created s':>9} {'ready s':>8} {'released s':>10}  error"]
        for n in self.nodes:
            c = [("-" if v is None else f"{v:.2f}") for v in (n.asked_s, n.created_s, n.ready_s, n.released_s)]
            rows.append(f"{n.index:>4} {n.role:8} {c[0]:>8} {c[1]:>9} {c[2]:>8} {c[3]:>10}  {n.error or ''}")
        return rows


class ClusterFailed(ProviderError):
    """Some node could not be created or was not ready in time; every node asked for was released.
    ``refused``: a node's create was refused for capacity or quota (the next site may have room)."""

    def __init__(self, message: str, result: ClusterResult, errors: dict[str, str], refused: bool = False):
        left = f"; could not release: {errors}" if errors else ""
        super().__init__(f"{message}; released {len(result.released)} node(s) of {result.target}{left}")
        self.result, self.errors, self.refused = result, dict(errors), refused


def provision(
    provider: Provider,
    target: Target,
    run_id: str,
    *,
    tags: dict[str, str],
    spec: LaunchSpec | Mapping[str, Any],
    deadline_s: float | None = None,
    poll_s: float = 0.05,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ClusterResult:
    """Create every node of the cluster target at one site (``sites``), then look at each until all
    are ready; at the first failure, or at the deadline (the plan's ``cluster.deadline_s`` unless
    given), release every node and raise ClusterFailed naming the node and its role. A create refused
    for capacity or quota moves the whole cluster to the next site once its nodes are released."""
    cluster = target.cluster
    if cluster is None:
        raise ValueError(f"targets.{target.name}.cluster: not a cluster target")
    roles = layout_for(cluster, target.instance.gpus)
    limit = float(deadline_s if deadline_s is not None else cluster.deadline_s)
    t0 = clock()
    tried: list[dict[str, Any]] = []
    places = sites(target)
    for k, (where, options) in enumerate(places):
        result = ClusterResult(target.slug, [], limit, started=t0, sites=tried)
        result.nodes = [ClusterNode(i, role, node_slug(target.slug, i)) for i, role in enumerate(roles)]
        try:
            _provision_at(provider, target, run_id, tags, spec, result, options, poll_s, clock, sleep)
        except ClusterFailed as e:
            tried.append({"where": where, "outcome": "refused" if e.refused else "failed", "error": str(e)[:300]})
            tried[-1]["released"] = list(result.released)
            if not e.refused or k == len(places) - 1 or clock() >= t0 + limit:
                raise
            log.warning("cluster %s: refused at %s, nodes released; trying %s", target.name, where, places[k + 1][0])
            continue
        tried.append({"where": where, "outcome": "running", "error": "", "released": []})
        return result
    raise AssertionError("sites() names at least one site")  # pragma: no cover


def _provision_at(
    provider: Provider,
    target: Target,
    run_id: str,
    tags: dict[str, str],
    spec: LaunchSpec | Mapping[str, Any],
    result: ClusterResult,
    options: ProviderOptions | None,
    poll_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> None:
    """Every node of ``result`` at one site (``options``: the target's, pinned there; None: as planned)."""
    t0 = result.started if result.started is not None else clock()
    deadline = t0 + result.deadline_s
    last = len(result.nodes) - 1
    for node in result.nodes:
        if clock() >= deadline:
            _fail(
                provider, run_id, result, t0, clock, f"cluster {target.name}: deadline passed before node {node.index}"
            )
        node.asked_s = clock() - t0
        nt = NodeTarget(target, node.index, node.role, options)
        try:
            if node.index == last:
                faults.maybe_fail("node_create", target)
            inst = provider.create(
                cast("Target", nt),  # a NodeTarget reads as its Target (see NodeTarget)
                run_id,
                tags={**tags, TAG_TARGET: nt.slug, TAG_ROLE: node.role, TAG_CLUSTER: target.slug},
                spec=LaunchSpec.of(spec),  # the node's role and index travel in its target and tags
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
                refused=isinstance(e, CapacityError),
            )
        node.instance = inst
        node.created_s = clock() - t0
    pending = list(result.nodes)
    while pending:
        for node in list(pending):
            try:
                ready = provider.check_ready(inst_of(node))
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
                node.instance, node.ready_s = ready, clock() - t0
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


def _fail(
    provider: Provider,
    run_id: str,
    result: ClusterResult,
    t0: float,
    clock: Callable[[], float],
    why: str,
    refused: bool = False,
) -> None:
    errors: dict[str, str] = {}
    release(provider, run_id, result, errors, t0=t0, clock=clock)
    log.error("%s", why)
    raise ClusterFailed(why, result, errors, refused=refused and not errors)


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
    start = t0 if t0 is not None else result.started if result.started is not None else clock()
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


# --- serving a cluster: KV path, the emulated router, readiness per role, provenance -------------


def kv_seconds_per_token(target: Target) -> float:
    """Seconds one prompt token's KV takes from a prefill worker to a decode worker: over NVLink inside
    a rack, else over the GPUs' scale-out NICs (plan.multinode.SCALE_OUT_GBPS), each prefill GPU
    sending its shard (as serving.emulator.disagg models it). Emulated time, before time_scale."""

    cluster, gpu = target.cluster, target.gpu
    assert cluster is not None, f"{target.name} is not a cluster target"
    node = NodeTarget(target, 0, "prefill")
    # over NVLink on a GPU the catalog knows (one the plan only describes has no link figure)
    link_gbps = (
        gpu.scale_up_gbps
        if cluster.kv_over_nvlink and not isinstance(gpu, DescribedGpu)
        else SCALE_OUT_GBPS.get(gpu.name, 50.0)
    )
    # a NodeTarget reads as its Target (every other attribute is the target's): the roofline sees one node
    return float(
        Roofline.for_target(cast("Target", node)).kv_bytes_per_token / (link_gbps * 1e9 * node.tensor_parallel)
    )


def node_cert(nodes: list[ClusterNode]) -> str | None:
    """The certificate the cluster's nodes serve with (one per target: serving.tls.node_identity), if any."""
    certs = {n.instance.tls_cert for n in nodes if n.instance is not None}
    return next((c for c in certs if c), None)


def role_urls(result: ClusterResult, role: str) -> list[str]:
    return [inst_of(n).base_url for n in result.by_role(role)]


@dataclass
class Router:
    """The emulated cluster's front: its base URL and the process serving it."""

    base_url: str
    pid: int
    config: dict[str, Any]

    def stop(self, grace_s: float = 3.0) -> None:
        try:
            os.killpg(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        proc = _routers.pop(self.pid, None)
        if proc is not None:
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                proc.wait(timeout=grace_s)


_routers: dict[int, subprocess.Popen[bytes]] = {}


def start_router(
    result: ClusterResult, target: Target, workdir: Path, *, expires_at: float | None = None, timeout_s: float = 30.0
) -> Router:
    """Start the router (serving.emulator.router) over the cluster's prefill and decode nodes on
    this worker's node address (providers/address.py: loopback unless other workers must reach
    it); it exits by itself at ``expires_at``. For emulated clusters (local provider, sandbox);
    nodes with a pinned certificate (``tls_cert``, one per target) are reached over it."""
    config = {
        "prefill": role_urls(result, "prefill"),
        "decode": role_urls(result, "decode"),
        "kv_s_per_token": kv_seconds_per_token(target),
        "time_scale": target.emulator.time_scale,
        "expires_at": expires_at,
        "tls_cert": node_cert(result.nodes),
        "stop_key_env": STOP_KEY_ENV,  # its key opens the stop route, for a worker that cannot signal it
    }
    workdir.mkdir(parents=True, exist_ok=True)
    cfg, port_file, log_path = workdir / "router.json", workdir / "router.port", workdir / "router.log"
    cfg.write_text(json.dumps(config))
    port_file.unlink(missing_ok=True)
    host = node_address()
    cmd = [sys.executable, "-m", "bakeoff.serving.emulator.router", "--config", str(cfg), "--port-file", str(port_file)]
    cmd += ["--host", host]
    env = {**os.environ, STOP_KEY_ENV: stop_key(router_stop_id(workdir.name))}
    with open(log_path, "ab") as log_fh:
        proc = subprocess.Popen(
            cmd, stdout=log_fh, stderr=subprocess.STDOUT, env=env, start_new_session=True, close_fds=True
        )
    _routers[proc.pid] = proc
    deadline = time.monotonic() + timeout_s
    while not port_file.is_file():
        if proc.poll() is not None or time.monotonic() > deadline:
            Router("", proc.pid, config).stop()
            tail = log_path.read_text(errors="replace")[-2000:]
            raise ProviderError(f"cluster {target.name}: the router did not start; its log ends:\n{tail}")
        time.sleep(0.05)
    return Router(f"http://{url_host(host)}:{int(port_file.read_text())}", proc.pid, config)


def router_stop_id(folder: str) -> str:
    """What the router's stop key is derived from: its folder's name (the run and target, made safe)."""
    return f"router/{folder}"


def stop_router(pid: int, folder: str, url: str | None = None) -> bool:
    """Stop a cluster's router; True once it is seen gone. Where its recorded pid runs this router
    (its command names its folder: a reused or tampered pid, or another target's router, is left
    alone) it is signalled; else, from a worker that does not run it, its stop route at ``url`` is
    asked and its port must then refuse. False when neither could be done (it exits at its expiry)."""
    import psutil  # noqa: PLC0415 - only stopping a router by its recorded pid checks the process

    try:
        cmd = psutil.Process(pid).cmdline()
        here = "bakeoff.serving.emulator.router" in cmd and any(f"/{folder}/" in a for a in cmd)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        here = False
    if here:
        Router("", pid, {}).stop()
        return True
    return bool(url) and _stop_remote_router(str(url), folder)


def _stop_remote_router(url: str, folder: str, grace_s: float = 10.0) -> bool:
    auth = {"Authorization": f"Bearer {stop_key(router_stop_id(folder))}"}
    try:
        answer = httpx.post(f"{url}{STOP_ROUTE}", headers=auth, timeout=5.0).status_code
    except httpx.ConnectError:
        return True  # nothing listens there: gone already
    except httpx.HTTPError as e:
        log.warning("router at %s: its stop route did not answer (%s)", url, type(e).__name__)
        return False
    if answer != 202:
        log.warning("router at %s: its stop route answered %s, not 202; it exits at its expiry", url, answer)
        return False
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/health", timeout=2.0)
        except httpx.ConnectError:
            return True
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    log.warning("router at %s still answers after its stop", url)
    return False


SERVING_ROLES = ("prefill", "decode")  # an idle node (a rack's unused tray) serves nothing


def look_roles(nodes: list[ClusterNode], target: Target, api_key: str | None, timeout_s: float = 5.0) -> dict[int, str]:
    """One look at every serving node (its /health and /v1/models, over the nodes' pinned certificate):
    {node index: why it does not serve the target's model yet}; empty once every role serves."""

    cert = node_cert(nodes)
    verify: ssl.SSLContext | bool = pinned_context(cert) if cert else True
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    want = target.served_model_id
    why: dict[int, str] = {}
    for n in nodes:
        if n.role not in SERVING_ROLES:
            continue
        url = inst_of(n).base_url
        try:
            health = httpx.get(f"{url}/health", timeout=timeout_s, verify=verify)
            models = httpx.get(f"{url}/v1/models", headers=headers, timeout=timeout_s, verify=verify)
            ids = [m.get("id") for m in models.json().get("data", [])] if models.status_code == 200 else []
        except (httpx.HTTPError, ValueError) as e:
            why[n.index] = f"{type(e).__name__}: {e}"
            continue
        if health.status_code != 200 or want not in ids:
            why[n.index] = f"/health {health.status_code}, /v1/models {models.status_code}: {ids}"
    return why


Failed = Callable[[ClusterNode, str], "str | None"]  # (node, why it does not serve) -> a certain failure


def check_roles(
    result: ClusterResult,
    target: Target,
    api_key: str | None,
    timeout_s: float = 5.0,
    poll_s: float = 0.2,
    failed: Failed | None = None,
) -> None:
    """Wait until every serving node answers /health and offers the target's model; ProviderError naming
    the role and node that does not after ``timeout_s``, or at once when ``failed`` reads a failure that
    waiting cannot help from that node (its logs: cluster_serving.certain_failure)."""
    pending = [n for n in result.nodes if n.role in SERVING_ROLES]
    deadline = time.monotonic() + timeout_s
    while pending:
        why = look_roles(pending, target, api_key, timeout_s=min(5.0, timeout_s))
        pending = [n for n in pending if n.index in why]
        for n in pending:
            if failed is not None and (certain := failed(n, why[n.index])):
                raise ProviderError(f"cluster {target.name}: {n.role} node {n.index} failed: {certain}")
        if pending and time.monotonic() >= deadline:
            n = pending[0]
            raise ProviderError(
                f"cluster {target.name}: {n.role} node {n.index} is not serving {target.served_model_id} after "
                f"{timeout_s:.0f}s ({why[n.index]})"
            )
        if pending:
            time.sleep(poll_s)


def check_emulated(
    provider: Provider,
    result: ClusterResult,
    target: Target,
    api_key: str | None,
    timeout_s: float = 60.0,
    failed: Failed | None = None,
) -> None:
    """Every serving node serves the target's model and is one the provider's own record says it
    launched emulator-backed (``Provider.launched_emulated``, by instance id): the emulated router may
    front it. The node's own answers (/version) prove nothing, since a custom image says what it likes.
    ProviderError naming the node that is not, so a connection that claims emulated nodes
    (``Provider.emulated_nodes``) on a real cloud is caught."""
    check_roles(result, target, api_key, timeout_s=timeout_s, failed=failed)
    for n in result.nodes:
        if n.role not in SERVING_ROLES:
            continue
        if not provider.launched_emulated(n.instance_id or ""):
            raise ProviderError(
                f"cluster {target.name}: {n.role} node {n.index} is not one {provider.name} launched emulator-backed "
                "(its own record, by instance id); the emulated router fronts emulator-backed nodes only, and a "
                "cloud cluster's roles are not started"
            )
        n.instance = replace(inst_of(n), emulated=True)


def provenance(nodes: list[ClusterNode], target: Target) -> list[dict[str, Any]]:
    """Each node's role, the image and engine arguments it was asked to run (its role's parallelism;
    serving.deploy.stack_facts; on the local provider, whose nodes are emulator processes, the plan's
    image and extra arguments as declared), and the instance that ran them."""

    out = []
    for n in nodes:
        nt, inst = NodeTarget(target, n.index, n.role), n.instance
        stack = stack_facts(cast("Target", nt))  # a NodeTarget reads as its Target
        out.append(
            {
                "node": n.index,
                "role": n.role,
                "instance_id": inst.id if inst else None,
                "instance_type": (inst.instance_type if inst else "") or target.instance_type,
                "region": inst.region if inst else None,
                "host": inst.host if inst else None,
                "stack": stack.get("stack"),
                "image": stack.get("image") or target.image,  # local: the plan's (or recipe's) image, not run
                "engine_args": list(stack.get("engine_args") or target.engine_args),
                "tensor_parallel": nt.tensor_parallel,
                "expert_parallel": nt.expert_parallel,
                "data_parallel_attention": nt.data_parallel_attention,
                "emulated": bool(inst and inst.emulated),
            }
        )
    return out
