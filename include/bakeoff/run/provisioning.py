"""The steps that bring a target's nodes up: the node slot claimed under its cloud's limit, the launch
(the budget rechecked, the expiry fixed per launch, the node's TLS identity, the client bundle staged),
a cluster's nodes behind their router, and the look that finds the node running.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from bakeoff import faults, paths, secrets, store
from bakeoff.cleanup import teardown
from bakeoff.clusters import node_slots
from bakeoff.core import facts
from bakeoff.core.instance import Instance
from bakeoff.core.launch import LaunchSpec
from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.paths import safe_name
from bakeoff.plan import Plan, Target, multinode
from bakeoff.providers import Provider, ProviderError
from bakeoff.providers.base import TAG_EXPIRES, TAG_INSTALLATION, TAG_PLAN, TAG_RUN, TAG_TARGET, CapacityError
from bakeoff.providers.credentials import credentials_from_env
from bakeoff.run.step_context import CredentialsFn, TargetContext, provider_for, with_target
from bakeoff.run.worker_time import holds_slot
from bakeoff.serving import userdata
from bakeoff.serving.tls import node_identity
from bakeoff.spend import approval, budget

log = logging.getLogger(__name__)


@holds_slot("node_slot")
def node_slot(run_dir: str, slug: str) -> bool:
    """Claim the target's nodes under its provider's node limit (bakeoff.clusters.node_slots): True once held,
    False while they do not fit yet. provision follows; terminate releases them."""
    return node_slots.claim(run_dir, slug)


def release_node_slot(run_dir: str, slug: str) -> bool:
    """Give the target's nodes back to its provider's limit after a provision that failed for good, only
    when it created no node: a create that succeeded before the failure leaves a node that still counts
    until terminate or the sweep has it gone (they release it then)."""

    run = store.run_facts(run_dir)
    ended = run.target(slug).terminate
    gone = ended is not None and bool(ended.terminated_at) and not ended.errors
    if not gone and teardown.recorded_ids(run_dir, str(run.start.plan), str(run.start.run_id), slug):
        log.warning("provision of %s failed after its create: its node slot is kept until the node is gone", slug)
        return False
    return node_slots.release(run_dir, slug)


@holds_slot("provision")
@with_target
def provision(ctx: TargetContext, credentials: CredentialsFn = credentials_from_env) -> dict[str, Any]:
    """Start the target's instance (idempotent per run and target); node_ready then checks until it is reachable."""
    approval.ensure_approved(ctx.run_dir)  # before anything that costs money, whatever the DAG's shape
    run_dir, plan, rid, target = ctx.run_dir, ctx.plan, ctx.run_id, ctx.target
    earlier = _recheck_budget(run_dir, plan, target)
    faults.maybe_fail("launch", target)

    hours = plan.max_instance_hours
    if not PROVIDERS[target.provider].halt_visible:  # nothing can see the node halt: it expires then
        hours = min(hours, userdata.kill_switch_minutes(budget.kill_switch_s(plan, target)) / 60)
    expires = _launch_expiry(ctx, len(earlier), hours)
    tags = {TAG_RUN: rid, TAG_TARGET: target.slug, TAG_PLAN: plan.name, TAG_EXPIRES: str(int(expires))}
    tags[TAG_INSTALLATION] = secrets.installation_id()

    provider = provider_for(target.provider, credentials)
    faults.check_rehearsal(target, PROVIDERS[target.provider].provisions and not provider.emulated_nodes)
    try:  # resolved here only (before the client bundle is uploaded), handed to the provider, never stored
        serving_secrets = secrets.serving_secrets(target.name, target.secrets) if target.secrets else None
    except secrets.MissingSecret as e:
        raise ProviderError(str(e)) from None
    agent = stage_client(target, bundle_url_s(target, expires), credentials)
    tls, node_cert = node_tls(target, rid, bool(serving_secrets), bool(agent))
    spec = LaunchSpec(
        api_key=ctx.key,
        expires_at=expires,
        shutdown_after_s=budget.kill_switch_s(plan, target),
        agent=agent,
        launch=len(earlier),
        secrets=serving_secrets or {},
        tls=tls,
        boot=userdata.render_for,  # each cloud node's boot script (the providers do not import serving)
    )
    if target.cluster is not None:
        return _provision_cluster(ctx, provider, tags, spec, earlier, credentials)
    asked = time.time()
    try:
        inst = provider.create(target, rid, tags=tags, spec=spec)
    except CapacityError as e:  # no node: what was asked is all the report and the stockout trend get
        _record_refusal(ctx, asked, e)
        raise
    # the lifecycle's record (providers/base.Provisioning: attempts, refusals, placements tried, where it
    # launched) and how long the whole create took; the times to running and serving-ready are
    # node_ready's and deploy's own records (TargetFacts.provisioning folds them in)
    provisioning = (inst.provisioning or facts.ProvisioningRecord()).with_time(
        "create_s", round(time.time() - asked, 2)
    )
    # every later call pins the certificate (the base_url and agent_url become https); node_ready gives
    # the client bundle's node its agent's address
    bundle = agent["sha256"] if agent else inst.client_bundle
    inst = replace(inst, provisioning=None, tls_cert=node_cert or inst.tls_cert, client_bundle=bundle)
    store.write_json(ctx.target_dir / "instance.json", inst.to_dict())
    launched = inst.launched_at or time.time()
    tries = (
        *(tr for tr in earlier if tr.instance_id != inst.id),
        facts.Launch(instance_id=inst.id, launched_at=launched),
    )
    ctx.record(
        facts.Provision(
            instance_id=inst.id,
            launched_at=launched,
            client_bundle=agent["sha256"] if agent else None,
            tries=tries,
            provisioning=provisioning,
            requested_at=asked,
        ),
    )
    faults.maybe_fail("after_create", target)
    faults.maybe_fail("ready_timeout", target)
    return inst.to_dict()


