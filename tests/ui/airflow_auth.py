"""Requests to Airflow's own API app (create_app), in a fresh process over a fresh metadata database.

create_app mounts plugin apps exactly as the api-server does, with the configured auth manager
and its middlewares, so the status a request gets here is the one a deployed api-server answers.
Run as a script, this file is that process: a JSON spec on stdin (users, requests), a JSON list
of responses on stdout.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIMPLE = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
FAB = "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"


def migrated_home(base: Path, reports: Path, template: Path) -> dict:
    """Environment of a fresh Airflow home whose database is a copy of ``template`` (the session's
    migrated database with Airflow's and FAB's tables, tests/conftest.py's airflow_db)."""
    home = base / "airflow"
    home.mkdir(parents=True)
    shutil.copyfile(template, home / "airflow.db")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "BAKEOFF"))}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__DAGS_FOLDER": str(base / "no-dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__AUTH_MANAGER": FAB,
            "AIRFLOW__API_AUTH__JWT_SECRET": os.urandom(16).hex(),
            "BAKEOFF_REPORTS": str(reports),
            "PYTHONPATH": os.pathsep.join([str(ROOT / "include"), os.environ.get("PYTHONPATH", "")]),
        }
    )
    return env


def ask(env: dict, auth_manager: str, users: dict, requests: list[dict], tmp: Path) -> list[dict]:
    """Answers of create_app() to `requests`; `users`: name -> role (simple: viewer/user/op/admin;
    FAB: a built-in role name, or a list of [action, resource] permissions for a new role)."""
    env = dict(env, AIRFLOW__CORE__AUTH_MANAGER=auth_manager)
    db = tmp / "airflow.db"  # each call on its own copy: users created here stay here
    shutil.copy(Path(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///")), db)
    env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{db}"
    if auth_manager == SIMPLE:
        (tmp / "passwords.json").write_text(json.dumps({u: password(u) for u in users}))
        env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = ",".join(f"{u}:{r}" for u, r in users.items())
        env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] = str(tmp / "passwords.json")
    spec = json.dumps({"auth_manager": auth_manager, "users": users, "requests": requests})
    out = subprocess.run([sys.executable, __file__], input=spec, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def password(user: str) -> str:
    return f"{user}-test-password"


def _fab_users(users: dict) -> None:
    from airflow.api_fastapi.app import get_auth_manager

    am = get_auth_manager()
    with am.flask_app.app_context():
        sm = am.security_manager
        for name, role in users.items():
            if isinstance(role, list):
                new = sm.add_role(f"{name}-role")
                for action, resource in role:
                    sm.add_permission_to_role(new, sm.create_permission(action, resource))
                role = new
            else:
                role = sm.find_role(role)
            assert sm.add_user(name, name, name, f"{name}@example.com", role, password(name)), name


def _serve(spec: dict) -> list[dict]:
    from airflow.api_fastapi.app import create_app, get_auth_manager
    from fastapi.testclient import TestClient

    client = TestClient(create_app())
    if spec["auth_manager"] == FAB:
        _fab_users(spec["users"])
    tokens = {}
    for name in spec["users"]:
        r = client.post("/auth/token", json={"username": name, "password": password(name)})
        assert r.status_code == 201, (name, r.status_code, r.text)
        tokens[name] = r.json()["access_token"]
        user = asyncio.run(get_auth_manager().get_user_from_token(tokens[name]))
        tokens[f"{name}:expired"] = get_auth_manager().generate_jwt(user, expiration_time_in_seconds=-300)
    answers = []
    for req in spec["requests"]:
        token = tokens.get(req.get("as", ""), req.get("token"))
        client.cookies.clear()
        headers = {}
        if token is not None and req.get("via") == "cookie":
            client.cookies.set("_token", token)
        elif token is not None:
            headers["Authorization"] = f"Bearer {token}"
        r = client.get(req["path"], headers=headers)
        kind = r.headers.get("content-type", "")
        body = r.text if kind.startswith(("text/", "application/json")) else r.content[:8].decode("latin-1")
        answers.append({"status": r.status_code, "type": kind, "body": body})
    return answers


if __name__ == "__main__":
    result = _serve(json.load(sys.stdin))
    print(json.dumps(result))
