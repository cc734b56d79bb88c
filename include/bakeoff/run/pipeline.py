"""The steps of one bake-off, as plain functions the DAG and the CLI both call.

Every step takes and returns small JSON-able values (paths, ids, summaries) and reads the
resolved plan from the run directory, so each is safe to retry and to run in a fresh process.
Large data goes to the results store, point by point, so a later failure loses nothing measured.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar, cast

from bakeoff import faults, paths, secrets, store
from bakeoff.agent import job
from bakeoff.cleanup import teardown
from bakeoff.clusters import node_slots
from bakeoff.core import facts
from bakeoff.core.endpoint import Endpoint
from bakeoff.core.instance import Instance
from bakeoff.core.launch import LaunchSpec
from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.paths import reports_root, safe_name
from bakeoff.plan import Plan, Target, apply_overrides, load_plan, multinode
from bakeoff.plan.prices import apply_price_sheet, sheet_sha256
from bakeoff.providers import Provider, ProviderError, get_provider
from bakeoff.providers.base import TAG_EXPIRES, TAG_INSTALLATION, TAG_PLAN, TAG_RUN, TAG_TARGET, CapacityError
from bakeoff.providers.credentials import credentials_from_env
from bakeoff.publishing.publish import publish as publish_reports
from bakeoff.quality.accuracy import run_gate
from bakeoff.quality.validate import raise_if_failed, validate_run
from bakeoff.report import build_report
from bakeoff.run import admission
from bakeoff.run.step_context import EGRESS_FILE, RunContext, TargetContext, with_run, with_target
from bakeoff.serving import deploy as serving
from bakeoff.serving import userdata
from bakeoff.serving.agent_client import AgentPower
from bakeoff.serving.power import PowerFile
from bakeoff.serving.tls import node_identity
from bakeoff.spend import approval, budget

log = logging.getLogger(__name__)

# Turns a provider name into its credentials: passed into each step that reaches a provider (the
# DAG passes its Airflow-connection resolver, the CLI and scripts the environment's).
CredentialsFn = Callable[[str], dict[str, Any]]


def provider_for(name: str, credentials: CredentialsFn = credentials_from_env, **options: Any) -> Provider:
    return get_provider(name, credentials=credentials(name), **options)


# --- run-level steps ----------------------------------------------------------------------------


def start_run(
    plan_ref: str,
    run_id: str,
    overrides: dict[str, Any] | None = None,
    price_sheet: dict[str, Any] | None = None,
    budget_ceiling_usd: object = None,
    conf: dict[str, Any] | None = None,
    approval_threshold_usd: object = None,
    scheduled: bool = False,
    trusted_images: object = None,
    allow_private_endpoints: object = None,
    node_limits: object = None,
) -> dict[str, Any]:
    """Resolve the plan (file, then the buyer's price sheet, then trigger-form overrides, which win),
    admit it (bakeoff.run.admission: claims, budget cap and the installation ceiling, images trusted with
    secrets, private endpoints, workload files, node limits, whether a person must approve the spend;
    the settings are the Airflow Variables' raw values, None = the environment's) and record the run.
    A run's folder holds one run: an existing start record is refused. ``conf``: the trigger's
    configuration as given (plan name and form fields), kept so the run can be started again as it was.
    ``scheduled``: a scheduled run (the first of a paid plan's content waits for approval)."""
    plan = apply_overrides(apply_price_sheet(load_plan(plan_ref), price_sheet), overrides)
    settings = admission.Settings(
        budget_ceiling_usd=budget_ceiling_usd,
        trusted_images=trusted_images,
        allow_private_endpoints=allow_private_endpoints,
        node_limits=node_limits,
        approval_threshold_usd=approval_threshold_usd,
    )
    admitted = admission.admit(plan, settings, scheduled=scheduled)
    estimate, need = admitted.estimate, admitted.approval_needed
    rdir = store.run_dir(plan.name, run_id)
    started = facts.Start(
        plan=plan.name,
        run_id=run_id,
        started_at=time.time(),
        emulated=plan.emulated,
        budget=estimate,
        targets={t.slug: facts.TargetStart(name=t.name) for t in plan.targets},
        price_sheet_sha256=sheet_sha256(price_sheet),
        conf=dict(conf or {}),
        scheduled=scheduled,
        approval_needed=need,
    )
    try:
        store.create_record(rdir, started.STEP, started.to_json())
    except FileExistsError:
        first = store.run_facts(rdir).start.run_id
        raise FileExistsError(
            f"run_id {run_id!r}: {rdir} already holds a run ({first!r}); a run is started once and its "
            "records are never taken over; trigger a new run"
        ) from None
    store.write_json(rdir / "plan.json", plan.model_dump(mode="json"))
    node_slots.record(rdir, admitted.node_limits)
    node_slots.register(rdir, plan, started.started_at)  # the installation's order of claims: by start time
    guarded = admitted.guarded_hosts
    if guarded:  # checked again at every connection (DNS rebinding): serving/egress.py
        store.write_json(rdir / EGRESS_FILE, {"guarded_hosts": guarded})
    return {
        "approval_required": need.required,
        "run_dir": str(rdir),
        "plan": plan.name,
        "targets": [t.slug for t in plan.targets],
        "providers": {t.slug: t.provider for t in plan.targets},
    }


def approval_needed(run_dir: str) -> dict[str, Any] | None:
    """What the run needs a person's approval for before it spends (the start record's
    ``approval_needed``), None when it needs none. The DAG's approve_spend asks the approvers
    (plugins/bakeoff_approval.py); ``bakeoff run`` cannot ask anyone and stops there."""
    need = store.run_facts(run_dir).start.approval_needed
    return need.model_dump(mode="json") if need.required else None


def _target_step(run_dir: str | store.StorePath, slug: str, fact: facts.Fact) -> None:
    """Record a target step's typed facts (``bakeoff.core.facts``) as its JSON record."""
    store.record(run_dir, fact.STEP, fact.to_json(), slug=slug)


def _record(ctx: TargetContext, fact: facts.Fact) -> None:
    _target_step(ctx.run_dir, ctx.slug, fact)


# --- per-target steps ---------------------------------------------------------------------------
#
# Each long wait is an action and a check: the action (provision, deploy, benchmark) starts
# something and returns; the check (node_ready, serving_ready, benchmark_done) looks once and
# returns None while waiting, so Airflow's sensor frees the worker between looks. ``since`` is when
# the wait began: the check enforces the target's own deadline (a mapped sensor's timeout is one for
# every target). Every call records the worker time it held (``held_seconds`` sums it per target).

SLOTS = "slots"


Step = TypeVar("Step", bound=Callable[..., Any])


def holds_slot(task: str) -> Callable[[Step], Step]:
    """Record the worker time each call of a per-target step (run_dir, slug, ...) holds, failed or not."""

    def wrap(step: Step) -> Step:
        @functools.wraps(step)
        def run(run_dir: str, slug: str, *args: Any, **kwargs: Any) -> Any:
            started = time.time()
            try:
                return step(run_dir, slug, *args, **kwargs)
            finally:
                ended = time.time()
                try:
                    store.write_json(
                        store.at(run_dir) / f"target={safe_name(slug)}" / SLOTS / f"{task}-{int(started * 1000)}.json",
                        {"task": task, "started_at": started, "ended_at": ended},
                    )
                except Exception as e:  # noqa: BLE001 - the step's own outcome matters more than its timing
                    log.warning("%s of %s: could not record its worker time: %s", task, slug, e)

        return cast(Step, run)

    return wrap


def held_seconds(run_dir: str) -> dict[str, float]:
    """Worker-slot seconds each target's steps held, from the records ``holds_slot`` wrote."""
    held: dict[str, float] = {}
    for f in store.at(run_dir).glob(f"target=*/{SLOTS}/*.json"):
        rec = store.read_json(f) or {}
        slug = f.parent.parent.name.split("=", 1)[1]
        held[slug] = held.get(slug, 0.0) + float(rec.get("ended_at", 0)) - float(rec.get("started_at", 0))
    return held


def until_done(check: Callable[..., Any], *args: Any, poll_s: float = 0.5, **kwargs: Any) -> Any:
    """Call a check until it returns something: the wait for callers without a scheduler (the CLI)."""
    since = time.time()
    while (out := check(*args, since=since, **kwargs)) is None:
        time.sleep(poll_s)
    return out


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
    run_dir, slug, plan, rid, target = ctx.run_dir, ctx.slug, ctx.plan, ctx.run_id, ctx.target
    earlier = _recheck_budget(run_dir, plan, target)
    faults.maybe_fail("launch", target)

    hours = plan.max_instance_hours
    if not PROVIDERS[target.provider].halt_visible:  # nothing can see the node halt: it expires then
        hours = min(hours, userdata.kill_switch_minutes(budget.kill_switch_s(plan, target)) / 60)
    expires = _launch_expiry(run_dir, slug, len(earlier), hours)
    tags = {TAG_RUN: rid, TAG_TARGET: target.slug, TAG_PLAN: plan.name, TAG_EXPIRES: str(int(expires))}
    tags[TAG_INSTALLATION] = secrets.installation_id()

    provider = provider_for(target.provider, credentials)
    faults.check_rehearsal(target, PROVIDERS[target.provider].provisions and not provider.emulated_nodes)
    try:  # resolved here only (before the client bundle is uploaded), handed to the provider, never stored
        serving_secrets = secrets.serving_secrets(target.name, target.secrets) if target.secrets else None
    except secrets.MissingSecret as e:
        raise ProviderError(str(e)) from None
    agent = stage_client(target, bundle_url_s(target, expires), credentials)
    tls, node_cert = _node_tls(target, rid, bool(serving_secrets), bool(agent))
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
        _record_refusal(run_dir, target, asked, e)
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
    _target_step(
        run_dir,
        slug,
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
            paths.state_root() / "routers" / _router_folder(rid, target.slug),
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
    _record(
        ctx,
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
        _target_step(run_dir, slug, facts.NodeReady(instance_id=ready.id, running_at=time.time()))
    return ready.to_dict()


def _record_refusal(run_dir: str, target: Target, asked: float, e: CapacityError) -> None:
    """Every region / AD the target lists refused it: a ``provision_refused`` record (no secret: the
    cloud's refusal text and the offers the plan names)."""
    from bakeoff.providers.rest import refusal_reason  # noqa: PLC0415 - the one reading of capacity vs quota

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
    _target_step(run_dir, target.slug, fact)


def _recheck_budget(run_dir: str, plan: Plan, target: Target) -> tuple[facts.Launch, ...]:
    """A target this run launched before (a retry, a cleared task) is launched again only if the
    spend so far plus what remains still fits budget_usd (budget.recheck raises BudgetExceeded
    before any cloud call). Returns the earlier launches, each stamped with when it ended."""

    run = store.run_facts(run_dir)
    earlier = run.target(target.slug).launches()
    if earlier:
        budget.recheck(plan, target.slug, run)
    return earlier


def _launch_expiry(run_dir: str, slug: str, launch: int, max_hours: float) -> float:
    """The expiry of this launch, fixed when its first attempt began: a retried provision (a lost
    create answer) sends the cloud the same tags and user-data with the same idempotency token, as
    EC2 and OCI require (a changed request under a used token is refused); a new launch gets its own."""
    intent = store.run_facts(run_dir).target(slug).launch
    if intent is not None and intent.launch == launch:
        return intent.expires_at
    expires = float(int(time.time() + max_hours * 3600))
    _target_step(run_dir, slug, facts.LaunchIntent(launch=launch, expires_at=expires))
    return expires


def _node_tls(
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


@holds_slot("deploy")
@with_target
def deploy(ctx: TargetContext, instance: dict[str, Any]) -> dict[str, Any]:
    """Hand the node what its serving stack needs (the target's serving secrets, to its agent over
    pinned TLS); serving_ready then checks until it serves the model. Safe to repeat."""
    target = ctx.target
    faults.maybe_fail("deploy", target)
    pushed = serving.start_serving(
        target,
        Instance.from_dict(instance),
        api_key=ctx.key,
        out_dir=ctx.target_dir,
        secrets=secrets.serving_secrets(target.name, target.secrets) if target.secrets else None,
    )
    return {"target": ctx.slug, "secrets": pushed}


@holds_slot("serving_ready")
@with_target
def serving_ready(
    ctx: TargetContext, instance: dict[str, Any], since: float, credentials: CredentialsFn = credentials_from_env
) -> dict[str, Any] | None:
    """One look at the server: its endpoint once it serves the model, None while it comes up;
    DeployFailed (deploy.json written) once waiting cannot help or after deploy_timeout."""
    target, rid = ctx.target, ctx.run_id
    check: Callable[..., Endpoint | None] = serving.check_serving
    if target.cluster is not None:  # every role's node, then the router (cluster_serving)
        from bakeoff.clusters.cluster_serving import check_cluster_serving  # noqa: PLC0415 - only a cluster target has roles

        # the nodes' certificate derived again, not read from cluster.json: the run's key goes only to them
        check = functools.partial(check_cluster_serving, node_cert=_node_tls(target, rid, False, True)[1])
    endpoint = check(
        target,
        Instance.from_dict(instance),
        api_key=ctx.key,
        out_dir=ctx.target_dir,
        waited_s=time.time() - since,
        credentials=credentials,
        masked=tuple(secrets.serving_secrets(target.name, target.secrets).values()) if target.secrets else (),
    )
    if endpoint is None:
        return None
    # emulated: e.g. a sandbox cloud node backed by the emulator (the run view marks the whole run)
    _record(
        ctx,
        facts.Deploy(ready=True, base_url=endpoint.base_url, emulated=endpoint.emulated, ready_at=time.time()),
    )
    return endpoint.to_dict()


@holds_slot("accuracy_gate")
@with_target
def accuracy_gate(ctx: TargetContext, endpoint: dict[str, Any]) -> dict[str, Any]:
    """Score the endpoint on the offline accuracy set; the pass rule is applied at validation."""

    result = run_gate(Endpoint.from_dict(endpoint), ctx.key, ctx.target, ctx.plan, ctx.target_dir)
    summary: dict[str, Any] = {k: result.get(k) for k in ("score", "n", "mean_output_tokens") if k in result}
    _record(ctx, facts.Accuracy.model_validate(summary))
    return summary


@holds_slot("benchmark")
@with_target
def benchmark(ctx: TargetContext, endpoint: dict[str, Any]) -> dict[str, Any]:
    """Remote client: run every workload's load points here, each stored as soon as it is measured.
    Co-located: submit the job to the node's agent and return; benchmark_done follows it."""
    from bakeoff.bench.run import run_workload  # noqa: PLC0415 - aiohttp, uvloop, pyarrow (bench.run) only in the benchmark step

    plan, rid, target, slug = ctx.plan, ctx.run_id, ctx.target, ctx.slug
    ep = Endpoint.from_dict(endpoint)
    tdir = ctx.target_dir
    faults.maybe_fail("benchmark", target)
    key = ctx.key
    if target.client_mode == "co-located":
        return {"target": slug, "client_mode": "co-located", **job.submit(plan, target, ep, rid, key)}

    power: AgentPower | PowerFile | None = None
    if ep.agent_url:
        power = AgentPower(ep.agent_url, key, ep.tls_cert)
    elif ep.power_csv:  # a local emulator node: its emulated NVML/amdsmi rows are on this machine
        power = PowerFile(ep.power_csv)
    points = 0
    for workload in plan.workloads:
        summaries = run_workload(
            ep,
            target,
            workload,
            plan.slo,
            tdir,
            rid,
            key,
            ep.emulated,
            max_error_rate=plan.quality.max_error_rate,
            power=power,
            tiers=plan.slo_tiers,
            capacity=plan.capacity,
        )
        points += len(summaries)
    _record(ctx, facts.Benchmark(points=points, client_mode="remote"))
    return {"target": slug, "points": points, "client_mode": "remote"}


@holds_slot("benchmark_done")
@with_target
def benchmark_done(
    ctx: TargetContext, endpoint: dict[str, Any], started: dict[str, Any], since: float
) -> dict[str, Any] | None:
    """One look at the benchmark ``benchmark`` started: its summary once done, None while a co-located
    job runs (each look copies the files it finished into the results store). A remote benchmark
    was measured by ``benchmark`` itself: done at once. The co-located job gets the budget's estimate
    of its hours (job.bench_timeout_s)."""
    if started.get("client_mode") != "co-located":
        return started
    points = job.check(
        ctx.target,
        Endpoint.from_dict(endpoint),
        ctx.key,
        started,
        ctx.target_dir,
        waited_s=time.time() - since,
        timeout_s=job.bench_timeout_s(ctx.plan, ctx.target),
    )
    if points is None:
        return None
    _record(ctx, facts.Benchmark(points=points, client_mode="co-located"))
    return {"target": ctx.slug, "points": points, "client_mode": "co-located"}


@with_target
def terminate(
    ctx: TargetContext, instance: dict[str, Any] | None, credentials: CredentialsFn = credentials_from_env
) -> dict[str, Any]:
    """Terminate the target's instance: the ids provision recorded first (no listing can block them),
    then whatever the run's tag finds for the target, best effort (the sweep looks again). Safe when
    the node is already gone or was never created; fails only when a termination failed."""

    run_dir, slug, plan, rid, target = ctx.run_dir, ctx.slug, ctx.plan, ctx.run_id, ctx.target
    provider = provider_for(target.provider, credentials)
    provider.include([target])
    known = list(
        dict.fromkeys(
            ([instance["id"]] if instance and instance.get("id") else [])
            + teardown.recorded_ids(run_dir, plan.name, rid, target.slug)
        )
    )
    failed: dict[str, str] = {}
    if target.cluster is not None and instance:
        _stop_router(rid, target.slug, Instance.from_dict(instance))
    done = teardown.terminate_ids(provider, rid, known, failed)
    found, more, unlisted = teardown.terminate_tagged(provider, rid, failed, slug=target.slug, skip=set(known))
    for where, why in unlisted.items():
        log.warning("terminate: could not search %s for leftovers of %s (the sweep looks again): %s", where, slug, why)
    # a retry that succeeds replaces this record, errors included
    _target_step(
        run_dir,
        slug,
        facts.Terminate(
            instances=tuple(sorted({*known, *found})),
            errors=tuple(f"{w}: {e}" for w, e in failed.items()),
            terminated_at=None if failed else time.time(),
        ),
    )
    if failed:  # its nodes may still run: they still count against the limit (the sweep releases them)
        raise teardown.TeardownIncomplete(f"terminate {slug}", failed)
    node_slots.release(run_dir, slug)
    return {"target": slug, "terminated": [*done, *more]}


def _router_folder(rid: str, slug: str) -> str:
    """The cluster router's folder under the state root; its name also derives the router's stop key."""
    return safe_name(f"{rid}-{slug}")


def _stop_router(rid: str, slug: str, instance: Instance) -> None:
    """Stop the target's emulated router: signalled where it runs, else through its stop route at the
    recorded address (instance.json's host and port are the router's)."""
    from bakeoff.clusters.cluster import stop_router  # noqa: PLC0415 - only a cluster target has a router

    pid = instance.router_pid
    url = instance.base_url if instance.host and instance.port else None
    if pid is not None and not stop_router(pid, _router_folder(rid, slug), url):
        log.warning("the router of %s could not be stopped from here; it exits at the run's expiry", slug)


def _stop_routers(plan: Plan, rid: str, targets: list[Target]) -> None:
    """The emulated router of each cluster target (its pid and address in instance.json)."""
    for t in targets:
        if t.cluster is None:
            continue
        inst = store.read_json(store.target_dir(plan.name, rid, t.slug) / "instance.json", {}) or {}
        if isinstance(inst, dict) and inst.get("id"):
            _stop_router(rid, t.slug, Instance.from_dict(inst))


@with_run
def sweep(ctx: RunContext, credentials: CredentialsFn = credentials_from_env) -> dict[str, Any]:
    """Terminate everything of this run on every provider the plan uses: each recorded instance id, then
    whatever the run's tag finds. One provider's failure never stops the next; what was done and the
    measured cost are recorded, then any failure (a node not terminated, a place not searched) fails the step."""

    run_dir, plan, rid = ctx.run_dir, ctx.plan, ctx.run_id
    killed: dict[str, list[str]] = {}
    errors: dict[str, str] = {}
    for name in sorted({t.provider for t in plan.targets}):
        targets = [t for t in plan.targets if t.provider == name]
        killed[name] = []
        try:
            provider = provider_for(name, credentials)
            provider.include(targets)
        except Exception as e:  # noqa: BLE001 - the next provider is still swept
            errors[name] = f"{type(e).__name__}: {e}"
            continue
        known = list(dict.fromkeys(i for t in targets for i in teardown.recorded_ids(run_dir, plan.name, rid, t.slug)))
        _stop_routers(plan, rid, targets)
        killed[name] += teardown.terminate_ids(provider, rid, known, errors)
        _, more, unlisted = teardown.terminate_tagged(provider, rid, errors, skip=set(known))
        killed[name] += more
        errors.update(unlisted)
        try:  # the run's firewalls / security groups, once nothing uses them (clouds declaring ``cleanup``)
            getattr(provider, "cleanup", lambda select: [])(lambda tags: tags.get(TAG_RUN) == rid)
        except Exception as e:  # noqa: BLE001 - the reaper retries; the sweep still records the run's cost
            log.error("sweep: %s cleanup failed: %s", name, e)
    for where, why in errors.items():
        log.error("sweep: %s: %s", where, why)
    swept = facts.Sweep(
        at=time.time(),
        terminated={name: tuple(ids) for name, ids in killed.items()},
        errors=tuple(f"{w}: {e}" for w, e in errors.items()),
    )
    store.record(run_dir, swept.STEP, swept.to_json())

    budget.record_measured_cost(run_dir, plan)
    # every target is done: release each one's nodes, except where a node may still run (its termination
    # failed, or its cloud could not be searched): those keep their slot until a later sweep sees them gone
    node_slots.release_all(run_dir, keep=_maybe_running(run_dir, plan, rid, errors))
    if errors:
        raise teardown.TeardownIncomplete("sweep", errors)
    return killed


def _maybe_running(run_dir: str, plan: Plan, rid: str, errors: dict[str, str]) -> set[str]:
    """Targets whose nodes the sweep could not see gone. An error names a provider ("vultr") or a place or
    node in it ("vultr:<id>"): a recorded node id keeps its own target's slot; anything else (the cloud, a
    region not searched, a tagged node no record names) keeps the slot of every target on that provider."""

    owner = {i: t.slug for t in plan.targets for i in teardown.recorded_ids(run_dir, plan.name, rid, t.slug)}
    keep: set[str] = set()
    for where in errors:
        provider, _, what = where.partition(":")
        if what in owner:
            keep.add(owner[what])
        else:
            keep |= {t.slug for t in plan.targets if t.provider == provider}
    return keep


@with_run
def validate(ctx: RunContext) -> dict[str, Any]:
    """Run every quality gate; results are stored first, then a failing target fails the step."""

    summary = validate_run(ctx.plan, ctx.folder)
    failed = [s for s, t in summary.get("targets", {}).items() if not t.get("passed")]
    checked = facts.Validation(passed=summary.get("passed"), failed_targets=tuple(failed))
    store.record(ctx.run_dir, checked.STEP, checked.to_json())
    raise_if_failed(summary)
    return {"passed": summary.get("passed"), "failed_targets": failed}


@with_run
def cost(ctx: RunContext) -> dict[str, Any]:
    from bakeoff.cost import cost_run  # noqa: PLC0415 - scipy (cost) only in the cost step

    return cost_run(ctx.plan, ctx.folder)


@with_run
def report(ctx: RunContext, failed_steps: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
    """Build the run's reports into the reports store (<reports>/<plan>/run_id=<run>/); ``failed_steps``
    are the steps of this run that failed, as the orchestrator knows them (the DAG run's task states)."""

    plan, rdir = ctx.plan, ctx.folder
    for t in plan.targets:
        faults.maybe_fail("report", t)
    paths = build_report(plan, rdir, report_dir(plan.name, rdir.name), failed_steps=list(failed_steps))
    reported = facts.Report(files=paths, failed_steps=tuple(failed_steps))
    store.record(ctx.run_dir, reported.STEP, reported.to_json())
    return paths


def report_dir(plan_name: str, run_name: str) -> store.StorePath:
    """Where a run's reports are stored: <reports root>/<plan>/<run_id=...>/."""
    return store.at(reports_root()) / safe_name(plan_name) / safe_name(run_name)


def bundle(ctx: RunContext, paths: dict[str, str], failed_steps: list[str] | tuple[str, ...] = ()) -> str:
    """Build the run's signed evidence bundle (bakeoff.publishing.evidence) beside its reports; returns its path.
    Fails, building nothing, if any file would carry one of the run's serving keys."""
    from bakeoff.publishing import evidence  # noqa: PLC0415 - cryptography only for this step

    path = evidence.build(
        ctx.plan,
        ctx.folder,
        paths,
        report_dir(ctx.plan.name, ctx.folder.name),
        failed_steps=list(failed_steps),
        known_secrets=ctx.serving_keys(),
    )
    return str(path)


@with_run
def publish(
    ctx: RunContext,
    paths: dict[str, str],
    failed_steps: list[str] | tuple[str, ...] = (),
    refit_twin: object = None,
) -> dict[str, Any]:
    """Build the evidence bundle, then list the run's reports and the bundle (kind ``evidence``) in the
    index pages; the manifest states the outcome (failed_steps, as for report). ``refit_twin``: the
    installation's opt-in (Variable bakeoff_twin_refit_after_publish, else the environment) to refit the
    twin on its real runs once the run is published (``bakeoff twin refit``)."""
    from bakeoff.prediction import runs as twin_runs  # noqa: PLC0415 - the twin's fit only when the installation asks

    files = {**paths, "evidence": bundle(ctx, paths, failed_steps)}
    published = publish_reports(ctx.plan, ctx.folder, files, failed_steps=list(failed_steps))
    if twin_runs.refit_after_publish(refit_twin):
        try:
            r = twin_runs.refit_installation()
            published["twin_refit"] = {"run_rows": r.get("run_rows", 0), "runs": len(r["runs"])}
        except Exception as e:  # noqa: BLE001 - an optional refit never loses a published run
            log.warning("twin refit after publish skipped: %s", e)
            published["twin_refit"] = {"error": type(e).__name__}
    return published
