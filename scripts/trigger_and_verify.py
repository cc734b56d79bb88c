"""Trigger a DAG through Airflow's public REST API and check how the distributed run went.

Used by distributed_run.sh: it logs in (POST /auth/token), waits for the DAG to be parsed, unpauses
it, triggers a run with the given conf, waits (bounded) for a final state, then checks that the
mapped tasks ran on every named Celery worker, that work on different workers overlapped in time,
and that the run's report was published. Everything is read back through /api/v2, as an operator would.

usage: trigger_and_verify.py --base-url URL --user NAME --password-file FILE --dag bakeoff
           --conf '{"plan": "local-demo"}' --workers worker-a,worker-b --reports DIR [--timeout S]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from pathlib import Path

import httpx

FINAL_STATES = {"success", "failed"}


class Api:
    """A logged-in client for /api/v2 (the token is refreshed when it expires)."""

    def __init__(self, base_url: str, user: str, password: str) -> None:
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=30)
        self._user, self._password = user, password
        self._login()

    def _login(self) -> None:
        r = self._http.post("/auth/token", json={"username": self._user, "password": self._password})
        r.raise_for_status()
        self._http.headers["Authorization"] = f"Bearer {r.json()['access_token']}"

    def request(self, method: str, path: str, **kw) -> httpx.Response:
        r = self._http.request(method, "/api/v2" + path, **kw)
        if r.status_code == 401:
            self._login()
            r = self._http.request(method, "/api/v2" + path, **kw)
        return r

    def json(self, method: str, path: str, **kw) -> dict:
        r = self.request(method, path, **kw)
        if r.status_code >= 400:
            raise RuntimeError(f"{method} /api/v2{path} -> {r.status_code}: {r.text[:500]}")
        return r.json()


def wait_for_dag(api: Api, dag_id: str, deadline: float) -> None:
    """The dag-processor parses files on its own schedule; wait until the DAG is known and clean."""
    while time.monotonic() < deadline:
        errors = api.json("GET", "/importErrors").get("import_errors", [])
        if errors:
            raise RuntimeError("DAG import errors:\n" + "\n".join(e["stack_trace"][-2000:] for e in errors))
        if api.request("GET", f"/dags/{dag_id}").status_code == 200:
            return
        time.sleep(2)
    raise TimeoutError(f"DAG {dag_id!r} was not parsed in time; see the dag-processor log")


def trigger(api: Api, dag_id: str, conf: dict) -> str:
    api.json("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
    run = api.json("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf})
    return run["dag_run_id"]


def wait_for_run(api: Api, dag_id: str, run_id: str, deadline: float) -> str:
    state, last = "queued", None
    while time.monotonic() < deadline:
        state = api.json("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"]
        if state != last:
            print(f"  run {run_id}: {state}", flush=True)
            last = state
        if state in FINAL_STATES:
            return state
        time.sleep(3)
    raise TimeoutError(f"run {run_id} still {state!r} at the deadline")


def task_instances(api: Api, dag_id: str, run_id: str) -> list[dict]:
    return api.json("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 1000})["task_instances"]


def _ts(value: str | None) -> float | None:
    return datetime.fromisoformat(value).timestamp() if value else None


def overlapping_pairs(mapped: list[dict]) -> list[tuple[dict, dict]]:
    """Pairs of mapped task instances that ran at the same time on different workers."""
    spans = [(ti, _ts(ti["start_date"]), _ts(ti["end_date"])) for ti in mapped]
    spans = [s for s in spans if s[1] is not None and s[2] is not None]
    pairs = []
    for i, (a, a0, a1) in enumerate(spans):
        for b, b0, b1 in spans[i + 1 :]:
            if a["hostname"] != b["hostname"] and a0 < b1 and b0 < a1:
                pairs.append((a, b))
    return pairs


def check(tis: list[dict], workers: list[str]) -> list[str]:
    """Problems with the run's placement; empty when targets ran on every worker, in parallel."""
    mapped = [ti for ti in tis if ti["map_index"] >= 0 and ti["state"] == "success"]
    problems = []
    if not mapped:
        return ["no mapped task instance succeeded"]
    used = {ti["hostname"] for ti in mapped}
    missing = [w for w in workers if w not in used]
    if missing:
        problems.append(f"no mapped task ran on {', '.join(missing)} (ran on: {', '.join(sorted(used))})")
    if not overlapping_pairs(mapped):
        problems.append("no two mapped tasks on different workers overlapped in time")
    return problems


