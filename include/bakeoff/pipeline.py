"""The steps of one bake-off, as plain functions the DAG and the CLI both call.

Every step takes and returns small JSON-able values (paths, ids, summaries) and reads the
resolved plan from the run directory, so each is safe to retry and to run in a fresh process.
Large data goes to the results store, point by point, so a later failure loses nothing measured.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable

from bakeoff import faults, store
from bakeoff.plan import Plan, apply_overrides, load_plan, plan_from_dict
from bakeoff.providers import Instance, Provider, ProviderError, get_provider
from bakeoff.providers.base import TAG_EXPIRES, TAG_PLAN, TAG_RUN, TAG_TARGET
from bakeoff import secrets
from bakeoff.serving.endpoint import Endpoint

log = logging.getLogger(__name__)

# DAG layer may install a function that turns a provider name into credentials (Airflow hooks).
CredentialsFn = Callable[[str], dict[str, Any]]
_credentials: CredentialsFn = lambda name: {}  # noqa: E731


def set_credentials_resolver(fn: CredentialsFn) -> None:
    global _credentials
    _credentials = fn


def provider_for(name: str, **options: Any) -> Provider:
    return get_provider(name, credentials=_credentials(name), **options)


# --- run-level steps ----------------------------------------------------------------------------


def start_run(
    plan_ref: str,
    run_id: str,
    overrides: dict[str, Any] | None = None,
    price_sheet: dict[str, Any] | None = None,
    budget_ceiling_usd: Any = None,
) -> dict[str, Any]:
    """Resolve the plan (file, then the buyer's price sheet, then trigger-form overrides, which win),
    check the budget against the plan's cap and the installation ceiling (budget_ceiling_usd: the
    Airflow Variable's raw value, None = the default), record the run."""
    from bakeoff.cost import apply_price_sheet  # noqa: PLC0415

    plan = apply_overrides(apply_price_sheet(load_plan(plan_ref), price_sheet), overrides)
    from bakeoff import budget  # noqa: PLC0415 - budget imports the catalog math only when needed

    estimate = budget.check(plan, ceiling_usd=budget_ceiling_usd)
    from bakeoff.agent.job import preflight  # noqa: PLC0415 - a co-located job the node would refuse stops here

    preflight(plan)
    rdir = store.run_dir(plan.name, run_id)
    store.write_json(rdir / "plan.json", plan.model_dump(mode="json"))
    store.update_run(
        rdir,
        plan=plan.name,
        run_id=run_id,
        started_at=time.time(),
        status="running",
        emulated=plan.emulated,
        budget=estimate,
        targets={t.slug: {"name": t.name} for t in plan.targets},
    )
    return {
        "run_dir": str(rdir),
        "plan": plan.name,
        "targets": [t.slug for t in plan.targets],
        "providers": {t.slug: t.provider for t in plan.targets},
    }


def run_plan(run_dir: str | Path) -> Plan:
    return plan_from_dict(store.read_json(Path(run_dir) / "plan.json"), source="plan.json")


def _run_id(run_dir: str | Path) -> str:
    return store.read_json(Path(run_dir) / "run.json")["run_id"]


def serving_key(target, run_id: str) -> str | None:
    """The bearer key for a target's server: an existing endpoint's own key (static), else this
    run's derived key. Never stored or returned by a step."""
    if target.provider == "static":
        from bakeoff.providers.static import static_api_key  # noqa: PLC0415

        return static_api_key(target)
    return secrets.api_key(run_id, target.slug)


def _target_step(run_dir: str | Path, slug: str, step: str, **info: Any) -> None:
    store.update_run(Path(run_dir), targets={slug: {step: info}})


# --- per-target steps ---------------------------------------------------------------------------


def provision(run_dir: str, slug: str) -> dict[str, Any]:
    """Start the target's instance (idempotent per run and target) and wait until it is reachable."""
    plan, rid = run_plan(run_dir), _run_id(run_dir)
    target = plan.target(slug)
    earlier = _recheck_budget(run_dir, plan, target)
    faults.maybe_fail("launch", target)
    expires = time.time() + plan.max_instance_hours * 3600
    tags = {TAG_RUN: rid, TAG_TARGET: target.slug, TAG_PLAN: plan.name, TAG_EXPIRES: str(int(expires))}
    from bakeoff.budget import kill_switch_s  # noqa: PLC0415

    provider = provider_for(target.provider)
    agent = stage_client(target, expires - time.time())
    spec = {
        "api_key": serving_key(target, rid),
        "expires_at": expires,
        "shutdown_after_s": kill_switch_s(plan, target),
        "agent": agent,
        "launch": len(earlier),
    }
    if target.secrets:  # resolved here only, handed to the provider, never stored or returned
        try:
            spec["secrets"] = secrets.serving_secrets(target)
        except secrets.MissingSecret as e:
            raise ProviderError(str(e)) from None
    node_cert = _node_tls(target, rid, spec)
    inst = provider.create(target, rid, tags=tags, spec=spec)
    if node_cert:
        inst.details["tls_cert"] = node_cert
    tdir = store.target_dir(plan.name, rid, target.slug)
    store.write_json(tdir / "instance.json", inst.to_dict())
    launched = inst.launched_at or time.time()
    tries = [tr for tr in earlier if tr.get("instance_id") != inst.id] + [
        {"instance_id": inst.id, "launched_at": launched}
    ]
    _target_step(
        run_dir,
        slug,
        "provision",
        instance_id=inst.id,
        launched_at=launched,
        client_bundle=agent["sha256"] if agent else None,
        tries=tries,
    )
    faults.maybe_fail("after_create", target)
    faults.maybe_fail("ready_timeout", target)
    inst = provider.wait_ready(inst, timeout_s=target.provider_options.get("ready_timeout_s", 1800))
    if node_cert:  # every later call pins it: the base_url and agent_url become https
        inst.details["tls_cert"] = node_cert
    if agent and inst.host and inst.details.get("agent_port"):  # the provider resolved where it is reached
        scheme = "https" if node_cert else "http"
        inst.details["agent_url"] = f"{scheme}://{inst.host}:{inst.details['agent_port']}"
    store.write_json(tdir / "instance.json", inst.to_dict())
    return inst.to_dict()


def _recheck_budget(run_dir: str, plan: Plan, target) -> list[dict[str, Any]]:
    """A target this run launched before (a retry, a cleared task) is launched again only if the
    spend so far plus what remains still fits budget_usd (budget.recheck raises BudgetExceeded
    before any cloud call). Returns the earlier launches, each stamped with when it ended."""
    from bakeoff import budget  # noqa: PLC0415

    doc = store.read_json(Path(run_dir) / "run.json", {}) or {}
    record = (doc.get("targets") or {}).get(target.slug) or {}
    earlier = budget.launches(record)
    if earlier:
        budget.recheck(plan, target.slug, doc)
    return earlier


def _node_tls(target, run_id: str, spec: dict[str, Any]) -> str | None:
    """A cloud node's TLS identity: its private key goes into the spec (user-data only), its public
    certificate is returned for instance.json so later steps pin it (serving/tls.py)."""
    from bakeoff.plan.target import CLOUD_PROVIDERS  # noqa: PLC0415

    if target.provider not in CLOUD_PROVIDERS:
        return None
    if spec.get("secrets") and not spec.get("agent"):  # refused before any cloud call
        raise ProviderError(
            f"targets.{target.name}.secrets: serving secrets reach the node only through its agent "
            "over TLS, and no client bundle could be staged; set the Airflow Variable "
            "bakeoff_client_bucket, or drop the secrets (they are never put in user-data)"
        )
    from bakeoff.serving.tls import node_identity  # noqa: PLC0415

    ident = node_identity(run_id, target.slug)
    spec["tls"] = {"cert": ident.cert_pem, "key": ident.key_pem}
    return ident.cert_pem


def stage_client(target, valid_s: float) -> dict[str, Any] | None:
    """Stage the client bundle for a cloud node (the installation's ``client_bundle`` settings name
    the bucket); a co-located target cannot run without one, so say how to fix it before launching."""
    from bakeoff.plan.target import CLOUD_PROVIDERS  # noqa: PLC0415

    if target.provider not in CLOUD_PROVIDERS:
        return None
    from bakeoff.agent.bundle import stage  # noqa: PLC0415

    staged = stage(_credentials("client_bundle"), valid_s)
    if staged is None and target.client_mode == "co-located":
        raise ProviderError(
            f"targets.{target.name}.provider_options.client_mode: co-located needs an object store the node fetches "
            "the bakeoff client from; set the Airflow Variable bakeoff_client_bucket to an S3 bucket (reached through "
            "aws_default, or the connection Variable bakeoff_client_conn_id names), or set client_mode: remote to run "
            "the client on the Airflow worker"
        )
    return staged.to_dict() if staged else None


def deploy(run_dir: str, slug: str, instance: dict[str, Any]) -> dict[str, Any]:
    """Bring the serving stack up on the instance and wait until it serves the model."""
    from bakeoff.serving import deploy as deploy_mod  # noqa: PLC0415

    plan, rid = run_plan(run_dir), _run_id(run_dir)
    target = plan.target(slug)
    inst = Instance.from_dict(instance)
    faults.maybe_fail("deploy", target)
    pushed = secrets.serving_secrets(target) if target.secrets else None  # to the node agent, pinned TLS
    endpoint = deploy_mod.deploy(
        target,
        inst,
        api_key=serving_key(target, rid),
        out_dir=store.target_dir(plan.name, rid, target.slug),
        secrets=pushed,
    )
    _target_step(run_dir, slug, "deploy", ready=True, base_url=endpoint.base_url)
    if endpoint.emulated:  # e.g. a sandbox cloud node backed by the emulator
        store.update_run(Path(run_dir), emulated=True)
    return endpoint.to_dict()


def accuracy_gate(run_dir: str, slug: str, endpoint: dict[str, Any]) -> dict[str, Any]:
    """Score the endpoint on the offline accuracy set; the pass rule is applied at validation."""
    from bakeoff.quality.accuracy import run_gate  # noqa: PLC0415

    plan, rid = run_plan(run_dir), _run_id(run_dir)
    target = plan.target(slug)
    result = run_gate(
        Endpoint.from_dict(endpoint),
        serving_key(target, rid),
        target,
        plan,
        store.target_dir(plan.name, rid, target.slug),
    )
    summary = {k: result.get(k) for k in ("score", "n", "mean_output_tokens") if k in result}
    _target_step(run_dir, slug, "accuracy", **summary)
    return summary


def benchmark(run_dir: str, slug: str, endpoint: dict[str, Any]) -> dict[str, Any]:
    """Run every workload's load points; each point is stored as soon as it is measured."""
    from bakeoff.bench.sweep import run_workload  # noqa: PLC0415

    plan, rid = run_plan(run_dir), _run_id(run_dir)
    target = plan.target(slug)
    ep = Endpoint.from_dict(endpoint)
    tdir = store.target_dir(plan.name, rid, target.slug)
    faults.maybe_fail("benchmark", target)
    key = serving_key(target, rid)
    if target.client_mode == "co-located":
        from bakeoff.agent.job import run_colocated  # noqa: PLC0415

        points = run_colocated(plan, target, ep, rid, key, tdir)
        _target_step(run_dir, slug, "benchmark", points=points, client_mode="co-located")
        return {"target": slug, "points": points}
    from bakeoff.agent.remote import AgentPower  # noqa: PLC0415

    power = AgentPower(ep.agent_url, key, ep.tls_cert) if ep.agent_url else None
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
        )
        points += len(summaries)
    _target_step(run_dir, slug, "benchmark", points=points, client_mode="remote")
    return {"target": slug, "points": points}


