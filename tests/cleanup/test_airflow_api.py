"""The reap command asks Airflow's REST API whether a run is still going (a real HTTP server here)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bakeoff import airflow_api
from bakeoff.cleanup import reaper


@pytest.fixture
def api():
    """A stand-in for the API server: /auth/token for one user, dagRuns of the bakeoff DAG."""
    seen: dict = {"tokens": 0, "gets": []}
    runs = {"manual__a": "running", "manual__b": "failed"}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, code: int, doc: dict) -> None:
            body = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            creds = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if creds != {"username": "bakeoff-reaper", "password": "pw"}:
                return self._send(401, {"detail": "bad credentials"})
            seen["tokens"] += 1
            return self._send(201, {"access_token": f"t{seen['tokens']}"})

        def do_GET(self):
            seen["gets"].append((self.path, self.headers.get("Authorization")))
            if self.headers.get("Authorization") != f"Bearer t{seen['tokens']}" or seen.pop("expire", False):
                return self._send(401, {"detail": "expired"})
            prefix = "/api/v2/dags/bakeoff/dagRuns/"
            run_id = self.path.removeprefix(prefix)
            if not self.path.startswith(prefix) or run_id not in runs:
                return self._send(404, {"detail": "not found"})
            return self._send(200, {"dag_run_id": run_id, "state": runs[run_id]})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", seen
    server.shutdown()


def test_run_states_from_the_rest_api(api, tmp_path, monkeypatch):
    url, seen = api
    (tmp_path / "pw").write_text("pw\n")
    monkeypatch.setenv(airflow_api.URL_ENV, url)
    monkeypatch.setenv(airflow_api.USER_ENV, "bakeoff-reaper")
    monkeypatch.setenv(airflow_api.PASSWORD_FILE_ENV, str(tmp_path / "pw"))
    monkeypatch.delenv(airflow_api.TOKEN_ENV, raising=False)
    run_state = airflow_api.run_state_from_env()
    assert run_state("p", "manual__a") == "running" and run_state("p", "manual__b") == "failed"
    assert run_state("p", "cli__unknown") is None  # a run Airflow never saw: kept until it expires
    assert seen["tokens"] == 1  # signed in once
    seen["expire"] = True
    assert run_state("p", "manual__b") == "failed" and seen["tokens"] == 2  # a stale token: signed in again
    tags = {"bakeoff:plan": "p", "bakeoff:run_id": "manual__b", "bakeoff:installation": "bi-own"}
    assert reaper.verdict_for_tags(tags, 0.0, run_state, "bi-own") == "run manual__b ended (failed)"


def test_without_credentials_the_error_names_the_settings(api, monkeypatch):
    url, _ = api
    for name in (airflow_api.TOKEN_ENV, airflow_api.USER_ENV, airflow_api.PASSWORD_FILE_ENV):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(airflow_api.AirflowApiError, match="BAKEOFF_AIRFLOW_API_TOKEN"):
        airflow_api.run_state_client(url)("p", "manual__a")
    monkeypatch.delenv(airflow_api.URL_ENV, raising=False)
    assert airflow_api.run_state_from_env() is None
