"""The node agent's HTTP API (aiohttp), run on the serving node by ``python -m bakeoff agent``.

    GET  /agent/health                 liveness, and which client bundle is running
    POST /agent/jobs                   run a benchmark job next to the server (idempotent per job id)
    GET  /agent/jobs/<id>              state, error, and the finished files so far (path -> size)
    GET  /agent/jobs/<id>/files/<p>    one finished file
    GET  /agent/logs                   tails of the boot and serving logs (failure triage)
    GET  /agent/power?start=&end=      the GPU power samples in a window (epoch seconds)

Every route needs the run's per-target key as a Bearer token. A job is one ``bakeoff bench``
process per workload, against the server on localhost, writing the results store's own layout, so
the Airflow side only mirrors finished files: whatever was measured before a failure is kept.
Job ids, file paths and text returned never reach a shell; the key is masked out of logs served.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from bakeoff.agent import FILE_FIELDS
from bakeoff.serving.power import PowerFile

log = logging.getLogger(__name__)
JOB_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
KEY_ENV = "BAKEOFF_AGENT_SERVE_KEY"
LOG_FILES = ("boot.log", "serve.log", "emulator.log")
LOG_TAIL = 20000


class Agent:
    """State of one node's agent: where the server, logs and job folders are, and the jobs."""

    def __init__(self, *, serve_url: str, key: str, log_dir: Path, work_dir: Path, bundle: str | None = None):
        self.serve_url, self.key, self.bundle = serve_url, key, bundle
        self.log_dir, self.work_dir = Path(log_dir), Path(work_dir)
        self.jobs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    # jobs ----------------------------------------------------------------------------------
    def submit(self, job: dict[str, Any]) -> dict[str, Any]:
        job_id = str(job.get("job_id", ""))
        if not JOB_ID_RE.match(job_id):
            raise ValueError("job_id: use 1-128 letters, digits, '.', '_' or '-'")
        if not isinstance(job.get("workloads"), list) or not job["workloads"]:
            raise ValueError("workloads: give at least one workload mapping")
        for name in job.get("files") or {}:
            if not JOB_ID_RE.match(name) or name.startswith("."):
                raise ValueError(f"files: {name!r} is not a plain file name")
        with self._lock:
            new = job_id not in self.jobs      # a retried submit joins the job already running
            if new:
                self.jobs[job_id] = {"state": "running", "error": None, "started_at": time.time(), "workloads_done": 0}
        if new:
            threading.Thread(target=self._run, args=(job_id, job), daemon=True, name=f"job-{job_id}").start()
        return self.status(job_id)

    def job_dir(self, job_id: str) -> Path:
        return self.work_dir / "jobs" / job_id

    def _run(self, job_id: str, job: dict[str, Any]) -> None:
        out = self.job_dir(job_id)
        inputs = out / ".inputs"                  # dot-folder: never listed as a result
        inputs.mkdir(parents=True, exist_ok=True)
        error = None
        try:
            for name, text in (job.get("files") or {}).items():
                (inputs / name).write_text(text)
            for i, workload in enumerate(job["workloads"]):
                workload = {k: (str(inputs / v) if k in FILE_FIELDS and v else v)
                            for k, v in workload.items()}
                self._bench(job, workload, out, i)
                with self._lock:
                    self.jobs[job_id]["workloads_done"] = i + 1
        except Exception as e:  # noqa: BLE001 - the job's state carries it to the caller
            error = f"{type(e).__name__}: {e}"
        with self._lock:
            self.jobs[job_id].update(state="failed" if error else "done", error=error, ended_at=time.time())

    def _bench(self, job: dict[str, Any], workload: dict[str, Any], out: Path, i: int) -> None:
        """One ``bakeoff bench`` process: the client gets a core of its own, apart from this server."""
        spec = out / f".workload-{i}.json"
        spec.write_text(json.dumps(workload))
        argv = [sys.executable, "-m", "bakeoff", "bench", "--endpoint", self.serve_url, "--model", str(job["model"]),
                "--workload", str(spec), "--slo", json.dumps(job.get("slo") or {}), "--api-key-env", KEY_ENV,
                "--gpus", str(int(job.get("gpus", 1))), "--target-name", str(job.get("target", "endpoint")),
                "--run-id", str(job.get("run_id", "agent")), "--out", str(out), "--power-csv",
                str(self.log_dir / "power.csv")]
        if job.get("max_error_rate") is not None:
            argv += ["--max-error-rate", str(float(job["max_error_rate"]))]
        if job.get("emulated"):
            argv.append("--emulated")
        env = {**os.environ, KEY_ENV: self.key}
        with open(out / f".bench-{i}.log", "ab") as logf:
            code = subprocess.call(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env)
        if code != 0:
            tail = (out / f".bench-{i}.log").read_text(errors="replace")[-600:]
            raise RuntimeError(f"bench for workload {workload.get('name')} exited with {code}: {self.masked(tail)}")

    def status(self, job_id: str) -> dict[str, Any]:
        with self._lock:
            state = dict(self.jobs.get(job_id) or {})
        if not state:
            raise KeyError(job_id)
        return {**state, "job_id": job_id, "files": self.finished_files(job_id)}

    def finished_files(self, job_id: str) -> dict[str, int]:
        """Files the results store finished writing (it writes a dot-file and renames it into place)."""
        root = self.job_dir(job_id)
        if not root.is_dir():
            return {}
        return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*"))
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)}

    # node facts ------------------------------------------------------------------------------
    def masked(self, text: str) -> str:
        return text.replace(self.key, "<api-key>") if self.key else text

    def logs(self) -> str:
        parts = []
        for name in LOG_FILES:
            p = self.log_dir / name
            if p.is_file():
                with open(p, "rb") as f:
                    f.seek(max(0, p.stat().st_size - LOG_TAIL))
                    parts.append(f"==> {name} <==\n" + f.read().decode(errors="replace"))
        return self.masked("\n".join(parts))

    def power(self, start: float, end: float) -> str:
        rows = PowerFile(str(self.log_dir / "power.csv"))(start, end)
        return "".join(f"{r['t']:.3f},{r['gpu']},{r['watts']:.1f}\n" for r in rows)