def terminate(run_dir: str, slug: str, instance: dict[str, Any] | None) -> dict[str, Any]:
    """Terminate the target's instance: the ids provision recorded first (no listing can block them),
    then whatever the run's tag finds for the target, best effort (the sweep looks again). Safe when
    the node is already gone or was never created; fails only when a termination failed."""
    from bakeoff import teardown  # noqa: PLC0415

    plan, rid = run_plan(run_dir), _run_id(run_dir)
    target = plan.target(slug)
    provider = provider_for(target.provider)
    provider.include([target])
    known = list(
        dict.fromkeys(
            ([instance["id"]] if instance and instance.get("id") else [])
            + teardown.recorded_ids(run_dir, plan.name, rid, target.slug)
        )
    )
    failed: dict[str, str] = {}
    done = teardown.terminate_ids(provider, rid, known, failed)
    found, more, unlisted = teardown.terminate_tagged(provider, rid, failed, slug=target.slug, skip=set(known))
    for where, why in unlisted.items():
        log.warning("terminate: could not search %s for leftovers of %s (the sweep looks again): %s", where, slug, why)
    # errors as a list: a retry that succeeds replaces them (mappings merge in run.json)
    step: dict[str, Any] = {"instances": sorted({*known, *found}), "errors": [f"{w}: {e}" for w, e in failed.items()]}
    if not failed:
        step["terminated_at"] = time.time()
    _target_step(run_dir, slug, "terminate", **step)
    if failed:
        raise teardown.TeardownIncomplete(f"terminate {slug}", failed)
    return {"target": slug, "terminated": [*done, *more]}


