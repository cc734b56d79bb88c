"""Trigger a DAG through Airflow's public REST API and check how the distributed run went.

Used by distributed_run.sh: it logs in (POST /auth/token), waits for the DAG to be parsed, unpauses
it, triggers a run with the given conf, waits (bounded) for a final state, then checks that the
mapped tasks ran on every named Celery worker, that work on different workers overlapped in time,
that every target's benchmark overlapped every other's, that a client fleet's members ran on every
named client worker (the points' client_hosts), that the run's report was published to
the reports store (read back from there, e.g. S3), and that no worker's own data folder holds a
result. Task instances are read through /api/v2, as an operator would; the sensors' pokes, which
the API does not show, from the results store (see run_timeline.py). It prints the DAG run's wall
time and the per-target timeline with the worker-slot time each target held.

usage: trigger_and_verify.py --base-url URL --user NAME --password-file FILE --dag bakeoff
           --conf '{"plan": "distributed-three-sandbox"}' --workers worker-a,worker-b
           --results URL --reports URL [--client-workers clients-a,clients-b] [--worker-data DIR,DIR]
           [--timeout S]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import httpx
from run_timeline import FAIL_PCT, GOAL_PCT, common_overlap, table, timelines, ts, waited

from bakeoff.paths import at, run_folder
from bakeoff.publishing.publish import list_published
from bakeoff.run.worker_time import SLOTS
from bakeoff.store import read_frame, read_json

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


def overlapping_pairs(mapped: list[dict]) -> list[tuple[dict, dict]]:
    """Pairs of mapped task instances that ran at the same time on different workers."""
    spans = [(ti, ts(ti["start_date"]), ts(ti["end_date"])) for ti in mapped]
    spans = [s for s in spans if s[1] is not None and s[2] is not None]
    pairs = []
    for i, (a, a0, a1) in enumerate(spans):
        for b, b0, b1 in spans[i + 1 :]:
            if a["hostname"] != b["hostname"] and a0 < b1 and b0 < a1:
                pairs.append((a, b))
    return pairs


def check(tis: list[dict], workers: list[str]) -> list[str]:
    """Problems with the run's placement and its grid; empty when targets ran on every worker, in
    parallel, as the map indexes of one task group, each labelled with its target."""
    mapped = [ti for ti in tis if ti["map_index"] >= 0 and ti["state"] == "success"]
    problems = []
    if not mapped:
        return ["no mapped task instance succeeded"]
    groups = sorted({ti["task_id"].split(".", 1)[0] for ti in mapped})
    if len(groups) != 1:
        problems.append(f"the targets ran in {len(groups)} task groups ({', '.join(groups)}), not one")
    labels = {ti["map_index"]: ti.get("rendered_map_index") for ti in mapped}
    if any(not label or label == str(i) for i, label in labels.items()) or len(set(labels.values())) != len(labels):
        problems.append(f"the map indexes are not each labelled with a target of their own: {labels}")
    used = {ti["hostname"] for ti in mapped}
    missing = [w for w in workers if w not in used]
    if missing:
        problems.append(f"no mapped task ran on {', '.join(missing)} (ran on: {', '.join(sorted(used))})")
    if not overlapping_pairs(mapped):
        problems.append("no two mapped tasks on different workers overlapped in time")
    return problems


def published_report(reports: str | Path, run_id: str) -> list:
    """The files the publish step listed for this run, in the reports store (empty when it published nothing)."""
    for run in list_published(reports):
        if run.get("run_id") == run_id:
            folder = at(reports) / run["plan_dir"] / run["run_dir"]
            return sorted(
                (folder / name for name in (run.get("files") or {}).values() if (folder / name).is_file()), key=str
            )
    return []


# the DAG's sensors and the library check each poke calls (bakeoff.run.worker_time records each call's worker time)
SENSOR_CHECKS = {
    "node_slot": "wait_slot",
    "node_ready": "wait_node",
    "serving_ready": "wait_serving",
    "benchmark_done": "wait_benchmark",
}


def poke_spans(results: str | Path, run_id: str) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(sensor step, target) -> each poke's check (start, end), from the worker-time records the
    checks write into the run's folder of the results store."""
    spans: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for f in at(results).glob(f"*/run_id={run_folder(run_id)}/target=*/{SLOTS}/*.json"):
        rec = read_json(f) or {}
        sensor = SENSOR_CHECKS.get(rec.get("task", ""))
        if sensor:
            target = f.parent.parent.name.split("=", 1)[1]
            spans.setdefault((sensor, target), []).append((float(rec["started_at"]), float(rec["ended_at"])))
    return spans