def placement_table(tis: list[dict]) -> str:
    """Which worker ran which target's tasks, in start order."""
    rows = sorted((ti for ti in tis if ti["map_index"] >= 0), key=lambda ti: (ti["map_index"], ti["start_date"] or ""))
    lines = [f"  {'target':<20} {'task':<28} {'worker':<12} {'state':<9} seconds"]
    for ti in rows:
        target = ti.get("rendered_map_index") or str(ti["map_index"])
        lines.append(
            f"  {target:<20} {ti['task_id']:<28} {ti['hostname'] or '-':<12} "
            f"{ti['state'] or '-':<9} {ti.get('duration') or 0:7.1f}"
        )
    return "\n".join(lines)


def published_report(reports: Path, run_id: str) -> list[Path]:
    """The files the publish step listed for this run (empty when it published nothing)."""
    from bakeoff.publish import list_published

    for run in list_published(reports):
        if run.get("run_id") == run_id:
            folder = reports / run["plan_dir"] / run["run_dir"]
            return sorted(folder / name for name in (run.get("files") or {}).values() if (folder / name).is_file())
    return []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument(
        "--password-file", required=True, type=Path, help="simple auth manager passwords JSON ({user: password})"
    )
    ap.add_argument("--dag", default="bakeoff")
    ap.add_argument("--conf", default="{}", type=json.loads)
    ap.add_argument("--workers", required=True, help="comma-separated worker hostnames that must all run targets")
    ap.add_argument("--reports", required=True, type=Path)
    ap.add_argument("--timeout", type=float, default=600, help="seconds for parse + run together")
    a = ap.parse_args(argv)

    deadline = time.monotonic() + a.timeout
    password = json.loads(a.password_file.read_text())[a.user]
    api = Api(a.base_url, a.user, password)
    wait_for_dag(api, a.dag, deadline)
    started = time.monotonic()
    run_id = trigger(api, a.dag, a.conf)
    print(f"triggered {a.dag} run {run_id} with conf {json.dumps(a.conf)}", flush=True)
    state = wait_for_run(api, a.dag, run_id, deadline)
    wall = time.monotonic() - started
    tis = task_instances(api, a.dag, run_id)
    print(f"\nDAG run {state} in {wall:.1f} s (trigger to final state)\n")
    print(placement_table(tis))
    for a_ti, b_ti in overlapping_pairs([t for t in tis if t["map_index"] >= 0])[:3]:
        print(
            f"  parallel: {a_ti['task_id']}[{a_ti.get('rendered_map_index')}] on {a_ti['hostname']}"
            f" overlapped {b_ti['task_id']}[{b_ti.get('rendered_map_index')}] on {b_ti['hostname']}"
        )

    problems = (
        []
        if state == "success"
        else [
            f"run ended {state}: "
            + ", ".join(
                f"{t['task_id']}[{t['map_index']}]={t['state']}"
                for t in tis
                if t["state"] not in ("success", "skipped")
            )
        ]
    )
    problems += check(tis, [w for w in a.workers.split(",") if w])
    found = published_report(a.reports, run_id)
    if any(p.suffix == ".html" for p in found):
        print(f"\nreport of {run_id} ({len(found)} files):")
        for p in found:
            print(f"  {p}")
    else:
        problems.append(f"no HTML report published for {run_id} under {a.reports}")
    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    if not problems:
        print(f"\nOK: distributed run passed in {wall:.1f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