def sweep(run_dir: str) -> dict[str, Any]:
    """Terminate everything of this run on every provider the plan uses: each recorded instance id, then
    whatever the run's tag finds. One provider's failure never stops the next; what was done and the
    measured cost are recorded, then any failure (a node not terminated, a place not searched) fails the step."""
    from bakeoff import teardown  # noqa: PLC0415

    plan, rid = run_plan(run_dir), _run_id(run_dir)
    killed: dict[str, list[str]] = {}
    errors: dict[str, str] = {}
    for name in sorted({t.provider for t in plan.targets}):
        targets = [t for t in plan.targets if t.provider == name]
        killed[name] = []
        try:
            provider = provider_for(name)
            provider.include(targets)
        except Exception as e:  # noqa: BLE001 - the next provider is still swept
            errors[name] = f"{type(e).__name__}: {e}"
            continue
        known = list(dict.fromkeys(i for t in targets for i in teardown.recorded_ids(run_dir, plan.name, rid, t.slug)))
        killed[name] += teardown.terminate_ids(provider, rid, known, errors)
        _, more, unlisted = teardown.terminate_tagged(provider, rid, errors, skip=set(known))
        killed[name] += more
        errors.update(unlisted)
        try:  # the run's firewalls / security groups, once nothing uses them
            getattr(provider, "cleanup", lambda select: [])(lambda tags: tags.get(TAG_RUN) == rid)
        except Exception as e:  # noqa: BLE001 - the reaper retries; the sweep still records the run's cost
            log.error("sweep: %s cleanup failed: %s", name, e)
    for where, why in errors.items():
        log.error("sweep: %s: %s", where, why)
    store.update_run(
        Path(run_dir),
        sweep={"at": time.time(), "terminated": killed, "errors": [f"{w}: {e}" for w, e in errors.items()]},
    )
    from bakeoff.budget import record_measured_cost  # noqa: PLC0415

    record_measured_cost(run_dir)
    if errors:
        raise teardown.TeardownIncomplete("sweep", errors)
    return killed


