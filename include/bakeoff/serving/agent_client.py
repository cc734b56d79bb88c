"""The control plane's client of the node agent (agent/): start a co-located benchmark, mirror its
results as they finish, hand the node its serving secrets, and read its logs and power samples. It
sits in serving, beside the deploy step that hands the secrets over; the node program sits above it.

Results are mirrored file by file into the target's folder of the results store while the job
runs, so a task that dies, a node that is killed or a job that fails keeps every point finished
before it. Submitting is idempotent per job id, so a retried task follows the job already running.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import httpx

from bakeoff import store
from bakeoff.core.pinning import client_context
from bakeoff.serving import egress
from bakeoff.serving.power import parse_samples

log = logging.getLogger(__name__)
NOT_MIRRORED = {"summary.json"}  # the node's console summary of its last workload; the store has the points
# What a node may put in the store: the benchmark's own outputs (bench/run.py, store.save_point), nothing
# else; the target's control records (steps/*, instance.json, deploy.json) feed re-provision, cost and teardown.
_NAME = r"[A-Za-z0-9][A-Za-z0-9._=-]{0,200}"
BENCH_OUTPUTS = re.compile(
    rf"(?:requests|points)/{_NAME}\.parquet|(?:provenance|power)/{_NAME}\.json"
    rf"|(?:sla|prompt_sizing)-{_NAME}\.json|client_calibration\.json"
)


def _doc(r: httpx.Response) -> dict[str, Any]:
    """The JSON object an agent route answers with."""
    doc: dict[str, Any] = r.json()
    return doc


class AgentError(RuntimeError):
    """The agent refused, failed or could not be reached; the message says which."""


class AgentClient:
    """Talks to one node's agent; with ``tls_cert`` (the node's certificate) over https pinned to it,
    so the Bearer key and pushed secrets reach only the node that holds the matching private key."""

    def __init__(
        self,
        url: str,
        key: str | None,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        tls_cert: str | None = None,
    ):
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        opts: dict[str, Any] = {"base_url": self.url, "timeout": timeout_s, "headers": headers}
        verify = client_context(self.url, tls_cert)
        # a test's transport as given; otherwise the shared one (egress.py)
        self._http = httpx.Client(transport=transport, **opts) if transport else egress.client(verify=verify, **opts)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method: str, path: str, ok: int = 200, **kw: Any) -> httpx.Response:
        try:
            r = self._http.request(method, path, **kw)
        except httpx.HTTPError as e:
            why = (
                "; TLS: it did not present the node's pinned certificate"
                if "CERTIFICATE_VERIFY_FAILED" in str(e)
                else ""
            )
            raise AgentError(f"node agent at {self.url} unreachable ({type(e).__name__}{why})") from None
        if r.status_code != ok:
            raise AgentError(f"node agent: {method} {path} answered {r.status_code}: {r.text[:300]}")
        return r

    def _get(self, path: str, **kw: Any) -> httpx.Response:
        return self._call("GET", path, **kw)

    def health(self) -> dict[str, Any]:
        return _doc(self._get("/agent/health"))

    def wait_healthy(self, timeout_s: float, poll_s: float = 2.0) -> dict[str, Any]:
        """The agent starts after the client bundle is fetched and installed: wait for it."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.health()
            except AgentError as e:
                if time.monotonic() >= deadline:
                    raise AgentError(f"{e}; still not answering after {timeout_s:.0f}s") from None
            time.sleep(poll_s)

    def submit(self, job: dict[str, Any]) -> dict[str, Any]:
        return _doc(self._call("POST", "/agent/jobs", ok=202, json=job))

    def status(self, job_id: str) -> dict[str, Any]:
        return _doc(self._get(f"/agent/jobs/{job_id}"))

    def fetch(self, job_id: str, rel: str) -> bytes:
        return self._get(f"/agent/jobs/{job_id}/files/{rel}").content

    def logs(self) -> str:
        return self._get("/agent/logs").text

    def put_secrets(self, secrets: dict[str, str]) -> dict[str, Any]:
        """Hand the serving secrets (HF_TOKEN, ...) to the node, which writes them into a root-only
        env file its boot script waits for; the answer names the variables, never a value."""
        return _doc(self._call("PUT", "/agent/secrets", json={"env": secrets}))

    def power(self, start: float, end: float) -> list[dict[str, Any]]:
        return parse_samples(self._get("/agent/power", params={"start": start, "end": end}).text)


def mirror(client: AgentClient, job_id: str, files: dict[str, int], into: store.StorePath, have: dict[str, int]) -> int:
    """Copy finished files not mirrored yet (or grown since) into the store; returns how many."""
    n = 0
    for rel, size in sorted(files.items()):
        if rel in NOT_MIRRORED or have.get(rel) == size:
            continue
        parts = PurePosixPath(rel).parts
        if not parts or rel.startswith("/") or "\\" in rel or any(p in ("", ".", "..") for p in parts):
            # the agent names files; never let it write elsewhere (the store may be object storage: no resolve())
            raise AgentError(f"node agent named a file outside the results folder: {rel!r}")
        if not BENCH_OUTPUTS.fullmatch(rel):
            log.warning("node agent offered %r, which is not a benchmark output; refused, not stored", rel[:200])
            continue
        store.write_bytes(store.at(into) / rel, client.fetch(job_id, rel))
        have[rel] = size
        n += 1
    return n


def _stored_size(path: store.StorePath) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def look(client: AgentClient, job_id: str, into: store.StorePath) -> dict[str, Any]:
    """One look at a job: its state, after copying the files it finished since the last look (what
    the store already holds at the same size is not fetched again, whichever process copied it)."""
    state = client.status(job_id)
    files = state.get("files", {})
    have = {rel: size for rel, size in files.items() if _stored_size(store.at(into) / rel) == size}
    mirror(client, job_id, files, into, have)
    return state


def run_job(
    client: AgentClient, job: dict[str, Any], into: Path, *, timeout_s: float, poll_s: float = 2.0
) -> dict[str, Any]:
    """Submit the job (or join it) and look until it ends; raise if it failed or timed out, after
    copying everything it finished. (The DAG looks once per sensor poke instead: agent/job.py.)"""
    job_id = job["job_id"]
    client.submit(job)
    deadline = time.monotonic() + timeout_s
    while (state := look(client, job_id, into)).get("state") not in ("done", "failed"):
        if time.monotonic() >= deadline:
            raise AgentError(f"co-located job {job_id} still running after {timeout_s:.0f}s; finished files kept")
        time.sleep(poll_s)
    if state["state"] == "failed":
        raise AgentError(f"co-located job {job_id} failed on the node: {state.get('error')}; finished files kept")
    return {"files": len(state.get("files", {})), "workloads": state.get("workloads_done")}


@dataclass(frozen=True)
class AgentPower:
    """Power samples read from the node's agent, for a client that runs elsewhere (remote mode).
    Picklable, so benchmark worker processes can take it along."""

    url: str
    key: str | None
    tls_cert: str | None = None

    def __repr__(self) -> str:  # never shows the key
        return f"AgentPower({self.url})"

    def __call__(self, start: float, end: float) -> list[dict[str, Any]]:
        with AgentClient(self.url, self.key, timeout_s=10.0, tls_cert=self.tls_cert) as c:
            return c.power(start, end)
