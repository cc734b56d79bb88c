"""A co-located benchmark: the plan's workloads as one job for the node agent.

The job carries everything the client on the node needs and nothing it must not see: the
workloads (with any prompt or trace file they name, inlined), the SLOs, the model id, the GPU
divisor. The key stays on the node (the boot script wrote it there); the job id is derived from the
run and target, so a retried task joins the job already running instead of starting a second one.
"""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from bakeoff import store
from bakeoff.agent import FILE_FIELDS
from bakeoff.agent.remote import AgentClient, AgentError, run_job

log = logging.getLogger(__name__)
MAX_INLINE_BYTES = 64 * 1024 * 1024
AGENT_START_S = 900.0     # the bundle's packages install while the serving image pulls


def job_id(run_id: str, slug: str) -> str:
    return f"{slug}-{hashlib.sha256(run_id.encode()).hexdigest()[:12]}"


def build_job(plan, target, endpoint, run_id: str) -> dict[str, Any]:
    workloads, files = [], {}
    for i, w in enumerate(plan.workloads):
        d = w.model_dump(mode="json")
        for f in FILE_FIELDS:
            if d.get(f):
                name = f"w{i}-{f}{Path(d[f]).suffix}"
                files[name] = _inline(Path(d[f]), f"workloads[{i}].{f}")
                d[f] = name
        workloads.append(d)
    return {"job_id": job_id(run_id, target.slug), "run_id": run_id, "target": target.slug,
            "model": endpoint.model, "gpus": target.gpus_used, "emulated": endpoint.emulated,
            "slo": plan.slo.model_dump(mode="json"), "max_error_rate": plan.quality.max_error_rate,
            "workloads": workloads, "files": files}


def _inline(path: Path, field: str) -> str:
    if not path.is_file():
        raise ValueError(f"{field}: {path} is not a readable file here; a co-located client gets the file from this worker")
    if path.stat().st_size > MAX_INLINE_BYTES:
        raise ValueError(f"{field}: {path.name} is over {MAX_INLINE_BYTES >> 20} MiB; sample it down, or set "
                         "client_mode: remote")
    return path.read_text()


def run_colocated(plan, target, endpoint, run_id: str, key: str | None, tdir: Path) -> int:
    """Run the plan's workloads on the node, mirror the results into ``tdir``; the number of points."""
    if not endpoint.agent_url:
        raise AgentError(f"{target.name}: client_mode co-located, but no node agent was started (the node could not "
                         "fetch the client bundle, or none was staged); see the node's boot log")
    with AgentClient(endpoint.agent_url, key) as agent:
        info = agent.wait_healthy(AGENT_START_S)
        log.info("%s: node agent up (bundle %s); running %d workload(s) on the node", target.slug,
                 (info.get("bundle") or "?")[:16], len(plan.workloads))
        done = run_job(agent, build_job(plan, target, endpoint, run_id), tdir, timeout_s=plan.max_instance_hours * 3600)
    points = len(list(Path(tdir).glob("points/*.parquet")))
    store.write_json(Path(tdir) / "client.json", {"client_mode": "co-located", "bundle": info.get("bundle"),
                                                  "files": done["files"]})
    return points
