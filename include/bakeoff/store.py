"""Results store: Parquet tables and JSON documents under results_root(), local or in object storage.

Layout, partitioned by run and target (hive-style, so pandas/pyarrow read a whole run at once):
  <root>/<plan>/run_id=<run>/plan.json                      the resolved plan
  <root>/<plan>/run_id=<run>/steps/<step>.json              a run-level step's facts (start, sweep, ...)
  <root>/<plan>/run_id=<run>/target=<slug>/steps/<step>.json  a target step's facts (provision, deploy, ...)
  <root>/<plan>/run_id=<run>/target=<slug>/requests/<workload>-c<C>-r<R>.parquet
  <root>/<plan>/run_id=<run>/target=<slug>/points/<workload>-c<C>-r<R>.parquet
  <root>/<plan>/run_id=<run>/target=<slug>/<name>.json      instance, endpoint, provenance, gates
  <root>/<plan>/run_id=<run>/<name>.json / <name>.parquet   run-level outputs (validation, cost)
Each point is its own file, so nothing measured is lost when a later point or step fails. Each step
writes its own record once (a retry overwrites its own, nobody else's), so workers on several hosts
share a run with no lock; ``run_facts`` reads them back as one typed run (``facts.RunFacts``). Whether a run is still
going is Airflow's to say (the DAG run's state), not the store's.

Paths are ``airflow.sdk.ObjectStoragePath`` (``store.at`` makes one from the strings tasks pass);
a pathlib path passes through unchanged, which is what the serving node's client (no Airflow) hands.
"""

from __future__ import annotations

import io
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from bakeoff import durable
from bakeoff.core.facts import RunFacts

# re-exported: the store's callers name paths through it (store.at, store.StorePath, store.safe_name)
from bakeoff.paths import StorePath as StorePath
from bakeoff.paths import at as at
from bakeoff.paths import fresh as fresh
from bakeoff.paths import results_root as results_root
from bakeoff.paths import run_folder
from bakeoff.paths import safe_name as safe_name

STEPS = "steps"
START = "start"


def json_depth(value: object, limit: int) -> int:
    """How deep a parsed JSON document nests, counted without recursion (an untrusted document may
    nest deeper than Python's stack) and given up just past ``limit``."""
    stack, deepest = [(value, 1)], 0
    while stack:
        v, d = stack.pop()
        if d > limit:
            return d
        deepest = max(deepest, d)
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return deepest


def run_dir(plan_name: str, run_id: str, root: str | StorePath | None = None) -> StorePath:
    return at(root or results_root()) / safe_name(plan_name) / f"run_id={run_folder(run_id)}"


def target_dir(plan_name: str, run_id: str, target_slug: str, root: str | StorePath | None = None) -> StorePath:
    return run_dir(plan_name, run_id, root) / f"target={safe_name(target_slug)}"


def write_bytes(path: str | StorePath, data: bytes) -> StorePath:
    path = at(path)
    durable.write_atomic(path, data)
    return path


def write_json(path: str | StorePath, obj: object) -> StorePath:
    return write_bytes(path, json.dumps(obj, indent=2, sort_keys=True, default=str).encode())


