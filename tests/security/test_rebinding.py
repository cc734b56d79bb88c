"""N7 at connect time: a plan-chosen host whose DNS answer changes after start_run (rebinding).

The resolver here answers a public address on the first lookup (start_run's check) and loopback on
the next ones, where a real HTTP server listens and counts what reaches it. Before this change
every client resolved again when it connected and reached that server; now each connection to a
guarded host resolves once (serving/egress.py), refuses the internal answer, and otherwise connects
to the address it checked.
"""

from __future__ import annotations

import asyncio
import copy
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import yaml

from bakeoff import installation
from bakeoff.bench.client.transport import StreamingClient
from bakeoff.bench.metrics.server_metrics import scrape
from bakeoff.plan import plans_dir
from bakeoff.plan.target import Target
from bakeoff.run import pipeline, step_context
from bakeoff.serving import egress
from bakeoff.serving.agent_client import AgentClient, AgentError
from bakeoff.serving.provenance import snapshot_provenance
from bakeoff.serving.readiness import probe
from tests.plan_fixtures import without_deployment

NAME = "rebind.example"
PUBLIC = "93.184.215.14"


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        self.accepted = 0
        self.hosts: list[str] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    def verify_request(self, request, client_address) -> bool:
        self.accepted += 1
        return True


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.server.hosts.append(self.headers.get("Host", ""))  # type: ignore[attr-defined]
        body = b'{"data": [{"id": "m"}]}' if self.path == "/v1/models" else b"{}"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def server():
    s = _Server()
    threading.Thread(target=s.serve_forever, daemon=True).start()
    yield s
    s.shutdown()
    s.server_close()


class Rebinder:
    """getaddrinfo for NAME: ``answers`` in turn (the last one repeats); other names as the real one."""

    def __init__(self, *answers: str):
        self.answers, self.calls = list(answers), 0
        self.real = socket.getaddrinfo

    def __call__(self, host, port, *args, **kw):
        if str(host).rstrip(".").lower() != NAME:
            return self.real(host, port, *args, **kw)
        addr = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (addr, port or 0))]


@pytest.fixture
def rebinder(monkeypatch):
    r = Rebinder(PUBLIC, "127.0.0.1")
    monkeypatch.setattr(socket, "getaddrinfo", r)  # what httpx, asyncio and the stdlib would look up
    monkeypatch.setattr(egress, "getaddrinfo", r)
    return r


@pytest.fixture
def strict(monkeypatch):
    monkeypatch.delenv(installation.PRIVATE_ENDPOINTS_ENV, raising=False)
    monkeypatch.setenv(egress.GUARD_ENV, "")  # so what a test guards is undone after it


def _static_plan(tmp_path, url: str) -> str:
    raw = yaml.safe_load((plans_dir() / "local-demo.yaml").read_text())
    t = without_deployment(Target.model_validate(copy.deepcopy(raw["targets"][0])).model_dump(mode="json"))
    t.update(provider="static", provider_options={"base_url": url}, price={"usd_per_hour": 40.0})
    raw["targets"] = [t]
    path = tmp_path / "rebind.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_a_name_that_rebinds_after_start_run_is_refused_by_every_client(strict, data_root, tmp_path, rebinder, server):
    url = f"http://{NAME}:{server.server_address[1]}"
    started = pipeline.start_run(_static_plan(tmp_path, url), "manual__rebind")  # public then: accepted
    assert rebinder.calls == 1
    step_context.run_plan(started["run_dir"])  # what every later step does first: guards the plan's hosts

    found = probe(url, "key")
    assert found.ready is None and "now resolves to 127.0.0.1, an internal address" in found.last
    assert scrape(url, "key") is None
    snap = snapshot_provenance(url, "key")
    assert snap["version"] == snap["models"] == {"error": "EgressRefused"}
    with AgentClient(url, "key") as agent, pytest.raises(AgentError, match="EgressRefused"):
        agent.health()

    async def bench() -> int:
        c = StreamingClient(url, api_key="key")
        try:
            return await c.warm(1)
        finally:
            await c.close()

    assert asyncio.run(bench()) == 0

    async def accuracy() -> None:
        async with egress.async_client(base_url=url) as c:
            await c.get("/v1/models")

    with pytest.raises(egress.EgressRefused):
        asyncio.run(accuracy())
    assert server.accepted == 0 and rebinder.calls >= 6  # each looked the name up, none connected


def test_without_the_guard_the_same_clients_reach_the_rebound_address(strict, monkeypatch, server):
    """The attack the guard stops (so the test above can fail): an unguarded name is connected to."""
    r = Rebinder("127.0.0.1")
    monkeypatch.setattr(socket, "getaddrinfo", r)
    monkeypatch.setattr(egress, "getaddrinfo", r)
    url = f"http://{NAME}:{server.server_address[1]}"
    assert probe(url, "key").ready is not None
    assert server.accepted >= 1


def test_a_guarded_connection_goes_to_the_address_it_checked(strict, monkeypatch, server):
    """One lookup per request, and the connection is to its answer (no second lookup by the client):
    here the check passes loopback only, and every later answer is the metadata address."""
    r = Rebinder("127.0.0.1", "169.254.169.254")
    monkeypatch.setattr(socket, "getaddrinfo", r)
    monkeypatch.setattr(egress, "getaddrinfo", r)
    monkeypatch.setattr(egress, "internal_address", lambda a: a != "127.0.0.1")
    egress.guard([NAME])
    port = server.server_address[1]
    with egress.client(base_url=f"http://{NAME}:{port}") as c:
        assert c.get("/v1/models").status_code == 200
        with pytest.raises(egress.EgressRefused, match="169.254.169.254"):
            c.get("/v1/models")
    assert r.calls == 2 and server.hosts == [f"{NAME}:{port}"]  # the name kept in the Host header


def test_the_guard_reaches_processes_the_benchmark_spawns(strict):
    egress.guard(["Rebind.Example.", "other.example"])
    import subprocess
    import sys

    code = "from bakeoff.serving import egress; print(egress.guarded('rebind.example'), egress.guarded('x.example'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False"]


def test_start_run_records_no_guard_when_the_installation_allows_private_endpoints(data_root, tmp_path, rebinder):
    started = pipeline.start_run(_static_plan(tmp_path, f"http://{NAME}:9"), "manual__allowed")  # conftest allows
    assert not (pipeline.store.at(started["run_dir"]) / step_context.EGRESS_FILE).exists()


def test_an_ip_literal_or_an_unguarded_host_is_not_looked_up_by_the_guard(strict, monkeypatch):
    calls = []
    monkeypatch.setattr(egress, "getaddrinfo", lambda *a, **k: calls.append(a) or [])
    req = httpx.Request("GET", "http://127.0.0.1:1/x")
    assert egress._pinned(req) is req and not calls
