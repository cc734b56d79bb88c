"""A co-located benchmark: the plan's workloads as one job for the node agent.

The job carries everything the client on the node needs and nothing it must not see: the
workloads (with any prompt or trace file they name, inlined), the SLOs, the model id, the GPU
divisor. The key stays on the node (the boot script wrote it there); the job id is derived from the
run and target, so a retried task joins the job already running instead of starting a second one.

``submit`` is the action; ``check`` is one look (a sensor's poke) that copies every file the job
finished since the last look into the results store, so a later failure loses nothing measured.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

from bakeoff import store
from bakeoff.agent import FILE_FIELDS, MAX_JOB_BYTES, file_field, with_file_field
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import Plan, PlanError
from bakeoff.plan.target import Target
from bakeoff.serving.agent_client import AgentClient, AgentError, look
from bakeoff.spend import budget

log = logging.getLogger(__name__)
MAX_INLINE_BYTES = MAX_JOB_BYTES
AGENT_START_S = 900.0  # the bundle's packages install while the serving image pulls
MIN_BENCH_TIMEOUT_S = 600.0  # the budget's estimate of a short benchmark leaves no room for the job's start


def job_id(run_id: str, slug: str) -> str:
    return f"{slug}-{hashlib.sha256(run_id.encode()).hexdigest()[:12]}"


def build_job(plan: Plan, target: Target, endpoint: Endpoint, run_id: str) -> dict[str, Any]:
    workloads, files, fields = _inputs(plan)
    job = {
        "job_id": job_id(run_id, target.slug),
        "run_id": run_id,
        "target": target.slug,
        "model": endpoint.model,
        "gpus": target.gpus_used,
        "emulated": endpoint.emulated,
        "slo": plan.slo.model_dump(mode="json"),
        "max_error_rate": plan.quality.max_error_rate,
        "workloads": workloads,
        "files": files,
    }
    _check_size(job, fields, target.name)
    return job


def _inputs(plan: Plan) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, str]]:
    """The workloads with their files inlined: (workloads, files by job name, plan field by job name)."""
    workloads, files, fields = [], {}, {}
    for i, w in enumerate(plan.workloads):
        d = w.model_dump(mode="json")
        for f in FILE_FIELDS:
            if value := file_field(d, f):
                suffix = Path(value).suffix
                name = f"w{i}-{f}{suffix if re.fullmatch(r'[.][A-Za-z0-9]{1,10}', suffix) else ''}"
                files[name] = _inline(value, f"workloads[{i}].{f}")
                fields[name] = f"workloads[{i}].{f}"
                d = with_file_field(d, f, name)
        workloads.append(d)
    return workloads, files, fields


def encoded_size(job: dict[str, Any]) -> int:
    """Bytes of the job as the agent client sends it (httpx's JSON encoding)."""
    return len(json.dumps(job, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode())


def _check_size(job: dict[str, Any], fields: dict[str, str], target_name: str) -> None:
    size = encoded_size(job)
    if size <= MAX_JOB_BYTES:
        return
    files = job["files"]
    biggest = max(files, key=lambda n: len(files[n].encode())) if files else None
    where = fields.get(biggest, "workloads") if biggest else "workloads"
    raise PlanError(
        f"{where}: the co-located job for {target_name} would be {size / 2**20:.1f} MiB with the workload "
        f"files inlined, over the node agent's {MAX_JOB_BYTES / 2**20:g} MiB limit; sample the file(s) down, "
        f"or set targets.{target_name}.provider_options.client_mode: remote"
    )


def preflight(plan: Plan) -> None:
    """Before anything is launched: refuse a plan whose co-located job the node agent would refuse
    (workload files too large once inlined), naming the workload field and the limit."""
    colocated = [t for t in plan.targets if t.client_mode == "co-located"]
    if not colocated:
        return
    workloads, files, fields = _inputs(plan)
    for t in colocated:  # the other fields are small; a placeholder stands in for what provisioning decides
        job = {
            "job_id": job_id("preflight", t.slug),
            "run_id": "x" * 256,
            "target": t.slug,
            "model": "x" * 256,
            "gpus": t.gpus_used,
            "emulated": False,
            "slo": plan.slo.model_dump(mode="json"),
            "max_error_rate": plan.quality.max_error_rate,
            "workloads": workloads,
            "files": files,
        }
        _check_size(job, fields, t.name)


def _inline(value: str, field: str) -> str:
    """The text of a workload file, found the way the remote client finds it (under the workloads
    folder, symlinks out refused), so co-located mode ships no file a remote run could not read."""
    from bakeoff.bench.client.workloads import WorkloadFileError, resolve_file  # noqa: PLC0415 - bench.client.workloads only when a workload names a file

    try:
        path = resolve_file(value, field)
    except WorkloadFileError as e:
        raise ValueError(f"{e}; a co-located client gets the file from this worker") from None
    if path.stat().st_size > MAX_INLINE_BYTES:
        raise ValueError(
            f"{field}: {path.name} is over {MAX_INLINE_BYTES >> 20} MiB; sample it down, or set client_mode: remote"
        )
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{field}: {path.name} is not UTF-8 text; save the file as UTF-8") from None


def bench_timeout_s(plan: Plan, target: Target) -> float:
    """How long a co-located benchmark may run: the budget's estimate of its hours with the budget's
    margin, at least MIN_BENCH_TIMEOUT_S, capped by max_instance_hours (the node powers off then)."""
    estimate = budget.bench_hours(plan, target) * (1 + budget.MARGIN) * 3600
    return min(max(estimate, MIN_BENCH_TIMEOUT_S), plan.max_instance_hours * 3600)


def _agent(target: Target, endpoint: Endpoint, key: str | None) -> AgentClient:
    if not endpoint.agent_url:
        raise AgentError(
            f"{target.name}: client_mode co-located, but no node agent was started (the node could not "
            "fetch the client bundle, or none was staged); see the node's boot log"
        )
    return AgentClient(endpoint.agent_url, key, tls_cert=endpoint.tls_cert)


def submit(plan: Plan, target: Target, endpoint: Endpoint, run_id: str, key: str | None) -> dict[str, Any]:
    """Start the plan's workloads on the node (a repeated submit joins the job already running):
    ``{"job_id", "bundle"}``. Waits only for the agent to answer, which it does by the time the
    server serves (the bundle installs while the serving image pulls)."""
    with _agent(target, endpoint, key) as agent:
        info = agent.wait_healthy(AGENT_START_S)
        job = build_job(plan, target, endpoint, run_id)
        agent.submit(job)
    log.info(
        "%s: node agent up (bundle %s); running %d workload(s) on the node",
        target.slug,
        (info.get("bundle") or "?")[:16],
        len(plan.workloads),
    )
    return {"job_id": job["job_id"], "bundle": info.get("bundle")}


def check(
    target: Target,
    endpoint: Endpoint,
    key: str | None,
    submitted: dict[str, Any],
    tdir: str | store.StorePath,
    *,
    waited_s: float,
    timeout_s: float,
) -> int | None:
    """One look at the job, ``waited_s`` after it was submitted: copy the files it finished since the
    last look into ``tdir``, then the number of points once it is done, None while it runs.
    AgentError (after copying) when it failed, or is still running after ``timeout_s``."""
    jid, tdir = submitted["job_id"], store.at(tdir)
    with _agent(target, endpoint, key) as agent:
        state = look(agent, jid, tdir)
        files = state.get("files", {})
    kept = len(list(tdir.glob("points/*.parquet")))
    if state.get("state") == "failed":
        raise AgentError(f"co-located job {jid} failed on the node: {state.get('error')}; {kept} finished points kept")
    if state.get("state") != "done":
        if waited_s >= timeout_s:
            raise AgentError(
                f"co-located job {jid} still running after {waited_s:.0f}s (its budget: {timeout_s:.0f}s); "
                f"{kept} finished points kept"
            )
        return None
    store.write_json(
        tdir / "client.json",
        {"client_mode": "co-located", "bundle": submitted.get("bundle"), "files": len(files)},
    )
    return kept