def fleet_hosts(results: str | Path, run_id: str) -> dict[str, set[str]]:
    """target -> the client workers its fleet's members ran on, from its points' client_hosts."""
    hosts: dict[str, set[str]] = {}
    for f in at(results).glob(f"*/run_id={run_folder(run_id)}/target=*/points/*.parquet"):
        frame = read_frame(f)
        if "client_hosts" not in frame:
            continue
        target = f.parent.parent.name.split("=", 1)[1]
        for joined in frame["client_hosts"].dropna():
            found = {h for h in str(joined).split("+") if h}
            if found:
                hosts.setdefault(target, set()).update(found)
    return hosts


def fleet_problems(hosts: dict[str, set[str]], client_workers: list[str]) -> list[str]:
    """Empty when some target's fleet ran members on every named client worker (name@host or host)."""
    for target, seen in hosts.items():
        names = {part for h in seen for part in h.split("@")}
        if all(w in names for w in client_workers):
            print(f"\nclient fleet of {target}: members ran on {', '.join(sorted(seen))}")
            return []
    return [f"no target's client fleet ran on every client worker {client_workers}: {hosts or 'no fleet points'}"]


def results_left_on(folders: list[Path]) -> list[Path]:
    """Result files (Parquet points, JSON step records) under the workers' own data folders: none
    should be there when results live in object storage."""
    return sorted(
        p
        for folder in folders
        for p in folder.rglob("*")
        if p.is_file() and (p.suffix == ".parquet" or "run_id=" in str(p.relative_to(folder)))
    )


# a co-located job: submitted (benchmark) .. its sensor's done (wait_benchmark); a client on the
# worker measures inside the benchmark step itself
BENCHMARK_STEPS = ("benchmark", "wait_benchmark")


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
    ap.add_argument("--results", required=True, help="the results store (BAKEOFF_RESULTS: a URL or a folder)")
    ap.add_argument("--reports", required=True, help="the reports store (BAKEOFF_REPORTS: a URL or a folder)")
    ap.add_argument(
        "--client-workers", default="", help="comma-separated client workers a client fleet's members must all run on"
    )
    ap.add_argument("--worker-data", default="", help="comma-separated data folders of the workers (hold no result)")
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
    run = api.json("GET", f"/dags/{a.dag}/dagRuns/{run_id}")
    tis = task_instances(api, a.dag, run_id)
    t0, t1 = ts(run.get("start_date")), ts(run.get("end_date"))
    ran = f"{t1 - t0:.1f} s from its start to its end, " if t0 and t1 else ""
    print(f"\nDAG run {state}: {ran}{wall:.1f} s from trigger to final state\n")
    grid = sorted({(t["task_id"].split(".", 1)[0], t.get("rendered_map_index")) for t in tis if t["map_index"] >= 0})
    print(f"  grid: task group / map index label: {', '.join(f'{g}[{label}]' for g, label in grid)}")
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

    lines = timelines(tis, poke_spans(a.results, run_id))
    print("\nper-target timeline (seconds from the DAG run's start; held = worker-slot seconds):\n")
    print(table(lines, t0 or min((t.start for t in lines), default=0.0)))
    windows = {t.target: t.window(*BENCHMARK_STEPS) for t in lines}
    together = common_overlap(windows)
    print(f"\nbenchmarks of all {len(windows)} targets running at once: {together:.1f} s")
    if len(windows) < 2 or together <= 0:  # a missing window (a target without a benchmark) counts as 0
        problems.append(f"the targets' benchmarks did not all overlap in time: {windows}")
    for t in lines:
        pct = t.waits_held_pct
        if not waited(t):  # e.g. a client on the worker: its long step is a task, each sensor done at its first look
            print(f"{t.target}: no sensor had to look twice, so no wait whose slot could be freed (not judged)")
        elif pct is not None and pct > FAIL_PCT:
            problems.append(
                f"{t.target}: pokes held {pct:.1f} % of its {t.wait:.0f} s of waits "
                f"(goal {GOAL_PCT:g} %, failing above {FAIL_PCT:g} %)"
            )

    client_workers = [w for w in a.client_workers.split(",") if w]
    if client_workers:
        problems += fleet_problems(fleet_hosts(a.results, run_id), client_workers)

    found = published_report(a.reports, run_id)
    html = next((p for p in found if p.suffix == ".html"), None)
    if html is not None and b"<html" in html.read_bytes()[:4096].lower():
        print(f"\nreport of {run_id}, read back from {a.reports} ({len(found)} files):")
        for p in found:
            print(f"  {p}")
    else:
        problems.append(f"no HTML report published for {run_id} in {a.reports}")
    stray = results_left_on([Path(d) for d in a.worker_data.split(",") if d])
    if stray:
        problems.append(f"results written to a worker's own data folder: {', '.join(map(str, stray[:5]))}")

    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    if not problems:
        print(f"\nOK: distributed run passed in {wall:.1f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