AGENT = web.AppKey("agent", Agent)


@web.middleware
async def _auth(request: web.Request, handler):
    agent: Agent = request.app[AGENT]
    given = request.headers.get("Authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {agent.key}".encode()):
        return web.json_response({"error": "missing or wrong Bearer key"}, status=401)
    return await handler(request)


async def _health(request: web.Request) -> web.Response:
    import bakeoff  # noqa: PLC0415
    agent = request.app[AGENT]
    return web.json_response({"ok": True, "bundle": agent.bundle, "code": str(Path(bakeoff.__file__).parent),
                              "serve_url": agent.serve_url, "time": time.time()})


async def _submit(request: web.Request) -> web.Response:
    try:
        job = await request.json()
        return web.json_response(request.app[AGENT].submit(job), status=202)
    except (ValueError, TypeError) as e:
        return web.json_response({"error": str(e)}, status=400)


async def _status(request: web.Request) -> web.Response:
    try:
        return web.json_response(request.app[AGENT].status(request.match_info["job"]))
    except KeyError:
        return web.json_response({"error": "no such job"}, status=404)


async def _file(request: web.Request) -> web.Response:
    agent: Agent = request.app[AGENT]
    job, rel = request.match_info["job"], request.match_info["path"]
    if not JOB_ID_RE.match(job) or rel not in agent.finished_files(job):   # nothing outside the job's files
        return web.json_response({"error": "no such file"}, status=404)
    return web.FileResponse(agent.job_dir(job) / rel)


async def _logs(request: web.Request) -> web.Response:
    text = await asyncio.to_thread(request.app[AGENT].logs)
    return web.Response(text=text)


async def _power(request: web.Request) -> web.Response:
    try:
        start, end = float(request.query["start"]), float(request.query["end"])
    except (KeyError, ValueError):
        return web.json_response({"error": "start and end: epoch seconds"}, status=400)
    return web.Response(text=await asyncio.to_thread(request.app[AGENT].power, start, end), content_type="text/csv")


def build_app(agent: Agent) -> web.Application:
    app = web.Application(middlewares=[_auth])
    app[AGENT] = agent
    app.add_routes([web.get("/agent/health", _health), web.post("/agent/jobs", _submit),
                    web.get("/agent/jobs/{job}", _status), web.get("/agent/jobs/{job}/files/{path:.+}", _file),
                    web.get("/agent/logs", _logs), web.get("/agent/power", _power)])
    return app