def read_bytes(path: str | StorePath) -> bytes | None:
    path = at(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def read_json(path: str | StorePath, default: object = None) -> Any:
    data = read_bytes(path)
    return default if data is None else json.loads(data)


def write_frame(path: str | StorePath, df: pd.DataFrame) -> StorePath:
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return write_bytes(path, buf.getvalue())


def read_frame(path: str | StorePath, columns: list[str] | None = None) -> pd.DataFrame:
    """One Parquet file. Arrow reads a local file by its path, and an object's bytes from memory:
    handing it an open Python file lets its I/O threads call back into Python, and a process that
    then exits could abort ("terminate called without an active exception")."""
    path = at(path)
    if durable.is_local(path):  # ObjectStoragePath on file:// names its local path in .path
        # an ObjectStoragePath on local disk by its plain path (pyarrow reads it faster); a string as given
        return pd.read_parquet(getattr(path, "path", None) or str(path), columns=columns)
    return pd.read_parquet(io.BytesIO(path.read_bytes()), columns=columns)


def point_file(tdir: str | StorePath, kind: str, workload: str, concurrency: int, repeat: int) -> StorePath:
    return at(tdir) / kind / f"{safe_name(workload)}-c{concurrency}-r{repeat}.parquet"


def save_point(
    tdir: str | StorePath,
    workload: str,
    concurrency: int,
    repeat: int,
    requests: pd.DataFrame,
    summary: dict[str, Any],
) -> None:
    """Persist one measured point: its raw requests first, then its summary row."""
    write_frame(point_file(tdir, "requests", workload, concurrency, repeat), requests)
    write_frame(point_file(tdir, "points", workload, concurrency, repeat), pd.DataFrame([summary]))


def _glob(folder: StorePath, pattern: str) -> list[StorePath]:
    """Matches sorted by path (file systems list in different orders)."""
    found: list[StorePath] = list(folder.glob(pattern))
    return sorted(found, key=str)


def _concat(files: list[StorePath]) -> pd.DataFrame:
    frames = [read_frame(f) for f in files]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load_requests(rdir: str | StorePath) -> pd.DataFrame:
    return _concat(_glob(fresh(at(rdir)), "target=*/requests/*.parquet"))


def load_points(rdir: str | StorePath) -> pd.DataFrame:
    return _concat(_glob(fresh(at(rdir)), "target=*/points/*.parquet"))


# --- step records -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepRecord:
    """What one step found, written once by that step: ``target`` is None for a run-level step."""

    step: str
    facts: dict[str, Any]
    target: str | None = None
    recorded_at: float = field(default_factory=time.time)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> StepRecord:
        return cls(doc["step"], dict(doc.get("facts") or {}), doc.get("target"), float(doc.get("recorded_at") or 0))


def record_path(rdir: str | StorePath, step: str, slug: str | None = None) -> StorePath:
    base = at(rdir) if slug is None else at(rdir) / f"target={safe_name(slug)}"
    return base / STEPS / f"{safe_name(step)}.json"


def record(rdir: str | StorePath, step: str, facts: dict[str, Any], slug: str | None = None) -> StorePath:
    """Write a step's facts as its own record (run-level, or the target ``slug``'s); a retry of the
    step replaces its earlier record and touches no other."""
    rec = StepRecord(step, dict(facts), slug)
    return write_json(record_path(rdir, step, slug), asdict(rec))


def create_record(rdir: str | StorePath, step: str, facts: dict[str, Any]) -> StorePath:
    """Write a run-level record that must be written once (the start record): ``FileExistsError`` if
    one is already there, so a second run can never take over a run's folder."""
    path = record_path(rdir, step)
    rec = StepRecord(step, dict(facts), None)
    durable.write_new(path, json.dumps(asdict(rec), indent=2, sort_keys=True, default=str).encode())
    return path


def read_record(rdir: str | StorePath, step: str, slug: str | None = None) -> dict[str, Any] | None:
    """One step's facts, or None when the step has not recorded any."""
    doc = read_json(record_path(rdir, step, slug))
    return StepRecord.from_dict(doc).facts if doc else None


def _records(folder: StorePath) -> dict[str, dict[str, Any]]:
    out = {}
    for f in _glob(folder, f"{STEPS}/*.json"):
        doc = read_json(f)
        if doc:
            rec = StepRecord.from_dict(doc)
            out[rec.step] = rec.facts
    return out


def run_facts(rdir: str | StorePath) -> RunFacts:
    """The run's step records as typed facts (``bakeoff.core.facts``), each checked as it is read: the one
    reader of a run (an empty ``RunFacts`` when it was never started here)."""
    rdir = fresh(at(rdir))
    targets = {tdir.name.split("=", 1)[1]: _records(tdir) for tdir in _glob(rdir, "target=*")}
    return RunFacts.from_records(_records(rdir), targets, where=str(rdir))


def list_runs(plan_name: str | None = None, root: str | StorePath | None = None) -> list[RunFacts]:
    """Every stored run (newest first), from their start records: the history trends read."""
    base = fresh(at(root or results_root()))
    pattern = (
        f"{safe_name(plan_name)}/run_id=*/{STEPS}/{START}.json" if plan_name else f"*/run_id=*/{STEPS}/{START}.json"
    )
    runs = [run_facts(f.parent.parent) for f in _glob(base, pattern)]
    return sorted(runs, key=lambda r: r.start.started_at or 0, reverse=True)
