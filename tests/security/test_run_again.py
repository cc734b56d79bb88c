"""Run again (plugins/bakeoff_ui.py) calls Airflow at the URL the installation configured, never at
the request's Host header: a caller cannot aim the forwarded bearer token at a listener of theirs
or use the route to scan ports."""

from __future__ import annotations

import importlib.util
import socket
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from bakeoff import store
from bakeoff.run import pipeline
from tests.conftest import ROOT

PLUGIN = Path(__file__).resolve().parents[2] / "plugins" / "bakeoff_ui.py"


class _Listener:
    """A TCP listener that records whatever reaches it (the caller's would-be token catcher)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    self.received.append(conn.recv(65536))
                    conn.sendall(b"HTTP/1.1 418 INTERNAL-SERVICE-SAYS-HELLO\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass


@pytest.fixture
def again(tmp_path, monkeypatch):
    monkeypatch.setenv("BAKEOFF_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", "e" * 64)
    monkeypatch.delenv("BAKEOFF_AIRFLOW_API_URL", raising=False)  # as for an api-server left unconfigured
    conf = {"plan": "local-demo", "targets": ["mi355x-vllm"], "budget_usd": 50}
    run = pipeline.start_run(str(ROOT / "include" / "plans" / "local-demo.yaml"), "manual__first", conf=conf)
    spec = importlib.util.spec_from_file_location("bakeoff_ui_again_under_test", PLUGIN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.app.dependency_overrides[mod.require_run_read] = lambda: None  # a Viewer: may read runs
    listener = _Listener()
    yield TestClient(mod.app), f"/api/runs/local-demo/{store.at(run['run_dir']).name}/again", listener
    listener.sock.close()


def test_a_host_header_does_not_choose_where_the_callers_token_goes(again):
    client, url, listener = again
    headers = {
        "Authorization": "Bearer viewer-token",
        "X-Bakeoff-Action": "run-again",
        "Host": f"127.0.0.1:{listener.port}",
    }
    resp = client.post(url, headers=headers)
    assert resp.status_code == 503 and "BAKEOFF_AIRFLOW_API_URL" in resp.json()["detail"]
    assert "418" not in resp.text
    assert listener.received == [], "the route connected to the Host the caller named"


def test_a_closed_port_in_the_host_header_answers_the_same_as_an_open_one(again):
    client, url, listener = again
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    statuses = set()
    for port in (listener.port, closed):
        headers = {"Authorization": "Bearer t", "X-Bakeoff-Action": "run-again", "Host": f"127.0.0.1:{port}"}
        statuses.add(client.post(url, headers=headers).status_code)
    assert statuses == {503}, "the route's answer tells an open port from a closed one"
