"""Airflow's REST API, for processes outside Airflow that must know whether a bake-off run is still going
(``python -m bakeoff reap``): Airflow owns run state, the results store keeps none. Also "run again":
trigger the bakeoff DAG with the configuration a stored run was started with (``trigger_again``).

Settings (environment):
  BAKEOFF_AIRFLOW_API_URL            the API server, e.g. http://airflow-apiserver:8080
  BAKEOFF_AIRFLOW_API_TOKEN          a bearer token (JWT), or instead
  BAKEOFF_AIRFLOW_API_USER +
  BAKEOFF_AIRFLOW_API_PASSWORD_FILE  a user whose password is read from a file (exchanged at /auth/token)
The user needs read access to the ``bakeoff`` DAG's runs. Credentials are never logged.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    import httpx

DAG_ID = "bakeoff"  # every plan runs in this DAG; the node's run tag is the DAG run's id
URL_ENV, TOKEN_ENV = "BAKEOFF_AIRFLOW_API_URL", "BAKEOFF_AIRFLOW_API_TOKEN"
USER_ENV, PASSWORD_FILE_ENV = "BAKEOFF_AIRFLOW_API_USER", "BAKEOFF_AIRFLOW_API_PASSWORD_FILE"


class AirflowApiError(RuntimeError):
    """A refused or failed API call; ``status`` is Airflow's HTTP status when it answered."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _token(client: httpx.Client, base_url: str) -> str:
    token = os.environ.get(TOKEN_ENV)
    if token:
        return token
    user, pw_file = os.environ.get(USER_ENV), os.environ.get(PASSWORD_FILE_ENV)
    if not (user and pw_file):
        raise AirflowApiError(
            f"{URL_ENV} is set but no credentials are: set {TOKEN_ENV}, or {USER_ENV} and {PASSWORD_FILE_ENV}"
        )
    password = Path(pw_file).read_text().strip()
    r = client.post(f"{base_url}/auth/token", json={"username": user, "password": password})
    if r.status_code >= 400:
        raise AirflowApiError(f"{base_url}/auth/token refused {USER_ENV}={user}: HTTP {r.status_code}")
    access: str = r.json()["access_token"]
    return access


def run_state_client(base_url: str, dag_id: str = DAG_ID, timeout_s: float = 10.0) -> Callable[[str, str], str | None]:
    """``run_state(plan, run_id)`` asking GET /api/v2/dags/<dag>/dagRuns/<run>: the DAG run's state,
    None for a run Airflow does not know (404)."""
    import httpx  # noqa: PLC0415 - only the reap command needs it

    base_url = base_url.rstrip("/")
    client = httpx.Client(timeout=timeout_s)
    headers: dict[str, str] = {}

    def get(run_id: str) -> httpx.Response:
        if not headers:
            headers["Authorization"] = f"Bearer {_token(client, base_url)}"
        url = f"{base_url}/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}"
        return client.get(url, headers=headers)

    def run_state(plan: str, run_id: str) -> str | None:
        r = get(run_id)
        if r.status_code == 401:  # the token expired (a reaper loop outlives it): sign in again, once
            headers.clear()
            r = get(run_id)
        if r.status_code == 404:
            return None
        if r.status_code >= 400:
            raise AirflowApiError(f"GET dagRuns/{run_id}: HTTP {r.status_code}")
        state: str | None = r.json().get("state")
        return state

    return run_state


def run_state_from_env() -> Callable[[str, str], str | None] | None:
    """The REST client configured by the environment, or None when $BAKEOFF_AIRFLOW_API_URL is unset."""
    url = os.environ.get(URL_ENV)
    return run_state_client(url) if url else None


def again_conf(start: dict[str, Any] | None) -> dict[str, Any]:
    """The trigger configuration a run was started with (its start record's ``conf``: the plan by name
    and the trigger form's fields), to start the same plan the same way. The price sheet and the
    installation's Variables are read afresh by the new run, as for any run."""
    conf = (start or {}).get("conf")
    if not isinstance(conf, dict) or not conf.get("plan"):
        raise AirflowApiError(
            "this run's start record holds no trigger configuration (it was started before bakeoff kept "
            "one, or without Airflow); trigger the plan from the DAG's form instead",
            409,
        )
    conf = dict(conf)
    if isinstance(conf.get("prices"), dict):  # stored before the form took prices as lines
        conf["prices"] = [f"{name} = {usd}" for name, usd in conf["prices"].items()] or None
    return conf


def trigger_again(
    base_url: str, token: str, start: dict[str, Any] | None, dag_id: str = DAG_ID, timeout_s: float = 10.0
) -> dict[str, Any]:
    """POST /api/v2/dags/<dag>/dagRuns with the stored run's conf, as the user whose token is given (so
    Airflow decides whether they may trigger it). Returns the new DAG run's id and state."""
    import httpx  # noqa: PLC0415 - only this call needs it

    conf = again_conf(start)
    body = {"logical_date": None, "conf": conf, "note": f"run again of {(start or {}).get('run_id')}"}
    url = f"{base_url.rstrip('/')}/api/v2/dags/{quote(dag_id, safe='')}/dagRuns"
    with httpx.Client(timeout=timeout_s) as client:
        r = client.post(url, json=body, headers={"Authorization": f"Bearer {token}"})
    if r.status_code >= 400:
        detail = r.json().get("detail") if r.headers.get("content-type", "").startswith("application/json") else ""
        raise AirflowApiError(
            f"POST dags/{dag_id}/dagRuns: HTTP {r.status_code} {detail or ''}".rstrip(), r.status_code
        )
    doc = r.json()
    return {"dag_run_id": doc.get("dag_run_id"), "state": doc.get("state"), "conf": conf}
