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
from typing import Any

from bakeoff import faults, secrets, store
from bakeoff.agent import job
from bakeoff.clusters import node_slots
from bakeoff.core import facts
from bakeoff.core.endpoint import Endpoint
from bakeoff.core.instance import Instance
from bakeoff.paths import reports_root, safe_name
from bakeoff.plan import apply_overrides, load_plan
from bakeoff.plan.prices import apply_price_sheet, sheet_sha256
from bakeoff.providers.credentials import credentials_from_env
from bakeoff.publishing.publish import publish as publish_reports
from bakeoff.quality.accuracy import run_gate
from bakeoff.quality.validate import raise_if_failed, validate_run
from bakeoff.report import build_report
from bakeoff.run import admission
from bakeoff.run.provisioning import node_tls
from bakeoff.run.step_context import EGRESS_FILE, CredentialsFn, RunContext, TargetContext, with_run, with_target
from bakeoff.run.worker_time import holds_slot
from bakeoff.serving import deploy as serving
from bakeoff.serving.agent_client import AgentPower
from bakeoff.serving.power import PowerFile

log = logging.getLogger(__name__)

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


# --- per-target steps (provisioning.py brings the nodes up, teardown_steps.py takes them down) ----


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
        check = functools.partial(check_cluster_serving, node_cert=node_tls(target, rid, False, True)[1])
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
    ctx.record(
        facts.Deploy(ready=True, base_url=endpoint.base_url, emulated=endpoint.emulated, ready_at=time.time()),
    )
    return endpoint.to_dict()


@holds_slot("accuracy_gate")
@with_target
def accuracy_gate(ctx: TargetContext, endpoint: dict[str, Any]) -> dict[str, Any]:
    """Score the endpoint on the offline accuracy set; the pass rule is applied at validation."""

    result = run_gate(Endpoint.from_dict(endpoint), ctx.key, ctx.target, ctx.plan, ctx.target_dir)
    summary: dict[str, Any] = {k: result.get(k) for k in ("score", "n", "mean_output_tokens") if k in result}
    ctx.record(facts.Accuracy.model_validate(summary))
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
    ctx.record(facts.Benchmark(points=points, client_mode="remote"))
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
    ctx.record(facts.Benchmark(points=points, client_mode="co-located"))
    return {"target": ctx.slug, "points": points, "client_mode": "co-located"}


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
