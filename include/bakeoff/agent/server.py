"""The node agent's HTTP API (aiohttp), run on the serving node by ``python -m bakeoff agent``.

    GET  /agent/health                 liveness, and which client bundle is running
    POST /agent/jobs                   run a benchmark job next to the server (idempotent per job id)
    GET  /agent/jobs/<id>              state, error, and the finished files so far (path -> size)
    GET  /agent/jobs/<id>/files/<p>    one finished file
    GET  /agent/logs                   tails of the boot and serving logs (failure triage)
    GET  /agent/power?start=&end=      the GPU power samples in a window (epoch seconds)
    PUT  /agent/secrets                serving secrets (HF_TOKEN, ...) into the root-only env file the
                                       boot script waits for before it pulls and starts the server

On a cloud node the agent serves TLS with the node's own certificate (``--tls-cert/--tls-key``),
which the worker pins, so the key and the secrets never cross the network in clear.

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
from aiohttp.typedefs import Handler

import bakeoff
from bakeoff import durable
from bakeoff.agent import COUNTERS_CSV, FILE_FIELDS, MAX_JOB_BYTES, PLAIN_NAME, file_field, with_file_field
from bakeoff.serving.power import PowerFile, format_samples

log = logging.getLogger(__name__)
JOB_ID_RE = re.compile(PLAIN_NAME)  # job ids and file names: one path component, never '.' or '..'
KEY_ENV = "BAKEOFF_AGENT_SERVE_KEY"
LOG_FILES = ("boot.log", "serve.log", "emulator.log")
LOG_TAIL = 20000
SECRET_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")
# names a pushed secret may not set: the serving key, and what would change the server's code path
SECRET_DENY = re.compile(r"^(VLLM_API_KEY|BAKEOFF_.*|LD_.*|PATH|PYTHON.*|HOME)$")
MAX_SECRETS, MAX_SECRET_BYTES = 32, 8192


class Agent:
    """State of one node's agent: where the server, logs and job folders are, and the jobs."""

    def __init__(
        self,
        *,
        serve_url: str,
        key: str,
        log_dir: Path,
        work_dir: Path,
        bundle: str | None = None,
        secrets_file: Path | None = None,
        serve_cert: str | None = None,
    ):
        self.serve_url, self.key, self.bundle = serve_url, key, bundle
        self.secrets_file = Path(secrets_file) if secrets_file else None
        self.serve_cert = serve_cert  # the node's certificate file: the local bench pins the server with it
        self._secret_values: list[str] = []
        self.log_dir, self.work_dir = Path(log_dir), Path(work_dir)
        self.jobs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    # jobs ----------------------------------------------------------------------------------
    def submit(self, job: dict[str, Any]) -> dict[str, Any]:
        validate_job(job)
        job_id = job["job_id"]
        with self._lock:
            new = job_id not in self.jobs  # a retried submit joins the job already running
            if new:
                self.jobs[job_id] = {"state": "running", "error": None, "started_at": time.time(), "workloads_done": 0}
        if new:
            threading.Thread(target=self._run, args=(job_id, job), daemon=True, name=f"job-{job_id}").start()
        return self.status(job_id)

    def job_dir(self, job_id: str) -> Path:
        return self.work_dir / "jobs" / job_id

    def _run(self, job_id: str, job: dict[str, Any]) -> None:
        out = self.job_dir(job_id)
        inputs = out / ".inputs"  # dot-folder: never listed as a result
        inputs.mkdir(parents=True, exist_ok=True)
        error = None
        try:
            for name, text in (job.get("files") or {}).items():
                (inputs / name).write_text(text)
            for i, workload in enumerate(job["workloads"]):
                for field in FILE_FIELDS:
                    if name := file_field(workload, field):
                        workload = with_file_field(workload, field, str(inputs / name))
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
        argv = [
            sys.executable,
            "-m",
            "bakeoff",
            "bench",
            "--endpoint",
            self.serve_url,
            "--model",
            str(job["model"]),
            "--workload",
            str(spec),
            "--slo",
            json.dumps(job.get("slo") or {}),
            "--api-key-env",
            KEY_ENV,
            "--gpus",
            str(int(job.get("gpus", 1))),
            "--target-name",
            str(job.get("target", "endpoint")),
            "--run-id",
            str(job.get("run_id", "agent")),
            "--out",
            str(out),
            "--power-csv",
            self.power_file().path,
            "--power-csv",
            str(self.power_file().fallback),
        ]
        if job.get("max_error_rate") is not None:
            argv += ["--max-error-rate", str(float(job["max_error_rate"]))]
        if job.get("emulated"):
            argv.append("--emulated")
        if self.serve_cert:
            argv += ["--tls-cert", self.serve_cert]
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
        return {
            str(p.relative_to(root)): p.stat().st_size
            for p in sorted(root.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
        }

    # node facts ------------------------------------------------------------------------------
    def masked(self, text: str) -> str:
        text = text.replace(self.key, "<api-key>") if self.key else text
        for v in self._secret_values:
            text = text.replace(v, "<secret>")
        return text

    def put_secrets(self, body: Any) -> dict[str, Any]:
        """Write the serving secrets as ``NAME=value`` lines into the root-only env file (0600, atomic
        rename), which the boot script hands to ``docker run --env-file``. Values are never echoed."""
        if self.secrets_file is None:
            raise LookupError("this node was booted without serving secrets; nothing waits for them")
        env = body.get("env") if isinstance(body, dict) else None
        if not isinstance(env, dict) or len(env) > MAX_SECRETS:
            raise ValueError(f"env: give a mapping of at most {MAX_SECRETS} NAME -> value")
        for name, value in env.items():
            if not isinstance(name, str) or not SECRET_NAME_RE.match(name) or SECRET_DENY.match(name):
                raise ValueError(
                    f"env: {str(name)[:40]!r} is not an allowed variable name; use upper-case letters, "
                    "digits and '_' (not VLLM_API_KEY, BAKEOFF_*, LD_*, PATH, PYTHON*, HOME)"
                )
            if (
                not isinstance(value, str)
                or not value
                or len(value) > MAX_SECRET_BYTES
                or any(c in value for c in "\n\r\0")
            ):
                raise ValueError(f"env.{name}: give a non-empty one-line string of at most {MAX_SECRET_BYTES} bytes")
        # owner-only (0600) from the first byte: the atomic writer's temporary file is created so
        durable.write_atomic(self.secrets_file, "".join(f"{k}={v}\n" for k, v in sorted(env.items())).encode())
        self._secret_values = sorted({*self._secret_values, *env.values()}, key=len, reverse=True)
        return {"ok": True, "names": sorted(env)}

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
        return format_samples(self.power_file()(start, end))

    def power_file(self) -> PowerFile:
        """The GPU library's counters (this agent's sampler) where it runs, else the boot script's CLI samples."""
        return PowerFile(str(self.work_dir / COUNTERS_CSV), fallback=str(self.log_dir / "power.csv"))


def plain_name(value: Any) -> bool:
    return isinstance(value, str) and JOB_ID_RE.fullmatch(value) is not None


def validate_job(job: Any) -> None:
    """Refuse a job that could name a path outside its own folder: the job id becomes a folder, the
    files' names become files in it, and a workload's file fields may only name one of those files."""
    if not isinstance(job, dict):
        raise ValueError("job: expected a JSON object")
    if not plain_name(job.get("job_id")):
        raise ValueError("job_id: use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit")
    files = job.get("files") or {}
    if not isinstance(files, dict):
        raise ValueError("files: expected a mapping of file name -> text")
    for name, text in files.items():
        if not plain_name(name):
            raise ValueError(f"files: {str(name)[:80]!r} is not a plain file name (letters, digits, '.', '_', '-')")
        if not isinstance(text, str):
            raise ValueError(f"files.{name}: expected the file's text")
    workloads = job.get("workloads")
    if not isinstance(workloads, list) or not workloads or not all(isinstance(w, dict) for w in workloads):
        raise ValueError("workloads: give at least one workload mapping")
    for i, w in enumerate(workloads):
        for field in FILE_FIELDS:
            value = file_field(w, field)
            if value is not None and value not in files:
                raise ValueError(
                    f"workloads[{i}].{field}: {str(value)[:80]!r} is not one of the job's files; "
                    "a job names its inlined files by plain name, never by path"
                )


AGENT = web.AppKey("agent", Agent)


@web.middleware
async def _auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    agent: Agent = request.app[AGENT]
    given = request.headers.get("Authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {agent.key}".encode()):
        return web.json_response({"error": "missing or wrong Bearer key"}, status=401)
    return await handler(request)


async def _health(request: web.Request) -> web.Response:

    agent = request.app[AGENT]
    return web.json_response(
        {
            "ok": True,
            "bundle": agent.bundle,
            "code": str(Path(bakeoff.__file__).parent),
            "serve_url": agent.serve_url,
            "time": time.time(),
        }
    )


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


async def _file(request: web.Request) -> web.StreamResponse:
    agent: Agent = request.app[AGENT]
    job, rel = request.match_info["job"], request.match_info["path"]
    if not plain_name(job) or rel not in agent.finished_files(job):  # nothing outside the job's files
        return web.json_response({"error": "no such file"}, status=404)
    return web.FileResponse(agent.job_dir(job) / rel)


async def _logs(request: web.Request) -> web.Response:
    text = await asyncio.to_thread(request.app[AGENT].logs)
    return web.Response(text=text)


async def _secrets(request: web.Request) -> web.Response:
    try:
        body = await request.json()
        return web.json_response(await asyncio.to_thread(request.app[AGENT].put_secrets, body))
    except LookupError as e:
        return web.json_response({"error": str(e)}, status=409)
    except (ValueError, TypeError) as e:  # never echoes a value: the messages name fields only
        return web.json_response({"error": str(e)}, status=400)


async def _power(request: web.Request) -> web.Response:
    try:
        start, end = float(request.query["start"]), float(request.query["end"])
    except (KeyError, ValueError):
        return web.json_response({"error": "start and end: epoch seconds"}, status=400)
    return web.Response(text=await asyncio.to_thread(request.app[AGENT].power, start, end), content_type="text/csv")


def build_app(agent: Agent) -> web.Application:
    app = web.Application(middlewares=[_auth], client_max_size=MAX_JOB_BYTES)
    app[AGENT] = agent
    app.add_routes(
        [
            web.get("/agent/health", _health),
            web.post("/agent/jobs", _submit),
            web.get("/agent/jobs/{job}", _status),
            web.get("/agent/jobs/{job}/files/{path:.+}", _file),
            web.get("/agent/logs", _logs),
            web.get("/agent/power", _power),
            web.put("/agent/secrets", _secrets),
        ]
    )
    return app