def validate(run_dir: str) -> dict[str, Any]:
    """Run every quality gate; results are stored first, then a failing target fails the step."""
    from bakeoff.quality.validate import raise_if_failed, validate_run  # noqa: PLC0415

    summary = validate_run(run_plan(run_dir), Path(run_dir))
    failed = [s for s, t in summary.get("targets", {}).items() if not t.get("passed")]
    store.update_run(Path(run_dir), validation={"passed": summary.get("passed"), "failed_targets": failed})
    raise_if_failed(summary)
    return {"passed": summary.get("passed"), "failed_targets": failed}


def cost(run_dir: str) -> dict[str, Any]:
    from bakeoff.cost import cost_run  # noqa: PLC0415

    return cost_run(run_plan(run_dir), Path(run_dir))


def report(run_dir: str) -> dict[str, str]:
    from bakeoff.paths import reports_root, safe_name  # noqa: PLC0415
    from bakeoff.report import build_report  # noqa: PLC0415

    plan = run_plan(run_dir)
    for t in plan.targets:
        faults.maybe_fail("report", t)
    out = reports_root() / safe_name(plan.name) / Path(run_dir).name
    paths = build_report(plan, Path(run_dir), out)
    store.update_run(Path(run_dir), report=paths)
    return paths


def publish(run_dir: str, paths: dict[str, str], **s3: Any) -> dict[str, Any]:
    from bakeoff.publish import publish as publish_reports  # noqa: PLC0415

    return publish_reports(run_plan(run_dir), Path(run_dir), paths, **s3)


def mark_failed(run_dir: str, reason: str) -> None:
    """Note that a step failed. The run is not over yet (other targets may still be measuring), so
    the status stays "running" until finish() and the reaper leaves live nodes alone."""
    doc = store.read_json(Path(run_dir) / "run.json", {}) or {}
    store.update_run(Path(run_dir), failed=True, failures=[*doc.get("failures", []), reason])


def finish(run_dir: str) -> str:
    """Record the run's outcome once every step is done: failed if any step failed, else success."""
    doc = store.read_json(Path(run_dir) / "run.json", {}) or {}
    status = "failed" if doc.get("failed") else "success"
    store.update_run(Path(run_dir), status=status, finished_at=time.time())
    return status