def _provision_cluster(
    ctx: TargetContext,
    provider: Provider,
    tags: dict[str, str],
    spec: LaunchSpec,
    earlier: tuple[facts.Launch, ...],
    credentials: CredentialsFn,
) -> dict[str, Any]:
    """A target spanning nodes: every node up within ``cluster.deadline_s`` or every node released
    (bakeoff.clusters.cluster), then the emulated router in front; what later steps reach is the router. Each
    node is a launch of the target (so teardown knows every id); cluster.json holds the timeline and
    each node's role, image, args and instance. Emulator-backed nodes only (``Provider.emulated_nodes``:
    the local provider, a sandbox cloud), each checked to say so before the router fronts it: a real
    cloud cluster needs the recipe's orchestrator on its nodes, which bakeoff does not render yet."""
    from bakeoff.clusters import cluster  # noqa: PLC0415 - only a cluster target needs the cluster layer

    target, rid, tdir = ctx.target, ctx.run_id, ctx.target_dir
    if not provider.emulated_nodes:
        raise ProviderError(
            f"targets.{target.name}.cluster: bakeoff provisions a {target.provider} cluster all or nothing "
            "but does not yet start the recipe's roles on real cloud nodes (prefill and decode workers with "
            "their KV transfer engine, and the router), so a cluster target runs where every node is "
            "emulator-backed: the local provider, or a sandbox cloud (python -m bakeoff_sandbox)"
        )
    res = cluster.provision(provider, target, rid, tags=tags, spec=spec)
    try:
        if spec.tls:  # each node serves over the target's pinned certificate, as node_ready records it
            for n in res.nodes:
                if n.instance is not None:
                    n.instance.tls_cert = spec.tls["cert"]
        if not PROVIDERS[target.provider].emulated:  # a cloud's nodes must show they run the emulator
            from bakeoff.clusters.cluster_serving import certain_failure  # noqa: PLC0415 - only a cloud cluster's nodes

            failed = certain_failure(spec.api_key, credentials)  # a role that cannot come up fails at once
            cluster.check_emulated(provider, res, target, spec.api_key, timeout_s=res.deadline_s, failed=failed)
        router = cluster.start_router(
            res,
            target,
            paths.state_root() / "routers" / router_folder(rid, target.slug),
            expires_at=float(spec.expires_at or 0),
        )
    except ProviderError:
        cluster.release(provider, rid, res, {})
        raise
    store.write_json(
        tdir / "cluster.json",
        {
            **res.to_dict(),
            "router": router.config,
            "nodes_provenance": cluster.provenance(res.nodes, target),
            "recipe": multinode.provenance(target.recipe, target.recipe_arm),
        },
    )
    first = cluster.inst_of(res.nodes[0])
    host, port = router.base_url.rsplit("//", 1)[1].rsplit(":", 1)
    front = Instance(
        provider=target.provider,
        id=first.id,
        target=target.slug,
        run_id=rid,
        state="running",
        host=host,
        port=int(port),
        instance_type=target.instance_type or "",
        region=first.region,
        launched_at=first.launched_at,
        expires_at=float(spec.expires_at or 0),
        emulated=True,
        cluster=[n.instance_id for n in res.nodes if n.instance_id],
        router_pid=router.pid,
    )
    store.write_json(tdir / "instance.json", front.to_dict())
    launches = tuple(
        facts.Launch(
            instance_id=n.instance_id, launched_at=(n.instance.launched_at if n.instance else None) or time.time()
        )
        for n in res.nodes
    )
    ctx.record(
        facts.Provision(
            instance_id=front.id,
            launched_at=front.launched_at or time.time(),
            tries=(*earlier, *launches),
            provisioning=facts.ProvisioningRecord(
                nodes=len(res.nodes),
                ready_s=max(n.ready_s or 0.0 for n in res.nodes),
                # each site the whole cluster was asked for (cluster.sites): the report's attempts
                attempts=len(res.sites),
                refusals={"capacity": n} if (n := sum(x["outcome"] == "refused" for x in res.sites)) else {},
                tried=tuple(x["where"] for x in res.sites if x["where"]),
                region=first.region,
            ),
        ),
    )
    return front.to_dict()


@holds_slot("node_ready")
@with_target
def node_ready(
    ctx: TargetContext, instance: dict[str, Any], since: float, credentials: CredentialsFn = credentials_from_env
) -> dict[str, Any] | None:
    """One look at the node provision started: the instance once it runs and is reachable, None
    while it boots. ProviderError when it ended, or after the target's ready_timeout_s."""
    run_dir, slug, target = ctx.run_dir, ctx.slug, ctx.target
    inst = Instance.from_dict(instance)
    if target.cluster is not None:  # provision waited for every node and started the router
        return inst.to_dict()
    timeout_s = float(target.provider_options.get("ready_timeout_s", 1800))
    ready = provider_for(target.provider, credentials).check_ready(inst)
    if ready is None:
        if time.time() - since >= timeout_s:
            raise ProviderError(
                f"{target.provider}: node {inst.id} of {target.name} not running with an address after "
                f"{timeout_s:.0f}s; raise targets.{target.name}.provider_options.ready_timeout_s if it boots slower"
            )
        return None
    cert, bundle = inst.tls_cert, inst.client_bundle
    agent_url = ready.agent_url
    if bundle and ready.host and ready.agent_port:  # the provider resolved where it is reached
        agent_url = f"{'https' if cert else 'http'}://{ready.host}:{ready.agent_port}"
    ready = replace(
        ready, tls_cert=cert or ready.tls_cert, client_bundle=bundle or ready.client_bundle, agent_url=agent_url
    )
    store.write_json(ctx.target_dir / "instance.json", ready.to_dict())
    seen = store.run_facts(run_dir).target(slug).node_ready
    if seen is None or seen.instance_id != ready.id:  # the first look that found it running counts
        ctx.record(facts.NodeReady(instance_id=ready.id, running_at=time.time()))
    return ready.to_dict()


def _record_refusal(ctx: TargetContext, asked: float, e: CapacityError) -> None:
    """Every region / AD the target lists refused it: a ``provision_refused`` record (no secret: the
    cloud's refusal text and the offers the plan names)."""
    from bakeoff.providers.rest import refusal_reason  # noqa: PLC0415 - the one reading of capacity vs quota

    target = ctx.target
    opts = target.provider_options
    places = opts.places() or list(target.instance.regions)
    fact = facts.ProvisionRefused(
        at=time.time(),
        requested_at=asked,
        reason="quota" if refusal_reason(str(e)) == "quota" else "capacity",
        offers=tuple(f"{it} in {p}" for it in target.offers for p in places) or tuple(target.offers),
        error=str(e)[:400],
        provisioning=e.provisioning,
    )
    ctx.record(fact)


def _recheck_budget(run_dir: str, plan: Plan, target: Target) -> tuple[facts.Launch, ...]:
    """A target this run launched before (a retry, a cleared task) is launched again only if the
    spend so far plus what remains still fits budget_usd (budget.recheck raises BudgetExceeded
    before any cloud call). Returns the earlier launches, each stamped with when it ended."""

    run = store.run_facts(run_dir)
    earlier = run.target(target.slug).launches()
    if earlier:
        budget.recheck(plan, target.slug, run)
    return earlier


def _launch_expiry(ctx: TargetContext, launch: int, max_hours: float) -> float:
    """The expiry of this launch, fixed when its first attempt began: a retried provision (a lost
    create answer) sends the cloud the same tags and user-data with the same idempotency token, as
    EC2 and OCI require (a changed request under a used token is refused); a new launch gets its own."""
    intent = store.run_facts(ctx.run_dir).target(ctx.slug).launch
    if intent is not None and intent.launch == launch:
        return intent.expires_at
    expires = float(int(time.time() + max_hours * 3600))
    ctx.record(facts.LaunchIntent(launch=launch, expires_at=expires))
    return expires


def node_tls(
    target: Target, run_id: str, has_secrets: bool, has_agent: bool
) -> tuple[dict[str, str] | None, str | None]:
    """A cloud node's TLS identity: its private key goes into the launch spec (user-data only), its
    public certificate is returned for instance.json so later steps pin it (serving/tls.py)."""
    if not PROVIDERS[target.provider].tls:
        return None, None
    if has_secrets and not has_agent:  # refused before any cloud call
        raise ProviderError(
            f"targets.{target.name}.secrets: serving secrets reach the node only through its agent "
            "over TLS, and no client bundle could be staged; set the Airflow Variable "
            "bakeoff_client_bucket, or drop the secrets (they are never put in user-data)"
        )

    ident = node_identity(run_id, target.slug)
    return {"cert": ident.cert_pem, "key": ident.key_pem}, ident.cert_pem


# How long the bundle's URL stays good beyond the node's boot deadline: the create and its placement
# retries come first. The node fetches it once, at boot; the URL rides in user-data, which outlives boot.
CREATE_ALLOWANCE_S = 900.0


def bundle_url_s(target: Target, expires: float) -> float:
    """The bundle URL's lifetime: until the node's boot deadline (``ready_timeout_s``) after its create,
    never past the node's own expiry; after boot, a URL read from user-data opens nothing."""
    boot_s = float(target.provider_options.get("ready_timeout_s", 1800)) + CREATE_ALLOWANCE_S
    return min(expires - time.time(), boot_s)


def stage_client(
    target: Target, valid_s: float, credentials: CredentialsFn = credentials_from_env
) -> dict[str, Any] | None:
    """Stage the client bundle for a cloud node (the installation's ``client_bundle`` settings name
    the bucket); a co-located target cannot run without one, so say how to fix it before launching."""
    if not PROVIDERS[target.provider].provisions:
        return None
    from bakeoff.serving.bundle import stage  # noqa: PLC0415 - only a provisioned node gets a client bundle

    staged = stage(credentials("client_bundle"), valid_s)
    if staged is None and target.client_mode == "co-located":
        raise ProviderError(
            f"targets.{target.name}.provider_options.client_mode: co-located needs an object store the node fetches "
            "the bakeoff client from; set the Airflow Variable bakeoff_client_bucket to an S3 bucket (reached through "
            "aws_default, or the connection Variable bakeoff_client_conn_id names), or set client_mode: remote to run "
            "the client on the Airflow worker"
        )
    return staged.to_dict() if staged else None


def router_folder(rid: str, slug: str) -> str:
    """The cluster router's folder under the state root; its name also derives the router's stop key."""
    return safe_name(f"{rid}-{slug}")
